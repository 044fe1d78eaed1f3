//! Writing the task status with optimistic concurrency: every write carries the resourceVersion the writer
//! last saw; a conflict is either retried on a fresh copy (the executor, which holds the task's lease) or
//! given up (admission, where a conflict means someone else decided).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};

use crate::api::task::{LastError, LastOperation, OperationState};
use crate::api::{EtcdOperatorTask, EtcdOperatorTaskStatus, TaskState};

/// Most `lastErrors` entries kept (oldest dropped first).
pub const MAX_LAST_ERRORS: usize = 10;

/// Why a status write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Someone else changed the task first.
    #[error("task {0} was changed concurrently")]
    Conflict(String),
    /// The task moved on without us (another executor, or it finished).
    #[error("task {name} is {state} now; this executor no longer owns it")]
    Superseded {
        /// Task name.
        name: String,
        /// Its state.
        state: &'static str,
    },
    /// The task is gone.
    #[error("task {0} no longer exists")]
    Gone(String),
    /// Any other API error.
    #[error("writing the status of task {name}: {source}")]
    Api {
        /// Task name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
}

/// A task and the API to write it through; `current` follows every successful write.
pub struct TaskHandle {
    api: Api<EtcdOperatorTask>,
    /// The task as last read or written.
    pub current: EtcdOperatorTask,
}

/// A `lastOperation` entry stamped now.
pub fn operation(name: &str, state: OperationState, reason: impl Into<String>) -> LastOperation {
    LastOperation {
        name: name.to_string(),
        state,
        last_transition_time: Time(jiff::Timestamp::now()),
        reason: reason.into(),
    }
}

/// Appends an error, keeping at most [`MAX_LAST_ERRORS`].
pub fn push_error(status: &mut EtcdOperatorTaskStatus, code: &str, description: impl Into<String>) {
    status.last_errors.push(LastError {
        code: code.into(),
        description: description.into(),
        observed_at: Time(jiff::Timestamp::now()),
    });
    let excess = status.last_errors.len().saturating_sub(MAX_LAST_ERRORS);
    status.last_errors.drain(..excess);
}

impl TaskHandle {
    /// A handle on `task`.
    pub fn new(api: Api<EtcdOperatorTask>, task: EtcdOperatorTask) -> TaskHandle {
        TaskHandle { api, current: task }
    }

    fn name(&self) -> String {
        self.current.metadata.name.clone().unwrap_or_default()
    }

    /// One status write; transient errors (5xx, 429, transport) are retried a few times at once, since a
    /// write that did not happen can simply be repeated with the same resourceVersion.
    async fn put(&mut self, f: &(dyn Fn(&mut EtcdOperatorTaskStatus) + Send + Sync)) -> Result<(), kube::Error> {
        let mut delay = std::time::Duration::from_millis(10);
        for _ in 0..3 {
            match self.put_once(f).await {
                Err(e) if super::transient(&e) && !matches!(&e, kube::Error::Api(s) if s.code == 409) => {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                other => return other,
            }
        }
        self.put_once(f).await
    }

    async fn put_once(&mut self, f: &(dyn Fn(&mut EtcdOperatorTaskStatus) + Send + Sync)) -> Result<(), kube::Error> {
        let mut status = self.current.status.clone().unwrap_or_default();
        f(&mut status);
        status.observed_generation = self.current.metadata.generation;
        // A merge patch carrying the resourceVersion we saw: the API server refuses it with 409 if the task
        // changed since (the `serve` role needs only `patch` on the status subresource).
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": self.current.metadata.resource_version},
            "status": status,
        });
        let written = self.api.patch_status(&self.name(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
        self.current = written;
        Ok(())
    }

    fn classify(&self, e: kube::Error) -> WriteError {
        match e {
            kube::Error::Api(s) if s.code == 409 => WriteError::Conflict(self.name()),
            kube::Error::Api(s) if s.code == 404 => WriteError::Gone(self.name()),
            source => WriteError::Api { name: self.name(), source },
        }
    }

    /// One compare-and-swap: applies `f` to the status as last seen; a conflict is not retried.
    pub async fn compare_and_swap(
        &mut self,
        f: impl Fn(&mut EtcdOperatorTaskStatus) + Send + Sync,
    ) -> Result<(), WriteError> {
        self.put(&f).await.map_err(|e| self.classify(e))
    }

    /// Applies `f` as the task's executor: on a conflict, re-reads the task and applies `f` again as long as
    /// it is still `InProgress`.
    pub async fn update_as_executor(
        &mut self,
        f: impl Fn(&mut EtcdOperatorTaskStatus) + Send + Sync,
    ) -> Result<(), WriteError> {
        for _ in 0..8 {
            match self.put(&f).await {
                Ok(()) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    let fresh = self.api.get_opt(&self.name()).await.map_err(|e| self.classify(e))?;
                    let Some(fresh) = fresh else { return Err(WriteError::Gone(self.name())) };
                    if fresh.state() != TaskState::InProgress {
                        return Err(WriteError::Superseded { name: self.name(), state: fresh.state().as_str() });
                    }
                    self.current = fresh;
                }
                Err(e) => return Err(self.classify(e)),
            }
        }
        Err(WriteError::Conflict(self.name()))
    }

    /// Re-reads the task.
    pub async fn refresh(&mut self) -> Result<(), WriteError> {
        match self.api.get_opt(&self.name()).await.map_err(|e| self.classify(e))? {
            Some(t) => {
                self.current = t;
                Ok(())
            }
            None => Err(WriteError::Gone(self.name())),
        }
    }
}
