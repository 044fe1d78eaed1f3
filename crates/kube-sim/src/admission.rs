//! Admission hooks: Rust callbacks that see every mutating request (after defaulting and validation,
//! before storage) and may deny it, like a validating admission webhook.

use serde_json::Value;

use super::ApiServer;

/// The operation being admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmissionOperation {
    /// Create.
    Create,
    /// Update, patch or apply (also of subresources).
    Update,
    /// Delete.
    Delete,
}

/// One admission request (the fields of `admission.k8s.io/v1` AdmissionRequest that hooks need).
#[derive(Debug, Clone)]
pub struct AdmissionRequest {
    /// Operation.
    pub operation: AdmissionOperation,
    /// API group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource (`status`, `scale`).
    pub subresource: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
    /// Object name.
    pub name: String,
    /// Requesting user.
    pub user: String,
    /// The user's groups.
    pub groups: Vec<String>,
    /// New object (create/update).
    pub object: Option<Value>,
    /// Old object (update/delete).
    pub old_object: Option<Value>,
}

/// A validating admission hook. Returning `Err(reason)` denies the request with 403 and kube-apiserver's
/// webhook message `admission webhook "NAME" denied the request: REASON`.
/// Hooks run without the store lock held, so they may read through `server.get_object`.
pub trait AdmissionHook: Send + Sync {
    /// Admits or denies.
    fn admit(&self, server: &ApiServer, req: &AdmissionRequest) -> Result<(), String>;

    /// The webhook name shown in denials: `admission webhook "NAME" denied the request: REASON`.
    fn name(&self) -> String {
        "admission.kube-sim.local".into()
    }
}
