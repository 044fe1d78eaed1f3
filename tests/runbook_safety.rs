//! One runbook per Etcd, with real processes against a real-etcd playground: a second run (another terminal)
//! is refused naming the holder and since when; `runbook abort` is refused while an executor runs; deleting
//! the task of a running run makes that run finish its step and clean up (etcd-druid reconciles again,
//! protection back on); Ctrl-C at every step stops at a safe point and prints the resume command once on stderr.
//! Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`, which fails instead).

use crate::runbook_support;

use std::time::Duration;

use druidctl::api::Etcd;
use landscape::etcd::require_etcd;
use runbook_support::*;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Reads JSON-line events from `lines` until one satisfies `until`; returns every line read.
async fn read_until(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    mut until: impl FnMut(&serde_json::Value) -> bool,
) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no matching event in time: {seen:?}"))
            .unwrap();
        let Some(line) = line else { panic!("the run ended before the event: {seen:?}") };
        let hit = serde_json::from_str::<serde_json::Value>(&line).map(|v| until(&v)).unwrap_or(false);
        seen.push(line);
        if hit {
            return seen;
        }
    }
}

fn signal(child: &tokio::process::Child, sig: i32) {
    let pid = child.id().expect("running") as i32;
    // SAFETY: kill(2) on a child we spawned.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_is_refused_and_deleting_the_running_task_makes_the_run_finish_its_step_and_clean_up() {
    let Some(_) = require_etcd("runbook concurrency") else { return };
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = lose_quorum_after_snapshot(&pg, 5, 2).await;
    let args = ["runbook", "quorum-loss-recovery", "-n", ns.as_str(), "etcd-main", "--yes", "-o", "jsonl"];

    // The first run, in its own process; paused (SIGSTOP) once it has completed two steps.
    let mut first = druidctl(&pg, &args).env("DRUIDCTL_RUNBOOK_LEASE", "60s").spawn().unwrap();
    let mut lines = BufReader::new(first.stdout.take().unwrap()).lines();
    let mut finished = 0;
    read_until(&mut lines, |e| {
        if e["event"] == "stepFinished" {
            finished += 1;
        }
        finished == 2
    })
    .await;
    signal(&first, libc::SIGSTOP);
    let task = task_names(&pg, &ns).await.pop().expect("the first run's task");

    // A second run, as from another terminal: refused at once, holder and since named, nothing changed.
    let before = cluster_facts(&pg, &ns).await;
    let second = run(&pg, &args).await;
    let line = one_sentence(&second.stderr);
    assert_eq!(second.code, 3, "{line}");
    assert!(line.contains(&format!("task {task} is being executed by druidctl-runbook@")), "{line}");
    assert!(line.contains(&format!("/{}", first.id().unwrap())) && line.contains(" since "), "{line}");
    assert!(line.contains("nothing was changed"), "{line}");
    let resume = {
        let mut a = args.to_vec();
        a.push("--resume");
        run(&pg, &a).await
    };
    assert_eq!(resume.code, 3, "--resume does not take over a live lease: {}", resume.stderr);
    let abort = run(&pg, &["runbook", "abort", "-n", ns.as_str(), "etcd-main"]).await;
    assert_eq!(abort.code, 3, "{}", abort.stderr);
    assert!(one_sentence(&abort.stderr).contains("is being executed by"), "{}", abort.stderr);
    assert_eq!(cluster_facts(&pg, &ns).await, before, "the refused runs changed nothing");

    // Deleting the running task: its run finishes the current step, cleans up and lets the task go.
    delete_task(&pg, &ns, &task).await;
    assert_eq!(task_state(&pg, &ns, &task).await, Some(true), "kept by its finalizer while the run cleans up");
    signal(&first, libc::SIGCONT);
    let mut rest = Vec::new();
    while let Ok(Some(l)) = lines.next_line().await {
        rest.push(l);
    }
    let out = first.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let line = one_sentence(&stderr);
    assert_eq!(out.status.code(), Some(1), "{line}\n{rest:?}");
    assert!(line.contains(&format!("task {task} was deleted during the run")), "{line}");
    assert!(line.contains("etcd-druid reconciles the spec again"), "{line}");
    assert!(line.contains("component protection is enabled again"), "{line}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while task_state(&pg, &ns, &task).await.is_some() {
        assert!(std::time::Instant::now() < deadline, "the task is gone after the cleanup");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let e = kube::Api::<Etcd>::namespaced(pg.client(), &ns).get("etcd-main").await.unwrap();
    assert!(!druidctl::kube::annotate::spec_reconcile_suspended(&e));
    assert!(!druidctl::kube::annotate::component_protection_disabled(&e));
    pg.down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_at_every_step_stops_at_a_safe_point_and_prints_the_resume_command_once_on_stderr() {
    let Some(_) = require_etcd("runbook Ctrl-C") else { return };
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = lose_quorum_after_snapshot(&pg, 5, 2).await;
    let args = ["runbook", "quorum-loss-recovery", "-n", ns.as_str(), "etcd-main", "--yes", "-o", "jsonl"];
    let mut resume = args.to_vec();
    resume.push("--resume");
    let mut interrupted = 0;
    for round in 0..40 {
        let mut child = druidctl(&pg, if round == 0 { &args } else { &resume }).spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // Ctrl-C when the second step of this run starts: every run makes progress, every step is hit.
        let mut started = None;
        let mut seen_steps = 0;
        let mut done = false;
        while let Ok(Some(l)) = lines.next_line().await {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&l) else { continue };
            if v["event"] == "stepStarted" {
                seen_steps += 1;
                if seen_steps == 2 && started.is_none() {
                    started = v["name"].as_str().map(String::from);
                    signal(&child, libc::SIGINT);
                }
            }
            if v["event"] == "finished" {
                done = true;
            }
        }
        let out = child.wait_with_output().await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        if done && out.status.success() {
            break;
        }
        assert_eq!(out.status.code(), Some(130), "round {round} ({started:?}): {stderr}");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "the hint once: {stderr:?}");
        assert!(lines[0].starts_with("stopped at a safe point; continue with: "), "{stderr:?}");
        assert!(lines[0].contains(&format!("-n {ns} etcd-main --resume --yes")), "{stderr:?}");
        assert!(!stderr.contains("error"), "{stderr:?}");
        interrupted += 1;
    }
    assert!(interrupted >= 3, "interrupted {interrupted} times");
    let e = kube::Api::<Etcd>::namespaced(pg.client(), &ns).get("etcd-main").await.unwrap();
    assert!(!druidctl::kube::annotate::spec_reconcile_suspended(&e), "the completed run resumed reconciliation");
    pg.down().await;
}
