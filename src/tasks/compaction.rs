//! `OnDemandSnapshotCompactionTask` (DEP-05): runs etcd-druid's snapshot compaction Job `E-compactor` now and
//! follows it to completion. The Job works on the backup bucket only, so etcd health is not a precondition.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::config::{ConfigError, expect_none};
use super::preconditions::{Facts, require_backups};
use super::step::{CREATED_BY_LABEL, Readiness, Step, StepContext, StepError, StepFuture};
use super::{TaskKind, TaskPlan};
use crate::api::Etcd;
use crate::api::task::types;

/// Image of the compaction Job (etcd-backup-restore's `etcdbrctl compact`).
pub const COMPACTOR_IMAGE: &str = "europe-docker.pkg.dev/gardener-project/releases/gardener/etcdbrctl:v0.31.0";

/// The task type.
pub struct OnDemandSnapshotCompaction;

/// The parsed (empty) config.
pub struct CompactionPlan;

impl TaskKind for OnDemandSnapshotCompaction {
    fn type_name(&self) -> &'static str {
        types::ON_DEMAND_SNAPSHOT_COMPACTION
    }
    fn summary(&self) -> &'static str {
        "compact the backups into one full snapshot with the compaction Job E-compactor (no config)"
    }
    fn parse(&self, config: Option<&str>) -> Result<Arc<dyn TaskPlan>, ConfigError> {
        expect_none(config)?;
        Ok(Arc::new(CompactionPlan))
    }
}

impl TaskPlan for CompactionPlan {
    fn duplicate_key(&self) -> String {
        types::ON_DEMAND_SNAPSHOT_COMPACTION.into()
    }
    fn preconditions(&self, facts: &Facts) -> Result<(), String> {
        require_backups(facts)
    }
    fn steps(&self, etcd: &Etcd) -> Vec<Box<dyn Step>> {
        let job = etcd.managed_names().compaction_job();
        vec![Box::new(CreateJob { job: job.clone() }), Box::new(WaitForJob { job })]
    }
    fn config_json(&self) -> Value {
        json!({})
    }
}

/// The Job manifest for `etcd`, owned by the task.
pub fn job_manifest(cx: &StepContext, name: &str) -> Value {
    let store = cx.etcd.spec.backup.store.clone().unwrap_or_default();
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": cx.owned_metadata(name),
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {CREATED_BY_LABEL: cx.task_name(), "app.kubernetes.io/part-of": cx.etcd_name()}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "compact-backup",
                        "image": COMPACTOR_IMAGE,
                        "args": [
                            "compact",
                            "--data-dir=/var/etcd/data/compaction.etcd",
                            "--snapstore-temp-directory=/var/etcd/data/compaction.temp",
                            format!("--storage-provider={}", store.provider.unwrap_or_default()),
                            format!("--store-container={}", store.container.unwrap_or_default()),
                            format!("--store-prefix={}", store.prefix),
                        ],
                    }],
                },
            },
        },
    })
}

fn created_by_task(job: &Job, task: &str) -> bool {
    job.metadata.labels.as_ref().and_then(|l| l.get(CREATED_BY_LABEL)).is_some_and(|v| v == task)
}

struct CreateJob {
    job: String,
}

