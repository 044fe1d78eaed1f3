//! One etcd pod: the etcd process (or a simulated member, [`crate::etcd::EtcdBackend`]) and the backup-restore
//! sidecar beside it.
//!
//! The sidecar's decisions at start (seeds/004, etcd-backup-restore): a member with data starts as is;
//! a single-member bootstrap with an empty data dir restores the latest full snapshot plus deltas; a
//! member of a multi-member cluster with an empty (or corrupt) data dir is removed from the cluster,
//! cleaned, added back as a learner and promoted once in sync; a new cluster bootstraps when no member
//! lease was ever renewed. While the member is healthy the sidecar renews its lease
//! `<memberID>:<clusterID>:Leader|Member`; the leader's sidecar takes scheduled snapshots into the object store and
//! serves the HTTP API (`/snapshot/full`, `/snapshot/delta`, `/snapshot/latest`, `/healthz`), and nothing
//! etcd-backup-restore does not serve.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::backup::{ObjectStore, SnapshotInfo};
use super::etcdconf::{ETCD_CONF_KEY, EtcdConf, EtcdConfError, MemberConf};
use super::podlogs::{Level, PodLogs};
use super::resources::{BACKUP_PORT, config_map_of_statefulset};
use super::tls::arg;
use super::{Ctx, micro_time_now};
use crate::etcd::cluster::{add_member_retrying, initial_cluster_for_join};
use crate::etcd::process::remove_dir_if_exists;
use crate::etcd::snapshot::restore_snapshot_with;
use crate::etcd::{ClusterState, EtcdClient, EtcdError, MemberConfig, MemberProcess};
use druid_api::Etcd;
use druid_api::names::ANNOTATION_DIRECT_ADDRESS;

/// What the kubelet shows for this pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodView {
    /// The etcd process is running.
    pub running: bool,
    /// Ready: healthy, in quorum, not a learner, restore finished.
    pub ready: bool,
    /// Restarts of the etcd container.
    pub restart_count: i32,
    /// Waiting reason and message while not running (e.g. `CrashLoopBackOff`).
    pub waiting: Option<(String, String)>,
    /// When the current process started (RFC 3339).
    pub started_at: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    view: PodView,
    exit_seen: bool,
    failures: u32,
    backoff_until: Option<Instant>,
    force_rejoin: bool,
    member_id: Option<u64>,
    is_leader: bool,
    is_learner: bool,
    healthy: bool,
    pending_promotion: Option<u64>,
    pending_deltas: Vec<SnapshotInfo>,
    last_full: Option<Instant>,
    last_delta: Option<Instant>,
    registered_backend: bool,
    posted: Option<PodView>,
    held_down_until: Option<Instant>,
    /// The member lease's last renewal by this sidecar: when, and with which holder identity.
    lease_renewed: Option<(Instant, String)>,
    /// The sidecar's HTTPS configuration while the Etcd has `spec.backup.tls` (loaded with the member's start,
    /// as the container mounts the secret); `None` serves plain HTTP.
    backup_tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    /// The backup-restore container's args in the StatefulSet's pod template, read with the member's start (a
    /// container's args are fixed while it runs): the object store (`--storage-provider`, `--store-prefix`) and
    /// the delta snapshot period come from them.
    sidecar_args: Option<Vec<String>>,
}

/// What a member's containers start with.
struct StartConfig {
    /// `etcd.conf.yaml` resolved for this member.
    member: MemberConf,
    /// The StatefulSet (JSON), for the mounted secrets.
    sts: Value,
    /// The backup-restore container's args.
    sidecar_args: Vec<String>,
}

/// The pod a member URL names: the first label of its host (`<pod>.<peer service>.<namespace>.svc`).
fn pod_of_url(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split([':', '/']).next()?;
    if host.parse::<std::net::IpAddr>().is_ok() || !host.contains('.') {
        return None;
    }
    host.split('.').next().filter(|h| !h.is_empty())
}

/// The object store prefix and delta snapshot period in the sidecar's args (`--store-prefix`,
/// `--delta-snapshot-period`; etcd-druid v0.37.1 internal/component/statefulset/builder.go): `None` without a
/// store (`--storage-provider` absent). Without a period the landscape's own interval applies.
fn store_and_period_of(args: &[String], default_period: Duration) -> Option<(String, Duration)> {
    arg(args, "storage-provider")?;
    let prefix = arg(args, "store-prefix")?.to_string();
    let period = arg(args, "delta-snapshot-period")
        .and_then(crate::certmanager::parse_go_duration)
        .map(|d| d.unsigned_abs())
        .unwrap_or(default_period);
    Some((prefix, period))
}

/// Why a start was refused.
struct Blocked {
    reason: &'static str,
    message: String,
    counts_as_crash: bool,
}

impl From<EtcdError> for Blocked {
    fn from(e: EtcdError) -> Self {
        Blocked { reason: "Error", message: e.to_string(), counts_as_crash: true }
    }
}

/// Runtime of one etcd pod.
pub struct MemberRuntime {
    /// Namespace.
    pub namespace: String,
    /// Pod name (= etcd member name).
    pub pod: String,
    /// StatefulSet (= Etcd) name.
    pub etcd: String,
    /// PVC (data directory) name.
    pub pvc: String,
    /// Data directory.
    pub data_dir: PathBuf,
    process: MemberProcess,
    state: Mutex<State>,
    backup_addr: SocketAddr,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    ctx: Weak<Ctx>,
    logs: PodLogs,
}

impl std::fmt::Debug for MemberRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberRuntime").field("namespace", &self.namespace).field("pod", &self.pod).finish()
    }
}

