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
        } else if self.crd {
            // The discovery controller of apiextensions-apiserver lists a CRD's verbs in this fixed order
            // (`pkg/apiserver/customresource_discovery_controller.go`); built-in kinds' verbs are sorted.
            vec!["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]
        } else {
            vec!["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        }
    }
}

fn col(&(name, type_, path, priority): &Col) -> PrinterColumn {
    PrinterColumn {
        name: name.into(),
        type_: type_.into(),
        format: String::new(),
        description: String::new(),
        priority,
        json_path: path.into(),
    }
}

/// A printer column: (name, OpenAPI type, JSONPath or `@printer` key, priority).
type Col = (&'static str, &'static str, &'static str, i64);

const AGE: Col = ("Age", "date", ".metadata.creationTimestamp", 0);
const CREATED_AT: Col = ("Created At", "date", ".metadata.creationTimestamp", 0);
const NAMESPACE_COLS: &[Col] = &[("Status", "string", ".status.phase", 0), AGE];
const POD_COLS: &[Col] = &[
    ("Ready", "string", "@pod.ready", 0),
    ("Status", "string", "@pod.status", 0),
    ("Restarts", "string", "@pod.restarts", 0),
    AGE,
    ("IP", "string", ".status.podIP", 1),
    ("Node", "string", ".spec.nodeName", 1),
];
const PVC_COLS: &[Col] = &[
    ("Status", "string", ".status.phase", 0),
    ("Volume", "string", ".spec.volumeName", 0),
    ("Capacity", "string", ".status.capacity.storage", 0),
    ("Access Modes", "string", "@pvc.modes", 0),
    ("StorageClass", "string", ".spec.storageClassName", 0),
    ("VolumeAttributesClass", "string", ".spec.volumeAttributesClassName", 0),
    AGE,
];
const PV_COLS: &[Col] =
    &[("Capacity", "string", ".spec.capacity.storage", 0), ("Status", "string", ".status.phase", 0), AGE];
const CONFIGMAP_COLS: &[Col] = &[("Data", "integer", "@count.data", 0), AGE];
const SECRET_COLS: &[Col] = &[("Type", "string", ".type", 0), ("Data", "integer", "@count.data", 0), AGE];
const SERVICE_COLS: &[Col] = &[
    ("Type", "string", ".spec.type", 0),
    ("Cluster-IP", "string", ".spec.clusterIP", 0),
    ("External-IP", "string", "@svc.external", 0),
    ("Port(s)", "string", "@svc.ports", 0),
    AGE,
    ("Selector", "string", "@svc.selector", 1),
];
const ENDPOINTS_COLS: &[Col] = &[("Endpoints", "string", "@ep.addresses", 0), AGE];
const NODE_COLS: &[Col] = &[
    ("Status", "string", "@node.status", 0),
    ("Roles", "string", "@node.roles", 0),
    AGE,
    ("Version", "string", ".status.nodeInfo.kubeletVersion", 0),
];
const CORE_EVENT_COLS: &[Col] = &[
    ("Last Seen", "string", "@event.lastseen", 0),
    ("Type", "string", ".type", 0),
    ("Reason", "string", ".reason", 0),
    ("Object", "string", "@event.object", 0),
    ("Message", "string", ".message", 0),
];
const STATEFULSET_COLS: &[Col] = &[
    ("Ready", "string", "@ready.replicas", 0),
    AGE,
    ("Containers", "string", "@containers.names", 1),
    ("Images", "string", "@containers.images", 1),
];
const DEPLOYMENT_COLS: &[Col] = &[
    ("Ready", "string", "@ready.replicas", 0),
    ("Up-to-date", "integer", ".status.updatedReplicas", 0),
    ("Available", "integer", ".status.availableReplicas", 0),
    AGE,
];
const REPLICASET_COLS: &[Col] = &[
    ("Desired", "integer", ".spec.replicas", 0),
    ("Current", "integer", ".status.replicas", 0),
    ("Ready", "integer", ".status.readyReplicas", 0),
    AGE,
];
const JOB_COLS: &[Col] =
    &[("Status", "string", "@job.status", 0), ("Completions", "string", "@job.completions", 0), AGE];
const CRONJOB_COLS: &[Col] = &[
    ("Schedule", "string", ".spec.schedule", 0),
    ("Suspend", "boolean", ".spec.suspend", 0),
    ("Last Schedule", "string", ".status.lastScheduleTime", 0),
    AGE,
];
const PDB_COLS: &[Col] = &[
    ("Min Available", "string", ".spec.minAvailable", 0),
    ("Max Unavailable", "string", ".spec.maxUnavailable", 0),
    ("Allowed Disruptions", "integer", ".status.disruptionsAllowed", 0),
    AGE,
];
const LEASE_COLS: &[Col] = &[("Holder", "string", ".spec.holderIdentity", 0), AGE];
const EVENT_COLS: &[Col] = &[("Reason", "string", ".reason", 0), ("Note", "string", ".note", 0), AGE];
const BINDING_COLS: &[Col] = &[("Role", "string", "@binding.role", 0), AGE];
const STORAGECLASS_COLS: &[Col] = &[("Provisioner", "string", ".provisioner", 0), AGE];

/// A built-in kind (all served at `v1`): (group, plural, kind, namespaced, short names, /status, scale, columns).
type Builtin = (&'static str, &'static str, &'static str, bool, &'static [&'static str], bool, bool, &'static [Col]);

const BUILTINS: &[Builtin] = &[
    ("", "namespaces", "Namespace", false, &["ns"], true, false, NAMESPACE_COLS),
    ("", "pods", "Pod", true, &["po"], true, false, POD_COLS),
    ("", "persistentvolumeclaims", "PersistentVolumeClaim", true, &["pvc"], true, false, PVC_COLS),
    ("", "persistentvolumes", "PersistentVolume", false, &["pv"], true, false, PV_COLS),
    ("", "configmaps", "ConfigMap", true, &["cm"], false, false, CONFIGMAP_COLS),
    ("", "secrets", "Secret", true, &[], false, false, SECRET_COLS),
    ("", "services", "Service", true, &["svc"], true, false, SERVICE_COLS),
    ("", "endpoints", "Endpoints", true, &["ep"], false, false, ENDPOINTS_COLS),
    ("", "nodes", "Node", false, &["no"], true, false, NODE_COLS),
    ("", "events", "Event", true, &["ev"], false, false, CORE_EVENT_COLS),
    ("", "serviceaccounts", "ServiceAccount", true, &["sa"], false, false, &[AGE]),
    ("apps", "statefulsets", "StatefulSet", true, &["sts"], true, true, STATEFULSET_COLS),
    ("apps", "deployments", "Deployment", true, &["deploy"], true, true, DEPLOYMENT_COLS),
    ("apps", "replicasets", "ReplicaSet", true, &["rs"], true, true, REPLICASET_COLS),
    ("apps", "daemonsets", "DaemonSet", true, &["ds"], true, false, &[AGE]),
    ("batch", "jobs", "Job", true, &[], true, false, JOB_COLS),
    ("batch", "cronjobs", "CronJob", true, &["cj"], true, false, CRONJOB_COLS),
    ("policy", "poddisruptionbudgets", "PodDisruptionBudget", true, &["pdb"], true, false, PDB_COLS),
    ("coordination.k8s.io", "leases", "Lease", true, &[], false, false, LEASE_COLS),
    ("events.k8s.io", "events", "Event", true, &["ev"], false, false, EVENT_COLS),
    ("rbac.authorization.k8s.io", "roles", "Role", true, &[], false, false, &[CREATED_AT]),
    ("rbac.authorization.k8s.io", "rolebindings", "RoleBinding", true, &[], false, false, BINDING_COLS),
    ("rbac.authorization.k8s.io", "clusterroles", "ClusterRole", false, &[], false, false, &[CREATED_AT]),
    ("rbac.authorization.k8s.io", "clusterrolebindings", "ClusterRoleBinding", false, &[], false, false, BINDING_COLS),
    ("storage.k8s.io", "storageclasses", "StorageClass", false, &["sc"], false, false, STORAGECLASS_COLS),
    (
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
        true,
        false,
        &[CREATED_AT],
    ),
];

/// Review kinds: only `create` is served.
const REVIEWS: &[(&str, &str, &str)] = &[
    ("authorization.k8s.io", "selfsubjectaccessreviews", "SelfSubjectAccessReview"),
    ("authorization.k8s.io", "subjectaccessreviews", "SubjectAccessReview"),
    ("authorization.k8s.io", "selfsubjectrulesreviews", "SelfSubjectRulesReview"),
    ("authentication.k8s.io", "selfsubjectreviews", "SelfSubjectReview"),
];

fn builtin(&(group, plural, kind, namespaced, short, status, scale, columns): &Builtin) -> ResourceType {
    let strings = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let (categories, extra_subresources) = match plural {
        "pods" => (&["all"][..], &["log", "eviction", "proxy", "portforward"][..]),
        "services" => (&["all"][..], &["proxy"][..]),
        "statefulsets" | "deployments" | "replicasets" | "daemonsets" | "jobs" | "cronjobs" => (&["all"][..], &[][..]),
        _ => (&[][..], &[][..]),
    };
    ResourceType {
        group: group.into(),
        versions: vec!["v1".into()],
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        namespaced,
        short_names: strings(short),
        categories: strings(categories),
        status,
        scale: scale.then(|| ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: None,
        }),
        columns: columns.iter().map(col).collect(),
        validators: BTreeMap::new(),
        crd: false,
        create_only: false,
        extra_subresources: strings(extra_subresources),
    }
}

/// All built-in resource types.
pub fn builtin_types() -> Vec<ResourceType> {
    let reviews = REVIEWS.iter().map(|&(group, plural, kind)| ResourceType {
        create_only: true,
        ..builtin(&(group, plural, kind, false, &[], false, false, &[]))
    });
    BUILTINS.iter().map(builtin).chain(reviews).collect()
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
    // `stringData` is write-only: kube-apiserver folds it into `data` when it decodes a Secret, a key in both
    // taking the `stringData` value (pkg/apis/core/v1/conversion.go `Convert_v1_Secret_To_core_Secret`).
    if (group, plural) == ("", "secrets")
        && let Some(Value::Object(string_data)) = obj.as_object_mut().and_then(|m| m.remove("stringData"))
    {
        use base64::Engine as _;
        if !obj.get("data").is_some_and(|d| d.is_object()) {
            obj["data"] = serde_json::json!({});
        }
        for (k, v) in string_data {
            let text = v.as_str().unwrap_or_default().to_string();
            obj["data"][k] = Value::String(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
    let template_spec: Option<&str> = match (group, plural) {
        ("apps", "statefulsets" | "deployments" | "replicasets" | "daemonsets") | ("batch", "jobs") => {
            Some("/spec/template/spec")
        }
        ("batch", "cronjobs") => Some("/spec/jobTemplate/spec/template/spec"),
        ("", "replicationcontrollers") | ("", "podtemplates") => Some("/spec/template/spec"),
        _ => None,
    };
    if let Some(spec) = template_spec.and_then(|p| obj.pointer_mut(p)) {
        default_pod_spec(spec);
    }
    // Template ObjectMetas are non-pointer structs: always serialised, `{}` when empty.
    if let Some(p) = template_spec {
        let meta_ptr = p.trim_end_matches("/spec").to_string() + "/metadata";
        if obj.pointer(&meta_ptr).is_none()
            && let Some(t) = obj.pointer_mut(p.trim_end_matches("/spec")).and_then(|t| t.as_object_mut())
        {
            t.insert("metadata".into(), serde_json::json!({}));
        }
        if plural == "cronjobs"
            && let Some(jt) = obj.pointer_mut("/spec/jobTemplate").and_then(|t| t.as_object_mut())
        {
            jt.entry("metadata").or_insert_with(|| serde_json::json!({}));
        }
    }
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
        ("", "nodes") => {
            // NodeStatus' non-pointer structs serialise with their zero values (k8s.io/api core/v1/types.go).
            ensure(obj, &["status", "daemonEndpoints", "kubeletEndpoint", "Port"], 0.into());
            for f in [
                "architecture",
                "bootID",
                "containerRuntimeVersion",
                "kernelVersion",
                "kubeProxyVersion",
                "kubeletVersion",
                "machineID",
                "operatingSystem",
                "osImage",
                "systemUUID",
            ] {
                ensure(obj, &["status", "nodeInfo", f], "".into());
            }
        }
        ("apps", "daemonsets") => {
            // SetDefaults_DaemonSet (pkg/apis/apps/v1/defaults.go).
            ensure(obj, &["spec", "revisionHistoryLimit"], 10.into());
            ensure(
                obj,
                &["spec", "updateStrategy"],
                serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}),
            );
            // The v1 conversion writes the internal template generation into this annotation on every write
            // (pkg/apis/apps/v1/conversion.go), so managedFields see it too.
            ensure(obj, &["metadata", "annotations", "deprecated.daemonset.template.generation"], "1".into());
        }
        ("", "services") => {
            // SetDefaults_Service (pkg/apis/core/v1/defaults.go); the IP allocation and IP families come from
            // the Service REST create (pkg/registry/core/service/storage/alloc.go).
            ensure(obj, &["spec", "type"], "ClusterIP".into());
            ensure(obj, &["spec", "sessionAffinity"], "None".into());
            ensure(obj, &["spec", "internalTrafficPolicy"], "Cluster".into());
            if obj.pointer("/spec/clusterIP").is_none() {
                let n: u8 = rand::random::<u8>().max(2);
                let m: u8 = rand::random();
                ensure(obj, &["spec", "clusterIP"], format!("10.96.{m}.{n}").into());
            }
            if let Some(ip) = obj.pointer("/spec/clusterIP").cloned() {
                ensure(obj, &["spec", "clusterIPs"], serde_json::json!([ip]));
            }
            ensure(obj, &["spec", "ipFamilies"], serde_json::json!(["IPv4"]));
            ensure(obj, &["spec", "ipFamilyPolicy"], "SingleStack".into());
            ensure(obj, &["status", "loadBalancer"], serde_json::json!({}));
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
            if let Some(spec) = obj.get_mut("spec") {
                default_pod_spec(spec);
            }
            // SetDefaults_Pod: enableServiceLinks (pkg/apis/core/v1/defaults.go).
            ensure(obj, &["spec", "enableServiceLinks"], true.into());
            ensure(obj, &["status", "phase"], "Pending".into());
            // PodCondition's `lastProbeTime` / `lastTransitionTime` are `metav1.Time` structs: the Go type
            // serialises an unset one as null (k8s.io/api `core/v1/types.go`).
            if let Some(conds) = obj.pointer_mut("/status/conditions").and_then(|c| c.as_array_mut()) {
                for c in conds.iter_mut().filter_map(|c| c.as_object_mut()) {
                    for f in ["lastProbeTime", "lastTransitionTime"] {
                        c.entry(f).or_insert(Value::Null);
                    }
                }
            }
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
            // SetDefaults_Job (pkg/apis/batch/v1/defaults.go).
            ensure(obj, &["spec", "parallelism"], 1.into());
            ensure(obj, &["spec", "completions"], 1.into());
            ensure(obj, &["spec", "backoffLimit"], 6.into());
            ensure(obj, &["spec", "completionMode"], "NonIndexed".into());
            ensure(obj, &["spec", "suspend"], false.into());
            ensure(obj, &["spec", "podReplacementPolicy"], "TerminatingOrFailed".into());
            ensure(obj, &["spec", "manualSelector"], false.into());
        }
        ("batch", "cronjobs") => {
            // SetDefaults_CronJob (pkg/apis/batch/v1/defaults.go).
            ensure(obj, &["spec", "concurrencyPolicy"], "Allow".into());
            ensure(obj, &["spec", "suspend"], false.into());
            ensure(obj, &["spec", "successfulJobsHistoryLimit"], 3.into());
            ensure(obj, &["spec", "failedJobsHistoryLimit"], 1.into());
        }
        ("", "persistentvolumes") => {
            // SetDefaults_PersistentVolume and the hostPath type default (pkg/apis/core/v1/defaults.go).
            ensure(obj, &["spec", "persistentVolumeReclaimPolicy"], "Retain".into());
            ensure(obj, &["spec", "volumeMode"], "Filesystem".into());
            if obj.pointer("/spec/hostPath").is_some() {
                ensure(obj, &["spec", "hostPath", "type"], "".into());
            }
        }
        ("storage.k8s.io", "storageclasses") => {
            // SetDefaults_StorageClass (pkg/apis/storage/v1/defaults.go).
            ensure(obj, &["reclaimPolicy"], "Delete".into());
            ensure(obj, &["volumeBindingMode"], "Immediate".into());
        }
        ("", "events") => {
            ensure(obj, &["type"], "Normal".into());
        }
        _ => {}
    }
}

/// Defaults of a pod spec and its containers (pkg/apis/core/v1/defaults.go `SetDefaults_PodSpec`,
/// `SetDefaults_Container`, `SetDefaults_ContainerPort`; `resources` and `securityContext` are non-pointer /
/// defaulted structs that serialise as `{}`).
pub fn default_pod_spec(spec: &mut Value) {
    let Some(m) = spec.as_object_mut() else {
        return;
    };
    let mut set = |k: &str, v: Value| {
        if m.get(k).is_none_or(|x| x.is_null()) {
            m.insert(k.into(), v);
        }
    };
    set("dnsPolicy", "ClusterFirst".into());
    set("restartPolicy", "Always".into());
    set("terminationGracePeriodSeconds", 30.into());
    set("securityContext", serde_json::json!({}));
    set("schedulerName", "default-scheduler".into());
    for key in ["containers", "initContainers"] {
        if let Some(cs) = m.get_mut(key).and_then(|c| c.as_array_mut()) {
            for c in cs.iter_mut().filter_map(|c| c.as_object_mut()) {
                let image = c.get("image").and_then(|i| i.as_str()).unwrap_or_default().to_string();
                // An image without tag or with `:latest` is pulled always (SetDefaults_Container).
                let last = image.rsplit('/').next().unwrap_or_default();
                let latest = !image.contains('@') && (!last.contains(':') || last.ends_with(":latest"));
                let mut cset = |k: &str, v: Value| {
                    if c.get(k).is_none_or(|x| x.is_null()) {
                        c.insert(k.into(), v);
                    }
                };
                cset("terminationMessagePath", "/dev/termination-log".into());
                cset("terminationMessagePolicy", "File".into());
                cset("imagePullPolicy", if latest { "Always" } else { "IfNotPresent" }.into());
                cset("resources", serde_json::json!({}));
                if let Some(ports) = c.get_mut("ports").and_then(|p| p.as_array_mut()) {
                    for p in ports.iter_mut().filter_map(|p| p.as_object_mut()) {
                        p.entry("protocol").or_insert_with(|| "TCP".into());
                    }
                }
            }
        }
    }
}

/// The Go zero value of a built-in kind as the API server serialises it (`runtime.DefaultUnstructuredConverter`
/// of `newObjectFunc()`), reduced to its structs and non-omitempty lists: non-pointer struct fields always exist
/// (k8s.io/api `core/v1/types.go`, `apps/v1/types.go`, `batch/v1/types.go`, `rbac/v1/types.go`, ...), so
/// structured-merge-diff never counts them as added. Custom resources start from nothing.
pub fn zero_object(api_version: &str, plural: &str) -> Value {
    use serde_json::json;
    let template = || json!({"metadata": {}, "spec": {"containers": null}});
    match (api_version, plural) {
        ("v1", "pods") => json!({"metadata": {}, "spec": {"containers": null}, "status": {}}),
        ("v1", "services") => json!({"metadata": {}, "spec": {}, "status": {"loadBalancer": {}}}),
        ("v1", "persistentvolumeclaims") => json!({"metadata": {}, "spec": {"resources": {}}, "status": {}}),
        ("v1", "persistentvolumes") | ("v1", "namespaces") => json!({"metadata": {}, "spec": {}, "status": {}}),
        ("v1", "nodes") => {
            json!({"metadata": {}, "spec": {}, "status": {"daemonEndpoints": {"kubeletEndpoint": {}}, "nodeInfo": {}}})
        }
        ("v1", "events") => json!({"metadata": {}, "involvedObject": {}, "source": {}, "eventTime": null,
            "firstTimestamp": null, "lastTimestamp": null, "reportingComponent": "", "reportingInstance": ""}),
        ("events.k8s.io/v1", "events") => json!({"metadata": {}, "regarding": {}, "deprecatedSource": {},
            "eventTime": null, "deprecatedFirstTimestamp": null, "deprecatedLastTimestamp": null}),
        ("v1", "replicationcontrollers") => json!({"metadata": {}, "spec": {}, "status": {}}),
        ("coordination.k8s.io/v1", "leases") => json!({"metadata": {}, "spec": {}}),
        ("apps/v1", "statefulsets") | ("apps/v1", "daemonsets") => {
            json!({"metadata": {}, "spec": {"template": template(), "updateStrategy": {}}, "status": {}})
        }
        ("apps/v1", "deployments") => {
            json!({"metadata": {}, "spec": {"template": template(), "strategy": {}}, "status": {}})
        }
        ("apps/v1", "replicasets") | ("batch/v1", "jobs") => {
            json!({"metadata": {}, "spec": {"template": template()}, "status": {}})
        }
        ("batch/v1", "cronjobs") => {
            json!({"metadata": {}, "spec": {"jobTemplate": {"metadata": {}, "spec": {"template": template()}}}, "status": {}})
        }
        ("policy/v1", "poddisruptionbudgets") => json!({"metadata": {}, "spec": {}, "status": {}}),
        ("rbac.authorization.k8s.io/v1", "roles") | ("rbac.authorization.k8s.io/v1", "clusterroles") => {
            json!({"metadata": {}, "rules": null})
        }
        ("rbac.authorization.k8s.io/v1", "rolebindings") | ("rbac.authorization.k8s.io/v1", "clusterrolebindings") => {
            json!({"metadata": {}, "roleRef": {}})
        }
        ("apiextensions.k8s.io/v1", "customresourcedefinitions") => {
            json!({"metadata": {}, "spec": {"names": {}, "versions": null}, "status": {"acceptedNames": {}, "storedVersions": null}})
        }
        _ => json!({"metadata": {}}),
    }
}

/// Whether a built-in (group, plural) carries `metadata.generation` (custom resources always do).
/// kube-apiserver sets it for workload/policy kinds and CRDs, not for core kinds like ConfigMap or Lease.
pub fn generation_tracked(group: &str, plural: &str) -> bool {
    // Pods too since PodObservedGenerationTracking (pkg/registry/core/pod/strategy.go `PrepareForCreate` sets
    // generation 1, `PrepareForUpdate` bumps it on spec changes).
    matches!(group, "apps" | "batch" | "policy" | "apiextensions.k8s.io" | "networking.k8s.io")
        || (group.is_empty() && plural == "pods")
}
