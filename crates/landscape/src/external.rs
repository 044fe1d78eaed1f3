//! The playground against an API server it did not start (`playground up --kubeconfig FILE`): connecting,
//! installing the CRDs with server-side apply, the record of what it created (`<state>/playground.json`), and
//! removing exactly that again.
//!
//! What the embedded server does for the landscape and an external one cannot is listed by
//! [`external_fallbacks`]; `druidctl playground status` prints it from the record.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::LandscapeError;

/// Field manager of everything the playground applies.
pub const FIELD_MANAGER: &str = "druidctl-playground";
/// Label on the namespaces the playground creates (value: the state directory's record id).
pub const LABEL_CREATED_BY: &str = "playground.druidctl.gardener.cloud/created-by";
/// Name of the record in the state directory.
pub const RECORD_FILE: &str = "playground.json";

/// An API server the playground did not start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExternalServer {
    /// Kubeconfig file (default: `$KUBECONFIG`, else `~/.kube/config`, as kubectl).
    pub kubeconfig: Option<PathBuf>,
    /// Context (default: the kubeconfig's current context).
    pub context: Option<String>,
}

/// Something the embedded API server does for the landscape that this server does not, and what the
/// playground does instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fallback {
    /// The capability.
    pub capability: String,
    /// What happens instead.
    pub instead: String,
}

/// What a playground is and what it created, kept in `<state>/playground.json` so that `status` can show it and
/// `down` (also after a crash) removes exactly what `up` created.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlaygroundRecord {
    /// `embedded` or `external`.
    pub mode: String,
    /// URL of the API server.
    pub server: String,
    /// Kubeconfig context (external).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Namespaces of the Etcds.
    pub namespaces: Vec<String>,
    /// Namespaces this playground created (and `down` deletes).
    #[serde(default)]
    pub created_namespaces: Vec<String>,
    /// CRDs that did not exist before and this playground created (and `down` deletes).
    #[serde(default)]
    pub created_crds: Vec<String>,
    /// CRDs that existed before and were used as they are (never changed or deleted).
    #[serde(default)]
    pub existing_crds: Vec<String>,
    /// Capabilities replaced by a fallback.
    #[serde(default)]
    pub fallbacks: Vec<Fallback>,
}

impl PlaygroundRecord {
    /// Reads `<state_dir>/playground.json` (`None` when there is none).
    pub fn read(state_dir: &Path) -> Option<PlaygroundRecord> {
        serde_json::from_str(&std::fs::read_to_string(state_dir.join(RECORD_FILE)).ok()?).ok()
    }

    /// Writes `<state_dir>/playground.json` atomically.
    pub fn write(&self, state_dir: &Path) -> Result<(), LandscapeError> {
        let path = state_dir.join(RECORD_FILE);
        let tmp = state_dir.join(format!("{RECORD_FILE}.tmp"));
        let text = serde_json::to_string_pretty(self).expect("record serializes");
        std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, &path)).map_err(|e| LandscapeError::Io {
            action: "write",
            path,
            source: e,
        })
    }

    /// Whether the playground runs against an external API server.
    pub fn is_external(&self) -> bool {
        self.mode == "external"
    }
}

/// What the landscape gets on an external API server instead of the embedded server's powers.
pub fn external_fallbacks() -> Vec<Fallback> {
    let f = |capability: &str, instead: &str| Fallback { capability: capability.into(), instead: instead.into() };
    vec![
        f(
            "service and pod proxy to the backup-restore sidecars",
            "the sidecars listen on loopback of this machine, which the API server cannot reach; the landscape \
             publishes their addresses in the annotation playground.druidctl.gardener.cloud/backup-api-direct \
             (Service E-client: the leader; each Pod: its member) and druidctl talks to them directly, so druidctl \
             must run on this machine",
        ),
        f(
            "EtcdComponents protection (admission hook of the embedded server)",
            "not enforced: updates and deletes of druid-managed resources are not denied",
        ),
        f(
            "one identity per actor (druid, StatefulSet controller, backup-restore, dependency-watchdog)",
            "every actor acts as the kubeconfig's user",
        ),
        f("break apiserver-restart", "unavailable: the playground cannot restart an API server it did not start"),
    ]
}

