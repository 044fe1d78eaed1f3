//! Deleting a Machine the way MCM expects it (MCM `docs/faq.md`, "How can I force delete a machine?" and "How to
//! delete machine object immediately if I don't have access to it?"): label it `force-deletion: "True"` to skip
//! the drain, then delete it. Without access to Machines, through the Node, as the MCM release on the Node asks:
//!
//! - the Node carries MCM's finalizer `node.machine.sapcloud.io/machine-controller` (MCM v0.61.0+, added to every
//!   Node backed by a Machine by `reconcileClusterNodeKey` in `pkg/util/provider/machinecontroller/node.go`): delete
//!   the Node; MCM deletes its Machine (`triggerMachineDeletion`, same file), drains and replaces it. The Node
//!   annotation is not written: v0.61.0 stopped reading it on Nodes (#1055).
//! - no such finalizer (MCM up to v0.60.x): annotate the Node `node.machine.sapcloud.io/trigger-deletion-by-mcm:
//!   "true"`, which those releases read (`updateNodeToMachine`, `machinecontroller/machine.go` at v0.60.0);
//!   deleting the Node there starts the replacement only after the machine health timeout (faq at v0.60.0).
//!
//! Machines may live in another cluster than Nodes (MCM's control and target clusters): [`MachineAccess`] is
//! where they are read and written. Before anything is changed, [`inspect`] works out what runs on the node so the
//! caller can refuse a deletion that would cost an Etcd its quorum.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams};
use serde::Serialize;

use super::impact::{NodeImpact, machine_for_node, node_impact, node_of};
use crate::api::names::{
    MACHINE_FORCE_DELETION, MCM_NODE_FINALIZER, NODE_NOT_MANAGED_BY_MCM, NODE_TRIGGER_DELETION_BY_MCM,
};
use crate::api::{Etcd, Machine, patch};
use crate::kube::error::{ClusterError, Subject};
use crate::kube::target::{UsageError, validate_dns_subdomain};

/// Errors of machine operations.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    /// Talking to the cluster failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// Removing the node would cost an Etcd its quorum; nothing was changed.
    #[error("{0}; nothing was changed (pass --force and confirm to delete anyway)")]
    WouldLoseQuorum(String),
    /// The Node is not managed by MCM, so no MCM switch replaces it; nothing was changed.
    #[error(
        "node {0} is annotated {NODE_NOT_MANAGED_BY_MCM}: machine-controller-manager does not replace it; nothing was changed"
    )]
    NotManagedByMcm(String),
}

/// The cluster holding the Machines (MCM's control cluster): a kubeconfig and/or context, or the current cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineClusterRef {
    /// Kubeconfig file (absolute), `None` for the usual kubeconfig lookup.
    pub kubeconfig: Option<PathBuf>,
    /// Context, `None` for the kubeconfig's current context.
    pub context: Option<String>,
}

impl MachineClusterRef {
    /// Whether a machine cluster other than the current one is named.
    pub fn is_set(&self) -> bool {
        self.kubeconfig.is_some() || self.context.is_some()
    }

    /// The kubectl flags that reach the machine cluster (empty when it is the current one), quoted for a shell.
    pub fn kubectl_flags(&self) -> String {
        self.flags("--kubeconfig", "--context")
    }

    /// The druidctl flags that name it again (`--machine-kubeconfig P --machine-context C`), quoted for a shell.
    pub fn druidctl_flags(&self) -> String {
        self.flags("--machine-kubeconfig", "--machine-context")
    }

    fn flags(&self, kubeconfig: &str, context: &str) -> String {
        let mut s = String::new();
        if let Some(k) = &self.kubeconfig {
            s.push_str(&format!(" {kubeconfig} {}", shell_word(&k.display().to_string())));
        }
        if let Some(c) = &self.context {
            s.push_str(&format!(" {context} {}", shell_word(c)));
        }
        s
    }

