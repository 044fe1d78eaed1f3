//! Running one EtcdOperatorTask from the CLI, as `task create` and the shortcuts (`snapshot`, `compact`,
//! `maintenance`, `copy-backups`) do: check its preconditions, make sure something will execute it, create it,
//! and — when asked to wait — follow it to its end, executing it in this process with `--local`. The commands
//! only turn flags into [`RunOptions`] and print the [`RunEvent`]s.
//!
//! Above `tasks` (types, preconditions, create/follow), `reconciler` (the executor `--local` runs) and
//! `runbook::guard` (executor leases), which never call back into it.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, ListParams};

use crate::api::{EtcdOperatorTask, TaskState};
use crate::kube::error::Subject;
use crate::kube::{ClusterError, UsageError};
use crate::reconciler::{Reconciler, ReconcilerOptions};
use crate::tasks::Registry;
use crate::tasks::ops::{self, TaskOpsError, TaskRequest, Transition};

/// How to run a task.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// What to create.
    pub request: TaskRequest,
    /// Follow the task to its end.
    pub wait: bool,
    /// How long to follow it.
    pub timeout: Duration,
    /// Create it even if its preconditions do not hold now (the executor checks them again).
    pub force: bool,
    /// Execute it in this process (implies `wait`).
    pub local: bool,
    /// The executor identity of this process, for `--local`.
    pub identity: String,
}

/// What happens while a task runs, for the command to print.
#[derive(Debug)]
pub enum RunEvent<'a> {
    /// A sentence for the person running the command (stderr).
    Note(String),
    /// The task was created and will be followed.
    Following(&'a EtcdOperatorTask),
    /// A state or step transition of the followed task.
    Transition(&'a Transition),
}

/// How a run ended.
#[derive(Debug)]
pub enum RunOutcome {
    /// Created and not followed (no `wait`).
    Created(EtcdOperatorTask),
    /// Followed to its successful end.
    Succeeded(EtcdOperatorTask),
}

/// `NAME` or `NAMESPACE/NAME` of an Etcd, against an explicit `-n` (`flag_ns`) and the context's namespace.
pub fn etcd_target(flag_ns: Option<&str>, context_ns: &str, etcd: &str) -> Result<(String, String), UsageError> {
    match etcd.split_once('/') {
        Some((ns, name)) => {
            if let Some(explicit) = flag_ns
                && explicit != ns
            {
                return Err(UsageError(format!("--etcd {etcd} names namespace {ns:?} but -n says {explicit:?}")));
            }
            Ok((ns.to_string(), name.to_string()))
        }
        None if etcd.is_empty() => Err(UsageError("--etcd needs a name".into())),
        None => Ok((flag_ns.unwrap_or(context_ns).to_string(), etcd.to_string())),
    }
}

fn task_err(e: kube::Error, name: &str, ns: &str) -> ClusterError {
    ClusterError::from_kube(e, &Subject { kind: "EtcdOperatorTask", name, namespace: ns })
}

/// `--local` runs one Etcd's tasks in order, so it looks at the unfinished tasks of its Etcd ahead of it first:
/// - one that an executor runs (a live executor Lease, or `serve` for the namespace) is waited for; with no
///   `serve`, this process stands by to take it over should that executor go;
/// - an InProgress one whose executor is gone (a `--local` run that timed out or was killed) is taken over:
///   this process executes it first;
/// - a Pending one that nothing executes would block this one without end: refused (nothing created), naming
///   the task, since when, and the two ways to clear it.
///
/// Returns the tasks this process drives before its own.
pub async fn tasks_ahead_of_local(
    client: &Client,
    req: &TaskRequest,
    identity: &str,
    on: &mut dyn FnMut(RunEvent<'_>),
) -> Result<Vec<String>, TaskOpsError> {
    let api: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), &req.namespace);
    let tasks = api.list(&ListParams::default()).await.map_err(|e| task_err(e, "", &req.namespace))?;
    let serve = ops::running_executor(client, &req.namespace).await?;
    let cmd = crate::output::command_name();
    let mut drive = Vec::new();
    for t in tasks.items.iter().filter(|t| t.targets(&req.namespace, &req.etcd) && !t.state().is_terminal()) {
        let name = t.metadata.name.clone().unwrap_or_default();
        let since = t.metadata.creation_timestamp.as_ref().map(|c| c.0.to_string()).unwrap_or_default();
        let lease = crate::runbook::guard::live_holder(client, &req.namespace, &name, identity).await?;
        let in_progress = t.state() == TaskState::InProgress;
        match (&lease, &serve) {
            (Some(h), _) => {
                on(RunEvent::Note(format!(
                    "note: this task runs after task {name} ({}), which {} executes",
                    t.spec.type_, h.identity
                )));
                if serve.is_none() {
                    drive.push(name);
                }
            }
            (None, Some(s)) => {
                on(RunEvent::Note(format!(
                    "note: this task runs after task {name} ({}), which {s} executes",
                    t.spec.type_
                )));
            }
            (None, None) if in_progress => {
                let op = t.status.as_ref().and_then(|s| s.last_operation.as_ref());
                let at = op
                    .map(|o| {
                        format!(
                            " at {} since {}",
                            o.name,
                            o.last_transition_time.0.round(jiff::Unit::Second).unwrap_or(o.last_transition_time.0)
                        )
                    })
                    .unwrap_or_default();
                on(RunEvent::Note(format!(
                    "note: taking over task {name} ({}, InProgress{at}), whose executor stopped: it runs first",
                    t.spec.type_
                )));
                drive.push(name);
            }
            (None, None) => {
                return Err(TaskOpsError::Blocked(format!(
                    "task {name} ({}, {} since {since}) is ahead of this one for etcd {}/{} and no executor runs it, so a --local task would wait behind it forever; clear it with `{cmd} task delete -n {} {name}`, or let `{cmd} serve -n {}` execute it; nothing was created",
                    t.spec.type_,
                    t.state().as_str(),
                    req.namespace,
                    req.etcd,
                    req.namespace,
                    req.namespace
                )));
            }
        }
    }
    Ok(drive)
}

