//! Talking to a member's etcd itself, for what only etcd can do: compaction, defragmentation, the alarms and
//! the backend's size (Maintenance Status).
//!
//! etcd-backup-restore's HTTP API has no such endpoints: its server registers the snapshot, initialization,
//! health and config handlers only (gardener/etcd-backup-restore `pkg/server/httpAPI.go`). Its own
//! defragmentation runs on a schedule inside the sidecar. An on-demand compaction or defragmentation therefore
//! goes to etcd's Maintenance and KV gRPC APIs on the member's client port, through the maintained
//! [`etcd_client`] crate, with the client TLS the Etcd names:
//!
//! - the CA bundle from `spec.etcd.clientUrlTls.tlsCASecretRef` (key `dataKey`, `ca.crt` when unset, as
//!   etcd-druid mounts it: `internal/component/statefulset/builder.go`),
//! - the client key pair `tls.crt`/`tls.key` from `clientTLSSecretRef`,
//! - the server name `<etcd>-client.<namespace>.svc`, which the server certificate carries both on Gardener
//!   (`ClientServiceDNSNames` in gardener/gardener `pkg/component/etcd/etcd/tls.go`) and in the playground,
//!   whatever address the connection really goes to.
//!
//! Where the member is reached ([`Route`], decided in [`route`]):
//!
//! 1. the pod annotation [`CLIENT_TLS_URL_ANNOTATION`] (TLS) or [`CLIENT_URL_ANNOTATION`] (plain), which the
//!    playground sets because its members listen on loopback ports;
//! 2. inside the cluster (`KUBERNETES_SERVICE_HOST` set, as for `druidctl serve` in its Deployment), the pod's
//!    DNS name behind the peer Service, `<pod>.<etcd>-peer.<namespace>.svc:<clientPort>` (etcd-druid's peer
//!    Service is headless and publishes not-ready addresses);
//! 3. otherwise a port-forward through the API server to the pod's client port (`pods/portforward`, as
//!    `kubectl port-forward` does), bridged to a loopback listener of this process for the gRPC client.

use std::net::SocketAddr;
use std::time::Duration;

use etcd_client::{
    AlarmAction, AlarmOptions, AlarmType, Certificate, Client as EtcdClient, CompactionOptions, ConnectOptions,
    Identity, TlsOptions,
};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::step::StepError;
use crate::api::Etcd;
pub use druid_api::names::{CLIENT_TLS_URL_ANNOTATION, CLIENT_URL_ANNOTATION};

/// Default etcd client port (`spec.etcd.clientPort` unset).
pub const DEFAULT_CLIENT_PORT: i32 = 2379;

/// How a member's client port is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Straight to this URL (`http://` or `https://host:port`).
    Direct(String),
    /// Through the API server: a port-forward to this pod port.
    PortForward {
        /// Pod name.
        pod: String,
        /// The member's client port.
        port: u16,
    },
}

/// Whether this process runs inside a Kubernetes pod (the variable every container gets).
pub fn in_cluster() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some_and(|v| !v.is_empty())
}

/// The route to member pod `pod` of `etcd` (see the module doc); `in_cluster` as [`in_cluster`] says.
pub fn route(etcd: &Etcd, pod: &Pod, in_cluster: bool) -> Route {
    let tls = etcd.spec.etcd.client_url_tls.is_some();
    let annotation = if tls { CLIENT_TLS_URL_ANNOTATION } else { CLIENT_URL_ANNOTATION };
    if let Some(url) = pod.metadata.annotations.as_ref().and_then(|a| a.get(annotation)) {
        return Route::Direct(url.clone());
    }
    let name = pod.metadata.name.clone().unwrap_or_default();
    if in_cluster {
        let port = etcd.spec.etcd.client_port.unwrap_or(DEFAULT_CLIENT_PORT);
        let ns = etcd.metadata.namespace.as_deref().unwrap_or("default");
        let scheme = if tls { "https" } else { "http" };
        let peer = etcd.managed_names().peer_service();
        return Route::Direct(format!("{scheme}://{name}.{peer}.{ns}.svc:{port}"));
    }
    Route::PortForward { pod: name, port: client_port(etcd) }
}

/// A connection to one member's etcd; the port-forward bridge (if any) stops when it is dropped.
pub struct MemberConnection {
    /// The gRPC client.
    pub client: EtcdClient,
    /// How the member was reached, for messages.
    pub via: String,
    _bridge: Option<tokio_util::sync::DropGuard>,
}

