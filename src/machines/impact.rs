//! The blast radius of removing a node, as plain functions over plain objects: which Machine backs a Node,
//! which etcd members run there and whether losing them costs their Etcd its quorum, and which
//! PodDisruptionBudgets would block a drain.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Serialize;

use crate::api::names::MACHINE_NODE_LABEL;
use crate::api::{Etcd, Machine};
use crate::health::quorum::Quorum;

pub use druid_api::names::NODE_MACHINE_NAME_LABEL;

/// The Machine backing `node`: the one whose `node` label names it, else the one the Node's
/// `node.gardener.cloud/machine-name` label names.
pub fn machine_for_node<'a>(node: &str, node_obj: Option<&Node>, machines: &'a [Machine]) -> Option<&'a Machine> {
    machines.iter().find(|m| m.node_name() == Some(node)).or_else(|| {
        let want = node_obj?.metadata.labels.as_ref()?.get(NODE_MACHINE_NAME_LABEL)?;
        machines.iter().find(|m| m.metadata.name.as_deref() == Some(want.as_str()))
    })
}

/// The Node name of `machine` (MCM's `node` label), if it has joined.
pub fn node_of(machine: &Machine) -> Option<String> {
    machine.metadata.labels.as_ref()?.get(MACHINE_NODE_LABEL).cloned()
}

/// What removing one Etcd's members on the node does to its quorum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EtcdImpact {
    /// Namespace.
    pub namespace: String,
    /// Etcd name.
    pub etcd: String,
    /// Member pods on the node.
    pub members_on_node: Vec<String>,
    /// Quorum now.
    pub before: Quorum,
    /// Quorum while those members are gone.
    pub after: Quorum,
    /// The Etcd is quorate now and would not be once the node is gone.
    pub loses_quorum: bool,
}

/// A PodDisruptionBudget that would block draining the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PdbBlock {
    /// Namespace.
    pub namespace: String,
    /// PDB name.
    pub name: String,
    /// Pods on the node it covers.
    pub pods: Vec<String>,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
}

/// What runs on a node and what removing it would cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeImpact {
    /// Node.
    pub node: String,
    /// `namespace/pod` of every pod on the node.
    pub pods: Vec<String>,
    /// Etcds with members on the node.
    pub etcds: Vec<EtcdImpact>,
    /// PDBs that would block a drain (evictions beyond `disruptionsAllowed`).
    pub blocking_pdbs: Vec<PdbBlock>,
}

impl NodeImpact {
    /// Etcds that would lose quorum.
    pub fn quorum_losses(&self) -> Vec<&EtcdImpact> {
        self.etcds.iter().filter(|e| e.loses_quorum).collect()
    }
    /// One sentence per Etcd that would lose quorum (empty when none would).
    pub fn refusal(&self) -> Option<String> {
        let losses = self.quorum_losses();
        if losses.is_empty() {
            return None;
        }
        let parts: Vec<String> = losses
            .iter()
            .map(|e| {
                format!(
                    "etcd {}/{} would lose quorum ({} of {} members ready now, {} needed; {} on this node)",
                    e.namespace,
                    e.etcd,
                    e.before.ready,
                    e.before.members,
                    e.before.needed,
                    e.members_on_node.join(", ")
                )
            })
            .collect();
        Some(format!("removing node {} would cost quorum: {}", self.node, parts.join("; ")))
    }
}

/// Whether `pod` is Ready (condition `Ready=True`) and not being deleted.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether `selector` selects `labels` (matchLabels and matchExpressions; an empty selector selects all).
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    if let Some(ml) = &selector.match_labels
        && !ml.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    selector.match_expressions.as_deref().unwrap_or_default().iter().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => false,
        }
    })
}

