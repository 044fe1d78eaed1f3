//! Golden tests of `status` on real-shaped objects: what Gardener and etcd-druid v0.37.1 leave on a seed for a
//! healthy `etcd-main`, one member down, quorum lost, and a cluster ID mismatch. The objects are in
//! tests/fixtures/seed/*.yaml, built field by field from the upstream builders and health checks; each
//! document names the upstream file it follows:
//!
//! - Etcd spec: gardener/gardener v1.149.3 `pkg/component/etcd/etcd/etcd.go`; Etcd status: etcd-druid v0.37.1
//!   `internal/health/condition/*.go`, `internal/health/etcdmember/check_ready.go`,
//!   `internal/controller/compaction/status_compaction.go`.
//! - StatefulSet and its pods: etcd-druid v0.37.1 `internal/component/statefulset/builder.go`.
//! - PVCs: the StatefulSet's volumeClaimTemplate `main-etcd` (Gardener's `<role>-etcd` for class important).
//! - Member leases: etcd-druid `internal/component/memberlease/memberlease.go`; holder and renewTime from
//!   etcd-backup-restore v0.43.0 `pkg/health/heartbeat/heartbeat.go` (`<memberID>:<clusterID>:<role>`).
//! - Snapshot leases: etcd-druid `internal/component/snapshotlease/snapshotlease.go`; holder = revision,
//!   full renewTime = snapshot time (heartbeat.go `UpdateFullSnapshotLease`).
//! - ConfigMap: etcd-druid `internal/component/configmap/etcdconfig.go`.
//!
//! Each scenario is applied to the embedded API server (create, then the status subresource, as the real
//! controllers write it) and judged by the druidctl binary. The last test applies all four to the real
//! kube-apiserver (`../shared/realk8s`, whose answers carry managedFields, server-computed fields and its own
//! defaults) and checks that druidctl judges each one there exactly as on the embedded server.

use crate::cli_support;
use crate::seed_support;

use cli_support::run_with;
use jiff::Timestamp;
use kube::api::{Api, PostParams};
use seed_support::load;
use serde_json::{Value, json};

use seed_support::FIXTURE_NS as NS;

struct Judged {
    code: i32,
    report: Value,
    text: String,
}

/// Applies scenario `name` to a fresh embedded API server and runs `status` on it (JSON and table).
async fn judge(name: &str) -> Judged {
    let server = kube_sim::ApiServer::new();
    landscape::register_upstream_crds(&server).expect("CRDs");
    let client = server.client();
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    ns_api
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap())
        .await
        .unwrap();
    seed_support::apply(&client, NS, &load(name, Timestamp::now())).await;
    let endpoint = server.serve_http("127.0.0.1:0".parse().unwrap()).await.expect("serve");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml(&endpoint.url, "admin", Some(NS))).unwrap();
    let env = [("KUBECONFIG", kubeconfig.to_str().unwrap())];
    let json_out = run_with(cli_support::bin(), &["status", "etcd-main", "-o", "json"], &env, dir.path()).await;
    let text_out = run_with(cli_support::bin(), &["status", "etcd-main"], &env, dir.path()).await;
    assert_eq!(json_out.status.code(), text_out.status.code(), "{name}: same exit code in both formats");
    let doc: Value = serde_json::from_slice(&json_out.stdout)
        .unwrap_or_else(|e| panic!("{name}: {e}: {}", String::from_utf8_lossy(&json_out.stderr)));
    Judged {
        code: json_out.status.code().unwrap_or(-1),
        report: doc["items"][0].clone(),
        text: String::from_utf8_lossy(&text_out.stdout).into_owned(),
    }
}

