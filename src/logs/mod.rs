//! The logs of an Etcd's members: every container of every member pod read through `pods/log`, one stream
//! ordered by time (the kubelet's time of each line), filtered by level and pattern, or followed as members come
//! and go.
//!
//! Only `get pods` and `get pods/log` in the Etcd's namespace are needed (and `get` on the Etcd to know its
//! members). Lines carry the kubelet's timestamp (`timestamps=true`): that is the order they are merged in, as
//! stern and `kubectl logs --prefix` show several containers.

pub mod line;

use std::time::Duration;

use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use serde::Serialize;

use crate::api::Etcd;
use crate::kube::error::{ClusterError, Subject};
pub use line::{Level, Parsed};

/// The etcd container of an etcd-druid member pod (etcd-druid `internal/common/constants.go`).
pub const ETCD_CONTAINER: &str = "etcd";
/// The backup-restore sidecar container.
pub const BACKUP_RESTORE_CONTAINER: &str = "backup-restore";

/// Which containers to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Containers {
    /// Both.
    #[default]
    All,
    /// The etcd container.
    Etcd,
    /// The backup-restore sidecar.
    BackupRestore,
}

impl Containers {
    /// Container names, etcd first.
    pub fn names(self) -> Vec<&'static str> {
        match self {
            Containers::All => vec![ETCD_CONTAINER, BACKUP_RESTORE_CONTAINER],
            Containers::Etcd => vec![ETCD_CONTAINER],
            Containers::BackupRestore => vec![BACKUP_RESTORE_CONTAINER],
        }
    }
}

/// What to read.
#[derive(Debug, Clone, Default)]
pub struct LogRequest {
    /// Namespace of the Etcd.
    pub namespace: String,
    /// Member pods, in order.
    pub members: Vec<String>,
    /// Container names.
    pub containers: Vec<&'static str>,
    /// Only lines newer than this.
    pub since: Option<Duration>,
    /// Only the last lines of each container.
    pub tail: Option<i64>,
    /// The last terminated run of each container instead of the current one.
    pub previous: bool,
}

/// One line of one member's container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Member pod.
    pub member: String,
    /// Container.
    pub container: String,
    /// The kubelet's time of the line.
    pub time: Option<jiff::Timestamp>,
    /// The line as the container wrote it.
    pub raw: String,
    /// The line read as etcd's or backup-restore's format.
    pub parsed: Parsed,
}

impl Entry {
    /// Builds an entry from a line with the kubelet's time prefix.
    pub fn from_line(member: &str, container: &str, line: &str) -> Entry {
        let (time, raw) = line::split_kubelet_time(line);
        Entry {
            member: member.into(),
            container: container.into(),
            time,
            raw: raw.to_string(),
            parsed: line::parse(raw),
        }
    }
}

/// One line of `-o jsonl`.
#[derive(Debug, Clone, Serialize)]
pub struct JsonEntry<'a> {
    /// Member pod.
    pub member: &'a str,
    /// Container.
    pub container: &'a str,
    /// The kubelet's time, RFC 3339.
    pub time: Option<String>,
    /// The level, when the line has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<Level>,
    /// The message (the raw line with `raw`).
    pub message: &'a str,
}

impl Entry {
    /// The `-o jsonl` form.
    pub fn json(&self, raw: bool) -> JsonEntry<'_> {
        JsonEntry {
            member: &self.member,
            container: &self.container,
            time: self.time.map(|t| t.to_string()),
            level: self.parsed.level,
            message: if raw { &self.raw } else { &self.parsed.message },
        }
    }
}

/// Which lines to keep.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Lines matching this pattern (in the raw line).
    pub grep: Option<regex::Regex>,
    /// Lines of this level or above; lines without a level are kept only without it.
    pub min_level: Option<Level>,
}

impl Filter {
    /// Whether `e` passes.
    pub fn keeps(&self, e: &Entry) -> bool {
        if let Some(min) = self.min_level
            && e.parsed.level.is_none_or(|l| l < min)
        {
            return false;
        }
        self.grep.as_ref().is_none_or(|g| g.is_match(&e.raw))
    }
}

/// Why logs could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    /// A permission is missing.
    #[error(
        "forbidden: reading logs needs \"{verb}\" on \"{resource}\" in namespace {namespace:?}, which this user lacks"
    )]
    Forbidden {
        /// The verb.
        verb: &'static str,
        /// `pods` or `pods/log`.
        resource: &'static str,
        /// The namespace.
        namespace: String,
    },
    /// A named member is not a member of the Etcd.
    #[error("{member:?} is not a member of etcd {etcd:?} (members: {})", members.join(", "))]
    UnknownMember {
        /// What was asked for.
        member: String,
        /// The Etcd.
        etcd: String,
        /// Its member pods.
        members: Vec<String>,
    },
    /// Any other failure of the API.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

/// A stream that could not be read (its pod is missing, its container has not started, no kubelet answers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unreadable {
    /// Member pod.
    pub member: String,
    /// Container.
    pub container: String,
    /// Why, as the API server said it.
    pub reason: String,
}

