//! `maintenance ETCD --compaction --defragmentation`: an `OnDemandMaintenanceTask`.

use clap::Args;
use druidctl::api::task::types;
use druidctl::kube::UsageError;

use super::Context;
use super::task::{RunArgs, run_task, shortcut_waits};

/// Arguments of `maintenance`.
#[derive(Debug, Args)]
pub struct MaintenanceArgs {
    /// The Etcd: NAME or NAMESPACE/NAME.
    #[arg(value_name = "ETCD", value_parser = super::parse_etcd_ref, add = clap_complete::engine::ArgValueCompleter::new(super::completion::etcd_names))]
    pub etcd: String,
    /// Compact the etcd keyspace up to the current revision.
    #[arg(long)]
    pub compaction: bool,
    /// Defragment every member, one at a time, the leader last.
    #[arg(long)]
    pub defragmentation: bool,
    /// Return once the task is created instead of following it to the end.
    #[arg(long, conflicts_with_all = ["wait", "local"])]
    pub no_wait: bool,
    /// How to run it.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Runs `maintenance`.
pub async fn exec(ctx: &mut Context, args: MaintenanceArgs) -> anyhow::Result<()> {
    if !args.compaction && !args.defragmentation {
        return Err(UsageError("say what to do: --compaction and/or --defragmentation".into()).into());
    }
    let config = format!(
        "maintenanceType:\n  etcdCompaction: {}\n  etcdDefragmentation: {}\n",
        args.compaction, args.defragmentation
    );
    run_task(ctx, types::ON_DEMAND_MAINTENANCE, &args.etcd, Some(config), &shortcut_waits(&args.run, args.no_wait))
        .await
}
