//! Cluster operations on Certificates: find them (by name, selector, namespace or the Etcd they serve),
//! trigger a renewal exactly like `cmctl renew` (condition `Issuing=True`, reason `ManuallyTriggered`, written
//! to the status subresource) and follow it to the new revision.

use std::time::Duration;

use jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::ApiResource;
use serde::Serialize;
use serde_json::{Value, json};

use super::backoff::next_retry_at;
use super::select::certificates_for_etcd;
use crate::api::Certificate;
use crate::api::certificate::{CONDITION_ISSUING, REASON_MANUALLY_TRIGGERED};
use crate::kube::error::{ClusterError, Subject};
use crate::kube::target::{ObjectKey, TargetArgs, Targets, UsageError, WhenUnnamed, resolve};

/// Message `cmctl renew` writes on the `Issuing` condition.
pub const MANUAL_TRIGGER_MESSAGE: &str = "Certificate re-issuance manually triggered";

/// Errors of certificate operations.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// Talking to the cluster failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The Etcd references no TLS secret written by a Certificate.
    #[error(
        "etcd {etcd:?} in namespace {namespace:?} uses no certificate issued by cert-manager (none of its TLS secrets is a Certificate's secretName)"
    )]
    NoCertificates {
        /// Etcd name.
        etcd: String,
        /// Namespace.
        namespace: String,
    },
    /// The Etcd's certificates come from Gardener's secrets manager, which no cert-manager trigger renews.
    #[error(
        "etcd {etcd:?} in namespace {namespace:?} uses certificates from Gardener's secrets manager ({}), not cert-manager: Gardener renews them itself (a leaf certificate is re-issued at the shoot's reconciliation once 80% of its validity has passed, and the etcd CAs with their certificates rotate with the shoot's CA rotation, `gardener.cloud/operation=rotate-ca-start` then `rotate-ca-complete` on the Shoot)",
        secrets.join(", ")
    )]
    ManagedByGardener {
        /// Etcd name.
        etcd: String,
        /// Namespace.
        namespace: String,
        /// The Etcd's TLS secrets that carry the secrets-manager labels.
        secrets: Vec<String>,
    },
    /// cert-manager failed to issue the new certificate.
    #[error("issuing certificate {name:?} in namespace {namespace:?} failed: {message}; cert-manager retries on its own at {}, or run renew again once the cause is fixed", next_retry.map(|t| t.to_string()).unwrap_or_else(|| "an unknown time".into()))]
    IssuanceFailed {
        /// Certificate.
        name: String,
        /// Namespace.
        namespace: String,
        /// The Issuing condition's message.
        message: String,
        /// Next automatic retry (seeds/000 backoff).
        next_retry: Option<Timestamp>,
    },
}

/// Which Certificates a command acts on.
#[derive(Debug, Clone)]
pub enum CertTargets {
    /// Named Certificates, or every one in a namespace / all namespaces (optionally by selector).
    Certificates(Targets),
    /// Every Certificate behind the TLS secrets of this Etcd.
    Etcd(ObjectKey),
}

/// Resolves certificate targets: `args` (names, `-n`, `-A`, `-l`) against `default_ns`, or with `etcd` the
/// Certificates behind that Etcd's TLS secrets; `all` lists every Certificate in scope when none is named.
pub fn resolve_targets(
    args: &TargetArgs,
    etcd: Option<&str>,
    all: bool,
    default_ns: &str,
) -> Result<CertTargets, UsageError> {
    if let Some(e) = etcd {
        let etcd_args = TargetArgs { names: vec![e.to_string()], ..args.clone() };
        return match resolve(&etcd_args, default_ns, WhenUnnamed::RequireOneName, "etcd")? {
            Targets::Named(mut keys) if keys.len() == 1 => Ok(CertTargets::Etcd(keys.remove(0))),
            _ => Err(UsageError("--etcd takes one etcd name".into())),
        };
    }
    let when = if all { WhenUnnamed::ListAll } else { WhenUnnamed::RequireNameOrSelector };
    resolve(args, default_ns, when, "certificate").map(CertTargets::Certificates).map_err(|e| {
        if args.names.is_empty() && !all && args.selector.is_none() {
            UsageError("name the certificates to renew, or use --etcd ETCD, --all or -l SELECTOR".into())
        } else {
            e
        }
    })
}

