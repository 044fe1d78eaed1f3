//! What etcd-druid runs as Jobs, done for real on the local object stores:
//!
//! - every snapshot compaction Job (batch/v1 labelled `app.kubernetes.io/component=etcd-snapshot-compaction-job`,
//!   etcd-druid's `E-compactor` or one a task created): run from the Job's own container as `etcdbrctl compact`
//!   would run it: the store from `--storage-provider`, `--store-container` and `--store-prefix`, the lease from
//!   `--full-snapshot-lease-name` when `--enable-snapshot-lease-renewal=true`, the service account, image and
//!   backup secret volume as the pod would need them. The newest full snapshot plus its deltas are restored
//!   into a scratch etcd and saved as one new full snapshot; the Job then reports `Complete` (or `Failed`);
//! - `EtcdCopyBackupsTask`: snapshots are copied from `spec.sourceStore` to `spec.targetStore` (newest
//!   `maxBackups` full snapshots when set); the task's condition `Succeeded` (or `Failed`) says how it went.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::backup::ObjectStore;
use super::{Ctx, LandscapeError, micro_time_now, tick};
use crate::etcd::snapshot::restore_snapshot_with;
use crate::etcd::{MemberConfig, MemberProcess};

/// Runs the actor until the landscape stops.
pub(crate) async fn run(ctx: Arc<Ctx>) {
    while tick(&ctx).await {
        if let Err(e) = pass(&ctx).await {
            tracing::debug!(error = %e, "jobs pass failed");
        }
    }
}

fn copy_tasks_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "EtcdCopyBackupsTask"),
        "etcdcopybackupstasks",
    )
}

async fn pass(ctx: &Arc<Ctx>) -> Result<(), LandscapeError> {
    let client = ctx.clients.druid.clone();
    let jobs = match &ctx.opts.namespace {
        Some(ns) => Api::<Job>::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
    .list(&ListParams::default().labels(&format!("{LABEL_COMPONENT}={COMPACTION_COMPONENT}")))
    .await
    .map_err(|e| LandscapeError::kube("list compaction jobs", e))?;
    for job in jobs.items {
        let status = job.status.clone().unwrap_or_default();
        if status.completion_time.is_some() || status.failed.unwrap_or(0) > 0 {
            continue;
        }
        if ctx.opts.builtin_controllers {
            // kube-controller-manager's Job controller owns the Job and its status: the landscape is the
            // kubelet that runs its pod.
            run_job_pods(ctx, &job).await;
            continue;
        }
        if ctx.busy.lock().expect("busy").contains(&given_up(&job)) {
            continue;
        }
        let ns = job.metadata.namespace.clone().unwrap_or_default();
        let job_name = job.metadata.name.clone().unwrap_or_default();
        spawn_once(ctx, format!("{ns}/job/{job_name}"), {
            let (ctx, client) = (ctx.clone(), client.clone());
            async move { compact(&ctx, &client, &job).await }
        });
    }
    let tasks_api: Api<DynamicObject> = match &ctx.opts.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &copy_tasks_resource()),
        None => Api::all_with(client.clone(), &copy_tasks_resource()),
    };
    if let Ok(tasks) = tasks_api.list(&ListParams::default()).await {
        for t in tasks.items {
            let done = t.data["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter().any(|c| (c["type"] == "Succeeded" || c["type"] == "Failed") && c["status"] == "True")
            });
            if done {
                continue;
            }
            let ns = t.metadata.namespace.clone().unwrap_or_default();
            let name = t.metadata.name.clone().unwrap_or_default();
            spawn_once(ctx, format!("{ns}/copy/{name}"), {
                let (ctx, client) = (ctx.clone(), client.clone());
                async move { copy_backups(&ctx, &client, t).await }
            });
        }
    }
    Ok(())
}

fn spawn_once(ctx: &Arc<Ctx>, key: String, work: impl std::future::Future<Output = ()> + Send + 'static) {
    if !ctx.busy.lock().expect("busy").insert(key.clone()) {
        return;
    }
    let ctx = ctx.clone();
    tokio::spawn(async move {
        work.await;
        ctx.busy.lock().expect("busy").remove(&key);
    });
}

