//! The quick actions an operator takes on etcd itself: list and disarm alarms (`etcdctl alarm list|disarm`),
//! and move the leadership to another member (`etcdctl move-leader`). Each is refused, before anything is
//! sent, when it would not help or would hurt; the refusals are pure functions.

use std::time::Duration;

use etcd_client::{AlarmAction, AlarmOptions, AlarmType};
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use super::member_status::{Alarm, AlarmKind, EtcdObservation, MemberStatus, alarms_of, client_tls, reach};
use super::quantity::human_bytes;
use super::{EtcdError, hex_id};
use crate::api::Etcd;

/// An alarm with the member it was raised for, as `alarm list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamedAlarm {
    /// Member name (the member ID when no member answered with it).
    pub member: String,
    /// etcd member ID (hex).
    pub member_id: String,
    /// The alarm (`NOSPACE`, `CORRUPT`).
    pub alarm: AlarmKind,
}

/// The member name of etcd member `id` in `observation` (its pod's member name via `member_of_pod`), else the
/// hex ID.
pub fn member_name(observation: &EtcdObservation, id: u64, member_of_pod: impl Fn(&str) -> String) -> String {
    observation
        .answered()
        .find(|(_, s)| s.member_id == id)
        .map(|(pod, _)| member_of_pod(pod))
        .unwrap_or_else(|| hex_id(id))
}

/// Why disarming `alarms` now would not help: a `NOSPACE` whose cause remains, i.e. a member whose database
/// file is still at or above its quota (etcd raises the alarm again at the next write). `quota` is the quota of a
/// member's status. `None`: disarming is safe.
// etcd v3.5.9 server/etcdserver/quota.go: a write is refused while `Backend().Size() + cost >= maxBackendBytes`,
// the database file's size, not the size in use: only a defragmentation after a compaction brings it down.
pub fn disarm_refusal(
    alarms: &[Alarm],
    members: &[(String, MemberStatus)],
    quota: impl Fn(&MemberStatus) -> i64,
) -> Option<String> {
    if !alarms.iter().any(|a| a.kind == AlarmKind::NoSpace) {
        return None;
    }
    let full: Vec<String> = members
        .iter()
        .filter(|(_, s)| s.db_size >= quota(s))
        .map(|(name, s)| format!("{name} ({} of {})", human_bytes(s.db_size), human_bytes(quota(s))))
        .collect();
    if full.is_empty() {
        return None;
    }
    Some(format!(
        "the cause of NOSPACE remains: the database of {} is still at its quota, so etcd would raise the alarm \
         again at the next write; compact and defragment first",
        full.join(", ")
    ))
}

/// Why moving the leadership to `target` is refused: it is a learner (it cannot vote, let alone lead), not
/// ready, or did not answer. `ready`: whether the member counts as ready (pod and lease). `None`: go ahead.
pub fn move_leader_refusal(target: &str, status: Option<&MemberStatus>, ready: bool) -> Option<String> {
    match status {
        None => Some(format!("member {target}'s etcd did not answer; its leadership cannot be judged")),
        Some(s) if s.is_learner => Some(format!("member {target} is a learner: it cannot become the leader")),
        Some(_) if !ready => Some(format!("member {target} is not ready: moving the leadership to it would hurt")),
        Some(_) => None,
    }
}

/// Connects to `pod` of `etcd` with its client TLS.
async fn connect(
    kube: &kube::Client,
    etcd: &Etcd,
    pod: &Pod,
    timeout: Duration,
) -> Result<super::member_status::Reached, EtcdError> {
    let tls = client_tls(kube, etcd).await.map_err(|u| EtcdError::Unreachable(u.detail))?;
    reach(kube, etcd, pod, tls, timeout).await.map_err(|u| EtcdError::Unreachable(u.detail))
}

/// The cluster's alarms, asked of `pod`'s member.
pub async fn list_alarms(
    kube: &kube::Client,
    etcd: &Etcd,
    pod: &Pod,
    timeout: Duration,
) -> Result<Vec<Alarm>, EtcdError> {
    let mut conn = connect(kube, etcd, pod, timeout).await?;
    let r = tokio::time::timeout(timeout, conn.client.alarm(AlarmAction::Get, AlarmType::None, None))
        .await
        .map_err(|_| EtcdError::Unreachable(format!("{} did not answer the alarm list", conn.via)))?
        .map_err(|e| EtcdError::Failed(format!("listing alarms ({}): {e}", conn.via)))?;
    Ok(alarms_of(&r))
}

