//! Talking to the backup-restore sidecar through the API server's proxy: the leading member's sidecar behind
//! service `E-client` port `backup.port` (default 8080), or one member's sidecar through its pod.

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;

use super::step::StepError;
use crate::api::Etcd;

/// Default port of the backup-restore sidecar.
pub const DEFAULT_BACKUP_PORT: i32 = 8080;

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The leading member's sidecar (service `E-client`).
    Leader,
    /// One member's sidecar, through its pod.
    Member(String),
}

/// The proxy path for `path` on the sidecar of `etcd` at `target`.
pub fn proxy_path(etcd: &Etcd, target: &Target, path: &str) -> String {
    let ns = etcd.metadata.namespace.as_deref().unwrap_or("default");
    let port = etcd.spec.backup.port.unwrap_or(DEFAULT_BACKUP_PORT);
    let path = path.trim_start_matches('/');
    match target {
        Target::Leader => {
            format!("/api/v1/namespaces/{ns}/services/{}:{port}/proxy/{path}", etcd.managed_names().client_service())
        }
        Target::Member(pod) => format!("/api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy/{path}"),
    }
}

/// POSTs to the sidecar and returns the response body (JSON when it is JSON).
pub async fn post(client: &Client, etcd: &Etcd, target: &Target, path: &str) -> Result<serde_json::Value, StepError> {
    let uri = proxy_path(etcd, target, path);
    let req = http::Request::post(&uri).body(Vec::new()).map_err(|e| StepError::Permanent(e.to_string()))?;
    let text = client.request_text(req).await.map_err(|e| StepError::from_kube(&format!("POST {uri}"), e))?;
    Ok(serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)))
}

/// `(renewTime, holderIdentity)` of a lease, as a comparable string; `None` when the lease does not exist.
pub async fn lease_marker(client: &Client, namespace: &str, name: &str) -> Result<Option<String>, StepError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = api.get_opt(name).await.map_err(|e| StepError::from_kube(&format!("reading lease {name}"), e))?;
    Ok(lease.map(|l| {
        let spec = l.spec.unwrap_or_default();
        format!(
            "{}|{}",
            spec.renew_time.map(|t| t.0.to_string()).unwrap_or_default(),
            spec.holder_identity.unwrap_or_default()
        )
    }))
}
