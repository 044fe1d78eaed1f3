//! Simulated etcd members, for machines without an etcd binary.
//!
//! A simulated member is not a process: it is a small in-process server on the member's loopback client port
//! that speaks the subset of etcd's v3 HTTP/JSON gateway [`EtcdClient`](super::EtcdClient) uses, so every
//! client (landscape, sidecar, tasks, runbooks, tests) is unchanged. [`MemberProcess`](super::MemberProcess)
//! runs one when built with [`EtcdBackend::Simulated`](super::EtcdBackend).
//!
//! What it keeps of etcd's observable behaviour:
//! - **Membership**: members of one cluster find each other by peer URL (the `--initial-cluster` of their
//!   config) in a registry of this process. Member and cluster IDs derive from peer URLs and the cluster token
//!   like etcd's; names and client URLs appear once a member started; learners (one at a time), promotion only
//!   of a running, in-sync learner, removal, etcd's strict reconfiguration checks (`unhealthy cluster`), and a
//!   removed member that is still running exits.
//! - **Quorum**: a request is served with a leader only while a majority of the voting members is running;
//!   writes and linearizable reads then fail with `etcdserver: no leader`, `/health` is false, status reports no
//!   leader. A member coming back catches up with the leader (raft's snapshot catch-up).
//! - **Data**: a revisioned key-value store with create/mod revisions and versions, the event history for
//!   watches (`/v3/watch` from a start revision, incl. deletes, and etcd's `compact_revision` answer),
//!   compaction (with etcd's errors), defragmentation (the database size drops to what is in use), snapshots.
//! - **Data directory**: `<data-dir>/member/snap/db` holds the member's state as JSON, written at least every
//!   [`FLUSH_PERIOD`] while it changes and when the member stops. Deleting the directory loses the data;
//!   garbage in `db` makes the member exit at start, like a corrupt bbolt file.
//! - **Client TLS**: with [`MemberConfig::client_tls`] the gateway is also served over `https://` on that
//!   port, with the key pair read from its files at start (a renewed certificate is served after a restart; an
//!   unreadable one makes the member exit). Like the real members, no client certificate is asked for.
//! - **Snapshots** use their own format (JSON, [`SNAPSHOT_FORMAT`]); [`restore_snapshot`] restores one into a
//!   fresh data directory. Real etcd snapshots cannot be restored into simulated members, nor the reverse.
//!
//! Not simulated: raft timing (elections are immediate), watches deliver the history up to the moment they are
//! created but no later events, reads at a past revision, transactions, leases and auth. At most
//! [`HISTORY_LIMIT`] events are kept; older history counts as compacted.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{EtcdError, MemberConfig};

/// `format` of a simulated member's database file.
pub const DB_FORMAT: &str = "druidctl-simulated-etcd/1";
/// `format` of a simulated member's snapshot file (its first bytes are `{"format":"<this>"`).
pub const SNAPSHOT_FORMAT: &str = "druidctl-simulated-etcd-snapshot/1";
/// Version a simulated member reports.
pub const VERSION: &str = "3.4.23-simulated";
/// How often a changed member state is written to its data directory.
pub const FLUSH_PERIOD: Duration = Duration::from_millis(500);
/// Events kept for watches; older ones count as compacted.
pub const HISTORY_LIMIT: usize = 20_000;

// ---------------------------------------------------------------------------------------------------------
// State

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Kv {
    #[serde(with = "b64")]
    key: Vec<u8>,
    #[serde(with = "b64")]
    value: Vec<u8>,
    create_revision: i64,
    mod_revision: i64,
    version: i64,
}

impl Kv {
    fn size(&self) -> i64 {
        (self.key.len() + self.value.len() + 48) as i64
    }

    fn to_json(&self, keys_only: bool) -> Value {
        let mut v = json!({
            "key": B64.encode(&self.key),
            "create_revision": self.create_revision.to_string(),
            "mod_revision": self.mod_revision.to_string(),
            "version": self.version.to_string(),
        });
        if !keys_only && !self.value.is_empty() {
            v["value"] = json!(B64.encode(&self.value));
        }
        v
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Event {
    deleted: bool,
    kv: Kv,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct SimMember {
    id: u64,
    name: String,
    peer_urls: Vec<String>,
    client_urls: Vec<String>,
    is_learner: bool,
}

impl SimMember {
    fn to_json(&self) -> Value {
        let mut v = json!({"ID": self.id.to_string(), "peerURLs": self.peer_urls});
        if !self.name.is_empty() {
            v["name"] = json!(self.name);
        }
        if !self.client_urls.is_empty() {
            v["clientURLs"] = json!(self.client_urls);
        }
        if self.is_learner {
            v["isLearner"] = json!(true);
        }
        v
    }
}

/// What raft replicates: identical on every in-sync member of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ClusterData {
    cluster_id: u64,
    token: String,
    members: Vec<SimMember>,
    revision: i64,
    compact_revision: i64,
    raft_index: u64,
    #[serde(with = "kv_map")]
    kvs: BTreeMap<Vec<u8>, Kv>,
    history: Vec<Event>,
    /// Bytes in use (keys, values, history) and the high-water mark the database file has grown to.
    used: i64,
    db_size: i64,
}

/// The contents of `<data-dir>/member/snap/db`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct NodeState {
    format: String,
    member_id: u64,
    raft_term: u64,
    data: ClusterData,
}

impl ClusterData {
    fn new(cluster_id: u64, token: &str, members: Vec<SimMember>) -> ClusterData {
        ClusterData {
            cluster_id,
            token: token.to_string(),
            members,
            revision: 1,
            compact_revision: 0,
            raft_index: 1,
            kvs: BTreeMap::new(),
            history: Vec::new(),
            used: 0,
            db_size: 20_480,
        }
    }

    fn grow(&mut self, delta: i64) {
        self.used += delta;
        self.db_size = self.db_size.max(self.used + 16_384);
    }

