//! Real etcd member processes: quorum loss and recovery, permanent data loss, snapshot restore,
//! learners, and no leaked processes. Needs the `etcd` binary (skips without it unless
//! `DRUIDCTL_REQUIRE_ETCD=1`, which makes these tests fail instead).

use crate::etcd_support;

use std::time::Duration;

use etcd_support::{assert_compacted_history_takes_a_full_snapshot, restore_fresh_member};
use landscape::etcd::process::{etcd_children_of_this_process, live_member_pids};
use landscape::etcd::snapshot::restore_snapshot;
use landscape::etcd::{LocalCluster, LocalClusterOptions, MemberConfig, MemberProcess, require_etcd};

async fn three_members(dir: &std::path::Path, binary: &landscape::etcd::EtcdBinary) -> LocalCluster {
    LocalCluster::start(binary, dir, 3, LocalClusterOptions::default()).await.expect("3-member cluster starts")
}

#[tokio::test]
async fn killing_two_of_three_members_loses_quorum_and_their_return_restores_it_with_the_keys() {
    let Some(binary) = require_etcd("quorum loss") else { return };
    let dir = tempfile::tempdir().unwrap();
    let cluster = three_members(dir.path(), &binary).await;
    let c0 = cluster.client(0);
    for i in 0..20 {
        let (k, v) = (format!("/registry/k{i}"), format!("v{i}"));
        landscape::etcd::cluster::retry_transient(Duration::from_secs(10), || c0.put(&k, &v)).await.unwrap();
    }

    cluster.member(1).kill();
    cluster.member(2).kill();
    let short = cluster.client(0).with_timeout(Duration::from_millis(1500));
    let err = short.put("/registry/during-loss", "x").await.expect_err("no quorum, no write");
    assert!(err.is_unavailable(), "write without quorum must time out, got {err}");
    assert!(!cluster.is_quorate().await);

    cluster.member(1).start().unwrap();
    cluster.member(2).start().unwrap();
    cluster.wait_quorate(Duration::from_secs(20)).await.expect("quorum comes back");
    // Only the acknowledged keys: the timed-out write was proposed and may still commit once quorum is back.
    let kvs = cluster.client(2).get_prefix("/registry/k").await.unwrap();
    assert_eq!(kvs.len(), 20, "every key written before the loss is there");
    assert_eq!(cluster.client(1).get("/registry/k7").await.unwrap().unwrap().value_str(), "v7");
    assert!(cluster.member(1).starts() == 2 && cluster.member(2).starts() == 2);
}

#[tokio::test]
async fn destroying_two_members_data_leaves_the_cluster_without_quorum() {
    let Some(binary) = require_etcd("permanent loss") else { return };
    let dir = tempfile::tempdir().unwrap();
    let cluster = three_members(dir.path(), &binary).await;
    cluster.client(0).put("k", "v").await.unwrap();

    cluster.destroy_member_data(1).unwrap();
    cluster.destroy_member_data(2).unwrap();
    assert!(!cluster.member(1).config().data_dir.exists());
    // Restarting the survivor does not bring quorum back: the majority is gone for good.
    // (A restarted member serves clients only after publishing itself through raft, which needs quorum.)
    cluster.member(0).restart().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(cluster.member(0).is_running());
    assert!(!cluster.is_quorate().await);
    let err = cluster.client(0).with_timeout(Duration::from_millis(1500)).get("k").await.expect_err("no quorum read");
    assert!(err.is_unavailable(), "{err}");
    assert!(cluster.member(0).wait_serving(Duration::from_secs(2)).await.is_err(), "never serves without a majority");
}

#[tokio::test]
async fn a_snapshot_restores_into_a_fresh_single_member_with_the_keys() {
    let Some(binary) = require_etcd("snapshot restore") else { return };
    let dir = tempfile::tempdir().unwrap();
    let cluster = three_members(dir.path(), &binary).await;
    let c = cluster.client(1);
    for i in 0..50 {
        c.put(format!("key-{i:02}"), format!("value-{i}")).await.unwrap();
    }
    let snap = dir.path().join("store/full-snapshot.db");
    // From the member the writes went through: another member may not have applied the last ones yet.
    let rev = cluster.client(1).snapshot_to_file(&snap).await.unwrap();
    assert!(rev >= 51, "snapshot revision {rev}");
    c.put("after-snapshot", "lost").await.unwrap();
    cluster.kill_all();

    let cfg = MemberConfig::new("restored-0", dir.path().join("restored/data"), dir.path().join("restored.log"));
    restore_snapshot(&binary, &snap, &cfg).await.unwrap();
    let restored = MemberProcess::spawn(&binary, cfg).unwrap();
    restored.wait_serving(Duration::from_secs(20)).await.unwrap();
    let rc = restored.client();
    let kvs = rc.get_prefix("key-").await.unwrap();
    assert_eq!(kvs.len(), 50);
    assert_eq!(rc.get("key-42").await.unwrap().unwrap().value_str(), "value-42");
    assert!(rc.get("after-snapshot").await.unwrap().is_none(), "writes after the snapshot are not restored");
    let members = rc.member_list().await.unwrap();
    assert_eq!(members.len(), 1, "restored as a single-member cluster");
    rc.put("new", "write").await.expect("restored member takes writes");
}

