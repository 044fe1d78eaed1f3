//! The local object store of the backup-restore sidecar: full snapshots (etcd snapshot files, or a simulated
//! member's) and delta snapshots (every put and delete since the previous snapshot, read with a watch like
//! etcd-backup-restore does), named like etcd-backup-restore's `Full-<startRev>-<endRev>-<unix>` and
//! `Incr-<startRev>-<endRev>-<unix>`. Restoring replays a delta's events in order, deletes included.
//!
//! The newest snapshot is the last one taken, by time (as etcd-backup-restore picks it), not the one with the
//! highest revision: a restore starts a new history, and the full snapshot taken right after it, like everything
//! after that, can have lower revisions than snapshots of the history it replaced. Within one second a new
//! snapshot is stamped so that it sorts after every existing one ([`SnapshotInfo::order_key`]).

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};

use crate::etcd::{EtcdClient, EtcdError, WatchEvent, WatchHistory};

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

    /// Position in the store's history: creation time first (etcd-backup-restore picks the latest snapshot by
    /// time: a restore starts a new history, and the snapshots after it can have lower revisions than older ones).
    /// Within one second, the higher last revision, then a full snapshot after the delta it ends with; new
    /// snapshots are stamped so that they sort after every existing one ([`ObjectStore::created_on`]).
    pub fn order_key(&self) -> (i64, i64, bool, i64) {
        (self.created_on, self.last_revision, self.kind == SnapshotKind::Full, self.start_revision)
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

    /// Every snapshot, oldest first: ordered by creation time ([`SnapshotInfo::order_key`]), not by revision — a
    /// restore starts a new history whose revisions can be lower than those of older snapshots.
    pub fn list(&self) -> Vec<SnapshotInfo> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut v: Vec<SnapshotInfo> =
            rd.flatten().filter_map(|e| SnapshotInfo::parse(&e.file_name().to_string_lossy())).collect();
        v.sort_by_key(SnapshotInfo::order_key);
        v
    }

    /// The newest full snapshot and the deltas taken after it (in order), as a restore uses them: only deltas
    /// that continue the chain (each starting right after the previous snapshot's last revision; one that
    /// overlaps it is replayed too) — the chain stops at the first gap.
    pub fn latest_chain(&self) -> Option<(SnapshotInfo, Vec<SnapshotInfo>)> {
        chain(self.list())
    }

    /// Last revision of the newest snapshot (the revision the next delta continues from).
    pub fn last_revision(&self) -> Option<i64> {
        self.list().last().map(|s| s.last_revision)
    }

    /// Copies the newest `max_full` full snapshots (all when `None`) and every delta taken after the oldest of
    /// them (every delta when none is kept) into `target`; returns how many files were copied.
    pub fn copy_to(&self, target: &ObjectStore, max_full: Option<usize>) -> Result<usize, EtcdError> {
        let all = self.list();
        let fulls: Vec<usize> =
            all.iter().enumerate().filter(|(_, s)| s.kind == SnapshotKind::Full).map(|(i, _)| i).collect();
        let kept = &fulls[fulls.len() - max_full.map_or(fulls.len(), |n| n.min(fulls.len()))..];
        let first = kept.first().copied().unwrap_or(0);
        std::fs::create_dir_all(&target.dir).map_err(|e| EtcdError::io_pub("create", &target.dir, e))?;
        let mut copied = 0;
        for (_, s) in
            all.iter().enumerate().skip(first).filter(|(i, s)| s.kind == SnapshotKind::Incr || kept.contains(i))
        {
            let dest = target.path(s);
            std::fs::copy(self.path(s), &dest).map_err(|e| EtcdError::io_pub("copy to", &dest, e))?;
            copied += 1;
        }
        Ok(copied)
    }

    /// Creation time for a new snapshot: now, unless that would not sort after the newest snapshot in the store
    /// (a lower revision after a restore within the same second, or a clock that went back); then the newest
    /// one's time, or one second later where the revisions would still sort it first — so the newest file in the
    /// store is always the last one taken (ahead of the clock only after a restore within the same second).
    fn created_on(&self, kind: SnapshotKind, start_revision: i64, last_revision: i64) -> i64 {
        stamp(self.list().last(), jiff::Timestamp::now().as_second(), kind, start_revision, last_revision)
    }

    /// Path of a snapshot file.
    pub fn path(&self, s: &SnapshotInfo) -> PathBuf {
        self.dir.join(&s.snap_name)
    }

    /// Takes a full snapshot from `client` into the store.
    pub async fn take_full(&self, client: &EtcdClient) -> Result<SnapshotInfo, EtcdError> {
        self.take_full_as(client, None).await
    }

    /// Takes a full snapshot, naming it after `stands_for` when given: a compacted snapshot stands for the last
    /// delta it contains — its revision in the source history (not that of the etcd that produced it) and its
    /// time, so it takes that delta's place in the order and deltas taken meanwhile still follow it.
    pub async fn take_full_as(
        &self,
        client: &EtcdClient,
        stands_for: Option<&SnapshotInfo>,
    ) -> Result<SnapshotInfo, EtcdError> {
        let tmp = self.dir.join(format!(".full-{}.tmp", uuid::Uuid::new_v4()));
        let rev = client.snapshot_to_file(&tmp).await?;
        let (last_revision, created_on) = match stands_for {
            Some(s) => (s.last_revision, s.created_on),
            None => (rev, self.created_on(SnapshotKind::Full, 0, rev)),
        };
        let info = SnapshotInfo {
            kind: SnapshotKind::Full,
            start_revision: 0,
            last_revision,
            created_on,
            snap_name: String::new(),
        };
        let info = SnapshotInfo { snap_name: name(&info), ..info };
        let dest = self.path(&info);
        std::fs::rename(&tmp, &dest).map_err(|e| EtcdError::Io { action: "rename", path: dest, source: e })?;
        Ok(info)
    }

    /// Takes a delta snapshot of every put and delete after the newest snapshot; `None` when nothing changed (or
    /// the member is behind the newest snapshot, as right after a restore: the full snapshot taken then comes first).
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
            created_on: self.created_on(SnapshotKind::Incr, since, now),
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

