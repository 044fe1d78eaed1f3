//! Task engine benchmark: tasks per second from creation to a terminal state, resident memory of the
//! controller, and LISTs per API server restart, on the embedded API server with the no-op task type.
//!
//! `cargo bench --bench tasks` (or run the binary from `cargo build --bench tasks`). Scale with
//! `BENCH_ETCDS` (default 1000) and `BENCH_TASKS` (default 10000), workers with `BENCH_WORKERS` (default 16).
//! Anchors are printed in one run; nothing is asserted.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use druidctl::api::task::{EtcdOperatorTaskSpec, NamespacedName};
use druidctl::api::{EtcdOperatorTask, TaskState};
use druidctl::reconciler::controller::{self, ControllerOptions};
use druidctl::reconciler::metrics::sample_sum;
use druidctl::reconciler::{Reconciler, ReconcilerOptions};
use druidctl::sim::apiserver::ApiServer;
use druidctl::tasks::Registry;
use druidctl::tasks::noop::{self, Ledger};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(run());
}

async fn run() {
    let (etcds, tasks, workers) = (env("BENCH_ETCDS", 1000), env("BENCH_TASKS", 10000), env("BENCH_WORKERS", 16));
    let namespaces = etcds.div_ceil(100).max(1);
    let server = ApiServer::new();
    server.register_upstream_crds().unwrap();
    server.register_crd_yaml(&serde_json::to_string(&druidctl::api::task::crd()).unwrap()).unwrap();
    let client = server.client();
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"), "etcds");
    let post = PostParams::default();
    for n in 0..namespaces {
        let ns = format!("shoot-{n}");
        Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .create(&post, &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
            .await
            .unwrap();
    }
    for e in 0..etcds {
        let ns = format!("shoot-{}", e % namespaces);
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": format!("etcd-{e}"), "namespace": ns},
            "spec": {"replicas": 3, "labels": {"app": "etcd-statefulset"}, "etcd": {}, "backup": {}}
        }))
        .unwrap();
        Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar).create(&post, &obj).await.unwrap();
    }
    let rss_before = rss_mib();

    let ledger = Arc::new(Ledger::default());
    let mut opts = ReconcilerOptions::new("bench");
    opts.events = false;
    opts.wait_requeue = Duration::from_millis(200);
    let r = Arc::new(Reconciler::new(client.clone(), Arc::new(Registry::with_noop(ledger.clone())), opts));
    let synced = Arc::new(AtomicBool::new(false));
    let ctl = tokio::spawn(controller::run(
        r.clone(),
        ControllerOptions { namespace: None, workers, resync: Duration::from_secs(60) },
        synced.clone(),
    ));
    while !synced.load(std::sync::atomic::Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let started = Instant::now();
    for i in 0..tasks {
        let e = i % etcds;
        let ns = format!("shoot-{}", e % namespaces);
        let mut t = EtcdOperatorTask::new(
            &format!("task-{i}"),
            EtcdOperatorTaskSpec {
                type_: noop::TYPE.into(),
                config: None,
                ttl_seconds_after_finished: Some(3600),
                owner_etcd_refrence: NamespacedName { name: format!("etcd-{e}"), namespace: ns.clone() },
            },
        );
        t.metadata.namespace = Some(ns.clone());
        Api::<EtcdOperatorTask>::namespaced(client.clone(), &ns).create(&post, &t).await.unwrap();
    }
    let created = started.elapsed();
    eprintln!("  {tasks} tasks created in {:.1}s", created.as_secs_f64());
    let all: Api<EtcdOperatorTask> = Api::all(client.clone());
    let mut peak_rss = rss_mib();
    loop {
        let done = all
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|t| t.state() == TaskState::Succeeded)
            .count();
        peak_rss = peak_rss.max(rss_mib());
        if done == tasks {
            break;
        }
        eprint!("\r  {done}/{tasks} terminal after {:.0}s", started.elapsed().as_secs_f64());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let elapsed = started.elapsed();

    // LISTs per restart: the controller resumes its watch when history is kept.
    let lists_before = server.request_log().count("list", "etcdoperatortasks");
    let restarts = 5;
    for _ in 0..restarts {
        server.restart(true).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let lists = server.request_log().count("list", "etcdoperatortasks") - lists_before;
    r.shutdown.cancel();
    let _ = ctl.await;
    let text = r.metrics.encode();

    println!("task engine benchmark: {etcds} Etcds in {namespaces} namespaces, {tasks} no-op tasks, {workers} workers");
    println!("  created in            {:>8.2} s", created.as_secs_f64());
    println!("  all terminal after    {:>8.2} s", elapsed.as_secs_f64());
    println!("  throughput            {:>8.1} tasks/s", tasks as f64 / elapsed.as_secs_f64());
    println!(
        "  resident memory       {:>8.1} MiB before tasks, {:.1} MiB peak (API server included)",
        rss_before, peak_rss
    );
    println!("  LISTs per restart     {:>8.2} (with history kept)", lists as f64 / restarts as f64);
    println!(
        "  succeeded (metric)    {:>8}",
        sample_sum(&text, "etcddruid_operator_tasks_total", &[("state", "succeeded")])
    );
    println!("  executed twice        {:>8}", ledger.all().values().filter(|n| **n > 1).count());
}
