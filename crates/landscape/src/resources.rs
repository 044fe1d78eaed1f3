//! The resources etcd-druid v0.37.1 manages for one Etcd, as JSON objects built field by field as its component
//! builders build them (`internal/component/*`; each function names its builder). Where the playground must differ
//! from a seed, the difference is listed in [`PLAYGROUND_DIFFERENCES`].
//!
//! Pure functions over the Etcd object: no API calls, unit-tested (and golden-tested in `tests/golden.rs`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::etcdconf::{
    self, DEFAULT_CLIENT_PORT, DEFAULT_PEER_PORT, ETCD_CONF_KEY, MOUNT_ETCD_CA, MOUNT_ETCD_CLIENT_TLS, MOUNT_ETCD_DATA,
    MOUNT_ETCD_PEER_CA, MOUNT_ETCD_PEER_SERVER_TLS, MOUNT_ETCD_SERVER_TLS,
};
use druid_api::Etcd;
use druid_api::names::{CONFIG_VOLUME, LABEL_MANAGED_BY, LABEL_PART_OF, MANAGED_BY_DRUID};

/// Backup sidecar port (druid default).
pub const BACKUP_PORT: u16 = 8080;
/// Pod annotation with the loopback client URL of the member's real etcd process.
pub use druid_api::names::CLIENT_URL_ANNOTATION as ANNOTATION_CLIENT_URL;
/// Pod annotation with the loopback address of the member's backup-restore HTTP API.
pub const ANNOTATION_BACKUP_API: &str = "playground.druidctl.gardener.cloud/backup-api";

/// `app.kubernetes.io/component` (etcd-druid v0.37.1 `api/core/v1alpha1/constants.go` `LabelComponentKey`).
pub const LABEL_COMPONENT: &str = "app.kubernetes.io/component";
/// `app.kubernetes.io/name` (`LabelAppNameKey`).
pub const LABEL_APP_NAME: &str = "app.kubernetes.io/name";
/// Pod template annotation with the checksum of the ConfigMap's data (`common.CheckSumKeyConfigMap`).
pub const CHECKSUM_CONFIGMAP: &str = "checksum/etcd-configmap";

// etcd-druid v0.37.1 internal/common/constants.go: component names (values of `app.kubernetes.io/component`).
/// Of the StatefulSet and its pods.
pub const COMPONENT_STATEFULSET: &str = "etcd-statefulset";
const COMPONENT_CLIENT_SERVICE: &str = "etcd-client-service";
const COMPONENT_PEER_SERVICE: &str = "etcd-peer-service";
const COMPONENT_CONFIGMAP: &str = "etcd-configmap";
/// Of the member leases.
pub const COMPONENT_MEMBER_LEASE: &str = "etcd-member-lease";
const COMPONENT_SNAPSHOT_LEASE: &str = "etcd-snapshot-lease";
const COMPONENT_PDB: &str = "etcd-pdb";
const COMPONENT_ROLE: &str = "etcd-role";
const COMPONENT_ROLE_BINDING: &str = "etcd-role-binding";
const COMPONENT_SERVICE_ACCOUNT: &str = "etcd-service-account";

// etcd-druid v0.37.1 internal/common/constants.go: volume names and the backup-restore mount paths.
const VOLUME_ETCD_CA: &str = "etcd-ca";
const VOLUME_ETCD_SERVER_TLS: &str = "etcd-server-tls";
const VOLUME_ETCD_CLIENT_TLS: &str = "etcd-client-tls";
const VOLUME_ETCD_PEER_CA: &str = "etcd-peer-ca";
const VOLUME_ETCD_PEER_SERVER_TLS: &str = "etcd-peer-server-tls";
const VOLUME_BACKUP_RESTORE_CA: &str = "backup-restore-ca";
const VOLUME_BACKUP_RESTORE_SERVER_TLS: &str = "backup-restore-server-tls";
const VOLUME_BACKUP_RESTORE_CLIENT_TLS: &str = "backup-restore-client-tls";
const VOLUME_LOCAL_BACKUP: &str = "local-backup";
const VOLUME_PROVIDER_BACKUP_SECRET: &str = "etcd-backup-secret";
/// Mount path of the backup-restore CA bundle (`VolumeMountPathBackupRestoreCA`).
pub const MOUNT_BACKUP_RESTORE_CA: &str = "/var/etcdbr/ssl/ca";
/// Mount path of the backup-restore server key pair (`VolumeMountPathBackupRestoreServerTLS`).
pub const MOUNT_BACKUP_RESTORE_SERVER_TLS: &str = "/var/etcdbr/ssl/server";
const MOUNT_GCS_BACKUP_SECRET: &str = "/var/.gcp/";
const MOUNT_NON_GCS_BACKUP_SECRET: &str = "/var/etcd-backup";
/// Mount path of the ConfigMap in the backup-restore container (statefulset/constants.go).
pub const MOUNT_ETCD_CONFIG: &str = "/var/etcd/config/";
/// `common.ModeOwnerReadWriteGroupRead` (0640).
const MODE_0640: i32 = 0o640;
/// `common.DefaultPortEtcdWrapper`.
const DEFAULT_WRAPPER_PORT: i32 = 9095;
/// Host directory of Local buckets without `hostPath` in the store secret (`store.LocalProviderDefaultMountPath`).
pub const LOCAL_PROVIDER_DEFAULT_MOUNT_PATH: &str = "/etc/gardener/local-backupbuckets";

// etcd-druid v0.37.1 internal/images/images.yaml: the image vector (feature gate UpgradeEtcdVersion off).
/// `etcd-wrapper` of druid's image vector.
pub const IMAGE_ETCD_WRAPPER: &str = "europe-docker.pkg.dev/gardener-project/public/gardener/etcd-wrapper:v0.6.2";
/// `etcd-backup-restore` of druid's image vector.
pub const IMAGE_BACKUP_RESTORE: &str = "europe-docker.pkg.dev/gardener-project/public/gardener/etcdbrctl:v0.41.2";
/// `alpine` of druid's image vector (the init container of a Local store).
pub const IMAGE_ALPINE: &str = "europe-docker.pkg.dev/gardener-project/public/3rd/alpine:3.21.3";