/// The PEM material a `TlsConfig` of an Etcd names (`spec.etcd.clientUrlTls`, `spec.backup.tls`): the CA bundle
/// of `tlsCASecretRef` (key `dataKey`, `ca.crt` when unset, as etcd-druid mounts it) and the key pair
/// (`tls.crt`, `tls.key`) of `clientTLSSecretRef` when set.
pub(crate) struct TlsMaterial {
    /// CA bundle (PEM).
    pub ca: Vec<u8>,
    /// Client certificate chain and key (PEM).
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

/// Reads the [`TlsMaterial`] of `tls` for `etcd` (secrets default to the Etcd's namespace).
pub(crate) async fn tls_material(
    kube: &kube::Client,
    etcd: &Etcd,
    tls: &crate::api::etcd::TlsConfig,
) -> Result<TlsMaterial, StepError> {
    let etcd_ns = etcd.metadata.namespace.as_deref().unwrap_or("default");
    let read = |r: &crate::api::etcd::SecretReference| {
        let ns = r.namespace.clone().unwrap_or_else(|| etcd_ns.to_string());
        let name = r.name.clone();
        let kube = kube.clone();
        async move {
            let secret = Api::<Secret>::namespaced(kube, &ns)
                .get(&name)
                .await
                .map_err(|e| StepError::from_kube(&format!("reading secret {ns}/{name}"), e))?;
            Ok::<_, StepError>((format!("{ns}/{name}"), secret.data.unwrap_or_default()))
        }
    };
    let key = |data: &std::collections::BTreeMap<String, k8s_openapi::ByteString>, what: &str, key: &str| {
        data.get(key)
            .map(|b| b.0.clone())
            .ok_or_else(|| StepError::Permanent(format!("secret {what} has no key {key:?}")))
    };
    // Both secrets at once: one round trip, not two.
    let pair = async {
        match tls.client_tls_secret_ref.as_ref() {
            Some(r) => read(r).await.map(Some),
            None => Ok(None),
        }
    };
    let ((what, ca), pair) = tokio::try_join!(read(&tls.tls_ca_secret_ref), pair)?;
    let ca = key(&ca, &what, tls.tls_ca_secret_ref.data_key.as_deref().unwrap_or("ca.crt"))?;
    let client = match pair {
        Some((what, pair)) => Some((key(&pair, &what, "tls.crt")?, key(&pair, &what, "tls.key")?)),
        None => None,
    };
    Ok(TlsMaterial { ca, client })
}

/// The client TLS of `etcd`, `None` without `spec.etcd.clientUrlTls`.
pub(crate) async fn tls_options(kube: &kube::Client, etcd: &Etcd) -> Result<Option<TlsOptions>, StepError> {
    let Some(tls) = etcd.spec.etcd.client_url_tls.as_ref() else { return Ok(None) };
    let ns = etcd.metadata.namespace.as_deref().unwrap_or("default");
    let material = tls_material(kube, etcd, tls).await?;
    let mut options = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(material.ca))
        .domain_name(format!("{}.{ns}.svc", etcd.managed_names().client_service()));
    if let Some((crt, key)) = material.client {
        options = options.identity(Identity::from_pem(crt, key));
    }
    Ok(Some(options))
}

/// Why a member's client port could not be opened from this process.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The API server refused the port-forward with 403: RBAC does not grant `create pods/portforward`.
    #[error("no permission to create pods/portforward in namespace {namespace}")]
    PortForwardForbidden {
        /// The pod's namespace.
        namespace: String,
    },
    /// Anything else: no pod, no kubelet behind the API server, no local port.
    #[error("{0}")]
    Failed(String),
}

impl From<RouteError> for StepError {
    fn from(e: RouteError) -> StepError {
        match e {
            RouteError::PortForwardForbidden { .. } => StepError::Permanent(e.to_string()),
            RouteError::Failed(why) => StepError::Transient(why),
        }
    }
}

