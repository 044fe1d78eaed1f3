//! Judging etcd's own answers (Maintenance Status and alarms of every member): alarms, space, lag, agreement
//! on leader and cluster, versions, learners. Pure functions over [`crate::etcd::EtcdObservation`].

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use super::model::{AlarmView, EtcdView, MemberEtcdView, MemberHealth, UnreachableView};
use crate::api::Etcd;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::etcd::quantity::{human_bytes, int_or_string_bytes};
use crate::etcd::{AlarmKind, DEFAULT_QUOTA_BYTES, EtcdObservation, MemberStatus, UnreachableCause, hex_id};
use crate::kube::ObjectKey;

/// A database at or above this share of its quota is a warning (percent).
pub const QUOTA_WARNING_PERCENT: i64 = 80;
/// A follower whose applied index trails the leader's raft index by more than this many entries is behind; it is
/// lagging when it still is, and not closing the gap, a few seconds later ([`lag_trend`]). The members are read
/// concurrently, not at one instant: under load a healthy follower trails by the entries of a few milliseconds;
/// a thousand is far past that and far below what a stalled member accumulates.
pub const LAG_THRESHOLD: u64 = 1000;
/// A defragmentation hint needs at least this much to free: a fresh etcd's 20 KiB file is "twice its content"
/// and worth nothing.
pub const DEFRAG_MIN_FREEABLE_BYTES: i64 = 64 * 1024 * 1024;
/// A learner whose etcd has run this long and is still not promoted is stuck (etcd-backup-restore promotes a
/// learner as soon as it has caught up, within seconds to a minute).
pub const LEARNER_STUCK_SECONDS: i64 = 5 * 60;

/// The quota a member's database is judged against, and where it comes from: what etcd reports (3.6 and
/// later), else `spec.etcd.quota`, else etcd-druid's default.
pub fn effective_quota(reported: Option<i64>, spec: Option<&IntOrString>) -> (i64, &'static str) {
    if let Some(q) = reported.filter(|q| *q > 0) {
        return (q, "etcd");
    }
    match spec.and_then(int_or_string_bytes).filter(|q| *q > 0) {
        Some(q) => (q, "spec.etcd.quota"),
        None => (DEFAULT_QUOTA_BYTES, "default"),
    }
}

/// `412Mi/8Gi 5%`.
pub fn size_of_quota(db_size: i64, quota: i64) -> String {
    format!("{}/{} {}%", human_bytes(db_size), human_bytes(quota), percent(db_size, quota))
}

fn percent(part: i64, whole: i64) -> i64 {
    if whole <= 0 { 0 } else { (part.saturating_mul(100)) / whole }
}

/// The problem an armed alarm is: what it means and the runbook that clears it.
pub fn alarm_problem(etcd: &ObjectKey, alarm: &AlarmView) -> String {
    let cmd = crate::output::command_name();
    let target = format!("-n {} {}", etcd.namespace, etcd.name);
    match alarm.alarm.as_str() {
        "NOSPACE" => format!(
            "etcd alarm NOSPACE raised by member {}: the database reached its quota and etcd refuses writes; \
             run `{cmd} runbook space-recovery {target}`",
            alarm.member
        ),
        "CORRUPT" => format!(
            "etcd alarm CORRUPT raised for member {}: its keyspace differs from the others'; \
             run `{cmd} runbook member-restore {target} {}`",
            alarm.member, alarm.member
        ),
        other => format!("etcd alarm {other} raised by member {}", alarm.member),
    }
}

/// Space warnings of one member: a database at or above [`QUOTA_WARNING_PERCENT`] of its quota (with the
/// headroom left), and one more than twice the size in use (what a defragmentation would free).
pub fn space_warnings(member: &str, v: &MemberEtcdView) -> Vec<String> {
    let mut out = Vec::new();
    let used = percent(v.db_size, v.quota);
    if used >= QUOTA_WARNING_PERCENT {
        out.push(format!(
            "member {member}'s database is {} ({used}% of its {} quota from {}); {} headroom left",
            human_bytes(v.db_size),
            human_bytes(v.quota),
            v.quota_source,
            human_bytes((v.quota - v.db_size).max(0))
        ));
    }
    let freeable = v.db_size - v.db_size_in_use;
    if v.db_size > 2 * v.db_size_in_use && freeable >= DEFRAG_MIN_FREEABLE_BYTES {
        out.push(format!(
            "member {member}: defragmentation would free {} ({} in use of {})",
            human_bytes(freeable),
            human_bytes(v.db_size_in_use),
            human_bytes(v.db_size)
        ));
    }
    out
}

