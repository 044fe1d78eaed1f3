//! `runbook list|quorum-loss-recovery|member-restore|cert-renewal|machine-replacement|space-recovery`: guided runbooks. This file parses flags, draws the plan,
//! progress and summary, and asks the confirmations; the engine is `druidctl::runbook`.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Duration;

use clap::{Args, Subcommand};
use clap_complete::engine::ArgValueCompleter;
use druidctl::kube::ClusterError;
use druidctl::kube::annotate::AnnotateError;
use druidctl::machines::delete::DeletionMethod;
use druidctl::machines::{MachineClusterRef, MachineError, MachineTarget, delete as machine_ops};
use druidctl::output::OutputFormat;
use druidctl::output::progress::{PromptError, confirm, confirm_by_typing};
use druidctl::runbook::catalog::{
    ALL, CERT_RENEWAL, MACHINE_REPLACEMENT, MEMBER_RESTORE, QUORUM_LOSS_RECOVERY, SPACE_RECOVERY,
};
use druidctl::runbook::engine::ExtraAccess;
use druidctl::runbook::engine::{Event, Outcome, RunOptions, RunbookError, Summary};
use druidctl::runbook::rbac::Access;
use druidctl::runbook::{Operator, Runbook};
use druidctl::tasks::machine_deletion::{config_text, parse_config as parse_machine_config};
use indicatif::{ProgressBar, ProgressStyle};
use tokio_util::sync::CancellationToken;

use super::{Context, Interrupted};

/// Arguments of `runbook`.
#[derive(Debug, Args)]
pub struct RunbookArgs {
    /// The runbook.
    #[command(subcommand)]
    pub command: RunbookCommand,
}

/// The runbooks: quorum-loss-recovery, member-restore, cert-renewal, machine-replacement and space-recovery (`runbook list`
/// describes each; `--plan` prints the steps and changes nothing).
#[derive(Debug, Subcommand)]
pub enum RunbookCommand {
    /// List the runbooks.
    List,
    /// Recover a multi-member Etcd from permanent quorum loss: restore its first member from the latest backup,
    /// then scale back (new members join as learners).
    QuorumLossRecovery(QuorumLossArgs),
    /// Restore one failed member of a quorate multi-member Etcd: it restarts empty and rejoins as a learner.
    MemberRestore(MemberRestoreArgs),
    /// Renew the Etcd's certificates, then restart its members one at a time, followers first, leader last.
    CertRenewal(CertRenewalArgs),
    /// Replace the machine behind a node hosting Etcd members (MCM), refusing when any Etcd would lose quorum.
    MachineReplacement(MachineReplacementArgs),
    /// Free the database of an Etcd that hit its quota (NOSPACE) or is close to it: compact, defragment each
    /// member (followers first, the leader last), disarm NOSPACE, check that writes work.
    SpaceRecovery(SpaceRecoveryArgs),
    /// Abort the unfinished runbook run of an Etcd whose executor is gone: etcd-druid reconciles again,
    /// component protection is back on, and the task is deleted.
    Abort(AbortArgs),
}

/// Arguments of `runbook abort`.
#[derive(Debug, Args)]
pub struct AbortArgs {
    /// The Etcd: NAME or NAMESPACE/NAME.
    #[arg(value_name = "ETCD", value_parser = super::parse_etcd_ref, add = ArgValueCompleter::new(super::completion::etcd_names))]
    pub etcd: String,
}

/// Flags every runbook takes.
#[derive(Debug, Clone, Args)]
pub struct RunFlags {
    /// Print the plan (steps, kubectl equivalents, destructive marks) and change nothing.
    #[arg(long)]
    pub plan: bool,
    /// Do not ask: approve every destructive step (for CI).
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// Only continue an unfinished run (re-running the same command does that too).
    #[arg(long, conflicts_with = "plan")]
    pub resume: bool,
    /// Start at this step (experts); a completed destructive step is still never repeated.
    #[arg(long, value_name = "STEP", conflicts_with = "plan")]
    pub from_step: Option<String>,
    /// Set from `quorum-loss-recovery --accept-data-loss`, the one runbook that restores from a backup.
    #[arg(skip)]
    pub accept_data_loss: bool,
}

/// Arguments of `runbook quorum-loss-recovery`.
#[derive(Debug, Args)]
pub struct QuorumLossArgs {
    /// The Etcd: NAME or NAMESPACE/NAME.
    #[arg(value_name = "ETCD", value_parser = super::parse_etcd_ref, add = ArgValueCompleter::new(super::completion::etcd_names))]
    pub etcd: String,
    /// Proceed although the newest full snapshot is old or absent (what is not in it is lost).
    #[arg(long)]
    pub accept_data_loss: bool,
    /// Runbook flags.
    #[command(flatten)]
    pub flags: RunFlags,
}

