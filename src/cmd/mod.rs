//! The command line: clap definitions (their doc comments are the help text), global flags, and dispatch.
//! Each command file turns arguments into a library call and prints the result; nothing here decides.

pub mod alarm;
pub mod cert;
pub mod check;
pub mod compact;
pub mod completion;
pub mod copy_backups;
pub mod demo;
pub mod exit;
pub mod generate;
pub mod install;
pub mod list_resources;
pub mod logs;
pub mod machine;
pub mod maintenance;
pub mod move_leader;
pub mod playground;
pub mod playground_state;
pub mod protection;
pub mod reconcile;
pub mod renew;
pub mod report;
pub mod resume_reconcile;
pub mod runbook;
pub mod serve;
pub mod snapshot;
pub mod status;
pub mod suspend_reconcile;
pub mod task;
pub mod upstream;
pub mod version;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};
use clap_complete::engine::ArgValueCompleter;
use druidctl::kube::target::{TargetArgs, Targets, WhenUnnamed, resolve};
use druidctl::kube::{AccessOptions, Cluster, connect};
use druidctl::output::{ColorChoice, OutputFormat, Printer};

/// Operations toolkit for etcd clusters managed by etcd-druid.
///
/// Health at a glance, safe one-shot actions (reconcile, snapshot, compaction, maintenance, certificate renewal,
/// machine deletion), guided runbooks (quorum-loss recovery, member restore, cert renewal, machine replacement)
/// and a playground to rehearse on. Also works as a kubectl plugin: `kubectl druid …`.
#[derive(Debug, Parser)]
#[command(name = "druidctl", version, propagate_version = true, max_term_width = 110)]
pub struct Cli {
    /// Flags every command accepts.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The help section of the flags every command accepts.
pub const GLOBAL: &str = "Global options";

/// Flags every command accepts.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, a list, else ~/.kube/config).
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "NAME", add = ArgValueCompleter::new(completion::contexts))]
    pub context: Option<String>,
    /// Namespace (default: the context's namespace, else "default").
    #[arg(short = 'n', long, global = true, help_heading = GLOBAL, value_name = "NAMESPACE", value_parser = parse_namespace, add = ArgValueCompleter::new(completion::namespaces))]
    pub namespace: Option<String>,
    /// Act on every namespace.
    #[arg(short = 'A', long, global = true, help_heading = GLOBAL)]
    pub all_namespaces: bool,
    /// Label selector, e.g. -l app=etcd-statefulset,role=main.
    #[arg(short = 'l', long, global = true, help_heading = GLOBAL, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, global = true, help_heading = GLOBAL, value_enum, default_value_t, value_name = "FORMAT")]
    pub output: OutputFormat,
    /// When to color output (NO_COLOR is honoured in auto mode).
    #[arg(long, global = true, help_heading = GLOBAL, value_enum, default_value_t, value_name = "WHEN")]
    pub color: ColorChoice,
    /// More logging on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short = 'v', long = "verbose", global = true, help_heading = GLOBAL, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Time limit for each API request, e.g. 30s or 1m ("0": none).
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "DURATION", default_value = "0", value_parser = parse_timeout)]
    pub request_timeout: RequestTimeout,
    /// Accepted for etcd-druid's druidctl (`--no-banner`); druidctl prints no banner.
    #[arg(long, global = true, hide = true)]
    pub no_banner: bool,
}

/// A parsed `--request-timeout`.
#[derive(Debug, Clone, Copy)]
pub struct RequestTimeout(pub Option<Duration>);

fn parse_timeout(s: &str) -> Result<RequestTimeout, String> {
    druidctl::kube::config::parse_request_timeout(s).map(RequestTimeout)
}

/// A duration flag parser accepting `min_ms..=max_secs` (a usage error otherwise, at parse time).
pub fn duration_in(
    min_ms: u64,
    max_secs: u64,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        druidctl::kube::config::parse_duration_in(s, Duration::from_millis(min_ms), Duration::from_secs(max_secs))
    }
}

