//! `check ETCD`: whether every member holds the same keyspace (HashKV of every member at one common revision);
//! exit 0 when consistent, 4 when a member diverges (naming it and the runbook that rebuilds it).

use std::time::Duration;

use clap::Args;
use clap_complete::engine::ArgValueCompleter;
use druidctl::etcd::EtcdError;
use druidctl::etcd::consistency::{ConsistencyReport, check};
use druidctl::health::{HealthInputs, HealthReport};
use druidctl::kube::{Cluster, ObjectKey};
use druidctl::output::OutputFormat;
use druidctl::output::table::{Cell, Style, Table};

use super::Context;

/// Arguments of `check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The Etcd: NAME or NAMESPACE/NAME.
    #[arg(value_name = "ETCD", value_parser = super::parse_etcd_ref, add = ArgValueCompleter::new(super::completion::etcd_names))]
    pub etcd: String,
    /// How long each member may take to answer.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = super::duration_in(100, 600))]
    pub timeout: Duration,
}

/// One Etcd with its inputs, etcd's view of its members, and its health report.
pub(super) struct Loaded {
    /// The connection.
    pub cluster: Cluster,
    /// The Etcd.
    pub key: ObjectKey,
    /// What the health model was judged from (with etcd's observation).
    pub inputs: HealthInputs,
    /// The health report.
    pub report: HealthReport,
}

/// Reads the Etcd named `etcd` (as the user typed it), its pods, PVCs and leases, and every member's etcd.
pub(super) async fn load(ctx: &Context, etcd: &str, timeout: Duration) -> anyhow::Result<Loaded> {
    // Port-forwards to the members need a client that can upgrade connections (HTTP/1.1).
    let cluster = ctx.connect().await?;
    let (namespace, name) = super::task::etcd_target(ctx, &cluster.namespace, etcd)?;
    let key = ObjectKey { namespace, name };
    let mut inputs = druidctl::health::collect_named(&cluster.client, std::slice::from_ref(&key))
        .await?
        .pop()
        .ok_or_else(|| druidctl::kube::ClusterError::NotFound {
            kind: "etcd".into(),
            name: key.name.clone(),
            namespace: key.namespace.clone(),
            hint: None,
        })?;
    druidctl::health::observe_etcd(&cluster.client, std::slice::from_mut(&mut inputs), timeout).await;
    let report = druidctl::health::assess(&inputs, jiff::Timestamp::now());
    Ok(Loaded { cluster, key, inputs, report })
}

/// The member names of `loaded` with their pods, in ordinal order.
pub(super) fn members_with_pods(loaded: &Loaded) -> Vec<(String, Option<k8s_openapi::api::core::v1::Pod>)> {
    let names = loaded.inputs.etcd.managed_names();
    loaded
        .report
        .members
        .iter()
        .map(|m| {
            let pod = names.pod(m.index);
            (m.name.clone(), loaded.inputs.pods.iter().find(|p| p.metadata.name.as_deref() == Some(&pod)).cloned())
        })
        .collect()
}

/// Runs `check`.
pub async fn exec(ctx: &mut Context, args: CheckArgs) -> anyhow::Result<()> {
    let loaded = load(ctx, &args.etcd, args.timeout).await?;
    let members = members_with_pods(&loaded);
    let report = check(&loaded.cluster.client, &loaded.inputs.etcd, &members, args.timeout).await?;
    print(ctx, &loaded.key, &report)?;
    let cmd = druidctl::output::command_name();
    let target = format!("-n {} {}", loaded.key.namespace, loaded.key.name);
    match report.divergent.as_slice() {
        [] if report.unreachable.is_empty() => Ok(()),
        [] => Err(EtcdError::Unreachable(format!(
            "the members asked agree, but not every member could be asked: {}",
            report.unreachable.join("; ")
        ))
        .into()),
        [one] => Err(EtcdError::Divergent(format!(
            "member {one}'s keyspace differs from the others' at revision {}; rebuild it with `{cmd} runbook \
             member-restore {target} {one}`",
            report.revision
        ))
        .into()),
        many => Err(EtcdError::Divergent(format!(
            "no majority of members agrees on the keyspace at revision {} ({}); restore the cluster from its \
             backup (`{cmd} runbook quorum-loss-recovery {target} --plan` shows how)",
            report.revision,
            many.join(", ")
        ))
        .into()),
    }
}

fn print(ctx: &mut Context, key: &ObjectKey, report: &ConsistencyReport) -> anyhow::Result<()> {
    match ctx.printer.format() {
        OutputFormat::Table | OutputFormat::Wide => {
            let color = ctx.printer.color();
            let verdict = if report.consistent() {
                Style::Good.paint("consistent", color)
            } else {
                Style::Bad.paint("divergent", color)
            };
            let mut out = format!("Etcd {key}: {verdict} at revision {}\n", report.revision);
            let mut t = Table::new(&["member", "id", "revision", "compact revision", "hash"]);
            for m in &report.members {
                let odd = report.divergent.contains(&m.member);
                t.row(vec![
                    Cell::plain(&m.member),
                    Cell::plain(&m.member_id),
                    Cell::plain(m.revision.to_string()),
                    Cell::plain(m.compact_revision.to_string()),
                    Cell::styled(m.hash.to_string(), if odd { Style::Bad } else { Style::Plain }),
                ]);
            }
            out.push_str(&t.render(color));
            for why in &report.unreachable {
                out.push_str(&format!("not asked: {why}\n"));
            }
            ctx.printer.text(&out)?;
        }
        OutputFormat::Name => ctx.printer.text(&format!("etcd.druid.gardener.cloud/{}\n", key.name))?,
        OutputFormat::Json | OutputFormat::Yaml | OutputFormat::Jsonl => {
            let doc = serde_json::json!({
                "apiVersion": druidctl::output::status::STATUS_API_VERSION,
                "kind": "EtcdConsistency",
                "etcd": key,
                "consistent": report.consistent(),
                "revision": report.revision,
                "members": report.members,
                "divergent": report.divergent,
                "unreachable": report.unreachable,
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
