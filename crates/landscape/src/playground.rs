//! The playground: the embedded API server served on loopback (or an external API server, see [`external`])
//! plus the landscape, with namespaces, Etcds and control-plane Deployments, a kubeconfig, and fault injection
//! (`break`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

use super::druid::{DRUID_USER, component_protection_verdict};
use super::dwd::CONTROL_PLANE_LABEL;
use super::external::{self, ExternalServer, PlaygroundRecord, RECORD_FILE, external_fallbacks};
use super::status::condition;
use super::{ActorClients, BackendRegistrar, Landscape, LandscapeError, LandscapeOptions, MemberRuntime};
use crate::etcd::{EtcdBackend, EtcdClient, EtcdError};
use druid_api::Etcd;
use druid_api::names::LABEL_PART_OF;
use kube_sim::{AdmissionHook, AdmissionOperation, AdmissionRequest, ApiServer, HttpEndpoint};

/// User of the StatefulSet controller and kubelet.
pub const STATEFULSET_USER: &str = "system:serviceaccount:kube-system:statefulset-controller";
/// User of the backup-restore sidecars.
pub const BACKUP_RESTORE_USER: &str = "system:serviceaccount:garden:etcd-backup-restore";
/// User of dependency-watchdog.
pub const DWD_USER: &str = "system:serviceaccount:garden:dependency-watchdog-prober";
/// User of machine-controller-manager in its control cluster (the second API server of
/// [`PlaygroundOptions::machine_cluster`]).
pub const MCM_USER: &str = "system:serviceaccount:shoot--garden--playground:machine-controller-manager";
/// File name of the machine cluster's kubeconfig in the state dir.
pub const MACHINE_KUBECONFIG: &str = "machine-kubeconfig";

/// `capability` of the [`external::Fallback`] in the record when the etcd members are simulated.
pub const SIMULATED_MEMBERS_CAPABILITY: &str = "etcd members (real etcd processes)";

/// How many of its last etcd log lines a playground start-up timeout shows per unready member.
const READINESS_LOG_LINES: usize = 25;

/// How to start a playground.
#[derive(Debug, Clone)]
pub struct PlaygroundOptions {
    /// Directory holding everything: kubeconfig, volumes, backups, logs, pid file.
    pub state_dir: PathBuf,
    /// Number of namespaces, each with one Etcd.
    pub etcds: usize,
    /// Members per Etcd.
    pub members: i32,
    /// Name of each Etcd.
    pub etcd_name: String,
    /// Namespace name prefix; namespaces are `<prefix><i>`.
    pub namespace_prefix: String,
    /// Where the API server listens (`127.0.0.1:0` picks a port).
    pub listen: SocketAddr,
    /// `spec.backup.deltaSnapshotPeriod` of the Etcds.
    pub delta_snapshot_period: String,
    /// Landscape tunables (its `state_dir` and `namespace` are replaced).
    pub landscape: Option<LandscapeOptions>,
    /// Run against this API server instead of starting the embedded one (`listen` is then unused).
    pub external: Option<ExternalServer>,
    /// Model MCM's control cluster as a second embedded API server (kubeconfig `<state_dir>/machine-kubeconfig`):
    /// Machines and MachineSets live there, Nodes, pods and Etcds in the first one, as with a seed whose
    /// Machines are in its parent cluster. Only with the embedded API server.
    pub machine_cluster: bool,
    /// `spec.memberNamePrefix` of the Etcds (etcd-druid v0.37+): member, lease and `initial-cluster` names are
    /// `<prefix>-<pod>`.
    pub member_name_prefix: Option<String>,
}

impl PlaygroundOptions {
    /// One 3-member Etcd `etcd-main` in `shoot--playground--0`, rooted at `state_dir`.
    pub fn new(state_dir: impl Into<PathBuf>) -> PlaygroundOptions {
        PlaygroundOptions {
            state_dir: state_dir.into(),
            etcds: 1,
            members: 3,
            etcd_name: "etcd-main".into(),
            namespace_prefix: "shoot--playground--".into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            delta_snapshot_period: "2s".into(),
            landscape: None,
            external: None,
            machine_cluster: false,
            member_name_prefix: None,
        }
    }
}

/// A failure `break` injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakKind {
    /// A member's process is killed and stays down for a while, then comes back (transient).
    MemberDown,
    /// A member's process and data are gone (it rejoins as a new member).
    MemberLost,
    /// A majority of members lose their data: permanent quorum loss.
    QuorumLost,
    /// A member's database is corrupt (the sidecar restores it: remove, clean, add as learner, promote).
    CorruptMember,
    /// Snapshots fail (object store unreachable).
    BackupFailing,
    /// The API server restarts (connections and watches dropped, history kept).
    ApiserverRestart,
    /// A member's etcd process is stopped (SIGSTOP) for a while as writes go on without it, then continues
    /// (SIGCONT) and catches up. The process stays alive (no restart); the probes and the sidecar see a member that
    /// does not answer, as kubelet and etcd-backup-restore would.
    LaggingMember,
    /// The Etcd gets a small quota (`spec.etcd.quota`) and writes fill it until etcd raises NOSPACE.
    SpaceExceeded,
}