/// A non-empty string flag (after trimming), e.g. an image reference.
pub fn parse_non_empty(s: &str) -> Result<String, String> {
    if s.trim().is_empty() { Err("must not be empty".into()) } else { Ok(s.to_string()) }
}

/// One day, one week, one year in seconds (ranges of duration flags).
pub const DAY: u64 = 86_400;
/// One week in seconds.
pub const WEEK: u64 = 7 * DAY;

/// Parses a duration flag such as `--timeout 5m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    druidctl::kube::config::parse_duration(s)
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Health of Etcds: quorum, members, leases, pods, PVCs, conditions, backups, tasks; exit code for CI.
    Status(status::StatusArgs),
    /// Every resource etcd-druid manages for an Etcd, grouped by kind.
    ListResources(list_resources::ListResourcesArgs),
    /// Whether every member holds the same keyspace (etcd's HashKV at one common revision); exit 4 if not.
    Check(check::CheckArgs),
    /// etcd's alarms (NOSPACE, CORRUPT): list them, or disarm them once their cause is gone.
    Alarm(alarm::AlarmArgs),
    /// Hand etcd's leadership to another ready, voting member.
    MoveLeader(move_leader::MoveLeaderArgs),
    /// The logs of an Etcd's members (etcd and backup-restore) in one stream, ordered by time; -f follows.
    Logs(logs::LogsArgs),
    /// One redacted .tar.gz about an Etcd for an incident: objects, events, status, logs, and an index.md.
    Report(report::ReportArgs),
    /// Ask etcd-druid to reconcile an Etcd now; --wait until it did.
    Reconcile(reconcile::ReconcileArgs),
    /// Stop etcd-druid from reconciling an Etcd's spec (status is still updated).
    SuspendReconcile(suspend_reconcile::SuspendReconcileArgs),
    /// Let etcd-druid reconcile an Etcd's spec again.
    ResumeReconcile(resume_reconcile::ResumeReconcileArgs),
    /// Turn the webhook that protects an Etcd's managed resources on or off.
    Protection(protection::ProtectionArgs),
    /// Install the EtcdOperatorTask CRD and RBAC (and optionally `serve`) with server-side apply.
    Install(install::InstallArgs),
    /// EtcdOperatorTasks: create (after checking preconditions), list, get, describe, watch, delete.
    Task(task::TaskArgs),
    /// Take a full or delta snapshot now (an OnDemandSnapshotTask) and wait for it; --no-wait returns at once.
    Snapshot(snapshot::SnapshotArgs),
    /// Compact the backups with the compaction Job now (an OnDemandSnapshotCompactionTask) and wait for it.
    Compact(compact::CompactArgs),
    /// etcd compaction and/or defragmentation now (an OnDemandMaintenanceTask), and wait for it.
    Maintenance(maintenance::MaintenanceArgs),
    /// Copy backups between object stores (a CopyBackupsTask) and wait for it.
    CopyBackups(copy_backups::CopyBackupsArgs),
    /// Run the EtcdOperatorTask controller (leader election, /metrics, /healthz, /readyz).
    Serve(serve::ServeArgs),
    /// Guided runbooks for the bad days: quorum-loss-recovery, member-restore, cert-renewal, machine-replacement
    /// (--plan, --yes, --resume).
    Runbook(runbook::RunbookArgs),
    /// A local landscape to rehearse on: API server and Etcds with real etcd processes.
    Playground(playground::PlaygroundArgs),
    /// A whole rehearsal end to end: destroy a majority of an etcd cluster and recover it from its backup.
    Demo(demo::DemoArgs),
    /// Mark cert-manager Certificates for re-issuance, like `cmctl renew`; --wait for the new revision.
    Renew(renew::RenewArgs),
    /// cert-manager Certificates: status with the time of the next automatic retry.
    Cert(cert::CertArgs),
    /// Machines (machine-controller-manager): delete one after checking what runs on its node.
    Machine(machine::MachineArgs),
    /// Shell completion (bash, zsh, fish, powershell), including Etcd names from the cluster.
    Completion(completion::CompletionArgs),
    /// Print the version.
    Version(version::VersionArgs),
    /// etcd-druid's druidctl spelling: `reconciliation trigger|suspend|resume` (reconcile, suspend-reconcile,
    /// resume-reconcile).
    #[command(hide = true)]
    Reconciliation(upstream::ReconciliationArgs),
    /// etcd-druid's druidctl spelling: `component-protection add|remove` (protection enable|disable).
    #[command(hide = true)]
    ComponentProtection(upstream::ComponentProtectionArgs),
    /// Regenerate completions/, man/, deploy/ and docs/exit-codes.md (for maintainers).
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
}

