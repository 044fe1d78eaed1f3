//! LIST pages decoded without what the one-shot reads never look at.
//!
//! Every object the API server returns carries `metadata.managedFields` (server-side apply's field ownership),
//! and there is no query parameter to leave them out. On a Gardener seed they are the largest part of a pod
//! (about 11 KB of a 17 KB pod in `benches/status.rs`), and `FieldsV1` decodes into a tree of `serde_json::Value`
//! maps: most of the allocations, page zeroing and frees of `status -A` went there (`perf record`, see
//! docs/performance.md). Decoding into these wire types skips them while the bytes are read instead of
//! building and then dropping them. A pod also keeps only `spec.nodeName` of its spec (containers, volumes and
//! the rest are a third of a pod and nothing in `health` reads them).
//!
//! The objects come out as the ordinary k8s-openapi / druid-api types, with the skipped fields `None`/empty.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, Pod, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta, OwnerReference, Time};
use kube::Client;
use kube::api::ListParams;
use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};

use crate::api::etcd::{EtcdSpec, EtcdStatus};
use crate::api::task::{EtcdOperatorTaskSpec, EtcdOperatorTaskStatus};
use crate::api::{Etcd, EtcdOperatorTask};

/// `ObjectMeta` without `managedFields` (and the long-gone `selfLink`).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    generate_name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    finalizers: Option<Vec<String>>,
}

impl From<Meta> for ObjectMeta {
    fn from(m: Meta) -> ObjectMeta {
        ObjectMeta {
            name: m.name,
            generate_name: m.generate_name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            generation: m.generation,
            creation_timestamp: m.creation_timestamp,
            deletion_timestamp: m.deletion_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            labels: m.labels,
            annotations: m.annotations,
            owner_references: m.owner_references,
            finalizers: m.finalizers,
            managed_fields: None,
            self_link: None,
        }
    }
}

/// One object as it comes over the wire: `apiVersion` and `kind` are skipped like any unknown key.
#[derive(Deserialize)]
#[serde(bound = "S: DeserializeOwned, T: DeserializeOwned")]
struct Wire<S, T> {
    #[serde(default)]
    metadata: Meta,
    spec: Option<S>,
    status: Option<T>,
}

/// One page of a LIST.
#[derive(Deserialize)]
#[serde(bound = "S: DeserializeOwned, T: DeserializeOwned")]
struct Page<S, T> {
    #[serde(default)]
    metadata: ListMeta,
    // `null` in an empty list of some servers, as kube's `ObjectList` also accepts.
    #[serde(default)]
    items: Option<Vec<Wire<S, T>>>,
}

/// A kind whose LIST pages are decoded through [`Wire`]: which spec and status are kept, and how the object is
/// put back together.
pub trait Slim: kube::Resource<DynamicType = ()> + Sized {
    /// What of `spec` is decoded.
    type Spec: DeserializeOwned;
    /// What of `status` is decoded.
    type Status: DeserializeOwned;
    /// The object from its parts; `None` for an object without the spec its type requires, which the full
    /// decoding would refuse (the API server's schema never lets one through).
    fn assemble(metadata: ObjectMeta, spec: Option<Self::Spec>, status: Option<Self::Status>) -> Option<Self>;
}

/// The one field of a pod's spec that `health` reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodNode {
    node_name: Option<String>,
}

impl Slim for Pod {
    type Spec = PodNode;
    type Status = PodStatus;
    fn assemble(metadata: ObjectMeta, spec: Option<PodNode>, status: Option<PodStatus>) -> Option<Pod> {
        Some(Pod { metadata, spec: spec.map(|s| PodSpec { node_name: s.node_name, ..PodSpec::default() }), status })
    }
}

impl Slim for PersistentVolumeClaim {
    type Spec = PersistentVolumeClaimSpec;
    type Status = PersistentVolumeClaimStatus;
    fn assemble(
        metadata: ObjectMeta,
        spec: Option<PersistentVolumeClaimSpec>,
        status: Option<PersistentVolumeClaimStatus>,
    ) -> Option<PersistentVolumeClaim> {
        Some(PersistentVolumeClaim { metadata, spec, status })
    }
}

impl Slim for Lease {
    type Spec = LeaseSpec;
    type Status = IgnoredAny;
    fn assemble(metadata: ObjectMeta, spec: Option<LeaseSpec>, _: Option<IgnoredAny>) -> Option<Lease> {
        Some(Lease { metadata, spec })
    }
}

impl Slim for Etcd {
    type Spec = EtcdSpec;
    type Status = EtcdStatus;
    fn assemble(metadata: ObjectMeta, spec: Option<EtcdSpec>, status: Option<EtcdStatus>) -> Option<Etcd> {
        Some(Etcd { metadata, spec: spec?, status })
    }
}