/// Every way the playground's objects and members differ from a seed's, with the reason: the one list that
/// `docs/playground.md` repeats (a test keeps them in step).
pub const PLAYGROUND_DIFFERENCES: &[(&str, &str)] = &[
    (
        "Local backup store path",
        "the StatefulSet mounts the Local bucket from the host path etcd-druid renders (`/etc/gardener/local-backupbuckets/<container>` without a store secret), but the sidecar keeps the object store under the playground's state directory (`backups/<namespace>/<prefix>`), so that a playground needs no root and leaves nothing outside its directory",
    ),
    (
        "Images are not run",
        "the containers name etcd-druid v0.37.1's image vector (etcd-wrapper, etcdbrctl, alpine), but no image is pulled: etcd is the `etcd` binary of this machine (Debian `etcd-server`) or a simulated member, and the sidecar is the landscape's; the init container `change-backup-bucket-permissions` is rendered and not run",
    ),
    (
        "Loopback addresses",
        "the advertise and initial-cluster URLs name the pods' peer-service DNS names, as on a seed; each member listens on loopback ports of its own, and the landscape maps a URL's pod name to those ports (the playground's DNS). Pods carry annotations with these loopback addresses (`playground.druidctl.gardener.cloud/*`) that a seed's pods do not have",
    ),
    (
        "Client TLS beside plain HTTP",
        "with `client-transport-security` a member serves its mounted server key pair on an https listener of its own beside a plain-http one, which the landscape's actors use; `client-cert-auth` is not enforced there, so that the pod port-forward and druidctl's certificate check can connect without a client certificate",
    ),
    (
        "Peer traffic is plain HTTP",
        "peer URLs are `https` in the ConfigMap with peer TLS, but members talk to each other over plain http on loopback: the peer certificates name the pods' DNS names, not 127.0.0.1",
    ),
    (
        "Data directory",
        "`data-dir` is `/var/etcd/data/new.etcd` in the ConfigMap; the playground's member keeps its data at the root of its volume directory",
    ),
    (
        "Member lease duration",
        "member leases carry `leaseDurationSeconds` of the landscape's short lease (etcd-druid creates them without a spec), so that freshness checks follow the playground's fast heartbeats",
    ),
];

/// etcd-druid v0.37.1 `api/core/v1alpha1/helper.go` `GetDefaultLabels`: on every managed resource.
pub fn default_labels(etcd: &Etcd) -> BTreeMap<String, String> {
    let name = etcd.metadata.name.clone().unwrap_or_default();
    BTreeMap::from([(LABEL_MANAGED_BY.to_string(), MANAGED_BY_DRUID.to_string()), (LABEL_PART_OF.to_string(), name)])
}

/// The default labels plus `app.kubernetes.io/component` and `app.kubernetes.io/name`, as every component's
/// `getLabels` merges them.
fn component_labels(etcd: &Etcd, component: &str, app_name: &str) -> BTreeMap<String, String> {
    let mut labels = default_labels(etcd);
    labels.insert(LABEL_COMPONENT.into(), component.into());
    labels.insert(LABEL_APP_NAME.into(), app_name.into());
    labels
}

/// `GetAsOwnerReference` (helper.go).
fn owner_ref(etcd: &Etcd) -> Value {
    json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1",
        "kind": "Etcd",
        "name": etcd.metadata.name,
        "uid": etcd.metadata.uid,
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

fn meta(etcd: &Etcd, name: &str, labels: BTreeMap<String, String>) -> Value {
    json!({
        "name": name,
        "namespace": etcd.metadata.namespace,
        "labels": labels,
        "ownerReferences": [owner_ref(etcd)],
    })
}

fn ports(etcd: &Etcd) -> (i32, i32, i32) {
    (
        etcd.spec.etcd.client_port.unwrap_or(DEFAULT_CLIENT_PORT),
        etcd.spec.etcd.server_port.unwrap_or(DEFAULT_PEER_PORT),
        etcd.spec.backup.port.unwrap_or(BACKUP_PORT as i32),
    )
}

/// `etcd.conf.yaml` as etcd-druid v0.37.1 renders it (see [`etcdconf`]).
pub fn etcd_conf_yaml(etcd: &Etcd) -> String {
    etcdconf::to_yaml(&etcdconf::render(etcd))
}

/// ConfigMap `<etcd>-config`: etcd-druid v0.37.1 `internal/component/configmap/configmap.go` `buildResource`.
pub fn config_map(etcd: &Etcd) -> Value {
    let name = etcd.managed_names().config_map();
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": meta(etcd, &name, component_labels(etcd, COMPONENT_CONFIGMAP, &name)),
        "data": {ETCD_CONF_KEY: etcd_conf_yaml(etcd)},
    })
}

/// configmap.go `computeCheckSum`: SHA-256 (hex) of the JSON of the ConfigMap's `data` (Go's `json.Marshal` of a
/// `map[string]string`: keys sorted, as serde_json writes a `BTreeMap`).
pub fn config_map_checksum(config_map: &Value) -> String {
    let data: BTreeMap<String, String> = serde_json::from_value(config_map["data"].clone()).unwrap_or_default();
    let json = serde_json::to_vec(&data).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &json);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The selector of both Services: the default labels and the StatefulSet's component (clientservice.go,
/// peerservice.go: only the StatefulSet's pods).
fn service_selector(etcd: &Etcd) -> BTreeMap<String, String> {
    let mut selector = default_labels(etcd);
    selector.insert(LABEL_COMPONENT.into(), COMPONENT_STATEFULSET.into());
    selector
}

/// Service `<etcd>-client`: etcd-druid v0.37.1 `internal/component/clientservice/clientservice.go`.
pub fn client_service(etcd: &Etcd) -> Value {
    let name = etcd.managed_names().client_service();
    let (client, peer, backup) = ports(etcd);
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": meta(etcd, &name, component_labels(etcd, COMPONENT_CLIENT_SERVICE, &name)),
        "spec": {"type": "ClusterIP", "sessionAffinity": "None", "selector": service_selector(etcd), "ports": [
            {"name": "client", "protocol": "TCP", "port": client, "targetPort": client},
            {"name": "server", "protocol": "TCP", "port": peer, "targetPort": peer},
            {"name": "backuprestore", "protocol": "TCP", "port": backup, "targetPort": backup},
        ]},
    })
}

/// Service `<etcd>-peer` (headless): etcd-druid v0.37.1 `internal/component/peerservice/peerservice.go`.
pub fn peer_service(etcd: &Etcd) -> Value {
    let name = etcd.managed_names().peer_service();
    let (_, peer, _) = ports(etcd);
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": meta(etcd, &name, component_labels(etcd, COMPONENT_PEER_SERVICE, &name)),
        "spec": {"type": "ClusterIP", "clusterIP": "None", "sessionAffinity": "None", "selector": service_selector(etcd),
                 "publishNotReadyAddresses": true,
                 "ports": [{"name": "peer", "protocol": "TCP", "port": peer, "targetPort": peer}]},
    })
}

