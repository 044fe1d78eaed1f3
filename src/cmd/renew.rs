//! `renew [CERTIFICATE…|--etcd ETCD|--all]`: mark Certificates for manual re-issuance exactly like `cmctl renew`
//! (`Issuing=True`, reason `ManuallyTriggered`); `--wait` follows each one to its new revision.

use std::time::Duration;

use clap::Args;
use druidctl::certs::renew::{self as ops, CertTargets};
use druidctl::certs::{CertError, RenewOptions, RenewOutcome};
use druidctl::kube::ClusterError;

use super::{ActionResult, Context, none_found, print_results};

/// Arguments of `renew`.
#[derive(Debug, Args)]
pub struct RenewArgs {
    /// Certificates: NAME or NAMESPACE/NAME.
    #[arg(value_name = "CERTIFICATE")]
    pub certificates: Vec<String>,
    /// Every Certificate behind the TLS secrets this Etcd references (client, peer, backup).
    #[arg(long, value_name = "ETCD", conflicts_with_all = ["certificates", "all"], value_parser = super::parse_etcd_ref)]
    pub etcd: Option<String>,
    /// Every Certificate in the namespace (with -A: in every namespace).
    #[arg(long, conflicts_with = "certificates")]
    pub all: bool,
    /// Wait until each Certificate has a new revision.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = super::duration_in(1000, super::DAY), requires = "wait")]
    pub timeout: Duration,
}

/// Resolves certificate targets (names, `--etcd`, `--all`, `-l`, `-A`) against `default_ns`.
pub fn cert_targets(
    ctx: &Context,
    names: &[String],
    etcd: Option<&str>,
    all: bool,
    default_ns: &str,
) -> Result<CertTargets, druidctl::kube::UsageError> {
    ops::resolve_targets(&ctx.target_args(names), etcd, all, default_ns)
}

/// Maps library errors so the exit code follows docs/exit-codes.md.
pub fn cert_error(e: CertError) -> anyhow::Error {
    match e {
        CertError::Cluster(c) => c.into(),
        CertError::NoCertificates { etcd, namespace } => ClusterError::NotFound {
            kind: "certificate for etcd".into(),
            name: etcd,
            namespace,
            hint: Some("none of the TLS secrets it references is a Certificate's secretName".into()),
        }
        .into(),
        other => other.into(),
    }
}

impl ActionResult for RenewOutcome {
    fn message(&self) -> &str {
        &self.message
    }
    fn resource_name(&self) -> String {
        format!("certificate.cert-manager.io/{}", self.name)
    }
}

/// Runs `renew`.
pub async fn exec(ctx: &mut Context, args: RenewArgs) -> anyhow::Result<()> {
    // Bad input fails before connecting.
    cert_targets(ctx, &args.certificates, args.etcd.as_deref(), args.all, "default")?;
    let cluster = ctx.connect().await?;
    let targets = cert_targets(ctx, &args.certificates, args.etcd.as_deref(), args.all, &cluster.namespace)?;
    let certs = ops::find(&cluster.client, &targets).await.map_err(cert_error)?;
    if certs.is_empty() {
        return Err(none_found(ctx, "certificate", &cluster.namespace).into());
    }
    let opts = RenewOptions { wait: args.wait.then_some(args.timeout) };
    let outcomes = ops::renew(&cluster.client, &certs, &opts).await.map_err(cert_error)?;
    print_results(ctx, "RenewResultList", outcomes)
}