/// Arguments of `runbook member-restore`.
#[derive(Debug, Args)]
pub struct MemberRestoreArgs {
    /// The Etcd: NAME or NAMESPACE/NAME.
    #[arg(value_name = "ETCD", value_parser = super::parse_etcd_ref, add = ArgValueCompleter::new(super::completion::etcd_names))]
    pub etcd: String,
    /// The failed member (pod name), e.g. etcd-main-2.
    #[arg(value_name = "MEMBER", value_parser = super::parse_object_name, add = ArgValueCompleter::new(super::completion::members))]
    pub member: String,
    /// Runbook flags.
    #[command(flatten)]
    pub flags: RunFlags,
}

/// Arguments of `runbook cert-renewal`.
#[derive(Debug, Args)]
pub struct CertRenewalArgs {
    /// The Etcd: NAME or NAMESPACE/NAME.
    #[arg(value_name = "ETCD", value_parser = super::parse_etcd_ref, add = ArgValueCompleter::new(super::completion::etcd_names))]
    pub etcd: String,
    /// Runbook flags.
    #[command(flatten)]
    pub flags: RunFlags,
}

/// Arguments of `runbook machine-replacement`.
#[derive(Debug, Args)]
#[command(mut_arg("node", |a| a.help("The Node whose Machine to replace")))]
pub struct MachineReplacementArgs {
    /// The machine or node.
    #[command(flatten)]
    pub target: super::machine::MachineTargetArgs,
    /// The cluster holding the Machines (recorded in the run, so `--resume` finds it again).
    #[command(flatten)]
    pub machines: super::machine::MachineClusterArgs,
    /// Skip the drain (label force-deletion: "True"; PodDisruptionBudgets are not respected).
    #[arg(long)]
    pub force: bool,
    /// The Etcd (NAME or NAMESPACE/NAME) whose members the runbook waits for; needed only when members of
    /// several Etcds run on the node.
    #[arg(long, value_name = "ETCD", value_parser = super::parse_etcd_ref, add = ArgValueCompleter::new(super::completion::etcd_names))]
    pub etcd: Option<String>,
    /// Runbook flags.
    #[command(flatten)]
    pub flags: RunFlags,
}

/// Arguments of `runbook space-recovery`.
#[derive(Debug, Args)]
pub struct SpaceRecoveryArgs {
    /// The Etcd: NAME or NAMESPACE/NAME.
    #[arg(value_name = "ETCD", value_parser = super::parse_etcd_ref, add = ArgValueCompleter::new(super::completion::etcd_names))]
    pub etcd: String,
    /// Run although no NOSPACE alarm is raised and every database is below 80% of the quota.
    #[arg(long)]
    pub force: bool,
    /// Runbook flags.
    #[command(flatten)]
    pub flags: RunFlags,
}

/// What a runbook runs against, before it is resolved in the cluster.
enum Target {
    /// An Etcd (NAME or NAMESPACE/NAME), with the member for member restore.
    Etcd { etcd: String, member: Option<String> },
    /// A machine or node; the Etcd is the one whose members run there (or `--etcd`).
    Machine { target: MachineTarget, force: bool, etcd: Option<String>, at: MachineClusterRef },
}

/// Splits NAME or NAMESPACE/NAME, checking it against -n.
fn etcd_key(ctx: &Context, etcd: &str, default_ns: &str) -> Result<(String, String), druidctl::kube::UsageError> {
    match etcd.split_once('/') {
        Some((ns, name)) => {
            if let Some(n) = &ctx.global.namespace
                && n != ns
            {
                return Err(druidctl::kube::UsageError(format!("{etcd:?} names namespace {ns:?} but -n says {n:?}")));
            }
            Ok((ns.to_string(), name.to_string()))
        }
        None => Ok((ctx.namespace_or(default_ns), etcd.to_string())),
    }
}

/// Whether an unfinished task of `rb` with `config` exists for the Etcd (a run to resume after its machine is gone).
async fn has_unfinished(client: &kube::Client, rb: &Runbook, ns: &str, etcd: &str, config: &str) -> bool {
    let api: kube::Api<druidctl::api::EtcdOperatorTask> = kube::Api::namespaced(client.clone(), ns);
    let Ok(list) = api.list(&kube::api::ListParams::default()).await else { return false };
    list.items.iter().any(|t| {
        t.spec.type_ == rb.task_type
            && t.targets(ns, etcd)
            && !t.state().is_terminal()
            && t.spec.config.as_deref().map(str::trim) == Some(config.trim())
    })
}

