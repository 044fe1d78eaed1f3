//! `status [ETCD…]`: the health model of each Etcd; exit code 0 when all are healthy, 4 when not.

use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
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
    /// Keep watching: re-read and print whenever something changed (Ctrl-C ends it).
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// How often --watch re-reads.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = super::duration_in(100, 3600))]
    pub interval: Duration,
}

/// Reads and judges every target Etcd concurrently.
async fn reports(
    ctx: &Context,
    cluster: &druidctl::kube::Cluster,
    names: &[String],
) -> anyhow::Result<(Vec<HealthReport>, Targets)> {
    let targets = ctx.targets(cluster, names, WhenUnnamed::ListAll)?;
    let inputs = match &targets {
        // Named: the GETs and the LISTs in one round trip.
        Targets::Named(keys) => health::collect_named(&cluster.client, keys).await?,
        // Every Etcd of a namespace or of the cluster: the LIST of the Etcds and the others in one round trip.
        Targets::Namespace { namespace, selector } => {
            health::collect_listed(&cluster.client, Some(namespace), selector.as_deref()).await?
        }
        Targets::AllNamespaces { selector } => {
            health::collect_listed(&cluster.client, None, selector.as_deref()).await?
        }
    };
    let now = jiff::Timestamp::now();
    Ok((inputs.iter().map(|i| health::assess(i, now)).collect(), targets))
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
        let (reports, targets) = reports(ctx, &cluster, &args.targets.etcds).await?;
        print(ctx, &reports, &targets)?;
        health::require_healthy(&reports)?;
        return Ok(());
    }
    let cluster = ctx.connect().await?;
    let clear =
        std::io::stdout().is_terminal() && matches!(ctx.printer.format(), OutputFormat::Table | OutputFormat::Wide);
    let mut last: Option<String> = None;
    loop {
        let (reports, targets) = reports(ctx, &cluster, &args.targets.etcds).await?;
        // Compare what a person acts on, not ages, so an unchanged cluster prints nothing new.
        let fingerprint: String = reports
            .iter()
            .map(|r| {
                let members: Vec<String> = r
                    .members
                    .iter()
                    .map(|m| format!("{}/{}/{}/{}/{}", m.name, m.ready, m.reason, m.status, m.druid_view_stale))
                    .collect();
                format!("{:?}{members:?}{:?}{:?}", r.verdict, r.problems, r.annotations)
            })
            .collect();
        if last.as_ref() != Some(&fingerprint) {
            if clear {
                ctx.printer.text("\x1b[2J\x1b[H")?;
            }
            // Said on stderr (stdout stays the reports alone): once, or as the first line of each cleared screen.
            if clear || last.is_none() {
                eprintln!("{}", watching(&targets, args.interval));
            }
            print(ctx, &reports, &targets)?;
            last = Some(fingerprint);
        }
        tokio::time::sleep(args.interval).await;
    }
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
    format!("watching {what} (every {}); Ctrl-C to stop", humantime_secs(interval))
}

/// `2s`, `90s`, `500ms`, `1500ms`: as the flag is written.
fn humantime_secs(d: Duration) -> String {
    if d.subsec_millis() == 0 { format!("{}s", d.as_secs()) } else { format!("{}ms", d.as_millis()) }
}