    fn record(&mut self, e: Event) {
        self.grow(e.kv.size());
        self.history.push(e);
        if self.history.len() > HISTORY_LIMIT {
            let drop = self.history.len() - HISTORY_LIMIT;
            let upto = self.history[drop - 1].kv.mod_revision;
            self.trim_history(upto + 1);
            self.compact_revision = self.compact_revision.max(upto + 1);
        }
    }

    /// Drops events older than `rev`.
    fn trim_history(&mut self, rev: i64) {
        let freed: i64 = self.history.iter().filter(|e| e.kv.mod_revision < rev).map(|e| e.kv.size()).sum();
        self.history.retain(|e| e.kv.mod_revision >= rev);
        self.used -= freed;
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> i64 {
        self.raft_index += 1;
        self.revision += 1;
        let rev = self.revision;
        let (create_revision, version, old) = match self.kvs.get(key) {
            Some(kv) => (kv.create_revision, kv.version + 1, kv.size()),
            None => (rev, 1, 0),
        };
        let kv = Kv { key: key.to_vec(), value: value.to_vec(), create_revision, mod_revision: rev, version };
        self.grow(kv.size() - old);
        self.kvs.insert(key.to_vec(), kv.clone());
        self.record(Event { deleted: false, kv });
        rev
    }

    fn delete(&mut self, key: &[u8], range_end: &[u8]) -> i64 {
        self.raft_index += 1;
        let keys: Vec<Vec<u8>> = self.kvs.keys().filter(|k| in_range(k, key, range_end)).cloned().collect();
        if keys.is_empty() {
            return 0;
        }
        self.revision += 1;
        let rev = self.revision;
        for k in &keys {
            if let Some(old) = self.kvs.remove(k) {
                self.grow(-old.size());
            }
            let kv = Kv { key: k.clone(), value: Vec::new(), create_revision: 0, mod_revision: rev, version: 0 };
            self.record(Event { deleted: true, kv });
        }
        keys.len() as i64
    }

    fn compact(&mut self, rev: i64) -> Result<(), (i64, &'static str)> {
        if rev > self.revision {
            return Err((11, "etcdserver: mvcc: required revision is a future revision"));
        }
        if rev <= self.compact_revision {
            return Err((11, "etcdserver: mvcc: required revision has been compacted"));
        }
        self.raft_index += 1;
        self.compact_revision = rev;
        self.trim_history(rev);
        Ok(())
    }

    fn member(&self, id: u64) -> Option<&SimMember> {
        self.members.iter().find(|m| m.id == id)
    }

    fn voters(&self) -> impl Iterator<Item = &SimMember> {
        self.members.iter().filter(|m| !m.is_learner)
    }

    fn snapshot(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Out<'a> {
            format: &'a str,
            revision: i64,
            compact_revision: i64,
            kvs: Vec<&'a Kv>,
        }
        let out = Out {
            format: SNAPSHOT_FORMAT,
            revision: self.revision,
            compact_revision: self.compact_revision,
            kvs: self.kvs.values().collect(),
        };
        serde_json::to_vec(&out).unwrap_or_default()
    }
}

/// Whether `k` is selected by etcd's `[key, range_end)` (`range_end` empty: exactly `key`; `\0`: from `key` on).
fn in_range(k: &[u8], key: &[u8], range_end: &[u8]) -> bool {
    match range_end {
        [] => k == key,
        [0] => k >= key,
        end => k >= key && k < end,
    }
}

mod b64 {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as B64;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&B64.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        B64.decode(s).map_err(serde::de::Error::custom)
    }
}

mod kv_map {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serializer};

    use super::Kv;

    pub fn serialize<S: Serializer>(m: &BTreeMap<Vec<u8>, Kv>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(m.values())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<Vec<u8>, Kv>, D::Error> {
        Ok(Vec::<Kv>::deserialize(d)?.into_iter().map(|kv| (kv.key.clone(), kv)).collect())
    }
}

/// FNV-1a over `parts`, never 0 (etcd's IDs are never 0 either).
fn id_of(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for b in p.iter().chain(std::iter::once(&0xffu8)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h.max(1)
}

fn member_id(peer_urls: &[String], token: &str, salt: &[u8]) -> u64 {
    let mut urls = peer_urls.to_vec();
    urls.sort();
    let joined = urls.join(",");
    id_of(&[joined.as_bytes(), token.as_bytes(), salt])
}

fn cluster_id(ids: &[u64], token: &str) -> u64 {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_be_bytes()).collect();
    id_of(&[&bytes, token.as_bytes()])
}

fn db_file(data_dir: &Path) -> PathBuf {
    data_dir.join("member").join("snap").join("db")
}

fn write_state(data_dir: &Path, state: &NodeState) -> std::io::Result<()> {
    let file = db_file(data_dir);
    let dir = file.parent().expect("db has a parent");
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join("db.tmp");
    std::fs::write(&tmp, serde_json::to_vec(state).map_err(std::io::Error::other)?)?;
    std::fs::rename(&tmp, &file)
}

// ---------------------------------------------------------------------------------------------------------
// The registry of running members ("the network")

/// Shared by a member's registry entry and its [`SimulatedProcess`]: cancelled when the member stops.
#[derive(Debug, Default)]
struct Life {
    cancel: CancellationToken,
    exit_code: Mutex<Option<i32>>,
}

#[derive(Debug)]
struct Node {
    generation: u64,
    name: String,
    client_url: String,
    data_dir: PathBuf,
    log_file: PathBuf,
    state: NodeState,
    dirty: bool,
    life: Arc<Life>,
}

impl Node {
    fn flush(&mut self) {
        if !self.dirty {
            return;
        }
        match write_state(&self.data_dir, &self.state) {
            Ok(()) => self.dirty = false,
            Err(e) => log_line(&self.log_file, &format!("cannot write {}: {e}", db_file(&self.data_dir).display())),
        }
    }

