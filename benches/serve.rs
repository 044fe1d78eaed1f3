//! `druidctl serve` in its own process against an API server in another process: tasks per second from creation
//! to a terminal state, time to terminal (p50/p99), and the serve process's peak resident memory (`VmHWM` of
//! `/proc/<pid>/status`) and CPU time, with the no-op task type.
//!
//! Two API servers, one after the other (`BENCH_SERVERS`, default `embedded,real`):
//! - `embedded`: `druidctl playground apiserver --crds` (the embedded API server, its own process);
//! - `real`: the real kube-apiserver v1.36.2 of `../shared/realk8s` (a private instance on free ports, without
//!   the controller manager, wiped afterwards; or the one `DRUIDCTL_REALK8S_KUBECONFIG` names), with the CRDs
//!   installed through the API.
//!
//! For each: `BENCH_ETCDS` Etcds (default 1000) in namespaces of 100, then the anchor, then `druidctl serve -A
//! --leader-elect=false --workers BENCH_WORKERS` (default 16) is started, and `BENCH_TASKS` no-op tasks (default
//! 10000, spread round-robin over the Etcds) are created with 16 concurrent clients while it runs. Progress is
//! observed through a watch of the bench's own. `BENCH_TIMEOUT` (seconds, default 1800) ends a run whose tasks do
//! not all finish.
//!
//! The anchor, measured in the same run against the same server before serve starts, is the raw throughput of
//! that server for what a task costs at least: one create and one status write per task, 16 concurrent clients.
//! The result is printed as a ratio to it; nothing is asserted on absolute timings.
//!
//! Run: `cargo bench --profile dev --bench serve` (or without `--profile dev` for an optimized build). Cargo
//! builds the `druidctl` binary with the bench (`CARGO_BIN_EXE_druidctl`, same profile), so the serve process
//! measured is the binary of that profile; `BENCH_DRUIDCTL=PATH` runs another one (e.g. `cargo build --release`'s
//! while the bench itself is a dev build). Quick run: `BENCH_ETCDS=100 BENCH_TASKS=1000`.

#[path = "../tests/realk8s_support/mod.rs"]
mod realk8s_support;

#[path = "support/mod.rs"]
mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use druidctl::api::EtcdOperatorTask;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;
use serde_json::json;
use support::{anchor, task};

const CLIENTS: usize = 16;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `kB` field of `/proc/<pid>/status`, in MiB.
fn proc_status_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// User + system CPU seconds of `pid` (`/proc/<pid>/stat`, fields 14 and 15, in clock ticks of 100 Hz).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // After the command name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    (ticks(11) + ticks(12)) / 100.0
}

/// `GET path` on `addr` over plain HTTP/1.0: the status code and the body.
fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((code, body))
}

/// Sum of the samples of `metric` in an OpenMetrics text.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn client_of(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.expect("config");
    cfg.read_timeout = Some(Duration::from_secs(300));
    Client::try_from(cfg).expect("client")
}

/// An API server in a process of its own.
enum Server {
    Embedded { child: Child, kubeconfig: PathBuf, _dir: tempfile::TempDir },
    Real(realk8s_support::RealK8s),
}

impl Server {
    fn kubeconfig(&self) -> &Path {
        match self {
            Server::Embedded { kubeconfig, .. } => kubeconfig,
            Server::Real(r) => &r.kubeconfig,
        }
    }

    fn pid(&self) -> Option<u32> {
        match self {
            Server::Embedded { child, .. } => Some(child.id()),
            Server::Real(_) => None,
        }
    }

