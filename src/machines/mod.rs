//! Machines and the nodes they back (machine-controller-manager, seeds/004 ~2146-2460): node ↔ machine
//! resolution, what runs on a node (etcd members and the quorum they carry, PodDisruptionBudgets that would
//! block a drain), and deletion through MCM's own switches (delete the Machine, with the `force-deletion` label to
//! skip the drain; without access to Machines, delete the Node on MCM v0.61+ or annotate it
//! `trigger-deletion-by-mcm` on MCM up to v0.60). Machines may be in another cluster than Nodes.
//!
//! - [`impact`]: pure: resolution and the blast radius of removing a node.
//! - [`delete`]: the cluster operations (inspect, delete, wait for the replacement).

pub mod delete;
pub mod impact;

pub use delete::{DeleteOptions, DeletionOutcome, MachineAccess, MachineClusterRef, MachineError, MachineTarget};
pub use impact::{EtcdImpact, NodeImpact, PdbBlock, machine_for_node};