    /// Stops the member: flush, leave the registry (the caller removes it), stop serving.
    fn terminate(&mut self, exit_code: Option<i32>, why: &str) {
        self.flush();
        log_line(&self.log_file, why);
        *lock(&self.life.exit_code) = exit_code;
        self.life.cancel.cancel();
    }
}

#[derive(Debug, Default)]
struct Net {
    /// Running members by peer URL.
    nodes: HashMap<String, Node>,
    /// Leader and term per cluster ID.
    leaders: HashMap<u64, (u64, u64)>,
}

fn net() -> MutexGuard<'static, Net> {
    static NET: OnceLock<Mutex<Net>> = OnceLock::new();
    lock(NET.get_or_init(Default::default))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn log_line(file: &Path, line: &str) {
    if let Some(dir) = file.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(file) {
        let _ = writeln!(f, "{} simulated etcd: {line}", jiff::Timestamp::now());
    }
}

/// A member's view of its cluster, after the leader brought every running member up to date.
#[derive(Debug, Default)]
struct View {
    quorum: bool,
    leader: u64,
    term: u64,
    /// Peer URLs of the running members that hold the leader's data (the leader included).
    in_sync: Vec<String>,
    /// This member's entry in the membership.
    me: Option<SimMember>,
}

impl Net {
    /// Elects, syncs, publishes and expels as raft would, then returns what `url`'s member sees.
    fn view(&mut self, url: &str) -> View {
        let Some(node) = self.nodes.get(url) else { return View::default() };
        let cid = node.state.data.cluster_id;
        let my_id = node.state.member_id;
        let group: Vec<String> =
            self.nodes.iter().filter(|(_, n)| n.state.data.cluster_id == cid).map(|(u, _)| u.clone()).collect();
        // The most advanced running member has the cluster's membership.
        let authority = group
            .iter()
            .max_by_key(|u| {
                let n = &self.nodes[*u];
                (n.state.data.raft_index, std::cmp::Reverse(n.state.member_id))
            })
            .cloned()
            .unwrap_or_else(|| url.to_string());
        let members = self.nodes[&authority].state.data.members.clone();
        let running = |m: &SimMember| -> Option<String> {
            let u = m.peer_urls.iter().find(|u| group.contains(u))?;
            (self.nodes[u].state.member_id == m.id).then(|| u.clone())
        };
        let voters: Vec<&SimMember> = members.iter().filter(|m| !m.is_learner).collect();
        let up_voters: Vec<(u64, String)> = voters.iter().filter_map(|m| running(m).map(|u| (m.id, u))).collect();
        let me = members.iter().find(|m| m.id == my_id).cloned();
        let quorum = !voters.is_empty() && up_voters.len() * 2 > voters.len();
        if !quorum {
            if let Some(l) = self.leaders.get_mut(&cid) {
                l.0 = 0;
            }
            let term = self.leaders.get(&cid).map_or(node.state.raft_term, |l| l.1);
            return View { quorum: false, leader: 0, term, in_sync: Vec::new(), me };
        }
        // Leader: the previous one while it is running and as advanced as any voter; else the most advanced.
        let index = |u: &str| self.nodes[u].state.data.raft_index;
        let best = up_voters.iter().map(|(_, u)| index(u)).max().unwrap_or(0);
        let (prev, term) = self.leaders.get(&cid).copied().unwrap_or((0, node.state.raft_term));
        let (leader, leader_url, term) = match up_voters.iter().find(|(id, u)| *id == prev && index(u) == best) {
            Some((id, u)) => (*id, u.clone(), term),
            None => {
                let (id, u) =
                    up_voters.iter().filter(|(_, u)| index(u) == best).min_by_key(|(id, _)| *id).expect("quorum");
                (*id, u.clone(), term + 1)
            }
        };
        self.leaders.insert(cid, (leader, term));
        // Catch up every running member; expel running members that are no longer part of the cluster.
        let data = self.nodes[&leader_url].state.data.clone();
        let mut in_sync = Vec::new();
        for u in &group {
            let n = self.nodes.get_mut(u).expect("group member");
            n.state.raft_term = term;
            if data.member(n.state.member_id).is_none() {
                n.terminate(Some(1), "the member has been permanently removed from the cluster; exiting");
                self.nodes.remove(u);
                continue;
            }
            if n.state.data.raft_index < data.raft_index || n.state.data != data {
                n.state.data = data.clone();
                n.dirty = true;
            }
            in_sync.push(u.clone());
        }
        // A started member publishes its name and client URL (through raft).
        let unpublished: Vec<(u64, String, String)> = in_sync
            .iter()
            .filter_map(|u| {
                let n = &self.nodes[u];
                let m = data.member(n.state.member_id)?;
                (m.name != n.name || m.client_urls != [n.client_url.clone()])
                    .then(|| (m.id, n.name.clone(), n.client_url.clone()))
            })
            .collect();
        for (id, name, client_url) in unpublished {
            self.apply(&in_sync, |d| {
                d.raft_index += 1;
                if let Some(m) = d.members.iter_mut().find(|m| m.id == id) {
                    m.name = name.clone();
                    m.client_urls = vec![client_url.clone()];
                }
            });
        }
        let me = self.nodes.get(url).and_then(|n| n.state.data.member(my_id).cloned());
        View { quorum: true, leader, term, in_sync, me }
    }

    /// Applies `op` on every in-sync member (raft's log); returns the result on the first one.
    fn apply<R>(&mut self, in_sync: &[String], mut op: impl FnMut(&mut ClusterData) -> R) -> R {
        let mut first = None;
        for u in in_sync {
            if let Some(n) = self.nodes.get_mut(u) {
                let r = op(&mut n.state.data);
                n.dirty = true;
                first.get_or_insert(r);
            }
        }
        first.expect("an in-sync member")
    }
}

// ---------------------------------------------------------------------------------------------------------
// The "process"

