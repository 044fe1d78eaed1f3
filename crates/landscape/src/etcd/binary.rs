//! Locating the `etcd` and `etcdctl` binaries.

use std::path::{Path, PathBuf};

use super::EtcdError;

/// Paths of the etcd server binary and (when present) the matching `etcdctl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdBinary {
    /// The `etcd` server.
    pub etcd: PathBuf,
    /// `etcdctl`, used for snapshot restores; `None` when not installed.
    pub etcdctl: Option<PathBuf>,
}

impl EtcdBinary {
    /// Finds etcd: `DRUIDCTL_ETCD_BIN` when set (must exist), else `etcd` on `PATH`; none when
    /// `DRUIDCTL_ETCD_BIN=simulated` asks for simulated members.
    /// etcdctl: `DRUIDCTL_ETCDCTL_BIN`, else next to etcd, else on `PATH`.
    pub fn find() -> Option<EtcdBinary> {
        let etcd = match std::env::var_os("DRUIDCTL_ETCD_BIN") {
            Some(p) if p == SIMULATED => return None,
            Some(p) if !p.is_empty() => {
                let p = PathBuf::from(p);
                is_executable(&p).then_some(p)?
            }
            _ => which("etcd")?,
        };
        let etcdctl = std::env::var_os("DRUIDCTL_ETCDCTL_BIN")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .filter(|p| is_executable(p))
            .or_else(|| etcd.parent().map(|d| d.join("etcdctl")).filter(|p| is_executable(p)))
            .or_else(|| which("etcdctl"));
        Some(EtcdBinary { etcd, etcdctl })
    }

    /// Like [`EtcdBinary::find`], as a typed error.
    pub fn locate() -> Result<EtcdBinary, EtcdError> {
        Self::find().ok_or(EtcdError::BinaryNotFound)
    }

    /// The etcdctl path or [`EtcdError::EtcdctlNotFound`].
    pub fn etcdctl(&self) -> Result<&Path, EtcdError> {
        self.etcdctl.as_deref().ok_or(EtcdError::EtcdctlNotFound)
    }
}

/// The value of `DRUIDCTL_ETCD_BIN` that asks for simulated members even when etcd is installed.
pub const SIMULATED: &str = "simulated";

/// What runs the etcd members of the landscape: real etcd processes, or simulated members
/// ([`super::simulated`]) with the same client API when no etcd binary is available or they are asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcdBackend {
    /// Real etcd processes on loopback.
    Real(EtcdBinary),
    /// Simulated in-process members.
    Simulated {
        /// Why, in words (shown by `playground up`, `status` and `demo`).
        reason: String,
    },
}

impl EtcdBackend {
    /// The selection rule: simulated when `DRUIDCTL_ETCD_BIN=simulated`; else real etcd when a binary is found
    /// ([`EtcdBinary::find`]); else simulated, saying why.
    pub fn select() -> EtcdBackend {
        let env = std::env::var_os("DRUIDCTL_ETCD_BIN").filter(|v| !v.is_empty());
        if env.as_deref().is_some_and(|v| v == SIMULATED) {
            return EtcdBackend::simulated(format!("requested with DRUIDCTL_ETCD_BIN={SIMULATED}"));
        }
        match (EtcdBinary::find(), env) {
            (Some(b), _) => EtcdBackend::Real(b),
            (None, Some(p)) => EtcdBackend::simulated(format!(
                "DRUIDCTL_ETCD_BIN={} is not an executable file",
                std::path::Path::new(&p).display()
            )),
            (None, None) => {
                EtcdBackend::simulated("no etcd binary found on PATH (install etcd-server or set DRUIDCTL_ETCD_BIN)")
            }
        }
    }

    /// Simulated members, because of `reason`.
    pub fn simulated(reason: impl Into<String>) -> EtcdBackend {
        EtcdBackend::Simulated { reason: reason.into() }
    }

    /// Whether members are simulated.
    pub fn is_simulated(&self) -> bool {
        matches!(self, EtcdBackend::Simulated { .. })
    }

    /// One line for operators: `real etcd processes (/usr/bin/etcd)` or `simulated etcd members (<reason>)`.
    pub fn describe(&self) -> String {
        match self {
            EtcdBackend::Real(b) => format!("real etcd processes ({})", b.etcd.display()),
            EtcdBackend::Simulated { reason } => format!("simulated etcd members, not real etcd ({reason})"),
        }
    }
}

/// For tests that need real etcd: the binary, or `None` (the test should return early, printing why).
/// With `DRUIDCTL_REQUIRE_ETCD=1` a missing binary panics instead, so CI fails rather than skips.
pub fn require_etcd(test: &str) -> Option<EtcdBinary> {
    match EtcdBinary::find() {
        Some(b) => Some(b),
        None if std::env::var("DRUIDCTL_REQUIRE_ETCD").is_ok_and(|v| v == "1") => {
            panic!("{test}: DRUIDCTL_REQUIRE_ETCD=1 but no etcd binary was found (install etcd-server)")
        }
        None => {
            eprintln!("{test}: skipped, no etcd binary (set DRUIDCTL_REQUIRE_ETCD=1 to fail instead)");
            None
        }
    }
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