/// Writes `playground break lagging-member` makes while a member is stopped: more raft entries than a healthy
/// follower ever trails by.
pub const LAGGING_MEMBER_WRITES: usize = 1500;

impl BreakKind {
    /// Every kind, in CLI spelling.
    pub const ALL: [(&'static str, BreakKind); 8] = [
        ("member-down", BreakKind::MemberDown),
        ("member-lost", BreakKind::MemberLost),
        ("quorum-lost", BreakKind::QuorumLost),
        ("corrupt-member", BreakKind::CorruptMember),
        ("backup-failing", BreakKind::BackupFailing),
        ("apiserver-restart", BreakKind::ApiserverRestart),
        ("lagging-member", BreakKind::LaggingMember),
        ("space-exceeded", BreakKind::SpaceExceeded),
    ];

    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        Self::ALL.iter().find(|(_, k)| *k == self).map(|(s, _)| *s).unwrap_or_default()
    }
}

impl FromStr for BreakKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, k)| *k)
            .ok_or_else(|| format!("unknown failure {s:?}; one of: {}", Self::ALL.map(|(n, _)| n).join(", ")))
    }
}

/// Which Etcd and members a break hits.
#[derive(Debug, Clone, Default)]
pub struct BreakTarget {
    /// Namespace (default: the first).
    pub namespace: Option<String>,
    /// Member ordinals (default: the highest one, or a majority for `quorum-lost`).
    pub members: Vec<u32>,
    /// How long `member-down` keeps members down (default 10 s).
    pub down_for: Option<Duration>,
}

/// A running playground. [`Playground::down`] (or drop) stops every process it started.
pub struct Playground {
    /// The embedded API server and its HTTP endpoint (`None` against an external server).
    embedded: Option<(ApiServer, HttpEndpoint)>,
    /// MCM's control cluster when it is a second API server ([`PlaygroundOptions::machine_cluster`]).
    machine: Option<(ApiServer, HttpEndpoint)>,
    admin: kube::Client,
    url: String,
    /// One landscape per namespace, so that every actor only ever touches the playground's own namespaces
    /// (an external server may hold other people's StatefulSets, or other playgrounds).
    landscapes: Vec<(String, Landscape)>,
    opts: PlaygroundOptions,
    namespaces: Vec<String>,
    kubeconfig: PathBuf,
    record: PlaygroundRecord,
}

struct ComponentProtection {
    exempt: Vec<String>,
}

impl AdmissionHook for ComponentProtection {
    fn admit(&self, server: &ApiServer, req: &AdmissionRequest) -> Result<(), String> {
        if matches!(req.operation, AdmissionOperation::Create) {
            return Ok(());
        }
        let obj = req.old_object.as_ref().or(req.object.as_ref());
        let Some(etcd) = obj
            .and_then(|o| o.pointer(&format!("/metadata/labels/{}", LABEL_PART_OF.replace('/', "~1"))))
            .and_then(Value::as_str)
        else {
            return Ok(());
        };
        let is_managed =
            obj.and_then(|o| o.pointer("/metadata/labels/app.kubernetes.io~1managed-by")).and_then(Value::as_str)
                == Some("etcd-druid");
        if !is_managed {
            return Ok(());
        }
        let Some(etcd_obj) =
            server.get_object("druid.gardener.cloud/v1alpha1", "etcds", req.namespace.as_deref(), etcd)
        else {
            return Ok(());
        };
        let exempt: Vec<&str> = self.exempt.iter().map(String::as_str).collect();
        component_protection_verdict(
            &req.resource,
            req.subresource.as_deref(),
            matches!(req.operation, AdmissionOperation::Update),
            &req.user,
            &exempt,
            &etcd_obj["metadata"]["annotations"],
        )
    }
}

/// Sends `sig` to process `pid` (a member's etcd, which the landscape started).
fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) has no memory effects; `pid` is a child this process spawned.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> LandscapeError + use<> {
    let path = path.to_path_buf();
    move |e| LandscapeError::Io { action, path, source: e }
}

/// What `up` prepared before the namespaces are filled: the server side of the playground.
struct Prepared {
    embedded: Option<(ApiServer, HttpEndpoint)>,
    machine: Option<(ApiServer, HttpEndpoint)>,
    admin: kube::Client,
    clients: ActorClients,
    registrar: Option<BackendRegistrar>,
    url: String,
}

