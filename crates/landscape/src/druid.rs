//! The etcd-druid actor: managed resources for every Etcd, the Etcd status, and the rules of the
//! EtcdComponents webhook.
//!
//! The spec is reconciled when the Etcd is new, its generation changed, or it carries
//! `operation: reconcile` (removed afterwards) — never while `suspend-etcd-spec-reconcile` is set. The
//! status is computed on every pass, suspended or not. After a quorum-loss recovery the reconcile puts
//! `initial-cluster` and the StatefulSet back to `spec.replicas`; the new members join as learners
//! (the sidecar's decision, see [`super::member`]).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::resources;
use super::status::{
    BackupObservation, EtcdObservation, HEALTH_TYPES, MemberObservation, StatefulSetObservation,
    carry_transition_times, compute_status,
};
use super::{Ctx, LandscapeError, tick};
use druid_api::Etcd;
use druid_api::names::{
    DISABLE_COMPONENT_PROTECTION, DISABLE_RESOURCE_PROTECTION_LEGACY, DRUID_OPERATION, GARDENER_OPERATION,
    LABEL_PART_OF, OPERATION_RECONCILE, SCALED_TO_MULTI_NODE, SUSPEND_SPEC_RECONCILE,
};

/// The user the druid actor acts as (exempt from component protection).
pub const DRUID_USER: &str = "system:serviceaccount:garden:etcd-druid";

/// Runs the actor until the landscape stops.
pub(crate) async fn run(ctx: Arc<Ctx>) {
    while tick(&ctx).await {
        if let Err(e) = pass(&ctx).await {
            tracing::debug!(error = %e, "druid pass failed");
        }
    }
}

async fn pass(ctx: &Ctx) -> Result<(), LandscapeError> {
    let client = ctx.clients.druid.clone();
    // Listed as JSON: the status as stored, with the fields the typed `Etcd` does not model (`selector`,
    // `etcd`, `peerUrlTLSEnabled`), so an unchanged status compares equal and is not written again.
    let raw: Api<DynamicObject> = match &ctx.opts.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<Etcd>(&())),
        None => Api::all_with(client.clone(), &ApiResource::erase::<Etcd>(&())),
    };
    let etcds = raw.list(&ListParams::default()).await.map_err(|e| LandscapeError::kube("list etcds", e))?;
    for obj in etcds.items {
        if obj.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = obj.metadata.name.clone().unwrap_or_default();
        let stored_status = obj.data.get("status").cloned().unwrap_or(Value::Null);
        let etcd: Etcd = match serde_json::to_value(&obj).and_then(serde_json::from_value) {
            Ok(e) => e,
            Err(e) => {
                tracing::debug!(etcd = %name, error = %e, "druid: Etcd not readable");
                continue;
            }
        };
        if let Err(e) = reconcile(ctx, &client, etcd, stored_status).await {
            tracing::debug!(etcd = %name, error = %e, "druid reconcile failed");
        }
    }
    Ok(())
}

/// Whether the Etcd asks for a spec reconcile now.
pub fn wants_spec_reconcile(etcd: &Etcd) -> bool {
    let ann = etcd.metadata.annotations.clone().unwrap_or_default();
    if ann.contains_key(SUSPEND_SPEC_RECONCILE) {
        return false;
    }
    let requested = [GARDENER_OPERATION, DRUID_OPERATION]
        .iter()
        .any(|k| ann.get(*k).map(String::as_str) == Some(OPERATION_RECONCILE));
    let observed = etcd.status.as_ref().and_then(|s| s.observed_generation);
    requested || observed.is_none() || observed != etcd.metadata.generation
}

/// Whether component protection is off for this Etcd.
pub fn protection_disabled(annotations: &Value) -> bool {
    [DISABLE_COMPONENT_PROTECTION, DISABLE_RESOURCE_PROTECTION_LEGACY].iter().any(|k| annotations.get(*k).is_some())
}

/// The EtcdComponents webhook's verdict on a change by `user` to a resource of kind `resource`
/// (`subresource` e.g. `status`) that belongs to an Etcd with `etcd_annotations`: `Err(reason)` denies.
pub fn component_protection_verdict(
    resource: &str,
    subresource: Option<&str>,
    is_update: bool,
    user: &str,
    exempt_users: &[&str],
    etcd_annotations: &Value,
) -> Result<(), String> {
    const PROTECTED: &[&str] = &[
        "statefulsets",
        "configmaps",
        "services",
        "leases",
        "poddisruptionbudgets",
        "serviceaccounts",
        "roles",
        "rolebindings",
    ];
    if !PROTECTED.contains(&resource) || subresource == Some("status") || exempt_users.contains(&user) {
        return Ok(());
    }
    // Members' sidecars renew their leases all the time.
    if resource == "leases" && is_update {
        return Ok(());
    }
    if protection_disabled(etcd_annotations) {
        return Ok(());
    }
    Err(format!(
        "changes to {resource} managed by etcd-druid are blocked by the EtcdComponents webhook; annotate the Etcd with {DISABLE_COMPONENT_PROTECTION} first"
    ))
}

fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&kube::api::GroupVersionKind::gvk(group, version, kind), plural)
}

async fn create_or_patch(client: &Client, ns: &str, obj: Value, patch_existing: bool) -> Result<(), LandscapeError> {
    let kind = obj["kind"].as_str().unwrap_or_default().to_string();
    let (group, version) = match obj["apiVersion"].as_str().unwrap_or_default().split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), obj["apiVersion"].as_str().unwrap_or_default().to_string()),
    };
    let plural = match kind.as_str() {
        "PodDisruptionBudget" => "poddisruptionbudgets".to_string(),
        k => format!("{}s", k.to_lowercase()),
    };
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar(&group, &version, &kind, &plural));
    match api.get_opt(&name).await.map_err(|e| LandscapeError::kube(format!("get {kind} {ns}/{name}"), e))? {
        None => {
            let dyn_obj: DynamicObject =
                serde_json::from_value(obj).map_err(|e| LandscapeError::ApiServer(e.to_string()))?;
            match api.create(&PostParams::default(), &dyn_obj).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(LandscapeError::kube(format!("create {kind} {ns}/{name}"), e)),
            }
        }
        Some(_) if patch_existing => {
            let mut patch = obj.clone();
            if let Some(m) = patch["metadata"].as_object_mut() {
                m.remove("ownerReferences");
            }
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| LandscapeError::kube(format!("patch {kind} {ns}/{name}"), e))
        }
        Some(_) => Ok(()),
    }
}

async fn reconcile(ctx: &Ctx, client: &Client, etcd: Etcd, old: Value) -> Result<(), LandscapeError> {
    let ns = etcd.metadata.namespace.clone().unwrap_or_default();
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let names = etcd.managed_names();
    let etcd_api: Api<Etcd> = Api::namespaced(client.clone(), &ns);
    let reconciled_now = wants_spec_reconcile(&etcd);
    if reconciled_now {
        let replicas = etcd.spec.replicas;
        let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
        let existing =
            sts_api.get_opt(&names.statefulset()).await.map_err(|e| LandscapeError::kube("get statefulset", e))?;
        // internal/controller/etcd/reconciler.go: the components in their registry order; the ConfigMap's checksum
        // goes into the pod template (configmap.go Sync → statefulset builder.go getPodTemplateAnnotations).
        let config_map = resources::config_map(&etcd);
        let checksum = resources::config_map_checksum(&config_map);
        let mut objects =
            vec![resources::service_account(&etcd), resources::role(&etcd), resources::role_binding(&etcd), config_map];
        objects.extend(resources::services(&etcd));
        objects.push(resources::pod_disruption_budget(&etcd));
        for o in objects {
            create_or_patch(client, &ns, o, true).await?;
        }
        for l in resources::leases(&etcd, ctx.opts.lease_seconds) {
            create_or_patch(client, &ns, l, false).await?;
        }
        let inputs = resources::StatefulSetInputs {
            replicas,
            config_map_checksum: Some(checksum),
            local_store_host_path: local_store_host_path(client, &etcd).await,
        };
        let mut sts = resources::stateful_set(&etcd, &inputs);
        if let Some(old) = &existing
            && old.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0) < replicas
            && old.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0) > 0
        {
            sts["metadata"]["annotations"] = json!({SCALED_TO_MULTI_NODE: ""});
        }
        create_or_patch(client, &ns, sts, true).await?;
        let mut meta_patch = json!({"metadata": {"annotations": {}}});
        let ann = etcd.metadata.annotations.clone().unwrap_or_default();
        for k in [GARDENER_OPERATION, DRUID_OPERATION] {
            if ann.contains_key(k) {
                meta_patch["metadata"]["annotations"][k] = Value::Null;
            }
        }
        if meta_patch["metadata"]["annotations"].as_object().is_some_and(|m| !m.is_empty()) {
            etcd_api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&meta_patch))
                .await
                .map_err(|e| LandscapeError::kube("remove operation annotation", e))?;
        }
    }
    let status = observe_status(ctx, client, &etcd, &old, reconciled_now).await?;
    let mut new = status;
    carry_transition_times(&mut new, &old);
    if reconciled_now {
        let now = jiff::Timestamp::now().to_string();
        new["lastOperation"] = json!({"type": "Reconcile", "state": "Succeeded", "description": "Reconciliation succeeded",
            "runID": uuid::Uuid::new_v4().to_string(), "lastUpdateTime": now});
    } else if let Some(lo) = old.get("lastOperation") {
        new["lastOperation"] = lo.clone();
    }
    // etcd-druid writes the status on every status sync (`--etcd-status-sync-period`, default 15s,
    // internal/controller/etcd/config.go) with a fresh `lastUpdateTime` on every condition (builder.go), and
    // whenever a reconcile changes it; between syncs an unchanged status is not written.
    let now = jiff::Timestamp::now();
    let synced_ago = last_update(&old).map(|t| now.duration_since(t));
    let sync_due = synced_ago.is_none_or(|d| d >= jiff::SignedDuration::from_secs(STATUS_SYNC_PERIOD.as_secs() as i64));
    if !status_equal(&new, &old) || sync_due {
        stamp_update_time(&mut new, now);
        etcd_api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": new})))
            .await
            .map_err(|e| LandscapeError::kube("update etcd status", e))?;
    }
    Ok(())
}

