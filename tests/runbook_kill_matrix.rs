//! Kill matrix: the quorum-loss recovery (the real binary) is killed with SIGKILL at every kill point, in
//! order — for every step, at the boundary before it (`before-act`), in the middle of it (`after-act`: acted,
//! not verified nor journaled) and at the boundary after it (`after-journal`) — through the test-only
//! `DRUIDCTL_RUNBOOK_ABORT_AT` hook. Each re-run continues the same task and dies at the next point; the last
//! run completes. The result is complete and correct and no destructive action is repeated: every PVC is
//! deleted exactly once, no snapshot lease is ever deleted, `initial-cluster` is shrunk to the first member
//! exactly once, the keys written before the snapshot survive and the later ones are lost.
//!
//! `runbook cert-renewal` and `runbook machine-replacement` get the same matrix (every step × every phase), each
//! killed run continued with `--resume`. They share one real-etcd playground per runbook across their kill
//! points: the cuts are sequential pieces of one run, so a playground per kill point would only repeat the
//! setup (about 5 s each) without testing more — each resumed run starts from the state the killed one left,
//! exactly what an operator's re-run sees. Both end correct: every member serves a newly issued serial and
//! quorum was kept; the old machine and node are gone, a replacement node is Ready and every member is ready.
//! Together they take about 30 s on two cores (17 s and 13 s).
//! Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`, which fails instead).

use crate::runbook_support;

use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use druidctl::api::{Etcd, Machine};
use druidctl::certs::served::{member_client_tls_url, serial_of_pem, served_serial};
use druidctl::runbook::engine::{ABORT_AT_ENV, KillPhase};
use druidctl::tasks::quorum_loss::{ETCD_CONF_KEY, initial_cluster_members};
use kube_sim::{AdmissionHook, AdmissionOperation, AdmissionRequest, ApiServer};
use landscape::etcd::require_etcd;
use runbook_support::*;

/// Records the `initial-cluster` of every ConfigMap update, with who made it.
#[derive(Default)]
struct ConfigMapEdits(Mutex<Vec<(String, String, Vec<String>)>>);