/// The etcd client port of the playground's member pods (`spec.etcd.clientPort` of its Etcds).
const CLIENT_PORT: u16 = 2379;
/// The key the readiness check reads (any key does: a missing one is an empty, successful read).
const READY_CHECK_KEY: &str = "/druid/readiness-probe";

/// How long one probe of a running cluster may take: etcd-backup-restore v0.41.2 `pkg/member/member_control.go`
/// (`EtcdTimeout`, 5 s). A loaded machine answers a linearizable read slowly, not never: a shorter bound would
/// take a running cluster for none and bootstrap a second one beside it.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `peer` belongs to a running cluster, as the sidecar's scale-up check asks it (etcd-backup-restore
/// v0.41.2 `pkg/member/member_control.go` `IsMemberInCluster` → `pkg/miscellaneous/miscellaneous.go` `ProbeEtcd`:
/// a linearizable Get). A member that knows no leader answers its Maintenance Status at once and is not asked the
/// Get, which would only wait for a leader: during a first bootstrap the members do not wait on each other.
async fn probe_running_cluster(peer: &EtcdClient) -> bool {
    match peer.status().await {
        Ok(st) if st.leader != 0 => peer.get(READY_CHECK_KEY).await.is_ok(),
        _ => false,
    }
}

impl MemberRuntime {
    /// Creates the runtime for `ns/pod` and starts its loop and its HTTP API.
    pub(crate) async fn spawn(
        ctx: &Arc<Ctx>,
        ns: &str,
        pod: &str,
        etcd: &str,
        pvc: &str,
        volume: &str,
    ) -> std::io::Result<Arc<MemberRuntime>> {
        let (client_port, peer_port) = ctx.ports(ns, pod);
        let data_dir = ctx.volume_dir(ns, volume);
        let log_file = ctx.opts.state_dir.join("logs").join(ns).join(format!("{pod}.log"));
        let mut cfg = MemberConfig::new(pod, &data_dir, &log_file);
        cfg.client_port = client_port;
        cfg.peer_port = peer_port;
        cfg.heartbeat_ms = ctx.opts.heartbeat_ms;
        cfg.election_ms = ctx.opts.election_ms;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let rt = Arc::new(MemberRuntime {
            namespace: ns.into(),
            pod: pod.into(),
            etcd: etcd.into(),
            pvc: pvc.into(),
            data_dir,
            process: MemberProcess::stopped_with(&ctx.etcd, cfg),
            state: Mutex::default(),
            backup_addr: listener.local_addr()?,
            tasks: Mutex::default(),
            ctx: Arc::downgrade(ctx),
            logs: PodLogs::new(pod, log_file),
        });
        let http = tokio::spawn(serve_http(Arc::downgrade(&rt), listener));
        let looping = tokio::spawn(member_loop(Arc::downgrade(&rt)));
        rt.tasks.lock().expect("tasks").extend([http, looping]);
        // The pod proxy (`pods/<pod>:8080/proxy/...`) reaches this sidecar; a new runtime re-registers its address.
        if let Some(r) = &ctx.registrar {
            r(ns, &format!("pods/{pod}"), BACKUP_PORT, rt.backup_addr)
        }
        Ok(rt)
    }

    /// Loopback client URL of the etcd process.
    pub fn client_url(&self) -> String {
        self.process.client_url()
    }

    /// A client for this member's etcd.
    pub fn etcd_client(&self) -> EtcdClient {
        self.process.client()
    }

    /// Loopback address of the sidecar's HTTP API.
    pub fn backup_addr(&self) -> SocketAddr {
        self.backup_addr
    }

    /// The process supervisor (tests and `playground break` kill it); it runs a simulated member when the
    /// landscape has no etcd binary.
    pub fn process(&self) -> &MemberProcess {
        &self.process
    }

    /// The logs of this pod's containers.
    pub fn logs(&self) -> &PodLogs {
        &self.logs
    }

    /// What the kubelet shows.
    pub fn view(&self) -> PodView {
        self.state.lock().expect("state").view.clone()
    }

    /// Whether the view differs from the last one posted to the pod status; marks it posted.
    pub(crate) fn take_changed_view(&self) -> Option<PodView> {
        let mut s = self.state.lock().expect("state");
        if s.posted.as_ref() == Some(&s.view) {
            return None;
        }
        s.posted = Some(s.view.clone());
        Some(s.view.clone())
    }

    /// Forgets the posted view (after an API server restart or a failed patch).
    pub(crate) fn invalidate_posted(&self) {
        self.state.lock().expect("state").posted = None;
    }

    /// Kills etcd and keeps it down for `duration` (a node outage); it then restarts by itself.
    pub fn hold_down(&self, duration: Duration) {
        self.state.lock().expect("state").held_down_until = Some(Instant::now() + duration);
        self.process.kill();
    }

    /// Kills etcd and deletes its data directory (a lost volume).
    pub fn destroy_data(&self) -> Result<(), EtcdError> {
        self.process.kill();
        remove_dir_if_exists(&self.data_dir)
    }

    /// Kills etcd and overwrites its backend database with garbage (a corrupt member).
    pub fn corrupt_data(&self) -> Result<(), EtcdError> {
        self.process.kill();
        let db = self.data_dir.join("member/snap/db");
        std::fs::write(&db, b"this is not a bbolt database").map_err(|e| EtcdError::io_pub("write", &db, e))
    }