/// etcd-druid v0.37.1 `internal/store/store.go` `GetHostMountPathFromSecretRef`: the `hostPath` of a Local store's
/// secret, when the store names one (`None`: the default directory).
async fn local_store_host_path(client: &Client, etcd: &Etcd) -> Option<String> {
    let store = etcd.spec.backup.store.as_ref()?;
    if store.provider.as_deref().and_then(resources::storage_provider) != Some("Local") {
        return None;
    }
    let secret = store.secret_ref.as_ref()?;
    let ns = secret.namespace.clone().or_else(|| etcd.metadata.namespace.clone()).unwrap_or_default();
    let s = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns)
        .get_opt(&secret.name)
        .await
        .ok()??;
    let bytes = s.data?.get("hostPath")?.0.clone();
    String::from_utf8(bytes).ok()
}

/// etcd-druid's default `--etcd-status-sync-period`.
const STATUS_SYNC_PERIOD: std::time::Duration = std::time::Duration::from_secs(15);

/// The newest `lastUpdateTime` of the conditions: when druid last synced this status.
fn last_update(status: &Value) -> Option<jiff::Timestamp> {
    status["conditions"]
        .as_array()?
        .iter()
        .filter(|c| c["type"].as_str().is_some_and(|t| HEALTH_TYPES.contains(&t)))
        .filter_map(|c| c["lastUpdateTime"].as_str()?.parse().ok())
        .max()
}

/// builder.go: every condition the health check computes gets `lastUpdateTime` = now; the others (written by
/// the compaction controller) stay as they were.
fn stamp_update_time(status: &mut Value, now: jiff::Timestamp) {
    if let Some(conds) = status["conditions"].as_array_mut() {
        for c in conds {
            if c["type"].as_str().is_some_and(|t| HEALTH_TYPES.contains(&t)) {
                c["lastUpdateTime"] = json!(now.to_string());
            }
        }
    }
}

/// Compares two statuses ignoring update timestamps the API server may reformat.
fn status_equal(a: &Value, b: &Value) -> bool {
    fn strip(v: &Value) -> Value {
        let mut v = v.clone();
        for list in ["conditions", "members"] {
            if let Some(items) = v[list].as_array_mut() {
                for i in items {
                    if let Some(o) = i.as_object_mut() {
                        o.remove("lastUpdateTime");
                        o.remove("lastTransitionTime");
                    }
                }
            }
        }
        v
    }
    let (a, b) = (strip(a), strip(b));
    a.as_object().is_some_and(|ao| ao.iter().all(|(k, v)| b.get(k) == Some(v)))
}

