//! etcd-druid's Etcd status, computed from member leases, pods, PVCs and the StatefulSet.
//!
//! Pure: the inputs are plain observations, the output is the `status` JSON. Rules (DOMAIN.md,
//! seeds/004 ~4975-5075): a member is `Ready` while its lease is renewed, `NotReady` when its pod is not
//! ready or its lease expired beyond the grace period; `Ready` is `Quorate` while a majority of the
//! cluster's members is ready.

use jiff::Timestamp;
use serde_json::{Value, json};

/// What the druid actor observed about one member (ordinal `i`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemberObservation {
    /// Pod name `E-<i>`.
    pub name: String,
    /// Lease holder identity (`<id>:Leader|Member`), when set.
    pub holder: Option<String>,
    /// Last renew time of the lease.
    pub renew_time: Option<Timestamp>,
    /// Lease duration.
    pub lease_seconds: i64,
    /// Whether the pod exists and is Ready.
    pub pod_ready: bool,
}

/// Backup observations.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BackupObservation {
    /// Whether `spec.backup.store` is set.
    pub enabled: bool,
    /// renewTime of `E-full-snap`.
    pub full_renewed: Option<Timestamp>,
    /// renewTime of `E-delta-snap`.
    pub delta_renewed: Option<Timestamp>,
    /// Delta snapshot period.
    pub delta_period_seconds: i64,
}

/// Everything the status is computed from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EtcdObservation {
    /// Etcd metadata.generation reconciled last (for observedGeneration).
    pub observed_generation: Option<i64>,
    /// StatefulSet spec.replicas (the cluster size the members are judged against).
    pub sts_replicas: i32,
    /// Pods that exist.
    pub current_replicas: i32,
    /// Pods that are ready.
    pub ready_replicas: i32,
    /// Members 0..sts_replicas.
    pub members: Vec<MemberObservation>,
    /// Backups.
    pub backup: BackupObservation,
    /// PVC names expected and whether each is Bound.
    pub volumes: Vec<(String, bool)>,
    /// Label selector of the pods, as a string.
    pub selector: String,
    /// The same selector as labels.
    pub selector_labels: std::collections::BTreeMap<String, String>,
}

/// Grace period (in lease durations) after which an expired lease makes a member `NotReady`.
const UNKNOWN_GRACE_LEASES: i64 = 3;

