//! The `EtcdOperatorTask` reconciler (DEP-05), used in-process by the CLI (`--local`) and by `druidctl serve`.
//!
//! It is split into small idempotent parts that talk only through the task's status (seeds/001):
//! - [`admit`](Reconciler::admit): Pending → config, DEP-05 duplicates, FIFO per Etcd, preconditions from the
//!   health model → `Rejected` with a reason, or `InProgress`;
//! - [`execute`](Reconciler::execute): under the task's executor Lease, runs the steps, recording each one in
//!   `status.lastOperation`, retrying transient errors with capped exponential backoff (the next retry time is
//!   in the status) and keeping `lastErrors` bounded;
//! - [`cleanup`](Reconciler::expire): after `ttlSecondsAfterFinished` deletes the task; its finalizer deletes
//!   whatever the task created.
//!
//! Exactly one executor per task: the executor Lease is taken and renewed with resourceVersion preconditions,
//! and an executor that cannot renew it stops before its next action.

mod admit;
pub mod backoff;
mod cleanup;
pub mod controller;
pub mod events;
mod execute;
pub mod lease;
pub mod metrics;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::api::Api;
use tokio_util::sync::CancellationToken;

use crate::api::{EtcdOperatorTask, TaskState};
use crate::tasks::Registry;

pub use backoff::Backoff;
pub use metrics::Metrics;
pub use status::WriteError;

/// Finalizer that guarantees cleanup of what a task created.
pub const FINALIZER: &str = "druid.gardener.cloud/etcdoperatortask";

/// Tunables of the reconciler.
#[derive(Debug, Clone)]
pub struct ReconcilerOptions {
    /// Who executes (written into executor Leases and events).
    pub identity: String,
    /// Duration of a task's executor Lease; renewed every fifth of it.
    pub executor_lease: Duration,
    /// Retry policy of transient step errors.
    pub backoff: Backoff,
    /// How soon a task waiting in the FIFO is looked at again by a caller without a watch
    /// ([`run_to_completion`](Reconciler::run_to_completion)); the controller is woken by its watch instead.
    pub wait_requeue: Duration,
    /// How soon a reconcile that failed (e.g. an API error) is retried.
    pub error_requeue: Duration,
    /// TTL when `spec.ttlSecondsAfterFinished` is unset.
    pub default_ttl_seconds: i32,
    /// Whether to record events.
    pub events: bool,
}

impl ReconcilerOptions {
    /// Defaults for `identity`.
    pub fn new(identity: impl Into<String>) -> ReconcilerOptions {
        ReconcilerOptions {
            identity: identity.into(),
            executor_lease: Duration::from_secs(15),
            backoff: Backoff::default(),
            wait_requeue: Duration::from_secs(2),
            error_requeue: Duration::from_millis(500),
            default_ttl_seconds: crate::api::task::DEFAULT_TTL_SECONDS,
            events: true,
        }
    }
}

/// What to do after a reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing more until the task changes.
    Done,
    /// Look again after this long.
    RequeueAfter(Duration),
    /// Waiting in its Etcd's FIFO: nothing to do until a task ahead of it moves on. The controller looks again
    /// when its watch sees that happen (and at every resync); a caller without a watch polls after this long.
    Waiting(Duration),
}

/// A reconcile that could not finish (retried by the caller).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Writing the status failed.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Another API call failed.
    #[error("{action}: {source}")]
    Api {
        /// What was being done.
        action: String,
        /// Cause.
        source: kube::Error,
    },
    /// Reading the health model failed.
    #[error("reading the health of the etcd: {0}")]
    Health(#[from] crate::kube::ClusterError),
}

impl ReconcileError {
    pub(crate) fn api(action: impl Into<String>, source: kube::Error) -> ReconcileError {
        ReconcileError::Api { action: action.into(), source }
    }
}

/// The reconciler: registry, client, metrics and options.
pub struct Reconciler {
    /// Client.
    pub client: Client,
    /// Task types it executes.
    pub registry: Arc<Registry>,
    /// Options.
    pub opts: ReconcilerOptions,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Fires on shutdown: running steps stop at their next safe point (the status already records them).
    pub shutdown: CancellationToken,
    /// Records events (inline, or queued by [`Reconciler::with_queued_events`]).
    pub events: events::Recorder,
}

/// Name of a task's executor Lease.
pub fn executor_lease_name(task: &str) -> String {
    let base: String = task.chars().take(240).collect();
    format!("{base}-executor")
}

/// An owner reference to `task` (non-controller; for the executor Lease).
pub fn owner_reference(task: &EtcdOperatorTask) -> OwnerReference {
    OwnerReference {
        api_version: "druid.gardener.cloud/v1alpha1".into(),
        kind: "EtcdOperatorTask".into(),
        name: task.metadata.name.clone().unwrap_or_default(),
        uid: task.metadata.uid.clone().unwrap_or_default(),
        controller: Some(false),
        block_owner_deletion: None,
    }
}

impl Reconciler {
    /// A reconciler with fresh metrics.
    pub fn new(client: Client, registry: Arc<Registry>, opts: ReconcilerOptions) -> Reconciler {
        let events = events::Recorder::inline(client.clone(), &opts.identity, opts.events);
        Reconciler {
            client,
            registry,
            opts,
            metrics: Arc::new(Metrics::new()),
            shutdown: CancellationToken::new(),
            events,
        }
    }

    /// Sends events from a background queue instead of waiting for them (`serve`; see [`events::Recorder`]).
    pub fn with_queued_events(mut self) -> Reconciler {
        self.events = self.events.queued();
        self
    }

