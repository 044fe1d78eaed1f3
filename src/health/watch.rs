//! What `status --watch` reads, kept current by watches instead of polling: one watcher per kind that
//! [`collect`](super::collect) lists (Etcds, pods by etcd-druid's labels, PVCs, leases, EtcdOperatorTasks) feeds
//! an in-memory store, and [`Watched::inputs`] assembles each Etcd's [`HealthInputs`] from the stores without
//! a request.
//!
//! Each watcher is a [`crate::kube::watch::events`] stream: a streaming list where the server offers it, resumed
//! after errors with backoff, relisting only on 410 Gone; errors are reported as [`Signal::Failed`], never
//! returned.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::assess::HealthInputs;
use crate::api::names::{LABEL_MANAGED_BY, LABEL_PART_OF, MANAGED_BY_DRUID};
use crate::api::{Etcd, EtcdOperatorTask};
use crate::kube::target::{ObjectKey, Targets};

/// The kinds `status` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Etcds.
    Etcd,
    /// Pods labelled by etcd-druid.
    Pod,
    /// PersistentVolumeClaims.
    Pvc,
    /// Leases.
    Lease,
    /// EtcdOperatorTasks.
    Task,
}

impl Kind {
    /// The resource, as `kubectl get` names it.
    pub fn resource(self) -> &'static str {
        match self {
            Kind::Etcd => "etcds",
            Kind::Pod => "pods",
            Kind::Pvc => "persistentvolumeclaims",
            Kind::Lease => "leases",
            Kind::Task => "etcdoperatortasks",
        }
    }
}

/// What a watcher reports.
#[derive(Debug, Clone)]
pub enum Signal {
    /// Its store holds a complete state (after the initial list or a relist).
    Synced(Kind),
    /// An object was added, changed or deleted.
    Changed(Kind),
    /// The watch failed; it is retried with backoff. Not sent for `410 Gone`, which only starts a relist.
    Failed {
        /// Whose watch.
        kind: Kind,
        /// Why, as a short sentence.
        why: String,
        /// The API server's answer, when it answered.
        status: Option<Box<kube::core::Status>>,
    },
}

/// Where the watches look and what they select.
#[derive(Debug, Clone)]
pub struct WatchScope {
    /// One namespace, or `None` for every namespace.
    pub namespace: Option<String>,
    /// Label selector of the Etcds (`-l`).
    pub etcd_selector: Option<String>,
    /// Only these Etcds (named on the command line), in this order; `None`: every Etcd the selector matches.
    pub named: Option<Vec<ObjectKey>>,
    /// Whether the EtcdOperatorTask CRD is installed (no task watch when it is not).
    pub tasks: bool,
}

impl WatchScope {
    /// The scope of `targets`: one namespace when every target is in it, else every namespace.
    pub fn of(targets: &Targets, tasks: bool) -> WatchScope {
        match targets {
            Targets::Named(keys) => {
                let namespaces: BTreeSet<&str> = keys.iter().map(|k| k.namespace.as_str()).collect();
                let namespace = (namespaces.len() == 1).then(|| keys[0].namespace.clone());
                WatchScope { namespace, etcd_selector: None, named: Some(keys.clone()), tasks }
            }
            Targets::Namespace { namespace, selector } => {
                WatchScope { namespace: Some(namespace.clone()), etcd_selector: selector.clone(), named: None, tasks }
            }
            Targets::AllNamespaces { selector } => {
                WatchScope { namespace: None, etcd_selector: selector.clone(), named: None, tasks }
            }
        }
    }

    /// The pod selector: etcd-druid's managed-by label, narrowed to the named Etcds' part-of label when there
    /// are a few (etcd-druid v0.37.1 `internal/component/statefulset/builder.go`, as in [`super::collect`]).
    pub fn pod_selector(&self) -> String {
        let names: BTreeSet<&str> =
            self.named.iter().flatten().map(|k| k.name.as_str()).collect::<BTreeSet<_>>().into_iter().collect();
        match names.len() {
            0 => format!("{LABEL_MANAGED_BY}={MANAGED_BY_DRUID}"),
            1 => format!("{LABEL_MANAGED_BY}={MANAGED_BY_DRUID},{LABEL_PART_OF}={}", names.first().expect("one")),
            n if n > 32 => format!("{LABEL_MANAGED_BY}={MANAGED_BY_DRUID}"),
            _ => {
                let list: Vec<&str> = names.into_iter().collect();
                format!("{LABEL_MANAGED_BY}={MANAGED_BY_DRUID},{LABEL_PART_OF} in ({})", list.join(","))
            }
        }
    }

    fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
}

/// The stores the watchers keep current.
#[derive(Clone)]
pub struct Watched {
    scope: WatchScope,
    etcds: Store<Etcd>,
    pods: Store<Pod>,
    pvcs: Store<PersistentVolumeClaim>,
    leases: Store<Lease>,
    tasks: Option<Store<EtcdOperatorTask>>,
}

/// The namespace of the nodes' heartbeat Leases.
const NODE_LEASES: &str = "kube-node-lease";

/// Starts one watcher per kind in `scope`; they run until `stop` fires and report on `signals`.
pub fn start(
    client: &Client,
    scope: WatchScope,
    signals: mpsc::UnboundedSender<Signal>,
    stop: CancellationToken,
) -> Watched {
    let base = watcher::Config::default();
    let etcd_config = match &scope.etcd_selector {
        Some(sel) => base.clone().labels(sel),
        None => base.clone(),
    };
    let etcds = spawn(scope.api(client), etcd_config, Kind::Etcd, signals.clone(), stop.clone());
    let pods =
        spawn(scope.api(client), base.clone().labels(&scope.pod_selector()), Kind::Pod, signals.clone(), stop.clone());
    let pvcs = spawn(scope.api(client), base.clone(), Kind::Pvc, signals.clone(), stop.clone());
    // Cluster-wide, the nodes' heartbeat Leases (namespace kube-node-lease, renewed every 10 s by each kubelet:
    // `pkg/kubelet/nodelease`, KEP-589) would be most of the events and none of the Etcds' leases.
    let lease_config = match scope.namespace {
        Some(_) => base.clone(),
        None => base.clone().fields(&format!("metadata.namespace!={NODE_LEASES}")),
    };
    let leases = spawn(scope.api(client), lease_config, Kind::Lease, signals.clone(), stop.clone());
    let tasks = scope.tasks.then(|| spawn(scope.api(client), base, Kind::Task, signals, stop));
    Watched { scope, etcds, pods, pvcs, leases, tasks }
}

/// A watcher of `K` feeding a store, reporting on `signals`.
fn spawn<K>(
    api: Api<K>,
    config: watcher::Config,
    kind: Kind,
    signals: mpsc::UnboundedSender<Signal>,
    stop: CancellationToken,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, mut writer) = reflector::store::<K>();
    tokio::spawn(async move {
        // `status` never reads managedFields: the store does not keep them.
        let stream = crate::kube::watch::events(api, config).modify(|o: &mut K| o.meta_mut().managed_fields = None);
        let mut stream = std::pin::pin!(stream);
        loop {
            let ev = tokio::select! {
                _ = stop.cancelled() => return,
                ev = stream.next() => ev,
            };
            let Some(ev) = ev else { return };
            let signal = match ev {
                Ok(ev) => {
                    writer.apply_watcher_event(&ev);
                    match ev {
                        Event::InitDone => Signal::Synced(kind),
                        Event::Apply(_) | Event::Delete(_) => Signal::Changed(kind),
                        Event::Init | Event::InitApply(_) => continue,
                    }
                }
                // 410 Gone is how a watch learns that it must relist: the relist follows at once, not an outage.
                Err(watcher::Error::WatchError(s)) if s.code == 410 => {
                    tracing::debug!(kind = kind.resource(), "410 Gone: relisting");
                    continue;
                }
                Err(e) => Signal::Failed { kind, why: error_sentence(&e), status: answer(&e) },
            };
            if signals.send(signal).is_err() {
                return;
            }
        }
    });
    reader
}