/// Lines of every stream, merged by time, and the streams that could not be read.
#[derive(Debug, Clone, Default)]
pub struct Collected {
    /// Lines, oldest first (lines of one stream keep their order).
    pub entries: Vec<Entry>,
    /// Streams that could not be read.
    pub unreadable: Vec<Unreadable>,
}

/// The member pods of an Etcd: `<etcd>-0` … `<etcd>-(replicas-1)`; `wanted` narrows them (pod names).
pub fn members(etcd: &Etcd, wanted: &[String]) -> Result<Vec<String>, LogsError> {
    let names = etcd.managed_names();
    let all: Vec<String> = (0..u32::try_from(etcd.spec.replicas.max(0)).unwrap_or(0)).map(|i| names.pod(i)).collect();
    if wanted.is_empty() {
        return Ok(all);
    }
    wanted
        .iter()
        .map(|w| {
            // A member may be given as its pod name or as its ordinal.
            let pod = match w.parse::<u32>() {
                Ok(i) => names.pod(i),
                Err(_) => w.clone(),
            };
            if all.contains(&pod) {
                Ok(pod)
            } else {
                Err(LogsError::UnknownMember { member: w.clone(), etcd: names.statefulset(), members: all.clone() })
            }
        })
        .collect()
}

fn params(req: &LogRequest, container: &str) -> LogParams {
    LogParams {
        container: Some(container.to_string()),
        timestamps: true,
        since_seconds: req.since.map(|d| d.as_secs().max(1) as i64),
        tail_lines: req.tail,
        previous: req.previous,
        ..Default::default()
    }
}

/// Classifies a failed read: a missing permission ends the command, anything else makes the stream unreadable.
fn classify(e: kube::Error, namespace: &str, pod: &str, what: &'static str) -> Result<String, LogsError> {
    if let kube::Error::Api(s) = &e
        && s.code == 403
    {
        return Err(LogsError::Forbidden { verb: "get", resource: what, namespace: namespace.into() });
    }
    let subject = Subject { kind: "pod", name: pod, namespace };
    Ok(match e {
        kube::Error::Api(s) => s.message,
        other => ClusterError::from_kube(other, &subject).to_string(),
    })
}

/// Reads one stream as the kubelet sends it (each line with its time): the text, or why it could not be read
/// (a missing permission is an error of its own).
pub async fn read_stream(
    client: &kube::Client,
    namespace: &str,
    member: &str,
    container: &str,
    since: Option<Duration>,
    previous: bool,
) -> Result<Result<String, String>, LogsError> {
    let req = LogRequest { namespace: namespace.into(), since, previous, ..Default::default() };
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    match pods.logs(member, &params(&req, container)).await {
        Ok(text) => Ok(Ok(text)),
        Err(e) => classify(e, namespace, member, "pods/log").map(Err),
    }
}

/// Reads every stream once (no follow) and merges the lines by time.
pub async fn collect(client: &kube::Client, req: &LogRequest) -> Result<Collected, LogsError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &req.namespace);
    let mut jobs = Vec::new();
    for m in &req.members {
        for c in &req.containers {
            let pods = pods.clone();
            let (m, c) = (m.clone(), *c);
            let lp = params(req, c);
            jobs.push(async move {
                let r = pods.logs(&m, &lp).await;
                (m, c, r)
            });
        }
    }
    let mut out = Collected::default();
    let mut streams = Vec::new();
    for (member, container, r) in futures::future::join_all(jobs).await {
        match r {
            Ok(text) => streams.push(text.lines().map(|l| Entry::from_line(&member, container, l)).collect::<Vec<_>>()),
            Err(e) => {
                let reason = classify(e, &req.namespace, &member, "pods/log")?;
                out.unreadable.push(Unreadable { member, container: container.into(), reason });
            }
        }
    }
    out.entries = merge(streams);
    Ok(out)
}

/// Merges streams by time; lines of one stream keep their order, lines without a time stay after their
/// predecessor.
pub fn merge(streams: Vec<Vec<Entry>>) -> Vec<Entry> {
    let mut all: Vec<(Option<jiff::Timestamp>, usize, usize, Entry)> = Vec::new();
    for (s, stream) in streams.into_iter().enumerate() {
        let mut last = None;
        for (i, e) in stream.into_iter().enumerate() {
            let t = e.time.or(last);
            last = t;
            all.push((t, s, i, e));
        }
    }
    all.sort_by_key(|a| (a.0, a.1, a.2));
    all.into_iter().map(|(_, _, _, e)| e).collect()
}

/// What a follower reports.
#[derive(Debug, Clone)]
pub enum FollowEvent {
    /// A line.
    Line(Entry),
    /// Something the operator should know (a member's pod recreated, a container restarted, a stream unreadable).
    Notice(String),
}

/// How often a follower looks again for a pod that is gone or a container that has not started.
const RETRY: Duration = Duration::from_secs(1);

