//! `SpaceRecoveryTask` *(druidctl)*: free the backend of an etcd whose database reached its quota (the
//! `NOSPACE` alarm: the whole cluster is read-only) or is close to it. etcd's own maintenance guide
//! (etcd-io/website `content/en/docs/v3.5/op-guide/maintenance.md`, "Space quota") gives the way out, which the
//! steps follow: record what each member says, compact the keyspace to the current revision, defragment each
//! member (one at a time, followers first, the leader last), disarm `NOSPACE`, and check that a write succeeds.
//!
//! Every read and write goes to etcd itself through [`super::etcd_access`] (the member's route and the Etcd's
//! client TLS). The steps keep their small state in the task's journal: the sizes before, the compacted
//! revision, which member each defragmentation step took. A run killed at any point resumes without
//! defragmenting a member twice or two members at once.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use kube::api::Api;
use serde_json::{Value, json};

use super::config::{ConfigError, expect_none};
use super::etcd_access::{self, Alarm, MemberSpace, WriteProbeError};
use super::maintenance::{defragmentation_order, unready_members};
use super::preconditions::{Facts, require_all_members_ready, require_quorum};
use super::step::{Readiness, Step, StepContext, StepError, StepFuture};
use super::{TaskKind, TaskPlan};
use crate::api::Etcd;
use crate::api::task::types;

/// A database at or above this share of its quota counts as nearly full (the runbook starts without `--force`,
/// and a result still above it is reported with a larger quota to set).
pub const NEARLY_FULL_PERCENT: u64 = 80;

/// Journal key: what each member said before anything changed.
pub const JOURNAL_BEFORE: &str = "spaceBefore";
/// Journal key: the revision the keyspace was compacted to.
pub const JOURNAL_COMPACTED: &str = "compactedRevision";
/// Journal key: what each member said after the recovery.
pub const JOURNAL_AFTER: &str = "spaceAfter";

/// Journal key of defragmentation step `k` (1-based): the member it defragmented and the sizes.
fn defrag_key(k: usize) -> String {
    format!("defragmented/{k}")
}

/// The task type.
pub struct SpaceRecovery;

/// The parsed (empty) config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceRecoveryPlan;

impl TaskKind for SpaceRecovery {
    fn type_name(&self) -> &'static str {
        types::SPACE_RECOVERY
    }
    fn summary(&self) -> &'static str {
        "free the backend of a full (NOSPACE) or nearly full etcd: compact, defragment each member (leader last), disarm NOSPACE, check a write (no config)"
    }
    fn parse(&self, config: Option<&str>) -> Result<Arc<dyn TaskPlan>, ConfigError> {
        expect_none(config)?;
        Ok(Arc::new(SpaceRecoveryPlan))
    }
}

impl TaskPlan for SpaceRecoveryPlan {
    fn duplicate_key(&self) -> String {
        types::SPACE_RECOVERY.into()
    }
    fn preconditions(&self, facts: &Facts) -> Result<(), String> {
        // Compaction and the alarm need quorum; defragmenting one member while another is down could lose it.
        require_quorum(facts)?;
        require_all_members_ready(facts)
    }
    fn steps(&self, etcd: &Etcd) -> Vec<Box<dyn Step>> {
        let pods = member_pods(etcd);
        // The order etcd-druid's view suggests now (the steps choose again by etcd's own view when they start).
        let known = etcd.status.as_ref().is_some_and(|s| !s.members.is_empty());
        let planned = if known { defragmentation_order(etcd) } else { Vec::new() };
        let n = pods.len();
        let mut steps: Vec<Box<dyn Step>> = vec![
            Box::new(RecordSpace { pods: pods.clone() }),
            Box::new(CompactToCurrentRevision { pods: pods.clone() }),
        ];
        for k in 1..=n {
            let planned = planned.get(k - 1).map(|m| m.pod.clone()).unwrap_or_default();
            steps.push(Box::new(DefragmentMember { k, n, pods: pods.clone(), planned }));
        }
        steps.push(Box::new(DisarmNoSpace { pods: pods.clone() }));
        steps.push(Box::new(VerifyWrite { pods }));
        steps
    }
    fn config_json(&self) -> Value {
        json!({})
    }
}

