//! `--local` tasks whose executor went away, with real processes against the embedded API server over HTTP: a
//! `--local` run that timed out, or that was SIGKILLed mid-step, leaves its task InProgress with nobody
//! executing it. The next `--local` run on the same Etcd takes it over and finishes it before its own task, and
//! `task delete` on it completes (the finalizer runs, the task and what it created are gone).

use crate::tasks_support;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use druidctl::api::{EtcdOperatorTask, TaskState};
use druidctl::reconciler::executor_lease_name;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube_sim::{ApiServer, HttpEndpoint};
use serde_json::json;
use tasks_support::{NS, Served, Sidecar};

struct Cli {
    server: ApiServer,
    _endpoint: HttpEndpoint,
    dir: tempfile::TempDir,
    sidecar: Sidecar,
}

/// A child druidctl, SIGKILLed and reaped on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Cli {
    async fn start() -> Cli {
        let Served { server, endpoint, dir, sidecar } = Served::start().await;
        Cli { server, _endpoint: endpoint, dir, sidecar }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_druidctl"));
        cmd.args(args).env("KUBECONFIG", self.dir.path().join("config")).env("HOME", self.dir.path());
        cmd.env_remove("NO_COLOR").env_remove("HOSTNAME").stdin(Stdio::null());
        cmd
    }

    async fn run(&self, args: &[&str]) -> Output {
        let mut cmd = self.command(args);
        tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap()
    }

    fn spawn(&self, args: &[&str]) -> Proc {
        Proc(self.command(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap())
    }

    async fn tasks(&self) -> Vec<EtcdOperatorTask> {
        let mut items = Api::<EtcdOperatorTask>::namespaced(self.server.client(), NS)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        items.sort_by_key(|t| t.metadata.creation_timestamp.clone().map(|c| c.0));
        items
    }

    async fn jobs(&self) -> Vec<Job> {
        Api::<Job>::namespaced(self.server.client(), NS).list(&ListParams::default()).await.unwrap().items
    }

    /// Waits until the only task is InProgress at its compaction Job's step; returns its name.
    async fn compaction_waiting_for_its_job(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let tasks = self.tasks().await;
            if let [t] = tasks.as_slice()
                && t.state() == TaskState::InProgress
                && t.status
                    .as_ref()
                    .and_then(|s| s.last_operation.as_ref())
                    .is_some_and(|o| o.name == "WaitForCompactionJob")
            {
                return t.metadata.name.clone().unwrap();
            }
            assert!(Instant::now() < deadline, "no compaction waiting for its Job: {tasks:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The compaction Job (nobody runs it here) completes.
    async fn complete_the_job(&self) {
        let jobs = self.jobs().await;
        assert_eq!(jobs.len(), 1, "{jobs:?}");
        let name = jobs[0].metadata.name.clone().unwrap();
        Api::<Job>::namespaced(self.server.client(), NS)
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({"status": {"succeeded": 1}})))
            .await
            .unwrap();
    }

    async fn executor_of(&self, task: &str) -> Option<String> {
        let lease =
            Api::<Lease>::namespaced(self.server.client(), NS).get_opt(&executor_lease_name(task)).await.unwrap();
        lease.and_then(|l| l.spec).and_then(|s| s.holder_identity)
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// A `compact --local` SIGKILLed while its task waits for the compaction Job: the task stays InProgress and
/// its executor Lease is still held by the dead process.
async fn killed_local_compaction(cli: &Cli) -> String {
    let mut local = cli.spawn(&["compact", "etcd-main", "--local", "--timeout", "5m"]);
    let task = cli.compaction_waiting_for_its_job().await;
    let pid = local.0.id() as i32;
    unsafe { libc::kill(pid, libc::SIGKILL) };
    local.0.wait().unwrap();
    assert!(cli.executor_of(&task).await.is_some_and(|h| h.ends_with(&pid.to_string())), "the dead holds the lease");
    assert_eq!(cli.tasks().await[0].state(), TaskState::InProgress);
    task
}

#[tokio::test]
async fn a_local_task_that_timed_out_is_taken_over_by_the_next_local_run_on_the_etcd() {
    let cli = Cli::start().await;
    // Nobody runs the compaction Job here: the wait runs out (exit 7), the task stays InProgress.
    let out = cli.run(&["compact", "etcd-main", "--local", "--timeout", "2s"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(7), "{err}");
    let tasks = cli.tasks().await;
    let compaction = tasks[0].metadata.name.clone().unwrap();
    assert_eq!(tasks[0].state(), TaskState::InProgress);
    // The message says that nothing executes it now, who takes it over and how to remove it.
    let last = err.lines().last().unwrap();
    assert!(last.contains("still InProgress at WaitForCompactionJob"), "{err}");
    assert!(last.contains(&format!("the next --local task of etcd {NS}/etcd-main")), "{err}");
    assert!(last.contains(&format!("task delete -n {NS} {compaction}")), "{err}");

    // The Job completes meanwhile. The next --local run takes the compaction over and finishes it, then runs
    // its own snapshot.
    cli.complete_the_job().await;
    let out = cli.run(&["snapshot", "full", "etcd-main", "--local", "--timeout", "60s"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains(&format!("taking over task {compaction}")), "{err}");
    let states: Vec<TaskState> = cli.tasks().await.iter().map(|t| t.state()).collect();
    assert_eq!(states, [TaskState::Succeeded, TaskState::Succeeded]);
    assert_eq!(cli.sidecar.calls(), ["/snapshot/full"]);
}

#[tokio::test]
async fn a_task_whose_local_executor_was_killed_is_taken_over_by_the_next_local_run() {
    let cli = Cli::start().await;
    let compaction = killed_local_compaction(&cli).await;
    cli.complete_the_job().await;
    // Its lease has not expired, but its holder is a dead process on this host: taken over at once.
    let out = cli.run(&["snapshot", "full", "etcd-main", "--local", "--timeout", "60s"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let tasks = cli.tasks().await;
    assert_eq!(tasks[0].metadata.name.as_deref(), Some(compaction.as_str()));
    let states: Vec<TaskState> = tasks.iter().map(|t| t.state()).collect();
    assert_eq!(states, [TaskState::Succeeded, TaskState::Succeeded], "{err}");
    assert_eq!(cli.sidecar.calls(), ["/snapshot/full"]);
}

#[tokio::test]
async fn task_delete_completes_on_a_task_whose_local_executor_was_killed() {
    let cli = Cli::start().await;
    let compaction = killed_local_compaction(&cli).await;
    assert_eq!(cli.jobs().await.len(), 1);
    let out = cli.run(&["task", "delete", &compaction]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Its finalizer ran: the task, its Job and its executor Lease are gone.
    assert!(cli.tasks().await.is_empty(), "{:?}", cli.tasks().await);
    assert!(cli.jobs().await.is_empty());
    assert_eq!(cli.executor_of(&compaction).await, None);
}

#[tokio::test]
async fn task_delete_completes_on_a_local_task_that_timed_out() {
    let cli = Cli::start().await;
    let out = cli.run(&["compact", "etcd-main", "--local", "--timeout", "2s"]).await;
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let compaction = cli.tasks().await[0].metadata.name.clone().unwrap();
    let out = cli.run(&["task", "delete", &compaction]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(cli.tasks().await.is_empty(), "{:?}", cli.tasks().await);
    assert!(cli.jobs().await.is_empty());
}

#[tokio::test]
async fn task_delete_completes_on_a_task_whose_executor_elsewhere_stopped_renewing_its_lease() {
    let cli = Cli::start().await;
    let out = cli.run(&["compact", "etcd-main", "--local", "--timeout", "2s"]).await;
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let compaction = cli.tasks().await[0].metadata.name.clone().unwrap();
    // An executor on another machine took the task's lease and then went away: nobody here can tell it is
    // gone until its lease runs out.
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string();
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": executor_lease_name(&compaction), "namespace": NS},
        "spec": {"holderIdentity": "druidctl-local@elsewhere/4711", "leaseDurationSeconds": 3,
                 "acquireTime": now, "renewTime": now}});
    Api::<Lease>::namespaced(cli.server.client(), NS)
        .patch(&executor_lease_name(&compaction), &PatchParams::apply("test").force(), &Patch::Apply(&lease))
        .await
        .unwrap();
    let out = cli.run(&["task", "delete", &compaction]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("executed by druidctl-local@elsewhere/4711"), "{err}");
    assert!(cli.tasks().await.is_empty(), "{:?}", cli.tasks().await);
    assert!(cli.jobs().await.is_empty());
}

#[tokio::test]
async fn serve_takes_over_a_task_whose_local_executor_was_killed_once_its_lease_runs_out() {
    let cli = Cli::start().await;
    let compaction = killed_local_compaction(&cli).await;
    cli.complete_the_job().await;
    // `serve` is not on the dead executor's host as far as it knows (its identity names no process): it waits
    // for the dead executor's lease to run out, then takes the task over and finishes it.
    let _serve = Proc(
        cli.command(&["serve", "-n", NS, "--identity", "serve-a", "--metrics-addr", "127.0.0.1:0"])
            .args(["--lease-duration", "3s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let tasks = cli.tasks().await;
        if tasks[0].state().is_terminal() {
            assert_eq!(tasks[0].state(), TaskState::Succeeded, "{tasks:?}");
            break;
        }
        assert!(Instant::now() < deadline, "serve did not take the task over: {tasks:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(cli.executor_of(&compaction).await.as_deref().unwrap_or("serve-a"), "serve-a");
    assert_eq!(cli.jobs().await.len(), 1, "the compaction Job was not created again");
}
