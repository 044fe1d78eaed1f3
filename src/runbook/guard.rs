//! What keeps a runbook run safe against a second operator and against deletion of its task:
//! - who holds a task's executor Lease and since when (a second run is refused while it is held);
//! - the runbook finalizer on the task, so that deleting a task whose run is half done cannot lose the
//!   compensating cleanup: the running executor finishes its current step and cleans up, or, with no
//!   executor, the task stays until `runbook abort` does it;
//! - the compensating cleanup itself (etcd-druid reconciles the spec again, component protection is back on).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

use crate::api::{Etcd, EtcdOperatorTask};
use crate::kube::ClusterError;
use crate::kube::annotate::{
    AnnotateError, component_protection_disabled, set_component_protection, set_spec_reconcile_suspended,
    spec_reconcile_suspended,
};
use crate::kube::error::Subject;
use crate::reconciler::executor_lease_name;
use crate::reconciler::lease::expires_in;

/// Finalizer a runbook puts on its task: removed only after the compensating cleanup ran.
pub const RUNBOOK_FINALIZER: &str = "druid.gardener.cloud/runbook-cleanup";

/// The live holder of a task's executor Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its identity (`druidctl-runbook@HOST/PID`).
    pub identity: String,
    /// Since when it holds the lease (RFC 3339), if recorded.
    pub since: Option<String>,
    /// Until the lease expires unless renewed.
    pub expires_in: Duration,
}

pub use crate::reconciler::lease::holder_is_dead_here;

/// The holder of `task`'s executor Lease when it is held by someone other than `own_identity` and has not
/// expired (a holder that is a dead process on this host does not count).
pub async fn live_holder(
    client: &Client,
    ns: &str,
    task: &str,
    own_identity: &str,
) -> Result<Option<Holder>, ClusterError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    let name = executor_lease_name(task);
    let lease = api
        .get_opt(&name)
        .await
        .map_err(|e| ClusterError::from_kube(e, &Subject { kind: "lease", name: &name, namespace: ns }))?;
    let Some(lease) = lease else { return Ok(None) };
    let spec = lease.spec.clone().unwrap_or_default();
    let identity = spec.holder_identity.clone().unwrap_or_default();
    let left = expires_in(&lease, jiff::Timestamp::now());
    if identity.is_empty() || identity == own_identity || left.is_zero() || holder_is_dead_here(&identity, own_identity)
    {
        return Ok(None);
    }
    let since = spec.acquire_time.as_ref().map(|t| t.0.round(jiff::Unit::Second).unwrap_or(t.0).to_string());
    Ok(Some(Holder { identity, since, expires_in: left }))
}

/// Adds the runbook finalizer to `task` (idempotent).
pub async fn add_finalizer(client: &Client, task: &EtcdOperatorTask) -> Result<EtcdOperatorTask, ClusterError> {
    let ns = task.metadata.namespace.clone().unwrap_or_default();
    let name = task.metadata.name.clone().unwrap_or_default();
    let mut fins = task.metadata.finalizers.clone().unwrap_or_default();
    if fins.iter().any(|f| f == RUNBOOK_FINALIZER) {
        return Ok(task.clone());
    }
    fins.push(RUNBOOK_FINALIZER.into());
    let api: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), &ns);
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&serde_json::json!({"metadata": {"finalizers": fins}})))
        .await
        .map_err(|e| ClusterError::from_kube(e, &Subject { kind: "EtcdOperatorTask", name: &name, namespace: &ns }))
}