/// The member pods of `etcd`, by ordinal.
fn member_pods(etcd: &Etcd) -> Vec<String> {
    let names = etcd.managed_names();
    (0..u32::try_from(etcd.spec.replicas.max(0)).unwrap_or(0)).map(|i| names.pod(i)).collect()
}

/// What every member said, by pod, with the cluster's alarms and the quota.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpaceReading {
    /// The quota (`spec.etcd.quota`, etcd-druid's 8Gi when unset), bytes.
    pub quota_bytes: u64,
    /// Each member, by pod.
    pub members: Vec<(String, MemberSpace)>,
    /// The alarms raised.
    pub alarms: Vec<Alarm>,
}

impl SpaceReading {
    /// Whether `NOSPACE` is raised.
    pub fn nospace(&self) -> bool {
        self.alarms.iter().any(|a| a.alarm == "NOSPACE")
    }

    /// The pod of member `id`, else its hexadecimal ID.
    pub fn pod_of(&self, id: u64) -> String {
        self.members.iter().find(|(_, m)| m.member_id == id).map(|(p, _)| p.clone()).unwrap_or(format!("{id:x}"))
    }

    /// The largest database.
    fn largest(&self) -> Option<&(String, MemberSpace)> {
        self.members.iter().max_by_key(|(_, m)| m.db_size)
    }
}

/// Reads every member's status and the alarms; a member that does not answer is an error naming it.
pub async fn read_space(kube: &kube::Client, etcd: &Etcd) -> Result<SpaceReading, StepError> {
    let mut members = Vec::new();
    let mut alarms = None;
    for pod in member_pods(etcd) {
        let mut conn = etcd_access::connect(kube, etcd, &pod).await?;
        members.push((pod, etcd_access::member_space(&mut conn).await?));
        if alarms.is_none() {
            alarms = Some(etcd_access::alarms(&mut conn).await?);
        }
    }
    Ok(SpaceReading { quota_bytes: etcd.spec.etcd.quota_bytes(), members, alarms: alarms.unwrap_or_default() })
}

/// Why a space recovery of etcd `ns/name` would be refused without `--force` (no `NOSPACE`, every database
/// below [`NEARLY_FULL_PERCENT`] of the quota, or etcd unreadable), read from etcd now; `None` when it is called
/// for, when an unfinished run of it is to be continued (its own steps changed what this looks at), or when the
/// Etcd is not there (the runbook says so itself).
pub async fn refusal_without_force(kube: &kube::Client, ns: &str, name: &str) -> Option<String> {
    let etcd = Api::<Etcd>::namespaced(kube.clone(), ns).get_opt(name).await.ok().flatten()?;
    let tasks: Api<crate::api::EtcdOperatorTask> = Api::namespaced(kube.clone(), ns);
    let unfinished = tasks.list(&Default::default()).await.ok().is_some_and(|l| {
        l.items.iter().any(|t| t.spec.type_ == types::SPACE_RECOVERY && t.targets(ns, name) && !t.state().is_terminal())
    });
    if unfinished {
        return None;
    }
    match read_space(kube, &etcd).await {
        Ok(r) => recovery_needed(&r).err().map(|why| format!("etcd {ns}/{name} needs no space recovery: {why}")),
        Err(e) => Some(format!(
            "the database space of etcd {ns}/{name} cannot be read from etcd ({e}); nothing was changed (pass --force to start anyway)"
        )),
    }
}

/// `used` as a whole percentage of `quota`.
pub fn percent(used: i64, quota: u64) -> u64 {
    (u64::try_from(used.max(0)).unwrap_or(0) * 100).checked_div(quota).unwrap_or(0)
}

