//! The runbook definitions: which task type each runs, what it is for, when it refuses, what can be lost,
//! and every API call its plan makes (for the RBAC pre-flight and the generated docs).

use std::sync::Arc;

use super::rbac::Access;
use crate::api::task::types;
use crate::tasks::cert_renewal::CertificateRenewal;
use crate::tasks::machine_deletion::MachineForceDeletion;
use crate::tasks::member_restore::SingleMemberRestore;
use crate::tasks::quorum_loss::QuorumLossRecovery;
use crate::tasks::space_recovery::SpaceRecovery;
use crate::tasks::{Registry, TaskKind};

/// Which runbook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunbookId {
    /// Permanent quorum-loss recovery.
    QuorumLossRecovery,
    /// Restore of one failed member.
    MemberRestore,
    /// Certificate renewal with a rolling restart, leader last.
    CertificateRenewal,
    /// Replacement of the machine behind a node hosting members.
    MachineReplacement,
    /// Freeing the backend of a full (NOSPACE) or nearly full etcd.
    SpaceRecovery,
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
        "no terminal and no --yes (the whole plan is confirmed by typing the Etcd name before the first change)",
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
        "no terminal and no --yes (the whole plan is confirmed by typing the Etcd name before the first change)",
        "any API call of the plan is forbidden by RBAC (SelfSubjectAccessReview pre-flight)",
    ],
    data_loss: "Nothing the cluster agreed on: the member's own volume is deleted, and it copies the data from the leader when it rejoins.",
    source: "etcd-druid proposal \"Restoration of a single member in multi-node etcd\" (seeds/004 8008-8040)",
    needs_backup: false,
};

/// Certificate renewal: renew, wait for the new revisions, restart the members one at a time, leader last.
pub const CERT_RENEWAL: Runbook = Runbook {
    id: RunbookId::CertificateRenewal,
    name: "cert-renewal",
    task_type: types::CERTIFICATE_RENEWAL,
    summary: "renew every certificate behind the etcd's TLS secrets, restart its members one at a time (followers first, the leader last), then check each member serves the new certificate",
    when: "A certificate of the etcd (CA, server, client or peer) is about to expire or was compromised, and the members must load new ones. etcd only reads its certificates on start, so each member is restarted, one at a time, keeping quorum. At the end each member's client TLS endpoint (pod IP and client port, or the playground's annotation) is asked for its certificate and its serial compared with the newly issued one; a member that cannot be reached from where druidctl runs is reported as not verified, and the run then ends with exit code 8 (done, not verified) instead of 0.",
    refuses: &[
        "the cluster has no quorum",
        "a member is not ready (restarting another one could lose quorum)",
        "no Certificate behind the etcd's TLS secrets is found (when they carry the labels of Gardener's secrets manager it says that Gardener's certificate and CA rotation renews them)",
        "any API call of the plan is forbidden by RBAC (SelfSubjectAccessReview pre-flight)",
        "no terminal and no --yes (the whole plan is confirmed by typing the Etcd name before the first change)",
    ],
    data_loss: "Nothing: members restart one at a time with their volumes, and the next one only after the restarted one is ready and the cluster is quorate. When issuing a certificate fails, no member is restarted.",
    source: "cert-manager `cmctl renew` (Issuing condition, reason ManuallyTriggered) and etcd-druid's rolling update order (leader last)",
    needs_backup: false,
};

/// Machine replacement: blast-radius check, MCM deletion, wait for the new node and the members.
pub const MACHINE_REPLACEMENT: Runbook = Runbook {
    id: RunbookId::MachineReplacement,
    name: "machine-replacement",
    task_type: types::MACHINE_FORCE_DELETION,
    summary: "replace the machine behind a node that hosts etcd members, refusing when any etcd would lose quorum, and wait until the members are ready again",
    when: "A node hosting etcd members is broken or must be recycled (kernel, hardware, stuck kubelet) and machine-controller-manager should replace its machine.",
    refuses: &[
        "the machine or node does not exist",
        "no etcd member runs on the node (use `druidctl machine delete`)",
        "the etcd has no quorum",
        "removing the node would cost any etcd its quorum (checked again right before the deletion)",
        "no terminal and no --yes (the whole plan is confirmed by typing the Etcd name before the first change)",
        "any API call of the plan is forbidden by RBAC (SelfSubjectAccessReview pre-flight)",
    ],
    data_loss: "Nothing the cluster agreed on: the members on the node restart elsewhere and catch up from the leader. With --force the drain is skipped (PodDisruptionBudgets are not respected).",
    source: "machine-controller-manager docs/faq.md, \"How can I force delete a machine?\" (force-deletion label) and \"How to delete machine object immediately if I don't have access to it?\" (delete the Node on v0.61+; the Node annotation trigger-deletion-by-mcm up to v0.60)",
    needs_backup: false,
};

