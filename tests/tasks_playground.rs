//! Tasks against the playground (landscape with real etcd processes, on the embedded API server or on the
//! external one of `DRUIDCTL_TEST_KUBECONFIG`: see `e2e_support`), executed in-process as `--local` does.
//! Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`).

use crate::e2e_support;

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
    // Built like etcd-druid's compaction Job, under a name druid's `<etcd>-compactor` can never take.
    let job = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(pg.client(), &ns)
        .get(&format!("{}-compactor-ondemand", pg.etcd_name()))
        .await
        .unwrap();
    let pod = job.spec.unwrap().template.spec.unwrap();
    let sts =
        Api::<k8s_openapi::api::apps::v1::StatefulSet>::namespaced(pg.client(), &ns).get(pg.etcd_name()).await.unwrap();
    let sidecar_image = sts
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .into_iter()
        .find(|c| c.name == "backup-restore")
        .unwrap()
        .image;
    assert_eq!(pod.containers[0].image, sidecar_image, "the sidecar's image");
    assert_eq!(pod.service_account_name.as_deref(), Some(pg.etcd_name()), "the Etcd's service account");
    let args = pod.containers[0].args.clone().unwrap();
    assert!(args.contains(&format!("--full-snapshot-lease-name={}-full-snap", pg.etcd_name())), "{args:?}");
    assert!(args.contains(&"--storage-provider=Local".to_string()), "{args:?}");

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
async fn defragmentation_reaches_every_members_etcd_leader_last_and_the_etcd_stays_quorate() {
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

    // Each member was defragmented through etcd's own Maintenance API (etcd-backup-restore has no such
    // endpoint), the leader last: the journal records each member's database size before and after, and when.
    let journal: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
        t.metadata.annotations.as_ref().unwrap().get(druidctl::tasks::step::JOURNAL_ANNOTATION).unwrap(),
    )
    .unwrap();
    let mut done_at: Vec<(jiff::Timestamp, String)> = (0..n)
        .map(|i| {
            let member = format!("{}-{i}", pg.etcd_name());
            let entry =
                journal.get(&format!("defragmented/{member}")).unwrap_or_else(|| panic!("{member}: {journal:?}"));
            let (b, a) = (entry["dbSizeBefore"].as_i64().unwrap(), entry["dbSizeAfter"].as_i64().unwrap());
            assert!(a < b, "{member} shrank as etcd reported it: {entry}");
            (entry["at"].as_str().unwrap().parse::<jiff::Timestamp>().unwrap(), member)
        })
        .collect();
    done_at.sort();
    assert_eq!(done_at.last().map(|(_, m)| m.as_str()), Some(leader.as_str()), "leader last: {done_at:?}");
    if let Some(server) = pg.embedded_server() {
        let proxied: Vec<String> = server
            .request_log()
            .records()
            .into_iter()
            .filter(|rec| rec.resource == "pods/proxy" && rec.path.contains("defrag"))
            .map(|rec| rec.path)
            .collect();
        assert!(proxied.is_empty(), "no sidecar call for defragmentation: {proxied:?}");
    }
    // ... and every member's database actually shrank.
    for i in 0..n {
        let after = pg.etcd_client(&ns, i).unwrap().status().await.unwrap().db_size;
        assert!(after < before[i as usize], "member {i} defragmented: {after} < {}", before[i as usize]);
    }
    pg.down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_druid_executes_an_etcd_ops_task_snapshot_and_rejects_a_duplicate_and_a_missing_etcd() {
    use druidctl::api::EtcdOpsTask;
    use druidctl::api::opstask::{codes, states};
    use druidctl::tasks::opstask;
    let Some(_binary) = require_etcd("EtcdOpsTask on-demand snapshot") else { return };
    let (pg, ns, _r) = ready_playground().await;
    let client = pg.client();
    assert!(opstask::served(&client).await.unwrap(), "the playground serves EtcdOpsTask");
    let task = opstask::create_snapshot(&client, &ns, pg.etcd_name(), "full", Some(2)).await.unwrap();
    let name = task.metadata.name.clone().unwrap();
    // While it is unfinished the duplicate rule sees it, from either kind.
    let dup = opstask::check_duplicate(&client, &ns, pg.etcd_name(), true).await;
    let done = opstask::follow(&client, &ns, &name, Duration::from_secs(120), |_| {}).await.unwrap();
    assert_eq!(done.state(), states::SUCCEEDED, "{:?}", done.status);
    let op = done.status.clone().unwrap().last_operation.unwrap();
    assert_eq!((op.type_.as_str(), op.description.as_str()), ("Execution", "Snapshot created successfully"));
    assert!(done.status.unwrap().started_at.is_some());
    let e = dup.expect_err("an unfinished EtcdOpsTask is a duplicate");
    assert!(e.to_string().contains(&name), "{e}");
    // etcd-druid's admission: a task for an Etcd that does not exist is Rejected with ERR_GET_ETCD.
    let missing = opstask::create_snapshot(&client, &ns, "no-such-etcd", "delta", Some(2)).await.unwrap();
    let missing_name = missing.metadata.name.unwrap();
    let err = opstask::follow(&client, &ns, &missing_name, Duration::from_secs(60), |_| {}).await.unwrap_err();
    assert!(err.to_string().contains(codes::GET_ETCD), "{err}");
    // TTL 2 s: etcd-druid deletes both tasks.
    let api: Api<EtcdOpsTask> = Api::namespaced(client.clone(), &ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while api.get_opt(&name).await.unwrap().is_some() || api.get_opt(&missing_name).await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "tasks not deleted after their TTL");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pg.down().await;
}