/// Bytes for a person: `16.00 MiB`.
pub fn bytes(n: i64) -> String {
    indicatif::HumanBytes(u64::try_from(n.max(0)).unwrap_or(0)).to_string()
}

/// Whether a space recovery is called for: `Err` (why not) when no `NOSPACE` is raised and every database is
/// below [`NEARLY_FULL_PERCENT`] of the quota.
pub fn recovery_needed(r: &SpaceReading) -> Result<(), String> {
    if r.nospace() {
        return Ok(());
    }
    let Some((pod, largest)) = r.largest() else { return Err("the etcd has no members".into()) };
    let p = percent(largest.db_size, r.quota_bytes);
    if p >= NEARLY_FULL_PERCENT {
        return Ok(());
    }
    Err(format!(
        "it has room to spare: no NOSPACE alarm is raised and the largest database ({pod}) is {} of the {} quota ({p}%, below {NEARLY_FULL_PERCENT}%); pass --force to compact and defragment anyway",
        bytes(largest.db_size),
        bytes(r.quota_bytes as i64)
    ))
}

/// The quota to suggest for a database of `db_size` bytes after defragmentation: at least twice its size (so it
/// is at most half full), rounded up to a power of two mebibytes, never below the current quota.
pub fn suggested_quota(db_size: i64, quota: u64) -> u64 {
    let needed = u64::try_from(db_size.max(0)).unwrap_or(0).saturating_mul(2).max(quota + 1);
    let mib = needed.div_ceil(1024 * 1024).next_power_of_two();
    mib * 1024 * 1024
}

/// The quota as a Kubernetes quantity (`32Mi`, `16Gi`).
pub fn quantity(bytes: u64) -> String {
    const GI: u64 = 1024 * 1024 * 1024;
    const MI: u64 = 1024 * 1024;
    if bytes.is_multiple_of(GI) { format!("{}Gi", bytes / GI) } else { format!("{}Mi", bytes.div_ceil(MI)) }
}

/// The warning for members whose database is still at or above [`NEARLY_FULL_PERCENT`] of the quota after the
/// recovery, with a quota that leaves room; `None` when every member has room.
pub fn still_full_warning(after: &SpaceReading, etcd: &str) -> Option<String> {
    let full: Vec<&(String, MemberSpace)> =
        after.members.iter().filter(|(_, m)| percent(m.db_size, after.quota_bytes) >= NEARLY_FULL_PERCENT).collect();
    let (_, largest) = full.iter().max_by_key(|(_, m)| m.db_size)?;
    let names: Vec<String> = full
        .iter()
        .map(|(p, m)| format!("{p} {} ({}%)", bytes(m.db_size), percent(m.db_size, after.quota_bytes)))
        .collect();
    let suggestion = suggested_quota(largest.db_size, after.quota_bytes);
    Some(format!(
        "after defragmentation the database still uses {NEARLY_FULL_PERCENT}% or more of the {} quota ({}): the live data needs more room. Raise spec.etcd.quota of etcd {etcd} to {} or more (etcd-druid rolls the members with the new quota-backend-bytes); this runbook does not edit the spec",
        bytes(after.quota_bytes as i64),
        names.join(", "),
        quantity(suggestion)
    ))
}

/// The space each member got back, one line each, from the readings before and after.
pub fn freed_lines(before: &SpaceReading, after: &SpaceReading) -> Vec<String> {
    let mut lines = Vec::new();
    for (pod, a) in &after.members {
        let Some((_, b)) = before.members.iter().find(|(p, _)| p == pod) else { continue };
        lines.push(format!(
            "{pod}: database {} → {} ({} freed; {}% of the {} quota)",
            bytes(b.db_size),
            bytes(a.db_size),
            bytes(b.db_size - a.db_size),
            percent(a.db_size, after.quota_bytes),
            bytes(after.quota_bytes as i64)
        ));
    }
    lines
}

