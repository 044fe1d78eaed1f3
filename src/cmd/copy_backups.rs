//! `copy-backups ETCD --source PROVIDER:CONTAINER/PREFIX --target …`: a `CopyBackupsTask`.

use clap::Args;
use druidctl::api::task::types;
use druidctl::kube::UsageError;
use serde_json::{Value, json};

use super::Context;
use super::task::{RunArgs, run_task, shortcut_waits};

/// Arguments of `copy-backups`.
#[derive(Debug, Args)]
pub struct CopyBackupsArgs {
    /// The Etcd: NAME or NAMESPACE/NAME.
    #[arg(value_name = "ETCD", value_parser = super::parse_etcd_ref, add = clap_complete::engine::ArgValueCompleter::new(super::completion::etcd_names))]
    pub etcd: String,
    /// Source store: PROVIDER:CONTAINER/PREFIX (e.g. S3:bucket/shoot--a/etcd-main).
    #[arg(long, value_name = "STORE")]
    pub source: String,
    /// Target store: PROVIDER:CONTAINER/PREFIX.
    #[arg(long, value_name = "STORE")]
    pub target: String,
    /// Secret with the source store's credentials.
    #[arg(long, value_name = "SECRET", value_parser = super::parse_object_name)]
    pub source_secret: Option<String>,
    /// Secret with the target store's credentials.
    #[arg(long, value_name = "SECRET", value_parser = super::parse_object_name)]
    pub target_secret: Option<String>,
    /// Only copy backups younger than this many days.
    #[arg(long, value_name = "DAYS", value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub max_backup_age: Option<u32>,
    /// Copy at most this many backups, newest first.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_backups: Option<u32>,
    /// Return once the task is created instead of following it to the end.
    #[arg(long, conflicts_with_all = ["wait", "local"])]
    pub no_wait: bool,
    /// How to run it.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Parses `PROVIDER:CONTAINER/PREFIX` into an etcd-druid `StoreSpec`.
pub fn parse_store(flag: &str, text: &str, secret: Option<&str>) -> Result<Value, UsageError> {
    let bad = || {
        UsageError(format!("--{flag} {text:?}: expected PROVIDER:CONTAINER/PREFIX, e.g. S3:bucket/shoot--a/etcd-main"))
    };
    let (provider, rest) = text.split_once(':').ok_or_else(bad)?;
    let (container, prefix) = rest.split_once('/').ok_or_else(bad)?;
    if provider.is_empty() || container.is_empty() || prefix.is_empty() {
        return Err(bad());
    }
    let mut store = json!({"provider": provider, "container": container, "prefix": prefix});
    if let Some(s) = secret {
        store["secretRef"] = json!({"name": s});
    }
    Ok(store)
}

/// Runs `copy-backups`.
pub async fn exec(ctx: &mut Context, args: CopyBackupsArgs) -> anyhow::Result<()> {
    let source = parse_store("source", &args.source, args.source_secret.as_deref())?;
    let target = parse_store("target", &args.target, args.target_secret.as_deref())?;
    let place = |v: &Value| (v["provider"].clone(), v["container"].clone(), v["prefix"].clone());
    if place(&source) == place(&target) {
        return Err(UsageError(format!(
            "--source and --target name the same store {:?}; copying backups onto themselves does nothing",
            args.source
        ))
        .into());
    }
    let mut config = json!({
        "sourceStore": source,
        "targetStore": target,
    });
    if let Some(a) = args.max_backup_age {
        config["maxBackupAge"] = json!(a);
    }
    if let Some(n) = args.max_backups {
        config["maxBackups"] = json!(n);
    }
    // JSON is YAML: the config string stays readable in `task describe`.
    run_task(ctx, types::COPY_BACKUPS, &args.etcd, Some(config.to_string()), &shortcut_waits(&args.run, args.no_wait))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_parse_from_provider_container_prefix() {
        let s = parse_store("source", "S3:bucket/shoot--a/etcd-main", Some("creds")).unwrap();
        assert_eq!(
            s,
            json!({"provider": "S3", "container": "bucket", "prefix": "shoot--a/etcd-main", "secretRef": {"name": "creds"}})
        );
        assert!(parse_store("target", "bucket/prefix", None).is_err());
        assert!(parse_store("target", "S3:bucket", None).is_err());
    }
}