    /// Connects to it, or hands back `current` when none is named. `request_timeout` as for the current cluster.
    pub async fn connect(
        &self,
        current: &Client,
        request_timeout: Option<Duration>,
    ) -> Result<MachineAccess, ClusterError> {
        if !self.is_set() {
            return Ok(MachineAccess { client: current.clone(), separate: None, namespace: None });
        }
        let cluster = crate::kube::config::connect(&crate::kube::AccessOptions {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            namespace: None,
            request_timeout,
            prefer_in_cluster: false,
            slow_answer: None,
        })
        .await?;
        let name = match (&cluster.context, &self.kubeconfig) {
            (Some(c), _) => format!("machine cluster (context {c})"),
            (None, Some(k)) => format!("machine cluster ({})", k.display()),
            (None, None) => "machine cluster".to_string(),
        };
        Ok(MachineAccess { client: cluster.client, separate: Some(name), namespace: Some(cluster.namespace) })
    }
}

/// `w` as one POSIX shell word: as is when it holds only safe characters, else in single quotes.
pub fn shell_word(w: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_-./:=@%+,".contains(c);
    if !w.is_empty() && w.chars().all(safe) { w.to_string() } else { format!("'{}'", w.replace('\'', "'\\''")) }
}

/// Where Machines are read and written.
#[derive(Clone)]
pub struct MachineAccess {
    /// Client of the cluster holding the Machines.
    pub client: Client,
    /// `Some("machine cluster (context …)")` when Machines are in another cluster than Nodes (named explicitly:
    /// errors reading Machines there are reported, not taken for "no access").
    pub separate: Option<String>,
    /// The namespace of that cluster's context (the default namespace of the Machines).
    pub namespace: Option<String>,
}

impl MachineAccess {
    /// Machines in the same cluster as Nodes.
    pub fn same(client: &Client) -> MachineAccess {
        MachineAccess { client: client.clone(), separate: None, namespace: None }
    }
}

/// What to delete: a Machine by name, or the Machine behind a Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineTarget {
    /// Machine name (in the namespace of the operation).
    Machine(String),
    /// Node name.
    Node(String),
}

impl MachineTarget {
    /// The target of `MACHINE` / `--node NODE` flags (the machine wins when both are given).
    pub fn from_flags(machine: Option<String>, node: Option<String>) -> Option<MachineTarget> {
        match (machine, node) {
            (Some(m), _) => Some(MachineTarget::Machine(m)),
            (None, Some(n)) => Some(MachineTarget::Node(n)),
            (None, None) => None,
        }
    }

    /// The machine or node name.
    pub fn name(&self) -> &str {
        match self {
            MachineTarget::Machine(n) | MachineTarget::Node(n) => n,
        }
    }

    /// Refuses a name that cannot be a Kubernetes object name, before anything touches the cluster.
    pub fn validate(&self) -> Result<(), UsageError> {
        let raw = self.name();
        validate_dns_subdomain(raw).map_err(|e| UsageError(format!("invalid name {raw:?}: {e}")))
    }
}

/// How the deletion is requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DeletionMethod {
    /// Delete the Machine; MCM drains the node first (evictions respect PDBs).
    DeleteMachine,
    /// Label the Machine `force-deletion: "True"`, then delete it: MCM skips the drain.
    ForceDeleteMachine,
    /// Annotate the Node `trigger-deletion-by-mcm: "true"` (no access to its Machine; MCM up to v0.60).
    TriggerDeletionByMcm,
    /// Delete the Node: MCM v0.61+ deletes its Machine (no access to the Machine).
    DeleteNode,
}

