//! StatefulSet controller and kubelet for etcd-druid's StatefulSets.
//!
//! Pods by ordinal with PVCs from the claim templates (kept on scale-down, like Kubernetes), scale down
//! highest ordinal first; each pod is a [`MemberRuntime`] whose observations become the pod status
//! (phase, Ready, restartCount, CrashLoopBackOff). A deleted PVC deletes its data directory once no pod
//! uses it (reclaim policy Delete).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::member::{MemberRuntime, PodView};
use super::resources::{ANNOTATION_BACKUP_API, ANNOTATION_CLIENT_URL};
use super::{Ctx, LandscapeError, tick};
use druid_api::Machine;
use druid_api::names::{ANNOTATION_DIRECT_ADDRESS, CLIENT_TLS_URL_ANNOTATION};
use druid_api::names::{LABEL_MANAGED_BY, MANAGED_BY_DRUID};

/// Runs the controller until the landscape stops.
pub(crate) async fn run(ctx: Arc<Ctx>) {
    while tick(&ctx).await {
        if let Err(e) = reconcile_all(&ctx).await {
            tracing::debug!(error = %e, "statefulset controller pass failed");
        }
    }
}

fn api<K>(ctx: &Ctx, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    match ns.or(ctx.opts.namespace.as_deref()) {
        Some(ns) => Api::namespaced(ctx.clients.statefulset.clone(), ns),
        None => Api::all(ctx.clients.statefulset.clone()),
    }
}

fn ordinal(pod: &str, sts: &str) -> Option<i32> {
    pod.strip_prefix(sts)?.strip_prefix('-')?.parse().ok()
}