impl Playground {
    /// Starts the API server (or connects to the external one of [`PlaygroundOptions::external`], installing
    /// the CRDs it lacks), the landscape, namespaces, Etcds and control-plane Deployments, and writes
    /// `<state_dir>/kubeconfig` and `<state_dir>/playground.json`. Returns once everything is created (not once
    /// ready: see [`Playground::wait_ready`]). Against an external server, a failing `up` removes what it
    /// created.
    pub async fn up(opts: PlaygroundOptions) -> Result<Playground, LandscapeError> {
        let state = opts.state_dir.clone();
        std::fs::create_dir_all(&state).map_err(io_error("create", &state))?;
        let namespaces: Vec<String> = (0..opts.etcds.max(1)).map(|i| format!("{}{i}", opts.namespace_prefix)).collect();
        let kubeconfig = state.join("kubeconfig");
        let mut record = PlaygroundRecord { namespaces: namespaces.clone(), ..Default::default() };
        let mut builtin = false;
        let prepared = match &opts.external {
            None => {
                record.mode = "embedded".into();
                Self::prepare_embedded(&opts, &namespaces[0], &kubeconfig).await?
            }
            Some(ext) => {
                record.mode = "external".into();
                record.fallbacks = external_fallbacks();
                let (admin, url, context) = external::connect(ext, &namespaces[0]).await?;
                record.server = url.clone();
                record.context = context.clone();
                record.write(&state)?;
                external::write_kubeconfig(ext, context.as_deref(), &namespaces[0], &kubeconfig)?;
                if opts.machine_cluster {
                    return Err(LandscapeError::External(
                        "a separate machine cluster needs the embedded API server; leave out the external server or the machine cluster".into(),
                    ));
                }
                let clients = ActorClients::same(admin.clone());
                builtin = external::builtin_controllers(&admin).await?;
                Prepared { embedded: None, machine: None, admin, clients, registrar: None, url }
            }
        };
        // Every landscape runs the same etcd members; simulated ones are a fallback the record shows.
        let mut opts = opts;
        let mut lopts = opts.landscape.take().unwrap_or_else(|| LandscapeOptions::new(&state));
        let etcd = lopts.etcd.get_or_insert_with(EtcdBackend::select).clone();
        lopts.builtin_controllers |= builtin;
        opts.landscape = Some(lopts);
        if let EtcdBackend::Simulated { reason } = &etcd {
            record.fallbacks.push(external::Fallback {
                capability: SIMULATED_MEMBERS_CAPABILITY.into(),
                instead: format!("simulated in-process members serving the same etcd API, not real etcd: {reason}"),
            });
        }
        record.server = prepared.url.clone();
        record.write(&state)?;
        let _ = std::fs::write(state.join("playground.pid"), std::process::id().to_string());
        match Self::fill(&opts, &namespaces, prepared, &mut record).await {
            Ok((embedded, machine, admin, url, landscapes)) => {
                Ok(Playground { embedded, machine, admin, url, landscapes, opts, namespaces, kubeconfig, record })
            }
            Err((e, admin)) => {
                let _ = std::fs::remove_file(state.join("playground.pid"));
                let cleaned = match record.is_external() {
                    true => external::remove_created(&admin, &record, Duration::from_secs(60)).await,
                    false => Ok(()),
                };
                match cleaned {
                    // Nothing left behind: nothing to record.
                    Ok(()) => {
                        let _ = std::fs::remove_file(state.join(RECORD_FILE));
                    }
                    // The record stays, so that `playground down` can try again.
                    Err(cleanup) => tracing::warn!(error = %cleanup, "removing what a failed playground up created"),
                }
                Err(e)
            }
        }
    }

    async fn prepare_embedded(
        opts: &PlaygroundOptions,
        first_ns: &str,
        kubeconfig: &Path,
    ) -> Result<Prepared, LandscapeError> {
        let server = ApiServer::new();
        crate::register_upstream_crds(&server).map_err(|e| LandscapeError::ApiServer(e.to_string()))?;
        let task_crd = serde_json::to_string(&druid_api::task::crd()).expect("task CRD serializes");
        server.register_crd_yaml(&task_crd).map_err(|e| LandscapeError::ApiServer(e.to_string()))?;
        for u in [DRUID_USER, STATEFULSET_USER, BACKUP_RESTORE_USER, DWD_USER] {
            server.add_user(u, &["system:masters"]);
        }
        server.add_admission_hook(Arc::new(ComponentProtection { exempt: vec![DRUID_USER.to_string()] }));
        // HTTPS, so that kubectl sends the kubeconfig's bearer token (client-go sends none over plain http).
        let endpoint = server.serve_https(opts.listen).await.map_err(|e| LandscapeError::Io {
            action: "listen on",
            path: opts.listen.to_string().into(),
            source: e,
        })?;
        let yaml = server.kubeconfig_yaml_for(&endpoint, "admin", Some(first_ns));
        std::fs::write(kubeconfig, yaml).map_err(io_error("write", kubeconfig))?;
        let machine = match opts.machine_cluster {
            false => None,
            true => {
                let m = ApiServer::new();
                crate::register_upstream_crds(&m).map_err(|e| LandscapeError::ApiServer(e.to_string()))?;
                m.add_user(MCM_USER, &["system:masters"]);
                let listen = SocketAddr::from((opts.listen.ip(), 0));
                let ep = m.serve_http(listen).await.map_err(|e| LandscapeError::Io {
                    action: "listen on",
                    path: listen.to_string().into(),
                    source: e,
                })?;
                let path = kubeconfig.with_file_name(MACHINE_KUBECONFIG);
                std::fs::write(&path, m.kubeconfig_yaml(&ep.url, "admin", Some(first_ns)))
                    .map_err(io_error("write", &path))?;
                Some((m, ep))
            }
        };
        let clients = ActorClients {
            druid: server.client_for(DRUID_USER),
            statefulset: server.client_for(STATEFULSET_USER),
            backup_restore: server.client_for(BACKUP_RESTORE_USER),
            dwd: server.client_for(DWD_USER),
            mcm_control: match &machine {
                Some((m, _)) => m.client_for(MCM_USER),
                None => server.client_for(DRUID_USER),
            },
        };
        let reg_server = server.clone();
        let registrar: BackendRegistrar =
            Arc::new(move |ns: &str, svc: &str, port: u16, addr: SocketAddr| match svc.strip_prefix("pods/") {
                Some(pod) => reg_server.register_pod_backend(ns, pod, port, addr),
                None => reg_server.register_service_backend(ns, svc, port, addr),
            });
        let url = endpoint.url.clone();
        Ok(Prepared {
            admin: server.client(),
            embedded: Some((server, endpoint)),
            machine,
            clients,
            registrar: Some(registrar),
            url,
        })
    }