/// Services `<etcd>-client` and `<etcd>-peer`.
pub fn services(etcd: &Etcd) -> Vec<Value> {
    vec![client_service(etcd), peer_service(etcd)]
}

/// Member leases (etcd-druid v0.37.1 `internal/component/memberlease/memberlease.go`, one per `spec.replicas`,
/// named by `GetMemberLeaseNames`) and, with a backup store, the snapshot leases
/// (`internal/component/snapshotlease/snapshotlease.go`: delta, then full). The member leases carry the
/// landscape's `lease_seconds` (see [`PLAYGROUND_DIFFERENCES`]).
pub fn leases(etcd: &Etcd, lease_seconds: i32) -> Vec<Value> {
    let names = etcd.managed_names();
    let mut out: Vec<Value> = (0..etcd.spec.replicas.max(0) as u32)
        .map(|i| {
            let name = names.member_lease(i);
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": meta(etcd, &name, component_labels(etcd, COMPONENT_MEMBER_LEASE, &name)),
                "spec": {"leaseDurationSeconds": lease_seconds}})
        })
        .collect();
    if etcd.backups_enabled() {
        for name in [names.delta_snapshot_lease(), names.full_snapshot_lease()] {
            out.push(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": meta(etcd, &name, component_labels(etcd, COMPONENT_SNAPSHOT_LEASE, &name))}));
        }
    }
    out
}

/// Annotation on the Etcd that lets the PDB evict unhealthy pods (poddisruptionbudget.go).
const ALLOW_UNHEALTHY_POD_EVICTION: &str = "resources.druid.gardener.cloud/allow-unhealthy-pod-eviction";

/// PodDisruptionBudget `<etcd>`: etcd-druid v0.37.1 `internal/component/poddistruptionbudget/poddisruptionbudget.go`
/// (`computePDBMinAvailable`: a majority, 0 for a single member).
pub fn pod_disruption_budget(etcd: &Etcd) -> Value {
    let name = etcd.managed_names().statefulset();
    let min = if etcd.spec.replicas > 1 { etcd.spec.replicas / 2 + 1 } else { 0 };
    let mut spec = json!({"minAvailable": min, "selector": {"matchLabels": default_labels(etcd)}});
    if etcd.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(ALLOW_UNHEALTHY_POD_EVICTION)) {
        spec["unhealthyPodEvictionPolicy"] = json!("AlwaysAllow");
    }
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": meta(etcd, &name, component_labels(etcd, COMPONENT_PDB, &name)),
        "spec": spec,
    })
}

/// ServiceAccount `<etcd>`: etcd-druid v0.37.1 `internal/component/serviceaccount/serviceaccount.go`, with
/// druid's default `disableEtcdServiceAccountAutomount: false`.
pub fn service_account(etcd: &Etcd) -> Value {
    let name = etcd.managed_names().statefulset();
    json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": meta(etcd, &name, component_labels(etcd, COMPONENT_SERVICE_ACCOUNT, &name)),
        "automountServiceAccountToken": true})
}

/// Role `druid.gardener.cloud:etcd:<etcd>`: etcd-druid v0.37.1 `internal/component/role/role.go` (the name label
/// has `-` for `:`, which a label value may not contain).
pub fn role(etcd: &Etcd) -> Value {
    let name = etcd.managed_names().role();
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
    "metadata": meta(etcd, &name, component_labels(etcd, COMPONENT_ROLE, &name.replace(':', "-"))),
    "rules": [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "patch", "update", "watch"]},
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "list", "patch", "update", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    ]})
}

/// RoleBinding `druid.gardener.cloud:etcd:<etcd>`: etcd-druid v0.37.1 `internal/component/rolebinding/rolebinding.go`.
pub fn role_binding(etcd: &Etcd) -> Value {
    let names = etcd.managed_names();
    let name = names.role();
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": meta(etcd, &name, component_labels(etcd, COMPONENT_ROLE_BINDING, &name.replace(':', "-"))),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": names.statefulset(), "namespace": etcd.metadata.namespace}]})
}

/// etcd-druid v0.37.1 `internal/store/store.go` `StorageProviderFromInfraProvider`: the store provider's canonical
/// name (`None` for an unknown one, which druid refuses).
pub fn storage_provider(provider: &str) -> Option<&'static str> {
    Some(match provider {
        "aws" | "S3" | "s3" | "stackit" => "S3",
        "azure" | "ABS" | "abs" => "ABS",
        "gcp" | "GCS" | "gcs" => "GCS",
        "openstack" | "Swift" | "swift" => "Swift",
        "alicloud" | "OSS" | "oss" => "OSS",
        "dell" | "ECS" | "ecs" => "ECS",
        "openshift" | "OCS" | "ocs" => "OCS",
        "Local" | "local" => "Local",
        _ => return None,
    })
}

/// What the StatefulSet builder reads besides the Etcd.
#[derive(Debug, Clone, Default)]
pub struct StatefulSetInputs {
    /// `spec.replicas` of the StatefulSet.
    pub replicas: i32,
    /// [`config_map_checksum`] of the ConfigMap just synced (`checksum/etcd-configmap`).
    pub config_map_checksum: Option<String>,
    /// `hostPath` of the Local store's secret (`store.GetHostMountPathFromSecretRef`); `None`: the default.
    pub local_store_host_path: Option<String>,
}

/// Formats a duration as Go's `time.Duration.String` does (`2s`, `5m0s`, `12h0m0s`, `500ms`): the form of
/// `metav1.Duration` values etcd-druid puts into the sidecar's args.
pub fn go_duration_string(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, m) = (ms / 3_600_000, (ms / 60_000) % 60);
    let s = (ms % 60_000) as f64 / 1000.0;
    let secs = if s.fract() == 0.0 { format!("{}s", s as u64) } else { format!("{s}s") };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

/// A `metav1.Duration` of the Etcd spec as druid passes it on (`Duration.String()`); unparsable text as written.
fn go_duration(text: &str) -> String {
    match crate::certmanager::parse_go_duration(text) {
        Some(d) => go_duration_string(d.unsigned_abs()),
        None => text.to_string(),
    }
}

