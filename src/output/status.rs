//! How `status` shows the health model to a person: a headline with the verdict, the member table, conditions,
//! backups, annotations in effect, recent tasks and the list of problems.

use super::age::human;
use super::table::{Cell, Style, Table};
use crate::health::model::{HealthReport, MemberEtcdView, MemberHealth, SnapshotView, StatusSource, Verdict};

/// apiVersion of the `status -o json|yaml` document (schema in docs/cli.md).
pub const STATUS_API_VERSION: &str = "druidctl.gardener.cloud/v1alpha1";
/// kind of the `status -o json|yaml` document.
pub const STATUS_KIND: &str = "EtcdHealthList";

/// The per-member table of one Etcd fits this many columns without `-o wide`.
pub const MEMBER_TABLE_WIDTH: usize = 120;

fn verdict_style(v: Verdict) -> Style {
    match v {
        Verdict::Healthy => Style::Good,
        Verdict::Hibernated => Style::Dim,
        Verdict::Degraded => Style::Warn,
        Verdict::QuorumLost => Style::Bad,
    }
}

fn opt_age(a: Option<i64>) -> String {
    a.map(human).unwrap_or_else(|| "-".into())
}

fn dash(s: Option<&str>) -> String {
    s.filter(|s| !s.is_empty()).unwrap_or("-").to_string()
}

fn snapshot_line(kind: &str, s: &SnapshotView) -> (String, Style) {
    let text = match (s.age_seconds, &s.revision) {
        (None, _) => format!("{kind}: never"),
        (Some(a), Some(rev)) => format!("{kind}: {} ago (revision {rev})", human(a)),
        (Some(a), None) => format!("{kind}: {} ago", human(a)),
    };
    if s.stale { (format!("{text}, stale"), Style::Warn) } else { (text, Style::Good) }
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// Renders one report.
pub fn render_report(r: &HealthReport, wide: bool, color: bool) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{} {}: {}\n",
        Style::Bold.paint("Etcd", color),
        Style::Bold.paint(&r.etcd.to_string(), color),
        verdict_style(r.verdict).paint(r.verdict.as_str(), color)
    ));
    out.push_str(&format!("  {}\n", r.summary));
    let q = &r.quorum;
    out.push_str(&format!(
        "  quorum: {} ready of {}, {} needed, {} tolerable failure{}",
        q.ready,
        q.members,
        q.needed,
        q.tolerable_failures,
        if q.tolerable_failures == 1 { "" } else { "s" }
    ));
    match (r.generation, r.observed_generation) {
        (Some(g), Some(o)) if o < g => out.push_str(&format!("; generation {g}, druid observed {o}\n")),
        (Some(g), _) => out.push_str(&format!("; generation {g}\n")),
        _ => out.push('\n'),
    }

    if !r.members.is_empty() {
        // etcd's columns when at least one member's etcd answered; else the lease and pod columns, and one line
        // under the table says why etcd was not reached.
        out.push_str(&member_table(r, wide, color));
        out.push_str(&format!("  {}\n", Style::Dim.paint(&sources_legend(r), color)));
        for m in r.members.iter().filter(|m| m.druid_view_stale) {
            out.push_str(&format!("  {}\n", Style::Warn.paint(&stale_note(m), color)));
        }
        if let Some(line) = etcd_line(r, color) {
            out.push_str(&format!("  {line}\n"));
        }
    }

    if !r.conditions.is_empty() {
        let mut headers = vec!["condition", "status", "reason", "since"];
        if wide {
            headers.push("message");
        }
        let mut t = Table::new(&headers);
        for c in &r.conditions {
            let style = match c.healthy {
                Some(true) => Style::Good,
                Some(false) => Style::Bad,
                None => Style::Plain,
            };
            let mut row = vec![
                Cell::plain(&c.type_),
                Cell::styled(&c.status, style),
                Cell::plain(dash(Some(&c.reason))),
                Cell::plain(opt_age(c.age_seconds)),
            ];
            if wide {
                row.push(Cell::plain(dash(Some(&c.message))));
            }
            t.row(row);
        }
        out.push('\n');
        out.push_str(&indent(&t.render(color)));
    }

    out.push('\n');
    match (&r.backups.full, &r.backups.delta) {
        (Some(full), Some(delta)) => {
            let (f, fs) = snapshot_line("full", full);
            let (d, ds) = snapshot_line("delta", delta);
            out.push_str(&format!("  backups: {}; {}\n", fs.paint(&f, color), ds.paint(&d, color)));
        }
        _ => out.push_str("  backups: disabled (no spec.backup.store)\n"),
    }
    let a = &r.annotations;
    let mut in_effect = Vec::new();
    if a.reconcile_pending {
        in_effect.push("reconcile requested, not yet picked up");
    }
    if a.spec_reconcile_suspended {
        in_effect.push("spec reconciliation suspended");
    }
    if a.component_protection_disabled {
        in_effect.push("component protection disabled");
    }
    let annotations =
        if in_effect.is_empty() { "none".to_string() } else { Style::Warn.paint(&in_effect.join("; "), color) };
    out.push_str(&format!("  annotations: {annotations}\n"));

    if !r.tasks.crd_installed {
        out.push_str(&format!(
            "  tasks: EtcdOperatorTask CRD not installed (`{} install` installs it)\n",
            super::command_name()
        ));
    } else if r.tasks.recent.is_empty() {
        out.push_str("  tasks: none\n");
    } else {
        out.push_str("  tasks:\n");
        let mut t = Table::new(&["name", "type", "state", "last operation", "age"]);
        for task in &r.tasks.recent {
            let style = match task.state.as_str() {
                "Succeeded" => Style::Good,
                "Failed" | "Rejected" => Style::Bad,
                _ => Style::Warn,
            };
            t.row(vec![
                Cell::plain(&task.name),
                Cell::plain(&task.type_),
                Cell::styled(&task.state, style),
                Cell::plain(dash(task.last_operation.as_deref())),
                Cell::plain(opt_age(task.age_seconds)),
            ]);
        }
        out.push_str(&indent(&indent(&t.render(color))));
    }

    if !r.problems.is_empty() {
        out.push_str("  problems:\n");
        for p in &r.problems {
            out.push_str(&format!("    - {}\n", Style::Warn.paint(p, color)));
        }
    }
    if !r.warnings.is_empty() {
        out.push_str("  warnings:\n");
        for w in &r.warnings {
            out.push_str(&format!("    - {}\n", Style::Dim.paint(w, color)));
        }
    }
    out
}

