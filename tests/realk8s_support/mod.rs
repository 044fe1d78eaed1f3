//! The real kube-apiserver of `../shared/realk8s` for tests whose answer only the real server can give
//! (RBAC, admission). `DRUIDCTL_REALK8S_KUBECONFIG` reuses a running one; otherwise `realk8s.sh start` runs
//! with `REALK8S_DIR` and the `REALK8S_*_PORT` variables (defaults of its own, never the script's 6443), under
//! `flock` so parallel test processes start it once. The instance is left running for the next test process;
//! `realk8s.sh stop` with the same variables ends it.
//!
//! Without the script or when the server does not come up, a test skips with a note, and FAILS under CI
//! (env `CI` set).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// A reachable real API server.
pub struct RealK8s {
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
}

fn env_or(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}

fn unavailable(what: &str, why: String) -> Option<RealK8s> {
    if std::env::var_os("CI").is_some() {
        panic!("{what} needs the real kube-apiserver of ../shared/realk8s and CI is set: {why}");
    }
    eprintln!("skipping {what}: {why}");
    None
}

/// The real API server, started if needed; `None` (skip) outside CI when it cannot be had.
pub fn require(what: &str) -> Option<RealK8s> {
    if let Some(k) = std::env::var_os("DRUIDCTL_REALK8S_KUBECONFIG") {
        return Some(RealK8s { kubeconfig: k.into() });
    }
    let script = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/realk8s/realk8s.sh"));
    if !script.exists() {
        return unavailable(what, format!("{} does not exist", script.display()));
    }
    let dir = PathBuf::from(env_or("REALK8S_DIR", &std::env::temp_dir().join("druidctl-realk8s").to_string_lossy()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return unavailable(what, format!("cannot create {}: {e}", dir.display()));
    }
    let lock = dir.with_extension("lock");
    let out = Command::new("flock")
        .arg(&lock)
        .arg(&script)
        .arg("start")
        .env("REALK8S_DIR", &dir)
        .env("REALK8S_API_PORT", env_or("REALK8S_API_PORT", "36443"))
        .env("REALK8S_ETCD_PORT", env_or("REALK8S_ETCD_PORT", "32379"))
        .env("REALK8S_ETCD_PEER_PORT", env_or("REALK8S_ETCD_PEER_PORT", "32380"))
        .env("REALK8S_KCM_PORT", env_or("REALK8S_KCM_PORT", "30257"))
        .output();
    match out {
        Ok(o) if o.status.success() => Some(RealK8s { kubeconfig: dir.join("kubeconfig") }),
        Ok(o) => unavailable(
            what,
            format!("realk8s.sh start failed: {}", String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("")),
        ),
        Err(e) => unavailable(what, format!("cannot run flock/realk8s.sh: {e}")),
    }
}

impl RealK8s {
    /// An admin client.
    pub async fn client(&self) -> Client {
        let kc = Kubeconfig::read_from(&self.kubeconfig).expect("realk8s kubeconfig");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.expect("config");
        Client::try_from(cfg).expect("client")
    }

    /// A kubeconfig next to the admin one that authenticates with `token` instead (a ServiceAccount's).
    pub fn kubeconfig_with_token(&self, token: &str, namespace: &str, path: &std::path::Path) -> PathBuf {
        let mut kc = Kubeconfig::read_from(&self.kubeconfig).expect("realk8s kubeconfig");
        for u in kc.auth_infos.iter_mut() {
            if let Some(a) = u.auth_info.as_mut() {
                a.client_certificate = None;
                a.client_certificate_data = None;
                a.client_key = None;
                a.client_key_data = None;
                a.token = Some(token.to_string().into());
            }
        }
        for c in kc.contexts.iter_mut() {
            if let Some(ctx) = c.context.as_mut() {
                ctx.namespace = Some(namespace.into());
            }
        }
        std::fs::write(path, serde_yaml_ng_or_json(&kc)).expect("write kubeconfig");
        path.to_path_buf()
    }
}

// JSON is valid YAML: kubeconfigs may be written as JSON.
fn serde_yaml_ng_or_json(kc: &Kubeconfig) -> String {
    serde_json::to_string_pretty(kc).expect("kubeconfig serializes")
}