/// Creates the task `o` describes and runs it as `o` says: refused (nothing created) when a precondition does
/// not hold, or when it is to be waited for and nothing executes it; followed to its end with `wait`, executed
/// here with `local` (after the tasks of its Etcd ahead of it).
pub async fn run(
    client: &Client,
    registry: Arc<Registry>,
    o: &RunOptions,
    on: &mut dyn FnMut(RunEvent<'_>),
) -> Result<RunOutcome, TaskOpsError> {
    let req = &o.request;
    let ns = req.namespace.clone();
    if !o.force {
        ops::precheck(client, &registry, req).await?;
    }
    let wait = o.wait || o.local;
    let ahead = if o.local { tasks_ahead_of_local(client, req, &o.identity, on).await? } else { Vec::new() };
    if !o.local && ops::running_executor(client, &ns).await?.is_none() {
        if wait {
            return Err(TaskOpsError::NoExecutor { namespace: ns });
        }
        on(RunEvent::Note(format!(
            "note: no executor is running for namespace {ns:?} (`{} serve`); the task stays Pending until one runs (or create it with --local)",
            crate::output::command_name()
        )));
    }
    let task = ops::create(client, &registry, req).await?;
    if !wait {
        return Ok(RunOutcome::Created(task));
    }
    on(RunEvent::Following(&task));
    let task_name = task.metadata.name.clone().unwrap_or_default();
    let local = o.local.then(|| {
        let r = Arc::new(Reconciler::new(client.clone(), registry.clone(), ReconcilerOptions::new(&o.identity)));
        // The tasks ahead that this process takes over (or stands by for) first; its own waits behind them.
        let handles: Vec<_> = ahead
            .iter()
            .chain([&task_name])
            .map(|n| {
                let (r2, ns2, n2) = (r.clone(), ns.clone(), n.clone());
                tokio::spawn(async move { r2.run_to_completion(&ns2, &n2).await })
            })
            .collect();
        (r, handles)
    });
    let followed = ops::follow(client, &ns, &task_name, Some(o.timeout), |t| on(RunEvent::Transition(t))).await;
    if let Some((r, handles)) = local {
        // Running steps stop at a safe point and give their executor leases back.
        r.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(20), futures::future::join_all(handles)).await;
    }
    followed.map(RunOutcome::Succeeded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etcd_is_named_alone_or_with_its_namespace_which_must_agree_with_n() {
        assert_eq!(etcd_target(None, "ctx", "etcd-main").unwrap(), ("ctx".into(), "etcd-main".into()));
        assert_eq!(etcd_target(Some("a"), "ctx", "etcd-main").unwrap(), ("a".into(), "etcd-main".into()));
        assert_eq!(etcd_target(Some("a"), "ctx", "a/etcd-main").unwrap(), ("a".into(), "etcd-main".into()));
        assert_eq!(etcd_target(None, "ctx", "b/etcd-main").unwrap(), ("b".into(), "etcd-main".into()));
        assert!(etcd_target(Some("a"), "ctx", "b/etcd-main").unwrap_err().0.contains("-n says \"a\""));
        assert!(etcd_target(None, "ctx", "").is_err());
    }
}