    /// Installs the CRDs (external), creates the namespaces and their objects and starts one landscape per
    /// namespace. On failure, hands back the admin client so that `up` can remove what was created.
    #[allow(clippy::type_complexity)]
    async fn fill(
        opts: &PlaygroundOptions,
        namespaces: &[String],
        p: Prepared,
        record: &mut PlaygroundRecord,
    ) -> Result<
        (
            Option<(ApiServer, HttpEndpoint)>,
            Option<(ApiServer, HttpEndpoint)>,
            kube::Client,
            String,
            Vec<(String, Landscape)>,
        ),
        (LandscapeError, kube::Client),
    > {
        let admin = p.admin.clone();
        let machine_admin = p.machine.as_ref().map(|(m, _)| m.client()).unwrap_or_else(|| admin.clone());
        let state = &opts.state_dir;
        let result: Result<Vec<(String, Landscape)>, LandscapeError> = async {
            if record.is_external() {
                external::install_crds(&admin, record, state).await?;
                for ns in namespaces {
                    external::create_namespace(&admin, ns, record, state).await?;
                }
            } else {
                for ns in namespaces {
                    for c in [&admin, &machine_admin] {
                        create(
                            &Api::<Namespace>::all(c.clone()),
                            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                        )
                        .await?;
                    }
                }
            }
            for ns in namespaces {
                populate(&admin, &machine_admin, ns, opts).await?;
            }
            let base = opts.landscape.clone().unwrap_or_else(|| LandscapeOptions::new(state));
            let mut landscapes = Vec::new();
            for ns in namespaces {
                let mut lopts = base.clone();
                lopts.state_dir = state.clone();
                lopts.namespace = Some(ns.clone());
                let landscape = Landscape::start(p.clients.clone(), lopts, p.registrar.clone())?;
                // The landscape plays the kubelet: the embedded server serves its pods' logs.
                if let Some((server, _)) = &p.embedded {
                    server.add_pod_log_source(landscape.log_source());
                }
                landscapes.push((ns.clone(), landscape));
            }
            Ok(landscapes)
        }
        .await;
        match result {
            Ok(l) => Ok((p.embedded, p.machine, p.admin, p.url, l)),
            Err(e) => Err((e, admin)),
        }
    }

    /// A kubeconfig for `user` of the embedded API server, as the playground's own (its CA, the user's token);
    /// `None` against an external server.
    pub fn user_kubeconfig_yaml(&self, user: &str, namespace: Option<&str>) -> Option<String> {
        self.embedded.as_ref().map(|(server, endpoint)| server.kubeconfig_yaml_for(endpoint, user, namespace))
    }

    /// The embedded API server, or `None` when the playground runs against an external one. Fault injection,
    /// the request log, admission hooks and extra users exist only there.
    pub fn embedded_server(&self) -> Option<&ApiServer> {
        self.embedded.as_ref().map(|(s, _)| s)
    }

    /// A client with full rights on the playground's API server (default namespace: the first one).
    pub fn client(&self) -> kube::Client {
        self.admin.clone()
    }

    /// MCM's control cluster when it is a second API server ([`PlaygroundOptions::machine_cluster`]).
    pub fn machine_server(&self) -> Option<&ApiServer> {
        self.machine.as_ref().map(|(s, _)| s)
    }

    /// A client with full rights where the Machines are: the machine cluster, else the playground's API server.
    pub fn machine_client(&self) -> kube::Client {
        self.machine_server().map(ApiServer::client).unwrap_or_else(|| self.admin.clone())
    }

    /// Kubeconfig of the machine cluster (`<state_dir>/machine-kubeconfig`), when there is one.
    pub fn machine_kubeconfig_path(&self) -> Option<PathBuf> {
        self.machine.as_ref().map(|_| self.kubeconfig.with_file_name(MACHINE_KUBECONFIG))
    }

    /// The API server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether the playground runs against an API server it did not start.
    pub fn is_external(&self) -> bool {
        self.record.is_external()
    }

    /// What runs the etcd members: real etcd processes, or simulated members (and why).
    pub fn etcd_backend(&self) -> &EtcdBackend {
        self.opts.landscape.as_ref().and_then(|l| l.etcd.as_ref()).expect("Playground::up sets the etcd backend")
    }

    /// What the playground is and created (also in `<state>/playground.json`), with the fallbacks in force.
    pub fn record(&self) -> &PlaygroundRecord {
        &self.record
    }

    /// Path of the kubeconfig.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The line an operator pastes into a shell.
    pub fn export_line(&self) -> String {
        format!("export KUBECONFIG={}", self.kubeconfig.display())
    }

