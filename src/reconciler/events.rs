//! Events (core/v1) on the task and on its Etcd, so `kubectl describe` of either shows what happened.
//! Best effort: an event that cannot be written is logged, never fails the task.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::api::EtcdOperatorTask;

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Progress.
    Normal,
    /// Something went wrong.
    Warning,
}

/// Reporting component name.
pub const COMPONENT: &str = "druidctl-task-reconciler";

fn reference(api_version: &str, kind: &str, ns: &str, name: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        namespace: Some(ns.into()),
        name: Some(name.into()),
        uid,
        ..Default::default()
    }
}

async fn emit(
    client: &Client,
    involved: ObjectReference,
    type_: EventType,
    reason: &str,
    message: &str,
    identity: &str,
) {
    let ns = involved.namespace.clone().unwrap_or_default();
    let now = jiff::Timestamp::now();
    let name = format!(
        "{}.{:x}",
        involved.name.clone().unwrap_or_default(),
        now.as_nanosecond() as u64 ^ rand::random::<u64>()
    );
    let ev = Event {
        metadata: ObjectMeta { name: Some(name), namespace: Some(ns.clone()), ..Default::default() },
        involved_object: involved,
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some(match type_ {
            EventType::Normal => "Normal".into(),
            EventType::Warning => "Warning".into(),
        }),
        count: Some(1),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        reporting_component: Some(COMPONENT.into()),
        reporting_instance: Some(identity.into()),
        action: Some(reason.into()),
        source: Some(EventSource { component: Some(COMPONENT.into()), host: None }),
        ..Default::default()
    };
    if let Err(e) = Api::<Event>::namespaced(client.clone(), &ns).create(&PostParams::default(), &ev).await {
        tracing::debug!(error = %e, reason, "event not recorded");
    }
}

/// The two events of one occurrence: on the task, and on its Etcd (so `kubectl describe etcd` shows it too).
fn pair(task: &EtcdOperatorTask, message: &str) -> [(ObjectReference, String); 2] {
    let ns = task.metadata.namespace.clone().unwrap_or_default();
    let name = task.metadata.name.clone().unwrap_or_default();
    let etcd = &task.spec.owner_etcd_refrence;
    let on_task = reference("druid.gardener.cloud/v1alpha1", "EtcdOperatorTask", &ns, &name, task.metadata.uid.clone());
    let on_etcd = reference("druid.gardener.cloud/v1alpha1", "Etcd", &etcd.namespace, &etcd.name, None);
    let etcd_message = format!("task {name} ({}): {message}", task.spec.type_);
    [(on_task, message.to_string()), (on_etcd, etcd_message)]
}

/// Records an event on the task and on its Etcd, and returns once both are written (or failed).
pub async fn record(
    client: &Client,
    task: &EtcdOperatorTask,
    type_: EventType,
    reason: &str,
    message: &str,
    identity: &str,
) {
    let [(on_task, m1), (on_etcd, m2)] = pair(task, message);
    tokio::join!(
        emit(client, on_task, type_, reason, &m1, identity),
        emit(client, on_etcd, type_, reason, &m2, identity)
    );
}

/// Most events waiting to be sent by a [`Recorder`] in the background; further ones are dropped (and logged)
/// until the queue drains. The figure and the dropping are client-go's (`maxQueuedEvents` and the broadcaster's
/// `ActionOrDrop` in `k8s.io/client-go/tools/record/event.go`).
pub const MAX_QUEUED: usize = 1000;

/// Events sent at once by the background sender.
const IN_FLIGHT: usize = 4;

/// How a reconciler records events.
///
/// - **Inline** (the CLI's `task create --local` and `task run`): the reconcile waits for both writes, so the
///   events exist when the command returns and its process ends.
/// - **Queued** (`serve`): the events go into a bounded queue that one background task sends, as client-go's
///   recorder does for every controller; a reconcile never waits on them, so a task reaches its terminal state
///   2 round trips sooner. [`Recorder::flush`] sends what is left at shutdown.
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    identity: String,
    enabled: bool,
    queue: Option<Queue>,
}

#[derive(Clone)]
struct Queue {
    tx: tokio::sync::mpsc::Sender<Queued>,
    /// Events queued or being sent.
    pending: std::sync::Arc<tokio::sync::watch::Sender<usize>>,
}

struct Queued {
    involved: ObjectReference,
    type_: EventType,
    reason: String,
    message: String,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("enabled", &self.enabled).field("queued", &self.queue.is_some()).finish()
    }
}

impl Recorder {
    /// Writes events before returning; records nothing when `enabled` is false.
    pub fn inline(client: Client, identity: impl Into<String>, enabled: bool) -> Recorder {
        Recorder { client, identity: identity.into(), enabled, queue: None }
    }

    /// The same recorder sending from a background task (started here: call inside the runtime), at most
    /// [`MAX_QUEUED`] events waiting.
    pub fn queued(self) -> Recorder {
        self.queued_with(MAX_QUEUED)
    }

