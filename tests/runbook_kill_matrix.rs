//! Kill matrix: the quorum-loss recovery (the real binary) is killed with SIGKILL at every step — alternately
//! right after a step started (in the middle of it) and right after one finished (at the boundary) — and
//! re-run each time until it completes. The result is complete and correct, and no destructive action is
//! repeated: every PVC is deleted exactly once, no snapshot lease is ever deleted.
//! Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`, which fails instead).

mod runbook_support;

use std::time::Duration;

use druidctl::sim::etcd::require_etcd;
use runbook_support::*;
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_killed_at_every_step_and_boundary_finishes_without_repeating_a_destructive_action() {
    let Some(_) = require_etcd("runbook kill matrix") else { return };
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = lose_quorum_after_snapshot(&pg, 10, 3).await;
    let log = pg.server().request_log();
    log.clear();

    let args = ["runbook", "quorum-loss-recovery", "-n", ns.as_str(), "etcd-main", "--yes", "-o", "jsonl"];
    let mut kills = 0;
    let mut finished_destructive = false;
    for run_no in 0..40 {
        let mut cmd = druidctl(&pg, &args);
        cmd.env("DRUIDCTL_RUNBOOK_LEASE", "1s");
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mid_step = run_no % 2 == 0;
        let mut killed = false;
        while let Some(line) = tokio::time::timeout(Duration::from_secs(90), lines.next_line()).await.expect("event in time").unwrap() {
            let e: serde_json::Value = serde_json::from_str(&line).unwrap();
            if e["event"] == "stepStarted" && e["name"] == "DeletePersistentVolumeClaims" {
                assert!(!finished_destructive, "the PVC deletion ran again after it had completed");
            }
            if e["event"] == "stepFinished" && e["name"] == "DeletePersistentVolumeClaims" {
                finished_destructive = true;
            }
            let cut = if mid_step { e["event"] == "stepStarted" } else { e["event"] == "stepFinished" };
            if cut && e["name"] != "VerifyClusterFormed" {
                child.start_kill().unwrap();
                killed = true;
                kills += 1;
                break;
            }
        }
        let status = child.wait().await.unwrap();
        if !killed {
            let mut err = String::new();
            tokio::io::AsyncReadExt::read_to_string(child.stderr.as_mut().unwrap(), &mut err).await.unwrap();
            assert!(status.success(), "run {run_no} failed: {err}");
            break;
        }
    }
    eprintln!("killed the runbook {kills} times");
    assert!(kills >= 10, "every step was cut at least once ({kills} kills)");

    let deleted_pvcs: u64 = log
        .counters()
        .iter()
        .filter(|((verb, resource, code), _)| verb == "delete" && resource == "persistentvolumeclaims" && *code < 300)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(deleted_pvcs, 3, "each of the 3 PVCs deleted exactly once");
    let snap_lease_deletes = log.records().iter().filter(|r| r.verb == "delete" && r.path.contains("-snap")).count();
    assert_eq!(snap_lease_deletes, 0, "snapshot leases are never deleted");
    for m in 0..3 {
        let c = pg.etcd_client(&ns, m).unwrap();
        assert_eq!(c.get_prefix("/before/").await.unwrap().len(), 10, "member {m}");
        assert!(c.get_prefix("/after/").await.unwrap().is_empty(), "member {m}");
    }
    assert_eq!(pg.etcd_ready(&ns).await.unwrap().0, "True");
    pg.down().await;
}
