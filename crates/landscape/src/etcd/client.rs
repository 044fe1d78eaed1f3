//! A small etcd v3 client over etcd's JSON gRPC gateway (`POST /v3/...`), built on hyper.
//!
//! Keys and values travel base64-encoded; 64-bit integers arrive as JSON strings. Only what the
//! landscape and tests need: KV, cluster membership (incl. learners), status, defragmentation,
//! compaction and snapshots.

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use super::EtcdError;

/// One key-value pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// Key bytes.
    pub key: Vec<u8>,
    /// Value bytes.
    pub value: Vec<u8>,
    /// Revision of the last modification.
    pub mod_revision: i64,
    /// Revision of the creation.
    pub create_revision: i64,
}

impl KeyValue {
    /// Key as (lossy) UTF-8.
    pub fn key_str(&self) -> String {
        String::from_utf8_lossy(&self.key).into_owned()
    }

    /// Value as (lossy) UTF-8.
    pub fn value_str(&self) -> String {
        String::from_utf8_lossy(&self.value).into_owned()
    }
}

/// A cluster member as reported by MemberList.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Member ID.
    pub id: u64,
    /// Name; empty until a freshly added member started.
    pub name: String,
    /// Peer URLs.
    pub peer_urls: Vec<String>,
    /// Client URLs; empty until started.
    pub client_urls: Vec<String>,
    /// Whether the member is a non-voting learner.
    pub is_learner: bool,
}

impl Member {
    /// Member ID in etcd's hex notation (as `etcdctl member list` prints it).
    pub fn id_hex(&self) -> String {
        format!("{:x}", self.id)
    }
}

/// Maintenance status of one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    /// ID of the answering member.
    pub member_id: u64,
    /// ID of the cluster it belongs to (response header).
    pub cluster_id: u64,
    /// ID of the leader it knows (0 = none).
    pub leader: u64,
    /// Current store revision.
    pub revision: i64,
    /// Raft term.
    pub raft_term: u64,
    /// Raft index.
    pub raft_index: u64,
    /// Database size in bytes.
    pub db_size: i64,
    /// Database size in use in bytes.
    pub db_size_in_use: i64,
    /// Whether it is a learner.
    pub is_learner: bool,
    /// Server version.
    pub version: String,
    /// Alarms / errors the member reports.
    pub errors: Vec<String>,
}

impl MemberStatus {
    /// Whether the answering member is the leader.
    pub fn is_leader(&self) -> bool {
        self.leader != 0 && self.leader == self.member_id
    }
}

/// One change from a watch: a put (the new key-value) or a delete (key and revision only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// True for a delete.
    pub deleted: bool,
    /// The key-value after a put; for a delete only `key` and `mod_revision` are set.
    pub kv: KeyValue,
}

/// The changes since a revision, as [`EtcdClient::changes_between`] reads them from a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchHistory {
    /// Every event in the requested revisions, in order.
    Events(Vec<WatchEvent>),
    /// The history was compacted away; the member's compact revision.
    Compacted(i64),
}

/// Client for one member's client URL.
#[derive(Clone, Debug)]
pub struct EtcdClient {
    endpoint: String,
    timeout: Duration,
    http: Client<HttpConnector, Full<Bytes>>,
}

