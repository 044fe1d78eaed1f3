//! `EtcdOperatorTask` (`druid.gardener.cloud/v1alpha1`), exactly as DEP-05 defines it (seeds/004 lines
//! 7527-7879), and its CustomResourceDefinition generated from this Rust type.
//!
//! DEP-05 spells the owner field `ownerEtcdRefrence`. druidctl writes that spelling and also reads the correct
//! `ownerEtcdReference`; the generated schema lists both properties and a CEL rule demands exactly one.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// DEP-05's spelling of the owner reference field (sic).
pub const OWNER_FIELD_DEP05: &str = "ownerEtcdRefrence";
/// The correct spelling, accepted as well.
pub const OWNER_FIELD_CORRECT: &str = "ownerEtcdReference";
/// Short name of the CRD; upstream's `EtcdOpsTask` already uses `eot`.
pub const SHORT_NAME: &str = "etask";
/// TTL applied when `spec.ttlSecondsAfterFinished` is unset (DEP-05 leaves the default to the implementation).
pub const DEFAULT_TTL_SECONDS: i32 = 3600;

/// Task types of DEP-05, plus the ones druidctl adds for its runbooks.
pub mod types {
    /// On-demand full or delta snapshot (config `type: full|delta`).
    pub const ON_DEMAND_SNAPSHOT: &str = "OnDemandSnapshotTask";
    /// On-demand snapshot compaction (no config).
    pub const ON_DEMAND_SNAPSHOT_COMPACTION: &str = "OnDemandSnapshotCompactionTask";
    /// On-demand etcd compaction and/or defragmentation.
    pub const ON_DEMAND_MAINTENANCE: &str = "OnDemandMaintenanceTask";
    /// Copy backups between object stores.
    pub const COPY_BACKUPS: &str = "CopyBackupsTask";
    /// Recovery from permanent quorum loss (no config).
    pub const QUORUM_LOSS_RECOVERY: &str = "QuorumLossRecoveryTask";
    /// (druidctl) Restore one failed member of a quorate cluster.
    pub const SINGLE_MEMBER_RESTORE: &str = "SingleMemberRestoreTask";
    /// (druidctl) Renew the Etcd's certificates and roll the members.
    pub const CERTIFICATE_RENEWAL: &str = "CertificateRenewalTask";
    /// (druidctl) Force-delete a machine without costing any Etcd its quorum.
    pub const MACHINE_FORCE_DELETION: &str = "MachineForceDeletionTask";
    /// (druidctl) Free the backend of a full (`NOSPACE`) or nearly full etcd: compact, defragment, disarm.
    pub const SPACE_RECOVERY: &str = "SpaceRecoveryTask";
    /// Every task type druidctl knows.
    pub const ALL: &[&str] = &[
        ON_DEMAND_SNAPSHOT,
        ON_DEMAND_SNAPSHOT_COMPACTION,
        ON_DEMAND_MAINTENANCE,
        COPY_BACKUPS,
        QUORUM_LOSS_RECOVERY,
        SINGLE_MEMBER_RESTORE,
        CERTIFICATE_RENEWAL,
        MACHINE_FORCE_DELETION,
        SPACE_RECOVERY,
    ];
}

