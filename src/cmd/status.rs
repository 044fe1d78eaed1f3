//! `status [ETCD…]`: the health model of each Etcd; exit code 0 when all are healthy, 4 when not.

use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
use druidctl::etcd::MEMBER_READ_TIMEOUT;
use druidctl::etcd::member_status::ViewReader;
use druidctl::health::{self, HealthReport};
use druidctl::kube::target::{Targets, WhenUnnamed};
use druidctl::output::{OutputFormat, status as render};

use super::{Context, EtcdTargets};

/// Arguments of `status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Which Etcds (default: every Etcd in the namespace).
    #[command(flatten)]
    pub targets: EtcdTargets,
    /// Keep watching: watch the Etcds and what their health is judged from, and print again whenever the
    /// verdict, a member or a problem changed; rides out API-server restarts (Ctrl-C ends it).
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// How often --watch judges again without a change (ages and lease expiry move on by themselves).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = super::duration_in(100, 3600))]
    pub interval: Duration,
    /// Do not ask etcd itself (each member's status and the alarms); judge from the Kubernetes objects only.
    #[arg(long, conflicts_with = "etcd")]
    pub no_etcd: bool,
    /// Ask etcd itself also for many Etcds (with -A, or more than 4): without it, only up to 4 Etcds of one
    /// namespace are asked, so that a whole seed stays fast.
    #[arg(long)]
    pub etcd: bool,
}

/// Up to this many Etcds of one namespace, `status` asks their etcd without `--etcd`.
pub const ETCD_BY_DEFAULT_MAX: usize = 4;

/// Whether `status` asks etcd itself for `count` Etcds found by `targets`.
fn ask_etcd(args: &StatusArgs, targets: &Targets, count: usize) -> bool {
    args.etcd || (!args.no_etcd && !matches!(targets, Targets::AllNamespaces { .. }) && count <= ETCD_BY_DEFAULT_MAX)
}

/// Reads and judges every target Etcd. etcd itself is asked (when [`ask_etcd`] says so) in the same round trip
/// as far as the objects allow: each Etcd's TLS secrets are read as soon as the Etcd is in (while its pods and
/// the rest are still being listed), each member's port-forward opens while those are read.
async fn reports(
    ctx: &Context,
    cluster: &druidctl::kube::Cluster,
    args: &StatusArgs,
) -> anyhow::Result<(Vec<HealthReport>, Targets, Observations)> {
    let targets = ctx.targets(cluster, &args.targets.etcds, WhenUnnamed::ListAll)?;
    // Whether etcd may be asked at all (for a namespace, it depends on how many Etcds the LIST finds).
    let may_ask = match &targets {
        Targets::Named(keys) => ask_etcd(args, &targets, keys.len()),
        Targets::Namespace { .. } => !args.no_etcd,
        Targets::AllNamespaces { .. } => args.etcd,
    };
    let reader = if may_ask {
        let early_up_to = (!args.etcd).then_some(ETCD_BY_DEFAULT_MAX);
        // Named Etcds (a few): their members' port-forwards will be asked for as soon as each Etcd is read.
        let ahead = match &targets {
            Targets::Named(keys) => ViewReader::connections_ahead(keys.len().min(ETCD_BY_DEFAULT_MAX)),
            _ => 0,
        };
        let up = cluster.upgrade_client_opening(ahead)?;
        Some(ViewReader::new(cluster.client.clone(), up, MEMBER_READ_TIMEOUT, early_up_to))
    } else {
        None
    };
    let on_etcds = |etcds: &[druidctl::api::Etcd]| {
        if let Some(r) = &reader {
            r.etcds_known(etcds);
        }
    };
    let mut inputs = match &targets {
        // Named: the GETs and the LISTs in one round trip.
        Targets::Named(keys) => health::collect_named_then(&cluster.client, keys, &on_etcds).await?,
        // Every Etcd of a namespace or of the cluster: the LIST of the Etcds and the others in one round trip.
        Targets::Namespace { namespace, selector } => {
            health::collect_listed_then(&cluster.client, Some(namespace), selector.as_deref(), &on_etcds).await?
        }
        Targets::AllNamespaces { selector } => {
            health::collect_listed_then(&cluster.client, None, selector.as_deref(), &on_etcds).await?
        }
    };
    if let Some(reader) = reader.as_ref().filter(|_| ask_etcd(args, &targets, inputs.len())) {
        health::observe_etcd_with(reader, &mut inputs, Some(druidctl::etcd::LAG_READ_AGAIN_AFTER)).await;
    }
    let now = jiff::Timestamp::now();
    let reports = inputs.iter().map(|i| health::assess(i, now)).collect();
    Ok((reports, targets, observations_of(inputs)))
}

