//! `OnDemandSnapshotCompactionTask` (DEP-05): runs etcd-druid's snapshot compaction Job `E-compactor` now and
//! follows it to completion. The Job works on the backup bucket only, so etcd health is not a precondition.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::config::{ConfigError, expect_none};
use super::preconditions::{Facts, require_backups};
use super::step::{CREATED_BY_LABEL, Readiness, Step, StepContext, StepError, StepFuture};
use super::{TaskKind, TaskPlan};
use crate::api::Etcd;
use crate::api::task::types;

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
        let job = job_name(etcd.metadata.name.as_deref().unwrap_or_default());
        vec![Box::new(CreateJob { job: job.clone() }), Box::new(WaitForJob { job })]
    }
    fn config_json(&self) -> Value {
        json!({})
    }
}

/// Name of the task's compaction Job: `<etcd>-compactor-ondemand`. etcd-druid's own Job is `<etcd>-compactor`
/// (druid@v0.37.1 `api/core/v1alpha1/helper.go` GetCompactionJobName), which always ends in `-compactor`;
/// this name never does, so no Etcd's druid Job can have it.
pub fn job_name(etcd: &str) -> String {
    format!("{etcd}-compactor-ondemand")
}

/// etcd-backup-restore's storage provider for an Etcd's `spec.backup.store.provider`, as etcd-druid maps it
/// (druid@v0.37.1 `internal/store/store.go` StorageProviderFromInfraProvider).
pub fn storage_provider(provider: &str) -> Result<&'static str, String> {
    Ok(match provider {
        "aws" | "S3" | "s3" | "stackit" => "S3",
        "azure" | "ABS" | "abs" => "ABS",
        "gcp" | "GCS" | "gcs" => "GCS",
        "openstack" | "Swift" | "swift" => "Swift",
        "alicloud" | "OSS" | "oss" => "OSS",
        "dell" | "ECS" | "ecs" => "ECS",
        "openshift" | "OCS" | "ocs" => "OCS",
        "Local" | "local" => "Local",
        other => return Err(format!("unsupported storage provider: '{other}'")),
    })
}

/// The etcd-backup-restore image: `spec.backup.image`, else the `backup-restore` container of the StatefulSet
/// etcd-druid rendered (so the Job runs the same version as the sidecar).
pub fn backup_restore_image(etcd: &Etcd, sts: Option<&StatefulSet>) -> Option<String> {
    etcd.spec.backup.image.clone().or_else(|| {
        sts?.spec
            .as_ref()?
            .template
            .spec
            .as_ref()?
            .containers
            .iter()
            .find(|c| c.name == "backup-restore")?
            .image
            .clone()
    })
}

const WORKSPACE: &str = "/var/etcd/data";
const SECRET_VOLUME: &str = "etcd-backup-secret";
/// Default `spec.etcd.quota` (8Gi), druid@v0.37.1 `internal/component/statefulset/builder.go`.
const DEFAULT_QUOTA_BYTES: u64 = 8 * 1024 * 1024 * 1024;

