//! The task commands, driving the real binary against the embedded API server over HTTP: precondition
//! refusals, the missing-executor message, `--local` execution and the exit codes of `--wait`.

use crate::tasks_support;

use std::process::{Command, Output};

use druidctl::api::{EtcdOperatorTask, TaskState};
use kube::api::{Api, ListParams};
use kube_sim::{ApiServer, HttpEndpoint};
use tasks_support::{NS, Served, Sidecar, lose_quorum};

struct Cli {
    server: ApiServer,
    _endpoint: HttpEndpoint,
    dir: tempfile::TempDir,
}

impl Cli {
    async fn start() -> (Cli, Sidecar) {
        let Served { server, endpoint, dir, sidecar } = Served::start().await;
        (Cli { server, _endpoint: endpoint, dir }, sidecar)
    }

    async fn run(&self, args: &[&str]) -> Output {
        let (args, dir): (Vec<String>, _) =
            (args.iter().map(|s| s.to_string()).collect(), self.dir.path().to_path_buf());
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_druidctl"))
                .args(&args)
                .env("KUBECONFIG", dir.join("config"))
                .env("HOME", &dir)
                .env_remove("NO_COLOR")
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    }

    /// Runs the binary with stdin, stdout and stderr on a pseudo-terminal (util-linux `script`): its exit code and
    /// what the terminal showed.
    async fn run_on_terminal(&self, args: &[&str]) -> (Option<i32>, String) {
        let line = std::iter::once(env!("CARGO_BIN_EXE_druidctl"))
            .chain(args.iter().copied())
            .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
            .collect::<Vec<_>>()
            .join(" ");
        let dir = self.dir.path().to_path_buf();
        let out = tokio::task::spawn_blocking(move || {
            Command::new("script")
                .args(["-qfec", &line, "/dev/null"])
                .env("KUBECONFIG", dir.join("config"))
                .env("HOME", &dir)
                .env("NO_COLOR", "1")
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    }

    async fn tasks(&self) -> Vec<EtcdOperatorTask> {
        Api::<EtcdOperatorTask>::namespaced(self.server.client(), NS).list(&ListParams::default()).await.unwrap().items
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[tokio::test]
async fn a_local_snapshot_succeeds_and_streams_its_transitions_as_jsonl() {
    let (cli, sidecar) = Cli::start().await;
    let out = cli.run(&["snapshot", "full", "etcd-main", "--local", "-o", "jsonl"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON document per line"))
        .collect();
    assert_eq!(lines.last().unwrap()["state"], "Succeeded", "{lines:?}");
    assert!(lines.iter().any(|l| l["step"] == "TriggerFullSnapshot"), "{lines:?}");
    assert_eq!(sidecar.calls(), ["/snapshot/full"]);
    let tasks = cli.tasks().await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].state(), TaskState::Succeeded);

    let list = cli.run(&["task", "list", "--color", "never"]).await;
    assert_eq!(list.status.code(), Some(0));
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.starts_with("NAMESPACE") && text.contains("OnDemandSnapshotTask") && text.contains("Succeeded"),
        "{text}"
    );
}

#[tokio::test]
async fn waiting_without_an_executor_is_refused_and_creates_nothing() {
    let (cli, sidecar) = Cli::start().await;
    let out = cli.run(&["snapshot", "full", "etcd-main", "--wait", "--engine", "druidctl"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("no executor is running") && stderr(&out).contains("--local"), "{}", stderr(&out));
    assert!(cli.tasks().await.is_empty());
    // Without --wait the task is created and stays Pending; the CLI says why.
    let out = cli.run(&["snapshot", "delta", "etcd-main", "--no-wait", "--engine", "druidctl"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("stays Pending"), "{}", stderr(&out));
    assert_eq!(cli.tasks().await.len(), 1);
    assert!(sidecar.calls().is_empty());
}

#[tokio::test]
async fn a_shortcut_waits_by_default_at_a_terminal_and_in_a_script_alike() {
    let (cli, sidecar) = Cli::start().await;
    let snapshot = ["snapshot", "full", "etcd-main", "--engine", "druidctl"];
    // Waiting needs an executor and none runs: refused with exit 3 and nothing created, in a script…
    let out = cli.run(&snapshot).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("no executor is running"), "{}", stderr(&out));
    assert!(cli.tasks().await.is_empty());
    // …and at a terminal.
    let (code, shown) = cli.run_on_terminal(&snapshot).await;
    assert!(shown.contains("no executor is running"), "{shown}");
    assert_eq!(code, Some(3), "{shown}");
    assert!(cli.tasks().await.is_empty());
    // --no-wait returns once the task is created, in both.
    let out = cli.run(&["compact", "etcd-main", "--no-wait", "--force"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("created"), "{}", stderr(&out));
    let (code, shown) =
        cli.run_on_terminal(&["maintenance", "etcd-main", "--compaction", "--no-wait", "--force"]).await;
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains("created") && shown.contains("stays Pending"), "{shown}");
    let tasks = cli.tasks().await;
    assert_eq!(tasks.len(), 2);
    assert!(tasks.iter().all(|t| t.state() == TaskState::Pending), "nothing executes them");
    assert!(sidecar.calls().is_empty());
}

#[tokio::test]
async fn failed_preconditions_refuse_before_creating_unless_forced_and_then_the_task_is_rejected() {
    let (cli, sidecar) = Cli::start().await;
    lose_quorum(&cli.server.client()).await;
    let out = cli.run(&["snapshot", "full", "etcd-main", "--local"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("refused: the etcd cluster has no quorum (1 of 3 members ready, 2 needed)"),
        "{}",
        stderr(&out)
    );
    assert!(cli.tasks().await.is_empty(), "nothing created");

    let out = cli.run(&["snapshot", "full", "etcd-main", "--local", "--force"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("was rejected: the etcd cluster has no quorum"), "{}", stderr(&out));
    let tasks = cli.tasks().await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].state(), TaskState::Rejected);
    assert!(sidecar.calls().is_empty());
}

#[tokio::test]
async fn bad_config_is_a_usage_error_and_a_timeout_has_its_own_exit_code() {
    let (cli, _sidecar) = Cli::start().await;
    let cfg = cli.dir.path().join("maint.yaml");
    std::fs::write(&cfg, "maintenanceType:\n  etcdDefragmentation: sure\n").unwrap();
    let out = cli
        .run(&["task", "create", "OnDemandMaintenanceTask", "--etcd", "etcd-main", "--config", cfg.to_str().unwrap()])
        .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("config.maintenanceType.etcdDefragmentation: expected a boolean"),
        "{}",
        stderr(&out)
    );
    assert!(cli.tasks().await.is_empty());

    // Nobody runs the compaction Job here: the wait runs out (exit 7) and the task keeps going.
    let out = cli.run(&["compact", "etcd-main", "--local", "--timeout", "2s"]).await;
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(stderr(&out).contains("still InProgress at WaitForCompactionJob"), "{}", stderr(&out));
}

/// A `druidctl serve` child process, killed on drop.
struct Serve(std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await.ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, buf))
}

#[tokio::test]
async fn serve_executes_tasks_exposes_metrics_and_shuts_down_gracefully_on_sigterm() {
    let (cli, sidecar) = Cli::start().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let child = Command::new(env!("CARGO_BIN_EXE_druidctl"))
        .args(["serve", "-n", NS, "--metrics-addr", &addr, "--log-format", "json", "--lease-duration", "3s"])
        .env("KUBECONFIG", cli.dir.path().join("config"))
        .env("HOME", cli.dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut serve = Serve(child);
    let mut ready = false;
    for _ in 0..100 {
        if let Some((200, _)) = http_get(&addr, "/readyz").await {
            ready = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(ready, "serve became ready");
    assert_eq!(http_get(&addr, "/healthz").await.map(|r| r.0), Some(200));

    let out = cli.run(&["snapshot", "full", "etcd-main", "--wait", "--timeout", "30s", "--engine", "druidctl"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(sidecar.calls(), ["/snapshot/full"]);
    let (_, metrics) = http_get(&addr, "/metrics").await.unwrap();
    let total = druidctl::reconciler::metrics::sample_sum(
        metrics.split("\r\n\r\n").nth(1).unwrap_or(""),
        "etcddruid_operator_tasks_total",
        &[("type", "OnDemandSnapshotTask"), ("state", "succeeded"), ("etcd", "etcd-main"), ("etcd_namespace", NS)],
    );
    assert_eq!(total, 1.0, "{metrics}");

    // SIGTERM: exits 0 and gives the leader lease back.
    unsafe { libc::kill(serve.0.id() as i32, libc::SIGTERM) };
    let mut code = None;
    for _ in 0..100 {
        if let Some(st) = serve.0.try_wait().unwrap() {
            code = st.code();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(code, Some(0), "graceful exit");
    let mut logs = String::new();
    std::io::Read::read_to_string(serve.0.stderr.as_mut().unwrap(), &mut logs).unwrap();
    let first: serde_json::Value = serde_json::from_str(logs.lines().next().unwrap()).expect("JSON logs");
    assert!(first.get("level").is_some(), "{first}");
    let lease = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(cli.server.client(), NS)
        .get("druidctl-serve")
        .await
        .unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity, None, "leader lease released");
}

#[tokio::test]
async fn a_pending_task_without_executor_blocking_local_tasks_is_named_and_task_delete_clears_it() {
    let (cli, sidecar) = Cli::start().await;
    // An EtcdOperatorTask (this cluster also serves EtcdOpsTask, which `auto` would pick).
    let out = cli.run(&["snapshot", "delta", "etcd-main", "--no-wait", "--engine", "druidctl"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let pending = cli.tasks().await[0].metadata.name.clone().unwrap();
    // A later --local task of the same Etcd would wait behind it forever: refused, named, nothing created.
    let out = cli.run(&["snapshot", "full", "etcd-main", "--local"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("task {pending} (OnDemandSnapshotTask, Pending")), "{err}");
    assert!(err.contains(&format!("task delete -n {NS} {pending}")), "{err}");
    assert_eq!(cli.tasks().await.len(), 1, "nothing created");
    // The advised command works without an executor: the deletion completes.
    let out = cli.run(&["task", "delete", &pending]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(cli.tasks().await.is_empty(), "the task is gone");
    let out = cli.run(&["snapshot", "full", "etcd-main", "--local"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(sidecar.calls(), ["/snapshot/full"]);
}

#[tokio::test]
async fn task_watch_all_namespaces_streams_tasks_of_every_namespace() {
    use std::io::{BufRead, BufReader};
    let (cli, _sidecar) = Cli::start().await;
    // An EtcdOperatorTask (this cluster also serves EtcdOpsTask, which `auto` would pick).
    let out = cli.run(&["snapshot", "delta", "etcd-main", "--no-wait", "--engine", "druidctl"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let name = cli.tasks().await[0].metadata.name.clone().unwrap();
    let dir = cli.dir.path().to_path_buf();
    // With -A every namespace is watched; each line names the task as NAMESPACE/NAME.
    let line = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_druidctl"))
            .args(["task", "watch", "-A", "--color", "never"])
            .env("KUBECONFIG", dir.join("config"))
            .env("HOME", &dir)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        first
    })
    .await
    .unwrap();
    assert!(line.contains(&format!("{NS}/{name} Pending")), "{line}");
}

/// A runbook task as the runbook engine leaves it after a paused quorum-loss recovery: in progress at its
/// fourth step, three steps journaled as completed and the last-known-good ConfigMap recorded.
async fn paused_recovery_task(server: &ApiServer) -> String {
    use kube::api::{Patch, PatchParams, PostParams};
    let api: Api<EtcdOperatorTask> = Api::namespaced(server.client(), NS);
    let step = |at: &str, ms: u64| serde_json::json!({"completedAt": at, "durationMs": ms, "waitedMs": 0, "how": "done", "warnings": []});
    let journal = serde_json::json!({
        "step/SuspendDruid": step("2026-11-25T22:00:01Z", 120),
        "step/RecordConfigMap": step("2026-11-25T22:00:02Z", 80),
        "step/ScaleStatefulSetTo0": {"completedAt": "2026-11-25T22:00:09Z", "durationMs": 7400, "waitedMs": 7100, "how": "done", "warnings": []},
        "lastKnownGood/EditInitialCluster": {"kind": "ConfigMap", "name": "etcd-bootstrap-4711", "data": {"etcd.conf.yaml": "x".repeat(500)}},
    });
    let task: EtcdOperatorTask = serde_json::from_value(serde_json::json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "EtcdOperatorTask",
        "metadata": {"name": "etcd-main-quorum-loss", "namespace": NS,
                     "annotations": {druidctl::tasks::step::JOURNAL_ANNOTATION: journal.to_string()}},
        "spec": {"type": druidctl::api::task::types::QUORUM_LOSS_RECOVERY, "ownerEtcdRefrence": {"name": "etcd-main", "namespace": NS}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &task).await.unwrap();
    let status = serde_json::json!({"status": {"state": "InProgress", "initiatedAt": "2026-11-25T22:00:00Z",
        "lastOperation": {"name": "DeletePersistentVolumeClaims", "state": "InProgress", "lastTransitionTime": "2026-11-25T22:00:09Z",
                          "reason": "delete the PVCs of every member"}}});
    api.patch_status("etcd-main-quorum-loss", &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    "etcd-main-quorum-loss".into()
}

#[tokio::test]
async fn task_describe_and_get_show_a_runbook_task_with_its_config_steps_and_journal() {
    let (cli, _sidecar) = Cli::start().await;
    let name = paused_recovery_task(&cli.server).await;

    let out = cli.run(&["task", "describe", &name]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!text.contains("invalid") && !text.contains("unknown task type"), "{text}");
    for want in [
        "Type:         QuorumLossRecoveryTask",
        "Runbook:      quorum-loss-recovery",
        "continue with `druidctl runbook quorum-loss-recovery -n shoot etcd-main --resume`, or undo with `druidctl runbook abort -n shoot etcd-main`",
        "Config:       (none)",
        "State:        InProgress",
        "Step:         DeletePersistentVolumeClaims (InProgress)",
        // The plan's steps, with what the journal and status say about each.
        "1. SuspendDruid [completed]:",
        "3. ScaleStatefulSetTo0 [completed]:",
        "4. DeletePersistentVolumeClaims (destructive) [InProgress]:",
        "Journal:",
        "  ScaleStatefulSetTo0  completed 2026-11-25T22:00:09Z in 7.4s (waited 7.1s): done",
        "  lastKnownGood/EditInitialCluster  {\"data\":",
        "bytes; -o yaml shows all)",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    // The journal lists the steps in the order they completed.
    let at = |what: &str| text.find(what).unwrap_or_else(|| panic!("{what:?} in:\n{text}"));
    assert!(at("  SuspendDruid  completed") < at("  RecordConfigMap  completed"), "{text}");
    assert!(at("  RecordConfigMap  completed") < at("  ScaleStatefulSetTo0  completed"), "{text}");
    let not_started = text.lines().find(|l| l.contains("5. DeleteMemberLeases")).expect("fifth step listed");
    assert!(!not_started.contains('['), "an unstarted step has no mark: {not_started}");
    assert!(text.lines().all(|l| l.chars().count() < 400), "long journal values are shortened:\n{text}");

    let get = cli.run(&["task", "get", &name, "--color", "never"]).await;
    assert_eq!(get.status.code(), Some(0), "{}", stderr(&get));
    let text = String::from_utf8_lossy(&get.stdout);
    assert!(
        text.contains("QuorumLossRecoveryTask")
            && text.contains("InProgress")
            && text.contains("DeletePersistentVolumeClaims"),
        "{text}"
    );

    let yaml = cli.run(&["task", "describe", &name, "-o", "yaml"]).await;
    assert_eq!(yaml.status.code(), Some(0), "{}", stderr(&yaml));
    assert!(String::from_utf8_lossy(&yaml.stdout).contains(&"x".repeat(500)), "-o yaml shows the whole journal");
}

#[tokio::test]
async fn task_list_with_nothing_found_says_where_it_looked() {
    let (cli, _sidecar) = Cli::start().await;
    for (args, said) in [
        (&["task", "list", "-n", "foo"][..], "No tasks found in namespace foo.\n"),
        (&["task", "list", "--etcd", "etcd-none"][..], "No tasks found in namespace shoot for etcd etcd-none.\n"),
        (&["task", "list", "-A", "-l", "a=b"][..], "No tasks found in any namespace with labels matching a=b.\n"),
    ] {
        let out = cli.run(args).await;
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout), said, "{args:?}");
    }
}
