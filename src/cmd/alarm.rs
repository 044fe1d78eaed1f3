//! `alarm list|disarm ETCD`: the alarms etcd raised (NOSPACE, CORRUPT), and disarming them once their cause is
//! gone (`etcdctl alarm list|disarm`).

use std::time::Duration;

use clap::{Args, Subcommand};
use clap_complete::engine::ArgValueCompleter;
use druidctl::etcd::EtcdError;
use druidctl::etcd::actions::{NamedAlarm, disarm, disarm_refusal};
use druidctl::etcd::{Alarm, hex_id};
use druidctl::output::OutputFormat;
use druidctl::output::table::{Cell, Style, Table};

use super::Context;
use super::check::{Loaded, load};

/// Arguments of `alarm`.
#[derive(Debug, Args)]
pub struct AlarmArgs {
    /// List or disarm.
    #[command(subcommand)]
    pub action: AlarmAction,
}

/// What to do with the alarms.
#[derive(Debug, Subcommand)]
pub enum AlarmAction {
    /// The alarms raised in the cluster, by member.
    List(AlarmTarget),
    /// Disarm every alarm, after confirmation; refused while a NOSPACE's cause remains (a database still at
    /// its quota).
    Disarm(DisarmArgs),
}

/// The Etcd whose alarms are meant.
#[derive(Debug, Args)]
pub struct AlarmTarget {
    /// The Etcd: NAME or NAMESPACE/NAME.
    #[arg(value_name = "ETCD", value_parser = super::parse_etcd_ref, add = ArgValueCompleter::new(super::completion::etcd_names))]
    pub etcd: String,
    /// How long each member may take to answer.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = super::duration_in(100, 600))]
    pub timeout: Duration,
}

/// Arguments of `alarm disarm`.
#[derive(Debug, Args)]
pub struct DisarmArgs {
    /// The Etcd.
    #[command(flatten)]
    pub target: AlarmTarget,
    /// Do not ask for confirmation (needed without a terminal).
    #[arg(short = 'y', long)]
    pub yes: bool,
}

/// Runs `alarm`.
pub async fn exec(ctx: &mut Context, args: AlarmArgs) -> anyhow::Result<()> {
    match args.action {
        AlarmAction::List(t) => {
            let loaded = load(ctx, &t.etcd, t.timeout).await?;
            let alarms = listed(&loaded)?;
            print(ctx, &loaded, &named(&loaded, &alarms), None)
        }
        AlarmAction::Disarm(a) => {
            let loaded = load(ctx, &a.target.etcd, a.target.timeout).await?;
            let alarms = listed(&loaded)?;
            if alarms.is_empty() {
                return print(ctx, &loaded, &[], Some("no alarm is raised; nothing to disarm"));
            }
            let members: Vec<(String, druidctl::etcd::MemberStatus)> = loaded
                .report
                .members
                .iter()
                .filter_map(|m| {
                    let obs = loaded.inputs.etcd_observation.as_ref()?;
                    let s = obs.members.get(m.index as usize)?.outcome.as_ref().ok()?;
                    Some((m.name.clone(), s.clone()))
                })
                .collect();
            let spec_quota = loaded.inputs.etcd.spec.etcd.quota.clone();
            let quota = |s: &druidctl::etcd::MemberStatus| {
                druidctl::health::etcd_view::effective_quota(s.db_size_quota, spec_quota.as_ref()).0
            };
            if let Some(why) = disarm_refusal(&alarms, &members, quota) {
                return Err(EtcdError::Refused(format!("not disarming: {why}; nothing was changed")).into());
            }
            let list: Vec<String> =
                named(&loaded, &alarms).iter().map(|a| format!("{} ({})", a.alarm.as_str(), a.member)).collect();
            druidctl::output::progress::confirm(&format!("Disarm {} of Etcd {}?", list.join(", "), loaded.key), a.yes)?;
            let (pod, _) = reachable_pod(&loaded)?;
            let left = disarm(&loaded.cluster.client, &loaded.inputs.etcd, &pod, &alarms, a.target.timeout).await?;
            let message = if left.is_empty() {
                format!("disarmed {}; no alarm is raised now", list.join(", "))
            } else {
                format!(
                    "disarmed {}; etcd raised again: {}",
                    list.join(", "),
                    named(&loaded, &left).iter().map(|a| a.alarm.as_str()).collect::<Vec<_>>().join(", ")
                )
            };
            print(ctx, &loaded, &named(&loaded, &left), Some(&message))
        }
    }
}