/// EtcdOperatorTaskSpec is the spec for an EtcdOperatorTask resource.
#[allow(clippy::duplicated_attributes)] // false positive on repeated `printcolumn(type_ = …)`
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "druid.gardener.cloud",
    version = "v1alpha1",
    kind = "EtcdOperatorTask",
    plural = "etcdoperatortasks",
    singular = "etcdoperatortask",
    shortname = "etask",
    category = "druid",
    namespaced,
    status = "EtcdOperatorTaskStatus",
    doc = "EtcdOperatorTask represents an out-of-band operator task on an Etcd (DEP-05).",
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(name = "Etcd", type_ = "string", json_path = ".spec.ownerEtcdRefrence.name"),
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = accept_both_owner_spellings)]
pub struct EtcdOperatorTaskSpec {
    /// Type specifies the type of out-of-band operator task to be performed.
    #[serde(rename = "type")]
    #[schemars(length(min = 1))]
    pub type_: String,
    /// Config is a task specific configuration (a YAML string whose schema depends on the type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// TTLSecondsAfterFinished is the time-to-live to garbage collect the related resource(s) of task once it
    /// has been completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
    /// OwnerEtcdReference refers to the name and namespace of the corresponding Etcd owner for which the task
    /// has been invoked (DEP-05 spells the field `ownerEtcdRefrence`; `ownerEtcdReference` is accepted too).
    #[serde(rename = "ownerEtcdRefrence", alias = "ownerEtcdReference")]
    pub owner_etcd_refrence: NamespacedName,
}

/// Name and namespace of an object (Go's `types.NamespacedName`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub struct NamespacedName {
    /// Name of the Etcd.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Namespace of the Etcd.
    #[schemars(length(min = 1))]
    pub namespace: String,
}

/// The state of the task.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum TaskState {
    /// Waiting for admission or for an earlier task of the same Etcd (FIFO).
    Pending,
    /// Executing.
    InProgress,
    /// Finished successfully.
    Succeeded,
    /// Finished with an error.
    Failed,
    /// Refused because a precondition did not hold.
    Rejected,
}

impl TaskState {
    /// Whether the task has finished (no further transitions).
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Succeeded | TaskState::Failed | TaskState::Rejected)
    }
    /// The name as written in the resource.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "Pending",
            TaskState::InProgress => "InProgress",
            TaskState::Succeeded => "Succeeded",
            TaskState::Failed => "Failed",
            TaskState::Rejected => "Rejected",
        }
    }
}

/// The state of the last operation (stage) of a task.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum OperationState {
    /// Not started.
    Pending,
    /// Running.
    InProgress,
    /// Done.
    Completed,
    /// Failed.
    Failed,
}

/// EtcdOperatorTaskStatus is the status for an EtcdOperatorTask resource.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdOperatorTaskStatus {
    /// ObservedGeneration is the most recent generation observed for the resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// State is the last known state of the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<TaskState>,
    /// Time at which the task has moved from "pending" state to any other state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initiated_at: Option<Time>,
    /// LastErrors represents the errors when processing the task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_errors: Vec<LastError>,
    /// Captures the last operation status if task involves many stages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
}

/// LastOperation is the last stage a task went through.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastOperation {
    /// Name of the LastOperation.
    pub name: String,
    /// Status of the last operation, one of Pending, InProgress, Completed, Failed.
    pub state: OperationState,
    /// LastTransitionTime is the time at which the operation state last transitioned.
    pub last_transition_time: Time,
    /// A human readable message indicating details about the last operation.
    pub reason: String,
}

/// LastError stores details of the most recent error encountered for the task.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastError {
    /// Code is an error code that uniquely identifies an error.
    pub code: String,
    /// Description is a human-readable message indicating details of the error.
    pub description: String,
    /// ObservedAt is the time at which the error was observed.
    pub observed_at: Time,
}

/// Schema transform: list the correctly spelled owner field next to DEP-05's and require exactly one of them.
///
/// A structural schema cannot express "either name" with `required`, so neither is required and a CEL rule on
/// the spec enforces it; the API server then stores whichever spelling the client sent.
fn accept_both_owner_spellings(schema: &mut schemars::Schema) {
    let Some(obj) = schema.as_object_mut() else { return };
    if let Some(props) = obj.get_mut("properties").and_then(|p| p.as_object_mut())
        && let Some(owner) = props.get(OWNER_FIELD_DEP05).cloned()
    {
        let mut correct = owner;
        if let Some(o) = correct.as_object_mut() {
            o.insert(
                "description".into(),
                "Correctly spelled alias of ownerEtcdRefrence; set exactly one of the two.".into(),
            );
        }
        props.insert(OWNER_FIELD_CORRECT.into(), correct);
    }
    if let Some(req) = obj.get_mut("required").and_then(|r| r.as_array_mut()) {
        req.retain(|f| f != OWNER_FIELD_DEP05);
    }
    obj.insert(
        "x-kubernetes-validations".into(),
        serde_json::json!([{
            "rule": "has(self.ownerEtcdRefrence) != has(self.ownerEtcdReference)",
            "message": "set exactly one of spec.ownerEtcdRefrence (DEP-05 spelling) and spec.ownerEtcdReference"
        }]),
    );
}