    fn embedded(druidctl: &Path) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let child = Command::new(druidctl)
            .args(["playground", "apiserver", "--crds", "--listen", "127.0.0.1:0", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("druidctl playground apiserver starts");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !kubeconfig.exists() {
            assert!(Instant::now() < deadline, "playground apiserver wrote no kubeconfig in 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        Server::Embedded { child, kubeconfig, _dir: dir }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Server::Embedded { child, .. } = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Applies the CRDs (etcd-druid's and EtcdOperatorTask) and waits until they are Established.
async fn install_crds(client: &Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for doc in landscape::external::crd_documents().expect("CRD documents") {
        let name = doc["metadata"]["name"].as_str().unwrap().to_string();
        api.patch(&name, &PatchParams::apply("druidctl-bench").force(), &Patch::Apply(&doc))
            .await
            .unwrap_or_else(|e| panic!("apply CRD {name}: {e}"));
        druidctl::kube::install::wait_established(client, &name, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("CRD {name} established: {e}"));
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// The `serve` process, SIGTERMed (then killed) on drop.
struct Serve {
    child: Child,
    metrics: String,
}

impl Serve {
    fn start(druidctl: &Path, kubeconfig: &Path, workers: usize, log: &Path) -> Serve {
        let metrics = format!("127.0.0.1:{}", free_port());
        let child = Command::new(druidctl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["serve", "-A", "--leader-elect=false", "--noop-task-type", "--workers"])
            .arg(workers.to_string())
            .args(["--metrics-addr", &metrics])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("druidctl serve starts");
        let serve = Serve { child, metrics };
        let deadline = Instant::now() + Duration::from_secs(60);
        while http_get(&serve.metrics, "/readyz").map(|r| r.0) != Some(200) {
            assert!(Instant::now() < deadline, "serve not ready after 60 s; see {}", log.display());
            std::thread::sleep(Duration::from_millis(50));
        }
        serve
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Outcome {
    server: &'static str,
    etcds: usize,
    tasks: usize,
    workers: usize,
    created: Duration,
    elapsed: Duration,
    complete: bool,
    anchor_n: usize,
    anchor_rate: f64,
    to_terminal: Vec<Duration>,
    rss_ready: f64,
    rss_peak: f64,
    cpu: f64,
    server_rss: Option<f64>,
    server_cpu: Option<f64>,
    metrics: String,
    states: BTreeMap<String, usize>,
    leases_left: (usize, usize),
}

async fn run_on(label: &'static str, server: &Server, druidctl: &Path) -> Outcome {
    let (etcds, tasks, workers) = (env("BENCH_ETCDS", 1000), env("BENCH_TASKS", 10000), env("BENCH_WORKERS", 16));
    let timeout = Duration::from_secs(env("BENCH_TIMEOUT", 1800) as u64);
    let namespaces = etcds.div_ceil(100).max(1);
    let client = client_of(server.kubeconfig()).await;
    if matches!(server, Server::Real(_)) {
        install_crds(&client).await;
    }
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"), "etcds");
    let post = PostParams::default();
    for n in 0..namespaces {
        let ns = format!("shoot-{n}");
        Api::<Namespace>::all(client.clone())
            .create(&post, &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
            .await
            .unwrap();
    }
    futures::stream::iter(0..etcds)
        .map(|e| {
            let (client, ar, post) = (client.clone(), ar.clone(), post.clone());
            async move {
                let ns = format!("shoot-{}", e % namespaces);
                let obj: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
                    "metadata": {"name": format!("etcd-{e}"), "namespace": ns},
                    "spec": {"replicas": 3, "labels": {"app": "etcd-statefulset"}, "etcd": {}, "backup": {}}
                }))
                .unwrap();
                Api::<DynamicObject>::namespaced_with(client, &ns, &ar).create(&post, &obj).await.unwrap();
            }
        })
        .buffer_unordered(CLIENTS)
        .collect::<Vec<()>>()
        .await;
    eprintln!("  [{label}] {etcds} Etcds in {namespaces} namespaces created");

    let anchor_n = tasks.clamp(1, 2000);
    let anchor_took = anchor(&client, anchor_n, CLIENTS).await;
    let anchor_rate = anchor_n as f64 / anchor_took.as_secs_f64();
    eprintln!("  [{label}] anchor: {anchor_rate:.0} tasks/s");

    // The bench's own observer: when each task was first seen terminal.
    let terminal_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let observer = {
        let terminal_at = terminal_at.clone();
        let api: Api<EtcdOperatorTask> = Api::all(client.clone());
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
            while let Some(ev) = stream.next().await {
                let t = match ev {
                    Ok(watcher::Event::Apply(t) | watcher::Event::InitApply(t)) => t,
                    _ => continue,
                };
                if t.state().is_terminal() {
                    let name = format!(
                        "{}/{}",
                        t.metadata.namespace.as_deref().unwrap_or_default(),
                        t.metadata.name.as_deref().unwrap_or_default()
                    );
                    terminal_at.lock().unwrap().entry(name).or_insert_with(Instant::now);
                }
            }
        })
    };

    let log = std::env::temp_dir().join(format!("druidctl-bench-serve-{label}-{}.log", std::process::id()));
    let serve = Serve::start(druidctl, server.kubeconfig(), workers, &log);
    let pid = serve.pid();
    let rss_ready = proc_status_mib(pid, "VmRSS:");
    let cpu_ready = cpu_seconds(pid);
    let server_cpu_ready = server.pid().map(cpu_seconds);

    let started = Instant::now();
    let created_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    futures::stream::iter(0..tasks)
        .map(|i| {
            let (client, post, created_at) = (client.clone(), post.clone(), created_at.clone());
            async move {
                let e = i % etcds;
                let ns = format!("shoot-{}", e % namespaces);
                let name = format!("task-{i}");
                created_at.lock().unwrap().insert(format!("{ns}/{name}"), Instant::now());
                Api::<EtcdOperatorTask>::namespaced(client, &ns)
                    .create(&post, &task(&name, &ns, &format!("etcd-{e}")))
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(CLIENTS)
        .collect::<Vec<()>>()
        .await;
    let created = started.elapsed();
    eprintln!("  [{label}] {tasks} tasks created in {:.1}s", created.as_secs_f64());
    let created_at = std::mem::take(&mut *created_at.lock().unwrap());
    let complete = loop {
        let done = terminal_at.lock().unwrap().keys().filter(|k| created_at.contains_key(*k)).count();
        if done == tasks {
            break true;
        }
        if started.elapsed() > timeout {
            break false;
        }
        eprint!("\r  [{label}] {done}/{tasks} terminal after {:.0}s", started.elapsed().as_secs_f64());
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let elapsed = started.elapsed();
    eprintln!();
    let cpu = cpu_seconds(pid) - cpu_ready;
    let rss_peak = proc_status_mib(pid, "VmHWM:");
    let server_rss = server.pid().map(|p| proc_status_mib(p, "VmHWM:"));
    let server_cpu = server.pid().map(cpu_seconds).zip(server_cpu_ready).map(|(a, b)| a - b);
    let metrics = http_get(&serve.metrics, "/metrics").map(|r| r.1).unwrap_or_default();
    let mut to_terminal: Vec<Duration> = {
        let s = terminal_at.lock().unwrap();
        created_at.iter().filter_map(|(k, c)| s.get(k).map(|t| t.duration_since(*c))).collect()
    };
    to_terminal.sort();
    observer.abort();

    // Ground truth, once: the API server's view of every task.
    let mut states: BTreeMap<String, usize> = BTreeMap::new();
    let all = Api::<EtcdOperatorTask>::all(client.clone()).list(&ListParams::default()).await.unwrap().items;
    for t in &all {
        *states.entry(t.state().as_str().to_string()).or_default() += 1;
    }

    // A task's executor Lease goes with the task: delete up to 100 tasks of one namespace while serve runs.
    let ns0 = "shoot-0";
    let tasks0: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), ns0);
    let names0: HashSet<String> = all
        .iter()
        .filter(|t| t.metadata.namespace.as_deref() == Some(ns0))
        .filter_map(|t| t.metadata.name.clone())
        .take(100)
        .collect();
    futures::stream::iter(names0.iter().cloned())
        .map(|n| {
            let tasks0 = tasks0.clone();
            async move {
                let _ = tasks0.delete(&n, &DeleteParams::default()).await;
            }
        })
        .buffer_unordered(CLIENTS)
        .collect::<Vec<()>>()
        .await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns0);
    let executor = |l: &Lease| l.metadata.name.as_deref().is_some_and(|n| n.ends_with("-executor"));
    let deadline = Instant::now() + Duration::from_secs(120);
    let leases_left = loop {
        let left_tasks = tasks0
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|t| t.metadata.name.as_ref().is_some_and(|n| names0.contains(n)))
            .count();
        let left_leases = leases
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|l| executor(l))
            .filter(|l| l.metadata.name.as_ref().is_some_and(|n| names0.contains(n.trim_end_matches("-executor"))))
            .count();
        if (left_tasks == 0 && left_leases == 0) || Instant::now() > deadline {
            for t in tasks0.list(&ListParams::default()).await.unwrap().items {
                if t.metadata.name.as_ref().is_some_and(|n| names0.contains(n)) {
                    eprintln!(
                        "  [{label}] left: {} deleting since {:?}, finalizers {:?}, state {:?}",
                        t.metadata.name.as_deref().unwrap_or_default(),
                        t.metadata.deletion_timestamp,
                        t.metadata.finalizers,
                        t.state()
                    );
                }
            }
            break (left_tasks, left_leases);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    drop(serve);
    if std::env::var_os("BENCH_KEEP_LOG").is_some() {
        eprintln!("  [{label}] serve's log: {}", log.display());
    } else {
        let _ = std::fs::remove_file(&log);
    }
    Outcome {
        server: label,
        etcds,
        tasks,
        workers,
        created,
        elapsed,
        complete,
        anchor_n,
        anchor_rate,
        to_terminal,
        rss_ready,
        rss_peak,
        cpu,
        server_rss,
        server_cpu,
        metrics,
        states,
        leases_left,
    }
}

fn print(o: &Outcome) {
    let rate = o.tasks as f64 / o.elapsed.as_secs_f64();
    println!(
        "serve benchmark on the {} API server: {} Etcds, {} no-op tasks, serve --workers {}",
        o.server, o.etcds, o.tasks, o.workers
    );
    println!(
        "  created in            {:>8.2} s ({CLIENTS} concurrent clients, serve running)",
        o.created.as_secs_f64()
    );
    if o.complete {
        println!("  all terminal after    {:>8.2} s", o.elapsed.as_secs_f64());
    } else {
        println!("  NOT all terminal after {:>7.2} s (BENCH_TIMEOUT)", o.elapsed.as_secs_f64());
    }
    println!("  throughput            {:>8.1} tasks/s", rate);
    println!(
        "  anchor                {:>8.1} tasks/s (create + status write, {} tasks, {CLIENTS} concurrent)",
        o.anchor_rate, o.anchor_n
    );
    println!("  ratio to anchor       {:>8.3}", rate / o.anchor_rate);
    println!(
        "  time to terminal      {:>8.2} s p50, {:.2} s p99, {:.2} s max",
        percentile(&o.to_terminal, 0.5).as_secs_f64(),
        percentile(&o.to_terminal, 0.99).as_secs_f64(),
        o.to_terminal.last().copied().unwrap_or_default().as_secs_f64()
    );
    println!("  serve resident memory {:>8.1} MiB when ready, {:.1} MiB peak (VmHWM)", o.rss_ready, o.rss_peak);
    println!("  serve CPU time        {:>8.2} s ({:.2} ms per task)", o.cpu, o.cpu * 1000.0 / o.tasks as f64);
    if let (Some(r), Some(c)) = (o.server_rss, o.server_cpu) {
        println!("  API server            {:>8.1} MiB peak RSS, {c:.2} s CPU while the tasks ran (its own process)", r);
    }
    let m = |name: &str| metric(&o.metrics, name);
    println!(
        "  serve metrics         {:.0} relists, {:.0} watch restarts, {:.0} reconcile errors",
        m("druidctl_watch_relists_total"),
        m("druidctl_watch_restarts_total"),
        m("druidctl_reconcile_errors_total").abs()
    );
    println!("  final states          {:?}", o.states);
    println!(
        "  deleted with the task {} tasks and {} executor Leases left of the 100 tasks deleted in shoot-0",
        o.leases_left.0, o.leases_left.1
    );
}

fn main() {
    // The binary Cargo built with the bench (same profile), or another one (e.g. a release build measured by a
    // dev-profile bench).
    let druidctl = std::env::var_os("BENCH_DRUIDCTL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_druidctl")));
    eprintln!("serve and the embedded API server run {}", druidctl.display());
    let servers = std::env::var("BENCH_SERVERS").unwrap_or_else(|_| "embedded,real".into());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let mut failed = false;
    for s in servers.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (label, server) = match s {
            "embedded" => ("embedded", Server::embedded(&druidctl)),
            "real" => match realk8s_support::RealK8s::get("bench-serve", false) {
                Some(r) => ("real", Server::Real(r)),
                None => continue,
            },
            other => panic!("BENCH_SERVERS: unknown server {other:?} (embedded, real)"),
        };
        let o = rt.block_on(run_on(label, &server, &druidctl));
        print(&o);
        failed |= !o.complete;
        drop(server);
    }
    if failed {
        std::process::exit(1);
    }
}
