//! Reading what `assess` needs from the cluster with one LIST per kind, never one GET per object: pods by the
//! label selector etcd-druid puts on them, PVCs, leases and EtcdOperatorTasks of the namespace, all concurrently.
//! Several Etcds share the LISTs: one set per namespace, or one cluster-wide set for `-A`, then grouped.
//!
//! Pod labels: etcd-druid's StatefulSet template carries `app.kubernetes.io/managed-by=etcd-druid` and
//! `app.kubernetes.io/part-of=<etcd>` (etcd-druid v0.37.1 `internal/component/statefulset/builder.go`, default
//! labels of `api/core/v1alpha1/helper.go`). PVC and lease names are the ones etcd-druid derives
//! ([`druid_api::names::ManagedNames`], including `spec.memberNamePrefix`).

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashSet};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Client;
use kube::api::ListParams;

use super::assess::HealthInputs;
use crate::api::names::{LABEL_MANAGED_BY, LABEL_PART_OF, MANAGED_BY_DRUID};
use crate::api::{Etcd, EtcdOperatorTask};
use crate::etcd::member_status::ViewReader;
use crate::kube::ClusterError;
use crate::kube::error::Subject;
use crate::kube::slim::{self, Slim};
use crate::kube::target::ObjectKey;

/// Where one set of LISTs reads: one namespace, or every namespace at once.
#[derive(Debug, Clone, Copy)]
enum Scope<'a> {
    Namespace(&'a str),
    Cluster,
}

impl Scope<'_> {
    /// The namespace of the requests: `None` for every namespace.
    fn only(&self) -> Option<&str> {
        match self {
            Scope::Namespace(ns) => Some(ns),
            Scope::Cluster => None,
        }
    }
    fn namespace(&self) -> &str {
        match self {
            Scope::Namespace(ns) => ns,
            Scope::Cluster => "",
        }
    }
}

/// Objects per page of a LIST: bounds the memory a whole seed's LIST takes while it is read.
const PAGE: u32 = 500;

