//! The step model shared by tasks and runbooks: named steps with a description, `check` (already done?),
//! an idempotent `act`, `verify` (polled until ready or the step's timeout, with a reason while not ready) and
//! a destructive flag. A step's small state (e.g. a baseline read before acting, the last-known-good copy)
//! lives in the task's journal annotation, so a killed executor resumes without repeating an action.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::Value;

use crate::api::{Etcd, EtcdOperatorTask};

/// Annotation on the task holding the step journal (a JSON object).
pub const JOURNAL_ANNOTATION: &str = "druid.gardener.cloud/task-journal";
/// Label put on every resource a task creates (its value is the task name).
pub const CREATED_BY_LABEL: &str = "druid.gardener.cloud/operator-task";

/// The journal recorded on `task` (its entries by key; empty when none was written yet), or `Err` with the
/// parser's message when the annotation is not a JSON object.
pub fn journal_of(task: &EtcdOperatorTask) -> Result<BTreeMap<String, Value>, String> {
    match task.metadata.annotations.as_ref().and_then(|a| a.get(JOURNAL_ANNOTATION)) {
        None => Ok(BTreeMap::new()),
        Some(text) => serde_json::from_str(text).map_err(|e| e.to_string()),
    }
}

/// A future returned by a step.
pub type StepFuture<'a, T> = BoxFuture<'a, Result<T, StepError>>;

/// Whether a step's effect is observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Done.
    Ready,
    /// Not yet, and why (e.g. `snapshot lease etcd-main-full-snap has not moved`).
    NotReady(String),
}

/// Why a step failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// Worth retrying (API unavailable, conflict, timeout, a member busy); retried with backoff.
    #[error("{0}")]
    Transient(String),
    /// Retrying will not help; the task fails.
    #[error("{0}")]
    Permanent(String),
}

impl StepError {
    /// Classifies a client error: 5xx, 429, 409, 408 and transport errors are transient.
    pub fn from_kube(action: &str, e: kube::Error) -> StepError {
        match &e {
            kube::Error::Api(s) => StepError::from_http(action, s.code, &s.message),
            _ => StepError::Transient(format!("{action}: {e}")),
        }
    }
    /// Classifies an HTTP error answer: 5xx, 408, 409 and 429 are transient, the rest permanent.
    pub fn from_http(action: &str, code: u16, message: &str) -> StepError {
        let text = format!("{action}: {message} ({code})");
        if code >= 500 || matches!(code, 408 | 409 | 429) {
            StepError::Transient(text)
        } else {
            StepError::Permanent(text)
        }
    }
    /// Whether retrying may help.
    pub fn is_transient(&self) -> bool {
        matches!(self, StepError::Transient(_))
    }
}

/// One step of a plan.
pub trait Step: Send + Sync {
    /// Stable name, recorded in `status.lastOperation.name` (e.g. `TriggerFullSnapshot`).
    fn name(&self) -> String;
    /// What the step does, in words an operator understands.
    fn description(&self) -> String;
    /// Whether the step destroys or replaces data (runbooks ask before these).
    fn destructive(&self) -> bool {
        false
    }
    /// The equivalent kubectl commands, for transparency.
    fn kubectl(&self) -> Vec<String> {
        Vec::new()
    }
    /// How long `verify` may stay not ready.
    fn timeout(&self) -> Duration {
        Duration::from_secs(300)
    }
    /// How often `verify` is polled.
    fn poll_interval(&self) -> Duration {
        Duration::from_millis(500)
    }
    /// Whether the step's effect is already there (then `act` is skipped); by default never, for steps that
    /// only wait.
    fn check<'a>(&'a self, _cx: &'a StepContext) -> StepFuture<'a, bool> {
        Box::pin(async { Ok(false) })
    }
    /// Does the step; must be idempotent. By default nothing, for steps that only wait for `verify`.
    fn act<'a>(&'a self, _cx: &'a StepContext) -> StepFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
    /// Whether the effect is observed yet.
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness>;
    /// What the operator must know about a completed step (read from the journal after `verify` said ready),
    /// e.g. what could not be checked; the runbook shows each as a warning and the step as done with warnings.
    fn warnings(&self, _cx: &StepContext) -> Vec<String> {
        Vec::new()
    }
    /// What a completed step found, for the operator (read from the journal after `verify` said ready), e.g. the
    /// sizes it measured; the runbook shows the lines under the step.
    fn report(&self, _cx: &StepContext) -> Vec<String> {
        Vec::new()
    }
    /// What this verification step could not check (one sentence each, from the journal); any makes the run
    /// end as "done, not verified" instead of success.
    fn unverified(&self, _cx: &StepContext) -> Vec<String> {
        Vec::new()
    }
}