/// Positional Etcd targets (`NAME` or `NAMESPACE/NAME`).
#[derive(Debug, Clone, Args)]
pub struct EtcdTargets {
    /// Etcd names: NAME or NAMESPACE/NAME.
    #[arg(value_name = "ETCD", add = ArgValueCompleter::new(completion::etcd_names))]
    pub etcds: Vec<String>,
}

/// The clap command, named as invoked (`kubectl druid` when run as the plugin).
pub fn command() -> clap::Command {
    let cmd = tailor(Cli::command());
    if druidctl::output::command_name() == "kubectl druid" { cmd.bin_name("kubectl druid") } else { cmd }
}

/// Global flags a command (and its subcommands) ignores, by command path: hidden from its help, man page and
/// completion. clap propagates a global flag only to subcommands that do not define it already, so a hidden copy
/// defined on the command replaces it there.
const IGNORED_GLOBALS: &[(&str, &[&str])] = &[
    ("demo", &["kubeconfig", "context", "namespace", "all_namespaces", "selector", "output", "request_timeout"]),
    ("runbook", &["all_namespaces", "selector"]),
    ("playground", &["namespace", "all_namespaces", "selector", "output"]),
    ("completion", &["all_namespaces", "selector", "output"]),
    ("version", &["kubeconfig", "context", "namespace", "all_namespaces", "selector", "request_timeout"]),
    ("install", &["all_namespaces", "selector"]),
    ("serve", &["selector", "output"]),
    ("check", &["all_namespaces", "selector"]),
    ("alarm", &["all_namespaces", "selector"]),
    ("move-leader", &["all_namespaces", "selector"]),
];

/// Hides the global flags each command ignores ([`IGNORED_GLOBALS`]).
pub fn tailor(mut root: clap::Command) -> clap::Command {
    let globals: Vec<clap::Arg> = root.get_arguments().filter(|a| a.is_global_set()).cloned().collect();
    for (name, ignored) in IGNORED_GLOBALS {
        root = root.mut_subcommand(*name, |mut sub| {
            for arg in globals.iter().filter(|a| ignored.contains(&a.get_id().as_str())) {
                sub = sub.arg(arg.clone().hide(true));
            }
            sub
        });
    }
    root
}

/// Interrupted by Ctrl-C (exit code 130).
#[derive(Debug, thiserror::Error)]
pub enum Interrupted {
    /// Said as `error: interrupted`.
    #[error("interrupted")]
    Plain,
    /// What to do next, printed once on stderr without `error:`.
    #[error("{0}")]
    Hint(String),
    /// Nothing said: Ctrl-C is how a watch ends (`status --watch`, `task watch`), as with `kubectl get -w`.
    #[error("interrupted")]
    Silent,
}