/// The resolved target and its blast radius, before anything is changed.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeletionPlan {
    /// Namespace of the Machine.
    pub namespace: String,
    /// The Machine, when it could be read.
    pub machine: Option<String>,
    /// Its Node, when it has joined.
    pub node: Option<String>,
    /// The cluster holding the Machine when it is not the Nodes' cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_cluster: Option<String>,
    /// How the deletion will be requested.
    pub method: DeletionMethod,
    /// Why this method (what was detected about MCM), for people.
    pub reason: String,
    /// What runs on the node.
    pub impact: NodeImpact,
    /// Nodes that existed before (to recognise the replacement).
    #[serde(skip)]
    pub nodes_before: BTreeSet<String>,
}

/// Options of [`delete`].
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// Skip the drain (`force-deletion` label).
    pub force: bool,
    /// Delete even when an Etcd would lose quorum (the caller has confirmed).
    pub allow_quorum_loss: bool,
    /// Wait for the replacement node to be Ready, at most this long.
    pub wait: Option<Duration>,
}

/// What [`delete`] did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeletionOutcome {
    /// The plan that was carried out.
    pub plan: DeletionPlan,
    /// The replacement node, when waited for.
    pub replacement_node: Option<String>,
    /// One sentence for people.
    pub message: String,
}

fn kube_err(e: kube::Error, kind: &str, name: &str, ns: &str) -> ClusterError {
    ClusterError::from_kube(e, &Subject { kind, name, namespace: ns })
}

async fn list_or_empty<K>(api: Api<K>, kind: &str) -> Result<Vec<K>, ClusterError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.list(&ListParams::default()).await {
        Ok(l) => Ok(l.items),
        Err(e) => match kube_err(e, kind, "", "") {
            // No Etcd CRD or no permission to list: nothing of that kind to protect that we could see.
            ClusterError::ApiMissing { .. } => Ok(Vec::new()),
            other => Err(other),
        },
    }
}

/// Resolves `target` (the Machine in namespace `ns` of `machines`, the Node in `client`'s cluster) and works out
/// what removing its node would do and how MCM is asked to. Changes nothing.
pub async fn inspect(
    client: &Client,
    machines_at: &MachineAccess,
    ns: &str,
    target: &MachineTarget,
    force: bool,
) -> Result<DeletionPlan, MachineError> {
    let machines: Api<Machine> = Api::namespaced(machines_at.client.clone(), ns);
    let nodes: Api<Node> = Api::all(client.clone());
    let (machine, node, node_obj) = match target {
        MachineTarget::Machine(name) => {
            let m = machines.get(name).await.map_err(|e| kube_err(e, "machine", name, ns))?;
            (Some(name.clone()), node_of(&m), None)
        }
        MachineTarget::Node(name) => {
            let n = nodes.get(name).await.map_err(|e| kube_err(e, "node", name, ""))?;
            // Without access to Machines (or none here backs the node), MCM is asked through the Node. A machine
            // cluster named explicitly must answer.
            let all = match machines.list(&ListParams::default()).await {
                Ok(l) => l.items,
                Err(e) => match kube_err(e, "machine", "", ns) {
                    ClusterError::Forbidden(_) | ClusterError::ApiMissing { .. } if machines_at.separate.is_none() => {
                        Vec::new()
                    }
                    other => return Err(other.into()),
                },
            };
            let m = machine_for_node(name, Some(&n), &all).and_then(|m| m.metadata.name.clone());
            (m, Some(name.clone()), Some(n))
        }
    };
    let (method, reason) = match (&machine, force) {
        (Some(_), true) => (DeletionMethod::ForceDeleteMachine, "the machine is readable: it is deleted".to_string()),
        (Some(_), false) => (DeletionMethod::DeleteMachine, "the machine is readable: it is deleted".to_string()),
        (None, _) => {
            let n = node_obj.as_ref().expect("a node target without a machine");
            let name = node.clone().unwrap_or_default();
            if n.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(NODE_NOT_MANAGED_BY_MCM)) {
                return Err(MachineError::NotManagedByMcm(name));
            }
            if n.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == MCM_NODE_FINALIZER)) {
                (
                    DeletionMethod::DeleteNode,
                    format!(
                        "node {name} carries finalizer {MCM_NODE_FINALIZER} (machine-controller-manager v0.61 or later): deleting the node makes MCM delete its machine"
                    ),
                )
            } else {
                (
                    DeletionMethod::TriggerDeletionByMcm,
                    format!(
                        "node {name} lacks finalizer {MCM_NODE_FINALIZER} (machine-controller-manager v0.60 or earlier): the node annotation {NODE_TRIGGER_DELETION_BY_MCM} asks MCM"
                    ),
                )
            }
        }
    };
    let reason = if force && machine.is_none() {
        format!(
            "{reason}; --force cannot skip the drain without access to the machine (name the cluster holding the Machines with --machine-kubeconfig or --machine-context)"
        )
    } else {
        reason
    };
    let nodes_before: BTreeSet<String> =
        list_or_empty(nodes, "node").await?.into_iter().filter_map(|n| n.metadata.name).collect();
    let impact = match &node {
        Some(node) => {
            let pods = list_or_empty(Api::<Pod>::all(client.clone()), "pod").await?;
            let pdbs = list_or_empty(Api::<PodDisruptionBudget>::all(client.clone()), "poddisruptionbudget").await?;
            let etcds = list_or_empty(Api::<Etcd>::all(client.clone()), "etcd").await?;
            node_impact(node, &pods, &pdbs, &etcds)
        }
        None => NodeImpact::default(),
    };
    Ok(DeletionPlan {
        namespace: ns.to_string(),
        machine,
        node,
        machine_cluster: machines_at.separate.clone(),
        method,
        reason,
        impact,
        nodes_before,
    })
}

