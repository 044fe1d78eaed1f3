//! What the task benches share (`benches/tasks.rs`, in-process; `benches/serve.rs`, serve in its own process):
//! the no-op task they create and the anchor they are measured against. Included with `#[path]`: a bench is its
//! own crate root, and Cargo does not take a `support/mod.rs` for a bench of its own.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use druidctl::api::EtcdOperatorTask;
use druidctl::api::task::{EtcdOperatorTaskSpec, NamespacedName};
use druidctl::tasks::noop;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// A no-op task `ns/name` for Etcd `etcd`, kept an hour after it finishes.
pub fn task(name: &str, ns: &str, etcd: &str) -> EtcdOperatorTask {
    let mut t = EtcdOperatorTask::new(
        name,
        EtcdOperatorTaskSpec {
            type_: noop::TYPE.into(),
            config: None,
            ttl_seconds_after_finished: Some(3600),
            owner_etcd_refrence: NamespacedName { name: etcd.into(), namespace: ns.into() },
        },
    );
    t.metadata.namespace = Some(ns.into());
    t
}

/// The anchor: creates `n` tasks in namespace `bench-anchor` and writes a terminal status on each (the least a
/// task costs), `concurrency` at a time; returns the time taken. The tasks and the namespace are deleted
/// afterwards (not timed).
pub async fn anchor(client: &Client, n: usize, concurrency: usize) -> Duration {
    let ns = "bench-anchor";
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
        .await
        .unwrap();
    let api: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), ns);
    let started = Instant::now();
    futures::stream::iter(0..n)
        .for_each_concurrent(concurrency.max(1), |i| {
            let api = api.clone();
            async move {
                let name = format!("anchor-{i}");
                let t = api.create(&PostParams::default(), &task(&name, ns, "etcd-0")).await.unwrap();
                let patch = json!({"metadata": {"resourceVersion": t.metadata.resource_version},
                    "status": {"state": "Succeeded"}});
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
            }
        })
        .await;
    let took = started.elapsed();
    let _ = Api::<Namespace>::all(client.clone()).delete(ns, &DeleteParams::default()).await;
    futures::stream::iter(0..n)
        .for_each_concurrent(concurrency.max(1), |i| {
            let api = api.clone();
            async move {
                let _ = api.delete(&format!("anchor-{i}"), &DeleteParams::default()).await;
            }
        })
        .await;
    took
}
