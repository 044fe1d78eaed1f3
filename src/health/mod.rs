//! The health model: quorum arithmetic, per-member health, conditions, backup freshness, annotations in effect
//! and recent tasks — pure functions over plain data (`assess`), fed by concurrent reads (`collect`). Shared by
//! `status` and by task preconditions.

pub mod assess;
pub mod collect;
pub mod conditions;
pub mod etcd_view;
pub mod member;
pub mod model;
pub mod quorum;
pub mod watch;

pub use assess::{HealthInputs, assess};
pub use collect::{
    OnEtcds, collect, collect_listed, collect_listed_then, collect_named, collect_named_then, observe_etcd,
    observe_etcd_with,
};
pub use model::{HealthReport, Verdict};
pub use quorum::Quorum;

/// `status` judged at least one Etcd not healthy (exit code "unhealthy").
#[derive(Debug, Clone, thiserror::Error)]
#[error("{unhealthy} of {total} etcd(s) not healthy: {first}")]
pub struct NotHealthy {
    /// How many are not healthy.
    pub unhealthy: usize,
    /// How many were judged.
    pub total: usize,
    /// `<namespace>/<name>: <summary>` of the first one.
    pub first: String,
}

/// `Err(NotHealthy)` when any report's verdict is not OK.
pub fn require_healthy(reports: &[HealthReport]) -> Result<(), NotHealthy> {
    let bad: Vec<&HealthReport> = reports.iter().filter(|r| !r.verdict.is_ok()).collect();
    match bad.first() {
        None => Ok(()),
        Some(r) => {
            Err(NotHealthy { unhealthy: bad.len(), total: reports.len(), first: format!("{}: {}", r.etcd, r.summary) })
        }
    }
}
