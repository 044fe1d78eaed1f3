//! Preconditions (DEP-05) as pure functions over facts taken from the health model, and the duplicate/FIFO
//! rules over the other tasks of the same Etcd.

use crate::api::{EtcdOperatorTask, TaskState};
use crate::health::{HealthReport, Quorum, Verdict};

/// What preconditions look at, taken from the health model.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    /// Quorum arithmetic.
    pub quorum: Quorum,
    /// The overall verdict.
    pub verdict: Verdict,
    /// Whether `spec.backup.store` is set.
    pub backups_enabled: bool,
    /// Members by name that are not ready.
    pub unready_members: Vec<String>,
}

impl Facts {
    /// Facts from a health report.
    pub fn from_report(r: &HealthReport) -> Facts {
        Facts {
            quorum: r.quorum,
            verdict: r.verdict,
            backups_enabled: r.backups.enabled,
            unready_members: r.members.iter().filter(|m| !m.ready).map(|m| m.name.clone()).collect(),
        }
    }
}

/// DEP-05: "Etcd cluster should have a quorum."
pub fn require_quorum(f: &Facts) -> Result<(), String> {
    if f.quorum.quorate {
        Ok(())
    } else {
        Err(format!(
            "the etcd cluster has no quorum ({} of {} members ready, {} needed)",
            f.quorum.ready, f.quorum.members, f.quorum.needed
        ))
    }
}

/// Backups must be configured (`spec.backup.store`) for snapshot tasks.
pub fn require_backups(f: &Facts) -> Result<(), String> {
    if f.backups_enabled {
        Ok(())
    } else {
        Err("backups are not configured for this etcd (spec.backup.store is unset)".into())
    }
}

/// Defragmenting one member at a time must never leave the cluster without quorum: every member must be
/// ready before it starts (a cluster of one member is taken offline briefly, which etcd-druid accepts too).
pub fn require_all_members_ready(f: &Facts) -> Result<(), String> {
    if f.unready_members.is_empty() && f.quorum.ready == f.quorum.members {
        Ok(())
    } else {
        Err(format!(
            "not every member is ready ({}), so defragmenting one would risk quorum",
            if f.unready_members.is_empty() {
                format!("{} of {}", f.quorum.ready, f.quorum.members)
            } else {
                f.unready_members.join(", ")
            }
        ))
    }
}

/// What admission decides for a task that is not yet running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Wait (FIFO per Etcd): the reason names the task right ahead of it (the latest older unfinished task of
    /// its Etcd, else the one running), without that task's state, so that the reason stays the same while the
    /// queue moves up: a queued task's status is written once, not again at every turn of its queue.
    Wait(String),
    /// A duplicate of an unfinished older task: reject.
    Duplicate(String),
    /// First in line and no duplicate: evaluate the health preconditions and start.
    Proceed,
}

/// The ordering key of FIFO: creation time, then name.
fn fifo_key(t: &EtcdOperatorTask) -> (Option<jiff::Timestamp>, String) {
    (t.metadata.creation_timestamp.as_ref().map(|c| c.0), t.metadata.name.clone().unwrap_or_default())
}

