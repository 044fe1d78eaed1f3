//! Judging an Etcd from plain data: no I/O, so every rule is unit-tested without a server.

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};

use super::conditions::{Judgement, judge};
use super::member::{druid_member_status, etcd_running, parse_holder};
use super::model::*;
use super::quorum::Quorum;
use crate::api::{Etcd, EtcdOperatorTask};
use crate::kube::annotate::{component_protection_disabled, reconcile_pending, spec_reconcile_suspended};

/// Lease duration assumed when a member lease does not say (etcd-druid's default heartbeat lease).
pub const DEFAULT_LEASE_DURATION_SECONDS: i64 = 40;
/// A full snapshot older than this is stale (daily schedule plus an hour of grace).
pub const FULL_SNAPSHOT_STALE_SECONDS: i64 = 25 * 3600;
/// A delta snapshot is stale after ten delta periods, but never sooner than this.
pub const MIN_DELTA_SNAPSHOT_STALE_SECONDS: i64 = 15 * 60;
/// How many recent tasks the report lists.
pub const RECENT_TASKS: usize = 5;

/// Everything `assess` looks at, read from the cluster by `collect`.
#[derive(Debug, Clone)]
pub struct HealthInputs {
    /// The Etcd.
    pub etcd: Etcd,
    /// Pods of the Etcd (matched to members by name).
    pub pods: Vec<Pod>,
    /// PVCs of the Etcd (matched by name).
    pub pvcs: Vec<PersistentVolumeClaim>,
    /// Member and snapshot leases (matched by name).
    pub leases: Vec<Lease>,
    /// EtcdOperatorTasks in the namespace; `None` when the CRD is not installed.
    pub tasks: Option<Vec<EtcdOperatorTask>>,
    /// What the members' etcd answered; `None` when etcd was not asked.
    pub etcd_observation: Option<crate::etcd::EtcdObservation>,
}

fn age(t: Option<Timestamp>, now: Timestamp) -> Option<i64> {
    t.map(|t| now.as_second() - t.as_second())
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Why a pod is not ready, in the words of seeds/002.
pub fn pod_not_ready_reason(pod: &Pod) -> &'static str {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default();
    let crash_looping = statuses.iter().any(|c| {
        c.restart_count > 1
            || c.state.as_ref().and_then(|s| s.waiting.as_ref()).and_then(|w| w.reason.as_deref())
                == Some("CrashLoopBackOff")
    });
    let ever_started = statuses.iter().any(|c| {
        c.restart_count > 0
            || c.state.as_ref().is_some_and(|s| s.running.is_some() || s.terminated.is_some())
            || c.last_state.as_ref().is_some_and(|s| s.terminated.is_some())
    });
    let running = statuses.iter().any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
    if crash_looping {
        "CrashLooping"
    } else if !ever_started {
        "NeverStartedUp"
    } else if running {
        "Unhealthy"
    } else {
        "NotReady"
    }
}

fn pod_view(pod: &Pod) -> PodView {
    let status = pod.status.as_ref();
    PodView {
        name: pod.metadata.name.clone().unwrap_or_default(),
        phase: status.and_then(|s| s.phase.clone()).unwrap_or_else(|| "Unknown".into()),
        ready: pod_ready(pod),
        restarts: status
            .and_then(|s| s.container_statuses.as_ref())
            .map(|cs| cs.iter().map(|c| c.restart_count).sum())
            .unwrap_or(0),
    }
}

fn lease_view(lease: &Lease, now: Timestamp) -> LeaseView {
    let spec = lease.spec.as_ref();
    let renewed_at = spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
    let duration = spec.and_then(|s| s.lease_duration_seconds).map(i64::from).unwrap_or(DEFAULT_LEASE_DURATION_SECONDS);
    let age_seconds = age(renewed_at, now);
    LeaseView {
        holder: spec.and_then(|s| s.holder_identity.clone()).filter(|h| !h.is_empty()),
        renewed_at,
        age_seconds,
        fresh: age_seconds.is_some_and(|a| a <= 2 * duration),
    }
}