/// The machine cluster an unfinished run of this replacement recorded (same target, force and Machine namespace),
/// so that `--resume` without the machine-cluster flags continues against the cluster the run started with.
async fn recorded_machine_cluster(
    client: &kube::Client,
    etcd_ns: &str,
    etcd: &str,
    target: &MachineTarget,
    force: bool,
    machine_ns: &str,
) -> Option<MachineClusterRef> {
    let api: kube::Api<druidctl::api::EtcdOperatorTask> = kube::Api::namespaced(client.clone(), etcd_ns);
    let list = api.list(&kube::api::ListParams::default()).await.ok()?;
    list.items.iter().find_map(|t| {
        if t.spec.type_ != MACHINE_REPLACEMENT.task_type || !t.targets(etcd_ns, etcd) || t.state().is_terminal() {
            return None;
        }
        let c = parse_machine_config(t.spec.config.as_deref()).ok()?;
        let same_ns = c.namespace.as_deref().unwrap_or(etcd_ns) == machine_ns;
        (c.target == *target && c.force == force && same_ns && c.machine_cluster.is_set()).then_some(c.machine_cluster)
    })
}

/// Resolves a machine-replacement target: the Etcd whose members run on the node, the task config, and the
/// arguments that name the run again (for the resume command).
#[allow(clippy::too_many_arguments)]
async fn resolve_machine(
    ctx: &Context,
    client: &kube::Client,
    default_ns: &str,
    target: &MachineTarget,
    force: bool,
    etcd: Option<&str>,
    at: &MachineClusterRef,
    plan_only: bool,
) -> anyhow::Result<(String, String, String, String, Option<String>, Option<ExtraAccess>)> {
    target.validate()?;
    let given_ns = ctx.global.namespace.clone();
    let mut at = at.clone();
    let mut machines_at = at.connect(client, ctx.global.request_timeout.0).await?;
    let mut machine_ns = given_ns.clone().or(machines_at.namespace.clone()).unwrap_or_else(|| default_ns.to_string());
    let given = etcd.map(|e| match e.split_once('/') {
        Some((ns, name)) => (ns.to_string(), name.to_string()),
        None => (machine_ns.clone(), e.to_string()),
    });
    if !at.is_set()
        && let Some((ns, name)) = &given
        && let Some(recorded) = recorded_machine_cluster(client, ns, name, target, force, &machine_ns).await
    {
        // The run was started with a machine cluster: continue against it.
        at = recorded;
        machines_at = at.connect(client, ctx.global.request_timeout.0).await?;
        machine_ns = given_ns.or(machines_at.namespace.clone()).unwrap_or_else(|| default_ns.to_string());
    }
    let config_for = |etcd_ns: &str| {
        let ns = (etcd_ns != machine_ns).then_some(machine_ns.as_str());
        config_text(target, force, ns, &at)
    };
    // An earlier run of this replacement is unfinished: the engine continues it from its journal, whatever the
    // node carries now (its member may already be gone, the machine too).
    let resuming = match &given {
        Some((ns, name)) => has_unfinished(client, &MACHINE_REPLACEMENT, ns, name, &config_for(ns)).await,
        None => false,
    };
    let plan = match machine_ops::inspect(client, &machines_at, &machine_ns, target, force).await {
        Ok(p) => Some(p),
        Err(MachineError::Cluster(c)) => match &c {
            // The machine is gone because an earlier run deleted it: continue that run.
            ClusterError::NotFound { .. } if resuming => None,
            _ => return Err(c.into()),
        },
        Err(refused @ (MachineError::WouldLoseQuorum(_) | MachineError::NotManagedByMcm(_))) => {
            return Err(AnnotateError::Rejected(refused.to_string()).into());
        }
    };
    let (etcd_ns, etcd_name) = match (given, &plan) {
        (Some(g), _) => g,
        (None, Some(p)) => match p.impact.etcds.as_slice() {
            [one] => (one.namespace.clone(), one.etcd.clone()),
            [] => {
                return Err(AnnotateError::Rejected(format!(
                    "no etcd member runs on node {}; use `{} machine delete` to replace it",
                    p.node.clone().unwrap_or_else(|| "(none yet)".into()),
                    druidctl::output::command_name()
                ))
                .into());
            }
            many => {
                let names: Vec<String> = many.iter().map(|e| format!("{}/{}", e.namespace, e.etcd)).collect();
                return Err(druidctl::kube::UsageError(format!(
                    "members of several etcds run on the node ({}); choose one with --etcd",
                    names.join(", ")
                ))
                .into());
            }
        },
        (None, None) => unreachable!("without --etcd the target was inspected"),
    };
    if let Some(p) = &plan
        && !resuming
        && !p.impact.etcds.iter().any(|e| e.namespace == etcd_ns && e.etcd == etcd_name)
    {
        return Err(AnnotateError::Rejected(format!(
            "no member of etcd {etcd_ns}/{etcd_name} runs on node {}",
            p.node.clone().unwrap_or_else(|| "(none yet)".into())
        ))
        .into());
    }
    if let Some(p) = &plan
        && matches!(ctx.printer.format(), OutputFormat::Table | OutputFormat::Wide)
    {
        let mut out = std::io::stdout().lock();
        for l in p.describe() {
            writeln!(out, "{l}").map_err(druidctl::output::OutputError::Io)?;
        }
    }
    // The blast-radius check before anything is created (the deletion step checks it again right before acting).
    // `--plan` works in any state: it shows the plan and gives this as the reason a run would be refused.
    let mut known_refusal = None;
    if let Some(why) = plan.as_ref().filter(|_| !resuming).and_then(|p| p.impact.refusal()) {
        let why = format!(
            "{why}; nothing was changed (the runbook never costs an etcd its quorum: bring the other members back first)"
        );
        if !plan_only {
            return Err(AnnotateError::Rejected(why).into());
        }
        known_refusal = Some(why);
    }
    // RBAC pre-flight of the deletion itself, where it happens (with the engine's, before the first change).
    let extra = plan.as_ref().map(|p| {
        let (on_machines, accesses) = match p.method {
            DeletionMethod::DeleteMachine => (true, vec![Access::new("delete", "machine.sapcloud.io", "machines")]),
            DeletionMethod::ForceDeleteMachine => (
                true,
                vec![
                    Access::new("patch", "machine.sapcloud.io", "machines"),
                    Access::new("delete", "machine.sapcloud.io", "machines"),
                ],
            ),
            DeletionMethod::DeleteNode => (false, vec![Access::new("delete", "", "nodes")]),
            DeletionMethod::TriggerDeletionByMcm => (false, vec![Access::new("patch", "", "nodes")]),
        };
        ExtraAccess {
            client: if on_machines { machines_at.client.clone() } else { client.clone() },
            namespace: machine_ns.clone(),
            accesses,
            cluster: if on_machines { machines_at.separate.clone() } else { None },
        }
    });
    let mut args = format!("-n {machine_ns} ");
    match target {
        MachineTarget::Machine(m) => args.push_str(m),
        MachineTarget::Node(n) => args.push_str(&format!("--node {n}")),
    }
    if force {
        args.push_str(" --force");
    }
    args.push_str(&at.druidctl_flags());
    args.push_str(&format!(" --etcd {etcd_ns}/{etcd_name}"));
    let config = config_for(&etcd_ns);
    Ok((etcd_ns, etcd_name, config, args, known_refusal, extra))
}

