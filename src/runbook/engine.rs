//! The runbook engine: plan → preconditions → RBAC pre-flight → task → steps under the executor Lease.
//!
//! The journal is the `EtcdOperatorTask`: `status.lastOperation` names the step in progress or the last one
//! completed, and the journal annotation ([`crate::tasks::step::JOURNAL_ANNOTATION`]) holds each step's
//! small state (the last-known-good ConfigMap, …) and its timing. Re-running the same command finds the
//! unfinished task and continues at the first unfinished step; a step whose effect is already there
//! (`check`) is not acted again, and a completed destructive step is never repeated, even with
//! `--from-step`. A failed step leaves the task `InProgress` (paused) so that re-running continues there.
//! The operator side (prompts, progress, output) is behind [`Operator`].

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::{Api, ListParams};
use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::catalog::Runbook;
use super::rbac;
use crate::api::task::{LastOperation, OperationState};
use crate::api::{Etcd, EtcdOperatorTask, TaskState};
use crate::kube::ClusterError;
use crate::kube::error::Subject;
use crate::output::progress::PromptError;
use crate::reconciler::lease::{Acquire, LeaseLock};
use crate::reconciler::status::{TaskHandle, WriteError, operation, push_error};
use crate::reconciler::{executor_lease_name, owner_reference};
use crate::tasks::ops::{TaskOpsError, TaskRequest};
use crate::tasks::{Facts, Readiness, Step, StepContext, StepError};

/// How to run a runbook.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Namespace of the Etcd.
    pub namespace: String,
    /// The Etcd.
    pub etcd: String,
    /// The task config (`member: …` for member restore).
    pub config: Option<String>,
    /// Confirm every destructive step without asking (CI).
    pub yes: bool,
    /// Only print the plan; change nothing.
    pub plan_only: bool,
    /// Only continue an unfinished run; never start a new one.
    pub resume_only: bool,
    /// Start at this step (experts); completed destructive steps are still never repeated.
    pub from_step: Option<String>,
    /// Proceed although the newest full snapshot is old or absent.
    pub accept_data_loss: bool,
    /// Who executes (written into the executor Lease).
    pub identity: String,
    /// Duration of the executor Lease (renewed every fifth of it).
    pub lease_duration: Duration,
    /// The command that continues this run, printed when interrupted.
    pub resume_command: String,
    /// The command that aborts this run with its compensating cleanup.
    pub abort_command: String,
    /// Why a run would be refused, found before the engine (a machine replacement that would cost an Etcd its
    /// quorum): `--plan` still shows the plan and gives this as its verdict; a run is refused with it.
    pub known_refusal: Option<String>,
    /// Permissions the plan needs beyond the Etcd's namespace (a machine replacement's deletion, possibly in the
    /// cluster holding the Machines), checked with the RBAC pre-flight.
    pub extra_accesses: Vec<ExtraAccess>,
}

/// Permissions a plan needs in another namespace or cluster.
#[derive(Clone)]
pub struct ExtraAccess {
    /// Client of the cluster to ask.
    pub client: Client,
    /// Namespace to ask about.
    pub namespace: String,
    /// What is needed there.
    pub accesses: Vec<rbac::Access>,
    /// How to name that cluster in the message (`None`: the current one).
    pub cluster: Option<String>,
}

impl std::fmt::Debug for ExtraAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtraAccess")
            .field("namespace", &self.namespace)
            .field("accesses", &self.accesses)
            .field("cluster", &self.cluster)
            .finish()
    }
}

impl RunOptions {
    /// Defaults for `etcd` in `namespace`.
    pub fn new(namespace: &str, etcd: &str) -> RunOptions {
        RunOptions {
            namespace: namespace.into(),
            etcd: etcd.into(),
            config: None,
            yes: false,
            plan_only: false,
            resume_only: false,
            from_step: None,
            accept_data_loss: false,
            identity: crate::reconciler::lease::process_identity("druidctl-runbook"),
            lease_duration: Duration::from_secs(10),
            resume_command: String::new(),
            abort_command: String::new(),
            known_refusal: None,
            extra_accesses: Vec::new(),
        }
    }
}

/// One step as the plan shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedStep {
    /// 1-based position.
    pub index: usize,
    /// Stable name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Whether it destroys data.
    pub destructive: bool,
    /// Equivalent kubectl commands.
    pub kubectl: Vec<String>,
    /// Completed in an earlier run of this task.
    pub done: bool,
}

/// The newest full snapshot as the plan shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupAge {
    /// Age in seconds; `None` when no full snapshot is known.
    pub age_seconds: Option<i64>,
    /// Older than the freshness threshold (or absent).
    pub stale: bool,
    /// The freshness threshold.
    pub threshold_seconds: i64,
}

/// Something the engine reports, streamed as one JSON line each with `-o jsonl`.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "camelCase")]
pub enum Event {
    /// The plan, before anything changes.
    #[serde(rename_all = "camelCase")]
    Plan {
        /// Runbook name.
        runbook: String,
        /// Namespace.
        namespace: String,
        /// Etcd.
        etcd: String,
        /// Unfinished task being continued, if any.
        resuming: Option<String>,
        /// The steps.
        steps: Vec<PlannedStep>,
        /// The newest full snapshot (quorum-loss recovery).
        backup: Option<BackupAge>,
        /// What can be lost.
        data_loss: String,
    },
    /// A warning the operator must read.
    #[serde(rename_all = "camelCase")]
    Warning {
        /// The warning.
        message: String,
    },
    /// The task that journals this run.
    #[serde(rename_all = "camelCase")]
    Task {
        /// Task name.
        name: String,
        /// Whether it was created now (else resumed).
        created: bool,
    },
    /// Waiting for another executor's lease.
    #[serde(rename_all = "camelCase")]
    WaitingForLease {
        /// Its holder.
        holder: String,
        /// Expires in at most this many ms.
        expires_in_ms: u64,
    },
    /// A step starts.
    #[serde(rename_all = "camelCase")]
    StepStarted {
        /// 1-based position.
        index: usize,
        /// Total steps.
        total: usize,
        /// Name.
        name: String,
        /// Description.
        description: String,
        /// Destructive.
        destructive: bool,
    },
    /// A step waits for its effect, with the reason it is not there yet.
    #[serde(rename_all = "camelCase")]
    StepWaiting {
        /// Name.
        name: String,
        /// Why not ready (seeds/002 words where they apply).
        reason: String,
    },
    /// A transient error, retried.
    #[serde(rename_all = "camelCase")]
    StepRetry {
        /// Name.
        name: String,
        /// The error.
        error: String,
        /// Next attempt in ms.
        retry_in_ms: u64,
    },
    /// A step finished.
    #[serde(rename_all = "camelCase")]
    StepFinished {
        /// Name.
        name: String,
        /// `done`, `already done` or `done in an earlier run`.
        how: String,
        /// Wall time of the step in ms.
        duration_ms: u64,
        /// Of which waiting for the cluster (verify polling, retries after transient errors) in ms.
        waited_ms: u64,
        /// Of which druidctl acting: API writes and reads, journaling, deciding (`duration - waited`) in ms.
        acted_ms: u64,
    },
    /// What a completed step found (sizes measured, space freed), one line each.
    #[serde(rename_all = "camelCase")]
    StepReport {
        /// Name.
        name: String,
        /// The lines.
        lines: Vec<String>,
    },
    /// Stopped at a safe point (Ctrl-C or lost lease).
    #[serde(rename_all = "camelCase")]
    Interrupted {
        /// The step that will run next.
        next_step: String,
        /// The command that continues.
        resume_command: String,
    },
    /// A step failed; the task stays paused at it.
    #[serde(rename_all = "camelCase")]
    StepFailed {
        /// Name.
        name: String,
        /// Why.
        error: String,
    },
    /// `--plan`: whether a run would start now, in one line.
    #[serde(rename_all = "camelCase")]
    Verdict {
        /// Whether a run would be refused now.
        refused: bool,
        /// Why (or that it would start).
        reason: String,
    },
    /// Every step completed.
    #[serde(rename_all = "camelCase")]
    Finished {
        /// The timing summary.
        summary: Summary,
    },
}