/// Parses a Go duration such as `20s`, `1m`, `1h30m` into seconds.
fn go_duration_seconds(text: &str) -> Option<i64> {
    crate::kube::config::parse_duration(text).ok().map(|d| d.as_secs() as i64)
}

fn snapshot_view(lease: Option<&Lease>, threshold: i64, now: Timestamp) -> SnapshotView {
    let spec = lease.and_then(|l| l.spec.as_ref());
    let taken_at = spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
    let age_seconds = age(taken_at, now);
    SnapshotView {
        taken_at,
        age_seconds,
        revision: spec.and_then(|s| s.holder_identity.clone()).filter(|h| !h.is_empty()),
        stale: age_seconds.is_none_or(|a| a > threshold),
        threshold_seconds: threshold,
    }
}

/// Judges one Etcd at time `now`: each part by what it looks at, then the verdict from all the problems found.
pub fn assess(inputs: &HealthInputs, now: Timestamp) -> HealthReport {
    let etcd = &inputs.etcd;
    let key = crate::kube::etcds::key_of(etcd);
    let replicas = u32::try_from(etcd.spec.replicas.max(0)).unwrap_or(0);
    let mut problems = Vec::new();
    let mut warnings = Vec::new();

    let mut members: Vec<MemberHealth> = (0..replicas).map(|i| judge_member(inputs, i, now)).collect();
    problems.extend(members.iter().flat_map(member_problems));
    let ready_count = members.iter().filter(|m| m.ready).count() as u32;
    let quorum = Quorum::of(replicas, ready_count);

    let conditions = conditions_of(etcd, now);
    let druid_view = druid_view_of(etcd, &members, now);
    problems.extend(condition_problems(&conditions));
    problems.extend(cluster_id_problem(&members, &conditions));
    let backups = backups_of(etcd, &inputs.leases, now);
    problems.extend(backup_problems(&backups));
    // Scaled to zero there is no member to ask.
    let etcd_view = inputs.etcd_observation.as_ref().filter(|o| !o.members.is_empty()).map(|o| {
        let judged = super::etcd_view::judge(etcd, &key, o, &mut members, &inputs.pods, now);
        // etcd's alarms come first: they name the cause when everything else looks fine.
        let alarms = judged.problems.iter().take_while(|p| p.starts_with("etcd alarm")).count();
        problems.splice(0..0, judged.problems[..alarms].iter().cloned());
        problems.extend(judged.problems[alarms..].iter().cloned());
        warnings.extend(judged.warnings);
        judged.view
    });
    let annotations = annotations_of(etcd);
    let tasks = tasks_of(inputs.tasks.as_deref(), &key, now);

    let verdict = verdict_of(replicas, &quorum, &problems);
    if verdict == Verdict::Hibernated {
        problems.clear();
        warnings.clear();
    }
    let summary = summary_of(verdict, &quorum, &members, &problems);
    HealthReport {
        etcd: key,
        observed_at: now,
        verdict,
        summary,
        problems,
        generation: etcd.metadata.generation,
        observed_generation: etcd.status.as_ref().and_then(|s| s.observed_generation),
        quorum,
        members,
        druid_view,
        conditions,
        backups,
        annotations,
        tasks,
        warnings,
        etcd_view,
    }
}