    /// Namespaces, one per Etcd.
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// Name of the Etcds.
    pub fn etcd_name(&self) -> &str {
        &self.opts.etcd_name
    }

    /// The landscape acting in namespace `ns`.
    pub fn landscape(&self, ns: &str) -> Option<&Landscape> {
        self.landscapes.iter().find(|(n, _)| n == ns).map(|(_, l)| l)
    }

    /// The runtime of member `ordinal` of the Etcd in `ns`.
    pub fn member(&self, ns: &str, ordinal: u32) -> Option<Arc<MemberRuntime>> {
        self.landscape(ns)?.member(ns, &format!("{}-{ordinal}", self.opts.etcd_name))
    }

    /// An etcd client for member `ordinal` of the Etcd in `ns` (its real loopback endpoint).
    pub fn etcd_client(&self, ns: &str, ordinal: u32) -> Option<EtcdClient> {
        self.member(ns, ordinal).map(|m| m.etcd_client())
    }

    /// The Etcd's status `Ready` condition `(status, reason)`.
    pub async fn etcd_ready(&self, ns: &str) -> Option<(String, String)> {
        let e = Api::<Etcd>::namespaced(self.admin.clone(), ns).get_opt(&self.opts.etcd_name).await.ok()??;
        let status = serde_json::to_value(e.status?).ok()?;
        condition(&status, "Ready")
    }

