//! Typed resources druidctl reads and writes: the Etcd subset, `EtcdOperatorTask` (with its generated CRD),
//! cert-manager `Certificate` and MCM `Machine`/`MachineSet` subsets, well-known names, and targeted patches.

pub mod certificate;
pub mod etcd;
pub mod machine;
pub mod manifests;
pub mod names;
pub mod patch;
pub mod task;

pub use certificate::Certificate;
pub use etcd::Etcd;
pub use machine::{Machine, MachineSet};
pub use task::{EtcdOperatorTask, EtcdOperatorTaskSpec, EtcdOperatorTaskStatus, TaskState};

#[cfg(test)]
mod conformance;