/// Member `i` as etcd-druid, its pod, PVC and lease show it.
fn judge_member(inputs: &HealthInputs, i: u32, now: Timestamp) -> MemberHealth {
    let etcd = &inputs.etcd;
    let names = etcd.managed_names();
    let druid_members = etcd.status.as_ref().map(|s| s.members.as_slice()).unwrap_or_default();
    let pod_name = names.pod(i);
    // etcd-druid names members `<memberNamePrefix>-<pod>` (api/core/v1alpha1/helper.go).
    let name = names.member(i);
    let pod = inputs.pods.iter().find(|p| p.metadata.name.as_deref() == Some(pod_name.as_str()));
    let raw_lease = inputs.leases.iter().find(|l| l.metadata.name.as_deref() == Some(name.as_str()));
    let lease = raw_lease.map(|l| lease_view(l, now));
    let druid = druid_members.iter().find(|m| m.name == name || m.name == pod_name);
    let pvc_name = names.pvc(i);
    let pvc = inputs.pvcs.iter().find(|p| p.metadata.name.as_deref() == Some(pvc_name.as_str()));
    let pvc_view = PvcView {
        name: pvc_name.clone(),
        phase: pvc
            .and_then(|p| p.status.as_ref())
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| if pvc.is_some() { "Unknown".into() } else { "Missing".into() }),
    };
    let pod_is_ready = pod.is_some_and(pod_ready);
    // Without an entry in status.members, judge the member as etcd-druid would from its lease and pod.
    let derived = druid_member_status(raw_lease, pod, now);
    let druid_status: Option<(String, String)> = druid
        .map(|m| (m.status.clone(), m.reason.clone()))
        .or_else(|| derived.map(|(s, r)| (s.to_string(), r.to_string())));
    let lease_fresh = lease.as_ref().is_some_and(|l| l.fresh);
    let ready = pod_is_ready && druid_status.as_ref().map(|(s, _)| s == "Ready").unwrap_or(lease_fresh);
    let reason = if ready {
        druid_status.as_ref().map(|(_, r)| r.clone()).filter(|r| !r.is_empty()).unwrap_or_else(|| "Ready".into())
    } else if pod.is_none() {
        "PodMissing".into()
    } else if !pod_is_ready {
        pod.map(pod_not_ready_reason).unwrap_or("NotReady").to_string()
    } else if let Some((_, r)) = druid_status.as_ref().filter(|(s, _)| s != "Ready") {
        if r.is_empty() { "NotReady".into() } else { r.clone() }
    } else {
        "LeaseNotRenewed".into()
    };
    let status = druid_status
        .as_ref()
        .map(|(s, _)| s.clone())
        .unwrap_or_else(|| if ready { "Ready".into() } else { "NotReady".into() });
    let status_source = match (druid, derived) {
        (Some(_), _) => StatusSource::EtcdDruid,
        (None, Some(_)) => StatusSource::Lease,
        (None, None) => StatusSource::Druidctl,
    };
    let status_since = druid.and_then(|m| m.last_transition_time.as_ref()).map(|t| t.0);
    // etcd-druid judges from the lease on its own schedule: right after a failure it still says Ready while
    // the pod is not ready; after a recovery it still says NotReady while the pod is ready and the lease was
    // renewed after etcd-druid's last change.
    let observed_ready = pod_is_ready && lease_fresh;
    let renewed_since_druid = match (lease.as_ref().and_then(|l| l.renewed_at), status_since) {
        (Some(renewed), Some(since)) => renewed > since,
        (Some(_), None) => true,
        (None, _) => false,
    };
    let druid_view_stale =
        druid.is_some() && if status == "Ready" { !observed_ready } else { observed_ready && renewed_since_druid };
    let holder = lease.as_ref().and_then(|l| l.holder.as_deref()).and_then(parse_holder);
    // The role and cluster in a stale lease are history, not the member's present.
    let holder_id = holder.as_ref().map(|h| h.member_id.clone());
    let holder_role = holder.as_ref().and_then(|h| h.role.clone()).filter(|_| lease_fresh);
    let cluster_id = holder.as_ref().and_then(|h| h.cluster_id.clone()).filter(|_| lease_fresh);
    let alive = pod.is_some_and(etcd_running) || (pod.is_some() && lease_fresh);
    MemberHealth {
        name,
        index: i,
        id: druid.and_then(|m| m.id.clone()).or(holder_id),
        role: druid.and_then(|m| m.role.clone()).or(holder_role),
        cluster_id,
        alive,
        ready,
        status,
        status_source,
        status_since,
        status_age_seconds: age(status_since, now),
        druid_view_stale,
        reason,
        lease,
        pvc: Some(pvc_view),
        node: pod.and_then(|p| p.spec.as_ref()).and_then(|s| s.node_name.clone()),
        pod: pod.map(pod_view),
        etcd: None,
    }
}

