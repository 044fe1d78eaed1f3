//! The DEP-05 task types end to end against the embedded API server, with small fakes standing in for the
//! backup sidecar (behind the service proxy), the Job controller and etcd-druid's copy-backups controller.

use crate::tasks_support;

use std::sync::Arc;
use std::time::Duration;

use druidctl::api::task::{EtcdOperatorTaskSpec, NamespacedName};
use druidctl::api::{EtcdOperatorTask, TaskState};
use druidctl::reconciler::{Backoff, Reconciler, ReconcilerOptions};
use druidctl::tasks::Registry;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use tasks_support::{ETCD, NS, Sidecar, landscape, lose_quorum, renew};

fn reconciler(client: Client) -> Reconciler {
    let mut o = ReconcilerOptions::new("test");
    o.backoff = Backoff { base: Duration::from_millis(20), cap: Duration::from_millis(200), max_attempts: 10 };
    Reconciler::new(client, Arc::new(Registry::standard()), o)
}

async fn create(client: &Client, name: &str, type_: &str, config: Option<&str>, ttl: i32) -> EtcdOperatorTask {
    let mut t = EtcdOperatorTask::new(
        name,
        EtcdOperatorTaskSpec {
            type_: type_.into(),
            config: config.map(str::to_string),
            ttl_seconds_after_finished: Some(ttl),
            owner_etcd_refrence: NamespacedName { name: ETCD.into(), namespace: NS.into() },
        },
    );
    t.metadata.namespace = Some(NS.into());
    Api::<EtcdOperatorTask>::namespaced(client.clone(), NS).create(&PostParams::default(), &t).await.unwrap()
}

fn summary(t: &EtcdOperatorTask) -> String {
    format!(
        "{:?}: {:?}",
        t.state(),
        t.status.as_ref().and_then(|s| s.last_operation.as_ref()).map(|o| (&o.name, &o.reason))
    )
}

#[tokio::test]
async fn full_snapshot_task_asks_the_leading_sidecar_and_succeeds_when_the_lease_moves() {
    let server = landscape().await;
    let sidecar = Sidecar::default();
    sidecar.start(&server).await;
    let client = server.client();
    renew(&client, "etcd-main-full-snap").await; // an older scheduled snapshot
    let before = Api::<Lease>::namespaced(client.clone(), NS).get("etcd-main-full-snap").await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    create(&client, "snap", "OnDemandSnapshotTask", Some("type: full"), 3600).await;
    let t = reconciler(client.clone()).run_to_completion(NS, "snap").await.unwrap();
    assert_eq!(t.state(), TaskState::Succeeded, "{}", summary(&t));
    assert_eq!(sidecar.calls(), ["/snapshot/full"], "asked exactly once");
    let after = Api::<Lease>::namespaced(client.clone(), NS).get("etcd-main-full-snap").await.unwrap();
    assert_ne!(before.spec.unwrap().renew_time, after.spec.unwrap().renew_time);
    let op = t.status.unwrap().last_operation.unwrap();
    assert_eq!(op.name, "TriggerFullSnapshot");
}

#[tokio::test]
async fn snapshot_task_on_an_etcd_without_quorum_is_rejected_and_touches_nothing() {
    let server = landscape().await;
    let sidecar = Sidecar::default();
    sidecar.start(&server).await;
    let client = server.client();
    lose_quorum(&client).await;
    create(&client, "snap", "OnDemandSnapshotTask", Some("type: delta"), 3600).await;
    let t = reconciler(client).run_to_completion(NS, "snap").await.unwrap();
    assert_eq!(t.state(), TaskState::Rejected);
    assert!(summary(&t).contains("no quorum (1 of 3 members ready"), "{}", summary(&t));
    assert!(sidecar.calls().is_empty());
}