/// The `cert-manager.io/v1` `certificates` resource.
pub fn certificate_resource() -> ApiResource {
    ApiResource::erase::<Certificate>(&())
}

/// Finds the Certificates `targets` names; a named Certificate that does not exist is an error.
pub async fn find(client: &Client, targets: &CertTargets) -> Result<Vec<Certificate>, CertError> {
    match targets {
        CertTargets::Certificates(Targets::Named(keys)) => {
            let mut out = Vec::new();
            for k in keys {
                let api: Api<Certificate> = Api::namespaced(client.clone(), &k.namespace);
                let subject = Subject { kind: "certificate", name: &k.name, namespace: &k.namespace };
                out.push(api.get(&k.name).await.map_err(|e| ClusterError::from_kube(e, &subject))?);
            }
            Ok(out)
        }
        CertTargets::Certificates(Targets::Namespace { namespace, selector }) => {
            list(Api::namespaced(client.clone(), namespace), selector.as_deref(), namespace).await
        }
        CertTargets::Certificates(Targets::AllNamespaces { selector }) => {
            list(Api::all(client.clone()), selector.as_deref(), "").await
        }
        CertTargets::Etcd(key) => {
            let etcd = crate::kube::etcds::get(client, key).await?;
            let all = list(Api::namespaced(client.clone(), &key.namespace), None, &key.namespace).await?;
            let mine: Vec<Certificate> = certificates_for_etcd(&etcd, &all).into_iter().cloned().collect();
            if mine.is_empty() {
                let secrets = gardener_managed_secrets(client, &etcd, &key.namespace).await;
                if !secrets.is_empty() {
                    return Err(CertError::ManagedByGardener {
                        etcd: key.name.clone(),
                        namespace: key.namespace.clone(),
                        secrets,
                    });
                }
                return Err(CertError::NoCertificates { etcd: key.name.clone(), namespace: key.namespace.clone() });
            }
            Ok(mine)
        }
    }
}

/// Labels Gardener's secrets manager puts on every secret it manages (gardener/gardener
/// `pkg/utils/secrets/manager/manager.go`: `managed-by: secrets-manager`, `manager-identity`, `name`).
pub const SECRETS_MANAGER_LABEL: &str = "managed-by";
/// Value of [`SECRETS_MANAGER_LABEL`].
pub const SECRETS_MANAGER: &str = "secrets-manager";

/// Whether secret labels say Gardener's secrets manager manages the secret.
pub fn is_secrets_manager_secret(labels: &std::collections::BTreeMap<String, String>) -> bool {
    labels.get(SECRETS_MANAGER_LABEL).map(String::as_str) == Some(SECRETS_MANAGER)
        && labels.contains_key("manager-identity")
}

/// The Etcd's TLS secrets managed by Gardener's secrets manager (metadata only; unreadable ones are skipped).
async fn gardener_managed_secrets(client: &Client, etcd: &crate::api::Etcd, namespace: &str) -> Vec<String> {
    let api: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), namespace);
    let mut out = Vec::new();
    for name in etcd.tls_secret_names() {
        if let Ok(meta) = api.get_metadata(&name).await
            && is_secrets_manager_secret(&meta.metadata.labels.clone().unwrap_or_default())
        {
            out.push(name);
        }
    }
    out
}

async fn list(api: Api<Certificate>, selector: Option<&str>, namespace: &str) -> Result<Vec<Certificate>, CertError> {
    let mut lp = ListParams::default();
    if let Some(s) = selector {
        lp = lp.labels(s);
    }
    let subject = Subject { kind: "certificate", name: "", namespace };
    let mut items = api.list(&lp).await.map_err(|e| ClusterError::from_kube(e, &subject))?.items;
    items.sort_by(|a, b| (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name)));
    Ok(items)
}