/// etcd's view of each Etcd, by Etcd.
type Observations = std::collections::HashMap<druidctl::kube::ObjectKey, druidctl::etcd::EtcdObservation>;

/// The etcd observations `inputs` hold.
fn observations_of(inputs: Vec<health::HealthInputs>) -> Observations {
    inputs.into_iter().filter_map(|i| Some((druidctl::kube::etcds::key_of(&i.etcd), i.etcd_observation?))).collect()
}

fn print(ctx: &mut Context, reports: &[HealthReport], targets: &Targets) -> anyhow::Result<()> {
    match ctx.printer.format() {
        OutputFormat::Table | OutputFormat::Wide => {
            let wide = ctx.printer.format() == OutputFormat::Wide;
            let text = if reports.is_empty() {
                // Where it looked, as `kubectl get` says "No resources found in foo namespace.".
                format!("No Etcds found {}.\n", targets.searched())
            } else {
                render::render_reports(reports, wide, ctx.printer.color(), druidctl::output::terminal_width())
            };
            ctx.printer.text(&text)?;
        }
        OutputFormat::Json => ctx.printer.json(&render::document(reports))?,
        OutputFormat::Yaml => ctx.printer.yaml(&render::document(reports))?,
        OutputFormat::Jsonl => {
            for r in reports {
                ctx.printer.jsonl(r)?;
            }
        }
        OutputFormat::Name => {
            let names: String =
                reports.iter().map(|r| format!("etcd.druid.gardener.cloud/{}\n", r.etcd.name)).collect();
            ctx.printer.text(&names)?;
        }
    }
    Ok(())
}

/// Runs `status`.
pub async fn exec(ctx: &mut Context, args: StatusArgs) -> anyhow::Result<()> {
    ctx.check_targets(&args.targets.etcds, WhenUnnamed::ListAll)?;
    if !args.watch {
        let cluster = ctx.connect_for_reads().await?;
        let (reports, targets, _) = reports(ctx, &cluster, &args).await?;
        print(ctx, &reports, &targets)?;
        health::require_healthy(&reports)?;
        return Ok(());
    }
    // Tells this long-running watch apart from other druidctl requests in the API server's audit log.
    druidctl::kube::config::set_product("druidctl-status-watch");
    let cluster = ctx.connect().await?;
    watch(ctx, &cluster, &args).await
}

/// What a person acts on in a set of reports (not ages): an unchanged cluster prints nothing new.
fn fingerprint(reports: &[HealthReport]) -> String {
    reports
        .iter()
        .map(|r| {
            let members: Vec<String> = r
                .members
                .iter()
                .map(|m| format!("{}/{}/{}/{}/{}", m.name, m.ready, m.reason, m.status, m.druid_view_stale))
                .collect();
            let etcd = r.etcd_view.as_ref().map(|v| (&v.leader, &v.alarms, &v.not_reached));
            format!("{:?}{members:?}{:?}{:?}{:?}{etcd:?}", r.verdict, r.problems, r.annotations, r.warnings)
        })
        .collect()
}