/// Timing of one step.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepTiming {
    /// Name.
    pub name: String,
    /// How it ended (`done`, `already done`, `done in an earlier run`).
    pub how: String,
    /// Wall time in ms (0 when done in an earlier run).
    pub duration_ms: u64,
    /// Time spent waiting for the cluster (verify polling, retries after transient errors), in ms.
    pub waited_ms: u64,
    /// Time spent acting: API writes and reads, journaling and the step's decisions (`duration - waited`), in ms.
    pub acted_ms: u64,
    /// Whether it is destructive.
    pub destructive: bool,
}

/// What a run did, with the engine's own overhead (total minus waiting for the cluster and the operator).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// The task.
    pub task: String,
    /// Per step.
    pub steps: Vec<StepTiming>,
    /// Wall time of this run in ms.
    pub total_ms: u64,
    /// Time waiting for etcd/pods/druid (verify polling) and for a previous executor's lease, in ms.
    pub waited_ms: u64,
    /// Time waiting for the operator's confirmations, in ms.
    pub prompt_ms: u64,
    /// druidctl's own share, `total - waited - prompt`: acting in the steps plus deciding outside them.
    pub overhead_ms: u64,
    /// Of the own share, acting in the steps (the sum of the steps' `actedMs`), in ms.
    pub acted_ms: u64,
    /// Of the own share, deciding outside the steps (reading the cluster, evaluating preconditions, planning,
    /// taking the lease, creating and closing the journal): `overhead - acted`, in ms.
    pub decided_ms: u64,
    /// What a verification step of this run could not check (e.g. a member's served certificate); a run that
    /// completes with any ends with the exit code "done, not verified".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unverified: Vec<String>,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// `--plan`: nothing changed.
    Planned,
    /// Every step completed.
    Completed(Summary),
    /// Stopped at a safe point; `resume_command` continues.
    Interrupted {
        /// Timing so far.
        summary: Summary,
        /// The command that continues.
        resume_command: String,
    },
}

/// The operator side: output and confirmations.
pub trait Operator: Send + Sync {
    /// Reports an event.
    fn event(&self, event: &Event);
    /// Whether confirmations can be asked (a terminal on stdin).
    fn can_prompt(&self) -> bool;
    /// Asks a question; with `expected`, the operator must type it (destructive steps).
    fn confirm(&self, question: &str, expected: Option<&str>) -> Result<(), PromptError>;
}

/// Why a runbook did not complete.
#[derive(Debug, thiserror::Error)]
pub enum RunbookError {
    /// Talking to the cluster failed (not found, forbidden, unreachable, …).
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A precondition or safety check refused the run; nothing was changed.
    #[error("{0}")]
    Rejected(String),
    /// The RBAC pre-flight found calls the plan makes that are forbidden; nothing was changed.
    #[error("missing permissions in namespace {namespace:?}: {}; nothing was changed", denied.join(", "))]
    Forbidden {
        /// Namespace.
        namespace: String,
        /// The denied calls.
        denied: Vec<String>,
    },
    /// A confirmation could not be asked or was declined.
    #[error(transparent)]
    Prompt(#[from] PromptError),
    /// A step failed; the task is paused at it.
    #[error("step {step} failed: {reason}; the task {task} is paused there, re-run `{resume}` to continue")]
    StepFailed {
        /// The step.
        step: String,
        /// Why.
        reason: String,
        /// The task.
        task: String,
        /// The command that continues.
        resume: String,
    },
    /// Another executor holds the task.
    #[error("task {task} is being executed by {holder}{}; nothing was changed — wait for it to finish, or run `{resume}` once its lease has expired (within {}s of its last renewal)", since.as_ref().map(|s| format!(" since {s}")).unwrap_or_default(), expires_in.as_secs().max(1))]
    Busy {
        /// Task.
        task: String,
        /// Holder identity.
        holder: String,
        /// Since when it holds the lease.
        since: Option<String>,
        /// Until expiry.
        expires_in: Duration,
        /// The command that takes over once the lease expired.
        resume: String,
    },
    /// The operator declined the confirmation.
    #[error("not confirmed; {changed}")]
    NotConfirmed {
        /// What has changed so far and the ways out, one sentence.
        changed: String,
    },
    /// The task was deleted while the run executed: the current step was finished and the cleanup ran.
    #[error("task {task} was deleted during the run; {what}")]
    Deleted {
        /// Task.
        task: String,
        /// What was finished and cleaned up, and what to do next.
        what: String,
    },
    /// Writing the journal failed.
    #[error("writing the journal of task {task}: {source}")]
    Journal {
        /// Task.
        task: String,
        /// Cause.
        source: WriteError,
    },
}

fn cluster(e: kube::Error, kind: &str, name: &str, ns: &str) -> RunbookError {
    RunbookError::Cluster(ClusterError::from_kube(e, &Subject { kind, name, namespace: ns }))
}

fn from_ops(e: TaskOpsError) -> RunbookError {
    match e {
        TaskOpsError::Cluster(c) => RunbookError::Cluster(c),
        other => RunbookError::Rejected(other.to_string()),
    }
}

/// The unfinished task of this runbook for this Etcd (and config), oldest first.
async fn unfinished_task(
    client: &Client,
    rb: &Runbook,
    o: &RunOptions,
) -> Result<Option<EtcdOperatorTask>, RunbookError> {
    let api: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), &o.namespace);
    let list = api.list(&ListParams::default()).await.map_err(|e| cluster(e, "EtcdOperatorTask", "", &o.namespace))?;
    let mut found: Vec<EtcdOperatorTask> = list
        .items
        .into_iter()
        .filter(|t| t.spec.type_ == rb.task_type && t.targets(&o.namespace, &o.etcd) && !t.state().is_terminal())
        .filter(|t| t.metadata.deletion_timestamp.is_none())
        .filter(|t| t.spec.config.as_deref().map(str::trim) == o.config.as_deref().map(str::trim))
        .collect();
    found.sort_by_key(|t| (t.metadata.creation_timestamp.as_ref().map(|c| c.0), t.metadata.name.clone()));
    Ok(found.into_iter().next())
}