    /// Uses these metrics (shared by several reconcilers of one process).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Reconciler {
        self.metrics = metrics;
        self
    }

    pub(crate) fn api(&self, task: &EtcdOperatorTask) -> Api<EtcdOperatorTask> {
        Api::namespaced(self.client.clone(), task.metadata.namespace.as_deref().unwrap_or("default"))
    }

    /// One reconcile of `task`; `others` are the other tasks of its namespace, for FIFO and duplicates (only the
    /// unfinished ones targeting the same Etcd matter, so a caller may pass just those).
    pub async fn reconcile(
        &self,
        task: &EtcdOperatorTask,
        others: &[EtcdOperatorTask],
    ) -> Result<Next, ReconcileError> {
        if task.metadata.deletion_timestamp.is_some() {
            return self.finalize(task).await;
        }
        match task.state() {
            s if s.is_terminal() => self.expire(task).await,
            TaskState::InProgress => self.execute(task.clone(), None).await,
            _ => self.admit(task.clone(), others).await,
        }
    }

    /// Drives one task in-process until it is terminal (or shutdown), as `task create --local` does. The tasks of
    /// the namespace are watched once into a cache (admission needs the task's Etcd-mates): a pass reads the
    /// cache, not the API server, and waits for the next change of the cache instead of polling.
    pub async fn run_to_completion(&self, namespace: &str, name: &str) -> Result<EtcdOperatorTask, ReconcileError> {
        use kube::runtime::reflector::{self, ObjectRef};
        use kube::runtime::{WatchStreamExt, watcher};
        let api: Api<EtcdOperatorTask> = Api::namespaced(self.client.clone(), namespace);
        let (reader, writer) = reflector::store::<EtcdOperatorTask>();
        let changed = Arc::new(tokio::sync::Notify::new());
        let (watch_error, _watching) = {
            let (changed, api) = (changed.clone(), api.clone());
            let watch_error = Arc::new(std::sync::Mutex::new(None::<kube::Error>));
            let err = watch_error.clone();
            let handle = tokio::spawn(async move {
                // A streaming list where the server offers it, LIST and WATCH otherwise, with backoff (as serve
                // and `task watch` watch).
                let events = crate::kube::watch::events(api, watcher::Config::default())
                    .modify(|t| t.metadata.managed_fields = None);
                let mut stream = std::pin::pin!(reflector::reflector(writer, events));
                let mut synced = false;
                while let Some(ev) = futures::StreamExt::next(&mut stream).await {
                    match ev {
                        Ok(ev) => {
                            synced |= matches!(ev, watcher::Event::InitDone);
                            changed.notify_waiters()
                        }
                        // Not allowed to watch (or no such resource) from the start: said by the caller, not
                        // retried for ever.
                        Err(
                            watcher::Error::InitialListFailed(kube::Error::Api(s))
                            | watcher::Error::WatchStartFailed(kube::Error::Api(s))
                            | watcher::Error::WatchFailed(kube::Error::Api(s)),
                        ) if !synced && matches!(s.code, 401 | 403 | 404) => {
                            *err.lock().expect("watch error") = Some(kube::Error::Api(s));
                            changed.notify_waiters();
                            return;
                        }
                        Err(e) => tracing::debug!(error = %e, "watching tasks; retrying"),
                    }
                }
            });
            (watch_error, tokio_util::task::AbortOnDropHandle::new(handle))
        };
        let key = ObjectRef::new(name).within(namespace);
        let mut delay = Duration::ZERO;
        let mut last_version: Option<String> = None;
        loop {
            let notified = changed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let synced = tokio::select! {
                r = reader.wait_until_ready() => r.is_ok(),
                _ = self.shutdown.cancelled() => false,
            };
            if let Some(e) = watch_error.lock().expect("watch error").take() {
                return Err(ReconcileError::api(format!("watching the tasks of namespace {namespace}"), e));
            }
            if !synced {
                // Shut down before the cache synced: one read.
                return api.get(name).await.map_err(|e| ReconcileError::api(format!("reading task {name}"), e));
            }
            let Some(task) = reader.get(&key) else {
                // Not in the synced cache: gone (or not yet seen); a read tells which.
                match api.get(name).await {
                    Ok(_) => {
                        let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
                        continue;
                    }
                    Err(e) if transient(&e) => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                    Err(e) => return Err(ReconcileError::api(format!("reading task {name}"), e)),
                }
            };
            if task.state().is_terminal() || self.shutdown.is_cancelled() {
                return Ok((*task).clone());
            }
            // Look again at once after a change; when nothing moved, wait for the next change (at most `delay`).
            if task.metadata.resource_version == last_version && !delay.is_zero() {
                let _ = tokio::time::timeout(delay, notified).await;
                delay = Duration::ZERO;
                continue;
            }
            last_version = task.metadata.resource_version.clone();
            let etcd = &task.spec.owner_etcd_refrence;
            let others: Vec<EtcdOperatorTask> = reader
                .state()
                .iter()
                .filter(|t| t.metadata.uid != task.metadata.uid && t.targets(&etcd.namespace, &etcd.name))
                .filter(|t| !t.state().is_terminal())
                .map(|t| (**t).clone())
                .collect();
            delay = match self.reconcile(&task, &others).await {
                Ok(Next::Done) => Duration::from_millis(500),
                Ok(Next::RequeueAfter(d) | Next::Waiting(d)) => d.min(Duration::from_secs(1)),
                Err(e) => {
                    tracing::debug!(error = %e, "reconcile failed; retrying");
                    Duration::from_millis(500)
                }
            };
        }
    }
}

/// Whether a client error is worth retrying.
pub fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code >= 500 || matches!(s.code, 408 | 409 | 429),
        _ => true,
    }
}