/// Parses an Etcd reference (`NAME` or `NAMESPACE/NAME`) as Kubernetes names, before any request.
pub fn parse_etcd_ref(s: &str) -> Result<String, String> {
    use druidctl::kube::target::{validate_dns_label, validate_dns_subdomain};
    match s.split_once('/') {
        Some((ns, name)) => {
            validate_dns_label(ns).map_err(|e| format!("invalid namespace {ns:?}: {e}"))?;
            validate_dns_subdomain(name).map_err(|e| format!("invalid name {name:?}: {e}"))?;
        }
        None => validate_dns_subdomain(s).map_err(|e| format!("invalid name: {e}"))?,
    }
    Ok(s.to_string())
}

/// Parses a Kubernetes object name (DNS-1123 subdomain), before any request.
pub fn parse_object_name(s: &str) -> Result<String, String> {
    druidctl::kube::target::validate_dns_subdomain(s).map_err(|e| format!("invalid name: {e}"))?;
    Ok(s.to_string())
}

/// Parses a namespace (DNS-1123 label), before any request.
pub fn parse_namespace(s: &str) -> Result<String, String> {
    druidctl::kube::target::validate_dns_label(s).map_err(|e| format!("invalid namespace: {e}"))?;
    Ok(s.to_string())
}

/// What a command needs besides its own arguments.
pub struct Context {
    /// Global flags.
    pub global: GlobalArgs,
    /// The printer.
    pub printer: Printer,
}

impl Context {
    /// Builds the context from global flags (resolves the color policy).
    pub fn new(global: GlobalArgs) -> Context {
        use std::io::IsTerminal;
        let no_color = std::env::var("NO_COLOR").ok();
        let color = druidctl::output::use_color(global.color, no_color.as_deref(), std::io::stdout().is_terminal());
        let printer = Printer::stdout(global.output, color);
        Context { global, printer }
    }

    /// Connects to the cluster as kubectl would.
    pub async fn connect(&self) -> Result<Cluster, druidctl::kube::ClusterError> {
        connect(&self.access()).await
    }

    /// Connects for reads that go out concurrently: over one HTTP/2 connection where the server offers it
    /// ([`druidctl::kube::connect_for_reads`]).
    pub async fn connect_for_reads(&self) -> Result<Cluster, druidctl::kube::ClusterError> {
        druidctl::kube::connect_for_reads(&self.access()).await
    }

    fn access(&self) -> AccessOptions {
        AccessOptions {
            kubeconfig: self.global.kubeconfig.clone(),
            context: self.global.context.clone(),
            namespace: self.global.namespace.clone(),
            request_timeout: self.global.request_timeout.0,
            prefer_in_cluster: false,
            slow_answer: Some(slow_answer_notice()),
        }
    }

    /// Checks target flags that need no cluster (so bad input fails before connecting).
    pub fn check_targets(&self, names: &[String], when: WhenUnnamed) -> Result<(), druidctl::kube::UsageError> {
        resolve(&self.target_args(names), "default", when, "etcd").map(|_| ())
    }

    /// Resolves targets against the context's namespace.
    pub fn targets(
        &self,
        cluster: &Cluster,
        names: &[String],
        when: WhenUnnamed,
    ) -> Result<Targets, druidctl::kube::UsageError> {
        resolve(&self.target_args(names), &cluster.namespace, when, "etcd")
    }

    /// The namespace of `-n`, else `context_ns` (the context's namespace).
    pub fn namespace_or(&self, context_ns: &str) -> String {
        self.global.namespace.clone().unwrap_or_else(|| context_ns.to_string())
    }

    /// The target flags with these names.
    pub fn target_args(&self, names: &[String]) -> TargetArgs {
        TargetArgs {
            names: names.to_vec(),
            // `-n` only counts as explicit when given; the context namespace is the default.
            namespace: self.global.namespace.clone(),
            all_namespaces: self.global.all_namespaces,
            selector: self.global.selector.clone(),
        }
    }
}