/// Space recovery: etcd's maintenance guide for NOSPACE (compact, defragment, disarm), member by member.
pub const SPACE_RECOVERY: Runbook = Runbook {
    id: RunbookId::SpaceRecovery,
    name: "space-recovery",
    task_type: types::SPACE_RECOVERY,
    summary: "free the database of an etcd that hit its quota (NOSPACE, the cluster is read-only) or is close to it: compact, defragment each member (followers first, the leader last), disarm NOSPACE, check that writes work",
    when: "etcd raised the NOSPACE alarm (writes fail with \"mvcc: database space exceeded\", kube-apiserver cannot write) or a member's database is at 80% or more of its quota (`spec.etcd.quota`, 8Gi by default). Reads keep working and etcd-druid may well show every condition green: only etcd's alarm list and status tell. When the live data itself needs more room, the run says so at the end and suggests a larger `spec.etcd.quota`; it never edits the spec.",
    refuses: &[
        "the cluster has no quorum (compaction and disarming need it)",
        "a member is not ready (defragmenting another could lose quorum)",
        "no NOSPACE alarm is raised and every database is below 80% of the quota, unless --force",
        "a member's etcd cannot be reached (its route, the Etcd's client TLS): the first step reads every member before anything changes",
        "no terminal and no --yes (the whole plan is confirmed by typing the Etcd name before the first change)",
        "any API call of the plan is forbidden by RBAC (SelfSubjectAccessReview pre-flight)",
    ],
    data_loss: "No key and no current value: compaction discards the older revisions of every key (a watch or read at an older revision fails with \"required revision has been compacted\"). Each member is unavailable while it is defragmented, one at a time.",
    source: "etcd maintenance guide, \"Space quota\" and \"Defragmentation\" (etcd-io/website content/en/docs/v3.5/op-guide/maintenance.md); etcd-druid's maintenance order (leader last)",
    needs_backup: false,
};

/// Every runbook, in `runbook list` order.
pub const ALL: [Runbook; 5] = [QUORUM_LOSS_RECOVERY, MEMBER_RESTORE, CERT_RENEWAL, MACHINE_REPLACEMENT, SPACE_RECOVERY];

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
            RunbookId::CertificateRenewal => Arc::new(CertificateRenewal),
            RunbookId::MachineReplacement => Arc::new(MachineForceDeletion),
            RunbookId::SpaceRecovery => Arc::new(SpaceRecovery),
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
            RunbookId::CertificateRenewal => a.extend([
                Access::new("list", "cert-manager.io", "certificates"),
                Access::new("get", "cert-manager.io", "certificates"),
                Access::sub("update", "cert-manager.io", "certificates", "status"),
                Access::new("delete", "", "pods"),
                Access::new("get", "", "secrets"),
            ]),
            // The deletion itself (of the Machine, possibly in another cluster, or of / on the Node, as the MCM
            // release asks) is checked where it happens once the method is known (`runbook machine-replacement`).
            RunbookId::MachineReplacement => a.extend([
                Access::new("get", "", "nodes"),
                Access::new("list", "", "nodes"),
                Access::new("list", "", "pods"),
                Access::new("list", "policy", "poddisruptionbudgets"),
                Access::new("list", "druid.gardener.cloud", "etcds"),
            ]),
            // etcd itself is reached through the pod's route: its annotation, the cluster DNS, or a port-forward
            // (`create pods/portforward`, needed only outside the cluster, so not demanded here: the first step
            // reads every member before anything changes, and says so when the route is closed).
            RunbookId::SpaceRecovery => a.extend([Access::new("get", "", "secrets")]),
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