impl EtcdClient {
    /// A client for `endpoint` (e.g. `http://127.0.0.1:2379`) with a 3 s request timeout.
    pub fn new(endpoint: &str) -> EtcdClient {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_millis(500)));
        connector.set_nodelay(true);
        EtcdClient {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            timeout: Duration::from_secs(3),
            http: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// The same client with another per-request timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> EtcdClient {
        self.timeout = timeout;
        self
    }

    /// The endpoint URL.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn call_raw(&self, path: &str, body: Value, timeout: Duration) -> Result<Bytes, EtcdError> {
        let req = http::Request::post(format!("{}{}", self.endpoint, path))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| self.decode_err(path, e.to_string()))?;
        let fut = async {
            let resp = self
                .http
                .request(req)
                .await
                .map_err(|e| EtcdError::Unavailable { endpoint: self.endpoint.clone(), message: error_chain(&e) })?;
            let status = resp.status();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| EtcdError::Unavailable { endpoint: self.endpoint.clone(), message: e.to_string() })?
                .to_bytes();
            Ok::<_, EtcdError>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(timeout, fut).await.map_err(|_| EtcdError::Timeout {
            endpoint: self.endpoint.clone(),
            path: path.to_string(),
            timeout,
        })??;
        if !status.is_success() {
            return Err(self.server_err(path, &bytes, status.as_u16()));
        }
        Ok(bytes)
    }

    async fn call(&self, path: &str, body: Value) -> Result<Value, EtcdError> {
        let bytes = self.call_raw(path, body, self.timeout).await?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| self.decode_err(path, e.to_string()))?;
        if v.get("error").is_some() && v.get("header").is_none() {
            return Err(self.server_err(path, &bytes, 200));
        }
        Ok(v)
    }

    fn server_err(&self, path: &str, bytes: &[u8], http_status: u16) -> EtcdError {
        let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
        let message = v
            .get("message")
            .or_else(|| v.get("error"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("HTTP {http_status}: {}", String::from_utf8_lossy(bytes).trim()));
        let code = v.get("code").and_then(Value::as_i64).unwrap_or(-1);
        EtcdError::Server { endpoint: self.endpoint.clone(), path: path.to_string(), code, message }
    }

    fn decode_err(&self, path: &str, message: String) -> EtcdError {
        EtcdError::Decode { endpoint: self.endpoint.clone(), path: path.to_string(), message }
    }

    /// Puts `key = value`; returns the new store revision.
    pub async fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<i64, EtcdError> {
        let v = self.call("/v3/kv/put", json!({"key": B64.encode(key), "value": B64.encode(value)})).await?;
        Ok(int(&v["header"]["revision"]))
    }

    /// Reads one key (linearizable).
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<KeyValue>, EtcdError> {
        let v = self.call("/v3/kv/range", json!({"key": B64.encode(key)})).await?;
        Ok(self.kvs(&v, "/v3/kv/range")?.into_iter().next())
    }

    /// Reads every key starting with `prefix` (an empty prefix reads everything).
    pub async fn get_prefix(&self, prefix: impl AsRef<[u8]>) -> Result<Vec<KeyValue>, EtcdError> {
        let (key, end) = prefix_range(prefix.as_ref());
        let v = self.call("/v3/kv/range", json!({"key": B64.encode(key), "range_end": B64.encode(end)})).await?;
        self.kvs(&v, "/v3/kv/range")
    }

    /// Keys modified at or after `min_mod_revision` (used for delta snapshots), with the store revision.
    pub async fn changed_since(&self, min_mod_revision: i64) -> Result<(Vec<KeyValue>, i64), EtcdError> {
        let v = self
            .call(
                "/v3/kv/range",
                json!({"key": B64.encode([0u8]), "range_end": B64.encode([0u8]), "min_mod_revision": min_mod_revision.to_string()}),
            )
            .await?;
        Ok((self.kvs(&v, "/v3/kv/range")?, int(&v["header"]["revision"])))
    }

    /// Every change (puts and deletes) from revision `from` up to and including `until`, read with a watch
    /// starting at `from` over the whole key space (how etcd-backup-restore collects delta snapshots).
    /// `until` must not be above the store revision; an empty list when `until < from`.
    pub async fn changes_between(&self, from: i64, until: i64) -> Result<WatchHistory, EtcdError> {
        if until < from {
            return Ok(WatchHistory::Events(Vec::new()));
        }
        let path = "/v3/watch";
        let body = json!({"create_request": {"key": B64.encode([0u8]), "range_end": B64.encode([0u8]), "start_revision": from.to_string()}});
        let req = http::Request::post(format!("{}{}", self.endpoint, path))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| self.decode_err(path, e.to_string()))?;
        let timeout = self.timeout.max(Duration::from_secs(10));
        let unavailable = |message: String| EtcdError::Unavailable { endpoint: self.endpoint.clone(), message };
        let fut = async {
            let resp = self.http.request(req).await.map_err(|e| unavailable(error_chain(&e)))?;
            let status = resp.status();
            let mut body = resp.into_body();
            if !status.is_success() {
                let bytes = body.collect().await.map_err(|e| unavailable(e.to_string()))?.to_bytes();
                return Err(self.server_err(path, &bytes, status.as_u16()));
            }
            let mut buf: Vec<u8> = Vec::new();
            let mut events = Vec::new();
            loop {
                let Some(frame) = body.frame().await else {
                    return Err(self.decode_err(path, format!("watch ended before revision {until}")));
                };
                if let Ok(data) = frame.map_err(|e| unavailable(e.to_string()))?.into_data() {
                    buf.extend_from_slice(&data);
                }
                let mut consumed = 0;
                let mut stream = serde_json::Deserializer::from_slice(&buf).into_iter::<Value>();
                let mut done = false;
                for item in stream.by_ref() {
                    let msg = match item {
                        Ok(v) => v,
                        Err(e) if e.is_eof() => break,
                        Err(e) => return Err(self.decode_err(path, e.to_string())),
                    };
                    if msg.get("error").is_some() {
                        return Err(self.server_err(path, msg.to_string().as_bytes(), 200));
                    }
                    let r = &msg["result"];
                    let compacted = int(&r["compact_revision"]);
                    if compacted > 0 {
                        return Ok(WatchHistory::Compacted(compacted));
                    }
                    for ev in r["events"].as_array().into_iter().flatten() {
                        let kv = self.kvs(&json!({"kvs": [ev["kv"].clone()]}), path)?.remove(0);
                        done |= kv.mod_revision >= until;
                        events.push(WatchEvent { deleted: ev["type"].as_str() == Some("DELETE"), kv });
                    }
                    if r["canceled"].as_bool() == Some(true) {
                        let reason = r["cancel_reason"].as_str().unwrap_or("canceled by the server");
                        return Err(self.decode_err(path, format!("watch canceled: {reason}")));
                    }
                }
                consumed += stream.byte_offset();
                buf.drain(..consumed);
                if done {
                    events.retain(|e: &WatchEvent| e.kv.mod_revision <= until);
                    return Ok(WatchHistory::Events(events));
                }
            }
        };
        tokio::time::timeout(timeout, fut).await.map_err(|_| EtcdError::Timeout {
            endpoint: self.endpoint.clone(),
            path: path.to_string(),
            timeout,
        })?
    }

    /// Deletes one key; returns how many were deleted.
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<i64, EtcdError> {
        let v = self.call("/v3/kv/deleterange", json!({"key": B64.encode(key)})).await?;
        Ok(int(&v["deleted"]))
    }

    /// Compacts the key history up to `revision`.
    pub async fn compact(&self, revision: i64) -> Result<(), EtcdError> {
        self.call("/v3/kv/compaction", json!({"revision": revision.to_string(), "physical": true})).await?;
        Ok(())
    }

    /// Lists the cluster members.
    pub async fn member_list(&self) -> Result<Vec<Member>, EtcdError> {
        let v = self.call("/v3/cluster/member/list", json!({})).await?;
        Ok(v["members"].as_array().map(|a| a.iter().map(member).collect()).unwrap_or_default())
    }

    /// Adds a member (optionally as a learner); returns it.
    pub async fn member_add(&self, peer_urls: &[String], learner: bool) -> Result<Member, EtcdError> {
        let v = self.call("/v3/cluster/member/add", json!({"peerURLs": peer_urls, "isLearner": learner})).await?;
        Ok(member(&v["member"]))
    }

    /// Removes a member.
    pub async fn member_remove(&self, id: u64) -> Result<(), EtcdError> {
        self.call("/v3/cluster/member/remove", json!({"ID": id.to_string()})).await?;
        Ok(())
    }

    /// Promotes a learner to a voting member (fails while the learner is not in sync).
    pub async fn member_promote(&self, id: u64) -> Result<(), EtcdError> {
        self.call("/v3/cluster/member/promote", json!({"ID": id.to_string()})).await?;
        Ok(())
    }

    /// Maintenance status of the member behind this endpoint (answers without quorum).
    pub async fn status(&self) -> Result<MemberStatus, EtcdError> {
        let v = self.call("/v3/maintenance/status", json!({})).await?;
        Ok(MemberStatus {
            member_id: uint(&v["header"]["member_id"]),
            cluster_id: uint(&v["header"]["cluster_id"]),
            leader: uint(&v["leader"]),
            revision: int(&v["header"]["revision"]),
            raft_term: uint(&v["raftTerm"]),
            raft_index: uint(&v["raftIndex"]),
            db_size: int(&v["dbSize"]),
            db_size_in_use: int(&v["dbSizeInUse"]),
            is_learner: v["isLearner"].as_bool().unwrap_or(false),
            version: v["version"].as_str().unwrap_or_default().to_string(),
            errors: v["errors"]
                .as_array()
                .map(|a| a.iter().filter_map(|e| e.as_str().map(str::to_string)).collect())
                .unwrap_or_default(),
        })
    }

    /// Whether the member has a leader and can serve a quorum read (etcd's `/health`).
    pub async fn is_healthy(&self) -> bool {
        let req = match http::Request::get(format!("{}/health", self.endpoint)).body(Full::new(Bytes::new())) {
            Ok(r) => r,
            Err(_) => return false,
        };
        let fut = async {
            let resp = self.http.request(req).await.ok()?;
            let body = resp.into_body().collect().await.ok()?.to_bytes();
            let v: Value = serde_json::from_slice(&body).ok()?;
            Some(v["health"].as_str() == Some("true"))
        };
        matches!(tokio::time::timeout(self.timeout, fut).await, Ok(Some(true)))
    }

    /// Defragments this member's backend database.
    pub async fn defragment(&self) -> Result<(), EtcdError> {
        self.call_raw("/v3/maintenance/defragment", json!({}), self.timeout.max(Duration::from_secs(30))).await?;
        Ok(())
    }

    /// Streams a full snapshot of this member into `path` (the same bytes as `etcdctl snapshot save`,
    /// including the trailing checksum); returns the store revision at the time of the snapshot.
    pub async fn snapshot_to_file(&self, path: &Path) -> Result<i64, EtcdError> {
        let revision = self.status().await?.revision;
        let path_s = "/v3/maintenance/snapshot";
        let bytes = self.call_raw(path_s, json!({}), self.timeout.max(Duration::from_secs(60))).await?;
        let mut data = Vec::with_capacity(bytes.len());
        for item in serde_json::Deserializer::from_slice(&bytes).into_iter::<Value>() {
            let item = item.map_err(|e| self.decode_err(path_s, e.to_string()))?;
            if item.get("error").is_some() {
                return Err(self.server_err(path_s, item.to_string().as_bytes(), 200));
            }
            let blob = item["result"]["blob"].as_str().unwrap_or_default();
            data.extend(B64.decode(blob).map_err(|e| self.decode_err(path_s, e.to_string()))?);
        }
        if data.is_empty() {
            return Err(self.decode_err(path_s, "empty snapshot stream".into()));
        }
        let tmp = path.with_extension("partial");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| EtcdError::io("create", dir, e))?;
        }
        std::fs::write(&tmp, &data).map_err(|e| EtcdError::io("write", &tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| EtcdError::io("rename", path, e))?;
        Ok(revision)
    }

    fn kvs(&self, v: &Value, path: &str) -> Result<Vec<KeyValue>, EtcdError> {
        let Some(arr) = v.get("kvs").and_then(Value::as_array) else { return Ok(Vec::new()) };
        arr.iter()
            .map(|kv| {
                let key = B64
                    .decode(kv["key"].as_str().unwrap_or_default())
                    .map_err(|e| self.decode_err(path, e.to_string()))?;
                let value = B64
                    .decode(kv["value"].as_str().unwrap_or_default())
                    .map_err(|e| self.decode_err(path, e.to_string()))?;
                Ok(KeyValue {
                    key,
                    value,
                    mod_revision: int(&kv["mod_revision"]),
                    create_revision: int(&kv["create_revision"]),
                })
            })
            .collect()
    }
}

