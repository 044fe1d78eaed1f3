//! Whether the members hold the same keyspace: etcd's HashKV of every member at one common revision, as
//! `etcdctl endpoint hashkv --cluster` and etcd's own corruption check compare them.
//!
//! The revision is the lowest current revision of the members (every member has applied it) and at or above
//! the highest compact revision (older revisions are gone; HashKV of a compacted revision fails with
//! `ErrCompacted`). At one revision, a hash differs only when the keyspaces do.
// etcd v3.5.9 server/etcdserver/corrupt.go: the leader compares HashKV of every peer at its own revision and
// raises CORRUPT for a member whose hash differs at the same compact revision.

use std::time::Duration;

use serde::Serialize;

use super::EtcdError;
use super::member_status::{client_tls, reach};
use crate::api::Etcd;
use k8s_openapi::api::core::v1::Pod;

/// One member's hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberHash {
    /// Member name.
    pub member: String,
    /// etcd member ID (hex).
    pub member_id: String,
    /// The member's current revision when asked.
    pub revision: i64,
    /// The revision the hash covers.
    pub hash_revision: i64,
    /// The member's compact revision.
    pub compact_revision: i64,
    /// HashKV of the keyspace up to `hash_revision`.
    pub hash: u32,
}

/// The outcome of a consistency check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsistencyReport {
    /// The common revision every hash covers.
    pub revision: i64,
    /// Every member's hash.
    pub members: Vec<MemberHash>,
    /// Members whose hash differs from the majority's (every member when no hash has a majority).
    pub divergent: Vec<String>,
    /// Members that could not be asked, with why.
    pub unreachable: Vec<String>,
}

impl ConsistencyReport {
    /// Whether every member asked holds the same keyspace.
    pub fn consistent(&self) -> bool {
        self.divergent.is_empty()
    }
}

/// The revision to hash at: the lowest current revision, when it is at or above every compact revision.
/// `(current, compact)` per member; `None` without members or when a member compacted past another's present.
pub fn common_revision(revisions: &[(i64, i64)]) -> Option<i64> {
    let lowest = revisions.iter().map(|(current, _)| *current).min()?;
    let compacted = revisions.iter().map(|(_, compact)| *compact).max().unwrap_or(0);
    (lowest >= compacted).then_some(lowest)
}

/// The members whose hash differs from the one a majority of `hashes` share; every member when no hash has a
/// majority (two members that differ, or three that each differ). Empty when all agree.
pub fn divergent(hashes: &[(String, u32)]) -> Vec<String> {
    let mut counts: Vec<(u32, usize)> = Vec::new();
    for (_, h) in hashes {
        match counts.iter_mut().find(|(seen, _)| seen == h) {
            Some((_, n)) => *n += 1,
            None => counts.push((*h, 1)),
        }
    }
    if counts.len() <= 1 {
        return Vec::new();
    }
    match counts.iter().find(|(_, n)| 2 * n > hashes.len()) {
        Some((majority, _)) => hashes.iter().filter(|(_, h)| h != majority).map(|(m, _)| m.clone()).collect(),
        None => hashes.iter().map(|(m, _)| m.clone()).collect(),
    }
}

