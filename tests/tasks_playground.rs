//! Tasks against the playground (landscape with real etcd processes, on the embedded API server or on the
//! external one of `DRUIDCTL_TEST_KUBECONFIG`: see `e2e_support`), executed in-process as `--local` does.
//! Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`).

mod e2e_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use druidctl::api::task::{EtcdOperatorTaskSpec, NamespacedName};
use druidctl::api::{EtcdOperatorTask, TaskState};
use druidctl::reconciler::{Reconciler, ReconcilerOptions};
use druidctl::tasks::Registry;
use e2e_support::E2e;
use kube::Api;
use kube::api::PostParams;
use landscape::Playground;
use landscape::etcd::snapshot::restore_snapshot;
use landscape::etcd::{MemberConfig, MemberProcess, require_etcd};

async fn create(pg: &Playground, ns: &str, name: &str, type_: &str, config: Option<&str>) {
    let mut t = EtcdOperatorTask::new(
        name,
        EtcdOperatorTaskSpec {
            type_: type_.into(),
            config: config.map(str::to_string),
            ttl_seconds_after_finished: None,
            owner_etcd_refrence: NamespacedName { name: pg.etcd_name().into(), namespace: ns.into() },
        },
    );
    t.metadata.namespace = Some(ns.into());
    Api::<EtcdOperatorTask>::namespaced(pg.client(), ns).create(&PostParams::default(), &t).await.unwrap();
}

fn summary(t: &EtcdOperatorTask) -> String {
    format!(
        "{:?}: {:?}",
        t.state(),
        t.status.as_ref().and_then(|s| s.last_operation.as_ref()).map(|o| (&o.name, &o.reason))
    )
}

