//! `MachineForceDeletionTask` *(druidctl)*: replace the machine behind a node that hosts members of this Etcd —
//! blast-radius check first (refuse when an Etcd would lose quorum), then MCM's deletion switch
//! ([`crate::machines`]), then wait for the replacement node and for the Etcd's members to be ready again.
//! Config: `machine: NAME` or `node: NAME`, optional `force: bool` (skip the drain), optional `namespace`
//! (of the Machine; default: the task's), optional `machineKubeconfig: PATH` / `machineContext: NAME` (the cluster
//! holding the Machines, MCM's control cluster, when it is not this one; the path must be readable where the task
//! executes — `runbook machine-replacement` executes it in the process that started it).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use super::config::{ConfigError, Fields, parse_yaml};
use super::preconditions::{Facts, require_quorum};
use super::step::{Readiness, Step, StepContext, StepError, StepFuture};
use super::{TaskKind, TaskPlan};
use crate::api::Etcd;
use crate::api::task::types;
use crate::machines::delete::{
    DeleteOptions, MachineAccess, MachineClusterRef, MachineError, MachineTarget, delete, inspect, node_ready,
};
use crate::machines::impact::pod_ready;

/// The parsed config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineDeletionConfig {
    /// Machine or node.
    pub target: MachineTarget,
    /// Skip the drain.
    pub force: bool,
    /// Namespace of the Machine (default: the task's).
    pub namespace: Option<String>,
    /// The cluster holding the Machines (default: this one).
    pub machine_cluster: MachineClusterRef,
}

/// Parses `machine|node`, `force`, `namespace`, `machineKubeconfig`, `machineContext`.
pub fn parse_config(config: Option<&str>) -> Result<MachineDeletionConfig, ConfigError> {
    let v = parse_yaml(config)?;
    let f =
        Fields::new(&v, "config", &["machine", "node", "force", "namespace", "machineKubeconfig", "machineContext"])?;
    let target = match (f.string("machine")?, f.string("node")?) {
        (Some(m), None) => MachineTarget::Machine(m),
        (None, Some(n)) => MachineTarget::Node(n),
        (None, None) => return Err(ConfigError::Missing { path: "config.machine (or config.node)".into() }),
        (Some(_), Some(_)) => {
            return Err(ConfigError::WrongType {
                path: "config".into(),
                expected: "one of machine or node".into(),
                found: "both".into(),
            });
        }
    };
    let machine_cluster = MachineClusterRef {
        kubeconfig: f.string("machineKubeconfig")?.map(std::path::PathBuf::from),
        context: f.string("machineContext")?,
    };
    Ok(MachineDeletionConfig {
        target,
        force: f.bool("force")?.unwrap_or(false),
        namespace: f.string("namespace")?,
        machine_cluster,
    })
}

/// The config text for these settings (what `runbook machine-replacement` records in the task).
pub fn config_text(
    target: &MachineTarget,
    force: bool,
    namespace: Option<&str>,
    machine_cluster: &MachineClusterRef,
) -> String {
    let mut c = match target {
        MachineTarget::Machine(m) => format!("machine: {m}\n"),
        MachineTarget::Node(n) => format!("node: {n}\n"),
    };
    if force {
        c.push_str("force: true\n");
    }
    if let Some(ns) = namespace {
        c.push_str(&format!("namespace: {ns}\n"));
    }
    // JSON strings are YAML scalars: any path or context name survives the round trip.
    if let Some(k) = &machine_cluster.kubeconfig {
        c.push_str(&format!("machineKubeconfig: {}\n", json!(k.display().to_string())));
    }
    if let Some(ctx) = &machine_cluster.context {
        c.push_str(&format!("machineContext: {}\n", json!(ctx)));
    }
    c
}

/// The task type.
pub struct MachineForceDeletion;

impl TaskKind for MachineForceDeletion {
    fn type_name(&self) -> &'static str {
        types::MACHINE_FORCE_DELETION
    }
    fn summary(&self) -> &'static str {
        "replace the machine behind a node without costing any Etcd its quorum (config: `machine: M` or `node: N`, `force: bool`)"
    }
    fn parse(&self, config: Option<&str>) -> Result<Arc<dyn TaskPlan>, ConfigError> {
        Ok(Arc::new(parse_config(config)?))
    }
}

