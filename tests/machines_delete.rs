//! `machine delete` end to end: the real binary against the embedded API server (real CRDs) with the MCM actor
//! running a MachineSet of three machines, each node hosting one member of a three-member Etcd. The Machines are
//! in the same API server as the Nodes, or (as a seed's Machines in its parent cluster) in a second one, named
//! with `--machine-kubeconfig`; MCM is the newest release (Nodes carry its finalizer, deleting a Node deletes its
//! Machine) or v0.60 (the Node annotation).

use crate::certs_machines_support;

use std::time::Duration;

use certs_machines_support::{
    Cli, NOT_FOUND, NS, REJECTED, USAGE, admin_writes, create_etcd, hosts, member_pod, server_with_namespace,
    set_member_ready, start_split_machine_set, text, wait_machines_up_in,
};
use druidctl::api::Machine;
use druidctl::api::names::{MCM_NODE_FINALIZER, NODE_TRIGGER_DELETION_BY_MCM};
use druidctl::machines::delete::node_ready as ready;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube_sim::ApiServer;
use landscape::mcm::{Mcm, McmVersion};
use serde_json::json;

struct Fx {
    server: ApiServer,
    /// The second API server holding the Machines, when split.
    machine_server: Option<(ApiServer, Cli)>,
    cli: Cli,
    _mcm: Mcm,
    /// (machine, node) hosting etcd-main-0, -1, -2.
    hosts: Vec<(String, String)>,
}

impl Fx {
    async fn start() -> Fx {
        Fx::start_with(McmVersion::NEWEST, false).await
    }

