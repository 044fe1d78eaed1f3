//! End-to-end: the playground (landscape with real etcd processes) on the embedded API server, or on the
//! external one of `DRUIDCTL_TEST_KUBECONFIG` (see `e2e_support`).
//! Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`, which fails instead).

use crate::e2e_support;

use std::time::{Duration, Instant};

use druidctl::tasks::sidecar::{self, Route, Target};
use e2e_support::E2e;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use landscape::etcd::process::etcd_children_of_this_process;
use landscape::etcd::snapshot::restore_snapshot;
use landscape::etcd::{MemberConfig, MemberProcess, require_etcd};
use landscape::playground::BreakTarget;
use landscape::{BreakKind, Playground};
use serde_json::json;

async fn ready_playground() -> E2e {
    let started = Instant::now();
    let pg = E2e::start(3, |_| {}).await;
    eprintln!("playground: 3-member Etcd ready after {:?}", started.elapsed());
    pg
}

/// POSTs `path` to the leading member's sidecar the way druidctl does (service proxy, or directly where the API
/// server cannot proxy) and returns its JSON answer.
async fn leader_sidecar(pg: &Playground, ns: &str, path: &str) -> serde_json::Value {
    let etcd = Api::<druidctl::api::Etcd>::namespaced(pg.client(), ns).get(pg.etcd_name()).await.unwrap();
    sidecar::post(&pg.client(), &etcd, &Target::Leader, path).await.unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

async fn pod(pg: &Playground, ns: &str, name: &str) -> Pod {
    Api::<Pod>::namespaced(pg.client(), ns).get(name).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_down_is_quorum_lost_and_their_return_is_quorate_with_the_keys() {
    let Some(_) = require_etcd("playground transient quorum loss") else { return };
    let pg = ready_playground().await;
    let ns = pg.namespaces()[0].clone();
    let c = pg.etcd_client(&ns, 0).unwrap();
    for i in 0..10 {
        c.put(format!("/registry/pods/p{i}"), format!("v{i}")).await.unwrap();
    }

    let target = BreakTarget { members: vec![1, 2], down_for: Some(Duration::from_secs(6)), ..Default::default() };
    pg.break_(BreakKind::MemberDown, &target).await.unwrap();
    pg.wait_ready_reason(&ns, "QuorumLost", Duration::from_secs(15)).await.expect("Etcd reports QuorumLost");
    // DWD scaled the dependents down.
    let deps = Api::<Deployment>::namespaced(pg.client(), &ns);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let kcm = deps.get("kube-controller-manager").await.unwrap();
        if kcm.spec.unwrap().replicas == Some(0) {
            assert_eq!(kcm.metadata.annotations.unwrap()["dependency-watchdog.gardener.cloud/replicas"], "1");
            break;
        }
        assert!(Instant::now() < deadline, "DWD did not scale kube-controller-manager down");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    pg.wait_ready_reason(&ns, "Quorate", Duration::from_secs(30)).await.expect("quorum comes back");
    pg.wait_ready(Duration::from_secs(20)).await.unwrap();
    let kvs = pg.etcd_client(&ns, 2).unwrap().get_prefix("/registry/pods/").await.unwrap();
    assert_eq!(kvs.len(), 10);
    let restarted = pod(&pg, &ns, "etcd-main-1").await;
    assert!(restarted.status.unwrap().container_statuses.unwrap()[0].restart_count >= 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while deps.get("kube-controller-manager").await.unwrap().spec.unwrap().replicas != Some(1) {
        assert!(Instant::now() < deadline, "DWD did not scale kube-controller-manager back up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pg.down().await;
    assert!(etcd_children_of_this_process().is_empty(), "down leaves no etcd behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroying_two_members_data_stays_quorum_lost() {
    let Some(_) = require_etcd("playground permanent quorum loss") else { return };
    let pg = ready_playground().await;
    let ns = pg.namespaces()[0].clone();
    pg.etcd_client(&ns, 0).unwrap().put("k", "v").await.unwrap();
    pg.break_(BreakKind::QuorumLost, &BreakTarget::default()).await.unwrap();
    pg.wait_ready_reason(&ns, "QuorumLost", Duration::from_secs(15)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(pg.etcd_ready(&ns).await.unwrap().1, "QuorumLost", "permanent loss does not heal");
    let p = pod(&pg, &ns, "etcd-main-2").await;
    let cs = &p.status.unwrap().container_statuses.unwrap()[0];
    assert!(cs.restart_count >= 2, "the member without data crash-loops: {cs:?}");
    assert_eq!(cs.state.as_ref().unwrap().waiting.as_ref().unwrap().reason.as_deref(), Some("CrashLoopBackOff"));
    pg.down().await;
    assert!(etcd_children_of_this_process().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_taken_through_the_sidecar_api_restores_into_a_fresh_member() {
    let Some(binary) = require_etcd("playground snapshot") else { return };
    let pg = ready_playground().await;
    let ns = pg.namespaces()[0].clone();
    let c = pg.etcd_client(&ns, 1).unwrap();
    for i in 0..25 {
        c.put(format!("/registry/secrets/s{i:02}"), format!("secret-{i}")).await.unwrap();
    }
    // Through the API server's service proxy to the leading member's sidecar, which serves HTTPS as with
    // Gardener's `spec.backup.tls` (so the proxy path carries `https:`); an external server cannot reach it, so
    // there the landscape publishes the leader's address and druidctl goes straight to it over verified TLS.
    let etcd = Api::<druidctl::api::Etcd>::namespaced(pg.client(), &ns).get("etcd-main").await.unwrap();
    let route = sidecar::route(&pg.client(), &etcd, &Target::Leader, "/snapshot/full").await.unwrap();
    let leader =
        &etcd.status.as_ref().unwrap().members.iter().find(|m| m.role.as_deref() == Some("Leader")).unwrap().name;
    let leader: u32 = leader.rsplit('-').next().unwrap().parse().unwrap();
    match (&route, pg.is_external()) {
        (Route::Proxy(path), false) => {
            assert!(path.contains("/services/https:etcd-main-client:8080/proxy/"), "{path}")
        }
        (Route::Direct(url), true) => {
            assert_eq!(url, &format!("https://{}/snapshot/full", pg.member(&ns, leader).unwrap().backup_addr()))
        }
        (route, external) => panic!("route {route:?} on an {} server", if external { "external" } else { "embedded" }),
    }
    let info = leader_sidecar(&pg, &ns, "/snapshot/full").await;
    assert_eq!(info["kind"], "Full", "{info}");
    let snap = pg
        .state_dir()
        .join("backups")
        .join(&ns)
        .join(format!("{ns}_etcd-main"))
        .join(info["snapName"].as_str().unwrap());
    assert!(snap.exists(), "{} in the object store", snap.display());
    let lease = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(pg.client(), &ns)
        .get("etcd-main-full-snap")
        .await
        .unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity.unwrap(), info["lastRevision"].to_string());

    let cfg = MemberConfig::new("fresh-0", pg.state_dir().join("fresh/data"), pg.state_dir().join("fresh.log"));
    restore_snapshot(&binary, &snap, &cfg).await.unwrap();
    let fresh = MemberProcess::spawn(&binary, cfg).unwrap();
    fresh.wait_serving(Duration::from_secs(20)).await.unwrap();
    let kvs = fresh.client().get_prefix("/registry/secrets/").await.unwrap();
    assert_eq!(kvs.len(), 25);
    drop(fresh);
    pg.down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_member_is_restored_as_a_learner_without_losing_quorum() {
    let Some(_) = require_etcd("playground corrupt member") else { return };
    let pg = ready_playground().await;
    let ns = pg.namespaces()[0].clone();
    pg.etcd_client(&ns, 0).unwrap().put("before", "1").await.unwrap();
    let old_id = pg.etcd_client(&ns, 2).unwrap().status().await.unwrap().member_id;
    pg.break_(BreakKind::CorruptMember, &BreakTarget::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        assert_ne!(pg.etcd_ready(&ns).await.unwrap().1, "QuorumLost", "quorum must be kept");
        let members = pg.etcd_client(&ns, 0).unwrap().member_list().await.unwrap();
        let new = members.iter().find(|m| m.name == "etcd-main-2");
        if let Some(m) = new
            && m.id != old_id
            && !m.is_learner
            && pg.etcd_client(&ns, 2).unwrap().is_healthy().await
        {
            break;
        }
        assert!(Instant::now() < deadline, "member not restored: {members:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(pg.etcd_client(&ns, 2).unwrap().get("before").await.unwrap().unwrap().value_str(), "1");
    pg.wait_ready(Duration::from_secs(20)).await.unwrap();
    pg.down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn component_protection_blocks_operators_until_disabled_and_kubectl_sees_the_seed() {
    let Some(_) = require_etcd("playground protection") else { return };
    let pg = ready_playground().await;
    let ns = pg.namespaces()[0].clone();
    if pg.embedded("component protection is an admission hook of the embedded API server").is_some() {
        let sts = Api::<StatefulSet>::namespaced(pg.client(), &ns);
        let scale = json!({"spec": {"replicas": 3}, "metadata": {"annotations": {"touched": "by-operator"}}});
        let err = sts.patch("etcd-main", &PatchParams::default(), &Patch::Merge(&scale)).await.expect_err("protected");
        assert!(err.to_string().contains("disable-etcd-component-protection"), "{err}");
        let etcds = Api::<druidctl::api::Etcd>::namespaced(pg.client(), &ns);
        etcds
            .patch(
                "etcd-main",
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"annotations": {
                "druid.gardener.cloud/disable-etcd-component-protection": ""}}})),
            )
            .await
            .unwrap();
        sts.patch("etcd-main", &PatchParams::default(), &Patch::Merge(&scale)).await.expect("allowed once disabled");
    }

    if let Ok(out) = std::process::Command::new("kubectl")
        .args(["--kubeconfig", pg.kubeconfig_path().to_str().unwrap(), "get", "etcd,sts,pods,pvc,leases", "-n", &ns])
        .output()
    {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "kubectl failed: {}", String::from_utf8_lossy(&out.stderr));
        for name in
            ["etcd-main-0", "etcd-main-2", "main-etcd-etcd-main-1", "etcd-main-full-snap", "statefulset.apps/etcd-main"]
        {
            assert!(stdout.contains(name), "kubectl output lacks {name}:\n{stdout}");
        }
        eprintln!("{stdout}");
    }
    pg.down().await;
}

/// The permanent quorum-loss recovery procedure (seeds/004 7880-8007), done by hand through the API:
/// what the runbook automates. Keys covered by the snapshots come back; keys written after them do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_quorum_loss_recovery_restores_the_snapshotted_keys_and_scales_back_with_learners() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim};
    use kube::api::{DeleteParams, ListParams};
    let Some(_) = require_etcd("playground quorum-loss recovery") else { return };
    let pg = ready_playground().await;
    let ns = pg.namespaces()[0].clone();
    let admin = pg.client();
    let c = pg.etcd_client(&ns, 0).unwrap();
    for i in 0..10 {
        c.put(format!("/before/{i}"), "a").await.unwrap();
    }
    leader_sidecar(&pg, &ns, "/snapshot/full").await;
    c.put("/delta/1", "b").await.unwrap();
    leader_sidecar(&pg, &ns, "/snapshot/delta").await;
    pg.break_(BreakKind::BackupFailing, &BreakTarget::default()).await.unwrap();
    c.put("/after/1", "lost").await.unwrap();
    pg.break_(BreakKind::QuorumLost, &BreakTarget::default()).await.unwrap();
    pg.wait_ready_reason(&ns, "QuorumLost", Duration::from_secs(15)).await.unwrap();
    pg.landscape(&ns).unwrap().set_backup_failing(&ns, "etcd-main", false);

    let etcds = Api::<druidctl::api::Etcd>::namespaced(admin.clone(), &ns);
    let sts = Api::<StatefulSet>::namespaced(admin.clone(), &ns);
    let pp = PatchParams::default();
    etcds
        .patch(
            "etcd-main",
            &pp,
            &Patch::Merge(&json!({"metadata": {"annotations": {
            "druid.gardener.cloud/suspend-etcd-spec-reconcile": "true",
            "druid.gardener.cloud/disable-etcd-component-protection": ""}}})),
        )
        .await
        .unwrap();
    sts.patch("etcd-main", &pp, &Patch::Merge(&json!({"spec": {"replicas": 0}}))).await.unwrap();
    let pods = Api::<Pod>::namespaced(admin.clone(), &ns);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !pods
        .list(&ListParams::default().labels("app.kubernetes.io/part-of=etcd-main"))
        .await
        .unwrap()
        .items
        .is_empty()
    {
        assert!(Instant::now() < deadline, "pods did not go away");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(admin.clone(), &ns);
    for i in 0..3 {
        pvcs.delete(&format!("main-etcd-etcd-main-{i}"), &DeleteParams::default()).await.unwrap();
    }
    let leases = Api::<Lease>::namespaced(admin.clone(), &ns);
    for i in 0..3 {
        leases.delete(&format!("etcd-main-{i}"), &DeleteParams::default()).await.unwrap();
    }
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), &ns);
    let cm = cms.get("etcd-main-config").await.unwrap();
    let conf = cm.data.unwrap()["etcd.conf.yaml"].clone();
    // etcd-druid's step 05, as an operator edits the YAML: initial-cluster and both per-member advertise URL maps
    // name only etcd-main-0.
    let mut doc: serde_json::Value = serde_saphyr::from_str(&conf).unwrap();
    let first = doc["initial-cluster"].as_str().unwrap().split(',').next().unwrap().to_string();
    doc["initial-cluster"] = json!(first);
    for key in ["initial-advertise-peer-urls", "advertise-client-urls"] {
        doc[key] = json!({"etcd-main-0": doc[key]["etcd-main-0"].clone()});
    }
    let edited = serde_saphyr::to_string(&doc).unwrap();
    cms.patch("etcd-main-config", &pp, &Patch::Merge(&json!({"data": {"etcd.conf.yaml": edited}}))).await.unwrap();
    sts.patch("etcd-main", &pp, &Patch::Merge(&json!({"spec": {"replicas": 1}}))).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = pods
            .get_opt("etcd-main-0")
            .await
            .unwrap()
            .and_then(|p| p.status)
            .and_then(|s| s.conditions)
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if ready {
            break;
        }
        assert!(Instant::now() < deadline, "etcd-main-0 did not restore");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    etcds
        .patch(
            "etcd-main",
            &pp,
            &Patch::Merge(&json!({"metadata": {"annotations": {
            "druid.gardener.cloud/suspend-etcd-spec-reconcile": null,
            "druid.gardener.cloud/disable-etcd-component-protection": null,
            "gardener.cloud/operation": "reconcile"}}})),
        )
        .await
        .unwrap();
    pg.wait_ready(Duration::from_secs(45)).await.expect("back to 3 ready members");
    let e = etcds.get("etcd-main").await.unwrap();
    assert!(
        !e.metadata.annotations.unwrap_or_default().contains_key("gardener.cloud/operation"),
        "druid removes the annotation"
    );
    let c = pg.etcd_client(&ns, 2).unwrap();
    assert_eq!(c.get_prefix("/before/").await.unwrap().len(), 10, "keys of the full snapshot are back");
    assert!(c.get("/delta/1").await.unwrap().is_some(), "keys of the delta snapshot are back");
    assert!(c.get("/after/1").await.unwrap().is_none(), "keys written after the last snapshot are lost");
    let members = c.member_list().await.unwrap();
    assert_eq!(members.len(), 3);
    assert!(members.iter().all(|m| !m.is_learner));
    let holders: Vec<String> = leases
        .list(&ListParams::default().labels("app.kubernetes.io/part-of=etcd-main"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|l| !l.metadata.name.as_deref().unwrap_or_default().ends_with("-snap"))
        .filter_map(|l| l.spec.and_then(|s| s.holder_identity))
        .collect();
    assert_eq!(holders.iter().filter(|h| h.ends_with(":Leader")).count(), 1, "{holders:?}");
    assert_eq!(holders.iter().filter(|h| h.ends_with(":Member")).count(), 2, "{holders:?}");
    pg.down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_backups_turn_backup_ready_false_and_an_apiserver_restart_is_survived() {
    let Some(_) = require_etcd("playground backup failing") else { return };
    let pg = ready_playground().await;
    let ns = pg.namespaces()[0].clone();
    let etcds = Api::<druidctl::api::Etcd>::namespaced(pg.client(), &ns);
    let backup_reason = || async {
        let s = serde_json::to_value(etcds.get("etcd-main").await.unwrap().status.unwrap()).unwrap();
        landscape::status::condition(&s, "BackupReady").unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while backup_reason().await.0 != "True" {
        assert!(Instant::now() < deadline, "backups never became ready: {:?}", backup_reason().await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if pg.embedded("restarting the API server needs the embedded one").is_some() {
        pg.break_(BreakKind::ApiserverRestart, &BreakTarget::default()).await.unwrap();
    }
    pg.break_(BreakKind::BackupFailing, &BreakTarget::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while backup_reason().await.1 != "BackupFailed" {
        assert!(Instant::now() < deadline, "BackupReady never failed: {:?}", backup_reason().await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(pg.etcd_ready(&ns).await.unwrap().1, "Quorate", "backups failing does not cost quorum");
    pg.down().await;
    assert!(etcd_children_of_this_process().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compaction_job_and_copy_backups_task_work_on_the_real_snapshots() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let Some(binary) = require_etcd("playground compaction") else { return };
    let pg = ready_playground().await;
    let ns = pg.namespaces()[0].clone();
    let admin = pg.client();
    let c = pg.etcd_client(&ns, 0).unwrap();
    c.put("full", "1").await.unwrap();
    leader_sidecar(&pg, &ns, "/snapshot/full").await;
    c.put("delta-a", "2").await.unwrap();
    leader_sidecar(&pg, &ns, "/snapshot/delta").await;
    let delta_b = c.put("delta-b", "3").await.unwrap();
    leader_sidecar(&pg, &ns, "/snapshot/delta").await;
    // The sidecar's own schedule (every 2 s here) may have taken the newest keys into a delta before the
    // request did, which then answers that nothing changed: the store says which delta is the last.
    let store = pg.state_dir().join("backups").join(&ns).join(format!("{ns}_etcd-main"));
    let newest = landscape::backup::ObjectStore::new(&store).list().pop().expect("snapshots in the store");
    assert_eq!(newest.kind, landscape::backup::SnapshotKind::Incr, "{newest:?}");
    assert!(newest.last_revision >= delta_b, "the last delta holds every key: {newest:?}");
    let last_rev = newest.last_revision;

    let jobs = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(admin.clone(), &ns);
    let job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        // As etcd-druid's compaction controller writes it (internal/controller/compaction/reconciler.go): the
        // component label, `etcdbrctl compact` with the store and snapshot-lease flags.
        "metadata": {"name": "etcd-main-compactor", "namespace": ns,
                     "labels": {"app.kubernetes.io/component": "etcd-snapshot-compaction-job",
                                "app.kubernetes.io/part-of": "etcd-main"}},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "compact-backup", "image": "europe-docker.pkg.dev/gardener-project/public/gardener/etcdbrctl:v0.30.0",
                            "args": ["compact", "--storage-provider=Local", "--store-container=playground",
                                     format!("--store-prefix={ns}/etcd-main"), "--enable-snapshot-lease-renewal=true",
                                     "--full-snapshot-lease-name=etcd-main-full-snap",
                                     "--delta-snapshot-lease-name=etcd-main-delta-snap"]}]}}},
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(40);
    let job = loop {
        let j = jobs.get("etcd-main-compactor").await.unwrap();
        if j.status.as_ref().and_then(|s| s.completion_time.as_ref()).is_some()
            || j.status.as_ref().and_then(|s| s.failed).unwrap_or(0) > 0
        {
            break j;
        }
        assert!(Instant::now() < deadline, "compaction job did not finish");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let st = job.status.unwrap();
    assert_eq!(st.succeeded, Some(1), "{:?}", st.conditions);
    let compacted = std::fs::read_dir(&store)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with(&format!("Full-00000000-{last_rev:08}-")))
        .expect("a compacted full snapshot named after the last delta");
    let cfg = MemberConfig::new("check-0", pg.state_dir().join("check/data"), pg.state_dir().join("check.log"));
    restore_snapshot(&binary, &store.join(&compacted), &cfg).await.unwrap();
    let check = MemberProcess::spawn(&binary, cfg).unwrap();
    check.wait_serving(Duration::from_secs(20)).await.unwrap();
    for k in ["full", "delta-a", "delta-b"] {
        assert!(check.client().get(k).await.unwrap().is_some(), "{k} is in the compacted snapshot");
    }
    drop(check);

    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "EtcdCopyBackupsTask"),
        "etcdcopybackupstasks",
    );
    let tasks: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &ar);
    let task: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "EtcdCopyBackupsTask",
        "metadata": {"name": "copy", "namespace": ns},
        "spec": {"sourceStore": {"provider": "Local", "prefix": format!("{ns}/etcd-main")}, "targetStore": {"provider": "Local", "prefix": "copied"}},
    }))
    .unwrap();
    tasks.create(&PostParams::default(), &task).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let t = tasks.get("copy").await.unwrap();
        if let Some(c) = t.data["status"]["conditions"].as_array().and_then(|cs| cs.first()) {
            assert_eq!(c["type"], "Succeeded", "{c}");
            break;
        }
        assert!(Instant::now() < deadline, "copy task did not finish");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(pg.state_dir().join("backups").join(&ns).join("copied").join(&compacted).exists());
    pg.down().await;
}
