//! etcd-druid's own task API, `EtcdOpsTask` (`druid.gardener.cloud/v1alpha1`, since etcd-druid v0.34.0;
//! druid@v0.37.1 `api/core/v1alpha1/etcdopstask.go`, `ondemandsnapshot.go`, `api/common/*.go`). The CRD is
//! upstream's, vendored in `crds/druid.gardener.cloud_etcdopstasks.yaml`; this type reads and writes it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::core::{ApiResource, GroupVersionKind};
use serde::{Deserialize, Serialize};

/// Group.
pub const GROUP: &str = "druid.gardener.cloud";
/// Version.
pub const VERSION: &str = "v1alpha1";
/// Kind.
pub const KIND: &str = "EtcdOpsTask";
/// Plural.
pub const PLURAL: &str = "etcdopstasks";
/// Name of the CRD; its presence says the cluster's etcd-druid runs EtcdOpsTasks.
pub const CRD_NAME: &str = "etcdopstasks.druid.gardener.cloud";
/// Finalizer etcd-druid puts on every task (druid@v0.37.1 `api/common/constants.go`).
pub const FINALIZER: &str = "druid.gardener.cloud/etcd-ops-task";
/// `spec.ttlSecondsAfterFinished` default (CRD default).
pub const DEFAULT_TTL_SECONDS: i32 = 3600;

/// `status.state` values (druid@v0.37.1 `api/core/v1alpha1/etcdopstask.go`).
pub mod states {
    /// Accepted, not yet admitted.
    pub const PENDING: &str = "Pending";
    /// Admitted, executing.
    pub const IN_PROGRESS: &str = "InProgress";
    /// Done.
    pub const SUCCEEDED: &str = "Succeeded";
    /// Execution failed.
    pub const FAILED: &str = "Failed";
    /// Not admitted.
    pub const REJECTED: &str = "Rejected";
}

/// `status.lastOperation.type` values.
pub mod operations {
    /// Admission checks.
    pub const ADMIT: &str = "Admit";
    /// The operation itself.
    pub const EXECUTION: &str = "Execution";
    /// TTL cleanup.
    pub const CLEANUP: &str = "Cleanup";
}

/// `status.lastOperation.state` values.
pub mod operation_states {
    /// Running.
    pub const IN_PROGRESS: &str = "InProgress";
    /// Finished well.
    pub const COMPLETED: &str = "Completed";
    /// Finished badly.
    pub const FAILED: &str = "Failed";
}

/// `status.lastErrors[].code` values etcd-druid writes (druid@v0.37.1
/// `internal/controller/etcdopstask/handler/types.go`, `handler/ondemandsnapshot/ondemandsnapshot.go`,
/// `internal/component/statefulset/statefulset.go`).
pub mod codes {
    /// Listing tasks (duplicate check) was forbidden.
    pub const INSUFFICIENT_PERMISSIONS: &str = "ERR_INSUFFICIENT_PERMISSIONS";
    /// The Etcd could not be read or does not exist.
    pub const GET_ETCD: &str = "ERR_GET_ETCD";
    /// Another unfinished task for the same Etcd exists.
    pub const DUPLICATE_TASK: &str = "ERR_DUPLICATE_TASK";
    /// The Etcd has no backup store.
    pub const BACKUP_NOT_ENABLED: &str = "ERR_BACKUP_NOT_ENABLED";
    /// The Etcd's `Ready` condition is not `True`.
    pub const ETCD_NOT_READY: &str = "ERR_ETCD_NOT_READY";
    /// The backup sidecar could not be called (retried).
    pub const EXECUTE_HTTP_REQUEST: &str = "ERR_EXECUTE_HTTP_REQUEST";
    /// The backup sidecar answered with an error.
    pub const CREATE_SNAPSHOT: &str = "ERR_CREATE_SNAPSHOT";
    /// The StatefulSet (backup TLS CA lookup) could not be read.
    pub const GET_STATEFULSET: &str = "ERR_GET_STATEFULSET";
    /// The backup CA secret could not be read.
    pub const GET_CA_SECRET: &str = "ERR_GET_CA_SECRET";
}

/// `EtcdOpsTask`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct EtcdOpsTask {
    /// `druid.gardener.cloud/v1alpha1`.
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    /// `EtcdOpsTask`.
    #[serde(default)]
    pub kind: String,
    /// Metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Spec.
    #[serde(default)]
    pub spec: EtcdOpsTaskSpec,
    /// Status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<EtcdOpsTaskStatus>,
}

