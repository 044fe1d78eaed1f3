//! `renew [CERTIFICATE…|--etcd ETCD|--all]`: mark Certificates for manual re-issuance exactly like `cmctl renew`
//! (`Issuing=True`, reason `ManuallyTriggered`); `--wait` follows each one to its new revision.

use std::time::Duration;

use clap::Args;
use druidctl::certs::renew::{self as ops, CertTargets};
use druidctl::certs::{CertError, RenewOptions, RenewOutcome};
use druidctl::kube::ClusterError;
use druidctl::kube::target::{TargetArgs, Targets, WhenUnnamed, resolve};
use druidctl::output::{Cell, OutputFormat, Printable, Table};

use super::{Context, parse_duration};

/// Arguments of `renew`.
#[derive(Debug, Args)]
pub struct RenewArgs {
    /// Certificates: NAME or NAMESPACE/NAME.
    #[arg(value_name = "CERTIFICATE")]
    pub certificates: Vec<String>,
    /// Every Certificate behind the TLS secrets this Etcd references (client, peer, backup).
    #[arg(long, value_name = "ETCD", conflicts_with_all = ["certificates", "all"])]
    pub etcd: Option<String>,
    /// Every Certificate in the namespace (with -A: in every namespace).
    #[arg(long, conflicts_with = "certificates")]
    pub all: bool,
    /// Wait until each Certificate has a new revision.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration, requires = "wait")]
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
    let args = |names: Vec<String>| TargetArgs {
        names,
        namespace: ctx.global.namespace.clone(),
        all_namespaces: ctx.global.all_namespaces,
        selector: ctx.global.selector.clone(),
    };
    if let Some(e) = etcd {
        return match resolve(&args(vec![e.to_string()]), default_ns, WhenUnnamed::RequireOneName, "etcd")? {
            Targets::Named(mut keys) if keys.len() == 1 => Ok(CertTargets::Etcd(keys.remove(0))),
            _ => Err(druidctl::kube::UsageError("--etcd takes one etcd name".into())),
        };
    }
    let when = if all { WhenUnnamed::ListAll } else { WhenUnnamed::RequireNameOrSelector };
    resolve(&args(names.to_vec()), default_ns, when, "certificate").map(CertTargets::Certificates).map_err(|e| {
        if names.is_empty() && !all && ctx.global.selector.is_none() {
            druidctl::kube::UsageError(
                "name the certificates to renew, or use --etcd ETCD, --all or -l SELECTOR".into(),
            )
        } else {
            e
        }
    })
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

struct Outcomes(Vec<RenewOutcome>);

impl Printable for Outcomes {
    fn table(&self, _wide: bool) -> Table {
        let mut t = Table::new(&["result"]);
        for o in &self.0 {
            t.row(vec![Cell::plain(&o.message)]);
        }
        t
    }
    fn document(&self) -> serde_json::Value {
        serde_json::json!({"apiVersion": druidctl::output::status::STATUS_API_VERSION, "kind": "RenewResultList", "items": self.0})
    }
    fn names(&self) -> Vec<String> {
        self.0.iter().map(|o| format!("certificate.cert-manager.io/{}", o.name)).collect()
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
        return Err(ClusterError::NotFound {
            kind: "certificate".into(),
            name: ctx.global.selector.clone().map(|s| format!("matching -l {s}")).unwrap_or_default(),
            namespace: if ctx.global.all_namespaces {
                "(all)".into()
            } else {
                ctx.global.namespace.clone().unwrap_or(cluster.namespace.clone())
            },
            hint: None,
        }
        .into());
    }
    let opts = RenewOptions { wait: args.wait.then_some(args.timeout) };
    let outcomes = ops::renew(&cluster.client, &certs, &opts).await.map_err(cert_error)?;
    match ctx.printer.format() {
        OutputFormat::Table | OutputFormat::Wide => {
            let text: String = outcomes.iter().map(|o| format!("{}\n", o.message)).collect();
            ctx.printer.text(&text)?;
        }
        _ => ctx.printer.print(&Outcomes(outcomes))?,
    }
    Ok(())
}