    fn queued_with(self, capacity: usize) -> Recorder {
        if !self.enabled {
            return self;
        }
        let (tx, rx) = tokio::sync::mpsc::channel::<Queued>(capacity);
        let pending = std::sync::Arc::new(tokio::sync::watch::Sender::new(0usize));
        let (client, identity, done) = (self.client.clone(), self.identity.clone(), pending.clone());
        tokio::spawn(async move {
            use futures::StreamExt;
            let events = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|q| (q, rx)) });
            events
                .for_each_concurrent(IN_FLIGHT, |q| {
                    let (client, identity, done) = (client.clone(), identity.clone(), done.clone());
                    async move {
                        emit(&client, q.involved, q.type_, &q.reason, &q.message, &identity).await;
                        done.send_modify(|n| *n = n.saturating_sub(1));
                    }
                })
                .await;
        });
        Recorder { queue: Some(Queue { tx, pending }), ..self }
    }

    /// Records an event on the task and on its Etcd: written before returning, or queued.
    pub async fn record(&self, task: &EtcdOperatorTask, type_: EventType, reason: &str, message: &str) {
        if !self.enabled {
            return;
        }
        let Some(queue) = &self.queue else {
            return record(&self.client, task, type_, reason, message, &self.identity).await;
        };
        for (involved, message) in pair(task, message) {
            queue.pending.send_modify(|n| *n += 1);
            let q = Queued { involved, type_, reason: reason.to_string(), message };
            if let Err(e) = queue.tx.try_send(q) {
                queue.pending.send_modify(|n| *n = n.saturating_sub(1));
                match e {
                    tokio::sync::mpsc::error::TrySendError::Full(q) => {
                        tracing::warn!(reason = %q.reason, object = ?q.involved.name, "event queue full: event dropped")
                    }
                    tokio::sync::mpsc::error::TrySendError::Closed(q) => {
                        tracing::warn!(reason = %q.reason, object = ?q.involved.name, "event sender gone: event dropped")
                    }
                }
            }
        }
    }

    /// Waits until every queued event is sent, at most `timeout`; returns how many were still unsent.
    pub async fn flush(&self, timeout: std::time::Duration) -> usize {
        let Some(queue) = &self.queue else { return 0 };
        let mut rx = queue.pending.subscribe();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|n| *n == 0)).await;
        *queue.pending.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::task::{EtcdOperatorTaskSpec, NamespacedName};

    fn task() -> EtcdOperatorTask {
        let mut t = EtcdOperatorTask::new(
            "t1",
            EtcdOperatorTaskSpec {
                type_: "OnDemandSnapshot".into(),
                owner_etcd_refrence: NamespacedName { name: "etcd-main".into(), namespace: "shoot".into() },
                config: None,
                ttl_seconds_after_finished: None,
            },
        );
        t.metadata.namespace = Some("shoot".into());
        t
    }

    async fn server_with_namespace_shoot() -> kube_sim::ApiServer {
        let server = kube_sim::ApiServer::new();
        let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(server.client());
        let shoot = serde_json::from_value(serde_json::json!({"metadata": {"name": "shoot"}})).unwrap();
        ns.create(&PostParams::default(), &shoot).await.unwrap();
        server
    }

    #[tokio::test]
    async fn queued_events_are_sent_in_the_background_and_flush_waits_for_them() {
        let server = server_with_namespace_shoot().await;
        let recorder = Recorder::inline(server.client(), "me", true).queued();
        recorder.record(&task(), EventType::Normal, "Started", "preconditions met").await;
        assert_eq!(recorder.flush(std::time::Duration::from_secs(10)).await, 0);
        let events: Api<Event> = Api::namespaced(server.client(), "shoot");
        let list = events.list(&Default::default()).await.unwrap();
        let mut about: Vec<(String, String)> = list
            .items
            .iter()
            .map(|e| (e.involved_object.kind.clone().unwrap_or_default(), e.message.clone().unwrap_or_default()))
            .collect();
        about.sort();
        assert_eq!(
            about,
            [
                ("Etcd".to_string(), "task t1 (OnDemandSnapshot): preconditions met".to_string()),
                ("EtcdOperatorTask".to_string(), "preconditions met".to_string()),
            ]
        );
    }

    /// On a current-thread runtime the sender runs only when the test awaits: whatever exceeds the queue's
    /// capacity before that is dropped, and the rest is still sent.
    #[tokio::test]
    async fn events_beyond_a_full_queue_are_dropped_and_the_queued_ones_still_sent() {
        let server = server_with_namespace_shoot().await;
        let recorder = Recorder::inline(server.client(), "me", true).queued_with(3);
        recorder.record(&task(), EventType::Normal, "Started", "one").await;
        recorder.record(&task(), EventType::Normal, "Succeeded", "two").await;
        assert_eq!(recorder.flush(std::time::Duration::from_secs(10)).await, 0, "the dropped one is not pending");
        let events: Api<Event> = Api::namespaced(server.client(), "shoot");
        let mut sent: Vec<String> =
            events.list(&Default::default()).await.unwrap().items.into_iter().filter_map(|e| e.message).collect();
        sent.sort();
        assert_eq!(sent, ["one", "task t1 (OnDemandSnapshot): one", "two"]);
    }

    #[tokio::test]
    async fn a_disabled_recorder_records_nothing_and_has_nothing_to_flush() {
        let server = kube_sim::ApiServer::new();
        let recorder = Recorder::inline(server.client(), "me", false).queued();
        recorder.record(&task(), EventType::Warning, "Failed", "x").await;
        assert_eq!(recorder.flush(std::time::Duration::from_millis(10)).await, 0);
        let events: Api<Event> = Api::namespaced(server.client(), "shoot");
        assert!(events.list(&Default::default()).await.unwrap().items.is_empty());
    }
}
