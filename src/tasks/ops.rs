//! What the task commands do: evaluate a task's preconditions before creating it (the same ones the
//! executor applies), create it, tell whether an executor (`druidctl serve`) is running, and follow a task
//! to its terminal state, reporting every state/step transition.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde::Serialize;

use super::preconditions::{Admission, Facts, admission};
use super::{Registry, RegistryError};
use crate::api::task::{EtcdOperatorTaskSpec, NamespacedName, OperationState};
use crate::api::{Etcd, EtcdOperatorTask, TaskState};
use crate::kube::ClusterError;
use crate::kube::error::Subject;

/// Name of `serve`'s leader Lease (kept in sync with `reconciler::controller::LEADER_LEASE`).
pub const SERVE_LEASE: &str = "druidctl-serve";

/// Errors of the task operations.
#[derive(Debug, thiserror::Error)]
pub enum TaskOpsError {
    /// Talking to the cluster failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The type or config is invalid.
    #[error(transparent)]
    Invalid(#[from] RegistryError),
    /// A precondition (or duplicate rule) refuses the task; nothing was created.
    #[error("refused: {0} (--force creates the task anyway)")]
    Refused(String),
    /// The executor rejected the task.
    #[error("task {task} was rejected: {reason}")]
    Rejected {
        /// Task name.
        task: String,
        /// Why.
        reason: String,
    },
    /// The task failed.
    #[error("task {task} failed: {reason}")]
    Failed {
        /// Task name.
        task: String,
        /// Why.
        reason: String,
    },
    /// Waiting ran out.
    #[error("task {task} is still {state} after {}s{}", after.as_secs(), step.as_deref().map(|s| format!(" (at {s})")).unwrap_or_default())]
    Timeout {
        /// Task name.
        task: String,
        /// Its state then.
        state: &'static str,
        /// Its step then.
        step: Option<String>,
        /// How long it waited.
        after: Duration,
    },
    /// An older task of the same Etcd that nothing executes would block this one forever; nothing was created.
    #[error("{0}")]
    Blocked(String),
    /// `--wait` without an executor.
    #[error(
        "no executor is running for namespace {namespace:?} (no `druidctl serve` holds lease {SERVE_LEASE}); pass --local to execute the task in this process"
    )]
    NoExecutor {
        /// Namespace.
        namespace: String,
    },
}

/// A task to create.
#[derive(Debug, Clone)]
pub struct TaskRequest {
    /// Namespace of the Etcd (and the task).
    pub namespace: String,
    /// The Etcd.
    pub etcd: String,
    /// `spec.type`.
    pub type_: String,
    /// `spec.config`.
    pub config: Option<String>,
    /// `spec.ttlSecondsAfterFinished`.
    pub ttl_seconds: Option<i32>,
}

fn kube_err(e: kube::Error, kind: &str, name: &str, ns: &str) -> ClusterError {
    ClusterError::from_kube(e, &Subject { kind, name, namespace: ns })
}

/// Short slug of a type for generated names (`OnDemandSnapshotTask` + full → `snapshot-full`).
pub fn name_slug(type_: &str, config_json: &serde_json::Value) -> String {
    use crate::api::task::types;
    match type_ {
        types::ON_DEMAND_SNAPSHOT => format!("snapshot-{}", config_json["type"].as_str().unwrap_or("x")),
        types::ON_DEMAND_SNAPSHOT_COMPACTION => "compaction".into(),
        types::ON_DEMAND_MAINTENANCE => "maintenance".into(),
        types::COPY_BACKUPS => "copy-backups".into(),
        other => other.trim_end_matches("Task").to_ascii_lowercase(),
    }
}