    /// Stops the loop, the HTTP API and etcd (SIGTERM, then SIGKILL after `grace`).
    pub async fn shutdown(&self, grace: Duration) {
        for t in self.tasks.lock().expect("tasks").drain(..) {
            t.abort();
        }
        self.process.stop(grace).await;
    }

    /// Stops everything immediately (SIGKILL).
    pub(crate) fn kill_now(&self) {
        for t in self.tasks.lock().expect("tasks").drain(..) {
            t.abort();
        }
        self.process.kill();
    }

    fn has_data(&self) -> bool {
        self.data_dir.join("member").exists()
    }

    /// Takes a full snapshot now (on-demand API).
    pub async fn snapshot_full(&self) -> Result<SnapshotInfo, String> {
        let (store, _) = self.store_and_period().await.ok_or("backups are not configured for this Etcd")?;
        let ctx = self.ctx.upgrade().ok_or("landscape stopped")?;
        if ctx.is_backup_failing(&self.namespace, &self.etcd) {
            return Err("object store unreachable (playground fault backup-failing)".into());
        }
        let info = store.take_full(&self.process.client()).await.map_err(|e| e.to_string())?;
        self.logs.sidecar(
            Level::Info,
            Some("snapshotter"),
            &format!("Successfully saved full snapshot at: {}", info.snap_name),
        );
        let taken_at = jiff::Timestamp::from_second(info.created_on).ok();
        self.renew_snapshot_lease(true, info.last_revision, taken_at).await;
        self.state.lock().expect("state").last_full = Some(Instant::now());
        Ok(info)
    }

    /// Takes a delta snapshot now (on-demand API); `None` when nothing changed since the last snapshot.
    pub async fn snapshot_delta(&self) -> Result<Option<SnapshotInfo>, String> {
        let (store, _) = self.store_and_period().await.ok_or("backups are not configured for this Etcd")?;
        let ctx = self.ctx.upgrade().ok_or("landscape stopped")?;
        if ctx.is_backup_failing(&self.namespace, &self.etcd) {
            return Err("object store unreachable (playground fault backup-failing)".into());
        }
        let client = self.process.client();
        let info = store.take_delta(&client).await.map_err(|e| e.to_string())?;
        self.logs.sidecar(
            Level::Info,
            Some("snapshotter"),
            &match &info {
                Some(i) => format!("Successfully saved delta snapshot at: {}", i.snap_name),
                None => "No events received to save snapshot. Skipping delta snapshot.".into(),
            },
        );
        // No new delta: the holder keeps the newest delta's revision ("0" before the first one).
        let rev = info.as_ref().map_or(0, |i| i.last_revision);
        self.renew_snapshot_lease(false, rev, None).await;
        self.state.lock().expect("state").last_delta = Some(Instant::now());
        Ok(info)
    }

    async fn etcd_object(&self) -> Option<Etcd> {
        let ctx = self.ctx.upgrade()?;
        if let Some(e) = crate::cache::cached(&ctx.etcds.store, &self.namespace, &self.etcd) {
            return Some(e);
        }
        Api::<Etcd>::namespaced(ctx.clients.backup_restore.clone(), &self.namespace).get_opt(&self.etcd).await.ok()?
    }

    async fn store_and_period(&self) -> Option<(ObjectStore, Duration)> {
        let ctx = self.ctx.upgrade()?;
        let args = self.state.lock().expect("state").sidecar_args.clone()?;
        store_and_period_of(&args, ctx.opts.delta_snapshot_interval)
            .map(|(prefix, period)| (ObjectStore::new(ctx.store_dir(&self.namespace, &prefix)), period))
    }