/// A simulated member's lifecycle, driven by [`MemberProcess`](super::MemberProcess): start (load or create
/// the data directory, serve the gateway on the client port), kill, exit status.
#[derive(Debug, Default)]
pub struct SimulatedProcess {
    current: Mutex<Option<(String, u64, Arc<Life>)>>,
}

fn next_generation() -> u64 {
    static GEN: AtomicU64 = AtomicU64::new(1);
    GEN.fetch_add(1, Ordering::Relaxed)
}

impl SimulatedProcess {
    /// Starts the member with `cfg` unless it runs; returns whether it was started. Like a process, it may
    /// exit right away (corrupt data directory, nothing to join): see [`SimulatedProcess::exit_status`].
    /// Needs a tokio runtime.
    pub fn start(&self, cfg: &MemberConfig) -> Result<bool, EtcdError> {
        if self.is_running() {
            return Ok(false);
        }
        let handle = tokio::runtime::Handle::try_current().map_err(|e| EtcdError::Spawn {
            name: cfg.name.clone(),
            source: std::io::Error::other(format!("a simulated member needs a tokio runtime: {e}")),
        })?;
        let peer_url = cfg.peer_url();
        let generation = next_generation();
        let life = Arc::new(Life::default());
        *lock(&self.current) = Some((peer_url.clone(), generation, life.clone()));
        log_line(
            &cfg.log_file,
            &format!(
                "starting member {} (client {}, peer {}, data {})",
                cfg.name,
                cfg.client_url(),
                peer_url,
                cfg.data_dir.display()
            ),
        );
        let mut net = net();
        if net.nodes.contains_key(&peer_url) {
            drop(net);
            log_line(&cfg.log_file, &format!("peer URL {peer_url} is already served by another member; exiting"));
            *lock(&life.exit_code) = Some(1);
            life.cancel.cancel();
            return Ok(true);
        }
        // etcd reads its key pair on start only (a renewed certificate is served after a restart); a missing or
        // unreadable one makes it exit.
        let tls = match cfg.client_tls.as_ref().map(|t| tls_acceptor(t).map(|a| (t.port, a))).transpose() {
            Ok(t) => t,
            Err(why) => {
                drop(net);
                log_line(&cfg.log_file, &format!("cannot serve client TLS: {why}; exiting"));
                *lock(&life.exit_code) = Some(1);
                life.cancel.cancel();
                return Ok(true);
            }
        };
        let state = match load_or_create(&net, cfg) {
            Ok(s) => s,
            Err(why) => {
                drop(net);
                log_line(&cfg.log_file, &format!("{why}; exiting"));
                *lock(&life.exit_code) = Some(1);
                life.cancel.cancel();
                return Ok(true);
            }
        };
        let mut node = Node {
            generation,
            name: cfg.name.clone(),
            client_url: cfg.client_url(),
            data_dir: cfg.data_dir.clone(),
            log_file: cfg.log_file.clone(),
            state,
            dirty: true,
            life: life.clone(),
        };
        node.flush();
        net.nodes.insert(peer_url.clone(), node);
        drop(net);
        handle.spawn(serve(peer_url.clone(), generation, cfg.client_port, None, life.clone(), cfg.log_file.clone()));
        if let Some((port, acceptor)) = tls {
            handle.spawn(serve(peer_url.clone(), generation, port, Some(acceptor), life.clone(), cfg.log_file.clone()));
        }
        handle.spawn(flush_loop(peer_url, generation, life));
        Ok(true)
    }

    /// Whether it runs.
    pub fn is_running(&self) -> bool {
        lock(&self.current).as_ref().is_some_and(|(_, _, l)| !l.cancel.is_cancelled())
    }

    /// The exit status once it exited by itself (a kill leaves none, like a reaped process).
    pub fn exit_status(&self) -> Option<ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        let cur = lock(&self.current);
        let (_, _, life) = cur.as_ref()?;
        if !life.cancel.is_cancelled() {
            return None;
        }
        let code = (*lock(&life.exit_code))?;
        Some(ExitStatus::from_raw(code << 8))
    }

    /// Stops it at once (its state is written to the data directory first).
    pub fn kill(&self) {
        let Some((url, generation, life)) = lock(&self.current).take() else { return };
        let mut net = net();
        if let Some(n) = net.nodes.get_mut(&url).filter(|n| n.generation == generation) {
            n.terminate(None, "killed");
            net.nodes.remove(&url);
        }
        life.cancel.cancel();
    }
}

impl Drop for SimulatedProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn parse_initial_cluster(s: &str) -> Vec<(String, String)> {
    s.split(',').filter_map(|p| p.split_once('=')).map(|(n, u)| (n.trim().to_string(), u.trim().to_string())).collect()
}

