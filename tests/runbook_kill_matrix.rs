//! Kill matrix: the quorum-loss recovery (the real binary) is killed with SIGKILL at every kill point, in
//! order — for every step, at the boundary before it (`before-act`), in the middle of it (`after-act`: acted,
//! not verified nor journaled) and at the boundary after it (`after-journal`) — through the test-only
//! `DRUIDCTL_RUNBOOK_ABORT_AT` hook. Each re-run continues the same task and dies at the next point; the last
//! run completes. The result is complete and correct and no destructive action is repeated: every PVC is
//! deleted exactly once, no snapshot lease is ever deleted, `initial-cluster` is shrunk to the first member
//! exactly once, the keys written before the snapshot survive and the later ones are lost.
//! Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`, which fails instead).

mod runbook_support;

use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use druidctl::runbook::engine::{ABORT_AT_ENV, KillPhase};
use druidctl::sim::apiserver::{AdmissionHook, AdmissionOperation, AdmissionRequest, ApiServer};
use druidctl::sim::etcd::require_etcd;
use druidctl::tasks::quorum_loss::{ETCD_CONF_KEY, initial_cluster_members};
use runbook_support::*;

/// Records the `initial-cluster` of every ConfigMap update, with who made it.
#[derive(Default)]
struct ConfigMapEdits(Mutex<Vec<(String, String, Vec<String>)>>);

impl AdmissionHook for ConfigMapEdits {
    fn admit(&self, _server: &ApiServer, req: &AdmissionRequest) -> Result<(), String> {
        if req.resource == "configmaps" && req.operation == AdmissionOperation::Update {
            let conf = req.object.as_ref().and_then(|o| o["data"][ETCD_CONF_KEY].as_str()).unwrap_or_default();
            self.0.lock().unwrap().push((req.name.clone(), req.user.clone(), initial_cluster_members(conf)));
        }
        Ok(())
    }
}

struct Out {
    status: std::process::ExitStatus,
    stderr: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_killed_at_every_step_boundary_and_mid_step_finishes_without_repeating_a_destructive_action() {
    let Some(_) = require_etcd("runbook kill matrix") else { return };
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = lose_quorum_after_snapshot(&pg, 10, 3).await;
    let log = pg.server().request_log();
    let edits = Arc::new(ConfigMapEdits::default());
    pg.server().add_admission_hook(edits.clone());
    log.clear();

    let args = ["runbook", "quorum-loss-recovery", "-n", ns.as_str(), "etcd-main", "--yes", "-o", "jsonl"];
    let plan =
        run(&pg, &["runbook", "quorum-loss-recovery", "-n", ns.as_str(), "etcd-main", "--plan", "-o", "jsonl"]).await;
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let steps: Vec<String> = events(&plan.stdout).iter().find(|e| e["event"] == "plan").expect("plan event")["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(steps.len(), 11, "{steps:?}");

    let mut kills = 0;
    let mut completed_destructive = false;
    for (i, step) in steps.iter().enumerate() {
        for phase in KillPhase::ALL {
            let point = format!("{}:{}", i + 1, phase.as_str());
            let mut cmd = druidctl(&pg, &args);
            cmd.env("DRUIDCTL_RUNBOOK_LEASE", "1s").env(ABORT_AT_ENV, &point);
            let mut child = cmd.spawn().unwrap();
            let mut pipe = child.stdout.take().unwrap();
            let reader = tokio::spawn(async move {
                let mut text = String::new();
                let _ = tokio::io::AsyncReadExt::read_to_string(&mut pipe, &mut text).await;
                text
            });
            let status = match tokio::time::timeout(Duration::from_secs(120), child.wait()).await {
                Ok(s) => s.unwrap(),
                Err(_) => {
                    child.kill().await.unwrap();
                    panic!(
                        "the run cut at {point} ({step}) did not end in time; its events:\n{}",
                        reader.await.unwrap()
                    );
                }
            };
            let stdout = reader.await.unwrap();
            let mut stderr = String::new();
            tokio::io::AsyncReadExt::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).await.unwrap();
            let out = Out { status, stderr };
            assert_eq!(
                out.status.signal(),
                Some(libc::SIGKILL),
                "the run cut at {point} ({step}) was killed there, not: {:?}\nstdout: {stdout}\nstderr: {}",
                out.status,
                out.stderr
            );
            kills += 1;
            for e in events(&stdout) {
                if e["event"] == "stepStarted" && e["name"] == "DeletePersistentVolumeClaims" {
                    assert!(
                        !completed_destructive,
                        "the PVC deletion ran again after it had completed (cut at {point})"
                    );
                }
            }
            if step == "DeletePersistentVolumeClaims" && phase == KillPhase::AfterJournal {
                completed_destructive = true;
            }
        }
    }
    let last = run(&pg, &args).await;
    assert_eq!(last.code, 0, "the final run completes: {}", last.stderr);
    let evs = events(&last.stdout);
    assert!(evs.iter().any(|e| e["event"] == "finished"), "{}", last.stdout);
    assert!(!evs.iter().any(|e| e["event"] == "stepStarted"), "every step was done in an earlier run: {}", last.stdout);
    eprintln!("killed the runbook at {kills} kill points ({} steps x {} phases)", steps.len(), KillPhase::ALL.len());
    assert_eq!(kills, 33);

    let deleted_pvcs: u64 = log
        .counters()
        .iter()
        .filter(|((verb, resource, code), _)| verb == "delete" && resource == "persistentvolumeclaims" && *code < 300)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(deleted_pvcs, 3, "each of the 3 PVCs deleted exactly once");
    let pvc_deletes: Vec<String> = log
        .records()
        .iter()
        .filter(|r| r.verb == "delete" && r.resource == "persistentvolumeclaims")
        .map(|r| r.path.clone())
        .collect();
    let mut unique = pvc_deletes.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), pvc_deletes.len(), "no PVC delete was sent twice: {pvc_deletes:?}");
    let snap_lease_deletes = log.records().iter().filter(|r| r.verb == "delete" && r.path.contains("-snap")).count();
    assert_eq!(snap_lease_deletes, 0, "snapshot leases are never deleted");

    // initial-cluster: shrunk to the first member exactly once (before druid restores it on reconcile).
    let edits = edits.0.lock().unwrap().clone();
    let shrunk: Vec<_> = edits.iter().filter(|(_, _, m)| m.len() == 1).collect();
    assert_eq!(shrunk.len(), 1, "initial-cluster shrunk exactly once: {edits:?}");
    assert!(shrunk[0].2[0].starts_with("etcd-main-0="), "{shrunk:?}");
    let first_edit = edits.iter().position(|(_, _, m)| m.len() == 1).unwrap();
    assert!(
        edits[..first_edit].iter().all(|(n, _, _)| *n != shrunk[0].0),
        "no other edit of the ConfigMap before the runbook's: {edits:?}"
    );

    for m in 0..3 {
        let c = pg.etcd_client(&ns, m).unwrap();
        assert_eq!(c.get_prefix("/before/").await.unwrap().len(), 10, "member {m}: the keys of the snapshot are back");
        assert!(
            c.get_prefix("/after/").await.unwrap().is_empty(),
            "member {m}: the keys written after the snapshot are lost"
        );
    }
    assert_eq!(pg.etcd_ready(&ns).await.unwrap().0, "True");
    pg.down().await;
    eprintln!("kill matrix took {:?}", started.elapsed());
}
