//! The subset of cert-manager's `Certificate` (`cert-manager.io/v1`) that druidctl reads.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// Condition type that, set to `True`, makes cert-manager issue a new certificate.
pub const CONDITION_ISSUING: &str = "Issuing";
/// Condition type that says the certificate is up to date.
pub const CONDITION_READY: &str = "Ready";
/// Reason `cmctl renew` (and druidctl) set on the `Issuing` condition.
pub const REASON_MANUALLY_TRIGGERED: &str = "ManuallyTriggered";

/// Spec of a Certificate: only the fields druidctl reads.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cert-manager.io",
    version = "v1",
    kind = "Certificate",
    namespaced,
    status = "CertificateStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct CertificateSpec {
    /// Secret that receives the key pair.
    pub secret_name: String,
    /// Issuer that signs it.
    pub issuer_ref: IssuerReference,
    /// Common name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_name: Option<String>,
    /// DNS SANs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_names: Vec<String>,
    /// Requested lifetime (Go duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// How long before expiry to renew (Go duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_before: Option<String>,
    /// Whether the certificate is a CA (cert-manager `spec.isCA`).
    #[serde(rename = "isCA", default, skip_serializing_if = "Option::is_none")]
    pub is_ca: Option<bool>,
}

/// Reference to an Issuer or ClusterIssuer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct IssuerReference {
    /// Issuer name.
    pub name: String,
    /// `Issuer` or `ClusterIssuer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// API group of the issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// Observed state of a Certificate.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CertificateStatus {
    /// `Ready` and `Issuing` conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<CertificateCondition>,
    /// Expiry of the current certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<Time>,
    /// Start of validity of the current certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Time>,
    /// When cert-manager will renew it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renewal_time: Option<Time>,
    /// Revision, bumped by every issuance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// Time of the last failed issuance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_time: Option<Time>,
    /// Consecutive failed issuances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_issuance_attempts: Option<i64>,
}

/// One Certificate condition.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CertificateCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the status last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// Generation the condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl Certificate {
    /// The condition of type `type_`, if present.
    pub fn condition(&self, type_: &str) -> Option<&CertificateCondition> {
        self.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
    }
}
