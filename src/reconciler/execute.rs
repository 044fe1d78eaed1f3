//! Execution: under the task's executor Lease, each step runs check → act → verify and is recorded in
//! `status.lastOperation` before and after, so a killed executor resumes at the first unfinished step.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::events::EventType;
use super::lease::{Acquire, LeaseLock};
use super::status::{TaskHandle, WriteError, operation, push_error};
use super::{Next, ReconcileError, Reconciler, executor_lease_name, owner_reference};
use crate::api::task::{LastOperation, OperationState, types};
use crate::api::{Etcd, EtcdOperatorTask, TaskState};
use crate::tasks::{Readiness, RegistryError, Step, StepContext, StepError};

/// How one run of a step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepRun {
    /// Done; the text says how ("already done" or "done").
    Done(&'static str),
    /// Stopped at a safe point (lease lost or shutdown).
    Interrupted,
}

/// Runs one step: `check`, then `act` and `verify` until ready or the step's timeout.
pub async fn run_step(step: &dyn Step, cx: &StepContext, stop: &CancellationToken) -> Result<StepRun, StepError> {
    if step.check(cx).await? {
        return Ok(StepRun::Done("already done"));
    }
    if stop.is_cancelled() {
        return Ok(StepRun::Interrupted);
    }
    step.act(cx).await?;
    let deadline = Instant::now() + step.timeout();
    loop {
        match step.verify(cx).await? {
            Readiness::Ready => return Ok(StepRun::Done("done")),
            Readiness::NotReady(reason) if Instant::now() >= deadline => {
                return Err(StepError::Permanent(format!("not ready after {}s: {reason}", step.timeout().as_secs())));
            }
            Readiness::NotReady(_) => {}
        }
        tokio::select! {
            _ = stop.cancelled() => return Ok(StepRun::Interrupted),
            _ = tokio::time::sleep(step.poll_interval()) => {}
        }
    }
}

/// Index of the first step to run given the last recorded operation.
pub fn resume_index(names: &[String], last: Option<&LastOperation>) -> usize {
    let Some(last) = last else { return 0 };
    match names.iter().position(|n| *n == last.name) {
        Some(i) if last.state == OperationState::Completed => i + 1,
        Some(i) => i,
        None => 0,
    }
}

impl Reconciler {
    /// Executes an `InProgress` task. `fresh` carries the task and its Etcd when admission just wrote and read
    /// them, sparing two reads.
    pub(crate) async fn execute(&self, task: EtcdOperatorTask, fresh: Option<Etcd>) -> Result<Next, ReconcileError> {
        let ns = task.metadata.namespace.clone().unwrap_or_default();
        let name = task.metadata.name.clone().unwrap_or_default();
        if self.registry.kind(&task.spec.type_).is_err() && types::ALL.contains(&task.spec.type_.as_str()) {
            return Ok(Next::Done); // a runbook type, executed in-process by the runbook engine
        }
        // A cached copy lags this reconciler's own writes (the watch brings each of them back later): read a
        // fresh copy before taking the lease, so that a task that has moved on costs one read instead of a lease
        // taken and given back. (Once the lease is held, `run_steps` reads the task again: another executor may
        // have written in between.)
        let task = if fresh.is_none() {
            match self
                .api(&task)
                .get_opt(&name)
                .await
                .map_err(|e| ReconcileError::api(format!("reading task {name}"), e))?
            {
                Some(t) if t.state() == TaskState::InProgress && t.metadata.deletion_timestamp.is_none() => t,
                // Moved on, being deleted or gone: its watch event brings it back here.
                _ => return Ok(Next::Done),
            }
        } else {
            task
        };
        let lock = LeaseLock::new(
            self.client.clone(),
            &ns,
            &executor_lease_name(&name),
            &self.opts.identity,
            self.opts.executor_lease,
        )
        .owned_by(owner_reference(&task))
        // Admitted just now: its executor Lease does not exist yet.
        .probably_new(fresh.is_some())
        .taking_over({
            // A `--local` executor on this host that was killed renews its lease no more: taken over at once.
            let own = self.opts.identity.clone();
            move |holder| super::lease::holder_is_dead_here(holder, &own)
        });
        match lock
            .try_acquire()
            .await
            .map_err(|e| ReconcileError::api(format!("taking the executor lease of task {name}"), e))?
        {
            Acquire::HeldBy { expires_in, .. } => {
                return Ok(Next::RequeueAfter(expires_in.max(Duration::from_millis(200))));
            }
            Acquire::Acquired => {}
        }
        let stop_renewing = CancellationToken::new();
        let lost = lock.keep_renewed(stop_renewing.clone());
        // Stop at the next safe point when the lease is lost or the process shuts down.
        let stop = CancellationToken::new();
        let watcher = {
            let (stop, lost, shutdown) = (stop.clone(), lost.clone(), self.shutdown.clone());
            tokio::spawn(async move {
                tokio::select! {
                    _ = lost.cancelled() => stop.cancel(),
                    _ = shutdown.cancelled() => stop.cancel(),
                    _ = stop.cancelled() => {}
                }
            })
        };
        let mut handle = TaskHandle::new(self.api(&task), task);
        let result = self.run_steps(&mut handle, fresh, &stop).await;
        tracing::debug!(task = %name, ?result, "execution ended");
        stop.cancel();
        stop_renewing.cancel();
        let _ = watcher.await;
        lock.release().await;
        match result {
            Err(ReconcileError::Write(WriteError::Superseded { .. } | WriteError::Gone(_))) => Ok(Next::Done),
            other => other,
        }
    }

