//! `CopyBackupsTask` (DEP-05): copies backups between object stores through etcd-druid's
//! `EtcdCopyBackupsTask` resource and follows it to its `Succeeded` or `Failed` condition.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Map, Value, json};

use super::config::{ConfigError, Fields, parse_yaml};
use super::preconditions::Facts;
use super::step::{Readiness, Step, StepContext, StepError, StepFuture};
use super::{TaskKind, TaskPlan};
use crate::api::Etcd;
use crate::api::task::types;

const STORE_FIELDS: &[&str] = &["provider", "container", "prefix", "secretRef", "endpointOverride"];

/// The parsed config.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyBackupsConfig {
    /// Source object store (etcd-druid `StoreSpec`).
    pub source_store: Value,
    /// Target object store.
    pub target_store: Value,
    /// Only backups younger than this many days.
    pub max_backup_age: Option<u32>,
    /// At most this many backups, newest first.
    pub max_backups: Option<u32>,
}

fn store(root: &Fields<'_>, key: &str) -> Result<Value, ConfigError> {
    root.required(key)?;
    let f = root.nested(key, STORE_FIELDS)?.expect("required above");
    let mut out = Map::new();
    for k in ["provider", "container", "endpointOverride"] {
        if let Some(s) = f.string(k)? {
            out.insert(k.into(), Value::String(s));
        }
    }
    let prefix = f.string("prefix")?.ok_or_else(|| ConfigError::Missing { path: format!("config.{key}.prefix") })?;
    out.insert("prefix".into(), Value::String(prefix));
    if let Some(s) = f.nested("secretRef", &["name", "namespace"])? {
        let mut r = Map::new();
        for k in ["name", "namespace"] {
            if let Some(v) = s.string(k)? {
                r.insert(k.into(), Value::String(v));
            }
        }
        out.insert("secretRef".into(), Value::Object(r));
    }
    Ok(Value::Object(out))
}

/// Parses the config.
pub fn parse_config(config: Option<&str>) -> Result<CopyBackupsConfig, ConfigError> {
    let v = parse_yaml(config)?;
    let root = Fields::new(&v, "config", &["sourceStore", "targetStore", "maxBackupAge", "maxBackups"])?;
    Ok(CopyBackupsConfig {
        source_store: store(&root, "sourceStore")?,
        target_store: store(&root, "targetStore")?,
        max_backup_age: root.u32("maxBackupAge")?,
        max_backups: root.u32("maxBackups")?,
    })
}

/// The task type.
pub struct CopyBackups;

impl TaskKind for CopyBackups {
    fn type_name(&self) -> &'static str {
        types::COPY_BACKUPS
    }
    fn summary(&self) -> &'static str {
        "copy backups between object stores (config: sourceStore, targetStore, maxBackupAge, maxBackups)"
    }
    fn parse(&self, config: Option<&str>) -> Result<Arc<dyn TaskPlan>, ConfigError> {
        Ok(Arc::new(parse_config(config)?))
    }
}

impl TaskPlan for CopyBackupsConfig {
    fn duplicate_key(&self) -> String {
        // DEP-05: no copy-backups task running (whatever its stores).
        types::COPY_BACKUPS.into()
    }
    fn needs_health(&self) -> bool {
        false // it works on the buckets only (DEP-05 note)
    }
    fn preconditions(&self, _facts: &Facts) -> Result<(), String> {
        Ok(())
    }
    fn steps(&self, _etcd: &Etcd) -> Vec<Box<dyn Step>> {
        vec![Box::new(CreateCopyTask { config: self.clone() }), Box::new(WaitForCopy)]
    }
    fn config_json(&self) -> Value {
        let mut v = json!({"sourceStore": self.source_store, "targetStore": self.target_store});
        if let Some(a) = self.max_backup_age {
            v["maxBackupAge"] = json!(a);
        }
        if let Some(n) = self.max_backups {
            v["maxBackups"] = json!(n);
        }
        v
    }
}

/// The `EtcdCopyBackupsTask` API.
pub fn copy_task_api(cx: &StepContext) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "EtcdCopyBackupsTask"),
        "etcdcopybackupstasks",
    );
    Api::namespaced_with(cx.client.clone(), cx.namespace(), &ar)
}

/// Name of the `EtcdCopyBackupsTask` a task creates.
pub fn copy_task_name(task: &str) -> String {
    let base: String = task.chars().take(240).collect();
    format!("{base}-copy")
}

struct CreateCopyTask {
    config: CopyBackupsConfig,
}