impl AdmissionHook for ConfigMapEdits {
    fn admit(&self, _server: &ApiServer, req: &AdmissionRequest) -> Result<(), String> {
        if req.resource == "configmaps" && req.operation == AdmissionOperation::Update {
            let conf = req.object.as_ref().and_then(|o| o["data"][ETCD_CONF_KEY].as_str()).unwrap_or_default();
            self.0.lock().unwrap().push((req.name.clone(), req.user.clone(), initial_cluster_members(conf)));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_killed_at_every_step_boundary_and_mid_step_finishes_without_repeating_a_destructive_action() {
    let Some(_) = require_etcd("runbook kill matrix") else { return };
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let Some(server) =
        pg.embedded("records every ConfigMap edit with an admission hook and counts requests in the request log")
    else {
        return;
    };
    let ns = lose_quorum_after_snapshot(&pg, 10, 3).await;
    let log = server.request_log();
    let edits = Arc::new(ConfigMapEdits::default());
    server.add_admission_hook(edits.clone());
    log.clear();

    let args = ["runbook", "quorum-loss-recovery", "-n", ns.as_str(), "etcd-main", "--yes", "-o", "jsonl"];
    let plan =
        run(&pg, &["runbook", "quorum-loss-recovery", "-n", ns.as_str(), "etcd-main", "--plan", "-o", "jsonl"]).await;
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let steps: Vec<String> = events(&plan.stdout).iter().find(|e| e["event"] == "plan").expect("plan event")["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(steps.len(), 11, "{steps:?}");

    let mut kills = 0;
    let mut completed_destructive = false;
    for (i, step) in steps.iter().enumerate() {
        for phase in KillPhase::ALL {
            let point = format!("{}:{}", i + 1, phase.as_str());
            let stdout = cut_at(&pg, &args, &point).await;
            kills += 1;
            for e in events(&stdout) {
                if e["event"] == "stepStarted" && e["name"] == "DeletePersistentVolumeClaims" {
                    assert!(
                        !completed_destructive,
                        "the PVC deletion ran again after it had completed (cut at {point})"
                    );
                }
            }
            if step == "DeletePersistentVolumeClaims" && phase == KillPhase::AfterJournal {
                completed_destructive = true;
            }
        }
    }
    let last = run(&pg, &args).await;
    assert_eq!(last.code, 0, "the final run completes: {}", last.stderr);
    let evs = events(&last.stdout);
    assert!(evs.iter().any(|e| e["event"] == "finished"), "{}", last.stdout);
    assert!(!evs.iter().any(|e| e["event"] == "stepStarted"), "every step was done in an earlier run: {}", last.stdout);
    eprintln!("killed the runbook at {kills} kill points ({} steps x {} phases)", steps.len(), KillPhase::ALL.len());
    assert_eq!(kills, 33);

    let deleted_pvcs: u64 = log
        .counters()
        .iter()
        .filter(|((verb, resource, code), _)| verb == "delete" && resource == "persistentvolumeclaims" && *code < 300)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(deleted_pvcs, 3, "each of the 3 PVCs deleted exactly once");
    let pvc_deletes: Vec<String> = log
        .records()
        .iter()
        .filter(|r| r.verb == "delete" && r.resource == "persistentvolumeclaims")
        .map(|r| r.path.clone())
        .collect();
    let mut unique = pvc_deletes.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), pvc_deletes.len(), "no PVC delete was sent twice: {pvc_deletes:?}");
    let snap_lease_deletes = log.records().iter().filter(|r| r.verb == "delete" && r.path.contains("-snap")).count();
    assert_eq!(snap_lease_deletes, 0, "snapshot leases are never deleted");

    // initial-cluster: shrunk to the first member exactly once (before druid restores it on reconcile).
    let edits = edits.0.lock().unwrap().clone();
    let shrunk: Vec<_> = edits.iter().filter(|(_, _, m)| m.len() == 1).collect();
    assert_eq!(shrunk.len(), 1, "initial-cluster shrunk exactly once: {edits:?}");
    assert!(shrunk[0].2[0].starts_with("etcd-main-0="), "{shrunk:?}");
    let first_edit = edits.iter().position(|(_, _, m)| m.len() == 1).unwrap();
    assert!(
        edits[..first_edit].iter().all(|(n, _, _)| *n != shrunk[0].0),
        "no other edit of the ConfigMap before the runbook's: {edits:?}"
    );

    for m in 0..3 {
        let c = pg.etcd_client(&ns, m).unwrap();
        assert_eq!(c.get_prefix("/before/").await.unwrap().len(), 10, "member {m}: the keys of the snapshot are back");
        assert!(
            c.get_prefix("/after/").await.unwrap().is_empty(),
            "member {m}: the keys written after the snapshot are lost"
        );
    }
    assert_eq!(pg.etcd_ready(&ns).await.unwrap().0, "True");
    pg.down().await;
    eprintln!("kill matrix took {:?}", started.elapsed());
}

/// Runs the binary with the kill point `point` and returns its stdout once it died there (SIGKILL).
async fn cut_at(pg: &landscape::Playground, args: &[&str], point: &str) -> String {
    let mut cmd = druidctl(pg, args);
    cmd.env("DRUIDCTL_RUNBOOK_LEASE", "1s").env(ABORT_AT_ENV, point);
    let mut child = cmd.spawn().unwrap();
    let mut pipe = child.stdout.take().unwrap();
    let reader = tokio::spawn(async move {
        let mut text = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut pipe, &mut text).await;
        text
    });
    let status = match tokio::time::timeout(Duration::from_secs(120), child.wait()).await {
        Ok(s) => s.unwrap(),
        Err(_) => {
            child.kill().await.unwrap();
            panic!("the run cut at {point} did not end in time; its events:\n{}", reader.await.unwrap());
        }
    };
    let stdout = reader.await.unwrap();
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).await.unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the run cut at {point} was killed there, not: {status:?}\nstdout: {stdout}\nstderr: {stderr}"
    );
    stdout
}

/// Kills `first` (then `resume`) at every step × phase of a `steps`-step plan, then finishes with `resume`;
/// returns the final run's stdout.
async fn kill_everywhere(pg: &landscape::Playground, first: &[&str], resume: &[&str], steps: usize) -> String {
    let mut kills = 0;
    for i in 1..=steps {
        for phase in KillPhase::ALL {
            let args = if kills == 0 { first } else { resume };
            cut_at(pg, args, &format!("{i}:{}", phase.as_str())).await;
            kills += 1;
        }
    }
    assert_eq!(kills, steps * KillPhase::ALL.len());
    let last = run(pg, resume).await;
    assert_eq!(last.code, 0, "the final run completes: {}\n{}", last.stdout, last.stderr);
    let evs = events(&last.stdout);
    assert!(evs.iter().any(|e| e["event"] == "finished"), "{}", last.stdout);
    assert!(!evs.iter().any(|e| e["event"] == "stepStarted"), "every step was done in an earlier run: {}", last.stdout);
    last.stdout
}