    /// Waits until every Etcd is Ready with all members ready.
    ///
    /// A timeout's message says what stood in the way ([`Playground::readiness_report`]).
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), LandscapeError> {
        let deadline = Instant::now() + timeout;
        for ns in &self.namespaces {
            loop {
                if self.all_members_ready(ns).await {
                    break;
                }
                if Instant::now() > deadline {
                    let seen = self.readiness_report(ns).await;
                    return Err(LandscapeError::Timeout {
                        what: format!("etcd {ns}/{} to be ready ({seen})", self.opts.etcd_name),
                        timeout,
                    });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// What stands between the Etcd in `ns` and ready, for a timeout's message: its Ready and AllMembersReady
    /// conditions, readyReplicas, what each member's pod shows (running, ready, restarts, waiting reason), and
    /// the end of each unready member's etcd log.
    async fn readiness_report(&self, ns: &str) -> String {
        let mut parts = Vec::new();
        match Api::<Etcd>::namespaced(self.admin.clone(), ns).get_opt(&self.opts.etcd_name).await {
            Ok(Some(e)) => {
                let replicas = e.spec.replicas;
                let status = e.status.and_then(|s| serde_json::to_value(s).ok()).unwrap_or_default();
                for c in ["Ready", "AllMembersReady"] {
                    let (s, r) = condition(&status, c).unwrap_or_else(|| ("absent".into(), String::new()));
                    parts.push(format!("{c}={s}/{r}"));
                }
                parts.push(format!("readyReplicas={}/{replicas}", status["readyReplicas"]));
            }
            Ok(None) => parts.push("Etcd not found".into()),
            Err(e) => parts.push(format!("Etcd not read: {e}")),
        }
        let Some(landscape) = self.landscape(ns) else { return parts.join(", ") };
        let mut members = landscape.members();
        members.sort_by(|a, b| a.pod.cmp(&b.pod));
        for m in members.iter().filter(|m| m.namespace == ns) {
            let v = m.view();
            let waiting = v.waiting.map(|(r, msg)| format!(" waiting {r}: {msg}")).unwrap_or_default();
            parts.push(format!(
                "{}: running={} ready={} restarts={}{waiting}",
                m.pod, v.running, v.ready, v.restart_count
            ));
        }
        // etcd's own words, when a member runs and is not ready: why the cluster did not form (peers not
        // reached, TLS refused, a member ID mismatch) is said there only.
        for m in members.iter().filter(|m| m.namespace == ns && !m.view().ready) {
            let log = std::fs::read_to_string(m.process().config().log_file).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(READINESS_LOG_LINES)..].join("\n");
            parts.push(format!("\n--- last {READINESS_LOG_LINES} lines of {}'s etcd log:\n{tail}", m.pod));
        }
        parts.join("; ")
    }

    async fn all_members_ready(&self, ns: &str) -> bool {
        let Ok(Some(e)) = Api::<Etcd>::namespaced(self.admin.clone(), ns).get_opt(&self.opts.etcd_name).await else {
            return false;
        };
        let Some(status) = e.status.and_then(|s| serde_json::to_value(s).ok()) else { return false };
        condition(&status, "Ready").is_some_and(|(s, _)| s == "True")
            && condition(&status, "AllMembersReady").is_some_and(|(s, _)| s == "True")
            && status["readyReplicas"].as_i64() == Some(e.spec.replicas as i64)
    }

    /// Waits until the Etcd in `ns` has `Ready` with `reason` (`Quorate` / `QuorumLost`).
    pub async fn wait_ready_reason(&self, ns: &str, reason: &str, timeout: Duration) -> Result<(), LandscapeError> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.etcd_ready(ns).await.is_some_and(|(_, r)| r == reason) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(LandscapeError::Timeout {
                    what: format!("etcd {ns}/{} Ready reason {reason}", self.opts.etcd_name),
                    timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Injects a failure; returns a sentence saying what was done.
    pub async fn break_(&self, kind: BreakKind, target: &BreakTarget) -> Result<String, LandscapeError> {
        let ns = target.namespace.clone().unwrap_or_else(|| self.namespaces[0].clone());
        if !self.namespaces.contains(&ns) {
            return Err(LandscapeError::NotFound(format!(
                "namespace {ns:?} is not part of the playground (its namespaces: {})",
                self.namespaces.join(", ")
            )));
        }
        let n = self.opts.members.max(1) as u32;
        let members = |default: Vec<u32>| if target.members.is_empty() { default } else { target.members.clone() };
        let runtime = |i: u32| {
            self.member(&ns, i).ok_or_else(|| {
                LandscapeError::NotFound(format!("member {}-{i} does not run in {ns}", self.opts.etcd_name))
            })
        };
        let name = &self.opts.etcd_name;
        match kind {
            BreakKind::MemberDown => {
                let down_for = target.down_for.unwrap_or(Duration::from_secs(10));
                let ms = members(vec![n - 1]);
                for &i in &ms {
                    runtime(i)?.hold_down(down_for);
                }
                Ok(format!("members {ms:?} of {ns}/{name} are down for {down_for:?}, then come back"))
            }
            BreakKind::MemberLost | BreakKind::QuorumLost => {
                let ms = if kind == BreakKind::QuorumLost {
                    members((n - (n / 2 + 1)..n).collect())
                } else {
                    members(vec![n - 1])
                };
                let rts = ms.iter().map(|&i| runtime(i)).collect::<Result<Vec<_>, _>>()?;
                // Kill all first, so none of them can rejoin through the others while their data goes.
                for rt in &rts {
                    rt.process().kill();
                }
                for rt in &rts {
                    rt.destroy_data()?;
                }
                Ok(format!("members {ms:?} of {ns}/{name} lost their process and data"))
            }
            BreakKind::CorruptMember => {
                let ms = members(vec![n - 1]);
                for &i in &ms {
                    runtime(i)?.corrupt_data()?;
                }
                Ok(format!("members {ms:?} of {ns}/{name} have a corrupt database"))
            }
            BreakKind::BackupFailing => {
                self.landscape(&ns)
                    .ok_or_else(|| LandscapeError::NotFound(format!("namespace {ns} is not part of the playground")))?
                    .set_backup_failing(&ns, name, true);
                Ok(format!("snapshots of {ns}/{name} fail from now on"))
            }
            BreakKind::ApiserverRestart => {
                let Some(server) = self.embedded_server() else {
                    return Err(LandscapeError::External(format!(
                        "apiserver-restart is unavailable: the playground cannot restart {}, an API server it did not start",
                        self.url
                    )));
                };
                server.restart(true).await;
                Ok("the API server restarted (connections and watches dropped, history kept)".into())
            }
            BreakKind::LaggingMember => {
                let stopped_for = target.down_for.unwrap_or(Duration::from_secs(20));
                let ms = members(vec![n - 1]);
                let writer = (0..n).find(|i| !ms.contains(i)).ok_or_else(|| {
                    LandscapeError::External("lagging-member needs a member that keeps running to write to".into())
                })?;
                let mut stopped = Vec::new();
                for &i in &ms {
                    let rt = runtime(i)?;
                    let pid = rt.process().pid().ok_or_else(|| {
                        LandscapeError::NotFound(format!(
                            "member {name}-{i} in {ns} has no etcd process to stop (down, or simulated)"
                        ))
                    })?;
                    stopped.push((rt, pid));
                }
                for (rt, pid) in stopped {
                    signal(pid, libc::SIGSTOP);
                    tokio::spawn(async move {
                        tokio::time::sleep(stopped_for).await;
                        // Only the process that was stopped: a restarted member has a new one.
                        if rt.process().pid() == Some(pid) {
                            signal(pid, libc::SIGCONT);
                        }
                    });
                }
                let client = self
                    .etcd_client(&ns, writer)
                    .ok_or_else(|| LandscapeError::NotFound(format!("member {name}-{writer} does not run in {ns}")))?;
                // A few writers at once: the stopped members miss every entry, however long each takes.
                let chunks = futures::future::join_all((0..8).map(|w| {
                    let client = client.clone();
                    async move {
                        for k in (w..LAGGING_MEMBER_WRITES).step_by(8) {
                            client.put(format!("/playground/lagging-member/{k}"), "x").await?;
                        }
                        Ok::<_, EtcdError>(())
                    }
                }))
                .await;
                chunks.into_iter().collect::<Result<Vec<_>, _>>()?;
                Ok(format!(
                    "members {ms:?} of {ns}/{name} are stopped (SIGSTOP) for {stopped_for:?} while \
                     {LAGGING_MEMBER_WRITES} writes go on without them, then continue (SIGCONT) and catch up"
                ))
            }
            BreakKind::SpaceExceeded => super::space::exceed_space(self, &ns).await,
        }
    }

    /// Stops the landscape (every member process) and the embedded API server; against an external server,
    /// then removes what `up` created (its namespaces, their Nodes, the CRDs that did not exist before) and
    /// nothing else. The state dir is kept.
    pub async fn down(mut self) -> Result<(), LandscapeError> {
        for (_, l) in self.landscapes.drain(..) {
            l.stop().await;
        }
        if let Some((_, endpoint)) = &self.embedded {
            endpoint.shutdown();
        }
        if let Some((_, endpoint)) = &self.machine {
            endpoint.shutdown();
        }
        let state = &self.opts.state_dir;
        let _ = std::fs::remove_file(state.join("playground.pid"));
        if self.record.is_external() {
            external::remove_created(&self.admin, &self.record, Duration::from_secs(120)).await?;
        }
        let _ = std::fs::remove_file(state.join(RECORD_FILE));
        Ok(())
    }

    /// Stops a playground running in another process (`up --detach`) from its state dir: SIGTERM to the
    /// process in `playground.pid`, then SIGKILL after `grace`. Its etcd processes die with it. When it ran
    /// against an external server and did not get to remove what it created (killed), that is removed here,
    /// with the credentials of `<state_dir>/kubeconfig`. Returns whether a playground was running or left
    /// something behind.
    pub async fn down_detached(state_dir: &Path, grace: Duration) -> Result<bool, LandscapeError> {
        let pid_file = state_dir.join("playground.pid");
        let pid = std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse::<i32>().ok());
        let alive = |pid: i32| unsafe { libc::kill(pid, 0) } == 0;
        let mut found = false;
        if let Some(pid) = pid {
            found = true;
            if pid != std::process::id() as i32 && alive(pid) {
                // SAFETY: signalling a process id read from our own pid file.
                unsafe { libc::kill(pid, libc::SIGTERM) };
                let deadline = Instant::now() + grace;
                while alive(pid) && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                if alive(pid) {
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            let _ = std::fs::remove_file(&pid_file);
        }
        let leftovers = |r: &PlaygroundRecord| !r.created_namespaces.is_empty() || !r.created_crds.is_empty();
        if let Some(record) = PlaygroundRecord::read(state_dir).filter(|r| r.is_external() && leftovers(r)) {
            found = true;
            let ext =
                ExternalServer { kubeconfig: Some(state_dir.join("kubeconfig")), context: record.context.clone() };
            let first = record.namespaces.first().cloned().unwrap_or_else(|| "default".into());
            let (client, _, _) = external::connect(&ext, &first).await?;
            external::remove_created(&client, &record, grace.max(Duration::from_secs(60))).await?;
        }
        let _ = std::fs::remove_file(state_dir.join(RECORD_FILE));
        Ok(found)
    }
}

/// Fills namespace `ns`: the Etcd, its Certificates, the MachineSet with Machines and Nodes, and the
/// control-plane Deployments dependency-watchdog scales.
async fn populate(
    admin: &kube::Client,
    machine_admin: &kube::Client,
    ns: &str,
    opts: &PlaygroundOptions,
) -> Result<(), LandscapeError> {
    let mut etcd = json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
        "metadata": {"name": opts.etcd_name, "namespace": ns, "labels": {"role": "main", "gardener.cloud/role": "controlplane"}},
        "spec": {
            "replicas": opts.members,
            // Gardener puts `app: etcd-statefulset` among them (gardener/gardener pkg/component/etcd/etcd/etcd.go).
            "labels": {"role": "main", "gardener.cloud/role": "controlplane", "app": "etcd-statefulset"},
            // Gardener's etcd-main (class important) names its claim template `main-etcd`
            // (gardener/gardener pkg/component/etcd/etcd/etcd.go): PVCs `main-etcd-etcd-main-<i>`.
            "volumeClaimTemplate": "main-etcd",
            // The members serve client TLS with the key pair of `etcd-server` (mounted as the ConfigMap's
            // client-transport-security names it) beside plain HTTP; peers stay plain HTTP (see
            // `resources::PLAYGROUND_DIFFERENCES`). The Certificates below keep these secrets filled.
            "etcd": {"clientPort": 2379, "serverPort": 2380,
                     "clientUrlTls": {"tlsCASecretRef": {"name": "ca-etcd"}, "serverTLSSecretRef": {"name": "etcd-server"},
                                      "clientTLSSecretRef": {"name": "etcd-client"}},
                     "peerUrlTls": {"tlsCASecretRef": {"name": "ca-etcd-peer"}, "serverTLSSecretRef": {"name": "etcd-peer-server"}}},
            // Gardener always sets backup.tls, so the sidecar serves HTTPS (gardener/gardener
            // pkg/component/etcd/etcd/etcd.go); the API server's proxy then needs the `https:` scheme prefix.
            "backup": {"port": 8080, "fullSnapshotSchedule": "0 */24 * * *", "deltaSnapshotPeriod": opts.delta_snapshot_period,
                       "tls": {"tlsCASecretRef": {"name": "ca-etcd"}, "serverTLSSecretRef": {"name": "etcd-backup-server"},
                               "clientTLSSecretRef": {"name": "etcd-client"}},
                       "store": {"provider": "Local", "container": "playground", "prefix": format!("{ns}/{}", opts.etcd_name)}},
        },
    });
    if let Some(prefix) = &opts.member_name_prefix {
        etcd["spec"]["memberNamePrefix"] = json!(prefix);
    }
    create(&Api::<Etcd>::namespaced(admin.clone(), ns), etcd).await?;
    playground_tls(admin, ns, &opts.etcd_name).await?;
    playground_machines(machine_admin, admin, ns, opts.members).await?;
    for (name, replicas) in [("kube-apiserver", 1), ("kube-controller-manager", 1), ("machine-controller-manager", 1)] {
        let d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns, "labels": {CONTROL_PLANE_LABEL: "true", "app": "kubernetes", "role": name}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"role": name}},
                "template": {"metadata": {"labels": {"role": name}}, "spec": {"containers": [{"name": name, "image": format!("registry.k8s.io/{name}:v1.33.0")}]}}},
        });
        create(&Api::<Deployment>::namespaced(admin.clone(), ns), d).await?;
    }
    Ok(())
}

