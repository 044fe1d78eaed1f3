//! Tests that druidctl's types read objects that are valid under the real upstream CRDs (`crates/druid-api/crds`).
//!
//! Each sample object is first checked against the CRD's structural schema (types, required fields, enums,
//! unknown fields) by a small validator here, so a sample that the real API server would refuse fails the test.

use serde_json::{Value, json};

use super::certificate::Certificate;
use super::etcd::Etcd;
use super::machine::{Machine, MachineSet};

fn crd_schema(yaml: &str, version: &str) -> Value {
    let crd: Value = serde_saphyr::from_str(yaml).expect("CRD parses");
    let versions = crd["spec"]["versions"].as_array().expect("versions");
    let v = versions.iter().find(|v| v["name"] == version).expect("version served");
    v["schema"]["openAPIV3Schema"].clone()
}

/// Returns the violations of `value` against a structural schema.
fn violations(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    if value.is_null() {
        if schema["nullable"] != json!(true) {
            out.push(format!("{path}: null not allowed"));
        }
        return;
    }
    if schema["x-kubernetes-int-or-string"] == json!(true) {
        if !(value.is_i64() || value.is_u64() || value.is_string()) {
            out.push(format!("{path}: want int or string"));
        }
        return;
    }
    if let Some(values) = schema["enum"].as_array()
        && !values.contains(value)
    {
        out.push(format!("{path}: {value} not in enum"));
    }
    match schema["type"].as_str() {
        Some("object") => {
            let Some(obj) = value.as_object() else { return out.push(format!("{path}: want object")) };
            for r in schema["required"].as_array().into_iter().flatten() {
                if !obj.contains_key(r.as_str().unwrap_or_default()) {
                    out.push(format!("{path}: missing required {r}"));
                }
            }
            let props = schema["properties"].as_object();
            for (k, v) in obj {
                let p = format!("{path}.{k}");
                if let Some(s) = props.and_then(|p| p.get(k)) {
                    violations(s, v, &p, out);
                } else if let Some(s) = schema.get("additionalProperties").filter(|s| s.is_object()) {
                    violations(s, v, &p, out);
                } else if schema["x-kubernetes-preserve-unknown-fields"] != json!(true) && path.len() > 1 {
                    // Top level `apiVersion/kind/metadata` are implicit in CRD schemas.
                    out.push(format!("{p}: unknown field (would be pruned)"));
                }
            }
        }
        Some("array") => {
            let Some(items) = value.as_array() else { return out.push(format!("{path}: want array")) };
            for (i, item) in items.iter().enumerate() {
                violations(&schema["items"], item, &format!("{path}[{i}]"), out);
            }
        }
        Some("string") if !value.is_string() => out.push(format!("{path}: want string")),
        Some("integer") if !(value.is_i64() || value.is_u64()) => out.push(format!("{path}: want integer")),
        Some("boolean") if !value.is_boolean() => out.push(format!("{path}: want boolean")),
        Some("number") if !value.is_number() => out.push(format!("{path}: want number")),
        _ => {}
    }
}

fn assert_valid(crd_yaml: &str, version: &str, object: &Value) {
    let schema = crd_schema(crd_yaml, version);
    let mut out = Vec::new();
    // Validate spec and status against the schema; metadata is the API server's business.
    for part in ["spec", "status"] {
        if let Some(v) = object.get(part) {
            violations(&schema["properties"][part], v, part, &mut out);
        }
    }
    assert!(out.is_empty(), "sample object is not valid under the real CRD: {out:#?}");
}

const ETCD_CRD: &str = include_str!("../crds/druid.gardener.cloud_etcds.yaml");
const CERT_CRD: &str = include_str!("../crds/cert-manager.io_certificates.yaml");
const MACHINE_CRD: &str = include_str!("../crds/machine.sapcloud.io_machines.yaml");
const MACHINESET_CRD: &str = include_str!("../crds/machine.sapcloud.io_machinesets.yaml");