/// Runs the parsed command.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let mut ctx = Context::new(cli.global);
    match cli.command {
        Command::Version(a) => version::exec(&mut ctx, a),
        Command::Completion(a) => completion::exec(&mut ctx, a),
        Command::Generate(a) => generate::exec(&mut ctx, a),
        Command::Install(a) if a.print => install::print(&mut ctx, a),
        Command::Serve(a) => serve::run(&mut ctx, a),
        Command::Runbook(a) => runbook::exec(&mut ctx, a),
        Command::Playground(a) => playground::exec(&mut ctx, a),
        Command::Demo(a) => demo::exec(&mut ctx, a),
        other => {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            // Ctrl-C is how a watch ends: nothing to say then.
            let on_ctrl_c = match &other {
                Command::Status(a) if a.watch => Interrupted::Silent,
                Command::Logs(a) if a.follow => Interrupted::Silent,
                Command::Task(task::TaskArgs { action: task::TaskAction::Watch(_) }) => Interrupted::Silent,
                _ => Interrupted::Plain,
            };
            rt.block_on(async move {
                // Listening before any work starts, so that Ctrl-C ends the command as documented at any moment
                // (`ctrl_c()` would only install its handler when first polled, after the command's first step).
                let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
                let work = async {
                    match other {
                        Command::Status(a) => status::exec(&mut ctx, a).await,
                        Command::ListResources(a) => list_resources::exec(&mut ctx, a).await,
                        Command::Check(a) => check::exec(&mut ctx, a).await,
                        Command::Alarm(a) => alarm::exec(&mut ctx, a).await,
                        Command::MoveLeader(a) => move_leader::exec(&mut ctx, a).await,
                        Command::Logs(a) => logs::exec(&mut ctx, a).await,
                        Command::Report(a) => report::exec(&mut ctx, a).await,
                        Command::Reconcile(a) => reconcile::exec(&mut ctx, a).await,
                        Command::SuspendReconcile(a) => suspend_reconcile::exec(&mut ctx, a).await,
                        Command::ResumeReconcile(a) => resume_reconcile::exec(&mut ctx, a).await,
                        Command::Protection(a) => protection::exec(&mut ctx, a).await,
                        Command::Install(a) => install::exec(&mut ctx, a).await,
                        Command::Task(a) => task::exec(&mut ctx, a).await,
                        Command::Snapshot(a) => snapshot::exec(&mut ctx, a).await,
                        Command::Compact(a) => compact::exec(&mut ctx, a).await,
                        Command::Maintenance(a) => maintenance::exec(&mut ctx, a).await,
                        Command::CopyBackups(a) => copy_backups::exec(&mut ctx, a).await,
                        Command::Renew(a) => renew::exec(&mut ctx, a).await,
                        Command::Cert(a) => cert::exec(&mut ctx, a).await,
                        Command::Machine(a) => machine::exec(&mut ctx, a).await,
                        Command::Reconciliation(a) => upstream::reconciliation(&mut ctx, a).await,
                        Command::ComponentProtection(a) => upstream::component_protection(&mut ctx, a).await,
                        Command::Version(_)
                        | Command::Completion(_)
                        | Command::Generate(_)
                        | Command::Serve(_)
                        | Command::Runbook(_)
                        | Command::Playground(_)
                        | Command::Demo(_) => unreachable!("handled above"),
                    }
                };
                tokio::select! {
                    r = work => r,
                    _ = sigint.recv() => Err(on_ctrl_c.into()),
                }
            })
        }
    }
}

/// One result of an action command: a sentence for people, a document item otherwise.
pub trait ActionResult: serde::Serialize {
    /// The sentence for people.
    fn message(&self) -> &str;
    /// `kind.group/name`, for `-o name`.
    fn resource_name(&self) -> String;
}

impl ActionResult for druidctl::kube::annotate::Outcome {
    fn message(&self) -> &str {
        &self.message
    }
    fn resource_name(&self) -> String {
        format!("etcd.druid.gardener.cloud/{}", self.etcd.name)
    }
}

/// Results of an action command, printable in every format as a list document of `kind`.
struct ActionResults<T> {
    kind: &'static str,
    items: Vec<T>,
}

