//! `task create|list|get|describe|watch|delete`: EtcdOperatorTasks (DEP-05), and the printing of a task run
//! (`druidctl::taskrun`) that the shortcuts (`snapshot`, `compact`, `maintenance`, `copy-backups`) share.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use druidctl::api::EtcdOperatorTask;
use druidctl::kube::annotate::AnnotateError;
use druidctl::kube::error::Subject;
use druidctl::kube::{Cluster, ClusterError, UsageError};
use druidctl::output::{Cell, OutputFormat, Printable, Style, Table, age};
use druidctl::reconciler::{Reconciler, ReconcilerOptions};
use druidctl::taskrun::{RunEvent, RunOptions, RunOutcome};
use druidctl::tasks::Registry;
use druidctl::tasks::ops::{self, TaskOpsError, TaskRequest, Transition};
use kube::api::{Api, DeleteParams, ListParams};

use super::Context;

/// Arguments of `task`.
#[derive(Debug, Args)]
pub struct TaskArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: TaskAction,
}

/// `task` subcommands.
#[derive(Debug, Subcommand)]
pub enum TaskAction {
    /// Create an EtcdOperatorTask after checking its preconditions; --wait follows it to the end.
    Create(CreateArgs),
    /// List tasks (-A for every namespace).
    List(ListArgs),
    /// Show tasks by name (-o yaml for the whole resource).
    Get(GetArgs),
    /// Show one task in detail: config, state, steps, errors, events.
    Describe(DescribeArgs),
    /// Stream state and step transitions (-o jsonl for scripts); ends when a named task finishes.
    Watch(WatchArgs),
    /// Delete tasks (their finalizer deletes what they created).
    Delete(DeleteArgs),
}

/// How a task is run: shared by `task create` and the shortcuts.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Delete the task this many seconds after it finished (default: 3600).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(i32).range(0..=31_536_000))]
    pub ttl: Option<i32>,
    /// Follow the task until it finished; the exit code says how (0 succeeded, 1 failed, 3 rejected, 7 timeout).
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits (1s to 7 days).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = super::duration_in(1000, super::WEEK))]
    pub timeout: Duration,
    /// Create the task even if its preconditions do not hold now (the executor checks them again).
    #[arg(long)]
    pub force: bool,
    /// Execute the task in this process instead of waiting for `druidctl serve` (implies --wait).
    #[arg(long)]
    pub local: bool,
}

/// Arguments of `task create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Task type, e.g. OnDemandSnapshotTask, OnDemandSnapshotCompactionTask, OnDemandMaintenanceTask, CopyBackupsTask.
    #[arg(value_name = "TYPE")]
    pub type_: String,
    /// The Etcd: NAME or NAMESPACE/NAME.
    #[arg(long, value_name = "ETCD", value_parser = super::parse_etcd_ref, add = clap_complete::engine::ArgValueCompleter::new(super::completion::etcd_names))]
    pub etcd: String,
    /// The task config (YAML) from FILE, or `-` for stdin.
    #[arg(long, value_name = "FILE|-")]
    pub config: Option<PathBuf>,
    /// How to run it.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Arguments of `task list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only tasks of this Etcd.
    #[arg(long, value_name = "ETCD", value_parser = super::parse_etcd_ref, add = clap_complete::engine::ArgValueCompleter::new(super::completion::etcd_names))]
    pub etcd: Option<String>,
}

/// Arguments of `task get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// Task names.
    #[arg(value_name = "TASK", required = true, value_parser = super::parse_object_name, add = clap_complete::engine::ArgValueCompleter::new(super::completion::all_tasks))]
    pub names: Vec<String>,
}

/// Arguments of `task describe`.
#[derive(Debug, Args)]
pub struct DescribeArgs {
    /// Task name.
    #[arg(value_name = "TASK", value_parser = super::parse_object_name, add = clap_complete::engine::ArgValueCompleter::new(super::completion::operator_tasks))]
    pub name: String,
}

/// Arguments of `task watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Task name (default: every task in the namespace, with -A in every namespace, until Ctrl-C).
    #[arg(value_name = "TASK", value_parser = super::parse_object_name, add = clap_complete::engine::ArgValueCompleter::new(super::completion::operator_tasks))]
    pub name: Option<String>,
    /// How long to watch a named task (1s to 7 days).
    #[arg(long, value_name = "DURATION", value_parser = super::duration_in(1000, super::WEEK))]
    pub timeout: Option<Duration>,
}

/// Arguments of `task delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// Task names.
    #[arg(value_name = "TASK", required = true, value_parser = super::parse_object_name, add = clap_complete::engine::ArgValueCompleter::new(super::completion::operator_tasks))]
    pub names: Vec<String>,
}