/// `app.kubernetes.io/component` of etcd-druid's compaction Job (druid@v0.37.1 `internal/common/constants.go`).
const COMPACTION_COMPONENT: &str = "etcd-snapshot-compaction-job";
const LABEL_COMPONENT: &str = "app.kubernetes.io/component";

/// What `etcdbrctl compact` takes from its pod: flags, and the objects the pod could not start without.
struct CompactionRun {
    prefix: String,
    full_lease: Option<String>,
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().find_map(|a| a.strip_prefix(name)?.strip_prefix('='))
}

/// Reads the Job as the kubelet and `etcdbrctl compact` would: a pod that cannot start (no image, missing
/// service account or backup secret) or a flag etcd-backup-restore rejects fails the Job.
async fn compaction_run(client: &Client, job: &Job) -> Result<CompactionRun, String> {
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let pod = job.spec.as_ref().and_then(|s| s.template.spec.clone()).ok_or("the Job has no pod template")?;
    let container = pod.containers.first().ok_or("the Job's pod has no container")?;
    if container.image.as_deref().unwrap_or_default().is_empty() {
        return Err("the container has no image".into());
    }
    let args = container.args.clone().unwrap_or_default();
    if args.first().map(String::as_str) != Some("compact") {
        return Err(format!("etcdbrctl: unknown command {:?}", args.first()));
    }
    let sa = pod.service_account_name.clone().unwrap_or_else(|| "default".into());
    let sas = Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), &ns);
    if sa != "default" && sas.get_opt(&sa).await.ok().flatten().is_none() {
        return Err(format!("serviceaccount \"{sa}\" not found"));
    }
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns);
    for v in pod.volumes.iter().flatten() {
        if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.clone())
            && secrets.get_opt(&name).await.ok().flatten().is_none()
        {
            return Err(format!("MountVolume.SetUp failed for volume \"{}\": secret \"{name}\" not found", v.name));
        }
    }
    match flag(&args, "--storage-provider") {
        Some("Local") => {}
        Some(p) => return Err(format!("the landscape's object store is Local, the Job asks for {p}")),
        None => return Err("no --storage-provider: snapstore is not configured".into()),
    }
    let prefix = flag(&args, "--store-prefix").unwrap_or_default().to_string();
    let full_lease = (flag(&args, "--enable-snapshot-lease-renewal") == Some("true"))
        .then(|| flag(&args, "--full-snapshot-lease-name").map(str::to_string))
        .flatten();
    Ok(CompactionRun { prefix, full_lease })
}

async fn compact(ctx: &Ctx, client: &Client, job: &Job) {
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let job_name = job.metadata.name.as_deref().unwrap_or_default();
    let jobs = Api::<Job>::namespaced(client.clone(), &ns);
    let start = jiff::Timestamp::now().to_string();
    let _ = jobs
        .patch_status(
            job_name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"startTime": start, "active": 1}})),
        )
        .await;
    let result = run_compaction(ctx, client, job).await;
    let now = jiff::Timestamp::now().to_string();
    let status = match &result {
        Ok(msg) => {
            json!({"status": {"active": 0, "succeeded": 1, "startTime": start, "completionTime": now, "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "message": msg, "lastTransitionTime": now, "lastProbeTime": now},
            {"type": "Complete", "status": "True", "reason": "CompletionsReached", "message": msg, "lastTransitionTime": now, "lastProbeTime": now}]}})
        }
        Err(e) => json!({"status": {"active": 0, "failed": 1, "startTime": start, "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": e, "lastTransitionTime": now, "lastProbeTime": now},
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": e, "lastTransitionTime": now, "lastProbeTime": now}]}}),
    };
    if let Err(e) = jobs.patch_status(job_name, &PatchParams::default(), &Patch::Merge(&status)).await {
        tracing::warn!(job = %job_name, error = %e, "compaction job status not written");
        // A refusal that cannot succeed later (4xx other than conflict and throttling) is not retried.
        if let kube::Error::Api(s) = &e
            && (400..500).contains(&s.code)
            && s.code != 409
            && s.code != 429
            && let Ok(Some(job)) = jobs.get_opt(job_name).await
        {
            ctx.busy.lock().expect("busy").insert(given_up(&job));
        }
    }
}

