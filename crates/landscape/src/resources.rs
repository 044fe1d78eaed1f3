//! The resources etcd-druid manages for one Etcd, as JSON objects with druid's names and labels.
//!
//! Pure functions over the Etcd object: no API calls, unit-tested.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use druid_api::Etcd;
use druid_api::names::{
    CONFIG_VOLUME, LABEL_INSTANCE_LEGACY, LABEL_MANAGED_BY, LABEL_NAME_LEGACY, LABEL_PART_OF, MANAGED_BY_DRUID,
};

/// Backup sidecar port (druid default).
pub const BACKUP_PORT: u16 = 8080;
/// Pod annotation with the loopback client URL of the member's real etcd process.
pub use druid_api::names::CLIENT_URL_ANNOTATION as ANNOTATION_CLIENT_URL;
/// Pod annotation with the loopback address of the member's backup-restore HTTP API.
pub const ANNOTATION_BACKUP_API: &str = "playground.druidctl.gardener.cloud/backup-api";

/// Labels druid puts on every managed resource of `etcd` (its `spec.labels` plus the well-known ones).
pub fn managed_labels(etcd: &Etcd) -> BTreeMap<String, String> {
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let mut labels = etcd.spec.labels.clone();
    labels.insert(LABEL_PART_OF.into(), name.clone());
    labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY_DRUID.into());
    labels.insert(LABEL_INSTANCE_LEGACY.into(), name);
    labels.insert(LABEL_NAME_LEGACY.into(), "etcd".into());
    labels
}

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

fn meta(etcd: &Etcd, name: &str) -> Value {
    json!({
        "name": name,
        "namespace": etcd.metadata.namespace,
        "labels": managed_labels(etcd),
        "ownerReferences": [owner_ref(etcd)],
    })
}

fn ports(etcd: &Etcd) -> (i32, i32, i32) {
    (
        etcd.spec.etcd.client_port.unwrap_or(2379),
        etcd.spec.etcd.server_port.unwrap_or(2380),
        etcd.spec.backup.port.unwrap_or(BACKUP_PORT as i32),
    )
}

/// The peer URL druid writes into `initial-cluster` for member `pod`.
pub fn peer_url(etcd: &Etcd, pod: &str) -> String {
    let name = etcd.metadata.name.as_deref().unwrap_or_default();
    let ns = etcd.metadata.namespace.as_deref().unwrap_or_default();
    let (_, peer, _) = ports(etcd);
    format!("http://{pod}.{name}-peer.{ns}.svc:{peer}")
}

/// `initial-cluster` for `members` members: `<member>=<peer url of its pod>,...`, where the member is the pod
/// name, or `<memberNamePrefix>-<pod>` with `spec.memberNamePrefix` (etcd-druid `prepareInitialCluster`,
/// `internal/component/configmap/etcdconfig.go`, with `GetMemberName` of `api/core/v1alpha1/helper.go`).
pub fn initial_cluster(etcd: &Etcd, members: i32) -> String {
    let names = etcd.managed_names();
    (0..members.max(1) as u32)
        .map(|i| format!("{}={}", names.member(i), peer_url(etcd, &names.pod(i))))
        .collect::<Vec<_>>()
        .join(",")
}

