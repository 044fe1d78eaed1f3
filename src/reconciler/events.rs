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

/// Records an event on the task and on its Etcd.
pub async fn record(
    client: &Client,
    task: &EtcdOperatorTask,
    type_: EventType,
    reason: &str,
    message: &str,
    identity: &str,
) {
    let ns = task.metadata.namespace.clone().unwrap_or_default();
    let name = task.metadata.name.clone().unwrap_or_default();
    let etcd = &task.spec.owner_etcd_refrence;
    let on_task = reference("druid.gardener.cloud/v1alpha1", "EtcdOperatorTask", &ns, &name, task.metadata.uid.clone());
    let on_etcd = reference("druid.gardener.cloud/v1alpha1", "Etcd", &etcd.namespace, &etcd.name, None);
    let etcd_message = format!("task {name} ({}): {message}", task.spec.type_);
    tokio::join!(
        emit(client, on_task, type_, reason, message, identity),
        emit(client, on_etcd, type_, reason, &etcd_message, identity),
    );
}
