//! Helpers of the runbook tests: a ready playground with real etcd and the task CRD (embedded, or external with
//! `DRUIDCTL_TEST_KUBECONFIG`: see `e2e_support`), the real binary run against it through its kubeconfig, and
//! the cluster facts a refusal must leave unchanged.
#![allow(dead_code)]

#[path = "../e2e_support/mod.rs"]
mod e2e_support;

pub use e2e_support::E2e;

use std::process::Stdio;
use std::time::Duration;

use druidctl::api::{Etcd, EtcdOperatorTask};
use druidctl::tasks::sidecar::{self, Target};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use kube::api::ListParams;
use landscape::playground::BreakTarget;
use landscape::{BreakKind, Playground};

/// A ready playground with `members` members; delta snapshots hourly so the last full snapshot is the last backup.
/// The state directory is `<dir>/playground`.
pub async fn playground(dir: &std::path::Path, members: i32) -> E2e {
    E2e::start_in(dir, members, |o| o.delta_snapshot_period = "1h".into()).await
}

/// Takes a full snapshot through the leader's sidecar (service proxy, or directly where the server cannot proxy).
pub async fn full_snapshot(pg: &Playground, ns: &str) {
    let etcd = Api::<Etcd>::namespaced(pg.client(), ns).get(pg.etcd_name()).await.unwrap();
    sidecar::post(&pg.client(), &etcd, &Target::Leader, "/snapshot/full").await.expect("full snapshot");
}

/// Writes `before` keys, snapshots, writes `after` keys, destroys a majority and waits for QuorumLost.
pub async fn lose_quorum_after_snapshot(pg: &Playground, before: usize, after: usize) -> String {
    let ns = pg.namespaces()[0].clone();
    let c = pg.etcd_client(&ns, 0).unwrap();
    for i in 0..before {
        c.put(format!("/before/{i:03}"), "kept").await.unwrap();
    }
    full_snapshot(pg, &ns).await;
    for i in 0..after {
        c.put(format!("/after/{i:03}"), "lost").await.unwrap();
    }
    pg.break_(BreakKind::QuorumLost, &BreakTarget::default()).await.unwrap();
    pg.wait_ready_reason(&ns, "QuorumLost", Duration::from_secs(30)).await.unwrap();
    ns
}

/// The real binary against the playground (stdin not a terminal).
pub fn druidctl(pg: &Playground, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_druidctl"));
    cmd.arg("--kubeconfig").arg(pg.kubeconfig_path()).args(args);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    cmd.env_remove("KUBECONFIG").env("NO_COLOR", "1");
    cmd
}

/// Output of a finished run.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the binary to completion (at most 150 s).
pub async fn run(pg: &Playground, args: &[&str]) -> Run {
    let child = druidctl(pg, args).spawn().expect("spawn druidctl");
    let out = tokio::time::timeout(Duration::from_secs(150), child.wait_with_output())
        .await
        .expect("druidctl finished in time")
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// JSON events of a `-o jsonl` run.
pub fn events(stdout: &str) -> Vec<serde_json::Value> {
    stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// Names of the steps a run started.
pub fn started_steps(stdout: &str) -> Vec<String> {
    events(stdout)
        .iter()
        .filter(|e| e["event"] == "stepStarted")
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

/// What a refused runbook must leave unchanged: Etcd annotations, StatefulSet replicas, no task.
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    annotations: std::collections::BTreeMap<String, String>,
    sts_replicas: Option<i32>,
    tasks: usize,
}

/// Reads the facts a refusal must not change.
pub async fn cluster_facts(pg: &Playground, ns: &str) -> Snapshot {
    let c = pg.client();
    let e = Api::<Etcd>::namespaced(c.clone(), ns).get("etcd-main").await.unwrap();
    let sts = Api::<StatefulSet>::namespaced(c.clone(), ns).get("etcd-main").await.unwrap();
    let tasks = Api::<EtcdOperatorTask>::namespaced(c, ns).list(&ListParams::default()).await.unwrap().items.len();
    Snapshot {
        annotations: e.metadata.annotations.unwrap_or_default(),
        sts_replicas: sts.spec.and_then(|s| s.replicas),
        tasks,
    }
}

/// Asserts the error is one line (`error: …`).
pub fn one_sentence(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "exactly one line on stderr: {stderr:?}");
    assert!(lines[0].starts_with("error: "), "{stderr:?}");
    lines[0]
}