/// Secret names the playground's Etcds reference in `spec.etcd.clientUrlTls` / `peerUrlTls`.
pub const PLAYGROUND_TLS_SECRETS: [&str; 6] =
    ["ca-etcd", "ca-etcd-peer", "etcd-backup-server", "etcd-client", "etcd-peer-server", "etcd-server"];

/// Name of the MachineSet whose Machines/Nodes host the members in playground namespace `ns` (Nodes are
/// cluster-wide, so the namespace is part of every Machine and Node name).
pub fn playground_machine_set(ns: &str) -> String {
    format!("{ns}-worker")
}

/// One cert-manager `Certificate` per TLS secret the Etcd references, named like its secret; the landscape's
/// cert-manager actor issues them. The members serve client TLS with the `etcd-server` key pair, loaded at each
/// start (see `super::tls`); the other secrets are for renewal rehearsal only.
async fn playground_tls(admin: &kube::Client, ns: &str, etcd: &str) -> Result<(), LandscapeError> {
    let certs: Api<druid_api::Certificate> = Api::namespaced(admin.clone(), ns);
    for secret in PLAYGROUND_TLS_SECRETS {
        let is_ca = secret.starts_with("ca-");
        let dns: Vec<String> = if is_ca {
            vec![]
        } else {
            vec![format!("{etcd}-local"), format!("{etcd}-client.{ns}.svc"), format!("*.{etcd}-peer.{ns}.svc")]
        };
        let mut spec = json!({"secretName": secret, "commonName": format!("{etcd}-{secret}"), "duration": "720h", "renewBefore": "240h",
                              "issuerRef": {"name": if is_ca { "selfsigned" } else { "etcd-ca" }, "kind": "Issuer"}});
        if is_ca {
            spec["isCA"] = json!(true);
        } else {
            spec["dnsNames"] = json!(dns);
        }
        let obj = json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": {"name": secret, "namespace": ns, "labels": {LABEL_PART_OF: etcd}}, "spec": spec});
        create(&certs, obj).await?;
    }
    Ok(())
}

