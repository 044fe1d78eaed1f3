//! `reconcile ETCD…`: annotate `gardener.cloud/operation=reconcile`; with `--wait`, wait until etcd-druid removed
//! the annotation and observed the generation.

use std::time::Duration;

use clap::Args;
use druidctl::kube::annotate;

use super::{Context, EtcdTargets, print_outcomes, write_targets};

/// Arguments of `reconcile`.
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// Which Etcds.
    #[command(flatten)]
    pub targets: EtcdTargets,
    /// Wait until etcd-druid has reconciled.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = super::duration_in(1000, super::DAY), requires = "wait")]
    pub timeout: Duration,
}

/// Runs `reconcile`.
pub async fn exec(ctx: &mut Context, args: ReconcileArgs) -> anyhow::Result<()> {
    let (cluster, etcds) = write_targets(ctx, &args.targets.etcds).await?;
    // Check every target before changing any, so a refusal changes nothing.
    for e in &etcds {
        annotate::check_reconcile_allowed(e)?;
    }
    let mut outcomes = Vec::new();
    for e in &etcds {
        outcomes.push(annotate::request_reconcile(&cluster.client, e).await?);
    }
    if args.wait {
        let waits = outcomes.iter().map(|o| annotate::wait_reconciled(&cluster.client, &o.etcd, args.timeout));
        futures::future::try_join_all(waits).await?;
        for o in &mut outcomes {
            o.message = format!("etcd {}: reconciled", o.etcd);
        }
    }
    print_outcomes(ctx, outcomes)
}