fn problems(j: &Judged) -> Vec<String> {
    j.report["problems"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_gardener_etcd_main_is_healthy() {
    let j = judge("healthy").await;
    assert_eq!(j.report["verdict"], "Healthy", "{}", j.text);
    assert_eq!(j.code, 0, "{}", j.text);
    assert!(problems(&j).is_empty(), "{:?}", problems(&j));
    // ClusterIDMismatch=False is the healthy value, shown as such.
    let cim = j.report["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "ClusterIDMismatch").unwrap();
    assert_eq!((cim["status"].as_str(), cim["healthy"].as_bool()), (Some("False"), Some(true)));
    assert_eq!(j.report["conditions"].as_array().unwrap().len(), 7, "the full v0.37.1 condition set");
    let members = j.report["members"].as_array().unwrap();
    assert_eq!(members[0]["role"], "Leader");
    assert_eq!(members[0]["clusterId"], "cdf818194e3a8c32", "three-part holder parsed");
    assert_eq!(members[1]["id"], "91bc3c398fb3c146");
    assert_eq!(members[2]["pvc"]["name"], "main-etcd-etcd-main-2");
    assert_eq!(j.report["backups"]["full"]["revision"], "118744");
    assert!(j.text.contains("etcd-main: Healthy"), "{}", j.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member_down_is_degraded() {
    let j = judge("one-member-down").await;
    assert_eq!(j.report["verdict"], "Degraded", "{}", j.text);
    assert_eq!(j.code, 4);
    assert_eq!(
        problems(&j),
        vec![
            "member etcd-main-2 is not ready (CrashLooping)".to_string(),
            "condition AllMembersReady is False (NotAllMembersReady)".to_string(),
        ]
    );
    assert_eq!(j.report["quorum"]["tolerableFailures"], 0);
    assert!(j.report["summary"].as_str().unwrap().contains("2 of 3 members ready"), "{}", j.report["summary"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_lost_names_the_member_that_survived() {
    let j = judge("quorum-lost").await;
    assert_eq!(j.report["verdict"], "QuorumLost", "{}", j.text);
    assert_eq!(j.code, 4);
    let summary = j.report["summary"].as_str().unwrap();
    assert_eq!(summary, "quorum lost: 0 of 3 members ready, 2 needed; etcd still alive on etcd-main-0");
    assert_eq!(
        problems(&j),
        vec![
            "member etcd-main-0 is not ready (Unhealthy) but its etcd is alive".to_string(),
            "member etcd-main-1 is not ready (NeverStartedUp)".to_string(),
            "member etcd-main-2 is not ready (NeverStartedUp)".to_string(),
            "condition AllMembersReady is False (NotAllMembersReady)".to_string(),
            "condition Ready is False (QuorumLost)".to_string(),
        ]
    );
    let members = j.report["members"].as_array().unwrap();
    let alive: Vec<(&str, bool)> =
        members.iter().map(|m| (m["name"].as_str().unwrap(), m["alive"].as_bool().unwrap())).collect();
    assert_eq!(alive, vec![("etcd-main-0", true), ("etcd-main-1", false), ("etcd-main-2", false)]);
    assert_eq!(members[0]["role"], "Member", "no leader: the survivor's lease says Member");
    assert!(j.text.contains("etcd still alive on etcd-main-0"), "{}", j.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_id_mismatch_is_degraded() {
    let j = judge("cluster-id-mismatch").await;
    assert_eq!(j.report["verdict"], "Degraded", "{}", j.text);
    assert_eq!(j.code, 4);
    assert_eq!(problems(&j), vec!["condition ClusterIDMismatch is True (MultipleClusterIDsDetected)".to_string()]);
    let ids: Vec<&str> =
        j.report["members"].as_array().unwrap().iter().map(|m| m["clusterId"].as_str().unwrap()).collect();
    assert_eq!(ids, vec!["cdf818194e3a8c32", "cdf818194e3a8c32", "4f2a17b9e0c6d581"]);
}

/// The four scenarios on the real kube-apiserver v1.36 (a private `../shared/realk8s` without the controller
/// manager, so that no StatefulSet, PV or garbage-collection controller rewrites the hand-made objects), each in
/// a namespace of its own: `status` gives the same verdict, exit code, problems, members and quorum as on the
/// embedded server. The real server's objects carry managedFields and the fields it computes itself, which
/// `status` decodes past (`src/kube/slim.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_kube_apiserver_gets_the_same_judgement_of_every_scenario() {
    let Some(real) = tokio::task::block_in_place(|| crate::realk8s_support::RealK8s::get("status-golden", false))
    else {
        return;
    };
    let client = real.client().await;
    real.install_seed_prerequisites();

    for (i, scenario) in ["healthy", "one-member-down", "quorum-lost", "cluster-id-mismatch"].into_iter().enumerate() {
        let ns = format!("shoot--golden--s{i}");
        let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        ns_api
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
            .await
            .unwrap();
        seed_support::apply(&client, &ns, &seed_support::load_into(scenario, Timestamp::now(), &ns)).await;
        let dir = tempfile::tempdir().unwrap();
        let env = [("KUBECONFIG", real.kubeconfig.to_str().unwrap())];
        let out =
            run_with(cli_support::bin(), &["status", "-n", &ns, "etcd-main", "-o", "json"], &env, dir.path()).await;
        let doc: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{scenario}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        let on_real =
            Judged { code: out.status.code().unwrap_or(-1), report: doc["items"][0].clone(), text: String::new() };
        let on_embedded = judge(scenario).await;
        assert_eq!(on_real.code, on_embedded.code, "{scenario}: exit code\n{}", on_embedded.text);
        for field in ["verdict", "quorum"] {
            assert_eq!(on_real.report[field], on_embedded.report[field], "{scenario}: {field}");
        }
        assert_eq!(problems(&on_real), problems(&on_embedded), "{scenario}: problems");
        let members = |j: &Judged| -> Vec<Value> {
            j.report["members"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    json!([
                        m["name"],
                        m["role"],
                        m["ready"],
                        m["status"],
                        m["reason"],
                        m["alive"],
                        m["id"],
                        m["clusterId"],
                        m["pvc"],
                        m["node"],
                        m["pod"]
                    ])
                })
                .collect()
        };
        assert_eq!(members(&on_real), members(&on_embedded), "{scenario}: members");
    }
}