/// Index of the first unfinished step given the last recorded operation.
pub fn resume_index(names: &[String], last: Option<&LastOperation>) -> usize {
    let Some(last) = last else { return 0 };
    match names.iter().position(|n| *n == last.name) {
        Some(i) if last.state == OperationState::Completed => i + 1,
        Some(i) => i,
        None => 0,
    }
}

/// Test-only kill points (hidden, like `DRUIDCTL_RUNBOOK_LEASE`): `DRUIDCTL_RUNBOOK_ABORT_AT=<step>:<phase>`
/// (1-based step index, as in the plan) makes the process kill itself with SIGKILL — nothing flushed,
/// no lease released, no journal written — when that point is reached. The kill-matrix test uses it to
/// cut a run at every step boundary and in the middle of every step. Not an operator feature.
pub const ABORT_AT_ENV: &str = "DRUIDCTL_RUNBOOK_ABORT_AT";

/// Where in a step a test-only kill point cuts the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillPhase {
    /// Boundary before the step: marked in progress in the journal, nothing acted yet (before `check`).
    BeforeAct,
    /// In the middle of the step: acted (or found already done), not yet verified nor journaled complete.
    AfterAct,
    /// Boundary after the step: its completion is journaled.
    AfterJournal,
}

impl KillPhase {
    /// Every phase, in the order a step reaches them.
    pub const ALL: [KillPhase; 3] = [KillPhase::BeforeAct, KillPhase::AfterAct, KillPhase::AfterJournal];

    /// The name used in [`ABORT_AT_ENV`].
    pub fn as_str(self) -> &'static str {
        match self {
            KillPhase::BeforeAct => "before-act",
            KillPhase::AfterAct => "after-act",
            KillPhase::AfterJournal => "after-journal",
        }
    }
}

/// Parses a kill point `<step-index>:<phase>` (1-based index).
pub fn parse_kill_point(s: &str) -> Option<(usize, KillPhase)> {
    let (i, p) = s.trim().split_once(':')?;
    let phase = KillPhase::ALL.into_iter().find(|k| k.as_str() == p.trim())?;
    Some((i.trim().parse().ok().filter(|i| *i > 0)?, phase))
}

/// Kills the process (SIGKILL) when the test-only kill point `(index, phase)` is the configured one.
fn kill_point(index: usize, phase: KillPhase) {
    static AT: std::sync::OnceLock<Option<(usize, KillPhase)>> = std::sync::OnceLock::new();
    let at = AT.get_or_init(|| std::env::var(ABORT_AT_ENV).ok().and_then(|v| parse_kill_point(&v)));
    if *at == Some((index, phase)) {
        // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        std::process::abort();
    }
}

pub use crate::tasks::quorum_loss::{LAST_KNOWN_GOOD_PREFIX, last_known_good_key};

/// Restores the ConfigMap `step` recorded as last-known-good before it failed permanently.
/// `Ok(None)` when the step recorded nothing; otherwise what was done, for the task status.
pub async fn restore_last_known_good(cx: &StepContext, step: &str) -> Result<Option<String>, StepError> {
    let Some(rec) = cx.journal(&last_known_good_key(step)) else { return Ok(None) };
    let (Some("ConfigMap"), Some(name)) = (rec["kind"].as_str(), rec["name"].as_str()) else {
        return Err(StepError::Permanent(format!(
            "the last-known-good copy of step {step} is not a recorded ConfigMap: {rec}"
        )));
    };
    let data: std::collections::BTreeMap<String, String> =
        serde_json::from_value(rec["data"].clone()).map_err(|e| {
            StepError::Permanent(format!("the last-known-good copy of configmap {name} is unreadable: {e}"))
        })?;
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(cx.client.clone(), cx.namespace());
    let mut cm = api.get(name).await.map_err(|e| StepError::from_kube(&format!("reading configmap {name}"), e))?;
    if cm.data.clone().unwrap_or_default() == data {
        return Ok(Some(format!("configmap {name} still has its last-known-good content")));
    }
    cm.data = Some(data);
    api.replace(name, &Default::default(), &cm)
        .await
        .map_err(|e| StepError::from_kube(&format!("restoring configmap {name}"), e))?;
    Ok(Some(format!("restored configmap {name} to its last-known-good content recorded before step {step}")))
}

fn journal_key(step: &str) -> String {
    format!("step/{step}")
}

/// Whether the journal of `task` records `step` as completed.
fn completed_in_journal(cx: &StepContext, step: &str) -> bool {
    cx.journal(&journal_key(step)).is_some_and(|v| v["completedAt"].is_string())
}

