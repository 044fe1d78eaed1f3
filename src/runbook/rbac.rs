//! RBAC pre-flight: one SelfSubjectAccessReview per API call a plan makes, before its first mutation, so
//! missing permissions are reported up front rather than half-way through a recovery.

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use kube::Client;
use kube::api::{Api, PostParams};
use serde::Serialize;

/// One permission a plan needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Access {
    /// Verb (`get`, `list`, `patch`, `delete`, `create`, `update`).
    pub verb: &'static str,
    /// API group (`""` for core).
    pub group: &'static str,
    /// Resource (plural).
    pub resource: &'static str,
    /// Subresource (`status`), if any.
    pub subresource: Option<&'static str>,
}

impl Access {
    /// `verb` on `group`/`resource`.
    pub const fn new(verb: &'static str, group: &'static str, resource: &'static str) -> Access {
        Access { verb, group, resource, subresource: None }
    }

    /// `verb` on `group`/`resource`/`subresource`.
    pub const fn sub(
        verb: &'static str,
        group: &'static str,
        resource: &'static str,
        subresource: &'static str,
    ) -> Access {
        Access { verb, group, resource, subresource: Some(subresource) }
    }

    /// As kubectl spells it: `delete persistentvolumeclaims`, `update etcdoperatortasks.druid.gardener.cloud/status`.
    pub fn describe(&self) -> String {
        let group = if self.group.is_empty() { String::new() } else { format!(".{}", self.group) };
        let sub = self.subresource.map(|s| format!("/{s}")).unwrap_or_default();
        format!("{} {}{group}{sub}", self.verb, self.resource)
    }
}

/// Asks the API server, for every access in `namespace`, whether the current user may; returns the denied
/// ones (described as kubectl would). API errors count as denied with the error appended.
pub async fn denied(client: &Client, namespace: &str, accesses: &[Access]) -> Vec<String> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut out = Vec::new();
    for a in accesses {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_string()),
                    verb: Some(a.verb.to_string()),
                    group: Some(a.group.to_string()),
                    resource: Some(a.resource.to_string()),
                    subresource: a.subresource.map(String::from),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &review).await {
            Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => {}
            Ok(_) => out.push(a.describe()),
            Err(e) => out.push(format!("{} (access review failed: {e})", a.describe())),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_are_described_like_kubectl_auth_can_i() {
        assert_eq!(Access::new("delete", "", "persistentvolumeclaims").describe(), "delete persistentvolumeclaims");
        assert_eq!(
            Access::sub("update", "druid.gardener.cloud", "etcdoperatortasks", "status").describe(),
            "update etcdoperatortasks.druid.gardener.cloud/status"
        );
    }
}
