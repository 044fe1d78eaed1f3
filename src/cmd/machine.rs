//! `machine delete MACHINE | --node NODE [--force] [--wait]`: show what runs on the node (etcd members and the
//! quorum they carry, PDBs that would block the drain), refuse when an Etcd would lose quorum unless forced and
//! confirmed, then ask machine-controller-manager to replace the machine. `--machine-kubeconfig`/`--machine-context`
//! name the cluster holding the Machines when it is not the Nodes' cluster.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use druidctl::kube::annotate::AnnotateError;
use druidctl::machines::{DeleteOptions, MachineClusterRef, MachineError, MachineTarget, delete as ops};
use druidctl::output::OutputFormat;
use druidctl::output::progress::confirm_by_typing;

use super::Context;

/// Arguments of `machine`.
#[derive(Debug, Args)]
pub struct MachineArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: MachineCommand,
}

/// `machine` subcommands.
#[derive(Debug, Subcommand)]
pub enum MachineCommand {
    /// Replace a machine (MCM creates a new one): by Machine name, or by Node with --node.
    Delete(MachineDeleteArgs),
}

/// `MACHINE` or `--node NODE` (shared with `runbook machine-replacement`).
#[derive(Debug, Args)]
pub struct MachineTargetArgs {
    /// The Machine (in the namespace of -n).
    #[arg(value_name = "MACHINE", required_unless_present = "node", conflicts_with = "node", value_parser = super::parse_object_name)]
    pub machine: Option<String>,
    /// The Node whose Machine to replace (when its Machine is not readable: deletes the Node on MCM v0.61+,
    /// annotates it on older MCM).
    #[arg(long, value_name = "NODE", value_parser = super::parse_object_name)]
    pub node: Option<String>,
}

/// Where the Machines are (shared with `runbook machine-replacement`): MCM's control cluster, when it is not the
/// cluster of the Nodes (e.g. a seed's Machines in its parent cluster).
#[derive(Debug, Clone, Args)]
pub struct MachineClusterArgs {
    /// Kubeconfig of the cluster holding the Machines (default: the current cluster). -n names the Machine's
    /// namespace there (default: that context's namespace).
    #[arg(long, value_name = "FILE", env = "DRUIDCTL_MACHINE_KUBECONFIG", value_parser = parse_kubeconfig_path)]
    pub machine_kubeconfig: Option<PathBuf>,
    /// Context of the cluster holding the Machines (in --machine-kubeconfig, else in the usual kubeconfig).
    #[arg(long, value_name = "NAME", env = "DRUIDCTL_MACHINE_CONTEXT", value_parser = super::parse_non_empty, add = clap_complete::engine::ArgValueCompleter::new(super::completion::contexts))]
    pub machine_context: Option<String>,
}

/// A kubeconfig path that exists, made absolute (it is recorded for `--resume` from another directory).
fn parse_kubeconfig_path(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    if s.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if !p.is_file() {
        return Err(format!("{s}: no such file"));
    }
    std::path::absolute(&p).map_err(|e| format!("{s}: {e}"))
}

impl MachineClusterArgs {
    /// The machine cluster these flags name.
    pub fn cluster(&self) -> MachineClusterRef {
        MachineClusterRef { kubeconfig: self.machine_kubeconfig.clone(), context: self.machine_context.clone() }
    }
}

impl MachineTargetArgs {
    /// The machine or node named.
    pub fn target(self) -> MachineTarget {
        MachineTarget::from_flags(self.machine, self.node).expect("clap requires one")
    }
}

/// Arguments of `machine delete`.
#[derive(Debug, Args)]
pub struct MachineDeleteArgs {
    /// The machine or node.
    #[command(flatten)]
    pub target: MachineTargetArgs,
    /// The cluster holding the Machines.
    #[command(flatten)]
    pub machines: MachineClusterArgs,
    /// Skip the drain (label force-deletion: "True"; can violate PDBs), and allow a deletion that costs an Etcd
    /// its quorum after typing the node's name.
    #[arg(long)]
    pub force: bool,
    /// Do not ask for the typed confirmation (only with --force).
    #[arg(long, requires = "force")]
    pub yes: bool,
    /// Wait until the replacement node is Ready.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = super::duration_in(1000, super::DAY), requires = "wait")]
    pub timeout: Duration,
}

/// Runs `machine`.
pub async fn exec(ctx: &mut Context, args: MachineArgs) -> anyhow::Result<()> {
    match args.command {
        MachineCommand::Delete(a) => delete(ctx, a).await,
    }
}

fn machine_error(e: MachineError) -> anyhow::Error {
    match e {
        MachineError::Cluster(c) => c.into(),
        refused @ (MachineError::WouldLoseQuorum(_) | MachineError::NotManagedByMcm(_)) => {
            AnnotateError::Rejected(refused.to_string()).into()
        }
    }
}

async fn delete(ctx: &mut Context, args: MachineDeleteArgs) -> anyhow::Result<()> {
    let target = args.target.target();
    target.validate()?;
    if ctx.global.all_namespaces || ctx.global.selector.is_some() {
        return Err(druidctl::kube::UsageError(
            "machine delete takes one machine or node; -A and -l do not apply".into(),
        )
        .into());
    }
    let cluster = ctx.connect().await?;
    let machines_at = args.machines.cluster().connect(&cluster.client, ctx.global.request_timeout.0).await?;
    let ns = ctx.namespace_or(machines_at.namespace.as_deref().unwrap_or(&cluster.namespace));
    let plan = ops::inspect(&cluster.client, &machines_at, &ns, &target, args.force).await.map_err(machine_error)?;
    let people = matches!(ctx.printer.format(), OutputFormat::Table | OutputFormat::Wide);
    if people {
        let text: String = plan.describe().iter().map(|l| format!("{l}\n")).collect();
        ctx.printer.text(&text)?;
    }
    let mut allow_quorum_loss = false;
    if let Some(why) = plan.impact.refusal() {
        if !args.force {
            return Err(machine_error(MachineError::WouldLoseQuorum(why)));
        }
        let node = plan.node.clone().unwrap_or_default();
        confirm_by_typing(&format!("{why}."), &node, args.yes)?;
        allow_quorum_loss = true;
    }
    let opts = DeleteOptions { force: args.force, allow_quorum_loss, wait: args.wait.then_some(args.timeout) };
    let outcome = ops::delete(&cluster.client, &machines_at, plan, &opts).await.map_err(machine_error)?;
    if people {
        ctx.printer.text(&format!("{}\n", outcome.message))?;
    } else {
        ctx.printer.json(&serde_json::json!({
            "apiVersion": druidctl::output::status::STATUS_API_VERSION, "kind": "MachineDeletion", "result": outcome,
        }))?;
    }
    Ok(())
}