/// DEP-05 duplicate and FIFO rules for `task` given every task in its namespace and a function giving a
/// task's duplicate key (`None` when its config does not parse: such a task is rejected by itself).
pub fn admission(
    task: &EtcdOperatorTask,
    all: &[EtcdOperatorTask],
    duplicate_key: impl Fn(&EtcdOperatorTask) -> Option<String>,
) -> Admission {
    let me = fifo_key(task);
    let my_key = duplicate_key(task);
    let ns = task.metadata.namespace.clone().unwrap_or_default();
    let etcd = &task.spec.owner_etcd_refrence;
    // The latest older unfinished task (the one right ahead), else a running one.
    let mut ahead: Option<(&EtcdOperatorTask, (Option<jiff::Timestamp>, String))> = None;
    let mut running_one: Option<&EtcdOperatorTask> = None;
    for other in all {
        if other.metadata.uid == task.metadata.uid || other.metadata.namespace.as_deref().unwrap_or_default() != ns {
            continue;
        }
        if !other.targets(&etcd.namespace, &etcd.name) || other.state().is_terminal() {
            continue;
        }
        let theirs = fifo_key(other);
        let running = other.state() == TaskState::InProgress;
        if !running && theirs >= me {
            continue;
        }
        // DEP-05: a running (or earlier queued) task with the same key makes this one a duplicate.
        if my_key.is_some() && duplicate_key(other) == my_key {
            return Admission::Duplicate(format!(
                "a {} task for this etcd is already {} ({})",
                task.spec.type_,
                if running { "running" } else { "queued" },
                other.metadata.name.clone().unwrap_or_default()
            ));
        }
        if theirs < me {
            if ahead.as_ref().is_none_or(|(_, k)| theirs > *k) {
                ahead = Some((other, theirs));
            }
        } else if running {
            running_one = Some(other);
        }
    }
    match ahead.map(|(t, _)| t).or(running_one) {
        Some(other) => Admission::Wait(format!(
            "waiting for task {} ({}) ahead of it on the same etcd (FIFO)",
            other.metadata.name.clone().unwrap_or_default(),
            other.spec.type_,
        )),
        None => Admission::Proceed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::task::{EtcdOperatorTaskSpec, EtcdOperatorTaskStatus, NamespacedName};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn facts(members: u32, ready: u32) -> Facts {
        Facts {
            quorum: Quorum::of(members, ready),
            verdict: Verdict::Healthy,
            backups_enabled: true,
            unready_members: vec![],
        }
    }

    fn task(name: &str, etcd: &str, type_: &str, created_s: i64, state: Option<TaskState>) -> EtcdOperatorTask {
        let mut t = EtcdOperatorTask::new(
            name,
            EtcdOperatorTaskSpec {
                type_: type_.into(),
                config: None,
                ttl_seconds_after_finished: None,
                owner_etcd_refrence: NamespacedName { name: etcd.into(), namespace: "ns".into() },
            },
        );
        t.metadata.namespace = Some("ns".into());
        t.metadata.uid = Some(format!("uid-{name}"));
        t.metadata.creation_timestamp = Some(Time(jiff::Timestamp::from_second(1_700_000_000 + created_s).unwrap()));
        t.status = state.map(|s| EtcdOperatorTaskStatus { state: Some(s), ..Default::default() });
        t
    }

    fn by_type(t: &EtcdOperatorTask) -> Option<String> {
        Some(t.spec.type_.clone())
    }

    #[test]
    fn quorum_precondition_rejects_a_cluster_without_quorum() {
        assert!(require_quorum(&facts(3, 2)).is_ok());
        let e = require_quorum(&facts(3, 1)).unwrap_err();
        assert_eq!(e, "the etcd cluster has no quorum (1 of 3 members ready, 2 needed)");
    }

    #[test]
    fn defragmentation_needs_every_member_ready() {
        assert!(require_all_members_ready(&facts(3, 3)).is_ok());
        let mut f = facts(3, 2);
        assert!(require_all_members_ready(&f).is_err());
        f.unready_members = vec!["etcd-main-2".into()];
        assert!(require_all_members_ready(&f).unwrap_err().contains("etcd-main-2"));
    }

    #[test]
    fn first_task_proceeds_and_later_ones_wait_in_fifo_order() {
        let a = task("a", "e", "A", 0, Some(TaskState::Pending));
        let b = task("b", "e", "B", 1, Some(TaskState::Pending));
        let c = task("c", "e", "C", 2, None);
        let all = vec![c.clone(), b.clone(), a.clone()];
        assert_eq!(admission(&a, &all, by_type), Admission::Proceed);
        assert!(matches!(admission(&b, &all, by_type), Admission::Wait(r) if r.contains("task a ")));
        // Each waits for the one right ahead: its reason does not change when the head finishes.
        assert!(matches!(admission(&c, &all, by_type), Admission::Wait(r) if r.contains("task b ")));
        let mut a_done = a.clone();
        a_done.status.as_mut().unwrap().state = Some(TaskState::Succeeded);
        let all = vec![c.clone(), b.clone(), a_done];
        assert_eq!(admission(&b, &all, by_type), Admission::Proceed);
        assert_eq!(admission(&c, &all, by_type), admission(&c, &[c.clone(), b.clone(), a.clone()], by_type));
    }

    #[test]
    fn a_running_task_blocks_even_an_older_pending_one() {
        let old = task("old", "e", "A", 0, Some(TaskState::Pending));
        let running = task("new", "e", "B", 5, Some(TaskState::InProgress));
        assert!(
            matches!(admission(&old, &[old.clone(), running], by_type), Admission::Wait(r) if r.contains("task new"))
        );
    }

    #[test]
    fn duplicates_of_an_unfinished_task_are_rejected_but_other_etcds_and_finished_tasks_do_not_count() {
        let running = task("a", "e", "Snap", 0, Some(TaskState::InProgress));
        let dup = task("b", "e", "Snap", 1, None);
        let other_etcd = task("c", "f", "Snap", 1, None);
        let done = task("d", "e", "Snap", 0, Some(TaskState::Succeeded));
        let all = vec![running.clone(), dup.clone(), other_etcd.clone(), done];
        assert!(matches!(admission(&dup, &all, by_type), Admission::Duplicate(r) if r.contains("already running (a)")));
        assert_eq!(admission(&other_etcd, &all, by_type), Admission::Proceed);
        // A newer pending duplicate never rejects the older one.
        let queued = task("q", "f", "Snap", 0, Some(TaskState::Pending));
        assert_eq!(admission(&queued, &[queued.clone(), other_etcd], by_type), Admission::Proceed);
    }

    #[test]
    fn tasks_with_unparsable_config_are_not_duplicates_of_anything() {
        let bad = task("a", "e", "Snap", 0, Some(TaskState::Pending));
        let good = task("b", "e", "Snap", 1, None);
        let key = |t: &EtcdOperatorTask| if t.metadata.name.as_deref() == Some("a") { None } else { Some("k".into()) };
        assert!(matches!(admission(&good, &[bad, good.clone()], key), Admission::Wait(_)));
    }
}
