//! `suspend-reconcile ETCD…`: set `druid.gardener.cloud/suspend-etcd-spec-reconcile`.

use clap::Args;
use druidctl::kube::annotate;

use super::{Context, EtcdTargets, print_outcomes, write_targets};

/// Arguments of `suspend-reconcile`.
#[derive(Debug, Args)]
pub struct SuspendReconcileArgs {
    /// Which Etcds.
    #[command(flatten)]
    pub targets: EtcdTargets,
}

/// Runs `suspend-reconcile`.
pub async fn exec(ctx: &mut Context, args: SuspendReconcileArgs) -> anyhow::Result<()> {
    let (cluster, etcds) = write_targets(ctx, &args.targets.etcds).await?;
    let mut outcomes = Vec::new();
    for e in &etcds {
        outcomes.push(annotate::set_spec_reconcile_suspended(&cluster.client, e, true).await?);
    }
    print_outcomes(ctx, outcomes)
}
