//! Validation of the built-in kinds for the fields the landscape and druidctl write, following
//! kubernetes `pkg/apis/core/validation/validation.go`, `pkg/apis/batch/validation/validation.go`,
//! `pkg/apis/apps/validation/validation.go` and `pkg/apis/coordination/validation/validation.go`, plus the
//! decoding errors kube-apiserver answers with 400 before validation (Go `time.Parse` of `MicroTime`, base64
//! of Secret `data`).

use serde_json::Value;

use super::status::ApiError;

type Cause = (String, String, String);

fn invalid_value(field: &str, v: &Value, msg: &str) -> Cause {
    ("FieldValueInvalid".into(), field.into(), format!("Invalid value: {v}: {msg}"))
}

fn non_negative(obj: &Value, ptr: &str, field: &str, out: &mut Vec<Cause>) {
    if let Some(v) = obj.pointer(ptr)
        && v.as_i64().is_some_and(|n| n < 0)
    {
        out.push(invalid_value(field, v, "must be greater than or equal to 0"));
    }
}

fn positive(obj: &Value, ptr: &str, field: &str, out: &mut Vec<Cause>) {
    if let Some(v) = obj.pointer(ptr)
        && v.as_i64().is_some_and(|n| n <= 0)
    {
        out.push(invalid_value(field, v, "must be greater than 0"));
    }
}

