//! etcd-druid's `EtcdOpsTask` controller (druid@v0.37.1 `internal/controller/etcdopstask/{reconciler,
//! reconcile_task,reconcile_delete,utils}.go`, `handler/ondemandsnapshot/ondemandsnapshot.go`,
//! `handler/utils/etcd.go`, `internal/errors/errors.go`):
//!
//! - finalizer `druid.gardener.cloud/etcd-ops-task`, then state `Pending`;
//! - Admit (lastOperation `Admit`): another unfinished task for the same Etcd → `Rejected` with
//!   `ERR_DUPLICATE_TASK`; the Etcd missing → `ERR_GET_ETCD`; no backup store → `ERR_BACKUP_NOT_ENABLED`; the
//!   Etcd's `Ready` condition not `True` → `ERR_ETCD_NOT_READY`;
//! - state `InProgress`, `startedAt`; Execution re-checks the prerequisites (→ `Failed`), then asks the backup
//!   sidecar for the snapshot: an error answer → `Failed` with `ERR_CREATE_SNAPSHOT`, no answer →
//!   `ERR_EXECUTE_HTTP_REQUEST` and a retry; a skipped delta → `Succeeded` "Delta snapshot was skipped by
//!   backup-restore server", else "Snapshot created successfully";
//! - after `ttlSecondsAfterFinished` (from `lastTransitionTime`), or once deleted: lastOperation `Cleanup`
//!   ("Cleanup skipped for rejected task" for a rejected one), finalizer removed, the task deleted.
//!
//! lastErrors keep the last three, each `[Operation: <op>, Code: <code>] message: <msg>[, cause: <err>]`.
//! The sidecar is the member runtime the Service `<etcd>-client` would reach (a serving member).

use std::sync::Arc;
use std::time::Duration;

use druid_api::opstask::{FINALIZER, codes, operation_states as ops, operations, states};
use druid_api::{Etcd, EtcdOpsTask};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::{Ctx, tick};

const MAX_LAST_ERRORS: usize = 3;

/// Runs the controller until the landscape stops.
pub(crate) async fn run(ctx: Arc<Ctx>) {
    while tick(&ctx).await {
        if let Err(e) = pass(&ctx).await {
            tracing::debug!(error = %e, "EtcdOpsTask pass failed");
        }
    }
}

fn api(ctx: &Ctx, ns: &str) -> Api<EtcdOpsTask> {
    Api::namespaced(ctx.clients.druid.clone(), ns)
}

async fn pass(ctx: &Arc<Ctx>) -> Result<(), kube::Error> {
    let all = match &ctx.opts.namespace {
        Some(ns) => api(ctx, ns),
        None => Api::all(ctx.clients.druid.clone()),
    }
    .list(&ListParams::default())
    .await?
    .items;
    for task in &all {
        let ns = task.metadata.namespace.clone().unwrap_or_default();
        let name = task.metadata.name.clone().unwrap_or_default();
        let key = format!("{ns}/opstask/{name}");
        if !ctx.busy.lock().expect("busy").insert(key.clone()) {
            continue;
        }
        let (ctx2, task, all) = (ctx.clone(), task.clone(), all.clone());
        tokio::spawn(async move {
            if let Err(e) = reconcile(&ctx2, &task, &all).await {
                tracing::debug!(task = %name, error = %e, "EtcdOpsTask reconcile failed");
            }
            ctx2.busy.lock().expect("busy").remove(&key);
        });
    }
    Ok(())
}

fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn operation(type_: &str, state: &str, description: &str) -> Value {
    json!({"type": type_, "state": state, "description": description, "runID": "", "lastUpdateTime": now()})
}

/// `druiderr.WrapError` rendered by `MapToLastErrors`.
fn last_error(task: &EtcdOpsTask, op: &str, code: &str, message: &str, cause: Option<&str>) -> Value {
    let mut errs: Vec<Value> = task
        .status
        .as_ref()
        .and_then(|s| s.last_errors.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|e| serde_json::to_value(e).unwrap_or_default())
        .collect();
    let mut description = format!("[Operation: {op}, Code: {code}] message: {message}");
    if let Some(c) = cause {
        description.push_str(&format!(", cause: {c}"));
    }
    errs.push(json!({"code": code, "description": description, "observedAt": now()}));
    let skip = errs.len().saturating_sub(MAX_LAST_ERRORS);
    Value::Array(errs.into_iter().skip(skip).collect())
}

async fn patch_status(ctx: &Ctx, task: &EtcdOpsTask, status: Value) -> Result<(), kube::Error> {
    let ns = task.metadata.namespace.clone().unwrap_or_default();
    let name = task.metadata.name.clone().unwrap_or_default();
    api(ctx, &ns).patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": status}))).await?;
    Ok(())
}

fn ttl_expired(task: &EtcdOpsTask) -> bool {
    let ttl = task.spec.ttl_seconds_after_finished.unwrap_or(druid_api::opstask::DEFAULT_TTL_SECONDS);
    let Some(at) = task.status.as_ref().and_then(|s| s.last_transition_time.as_ref()) else { return false };
    let at: jiff::Timestamp = at.0;
    jiff::Timestamp::now() >= at + jiff::SignedDuration::from_secs(ttl.into())
}

