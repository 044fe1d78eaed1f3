//! Cleanup: a finished task is deleted `ttlSecondsAfterFinished` after it finished; its finalizer deletes
//! everything the task created (labelled with the task's name) and its executor Lease first.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};

use super::{FINALIZER, Next, ReconcileError, Reconciler, executor_lease_name};
use crate::api::EtcdOperatorTask;
use crate::tasks::step::CREATED_BY_LABEL;

/// When a finished task finished: its last operation's transition time (else initiation, else creation).
pub fn finished_at(task: &EtcdOperatorTask) -> Option<jiff::Timestamp> {
    let s = task.status.as_ref();
    s.and_then(|s| s.last_operation.as_ref().map(|o| o.last_transition_time.0))
        .or_else(|| s.and_then(|s| s.initiated_at.as_ref().map(|t| t.0)))
        .or_else(|| task.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// How long until a finished task is due for deletion (zero: now).
pub fn time_to_deletion(task: &EtcdOperatorTask, default_ttl_seconds: i32, now: jiff::Timestamp) -> Duration {
    let ttl = i64::from(task.spec.ttl_seconds_after_finished.unwrap_or(default_ttl_seconds).max(0));
    let Some(done) = finished_at(task) else { return Duration::ZERO };
    let due_ms = done.as_millisecond() + ttl * 1000;
    Duration::from_millis(u64::try_from(due_ms - now.as_millisecond()).unwrap_or(0))
}

fn ignore_not_found<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes every object matching `selector` one by one (`delete`, not `deletecollection`: least privilege);
/// a missing API counts as nothing to delete.
async fn delete_labelled<K>(api: &Api<K>, selector: &ListParams) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let items = match api.list(selector).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e),
    };
    for o in items {
        if let Some(n) = o.meta().name.clone() {
            ignore_not_found(api.delete(&n, &DeleteParams::background()).await)?;
        }
    }
    Ok(())
}

impl Reconciler {
    /// Deletes a finished task once its TTL has passed; otherwise says when to look again.
    pub(crate) async fn expire(&self, task: &EtcdOperatorTask) -> Result<Next, ReconcileError> {
        let left = time_to_deletion(task, self.opts.default_ttl_seconds, jiff::Timestamp::now());
        if left > Duration::ZERO {
            return Ok(Next::RequeueAfter(left));
        }
        let name = task.metadata.name.clone().unwrap_or_default();
        ignore_not_found(self.api(task).delete(&name, &DeleteParams::background()).await)
            .map_err(|e| ReconcileError::api(format!("deleting expired task {name}"), e))?;
        Ok(Next::RequeueAfter(Duration::from_millis(100)))
    }

    /// The finalizer: delete what the task created, then let the task go.
    pub(crate) async fn finalize(&self, task: &EtcdOperatorTask) -> Result<Next, ReconcileError> {
        let Some(fins) = task.metadata.finalizers.clone().filter(|f| f.iter().any(|f| f == FINALIZER)) else {
            return Ok(Next::Done);
        };
        let ns = task.metadata.namespace.clone().unwrap_or_default();
        let name = task.metadata.name.clone().unwrap_or_default();
        let selector = ListParams::default().labels(&format!("{CREATED_BY_LABEL}={name}"));
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), &ns);
        delete_labelled(&jobs, &selector)
            .await
            .map_err(|e| ReconcileError::api(format!("deleting the jobs of task {name}"), e))?;
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "EtcdCopyBackupsTask"),
            "etcdcopybackupstasks",
        );
        let copies: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &ns, &ar);
        delete_labelled(&copies, &selector)
            .await
            .map_err(|e| ReconcileError::api(format!("deleting the EtcdCopyBackupsTasks of task {name}"), e))?;
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &ns);
        ignore_not_found(leases.delete(&executor_lease_name(&name), &DeleteParams::default()).await)
            .map_err(|e| ReconcileError::api(format!("deleting the executor lease of task {name}"), e))?;
        let rest: Vec<String> = fins.into_iter().filter(|f| f != FINALIZER).collect();
        let patch =
            serde_json::json!({"metadata": {"finalizers": rest, "resourceVersion": task.metadata.resource_version}});
        match self.api(task).patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(Next::Done),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Next::Done),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Next::RequeueAfter(Duration::from_millis(100))),
            Err(e) => Err(ReconcileError::api(format!("removing the finalizer of task {name}"), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::task::{EtcdOperatorTaskSpec, EtcdOperatorTaskStatus, NamespacedName, OperationState};

    #[test]
    fn ttl_counts_from_the_final_operation() {
        let t0 = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let mut t = EtcdOperatorTask::new(
            "t",
            EtcdOperatorTaskSpec {
                type_: "X".into(),
                config: None,
                ttl_seconds_after_finished: Some(60),
                owner_etcd_refrence: NamespacedName { name: "e".into(), namespace: "n".into() },
            },
        );
        let mut op = crate::reconciler::status::operation("Step", OperationState::Completed, "");
        op.last_transition_time.0 = t0;
        t.status = Some(EtcdOperatorTaskStatus { last_operation: Some(op), ..Default::default() });
        assert_eq!(time_to_deletion(&t, 3600, t0), Duration::from_secs(60));
        assert_eq!(time_to_deletion(&t, 3600, t0 + jiff::SignedDuration::from_secs(59)), Duration::from_secs(1));
        assert_eq!(time_to_deletion(&t, 3600, t0 + jiff::SignedDuration::from_secs(61)), Duration::ZERO);
        t.spec.ttl_seconds_after_finished = None;
        assert_eq!(time_to_deletion(&t, 3600, t0), Duration::from_secs(3600));
    }
}