fn secret_volume(name: &str, secret: &str) -> Value {
    json!({"name": name, "secret": {"secretName": secret, "defaultMode": MODE_0640}})
}

fn mount(name: &str, path: &str) -> Value {
    json!({"name": name, "mountPath": path})
}

/// StatefulSet `<etcd>`: etcd-druid v0.37.1 `internal/component/statefulset/builder.go` (`Build` of a new
/// StatefulSet, runtime component creation enabled, no scheduling constraints).
pub fn stateful_set(etcd: &Etcd, inputs: &StatefulSetInputs) -> Value {
    let names = etcd.managed_names();
    let name = names.statefulset();
    let spec = &etcd.spec;
    let claim = spec.volume_claim_template.clone().unwrap_or_else(|| name.clone());
    // builder.go getStatefulSetLabels / getStatefulSetPodLabels.
    let sts_labels = component_labels(etcd, COMPONENT_STATEFULSET, &name);
    let mut pod_labels = spec.labels.clone();
    pod_labels.extend(sts_labels.clone());
    // getPodTemplateAnnotations: the Etcd's annotations and the ConfigMap's checksum.
    let mut annotations = spec.annotations.clone().unwrap_or_default();
    if let Some(sum) = &inputs.config_map_checksum {
        annotations.insert(CHECKSUM_CONFIGMAP.into(), sum.clone());
    }
    let mut pod_meta = json!({"labels": pod_labels});
    if !annotations.is_empty() {
        pod_meta["annotations"] = json!(annotations);
    }
    let mut pod_spec = json!({
        "hostAliases": [{"ip": "127.0.0.1", "hostnames": [format!("{name}-local")]}],
        "shareProcessNamespace": true,
        "serviceAccountName": name,
        "containers": [etcd_container(etcd, &claim), backup_restore_container(etcd, &claim)],
        // getPodSecurityContext (not runAsRoot).
        "securityContext": {"runAsGroup": 65532, "runAsNonRoot": true, "runAsUser": 65532, "fsGroup": 65532,
                            "fsGroupChangePolicy": "OnRootMismatch"},
        "volumes": pod_volumes(etcd, inputs),
    });
    if let Some(init) = init_containers(etcd) {
        pod_spec["initContainers"] = init;
    }
    if let Some(pc) = spec.priority_class_name.as_deref().filter(|p| !p.is_empty()) {
        pod_spec["priorityClassName"] = json!(pc);
    }
    // getVolumeClaimTemplates.
    let storage = spec.storage_capacity.as_ref().map(int_or_string).unwrap_or_else(|| json!("16Gi"));
    let mut claim_spec = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}});
    if let Some(class) = spec.storage_class.as_deref().filter(|c| !c.is_empty()) {
        claim_spec["storageClassName"] = json!(class);
    }
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": meta(etcd, &name, sts_labels),
        "spec": {
            "replicas": inputs.replicas,
            "selector": {"matchLabels": default_labels(etcd)},
            "serviceName": names.peer_service(),
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": pod_meta, "spec": pod_spec},
            "volumeClaimTemplates": [{"metadata": {"name": claim}, "spec": claim_spec}],
        },
    })
}

fn int_or_string(q: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString) -> Value {
    serde_json::to_value(q).unwrap_or(Value::Null)
}

/// builder.go `getPodInitContainers`: with a Local store (and a container, not as root) the bucket is chowned first.
fn init_containers(etcd: &Etcd) -> Option<Value> {
    let store = etcd.spec.backup.store.as_ref()?;
    if storage_provider(store.provider.as_deref()?) != Some("Local") {
        return None;
    }
    let path = local_store_mount_path(etcd)?;
    Some(json!([{
        "name": "change-backup-bucket-permissions",
        "image": IMAGE_ALPINE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["chown", "-R", "65532:65532", path],
        "volumeMounts": [mount(VOLUME_LOCAL_BACKUP, &path)],
        "securityContext": {"allowPrivilegeEscalation": false, "runAsGroup": 0, "runAsNonRoot": false, "runAsUser": 0},
    }]))
}

/// `kubernetes.MountPathLocalStore` (internal/utils/kubernetes/store.go): `/home/nonroot/<container>`.
fn local_store_mount_path(etcd: &Etcd) -> Option<String> {
    let container = etcd.spec.backup.store.as_ref()?.container.as_deref()?;
    Some(format!("/home/nonroot/{container}"))
}

/// builder.go `getEtcdBackupVolumeMount`.
fn backup_volume_mount(etcd: &Etcd) -> Option<Value> {
    let provider = storage_provider(etcd.spec.backup.store.as_ref()?.provider.as_deref()?)?;
    match provider {
        "Local" => Some(mount(VOLUME_LOCAL_BACKUP, &local_store_mount_path(etcd)?)),
        "GCS" => Some(mount(VOLUME_PROVIDER_BACKUP_SECRET, MOUNT_GCS_BACKUP_SECRET)),
        "S3" | "ABS" | "OSS" | "Swift" | "OCS" => {
            Some(mount(VOLUME_PROVIDER_BACKUP_SECRET, MOUNT_NON_GCS_BACKUP_SECRET))
        }
        _ => None,
    }
}