/// Serves a loopback listener whose every connection is a port-forward to `pod:port` (what `kubectl
/// port-forward` does), until `stop` is cancelled. Returns the listener's address.
///
/// The first port-forward is opened before the address is handed out, and the first connection uses it: a
/// refusal (403 without the RBAC grant, a pod without a kubelet behind it) is known from the API server's own
/// answer at once, and a caller that opens it concurrently with its other reads (the TLS secrets) does not pay
/// the WebSocket upgrade after them.
async fn bridge(
    kube: &kube::Client,
    ns: &str,
    pod: &str,
    port: u16,
    stop: CancellationToken,
) -> Result<SocketAddr, RouteError> {
    let pods: Api<Pod> = Api::namespaced(kube.clone(), ns);
    let first = pods.portforward(pod, &[port]).await.map_err(|e| match e {
        kube::Error::Api(s) if s.code == 403 => RouteError::PortForwardForbidden { namespace: ns.to_string() },
        kube::Error::Api(s) => {
            RouteError::Failed(format!("the port-forward to {pod}:{port} was refused: {}", s.message))
        }
        other => RouteError::Failed(format!("the port-forward to {pod}:{port} failed: {other}")),
    })?;
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| RouteError::Failed(format!("opening a local port for the port-forward: {e}")))?;
    let addr = listener.local_addr().map_err(|e| RouteError::Failed(e.to_string()))?;
    let pod = pod.to_string();
    tokio::spawn(async move {
        let mut first = Some(first);
        loop {
            let accepted = tokio::select! {
                _ = stop.cancelled() => return,
                a = listener.accept() => a,
            };
            let Ok((mut local, _)) = accepted else { continue };
            let pods = pods.clone();
            let pod = pod.clone();
            let stop = stop.clone();
            let opened = first.take();
            tokio::spawn(async move {
                let mut forwarder = match opened {
                    Some(f) => f,
                    None => match pods.portforward(&pod, &[port]).await {
                        Ok(f) => f,
                        Err(e) => {
                            // The client on the local end sees the connection close and says so itself.
                            tracing::debug!(pod = %pod, error = %e, "port-forward failed");
                            return;
                        }
                    },
                };
                let Some(mut remote) = forwarder.take_stream(port) else { return };
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = tokio::io::copy_bidirectional(&mut local, &mut remote) => {}
                }
                drop(remote);
                let _ = forwarder.join().await;
            });
        }
    });
    Ok(addr)
}

/// A URL that reaches the client port of member `pod` of `etcd` from this process (see the module doc): the
/// route's own URL, or a loopback port-forward bridge that stays open while the returned guard lives. Also says
/// how the member is reached, for messages. `kube` must be able to upgrade connections (HTTP/1.1: the client of
/// [`crate::kube::connect`], not the multiplexed one of [`crate::kube::connect_for_reads`]).
pub async fn member_route(
    kube: &kube::Client,
    etcd: &Etcd,
    pod: &Pod,
) -> Result<(String, String, Option<tokio_util::sync::DropGuard>), RouteError> {
    Ok(match route(etcd, pod, in_cluster()) {
        Route::Direct(url) => (url.clone(), url, None),
        Route::PortForward { pod: name, port } => {
            let (url, via, guard) = port_forward_route(kube, etcd, &name, port).await?;
            (url, via, Some(guard))
        }
    })
}

/// The port-forward route to port `port` of member pod `pod` of `etcd` ([`Route::PortForward`]): a URL of a
/// loopback bridge that stays open while the guard lives, and how the member is reached, for messages. Needs
/// the pod's name only, so it can be opened before the pod is read.
pub async fn port_forward_route(
    kube: &kube::Client,
    etcd: &Etcd,
    pod: &str,
    port: u16,
) -> Result<(String, String, tokio_util::sync::DropGuard), RouteError> {
    let ns = etcd.metadata.namespace.as_deref().unwrap_or("default");
    let scheme = if etcd.spec.etcd.client_url_tls.is_some() { "https" } else { "http" };
    let stop = CancellationToken::new();
    let addr = bridge(kube, ns, pod, port, stop.clone()).await?;
    Ok((format!("{scheme}://{addr}"), format!("a port-forward to {pod}:{port}"), stop.drop_guard()))
}

/// The client port of `etcd`'s members, as [`route`] forwards to it.
pub fn client_port(etcd: &Etcd) -> u16 {
    u16::try_from(etcd.spec.etcd.client_port.unwrap_or(DEFAULT_CLIENT_PORT)).unwrap_or(2379)
}

/// [`member_route`] with its failure as a [`StepError`] (a refused port-forward is permanent, the rest
/// transient: the member may be restarting).
pub async fn member_url(
    kube: &kube::Client,
    etcd: &Etcd,
    pod: &Pod,
) -> Result<(String, String, Option<tokio_util::sync::DropGuard>), StepError> {
    Ok(member_route(kube, etcd, pod).await?)
}

