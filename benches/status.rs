//! Benchmark of `status` on the real kube-apiserver (`../shared/realk8s`, TLS on loopback), against kubectl
//! reading the same kinds as the anchor:
//!
//! 1. one healthy Gardener-shaped 3-member `etcd-main` (tests/fixtures/seed/healthy.yaml):
//!    `druidctl status -n NS etcd-main` (with etcd's own view: the client TLS secrets the Etcd names exist, as on
//!    a seed, so status reads them and opens a port-forward to each member, which this server without a
//!    kubelet refuses: the time includes the whole way to etcd up to that refusal) and
//!    `druidctl status --no-etcd -n NS etcd-main` vs `kubectl get etcd,sts,pods,pvc,leases,cm -n NS`;
//! 2. a whole seed, N Etcds (default 500, `BENCH_ETCDS`) in N namespaces, each as in 1:
//!    `druidctl status -A` vs `kubectl get etcd,sts,pods,pvc,leases,cm -A`.
//!
//! The two commands alternate, 10 runs each (`BENCH_RUNS`); medians of wall time and of peak RSS (whole
//! process, `/usr/bin/time -f %M`) and their ratios are printed. Nothing is asserted about time.
//!
//! Run: `cargo bench --bench status` (or `--profile dev`). It starts a private real API server (no controller
//! manager, so that the hand-written pods stay as written), or uses `DRUIDCTL_REALK8S_KUBECONFIG`.

#[path = "../tests/realk8s_support/mod.rs"]
mod realk8s_support;
#[path = "../tests/seed_support/mod.rs"]
mod seed_support;

use seed_support::FIXTURE_NS;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// The healthy seed objects, moved to namespace `ns`.
fn healthy_docs(ns: &str, now: Timestamp) -> Vec<Value> {
    seed_support::load_into("healthy", now, ns)
}

/// Creates namespace `ns` and every object of the healthy seed in it, then writes each status through the
/// status subresource as the real controllers do.
async fn seed(client: &kube::Client, ns: &str, now: Timestamp) {
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    match ns_api
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
        .await
    {
        Ok(_) => {}
        // Seeded by an earlier run against the same server (DRUIDCTL_REALK8S_KUBECONFIG): measured as it is.
        Err(kube::Error::Api(s)) if s.code == 409 => return,
        Err(e) => panic!("namespace {ns}: {e}"),
    }
    seed_support::apply(client, ns, &healthy_docs(ns, now)).await;
}

/// The client TLS secrets `etcd-main` of the healthy seed names (`spec.etcd.clientUrlTls`: the CA bundle under
/// `bundle.crt` and a client key pair), with a fresh self-signed CA and client certificate: what status reads
/// before it opens a port-forward to a member. Without them it would stop at the missing secret.
async fn client_tls_secrets(client: &kube::Client, ns: &str) {
    let ca = rcgen::generate_simple_self_signed(vec!["etcd-main-client.svc".to_string()]).unwrap();
    let pair = rcgen::generate_simple_self_signed(vec!["etcd-client".to_string()]).unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    let b64 = |pem: String| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, pem);
    for (name, data) in [
        ("ca-etcd-bundle-a1b2c3d4", json!({"bundle.crt": b64(ca.cert.pem())})),
        (
            "etcd-client-9a8b7c6d",
            json!({"tls.crt": b64(pair.cert.pem()), "tls.key": b64(pair.signing_key.serialize_pem())}),
        ),
    ] {
        let secret = serde_json::from_value(json!({"metadata": {"name": name}, "type": "Opaque", "data": data}));
        match secrets.create(&PostParams::default(), &secret.unwrap()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("secret {ns}/{name}: {e}"),
        }
    }
}

struct Run {
    wall: Duration,
    rss_kib: u64,
}

/// Runs `program args…` under `/usr/bin/time -f %M` (peak RSS of the whole process, KiB); stdout discarded.
fn measure(program: &str, args: &[&str], kubeconfig: &Path, ok_codes: &[i32]) -> Run {
    let out = tempfile::NamedTempFile::new().unwrap();
    let start = Instant::now();
    let status = Command::new("/usr/bin/time")
        .args(["-f", "%M", "-o"])
        .arg(out.path())
        .arg(program)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("/usr/bin/time runs");
    let wall = start.elapsed();
    // /usr/bin/time exits with the command's code.
    let code = status.code().unwrap_or(-1);
    assert!(ok_codes.contains(&code), "{program} {args:?} exited {code}");
    let text = std::fs::read_to_string(out.path()).unwrap();
    let rss_kib = text.lines().last().and_then(|l| l.trim().parse().ok()).expect("peak RSS from /usr/bin/time");
    Run { wall, rss_kib }
}

fn median<T: Ord + Copy>(mut v: Vec<T>) -> T {
    v.sort();
    v[v.len() / 2]
}

