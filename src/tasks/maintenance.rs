//! `OnDemandMaintenanceTask` (DEP-05): etcd compaction and/or defragmentation now. Members are defragmented
//! one at a time, followers first and the leader last, and a member is only taken when every member is ready,
//! so at most one member is ever unavailable.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use kube::api::Api;
use serde_json::{Value, json};

use super::config::{ConfigError, Fields, parse_yaml};
use super::etcd_access;
use super::preconditions::{Facts, require_all_members_ready, require_quorum};
use super::step::{Readiness, Step, StepContext, StepError, StepFuture};
use super::{TaskKind, TaskPlan};
use crate::api::Etcd;
use crate::api::task::types;

/// The parsed config (`maintenanceType: {etcdCompaction, etcdDefragmentation}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaintenanceConfig {
    /// Compact the etcd keyspace up to the current revision.
    pub etcd_compaction: bool,
    /// Defragment every member.
    pub etcd_defragmentation: bool,
}

/// Parses the config; at least one operation must be requested.
pub fn parse_config(config: Option<&str>) -> Result<MaintenanceConfig, ConfigError> {
    let v = parse_yaml(config)?;
    let root = Fields::new(&v, "config", &["maintenanceType"])?;
    let Some(ops) = root.nested("maintenanceType", &["etcdCompaction", "etcdDefragmentation"])? else {
        return Err(ConfigError::Missing { path: "config.maintenanceType".into() });
    };
    let c = MaintenanceConfig {
        etcd_compaction: ops.bool("etcdCompaction")?.unwrap_or(false),
        etcd_defragmentation: ops.bool("etcdDefragmentation")?.unwrap_or(false),
    };
    if !c.etcd_compaction && !c.etcd_defragmentation {
        return Err(ConfigError::WrongType {
            path: "config.maintenanceType".into(),
            expected: "etcdCompaction and/or etcdDefragmentation set to true".into(),
            found: "neither".into(),
        });
    }
    Ok(c)
}

/// The task type.
pub struct OnDemandMaintenance;

impl TaskKind for OnDemandMaintenance {
    fn type_name(&self) -> &'static str {
        types::ON_DEMAND_MAINTENANCE
    }
    fn summary(&self) -> &'static str {
        "etcd compaction and/or defragmentation (config: `maintenanceType: {etcdCompaction: true, etcdDefragmentation: true}`)"
    }
    fn parse(&self, config: Option<&str>) -> Result<Arc<dyn TaskPlan>, ConfigError> {
        Ok(Arc::new(parse_config(config)?))
    }
}

/// A member in defragmentation order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRef {
    /// Member name (as in `status.members`).
    pub name: String,
    /// Pod name.
    pub pod: String,
}

/// Defragmentation order: followers by name, then the leader (DEP-05 maintenance; never the leader first,
/// so leadership moves at most once).
pub fn defragmentation_order(etcd: &Etcd) -> Vec<MemberRef> {
    let prefix = etcd.spec.member_name_prefix.clone().map(|p| format!("{p}-"));
    let pod_of = |name: &str| prefix.as_deref().and_then(|p| name.strip_prefix(p)).unwrap_or(name).to_string();
    let members = etcd.status.as_ref().map(|s| s.members.clone()).unwrap_or_default();
    if members.is_empty() {
        let names = etcd.managed_names();
        let n = u32::try_from(etcd.spec.replicas.max(0)).unwrap_or(0);
        return (0..n).map(|i| MemberRef { name: names.pod(i), pod: names.pod(i) }).collect();
    }
    let mut followers: Vec<&crate::api::etcd::EtcdMemberStatus> =
        members.iter().filter(|m| m.role.as_deref() != Some("Leader")).collect();
    followers.sort_by(|a, b| a.name.cmp(&b.name));
    let leaders = members.iter().filter(|m| m.role.as_deref() == Some("Leader"));
    followers.into_iter().chain(leaders).map(|m| MemberRef { name: m.name.clone(), pod: pod_of(&m.name) }).collect()
}