/// A MachineSet with `members` Machines (in the machine cluster `admin`), each with its Ready Node (in `target`;
/// created here, as MCM would, so the members' pods are scheduled onto them from the start; the MCM actor takes
/// over afterwards).
async fn playground_machines(
    admin: &kube::Client,
    target: &kube::Client,
    ns: &str,
    members: i32,
) -> Result<(), LandscapeError> {
    use kube::core::{ApiResource, DynamicObject};
    let ms_ar = ApiResource::erase::<druid_api::MachineSet>(&());
    let sets: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &ms_ar);
    let set_name = playground_machine_set(ns);
    let set_obj: DynamicObject = serde_json::from_value(super::mcm::machine_set(ns, &set_name, members.max(1)))
        .map_err(|e| LandscapeError::ApiServer(e.to_string()))?;
    let set = match sets.create(&PostParams::default(), &set_obj).await {
        Ok(s) => s,
        Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
        Err(e) => return Err(LandscapeError::kube(format!("create machineset {set_name}"), e)),
    };
    let machines: Api<druid_api::Machine> = Api::namespaced(admin.clone(), ns);
    for i in 0..members.max(1) {
        let name = format!("{set_name}-{i}");
        let m = json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": name, "namespace": ns, "labels": {"machine-set": set_name},
                "annotations": {druid_api::names::MACHINE_PRIORITY: "3"}, "finalizers": [super::mcm::MACHINE_FINALIZER],
                "ownerReferences": [{"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet", "name": set_name,
                    "uid": set.metadata.uid.clone().unwrap_or_default(), "controller": true}]},
            "spec": {"class": {"kind": "MachineClass", "name": "playground"}}});
        create(&machines, m).await?;
        let clients = super::mcm::McmClients { control: admin.clone(), target: target.clone() };
        super::mcm::join_node_in(&clients, ns, &name)
            .await
            .map_err(|e| LandscapeError::kube(format!("join node {name}"), e))?;
    }
    Ok(())
}

async fn create<K>(api: &Api<K>, obj: Value) -> Result<(), LandscapeError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let typed: K = serde_json::from_value(obj).map_err(|e| LandscapeError::ApiServer(e.to_string()))?;
    match api.create(&PostParams::default(), &typed).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(LandscapeError::kube(format!("create {name}"), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn break_kinds_parse_from_their_cli_names() {
        for (name, kind) in BreakKind::ALL {
            assert_eq!(name.parse::<BreakKind>().unwrap(), kind);
            assert_eq!(kind.as_str(), name);
        }
        assert!("meteor".parse::<BreakKind>().unwrap_err().contains("quorum-lost"));
    }
}