fn sample_etcd() -> Value {
    json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
        "metadata": {"name": "etcd-main", "namespace": "shoot--dev--app", "generation": 5,
                     "annotations": {"druid.gardener.cloud/suspend-etcd-spec-reconcile": "true"}},
        "spec": {
            "replicas": 3,
            "labels": {"app": "etcd-statefulset", "role": "main"},
            "selector": {"matchLabels": {"app": "etcd-statefulset", "role": "main"}},
            "volumeClaimTemplate": "main-etcd",
            "storageCapacity": "25Gi",
            "etcd": {
                "clientPort": 2379, "serverPort": 2380, "quota": "8Gi", "metrics": "basic",
                "clientUrlTls": {"tlsCASecretRef": {"name": "ca-etcd", "dataKey": "bundle.crt"},
                                 "serverTLSSecretRef": {"name": "etcd-server"},
                                 "clientTLSSecretRef": {"name": "etcd-client"}},
                "peerUrlTls": {"tlsCASecretRef": {"name": "ca-etcd-peer"}, "serverTLSSecretRef": {"name": "etcd-peer-server"}}
            },
            "backup": {
                "port": 8080, "fullSnapshotSchedule": "0 */24 * * *", "deltaSnapshotPeriod": "5m",
                "garbageCollectionPolicy": "Exponential",
                "store": {"provider": "S3", "container": "bucket", "prefix": "shoot--dev--app/etcd-main",
                          "secretRef": {"name": "etcd-backup"}},
                "compression": {"enabled": true, "policy": "gzip"}
            },
            "sharedConfig": {"autoCompactionMode": "periodic", "autoCompactionRetention": "30m"}
        },
        "status": {
            "observedGeneration": 5, "replicas": 3, "readyReplicas": 2, "currentReplicas": 3, "ready": false,
            "selector": "app=etcd-statefulset,role=main",
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Quorate", "message": "The majority of ETCD members is ready",
                 "lastTransitionTime": "2026-01-01T10:00:00Z", "lastUpdateTime": "2026-01-01T11:59:00Z"},
                {"type": "BackupReady", "status": "False", "reason": "FullBackupFailed", "message": "Stale snapshot leases",
                 "lastTransitionTime": "2026-01-01T10:00:00Z", "lastUpdateTime": "2026-01-01T11:59:00Z"}
            ],
            "members": [
                {"name": "etcd-main-0", "id": "8e9e05c52164694d", "role": "Leader", "status": "Ready",
                 "reason": "LeaseSucceeded", "lastTransitionTime": "2026-01-01T10:00:00Z"},
                {"name": "etcd-main-2", "status": "NotReady", "reason": "LeaseExpired",
                 "lastTransitionTime": "2026-01-01T11:00:00Z"}
            ],
            "lastOperation": {"type": "Reconcile", "state": "Succeeded", "description": "Reconciliation succeeded",
                              "runID": "5b2a", "lastUpdateTime": "2026-01-01T11:00:00Z"},
            "lastErrors": [{"code": "ERR_SYNC", "description": "sts not ready", "observedAt": "2026-01-01T11:00:00Z"}]
        }
    })
}

#[test]
fn etcd_sample_is_valid_and_reads_into_the_subset() {
    let obj = sample_etcd();
    assert_valid(ETCD_CRD, "v1alpha1", &obj);
    let etcd: Etcd = serde_json::from_value(obj).expect("Etcd subset reads a valid Etcd");
    assert_eq!(etcd.spec.replicas, 3);
    assert_eq!(etcd.managed_names().pvc(1), "main-etcd-etcd-main-1");
    assert!(etcd.backups_enabled());
    assert_eq!(etcd.spec.backup.delta_snapshot_period.as_deref(), Some("5m"));
    assert_eq!(etcd.tls_secret_names(), ["ca-etcd", "ca-etcd-peer", "etcd-client", "etcd-peer-server", "etcd-server"]);
    let st = etcd.status.as_ref().unwrap();
    assert_eq!(st.members[1].reason, "LeaseExpired");
    assert_eq!(st.members[1].role, None);
    assert_eq!(etcd.condition("BackupReady").unwrap().reason, "FullBackupFailed");
    assert_eq!(st.last_operation.as_ref().unwrap().run_id, "5b2a");
}

#[test]
fn minimal_etcd_without_status_reads() {
    let obj = json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
        "metadata": {"name": "e", "namespace": "n"},
        "spec": {"replicas": 1, "labels": {"a": "b"}, "etcd": {}, "backup": {}}});
    assert_valid(ETCD_CRD, "v1alpha1", &obj);
    let etcd: Etcd = serde_json::from_value(obj).unwrap();
    assert!(!etcd.backups_enabled());
    assert!(etcd.status.is_none());
}

#[test]
fn the_validator_rejects_what_the_crd_rejects() {
    let mut obj = sample_etcd();
    obj["spec"]["backup"]["garbageCollectionPolicy"] = json!("Sometimes");
    obj["status"]["members"][0].as_object_mut().unwrap().remove("reason");
    let mut out = Vec::new();
    let schema = crd_schema(ETCD_CRD, "v1alpha1");
    violations(&schema["properties"]["spec"], &obj["spec"], "spec", &mut out);
    violations(&schema["properties"]["status"], &obj["status"], "status", &mut out);
    assert_eq!(out.len(), 2, "{out:?}");
}