/// What a step works with: the client, the task, its Etcd and the journal.
pub struct StepContext {
    /// Client.
    pub client: Client,
    /// The task as it was when execution (re)started.
    pub task: EtcdOperatorTask,
    /// The target Etcd, as read when execution (re)started.
    pub etcd: Etcd,
    journal: Mutex<BTreeMap<String, Value>>,
    /// The task as the last journal write returned it (its resourceVersion is the newest this executor made).
    written: Mutex<Option<EtcdOperatorTask>>,
}

impl StepContext {
    /// A context for `task` on `etcd`, with the journal read from the task.
    pub fn new(client: Client, task: EtcdOperatorTask, etcd: Etcd) -> StepContext {
        let journal = journal_of(&task).unwrap_or_default();
        StepContext { client, task, etcd, journal: Mutex::new(journal), written: Mutex::new(None) }
    }

    /// Namespace of the task, which is also the Etcd's (the reconciler rejects tasks elsewhere).
    pub fn namespace(&self) -> &str {
        self.task.metadata.namespace.as_deref().unwrap_or("default")
    }

    /// Name of the task.
    pub fn task_name(&self) -> &str {
        self.task.metadata.name.as_deref().unwrap_or_default()
    }

    /// Name of the Etcd.
    pub fn etcd_name(&self) -> &str {
        &self.task.spec.owner_etcd_refrence.name
    }

    /// A journal entry.
    pub fn journal(&self, key: &str) -> Option<Value> {
        self.journal.lock().expect("journal").get(key).cloned()
    }

    /// The task as the last journal write since the previous call returned it, if any: the executor continues
    /// from it, so that its next status write does not conflict with the journal write it made itself.
    pub fn take_written(&self) -> Option<EtcdOperatorTask> {
        self.written.lock().expect("written").take()
    }

    /// Records a journal entry on the task (merge patch of the annotation) before returning.
    pub async fn record(&self, key: &str, value: Value) -> Result<(), StepError> {
        // Only what the API server stored counts: the in-memory copy changes after the write succeeded.
        let mut next = self.journal.lock().expect("journal").clone();
        next.insert(key.to_string(), value);
        let text = serde_json::to_string(&next).expect("journal serializes");
        let api: Api<EtcdOperatorTask> = Api::namespaced(self.client.clone(), self.namespace());
        let patch = serde_json::json!({"metadata": {"annotations": {JOURNAL_ANNOTATION: text}}});
        let written = api
            .patch(self.task_name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| StepError::from_kube("recording the step journal", e))?;
        *self.journal.lock().expect("journal") = next;
        *self.written.lock().expect("written") = Some(written);
        Ok(())
    }

    /// Metadata for a resource this task creates: the task's label and an owner reference to the task.
    pub fn owned_metadata(&self, name: &str) -> Value {
        let uid = self.task.metadata.uid.clone().unwrap_or_default();
        serde_json::json!({
            "name": name,
            "namespace": self.namespace(),
            "labels": {CREATED_BY_LABEL: self.task_name()},
            "ownerReferences": [{
                "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "EtcdOperatorTask",
                "name": self.task_name(), "uid": uid, "controller": true, "blockOwnerDeletion": true,
            }],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_are_transient_only_when_retrying_can_help() {
        let status = |code| kube::Error::Api(kube::core::Status::failure("x", "Reason").with_code(code).boxed());
        assert!(StepError::from_kube("a", status(503)).is_transient());
        assert!(StepError::from_kube("a", status(409)).is_transient());
        assert!(StepError::from_kube("a", status(429)).is_transient());
        assert!(!StepError::from_kube("a", status(403)).is_transient());
        assert!(!StepError::from_kube("a", status(422)).is_transient());
    }
}