/// builder.go `getEtcdContainer` with `getEtcdContainerCommandArgs`, the readiness probe on etcd-wrapper's
/// `/readyz` and the secret mounts of `getEtcdContainerSecretVolumeMounts` (no env: `getEtcdContainerEnvVars` is
/// empty).
fn etcd_container(etcd: &Etcd, claim: &str) -> Value {
    let name = etcd.metadata.name.as_deref().unwrap_or_default();
    let (client, peer, backup) = ports(etcd);
    let wrapper = etcd.spec.etcd.wrapper_port.unwrap_or(DEFAULT_WRAPPER_PORT);
    let mut args = vec![
        "start-etcd".to_string(),
        format!("--backup-restore-host-port={name}-local:{backup}"),
        format!("--etcd-server-name={name}-local"),
    ];
    match &etcd.spec.backup.tls {
        None => args.push("--backup-restore-tls-enabled=false".into()),
        Some(tls) => {
            args.push("--backup-restore-tls-enabled=true".into());
            let key = tls.tls_ca_secret_ref.data_key.as_deref().unwrap_or("ca.crt");
            args.push(format!("--backup-restore-ca-cert-bundle-path={MOUNT_BACKUP_RESTORE_CA}/{key}"));
        }
    }
    if etcd.spec.etcd.client_url_tls.is_some() {
        args.push(format!("--etcd-client-cert-path={MOUNT_ETCD_CLIENT_TLS}/tls.crt"));
        args.push(format!("--etcd-client-key-path={MOUNT_ETCD_CLIENT_TLS}/tls.key"));
    }
    args.push(format!("--etcd-client-port={client}"));
    args.push(format!("--etcd-wrapper-port={wrapper}"));
    let mut mounts = vec![mount(claim, MOUNT_ETCD_DATA)];
    if etcd.spec.etcd.client_url_tls.is_some() {
        mounts.push(mount(VOLUME_ETCD_CA, MOUNT_ETCD_CA));
        mounts.push(mount(VOLUME_ETCD_SERVER_TLS, MOUNT_ETCD_SERVER_TLS));
        mounts.push(mount(VOLUME_ETCD_CLIENT_TLS, MOUNT_ETCD_CLIENT_TLS));
    }
    if etcd.spec.etcd.peer_url_tls.is_some() {
        mounts.push(mount(VOLUME_ETCD_PEER_CA, MOUNT_ETCD_PEER_CA));
        mounts.push(mount(VOLUME_ETCD_PEER_SERVER_TLS, MOUNT_ETCD_PEER_SERVER_TLS));
    }
    if etcd.spec.backup.tls.is_some() {
        mounts.push(mount(VOLUME_BACKUP_RESTORE_CA, MOUNT_BACKUP_RESTORE_CA));
    }
    let scheme = if etcd.spec.backup.tls.is_some() { "HTTPS" } else { "HTTP" };
    json!({
        "name": "etcd",
        "image": etcd.spec.etcd.image.as_deref().unwrap_or(IMAGE_ETCD_WRAPPER),
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": wrapper, "scheme": scheme},
                           "initialDelaySeconds": 15, "periodSeconds": 5, "failureThreshold": 5},
        "ports": [{"name": "server", "protocol": "TCP", "containerPort": peer},
                  {"name": "client", "protocol": "TCP", "containerPort": client}],
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
        "securityContext": {"allowPrivilegeEscalation": false},
        "volumeMounts": mounts,
    })
}

/// builder.go `getBackupRestoreContainer`: args of `getBackupRestoreContainerCommandArgs`, env of
/// `utils.GetBackupRestoreContainerEnvVars` and `store.GetProviderEnvVars`, mounts of
/// `getBackupRestoreContainerVolumeMounts`.
fn backup_restore_container(etcd: &Etcd, claim: &str) -> Value {
    let (_, _, backup) = ports(etcd);
    let mut mounts = vec![mount(claim, MOUNT_ETCD_DATA), mount(CONFIG_VOLUME, MOUNT_ETCD_CONFIG)];
    if etcd.spec.backup.tls.is_some() {
        mounts.push(mount(VOLUME_BACKUP_RESTORE_SERVER_TLS, MOUNT_BACKUP_RESTORE_SERVER_TLS));
    }
    if etcd.spec.etcd.client_url_tls.is_some() {
        mounts.push(mount(VOLUME_ETCD_CA, MOUNT_ETCD_CA));
        mounts.push(mount(VOLUME_ETCD_CLIENT_TLS, MOUNT_ETCD_CLIENT_TLS));
    }
    if let Some(m) = backup_volume_mount(etcd) {
        mounts.push(m);
    }
    json!({
        "name": "backup-restore",
        "image": etcd.spec.backup.image.as_deref().unwrap_or(IMAGE_BACKUP_RESTORE),
        "imagePullPolicy": "IfNotPresent",
        "args": backup_restore_args(etcd),
        "ports": [{"name": "server", "protocol": "TCP", "containerPort": backup}],
        "env": backup_restore_env(etcd),
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
        "securityContext": {"allowPrivilegeEscalation": false},
        "volumeMounts": mounts,
    })
}

