//! etcd-druid's Etcd status, computed from member leases, pods, PVC events and the StatefulSet, with the
//! conditions, reasons, messages and polarities etcd-druid v0.37.1 writes:
//!
//! - members: `internal/health/etcdmember/check_ready.go` (lease missing, unparsable or never renewed: no
//!   entry; `LeaseSucceeded`, `LeaseExpired`, `ContainersNotReady`, `UnknownGracePeriodExceeded`);
//! - `Ready`, `AllMembersReady`, `AllMembersUpdated`, `BackupReady`, `DataVolumesReady`, `ClusterIDMismatch`:
//!   `internal/health/condition/check_*.go`; `builder.go` sorts them by type, keeps conditions it does not
//!   compute (`LastSnapshotCompactionSucceeded`, written by the compaction controller), and writes
//!   `NotChecked` while the Etcd is scaled to zero.
//!
//! Pure: the inputs are plain observations, the output is the `status` JSON.

use jiff::Timestamp;
use serde_json::{Value, json};

/// What the druid actor observed about one member (ordinal `i`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemberObservation {
    /// Member (= lease) name: `<memberNamePrefix>-<pod>` or the pod name.
    pub name: String,
    /// Whether the member lease exists.
    pub lease_exists: bool,
    /// Lease holder identity (`<id>:<clusterID>:Leader|Member`, or the older `<id>:Leader|Member`), when set.
    pub holder: Option<String>,
    /// Last renew time of the lease.
    pub renew_time: Option<Timestamp>,
    /// Whether the pod exists and its `ContainersReady` condition is True.
    pub containers_ready: bool,
}

/// Backup observations.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BackupObservation {
    /// Whether `spec.backup.store` is set (with a provider).
    pub enabled: bool,
    /// Whether the snapshot leases could be read.
    pub leases_found: bool,
    /// renewTime of `E-full-snap` (the time of the last full snapshot).
    pub full_renewed: Option<Timestamp>,
    /// creationTimestamp of `E-full-snap`.
    pub full_created: Option<Timestamp>,
    /// renewTime of `E-delta-snap`.
    pub delta_renewed: Option<Timestamp>,
    /// Delta snapshot period.
    pub delta_period_seconds: i64,
    /// Full snapshot interval (24h unless the schedule says otherwise).
    pub full_interval_seconds: i64,
}

/// The StatefulSet as `AllMembersUpdated` reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatefulSetObservation {
    /// metadata.generation.
    pub generation: i64,
    /// status.observedGeneration.
    pub observed_generation: i64,
    /// spec.replicas.
    pub replicas: i32,
    /// status.updatedReplicas.
    pub updated_replicas: i32,
    /// status.currentRevision.
    pub current_revision: String,
    /// status.updateRevision.
    pub update_revision: String,
}

/// Everything the status is computed from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EtcdObservation {
    /// `<namespace>/<name>` of the Etcd (messages name it).
    pub key: String,
    /// Etcd spec.replicas.
    pub spec_replicas: i32,
    /// Etcd metadata.generation reconciled last (for observedGeneration).
    pub observed_generation: Option<i64>,
    /// The StatefulSet, if it exists.
    pub sts: Option<StatefulSetObservation>,
    /// Pods that exist.
    pub current_replicas: i32,
    /// Pods that are ready.
    pub ready_replicas: i32,
    /// Members 0..spec.replicas.
    pub members: Vec<MemberObservation>,
    /// Backups.
    pub backup: BackupObservation,
    /// Messages of Warning events on the members' PVCs.
    pub volume_warnings: Vec<String>,
    /// Label selector of the pods, as a string.
    pub selector: String,
    /// Whether peer TLS is configured.
    pub peer_tls: bool,
    /// The status before this pass (for BackupReady's history and the conditions druid keeps).
    pub previous: Value,
    /// etcd-druid's `etcdMember.unknownThreshold` (default 1m).
    pub unknown_threshold_seconds: i64,
    /// etcd-druid's `etcdMember.notReadyThreshold` (default 5m).
    pub not_ready_threshold_seconds: i64,
}

/// `(memberID, clusterID, role)` of a holder identity in either form (druid splits by `:`).
fn parse_holder(h: &str) -> Option<(&str, Option<&str>, Option<&str>)> {
    let parts: Vec<&str> = h.split(':').collect();
    let (id, cluster, role) = match parts.as_slice() {
        [id, role] => (*id, None, *role),
        [id, cluster, role] => (*id, Some(*cluster), *role),
        _ => return None,
    };
    Some((id, cluster, matches!(role, "Leader" | "Member").then_some(role)))
}