/// The kubeconfig at `path`, else the one `KUBECONFIG` (merged, as kubectl does) or `~/.kube/config` names.
fn load_kubeconfig(path: Option<&Path>) -> Result<kube::config::Kubeconfig, LandscapeError> {
    let loaded = match path {
        Some(p) => kube::config::Kubeconfig::read_from(p),
        None => kube::config::Kubeconfig::read(),
    };
    loaded.map_err(|e| LandscapeError::External(format!("no usable kubeconfig: {e}")))
}

/// Waits until the CRD `name` has the `Established` condition, as a client of apiextensions-apiserver must
/// before it serves the resource.
async fn wait_established(client: &kube::Client, name: &str, timeout: Duration) -> Result<(), LandscapeError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let cond = kube::runtime::wait::conditions::is_crd_established();
    tokio::time::timeout(timeout, kube::runtime::wait::await_condition(api, name, cond))
        .await
        .map_err(|_| LandscapeError::External(format!("CRD {name} was not Established within {timeout:?}")))?
        .map_err(|e| LandscapeError::External(format!("waiting for CRD {name}: {e}")))?;
    Ok(())
}

/// Connects to the external server; the client's default namespace is `namespace`.
pub(crate) async fn connect(
    ext: &ExternalServer,
    namespace: &str,
) -> Result<(kube::Client, String, Option<String>), LandscapeError> {
    let kc = load_kubeconfig(ext.kubeconfig.as_deref())?;
    let context = ext.context.clone().or_else(|| kc.current_context.clone());
    let options = kube::config::KubeConfigOptions { context: ext.context.clone(), ..Default::default() };
    let mut config = kube::Config::from_custom_kubeconfig(kc, &options)
        .await
        .map_err(|e| LandscapeError::External(e.to_string()))?;
    config.default_namespace = namespace.to_string();
    let url = config.cluster_url.to_string();
    let client = kube::Client::try_from(config).map_err(|e| LandscapeError::External(e.to_string()))?;
    client
        .apiserver_version()
        .await
        .map_err(|e| LandscapeError::External(format!("cannot reach the API server at {url}: {e}")))?;
    Ok((client, url, context))
}

/// Whether kube-controller-manager acts on this server: its service-account controller gives every namespace a
/// ServiceAccount `default` (`pkg/controller/serviceaccount/serviceaccounts_controller.go`, the `default` entry of
/// `DefaultServiceAccountsControllerOptions`), which the API server alone never creates. A server with it also
/// runs the StatefulSet, Deployment, ReplicaSet, Job, PV binder, namespace, GC and node lifecycle controllers.
pub async fn builtin_controllers(client: &kube::Client) -> Result<bool, LandscapeError> {
    let api: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), "default");
    match api.get_opt("default").await {
        Ok(sa) => Ok(sa.is_some()),
        // Not allowed to look: assume a cluster as it is usually run, with its controllers.
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(true),
        Err(e) => Err(LandscapeError::kube("read ServiceAccount default/default", e)),
    }
}

/// Writes `<state>/kubeconfig`: the external kubeconfig with `context` current and namespace `namespace`
/// (owner-readable only: it carries the user's credentials).
pub(crate) fn write_kubeconfig(
    ext: &ExternalServer,
    context: Option<&str>,
    namespace: &str,
    path: &Path,
) -> Result<(), LandscapeError> {
    let mut kc = load_kubeconfig(ext.kubeconfig.as_deref())?;
    if let Some(ctx) = context {
        kc.current_context = Some(ctx.to_string());
        for named in kc.contexts.iter_mut().filter(|c| c.name == ctx) {
            if let Some(c) = named.context.as_mut() {
                c.namespace = Some(namespace.to_string());
            }
        }
    }
    let text = serde_json::to_string_pretty(&kc).map_err(|e| LandscapeError::External(e.to_string()))?;
    let io = |e| LandscapeError::Io { action: "write", path: path.to_path_buf(), source: e };
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f =
            std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path).map_err(io)?;
        f.write_all(text.as_bytes()).map_err(io)?;
    }
    Ok(())
}