/// What the Job's pod does: read its flags and objects as `etcdbrctl compact` would, then compact the store.
async fn run_compaction(ctx: &Ctx, client: &Client, job: &Job) -> Result<String, String> {
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let run = compaction_run(client, job).await?;
    compact_store(ctx, client, &ns, &run).await
}

/// Key in `busy` of a Job whose status the server refused for good.
fn given_up(job: &Job) -> String {
    format!("given-up/{}", job.metadata.uid.as_deref().unwrap_or_default())
}

/// The kubelet of the compaction Job's pods: binds a new pod to a node, runs the compaction once for it and
/// reports it Running, then Succeeded or Failed with its container terminated (exit code 0 or 1); the Job
/// controller derives the Job's status from that. Confirms the graceful deletion of a running pod.
async fn run_job_pods(ctx: &Arc<Ctx>, job: &Job) {
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let job_name = job.metadata.name.clone().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.clients.druid.clone(), &ns);
    // The label the Job controller puts on its pods (`batch.kubernetes.io/job-name`).
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job_name}"));
    let Ok(list) = pods.list(&lp).await else { return };
    for p in list.items {
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let phase = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
        if p.metadata.deletion_timestamp.is_some() {
            if !ctx.busy.lock().expect("busy").contains(&format!("{ns}/jobpod/{uid}")) {
                crate::statefulset::confirm_deletion(ctx, &ns, &p).await;
            }
            continue;
        }
        if phase == "Succeeded" || phase == "Failed" || ctx.busy.lock().expect("busy").contains(&format!("ran/{uid}")) {
            continue;
        }
        if p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_none() {
            if let Some(node) = crate::statefulset::schedule(ctx, &ns, &Default::default()).await {
                crate::statefulset::bind(ctx, &ns, &p, &node).await;
            }
            continue;
        }
        spawn_once(ctx, format!("{ns}/jobpod/{uid}"), {
            let (ctx, job, pods) = (ctx.clone(), job.clone(), pods.clone());
            async move {
                let name = p.metadata.name.clone().unwrap_or_default();
                let containers: Vec<(String, String)> = p
                    .spec
                    .iter()
                    .flat_map(|s| s.containers.iter())
                    .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
                    .collect();
                let start = jiff::Timestamp::now().to_string();
                let running: Vec<_> = containers
                    .iter()
                    .map(|(n, i)| {
                        json!({"name": n, "image": i, "imageID": "",
                    "ready": true, "started": true, "restartCount": 0, "state": {"running": {"startedAt": start}}})
                    })
                    .collect();
                let status = json!({"status": {"phase": "Running", "startTime": start, "podIP": "127.0.0.1",
                    "hostIP": "127.0.0.1", "containerStatuses": running}});
                let _ = pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await;
                let result = run_compaction(&ctx, &ctx.clients.druid, &job).await;
                let now = jiff::Timestamp::now().to_string();
                let (phase, code, reason, message) = match &result {
                    Ok(m) => ("Succeeded", 0, "Completed", m.clone()),
                    Err(e) => ("Failed", 1, "Error", e.clone()),
                };
                let done: Vec<_> = containers
                    .iter()
                    .map(|(n, i)| {
                        json!({"name": n, "image": i, "imageID": "",
                    "ready": false, "started": false, "restartCount": 0, "state": {"terminated": {"exitCode": code,
                    "reason": reason, "message": message, "startedAt": start, "finishedAt": now}}})
                    })
                    .collect();
                let status = json!({"status": {"phase": phase, "containerStatuses": done, "conditions": [
                    {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}]}});
                if let Err(e) = pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await {
                    tracing::warn!(pod = %name, error = %e, "compaction pod status not written");
                }
                // Run once per pod, whatever the server answered.
                ctx.busy.lock().expect("busy").insert(format!("ran/{}", p.metadata.uid.clone().unwrap_or_default()));
            }
        });
    }
}