/// `status --watch`: one read as without --watch (so bad input and a missing RBAC grant are said at once, with
/// their exit codes), then watches of every kind status reads (`health::watch`), judged again from what they
/// hold on every change (at most every 200 ms) and every --interval (ages and lease expiry move on without an
/// event). An API server that goes away is waited for: a one-line notice, backoff, the watches resume; only
/// Ctrl-C ends it.
async fn watch(ctx: &mut Context, cluster: &druidctl::kube::Cluster, args: &StatusArgs) -> anyhow::Result<()> {
    use druidctl::health::watch::{self as w, Signal};
    let clear =
        std::io::stdout().is_terminal() && matches!(ctx.printer.format(), OutputFormat::Table | OutputFormat::Wide);
    let (first, targets, mut observations) = reports(ctx, cluster, args).await?;
    let ask = ask_etcd(args, &targets, first.len());
    let tasks_installed = tasks_installed(cluster, &targets).await?;
    let mut last = None;
    draw(ctx, &first, &targets, args.interval, clear, &mut last, None)?;

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stop = tokio_util::sync::CancellationToken::new();
    let _stop_on_drop = stop.clone().drop_guard();
    let scope = w::WatchScope::of(&targets, tasks_installed);
    let namespace = scope.namespace.clone().unwrap_or_default();
    let watched = w::start(&cluster.client, scope, tx, stop.clone());
    let mut synced = std::collections::HashSet::new();
    let mut outage = Outage::default();
    let mut tick = tokio::time::interval(args.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut due: Option<tokio::time::Instant> = None;
    // etcd's view is read again on every --interval (not per event), one read at a time, in the background.
    let (etcd_tx, mut etcd_rx) = tokio::sync::mpsc::unbounded_channel::<Observations>();
    let mut etcd_in_flight = false;
    loop {
        let at = due.unwrap_or_else(|| tokio::time::Instant::now() + args.interval * 2);
        tokio::select! {
            signal = rx.recv() => match signal {
                None => return Ok(()),
                Some(Signal::Failed { kind, why, status }) => {
                    // Refused before its first list: RBAC grants list but not watch (or nothing at all here),
                    // which no retry mends. After that, a 403 is the restarted server's authorizer warming up.
                    if let Some(s) = status.filter(|s| s.code == 403 && !synced.contains(&kind)) {
                        let subject =
                            druidctl::kube::error::Subject { kind: kind.resource(), name: "", namespace: &namespace };
                        return Err(druidctl::kube::ClusterError::from_kube(kube::Error::Api(s), &subject).into());
                    }
                    if outage.failed(kind, &why) {
                        due.get_or_insert_with(tokio::time::Instant::now);
                    }
                }
                Some(Signal::Synced(kind) | Signal::Changed(kind)) => {
                    if matches!(signal, Some(Signal::Synced(_))) {
                        synced.insert(kind);
                    }
                    outage.answered(Some(kind));
                    due.get_or_insert_with(|| tokio::time::Instant::now() + w::DEBOUNCE);
                }
            },
            Some(mut read) = etcd_rx.recv() => {
                etcd_in_flight = false;
                // The previous refresh is the earlier reading: a member's lag is judged across refreshes.
                for (key, now) in &mut read {
                    if let Some(before) = observations.remove(key) {
                        now.earlier = Some(Box::new(druidctl::etcd::EtcdObservation { earlier: None, ..before }));
                    }
                }
                observations = read;
                due.get_or_insert_with(tokio::time::Instant::now);
            }
            _ = tick.tick() => {
                if ask && !etcd_in_flight && watched.ready(&synced) {
                    etcd_in_flight = true;
                    let mut inputs = watched.inputs();
                    let client = cluster.client.clone();
                    let tx = etcd_tx.clone();
                    tokio::spawn(async move {
                        health::observe_etcd(&client, &mut inputs, MEMBER_READ_TIMEOUT).await;
                        let _ = tx.send(observations_of(inputs));
                    });
                }
                // Ages and lease expiry move on without an event. While the API server is away, asking it for
                // its version tells when it is back even if nothing changes (a watch that resumes without a
                // relist says nothing until the next change).
                if outage.why().is_some()
                    && outage.quiet_for() > QUIET
                    && cluster.client.apiserver_version().await.is_ok()
                {
                    outage.answered(None);
                }
                due.get_or_insert_with(tokio::time::Instant::now);
            }
            _ = tokio::time::sleep_until(at), if due.is_some() => {
                due = None;
                if watched.ready(&synced) {
                    let now = jiff::Timestamp::now();
                    let mut inputs = watched.inputs();
                    for i in &mut inputs {
                        i.etcd_observation = observations.get(&druidctl::kube::etcds::key_of(&i.etcd)).cloned();
                    }
                    let reports: Vec<HealthReport> = inputs.iter().map(|i| health::assess(i, now)).collect();
                    draw(ctx, &reports, &targets, args.interval, clear, &mut last, outage.why())?;
                }
            }
        }
    }
}

/// Longer than the watches' longest backoff (5 s): a failure older than this was followed by a retry that did
/// not fail.
const QUIET: Duration = Duration::from_secs(6);

/// The API server's trouble as `status --watch` says it: once on stderr when a watch first fails, once when
/// every watch that failed is back (it relisted or saw a change), or the server answers and no watch failed for
/// [`QUIET`]. The 429s and 503s of a server that is starting belong to the same outage.
#[derive(Default)]
struct Outage {
    why: Option<String>,
    failing: std::collections::HashSet<druidctl::health::watch::Kind>,
    last_failure: Option<tokio::time::Instant>,
}

impl Outage {
    /// A watch failed; true when this starts an outage.
    fn failed(&mut self, kind: druidctl::health::watch::Kind, why: &str) -> bool {
        self.failing.insert(kind);
        self.last_failure = Some(tokio::time::Instant::now());
        if self.why.is_some() {
            return false;
        }
        eprintln!("reconnecting: watching {} failed: {why}; showing what was last seen", kind.resource());
        self.why = Some(why.to_string());
        true
    }

    /// `kind`'s watch is back (`None`: the server answers and no watch failed lately).
    fn answered(&mut self, kind: Option<druidctl::health::watch::Kind>) {
        match kind {
            Some(k) => {
                self.failing.remove(&k);
            }
            None => self.failing.clear(),
        }
        if self.failing.is_empty() && self.why.take().is_some() {
            eprintln!("reconnected: the API server answers again");
        }
    }

    fn why(&self) -> Option<&str> {
        self.why.as_deref()
    }

    fn quiet_for(&self) -> Duration {
        self.last_failure.map_or(Duration::MAX, |t| t.elapsed())
    }
}

/// Whether the EtcdOperatorTask CRD is installed where `targets` look (one LIST of at most one object).
async fn tasks_installed(cluster: &druidctl::kube::Cluster, targets: &Targets) -> anyhow::Result<bool> {
    use druidctl::api::EtcdOperatorTask;
    use kube::api::{Api, ListParams};
    let api: Api<EtcdOperatorTask> = match druidctl::health::watch::WatchScope::of(targets, true).namespace {
        Some(ns) => Api::namespaced(cluster.client.clone(), &ns),
        None => Api::all(cluster.client.clone()),
    };
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(druidctl::kube::ClusterError::from_kube(
            e,
            &druidctl::kube::error::Subject { kind: "EtcdOperatorTask", name: "", namespace: "" },
        )
        .into()),
    }
}