/// The newest full snapshot of `list` (oldest first) and the deltas that continue it.
fn chain(list: Vec<SnapshotInfo>) -> Option<(SnapshotInfo, Vec<SnapshotInfo>)> {
    let at = list.iter().rposition(|s| s.kind == SnapshotKind::Full)?;
    let mut rest = list.into_iter().skip(at);
    let full = rest.next()?;
    let mut last = full.last_revision;
    let deltas = rest
        .take_while(|d| {
            let continues = d.kind == SnapshotKind::Incr && d.start_revision <= last + 1;
            last = last.max(d.last_revision);
            continues
        })
        .collect();
    Some((full, deltas))
}

/// See [`ObjectStore::created_on`].
fn stamp(newest: Option<&SnapshotInfo>, now: i64, kind: SnapshotKind, start_revision: i64, last_revision: i64) -> i64 {
    let Some(newest) = newest else { return now };
    let at = |created_on| SnapshotInfo { kind, start_revision, last_revision, created_on, snap_name: String::new() };
    if at(now).order_key() >= newest.order_key() {
        now
    } else if at(newest.created_on).order_key() >= newest.order_key() {
        newest.created_on
    } else {
        newest.created_on + 1
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

    fn store_with(names: &[&str]) -> (tempfile::TempDir, ObjectStore) {
        let dir = tempfile::tempdir().unwrap();
        for n in names {
            std::fs::write(dir.path().join(n), b"x").unwrap();
        }
        let store = ObjectStore::new(dir.path());
        (dir, store)
    }

    fn names(v: &[SnapshotInfo]) -> Vec<&str> {
        v.iter().map(|s| s.snap_name.as_str()).collect()
    }

    #[test]
    fn after_a_restore_the_newest_full_is_the_latest_even_at_a_lower_revision() {
        let (_dir, store) = store_with(&[
            "Full-00000000-00000010-100",
            "Incr-00000011-00000030-101",
            "Full-00000000-00000030-102",
            "Incr-00000031-00000040-103",
            // restored to revision 12 (an older state); backup-restore takes a full snapshot, then deltas follow
            "Full-00000000-00000012-104",
            "Incr-00000013-00000015-105",
        ]);
        let (full, deltas) = store.latest_chain().unwrap();
        assert_eq!(full.snap_name, "Full-00000000-00000012-104");
        assert_eq!(names(&deltas), ["Incr-00000013-00000015-105"], "no delta of the older history");
        assert_eq!(store.last_revision(), Some(15), "the next delta continues the restored history");
    }

    #[test]
    fn within_one_second_a_new_snapshot_is_stamped_after_the_newest() {
        let incr = SnapshotInfo::parse("Incr-00000031-00000040-200").unwrap();
        // a restore within the same second: a lower revision must not sort before the delta
        assert_eq!(stamp(Some(&incr), 200, SnapshotKind::Full, 0, 12), 201);
        // ordinary progress within a second keeps the clock's time
        assert_eq!(stamp(Some(&incr), 200, SnapshotKind::Incr, 41, 45), 200);
        assert_eq!(stamp(Some(&incr), 200, SnapshotKind::Full, 0, 40), 200, "a full after the delta it ends with");
        // a clock that went back (or a snapshot stamped a second ahead)
        assert_eq!(stamp(Some(&incr), 150, SnapshotKind::Incr, 41, 45), 200);
        assert_eq!(stamp(Some(&incr), 150, SnapshotKind::Full, 0, 12), 201);
        assert_eq!(stamp(None, 150, SnapshotKind::Full, 0, 3), 150);
        let (_dir, store) = store_with(&[
            "Full-00000000-00000010-200",
            "Incr-00000011-00000040-200",
            "Full-00000000-00000012-201",
            "Incr-00000013-00000014-201",
        ]);
        let (full, deltas) = store.latest_chain().unwrap();
        assert_eq!(full.last_revision, 12);
        assert_eq!(names(&deltas), ["Incr-00000013-00000014-201"]);
    }

    #[test]
    fn deltas_chain_only_to_the_full_they_follow_and_a_compacted_full_takes_its_last_deltas_place() {
        let (_dir, store) = store_with(&[
            "Full-00000000-00000010-300",
            "Incr-00000011-00000020-301",
            "Incr-00000021-00000025-302",
            // compacted by the Job from the two deltas: named after the last one, revision and time
            "Full-00000000-00000025-302",
            "Incr-00000026-00000027-303",
            "Incr-00000031-00000033-304",
            "Incr-00000034-00000035-305",
        ]);
        let list = store.list();
        assert_eq!(list[3].snap_name, "Full-00000000-00000025-302", "after the delta it compacts");
        let (full, deltas) = store.latest_chain().unwrap();
        assert_eq!(full.snap_name, "Full-00000000-00000025-302");
        assert_eq!(names(&deltas), ["Incr-00000026-00000027-303"], "the chain stops at the gap 28-30");
        let copy = tempfile::tempdir().unwrap();
        assert_eq!(store.copy_to(&ObjectStore::new(copy.path()), Some(1)).unwrap(), 4);
        assert_eq!(store.copy_to(&ObjectStore::new(copy.path()), None).unwrap(), 7);
    }
}