async fn reconcile(ctx: &Ctx, task: &EtcdOpsTask, all: &[EtcdOpsTask]) -> Result<(), kube::Error> {
    let ns = task.metadata.namespace.clone().unwrap_or_default();
    let name = task.metadata.name.clone().unwrap_or_default();
    let has_finalizer = task.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER);
    if task.metadata.deletion_timestamp.is_some() || (task.is_finished() && ttl_expired(task)) {
        return cleanup(ctx, task, has_finalizer).await;
    }
    if !has_finalizer {
        let mut finalizers = task.metadata.finalizers.clone().unwrap_or_default();
        finalizers.push(FINALIZER.into());
        api(ctx, &ns)
            .patch(&name, &PatchParams::default(), &Patch::Merge(&json!({"metadata": {"finalizers": finalizers}})))
            .await?;
        return Ok(());
    }
    match task.state() {
        "" => patch_status(ctx, task, json!({"state": states::PENDING, "lastTransitionTime": now()})).await,
        states::PENDING => admit(ctx, task, all).await,
        states::IN_PROGRESS => execute(ctx, task).await,
        _ => Ok(()),
    }
}

/// Why the Etcd cannot be snapshotted: (code, message) as `checkPrerequisitesForSnapshot` and `GetEtcd` say.
async fn prerequisites(ctx: &Ctx, task: &EtcdOpsTask) -> Result<Etcd, (&'static str, &'static str)> {
    let ns = task.metadata.namespace.clone().unwrap_or_default();
    let etcd_name = task.spec.etcd_name.clone().unwrap_or_default();
    let etcd = match Api::<Etcd>::namespaced(ctx.clients.druid.clone(), &ns).get_opt(&etcd_name).await {
        Ok(Some(e)) => e,
        Ok(None) => return Err((codes::GET_ETCD, "etcd object not found")),
        Err(_) => return Err((codes::GET_ETCD, "failed to get etcd object")),
    };
    if etcd.spec.backup.store.as_ref().is_none_or(|s| s.provider.as_deref().unwrap_or_default().is_empty()) {
        return Err((codes::BACKUP_NOT_ENABLED, "backup is not enabled for etcd"));
    }
    let ready = etcd
        .status
        .as_ref()
        .map(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        .unwrap_or(false);
    if !ready {
        return Err((codes::ETCD_NOT_READY, "etcd is not ready"));
    }
    Ok(etcd)
}

fn description_of(code: &str) -> &'static str {
    match code {
        c if c == codes::GET_ETCD => "Etcd object not found",
        c if c == codes::BACKUP_NOT_ENABLED => "Backup is not enabled for etcd",
        c if c == codes::ETCD_NOT_READY => "Etcd is not ready",
        _ => "Task failed",
    }
}

async fn admit(ctx: &Ctx, task: &EtcdOpsTask, all: &[EtcdOpsTask]) -> Result<(), kube::Error> {
    patch_status(
        ctx,
        task,
        json!({"lastOperation": operation(operations::ADMIT, ops::IN_PROGRESS, "Task Admit phase is in progress")}),
    )
    .await?;
    let ns = task.metadata.namespace.as_deref();
    let me = task.metadata.name.as_deref();
    if let Some(other) = all.iter().find(|o| {
        o.metadata.namespace.as_deref() == ns
            && o.metadata.name.as_deref() != me
            && o.spec.etcd_name == task.spec.etcd_name
            && !o.is_finished()
    }) {
        let cause = format!(
            "an EtcdOpsTask for etcd {}/{} is already present (task: {})",
            ns.unwrap_or_default(),
            task.spec.etcd_name.as_deref().unwrap_or_default(),
            other.metadata.name.as_deref().unwrap_or_default()
        );
        let errors = last_error(task, operations::ADMIT, codes::DUPLICATE_TASK, "duplicate task found", Some(&cause));
        return reject(ctx, task, "EtcdOpsTask for the same etcd is already in progress", errors).await;
    }
    match prerequisites(ctx, task).await {
        Err((code, message)) => {
            let errors = last_error(task, operations::ADMIT, code, message, Some(message));
            reject(ctx, task, description_of(code), errors).await
        }
        Ok(_) => {
            patch_status(
                ctx,
                task,
                json!({"lastOperation": operation(operations::ADMIT, ops::COMPLETED, "Admit check passed")}),
            )
            .await?;
            let t = now();
            patch_status(ctx, task, json!({"state": states::IN_PROGRESS, "lastTransitionTime": t, "startedAt": t}))
                .await
        }
    }
}

async fn reject(ctx: &Ctx, task: &EtcdOpsTask, description: &str, errors: Value) -> Result<(), kube::Error> {
    patch_status(
        ctx,
        task,
        json!({"state": states::REJECTED, "lastTransitionTime": now(), "lastErrors": errors,
               "lastOperation": operation(operations::ADMIT, ops::FAILED, description)}),
    )
    .await
}