/// Prints `reports` when what a person acts on changed (or, on a terminal, the outage notice did).
fn draw(
    ctx: &mut Context,
    reports: &[HealthReport],
    targets: &Targets,
    interval: Duration,
    clear: bool,
    last: &mut Option<String>,
    outage: Option<&str>,
) -> anyhow::Result<()> {
    let mut print_now = fingerprint(reports);
    if clear {
        print_now.push_str(outage.unwrap_or_default());
    }
    if last.as_ref() == Some(&print_now) {
        return Ok(());
    }
    if clear {
        ctx.printer.text("\x1b[2J\x1b[H")?;
    }
    // Said on stderr (stdout stays the reports alone): once, or as the first line of each cleared screen.
    if clear || last.is_none() {
        eprintln!("{}", watching(targets, interval));
    }
    if clear && let Some(why) = outage {
        eprintln!("reconnecting: {why}; showing what was last seen");
    }
    print(ctx, reports, targets)?;
    *last = Some(print_now);
    Ok(())
}

/// The line `status --watch` says once: what it watches, how often it looks, how to stop.
fn watching(targets: &Targets, interval: Duration) -> String {
    let what = match targets {
        Targets::Named(keys) => keys.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
        Targets::Namespace { .. } => format!("the Etcds {}", targets.searched()),
        Targets::AllNamespaces { selector: Some(sel) } => {
            format!("the Etcds of every namespace with labels matching {sel}")
        }
        Targets::AllNamespaces { selector: None } => "the Etcds of every namespace".to_string(),
    };
    format!("watching {what} (judged again on every change and every {}); Ctrl-C to stop", humantime_secs(interval))
}

/// `2s`, `90s`, `500ms`, `1500ms`: as the flag is written.
fn humantime_secs(d: Duration) -> String {
    if d.subsec_millis() == 0 { format!("{}s", d.as_secs()) } else { format!("{}ms", d.as_millis()) }
}
