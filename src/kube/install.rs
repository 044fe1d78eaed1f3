//! `install`: server-side apply of druidctl's manifests (CRD, ClusterRoles, optional `serve` Deployment), then
//! a wait until the CRD is Established.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch};
use kube::{Client, Resource};
use serde_json::Value;

use super::error::{ClusterError, Subject};
use super::inventory::resource_name;
use super::wait;
use crate::api::patch;

/// One applied object.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Applied {
    /// `kind.group/name`, as kubectl prints it.
    pub reference: String,
    /// `created`, `configured` or `unchanged`.
    pub action: &'static str,
}

fn api_resource(kind: &str) -> Option<(ApiResource, bool)> {
    fn ar<K: Resource<DynamicType = ()>>() -> ApiResource {
        ApiResource::erase::<K>(&())
    }
    Some(match kind {
        "CustomResourceDefinition" => (ar::<CustomResourceDefinition>(), false),
        "ClusterRole" => (ar::<ClusterRole>(), false),
        "ClusterRoleBinding" => (ar::<ClusterRoleBinding>(), false),
        "Namespace" => (ar::<Namespace>(), false),
        "ServiceAccount" => (ar::<ServiceAccount>(), true),
        "Deployment" => (ar::<Deployment>(), true),
        _ => return None,
    })
}

/// Applies `objects` in order with server-side apply (`dry_run`: the server validates, nothing is stored).
pub async fn apply(client: &Client, objects: &[Value], dry_run: bool) -> Result<Vec<Applied>, ClusterError> {
    let mut out = Vec::new();
    for obj in objects {
        let kind = obj["kind"].as_str().unwrap_or_default();
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = obj["metadata"]["namespace"].as_str();
        let (ar, namespaced) =
            api_resource(kind).ok_or_else(|| ClusterError::Invalid(format!("druidctl cannot apply kind {kind}")))?;
        let api: Api<DynamicObject> = match (namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
            _ => Api::all_with(client.clone(), &ar),
        };
        let subject = Subject { kind, name, namespace: namespace.unwrap_or_default() };
        let before = api.get_opt(name).await.map_err(|e| ClusterError::from_kube(e, &subject))?;
        let after = api
            .patch(name, &patch::apply_params(dry_run), &Patch::Apply(obj))
            .await
            .map_err(|e| ClusterError::from_kube(e, &subject))?;
        let action = match before {
            None => "created",
            Some(b) if b.metadata.resource_version == after.metadata.resource_version => "unchanged",
            Some(_) => "configured",
        };
        out.push(Applied { reference: format!("{}/{name}", resource_name(&ar)), action });
    }
    Ok(out)
}

/// Whether a CRD reports `Established=True`.
pub fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"))
}

/// Waits until CRD `name` is Established.
pub async fn wait_established(client: &Client, name: &str, timeout: Duration) -> Result<(), ClusterError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let subject = Subject { kind: "customresourcedefinition", name, namespace: "" };
    wait::until(&api, subject, timeout, &format!("waiting for CRD {name} to be Established"), established)
        .await
        .map(|_| ())
}