/// Evaluates what the executor will evaluate (config, Etcd, duplicates, preconditions) without creating
/// anything; `Err(Refused)` says why the task could only be rejected.
pub async fn precheck(client: &Client, registry: &Registry, req: &TaskRequest) -> Result<(), TaskOpsError> {
    let plan = registry.plan(&req.type_, req.config.as_deref())?;
    let etcds: Api<Etcd> = Api::namespaced(client.clone(), &req.namespace);
    let etcd = etcds.get(&req.etcd).await.map_err(|e| kube_err(e, "etcd", &req.etcd, &req.namespace))?;
    if let Some(member) = plan.named_member().filter(|m| !crate::tasks::member_restore::is_member_of(&etcd, m)) {
        return Err(crate::tasks::member_not_found(&etcd, member).into());
    }
    let tasks: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), &req.namespace);
    let others = tasks
        .list(&ListParams::default())
        .await
        .map_err(|e| kube_err(e, "EtcdOperatorTask", "", &req.namespace))?
        .items;
    let probe = new_task("(new)", req);
    let mut probe = probe;
    probe.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()));
    let key =
        |t: &EtcdOperatorTask| registry.plan(&t.spec.type_, t.spec.config.as_deref()).ok().map(|p| p.duplicate_key());
    let probe_key = plan.duplicate_key();
    let key_with_probe = |t: &EtcdOperatorTask| {
        if t.metadata.name.as_deref() == Some("(new)") { Some(probe_key.clone()) } else { key(t) }
    };
    if let Admission::Duplicate(reason) = admission(&probe, &others, key_with_probe) {
        return Err(TaskOpsError::Refused(reason));
    }
    if plan.needs_health() {
        let inputs = crate::health::collect(client, etcd).await?;
        let report = crate::health::assess(&inputs, jiff::Timestamp::now());
        plan.preconditions(&Facts::from_report(&report)).map_err(TaskOpsError::Refused)?;
    }
    Ok(())
}

fn new_task(name: &str, req: &TaskRequest) -> EtcdOperatorTask {
    let mut t = EtcdOperatorTask::new(
        name,
        EtcdOperatorTaskSpec {
            type_: req.type_.clone(),
            config: req.config.clone(),
            ttl_seconds_after_finished: req.ttl_seconds,
            owner_etcd_refrence: NamespacedName { name: req.etcd.clone(), namespace: req.namespace.clone() },
        },
    );
    t.metadata.namespace = Some(req.namespace.clone());
    t
}

/// Creates the task with a generated name `<etcd>-<slug>-<random>`.
pub async fn create(client: &Client, registry: &Registry, req: &TaskRequest) -> Result<EtcdOperatorTask, TaskOpsError> {
    let slug = registry
        .plan(&req.type_, req.config.as_deref())
        .map(|p| name_slug(&req.type_, &p.config_json()))
        .unwrap_or_else(|_| name_slug(&req.type_, &serde_json::Value::Null));
    let suffix: String = uuid::Uuid::new_v4().simple().to_string().chars().take(5).collect();
    let name = format!("{}-{slug}-{suffix}", req.etcd.chars().take(200).collect::<String>());
    let api: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), &req.namespace);
    api.create(&PostParams::default(), &new_task(&name, req))
        .await
        .map_err(|e| kube_err(e, "EtcdOperatorTask", &name, &req.namespace).into())
}

/// The identity of a live `serve` leader for `namespace` (its lease in that namespace or in `default`).
pub async fn running_executor(client: &Client, namespace: &str) -> Result<Option<String>, ClusterError> {
    for ns in [namespace, "default"] {
        let api: Api<Lease> = Api::namespaced(client.clone(), ns);
        let lease = match api.get_opt(SERVE_LEASE).await {
            Ok(l) => l,
            Err(kube::Error::Api(s)) if s.code == 403 => None,
            Err(e) => return Err(kube_err(e, "lease", SERVE_LEASE, ns)),
        };
        if let Some(l) = lease {
            let holder = l.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default();
            if !holder.is_empty() && crate::reconciler::lease::expires_in(&l, jiff::Timestamp::now()) > Duration::ZERO {
                return Ok(Some(holder));
            }
        }
    }
    Ok(None)
}

/// One observed change of a task, as `task watch -o jsonl` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Transition {
    /// When it was observed.
    pub observed_at: String,
    /// Namespace.
    pub namespace: String,
    /// Task name.
    pub task: String,
    /// `spec.type`.
    #[serde(rename = "type")]
    pub type_: String,
    /// State.
    pub state: &'static str,
    /// Step (lastOperation name).
    pub step: Option<String>,
    /// Step state.
    pub step_state: Option<&'static str>,
    /// Reason of the step.
    pub reason: Option<String>,
}

