//! Runbook refusals through the real binary: each ends with its documented exit code, one sentence on
//! stderr, and an unchanged cluster (no task, no annotation, StatefulSet untouched).
//! Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`, which fails instead).

use crate::runbook_support;

use landscape::etcd::require_etcd;
use runbook_support::*;

const REJECTED: i32 = 3;
const FORBIDDEN: i32 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_cluster_refuses_recovery_member_restore_of_a_healthy_member_and_users_without_permission() {
    let Some(_) = require_etcd("runbook refusals on a healthy cluster") else { return };
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = pg.namespaces()[0].clone();
    let before = cluster_facts(&pg, &ns).await;

    let r = run(&pg, &["runbook", "quorum-loss-recovery", "-n", &ns, "etcd-main", "--yes"]).await;
    assert_eq!(r.code, REJECTED, "{}", r.stderr);
    assert!(one_sentence(&r.stderr).contains("still has quorum"), "{}", r.stderr);

    let r = run(&pg, &["runbook", "member-restore", "-n", &ns, "etcd-main", "etcd-main-1", "--yes"]).await;
    assert_eq!(r.code, REJECTED, "{}", r.stderr);
    assert!(one_sentence(&r.stderr).contains("etcd-main-1 is healthy"), "{}", r.stderr);

    // A name that is not a member is not found (exit 6), as everywhere a member is named.
    let r = run(&pg, &["runbook", "member-restore", "-n", &ns, "etcd-main", "etcd-main-7", "--yes"]).await;
    assert_eq!(r.code, 6, "{}", r.stderr);
    assert!(one_sentence(&r.stderr).contains("member \"etcd-main-7\" not found"), "{}", r.stderr);

    // --plan works on any cluster state: the plan, and one line saying why a run would be refused now.
    let r = run(&pg, &["runbook", "member-restore", "-n", &ns, "etcd-main", "etcd-main-1", "--plan"]).await;
    assert_eq!(r.code, 0, "operators read plans before the incident: {}", r.stderr);
    assert!(r.stdout.contains(&format!("$ kubectl -n {ns} delete pvc")), "{}", r.stdout);
    let verdict: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("a run would be refused now: ")).collect();
    assert_eq!(verdict.len(), 1, "{}", r.stdout);
    assert!(verdict[0].contains("etcd-main-1 is healthy"), "{}", verdict[0]);
    let r = run(&pg, &["runbook", "quorum-loss-recovery", "-n", &ns, "etcd-main", "--plan", "-o", "jsonl"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let verdict = events(&r.stdout).into_iter().find(|e| e["event"] == "verdict").expect("a verdict event");
    assert_eq!(verdict["refused"], true);
    assert!(verdict["reason"].as_str().unwrap().contains("still has quorum"), "{verdict}");

    // A user the API server knows but RBAC grants nothing.
    if let Some(server) = pg.embedded("needs a user without permissions, which only the embedded server makes up") {
        server.add_user("intern", &[]);
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("intern.kubeconfig");
        std::fs::write(&kubeconfig, pg.user_kubeconfig_yaml("intern", Some(&ns)).unwrap()).unwrap();
        let (out, stderr) = recovery_as(&kubeconfig).await;
        assert_eq!(out.status.code(), Some(FORBIDDEN), "{stderr}");
        assert!(one_sentence(&stderr).contains("forbidden"), "{stderr}");
    }

    assert_eq!(cluster_facts(&pg, &ns).await, before, "refusals change nothing");
    pg.down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_terminal_and_without_yes_the_recovery_refuses_before_changing_anything() {
    let Some(_) = require_etcd("runbook refusal without terminal") else { return };
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = lose_quorum_after_snapshot(&pg, 3, 0).await;
    let before = cluster_facts(&pg, &ns).await;

    let r = run(&pg, &["runbook", "quorum-loss-recovery", "-n", &ns, "etcd-main"]).await;
    assert_eq!(r.code, REJECTED, "{}", r.stderr);
    let line = one_sentence(&r.stderr);
    assert!(line.contains("not a terminal") && line.contains("--yes"), "{line}");
    assert!(r.stdout.contains("DESTRUCTIVE DeletePersistentVolumeClaims"), "the plan was shown: {}", r.stdout);

    // --plan prints the plan with kubectl equivalents and changes nothing.
    let r = run(&pg, &["runbook", "quorum-loss-recovery", "-n", &ns, "etcd-main", "--plan"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains(&format!("$ kubectl -n {ns} scale sts etcd-main --replicas=0")), "{}", r.stdout);
    assert!(r.stdout.contains("a run would start now"), "{}", r.stdout);
    assert!(r.stdout.contains("Newest full snapshot:"), "{}", r.stdout);

    // --resume with nothing to resume.
    let r = run(&pg, &["runbook", "quorum-loss-recovery", "-n", &ns, "etcd-main", "--resume", "--yes"]).await;
    assert_eq!(r.code, REJECTED, "{}", r.stderr);
    assert!(one_sentence(&r.stderr).contains("no unfinished"), "{}", r.stderr);

    // A user who may read everything but change nothing: the RBAC pre-flight names what is missing.
    if let Some(server) = pg.embedded("needs a read-only user, which only the embedded server makes up") {
        let admin = pg.client();
        let role: k8s_openapi::api::rbac::v1::ClusterRole = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "read-everything"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}],
        }))
        .unwrap();
        kube::Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(admin.clone())
            .create(&Default::default(), &role)
            .await
            .unwrap();
        let binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "viewer-reads"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "read-everything"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "viewer"}],
        }))
        .unwrap();
        kube::Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(admin)
            .create(&Default::default(), &binding)
            .await
            .unwrap();
        server.add_user("viewer", &[]);
        let dir2 = tempfile::tempdir().unwrap();
        let kubeconfig = dir2.path().join("viewer.kubeconfig");
        std::fs::write(&kubeconfig, pg.user_kubeconfig_yaml("viewer", Some(&ns)).unwrap()).unwrap();
        let (out, stderr) = recovery_as(&kubeconfig).await;
        assert_eq!(out.status.code(), Some(5), "{stderr}");
        let line = one_sentence(&stderr);
        assert!(line.contains("missing permissions") && line.contains("delete persistentvolumeclaims"), "{line}");
    }

    // The newest full snapshot is two days old: --yes alone is not enough, the data loss must be accepted.
    let old =
        (jiff::Timestamp::now() - jiff::SignedDuration::from_hours(48)).strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string();
    let leases = kube::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(pg.client(), &ns);
    let patch = serde_json::json!({"spec": {"renewTime": old}});
    leases
        .patch("etcd-main-full-snap", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
        .await
        .unwrap();
    let r = run(&pg, &["runbook", "quorum-loss-recovery", "-n", &ns, "etcd-main", "--yes"]).await;
    assert_eq!(r.code, REJECTED, "{}", r.stderr);
    let line = one_sentence(&r.stderr);
    assert!(line.contains("2d old") && line.contains("--accept-data-loss"), "{line}");

    assert_eq!(cluster_facts(&pg, &ns).await, before, "refusals change nothing");
    pg.down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_member_etcd_refuses_quorum_loss_recovery() {
    let Some(_) = require_etcd("runbook refusal single member") else { return };
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 1).await;
    let ns = pg.namespaces()[0].clone();
    let before = cluster_facts(&pg, &ns).await;
    let r = run(&pg, &["runbook", "quorum-loss-recovery", "-n", &ns, "etcd-main", "--yes"]).await;
    assert_eq!(r.code, REJECTED, "{}", r.stderr);
    assert!(one_sentence(&r.stderr).contains("single member"), "{}", r.stderr);
    assert_eq!(cluster_facts(&pg, &ns).await, before);
    pg.down().await;
}

/// Runs `runbook quorum-loss-recovery etcd-main --yes` with only `kubeconfig` (no terminal); returns the output
/// and its stderr.
async fn recovery_as(kubeconfig: &std::path::Path) -> (std::process::Output, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_druidctl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["runbook", "quorum-loss-recovery", "etcd-main", "--yes"])
        .env_remove("KUBECONFIG")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stderr)
}