/// One column of the member table: its header and how a member's cell is made.
struct Column {
    header: &'static str,
    cell: fn(&MemberHealth) -> Cell,
}

const fn column(header: &'static str, cell: fn(&MemberHealth) -> Cell) -> Column {
    Column { header, cell }
}

/// A cell from etcd's view of the member, `-` where its etcd did not answer.
fn etcd_cell(m: &MemberHealth, f: impl Fn(&MemberEtcdView) -> String) -> Cell {
    Cell::plain(m.etcd.as_ref().map(f).unwrap_or_else(|| "-".into()))
}

/// The pod's phase, readiness and restarts (`Missing` without a pod).
fn pod_cells(m: &MemberHealth) -> [String; 3] {
    match &m.pod {
        Some(p) => [p.phase.clone(), p.ready.to_string(), p.restarts.to_string()],
        None => ["Missing".into(), "-".into(), "-".into()],
    }
}

/// The columns of the member table. Without etcd's view: etcd-druid's view and the Kubernetes objects (lease,
/// pod, restarts). With it (`with_etcd`: at least one member's etcd answered): DB SIZE/QUOTA, IN USE, RAFT
/// INDEX (the applied index, and how far it trails the leader) and VERSION take the place of the lease and pod
/// columns, which move under `-o wide` with etcd's raw numbers (bytes, term, indexes, revision). The default
/// table fits 120 columns: the lease holder, member ID, PVC and its phase are under -o wide.
fn member_columns(wide: bool, with_etcd: bool) -> Vec<Column> {
    let mut columns = vec![column("member", |m| Cell::plain(&m.name))];
    if wide {
        columns.push(column("id", |m| {
            Cell::plain(m.etcd.as_ref().map(|e| e.member_id.clone()).unwrap_or_else(|| dash(m.id.as_deref())))
        }));
    }
    columns.extend([
        column("role", |m| {
            Cell::plain(match &m.etcd {
                Some(e) if e.is_leader => "Leader".to_string(),
                Some(e) if e.is_learner => "Learner".to_string(),
                Some(_) => "Member".to_string(),
                None => dash(m.role.as_deref()),
            })
        }),
        // A `*` marks a status etcd-druid has not brought up to date yet (explained under the table).
        column("status", |m| {
            if m.druid_view_stale {
                Cell::styled(format!("{}*", m.status), Style::Warn)
            } else {
                Cell::styled(&m.status, if m.ready { Style::Good } else { Style::Bad })
            }
        }),
        column("reason", |m| Cell::styled(&m.reason, if m.ready { Style::Plain } else { Style::Bad })),
    ]);
    if wide {
        columns.push(column("lease holder", |m| Cell::plain(dash(m.lease.as_ref().and_then(|l| l.holder.as_deref())))));
    }
    if wide || !with_etcd {
        columns.extend([
            column("renewed", |m| {
                let style = if m.lease.as_ref().is_some_and(|l| l.fresh) { Style::Plain } else { Style::Warn };
                let age = m.lease.as_ref().and_then(|l| l.age_seconds);
                Cell::styled(age.map(|a| format!("{} ago", human(a))).unwrap_or_else(|| "never".into()), style)
            }),
            column("pod", |m| Cell::plain(pod_cells(m)[0].clone())),
            column("ready", |m| Cell::plain(pod_cells(m)[1].clone())),
            column("restarts", |m| Cell::plain(pod_cells(m)[2].clone())),
        ]);
    }
    if wide {
        columns.extend([
            column("pvc", |m| Cell::plain(m.pvc.as_ref().map(|p| p.name.clone()).unwrap_or_else(|| "-".into()))),
            column("pvc phase", |m| Cell::plain(m.pvc.as_ref().map(|p| p.phase.clone()).unwrap_or_else(|| "-".into()))),
        ]);
    }
    if with_etcd && wide {
        columns.extend([
            column("db size", |m| etcd_cell(m, |e| e.db_size.to_string())),
            column("in use", |m| etcd_cell(m, |e| e.db_size_in_use.to_string())),
            column("quota", |m| etcd_cell(m, |e| e.quota.to_string())),
            column("raft term", |m| etcd_cell(m, |e| e.raft_term.to_string())),
            column("raft index", |m| etcd_cell(m, |e| e.raft_index.to_string())),
            column("applied", |m| etcd_cell(m, |e| e.raft_applied_index.to_string())),
            column("lag", |m| etcd_cell(m, |e| e.lag.map(|l| l.to_string()).unwrap_or_else(|| "-".into()))),
            column("revision", |m| etcd_cell(m, |e| e.revision.to_string())),
        ]);
    } else if with_etcd {
        columns.extend([
            column("db size/quota", |m| {
                let used = m.etcd.as_ref().map(|e| e.db_size.saturating_mul(100) / e.quota.max(1));
                let style = match used {
                    Some(u) if u >= crate::health::etcd_view::QUOTA_WARNING_PERCENT => Style::Warn,
                    _ => Style::Plain,
                };
                Cell { style, ..etcd_cell(m, |e| crate::health::etcd_view::size_of_quota(e.db_size, e.quota)) }
            }),
            column("in use", |m| etcd_cell(m, |e| crate::etcd::quantity::human_bytes(e.db_size_in_use))),
            column("raft index", |m| {
                etcd_cell(m, |e| match e.lag {
                    Some(lag) if lag > 0 => format!("{} (-{lag})", e.raft_applied_index),
                    _ => e.raft_applied_index.to_string(),
                })
            }),
        ]);
    }
    if with_etcd {
        columns.push(column("version", |m| etcd_cell(m, |e| e.version.clone())));
    }
    columns.push(column("node", |m| Cell::plain(dash(m.node.as_deref()))));
    columns
}

