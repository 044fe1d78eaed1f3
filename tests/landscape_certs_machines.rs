//! The playground's Etcds get TLS Certificates (issued by the cert-manager actor) and their member pods run
//! on the Nodes of a MachineSet (MCM actor). Real etcd: skips without the binary unless
//! `DRUIDCTL_REQUIRE_ETCD=1`, which fails instead.

use crate::cli_support;

use std::time::{Duration, Instant};

use cli_support::{bin, run_with};
use druidctl::api::{Certificate, Etcd, Machine};
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::Api;
use kube::api::ListParams;
use landscape::etcd::process::etcd_children_of_this_process;
use landscape::etcd::require_etcd;
use landscape::{Playground, PlaygroundOptions};
use serde_json::Value;

/// Waits until every Certificate the Etcd references is Ready with a revision.
async fn wait_certs_ready(pg: &Playground, ns: &str, names: &[String]) -> Vec<Certificate> {
    let api: Api<Certificate> = Api::namespaced(pg.client(), ns);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let certs = api.list(&ListParams::default()).await.unwrap().items;
        let ready: Vec<Certificate> = certs
            .into_iter()
            .filter(|c| names.contains(&c.spec.secret_name))
            .filter(|c| c.condition("Ready").is_some_and(|r| r.status == "True"))
            .filter(|c| c.status.as_ref().and_then(|s| s.revision).unwrap_or(0) >= 1)
            .collect();
        if ready.len() == names.len() {
            return ready;
        }
        assert!(Instant::now() < deadline, "certificates not issued: {} of {} ready", ready.len(), names.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn playground_etcd_has_issued_certificates_and_members_on_machine_nodes() {
    let Some(_) = require_etcd("playground certificates and machines") else { return };
    let dir = tempfile::tempdir().unwrap();
    let pg = Playground::up(PlaygroundOptions::new(dir.path())).await.expect("playground up");
    pg.wait_ready(Duration::from_secs(40)).await.expect("3-member Etcd ready");
    let ns = pg.namespaces()[0].clone();
    let client = pg.client();

    // Certificates behind every TLS secret the Etcd references: Ready, revision >= 1, a key pair in the secret.
    let etcd = Api::<Etcd>::namespaced(client.clone(), &ns).get(pg.etcd_name()).await.unwrap();
    let secrets = etcd.tls_secret_names();
    assert!(secrets.len() >= 3, "the playground Etcd references client and peer TLS secrets: {secrets:?}");
    let certs = wait_certs_ready(&pg, &ns, &secrets).await;
    let secret_api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    for c in &certs {
        let s = secret_api.get(&c.spec.secret_name).await.unwrap();
        let data = s.data.unwrap_or_default();
        let crt = String::from_utf8(data.get("tls.crt").expect("tls.crt").0.clone()).unwrap();
        let key = String::from_utf8(data.get("tls.key").expect("tls.key").0.clone()).unwrap();
        assert!(crt.contains("BEGIN CERTIFICATE"), "secret {} holds a certificate", c.spec.secret_name);
        assert!(key.contains("PRIVATE KEY"), "secret {} holds a private key", c.spec.secret_name);
    }

    // Every member pod runs on a Node backed by a Machine; one member per node.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let nodes: Vec<Node> = Api::<Node>::all(client.clone()).list(&ListParams::default()).await.unwrap().items;
    let machines: Vec<Machine> =
        Api::<Machine>::namespaced(client.clone(), &ns).list(&ListParams::default()).await.unwrap().items;
    assert_eq!(machines.len(), 3, "one machine per member");
    let mut hosts = Vec::new();
    for i in 0..3 {
        let p = pods.get(&format!("{}-{i}", pg.etcd_name())).await.unwrap();
        let node = p.spec.and_then(|s| s.node_name).expect("member pod is scheduled");
        assert!(nodes.iter().any(|n| n.metadata.name.as_deref() == Some(node.as_str())), "node {node} exists");
        assert!(machines.iter().any(|m| m.node_name() == Some(node.as_str())), "node {node} has a machine");
        hosts.push(node);
    }
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts.len(), 3, "members are spread over three nodes: {hosts:?}");

    // The real binary lists them by Etcd.
    let home = tempfile::tempdir().unwrap();
    let kc = pg.kubeconfig_path().to_str().unwrap().to_string();
    let out = run_with(
        bin(),
        &["cert", "status", "--etcd", pg.etcd_name(), "-o", "json"],
        &[("KUBECONFIG", &kc)],
        home.path(),
    )
    .await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut listed: Vec<String> =
        doc["items"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap().to_string()).collect();
    listed.sort();
    let mut expected: Vec<String> = certs.iter().map(|c| c.metadata.name.clone().unwrap()).collect();
    expected.sort();
    assert_eq!(listed, expected);
    for item in doc["items"].as_array().unwrap() {
        assert!(item["revision"].as_i64().unwrap_or(0) >= 1, "{item}");
    }

    pg.down().await.expect("playground down");
    assert!(etcd_children_of_this_process().is_empty(), "down leaves no etcd behind");
}
