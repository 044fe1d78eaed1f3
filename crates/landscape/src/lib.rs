//! The simulated landscape: etcd-druid, StatefulSet controller/kubelet, backup-restore sidecar, DWD,
//! cert-manager and machine-controller-manager actors, etcd member processes and simulated members, and the
//! playground that puts them on an API server.
//!
//! **A model of the world, not of druidctl.** The landscape depends on `druid-api` (resource types and the
//! names the real components use) and `kube-sim` (the embedded API server) only. It must never depend on the
//! `druidctl` package: every rule it plays (cert-manager's backoff, MCM's selectors, etcd-druid's names and
//! conditions) is re-derived here from the upstream component's source, cited next to it, so that a wrong
//! formula in the product cannot be mirrored by the simulation. `tests/workspace_boundaries.rs` in the root
//! package enforces this.
//!
//! Every actor works only through the Kubernetes API ([`kube::Client`]), so the landscape runs on the
//! embedded API server and on a real one. Each etcd pod is a real etcd process on loopback, or a simulated
//! member serving the same API when no etcd binary is found ([`EtcdBackend`], see [`crate::etcd`]); its PVC is a
//! directory under the state dir, its configuration is the ConfigMap mounted as `etcd-config-file` parsed as
//! etcd-druid v0.37.1 writes it ([`etcdconf`]; pod DNS names mapped to loopback ports), and membership is real.
//!
//! - [`druid`]: the managed resources (rendered by [`resources`] as etcd-druid v0.37.1's builders render them),
//!   and the Etcd status.
//! - [`etcdconf`]: `etcd.conf.yaml`, rendered and read back per member.
//! - [`statefulset`]: StatefulSet controller and kubelet: PVCs, pods by ordinal, pod status.
//! - [`member`]: one pod's etcd process plus its backup-restore sidecar.
//! - [`backup`]: the local object store of snapshots.
//! - [`tls`]: the TLS files a member's configuration names, from the secrets its containers mount, loaded on
//!   each start.
//! - [`dwd`]: dependency-watchdog's prober and the control-plane Deployments.
//! - [`certmanager`], [`mcm`]: cert-manager's issuing controllers; machine-controller-manager.
//! - [`jobs`]: every snapshot compaction Job (druid's `E-compactor` or a task's) and `EtcdCopyBackupsTask`, run
//!   for real.
//! - [`opstask`]: etcd-druid's `EtcdOpsTask` controller (on-demand snapshots).
//! - [`playground`]: the embedded API server plus the landscape, for `druidctl playground` and `demo`.

pub mod etcd;
pub mod etcdconf;

pub mod backup;
mod cache;
pub mod certmanager;
pub mod druid;
pub mod dwd;
pub mod external;
pub mod jobs;
pub mod mcm;
pub mod member;
pub mod opstask;
pub mod playground;
pub mod podlogs;
pub mod resources;
pub mod space;
pub mod statefulset;
pub mod status;
pub mod tls;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::etcd::ports::free_port;
use crate::etcd::{EtcdBackend, EtcdError};

pub use external::{ExternalServer, Fallback, PlaygroundRecord};
pub use member::MemberRuntime;
pub use playground::{BreakKind, Playground, PlaygroundOptions};

/// Registers every vendored upstream CRD ([`druid_api::crds::UPSTREAM`]) in an embedded API server.
pub fn register_upstream_crds(server: &kube_sim::ApiServer) -> Result<(), kube_sim::ApiServerError> {
    for (_, yaml) in druid_api::crds::UPSTREAM {
        server.register_crd_yaml(yaml)?;
    }
    Ok(())
}

/// Every vendored upstream CRD as JSON objects (installed through the API on any other server).
pub fn upstream_crd_documents() -> Result<Vec<serde_json::Value>, LandscapeError> {
    let mut out = Vec::new();
    for (_, yaml) in druid_api::crds::UPSTREAM {
        out.extend(kube_sim::parse_documents(yaml).map_err(|e| LandscapeError::ApiServer(e.to_string()))?);
    }
    Ok(out)
}

