//! machine-controller-manager for `Machine`s and `MachineSet`s (`machine.sapcloud.io/v1alpha1`) and the
//! `Node`s they back, over the Kubernetes API only (seeds/004 ~2146-2460). MCM talks to two clusters (its
//! `--control-kubeconfig` and `--target-kubeconfig`, MCM `docs/faq.md`): Machines and MachineSets live in the
//! control cluster, Nodes and pods in the target cluster. [`Mcm::start_split`] takes one client for each (two API
//! servers); [`Mcm::start`] uses one client for both, as when the two are the same cluster.
//!
//! - A MachineSet keeps `spec.replicas` Machines that match its selector: it creates Machines (with MCM's
//!   finalizer) from its template; after [`McmOptions::node_ready_after`] each new Machine gets a Node named
//!   like it that reports `Ready=True`, the Machine gets the `node` label and phase `Running`.
//! - How a Node asks for its Machine's deletion depends on [`McmOptions::version`]:
//!   - up to v0.60.x, a Node annotated `node.machine.sapcloud.io/trigger-deletion-by-mcm: "true"` has its Machine
//!     deleted (`updateNodeToMachine`, `pkg/util/provider/machinecontroller/machine.go` at v0.60.0); `"false"`
//!     means nothing;
//!   - from v0.61.0 that annotation is not read on Nodes (#1055); instead every Node backed by a Machine gets the
//!     finalizer `node.machine.sapcloud.io/machine-controller`, and a Node being deleted has its Machine deleted
//!     (`reconcileClusterNodeKey` / `triggerMachineDeletion`, `pkg/util/provider/machinecontroller/node.go`).
//! - A deleted Machine's node is cordoned and drained with evictions, which respect PodDisruptionBudgets (a
//!   blocked drain is reported in `status.lastOperation` and retried), unless the Machine carries
//!   `force-deletion: "True"`; then the remaining pods are deleted, MCM's Node finalizer removed and the Node
//!   deleted (`deleteNodeObject`, `machine_util.go`), and the Machine's finalizer removed. StatefulSet pods of the
//!   node are thereby deleted, and their controller recreates them.
//! - Nodes annotated `node.machine.sapcloud.io/not-managed-by-mcm` are left alone (`node.go`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use druid_api::names::{
    MACHINE_FORCE_DELETION, MACHINE_NODE_LABEL, MACHINE_PRIORITY, MCM_NODE_FINALIZER, NODE_MACHINE_NAME_LABEL,
    NODE_NOT_MANAGED_BY_MCM, NODE_TRIGGER_DELETION_BY_MCM,
};
use druid_api::{Machine, MachineSet};

/// Finalizer MCM puts on every Machine it manages.
pub const MACHINE_FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";

/// Tunables of the MCM actor.
#[derive(Debug, Clone)]
pub struct McmOptions {
    /// Namespace of the Machines and MachineSets (`None`: all namespaces).
    pub namespace: Option<String>,
    /// Period of the loop.
    pub tick: Duration,
    /// How long a new Machine takes until its Node is Ready.
    pub node_ready_after: Duration,
    /// The MCM release played (how a Node asks for its Machine's deletion).
    pub version: McmVersion,
}

impl Default for McmOptions {
    fn default() -> Self {
        McmOptions {
            namespace: None,
            tick: Duration::from_millis(200),
            node_ready_after: Duration::from_millis(500),
            version: McmVersion::NEWEST,
        }
    }
}

/// An MCM release `v0.<minor>.<patch>` (MCM has not reached 1.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct McmVersion {
    /// Minor version.
    pub minor: u32,
    /// Patch version.
    pub patch: u32,
}

impl McmVersion {
    /// v0.60.3: the last release that reads the Node annotation `trigger-deletion-by-mcm`.
    pub const V0_60: McmVersion = McmVersion { minor: 60, patch: 3 };
    /// v0.62.1, the newest release played.
    pub const NEWEST: McmVersion = McmVersion { minor: 62, patch: 1 };

    /// Whether this release guards Nodes with [`MCM_NODE_FINALIZER`] and deletes the Machine of a Node being
    /// deleted, instead of reading the Node annotation (v0.61.0+).
    pub fn node_finalizer(self) -> bool {
        self.minor >= 61
    }
}

