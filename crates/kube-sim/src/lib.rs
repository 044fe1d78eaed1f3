//! Embedded Kubernetes API server with real semantics, fault injection and a request log.
//!
//! It serves the generic REST machinery (CRUD, watch, selectors, pagination, patches, server-side
//! apply, finalizers, garbage collection, subresources), discovery, CRDs registered from real YAML,
//! RBAC and admission hooks, over two transports: an in-process `tower` service for
//! [`kube::Client`] and plain HTTP on loopback for `kubectl`. See `docs/embedded-apiserver.md`.
//!
//! This crate stands alone: it must not depend on any druidctl crate (`druidctl`, `druid-api`, `landscape`);
//! `tests/workspace_boundaries.rs` in the root package checks that. The README's example is compiled and run
//! as a doctest below.
#![doc = ""]
#![doc = include_str!("../README.md")]

pub mod validation;

mod admission;
mod apply;
mod crd;
pub use crd::parse_documents;
mod corevalidation;
mod discovery;
mod events;
mod faults;
mod gc;
mod godiff;
mod gojson;
mod log;
mod portforward;
mod protobuf;
mod proxy;
mod rbac;
mod requestlog;
mod resources;
mod rest;
mod router;
mod scale;
mod selectors;
mod status;
mod store;
mod table;
mod transport;
mod watch;

pub mod patch;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

pub use admission::{AdmissionHook, AdmissionOperation, AdmissionRequest};
pub use faults::{FaultInjector, FaultRule};
pub use log::{ContainerLog, LogCursor, LogLine, PodLogSource};
pub use requestlog::{RequestLog, RequestRecord};
pub use resources::{PrinterColumn, ResourceType, ScalePaths};
pub use selectors::{FieldSelector, LabelSelector};
pub use status::ApiError;
pub use transport::{HttpEndpoint, TlsIdentity};

/// Errors of the embedded API server's Rust API.
#[derive(Debug, thiserror::Error)]
pub enum ApiServerError {
    /// A document could not be parsed as YAML/JSON.
    #[error("invalid YAML in CRD document: {0}")]
    Yaml(String),
    /// The CRD object was rejected (validation, schema, conflict).
    #[error("CRD {name} rejected: {message}")]
    CrdRejected {
        /// CRD name.
        name: String,
        /// Why.
        message: String,
    },
    /// Reading the CRD directory failed.
    #[error("reading CRDs from {path}: {source}")]
    Io {
        /// Path read.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

/// Tunables of the server.
#[derive(Debug, Clone)]
pub struct ApiServerOptions {
    /// Interval of periodic BOOKMARK events to watchers that allow bookmarks.
    pub bookmark_interval: Duration,
    /// Number of events kept per resource for watch resumption; older versions get `410 Gone`.
    pub watch_history: usize,
    /// Send a BOOKMARK with the current resourceVersion to every watcher before a restart drops it.
    pub bookmark_on_restart: bool,
    /// Version reported by `/version`.
    pub git_version: String,
    /// Default and maximum `timeoutSeconds` chosen for watches without one (kube: 30-60 min, randomized).
    pub default_watch_timeout: Duration,
}

impl Default for ApiServerOptions {
    fn default() -> Self {
        ApiServerOptions {
            bookmark_interval: Duration::from_secs(60),
            watch_history: 1000,
            bookmark_on_restart: true,
            git_version: "v1.36.2".into(),
            default_watch_timeout: Duration::from_secs(1800),
        }
    }
}

/// An authenticated user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// User name.
    pub name: String,
    /// Groups (`system:authenticated` is added automatically).
    pub groups: Vec<String>,
}

impl UserInfo {
    /// The user of requests without credentials (kube-apiserver `--anonymous-auth`, on by default).
    pub fn anonymous() -> UserInfo {
        UserInfo { name: "system:anonymous".into(), groups: vec!["system:unauthenticated".into()] }
    }

    fn is_anonymous(&self) -> bool {
        self.name == "system:anonymous"
    }

    fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == "system:masters")
    }
}

pub(crate) struct Inner {
    opts: ApiServerOptions,
    state: Mutex<store::State>,
    users: RwLock<HashMap<String, UserInfo>>,
    hooks: RwLock<Vec<Arc<dyn AdmissionHook>>>,
    backends: RwLock<HashMap<(String, String, String), SocketAddr>>,
    pod_backends: RwLock<HashMap<(String, String, String), SocketAddr>>,
    log_sources: RwLock<Vec<Arc<dyn PodLogSource>>>,
    faults: FaultInjector,
    log: RequestLog,
    /// Bumped by `restart`: every watch and HTTP connection ends.
    epoch: tokio::sync::watch::Sender<u64>,
    gc_running: std::sync::atomic::AtomicBool,
    gc_dirty: std::sync::atomic::AtomicBool,
}