/// Disarms each of `alarms` through `pod`'s member; returns the alarms left afterwards.
pub async fn disarm(
    kube: &kube::Client,
    etcd: &Etcd,
    pod: &Pod,
    alarms: &[Alarm],
    timeout: Duration,
) -> Result<Vec<Alarm>, EtcdError> {
    let mut conn = connect(kube, etcd, pod, timeout).await?;
    for a in alarms {
        let mut options = AlarmOptions::new();
        options.with_member(a.member_id);
        let call = conn.client.alarm(AlarmAction::Deactivate, a.kind.alarm_type(), Some(options));
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| EtcdError::Unreachable(format!("{} did not answer the disarm", conn.via)))?
            .map_err(|e| {
                EtcdError::Failed(format!(
                    "disarming {} of member {} ({}): {e}",
                    a.kind.as_str(),
                    hex_id(a.member_id),
                    conn.via
                ))
            })?;
    }
    let r = conn
        .client
        .alarm(AlarmAction::Get, AlarmType::None, None)
        .await
        .map_err(|e| EtcdError::Failed(format!("listing alarms ({}): {e}", conn.via)))?;
    Ok(alarms_of(&r))
}

/// Asks the leader (reached through `leader_pod`) to hand its leadership to member `target_id`, then waits up
/// to `wait` until `target_pod`'s member says it leads.
pub async fn move_leader(
    kube: &kube::Client,
    etcd: &Etcd,
    leader_pod: &Pod,
    target_pod: &Pod,
    target_id: u64,
    wait: Duration,
) -> Result<(), EtcdError> {
    let mut leader = connect(kube, etcd, leader_pod, wait).await?;
    leader
        .client
        .move_leader(target_id)
        .await
        .map_err(|e| EtcdError::Failed(format!("moving the leadership ({}): {e}", leader.via)))?;
    let mut target = connect(kube, etcd, target_pod, wait).await?;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if let Ok(s) = target.client.status().await
            && s.leader() == target_id
        {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(EtcdError::Failed(format!(
                "etcd accepted the leadership transfer, but member {} does not lead after {}s",
                hex_id(target_id),
                wait.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(db: i64, learner: bool) -> MemberStatus {
        MemberStatus {
            member_id: 1,
            cluster_id: 9,
            leader: 1,
            version: "3.5.21".into(),
            db_size: db,
            db_size_in_use: db / 2,
            db_size_quota: None,
            raft_term: 2,
            raft_index: 100,
            raft_applied_index: 100,
            is_learner: learner,
            errors: vec![],
            revision: 50,
        }
    }

    #[test]
    fn nospace_is_not_disarmed_while_a_database_is_still_at_its_quota() {
        let nospace = [Alarm { member_id: 1, kind: AlarmKind::NoSpace }];
        let full = [("etcd-main-0".to_string(), status(2 * 1024 * 1024, false))];
        let why = disarm_refusal(&nospace, &full, |_| 2 * 1024 * 1024).unwrap();
        assert!(why.contains("etcd-main-0 (2Mi of 2Mi)"), "{why}");
        let room = [("etcd-main-0".to_string(), status(1024 * 1024, false))];
        assert_eq!(disarm_refusal(&nospace, &room, |_| 2 * 1024 * 1024), None);
        let corrupt = [Alarm { member_id: 1, kind: AlarmKind::Corrupt }];
        assert_eq!(disarm_refusal(&corrupt, &full, |_| 2 * 1024 * 1024), None);
    }

    #[test]
    fn the_leadership_goes_only_to_a_ready_voting_member() {
        assert!(move_leader_refusal("m", Some(&status(1, true)), true).unwrap().contains("learner"));
        assert!(move_leader_refusal("m", Some(&status(1, false)), false).unwrap().contains("not ready"));
        assert!(move_leader_refusal("m", None, true).unwrap().contains("did not answer"));
        assert_eq!(move_leader_refusal("m", Some(&status(1, false)), true), None);
    }
}
