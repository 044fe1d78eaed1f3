//! The quorum-loss recovery on a playground with real etcd, driven through the real binary: keys written
//! before the last snapshot come back, later ones are gone; a run killed with SIGKILL in the middle of the
//! destructive part is finished by re-running it, without repeating a completed destructive step.
//! Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`, which fails instead).

use crate::runbook_support;

use std::time::Duration;

use druidctl::api::EtcdOperatorTask;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use kube::api::ListParams;
use landscape::etcd::require_etcd;
use runbook_support::*;
use tokio::io::{AsyncBufReadExt, BufReader};

async fn assert_keys(pg: &landscape::Playground, ns: &str, before: usize) {
    // One cluster, not a recovered one with a second, empty one bootstrapped beside it.
    let mut clusters = Vec::new();
    for m in 0..3 {
        clusters.push(pg.etcd_client(ns, m).unwrap().status().await.unwrap().cluster_id);
    }
    assert!(clusters.iter().all(|c| *c == clusters[0]), "every member in member 0's cluster: {clusters:x?}");
    for m in 0..3 {
        let c = pg.etcd_client(ns, m).unwrap();
        let found = c.get_prefix("/before/").await.unwrap().len();
        if found != before {
            // What each member says of itself and of the cluster, and whether the keys come later.
            let mut seen = Vec::new();
            for o in 0..3 {
                let oc = pg.etcd_client(ns, o).unwrap();
                seen.push(format!(
                    "member {o} at {}: {:?}; members {:?}",
                    oc.endpoint(),
                    oc.status().await,
                    oc.member_list().await
                ));
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
            let later = c.get_prefix("/before/").await.map(|k| k.len());
            let member = pg.member(ns, m).unwrap();
            let etcd_log = std::fs::read_to_string(member.process().config().log_file).unwrap_or_default();
            let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(pg.client(), ns);
            let params = kube::api::LogParams { container: Some("backup-restore".into()), ..Default::default() };
            let sidecar = pods.logs(&format!("etcd-main-{m}"), &params).await.unwrap_or_default();
            let tail = |text: &str, n: usize| {
                text.lines().rev().take(n).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
            };
            let leader_log =
                std::fs::read_to_string(pg.member(ns, 0).unwrap().process().config().log_file).unwrap_or_default();
            let last_start = leader_log.rfind("starting an etcd server").unwrap_or(0);
            let leader_sidecar = pods.logs("etcd-main-0", &params).await.unwrap_or_default();
            panic!(
                "member {m}: {found} of the {before} keys written before the snapshot are back (5 s later: {later:?})\n{}\n--- its sidecar:\n{}\n--- its etcd:\n{}\n--- member 0's sidecar:\n{}\n--- member 0's etcd since its last start:\n{}",
                seen.join("\n"),
                tail(&sidecar, 40),
                tail(&etcd_log, 80),
                tail(&leader_sidecar, 40),
                leader_log[last_start..].lines().take(70).collect::<Vec<_>>().join("\n")
            );
        }
        assert!(
            c.get_prefix("/after/").await.unwrap().is_empty(),
            "member {m}: keys written after the last snapshot are lost"
        );
        let members = c.member_list().await.unwrap();
        assert_eq!(members.len(), 3);
        assert!(members.iter().all(|x| !x.is_learner), "every member promoted");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_loss_recovery_restores_the_keys_before_the_snapshot_and_loses_the_later_ones() {
    let Some(_) = require_etcd("runbook quorum-loss recovery") else { return };
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = lose_quorum_after_snapshot(&pg, 25, 5).await;

    let r = run(&pg, &["runbook", "quorum-loss-recovery", "-n", &ns, "etcd-main", "--yes", "-o", "jsonl"]).await;
    assert_eq!(r.code, 0, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    assert_keys(&pg, &ns, 25).await;
    let tasks = Api::<EtcdOperatorTask>::namespaced(pg.client(), &ns).list(&ListParams::default()).await.unwrap().items;
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].state().as_str(), "Succeeded");
    let journal = serde_json::to_value(druidctl::tasks::step::journal_of(&tasks[0]).unwrap()).unwrap();
    let summary = check_time_accounting(&r.stdout, &journal, "quorum-loss-recovery");
    assert_eq!(summary["steps"].as_array().unwrap().len(), 11);
    assert_eq!(pg.etcd_ready(&ns).await.unwrap(), ("True".to_string(), "Quorate".to_string()));
    pg.down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_loss_recovery_killed_in_the_destructive_part_finishes_on_rerun_without_repeating_it() {
    let Some(_) = require_etcd("runbook kill and resume") else { return };
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = lose_quorum_after_snapshot(&pg, 15, 3).await;

    // First run: SIGKILL once the PVCs are deleted, while the member leases are being deleted.
    let mut child = druidctl(&pg, &["runbook", "quorum-loss-recovery", "-n", &ns, "etcd-main", "--yes", "-o", "jsonl"])
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut first_run = Vec::new();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("event in time")
            .unwrap()
            .expect("run ended early");
        let e: serde_json::Value = serde_json::from_str(&line).unwrap();
        if e["event"] == "stepStarted" {
            first_run.push(e["name"].as_str().unwrap().to_string());
        }
        if e["event"] == "stepStarted" && e["name"] == "DeleteMemberLeases" {
            break;
        }
    }
    child.start_kill().unwrap();
    let status = child.wait().await.unwrap();
    assert!(!status.success());
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(pg.client(), &ns);
    assert!(pvcs.list(&ListParams::default()).await.unwrap().items.is_empty(), "the destructive step had completed");
    let task =
        &Api::<EtcdOperatorTask>::namespaced(pg.client(), &ns).list(&ListParams::default()).await.unwrap().items[0];
    assert_eq!(task.state().as_str(), "InProgress", "the journal keeps the run open");

    // Re-run the same command: it waits for the killed run's lease, then continues.
    let r = run(&pg, &["runbook", "quorum-loss-recovery", "-n", &ns, "etcd-main", "--yes", "-o", "jsonl"]).await;
    assert_eq!(r.code, 0, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    let second_run = started_steps(&r.stdout);
    for done in first_run.iter().filter(|s| *s != "DeleteMemberLeases") {
        assert!(!second_run.contains(done), "{done} ran again: {second_run:?}");
    }
    assert!(
        !second_run.contains(&"DeletePersistentVolumeClaims".to_string()),
        "the destructive step is never repeated"
    );
    let plan = events(&r.stdout).into_iter().find(|e| e["event"] == "plan").unwrap();
    assert!(plan["resuming"].is_string(), "the second run continues the same task: {plan}");
    assert_keys(&pg, &ns, 15).await;
    pg.down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_the_recovery_at_a_safe_point_and_the_printed_command_finishes_it() {
    let Some(_) = require_etcd("runbook ctrl-c and resume") else { return };
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = lose_quorum_after_snapshot(&pg, 8, 2).await;

    let mut child = druidctl(&pg, &["runbook", "quorum-loss-recovery", "-n", &ns, "etcd-main", "--yes", "-o", "jsonl"])
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut interrupted = None;
    while let Some(line) =
        tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await.expect("event in time").unwrap()
    {
        let e: serde_json::Value = serde_json::from_str(&line).unwrap();
        if e["event"] == "stepStarted" && e["name"] == "WaitMember0Ready" {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGINT) };
        }
        if e["event"] == "interrupted" {
            interrupted = Some(e);
        }
    }
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(130), "Ctrl-C ends with the documented code");
    let e = interrupted.expect("an interrupted event");
    let resume = e["resumeCommand"].as_str().unwrap().to_string();
    assert!(resume.contains("--resume") && resume.contains(&ns), "{resume}");

    // Run exactly the printed command (it names the kubeconfig it was given).
    let words: Vec<&str> = resume.split_whitespace().skip(1).collect();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_druidctl"));
    cmd.args(&words)
        .args(["-o", "jsonl"])
        .env_remove("KUBECONFIG")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output()).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let steps = started_steps(&stdout);
    assert_eq!(
        steps.first().map(String::as_str),
        Some(e["nextStep"].as_str().unwrap()),
        "continues where it stopped: {steps:?}"
    );
    assert!(!steps.contains(&"DeletePersistentVolumeClaims".to_string()));
    assert_keys(&pg, &ns, 8).await;
    pg.down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_loss_recovery_of_an_etcd_with_a_member_name_prefix_uses_the_prefixed_member_names() {
    let Some(_) = require_etcd("runbook quorum-loss recovery with memberNamePrefix") else { return };
    let dir = tempfile::tempdir().unwrap();
    let pg = E2e::start_in(dir.path(), 3, |o| {
        o.delta_snapshot_period = "1h".into();
        o.member_name_prefix = Some("shoot1".into());
    })
    .await;
    let ns = pg.namespaces()[0].clone();
    // etcd-druid names the members, their leases and the initial-cluster keys `<prefix>-<pod>`.
    let leases: Vec<String> = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(pg.client(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|l| l.metadata.name)
        .collect();
    for i in 0..3 {
        assert!(leases.contains(&format!("shoot1-etcd-main-{i}")), "member lease of pod {i}: {leases:?}");
    }
    let members = pg.etcd_client(&ns, 0).unwrap().member_list().await.unwrap();
    let mut names: Vec<String> = members.iter().map(|m| m.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["shoot1-etcd-main-0", "shoot1-etcd-main-1", "shoot1-etcd-main-2"]);

    let ns = lose_quorum_after_snapshot(&pg, 10, 3).await;
    let r = run(&pg, &["runbook", "quorum-loss-recovery", "-n", &ns, "etcd-main", "--yes", "-o", "jsonl"]).await;
    assert_eq!(r.code, 0, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    assert_keys(&pg, &ns, 10).await;
    let members = pg.etcd_client(&ns, 0).unwrap().member_list().await.unwrap();
    assert!(members.iter().all(|m| m.name.starts_with("shoot1-etcd-main-")), "{members:?}");
    let s = run(&pg, &["status", "-n", &ns, "etcd-main"]).await;
    assert_eq!(s.code, 0, "healthy after the recovery: {}{}", s.stdout, s.stderr);
    pg.down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_member_started_after_the_configmap_edit_sees_only_member_0_in_its_initial_cluster() {
    let Some(_) = require_etcd("runbook quorum-loss recovery, member started after the ConfigMap edit") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    // etcd-druid's Role, RoleBinding and ServiceAccount are there, as on a seed.
    let ns = pg.namespaces()[0].clone();
    let listed = run(&pg, &["list-resources", "-n", &ns, "etcd-main", "-o", "name"]).await;
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    for name in [
        "serviceaccount/etcd-main\n",
        "role.rbac.authorization.k8s.io/druid.gardener.cloud:etcd:etcd-main\n",
        "rolebinding.rbac.authorization.k8s.io/druid.gardener.cloud:etcd:etcd-main\n",
    ] {
        assert!(listed.stdout.contains(name), "list-resources lacks {name}: {}", listed.stdout);
    }
    let ns = lose_quorum_after_snapshot(&pg, 10, 3).await;
    let args = ["runbook", "quorum-loss-recovery", "-n", ns.as_str(), "etcd-main", "--yes", "-o", "jsonl"];
    // Cut the run once member 0 is ready (step 8, WaitMember0Ready, journaled): the ConfigMap is edited and
    // only member 0 was started since.
    let mut cut = druidctl(&pg, &args);
    cut.env("DRUIDCTL_RUNBOOK_LEASE", "1s").env(druidctl::runbook::engine::ABORT_AT_ENV, "8:after-journal");
    let out = tokio::time::timeout(Duration::from_secs(150), cut.spawn().unwrap().wait_with_output())
        .await
        .expect("the cut run ends")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("\"WaitMember0Ready\""), "the run got to member 0: {stdout}");

    // The ConfigMap names only member 0 in the three keys of etcd-druid's step 05 (v0.37.1 format).
    let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(pg.client(), &ns)
        .get("etcd-main-config")
        .await
        .unwrap();
    let conf = cm.data.unwrap()["etcd.conf.yaml"].clone();
    let doc = druidctl::tasks::quorum_loss::EtcdConfDocument::parse(&conf).unwrap();
    assert!(doc.names_only("etcd-main-0"), "{conf}");
    assert!(doc.get("advertise-client-urls").unwrap().is_object(), "per-member maps: {conf}");

    // Member 0 was started from it: its etcd was given an initial cluster of itself only, and formed a cluster of one.
    let member = pg.member(&ns, 0).unwrap();
    let initial = member.process().config().initial_cluster;
    let names: Vec<&str> = initial.split(',').filter_map(|e| e.split_once('=')).map(|(n, _)| n).collect();
    assert_eq!(names, ["etcd-main-0"], "--initial-cluster {initial}");
    let members = pg.etcd_client(&ns, 0).unwrap().member_list().await.unwrap();
    assert_eq!(members.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["etcd-main-0"]);

    let r = run(&pg, &args).await;
    assert_eq!(r.code, 0, "the rerun finishes: {}\n{}", r.stdout, r.stderr);
    assert_keys(&pg, &ns, 10).await;
    pg.down().await;
}
