//! Structural schemas of the built-in kinds, taken from k8s-openapi's `schemars` schemas (generated from the
//! upstream OpenAPI document), and the unknown-field check of kube-apiserver's strict decoding
//! (apimachinery `pkg/runtime/serializer/json` strict mode, apiserver `pkg/endpoints/handlers/create.go`
//! `fieldValidation`): unknown fields are an error with `Strict`, dropped with a `Warning` otherwise.

use std::collections::HashMap;
use std::sync::OnceLock;

use k8s_openapi::api;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
use k8s_openapi::schemars::{JsonSchema, SchemaGenerator};
use serde_json::Value;

fn root<T: JsonSchema>() -> Value {
    SchemaGenerator::default().into_root_schema_for::<T>().to_value()
}

type Schemas = HashMap<(&'static str, &'static str), Value>;

fn schemas() -> &'static Schemas {
    static S: OnceLock<Schemas> = OnceLock::new();
    S.get_or_init(|| {
        let mut m = Schemas::new();
        m.insert(("", "namespaces"), root::<api::core::v1::Namespace>());
        m.insert(("", "pods"), root::<api::core::v1::Pod>());
        m.insert(("", "persistentvolumeclaims"), root::<api::core::v1::PersistentVolumeClaim>());
        m.insert(("", "persistentvolumes"), root::<api::core::v1::PersistentVolume>());
        m.insert(("", "configmaps"), root::<api::core::v1::ConfigMap>());
        m.insert(("", "secrets"), root::<api::core::v1::Secret>());
        m.insert(("", "services"), root::<api::core::v1::Service>());
        m.insert(("", "endpoints"), root::<api::core::v1::Endpoints>());
        m.insert(("", "nodes"), root::<api::core::v1::Node>());
        m.insert(("", "events"), root::<api::core::v1::Event>());
        m.insert(("", "serviceaccounts"), root::<api::core::v1::ServiceAccount>());
        m.insert(("apps", "statefulsets"), root::<api::apps::v1::StatefulSet>());
        m.insert(("apps", "deployments"), root::<api::apps::v1::Deployment>());
        m.insert(("apps", "replicasets"), root::<api::apps::v1::ReplicaSet>());
        m.insert(("apps", "daemonsets"), root::<api::apps::v1::DaemonSet>());
        m.insert(("batch", "jobs"), root::<api::batch::v1::Job>());
        m.insert(("batch", "cronjobs"), root::<api::batch::v1::CronJob>());
        m.insert(("policy", "poddisruptionbudgets"), root::<api::policy::v1::PodDisruptionBudget>());
        m.insert(("coordination.k8s.io", "leases"), root::<api::coordination::v1::Lease>());
        m.insert(("events.k8s.io", "events"), root::<api::events::v1::Event>());
        m.insert(("rbac.authorization.k8s.io", "roles"), root::<api::rbac::v1::Role>());
        m.insert(("rbac.authorization.k8s.io", "rolebindings"), root::<api::rbac::v1::RoleBinding>());
        m.insert(("rbac.authorization.k8s.io", "clusterroles"), root::<api::rbac::v1::ClusterRole>());
        m.insert(("rbac.authorization.k8s.io", "clusterrolebindings"), root::<api::rbac::v1::ClusterRoleBinding>());
        m.insert(("storage.k8s.io", "storageclasses"), root::<api::storage::v1::StorageClass>());
        m.insert(("apiextensions.k8s.io", "customresourcedefinitions"), root::<apiext::CustomResourceDefinition>());
        m
    })
}

/// The root schema (with `$defs`) of a built-in kind.
pub fn schema(group: &str, plural: &str) -> Option<&'static Value> {
    schemas().iter().find(|((g, p), _)| *g == group && *p == plural).map(|(_, v)| v)
}

fn resolve<'a>(mut s: &'a Value, defs: &'a Value) -> &'a Value {
    for _ in 0..16 {
        match s.get("$ref").and_then(|r| r.as_str()) {
            Some(r) => match r.rsplit('/').next().and_then(|n| defs.get(n)) {
                Some(d) => s = d,
                None => return s,
            },
            None => return s,
        }
    }
    s
}

/// Removes the fields of `obj` that the kind's schema does not declare and returns their paths
/// (`spec.containers[0].foo`, like the strict decoder), in document order of a sorted map.
pub fn prune_unknown(group: &str, plural: &str, obj: &mut Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(root) = schema(group, plural) {
        let defs = root.get("$defs").unwrap_or(&Value::Null);
        walk(obj, root, defs, "", &mut out);
    }
    out
}

fn walk(v: &mut Value, schema: &Value, defs: &Value, path: &str, out: &mut Vec<String>) {
    let s = resolve(schema, defs);
    match v {
        Value::Object(m) => {
            if let Some(props) = s.get("properties").and_then(|p| p.as_object()) {
                let mut unknown = Vec::new();
                for (k, child) in m.iter_mut() {
                    let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    match props.get(k) {
                        Some(ps) => walk(child, ps, defs, &p, out),
                        None => unknown.push(k.clone()),
                    }
                }
                for k in unknown {
                    m.remove(&k);
                    out.push(if path.is_empty() { k } else { format!("{path}.{k}") });
                }
            } else if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, child) in m.iter_mut() {
                    let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    walk(child, ap, defs, &p, out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for (i, it) in items.iter_mut().enumerate() {
                    walk(it, is, defs, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_of_a_pod_are_pruned_with_their_paths() {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "bogus": 1},
            "spec": {"containers": [{"name": "c", "image": "i", "foo": true}], "nodeSelector": {"a": "b"}}});
        let unknown = prune_unknown("", "pods", &mut pod);
        assert_eq!(unknown, vec!["metadata.bogus", "spec.containers[0].foo"]);
        assert_eq!(pod["spec"]["nodeSelector"]["a"], "b");
        assert!(pod["spec"]["containers"][0].get("foo").is_none());
    }
}
