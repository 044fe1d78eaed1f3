//! druidctl: operations toolkit for etcd clusters managed by etcd-druid.
//!
//! The binary (`src/main.rs`, `src/cmd/`) is a thin layer over this library:
//! typed APIs (`api`), cluster access (`kube`), the health model (`health`),
//! output (`output`), the task registry (`tasks`), the reconciler (`reconciler`),
//! the runbook engine (`runbook`), and the embedded API server and simulated
//! landscape used for tests, `playground` and `demo` (`sim`).

pub mod api;
pub mod certs;
pub mod health;
pub mod kube;
pub mod machines;
pub mod output;
pub mod reconciler;
pub mod runbook;
pub mod sim;
pub mod tasks;