/// The API server's answer in a watch error, if it answered.
fn answer(e: &watcher::Error) -> Option<Box<kube::core::Status>> {
    match e {
        watcher::Error::WatchError(s) => Some(s.clone()),
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some(s.clone()),
        _ => None,
    }
}

/// A watch error as a short sentence (the API server's message, or what the connection did).
fn error_sentence(e: &watcher::Error) -> String {
    match e {
        watcher::Error::WatchError(s) => format!("{} ({})", s.message, s.code),
        watcher::Error::InitialListFailed(k) | watcher::Error::WatchStartFailed(k) | watcher::Error::WatchFailed(k) => {
            match k {
                kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
                other => {
                    // The innermost cause says what happened ("Connection refused", "connection closed").
                    let mut cause: &dyn std::error::Error = other;
                    while let Some(next) = cause.source() {
                        cause = next;
                    }
                    cause.to_string()
                }
            }
        }
        other => other.to_string(),
    }
}

/// Objects of one kind by namespace and name.
fn index<K: Resource<DynamicType = ()> + Clone>(store: &Store<K>) -> BTreeMap<(String, String), std::sync::Arc<K>> {
    store
        .state()
        .into_iter()
        .map(|o| {
            let m = o.meta();
            ((m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap_or_default()), o)
        })
        .collect()
}

impl Watched {
    /// Whether every store holds a complete state.
    pub fn ready(&self, synced: &HashSet<Kind>) -> bool {
        let need = [Kind::Etcd, Kind::Pod, Kind::Pvc, Kind::Lease];
        need.iter().all(|k| synced.contains(k)) && (self.tasks.is_none() || synced.contains(&Kind::Task))
    }

    /// The Etcds to show, in the order `status` shows them: as named, else by namespace and name.
    pub fn etcds(&self) -> Vec<Etcd> {
        let all = index(&self.etcds);
        match &self.scope.named {
            Some(keys) => keys
                .iter()
                .filter_map(|k| all.get(&(k.namespace.clone(), k.name.clone())))
                .map(|e| (**e).clone())
                .collect(),
            None => all.into_values().map(|e| (*e).clone()).collect(),
        }
    }

    /// The inputs of each Etcd to show, from the stores (no request): its pods, PVCs and leases by the names
    /// etcd-druid derives (in ordinal order) and the tasks targeting it.
    pub fn inputs(&self) -> Vec<HealthInputs> {
        let etcds = self.etcds();
        let (pods, pvcs, leases) = (index(&self.pods), index(&self.pvcs), index(&self.leases));
        let tasks = self.tasks.as_ref().map(|s| s.state());
        etcds.into_iter().map(|etcd| super::collect::inputs_of(etcd, &pods, &pvcs, &leases, tasks.as_deref())).collect()
    }
}