/// The CRDs the playground needs, the vendored upstream ones and druidctl's EtcdOperatorTask, ready for
/// server-side apply (no status; of the metadata only name, labels and annotations).
pub fn crd_documents() -> Result<Vec<Value>, LandscapeError> {
    let mut docs = crate::upstream_crd_documents()?;
    docs.push(serde_json::to_value(druid_api::task::crd()).expect("task CRD serializes"));
    for doc in &mut docs {
        if let Some(m) = doc["metadata"].as_object_mut() {
            m.retain(|k, _| matches!(k.as_str(), "name" | "labels" | "annotations"));
        }
        if let Some(d) = doc.as_object_mut() {
            d.remove("status");
        }
    }
    Ok(docs)
}

/// Installs every CRD that does not exist yet with server-side apply (field manager [`FIELD_MANAGER`]) and
/// records it; existing CRDs are used as they are. Waits until the created ones are Established.
pub(crate) async fn install_crds(
    client: &kube::Client,
    record: &mut PlaygroundRecord,
    state_dir: &Path,
) -> Result<(), LandscapeError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut created = Vec::new();
    for doc in crd_documents()? {
        let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_string();
        if api.get_opt(&name).await.map_err(|e| LandscapeError::kube(format!("read CRD {name}"), e))?.is_some() {
            record.existing_crds.push(name);
            continue;
        }
        // Recorded before the request: a CRD that got created although the answer was lost is still removed.
        record.created_crds.push(name.clone());
        record.write(state_dir)?;
        api.patch(&name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&doc))
            .await
            .map_err(|e| LandscapeError::kube(format!("apply CRD {name}"), e))?;
        created.push(name);
    }
    for name in created {
        wait_established(client, &name, Duration::from_secs(60)).await?;
    }
    Ok(())
}

/// Creates namespace `ns`, which must not exist: the playground works only in namespaces of its own.
pub(crate) async fn create_namespace(
    client: &kube::Client,
    ns: &str,
    record: &mut PlaygroundRecord,
    state_dir: &Path,
) -> Result<(), LandscapeError> {
    let api: Api<Namespace> = Api::all(client.clone());
    let obj: Namespace =
        serde_json::from_value(json!({"metadata": {"name": ns, "labels": {LABEL_CREATED_BY: "druidctl-playground"}}}))
            .expect("namespace object");
    match api.create(&PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }, &obj).await {
        Ok(_) => {
            record.created_namespaces.push(ns.to_string());
            record.write(state_dir)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Err(LandscapeError::External(format!(
            "namespace {ns} already exists; the playground only works in namespaces it creates (choose another \
             --namespace-prefix, or remove it)"
        ))),
        Err(e) => Err(LandscapeError::kube(format!("create namespace {ns}"), e)),
    }
}

/// Namespaced resources that may hold objects with finalizers nobody serves once the landscape is stopped.
fn finalizer_resources() -> Vec<ApiResource> {
    let mut out = vec![
        ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
        ApiResource::erase::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(&()),
    ];
    for doc in crd_documents().unwrap_or_default() {
        if doc["spec"]["scope"] != "Namespaced" {
            continue;
        }
        let group = doc["spec"]["group"].as_str().unwrap_or_default();
        let kind = doc["spec"]["names"]["kind"].as_str().unwrap_or_default();
        let plural = doc["spec"]["names"]["plural"].as_str().unwrap_or_default();
        let versions = doc["spec"]["versions"].as_array().cloned().unwrap_or_default();
        let Some(version) = versions.iter().find(|v| v["storage"] == true).and_then(|v| v["name"].as_str()) else {
            continue;
        };
        out.push(ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural));
    }
    out
}