/// The conditions the health check computes (builder.go); others are kept as they were.
pub const HEALTH_TYPES: &[&str] =
    &["AllMembersReady", "AllMembersUpdated", "BackupReady", "ClusterIDMismatch", "DataVolumesReady", "Ready"];

/// Computes `status` (without carrying over old transition times; see [`carry_transition_times`]).
pub fn compute_status(obs: &EtcdObservation, now: Timestamp) -> Value {
    let now_s = now.to_string();
    let since = |t: Timestamp| now.duration_since(t).as_secs();
    let cond = |t: &str, status: &str, reason: &str, message: String| {
        json!({"type": t, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": now_s, "lastUpdateTime": now_s})
    };
    let mut members = Vec::new();
    let mut cluster_ids: Vec<String> = Vec::new();
    for m in &obs.members {
        if !m.lease_exists {
            continue;
        }
        let Some((id, cluster, role)) = m.holder.as_deref().and_then(parse_holder) else { continue };
        let Some(renewed) = m.renew_time else { continue };
        let age = since(renewed);
        let (status, reason) = if age > obs.unknown_threshold_seconds + obs.not_ready_threshold_seconds {
            ("NotReady", "UnknownGracePeriodExceeded")
        } else if age > obs.unknown_threshold_seconds {
            if m.containers_ready { ("Unknown", "LeaseExpired") } else { ("NotReady", "ContainersNotReady") }
        } else {
            ("Ready", "LeaseSucceeded")
        };
        // check_cluster_id_mismatch.go: members not Unknown with a three-part holder.
        if status != "Unknown"
            && let Some(c) = cluster
            && !cluster_ids.iter().any(|x| x == c)
        {
            cluster_ids.push(c.to_string());
        }
        let mut entry =
            json!({"name": m.name, "id": id, "status": status, "reason": reason, "lastTransitionTime": now_s});
        if let Some(role) = role {
            entry["role"] = json!(role);
        }
        members.push(entry);
    }
    members.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));

    let mut conditions: Vec<Value> = Vec::new();
    if obs.spec_replicas <= 0 {
        // builder.go: scaled down, every health condition keeps its status and says NotChecked.
        for t in HEALTH_TYPES {
            if *t == "BackupReady" && !obs.backup.enabled {
                continue;
            }
            let prev = obs.previous["conditions"].as_array().and_then(|a| a.iter().find(|c| c["type"] == *t));
            let status = prev.and_then(|c| c["status"].as_str()).unwrap_or("Unknown");
            conditions.push(cond(t, status, "NotChecked", "etcd cluster has been scaled down".into()));
        }
    } else {
        let size = members.len();
        let ready_count = members.iter().filter(|m| m["status"] != "NotReady").count();
        conditions.push(if size == 0 {
            cond(
                "Ready",
                "Unknown",
                "NoMembersInStatus",
                "Cannot determine readiness since status has no members".into(),
            )
        } else if ready_count < size / 2 + 1 {
            cond("Ready", "False", "QuorumLost", "The majority of ETCD members is not ready".into())
        } else {
            cond("Ready", "True", "Quorate", "The majority of ETCD members is ready".into())
        });
        conditions.push(if size == 0 {
            cond(
                "AllMembersReady",
                "Unknown",
                "NoMembersInStatus",
                "Cannot determine readiness since status has no members".into(),
            )
        } else if (size as i32) < obs.spec_replicas || members.iter().any(|m| m["status"] != "Ready") {
            cond("AllMembersReady", "False", "NotAllMembersReady", "At least one member is not ready".into())
        } else {
            cond("AllMembersReady", "True", "AllMembersReady", "All members are ready".into())
        });
        let name = obs.key.split_once('/').map(|(_, n)| n).unwrap_or(&obs.key);
        conditions.push(match &obs.sts {
            None => cond(
                "AllMembersUpdated",
                "Unknown",
                "StatefulSetNotFound",
                format!("StatefulSet {name} not found for etcd"),
            ),
            Some(s)
                if s.observed_generation == s.generation
                    && s.updated_replicas == s.replicas
                    && s.update_revision == s.current_revision =>
            {
                cond("AllMembersUpdated", "True", "AllMembersUpdated", "All members reflect latest desired spec".into())
            }
            Some(_) => cond(
                "AllMembersUpdated",
                "False",
                "NotAllMembersUpdated",
                "At least one member is not yet updated".into(),
            ),
        });
        if obs.backup.enabled {
            conditions.push(backup_condition(obs, now, &cond));
        }
        conditions.push(match &obs.sts {
            None => cond(
                "DataVolumesReady",
                "Unknown",
                "StatefulSetNotFound",
                format!("StatefulSet {name} not found for etcd"),
            ),
            Some(_) if !obs.volume_warnings.is_empty() => {
                cond("DataVolumesReady", "False", "FoundWarningsForDataVolumes", obs.volume_warnings.join("; "))
            }
            Some(_) => cond(
                "DataVolumesReady",
                "True",
                "NoWarningsFoundForDataVolumes",
                format!("No warning events found for PVCs used by StatefulSet {}", obs.key),
            ),
        });
        conditions.push(match cluster_ids.len() {
            0 => cond(
                "ClusterIDMismatch",
                "Unknown",
                "NoClusterIDDetected",
                "No cluster ID detected among ETCD members".into(),
            ),
            1 => cond(
                "ClusterIDMismatch",
                "False",
                "NoClusterIDMismatchDetected",
                "No cluster ID mismatch detected among ETCD members".into(),
            ),
            _ => cond(
                "ClusterIDMismatch",
                "True",
                "MultipleClusterIDsDetected",
                "Multiple cluster IDs detected among ETCD members".into(),
            ),
        });
    }
    // Conditions the health checker does not compute stay (LastSnapshotCompactionSucceeded).
    if let Some(prev) = obs.previous["conditions"].as_array() {
        for c in prev {
            let t = c["type"].as_str().unwrap_or_default();
            if !HEALTH_TYPES.contains(&t) && !conditions.iter().any(|x| x["type"] == t) {
                conditions.push(c.clone());
            }
        }
    }
    conditions.sort_by(|a, b| a["type"].as_str().cmp(&b["type"].as_str()));

    let size = obs.spec_replicas.max(0);
    let mut status = json!({
        "conditions": conditions,
        "members": members,
        "replicas": obs.current_replicas,
        "currentReplicas": obs.current_replicas,
        "readyReplicas": obs.ready_replicas,
        "ready": size > 0 && obs.ready_replicas == size,
        "selector": obs.selector,
        "peerUrlTLSEnabled": obs.peer_tls,
        "etcd": {"apiVersion": "apps/v1", "kind": "StatefulSet",
                 "name": obs.key.split_once('/').map(|(_, n)| n).unwrap_or(&obs.key)},
    });
    if let Some(g) = obs.observed_generation {
        status["observedGeneration"] = json!(g);
    }
    status
}