/// Plan step names of a runbook.
async fn plan_steps(pg: &landscape::Playground, args: &[&str]) -> Vec<String> {
    let plan = run(pg, args).await;
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    events(&plan.stdout).iter().find(|e| e["event"] == "plan").expect("plan event")["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_renewal_killed_at_every_step_and_phase_resumes_until_every_member_serves_a_new_serial() {
    let Some(_) = require_etcd("cert renewal kill matrix") else { return };
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = pg.namespaces()[0].clone();
    let client = pg.client();
    let serial_in_secret = || async {
        let s = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns)
            .get("etcd-server")
            .await
            .unwrap();
        serial_of_pem(&String::from_utf8_lossy(&s.data.unwrap()["tls.crt"].0)).unwrap()
    };
    let served = || async {
        let etcd = kube::Api::<Etcd>::namespaced(client.clone(), &ns).get("etcd-main").await.unwrap();
        let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &ns);
        let mut out = Vec::new();
        for i in 0..3 {
            let pod = pods.get(&format!("etcd-main-{i}")).await.unwrap();
            let url = member_client_tls_url(&pod, &etcd).unwrap();
            out.push(served_serial(&url, Duration::from_secs(3)).await.unwrap());
        }
        out
    };
    let before = serial_in_secret().await;
    assert_eq!(served().await, vec![before.clone(); 3]);

    // Quorum is watched during the whole matrix.
    let seen: Arc<Mutex<Vec<(String, i64)>>> = Arc::default();
    let watch = {
        let (seen, api) = (seen.clone(), kube::Api::<Etcd>::namespaced(client.clone(), &ns));
        tokio::spawn(async move {
            loop {
                if let Ok(e) = api.get("etcd-main").await {
                    let st = serde_json::to_value(e.status).unwrap_or_default();
                    let reason = st["conditions"]
                        .as_array()
                        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                        .and_then(|c| c["reason"].as_str())
                        .unwrap_or_default()
                        .to_string();
                    seen.lock().unwrap().push((reason, st["readyReplicas"].as_i64().unwrap_or(-1)));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let base = ["runbook", "cert-renewal", "-n", ns.as_str(), "etcd-main", "--yes", "-o", "jsonl"];
    let mut plan_args = base[..5].to_vec();
    plan_args.extend(["--plan", "-o", "jsonl"]);
    let steps = plan_steps(&pg, &plan_args).await;
    assert_eq!(steps.len(), 5, "{steps:?}");
    let mut resume = base.to_vec();
    resume.push("--resume");
    let last = kill_everywhere(&pg, &base, &resume, steps.len()).await;
    watch.abort();

    let after = serial_in_secret().await;
    assert_ne!(after, before, "a new certificate was issued");
    assert_eq!(served().await, vec![after.clone(); 3], "every member serves the new serial: {last}");
    let revisions: Vec<Option<i64>> = {
        let certs = kube::Api::<druidctl::api::Certificate>::namespaced(client.clone(), &ns);
        let mut v = Vec::new();
        for name in ["etcd-server", "etcd-client", "etcd-peer-server"] {
            v.push(certs.get(name).await.unwrap().status.and_then(|s| s.revision));
        }
        v
    };
    assert!(revisions.iter().all(|r| *r == Some(2)), "each certificate renewed exactly once: {revisions:?}");
    let seen = seen.lock().unwrap().clone();
    assert!(seen.len() > 20, "{seen:?}");
    assert!(seen.iter().all(|(reason, ready)| reason == "Quorate" && *ready >= 2), "quorum was kept: {seen:?}");
    pg.down().await;
    eprintln!("cert-renewal kill matrix took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_replacement_killed_at_every_step_and_phase_resumes_until_the_replacement_node_and_members_are_ready() {
    let Some(_) = require_etcd("machine replacement kill matrix") else { return };
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = pg.namespaces()[0].clone();
    let client = pg.client();
    let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &ns);
    let node = pods.get("etcd-main-0").await.unwrap().spec.unwrap().node_name.unwrap();
    let machines = kube::Api::<Machine>::namespaced(client.clone(), &ns);
    let machine = machines
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|m| m.node_name() == Some(node.as_str()))
        .and_then(|m| m.metadata.name)
        .expect("the machine behind etcd-main-0's node");
    let etcd = format!("{ns}/etcd-main");
    let base = [
        "runbook",
        "machine-replacement",
        "-n",
        ns.as_str(),
        machine.as_str(),
        "--force",
        "--etcd",
        etcd.as_str(),
        "--yes",
        "-o",
        "jsonl",
    ];
    let mut plan_args = base[..8].to_vec();
    plan_args.extend(["--plan", "-o", "jsonl"]);
    let steps = plan_steps(&pg, &plan_args).await;
    assert_eq!(steps, ["RequestMachineDeletion", "WaitForReplacementNode", "WaitForMembersReady"]);
    let mut resume = base.to_vec();
    resume.push("--resume");
    kill_everywhere(&pg, &base, &resume, steps.len()).await;

    assert!(machines.get_opt(&machine).await.unwrap().is_none(), "the machine is gone");
    let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert!(!nodes.iter().any(|n| n.metadata.name.as_deref() == Some(node.as_str())), "the old node is gone");
    let live = machines.list(&Default::default()).await.unwrap().items;
    assert_eq!(live.len(), 3, "the MachineSet is back to three machines");
    let member = pods.get("etcd-main-0").await.unwrap();
    let new_node = member.spec.and_then(|s| s.node_name).unwrap();
    assert_ne!(new_node, node, "etcd-main-0 runs on another node");
    assert!(
        nodes.iter().any(|n| n.metadata.name.as_deref() == Some(new_node.as_str()) && druidctl::machines::delete::node_ready(n)),
        "its node is Ready"
    );
    pg.wait_ready(Duration::from_secs(30)).await.expect("every member ready");
    let tasks = kube::Api::<druidctl::api::EtcdOperatorTask>::namespaced(client.clone(), &ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(tasks.len(), 1, "one task journals all the cut runs");
    pg.down().await;
    eprintln!("machine-replacement kill matrix took {:?}", started.elapsed());
}

/// `args` as owned strings.
fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Runs druidctl on a terminal (see [`run_on_terminal`]) answering `answer` to the plan's confirmation.
async fn answer_on_terminal(pg: &landscape::Playground, args: &[&str], answer: &str) -> (i32, String, String) {
    let (kc, args, answer) = (pg.kubeconfig_path().to_path_buf(), owned(args), answer.to_string());
    let env = vec![("DRUIDCTL_RUNBOOK_LEASE".to_string(), "1s".to_string())];
    tokio::task::spawn_blocking(move || run_on_terminal(&kc, &args, &env, &answer)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_refused_at_the_confirmation_of_every_resume_point_changes_nothing_and_names_both_ways_out() {
    let Some(_) = require_etcd("runbook refusal matrix") else { return };
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = lose_quorum_after_snapshot(&pg, 5, 2).await;
    let plain = ["runbook", "quorum-loss-recovery", "-n", ns.as_str(), "etcd-main"];
    let mut yes = plain.to_vec();
    yes.extend(["--yes", "-o", "jsonl"]);
    let mut resume = yes.clone();
    resume.push("--resume");
    let mut plan_args = plain.to_vec();
    plan_args.extend(["--plan", "-o", "jsonl"]);
    let steps = plan_steps(&pg, &plan_args).await;
    let abort = format!("-n {ns} etcd-main");

    // The first prompt comes before the first write: refusing it leaves no trace at all.
    let before = cluster_facts(&pg, &ns).await;
    let (code, stdout, terminal) = answer_on_terminal(&pg, &plain, "no").await;
    let line = error_line(&terminal);
    assert_eq!(code, 3, "{stdout}{terminal}");
    assert!(line.contains("not confirmed; nothing was changed"), "{line}");
    assert!(stdout.contains("DESTRUCTIVE"), "the whole plan was shown before the question: {stdout}");
    assert_eq!(cluster_facts(&pg, &ns).await, before, "the refused run changed nothing");
    assert!(task_names(&pg, &ns).await.is_empty(), "no task was created");

    // After every completed step, the confirmation of the rest is refused: nothing more changes, and the
    // message names what changed so far and both ways out.
    for k in 1..steps.len() {
        cut_at(&pg, if k == 1 { &yes } else { &resume }, &format!("{k}:after-journal")).await;
        let before = cluster_facts(&pg, &ns).await;
        let (code, stdout, terminal) = answer_on_terminal(&pg, &plain, "etcd-wrong").await;
        eprintln!("refused after step {k} at {:?}", started.elapsed());
        let line = error_line(&terminal);
        assert_eq!(code, 3, "after step {k}: {stdout}{terminal}");
        assert!(line.contains("not confirmed; changed so far"), "after step {k}: {line}");
        for s in &steps[..k] {
            assert!(line.contains(s.as_str()), "after step {k}, {s} is named: {line}");
        }
        assert!(
            line.contains("--resume`") && line.contains("runbook abort") && line.contains(&abort),
            "after step {k}: {line}"
        );
        assert!(stdout.contains("continuing task"), "{stdout}");
        assert_eq!(cluster_facts(&pg, &ns).await, before, "after step {k}: the refused run changed nothing");
    }
    // One documented command resolves it: `--resume` finishes the run; its task keeps no finalizer.
    let last = run(&pg, &resume).await;
    assert_eq!(last.code, 0, "{}\n{}", last.stdout, last.stderr);
    let tasks = kube::Api::<druidctl::api::EtcdOperatorTask>::namespaced(pg.client(), &ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(tasks.len(), 1);
    assert!(
        !tasks[0].metadata.finalizers.clone().unwrap_or_default().iter().any(|f| f.contains("runbook")),
        "{:?}",
        tasks[0].metadata.finalizers
    );
    pg.down().await;
    eprintln!("refusal matrix took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_renewal_task_deleted_at_every_step_is_kept_by_its_finalizer_until_runbook_abort_cleans_up() {
    let Some(_) = require_etcd("runbook deletion matrix") else { return };
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = pg.namespaces()[0].clone();
    let base = ["runbook", "cert-renewal", "-n", ns.as_str(), "etcd-main", "--yes", "-o", "jsonl"];
    let mut resume = base.to_vec();
    resume.push("--resume");
    let mut plan_args = base[..5].to_vec();
    plan_args.extend(["--plan", "-o", "jsonl"]);
    let steps = plan_steps(&pg, &plan_args).await;
    let abort = ["runbook", "abort", "-n", ns.as_str(), "etcd-main"];
    for k in 1..=steps.len() {
        // A run dies after step k; its task is deleted (kubectl delete etcdoperatortask …).
        cut_at(&pg, &base, &format!("{k}:after-journal")).await;
        let names = task_names(&pg, &ns).await;
        assert_eq!(names.len(), 1, "{names:?}");
        delete_task(&pg, &ns, &names[0]).await;
        assert_eq!(task_state(&pg, &ns, &names[0]).await, Some(true), "step {k}: kept by its finalizer");
        // Neither a new run nor --resume acts on it; both name the command that does.
        for args in [&base[..], &resume[..]] {
            let r = run(&pg, args).await;
            let line = one_sentence(&r.stderr);
            assert_eq!(r.code, 3, "step {k}: {line}");
            assert!(line.contains("being deleted") && line.contains("runbook abort"), "step {k}: {line}");
            assert!(line.contains(&format!("-n {ns} etcd-main`")), "step {k}: {line}");
        }
        // The one documented command: cleanup, then the task goes.
        let r = run(&pg, &abort).await;
        assert_eq!(r.code, 0, "step {k}: {}", r.stderr);
        assert!(r.stdout.contains("aborted and deleted"), "{}", r.stdout);
        assert_eq!(task_state(&pg, &ns, &names[0]).await, None, "step {k}: the task is gone");
        let e = kube::Api::<Etcd>::namespaced(pg.client(), &ns).get("etcd-main").await.unwrap();
        assert!(!druidctl::kube::annotate::spec_reconcile_suspended(&e), "step {k}");
        assert!(!druidctl::kube::annotate::component_protection_disabled(&e), "step {k}");
        // Nothing left to abort: said, not silently done.
        let again = run(&pg, &abort).await;
        assert_eq!(again.code, 3, "{}", again.stderr);
        assert!(one_sentence(&again.stderr).contains("nothing to abort"));
    }
    pg.down().await;
    eprintln!("deletion matrix took {:?}", started.elapsed());
}