/// The `[key, range_end)` pair that selects every key with `prefix`.
pub fn prefix_range(prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
    if prefix.is_empty() {
        return (vec![0], vec![0]);
    }
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return (prefix.to_vec(), end);
        }
    }
    (prefix.to_vec(), vec![0])
}

fn member(v: &Value) -> Member {
    let strings = |f: &str| -> Vec<String> {
        v[f].as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default()
    };
    Member {
        id: uint(&v["ID"]),
        name: v["name"].as_str().unwrap_or_default().to_string(),
        peer_urls: strings("peerURLs"),
        client_urls: strings("clientURLs"),
        is_learner: v["isLearner"].as_bool().unwrap_or(false),
    }
}

fn uint(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_u64().unwrap_or(0),
        _ => 0,
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_range_increments_last_byte() {
        assert_eq!(prefix_range(b"ab"), (b"ab".to_vec(), b"ac".to_vec()));
        assert_eq!(prefix_range(b"a\xff"), (b"a\xff".to_vec(), b"b".to_vec()));
        assert_eq!(prefix_range(b""), (vec![0], vec![0]));
    }

    #[test]
    fn member_parses_gateway_json() {
        let v = serde_json::json!({"ID":"16298974952362260909","peerURLs":["http://127.0.0.1:1"],"isLearner":true});
        let m = member(&v);
        assert_eq!(m.id, 16298974952362260909);
        assert!(m.is_learner);
        assert_eq!(m.name, "");
        assert_eq!(m.id_hex(), "e231975d0e8ab9ad");
    }
}