impl Step for CreateJob {
    fn name(&self) -> String {
        "CreateCompactionJob".into()
    }
    fn description(&self) -> String {
        format!("create the snapshot compaction Job {}", self.job)
    }
    fn kubectl(&self) -> Vec<String> {
        vec![format!("kubectl create -f {}.yaml   # batch/v1 Job running `etcdbrctl compact`", self.job)]
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move {
            let api: Api<Job> = Api::namespaced(cx.client.clone(), cx.namespace());
            let job =
                api.get_opt(&self.job).await.map_err(|e| StepError::from_kube("reading the compaction job", e))?;
            match job {
                Some(j) if created_by_task(&j, cx.task_name()) => Ok(true),
                Some(_) => Err(StepError::Transient(format!(
                    "compaction job {} of another run exists; waiting until etcd-druid removes it",
                    self.job
                ))),
                None => Ok(false),
            }
        }
        .boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let api: Api<Job> = Api::namespaced(cx.client.clone(), cx.namespace());
            let job: Job =
                serde_json::from_value(job_manifest(cx, &self.job)).map_err(|e| StepError::Permanent(e.to_string()))?;
            match api.create(&PostParams::default(), &job).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()), // `check` decides whose it is on retry
                Err(e) => Err(StepError::from_kube("creating the compaction job", e)),
            }
        }
        .boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            Ok(if self.check(cx).await? {
                Readiness::Ready
            } else {
                Readiness::NotReady(format!("job {} not created yet", self.job))
            })
        }
        .boxed()
    }
}

struct WaitForJob {
    job: String,
}

/// Whether a Job finished: `Some(Ok)` succeeded, `Some(Err(reason))` failed, `None` still running.
pub fn job_outcome(job: &Job) -> Option<Result<(), String>> {
    let status = job.status.as_ref()?;
    for c in status.conditions.iter().flatten() {
        if c.status == "True" && (c.type_ == "Complete" || c.type_ == "SuccessCriteriaMet") {
            return Some(Ok(()));
        }
        if c.status == "True" && (c.type_ == "Failed" || c.type_ == "FailureTarget") {
            return Some(Err(c.message.clone().or(c.reason.clone()).unwrap_or_else(|| "job failed".into())));
        }
    }
    if status.succeeded.unwrap_or(0) > 0 {
        return Some(Ok(()));
    }
    None
}

impl Step for WaitForJob {
    fn name(&self) -> String {
        "WaitForCompactionJob".into()
    }
    fn description(&self) -> String {
        format!("wait until the compaction Job {} has completed", self.job)
    }
    fn kubectl(&self) -> Vec<String> {
        vec![format!("kubectl wait --for=condition=Complete job/{} --timeout=30m", self.job)]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(1800)
    }
    fn poll_interval(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(self.verify(cx).await? == Readiness::Ready) }.boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            let api: Api<Job> = Api::namespaced(cx.client.clone(), cx.namespace());
            let job =
                api.get_opt(&self.job).await.map_err(|e| StepError::from_kube("reading the compaction job", e))?;
            let Some(job) = job else {
                return Err(StepError::Permanent(format!("compaction job {} disappeared", self.job)));
            };
            match job_outcome(&job) {
                Some(Ok(())) => Ok(Readiness::Ready),
                Some(Err(reason)) => Err(StepError::Permanent(format!("compaction job {} failed: {reason}", self.job))),
                None => {
                    let active = job.status.and_then(|s| s.active).unwrap_or(0);
                    Ok(Readiness::NotReady(format!("job {} is running ({active} active pod(s))", self.job)))
                }
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_no_config() {
        assert!(OnDemandSnapshotCompaction.parse(None).is_ok());
        assert!(OnDemandSnapshotCompaction.parse(Some("")).is_ok());
        assert!(OnDemandSnapshotCompaction.parse(Some("x: 1")).is_err());
    }

    #[test]
    fn job_outcome_reads_conditions_and_counts() {
        let job = |status: Value| -> Job {
            serde_json::from_value(json!({"metadata": {"name": "j"}, "status": status})).unwrap()
        };
        assert_eq!(job_outcome(&job(json!({"active": 1}))), None);
        assert_eq!(job_outcome(&job(json!({"succeeded": 1}))), Some(Ok(())));
        assert_eq!(job_outcome(&job(json!({"conditions": [{"type": "Complete", "status": "True"}]}))), Some(Ok(())));
        assert_eq!(
            job_outcome(&job(
                json!({"conditions": [{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}]})
            )),
            Some(Err("BackoffLimitExceeded".into()))
        );
    }
}
