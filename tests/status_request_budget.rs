//! The number of API requests `status` makes is pinned, so that it cannot creep back up: one Etcd, and every
//! Etcd of the cluster (`-A`, three Etcds here). Counted from the embedded API server's request log while the
//! real binary runs; a count, never a time (performance is measured in `benches/`).

use crate::cli_support;

use cli_support::{CONTEXT_NS, Fixture, bin};

/// Requests for one named Etcd: GET the Etcd, then one LIST each of pods (by the Etcd's selector), PVCs, leases
/// and EtcdOperatorTasks. Lower this when the collection gets cheaper; never raise it without a reason written
/// here.
const ONE_ETCD_BUDGET: usize = 5;
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
    assert!(one.len() <= ONE_ETCD_BUDGET, "status of one Etcd made {} requests (budget {ONE_ETCD_BUDGET})", one.len());
    assert!(!one.is_empty(), "the request log saw nothing: the count would prove nothing");
    let all = run_counted(&fx, &["status", "-A"]).await;
    println!("status -A: {} requests\n{}", all.len(), all.join("\n"));
    assert!(
        all.len() <= ALL_NAMESPACES_BUDGET,
        "status -A made {} requests (budget {ALL_NAMESPACES_BUDGET})",
        all.len()
    );
}
