//! Parsing `spec.config` (a YAML string, DEP-05) into typed configs with errors that name the field.
//!
//! The YAML is read into a JSON value first and then walked field by field, so an unknown key or a wrong
//! type is reported as `config.maintenanceType.etcdCompaction: expected a boolean, found string "yes"`.

use serde_json::{Map, Value};

/// What is wrong with a config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Not YAML at all.
    #[error("config is not valid YAML: {0}")]
    Yaml(String),
    /// A key the schema does not have.
    #[error("{path}: unknown field (allowed: {})", allowed.join(", "))]
    UnknownField {
        /// Path of the field, e.g. `config.extra`.
        path: String,
        /// The fields allowed there.
        allowed: Vec<String>,
    },
    /// A required key is missing.
    #[error("{path}: required field is missing")]
    Missing {
        /// Path of the field.
        path: String,
    },
    /// A value of the wrong type or out of range.
    #[error("{path}: expected {expected}, found {found}")]
    WrongType {
        /// Path of the field.
        path: String,
        /// What the schema wants.
        expected: String,
        /// What was given.
        found: String,
    },
    /// The type takes no config but one was given.
    #[error("this task type takes no config, found {0}")]
    Unexpected(String),
}

fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "a mapping".into(),
    }
}

/// Parses the config string; `None`, empty or `null` give an empty mapping.
pub fn parse_yaml(config: Option<&str>) -> Result<Value, ConfigError> {
    let text = config.unwrap_or("").trim();
    if text.is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let v: Value = serde_saphyr::from_str(text).map_err(|e| ConfigError::Yaml(e.to_string()))?;
    Ok(if v.is_null() { Value::Object(Map::new()) } else { v })
}

/// Requires an empty config (types that take none).
pub fn expect_none(config: Option<&str>) -> Result<(), ConfigError> {
    let v = parse_yaml(config)?;
    match v.as_object() {
        Some(m) if m.is_empty() => Ok(()),
        _ => Err(ConfigError::Unexpected(describe(&v))),
    }
}

/// A mapping at `path` whose keys are checked against the schema.
pub struct Fields<'a> {
    path: String,
    map: &'a Map<String, Value>,
}

impl<'a> Fields<'a> {
    /// `value` must be a mapping with only the `allowed` keys.
    pub fn new(value: &'a Value, path: &str, allowed: &[&str]) -> Result<Fields<'a>, ConfigError> {
        let map = value.as_object().ok_or_else(|| ConfigError::WrongType {
            path: path.to_string(),
            expected: "a mapping".into(),
            found: describe(value),
        })?;
        if let Some(k) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(ConfigError::UnknownField {
                path: format!("{path}.{k}"),
                allowed: allowed.iter().map(|s| s.to_string()).collect(),
            });
        }
        Ok(Fields { path: path.to_string(), map })
    }

    fn field_path(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }

    fn wrong(&self, key: &str, expected: &str, v: &Value) -> ConfigError {
        ConfigError::WrongType { path: self.field_path(key), expected: expected.into(), found: describe(v) }
    }

    /// The raw value of `key`, if present and not null.
    pub fn value(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// A required value.
    pub fn required(&self, key: &str) -> Result<&'a Value, ConfigError> {
        self.value(key).ok_or_else(|| ConfigError::Missing { path: self.field_path(key) })
    }

    /// An optional boolean.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        self.value(key).map(|v| v.as_bool().ok_or_else(|| self.wrong(key, "a boolean", v))).transpose()
    }

    /// An optional string.
    pub fn string(&self, key: &str) -> Result<Option<String>, ConfigError> {
        self.value(key)
            .map(|v| v.as_str().map(str::to_string).ok_or_else(|| self.wrong(key, "a string", v)))
            .transpose()
    }

    /// A required string from a fixed set.
    pub fn one_of(&self, key: &str, choices: &[&str]) -> Result<String, ConfigError> {
        let v = self.required(key)?;
        match v.as_str() {
            Some(s) if choices.contains(&s) => Ok(s.to_string()),
            _ => Err(self.wrong(key, &format!("one of {}", choices.join(", ")), v)),
        }
    }

    /// An optional non-negative 32-bit integer.
    pub fn u32(&self, key: &str) -> Result<Option<u32>, ConfigError> {
        self.value(key)
            .map(|v| {
                v.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| self.wrong(key, "a non-negative integer", v))
            })
            .transpose()
    }

    /// A nested mapping with its own allowed keys.
    pub fn nested(&self, key: &str, allowed: &[&str]) -> Result<Option<Fields<'a>>, ConfigError> {
        self.value(key).map(|v| Fields::new(v, &self.field_path(key), allowed)).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_null_configs_are_empty_mappings() {
        for c in [None, Some(""), Some("  \n"), Some("null"), Some("~")] {
            assert_eq!(parse_yaml(c).unwrap(), serde_json::json!({}), "{c:?}");
        }
        assert!(expect_none(Some("a: 1")).is_err());
    }

    #[test]
    fn errors_name_the_field() {
        let v = parse_yaml(Some("a:\n  b: yes-please\n  c: 1\n")).unwrap();
        let root = Fields::new(&v, "config", &["a"]).unwrap();
        let a = root.nested("a", &["b", "c"]).unwrap().unwrap();
        let e = a.bool("b").unwrap_err().to_string();
        assert_eq!(e, "config.a.b: expected a boolean, found string \"yes-please\"");
        let e = Fields::new(&v, "config", &["x"]).err().unwrap().to_string();
        assert_eq!(e, "config.a: unknown field (allowed: x)");
        assert_eq!(a.u32("c").unwrap(), Some(1));
        assert!(matches!(parse_yaml(Some("a: [")), Err(ConfigError::Yaml(_))));
    }
}
