//! The command lines of etcd-druid's own `druidctl` (gardener/etcd-druid `druidctl/cmd`, v0.37.x), accepted as
//! hidden aliases so an operator's scripts keep working. Each maps onto the druidctl command with the same
//! effect on the Etcd:
//! - `reconciliation trigger|suspend|resume` (`druidctl/cmd/reconciliation/command.go`) → `reconcile`,
//!   `suspend-reconcile`, `resume-reconcile`; `trigger --wait-till-ready/-w --timeout/-t` → `--wait --timeout`.
//! - `component-protection add|remove` (`druidctl/cmd/resourceprotection/command.go`): the naming is inverted
//!   relative to the annotation — `add` removes `disable-etcd-component-protection` (= `protection enable`),
//!   `remove` sets it (= `protection disable`).
//! - `list-resources` keeps its name; `--no-banner` is accepted and means nothing here (druidctl prints no banner).
//!
//! docs/cli.md lists the differences (e.g. the reconcile annotation key).

use std::time::Duration;

use clap::{Args, Subcommand};

use super::{Context, EtcdTargets};

/// Arguments of `reconciliation` (upstream spelling).
#[derive(Debug, Args)]
pub struct ReconciliationArgs {
    /// The action.
    #[command(subcommand)]
    pub action: ReconciliationAction,
}

/// Upstream's `reconciliation` actions.
#[derive(Debug, Subcommand)]
pub enum ReconciliationAction {
    /// Same as `reconcile`.
    Trigger(TriggerArgs),
    /// Same as `suspend-reconcile`.
    Suspend(EtcdTargets),
    /// Same as `resume-reconcile`.
    Resume(EtcdTargets),
}

/// Arguments of `reconciliation trigger`.
#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// Which Etcds.
    #[command(flatten)]
    pub targets: EtcdTargets,
    /// Wait until etcd-druid has reconciled (druidctl: --wait).
    #[arg(short = 'w', long = "wait-till-ready")]
    pub wait_till_ready: bool,
    /// How long --wait-till-ready waits (druidctl: --timeout).
    #[arg(short = 't', long, value_name = "DURATION", default_value = "5m", value_parser = super::duration_in(1000, super::DAY), requires = "wait_till_ready")]
    pub timeout: Duration,
}

/// Arguments of `component-protection` (upstream spelling).
#[derive(Debug, Args)]
pub struct ComponentProtectionArgs {
    /// The action.
    #[command(subcommand)]
    pub action: ComponentProtectionAction,
}

/// Upstream's `component-protection` actions (inverted naming: see the module docs).
#[derive(Debug, Subcommand)]
pub enum ComponentProtectionAction {
    /// Same as `protection enable` (removes the disable annotation).
    Add(EtcdTargets),
    /// Same as `protection disable` (sets the disable annotation).
    Remove(EtcdTargets),
}

/// Runs `reconciliation …` as the druidctl command it stands for.
pub async fn reconciliation(ctx: &mut Context, args: ReconciliationArgs) -> anyhow::Result<()> {
    match args.action {
        ReconciliationAction::Trigger(a) => {
            let native =
                super::reconcile::ReconcileArgs { targets: a.targets, wait: a.wait_till_ready, timeout: a.timeout };
            super::reconcile::exec(ctx, native).await
        }
        ReconciliationAction::Suspend(targets) => {
            super::suspend_reconcile::exec(ctx, super::suspend_reconcile::SuspendReconcileArgs { targets }).await
        }
        ReconciliationAction::Resume(targets) => {
            super::resume_reconcile::exec(ctx, super::resume_reconcile::ResumeReconcileArgs { targets }).await
        }
    }
}

/// Runs `component-protection …` as `protection enable|disable`.
pub async fn component_protection(ctx: &mut Context, args: ComponentProtectionArgs) -> anyhow::Result<()> {
    use super::protection::{ProtectionAction, ProtectionArgs};
    let action = match args.action {
        ComponentProtectionAction::Add(t) => ProtectionAction::Enable(t),
        ComponentProtectionAction::Remove(t) => ProtectionAction::Disable(t),
    };
    super::protection::exec(ctx, ProtectionArgs { action }).await
}
