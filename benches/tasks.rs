//! Task engine benchmark: tasks per second from creation to a terminal state, time to terminal (p50/p99),
//! resident memory of the controller, and LISTs per API server restart, on the embedded API server with the
//! no-op task type.
//!
//! `cargo bench --bench tasks` (or run the binary from `cargo build --release --bench tasks`). Scale with
//! `BENCH_ETCDS` (default 1000) and `BENCH_TASKS` (default 10000), workers with `BENCH_WORKERS` (default 16);
//! `BENCH_TIMEOUT` (seconds, default 1800) ends a run whose tasks do not all finish.
//!
//! The anchor, measured in the same run before the controller starts, is the raw throughput of the API server
//! for what a task costs at least: one create and one status write per task, with as many concurrent clients as
//! workers. The engine's throughput is printed as a ratio to it; nothing is asserted on absolute timings.
//!
//! Progress is observed through a watch of its own (as a user would with `kubectl get -w`), never by listing
//! every task: a periodic LIST of 10,000 tasks would cost the API server more than the engine does. When no task
//! finishes for 20 s the run prints what the unfinished tasks are waiting for.

#[path = "support/mod.rs"]
mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use druidctl::api::EtcdOperatorTask;
use druidctl::reconciler::controller::{self, ControllerOptions};
use druidctl::reconciler::metrics::sample_sum;
use druidctl::reconciler::{Reconciler, ReconcilerOptions};
use druidctl::tasks::Registry;
use druidctl::tasks::noop::Ledger;
use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;
use kube_sim::ApiServer;
use serde_json::json;
use support::{anchor, task};

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

/// What the bench's own watch saw.
#[derive(Default)]
struct Observed {
    /// Latest copy of every task.
    tasks: HashMap<String, EtcdOperatorTask>,
    /// When each task was first seen in a terminal state.
    terminal_at: HashMap<String, Instant>,
}

fn describe(t: &EtcdOperatorTask) -> String {
    let op = t.status.as_ref().and_then(|s| s.last_operation.as_ref());
    format!(
        "{}/{} ({}) {:?} rv={} op={:?} {:?} {:?}",
        t.metadata.namespace.as_deref().unwrap_or_default(),
        t.metadata.name.as_deref().unwrap_or_default(),
        t.spec.owner_etcd_refrence.name,
        t.state(),
        t.metadata.resource_version.as_deref().unwrap_or_default(),
        op.map(|o| o.name.as_str()),
        op.map(|o| o.state),
        op.map(|o| o.reason.as_str()),
    )
}

/// Requests since `before` by (verb, resource, code), for the task and lease resources.
fn request_delta(server: &ApiServer, before: &HashMap<(String, String, u16), u64>) -> Vec<String> {
    let mut out: Vec<String> = server
        .request_log()
        .counters()
        .into_iter()
        .filter(|((_, r, _), _)| r.starts_with("etcdoperatortasks") || r == "leases")
        .filter_map(|(k, n)| {
            let d = n - before.get(&k).copied().unwrap_or(0);
            (d > 0).then(|| format!("{} {} {}: {d}", k.0, k.1, k.2))
        })
        .collect();
    out.sort();
    out
}