impl std::fmt::Display for McmVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "v0.{}.{}", self.minor, self.patch)
    }
}

/// MCM's two clients: the control cluster (Machines, MachineSets) and the target cluster (Nodes, pods).
#[derive(Clone)]
pub struct McmClients {
    /// `--control-kubeconfig`: Machines and MachineSets.
    pub control: Client,
    /// `--target-kubeconfig`: Nodes, pods, evictions.
    pub target: Client,
}

impl McmClients {
    /// Both in one cluster.
    pub fn same(client: Client) -> McmClients {
        McmClients { control: client.clone(), target: client }
    }
}

/// The running MCM actor; stops on [`Mcm::stop`] and on drop.
pub struct Mcm {
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Mcm {
    /// Starts the actor on `client` (control and target cluster are the same).
    pub fn start(client: Client, opts: McmOptions) -> Mcm {
        Mcm::start_split(McmClients::same(client), opts)
    }
    /// Starts the actor with Machines in `clients.control` and Nodes in `clients.target`.
    pub fn start_split(clients: McmClients, opts: McmOptions) -> Mcm {
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run(clients, opts, cancel.clone()));
        Mcm { cancel, task: Some(task) }
    }
    /// Stops the actor.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for Mcm {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// A MachineSet of `replicas` machines in `ns` (the actor creates the Machines and Nodes).
pub fn machine_set(ns: &str, name: &str, replicas: i32) -> serde_json::Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"machine-set": name}},
            "template": {"metadata": {"labels": {"machine-set": name}},
                         "spec": {"class": {"kind": "MachineClass", "name": "playground"}}}
        }
    })
}

struct State {
    /// When each Machine was first seen without a node.
    born: Mutex<HashMap<(String, String), Instant>>,
}

/// The actor loop (also spawned by the landscape).
pub(crate) async fn run(clients: McmClients, opts: McmOptions, cancel: CancellationToken) {
    let state = Arc::new(State { born: Mutex::default() });
    loop {
        if let Err(e) = reconcile_all(&clients, &opts, &state).await {
            tracing::debug!(error = %e, "mcm actor: reconcile failed; retrying");
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(opts.tick) => {}
        }
    }
}

fn scoped<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

