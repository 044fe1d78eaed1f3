//! Restoring a snapshot file into a fresh data directory (`etcdctl snapshot restore`, or its simulated twin).

use std::path::Path;
use std::process::Stdio;

use super::{EtcdBackend, EtcdBinary, EtcdError, MemberConfig, simulated};

/// Restores `snapshot` into `config.data_dir` for a member run by `backend`: [`restore_snapshot`] for real
/// etcd, [`simulated::restore_snapshot`] for simulated members. A snapshot of the other kind is refused.
pub async fn restore_snapshot_with(
    backend: &EtcdBackend,
    snapshot: &Path,
    config: &MemberConfig,
) -> Result<(), EtcdError> {
    match backend {
        EtcdBackend::Real(binary) => restore_snapshot(binary, snapshot, config).await,
        EtcdBackend::Simulated { .. } => simulated::restore_snapshot(snapshot, config),
    }
}

/// Restores `snapshot` into `config.data_dir` (which must not exist yet) as a single-member cluster
/// named `config.name` with `config`'s peer URL; start the member with [`ClusterState::New`] afterwards.
///
/// [`ClusterState::New`]: super::ClusterState::New
pub async fn restore_snapshot(binary: &EtcdBinary, snapshot: &Path, config: &MemberConfig) -> Result<(), EtcdError> {
    if simulated::is_snapshot_file(snapshot) {
        return Err(EtcdError::Etcdctl {
            action: format!("snapshot restore {}", snapshot.display()),
            message: "the snapshot was taken from a simulated member; restore it into a simulated member".into(),
        });
    }
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