/// Runs `task`.
pub async fn exec(ctx: &mut Context, args: TaskArgs) -> anyhow::Result<()> {
    match args.action {
        TaskAction::Create(a) => {
            let config = read_config(a.config.as_deref())?;
            run_task(ctx, &a.type_, &a.etcd, config, &a.run).await
        }
        TaskAction::List(a) => list(ctx, a).await,
        TaskAction::Get(a) => get(ctx, a).await,
        TaskAction::Describe(a) => describe(ctx, a).await,
        TaskAction::Watch(a) => watch(ctx, a).await,
        TaskAction::Delete(a) => delete(ctx, a).await,
    }
}

fn read_config(path: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    let Some(path) = path else { return Ok(None) };
    let mut text = String::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| UsageError(format!("cannot read the config from stdin: {e}")))?;
    } else {
        text = std::fs::read_to_string(path)
            .map_err(|e| UsageError(format!("cannot read config file {}: {e}", path.display())))?;
    }
    Ok(Some(text))
}

/// `NAME` or `NAMESPACE/NAME` of an Etcd, against `-n` and the context namespace.
pub(super) fn etcd_target(ctx: &Context, cluster_ns: &str, etcd: &str) -> Result<(String, String), UsageError> {
    druidctl::taskrun::etcd_target(ctx.global.namespace.as_deref(), cluster_ns, etcd)
}

fn namespace(ctx: &Context, cluster: &Cluster) -> String {
    ctx.namespace_or(&cluster.namespace)
}

/// Turns a task outcome into the error the exit-code table classifies: rejected/refused → 3, timeout → 7,
/// invalid config → 2, failed → 1.
pub(super) fn classified(e: TaskOpsError) -> anyhow::Error {
    match e {
        TaskOpsError::Cluster(c) => c.into(),
        TaskOpsError::Invalid(i) => UsageError(i.to_string()).into(),
        e @ (TaskOpsError::Refused(_)
        | TaskOpsError::Rejected { .. }
        | TaskOpsError::NoExecutor { .. }
        | TaskOpsError::Blocked(_)) => AnnotateError::Rejected(e.to_string()).into(),
        TaskOpsError::Timeout { task, state, step, after } => ClusterError::Timeout {
            after,
            what: format!(
                "waiting for task {task} (still {state}{})",
                step.map(|s| format!(" at {s}")).unwrap_or_default()
            ),
        }
        .into(),
        e @ TaskOpsError::Failed { .. } => anyhow::anyhow!(e),
    }
}

/// Creates a task of `type_` for `etcd` and runs it as `run` says (shared by `task create` and shortcuts).
pub async fn run_task(
    ctx: &mut Context,
    type_: &str,
    etcd: &str,
    config: Option<String>,
    run: &RunArgs,
) -> anyhow::Result<()> {
    let registry = Arc::new(Registry::standard());
    // Bad type or config is a usage error, found before connecting.
    registry.plan(type_, config.as_deref()).map_err(|e| UsageError(e.to_string()))?;
    let cluster = ctx.connect().await?;
    let (ns, name) = etcd_target(ctx, &cluster.namespace, etcd)?;
    let request =
        TaskRequest { namespace: ns.clone(), etcd: name, type_: type_.to_string(), config, ttl_seconds: run.ttl };
    let o = RunOptions {
        request,
        wait: run.wait,
        timeout: run.timeout,
        force: run.force,
        local: run.local,
        identity: druidctl::reconciler::lease::process_identity("druidctl-local"),
    };
    let format = ctx.printer.format();
    let mut printer_err = None;
    let outcome = druidctl::taskrun::run(&cluster.client, registry, &o, &mut |event| match event {
        RunEvent::Note(note) => eprintln!("{note}"),
        RunEvent::Following(task) => {
            if !matches!(format, OutputFormat::Jsonl) {
                eprintln!(
                    "etcdoperatortask.druid.gardener.cloud/{} created",
                    task.metadata.name.as_deref().unwrap_or_default()
                );
            }
        }
        RunEvent::Transition(t) => {
            if let Err(e) = print_transition(ctx, format, t) {
                printer_err.get_or_insert(e);
            }
        }
    })
    .await;
    if let Some(e) = printer_err {
        return Err(e);
    }
    let task = match outcome {
        Ok(RunOutcome::Created(task)) => return print_created(ctx, &task),
        Ok(RunOutcome::Succeeded(task)) => task,
        // Nothing executes a --local task once this process is gone: say who continues it and how to remove it.
        Err(TaskOpsError::Timeout { task, state, step, after }) if run.local => {
            return Err(ClusterError::Timeout {
                after,
                what: format!(
                    "waiting for task {task} (still {state}{}); this process no longer executes it: the next --local task of etcd {ns}/{} or `{cmd} serve -n {ns}` takes it over, `{cmd} task delete -n {ns} {task}` removes it",
                    step.map(|s| format!(" at {s}")).unwrap_or_default(),
                    o.request.etcd,
                    cmd = druidctl::output::command_name(),
                ),
            }
            .into());
        }
        Err(e) => return Err(classified(e)),
    };
    let task_name = task.metadata.name.clone().unwrap_or_default();
    match format {
        OutputFormat::Table | OutputFormat::Wide => ctx.printer.text(&format!("task {task_name} Succeeded\n"))?,
        OutputFormat::Jsonl => {}
        _ => ctx.printer.print(&TaskList(vec![task]))?,
    }
    Ok(())
}

