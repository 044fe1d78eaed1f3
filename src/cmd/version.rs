//! `version`: the druidctl version, as text or `-o json|yaml`.

use clap::Args;
use druidctl::output::OutputFormat;

use super::Context;

/// Arguments of `version`.
#[derive(Debug, Args)]
pub struct VersionArgs {}

/// The `version -o json` document.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct VersionInfo {
    version: &'static str,
    task_api_version: &'static str,
}

/// Prints the version.
pub fn exec(ctx: &mut Context, _args: VersionArgs) -> anyhow::Result<()> {
    let info = VersionInfo { version: env!("CARGO_PKG_VERSION"), task_api_version: "druid.gardener.cloud/v1alpha1" };
    match ctx.printer.format() {
        OutputFormat::Json => ctx.printer.json(&info)?,
        OutputFormat::Jsonl => ctx.printer.jsonl(&info)?,
        OutputFormat::Yaml => ctx.printer.yaml(&info)?,
        _ => ctx.printer.text(&format!("{} {}\n", druidctl::output::command_name(), info.version))?,
    }
    Ok(())
}