/// The embedded API server. Cheap to clone (shared state).
#[derive(Clone)]
pub struct ApiServer {
    inner: Arc<Inner>,
}

impl Default for ApiServer {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer").finish_non_exhaustive()
    }
}

/// Bearer token of the built-in `admin` user.
const ADMIN_TOKEN_PREFIX: &str = "admin-";

impl ApiServer {
    /// A server with the built-in kinds, the `default`/`kube-system`/`kube-public` namespaces and user
    /// `admin` in `system:masters`.
    pub fn new() -> ApiServer {
        Self::with_options(ApiServerOptions::default())
    }

    /// A server with options.
    pub fn with_options(opts: ApiServerOptions) -> ApiServer {
        let (epoch, _) = tokio::sync::watch::channel(0);
        let server = ApiServer {
            inner: Arc::new(Inner {
                state: Mutex::new(store::State::new(opts.watch_history)),
                opts,
                users: RwLock::new(HashMap::new()),
                hooks: RwLock::new(Vec::new()),
                backends: RwLock::new(HashMap::new()),
                pod_backends: RwLock::new(HashMap::new()),
                log_sources: RwLock::new(Vec::new()),
                faults: FaultInjector::default(),
                log: RequestLog::default(),
                epoch,
                gc_running: Default::default(),
                gc_dirty: Default::default(),
            }),
        };
        let weak = Arc::downgrade(&server.inner);
        *server.inner.faults.cut.lock().unwrap() = Some(Arc::new(move |resource: Option<&str>| {
            weak.upgrade().map(|i| i.state.lock().unwrap().cut_watchers(resource)).unwrap_or(0)
        }));
        server.add_user("admin", &["system:masters"]);
        server.bootstrap();
        server
    }

