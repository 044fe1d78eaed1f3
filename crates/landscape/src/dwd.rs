//! dependency-watchdog's prober and a minimal Deployment controller for the control plane.
//!
//! While an Etcd of a namespace has lost quorum, the dependents (by default kube-controller-manager and
//! machine-controller-manager) are scaled to 0 with their previous replica count kept in
//! `dependency-watchdog.gardener.cloud/replicas`; `ignore-scaling: "true"` opts a Deployment out; when
//! every Etcd of the namespace is Ready again they are scaled back (seeds/004 lines 9-634). The
//! Deployment controller reports `spec.replicas` as ready, except kube-apiserver, which is unready while
//! its etcd has no quorum.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;

use super::status::condition;
use super::{Ctx, LandscapeError, statefulset, tick};
use druid_api::Etcd;
use druid_api::names::{DWD_IGNORE_SCALING, DWD_REPLICAS};

/// Label of the control-plane Deployments the playground creates (the Deployment controller acts on these).
pub const CONTROL_PLANE_LABEL: &str = "playground.druidctl.gardener.cloud/control-plane";

/// Runs the actor until the landscape stops.
pub(crate) async fn run(ctx: Arc<Ctx>) {
    while tick(&ctx).await {
        if let Err(e) = pass(&ctx).await {
            tracing::debug!(error = %e, "dwd pass failed");
        }
    }
}

/// What DWD does to one Deployment: `Some(replicas, annotation)` = patch.
#[derive(Debug, PartialEq, Eq)]
pub enum ScalingAction {
    /// Scale to 0, remembering `previous`.
    ScaleDown {
        /// Replicas before.
        previous: i32,
    },
    /// Scale back to `replicas` and drop the annotation.
    ScaleUp {
        /// Replicas to restore.
        replicas: i32,
    },
}

/// DWD's decision for a dependent with `replicas`, `annotations`, while quorum is `lost`.
pub fn scaling_action(replicas: i32, annotations: &BTreeMap<String, String>, lost: bool) -> Option<ScalingAction> {
    if annotations.get(DWD_IGNORE_SCALING).is_some_and(|v| v == "true") {
        return None;
    }
    match (lost, annotations.get(DWD_REPLICAS)) {
        (true, None) if replicas > 0 => Some(ScalingAction::ScaleDown { previous: replicas }),
        (false, Some(prev)) => Some(ScalingAction::ScaleUp { replicas: prev.parse().unwrap_or(1) }),
        _ => None,
    }
}

async fn pass(ctx: &Ctx) -> Result<(), LandscapeError> {
    let client = ctx.clients.dwd.clone();
    let etcd_api: Api<Etcd> = match &ctx.opts.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    // The Etcds from the landscape's watch once it is filled, from the API server before.
    let etcds: Vec<Etcd> = match ctx.etcds.all() {
        Some(all) => all.iter().map(|e| (**e).clone()).collect(),
        None => etcd_api.list(&ListParams::default()).await.map_err(|e| LandscapeError::kube("list etcds", e))?.items,
    };
    let mut lost_by_ns: BTreeMap<String, bool> = BTreeMap::new();
    for e in &etcds {
        let status = e.status.as_ref().map(|s| serde_json::to_value(s).unwrap_or_default()).unwrap_or_default();
        let lost = condition(&status, "Ready").is_some_and(|(s, _)| s != "True");
        *lost_by_ns.entry(e.metadata.namespace.clone().unwrap_or_default()).or_default() |= lost;
    }
    let dep_api: Api<Deployment> = match &ctx.opts.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let deps = dep_api
        .list(&ListParams::default().labels(&format!("{CONTROL_PLANE_LABEL}=true")))
        .await
        .map_err(|e| LandscapeError::kube("list deployments", e))?;
    // kube-controller-manager's ReplicaSet controller makes the Deployments' pods: one list for all of them.
    let pods = match ctx.opts.builtin_controllers && !deps.items.is_empty() {
        true => {
            match &ctx.opts.namespace {
                Some(ns) => Api::<Pod>::namespaced(client.clone(), ns),
                None => Api::all(client.clone()),
            }
            .list(&ListParams::default())
            .await
            .map_err(|e| LandscapeError::kube("list pods", e))?
            .items
        }
        false => Vec::new(),
    };
    for d in deps.items {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let name = d.metadata.name.clone().unwrap_or_default();
        let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let lost = lost_by_ns.get(&ns).copied().unwrap_or(false);
        let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let annotations = d.metadata.annotations.clone().unwrap_or_default();
        if ctx.opts.dwd_dependents.contains(&name) {
            let patch = match scaling_action(replicas, &annotations, lost) {
                Some(ScalingAction::ScaleDown { previous }) => Some(
                    json!({"metadata": {"annotations": {DWD_REPLICAS: previous.to_string()}}, "spec": {"replicas": 0}}),
                ),
                Some(ScalingAction::ScaleUp { replicas }) => {
                    Some(json!({"metadata": {"annotations": {DWD_REPLICAS: null}}, "spec": {"replicas": replicas}}))
                }
                None => None,
            };
            if let Some(p) = patch {
                tracing::info!(deployment = %name, namespace = %ns, lost, "dependency-watchdog scaling");
                let _ = api.patch(&name, &PatchParams::default(), &Patch::Merge(&p)).await;
                continue;
            }
        }
        if ctx.opts.builtin_controllers {
            // kube-controller-manager's Deployment controller owns the status; the landscape is the scheduler
            // and kubelet of its pods.
            run_pods(ctx, &ns, &name, &d, &pods, lost).await;
            continue;
        }
        let ready = if name == "kube-apiserver" && lost { 0 } else { replicas };
        let st = d.status.clone().unwrap_or_default();
        if st.replicas != Some(replicas)
            || st.ready_replicas.unwrap_or(0) != ready
            || st.observed_generation != d.metadata.generation
        {
            let status = json!({"status": {"replicas": replicas, "readyReplicas": ready, "availableReplicas": ready,
                "updatedReplicas": replicas, "observedGeneration": d.metadata.generation}});
            let _ = api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await;
        }
    }
    Ok(())
}