/// How far each member's applied index trails the leader's raft index (`None` where the leader did not answer).
pub fn lags(statuses: &[Option<&MemberStatus>]) -> Vec<Option<u64>> {
    let leader = statuses.iter().flatten().find(|s| s.is_leader());
    statuses
        .iter()
        .map(|s| match (s, leader) {
            (Some(s), Some(l)) => Some(l.raft_index.saturating_sub(s.raft_applied_index)),
            _ => None,
        })
        .collect()
}

/// A member's lag judged over two readings a few seconds apart, as etcd's own lag is only meaningful over time:
/// a follower that has just come back trails by thousands of entries and is gone past them a second later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LagTrend {
    /// Within [`LAG_THRESHOLD`] of the leader.
    InStep,
    /// Behind in one reading, with no earlier one to compare with.
    Behind,
    /// Behind, but less than in the earlier reading: applying faster than the leader commits.
    CatchingUp {
        /// Entries behind in the earlier reading.
        was: u64,
    },
    /// Behind in both readings and not closing the gap: a problem.
    Lagging {
        /// Entries behind in the earlier reading.
        was: u64,
    },
}

/// How a member that trails the leader by `now` entries fares, given how far it trailed in the earlier reading
/// (`None`: no earlier reading of it and its leader).
pub fn lag_trend(earlier: Option<u64>, now: u64) -> LagTrend {
    if now <= LAG_THRESHOLD {
        return LagTrend::InStep;
    }
    match earlier {
        None => LagTrend::Behind,
        // Behind before too and the gap did not shrink: stalled, or applying slower than the leader commits.
        Some(was) if was > LAG_THRESHOLD && now >= was => LagTrend::Lagging { was },
        // Shrinking, or it fell behind only since the earlier reading: not yet "for more than a few seconds".
        Some(was) => LagTrend::CatchingUp { was },
    }
}

/// The ordinals to read again a moment later, because one reading cannot tell lagging from catching up: every
/// member behind by more than [`LAG_THRESHOLD`], and the leader (whose raft index the lag is measured against).
/// Empty when no member is behind.
pub fn to_read_again(observation: &EtcdObservation) -> Vec<usize> {
    let statuses: Vec<Option<&MemberStatus>> = observation.members.iter().map(|m| m.outcome.as_ref().ok()).collect();
    let mut again: Vec<usize> = lags(&statuses)
        .iter()
        .enumerate()
        .filter(|(_, l)| l.is_some_and(|l| l > LAG_THRESHOLD))
        .map(|(i, _)| i)
        .collect();
    if !again.is_empty() {
        again.extend(statuses.iter().position(|s| s.is_some_and(|s| s.is_leader())));
    }
    again
}

/// Members that disagree on the leader or on the cluster they belong to, and members without a leader.
/// `members`: member name and status of each member that answered.
pub fn agreement_problems(members: &[(&str, &MemberStatus)]) -> Vec<String> {
    let mut out = Vec::new();
    let distinct = |f: &dyn Fn(&MemberStatus) -> u64| {
        let mut v: Vec<u64> = members.iter().map(|(_, s)| f(s)).filter(|x| *x != 0).collect();
        v.sort_unstable();
        v.dedup();
        v.len()
    };
    for (name, s) in members.iter().filter(|(_, s)| s.leader == 0) {
        out.push(format!("member {name}'s etcd has no leader (raft term {})", s.raft_term));
    }
    if distinct(&|s| s.leader) > 1 {
        let each: Vec<String> = members.iter().map(|(n, s)| format!("{n} follows {}", hex_id(s.leader))).collect();
        out.push(format!("members disagree on the etcd leader: {}", each.join(", ")));
    }
    if distinct(&|s| s.cluster_id) > 1 {
        let each: Vec<String> = members.iter().map(|(n, s)| format!("{n}={}", hex_id(s.cluster_id))).collect();
        out.push(format!("members' etcd report different cluster IDs: {}", each.join(", ")));
    }
    out
}

