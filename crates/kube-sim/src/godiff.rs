//! The object diffs kube-apiserver writes into some validation messages, word for word.
//!
//! `ValidatePersistentVolumeClaimUpdate` (kubernetes `pkg/apis/core/validation/validation.go`) appends, to its
//! "spec is immutable after creation …" cause, a diff of the old and the new claim spec with apimachinery's
//! `diff.Diff` (`k8s.io/apimachinery/pkg/util/diff`): both specs as the *internal* Go types marshalled by
//! `encoding/json` with one-space indentation (the internal types have no JSON tags, so the keys are the Go
//! field names, in declaration order), compared as lines by a unified diff with three lines of context and no
//! file header (the real server's answer: `@@ -6,7 +6,7 @@` followed by ` "Resources": {` …). The line diff
//! is the maintained `similar` crate's, which follows difflib's hunk format.

use serde_json::Value;

/// `old` and `new` (each a Go `encoding/json` text) as `diff.Diff` writes them.
pub fn unified(old: &str, new: &str) -> String {
    // difflib's `SplitLines` ends the last line with a newline too.
    let (old, new) = (format!("{old}\n"), format!("{new}\n"));
    similar::TextDiff::from_lines(&old, &new).unified_diff().context_radius(3).to_string()
}

/// A persistent volume claim's `spec` (external JSON) as the internal `core.PersistentVolumeClaimSpec` marshals
/// with `json.MarshalIndent(spec, "", " ")`.
pub fn pvc_spec(spec: &Value) -> String {
    let get = |k: &str| spec.get(k).cloned().unwrap_or(Value::Null);
    let resources = spec.get("resources").cloned().unwrap_or(Value::Null);
    let data_source = |v: Value, with_namespace: bool| -> Go {
        if v.is_null() {
            return Go::Raw(Value::Null);
        }
        let mut fields = vec![
            ("APIGroup", Go::Raw(v.get("apiGroup").cloned().unwrap_or(Value::Null))),
            ("Kind", Go::string(&v, "kind")),
            ("Name", Go::string(&v, "name")),
        ];
        if with_namespace {
            fields.push(("Namespace", Go::Raw(v.get("namespace").cloned().unwrap_or(Value::Null))));
        }
        Go::Struct(fields)
    };
    let go = Go::Struct(vec![
        ("AccessModes", Go::Raw(get("accessModes"))),
        ("Selector", Go::Raw(get("selector"))),
        (
            "Resources",
            Go::Struct(vec![
                ("Limits", Go::Raw(resources.get("limits").cloned().unwrap_or(Value::Null))),
                ("Requests", Go::Raw(resources.get("requests").cloned().unwrap_or(Value::Null))),
            ]),
        ),
        ("VolumeName", Go::string(spec, "volumeName")),
        ("StorageClassName", Go::Raw(get("storageClassName"))),
        ("VolumeMode", Go::Raw(get("volumeMode"))),
        ("DataSource", data_source(get("dataSource"), false)),
        ("DataSourceRef", data_source(get("dataSourceRef"), true)),
        ("VolumeAttributesClassName", Go::Raw(get("volumeAttributesClassName"))),
    ]);
    let mut out = String::new();
    go.write(&mut out, 0);
    out
}

/// A value as `encoding/json` marshals it: a Go struct (fields in declaration order) or a JSON value (maps
/// with their keys sorted, as Go sorts map keys, and external types whose JSON is the API's).
enum Go {
    Struct(Vec<(&'static str, Go)>),
    Raw(Value),
}

impl Go {
    /// A string field: `""` when absent (a Go string is never null).
    fn string(v: &Value, key: &str) -> Go {
        Go::Raw(Value::String(v.get(key).and_then(Value::as_str).unwrap_or_default().to_string()))
    }

    fn write(&self, out: &mut String, depth: usize) {
        match self {
            Go::Struct(fields) => {
                out.push('{');
                for (i, (name, value)) in fields.iter().enumerate() {
                    out.push_str(if i == 0 { "\n" } else { ",\n" });
                    indent(out, depth + 1);
                    out.push_str(&go_string(name));
                    out.push_str(": ");
                    value.write(out, depth + 1);
                }
                if !fields.is_empty() {
                    out.push('\n');
                    indent(out, depth);
                }
                out.push('}');
            }
            Go::Raw(v) => write_value(out, v, depth),
        }
    }
}

fn indent(out: &mut String, depth: usize) {
    out.extend(std::iter::repeat_n(' ', depth));
}

/// `v` as `json.MarshalIndent(v, "", " ")` writes it at `depth`.
fn write_value(out: &mut String, v: &Value, depth: usize) {
    match v {
        Value::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                out.push_str(if i == 0 { "\n" } else { ",\n" });
                indent(out, depth + 1);
                write_value(out, item, depth + 1);
            }
            out.push('\n');
            indent(out, depth);
            out.push(']');
        }
        Value::Object(map) if !map.is_empty() => {
            // serde_json's map is sorted by key, as Go writes map keys.
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                out.push_str(if i == 0 { "\n" } else { ",\n" });
                indent(out, depth + 1);
                out.push_str(&go_string(k));
                out.push_str(": ");
                write_value(out, item, depth + 1);
            }
            out.push('\n');
            indent(out, depth);
            out.push('}');
        }
        Value::String(s) => out.push_str(&go_string(s)),
        other => out.push_str(&other.to_string()),
    }
}

/// A string as `encoding/json` quotes it: HTML characters escaped as `\u003c`, `\u003e` and `\u0026`, and
/// U+2028 and U+2029 escaped, beside what JSON requires.
fn go_string(s: &str) -> String {
    let quoted = Value::String(s.to_string()).to_string();
    quoted
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_changed_request_is_the_real_servers_hunk() {
        let old = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
            "volumeMode": "Filesystem"});
        let mut new = old.clone();
        new["resources"]["requests"]["storage"] = json!("2Gi");
        // The real kube-apiserver v1.36.2's text for this change.
        assert_eq!(
            unified(&pvc_spec(&old), &pvc_spec(&new)),
            "@@ -6,7 +6,7 @@\n  \"Resources\": {\n   \"Limits\": null,\n   \"Requests\": {\n-   \"storage\": \"1Gi\"\n+   \"storage\": \"2Gi\"\n   }\n  },\n  \"VolumeName\": \"\",\n"
        );
    }

    #[test]
    fn a_changed_access_mode_is_the_real_servers_hunk() {
        let old = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
        let mut new = old.clone();
        new["accessModes"] = json!(["ReadWriteMany"]);
        assert_eq!(
            unified(&pvc_spec(&old), &pvc_spec(&new)),
            "@@ -1,6 +1,6 @@\n {\n  \"AccessModes\": [\n-  \"ReadWriteOnce\"\n+  \"ReadWriteMany\"\n  ],\n  \"Selector\": null,\n  \"Resources\": {\n"
        );
    }
}