/// Errors of the landscape.
#[derive(Debug, thiserror::Error)]
pub enum LandscapeError {
    /// A Kubernetes API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done.
        action: String,
        /// The client error.
        source: kube::Error,
    },
    /// etcd (process or client) failed.
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    /// The embedded API server refused something.
    #[error("embedded API server: {0}")]
    ApiServer(String),
    /// A file could not be written or read.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The external API server refused or lacks something.
    #[error("{0}")]
    External(String),
    /// The named object does not exist in the landscape.
    #[error("{0}")]
    NotFound(String),
    /// Waiting for a condition took too long.
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        timeout: Duration,
    },
}

impl LandscapeError {
    pub(crate) fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        LandscapeError::Kube { action: action.into(), source }
    }
}

/// Registers a loopback backend for `namespace/service:port` in the API server's service proxy, or for
/// `namespace/pods/<pod>:port` in its pod proxy (the embedded server's `register_service_backend` /
/// `register_pod_backend`). Without one, the API server is taken to be unable to reach the sidecars, and the
/// landscape publishes their addresses in [`druid_api::names::ANNOTATION_DIRECT_ADDRESS`] instead.
pub type BackendRegistrar = Arc<dyn Fn(&str, &str, u16, SocketAddr) + Send + Sync>;

/// Tunables of the landscape.
#[derive(Debug, Clone)]
pub struct LandscapeOptions {
    /// Root of PVC directories (`volumes/`), object stores (`backups/`) and logs (`logs/`).
    pub state_dir: PathBuf,
    /// Only act in this namespace (`None`: all namespaces).
    pub namespace: Option<String>,
    /// Period of every actor's loop.
    pub tick: Duration,
    /// `leaseDurationSeconds` of member leases; a member is Ready while its lease is this fresh.
    pub lease_seconds: i32,
    /// Full snapshot period of the leading member's sidecar.
    pub full_snapshot_interval: Duration,
    /// Delta snapshot period (when `spec.backup.deltaSnapshotPeriod` is unset).
    pub delta_snapshot_interval: Duration,
    /// etcd `--heartbeat-interval` in ms.
    pub heartbeat_ms: u64,
    /// etcd `--election-timeout` in ms.
    pub election_ms: u64,
    /// Deployments DWD scales down while the namespace's etcd has lost quorum.
    pub dwd_dependents: Vec<String>,
    /// What runs the etcd members; `None`: [`EtcdBackend::select`] (real etcd when found, else simulated).
    pub etcd: Option<EtcdBackend>,
    /// Whether the API server's own controllers run (kube-controller-manager: StatefulSet, Deployment,
    /// ReplicaSet, Job, PDB, PV binder, namespace, GC, node lifecycle). Then they own those kinds and the landscape
    /// plays only what such a cluster still lacks: scheduler and kubelet (binding, pod status, deletion
    /// confirmed, node lease heartbeat) and the volume provisioner (a PV for each pending PVC). Without them the
    /// landscape also plays the StatefulSet, Deployment and Job controllers. The playground detects it from the
    /// server ([`external::builtin_controllers`]).
    pub builtin_controllers: bool,
    /// The machine-controller-manager release the landscape plays ([`mcm::McmVersion`]).
    pub mcm_version: mcm::McmVersion,
}

impl LandscapeOptions {
    /// Defaults suited to tests and the playground, rooted at `state_dir`.
    pub fn new(state_dir: impl Into<PathBuf>) -> LandscapeOptions {
        LandscapeOptions {
            state_dir: state_dir.into(),
            namespace: None,
            tick: Duration::from_millis(250),
            lease_seconds: 3,
            full_snapshot_interval: Duration::from_secs(300),
            delta_snapshot_interval: Duration::from_secs(5),
            heartbeat_ms: 100,
            election_ms: 1000,
            dwd_dependents: vec!["kube-controller-manager".into(), "machine-controller-manager".into()],
            etcd: None,
            builtin_controllers: false,
            mcm_version: mcm::McmVersion::NEWEST,
        }
    }
}