/// Follows every stream until the receiver is dropped; a member whose pod is recreated (or whose container
/// restarts) is picked up again, with a notice. Returns only on a missing permission (or when nobody listens).
pub async fn follow(
    client: &kube::Client,
    req: &LogRequest,
    tx: tokio::sync::mpsc::Sender<FollowEvent>,
) -> Result<(), LogsError> {
    let mut tasks = tokio::task::JoinSet::new();
    for m in &req.members {
        for c in &req.containers {
            let (client, req, tx) = (client.clone(), req.clone(), tx.clone());
            let (m, c) = (m.clone(), *c);
            tasks.spawn(async move { follow_one(&client, &req, &m, c, &tx).await });
        }
    }
    drop(tx);
    while let Some(r) = tasks.join_next().await {
        if let Ok(Err(e)) = r {
            return Err(e);
        }
    }
    Ok(())
}

async fn follow_one(
    client: &kube::Client,
    req: &LogRequest,
    member: &str,
    container: &'static str,
    tx: &tokio::sync::mpsc::Sender<FollowEvent>,
) -> Result<(), LogsError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &req.namespace);
    let mut uid: Option<String> = None;
    let mut last: Option<jiff::Timestamp> = None;
    let mut said_gone = false;
    let mut said_unreadable: Option<String> = None;
    let mut restarts_seen = 0;
    loop {
        if tx.is_closed() {
            return Ok(());
        }
        let pod = match pods.get_opt(member).await {
            Ok(p) => p,
            Err(e) => {
                classify(e, &req.namespace, member, "pods")?;
                None
            }
        };
        let Some(pod) = pod else {
            if uid.is_some() && !said_gone {
                said_gone = true;
                let _ =
                    tx.send(FollowEvent::Notice(format!("{member} {container}: pod is gone; waiting for it"))).await;
            }
            tokio::time::sleep(RETRY).await;
            continue;
        };
        let this_uid = pod.metadata.uid.clone();
        let recreated = uid.is_some() && uid != this_uid;
        let restart_count = restarts(&pod, container);
        if recreated {
            last = None;
            said_gone = false;
            let _ = tx
                .send(FollowEvent::Notice(format!("{member} {container}: pod recreated; following the new pod")))
                .await;
        } else if uid.is_some() && restart_count > restarts_seen {
            let _ = tx
                .send(FollowEvent::Notice(format!(
                    "{member} {container}: container restarted (restarts: {restart_count}); following it again"
                )))
                .await;
        }
        restarts_seen = restart_count;
        uid = this_uid;
        let mut lp = params(req, container);
        lp.follow = true;
        if let Some(t) = last {
            // Picking up the same pod again (its container restarted or the stream ended): from the last line on.
            // `sinceTime` has second precision (kubelet `LogLocation` formats it as RFC 3339): from the start of
            // that second, and the lines seen already are skipped below.
            lp.since_seconds = None;
            lp.tail_lines = None;
            lp.since_time = jiff::Timestamp::from_second(t.as_second()).ok();
        } else if recreated {
            lp.since_seconds = None;
            lp.tail_lines = None;
        }
        match pods.log_stream(member, &lp).await {
            Ok(stream) => {
                said_unreadable = None;
                let mut lines = Box::pin(stream.lines());
                while let Ok(Some(l)) = lines.try_next().await {
                    let e = Entry::from_line(member, container, &l);
                    // `sinceTime` includes the last line seen: it is not sent twice.
                    if last.is_some_and(|t| e.time.is_some_and(|et| et <= t)) {
                        continue;
                    }
                    last = e.time.or(last);
                    if tx.send(FollowEvent::Line(e)).await.is_err() {
                        return Ok(());
                    }
                }
            }
            Err(e) => {
                let reason = classify(e, &req.namespace, member, "pods/log")?;
                if said_unreadable.as_ref() != Some(&reason) {
                    let _ = tx.send(FollowEvent::Notice(format!("{member} {container}: {reason}"))).await;
                    said_unreadable = Some(reason);
                }
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// The restart count of `container` in the pod's status.
fn restarts(pod: &Pod, container: &str) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == container))
        .map_or(0, |c| c.restart_count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(member: &str, line: &str) -> Entry {
        Entry::from_line(member, "etcd", line)
    }

    #[test]
    fn streams_interleave_by_the_kubelets_time() {
        let a = vec![e("m0", "2026-01-01T00:00:01Z a1"), e("m0", "2026-01-01T00:00:03Z a2")];
        let b = vec![e("m1", "2026-01-01T00:00:02Z b1"), e("m1", "2026-01-01T00:00:04Z b2")];
        let merged: Vec<String> = merge(vec![a, b]).into_iter().map(|e| e.raw).collect();
        assert_eq!(merged, ["a1", "b1", "a2", "b2"]);
    }

    #[test]
    fn level_filter_keeps_warnings_and_above() {
        let f = Filter { min_level: Some(Level::Warn), grep: None };
        assert!(f.keeps(&e("m", r#"2026-01-01T00:00:01Z {"level":"warn","msg":"slow fdatasync"}"#)));
        assert!(!f.keeps(&e("m", r#"2026-01-01T00:00:01Z {"level":"info","msg":"ok"}"#)));
        let f = Filter { grep: Some(regex::Regex::new("leader changed").unwrap()), min_level: None };
        assert!(f.keeps(&e("m", r#"2026-01-01T00:00:01Z {"level":"info","msg":"leader changed"}"#)));
    }
}