/// `etcd.conf.yaml` as druid renders it (the member name is substituted from the pod name at start).
pub fn etcd_conf_yaml(etcd: &Etcd, members: i32) -> String {
    let name = etcd.metadata.name.as_deref().unwrap_or_default();
    let ns = etcd.metadata.namespace.as_deref().unwrap_or_default();
    let (client, peer, _) = ports(etcd);
    format!(
        "# Human-readable name for this member.\n\
         name: etcd-config\n\
         data-dir: /var/etcd/data/new.etcd\n\
         metrics: basic\n\
         snapshot-count: 75000\n\
         enable-v2: false\n\
         quota-backend-bytes: {quota}\n\
         listen-client-urls: http://0.0.0.0:{client}\n\
         advertise-client-urls: http://${{POD_NAME}}.{name}-peer.{ns}.svc:{client}\n\
         listen-peer-urls: http://0.0.0.0:{peer}\n\
         initial-advertise-peer-urls: http://${{POD_NAME}}.{name}-peer.{ns}.svc:{peer}\n\
         initial-cluster-token: etcd-cluster\n\
         initial-cluster-state: new\n\
         initial-cluster: {}\n\
         auto-compaction-mode: periodic\n\
         auto-compaction-retention: 30m\n{}",
        initial_cluster(etcd, members),
        // etcdconfig.go: `member-name-prefix` only when the Etcd sets it.
        etcd.spec.member_name_prefix.as_deref().map(|p| format!("member-name-prefix: {p}\n")).unwrap_or_default(),
        // etcdconfig.go `getDBQuotaBytes`: `spec.etcd.quota`, else 8Gi.
        quota = etcd.spec.etcd.quota_bytes(),
    )
}

/// Top-level `key: value` pairs of an `etcd.conf.yaml` (comments and nesting ignored).
pub fn parse_etcd_conf(yaml: &str) -> BTreeMap<String, String> {
    yaml.lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches(|c| c == '"' || c == '\'').to_string()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// Parses `initial-cluster` into `(name, peer url)` pairs.
pub fn parse_initial_cluster(s: &str) -> Vec<(String, String)> {
    s.split(',')
        .filter_map(|e| e.trim().split_once('='))
        .map(|(n, u)| (n.trim().to_string(), u.trim().to_string()))
        .filter(|(n, _)| !n.is_empty())
        .collect()
}

/// ConfigMap `E-config`.
pub fn config_map(etcd: &Etcd, members: i32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": meta(etcd, &etcd.managed_names().config_map()),
        "data": {"etcd.conf.yaml": etcd_conf_yaml(etcd, members)},
    })
}

/// Services `E-client` and `E-peer`.
pub fn services(etcd: &Etcd) -> Vec<Value> {
    let names = etcd.managed_names();
    let (client, peer, backup) = ports(etcd);
    let selector = json!({LABEL_PART_OF: etcd.metadata.name, LABEL_MANAGED_BY: MANAGED_BY_DRUID});
    vec![
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": meta(etcd, &names.client_service()),
            "spec": {"type": "ClusterIP", "selector": selector, "ports": [
                {"name": "client", "port": client, "protocol": "TCP", "targetPort": client},
                {"name": "server", "port": peer, "protocol": "TCP", "targetPort": peer},
                {"name": "backuprestore", "port": backup, "protocol": "TCP", "targetPort": backup},
            ]},
        }),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": meta(etcd, &names.peer_service()),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": true, "selector": selector, "ports": [
                {"name": "peer", "port": peer, "protocol": "TCP", "targetPort": peer},
            ]},
        }),
    ]
}

/// Member lease `E-<i>` (empty holder, as druid creates it) and the snapshot leases.
pub fn leases(etcd: &Etcd, members: i32, lease_seconds: i32) -> Vec<Value> {
    let names = etcd.managed_names();
    let mut out: Vec<Value> = (0..members.max(0) as u32)
        .map(|i| {
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": meta(etcd, &names.member_lease(i)),
                "spec": {"leaseDurationSeconds": lease_seconds}})
        })
        .collect();
    if etcd.backups_enabled() {
        for n in [names.full_snapshot_lease(), names.delta_snapshot_lease()] {
            out.push(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta(etcd, &n), "spec": {}}));
        }
    }
    out
}

/// PodDisruptionBudget `E`: at most one member unavailable in a multi-member cluster.
pub fn pod_disruption_budget(etcd: &Etcd) -> Value {
    let min = if etcd.spec.replicas > 1 { etcd.spec.replicas / 2 + 1 } else { 0 };
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": meta(etcd, &etcd.managed_names().statefulset()),
        "spec": {"minAvailable": min, "selector": {"matchLabels": {LABEL_PART_OF: etcd.metadata.name, LABEL_MANAGED_BY: MANAGED_BY_DRUID}}},
    })
}

