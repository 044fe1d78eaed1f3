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
        if ctx.opts.builtin_controllers {
            heartbeat(&ctx).await;
        } else {
            disruption_status(&ctx).await;
        }
    }
}

/// kube-controller-manager's disruption controller for the PodDisruptionBudgets of the landscape's namespace
/// (`pkg/controller/disruption/disruption.go`, `getExpectedPodCount` / `countHealthyPods`): `currentHealthy`
/// is the Ready pods the selector matches that are not being deleted; with an integer `minAvailable`,
/// `desiredHealthy` is it and `expectedPods` the matched pods; with `maxUnavailable` (or a percentage),
/// `expectedPods` is the replicas of the pods' StatefulSets and `desiredHealthy` follows from it (percentages
/// rounded up); `disruptionsAllowed = max(0, currentHealthy − desiredHealthy)`. Without it, the embedded API
/// server's eviction would find no disruption allowed and every drain would block.
async fn disruption_status(ctx: &Ctx) {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let Some(ns) = ctx.opts.namespace.as_deref() else { return };
    let pdbs: Api<PodDisruptionBudget> = api(ctx, Some(ns));
    let Ok(list) = pdbs.list(&ListParams::default()).await else { return };
    if list.items.is_empty() {
        return;
    }
    let Ok(pods) = api::<Pod>(ctx, Some(ns)).list(&ListParams::default()).await else { return };
    let sets =
        api::<StatefulSet>(ctx, Some(ns)).list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    for pdb in list.items {
        let spec = pdb.spec.clone().unwrap_or_default();
        let Some(selector) = spec.selector.as_ref() else { continue };
        let matched: Vec<&Pod> = pods
            .items
            .iter()
            .filter(|p| selects(selector, p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())))
            .collect();
        let healthy = matched
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count() as i32;
        // The scale of the pods' controllers (StatefulSets owning a matched pod).
        let scale: i32 = sets
            .iter()
            .filter(|s| {
                matched.iter().any(|p| {
                    p.metadata.owner_references.iter().flatten().any(|o| Some(&o.name) == s.metadata.name.as_ref())
                })
            })
            .map(|s| s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1))
            .sum();
        let scaled = |v: &IntOrString, of: i32, up: bool| match v {
            IntOrString::Int(i) => *i,
            IntOrString::String(p) => {
                let pct: f64 = p.trim_end_matches('%').parse().unwrap_or(0.0);
                let x = pct * of as f64 / 100.0;
                (if up { x.ceil() } else { x.floor() }) as i32
            }
        };
        let (expected, desired) = match (&spec.min_available, &spec.max_unavailable) {
            (Some(IntOrString::Int(m)), _) => (matched.len() as i32, *m),
            (Some(m), _) => (scale, scaled(m, scale, true)),
            (None, Some(u)) => (scale, (scale - scaled(u, scale, true)).max(0)),
            (None, None) => (matched.len() as i32, 0),
        };
        let allowed = (healthy - desired).max(0);
        let have = pdb.status.as_ref();
        if have.is_some_and(|s| {
            s.current_healthy == healthy
                && s.desired_healthy == desired
                && s.disruptions_allowed == allowed
                && s.expected_pods == expected
        }) {
            continue;
        }
        let status = json!({"status": {"currentHealthy": healthy, "desiredHealthy": desired,
            "disruptionsAllowed": allowed, "expectedPods": expected,
            "observedGeneration": pdb.metadata.generation}});
        let name = pdb.metadata.name.clone().unwrap_or_default();
        let _ = pdbs.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await;
    }
}

