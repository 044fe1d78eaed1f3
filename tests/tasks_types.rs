//! The DEP-05 task types end to end against the embedded API server, with small fakes standing in for the
//! backup sidecar (behind the service proxy), the Job controller and etcd-druid's copy-backups controller.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use druidctl::api::task::{EtcdOperatorTaskSpec, NamespacedName};
use druidctl::api::{EtcdOperatorTask, TaskState};
use druidctl::reconciler::{Backoff, Reconciler, ReconcilerOptions};
use druidctl::sim::apiserver::ApiServer;
use druidctl::tasks::Registry;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

const NS: &str = "shoot";
const ETCD: &str = "etcd-main";

fn etcd_ar() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"), "etcds")
}

/// A quorate 3-member Etcd with backups, its pods, its client Service.
async fn landscape() -> ApiServer {
    let server = ApiServer::new();
    server.register_upstream_crds().unwrap();
    server.register_crd_yaml(&serde_json::to_string(&druidctl::api::task::crd()).unwrap()).unwrap();
    let c = server.client();
    let post = PostParams::default();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(c.clone())
        .create(&post, &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap())
        .await
        .unwrap();
    let etcds = Api::<DynamicObject>::namespaced_with(c.clone(), NS, &etcd_ar());
    let etcd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
        "metadata": {"name": ETCD, "namespace": NS},
        "spec": {"replicas": 3, "labels": {"app": "etcd-statefulset"}, "etcd": {},
                 "backup": {"port": 8080, "store": {"provider": "Local", "container": "bucket", "prefix": "shoot/etcd-main"}}}
    }))
    .unwrap();
    etcds.create(&post, &etcd).await.unwrap();
    let members: Vec<Value> = (0..3)
        .map(|i| json!({"name": format!("{ETCD}-{i}"), "id": format!("{i}"), "role": if i == 1 { "Leader" } else { "Member" }, "status": "Ready", "reason": "LeaseSucceeded", "lastTransitionTime": "2026-01-01T00:00:00Z"}))
        .collect();
    etcds
        .patch_status(ETCD, &PatchParams::default(), &Patch::Merge(json!({"status": {"members": members, "ready": true}})))
        .await
        .unwrap();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(c.clone(), NS);
    for i in 0..3 {
        let name = format!("{ETCD}-{i}");
        let pod = json!({"metadata": {"name": name, "namespace": NS}, "spec": {"containers": [{"name": "etcd", "image": "etcd"}]}});
        pods.create(&post, &serde_json::from_value(pod).unwrap()).await.unwrap();
        let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    }
    let svc = json!({"metadata": {"name": format!("{ETCD}-client"), "namespace": NS}, "spec": {"ports": [{"name": "backuprestore", "port": 8080}]}});
    Api::<k8s_openapi::api::core::v1::Service>::namespaced(c.clone(), NS).create(&post, &serde_json::from_value(svc).unwrap()).await.unwrap();
    server
}

/// A fake leading backup sidecar: `/snapshot/full|delta` renew the snapshot lease like backup-restore does.
#[derive(Clone, Default)]
struct Sidecar {
    calls: Arc<Mutex<Vec<String>>>,
}

impl Sidecar {
    async fn start(&self, server: &ApiServer) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        server.register_service_backend(NS, &format!("{ETCD}-client"), 8080, addr);
        let (me, client) = (self.clone(), server.client());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (me, client) = (me.clone(), client.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (me, client) = (me.clone(), client.clone());
                        async move {
                            let path = req.uri().path().to_string();
                            me.calls.lock().unwrap().push(path.clone());
                            let body = match path.as_str() {
                                "/snapshot/full" => renew(&client, &format!("{ETCD}-full-snap")).await,
                                "/snapshot/delta" => renew(&client, &format!("{ETCD}-delta-snap")).await,
                                "/compact" => json!({"message": "compacted", "revision": 42}),
                                _ => json!({"message": "ok"}),
                            };
                            Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(body.to_string()))))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
    }
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

async fn renew(client: &Client, lease: &str) -> Value {
    let api: Api<Lease> = Api::namespaced(client.clone(), NS);
    let now = jiff::Timestamp::now();
    let obj = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": lease, "namespace": NS},
                     "spec": {"holderIdentity": format!("{}", now.as_millisecond()), "renewTime": now.to_string()}});
    api.patch(lease, &PatchParams::apply("backup-restore").force(), &Patch::Apply(&obj)).await.unwrap();
    json!({"snapName": "Full-00000000-00000042", "lastRevision": 42})
}

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
    format!("{:?}: {:?}", t.state(), t.status.as_ref().and_then(|s| s.last_operation.as_ref()).map(|o| (&o.name, &o.reason)))
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
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), NS);
    for i in [0, 2] {
        let status = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        pods.patch_status(&format!("{ETCD}-{i}"), &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    }
    create(&client, "snap", "OnDemandSnapshotTask", Some("type: delta"), 3600).await;
    let t = reconciler(client).run_to_completion(NS, "snap").await.unwrap();
    assert_eq!(t.state(), TaskState::Rejected);
    assert!(summary(&t).contains("no quorum (1 of 3 members ready"), "{}", summary(&t));
    assert!(sidecar.calls().is_empty());
}

#[tokio::test]
async fn compaction_maintenance_goes_through_the_leading_sidecar() {
    let server = landscape().await;
    let sidecar = Sidecar::default();
    sidecar.start(&server).await;
    let client = server.client();
    create(&client, "maint", "OnDemandMaintenanceTask", Some("maintenanceType: {etcdCompaction: true}"), 3600).await;
    let t = reconciler(client).run_to_completion(NS, "maint").await.unwrap();
    assert_eq!(t.state(), TaskState::Succeeded, "{}", summary(&t));
    assert_eq!(sidecar.calls(), ["/compact"]);
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
                if jobs.get_opt("etcd-main-compactor").await.unwrap().is_some() {
                    let st = json!({"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}});
                    jobs.patch_status("etcd-main-compactor", &PatchParams::default(), &Patch::Merge(st)).await.unwrap();
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
    let job = jobs.get("etcd-main-compactor").await.unwrap();
    let labels = job.metadata.labels.clone().unwrap();
    assert_eq!(labels["druid.gardener.cloud/operator-task"], "compact");
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
    assert!(jobs.get_opt("etcd-main-compactor").await.unwrap().is_none(), "its Job deleted with it");
}

#[tokio::test]
async fn copy_backups_creates_an_etcd_copy_backups_task_and_reports_its_failure() {
    let server = landscape().await;
    let client = server.client();
    let config = "sourceStore: {provider: Local, container: bucket, prefix: shoot/etcd-main}\ntargetStore: {provider: Local, container: other, prefix: copy}\nmaxBackups: 2\n";
    create(&client, "copy", "CopyBackupsTask", Some(config), 3600).await;
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "EtcdCopyBackupsTask"), "etcdcopybackupstasks");
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