/// `check_backup_ready.go`: True only with fresh leases, False only after Unknown or False and a delta lease
/// older than three periods, Unknown otherwise.
fn backup_condition(obs: &EtcdObservation, now: Timestamp, cond: &dyn Fn(&str, &str, &str, String) -> Value) -> Value {
    let b = &obs.backup;
    let unknown = |msg: &str| cond("BackupReady", "Unknown", "Unknown", msg.to_string());
    if !b.leases_found {
        return unknown("Cannot determine etcd backup status");
    }
    let since = |t: Timestamp| now.duration_since(t).as_secs();
    let period = b.delta_period_seconds.max(1);
    let full_interval = b.full_interval_seconds.max(1);
    let ok = |msg: &str| cond("BackupReady", "True", "BackupSucceeded", msg.to_string());
    match (b.full_renewed, b.delta_renewed) {
        (None, None) => return unknown("Cannot determine etcd backup status"),
        (None, Some(d)) => {
            if since(d) < 2 * period && b.full_created.is_some_and(|c| since(c) < full_interval) {
                return ok("Delta snapshot backup succeeded");
            }
        }
        (Some(f), None) => {
            if since(f) > 5 * period {
                return unknown("Periodic delta snapshots not started yet");
            }
        }
        (Some(f), Some(d)) => {
            if since(d) < 2 * period && since(f) < full_interval {
                return ok("Snapshot backup succeeded");
            }
        }
    }
    let prev = obs.previous["conditions"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["type"] == "BackupReady"))
        .and_then(|c| c["status"].as_str());
    if matches!(prev, Some("Unknown") | Some("False")) && b.delta_renewed.is_some_and(|d| since(d) > 3 * period) {
        return cond(
            "BackupReady",
            "False",
            "BackupFailed",
            "Stale snapshot leases. Not renewed in a long time".into(),
        );
    }
    unknown("Cannot determine etcd backup status")
}