/// Lists one kind in pages of [`PAGE`], keeping only the objects `keep` accepts, decoded without their
/// managedFields ([`crate::kube::slim`]), so that memory follows what is kept, not what the scope holds.
async fn list<K>(
    client: &Client,
    scope: Scope<'_>,
    kind: &str,
    selector: Option<&str>,
    keep: impl Fn(&K) -> bool,
) -> Result<Vec<K>, ClusterError>
where
    K: Slim<Scope = k8s_openapi::NamespaceResourceScope>,
{
    let mut lp = ListParams::default().limit(PAGE);
    if let Some(s) = selector {
        lp = lp.labels(s);
    }
    if matches!(scope, Scope::Cluster) && kind == "lease" {
        // Every node renews a lease in `kube-node-lease` (kubelet's heartbeat); none of them is an Etcd's.
        lp = lp.fields("metadata.namespace!=kube-node-lease");
    }
    let mut kept = Vec::new();
    loop {
        let (items, next) = slim::list_page::<K>(client, scope.only(), &lp)
            .await
            .map_err(|e| ClusterError::from_kube(e, &Subject { kind, name: "", namespace: scope.namespace() }))?;
        kept.extend(items.into_iter().filter(|o| keep(o)));
        match next {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
    }
    Ok(kept)
}

/// Whether `o` is one of the `wanted` (namespace, name) pairs.
fn wanted<K: kube::Resource>(wanted: &HashSet<(String, String)>, o: &K) -> bool {
    let m = o.meta();
    // A borrowed lookup would need a tuple of references; the pairs are short and this runs once per object.
    wanted.contains(&(m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap_or_default()))
}

/// Pod label selector for the Etcds called `names` (one LIST for all of them).
fn pod_selector(names: &BTreeSet<&str>) -> String {
    let names: Vec<&str> = names.iter().copied().collect();
    match names.as_slice() {
        // Past a few dozen names the selector would make a long URL; the managed-by label alone still narrows.
        many if many.len() > 32 => format!("{LABEL_MANAGED_BY}={MANAGED_BY_DRUID}"),
        [one] => format!("{LABEL_MANAGED_BY}={MANAGED_BY_DRUID},{LABEL_PART_OF}={one}"),
        many => format!("{LABEL_MANAGED_BY}={MANAGED_BY_DRUID},{LABEL_PART_OF} in ({})", many.join(",")),
    }
}

/// Objects of one kind, by namespace and name.
type ByKey<K> = BTreeMap<(String, String), K>;

fn by_key<K: kube::Resource>(items: Vec<K>) -> ByKey<K> {
    items
        .into_iter()
        .map(|o| {
            let m = o.meta();
            ((m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap_or_default()), o)
        })
        .collect()
}

/// The LISTs of one scope, not yet split per Etcd.
struct Listed {
    pods: ByKey<Pod>,
    pvcs: ByKey<PersistentVolumeClaim>,
    leases: ByKey<Lease>,
    /// `None` while the EtcdOperatorTask CRD is not installed.
    tasks: Option<Vec<EtcdOperatorTask>>,
}

/// The names etcd-druid derives for a set of Etcds: what a scope's LISTs are filtered down to.
struct Wanted {
    pods: HashSet<(String, String)>,
    pvcs: HashSet<(String, String)>,
    leases: HashSet<(String, String)>,
    etcds: HashSet<(String, String)>,
}

impl Wanted {
    fn of(etcds: &[&Etcd]) -> Wanted {
        let mut w =
            Wanted { pods: HashSet::new(), pvcs: HashSet::new(), leases: HashSet::new(), etcds: HashSet::new() };
        for e in etcds {
            let ns = e.metadata.namespace.clone().unwrap_or_default();
            let names = e.managed_names();
            let n = u32::try_from(e.spec.replicas.max(0)).unwrap_or(0);
            for i in 0..n {
                w.pods.insert((ns.clone(), names.pod(i)));
                w.pvcs.insert((ns.clone(), names.pvc(i)));
                w.leases.insert((ns.clone(), names.member_lease(i)));
            }
            w.leases.insert((ns.clone(), names.full_snapshot_lease()));
            w.leases.insert((ns.clone(), names.delta_snapshot_lease()));
            w.etcds.insert((ns, e.metadata.name.clone().unwrap_or_default()));
        }
        w
    }

    fn task(&self, t: &EtcdOperatorTask) -> bool {
        self.etcds.iter().any(|(ns, name)| t.targets(ns, name))
    }
}

/// One LIST per kind in `scope`, concurrently; with `wanted`, only those objects are kept while the pages are
/// read, without it everything is (and filtered later, see [`collect_named`]).
async fn list_scope(
    client: &Client,
    scope: Scope<'_>,
    pod_selector: &str,
    wanted: Option<&Wanted>,
) -> Result<Listed, ClusterError> {
    let tasks = async {
        let keep = |t: &EtcdOperatorTask| wanted.is_none_or(|w| w.task(t));
        match list::<EtcdOperatorTask>(client, scope, "EtcdOperatorTask", None, keep).await {
            Ok(items) => Ok(Some(items)),
            Err(ClusterError::ApiMissing { .. }) => Ok(None),
            Err(other) => Err(other),
        }
    };
    let (pods, pvcs, leases, tasks) = tokio::try_join!(
        list::<Pod>(client, scope, "pod", Some(pod_selector), |o| wanted.is_none_or(|w| self::wanted(&w.pods, o))),
        list::<PersistentVolumeClaim>(client, scope, "persistentvolumeclaim", None, |o| {
            wanted.is_none_or(|w| self::wanted(&w.pvcs, o))
        }),
        list::<Lease>(client, scope, "lease", None, |o| wanted.is_none_or(|w| self::wanted(&w.leases, o))),
        tasks,
    )?;
    Ok(Listed { pods: by_key(pods), pvcs: by_key(pvcs), leases: by_key(leases), tasks })
}

impl Listed {
    /// Keeps only the objects of `wanted`.
    fn retain(&mut self, wanted: &Wanted) {
        self.pods.retain(|k, _| wanted.pods.contains(k));
        self.pvcs.retain(|k, _| wanted.pvcs.contains(k));
        self.leases.retain(|k, _| wanted.leases.contains(k));
        if let Some(tasks) = self.tasks.as_mut() {
            tasks.retain(|t| wanted.task(t));
        }
    }
}

/// The inputs of `etcd`, taken out of the scope's LISTs by the names etcd-druid derives (in ordinal order, as
/// the GETs used to return them).
fn split(listed: &Listed, etcd: Etcd) -> HealthInputs {
    inputs_of(etcd, &listed.pods, &listed.pvcs, &listed.leases, listed.tasks.as_deref())
}

/// The inputs of `etcd` out of objects held by namespace and name (LIST results, or `status --watch`'s stores):
/// its pods, PVCs and leases by the names etcd-druid derives ([`crate::api::names::ManagedNames`], in ordinal
/// order) and the tasks that target it.
pub(crate) fn inputs_of<P, C, L, T>(
    etcd: Etcd,
    pods: &BTreeMap<(String, String), P>,
    pvcs: &BTreeMap<(String, String), C>,
    leases: &BTreeMap<(String, String), L>,
    tasks: Option<&[T]>,
) -> HealthInputs
where
    P: Borrow<Pod>,
    C: Borrow<PersistentVolumeClaim>,
    L: Borrow<Lease>,
    T: Borrow<EtcdOperatorTask>,
{
    let ns = etcd.metadata.namespace.clone().unwrap_or_default();
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let names = etcd.managed_names();
    let n = u32::try_from(etcd.spec.replicas.max(0)).unwrap_or(0);
    let mut lease_names: Vec<String> = (0..n).map(|i| names.member_lease(i)).collect();
    lease_names.extend([names.full_snapshot_lease(), names.delta_snapshot_lease()]);
    fn take<K: Clone, V: Borrow<K>>(
        map: &BTreeMap<(String, String), V>,
        ns: &str,
        wanted: impl IntoIterator<Item = String>,
    ) -> Vec<K> {
        let mut seen = HashSet::new();
        wanted
            .into_iter()
            .filter(|w| seen.insert(w.clone()))
            .filter_map(|w| map.get(&(ns.to_string(), w)).map(|o| o.borrow().clone()))
            .collect()
    }
    let pods = take(pods, &ns, (0..n).map(|i| names.pod(i)));
    let pvcs = take(pvcs, &ns, (0..n).map(|i| names.pvc(i)));
    let leases = take(leases, &ns, lease_names);
    let tasks = tasks.map(|all| {
        all.iter().map(Borrow::borrow).filter(|t: &&EtcdOperatorTask| t.targets(&ns, &name)).cloned().collect()
    });
    HealthInputs { etcd, pods, pvcs, leases, tasks, etcd_observation: None }
}

/// Reads the inputs for `etcd`: one LIST per kind in its namespace (pods by the Etcd's selector), kept to the
/// names etcd-druid derives. A missing EtcdOperatorTask CRD is not an error (`tasks: None`).
pub async fn collect(client: &Client, etcd: Etcd) -> Result<HealthInputs, ClusterError> {
    let ns = etcd.metadata.namespace.clone().unwrap_or_default();
    let selector = pod_selector(&etcd.metadata.name.as_deref().into_iter().collect());
    let listed = list_scope(client, Scope::Namespace(&ns), &selector, Some(&Wanted::of(&[&etcd]))).await?;
    Ok(split(&listed, etcd))
}

/// Reads the Etcds named by `keys` and their inputs in one round trip per namespace: each namespace's LISTs go
/// out together with the GETs of its Etcds (the pod selector needs only the names) and are filtered to the
/// names etcd-druid derives once the Etcds are in. Used when the user named the Etcds, so a namespace's
/// LISTs are held unfiltered only for the few milliseconds of a GET.
///
/// Errors come in a fixed order whatever answers first: a failed GET (a missing Etcd, with its hint) before a
/// failed LIST.
pub async fn collect_named(client: &Client, keys: &[ObjectKey]) -> Result<Vec<HealthInputs>, ClusterError> {
    collect_named_then(client, keys, &|_| {}).await
}

/// What a collection calls as soon as Etcds are read, while the rest is still being listed (e.g. to start
/// reading their TLS secrets: [`crate::etcd::member_status::ViewReader::etcds_known`]).
pub type OnEtcds<'a> = &'a (dyn Fn(&[Etcd]) + Sync);

/// [`collect_named`], calling `on_etcds` with each namespace's Etcds as soon as their GETs are in.
pub async fn collect_named_then(
    client: &Client,
    keys: &[ObjectKey],
    on_etcds: OnEtcds<'_>,
) -> Result<Vec<HealthInputs>, ClusterError> {
    let namespaces: BTreeSet<&str> = keys.iter().map(|k| k.namespace.as_str()).collect();
    let per_namespace = futures::future::join_all(namespaces.iter().map(|ns| async move {
        let mine: Vec<&ObjectKey> = keys.iter().filter(|k| k.namespace == *ns).collect();
        let names: BTreeSet<&str> = mine.iter().map(|k| k.name.as_str()).collect();
        let selector = pod_selector(&names);
        let etcds = async {
            let etcds = futures::future::join_all(mine.iter().map(|k| crate::kube::etcds::get(client, k))).await;
            let etcds = etcds.into_iter().collect::<Result<Vec<Etcd>, _>>();
            if let Ok(known) = &etcds {
                on_etcds(known);
            }
            etcds
        };
        let (etcds, listed) = tokio::join!(etcds, list_scope(client, Scope::Namespace(ns), &selector, None));
        let etcds = etcds?;
        let mut listed = listed?;
        listed.retain(&Wanted::of(&etcds.iter().collect::<Vec<_>>()));
        Ok::<_, ClusterError>((*ns, etcds, listed))
    }))
    .await;
    let mut by_ns = BTreeMap::new();
    for result in per_namespace {
        let (ns, etcds, listed) = result?;
        by_ns.insert(ns, (etcds, listed));
    }
    // In the order the user named them.
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let (etcds, listed) = &by_ns[key.namespace.as_str()];
        let etcd = etcds.iter().find(|e| e.metadata.name.as_deref() == Some(key.name.as_str())).cloned();
        out.extend(etcd.map(|e| split(listed, e)));
    }
    Ok(out)
}