impl<T: ActionResult> druidctl::output::Printable for ActionResults<T> {
    fn table(&self, _wide: bool) -> druidctl::output::Table {
        // People get one sentence per result; the header-less table keeps the printer in charge.
        let mut t = druidctl::output::Table::new(&["result"]);
        for o in &self.items {
            t.row(vec![druidctl::output::Cell::plain(o.message())]);
        }
        t
    }
    fn document(&self) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": druidctl::output::status::STATUS_API_VERSION,
            "kind": self.kind,
            "items": self.items,
        })
    }
    fn names(&self) -> Vec<String> {
        self.items.iter().map(ActionResult::resource_name).collect()
    }
}

/// Prints action results: plain sentences for tables, a list document of `kind` otherwise.
pub fn print_results<T: ActionResult>(ctx: &mut Context, kind: &'static str, items: Vec<T>) -> anyhow::Result<()> {
    use druidctl::output::OutputFormat;
    match ctx.printer.format() {
        OutputFormat::Table | OutputFormat::Wide => {
            let text: String = items.iter().map(|o| format!("{}\n", o.message())).collect();
            ctx.printer.text(&text)?;
        }
        _ => ctx.printer.print(&ActionResults { kind, items })?,
    }
    Ok(())
}

/// Prints the outcomes of an annotation command.
pub fn print_outcomes(ctx: &mut Context, outcomes: Vec<druidctl::kube::annotate::Outcome>) -> anyhow::Result<()> {
    print_results(ctx, "ActionResultList", outcomes)
}

/// "Nothing matched" for targets of `kind` given by `-l`, `-n` or `-A` (`context_ns`: the context's namespace).
pub fn none_found(ctx: &Context, kind: &str, context_ns: &str) -> druidctl::kube::ClusterError {
    druidctl::kube::ClusterError::NotFound {
        kind: kind.into(),
        name: ctx.global.selector.clone().map(|s| format!("matching -l {s}")).unwrap_or_default(),
        namespace: if ctx.global.all_namespaces { "(all)".into() } else { ctx.namespace_or(context_ns) },
        hint: None,
    }
}

/// Resolves the targets of a write command to Etcds (a name or `-l` is required).
pub async fn write_targets(ctx: &Context, names: &[String]) -> anyhow::Result<(Cluster, Vec<druidctl::api::Etcd>)> {
    ctx.check_targets(names, WhenUnnamed::RequireNameOrSelector)?;
    let cluster = ctx.connect().await?;
    let targets = ctx.targets(&cluster, names, WhenUnnamed::RequireNameOrSelector)?;
    let etcds = druidctl::kube::etcds::resolve(&cluster.client, &targets).await?;
    if etcds.is_empty() {
        return Err(none_found(ctx, "etcd", &cluster.namespace).into());
    }
    Ok((cluster, etcds))
}

/// Says on stderr, once per process, which server has not answered a request yet, and how long it is waited for.
fn slow_answer_notice() -> druidctl::kube::slow_answer::SlowAnswerNotice {
    use druidctl::kube::slow_answer::{NOTICE_AFTER, SlowAnswerNotice};
    static NOTICE: std::sync::OnceLock<SlowAnswerNotice> = std::sync::OnceLock::new();
    NOTICE
        .get_or_init(|| {
            SlowAnswerNotice::new(
                NOTICE_AFTER,
                std::sync::Arc::new(|server: &str, after: std::time::Duration| {
                    let limit = match druidctl::kube::in_force::in_force() {
                        Some(f) if f.is_default => {
                            format!("up to {}s (the default; --request-timeout sets it)", f.request_timeout.as_secs())
                        }
                        Some(f) => format!("up to {}s (--request-timeout)", f.request_timeout.as_secs()),
                        None => "until the request timeout".to_string(),
                    };
                    eprintln!("note: {server} has not answered after {}s; waiting {limit}", after.as_secs());
                }),
            )
        })
        .clone()
}
