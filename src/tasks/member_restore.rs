//! `SingleMemberRestoreTask` *(druidctl)*: one failed member of a quorate multi-member Etcd comes back
//! empty and rejoins (seeds/004 8008-8040): its PVC and pod are deleted, the StatefulSet recreates them,
//! and the backup-restore sidecar removes the old member, adds the new one as a learner and promotes it
//! once in sync. Quorum is kept throughout; it does not cover a majority failure or a network partition.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

use super::config::{ConfigError, Fields, parse_yaml};
use super::preconditions::Facts;
use super::quorum_loss::{EtcdRef, WaitMemberReady, cluster_formed_problems};
use super::step::{Readiness, Step, StepContext, StepError, StepFuture};
use super::{TaskKind, TaskPlan};
use crate::api::Etcd;
use crate::api::task::types;

/// Journal key: uid of the member's PVC before it was deleted.
pub const JOURNAL_OLD_PVC_UID: &str = "memberPvcUid";
/// Journal key: set once the member's PVC and pod were deleted.
pub const JOURNAL_DATA_DELETED: &str = "memberDataDeletedAt";

/// The task type.
pub struct SingleMemberRestore;

/// The parsed config: `member: <pod name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRestorePlan {
    /// Pod (= member) name, e.g. `etcd-main-2`.
    pub member: String,
}

impl TaskKind for SingleMemberRestore {
    fn type_name(&self) -> &'static str {
        types::SINGLE_MEMBER_RESTORE
    }
    fn summary(&self) -> &'static str {
        "restore one failed member of a quorate multi-member etcd: it restarts empty and rejoins as a learner (config: `member: <pod>`)"
    }
    fn parse(&self, config: Option<&str>) -> Result<Arc<dyn TaskPlan>, ConfigError> {
        let v = parse_yaml(config)?;
        let f = Fields::new(&v, "config", &["member"])?;
        let member = f.required("member")?.as_str().map(String::from).unwrap_or_default();
        Ok(Arc::new(MemberRestorePlan { member }))
    }
}

/// The config text for restoring `member`.
pub fn config_for(member: &str) -> String {
    format!("member: {member}\n")
}

