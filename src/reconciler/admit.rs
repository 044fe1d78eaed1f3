//! Admission: a new task becomes `Pending`, then `Rejected` (invalid config, unknown type, duplicate, failed
//! precondition, missing Etcd) or — when it is first in its Etcd's FIFO — `InProgress`.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};

use super::events::EventType;
use super::status::{TaskHandle, WriteError, operation, push_error};
use super::{FINALIZER, Next, ReconcileError, Reconciler};
use crate::api::task::{OperationState, types};
use crate::api::{Etcd, EtcdOperatorTask, TaskState};
use crate::tasks::preconditions::{Admission, admission};
use crate::tasks::{Facts, RegistryError};

/// Name of the admission stage in `lastOperation`.
pub const ADMISSION: &str = "Admission";

const SOON: Duration = Duration::from_millis(100);

impl Reconciler {
    pub(crate) async fn admit(
        &self,
        task: EtcdOperatorTask,
        others: &[EtcdOperatorTask],
    ) -> Result<Next, ReconcileError> {
        let name = task.metadata.name.clone().unwrap_or_default();
        let api = self.api(&task);
        let mut handle = TaskHandle::new(api.clone(), task);

        // Types the runbook engine executes in-process are left alone (they are not in this registry).
        let type_ = handle.current.spec.type_.clone();
        let plan = match self.registry.plan(&type_, handle.current.spec.config.as_deref()) {
            Err(RegistryError::UnknownType { .. }) if types::ALL.contains(&type_.as_str()) => return Ok(Next::Done),
            other => other,
        };

        if !handle.current.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == FINALIZER)) {
            let mut fins = handle.current.metadata.finalizers.clone().unwrap_or_default();
            fins.push(FINALIZER.into());
            let patch = serde_json::json!({"metadata": {"finalizers": fins, "resourceVersion": handle.current.metadata.resource_version}});
            match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(t) => handle.current = t,
                Err(kube::Error::Api(s)) if s.code == 409 => return Ok(Next::RequeueAfter(SOON)),
                Err(e) => return Err(ReconcileError::api(format!("adding the finalizer to task {name}"), e)),
            }
        }

        let plan = match plan {
            Ok(p) => p,
            Err(e @ RegistryError::UnknownType { .. }) => {
                return self.reject(handle, "UnknownTaskType", &e.to_string()).await;
            }
            Err(e) => return self.reject(handle, "InvalidConfig", &e.to_string()).await,
        };
        let etcd_ref = handle.current.spec.owner_etcd_refrence.clone();
        if Some(etcd_ref.namespace.as_str()) != handle.current.metadata.namespace.as_deref() {
            let reason = format!("the task must be created in the namespace of its etcd ({})", etcd_ref.namespace);
            return self.reject(handle, "WrongNamespace", &reason).await;
        }

        let key_of = |t: &EtcdOperatorTask| {
            self.registry.plan(&t.spec.type_, t.spec.config.as_deref()).ok().map(|p| p.duplicate_key())
        };
        match admission(&handle.current, others, key_of) {
            Admission::Duplicate(reason) => return self.reject(handle, "DuplicateTask", &reason).await,
            Admission::Wait(reason) => {
                // A new task shows `Pending` (and why) only when it has to wait; otherwise admission decides at once.
                let unchanged = handle
                    .current
                    .status
                    .as_ref()
                    .and_then(|s| s.last_operation.as_ref())
                    .is_some_and(|o| o.reason == reason);
                if !unchanged {
                    let r = handle
                        .compare_and_swap(|s| {
                            s.state = Some(TaskState::Pending);
                            s.last_operation = Some(operation(ADMISSION, OperationState::Pending, reason.clone()));
                        })
                        .await;
                    if let Some(next) = settle(r)? {
                        return Ok(next);
                    }
                }
                return Ok(Next::Waiting(self.opts.wait_requeue));
            }
            Admission::Proceed => {}
        }

        let etcds: Api<Etcd> = Api::namespaced(self.client.clone(), &etcd_ref.namespace);
        let etcd = etcds
            .get_opt(&etcd_ref.name)
            .await
            .map_err(|e| ReconcileError::api(format!("reading etcd {}", etcd_ref.name), e))?;
        let Some(etcd) = etcd else {
            let reason = format!("etcd {:?} not found in namespace {:?}", etcd_ref.name, etcd_ref.namespace);
            return self.reject(handle, "EtcdNotFound", &reason).await;
        };
        if plan.needs_health() {
            let inputs = crate::health::collect(&self.client, etcd.clone()).await?;
            let report = crate::health::assess(&inputs, jiff::Timestamp::now());
            if let Err(reason) = plan.preconditions(&Facts::from_report(&report)) {
                return self.reject(handle, "PreconditionFailed", &reason).await;
            }
        }

        let r = handle
            .compare_and_swap(|s| {
                s.state = Some(TaskState::InProgress);
                s.initiated_at = Some(Time(jiff::Timestamp::now()));
                s.last_operation = Some(operation(ADMISSION, OperationState::Completed, "preconditions met"));
            })
            .await;
        if let Some(next) = settle(r)? {
            return Ok(next);
        }
        self.events.record(&handle.current, EventType::Normal, "Started", "preconditions met; executing").await;
        self.execute(handle.current, Some(etcd)).await
    }

    /// Ends the task `Rejected` with `reason` (a compare-and-swap: whoever wins counts it).
    async fn reject(&self, mut handle: TaskHandle, code: &str, reason: &str) -> Result<Next, ReconcileError> {
        let r = handle
            .compare_and_swap(|s| {
                s.state = Some(TaskState::Rejected);
                s.initiated_at = Some(Time(jiff::Timestamp::now()));
                s.last_operation = Some(operation(ADMISSION, OperationState::Failed, reason));
                push_error(s, code, reason);
            })
            .await;
        if let Some(next) = settle(r)? {
            return Ok(next);
        }
        self.metrics.task_finished(&handle.current, TaskState::Rejected);
        self.events.record(&handle.current, EventType::Warning, "Rejected", reason).await;
        self.expire(&handle.current).await
    }
}

/// A lost compare-and-swap means someone else decided: look again soon.
fn settle(r: Result<(), WriteError>) -> Result<Option<Next>, ReconcileError> {
    match r {
        Ok(()) => Ok(None),
        Err(WriteError::Conflict(_)) => Ok(Some(Next::RequeueAfter(SOON))),
        Err(WriteError::Gone(_)) => Ok(Some(Next::Done)),
        Err(e) => Err(e.into()),
    }
}