/// Hashes every member of `etcd` (`members`: member name and pod, in ordinal order) at one common revision.
/// Fails when no member can be asked; members that cannot be asked are listed, not judged.
pub async fn check(
    kube: &kube::Client,
    etcd: &Etcd,
    members: &[(String, Option<Pod>)],
    timeout: Duration,
) -> Result<ConsistencyReport, EtcdError> {
    let tls = client_tls(kube, etcd).await.map_err(|u| EtcdError::Unreachable(u.detail))?;
    // First pass: each member's current and compact revision (HashKV at 0 answers both).
    let first = futures::future::join_all(members.iter().map(|(name, pod)| {
        let tls = tls.clone();
        async move {
            let Some(pod) = pod else { return (name.clone(), Err(format!("{name}: its pod does not exist"))) };
            let attempt = async {
                let mut reached = reach(kube, etcd, pod, tls, timeout).await.map_err(|u| u.detail)?;
                let r = reached.client.hash_kv(0).await.map_err(|e| format!("{}: {e}", reached.via))?;
                let revision = r.header().map(|h| h.revision()).unwrap_or(0);
                let member_id = r.header().map(|h| h.member_id()).unwrap_or(0);
                Ok::<_, String>((reached, revision, r.compact_version(), member_id))
            };
            let outcome = match tokio::time::timeout(timeout, attempt).await {
                Ok(r) => r,
                Err(_) => Err(format!("{name}: no answer within {}s", timeout.as_secs())),
            };
            (name.clone(), outcome)
        }
    }))
    .await;
    let mut unreachable = Vec::new();
    let mut reached = Vec::new();
    for (name, outcome) in first {
        match outcome {
            Ok(r) => reached.push((name, r)),
            Err(why) => unreachable.push(why),
        }
    }
    if reached.is_empty() {
        return Err(EtcdError::Unreachable(format!("no member's etcd could be reached: {}", unreachable.join("; "))));
    }
    let revisions: Vec<(i64, i64)> = reached.iter().map(|(_, (_, rev, compact, _))| (*rev, *compact)).collect();
    let revision = common_revision(&revisions).ok_or_else(|| {
        EtcdError::Failed("the members' revisions have no common revision that is not compacted yet".into())
    })?;
    let second = futures::future::join_all(reached.into_iter().map(|(name, (mut conn, current, _, id))| async move {
        let r = tokio::time::timeout(timeout, conn.client.hash_kv(revision)).await;
        match r {
            Ok(Ok(h)) => Ok(MemberHash {
                member: name,
                member_id: super::hex_id(id),
                revision: current,
                // etcd before 3.5 does not say (0): the hash is at the revision asked for.
                hash_revision: Some(h.hash_revision()).filter(|r| *r > 0).unwrap_or(revision),
                compact_revision: h.compact_version(),
                hash: h.hash(),
            }),
            Ok(Err(e)) => Err(format!("{name}: hashkv at revision {revision}: {e}")),
            Err(_) => Err(format!("{name}: hashkv at revision {revision}: no answer within {}s", timeout.as_secs())),
        }
    }))
    .await;
    let mut hashes = Vec::new();
    for r in second {
        match r {
            Ok(h) => hashes.push(h),
            Err(why) => unreachable.push(why),
        }
    }
    if hashes.is_empty() {
        return Err(EtcdError::Failed(format!("no member answered HashKV: {}", unreachable.join("; "))));
    }
    let pairs: Vec<(String, u32)> = hashes.iter().map(|h| (h.member.clone(), h.hash)).collect();
    Ok(ConsistencyReport { revision, divergent: divergent(&pairs), members: hashes, unreachable })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_revision_is_the_lowest_present_one_past_every_compaction() {
        assert_eq!(common_revision(&[(120, 50), (118, 50), (121, 50)]), Some(118));
        assert_eq!(common_revision(&[(120, 119), (100, 50)]), None);
        assert_eq!(common_revision(&[]), None);
    }

    #[test]
    fn the_member_outside_the_majority_is_named() {
        let h = |m: &str, h: u32| (m.to_string(), h);
        assert!(divergent(&[h("a", 1), h("b", 1), h("c", 1)]).is_empty());
        assert_eq!(divergent(&[h("a", 1), h("b", 2), h("c", 1)]), vec!["b"]);
        assert_eq!(divergent(&[h("a", 1), h("b", 2)]), vec!["a", "b"]);
        assert_eq!(divergent(&[h("a", 1), h("b", 2), h("c", 3)]), vec!["a", "b", "c"]);
        assert!(divergent(&[h("a", 7)]).is_empty());
    }
}
