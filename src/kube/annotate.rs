//! The annotation commands: ask etcd-druid to reconcile, suspend or resume spec reconciliation, disable or
//! re-enable the component protection webhook. Each is one targeted merge patch of `metadata.annotations`.

use std::time::Duration;

use kube::Client;
use kube::api::Api;

use super::error::{ClusterError, Subject};
use super::target::ObjectKey;
use super::wait;
use crate::api::names::{
    DISABLE_COMPONENT_PROTECTION, DISABLE_RESOURCE_PROTECTION_LEGACY, DRUID_OPERATION, GARDENER_OPERATION,
    OPERATION_RECONCILE, SUSPEND_SPEC_RECONCILE,
};
use crate::api::{Etcd, patch};

/// Errors of the annotation commands.
#[derive(Debug, thiserror::Error)]
pub enum AnnotateError {
    /// Talking to the cluster failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A safety check refused the change; nothing was changed.
    #[error("{0}")]
    Rejected(String),
}

/// What an annotation command did to one Etcd.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Outcome {
    /// The Etcd.
    pub etcd: ObjectKey,
    /// Whether the Etcd was changed (false: it already was in the requested state).
    pub changed: bool,
    /// One sentence for the operator.
    pub message: String,
}

fn annotations(etcd: &Etcd) -> std::collections::BTreeMap<String, String> {
    etcd.metadata.annotations.clone().unwrap_or_default()
}

/// Whether a reconcile request is still pending (either operation annotation says `reconcile`).
pub fn reconcile_pending(etcd: &Etcd) -> bool {
    let a = annotations(etcd);
    [GARDENER_OPERATION, DRUID_OPERATION].iter().any(|k| a.get(*k).map(String::as_str) == Some(OPERATION_RECONCILE))
}

/// Whether spec reconciliation is suspended.
pub fn spec_reconcile_suspended(etcd: &Etcd) -> bool {
    annotations(etcd).contains_key(SUSPEND_SPEC_RECONCILE)
}

/// Whether the component protection webhook is disabled (either spelling).
pub fn component_protection_disabled(etcd: &Etcd) -> bool {
    let a = annotations(etcd);
    a.contains_key(DISABLE_COMPONENT_PROTECTION) || a.contains_key(DISABLE_RESOURCE_PROTECTION_LEGACY)
}

/// Whether druid has reconciled: no reconcile request pending and the current generation observed.
pub fn reconciled(etcd: &Etcd) -> bool {
    let observed = etcd.status.as_ref().and_then(|s| s.observed_generation);
    !reconcile_pending(etcd) && observed >= etcd.metadata.generation
}

async fn patch_etcd(
    client: &Client,
    key: &ObjectKey,
    p: &kube::api::Patch<serde_json::Value>,
) -> Result<Etcd, ClusterError> {
    let api: Api<Etcd> = Api::namespaced(client.clone(), &key.namespace);
    api.patch(&key.name, &patch::params(), p)
        .await
        .map_err(|e| ClusterError::from_kube(e, &Subject { kind: "etcd", name: &key.name, namespace: &key.namespace }))
}

/// Refuses a reconcile request while spec reconciliation is suspended: druid would ignore it.
pub fn check_reconcile_allowed(etcd: &Etcd) -> Result<(), AnnotateError> {
    if spec_reconcile_suspended(etcd) {
        let key = super::etcds::key_of(etcd);
        return Err(AnnotateError::Rejected(format!(
            "spec reconciliation of etcd {key} is suspended, so druid would ignore the request; run `{} resume-reconcile {}` first",
            crate::output::command_name(),
            key.name
        )));
    }
    Ok(())
}

/// Asks etcd-druid to reconcile `etcd` now (`gardener.cloud/operation: reconcile`, which old and new druid
/// honour). Refused while spec reconciliation is suspended, because druid would ignore the request.
pub async fn request_reconcile(client: &Client, etcd: &Etcd) -> Result<Outcome, AnnotateError> {
    check_reconcile_allowed(etcd)?;
    let key = super::etcds::key_of(etcd);
    if reconcile_pending(etcd) {
        return Ok(Outcome {
            etcd: key.clone(),
            changed: false,
            message: format!("etcd {key}: reconcile already requested"),
        });
    }
    patch_etcd(client, &key, &patch::set_annotation(GARDENER_OPERATION, OPERATION_RECONCILE)).await?;
    Ok(Outcome { etcd: key.clone(), changed: true, message: format!("etcd {key}: reconcile requested") })
}