    /// etcd-backup-restore `pkg/health/heartbeat/heartbeat.go`: the holder is the snapshot's last revision and
    /// is only ever raised; the full lease's renewTime is the time the snapshot was taken, the delta lease's is
    /// now.
    async fn renew_snapshot_lease(&self, full: bool, revision: i64, taken_at: Option<jiff::Timestamp>) {
        let Some(ctx) = self.ctx.upgrade() else { return };
        let name = if full { format!("{}-full-snap", self.etcd) } else { format!("{}-delta-snap", self.etcd) };
        let api = Api::<Lease>::namespaced(ctx.clients.backup_restore.clone(), &self.namespace);
        let current = api
            .get_opt(&name)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .and_then(|h| h.parse::<i64>().ok());
        let revision = current.map_or(revision, |c| c.max(revision));
        let renew = match (full, taken_at) {
            (true, Some(t)) => t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string(),
            _ => micro_time_now(),
        };
        let patch = json!({"spec": {"holderIdentity": revision.to_string(), "renewTime": renew}});
        if let Err(e) = api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            tracing::debug!(lease = %name, error = %e, "snapshot lease not renewed");
        }
    }

    /// `RenewMemberLease` of etcd-backup-restore v0.39+ (`pkg/health/heartbeat/heartbeat.go`): holder
    /// `<memberID>:<clusterID>:<Leader|Member>` in hex from the member's maintenance status, which answers
    /// without a leader too; the lease is the member's name (`<memberNamePrefix>-<pod>` with a prefix).
    async fn renew_member_lease(&self, id: u64, cluster_id: u64, leader: bool) {
        let Some(ctx) = self.ctx.upgrade() else { return };
        let api = Api::<Lease>::namespaced(ctx.clients.backup_restore.clone(), &self.namespace);
        let holder = format!("{id:x}:{cluster_id:x}:{}", if leader { "Leader" } else { "Member" });
        // etcd-backup-restore renews the member lease on its heartbeat ticker (`--k8s-heartbeat-duration`,
        // which etcd-druid sets from `spec.etcd.heartbeatDuration`, default 10s, in
        // `internal/component/statefulset/builder.go`), against a member unknown threshold of 1m: six
        // heartbeats per threshold. The landscape keeps that ratio to its shorter lease
        // (`lease_seconds` is its unknown threshold); a new holder (role or member change) is written at once.
        let period = Duration::from_millis(u64::from(ctx.opts.lease_seconds.max(1) as u32) * 1000 / 6);
        if self
            .state
            .lock()
            .expect("state")
            .lease_renewed
            .as_ref()
            .is_some_and(|(at, h)| *h == holder && at.elapsed() < period)
        {
            return;
        }
        let lease = match self.etcd_object().await {
            Some(e) => e.managed_names().member_of_pod(&self.pod),
            None => self.pod.clone(),
        };
        let patch = json!({"spec": {"holderIdentity": holder, "renewTime": micro_time_now()}});
        match api.patch(&lease, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => self.state.lock().expect("state").lease_renewed = Some((Instant::now(), holder)),
            Err(e) => tracing::debug!(lease = %lease, error = %e, "member lease not renewed"),
        }
    }

    /// Reads what the pod's containers are started with: the StatefulSet's pod template (the sidecar's args, the
    /// mounted secrets) and the ConfigMap mounted as `etcd-config-file`, parsed as YAML and resolved for this member
    /// as backup-restore's `/config` endpoint does it (etcd-backup-restore `pkg/server/httpAPI.go` `serveConfig`).
    async fn read_config(&self, ctx: &Ctx) -> Result<StartConfig, Blocked> {
        let client = ctx.clients.backup_restore.clone();
        let sts = Api::<StatefulSet>::namespaced(client.clone(), &self.namespace)
            .get_opt(&self.etcd)
            .await
            .ok()
            .flatten()
            .ok_or_else(|| Blocked {
                reason: "ContainerCreating",
                message: "StatefulSet not found".into(),
                counts_as_crash: false,
            })?;
        let sts = serde_json::to_value(&sts).unwrap_or(Value::Null);
        let cm_name = config_map_of_statefulset(&sts).ok_or_else(|| Blocked {
            reason: "CreateContainerConfigError",
            message: "no volume etcd-config-file in the StatefulSet".into(),
            counts_as_crash: false,
        })?;
        let cm =
            Api::<ConfigMap>::namespaced(client, &self.namespace).get_opt(&cm_name).await.ok().flatten().ok_or_else(
                || Blocked {
                    reason: "CreateContainerConfigError",
                    message: format!("configmap {cm_name:?} not found"),
                    counts_as_crash: false,
                },
            )?;
        let yaml = cm.data.as_ref().and_then(|d| d.get(ETCD_CONF_KEY)).cloned().unwrap_or_default();
        // backup-restore cannot serve the config (etcd-wrapper then cannot start etcd): the container fails.
        let crash = |e: EtcdConfError| Blocked {
            reason: "Error",
            message: format!("configmap {cm_name}: {e}"),
            counts_as_crash: true,
        };
        let member = EtcdConf::parse(&yaml).and_then(|c| c.member_urls(&self.pod)).map_err(crash)?;
        if !member.initial_cluster.iter().any(|(n, _)| *n == member.name) {
            return Err(Blocked {
                reason: "Error",
                message: format!("member {} is not in initial-cluster of configmap {cm_name}", member.name),
                counts_as_crash: true,
            });
        }
        let sidecar_args = sts
            .pointer("/spec/template/spec/containers")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["name"] == "backup-restore"))
            .and_then(|c| serde_json::from_value::<Vec<String>>(c["args"].clone()).ok())
            .unwrap_or_default();
        Ok(StartConfig { member, sts, sidecar_args })
    }

    /// The sidecar's initialization: decide how etcd starts, prepare the data dir, start it.
    async fn prepare_and_start(&self, ctx: &Arc<Ctx>) -> Result<(), Blocked> {
        let StartConfig { member, sts, sidecar_args } = self.read_config(ctx).await?;
        self.state.lock().expect("state").sidecar_args = Some(sidecar_args.clone());
        let ic = member.initial_cluster.clone();
        let me = member.name.clone();
        // etcd's `--name` is the member name (also for a restore below).
        self.process.update_config(|c| c.name = me.clone());
        // The playground's DNS: a member URL names its pod (`<pod>.<peer service>.<namespace>.svc`), whose
        // loopback ports stand in for it; a URL naming no pod falls back to the member name's pod.
        let prefix = member.conf.member_name_prefix().map(str::to_string);
        let pod_of = |name: &str, url: &str| -> String {
            if let Some(pod) = pod_of_url(url) {
                return pod.to_string();
            }
            match &prefix {
                Some(p) => name.strip_prefix(&format!("{p}-")).unwrap_or(name).to_string(),
                None => name.to_string(),
            }
        };
        let peer_port_of = |name: &str, url: &str| ctx.ports(&self.namespace, &pod_of(name, url)).1;
        let loopback = |name: &str, url: &str| format!("http://127.0.0.1:{}", peer_port_of(name, url));
        let initial_cluster: String =
            ic.iter().map(|(n, u)| format!("{n}={}", loopback(n, u))).collect::<Vec<_>>().join(",");
        let force_rejoin = self.state.lock().expect("state").force_rejoin;
        let cluster_state =
            if member.conf.initial_cluster_state == "existing" { ClusterState::Existing } else { ClusterState::New };
        let mut join: Option<(String, u64)> = None;

        if ic.len() == 1 {
            if force_rejoin || !self.has_data() {
                remove_dir_if_exists(&self.data_dir)?;
                self.restore_from_store(ctx).await?;
            }
        } else if force_rejoin || !self.has_data() {
            let peers: Vec<EtcdClient> = ic
                .iter()
                .filter(|(n, _)| *n != me)
                .map(|(n, u)| {
                    EtcdClient::new(&format!("http://127.0.0.1:{}", ctx.ports(&self.namespace, &pod_of(n, u)).0))
                        .with_timeout(PROBE_TIMEOUT)
                })
                .collect();
            // All peers at once, as the sidecar asks the client Service (which any ready member answers): a peer
            // on a lost node costs no probe timeout of its own.
            let probes = peers.into_iter().map(|p| {
                Box::pin(async move {
                    if probe_running_cluster(&p).await { Ok(p.with_timeout(Duration::from_secs(3))) } else { Err(()) }
                })
            });
            let quorate = futures::future::select_ok(probes).await.ok().map(|(p, _)| p);
            match quorate {
                Some(peer) => {
                    let my_peer = format!("http://127.0.0.1:{}", self.process.config().peer_port);
                    let members = peer.member_list().await?;
                    let mine = members.iter().find(|m| m.peer_urls.contains(&my_peer));
                    let never_started = mine.is_some_and(|m| m.name.is_empty());
                    let added_as_learner = mine.filter(|m| never_started && m.is_learner);
                    if let Some(m) = added_as_learner.filter(|_| !force_rejoin) {
                        // Added as a learner by an earlier, interrupted join: join with the membership the cluster
                        // really has (the ConfigMap says `new`, which would bootstrap a second cluster) and
                        // promote it once in sync.
                        join = Some((initial_cluster_for_join(&members, m.id, &me), m.id));
                    } else if never_started && !force_rejoin {
                        // Part of the initial bootstrap that has not started yet: the ConfigMap is right.
                    } else {
                        // seeds/004 single-member restore: MemberRemove → clean → MemberAddAsLearner.
                        if let Some(m) = mine {
                            self.logs.sidecar(
                                Level::Info,
                                None,
                                &format!("Removing the {} member from cluster", self.pod),
                            );
                            peer.member_remove(m.id).await?;
                        }
                        remove_dir_if_exists(&self.data_dir)?;
                        let added = add_member_retrying(&peer, &[my_peer], true, Duration::from_secs(2))
                            .await
                            .map_err(|e| Blocked {
                                reason: "PodInitializing",
                                message: format!("waiting to join as learner: {e}"),
                                counts_as_crash: false,
                            })?;
                        self.logs.sidecar(
                            Level::Info,
                            Some("member-add"),
                            &format!("Added member {:x} to cluster as a learner", added.id),
                        );
                        let members = peer.member_list().await?;
                        join = Some((initial_cluster_for_join(&members, added.id, &me), added.id));
                    }
                }
                None if self.cluster_ever_started(ctx, &ic).await => {
                    return Err(Blocked {
                        reason: "Error",
                        message: "data directory is empty and the cluster has no quorum to join".into(),
                        counts_as_crash: true,
                    });
                }
                None => {} // a new cluster: bootstrap with initial-cluster-state new
            }
        }

        // The server TLS secret is mounted (written) at every start: a restart loads a renewed certificate.
        let client_tls = super::tls::client_tls(
            ctx,
            &self.namespace,
            &self.pod,
            &sts,
            member.conf.client_transport_security.as_ref(),
        )
        .await
        .map_err(|message| Blocked { reason: "ContainerCreating", message, counts_as_crash: false })?;
        // A port-forward to the pod's client port (`pods/<pod>/portforward?ports=2379`) reaches what the
        // member serves there: its TLS listener when the Etcd has client TLS, else the plain client URL.
        if let Some(r) = &ctx.registrar {
            let addr = match &client_tls {
                Some(tls) => SocketAddr::from(([127, 0, 0, 1], tls.port)),
                None => SocketAddr::from(([127, 0, 0, 1], self.process.config().client_port)),
            };
            r(&self.namespace, &format!("pods/{}", self.pod), CLIENT_PORT, addr);
        }
        // The sidecar serves HTTPS with `spec.backup.tls`'s server key pair (etcd-druid passes
        // --server-cert/--server-key to etcd-backup-restore, internal/component/statefulset/builder.go).
        let backup_tls = super::tls::backup_server_tls(ctx, &self.namespace, &sts, &sidecar_args)
            .await
            .map_err(|message| Blocked { reason: "ContainerCreating", message, counts_as_crash: false })?;
        self.state.lock().expect("state").backup_tls = backup_tls;
        let log = self.process.config().log_file;
        let conf = &member.conf;
        self.process.update_config(|c| {
            c.client_tls = client_tls;
            c.initial_cluster_token = Some(conf.initial_cluster_token.clone())
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| "etcd-cluster".into());
            // The keys of etcd.conf.yaml a member started by etcd-wrapper takes from it; an empty one is etcd's default.
            c.snapshot_count = u64::try_from(conf.snapshot_count).ok().filter(|n| *n > 0);
            c.quota_backend_bytes = Some(conf.quota_backend_bytes).filter(|n| *n > 0);
            c.metrics = Some(conf.metrics.clone()).filter(|m| !m.is_empty());
            c.auto_compaction = Some((conf.auto_compaction_mode.clone(), conf.auto_compaction_retention.clone()))
                .filter(|(m, r)| !m.is_empty() && !r.is_empty());
            match &join {
                Some((ic, _)) => {
                    c.initial_cluster = ic.clone();
                    c.initial_cluster_state = ClusterState::Existing;
                }
                None => {
                    c.initial_cluster = initial_cluster;
                    c.initial_cluster_state = cluster_state;
                }
            }
        });
        let _ = std::fs::create_dir_all(log.parent().unwrap_or(&self.data_dir));
        if let Some(parent) = self.data_dir.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        self.logs.etcd_starting();
        self.process.start()?;
        let mut s = self.state.lock().expect("state");
        s.force_rejoin = false;
        s.pending_promotion = join.map(|(_, id)| id);
        Ok(())
    }

    /// Whether any member lease of this Etcd was ever renewed (the cluster existed before).
    async fn cluster_ever_started(&self, ctx: &Ctx, ic: &[(String, String)]) -> bool {
        let api = Api::<Lease>::namespaced(ctx.clients.backup_restore.clone(), &self.namespace);
        for (name, _) in ic {
            if let Ok(Some(l)) = api.get_opt(name).await
                && l.spec.and_then(|s| s.holder_identity).is_some_and(|h| !h.is_empty())
            {
                return true;
            }
        }
        false
    }

    /// Single-member bootstrap with an empty data dir: restore the newest full snapshot (deltas are
    /// replayed once etcd runs).
    async fn restore_from_store(&self, ctx: &Ctx) -> Result<(), Blocked> {
        let Some((store, _)) = self.store_and_period().await else { return Ok(()) };
        let Some((full, deltas)) = store.latest_chain() else { return Ok(()) };
        self.logs.sidecar(Level::Info, None, &format!("Restoring from base snapshot: {}", full.snap_name));
        // etcd-backup-restore v0.41.2 `pkg/initializer/initializer.go` `restoreCorruptData`: the restore goes into
        // `<data-dir>.part` on the same volume, which takes the data directory's place only once complete. A restore
        // cut short (the container stopped, etcdctl failed after writing the database and before the WAL) leaves
        // no half-written `member/` that a later start would take for a member's data and bootstrap a new cluster
        // on, keys and all, whose log new members replay without them.
        let mut cfg = self.process.config();
        let part = self.data_dir.join("restore.part");
        remove_dir_if_exists(&part)?;
        cfg.data_dir = part.clone();
        if let Err(e) = restore_snapshot_with(&ctx.etcd, &store.path(&full), &cfg).await {
            self.logs.sidecar(Level::Error, None, &format!("Failed to restore snapshot: {e}"));
            let _ = remove_dir_if_exists(&part);
            return Err(e.into());
        }
        let member = self.data_dir.join("member");
        remove_dir_if_exists(&member)?;
        let restored = part.join("member");
        std::fs::rename(&restored, &member).map_err(|e| EtcdError::io_pub("rename", &restored, e))?;
        remove_dir_if_exists(&part)?;
        self.logs.sidecar(Level::Info, None, "Restoration complete.");
        tracing::info!(pod = %self.pod, snapshot = %full.snap_name, deltas = deltas.len(), "restored from backup");
        let mut s = self.state.lock().expect("state");
        s.pending_deltas = deltas;
        // The first snapshot after a restore is a full one (no delta may continue the older history).
        s.last_full = None;
        Ok(())
    }

    async fn step(self: &Arc<Self>, ctx: &Arc<Ctx>) {
        if !self.process.is_running() {
            self.handle_not_running(ctx).await;
            return;
        }
        let client = self.process.client().with_timeout(Duration::from_millis(800));
        let status = client.status().await.ok();
        // Ready as etcd-wrapper v0.6.2 judges it (`internal/app/readycheck.go`: a linearizable Get), which still
        // succeeds under the NOSPACE alarm, when etcd's own /health says false ("ALARM NOSPACE"); the sidecar only
        // needs the Maintenance Status to answer (etcd-backup-restore v0.41.2 `pkg/server/backuprestoreserver.go`
        // probeEtcd). So with NOSPACE the pod stays Ready, the lease is renewed and snapshots go on.
        let healthy = status.is_some() && (client.is_healthy().await || client.get(READY_CHECK_KEY).await.is_ok());
        let (promotion, deltas) = {
            let mut s = self.state.lock().expect("state");
            s.healthy = healthy;
            if let Some(st) = &status {
                s.member_id = Some(st.member_id);
                s.is_leader = st.is_leader();
                s.is_learner = st.is_learner;
            }
            if healthy {
                s.failures = 0;
            }
            (s.pending_promotion, std::mem::take(&mut s.pending_deltas))
        };
        if healthy && !deltas.is_empty() {
            // Replayed in order; what is left (store not readable, a replay failed) stays pending and is retried:
            // the member is not ready and takes no snapshot with part of the history missing (replaying a delta
            // again gives the same keys).
            let mut left = deltas.as_slice();
            if let Some((store, _)) = self.store_and_period().await {
                while let Some((d, rest)) = left.split_first() {
                    if let Err(e) = store.apply_delta(&self.process.client(), d).await {
                        tracing::warn!(pod = %self.pod, delta = %d.snap_name, error = %e, "delta replay failed");
                        break;
                    }
                    left = rest;
                }
            }
            if left.is_empty() {
                // backup-restore takes a full snapshot right after a restore: the restored history starts there.
                let _ = self.snapshot_full().await;
            } else {
                self.state.lock().expect("state").pending_deltas = left.to_vec();
            }
        } else if !deltas.is_empty() {
            self.state.lock().expect("state").pending_deltas = deltas;
        }
        // A learner is promoted whether or not this sidecar added it: after a sidecar restart or an interrupted
        // join the pending promotion is gone, and an unpromoted learner blocks every later MemberAddAsLearner.
        let learner_id = status.as_ref().filter(|st| st.is_learner).map(|st| st.member_id);
        if let Some(id) = promotion.or(learner_id)
            && status.is_some()
            && self.promote_through_peers(ctx, id).await
        {
            tracing::info!(pod = %self.pod, "learner promoted");
            self.logs.sidecar(Level::Info, None, "Successfully promoted the learner to a voting member...");
            self.state.lock().expect("state").pending_promotion = None;
        }
        let (is_leader, is_learner, pending) = {
            let s = self.state.lock().expect("state");
            (s.is_leader, s.is_learner, s.pending_promotion.is_some() || !s.pending_deltas.is_empty())
        };
        let ready = healthy && !is_learner && !pending;
        {
            let mut s = self.state.lock().expect("state");
            s.view.running = true;
            s.view.ready = ready;
            s.view.waiting = None;
        }
        // backup-restore renews the member lease whenever etcd answers its maintenance status, also without a
        // leader (then the role is Member): after a quorum loss the survivors' leases stay fresh.
        if let Some(st) = &status
            && !is_learner
        {
            self.renew_member_lease(st.member_id, st.cluster_id, st.is_leader()).await;
        }
        if ready && is_leader {
            self.leader_duties(ctx).await;
        } else {
            self.state.lock().expect("state").registered_backend = false;
        }
    }

    /// MemberPromote through another member (a learner cannot serve it); false while not yet in sync.
    async fn promote_through_peers(&self, ctx: &Ctx, id: u64) -> bool {
        let peers: Vec<EtcdClient> = ctx
            .members
            .lock()
            .expect("members")
            .values()
            .filter(|m| m.namespace == self.namespace && m.etcd == self.etcd && m.pod != self.pod)
            .map(|m| m.etcd_client().with_timeout(Duration::from_secs(2)))
            .collect();
        for p in peers {
            match p.member_promote(id).await {
                Ok(()) => return true,
                Err(EtcdError::Server { message, .. })
                    if message.contains("not found") || message.contains("not a learner") =>
                {
                    return true;
                }
                Err(e) => tracing::debug!(pod = %self.pod, error = %e, "promotion not possible yet"),
            }
        }
        false
    }

    async fn handle_not_running(self: &Arc<Self>, ctx: &Arc<Ctx>) {
        let now = Instant::now();
        {
            let mut s = self.state.lock().expect("state");
            s.healthy = false;
            s.view.running = false;
            s.view.ready = false;
            if !s.exit_seen && s.view.started_at.is_some() {
                // The process died: a container restart, with CrashLoopBackOff's growing delay.
                s.exit_seen = true;
                s.view.restart_count += 1;
                s.failures += 1;
                let delay = Duration::from_millis(250 * 2u64.pow(s.failures.min(5)));
                s.backoff_until = Some(now + delay);
                let reason = if s.view.restart_count > 1 { "CrashLoopBackOff" } else { "Error" };
                s.view.waiting = Some((reason.into(), format!("back-off {delay:?} restarting failed container etcd")));
                if s.failures >= 3 && self.has_data() {
                    s.force_rejoin = true;
                }
            }
            if s.backoff_until.is_some_and(|t| now < t) || s.held_down_until.is_some_and(|t| now < t) {
                if s.held_down_until.is_some() {
                    s.view.waiting =
                        Some(("ContainerCreating".into(), "node unreachable (playground fault member-down)".into()));
                }
                return;
            }
            s.held_down_until = None;
        }
        match self.prepare_and_start(ctx).await {
            Ok(()) => {
                let mut s = self.state.lock().expect("state");
                s.exit_seen = false;
                s.view.started_at = Some(jiff::Timestamp::now().to_string());
                s.view.waiting = None;
                s.view.running = true;
            }
            Err(b) => {
                let mut s = self.state.lock().expect("state");
                if b.counts_as_crash {
                    s.view.restart_count += 1;
                    s.failures += 1;
                    let delay = Duration::from_millis(250 * 2u64.pow(s.failures.min(5)));
                    s.backoff_until = Some(now + delay);
                    let reason = if s.view.restart_count > 1 { "CrashLoopBackOff" } else { b.reason };
                    s.view.waiting = Some((reason.into(), b.message));
                } else {
                    s.view.waiting = Some((b.reason.into(), b.message));
                }
            }
        }
    }

    async fn leader_duties(self: &Arc<Self>, ctx: &Arc<Ctx>) {
        let register = !std::mem::replace(&mut self.state.lock().expect("state").registered_backend, true);
        if register {
            let service = format!("{}-client", self.etcd);
            match &ctx.registrar {
                Some(r) => r(&self.namespace, &service, BACKUP_PORT, self.backup_addr),
                // The API server cannot proxy to this process: publish the leader's address on the Service.
                None => {
                    let patch =
                        json!({"metadata": {"annotations": {ANNOTATION_DIRECT_ADDRESS: self.backup_addr.to_string()}}});
                    let api: Api<k8s_openapi::api::core::v1::Service> =
                        Api::namespaced(ctx.clients.backup_restore.clone(), &self.namespace);
                    if let Err(e) = api.patch(&service, &PatchParams::default(), &Patch::Merge(&patch)).await {
                        tracing::debug!(pod = %self.pod, error = %e, "publishing the leader's sidecar address failed");
                        self.state.lock().expect("state").registered_backend = false;
                    }
                }
            }
        }
        let Some((_, period)) = self.store_and_period().await else { return };
        if ctx.is_backup_failing(&self.namespace, &self.etcd) {
            return;
        }
        let (last_full, last_delta) = {
            let s = self.state.lock().expect("state");
            (s.last_full, s.last_delta)
        };
        if last_full.is_none_or(|t| t.elapsed() >= ctx.opts.full_snapshot_interval) {
            if let Err(e) = self.snapshot_full().await {
                tracing::warn!(pod = %self.pod, error = %e, "scheduled full snapshot failed");
                self.logs.sidecar(Level::Warning, Some("snapshotter"), &format!("Failed to take full snapshot: {e}"));
            }
        } else if last_delta.is_none_or(|t| t.elapsed() >= period)
            && let Err(e) = self.snapshot_delta().await
        {
            tracing::warn!(pod = %self.pod, error = %e, "scheduled delta snapshot failed");
            self.logs.sidecar(Level::Warning, Some("snapshotter"), &format!("Failed to take delta snapshot: {e}"));
        }
    }
}

