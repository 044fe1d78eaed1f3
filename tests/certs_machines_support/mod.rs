//! Shared by `certs_renew`, `machines_delete` and `runbook_certs_machines`: the embedded API server (real CRDs)
//! in namespace `shoot--a` with an Etcd `etcd-main`, the cert-manager and MCM actors, member pods, a kubeconfig
//! for user admin and the writes that user made. Needs `mod cli_support;` next to `mod certs_machines_support;`.
#![allow(dead_code)]

use std::process::Output;
use std::time::Duration;

use druidctl::api::{Certificate, Machine};
use druidctl::machines::delete::node_ready;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sim::{ApiServer, HttpEndpoint};
use landscape::certmanager::{CertManager, CertManagerOptions};
use landscape::mcm::{Mcm, McmOptions, McmVersion, machine_set};
use serde_json::{Value, json};

use crate::cli_support::{bin, etcd_resource, run_with};

pub const NS: &str = "shoot--a";

/// Exit codes of druidctl (docs/exit-codes.md).
pub const FAILED: i32 = 1;
pub const USAGE: i32 = 2;
pub const REJECTED: i32 = 3;
pub const NOT_FOUND: i32 = 6;

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

/// An API server with the upstream CRDs and the namespace [`NS`].
pub async fn server_with_namespace() -> ApiServer {
    let server = ApiServer::new();
    landscape::register_upstream_crds(&server).expect("CRDs");
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(server.client()).create(&PostParams::default(), &ns).await.unwrap();
    server
}

/// The server on loopback HTTP and a kubeconfig for user admin (context namespace [`NS`]) in a temp dir.
pub struct Cli {
    _endpoint: HttpEndpoint,
    pub dir: tempfile::TempDir,
    pub kubeconfig: std::path::PathBuf,
}

impl Cli {
    pub async fn serve(server: &ApiServer) -> Cli {
        let endpoint = server.serve_http("127.0.0.1:0".parse().unwrap()).await.expect("serve");
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("config");
        std::fs::write(&kubeconfig, server.kubeconfig_yaml(&endpoint.url, "admin", Some(NS))).unwrap();
        Cli { _endpoint: endpoint, dir, kubeconfig }
    }

    /// Runs druidctl with this kubeconfig.
    pub async fn run(&self, args: &[&str]) -> Output {
        run_with(bin(), args, &[("KUBECONFIG", self.kubeconfig.to_str().unwrap())], self.dir.path()).await
    }
}

/// Writes druidctl (user admin) made, leaving out the actors' own.
pub fn admin_writes(server: &ApiServer) -> Vec<String> {
    server
        .request_log()
        .records()
        .into_iter()
        .filter(|r| r.user == "admin" && matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete"))
        .map(|r| format!("{} {}", r.verb, r.path.split('?').next().unwrap_or_default()))
        .collect()
}

/// The Etcd `etcd-main` in [`NS`]: three replicas with the given `spec.etcd`.
pub async fn create_etcd(client: &kube::Client, etcd_spec: Value) {
    let etcd = json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
        "metadata": {"name": "etcd-main", "namespace": NS},
        "spec": {"replicas": 3, "labels": {"app": "etcd-statefulset"}, "etcd": etcd_spec, "backup": {}}});
    Api::<DynamicObject>::namespaced_with(client.clone(), NS, &etcd_resource())
        .create(&PostParams::default(), &serde_json::from_value(etcd).unwrap())
        .await
        .expect("etcd");
}

/// `spec.etcd` with client TLS (`etcd-server-tls`, `etcd-client-tls`) and peer TLS (`etcd-peer-tls`).
pub fn etcd_tls_spec() -> Value {
    let tls = |server_secret: &str, client_secret: Option<&str>| {
        let mut v = json!({"tlsCASecretRef": {"name": "ca-etcd"}, "serverTLSSecretRef": {"name": server_secret}});
        if let Some(c) = client_secret {
            v["clientTLSSecretRef"] = json!({"name": c});
        }
        v
    };
    json!({"clientUrlTls": tls("etcd-server-tls", Some("etcd-client-tls")), "peerUrlTls": tls("etcd-peer-tls", None)})
}