impl TaskPlan for MaintenanceConfig {
    fn duplicate_key(&self) -> String {
        // DEP-05: no duplicate task running with the same maintenanceType.
        format!(
            "{}/compaction={},defragmentation={}",
            types::ON_DEMAND_MAINTENANCE,
            self.etcd_compaction,
            self.etcd_defragmentation
        )
    }
    fn preconditions(&self, facts: &Facts) -> Result<(), String> {
        require_quorum(facts)?;
        if self.etcd_defragmentation {
            require_all_members_ready(facts)?;
        }
        Ok(())
    }
    fn steps(&self, etcd: &Etcd) -> Vec<Box<dyn Step>> {
        let mut steps: Vec<Box<dyn Step>> = Vec::new();
        if self.etcd_compaction {
            steps.push(Box::new(Compact));
        }
        if self.etcd_defragmentation {
            for m in defragmentation_order(etcd) {
                steps.push(Box::new(Defragment { member: m }));
            }
        }
        steps
    }
    fn config_json(&self) -> Value {
        json!({"maintenanceType": {"etcdCompaction": self.etcd_compaction, "etcdDefragmentation": self.etcd_defragmentation}})
    }
}

struct Compact;

/// The member whose etcd is asked to compact: the leader when etcd-druid names one, else the first member.
/// Compaction is a raft proposal, so any member would do; the leader saves a forward.
fn compaction_member(etcd: &Etcd) -> Option<MemberRef> {
    defragmentation_order(etcd).pop()
}

impl Step for Compact {
    fn name(&self) -> String {
        "CompactEtcd".into()
    }
    fn description(&self) -> String {
        "compact the etcd keyspace up to the current revision (etcd's KV API, on the leading member)".into()
    }
    fn kubectl(&self) -> Vec<String> {
        vec!["etcdctl compact --physical $(etcdctl endpoint status -w json | jq '.[0].Status.header.revision')".into()]
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(cx.journal("compactedAt").is_some()) }.boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let etcd = fresh_etcd(cx).await?;
            let member = compaction_member(&etcd)
                .ok_or_else(|| StepError::Permanent("the etcd has no members to compact through".into()))?;
            let mut conn = etcd_access::connect(&cx.client, &etcd, &member.pod).await?;
            let revision = etcd_access::compact(&mut conn).await?;
            cx.record("compactedAt", json!(revision)).await
        }
        .boxed()
    }
    fn verify<'a>(&'a self, _cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move { Ok(Readiness::Ready) }.boxed()
    }
}

struct Defragment {
    member: MemberRef,
}

impl Defragment {
    fn key(&self) -> String {
        format!("defragmented/{}", self.member.name)
    }
}

async fn fresh_etcd(cx: &StepContext) -> Result<Etcd, StepError> {
    let api: Api<Etcd> = Api::namespaced(cx.client.clone(), cx.namespace());
    api.get(cx.etcd_name()).await.map_err(|e| StepError::from_kube("reading the etcd", e))
}

/// Members of `etcd` that are not `Ready` (by `status.members`), or `None` when the status lists none.
pub fn unready_members(etcd: &Etcd) -> Vec<String> {
    let members = etcd.status.as_ref().map(|s| s.members.clone()).unwrap_or_default();
    members.iter().filter(|m| m.status != "Ready").map(|m| m.name.clone()).collect()
}