fn reading_of(cx: &StepContext, key: &str) -> Option<SpaceReading> {
    cx.journal(key).and_then(|v| serde_json::from_value(v).ok())
}

async fn fresh_etcd(cx: &StepContext) -> Result<Etcd, StepError> {
    let api: Api<Etcd> = Api::namespaced(cx.client.clone(), cx.namespace());
    api.get(cx.etcd_name()).await.map_err(|e| StepError::from_kube("reading the etcd", e))
}

/// Connects to the first member that answers (compaction, alarms and writes are cluster-wide).
async fn any_member(cx: &StepContext, pods: &[String]) -> Result<etcd_access::MemberConnection, StepError> {
    let etcd = fresh_etcd(cx).await?;
    let mut last = StepError::Permanent("the etcd has no members".into());
    for pod in pods {
        match etcd_access::connect(&cx.client, &etcd, pod).await {
            Ok(mut c) => match etcd_access::member_space(&mut c).await {
                Ok(_) => return Ok(c),
                Err(e) => last = e,
            },
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Step 1: each member's database size, size in use, revision, and the alarms, into the journal.
struct RecordSpace {
    pods: Vec<String>,
}

impl Step for RecordSpace {
    fn name(&self) -> String {
        "RecordSpace".into()
    }
    fn description(&self) -> String {
        format!(
            "record each member's database size, size in use and revision, and the alarms raised ({})",
            self.pods.join(", ")
        )
    }
    fn kubectl(&self) -> Vec<String> {
        vec!["etcdctl endpoint status --cluster -w table".into(), "etcdctl alarm list".into()]
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(reading_of(cx, JOURNAL_BEFORE).is_some()) }.boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let etcd = fresh_etcd(cx).await?;
            let r = read_space(&cx.client, &etcd).await?;
            cx.record(JOURNAL_BEFORE, serde_json::to_value(&r).expect("reading serializes")).await
        }
        .boxed()
    }
    fn verify<'a>(&'a self, _cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move { Ok(Readiness::Ready) }.boxed()
    }
    fn report(&self, cx: &StepContext) -> Vec<String> {
        let Some(r) = reading_of(cx, JOURNAL_BEFORE) else { return vec![] };
        let mut lines: Vec<String> = r
            .members
            .iter()
            .map(|(pod, m)| {
                format!(
                    "{pod}{}: database {} ({}% of the {} quota), in use {}, revision {}",
                    if m.is_leader() { " (leader)" } else { "" },
                    bytes(m.db_size),
                    percent(m.db_size, r.quota_bytes),
                    bytes(r.quota_bytes as i64),
                    bytes(m.db_size_in_use),
                    m.revision
                )
            })
            .collect();
        let alarms: Vec<String> =
            r.alarms.iter().map(|a| format!("{} on {}", a.alarm, r.pod_of(a.member_id))).collect();
        lines.push(if alarms.is_empty() { "alarms: none".into() } else { format!("alarms: {}", alarms.join(", ")) });
        lines
    }
}

/// Step 2: etcd's own compaction of the keyspace up to the current revision.
struct CompactToCurrentRevision {
    pods: Vec<String>,
}

impl Step for CompactToCurrentRevision {
    fn name(&self) -> String {
        "CompactToCurrentRevision".into()
    }
    fn description(&self) -> String {
        "compact the keyspace up to the current revision (etcd's KV Compact, physical): the history of every key before it is discarded, the space it held is free for defragmentation".into()
    }
    fn destructive(&self) -> bool {
        // The older revisions of every key are gone for good (a watch from before them fails with ErrCompacted).
        true
    }
    fn kubectl(&self) -> Vec<String> {
        vec!["etcdctl compact --physical $(etcdctl endpoint status -w json | jq '.[0].Status.header.revision')".into()]
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(cx.journal(JOURNAL_COMPACTED).is_some()) }.boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let mut conn = any_member(cx, &self.pods).await?;
            // Compacting a revision that is compacted already counts as done (a run killed right after it).
            let revision = etcd_access::compact(&mut conn).await?;
            cx.record(JOURNAL_COMPACTED, json!(revision)).await
        }
        .boxed()
    }
    fn verify<'a>(&'a self, _cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move { Ok(Readiness::Ready) }.boxed()
    }
    fn report(&self, cx: &StepContext) -> Vec<String> {
        cx.journal(JOURNAL_COMPACTED).map(|r| vec![format!("compacted to revision {r}")]).unwrap_or_default()
    }
}