/// The blast radius of removing `node`: `pods`, `pdbs` and `etcds` may span namespaces.
pub fn node_impact(node: &str, pods: &[Pod], pdbs: &[PodDisruptionBudget], etcds: &[Etcd]) -> NodeImpact {
    let on_node: Vec<&Pod> =
        pods.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)).collect();
    let key = |p: &Pod| {
        format!(
            "{}/{}",
            p.metadata.namespace.as_deref().unwrap_or_default(),
            p.metadata.name.as_deref().unwrap_or_default()
        )
    };
    let mut impact =
        NodeImpact { node: node.to_string(), pods: on_node.iter().map(|p| key(p)).collect(), ..Default::default() };
    impact.pods.sort();

    for etcd in etcds {
        let ns = etcd.metadata.namespace.clone().unwrap_or_default();
        let name = etcd.metadata.name.clone().unwrap_or_default();
        let names = etcd.managed_names();
        let members = etcd.spec.replicas.max(0) as u32;
        let member_pods: Vec<String> = (0..members).map(|i| names.pod(i)).collect();
        let pod = |n: &str| {
            pods.iter()
                .find(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()) && p.metadata.name.as_deref() == Some(n))
        };
        let mine: Vec<String> = member_pods
            .iter()
            .filter(|n| pod(n).is_some_and(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)))
            .cloned()
            .collect();
        if mine.is_empty() {
            continue;
        }
        let ready = member_pods.iter().filter(|n| pod(n).is_some_and(pod_ready)).count() as u32;
        let ready_here = mine.iter().filter(|n| pod(n).is_some_and(pod_ready)).count() as u32;
        let before = Quorum::of(members, ready);
        let after = Quorum::of(members, ready - ready_here);
        impact.etcds.push(EtcdImpact {
            namespace: ns,
            etcd: name,
            members_on_node: mine,
            loses_quorum: before.quorate && !after.quorate,
            before,
            after,
        });
    }

    for pdb in pdbs {
        let ns = pdb.metadata.namespace.as_deref();
        let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else { continue };
        let covered: Vec<String> = on_node
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == ns)
            .filter(|p| selector_matches(selector, p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())))
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        if covered.is_empty() {
            continue;
        }
        let allowed = pdb.status.as_ref().map(|s| s.disruptions_allowed).unwrap_or(0);
        if (covered.len() as i32) > allowed {
            impact.blocking_pdbs.push(PdbBlock {
                namespace: ns.unwrap_or_default().to_string(),
                name: pdb.metadata.name.clone().unwrap_or_default(),
                pods: covered,
                disruptions_allowed: allowed,
            });
        }
    }
    impact
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ns: &str, name: &str, node: &str, ready: bool, labels: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"nodeName": node, "containers": []},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .unwrap()
    }

    fn etcd(ns: &str, name: &str, replicas: i32) -> Etcd {
        serde_json::from_value(json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "labels": {}, "etcd": {}, "backup": {}}
        }))
        .unwrap()
    }

    fn pdb(ns: &str, name: &str, etcd: &str, allowed: i32) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app.kubernetes.io/part-of": etcd}}},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3}
        }))
        .unwrap()
    }

    fn machine(name: &str, node: Option<&str>) -> Machine {
        let labels = node.map(|n| json!({"node": n})).unwrap_or(json!({}));
        serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": name, "namespace": "shoot", "labels": labels}, "spec": {}
        }))
        .unwrap()
    }

    fn three_members(ready: [bool; 3]) -> Vec<Pod> {
        let l = json!({"app.kubernetes.io/part-of": "etcd-main"});
        vec![
            pod("shoot", "etcd-main-0", "node-a", ready[0], l.clone()),
            pod("shoot", "etcd-main-1", "node-b", ready[1], l.clone()),
            pod("shoot", "etcd-main-2", "node-c", ready[2], l),
            pod("shoot", "web-0", "node-a", true, json!({"app": "web"})),
        ]
    }

    #[test]
    fn removing_one_member_of_a_healthy_three_member_etcd_keeps_quorum() {
        let i = node_impact("node-a", &three_members([true; 3]), &[], &[etcd("shoot", "etcd-main", 3)]);
        assert_eq!(i.pods, ["shoot/etcd-main-0", "shoot/web-0"]);
        assert_eq!(i.etcds.len(), 1);
        assert_eq!(i.etcds[0].members_on_node, ["etcd-main-0"]);
        assert_eq!(i.etcds[0].after.ready, 2);
        assert!(!i.etcds[0].loses_quorum);
        assert_eq!(i.refusal(), None);
    }

    #[test]
    fn removing_a_member_while_another_is_down_costs_quorum() {
        let i = node_impact("node-a", &three_members([true, false, true]), &[], &[etcd("shoot", "etcd-main", 3)]);
        assert!(i.etcds[0].loses_quorum);
        let why = i.refusal().unwrap();
        assert!(
            why.contains("etcd shoot/etcd-main would lose quorum (2 of 3 members ready now, 2 needed; etcd-main-0"),
            "{why}"
        );
    }

    #[test]
    fn a_node_without_members_of_an_etcd_does_not_concern_it() {
        let i = node_impact("node-z", &three_members([true; 3]), &[], &[etcd("shoot", "etcd-main", 3)]);
        assert!(i.etcds.is_empty() && i.pods.is_empty());
    }

    #[test]
    fn pdb_with_no_disruptions_left_blocks_the_drain_and_one_with_room_does_not() {
        let pods = three_members([true; 3]);
        let i = node_impact("node-a", &pods, &[pdb("shoot", "etcd-main", "etcd-main", 0)], &[]);
        assert_eq!(i.blocking_pdbs.len(), 1);
        assert_eq!(i.blocking_pdbs[0].pods, ["etcd-main-0"]);
        let i = node_impact("node-a", &pods, &[pdb("shoot", "etcd-main", "etcd-main", 1)], &[]);
        assert!(i.blocking_pdbs.is_empty());
        let i = node_impact("node-a", &pods, &[pdb("other", "etcd-main", "etcd-main", 0)], &[]);
        assert!(i.blocking_pdbs.is_empty(), "a PDB only covers pods of its namespace");
    }

    #[test]
    fn machine_is_found_by_its_node_label_or_by_the_nodes_machine_name_label() {
        let machines = vec![machine("m-1", Some("node-a")), machine("m-2", None)];
        assert_eq!(machine_for_node("node-a", None, &machines).unwrap().metadata.name.as_deref(), Some("m-1"));
        let node: Node =
            serde_json::from_value(json!({"metadata": {"name": "node-b", "labels": {NODE_MACHINE_NAME_LABEL: "m-2"}}}))
                .unwrap();
        assert_eq!(machine_for_node("node-b", Some(&node), &machines).unwrap().metadata.name.as_deref(), Some("m-2"));
        assert!(machine_for_node("node-c", None, &machines).is_none());
    }

    #[test]
    fn selector_expressions() {
        let labels: BTreeMap<String, String> = [("a".to_string(), "1".to_string())].into();
        let sel = |e: serde_json::Value| -> LabelSelector {
            serde_json::from_value(json!({"matchExpressions": [e]})).unwrap()
        };
        assert!(selector_matches(&sel(json!({"key": "a", "operator": "In", "values": ["1"]})), &labels));
        assert!(!selector_matches(&sel(json!({"key": "a", "operator": "NotIn", "values": ["1"]})), &labels));
        assert!(selector_matches(&sel(json!({"key": "b", "operator": "DoesNotExist"})), &labels));
        assert!(selector_matches(&LabelSelector::default(), &labels));
    }
}
