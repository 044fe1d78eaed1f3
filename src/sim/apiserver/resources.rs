//! Resource types the server serves: the built-in kinds and the shape CRDs are registered into.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::validation::CrdValidator;

/// Paths of the scale subresource (`.spec.replicas`, `.status.replicas`, label selector).
#[derive(Debug, Clone)]
pub struct ScalePaths {
    /// JSON path of desired replicas, e.g. `.spec.replicas`.
    pub spec_replicas: String,
    /// JSON path of observed replicas, e.g. `.status.replicas`.
    pub status_replicas: String,
    /// JSON path of the label selector string (CRDs) or None (builtins use `spec.selector`).
    pub label_selector: Option<String>,
}

/// One column of the server-side Table output.
#[derive(Debug, Clone)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// OpenAPI type: string, integer, number, boolean, date.
    pub type_: String,
    /// Format (e.g. `name`).
    pub format: String,
    /// Column description.
    pub description: String,
    /// 0 = normal, >0 only with `-o wide`.
    pub priority: i64,
    /// JSONPath evaluated on the object (CRDs), or a built-in printer key starting with `@`.
    pub json_path: String,
}

/// A served resource: one group/plural, one or more versions sharing a storage.
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group ("" for core).
    pub group: String,
    /// Served versions, storage/preferred version first.
    pub versions: Vec<String>,
    /// Plural name (the URL segment).
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// List kind.
    pub list_kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names (`sts`, `pvc`, ...).
    pub short_names: Vec<String>,
    /// Categories (`all`, ...).
    pub categories: Vec<String>,
    /// Whether `/status` is served.
    pub status: bool,
    /// Scale subresource paths, if served.
    pub scale: Option<ScalePaths>,
    /// Printer columns (after NAME).
    pub columns: Vec<PrinterColumn>,
    /// Per-version validators (CRDs only).
    pub validators: BTreeMap<String, Arc<CrdValidator>>,
    /// Registered from a CRD.
    pub crd: bool,
    /// Only `create` (reviews).
    pub create_only: bool,
    /// Extra subresources served (e.g. `log` for pods, `proxy` for services).
    pub extra_subresources: Vec<String>,
}

impl ResourceType {
    /// The `apiVersion` string for a version of this resource.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() { version.to_string() } else { format!("{}/{}", self.group, version) }
    }

    /// Where objects are stored: `events.k8s.io` Events share the core Events storage.
    pub fn storage_key(&self) -> (String, String) {
        if self.group == "events.k8s.io" && self.plural == "events" {
            (String::new(), "events".into())
        } else {
            (self.group.clone(), self.plural.clone())
        }
    }

    /// Preferred (storage) version.
    pub fn preferred(&self) -> &str {
        &self.versions[0]
    }

    /// Verbs advertised in discovery.
    pub fn verbs(&self) -> Vec<&'static str> {
        if self.create_only {
            vec!["create"]
        } else {
            vec!["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        }
    }
}

fn col(name: &str, type_: &str, path: &str, priority: i64) -> PrinterColumn {
    PrinterColumn {
        name: name.into(),
        type_: type_.into(),
        format: String::new(),
        description: String::new(),
        priority,
        json_path: path.into(),
    }
}

#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    short: &[&str],
    status: bool,
    scale: bool,
    columns: Vec<PrinterColumn>,
) -> ResourceType {
    ResourceType {
        group: group.into(),
        versions: vec![version.into()],
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: Vec::new(),
        status,
        scale: scale.then(|| ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: None,
        }),
        columns,
        validators: BTreeMap::new(),
        crd: false,
        create_only: false,
        extra_subresources: Vec::new(),
    }
}

