//! The space-recovery runbook through the real binary on a playground with real etcd. `break space-exceeded`
//! gives the Etcd a 16Mi quota through its spec and fills the database until etcd raises NOSPACE; etcd-druid's
//! conditions stay green (as the real ones do), only etcd tells. The runbook compacts, defragments every member
//! (followers first, the leader last), disarms NOSPACE and checks a write: afterwards writes work again, the
//! alarm list is empty and every member's database is smaller. The same run killed with SIGKILL at every step
//! and phase resumes to the same end, defragmenting each member once. A cluster with room to spare is refused
//! without `--force`. Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`).

use crate::runbook_support;

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use druidctl::api::{Etcd, EtcdOperatorTask};
use druidctl::runbook::engine::{ABORT_AT_ENV, KillPhase};
use druidctl::tasks::space_recovery::{JOURNAL_AFTER, JOURNAL_BEFORE, SpaceReading};
use etcd_client::{AlarmAction, AlarmType, Client as EtcdClient};
use kube::Api;
use landscape::BreakKind;
use landscape::etcd::require_etcd;
use landscape::playground::BreakTarget;
use landscape::space::FILL_PREFIX;
use runbook_support::*;

const REJECTED: i32 = 3;

/// A gRPC client on member `i`'s plain loopback client URL.
async fn grpc(pg: &landscape::Playground, ns: &str, i: u32) -> EtcdClient {
    let url = pg.etcd_client(ns, i).unwrap().endpoint().to_string();
    EtcdClient::connect([url], None).await.unwrap()
}

/// The alarms etcd lists, as `etcdctl alarm list` spells them.
async fn alarms(pg: &landscape::Playground, ns: &str) -> Vec<String> {
    let mut c = grpc(pg, ns, 0).await;
    let r = c.alarm(AlarmAction::Get, AlarmType::None, None).await.unwrap();
    r.alarms().iter().map(|a| format!("{:?}", a.alarm())).collect()
}

/// Fills the database until NOSPACE and checks what the world looks like then.
async fn exceed_space(pg: &landscape::Playground, ns: &str) {
    let said = pg.break_(BreakKind::SpaceExceeded, &BreakTarget::default()).await.unwrap();
    assert!(said.contains("NOSPACE") && said.contains("16Mi"), "{said}");
    assert!(alarms(pg, ns).await.contains(&"Nospace".to_string()), "etcd raised NOSPACE");
    let c = pg.etcd_client(ns, 1).unwrap();
    let refused = c.put("/after-nospace", "x").await.unwrap_err().to_string();
    assert!(refused.contains("database space exceeded"), "{refused}");
    assert!(!c.get_prefix(FILL_PREFIX).await.unwrap().is_empty(), "reads still work");
    // etcd-druid sees nothing wrong: members ready, leases renewed, backups fine.
    let etcd = Api::<Etcd>::namespaced(pg.client(), ns).get("etcd-main").await.unwrap();
    let status = serde_json::to_value(etcd.status.unwrap()).unwrap();
    for c in ["Ready", "AllMembersReady"] {
        let cond = status["conditions"].as_array().unwrap().iter().find(|x| x["type"] == c).cloned();
        assert_eq!(cond.as_ref().map(|x| x["status"].clone()), Some("True".into()), "{c}: {cond:?}");
    }
}

/// The journal of the one space-recovery task in `ns`.
async fn journal(pg: &landscape::Playground, ns: &str) -> serde_json::Value {
    let tasks = Api::<EtcdOperatorTask>::namespaced(pg.client(), ns).list(&Default::default()).await.unwrap().items;
    let tasks: Vec<&EtcdOperatorTask> = tasks.iter().filter(|t| t.spec.type_ == "SpaceRecoveryTask").collect();
    assert_eq!(tasks.len(), 1, "one task journals the run");
    serde_json::to_value(druidctl::tasks::step::journal_of(tasks[0]).unwrap()).unwrap()
}

