//! etcd-druid's own task API, `EtcdOpsTask` (etcd-druid ≥ v0.34): detection, creation of on-demand snapshot
//! tasks that etcd-druid executes, following them, and the duplicate rule across both task kinds.
//!
//! etcd-druid admits one unfinished `EtcdOpsTask` per Etcd (druid@v0.37.1
//! `internal/controller/etcdopstask/reconcile_task.go` admitTask, `ERR_DUPLICATE_TASK`); druidctl refuses a
//! snapshot while any unfinished task of either kind takes one of the same Etcd, since both end at the same
//! backup sidecar.

use std::time::Duration;

use kube::Client;
use kube::api::{Api, ListParams, PostParams};

use super::ops::TaskOpsError;
use crate::api::opstask::{self, EtcdOpsTask, states};
use crate::api::task::types;
use crate::api::{EtcdOperatorTask, TaskState};
use crate::kube::error::{ClusterError, Subject};

/// Which engine runs a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// etcd-druid, through an `EtcdOpsTask`.
    Druid,
    /// druidctl's executor (`druidctl serve` or `--local`), through an `EtcdOperatorTask`.
    Druidctl,
}

/// Whether the cluster serves `EtcdOpsTask` (its etcd-druid is v0.34 or newer), from API discovery: no RBAC
/// beyond what every authenticated user has.
pub async fn served(client: &Client) -> Result<bool, ClusterError> {
    match client.list_api_group_resources(&format!("{}/{}", opstask::GROUP, opstask::VERSION)).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == opstask::PLURAL)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(ClusterError::from_kube(e, &Subject { kind: "apigroup", name: opstask::GROUP, namespace: "" })),
    }
}

fn kube_err(e: kube::Error, name: &str, ns: &str) -> ClusterError {
    ClusterError::from_kube(e, &Subject { kind: "EtcdOpsTask", name, namespace: ns })
}

/// Every EtcdOpsTask in `namespace` (all namespaces when `None`).
pub async fn list(client: &Client, namespace: Option<&str>) -> Result<Vec<EtcdOpsTask>, ClusterError> {
    let api: Api<EtcdOpsTask> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    Ok(api.list(&ListParams::default()).await.map_err(|e| kube_err(e, "", namespace.unwrap_or_default()))?.items)
}

/// Why a new snapshot of `etcd` would be a duplicate: an unfinished EtcdOpsTask for it, or an unfinished
/// snapshot EtcdOperatorTask for it.
pub fn duplicate(etcd: &str, ops: &[EtcdOpsTask], operator: &[EtcdOperatorTask]) -> Option<String> {
    if let Some(t) = ops.iter().find(|t| t.spec.etcd_name.as_deref() == Some(etcd) && !t.is_finished()) {
        let state = if t.state().is_empty() { states::PENDING } else { t.state() };
        return Some(format!(
            "EtcdOpsTask {} for etcd {etcd} is still {state}; etcd-druid runs one task per Etcd at a time",
            t.metadata.name.as_deref().unwrap_or_default()
        ));
    }
    operator
        .iter()
        .find(|t| {
            t.spec.owner_etcd_refrence.name == etcd
                && t.spec.type_ == types::ON_DEMAND_SNAPSHOT
                && !matches!(t.state(), TaskState::Succeeded | TaskState::Failed | TaskState::Rejected)
        })
        .map(|t| {
            format!(
                "EtcdOperatorTask {} takes a snapshot of etcd {etcd} and is still {:?}",
                t.metadata.name.as_deref().unwrap_or_default(),
                t.state()
            )
        })
}

/// Refuses a snapshot of `ns/etcd` while a task of either kind takes one; `ops_served` says whether the
/// EtcdOpsTask kind exists to be listed.
pub async fn check_duplicate(client: &Client, ns: &str, etcd: &str, ops_served: bool) -> Result<(), TaskOpsError> {
    let ops = if ops_served { list(client, Some(ns)).await? } else { Vec::new() };
    let operator = Api::<EtcdOperatorTask>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| ClusterError::from_kube(e, &Subject { kind: "EtcdOperatorTask", name: "", namespace: ns }))?
        .items;
    match duplicate(etcd, &ops, &operator) {
        Some(reason) => Err(TaskOpsError::Refused(reason)),
        None => Ok(()),
    }
}