/// Runs runbook `rb` as `o` says, reporting to `op`; `stop` (Ctrl-C) stops at the next safe point.
pub async fn run(
    client: &Client,
    rb: &Runbook,
    o: &RunOptions,
    op: &dyn Operator,
    stop: CancellationToken,
) -> Result<Outcome, RunbookError> {
    let started = Instant::now();
    let ns = o.namespace.as_str();
    let etcds: Api<Etcd> = Api::namespaced(client.clone(), ns);
    let etcd = etcds.get(&o.etcd).await.map_err(|e| cluster(e, "etcd", &o.etcd, ns))?;
    let plan = rb
        .kind()
        .parse(o.config.as_deref())
        .map_err(|e| RunbookError::Rejected(format!("invalid config for {}: {e}", rb.task_type)))?;
    if let Some(member) = plan.named_member().filter(|m| !crate::tasks::member_restore::is_member_of(&etcd, m)) {
        return Err(crate::tasks::member_not_found(&etcd, member).into());
    }
    let steps = plan.steps(&etcd);
    let names: Vec<String> = steps.iter().map(|s| s.name()).collect();

    let all = super::guard::runbook_tasks(client, ns, &o.etcd, &[rb.task_type]).await?;
    let all: Vec<EtcdOperatorTask> = all
        .into_iter()
        .filter(|t| t.spec.config.as_deref().map(str::trim) == o.config.as_deref().map(str::trim))
        .collect();
    let existing = unfinished_task(client, rb, o).await?;
    // Why a run would be refused now; `--plan` shows the plan anyway and says it in one line.
    let mut refusal: Option<RunbookError> = None;
    let mut backup = None;
    let held_for_cleanup = |t: &&EtcdOperatorTask| {
        t.metadata.deletion_timestamp.is_some()
            && t.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == super::guard::RUNBOOK_FINALIZER))
    };
    if let Some(deleting) = all.iter().find(held_for_cleanup) {
        let tname = deleting.metadata.name.clone().unwrap_or_default();
        refusal = Some(match super::guard::live_holder(client, ns, &tname, &o.identity).await? {
            Some(h) => busy(&tname, h, o),
            None => RunbookError::Rejected(format!(
                "task {tname} of this runbook is being deleted but its compensating cleanup has not run; run `{}` to clean up (etcd-druid reconciles again, protection back on) and let it go",
                o.abort_command
            )),
        });
    } else if let Some(t) = &existing {
        let tname = t.metadata.name.clone().unwrap_or_default();
        if let Some(h) = super::guard::live_holder(client, ns, &tname, &o.identity).await? {
            refusal = Some(busy(&tname, h, o));
        }
    } else if o.resume_only {
        refusal = Some(RunbookError::Rejected(format!(
            "there is no unfinished {} run for etcd {ns}/{} to resume; run it without --resume to start one",
            rb.name, o.etcd
        )));
    } else {
        // Preconditions from the health model, before anything is changed.
        let inputs = crate::health::collect(client, etcd.clone()).await?;
        let report = crate::health::assess(&inputs, jiff::Timestamp::now());
        if let Err(why) = plan.preconditions(&Facts::from_report(&report)) {
            refusal = Some(RunbookError::Rejected(why));
        }
        if rb.needs_backup {
            let full = report.backups.full.as_ref();
            backup = Some(BackupAge {
                age_seconds: full.and_then(|f| f.age_seconds),
                stale: full.is_none_or(|f| f.stale),
                threshold_seconds: full
                    .map(|f| f.threshold_seconds)
                    .unwrap_or(crate::health::assess::FULL_SNAPSHOT_STALE_SECONDS),
            });
        }
    }

    if refusal.is_none()
        && let Some(why) = &o.known_refusal
    {
        refusal = Some(RunbookError::Rejected(why.clone()));
    }
    let journal_cx = existing.as_ref().map(|t| StepContext::new(client.clone(), t.clone(), etcd.clone()));
    let mut start = existing
        .as_ref()
        .map(|t| resume_index(&names, t.status.as_ref().and_then(|s| s.last_operation.as_ref())))
        .unwrap_or(0);
    if let Some(from) = &o.from_step {
        start = names.iter().position(|n| n == from).ok_or_else(|| {
            RunbookError::Rejected(format!(
                "--from-step {from:?} is not a step of {}; steps: {}",
                rb.name,
                names.join(", ")
            ))
        })?;
    }
    let planned: Vec<PlannedStep> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| PlannedStep {
            index: i + 1,
            name: s.name(),
            description: s.description(),
            destructive: s.destructive(),
            kubectl: s.kubectl().iter().map(|k| with_namespace(k, ns)).collect(),
            done: i < start || journal_cx.as_ref().is_some_and(|cx| completed_in_journal(cx, &s.name())),
        })
        .collect();
    if !o.plan_only
        && let Some(r) = refusal.take()
    {
        return Err(r);
    }
    op.event(&Event::Plan {
        runbook: rb.name.into(),
        namespace: ns.into(),
        etcd: o.etcd.clone(),
        resuming: existing.as_ref().and_then(|t| t.metadata.name.clone()),
        steps: planned.clone(),
        backup: backup.clone(),
        data_loss: rb.data_loss.into(),
    });
    if o.plan_only {
        let reason = match refusal {
            Some(r) => format!("a run would be refused now: {r}"),
            None => "a run would start now (after the confirmation of this plan)".to_string(),
        };
        op.event(&Event::Verdict { refused: reason.starts_with("a run would be refused"), reason });
        return Ok(Outcome::Planned);
    }

    let mut prompt_time = Duration::ZERO;
    // Without a terminal, only --yes may approve the plan: refuse before any change.
    let ahead = planned.iter().skip(start).any(|s| !s.done);
    if ahead && !o.yes && !op.can_prompt() {
        let action = match planned.iter().skip(start).find(|s| s.destructive && !s.done) {
            Some(first) => format!("the plan of {} (step {} destroys data)", rb.name, first.name),
            None => format!("the plan of {}", rb.name),
        };
        return Err(PromptError::NoTerminal { action }.into());
    }
    if let Some(b) = &backup
        && b.stale
    {
        let age = match b.age_seconds {
            Some(a) => format!(
                "is {} old (threshold {})",
                crate::output::age::human(a),
                crate::output::age::human(b.threshold_seconds)
            ),
            None => "was not found".to_string(),
        };
        let message = format!("the newest full snapshot of etcd {ns}/{} {age}; {}", o.etcd, rb.data_loss);
        op.event(&Event::Warning { message: message.clone() });
        if !o.accept_data_loss {
            if !op.can_prompt() {
                return Err(RunbookError::Rejected(format!("{message} Pass --accept-data-loss to recover anyway.")));
            }
            let t = Instant::now();
            let answer = blocking(|| op.confirm("Recover from this backup and lose what is not in it?", None));
            prompt_time += t.elapsed();
            match answer {
                Ok(()) => {}
                Err(PromptError::Declined(_)) => {
                    return Err(RunbookError::NotConfirmed { changed: changed_so_far(&[], o) });
                }
                Err(other) => return Err(other.into()),
            }
        }
    }

    // RBAC pre-flight: every call the plan makes, before the first mutation.
    let denied = rbac::denied(client, ns, &rb.accesses()).await;
    if !denied.is_empty() {
        return Err(RunbookError::Forbidden { namespace: ns.into(), denied });
    }
    for x in &o.extra_accesses {
        let denied = rbac::denied(&x.client, &x.namespace, &x.accesses).await;
        if !denied.is_empty() {
            let at = x.cluster.as_deref().map(|c| format!(" (in the {c})")).unwrap_or_default();
            let denied = denied.into_iter().map(|d| format!("{d}{at}")).collect();
            return Err(RunbookError::Forbidden { namespace: x.namespace.clone(), denied });
        }
    }

    // The operator approves the whole plan, by typing the Etcd's name, before the first write.
    let remaining: Vec<&PlannedStep> = planned.iter().skip(start).filter(|s| !s.done).collect();
    if !o.yes && !remaining.is_empty() {
        let destructive = remaining.iter().filter(|s| s.destructive).count();
        let question = format!(
            "Run the {} remaining step(s) of this plan on etcd {ns}/{} ({destructive} destructive)?",
            remaining.len(),
            o.etcd
        );
        let t = Instant::now();
        let answer = blocking(|| op.confirm(&question, Some(&o.etcd)));
        prompt_time += t.elapsed();
        match answer {
            Ok(()) => {}
            Err(PromptError::Declined(_)) => {
                let done: Vec<String> = planned.iter().filter(|s| s.done).map(|s| s.name.clone()).collect();
                return Err(RunbookError::NotConfirmed { changed: changed_so_far(&done, o) });
            }
            Err(other) => return Err(other.into()),
        }
    }

    // The task is the journal: continue the unfinished one or create it.
    let (task, created) = match existing {
        Some(t) => (t, false),
        None => {
            let registry = super::catalog::registry();
            let req = TaskRequest {
                namespace: ns.into(),
                etcd: o.etcd.clone(),
                type_: rb.task_type.into(),
                config: o.config.clone(),
                ttl_seconds: None,
            };
            (crate::tasks::ops::create(client, &registry, &req).await.map_err(from_ops)?, true)
        }
    };
    // Deleting the task waits for the compensating cleanup (by this run, or by `runbook abort`).
    let task = super::guard::add_finalizer(client, &task).await?;
    let task_name = task.metadata.name.clone().unwrap_or_default();
    op.event(&Event::Task { name: task_name.clone(), created });

    // Exactly one executor: the task's executor Lease.
    let own = o.identity.clone();
    let lock = LeaseLock::new(client.clone(), ns, &executor_lease_name(&task_name), &o.identity, o.lease_duration)
        .owned_by(owner_reference(&task))
        .taking_over(move |h| super::guard::holder_is_dead_here(h, &own));
    let waited_lease = Duration::ZERO;
    // Taken before the first step; a live holder (another terminal or machine) refuses this run. A lease of a
    // process on this host that no longer exists is taken over at once (it cannot renew it any more).
    if let Some(h) = super::guard::live_holder(client, ns, &task_name, &o.identity).await? {
        return Err(busy(&task_name, h, o));
    }
    match lock.try_acquire().await.map_err(|e| cluster(e, "lease", &executor_lease_name(&task_name), ns))? {
        Acquire::Acquired => {}
        Acquire::HeldBy { holder, expires_in } => {
            let since = None;
            return Err(busy(&task_name, super::guard::Holder { identity: holder, since, expires_in }, o));
        }
    }
    if stop.is_cancelled() {
        lock.release().await;
        return Ok(Outcome::Interrupted {
            summary: empty_summary(&task_name, started),
            resume_command: o.resume_command.clone(),
        });
    }
    let stop_renewing = CancellationToken::new();
    let lost = lock.keep_renewed(stop_renewing.clone());
    let halt = CancellationToken::new();
    let watcher = {
        let (halt, lost, stop) = (halt.clone(), lost.clone(), stop.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = lost.cancelled() => halt.cancel(),
                _ = stop.cancelled() => halt.cancel(),
                _ = halt.cancelled() => {}
            }
        })
    };

    let result =
        execute(client, o, op, task, &etcd, &steps, start, created, &halt, &mut prompt_time, started, waited_lease)
            .await;
    halt.cancel();
    stop_renewing.cancel();
    let _ = watcher.await;
    lock.release().await;
    result
}