fn print_transition(ctx: &mut Context, format: OutputFormat, t: &Transition) -> anyhow::Result<()> {
    match format {
        OutputFormat::Jsonl => ctx.printer.jsonl(t)?,
        _ => {
            let step = match (&t.step, t.step_state) {
                (Some(s), Some(st)) => format!(" {s} {st}"),
                _ => String::new(),
            };
            let reason = t.reason.as_deref().filter(|r| !r.is_empty()).map(|r| format!(": {r}")).unwrap_or_default();
            eprintln!("{} {}{step}{reason}", t.task, t.state);
        }
    }
    Ok(())
}

fn print_created(ctx: &mut Context, task: &EtcdOperatorTask) -> anyhow::Result<()> {
    let name = task.metadata.name.clone().unwrap_or_default();
    match ctx.printer.format() {
        OutputFormat::Table | OutputFormat::Wide => {
            ctx.printer.text(&format!("etcdoperatortask.druid.gardener.cloud/{name} created\n"))?
        }
        _ => ctx.printer.print(&TaskList(vec![task.clone()]))?,
    }
    Ok(())
}

fn task_err(e: kube::Error, name: &str, ns: &str) -> ClusterError {
    ClusterError::from_kube(e, &Subject { kind: "EtcdOperatorTask", name, namespace: ns })
}

/// Tasks, printable in every format.
pub struct TaskList(pub Vec<EtcdOperatorTask>);

fn state_style(state: druidctl::api::TaskState) -> Style {
    use druidctl::api::TaskState::*;
    match state {
        Succeeded => Style::Good,
        Failed | Rejected => Style::Bad,
        InProgress => Style::Warn,
        Pending => Style::Dim,
    }
}

impl Printable for TaskList {
    fn table(&self, wide: bool) -> Table {
        let mut headers = vec!["namespace", "name", "type", "etcd", "state", "step", "age"];
        if wide {
            headers.push("reason");
        }
        let mut t = Table::new(&headers);
        let now = jiff::Timestamp::now();
        for task in &self.0 {
            let op = task.status.as_ref().and_then(|s| s.last_operation.as_ref());
            let created = task.metadata.creation_timestamp.as_ref().map(|c| c.0);
            let mut row = vec![
                Cell::plain(task.metadata.namespace.clone().unwrap_or_default()),
                Cell::plain(task.metadata.name.clone().unwrap_or_default()),
                Cell::plain(&task.spec.type_),
                Cell::plain(&task.spec.owner_etcd_refrence.name),
                Cell::styled(task.state().as_str(), state_style(task.state())),
                Cell::plain(op.map(|o| o.name.clone()).unwrap_or_else(|| "-".into())),
                Cell::plain(created.map(|c| age::human(age::seconds_between(c, now))).unwrap_or_else(|| "-".into())),
            ];
            if wide {
                row.push(Cell::plain(op.map(|o| o.reason.clone()).unwrap_or_default()));
            }
            t.row(row);
        }
        t
    }
    fn document(&self) -> serde_json::Value {
        druidctl::output::objects_document(&self.0)
    }
    fn names(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|t| format!("etcdoperatortask.druid.gardener.cloud/{}", t.metadata.name.clone().unwrap_or_default()))
            .collect()
    }
}

/// EtcdOpsTasks (run by etcd-druid) as `task list` shows them.
pub struct OpsTaskList(pub Vec<druidctl::api::EtcdOpsTask>);

impl Printable for OpsTaskList {
    fn table(&self, wide: bool) -> Table {
        use druidctl::api::opstask::states;
        let mut headers = vec!["namespace", "name", "type", "etcd", "state", "step", "age"];
        if wide {
            headers.push("reason");
        }
        let mut t = Table::new(&headers);
        let now = jiff::Timestamp::now();
        for task in &self.0 {
            let op = task.status.as_ref().and_then(|s| s.last_operation.as_ref());
            let created = task.metadata.creation_timestamp.as_ref().map(|c| c.0);
            let state = if task.state().is_empty() { states::PENDING } else { task.state() };
            let style = match state {
                states::SUCCEEDED => Style::Good,
                states::FAILED | states::REJECTED => Style::Bad,
                states::IN_PROGRESS => Style::Warn,
                _ => Style::Dim,
            };
            let mut row = vec![
                Cell::plain(task.metadata.namespace.clone().unwrap_or_default()),
                Cell::plain(task.metadata.name.clone().unwrap_or_default()),
                Cell::plain(format!("EtcdOpsTask/{}", task.operation())),
                Cell::plain(task.spec.etcd_name.clone().unwrap_or_default()),
                Cell::styled(state, style),
                Cell::plain(op.map(|o| o.type_.clone()).unwrap_or_else(|| "-".into())),
                Cell::plain(created.map(|c| age::human(age::seconds_between(c, now))).unwrap_or_else(|| "-".into())),
            ];
            if wide {
                row.push(Cell::plain(druidctl::tasks::opstask::reason(task)));
            }
            t.row(row);
        }
        t
    }
    fn document(&self) -> serde_json::Value {
        druidctl::output::objects_document(&self.0)
    }
    fn names(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|t| format!("etcdopstask.druid.gardener.cloud/{}", t.metadata.name.clone().unwrap_or_default()))
            .collect()
    }
}

