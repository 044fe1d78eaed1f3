//! The number of API requests `status` makes is pinned, so that it cannot creep back up: one Etcd, and every
//! Etcd of the cluster (`-A`, three Etcds here). Counted from the embedded API server's request log while the
//! real binary runs; a count, never a time (performance is measured in `benches/`).

use crate::cli_support;

use cli_support::{CONTEXT_NS, Fixture, bin};

/// Reads for one named Etcd: GET the Etcd, then one LIST each of pods (by the Etcd's selector), PVCs, leases
/// and EtcdOperatorTasks. Lower this when the collection gets cheaper; never raise it without a reason written
/// here.
const ONE_ETCD_BUDGET: usize = 5;
/// Beside those reads, etcd's own view opens one port-forward per member (the fixture's Etcd has 3 replicas),
/// as soon as the Etcd is read: the pod names come from the Etcd, so they do not wait for the pod list. This
/// fixture's Etcd has no pods, so all three are refused (404).
const ONE_ETCD_PORT_FORWARDS: usize = 3;
/// Requests for `status -A` over three Etcds in two namespaces: LIST the Etcds, then one cluster-wide LIST per
/// kind. It must not grow with the number of Etcds, namespaces or objects.
const ALL_NAMESPACES_BUDGET: usize = 5;

async fn run_counted(fx: &Fixture, args: &[&str]) -> Vec<String> {
    fx.server.request_log().clear();
    let out =
        tokio::process::Command::new(bin()).arg("--kubeconfig").arg(&fx.kubeconfig).args(args).output().await.unwrap();
    // The fixture's Etcds have no members: status judges them (exit 4), it does not fail to read (5/6/7).
    assert!(matches!(out.status.code(), Some(0) | Some(4)), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    fx.server.request_log().records().iter().map(|r| format!("{} {} {}", r.verb, r.path, r.code)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_one_etcd_stays_within_its_request_budget() {
    let fx = Fixture::start().await;
    let one = run_counted(&fx, &["status", "-n", CONTEXT_NS, "etcd-main"]).await;
    println!("status etcd-main: {} requests\n{}", one.len(), one.join("\n"));
    let (port_forwards, reads): (Vec<&String>, Vec<&String>) = one.iter().partition(|r| r.contains("/portforward"));
    assert!(reads.len() <= ONE_ETCD_BUDGET, "status of one Etcd made {} reads (budget {ONE_ETCD_BUDGET})", reads.len());
    assert!(
        port_forwards.len() <= ONE_ETCD_PORT_FORWARDS,
        "status of one Etcd opened {} port-forwards (one per member: {ONE_ETCD_PORT_FORWARDS})",
        port_forwards.len()
    );
    let no_etcd = run_counted(&fx, &["status", "--no-etcd", "-n", CONTEXT_NS, "etcd-main"]).await;
    assert!(
        no_etcd.len() <= ONE_ETCD_BUDGET && !no_etcd.iter().any(|r| r.contains("/portforward")),
        "status --no-etcd of one Etcd made {} requests (budget {ONE_ETCD_BUDGET}, no port-forward):\n{}",
        no_etcd.len(),
        no_etcd.join("\n")
    );
    assert!(!one.is_empty(), "the request log saw nothing: the count would prove nothing");
    let all = run_counted(&fx, &["status", "-A"]).await;
    println!("status -A: {} requests\n{}", all.len(), all.join("\n"));
    assert!(
        all.len() <= ALL_NAMESPACES_BUDGET,
        "status -A made {} requests (budget {ALL_NAMESPACES_BUDGET})",
        all.len()
    );
}
