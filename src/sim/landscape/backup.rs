//! The local object store of the backup-restore sidecar: full snapshots (real etcd snapshot files) and
//! delta snapshots (the keys changed since the previous snapshot), named like etcd-backup-restore's
//! `Full-<startRev>-<endRev>-<unix>` and `Incr-<startRev>-<endRev>-<unix>`.
//!
//! Limitation: a delta snapshot records puts only (it is read with a `min_mod_revision` range, not a
//! watch), so deletes after the last full snapshot are not replayed on restore.

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};

use crate::sim::etcd::{EtcdClient, EtcdError, KeyValue};

/// Kind of a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotKind {
    /// A full etcd snapshot (database file).
    Full,
    /// Changes since the previous snapshot.
    Incr,
}

/// One snapshot in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotInfo {
    /// Full or Incr.
    pub kind: SnapshotKind,
    /// First revision covered.
    pub start_revision: i64,
    /// Last revision covered.
    pub last_revision: i64,
    /// Unix seconds when it was taken.
    pub created_on: i64,
    /// File name in the store.
    pub snap_name: String,
}

impl SnapshotInfo {
    fn parse(name: &str) -> Option<SnapshotInfo> {
        let mut parts = name.split('-');
        let kind = match parts.next()? {
            "Full" => SnapshotKind::Full,
            "Incr" => SnapshotKind::Incr,
            _ => return None,
        };
        let start_revision = parts.next()?.parse().ok()?;
        let last_revision = parts.next()?.parse().ok()?;
        let created_on = parts.next()?.parse().ok()?;
        Some(SnapshotInfo { kind, start_revision, last_revision, created_on, snap_name: name.to_string() })
    }
}

/// A delta snapshot file's content.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Delta {
    events: Vec<(String, String, i64)>,
}

/// The store directory of one Etcd's backups.
#[derive(Debug, Clone)]
pub struct ObjectStore {
    dir: PathBuf,
}

impl ObjectStore {
    /// A store rooted at `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>) -> ObjectStore {
        ObjectStore { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every snapshot, oldest first.
    pub fn list(&self) -> Vec<SnapshotInfo> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut v: Vec<SnapshotInfo> =
            rd.flatten().filter_map(|e| SnapshotInfo::parse(&e.file_name().to_string_lossy())).collect();
        v.sort_by_key(|s| (s.last_revision, s.created_on, s.kind == SnapshotKind::Incr));
        v
    }

    /// The newest full snapshot and the deltas taken after it (in order).
    pub fn latest_chain(&self) -> Option<(SnapshotInfo, Vec<SnapshotInfo>)> {
        let all = self.list();
        let full = all
            .iter()
            .filter(|s| s.kind == SnapshotKind::Full)
            .max_by_key(|s| (s.last_revision, s.created_on))?
            .clone();
        let deltas =
            all.into_iter().filter(|s| s.kind == SnapshotKind::Incr && s.start_revision > full.last_revision).collect();
        Some((full, deltas))
    }

    /// Highest revision covered by any snapshot.
    pub fn last_revision(&self) -> Option<i64> {
        self.list().iter().map(|s| s.last_revision).max()
    }

    /// Copies the newest `max_full` full snapshots (all when `None`) and the deltas after the oldest of
    /// them into `target`; returns how many files were copied.
    pub fn copy_to(&self, target: &ObjectStore, max_full: Option<usize>) -> Result<usize, EtcdError> {
        let all = self.list();
        let mut fulls: Vec<&SnapshotInfo> = all.iter().filter(|s| s.kind == SnapshotKind::Full).collect();
        if let Some(n) = max_full {
            fulls = fulls.split_off(fulls.len().saturating_sub(n));
        }
        let from = fulls.first().map(|f| f.last_revision).unwrap_or(0);
        std::fs::create_dir_all(&target.dir).map_err(|e| EtcdError::io_pub("create", &target.dir, e))?;
        let mut copied = 0;
        for s in all.iter().filter(|s| s.last_revision >= from && (s.kind == SnapshotKind::Incr || fulls.contains(s))) {
            let dest = target.path(s);
            std::fs::copy(self.path(s), &dest).map_err(|e| EtcdError::io_pub("copy to", &dest, e))?;
            copied += 1;
        }
        Ok(copied)
    }