/// The cluster's EtcdOpsTasks in scope, none when the cluster does not serve the kind.
async fn ops_tasks(ctx: &Context, cluster: &Cluster, ns: &str) -> anyhow::Result<Vec<druidctl::api::EtcdOpsTask>> {
    if !druidctl::tasks::opstask::served(&cluster.client).await? {
        return Ok(Vec::new());
    }
    let scope = (!ctx.global.all_namespaces).then_some(ns);
    Ok(druidctl::tasks::opstask::list(&cluster.client, scope).await?)
}

async fn list(ctx: &mut Context, args: ListArgs) -> anyhow::Result<()> {
    let cluster = ctx.connect().await?;
    let ns = namespace(ctx, &cluster);
    let api: Api<EtcdOperatorTask> = if ctx.global.all_namespaces {
        Api::all(cluster.client.clone())
    } else {
        Api::namespaced(cluster.client.clone(), &ns)
    };
    let mut lp = ListParams::default();
    if let Some(sel) = &ctx.global.selector {
        lp = lp.labels(sel);
    }
    let mut items = api.list(&lp).await.map_err(|e| task_err(e, "", &ns))?.items;
    let mut ops = ops_tasks(ctx, &cluster, &ns).await?;
    if let Some(etcd) = &args.etcd {
        items.retain(|t| t.spec.owner_etcd_refrence.name == *etcd);
        ops.retain(|t| t.spec.etcd_name.as_deref() == Some(etcd.as_str()));
    }
    items.sort_by_key(|t| {
        (t.metadata.namespace.clone(), t.metadata.creation_timestamp.as_ref().map(|c| c.0), t.metadata.name.clone())
    });
    ops.sort_by_key(|t| {
        (t.metadata.namespace.clone(), t.metadata.creation_timestamp.as_ref().map(|c| c.0), t.metadata.name.clone())
    });
    if items.is_empty() && ops.is_empty() && matches!(ctx.printer.format(), OutputFormat::Table | OutputFormat::Wide) {
        let scope =
            if ctx.global.all_namespaces { "in any namespace".to_string() } else { format!("in namespace {ns}") };
        let etcd = args.etcd.as_ref().map(|e| format!(" for etcd {e}")).unwrap_or_default();
        let sel = ctx.global.selector.as_ref().map(|s| format!(" with labels matching {s}")).unwrap_or_default();
        ctx.printer.text(&format!("No tasks found {scope}{etcd}{sel}.\n"))?;
        return Ok(());
    }
    if matches!(ctx.printer.format(), OutputFormat::Json | OutputFormat::Yaml) {
        let items: Vec<serde_json::Value> = items
            .iter()
            .map(|t| serde_json::to_value(t).unwrap_or_default())
            .chain(ops.iter().map(|t| serde_json::to_value(t).unwrap_or_default()))
            .collect();
        let doc = druidctl::output::list_document(items);
        if ctx.printer.format() == OutputFormat::Json {
            ctx.printer.json(&doc)?;
        } else {
            ctx.printer.yaml(&doc)?;
        }
        return Ok(());
    }
    if !items.is_empty() {
        ctx.printer.print(&TaskList(items))?;
    }
    if !ops.is_empty() {
        ctx.printer.print(&OpsTaskList(ops))?;
    }
    Ok(())
}

async fn get(ctx: &mut Context, args: GetArgs) -> anyhow::Result<()> {
    let cluster = ctx.connect().await?;
    let ns = namespace(ctx, &cluster);
    let api: Api<EtcdOperatorTask> = Api::namespaced(cluster.client.clone(), &ns);
    let ops_api: Api<druidctl::api::EtcdOpsTask> = Api::namespaced(cluster.client.clone(), &ns);
    let (mut items, mut ops) = (Vec::new(), Vec::new());
    for n in &args.names {
        match api.get_opt(n).await.map_err(|e| task_err(e, n, &ns))? {
            Some(t) => items.push(t),
            // An EtcdOpsTask of the same name, when the cluster serves that kind.
            None => match ops_api.get_opt(n).await {
                Ok(Some(t)) => ops.push(t),
                _ => {
                    return Err(ClusterError::NotFound {
                        kind: "etcdoperatortask".into(),
                        name: n.clone(),
                        namespace: ns.clone(),
                        hint: None,
                    }
                    .into());
                }
            },
        }
    }
    if !items.is_empty() || ops.is_empty() {
        ctx.printer.print(&TaskList(items))?;
    }
    if !ops.is_empty() {
        ctx.printer.print(&OpsTaskList(ops))?;
    }
    Ok(())
}

