//! The manifests `druidctl install` applies and `deploy/` holds: the EtcdOperatorTask CRD, ClusterRoles for
//! operators and for `druidctl serve` (least privilege: only the verbs the code uses), and the optional `serve`
//! Deployment with its ServiceAccount and bindings.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, Namespace, PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements,
    SeccompProfile, SecurityContext, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde_json::Value;

/// ClusterRole for people and CI running druidctl.
pub const OPERATOR_ROLE: &str = "druidctl:operator";
/// ClusterRole for `druidctl serve`.
pub const SERVE_ROLE: &str = "druidctl:serve";
/// Default namespace of the `serve` Deployment.
pub const DEFAULT_SERVE_NAMESPACE: &str = "druidctl-system";
/// Name of the `serve` Deployment, ServiceAccount and ClusterRoleBinding.
pub const SERVE_NAME: &str = "druidctl-serve";

/// What to install.
#[derive(Debug, Clone, Default)]
pub struct InstallOptions {
    /// Image of the `serve` Deployment; `None` installs no Deployment.
    pub serve_image: Option<String>,
    /// Namespace of the `serve` Deployment.
    pub serve_namespace: String,
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([("app.kubernetes.io/name".to_string(), "druidctl".to_string())])
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(Into::into),
        labels: Some(labels()),
        ..Default::default()
    }
}

const READ: &[&str] = &["get", "list", "watch"];

/// Rules of the operator ClusterRole: what `status`, `list-resources`, `reconcile`, the annotation commands and
/// the task commands call.
pub fn operator_rules() -> Vec<PolicyRule> {
    vec![
        rule(&["druid.gardener.cloud"], &["etcds"], &["get", "list", "watch", "patch"]),
        rule(&["druid.gardener.cloud"], &["etcdoperatortasks"], &["get", "list", "watch", "create", "delete"]),
        rule(&["druid.gardener.cloud"], &["etcdcopybackupstasks"], READ),
        // `snapshot` through etcd-druid, `task list|get`.
        rule(&["druid.gardener.cloud"], &["etcdopstasks"], &["get", "list", "create"]),
        rule(&[""], &["pods", "persistentvolumeclaims", "services", "configmaps", "serviceaccounts"], READ),
        rule(&["apps"], &["statefulsets"], READ),
        rule(&["coordination.k8s.io"], &["leases"], READ),
        rule(&["policy"], &["poddisruptionbudgets"], READ),
        rule(&["rbac.authorization.k8s.io"], &["roles", "rolebindings"], READ),
        rule(&["batch"], &["jobs"], READ),
        rule(&["cert-manager.io"], &["certificates"], READ),
        rule(&["machine.sapcloud.io"], &["machines", "machinesets"], READ),
    ]
}

/// Rules of the `serve` ClusterRole: the task controller's watches, status writes, executor and leader leases,
/// events, and what the task types touch.
pub fn serve_rules() -> Vec<PolicyRule> {
    // Exactly what `serve` calls while it runs every task type (tests/rbac_real.rs checks this on the real
    // API server, both ways).
    vec![
        rule(&["druid.gardener.cloud"], &["etcdoperatortasks"], &["get", "list", "watch", "patch", "delete"]),
        rule(&["druid.gardener.cloud"], &["etcdoperatortasks/status"], &["patch"]),
        rule(&["druid.gardener.cloud"], &["etcds"], &["get"]),
        rule(&["druid.gardener.cloud"], &["etcdcopybackupstasks"], &["get", "list", "create", "delete"]),
        // The health model reads member leases, pods and PVCs with one LIST per kind (health::collect).
        rule(&["coordination.k8s.io"], &["leases"], &["get", "list", "create", "update", "delete"]),
        rule(&[""], &["events"], &["create"]),
        rule(&[""], &["pods"], &["get", "list"]),
        rule(&[""], &["persistentvolumeclaims"], &["list"]),
        // `tasks::sidecar::route` reads the Service `<etcd>-client` for the backup port.
        rule(&[""], &["services"], &["get"]),
        // Snapshots go to the leading sidecar through the client Service's proxy.
        rule(&[""], &["services/proxy"], &["create"]),
        // Compaction and defragmentation talk to etcd itself with the Etcd's client TLS: its CA bundle and
        // client key pair (tasks::etcd_access; in the cluster, the member's DNS name, so no port-forward).
        rule(&[""], &["secrets"], &["get"]),
        rule(&["apps"], &["statefulsets"], &["get"]),
        rule(&["batch"], &["jobs"], &["get", "list", "create", "delete"]),
    ]
}