/// Alternates druidctl and kubectl (druidctl exits 4 once the seeded member leases have aged into
/// "not renewed": the reads are the same) `runs` times each and prints the medians and ratios.
fn compare(label: &str, kubeconfig: &Path, druidctl_args: &[&str], kubectl_args: &[&str], runs: usize) {
    let druidctl = &druidctl_bin();
    // One warm-up each (page cache, API server caches), not counted.
    measure(druidctl, druidctl_args, kubeconfig, &[0, 4]);
    measure("kubectl", kubectl_args, kubeconfig, &[0]);
    let (mut d, mut k) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        d.push(measure(druidctl, druidctl_args, kubeconfig, &[0, 4]));
        k.push(measure("kubectl", kubectl_args, kubeconfig, &[0]));
    }
    let dw = median(d.iter().map(|r| r.wall).collect());
    let kw = median(k.iter().map(|r| r.wall).collect());
    let dr = median(d.iter().map(|r| r.rss_kib).collect());
    let kr = median(k.iter().map(|r| r.rss_kib).collect());
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!("{label} (median of {runs}, alternating)");
    println!("  druidctl {:<44} {:>8.3} s  {:>6.1} MiB", druidctl_args.join(" "), dw.as_secs_f64(), mib(dr));
    println!("  kubectl  {:<44} {:>8.3} s  {:>6.1} MiB", kubectl_args.join(" "), kw.as_secs_f64(), mib(kr));
    println!(
        "  ratio druidctl/kubectl: wall {:.2}x, peak RSS {:.2}x",
        dw.as_secs_f64() / kw.as_secs_f64(),
        dr as f64 / kr as f64
    );
}

/// The binary measured: `BENCH_DRUIDCTL` (e.g. `target/release/druidctl`, so that an optimised build is measured
/// while the bench itself is built quickly), else the one cargo built with the bench.
fn druidctl_bin() -> String {
    std::env::var("BENCH_DRUIDCTL").unwrap_or_else(|_| env!("CARGO_BIN_EXE_druidctl").to_string())
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes `--bench`; a plain `cargo test --benches` run passes nothing and should not start
    // an API server and 500 Etcds.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let etcds = env_usize("BENCH_ETCDS", 500);
    let runs = env_usize("BENCH_RUNS", 10);
    let Some(k8s) = realk8s_support::RealK8s::get("bench-status", false) else {
        eprintln!("no real API server: nothing measured");
        return;
    };
    let kubeconfig = k8s.kubeconfig.clone();
    let client = k8s.client().await;
    k8s.install_seed_prerequisites();
    // The EtcdOperatorTask CRD and RBAC, as a user installs them.
    let st = Command::new(druidctl_bin()).arg("--kubeconfig").arg(&kubeconfig).arg("install").status();
    assert!(st.is_ok_and(|s| s.success()), "druidctl install");
    let out = k8s.kubectl(&["wait", "--for=condition=Established", "crd", "--all"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let now = Timestamp::now();
    let t = Instant::now();
    seed(&client, FIXTURE_NS, now).await;
    client_tls_secrets(&client, FIXTURE_NS).await;
    futures::stream::iter((1..etcds).map(|i| {
        let client = client.clone();
        async move { seed(&client, &format!("shoot--bench--s{i:04}"), now).await }
    }))
    .buffer_unordered(16)
    .collect::<Vec<()>>()
    .await;
    println!(
        "real kube-apiserver; {etcds} Etcds in {etcds} namespaces, {} objects created in {:.1} s",
        etcds * 14,
        t.elapsed().as_secs_f64()
    );

    // BENCH_HOLD=N: keep the seeded server up for N seconds before measuring (to look at it by hand).
    if let Some(hold) = std::env::var("BENCH_HOLD").ok().and_then(|v| v.parse::<u64>().ok()) {
        println!("holding for {hold} s; KUBECONFIG={}", kubeconfig.display());
        std::thread::sleep(std::time::Duration::from_secs(hold));
    }
    println!("druidctl measured: {}", druidctl_bin());
    compare(
        "one Etcd",
        &kubeconfig,
        &["status", "-n", FIXTURE_NS, "etcd-main"],
        &["get", "etcd,sts,pods,pvc,leases,cm", "-n", FIXTURE_NS],
        runs,
    );
    compare(
        "one Etcd, without etcd's own view",
        &kubeconfig,
        &["status", "--no-etcd", "-n", FIXTURE_NS, "etcd-main"],
        &["get", "etcd,sts,pods,pvc,leases,cm", "-n", FIXTURE_NS],
        runs,
    );
    compare(
        &format!("whole seed, {etcds} Etcds"),
        &kubeconfig,
        &["status", "-A"],
        &["get", "etcd,sts,pods,pvc,leases,cm", "-A"],
        runs,
    );
}