/// Carries out `plan`: refuses when an Etcd would lose quorum (unless `opts.allow_quorum_loss`), then asks MCM
/// to delete the machine; with `opts.wait`, waits until a new node is Ready.
pub async fn delete(
    client: &Client,
    machines_at: &MachineAccess,
    plan: DeletionPlan,
    opts: &DeleteOptions,
) -> Result<DeletionOutcome, MachineError> {
    if let Some(why) = plan.impact.refusal()
        && !opts.allow_quorum_loss
    {
        return Err(MachineError::WouldLoseQuorum(why));
    }
    let ns = plan.namespace.clone();
    let machines: Api<Machine> = Api::namespaced(machines_at.client.clone(), &ns);
    let at = machines_at.separate.as_deref().map(|c| format!(" in the {c}")).unwrap_or_default();
    let message = match (&plan.method, &plan.machine, &plan.node) {
        (DeletionMethod::TriggerDeletionByMcm, _, Some(node)) => {
            let nodes: Api<Node> = Api::all(client.clone());
            nodes
                .patch(node, &patch::params(), &patch::set_annotation(NODE_TRIGGER_DELETION_BY_MCM, "true"))
                .await
                .map_err(|e| kube_err(e, "node", node, ""))?;
            format!(
                "node {node} annotated {NODE_TRIGGER_DELETION_BY_MCM}=true; machine-controller-manager (v0.60 or earlier) replaces its machine"
            )
        }
        (DeletionMethod::DeleteNode, _, Some(node)) => {
            let nodes: Api<Node> = Api::all(client.clone());
            match nodes.delete(node, &DeleteParams::default()).await {
                Ok(_) => {}
                // Already gone: MCM has taken it from here.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(kube_err(e, "node", node, "").into()),
            }
            format!(
                "node {node} deleted; machine-controller-manager (v0.61 or later) deletes its machine, drains the node and creates a replacement"
            )
        }
        (method, Some(m), _) => {
            if *method == DeletionMethod::ForceDeleteMachine {
                machines
                    .patch(m, &patch::params(), &patch::set_label(MACHINE_FORCE_DELETION, "True"))
                    .await
                    .map_err(|e| kube_err(e, "machine", m, &ns))?;
            }
            machines.delete(m, &DeleteParams::default()).await.map_err(|e| kube_err(e, "machine", m, &ns))?;
            if *method == DeletionMethod::ForceDeleteMachine {
                format!("machine {ns}/{m} deleted{at} without drain (force-deletion)")
            } else {
                format!("machine {ns}/{m} deleted{at}; machine-controller-manager drains its node first")
            }
        }
        _ => return Err(ClusterError::Invalid("neither a machine nor a node to delete".into()).into()),
    };
    let mut outcome = DeletionOutcome { plan, replacement_node: None, message };
    if let Some(timeout) = opts.wait {
        let node = wait_for_replacement(client, &outcome.plan, timeout).await?;
        outcome.message = format!("{}; replacement node {node} is Ready", outcome.message);
        outcome.replacement_node = Some(node);
    }
    Ok(outcome)
}

