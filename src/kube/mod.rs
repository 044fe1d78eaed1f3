//! Cluster access: clients built like kubectl builds them, target resolution (`NAME`, `NAMESPACE/NAME`, `-n`,
//! `-A`, `-l`), errors an operator can act on, waits, and the operations on Etcds the foundation commands run
//! (annotations, inventory of managed resources, install).

pub mod annotate;
pub mod config;
pub mod error;
pub mod etcds;
pub mod in_force;
pub mod install;
pub mod inventory;
mod one_connection;
pub mod slim;
pub mod slow_answer;
pub mod target;
pub mod wait;
pub mod watch;

pub use config::{AccessOptions, Cluster, connect, connect_for_reads};
pub use error::ClusterError;
pub use target::{ObjectKey, TargetArgs, Targets, UsageError};