/// `spec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EtcdOpsTaskSpec {
    /// The Etcd, in the task's namespace (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_name: Option<String>,
    /// Seconds a finished task is kept (default 3600, minimum 1, immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Exactly one operation (immutable).
    #[serde(default)]
    pub config: EtcdOpsTaskConfig,
}

/// `spec.config`: one member only (`onDemandSnapshot` in v0.37.1).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EtcdOpsTaskConfig {
    /// An on-demand snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_demand_snapshot: Option<OnDemandSnapshotConfig>,
}

/// `spec.config.onDemandSnapshot`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OnDemandSnapshotConfig {
    /// `full` or `delta`.
    #[serde(rename = "type")]
    pub type_: String,
    /// A final full snapshot (`?final=true`); must be false or absent for `delta`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_final: Option<bool>,
    /// Timeout of a delta snapshot (default 60, minimum 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds_delta: Option<i32>,
    /// Timeout of a full snapshot (default 900, minimum 120).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds_full: Option<i32>,
}

/// `status`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EtcdOpsTaskStatus {
    /// Pending, InProgress, Succeeded, Failed or Rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// When `state` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// When the task first went InProgress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// The last errors (etcd-druid keeps three).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_errors: Option<Vec<OpsLastError>>,
    /// The last operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<OpsLastOperation>,
}

/// `status.lastErrors[]` (druidapicommon.LastError).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OpsLastError {
    /// Error code, e.g. `ERR_DUPLICATE_TASK`.
    pub code: String,
    /// `[Operation: <op>, Code: <code>] message: <msg>`.
    pub description: String,
    /// When it was seen.
    pub observed_at: Time,
}

/// `status.lastOperation`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OpsLastOperation {
    /// Admit, Execution or Cleanup.
    #[serde(rename = "type")]
    pub type_: String,
    /// InProgress, Completed or Failed.
    pub state: String,
    /// What happened.
    #[serde(default)]
    pub description: String,
    /// ID of the controller run.
    #[serde(default)]
    pub run_id: String,
    /// When it was updated.
    pub last_update_time: Time,
}

impl kube::Resource for EtcdOpsTask {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        KIND.into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl EtcdOpsTask {
    /// A new on-demand snapshot task for `etcd` (`full` or `delta`).
    pub fn on_demand_snapshot(name: &str, namespace: &str, etcd: &str, type_: &str) -> EtcdOpsTask {
        EtcdOpsTask {
            api_version: format!("{GROUP}/{VERSION}"),
            kind: KIND.into(),
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some(namespace.into()), ..Default::default() },
            spec: EtcdOpsTaskSpec {
                etcd_name: Some(etcd.into()),
                ttl_seconds_after_finished: None,
                config: EtcdOpsTaskConfig {
                    on_demand_snapshot: Some(OnDemandSnapshotConfig { type_: type_.into(), ..Default::default() }),
                },
            },
            status: None,
        }
    }

    /// `status.state`, empty before etcd-druid saw the task.
    pub fn state(&self) -> &str {
        self.status.as_ref().and_then(|s| s.state.as_deref()).unwrap_or_default()
    }

    /// Whether the task reached a state it never leaves.
    pub fn is_finished(&self) -> bool {
        matches!(self.state(), states::SUCCEEDED | states::FAILED | states::REJECTED)
    }

    /// The operation's name as `druidctl task list` shows it (`OnDemandSnapshot/full`).
    pub fn operation(&self) -> String {
        match &self.spec.config.on_demand_snapshot {
            Some(s) => format!("OnDemandSnapshot/{}", s.type_),
            None => "unknown".into(),
        }
    }

    /// The ApiResource for dynamic clients.
    pub fn api_resource() -> ApiResource {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_task_serializes_as_the_upstream_crd_expects() {
        let t = EtcdOpsTask::on_demand_snapshot("s", "ns", "etcd-main", "full");
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["apiVersion"], "druid.gardener.cloud/v1alpha1");
        assert_eq!(v["spec"]["etcdName"], "etcd-main");
        assert_eq!(v["spec"]["config"]["onDemandSnapshot"]["type"], "full");
        assert!(v["spec"]["config"]["onDemandSnapshot"].get("isFinal").is_none());
        assert_eq!(t.operation(), "OnDemandSnapshot/full");
        assert!(!t.is_finished());
    }
}