/// The member table (see [`member_columns`]); etcd's columns when at least one member's etcd answered.
fn member_table(r: &HealthReport, wide: bool, color: bool) -> String {
    let columns = member_columns(wide, r.members.iter().any(|m| m.etcd.is_some()));
    let headers: Vec<&str> = columns.iter().map(|c| c.header).collect();
    let mut t = Table::new(&headers);
    for m in &r.members {
        t.row(columns.iter().map(|c| (c.cell)(m)).collect());
    }
    if !wide {
        // Two columns of indent; a long node name is shortened, never the line wrapped.
        t.fit_last_column(MEMBER_TABLE_WIDTH - 2);
    }
    format!("\n{}", indent(&t.render(color)))
}

/// The line under the member table with etcd's view of the cluster: the leader and the alarms, or, when no
/// member's etcd answered, why (said once).
pub fn etcd_line(r: &HealthReport, color: bool) -> Option<String> {
    let v = r.etcd_view.as_ref()?;
    if let Some(why) = &v.not_reached {
        return Some(Style::Warn.paint(why, color));
    }
    let leader = v.leader.as_deref().unwrap_or("none agreed");
    let alarms = match &v.alarms {
        None => Style::Warn.paint("not listed", color),
        Some(a) if a.is_empty() => "none".to_string(),
        Some(a) => {
            let each: Vec<String> = a.iter().map(|a| format!("{} ({})", a.alarm, a.member)).collect();
            Style::Bad.paint(&each.join(", "), color)
        }
    };
    Some(format!("etcd: leader {leader}; alarms: {alarms}"))
}

