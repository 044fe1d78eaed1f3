//! Simulated etcd members (no etcd binary needed, so these run everywhere and fast): the gateway API the
//! landscape speaks, quorum, membership, snapshots and delta snapshots with deletes, and a whole playground on
//! simulated members (Ready, keys, `member-down`, `quorum-lost`, a sidecar snapshot restored into a fresh member,
//! `runbook cert-renewal` verifying the serials the members serve on their client TLS listeners).

use crate::etcd_support;

use std::path::Path;
use std::time::{Duration, Instant};

use etcd_support::{assert_compacted_history_takes_a_full_snapshot, restore_fresh_member};
use landscape::backup::{ObjectStore, SnapshotKind};
use landscape::etcd::cluster::{initial_cluster_for_join, retry_transient};
use landscape::etcd::process::etcd_children_of_this_process;
use landscape::etcd::snapshot::restore_snapshot_with;
use landscape::etcd::{ClusterState, EtcdBackend, EtcdClient, EtcdError, MemberConfig, MemberProcess};
use landscape::playground::BreakTarget;
use landscape::{BreakKind, LandscapeOptions, Playground, PlaygroundOptions};

fn sim() -> EtcdBackend {
    EtcdBackend::simulated("test")
}

/// `n` simulated members bootstrapping one cluster under `dir`, serving, with a leader.
async fn sim_cluster(dir: &Path, n: usize) -> Vec<MemberProcess> {
    let mut cfgs: Vec<MemberConfig> = (0..n)
        .map(|i| {
            MemberConfig::new(&format!("sim-{i}"), dir.join(format!("sim-{i}/data")), dir.join(format!("sim-{i}.log")))
        })
        .collect();
    let ic = cfgs.iter().map(|c| format!("{}={}", c.name, c.peer_url())).collect::<Vec<_>>().join(",");
    for c in &mut cfgs {
        c.initial_cluster = ic.clone();
    }
    let members: Vec<MemberProcess> = cfgs.into_iter().map(|c| MemberProcess::spawn_with(&sim(), c).unwrap()).collect();
    for m in &members {
        assert!(m.is_simulated());
        m.wait_serving(Duration::from_secs(5)).await.unwrap();
    }
    wait_healthy(&members[0].client(), true).await;
    members
}