fn busy(task: &str, h: super::guard::Holder, o: &RunOptions) -> RunbookError {
    RunbookError::Busy {
        task: task.into(),
        holder: h.identity,
        since: h.since,
        expires_in: h.expires_in,
        resume: o.resume_command.clone(),
    }
}

/// What has changed so far (the completed steps) and the two ways out, as one sentence.
pub fn changed_so_far(done: &[String], o: &RunOptions) -> String {
    if done.is_empty() {
        return "nothing was changed".into();
    }
    format!(
        "changed so far: step(s) {} completed; continue with `{}`, or undo with `{}`",
        done.join(", "),
        o.resume_command,
        o.abort_command
    )
}

/// A plan's kubectl line acting in `ns` (every `kubectl` of it, also inside `$(…)`).
pub fn with_namespace(line: &str, ns: &str) -> String {
    line.replace("kubectl ", &format!("kubectl -n {ns} "))
}

/// Runs a blocking prompt without starving the runtime (the executor lease keeps being renewed meanwhile).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

fn empty_summary(task: &str, started: Instant) -> Summary {
    let total = started.elapsed().as_millis() as u64;
    Summary {
        task: task.into(),
        steps: vec![],
        total_ms: total,
        waited_ms: 0,
        prompt_ms: 0,
        overhead_ms: total,
        acted_ms: 0,
        decided_ms: total,
        unverified: Vec::new(),
    }
}

