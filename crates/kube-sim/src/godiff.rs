//! The object diffs kube-apiserver writes into some validation messages, word for word.
//!
//! `ValidatePersistentVolumeClaimUpdate` (kubernetes `pkg/apis/core/validation/validation.go`) appends, to its
//! "spec is immutable after creation …" cause, a diff of the old and the new *internal* claim spec (older
//! releases with go-cmp's `cmp.Diff`). The format here is the one the real kube-apiserver v1.36.2 answers, read
//! off its answers (the tests below pin two of them), not from its source: both specs marshalled by
//! `encoding/json` with one-space indentation (the internal types have no JSON tags, so the keys are the Go
//! field names, in declaration order), compared as lines by a unified diff with three lines of context and no
//! file header (`@@ -6,7 +6,7 @@` followed by ` "Resources": {` …). apimachinery's `diff.Diff` without go-cmp
//! (`pkg/util/diff`, build tag `!usegocmp`) writes two-space JSON with ten lines of context and file headers, so
//! it is not what that server runs. The line diff is the maintained `similar` crate's, which follows difflib's
//! hunk format.

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
            Go::Struct(fields) => write_block(out, depth, ('{', '}'), fields.iter(), |out, (name, value), d| {
                write_key(out, name);
                value.write(out, d);
            }),
            Go::Raw(v) => write_value(out, v, depth),
        }
    }
}

/// `items` between `brackets` as `json.MarshalIndent(v, "", " ")` writes a collection at `depth`: each on a line
/// of its own, indented one space deeper, separated by commas; an empty one as `{}` or `[]`.
fn write_block<T>(
    out: &mut String,
    depth: usize,
    (open, close): (char, char),
    items: impl Iterator<Item = T>,
    mut write_item: impl FnMut(&mut String, T, usize),
) {
    out.push(open);
    let mut any = false;
    for item in items {
        out.push_str(if any { ",\n" } else { "\n" });
        any = true;
        out.extend(std::iter::repeat_n(' ', depth + 1));
        write_item(out, item, depth + 1);
    }
    if any {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', depth));
    }
    out.push(close);
}

/// An object key and its separator.
fn write_key(out: &mut String, key: &str) {
    out.push_str(&go_string(key));
    out.push_str(": ");
}

/// `v` as `json.MarshalIndent(v, "", " ")` writes it at `depth`.
fn write_value(out: &mut String, v: &Value, depth: usize) {
    match v {
        Value::Array(items) => write_block(out, depth, ('[', ']'), items.iter(), write_value),
        // serde_json's map is sorted by key, as Go writes map keys.
        Value::Object(map) => write_block(out, depth, ('{', '}'), map.iter(), |out, (k, item), d| {
            write_key(out, k);
            write_value(out, item, d);
        }),
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