/// What `renew` did to one Certificate.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RenewOutcome {
    /// Namespace.
    pub namespace: String,
    /// Certificate.
    pub name: String,
    /// Revision before the renewal.
    pub previous_revision: Option<i64>,
    /// False when an issuance was already in progress (nothing was written, like cmctl).
    pub triggered: bool,
    /// Revision after the renewal, when waited for.
    pub new_revision: Option<i64>,
    /// When the trigger was written.
    pub triggered_at: Timestamp,
    /// One sentence for people.
    pub message: String,
}

/// Options of [`renew`].
#[derive(Debug, Clone, Default)]
pub struct RenewOptions {
    /// Follow each renewal to its new revision, at most this long.
    pub wait: Option<Duration>,
}

/// Whether `cert` has `Issuing=True`.
pub fn is_issuing(cert: &Certificate) -> bool {
    cert.condition(CONDITION_ISSUING).is_some_and(|c| c.status == "True")
}

/// Sets `Issuing=True` (reason `ManuallyTriggered`) on each Certificate's status, like `cmctl renew`;
/// Certificates already issuing are left alone. With `opts.wait`, waits for every new revision.
pub async fn renew(
    client: &Client,
    certs: &[Certificate],
    opts: &RenewOptions,
) -> Result<Vec<RenewOutcome>, CertError> {
    let mut outcomes = Vec::new();
    for cert in certs {
        outcomes.push(trigger(client, cert).await?);
    }
    if let Some(timeout) = opts.wait {
        for o in &mut outcomes {
            let done = wait_issued(client, &o.namespace, &o.name, o.previous_revision, o.triggered_at, timeout).await?;
            o.new_revision = done.status.as_ref().and_then(|s| s.revision);
            o.message = format!(
                "certificate {}/{} issued (revision {})",
                o.namespace,
                o.name,
                o.new_revision.map(|r| r.to_string()).unwrap_or_else(|| "?".into())
            );
        }
    }
    Ok(outcomes)
}

/// Writes the manual trigger on one Certificate (retrying on write conflicts).
pub async fn trigger(client: &Client, cert: &Certificate) -> Result<RenewOutcome, CertError> {
    let ns = cert.metadata.namespace.clone().unwrap_or_default();
    let name = cert.metadata.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &certificate_resource());
    let subject = Subject { kind: "certificate", name: &name, namespace: &ns };
    let mut attempt = 0;
    loop {
        attempt += 1;
        // Work on the whole object so status fields druidctl does not model survive the update.
        let mut obj = api.get(&name).await.map_err(|e| ClusterError::from_kube(e, &subject))?;
        let typed: Certificate = serde_json::from_value(serde_json::to_value(&obj).unwrap_or(Value::Null))
            .map_err(|e| ClusterError::Api(format!("certificate {ns}/{name}: {e}")))?;
        let previous_revision = typed.status.as_ref().and_then(|s| s.revision);
        let now = Timestamp::now();
        if is_issuing(&typed) {
            return Ok(RenewOutcome {
                namespace: ns.clone(),
                name: name.clone(),
                previous_revision,
                triggered: false,
                new_revision: None,
                triggered_at: now,
                message: format!("certificate {ns}/{name} is already being issued"),
            });
        }
        let generation = obj.metadata.generation;
        set_issuing_condition(&mut obj.data, generation, now);
        match api.replace_status(&name, &PostParams::default(), &obj).await {
            Ok(_) => {
                return Ok(RenewOutcome {
                    namespace: ns.clone(),
                    name: name.clone(),
                    previous_revision,
                    triggered: true,
                    new_revision: None,
                    triggered_at: now,
                    message: format!("manually triggered issuance of certificate {ns}/{name}"),
                });
            }
            Err(kube::Error::Api(s)) if s.code == 409 && attempt < 5 => continue,
            Err(e) => return Err(ClusterError::from_kube(e, &subject).into()),
        }
    }
}