/// The clients the actors use (the same one, or one per actor so that admission can tell them apart).
#[derive(Clone)]
pub struct ActorClients {
    /// etcd-druid.
    pub druid: kube::Client,
    /// StatefulSet controller and kubelet.
    pub statefulset: kube::Client,
    /// backup-restore sidecars.
    pub backup_restore: kube::Client,
    /// dependency-watchdog and the Deployment controller.
    pub dwd: kube::Client,
    /// machine-controller-manager in its control cluster (Machines, MachineSets); its target cluster (Nodes,
    /// pods) is the one of the other actors, reached with the `druid` client. The same cluster unless the
    /// playground models the two as two API servers.
    pub mcm_control: kube::Client,
}

impl ActorClients {
    /// Every actor uses `client`.
    pub fn same(client: kube::Client) -> ActorClients {
        ActorClients {
            druid: client.clone(),
            statefulset: client.clone(),
            backup_restore: client.clone(),
            dwd: client.clone(),
            mcm_control: client,
        }
    }
}

/// `(namespace, pod)`.
pub(crate) type MemberKey = (String, String);

/// State shared by the actors.
pub(crate) struct Ctx {
    pub(crate) clients: ActorClients,
    pub(crate) opts: LandscapeOptions,
    pub(crate) etcd: EtcdBackend,
    pub(crate) cancel: CancellationToken,
    pub(crate) registrar: Option<BackendRegistrar>,
    pub(crate) members: Mutex<HashMap<MemberKey, Arc<MemberRuntime>>>,
    ports: Mutex<HashMap<MemberKey, (u16, u16)>>,
    tls_ports: Mutex<HashMap<MemberKey, u16>>,
    pub(crate) backup_failing: Mutex<HashSet<(String, String)>>,
    /// Jobs and copy tasks being worked on (`ns/kind/name`).
    pub(crate) busy: Mutex<HashSet<String>>,
    /// uid of the pod each member runtime runs for: a pod deleted and created again under the same name is a new
    /// pod, whose containers a kubelet starts afresh.
    pub(crate) pod_uids: Mutex<HashMap<MemberKey, String>>,
    /// PVCs (uid) a PersistentVolume was provisioned for.
    pub(crate) provisioned: Mutex<HashSet<String>>,
    /// When the kubelet last renewed its node leases.
    pub(crate) node_heartbeat: Mutex<Option<std::time::Instant>>,
    /// The Etcds, kept current by a watch: what the sidecars read of their Etcd (member name prefix, backup
    /// store and delta period) on every pass.
    pub(crate) etcds: cache::Cache<druid_api::Etcd>,
    /// What etcd-druid's status check reads from its cache (controller-runtime's cached client): the pods,
    /// member and snapshot leases, StatefulSets and Events.
    pub(crate) druid_cache: DruidCache,
}

/// The watch-driven caches of the druid actor's status check.
pub(crate) struct DruidCache {
    pub(crate) pods: cache::Cache<k8s_openapi::api::core::v1::Pod>,
    pub(crate) leases: cache::Cache<k8s_openapi::api::coordination::v1::Lease>,
    pub(crate) statefulsets: cache::Cache<k8s_openapi::api::apps::v1::StatefulSet>,
    pub(crate) events: cache::Cache<k8s_openapi::api::core::v1::Event>,
}