/// Writes work, no alarm is left, and every member's database shrank (from the journal's readings and from etcd).
async fn assert_recovered(pg: &landscape::Playground, ns: &str, journal: &serde_json::Value) {
    let c = pg.etcd_client(ns, 2).unwrap();
    c.put("/after-recovery", "written").await.expect("writes work again");
    assert_eq!(c.get("/after-recovery").await.unwrap().unwrap().value_str(), "written");
    assert!(alarms(pg, ns).await.is_empty(), "the alarm list is empty");
    let before: SpaceReading = serde_json::from_value(journal[JOURNAL_BEFORE].clone()).unwrap();
    let after: SpaceReading = serde_json::from_value(journal[JOURNAL_AFTER].clone()).unwrap();
    // NOSPACE was raised by every member that refused a write for lack of space (the test wrote through two).
    assert!(!before.alarms.is_empty() && before.alarms.iter().all(|a| a.alarm == "NOSPACE"), "{before:?}");
    for (pod, b) in &before.members {
        let a = after.members.iter().find(|(p, _)| p == pod).unwrap().1;
        assert!(a.db_size * 4 < b.db_size, "{pod}: {} → {} bytes", b.db_size, a.db_size);
    }
    for i in 0..3 {
        let mut g = grpc(pg, ns, i).await;
        let s = g.status().await.unwrap();
        assert!(s.db_size() < 4 * 1024 * 1024, "member {i} now has {} bytes", s.db_size());
    }
    // The probe key is gone again.
    assert!(c.get_prefix("/druidctl/").await.unwrap().is_empty());
    // Each member was defragmented exactly once, followers first and the leader last.
    let pods: Vec<String> =
        (1..=3).map(|k| journal[format!("defragmented/{k}")]["pod"].as_str().unwrap().to_string()).collect();
    let mut unique = pods.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique, ["etcd-main-0", "etcd-main-1", "etcd-main-2"], "{pods:?}");
    let leader = before.members.iter().find(|(_, m)| m.is_leader()).map(|(p, _)| p.clone()).unwrap();
    assert_eq!(pods[2], leader, "the leader last: {pods:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn space_recovery_frees_a_full_database_and_writes_work_again() {
    let Some(_) = require_etcd("runbook space recovery") else { return };
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = pg.namespaces()[0].clone();
    exceed_space(&pg, &ns).await;

    // etcd-druid's conditions stay green; status asks etcd itself, names NOSPACE and the runbook, and exits 4.
    let s = run(&pg, &["status", "-n", &ns, "etcd-main"]).await;
    assert_eq!(s.code, 4, "stdout: {}\nstderr: {}", s.stdout, s.stderr);
    let said = format!("{}{}", s.stdout, s.stderr);
    assert!(said.contains("NOSPACE") && said.contains("runbook space-recovery"), "{said}");

    let r = run(&pg, &["runbook", "space-recovery", "-n", &ns, "etcd-main", "--yes", "-o", "jsonl"]).await;
    assert_eq!(r.code, 0, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    assert_eq!(
        started_steps(&r.stdout),
        [
            "RecordSpace",
            "CompactToCurrentRevision",
            "Defragment[1]",
            "Defragment[2]",
            "Defragment[3]",
            "DisarmNoSpace",
            "VerifyWrite"
        ]
    );
    let reports: Vec<String> = events(&r.stdout)
        .iter()
        .filter(|e| e["event"] == "stepReport" && e["name"] == "VerifyWrite")
        .flat_map(|e| {
            e["lines"].as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect::<Vec<_>>()
        })
        .collect();
    assert!(reports.iter().any(|l| l.starts_with("etcd-main-0: database") && l.contains("freed")), "{reports:?}");
    assert!(!events(&r.stdout).iter().any(|e| e["event"] == "warning"), "16Mi leaves room after defragmentation");
    let journal = journal(&pg, &ns).await;
    check_time_accounting(&r.stdout, &journal, "space-recovery");
    assert_recovered(&pg, &ns, &journal).await;

    // The human output shows the space freed per member.
    let again = run(&pg, &["runbook", "space-recovery", "-n", &ns, "etcd-main", "--yes"]).await;
    assert_eq!(again.code, REJECTED, "now it has room to spare: {}", again.stderr);
    assert!(one_sentence(&again.stderr).contains("room to spare"), "{}", again.stderr);
    pg.down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn space_recovery_refuses_a_healthy_cluster_with_room_to_spare_unless_forced() {
    let Some(_) = require_etcd("runbook space recovery refusal") else { return };
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = pg.namespaces()[0].clone();
    let before = cluster_facts(&pg, &ns).await;

    let r = run(&pg, &["runbook", "space-recovery", "-n", &ns, "etcd-main", "--yes"]).await;
    assert_eq!(r.code, REJECTED, "{}", r.stderr);
    let line = one_sentence(&r.stderr);
    assert!(
        line.contains("needs no space recovery") && line.contains("8.00 GiB") && line.contains("--force"),
        "{line}"
    );
    assert_eq!(cluster_facts(&pg, &ns).await, before, "the refusal changes nothing");

    let r = run(&pg, &["runbook", "space-recovery", "-n", &ns, "etcd-main", "--plan", "-o", "jsonl"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let verdict = events(&r.stdout).into_iter().find(|e| e["event"] == "verdict").expect("a verdict event");
    assert_eq!(verdict["refused"], true, "{verdict}");

    // Without a terminal and without --yes nothing starts either.
    let r = run(&pg, &["runbook", "space-recovery", "-n", &ns, "etcd-main", "--force"]).await;
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(one_sentence(&r.stderr).contains("terminal"), "{}", r.stderr);
    assert_eq!(cluster_facts(&pg, &ns).await, before, "the refusal changes nothing");

    let r = run(&pg, &["runbook", "space-recovery", "-n", &ns, "etcd-main", "--force", "--yes", "-o", "jsonl"]).await;
    assert_eq!(r.code, 0, "--force runs it: {}\n{}", r.stdout, r.stderr);
    assert!(events(&r.stdout).iter().any(|e| e["event"] == "finished"), "{}", r.stdout);
    pg.down().await;
}

/// Runs `args` with the test-only kill point `point`; asserts it died of SIGKILL there.
async fn cut_at(pg: &landscape::Playground, args: &[&str], point: &str) {
    let mut cmd = druidctl(pg, args);
    cmd.env("DRUIDCTL_RUNBOOK_LEASE", "1s").env(ABORT_AT_ENV, point);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output()).await.expect("the cut run ended").unwrap();
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "the run cut at {point} was killed there, not: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn space_recovery_killed_at_every_step_and_phase_resumes_and_defragments_each_member_once() {
    let Some(_) = require_etcd("space recovery kill matrix") else { return };
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = pg.namespaces()[0].clone();
    exceed_space(&pg, &ns).await;

    let first = ["runbook", "space-recovery", "-n", ns.as_str(), "etcd-main", "--yes", "-o", "jsonl"];
    let resume = ["runbook", "space-recovery", "-n", ns.as_str(), "etcd-main", "--resume", "--yes", "-o", "jsonl"];
    let steps = 7;
    let mut kills = 0;
    for i in 1..=steps {
        for phase in KillPhase::ALL {
            cut_at(&pg, if kills == 0 { &first } else { &resume }, &format!("{i}:{}", phase.as_str())).await;
            kills += 1;
        }
    }
    assert_eq!(kills, 21);
    let last = run(&pg, &resume).await;
    assert_eq!(last.code, 0, "the final run completes: {}\n{}", last.stdout, last.stderr);
    let evs = events(&last.stdout);
    assert!(evs.iter().any(|e| e["event"] == "finished"), "{}", last.stdout);
    assert!(!evs.iter().any(|e| e["event"] == "stepStarted"), "every step was done in an earlier run: {}", last.stdout);
    let journal = journal(&pg, &ns).await;
    assert_recovered(&pg, &ns, &journal).await;
    eprintln!("space recovery kill matrix: {kills} kills in {:?}", started.elapsed());
    pg.down().await;
}