/// The compaction Job for `etcd`, built as etcd-druid's compaction controller builds `<etcd>-compactor`
/// (druid@v0.37.1 `internal/controller/compaction/reconciler.go` createCompactionJob, getCompactionJobArgs,
/// getCompactionJobEnvVar, getCompactionJobVolumeMounts/Volumes; `internal/utils/envvar.go`): same image as
/// the sidecar, the Etcd's service account, the snapshot-lease flags, the provider's secret mount and env.
/// `metadata` carries the name, namespace and owner (the task).
pub fn compaction_job(etcd: &Etcd, image: &str, mut metadata: Value) -> Result<Value, String> {
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let store = etcd.spec.backup.store.clone().ok_or("backups are not configured for this Etcd")?;
    let provider = storage_provider(store.provider.as_deref().unwrap_or_default())?;
    let names = etcd.managed_names();
    let labels = json!({
        "app.kubernetes.io/managed-by": "etcd-druid",
        "app.kubernetes.io/part-of": name,
        "app.kubernetes.io/name": metadata["name"],
        "app.kubernetes.io/component": "etcd-snapshot-compaction-job",
        "networking.gardener.cloud/to-dns": "allowed",
        "networking.gardener.cloud/to-private-networks": "allowed",
        "networking.gardener.cloud/to-public-networks": "allowed",
    });
    let mut all_labels = labels.clone();
    for (k, v) in metadata["labels"].as_object().cloned().unwrap_or_default() {
        all_labels[k] = v;
    }
    metadata["labels"] = all_labels.clone();
    let mut args = vec![
        "compact".to_string(),
        format!("--data-dir={WORKSPACE}/compaction.etcd"),
        format!("--restoration-temp-snapshots-dir={WORKSPACE}/compaction.restoration.temp"),
        format!("--snapstore-temp-directory={WORKSPACE}/tmp"),
        "--enable-snapshot-lease-renewal=true".into(),
        format!("--full-snapshot-lease-name={}", names.full_snapshot_lease()),
        format!("--delta-snapshot-lease-name={}", names.delta_snapshot_lease()),
        format!("--embedded-etcd-quota-bytes={DEFAULT_QUOTA_BYTES}"),
        format!("--storage-provider={provider}"),
    ];
    if !store.prefix.is_empty() {
        args.push(format!("--store-prefix={}", store.prefix));
    }
    if let Some(c) = &store.container {
        args.push(format!("--store-container={c}"));
    }
    if let Some(e) = &store.endpoint_override {
        args.push(format!("--store-endpoint-override={e}"));
    }
    let field = |path: &str| json!({"valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}});
    let mut env = vec![
        json!({"name": "POD_NAME"}).merged(field("metadata.name")),
        json!({"name": "POD_NAMESPACE"}).merged(field("metadata.namespace")),
        json!({"name": "STORAGE_CONTAINER", "value": store.container.clone().unwrap_or_default()}),
    ];
    let secret = store.secret_ref.as_ref().map(|r| r.name.clone()).filter(|n| !n.is_empty());
    let mut mounts = vec![json!({"name": "etcd-workspace-dir", "mountPath": WORKSPACE})];
    let mut volumes = vec![json!({"name": "etcd-workspace-dir", "emptyDir": {}})];
    let credentials_dir = match provider {
        "GCS" => Some("/var/.gcp/"),
        "S3" | "ABS" | "OSS" | "Swift" | "OCS" => Some("/var/etcd-backup"),
        _ => None,
    };
    match provider {
        "S3" => env.push(json!({"name": "AWS_APPLICATION_CREDENTIALS", "value": "/var/etcd-backup"})),
        "ABS" => env.push(json!({"name": "AZURE_APPLICATION_CREDENTIALS", "value": "/var/etcd-backup"})),
        "GCS" => env.push(json!({"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": "/var/.gcp/serviceaccount.json"})),
        "Swift" => env.push(json!({"name": "OPENSTACK_APPLICATION_CREDENTIALS", "value": "/var/etcd-backup"})),
        "OSS" => env.push(json!({"name": "ALICLOUD_APPLICATION_CREDENTIALS", "value": "/var/etcd-backup"})),
        "OCS" => env.push(json!({"name": "OPENSHIFT_APPLICATION_CREDENTIALS", "value": "/var/etcd-backup"})),
        "ECS" => {
            let secret = secret.clone().ok_or("the ECS store needs spec.backup.store.secretRef")?;
            for (var, key) in [
                ("ECS_ENDPOINT", "endpoint"),
                ("ECS_ACCESS_KEY_ID", "accessKeyID"),
                ("ECS_SECRET_ACCESS_KEY", "secretAccessKey"),
            ] {
                env.push(json!({"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}));
            }
        }
        _ => {}
    }
    if let Some(dir) = credentials_dir {
        let secret = secret.clone().ok_or_else(|| format!("the {provider} store needs spec.backup.store.secretRef"))?;
        mounts.push(json!({"name": SECRET_VOLUME, "mountPath": dir}));
        volumes.push(json!({"name": SECRET_VOLUME, "secret": {"secretName": secret}}));
    }
    if provider == "Local" {
        // The Local provider reads the bucket from a host path (druid: secret key `hostPath`, default
        // /etc/gardener/local-backupbuckets, plus the container).
        let container = store.container.clone().unwrap_or_default();
        mounts.push(json!({"name": "host-storage", "mountPath": format!("/home/nonroot/{container}")}));
        volumes.push(json!({"name": "host-storage", "hostPath": {
            "path": format!("/etc/gardener/local-backupbuckets/{container}"), "type": "DirectoryOrCreate"}}));
    }
    let deadline = 3 * 3600;
    Ok(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": metadata,
        "spec": {
            "activeDeadlineSeconds": deadline,
            "completions": 1,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": all_labels},
                "spec": {
                    "activeDeadlineSeconds": deadline,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 60,
                    "serviceAccountName": name,
                    "containers": [{
                        "name": "compact-backup",
                        "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "args": args,
                        "env": env,
                        "volumeMounts": mounts,
                        "securityContext": {"allowPrivilegeEscalation": false},
                        "resources": {"requests": {"cpu": "600m", "memory": "3Gi"}},
                    }],
                    "volumes": volumes,
                },
            },
        },
    }))
}

trait Merged {
    fn merged(self, other: Value) -> Value;
}

impl Merged for Value {
    fn merged(mut self, other: Value) -> Value {
        for (k, v) in other.as_object().cloned().unwrap_or_default() {
            self[k] = v;
        }
        self
    }
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
            let sts = Api::<StatefulSet>::namespaced(cx.client.clone(), cx.namespace())
                .get_opt(&cx.etcd.managed_names().statefulset())
                .await
                .map_err(|e| StepError::from_kube("reading the etcd StatefulSet", e))?;
            let image = backup_restore_image(&cx.etcd, sts.as_ref()).ok_or_else(|| {
                StepError::Permanent(
                    "cannot tell the etcd-backup-restore image: spec.backup.image is unset and the StatefulSet has no backup-restore container".into(),
                )
            })?;
            let manifest =
                compaction_job(&cx.etcd, &image, cx.owned_metadata(&self.job)).map_err(StepError::Permanent)?;
            let job: Job = serde_json::from_value(manifest).map_err(|e| StepError::Permanent(e.to_string()))?;
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