impl DruidCache {
    fn start(client: &kube::Client, namespace: Option<&str>, cancel: &CancellationToken) -> DruidCache {
        fn api<K>(client: &kube::Client, ns: Option<&str>) -> kube::Api<K>
        where
            K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
            K::DynamicType: Default,
        {
            match ns {
                Some(ns) => kube::Api::namespaced(client.clone(), ns),
                None => kube::Api::all(client.clone()),
            }
        }
        DruidCache {
            pods: cache::spawn_cache(api(client, namespace), cancel.clone()),
            leases: cache::spawn_cache(api(client, namespace), cancel.clone()),
            statefulsets: cache::spawn_cache(api(client, namespace), cancel.clone()),
            events: cache::spawn_cache(api(client, namespace), cancel.clone()),
        }
    }
}

impl Ctx {
    /// Loopback `(client, peer)` ports of pod `ns/pod`, stable for the landscape's lifetime (the peer URL
    /// is part of etcd's membership, so a recreated pod must get the same one).
    pub(crate) fn ports(&self, ns: &str, pod: &str) -> (u16, u16) {
        *self
            .ports
            .lock()
            .expect("ports")
            .entry((ns.to_string(), pod.to_string()))
            .or_insert_with(|| (free_port(), free_port()))
    }

    /// Loopback port of the client TLS listener of pod `ns/pod`, stable for the landscape's lifetime (published
    /// in the pod annotation [`druid_api::names::CLIENT_TLS_URL_ANNOTATION`]).
    pub(crate) fn tls_port(&self, ns: &str, pod: &str) -> u16 {
        *self.tls_ports.lock().expect("ports").entry((ns.to_string(), pod.to_string())).or_insert_with(free_port)
    }

    /// Data directory of volume `ns/<pvc>-<uid>`.
    pub(crate) fn volume_dir(&self, ns: &str, volume: &str) -> PathBuf {
        self.opts.state_dir.join("volumes").join(ns).join(volume)
    }

    /// Object store of Etcd `ns/etcd` (`prefix` from `spec.backup.store`).
    pub(crate) fn store_dir(&self, ns: &str, prefix: &str) -> PathBuf {
        self.opts.state_dir.join("backups").join(ns).join(prefix.replace('/', "_"))
    }

    /// Whether the playground broke the backups of `ns/etcd`.
    pub(crate) fn is_backup_failing(&self, ns: &str, etcd: &str) -> bool {
        self.backup_failing.lock().expect("faults").contains(&(ns.to_string(), etcd.to_string()))
    }

    pub(crate) fn in_scope(&self, ns: Option<&str>) -> bool {
        self.opts.namespace.as_deref().is_none_or(|want| Some(want) == ns)
    }
}

/// A running landscape: its actor tasks and member processes. Stops everything on [`Landscape::stop`]
/// and on drop.
pub struct Landscape {
    ctx: Arc<Ctx>,
    tasks: Vec<JoinHandle<()>>,
}

impl Landscape {
    /// The kubelet's container logs of the pods this landscape runs, for an API server to serve as `pods/log`.
    pub fn log_source(&self) -> Arc<dyn kube_sim::PodLogSource> {
        Arc::new(podlogs::LandscapeLogs { ctx: Arc::downgrade(&self.ctx) })
    }