/// Reads every Etcd of a namespace (`Some`) or of the cluster (`None`), optionally by label selector, and their
/// inputs in one round trip: the LIST of the Etcds goes out together with one LIST per kind of the same scope
/// (pods by etcd-druid's `managed-by` label), whose pages are filtered to the names etcd-druid derives once the
/// Etcds are in. Returns the Etcds in namespace/name order.
pub async fn collect_listed(
    client: &Client,
    namespace: Option<&str>,
    etcd_selector: Option<&str>,
) -> Result<Vec<HealthInputs>, ClusterError> {
    collect_listed_then(client, namespace, etcd_selector, &|_| {}).await
}

/// [`collect_listed`], calling `on_etcds` with the Etcds as soon as their LIST is in.
pub async fn collect_listed_then(
    client: &Client,
    namespace: Option<&str>,
    etcd_selector: Option<&str>,
    on_etcds: OnEtcds<'_>,
) -> Result<Vec<HealthInputs>, ClusterError> {
    let (scope, targets) = match namespace {
        Some(ns) => (
            Scope::Namespace(ns),
            crate::kube::target::Targets::Namespace {
                namespace: ns.to_string(),
                selector: etcd_selector.map(str::to_string),
            },
        ),
        None => (
            Scope::Cluster,
            crate::kube::target::Targets::AllNamespaces { selector: etcd_selector.map(str::to_string) },
        ),
    };
    let selector = format!("{LABEL_MANAGED_BY}={MANAGED_BY_DRUID}");
    // Errors in a fixed order whatever answers first: the Etcds' LIST before the others.
    let etcds = async {
        let etcds = crate::kube::etcds::resolve(client, &targets).await;
        if let Ok(known) = &etcds {
            on_etcds(known);
        }
        etcds
    };
    let (etcds, listed) = tokio::join!(etcds, list_scope(client, scope, &selector, None));
    let etcds = etcds?;
    let mut listed = listed?;
    listed.retain(&Wanted::of(&etcds.iter().collect::<Vec<_>>()));
    Ok(etcds.into_iter().map(|e| split(&listed, e)).collect())
}

