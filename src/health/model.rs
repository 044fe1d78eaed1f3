//! The health model of one Etcd as `status` shows it and `-o json` prints it (schema documented in
//! docs/cli.md). Times are RFC 3339; ages are whole seconds relative to `observedAt`.

use jiff::Timestamp;
use serde::Serialize;

use super::quorum::Quorum;
use crate::kube::ObjectKey;

/// Overall verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// Quorate, every member ready, backups fresh, Ready condition not False.
    Healthy,
    /// Quorate but something needs attention (a member down, stale backups, a failing condition).
    Degraded,
    /// A majority of members is not ready.
    QuorumLost,
    /// Scaled to zero replicas on purpose.
    Hibernated,
}

impl Verdict {
    /// Whether `status` exits 0 for this verdict.
    pub fn is_ok(self) -> bool {
        matches!(self, Verdict::Healthy | Verdict::Hibernated)
    }
    /// Display name.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Healthy => "Healthy",
            Verdict::Degraded => "Degraded",
            Verdict::QuorumLost => "QuorumLost",
            Verdict::Hibernated => "Hibernated",
        }
    }
}

/// Health of one Etcd.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthReport {
    /// The Etcd.
    pub etcd: ObjectKey,
    /// When the inputs were judged.
    pub observed_at: Timestamp,
    /// The verdict.
    pub verdict: Verdict,
    /// One sentence saying why.
    pub summary: String,
    /// Every problem found, one sentence each.
    pub problems: Vec<String>,
    /// `metadata.generation` of the Etcd.
    pub generation: Option<i64>,
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    /// Quorum arithmetic.
    pub quorum: Quorum,
    /// One entry per expected member.
    pub members: Vec<MemberHealth>,
    /// How current etcd-druid's view (`status.members`, `status.conditions`) is.
    pub druid_view: DruidView,
    /// Etcd status conditions.
    pub conditions: Vec<ConditionView>,
    /// Backup freshness.
    pub backups: Backups,
    /// Annotations that change druid's behaviour.
    pub annotations: AnnotationsInEffect,
    /// Recent EtcdOperatorTasks of this Etcd.
    pub tasks: Tasks,
    /// What needs watching but does not make the Etcd unhealthy (space running low, space a defragmentation
    /// would free, mixed etcd versions, a member's etcd that did not answer), one sentence each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// etcd's own view (Maintenance Status and alarms of every member); absent when etcd was not asked
    /// (`--no-etcd`, or many Etcds without `--etcd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_view: Option<EtcdView>,
}

/// etcd's own view of an Etcd, as its members answered.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EtcdView {
    /// The member every answering member follows, when they agree.
    pub leader: Option<String>,
    /// The alarms raised in the cluster (`None`: no member listed them).
    pub alarms: Option<Vec<AlarmView>>,
    /// Members whose etcd did not answer, and why.
    pub unreachable: Vec<UnreachableView>,
    /// One sentence when no member's etcd answered: why, once.
    pub not_reached: Option<String>,
}

/// A raised etcd alarm.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AlarmView {
    /// Member name (the hex member ID when no member answered with that ID).
    pub member: String,
    /// etcd member ID (hex).
    pub member_id: String,
    /// `NOSPACE` or `CORRUPT`.
    pub alarm: String,
}

/// A member whose etcd did not answer.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnreachableView {
    /// Member name.
    pub member: String,
    /// The cause (`noPod`, `portForwardForbidden`, `tlsSecret`, `notAnswering`, `timeout`).
    pub cause: crate::etcd::UnreachableCause,
    /// One sentence.
    pub detail: String,
}

/// One member as its etcd describes itself (`etcdctl endpoint status`): raw numbers, bytes and indexes.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberEtcdView {
    /// etcd member ID (hex).
    pub member_id: String,
    /// etcd cluster ID (hex).
    pub cluster_id: String,
    /// The leader's member ID as this member sees it (hex; `None`: no leader).
    pub leader_id: Option<String>,
    /// Whether this member is the leader.
    pub is_leader: bool,
    /// Whether this member is a learner.
    pub is_learner: bool,
    /// etcd version.
    pub version: String,
    /// Database file size (bytes).
    pub db_size: i64,
    /// Bytes of the database in use.
    pub db_size_in_use: i64,
    /// The quota the database is judged against (bytes).
    pub quota: i64,
    /// Where `quota` comes from: `etcd` (reported by etcd 3.6+), `spec.etcd.quota`, or `default` (etcd-druid's
    /// 8Gi).
    pub quota_source: String,
    /// Raft term.
    pub raft_term: u64,
    /// Raft index.
    pub raft_index: u64,
    /// Raft applied index.
    pub raft_applied_index: u64,
    /// Entries this member's applied index trails the leader's raft index (`None`: leader unknown).
    pub lag: Option<u64>,
    /// Keyspace revision.
    pub revision: i64,
    /// Errors etcd reports about this member.
    pub errors: Vec<String>,
}