/// Prints what unfinished tasks are doing: counts by state and the oldest few.
fn diagnose(seen: &Observed) {
    let mut by_state: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut open: Vec<&EtcdOperatorTask> = Vec::new();
    for t in seen.tasks.values() {
        *by_state.entry(t.state().as_str()).or_default() += 1;
        if !t.state().is_terminal() {
            open.push(t);
        }
    }
    open.sort_by_key(|t| (t.spec.owner_etcd_refrence.name.clone(), t.metadata.creation_timestamp.clone()));
    eprintln!("\n  stalled: tasks by state {by_state:?}; unfinished (by Etcd):");
    for t in open.iter().take(12) {
        eprintln!("    {}", describe(t));
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn run() {
    let (etcds, tasks, workers) = (env("BENCH_ETCDS", 1000), env("BENCH_TASKS", 10000), env("BENCH_WORKERS", 16));
    let timeout = Duration::from_secs(env("BENCH_TIMEOUT", 1800) as u64);
    let namespaces = etcds.div_ceil(100).max(1);
    let server = ApiServer::new();
    landscape::register_upstream_crds(&server).unwrap();
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

    let anchor_n = tasks.clamp(1, 2000);
    let anchor_took = anchor(&client, anchor_n, workers).await;
    let anchor_rate = anchor_n as f64 / anchor_took.as_secs_f64();
    let rss_before = rss_mib();

    // The bench's own observer.
    let seen = Arc::new(Mutex::new(Observed::default()));
    let observer = {
        let seen = seen.clone();
        let api: Api<EtcdOperatorTask> = Api::all(client.clone());
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
            while let Some(ev) = stream.next().await {
                let t = match ev {
                    Ok(watcher::Event::Apply(t) | watcher::Event::InitApply(t)) => t,
                    _ => continue,
                };
                let name = format!(
                    "{}/{}",
                    t.metadata.namespace.as_deref().unwrap_or_default(),
                    t.metadata.name.as_deref().unwrap_or_default()
                );
                let mut s = seen.lock().unwrap();
                if t.state().is_terminal() && !s.terminal_at.contains_key(&name) {
                    s.terminal_at.insert(name.clone(), Instant::now());
                }
                s.tasks.insert(name, t);
            }
        })
    };

    let ledger = Arc::new(Ledger::default());
    let mut opts = ReconcilerOptions::new("bench");
    opts.events = false;
    // Waiting tasks are woken by the controller when the task ahead of them finishes; the short poll is kept
    // from earlier measurements so that a regression to polling shows.
    opts.wait_requeue = Duration::from_millis(200);
    let r = Arc::new(Reconciler::new(client.clone(), Arc::new(Registry::with_noop(ledger.clone())), opts));
    let synced = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ctl = tokio::spawn(controller::run(
        r.clone(),
        ControllerOptions { namespace: None, workers, resync: Duration::from_secs(60) },
        synced.clone(),
    ));
    while !synced.load(std::sync::atomic::Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let mut created_at: HashMap<String, Instant> = HashMap::with_capacity(tasks);
    let started = Instant::now();
    for i in 0..tasks {
        let e = i % etcds;
        let ns = format!("shoot-{}", e % namespaces);
        let name = format!("task-{i}");
        created_at.insert(format!("{ns}/{name}"), Instant::now());
        Api::<EtcdOperatorTask>::namespaced(client.clone(), &ns)
            .create(&post, &task(&name, &ns, &format!("etcd-{e}")))
            .await
            .unwrap();
    }
    let created = started.elapsed();
    eprintln!("  {tasks} tasks created in {:.1}s", created.as_secs_f64());
    let mut peak_rss = rss_mib();
    let (mut last_done, mut last_progress, mut reported) = (0, Instant::now(), false);
    let (mut counters_then, mut progress_tick) = (server.request_log().counters(), Instant::now());
    let complete = loop {
        let done = seen.lock().unwrap().terminal_at.keys().filter(|k| created_at.contains_key(*k)).count();
        peak_rss = peak_rss.max(rss_mib());
        if done == tasks {
            break true;
        }
        if done != last_done {
            (last_done, last_progress, reported) = (done, Instant::now(), false);
        } else if last_progress.elapsed() > Duration::from_secs(20) && !reported {
            diagnose(&seen.lock().unwrap());
            let text = r.metrics.encode();
            let m = |name: &str| sample_sum(&text, name, &[]);
            eprintln!(
                "    controller: {} relists, {} watch restarts, {} reconcile errors; requests in the last 20 s: {:?}",
                m("druidctl_watch_relists_total"),
                m("druidctl_watch_restarts_total"),
                m("druidctl_reconcile_errors_total"),
                request_delta(&server, &counters_then)
            );
            reported = true;
        }
        if progress_tick.elapsed() > Duration::from_secs(20) {
            (counters_then, progress_tick) = (server.request_log().counters(), Instant::now());
        }
        if started.elapsed() > timeout {
            diagnose(&seen.lock().unwrap());
            break false;
        }
        eprint!("\r  {done}/{tasks} terminal after {:.0}s", started.elapsed().as_secs_f64());
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let elapsed = started.elapsed();
    eprintln!();
    let mut to_terminal: Vec<Duration> = {
        let s = seen.lock().unwrap();
        created_at.iter().filter_map(|(k, c)| s.terminal_at.get(k).map(|t| t.duration_since(*c))).collect()
    };
    to_terminal.sort();
    observer.abort();

    // Ground truth, once: the API server's view of every task.
    let mut states: BTreeMap<&'static str, usize> = BTreeMap::new();
    for t in Api::<EtcdOperatorTask>::all(client.clone()).list(&ListParams::default()).await.unwrap().items {
        *states.entry(t.state().as_str()).or_default() += 1;
    }

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
    let rate = tasks as f64 / elapsed.as_secs_f64();

    println!("task engine benchmark: {etcds} Etcds in {namespaces} namespaces, {tasks} no-op tasks, {workers} workers");
    println!("  created in            {:>8.2} s", created.as_secs_f64());
    if complete {
        println!("  all terminal after    {:>8.2} s", elapsed.as_secs_f64());
    } else {
        println!("  NOT all terminal after {:>7.2} s (BENCH_TIMEOUT)", elapsed.as_secs_f64());
    }
    println!("  throughput            {:>8.1} tasks/s", rate);
    println!(
        "  anchor                {:>8.1} tasks/s (create + status write, {anchor_n} tasks, {workers} concurrent)",
        anchor_rate
    );
    println!("  ratio to anchor       {:>8.3}", rate / anchor_rate);
    println!(
        "  time to terminal      {:>8.2} s p50, {:.2} s p99, {:.2} s max",
        percentile(&to_terminal, 0.5).as_secs_f64(),
        percentile(&to_terminal, 0.99).as_secs_f64(),
        to_terminal.last().copied().unwrap_or_default().as_secs_f64()
    );
    println!(
        "  resident memory       {:>8.1} MiB before tasks, {:.1} MiB peak (API server included)",
        rss_before, peak_rss
    );
    println!("  LISTs per restart     {:>8.2} (with history kept)", lists as f64 / restarts as f64);
    println!("  final states          {states:?}");
    println!(
        "  succeeded (metric)    {:>8}",
        sample_sum(&text, "etcddruid_operator_tasks_total", &[("state", "succeeded")])
    );
    println!("  executed twice        {:>8}", ledger.all().values().filter(|n| **n > 1).count());
    if !complete {
        std::process::exit(1);
    }
}