#[allow(clippy::too_many_arguments)]
async fn execute(
    client: &Client,
    o: &RunOptions,
    op: &dyn Operator,
    task: EtcdOperatorTask,
    etcd: &Etcd,
    steps: &[Box<dyn Step>],
    start: usize,
    created: bool,
    halt: &CancellationToken,
    prompt_time: &mut Duration,
    started: Instant,
    waited_lease: Duration,
) -> Result<Outcome, RunbookError> {
    let ns = o.namespace.as_str();
    let task_name = task.metadata.name.clone().unwrap_or_default();
    let journal_err = |source: WriteError| RunbookError::Journal { task: task_name.clone(), source };
    let mut handle = TaskHandle::new(Api::namespaced(client.clone(), ns), task);
    handle.refresh().await.map_err(journal_err)?;
    if created || handle.current.state() == TaskState::Pending {
        // The runbook admits its own task: preconditions were evaluated above.
        handle
            .compare_and_swap(|s| {
                s.state = Some(TaskState::InProgress);
                s.initiated_at.get_or_insert_with(|| Time(jiff::Timestamp::now()));
                s.last_operation = Some(operation(
                    "Admission",
                    OperationState::Completed,
                    "preconditions hold; executed in-process by the runbook",
                ));
            })
            .await
            .map_err(journal_err)?;
    }
    let cx = StepContext::new(client.clone(), handle.current.clone(), etcd.clone());
    let total = steps.len();
    let mut timings: Vec<StepTiming> = Vec::new();
    let mut unverified: Vec<String> = Vec::new();
    let mut waited_total = waited_lease;
    for (i, step) in steps.iter().enumerate() {
        let name = step.name();
        if i < start || (step.destructive() && completed_in_journal(&cx, &name)) {
            timings.push(StepTiming {
                name: name.clone(),
                how: "done in an earlier run".into(),
                duration_ms: 0,
                waited_ms: 0,
                acted_ms: 0,
                destructive: step.destructive(),
            });
            continue;
        }
        // A deleted task: the previous step is finished; clean up instead of starting the next one.
        if handle.refresh().await.is_ok() && handle.current.metadata.deletion_timestamp.is_some() {
            return Err(aborted_by_deletion(client, o, op, &mut handle, &timings, &name).await);
        }
        if halt.is_cancelled() {
            op.event(&Event::Interrupted { next_step: name, resume_command: o.resume_command.clone() });
            return Ok(interrupted(&task_name, timings, started, waited_total, *prompt_time, o));
        }
        let step_started = Instant::now();
        op.event(&Event::StepStarted {
            index: i + 1,
            total,
            name: name.clone(),
            description: step.description(),
            destructive: step.destructive(),
        });
        let running = handle
            .current
            .status
            .as_ref()
            .and_then(|s| s.last_operation.as_ref())
            .is_some_and(|l| l.name == name && l.state == OperationState::InProgress);
        if !running {
            let d = step.description();
            handle
                .update_as_executor(|s| {
                    s.last_operation = Some(operation(&name, OperationState::InProgress, d.clone()))
                })
                .await
                .map_err(journal_err)?;
        }
        kill_point(i + 1, KillPhase::BeforeAct);
        let mut waited = Duration::ZERO;
        let outcome = run_step(i + 1, step.as_ref(), &cx, op, o, etcd, halt, prompt_time, &mut waited).await;
        waited_total += waited;
        match outcome {
            Ok(Some(how)) => {
                // In whole ms, so that waited + acted = duration exactly in every report.
                let duration_ms = step_started.elapsed().as_millis() as u64;
                let waited_ms = (waited.as_millis() as u64).min(duration_ms);
                let acted_ms = duration_ms - waited_ms;
                let warnings = step.warnings(&cx);
                unverified.extend(step.unverified(&cx).into_iter().map(|u| format!("{name}: {u}")));
                for w in &warnings {
                    op.event(&Event::Warning { message: format!("{name}: {w}") });
                }
                let how = if warnings.is_empty() { how } else { "done with warnings" };
                let rec = json!({"completedAt": jiff::Timestamp::now().to_string(), "durationMs": duration_ms, "waitedMs": waited_ms, "actedMs": acted_ms, "how": how, "warnings": warnings});
                cx.record(&journal_key(&name), rec).await.map_err(|e| RunbookError::StepFailed {
                    step: name.clone(),
                    reason: e.to_string(),
                    task: task_name.clone(),
                    resume: o.resume_command.clone(),
                })?;
                // Continue from the copy the journal write returned: the status write below then does not
                // conflict with it (a 409, a re-read and a second write).
                if let Some(t) = cx.take_written() {
                    handle.current = t;
                }
                handle
                    .update_as_executor(|s| s.last_operation = Some(operation(&name, OperationState::Completed, how)))
                    .await
                    .map_err(journal_err)?;
                kill_point(i + 1, KillPhase::AfterJournal);
                let t = StepTiming {
                    name: name.clone(),
                    how: how.into(),
                    duration_ms,
                    waited_ms,
                    acted_ms,
                    destructive: step.destructive(),
                };
                op.event(&Event::StepFinished {
                    name: name.clone(),
                    how: how.into(),
                    duration_ms: t.duration_ms,
                    waited_ms: t.waited_ms,
                    acted_ms: t.acted_ms,
                });
                let lines = step.report(&cx);
                if !lines.is_empty() {
                    op.event(&Event::StepReport { name: name.clone(), lines });
                }
                timings.push(t);
            }
            Ok(None) => {
                op.event(&Event::Interrupted { next_step: name, resume_command: o.resume_command.clone() });
                return Ok(interrupted(&task_name, timings, started, waited_total, *prompt_time, o));
            }
            Err(StepFailure::Step(e)) => {
                let mut reason = e.to_string();
                // Automatic fallback: put back what the step changed, from the copy it journaled before.
                match restore_last_known_good(&cx, &name).await {
                    Ok(Some(done)) => {
                        op.event(&Event::Warning { message: format!("step {name} failed; {done}") });
                        reason = format!("{reason}; {done}");
                    }
                    Ok(None) => {}
                    Err(r) => reason = format!("{reason}; restoring the last-known-good copy failed too: {r}"),
                }
                op.event(&Event::StepFailed { name: name.clone(), error: reason.clone() });
                // Paused, not failed: re-running continues at this step.
                let _ = handle
                    .update_as_executor(|s| {
                        s.last_operation = Some(operation(&name, OperationState::Failed, reason.clone()));
                        push_error(s, "StepFailed", format!("{name}: {reason}"));
                    })
                    .await;
                return Err(RunbookError::StepFailed {
                    step: name,
                    reason,
                    task: task_name.clone(),
                    resume: o.resume_command.clone(),
                });
            }
        }
    }
    let last = steps.last().map(|s| s.name()).unwrap_or_else(|| "Execution".into());
    let summary_text = format!("all {total} step(s) completed");
    handle
        .update_as_executor(|s| {
            s.state = Some(TaskState::Succeeded);
            s.last_operation = Some(operation(&last, OperationState::Completed, summary_text.clone()));
        })
        .await
        .map_err(journal_err)?;
    // Done: nothing to compensate any more, the task may go whenever it is deleted.
    super::guard::remove_finalizer(client, ns, &task_name).await?;
    let mut summary = summarize(&task_name, timings, started, waited_total, *prompt_time);
    summary.unverified = unverified;
    op.event(&Event::Finished { summary: summary.clone() });
    Ok(Outcome::Completed(summary))
}

