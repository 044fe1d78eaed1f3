//! Machine replacement with the Machines in another cluster than the Nodes, as on a seed whose Machines live in
//! its parent cluster: the playground with a second embedded API server for MCM's control cluster
//! (`machine-kubeconfig`), the newest MCM (Nodes carry its finalizer). The real binary runs `runbook
//! machine-replacement` (killed once after the deletion and resumed without the machine-cluster flags: the run
//! recorded them) and `machine delete --wait` across the two API servers; each ends as docs/machines.md says
//! (old node gone, a new one Ready, every member ready again), and neither API server saw a write by druidctl
//! that it refused, a Machine written where the Nodes are, or the Node annotation MCM v0.61 no longer reads.

use crate::runbook_support;

use std::time::Duration;

use druidctl::api::Machine;
use druidctl::api::names::{MCM_NODE_FINALIZER, NODE_TRIGGER_DELETION_BY_MCM};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;
use kube_sim::ApiServer;
use landscape::{Playground, PlaygroundOptions};
use runbook_support::{Run, druidctl, started_steps};

async fn run_env(pg: &Playground, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = druidctl(pg, args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(150), cmd.spawn().expect("spawn").wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("druidctl {args:?} did not finish in time"))
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn node_of(pg: &Playground, ns: &str, pod: &str) -> String {
    let p = Api::<Pod>::namespaced(pg.client(), ns).get(pod).await.unwrap();
    p.spec.and_then(|s| s.node_name).expect("member pod is scheduled")
}

async fn node_names(pg: &Playground) -> Vec<String> {
    let nodes = Api::<Node>::all(pg.client()).list(&ListParams::default()).await.unwrap().items;
    nodes.into_iter().filter_map(|n| n.metadata.name).collect()
}

async fn machine_names(pg: &Playground, ns: &str) -> Vec<String> {
    let ms = Api::<Machine>::namespaced(pg.machine_client(), ns).list(&ListParams::default()).await.unwrap().items;
    ms.into_iter().filter_map(|m| m.metadata.name).collect()
}

/// `verb path` of druidctl's (user admin's) writes, leaving out its RBAC pre-flight's access reviews.
fn writes(server: &ApiServer) -> Vec<String> {
    server
        .request_log()
        .records()
        .into_iter()
        .filter(|r| r.user == "admin" && matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete"))
        .filter(|r| r.resource != "selfsubjectaccessreviews")
        .map(|r| format!("{} {}", r.verb, r.path.split('?').next().unwrap_or_default()))
        .collect()
}

/// druidctl's requests a server refused, other than reads of what may not exist and optimistic-concurrency
/// conflicts (409 on a journal write guarded by its resourceVersion, which the engine retries).
fn refused(server: &ApiServer) -> Vec<String> {
    server
        .request_log()
        .records()
        .into_iter()
        .filter(|r| r.user == "admin" && r.code >= 400 && r.code != 409 && !(r.verb == "get" && r.code == 404))
        .map(|r| format!("{} {} {}", r.verb, r.path, r.code))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_replacement_and_machine_delete_across_two_api_servers_end_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = PlaygroundOptions::new(dir.path());
    opts.machine_cluster = true;
    let pg = Playground::up(opts).await.expect("playground up");
    pg.wait_ready(Duration::from_secs(60)).await.expect("3-member Etcd ready");
    let ns = pg.namespaces()[0].clone();
    let mk = pg.machine_kubeconfig_path().expect("machine kubeconfig").display().to_string();
    let target = pg.embedded_server().unwrap().clone();
    let machines = pg.machine_server().unwrap().clone();
    assert!(
        Api::<Machine>::namespaced(pg.client(), &ns).list(&ListParams::default()).await.unwrap().items.is_empty(),
        "no Machine where the Nodes are"
    );
    for _ in 0..100 {
        let nodes = Api::<Node>::all(pg.client()).list(&ListParams::default()).await.unwrap().items;
        if nodes
            .iter()
            .all(|n| n.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == MCM_NODE_FINALIZER)))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    target.request_log().clear();
    machines.request_log().clear();

    // The runbook by node, killed right after the deletion is journaled.
    let old = node_of(&pg, &ns, "etcd-main-0").await;
    let nodes_before = node_names(&pg).await;
    let machines_before = machine_names(&pg, &ns).await;
    let first =
        ["runbook", "machine-replacement", "--node", old.as_str(), "--machine-kubeconfig", mk.as_str(), "--yes"];
    let r = run_env(&pg, &first, &[("DRUIDCTL_RUNBOOK_ABORT_AT", "1:after-journal"), ("DRUIDCTL_RUNBOOK_LEASE", "2s")])
        .await;
    assert_ne!(r.code, 0, "killed at the kill point: {}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains(&format!("(in the machine cluster (context admin@embedded)) backs node {old}")),
        "{}",
        r.stdout
    );
    // Resumed without the machine-cluster flags: the run recorded them.
    let etcd = format!("{ns}/etcd-main");
    let resume = [
        "runbook",
        "machine-replacement",
        "--node",
        old.as_str(),
        "--etcd",
        etcd.as_str(),
        "--resume",
        "--yes",
        "-o",
        "jsonl",
    ];
    let mut r = run_env(&pg, &resume, &[("DRUIDCTL_RUNBOOK_LEASE", "2s")]).await;
    for _ in 0..10 {
        if r.code == 0 || !r.stderr.contains("is being executed") {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        r = run_env(&pg, &resume, &[("DRUIDCTL_RUNBOOK_LEASE", "2s")]).await;
    }
    assert_eq!(r.code, 0, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    assert_eq!(started_steps(&r.stdout), ["WaitForReplacementNode", "WaitForMembersReady"]);
    pg.wait_ready(Duration::from_secs(60)).await.expect("every member ready again");
    let nodes_after = node_names(&pg).await;
    assert!(!nodes_after.contains(&old), "the old node is gone: {nodes_after:?}");
    assert_eq!(nodes_after.len(), 3);
    assert!(nodes_after.iter().any(|n| !nodes_before.contains(n)), "a new node joined");
    let machines_after = machine_names(&pg, &ns).await;
    assert_eq!(machines_after.len(), 3, "the MachineSet replaced the machine: {machines_after:?}");
    let gone: Vec<&String> = machines_before.iter().filter(|m| !machines_after.contains(m)).collect();
    assert_eq!(gone.len(), 1, "exactly one machine was replaced");
    assert_eq!(
        writes(&machines),
        [format!("delete /apis/machine.sapcloud.io/v1alpha1/namespaces/{ns}/machines/{}", gone[0])],
        "the one write in the machine cluster: the Machine's deletion"
    );

    // machine delete by machine name, waiting for the replacement node.
    let victim_node = node_of(&pg, &ns, "etcd-main-1").await;
    let victim = victim_node.clone(); // the playground names each Node like its Machine
    let out = run_env(
        &pg,
        &["machine", "delete", victim.as_str(), "--machine-kubeconfig", mk.as_str(), "--wait", "--timeout", "60s"],
        &[],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains(&format!("machine {ns}/{victim} deleted in the machine cluster (context admin@embedded)")),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("replacement node"), "{}", out.stdout);
    assert!(!node_names(&pg).await.contains(&victim_node));
    pg.wait_ready(Duration::from_secs(60)).await.expect("every member ready again");

    // What druidctl wrote where the Nodes are: task, leases, no Machine and no Node annotation or patch.
    let target_writes = writes(&target);
    assert!(target_writes.iter().all(|w| !w.contains("/machines")), "{target_writes:?}");
    assert!(target_writes.iter().all(|w| !w.starts_with("patch /api/v1/nodes")), "{target_writes:?}");
    let nodes = Api::<Node>::all(pg.client()).list(&ListParams::default()).await.unwrap().items;
    assert!(
        nodes.iter().all(|n| !n
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(NODE_TRIGGER_DELETION_BY_MCM)))
    );
    assert_eq!(refused(&target), Vec::<String>::new(), "the target API server refused nothing");
    assert_eq!(refused(&machines), Vec::<String>::new(), "the machine API server refused nothing");
    pg.down().await.unwrap();
}
