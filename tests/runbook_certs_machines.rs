//! `runbook cert-renewal` and `runbook machine-replacement` end to end: the real binary against the embedded API
//! server (real CRDs) with the cert-manager and MCM actors, a three-member Etcd whose member pods run on the
//! MachineSet's nodes, and a small in-test kubelet that recreates a deleted member pod, ready, on a Ready node.

mod cli_support;

use std::time::Duration;

use cli_support::{bin, run_with};
use druidctl::api::{Certificate, Machine};
use druidctl::sim::apiserver::{ApiServer, HttpEndpoint};
use druidctl::sim::landscape::certmanager::{CertManager, CertManagerOptions};
use druidctl::sim::landscape::mcm::{Mcm, McmOptions, machine_set};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NS: &str = "shoot--a";
const NOT_FOUND: i32 = 6;
const CERTS: [&str; 3] = ["etcd-server", "etcd-client", "etcd-peer"];

struct Fx {
    server: ApiServer,
    _endpoint: HttpEndpoint,
    dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
    _mcm: Mcm,
    _cm: CertManager,
    kubelet: CancellationToken,
    /// (machine, node) hosting etcd-main-0, -1, -2.
    hosts: Vec<(String, String)>,
}

impl Drop for Fx {
    fn drop(&mut self) {
        self.kubelet.cancel();
    }
}

fn node_ready(n: &Node) -> bool {
    druidctl::machines::delete::node_ready(n)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

async fn create_member(client: &kube::Client, i: usize, node: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": format!("etcd-main-{i}"), "namespace": NS,
                     "labels": {"app.kubernetes.io/part-of": "etcd-main", "app.kubernetes.io/managed-by": "etcd-druid"}},
        "spec": {"nodeName": node, "containers": [{"name": "etcd", "image": "etcd"}]}
    }))
    .unwrap();
    if pods.create(&PostParams::default(), &pod).await.is_err() {
        return;
    }
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    let _ = pods.patch_status(&format!("etcd-main-{i}"), &PatchParams::default(), &Patch::Merge(status)).await;
}

/// Recreates missing member pods (what the StatefulSet controller and kubelet do) on their node, or on another
/// Ready node whose Machine is not being deleted when theirs is going; removes pods whose node is gone (pod GC).
fn start_kubelet(client: kube::Client, stop: CancellationToken) {
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let nodes: Api<Node> = Api::all(client.clone());
        let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
            let (Ok(all_nodes), Ok(ms)) =
                (nodes.list(&ListParams::default()).await, machines.list(&ListParams::default()).await)
            else {
                continue;
            };
            let existing: Vec<String> = all_nodes.items.iter().filter_map(|n| n.metadata.name.clone()).collect();
            let usable: Vec<String> = all_nodes
                .items
                .iter()
                .filter(|n| node_ready(n))
                .filter_map(|n| n.metadata.name.clone())
                .filter(|n| {
                    ms.items
                        .iter()
                        .any(|m| m.node_name() == Some(n.as_str()) && m.metadata.deletion_timestamp.is_none())
                })
                .collect();
            let mut placed: Vec<Option<String>> = Vec::new();
            for i in 0..3 {
                let name = format!("etcd-main-{i}");
                match pods.get_opt(&name).await {
                    Ok(Some(p)) => {
                        let node = p.spec.and_then(|s| s.node_name);
                        if node.as_ref().is_some_and(|n| !existing.contains(n)) {
                            let _ = pods.delete(&name, &kube::api::DeleteParams::default().grace_period(0)).await;
                        }
                        placed.push(node);
                    }
                    _ => placed.push(None),
                }
            }
            for i in 0..3 {
                if placed[i].is_some() {
                    continue;
                }
                let node = usable
                    .iter()
                    .find(|n| !placed.iter().any(|p| p.as_deref() == Some(n.as_str())))
                    .or(usable.first())
                    .cloned();
                if let Some(node) = node {
                    create_member(&client, i, &node).await;
                    placed[i] = Some(node);
                }
            }
        }
    });
}