#[tokio::test]
async fn a_learner_joins_catches_up_and_is_promoted() {
    let Some(binary) = require_etcd("learner") else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(&binary, dir.path(), 1, LocalClusterOptions::default()).await.unwrap();
    cluster.client(0).put("before-learner", "1").await.unwrap();
    let (idx, id) = cluster.add_learner().await.unwrap();
    let members = cluster.client(0).member_list().await.unwrap();
    assert!(members.iter().any(|m| m.id == id && m.is_learner), "{members:?}");
    cluster.promote_when_synced(id, Duration::from_secs(20)).await.unwrap();
    let members = cluster.client(0).member_list().await.unwrap();
    assert_eq!(members.len(), 2);
    assert!(members.iter().all(|m| !m.is_learner), "{members:?}");
    // The promoted member learns of its promotion when it applies the conf change; until then it still says learner.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = cluster.client(idx).status().await.unwrap();
        if !status.is_learner || tokio::time::Instant::now() > deadline {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status.member_id, id);
    assert!(!status.is_learner, "the promoted member still reports itself as a learner after 10 s");
    assert_eq!(cluster.client(idx).get("before-learner").await.unwrap().unwrap().value_str(), "1");
}

#[tokio::test]
async fn member_restore_removes_cleans_adds_as_learner_and_promotes_while_keeping_quorum() {
    let Some(binary) = require_etcd("member restore") else { return };
    let dir = tempfile::tempdir().unwrap();
    let cluster = three_members(dir.path(), &binary).await;
    cluster.client(0).put("a", "1").await.unwrap();
    let bad = cluster.member(2);
    let bad_id = cluster.client(2).status().await.unwrap().member_id;
    bad.kill();
    std::fs::write(bad.config().data_dir.join("member/snap/db"), b"garbage").unwrap();
    // The corrupt member does not come up.
    bad.start().unwrap();
    assert!(bad.wait_serving(Duration::from_secs(5)).await.is_err(), "corrupt data dir must fail");
    bad.kill();

    let c0 = cluster.client(0);
    landscape::etcd::cluster::retry_transient(Duration::from_secs(20), || c0.member_remove(bad_id)).await.unwrap();
    bad.wipe_data().unwrap();
    let added = landscape::etcd::cluster::add_member_retrying(&c0, &[bad.peer_url()], true, Duration::from_secs(20))
        .await
        .unwrap();
    let members = c0.member_list().await.unwrap();
    bad.update_config(|c| {
        c.initial_cluster = landscape::etcd::cluster::initial_cluster_for_join(&members, added.id, &c.name);
        c.initial_cluster_state = landscape::etcd::ClusterState::Existing;
    });
    bad.start().unwrap();
    bad.wait_serving(Duration::from_secs(20)).await.unwrap();
    cluster.promote_when_synced(added.id, Duration::from_secs(20)).await.unwrap();
    assert!(cluster.is_quorate().await);
    assert_eq!(cluster.client(2).get("a").await.unwrap().unwrap().value_str(), "1");
    assert_eq!(c0.member_list().await.unwrap().iter().filter(|m| !m.is_learner).count(), 3);
}

#[tokio::test]
async fn maintenance_defragment_and_compact_work_on_a_member() {
    let Some(binary) = require_etcd("maintenance") else { return };
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(&binary, dir.path(), 1, LocalClusterOptions::default()).await.unwrap();
    let c = cluster.client(0);
    let mut rev = 0;
    for i in 0..30 {
        rev = c.put("churn", format!("{i}")).await.unwrap();
    }
    c.compact(rev).await.unwrap();
    c.defragment().await.unwrap();
    let (changed, now) = c.changed_since(rev).await.unwrap();
    assert_eq!(changed.len(), 1);
    assert_eq!(now, rev);
    assert!(c.status().await.unwrap().is_leader());
}