async fn ready_playground() -> (E2e, String, Reconciler) {
    let pg = E2e::start(3, |_| {}).await;
    let ns = pg.namespaces()[0].clone();
    let r = Reconciler::new(pg.client(), Arc::new(Registry::standard()), ReconcilerOptions::new("druidctl-local-test"));
    (pg, ns, r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_snapshot_task_taken_while_keys_are_written_restores_into_a_fresh_member_with_them() {
    let Some(binary) = require_etcd("on-demand snapshot task") else { return };
    let (pg, ns, r) = ready_playground().await;
    // A writer keeps writing during the whole task.
    let written = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (c, written, stop) = (pg.etcd_client(&ns, 0).unwrap(), written.clone(), stop.clone());
        tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                if c.put(format!("/registry/configmaps/cm{i:05}"), format!("v{i}")).await.is_ok() {
                    i += 1;
                    written.store(i, Ordering::SeqCst);
                }
            }
        })
    };
    while written.load(Ordering::SeqCst) < 50 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before_task = written.load(Ordering::SeqCst);
    create(&pg, &ns, "snap", "OnDemandSnapshotTask", Some("type: full")).await;
    let t = r.run_to_completion(&ns, "snap").await.unwrap();
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    assert_eq!(t.state(), TaskState::Succeeded, "{}", summary(&t));

    // The newest full snapshot in the object store is the one the task took.
    let store = pg.state_dir().join("backups").join(&ns).join(format!("{ns}_{}", pg.etcd_name()));
    let newest = std::fs::read_dir(&store)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("Full-"))
        .max_by_key(|n| n.split('-').nth(2).and_then(|r| r.parse::<i64>().ok()).unwrap_or(0))
        .expect("a full snapshot in the object store");
    let cfg = MemberConfig::new("fresh-0", pg.state_dir().join("fresh/data"), pg.state_dir().join("fresh.log"));
    restore_snapshot(&binary, &store.join(&newest), &cfg).await.unwrap();
    let fresh = MemberProcess::spawn(&binary, cfg).unwrap();
    fresh.wait_serving(Duration::from_secs(20)).await.unwrap();
    let kvs = fresh.client().get_prefix("/registry/configmaps/").await.unwrap();
    assert!(
        kvs.len() >= before_task,
        "every key written before the task is in its snapshot ({} < {before_task})",
        kvs.len()
    );
    drop(fresh);
    pg.down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_compaction_and_copy_backups_tasks_finish_on_the_real_object_store() {
    let Some(_binary) = require_etcd("snapshot compaction task") else { return };
    let (pg, ns, r) = ready_playground().await;
    let c = pg.etcd_client(&ns, 0).unwrap();
    c.put("before", "1").await.unwrap();
    create(&pg, &ns, "full", "OnDemandSnapshotTask", Some("type: full")).await;
    assert_eq!(r.run_to_completion(&ns, "full").await.unwrap().state(), TaskState::Succeeded);
    c.put("after", "2").await.unwrap();
    create(&pg, &ns, "delta", "OnDemandSnapshotTask", Some("type: delta")).await;
    let t = r.run_to_completion(&ns, "delta").await.unwrap();
    assert_eq!(t.state(), TaskState::Succeeded, "{}", summary(&t));

    create(&pg, &ns, "compact", "OnDemandSnapshotCompactionTask", None).await;
    let t = r.run_to_completion(&ns, "compact").await.unwrap();
    assert_eq!(t.state(), TaskState::Succeeded, "{}", summary(&t));

    let config = format!(
        "sourceStore: {{provider: Local, prefix: {ns}/{}}}\ntargetStore: {{provider: Local, prefix: copied}}\n",
        pg.etcd_name()
    );
    create(&pg, &ns, "copy", "CopyBackupsTask", Some(&config)).await;
    let t = r.run_to_completion(&ns, "copy").await.unwrap();
    assert_eq!(t.state(), TaskState::Succeeded, "{}", summary(&t));
    let copied = pg.state_dir().join("backups").join(&ns).join("copied");
    assert!(std::fs::read_dir(&copied).map(|d| d.count()).unwrap_or(0) > 0, "backups copied to {}", copied.display());
    pg.down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defragmentation_reaches_every_member_through_its_pod_leader_last_and_the_etcd_stays_quorate() {
    let Some(_binary) = require_etcd("on-demand maintenance (defragmentation) task") else { return };
    let (pg, ns, r) = ready_playground().await;
    let n = 3u32;
    // Free pages to give back: write ~2 MiB, delete it and compact; defragmentation then shrinks every database.
    let c = pg.etcd_client(&ns, 0).unwrap();
    let value = "x".repeat(16 * 1024);
    for i in 0..128 {
        c.put(format!("/registry/garbage/{i:04}"), &value).await.unwrap();
    }
    for i in 0..128 {
        c.delete(format!("/registry/garbage/{i:04}")).await.unwrap();
    }
    let rev = c.status().await.unwrap().revision;
    c.compact(rev).await.unwrap();
    let mut before = Vec::new();
    for i in 0..n {
        let m = pg.etcd_client(&ns, i).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while m.status().await.unwrap().revision < rev && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        before.push(m.status().await.unwrap().db_size);
    }
    // Followers compact in the background after applying the compaction.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let etcd: druidctl::api::Etcd = Api::namespaced(pg.client(), &ns).get(pg.etcd_name()).await.unwrap();
    let leader = etcd
        .status
        .as_ref()
        .unwrap()
        .members
        .iter()
        .find(|m| m.role.as_deref() == Some("Leader"))
        .unwrap()
        .name
        .clone();
    if let Some(server) = pg.embedded_server() {
        server.request_log().clear();
    }

    create(&pg, &ns, "defrag", "OnDemandMaintenanceTask", Some("maintenanceType: {etcdDefragmentation: true}")).await;
    let done = AtomicBool::new(false);
    let run = async {
        let t = r.run_to_completion(&ns, "defrag").await;
        done.store(true, Ordering::SeqCst);
        t
    };
    let watch = async {
        let mut seen = Vec::new();
        while !done.load(Ordering::SeqCst) {
            seen.push(pg.etcd_ready(&ns).await);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        seen
    };
    let (t, seen) = tokio::join!(run, watch);
    let t = t.unwrap();
    assert_eq!(t.state(), TaskState::Succeeded, "{}", summary(&t));
    assert!(!seen.is_empty());
    for s in &seen {
        assert_eq!(
            s.as_ref().map(|(st, r)| (st.as_str(), r.as_str())),
            Some(("True", "Quorate")),
            "Ready during the run: {seen:?}"
        );
    }

    // One pod-proxy POST per member, each answered by its own sidecar, the leader last (the order of requests
    // is only observable in the embedded server's request log; the shrinking below is checked everywhere).
    if let Some(server) = pg.embedded("reads the order of the defrag requests from the request log") {
        let defrags: Vec<(String, u16)> = server
            .request_log()
            .records()
            .into_iter()
            .filter(|rec| rec.resource == "pods/proxy" && rec.verb == "create" && rec.path.contains("/proxy/defrag"))
            .map(|rec| {
                let pod = rec.path.split("/pods/").nth(1).unwrap().split(':').next().unwrap().to_string();
                (pod, rec.code)
            })
            .collect();
        assert_eq!(defrags.len(), n as usize, "{defrags:?}");
        assert!(defrags.iter().all(|(_, code)| *code == 200), "{defrags:?}");
        let mut pods: Vec<&str> = defrags.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(pods.last().copied(), Some(leader.as_str()), "leader last: {defrags:?}");
        pods.sort();
        let expected: Vec<String> = (0..n).map(|i| format!("{}-{i}", pg.etcd_name())).collect();
        assert_eq!(pods, expected.iter().map(String::as_str).collect::<Vec<_>>());
    }
    // ... and every member's database actually shrank.
    for i in 0..n {
        let after = pg.etcd_client(&ns, i).unwrap().status().await.unwrap().db_size;
        assert!(after < before[i as usize], "member {i} defragmented: {after} < {}", before[i as usize]);
    }
    pg.down().await;
}