async fn observe_status(
    ctx: &Ctx,
    client: &Client,
    etcd: &Etcd,
    previous: &Value,
    reconciled_now: bool,
) -> Result<Value, LandscapeError> {
    let ns = etcd.metadata.namespace.clone().unwrap_or_default();
    let etcd_name = etcd.metadata.name.clone().unwrap_or_default();
    let names = etcd.managed_names();
    // From the watch-driven caches once they are filled, as etcd-druid reads them through its cached client;
    // from the API server before.
    let selector = format!("{LABEL_PART_OF}={etcd_name}");
    let part_of = |labels: &Option<std::collections::BTreeMap<String, String>>| {
        labels.as_ref().and_then(|l| l.get(LABEL_PART_OF)).is_some_and(|v| *v == etcd_name)
    };
    let cache = &ctx.druid_cache;
    let sts = match cache.statefulsets.all() {
        Some(all) => all
            .iter()
            .find(|s| s.metadata.namespace.as_deref() == Some(&ns) && s.metadata.name == Some(names.statefulset()))
            .map(|s| (**s).clone()),
        None => Api::<StatefulSet>::namespaced(client.clone(), &ns)
            .get_opt(&names.statefulset())
            .await
            .map_err(|e| LandscapeError::kube("get statefulset", e))?,
    };
    let lp = ListParams::default().labels(&selector);
    let in_etcd = |ns_of: Option<&str>, labels: &Option<std::collections::BTreeMap<String, String>>| {
        ns_of == Some(ns.as_str()) && part_of(labels)
    };
    let leases: Vec<Lease> = cached_or_listed(cache.leases.all(), client, &ns, &lp, "list leases", |l: &Lease| {
        in_etcd(l.metadata.namespace.as_deref(), &l.metadata.labels)
    })
    .await?;
    let pods: Vec<Pod> = cached_or_listed(cache.pods.all(), client, &ns, &lp, "list pods", |p: &Pod| {
        in_etcd(p.metadata.namespace.as_deref(), &p.metadata.labels)
    })
    .await?;
    let events: Vec<k8s_openapi::api::core::v1::Event> = match cache.events.all() {
        Some(all) => all
            .iter()
            .filter(|e| e.metadata.namespace.as_deref() == Some(&ns) && e.type_.as_deref() == Some("Warning"))
            .map(|e| (**e).clone())
            .collect(),
        None => Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), &ns)
            .list(&ListParams::default().fields("type=Warning"))
            .await
            .map(|l| l.items)
            .unwrap_or_default(),
    };
    let lease = |n: &str| leases.iter().find(|l| l.metadata.name.as_deref() == Some(n));
    let has_condition = |n: &str, type_: &str| {
        pods.iter().any(|p| {
            p.metadata.name.as_deref() == Some(n)
                && p.metadata.deletion_timestamp.is_none()
                && p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
        })
    };
    // internal/health/etcdmember/check_ready.go: one member per expected lease (GetMemberLeaseNames over
    // spec.replicas); the pod is the lease name without `<memberNamePrefix>-`.
    let spec_replicas = etcd.spec.replicas;
    let members = (0..spec_replicas.max(0) as u32)
        .map(|i| {
            let l = lease(&names.member_lease(i));
            let spec = l.and_then(|l| l.spec.clone()).unwrap_or_default();
            MemberObservation {
                name: names.member(i),
                lease_exists: l.is_some(),
                holder: spec.holder_identity.clone(),
                renew_time: spec.renew_time.as_ref().map(|t| t.0),
                containers_ready: has_condition(&names.pod(i), "ContainersReady"),
            }
        })
        .collect();
    let full = lease(&names.full_snapshot_lease());
    let renew = |n: String| lease(&n).and_then(|l| l.spec.as_ref()).and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
    let backup = BackupObservation {
        enabled: etcd.spec.backup.store.as_ref().is_some_and(|s| s.provider.as_deref().is_some_and(|p| !p.is_empty())),
        leases_found: full.is_some() && lease(&names.delta_snapshot_lease()).is_some(),
        full_renewed: renew(names.full_snapshot_lease()),
        full_created: full.and_then(|l| l.metadata.creation_timestamp.as_ref()).map(|t| t.0),
        delta_renewed: renew(names.delta_snapshot_lease()),
        delta_period_seconds: etcd
            .spec
            .backup
            .delta_snapshot_period
            .as_deref()
            .and_then(super::member::parse_go_duration)
            .unwrap_or(ctx.opts.delta_snapshot_interval)
            .as_secs() as i64,
        // check_backup_ready.go: 24h unless computed from the full snapshot schedule.
        full_interval_seconds: 24 * 3600,
    };
    let sts_replicas = sts.as_ref().and_then(|s| s.spec.as_ref()).and_then(|s| s.replicas).unwrap_or(0);
    let pvc_names: Vec<String> = (0..sts_replicas.max(0) as u32).map(|i| names.pvc(i)).collect();
    // kubernetes.FetchPVCWarningMessagesForStatefulSet: Warning events of the StatefulSet's PVCs.
    let volume_warnings = events
        .iter()
        .filter(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.involved_object.kind.as_deref() == Some("PersistentVolumeClaim")
                && e.involved_object.name.as_ref().is_some_and(|n| pvc_names.contains(n))
        })
        .filter_map(|e| e.message.clone())
        .collect();
    let sts_obs = sts.as_ref().map(|s| {
        let st = s.status.clone().unwrap_or_default();
        StatefulSetObservation {
            generation: s.metadata.generation.unwrap_or(0),
            observed_generation: st.observed_generation.unwrap_or(0),
            replicas: sts_replicas,
            updated_replicas: st.updated_replicas.unwrap_or(0),
            current_revision: st.current_revision.unwrap_or_default(),
            update_revision: st.update_revision.unwrap_or_default(),
        }
    });
    let current = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).count() as i32;
    let ready =
        pods.iter().filter(|p| p.metadata.name.as_deref().is_some_and(|n| has_condition(n, "Ready"))).count() as i32;
    let observed_generation = if reconciled_now {
        etcd.metadata.generation
    } else {
        etcd.status.as_ref().and_then(|s| s.observed_generation)
    };
    let lease_seconds = i64::from(ctx.opts.lease_seconds.max(1));
    let obs = EtcdObservation {
        key: format!("{ns}/{etcd_name}"),
        spec_replicas,
        observed_generation,
        sts: sts_obs,
        current_replicas: current,
        ready_replicas: ready,
        members,
        backup,
        volume_warnings,
        selector: format!("app.kubernetes.io/managed-by=etcd-druid,{LABEL_PART_OF}={etcd_name}"),
        peer_tls: etcd.spec.etcd.peer_url_tls.is_some(),
        previous: previous.clone(),
        // The landscape's etcd-druid runs with member thresholds matched to its short heartbeats
        // (controllers.etcd.etcdMember.unknownThreshold / notReadyThreshold in druid's configuration).
        unknown_threshold_seconds: lease_seconds,
        not_ready_threshold_seconds: 2 * lease_seconds,
    };
    Ok(compute_status(&obs, jiff::Timestamp::now()))
}

