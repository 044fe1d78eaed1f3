//! `snapshot full|delta ETCD`: a snapshot taken by the leading backup sidecar, through etcd-druid's
//! `EtcdOpsTask` when the cluster serves it (etcd-druid ≥ v0.34; etcd-druid reaches the sidecar where a client
//! may be blocked by NetworkPolicies), else through an `OnDemandSnapshotTask` that druidctl executes.
//! `--engine` chooses explicitly.

use clap::{Args, ValueEnum};
use druidctl::api::task::types;

use druidctl::kube::annotate::AnnotateError;
use druidctl::kube::{Cluster, UsageError};
use druidctl::tasks::opstask;

use super::Context;
use super::task::{RunArgs, classified, run_task, shortcut_waits};

/// Creates an on-demand snapshot EtcdOpsTask and, unless --no-wait, follows it.
async fn run_ops_task(ctx: &mut Context, cluster: &Cluster, kind: &str, args: &SnapshotArgs) -> anyhow::Result<()> {
    let (ns, etcd) = super::task::etcd_target(ctx, &cluster.namespace, &args.etcd)?;
    let run = shortcut_waits(&args.run, args.no_wait);
    // The Etcd must exist; the duplicate rule sees both task kinds.
    let key = druidctl::kube::ObjectKey { namespace: ns.clone(), name: etcd.clone() };
    druidctl::kube::etcds::get(&cluster.client, &key).await?;
    if !run.force {
        opstask::check_duplicate(&cluster.client, &ns, &etcd, true).await.map_err(classified)?;
    }
    let task = opstask::create_snapshot(&cluster.client, &ns, &etcd, kind, run.ttl).await?;
    let name = task.metadata.name.clone().unwrap_or_default();
    if !run.wait {
        ctx.printer.text(&format!("etcdopstask.druid.gardener.cloud/{name} created (etcd-druid executes it)\n"))?;
        return Ok(());
    }
    eprintln!("etcdopstask.druid.gardener.cloud/{name} created");
    let done = opstask::follow(&cluster.client, &ns, &name, run.timeout, |t| {
        let op = t.status.as_ref().and_then(|s| s.last_operation.as_ref());
        eprintln!(
            "{name}: {} {}",
            if t.state().is_empty() { "(new)" } else { t.state() },
            op.map(|o| format!("{} {}: {}", o.type_, o.state, o.description)).unwrap_or_default()
        );
    })
    .await
    .map_err(classified)?;
    ctx.printer.text(&format!("task {name} {}\n", done.state()))?;
    Ok(())
}

/// Which snapshot.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Kind {
    /// A full snapshot.
    Full,
    /// A delta snapshot (changes since the last snapshot).
    Delta,
}

/// Arguments of `snapshot`.
#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// Full or delta.
    #[arg(value_enum)]
    pub kind: Kind,
    /// The Etcd: NAME or NAMESPACE/NAME.
    #[arg(value_name = "ETCD", value_parser = super::parse_etcd_ref, add = clap_complete::engine::ArgValueCompleter::new(super::completion::etcd_names))]
    pub etcd: String,
    /// Return once the task is created instead of following it to the end.
    #[arg(long, conflicts_with_all = ["wait", "local"])]
    pub no_wait: bool,
    /// Who takes it: `druid` (an EtcdOpsTask etcd-druid executes), `druidctl` (an EtcdOperatorTask for
    /// `druidctl serve` or --local), or `auto` (druid when the cluster serves EtcdOpsTask, else druidctl).
    #[arg(long, value_enum, default_value = "auto")]
    pub engine: EngineArg,
    /// How to run it.
    #[command(flatten)]
    pub run: RunArgs,
}

/// `--engine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// etcd-druid when the cluster serves EtcdOpsTask, else druidctl.
    Auto,
    /// etcd-druid's EtcdOpsTask.
    Druid,
    /// druidctl's EtcdOperatorTask.
    Druidctl,
}

/// Runs `snapshot`.
pub async fn exec(ctx: &mut Context, args: SnapshotArgs) -> anyhow::Result<()> {
    let kind = match args.kind {
        Kind::Full => "full",
        Kind::Delta => "delta",
    };
    // `--local` executes an EtcdOperatorTask in this process: with `auto` it picks druidctl.
    if args.engine == EngineArg::Druid || (args.engine == EngineArg::Auto && !args.run.local) {
        if args.run.local {
            return Err(UsageError(
                "--local runs an EtcdOperatorTask in this process; use it with --engine druidctl".into(),
            )
            .into());
        }
        let cluster = ctx.connect().await?;
        let served = opstask::served(&cluster.client).await?;
        match (args.engine, served) {
            (EngineArg::Druid, false) => {
                return Err(AnnotateError::Rejected(
                    "this cluster does not serve EtcdOpsTask (etcd-druid older than v0.34); use --engine druidctl"
                        .into(),
                )
                .into());
            }
            (_, true) => return run_ops_task(ctx, &cluster, kind, &args).await,
            _ => {}
        }
    }
    let config = format!("type: {kind}\n");
    run_task(ctx, types::ON_DEMAND_SNAPSHOT, &args.etcd, Some(config), &shortcut_waits(&args.run, args.no_wait)).await
}