#[tokio::test]
async fn no_etcd_process_survives_its_supervisor() {
    let Some(binary) = require_etcd("no leaks") else { return };
    let dir = tempfile::tempdir().unwrap();
    let cluster = three_members(dir.path(), &binary).await;
    let mut pids: Vec<u32> = cluster.members().iter().filter_map(|m| m.pid()).collect();
    pids.sort_unstable();
    assert_eq!(pids.len(), 3);
    // Only this test's processes count: other tests of this binary may run etcd in the same process
    // (`cargo test` runs them on threads of one process).
    assert_eq!(etcd_children_using(dir.path()), pids, "the members are etcd children of this process");
    assert!(pids.iter().all(|p| live_member_pids().contains(p)));
    drop(cluster);
    assert_eq!(etcd_children_using(dir.path()), Vec::<u32>::new(), "etcd children left behind");
    let live = live_member_pids();
    for pid in pids {
        assert!(!live.contains(&pid), "pid {pid} still registered as live");
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists() || is_zombie(pid), "pid {pid} still alive");
    }
}

/// The etcd children of this process whose command line names a path under `dir` (their data directory), sorted.
fn etcd_children_using(dir: &std::path::Path) -> Vec<u32> {
    let dir = dir.to_string_lossy();
    let mut v: Vec<u32> = etcd_children_of_this_process()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(&*dir))
        })
        .collect();
    v.sort_unstable();
    v
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
}

/// Helper for the test below: runs only inside the child process it spawns.
#[tokio::test]
async fn leak_helper_starts_a_member_and_waits_to_be_killed() {
    let Ok(dir) = std::env::var("DRUIDCTL_LEAK_HELPER_DIR") else { return };
    let binary = landscape::etcd::EtcdBinary::locate().unwrap();
    let dir = std::path::PathBuf::from(dir);
    let cluster = LocalCluster::start(&binary, &dir, 1, LocalClusterOptions::default()).await.unwrap();
    std::fs::write(dir.join("ready"), cluster.member(0).pid().unwrap().to_string()).unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
}