/// The error of Go's `time.Parse(layout, value)` for the `MicroTime` layout
/// `2006-01-02T15:04:05.000000Z07:00` (apimachinery `pkg/apis/meta/v1/micro_time.go` `UnmarshalJSON`), or None
/// when `value` parses.
pub fn micro_time_error(value: &str) -> Option<String> {
    const LAYOUT: &str = "2006-01-02T15:04:05.000000Z07:00";
    // (layout element, how many digits or the literal)
    enum E {
        Digits(&'static str, usize),
        Lit(&'static str),
        Frac,
        Zone,
    }
    let elems = [
        E::Digits("2006", 4),
        E::Lit("-"),
        E::Digits("01", 2),
        E::Lit("-"),
        E::Digits("02", 2),
        E::Lit("T"),
        E::Digits("15", 2),
        E::Lit(":"),
        E::Digits("04", 2),
        E::Lit(":"),
        E::Digits("05", 2),
        E::Frac,
        E::Zone,
    ];
    let err = |rest: &str, elem: &str| {
        Some(format!("parsing time \"{value}\" as \"{LAYOUT}\": cannot parse \"{rest}\" as \"{elem}\""))
    };
    let mut rest = value;
    for e in elems {
        match e {
            E::Digits(name, n) => {
                let ok = rest.len() >= n && rest.as_bytes()[..n].iter().all(u8::is_ascii_digit);
                if !ok {
                    return err(rest, name);
                }
                rest = &rest[n..];
            }
            E::Lit(l) => match rest.strip_prefix(l) {
                Some(r) => rest = r,
                None => return err(rest, l),
            },
            E::Frac => {
                let ok = rest.len() >= 7
                    && rest.as_bytes()[0] == b'.'
                    && rest.as_bytes()[1..7].iter().all(u8::is_ascii_digit);
                if !ok {
                    return err(rest, ".000000");
                }
                rest = &rest[7..];
            }
            E::Zone => {
                if let Some(r) = rest.strip_prefix('Z') {
                    rest = r;
                } else {
                    let b = rest.as_bytes();
                    let ok = b.len() >= 6
                        && (b[0] == b'+' || b[0] == b'-')
                        && b[1].is_ascii_digit()
                        && b[2].is_ascii_digit()
                        && b[3] == b':'
                        && b[4].is_ascii_digit()
                        && b[5].is_ascii_digit();
                    if !ok {
                        return err(rest, "Z07:00");
                    }
                    rest = &rest[6..];
                }
            }
        }
    }
    if !rest.is_empty() {
        return Some(format!("parsing time \"{value}\": extra text: \"{rest}\""));
    }
    None
}

/// 400 errors of decoding (before validation): MicroTime fields and Secret base64.
pub fn decode_errors(group: &str, plural: &str, kind: &str, version: &str, obj: &Value) -> Result<(), ApiError> {
    let fail = |m: String| {
        Err(ApiError::bad_request(format!("{kind} in version \"{version}\" cannot be handled as a {kind}: {m}")))
    };
    match (group, plural) {
        ("coordination.k8s.io", "leases") => {
            for f in ["acquireTime", "renewTime"] {
                if let Some(s) = obj.pointer(&format!("/spec/{f}")).and_then(|v| v.as_str())
                    && let Some(e) = micro_time_error(s)
                {
                    return fail(e);
                }
            }
        }
        ("", "secrets") => {
            use base64::Engine;
            if let Some(data) = obj.get("data").and_then(|d| d.as_object()) {
                for v in data.values().filter_map(|v| v.as_str()) {
                    match base64::engine::general_purpose::STANDARD.decode(v) {
                        Ok(_) => {}
                        Err(base64::DecodeError::InvalidByte(at, _))
                        | Err(base64::DecodeError::InvalidLastSymbol(at, _)) => {
                            return fail(format!("illegal base64 data at input byte {at}"));
                        }
                        Err(_) => return fail(format!("illegal base64 data at input byte {}", v.len())),
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// Validation of a built-in object on create and update (422 causes).
pub fn validate(group: &str, plural: &str, ns: &str, obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    match (group, plural) {
        ("coordination.k8s.io", "leases") => {
            positive(obj, "/spec/leaseDurationSeconds", "spec.leaseDurationSeconds", &mut out);
            non_negative(obj, "/spec/leaseTransitions", "spec.leaseTransitions", &mut out);
        }
        ("", "events") => {
            // legacyValidateEvent: an Event about a cluster-scoped object lives in "" or "default".
            let ion = obj.pointer("/involvedObject/namespace").and_then(|n| n.as_str()).unwrap_or_default();
            let bad = if ion.is_empty() { !ns.is_empty() && ns != "default" } else { ion != ns };
            if bad {
                out.push(invalid_value(
                    "involvedObject.namespace",
                    &Value::String(ion.into()),
                    "does not match event.namespace",
                ));
            }
        }
        ("batch", "jobs") => {
            for f in ["parallelism", "completions", "backoffLimit"] {
                non_negative(obj, &format!("/spec/{f}"), &format!("spec.{f}"), &mut out);
            }
            positive(obj, "/spec/activeDeadlineSeconds", "spec.activeDeadlineSeconds", &mut out);
            let rp = obj.pointer("/spec/template/spec/restartPolicy").and_then(|r| r.as_str()).unwrap_or_default();
            if rp != "OnFailure" && rp != "Never" {
                out.push((
                    "FieldValueRequired".into(),
                    "spec.template.spec.restartPolicy".into(),
                    "Required value: valid values: \"OnFailure\", \"Never\"".into(),
                ));
            }
        }
        ("apps", "deployments" | "statefulsets" | "replicasets" | "daemonsets") => {
            non_negative(obj, "/spec/replicas", "spec.replicas", &mut out);
            // ValidatePodTemplateSpecForStatefulSet / ValidateDeploymentSpec: the selector selects the template.
            if let Some(ml) = obj.pointer("/spec/selector/matchLabels").and_then(|m| m.as_object()) {
                let labels = obj.pointer("/spec/template/metadata/labels").cloned().unwrap_or(Value::Null);
                let matches = ml.iter().all(|(k, v)| labels.get(k) == Some(v));
                if !matches {
                    out.push(invalid_value(
                        "spec.template.metadata.labels",
                        &labels,
                        "`selector` does not match template `labels`",
                    ));
                }
            }
        }
        ("", "pods") => {
            if let Some(spec) = obj.get("spec") {
                pod_spec(spec, "spec", &mut out);
            }
        }
        ("", "persistentvolumeclaims") if obj.pointer("/spec/resources/requests/storage").is_none() => {
            out.push(("FieldValueRequired".into(), "spec.resources[storage]".into(), "Required value".into()));
        }
        ("", "services") => {
            let t = obj.pointer("/spec/type").and_then(|t| t.as_str()).unwrap_or("ClusterIP");
            let headless = obj.pointer("/spec/clusterIP").and_then(|c| c.as_str()) == Some("None");
            let ports = obj.pointer("/spec/ports").and_then(|p| p.as_array()).map(|a| a.len()).unwrap_or(0);
            if ports == 0 && t != "ExternalName" && !headless {
                out.push(("FieldValueRequired".into(), "spec.ports".into(), "Required value".into()));
            }
        }
        _ => {}
    }
    out
}

/// ValidatePodSpec (pkg/apis/core/validation/validation.go), the parts clients trip over: containers required,
/// container names unique, images required, restartPolicy one of the supported values.
fn pod_spec(spec: &Value, path: &str, out: &mut Vec<Cause>) {
    let containers = spec.get("containers").and_then(|c| c.as_array()).cloned().unwrap_or_default();
    if containers.is_empty() {
        out.push(("FieldValueRequired".into(), format!("{path}.containers"), "Required value".into()));
    }
    let mut names = std::collections::HashSet::new();
    for (i, c) in containers.iter().enumerate() {
        let name = c.get("name").and_then(|n| n.as_str()).unwrap_or_default();
        if !name.is_empty() && !names.insert(name.to_string()) {
            out.push((
                "FieldValueDuplicate".into(),
                format!("{path}.containers[{i}].name"),
                format!("Duplicate value: \"{name}\""),
            ));
        }
        if c.get("image").and_then(|n| n.as_str()).is_none_or(str::is_empty) {
            out.push(("FieldValueRequired".into(), format!("{path}.containers[{i}].image"), "Required value".into()));
        }
    }
    if let Some(rp) = spec.get("restartPolicy").and_then(|r| r.as_str())
        && !matches!(rp, "Always" | "OnFailure" | "Never")
    {
        out.push((
            "FieldValueNotSupported".into(),
            format!("{path}.restartPolicy"),
            format!("Unsupported value: \"{rp}\": supported values: \"Always\", \"OnFailure\", \"Never\""),
        ));
    }
}

/// Paths of duplicate object keys in a JSON body (`spec.holderIdentity`), which kube's strict decoder
/// reports as `duplicate field "spec.holderIdentity"` (sigs.k8s.io/json `UnmarshalStrict`).
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    struct Walk<'a> {
        path: String,
        out: &'a mut Vec<String>,
    }
    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0;
            while seq.next_element_seed(Walk { path: format!("{}[{i}]", self.path), out: &mut *self.out })?.is_some() {
                i += 1;
            }
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(k) = map.next_key::<String>()? {
                let p = if self.path.is_empty() { k.clone() } else { format!("{}.{k}", self.path) };
                if !seen.insert(k) {
                    self.out.push(p.clone());
                }
                map.next_value_seed(Walk { path: p, out: &mut *self.out })?;
            }
            let _ = IgnoredAny;
            Ok(())
        }
    }
    let mut out = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    let _ = Walk { path: String::new(), out: &mut out }.deserialize(&mut de);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_time_errors_read_like_go() {
        assert_eq!(micro_time_error("2024-01-01T00:00:01.000000Z"), None);
        assert_eq!(
            micro_time_error("2024-01-01T00:00:01Z").unwrap(),
            "parsing time \"2024-01-01T00:00:01Z\" as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse \"Z\" as \".000000\""
        );
        assert_eq!(
            micro_time_error("yesterday").unwrap(),
            "parsing time \"yesterday\" as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse \"yesterday\" as \"2006\""
        );
    }
}
