//! Helpers of the runbook tests: a ready playground with real etcd and the task CRD (embedded, or external with
//! `DRUIDCTL_TEST_KUBECONFIG`: see `e2e_support`), the real binary run against it through its kubeconfig, and
//! the cluster facts a refusal must leave unchanged.
#![allow(dead_code)]

use crate::e2e_support;

pub use e2e_support::E2e;

use std::process::Stdio;
use std::time::Duration;

use druidctl::api::{Etcd, EtcdOperatorTask};
use druidctl::tasks::sidecar::{self, Target};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use kube::api::ListParams;
use landscape::backup::ObjectStore;
use landscape::playground::BreakTarget;
use landscape::{BreakKind, Playground};

/// A ready playground with `members` members; delta snapshots hourly so the last full snapshot is the last backup.
/// The state directory is `<dir>/playground`.
pub async fn playground(dir: &std::path::Path, members: i32) -> E2e {
    E2e::start_in(dir, members, |o| o.delta_snapshot_period = "1h".into()).await
}

/// Takes a full snapshot through the leader's sidecar (service proxy, or directly where the server cannot proxy);
/// returns the sidecar's answer (`snapName`, `lastRevision`, …).
pub async fn full_snapshot(pg: &Playground, ns: &str) -> serde_json::Value {
    let etcd = Api::<Etcd>::namespaced(pg.client(), ns).get(pg.etcd_name()).await.unwrap();
    sidecar::post(&pg.client(), &etcd, &Target::Leader, "/snapshot/full").await.expect("full snapshot")
}

/// The object store of the Etcd in `ns` (the landscape keeps it under the state dir, by `spec.backup.store.prefix`).
pub async fn object_store(pg: &E2e, ns: &str) -> ObjectStore {
    let etcd = Api::<Etcd>::namespaced(pg.client(), ns).get(pg.etcd_name()).await.unwrap();
    let prefix = etcd.spec.backup.store.as_ref().expect("backups configured").prefix.replace('/', "_");
    ObjectStore::new(pg.state_dir().join("backups").join(ns).join(prefix))
}