/// Removes what the record says the playground created, and nothing else: its namespaces (pods force-deleted
/// and finalizers dropped, since no kubelet or controller of the stopped landscape will ever serve them), the
/// Nodes of its Machines (`spec.providerID` `playground:///<namespace>/…`), then the CRDs it created. Call it
/// after the landscape is stopped. Returns what could not be removed within `timeout`.
pub async fn remove_created(
    client: &kube::Client,
    record: &PlaygroundRecord,
    timeout: Duration,
) -> Result<(), LandscapeError> {
    let deadline = Instant::now() + timeout;
    let ns_api: Api<Namespace> = Api::all(client.clone());
    let resources = finalizer_resources();
    for ns in &record.created_namespaces {
        match ns_api.delete(ns, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(LandscapeError::kube(format!("delete namespace {ns}"), e)),
        }
    }
    let mut remaining: Vec<String> = record.created_namespaces.clone();
    while !remaining.is_empty() {
        let mut still = Vec::new();
        for ns in &remaining {
            if ns_api.get_opt(ns).await.map_err(|e| LandscapeError::kube(format!("read namespace {ns}"), e))?.is_none()
            {
                continue;
            }
            still.push(ns.clone());
            release(client, ns, &resources).await;
        }
        remaining = still;
        if remaining.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            return Err(LandscapeError::Timeout { what: format!("namespaces {remaining:?} to be deleted"), timeout });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let all = nodes.list(&ListParams::default()).await.map_err(|e| LandscapeError::kube("list nodes", e))?;
    for node in all.items {
        let provider = node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).unwrap_or_default();
        let ours = record.created_namespaces.iter().any(|ns| provider.starts_with(&format!("playground:///{ns}/")));
        if ours {
            let name = node.metadata.name.clone().unwrap_or_default();
            // MCM (v0.61+) removes its finalizer when it deletes the Node; its actor is stopped by now.
            let fins = node.metadata.finalizers.clone().unwrap_or_default();
            if fins.iter().any(|f| f == druid_api::names::MCM_NODE_FINALIZER) {
                let rest: Vec<&String> = fins.iter().filter(|f| *f != druid_api::names::MCM_NODE_FINALIZER).collect();
                let patch = serde_json::json!({"metadata": {"finalizers": rest}});
                match nodes.patch(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => continue,
                    Err(e) => return Err(LandscapeError::kube(format!("remove the finalizer of node {name}"), e)),
                }
            }
            match nodes.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(LandscapeError::kube(format!("delete node {name}"), e)),
            }
            // The kubelet's node Lease (owned by the Node: the garbage collector would remove it too, later).
            let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
                Api::namespaced(client.clone(), "kube-node-lease");
            match leases.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 403 => {}
                Err(e) => return Err(LandscapeError::kube(format!("delete node lease {name}"), e)),
            }
        }
    }
    // The PersistentVolumes the landscape provisioned for claims of these namespaces (cluster-scoped: the
    // namespaces' deletion leaves them Released). Waits until they are gone (pv-protection holds a bound one).
    let pvs: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(client.clone());
    loop {
        let list = match pvs.list(&ListParams::default()).await {
            Ok(l) => l.items,
            Err(kube::Error::Api(s)) if s.code == 403 => break,
            Err(e) => return Err(LandscapeError::kube("list persistentvolumes", e)),
        };
        let ours: Vec<_> = list
            .into_iter()
            .filter(|pv| {
                let by = pv.metadata.annotations.as_ref().and_then(|a| a.get("pv.kubernetes.io/provisioned-by"));
                let claim_ns = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).and_then(|c| c.namespace.clone());
                by.map(String::as_str) == Some(crate::statefulset::PROVISIONED_BY)
                    && claim_ns.is_some_and(|ns| record.created_namespaces.contains(&ns))
            })
            .collect();
        if ours.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            let names: Vec<_> = ours.iter().filter_map(|pv| pv.metadata.name.clone()).collect();
            return Err(LandscapeError::Timeout {
                what: format!("persistent volumes {names:?} to be deleted"),
                timeout,
            });
        }
        for pv in ours.iter().filter(|pv| pv.metadata.deletion_timestamp.is_none()) {
            let name = pv.metadata.name.clone().unwrap_or_default();
            match pvs.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(LandscapeError::kube(format!("delete persistentvolume {name}"), e)),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in &record.created_crds {
        match crds.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(LandscapeError::kube(format!("delete CRD {name}"), e)),
        }
    }
    Ok(())
}

/// Lets a terminating namespace go: pods are deleted without grace (no kubelet confirms them), finalizers of
/// the landscape's objects are dropped (no controller of the stopped landscape removes them).
async fn release(client: &kube::Client, ns: &str, resources: &[ApiResource]) {
    for ar in resources {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
        let Ok(list) = api.list(&ListParams::default()).await else { continue };
        for obj in list.items {
            let name = obj.metadata.name.clone().unwrap_or_default();
            if obj.metadata.finalizers.as_ref().is_some_and(|f| !f.is_empty()) {
                let patch = json!({"metadata": {"finalizers": null}});
                let _ = api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await;
            }
            if ar.kind == "Pod" {
                let _ = api.delete(&name, &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await;
            }
        }
    }
}