/// The EtcdOperatorTask CRD.
pub fn crd() -> Value {
    serde_json::to_value(super::task::crd()).expect("CRD serializes")
}

/// The two ClusterRoles.
pub fn cluster_roles() -> Vec<Value> {
    let mut operator =
        ClusterRole { metadata: meta(OPERATOR_ROLE, None), rules: Some(operator_rules()), ..Default::default() };
    // Lets cluster admins aggregate the operator role into `edit`-like roles if they want.
    operator
        .metadata
        .labels
        .get_or_insert_default()
        .insert("druid.gardener.cloud/aggregate-to-operator".into(), "true".into());
    let serve = ClusterRole { metadata: meta(SERVE_ROLE, None), rules: Some(serve_rules()), ..Default::default() };
    vec![to_value(&operator), to_value(&serve)]
}

/// The user and group id the serve image runs as (distroless `nonroot`).
pub const SERVE_UID: i64 = 65532;

/// The `serve` Deployment with its namespace, ServiceAccount and ClusterRoleBinding.
pub fn serve_deployment(image: &str, namespace: &str) -> Vec<Value> {
    let ns = Namespace { metadata: meta(namespace, None), ..Default::default() };
    let sa = ServiceAccount { metadata: meta(SERVE_NAME, Some(namespace)), ..Default::default() };
    let binding = ClusterRoleBinding {
        metadata: meta(SERVE_NAME, None),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: SERVE_ROLE.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: SERVE_NAME.into(),
            namespace: Some(namespace.into()),
            ..Default::default()
        }]),
    };
    let mut pod_labels = labels();
    pod_labels.insert("app.kubernetes.io/component".into(), "serve".into());
    let deployment = Deployment {
        metadata: meta(SERVE_NAME, Some(namespace)),
        spec: Some(DeploymentSpec {
            replicas: Some(2),
            selector: LabelSelector { match_labels: Some(pod_labels.clone()), ..Default::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(pod_labels), ..Default::default() }),
                spec: Some(PodSpec {
                    service_account_name: Some(SERVE_NAME.into()),
                    // The image (Containerfile) runs as distroless' numeric nonroot user; a numeric id lets the
                    // kubelet verify `runAsNonRoot` (it cannot for a user name).
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(SERVE_UID),
                        run_as_group: Some(SERVE_UID),
                        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..Default::default() }),
                        ..Default::default()
                    }),
                    containers: vec![Container {
                        name: "serve".into(),
                        image: Some(image.into()),
                        args: Some(vec!["serve".into()]),
                        // serve writes nothing to disk: logs go to stderr, state lives in the API server.
                        security_context: Some(SecurityContext {
                            allow_privilege_escalation: Some(false),
                            read_only_root_filesystem: Some(true),
                            capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Default::default() }),
                            ..Default::default()
                        }),
                        resources: Some(ResourceRequirements {
                            requests: Some(BTreeMap::from([
                                ("cpu".to_string(), Quantity("50m".into())),
                                ("memory".to_string(), Quantity("64Mi".into())),
                            ])),
                            limits: Some(BTreeMap::from([("memory".to_string(), Quantity("256Mi".into()))])),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    };
    vec![to_value(&ns), to_value(&sa), to_value(&binding), to_value(&deployment)]
}

/// Everything `install` applies, in apply order.
pub fn all(opts: &InstallOptions) -> Vec<Value> {
    let mut out = vec![crd()];
    out.extend(cluster_roles());
    if let Some(image) = &opts.serve_image {
        out.extend(serve_deployment(image, &opts.serve_namespace));
    }
    out
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("k8s object serializes")
}

/// Renders objects as one multi-document YAML stream.
pub fn to_yaml_stream(objects: &[Value]) -> String {
    objects
        .iter()
        .map(|o| serde_saphyr::to_string(o).expect("JSON value serializes as YAML"))
        .collect::<Vec<_>>()
        .join("---\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_role_never_deletes_etcd_data() {
        for r in operator_rules() {
            let res = r.resources.unwrap();
            if res.iter().any(|r| r == "persistentvolumeclaims" || r == "etcds") {
                assert!(!r.verbs.iter().any(|v| v == "delete" || v == "*"), "{res:?}");
            }
        }
    }

    #[test]
    fn install_without_image_has_no_deployment() {
        let objs = all(&InstallOptions { serve_image: None, serve_namespace: DEFAULT_SERVE_NAMESPACE.into() });
        assert_eq!(objs.len(), 3);
        let objs = all(&InstallOptions { serve_image: Some("img".into()), serve_namespace: "x".into() });
        assert!(objs.iter().any(|o| o["kind"] == "Deployment" && o["metadata"]["namespace"] == "x"));
    }
}
