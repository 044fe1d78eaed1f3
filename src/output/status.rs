//! How `status` shows the health model to a person: a headline with the verdict, the member table, conditions,
//! backups, annotations in effect, recent tasks and the list of problems.

use super::age::human;
use super::table::{Cell, Style, Table};
use crate::health::model::{HealthReport, MemberHealth, SnapshotView, StatusSource, Verdict};

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
        if r.members.iter().any(|m| m.etcd.is_some()) {
            out.push_str(&etcd_member_table(r, wide, color));
        } else {
            out.push_str(&member_table(r, wide, color));
        }
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

/// The member table from etcd-druid's view and the Kubernetes objects alone (etcd not asked).
fn member_table(r: &HealthReport, wide: bool, color: bool) -> String {
    let mut out = String::new();
    // The default table fits 120 columns: the lease holder, member ID, PVC and its phase are under -o wide.
    let headers: &[&str] = if wide {
        &[
            "member",
            "id",
            "role",
            "status",
            "reason",
            "lease holder",
            "renewed",
            "pod",
            "ready",
            "restarts",
            "pvc",
            "pvc phase",
            "node",
        ]
    } else {
        &["member", "role", "status", "reason", "renewed", "pod", "ready", "restarts", "node"]
    };
    let mut t = Table::new(headers);
    for m in &r.members {
        let status_style = if m.ready { Style::Good } else { Style::Bad };
        let (pod_phase, pod_ready, restarts) = match &m.pod {
            Some(p) => (p.phase.clone(), p.ready.to_string(), p.restarts.to_string()),
            None => ("Missing".into(), "-".into(), "-".into()),
        };
        let lease_age = m.lease.as_ref().and_then(|l| l.age_seconds);
        let lease_style = if m.lease.as_ref().is_some_and(|l| l.fresh) { Style::Plain } else { Style::Warn };
        let mut row = vec![Cell::plain(&m.name)];
        if wide {
            row.push(Cell::plain(dash(m.id.as_deref())));
        }
        // A `*` marks a status etcd-druid has not brought up to date yet (explained under the table).
        let status = if m.druid_view_stale {
            Cell::styled(format!("{}*", m.status), Style::Warn)
        } else {
            Cell::styled(&m.status, status_style)
        };
        row.extend([
            Cell::plain(dash(m.role.as_deref())),
            status,
            Cell::styled(&m.reason, if m.ready { Style::Plain } else { Style::Bad }),
        ]);
        if wide {
            row.push(Cell::plain(dash(m.lease.as_ref().and_then(|l| l.holder.as_deref()))));
        }
        row.extend([
            Cell::styled(lease_age.map(|a| format!("{} ago", human(a))).unwrap_or_else(|| "never".into()), lease_style),
            Cell::plain(pod_phase),
            Cell::plain(pod_ready),
            Cell::plain(restarts),
        ]);
        if wide {
            row.push(Cell::plain(m.pvc.as_ref().map(|p| p.name.clone()).unwrap_or_else(|| "-".into())));
            row.push(Cell::plain(m.pvc.as_ref().map(|p| p.phase.clone()).unwrap_or_else(|| "-".into())));
        }
        row.push(Cell::plain(dash(m.node.as_deref())));
        t.row(row);
    }
    if !wide {
        // Two columns of indent; a long node name is shortened, never the line wrapped.
        t.fit_last_column(MEMBER_TABLE_WIDTH - 2);
    }
    out.push('\n');
    out.push_str(&indent(&t.render(color)));
    out
}