async fn describe(ctx: &mut Context, args: DescribeArgs) -> anyhow::Result<()> {
    let cluster = ctx.connect().await?;
    let ns = namespace(ctx, &cluster);
    let api: Api<EtcdOperatorTask> = Api::namespaced(cluster.client.clone(), &ns);
    let task = api.get(&args.name).await.map_err(|e| task_err(e, &args.name, &ns))?;
    if !matches!(ctx.printer.format(), OutputFormat::Table | OutputFormat::Wide) {
        ctx.printer.print(&TaskList(vec![task]))?;
        return Ok(());
    }
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(cluster.client.clone(), &ns);
    let evs = events
        .list(&ListParams::default().fields(&format!("involvedObject.name={}", args.name)))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    // Runbook tasks are EtcdOperatorTasks too: their types are known to the runbook catalog.
    let registry = druidctl::runbook::catalog::registry();
    let config_json = registry.plan(&task.spec.type_, task.spec.config.as_deref()).map(|p| p.config_json());
    let config = config_json.as_ref().map(|v| match v {
        serde_json::Value::Null => "(none)".to_string(),
        v => v.to_string(),
    });
    let mut s = String::new();
    let status = task.status.clone().unwrap_or_default();
    s.push_str(&format!("Name:         {}\nNamespace:    {ns}\nType:         {}\n", args.name, task.spec.type_));
    let etcd_ref = &task.spec.owner_etcd_refrence;
    s.push_str(&format!("Etcd:         {}/{}\n", etcd_ref.namespace, etcd_ref.name));
    if let Some(rb) = druidctl::runbook::catalog::ALL.iter().find(|r| r.task_type == task.spec.type_) {
        let cmd = druidctl::output::command_name();
        s.push_str(&format!("Runbook:      {} (run by `{cmd} runbook {}`, not by `serve`)\n", rb.name, rb.name));
        if !task.state().is_terminal() {
            let config = config_json.as_ref().ok().cloned().unwrap_or_default();
            s.push_str(&format!(
                "              unfinished: continue with `{cmd} runbook {} {} --resume`, or undo with `{cmd} runbook abort -n {} {}`\n",
                rb.name,
                runbook_args(rb, &etcd_ref.namespace, &etcd_ref.name, &config),
                etcd_ref.namespace,
                etcd_ref.name
            ));
        }
    }
    let config = match config {
        Ok(text) => text,
        Err(e) => format!("(invalid: {e})"),
    };
    s.push_str(&format!("Config:       {config}\n"));
    s.push_str(&format!(
        "TTL:          {}s after finishing\n",
        task.spec.ttl_seconds_after_finished.unwrap_or(druidctl::api::task::DEFAULT_TTL_SECONDS)
    ));
    s.push_str(&format!("State:        {}\n", task.state().as_str()));
    if let Some(t) = &status.initiated_at {
        s.push_str(&format!("Initiated:    {}\n", t.0));
    }
    if let Some(op) = &status.last_operation {
        s.push_str(&format!(
            "Step:         {} ({:?}) since {}\n  Reason:     {}\n",
            op.name, op.state, op.last_transition_time.0, op.reason
        ));
    }
    if let Ok(plan) = registry.plan(&task.spec.type_, task.spec.config.as_deref()) {
        let etcd: Api<druidctl::api::Etcd> =
            Api::namespaced(cluster.client.clone(), &task.spec.owner_etcd_refrence.namespace);
        if let Ok(e) = etcd.get(&task.spec.owner_etcd_refrence.name).await {
            s.push_str("Steps:\n");
            let journal = druidctl::tasks::step::journal_of(&task).unwrap_or_default();
            for (i, step) in plan.steps(&e).iter().enumerate() {
                let name = step.name();
                let completed = journal.get(&format!("step/{name}")).is_some_and(|v| v["completedAt"].is_string());
                let mark = if completed {
                    " [completed]".to_string()
                } else if let Some(op) = status.last_operation.as_ref().filter(|op| op.name == name) {
                    format!(" [{:?}]", op.state)
                } else {
                    String::new()
                };
                s.push_str(&format!(
                    "  {}. {name}{}{mark}: {}\n",
                    i + 1,
                    if step.destructive() { " (destructive)" } else { "" },
                    step.description()
                ));
            }
        }
    }
    s.push_str(&journal_text(&task));
    if !status.last_errors.is_empty() {
        s.push_str("Errors:\n");
        for e in &status.last_errors {
            s.push_str(&format!("  {}  {}  {}\n", e.observed_at.0, e.code, e.description));
        }
    }
    if !evs.is_empty() {
        s.push_str("Events:\n");
        for e in &evs {
            s.push_str(&format!(
                "  {}  {}  {}\n",
                e.type_.clone().unwrap_or_default(),
                e.reason.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default()
            ));
        }
    }
    ctx.printer.text(&s)?;
    Ok(())
}

