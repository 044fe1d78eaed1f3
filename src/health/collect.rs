//! Reading what `assess` needs from the cluster: pods, PVCs and leases by their well-known names and the
//! namespace's tasks, all concurrently.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Client;
use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;

use super::assess::HealthInputs;
use crate::api::{Etcd, EtcdOperatorTask};
use crate::kube::ClusterError;
use crate::kube::error::Subject;

async fn get_all<K>(client: &Client, ns: &str, kind: &str, names: Vec<String>) -> Result<Vec<K>, ClusterError>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let found = futures::future::try_join_all(names.iter().map(|n| {
        let api = api.clone();
        async move {
            api.get_opt(n).await.map_err(|e| ClusterError::from_kube(e, &Subject { kind, name: n, namespace: ns }))
        }
    }))
    .await?;
    Ok(found.into_iter().flatten().collect())
}

/// Reads the inputs for `etcd` concurrently. A missing EtcdOperatorTask CRD is not an error (`tasks: None`).
pub async fn collect(client: &Client, etcd: Etcd) -> Result<HealthInputs, ClusterError> {
    let ns = etcd.metadata.namespace.clone().unwrap_or_default();
    let names = etcd.managed_names();
    let n = u32::try_from(etcd.spec.replicas.max(0)).unwrap_or(0);
    let mut lease_names: Vec<String> = (0..n).map(|i| names.member_lease(i)).collect();
    lease_names.extend([names.full_snapshot_lease(), names.delta_snapshot_lease()]);
    let tasks_api: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), &ns);
    let tasks = async {
        match tasks_api.list(&ListParams::default()).await {
            Ok(l) => Ok(Some(l.items)),
            Err(e) => match ClusterError::from_kube(e, &Subject { kind: "EtcdOperatorTask", name: "", namespace: &ns })
            {
                ClusterError::ApiMissing { .. } => Ok(None),
                other => Err(other),
            },
        }
    };
    let (pods, pvcs, leases, tasks) = tokio::try_join!(
        get_all::<Pod>(client, &ns, "pod", (0..n).map(|i| names.pod(i)).collect()),
        get_all::<PersistentVolumeClaim>(client, &ns, "persistentvolumeclaim", (0..n).map(|i| names.pvc(i)).collect()),
        get_all::<Lease>(client, &ns, "lease", lease_names),
        tasks,
    )?;
    Ok(HealthInputs { etcd, pods, pvcs, leases, tasks })
}