/// ServiceAccount `E`.
pub fn service_account(etcd: &Etcd) -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(etcd, &etcd.managed_names().statefulset())})
}

/// StatefulSet `E` with `replicas`, the config volume `etcd-config-file` and a claim template.
pub fn stateful_set(etcd: &Etcd, replicas: i32) -> Value {
    let names = etcd.managed_names();
    let (client, peer, backup) = ports(etcd);
    let claim = etcd.spec.volume_claim_template.clone().unwrap_or_else(|| names.statefulset());
    let pod_labels = managed_labels(etcd);
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": meta(etcd, &names.statefulset()),
        "spec": {
            "replicas": replicas,
            "serviceName": names.peer_service(),
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": {LABEL_PART_OF: etcd.metadata.name, LABEL_MANAGED_BY: MANAGED_BY_DRUID}},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "serviceAccountName": names.statefulset(),
                    "containers": [
                        {"name": "etcd", "image": "europe-docker.pkg.dev/gardener-project/public/gardener/etcd-wrapper:v0.2.0",
                         "ports": [{"name": "client", "containerPort": client}, {"name": "server", "containerPort": peer}],
                         "volumeMounts": [{"name": claim, "mountPath": "/var/etcd/data/"},
                                          {"name": CONFIG_VOLUME, "mountPath": "/var/etcd/config/"}]},
                        {"name": "backup-restore", "image": "europe-docker.pkg.dev/gardener-project/public/gardener/etcdbrctl:v0.30.0",
                         "ports": [{"name": "server", "containerPort": backup}],
                         "volumeMounts": [{"name": claim, "mountPath": "/var/etcd/data/"},
                                          {"name": CONFIG_VOLUME, "mountPath": "/var/etcd/config/"}]},
                    ],
                    "volumes": [{"name": CONFIG_VOLUME, "configMap": {"name": names.config_map(),
                        "items": [{"key": "etcd.conf.yaml", "path": "etcd.conf.yaml"}], "defaultMode": 0o640}}],
                },
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": claim},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    })
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
        let cm = config_map(&e, 3);
        assert_eq!(cm["metadata"]["name"], "etcd-main-config");
        let conf = parse_etcd_conf(cm["data"]["etcd.conf.yaml"].as_str().unwrap());
        let ic = parse_initial_cluster(&conf["initial-cluster"]);
        assert_eq!(ic.len(), 3);
        assert_eq!(ic[2], ("etcd-main-2".into(), "http://etcd-main-2.etcd-main-peer.shoot--p--a.svc:2380".into()));
        assert_eq!(conf["initial-cluster-state"], "new");
    }

    #[test]
    fn config_map_renders_the_quota_of_the_spec_or_druids_8gi() {
        let quota = |e: &Etcd| {
            parse_etcd_conf(config_map(e, 3)["data"]["etcd.conf.yaml"].as_str().unwrap())["quota-backend-bytes"].clone()
        };
        let mut e = etcd(3);
        assert_eq!(quota(&e), "8589934592");
        e.spec.etcd.quota = Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity("16Mi".into()));
        assert_eq!(quota(&e), "16777216");
    }

    #[test]
    fn statefulset_mounts_the_config_map_as_etcd_config_file() {
        let sts = stateful_set(&etcd(3), 3);
        assert_eq!(config_map_of_statefulset(&sts).as_deref(), Some("etcd-main-config"));
        assert_eq!(sts["metadata"]["labels"][LABEL_MANAGED_BY], "etcd-druid");
        assert_eq!(sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"], "etcd-main");
    }

    #[test]
    fn leases_include_snapshot_leases_only_with_backups() {
        let mut e = etcd(3);
        assert_eq!(leases(&e, 3, 5).len(), 5);
        e.spec.backup.store = None;
        assert_eq!(leases(&e, 3, 5).len(), 3);
    }
}
