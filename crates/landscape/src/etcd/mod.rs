//! etcd members on loopback (real processes, or simulated members without an etcd binary), and a small etcd
//! v3 client over its JSON gateway.
//!
//! - [`binary`]: finds the `etcd` / `etcdctl` binaries (`DRUIDCTL_ETCD_BIN` or `PATH`) and selects the
//!   [`EtcdBackend`]: real etcd when found, else (or with `DRUIDCTL_ETCD_BIN=simulated`) simulated members.
//! - [`ports`]: free loopback ports that parallel tests do not fight over.
//! - [`process`]: a supervisor for one member process (start, stop, kill, restart; killed on drop and
//!   when this process dies), or for a simulated member.
//! - [`client`]: the etcd v3 API over etcd's JSON gRPC gateway (KV, cluster, maintenance, snapshots).
//! - [`cluster`]: a set of members started together, used by tests and the landscape.
//! - [`snapshot`]: restoring a snapshot file into a fresh data directory (`etcdctl snapshot restore`).
//! - [`simulated`]: simulated members serving the same gateway API on loopback (membership, quorum, KV,
//!   watch history, compaction, defragmentation, snapshots), for machines without etcd.

pub mod binary;
pub mod client;
pub mod cluster;
pub mod ports;
pub mod process;
pub mod simulated;
pub mod snapshot;

mod error;

pub use binary::{EtcdBackend, EtcdBinary, require_etcd};
pub use client::{EtcdClient, KeyValue, Member, MemberStatus, WatchEvent, WatchHistory};
pub use cluster::{LocalCluster, LocalClusterOptions};
pub use error::EtcdError;
pub use process::{ClusterState, MemberConfig, MemberProcess};
