//! Machines and the nodes they back (machine-controller-manager, seeds/004 ~2146-2460): node ↔ machine
//! resolution, what runs on a node (etcd members and the quorum they carry, PodDisruptionBudgets that would
//! block a drain), and deletion through MCM's own switches (`force-deletion` label on the Machine, or
//! `trigger-deletion-by-mcm` annotation on the Node).
//!
//! - [`impact`]: pure: resolution and the blast radius of removing a node.
//! - [`delete`]: the cluster operations (inspect, delete, wait for the replacement).

pub mod delete;
pub mod impact;

pub use delete::{DeleteOptions, DeletionOutcome, MachineError, MachineTarget};
pub use impact::{EtcdImpact, NodeImpact, PdbBlock, machine_for_node};