/// `runbook abort`: for every unfinished runbook task of the Etcd (also one being deleted) whose executor is
/// gone, runs the compensating cleanup, marks the task Failed and deletes it. Refused (nothing changed) while
/// an executor holds a task. Returns one sentence per task.
pub async fn abort(client: &Client, ns: &str, etcd: &str, identity: &str) -> Result<Vec<String>, RunbookError> {
    let etcds: Api<Etcd> = Api::namespaced(client.clone(), ns);
    etcds.get(etcd).await.map_err(|e| cluster(e, "etcd", etcd, ns))?;
    let types: Vec<&str> = super::catalog::ALL.iter().map(|r| r.task_type).collect();
    let tasks = super::guard::runbook_tasks(client, ns, etcd, &types).await?;
    if tasks.is_empty() {
        return Err(RunbookError::Rejected(format!(
            "etcd {ns}/{etcd} has no unfinished runbook task; nothing to abort"
        )));
    }
    for t in &tasks {
        let name = t.metadata.name.clone().unwrap_or_default();
        if let Some(h) = super::guard::live_holder(client, ns, &name, identity).await? {
            return Err(RunbookError::Rejected(format!(
                "task {name} is being executed by {}{}; nothing was changed — stop that run (Ctrl-C) or delete the task (its executor then finishes the current step and cleans up)",
                h.identity,
                h.since.map(|s| format!(" since {s}")).unwrap_or_default()
            )));
        }
    }
    let mut out = Vec::new();
    for t in tasks {
        let name = t.metadata.name.clone().unwrap_or_default();
        let own = identity.to_string();
        let lock = LeaseLock::new(client.clone(), ns, &executor_lease_name(&name), identity, Duration::from_secs(30))
            .owned_by(owner_reference(&t))
            .taking_over(move |h| super::guard::holder_is_dead_here(h, &own));
        if let Acquire::HeldBy { holder, .. } =
            lock.try_acquire().await.map_err(|e| cluster(e, "lease", &executor_lease_name(&name), ns))?
        {
            return Err(RunbookError::Rejected(format!(
                "task {name} was just taken by {holder}; nothing more was changed"
            )));
        }
        let cleaned = super::guard::compensate(client, ns, etcd).await?;
        let mut handle = TaskHandle::new(Api::namespaced(client.clone(), ns), t.clone());
        if t.metadata.deletion_timestamp.is_none() {
            let reason = format!("aborted by {identity}");
            let _ = handle
                .update_as_executor(|s| {
                    s.state = Some(TaskState::Failed);
                    s.last_operation = Some(operation("Abort", OperationState::Completed, reason.clone()));
                })
                .await;
        }
        super::guard::remove_finalizer(client, ns, &name).await?;
        super::guard::delete_task(client, ns, &name).await?;
        lock.release().await;
        let cleaned = if cleaned.is_empty() { "nothing needed undoing".to_string() } else { cleaned.join(", ") };
        out.push(format!("task {ns}/{name} ({}) aborted and deleted; {cleaned}", t.spec.type_));
    }
    Ok(out)
}

/// The task was deleted: run the compensating cleanup, record it, let the task go, and say so.
async fn aborted_by_deletion(
    client: &Client,
    o: &RunOptions,
    op: &dyn Operator,
    handle: &mut TaskHandle,
    timings: &[StepTiming],
    next: &str,
) -> RunbookError {
    let task = handle.current.metadata.name.clone().unwrap_or_default();
    let ns = o.namespace.as_str();
    let done: Vec<String> = timings.iter().map(|t| t.name.clone()).collect();
    let finished =
        if done.is_empty() { "no step had run".to_string() } else { format!("steps {} are done", done.join(", ")) };
    let start_again = o.resume_command.replace(" --resume", "");
    let what = match super::guard::compensate(client, ns, &o.etcd).await {
        Ok(cleaned) => {
            let cleaned = if cleaned.is_empty() { "nothing needed undoing".to_string() } else { cleaned.join(", ") };
            let _ = handle
                .update_as_executor(|s| {
                    s.state = Some(TaskState::Failed);
                    s.last_operation = Some(operation(
                        next,
                        OperationState::Failed,
                        format!("aborted: the task was deleted; cleaned up ({cleaned})"),
                    ));
                })
                .await;
            match super::guard::remove_finalizer(client, ns, &task).await {
                Ok(()) => format!(
                    "{finished} and step {next} was not started; cleaned up: {cleaned}; check with `{} status -n {ns} {}` and start a new run with `{start_again}` if still needed",
                    crate::output::command_name(),
                    o.etcd
                ),
                Err(e) => format!(
                    "{finished}; cleaned up ({cleaned}) but removing the finalizer failed: {e}; run `{}`",
                    o.abort_command
                ),
            }
        }
        Err(e) => format!("{finished}; the compensating cleanup failed: {e}; run `{}`", o.abort_command),
    };
    op.event(&Event::StepFailed { name: next.into(), error: format!("task {task} deleted; {what}") });
    RunbookError::Deleted { task, what }
}

fn summarize(task: &str, steps: Vec<StepTiming>, started: Instant, waited: Duration, prompt: Duration) -> Summary {
    let total = started.elapsed().as_millis() as u64;
    let waited_ms = waited.as_millis() as u64;
    let prompt_ms = prompt.as_millis() as u64;
    let overhead_ms = total.saturating_sub(waited_ms + prompt_ms);
    let acted_ms = steps.iter().map(|s| s.acted_ms).sum::<u64>().min(overhead_ms);
    Summary {
        task: task.into(),
        steps,
        total_ms: total,
        waited_ms,
        prompt_ms,
        overhead_ms,
        acted_ms,
        decided_ms: overhead_ms - acted_ms,
        unverified: Vec::new(),
    }
}

fn interrupted(
    task: &str,
    steps: Vec<StepTiming>,
    started: Instant,
    waited: Duration,
    prompt: Duration,
    o: &RunOptions,
) -> Outcome {
    Outcome::Interrupted {
        summary: summarize(task, steps, started, waited, prompt),
        resume_command: o.resume_command.clone(),
    }
}

enum StepFailure {
    Step(StepError),
}

