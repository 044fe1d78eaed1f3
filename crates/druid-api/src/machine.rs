//! The subsets of machine-controller-manager's `Machine` and `MachineSet` (`machine.sapcloud.io/v1alpha1`)
//! that druidctl reads.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// Spec of a Machine: only the fields druidctl reads.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "Machine",
    namespaced,
    status = "MachineStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// Machine class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ClassSpec>,
    /// Cloud provider ID of the VM.
    #[serde(rename = "providerID", default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
}

/// Reference to a MachineClass.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClassSpec {
    /// Class name.
    #[serde(default)]
    pub name: String,
    /// Class kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// Observed state of a Machine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// Phase (`Pending`, `Running`, `Terminating`, `Failed`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_status: Option<CurrentStatus>,
    /// Last operation; explains a stuck deletion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<MachineLastOperation>,
    /// Node conditions mirrored by MCM.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<k8s_openapi::api::core::v1::NodeCondition>,
}

/// `status.currentStatus` of a Machine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CurrentStatus {
    /// Machine phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// When the phase last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
}

/// `status.lastOperation` of a Machine or MachineSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MachineLastOperation {
    /// What happened.
    #[serde(default)]
    pub description: String,
    /// Error code, when failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// `Processing`, `Failed`, `Successful`.
    #[serde(default)]
    pub state: String,
    /// `Create`, `Update`, `HealthCheck`, `Delete`.
    #[serde(rename = "type", default)]
    pub type_: String,
    /// When it was last updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
}

/// Spec of a MachineSet: only the fields druidctl reads.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "MachineSet",
    namespaced,
    status = "MachineSetStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetSpec {
    /// Desired machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Selects the machines of this set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Machine class of new machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_class: Option<ClassSpec>,
}

/// Observed state of a MachineSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetStatus {
    /// Machines that exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Machines whose node is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Machines available for minReadySeconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Last operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<MachineLastOperation>,
}

impl Machine {
    /// Name of the Node this machine backs (MCM's `node` label).
    pub fn node_name(&self) -> Option<&str> {
        self.metadata.labels.as_ref()?.get(super::names::MACHINE_NODE_LABEL).map(String::as_str)
    }
    /// Phase, when reported.
    pub fn phase(&self) -> Option<&str> {
        self.status.as_ref()?.current_status.as_ref()?.phase.as_deref()
    }
}