/// Computes `status` (without carrying over old transition times; see [`carry_transition_times`]).
pub fn compute_status(obs: &EtcdObservation, now: Timestamp) -> Value {
    let now_s = now.to_string();
    let mut members = Vec::new();
    let mut ready_members = 0;
    for m in &obs.members {
        let fresh = m.holder.as_deref().is_some_and(|h| !h.is_empty())
            && m.renew_time.is_some_and(|t| now.duration_since(t).as_secs() <= m.lease_seconds.max(1));
        let (status, reason) = if fresh {
            ("Ready", "LeaseSucceeded")
        } else if !m.pod_ready {
            ("NotReady", "PodNotReady")
        } else if m
            .renew_time
            .is_some_and(|t| now.duration_since(t).as_secs() > m.lease_seconds.max(1) * UNKNOWN_GRACE_LEASES)
        {
            ("NotReady", "UnknownGracePeriodExceeded")
        } else {
            ("Unknown", "LeaseExpired")
        };
        if status == "Ready" {
            ready_members += 1;
        }
        let mut entry = json!({"name": m.name, "status": status, "reason": reason, "lastTransitionTime": now_s});
        if let Some((id, role)) = m.holder.as_deref().and_then(|h| h.split_once(':')) {
            entry["id"] = json!(id);
            entry["role"] = json!(role);
        }
        members.push(entry);
    }
    let size = obs.sts_replicas.max(0);
    let quorum = size / 2 + 1;
    let quorate = size > 0 && ready_members >= quorum;
    let all_ready = size > 0 && ready_members == size;
    let cond = |t: &str, status: &str, reason: &str, message: String| {
        json!({"type": t, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": now_s, "lastUpdateTime": now_s})
    };
    let ready = if quorate {
        cond("Ready", "True", "Quorate", format!("The majority of cluster members is ready ({ready_members}/{size})"))
    } else {
        cond(
            "Ready",
            "False",
            "QuorumLost",
            format!("The majority of cluster members is not ready ({ready_members}/{size} ready, {quorum} needed)"),
        )
    };
    let all = if all_ready {
        cond("AllMembersReady", "True", "AllMembersReady", "All members are ready".into())
    } else {
        cond("AllMembersReady", "False", "NotAllMembersReady", format!("{ready_members} of {size} members are ready"))
    };
    let backup = backup_condition(&obs.backup, now, &cond);
    let missing: Vec<&str> = obs.volumes.iter().filter(|(_, b)| !b).map(|(n, _)| n.as_str()).collect();
    let volumes = if missing.is_empty() {
        cond("DataVolumesReady", "True", "BoundPersistentVolumeClaims", "All PVCs of the members are bound".into())
    } else {
        cond(
            "DataVolumesReady",
            "False",
            "UnboundPersistentVolumeClaims",
            format!("PVCs not bound: {}", missing.join(", ")),
        )
    };
    let mut status = json!({
        "conditions": [ready, all, backup, volumes],
        "members": members,
        "replicas": obs.current_replicas,
        "currentReplicas": obs.current_replicas,
        "readyReplicas": obs.ready_replicas,
        "ready": size > 0 && obs.ready_replicas == size && quorate,
        "labelSelector": {"matchLabels": obs.selector_labels},
        "selector": obs.selector,
    });
    if let Some(g) = obs.observed_generation {
        status["observedGeneration"] = json!(g);
    }
    status
}

fn backup_condition(b: &BackupObservation, now: Timestamp, cond: &dyn Fn(&str, &str, &str, String) -> Value) -> Value {
    if !b.enabled {
        return cond(
            "BackupReady",
            "Unknown",
            "BackupDisabled",
            "Backups are not configured (spec.backup.store is empty)".into(),
        );
    }
    let age = |t: Option<Timestamp>| t.map(|t| now.duration_since(t).as_secs());
    let delta_limit = (b.delta_period_seconds.max(1) * 3).max(5);
    match (age(b.full_renewed), age(b.delta_renewed)) {
        (None, _) => {
            cond("BackupReady", "Unknown", "NoFullSnapshotTaken", "No full snapshot has been taken yet".into())
        }
        (Some(f), _) if f > 24 * 3600 => {
            cond("BackupReady", "False", "FullBackupFailed", format!("Last full snapshot is {f}s old"))
        }
        (Some(_), Some(d)) if d <= delta_limit => {
            cond("BackupReady", "True", "IncrementalBackupSucceeded", "Delta snapshots are being taken".into())
        }
        (Some(_), Some(d)) => cond(
            "BackupReady",
            "False",
            "IncrementalBackupFailed",
            format!("Delta snapshot lease not renewed for {d}s (period {}s)", b.delta_period_seconds),
        ),
        (Some(f), None) if f > delta_limit => cond(
            "BackupReady",
            "False",
            "IncrementalBackupFailed",
            format!("No delta snapshot since the full snapshot {f}s ago (period {}s)", b.delta_period_seconds),
        ),
        (Some(_), None) => cond("BackupReady", "True", "FullBackupSucceeded", "Full snapshot taken".into()),
    }
}

/// Keeps `lastTransitionTime` (and `lastUpdateTime` of unchanged conditions) of conditions and members
/// whose status and reason did not change, so transition times mean what they say.
pub fn carry_transition_times(new: &mut Value, old: &Value) {
    for (list, key) in [("conditions", "type"), ("members", "name")] {
        let Some(items) = new[list].as_array_mut() else { continue };
        for item in items {
            let Some(prev) = old[list].as_array().and_then(|a| a.iter().find(|o| o[key] == item[key])) else {
                continue;
            };
            if prev["status"] == item["status"] && prev["reason"] == item["reason"] {
                for t in ["lastTransitionTime", "lastUpdateTime"] {
                    if !prev[t].is_null() && !item[t].is_null() {
                        item[t] = prev[t].clone();
                    }
                }
            }
        }
    }
}

/// Condition `type` of an Etcd status JSON: `(status, reason)`.
pub fn condition(status: &Value, type_: &str) -> Option<(String, String)> {
    let c = status["conditions"].as_array()?.iter().find(|c| c["type"] == type_)?;
    Some((c["status"].as_str()?.to_string(), c["reason"].as_str().unwrap_or_default().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(i: usize, fresh: bool, pod_ready: bool, now: Timestamp) -> MemberObservation {
        MemberObservation {
            name: format!("etcd-main-{i}"),
            holder: Some(format!("{i:x}:{}", if i == 0 { "Leader" } else { "Member" })),
            renew_time: Some(if fresh { now } else { now - jiff::SignedDuration::from_secs(60) }),
            lease_seconds: 5,
            pod_ready,
        }
    }

    fn obs(fresh: [bool; 3], now: Timestamp) -> EtcdObservation {
        EtcdObservation {
            sts_replicas: 3,
            members: (0..3).map(|i| member(i, fresh[i], fresh[i], now)).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn two_of_three_ready_members_are_quorate_but_not_all_ready() {
        let now = Timestamp::now();
        let s = compute_status(&obs([true, true, false], now), now);
        assert_eq!(condition(&s, "Ready"), Some(("True".into(), "Quorate".into())));
        assert_eq!(condition(&s, "AllMembersReady").unwrap().0, "False");
        assert_eq!(s["members"][2]["status"], "NotReady");
        assert_eq!(s["members"][2]["reason"], "PodNotReady");
        assert_eq!(s["members"][0]["role"], "Leader");
    }

    #[test]
    fn one_of_three_ready_members_is_quorum_lost() {
        let now = Timestamp::now();
        let s = compute_status(&obs([true, false, false], now), now);
        assert_eq!(condition(&s, "Ready"), Some(("False".into(), "QuorumLost".into())));
    }

    #[test]
    fn an_expired_lease_with_a_ready_pod_is_unknown_then_not_ready() {
        let now = Timestamp::now();
        let mut m = member(1, false, true, now);
        m.renew_time = Some(now - jiff::SignedDuration::from_secs(6));
        let o = EtcdObservation { sts_replicas: 1, members: vec![m.clone()], ..Default::default() };
        assert_eq!(compute_status(&o, now)["members"][0]["status"], "Unknown");
        m.renew_time = Some(now - jiff::SignedDuration::from_secs(60));
        let o = EtcdObservation { sts_replicas: 1, members: vec![m], ..Default::default() };
        assert_eq!(compute_status(&o, now)["members"][0]["reason"], "UnknownGracePeriodExceeded");
    }

    #[test]
    fn backup_ready_follows_the_snapshot_leases() {
        let now = Timestamp::now();
        let mut o = obs([true, true, true], now);
        o.backup = BackupObservation {
            enabled: true,
            full_renewed: Some(now),
            delta_renewed: Some(now),
            delta_period_seconds: 2,
        };
        assert_eq!(condition(&compute_status(&o, now), "BackupReady").unwrap().1, "IncrementalBackupSucceeded");
        o.backup.delta_renewed = Some(now - jiff::SignedDuration::from_secs(30));
        assert_eq!(condition(&compute_status(&o, now), "BackupReady").unwrap().1, "IncrementalBackupFailed");
        o.backup.delta_renewed = None;
        assert_eq!(condition(&compute_status(&o, now), "BackupReady").unwrap().1, "FullBackupSucceeded");
        o.backup.full_renewed = Some(now - jiff::SignedDuration::from_secs(60));
        assert_eq!(condition(&compute_status(&o, now), "BackupReady").unwrap().1, "IncrementalBackupFailed");
        o.backup.enabled = false;
        assert_eq!(condition(&compute_status(&o, now), "BackupReady").unwrap().0, "Unknown");
    }

    #[test]
    fn transition_times_survive_unchanged_conditions() {
        let t0 = Timestamp::now();
        let old = compute_status(&obs([true, true, true], t0), t0);
        let t1 = t0 + jiff::SignedDuration::from_secs(10);
        let mut new = compute_status(&obs([true, true, true], t1), t1);
        carry_transition_times(&mut new, &old);
        assert_eq!(new["conditions"][0]["lastTransitionTime"], old["conditions"][0]["lastTransitionTime"]);
        assert_eq!(new["members"][1]["lastTransitionTime"], old["members"][1]["lastTransitionTime"]);
    }
}