/// Which member a defragmentation step takes: one not yet defragmented, a follower while any is left (by pod
/// name), the leader last. `None` when every member is done.
pub fn next_to_defragment(members: &[(String, MemberSpace)], done: &[String]) -> Option<String> {
    let mut left: Vec<&(String, MemberSpace)> = members.iter().filter(|(p, _)| !done.contains(p)).collect();
    left.sort_by_key(|(p, m)| (m.is_leader(), p.clone()));
    left.first().map(|(p, _)| p.clone())
}

/// Step 3 (one per member): defragment the next member, one at a time, followers first and the leader last.
struct DefragmentMember {
    /// 1-based position.
    k: usize,
    /// Members in all.
    n: usize,
    pods: Vec<String>,
    /// The member this step takes if the leader stays where etcd-druid sees it now (for the plan only).
    planned: String,
}

impl DefragmentMember {
    /// Members the earlier defragmentation steps took (from the journal).
    fn done(&self, cx: &StepContext) -> Vec<String> {
        (1..self.k)
            .filter_map(|j| cx.journal(&defrag_key(j)))
            .filter_map(|v| v["pod"].as_str().map(String::from))
            .collect()
    }
}

impl Step for DefragmentMember {
    fn name(&self) -> String {
        format!("Defragment[{}]", self.k)
    }
    fn description(&self) -> String {
        let which = if self.k == self.n { "the last member, the leader" } else { "the next follower" };
        let planned = if self.planned.is_empty() { String::new() } else { format!(" (now {})", self.planned) };
        format!(
            "defragment {which}{planned} — member {} of {}, chosen when the step starts by etcd's own view of the leader — once every other member answers, then wait until it answers again and has applied what the leader had committed",
            self.k, self.n
        )
    }
    fn kubectl(&self) -> Vec<String> {
        let pod = if self.planned.is_empty() { "POD" } else { &self.planned };
        vec![format!("kubectl exec {pod} -c etcd -- etcdctl defrag")]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(600)
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(cx.journal(&defrag_key(self.k)).is_some()) }.boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let etcd = fresh_etcd(cx).await?;
            // Never two members away at once: every member answers, and etcd-druid sees every member ready.
            let mut members = Vec::new();
            for pod in &self.pods {
                let mut conn = etcd_access::connect(&cx.client, &etcd, pod)
                    .await
                    .map_err(|e| StepError::Transient(format!("not defragmenting while {pod} does not answer: {e}")))?;
                members.push((pod.clone(), etcd_access::member_space(&mut conn).await?));
            }
            let unready = unready_members(&etcd);
            if !unready.is_empty() {
                return Err(StepError::Transient(format!("not defragmenting while {} not ready", unready.join(", "))));
            }
            let done = self.done(cx);
            let Some(pod) = next_to_defragment(&members, &done) else {
                return cx.record(&defrag_key(self.k), json!({"pod": Value::Null})).await;
            };
            let mut conn = etcd_access::connect(&cx.client, &etcd, &pod).await?;
            let (before, after) = etcd_access::defragment(&mut conn).await?;
            // What the leader had committed once this member is back: it must apply that much to count as healthy.
            let mut leader_index = 0;
            for p in &self.pods {
                if let Ok(mut c) = etcd_access::connect(&cx.client, &etcd, p).await
                    && let Ok(m) = etcd_access::member_space(&mut c).await
                    && m.is_leader()
                {
                    leader_index = m.raft_index;
                }
            }
            cx.record(
                &defrag_key(self.k),
                json!({"pod": pod, "dbSizeBefore": before, "dbSizeAfter": after, "leaderRaftIndex": leader_index,
                       "at": jiff::Timestamp::now().to_string()}),
            )
            .await
        }
        .boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            let Some(rec) = cx.journal(&defrag_key(self.k)) else {
                return Ok(Readiness::NotReady("the defragmentation is not recorded yet".into()));
            };
            let Some(pod) = rec["pod"].as_str() else { return Ok(Readiness::Ready) };
            let etcd = fresh_etcd(cx).await?;
            let mut conn = match etcd_access::connect(&cx.client, &etcd, pod).await {
                Ok(c) => c,
                Err(e) => return Ok(Readiness::NotReady(format!("{pod} does not answer yet: {e}"))),
            };
            let m = match etcd_access::member_space(&mut conn).await {
                Ok(m) => m,
                Err(e) => return Ok(Readiness::NotReady(format!("{pod} does not answer yet: {e}"))),
            };
            let committed = rec["leaderRaftIndex"].as_u64().unwrap_or(0);
            if m.raft_applied_index < committed {
                return Ok(Readiness::NotReady(format!(
                    "{pod} has applied raft index {} of the leader's {committed}",
                    m.raft_applied_index
                )));
            }
            if unready_members(&etcd).iter().any(|u| u == pod || u.ends_with(&format!("-{pod}"))) {
                return Ok(Readiness::NotReady(format!("etcd-druid does not see {pod} ready again yet")));
            }
            Ok(Readiness::Ready)
        }
        .boxed()
    }
    fn report(&self, cx: &StepContext) -> Vec<String> {
        let Some(rec) = cx.journal(&defrag_key(self.k)) else { return vec![] };
        let Some(pod) = rec["pod"].as_str() else { return vec!["every member was defragmented already".into()] };
        let (b, a) = (rec["dbSizeBefore"].as_i64().unwrap_or(0), rec["dbSizeAfter"].as_i64().unwrap_or(0));
        vec![format!("{pod}: database {} → {}", bytes(b), bytes(a))]
    }
}

