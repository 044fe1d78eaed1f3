//! `protection enable|disable ETCD…`: the EtcdComponents webhook that blocks changes to managed resources.

use clap::{Args, Subcommand};
use druidctl::kube::annotate;

use super::{Context, EtcdTargets, print_outcomes, write_targets};

/// Arguments of `protection`.
#[derive(Debug, Args)]
pub struct ProtectionArgs {
    /// Enable or disable.
    #[command(subcommand)]
    pub action: ProtectionAction,
}

/// What to do with the protection.
#[derive(Debug, Subcommand)]
pub enum ProtectionAction {
    /// Protect the managed resources again (removes the disable annotation).
    Enable(EtcdTargets),
    /// Let UPDATE/DELETE of the managed resources through (sets disable-etcd-component-protection).
    Disable(EtcdTargets),
}

/// Runs `protection`.
pub async fn exec(ctx: &mut Context, args: ProtectionArgs) -> anyhow::Result<()> {
    let (enable, targets) = match args.action {
        ProtectionAction::Enable(t) => (true, t),
        ProtectionAction::Disable(t) => (false, t),
    };
    let (cluster, etcds) = write_targets(ctx, &targets.etcds).await?;
    let mut outcomes = Vec::new();
    for e in &etcds {
        outcomes.push(annotate::set_component_protection(&cluster.client, e, enable).await?);
    }
    print_outcomes(ctx, outcomes)
}