    async fn run_steps(
        &self,
        handle: &mut TaskHandle,
        fresh: Option<Etcd>,
        stop: &CancellationToken,
    ) -> Result<Next, ReconcileError> {
        // A copy from the cache may be stale (now that we hold the lease): only an InProgress task is executed.
        if fresh.is_none() {
            handle.refresh().await?;
        }
        let task = handle.current.clone();
        if task.state() != TaskState::InProgress || task.metadata.deletion_timestamp.is_some() {
            return Ok(Next::RequeueAfter(Duration::ZERO));
        }
        let plan = match self.registry.plan(&task.spec.type_, task.spec.config.as_deref()) {
            Ok(p) => p,
            Err(RegistryError::UnknownType { .. }) if types::ALL.contains(&task.spec.type_.as_str()) => {
                return Ok(Next::Done);
            }
            Err(e) => return self.fail(handle, "Admission", &e.to_string()).await,
        };
        let etcd_ref = &task.spec.owner_etcd_refrence;
        let etcds: kube::Api<Etcd> = kube::Api::namespaced(self.client.clone(), &etcd_ref.namespace);
        let etcd = match fresh {
            Some(e) => Some(e),
            None => etcds
                .get_opt(&etcd_ref.name)
                .await
                .map_err(|e| ReconcileError::api(format!("reading etcd {}", etcd_ref.name), e))?,
        };
        let Some(etcd) = etcd else {
            let reason = format!("etcd {:?} no longer exists in namespace {:?}", etcd_ref.name, etcd_ref.namespace);
            return self.fail(handle, "Admission", &reason).await;
        };
        let steps = plan.steps(&etcd);
        let names: Vec<String> = steps.iter().map(|s| s.name()).collect();
        let cx = StepContext::new(self.client.clone(), task.clone(), etcd);
        let start = resume_index(&names, task.status.as_ref().and_then(|s| s.last_operation.as_ref()));

        for (step, name) in steps.iter().zip(&names).skip(start) {
            let description = step.description();
            let already_running = handle
                .current
                .status
                .as_ref()
                .and_then(|s| s.last_operation.as_ref())
                .is_some_and(|o| o.name == *name && o.state == OperationState::InProgress);
            if !already_running {
                handle
                    .update_as_executor(|s| {
                        s.last_operation = Some(operation(name, OperationState::InProgress, description.clone()))
                    })
                    .await?;
            }
            let mut failures = 0u32;
            loop {
                if stop.is_cancelled() {
                    return Ok(Next::RequeueAfter(Duration::ZERO));
                }
                tracing::debug!(task = %task.metadata.name.as_deref().unwrap_or_default(), step = %name, failures, "running step");
                let run = run_step(step.as_ref(), &cx, stop).await;
                // The step's journal writes changed the task: continue from the copy the last one returned (the
                // status in it is this executor's), instead of a status write that conflicts and a re-read.
                if let Some(t) = cx.take_written() {
                    handle.current = t;
                }
                tracing::debug!(task = %task.metadata.name.as_deref().unwrap_or_default(), step = %name, ?run, "step ran");
                match run {
                    Ok(StepRun::Done(how)) => {
                        if Some(name) != names.last() {
                            handle
                                .update_as_executor(|s| {
                                    s.last_operation = Some(operation(name, OperationState::Completed, how))
                                })
                                .await?;
                        }
                        break;
                    }
                    Ok(StepRun::Interrupted) => return Ok(Next::RequeueAfter(Duration::ZERO)),
                    Err(e) if e.is_transient() && self.opts.backoff.allows(failures + 1) => {
                        failures += 1;
                        let delay = self.opts.backoff.delay(failures);
                        let at = jiff::Timestamp::now() + jiff::SignedDuration::try_from(delay).unwrap_or_default();
                        let reason = format!(
                            "attempt {failures} failed: {e}; next retry at {} (in {}ms)",
                            at.round(jiff::Unit::Second).unwrap_or(at),
                            delay.as_millis()
                        );
                        let code = "TransientError";
                        let err = format!("{name}: {e}");
                        handle
                            .update_as_executor(|s| {
                                s.last_operation = Some(operation(name, OperationState::InProgress, reason.clone()));
                                push_error(s, code, err.clone());
                            })
                            .await?;
                        tracing::debug!(task = %task.metadata.name.as_deref().unwrap_or_default(), step = %name, ?delay, "retrying");
                        tokio::select! {
                            _ = stop.cancelled() => return Ok(Next::RequeueAfter(Duration::ZERO)),
                            _ = tokio::time::sleep(delay) => {}
                        }
                    }
                    Err(e) => {
                        let reason = if e.is_transient() {
                            format!("gave up after {} attempts: {e}", failures + 1)
                        } else {
                            e.to_string()
                        };
                        return self.fail(handle, name, &reason).await;
                    }
                }
            }
        }

        let last = names.last().cloned().unwrap_or_else(|| "Execution".into());
        let summary = format!("all {} step(s) completed", names.len());
        handle
            .update_as_executor(|s| {
                s.state = Some(TaskState::Succeeded);
                s.last_operation = Some(operation(&last, OperationState::Completed, summary.clone()));
            })
            .await?;
        self.metrics.task_finished(&handle.current, TaskState::Succeeded);
        self.events.record(&handle.current, EventType::Normal, "Succeeded", &summary).await;
        self.expire(&handle.current).await
    }