/// Mixed etcd versions (normal only while a rolling update is under way).
pub fn version_warning(members: &[(&str, &MemberStatus)]) -> Option<String> {
    let mut versions: Vec<&str> = members.iter().map(|(_, s)| s.version.as_str()).collect();
    versions.sort_unstable();
    versions.dedup();
    (versions.len() > 1).then(|| {
        let each: Vec<String> = members.iter().map(|(n, s)| format!("{n} {}", s.version)).collect();
        format!("members run different etcd versions: {} (expected only during a rolling update)", each.join(", "))
    })
}

/// A learner not promoted for [`LEARNER_STUCK_SECONDS`]. One observation cannot say when the member became a
/// learner; it can say how long its etcd container has run (`running_for`), and a member is a learner from the
/// start of its etcd until its promotion, so a learner whose etcd has run that long has been one that long.
pub fn learner_problem(member: &str, is_learner: bool, running_for: Option<i64>) -> Option<String> {
    match running_for {
        Some(secs) if is_learner && secs >= LEARNER_STUCK_SECONDS => Some(format!(
            "member {member} is still an etcd learner after its etcd has run for {}; it has not been promoted",
            crate::output::age::human(secs)
        )),
        _ => None,
    }
}

/// Seconds the etcd container of `pod` has been running (the container named `etcd`, else the first).
pub fn etcd_running_for(pod: &Pod, now: Timestamp) -> Option<i64> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let c = statuses.iter().find(|c| c.name == "etcd").or(statuses.first())?;
    let started = c.state.as_ref()?.running.as_ref()?.started_at.as_ref()?.0;
    Some(now.as_second() - started.as_second())
}

/// The one line said when no member's etcd answered, naming the cause once.
pub fn not_reached(unreachable: &[UnreachableView]) -> Option<String> {
    let first = unreachable.first()?;
    let same = unreachable.iter().all(|u| u.cause == first.cause);
    if same && first.cause == UnreachableCause::NoPod {
        return Some("etcd not asked: no member has a pod".to_string());
    }
    let why = match first.cause {
        UnreachableCause::PortForwardForbidden | UnreachableCause::TlsSecret => first.detail.clone(),
        _ if same && unreachable.len() > 1 => format!("no member answered ({})", first.detail),
        _ => {
            let each: Vec<String> = unreachable.iter().map(|u| format!("{}: {}", u.member, u.detail)).collect();
            each.join("; ")
        }
    };
    Some(format!("etcd not reached, judged from the Kubernetes objects only: {why}"))
}

/// What etcd's answers add to a report: each member's view (set on `members`, matched by ordinal), the
/// cluster view, problems and warnings.
pub struct Judged {
    /// The cluster view.
    pub view: EtcdView,
    /// Problems (the Etcd is not healthy).
    pub problems: Vec<String>,
    /// Warnings.
    pub warnings: Vec<String>,
}

