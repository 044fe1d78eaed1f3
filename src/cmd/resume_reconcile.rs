//! `resume-reconcile ETCD…`: remove `druid.gardener.cloud/suspend-etcd-spec-reconcile`.

use clap::Args;
use druidctl::kube::annotate;

use super::{Context, EtcdTargets, print_outcomes, write_targets};

/// Arguments of `resume-reconcile`.
#[derive(Debug, Args)]
pub struct ResumeReconcileArgs {
    /// Which Etcds.
    #[command(flatten)]
    pub targets: EtcdTargets,
}

/// Runs `resume-reconcile`.
pub async fn exec(ctx: &mut Context, args: ResumeReconcileArgs) -> anyhow::Result<()> {
    let (cluster, etcds) = write_targets(ctx, &args.targets.etcds).await?;
    let mut outcomes = Vec::new();
    for e in &etcds {
        outcomes.push(annotate::set_spec_reconcile_suspended(&cluster.client, e, false).await?);
    }
    print_outcomes(ctx, outcomes)
}
