//! The local object store of the backup-restore sidecar: full snapshots (etcd snapshot files, or a simulated
//! member's) and delta snapshots (every put and delete since the previous snapshot, read with a watch like
//! etcd-backup-restore does), named like etcd-backup-restore's `Full-<startRev>-<endRev>-<unix>` and
//! `Incr-<startRev>-<endRev>-<unix>`. Restoring replays a delta's events in order, deletes included.

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};

use crate::sim::etcd::{EtcdClient, EtcdError, WatchEvent, WatchHistory};

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
    events: Vec<DeltaEvent>,
}

/// What a delta event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Change {
    Put,
    Delete,
}

/// One event of a delta snapshot (keys and values base64).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
enum DeltaEvent {
    Event {
        #[serde(rename = "type")]
        change: Change,
        key: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        value: String,
        revision: i64,
    },
    /// `(key, value, revision)`: a put, as older versions wrote them.
    LegacyPut(String, String, i64),
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

    /// Takes a delta snapshot of every put and delete after the newest snapshot; `None` when nothing changed.
    /// When the member's history was compacted past that point a delta cannot be taken, and a full snapshot is
    /// taken instead (as etcd-backup-restore does).
    pub async fn take_delta(&self, client: &EtcdClient) -> Result<Option<SnapshotInfo>, EtcdError> {
        let since = self.last_revision().unwrap_or(0) + 1;
        let now = client.status().await?.revision;
        if now < since {
            return Ok(None);
        }
        let events = match client.changes_between(since, now).await? {
            WatchHistory::Events(e) => e,
            WatchHistory::Compacted(rev) => {
                tracing::info!(since, compacted = rev, "history compacted: full snapshot instead of a delta");
                return self.take_full(client).await.map(Some);
            }
        };
        if events.is_empty() {
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
            events: events
                .iter()
                .map(|e: &WatchEvent| DeltaEvent::Event {
                    change: if e.deleted { Change::Delete } else { Change::Put },
                    key: B64.encode(&e.kv.key),
                    value: if e.deleted { String::new() } else { B64.encode(&e.kv.value) },
                    revision: e.kv.mod_revision,
                })
                .collect(),
        };
        let dest = self.path(&info);
        std::fs::create_dir_all(&self.dir).map_err(|e| EtcdError::io_pub("create", &self.dir, e))?;
        let tmp = self.dir.join(format!(".incr-{}.tmp", uuid::Uuid::new_v4()));
        std::fs::write(&tmp, serde_json::to_vec(&delta).unwrap_or_default())
            .map_err(|e| EtcdError::io_pub("write", &tmp, e))?;
        std::fs::rename(&tmp, &dest).map_err(|e| EtcdError::io_pub("rename", &dest, e))?;
        Ok(Some(info))
    }

    /// Replays a delta snapshot's events (puts and deletes, in order) through `client`; returns how many.
    pub async fn apply_delta(&self, client: &EtcdClient, s: &SnapshotInfo) -> Result<usize, EtcdError> {
        let p = self.path(s);
        let bytes = std::fs::read(&p).map_err(|e| EtcdError::io_pub("read", &p, e))?;
        let bad =
            |message: String| EtcdError::Decode { endpoint: p.display().to_string(), path: String::new(), message };
        let delta: Delta = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        let decode = |v: &str| B64.decode(v).map_err(|e| bad(format!("bad base64 {v:?}: {e}")));
        for e in &delta.events {
            match e {
                DeltaEvent::Event { change: Change::Put, key, value, .. } | DeltaEvent::LegacyPut(key, value, _) => {
                    client.put(decode(key)?, decode(value)?).await?;
                }
                DeltaEvent::Event { change: Change::Delete, key, .. } => {
                    client.delete(decode(key)?).await?;
                }
            }
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
    fn delta_files_hold_puts_and_deletes_and_older_put_only_files_still_read() {
        let d: Delta = serde_json::from_str(
            r#"{"events":[{"type":"put","key":"YQ==","value":"MQ==","revision":5},{"type":"delete","key":"Yg==","revision":6}]}"#,
        )
        .unwrap();
        assert_eq!(
            d.events,
            vec![
                DeltaEvent::Event { change: Change::Put, key: "YQ==".into(), value: "MQ==".into(), revision: 5 },
                DeltaEvent::Event { change: Change::Delete, key: "Yg==".into(), value: String::new(), revision: 6 },
            ]
        );
        let legacy: Delta = serde_json::from_str(r#"{"events":[["YQ==","MQ==",5]]}"#).unwrap();
        assert_eq!(legacy.events, vec![DeltaEvent::LegacyPut("YQ==".into(), "MQ==".into(), 5)]);
        let written = serde_json::to_string(&d).unwrap();
        assert!(written.contains(r#"{"type":"delete","key":"Yg==","revision":6}"#), "{written}");
    }

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