/// Whether `selector` selects `labels`: every `matchLabels` pair and every expression holds, as
/// `metav1.LabelSelectorAsSelector` evaluates it (k8s.io/apimachinery `pkg/apis/meta/v1/helpers.go`); the
/// StatefulSet controller and MCM's MachineSet controller (`pkg/controller/machineset.go`) both use it.
pub(crate) fn selects(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v))
        && selector.match_expressions.iter().flatten().all(|e| {
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

/// How often the kubelet renews its node Lease (kubelet's `nodeLeaseDurationSeconds` 40 s, renewed every quarter
/// of it: `pkg/kubelet/nodelease`, `renewIntervalFraction` 0.25).
const NODE_LEASE_RENEW: std::time::Duration = std::time::Duration::from_secs(10);
/// kubelet's `nodeLeaseDurationSeconds` default.
const NODE_LEASE_SECONDS: i32 = 40;

/// The kubelets' heartbeat: each Ready Node of the namespace's Machines renews its Lease in `kube-node-lease`
/// (owned by the Node, as the kubelet makes it), so that kube-controller-manager's node lifecycle controller does
/// not take the node for unreachable. A Node the landscape made NotReady gets no heartbeat.
async fn heartbeat(ctx: &Ctx) {
    {
        let mut last = ctx.node_heartbeat.lock().expect("heartbeat");
        if last.is_some_and(|t| t.elapsed() < NODE_LEASE_RENEW) {
            return;
        }
        *last = Some(std::time::Instant::now());
    }
    let Some(ns) = ctx.opts.namespace.as_deref() else { return };
    let Ok(nodes) = Api::<Node>::all(ctx.clients.statefulset.clone()).list(&ListParams::default()).await else {
        return;
    };
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(ctx.clients.statefulset.clone(), "kube-node-lease");
    let prefix = format!("playground:///{ns}/");
    for node in nodes.items {
        let ours = node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).is_some_and(|p| p.starts_with(&prefix));
        if !ours || !node_ready(&node) || node.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = node.metadata.name.clone().unwrap_or_default();
        let now = super::micro_time_now();
        let patch =
            json!({"spec": {"holderIdentity": name, "leaseDurationSeconds": NODE_LEASE_SECONDS, "renewTime": now}});
        match leases.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {
                let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "namespace": "kube-node-lease",
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node.metadata.uid}]},
                    "spec": patch["spec"]});
                if let Ok(lease) = serde_json::from_value(lease) {
                    let _ = leases.create(&PostParams::default(), &lease).await;
                }
            }
            Err(e) => tracing::debug!(node = %name, error = %e, "node lease not renewed"),
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
        let builtin = ctx.opts.builtin_controllers;
        if builtin {
            // kube-controller-manager's StatefulSet controller makes the PVCs and pods, scales down and writes the
            // status; what it lacks is a provisioner for the PVCs and a scheduler for the pods.
            for pvc in &pvcs.items {
                let pvc_name = pvc.metadata.name.as_deref().unwrap_or_default();
                let ours = pvc_name.strip_prefix(&format!("{claim}-")).and_then(|rest| ordinal(rest, &name)).is_some();
                if ours && pvc.metadata.namespace.as_deref() == Some(ns.as_str()) {
                    provision(ctx, pvc).await;
                }
            }
            for (&i, p) in &owned {
                let unbound = p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_none();
                if !unbound || p.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                // kube-scheduler's VolumeBinding plugin: a pod waits for its (immediately bound) PVC; one whose
                // PVC is being deleted is not scheduled (pvc-protection relies on that).
                let pvc = format!("{claim}-{name}-{i}");
                let bound = pvcs.items.iter().any(|c| {
                    c.metadata.namespace.as_deref() == Some(ns.as_str())
                        && c.metadata.name.as_deref() == Some(pvc.as_str())
                        && c.metadata.deletion_timestamp.is_none()
                        && c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
                });
                if !bound {
                    continue;
                }
                let Some(node) = schedule(ctx, &ns, &taken).await else { continue };
                if bind(ctx, &ns, p, &node).await {
                    taken.insert(node);
                }
            }
        }
        // PVCs and pods for ordinals below replicas.
        for i in (0..replicas).filter(|_| !builtin) {
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
                // Live from now on, though the pod list of this pass predates it: the runtime must not be taken
                // for a gone pod's below. Stopping it here stopped a member seconds after its first start, and a
                // member stopped after etcd created its WAL but before it saved the bootstrap entries restarts
                // with no voters (`restarting local member … voters=()`): its cluster never forms.
                live_pods.insert((ns.clone(), pod_name.clone()));
            }
        }
        // Scale down: highest ordinal first, one per pass.
        if let Some((&i, p)) = owned.iter().rev().find(|(i, _)| **i >= replicas)
            && !builtin
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
            let member = (ns.clone(), pod_name.clone());
            if p.metadata.deletion_timestamp.is_some() {
                // Its containers are stopped below (the runtime goes with the pod); once they are, the kubelet
                // confirms the graceful deletion.
                if !ctx.members.lock().expect("members").contains_key(&member) {
                    confirm_deletion(ctx, &ns, p).await;
                }
                continue;
            }
            if p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_none() {
                continue; // not scheduled yet: no kubelet runs it
            }
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let pvc = format!("{claim}-{name}-{i}");
            let key = (ns.clone(), pvc.clone());
            let rt = ctx.members.lock().expect("members").get(&member).cloned();
            // A pod created again under the same name is new: its containers start afresh, on the volume its PVC
            // has now (a running pod keeps the volume it mounted).
            let stale = rt.is_some() && ctx.pod_uids.lock().expect("uids").get(&member).is_some_and(|u| *u != uid);
            if stale {
                continue; // not live: the old runtime stops at the end of this pass
            }
            live_pods.insert(member.clone());
            current += 1;
            let rt = match (rt, volumes.get(&key)) {
                (Some(rt), _) => rt,
                (None, Some(volume)) => ensure_runtime(ctx, &ns, &pod_name, &name, &pvc, volume).await?,
                (None, None) => continue, // pod without its PVC: stays pending
            };
            ctx.pod_uids.lock().expect("uids").insert(member, uid);
            publish_backup_address(ctx, &ns, p, &rt).await;
            let view = rt.view();
            if view.ready {
                ready += 1;
            }
            if status_differs(p, &view) {
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
        if changed && !builtin {
            let _ = api::<StatefulSet>(ctx, Some(&ns))
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await;
        }
    }

    // Pods that are gone: stop their runtimes.
    let gone: Vec<Arc<MemberRuntime>> = {
        let mut members = ctx.members.lock().expect("members");
        let keys: Vec<_> = members.keys().filter(|k| !live_pods.contains(*k)).cloned().collect();
        let mut uids = ctx.pod_uids.lock().expect("uids");
        keys.iter().for_each(|k| drop(uids.remove(k)));
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
                if !volume_dirs.contains(&(ns.clone(), volume.clone())) && !in_use.contains(&vol.path()) {
                    let _ = std::fs::remove_dir_all(vol.path());
                    if ctx.opts.builtin_controllers {
                        reclaim(ctx, &volume).await;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The annotations the landscape publishes on a member pod: where its etcd serves clients (plain and TLS, when
/// its Etcd has `clientUrlTls`, see `super::tls`) and its sidecar; where the API server cannot proxy, also the
/// sidecar address druidctl uses directly.
fn member_annotations(ctx: &Ctx, ns: &str, pod: &str, rt: &MemberRuntime) -> serde_json::Map<String, Value> {
    let mut annotations = serde_json::Map::new();
    annotations.insert(ANNOTATION_CLIENT_URL.into(), json!(rt.client_url()));
    annotations.insert(ANNOTATION_BACKUP_API.into(), json!(rt.backup_addr().to_string()));
    annotations.insert(CLIENT_TLS_URL_ANNOTATION.into(), json!(format!("https://127.0.0.1:{}", ctx.tls_port(ns, pod))));
    if ctx.registrar.is_none() {
        // The API server cannot proxy to this process; druidctl reaches the sidecar at this address instead.
        annotations.insert(ANNOTATION_DIRECT_ADDRESS.into(), json!(rt.backup_addr().to_string()));
    }
    annotations
}

/// Keeps the pod's address annotations in line with its runtime (a runtime started again for an existing pod
/// listens elsewhere; a pod made by kube-controller-manager's StatefulSet controller has none); patches only
/// those that differ.
async fn publish_backup_address(ctx: &Ctx, ns: &str, pod: &Pod, rt: &MemberRuntime) {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let have = pod.metadata.annotations.clone().unwrap_or_default();
    let mut want = member_annotations(ctx, ns, name, rt);
    want.retain(|k, v| have.get(k).map(|h| json!(h)) != Some(v.clone()));
    if want.is_empty() {
        return;
    }
    let patch = json!({"metadata": {"annotations": want}});
    if let Err(e) = api::<Pod>(ctx, Some(ns)).patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        tracing::debug!(pod = name, error = %e, "sidecar address not published");
    }
}

/// Whether the pod's status shows something else than the member's `view` (phase, readiness, restarts): then
/// the kubelet posts it again, e.g. for a pod created again under the same name, or marked not ready by the
/// node lifecycle controller.
fn status_differs(pod: &Pod, view: &PodView) -> bool {
    let want = pod_status(view);
    let Some(status) = pod.status.as_ref() else { return true };
    let ready = status.conditions.iter().flatten().find(|c| c.type_ == "Ready").map(|c| c.status == "True");
    let restarts = status.container_statuses.iter().flatten().find(|c| c.name == "etcd").map(|c| c.restart_count);
    status.phase.as_deref() != want["phase"].as_str()
        || ready != Some(view.ready)
        || restarts != Some(view.restart_count)
}

/// kube-scheduler's binding of `pod` to `node` (`pods/binding`). False when the server refused it.
pub(crate) async fn bind(ctx: &Ctx, ns: &str, pod: &Pod, node: &str) -> bool {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let binding = json!({"apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": ns, "uid": pod.metadata.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    match api::<Pod>(ctx, Some(ns))
        .create_subresource::<_, Value>("binding", name, &PostParams::default(), &binding)
        .await
    {
        Ok(_) => true,
        Err(e) => {
            tracing::debug!(pod = name, node, error = %e, "pod not bound");
            false
        }
    }
}

/// The kubelet's confirmation of a graceful pod deletion once the pod's containers are stopped: a DELETE with
/// grace period 0 for exactly this pod (uid precondition). Only for pods on a node: the API server removes an
/// unscheduled pod at once.
pub(crate) async fn confirm_deletion(ctx: &Ctx, ns: &str, pod: &Pod) {
    let on_node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some();
    if !on_node || pod.metadata.deletion_grace_period_seconds.unwrap_or(0) == 0 {
        return;
    }
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(kube::api::Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
        ..Default::default()
    };
    if let Err(e) = api::<Pod>(ctx, Some(ns)).delete(name, &dp).await {
        tracing::debug!(pod = name, error = %e, "pod deletion not confirmed");
    }
}

/// Annotation `pv.kubernetes.io/provisioned-by` of the PersistentVolumes the landscape provisions: an external
/// provisioner's name, so that kube-controller-manager's PV controller leaves their deletion to the landscape
/// (`pkg/controller/volume/persistentvolume/pv_controller.go`, `reclaimVolume` → `deleteVolumeOperation` only for
/// in-tree plugins).
pub const PROVISIONED_BY: &str = "playground.druidctl.gardener.cloud/local-path";

/// The volume provisioner: a PersistentVolume (a directory of this machine) pre-bound to a pending `pvc` through
/// `spec.claimRef`; kube-controller-manager's PV controller then binds the claim to it.
async fn provision(ctx: &Ctx, pvc: &PersistentVolumeClaim) {
    let uid = pvc.metadata.uid.clone().unwrap_or_default();
    let pending =
        pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()).is_none() && pvc.metadata.deletion_timestamp.is_none();
    if !pending || ctx.provisioned.lock().expect("provisioned").contains(&uid) {
        return;
    }
    let ns = pvc.metadata.namespace.clone().unwrap_or_default();
    let name = pvc.metadata.name.clone().unwrap_or_default();
    let spec = pvc.spec.clone().unwrap_or_default();
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_else(|| "1Gi".into());
    let pv = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": format!("pvc-{uid}"), "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONED_BY}},
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": spec.access_modes.clone().unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": spec.storage_class_name.clone().unwrap_or_default(),
            "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": ns, "name": name, "uid": uid},
            "hostPath": {"path": ctx.volume_dir(&ns, &format!("{name}-{uid}")).display().to_string()},
        },
    });
    let Ok(pv) = serde_json::from_value::<k8s_openapi::api::core::v1::PersistentVolume>(pv) else { return };
    let api: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(ctx.clients.statefulset.clone());
    match api.create(&PostParams::default(), &pv).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => {
            tracing::debug!(pvc = %name, error = %e, "volume not provisioned");
            return;
        }
    }
    ctx.provisioned.lock().expect("provisioned").insert(uid);
}