/// A member that is not ready, and a PVC that is not bound.
fn member_problems(m: &MemberHealth) -> Vec<String> {
    let mut out = Vec::new();
    if !m.ready {
        out.push(if m.alive {
            format!("member {} is not ready ({}) but its etcd is alive", m.name, m.reason)
        } else {
            format!("member {} is not ready ({})", m.name, m.reason)
        });
    }
    if let Some(pvc) = m.pvc.as_ref().filter(|p| p.phase != "Bound") {
        out.push(format!("PVC {} of member {} is {}", pvc.name, m.name, pvc.phase));
    }
    out
}

/// The Etcd's status conditions, each judged.
fn conditions_of(etcd: &Etcd, now: Timestamp) -> Vec<ConditionView> {
    etcd.status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|c| ConditionView {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            age_seconds: age(c.last_transition_time.as_ref().map(|t| t.0), now),
            healthy: match judge(c) {
                Judgement::Healthy => Some(true),
                Judgement::Problem => Some(false),
                Judgement::NotJudged => None,
            },
        })
        .collect()
}

/// A condition whose status is not the healthy one.
fn condition_problems(conditions: &[ConditionView]) -> Vec<String> {
    conditions
        .iter()
        .filter(|c| c.healthy == Some(false))
        .map(|c| format!("condition {} is {} ({})", c.type_, c.status, c.reason))
        .collect()
}

/// How current etcd-druid's view is.
fn druid_view_of(etcd: &Etcd, members: &[MemberHealth], now: Timestamp) -> DruidView {
    let updated_at = etcd
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().filter_map(|c| c.last_update_time.as_ref().map(|t| t.0)).max());
    DruidView {
        updated_at,
        age_seconds: age(updated_at, now),
        stale_members: members.iter().filter(|m| m.druid_view_stale).map(|m| m.name.clone()).collect(),
    }
}

/// Members that disagree on the cluster they belong to (three-part holders, etcd-backup-restore v0.39+), also
/// where etcd-druid is too old to set ClusterIDMismatch (before v0.34).
fn cluster_id_problem(members: &[MemberHealth], conditions: &[ConditionView]) -> Option<String> {
    let mut cluster_ids: Vec<&str> = members.iter().filter_map(|m| m.cluster_id.as_deref()).collect();
    cluster_ids.sort();
    cluster_ids.dedup();
    let druid_says_mismatch = conditions.iter().any(|c| c.type_ == "ClusterIDMismatch" && c.healthy == Some(false));
    (cluster_ids.len() > 1 && !druid_says_mismatch).then(|| {
        let each: Vec<String> =
            members.iter().filter_map(|m| m.cluster_id.as_ref().map(|c| format!("{}={c}", m.name))).collect();
        format!("members report different etcd cluster IDs: {}", each.join(", "))
    })
}

/// Freshness of the full and delta snapshots (from their leases).
fn backups_of(etcd: &Etcd, leases: &[Lease], now: Timestamp) -> Backups {
    if !etcd.backups_enabled() {
        return Backups { enabled: false, full: None, delta: None };
    }
    let names = etcd.managed_names();
    let find_lease = |name: &str| leases.iter().find(|l| l.metadata.name.as_deref() == Some(name));
    let delta_threshold = etcd
        .spec
        .backup
        .delta_snapshot_period
        .as_deref()
        .and_then(go_duration_seconds)
        .map(|p| (10 * p).max(MIN_DELTA_SNAPSHOT_STALE_SECONDS))
        .unwrap_or(MIN_DELTA_SNAPSHOT_STALE_SECONDS);
    let full = snapshot_view(find_lease(&names.full_snapshot_lease()), FULL_SNAPSHOT_STALE_SECONDS, now);
    let delta = snapshot_view(find_lease(&names.delta_snapshot_lease()), delta_threshold, now);
    Backups { enabled: true, full: Some(full), delta: Some(delta) }
}

/// A stale or missing snapshot.
fn backup_problems(backups: &Backups) -> Vec<String> {
    let mut out = Vec::new();
    for (kind, s) in [("full", &backups.full), ("delta", &backups.delta)] {
        let Some(s) = s.as_ref().filter(|s| s.stale) else { continue };
        out.push(match s.age_seconds {
            Some(a) => format!(
                "last {kind} snapshot is {} old (stale after {})",
                crate::output::age::human(a),
                crate::output::age::human(s.threshold_seconds)
            ),
            None => format!("no {kind} snapshot has been taken"),
        });
    }
    out
}