impl Step for CreateCopyTask {
    fn name(&self) -> String {
        "CreateEtcdCopyBackupsTask".into()
    }
    fn description(&self) -> String {
        "create an EtcdCopyBackupsTask for etcd-druid with the source and target stores".into()
    }
    fn kubectl(&self) -> Vec<String> {
        vec!["kubectl create -f etcdcopybackupstask.yaml".into()]
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move {
            let found = copy_task_api(cx).get_opt(&copy_task_name(cx.task_name())).await;
            Ok(found.map_err(|e| StepError::from_kube("reading the EtcdCopyBackupsTask", e))?.is_some())
        }
        .boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let mut spec = json!({"sourceStore": self.config.source_store, "targetStore": self.config.target_store});
            if let Some(a) = self.config.max_backup_age {
                spec["maxBackupAge"] = json!(a);
            }
            if let Some(n) = self.config.max_backups {
                spec["maxBackups"] = json!(n);
            }
            let obj = json!({
                "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "EtcdCopyBackupsTask",
                "metadata": cx.owned_metadata(&copy_task_name(cx.task_name())),
                "spec": spec,
            });
            let obj: DynamicObject = serde_json::from_value(obj).map_err(|e| StepError::Permanent(e.to_string()))?;
            match copy_task_api(cx).create(&PostParams::default(), &obj).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(StepError::from_kube("creating the EtcdCopyBackupsTask", e)),
            }
        }
        .boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            Ok(if self.check(cx).await? { Readiness::Ready } else { Readiness::NotReady("not created yet".into()) })
        }
        .boxed()
    }
}

/// `Some(Ok)` when the copy succeeded, `Some(Err(reason))` when it failed, `None` while running.
pub fn copy_outcome(status: &Value) -> Option<Result<(), String>> {
    let conds = status.get("conditions")?.as_array()?;
    let find = |t: &str| conds.iter().find(|c| c["type"] == t && c["status"] == "True");
    if find("Succeeded").is_some() {
        return Some(Ok(()));
    }
    find("Failed").map(|c| Err(c["message"].as_str().or(c["reason"].as_str()).unwrap_or("copy failed").to_string()))
}

struct WaitForCopy;

impl Step for WaitForCopy {
    fn name(&self) -> String {
        "WaitForEtcdCopyBackupsTask".into()
    }
    fn description(&self) -> String {
        "wait until etcd-druid reports the copy Succeeded (or Failed)".into()
    }
    fn kubectl(&self) -> Vec<String> {
        vec!["kubectl wait --for=condition=Succeeded etcdcopybackupstask/NAME --timeout=1h".into()]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(3600)
    }
    fn poll_interval(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(self.verify(cx).await? == Readiness::Ready) }.boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            let name = copy_task_name(cx.task_name());
            let obj = copy_task_api(cx)
                .get_opt(&name)
                .await
                .map_err(|e| StepError::from_kube("reading the EtcdCopyBackupsTask", e))?;
            let Some(obj) = obj else {
                return Err(StepError::Permanent(format!("EtcdCopyBackupsTask {name} disappeared")));
            };
            match copy_outcome(obj.data.get("status").unwrap_or(&Value::Null)) {
                Some(Ok(())) => Ok(Readiness::Ready),
                Some(Err(reason)) => Err(StepError::Permanent(format!("EtcdCopyBackupsTask {name} failed: {reason}"))),
                None => Ok(Readiness::NotReady(format!("EtcdCopyBackupsTask {name} is still copying"))),
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_requires_both_stores_with_a_prefix() {
        let ok = parse_config(Some(
            "sourceStore: {provider: Local, container: a, prefix: p}\ntargetStore: {provider: S3, container: b, prefix: q, secretRef: {name: s}}\nmaxBackups: 3\n",
        ))
        .unwrap();
        assert_eq!(ok.max_backups, Some(3));
        assert_eq!(ok.target_store["secretRef"]["name"], "s");
        assert_eq!(
            parse_config(Some("sourceStore: {prefix: p}")).unwrap_err().to_string(),
            "config.targetStore: required field is missing"
        );
        assert_eq!(
            parse_config(Some("sourceStore: {container: a}\ntargetStore: {prefix: q}")).unwrap_err().to_string(),
            "config.sourceStore.prefix: required field is missing"
        );
        assert!(
            parse_config(Some("sourceStore: {prefix: p, bucket: x}\ntargetStore: {prefix: q}"))
                .unwrap_err()
                .to_string()
                .contains("config.sourceStore.bucket")
        );
        assert!(
            parse_config(Some("sourceStore: {prefix: p}\ntargetStore: {prefix: q}\nmaxBackups: -1"))
                .unwrap_err()
                .to_string()
                .contains("config.maxBackups")
        );
    }

    #[test]
    fn outcome_from_conditions() {
        assert_eq!(copy_outcome(&json!({})), None);
        assert_eq!(copy_outcome(&json!({"conditions": [{"type": "Succeeded", "status": "True"}]})), Some(Ok(())));
        assert_eq!(
            copy_outcome(&json!({"conditions": [{"type": "Failed", "status": "True", "message": "no bucket"}]})),
            Some(Err("no bucket".into()))
        );
    }
}