/// Runs `runbook …` (its own runtime, so Ctrl-C stops at a safe point instead of dropping the run).
pub fn exec(ctx: &mut Context, args: RunbookArgs) -> anyhow::Result<()> {
    // `Some(force)` for space recovery, which refuses an etcd with room to spare unless forced.
    let mut space_force = None;
    let (rb, target, flags) = match args.command {
        RunbookCommand::List => return list(ctx),
        RunbookCommand::QuorumLossRecovery(a) => {
            let flags = RunFlags { accept_data_loss: a.accept_data_loss, ..a.flags };
            (QUORUM_LOSS_RECOVERY, Target::Etcd { etcd: a.etcd, member: None }, flags)
        }
        RunbookCommand::MemberRestore(a) => {
            (MEMBER_RESTORE, Target::Etcd { etcd: a.etcd, member: Some(a.member) }, a.flags)
        }
        RunbookCommand::CertRenewal(a) => (CERT_RENEWAL, Target::Etcd { etcd: a.etcd, member: None }, a.flags),
        RunbookCommand::MachineReplacement(a) => {
            let target = a.target.target();
            let at = a.machines.cluster();
            (MACHINE_REPLACEMENT, Target::Machine { target, force: a.force, etcd: a.etcd, at }, a.flags)
        }
        RunbookCommand::SpaceRecovery(a) => {
            space_force = Some(a.force);
            (SPACE_RECOVERY, Target::Etcd { etcd: a.etcd, member: None }, a.flags)
        }
        RunbookCommand::Abort(a) => return abort(ctx, a),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async move {
        let cluster = ctx.connect().await?;
        let mut known_refusal = None;
        let mut extra_accesses = Vec::new();
        let (ns, name, config, args) = match &target {
            Target::Etcd { etcd, member } => {
                let (ns, name) = etcd_key(ctx, etcd, &cluster.namespace)?;
                let mut args = format!("-n {ns} {name}");
                if let Some(m) = member {
                    args.push_str(&format!(" {m}"));
                }
                (ns, name, member.as_deref().map(druidctl::tasks::member_restore::config_for), args)
            }
            Target::Machine { target, force, etcd, at } => {
                let (ns, name, config, args, refusal, extra) = resolve_machine(
                    ctx,
                    &cluster.client,
                    &cluster.namespace,
                    target,
                    *force,
                    etcd.as_deref(),
                    at,
                    flags.plan,
                )
                .await?;
                known_refusal = refusal;
                extra_accesses.extend(extra);
                (ns, name, Some(config), args)
            }
        };
        if space_force == Some(false) {
            known_refusal = druidctl::tasks::space_recovery::refusal_without_force(&cluster.client, &ns, &name).await;
        }
        let mut o = RunOptions::new(&ns, &name);
        o.config = config;
        o.yes = flags.yes;
        o.plan_only = flags.plan;
        o.known_refusal = known_refusal;
        o.extra_accesses = extra_accesses;
        o.resume_only = flags.resume;
        o.from_step = flags.from_step.clone();
        o.accept_data_loss = flags.accept_data_loss;
        // Hidden, for tests that kill runs: a shorter executor lease lets the next run take over sooner.
        if let Ok(v) = std::env::var("DRUIDCTL_RUNBOOK_LEASE") {
            o.lease_duration = super::parse_duration(&v).map_err(druidctl::kube::UsageError)?;
        }
        o.resume_command = resume_command(ctx, &rb, &args, flags.yes);
        o.abort_command = abort_command(ctx, &ns, &name);
        let stop = CancellationToken::new();
        let stopper = {
            let stop = stop.clone();
            tokio::spawn(async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    // Feedback for a person at a terminal; scripts get only the one line with the resume command.
                    if std::io::stderr().is_terminal() {
                        eprintln!("\nstopping at the next safe point (Ctrl-C again to quit at once)…");
                    }
                    stop.cancel();
                    if tokio::signal::ctrl_c().await.is_ok() {
                        std::process::exit(130);
                    }
                }
            })
        };
        let op = CliOperator::new(ctx.printer.format(), ctx.printer.color());
        let result = druidctl::runbook::run(&cluster.client, &rb, &o, &op, stop).await;
        stopper.abort();
        op.finish();
        match result {
            Ok(Outcome::Completed(s)) if !s.unverified.is_empty() => {
                Err(NotVerified { task: s.task.clone(), unverified: s.unverified.clone() }.into())
            }
            Ok(Outcome::Planned) | Ok(Outcome::Completed(_)) => Ok(()),
            Ok(Outcome::Interrupted { resume_command, .. }) => {
                Err(Interrupted::Hint(format!("stopped at a safe point; continue with: {resume_command}")).into())
            }
            Err(e) => Err(to_cli_error(e)),
        }
    })
}

