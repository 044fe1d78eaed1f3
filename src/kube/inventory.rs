//! `list-resources`: every resource etcd-druid manages for one Etcd, grouped by kind (names from DOMAIN.md),
//! plus the EtcdOperatorTasks that target it.
//!
//! Each kind is listed by the `app.kubernetes.io/part-of` label; objects labelled the older way are found by
//! their well-known names. Kinds are read concurrently.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::{Client, Resource};
use serde::Serialize;

use super::error::{ClusterError, Subject};
use super::target::ObjectKey;
use crate::api::names::{CONFIG_VOLUME, LABEL_PART_OF, ManagedNames};
use crate::api::{Etcd, EtcdOperatorTask};

/// The resources of one Etcd.
#[derive(Debug, Clone, Serialize)]
pub struct Inventory {
    /// The Etcd.
    pub etcd: ObjectKey,
    /// Groups in display order.
    pub groups: Vec<Group>,
}

/// The resources of one kind.
#[derive(Debug, Clone, Serialize)]
pub struct Group {
    /// Kind, e.g. `StatefulSet`.
    pub kind: String,
    /// `kind.group` as kubectl prints it, e.g. `statefulset.apps`.
    pub resource: String,
    /// The objects, sorted by name.
    pub objects: Vec<DynamicObject>,
    /// Why the kind could not be read (forbidden, API not installed), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

struct KindSpec {
    resource: ApiResource,
    expected: Vec<String>,
}

fn spec<K: Resource<DynamicType = ()>>(expected: Vec<String>) -> KindSpec {
    KindSpec { resource: ApiResource::erase::<K>(&()), expected }
}

/// Finds the configuration ConfigMap from the StatefulSet volume `etcd-config-file` (robust across druid
/// versions), falling back to the newer `<etcd>-config` name.
pub fn config_map_name(sts: Option<&StatefulSet>, names: &ManagedNames) -> String {
    sts.and_then(|s| s.spec.as_ref())
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.volumes.as_ref())
        .and_then(|vols| vols.iter().find(|v| v.name == CONFIG_VOLUME))
        .and_then(|v| v.config_map.as_ref())
        .map(|cm| cm.name.clone())
        .unwrap_or_else(|| names.config_map())
}

/// Lists every resource of `etcd`.
pub async fn list(client: &Client, etcd: &Etcd) -> Result<Inventory, ClusterError> {
    let key = super::etcds::key_of(etcd);
    let ns = key.namespace.as_str();
    let names = etcd.managed_names();
    let replicas = u32::try_from(etcd.spec.replicas.max(0)).unwrap_or(0);
    let sts = Api::<StatefulSet>::namespaced(client.clone(), ns).get_opt(&names.statefulset()).await.ok().flatten();
    let mut leases: Vec<String> = (0..replicas).map(|i| names.member_lease(i)).collect();
    leases.extend([names.full_snapshot_lease(), names.delta_snapshot_lease()]);
    let kinds = vec![
        spec::<StatefulSet>(vec![names.statefulset()]),
        spec::<Pod>((0..replicas).map(|i| names.pod(i)).collect()),
        spec::<PersistentVolumeClaim>((0..replicas).map(|i| names.pvc(i)).collect()),
        spec::<ConfigMap>(vec![config_map_name(sts.as_ref(), &names)]),
        spec::<Service>(vec![names.client_service(), names.peer_service()]),
        spec::<Lease>(leases),
        spec::<PodDisruptionBudget>(vec![names.statefulset()]),
        spec::<ServiceAccount>(vec![names.statefulset()]),
        spec::<Role>(vec![names.role()]),
        spec::<RoleBinding>(vec![names.role()]),
        spec::<Job>(vec![names.compaction_job()]),
    ];
    let selector = format!("{LABEL_PART_OF}={}", key.name);
    let mut groups = futures::future::join_all(kinds.into_iter().map(|k| read_kind(client, ns, &selector, k))).await;
    groups.push(tasks_group(client, &key).await);
    Ok(Inventory { etcd: key, groups })
}

async fn read_kind(client: &Client, ns: &str, selector: &str, k: KindSpec) -> Group {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &k.resource);
    let subject = Subject { kind: &k.resource.kind, name: "", namespace: ns };
    let mut found: BTreeMap<String, DynamicObject> = BTreeMap::new();
    let mut unavailable = None;
    match api.list(&ListParams::default().labels(selector)).await {
        Ok(list) => {
            for o in list.items {
                found.insert(o.metadata.name.clone().unwrap_or_default(), o);
            }
        }
        Err(e) => unavailable = Some(ClusterError::from_kube(e, &subject).to_string()),
    }
    if unavailable.is_none() {
        let missing: Vec<&String> = k.expected.iter().filter(|n| !found.contains_key(*n)).collect();
        let got = futures::future::join_all(missing.iter().map(|n| api.get_opt(n))).await;
        for o in got.into_iter().flatten().flatten() {
            found.insert(o.metadata.name.clone().unwrap_or_default(), o);
        }
    }
    let mut objects: Vec<DynamicObject> = found.into_values().collect();
    for o in &mut objects {
        o.types =
            Some(kube::core::TypeMeta { api_version: k.resource.api_version.clone(), kind: k.resource.kind.clone() });
    }
    Group { resource: resource_name(&k.resource), kind: k.resource.kind, objects, unavailable }
}

async fn tasks_group(client: &Client, key: &ObjectKey) -> Group {
    let ar = ApiResource::erase::<EtcdOperatorTask>(&());
    let api: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), &key.namespace);
    let subject = Subject { kind: "EtcdOperatorTask", name: "", namespace: &key.namespace };
    let (objects, unavailable) = match api.list(&ListParams::default()).await {
        Ok(list) => {
            let objs = list
                .items
                .into_iter()
                .filter(|t| t.targets(&key.namespace, &key.name))
                .filter_map(|t| {
                    serde_json::to_value(&t).ok().and_then(|v| serde_json::from_value::<DynamicObject>(v).ok())
                })
                .collect();
            (objs, None)
        }
        Err(e) => (Vec::new(), Some(ClusterError::from_kube(e, &subject).to_string())),
    };
    Group { resource: resource_name(&ar), kind: ar.kind, objects, unavailable }
}

/// `kind.group` in lower case, as kubectl prints resource names (`statefulset.apps`, `pod`).
pub fn resource_name(ar: &ApiResource) -> String {
    let kind = ar.kind.to_ascii_lowercase();
    if ar.group.is_empty() { kind } else { format!("{kind}.{}", ar.group) }
}