/// Carries the times of the status before this pass over, as etcd-druid's builders do: a condition
/// (`internal/health/condition/builder.go`) or member (`internal/health/etcdmember/builder.go`) keeps its
/// `lastTransitionTime` while its `status` stays the same, whatever the reason; a condition keeps its
/// `lastUpdateTime` here, which is set when the status is written (the druid actor's status sync).
pub fn carry_transition_times(new: &mut Value, old: &Value) {
    for (list, key) in [("conditions", "type"), ("members", "name")] {
        let Some(items) = new[list].as_array_mut() else { continue };
        for item in items {
            let Some(prev) = old[list].as_array().and_then(|a| a.iter().find(|o| o[key] == item[key])) else {
                continue;
            };
            let mut carried = vec!["lastUpdateTime"];
            if prev["status"] == item["status"] {
                carried.push("lastTransitionTime");
            }
            for t in carried {
                if !prev[t].is_null() && !item[t].is_null() {
                    item[t] = prev[t].clone();
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

    fn member(i: usize, renewed_ago: i64, containers_ready: bool, now: Timestamp) -> MemberObservation {
        MemberObservation {
            name: format!("etcd-main-{i}"),
            lease_exists: true,
            holder: Some(format!("{i:x}:cdf8:{}", if i == 0 { "Leader" } else { "Member" })),
            renew_time: Some(now - jiff::SignedDuration::from_secs(renewed_ago)),
            containers_ready,
        }
    }

    fn obs(ages: [i64; 3], now: Timestamp) -> EtcdObservation {
        EtcdObservation {
            key: "ns/etcd-main".into(),
            spec_replicas: 3,
            sts: Some(StatefulSetObservation {
                generation: 1,
                observed_generation: 1,
                replicas: 3,
                updated_replicas: 3,
                ..Default::default()
            }),
            members: (0..3).map(|i| member(i, ages[i], ages[i] < 5, now)).collect(),
            unknown_threshold_seconds: 5,
            not_ready_threshold_seconds: 15,
            previous: Value::Null,
            ..Default::default()
        }
    }

    #[test]
    fn a_healthy_cluster_has_every_condition_at_its_healthy_value() {
        let now = Timestamp::now();
        let s = compute_status(&obs([0, 1, 2], now), now);
        let types: Vec<&str> =
            s["conditions"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            vec!["AllMembersReady", "AllMembersUpdated", "ClusterIDMismatch", "DataVolumesReady", "Ready"]
        );
        assert_eq!(condition(&s, "Ready"), Some(("True".into(), "Quorate".into())));
        assert_eq!(condition(&s, "ClusterIDMismatch"), Some(("False".into(), "NoClusterIDMismatchDetected".into())));
        assert_eq!(condition(&s, "DataVolumesReady").unwrap().1, "NoWarningsFoundForDataVolumes");
        assert_eq!(s["members"][0]["role"], "Leader");
        assert_eq!(s["members"][0]["id"], "0");
    }

    #[test]
    fn members_follow_druid_thresholds() {
        let now = Timestamp::now();
        let mut o = obs([0, 8, 30], now);
        o.members[1].containers_ready = true;
        let s = compute_status(&o, now);
        assert_eq!(s["members"][1]["reason"], "LeaseExpired");
        assert_eq!(s["members"][2]["reason"], "UnknownGracePeriodExceeded");
        assert_eq!(condition(&s, "Ready"), Some(("True".into(), "Quorate".into())), "Unknown counts as ready");
        o.members[1].containers_ready = false;
        let s = compute_status(&o, now);
        assert_eq!(s["members"][1]["reason"], "ContainersNotReady");
        assert_eq!(condition(&s, "Ready"), Some(("False".into(), "QuorumLost".into())));
        o.members[2].lease_exists = false;
        assert_eq!(compute_status(&o, now)["members"].as_array().unwrap().len(), 2, "no lease, no member entry");
    }

    #[test]
    fn different_cluster_ids_are_a_mismatch_and_old_holders_are_not_checked() {
        let now = Timestamp::now();
        let mut o = obs([0, 1, 2], now);
        o.members[2].holder = Some("2:beef:Leader".into());
        assert_eq!(condition(&compute_status(&o, now), "ClusterIDMismatch").unwrap().1, "MultipleClusterIDsDetected");
        for m in &mut o.members {
            m.holder = Some("1:Member".into());
        }
        assert_eq!(condition(&compute_status(&o, now), "ClusterIDMismatch").unwrap().1, "NoClusterIDDetected");
    }

    #[test]
    fn a_rolling_update_is_not_all_members_updated() {
        let now = Timestamp::now();
        let mut o = obs([0, 1, 2], now);
        o.sts.as_mut().unwrap().update_revision = "r2".into();
        assert_eq!(condition(&compute_status(&o, now), "AllMembersUpdated").unwrap().0, "False");
    }

    #[test]
    fn backup_ready_goes_true_unknown_false() {
        let now = Timestamp::now();
        let mut o = obs([0, 1, 2], now);
        o.backup = BackupObservation {
            enabled: true,
            leases_found: true,
            full_renewed: Some(now),
            full_created: Some(now),
            delta_renewed: Some(now),
            delta_period_seconds: 2,
            full_interval_seconds: 86400,
        };
        let s = compute_status(&o, now);
        assert_eq!(condition(&s, "BackupReady"), Some(("True".into(), "BackupSucceeded".into())));
        o.previous = s;
        o.backup.delta_renewed = Some(now - jiff::SignedDuration::from_secs(30));
        let s = compute_status(&o, now);
        assert_eq!(condition(&s, "BackupReady"), Some(("Unknown".into(), "Unknown".into())), "never True to False");
        o.previous = s;
        assert_eq!(condition(&compute_status(&o, now), "BackupReady"), Some(("False".into(), "BackupFailed".into())));
        o.backup.enabled = false;
        assert_eq!(condition(&compute_status(&o, now), "BackupReady"), None, "no store, no BackupReady");
    }

    #[test]
    fn scaled_to_zero_is_not_checked_and_compaction_is_kept() {
        let now = Timestamp::now();
        let mut o = obs([0, 1, 2], now);
        o.previous = json!({"conditions": [
            {"type": "Ready", "status": "True", "reason": "Quorate"},
            {"type": "LastSnapshotCompactionSucceeded", "status": "True", "reason": "None"}]});
        o.spec_replicas = 0;
        let s = compute_status(&o, now);
        assert_eq!(condition(&s, "Ready"), Some(("True".into(), "NotChecked".into())));
        assert_eq!(condition(&s, "AllMembersReady"), Some(("Unknown".into(), "NotChecked".into())));
        assert_eq!(condition(&s, "LastSnapshotCompactionSucceeded"), Some(("True".into(), "None".into())));
    }

    #[test]
    fn transition_times_survive_unchanged_conditions() {
        let t0 = Timestamp::now();
        let old = compute_status(&obs([0, 1, 2], t0), t0);
        let t1 = t0 + jiff::SignedDuration::from_secs(1);
        let mut new = compute_status(&obs([0, 1, 2], t1), t1);
        carry_transition_times(&mut new, &old);
        assert_eq!(new["conditions"][0]["lastTransitionTime"], old["conditions"][0]["lastTransitionTime"]);
        assert_eq!(new["members"][1]["lastTransitionTime"], old["members"][1]["lastTransitionTime"]);
    }

    #[test]
    fn a_new_reason_keeps_the_transition_time_a_new_status_does_not() {
        let t0 = Timestamp::now();
        let mut o = obs([0, 8, 30], t0);
        o.members[1].containers_ready = true;
        let old = compute_status(&o, t0);
        assert_eq!(old["members"][1]["reason"], "LeaseExpired");
        let t1 = t0 + jiff::SignedDuration::from_secs(1);
        o.members[1].containers_ready = false;
        o.members[1].renew_time = Some(t1 - jiff::SignedDuration::from_secs(30));
        let mut new = compute_status(&o, t1);
        carry_transition_times(&mut new, &old);
        assert_eq!(new["members"][1]["status"], "NotReady");
        assert_ne!(
            new["members"][1]["lastTransitionTime"], old["members"][1]["lastTransitionTime"],
            "Unknown -> NotReady"
        );
        assert_eq!(new["members"][2]["reason"], "UnknownGracePeriodExceeded");
        assert_eq!(new["members"][2]["lastTransitionTime"], old["members"][2]["lastTransitionTime"], "still NotReady");
    }
}