async fn reconcile_all(ctx: &Arc<Ctx>) -> Result<(), LandscapeError> {
    let lp = ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_DRUID}"));
    let stss =
        api::<StatefulSet>(ctx, None).list(&lp).await.map_err(|e| LandscapeError::kube("list statefulsets", e))?;
    let pods = api::<Pod>(ctx, None).list(&lp).await.map_err(|e| LandscapeError::kube("list pods", e))?;
    let pvcs = api::<PersistentVolumeClaim>(ctx, None)
        .list(&ListParams::default())
        .await
        .map_err(|e| LandscapeError::kube("list pvcs", e))?;
    let mut live_pods: HashSet<(String, String)> = HashSet::new();
    // A volume is keyed by its PVC's uid: a PVC deleted and created again with the same name is a new,
    // empty volume, while a running pod keeps the volume it mounted.
    let volumes: HashMap<(String, String), String> = pvcs
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let uid = p.metadata.uid.clone().unwrap_or_default();
            ((p.metadata.namespace.clone().unwrap_or_default(), name.clone()), format!("{name}-{uid}"))
        })
        .collect();
    let volume_dirs: HashSet<(String, String)> = volumes.iter().map(|((ns, _), v)| (ns.clone(), v.clone())).collect();

    for sts in &stss.items {
        let ns = sts.metadata.namespace.clone().unwrap_or_default();
        let name = sts.metadata.name.clone().unwrap_or_default();
        if sts.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let spec = sts.spec.clone().unwrap_or_default();
        let replicas = spec.replicas.unwrap_or(1);
        let claim = spec
            .volume_claim_templates
            .as_ref()
            .and_then(|t| t.first())
            .and_then(|t| t.metadata.name.clone())
            .unwrap_or_else(|| name.clone());
        let owned: BTreeMap<i32, &Pod> = pods
            .items
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(&ns))
            .filter_map(|p| Some((ordinal(p.metadata.name.as_deref()?, &name)?, p)))
            .collect();

        // Nodes already hosting a pod of this StatefulSet (one member per node).
        let mut taken: HashSet<String> = owned
            .values()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect();
        // PVCs and pods for ordinals below replicas.
        for i in 0..replicas {
            let pod_name = format!("{name}-{i}");
            let pvc = format!("{claim}-{name}-{i}");
            let Some(volume) = volumes.get(&(ns.clone(), pvc.clone())) else {
                create_pvc(ctx, &ns, &pvc, &spec).await;
                continue; // the pod follows once its PVC is listed
            };
            if !owned.contains_key(&i) {
                let Some(node) = schedule(ctx, &ns, &taken).await else { continue }; // unschedulable for now
                let rt = ensure_runtime(ctx, &ns, &pod_name, &name, &pvc, volume).await?;
                create_pod(ctx, sts, &pod_name, &pvc, &claim, &rt, &node).await;
                taken.insert(node);
            }
        }
        // Scale down: highest ordinal first, one per pass.
        if let Some((&i, p)) = owned.iter().rev().find(|(i, _)| **i >= replicas)
            && p.metadata.deletion_timestamp.is_none()
        {
            let pod_name = format!("{name}-{i}");
            let _ = api::<Pod>(ctx, Some(&ns)).delete(&pod_name, &DeleteParams::default()).await;
        }
        // Kubelet: pod status from the member runtimes.
        let mut ready = 0;
        let mut current = 0;
        for (&i, p) in &owned {
            let pod_name = p.metadata.name.clone().unwrap_or_default();
            if p.metadata.deletion_timestamp.is_some() {
                continue;
            }
            live_pods.insert((ns.clone(), pod_name.clone()));
            current += 1;
            let pvc = format!("{claim}-{name}-{i}");
            let key = (ns.clone(), pvc.clone());
            let rt = ctx.members.lock().expect("members").get(&(ns.clone(), pod_name.clone())).cloned();
            let rt = match (rt, volumes.get(&key)) {
                (Some(rt), _) => rt,
                (None, Some(volume)) => ensure_runtime(ctx, &ns, &pod_name, &name, &pvc, volume).await?,
                (None, None) => continue, // pod without its PVC: stays pending
            };
            publish_backup_address(ctx, &ns, p, &rt).await;
            let view = rt.view();
            if view.ready {
                ready += 1;
            }
            if p.status.as_ref().and_then(|s| s.phase.as_deref()).is_none() {
                rt.invalidate_posted();
            }
            if let Some(view) = rt.take_changed_view()
                && let Err(e) = post_pod_status(ctx, &ns, &pod_name, &view).await
            {
                tracing::debug!(pod = %pod_name, error = %e, "pod status not posted");
                rt.invalidate_posted();
            }
        }
        let status = json!({"status": {
            "replicas": current, "readyReplicas": ready, "currentReplicas": current, "updatedReplicas": current,
            "availableReplicas": ready, "observedGeneration": sts.metadata.generation,
        }});
        let old = sts.status.as_ref();
        let changed = old.is_none_or(|o| {
            o.replicas != current
                || o.ready_replicas.unwrap_or(0) != ready
                || o.observed_generation != sts.metadata.generation
        });
        if changed {
            let _ = api::<StatefulSet>(ctx, Some(&ns))
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await;
        }
    }

    // Pods that are gone: stop their runtimes.
    let gone: Vec<Arc<MemberRuntime>> = {
        let mut members = ctx.members.lock().expect("members");
        let keys: Vec<_> = members.keys().filter(|k| !live_pods.contains(*k)).cloned().collect();
        keys.iter().filter_map(|k| members.remove(k)).collect()
    };
    for rt in gone {
        rt.shutdown(std::time::Duration::from_secs(2)).await;
    }
    // PVCs that are gone: their volumes go too, once no pod uses them.
    let in_use: HashSet<std::path::PathBuf> =
        ctx.members.lock().expect("members").values().map(|m| m.data_dir.clone()).collect();
    if let Ok(namespaces) = std::fs::read_dir(ctx.opts.state_dir.join("volumes")) {
        for ns_dir in namespaces.flatten() {
            let ns = ns_dir.file_name().to_string_lossy().into_owned();
            if !ctx.in_scope(Some(&ns)) {
                continue;
            }
            for vol in std::fs::read_dir(ns_dir.path()).into_iter().flatten().flatten() {
                let volume = vol.file_name().to_string_lossy().into_owned();
                if !volume_dirs.contains(&(ns.clone(), volume)) && !in_use.contains(&vol.path()) {
                    let _ = std::fs::remove_dir_all(vol.path());
                }
            }
        }
    }
    Ok(())
}

/// Keeps the pod's sidecar address annotations in line with its runtime (a runtime started again for an
/// existing pod listens elsewhere); where the API server cannot proxy, druidctl follows the direct one.
async fn publish_backup_address(ctx: &Ctx, ns: &str, pod: &Pod, rt: &MemberRuntime) {
    let want = rt.backup_addr().to_string();
    let have = |key: &str| pod.metadata.annotations.as_ref().and_then(|a| a.get(key)).map(String::as_str);
    let direct = ctx.registrar.is_none();
    if have(ANNOTATION_BACKUP_API) == Some(want.as_str())
        && (!direct || have(ANNOTATION_DIRECT_ADDRESS) == Some(want.as_str()))
    {
        return;
    }
    let mut annotations = json!({ANNOTATION_BACKUP_API: want});
    if direct {
        annotations[ANNOTATION_DIRECT_ADDRESS] = json!(want);
    }
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let patch = json!({"metadata": {"annotations": annotations}});
    if let Err(e) = api::<Pod>(ctx, Some(ns)).patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        tracing::debug!(pod = name, error = %e, "sidecar address not published");
    }
}