/// Scheduler and kubelet for the pods of control-plane Deployment `name` (made by kube-controller-manager's
/// ReplicaSet controller): binds them to a node of the namespace, reports them Running and Ready (kube-apiserver's
/// readiness probe fails while its etcd has lost quorum), and confirms their graceful deletion. Patches only a
/// status that differs.
async fn run_pods(ctx: &Ctx, ns: &str, name: &str, d: &Deployment, all: &[Pod], lost: bool) {
    let selector = d.spec.as_ref().and_then(|s| s.selector.match_labels.clone()).unwrap_or_default();
    if selector.is_empty() {
        return;
    }
    let pods: Api<Pod> = Api::namespaced(ctx.clients.dwd.clone(), ns);
    let ready = !(name == "kube-apiserver" && lost);
    let selected = all.iter().filter(|p| {
        let labels = p.metadata.labels.clone().unwrap_or_default();
        p.metadata.namespace.as_deref() == Some(ns) && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    });
    for p in selected {
        if p.metadata.deletion_timestamp.is_some() {
            statefulset::confirm_deletion(ctx, ns, p).await;
            continue;
        }
        if p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_none() {
            if let Some(node) = statefulset::schedule(ctx, ns, &Default::default()).await {
                statefulset::bind(ctx, ns, p, &node).await;
            }
            continue;
        }
        let status = p.status.clone().unwrap_or_default();
        let is_ready = status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
        if status.phase.as_deref() == Some("Running") && is_ready == ready {
            continue;
        }
        let now = jiff::Timestamp::now().to_string();
        let started = status.start_time.as_ref().map(|t| t.0.to_string()).unwrap_or_else(|| now.clone());
        let b = if ready { "True" } else { "False" };
        let containers: Vec<_> = p
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .map(|c| {
                json!({"name": c.name, "ready": ready, "started": true, "restartCount": 0,
                "image": c.image, "imageID": "", "state": {"running": {"startedAt": started}}})
            })
            .collect();
        let patch = json!({"status": {"phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
            "hostIP": "127.0.0.1", "startTime": started,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
                {"type": "Initialized", "status": "True", "lastTransitionTime": started},
                {"type": "ContainersReady", "status": b, "lastTransitionTime": now},
                {"type": "Ready", "status": b, "lastTransitionTime": now}],
            "containerStatuses": containers}});
        let pod = p.metadata.name.clone().unwrap_or_default();
        if let Err(e) = pods.patch_status(&pod, &PatchParams::default(), &Patch::Merge(&patch)).await {
            tracing::debug!(pod, error = %e, "control-plane pod status not posted");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependents_go_down_while_quorum_is_lost_and_come_back() {
        let none = BTreeMap::new();
        assert_eq!(scaling_action(2, &none, true), Some(ScalingAction::ScaleDown { previous: 2 }));
        assert_eq!(scaling_action(2, &none, false), None);
        let scaled: BTreeMap<String, String> = [(DWD_REPLICAS.to_string(), "2".to_string())].into();
        assert_eq!(scaling_action(0, &scaled, true), None);
        assert_eq!(scaling_action(0, &scaled, false), Some(ScalingAction::ScaleUp { replicas: 2 }));
        let ignored: BTreeMap<String, String> = [(DWD_IGNORE_SCALING.to_string(), "true".to_string())].into();
        assert_eq!(scaling_action(1, &ignored, true), None);
    }
}
