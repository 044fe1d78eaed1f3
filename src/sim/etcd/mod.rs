//! Real etcd member processes on loopback, and a small etcd v3 client over its JSON gateway.
//!
//! - [`binary`]: finds the `etcd` / `etcdctl` binaries (`DRUIDCTL_ETCD_BIN` or `PATH`).
//! - [`ports`]: free loopback ports that parallel tests do not fight over.
//! - [`process`]: a supervisor for one member process (start, stop, kill, restart; killed on drop and
//!   when this process dies).
//! - [`client`]: the etcd v3 API over etcd's JSON gRPC gateway (KV, cluster, maintenance, snapshots).
//! - [`cluster`]: a set of members started together, used by tests and the landscape.
//! - [`snapshot`]: restoring a snapshot file into a fresh data directory (`etcdctl snapshot restore`).
//! - [`simulated`]: an in-memory member with the same observable KV behaviour, for machines without etcd.

pub mod binary;
pub mod client;
pub mod cluster;
pub mod ports;
pub mod process;
pub mod simulated;
pub mod snapshot;

mod error;

pub use binary::{EtcdBinary, require_etcd};
pub use client::{EtcdClient, KeyValue, Member, MemberStatus};
pub use cluster::{LocalCluster, LocalClusterOptions};
pub use error::EtcdError;
pub use process::{ClusterState, MemberConfig, MemberProcess};
