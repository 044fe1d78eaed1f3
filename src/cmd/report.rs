//! `report ETCD [-o FILE]`: one redacted `.tar.gz` with what an incident needs about an Etcd.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use clap_complete::engine::ArgValueCompleter;
use druidctl::kube::target::{Targets, WhenUnnamed};
use druidctl::report::{self, ReportOptions, Source};

use super::{Context, completion, parse_duration};

/// Arguments of `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The Etcd: NAME or NAMESPACE/NAME.
    #[arg(value_name = "ETCD", value_parser = super::parse_etcd_ref, add = ArgValueCompleter::new(completion::etcd_names))]
    pub etcd: String,
    /// The archive to write (default: druidctl-report-NAMESPACE-NAME-TIME.tar.gz in the current directory).
    #[arg(long = "file", short = 'f', value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Include the member containers' logs (--logs=false leaves them out).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub logs: bool,
    /// Logs newer than this.
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_duration)]
    pub since: Duration,
    /// Include etcd-druid's Deployment and logs from this namespace.
    #[arg(long, value_name = "NAMESPACE", value_parser = super::parse_namespace)]
    pub druid_namespace: Option<String>,
    /// Include etcd-druid's Deployment and logs, found by its label in any namespace (implied by
    /// --druid-namespace).
    #[arg(long)]
    pub druid: bool,
    /// List what would be collected and write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs `report`.
pub async fn exec(ctx: &mut Context, args: ReportArgs) -> anyhow::Result<()> {
    let names = vec![args.etcd.clone()];
    ctx.check_targets(&names, WhenUnnamed::RequireOneName)?;
    let cluster = ctx.connect().await?;
    let Targets::Named(keys) = ctx.targets(&cluster, &names, WhenUnnamed::RequireOneName)? else {
        unreachable!("RequireOneName yields a name")
    };
    let opts = ReportOptions {
        etcd: keys[0].clone(),
        logs: args.logs,
        since: args.since,
        druid: args.druid || args.druid_namespace.is_some(),
        druid_namespace: args.druid_namespace.clone(),
        source: Source {
            server: cluster.server.clone(),
            context: cluster.context.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        },
    };
    if args.dry_run {
        let text: String = report::plan(&opts).into_iter().map(|s| format!("- {s}\n")).collect();
        ctx.printer.text(&format!("would collect:\n{text}"))?;
        return Ok(());
    }
    let started = jiff::Timestamp::now();
    let root = report::default_name(&opts.etcd, started);
    let file = args.file.clone().unwrap_or_else(|| PathBuf::from(format!("{root}.tar.gz")));
    let bar = std::io::stderr().is_terminal().then(|| druidctl::output::progress::spinner("collecting"));
    let progress = {
        let bar = bar.clone();
        move |step: &str| {
            if let Some(b) = &bar {
                b.set_message(format!("collecting {step}"));
            }
        }
    };
    let bundle = report::collect(&cluster.client, &opts, &progress).await?;
    let size = report::write_tar_gz(&bundle, &opts, &root, &file)?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let skipped = match bundle.skipped.len() {
        0 => String::new(),
        n => format!("; {n} skipped (see index.md)"),
    };
    ctx.printer.text(&format!(
        "wrote {} ({}, {} files{skipped})\n",
        file.display(),
        human_size(size),
        bundle.files.len() + 1
    ))?;
    Ok(())
}

/// Bytes as people read them (KiB, MiB).
fn human_size(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} bytes"),
    }
}
