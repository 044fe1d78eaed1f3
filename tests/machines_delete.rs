//! `machine delete` end to end: the real binary against the embedded API server (real CRDs) with the MCM actor
//! running a MachineSet of three machines, each node hosting one member of a three-member Etcd.

mod cli_support;

use std::time::Duration;

use cli_support::{bin, run_with};
use druidctl::api::Machine;
use druidctl::sim::apiserver::{ApiServer, HttpEndpoint};
use druidctl::sim::landscape::mcm::{Mcm, McmOptions, machine_set};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

const NS: &str = "shoot--a";
const USAGE: i32 = 2;
const REJECTED: i32 = 3;
const NOT_FOUND: i32 = 6;

struct Fx {
    server: ApiServer,
    _endpoint: HttpEndpoint,
    dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
    _mcm: Mcm,
    /// (machine, node) hosting etcd-main-0, -1, -2.
    hosts: Vec<(String, String)>,
}

fn ready(n: &Node) -> bool {
    druidctl::machines::delete::node_ready(n)
}

impl Fx {
    async fn start() -> Fx {
        let server = ApiServer::new();
        server.register_upstream_crds().expect("CRDs");
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
            if ms.len() == 3 && ms.iter().all(|m| m.node_name().is_some()) && ns.len() == 3 && ns.iter().all(ready) {
                up = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            up,
            "machines never came up: {:#?} {:#?}",
            machines.list(&ListParams::default()).await.unwrap().items,
            nodes.list(&ListParams::default()).await.unwrap().items
        );
        let mut hosts: Vec<(String, String)> = machines
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|m| (m.metadata.name.clone().unwrap(), m.node_name().unwrap().to_string()))
            .collect();
        hosts.sort();

        let etcd_ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"),
            "etcds",
        );
        let etcd = json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "etcd-main", "namespace": NS},
            "spec": {"replicas": 3, "labels": {"app": "etcd-statefulset"}, "etcd": {}, "backup": {}}});
        Api::<DynamicObject>::namespaced_with(client.clone(), NS, &etcd_ar)
            .create(&PostParams::default(), &serde_json::from_value(etcd).unwrap())
            .await
            .expect("etcd");
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        for (i, (_, node)) in hosts.iter().enumerate() {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("etcd-main-{i}"), "namespace": NS,
                             "labels": {"app.kubernetes.io/part-of": "etcd-main", "app.kubernetes.io/managed-by": "etcd-druid"}},
                "spec": {"nodeName": node, "containers": [{"name": "etcd", "image": "etcd"}]}
            }))
            .unwrap();
            pods.create(&PostParams::default(), &pod).await.expect("pod");
        }
        for i in 0..3 {
            set_member_ready(&client, i, true).await;
        }
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "etcd-main", "namespace": NS},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app.kubernetes.io/part-of": "etcd-main"}}}
        }))
        .unwrap();
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
        pdbs.create(&PostParams::default(), &pdb).await.expect("pdb");
        pdbs.patch_status(
            "etcd-main",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
            "disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3}})),
        )
        .await
        .expect("pdb status");
        let endpoint = server.serve_http("127.0.0.1:0".parse().unwrap()).await.expect("serve");
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("config");
        std::fs::write(&kubeconfig, server.kubeconfig_yaml(&endpoint.url, "admin", Some(NS))).unwrap();
        server.request_log().clear();
        Fx { server, _endpoint: endpoint, dir, kubeconfig, _mcm: mcm, hosts }
    }

    async fn run(&self, args: &[&str]) -> std::process::Output {
        run_with(bin(), args, &[("KUBECONFIG", self.kubeconfig.to_str().unwrap())], self.dir.path()).await
    }

    async fn nodes(&self) -> Vec<Node> {
        Api::<Node>::all(self.server.client()).list(&ListParams::default()).await.unwrap().items
    }

    async fn machine_exists(&self, name: &str) -> bool {
        Api::<Machine>::namespaced(self.server.client(), NS).get_opt(name).await.unwrap().is_some()
    }

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