async fn ensure_runtime(
    ctx: &Arc<Ctx>,
    ns: &str,
    pod: &str,
    sts: &str,
    pvc: &str,
    volume: &str,
) -> Result<Arc<MemberRuntime>, LandscapeError> {
    let key = (ns.to_string(), pod.to_string());
    if let Some(rt) = ctx.members.lock().expect("members").get(&key) {
        return Ok(rt.clone());
    }
    let rt = MemberRuntime::spawn(ctx, ns, pod, sts, pvc, volume).await.map_err(|e| LandscapeError::Io {
        action: "bind backup API of",
        path: pod.into(),
        source: e,
    })?;
    ctx.members.lock().expect("members").insert(key, rt.clone());
    Ok(rt)
}

async fn create_pvc(ctx: &Ctx, ns: &str, pvc: &str, spec: &k8s_openapi::api::apps::v1::StatefulSetSpec) {
    let tmpl = spec.volume_claim_templates.as_ref().and_then(|t| t.first()).cloned().unwrap_or_default();
    let labels = spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    let obj = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": pvc, "namespace": ns, "labels": labels},
        "spec": tmpl.spec.map(|s| serde_json::to_value(s).unwrap_or_default()).unwrap_or_else(|| json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}})),
    });
    let mut obj = obj;
    obj["spec"]["volumeName"] = json!(format!("pvc-{}", uuid::Uuid::new_v4()));
    obj["spec"]["storageClassName"] = json!("local-path");
    let Ok(obj) = serde_json::from_value::<PersistentVolumeClaim>(obj) else { return };
    let api = api::<PersistentVolumeClaim>(ctx, Some(ns));
    if api.create(&PostParams::default(), &obj).await.is_ok() {
        let status =
            json!({"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}});
        let _ = api.patch_status(pvc, &PatchParams::default(), &Patch::Merge(&status)).await;
    }
}

/// Node for a new pod in `ns`: a Ready Node backed by a live Machine of `ns` that hosts no pod in `taken`
/// (first by name); `playground-node` when `ns` has no Machines (landscapes without MCM); `None` (the pod stays
/// unschedulable for now, as with a real scheduler) while Machines exist but no Node fits, e.g. while a
/// replacement node is not Ready yet.
async fn schedule(ctx: &Ctx, ns: &str, taken: &HashSet<String>) -> Option<String> {
    let machines =
        match Api::<Machine>::namespaced(ctx.clients.statefulset.clone(), ns).list(&ListParams::default()).await {
            Ok(l) if !l.items.is_empty() => l.items,
            _ => return Some("playground-node".into()),
        };
    let nodes = Api::<Node>::all(ctx.clients.statefulset.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut fit: Vec<String> = nodes
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none() && node_ready(n))
        .filter(|n| !n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false))
        .filter_map(|n| n.metadata.name.clone())
        .filter(|n| !taken.contains(n))
        .filter(|n| {
            machines.iter().any(|m| m.metadata.deletion_timestamp.is_none() && m.node_name() == Some(n.as_str()))
        })
        .collect();
    fit.sort();
    fit.into_iter().next()
}