    /// MCM `version`; `split`: the Machines in a second API server.
    async fn start_with(version: McmVersion, split: bool) -> Fx {
        let server = server_with_namespace().await;
        let client = server.client();
        let machine_server = match split {
            true => Some(server_with_namespace().await),
            false => None,
        };
        let mserver = machine_server.as_ref().unwrap_or(&server);
        let mcm = start_split_machine_set(mserver, &server, version).await;
        let machines: Api<Machine> = Api::namespaced(mserver.client(), NS);
        let nodes: Api<Node> = Api::all(client.clone());
        let up = wait_machines_up_in(&mserver.client(), &client).await;
        assert!(
            up,
            "machines never came up: {:#?} {:#?}",
            machines.list(&ListParams::default()).await.unwrap().items,
            nodes.list(&ListParams::default()).await.unwrap().items
        );
        let hosts = hosts(&mserver.client()).await;
        // MCM v0.61+ guards every Node backed by a Machine with its finalizer (node.go).
        for _ in 0..100 {
            let guarded = nodes
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .all(|n| n.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == MCM_NODE_FINALIZER)));
            if guarded || !version.node_finalizer() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        create_etcd(&client, json!({})).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        for (i, (_, node)) in hosts.iter().enumerate() {
            pods.create(&PostParams::default(), &member_pod(i, node)).await.expect("pod");
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
        let created = pdbs.create(&PostParams::default(), &pdb).await.expect("pdb");
        // As the disruption controller writes it: an eviction waits (429) for a budget it has not observed yet.
        pdbs.patch_status(
            "etcd-main",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
            "disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3,
            "observedGeneration": created.metadata.generation}})),
        )
        .await
        .expect("pdb status");
        let cli = Cli::serve(&server).await;
        server.request_log().clear();
        let machine_server = match machine_server {
            Some(m) => {
                let mcli = Cli::serve(&m).await;
                m.request_log().clear();
                Some((m, mcli))
            }
            None => None,
        };
        Fx { server, machine_server, cli, _mcm: mcm, hosts }
    }

    /// Kubeconfig of the machine cluster (split only).
    fn machine_kubeconfig(&self) -> String {
        self.machine_server.as_ref().expect("split").1.kubeconfig.display().to_string()
    }

    fn machine_client(&self) -> kube::Client {
        self.machine_server.as_ref().map(|(m, _)| m.client()).unwrap_or_else(|| self.server.client())
    }

    async fn run(&self, args: &[&str]) -> std::process::Output {
        self.cli.run(args).await
    }

    async fn nodes(&self) -> Vec<Node> {
        Api::<Node>::all(self.server.client()).list(&ListParams::default()).await.unwrap().items
    }

    async fn machine_exists(&self, name: &str) -> bool {
        Api::<Machine>::namespaced(self.machine_client(), NS).get_opt(name).await.unwrap().is_some()
    }

    fn admin_writes(&self) -> Vec<String> {
        admin_writes(&self.server)
    }
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
async fn on_mcm_v0_60_the_node_annotation_replaces_its_machine_after_a_drain() {
    let fx = Fx::start_with(McmVersion::V0_60, false).await;
    let (machine, node) = fx.hosts[1].clone();
    // In a namespace without Machines (an operator of the shoot cannot read them), MCM is asked through the node:
    // v0.60 puts no finalizer on it and reads the annotation.
    let out = fx.run(&["machine", "delete", "--node", &node, "-n", "garden-view", "--wait", "--timeout", "20s"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("asking machine-controller-manager through the node"), "{stdout}");
    assert!(
        stdout.contains(&format!("lacks finalizer {MCM_NODE_FINALIZER} (machine-controller-manager v0.60 or earlier)")),
        "{stdout}"
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_mcm_v0_61_and_later_the_node_is_deleted_and_the_removed_annotation_never_written() {
    let fx = Fx::start().await;
    let (machine, node) = fx.hosts[1].clone();
    // No access to Machines here (a namespace without any): the node carries MCM's finalizer, so the node is
    // deleted and MCM deletes its machine, drains and replaces it.
    let out = fx.run(&["machine", "delete", "--node", &node, "-n", "garden-view", "--wait", "--timeout", "20s"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!("carries finalizer {MCM_NODE_FINALIZER} (machine-controller-manager v0.61 or later)")),
        "{stdout}"
    );
    assert!(
        stdout
            .contains(&format!("node {node} deleted; machine-controller-manager (v0.61 or later) deletes its machine")),
        "{stdout}"
    );
    assert!(stdout.contains("replacement node"), "{stdout}");
    assert!(!fx.machine_exists(&machine).await, "MCM deleted the machine");
    let nodes = fx.nodes().await;
    assert!(!nodes.iter().any(|n| n.metadata.name.as_deref() == Some(node.as_str())), "the node is gone");
    assert_eq!(nodes.iter().filter(|n| ready(n)).count(), 3, "the MachineSet is back to three ready nodes");
    assert!(
        nodes.iter().all(|n| !n
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(NODE_TRIGGER_DELETION_BY_MCM))),
        "no node carries the annotation v0.61 no longer reads"
    );
    assert_eq!(fx.admin_writes(), [format!("delete /api/v1/nodes/{node}")], "one write: the node's deletion");

    // --force cannot skip the drain without the Machine, and says how to give access to it.
    let (_, node2) = fx.hosts[2].clone();
    let out = fx.run(&["machine", "delete", "--node", &node2, "-n", "garden-view", "--force", "--yes"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("--force cannot skip the drain without access to the machine (name the cluster holding the Machines with --machine-kubeconfig or --machine-context)"), "{stdout}");
    let writes = admin_writes(&fx.server);
    assert!(writes.iter().all(|w| !w.starts_with("patch /api/v1/nodes")), "no node is patched: {writes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_in_another_api_server_are_deleted_there_and_the_node_is_replaced_here() {
    let fx = Fx::start_with(McmVersion::NEWEST, true).await;
    let mk = fx.machine_kubeconfig();
    let (machine, node) = fx.hosts[0].clone();
    // Without the machine cluster the Machine is not readable here: found by its node, it is deleted over there.
    let out = fx
        .run(&["machine", "delete", "--node", &node, "--machine-kubeconfig", &mk, "--wait", "--timeout", "20s"])
        .await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!(
            "machine {NS}/{machine} (in the machine cluster (context admin@embedded)) backs node {node}"
        )),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("machine {NS}/{machine} deleted in the machine cluster (context admin@embedded); machine-controller-manager drains its node first")), "{stdout}");
    assert!(!fx.machine_exists(&machine).await);
    assert!(!fx.nodes().await.iter().any(|n| n.metadata.name.as_deref() == Some(node.as_str())));
    let (mserver, _) = fx.machine_server.as_ref().unwrap();
    assert_eq!(
        admin_writes(mserver),
        [format!("delete /apis/machine.sapcloud.io/v1alpha1/namespaces/{NS}/machines/{machine}")]
    );
    assert!(fx.admin_writes().is_empty(), "nothing is written where the nodes are: {:?}", fx.admin_writes());
    for (label, log) in [("target", fx.server.request_log()), ("machine", mserver.request_log())] {
        let refused: Vec<String> = log
            .records()
            .into_iter()
            .filter(|r| r.user == "admin" && r.verb != "get" && r.code >= 400)
            .map(|r| format!("{} {} {}", r.verb, r.path, r.code))
            .collect();
        assert!(refused.is_empty(), "{label} API server refused: {refused:?}");
    }

    // By machine name, with --force (and --yes: the fixture's first member is gone for good, no StatefulSet
    // brings it back, so this one costs quorum): labelled and deleted over there.
    let (machine, _) = fx.hosts[1].clone();
    let out =
        fx.run(&["machine", "delete", &machine, "--force", "--yes", "--machine-kubeconfig", &mk, "-o", "json"]).await;
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["result"]["plan"]["method"], "ForceDeleteMachine");
    assert_eq!(v["result"]["plan"]["machineCluster"], "machine cluster (context admin@embedded)");
    // Gone, or going: one read (a check and then a get would race with the deletion finishing in between).
    let left = Api::<Machine>::namespaced(fx.machine_client(), NS).get_opt(&machine).await.unwrap();
    assert!(left.is_none_or(|m| m.metadata.deletion_timestamp.is_some()), "machine {machine} is not being deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_machine_cluster_flags_say_one_sentence_and_change_nothing() {
    let fx = Fx::start_with(McmVersion::NEWEST, true).await;
    let mk = fx.machine_kubeconfig();
    let (machine, node) = fx.hosts[2].clone();
    let missing = fx.cli.dir.path().join("no-such-kubeconfig");
    let missing = missing.to_str().unwrap();
    let cases: Vec<(Vec<&str>, i32, String)> = vec![
        (
            vec!["machine", "delete", &machine, "--machine-kubeconfig", missing],
            USAGE,
            format!("{missing}: no such file"),
        ),
        (vec!["machine", "delete", &machine, "--machine-kubeconfig", ""], USAGE, "must not be empty".into()),
        (
            vec!["runbook", "machine-replacement", "--node", &node, "--machine-kubeconfig", missing, "--yes"],
            USAGE,
            format!("{missing}: no such file"),
        ),
        (
            vec!["machine", "delete", &machine, "--machine-kubeconfig", &mk, "--machine-context", "nope"],
            NOT_FOUND,
            "context \"nope\" not found in the kubeconfig".into(),
        ),
        // The Machine is in the machine cluster, not here.
        (vec!["machine", "delete", &machine], NOT_FOUND, format!("machine \"{machine}\" not found")),
        (
            vec!["machine", "delete", "machine-nope", "--machine-kubeconfig", &mk],
            NOT_FOUND,
            "machine \"machine-nope\" not found in namespace \"shoot--a\"".into(),
        ),
    ];
    for (args, code, says) in cases {
        let out = fx.run(&args).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(&says), "{args:?}: {err}");
    }
    assert!(fx.admin_writes().is_empty(), "{:?}", fx.admin_writes());
    assert!(admin_writes(&fx.machine_server.as_ref().unwrap().0).is_empty());
    assert!(fx.machine_exists(&machine).await);
}