/// `utils.GetBackupRestoreContainerEnvVars` (internal/utils/envvar.go) and `store.GetProviderEnvVars`
/// (internal/store/store.go): the pod's name and namespace, the bucket, and the provider's credentials variable
/// (none for Local).
fn backup_restore_env(etcd: &Etcd) -> Vec<Value> {
    let field = |name: &str, path: &str| json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}});
    let mut env = vec![field("POD_NAME", "metadata.name"), field("POD_NAMESPACE", "metadata.namespace")];
    let Some(store) = &etcd.spec.backup.store else { return env };
    env.push(json!({"name": "STORAGE_CONTAINER", "value": store.container.clone().unwrap_or_default()}));
    let value = |name: &str, v: &str| json!({"name": name, "value": v});
    match store.provider.as_deref().and_then(storage_provider) {
        Some("S3") => env.push(value("AWS_APPLICATION_CREDENTIALS", MOUNT_NON_GCS_BACKUP_SECRET)),
        Some("ABS") => env.push(value("AZURE_APPLICATION_CREDENTIALS", MOUNT_NON_GCS_BACKUP_SECRET)),
        Some("GCS") => {
            env.push(value("GOOGLE_APPLICATION_CREDENTIALS", &format!("{MOUNT_GCS_BACKUP_SECRET}serviceaccount.json")))
        }
        Some("Swift") => env.push(value("OPENSTACK_APPLICATION_CREDENTIALS", MOUNT_NON_GCS_BACKUP_SECRET)),
        Some("OSS") => env.push(value("ALICLOUD_APPLICATION_CREDENTIALS", MOUNT_NON_GCS_BACKUP_SECRET)),
        Some("OCS") => env.push(value("OPENSHIFT_APPLICATION_CREDENTIALS", MOUNT_NON_GCS_BACKUP_SECRET)),
        Some("ECS") => {
            let secret = store.secret_ref.as_ref().map(|s| s.name.clone()).unwrap_or_default();
            for (name, key) in [
                ("ECS_ENDPOINT", "endpoint"),
                ("ECS_ACCESS_KEY_ID", "accessKeyID"),
                ("ECS_SECRET_ACCESS_KEY", "secretAccessKey"),
            ] {
                env.push(json!({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": false}}}));
            }
        }
        _ => {}
    }
    env
}

// builder.go defaults of the sidecar's args.
const DEFAULT_SNAPSHOT_MEMORY_LIMIT: i64 = 100 * 1024 * 1024;
const DEFAULT_MAX_BACKUPS_LIMIT_BASED_GC: i32 = 7;
const DEFAULT_QUOTA: i64 = 8 * 1024 * 1024 * 1024;

/// builder.go `getBackupRestoreContainerCommandArgs` with `getBackupStoreCommandArgs`.
pub fn backup_restore_args(etcd: &Etcd) -> Vec<String> {
    let name = etcd.metadata.name.as_deref().unwrap_or_default();
    let names = etcd.managed_names();
    let (client, _, backup_port) = ports(etcd);
    let spec = &etcd.spec;
    let backup = &spec.backup;
    let mut args = vec!["server".to_string(), format!("--server-port={backup_port}")];
    if let Some(store) = &backup.store {
        args.push("--enable-snapshot-lease-renewal=true".into());
        args.push(format!("--full-snapshot-lease-name={}", names.full_snapshot_lease()));
        args.push(format!("--delta-snapshot-lease-name={}", names.delta_snapshot_lease()));
        let provider = store.provider.as_deref().and_then(storage_provider).unwrap_or_default();
        args.push(format!("--storage-provider={provider}"));
        args.push(format!("--store-prefix={}", store.prefix));
        if let Some(e) = &store.endpoint_override {
            args.push(format!("--store-endpoint-override={e}"));
        }
        if let Some(s) = &backup.full_snapshot_schedule {
            args.push(format!("--schedule={s}"));
        }
        if let Some(p) = &backup.delta_snapshot_period {
            args.push(format!("--delta-snapshot-period={}", go_duration(p)));
        }
        let limit = backup.delta_snapshot_memory_limit.as_ref().and_then(etcdconf::quantity_value);
        args.push(format!("--delta-snapshot-memory-limit={}", limit.unwrap_or(DEFAULT_SNAPSHOT_MEMORY_LIMIT)));
        let policy = backup.garbage_collection_policy.clone().unwrap_or_else(|| "LimitBased".into());
        args.push(format!("--garbage-collection-policy={policy}"));
        if policy == "LimitBased" {
            args.push(format!("--max-backups={DEFAULT_MAX_BACKUPS_LIMIT_BASED_GC}"));
        }
        if let Some(p) = &backup.garbage_collection_period {
            args.push(format!("--garbage-collection-period={}", go_duration(p)));
        }
        let compression = backup.compression.clone().unwrap_or_default();
        args.push(format!("--compress-snapshots={}", compression.enabled.unwrap_or(true)));
        args.push(format!("--compression-policy={}", compression.policy.as_deref().unwrap_or("gzip")));
        args.push("--etcd-snapshot-timeout=15m".into());
    }
    if let Some(s) = &spec.etcd.defragmentation_schedule {
        args.push(format!("--defragmentation-schedule={s}"));
    }
    args.push("--etcd-defrag-timeout=15m".into());
    let common = spec.common.clone().unwrap_or_default();
    args.push(format!("--auto-compaction-mode={}", common.auto_compaction_mode.as_deref().unwrap_or("periodic")));
    args.push(format!("--auto-compaction-retention={}", common.auto_compaction_retention.as_deref().unwrap_or("30m")));
    match &spec.etcd.client_url_tls {
        Some(tls) => {
            let key = tls.tls_ca_secret_ref.data_key.as_deref().unwrap_or("ca.crt");
            args.push(format!("--cacert={MOUNT_ETCD_CA}/{key}"));
            args.push(format!("--cert={MOUNT_ETCD_CLIENT_TLS}/tls.crt"));
            args.push(format!("--key={MOUNT_ETCD_CLIENT_TLS}/tls.key"));
            args.push("--insecure-transport=false".into());
            args.push("--insecure-skip-tls-verify=false".into());
            args.push(format!("--endpoints=https://{name}-local:{client}"));
            args.push(format!("--service-endpoints=https://{}:{client}", names.client_service()));
        }
        None => {
            args.push("--insecure-transport=true".into());
            args.push("--insecure-skip-tls-verify=true".into());
            args.push(format!("--endpoints=http://{name}-local:{client}"));
            args.push(format!("--service-endpoints=http://{}:{client}", names.client_service()));
        }
    }
    if backup.tls.is_some() {
        args.push(format!("--server-cert={MOUNT_BACKUP_RESTORE_SERVER_TLS}/tls.crt"));
        args.push(format!("--server-key={MOUNT_BACKUP_RESTORE_SERVER_TLS}/tls.key"));
    }
    args.push(format!("--data-dir={MOUNT_ETCD_DATA}/new.etcd"));
    args.push(format!("--restoration-temp-snapshots-dir={MOUNT_ETCD_DATA}/restoration.temp"));
    args.push(format!("--snapstore-temp-directory={MOUNT_ETCD_DATA}/temp"));
    args.push("--etcd-connection-timeout=5m".into());
    args.push("--use-etcd-wrapper=true".into());
    args.push("--enable-member-lease-renewal=true".into());
    let heartbeat = spec.etcd.heartbeat_duration.as_deref().map(go_duration).unwrap_or_else(|| "10s".into());
    args.push(format!("--k8s-heartbeat-duration={heartbeat}"));
    let quota = spec.etcd.quota.as_ref().and_then(etcdconf::quantity_value).unwrap_or(DEFAULT_QUOTA);
    args.push(format!("--embedded-etcd-quota-bytes={quota}"));
    args
}

/// builder.go `getPodVolumes` with the client, peer and backup TLS volumes and the backup store volume.
fn pod_volumes(etcd: &Etcd, inputs: &StatefulSetInputs) -> Vec<Value> {
    let mut volumes = vec![json!({"name": CONFIG_VOLUME, "configMap": {
        "name": etcd.managed_names().config_map(),
        "items": [{"key": ETCD_CONF_KEY, "path": ETCD_CONF_KEY}],
        "defaultMode": MODE_0640}})];
    let client_secret =
        |t: &druid_api::etcd::TlsConfig| t.client_tls_secret_ref.as_ref().map(|r| r.name.clone()).unwrap_or_default();
    if let Some(tls) = &etcd.spec.etcd.client_url_tls {
        volumes.push(secret_volume(VOLUME_ETCD_CA, &tls.tls_ca_secret_ref.name));
        volumes.push(secret_volume(VOLUME_ETCD_SERVER_TLS, &tls.server_tls_secret_ref.name));
        volumes.push(secret_volume(VOLUME_ETCD_CLIENT_TLS, &client_secret(tls)));
    }
    if let Some(tls) = &etcd.spec.etcd.peer_url_tls {
        volumes.push(secret_volume(VOLUME_ETCD_PEER_CA, &tls.tls_ca_secret_ref.name));
        volumes.push(secret_volume(VOLUME_ETCD_PEER_SERVER_TLS, &tls.server_tls_secret_ref.name));
    }
    if let Some(tls) = &etcd.spec.backup.tls {
        volumes.push(secret_volume(VOLUME_BACKUP_RESTORE_CA, &tls.tls_ca_secret_ref.name));
        volumes.push(secret_volume(VOLUME_BACKUP_RESTORE_SERVER_TLS, &tls.server_tls_secret_ref.name));
        volumes.push(secret_volume(VOLUME_BACKUP_RESTORE_CLIENT_TLS, &client_secret(tls)));
    }
    // getBackupVolume.
    if let Some(store) = &etcd.spec.backup.store {
        match store.provider.as_deref().and_then(storage_provider) {
            Some("Local") => {
                let host = inputs.local_store_host_path.as_deref().unwrap_or(LOCAL_PROVIDER_DEFAULT_MOUNT_PATH);
                let container = store.container.as_deref().unwrap_or_default();
                volumes.push(json!({"name": VOLUME_LOCAL_BACKUP,
                    "hostPath": {"path": format!("{host}/{container}"), "type": "DirectoryOrCreate"}}));
            }
            Some(_) => {
                let secret = store.secret_ref.as_ref().map(|s| s.name.clone()).unwrap_or_default();
                volumes.push(secret_volume(VOLUME_PROVIDER_BACKUP_SECRET, &secret));
            }
            None => {}
        }
    }
    volumes
}

/// Name of the ConfigMap mounted as volume `etcd-config-file` in a StatefulSet (JSON).
pub fn config_map_of_statefulset(sts: &Value) -> Option<String> {
    sts.pointer("/spec/template/spec/volumes")?
        .as_array()?
        .iter()
        .find(|v| v["name"] == CONFIG_VOLUME)?
        .pointer("/configMap/name")?
        .as_str()
        .map(str::to_string)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn etcd(replicas: i32) -> Etcd {
        serde_json::from_value(json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "etcd-main", "namespace": "shoot--p--a", "uid": "u1", "generation": 1},
            "spec": {"replicas": replicas, "labels": {"role": "main"}, "etcd": {}, "backup": {"store": {"prefix": "p", "provider": "Local", "container": "c"}}},
        }))
        .unwrap()
    }

    #[test]
    fn config_map_carries_initial_cluster_of_all_members() {
        let e = etcd(3);
        let cm = config_map(&e);
        assert_eq!(cm["metadata"]["name"], "etcd-main-config");
        let conf = etcdconf::EtcdConf::parse(cm["data"]["etcd.conf.yaml"].as_str().unwrap()).unwrap();
        let ic = conf.initial_cluster_pairs();
        assert_eq!(ic.len(), 3);
        assert_eq!(ic[2], ("etcd-main-2".into(), "http://etcd-main-2.etcd-main-peer.shoot--p--a.svc:2380".into()));
        assert_eq!(conf.initial_cluster_state, "new");
    }

    #[test]
    fn config_map_renders_the_quota_of_the_spec_or_druids_8gi() {
        let quota = |e: &Etcd| {
            etcdconf::EtcdConf::parse(config_map(e)["data"]["etcd.conf.yaml"].as_str().unwrap())
                .unwrap()
                .quota_backend_bytes
        };
        let mut e = etcd(3);
        assert_eq!(quota(&e), 8589934592);
        e.spec.etcd.quota = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("16Mi".into()));
        assert_eq!(quota(&e), 16777216);
    }

    #[test]
    fn statefulset_mounts_the_config_map_as_etcd_config_file() {
        let sts = stateful_set(&etcd(3), &StatefulSetInputs { replicas: 3, ..Default::default() });
        assert_eq!(config_map_of_statefulset(&sts).as_deref(), Some("etcd-main-config"));
        assert_eq!(sts["metadata"]["labels"][LABEL_MANAGED_BY], "etcd-druid");
        assert_eq!(sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"], "etcd-main");
    }

    #[test]
    fn leases_include_snapshot_leases_only_with_backups() {
        let mut e = etcd(3);
        assert_eq!(leases(&e, 5).len(), 5);
        e.spec.backup.store = None;
        assert_eq!(leases(&e, 5).len(), 3);
    }

    #[test]
    fn go_durations_print_as_go_prints_them() {
        let s = |secs: u64| go_duration_string(std::time::Duration::from_secs(secs));
        assert_eq!([s(2), s(60), s(300), s(43200), s(3725)], ["2s", "1m0s", "5m0s", "12h0m0s", "1h2m5s"]);
        assert_eq!(go_duration_string(std::time::Duration::from_millis(500)), "500ms");
        assert_eq!(go_duration("5m"), "5m0s");
    }

    #[test]
    fn the_checksum_changes_with_the_config() {
        let a = config_map_checksum(&config_map(&etcd(3)));
        assert_eq!(a.len(), 64);
        assert_eq!(a, config_map_checksum(&config_map(&etcd(3))));
        assert_ne!(a, config_map_checksum(&config_map(&etcd(1))));
    }

    #[test]
    fn docs_list_every_playground_difference() {
        let docs = include_str!("../../../docs/playground.md");
        for (what, why) in PLAYGROUND_DIFFERENCES {
            assert!(docs.contains(&format!("- **{what}**: {why}\n")), "docs/playground.md lacks: {what}");
        }
    }

    /// Golden tests: the objects rendered for an Etcd shaped like Gardener's etcd-main (TLS on, Local store, 3
    /// replicas; `golden/etcd.yaml`) against expectations written field by field from etcd-druid v0.37.1's builders
    /// (`golden/<kind>.yaml`, each naming its builder file).
    mod golden {
        use super::*;

        fn docs(yaml: &str) -> Vec<Value> {
            serde_saphyr::from_multiple::<Value>(yaml)
                .expect("golden YAML parses")
                .into_iter()
                .filter(|d| !d.is_null())
                .collect()
        }

        fn golden_etcd() -> Etcd {
            serde_json::from_value(docs(include_str!("../golden/etcd.yaml")).remove(0)).expect("golden Etcd")
        }

        /// The paths where `want` and `got` differ.
        fn diff(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
            match (want, got) {
                (Value::Object(w), Value::Object(g)) => {
                    for k in w.keys().chain(g.keys().filter(|k| !w.contains_key(*k))) {
                        diff(
                            &format!("{path}/{k}"),
                            w.get(k).unwrap_or(&Value::Null),
                            g.get(k).unwrap_or(&Value::Null),
                            out,
                        );
                    }
                }
                (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
                    for (i, (a, b)) in w.iter().zip(g).enumerate() {
                        diff(&format!("{path}/{i}"), a, b, out);
                    }
                }
                _ if want != got => out.push(format!("{path}: want {want}, got {got}")),
                _ => {}
            }
        }

        fn assert_renders(builder: &str, want: &Value, got: &Value) {
            let mut out = Vec::new();
            diff("", want, got, &mut out);
            assert!(out.is_empty(), "rendered differently from {builder}:\n{}", out.join("\n"));
        }

        #[test]
        fn configmap_as_configmap_go_and_etcdconfig_go_render_it() {
            let builder = "internal/component/configmap/configmap.go + etcdconfig.go";
            let mut want = docs(include_str!("../golden/configmap.yaml")).remove(0);
            let mut got = config_map(&golden_etcd());
            let text = got["data"][ETCD_CONF_KEY].as_str().unwrap().to_string();
            // The file as YAML, key by key, and its keys in sigs.k8s.io/yaml's (sorted) order.
            let conf = |v: &mut Value| -> Value {
                let t = v["data"][ETCD_CONF_KEY].take();
                serde_saphyr::from_str(t.as_str().unwrap()).unwrap()
            };
            assert_renders(builder, &conf(&mut want), &conf(&mut got));
            assert_renders(builder, &want, &got);
            let keys: Vec<&str> =
                text.lines().filter(|l| !l.starts_with([' ', '-'])).filter_map(|l| l.split(':').next()).collect();
            let mut sorted = keys.clone();
            sorted.sort();
            assert_eq!(keys, sorted, "{builder}: keys sorted as sigs.k8s.io/yaml writes them");
        }

        #[test]
        fn statefulset_as_statefulset_builder_go_builds_it() {
            let builder = "internal/component/statefulset/builder.go";
            let etcd = golden_etcd();
            let sum = config_map_checksum(&config_map(&etcd));
            let want = include_str!("../golden/statefulset.yaml").replace("CHECKSUM", &sum);
            let want = docs(&want).remove(0);
            let got = stateful_set(
                &etcd,
                &StatefulSetInputs { replicas: 3, config_map_checksum: Some(sum), local_store_host_path: None },
            );
            assert_renders(builder, &want, &got);
        }

        #[test]
        fn services_as_clientservice_go_and_peerservice_go_render_them() {
            let want = docs(include_str!("../golden/services.yaml"));
            let etcd = golden_etcd();
            assert_renders("internal/component/clientservice/clientservice.go", &want[0], &client_service(&etcd));
            assert_renders("internal/component/peerservice/peerservice.go", &want[1], &peer_service(&etcd));
        }

        #[test]
        fn leases_as_memberlease_go_and_snapshotlease_go_render_them() {
            let want = docs(include_str!("../golden/leases.yaml"));
            let got = leases(&golden_etcd(), 5);
            assert_eq!(want.len(), got.len());
            for (w, g) in want.iter().zip(&got) {
                let builder = if w["metadata"]["name"].as_str().unwrap().ends_with("-snap") {
                    "internal/component/snapshotlease/snapshotlease.go"
                } else {
                    "internal/component/memberlease/memberlease.go"
                };
                assert_renders(builder, w, g);
            }
        }

        #[test]
        fn poddisruptionbudget_as_poddisruptionbudget_go_renders_it() {
            let want = docs(include_str!("../golden/poddisruptionbudget.yaml")).remove(0);
            assert_renders(
                "internal/component/poddistruptionbudget/poddisruptionbudget.go",
                &want,
                &pod_disruption_budget(&golden_etcd()),
            );
        }

        #[test]
        fn serviceaccount_role_and_rolebinding_as_their_components_render_them() {
            let want = docs(include_str!("../golden/rbac.yaml"));
            let etcd = golden_etcd();
            assert_renders("internal/component/serviceaccount/serviceaccount.go", &want[0], &service_account(&etcd));
            assert_renders("internal/component/role/role.go", &want[1], &role(&etcd));
            assert_renders("internal/component/rolebinding/rolebinding.go", &want[2], &role_binding(&etcd));
        }

        #[test]
        fn other_providers_mount_their_secret_and_name_their_credentials_variable() {
            // internal/store/store.go GetProviderEnvVars, builder.go getEtcdBackupVolumeMount / getBackupVolume.
            let mut etcd = golden_etcd();
            for (provider, var, path) in [
                ("aws", "AWS_APPLICATION_CREDENTIALS", "/var/etcd-backup"),
                ("gcp", "GOOGLE_APPLICATION_CREDENTIALS", "/var/.gcp/serviceaccount.json"),
                ("azure", "AZURE_APPLICATION_CREDENTIALS", "/var/etcd-backup"),
                ("openstack", "OPENSTACK_APPLICATION_CREDENTIALS", "/var/etcd-backup"),
                ("alicloud", "ALICLOUD_APPLICATION_CREDENTIALS", "/var/etcd-backup"),
            ] {
                let store = etcd.spec.backup.store.as_mut().unwrap();
                store.provider = Some(provider.into());
                store.secret_ref =
                    Some(druid_api::etcd::SecretReference { name: "etcd-backup".into(), ..Default::default() });
                let sts = stateful_set(&etcd, &StatefulSetInputs { replicas: 3, ..Default::default() });
                let br = &sts["spec"]["template"]["spec"]["containers"][1];
                assert_eq!(br["env"][3], json!({"name": var, "value": path}), "{provider}");
                let mount = br["volumeMounts"].as_array().unwrap().last().unwrap().clone();
                assert_eq!(mount["name"], "etcd-backup-secret", "{provider}");
                assert!(sts["spec"]["template"]["spec"].get("initContainers").is_none(), "{provider}");
                let vol = sts["spec"]["template"]["spec"]["volumes"].as_array().unwrap().last().unwrap().clone();
                assert_eq!(vol["secret"]["secretName"], "etcd-backup", "{provider}");
            }
        }

        #[test]
        fn the_checksum_is_sha256_of_the_data_as_go_marshals_it() {
            // sha256 of `{"etcd.conf.yaml":"a: b\n"}` (computed outside: printf '%s' ... | sha256sum).
            let cm = json!({"data": {"etcd.conf.yaml": "a: b\n"}});
            assert_eq!(config_map_checksum(&cm), "3b9d99759941fbe244bcd401e85a3487f9fd53dc58133d2a678c5bf36c9bb7df");
        }
    }
}
