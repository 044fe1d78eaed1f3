//! The subset of etcd-druid's `Etcd` (`druid.gardener.cloud/v1alpha1`) that druidctl reads.
//!
//! druidctl never writes this struct back: changes go through targeted patches (`api::patch`), so fields
//! not modelled here are never dropped.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// Spec of an Etcd: only the fields druidctl reads.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "druid.gardener.cloud",
    version = "v1alpha1",
    kind = "Etcd",
    namespaced,
    status = "EtcdStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdSpec {
    /// Desired number of members.
    pub replicas: i32,
    /// Labels druid puts on the managed resources.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// etcd container settings.
    #[serde(default)]
    pub etcd: EtcdConfig,
    /// backup-restore sidecar settings.
    #[serde(default)]
    pub backup: BackupSpec,
    /// Name prefix of the PVCs (defaults to the Etcd name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_claim_template: Option<String>,
    /// Prefix of member names (`<prefix>-<pod>`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_name_prefix: Option<String>,
    /// `spec.sharedConfig`: settings shared by etcd and the sidecar (auto-compaction).
    #[serde(rename = "sharedConfig", default, skip_serializing_if = "Option::is_none")]
    pub common: Option<SharedConfig>,
    /// Annotations druid puts on the pod template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// PriorityClass of the member pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Requested size of each member's volume (a quantity; druid default `16Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_capacity: Option<IntOrString>,
    /// StorageClass of the volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
}

/// `spec.etcd`: ports and TLS of the etcd container.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EtcdConfig {
    /// Client port (default 2379).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_port: Option<i32>,
    /// Peer port (default 2380).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_port: Option<i32>,
    /// TLS of the client URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_url_tls: Option<TlsConfig>,
    /// TLS of the peer URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_url_tls: Option<TlsConfig>,
    /// `metrics` level of etcd (`basic` or `extensive`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    /// Backend quota (a quantity; druid default `8Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<IntOrString>,
    /// `snapshot-count` of etcd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_count: Option<i64>,
    /// `enable-grpc-gateway` of etcd.
    #[serde(rename = "enableGRPCGateway", default, skip_serializing_if = "Option::is_none")]
    pub enable_grpc_gateway: Option<bool>,
    /// Port of etcd-wrapper's HTTP server (readiness; default 9095).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrapper_port: Option<i32>,
    /// Member lease renewal period of the sidecar, a Go duration (default `10s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_duration: Option<String>,
    /// Cron schedule of defragmentations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defragmentation_schedule: Option<String>,
    /// Image of etcd-wrapper; druid's image vector when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// `spec.sharedConfig`: settings etcd and backup-restore share.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SharedConfig {
    /// `periodic` or `revision`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compaction_mode: Option<String>,
    /// Retention of the auto-compaction (druid default `30m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compaction_retention: Option<String>,
}

/// etcd-druid's backend quota when `spec.etcd.quota` is unset (druid v0.37.1
/// `internal/component/configmap/etcdconfig.go`, `defaultDBQuotaBytes`).
pub const DEFAULT_QUOTA_BYTES: u64 = 8 * 1024 * 1024 * 1024;

impl EtcdConfig {
    /// The backend quota in bytes as etcd-druid renders it into `quota-backend-bytes`: `spec.etcd.quota`, or
    /// [`DEFAULT_QUOTA_BYTES`] when unset (or not a quantity, which the real CRD's validation refuses).
    pub fn quota_bytes(&self) -> u64 {
        self.quota
            .as_ref()
            .and_then(crate::quantity::int_or_string_bytes)
            .and_then(|b| u64::try_from(b).ok())
            .unwrap_or(DEFAULT_QUOTA_BYTES)
    }
}

/// `spec.backup`: the backup-restore sidecar.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// HTTP port of the sidecar (default 8080).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Object store; absent means backups are disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreSpec>,
    /// TLS of the sidecar's HTTP API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    /// Cron schedule of full snapshots (druid default: daily).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_snapshot_schedule: Option<String>,
    /// Period of delta snapshots as a Go duration (druid default `20s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_snapshot_period: Option<String>,
    /// Image of etcd-backup-restore; druid's image vector when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// `Exponential` or `LimitBased` (druid default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub garbage_collection_policy: Option<String>,
    /// Period of the snapshot garbage collection, a Go duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub garbage_collection_period: Option<String>,
    /// Memory limit of delta snapshots (a quantity; druid default `100Mi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_snapshot_memory_limit: Option<IntOrString>,
    /// Snapshot compression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<CompressionSpec>,
}

/// `spec.backup.compression`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CompressionSpec {
    /// Whether snapshots are compressed (druid default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// `gzip`, `lzw` or `zlib` (druid default `gzip`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

/// `spec.backup.store`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StoreSpec {
    /// Provider (`aws`, `gcp`, `local`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Bucket or container name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Prefix inside the container.
    pub prefix: String,
    /// Secret with the store credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    /// Endpoint of an S3-compatible store other than the provider's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_override: Option<String>,
}