    fn bootstrap(&self) {
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = serde_json::json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":ns}});
            let _ = self.create_internal("", "namespaces", None, obj);
        }
        for (name, rules) in rbac::bootstrap_cluster_roles() {
            let obj = serde_json::json!({"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole",
                "metadata":{"name":name, "labels":{"kubernetes.io/bootstrapping":"rbac-defaults"}},"rules":rules});
            let _ = self.create_internal("rbac.authorization.k8s.io", "clusterroles", None, obj);
        }
        let obj = serde_json::json!({"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding",
            "metadata":{"name":"system:basic-user","labels":{"kubernetes.io/bootstrapping":"rbac-defaults"}},
            "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"system:basic-user"},
            "subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"system:authenticated"}]});
        let _ = self.create_internal("rbac.authorization.k8s.io", "clusterrolebindings", None, obj);
        let obj = serde_json::json!({"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding",
            "metadata":{"name":"system:discovery","labels":{"kubernetes.io/bootstrapping":"rbac-defaults"}},
            "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"system:discovery"},
            "subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"system:authenticated"}]});
        let _ = self.create_internal("rbac.authorization.k8s.io", "clusterrolebindings", None, obj);
    }

    /// Options in force.
    pub fn options(&self) -> &ApiServerOptions {
        &self.inner.opts
    }

    /// Adds a user (or replaces its groups) and returns its bearer token.
    pub fn add_user(&self, name: &str, groups: &[&str]) -> String {
        let mut users = self.inner.users.write().unwrap();
        if let Some((tok, u)) = users.iter_mut().find(|(_, u)| u.name == name) {
            u.groups = groups.iter().map(|g| g.to_string()).collect();
            return tok.clone();
        }
        let token = if name == "admin" {
            format!("{ADMIN_TOKEN_PREFIX}{}", uuid::Uuid::new_v4().simple())
        } else {
            format!("{}-{}", name.replace(|c: char| !c.is_ascii_alphanumeric(), "-"), uuid::Uuid::new_v4().simple())
        };
        users.insert(
            token.clone(),
            UserInfo { name: name.into(), groups: groups.iter().map(|g| g.to_string()).collect() },
        );
        token
    }

    /// Gives user `name` the bearer token `token` (its groups kept, or `groups` for a new user), so that the
    /// clients of an earlier server with the same users carry on against this one, as after a restart.
    pub fn set_token(&self, name: &str, groups: &[&str], token: &str) {
        let mut users = self.inner.users.write().unwrap();
        let old = users.iter().find(|(_, u)| u.name == name).map(|(t, _)| t.clone());
        let info = match old.and_then(|t| users.remove(&t)) {
            Some(u) => u,
            None => UserInfo { name: name.into(), groups: groups.iter().map(|g| g.to_string()).collect() },
        };
        users.insert(token.to_string(), info);
    }

    /// The bearer token of a user, if it exists.
    pub fn token_for(&self, user: &str) -> Option<String> {
        self.inner.users.read().unwrap().iter().find(|(_, u)| u.name == user).map(|(t, _)| t.clone())
    }

    pub(crate) fn user_by_token(&self, token: &str) -> Option<UserInfo> {
        self.inner.users.read().unwrap().get(token).cloned()
    }

    pub(crate) fn user_by_name(&self, name: &str) -> UserInfo {
        self.inner
            .users
            .read()
            .unwrap()
            .values()
            .find(|u| u.name == name)
            .cloned()
            .unwrap_or(UserInfo { name: name.into(), groups: vec![] })
    }

    /// In-process client as `admin`, default namespace `default`. Needs a Tokio runtime.
    pub fn client(&self) -> kube::Client {
        self.client_for("admin")
    }

    /// In-process client acting as `user` (created with [`ApiServer::add_user`] or unknown = no groups).
    pub fn client_for(&self, user: &str) -> kube::Client {
        kube::Client::new(transport::InProcess::new(self.clone(), self.user_by_name(user)), "default")
    }

    /// Serves plain HTTP on `addr` (use port 0); the returned endpoint stops serving when dropped.
    pub async fn serve_http(&self, addr: SocketAddr) -> std::io::Result<HttpEndpoint> {
        transport::serve_http(self.clone(), addr).await
    }

    /// Serves HTTPS on `addr` (use port 0) with a serving certificate signed by a CA made for it
    /// ([`HttpEndpoint::ca_pem`]); the returned endpoint stops serving when dropped. Write its kubeconfig with
    /// [`ApiServer::kubeconfig_yaml_for`]: over TLS kubectl sends the user's bearer token, `get --raw` included.
    pub async fn serve_https(&self, addr: SocketAddr) -> std::io::Result<HttpEndpoint> {
        let identity = TlsIdentity::generate().map_err(std::io::Error::other)?;
        transport::serve_https(self.clone(), addr, identity).await
    }

    /// [`ApiServer::serve_https`] with a given identity (e.g. the one of an earlier run, kept by the caller).
    pub async fn serve_https_as(&self, addr: SocketAddr, identity: TlsIdentity) -> std::io::Result<HttpEndpoint> {
        transport::serve_https(self.clone(), addr, identity).await
    }

    /// A kubeconfig for `user` against `ep`: for a TLS endpoint the server URL as it is, the CA as
    /// `certificate-authority-data` and the bearer token in the user entry (where kube-apiserver's clients keep it);
    /// for a plain HTTP endpoint the same as [`ApiServer::kubeconfig_yaml`].
    pub fn kubeconfig_yaml_for(&self, ep: &HttpEndpoint, user: &str, namespace: Option<&str>) -> String {
        use base64::Engine;
        let Some(ca) = &ep.ca_pem else {
            return self.kubeconfig_yaml(&ep.url, user, namespace);
        };
        let token = self.token_for(user).unwrap_or_else(|| self.add_user(user, &[]));
        let ca = base64::engine::general_purpose::STANDARD.encode(ca);
        let ns = namespace.map(|n| format!("\n    namespace: {n}")).unwrap_or_default();
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: embedded\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\ncontexts:\n- name: {user}@embedded\n  context:\n    cluster: embedded\n    user: {user}{ns}\ncurrent-context: {user}@embedded\nusers:\n- name: {user}\n  user:\n    token: {token}\npreferences: {{}}\n",
            ep.url
        )
    }

    /// A kubeconfig for `user` against `server_url` (an [`HttpEndpoint::url`]). client-go reads a kubeconfig's
    /// user credentials only for TLS servers (`clientcmd` `ClientConfig`: "only try to read the auth information
    /// if we are secure"; checked with kubectl 1.32, which sends no `Authorization` over http), so the token also
    /// travels as a server URL path prefix (`/u/TOKEN`) that the HTTP transport strips; the `token` field serves
    /// kube-rs, which sends it.
    pub fn kubeconfig_yaml(&self, server_url: &str, user: &str, namespace: Option<&str>) -> String {
        let token = self.token_for(user).unwrap_or_else(|| self.add_user(user, &[]));
        let server_url = format!("{}{}{token}", server_url.trim_end_matches('/'), transport::TOKEN_PATH_PREFIX);
        let ns = namespace.map(|n| format!("\n    namespace: {n}")).unwrap_or_default();
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: embedded\n  cluster:\n    server: {server_url}\ncontexts:\n- name: {user}@embedded\n  context:\n    cluster: embedded\n    user: {user}{ns}\ncurrent-context: {user}@embedded\nusers:\n- name: {user}\n  user:\n    token: {token}\npreferences: {{}}\n"
        )
    }

    /// Fault injection controls.
    pub fn faults(&self) -> FaultInjector {
        self.inner.faults.clone()
    }

    /// Log of handled requests with counters.
    pub fn request_log(&self) -> RequestLog {
        self.inner.log.clone()
    }

    /// Simulates an API server reboot: every watch and HTTP connection is dropped (after a BOOKMARK with the
    /// current resourceVersion when `bookmark_on_restart`). With `keep_history` the watch history survives, so
    /// clients resume without relisting; without, the watch cache restarts empty at a resourceVersion newer
    /// than any client has seen (like a watch cache initialized from a fresh etcd quorum read), so resuming
    /// watches get `410 Gone` and relist.
    pub async fn restart(&self, keep_history: bool) {
        {
            let mut st = self.inner.state.lock().unwrap();
            if self.inner.opts.bookmark_on_restart {
                st.bookmark_all();
            }
            st.drop_watchers();
            if !keep_history {
                st.reset_history();
            }
        }
        self.inner.epoch.send_modify(|e| *e += 1);
        tokio::task::yield_now().await;
    }

    pub(crate) fn epoch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.epoch.subscribe()
    }