/// Creates an on-demand snapshot EtcdOpsTask (`kind` full or delta) named `<etcd>-snapshot-<kind>-<random>`.
pub async fn create_snapshot(
    client: &Client,
    ns: &str,
    etcd: &str,
    kind: &str,
    ttl_seconds: Option<i32>,
) -> Result<EtcdOpsTask, ClusterError> {
    let suffix: String = uuid::Uuid::new_v4().simple().to_string().chars().take(5).collect();
    let name = format!("{}-snapshot-{kind}-{suffix}", etcd.chars().take(200).collect::<String>());
    let mut task = EtcdOpsTask::on_demand_snapshot(&name, ns, etcd, kind);
    task.spec.ttl_seconds_after_finished = ttl_seconds;
    Api::<EtcdOpsTask>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &task)
        .await
        .map_err(|e| kube_err(e, &name, ns))
}

/// The last error's description, or the last operation's.
pub fn reason(t: &EtcdOpsTask) -> String {
    let st = t.status.clone().unwrap_or_default();
    st.last_errors
        .and_then(|e| e.last().map(|e| e.description.clone()))
        .or(st.last_operation.map(|o| o.description))
        .unwrap_or_default()
}

/// `Ok` for a succeeded task, the matching error for a rejected or failed one.
pub fn outcome(t: &EtcdOpsTask) -> Result<(), TaskOpsError> {
    let task = t.metadata.name.clone().unwrap_or_default();
    match t.state() {
        states::REJECTED => Err(TaskOpsError::Rejected { task, reason: reason(t) }),
        states::FAILED => Err(TaskOpsError::Failed { task, reason: reason(t) }),
        _ => Ok(()),
    }
}

/// Polls the task until it finished (or `timeout`), calling `on_change` with each new (state, operation).
pub async fn follow(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
    mut on_change: impl FnMut(&EtcdOpsTask),
) -> Result<EtcdOpsTask, TaskOpsError> {
    let api: Api<EtcdOpsTask> = Api::namespaced(client.clone(), ns);
    let start = tokio::time::Instant::now();
    let mut last = None;
    loop {
        let t = api.get(name).await.map_err(|e| kube_err(e, name, ns))?;
        let seen = (
            t.state().to_string(),
            t.status.as_ref().and_then(|s| s.last_operation.as_ref()).map(|o| (o.type_.clone(), o.state.clone())),
        );
        if last.as_ref() != Some(&seen) {
            on_change(&t);
            last = Some(seen);
        }
        if t.is_finished() {
            return outcome(&t).map(|()| t);
        }
        if start.elapsed() >= timeout {
            return Err(TaskOpsError::Timeout {
                task: name.into(),
                state: match t.state() {
                    states::IN_PROGRESS => "InProgress",
                    _ => "Pending",
                },
                step: t.status.as_ref().and_then(|s| s.last_operation.as_ref()).map(|o| o.type_.clone()),
                after: timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::task::{EtcdOperatorTaskSpec, NamespacedName};

    fn ops_task(etcd: &str, state: Option<&str>) -> EtcdOpsTask {
        let mut t = EtcdOpsTask::on_demand_snapshot("o", "ns", etcd, "full");
        t.status = state.map(|s| opstask::EtcdOpsTaskStatus { state: Some(s.into()), ..Default::default() });
        t
    }

    fn operator_task(etcd: &str, type_: &str) -> EtcdOperatorTask {
        EtcdOperatorTask::new(
            "x",
            EtcdOperatorTaskSpec {
                type_: type_.into(),
                config: None,
                ttl_seconds_after_finished: None,
                owner_etcd_refrence: NamespacedName { name: etcd.into(), namespace: "ns".into() },
            },
        )
    }

    #[test]
    fn an_unfinished_task_of_either_kind_on_the_same_etcd_is_a_duplicate() {
        assert!(duplicate("e", &[ops_task("e", None)], &[]).unwrap().contains("still Pending"));
        assert!(duplicate("e", &[ops_task("e", Some("InProgress"))], &[]).is_some());
        assert!(duplicate("e", &[ops_task("e", Some("Succeeded")), ops_task("other", None)], &[]).is_none());
        assert!(duplicate("e", &[], &[operator_task("e", types::ON_DEMAND_SNAPSHOT)]).is_some());
        assert!(duplicate("e", &[], &[operator_task("e", types::COPY_BACKUPS)]).is_none());
    }
}