async fn wait_healthy(c: &EtcdClient, want: bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.is_healthy().await != want {
        assert!(Instant::now() < deadline, "{} healthy should become {want}", c.endpoint());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn code_and_message(e: EtcdError) -> (i64, String) {
    match e {
        EtcdError::Server { code, message, .. } => (code, message),
        other => panic!("expected a server error, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_members_replicate_and_need_a_majority_for_writes() {
    let dir = tempfile::tempdir().unwrap();
    let m = sim_cluster(dir.path(), 3).await;
    assert!(etcd_children_of_this_process().is_empty(), "no etcd process runs");
    let (c0, c1, c2) = (m[0].client(), m[1].client(), m[2].client());
    let rev = c0.put("/a", "1").await.unwrap();
    assert_eq!(c0.put("/a", "2").await.unwrap(), rev + 1);
    let kv = c2.get("/a").await.unwrap().expect("replicated to member 2");
    assert_eq!((kv.value_str(), kv.mod_revision, kv.create_revision), ("2".into(), rev + 1, rev));
    let members = c1.member_list().await.unwrap();
    let mut names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["sim-0", "sim-1", "sim-2"], "started members publish their names");
    let statuses = [c0.status().await.unwrap(), c1.status().await.unwrap(), c2.status().await.unwrap()];
    assert_eq!(statuses.iter().filter(|s| s.is_leader()).count(), 1, "exactly one leader: {statuses:?}");
    assert!(statuses.iter().all(|s| s.leader == statuses[0].leader && s.revision == rev + 1));

    // One member down: still a majority.
    m[2].kill();
    assert!(!m[2].is_running() && m[2].exit_status().is_none(), "a kill leaves no exit status, like a reaped process");
    assert!(c2.status().await.unwrap_err().is_unavailable());
    c0.put("/b", "while-2-down").await.unwrap();
    // Two down: no leader, writes and linearizable reads refused, health false; status still answers.
    m[1].kill();
    wait_healthy(&c0, false).await;
    let err = c0.put("/c", "x").await.unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    assert!(c0.get("/a").await.unwrap_err().is_unavailable());
    assert_eq!(c0.status().await.unwrap().leader, 0);
    // Member 2 comes back from its data directory and catches up.
    m[2].start().unwrap();
    m[2].wait_serving(Duration::from_secs(5)).await.unwrap();
    wait_healthy(&c0, true).await;
    assert_eq!(c2.get("/b").await.unwrap().unwrap().value_str(), "while-2-down");
    assert_eq!(m[2].starts(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_membership_learners_removal_and_corrupt_data_behave_like_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let m = sim_cluster(dir.path(), 3).await;
    let c0 = m[0].client();
    c0.put("/k", "v").await.unwrap();
    // Remove member 2 (it is running: it exits, like etcd's "permanently removed").
    let id2 = m[2].client().status().await.unwrap().member_id;
    c0.member_remove(id2).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while m[2].is_running() {
        assert!(Instant::now() < deadline, "a removed member exits");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!m[2].exit_status().unwrap().success());
    let (code, msg) = code_and_message(c0.member_remove(id2).await.unwrap_err());
    assert_eq!((code, msg.as_str()), (5, "etcdserver: member not found"));

    // A new member joins as a learner, is promoted only once running and in sync.
    let mut cfg = MemberConfig::new("sim-3", dir.path().join("sim-3/data"), dir.path().join("sim-3.log"));
    let added = c0.member_add(&[cfg.peer_url()], true).await.unwrap();
    assert!(added.is_learner && added.name.is_empty());
    let (_, msg) = code_and_message(c0.member_add(&["http://127.0.0.1:1".into()], true).await.unwrap_err());
    assert_eq!(msg, "etcdserver: too many learner members in cluster");
    let (_, msg) = code_and_message(c0.member_promote(added.id).await.unwrap_err());
    assert_eq!(msg, "etcdserver: can only promote a learner member which is in sync with leader");
    cfg.initial_cluster = initial_cluster_for_join(&c0.member_list().await.unwrap(), added.id, "sim-3");
    cfg.initial_cluster_state = ClusterState::Existing;
    let learner = MemberProcess::spawn_with(&sim(), cfg).unwrap();
    learner.wait_serving(Duration::from_secs(5)).await.unwrap();
    let st = learner.client().status().await.unwrap();
    assert!(st.is_learner && st.member_id == added.id);
    let (_, msg) = code_and_message(learner.client().put("/x", "y").await.unwrap_err());
    assert_eq!(msg, "etcdserver: rpc not supported for learner");
    c0.member_promote(added.id).await.unwrap();
    assert_eq!(learner.client().get("/k").await.unwrap().unwrap().value_str(), "v", "the learner caught up");
    let members = c0.member_list().await.unwrap();
    assert_eq!(members.len(), 3);
    assert!(members.iter().all(|m| !m.is_learner && !m.name.is_empty()), "{members:?}");

    // Strict reconfiguration: with one of three voters down, removing a running voter would lose quorum.
    m[1].kill();
    let id3 = added.id;
    let (_, msg) = code_and_message(c0.member_remove(id3).await.unwrap_err());
    assert_eq!(msg, "etcdserver: unhealthy cluster");

    // A corrupt database: the member exits at start.
    learner.kill();
    std::fs::write(dir.path().join("sim-3/data/member/snap/db"), b"this is not a bbolt database").unwrap();
    learner.start().unwrap();
    let err = learner.wait_serving(Duration::from_secs(2)).await.unwrap_err();
    assert!(matches!(err, EtcdError::ExitedEarly { .. }), "{err}");
    let log = std::fs::read_to_string(dir.path().join("sim-3.log")).unwrap();
    assert!(log.contains("corrupt"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_compaction_and_defragmentation_answer_like_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let m = sim_cluster(dir.path(), 1).await;
    let c = m[0].client();
    let value = "x".repeat(16 * 1024);
    for i in 0..32 {
        c.put(format!("/garbage/{i:02}"), &value).await.unwrap();
    }
    assert_eq!(c.get_prefix("/garbage/").await.unwrap().len(), 32);
    for i in 0..32 {
        assert_eq!(c.delete(format!("/garbage/{i:02}")).await.unwrap(), 1);
    }
    assert_eq!(c.delete("/garbage/00").await.unwrap(), 0);
    let rev = c.status().await.unwrap().revision;
    let (code, msg) = code_and_message(c.compact(rev + 1).await.unwrap_err());
    assert_eq!((code, msg.as_str()), (11, "etcdserver: mvcc: required revision is a future revision"));
    c.compact(rev).await.unwrap();
    let (_, msg) = code_and_message(c.compact(rev).await.unwrap_err());
    assert_eq!(msg, "etcdserver: mvcc: required revision has been compacted");
    let before = c.status().await.unwrap();
    assert!(before.db_size > before.db_size_in_use + 400_000, "{before:?}");
    c.defragment().await.unwrap();
    let after = c.status().await.unwrap();
    assert!(after.db_size < before.db_size / 4, "defragmentation shrinks the database: {after:?} vs {before:?}");
    let (changed, now) = c.changed_since(rev).await.unwrap();
    assert!(changed.is_empty() && now == rev);
}

/// put, full snapshot, delete + put, delta snapshot, restore into a fresh member and replay: the deleted key is
/// absent, the new one present. Then: a delta whose history was compacted becomes a full snapshot.
async fn delta_chain_restores_deletes(backend: &EtcdBackend, dir: &Path) {
    let cfg = MemberConfig::new("delta-0", dir.join("m0/data"), dir.join("m0.log"));
    let m = MemberProcess::spawn_with(backend, cfg).unwrap();
    m.wait_serving(Duration::from_secs(20)).await.unwrap();
    let c = m.client();
    retry_transient(Duration::from_secs(20), || c.put("/keep", "1")).await.unwrap();
    c.put("/gone", "2").await.unwrap();
    let store = ObjectStore::new(dir.join("store"));
    let full = store.take_full(&c).await.unwrap();
    c.delete("/gone").await.unwrap();
    c.put("/new", "3").await.unwrap();
    c.put("/keep", "1b").await.unwrap();
    let delta = store.take_delta(&c).await.unwrap().expect("changes since the full snapshot");
    assert_eq!((delta.kind, delta.start_revision), (SnapshotKind::Incr, full.last_revision + 1));
    assert!(store.take_delta(&c).await.unwrap().is_none(), "nothing changed since");
    let (f, deltas) = store.latest_chain().unwrap();
    assert_eq!((&f, &deltas), (&full, &vec![delta]));
    m.kill();

    let r = restore_fresh_member(backend, &store, &f, dir).await;
    let rc = r.client();
    let gone = retry_transient(Duration::from_secs(20), || rc.get("/gone")).await.unwrap();
    assert_eq!(gone.unwrap().value_str(), "2", "the full snapshot still has the key");
    for d in &deltas {
        assert_eq!(store.apply_delta(&rc, d).await.unwrap(), 3);
    }
    assert!(rc.get("/gone").await.unwrap().is_none(), "the delete after the full snapshot was replayed");
    assert_eq!(rc.get("/new").await.unwrap().unwrap().value_str(), "3");
    assert_eq!(rc.get("/keep").await.unwrap().unwrap().value_str(), "1b");

    assert_compacted_history_takes_a_full_snapshot(&rc, dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_delta_snapshots_replay_deletes() {
    let dir = tempfile::tempdir().unwrap();
    delta_chain_restores_deletes(&sim(), dir.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_of_the_other_kind_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let m = sim_cluster(dir.path(), 1).await;
    let snap = dir.path().join("snap.db");
    m[0].client().snapshot_to_file(&snap).await.unwrap();
    assert!(landscape::etcd::simulated::is_snapshot_file(&snap));
    let real = EtcdBackend::Real(landscape::etcd::EtcdBinary {
        etcd: "/nonexistent/etcd".into(),
        etcdctl: Some("/nonexistent/etcdctl".into()),
    });
    let cfg = MemberConfig::new("x", dir.path().join("x/data"), dir.path().join("x.log"));
    let err = restore_snapshot_with(&real, &snap, &cfg).await.unwrap_err().to_string();
    assert!(err.contains("taken from a simulated member"), "{err}");
    std::fs::write(dir.path().join("bbolt.db"), b"\0\0\0\0bbolt pages").unwrap();
    let err = restore_snapshot_with(&sim(), &dir.path().join("bbolt.db"), &cfg).await.unwrap_err().to_string();
    assert!(err.contains("snapshots of real etcd need real etcd members"), "{err}");
}

async fn simulated_playground(dir: &Path) -> Playground {
    let mut opts = PlaygroundOptions::new(dir);
    opts.landscape = Some(LandscapeOptions { etcd: Some(sim()), ..LandscapeOptions::new(dir) });
    let pg = Playground::up(opts).await.expect("playground up");
    let started = Instant::now();
    pg.wait_ready(Duration::from_secs(30)).await.expect("3 simulated members ready");
    eprintln!("simulated playground: Ready after {:?}", started.elapsed());
    assert!(pg.etcd_backend().is_simulated());
    assert!(
        pg.record().fallbacks.iter().any(|f| f.instead.contains("simulated in-process members")),
        "the record says members are simulated: {:?}",
        pg.record().fallbacks
    );
    pg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_playground_is_ready_serves_keys_and_a_downed_member_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let pg = simulated_playground(dir.path()).await;
    assert!(etcd_children_of_this_process().is_empty(), "no etcd process runs");
    let ns = pg.namespaces()[0].clone();
    let c = pg.etcd_client(&ns, 0).unwrap();
    for i in 0..10 {
        c.put(format!("/registry/pods/p{i}"), format!("v{i}")).await.unwrap();
    }
    assert_eq!(pg.etcd_client(&ns, 2).unwrap().get_prefix("/registry/pods/").await.unwrap().len(), 10);

    let target = BreakTarget { members: vec![2], down_for: Some(Duration::from_secs(2)), ..Default::default() };
    pg.break_(BreakKind::MemberDown, &target).await.unwrap();
    let m2 = pg.member(&ns, 2).unwrap();
    assert!(!m2.process().is_running());
    c.put("/registry/pods/while-down", "x").await.expect("two of three members keep quorum");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !m2.process().is_running() {
        assert!(Instant::now() < deadline, "the member comes back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pg.wait_ready(Duration::from_secs(20)).await.expect("all members ready again");
    let kvs = pg.etcd_client(&ns, 2).unwrap().get_prefix("/registry/pods/").await.unwrap();
    assert_eq!(kvs.len(), 11, "the returned member has the keys, also those written while it was down");
    assert_eq!(m2.process().starts(), 2);
    pg.down().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_playground_loses_quorum_for_good_when_two_members_lose_their_data() {
    let dir = tempfile::tempdir().unwrap();
    let pg = simulated_playground(dir.path()).await;
    let ns = pg.namespaces()[0].clone();
    let c = pg.etcd_client(&ns, 0).unwrap();
    c.put("/registry/k", "v").await.unwrap();
    pg.break_(BreakKind::QuorumLost, &BreakTarget::default()).await.unwrap();
    pg.wait_ready_reason(&ns, "QuorumLost", Duration::from_secs(15)).await.expect("Etcd reports QuorumLost");
    let err = c.put("/registry/k", "w").await.unwrap_err();
    assert!(err.is_unavailable(), "writes fail without quorum: {err}");
    assert!(!c.is_healthy().await);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(pg.etcd_ready(&ns).await.unwrap().1, "QuorumLost", "permanent loss does not heal");
    for i in [1, 2] {
        assert!(!pg.member(&ns, i).unwrap().process().is_running(), "member {i} cannot join a cluster without quorum");
    }
    pg.down().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_snapshot_of_simulated_members_restores_into_a_fresh_simulated_member() {
    let dir = tempfile::tempdir().unwrap();
    let pg = simulated_playground(dir.path()).await;
    let ns = pg.namespaces()[0].clone();
    let c = pg.etcd_client(&ns, 1).unwrap();
    for i in 0..25 {
        c.put(format!("/registry/secrets/s{i:02}"), format!("secret-{i}")).await.unwrap();
    }
    // The sidecar's HTTP API (`/snapshot/full`) of member 0, through the API server's pod proxy: the
    // playground's Etcd has `spec.backup.tls`, so the sidecar serves HTTPS and the proxy path carries `https:`.
    let etcd: druidctl::api::Etcd = kube::Api::namespaced(pg.client(), &ns).get(pg.etcd_name()).await.unwrap();
    assert!(etcd.spec.backup.tls.is_some(), "Gardener-like: backup.tls");
    let target = druidctl::tasks::sidecar::Target::Member(format!("{}-0", pg.etcd_name()));
    let info = druidctl::tasks::sidecar::post(&pg.client(), &etcd, &target, "/snapshot/full").await.unwrap();
    // A plain-HTTP client cannot talk to it, as to etcd-backup-restore with --server-cert.
    let addr = pg.member(&ns, 0).unwrap().backup_addr();
    let plain = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>()
        .request(http::Request::post(format!("http://{addr}/healthz")).body(http_body_util::Full::default()).unwrap())
        .await;
    assert!(plain.is_err(), "plain HTTP to a TLS sidecar fails: {plain:?}");
    assert_eq!(info["kind"], "Full", "{info}");
    let snap =
        dir.path().join("backups").join(&ns).join(format!("{ns}_etcd-main")).join(info["snapName"].as_str().unwrap());
    assert!(landscape::etcd::simulated::is_snapshot_file(&snap), "{}", snap.display());
    c.put("/registry/secrets/after", "not in the snapshot").await.unwrap();

    let cfg = MemberConfig::new("fresh-0", dir.path().join("fresh/data"), dir.path().join("fresh.log"));
    restore_snapshot_with(&sim(), &snap, &cfg).await.unwrap();
    let fresh = MemberProcess::spawn_with(&sim(), cfg).unwrap();
    fresh.wait_serving(Duration::from_secs(5)).await.unwrap();
    let fc = fresh.client();
    wait_healthy(&fc, true).await;
    let kvs = fc.get_prefix("/registry/secrets/").await.unwrap();
    assert_eq!(kvs.len(), 25);
    assert_eq!(kvs[7].value_str(), "secret-7");
    assert_eq!(fc.member_list().await.unwrap().len(), 1, "restored as a single-member cluster");
    assert_eq!(fc.status().await.unwrap().revision, info["lastRevision"].as_i64().unwrap());
    fc.put("/new", "write").await.expect("the restored member takes writes");
    pg.down().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compaction_job_runs_on_simulated_members_and_keeps_deletes() {
    use kube::api::PostParams;
    let dir = tempfile::tempdir().unwrap();
    let pg = simulated_playground(dir.path()).await;
    let ns = pg.namespaces()[0].clone();
    let c = pg.etcd_client(&ns, 0).unwrap();
    let sidecar = pg.member(&ns, 0).unwrap();
    c.put("full", "1").await.unwrap();
    c.put("deleted-later", "x").await.unwrap();
    sidecar.snapshot_full().await.unwrap();
    c.put("delta-a", "2").await.unwrap();
    c.delete("deleted-later").await.unwrap();
    sidecar.snapshot_delta().await.unwrap().expect("a delta");
    c.put("delta-b", "3").await.unwrap();
    let last = sidecar.snapshot_delta().await.unwrap().expect("a delta");

    let jobs = kube::Api::<k8s_openapi::api::batch::v1::Job>::namespaced(pg.client(), &ns);
    let job = serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        // As etcd-druid's compaction controller writes it (internal/controller/compaction/reconciler.go).
        "metadata": {"name": "etcd-main-compactor", "namespace": ns,
                     "labels": {"app.kubernetes.io/component": "etcd-snapshot-compaction-job",
                                "app.kubernetes.io/part-of": "etcd-main"}},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "compact-backup", "image": "etcdbrctl:v0.30.0",
                            "args": ["compact", "--storage-provider=Local", "--store-container=playground",
                                     format!("--store-prefix={ns}/etcd-main"), "--enable-snapshot-lease-renewal=true",
                                     "--full-snapshot-lease-name=etcd-main-full-snap",
                                     "--delta-snapshot-lease-name=etcd-main-delta-snap"]}]}}},
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let st = loop {
        let st = jobs.get("etcd-main-compactor").await.unwrap().status.unwrap_or_default();
        if st.completion_time.is_some() || st.failed.unwrap_or(0) > 0 {
            break st;
        }
        assert!(Instant::now() < deadline, "compaction job did not finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(st.succeeded, Some(1), "{:?}", st.conditions);
    let store = ObjectStore::new(dir.path().join("backups").join(&ns).join(format!("{ns}_etcd-main")));
    let compacted = store
        .list()
        .into_iter()
        .find(|s| s.kind == SnapshotKind::Full && s.last_revision == last.last_revision)
        .expect("a compacted full snapshot named after the last delta");
    let cfg = MemberConfig::new("check-0", dir.path().join("check/data"), dir.path().join("check.log"));
    restore_snapshot_with(&sim(), &store.path(&compacted), &cfg).await.unwrap();
    let check = MemberProcess::spawn_with(&sim(), cfg).unwrap();
    check.wait_serving(Duration::from_secs(5)).await.unwrap();
    let cc = check.client();
    wait_healthy(&cc, true).await;
    for k in ["full", "delta-a", "delta-b"] {
        assert!(cc.get(k).await.unwrap().is_some(), "{k} is in the compacted snapshot");
    }
    assert!(cc.get("deleted-later").await.unwrap().is_none(), "the delete of a delta is compacted in");
    pg.down().await.unwrap();
}

/// Waits until member `ordinal` is a voting member again under a new member ID, healthy, with the keys.
async fn wait_rejoined(pg: &Playground, ns: &str, ordinal: u32, old_id: u64) {
    let name = format!("etcd-main-{ordinal}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert_ne!(pg.etcd_ready(ns).await.unwrap().1, "QuorumLost", "quorum must be kept");
        let members = pg.etcd_client(ns, 0).unwrap().member_list().await.unwrap();
        if members.iter().any(|m| m.name == name && m.id != old_id && !m.is_learner)
            && pg.etcd_client(ns, ordinal).unwrap().is_healthy().await
        {
            break;
        }
        assert!(Instant::now() < deadline, "{name} not restored: {members:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(pg.etcd_client(ns, ordinal).unwrap().get("before").await.unwrap().unwrap().value_str(), "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_members_that_lose_or_corrupt_their_data_rejoin_as_learners_without_losing_quorum() {
    let dir = tempfile::tempdir().unwrap();
    let pg = simulated_playground(dir.path()).await;
    let ns = pg.namespaces()[0].clone();
    pg.etcd_client(&ns, 0).unwrap().put("before", "1").await.unwrap();

    let old_id = pg.etcd_client(&ns, 2).unwrap().status().await.unwrap().member_id;
    pg.break_(BreakKind::MemberLost, &BreakTarget::default()).await.unwrap();
    wait_rejoined(&pg, &ns, 2, old_id).await;
    pg.wait_ready(Duration::from_secs(20)).await.unwrap();

    let old_id = pg.etcd_client(&ns, 1).unwrap().status().await.unwrap().member_id;
    let target = BreakTarget { members: vec![1], ..Default::default() };
    pg.break_(BreakKind::CorruptMember, &target).await.unwrap();
    wait_rejoined(&pg, &ns, 1, old_id).await;
    assert!(pg.member(&ns, 1).unwrap().process().starts() >= 2, "the corrupt member crashed before it was restored");
    pg.wait_ready(Duration::from_secs(20)).await.unwrap();
    assert_eq!(pg.etcd_client(&ns, 0).unwrap().member_list().await.unwrap().len(), 3);
    pg.down().await.unwrap();
}

/// Serial of the certificate in the Etcd's server TLS secret.
async fn issued_serial(pg: &Playground, ns: &str) -> String {
    use k8s_openapi::api::core::v1::Secret;
    let s = kube::Api::<Secret>::namespaced(pg.client(), ns).get("etcd-server").await.unwrap();
    let crt = String::from_utf8(s.data.unwrap()["tls.crt"].0.clone()).unwrap();
    druidctl::certs::served::serial_of_pem(&crt).expect("a certificate in tls.crt")
}

/// The serial each member serves on its client TLS endpoint (the URL its pod publishes).
async fn served_serials(pg: &Playground, ns: &str) -> Vec<String> {
    use druidctl::certs::served::{member_client_tls_url, served_serial};
    use k8s_openapi::api::core::v1::Pod;
    let etcd = kube::Api::<druidctl::api::Etcd>::namespaced(pg.client(), ns).get("etcd-main").await.unwrap();
    let mut out = Vec::new();
    for i in 0..3 {
        let pod = kube::Api::<Pod>::namespaced(pg.client(), ns).get(&format!("etcd-main-{i}")).await.unwrap();
        let url = member_client_tls_url(&pod, &etcd).expect("the member publishes its client TLS URL");
        out.push(served_serial(&url, Duration::from_secs(3)).await.unwrap_or_else(|e| panic!("etcd-main-{i}: {e}")));
    }
    out
}

/// Simulated members serve client TLS with the server TLS secret's key pair, loaded at start: `runbook
/// cert-renewal` (the real binary) renews, restarts them one at a time and verifies the new serial on each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_members_serve_client_tls_and_cert_renewal_verifies_the_new_serial() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let pg = simulated_playground(dir.path()).await;
    let ns = pg.namespaces()[0].clone();
    let before = issued_serial(&pg, &ns).await;
    assert_eq!(served_serials(&pg, &ns).await, vec![before.clone(); 3], "members serve the secret's certificate");

    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_druidctl"))
            .arg("--kubeconfig")
            .arg(pg.kubeconfig_path())
            .args(["runbook", "cert-renewal", "-n", &ns, "etcd-main", "--yes", "-o", "jsonl"])
            .env_remove("KUBECONFIG")
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the runbook finished in time")
    .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let events: Vec<serde_json::Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let warnings: Vec<_> = events.iter().filter(|e| e["event"] == "warning").collect();
    assert!(warnings.is_empty(), "every member was reachable and verified: {warnings:?}");
    assert!(events.iter().any(|e| e["event"] == "finished"), "{stdout}");
    let started_steps: Vec<&str> =
        events.iter().filter(|e| e["event"] == "stepStarted").filter_map(|e| e["name"].as_str()).collect();
    assert_eq!(started_steps.last(), Some(&"VerifyServedCertificates"), "{stdout}");

    let after = issued_serial(&pg, &ns).await;
    assert_ne!(after, before, "the renewal issued a new certificate");
    assert_eq!(served_serials(&pg, &ns).await, vec![after; 3], "every member serves the new serial");
    pg.down().await.unwrap();
    eprintln!("cert renewal on simulated members took {:?}", started.elapsed());
}