/// A runbook completed every step, but part of its result could not be verified (exit code 8).
#[derive(Debug, thiserror::Error)]
#[error("task {task} completed, but not everything was verified: {}", unverified.join("; "))]
pub struct NotVerified {
    /// The task.
    pub task: String,
    /// What could not be verified.
    pub unverified: Vec<String>,
}

/// Maps a runbook error to one the exit-code table knows (rejected 3, forbidden 5, not found 6, …).
pub fn to_cli_error(e: RunbookError) -> anyhow::Error {
    match e {
        RunbookError::Cluster(c) => c.into(),
        RunbookError::Rejected(m) => AnnotateError::Rejected(m).into(),
        RunbookError::Busy { .. } | RunbookError::NotConfirmed { .. } => AnnotateError::Rejected(e.to_string()).into(),
        RunbookError::Forbidden { .. } => ClusterError::Forbidden(e.to_string()).into(),
        RunbookError::Prompt(p) => p.into(),
        other => anyhow::Error::new(other),
    }
}

/// `runbook abort`: the compensating cleanup of an unfinished run whose executor is gone.
fn abort(ctx: &mut Context, a: AbortArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async move {
        let cluster = ctx.connect().await?;
        let (ns, name) = etcd_key(ctx, &a.etcd, &cluster.namespace)?;
        let identity = RunOptions::new(&ns, &name).identity;
        let done =
            druidctl::runbook::engine::abort(&cluster.client, &ns, &name, &identity).await.map_err(to_cli_error)?;
        let text: String = done.iter().map(|l| format!("{l}\n")).collect();
        ctx.printer.text(&text)?;
        Ok(())
    })
}

/// The command that aborts a run on this Etcd with its cleanup.
fn abort_command(ctx: &Context, ns: &str, etcd: &str) -> String {
    let mut s = format!("{} runbook abort", druidctl::output::command_name());
    if let Some(k) = &ctx.global.kubeconfig {
        s.push_str(&format!(" --kubeconfig {}", k.display()));
    }
    if let Some(c) = &ctx.global.context {
        s.push_str(&format!(" --context {c}"));
    }
    s.push_str(&format!(" -n {ns} {etcd}"));
    s
}

