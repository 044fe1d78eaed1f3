//! Typed resources druidctl reads and writes: the Etcd subset, `EtcdOperatorTask` (with its generated CRD),
//! cert-manager `Certificate` and MCM `Machine`/`MachineSet` subsets, well-known names, and targeted patches,
//! and the vendored upstream CRDs ([`crds`]).
//!
//! Shared by the product (`druidctl`) and the simulated landscape: a constant both need (a label, an
//! annotation, a resource name) lives here. This crate depends only on kube, k8s-openapi and serde; it must
//! not depend on `druidctl`, `kube-sim` or `landscape` (`tests/workspace_boundaries.rs` checks that).

pub mod certificate;
pub mod crds;
pub mod etcd;
pub mod machine;
pub mod manifests;
pub mod names;
pub mod opstask;
pub mod patch;
pub mod quantity;
pub mod task;

pub use certificate::Certificate;
pub use etcd::Etcd;
pub use machine::{Machine, MachineSet};
pub use opstask::EtcdOpsTask;
pub use task::{EtcdOperatorTask, EtcdOperatorTaskSpec, EtcdOperatorTaskStatus, TaskState};

#[cfg(test)]
mod conformance;