/// TLS secrets referenced by an Etcd.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsConfig {
    /// CA bundle secret.
    #[serde(rename = "tlsCASecretRef")]
    pub tls_ca_secret_ref: SecretReference,
    /// Server certificate secret.
    #[serde(rename = "serverTLSSecretRef")]
    pub server_tls_secret_ref: SecretReference,
    /// Client certificate secret.
    #[serde(rename = "clientTLSSecretRef", default, skip_serializing_if = "Option::is_none")]
    pub client_tls_secret_ref: Option<SecretReference>,
}

/// A reference to a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// Secret name.
    #[serde(default)]
    pub name: String,
    /// Namespace (defaults to the Etcd's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Key of the data map holding the value (the CA bundle of `tlsCASecretRef`; etcd-druid reads `ca.crt`
    /// when unset, Gardener sets `bundle.crt`).
    #[serde(rename = "dataKey", default, skip_serializing_if = "Option::is_none")]
    pub data_key: Option<String>,
}

/// Observed state of an Etcd.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EtcdStatus {
    /// Generation druid last reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (`Ready`, `AllMembersReady`, `BackupReady`, `DataVolumesReady`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<EtcdCondition>,
    /// Per-member status as druid sees it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<EtcdMemberStatus>,
    /// Members in the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_size: Option<i32>,
    /// Replicas of the StatefulSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Ready replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Current replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_replicas: Option<i32>,
    /// Whether the cluster is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Last operation druid performed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<EtcdLastOperation>,
    /// Errors of the last operation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_errors: Vec<EtcdLastError>,
}

/// One Etcd status condition.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EtcdCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable reason.
    #[serde(default)]
    pub reason: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
    /// When the status last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// When the condition was last updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
}

/// One entry of `status.members`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EtcdMemberStatus {
    /// Member name (pod name, or `<prefix>-<pod>`).
    pub name: String,
    /// etcd member ID (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `Leader` or `Member`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// `Ready`, `NotReady` or `Unknown`.
    pub status: String,
    /// `LeaseSucceeded`, `LeaseExpired`, `ContainersNotReady`, `UnknownGracePeriodExceeded` (etcd-druid `internal/health/etcdmember/check_ready.go`).
    #[serde(default)]
    pub reason: String,
    /// When the status last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// `status.lastOperation` of an Etcd.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EtcdLastOperation {
    /// `Create`, `Reconcile`, `Delete`.
    #[serde(rename = "type", default)]
    pub type_: String,
    /// `Processing`, `Succeeded`, `Error`, `Requeue`.
    #[serde(default)]
    pub state: String,
    /// What happened.
    #[serde(default)]
    pub description: String,
    /// Correlates with druid's logs.
    #[serde(rename = "runID", default)]
    pub run_id: String,
    /// When it was last updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
}

/// One entry of `status.lastErrors`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EtcdLastError {
    /// Error code.
    pub code: String,
    /// Description.
    #[serde(default)]
    pub description: String,
    /// When it was observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<Time>,
}

impl Etcd {
    /// The condition of type `type_`, if druid reported it.
    pub fn condition(&self, type_: &str) -> Option<&EtcdCondition> {
        self.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
    }
    /// Names of the managed resources.
    pub fn managed_names(&self) -> super::names::ManagedNames {
        super::names::ManagedNames::new(
            self.metadata.name.as_deref().unwrap_or_default(),
            self.spec.volume_claim_template.as_deref(),
        )
        .with_member_name_prefix(self.spec.member_name_prefix.as_deref())
    }
    /// Whether backups are configured (`spec.backup.store` present).
    pub fn backups_enabled(&self) -> bool {
        self.spec.backup.store.is_some()
    }
    /// The TLS secret names this Etcd references (client, peer, backup), deduplicated and sorted.
    pub fn tls_secret_names(&self) -> Vec<String> {
        let mut out: Vec<String> = [
            self.spec.etcd.client_url_tls.as_ref(),
            self.spec.etcd.peer_url_tls.as_ref(),
            self.spec.backup.tls.as_ref(),
        ]
        .into_iter()
        .flatten()
        .flat_map(|t| [Some(&t.tls_ca_secret_ref), Some(&t.server_tls_secret_ref), t.client_tls_secret_ref.as_ref()])
        .flatten()
        .map(|r| r.name.clone())
        .filter(|n| !n.is_empty())
        .collect();
        out.sort();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quota_defaults_to_druids_8gi() {
        let mut c = EtcdConfig::default();
        assert_eq!(c.quota_bytes(), DEFAULT_QUOTA_BYTES);
        c.quota = Some(IntOrString::String("32Mi".into()));
        assert_eq!(c.quota_bytes(), 32 * 1024 * 1024);
    }
}