impl EtcdOperatorTask {
    /// The state, `Pending` when the status has none yet.
    pub fn state(&self) -> TaskState {
        self.status.as_ref().and_then(|s| s.state).unwrap_or(TaskState::Pending)
    }
    /// Whether the task targets Etcd `namespace/name`.
    pub fn targets(&self, namespace: &str, name: &str) -> bool {
        let r = &self.spec.owner_etcd_refrence;
        r.name == name && r.namespace == namespace
    }
}

/// The EtcdOperatorTask CRD as druidctl installs it.
pub fn crd() -> CustomResourceDefinition {
    EtcdOperatorTask::crd()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_schema(crd: &CustomResourceDefinition) -> serde_json::Value {
        let v = serde_json::to_value(crd).unwrap();
        v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
    }

    #[test]
    fn both_owner_spellings_deserialize_to_the_same_reference() {
        for field in [OWNER_FIELD_DEP05, OWNER_FIELD_CORRECT] {
            let obj = serde_json::json!({
                "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "EtcdOperatorTask",
                "metadata": {"name": "t", "namespace": "shoot"},
                "spec": {"type": "OnDemandSnapshotTask", "config": "type: full\n",
                         field: {"name": "etcd-main", "namespace": "shoot"}}
            });
            let t: EtcdOperatorTask = serde_json::from_value(obj).unwrap();
            assert!(t.targets("shoot", "etcd-main"), "{field}");
            // Written back in DEP-05's spelling.
            let back = serde_json::to_value(&t.spec).unwrap();
            assert!(back.get(OWNER_FIELD_DEP05).is_some());
        }
    }

    #[test]
    fn crd_lists_both_owner_spellings_and_requires_exactly_one() {
        let crd = crd();
        let spec = spec_schema(&crd);
        assert!(spec["properties"][OWNER_FIELD_DEP05].is_object());
        assert!(spec["properties"][OWNER_FIELD_CORRECT].is_object());
        let required: Vec<&str> = spec["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert_eq!(required, vec!["type"]);
        let rule = spec["x-kubernetes-validations"][0]["rule"].as_str().unwrap();
        assert!(rule.contains("ownerEtcdRefrence") && rule.contains("ownerEtcdReference"));
    }

    #[test]
    fn crd_has_status_subresource_short_name_and_printer_columns() {
        let crd = crd();
        assert_eq!(crd.metadata.name.as_deref(), Some("etcdoperatortasks.druid.gardener.cloud"));
        assert_eq!(crd.spec.names.short_names.as_deref(), Some(&["etask".to_string()][..]));
        assert_eq!(crd.spec.scope, "Namespaced");
        let v = &crd.spec.versions[0];
        assert!(v.subresources.as_ref().unwrap().status.is_some());
        let cols: Vec<&str> = v.additional_printer_columns.as_ref().unwrap().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(cols, ["Type", "Etcd", "State", "Age"]);
    }

    #[test]
    fn task_state_enum_is_in_the_schema() {
        let v = serde_json::to_value(crd()).unwrap();
        let state =
            &v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["state"];
        let values: Vec<&str> = state["enum"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert_eq!(values, ["Pending", "InProgress", "Succeeded", "Failed", "Rejected"]);
    }
}