/// Removes the runbook finalizer from the task (a task already gone is fine).
pub async fn remove_finalizer(client: &Client, ns: &str, name: &str) -> Result<(), ClusterError> {
    let api: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), ns);
    let subject = Subject { kind: "EtcdOperatorTask", name, namespace: ns };
    for _ in 0..5 {
        let Some(t) = api.get_opt(name).await.map_err(|e| ClusterError::from_kube(e, &subject))? else { return Ok(()) };
        let fins = t.metadata.finalizers.clone().unwrap_or_default();
        if !fins.iter().any(|f| f == RUNBOOK_FINALIZER) {
            return Ok(());
        }
        let rest: Vec<String> = fins.into_iter().filter(|f| f != RUNBOOK_FINALIZER).collect();
        let patch =
            serde_json::json!({"metadata": {"finalizers": rest, "resourceVersion": t.metadata.resource_version}});
        match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(ClusterError::from_kube(e, &subject)),
        }
    }
    Err(ClusterError::Conflict(format!("removing the finalizer of task {ns}/{name} kept conflicting")))
}

/// The compensating cleanup after an aborted run: etcd-druid reconciles the spec again and component
/// protection is back on. Returns what it did, one phrase each (empty when nothing needed doing).
pub async fn compensate(client: &Client, ns: &str, etcd: &str) -> Result<Vec<String>, ClusterError> {
    let api: Api<Etcd> = Api::namespaced(client.clone(), ns);
    let subject = Subject { kind: "etcd", name: etcd, namespace: ns };
    let Some(e) = api.get_opt(etcd).await.map_err(|err| ClusterError::from_kube(err, &subject))? else {
        return Ok(vec![]);
    };
    let unwrap = |r: Result<crate::kube::annotate::Outcome, AnnotateError>| match r {
        Ok(o) => Ok(o),
        Err(AnnotateError::Cluster(c)) => Err(c),
        Err(AnnotateError::Rejected(m)) => Err(ClusterError::Conflict(m)),
    };
    let mut done = Vec::new();
    if spec_reconcile_suspended(&e) {
        unwrap(set_spec_reconcile_suspended(client, &e, false).await)?;
        done.push("etcd-druid reconciles the spec again".to_string());
    }
    let e = api.get(etcd).await.map_err(|err| ClusterError::from_kube(err, &subject))?;
    if component_protection_disabled(&e) {
        unwrap(set_component_protection(client, &e, true).await)?;
        done.push("component protection is enabled again".to_string());
    }
    Ok(done)
}

/// Unfinished runbook tasks of `task_types` for the Etcd, including those being deleted, oldest first.
pub async fn runbook_tasks(
    client: &Client,
    ns: &str,
    etcd: &str,
    task_types: &[&str],
) -> Result<Vec<EtcdOperatorTask>, ClusterError> {
    let api: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), ns);
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| ClusterError::from_kube(e, &Subject { kind: "EtcdOperatorTask", name: "", namespace: ns }))?;
    let mut found: Vec<EtcdOperatorTask> = list
        .items
        .into_iter()
        .filter(|t| task_types.contains(&t.spec.type_.as_str()) && t.targets(ns, etcd))
        .filter(|t| !t.state().is_terminal() || t.metadata.deletion_timestamp.is_some())
        .collect();
    found.sort_by_key(|t| (t.metadata.creation_timestamp.as_ref().map(|c| c.0), t.metadata.name.clone()));
    Ok(found)
}

/// Deletes the task (background) after its cleanup; a task already gone is fine.
pub async fn delete_task(client: &Client, ns: &str, name: &str) -> Result<(), ClusterError> {
    let api: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), ns);
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(ClusterError::from_kube(e, &Subject { kind: "EtcdOperatorTask", name, namespace: ns })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_dead_process_on_this_host_is_taken_over_at_once() {
        let me = format!("druidctl-runbook@h1/{}", std::process::id());
        assert!(!holder_is_dead_here(&format!("druidctl-runbook@h1/{}", std::process::id()), &me), "alive");
        assert!(holder_is_dead_here("druidctl-runbook@h1/999999999", &me) || cfg!(not(target_os = "linux")));
        assert!(!holder_is_dead_here("druidctl-runbook@h2/999999999", &me), "another host: unknown");
        assert!(!holder_is_dead_here("serve-abc", &me), "not a runbook identity");
    }
}