/// Step 4: disarm `NOSPACE` (every member that raised it).
struct DisarmNoSpace {
    pods: Vec<String>,
}

impl DisarmNoSpace {
    async fn raised(&self, cx: &StepContext) -> Result<Vec<Alarm>, StepError> {
        let mut conn = any_member(cx, &self.pods).await?;
        Ok(etcd_access::alarms(&mut conn).await?.into_iter().filter(|a| a.alarm == "NOSPACE").collect())
    }
}

impl Step for DisarmNoSpace {
    fn name(&self) -> String {
        "DisarmNoSpace".into()
    }
    fn description(&self) -> String {
        "disarm the NOSPACE alarm of every member that raised it (etcd raises it again at the next write that does not fit the quota)".into()
    }
    fn kubectl(&self) -> Vec<String> {
        vec!["etcdctl alarm disarm".into()]
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(self.raised(cx).await?.is_empty()) }.boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let mut conn = any_member(cx, &self.pods).await?;
            let raised: Vec<Alarm> =
                etcd_access::alarms(&mut conn).await?.into_iter().filter(|a| a.alarm == "NOSPACE").collect();
            for a in raised {
                etcd_access::disarm_nospace(&mut conn, a.member_id).await?;
            }
            Ok(())
        }
        .boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            let raised = self.raised(cx).await?;
            Ok(if raised.is_empty() {
                Readiness::Ready
            } else {
                let ids: Vec<String> = raised.iter().map(|a| format!("{:x}", a.member_id)).collect();
                Readiness::NotReady(format!("NOSPACE is still raised by member {}", ids.join(", ")))
            })
        }
        .boxed()
    }
}