impl Drop for MemberRuntime {
    fn drop(&mut self) {
        for t in self.tasks.lock().expect("tasks").drain(..) {
            t.abort();
        }
    }
}

async fn member_loop(rt: Weak<MemberRuntime>) {
    loop {
        let (Some(rt), ctx) = (rt.upgrade(), rt.upgrade().and_then(|r| r.ctx.upgrade())) else { return };
        let Some(ctx) = ctx else { return };
        rt.step(&ctx).await;
        let tick = ctx.opts.tick;
        let cancel = ctx.cancel.clone();
        drop((rt, ctx));
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(tick) => {}
        }
    }
}

/// Parses a Go duration like `20s`, `5m`, `1h`, `500ms`.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit() && c != '.')?);
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

async fn serve_http(rt: Weak<MemberRuntime>, listener: tokio::net::TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let rt = rt.clone();
        let tls = rt.upgrade().and_then(|r| r.state.lock().expect("state").backup_tls.clone());
        tokio::spawn(async move {
            let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let rt = rt.clone();
                async move { Ok::<_, Infallible>(handle(rt, req).await) }
            });
            let http = hyper::server::conn::http1::Builder::new();
            match tls {
                // With TLS a plain-HTTP client fails the handshake, as against etcd-backup-restore.
                Some(config) => {
                    let Ok(stream) = tokio_rustls::TlsAcceptor::from(config).accept(stream).await else { return };
                    let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                }
                None => {
                    let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                }
            }
        });
    }
}