/// The member table with etcd's own view: DB SIZE/QUOTA, IN USE, RAFT INDEX (the applied index, and how far it
/// trails the leader) and VERSION take the place of the lease and pod columns, which move under `-o wide` with
/// etcd's raw numbers (bytes, term, indexes, revision).
fn etcd_member_table(r: &HealthReport, wide: bool, color: bool) -> String {
    let headers: &[&str] = if wide {
        &[
            "member",
            "id",
            "role",
            "status",
            "reason",
            "lease holder",
            "renewed",
            "pod",
            "ready",
            "restarts",
            "pvc",
            "pvc phase",
            "db size",
            "in use",
            "quota",
            "raft term",
            "raft index",
            "applied",
            "lag",
            "revision",
            "version",
            "node",
        ]
    } else {
        &["member", "role", "status", "reason", "db size/quota", "in use", "raft index", "version", "node"]
    };
    let mut t = Table::new(headers);
    for m in &r.members {
        let e = m.etcd.as_ref();
        let role = match e {
            Some(e) if e.is_leader => "Leader".to_string(),
            Some(e) if e.is_learner => "Learner".to_string(),
            Some(_) => "Member".to_string(),
            None => dash(m.role.as_deref()),
        };
        let status = if m.druid_view_stale {
            Cell::styled(format!("{}*", m.status), Style::Warn)
        } else {
            Cell::styled(&m.status, if m.ready { Style::Good } else { Style::Bad })
        };
        let mut row = vec![Cell::plain(&m.name)];
        if wide {
            row.push(Cell::plain(e.map(|e| e.member_id.clone()).unwrap_or_else(|| dash(m.id.as_deref()))));
        }
        row.extend([
            Cell::plain(role),
            status,
            Cell::styled(&m.reason, if m.ready { Style::Plain } else { Style::Bad }),
        ]);
        let number = |f: &dyn Fn(&crate::health::model::MemberEtcdView) -> String| {
            Cell::plain(e.map(f).unwrap_or_else(|| "-".into()))
        };
        if wide {
            let (pod_phase, pod_ready, restarts) = match &m.pod {
                Some(p) => (p.phase.clone(), p.ready.to_string(), p.restarts.to_string()),
                None => ("Missing".into(), "-".into(), "-".into()),
            };
            let lease_age = m.lease.as_ref().and_then(|l| l.age_seconds);
            row.extend([
                Cell::plain(dash(m.lease.as_ref().and_then(|l| l.holder.as_deref()))),
                Cell::plain(lease_age.map(|a| format!("{} ago", human(a))).unwrap_or_else(|| "never".into())),
                Cell::plain(pod_phase),
                Cell::plain(pod_ready),
                Cell::plain(restarts),
                Cell::plain(m.pvc.as_ref().map(|p| p.name.clone()).unwrap_or_else(|| "-".into())),
                Cell::plain(m.pvc.as_ref().map(|p| p.phase.clone()).unwrap_or_else(|| "-".into())),
                number(&|e| e.db_size.to_string()),
                number(&|e| e.db_size_in_use.to_string()),
                number(&|e| e.quota.to_string()),
                number(&|e| e.raft_term.to_string()),
                number(&|e| e.raft_index.to_string()),
                number(&|e| e.raft_applied_index.to_string()),
                number(&|e| e.lag.map(|l| l.to_string()).unwrap_or_else(|| "-".into())),
                number(&|e| e.revision.to_string()),
            ]);
        } else {
            let used = e.map(|e| e.db_size.saturating_mul(100) / e.quota.max(1));
            let space_style = match used {
                Some(u) if u >= crate::health::etcd_view::QUOTA_WARNING_PERCENT => Style::Warn,
                _ => Style::Plain,
            };
            row.extend([
                Cell::styled(
                    e.map(|e| crate::health::etcd_view::size_of_quota(e.db_size, e.quota))
                        .unwrap_or_else(|| "-".into()),
                    space_style,
                ),
                number(&|e| crate::etcd::quantity::human_bytes(e.db_size_in_use)),
                number(&|e| match e.lag {
                    Some(lag) if lag > 0 => format!("{} (-{lag})", e.raft_applied_index),
                    _ => e.raft_applied_index.to_string(),
                }),
            ]);
        }
        row.push(number(&|e| e.version.clone()));
        row.push(Cell::plain(dash(m.node.as_deref())));
        t.row(row);
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