/// The line under the member table saying where each column comes from: STATUS from etcd-druid (as of its last
/// status update) or derived now from the member lease, the rest observed by druidctl now.
pub fn sources_legend(r: &HealthReport) -> String {
    let from_druid = r.members.iter().filter(|m| m.status_source == StatusSource::EtcdDruid).count();
    let as_of = r.druid_view.age_seconds.map(|a| format!(", as of {} ago", human(a))).unwrap_or_default();
    let status = if from_druid == r.members.len() {
        format!("etcd-druid{as_of}")
    } else if from_druid == 0 {
        "derived now from the member lease (etcd-druid lists no members)".to_string()
    } else {
        format!("etcd-druid{as_of}, else derived now from the member lease")
    };
    if r.members.iter().any(|m| m.etcd.is_some()) {
        return format!("STATUS: {status}; REASON: druidctl; ROLE and the rest: each member's etcd, now");
    }
    format!("STATUS: {status}; REASON: druidctl; RENEWED: member lease; POD, READY, RESTARTS: the pod, now")
}

/// The note on a member whose status etcd-druid has not brought up to date: what it says, since when, and what
/// druidctl observes now.
pub fn stale_note(m: &MemberHealth) -> String {
    let since = m.status_age_seconds.map(|a| format!(" (since {} ago)", human(a))).unwrap_or_default();
    let lease_age = m.lease.as_ref().and_then(|l| l.age_seconds);
    let observed = if m.status == "Ready" {
        match (&m.pod, lease_age) {
            (None, _) => "the pod is missing".to_string(),
            (Some(p), _) if !p.ready => "the pod is not ready".to_string(),
            (Some(_), Some(a)) => format!("the member lease was last renewed {} ago", human(a)),
            (Some(_), None) => "the member lease was never renewed".to_string(),
        }
    } else {
        let renewed = lease_age.map(|a| format!(" {} ago", human(a))).unwrap_or_default();
        format!("the pod is ready and the member lease was renewed{renewed}")
    };
    format!("* {}: etcd-druid has not noticed yet: it says {}{since}, {observed}", m.name, m.status)
}