#[test]
fn certificate_sample_is_valid_and_reads() {
    let obj = json!({
        "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
        "metadata": {"name": "etcd-server", "namespace": "shoot--dev--app"},
        "spec": {"secretName": "etcd-server", "issuerRef": {"name": "ca-etcd", "kind": "Issuer", "group": "cert-manager.io"},
                 "commonName": "etcd-server", "dnsNames": ["etcd-main-client", "*.etcd-main-peer"], "duration": "2160h",
                 "renewBefore": "360h", "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
                 "usages": ["server auth", "client auth"]},
        "status": {"conditions": [
                      {"type": "Ready", "status": "True", "reason": "Ready", "message": "up to date", "observedGeneration": 1,
                       "lastTransitionTime": "2026-01-01T00:00:00Z"},
                      {"type": "Issuing", "status": "False", "reason": "Failed", "message": "issuer not ready",
                       "lastTransitionTime": "2026-01-01T11:00:00Z"}],
                   "notBefore": "2026-01-01T00:00:00Z", "notAfter": "2026-04-01T00:00:00Z", "renewalTime": "2026-03-17T00:00:00Z",
                   "revision": 4, "lastFailureTime": "2026-01-01T11:00:00Z", "failedIssuanceAttempts": 2}
    });
    assert_valid(CERT_CRD, "v1", &obj);
    let c: Certificate = serde_json::from_value(obj).unwrap();
    assert_eq!(c.spec.secret_name, "etcd-server");
    let st = c.status.as_ref().unwrap();
    assert_eq!((st.revision, st.failed_issuance_attempts), (Some(4), Some(2)));
    assert_eq!(c.condition("Issuing").unwrap().reason.as_deref(), Some("Failed"));
}

#[test]
fn machine_and_machineset_samples_are_valid_and_read() {
    let machine = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": "shoot-worker-z1-abc12", "namespace": "shoot--dev--app",
                     "labels": {"node": "ip-10-0-1-5", "force-deletion": "True"},
                     "annotations": {"machinepriority.machine.sapcloud.io": "1"}},
        "spec": {"class": {"kind": "MachineClass", "name": "worker-z1"}, "providerID": "aws:///eu-west-1a/i-0abc",
                 "nodeTemplate": {"metadata": {"labels": {"worker": "z1"}}}},
        "status": {"currentStatus": {"phase": "Terminating", "lastUpdateTime": "2026-01-01T11:00:00Z", "timeoutActive": false},
                   "lastOperation": {"description": "Drain failed due to PDB violation", "state": "Failed", "type": "Delete",
                                     "errorCode": "", "lastUpdateTime": "2026-01-01T11:00:00Z"},
                   "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                                   "lastTransitionTime": "2026-01-01T11:00:00Z"}],
                   "addresses": [{"type": "InternalIP", "address": "10.0.1.5"}]}
    });
    assert_valid(MACHINE_CRD, "v1alpha1", &machine);
    let m: Machine = serde_json::from_value(machine).unwrap();
    assert_eq!(m.node_name(), Some("ip-10-0-1-5"));
    assert_eq!(m.phase(), Some("Terminating"));
    assert_eq!(m.status.as_ref().unwrap().last_operation.as_ref().unwrap().type_, "Delete");

    let set = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": "shoot-worker-z1", "namespace": "shoot--dev--app"},
        "spec": {"replicas": 3, "minReadySeconds": 0, "machineClass": {"kind": "MachineClass", "name": "worker-z1"},
                 "selector": {"matchLabels": {"name": "shoot-worker-z1"}},
                 "template": {"metadata": {"labels": {"name": "shoot-worker-z1"}},
                              "spec": {"class": {"kind": "MachineClass", "name": "worker-z1"}}}},
        "status": {"replicas": 3, "readyReplicas": 2, "availableReplicas": 2, "fullyLabeledReplicas": 3, "observedGeneration": 1}
    });
    assert_valid(MACHINESET_CRD, "v1alpha1", &set);
    let s: MachineSet = serde_json::from_value(set).unwrap();
    assert_eq!(s.spec.replicas, Some(3));
    assert_eq!(s.status.unwrap().ready_replicas, Some(2));
}

#[test]
fn generated_task_crd_accepts_a_dep05_task_under_its_own_schema() {
    let crd = serde_json::to_string(&super::task::crd()).unwrap();
    for owner_field in ["ownerEtcdRefrence", "ownerEtcdReference"] {
        let task = json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "EtcdOperatorTask",
            "metadata": {"name": "snap", "namespace": "n"},
            "spec": {"type": "OnDemandSnapshotTask", "config": "type: full\n", "ttlSecondsAfterFinished": 600,
                     owner_field: {"name": "etcd-main", "namespace": "n"}},
            "status": {"observedGeneration": 1, "state": "InProgress", "initiatedAt": "2026-01-01T00:00:00Z",
                       "lastErrors": [{"code": "ERR_SNAPSHOT", "description": "sidecar unreachable", "observedAt": "2026-01-01T00:00:01Z"}],
                       "lastOperation": {"name": "TriggerSnapshot", "state": "InProgress",
                                         "lastTransitionTime": "2026-01-01T00:00:01Z", "reason": "waiting for lease"}}
        });
        assert_valid(&crd, "v1alpha1", &task);
        let t: super::EtcdOperatorTask = serde_json::from_value(task).unwrap();
        assert_eq!(t.state(), super::TaskState::InProgress);
    }
}