/// Step 5: a write succeeds (the probe key is deleted again); the sizes after, and the space freed.
struct VerifyWrite {
    pods: Vec<String>,
}

/// The key the write probe of `task` writes and deletes (outside Kubernetes' `/registry`).
pub fn probe_key(task: &str) -> String {
    format!("/druidctl/space-recovery/{task}")
}

impl Step for VerifyWrite {
    fn name(&self) -> String {
        "VerifyWrite".into()
    }
    fn description(&self) -> String {
        "write a probe key and delete it again (writes work), then report each member's database size and the space freed".into()
    }
    fn kubectl(&self) -> Vec<String> {
        vec![
            "etcdctl put /druidctl/space-recovery/probe x && etcdctl del /druidctl/space-recovery/probe".into(),
            "etcdctl endpoint status --cluster -w table".into(),
        ]
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let mut conn = any_member(cx, &self.pods).await?;
            match etcd_access::probe_write(&mut conn, &probe_key(cx.task_name())).await {
                Ok(()) => {}
                Err(WriteProbeError::NoSpace(e)) => {
                    let etcd = fresh_etcd(cx).await?;
                    let advice = read_space(&cx.client, &etcd)
                        .await
                        .ok()
                        .and_then(|r| still_full_warning(&r, cx.etcd_name()))
                        .unwrap_or_else(|| "raise spec.etcd.quota of the Etcd".into());
                    return Err(StepError::Permanent(format!("writes still fail ({e}); {advice}")));
                }
                Err(e @ WriteProbeError::Other(_)) => return Err(StepError::Transient(e.to_string())),
            }
            let etcd = fresh_etcd(cx).await?;
            let r = read_space(&cx.client, &etcd).await?;
            cx.record(JOURNAL_AFTER, serde_json::to_value(&r).expect("reading serializes")).await
        }
        .boxed()
    }
    fn verify<'a>(&'a self, _cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move { Ok(Readiness::Ready) }.boxed()
    }
    fn warnings(&self, cx: &StepContext) -> Vec<String> {
        reading_of(cx, JOURNAL_AFTER).and_then(|r| still_full_warning(&r, cx.etcd_name())).into_iter().collect()
    }
    fn report(&self, cx: &StepContext) -> Vec<String> {
        let mut lines = vec!["a write succeeded (the probe key is deleted again)".to_string()];
        if let (Some(b), Some(a)) = (reading_of(cx, JOURNAL_BEFORE), reading_of(cx, JOURNAL_AFTER)) {
            lines.extend(freed_lines(&b, &a));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: i64 = 1024 * 1024;

    fn member(id: u64, leader: u64, db: i64) -> MemberSpace {
        MemberSpace {
            member_id: id,
            leader,
            db_size: db,
            db_size_in_use: db / 2,
            revision: 100,
            raft_index: 10,
            raft_applied_index: 10,
        }
    }

    fn reading(dbs: &[i64], quota: u64, nospace: bool) -> SpaceReading {
        SpaceReading {
            quota_bytes: quota,
            members: dbs
                .iter()
                .enumerate()
                .map(|(i, d)| (format!("etcd-main-{i}"), member(i as u64 + 1, 2, *d)))
                .collect(),
            alarms: if nospace { vec![Alarm { member_id: 1, alarm: "NOSPACE".into() }] } else { vec![] },
        }
    }

    #[test]
    fn followers_are_defragmented_first_by_name_and_the_leader_last() {
        let members = reading(&[MI, MI, MI], 16 * MI as u64, false).members; // member 2 (etcd-main-1) leads
        assert_eq!(next_to_defragment(&members, &[]).as_deref(), Some("etcd-main-0"));
        assert_eq!(next_to_defragment(&members, &["etcd-main-0".into()]).as_deref(), Some("etcd-main-2"));
        let two = ["etcd-main-0".to_string(), "etcd-main-2".to_string()];
        assert_eq!(next_to_defragment(&members, &two).as_deref(), Some("etcd-main-1"));
        let all = ["etcd-main-0".into(), "etcd-main-1".into(), "etcd-main-2".into()];
        assert_eq!(next_to_defragment(&members, &all), None);
    }

    #[test]
    fn recovery_is_needed_for_nospace_or_a_nearly_full_database_only() {
        let quota = 100 * MI as u64;
        assert!(recovery_needed(&reading(&[10 * MI], quota, true)).is_ok(), "NOSPACE");
        assert!(recovery_needed(&reading(&[10 * MI, 80 * MI], quota, false)).is_ok(), "80%");
        let why = recovery_needed(&reading(&[10 * MI, 79 * MI], quota, false)).unwrap_err();
        assert!(why.contains("room to spare") && why.contains("etcd-main-1") && why.contains("--force"), "{why}");
        assert!(why.contains("79.00 MiB") && why.contains("100.00 MiB") && why.contains("79%"), "{why}");
    }

    #[test]
    fn the_suggested_quota_leaves_the_database_at_most_half_full_and_never_shrinks() {
        assert_eq!(suggested_quota(14 * MI, 16 * MI as u64), 32 * MI as u64);
        assert_eq!(suggested_quota(7 * 1024 * MI, 8 * 1024 * MI as u64), 16 * 1024 * MI as u64);
        assert_eq!(suggested_quota(MI, 16 * MI as u64), 32 * MI as u64, "never below the quota there is");
        assert_eq!(quantity(32 * MI as u64), "32Mi");
        assert_eq!(quantity(16 * 1024 * MI as u64), "16Gi");
    }

    #[test]
    fn a_database_still_nearly_full_names_the_spec_field_and_a_larger_quota() {
        let quota = 16 * MI as u64;
        assert_eq!(still_full_warning(&reading(&[2 * MI, 2 * MI], quota, false), "etcd-main"), None);
        let w = still_full_warning(&reading(&[14 * MI, 2 * MI], quota, false), "etcd-main").unwrap();
        assert!(
            w.contains("spec.etcd.quota") && w.contains("32Mi") && w.contains("etcd-main-0 14.00 MiB (87%)"),
            "{w}"
        );
        assert!(!w.contains("etcd-main-1"), "{w}");
    }

    #[test]
    fn the_space_freed_is_reported_per_member() {
        let quota = 16 * MI as u64;
        let lines = freed_lines(&reading(&[16 * MI, 15 * MI], quota, true), &reading(&[MI, MI], quota, false));
        assert_eq!(lines[0], "etcd-main-0: database 16.00 MiB → 1.00 MiB (15.00 MiB freed; 6% of the 16.00 MiB quota)");
        assert_eq!(lines.len(), 2);
    }

    #[test]
    fn the_plan_defragments_every_member_between_compaction_and_disarming() {
        let etcd: Etcd = serde_json::from_value(json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "etcd-main", "namespace": "ns"},
            "spec": {"replicas": 3},
            "status": {"members": [
                {"name": "etcd-main-0", "role": "Leader", "status": "Ready"},
                {"name": "etcd-main-1", "role": "Member", "status": "Ready"},
                {"name": "etcd-main-2", "role": "Member", "status": "Ready"}]},
        }))
        .unwrap();
        let plan = SpaceRecovery.parse(None).unwrap();
        let steps = plan.steps(&etcd);
        let names: Vec<String> = steps.iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            [
                "RecordSpace",
                "CompactToCurrentRevision",
                "Defragment[1]",
                "Defragment[2]",
                "Defragment[3]",
                "DisarmNoSpace",
                "VerifyWrite"
            ]
        );
        assert!(steps[4].description().contains("(now etcd-main-0)"), "{}", steps[4].description());
        assert!(SpaceRecovery.parse(Some("member: x")).is_err(), "no config keys");
    }
}