/// The provisioner's reclaim policy `Delete`: the PersistentVolume of a volume whose claim is gone is deleted.
async fn reclaim(ctx: &Ctx, volume: &str) {
    // `volume` is `<pvc>-<uid>`; the PV is `pvc-<uid>`.
    let Some(uid) = volume.len().checked_sub(36).and_then(|i| volume.get(i..)) else { return };
    let api: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(ctx.clients.statefulset.clone());
    match api.delete(&format!("pvc-{uid}"), &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => tracing::debug!(volume, error = %e, "volume not reclaimed"),
    }
    ctx.provisioned.lock().expect("provisioned").remove(uid);
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

/// Node for a new pod in `ns`: a Ready, schedulable Node not being deleted that hosts no pod in `taken` (first by
/// name) and belongs to `ns`'s machines — backed by a live Machine of `ns` when Machines are in this cluster, else
/// (MCM's Machines in another cluster) a Node MCM made for `ns` (provider ID `playground:///<ns>/…`);
/// `playground-node` when `ns` has neither (landscapes without MCM); `None` (the pod stays unschedulable for now,
/// as with a real scheduler) while such Nodes exist but none fits, e.g. while a replacement node is not Ready yet.
pub(crate) async fn schedule(ctx: &Ctx, ns: &str, taken: &HashSet<String>) -> Option<String> {
    let machines = Api::<Machine>::namespaced(ctx.clients.statefulset.clone(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let nodes = Api::<Node>::all(ctx.clients.statefulset.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let prefix = format!("playground:///{ns}/");
    let of_ns =
        |n: &Node| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()).is_some_and(|p| p.starts_with(&prefix));
    if machines.is_empty() && !nodes.iter().any(of_ns) {
        return Some("playground-node".into());
    }
    let mut fit: Vec<String> = nodes
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none() && node_ready(n))
        .filter(|n| !n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false))
        .filter(|n| {
            let name = n.metadata.name.as_deref().unwrap_or_default();
            if machines.is_empty() {
                of_ns(n)
            } else {
                machines.iter().any(|m| m.metadata.deletion_timestamp.is_none() && m.node_name() == Some(name))
            }
        })
        .filter_map(|n| n.metadata.name.clone())
        .filter(|n| !taken.contains(n))
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
    let annotations = member_annotations(ctx, &ns, pod, rt);
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
             "image": super::resources::IMAGE_ETCD_WRAPPER, "imageID": "",
             "state": etcd_state},
            {"name": "backup-restore", "ready": true, "started": true, "restartCount": 0,
             "image": super::resources::IMAGE_BACKUP_RESTORE, "imageID": "",
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

/// A Node the scheduler would place a pod on: its kubelet reports the `Ready` condition `True`
/// (`k8s.io/api/core/v1` NodeReady; kube-scheduler's `nodeunschedulable`/taint plugins act on the
/// not-ready taint the node lifecycle controller derives from it).
fn node_ready(node: &k8s_openapi::api::core::v1::Node) -> bool {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
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
    fn a_pod_whose_status_does_not_show_the_member_is_posted_again() {
        let view = PodView { running: true, ready: true, restart_count: 1, waiting: None, started_at: None };
        let pod = |status: Value| serde_json::from_value::<Pod>(json!({"metadata": {"name": "p"}, "status": status}));
        // Created again by a StatefulSet controller: the API server defaults the phase to Pending.
        assert!(status_differs(&pod(json!({"phase": "Pending"})).unwrap(), &view));
        assert!(status_differs(&Pod::default(), &view));
        let posted = pod(pod_status(&view)).unwrap();
        assert!(!status_differs(&posted, &view));
        // Marked not ready by the node lifecycle controller.
        let mut not_ready = pod_status(&view);
        not_ready["conditions"][3]["status"] = json!("False");
        assert!(status_differs(&pod(not_ready).unwrap(), &view));
    }

    #[test]
    fn ordinals_come_from_pod_names() {
        assert_eq!(ordinal("etcd-main-2", "etcd-main"), Some(2));
        assert_eq!(ordinal("etcd-main-client", "etcd-main"), None);
        assert_eq!(ordinal("etcd-events-0", "etcd-main"), None);
    }
}