impl TaskPlan for MachineDeletionConfig {
    fn duplicate_key(&self) -> String {
        types::MACHINE_FORCE_DELETION.to_string()
    }
    fn preconditions(&self, facts: &Facts) -> Result<(), String> {
        // The full blast-radius check needs the cluster and runs as the first step; this one is the cheap part.
        require_quorum(facts)
    }
    fn steps(&self, _etcd: &Etcd) -> Vec<Box<dyn Step>> {
        vec![Box::new(RequestDeletion(self.clone())), Box::new(WaitReplacementNode), Box::new(WaitMembersReady)]
    }
    fn config_json(&self) -> Value {
        let (k, v) = match &self.target {
            MachineTarget::Machine(m) => ("machine", m),
            MachineTarget::Node(n) => ("node", n),
        };
        json!({k: v, "force": self.force, "namespace": self.namespace,
               "machineKubeconfig": self.machine_cluster.kubeconfig.as_ref().map(|p| p.display().to_string()),
               "machineContext": self.machine_cluster.context})
    }
}

const PLAN_KEY: &str = "machineDeletion";

struct RequestDeletion(MachineDeletionConfig);

impl Step for RequestDeletion {
    fn name(&self) -> String {
        "RequestMachineDeletion".into()
    }
    fn description(&self) -> String {
        "check what the node carries, refuse if an Etcd would lose quorum, then ask MCM to replace the machine".into()
    }
    fn destructive(&self) -> bool {
        true
    }
    fn kubectl(&self) -> Vec<String> {
        let at = self.0.machine_cluster.kubectl_flags();
        let ns = self.0.namespace.as_deref().map(|n| format!(" -n {n}")).unwrap_or_default();
        match &self.0.target {
            MachineTarget::Machine(m) if self.0.force => vec![
                format!("kubectl{at}{ns} label machine {m} force-deletion=True"),
                format!("kubectl{at}{ns} delete machine {m} --wait=false"),
            ],
            MachineTarget::Machine(m) => vec![format!("kubectl{at}{ns} delete machine {m} --wait=false")],
            MachineTarget::Node(n) => {
                let mut v = Vec::new();
                if self.0.force {
                    v.push(format!("kubectl{at}{ns} label machine -l node={n} force-deletion=True"));
                }
                v.push(format!("kubectl{at}{ns} delete machine -l node={n} --wait=false"));
                if !self.0.machine_cluster.is_set() {
                    v.push(format!(
                        "# Machines not readable: MCM v0.61+ (the node has finalizer {}): kubectl delete node {n} --wait=false",
                        crate::api::names::MCM_NODE_FINALIZER
                    ));
                    v.push(format!(
                        "# Machines not readable: MCM up to v0.60: kubectl annotate node {n} {}=true",
                        crate::api::names::NODE_TRIGGER_DELETION_BY_MCM
                    ));
                }
                v
            }
        }
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(cx.journal(PLAN_KEY).is_some()) }.boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let machines_at = machine_access(&self.0.machine_cluster, &cx.client).await?;
            let ns = self.0.namespace.clone().unwrap_or_else(|| cx.namespace().to_string());
            let plan =
                inspect(&cx.client, &machines_at, &ns, &self.0.target, self.0.force).await.map_err(step_error)?;
            if let Some(why) = plan.impact.refusal() {
                return Err(StepError::Permanent(why));
            }
            // Journal first: a killed executor must not re-read the node set after the old node is gone.
            cx.record(PLAN_KEY, json!({"node": plan.node, "nodesBefore": plan.nodes_before})).await?;
            delete(&cx.client, &machines_at, plan, &DeleteOptions { force: self.0.force, ..Default::default() })
                .await
                .map_err(step_error)?;
            Ok(())
        }
        .boxed()
    }
    fn verify<'a>(&'a self, _cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move { Ok(Readiness::Ready) }.boxed()
    }
}

/// The cluster holding the Machines, as the config names it.
async fn machine_access(at: &MachineClusterRef, client: &kube::Client) -> Result<MachineAccess, StepError> {
    at.connect(client, None).await.map_err(|e| match e {
        crate::kube::ClusterError::Unreachable(m) => StepError::Transient(format!("machine cluster: {m}")),
        other => StepError::Permanent(format!("machine cluster: {other}")),
    })
}

fn step_error(e: MachineError) -> StepError {
    match e {
        MachineError::WouldLoseQuorum(why) => StepError::Permanent(why),
        e @ MachineError::NotManagedByMcm(_) => StepError::Permanent(e.to_string()),
        MachineError::Cluster(c) => match c {
            crate::kube::ClusterError::NotFound { .. }
            | crate::kube::ClusterError::Forbidden(_)
            | crate::kube::ClusterError::Invalid(_) => StepError::Permanent(c.to_string()),
            other => StepError::Transient(other.to_string()),
        },
    }
}