    async fn fail(&self, handle: &mut TaskHandle, step: &str, reason: &str) -> Result<Next, ReconcileError> {
        let err = format!("{step}: {reason}");
        handle
            .update_as_executor(|s| {
                s.state = Some(TaskState::Failed);
                s.last_operation = Some(operation(step, OperationState::Failed, reason));
                push_error(s, "StepFailed", err.clone());
            })
            .await?;
        self.metrics.task_finished(&handle.current, TaskState::Failed);
        self.events.record(&handle.current, EventType::Warning, "Failed", &err).await;
        self.expire(&handle.current).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resumes_after_the_last_completed_step_or_at_the_interrupted_one() {
        let names: Vec<String> = ["A", "B", "C"].iter().map(|s| s.to_string()).collect();
        let op = |n: &str, s| crate::reconciler::status::operation(n, s, "");
        assert_eq!(resume_index(&names, None), 0);
        assert_eq!(resume_index(&names, Some(&op("Admission", OperationState::Completed))), 0);
        assert_eq!(resume_index(&names, Some(&op("A", OperationState::Completed))), 1);
        assert_eq!(resume_index(&names, Some(&op("B", OperationState::InProgress))), 1);
        assert_eq!(resume_index(&names, Some(&op("C", OperationState::Completed))), 3);
    }
}