/// Connects to the etcd of member pod `pod` of `etcd` (see the module doc). Connection failures are transient:
/// the member may be restarting.
pub async fn connect(kube: &kube::Client, etcd: &Etcd, pod: &str) -> Result<MemberConnection, StepError> {
    let ns = etcd.metadata.namespace.as_deref().unwrap_or("default");
    let pod_obj = Api::<Pod>::namespaced(kube.clone(), ns)
        .get(pod)
        .await
        .map_err(|e| StepError::from_kube(&format!("reading pod {pod}"), e))?;
    let tls = tls_options(kube, etcd).await?;
    let (url, via, guard) = member_url(kube, etcd, &pod_obj).await?;
    let mut options =
        ConnectOptions::new().with_connect_timeout(Duration::from_secs(10)).with_timeout(Duration::from_secs(300));
    if let Some(tls) = tls {
        options = options.with_tls(tls);
    }
    let client = EtcdClient::connect([url.as_str()], Some(options))
        .await
        .map_err(|e| StepError::Transient(format!("connecting to the etcd of {pod} ({via}): {e}")))?;
    Ok(MemberConnection { client, via, _bridge: guard })
}

/// Compacts the keyspace of the cluster `conn` belongs to up to its current revision (physical: the call
/// returns once the compaction is applied). Returns the revision. A revision compacted already is success.
pub async fn compact(conn: &mut MemberConnection) -> Result<i64, StepError> {
    let status = conn
        .client
        .status()
        .await
        .map_err(|e| StepError::Transient(format!("reading the status of etcd ({}): {e}", conn.via)))?;
    let revision = status.header().map(|h| h.revision()).unwrap_or(0);
    match conn.client.compact(revision, Some(CompactionOptions::new().with_physical())).await {
        Ok(_) => Ok(revision),
        // etcd's ErrCompacted (server/storage/mvcc): another compaction reached this revision first.
        Err(e) if e.to_string().contains("required revision has been compacted") => Ok(revision),
        Err(e) => Err(StepError::Transient(format!("compacting etcd at revision {revision} ({}): {e}", conn.via))),
    }
}

/// Defragments the member `conn` is connected to; returns its database size before and after (bytes).
pub async fn defragment(conn: &mut MemberConnection) -> Result<(i64, i64), StepError> {
    let before = db_size(conn).await?;
    conn.client
        .defragment()
        .await
        .map_err(|e| StepError::Transient(format!("defragmenting etcd ({}): {e}", conn.via)))?;
    let after = db_size(conn).await?;
    Ok((before, after))
}

/// The database size of the member `conn` is connected to (bytes).
async fn db_size(conn: &mut MemberConnection) -> Result<i64, StepError> {
    let status = conn.client.status().await;
    status
        .map(|s| s.db_size())
        .map_err(|e| StepError::Transient(format!("reading the status of etcd ({}): {e}", conn.via)))
}

/// What one member's etcd says about itself and its backend (Maintenance `Status`, `rpc.proto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberSpace {
    /// This member's ID.
    pub member_id: u64,
    /// The leader's ID as this member sees it (0: none).
    pub leader: u64,
    /// Size of the backend database file (what etcd compares with `quota-backend-bytes`), bytes.
    pub db_size: i64,
    /// Bytes of the database in use (the rest is free pages a defragmentation gives back).
    pub db_size_in_use: i64,
    /// The keyspace revision.
    pub revision: i64,
    /// Raft index.
    pub raft_index: u64,
    /// Raft index applied to the backend.
    pub raft_applied_index: u64,
}

impl MemberSpace {
    /// Whether this member leads.
    pub fn is_leader(&self) -> bool {
        self.leader != 0 && self.leader == self.member_id
    }
}

/// An alarm raised in the cluster (`etcdctl alarm list`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Alarm {
    /// The member that raised it.
    pub member_id: u64,
    /// `NOSPACE` or `CORRUPT`.
    pub alarm: String,
}

/// etcd's name of an alarm type, as `etcdctl alarm list` prints it.
fn alarm_name(t: AlarmType) -> &'static str {
    match t {
        AlarmType::Nospace => "NOSPACE",
        AlarmType::Corrupt => "CORRUPT",
        AlarmType::None => "NONE",
    }
}

/// The Maintenance `Status` of the member `conn` is connected to.
pub async fn member_space(conn: &mut MemberConnection) -> Result<MemberSpace, StepError> {
    let s = conn
        .client
        .status()
        .await
        .map_err(|e| StepError::Transient(format!("reading the status of etcd ({}): {e}", conn.via)))?;
    let header = s.header();
    Ok(MemberSpace {
        member_id: header.map(|h| h.member_id()).unwrap_or(0),
        leader: s.leader(),
        db_size: s.db_size(),
        db_size_in_use: s.raft_used_db_size(),
        revision: header.map(|h| h.revision()).unwrap_or(0),
        raft_index: s.raft_index(),
        raft_applied_index: s.raft_applied_index(),
    })
}

