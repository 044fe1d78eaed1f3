//! Snapshot tests of how `status` renders the health model, for the situations an operator meets: healthy,
//! one member down, quorum lost, stale backups, a task running. "Now" is fixed so ages are deterministic.

use druidctl::api::etcd::{BackupSpec, EtcdCondition, EtcdMemberStatus, EtcdSpec, EtcdStatus, StoreSpec};
use druidctl::api::task::{EtcdOperatorTaskStatus, LastOperation, NamespacedName, OperationState};
use druidctl::api::{Etcd, EtcdOperatorTask, EtcdOperatorTaskSpec, TaskState};
use druidctl::health::{HealthInputs, Verdict, assess};
use druidctl::output::status::{document, render_report, render_reports};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, PersistentVolumeClaim,
    PersistentVolumeClaimStatus, Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};

const NS: &str = "shoot--dev--app";
const ETCD: &str = "etcd-main";

fn now() -> Timestamp {
    "2026-01-01T12:00:00Z".parse().unwrap()
}

fn ago(seconds: i64) -> Timestamp {
    now() - jiff::SignedDuration::from_secs(seconds)
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(NS.into()),
        creation_timestamp: Some(Time(ago(86400 * 3))),
        ..Default::default()
    }
}

/// A 3-member cluster with fresh backups where every member is ready.
fn healthy() -> HealthInputs {
    let ids = ["8e9e05c52164694d", "91bc3c398fb3c146", "fd422379fda50e48"];
    let mut etcd = Etcd::new(
        ETCD,
        EtcdSpec {
            replicas: 3,
            volume_claim_template: Some("main-etcd".into()),
            backup: BackupSpec {
                store: Some(StoreSpec {
                    prefix: "etcd-main".into(),
                    provider: Some("local".into()),
                    ..Default::default()
                }),
                delta_snapshot_period: Some("20s".into()),
                ..Default::default()
            },
            ..Default::default()
        },
    );
    etcd.metadata = ObjectMeta { generation: Some(4), ..meta(ETCD) };
    let cond = |t: &str, status: &str, reason: &str| EtcdCondition {
        type_: t.into(),
        status: status.into(),
        reason: reason.into(),
        message: format!("{t} is {status}"),
        last_transition_time: Some(Time(ago(7200))),
        last_update_time: Some(Time(ago(10))),
    };
    etcd.status = Some(EtcdStatus {
        observed_generation: Some(4),
        conditions: vec![
            cond("Ready", "True", "Quorate"),
            cond("AllMembersReady", "True", "AllMembersReady"),
            cond("BackupReady", "True", "FullBackupSucceeded"),
            cond("DataVolumesReady", "True", "NoPVCEventsFound"),
        ],
        members: (0..3)
            .map(|i| EtcdMemberStatus {
                name: format!("{ETCD}-{i}"),
                id: Some(ids[i].into()),
                role: Some(if i == 0 { "Leader" } else { "Member" }.into()),
                status: "Ready".into(),
                reason: "LeaseSucceeded".into(),
                last_transition_time: Some(Time(ago(7200))),
            })
            .collect(),
        cluster_size: Some(3),
        replicas: Some(3),
        ready_replicas: Some(3),
        ready: Some(true),
        ..Default::default()
    });
    let pods = (0..3)
        .map(|i| Pod {
            metadata: meta(&format!("{ETCD}-{i}")),
            spec: Some(PodSpec { node_name: Some(format!("node-{}", ["a", "b", "c"][i])), ..Default::default() }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                container_statuses: Some(vec![ContainerStatus {
                    name: "etcd".into(),
                    ready: true,
                    restart_count: 0,
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning::default()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
        .collect();
    let pvcs = (0..3)
        .map(|i| PersistentVolumeClaim {
            metadata: meta(&format!("main-etcd-{ETCD}-{i}")),
            status: Some(PersistentVolumeClaimStatus { phase: Some("Bound".into()), ..Default::default() }),
            ..Default::default()
        })
        .collect();
    let lease = |name: &str, holder: &str, renewed: i64| Lease {
        metadata: meta(name),
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(40),
            renew_time: Some(MicroTime(ago(renewed))),
            ..Default::default()
        }),
    };
    let mut leases: Vec<Lease> = (0..3)
        .map(|i| {
            lease(
                &format!("{ETCD}-{i}"),
                &format!("{}:{}", ids[i], if i == 0 { "Leader" } else { "Member" }),
                3 + i as i64,
            )
        })
        .collect();
    leases.push(lease(&format!("{ETCD}-full-snap"), "48213", 3 * 3600));
    leases.push(lease(&format!("{ETCD}-delta-snap"), "48977", 40));
    HealthInputs { etcd, pods, pvcs, leases, tasks: Some(Vec::new()), etcd_observation: None }
}

fn member_down(inputs: &mut HealthInputs, i: usize, reason: &str) {
    let status = inputs.etcd.status.as_mut().unwrap();
    status.members[i].status = "NotReady".into();
    status.members[i].reason = reason.into();
    status.members[i].role = None;
    let pod = &mut inputs.pods[i];
    let ps = pod.status.as_mut().unwrap();
    ps.conditions = Some(vec![PodCondition { type_: "Ready".into(), status: "False".into(), ..Default::default() }]);
    ps.container_statuses = Some(vec![ContainerStatus {
        name: "etcd".into(),
        ready: false,
        restart_count: 7,
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting { reason: Some("CrashLoopBackOff".into()), ..Default::default() }),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    let lease = inputs.leases.iter_mut().find(|l| l.metadata.name.as_deref() == Some(&format!("{ETCD}-{i}"))).unwrap();
    lease.spec.as_mut().unwrap().renew_time = Some(MicroTime(ago(900)));
}

fn set_condition(inputs: &mut HealthInputs, t: &str, status: &str, reason: &str) {
    let c = inputs.etcd.status.as_mut().unwrap().conditions.iter_mut().find(|c| c.type_ == t).unwrap();
    c.status = status.into();
    c.reason = reason.into();
    c.message = format!("{t} is {status}");
    c.last_transition_time = Some(Time(ago(300)));
}

fn render(inputs: &HealthInputs) -> (Verdict, String) {
    let report = assess(inputs, now());
    (report.verdict, render_report(&report, false, false))
}

#[test]
fn status_healthy_three_members() {
    let (verdict, text) = render(&healthy());
    assert_eq!(verdict, Verdict::Healthy);
    insta::assert_snapshot!(text);
}

#[test]
fn status_one_member_down_keeps_quorum() {
    let mut inputs = healthy();
    member_down(&mut inputs, 2, "LeaseExpired");
    set_condition(&mut inputs, "AllMembersReady", "False", "NotAllMembersReady");
    let (verdict, text) = render(&inputs);
    assert_eq!(verdict, Verdict::Degraded);
    insta::assert_snapshot!(text);
}

#[test]
fn status_quorum_lost() {
    let mut inputs = healthy();
    member_down(&mut inputs, 0, "LeaseExpired");
    member_down(&mut inputs, 2, "UnknownGracePeriodExceeded");
    inputs.pods.remove(2);
    inputs.etcd.status.as_mut().unwrap().members[1].role = Some("Member".into());
    set_condition(&mut inputs, "Ready", "False", "QuorumLost");
    set_condition(&mut inputs, "AllMembersReady", "False", "NotAllMembersReady");
    let (verdict, text) = render(&inputs);
    assert_eq!(verdict, Verdict::QuorumLost);
    insta::assert_snapshot!(text);
}

#[test]
fn status_backups_stale() {
    let mut inputs = healthy();
    for l in &mut inputs.leases {
        match l.metadata.name.as_deref() {
            Some(n) if n.ends_with("-full-snap") => {
                l.spec.as_mut().unwrap().renew_time = Some(MicroTime(ago(30 * 3600)))
            }
            Some(n) if n.ends_with("-delta-snap") => {
                l.spec.as_mut().unwrap().renew_time = Some(MicroTime(ago(2 * 3600)))
            }
            _ => {}
        }
    }
    set_condition(&mut inputs, "BackupReady", "False", "FullBackupFailed");
    let (verdict, text) = render(&inputs);
    assert_eq!(verdict, Verdict::Degraded);
    insta::assert_snapshot!(text);
}

fn task(
    name: &str,
    type_: &str,
    state: TaskState,
    created_ago: i64,
    op: Option<(&str, OperationState)>,
) -> EtcdOperatorTask {
    let mut t = EtcdOperatorTask::new(
        name,
        EtcdOperatorTaskSpec {
            type_: type_.into(),
            config: None,
            ttl_seconds_after_finished: None,
            owner_etcd_refrence: NamespacedName { name: ETCD.into(), namespace: NS.into() },
        },
    );
    t.metadata = ObjectMeta { creation_timestamp: Some(Time(ago(created_ago))), ..meta(name) };
    t.status = Some(EtcdOperatorTaskStatus {
        state: Some(state),
        initiated_at: Some(Time(ago(created_ago - 1))),
        last_operation: op.map(|(n, s)| LastOperation {
            name: n.into(),
            state: s,
            last_transition_time: Time(ago(5)),
            reason: String::new(),
        }),
        ..Default::default()
    });
    t
}

#[test]
fn status_with_a_task_running() {
    let mut inputs = healthy();
    let mut other = task("snap-other", "OnDemandSnapshotTask", TaskState::Succeeded, 60, None);
    other.spec.owner_etcd_refrence.name = "etcd-events".into();
    inputs.tasks = Some(vec![
        task(
            "full-snap-1",
            "OnDemandSnapshotTask",
            TaskState::Succeeded,
            7200,
            Some(("TriggerFullSnapshot", OperationState::Completed)),
        ),
        task(
            "maint-1",
            "OnDemandMaintenanceTask",
            TaskState::InProgress,
            90,
            Some(("DefragmentMember", OperationState::InProgress)),
        ),
        other,
    ]);
    inputs.etcd.metadata.annotations =
        Some([("druid.gardener.cloud/suspend-etcd-spec-reconcile".to_string(), "true".to_string())].into());
    let (verdict, text) = render(&inputs);
    assert_eq!(verdict, Verdict::Healthy, "a running task and a suspended reconcile are shown, not judged");
    insta::assert_snapshot!(text);
}

/// Member `i` just failed: its pod is not ready, its etcd still running and its lease renewed moments ago, while
/// etcd-druid's last status update (40s ago) still says Ready, as it did for two hours.
fn member_just_failed(inputs: &mut HealthInputs, i: usize) {
    let ps = inputs.pods[i].status.as_mut().unwrap();
    ps.conditions = Some(vec![PodCondition { type_: "Ready".into(), status: "False".into(), ..Default::default() }]);
    ps.container_statuses.as_mut().unwrap()[0].ready = false;
    for c in &mut inputs.etcd.status.as_mut().unwrap().conditions {
        c.last_update_time = Some(Time(ago(40)));
    }
}

#[test]
fn status_druid_has_not_noticed_a_member_failure_yet() {
    let mut inputs = healthy();
    member_just_failed(&mut inputs, 2);
    let report = assess(&inputs, now());
    assert_eq!(report.verdict, Verdict::Degraded, "what druidctl observes counts: {:?}", report.problems);
    let m = &report.members[2];
    assert_eq!((m.status.as_str(), m.ready, m.reason.as_str()), ("Ready", false, "Unhealthy"));
    assert!(m.druid_view_stale);
    assert!(!report.members[0].druid_view_stale && !report.members[1].druid_view_stale);
    assert_eq!(report.druid_view.stale_members, ["etcd-main-2"]);
    assert_eq!(report.druid_view.age_seconds, Some(40));
    let text = render_report(&report, false, false);
    assert!(
        text.contains("STATUS: etcd-druid, as of 40s ago; REASON: druidctl; RENEWED: member lease;"),
        "the sources of the columns are said: {text}"
    );
    assert!(
        text.contains(
            "* etcd-main-2: etcd-druid has not noticed yet: it says Ready (since 120m ago), the pod is not ready"
        ),
        "{text}"
    );
    for line in text.lines() {
        assert!(line.chars().count() <= 120, "fits 120 columns: {line:?}");
    }
    insta::assert_snapshot!(text);
    let wide = render_report(&report, true, false);
    assert!(
        wide.contains("STATUS: etcd-druid, as of 40s ago")
            && wide.contains("etcd-main-2: etcd-druid has not noticed yet"),
        "{wide}"
    );

    // JSON says the same: the member's view is stale, and which members are.
    let doc = document(&[report]);
    let item = &doc["items"][0];
    assert_eq!(
        item["druidView"],
        serde_json::json!({"updatedAt": "2026-01-01T11:59:20Z", "ageSeconds": 40, "staleMembers": ["etcd-main-2"]})
    );
    let member = &item["members"][2];
    assert_eq!(
        (&member["status"], &member["statusSource"], &member["druidViewStale"], &member["statusAgeSeconds"]),
        (
            &serde_json::json!("Ready"),
            &serde_json::json!("etcd-druid"),
            &serde_json::json!(true),
            &serde_json::json!(7200)
        )
    );
    assert_eq!(item["members"][0]["druidViewStale"], false);
}

#[test]
fn druid_that_has_not_noticed_a_recovery_is_stale_too_but_not_while_it_is_ahead() {
    let mut inputs = healthy();
    // etcd-druid said NotReady 5 minutes ago; since then the lease was renewed (3s ago) and the pod is ready.
    let m = &mut inputs.etcd.status.as_mut().unwrap().members[1];
    m.status = "NotReady".into();
    m.reason = "ContainersNotReady".into();
    m.last_transition_time = Some(Time(ago(300)));
    let report = assess(&inputs, now());
    assert!(report.members[1].druid_view_stale);
    assert!(!report.members[1].ready, "etcd-druid's NotReady still counts until it notices");
    let text = render_report(&report, false, false);
    assert!(text.contains("NotReady*"), "{text}");
    assert!(
        text.contains(
            "* etcd-main-1: etcd-druid has not noticed yet: it says NotReady (since 5m ago), the pod is ready and the member lease was renewed 4s ago"
        ),
        "{text}"
    );

    // Its NotReady is newer than the last renewal: etcd-druid is ahead, not behind.
    inputs.etcd.status.as_mut().unwrap().members[1].last_transition_time = Some(Time(ago(1)));
    let report = assess(&inputs, now());
    assert!(!report.members[1].druid_view_stale);
    assert!(report.druid_view.stale_members.is_empty());
    assert!(!render_report(&report, false, false).contains("has not noticed"));

    // Without etcd-druid's members the status is derived from the lease, and the legend says so.
    inputs.etcd.status.as_mut().unwrap().members.clear();
    let report = assess(&inputs, now());
    assert!(
        report
            .members
            .iter()
            .all(|m| !m.druid_view_stale && m.status_source == druidctl::health::model::StatusSource::Lease)
    );
    let text = render_report(&report, false, false);
    assert!(text.contains("STATUS: derived now from the member lease (etcd-druid lists no members)"), "{text}");
}

#[test]
fn status_json_is_the_whole_model() {
    let mut inputs = healthy();
    member_down(&mut inputs, 1, "LeaseExpired");
    let report = assess(&inputs, now());
    let doc = document(&[report]);
    assert_eq!(doc["kind"], "EtcdHealthList");
    let item = &doc["items"][0];
    assert_eq!(
        item["quorum"],
        serde_json::json!({"members": 3, "ready": 2, "needed": 2, "tolerableFailures": 0, "quorate": true})
    );
    assert_eq!(item["members"][1]["reason"], "CrashLooping", "the pod says more than the expired lease");
    assert_eq!(item["members"][1]["status"], "NotReady");
    assert_eq!(item["members"][1]["pod"]["restarts"], 7);
    assert_eq!(item["backups"]["full"]["revision"], "48213");
    assert_eq!(item["verdict"], "Degraded");
    insta::assert_json_snapshot!(item);
}

#[test]
fn crash_looping_pod_without_druid_status_is_named_as_such() {
    let mut inputs = healthy();
    member_down(&mut inputs, 1, "");
    inputs.etcd.status.as_mut().unwrap().members.clear();
    let report = assess(&inputs, now());
    assert_eq!(report.members[1].reason, "CrashLooping");
    assert_eq!(report.members[0].role.as_deref(), Some("Leader"), "role falls back to a fresh lease's holder");
    assert_eq!(report.members[1].role, None, "a stale lease says nothing about the current role");
}

#[test]
fn hibernated_etcd_is_ok_for_ci() {
    let mut inputs = healthy();
    inputs.etcd.spec.replicas = 0;
    let report = assess(&inputs, now());
    assert_eq!(report.verdict, Verdict::Hibernated);
    assert!(report.verdict.is_ok());
}

/// Three-part holders (etcd-backup-restore v0.39+) with different cluster IDs are a problem even where etcd-druid is
/// too old to set `ClusterIDMismatch` (before v0.34); the same IDs are not.
#[test]
fn status_different_cluster_ids_in_the_member_leases_are_a_problem_without_druids_condition() {
    let mut inputs = healthy();
    let cluster = ["cdf818194e3a8c32", "cdf818194e3a8c32", "4f2a17b9e0c6d581"];
    for (i, lease) in inputs.leases.iter_mut().take(3).enumerate() {
        let spec = lease.spec.as_mut().unwrap();
        let (id, role) = spec.holder_identity.as_deref().unwrap().split_once(':').unwrap();
        spec.holder_identity = Some(format!("{id}:{}:{role}", cluster[i]));
    }
    let report = assess(&inputs, now());
    assert_eq!(report.verdict, Verdict::Degraded, "{:?}", report.problems);
    assert_eq!(
        report.problems,
        vec![
            "members report different etcd cluster IDs: etcd-main-0=cdf818194e3a8c32, etcd-main-1=cdf818194e3a8c32, \
             etcd-main-2=4f2a17b9e0c6d581"
                .to_string()
        ]
    );
    assert_eq!(report.members[0].role.as_deref(), Some("Leader"), "three-part holder: the role is the last part");
    inputs.leases[2].spec.as_mut().unwrap().holder_identity = Some(format!("fd422379fda50e48:{}:Member", cluster[0]));
    assert_eq!(assess(&inputs, now()).verdict, Verdict::Healthy);
}

/// etcd-druid ≥ v0.34 always sets ClusterIDMismatch; on a healthy cluster it is False, which is the healthy value.
#[test]
fn status_cluster_id_mismatch_false_and_the_other_conditions_of_v0_37_are_healthy() {
    let mut inputs = healthy();
    let status = inputs.etcd.status.as_mut().unwrap();
    for (t, s, r) in [
        ("AllMembersUpdated", "True", "AllMembersUpdated"),
        ("ClusterIDMismatch", "False", "NoClusterIDMismatchDetected"),
        ("LastSnapshotCompactionSucceeded", "True", "None"),
    ] {
        status.conditions.push(EtcdCondition {
            type_: t.into(),
            status: s.into(),
            reason: r.into(),
            message: String::new(),
            last_transition_time: Some(Time(ago(60))),
            last_update_time: None,
        });
    }
    let report = assess(&inputs, now());
    assert_eq!(report.verdict, Verdict::Healthy, "{:?}", report.problems);
    set_condition(&mut inputs, "ClusterIDMismatch", "True", "MultipleClusterIDsDetected");
    let report = assess(&inputs, now());
    assert_eq!(report.verdict, Verdict::Degraded);
    assert_eq!(report.problems, vec!["condition ClusterIDMismatch is True (MultipleClusterIDsDetected)".to_string()]);
}

/// Four Etcds of a seed as `status -A` shows them: healthy, one member down, quorum lost, stale backups.
fn seed_reports() -> Vec<druidctl::health::HealthReport> {
    let mut down = healthy();
    member_down(&mut down, 2, "LeaseExpired");
    set_condition(&mut down, "AllMembersReady", "False", "NotAllMembersReady");
    let mut lost = healthy();
    member_down(&mut lost, 0, "LeaseExpired");
    member_down(&mut lost, 2, "UnknownGracePeriodExceeded");
    lost.pods.remove(2);
    set_condition(&mut lost, "Ready", "False", "QuorumLost");
    let mut stale = healthy();
    for l in &mut stale.leases {
        if l.metadata.name.as_deref().is_some_and(|n| n.ends_with("-snap")) {
            l.spec.as_mut().unwrap().renew_time = Some(MicroTime(ago(30 * 3600)));
        }
    }
    let namespaces = ["shoot--dev--app", "shoot--prod--payments-eu1", "shoot--qa--quorum", "shoot--ops--backup"];
    [healthy(), down, lost, stale]
        .iter()
        .zip(namespaces)
        .map(|(inputs, ns)| {
            let mut r = assess(inputs, now());
            r.etcd.namespace = ns.into();
            r
        })
        .collect()
}

fn widest_line(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

#[test]
fn status_all_one_line_per_etcd_at_80_columns() {
    let text = render_reports(&seed_reports(), false, false, 80);
    assert_eq!(text.lines().count(), 5, "a header and one line per Etcd:\n{text}");
    assert!(widest_line(&text) <= 80, "wider than 80 columns:\n{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn status_all_one_line_per_etcd_at_120_columns() {
    let text = render_reports(&seed_reports(), false, false, 120);
    assert_eq!(text.lines().count(), 5, "a header and one line per Etcd:\n{text}");
    assert!(widest_line(&text) <= 120, "wider than 120 columns:\n{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn status_all_wide_shows_the_full_block_of_each_etcd() {
    let reports = seed_reports();
    let text = render_reports(&reports, true, false, 120);
    for r in &reports {
        assert!(text.contains(&format!("Etcd {}:", r.etcd)), "{} has no block:\n{text}", r.etcd);
    }
    assert!(text.contains("LEASE HOLDER") && text.contains("PVC PHASE"), "wide has every member column:\n{text}");
    // The wide form does not depend on the terminal: every column is shown in full.
    assert_eq!(text, render_reports(&reports, true, false, 80));
    insta::assert_snapshot!(text);
}

#[test]
fn status_of_one_etcd_fits_120_columns_and_wide_has_the_rest() {
    let mut inputs = healthy();
    member_down(&mut inputs, 1, "UnknownGracePeriodExceeded");
    for p in &mut inputs.pods {
        p.spec.as_mut().unwrap().node_name =
            Some("shoot--prod--payments-eu1-worker-z1-7c9f8d6b5-x2k4q.eu-west-1.compute.internal".into());
    }
    let report = assess(&inputs, now());
    // One Etcd is always the full block, whatever the width.
    let text = render_reports(std::slice::from_ref(&report), false, false, 80);
    assert!(widest_line(&text) <= 120, "the default block is wider than 120 columns:\n{text}");
    assert!(text.contains("…"), "the long node name is shortened, not wrapped:\n{text}");
    let wide = render_reports(std::slice::from_ref(&report), true, false, 80);
    assert!(wide.contains("eu-west-1.compute.internal") && wide.contains("LEASE HOLDER"), "{wide}");
    insta::assert_snapshot!("status_one_etcd_default_120", text);
    insta::assert_snapshot!("status_one_etcd_wide", wide);
}