/// The member's state: from its data directory, else a new cluster (`new`) or the cluster it was added to
/// (`existing`, learned from a running peer of `--initial-cluster`).
fn load_or_create(net: &Net, cfg: &MemberConfig) -> Result<NodeState, String> {
    let file = db_file(&cfg.data_dir);
    if cfg.data_dir.join("member").exists() {
        let bytes = std::fs::read(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let state: NodeState = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{} is not a simulated member's database (corrupt?): {e}", file.display()))?;
        if state.format != DB_FORMAT {
            return Err(format!("{} has format {:?}, want {DB_FORMAT:?}", file.display(), state.format));
        }
        return Ok(state);
    }
    let peer_url = cfg.peer_url();
    let token = cfg.initial_cluster_token.as_str();
    let ic = parse_initial_cluster(&cfg.initial_cluster);
    if !ic.iter().any(|(_, u)| *u == peer_url) {
        return Err(format!("couldn't find local name {:?} with peer URL {peer_url} in the initial cluster", cfg.name));
    }
    match cfg.initial_cluster_state {
        super::ClusterState::New => {
            let members: Vec<SimMember> = ic
                .iter()
                .map(|(_, u)| SimMember {
                    id: member_id(std::slice::from_ref(u), token, b""),
                    name: String::new(),
                    peer_urls: vec![u.clone()],
                    client_urls: Vec::new(),
                    is_learner: false,
                })
                .collect();
            let ids: Vec<u64> = members.iter().map(|m| m.id).collect();
            let me = member_id(std::slice::from_ref(&peer_url), token, b"");
            Ok(NodeState {
                format: DB_FORMAT.into(),
                member_id: me,
                raft_term: 1,
                data: ClusterData::new(cluster_id(&ids, token), token, members),
            })
        }
        super::ClusterState::Existing => {
            let peer = ic
                .iter()
                .filter(|(_, u)| *u != peer_url)
                .filter_map(|(_, u)| net.nodes.get(u))
                .max_by_key(|n| n.state.data.raft_index)
                .ok_or_else(|| {
                    "cannot fetch cluster info from the peers of the initial cluster: none is running".to_string()
                })?;
            let data = peer.state.data.clone();
            let me = data
                .members
                .iter()
                .find(|m| m.peer_urls.contains(&peer_url))
                .ok_or_else(|| format!("member with peer URL {peer_url} has not been added to the cluster"))?
                .id;
            Ok(NodeState { format: DB_FORMAT.into(), member_id: me, raft_term: peer.state.raft_term, data })
        }
    }
}

async fn flush_loop(url: String, generation: u64, life: Arc<Life>) {
    loop {
        tokio::select! {
            _ = life.cancel.cancelled() => return,
            _ = tokio::time::sleep(FLUSH_PERIOD) => {}
        }
        let mut net = net();
        match net.nodes.get_mut(&url).filter(|n| n.generation == generation) {
            Some(n) => n.flush(),
            None => return,
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Snapshots

/// Whether `path` holds a simulated member's snapshot (not a real etcd one).
pub fn is_snapshot_file(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 64];
    let Ok(mut f) = std::fs::File::open(path) else { return false };
    let n = f.read(&mut head).unwrap_or(0);
    let prefix = format!("{{\"format\":\"{SNAPSHOT_FORMAT}\"");
    head[..n].starts_with(prefix.as_bytes())
}

#[derive(Deserialize)]
struct SnapshotFile {
    format: String,
    revision: i64,
    kvs: Vec<Kv>,
}

/// `etcdctl snapshot restore` for simulated members: writes a data directory for `config` (which must not
/// exist yet) holding the snapshot's keys as a new single-member cluster; start it with `ClusterState::New`.
pub fn restore_snapshot(snapshot: &Path, config: &MemberConfig) -> Result<(), EtcdError> {
    let bytes = std::fs::read(snapshot).map_err(|e| EtcdError::io("read", snapshot, e))?;
    let bad =
        |message: String| EtcdError::Etcdctl { action: format!("snapshot restore {}", snapshot.display()), message };
    let snap: SnapshotFile = serde_json::from_slice(&bytes).map_err(|e| {
        bad(format!("not a simulated member's snapshot ({e}); snapshots of real etcd need real etcd members"))
    })?;
    if snap.format != SNAPSHOT_FORMAT {
        return Err(bad(format!("snapshot format {:?}, want {SNAPSHOT_FORMAT:?}", snap.format)));
    }
    if config.data_dir.exists() {
        return Err(bad(format!("data-dir {:?} exists", config.data_dir)));
    }
    let token = config.initial_cluster_token.as_str();
    let id = member_id(&[config.peer_url()], token, b"");
    let me = SimMember {
        id,
        name: config.name.clone(),
        peer_urls: vec![config.peer_url()],
        client_urls: Vec::new(),
        is_learner: false,
    };
    let mut data = ClusterData::new(cluster_id(&[id], token), token, vec![me]);
    data.revision = snap.revision.max(1);
    data.compact_revision = data.revision;
    for kv in snap.kvs {
        data.grow(kv.size());
        data.kvs.insert(kv.key.clone(), kv);
    }
    let state = NodeState { format: DB_FORMAT.into(), member_id: id, raft_term: 1, data };
    write_state(&config.data_dir, &state).map_err(|e| EtcdError::io("write", db_file(&config.data_dir), e))
}

// ---------------------------------------------------------------------------------------------------------
// The gateway

type Body = UnsyncBoxBody<Bytes, Infallible>;

fn full(status: u16, body: Value) -> hyper::Response<Body> {
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())).boxed_unsync())
        .expect("response")
}

/// A gRPC error the way the gateway renders it.
fn grpc_error(code: i64, message: &str) -> hyper::Response<Body> {
    let status = match code {
        3 | 11 => 400,
        4 => 504,
        5 => 404,
        9 => 412,
        12 => 501,
        14 => 503,
        _ => 500,
    };
    full(status, json!({"error": message, "message": message, "code": code}))
}

/// The client TLS listener's server config, from the key pair files of `tls` (read once, at start, as etcd does).
fn tls_acceptor(tls: &super::process::ClientTls) -> Result<tokio_rustls::TlsAcceptor, String> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("open {}: {e}", p.display()));
    let (crt, key) = (read(&tls.cert_file)?, read(&tls.key_file)?);
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&crt)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", tls.cert_file.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate", tls.cert_file.display()));
    }
    let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| format!("{}: {e}", tls.key_file.display()))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("{} and {}: {e}", tls.cert_file.display(), tls.key_file.display()))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Serves the gateway on `127.0.0.1:port`, over TLS when `tls` is set; a member that cannot listen exits.