/// The alarms raised in the cluster `conn` belongs to.
pub async fn alarms(conn: &mut MemberConnection) -> Result<Vec<Alarm>, StepError> {
    let r = conn
        .client
        .alarm(AlarmAction::Get, AlarmType::None, None)
        .await
        .map_err(|e| StepError::Transient(format!("listing the alarms of etcd ({}): {e}", conn.via)))?;
    Ok(r.alarms().iter().map(|a| Alarm { member_id: a.member_id(), alarm: alarm_name(a.alarm()).into() }).collect())
}

/// Disarms the `NOSPACE` alarm of member `member_id` (`etcdctl alarm disarm` does this for every alarm listed).
/// etcd raises it again at the next write that does not fit the quota.
pub async fn disarm_nospace(conn: &mut MemberConnection, member_id: u64) -> Result<(), StepError> {
    let mut options = AlarmOptions::new();
    options.with_member(member_id);
    conn.client
        .alarm(AlarmAction::Deactivate, AlarmType::Nospace, Some(options))
        .await
        .map(|_| ())
        .map_err(|e| StepError::Transient(format!("disarming NOSPACE of member {member_id:x} ({}): {e}", conn.via)))
}

/// Why a write was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteProbeError {
    /// etcd refused it for lack of space (`mvcc: database space exceeded`, the NOSPACE alarm).
    #[error("etcd refused the write: {0}")]
    NoSpace(String),
    /// Any other failure (connection, timeout, no leader).
    #[error("the write failed: {0}")]
    Other(String),
}

/// Writes `key` and deletes it again: whether the cluster accepts writes.
pub async fn probe_write(conn: &mut MemberConnection, key: &str) -> Result<(), WriteProbeError> {
    let classify = |e: etcd_client::Error| {
        let text = e.to_string();
        // etcd's ErrGRPCNoSpace (api/v3rpc/rpctypes): "etcdserver: mvcc: database space exceeded".
        if text.contains("database space exceeded") {
            WriteProbeError::NoSpace(text)
        } else {
            WriteProbeError::Other(format!("{text} ({})", conn.via))
        }
    };
    if let Err(e) = conn.client.put(key, "druidctl write probe", None).await {
        return Err(classify(e));
    }
    conn.client.delete(key, None).await.map(|_| ()).map_err(classify)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn etcd(tls: bool) -> Etcd {
        let mut spec = json!({"replicas": 3, "labels": {}, "etcd": {"clientPort": 2379}, "backup": {}});
        if tls {
            spec["etcd"]["clientUrlTls"] = json!({"tlsCASecretRef": {"name": "ca-etcd", "dataKey": "bundle.crt"}, "serverTLSSecretRef": {"name": "etcd-server"}});
        }
        serde_json::from_value(json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "etcd-main", "namespace": "shoot--a"}, "spec": spec}))
        .unwrap()
    }

    fn pod(annotations: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "etcd-main-1", "annotations": annotations}})).unwrap()
    }

    #[test]
    fn the_route_follows_the_annotation_then_the_cluster_dns_then_a_port_forward() {
        let annotated = pod(
            json!({CLIENT_TLS_URL_ANNOTATION: "https://127.0.0.1:4000", CLIENT_URL_ANNOTATION: "http://127.0.0.1:4001"}),
        );
        assert_eq!(route(&etcd(true), &annotated, false), Route::Direct("https://127.0.0.1:4000".into()));
        assert_eq!(route(&etcd(false), &annotated, true), Route::Direct("http://127.0.0.1:4001".into()));
        let plain = pod(json!({}));
        assert_eq!(
            route(&etcd(true), &plain, true),
            Route::Direct("https://etcd-main-1.etcd-main-peer.shoot--a.svc:2379".into())
        );
        assert_eq!(route(&etcd(true), &plain, false), Route::PortForward { pod: "etcd-main-1".into(), port: 2379 });
    }

    #[test]
    fn the_ca_key_follows_data_key() {
        let e = etcd(true);
        assert_eq!(e.spec.etcd.client_url_tls.unwrap().tls_ca_secret_ref.data_key.as_deref(), Some("bundle.crt"));
    }
}