/// Renders several reports: one line per Etcd ([`render_summary`]) when there are several and not `wide`, else
/// the full block of each, separated by blank lines. `width` is the terminal's ([`super::terminal_width`]).
pub fn render_reports(reports: &[HealthReport], wide: bool, color: bool, width: usize) -> String {
    if reports.len() > 1 && !wide {
        return render_summary(reports, color, width);
    }
    reports.iter().map(|r| render_report(r, wide, color)).collect::<Vec<_>>().join("\n")
}

/// Age of the newest snapshot (full or delta), `never`, or `disabled` without a backup store.
fn last_backup(r: &HealthReport) -> (String, Style) {
    if !r.backups.enabled {
        return ("disabled".into(), Style::Dim);
    }
    let snaps = [r.backups.full.as_ref(), r.backups.delta.as_ref()];
    let newest = snaps.iter().flatten().filter_map(|s| s.age_seconds).min();
    let stale = snaps.iter().flatten().any(|s| s.stale);
    match newest {
        None => ("never".into(), Style::Warn),
        Some(a) => (format!("{} ago", human(a)), if stale { Style::Warn } else { Style::Plain }),
    }
}

/// One line per Etcd: `NAMESPACE/NAME`, verdict, ready/total members, leader, age of the last backup and the
/// problems: their count, then the first one shortened to the terminal's `width`. On a narrow terminal the
/// first problem, then the leader column, give way so that the line fits.
pub fn render_summary(reports: &[HealthReport], color: bool, width: usize) -> String {
    struct Line {
        etcd: String,
        verdict: Cell,
        ready: String,
        leader: String,
        backup: Cell,
        count: usize,
        first: Option<String>,
    }
    let lines: Vec<Line> = reports
        .iter()
        .map(|r| {
            let leader = r.members.iter().find(|m| m.role.as_deref() == Some("Leader")).map(|m| m.name.as_str());
            let (backup, backup_style) = last_backup(r);
            Line {
                etcd: r.etcd.to_string(),
                verdict: Cell::styled(r.verdict.as_str(), verdict_style(r.verdict)),
                ready: format!("{}/{}", r.quorum.ready, r.quorum.members),
                leader: dash(leader),
                backup: Cell::styled(backup, backup_style),
                count: r.problems.len(),
                first: r.problems.first().cloned(),
            }
        })
        .collect();
    let col = |header: &str, f: &dyn Fn(&Line) -> usize| lines.iter().map(f).max().unwrap_or(0).max(header.len()) + 3;
    let fixed = col("etcd", &|l| l.etcd.chars().count())
        + col("verdict", &|l| l.verdict.text.len())
        + col("ready", &|l| l.ready.len())
        + col("backup", &|l| l.backup.text.len());
    let leader_width = col("leader", &|l| l.leader.chars().count());
    // Room the PROBLEMS column needs for a count and a useful part of the first problem.
    const PROBLEM_ROOM: usize = 24;
    let show_leader = fixed + leader_width + "problems".len() <= width;
    let room = width.saturating_sub(fixed + if show_leader { leader_width } else { 0 });
    let show_first = room >= PROBLEM_ROOM;
    let mut headers = vec!["etcd", "verdict", "ready"];
    if show_leader {
        headers.push("leader");
    }
    headers.extend(["backup", "problems"]);
    let mut t = Table::new(&headers);
    for l in lines {
        let problems = match (&l.first, show_first) {
            (Some(first), true) => format!("{}: {first}", l.count),
            _ => l.count.to_string(),
        };
        let problem_style = if l.count == 0 { Style::Plain } else { Style::Warn };
        let mut row = vec![Cell::plain(l.etcd), l.verdict, Cell::plain(l.ready)];
        if show_leader {
            row.push(Cell::plain(l.leader));
        }
        row.extend([l.backup, Cell::styled(problems, problem_style)]);
        t.row(row);
    }
    t.fit_last_column(width);
    t.render(color)
}