impl Slim for EtcdOperatorTask {
    type Spec = EtcdOperatorTaskSpec;
    type Status = EtcdOperatorTaskStatus;
    fn assemble(
        metadata: ObjectMeta,
        spec: Option<EtcdOperatorTaskSpec>,
        status: Option<EtcdOperatorTaskStatus>,
    ) -> Option<EtcdOperatorTask> {
        Some(EtcdOperatorTask { metadata, spec: spec?, status })
    }
}

/// Reads one page of the LIST of `K` in `namespace` (every namespace with `None`): its objects and the
/// `continue` token of the next page, if any. The request is the one `Api::list` sends.
pub async fn list_page<K: Slim>(
    client: &Client,
    namespace: Option<&str>,
    lp: &ListParams,
) -> Result<(Vec<K>, Option<String>), kube::Error> {
    let url = K::url_path(&(), namespace);
    let mut req = kube::core::Request::new(url).list(lp).map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert("list");
    let page: Page<K::Spec, K::Status> = client.request(req).await?;
    Ok((assemble(page.items), page.metadata.continue_.filter(|c| !c.is_empty())))
}

fn assemble<K: Slim>(items: Option<Vec<Wire<K::Spec, K::Status>>>) -> Vec<K> {
    items.unwrap_or_default().into_iter().filter_map(|w| K::assemble(w.metadata.into(), w.spec, w.status)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode<K: Slim>(page: serde_json::Value) -> Vec<K> {
        let page: Page<K::Spec, K::Status> = serde_json::from_value(page).unwrap();
        assemble(page.items)
    }

    #[test]
    fn a_pod_keeps_its_metadata_node_and_status_and_loses_managed_fields_and_the_rest_of_its_spec() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "etcd-main-0", "namespace": "shoot", "uid": "u1", "resourceVersion": "7",
                "labels": {"app.kubernetes.io/part-of": "etcd-main"},
                "annotations": {"a": "b"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "etcd-main", "uid": "u0", "controller": true}],
                "creationTimestamp": "2026-11-26T06:00:00Z",
                "deletionTimestamp": "2026-11-26T07:00:00Z",
                "finalizers": ["f"],
                "managedFields": [{"manager": "kubelet", "operation": "Update", "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:status": {"f:phase": {}}}}]
            },
            "spec": {"nodeName": "node-1", "containers": [{"name": "etcd", "image": "etcd:v3.5"}],
                     "volumes": [{"name": "data", "emptyDir": {}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "etcd", "ready": true, "restartCount": 2, "image": "i", "imageID": ""}]}
        });
        let pods: Vec<Pod> = decode(json!({"metadata": {"continue": "x"}, "items": [pod.clone()]}));
        let full: Pod = serde_json::from_value(pod).unwrap();
        let p = &pods[0];
        assert_eq!(p.status, full.status);
        assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("node-1"));
        assert!(p.spec.as_ref().unwrap().containers.is_empty());
        let mut meta = full.metadata.clone();
        meta.managed_fields = None;
        assert_eq!(p.metadata, meta);
    }

    #[test]
    fn leases_claims_etcds_and_tasks_lose_only_their_managed_fields() {
        let mf = json!([{"manager": "m", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]);
        let lease = json!({"metadata": {"name": "l", "managedFields": mf},
                           "spec": {"holderIdentity": "h", "leaseDurationSeconds": 15}});
        let leases: Vec<Lease> = decode(json!({"items": [lease.clone()]}));
        let mut full: Lease = serde_json::from_value(lease).unwrap();
        full.metadata.managed_fields = None;
        assert_eq!(leases, [full]);

        let pvc = json!({"metadata": {"name": "c", "managedFields": mf},
                         "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                         "status": {"phase": "Bound"}});
        let pvcs: Vec<PersistentVolumeClaim> = decode(json!({"items": [pvc.clone()]}));
        let mut full: PersistentVolumeClaim = serde_json::from_value(pvc).unwrap();
        full.metadata.managed_fields = None;
        assert_eq!(pvcs, [full]);

        let etcd = json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
                          "metadata": {"name": "etcd-main", "namespace": "shoot", "generation": 3, "managedFields": mf},
                          "spec": {"replicas": 3, "labels": {"a": "b"}},
                          "status": {"observedGeneration": 3, "ready": true}});
        let etcds: Vec<Etcd> = decode(json!({"items": [etcd.clone(), {"metadata": {"name": "no-spec"}}]}));
        let mut full: Etcd = serde_json::from_value(etcd).unwrap();
        full.metadata.managed_fields = None;
        assert_eq!(etcds.len(), 1, "an Etcd without a spec is left out");
        assert_eq!(serde_json::to_value(&etcds[0]).unwrap(), serde_json::to_value(&full).unwrap());
    }

    #[test]
    fn an_empty_list_has_no_items_and_no_next_page() {
        let pods: Vec<Pod> = decode(json!({"kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": null}));
        assert!(pods.is_empty());
    }
}
