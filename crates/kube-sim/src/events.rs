//! `events.k8s.io/v1` Events share storage with core `v1` Events (like kube-apiserver); this converts
//! between the two field layouts.

use serde_json::{Map, Value};

/// (core v1 field, events.k8s.io/v1 field).
const FIELDS: &[(&str, &str)] = &[
    ("message", "note"),
    ("involvedObject", "regarding"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename(obj: &Value, to_events: bool, api_version: &str) -> Value {
    let Some(m) = obj.as_object() else {
        return obj.clone();
    };
    let mut out = Map::new();
    for (k, v) in m {
        let mapped = FIELDS.iter().find_map(|(core, ev)| {
            if to_events && k == core {
                Some(*ev)
            } else if !to_events && k == ev {
                Some(*core)
            } else {
                None
            }
        });
        out.insert(mapped.unwrap_or(k).to_string(), v.clone());
    }
    out.insert("apiVersion".into(), api_version.into());
    out.insert("kind".into(), "Event".into());
    Value::Object(out)
}

/// Stored (core v1) Event → `events.k8s.io/v1`, with the fields the Go type always serialises
/// (k8s.io/api `events/v1/types.go`: `eventTime`, `deprecatedSource`, `deprecatedFirstTimestamp` and
/// `deprecatedLastTimestamp` have no `omitempty`; `note`, `action`, `reportingController` and
/// `reportingInstance` do).
pub fn to_external(obj: &Value) -> Value {
    let mut out = rename(obj, true, "events.k8s.io/v1");
    if let Some(m) = out.as_object_mut() {
        for k in ["eventTime", "deprecatedFirstTimestamp", "deprecatedLastTimestamp"] {
            m.entry(k).or_insert(Value::Null);
        }
        m.entry("deprecatedSource").or_insert_with(|| Value::Object(Map::new()));
        for k in ["note", "action", "reportingController", "reportingInstance"] {
            if m.get(k).is_some_and(|v| v.as_str() == Some("")) {
                m.remove(k);
            }
        }
    }
    out
}

/// A stored Event as core `v1` serialises it: `eventTime`, `firstTimestamp`, `lastTimestamp`, `source`,
/// `reportingComponent` and `reportingInstance` have no `omitempty` (k8s.io/api `core/v1/types.go` `Event`).
pub fn complete_core(obj: &mut Value) {
    if let Some(m) = obj.as_object_mut() {
        for k in ["eventTime", "firstTimestamp", "lastTimestamp"] {
            m.entry(k).or_insert(Value::Null);
        }
        m.entry("source").or_insert_with(|| Value::Object(Map::new()));
        m.entry("involvedObject").or_insert_with(|| Value::Object(Map::new()));
        for k in ["reportingComponent", "reportingInstance"] {
            m.entry(k).or_insert_with(|| Value::String(String::new()));
        }
    }
}

/// `events.k8s.io/v1` Event → stored (core v1) form.
pub fn to_storage(obj: &Value) -> Value {
    rename(obj, false, "v1")
}

/// Field selector path of `events.k8s.io/v1` in storage terms.
pub fn storage_field(path: &str) -> String {
    if let Some(rest) = path.strip_prefix("regarding.") {
        return format!("involvedObject.{rest}");
    }
    if path == "reportingController" {
        return "reportingComponent".into();
    }
    path.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn roundtrip_between_core_and_events_api() {
        let core = json!({"apiVersion":"v1","kind":"Event","metadata":{"name":"e"},"message":"m","involvedObject":{"name":"etcd-main"},"reason":"R","count":2});
        let ev = to_external(&core);
        assert_eq!(ev["note"], "m");
        assert_eq!(ev["regarding"]["name"], "etcd-main");
        assert_eq!(ev["deprecatedCount"], 2);
        let mut back = to_storage(&ev);
        for k in ["eventTime", "firstTimestamp", "lastTimestamp", "source"] {
            back.as_object_mut().unwrap().remove(k);
        }
        assert_eq!(back, core);
    }
}
