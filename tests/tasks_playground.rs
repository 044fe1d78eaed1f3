//! Tasks against the playground (embedded API server + landscape with real etcd processes), executed
//! in-process as `--local` does. Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use druidctl::api::task::{EtcdOperatorTaskSpec, NamespacedName};
use druidctl::api::{EtcdOperatorTask, TaskState};
use druidctl::reconciler::{Reconciler, ReconcilerOptions};
use druidctl::sim::etcd::snapshot::restore_snapshot;
use druidctl::sim::etcd::{MemberConfig, MemberProcess, require_etcd};
use druidctl::sim::landscape::{Playground, PlaygroundOptions};
use druidctl::tasks::Registry;
use kube::Api;
use kube::api::PostParams;

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
    Api::<EtcdOperatorTask>::namespaced(pg.server().client(), ns).create(&PostParams::default(), &t).await.unwrap();
}

fn summary(t: &EtcdOperatorTask) -> String {
    format!("{:?}: {:?}", t.state(), t.status.as_ref().and_then(|s| s.last_operation.as_ref()).map(|o| (&o.name, &o.reason)))
}

async fn ready_playground(dir: &std::path::Path) -> (Playground, String, Reconciler) {
    let pg = Playground::up(PlaygroundOptions::new(dir)).await.expect("playground up");
    pg.server().register_crd_yaml(&serde_json::to_string(&druidctl::api::task::crd()).unwrap()).unwrap();
    pg.wait_ready(Duration::from_secs(40)).await.expect("3-member Etcd ready");
    let ns = pg.namespaces()[0].clone();
    let r = Reconciler::new(pg.server().client(), Arc::new(Registry::standard()), ReconcilerOptions::new("druidctl-local-test"));
    (pg, ns, r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_snapshot_task_taken_while_keys_are_written_restores_into_a_fresh_member_with_them() {
    let Some(binary) = require_etcd("on-demand snapshot task") else { return };
    let dir = tempfile::tempdir().unwrap();
    let (pg, ns, r) = ready_playground(dir.path()).await;
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
    let store = dir.path().join("backups").join(&ns).join(format!("{ns}_{}", pg.etcd_name()));
    let newest = std::fs::read_dir(&store)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("Full-"))
        .max_by_key(|n| n.split('-').nth(2).and_then(|r| r.parse::<i64>().ok()).unwrap_or(0))
        .expect("a full snapshot in the object store");
    let cfg = MemberConfig::new("fresh-0", dir.path().join("fresh/data"), dir.path().join("fresh.log"));
    restore_snapshot(&binary, &store.join(&newest), &cfg).await.unwrap();
    let fresh = MemberProcess::spawn(&binary, cfg).unwrap();
    fresh.wait_serving(Duration::from_secs(20)).await.unwrap();
    let kvs = fresh.client().get_prefix("/registry/configmaps/").await.unwrap();
    assert!(kvs.len() >= before_task, "every key written before the task is in its snapshot ({} < {before_task})", kvs.len());
    drop(fresh);
    pg.down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_compaction_and_copy_backups_tasks_finish_on_the_real_object_store() {
    let Some(_binary) = require_etcd("snapshot compaction task") else { return };
    let dir = tempfile::tempdir().unwrap();
    let (pg, ns, r) = ready_playground(dir.path()).await;
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

    let config = format!("sourceStore: {{provider: Local, prefix: {ns}/{}}}\ntargetStore: {{provider: Local, prefix: copied}}\n", pg.etcd_name());
    create(&pg, &ns, "copy", "CopyBackupsTask", Some(&config)).await;
    let t = r.run_to_completion(&ns, "copy").await.unwrap();
    assert_eq!(t.state(), TaskState::Succeeded, "{}", summary(&t));
    let copied = dir.path().join("backups").join(&ns).join("copied");
    assert!(std::fs::read_dir(&copied).map(|d| d.count()).unwrap_or(0) > 0, "backups copied to {}", copied.display());
    pg.down().await;
}