async fn serve(
    url: String,
    generation: u64,
    port: u16,
    tls: Option<tokio_rustls::TlsAcceptor>,
    life: Arc<Life>,
    log: PathBuf,
) {
    // A killed predecessor on the same port may still be closing its listener.
    let mut listener = None;
    for _ in 0..100 {
        match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            Ok(l) => {
                listener = Some(l);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                tokio::select! {
                    _ = life.cancel.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            }
            Err(e) => {
                log_line(&log, &format!("cannot listen on 127.0.0.1:{port}: {e}"));
                break;
            }
        }
    }
    let Some(listener) = listener else {
        let mut net = net();
        if let Some(n) = net.nodes.get_mut(&url).filter(|n| n.generation == generation) {
            n.terminate(Some(1), &format!("cannot listen on 127.0.0.1:{port}; exiting"));
            net.nodes.remove(&url);
        }
        life.cancel.cancel();
        return;
    };
    loop {
        let accepted = tokio::select! {
            _ = life.cancel.cancelled() => return,
            a = listener.accept() => a,
        };
        let Ok((stream, _)) = accepted else { continue };
        let (url, life, tls) = (url.clone(), life.clone(), tls.clone());
        tokio::spawn(async move {
            let cancel = life.cancel.clone();
            let work = async move {
                match tls {
                    None => serve_connection(TokioIo::new(stream), url, generation, life).await,
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            serve_connection(TokioIo::new(stream), url, generation, life).await;
                        }
                    }
                }
            };
            tokio::select! {
                _ = work => {}
                _ = cancel.cancelled() => {}
            }
        });
    }
}

async fn serve_connection<IO>(io: IO, url: String, generation: u64, life: Arc<Life>)
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let (url, life) = (url.clone(), life.clone());
        async move { Ok::<_, Infallible>(handle(&url, generation, &life, req).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
}

async fn handle(
    url: &str,
    generation: u64,
    life: &Life,
    req: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Body> {
    let path = req.uri().path().trim_end_matches('/').to_string();
    let bytes = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let body: Value = if bytes.is_empty() { json!({}) } else { serde_json::from_slice(&bytes).unwrap_or(Value::Null) };
    if body.is_null() {
        return grpc_error(3, "invalid JSON request body");
    }
    if path == "/v3/watch" {
        return watch(url, generation, life, &body);
    }
    let mut net = net();
    if net.nodes.get(url).is_none_or(|n| n.generation != generation) {
        return grpc_error(14, "etcdserver: server stopped");
    }
    let v = net.view(url);
    let Some(node) = net.nodes.get(url) else { return grpc_error(14, "etcdserver: server stopped") };
    let learner = v.me.as_ref().is_some_and(|m| m.is_learner);
    let header = |net: &Net| {
        let n = &net.nodes[url];
        json!({"cluster_id": n.state.data.cluster_id.to_string(), "member_id": n.state.member_id.to_string(),
               "revision": n.state.data.revision.to_string(), "raft_term": v.term.to_string()})
    };
    let need_leader = |v: &View| (!v.quorum).then(|| grpc_error(14, "etcdserver: no leader"));
    match path.as_str() {
        "/health" => {
            let healthy = v.quorum && v.me.is_some();
            let body =
                if healthy { json!({"health": "true"}) } else { json!({"health": "false", "reason": "no leader"}) };
            full(if healthy { 200 } else { 503 }, body)
        }
        "/version" => full(200, json!({"etcdserver": VERSION, "etcdcluster": "3.4.0"})),
        "/v3/maintenance/status" => {
            let d = &node.state.data;
            full(
                200,
                json!({"header": header(&net), "version": VERSION, "dbSize": d.db_size.to_string(),
                       "dbSizeInUse": (d.used + 16_384).to_string(), "leader": v.leader.to_string(),
                       "raftIndex": d.raft_index.to_string(), "raftTerm": v.term.to_string(),
                       "raftAppliedIndex": d.raft_index.to_string(), "isLearner": learner}),
            )
        }
        "/v3/maintenance/defragment" => {
            let n = net.nodes.get_mut(url).expect("running");
            n.state.data.db_size = n.state.data.used + 16_384;
            n.dirty = true;
            full(200, json!({"header": header(&net)}))
        }
        "/v3/maintenance/snapshot" => {
            let snap = node.state.data.snapshot();
            let mut out = String::new();
            let chunks: Vec<&[u8]> = snap.chunks(64 * 1024).collect();
            for (i, c) in chunks.iter().enumerate() {
                let remaining: usize = chunks[i + 1..].iter().map(|c| c.len()).sum();
                out.push_str(
                    &json!({"result": {"header": header(&net), "remaining_bytes": remaining.to_string(), "blob": B64.encode(c)}})
                        .to_string(),
                );
                out.push('\n');
            }
            hyper::Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(out)).boxed_unsync())
                .expect("response")
        }
        "/v3/kv/range" => {
            let serializable = body["serializable"].as_bool().unwrap_or(false);
            if !serializable {
                if let Some(e) = need_leader(&v) {
                    return e;
                }
                if learner {
                    return grpc_error(9, "etcdserver: rpc not supported for learner");
                }
            }
            let d = &node.state.data;
            let rev = int(&body["revision"]);
            if rev > d.revision {
                return grpc_error(11, "etcdserver: mvcc: required revision is a future revision");
            }
            if rev > 0 && rev < d.compact_revision {
                return grpc_error(11, "etcdserver: mvcc: required revision has been compacted");
            }
            if rev > 0 && rev < d.revision {
                return grpc_error(12, "simulated etcd: reads at a past revision are not supported");
            }
            let (key, end) = (bytes_of(&body["key"]), bytes_of(&body["range_end"]));
            let (min_mod, max_mod) = (int(&body["min_mod_revision"]), int(&body["max_mod_revision"]));
            let matched: Vec<&Kv> = d
                .kvs
                .range(key.clone()..)
                .map(|(_, kv)| kv)
                .take_while(|kv| in_range(&kv.key, &key, &end))
                .filter(|kv| kv.mod_revision >= min_mod && (max_mod == 0 || kv.mod_revision <= max_mod))
                .collect();
            let count = matched.len();
            let limit = int(&body["limit"]).max(0) as usize;
            let mut out = json!({"header": header(&net)});
            if !body["count_only"].as_bool().unwrap_or(false) {
                let keys_only = body["keys_only"].as_bool().unwrap_or(false);
                let take = if limit == 0 { count } else { limit.min(count) };
                let kvs: Vec<Value> = matched.iter().take(take).map(|kv| kv.to_json(keys_only)).collect();
                if !kvs.is_empty() {
                    out["kvs"] = json!(kvs);
                }
                if take < count {
                    out["more"] = json!(true);
                }
            }
            if count > 0 {
                out["count"] = json!(count.to_string());
            }
            full(200, out)
        }
        "/v3/kv/put" => {
            if let Some(e) = need_leader(&v) {
                return e;
            }
            if learner {
                return grpc_error(9, "etcdserver: rpc not supported for learner");
            }
            let (key, value) = (bytes_of(&body["key"]), bytes_of(&body["value"]));
            if key.is_empty() {
                return grpc_error(3, "etcdserver: key is not provided");
            }
            net.apply(&v.in_sync, |d| d.put(&key, &value));
            full(200, json!({"header": header(&net)}))
        }
        "/v3/kv/deleterange" => {
            if let Some(e) = need_leader(&v) {
                return e;
            }
            if learner {
                return grpc_error(9, "etcdserver: rpc not supported for learner");
            }
            let (key, end) = (bytes_of(&body["key"]), bytes_of(&body["range_end"]));
            let deleted = net.apply(&v.in_sync, |d| d.delete(&key, &end));
            let mut out = json!({"header": header(&net)});
            if deleted > 0 {
                out["deleted"] = json!(deleted.to_string());
            }
            full(200, out)
        }
        "/v3/kv/compaction" => {
            if let Some(e) = need_leader(&v) {
                return e;
            }
            let rev = int(&body["revision"]);
            match net.apply(&v.in_sync, |d| d.compact(rev)) {
                Ok(()) => full(200, json!({"header": header(&net)})),
                Err((code, msg)) => grpc_error(code, msg),
            }
        }
        "/v3/cluster/member/list" => {
            let members: Vec<Value> = node.state.data.members.iter().map(SimMember::to_json).collect();
            let mut h = header(&net);
            h.as_object_mut().map(|o| o.remove("revision"));
            full(200, json!({"header": h, "members": members}))
        }
        "/v3/cluster/member/add" => member_add(&mut net, url, &v, &body, learner),
        "/v3/cluster/member/remove" => member_remove(&mut net, url, &v, &body),
        "/v3/cluster/member/promote" => member_promote(&mut net, url, &v, &body, learner),
        _ => full(404, json!({"error": "Not Found", "message": "Not Found", "code": 5})),
    }
}