/// check → (confirm) → act → verify; `Ok(None)` when stopped at a safe point.
#[allow(clippy::too_many_arguments)]
async fn run_step(
    index: usize,
    step: &dyn Step,
    cx: &StepContext,
    op: &dyn Operator,
    o: &RunOptions,
    etcd: &Etcd,
    halt: &CancellationToken,
    prompt_time: &mut Duration,
    waited: &mut Duration,
) -> Result<Option<&'static str>, StepFailure> {
    let name = step.name();
    let mut attempt = 0u32;
    let retry = |attempt: u32, e: StepError| -> Result<Duration, StepFailure> {
        if e.is_transient() && attempt < 6 {
            let delay = Duration::from_millis(200 * 2u64.pow(attempt.min(4)));
            op.event(&Event::StepRetry {
                name: name.clone(),
                error: e.to_string(),
                retry_in_ms: delay.as_millis() as u64,
            });
            Ok(delay)
        } else {
            Err(StepFailure::Step(e))
        }
    };
    let already = loop {
        match step.check(cx).await {
            Ok(done) => break done,
            Err(e) => {
                attempt += 1;
                let d = retry(attempt, e)?;
                tokio::time::sleep(d).await;
                *waited += d;
            }
        }
    };
    // An effect already there is not acted again, but still verified: a run that takes over from a killed one
    // at once must not start the next step before this one's effect is ready (e.g. a restarted member).
    if !already && halt.is_cancelled() {
        return Ok(None);
    }
    // Destructive steps were approved with the whole plan before the first write.
    let _ = (etcd, &prompt_time, o);
    attempt = 0;
    if !already {
        loop {
            match step.act(cx).await {
                Ok(()) => break,
                Err(e) => {
                    attempt += 1;
                    let d = retry(attempt, e)?;
                    tokio::time::sleep(d).await;
                    *waited += d;
                }
            }
        }
    }
    kill_point(index, KillPhase::AfterAct);
    let deadline = Instant::now() + step.timeout();
    let mut last_reason = String::new();
    let mut waiting_since: Option<Instant> = None;
    attempt = 0;
    loop {
        let readiness = match step.verify(cx).await {
            Ok(r) => r,
            Err(e) => {
                attempt += 1;
                let d = retry(attempt, e)?;
                tokio::time::sleep(d).await;
                // Within the waiting span already counted from the first NotReady, if any.
                if waiting_since.is_none() {
                    *waited += d;
                }
                continue;
            }
        };
        match readiness {
            Readiness::Ready => {
                if let Some(t) = waiting_since {
                    *waited += t.elapsed();
                }
                return Ok(Some(if already { "already done" } else { "done" }));
            }
            Readiness::NotReady(reason) => {
                let since = *waiting_since.get_or_insert_with(Instant::now);
                if Instant::now() >= deadline {
                    *waited += since.elapsed();
                    return Err(StepFailure::Step(StepError::Permanent(format!(
                        "not ready after {}s: {reason}",
                        step.timeout().as_secs()
                    ))));
                }
                if reason != last_reason {
                    op.event(&Event::StepWaiting { name: name.clone(), reason: reason.clone() });
                    last_reason = reason;
                }
            }
        }
        tokio::select! {
            _ = halt.cancelled() => {
                if let Some(t) = waiting_since {
                    *waited += t.elapsed();
                }
                return Ok(None);
            }
            _ = tokio::time::sleep(step.poll_interval()) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_resumes_after_the_last_completed_step_or_at_the_interrupted_one() {
        let names: Vec<String> = ["A", "B", "C"].iter().map(|s| s.to_string()).collect();
        let op = |n: &str, s| operation(n, s, "");
        assert_eq!(resume_index(&names, None), 0);
        assert_eq!(resume_index(&names, Some(&op("Admission", OperationState::Completed))), 0);
        assert_eq!(resume_index(&names, Some(&op("A", OperationState::Completed))), 1);
        assert_eq!(resume_index(&names, Some(&op("B", OperationState::InProgress))), 1);
        assert_eq!(resume_index(&names, Some(&op("B", OperationState::Failed))), 1);
        assert_eq!(resume_index(&names, Some(&op("C", OperationState::Completed))), 3);
    }

    #[test]
    fn kill_points_parse_only_a_positive_step_and_a_known_phase() {
        assert_eq!(parse_kill_point("3:after-act"), Some((3, KillPhase::AfterAct)));
        assert_eq!(parse_kill_point(" 11:after-journal "), Some((11, KillPhase::AfterJournal)));
        assert_eq!(parse_kill_point("1:before-act"), Some((1, KillPhase::BeforeAct)));
        assert_eq!(parse_kill_point("0:before-act"), None);
        assert_eq!(parse_kill_point("2:during"), None);
        assert_eq!(parse_kill_point("2"), None);
    }

    #[tokio::test]
    async fn a_permanently_failed_step_gets_its_recorded_config_map_back() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::{Patch, PatchParams, PostParams};
        let server = kube_sim::ApiServer::new();
        let client = server.client();
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let good = json!({"etcd.conf.yaml": "initial-cluster: a=x,b=y,c=z\n"});
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "etcd-bootstrap"}, "data": good})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
        // The step edited it, then failed.
        cms.patch(
            "etcd-bootstrap",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"etcd.conf.yaml": "initial-cluster: a=x\n", "extra": "1"}})),
        )
        .await
        .unwrap();
        let journal = json!({last_known_good_key("EditInitialCluster"): {"kind": "ConfigMap", "name": "etcd-bootstrap", "data": good}});
        let task: EtcdOperatorTask = serde_json::from_value(json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "EtcdOperatorTask",
            "metadata": {"name": "t", "namespace": "default", "annotations": {crate::tasks::step::JOURNAL_ANNOTATION: journal.to_string()}},
            "spec": {"type": "QuorumLossRecoveryTask", "ownerEtcdRefrence": {"name": "etcd-main", "namespace": "default"}}
        }))
        .unwrap();
        let etcd: Etcd = serde_json::from_value(json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "etcd-main", "namespace": "default"}, "spec": {"replicas": 3}
        }))
        .unwrap();
        let cx = StepContext::new(client, task, etcd);
        assert_eq!(
            restore_last_known_good(&cx, "ScaleStatefulSetTo0").await.unwrap(),
            None,
            "a step without a copy restores nothing"
        );
        let done = restore_last_known_good(&cx, "EditInitialCluster").await.unwrap().unwrap();
        assert!(done.contains("restored configmap etcd-bootstrap"), "{done}");
        let data = cms.get("etcd-bootstrap").await.unwrap().data.unwrap();
        assert_eq!(serde_json::to_value(&data).unwrap(), good, "the edit and the added key are gone");
        let again = restore_last_known_good(&cx, "EditInitialCluster").await.unwrap().unwrap();
        assert!(again.contains("still has its last-known-good content"), "{again}");
    }

    #[test]
    fn events_stream_as_tagged_camel_case_json() {
        let e = Event::StepFinished {
            name: "DeletePersistentVolumeClaims".into(),
            how: "done".into(),
            duration_ms: 12,
            waited_ms: 3,
            acted_ms: 9,
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"event": "stepFinished", "name": "DeletePersistentVolumeClaims", "how": "done", "durationMs": 12, "waitedMs": 3, "actedMs": 9})
        );
    }
}
