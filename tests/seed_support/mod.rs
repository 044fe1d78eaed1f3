//! The real-shaped seed fixtures of `tests/fixtures/seed/`: YAML streams with `{{ago D}}` (RFC 3339 seconds)
//! and `{{micro-ago D}}` (RFC 3339 microseconds) placeholders filled relative to a given time. Shared by
//! `tests/status_seed_golden.rs` and `benches/status.rs`.
#![allow(dead_code)]

use jiff::{SignedDuration, Timestamp};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

/// The namespace the fixtures are written in.
pub const FIXTURE_NS: &str = "shoot--dev--app";

fn parse_duration(text: &str) -> SignedDuration {
    let (num, unit) = text.split_at(text.len() - 1);
    let n: i64 = num.parse().expect("duration number");
    SignedDuration::from_secs(match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        other => panic!("unit {other}"),
    })
}

/// Fills `{{ago D}}` (RFC 3339 seconds) and `{{micro-ago D}}` (RFC 3339 microseconds) relative to `now`.
pub fn fill_times(text: &str, now: Timestamp) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find("}}").expect("closing }}") + start;
        let inner = &rest[start + 2..end];
        let (kind, d) = inner.split_once(' ').expect("placeholder");
        let t = now - parse_duration(d);
        out.push_str(&match kind {
            "ago" => t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "micro-ago" => t.strftime("%Y-%m-%dT%H:%M:%S.000000Z").to_string(),
            other => panic!("placeholder {other}"),
        });
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    out
}

/// The objects of fixture `name`, times filled relative to `now`.
pub fn load(name: &str, now: Timestamp) -> Vec<Value> {
    load_into(name, now, FIXTURE_NS)
}

/// The fixture `name` with its namespace replaced by `ns`.
pub fn load_into(name: &str, now: Timestamp, ns: &str) -> Vec<Value> {
    let path = format!("{}/tests/fixtures/seed/{name}.yaml", env!("CARGO_MANIFEST_DIR"));
    let text = fill_times(&std::fs::read_to_string(&path).expect("fixture"), now).replace(FIXTURE_NS, ns);
    text.split("\n---\n")
        .skip(1)
        .map(|doc| serde_saphyr::from_str::<Value>(doc).unwrap_or_else(|e| panic!("{name}: {e}")))
        .collect()
}

pub fn resource(obj: &Value) -> ApiResource {
    let api_version = obj["apiVersion"].as_str().unwrap();
    let kind = obj["kind"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "Etcd" => "etcds",
        "StatefulSet" => "statefulsets",
        "Pod" => "pods",
        "PersistentVolumeClaim" => "persistentvolumeclaims",
        "Lease" => "leases",
        "ConfigMap" => "configmaps",
        other => panic!("kind {other}"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Creates every object of `docs` in namespace `ns`, then writes each status through the status subresource, as
/// the real controllers do. A pod's `qosClass` is left to the API server: the real one computes it from the
/// resources and refuses any other value.
pub async fn apply(client: &kube::Client, ns: &str, docs: &[Value]) {
    use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
    for doc in docs {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource(doc));
        let mut body = doc.clone();
        let mut status = body.as_object_mut().unwrap().remove("status");
        if let Some(s) = status.as_mut().and_then(Value::as_object_mut) {
            s.remove("qosClass");
        }
        let obj: DynamicObject = serde_json::from_value(body).unwrap();
        api.create(&PostParams::default(), &obj).await.unwrap_or_else(|e| panic!("create {}: {e}", doc["kind"]));
        if let Some(status) = status {
            let name = doc["metadata"]["name"].as_str().unwrap();
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(serde_json::json!({"status": status})))
                .await
                .unwrap_or_else(|e| panic!("status of {} {name}: {e}", doc["kind"]));
        }
    }
}
