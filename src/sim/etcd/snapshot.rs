//! Restoring an etcd snapshot file into a fresh data directory (`etcdctl snapshot restore`).

use std::path::Path;
use std::process::Stdio;

use super::{EtcdBinary, EtcdError, MemberConfig};

/// Restores `snapshot` into `config.data_dir` (which must not exist yet) as a single-member cluster
/// named `config.name` with `config`'s peer URL; start the member with [`ClusterState::New`] afterwards.
///
/// [`ClusterState::New`]: super::ClusterState::New
pub async fn restore_snapshot(binary: &EtcdBinary, snapshot: &Path, config: &MemberConfig) -> Result<(), EtcdError> {
    let etcdctl = binary.etcdctl()?;
    if let Some(parent) = config.data_dir.parent() {
        std::fs::create_dir_all(parent).map_err(|e| EtcdError::io("create", parent, e))?;
    }
    let out = tokio::process::Command::new(etcdctl)
        .env("ETCDCTL_API", "3")
        .arg("snapshot")
        .arg("restore")
        .arg(snapshot)
        .arg("--name")
        .arg(&config.name)
        .arg("--data-dir")
        .arg(&config.data_dir)
        .arg("--initial-cluster")
        .arg(format!("{}={}", config.name, config.peer_url()))
        .arg("--initial-advertise-peer-urls")
        .arg(config.peer_url())
        .arg("--initial-cluster-token")
        .arg(&config.initial_cluster_token)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| EtcdError::io("run", etcdctl, e))?;
    if !out.status.success() {
        return Err(EtcdError::Etcdctl {
            action: format!("snapshot restore {}", snapshot.display()),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}