async fn set_member_ready(client: &kube::Client, i: usize, ready: bool) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let status = json!({"status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
    pods.patch_status(&format!("etcd-main-{i}"), &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("pod status");
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_delete_of_a_node_with_one_member_of_a_healthy_etcd_replaces_it() {
    let fx = Fx::start().await;
    let (machine, node) = fx.hosts[0].clone();
    let out = fx.run(&["machine", "delete", &machine, "--force", "--wait", "--timeout", "20s"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains(&format!("machine {NS}/{machine} backs node {node}")), "{stdout}");
    assert!(
        stdout.contains(
            "etcd shoot--a/etcd-main: etcd-main-0 on this node; 3 of 3 members ready now, 2 after (quorum needs 2)"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("deleted without drain (force-deletion)"), "{stdout}");
    assert!(stdout.contains("replacement node"), "{stdout}");
    let nodes = fx.nodes().await;
    assert!(!nodes.iter().any(|n| n.metadata.name.as_deref() == Some(node.as_str())), "old node is gone");
    assert_eq!(nodes.iter().filter(|n| ready(n)).count(), 3, "the MachineSet is back to three ready nodes");
    assert!(!fx.machine_exists(&machine).await);
    let writes = fx.admin_writes();
    assert_eq!(
        writes,
        [
            format!("patch /apis/machine.sapcloud.io/v1alpha1/namespaces/{NS}/machines/{machine}"),
            format!("delete /apis/machine.sapcloud.io/v1alpha1/namespaces/{NS}/machines/{machine}"),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_deletion_by_mcm_on_the_node_replaces_its_machine_after_a_drain() {
    let fx = Fx::start().await;
    let (machine, node) = fx.hosts[1].clone();
    // In a namespace without Machines (an operator of the shoot cannot read them), the node annotation is used.
    let out = fx.run(&["machine", "delete", "--node", &node, "-n", "garden-view", "--wait", "--timeout", "20s"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("asking machine-controller-manager through the node"), "{stdout}");
    assert!(
        stdout.contains(&format!("node {node} annotated node.machine.sapcloud.io/trigger-deletion-by-mcm=true")),
        "{stdout}"
    );
    assert!(!fx.machine_exists(&machine).await, "MCM deleted the machine");
    assert!(!fx.nodes().await.iter().any(|n| n.metadata.name.as_deref() == Some(node.as_str())));
    let member = Api::<Pod>::namespaced(fx.server.client(), NS).get_opt("etcd-main-1").await.unwrap();
    assert!(member.is_none(), "the member on the node was evicted by the drain");
    assert_eq!(fx.admin_writes(), [format!("patch /api/v1/nodes/{node}")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_member_node_while_another_member_is_down_is_refused_and_changes_nothing() {
    let fx = Fx::start().await;
    set_member_ready(&fx.server.client(), 1, false).await;
    fx.server.request_log().clear();
    let (machine, node) = fx.hosts[0].clone();
    for args in [vec!["machine", "delete", machine.as_str()], vec!["machine", "delete", "--node", node.as_str()]] {
        let out = fx.run(&args).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(REJECTED), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("etcd shoot--a/etcd-main would lose quorum (2 of 3 members ready now, 2 needed; etcd-main-0 on this node)"), "{err}");
        assert!(err.contains("nothing was changed"), "{err}");
    }
    // --force still needs the typed confirmation, which a test has no terminal for.
    let out = fx.run(&["machine", "delete", &machine, "--force"]).await;
    assert_eq!(out.status.code(), Some(REJECTED), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--yes"), "{}", text(&out.stderr));
    assert!(fx.admin_writes().is_empty(), "{:?}", fx.admin_writes());
    assert!(fx.machine_exists(&machine).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_say_one_sentence_exit_with_the_documented_code_and_change_nothing() {
    let fx = Fx::start().await;
    let (machine, node) = fx.hosts[2].clone();
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["machine", "delete"], USAGE, "required"),
        (vec!["machine", "delete", &machine, "--node", &node], USAGE, "cannot be used with"),
        (vec!["machine", "delete", &machine, "--yes"], USAGE, "--force"),
        (vec!["machine", "delete", "Bad_Machine"], USAGE, "invalid name"),
        (vec!["machine", "delete", &machine, "-A"], USAGE, "do not apply"),
        (
            vec!["machine", "delete", "machine-nope"],
            NOT_FOUND,
            "machine \"machine-nope\" not found in namespace \"shoot--a\"",
        ),
        (vec!["machine", "delete", "--node", "node-nope"], NOT_FOUND, "node \"node-nope\" not found"),
    ];
    for (args, code, says) in cases {
        let out = fx.run(&args).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert!(fx.admin_writes().is_empty(), "{:?}", fx.admin_writes());
    assert!(fx.machine_exists(&machine).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_respects_a_pdb_without_disruptions_left_and_the_machine_says_why_it_is_stuck() {
    let fx = Fx::start().await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(fx.server.client(), NS);
    pdbs.patch_status(
        "etcd-main",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"disruptionsAllowed": 0}})),
    )
    .await
    .unwrap();
    let (machine, node) = fx.hosts[2].clone();
    let out = fx.run(&["machine", "delete", &machine]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(
            "PodDisruptionBudget shoot--a/etcd-main (0 disruptions allowed, covers etcd-main-2) would block the drain"
        ),
        "{stdout}"
    );
    let machines: Api<Machine> = Api::namespaced(fx.server.client(), NS);
    let mut why = String::new();
    for _ in 0..200 {
        let m = machines.get(&machine).await.unwrap();
        why = m.status.and_then(|s| s.last_operation).map(|o| o.description).unwrap_or_default();
        if why.contains("PodDisruptionBudget") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(why.contains("Drain failed due to PodDisruptionBudget violation for pods shoot--a/etcd-main-2"), "{why}");
    assert!(
        fx.nodes().await.iter().any(|n| n.metadata.name.as_deref() == Some(node.as_str())),
        "the node stays while the drain is blocked"
    );
    assert!(Api::<Pod>::namespaced(fx.server.client(), NS).get_opt("etcd-main-2").await.unwrap().is_some());
}
