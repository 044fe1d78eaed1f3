//! The runbook definitions: which task type each runs, what it is for, when it refuses, what can be lost,
//! and every API call its plan makes (for the RBAC pre-flight and the generated docs).

use std::sync::Arc;

use super::rbac::Access;
use crate::api::task::types;
use crate::tasks::member_restore::SingleMemberRestore;
use crate::tasks::quorum_loss::QuorumLossRecovery;
use crate::tasks::{Registry, TaskKind};

/// Which runbook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunbookId {
    /// Permanent quorum-loss recovery.
    QuorumLossRecovery,
    /// Restore of one failed member.
    MemberRestore,
}

/// A runbook definition.
#[derive(Debug, Clone, Copy)]
pub struct Runbook {
    /// Which runbook.
    pub id: RunbookId,
    /// Command name (`druidctl runbook NAME`).
    pub name: &'static str,
    /// `EtcdOperatorTask` type it runs.
    pub task_type: &'static str,
    /// One line for `runbook list`.
    pub summary: &'static str,
    /// When to use it.
    pub when: &'static str,
    /// When it refuses to start.
    pub refuses: &'static [&'static str],
    /// What can be lost.
    pub data_loss: &'static str,
    /// Where the procedure comes from.
    pub source: &'static str,
    /// Whether the newest full snapshot's age is checked (and confirmed when old or absent).
    pub needs_backup: bool,
}

/// Permanent quorum-loss recovery (seeds/004 7880-8007).
pub const QUORUM_LOSS_RECOVERY: Runbook = Runbook {
    id: RunbookId::QuorumLossRecovery,
    name: "quorum-loss-recovery",
    task_type: types::QUORUM_LOSS_RECOVERY,
    summary: "recover a multi-member etcd from permanent quorum loss by restoring its first member from the latest backup",
    when: "A majority of the members lost their data for good (disk, volume or node gone) and the cluster does not come back by itself. For a transient loss (members down for a while) wait instead: they rejoin with their data.",
    refuses: &[
        "the etcd has a single member (it restores itself from its backups)",
        "the cluster still has quorum",
        "the newest full snapshot is older than the freshness threshold or absent, unless confirmed (interactively, or with --accept-data-loss)",
        "no terminal and no --yes (destructive steps need confirmation)",
        "any API call of the plan is forbidden by RBAC (SelfSubjectAccessReview pre-flight)",
    ],
    data_loss: "Everything written after the latest backup (full snapshot plus the delta snapshots after it) is lost: the cluster is restored from the backup, and the data volumes of all members are deleted.",
    source: "etcd-druid docs, \"Recovery from Permanent Quorum Loss in an Etcd Cluster\" (seeds/004 7880-8007)",
    needs_backup: true,
};

/// Single-member restore (seeds/004 8008-8040).
pub const MEMBER_RESTORE: Runbook = Runbook {
    id: RunbookId::MemberRestore,
    name: "member-restore",
    task_type: types::SINGLE_MEMBER_RESTORE,
    summary: "restore one failed member of a quorate multi-member etcd: it restarts empty and rejoins as a learner",
    when: "One member of a multi-member cluster has a corrupt or invalid data directory (or lost its volume) and does not recover, while the others keep quorum.",
    refuses: &[
        "the etcd has a single member",
        "the cluster has no quorum (use quorum-loss-recovery)",
        "the member is healthy",
        "another member is not ready either (restoring would put quorum at risk)",
        "no terminal and no --yes (destructive steps need confirmation)",
        "any API call of the plan is forbidden by RBAC (SelfSubjectAccessReview pre-flight)",
    ],
    data_loss: "Nothing the cluster agreed on: the member's own volume is deleted, and it copies the data from the leader when it rejoins.",
    source: "etcd-druid proposal \"Restoration of a single member in multi-node etcd\" (seeds/004 8008-8040)",
    needs_backup: false,
};

/// Every runbook, in `runbook list` order.
pub const ALL: [Runbook; 2] = [QUORUM_LOSS_RECOVERY, MEMBER_RESTORE];

impl Runbook {
    /// The runbook called `name`.
    pub fn find(name: &str) -> Option<Runbook> {
        ALL.into_iter().find(|r| r.name == name)
    }

    /// The task type implementation.
    pub fn kind(&self) -> Arc<dyn TaskKind> {
        match self.id {
            RunbookId::QuorumLossRecovery => Arc::new(QuorumLossRecovery),
            RunbookId::MemberRestore => Arc::new(SingleMemberRestore),
        }
    }

    /// Every API call the plan makes (besides the task and its executor lease, which every runbook uses).
    pub fn accesses(&self) -> Vec<Access> {
        let mut a = vec![
            Access::new("get", "druid.gardener.cloud", "etcds"),
            Access::new("create", "druid.gardener.cloud", "etcdoperatortasks"),
            Access::new("list", "druid.gardener.cloud", "etcdoperatortasks"),
            Access::new("patch", "druid.gardener.cloud", "etcdoperatortasks"),
            Access::sub("update", "druid.gardener.cloud", "etcdoperatortasks", "status"),
            Access::new("get", "coordination.k8s.io", "leases"),
            Access::new("create", "coordination.k8s.io", "leases"),
            Access::new("update", "coordination.k8s.io", "leases"),
            Access::new("get", "", "pods"),
            Access::new("list", "apps", "deployments"),
        ];
        match self.id {
            RunbookId::QuorumLossRecovery => a.extend([
                Access::new("patch", "druid.gardener.cloud", "etcds"),
                Access::new("get", "apps", "statefulsets"),
                Access::new("patch", "apps", "statefulsets"),
                Access::new("get", "", "configmaps"),
                Access::new("patch", "", "configmaps"),
                Access::new("list", "", "persistentvolumeclaims"),
                Access::new("delete", "", "persistentvolumeclaims"),
                Access::new("delete", "coordination.k8s.io", "leases"),
                Access::new("list", "", "pods"),
            ]),
            RunbookId::MemberRestore => a.extend([
                Access::new("get", "", "persistentvolumeclaims"),
                Access::new("delete", "", "persistentvolumeclaims"),
                Access::new("delete", "", "pods"),
            ]),
        }
        a
    }
}

/// The standard task registry plus the runbook types (which `serve` leaves to the runbook engine).
pub fn registry() -> Registry {
    let mut r = Registry::standard();
    for rb in ALL {
        r.register(rb.kind());
    }
    r
}