/// One member.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberHealth {
    /// Member name.
    pub name: String,
    /// Ordinal in the StatefulSet.
    pub index: u32,
    /// etcd member ID, when known.
    pub id: Option<String>,
    /// `Leader`, `Member` or `Learner`, when known.
    pub role: Option<String>,
    /// etcd cluster ID from the three-part lease holder, when the lease is fresh.
    pub cluster_id: Option<String>,
    /// Whether the member's etcd process is alive (etcd container running, or its lease renewed recently) even
    /// if it is not ready: after a quorum loss this names the survivors.
    pub alive: bool,
    /// Whether it counts towards quorum as ready.
    pub ready: bool,
    /// `Ready`, `NotReady` or `Unknown`: etcd-druid's view, or derived (see `status_source`).
    pub status: String,
    /// Where `status` comes from.
    pub status_source: StatusSource,
    /// When etcd-druid last changed `status` (`status.members[].lastTransitionTime`), when it says.
    pub status_since: Option<Timestamp>,
    /// Seconds since `status_since`.
    pub status_age_seconds: Option<i64>,
    /// etcd-druid's `status` disagrees with what druidctl observes now (pod readiness and lease renewal):
    /// etcd-druid has not noticed the change yet. Only for `status_source: etcd-druid`.
    pub druid_view_stale: bool,
    /// Why: druid's reason (LeaseSucceeded, LeaseExpired, ContainersNotReady, UnknownGracePeriodExceeded), or
    /// from the pod: NeverStartedUp / CrashLooping / Unhealthy / NotReady / PodMissing / LeaseNotRenewed.
    pub reason: String,
    /// The member lease.
    pub lease: Option<LeaseView>,
    /// The pod.
    pub pod: Option<PodView>,
    /// The PVC.
    pub pvc: Option<PvcView>,
    /// Node the pod runs on.
    pub node: Option<String>,
    /// What the member's etcd says about itself (absent when etcd was not asked or did not answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd: Option<MemberEtcdView>,
}

/// Where a member's `status` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum StatusSource {
    /// etcd-druid's entry in `status.members` (as of its last status update).
    #[serde(rename = "etcd-druid")]
    EtcdDruid,
    /// No entry: derived by druidctl from the member lease and pod now, the way etcd-druid would.
    #[serde(rename = "lease")]
    Lease,
    /// Neither an entry nor a renewed lease: druidctl's own judgement now.
    #[serde(rename = "druidctl")]
    Druidctl,
}

/// How current etcd-druid's view of an Etcd is.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DruidView {
    /// When etcd-druid last wrote the Etcd's status (the newest `lastUpdateTime` of its conditions).
    pub updated_at: Option<Timestamp>,
    /// Seconds since `updated_at`.
    pub age_seconds: Option<i64>,
    /// Members whose status etcd-druid reports differently from what druidctl observes now.
    pub stale_members: Vec<String>,
}

impl DruidView {
    /// Whether etcd-druid's view of any member disagrees with what druidctl observes now.
    pub fn stale(&self) -> bool {
        !self.stale_members.is_empty()
    }
}

/// A member lease.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseView {
    /// `spec.holderIdentity` (`<memberID>:<clusterID>:Leader|Member`, before etcd-backup-restore v0.39
    /// `<memberID>:Leader|Member`), empty when freshly created.
    pub holder: Option<String>,
    /// Last renewal.
    pub renewed_at: Option<Timestamp>,
    /// Seconds since the last renewal.
    pub age_seconds: Option<i64>,
    /// Whether it was renewed within twice its duration.
    pub fresh: bool,
}

/// A member pod.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodView {
    /// Pod name.
    pub name: String,
    /// Phase.
    pub phase: String,
    /// Ready condition.
    pub ready: bool,
    /// Restarts of the etcd container (all containers summed).
    pub restarts: i32,
}

/// A member PVC.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PvcView {
    /// PVC name.
    pub name: String,
    /// Phase (`Bound`, `Pending`, `Lost`), or `Missing`.
    pub phase: String,
}

/// An Etcd condition.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    /// Type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False`, `Unknown`.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
    /// Seconds since the last transition.
    pub age_seconds: Option<i64>,
    /// Whether the status is the healthy one for this type (`ClusterIDMismatch` is healthy when `False`);
    /// `None` when not judged (unknown type, `NotChecked`, or an `Unknown` that only says druid cannot tell).
    pub healthy: Option<bool>,
}

/// Backup freshness.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Backups {
    /// Whether `spec.backup.store` is set.
    pub enabled: bool,
    /// Last full snapshot (`<etcd>-full-snap` lease).
    pub full: Option<SnapshotView>,
    /// Last delta snapshot (`<etcd>-delta-snap` lease).
    pub delta: Option<SnapshotView>,
}

/// One snapshot lease.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotView {
    /// When the last snapshot was taken (lease renewTime); `None`: never.
    pub taken_at: Option<Timestamp>,
    /// Seconds since then.
    pub age_seconds: Option<i64>,
    /// Revision recorded in the holder identity.
    pub revision: Option<String>,
    /// Older than the threshold (or never taken).
    pub stale: bool,
    /// The threshold in seconds.
    pub threshold_seconds: i64,
}

/// Annotations in effect.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationsInEffect {
    /// A reconcile request druid has not picked up yet.
    pub reconcile_pending: bool,
    /// Spec reconciliation suspended.
    pub spec_reconcile_suspended: bool,
    /// Component protection webhook disabled.
    pub component_protection_disabled: bool,
}

/// EtcdOperatorTasks of this Etcd.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tasks {
    /// Whether the EtcdOperatorTask CRD is installed.
    pub crd_installed: bool,
    /// Newest first, at most five.
    pub recent: Vec<TaskView>,
}

/// One task.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskView {
    /// Task name.
    pub name: String,
    /// `spec.type`.
    #[serde(rename = "type")]
    pub type_: String,
    /// State.
    pub state: String,
    /// Last operation (step) name and state, if any.
    pub last_operation: Option<String>,
    /// Seconds since creation.
    pub age_seconds: Option<i64>,
}