async fn fail(ctx: &Ctx, task: &EtcdOpsTask, description: &str, errors: Value) -> Result<(), kube::Error> {
    patch_status(
        ctx,
        task,
        json!({"state": states::FAILED, "lastTransitionTime": now(), "lastErrors": errors,
               "lastOperation": operation(operations::EXECUTION, ops::FAILED, description)}),
    )
    .await
}

async fn execute(ctx: &Ctx, task: &EtcdOpsTask) -> Result<(), kube::Error> {
    patch_status(
        ctx,
        task,
        json!({"lastOperation": operation(operations::EXECUTION, ops::IN_PROGRESS, "Task Execution phase is in Progress")}),
    )
    .await?;
    let etcd = match prerequisites(ctx, task).await {
        Ok(e) => e,
        Err((code, message)) => {
            let errors = last_error(task, operations::EXECUTION, code, message, Some(message));
            return fail(ctx, task, description_of(code), errors).await;
        }
    };
    let config = task.spec.config.on_demand_snapshot.clone().unwrap_or_default();
    let full = config.type_ == "full";
    let timeout = Duration::from_secs(if full {
        config.timeout_seconds_full.unwrap_or(900)
    } else {
        config.timeout_seconds_delta.unwrap_or(60)
    } as u64);
    let ns = etcd.metadata.namespace.clone().unwrap_or_default();
    let etcd_name = etcd.metadata.name.clone().unwrap_or_default();
    let mut members: Vec<_> = ctx
        .members
        .lock()
        .expect("members")
        .values()
        .filter(|m| m.namespace == ns && m.etcd == etcd_name)
        .cloned()
        .collect();
    members.sort_by(|a, b| a.pod.cmp(&b.pod));
    // The client Service reaches a serving member; a non-leading sidecar forwards to the leading one.
    let mut serving = None;
    for m in members {
        if m.etcd_client().status().await.is_ok() {
            serving = Some(m);
            break;
        }
    }
    let Some(member) = serving else {
        let errors = last_error(
            task,
            operations::EXECUTION,
            codes::EXECUTE_HTTP_REQUEST,
            "failed to execute HTTP request",
            Some(&format!("no endpoints available for service \"{etcd_name}-client\"")),
        );
        let op = operation(operations::EXECUTION, ops::IN_PROGRESS, "Failed to execute HTTP request");
        return patch_status(ctx, task, json!({"lastErrors": errors, "lastOperation": op})).await;
    };
    let answer = if full {
        tokio::time::timeout(timeout, member.snapshot_full()).await.map(|r| r.map(|_| true))
    } else {
        tokio::time::timeout(timeout, member.snapshot_delta()).await.map(|r| r.map(|s| s.is_some()))
    };
    match answer {
        Err(_) => {
            let cause = format!("context deadline exceeded (Client.Timeout exceeded after {}s)", timeout.as_secs());
            let errors = last_error(
                task,
                operations::EXECUTION,
                codes::EXECUTE_HTTP_REQUEST,
                "failed to execute HTTP request",
                Some(&cause),
            );
            let op = operation(operations::EXECUTION, ops::IN_PROGRESS, "Failed to execute HTTP request");
            patch_status(ctx, task, json!({"lastErrors": errors, "lastOperation": op})).await
        }
        Ok(Err(_)) => {
            let errors = last_error(
                task,
                operations::EXECUTION,
                codes::CREATE_SNAPSHOT,
                "failed to create snapshot",
                Some("failed to create snapshot, status code: 500"),
            );
            fail(ctx, task, "Failed to create snapshot", errors).await
        }
        Ok(Ok(taken)) => {
            let description = if taken {
                "Snapshot created successfully"
            } else {
                "Delta snapshot was skipped by backup-restore server"
            };
            patch_status(
                ctx,
                task,
                json!({"state": states::SUCCEEDED, "lastTransitionTime": now(),
                       "lastOperation": operation(operations::EXECUTION, ops::COMPLETED, description)}),
            )
            .await
        }
    }
}

async fn cleanup(ctx: &Ctx, task: &EtcdOpsTask, has_finalizer: bool) -> Result<(), kube::Error> {
    let ns = task.metadata.namespace.clone().unwrap_or_default();
    let name = task.metadata.name.clone().unwrap_or_default();
    if has_finalizer {
        patch_status(
            ctx,
            task,
            json!({"lastOperation": operation(operations::CLEANUP, ops::IN_PROGRESS, "Task Cleanup phase is in Progress")}),
        )
        .await?;
        let description =
            if task.state() == states::REJECTED { "Cleanup skipped for rejected task" } else { "Cleanup completed" };
        patch_status(ctx, task, json!({"lastOperation": operation(operations::CLEANUP, ops::COMPLETED, description)}))
            .await?;
        let finalizers: Vec<String> =
            task.metadata.finalizers.iter().flatten().filter(|f| *f != FINALIZER).cloned().collect();
        api(ctx, &ns)
            .patch(&name, &PatchParams::default(), &Patch::Merge(&json!({"metadata": {"finalizers": finalizers}})))
            .await?;
    }
    if task.metadata.deletion_timestamp.is_none() {
        match api(ctx, &ns).delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
