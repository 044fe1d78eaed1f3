//! etcd's own view of an Etcd's members: what each member's etcd answers about itself (Maintenance Status), the
//! alarms the cluster has raised, the consistency of the members' keyspaces (HashKV), and the quick actions an
//! operator takes on etcd directly (alarm disarm, leader transfer).
//!
//! Members are reached as every other etcd call of druidctl reaches them ([`crate::tasks::etcd_access`]): the
//! playground's URL annotation, the member's DNS name inside the cluster, or a port-forward through the API
//! server, with the Etcd's own client TLS. The gRPC calls go through the maintained [`etcd_client`] crate.
//!
//! The readings are plain data ([`member_status::EtcdObservation`]); what they mean is judged by pure functions
//! in [`crate::health::etcd_view`] and [`consistency`].

pub mod actions;
pub mod consistency;
pub mod member_status;
pub use druid_api::quantity;

pub use member_status::{
    Alarm, AlarmKind, EtcdObservation, LAG_READ_AGAIN_AFTER, MEMBER_READ_TIMEOUT, MemberReading, MemberStatus,
    Unreachable, UnreachableCause,
};

/// etcd-druid's quota when `spec.etcd.quota` is unset (8Gi).
// etcd-druid v0.37.1 internal/component/statefulset/builder.go: `defaultQuota int64 = 8 * 1024 * 1024 * 1024`,
// passed as `--embedded-etcd-quota-bytes`; internal/component/configmap/etcdconfig.go: `quota-backend-bytes`
// from `spec.etcd.quota`, else `defaultDBQuotaBytes` (8Gi).
pub const DEFAULT_QUOTA_BYTES: i64 = 8 * 1024 * 1024 * 1024;

/// etcd member IDs as etcdctl prints them: lower-case hex.
pub fn hex_id(id: u64) -> String {
    format!("{id:x}")
}

/// Errors of the etcd commands (`check`, `alarm`, `move-leader`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum EtcdError {
    /// No member's etcd could be reached, or the one the action needs could not.
    #[error("{0}")]
    Unreachable(String),
    /// etcd answered with an error.
    #[error("{0}")]
    Failed(String),
    /// The action is refused (the member is a learner or not ready, the alarm's cause remains).
    #[error("{0}")]
    Refused(String),
    /// The named member does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The members' keyspaces differ (`check`).
    #[error("{0}")]
    Divergent(String),
}
