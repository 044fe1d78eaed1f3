//! Member leases and member status the way etcd-druid and etcd-backup-restore define them.
//!
//! - Holder identity: etcd-backup-restore `pkg/health/heartbeat/heartbeat.go` writes
//!   `<memberID>:<clusterID>:<Leader|Member>` (v0.39.0 and later; IDs in hex) and `<memberID>:<Leader|Member>`
//!   before. etcd-druid v0.37.1 `internal/health/etcdmember/check_ready.go` splits by `:` and accepts both.
//! - Member status: etcd-druid v0.37.1 `internal/health/etcdmember/check_ready.go` with the default thresholds of
//!   `api/config/v1alpha1/defaults.go` (unknown after 1m, not ready 5m later).

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;

/// etcd-druid's default `etcdMember.unknownThreshold`.
pub const UNKNOWN_THRESHOLD_SECONDS: i64 = 60;
/// etcd-druid's default `etcdMember.notReadyThreshold`.
pub const NOT_READY_THRESHOLD_SECONDS: i64 = 300;

/// A parsed member lease holder identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// etcd member ID (hex).
    pub member_id: String,
    /// etcd cluster ID (hex); only in the three-part form.
    pub cluster_id: Option<String>,
    /// `Leader` or `Member`; `None` for any other value, as etcd-druid does.
    pub role: Option<String>,
}

/// Parses `<memberID>:<clusterID>:<role>` or `<memberID>:<role>`; `None` for anything else.
pub fn parse_holder(identity: &str) -> Option<Holder> {
    let parts: Vec<&str> = identity.split(':').collect();
    let (member_id, cluster_id, role) = match parts.as_slice() {
        [m, r] => (*m, None, *r),
        [m, c, r] => (*m, Some(*c), *r),
        _ => return None,
    };
    if member_id.is_empty() {
        return None;
    }
    Some(Holder {
        member_id: member_id.to_string(),
        cluster_id: cluster_id.filter(|c| !c.is_empty()).map(String::from),
        role: matches!(role, "Leader" | "Member").then(|| role.to_string()),
    })
}

/// `status` and `reason` of a member as etcd-druid computes them from its lease and pod; `None` where etcd-druid
/// adds no entry (lease missing, holder unparsable, or never renewed: "still in bootstrapping phase").
pub fn druid_member_status(
    lease: Option<&Lease>,
    pod: Option<&Pod>,
    now: Timestamp,
) -> Option<(&'static str, &'static str)> {
    let spec = lease?.spec.as_ref()?;
    parse_holder(spec.holder_identity.as_deref()?)?;
    let renewed = spec.renew_time.as_ref()?.0.as_second();
    let now = now.as_second();
    if renewed + UNKNOWN_THRESHOLD_SECONDS + NOT_READY_THRESHOLD_SECONDS < now {
        return Some(("NotReady", "UnknownGracePeriodExceeded"));
    }
    if renewed + UNKNOWN_THRESHOLD_SECONDS < now {
        let containers_ready = pod
            .and_then(|p| p.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "ContainersReady" && c.status == "True"));
        return Some(if containers_ready { ("Unknown", "LeaseExpired") } else { ("NotReady", "ContainersNotReady") });
    }
    Some(("Ready", "LeaseSucceeded"))
}

/// Whether the etcd process of a member pod runs: the `etcd` container (any container when none is called so)
/// is in state running and the pod is not being deleted. Readiness says nothing here: without a leader every
/// etcd's readiness probe fails, while its process is alive and holds the data a recovery needs.
pub fn etcd_running(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    let Some(statuses) = statuses else { return false };
    let running =
        |c: &k8s_openapi::api::core::v1::ContainerStatus| c.state.as_ref().is_some_and(|s| s.running.is_some());
    match statuses.iter().find(|c| c.name == "etcd") {
        Some(c) => running(c),
        None => statuses.iter().any(running),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    #[test]
    fn both_holder_forms_parse() {
        let three = parse_holder("8e9e05c52164694d:cdf818194e3a8c32:Leader").unwrap();
        assert_eq!(three.member_id, "8e9e05c52164694d");
        assert_eq!(three.cluster_id.as_deref(), Some("cdf818194e3a8c32"));
        assert_eq!(three.role.as_deref(), Some("Leader"));
        let two = parse_holder("91bc3c398fb3c146:Member").unwrap();
        assert_eq!((two.cluster_id, two.role.as_deref()), (None, Some("Member")));
        assert_eq!(parse_holder("91bc3c398fb3c146:cdf8:Learner").unwrap().role, None);
        for bad in ["", "abc", "a:b:c:d", ":Leader"] {
            assert_eq!(parse_holder(bad), None, "{bad:?}");
        }
    }

    fn lease(holder: &str, renewed_ago: i64, now: Timestamp) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(now - jiff::SignedDuration::from_secs(renewed_ago))),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(containers_ready: bool) -> Pod {
        Pod {
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "ContainersReady".into(),
                    status: if containers_ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn member_status_follows_druid_thresholds() {
        let now: Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
        let h = "1:2:Member";
        assert_eq!(druid_member_status(Some(&lease(h, 10, now)), None, now), Some(("Ready", "LeaseSucceeded")));
        assert_eq!(
            druid_member_status(Some(&lease(h, 90, now)), Some(&pod(true)), now),
            Some(("Unknown", "LeaseExpired"))
        );
        assert_eq!(
            druid_member_status(Some(&lease(h, 90, now)), Some(&pod(false)), now),
            Some(("NotReady", "ContainersNotReady"))
        );
        assert_eq!(druid_member_status(Some(&lease(h, 90, now)), None, now), Some(("NotReady", "ContainersNotReady")));
        assert_eq!(
            druid_member_status(Some(&lease(h, 361, now)), Some(&pod(true)), now),
            Some(("NotReady", "UnknownGracePeriodExceeded"))
        );
        assert_eq!(druid_member_status(None, None, now), None);
        assert_eq!(druid_member_status(Some(&Lease::default()), None, now), None, "never renewed: bootstrapping");
        assert_eq!(druid_member_status(Some(&lease("garbage", 1, now)), None, now), None);
    }
}
