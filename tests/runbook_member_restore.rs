//! The member-restore runbook through the real binary on a playground with real etcd: a member that stays
//! down is replaced by an empty one that rejoins as a learner and is promoted, while the Etcd stays Ready
//! (quorate) the whole time. Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`).

use crate::runbook_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use landscape::BreakKind;
use landscape::etcd::require_etcd;
use landscape::playground::BreakTarget;
use runbook_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_restore_rejoins_a_failed_member_and_the_etcd_stays_ready_throughout() {
    let Some(_) = require_etcd("runbook member restore") else { return };
    let dir = tempfile::tempdir().unwrap();
    let pg = Arc::new(playground(dir.path(), 3).await);
    let ns = pg.namespaces()[0].clone();
    let c = pg.etcd_client(&ns, 0).unwrap();
    for i in 0..10 {
        c.put(format!("/k/{i}"), "v").await.unwrap();
    }
    // The node of member 2 is gone for good (as far as this test lives).
    let target = BreakTarget { members: vec![2], down_for: Some(Duration::from_secs(600)), ..Default::default() };
    pg.break_(BreakKind::MemberDown, &target).await.unwrap();

    // Watch the Etcd's Ready condition while the runbook runs.
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (pg, ns, done) = (pg.clone(), ns.clone(), done.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while !done.load(Ordering::SeqCst) {
                if let Some((status, reason)) = pg.etcd_ready(&ns).await
                    && status != "True"
                {
                    seen.push(reason);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            seen
        })
    };

    // The health model notices the member within a lease period; until then the runbook refuses (healthy).
    let mut r =
        run(&pg, &["runbook", "member-restore", "-n", &ns, "etcd-main", "etcd-main-2", "--yes", "-o", "jsonl"]).await;
    for _ in 0..20 {
        if r.code == 0 || !r.stderr.contains("is healthy") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        r = run(&pg, &["runbook", "member-restore", "-n", &ns, "etcd-main", "etcd-main-2", "--yes", "-o", "jsonl"])
            .await;
    }
    assert_eq!(r.code, 0, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    assert_eq!(started_steps(&r.stdout), ["DeleteMemberData", "WaitMember2Ready", "VerifyAllMembersReady"]);
    let tasks = kube::Api::<druidctl::api::EtcdOperatorTask>::namespaced(pg.client(), &ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(tasks.len(), 1, "one runbook task journals the run");
    let journal = serde_json::to_value(druidctl::tasks::step::journal_of(&tasks[0]).unwrap()).unwrap();
    check_time_accounting(&r.stdout, &journal, "member-restore");
    done.store(true, Ordering::SeqCst);
    let not_ready = watcher.await.unwrap();
    assert!(not_ready.is_empty(), "the Etcd must stay Ready throughout, saw: {not_ready:?}");

    let c2 = pg.etcd_client(&ns, 2).unwrap();
    let members = c2.member_list().await.unwrap();
    assert_eq!(members.len(), 3);
    assert!(members.iter().all(|m| !m.is_learner), "the restored member is promoted: {members:?}");
    assert_eq!(c2.get_prefix("/k/").await.unwrap().len(), 10, "the new member has the data");
    match Arc::try_unwrap(pg) {
        Ok(pg) => pg.down().await,
        Err(_) => panic!("playground still shared"),
    }
}