/// All built-in resource types.
pub fn builtin_types() -> Vec<ResourceType> {
    let age = || col("Age", "date", ".metadata.creationTimestamp", 0);
    let mut v = vec![
        builtin(
            "",
            "v1",
            "namespaces",
            "Namespace",
            false,
            &["ns"],
            true,
            false,
            vec![col("Status", "string", ".status.phase", 0), age()],
        ),
        builtin(
            "",
            "v1",
            "pods",
            "Pod",
            true,
            &["po"],
            true,
            false,
            vec![
                col("Ready", "string", "@pod.ready", 0),
                col("Status", "string", "@pod.status", 0),
                col("Restarts", "string", "@pod.restarts", 0),
                age(),
                col("IP", "string", ".status.podIP", 1),
                col("Node", "string", ".spec.nodeName", 1),
            ],
        ),
        builtin(
            "",
            "v1",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
            &["pvc"],
            true,
            false,
            vec![
                col("Status", "string", ".status.phase", 0),
                col("Volume", "string", ".spec.volumeName", 0),
                col("Capacity", "string", ".status.capacity.storage", 0),
                col("Access Modes", "string", "@pvc.modes", 0),
                col("StorageClass", "string", ".spec.storageClassName", 0),
                col("VolumeAttributesClass", "string", ".spec.volumeAttributesClassName", 0),
                age(),
            ],
        ),
        builtin(
            "",
            "v1",
            "persistentvolumes",
            "PersistentVolume",
            false,
            &["pv"],
            true,
            false,
            vec![
                col("Capacity", "string", ".spec.capacity.storage", 0),
                col("Status", "string", ".status.phase", 0),
                age(),
            ],
        ),
        builtin(
            "",
            "v1",
            "configmaps",
            "ConfigMap",
            true,
            &["cm"],
            false,
            false,
            vec![col("Data", "integer", "@count.data", 0), age()],
        ),
        builtin(
            "",
            "v1",
            "secrets",
            "Secret",
            true,
            &[],
            false,
            false,
            vec![col("Type", "string", ".type", 0), col("Data", "integer", "@count.data", 0), age()],
        ),
        builtin(
            "",
            "v1",
            "services",
            "Service",
            true,
            &["svc"],
            true,
            false,
            vec![
                col("Type", "string", ".spec.type", 0),
                col("Cluster-IP", "string", ".spec.clusterIP", 0),
                col("External-IP", "string", "@svc.external", 0),
                col("Port(s)", "string", "@svc.ports", 0),
                age(),
                col("Selector", "string", "@svc.selector", 1),
            ],
        ),
        builtin(
            "",
            "v1",
            "endpoints",
            "Endpoints",
            true,
            &["ep"],
            false,
            false,
            vec![col("Endpoints", "string", "@ep.addresses", 0), age()],
        ),
        builtin(
            "",
            "v1",
            "nodes",
            "Node",
            false,
            &["no"],
            true,
            false,
            vec![
                col("Status", "string", "@node.status", 0),
                col("Roles", "string", "@node.roles", 0),
                age(),
                col("Version", "string", ".status.nodeInfo.kubeletVersion", 0),
            ],
        ),
        builtin(
            "",
            "v1",
            "events",
            "Event",
            true,
            &["ev"],
            false,
            false,
            vec![
                col("Last Seen", "string", "@event.lastseen", 0),
                col("Type", "string", ".type", 0),
                col("Reason", "string", ".reason", 0),
                col("Object", "string", "@event.object", 0),
                col("Message", "string", ".message", 0),
            ],
        ),
        builtin("", "v1", "serviceaccounts", "ServiceAccount", true, &["sa"], false, false, vec![age()]),
        builtin(
            "apps",
            "v1",
            "statefulsets",
            "StatefulSet",
            true,
            &["sts"],
            true,
            true,
            vec![
                col("Ready", "string", "@ready.replicas", 0),
                age(),
                col("Containers", "string", "@containers.names", 1),
                col("Images", "string", "@containers.images", 1),
            ],
        ),
        builtin(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            true,
            &["deploy"],
            true,
            true,
            vec![
                col("Ready", "string", "@ready.replicas", 0),
                col("Up-to-date", "integer", ".status.updatedReplicas", 0),
                col("Available", "integer", ".status.availableReplicas", 0),
                age(),
            ],
        ),
        builtin(
            "apps",
            "v1",
            "replicasets",
            "ReplicaSet",
            true,
            &["rs"],
            true,
            true,
            vec![
                col("Desired", "integer", ".spec.replicas", 0),
                col("Current", "integer", ".status.replicas", 0),
                col("Ready", "integer", ".status.readyReplicas", 0),
                age(),
            ],
        ),
        builtin("apps", "v1", "daemonsets", "DaemonSet", true, &["ds"], true, false, vec![age()]),
        builtin(
            "batch",
            "v1",
            "jobs",
            "Job",
            true,
            &[],
            true,
            false,
            vec![col("Status", "string", "@job.status", 0), col("Completions", "string", "@job.completions", 0), age()],
        ),
        builtin(
            "batch",
            "v1",
            "cronjobs",
            "CronJob",
            true,
            &["cj"],
            true,
            false,
            vec![
                col("Schedule", "string", ".spec.schedule", 0),
                col("Suspend", "boolean", ".spec.suspend", 0),
                col("Last Schedule", "string", ".status.lastScheduleTime", 0),
                age(),
            ],
        ),
        builtin(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
            &["pdb"],
            true,
            false,
            vec![
                col("Min Available", "string", ".spec.minAvailable", 0),
                col("Max Unavailable", "string", ".spec.maxUnavailable", 0),
                col("Allowed Disruptions", "integer", ".status.disruptionsAllowed", 0),
                age(),
            ],
        ),
        builtin(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            true,
            &[],
            false,
            false,
            vec![col("Holder", "string", ".spec.holderIdentity", 0), age()],
        ),
        builtin(
            "events.k8s.io",
            "v1",
            "events",
            "Event",
            true,
            &["ev"],
            false,
            false,
            vec![col("Reason", "string", ".reason", 0), col("Note", "string", ".note", 0), age()],
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "roles",
            "Role",
            true,
            &[],
            false,
            false,
            vec![col("Created At", "date", ".metadata.creationTimestamp", 0)],
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
            &[],
            false,
            false,
            vec![col("Role", "string", "@binding.role", 0), age()],
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
            &[],
            false,
            false,
            vec![col("Created At", "date", ".metadata.creationTimestamp", 0)],
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
            &[],
            false,
            false,
            vec![col("Role", "string", "@binding.role", 0), age()],
        ),
        builtin(
            "storage.k8s.io",
            "v1",
            "storageclasses",
            "StorageClass",
            false,
            &["sc"],
            false,
            false,
            vec![col("Provisioner", "string", ".provisioner", 0), age()],
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
            true,
            false,
            vec![col("Created At", "date", ".metadata.creationTimestamp", 0)],
        ),
    ];
    for (g, plural, kind) in [
        ("authorization.k8s.io", "selfsubjectaccessreviews", "SelfSubjectAccessReview"),
        ("authorization.k8s.io", "subjectaccessreviews", "SubjectAccessReview"),
        ("authorization.k8s.io", "selfsubjectrulesreviews", "SelfSubjectRulesReview"),
        ("authentication.k8s.io", "selfsubjectreviews", "SelfSubjectReview"),
    ] {
        let mut r = builtin(g, "v1", plural, kind, false, &[], false, false, vec![]);
        r.create_only = true;
        v.push(r);
    }
    for r in v.iter_mut() {
        match r.plural.as_str() {
            "pods" => {
                r.categories = vec!["all".into()];
                r.extra_subresources = vec!["log".into(), "eviction".into(), "proxy".into()];
            }
            "services" => {
                r.categories = vec!["all".into()];
                r.extra_subresources = vec!["proxy".into()];
            }
            "statefulsets" | "deployments" | "replicasets" | "daemonsets" | "jobs" | "cronjobs" => {
                r.categories = vec!["all".into()];
            }
            "endpoints" => r.singular = "endpoints".into(),
            _ => {}
        }
        if r.kind == "Endpoints" {
            r.list_kind = "EndpointsList".into();
        }
    }
    v
}

