//! Deleting a Machine the way MCM expects it (seeds/004 ~2217-2250): label it `force-deletion: "True"` to skip
//! the drain, then delete it; or, without access to Machines, annotate its Node
//! `node.machine.sapcloud.io/trigger-deletion-by-mcm: "true"`. Before anything is changed, [`inspect`] works
//! out what runs on the node so the caller can refuse a deletion that would cost an Etcd its quorum.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams};
use serde::Serialize;

use super::impact::{NodeImpact, machine_for_node, node_impact, node_of};
use crate::api::names::{MACHINE_FORCE_DELETION, NODE_TRIGGER_DELETION_BY_MCM};
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
    /// Annotate the Node `trigger-deletion-by-mcm: "true"` (no access to its Machine).
    TriggerDeletionByMcm,
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
    /// How the deletion will be requested.
    pub method: DeletionMethod,
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

/// Resolves `target` in namespace `ns` and works out what removing its node would do. Changes nothing.
pub async fn inspect(
    client: &Client,
    ns: &str,
    target: &MachineTarget,
    force: bool,
) -> Result<DeletionPlan, MachineError> {
    let machines: Api<Machine> = Api::namespaced(client.clone(), ns);
    let nodes: Api<Node> = Api::all(client.clone());
    let (machine, node) = match target {
        MachineTarget::Machine(name) => {
            let m = machines.get(name).await.map_err(|e| kube_err(e, "machine", name, ns))?;
            (Some(name.clone()), node_of(&m))
        }
        MachineTarget::Node(name) => {
            let n = nodes.get(name).await.map_err(|e| kube_err(e, "node", name, ""))?;
            // Without access to Machines (or none here backs the node), MCM's node annotation is the way.
            let all = match machines.list(&ListParams::default()).await {
                Ok(l) => l.items,
                Err(e) => match kube_err(e, "machine", "", ns) {
                    ClusterError::Forbidden(_) | ClusterError::ApiMissing { .. } => Vec::new(),
                    other => return Err(other.into()),
                },
            };
            (machine_for_node(name, Some(&n), &all).and_then(|m| m.metadata.name.clone()), Some(name.clone()))
        }
    };
    let method = match (&machine, force) {
        (None, _) => DeletionMethod::TriggerDeletionByMcm,
        (Some(_), true) => DeletionMethod::ForceDeleteMachine,
        (Some(_), false) => DeletionMethod::DeleteMachine,
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
    Ok(DeletionPlan { namespace: ns.to_string(), machine, node, method, impact, nodes_before })
}

/// Carries out `plan`: refuses when an Etcd would lose quorum (unless `opts.allow_quorum_loss`), then asks MCM
/// to delete the machine; with `opts.wait`, waits until a new node is Ready.
pub async fn delete(
    client: &Client,
    plan: DeletionPlan,
    opts: &DeleteOptions,
) -> Result<DeletionOutcome, MachineError> {
    if let Some(why) = plan.impact.refusal()
        && !opts.allow_quorum_loss
    {
        return Err(MachineError::WouldLoseQuorum(why));
    }
    let ns = plan.namespace.clone();
    let machines: Api<Machine> = Api::namespaced(client.clone(), &ns);
    let message = match (&plan.method, &plan.machine, &plan.node) {
        (DeletionMethod::TriggerDeletionByMcm, _, Some(node)) => {
            let nodes: Api<Node> = Api::all(client.clone());
            nodes
                .patch(node, &patch::params(), &patch::set_annotation(NODE_TRIGGER_DELETION_BY_MCM, "true"))
                .await
                .map_err(|e| kube_err(e, "node", node, ""))?;
            format!(
                "node {node} annotated {NODE_TRIGGER_DELETION_BY_MCM}=true; machine-controller-manager replaces its machine"
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
                format!("machine {ns}/{m} deleted without drain (force-deletion)")
            } else {
                format!("machine {ns}/{m} deleted; machine-controller-manager drains its node first")
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
        match (&self.machine, &self.node) {
            (Some(m), Some(n)) => out.push(format!("machine {}/{m} backs node {n}", self.namespace)),
            (Some(m), None) => out.push(format!("machine {}/{m} has no node", self.namespace)),
            (None, Some(n)) => out.push(format!(
                "node {n}: its machine is not readable here; asking machine-controller-manager through the node"
            )),
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
