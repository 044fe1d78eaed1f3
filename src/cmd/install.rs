//! `install [--print] [--dry-run]`: the EtcdOperatorTask CRD, ClusterRoles for operators and `serve`, and with
//! `--serve-image` the `serve` Deployment; server-side apply, then wait until the CRD is Established.

use std::time::Duration;

use clap::Args;
use druidctl::api::manifests::{self, DEFAULT_SERVE_NAMESPACE, InstallOptions};
use druidctl::output::{OutputFormat, list_document};

use super::Context;

/// Arguments of `install`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Print the manifests instead of applying them (no cluster access).
    #[arg(long, conflicts_with = "dry_run")]
    pub print: bool,
    /// Send everything with server-side dry-run: validated by the API server, nothing stored.
    #[arg(long)]
    pub dry_run: bool,
    /// Also deploy `druidctl serve` with this image.
    #[arg(long, value_name = "IMAGE", value_parser = super::parse_non_empty)]
    pub serve_image: Option<String>,
    /// Namespace of the `serve` Deployment.
    #[arg(long, value_name = "NAMESPACE", default_value = DEFAULT_SERVE_NAMESPACE, requires = "serve_image")]
    pub serve_namespace: String,
    /// How long to wait for the CRD to become Established.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = super::duration_in(1000, 3600))]
    pub timeout: Duration,
}

fn options(args: &InstallArgs) -> anyhow::Result<InstallOptions> {
    druidctl::kube::target::validate_dns_label(&args.serve_namespace).map_err(|e| {
        druidctl::kube::UsageError(format!("invalid --serve-namespace {:?}: {e}", args.serve_namespace))
    })?;
    Ok(InstallOptions { serve_image: args.serve_image.clone(), serve_namespace: args.serve_namespace.clone() })
}

/// `install --print`.
pub fn print(ctx: &mut Context, args: InstallArgs) -> anyhow::Result<()> {
    let objects = manifests::all(&options(&args)?);
    match ctx.printer.format() {
        OutputFormat::Json => ctx.printer.json(&list_document(objects))?,
        OutputFormat::Jsonl => {
            for o in &objects {
                ctx.printer.jsonl(o)?;
            }
        }
        _ => ctx.printer.text(&manifests::to_yaml_stream(&objects))?,
    }
    Ok(())
}

/// `install` (apply).
pub async fn exec(ctx: &mut Context, args: InstallArgs) -> anyhow::Result<()> {
    let objects = manifests::all(&options(&args)?);
    let cluster = ctx.connect().await?;
    let applied = druidctl::kube::install::apply(&cluster.client, &objects, args.dry_run).await?;
    if !args.dry_run {
        let crd = druidctl::api::task::crd();
        druidctl::kube::install::wait_established(
            &cluster.client,
            crd.metadata.name.as_deref().unwrap_or_default(),
            args.timeout,
        )
        .await?;
    }
    let suffix = if args.dry_run { " (server dry run)" } else { "" };
    match ctx.printer.format() {
        OutputFormat::Json | OutputFormat::Yaml | OutputFormat::Jsonl => {
            let doc = serde_json::json!({"dryRun": args.dry_run, "applied": applied});
            match ctx.printer.format() {
                OutputFormat::Yaml => ctx.printer.yaml(&doc)?,
                OutputFormat::Jsonl => ctx.printer.jsonl(&doc)?,
                _ => ctx.printer.json(&doc)?,
            }
        }
        OutputFormat::Name => {
            ctx.printer.text(&applied.iter().map(|a| format!("{}\n", a.reference)).collect::<String>())?
        }
        _ => ctx
            .printer
            .text(&applied.iter().map(|a| format!("{} {}{suffix}\n", a.reference, a.action)).collect::<String>())?,
    }
    Ok(())
}
