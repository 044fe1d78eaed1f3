//! `serve`: the EtcdOperatorTask controller — namespace (`-n`) or cluster (`-A`) scope, `--workers`, leader
//! election on a Lease, `/metrics` `/healthz` `/readyz`, graceful shutdown on SIGTERM/SIGINT (running steps stop
//! at a safe point and leases are released), structured logs (`--log-format json`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::{Args, ValueEnum};
use druidctl::kube::{AccessOptions, connect};
use druidctl::reconciler::controller::{self, ControllerOptions, Health, LeaderElection};
use druidctl::reconciler::{Reconciler, ReconcilerOptions};
use druidctl::tasks::Registry;
use tokio_util::sync::CancellationToken;

use super::Context;

/// Log line format.
#[derive(Debug, Clone, Copy, ValueEnum, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Arguments of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Concurrent reconciles (tasks of different Etcds run in parallel; one Etcd's tasks run in order).
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: u16,
    /// Where /metrics, /healthz and /readyz listen.
    #[arg(long, default_value = "127.0.0.1:9090", value_name = "ADDR")]
    pub metrics_addr: SocketAddr,
    /// Elect a leader among replicas with a Lease (--leader-elect=false: run unconditionally).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub leader_elect: bool,
    /// Namespace of the leader Lease (default: the watched namespace, or "default" with -A).
    #[arg(long, value_name = "NAMESPACE", value_parser = super::parse_namespace)]
    pub leader_election_namespace: Option<String>,
    /// Duration of the leader and executor Leases.
    #[arg(long, default_value = "15s", value_name = "DURATION", value_parser = super::duration_in(2000, 3600))]
    pub lease_duration: Duration,
    /// Identity in Leases and events (default: host name and process id).
    #[arg(long, value_name = "NAME", value_parser = super::parse_non_empty)]
    pub identity: Option<String>,
    /// TTL of finished tasks that set none, in seconds.
    #[arg(long, default_value_t = druidctl::api::task::DEFAULT_TTL_SECONDS, value_name = "SECONDS", value_parser = clap::value_parser!(i32).range(0..=31_536_000))]
    pub default_ttl: i32,
    /// Log format.
    #[arg(long, value_enum, default_value_t)]
    pub log_format: LogFormat,
    /// Also execute `NoOpTask` (a task that touches nothing): for benchmarks of the controller only.
    #[arg(long, hide = true)]
    pub noop_task_type: bool,
}

fn init_logging(format: LogFormat, verbose: u8) {
    let level = match verbose {
        0 => "info",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    // kube's HTTP layer logs every failed request as an ERROR, and a watch cut off by a server that went away
    // as a WARN; the callers report those failures themselves (an unreachable API server once, as an outage),
    // so these lines are left out below -vvv.
    let (client_errors, client_warnings) = if verbose >= 3 { ("trace", "trace") } else { ("off", "error") };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!(
            "druidctl={level},kube=warn,kube_client::client={client_warnings},kube_client::client::builder={client_errors}"
        ))
    });
    use std::io::IsTerminal;
    // Colour only for a person at a terminal; log collectors get plain text (or JSON with --log-format json).
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_env_filter(filter);
    let _ = match format {
        // One flat object a line: `level`, `message` and the event's fields at the top, as log collectors expect.
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_string()))
        .unwrap_or_else(|| "druidctl".into());
    format!("{host}-{}", std::process::id())
}

/// Runs `serve` on its own runtime, so that SIGTERM and Ctrl-C shut it down gracefully.
pub fn run(ctx: &mut Context, args: ServeArgs) -> anyhow::Result<()> {
    druidctl::kube::config::set_product("druidctl-serve");
    init_logging(args.log_format, ctx.global.verbose);
    // Two worker threads whatever the node's core count: serve waits on the API server most of the time, and
    // every thread costs memory (stacks, an allocator arena each). Blocking threads (name resolution of new
    // connections) are few and short.
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).max_blocking_threads(4).enable_all().build()?;
    rt.block_on(serve(ctx, args))
}

async fn serve(ctx: &mut Context, args: ServeArgs) -> anyhow::Result<()> {
    let cluster = connect(&AccessOptions {
        kubeconfig: ctx.global.kubeconfig.clone(),
        context: ctx.global.context.clone(),
        namespace: ctx.global.namespace.clone(),
        request_timeout: ctx.global.request_timeout.0,
        prefer_in_cluster: true,
        slow_answer: None,
    })
    .await?;
    let scope = if ctx.global.all_namespaces { None } else { Some(ctx.namespace_or(&cluster.namespace)) };
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let mut opts = ReconcilerOptions::new(&identity);
    opts.executor_lease = args.lease_duration;
    opts.default_ttl_seconds = args.default_ttl;
    let stop = CancellationToken::new();
    let registry = if args.noop_task_type {
        Registry::with_noop(Arc::new(druidctl::tasks::noop::Ledger::forgetful()))
    } else {
        Registry::standard()
    };
    let base = Arc::new(Reconciler::new(cluster.client.clone(), Arc::new(registry), opts).with_queued_events());
    let events = base.events.clone();
    let health = Arc::new(Health::default());
    let bound =
        controller::serve_endpoints(args.metrics_addr, base.metrics.clone(), health.clone(), stop.clone()).await?;
    tracing::info!(%identity, namespace = scope.as_deref().unwrap_or("(all)"), workers = args.workers, metrics = %bound, "serving");
    let copts = ControllerOptions {
        namespace: scope.clone(),
        workers: usize::from(args.workers),
        resync: Duration::from_secs(30),
    };
    let run = {
        let (stop, health) = (stop.clone(), health.clone());
        async move {
            if args.leader_elect {
                let election = LeaderElection {
                    namespace: args.leader_election_namespace.clone().or(scope).unwrap_or_else(|| "default".into()),
                    name: controller::LEADER_LEASE.into(),
                    lease: args.lease_duration,
                };
                controller::run_with_leader_election(base, copts, election, stop, health).await;
            } else {
                health.started.store(true, Ordering::SeqCst);
                health.leading.store(true, Ordering::SeqCst);
                let term = Arc::new(Reconciler {
                    client: base.client.clone(),
                    registry: base.registry.clone(),
                    opts: base.opts.clone(),
                    metrics: base.metrics.clone(),
                    shutdown: stop.clone(),
                    events: base.events.clone(),
                });
                let synced = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let poll = {
                    let (synced, health, stop) = (synced.clone(), health.clone(), stop.clone());
                    tokio::spawn(async move {
                        while !stop.is_cancelled() {
                            health.synced.store(synced.load(Ordering::SeqCst), Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    })
                };
                controller::run(term, copts, synced).await;
                let _ = poll.await;
            }
        }
    };
    let mut run = std::pin::pin!(run);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = &mut run => {
            events.flush(Duration::from_secs(5)).await;
            return Ok(());
        }
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: shutting down"),
    }
    health.stopping.store(true, Ordering::SeqCst);
    stop.cancel();
    // Running steps stop at their next safe point; their status already names the step, and their leases are
    // released so another replica takes over at once.
    if tokio::time::timeout(Duration::from_secs(60), run).await.is_err() {
        tracing::warn!("shutdown took longer than 60s; exiting");
    }
    let unsent = events.flush(Duration::from_secs(5)).await;
    if unsent > 0 {
        tracing::warn!(unsent, "events not sent before exit");
    }
    Ok(())
}