fn resume_command(ctx: &Context, rb: &Runbook, args: &str, yes: bool) -> String {
    let mut s = format!("{} runbook {}", druidctl::output::command_name(), rb.name);
    if let Some(k) = &ctx.global.kubeconfig {
        s.push_str(&format!(" --kubeconfig {}", k.display()));
    }
    if let Some(c) = &ctx.global.context {
        s.push_str(&format!(" --context {c}"));
    }
    s.push_str(&format!(" {args}"));
    s.push_str(" --resume");
    if yes {
        s.push_str(" --yes");
    }
    s
}

fn list(ctx: &mut Context) -> anyhow::Result<()> {
    match ctx.printer.format() {
        OutputFormat::Json | OutputFormat::Yaml | OutputFormat::Jsonl => {
            let items: Vec<serde_json::Value> = ALL
                .iter()
                .map(|r| serde_json::json!({"name": r.name, "taskType": r.task_type, "summary": r.summary, "dataLoss": r.data_loss}))
                .collect();
            match ctx.printer.format() {
                OutputFormat::Yaml => ctx.printer.yaml(&items)?,
                OutputFormat::Jsonl => {
                    for i in &items {
                        ctx.printer.jsonl(i)?;
                    }
                }
                _ => ctx.printer.json(&items)?,
            }
        }
        OutputFormat::Name => {
            let text: String = ALL.iter().map(|r| format!("{}\n", r.name)).collect();
            ctx.printer.text(&text)?;
        }
        _ => {
            let mut t = druidctl::output::Table::new(&["RUNBOOK", "TASK TYPE", "WHAT IT DOES"]);
            for r in ALL {
                t.row(vec![
                    druidctl::output::Cell::plain(r.name),
                    druidctl::output::Cell::plain(r.task_type),
                    druidctl::output::Cell::plain(r.summary),
                ]);
            }
            ctx.printer.print(&ListTable(t))?;
        }
    }
    Ok(())
}

struct ListTable(druidctl::output::Table);