    /// Path of a snapshot file.
    pub fn path(&self, s: &SnapshotInfo) -> PathBuf {
        self.dir.join(&s.snap_name)
    }

    /// Takes a full snapshot from `client` into the store.
    pub async fn take_full(&self, client: &EtcdClient) -> Result<SnapshotInfo, EtcdError> {
        self.take_full_as(client, None).await
    }

    /// Takes a full snapshot, naming it after `revision` when given (a compacted snapshot stands for the
    /// source revision of the last delta it contains, not the revision of the etcd that produced it).
    pub async fn take_full_as(&self, client: &EtcdClient, revision: Option<i64>) -> Result<SnapshotInfo, EtcdError> {
        let tmp = self.dir.join(format!(".full-{}.tmp", uuid::Uuid::new_v4()));
        let rev = client.snapshot_to_file(&tmp).await?;
        let info = SnapshotInfo {
            kind: SnapshotKind::Full,
            start_revision: 0,
            last_revision: revision.unwrap_or(rev),
            created_on: jiff::Timestamp::now().as_second(),
            snap_name: String::new(),
        };
        let info = SnapshotInfo { snap_name: name(&info), ..info };
        let dest = self.path(&info);
        std::fs::rename(&tmp, &dest).map_err(|e| EtcdError::Io { action: "rename", path: dest, source: e })?;
        Ok(info)
    }

    /// Takes a delta snapshot of everything changed after the newest snapshot; `None` when nothing changed.
    pub async fn take_delta(&self, client: &EtcdClient) -> Result<Option<SnapshotInfo>, EtcdError> {
        let since = self.last_revision().unwrap_or(0) + 1;
        let (changed, now) = client.changed_since(since).await?;
        if changed.is_empty() || now < since {
            return Ok(None);
        }
        let info = SnapshotInfo {
            kind: SnapshotKind::Incr,
            start_revision: since,
            last_revision: now,
            created_on: jiff::Timestamp::now().as_second(),
            snap_name: String::new(),
        };
        let info = SnapshotInfo { snap_name: name(&info), ..info };
        let delta = Delta {
            events: changed
                .iter()
                .map(|kv: &KeyValue| (B64.encode(&kv.key), B64.encode(&kv.value), kv.mod_revision))
                .collect(),
        };
        let dest = self.path(&info);
        std::fs::create_dir_all(&self.dir).map_err(|e| EtcdError::io_pub("create", &self.dir, e))?;
        std::fs::write(&dest, serde_json::to_vec(&delta).unwrap_or_default())
            .map_err(|e| EtcdError::io_pub("write", &dest, e))?;
        Ok(Some(info))
    }

    /// Replays a delta snapshot's puts through `client`.
    pub async fn apply_delta(&self, client: &EtcdClient, s: &SnapshotInfo) -> Result<usize, EtcdError> {
        let p = self.path(s);
        let bytes = std::fs::read(&p).map_err(|e| EtcdError::io_pub("read", &p, e))?;
        let delta: Delta = serde_json::from_slice(&bytes).map_err(|e| EtcdError::Decode {
            endpoint: p.display().to_string(),
            path: String::new(),
            message: e.to_string(),
        })?;
        for (k, v, _) in &delta.events {
            let (k, v) = (B64.decode(k).unwrap_or_default(), B64.decode(v).unwrap_or_default());
            client.put(k, v).await?;
        }
        Ok(delta.events.len())
    }
}

fn name(s: &SnapshotInfo) -> String {
    let kind = match s.kind {
        SnapshotKind::Full => "Full",
        SnapshotKind::Incr => "Incr",
    };
    format!("{kind}-{:08}-{:08}-{}", s.start_revision, s.last_revision, s.created_on)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_chain_is_the_newest_full_and_the_deltas_after_it() {
        let dir = tempfile::tempdir().unwrap();
        for n in [
            "Full-00000000-00000010-100",
            "Incr-00000011-00000012-101",
            "Full-00000000-00000020-102",
            "Incr-00000021-00000025-103",
            "junk",
        ] {
            std::fs::write(dir.path().join(n), b"x").unwrap();
        }
        let store = ObjectStore::new(dir.path());
        let (full, deltas) = store.latest_chain().unwrap();
        assert_eq!(full.last_revision, 20);
        assert_eq!(deltas.len(), 1);
        assert_eq!(deltas[0].start_revision, 21);
        assert_eq!(store.last_revision(), Some(25));
    }
}
