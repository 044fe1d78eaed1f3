//! Building a client the way kubectl does: `--kubeconfig`, else the `KUBECONFIG` list (merged, missing files
//! skipped), else `~/.kube/config`, else the in-cluster service account; `--context` picks the context; the
//! namespace is `-n`, else the context's, else `default`; `--request-timeout` bounds every request.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};

use super::error::ClusterError;

/// How to reach the cluster, resolved from flags and environment.
#[derive(Debug, Clone, Default)]
pub struct AccessOptions {
    /// `--kubeconfig`: this file only, ignoring `KUBECONFIG`.
    pub kubeconfig: Option<PathBuf>,
    /// `--context`.
    pub context: Option<String>,
    /// `-n/--namespace`.
    pub namespace: Option<String>,
    /// `--request-timeout`; `None` means no limit.
    pub request_timeout: Option<Duration>,
    /// Prefer the in-cluster service account even when a kubeconfig exists (`serve`).
    pub prefer_in_cluster: bool,
}

/// A connected client and what it resolved to.
#[derive(Clone)]
pub struct Cluster {
    /// The client.
    pub client: Client,
    /// Namespace for commands that need one.
    pub namespace: String,
    /// Name of the kubeconfig context used, if any.
    pub context: Option<String>,
    /// URL of the API server.
    pub server: String,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("namespace", &self.namespace)
            .field("context", &self.context)
            .field("server", &self.server)
            .finish()
    }
}

/// Loads the kubeconfig kubectl would use, or `None` when there is none.
pub fn load_kubeconfig(explicit: Option<&Path>) -> Result<Option<Kubeconfig>, ClusterError> {
    let read = |p: &Path| {
        Kubeconfig::read_from(p).map_err(|e| ClusterError::Kubeconfig(format!("{}: {}", p.display(), short(&e))))
    };
    if let Some(p) = explicit {
        if !p.exists() {
            return Err(ClusterError::Kubeconfig(format!("{}: no such file", p.display())));
        }
        return read(p).map(Some);
    }
    if let Some(list) = std::env::var_os("KUBECONFIG") {
        let paths: Vec<PathBuf> = std::env::split_paths(&list).filter(|p| !p.as_os_str().is_empty()).collect();
        if !paths.is_empty() {
            // kubectl skips files of the list that do not exist; the first file to set a value wins.
            let mut merged: Option<Kubeconfig> = None;
            for p in paths.iter().filter(|p| p.exists()) {
                let next = read(p)?;
                merged = Some(match merged {
                    None => next,
                    Some(m) => m.merge(next).map_err(|e| ClusterError::Kubeconfig(short(&e)))?,
                });
            }
            return Ok(merged);
        }
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    match home.map(|h| h.join(".kube").join("config")) {
        Some(p) if p.exists() => read(&p).map(Some),
        _ => Ok(None),
    }
}

fn short(e: &KubeconfigError) -> String {
    e.to_string()
}

fn in_cluster_available() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

/// Resolves the configuration without connecting: the `kube::Config`, the namespace and the context name.
pub async fn resolve_config(opts: &AccessOptions) -> Result<(Config, Option<String>), ClusterError> {
    let (mut config, context) = if opts.prefer_in_cluster && in_cluster_available() {
        (Config::incluster().map_err(|e| ClusterError::Kubeconfig(e.to_string()))?, None)
    } else {
        match load_kubeconfig(opts.kubeconfig.as_deref())? {
            Some(kc) => {
                let context = opts.context.clone().or_else(|| kc.current_context.clone());
                if let Some(ctx) = &opts.context
                    && !kc.contexts.iter().any(|c| &c.name == ctx)
                {
                    return Err(ClusterError::UnknownContext(ctx.clone()));
                }
                let kopts = KubeConfigOptions { context: opts.context.clone(), cluster: None, user: None };
                let config = Config::from_custom_kubeconfig(kc, &kopts).await.map_err(|e| match e {
                    KubeconfigError::CurrentContextNotSet => {
                        ClusterError::Kubeconfig("the kubeconfig has no current-context; pass --context".to_string())
                    }
                    other => ClusterError::Kubeconfig(other.to_string()),
                })?;
                (config, context)
            }
            None if in_cluster_available() => {
                (Config::incluster().map_err(|e| ClusterError::Kubeconfig(e.to_string()))?, None)
            }
            None => return Err(ClusterError::NoConfig),
        }
    };
    if let Some(ns) = &opts.namespace {
        config.default_namespace = ns.clone();
    }
    if let Some(t) = opts.request_timeout {
        config.connect_timeout = Some(t);
        config.read_timeout = Some(t);
        config.write_timeout = Some(t);
    }
    Ok((config, context))
}

/// Connects as kubectl would (see the module doc).
pub async fn connect(opts: &AccessOptions) -> Result<Cluster, ClusterError> {
    let (config, context) = resolve_config(opts).await?;
    let namespace = config.default_namespace.clone();
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(|e| ClusterError::Kubeconfig(e.to_string()))?;
    Ok(Cluster { client, namespace, context, server })
}

/// Parses kubectl's `--request-timeout`: `0` (no limit), a plain number of seconds, or a duration such as
/// `500ms`, `30s`, `5m`, `1h`, `1m30s`.
pub fn parse_request_timeout(text: &str) -> Result<Option<Duration>, String> {
    let d = parse_duration(text)?;
    Ok(if d.is_zero() { None } else { Some(d) })
}

/// Parses a Go-style duration (`1h2m3s`, `500ms`) or a plain number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let bad = || format!("invalid duration {text:?}: use e.g. 30s, 5m, 1h or a number of seconds");
    if t.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = t.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let value: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total += Duration::from_secs_f64(value * factor);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_timeout_accepts_kubectl_forms() {
        assert_eq!(parse_request_timeout("0").unwrap(), None);
        assert_eq!(parse_request_timeout("15").unwrap(), Some(Duration::from_secs(15)));
        assert_eq!(parse_request_timeout("1m30s").unwrap(), Some(Duration::from_secs(90)));
        assert_eq!(parse_request_timeout("500ms").unwrap(), Some(Duration::from_millis(500)));
        assert!(parse_request_timeout("soon").is_err());
        assert!(parse_request_timeout("5x").is_err());
        assert!(parse_request_timeout("-1s").is_err());
    }
}