/// Asks every member's etcd of every Etcd in `inputs` for its own view ([`ViewReader::observe`]), all
/// concurrently, each member bounded by the reader's timeout; never fails (what could not be read says why).
/// With `read_again`, a member found behind the leader is read again (with the leader) that long after, so
/// that its lag is judged over time ([`super::etcd_view::lag_trend`]); no one behind, no second reading.
pub async fn observe_etcd_with(
    reader: &ViewReader,
    inputs: &mut [HealthInputs],
    read_again: Option<std::time::Duration>,
) {
    let observations = futures::future::join_all(inputs.iter().map(|i| async move {
        let first = reader.observe(&i.etcd, &i.pods).await;
        let again = super::etcd_view::to_read_again(&first);
        match read_again {
            Some(after) if !again.is_empty() => {
                tokio::time::sleep(after).await;
                reader.reread(&i.etcd, &i.pods, first, &again).await
            }
            _ => first,
        }
    }))
    .await;
    for (i, o) in inputs.iter_mut().zip(observations) {
        i.etcd_observation = Some(o);
    }
}

/// [`observe_etcd_with`] a reader that uses `client` for everything, each member bounded by `timeout`.
pub async fn observe_etcd(client: &Client, inputs: &mut [HealthInputs], timeout: std::time::Duration) {
    observe_etcd_with(&ViewReader::new(client.clone(), client.clone(), timeout, None), inputs, None).await;
}