/// Sets the `Issuing=True`/`ManuallyTriggered` condition in a Certificate's JSON (`data` holds spec and
/// status), replacing an existing `Issuing` condition and keeping the others.
pub fn set_issuing_condition(data: &mut Value, generation: Option<i64>, now: Timestamp) {
    if !data.get("status").is_some_and(Value::is_object) {
        data["status"] = json!({});
    }
    let status = &mut data["status"];
    let mut conditions: Vec<Value> = status.get("conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    conditions.retain(|c| c.get("type").and_then(Value::as_str) != Some(CONDITION_ISSUING));
    let mut cond = json!({
        "type": CONDITION_ISSUING,
        "status": "True",
        "reason": REASON_MANUALLY_TRIGGERED,
        "message": MANUAL_TRIGGER_MESSAGE,
        "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    });
    if let Some(g) = generation {
        cond["observedGeneration"] = json!(g);
    }
    conditions.push(cond);
    status["conditions"] = Value::Array(conditions);
}

/// Waits until `ns/name` has a revision newer than `previous` and is no longer issuing, or until the
/// issuance failed after `since` (then [`CertError::IssuanceFailed`] with the next automatic retry).
pub async fn wait_issued(
    client: &Client,
    ns: &str,
    name: &str,
    previous: Option<i64>,
    since: Timestamp,
    timeout: Duration,
) -> Result<Certificate, CertError> {
    let api: Api<Certificate> = Api::namespaced(client.clone(), ns);
    let subject = Subject { kind: "certificate", name, namespace: ns };
    // lastFailureTime has second precision.
    let since_s = since.as_second();
    let what = format!("for certificate {ns}/{name} to be issued");
    let cert = crate::kube::wait::until(&api, subject, timeout, &what, |c: &Certificate| {
        issued_after(c, previous) || failed_since(c, since_s).is_some()
    })
    .await?;
    if !issued_after(&cert, previous)
        && let Some(message) = failed_since(&cert, since_s)
    {
        let status = cert.status.clone().unwrap_or_default();
        return Err(CertError::IssuanceFailed {
            name: name.to_string(),
            namespace: ns.to_string(),
            message,
            next_retry: next_retry_at(status.last_failure_time.map(|t| t.0), status.failed_issuance_attempts),
        });
    }
    Ok(cert)
}

/// Whether `cert` carries a revision newer than `previous` and no issuance is in flight.
pub fn issued_after(cert: &Certificate, previous: Option<i64>) -> bool {
    let rev = cert.status.as_ref().and_then(|s| s.revision);
    rev.is_some() && rev > previous && !is_issuing(cert)
}

/// The failure message when an issuance failed at or after `since_s` (seconds since the epoch).
pub fn failed_since(cert: &Certificate, since_s: i64) -> Option<String> {
    let cond = cert.condition(CONDITION_ISSUING).filter(|c| c.status == "False")?;
    let last = cert.status.as_ref()?.last_failure_time.as_ref()?.0;
    (last.as_second() >= since_s).then(|| cond.message.clone().unwrap_or_else(|| "issuance failed".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_trigger_replaces_a_failed_issuing_condition_and_keeps_ready_and_unknown_fields() {
        let mut data = json!({"spec": {}, "status": {
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "Issuing", "status": "False", "reason": "Failed"}],
            "lastFailureTime": "2026-01-01T00:00:00Z", "someFutureField": 1}});
        set_issuing_condition(&mut data, Some(2), "2026-01-01T05:00:00Z".parse().unwrap());
        let conds = data["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 2);
        assert_eq!(conds[0]["type"], "Ready");
        assert_eq!(
            conds[1],
            json!({"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
            "message": MANUAL_TRIGGER_MESSAGE, "lastTransitionTime": "2026-01-01T05:00:00Z", "observedGeneration": 2})
        );
        assert_eq!(data["status"]["someFutureField"], 1);
    }

    #[test]
    fn manual_trigger_creates_a_status_when_there_is_none() {
        let mut data = json!({"spec": {}});
        set_issuing_condition(&mut data, None, Timestamp::UNIX_EPOCH);
        assert_eq!(data["status"]["conditions"][0]["reason"], "ManuallyTriggered");
    }
}