/// The objects `keep` accepts: from the watch-driven cache once it holds a complete state, else (a cold cache)
/// from one LIST of namespace `ns` by `lp`.
async fn cached_or_listed<K>(
    cached: Option<Vec<Arc<K>>>,
    client: &Client,
    ns: &str,
    lp: &ListParams,
    what: &'static str,
    keep: impl Fn(&K) -> bool,
) -> Result<Vec<K>, LandscapeError>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    match cached {
        Some(all) => Ok(all.iter().filter(|o| keep(o)).map(|o| (**o).clone()).collect()),
        None => Ok(Api::<K>::namespaced(client.clone(), ns)
            .list(lp)
            .await
            .map_err(|e| LandscapeError::kube(what, e))?
            .items),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protection_blocks_operators_until_disabled_but_never_lease_renewals() {
        let on = json!({});
        let off = json!({DISABLE_COMPONENT_PROTECTION: ""});
        assert!(component_protection_verdict("statefulsets", None, true, "alice", &[DRUID_USER], &on).is_err());
        assert!(
            component_protection_verdict("statefulsets", Some("scale"), true, "alice", &[DRUID_USER], &on).is_err()
        );
        assert!(component_protection_verdict("statefulsets", None, true, "alice", &[DRUID_USER], &off).is_ok());
        assert!(component_protection_verdict("statefulsets", None, true, DRUID_USER, &[DRUID_USER], &on).is_ok());
        assert!(component_protection_verdict("leases", None, true, "alice", &[DRUID_USER], &on).is_ok());
        assert!(component_protection_verdict("leases", None, false, "alice", &[DRUID_USER], &on).is_err());
        assert!(
            component_protection_verdict("persistentvolumeclaims", None, false, "alice", &[DRUID_USER], &on).is_ok()
        );
        assert!(
            component_protection_verdict("statefulsets", Some("status"), true, "alice", &[DRUID_USER], &on).is_ok()
        );
    }

    #[test]
    fn spec_reconcile_runs_on_new_generation_or_annotation_unless_suspended() {
        let mut e = super::resources::tests::etcd(3);
        assert!(wants_spec_reconcile(&e), "never reconciled");
        e.status = Some(serde_json::from_value(json!({"observedGeneration": 1})).unwrap());
        assert!(!wants_spec_reconcile(&e));
        e.metadata.annotations = Some([(GARDENER_OPERATION.to_string(), "reconcile".to_string())].into());
        assert!(wants_spec_reconcile(&e));
        e.metadata.annotations.as_mut().unwrap().insert(SUSPEND_SPEC_RECONCILE.into(), "true".into());
        assert!(!wants_spec_reconcile(&e));
    }
}
