//! `snapshot full|delta ETCD`: an `OnDemandSnapshotTask` taken by the leading backup sidecar.

use clap::{Args, ValueEnum};
use druidctl::api::task::types;

use super::Context;
use super::task::{RunArgs, run_task, shortcut_waits};

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
    #[arg(value_name = "ETCD", value_parser = super::parse_etcd_ref)]
    pub etcd: String,
    /// Do not wait for the task even on a terminal.
    #[arg(long, conflicts_with_all = ["wait", "local"])]
    pub no_wait: bool,
    /// How to run it.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Runs `snapshot`.
pub async fn exec(ctx: &mut Context, args: SnapshotArgs) -> anyhow::Result<()> {
    let config = match args.kind {
        Kind::Full => "type: full\n",
        Kind::Delta => "type: delta\n",
    };
    run_task(ctx, types::ON_DEMAND_SNAPSHOT, &args.etcd, Some(config.into()), &shortcut_waits(&args.run, args.no_wait))
        .await
}