fn op_state(s: OperationState) -> &'static str {
    match s {
        OperationState::Pending => "Pending",
        OperationState::InProgress => "InProgress",
        OperationState::Completed => "Completed",
        OperationState::Failed => "Failed",
    }
}

/// The transition a task's current status represents.
pub fn transition_of(t: &EtcdOperatorTask) -> Transition {
    let op = t.status.as_ref().and_then(|s| s.last_operation.as_ref());
    Transition {
        observed_at: jiff::Timestamp::now().round(jiff::Unit::Second).map(|t| t.to_string()).unwrap_or_default(),
        namespace: t.metadata.namespace.clone().unwrap_or_default(),
        task: t.metadata.name.clone().unwrap_or_default(),
        type_: t.spec.type_.clone(),
        state: t.state().as_str(),
        step: op.map(|o| o.name.clone()),
        step_state: op.map(|o| op_state(o.state)),
        reason: op.map(|o| o.reason.clone()),
    }
}

/// What makes two observations of a task the same transition: state, step, step state, reason.
type TransitionKey = (&'static str, Option<String>, Option<&'static str>, Option<String>);

/// Follows task `name` until it is terminal (`Ok` with the task, or the error of its outcome) or `timeout`;
/// `on_change` sees every distinct state/step/reason.
pub async fn follow(
    client: &Client,
    namespace: &str,
    name: &str,
    timeout: Option<Duration>,
    mut on_change: impl FnMut(&Transition),
) -> Result<EtcdOperatorTask, TaskOpsError> {
    let api: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = crate::kube::watch::events(api, config);
    let mut last_seen: Option<EtcdOperatorTask> = None;
    let mut last_key: Option<TransitionKey> = None;
    let wait = async {
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Apply(t) | Event::InitApply(t)) => {
                    let tr = transition_of(&t);
                    let key = (tr.state, tr.step.clone(), tr.step_state, tr.reason.clone());
                    if last_key.as_ref() != Some(&key) {
                        on_change(&tr);
                        last_key = Some(key);
                    }
                    let done = t.state().is_terminal();
                    last_seen = Some(t.clone());
                    if done {
                        return Ok(t);
                    }
                }
                Ok(Event::Delete(_)) => {
                    return Err(TaskOpsError::Cluster(ClusterError::NotFound {
                        kind: "EtcdOperatorTask".into(),
                        name: name.into(),
                        namespace: namespace.into(),
                        hint: Some("it was deleted while waiting".into()),
                    }));
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "task watch failed; resuming"),
            }
        }
        Err(TaskOpsError::Cluster(ClusterError::Api("watch ended unexpectedly".into())))
    };
    let result = match timeout {
        Some(t) => match tokio::time::timeout(t, wait).await {
            Ok(r) => r,
            Err(_) => {
                let (state, step) = last_seen
                    .as_ref()
                    .map(|t| {
                        (
                            t.state().as_str(),
                            t.status.as_ref().and_then(|s| s.last_operation.as_ref()).map(|o| o.name.clone()),
                        )
                    })
                    .unwrap_or(("Pending", None));
                return Err(TaskOpsError::Timeout { task: name.into(), state, step, after: t });
            }
        },
        None => wait.await,
    }?;
    outcome(&result).map(|()| result)
}

/// `Ok` for a succeeded task, the matching error for a rejected or failed one.
pub fn outcome(t: &EtcdOperatorTask) -> Result<(), TaskOpsError> {
    let task = t.metadata.name.clone().unwrap_or_default();
    let reason =
        t.status.as_ref().and_then(|s| s.last_operation.as_ref()).map(|o| o.reason.clone()).unwrap_or_default();
    match t.state() {
        TaskState::Rejected => Err(TaskOpsError::Rejected { task, reason }),
        TaskState::Failed => Err(TaskOpsError::Failed { task, reason }),
        _ => Ok(()),
    }
}