/// The cluster's alarms as the members listed them, or why no member could be asked.
fn listed(loaded: &Loaded) -> Result<Vec<Alarm>, EtcdError> {
    let view = loaded.report.etcd_view.as_ref();
    let obs = loaded.inputs.etcd_observation.as_ref();
    obs.and_then(|o| o.alarms()).ok_or_else(|| {
        EtcdError::Unreachable(
            view.and_then(|v| v.not_reached.clone())
                .unwrap_or_else(|| "no member's etcd listed the alarms".to_string()),
        )
    })
}

/// A member pod whose etcd answered (the leader first).
fn reachable_pod(loaded: &Loaded) -> Result<(k8s_openapi::api::core::v1::Pod, String), EtcdError> {
    let obs = loaded.inputs.etcd_observation.as_ref();
    let mut answered: Vec<(&str, bool)> =
        obs.map(|o| o.answered().map(|(pod, s)| (pod, s.is_leader())).collect()).unwrap_or_default();
    answered.sort_by_key(|(_, leader)| !leader);
    answered
        .iter()
        .find_map(|(pod, _)| loaded.inputs.pods.iter().find(|p| p.metadata.name.as_deref() == Some(*pod)))
        .map(|p| (p.clone(), p.metadata.name.clone().unwrap_or_default()))
        .ok_or_else(|| EtcdError::Unreachable("no member's etcd answered".into()))
}

/// Alarms with member names.
fn named(loaded: &Loaded, alarms: &[Alarm]) -> Vec<NamedAlarm> {
    let names = loaded.inputs.etcd.managed_names();
    let obs = loaded.inputs.etcd_observation.as_ref();
    alarms
        .iter()
        .map(|a| NamedAlarm {
            member: obs
                .map(|o| {
                    druidctl::etcd::actions::member_name(o, a.member_id, |pod| {
                        loaded
                            .report
                            .members
                            .iter()
                            .find(|m| names.pod(m.index) == pod)
                            .map(|m| m.name.clone())
                            .unwrap_or_else(|| pod.to_string())
                    })
                })
                .unwrap_or_else(|| hex_id(a.member_id)),
            member_id: hex_id(a.member_id),
            alarm: a.kind,
        })
        .collect()
}

fn print(ctx: &mut Context, loaded: &Loaded, alarms: &[NamedAlarm], message: Option<&str>) -> anyhow::Result<()> {
    match ctx.printer.format() {
        OutputFormat::Table | OutputFormat::Wide => {
            let color = ctx.printer.color();
            let mut out = String::new();
            if let Some(m) = message {
                out.push_str(&format!("{m}\n"));
            } else if alarms.is_empty() {
                out.push_str(&format!("Etcd {}: no alarm is raised\n", loaded.key));
            } else {
                let mut t = Table::new(&["member", "id", "alarm"]);
                for a in alarms {
                    t.row(vec![
                        Cell::plain(&a.member),
                        Cell::plain(&a.member_id),
                        Cell::styled(a.alarm.as_str(), Style::Bad),
                    ]);
                }
                out.push_str(&t.render(color));
            }
            ctx.printer.text(&out)?;
        }
        OutputFormat::Name => ctx.printer.text(&format!("etcd.druid.gardener.cloud/{}\n", loaded.key.name))?,
        OutputFormat::Json | OutputFormat::Yaml | OutputFormat::Jsonl => {
            let doc = serde_json::json!({
                "apiVersion": druidctl::output::status::STATUS_API_VERSION,
                "kind": "EtcdAlarmList",
                "etcd": loaded.key,
                "message": message,
                "items": alarms,
            });
            match ctx.printer.format() {
                OutputFormat::Yaml => ctx.printer.yaml(&doc)?,
                OutputFormat::Jsonl => ctx.printer.jsonl(&doc)?,
                _ => ctx.printer.json(&doc)?,
            }
        }
    }
    Ok(())
}