/// Restores the newest full snapshot and its deltas into a scratch etcd and saves the result as one full
/// snapshot; returns a message for the Job's condition.
async fn compact_store(ctx: &Ctx, client: &Client, ns: &str, run: &CompactionRun) -> Result<String, String> {
    let store = ObjectStore::new(ctx.store_dir(ns, &run.prefix));
    let (full, deltas) = store.latest_chain().ok_or("no full snapshot in the object store")?;
    if deltas.is_empty() {
        return Ok(format!("nothing to compact: {} has no deltas after it", full.snap_name));
    }
    let scratch = tempfile_dir(ctx)?;
    let mut cfg = MemberConfig::new("compactor", scratch.join("data"), scratch.join("compactor.log"));
    cfg.heartbeat_ms = ctx.opts.heartbeat_ms;
    cfg.election_ms = ctx.opts.election_ms;
    restore_snapshot_with(&ctx.etcd, &store.path(&full), &cfg).await.map_err(|e| e.to_string())?;
    let member = MemberProcess::spawn_with(&ctx.etcd, cfg).map_err(|e| e.to_string())?;
    member.wait_serving(Duration::from_secs(30)).await.map_err(|e| e.to_string())?;
    let c = member.client();
    let mut applied = 0;
    for d in &deltas {
        applied += store.apply_delta(&c, d).await.map_err(|e| e.to_string())?;
    }
    let newest = deltas.last().unwrap_or(&full);
    let last = newest.last_revision;
    let info = store.take_full_as(&c, Some(newest)).await.map_err(|e| e.to_string())?;
    drop(member);
    let _ = std::fs::remove_dir_all(&scratch);
    if let Some(name) = &run.full_lease {
        let lease = Api::<Lease>::namespaced(client.clone(), ns);
        let patch = json!({"spec": {"holderIdentity": last.to_string(), "renewTime": micro_time_now()}});
        let _ = lease.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await;
    }
    Ok(format!(
        "compacted {} and {} delta snapshots ({applied} changes) into {}",
        full.snap_name,
        deltas.len(),
        info.snap_name
    ))
}

fn tempfile_dir(ctx: &Ctx) -> Result<std::path::PathBuf, String> {
    let dir = ctx.opts.state_dir.join("scratch").join(uuid::Uuid::new_v4().to_string());
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    Ok(dir)
}

async fn copy_backups(ctx: &Ctx, client: &Client, task: DynamicObject) {
    let ns = task.metadata.namespace.clone().unwrap_or_default();
    let name = task.metadata.name.clone().unwrap_or_default();
    let spec = &task.data["spec"];
    let prefix = |v: &Value| v["prefix"].as_str().map(str::to_string);
    let result = match (prefix(&spec["sourceStore"]), prefix(&spec["targetStore"])) {
        (Some(src), Some(dst)) => {
            let max = spec["maxBackups"].as_u64().map(|n| n as usize);
            ObjectStore::new(ctx.store_dir(&ns, &src))
                .copy_to(&ObjectStore::new(ctx.store_dir(&ns, &dst)), max)
                .map(|n| format!("copied {n} snapshots from {src} to {dst}"))
                .map_err(|e| e.to_string())
        }
        _ => Err("spec.sourceStore.prefix and spec.targetStore.prefix are required".to_string()),
    };
    let now = jiff::Timestamp::now().to_string();
    let (t, reason, message) = match &result {
        Ok(m) => ("Succeeded", "CopyBackupsSucceeded", m.clone()),
        Err(e) => ("Failed", "CopyBackupsFailed", e.clone()),
    };
    let mut status = json!({"status": {"observedGeneration": task.metadata.generation, "conditions": [
        {"type": t, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now, "lastUpdateTime": now}]}});
    if let Err(e) = &result {
        status["status"]["lastError"] = json!(e);
    }
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &copy_tasks_resource());
    if let Err(e) = api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await {
        tracing::warn!(task = %name, error = %e, "copy-backups status not written");
    }
}
