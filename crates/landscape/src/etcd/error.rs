//! Errors of the etcd process supervisor and client.

use std::path::PathBuf;
use std::time::Duration;

/// What went wrong talking to, or running, an etcd member.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No `etcd` binary on `PATH` and none named by `DRUIDCTL_ETCD_BIN`.
    #[error("no etcd binary found: install Debian's etcd-server or set DRUIDCTL_ETCD_BIN")]
    BinaryNotFound,
    /// No `etcdctl` binary next to `etcd` or on `PATH` (needed for snapshot restores).
    #[error("no etcdctl binary found: install Debian's etcd-client or set DRUIDCTL_ETCDCTL_BIN")]
    EtcdctlNotFound,
    /// The member process could not be spawned.
    #[error("cannot start etcd member {name}: {source}")]
    Spawn {
        /// Member name.
        name: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The member process exited before it became reachable.
    #[error("etcd member {name} exited during startup ({status}); see {log}")]
    ExitedEarly {
        /// Member name.
        name: String,
        /// Exit status as text.
        status: String,
        /// Log file of the member.
        log: PathBuf,
    },
    /// The member did not become ready in time.
    #[error("etcd member {name} not ready after {timeout:?}; see {log}")]
    NotReady {
        /// Member name.
        name: String,
        /// How long was waited.
        timeout: Duration,
        /// Log file of the member.
        log: PathBuf,
    },
    /// A request did not complete in time (e.g. a write while the cluster has no quorum).
    #[error("etcd request {path} to {endpoint} timed out after {timeout:?}")]
    Timeout {
        /// Client URL of the member.
        endpoint: String,
        /// Gateway path.
        path: String,
        /// Timeout applied.
        timeout: Duration,
    },
    /// The member could not be reached at all.
    #[error("cannot reach etcd at {endpoint}: {message}")]
    Unavailable {
        /// Client URL of the member.
        endpoint: String,
        /// Transport error.
        message: String,
    },
    /// The member answered with an error.
    #[error("etcd at {endpoint} refused {path}: {message} (grpc code {code})")]
    Server {
        /// Client URL of the member.
        endpoint: String,
        /// Gateway path.
        path: String,
        /// gRPC status code reported by the gateway.
        code: i64,
        /// etcd's error message.
        message: String,
    },
    /// The answer could not be understood.
    #[error("unexpected answer from etcd at {endpoint} to {path}: {message}")]
    Decode {
        /// Client URL of the member.
        endpoint: String,
        /// Gateway path.
        path: String,
        /// What did not parse.
        message: String,
    },
    /// An `etcdctl` invocation failed.
    #[error("etcdctl {action} failed: {message}")]
    Etcdctl {
        /// What etcdctl was asked to do.
        action: String,
        /// Its stderr, trimmed.
        message: String,
    },
    /// A file system operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
}

impl EtcdError {
    /// True when the error means "no answer in time / member unreachable", as opposed to a refusal.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, EtcdError::Timeout { .. } | EtcdError::Unavailable { .. })
            || matches!(self, EtcdError::Server { message, .. } if message.contains("no leader") || message.contains("timed out") || message.contains("leader changed"))
    }

    /// An [`EtcdError::Io`] for `action` on `path`.
    pub fn io_pub(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EtcdError::Io { action, path: path.into(), source }
    }

    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EtcdError::Io { action, path: path.into(), source }
    }
}