    /// Starts the actors, with the etcd members `opts.etcd` says (default [`EtcdBackend::select`]).
    pub fn start(
        clients: ActorClients,
        opts: LandscapeOptions,
        registrar: Option<BackendRegistrar>,
    ) -> Result<Landscape, LandscapeError> {
        let etcd = opts.etcd.clone().unwrap_or_else(EtcdBackend::select);
        if let EtcdBackend::Simulated { reason } = &etcd {
            tracing::info!(%reason, "etcd members are simulated");
        }
        for sub in ["volumes", "backups", "logs"] {
            let p = opts.state_dir.join(sub);
            std::fs::create_dir_all(&p).map_err(|e| LandscapeError::Io { action: "create", path: p, source: e })?;
        }
        let cancel = CancellationToken::new();
        let etcd_api: kube::Api<druid_api::Etcd> = match &opts.namespace {
            Some(ns) => kube::Api::namespaced(clients.druid.clone(), ns),
            None => kube::Api::all(clients.druid.clone()),
        };
        let etcds = cache::spawn_cache(etcd_api, cancel.clone());
        let druid_cache = DruidCache::start(&clients.druid, opts.namespace.as_deref(), &cancel);
        let ctx = Arc::new(Ctx {
            clients,
            opts,
            etcd,
            cancel,
            registrar,
            members: Mutex::default(),
            ports: Mutex::default(),
            tls_ports: Mutex::default(),
            backup_failing: Mutex::default(),
            busy: Mutex::default(),
            pod_uids: Mutex::default(),
            provisioned: Mutex::default(),
            node_heartbeat: Mutex::default(),
            etcds,
            druid_cache,
        });
        let tasks = vec![
            tokio::spawn(druid::run(ctx.clone())),
            tokio::spawn(statefulset::run(ctx.clone())),
            tokio::spawn(dwd::run(ctx.clone())),
            tokio::spawn(jobs::run(ctx.clone())),
            tokio::spawn(opstask::run(ctx.clone())),
            tokio::spawn(certmanager::run(
                ctx.clients.druid.clone(),
                certmanager::CertManagerOptions {
                    namespace: ctx.opts.namespace.clone(),
                    tick: ctx.opts.tick,
                    ca_issuers: certmanager::playground_ca_issuers(),
                },
                ctx.cancel.clone(),
                Default::default(),
            )),
            tokio::spawn(mcm::run(
                mcm::McmClients { control: ctx.clients.mcm_control.clone(), target: ctx.clients.druid.clone() },
                mcm::McmOptions {
                    namespace: ctx.opts.namespace.clone(),
                    tick: ctx.opts.tick,
                    version: ctx.opts.mcm_version,
                    ..Default::default()
                },
                ctx.cancel.clone(),
            )),
        ];
        Ok(Landscape { ctx, tasks })
    }

    /// The member runtime of pod `ns/pod`, while it exists.
    pub fn member(&self, ns: &str, pod: &str) -> Option<Arc<MemberRuntime>> {
        self.ctx.members.lock().expect("members").get(&(ns.to_string(), pod.to_string())).cloned()
    }

    /// Every member runtime.
    pub fn members(&self) -> Vec<Arc<MemberRuntime>> {
        self.ctx.members.lock().expect("members").values().cloned().collect()
    }

    /// Makes the backups of `ns/etcd` fail (or work again).
    pub fn set_backup_failing(&self, ns: &str, etcd: &str, failing: bool) {
        let mut set = self.ctx.backup_failing.lock().expect("faults");
        let key = (ns.to_string(), etcd.to_string());
        if failing {
            set.insert(key);
        } else {
            set.remove(&key);
        }
    }

    /// What runs the etcd members (real processes or simulated members, and why).
    pub fn etcd_backend(&self) -> &EtcdBackend {
        &self.ctx.etcd
    }

    /// The options.
    pub fn options(&self) -> &LandscapeOptions {
        &self.ctx.opts
    }

    /// Stops the actors and every member process (SIGTERM, then SIGKILL).
    pub async fn stop(mut self) {
        self.ctx.cancel.cancel();
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
        let members: Vec<_> = self.ctx.members.lock().expect("members").drain().map(|(_, m)| m).collect();
        for m in members {
            m.shutdown(Duration::from_secs(2)).await;
        }
    }
}

impl Drop for Landscape {
    fn drop(&mut self) {
        self.ctx.cancel.cancel();
        for t in &self.tasks {
            t.abort();
        }
        for (_, m) in self.ctx.members.lock().expect("members").drain() {
            m.kill_now();
        }
    }
}

/// Sleeps one tick; false when the landscape is stopping.
pub(crate) async fn tick(ctx: &Ctx) -> bool {
    tokio::select! {
        _ = ctx.cancel.cancelled() => false,
        _ = tokio::time::sleep(ctx.opts.tick) => true,
    }
}

/// Current time in Kubernetes `MicroTime` format.
pub(crate) fn micro_time_now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}
