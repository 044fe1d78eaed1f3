//! `compact ETCD`: an `OnDemandSnapshotCompactionTask` (the compaction Job `ETCD-compactor`).

use clap::Args;
use druidctl::api::task::types;

use super::Context;
use super::task::{RunArgs, run_task, shortcut_waits};

/// Arguments of `compact`.
#[derive(Debug, Args)]
pub struct CompactArgs {
    /// The Etcd: NAME or NAMESPACE/NAME.
    #[arg(value_name = "ETCD", value_parser = super::parse_etcd_ref, add = clap_complete::engine::ArgValueCompleter::new(super::completion::etcd_names))]
    pub etcd: String,
    /// Return once the task is created instead of following it to the end.
    #[arg(long, conflicts_with_all = ["wait", "local"])]
    pub no_wait: bool,
    /// How to run it.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Runs `compact`.
pub async fn exec(ctx: &mut Context, args: CompactArgs) -> anyhow::Result<()> {
    run_task(ctx, types::ON_DEMAND_SNAPSHOT_COMPACTION, &args.etcd, None, &shortcut_waits(&args.run, args.no_wait))
        .await
}