/// The arguments that name a runbook run again (as `runbook … --resume` takes them), from its task's Etcd and
/// normalized config.
fn runbook_args(rb: &druidctl::runbook::Runbook, ns: &str, etcd: &str, config: &serde_json::Value) -> String {
    use druidctl::runbook::RunbookId;
    match rb.id {
        RunbookId::MemberRestore => {
            format!("-n {ns} {etcd} {}", config["member"].as_str().unwrap_or("MEMBER"))
        }
        RunbookId::MachineReplacement => {
            let machine_ns = config["namespace"].as_str().unwrap_or(ns);
            let target = match (config["machine"].as_str(), config["node"].as_str()) {
                (Some(m), _) => m.to_string(),
                (None, Some(n)) => format!("--node {n}"),
                (None, None) => "MACHINE".to_string(),
            };
            let force = if config["force"].as_bool() == Some(true) { " --force" } else { "" };
            format!("-n {machine_ns} {target}{force} --etcd {ns}/{etcd}")
        }
        RunbookId::QuorumLossRecovery | RunbookId::CertificateRenewal | RunbookId::SpaceRecovery => {
            format!("-n {ns} {etcd}")
        }
    }
}

/// Longest journal value `task describe` shows inline (`-o yaml` shows the whole annotation).
const JOURNAL_VALUE_WIDTH: usize = 100;

/// The `Journal:` section of `task describe`: what each step recorded (completion, duration, how), then the
/// other entries (baselines, last-known-good copies), long values shortened. Empty when nothing is recorded.
fn journal_text(task: &EtcdOperatorTask) -> String {
    let journal = match druidctl::tasks::step::journal_of(task) {
        Ok(j) if j.is_empty() => return String::new(),
        Ok(j) => j,
        Err(e) => {
            return format!(
                "Journal:      (unreadable annotation {}: {e})\n",
                druidctl::tasks::step::JOURNAL_ANNOTATION
            );
        }
    };
    let mut s = String::from("Journal:\n");
    let secs = |v: &serde_json::Value| v.as_u64().map(|ms| format!("{:.1}s", ms as f64 / 1000.0));
    // Steps in the order they completed; entries without a completion time last.
    let mut steps: Vec<(&String, &serde_json::Value)> =
        journal.iter().filter(|(k, _)| k.starts_with("step/")).collect();
    steps.sort_by_key(|(_, v)| {
        (v["completedAt"].as_str().is_none(), v["completedAt"].as_str().unwrap_or_default().to_string())
    });
    for (key, v) in steps {
        let step = key.trim_start_matches("step/");
        match v["completedAt"].as_str() {
            Some(at) => {
                let took = match (secs(&v["durationMs"]), secs(&v["waitedMs"])) {
                    (Some(d), Some(w)) => format!(" in {d} (waited {w})"),
                    (Some(d), None) => format!(" in {d}"),
                    _ => String::new(),
                };
                let how = v["how"].as_str().map(|h| format!(": {h}")).unwrap_or_default();
                s.push_str(&format!("  {step}  completed {at}{took}{how}\n"));
            }
            None => s.push_str(&format!("  {step}  {}\n", shortened(v))),
        }
        for w in v["warnings"].as_array().into_iter().flatten().filter_map(|w| w.as_str()) {
            s.push_str(&format!("    warning: {w}\n"));
        }
    }
    for (key, v) in journal.iter().filter(|(k, _)| !k.starts_with("step/")) {
        s.push_str(&format!("  {key}  {}\n", shortened(v)));
    }
    s
}