/// A cert-manager Certificate `name` in [`NS`] writing to the secret `secret`.
pub async fn create_certificate(client: &kube::Client, name: &str, secret: &str) {
    let c: Certificate = serde_json::from_value(json!({
        "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"secretName": secret, "issuerRef": {"name": "etcd-ca", "kind": "Issuer"},
                 "commonName": name, "dnsNames": [format!("{name}.{NS}.svc")], "duration": "720h"}
    }))
    .unwrap();
    Api::<Certificate>::namespaced(client.clone(), NS).create(&PostParams::default(), &c).await.expect("certificate");
}

/// The cert-manager actor (user cert-manager) on [`NS`].
pub fn start_cert_manager(server: &ApiServer) -> CertManager {
    server.add_user("cert-manager", &["system:masters"]);
    CertManager::start(
        server.client_for("cert-manager"),
        CertManagerOptions { namespace: Some(NS.into()), tick: Duration::from_millis(100), ..Default::default() },
    )
}

pub fn machine_set_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("machine.sapcloud.io", "v1alpha1", "MachineSet"),
        "machinesets",
    )
}

/// The MachineSet `worker` of three machines in [`NS`] and the MCM actor (user mcm, the newest MCM) running it.
pub async fn start_machine_set(server: &ApiServer) -> Mcm {
    start_machine_set_of(server, McmVersion::NEWEST).await
}

/// [`start_machine_set`] with MCM release `version`.
pub async fn start_machine_set_of(server: &ApiServer, version: McmVersion) -> Mcm {
    start_split_machine_set(server, server, version).await
}

/// The MachineSet `worker` of three machines in [`NS`] of `machines` (MCM's control cluster) and the MCM actor
/// (user mcm) making their Nodes in `nodes` (its target cluster).
pub async fn start_split_machine_set(machines: &ApiServer, nodes: &ApiServer, version: McmVersion) -> Mcm {
    Api::<DynamicObject>::namespaced_with(machines.client(), NS, &machine_set_resource())
        .create(&PostParams::default(), &serde_json::from_value(machine_set(NS, "worker", 3)).unwrap())
        .await
        .expect("machineset");
    machines.add_user("mcm", &["system:masters"]);
    nodes.add_user("mcm", &["system:masters"]);
    Mcm::start_split(
        landscape::mcm::McmClients { control: machines.client_for("mcm"), target: nodes.client_for("mcm") },
        McmOptions {
            namespace: Some(NS.into()),
            tick: Duration::from_millis(100),
            node_ready_after: Duration::from_millis(300),
            version,
        },
    )
}

/// Waits until three machines have nodes and three nodes are Ready; false if they never do.
pub async fn wait_machines_up(client: &kube::Client) -> bool {
    wait_machines_up_in(client, client).await
}

/// [`wait_machines_up`] with the Machines in `machines_client`'s cluster and the Nodes in `nodes_client`'s.
pub async fn wait_machines_up_in(machines_client: &kube::Client, nodes_client: &kube::Client) -> bool {
    let machines: Api<Machine> = Api::namespaced(machines_client.clone(), NS);
    let nodes: Api<Node> = Api::all(nodes_client.clone());
    for _ in 0..300 {
        let ms = machines.list(&ListParams::default()).await.unwrap().items;
        let ns = nodes.list(&ListParams::default()).await.unwrap().items;
        if ms.len() == 3 && ms.iter().all(|m| m.node_name().is_some()) && ns.len() == 3 && ns.iter().all(node_ready) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// (machine, node) of every machine, sorted.
pub async fn hosts(client: &kube::Client) -> Vec<(String, String)> {
    let mut hosts: Vec<(String, String)> = Api::<Machine>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|m| (m.metadata.name.clone().unwrap(), m.node_name().unwrap().to_string()))
        .collect();
    hosts.sort();
    hosts
}

/// The member pod `etcd-main-<i>` of etcd-main on `node`.
pub fn member_pod(i: usize, node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("etcd-main-{i}"), "namespace": NS,
                     "labels": {"app.kubernetes.io/part-of": "etcd-main", "app.kubernetes.io/managed-by": "etcd-druid"}},
        "spec": {"nodeName": node, "containers": [{"name": "etcd", "image": "etcd"}]}
    }))
    .unwrap()
}

/// Sets the member pod `etcd-main-<i>` Running, Ready or not.
pub async fn set_member_ready(client: &kube::Client, i: usize, ready: bool) {
    let status = json!({"status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
    Api::<Pod>::namespaced(client.clone(), NS)
        .patch_status(&format!("etcd-main-{i}"), &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("pod status");
}