/// Waits until druid has picked up the reconcile request: annotation removed and generation observed.
pub async fn wait_reconciled(client: &Client, key: &ObjectKey, timeout: Duration) -> Result<Etcd, ClusterError> {
    let api: Api<Etcd> = Api::namespaced(client.clone(), &key.namespace);
    let subject = Subject { kind: "etcd", name: &key.name, namespace: &key.namespace };
    wait::until(&api, subject, timeout, &format!("waiting for etcd-druid to reconcile etcd {key}"), reconciled).await
}

/// Suspends (`true`) or resumes (`false`) etcd-druid's reconciliation of the Etcd spec.
pub async fn set_spec_reconcile_suspended(
    client: &Client,
    etcd: &Etcd,
    suspend: bool,
) -> Result<Outcome, AnnotateError> {
    let key = super::etcds::key_of(etcd);
    let now = spec_reconcile_suspended(etcd);
    if now == suspend {
        let state = if suspend { "already suspended" } else { "not suspended" };
        return Ok(Outcome {
            etcd: key.clone(),
            changed: false,
            message: format!("etcd {key}: spec reconciliation {state}"),
        });
    }
    let p = if suspend {
        patch::set_annotation(SUSPEND_SPEC_RECONCILE, "true")
    } else {
        patch::remove_annotations(&[SUSPEND_SPEC_RECONCILE])
    };
    patch_etcd(client, &key, &p).await?;
    let verb = if suspend { "suspended" } else { "resumed" };
    Ok(Outcome { etcd: key.clone(), changed: true, message: format!("etcd {key}: spec reconciliation {verb}") })
}

/// Enables (`true`: removes both disable annotations) or disables (`false`) the component protection webhook.
pub async fn set_component_protection(client: &Client, etcd: &Etcd, enabled: bool) -> Result<Outcome, AnnotateError> {
    let key = super::etcds::key_of(etcd);
    let disabled = component_protection_disabled(etcd);
    if disabled != enabled {
        let state = if enabled { "already enabled" } else { "already disabled" };
        return Ok(Outcome {
            etcd: key.clone(),
            changed: false,
            message: format!("etcd {key}: component protection {state}"),
        });
    }
    let p = if enabled {
        patch::remove_annotations(&[DISABLE_COMPONENT_PROTECTION, DISABLE_RESOURCE_PROTECTION_LEGACY])
    } else {
        patch::set_annotation(DISABLE_COMPONENT_PROTECTION, "true")
    };
    patch_etcd(client, &key, &p).await?;
    let verb = if enabled { "enabled" } else { "disabled: the managed resources can now be changed and deleted" };
    Ok(Outcome { etcd: key.clone(), changed: true, message: format!("etcd {key}: component protection {verb}") })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn etcd(annotations: &[(&str, &str)], generation: i64, observed: Option<i64>) -> Etcd {
        let mut e = Etcd::new("main", Default::default());
        e.metadata = ObjectMeta {
            name: Some("main".into()),
            namespace: Some("ns".into()),
            generation: Some(generation),
            annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        };
        e.status = Some(crate::api::etcd::EtcdStatus { observed_generation: observed, ..Default::default() });
        e
    }

    #[test]
    fn reconciled_needs_annotation_gone_and_generation_observed() {
        assert!(!reconciled(&etcd(&[(GARDENER_OPERATION, "reconcile")], 2, Some(2))));
        assert!(!reconciled(&etcd(&[(DRUID_OPERATION, "reconcile")], 2, Some(2))));
        assert!(!reconciled(&etcd(&[], 3, Some(2))));
        assert!(reconciled(&etcd(&[], 3, Some(3))));
    }

    #[test]
    fn legacy_protection_annotation_counts_as_disabled() {
        assert!(component_protection_disabled(&etcd(&[(DISABLE_RESOURCE_PROTECTION_LEGACY, "")], 1, None)));
        assert!(!component_protection_disabled(&etcd(&[], 1, None)));
    }
}