/// A journal value on one line, cut to [`JOURNAL_VALUE_WIDTH`] characters.
fn shortened(v: &serde_json::Value) -> String {
    let text = match v {
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    if text.chars().count() <= JOURNAL_VALUE_WIDTH {
        return text;
    }
    let head: String = text.chars().take(JOURNAL_VALUE_WIDTH).collect();
    format!("{head}… ({} bytes; -o yaml shows all)", text.len())
}

async fn watch(ctx: &mut Context, args: WatchArgs) -> anyhow::Result<()> {
    // Tells this long-running watch apart from other druidctl requests in the API server's audit log.
    druidctl::kube::config::set_product("druidctl-task-watch");
    let cluster = ctx.connect().await?;
    let ns = namespace(ctx, &cluster);
    let format = ctx.printer.format();
    let emit = |ctx: &mut Context, t: &Transition| -> anyhow::Result<()> {
        match format {
            OutputFormat::Jsonl | OutputFormat::Json => ctx.printer.jsonl(t)?,
            _ => {
                let step =
                    t.step.as_deref().map(|s| format!(" {s} {}", t.step_state.unwrap_or(""))).unwrap_or_default();
                let reason =
                    t.reason.as_deref().filter(|r| !r.is_empty()).map(|r| format!(": {r}")).unwrap_or_default();
                ctx.printer.text(&format!("{} {} {}{step}{reason}\n", t.observed_at, t.task, t.state))?;
            }
        }
        Ok(())
    };
    if let Some(name) = &args.name {
        if ctx.global.all_namespaces {
            return Err(UsageError("--all-namespaces cannot be combined with a task name; use -n".into()).into());
        }
        // A task that does not exist is said at once, not waited for.
        let api: Api<EtcdOperatorTask> = Api::namespaced(cluster.client.clone(), &ns);
        api.get(name).await.map_err(|e| task_err(e, name, &ns))?;
        eprintln!("watching task {name} in namespace {ns} until it finishes; Ctrl-C to stop");
        let mut err = None;
        let r = ops::follow(&cluster.client, &ns, name, args.timeout, |t| {
            if let Err(e) = emit(ctx, t) {
                err.get_or_insert(e);
            }
        })
        .await;
        if let Some(e) = err {
            return Err(e);
        }
        return r.map(|_| ()).map_err(classified);
    }
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    let all = ctx.global.all_namespaces;
    let api: Api<EtcdOperatorTask> =
        if all { Api::all(cluster.client.clone()) } else { Api::namespaced(cluster.client.clone(), &ns) };
    // Access and the API itself are checked once, so that a missing CRD or RBAC is said, not waited on.
    api.list(&kube::api::ListParams::default().limit(1)).await.map_err(|e| task_err(e, "", &ns))?;
    if all {
        eprintln!("watching the tasks of every namespace; Ctrl-C to stop");
    } else {
        eprintln!("watching the tasks in namespace {ns}; Ctrl-C to stop");
    }
    // A streaming list where the server offers it; after an API-server restart one relist (on 410 Gone).
    let mut stream = druidctl::kube::watch::events(api, watcher::Config::default());
    let mut last: std::collections::HashMap<String, Transition> = std::collections::HashMap::new();
    while let Some(ev) = stream.next().await {
        if let Ok(Event::Apply(t) | Event::InitApply(t)) = ev {
            let mut tr = ops::transition_of(&t);
            if all {
                tr.task = format!("{}/{}", t.metadata.namespace.as_deref().unwrap_or_default(), tr.task);
            }
            let changed = last.get(&tr.task).is_none_or(|p| {
                let mut p = p.clone();
                p.observed_at = tr.observed_at.clone();
                p != tr
            });
            if changed {
                emit(ctx, &tr)?;
                tr.observed_at.clear();
                last.insert(tr.task.clone(), tr);
            }
        }
    }
    Ok(())
}

async fn delete(ctx: &mut Context, args: DeleteArgs) -> anyhow::Result<()> {
    let cluster = ctx.connect().await?;
    let ns = namespace(ctx, &cluster);
    let api: Api<EtcdOperatorTask> = Api::namespaced(cluster.client.clone(), &ns);
    let mut serve: Option<Option<String>> = None;
    for n in &args.names {
        api.delete(n, &DeleteParams::background()).await.map_err(|e| task_err(e, n, &ns))?;
        // Its finalizer needs an executor. Without one (no `serve`, its `--local` process gone), this command
        // runs the finalizer itself so that the deletion completes.
        if let Some(t) = api.get_opt(n).await.map_err(|e| task_err(e, n, &ns))? {
            let fins = t.metadata.finalizers.clone().unwrap_or_default();
            if fins.iter().any(|f| f == druidctl::runbook::guard::RUNBOOK_FINALIZER) {
                eprintln!(
                    "note: task {n} is a runbook task: it goes once its run has cleaned up, or after `{} runbook abort -n {ns} {}`",
                    druidctl::output::command_name(),
                    t.spec.owner_etcd_refrence.name
                );
            } else if fins.iter().any(|f| f == druidctl::reconciler::FINALIZER) {
                if serve.is_none() {
                    serve = Some(ops::running_executor(&cluster.client, &ns).await?);
                }
                if matches!(serve, Some(None)) {
                    finalize_without_executor(&cluster, &api, &ns, n, t).await?;
                }
            }
        }
        if matches!(ctx.printer.format(), OutputFormat::Name) {
            ctx.printer.text(&format!("etcdoperatortask.druid.gardener.cloud/{n}\n"))?;
        } else {
            ctx.printer.text(&format!("etcdoperatortask.druid.gardener.cloud/{n} deleted\n"))?;
        }
    }
    Ok(())
}

/// Runs the finalizer of task `n`, being deleted while no `serve` runs for its namespace. A live executor (a
/// `--local` run) finalizes it itself when it sees the deletion; one that is gone still holds its lease until
/// the lease runs out (at once when it was a process on this host), and then this command finalizes it.
async fn finalize_without_executor(
    cluster: &Cluster,
    api: &Api<EtcdOperatorTask>,
    ns: &str,
    n: &str,
    mut task: EtcdOperatorTask,
) -> anyhow::Result<()> {
    let identity = druidctl::reconciler::lease::process_identity("druidctl-delete");
    let holder = || druidctl::runbook::guard::live_holder(&cluster.client, ns, n, &identity);
    if let Some(h) = holder().await? {
        eprintln!(
            "note: task {n} is executed by {} (its lease runs out in {}s unless renewed); waiting for it to let the task go",
            h.identity,
            h.expires_in.as_secs().max(1)
        );
        let deadline = tokio::time::Instant::now() + h.expires_in + Duration::from_secs(2);
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            match api.get_opt(n).await.map_err(|e| task_err(e, n, ns))? {
                None => return Ok(()),
                Some(t) => task = t,
            }
            if holder().await?.is_none() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                // Still renewed: its executor lives and finishes the deletion.
                return Ok(());
            }
        }
    }
    let r = Reconciler::new(cluster.client.clone(), Arc::new(Registry::standard()), ReconcilerOptions::new(identity));
    r.reconcile(&task, &[]).await.map_err(|e| anyhow::anyhow!("finalizing task {n}: {e}"))?;
    Ok(())
}

