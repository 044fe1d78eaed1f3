//! The structural schema of one CRD version, parsed from `openAPIV3Schema` into a tree the
//! validator walks: types, value validations, Kubernetes extensions and the compiled CEL rules.

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::Value;

use super::SchemaError;
use super::cel_rules::CompiledRule;

/// One `x-kubernetes-validations` entry as written in the CRD.
#[derive(Debug, Clone, Default)]
pub(crate) struct RuleSpec {
    pub rule: String,
    pub message: Option<String>,
    pub message_expression: Option<String>,
    pub field_path: Option<String>,
    pub reason: Option<String>,
    pub optional_old_self: bool,
}

/// A node of the structural schema.
#[derive(Debug, Clone, Default)]
pub(crate) struct Schema {
    pub ty: Option<String>,
    pub nullable: bool,
    pub format: Option<String>,
    pub properties: BTreeMap<String, Schema>,
    /// `additionalProperties: {schema}` (a map)
    pub additional: Option<Box<Schema>>,
    /// `additionalProperties: false`
    pub additional_forbidden: bool,
    pub items: Option<Box<Schema>>,
    pub required: Vec<String>,
    pub enum_values: Option<Vec<Value>>,
    pub pattern: Option<(String, Regex)>,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub exclusive_minimum: bool,
    pub exclusive_maximum: bool,
    pub multiple_of: Option<f64>,
    pub min_length: Option<i64>,
    pub max_length: Option<i64>,
    pub min_items: Option<i64>,
    pub max_items: Option<i64>,
    pub unique_items: bool,
    pub min_properties: Option<i64>,
    pub max_properties: Option<i64>,
    pub default: Option<Value>,
    pub preserve_unknown: bool,
    pub int_or_string: bool,
    pub embedded_resource: bool,
    pub list_type: Option<String>,
    pub list_map_keys: Vec<String>,
    pub map_type: Option<String>,
    pub all_of: Vec<Schema>,
    pub any_of: Vec<Schema>,
    pub one_of: Vec<Schema>,
    pub not: Option<Box<Schema>>,
    pub rule_specs: Vec<RuleSpec>,
    /// filled by the CEL compiler, same order as `rule_specs`
    pub rules: Vec<CompiledRule>,
    /// whether this node or a descendant has rules (set by the CEL compiler)
    pub has_rules: bool,
}

impl Schema {
    /// Parses a schema node; `path` names it in errors (`^.spec.replicas`).
    pub(crate) fn parse(v: &Value, path: &str, errors: &mut Vec<SchemaError>) -> Schema {
        let mut s = Schema::default();
        let Some(obj) = v.as_object() else {
            errors.push(SchemaError { path: path.into(), message: "schema must be an object".into() });
            return s;
        };
        let str_of = |k: &str| obj.get(k).and_then(Value::as_str).map(str::to_string);
        let int_of = |k: &str| obj.get(k).and_then(Value::as_i64);
        let f_of = |k: &str| obj.get(k).and_then(Value::as_f64);
        let bool_of = |k: &str| obj.get(k).and_then(Value::as_bool).unwrap_or(false);

        s.ty = str_of("type");
        s.nullable = bool_of("nullable");
        s.format = str_of("format").filter(|f| !f.is_empty());
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (k, pv) in props {
                s.properties.insert(k.clone(), Schema::parse(pv, &format!("{path}.properties[{k}]"), errors));
            }
        }
        match obj.get("additionalProperties") {
            Some(Value::Bool(false)) => s.additional_forbidden = true,
            Some(ap @ Value::Object(_)) => {
                s.additional = Some(Box::new(Schema::parse(ap, &format!("{path}.additionalProperties"), errors)))
            }
            _ => {}
        }
        if let Some(items) = obj.get("items") {
            if items.is_object() {
                s.items = Some(Box::new(Schema::parse(items, &format!("{path}.items"), errors)));
            } else {
                errors.push(SchemaError {
                    path: format!("{path}.items"),
                    message: "items must be a schema (tuple items are not structural)".into(),
                });
            }
        }
        s.required = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        s.enum_values = obj.get("enum").and_then(Value::as_array).cloned();
        if let Some(p) = str_of("pattern") {
            match Regex::new(&p) {
                Ok(re) => s.pattern = Some((p, re)),
                Err(e) => errors.push(SchemaError {
                    path: format!("{path}.pattern"),
                    message: format!("pattern {p:?} does not compile: {e}"),
                }),
            }
        }
        s.minimum = f_of("minimum");
        s.maximum = f_of("maximum");
        s.exclusive_minimum = bool_of("exclusiveMinimum");
        s.exclusive_maximum = bool_of("exclusiveMaximum");
        s.multiple_of = f_of("multipleOf");
        s.min_length = int_of("minLength");
        s.max_length = int_of("maxLength");
        s.min_items = int_of("minItems");
        s.max_items = int_of("maxItems");
        s.unique_items = bool_of("uniqueItems");
        s.min_properties = int_of("minProperties");
        s.max_properties = int_of("maxProperties");
        s.default = obj.get("default").cloned();
        s.preserve_unknown = bool_of("x-kubernetes-preserve-unknown-fields");
        s.int_or_string = bool_of("x-kubernetes-int-or-string");
        s.embedded_resource = bool_of("x-kubernetes-embedded-resource");
        s.list_type = str_of("x-kubernetes-list-type");
        s.list_map_keys = obj
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        s.map_type = str_of("x-kubernetes-map-type");
        for (key, dst) in [("allOf", &mut s.all_of), ("anyOf", &mut s.any_of), ("oneOf", &mut s.one_of)] {
            if let Some(list) = obj.get(key).and_then(Value::as_array) {
                for (i, sub) in list.iter().enumerate() {
                    dst.push(Schema::parse(sub, &format!("{path}.{key}[{i}]"), errors));
                }
            }
        }
        if let Some(not) = obj.get("not") {
            s.not = Some(Box::new(Schema::parse(not, &format!("{path}.not"), errors)));
        }
        if let Some(rules) = obj.get("x-kubernetes-validations").and_then(Value::as_array) {
            for r in rules {
                let get = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_string).filter(|s| !s.is_empty());
                s.rule_specs.push(RuleSpec {
                    rule: get("rule").unwrap_or_default(),
                    message: get("message"),
                    message_expression: get("messageExpression"),
                    field_path: get("fieldPath"),
                    reason: get("reason"),
                    optional_old_self: r.get("optionalOldSelf").and_then(Value::as_bool).unwrap_or(false),
                });
            }
        }
        if s.list_type.as_deref() == Some("map") && s.list_map_keys.is_empty() {
            errors.push(SchemaError {
                path: path.into(),
                message: "x-kubernetes-list-map-keys must be set when x-kubernetes-list-type is map".into(),
            });
        }
        s
    }

    /// The `type` kube-apiserver reports for this node (`object`, `array`, `string`, ...).
    pub(crate) fn type_name(&self) -> &str {
        if self.int_or_string {
            return "";
        }
        self.ty.as_deref().unwrap_or("")
    }

    /// Number of `x-kubernetes-validations` rules in this subtree.
    pub(crate) fn count_rules(&self) -> usize {
        self.rule_specs.len()
            + self.properties.values().map(Schema::count_rules).sum::<usize>()
            + self.additional.as_ref().map_or(0, |s| s.count_rules())
            + self.items.as_ref().map_or(0, |s| s.count_rules())
            + self.all_of.iter().map(Schema::count_rules).sum::<usize>()
    }
}
