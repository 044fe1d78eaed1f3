//! Maintenance reaches etcd itself: the real binary runs an `OnDemandMaintenanceTask` with `--local` against
//! the embedded API server over HTTP, and the member pods carry no address, so druidctl goes through the API
//! server's `pods/portforward` (WebSocket) to the pods' client port, behind which a real etcd serves client TLS
//! with a CA and key pairs the Etcd's `clientUrlTls` secrets hold. Needs the `etcd` binary (skips without it
//! unless `DRUIDCTL_REQUIRE_ETCD=1`).

use crate::cli_support;
use crate::tasks_support::{ETCD, NS, Reach, Served, landscape, real_member_etcd};

use druidctl::api::EtcdOperatorTask;
use kube::Api;
use kube::api::ListParams;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_and_defragmentation_go_through_a_port_forward_with_the_etcds_client_tls() {
    let Served { server, endpoint: _endpoint, dir, sidecar: _sidecar } = Served::start().await;
    let Some((member, _member_dir)) =
        real_member_etcd(&server, "maintenance through pods/portforward", Reach::PortForward).await
    else {
        return;
    };
    let kubeconfig = dir.path().join("config");
    server.request_log().clear();

    let out = cli_support::run_with(
        cli_support::bin(),
        &["maintenance", ETCD, "--compaction", "--defragmentation", "--local", "--timeout", "2m", "--ttl", "3600"],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap()), ("KUBERNETES_SERVICE_HOST", "")],
        dir.path(),
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stdout: {}\nstderr: {stderr}", String::from_utf8_lossy(&out.stdout));

    // The task's journal: the compacted revision and each member's database size before and after.
    let tasks: Vec<EtcdOperatorTask> =
        Api::namespaced(server.client(), NS).list(&ListParams::default()).await.unwrap().items;
    let task = tasks.iter().find(|t| t.spec.type_ == "OnDemandMaintenanceTask").expect("the maintenance task");
    let journal: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
        task.metadata.annotations.as_ref().unwrap().get(druidctl::tasks::step::JOURNAL_ANNOTATION).unwrap(),
    )
    .unwrap();
    let revision = journal.get("compactedAt").and_then(|r| r.as_i64()).unwrap_or_else(|| panic!("{journal:?}"));
    assert!(revision > 0, "{journal:?}");
    for i in 0..3 {
        let entry = &journal[&format!("defragmented/{ETCD}-{i}")];
        assert!(entry["dbSizeBefore"].as_i64().unwrap() > 0, "{entry}");
    }
    // etcd itself says it was compacted at that revision: reading below it is refused.
    let client = member.client();
    assert!(revision <= client.status().await.unwrap().revision);

    // Through pods/portforward (upgraded: 101), never through a sidecar proxy.
    let records = server.request_log().records();
    let forwards: Vec<_> = records.iter().filter(|r| r.resource == "pods/portforward").collect();
    assert!(forwards.len() >= 4, "one port-forward for the compaction and one per member: {forwards:#?}");
    assert!(forwards.iter().all(|r| r.code == 101), "{forwards:#?}");
    assert!(forwards.iter().all(|r| r.path.contains("ports=2379")), "{forwards:#?}");
    assert!(!records.iter().any(|r| r.resource == "pods/proxy"), "no sidecar call");

    // The certificate check of cert-renewal reaches a member the same way: the serial served through the
    // port-forward is the one in the Etcd's server secret.
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let over_tcp = kube::Client::try_from(config).unwrap();
    let etcd: druidctl::api::Etcd = Api::namespaced(over_tcp.clone(), NS).get(ETCD).await.unwrap();
    let pod: k8s_openapi::api::core::v1::Pod =
        Api::namespaced(over_tcp.clone(), NS).get(&format!("{ETCD}-1")).await.unwrap();
    let (url, via, _bridge) = druidctl::tasks::etcd_access::member_url(&over_tcp, &etcd, &pod).await.unwrap();
    assert!(via.contains("port-forward"), "{via}");
    let served = druidctl::certs::served::served_serial(&url, std::time::Duration::from_secs(10)).await.unwrap();
    let (_, issued) = druidctl::certs::served::issued_server_serial(&over_tcp, &etcd).await.unwrap().unwrap();
    assert_eq!(served, issued);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_forward_without_a_websocket_upgrade_or_to_a_missing_pod_is_refused_like_kube_apiserver() {
    let server = landscape().await;
    let endpoint = server.serve_http("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let get = |path: String| {
        let req = http::Request::get(format!("{}{path}", endpoint.url))
            .header("authorization", format!("Bearer {}", server.token_for("admin").unwrap_or_default()))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        client.request(req)
    };
    let plain = get(format!("/api/v1/namespaces/{NS}/pods/{ETCD}-0/portforward?ports=2379")).await.unwrap();
    assert_eq!(plain.status(), 400, "a plain GET is not an upgrade");
    let missing = get(format!("/api/v1/namespaces/{NS}/pods/nope/portforward?ports=2379")).await.unwrap();
    assert_eq!(missing.status(), 404);
}