#[test]
fn a_killed_supervisor_leaves_no_etcd_behind() {
    let Some(_) = require_etcd("kill -9 leak check") else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["landscape_etcd::leak_helper_starts_a_member_and_waits_to_be_killed", "--exact", "--nocapture"])
        .env("DRUIDCTL_LEAK_HELPER_DIR", dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ready = dir.path().join("ready");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !ready.exists() {
        assert!(std::time::Instant::now() < deadline, "helper did not start etcd");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(50));
    let etcd_pid: u32 = std::fs::read_to_string(&ready).unwrap().trim().parse().unwrap();
    assert!(std::path::Path::new(&format!("/proc/{etcd_pid}")).exists());
    child.kill().unwrap(); // SIGKILL: no destructor runs in the child
    child.wait().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::path::Path::new(&format!("/proc/{etcd_pid}")).exists() && !is_zombie(etcd_pid) {
        assert!(std::time::Instant::now() < deadline, "etcd {etcd_pid} outlived its killed supervisor");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Delta snapshots replay deletes: put, full snapshot, delete + put, delta snapshot, restore into a fresh member
/// and replay → the deleted key is absent, the new key present. (The same scenario runs on simulated members in
/// `tests/sim_members.rs`.)
#[tokio::test]
async fn delta_snapshots_replay_deletes_into_a_fresh_member() {
    use landscape::backup::{ObjectStore, SnapshotKind};
    use landscape::etcd::EtcdBackend;
    use landscape::etcd::cluster::retry_transient;
    let Some(binary) = require_etcd("delta snapshots replay deletes") else { return };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let backend = EtcdBackend::Real(binary);
    let cfg = MemberConfig::new("delta-0", dir.join("m0/data"), dir.join("m0.log"));
    let m = MemberProcess::spawn_with(&backend, cfg).unwrap();
    m.wait_serving(Duration::from_secs(20)).await.unwrap();
    let c = m.client();
    retry_transient(Duration::from_secs(20), || c.put("/keep", "1")).await.unwrap();
    c.put("/gone", "2").await.unwrap();
    let store = ObjectStore::new(dir.join("store"));
    let full = store.take_full(&c).await.unwrap();
    c.delete("/gone").await.unwrap();
    c.put("/new", "3").await.unwrap();
    let delta = store.take_delta(&c).await.unwrap().expect("changes since the full snapshot");
    assert_eq!((delta.kind, delta.start_revision), (SnapshotKind::Incr, full.last_revision + 1));
    let (f, deltas) = store.latest_chain().unwrap();
    assert_eq!((&f, &deltas), (&full, &vec![delta]));
    m.kill();

    let r = restore_fresh_member(&backend, &store, &f, dir).await;
    let rc = r.client();
    let gone = retry_transient(Duration::from_secs(20), || rc.get("/gone")).await.unwrap();
    assert_eq!(gone.unwrap().value_str(), "2", "the full snapshot still has the key");
    for d in &deltas {
        assert_eq!(store.apply_delta(&rc, d).await.unwrap(), 2, "one delete and one put");
    }
    assert!(rc.get("/gone").await.unwrap().is_none(), "the delete after the full snapshot was replayed");
    assert_eq!(rc.get("/new").await.unwrap().unwrap().value_str(), "3");
    assert_eq!(rc.get("/keep").await.unwrap().unwrap().value_str(), "1");

    assert_compacted_history_takes_a_full_snapshot(&rc, dir).await;
}

/// After a restore the member's history can start below the revisions of the store's newest snapshots (here: a
/// restore of the older of two full snapshots). The full snapshot taken right after the restore and the deltas and
/// full snapshots that follow are the newest — by time, not by revision — so a later restore has the writes made
/// after the first one and none of the discarded history.
#[tokio::test]
async fn a_restore_after_a_restore_has_the_writes_made_in_between() {
    use landscape::backup::{ObjectStore, SnapshotInfo, SnapshotKind};
    use landscape::etcd::cluster::retry_transient;
    use landscape::etcd::{EtcdBackend, EtcdClient};
    let Some(binary) = require_etcd("restore after restore") else { return };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let backend = EtcdBackend::Real(binary);
    let store = ObjectStore::new(dir.join("store"));
    async fn restored(
        backend: &EtcdBackend,
        dir: &std::path::Path,
        name: &str,
        store: &ObjectStore,
        full: &SnapshotInfo,
        deltas: &[SnapshotInfo],
    ) -> (MemberProcess, EtcdClient) {
        let cfg = MemberConfig::new(name, dir.join(name).join("data"), dir.join(format!("{name}.log")));
        landscape::etcd::snapshot::restore_snapshot_with(backend, &store.path(full), &cfg).await.unwrap();
        let m = MemberProcess::spawn_with(backend, cfg).unwrap();
        m.wait_serving(Duration::from_secs(20)).await.unwrap();
        let c = m.client();
        retry_transient(Duration::from_secs(20), || c.get("/k/0")).await.unwrap();
        for d in deltas {
            store.apply_delta(&c, d).await.unwrap();
        }
        (m, c)
    }

    let cfg = MemberConfig::new("orig-0", dir.join("orig/data"), dir.join("orig.log"));
    let m = MemberProcess::spawn_with(&backend, cfg).unwrap();
    m.wait_serving(Duration::from_secs(20)).await.unwrap();
    let c = m.client();
    retry_transient(Duration::from_secs(20), || c.put("/k/0", "a")).await.unwrap();
    for i in 1..5 {
        c.put(format!("/k/{i}"), "a").await.unwrap();
    }
    let older = store.take_full(&c).await.unwrap();
    for round in 0..4 {
        for i in 0..5 {
            c.put(format!("/k/{i}"), format!("b{round}")).await.unwrap();
        }
    }
    store.take_delta(&c).await.unwrap().expect("a delta of the b writes");
    let newer = store.take_full(&c).await.unwrap();
    assert!(newer.last_revision >= older.last_revision + 20, "{older:?} {newer:?}");
    m.kill();

    // Restore the older full snapshot; backup-restore takes a full snapshot right after a restore.
    let (r, rc) = restored(&backend, dir, "first", &store, &older, &[]).await;
    let after_restore = store.take_full(&rc).await.unwrap();
    assert!(after_restore.last_revision < newer.last_revision, "the restored history starts lower");
    rc.put("/new/1", "x").await.unwrap();
    rc.delete("/k/1").await.unwrap();
    let delta = store.take_delta(&rc).await.unwrap().expect("the writes after the restore are a delta");
    assert_eq!((delta.kind, delta.start_revision), (SnapshotKind::Incr, after_restore.last_revision + 1));
    rc.put("/new/2", "y").await.unwrap();
    let full = store.take_full(&rc).await.unwrap();
    rc.put("/k/0", "c").await.unwrap();
    let last = store.take_delta(&rc).await.unwrap().expect("a delta after the new full snapshot");
    let (f, deltas) = store.latest_chain().unwrap();
    assert_eq!((&f, &deltas), (&full, &vec![last]), "the newest full snapshot and the delta after it");
    r.kill();

    let (_again, ac) = restored(&backend, dir, "again", &store, &f, &deltas).await;
    assert_eq!(ac.get("/new/1").await.unwrap().unwrap().value_str(), "x");
    assert_eq!(ac.get("/new/2").await.unwrap().unwrap().value_str(), "y");
    assert!(ac.get("/k/1").await.unwrap().is_none(), "the delete after the first restore");
    assert_eq!(ac.get("/k/0").await.unwrap().unwrap().value_str(), "c");
    for i in 2..5 {
        assert_eq!(ac.get(format!("/k/{i}")).await.unwrap().unwrap().value_str(), "a", "not the discarded b writes");
    }
}