    /// Registers an admission hook called on every mutating request after defaulting and validation.
    pub fn add_admission_hook(&self, hook: Arc<dyn AdmissionHook>) {
        self.inner.hooks.write().unwrap().push(hook);
    }

    /// Makes `/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy/...` forward to `target`.
    pub fn register_service_backend(&self, namespace: &str, service: &str, port: u16, target: SocketAddr) {
        self.inner.backends.write().unwrap().insert((namespace.into(), service.into(), port.to_string()), target);
    }

    /// Makes `/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy/...` forward to `target` (replaces any earlier one).
    pub fn register_pod_backend(&self, namespace: &str, pod: &str, port: u16, target: SocketAddr) {
        self.inner.pod_backends.write().unwrap().insert((namespace.into(), pod.into(), port.to_string()), target);
    }

    /// Forgets the pod proxy backend of `namespace/pod:port` (requests then get 503, like a pod without an IP).
    pub fn unregister_pod_backend(&self, namespace: &str, pod: &str, port: u16) {
        self.inner.pod_backends.write().unwrap().remove(&(namespace.to_string(), pod.to_string(), port.to_string()));
    }

    /// Adds a kubelet's log source: `pods/{name}/log` of a scheduled pod reads the first source that runs the pod.
    pub fn add_pod_log_source(&self, source: Arc<dyn PodLogSource>) {
        self.inner.log_sources.write().unwrap().push(source);
    }

    /// Reads an object straight from the store (no RBAC, no request log). `kind_plural` is the resource.
    pub fn get_object(
        &self,
        api_version: &str,
        kind_plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<serde_json::Value> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let st = self.inner.state.lock().unwrap();
        let rt = st.resource(group, kind_plural)?;
        let obj = st.get_key(&rt.storage_key(), namespace.unwrap_or(""), name)?;
        let mut obj = if group == "events.k8s.io" { events::to_external(&obj) } else { (*obj).clone() };
        obj["apiVersion"] = rt.api_version(version).into();
        Some(obj)
    }

    /// Registers every CRD in a (multi-document) YAML string.
    pub fn register_crd_yaml(&self, yaml: &str) -> Result<(), ApiServerError> {
        crd::register_yaml(self, yaml)
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.inner.state.lock().unwrap().rv
    }

    /// Number of open watches (all resources).
    pub fn watch_count(&self) -> usize {
        self.inner.state.lock().unwrap().watchers.len()
    }
}