fn members_reply(net: &Net, url: &str, v: &View, member: Option<&SimMember>) -> hyper::Response<Body> {
    let n = &net.nodes[url];
    let members: Vec<Value> = n.state.data.members.iter().map(SimMember::to_json).collect();
    let mut out = json!({"header": {"cluster_id": n.state.data.cluster_id.to_string(),
        "member_id": n.state.member_id.to_string(), "raft_term": v.term.to_string()}, "members": members});
    if let Some(m) = member {
        out["member"] = m.to_json();
    }
    full(200, out)
}

/// Running voters of `d` (by member ID) that are in sync.
fn started_voters(net: &Net, v: &View, d: &ClusterData) -> usize {
    d.voters().filter(|m| v.in_sync.iter().any(|u| net.nodes[u].state.member_id == m.id)).count()
}

fn member_add(net: &mut Net, url: &str, v: &View, body: &Value, learner: bool) -> hyper::Response<Body> {
    if !v.quorum {
        return grpc_error(14, "etcdserver: no leader");
    }
    if learner {
        return grpc_error(9, "etcdserver: rpc not supported for learner");
    }
    let peer_urls: Vec<String> = body["peerURLs"]
        .as_array()
        .map(|a| a.iter().filter_map(|u| u.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    if peer_urls.is_empty() {
        return grpc_error(3, "etcdserver: member peer URLs not provided");
    }
    let as_learner = body["isLearner"].as_bool().unwrap_or(false);
    let d = net.nodes[url].state.data.clone();
    if d.members.iter().any(|m| m.peer_urls.iter().any(|u| peer_urls.contains(u))) {
        return grpc_error(9, "etcdserver: Peer URLs already exists");
    }
    if as_learner && d.members.iter().filter(|m| m.is_learner).count() >= 1 {
        return grpc_error(9, "etcdserver: too many learner members in cluster");
    }
    if !as_learner && started_voters(net, v, &d) * 2 <= d.voters().count() + 1 {
        return grpc_error(9, "etcdserver: unhealthy cluster");
    }
    let nanos = jiff::Timestamp::now().as_nanosecond().to_be_bytes();
    let m = SimMember {
        id: member_id(&peer_urls, &d.token, &nanos),
        name: String::new(),
        peer_urls,
        client_urls: Vec::new(),
        is_learner: as_learner,
    };
    net.apply(&v.in_sync, |d| {
        d.raft_index += 1;
        d.members.push(m.clone());
    });
    members_reply(net, url, v, Some(&m))
}

fn member_remove(net: &mut Net, url: &str, v: &View, body: &Value) -> hyper::Response<Body> {
    if !v.quorum {
        return grpc_error(14, "etcdserver: no leader");
    }
    let id = uint(&body["ID"]);
    let d = net.nodes[url].state.data.clone();
    let Some(m) = d.member(id).cloned() else { return grpc_error(5, "etcdserver: member not found") };
    if !m.is_learner {
        let voters = d.voters().count() - 1;
        let started =
            started_voters(net, v, &d) - usize::from(v.in_sync.iter().any(|u| net.nodes[u].state.member_id == id));
        if voters > 0 && started * 2 <= voters {
            return grpc_error(9, "etcdserver: unhealthy cluster");
        }
    }
    net.apply(&v.in_sync, |d| {
        d.raft_index += 1;
        d.members.retain(|m| m.id != id);
    });
    // The removed member learns it (and exits) on the next look at the cluster.
    net.view(url);
    match net.nodes.get(url) {
        Some(_) => members_reply(net, url, v, None),
        None => full(200, json!({"header": {}})),
    }
}

fn member_promote(net: &mut Net, url: &str, v: &View, body: &Value, learner: bool) -> hyper::Response<Body> {
    if !v.quorum {
        return grpc_error(14, "etcdserver: no leader");
    }
    if learner {
        return grpc_error(9, "etcdserver: rpc not supported for learner");
    }
    let id = uint(&body["ID"]);
    let d = net.nodes[url].state.data.clone();
    let Some(m) = d.member(id).cloned() else { return grpc_error(5, "etcdserver: member not found") };
    if !m.is_learner {
        return grpc_error(9, "etcdserver: can only promote a learner member");
    }
    let synced = v.in_sync.iter().any(|u| net.nodes[u].state.member_id == id);
    if !synced {
        return grpc_error(9, "etcdserver: can only promote a learner member which is in sync with leader");
    }
    if (started_voters(net, v, &d) + 1) * 2 <= d.voters().count() + 1 {
        return grpc_error(9, "etcdserver: unhealthy cluster");
    }
    net.apply(&v.in_sync, |d| {
        d.raft_index += 1;
        if let Some(m) = d.members.iter_mut().find(|m| m.id == id) {
            m.is_learner = false;
        }
    });
    members_reply(net, url, v, None)
}

/// `/v3/watch`: the history from `start_revision` (or etcd's compacted answer), then an idle stream until the
/// client hangs up or the member stops.
fn watch(url: &str, generation: u64, life: &Life, body: &Value) -> hyper::Response<Body> {
    let create = &body["create_request"];
    let (key, end) = (bytes_of(&create["key"]), bytes_of(&create["range_end"]));
    let start = int(&create["start_revision"]);
    let mut lines = Vec::new();
    {
        let net = net();
        let Some(n) = net.nodes.get(url).filter(|n| n.generation == generation) else {
            return grpc_error(14, "etcdserver: server stopped");
        };
        let d = &n.state.data;
        let term = net.leaders.get(&d.cluster_id).map_or(n.state.raft_term, |l| l.1);
        let header = json!({"cluster_id": d.cluster_id.to_string(), "member_id": n.state.member_id.to_string(),
                            "revision": d.revision.to_string(), "raft_term": term.to_string()});
        lines.push(json!({"result": {"header": header, "created": true}}));
        if start > 0 && start < d.compact_revision {
            let mut h = header.clone();
            h.as_object_mut().map(|o| o.remove("revision"));
            lines.push(
                json!({"result": {"header": h, "canceled": true, "compact_revision": d.compact_revision.to_string()}}),
            );
        } else if start > 0 {
            let events: Vec<Value> = d
                .history
                .iter()
                .filter(|e| e.kv.mod_revision >= start && in_range(&e.kv.key, &key, &end))
                .map(|e| {
                    if e.deleted {
                        json!({"type": "DELETE", "kv": {"key": B64.encode(&e.kv.key), "mod_revision": e.kv.mod_revision.to_string()}})
                    } else {
                        json!({"kv": e.kv.to_json(false)})
                    }
                })
                .collect();
            if !events.is_empty() {
                lines.push(json!({"result": {"header": header, "events": events}}));
            }
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let cancel = life.cancel.clone();
    tokio::spawn(async move {
        for l in lines {
            if tx.send(Bytes::from(format!("{l}\n"))).await.is_err() {
                return;
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = tx.closed() => {}
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    hyper::Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(BodyExt::boxed_unsync(StreamBody::new(stream)))
        .expect("response")
}

fn bytes_of(v: &Value) -> Vec<u8> {
    v.as_str().and_then(|s| B64.decode(s).ok()).unwrap_or_default()
}

fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn uint(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_u64().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_select_like_etcd() {
        assert!(in_range(b"a", b"a", b""));
        assert!(!in_range(b"ab", b"a", b""));
        assert!(in_range(b"ab", b"a", b"b"));
        assert!(!in_range(b"b", b"a", b"b"));
        assert!(in_range(b"zzz", b"\0", b"\0"));
    }

    #[test]
    fn store_keeps_revisions_history_and_compaction_errors() {
        let mut d = ClusterData::new(1, "t", Vec::new());
        assert_eq!(d.put(b"a", b"1"), 2);
        assert_eq!(d.put(b"a", b"2"), 3);
        assert_eq!(d.kvs[&b"a".to_vec()].version, 2);
        assert_eq!(d.kvs[&b"a".to_vec()].create_revision, 2);
        assert_eq!(d.delete(b"nope", b""), 0);
        assert_eq!(d.revision, 3, "deleting nothing keeps the revision");
        assert_eq!(d.delete(b"a", b""), 1);
        assert_eq!(d.history.len(), 3);
        assert!(d.history[2].deleted);
        let before = d.used;
        assert_eq!(d.compact(5).unwrap_err().1, "etcdserver: mvcc: required revision is a future revision");
        d.compact(4).unwrap();
        assert_eq!(d.history.len(), 1, "events from the compact revision on are kept");
        assert!(d.used < before);
        assert_eq!(d.compact(4).unwrap_err().1, "etcdserver: mvcc: required revision has been compacted");
        assert!(d.db_size >= d.used + 16_384);
    }

    #[test]
    fn member_ids_follow_peer_urls_and_token() {
        let a = member_id(&["http://127.0.0.1:1".into()], "t", b"");
        assert_eq!(a, member_id(&["http://127.0.0.1:1".into()], "t", b""));
        assert_ne!(a, member_id(&["http://127.0.0.1:1".into()], "u", b""));
        assert_ne!(cluster_id(&[1, 2], "t"), cluster_id(&[1, 3], "t"));
        assert_eq!(cluster_id(&[2, 1], "t"), cluster_id(&[1, 2], "t"));
    }
}