/// A shortcut follows its task unless --no-wait, at a terminal and in a script alike: what a command does never
/// depends on where its output goes (docs/cli.md, "Waiting").
pub fn shortcut_waits(run: &RunArgs, no_wait: bool) -> RunArgs {
    RunArgs { wait: !no_wait, ..run.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use druidctl::runbook::catalog::{CERT_RENEWAL, MACHINE_REPLACEMENT, MEMBER_RESTORE, QUORUM_LOSS_RECOVERY};
    use serde_json::json;

    #[test]
    fn runbook_args_name_the_run_as_the_runbook_command_takes_it() {
        assert_eq!(runbook_args(&QUORUM_LOSS_RECOVERY, "ns", "etcd-main", &json!(null)), "-n ns etcd-main");
        assert_eq!(runbook_args(&CERT_RENEWAL, "ns", "etcd-main", &json!(null)), "-n ns etcd-main");
        assert_eq!(
            runbook_args(&MEMBER_RESTORE, "ns", "etcd-main", &json!({"member": "etcd-main-2"})),
            "-n ns etcd-main etcd-main-2"
        );
        assert_eq!(
            runbook_args(
                &MACHINE_REPLACEMENT,
                "ns",
                "etcd-main",
                &json!({"machine": "m-1", "force": false, "namespace": null})
            ),
            "-n ns m-1 --etcd ns/etcd-main"
        );
        assert_eq!(
            runbook_args(
                &MACHINE_REPLACEMENT,
                "ns",
                "etcd-main",
                &json!({"node": "n-1", "force": true, "namespace": "machines"})
            ),
            "-n machines --node n-1 --force --etcd ns/etcd-main"
        );
    }

    #[test]
    fn the_journal_lists_steps_in_completion_order_and_shortens_long_values() {
        let mut task = EtcdOperatorTask::new(
            "t",
            druidctl::api::EtcdOperatorTaskSpec {
                type_: "X".into(),
                config: None,
                ttl_seconds_after_finished: None,
                owner_etcd_refrence: druidctl::api::task::NamespacedName { name: "e".into(), namespace: "ns".into() },
            },
        );
        assert_eq!(journal_text(&task), "", "nothing recorded, no section");
        let journal = json!({
            "step/B": {"completedAt": "2026-01-01T00:00:01Z", "durationMs": 1500, "how": "done"},
            "step/A": {"completedAt": "2026-01-01T00:00:02Z", "warnings": ["member 1 not reached"]},
            "baseline": "y".repeat(300),
        });
        task.metadata.annotations =
            Some([(druidctl::tasks::step::JOURNAL_ANNOTATION.to_string(), journal.to_string())].into());
        let text = journal_text(&task);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Journal:");
        assert_eq!(lines[1], "  B  completed 2026-01-01T00:00:01Z in 1.5s: done");
        assert_eq!(lines[2], "  A  completed 2026-01-01T00:00:02Z");
        assert_eq!(lines[3], "    warning: member 1 not reached");
        assert!(
            lines[4].starts_with("  baseline  yyyy") && lines[4].ends_with("… (300 bytes; -o yaml shows all)"),
            "{}",
            lines[4]
        );
        task.metadata.annotations =
            Some([(druidctl::tasks::step::JOURNAL_ANNOTATION.to_string(), "not json".to_string())].into());
        assert!(journal_text(&task).starts_with("Journal:      (unreadable annotation"), "{}", journal_text(&task));
    }
}