impl Step for Defragment {
    fn name(&self) -> String {
        format!("Defragment[{}]", self.member.name)
    }
    fn description(&self) -> String {
        format!(
            "defragment member {} once every other member is ready, then wait until it is ready again",
            self.member.name
        )
    }
    fn kubectl(&self) -> Vec<String> {
        vec![format!("kubectl exec {} -c etcd -- etcdctl defrag", self.member.pod)]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(600)
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(cx.journal(&self.key()).is_some()) }.boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            // Never more than one member unavailable: everyone must be ready before this one goes.
            let etcd = fresh_etcd(cx).await?;
            let unready = unready_members(&etcd);
            if !unready.is_empty() {
                return Err(StepError::Transient(format!(
                    "not defragmenting {} while {} not ready",
                    self.member.name,
                    unready.join(", ")
                )));
            }
            // This member's own etcd (defragmentation is per member), the leader too.
            let mut conn = etcd_access::connect(&cx.client, &etcd, &self.member.pod).await?;
            let (before, after) = etcd_access::defragment(&mut conn).await?;
            cx.record(
                &self.key(),
                json!({"dbSizeBefore": before, "dbSizeAfter": after, "at": jiff::Timestamp::now().to_string()}),
            )
            .await
        }
        .boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            let etcd = fresh_etcd(cx).await?;
            Ok(if unready_members(&etcd).contains(&self.member.name) {
                Readiness::NotReady(format!("member {} is not ready again yet", self.member.name))
            } else {
                Readiness::Ready
            })
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn etcd(members: Value) -> Etcd {
        serde_json::from_value(json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "etcd-main", "namespace": "ns"},
            "spec": {"replicas": 3, "labels": {}, "etcd": {}, "backup": {}},
            "status": {"members": members},
        }))
        .unwrap()
    }

    #[test]
    fn config_schema() {
        let c = parse_config(Some("maintenanceType:\n  etcdCompaction: true\n")).unwrap();
        assert!(c.etcd_compaction && !c.etcd_defragmentation);
        assert_eq!(parse_config(None).unwrap_err().to_string(), "config.maintenanceType: required field is missing");
        assert!(parse_config(Some("maintenanceType: {}")).is_err(), "nothing requested");
        assert_eq!(
            parse_config(Some("maintenanceType: {etcdDefragmentation: sure}")).unwrap_err().to_string(),
            "config.maintenanceType.etcdDefragmentation: expected a boolean, found string \"sure\""
        );
        assert!(
            parse_config(Some("maintenanceType: {defrag: true}"))
                .unwrap_err()
                .to_string()
                .contains("maintenanceType.defrag")
        );
    }

    #[test]
    fn leader_is_defragmented_last() {
        let e = etcd(json!([
            {"name": "etcd-main-1", "role": "Leader", "status": "Ready"},
            {"name": "etcd-main-2", "role": "Member", "status": "Ready"},
            {"name": "etcd-main-0", "role": "Member", "status": "Ready"},
        ]));
        let order: Vec<String> = defragmentation_order(&e).into_iter().map(|m| m.name).collect();
        assert_eq!(order, ["etcd-main-0", "etcd-main-2", "etcd-main-1"]);
        let plan = parse_config(Some("maintenanceType: {etcdCompaction: true, etcdDefragmentation: true}")).unwrap();
        let names: Vec<String> = plan.steps(&e).iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            ["CompactEtcd", "Defragment[etcd-main-0]", "Defragment[etcd-main-2]", "Defragment[etcd-main-1]"]
        );
    }

    #[test]
    fn defragmentation_requires_every_member_ready_but_compaction_only_quorum() {
        let both = parse_config(Some("maintenanceType: {etcdCompaction: true, etcdDefragmentation: true}")).unwrap();
        let compaction = parse_config(Some("maintenanceType: {etcdCompaction: true}")).unwrap();
        let degraded = Facts {
            quorum: crate::health::Quorum::of(3, 2),
            verdict: crate::health::Verdict::Degraded,
            backups_enabled: true,
            unready_members: vec!["etcd-main-2".into()],
        };
        assert!(compaction.preconditions(&degraded).is_ok());
        assert!(both.preconditions(&degraded).unwrap_err().contains("etcd-main-2"));
        assert_ne!(both.duplicate_key(), compaction.duplicate_key());
    }
}