/// Preconditions: multi-member, quorate, `member` not ready and the only member that is not ready.
pub fn member_restore_preconditions(member: &str, facts: &Facts) -> Result<(), String> {
    let q = &facts.quorum;
    if q.members <= 1 {
        return Err(
            "the etcd has a single member; it restores itself from its backups, there is no other member to rejoin"
                .into(),
        );
    }
    if !q.quorate {
        return Err(format!(
            "the etcd cluster has no quorum ({} of {} members ready, {} needed); use the quorum-loss-recovery runbook instead",
            q.ready, q.members, q.needed
        ));
    }
    if !facts.unready_members.iter().any(|m| m == member) {
        return Err(format!("member {member} is healthy; restoring it would throw away a good copy of the data"));
    }
    let others: Vec<&String> = facts.unready_members.iter().filter(|m| *m != member).collect();
    if !others.is_empty() {
        return Err(format!(
            "other members are not ready either ({}); restoring {member} now would put quorum at risk",
            others.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(())
}

fn ordinal(etcd: &Etcd, member: &str) -> Option<u32> {
    let name = etcd.metadata.name.as_deref().unwrap_or_default();
    let i: u32 = member.strip_prefix(name)?.strip_prefix('-')?.parse().ok()?;
    (i < etcd.spec.replicas.max(0) as u32).then_some(i)
}

impl TaskPlan for MemberRestorePlan {
    fn duplicate_key(&self) -> String {
        format!("{}/{}", types::SINGLE_MEMBER_RESTORE, self.member)
    }
    fn preconditions(&self, facts: &Facts) -> Result<(), String> {
        member_restore_preconditions(&self.member, facts)
    }
    fn steps(&self, etcd: &Etcd) -> Vec<Box<dyn Step>> {
        let e = EtcdRef::of(etcd);
        let i = ordinal(etcd, &self.member).unwrap_or(u32::MAX);
        vec![
            Box::new(DeleteMemberData { e: e.clone(), ordinal: i }),
            Box::new(WaitMemberReady { e: e.clone(), ordinal: i }),
            Box::new(VerifyAllMembersReady(e)),
        ]
    }
    fn config_json(&self) -> Value {
        json!({"member": self.member})
    }
    fn named_member(&self) -> Option<&str> {
        Some(&self.member)
    }
}

/// Whether `member` names a member of `etcd` (`E-<i>` with `i < spec.replicas`).
pub fn is_member_of(etcd: &Etcd, member: &str) -> bool {
    ordinal(etcd, member).is_some()
}

/// Deletes the member's PVC and pod: the StatefulSet recreates both, empty.
struct DeleteMemberData {
    e: EtcdRef,
    ordinal: u32,
}

impl DeleteMemberData {
    async fn pvc_uid(&self, cx: &StepContext) -> Result<Option<String>, StepError> {
        let name = self.e.names.pvc(self.ordinal);
        let api: Api<PersistentVolumeClaim> = Api::namespaced(cx.client.clone(), cx.namespace());
        let pvc = api
            .get_opt(&name)
            .await
            .map_err(|e| StepError::from_kube(&format!("reading persistentvolumeclaim {name}"), e))?;
        Ok(pvc.filter(|p| p.metadata.deletion_timestamp.is_none()).and_then(|p| p.metadata.uid))
    }
}

impl Step for DeleteMemberData {
    fn name(&self) -> String {
        "DeleteMemberData".into()
    }
    fn description(&self) -> String {
        format!(
            "delete PVC {} and pod {}: the member restarts with an empty volume, its sidecar removes the old member, adds it back as a learner and promotes it once in sync",
            self.e.names.pvc(self.ordinal),
            self.e.names.pod(self.ordinal)
        )
    }
    fn destructive(&self) -> bool {
        true
    }
    fn kubectl(&self) -> Vec<String> {
        vec![
            format!("kubectl delete pvc {} --wait=false", self.e.names.pvc(self.ordinal)),
            format!("kubectl delete pod {}", self.e.names.pod(self.ordinal)),
        ]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(60)
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move {
            if self.ordinal == u32::MAX {
                return Err(StepError::Permanent(format!("the member is not one of etcd {}'s members", self.e.name)));
            }
            if cx.journal(JOURNAL_DATA_DELETED).is_some() {
                return Ok(true);
            }
            // Deleted before the journal was written: the PVC now is another one (or none yet).
            let recorded = cx.journal(JOURNAL_OLD_PVC_UID).and_then(|v| v.as_str().map(String::from));
            Ok(recorded.is_some() && self.pvc_uid(cx).await? != recorded)
        }
        .boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            if cx.journal(JOURNAL_OLD_PVC_UID).is_none() {
                let uid = self.pvc_uid(cx).await?;
                cx.record(JOURNAL_OLD_PVC_UID, uid.map(Value::String).unwrap_or(Value::Null)).await?;
            }
            let pvc = self.e.names.pvc(self.ordinal);
            let pod = self.e.names.pod(self.ordinal);
            let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(cx.client.clone(), cx.namespace());
            match pvcs.delete(&pvc, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(StepError::from_kube(&format!("deleting persistentvolumeclaim {pvc}"), e)),
            }
            let pods: Api<Pod> = Api::namespaced(cx.client.clone(), cx.namespace());
            match pods.delete(&pod, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(StepError::from_kube(&format!("deleting pod {pod}"), e)),
            }
            cx.record(JOURNAL_DATA_DELETED, json!(jiff::Timestamp::now().to_string())).await
        }
        .boxed()
    }
    fn verify<'a>(&'a self, _cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move { Ok(Readiness::Ready) }.boxed()
    }
}

/// The member is promoted (its lease says `:Member`/`:Leader`) and every member is ready.
struct VerifyAllMembersReady(EtcdRef);

impl Step for VerifyAllMembersReady {
    fn name(&self) -> String {
        "VerifyAllMembersReady".into()
    }
    fn description(&self) -> String {
        format!(
            "verify: all {} members ready and promoted (every member lease renewed as :Leader or :Member), etcd {} Ready",
            self.0.replicas, self.0.name
        )
    }
    fn kubectl(&self) -> Vec<String> {
        vec![
            format!("kubectl get etcd {}", self.0.name),
            format!("kubectl get lease -l app.kubernetes.io/part-of={}", self.0.name),
        ]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(180)
    }
    fn poll_interval(&self) -> Duration {
        Duration::from_millis(250)
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            let problems = cluster_formed_problems(cx, &self.0).await?;
            Ok(if problems.is_empty() { Readiness::Ready } else { Readiness::NotReady(problems.join("; ")) })
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{Quorum, Verdict};

    fn facts(members: u32, ready: u32, unready: &[&str]) -> Facts {
        Facts {
            quorum: Quorum::of(members, ready),
            verdict: Verdict::Degraded,
            backups_enabled: true,
            unready_members: unready.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn restore_is_refused_for_a_healthy_member_lost_quorum_or_a_second_failure() {
        assert!(member_restore_preconditions("e-2", &facts(3, 3, &[])).unwrap_err().contains("healthy"));
        assert!(member_restore_preconditions("e-2", &facts(3, 1, &["e-1", "e-2"])).unwrap_err().contains("no quorum"));
        assert!(
            member_restore_preconditions("e-2", &facts(5, 3, &["e-1", "e-2"])).unwrap_err().contains("quorum at risk")
        );
        assert!(member_restore_preconditions("e-0", &facts(1, 0, &["e-0"])).unwrap_err().contains("single member"));
        assert!(member_restore_preconditions("e-2", &facts(3, 2, &["e-2"])).is_ok());
    }

    #[test]
    fn config_names_the_member() {
        let plan = SingleMemberRestore.parse(Some(&config_for("etcd-main-2"))).unwrap();
        assert_eq!(plan.config_json(), json!({"member": "etcd-main-2"}));
        assert!(SingleMemberRestore.parse(None).is_err());
    }
}