/// Minimal server-side defaults for built-in kinds that clients rely on.
pub fn apply_builtin_defaults(group: &str, plural: &str, obj: &mut Value) {
    let ensure = |o: &mut Value, path: &[&str], v: Value| {
        let mut cur = o;
        for p in &path[..path.len() - 1] {
            if !cur.get(*p).is_some_and(|x| x.is_object()) {
                cur[*p] = serde_json::json!({});
            }
            cur = cur.get_mut(*p).unwrap();
        }
        let last = path[path.len() - 1];
        if cur.get(last).is_none_or(|x| x.is_null()) {
            cur[last] = v;
        }
    };
    match (group, plural) {
        ("apps", "statefulsets") => {
            ensure(obj, &["spec", "replicas"], 1.into());
            ensure(obj, &["spec", "podManagementPolicy"], "OrderedReady".into());
            ensure(obj, &["spec", "revisionHistoryLimit"], 10.into());
            ensure(
                obj,
                &["spec", "updateStrategy"],
                serde_json::json!({"type":"RollingUpdate","rollingUpdate":{"partition":0}}),
            );
            ensure(
                obj,
                &["spec", "persistentVolumeClaimRetentionPolicy"],
                serde_json::json!({"whenDeleted":"Retain","whenScaled":"Retain"}),
            );
        }
        ("apps", "deployments") => {
            ensure(obj, &["spec", "replicas"], 1.into());
            ensure(obj, &["spec", "revisionHistoryLimit"], 10.into());
            ensure(obj, &["spec", "progressDeadlineSeconds"], 600.into());
            ensure(
                obj,
                &["spec", "strategy"],
                serde_json::json!({"type":"RollingUpdate","rollingUpdate":{"maxSurge":"25%","maxUnavailable":"25%"}}),
            );
        }
        ("apps", "replicasets") => ensure(obj, &["spec", "replicas"], 1.into()),
        ("", "services") => {
            ensure(obj, &["spec", "type"], "ClusterIP".into());
            ensure(obj, &["spec", "sessionAffinity"], "None".into());
            if obj.pointer("/spec/clusterIP").is_none() {
                let n: u8 = rand::random::<u8>().max(2);
                let m: u8 = rand::random();
                ensure(obj, &["spec", "clusterIP"], format!("10.96.{m}.{n}").into());
            }
            if let Some(ports) = obj.pointer_mut("/spec/ports").and_then(|p| p.as_array_mut()) {
                for p in ports {
                    if p.get("protocol").is_none() {
                        p["protocol"] = "TCP".into();
                    }
                    if p.get("targetPort").is_none()
                        && let Some(port) = p.get("port").cloned()
                    {
                        p["targetPort"] = port;
                    }
                }
            }
        }
        ("", "pods") => {
            ensure(obj, &["spec", "restartPolicy"], "Always".into());
            ensure(obj, &["spec", "dnsPolicy"], "ClusterFirst".into());
            ensure(obj, &["spec", "schedulerName"], "default-scheduler".into());
            ensure(obj, &["spec", "terminationGracePeriodSeconds"], 30.into());
            ensure(obj, &["status", "phase"], "Pending".into());
        }
        ("", "persistentvolumeclaims") => {
            ensure(obj, &["spec", "volumeMode"], "Filesystem".into());
            ensure(obj, &["status", "phase"], "Pending".into());
        }
        ("", "namespaces") => {
            ensure(obj, &["spec", "finalizers"], serde_json::json!(["kubernetes"]));
            ensure(obj, &["status", "phase"], "Active".into());
            if let Some(name) = obj.pointer("/metadata/name").and_then(|n| n.as_str()).map(str::to_string) {
                ensure(obj, &["metadata", "labels", "kubernetes.io/metadata.name"], name.into());
            }
        }
        ("", "secrets") => ensure(obj, &["type"], "Opaque".into()),
        ("batch", "jobs") => {
            ensure(obj, &["spec", "parallelism"], 1.into());
            ensure(obj, &["spec", "completions"], 1.into());
            ensure(obj, &["spec", "backoffLimit"], 6.into());
        }
        ("", "events") => {
            ensure(obj, &["type"], "Normal".into());
        }
        _ => {}
    }
}

/// Whether a built-in (group, plural) carries `metadata.generation` (custom resources always do).
/// kube-apiserver sets it for workload/policy kinds and CRDs, not for core kinds like ConfigMap or Lease.
pub fn generation_tracked(group: &str, _plural: &str) -> bool {
    matches!(group, "apps" | "batch" | "policy" | "apiextensions.k8s.io" | "networking.k8s.io")
}