/// How long redraws wait for more events before drawing (a burst of events, e.g. a relist, draws once).
pub const DEBOUNCE: Duration = Duration::from_millis(200);

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> ObjectKey {
        ObjectKey { namespace: ns.into(), name: name.into() }
    }

    #[test]
    fn named_targets_in_one_namespace_watch_that_namespace_only() {
        let s = WatchScope::of(&Targets::Named(vec![key("a", "etcd-main"), key("a", "etcd-events")]), true);
        assert_eq!(s.namespace.as_deref(), Some("a"));
        assert_eq!(
            s.pod_selector(),
            format!("{LABEL_MANAGED_BY}={MANAGED_BY_DRUID},{LABEL_PART_OF} in (etcd-events,etcd-main)")
        );
        let s = WatchScope::of(&Targets::Named(vec![key("a", "etcd-main"), key("b", "etcd-main")]), true);
        assert_eq!(s.namespace, None, "two namespaces: every namespace");
        assert_eq!(s.pod_selector(), format!("{LABEL_MANAGED_BY}={MANAGED_BY_DRUID},{LABEL_PART_OF}=etcd-main"));
        let s = WatchScope::of(&Targets::AllNamespaces { selector: Some("x=y".into()) }, false);
        assert_eq!((s.namespace.as_deref(), s.etcd_selector.as_deref()), (None, Some("x=y")));
        assert_eq!(s.pod_selector(), format!("{LABEL_MANAGED_BY}={MANAGED_BY_DRUID}"));
    }

    fn obj<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> K {
        serde_json::from_value(v).unwrap()
    }

    fn store_of<K>(items: Vec<K>) -> Store<K>
    where
        K: Resource<DynamicType = ()> + Clone + 'static,
    {
        let (reader, mut writer) = reflector::store::<K>();
        writer.apply_watcher_event(&Event::Init);
        for o in items {
            writer.apply_watcher_event(&Event::InitApply(o));
        }
        writer.apply_watcher_event(&Event::InitDone);
        reader
    }

    fn etcd(ns: &str, name: &str, replicas: i32) -> Etcd {
        obj(serde_json::json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "labels": {}, "selector": {}, "etcd": {}, "backup": {}}
        }))
    }

    fn named<K: serde::de::DeserializeOwned>(kind: &str, api: &str, ns: &str, name: &str) -> K {
        obj(serde_json::json!({"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": ns}}))
    }

    #[test]
    fn each_etcd_gets_its_own_objects_from_the_stores_in_ordinal_order() {
        let pod = |ns: &str, n: &str| named::<Pod>("Pod", "v1", ns, n);
        let pvc = |ns: &str, n: &str| named::<PersistentVolumeClaim>("PersistentVolumeClaim", "v1", ns, n);
        let lease = |ns: &str, n: &str| named::<Lease>("Lease", "coordination.k8s.io/v1", ns, n);
        let watched = Watched {
            scope: WatchScope::of(&Targets::Named(vec![key("a", "etcd-main"), key("b", "etcd-main")]), false),
            etcds: store_of(vec![etcd("b", "etcd-main", 1), etcd("a", "etcd-main", 3), etcd("a", "other", 1)]),
            pods: store_of(vec![
                pod("a", "etcd-main-2"),
                pod("a", "etcd-main-0"),
                pod("b", "etcd-main-0"),
                pod("a", "x"),
            ]),
            pvcs: store_of(vec![pvc("a", "etcd-main-etcd-main-1"), pvc("b", "etcd-main-etcd-main-1")]),
            leases: store_of(vec![
                lease("a", "etcd-main-1"),
                lease("a", "etcd-main-full-snap"),
                lease("b", "etcd-main-0"),
            ]),
            tasks: None,
        };
        let inputs = watched.inputs();
        let names = |v: Vec<String>| v.join(",");
        let ns_name = |i: &HealthInputs| {
            format!("{}/{}", i.etcd.metadata.namespace.as_deref().unwrap(), i.etcd.metadata.name.as_deref().unwrap())
        };
        assert_eq!(inputs.iter().map(ns_name).collect::<Vec<_>>(), ["a/etcd-main", "b/etcd-main"], "as named");
        let a = &inputs[0];
        assert_eq!(names(a.pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect()), "etcd-main-0,etcd-main-2");
        assert_eq!(names(a.pvcs.iter().map(|p| p.metadata.name.clone().unwrap()).collect()), "etcd-main-etcd-main-1");
        assert_eq!(
            names(a.leases.iter().map(|p| p.metadata.name.clone().unwrap()).collect()),
            "etcd-main-1,etcd-main-full-snap"
        );
        assert!(a.tasks.is_none(), "no task CRD, no tasks");
        let b = &inputs[1];
        assert_eq!(names(b.pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect()), "etcd-main-0");
        assert!(b.pvcs.is_empty(), "replica 1 of a 1-member Etcd is not its PVC");
        assert_eq!(names(b.leases.iter().map(|p| p.metadata.name.clone().unwrap()).collect()), "etcd-main-0");
        let synced: HashSet<Kind> = [Kind::Etcd, Kind::Pod, Kind::Pvc].into();
        assert!(!watched.ready(&synced), "leases not listed yet");
        let synced: HashSet<Kind> = [Kind::Etcd, Kind::Pod, Kind::Pvc, Kind::Lease].into();
        assert!(watched.ready(&synced), "no task watch to wait for");
    }
}