fn reply(status: u16, body: Value) -> hyper::Response<Full<Bytes>> {
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("response")
}

async fn handle(rt: Weak<MemberRuntime>, req: hyper::Request<hyper::body::Incoming>) -> hyper::Response<Full<Bytes>> {
    let Some(rt) = rt.upgrade() else { return reply(503, json!({"error": "member stopped"})) };
    let path = req.uri().path().trim_end_matches('/').to_string();
    match path.as_str() {
        "/healthz" => {
            let healthy = rt.state.lock().expect("state").healthy;
            reply(if healthy { 200 } else { 503 }, json!({"health": healthy}))
        }
        "/snapshot/full" => match rt.snapshot_full().await {
            Ok(info) => reply(200, serde_json::to_value(info).unwrap_or_default()),
            Err(e) => reply(500, json!({"error": e})),
        },
        "/snapshot/delta" => match rt.snapshot_delta().await {
            Ok(Some(info)) => reply(200, serde_json::to_value(info).unwrap_or_default()),
            Ok(None) => reply(200, json!({"message": "no changes since the last snapshot"})),
            Err(e) => reply(500, json!({"error": e})),
        },
        "/snapshot/latest" => match rt.store_and_period().await {
            Some((store, _)) => match store.latest_chain() {
                Some((full, deltas)) => reply(200, json!({"fullSnapshot": full, "deltaSnapshots": deltas})),
                None => reply(404, json!({"error": "no snapshot in the object store"})),
            },
            None => reply(404, json!({"error": "backups are not configured"})),
        },
        // Anything else is unknown to etcd-backup-restore's server (pkg/server/httpAPI.go registers snapshot,
        // initialization, health and config handlers; no defragmentation or compaction): Go's ServeMux answers.
        _ => hyper::Response::builder()
            .status(404)
            .header("content-type", "text/plain; charset=utf-8")
            .body(Full::new(Bytes::from_static(b"404 page not found\n")))
            .expect("response"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_pods() {
        assert_eq!(pod_of_url("https://etcd-main-1.etcd-main-peer.ns.svc:2380"), Some("etcd-main-1"));
        assert_eq!(pod_of_url("http://127.0.0.1:2380"), None);
        assert_eq!(pod_of_url("http://localhost:2380"), None);
    }

    #[test]
    fn the_store_comes_from_the_sidecar_args() {
        let etcd = crate::resources::tests::etcd(3);
        let args = crate::resources::backup_restore_args(&etcd);
        assert_eq!(store_and_period_of(&args, Duration::from_secs(7)), Some(("p".into(), Duration::from_secs(7))));
        let with_period = [args.clone(), vec!["--delta-snapshot-period=2s".into()]].concat();
        assert_eq!(store_and_period_of(&with_period, Duration::from_secs(7)).unwrap().1, Duration::from_secs(2));
        assert_eq!(store_and_period_of(&["server".to_string()], Duration::from_secs(7)), None);
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("20s"), Some(Duration::from_secs(20)));
        assert_eq!(parse_go_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("x"), None);
    }
}