async fn create_pod(ctx: &Ctx, sts: &StatefulSet, pod: &str, pvc: &str, claim: &str, rt: &MemberRuntime, node: &str) {
    let ns = sts.metadata.namespace.clone().unwrap_or_default();
    let spec = sts.spec.clone().unwrap_or_default();
    let tmpl_meta = spec.template.metadata.clone().unwrap_or_default();
    let mut pod_spec = serde_json::to_value(spec.template.spec.clone().unwrap_or_default()).unwrap_or_default();
    let mut volumes = pod_spec["volumes"].as_array().cloned().unwrap_or_default();
    volumes.push(json!({"name": claim, "persistentVolumeClaim": {"claimName": pvc}}));
    pod_spec["volumes"] = Value::Array(volumes);
    pod_spec["nodeName"] = json!(node);
    pod_spec["hostname"] = json!(pod);
    pod_spec["subdomain"] = json!(spec.service_name);
    let mut labels = tmpl_meta.labels.unwrap_or_default();
    labels.insert("statefulset.kubernetes.io/pod-name".into(), pod.into());
    labels.insert(
        "apps.kubernetes.io/pod-index".into(),
        ordinal(pod, sts.metadata.name.as_deref().unwrap_or_default()).unwrap_or(0).to_string(),
    );
    let mut annotations =
        json!({ANNOTATION_CLIENT_URL: rt.client_url(), ANNOTATION_BACKUP_API: rt.backup_addr().to_string()});
    // Where the member serves client TLS when its Etcd has `clientUrlTls` (see `super::tls`).
    annotations[CLIENT_TLS_URL_ANNOTATION] = json!(format!("https://127.0.0.1:{}", ctx.tls_port(&ns, pod)));
    if ctx.registrar.is_none() {
        // The API server cannot proxy to this process; druidctl reaches the sidecar at this address instead.
        annotations[ANNOTATION_DIRECT_ADDRESS] = json!(rt.backup_addr().to_string());
    }
    let obj = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": pod, "namespace": ns, "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts.metadata.name,
                "uid": sts.metadata.uid, "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": pod_spec,
    });
    match serde_json::from_value::<Pod>(obj) {
        Ok(p) => {
            if let Err(e) = api::<Pod>(ctx, Some(&ns)).create(&PostParams::default(), &p).await {
                tracing::debug!(pod, error = %e, "pod not created");
            } else {
                rt.invalidate_posted();
            }
        }
        Err(e) => tracing::warn!(pod, error = %e, "pod object invalid"),
    }
}

/// The pod status a kubelet would post for `view`.
pub fn pod_status(view: &PodView) -> Value {
    let now = jiff::Timestamp::now().to_string();
    let b = |x: bool| if x { "True" } else { "False" };
    let etcd_state = match (&view.waiting, view.running) {
        (_, true) => json!({"running": {"startedAt": view.started_at.clone().unwrap_or_else(|| now.clone())}}),
        (Some((reason, message)), false) => json!({"waiting": {"reason": reason, "message": message}}),
        (None, false) => json!({"waiting": {"reason": "ContainerCreating"}}),
    };
    let phase = if view.running || view.restart_count > 0 { "Running" } else { "Pending" };
    json!({
        "phase": phase,
        "podIP": "127.0.0.1", "hostIP": "127.0.0.1",
        "podIPs": [{"ip": "127.0.0.1"}],
        "startTime": view.started_at.clone().unwrap_or(now.clone()),
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": b(view.ready), "lastTransitionTime": now},
            {"type": "Ready", "status": b(view.ready), "lastTransitionTime": now},
        ],
        "containerStatuses": [
            {"name": "etcd", "ready": view.ready, "started": view.running, "restartCount": view.restart_count,
             "image": "europe-docker.pkg.dev/gardener-project/public/gardener/etcd-wrapper:v0.2.0", "imageID": "",
             "state": etcd_state},
            {"name": "backup-restore", "ready": true, "started": true, "restartCount": 0,
             "image": "europe-docker.pkg.dev/gardener-project/public/gardener/etcdbrctl:v0.30.0", "imageID": "",
             "state": {"running": {"startedAt": view.started_at.clone().unwrap_or(now)}}},
        ],
    })
}

async fn post_pod_status(ctx: &Ctx, ns: &str, pod: &str, view: &PodView) -> Result<(), kube::Error> {
    api::<Pod>(ctx, Some(ns))
        .patch_status(pod, &PatchParams::default(), &Patch::Merge(&json!({"status": pod_status(view)})))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_looping_member_shows_waiting_reason_and_restarts() {
        let v = PodView {
            running: false,
            ready: false,
            restart_count: 3,
            waiting: Some(("CrashLoopBackOff".into(), "back-off".into())),
            started_at: None,
        };
        let s = pod_status(&v);
        assert_eq!(s["phase"], "Running");
        assert_eq!(s["containerStatuses"][0]["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(s["containerStatuses"][0]["restartCount"], 3);
        assert_eq!(s["conditions"][3]["status"], "False");
    }

    #[test]
    fn ordinals_come_from_pod_names() {
        assert_eq!(ordinal("etcd-main-2", "etcd-main"), Some(2));
        assert_eq!(ordinal("etcd-main-client", "etcd-main"), None);
        assert_eq!(ordinal("etcd-events-0", "etcd-main"), None);
    }
}

/// A Node the scheduler would place a pod on: its kubelet reports the `Ready` condition `True`
/// (`k8s.io/api/core/v1` NodeReady; kube-scheduler's `nodeunschedulable`/taint plugins act on the
/// not-ready taint the node lifecycle controller derives from it).
fn node_ready(node: &k8s_openapi::api::core::v1::Node) -> bool {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
}