impl druidctl::output::Printable for ListTable {
    fn table(&self, _wide: bool) -> druidctl::output::Table {
        self.0.clone()
    }
    fn document(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    fn names(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Human duration: `850ms`, `3.2s`, `1m04s`.
pub fn human_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// The terminal/CI side of a run: plan, progress with elapsed time, confirmations, summary; or JSON lines.
pub struct CliOperator {
    jsonl: bool,
    color: bool,
    bar: Mutex<Option<ProgressBar>>,
    interactive_stderr: bool,
    /// Columns a line may use ([`druidctl::output::line_width`]): plan descriptions wrap to it, progress and
    /// waiting lines are shortened to it (`-o jsonl` has every word).
    width: usize,
    /// The step running (`[i/n] name`), for the progress line.
    current: Mutex<String>,
    /// Indent of human lines (the demo nests the runbook under its own timeline).
    pub indent: &'static str,
    /// The demo's nested run: the plan as one line unless `show_plan`, no summary table (the demo prints its
    /// own), and every line shortened to the width.
    pub compact: bool,
    /// With `compact`, print the whole plan anyway (`demo --show-plan`).
    pub show_plan: bool,
}

impl CliOperator {
    /// An operator printing in `format`.
    pub fn new(format: OutputFormat, color: bool) -> CliOperator {
        CliOperator {
            jsonl: matches!(format, OutputFormat::Jsonl | OutputFormat::Json),
            color,
            bar: Mutex::new(None),
            interactive_stderr: std::io::stderr().is_terminal(),
            width: druidctl::output::line_width(),
            current: Mutex::new(String::new()),
            indent: "",
            compact: false,
            show_plan: false,
        }
    }

    fn line(&self, text: &str) {
        let mut out = format!("{}{text}", self.indent);
        if self.compact {
            out = druidctl::output::fit(&out, self.width);
        }
        out.push('\n');
        match self.bar.lock().expect("bar").as_ref() {
            Some(pb) => pb.suspend(|| {
                let _ = std::io::stdout().write_all(out.as_bytes());
            }),
            None => {
                let _ = std::io::stdout().write_all(out.as_bytes());
            }
        }
        let _ = std::io::stdout().flush();
    }

    /// `text` wrapped to the width after `first` (the first line) and `rest` (the following ones).
    fn wrapped(&self, first: &str, rest: &str, text: &str) {
        let room =
            |prefix: &str| self.width.saturating_sub(self.indent.chars().count() + prefix.chars().count()).max(30);
        for (i, l) in druidctl::output::wrap_hanging(text, room(first), room(rest)).iter().enumerate() {
            self.line(&format!("{}{l}", if i == 0 { first } else { rest }));
        }
    }

    /// A progress line, shortened to the width: on the spinner at a terminal, else printed.
    fn progress(&self, text: &str) {
        match self.bar.lock().expect("bar").as_ref() {
            // The spinner's template adds `⠋ ` before and ` (12s)` after the message.
            Some(pb) => pb.set_message(druidctl::output::fit(text, self.width.saturating_sub(10))),
            None => {
                let room = self.width.saturating_sub(self.indent.chars().count());
                let out = format!("{}{}\n", self.indent, druidctl::output::fit(text, room));
                let _ = std::io::stdout().write_all(out.as_bytes());
                let _ = std::io::stdout().flush();
            }
        }
    }

    /// What a step waits for (or a transient error it retries after), in plain words: `waiting: …` under the
    /// step, or on the spinner after the step's label.
    fn waiting(&self, what: &str) {
        if self.bar.lock().expect("bar").is_some() {
            let label = self.current.lock().expect("current").clone();
            self.progress(&format!("{label} — waiting: {what}"));
        } else {
            self.progress(&format!("  waiting: {what}"));
        }
    }

    fn bold(&self, s: &str) -> String {
        if self.color { format!("\x1b[1m{s}\x1b[0m") } else { s.to_string() }
    }

    fn red(&self, s: &str) -> String {
        if self.color { format!("\x1b[31m{s}\x1b[0m") } else { s.to_string() }
    }

    /// Clears a progress bar left over.
    pub fn finish(&self) {
        if let Some(pb) = self.bar.lock().expect("bar").take() {
            pb.finish_and_clear();
        }
    }

    /// The summary table.
    pub fn summary_lines(s: &Summary) -> Vec<String> {
        let width = s.steps.iter().map(|t| t.name.len() + 1).max().unwrap_or(4).max(4);
        let mut out =
            vec![format!("{:<width$}  {:<22}  {:>7}  {:>7}  {:>7}", "STEP", "RESULT", "TIME", "WAITED", "ACTED")];
        for t in &s.steps {
            let name = if t.destructive { format!("{}!", t.name) } else { t.name.clone() };
            out.push(format!(
                "{:<width$}  {:<22}  {:>7}  {:>7}  {:>7}",
                name,
                t.how,
                human_ms(t.duration_ms),
                human_ms(t.waited_ms),
                human_ms(t.acted_ms),
                width = width
            ));
        }
        out.push(format!(
            "total {} — waiting for etcd/pods/druid {}, confirmations {}",
            human_ms(s.total_ms),
            human_ms(s.waited_ms),
            human_ms(s.prompt_ms),
        ));
        out.push(format!(
            "druidctl's own share {}: acting in the steps {}, deciding around them {}",
            human_ms(s.overhead_ms),
            human_ms(s.acted_ms),
            human_ms(s.decided_ms)
        ));
        out
    }
}

impl Operator for CliOperator {
    fn event(&self, event: &Event) {
        if self.jsonl {
            let mut out = std::io::stdout();
            let _ = serde_json::to_writer(&mut out, event);
            let _ = out.write_all(b"\n");
            let _ = out.flush();
            return;
        }
        match event {
            Event::Plan { runbook, namespace, etcd, resuming, steps, backup, data_loss } => {
                let head = match resuming {
                    Some(t) => format!("Runbook {runbook} for etcd {namespace}/{etcd} — continuing task {t}"),
                    None => format!("Runbook {runbook} for etcd {namespace}/{etcd}"),
                };
                let age = backup.as_ref().map(|b| {
                    let age = b
                        .age_seconds
                        .map(|a| format!("{} old", druidctl::output::age::human(a)))
                        .unwrap_or_else(|| "none found".into());
                    format!("{age}{}", if b.stale { " (STALE)" } else { "" })
                });
                if self.compact && !self.show_plan {
                    // Said once by the demo; the whole plan with `demo --show-plan`.
                    let snap = age.map(|a| format!("; newest full snapshot {a}")).unwrap_or_default();
                    self.line(&format!("{} steps (--show-plan lists them){snap}", steps.len()));
                    return;
                }
                self.line(&self.bold(&head));
                if let Some(age) = age {
                    self.line(&format!("Newest full snapshot: {age}"));
                }
                self.wrapped("What can be lost: ", "  ", data_loss);
                for s in steps {
                    let mark = if s.done {
                        "done "
                    } else if s.destructive {
                        "DESTRUCTIVE "
                    } else {
                        ""
                    };
                    let mark = if s.destructive && !s.done { self.red(mark) } else { mark.to_string() };
                    // Descriptions wrap to the width; the kubectl equivalents stay whole, to be pasted as they are.
                    let first = format!("{:>3}. ", s.index);
                    let text = format!("{mark}{} — {}", s.name, s.description);
                    self.wrapped(&first, "     ", &text);
                    for k in &s.kubectl {
                        self.line(&format!("       $ {k}"));
                    }
                }
            }
            Event::Warning { message } => self.line(&format!("warning: {message}")),
            Event::StepReport { lines, .. } => {
                for l in lines {
                    self.line(&format!("    {l}"));
                }
            }
            Event::Task { name, created } if self.compact => {
                self.line(&format!("{} task {name}", if *created { "created" } else { "continuing" }))
            }
            Event::Task { name, created } => self.line(&format!(
                "{} task {name} (journal: its status and annotations)",
                if *created { "Created" } else { "Continuing" }
            )),
            Event::WaitingForLease { holder, expires_in_ms } => self.progress(&format!(
                "waiting: the previous executor {holder} still holds the run (its lease expires in {})",
                human_ms(*expires_in_ms)
            )),
            Event::StepStarted { index, total, name, destructive, .. } => {
                let label = format!("[{index}/{total}] {name}{}", if *destructive { " (destructive)" } else { "" });
                *self.current.lock().expect("current") = label.clone();
                if self.interactive_stderr && !self.jsonl {
                    let pb = ProgressBar::new_spinner();
                    pb.set_style(
                        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    pb.set_message(druidctl::output::fit(&label, self.width.saturating_sub(10)));
                    pb.enable_steady_tick(Duration::from_millis(120));
                    *self.bar.lock().expect("bar") = Some(pb);
                } else {
                    self.line(&format!("→ {label}"));
                }
            }
            Event::StepWaiting { reason, .. } => self.waiting(&druidctl::runbook::plain::plain_reason(reason)),
            Event::StepRetry { error, retry_in_ms, .. } => self.waiting(&format!(
                "{} (trying again in {})",
                druidctl::runbook::plain::plain_reason(error),
                human_ms(*retry_in_ms)
            )),
            Event::StepFinished { name, how, duration_ms, .. } => {
                self.finish();
                self.line(&format!("✓ {name}: {how} in {}", human_ms(*duration_ms)));
            }
            Event::StepFailed { name, error } => {
                self.finish();
                self.line(&format!("✗ {name}: {error}"));
            }
            Event::Interrupted { next_step, .. } => {
                // The command to continue is said once, on stderr, by the caller.
                self.finish();
                self.line(&format!("stopped before {next_step}"));
            }
            Event::Verdict { reason, .. } => self.line(reason),
            Event::Finished { .. } if self.compact => self.finish(),
            Event::Finished { summary } => {
                self.finish();
                for l in Self::summary_lines(summary) {
                    self.line(&l);
                }
            }
        }
    }

    fn can_prompt(&self) -> bool {
        std::io::stdin().is_terminal()
    }

    fn confirm(&self, question: &str, expected: Option<&str>) -> Result<(), PromptError> {
        let ask = || match expected {
            Some(e) => confirm_by_typing(question, e, false),
            None => confirm(question, false),
        };
        match self.bar.lock().expect("bar").as_ref() {
            Some(pb) => pb.suspend(ask),
            None => ask(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use druidctl::runbook::engine::StepTiming;

    #[test]
    fn the_summary_shows_each_steps_waited_and_acted_time_and_fits_80_columns() {
        let step = |name: &str, how: &str, waited_ms, acted_ms| StepTiming {
            name: name.into(),
            how: how.into(),
            duration_ms: waited_ms + acted_ms,
            waited_ms,
            acted_ms,
            destructive: true,
        };
        let s = Summary {
            task: "t".into(),
            steps: vec![
                step("DeletePersistentVolumeClaims", "done in an earlier run", 0, 0),
                step("VerifyClusterFormed", "done", 754_000, 35),
            ],
            total_ms: 760_000,
            waited_ms: 755_000,
            prompt_ms: 4_700,
            overhead_ms: 300,
            acted_ms: 35,
            decided_ms: 265,
            unverified: vec![],
        };
        let lines = CliOperator::summary_lines(&s);
        for l in &lines {
            assert!(l.chars().count() <= 80, "{} columns: {l}", l.chars().count());
        }
        assert!(lines[0].ends_with("WAITED    ACTED"), "{}", lines[0]);
        assert!(lines[2].contains("12m34s") && lines[2].ends_with("35ms"), "{}", lines[2]);
        assert_eq!(lines[4], "druidctl's own share 300ms: acting in the steps 35ms, deciding around them 265ms");
    }
}