struct WaitReplacementNode;

impl Step for WaitReplacementNode {
    fn name(&self) -> String {
        "WaitForReplacementNode".into()
    }
    fn description(&self) -> String {
        "wait until the old node is gone and a new node is Ready".into()
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(1200)
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            let j = cx.journal(PLAN_KEY).unwrap_or_default();
            let old = j.get("node").and_then(Value::as_str).map(String::from);
            let before: BTreeSet<String> =
                serde_json::from_value(j.get("nodesBefore").cloned().unwrap_or(json!([]))).unwrap_or_default();
            let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(cx.client.clone())
                .list(&ListParams::default())
                .await
                .map_err(|e| StepError::from_kube("listing nodes", e))?
                .items;
            if let Some(old) = &old
                && nodes.iter().any(|n| n.metadata.name.as_ref() == Some(old))
            {
                return Ok(Readiness::NotReady(format!("node {old} still exists (draining)")));
            }
            if nodes.iter().any(|n| n.metadata.name.as_ref().is_some_and(|x| !before.contains(x)) && node_ready(n)) {
                Ok(Readiness::Ready)
            } else {
                Ok(Readiness::NotReady("no new node is Ready yet".into()))
            }
        }
        .boxed()
    }
}

struct WaitMembersReady;

impl Step for WaitMembersReady {
    fn name(&self) -> String {
        "WaitForMembersReady".into()
    }
    fn description(&self) -> String {
        "wait until every member pod of the Etcd is ready again".into()
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(600)
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            let names = cx.etcd.managed_names();
            let pods: Api<Pod> = Api::namespaced(cx.client.clone(), cx.namespace());
            for i in 0..cx.etcd.spec.replicas.max(0) as u32 {
                let pod = names.pod(i);
                match pods.get_opt(&pod).await.map_err(|e| StepError::from_kube("reading member pods", e))? {
                    Some(p) if pod_ready(&p) => {}
                    Some(_) => return Ok(Readiness::NotReady(format!("member {pod} is not ready"))),
                    None => return Ok(Readiness::NotReady(format!("member {pod} has no pod yet"))),
                }
            }
            Ok(Readiness::Ready)
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_takes_exactly_one_of_machine_or_node() {
        let c = parse_config(Some("machine: worker-a\nforce: true")).unwrap();
        assert_eq!(c.target, MachineTarget::Machine("worker-a".into()));
        assert!(c.force);
        assert_eq!(parse_config(Some("node: n1")).unwrap().target, MachineTarget::Node("n1".into()));
        assert!(parse_config(Some("machine: a\nnode: b")).is_err());
        assert!(parse_config(None).is_err());
        assert!(parse_config(Some("machine: a\nextra: 1")).is_err());
    }

    #[test]
    fn the_machine_cluster_survives_the_config_round_trip() {
        let at = MachineClusterRef {
            kubeconfig: Some("/home/op/parent: seed.yaml".into()),
            context: Some("garden-parent".into()),
        };
        let text = config_text(&MachineTarget::Node("n1".into()), true, Some("shoot--garden--s1"), &at);
        let c = parse_config(Some(&text)).unwrap();
        assert_eq!(c.machine_cluster, at);
        assert_eq!(c.namespace.as_deref(), Some("shoot--garden--s1"));
        assert!(c.force);
        let steps = c.steps(&serde_json::from_value(json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "e", "namespace": "ns"}, "spec": {"replicas": 3, "labels": {}, "etcd": {}, "backup": {}}})).unwrap());
        let kubectl = steps[0].kubectl().join("\n");
        assert!(
            kubectl.contains("kubectl --kubeconfig '/home/op/parent: seed.yaml' --context garden-parent -n shoot--garden--s1 delete machine -l node=n1"),
            "{kubectl}"
        );
        assert!(!kubectl.contains("annotate"), "{kubectl}");
    }

    #[test]
    fn steps_check_blast_radius_then_wait_for_node_and_members() {
        let c = parse_config(Some("node: n1")).unwrap();
        let etcd: Etcd = serde_json::from_value(json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "e", "namespace": "ns"}, "spec": {"replicas": 3, "labels": {}, "etcd": {}, "backup": {}}})).unwrap();
        let names: Vec<String> = c.steps(&etcd).iter().map(|s| s.name()).collect();
        assert_eq!(names, ["RequestMachineDeletion", "WaitForReplacementNode", "WaitForMembersReady"]);
        assert!(c.steps(&etcd)[0].destructive());
    }
}