impl Fx {
    async fn start() -> Fx {
        let server = ApiServer::new();
        server.register_upstream_crds().expect("CRDs");
        server.register_crd_yaml(&serde_json::to_string(&druidctl::api::task::crd()).unwrap()).expect("task CRD");
        let client = server.client();
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
        let ms_ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("machine.sapcloud.io", "v1alpha1", "MachineSet"),
            "machinesets",
        );
        Api::<DynamicObject>::namespaced_with(client.clone(), NS, &ms_ar)
            .create(&PostParams::default(), &serde_json::from_value(machine_set(NS, "worker", 3)).unwrap())
            .await
            .expect("machineset");
        server.add_user("mcm", &["system:masters"]);
        let mcm = Mcm::start(
            server.client_for("mcm"),
            McmOptions {
                namespace: Some(NS.into()),
                tick: Duration::from_millis(100),
                node_ready_after: Duration::from_millis(300),
            },
        );
        let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
        let nodes: Api<Node> = Api::all(client.clone());
        let mut up = false;
        for _ in 0..300 {
            let ms = machines.list(&ListParams::default()).await.unwrap().items;
            let ns = nodes.list(&ListParams::default()).await.unwrap().items;
            if ms.len() == 3 && ms.iter().all(|m| m.node_name().is_some()) && ns.len() == 3 && ns.iter().all(node_ready)
            {
                up = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(up, "machines never came up");
        let mut hosts: Vec<(String, String)> = machines
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|m| (m.metadata.name.clone().unwrap(), m.node_name().unwrap().to_string()))
            .collect();
        hosts.sort();

        let tls = |server_secret: &str, client_secret: Option<&str>| {
            let mut v = json!({"tlsCASecretRef": {"name": "ca-etcd"}, "serverTLSSecretRef": {"name": server_secret}});
            if let Some(c) = client_secret {
                v["clientTLSSecretRef"] = json!({"name": c});
            }
            v
        };
        let etcd_ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"),
            "etcds",
        );
        let etcd = json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "etcd-main", "namespace": NS},
            "spec": {"replicas": 3, "labels": {"app": "etcd-statefulset"},
                     "etcd": {"clientUrlTls": tls("etcd-server-tls", Some("etcd-client-tls")), "peerUrlTls": tls("etcd-peer-tls", None)},
                     "backup": {}}});
        Api::<DynamicObject>::namespaced_with(client.clone(), NS, &etcd_ar)
            .create(&PostParams::default(), &serde_json::from_value(etcd).unwrap())
            .await
            .expect("etcd");
        // What etcd-druid reports: every member Ready, etcd-main-1 the leader.
        let now = jiff::Timestamp::now().to_string();
        let members: Vec<serde_json::Value> = (0..3)
            .map(|i| {
                json!({"name": format!("etcd-main-{i}"), "role": if i == 1 { "Leader" } else { "Member" },
                            "status": "Ready", "reason": "LeaseSucceeded", "lastTransitionTime": now})
            })
            .collect();
        Api::<DynamicObject>::namespaced_with(client.clone(), NS, &etcd_ar)
            .patch_status("etcd-main", &PatchParams::default(), &Patch::Merge(json!({"status": {"members": members}})))
            .await
            .expect("etcd status");
        let certs: Api<Certificate> = Api::namespaced(client.clone(), NS);
        for name in CERTS {
            let c: Certificate = serde_json::from_value(json!({
                "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"secretName": format!("{name}-tls"), "issuerRef": {"name": "etcd-ca", "kind": "Issuer"},
                         "commonName": name, "dnsNames": [format!("{name}.{NS}.svc")], "duration": "720h"}
            }))
            .unwrap();
            certs.create(&PostParams::default(), &c).await.expect("certificate");
        }
        server.add_user("cert-manager", &["system:masters"]);
        let cm = CertManager::start(
            server.client_for("cert-manager"),
            CertManagerOptions { namespace: Some(NS.into()), tick: Duration::from_millis(100) },
        );
        for (i, (_, node)) in hosts.iter().enumerate() {
            create_member(&client, i, node).await;
        }
        server.add_user("kubelet", &["system:masters"]);
        let kubelet = CancellationToken::new();
        start_kubelet(server.client_for("kubelet"), kubelet.clone());
        let endpoint = server.serve_http("127.0.0.1:0".parse().unwrap()).await.expect("serve");
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("config");
        std::fs::write(&kubeconfig, server.kubeconfig_yaml(&endpoint.url, "admin", Some(NS))).unwrap();
        let fx = Fx { server, _endpoint: endpoint, dir, kubeconfig, _mcm: mcm, _cm: cm, kubelet, hosts };
        for name in CERTS {
            fx.wait_revision(name, 1).await;
        }
        fx.server.request_log().clear();
        fx
    }

    async fn run(&self, args: &[&str]) -> std::process::Output {
        run_with(bin(), args, &[("KUBECONFIG", self.kubeconfig.to_str().unwrap())], self.dir.path()).await
    }

    async fn revision(&self, name: &str) -> Option<i64> {
        let c = Api::<Certificate>::namespaced(self.server.client(), NS).get(name).await.unwrap();
        c.status.as_ref().and_then(|s| s.revision)
    }

    async fn wait_revision(&self, name: &str, rev: i64) {
        for _ in 0..200 {
            if self.revision(name).await == Some(rev) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("certificate {name} never reached revision {rev}");
    }

    async fn pod_uids(&self) -> Vec<Option<String>> {
        let pods: Api<Pod> = Api::namespaced(self.server.client(), NS);
        let mut out = Vec::new();
        for i in 0..3 {
            out.push(pods.get_opt(&format!("etcd-main-{i}")).await.unwrap().and_then(|p| p.metadata.uid));
        }
        out
    }

    /// Writes druidctl (user admin) made.
    fn admin_writes(&self) -> Vec<String> {
        self.server
            .request_log()
            .records()
            .into_iter()
            .filter(|r| r.user == "admin" && matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete"))
            .map(|r| format!("{} {}", r.verb, r.path.split('?').next().unwrap_or_default()))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runbook_list_shows_the_certificate_and_machine_runbooks() {
    let fx = Fx::start().await;
    let out = fx.run(&["runbook", "list"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("cert-renewal") && stdout.contains("CertificateRenewalTask"), "{stdout}");
    assert!(stdout.contains("machine-replacement") && stdout.contains("MachineForceDeletionTask"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_renewal_plan_prints_renewal_then_restarts_and_changes_nothing() {
    let fx = Fx::start().await;
    let uids = fx.pod_uids().await;
    let out = fx.run(&["runbook", "cert-renewal", "etcd-main", "--plan"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains(&format!("Runbook cert-renewal for etcd {NS}/etcd-main")), "{stdout}");
    let renew = stdout.find("RenewCertificates").expect("renewal step");
    let restarts: Vec<usize> =
        (0..3).map(|i| stdout.find(&format!("RestartMember/etcd-main-{i}")).expect("restart step")).collect();
    assert!(restarts.iter().all(|r| *r > renew), "renewal comes before any restart: {stdout}");
    assert!(stdout.contains("$ kubectl delete pod etcd-main-0"), "{stdout}");
    assert!(!stdout.contains("DESTRUCTIVE"), "{stdout}");
    assert_eq!(fx.admin_writes(), Vec::<String>::new(), "a plan changes nothing");
    for name in CERTS {
        assert_eq!(fx.revision(name).await, Some(1));
    }
    assert_eq!(fx.pod_uids().await, uids, "no member restarted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_renewal_with_yes_issues_new_revisions_and_restarts_every_member() {
    let fx = Fx::start().await;
    let uids = fx.pod_uids().await;
    let out = fx.run(&["runbook", "cert-renewal", "etcd-main", "--yes"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for name in CERTS {
        assert!(fx.revision(name).await >= Some(2), "certificate {name} has a new revision: {stdout}");
    }
    let after = fx.pod_uids().await;
    for i in 0..3 {
        assert!(after[i].is_some() && after[i] != uids[i], "etcd-main-{i} restarted: {stdout}");
    }
    let order: Vec<usize> = ["RestartMember/etcd-main-0", "RestartMember/etcd-main-2", "RestartMember/etcd-main-1"]
        .iter()
        .map(|s| stdout.find(&format!("✓ {s}")).unwrap_or_else(|| panic!("{s} completed: {stdout}")))
        .collect();
    assert!(order[0] < order[1] && order[1] < order[2], "followers first, the leader last: {stdout}");
    let tasks = Api::<DynamicObject>::namespaced_with(
        fx.server.client(),
        NS,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "EtcdOperatorTask"),
            "etcdoperatortasks",
        ),
    )
    .list(&ListParams::default())
    .await
    .unwrap()
    .items;
    assert_eq!(tasks.len(), 1, "one task journals the run");
    assert_eq!(tasks[0].data["spec"]["type"], "CertificateRenewalTask");
    assert_eq!(tasks[0].data["status"]["state"], "Succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_replacement_plan_shows_the_blast_radius_and_the_steps_and_changes_nothing() {
    let fx = Fx::start().await;
    let (machine, node) = fx.hosts[0].clone();
    let out = fx.run(&["runbook", "machine-replacement", &machine, "--force", "--plan"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains(&format!("machine {NS}/{machine} backs node {node}")), "{stdout}");
    assert!(stdout.contains(&format!("Runbook machine-replacement for etcd {NS}/etcd-main")), "{stdout}");
    assert!(stdout.contains("DESTRUCTIVE RequestMachineDeletion"), "{stdout}");
    assert!(stdout.contains(&format!("$ kubectl label machine {machine} force-deletion=True")), "{stdout}");
    assert!(stdout.contains("WaitForReplacementNode") && stdout.contains("WaitForMembersReady"), "{stdout}");

    let out = fx.run(&["runbook", "machine-replacement", "--node", &node, "--plan"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("RequestMachineDeletion"), "{stdout}");
    assert_eq!(fx.admin_writes(), Vec::<String>::new(), "a plan changes nothing");
    assert!(Api::<Machine>::namespaced(fx.server.client(), NS).get_opt(&machine).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_replacement_of_an_unknown_machine_is_not_found_in_one_line() {
    let fx = Fx::start().await;
    let out = fx.run(&["runbook", "machine-replacement", "no-such-machine", "--yes"]).await;
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(NOT_FOUND), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("no-such-machine"), "{err}");
    assert_eq!(fx.admin_writes(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_replacement_with_yes_replaces_the_machine_and_waits_for_the_members() {
    let fx = Fx::start().await;
    let (machine, node) = fx.hosts[0].clone();
    let out = fx.run(&["runbook", "machine-replacement", &machine, "--force", "--yes"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for step in ["RequestMachineDeletion", "WaitForReplacementNode", "WaitForMembersReady"] {
        assert!(stdout.contains(&format!("✓ {step}")), "{step}: {stdout}");
    }
    assert!(
        Api::<Machine>::namespaced(fx.server.client(), NS).get_opt(&machine).await.unwrap().is_none(),
        "the machine is gone"
    );
    let nodes = Api::<Node>::all(fx.server.client()).list(&ListParams::default()).await.unwrap().items;
    assert!(!nodes.iter().any(|n| n.metadata.name.as_deref() == Some(node.as_str())), "the old node is gone");
    let member = Api::<Pod>::namespaced(fx.server.client(), NS).get("etcd-main-0").await.unwrap();
    assert_ne!(member.spec.unwrap().node_name.as_deref(), Some(node.as_str()), "the member runs elsewhere");
    let writes = fx.admin_writes();
    assert!(
        writes.contains(&format!("delete /apis/machine.sapcloud.io/v1alpha1/namespaces/{NS}/machines/{machine}")),
        "{writes:?}"
    );
}
