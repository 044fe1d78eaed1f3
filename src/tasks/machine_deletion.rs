//! `MachineForceDeletionTask` *(druidctl)*: replace the machine behind a node that hosts members of this Etcd —
//! blast-radius check first (refuse when an Etcd would lose quorum), then MCM's deletion switch
//! ([`crate::machines`]), then wait for the replacement node and for the Etcd's members to be ready again.
//! Config: `machine: NAME` or `node: NAME`, optional `force: bool` (skip the drain), optional `namespace`
//! (of the Machine; default: the task's).

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
use crate::machines::delete::{DeleteOptions, MachineError, MachineTarget, delete, inspect, node_ready};
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
}

/// Parses `machine|node`, `force`, `namespace`.
pub fn parse_config(config: Option<&str>) -> Result<MachineDeletionConfig, ConfigError> {
    let v = parse_yaml(config)?;
    let f = Fields::new(&v, "config", &["machine", "node", "force", "namespace"])?;
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
    Ok(MachineDeletionConfig { target, force: f.bool("force")?.unwrap_or(false), namespace: f.string("namespace")? })
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
        json!({k: v, "force": self.force, "namespace": self.namespace})
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
        match &self.0.target {
            MachineTarget::Machine(m) if self.0.force => vec![
                format!("kubectl label machine {m} force-deletion=True"),
                format!("kubectl delete machine {m} --wait=false"),
            ],
            MachineTarget::Machine(m) => vec![format!("kubectl delete machine {m} --wait=false")],
            MachineTarget::Node(n) => {
                vec![format!("kubectl annotate node {n} node.machine.sapcloud.io/trigger-deletion-by-mcm=true")]
            }
        }
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(cx.journal(PLAN_KEY).is_some()) }.boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let ns = self.0.namespace.clone().unwrap_or_else(|| cx.namespace().to_string());
            let plan = inspect(&cx.client, &ns, &self.0.target, self.0.force).await.map_err(step_error)?;
            if let Some(why) = plan.impact.refusal() {
                return Err(StepError::Permanent(why));
            }
            // Journal first: a killed executor must not re-read the node set after the old node is gone.
            cx.record(PLAN_KEY, json!({"node": plan.node, "nodesBefore": plan.nodes_before})).await?;
            delete(&cx.client, plan, &DeleteOptions { force: self.0.force, ..Default::default() })
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

fn step_error(e: MachineError) -> StepError {
    match e {
        MachineError::WouldLoseQuorum(why) => StepError::Permanent(why),
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
    fn steps_check_blast_radius_then_wait_for_node_and_members() {
        let c = parse_config(Some("node: n1")).unwrap();
        let etcd: Etcd = serde_json::from_value(json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "e", "namespace": "ns"}, "spec": {"replicas": 3, "labels": {}, "etcd": {}, "backup": {}}})).unwrap();
        let names: Vec<String> = c.steps(&etcd).iter().map(|s| s.name()).collect();
        assert_eq!(names, ["RequestMachineDeletion", "WaitForReplacementNode", "WaitForMembersReady"]);
        assert!(c.steps(&etcd)[0].destructive());
    }
}