async fn reconcile_all(clients: &McmClients, opts: &McmOptions, state: &State) -> Result<(), kube::Error> {
    let ns = opts.namespace.as_deref();
    let client = &clients.control;
    let machines = scoped::<Machine>(client, ns).list(&ListParams::default()).await?.items;
    let nodes_api: Api<Node> = Api::all(clients.target.clone());
    let nodes = nodes_api.list(&ListParams::default()).await?.items;
    let live_machine_of =
        |node: &str| machines.iter().find(|m| m.node_name() == Some(node) && m.metadata.deletion_timestamp.is_none());
    let delete = |m: &Machine| {
        let api: Api<Machine> = Api::namespaced(client.clone(), m.metadata.namespace.as_deref().unwrap_or_default());
        let name = m.metadata.name.clone().unwrap_or_default();
        async move { api.delete(&name, &DeleteParams::default()).await.map(|_| ()) }
    };

    for node in &nodes {
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        let annotations = node.metadata.annotations.clone().unwrap_or_default();
        if annotations.contains_key(NODE_NOT_MANAGED_BY_MCM) {
            continue;
        }
        if opts.version.node_finalizer() {
            // v0.61.0+ (node.go): a Node being deleted has its Machine deleted; every other Node backed by a live
            // Machine carries MCM's finalizer (merge patch of the whole list, as `updateNodeFinalizers` sends).
            let Some(m) = live_machine_of(node_name) else { continue };
            if node.metadata.deletion_timestamp.is_some() {
                delete(m).await?;
                continue;
            }
            let mut fins = node.metadata.finalizers.clone().unwrap_or_default();
            if !fins.iter().any(|f| f == MCM_NODE_FINALIZER) {
                fins.push(MCM_NODE_FINALIZER.to_string());
                fins.sort();
                nodes_api
                    .patch(node_name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": fins}})))
                    .await?;
            }
        } else if annotations.get(NODE_TRIGGER_DELETION_BY_MCM).map(String::as_str) == Some("true")
            && let Some(m) = live_machine_of(node_name)
        {
            // Up to v0.60.x (machine.go `updateNodeToMachine`): the Node annotation deletes its Machine.
            delete(m).await?;
        }
    }

    for m in &machines {
        let mns = m.metadata.namespace.clone().unwrap_or_default();
        let mname = m.metadata.name.clone().unwrap_or_default();
        if m.metadata.deletion_timestamp.is_some() {
            delete_machine(clients, opts, m, &mns, &mname).await?;
            state.born.lock().expect("born").remove(&(mns, mname));
        } else if m.node_name().is_none() {
            let born =
                *state.born.lock().expect("born").entry((mns.clone(), mname.clone())).or_insert_with(Instant::now);
            if born.elapsed() >= opts.node_ready_after {
                join_node_in(clients, &mns, &mname).await?;
            }
        }
    }

    // Listed untyped: the template is not part of druidctl's MachineSet subset.
    let ar = kube::core::ApiResource::erase::<MachineSet>(&());
    let raw_api: Api<kube::api::DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    for raw in raw_api.list(&ListParams::default()).await?.items {
        let raw = serde_json::to_value(&raw).unwrap_or_default();
        let Ok(set) = serde_json::from_value::<MachineSet>(raw.clone()) else { continue };
        let set = &set;
        let sns = set.metadata.namespace.clone().unwrap_or_default();
        let selector = set.spec.selector.clone().unwrap_or_default();
        let live = machines
            .iter()
            .filter(|m| {
                m.metadata.namespace.as_deref() == Some(sns.as_str()) && m.metadata.deletion_timestamp.is_none()
            })
            .filter(|m| {
                crate::statefulset::selects(&selector, m.metadata.labels.as_ref().unwrap_or(&Default::default()))
            })
            .count() as i32;
        let want = set.spec.replicas.unwrap_or(0);
        for _ in live..want {
            create_machine(client, set, &raw, &sns).await?;
        }
        let status = json!({"status": {"replicas": live.max(0), "readyReplicas": live.max(0), "availableReplicas": live.max(0)}});
        // Patched only when it changed.
        let have = &raw["status"];
        if ["replicas", "readyReplicas", "availableReplicas"].iter().all(|k| have[*k] == status["status"][*k]) {
            continue;
        }
        let _ = Api::<MachineSet>::namespaced(client.clone(), &sns)
            .patch_status(
                set.metadata.name.as_deref().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(status),
            )
            .await;
    }
    Ok(())
}

async fn create_machine(
    client: &Client,
    set: &MachineSet,
    raw: &serde_json::Value,
    ns: &str,
) -> Result<(), kube::Error> {
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let mut labels = raw.pointer("/spec/template/metadata/labels").cloned().unwrap_or(json!({}));
    if !labels.is_object() {
        labels = json!({});
    }
    let spec = raw.pointer("/spec/template/spec").cloned().unwrap_or(json!({}));
    let suffix: String = (0..5).map(|_| (b'a' + rand::random::<u8>() % 26) as char).collect();
    let obj: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {
            "name": format!("{set_name}-{suffix}"), "namespace": ns, "labels": labels,
            "annotations": {MACHINE_PRIORITY: "3"},
            "finalizers": [MACHINE_FINALIZER],
            "ownerReferences": [{"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
                "name": set_name, "uid": set.metadata.uid.clone().unwrap_or_default(), "controller": true}]
        },
        "spec": spec
    }))
    .map_err(|e| kube::Error::Service(e.to_string().into()))?;
    let api: Api<Machine> = Api::namespaced(client.clone(), ns);
    let created = api.create(&PostParams::default(), &obj).await?;
    set_phase(
        &api,
        created.metadata.name.as_deref().unwrap_or_default(),
        "Pending",
        "Create",
        "Creating machine on cloud provider",
        "Processing",
    )
    .await;
    Ok(())
}

async fn set_phase(api: &Api<Machine>, name: &str, phase: &str, op: &str, description: &str, state: &str) {
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let status = json!({"status": {
        "currentStatus": {"phase": phase, "lastUpdateTime": now},
        "lastOperation": {"type": op, "state": state, "description": description, "lastUpdateTime": now}
    }});
    let _ = api.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await;
}