/// Whether `node` reports `Ready=True`.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Waits until the old node is gone and a node that did not exist before is Ready; returns its name.
pub async fn wait_for_replacement(
    client: &Client,
    plan: &DeletionPlan,
    timeout: Duration,
) -> Result<String, ClusterError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let poll = async {
        loop {
            let list = nodes.list(&ListParams::default()).await.map_err(|e| kube_err(e, "node", "", ""))?.items;
            let old_gone =
                plan.node.as_ref().is_none_or(|old| !list.iter().any(|n| n.metadata.name.as_ref() == Some(old)));
            let new = list.iter().find(|n| {
                n.metadata.name.as_ref().is_some_and(|name| !plan.nodes_before.contains(name)) && node_ready(n)
            });
            if old_gone && let Some(n) = new {
                return Ok::<_, ClusterError>(n.metadata.name.clone().unwrap_or_default());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let what = format!(
        "for the replacement of {} to be Ready",
        plan.node.as_deref().or(plan.machine.as_deref()).unwrap_or("the machine")
    );
    match tokio::time::timeout(timeout, poll).await {
        Ok(r) => r,
        Err(_) => Err(ClusterError::Timeout { after: timeout, what }),
    }
}

impl DeletionPlan {
    /// Lines for people: what backs what, what runs on the node, which Etcds and PDBs it concerns.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        let at = self.machine_cluster.as_deref().map(|c| format!(" (in the {c})")).unwrap_or_default();
        match (&self.machine, &self.node) {
            (Some(m), Some(n)) => out.push(format!("machine {}/{m}{at} backs node {n}", self.namespace)),
            (Some(m), None) => out.push(format!("machine {}/{m}{at} has no node", self.namespace)),
            (None, Some(n)) => {
                out.push(format!(
                    "node {n}: its machine is not readable; asking machine-controller-manager through the node"
                ));
                out.push(self.reason.clone());
            }
            (None, None) => {}
        }
        if let Some(n) = &self.node {
            if self.impact.pods.is_empty() {
                out.push(format!("no pods run on node {n}"));
            } else {
                out.push(format!("pods on node {n}: {}", self.impact.pods.join(", ")));
            }
        }
        for e in &self.impact.etcds {
            out.push(format!(
                "etcd {}/{}: {} on this node; {} of {} members ready now, {} after (quorum needs {}){}",
                e.namespace,
                e.etcd,
                e.members_on_node.join(", "),
                e.before.ready,
                e.before.members,
                e.after.ready,
                e.before.needed,
                if e.loses_quorum { " — would LOSE QUORUM" } else { "" }
            ));
        }
        for p in &self.impact.blocking_pdbs {
            let effect = if self.method == DeletionMethod::ForceDeleteMachine {
                "is bypassed by force-deletion"
            } else {
                "would block the drain"
            };
            out.push(format!(
                "PodDisruptionBudget {}/{} ({} disruptions allowed, covers {}) {effect}",
                p.namespace,
                p.name,
                p.disruptions_allowed,
                p.pods.join(", ")
            ));
        }
        out
    }
}
