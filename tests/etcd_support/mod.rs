//! Shared by `landscape_etcd` (real etcd) and `sim_members` (simulated members): a member restored from a
//! snapshot chain, and the fallback to a full snapshot once history is compacted.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use landscape::backup::{ObjectStore, SnapshotInfo, SnapshotKind};
use landscape::etcd::snapshot::restore_snapshot_with;
use landscape::etcd::{EtcdBackend, EtcdClient, MemberConfig, MemberProcess};

/// Restores the full snapshot `full` of `store` into a fresh member `restored-0` under `dir` (`r/data`, `r.log`)
/// and waits until it serves.
pub async fn restore_fresh_member(
    backend: &EtcdBackend,
    store: &ObjectStore,
    full: &SnapshotInfo,
    dir: &Path,
) -> MemberProcess {
    let cfg = MemberConfig::new("restored-0", dir.join("r/data"), dir.join("r.log"));
    restore_snapshot_with(backend, &store.path(full), &cfg).await.unwrap();
    let r = MemberProcess::spawn_with(backend, cfg).unwrap();
    r.wait_serving(Duration::from_secs(20)).await.unwrap();
    r
}

/// History compacted past the last snapshot: no delta can be taken, a full snapshot is taken instead (a new store
/// under `dir/store2`).
pub async fn assert_compacted_history_takes_a_full_snapshot(rc: &EtcdClient, dir: &Path) {
    let store2 = ObjectStore::new(dir.join("store2"));
    store2.take_full(rc).await.unwrap();
    rc.put("/x", "1").await.unwrap();
    let rev = rc.put("/y", "2").await.unwrap();
    rc.compact(rev).await.unwrap();
    let instead = store2.take_delta(rc).await.unwrap().unwrap();
    assert_eq!((instead.kind, instead.last_revision), (SnapshotKind::Full, rev));
}