/// The Node of Machine `ns/machine` (in `clients.control`) joins `clients.target` and becomes Ready; the Machine
/// gets its `node` label and phase `Running`.
pub(crate) async fn join_node_in(clients: &McmClients, ns: &str, machine: &str) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(clients.target.clone());
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    if nodes.get_opt(machine).await?.is_none() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": machine, "labels": {NODE_MACHINE_NAME_LABEL: machine, "kubernetes.io/hostname": machine}},
            "spec": {"providerID": format!("playground:///{ns}/{machine}")}
        }))
        .map_err(|e| kube::Error::Service(e.to_string().into()))?;
        nodes.create(&PostParams::default(), &node).await?;
    }
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
    nodes.patch_status(machine, &PatchParams::default(), &Patch::Merge(status)).await?;
    let machines: Api<Machine> = Api::namespaced(clients.control.clone(), ns);
    machines
        .patch(
            machine,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {MACHINE_NODE_LABEL: machine}}})),
        )
        .await?;
    set_phase(&machines, machine, "Running", "Create", "Machine joined the cluster", "Successful").await;
    Ok(())
}

async fn delete_machine(
    clients: &McmClients,
    opts: &McmOptions,
    m: &Machine,
    ns: &str,
    name: &str,
) -> Result<(), kube::Error> {
    let machines: Api<Machine> = Api::namespaced(clients.control.clone(), ns);
    let target = &clients.target;
    let nodes: Api<Node> = Api::all(target.clone());
    let force =
        m.metadata.labels.as_ref().and_then(|l| l.get(MACHINE_FORCE_DELETION)).map(String::as_str) == Some("True");
    if let Some(node) = m.node_name() {
        let pods: Vec<Pod> = Api::<Pod>::all(target.clone())
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await?
            .items
            .into_iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .collect();
        // The drain cordons the node first (`RunCordonOrUncordon`, `pkg/util/provider/drain/drain.go`).
        match nodes.patch(node, &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}}))).await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
        if !force {
            set_phase(&machines, name, "Terminating", "Delete", &format!("Draining node {node}"), "Processing").await;
            let mut blocked = Vec::new();
            for p in &pods {
                if p.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let pns = p.metadata.namespace.as_deref().unwrap_or_default();
                let pname = p.metadata.name.as_deref().unwrap_or_default();
                match Api::<Pod>::namespaced(target.clone(), pns).evict(pname, &EvictParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 429 => blocked.push(format!("{pns}/{pname}")),
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            if !blocked.is_empty() {
                let why = format!(
                    "Drain failed due to PodDisruptionBudget violation for pods {}; retrying",
                    blocked.join(", ")
                );
                set_phase(&machines, name, "Terminating", "Delete", &why, "Failed").await;
                return Ok(());
            }
        } else {
            set_phase(
                &machines,
                name,
                "Terminating",
                "Delete",
                &format!("Force deleting machine; skipping drain of node {node}"),
                "Processing",
            )
            .await;
        }
        // Whatever is left (forced, or evicted but not yet gone) goes with the node.
        for p in &pods {
            let pns = p.metadata.namespace.as_deref().unwrap_or_default();
            let pname = p.metadata.name.as_deref().unwrap_or_default();
            match Api::<Pod>::namespaced(target.clone(), pns)
                .delete(pname, &DeleteParams::default().grace_period(0))
                .await
            {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => return Err(e),
            }
        }
        // v0.61.0+: MCM's own finalizer comes off the Node before it is deleted (`deleteNodeObject`).
        if opts.version.node_finalizer()
            && let Some(n) = nodes.get_opt(node).await?
            && let Some(fins) = n.metadata.finalizers.as_ref().filter(|f| f.iter().any(|f| f == MCM_NODE_FINALIZER))
        {
            let rest: Vec<&String> = fins.iter().filter(|f| *f != MCM_NODE_FINALIZER).collect();
            nodes
                .patch(node, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": rest}})))
                .await?;
        }
        match nodes.delete(node, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let fins: Vec<String> =
        m.metadata.finalizers.clone().unwrap_or_default().into_iter().filter(|f| f != MACHINE_FINALIZER).collect();
    match machines.patch(name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": fins}}))).await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}
