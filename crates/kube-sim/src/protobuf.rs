//! Decoding of the Kubernetes protobuf envelope for the few request bodies kubectl's typed clients send
//! as `application/vnd.kubernetes.protobuf` (access reviews, and the `kubectl create configmap|secret|
//! namespace` generators). Responses are always JSON, which client-go accepts.

use serde_json::{Map, Value, json};

enum F {
    Str(&'static str),
    Int(&'static str),
    Bool(&'static str),
    Msg(&'static str, &'static [(u32, F)]),
    MapStr(&'static str),
    MapBytes(&'static str),
    RepStr(&'static str),
}

const OBJECT_META: &[(u32, F)] = &[
    (1, F::Str("name")),
    (2, F::Str("generateName")),
    (3, F::Str("namespace")),
    (11, F::MapStr("labels")),
    (12, F::MapStr("annotations")),
    (14, F::RepStr("finalizers")),
];
const RESOURCE_ATTRS: &[(u32, F)] = &[
    (1, F::Str("namespace")),
    (2, F::Str("verb")),
    (3, F::Str("group")),
    (4, F::Str("version")),
    (5, F::Str("resource")),
    (6, F::Str("subresource")),
    (7, F::Str("name")),
];
const NON_RESOURCE_ATTRS: &[(u32, F)] = &[(1, F::Str("path")), (2, F::Str("verb"))];
const SSAR_SPEC: &[(u32, F)] =
    &[(1, F::Msg("resourceAttributes", RESOURCE_ATTRS)), (2, F::Msg("nonResourceAttributes", NON_RESOURCE_ATTRS))];
const SSAR: &[(u32, F)] = &[(1, F::Msg("metadata", OBJECT_META)), (2, F::Msg("spec", SSAR_SPEC))];
const SAR_SPEC: &[(u32, F)] = &[
    (1, F::Msg("resourceAttributes", RESOURCE_ATTRS)),
    (2, F::Msg("nonResourceAttributes", NON_RESOURCE_ATTRS)),
    (3, F::Str("user")),
    (4, F::RepStr("groups")),
];
const SAR: &[(u32, F)] = &[(1, F::Msg("metadata", OBJECT_META)), (2, F::Msg("spec", SAR_SPEC))];
const RULES_SPEC: &[(u32, F)] = &[(1, F::Str("namespace"))];
const RULES: &[(u32, F)] = &[(1, F::Msg("metadata", OBJECT_META)), (2, F::Msg("spec", RULES_SPEC))];
const META_ONLY: &[(u32, F)] = &[(1, F::Msg("metadata", OBJECT_META))];
const CONFIGMAP: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::MapStr("data")),
    (3, F::MapBytes("binaryData")),
    (4, F::Bool("immutable")),
];
const SECRET: &[(u32, F)] =
    &[(1, F::Msg("metadata", OBJECT_META)), (2, F::MapBytes("data")), (3, F::Str("type")), (5, F::Bool("immutable"))];
const NS_SPEC: &[(u32, F)] = &[(1, F::RepStr("finalizers"))];
const NAMESPACE: &[(u32, F)] = &[(1, F::Msg("metadata", OBJECT_META)), (2, F::Msg("spec", NS_SPEC))];
const SA: &[(u32, F)] = &[(1, F::Msg("metadata", OBJECT_META))];
const LEASE_SPEC: &[(u32, F)] = &[(1, F::Str("holderIdentity")), (2, F::Int("leaseDurationSeconds"))];
const LEASE: &[(u32, F)] = &[(1, F::Msg("metadata", OBJECT_META)), (2, F::Msg("spec", LEASE_SPEC))];

fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let byte = *b.get(*i)?;
        *i += 1;
        v |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

/// Raw fields: (number, wire type, varint value, bytes).
fn fields(b: &[u8]) -> Option<Vec<(u32, u64, &[u8])>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i)?;
        let (num, wt) = ((key >> 3) as u32, key & 7);
        match wt {
            0 => {
                let v = varint(b, &mut i)?;
                out.push((num, v, &b[0..0]));
            }
            2 => {
                let len = varint(b, &mut i)? as usize;
                let s = b.get(i..i + len)?;
                i += len;
                out.push((num, 0, s));
            }
            1 => i += 8,
            5 => i += 4,
            _ => return None,
        }
    }
    Some(out)
}

fn decode(b: &[u8], schema: &[(u32, F)]) -> Option<Value> {
    use base64::Engine;
    let mut m = Map::new();
    for (num, v, bytes) in fields(b)? {
        let Some((_, f)) = schema.iter().find(|(n, _)| *n == num) else {
            continue;
        };
        match f {
            // Go's protobuf marshaller writes empty strings too; the decoded fields are `omitempty` in JSON
            // (ObjectMeta, access review attributes, Secret type), so an empty one is as absent.
            F::Str(_) if bytes.is_empty() => {}
            F::Str(n) => {
                m.insert(n.to_string(), json!(String::from_utf8_lossy(bytes)));
            }
            F::Int(n) => {
                m.insert(n.to_string(), json!(v as i64));
            }
            F::Bool(n) => {
                m.insert(n.to_string(), json!(v != 0));
            }
            F::Msg(n, s) => {
                m.insert(n.to_string(), decode(bytes, s)?);
            }
            F::RepStr(n) => {
                let e = m.entry(n.to_string()).or_insert_with(|| json!([]));
                e.as_array_mut()?.push(json!(String::from_utf8_lossy(bytes)));
            }
            F::MapStr(n) | F::MapBytes(n) => {
                let entry = fields(bytes)?;
                let k = entry
                    .iter()
                    .find(|(n, _, _)| *n == 1)
                    .map(|(_, _, b)| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_default();
                let val = entry.iter().find(|(n, _, _)| *n == 2).map(|(_, _, b)| *b).unwrap_or_default();
                let val = if matches!(f, F::MapBytes(_)) {
                    json!(base64::engine::general_purpose::STANDARD.encode(val))
                } else {
                    json!(String::from_utf8_lossy(val))
                };
                let e = m.entry(n.to_string()).or_insert_with(|| json!({}));
                e.as_object_mut()?.insert(k, val);
            }
        }
    }
    Some(Value::Object(m))
}

/// Decodes a `k8s\0`-prefixed protobuf body of a supported kind into JSON.
pub fn decode_envelope(body: &[u8]) -> Result<Value, String> {
    let rest = body.strip_prefix(b"k8s\0").ok_or("missing protobuf envelope")?;
    let top = fields(rest).ok_or("malformed protobuf")?;
    let tm = top.iter().find(|(n, _, _)| *n == 1).map(|(_, _, b)| *b).unwrap_or_default();
    let raw = top.iter().find(|(n, _, _)| *n == 2).map(|(_, _, b)| *b).unwrap_or_default();
    let tmf = fields(tm).ok_or("malformed typeMeta")?;
    let get = |i: u32| {
        tmf.iter()
            .find(|(n, _, _)| *n == i)
            .map(|(_, _, b)| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    };
    let (api_version, kind) = (get(1), get(2));
    let schema: &[(u32, F)] = match kind.as_str() {
        "SelfSubjectAccessReview" | "LocalSubjectAccessReview" => SSAR,
        "SubjectAccessReview" => SAR,
        "SelfSubjectRulesReview" => RULES,
        "SelfSubjectReview" => META_ONLY,
        "ConfigMap" => CONFIGMAP,
        "Secret" => SECRET,
        "Namespace" => NAMESPACE,
        "ServiceAccount" => SA,
        "Lease" => LEASE,
        other => {
            return Err(format!(
                "protobuf bodies of kind {other:?} are not supported by the embedded API server; use JSON"
            ));
        }
    };
    let mut v = decode(raw, schema).ok_or("malformed protobuf object")?;
    v["apiVersion"] = api_version.into();
    v["kind"] = kind.into();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_a_self_subject_access_review() {
        // typeMeta{apiVersion, kind}, raw{spec{resourceAttributes{namespace=default, verb=list, resource=configmaps}}}
        let attrs = [&[0x0a, 7][..], b"default", &[0x12, 4], b"list", &[0x2a, 10], b"configmaps"].concat();
        let spec = [&[0x0a, attrs.len() as u8][..], &attrs].concat();
        let raw = [&[0x12, spec.len() as u8][..], &spec].concat();
        let tm = [&[0x0a, 23][..], b"authorization.k8s.io/v1", &[0x12, 23], b"SelfSubjectAccessReview"].concat();
        let body = [&b"k8s\0"[..], &[0x0a, tm.len() as u8], &tm, &[0x12, raw.len() as u8], &raw].concat();
        let v = decode_envelope(&body).unwrap();
        assert_eq!(v["kind"], "SelfSubjectAccessReview");
        assert_eq!(v["spec"]["resourceAttributes"]["verb"], "list");
        assert_eq!(v["spec"]["resourceAttributes"]["resource"], "configmaps");
    }
}