/// The `status -o json|yaml` document.
pub fn document(reports: &[HealthReport]) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": STATUS_API_VERSION,
        "kind": STATUS_KIND,
        "items": reports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::{EtcdObservation, MemberReading, MemberStatus, Unreachable, UnreachableCause};
    use crate::health::HealthInputs;
    use serde_json::json;

    /// A 3-member Etcd whose members 0 and 1 answered etcd's Maintenance Status (member 1 behind, its database
    /// near the quota) and member 2 did not.
    fn report_with_etcd_view() -> HealthReport {
        let now: jiff::Timestamp = "2026-11-28T10:00:00Z".parse().unwrap();
        let etcd = serde_json::from_value(json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "etcd-main", "namespace": "shoot--a", "generation": 2},
            "spec": {"replicas": 3, "labels": {}, "etcd": {"quota": "8Gi"}, "backup": {}},
            "status": {"observedGeneration": 2, "ready": true, "members": [
                {"name": "etcd-main-0", "id": "a1", "role": "Leader", "status": "Ready", "reason": "LeaseSucceeded"},
                {"name": "etcd-main-1", "id": "b2", "role": "Member", "status": "Ready", "reason": "LeaseSucceeded"},
                {"name": "etcd-main-2", "id": "c3", "role": "Member", "status": "Ready", "reason": "LeaseSucceeded"}]}}))
        .unwrap();
        let pods = (0..3)
            .map(|i| {
                serde_json::from_value(json!({"metadata": {"name": format!("etcd-main-{i}"), "namespace": "shoot--a"},
                    "spec": {"nodeName": format!("node-{i}"), "containers": []},
                    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                        "containerStatuses": [{"name": "etcd", "ready": true, "restartCount": i, "image": "etcd", "imageID": "",
                            "state": {"running": {"startedAt": "2026-11-28T09:00:00Z"}}}]}}))
                .unwrap()
            })
            .collect();
        let leases = (0..3)
            .map(|i| {
                serde_json::from_value(json!({"metadata": {"name": format!("etcd-main-{i}"), "namespace": "shoot--a"},
                    "spec": {"holderIdentity": format!("a{i}:Leader"), "renewTime": "2026-11-28T09:59:55.000000Z",
                        "leaseDurationSeconds": 40}}))
                .unwrap()
            })
            .collect();
        let status = |id: u64, db: i64, applied: u64| MemberStatus {
            member_id: id,
            cluster_id: 7,
            leader: 1,
            version: "3.5.21".into(),
            db_size: db,
            db_size_in_use: db / 2,
            db_size_quota: None,
            raft_term: 4,
            raft_index: 9000,
            raft_applied_index: applied,
            is_learner: false,
            errors: vec![],
            revision: 812,
        };
        let reading = |i: u32, outcome| MemberReading {
            pod: format!("etcd-main-{i}"),
            via: "https://127.0.0.1:2379".into(),
            outcome,
            alarms: Some(vec![]),
        };
        let observation = EtcdObservation {
            members: vec![
                reading(0, Ok(status(1, 412 * 1024 * 1024, 9000))),
                reading(1, Ok(status(2, 7 * 1024 * 1024 * 1024, 8990))),
                reading(
                    2,
                    Err(Unreachable { cause: UnreachableCause::NotAnswering, detail: "connection refused".into() }),
                ),
            ],
            earlier: None,
        };
        let inputs =
            HealthInputs { etcd, pods, pvcs: vec![], leases, tasks: None, etcd_observation: Some(observation) };
        crate::health::assess(&inputs, now)
    }

    #[test]
    fn the_member_table_with_etcds_view_in_every_width_and_color() {
        let r = report_with_etcd_view();
        for (wide, color) in [(false, false), (true, false), (false, true), (true, true)] {
            insta::assert_snapshot!(
                format!("etcd_member_table_wide_{wide}_color_{color}"),
                render_report(&r, wide, color)
            );
        }
        let mut without = r.clone();
        for m in &mut without.members {
            m.etcd = None;
        }
        for (wide, color) in [(false, false), (true, true)] {
            insta::assert_snapshot!(
                format!("member_table_wide_{wide}_color_{color}"),
                render_report(&without, wide, color)
            );
        }
    }
}
