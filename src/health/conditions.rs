//! Which value of each Etcd condition is healthy. Every type has its own polarity and reasons
//! (etcd-druid v0.37.1 `api/core/v1alpha1/etcd.go` and `internal/health/condition/*.go`; see
//! docs/compatibility.md for which druid version sets which type).

use crate::api::etcd::EtcdCondition;

/// Reason etcd-druid writes on every health condition while the Etcd is scaled to zero
/// (`internal/health/condition/builder.go`).
pub const REASON_NOT_CHECKED: &str = "NotChecked";

/// How `status` judges one condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement {
    /// The healthy value.
    Healthy,
    /// A problem: the verdict is at best Degraded.
    Problem,
    /// Shown, not judged: an unknown type, a value that only says druid could not tell, or `NotChecked`.
    NotJudged,
}

/// The healthy status of condition type `type_`, for the types druidctl knows.
pub fn healthy_status(type_: &str) -> Option<&'static str> {
    match type_ {
        // check_ready.go, check_all_members_ready.go, check_all_members_updated.go, check_data_volumes_ready.go
        "Ready" | "AllMembersReady" | "AllMembersUpdated" | "DataVolumesReady" => Some("True"),
        // check_backup_ready.go
        "BackupReady" => Some("True"),
        // compaction controller, internal/controller/compaction/reconciler.go
        "LastSnapshotCompactionSucceeded" => Some("True"),
        // check_cluster_id_mismatch.go: False (NoClusterIDMismatchDetected) is healthy, True is the problem.
        "ClusterIDMismatch" => Some("False"),
        // Unreleased etcd-druid (after v0.37.1): check_bootstrap_with_existing_cluster.go.
        "BootstrappedWithExistingCluster" => Some("True"),
        _ => None,
    }
}

/// Judges one condition.
pub fn judge(c: &EtcdCondition) -> Judgement {
    if c.reason == REASON_NOT_CHECKED {
        return Judgement::NotJudged;
    }
    let Some(healthy) = healthy_status(&c.type_) else { return Judgement::NotJudged };
    if c.status == healthy {
        return Judgement::Healthy;
    }
    match (c.type_.as_str(), c.status.as_str()) {
        // druid says Unknown when it cannot tell (no delta snapshot yet, a lease it cannot read, or on its way
        // from True to False); druidctl judges the same snapshot leases itself, so Unknown adds no problem.
        ("BackupReady", "Unknown") => Judgement::NotJudged,
        // NoClusterIDDetected: members still write the two-part holder (etcd-backup-restore before v0.39), or no
        // lease is readable yet. Nothing says the IDs differ.
        ("ClusterIDMismatch", "Unknown") => Judgement::NotJudged,
        _ => Judgement::Problem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(t: &str, s: &str, r: &str) -> EtcdCondition {
        EtcdCondition { type_: t.into(), status: s.into(), reason: r.into(), ..Default::default() }
    }

    #[test]
    fn each_type_has_its_polarity() {
        use Judgement::*;
        let cases = [
            (c("Ready", "True", "Quorate"), Healthy),
            (c("Ready", "False", "QuorumLost"), Problem),
            (c("Ready", "Unknown", "NoMembersInStatus"), Problem),
            (c("AllMembersReady", "False", "NotAllMembersReady"), Problem),
            (c("AllMembersUpdated", "True", "AllMembersUpdated"), Healthy),
            (c("AllMembersUpdated", "False", "NotAllMembersUpdated"), Problem),
            (c("DataVolumesReady", "False", "FoundWarningsForDataVolumes"), Problem),
            (c("ClusterIDMismatch", "False", "NoClusterIDMismatchDetected"), Healthy),
            (c("ClusterIDMismatch", "True", "MultipleClusterIDsDetected"), Problem),
            (c("ClusterIDMismatch", "Unknown", "NoClusterIDDetected"), NotJudged),
            (c("BackupReady", "True", "BackupSucceeded"), Healthy),
            (c("BackupReady", "Unknown", "Unknown"), NotJudged),
            (c("BackupReady", "False", "BackupFailed"), Problem),
            (c("LastSnapshotCompactionSucceeded", "True", "None"), Healthy),
            (c("LastSnapshotCompactionSucceeded", "False", "DeadlineExceeded"), Problem),
            (c("BootstrappedWithExistingCluster", "False", "BootstrapInProgress"), Problem),
            (c("Ready", "Unknown", "NotChecked"), NotJudged),
            (c("ClusterIDMismatch", "True", "NotChecked"), NotJudged),
            (c("SomethingNew", "False", "Whatever"), NotJudged),
            (c("Ready", "ConditionCheckError", "x"), Problem),
        ];
        for (cond, want) in cases {
            assert_eq!(judge(&cond), want, "{} {} {}", cond.type_, cond.status, cond.reason);
        }
    }
}
