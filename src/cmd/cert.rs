//! `cert status [CERTIFICATE…|--etcd ETCD]`: per Certificate Ready, revision, validity, renewal time, failed
//! attempts, last failure and the time of cert-manager's next automatic retry.

use clap::{Args, Subcommand};
use druidctl::certs::CertificateReport;
use druidctl::certs::renew as ops;
use druidctl::certs::report::CertificateRow;

use super::Context;
use super::renew::{cert_error, cert_targets};

/// Arguments of `cert`.
#[derive(Debug, Args)]
pub struct CertArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: CertCommand,
}

/// `cert` subcommands.
#[derive(Debug, Subcommand)]
pub enum CertCommand {
    /// Status of Certificates, with the time of the next automatic retry of a failing issuance.
    Status(CertStatusArgs),
}

/// Arguments of `cert status`.
#[derive(Debug, Args)]
pub struct CertStatusArgs {
    /// Certificates: NAME or NAMESPACE/NAME (default: every one in the namespace).
    #[arg(value_name = "CERTIFICATE")]
    pub certificates: Vec<String>,
    /// Every Certificate behind the TLS secrets this Etcd references.
    #[arg(long, value_name = "ETCD", conflicts_with = "certificates", value_parser = super::parse_etcd_ref)]
    pub etcd: Option<String>,
}

/// Runs `cert`.
pub async fn exec(ctx: &mut Context, args: CertArgs) -> anyhow::Result<()> {
    match args.command {
        CertCommand::Status(a) => status(ctx, a).await,
    }
}

async fn status(ctx: &mut Context, args: CertStatusArgs) -> anyhow::Result<()> {
    // No names lists everything in scope, like `status`.
    cert_targets(ctx, &args.certificates, args.etcd.as_deref(), args.certificates.is_empty(), "default")?;
    let cluster = ctx.connect().await?;
    let targets =
        cert_targets(ctx, &args.certificates, args.etcd.as_deref(), args.certificates.is_empty(), &cluster.namespace)?;
    let certs = ops::find(&cluster.client, &targets).await.map_err(cert_error)?;
    let report = CertificateReport { items: certs.iter().map(CertificateRow::of).collect() };
    ctx.printer.print(&report)?;
    Ok(())
}