/// Annotations that change etcd-druid's behaviour.
fn annotations_of(etcd: &Etcd) -> AnnotationsInEffect {
    AnnotationsInEffect {
        reconcile_pending: reconcile_pending(etcd),
        spec_reconcile_suspended: spec_reconcile_suspended(etcd),
        component_protection_disabled: component_protection_disabled(etcd),
    }
}

/// The newest [`RECENT_TASKS`] EtcdOperatorTasks of the Etcd `key`.
fn tasks_of(tasks: Option<&[EtcdOperatorTask]>, key: &crate::kube::ObjectKey, now: Timestamp) -> Tasks {
    let Some(all) = tasks else { return Tasks { crd_installed: false, recent: Vec::new() } };
    let mut mine: Vec<&EtcdOperatorTask> = all.iter().filter(|t| t.targets(&key.namespace, &key.name)).collect();
    mine.sort_by(|a, b| {
        let ta = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let tb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
        tb.cmp(&ta).then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    let recent = mine
        .into_iter()
        .take(RECENT_TASKS)
        .map(|t| TaskView {
            name: t.metadata.name.clone().unwrap_or_default(),
            type_: t.spec.type_.clone(),
            state: t.state().as_str().to_string(),
            last_operation: t.status.as_ref().and_then(|s| s.last_operation.as_ref()).map(|o| {
                format!(
                    "{} {}",
                    o.name,
                    serde_json::to_value(o.state).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()
                )
            }),
            age_seconds: age(t.metadata.creation_timestamp.as_ref().map(|t| t.0), now),
        })
        .collect();
    Tasks { crd_installed: true, recent }
}

/// The verdict: hibernated at zero replicas, else quorum first, then any problem.
fn verdict_of(replicas: u32, quorum: &Quorum, problems: &[String]) -> Verdict {
    if replicas == 0 {
        Verdict::Hibernated
    } else if !quorum.quorate {
        Verdict::QuorumLost
    } else if !problems.is_empty() {
        Verdict::Degraded
    } else {
        Verdict::Healthy
    }
}

/// The one sentence saying why: quorum arithmetic, the survivors of a quorum loss, the number of problems (and
/// an armed etcd alarm by name, as it is the cause when everything else looks fine).
fn summary_of(verdict: Verdict, quorum: &Quorum, members: &[MemberHealth], problems: &[String]) -> String {
    let survivors: Vec<&str> = members.iter().filter(|m| m.alive && !m.ready).map(|m| m.name.as_str()).collect();
    let failures = |n: u32| if n == 1 { "1 more failure".to_string() } else { format!("{n} more failures") };
    let alarms: Vec<&str> = ["NOSPACE", "CORRUPT"]
        .into_iter()
        .filter(|a| problems.iter().any(|p| p.starts_with(&format!("etcd alarm {a} "))))
        .collect();
    let alarmed = if alarms.is_empty() { String::new() } else { format!("; etcd alarm {} raised", alarms.join(", ")) };
    match verdict {
        Verdict::Hibernated => "scaled to 0 replicas".to_string(),
        Verdict::QuorumLost if !survivors.is_empty() => format!(
            "quorum lost: {} of {} members ready, {} needed; etcd still alive on {}",
            quorum.ready,
            quorum.members,
            quorum.needed,
            survivors.join(", ")
        ),
        Verdict::QuorumLost => {
            format!("quorum lost: {} of {} members ready, {} needed", quorum.ready, quorum.members, quorum.needed)
        }
        Verdict::Degraded => format!(
            "quorate, {} of {} members ready (tolerates {}); {} problem{}{alarmed}",
            quorum.ready,
            quorum.members,
            failures(quorum.tolerable_failures),
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        ),
        Verdict::Healthy => format!(
            "{} of {} members ready (tolerates {})",
            quorum.ready,
            quorum.members,
            failures(quorum.tolerable_failures)
        ),
    }
}