/// Writes `before` keys, takes a full snapshot, writes `after` keys, destroys a majority and waits for
/// QuorumLost; returns the namespace. The backups end exactly at that full snapshot, so a recovery must bring
/// back every `/before/` key and none of the `/after/` ones:
/// - from the full snapshot until quorum is lost, snapshots fail (the playground fault `backup-failing`): no
///   scheduled delta (a leading sidecar takes its first one a tick after its first full snapshot, however long
///   the delta period) and no first snapshot of a newly elected leader can carry the later keys into the
///   backups. Once quorum is lost no sidecar leads, so nothing snapshots until the recovery restores; the fault
///   is lifted then, so the recovery reads and writes the store as usual;
/// - the store is read once quorum is lost: its newest snapshot must be that full snapshot, covering every
///   earlier key and none of the later ones (checked here, so a recovery test never passes or fails for a
///   reason it did not look at).
pub async fn lose_quorum_after_snapshot(pg: &E2e, before: usize, after: usize) -> String {
    let ns = pg.namespaces()[0].clone();
    let c = pg.etcd_client(&ns, 0).unwrap();
    let mut last_before = 0;
    for i in 0..before {
        last_before = c.put(format!("/before/{i:03}"), "kept").await.unwrap();
    }
    let taken = full_snapshot(pg, &ns).await;
    let landscape = pg.landscape(&ns).expect("the playground runs this namespace");
    landscape.set_backup_failing(&ns, pg.etcd_name(), true);
    let mut first_after = None;
    for i in 0..after {
        let rev = c.put(format!("/after/{i:03}"), "lost").await.unwrap();
        first_after.get_or_insert(rev);
    }
    pg.break_(BreakKind::QuorumLost, &BreakTarget::default()).await.unwrap();
    pg.wait_ready_reason(&ns, "QuorumLost", Duration::from_secs(30)).await.unwrap();
    landscape.set_backup_failing(&ns, pg.etcd_name(), false);

    let store = object_store(pg, &ns).await;
    let listing = store.list().iter().map(|s| s.snap_name.clone()).collect::<Vec<_>>();
    let newest = store.list().pop().expect("a snapshot in the store");
    assert_eq!(
        Some(newest.snap_name.as_str()),
        taken["snapName"].as_str(),
        "the full snapshot taken before the later keys is the newest backup: {listing:?}"
    );
    assert!(
        newest.last_revision >= last_before && first_after.is_none_or(|a| newest.last_revision < a),
        "the newest backup ends at revision {} (keys before it up to {last_before}, later keys from {first_after:?}): {listing:?}",
        newest.last_revision
    );
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

/// Checks the time accounting of a completed run's `-o jsonl` output and returns its summary: every finished
/// step reports `waitedMs + actedMs = durationMs` (as does the summary's step table), the summary splits
/// `totalMs` into waiting, confirmations and druidctl's own share (`overheadMs = actedMs + decidedMs`, `actedMs`
/// the sum of the steps'), and the task's journal annotation records `waitedMs` and `actedMs` of each step run.
/// Prints the figures (no threshold is asserted: timings go to the benches).
pub fn check_time_accounting(stdout: &str, journal: &serde_json::Value, runbook: &str) -> serde_json::Value {
    let ev = events(stdout);
    let finished = ev.iter().filter(|e| e["event"] == "stepFinished").collect::<Vec<_>>();
    assert!(!finished.is_empty(), "no step finished: {stdout}");
    let ms = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} missing in {v}"));
    for e in &finished {
        assert_eq!(ms(e, "waitedMs") + ms(e, "actedMs"), ms(e, "durationMs"), "{e}");
        let rec = &journal[format!("step/{}", e["name"].as_str().unwrap())];
        assert!(rec["waitedMs"].is_u64() && rec["actedMs"].is_u64(), "journal record of {}: {rec}", e["name"]);
        assert_eq!(ms(rec, "waitedMs") + ms(rec, "actedMs"), ms(rec, "durationMs"), "{rec}");
    }
    let summary = ev.iter().find(|e| e["event"] == "finished").expect("finished event")["summary"].clone();
    let steps = summary["steps"].as_array().unwrap();
    for s in steps {
        assert_eq!(ms(s, "waitedMs") + ms(s, "actedMs"), ms(s, "durationMs"), "{s}");
    }
    let acted: u64 = steps.iter().map(|s| ms(s, "actedMs")).sum();
    // The steps' figures are rounded to whole ms each: their sum is capped at the own share.
    assert_eq!(ms(&summary, "actedMs"), acted.min(ms(&summary, "overheadMs")), "{summary}");
    assert_eq!(ms(&summary, "overheadMs"), ms(&summary, "actedMs") + ms(&summary, "decidedMs"), "{summary}");
    assert_eq!(
        ms(&summary, "totalMs"),
        ms(&summary, "waitedMs") + ms(&summary, "promptMs") + ms(&summary, "overheadMs"),
        "{summary}"
    );
    let waited_in_steps: u64 = steps.iter().map(|s| ms(s, "waitedMs")).sum();
    assert!(waited_in_steps <= ms(&summary, "waitedMs"), "{summary}");
    eprintln!(
        "{runbook}: total {} ms, waited {} ms, druidctl's own share {} ms (acting {} ms in the steps, deciding {} ms)",
        ms(&summary, "totalMs"),
        ms(&summary, "waitedMs"),
        ms(&summary, "overheadMs"),
        ms(&summary, "actedMs"),
        ms(&summary, "decidedMs")
    );
    for s in steps {
        eprintln!(
            "  {:<32} {:>6} ms waited {:>6} ms acted",
            s["name"].as_str().unwrap(),
            ms(s, "waitedMs"),
            ms(s, "actedMs")
        );
    }
    summary
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

/// Runs druidctl with stdin and stderr on a pseudo-terminal (stdout piped) and `env`: waits until the typed
/// confirmation is asked, types `answer` and Enter; returns the exit code, stdout and what the terminal showed
/// (the prompt and stderr). Blocking: call it from `spawn_blocking`.
pub fn run_on_terminal(
    kubeconfig: &std::path::Path,
    args: &[String],
    env: &[(String, String)],
    answer: &str,
) -> (i32, String, String) {
    use std::io::{Read, Write};
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    // SAFETY: plain libc pty calls; the master fd is owned by the File created right after.
    let master = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY) };
    assert!(master >= 0, "posix_openpt");
    let slave_name = unsafe {
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
        std::ffi::CStr::from_ptr(libc::ptsname(master)).to_string_lossy().into_owned()
    };
    let mut master = unsafe { std::fs::File::from_raw_fd(master) };
    let slave =
        || std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOCTTY).open(&slave_name).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_druidctl"));
    cmd.arg("--kubeconfig").arg(kubeconfig).args(args).env("NO_COLOR", "1").env_remove("KUBECONFIG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.stdin(slave()).stderr(slave()).stdout(std::process::Stdio::piped()).spawn().unwrap();
    // The command holds our copies of the terminal's slave side: without dropping them, reading the master
    // never ends when the child exits.
    drop(cmd);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let (seen, mut master) = (seen.clone(), master.try_clone().unwrap());
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !seen.lock().unwrap().contains("to confirm") {
        assert!(std::time::Instant::now() < deadline, "no confirmation asked: {}", seen.lock().unwrap());
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = master.write_all(format!("{answer}\r").as_bytes());
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    let code = child.wait().unwrap().code().unwrap_or(-1);
    drop(master);
    let _ = reader.join();
    let terminal = seen.lock().unwrap().clone();
    (code, stdout, terminal)
}

/// The `error:` line a terminal showed (the prompt line and echo are skipped).
pub fn error_line(terminal: &str) -> String {
    terminal
        .replace('\r', "\n")
        .lines()
        .find(|l| l.trim_start().starts_with("error: "))
        .map(|l| l.trim().to_string())
        .unwrap_or_else(|| panic!("no error line on the terminal: {terminal:?}"))
}

/// Whether the EtcdOperatorTask `name` exists, and whether it is being deleted.
pub async fn task_state(pg: &Playground, ns: &str, name: &str) -> Option<bool> {
    Api::<EtcdOperatorTask>::namespaced(pg.client(), ns)
        .get_opt(name)
        .await
        .unwrap()
        .map(|t| t.metadata.deletion_timestamp.is_some())
}

/// The names of the EtcdOperatorTasks in `ns`.
pub async fn task_names(pg: &Playground, ns: &str) -> Vec<String> {
    Api::<EtcdOperatorTask>::namespaced(pg.client(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|t| t.metadata.name)
        .collect()
}

/// Deletes the EtcdOperatorTask `name` as `kubectl delete` would (background propagation).
pub async fn delete_task(pg: &Playground, ns: &str, name: &str) {
    Api::<EtcdOperatorTask>::namespaced(pg.client(), ns)
        .delete(name, &kube::api::DeleteParams::background())
        .await
        .unwrap();
}