/// Judges `observation` of `etcd`; `members` are the report's members in ordinal order, `pods` the Etcd's pods.
pub fn judge(
    etcd: &Etcd,
    key: &ObjectKey,
    observation: &EtcdObservation,
    members: &mut [MemberHealth],
    pods: &[Pod],
    now: Timestamp,
) -> Judged {
    let spec_quota = etcd.spec.etcd.quota.as_ref();
    let statuses: Vec<Option<&MemberStatus>> = members
        .iter()
        .map(|m| observation.members.get(m.index as usize).and_then(|r| r.outcome.as_ref().ok()))
        .collect();
    let lags = lags(&statuses);
    // The same members' lags in the earlier reading, if there is one.
    let earlier_lags: Vec<Option<u64>> = match observation.earlier.as_deref() {
        Some(earlier) => self::lags(
            &members
                .iter()
                .map(|m| earlier.members.get(m.index as usize).and_then(|r| r.outcome.as_ref().ok()))
                .collect::<Vec<_>>(),
        ),
        None => vec![None; members.len()],
    };
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let mut unreachable = Vec::new();
    let mut answered: Vec<(&str, &MemberStatus)> = Vec::new();
    for (i, m) in members.iter_mut().enumerate() {
        let Some(reading) = observation.members.get(m.index as usize) else { continue };
        let s = match &reading.outcome {
            Ok(s) => s,
            Err(u) => {
                unreachable.push(UnreachableView { member: m.name.clone(), cause: u.cause, detail: u.detail.clone() });
                continue;
            }
        };
        let (quota, quota_source) = effective_quota(s.db_size_quota, spec_quota);
        let view = MemberEtcdView {
            member_id: hex_id(s.member_id),
            cluster_id: hex_id(s.cluster_id),
            leader_id: (s.leader != 0).then(|| hex_id(s.leader)),
            is_leader: s.is_leader(),
            is_learner: s.is_learner,
            version: s.version.clone(),
            db_size: s.db_size,
            db_size_in_use: s.db_size_in_use,
            quota,
            quota_source: quota_source.to_string(),
            raft_term: s.raft_term,
            raft_index: s.raft_index,
            raft_applied_index: s.raft_applied_index,
            lag: lags[i],
            revision: s.revision,
            errors: s.errors.clone(),
        };
        warnings.extend(space_warnings(&m.name, &view));
        if let Some(lag) = view.lag {
            let behind = format!(
                "member {}'s etcd trails the leader by {lag} raft entries (applied {}, leader at {})",
                m.name,
                view.raft_applied_index,
                view.raft_applied_index + lag
            );
            match lag_trend(earlier_lags[i], lag) {
                LagTrend::InStep => {}
                LagTrend::Lagging { was } => problems.push(format!("{behind}, {was} a moment before: not catching up")),
                LagTrend::CatchingUp { was } => warnings.push(format!("{behind}, catching up ({was} a moment before)")),
                LagTrend::Behind => warnings.push(format!("{behind} in a single reading")),
            }
        }
        let pod = pods.iter().find(|p| p.metadata.name.as_deref() == Some(reading.pod.as_str()));
        problems.extend(learner_problem(&m.name, s.is_learner, pod.and_then(|p| etcd_running_for(p, now))));
        for e in &s.errors {
            warnings.push(format!("member {}'s etcd reports: {e}", m.name));
        }
        m.etcd = Some(view);
        answered.push((m.name.as_str(), s));
    }
    problems.extend(agreement_problems(&answered));
    warnings.extend(version_warning(&answered));
    let name_of = |id: u64| answered.iter().find(|(_, s)| s.member_id == id).map(|(n, _)| n.to_string());
    let alarms: Option<Vec<AlarmView>> = observation.alarms().map(|all| {
        all.iter()
            .map(|a| AlarmView {
                member: name_of(a.member_id).unwrap_or_else(|| hex_id(a.member_id)),
                member_id: hex_id(a.member_id),
                alarm: a.kind.as_str().to_string(),
            })
            .collect()
    });
    // One NOSPACE per member that raised it is one cause: say it once, first.
    let mut alarm_problems: Vec<String> = Vec::new();
    for a in alarms.iter().flatten() {
        if a.alarm == AlarmKind::NoSpace.as_str() && alarm_problems.iter().any(|p| p.contains("NOSPACE")) {
            continue;
        }
        alarm_problems.push(alarm_problem(key, a));
    }
    problems.splice(0..0, alarm_problems);
    let mut leaders: Vec<u64> = answered.iter().map(|(_, s)| s.leader).filter(|l| *l != 0).collect();
    leaders.sort_unstable();
    leaders.dedup();
    let leader = match leaders.as_slice() {
        [one] => Some(name_of(*one).unwrap_or_else(|| hex_id(*one))),
        _ => None,
    };
    let not_reached = if answered.is_empty() { not_reached(&unreachable) } else { None };
    if !answered.is_empty() {
        // Members that did not answer while others did: said once, as a warning (an unreachable etcd alone
        // never makes the verdict).
        for u in &unreachable {
            warnings.push(format!("member {}'s etcd did not answer: {}", u.member, u.detail));
        }
    }
    Judged { view: EtcdView { leader, alarms, unreachable, not_reached }, problems, warnings }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(id: u64, leader: u64) -> MemberStatus {
        MemberStatus {
            member_id: id,
            cluster_id: 77,
            leader,
            version: "3.5.21".into(),
            db_size: 20 * 1024,
            db_size_in_use: 16 * 1024,
            db_size_quota: None,
            raft_term: 3,
            raft_index: 5000,
            raft_applied_index: 5000,
            is_learner: false,
            errors: vec![],
            revision: 40,
        }
    }

    fn view(db: i64, in_use: i64, quota: i64) -> MemberEtcdView {
        MemberEtcdView {
            member_id: "1".into(),
            cluster_id: "2".into(),
            leader_id: Some("1".into()),
            is_leader: true,
            is_learner: false,
            version: "3.5.21".into(),
            db_size: db,
            db_size_in_use: in_use,
            quota,
            quota_source: "default".into(),
            raft_term: 1,
            raft_index: 1,
            raft_applied_index: 1,
            lag: Some(0),
            revision: 1,
            errors: vec![],
        }
    }

    const MI: i64 = 1024 * 1024;
    const GI: i64 = 1024 * MI;

    #[test]
    fn the_quota_is_what_etcd_reports_else_the_spec_else_the_default() {
        assert_eq!(effective_quota(Some(2 * GI), Some(&IntOrString::String("4Gi".into()))), (2 * GI, "etcd"));
        assert_eq!(effective_quota(None, Some(&IntOrString::String("4Gi".into()))), (4 * GI, "spec.etcd.quota"));
        assert_eq!(effective_quota(Some(0), None), (8 * GI, "default"));
        assert_eq!(size_of_quota(412 * MI, 8 * GI), "412Mi/8Gi 5%");
    }

    #[test]
    fn a_database_near_its_quota_warns_with_the_headroom() {
        let w = space_warnings("etcd-main-0", &view(7 * GI, 7 * GI, 8 * GI));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("87% of its 8Gi quota") && w[0].contains("1Gi headroom left"), "{w:?}");
        assert!(space_warnings("m", &view(6 * GI, 6 * GI, 8 * GI)).is_empty());
    }

    #[test]
    fn a_database_twice_its_content_says_what_defragmentation_frees() {
        let w = space_warnings("etcd-main-1", &view(500 * MI, 200 * MI, 8 * GI));
        assert_eq!(w, vec!["member etcd-main-1: defragmentation would free 300Mi (200Mi in use of 500Mi)"]);
        // A fresh etcd's small file is not worth a word.
        assert!(space_warnings("m", &view(40 * 1024, 16 * 1024, 8 * GI)).is_empty());
    }

    #[test]
    fn lag_is_measured_against_the_leaders_raft_index() {
        let leader = status(1, 1);
        let mut behind = status(2, 1);
        behind.raft_applied_index = 2000;
        assert_eq!(lags(&[Some(&leader), Some(&behind), None]), vec![Some(0), Some(3000), None]);
        assert_eq!(lags(&[Some(&behind)]), vec![None]);
    }

    #[test]
    fn a_member_behind_is_lagging_only_when_it_stays_behind_without_closing_the_gap() {
        assert_eq!(lag_trend(None, 10), LagTrend::InStep);
        assert_eq!(lag_trend(Some(5000), 900), LagTrend::InStep, "caught up since");
        assert_eq!(lag_trend(None, 3000), LagTrend::Behind, "one reading cannot tell");
        assert_eq!(lag_trend(Some(3000), 3000), LagTrend::Lagging { was: 3000 }, "stalled");
        assert_eq!(lag_trend(Some(3000), 4200), LagTrend::Lagging { was: 3000 }, "falling further behind");
        assert_eq!(lag_trend(Some(3000), 1200), LagTrend::CatchingUp { was: 3000 });
        assert_eq!(lag_trend(Some(200), 1500), LagTrend::CatchingUp { was: 200 }, "behind only since just now");
    }

    fn reading(s: MemberStatus) -> crate::etcd::MemberReading {
        crate::etcd::MemberReading {
            pod: format!("m-{}", s.member_id),
            via: String::new(),
            outcome: Ok(s),
            alarms: None,
        }
    }

    #[test]
    fn only_a_member_behind_and_the_leader_are_read_again() {
        let mut behind = status(2, 1);
        behind.raft_applied_index = 1000;
        let obs = |members| EtcdObservation { members, earlier: None };
        assert_eq!(
            to_read_again(&obs(vec![reading(status(1, 1)), reading(status(2, 1)), reading(status(3, 1))])),
            Vec::<usize>::new()
        );
        assert_eq!(
            to_read_again(&obs(vec![reading(status(3, 1)), reading(behind), reading(status(1, 1))])),
            vec![1, 2]
        );
    }

    #[test]
    fn members_that_disagree_on_leader_or_cluster_are_named() {
        let (a, b, mut c) = (status(1, 1), status(2, 1), status(3, 3));
        assert!(agreement_problems(&[("a", &a), ("b", &b)]).is_empty());
        let p = agreement_problems(&[("a", &a), ("b", &b), ("c", &c)]);
        assert_eq!(p, vec!["members disagree on the etcd leader: a follows 1, b follows 1, c follows 3"]);
        c.leader = 1;
        c.cluster_id = 99;
        let p = agreement_problems(&[("a", &a), ("c", &c)]);
        assert_eq!(p, vec!["members' etcd report different cluster IDs: a=4d, c=63"]);
        c.leader = 0;
        c.cluster_id = 77;
        assert!(agreement_problems(&[("c", &c)])[0].contains("has no leader"));
    }

    #[test]
    fn mixed_versions_warn() {
        let (a, mut b) = (status(1, 1), status(2, 1));
        assert_eq!(version_warning(&[("a", &a), ("b", &b)]), None);
        b.version = "3.4.23".into();
        assert!(version_warning(&[("a", &a), ("b", &b)]).unwrap().contains("a 3.5.21, b 3.4.23"));
    }

    #[test]
    fn a_learner_is_stuck_only_after_its_etcd_ran_for_minutes() {
        assert_eq!(learner_problem("m", true, Some(60)), None);
        assert_eq!(learner_problem("m", false, Some(3600)), None);
        assert_eq!(learner_problem("m", true, None), None);
        assert!(learner_problem("m", true, Some(600)).unwrap().contains("after its etcd has run for 10m"));
    }

    #[test]
    fn alarms_name_their_runbook() {
        let key = ObjectKey { namespace: "shoot--a".into(), name: "etcd-main".into() };
        let a = |alarm: &str| AlarmView { member: "etcd-main-1".into(), member_id: "2".into(), alarm: alarm.into() };
        let nospace = alarm_problem(&key, &a("NOSPACE"));
        assert!(nospace.contains("NOSPACE") && nospace.contains("runbook space-recovery -n shoot--a etcd-main"));
        let corrupt = alarm_problem(&key, &a("CORRUPT"));
        assert!(corrupt.contains("runbook member-restore -n shoot--a etcd-main etcd-main-1"), "{corrupt}");
    }

    #[test]
    fn an_unreachable_etcd_is_said_once() {
        let u = |m: &str, cause, d: &str| UnreachableView { member: m.into(), cause, detail: d.into() };
        let forbidden = [
            u("a", UnreachableCause::PortForwardForbidden, "no permission to create pods/portforward in namespace x"),
            u("b", UnreachableCause::PortForwardForbidden, "no permission to create pods/portforward in namespace x"),
        ];
        assert_eq!(
            not_reached(&forbidden).unwrap(),
            "etcd not reached, judged from the Kubernetes objects only: no permission to create pods/portforward in namespace x"
        );
        assert_eq!(not_reached(&[]), None);
    }
}
