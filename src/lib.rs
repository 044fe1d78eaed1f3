//! druidctl: operations toolkit for etcd clusters managed by etcd-druid.
//!
//! The binary (`src/main.rs`, `src/cmd/`) is a thin layer over this library:
//! typed APIs (`api`), cluster access (`kube`), etcd's own view of its members (`etcd`), the health model (`health`),
//! member logs (`logs`), incident bundles (`report`), output (`output`), the task registry (`tasks`), the
//! reconciler (`reconciler`), the runbook engine (`runbook`), running one task from the CLI (`taskrun`),
//! certificates (`certs`) and machines (`machines`).
//!
//! The typed resources live in the `druid-api` crate, re-exported as [`api`]. The embedded API server
//! (`kube-sim`) and the simulated landscape (`landscape`) are separate crates: only the `playground` and
//! `demo` commands and the tests use them, never this library (`tests/workspace_boundaries.rs`).

pub use druid_api as api;
pub mod certs;
pub mod etcd;
pub mod health;
pub mod kube;
pub mod logs;
pub mod machines;
pub mod output;
pub mod reconciler;
pub mod report;
pub mod runbook;
pub mod taskrun;
pub mod tasks;