/// Compaction asks etcd itself (etcd-backup-restore has no compaction endpoint): the sidecar sees no call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_maintenance_goes_to_etcd_not_to_the_sidecar() {
    let server = landscape().await;
    let sidecar = Sidecar::default();
    sidecar.start(&server).await;
    let Some((member, _dir)) =
        crate::tasks_support::real_member_etcd(&server, "compaction task", crate::tasks_support::Reach::Annotation)
            .await
    else {
        return;
    };
    let client = server.client();
    create(&client, "maint", "OnDemandMaintenanceTask", Some("maintenanceType: {etcdCompaction: true}"), 3600).await;
    let t = reconciler(client).run_to_completion(NS, "maint").await.unwrap();
    assert_eq!(t.state(), TaskState::Succeeded, "{}", summary(&t));
    assert!(sidecar.calls().is_empty(), "{:?}", sidecar.calls());
    let journal: serde_json::Value = serde_json::from_str(
        t.metadata.annotations.as_ref().unwrap().get(druidctl::tasks::step::JOURNAL_ANNOTATION).unwrap(),
    )
    .unwrap();
    let revision = journal["compactedAt"].as_i64().unwrap();
    assert_eq!(revision, member.client().status().await.unwrap().revision, "compacted up to the revision etcd had");
}

#[tokio::test]
async fn snapshot_compaction_follows_its_job_and_cleanup_after_the_ttl_removes_task_and_job() {
    let server = landscape().await;
    let client = server.client();
    create(&client, "compact", "OnDemandSnapshotCompactionTask", None, 0).await;
    // The Job controller: completes the compaction Job once it exists.
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let fake = {
        let jobs = jobs.clone();
        tokio::spawn(async move {
            loop {
                if jobs.get_opt("etcd-main-compactor-ondemand").await.unwrap().is_some() {
                    let st =
                        json!({"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}});
                    jobs.patch_status("etcd-main-compactor-ondemand", &PatchParams::default(), &Patch::Merge(st))
                        .await
                        .unwrap();
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let r = reconciler(client.clone());
    let t = r.run_to_completion(NS, "compact").await.unwrap();
    fake.await.unwrap();
    assert_eq!(t.state(), TaskState::Succeeded, "{}", summary(&t));
    let job = jobs.get("etcd-main-compactor-ondemand").await.unwrap();
    let labels = job.metadata.labels.clone().unwrap();
    assert_eq!(labels["druid.gardener.cloud/operator-task"], "compact");
    // Built like etcd-druid's own compaction Job: the sidecar's image, the Etcd's service account.
    let pod = job.spec.clone().unwrap().template.spec.unwrap();
    assert_eq!(pod.containers[0].image.as_deref(), Some("etcdbrctl:v0.43.0"));
    assert_eq!(pod.service_account_name.as_deref(), Some("etcd-main"));
    assert_eq!(labels["app.kubernetes.io/component"], "etcd-snapshot-compaction-job");
    assert_eq!(job.metadata.owner_references.unwrap()[0].name, "compact");
    // TTL 0: the next reconciles delete the task, and its finalizer deletes the Job first.
    let tasks: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), NS);
    for _ in 0..50 {
        match tasks.get_opt("compact").await.unwrap() {
            Some(t) => {
                r.reconcile(&t, &[]).await.unwrap();
            }
            None => break,
        }
    }
    assert!(tasks.get_opt("compact").await.unwrap().is_none(), "task deleted after its TTL");
    assert!(jobs.get_opt("etcd-main-compactor-ondemand").await.unwrap().is_none(), "its Job deleted with it");
}

#[tokio::test]
async fn copy_backups_creates_an_etcd_copy_backups_task_and_reports_its_failure() {
    let server = landscape().await;
    let client = server.client();
    let config = "sourceStore: {provider: Local, container: bucket, prefix: shoot/etcd-main}\ntargetStore: {provider: Local, container: other, prefix: copy}\nmaxBackups: 2\n";
    create(&client, "copy", "CopyBackupsTask", Some(config), 3600).await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "EtcdCopyBackupsTask"),
        "etcdcopybackupstasks",
    );
    let copies: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &ar);
    let fake = {
        let copies = copies.clone();
        tokio::spawn(async move {
            loop {
                if let Some(o) = copies.get_opt("copy-copy").await.unwrap() {
                    assert_eq!(o.data["spec"]["maxBackups"], 2);
                    assert_eq!(o.data["spec"]["targetStore"]["container"], "other");
                    let st = json!({"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "CopyFailed", "message": "target bucket missing",
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "lastUpdateTime": "2026-01-01T00:00:00Z"}]}});
                    copies.patch_status("copy-copy", &PatchParams::default(), &Patch::Merge(st)).await.unwrap();
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let t = reconciler(client).run_to_completion(NS, "copy").await.unwrap();
    fake.await.unwrap();
    assert_eq!(t.state(), TaskState::Failed, "{}", summary(&t));
    assert!(summary(&t).contains("target bucket missing"), "{}", summary(&t));
}
