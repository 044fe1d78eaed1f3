//! The task engine against the embedded API server, in-process: admission (rejections, FIFO per Etcd, DEP-05
//! duplicates), exactly-once execution with racing reconcilers, and convergence under injected faults.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use druidctl::api::task::{EtcdOperatorTaskSpec, NamespacedName};
use druidctl::api::{EtcdOperatorTask, TaskState};
use druidctl::reconciler::controller::{self, ControllerOptions};
use druidctl::reconciler::metrics::sample_sum;
use druidctl::reconciler::{Backoff, Metrics, Reconciler, ReconcilerOptions};
use druidctl::tasks::Registry;
use druidctl::tasks::noop::{self, Ledger};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sim::ApiServer;
use kube_sim::FaultRule;
use serde_json::json;

async fn server_with_etcds(namespaces: &[&str], etcds_per_ns: usize) -> ApiServer {
    let server = ApiServer::new();
    landscape::register_upstream_crds(&server).expect("upstream CRDs");
    server.register_crd_yaml(&serde_json::to_string(&druidctl::api::task::crd()).unwrap()).expect("task CRD");
    let client = server.client();
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"), "etcds");
    for ns in namespaces {
        let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        ns_api
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
            .await
            .unwrap();
        for i in 0..etcds_per_ns {
            let obj: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
                "metadata": {"name": format!("etcd-{i}"), "namespace": ns},
                "spec": {"replicas": 3, "labels": {"app": "etcd-statefulset"}, "etcd": {}, "backup": {}}
            }))
            .unwrap();
            Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
                .create(&PostParams::default(), &obj)
                .await
                .unwrap();
        }
    }
    server
}

fn fast_options(identity: &str) -> ReconcilerOptions {
    let mut o = ReconcilerOptions::new(identity);
    o.executor_lease = Duration::from_secs(3);
    o.backoff = Backoff { base: Duration::from_millis(20), cap: Duration::from_millis(200), max_attempts: 30 };
    o.wait_requeue = Duration::from_millis(200);
    o.error_requeue = Duration::from_millis(50);
    o
}

fn reconciler(client: Client, ledger: &Arc<Ledger>, identity: &str) -> Arc<Reconciler> {
    Arc::new(Reconciler::new(client, Arc::new(Registry::with_noop(ledger.clone())), fast_options(identity)))
}

async fn create(
    client: &Client,
    ns: &str,
    name: &str,
    etcd: &str,
    type_: &str,
    config: Option<&str>,
) -> EtcdOperatorTask {
    let mut t = EtcdOperatorTask::new(
        name,
        EtcdOperatorTaskSpec {
            type_: type_.into(),
            config: config.map(str::to_string),
            ttl_seconds_after_finished: Some(3600),
            owner_etcd_refrence: NamespacedName { name: etcd.into(), namespace: ns.into() },
        },
    );
    t.metadata.namespace = Some(ns.into());
    let api: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), ns);
    // Creation itself may hit an injected fault; retry like a client would.
    for _ in 0..20 {
        match api.create(&PostParams::default(), &t).await {
            Ok(t) => return t,
            Err(kube::Error::Api(s)) if s.code == 409 => return api.get(name).await.unwrap(),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    panic!("could not create task {name}");
}

fn spawn_controller(r: Arc<Reconciler>, namespace: Option<&str>) -> tokio::task::JoinHandle<()> {
    let opts =
        ControllerOptions { namespace: namespace.map(str::to_string), workers: 8, resync: Duration::from_secs(2) };
    tokio::spawn(controller::run(r, opts, Arc::new(AtomicBool::new(false))))
}

/// Waits until every task in `namespaces` is terminal; returns them by name.
async fn wait_all_terminal(
    client: &Client,
    namespaces: &[&str],
    expected: usize,
    within: Duration,
) -> HashMap<String, EtcdOperatorTask> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let mut all = HashMap::new();
        let mut ok = true;
        for ns in namespaces {
            match Api::<EtcdOperatorTask>::namespaced(client.clone(), ns).list(&ListParams::default()).await {
                Ok(l) => {
                    all.extend(l.items.into_iter().map(|t| (format!("{ns}/{}", t.metadata.name.clone().unwrap()), t)))
                }
                Err(_) => ok = false,
            }
        }
        if ok && all.len() == expected && all.values().all(|t| t.state().is_terminal()) {
            return all;
        }
        if tokio::time::Instant::now() > deadline {
            let open: Vec<String> = all
                .iter()
                .filter(|(_, t)| !t.state().is_terminal())
                .map(|(n, t)| {
                    format!(
                        "{n}: {:?} {:?} {:?}",
                        t.state(),
                        t.status.as_ref().and_then(|s| s.last_operation.as_ref()).map(|o| &o.reason),
                        t.metadata.finalizers
                    )
                })
                .take(5)
                .collect();
            panic!("{} of {expected} tasks not terminal in time, e.g. {open:?}", open.len());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn reason(t: &EtcdOperatorTask) -> String {
    t.status.as_ref().and_then(|s| s.last_operation.as_ref()).map(|o| o.reason.clone()).unwrap_or_default()
}

#[tokio::test]
async fn tasks_that_cannot_run_are_rejected_with_the_reason() {
    let server = server_with_etcds(&["shoot"], 1).await;
    let client = server.client();
    let ledger = Arc::new(Ledger::default());
    let r = reconciler(client.clone(), &ledger, "local");
    let cases = [
        (
            "bad-config",
            "etcd-0",
            "OnDemandSnapshotTask",
            Some("type: huge"),
            "config.type: expected one of full, delta",
        ),
        ("unknown-type", "etcd-0", "RebootTheWorldTask", None, "unknown task type \"RebootTheWorldTask\""),
        (
            "no-etcd",
            "etcd-missing",
            "OnDemandMaintenanceTask",
            Some("maintenanceType: {etcdCompaction: true}"),
            "etcd \"etcd-missing\" not found",
        ),
        (
            "no-quorum",
            "etcd-0",
            "OnDemandSnapshotTask",
            Some("type: full"),
            "the etcd cluster has no quorum (0 of 3 members ready, 2 needed)",
        ),
    ];
    for (name, etcd, type_, config, want) in cases {
        create(&client, "shoot", name, etcd, type_, config).await;
        let t = r.run_to_completion("shoot", name).await.unwrap();
        assert_eq!(t.state(), TaskState::Rejected, "{name}");
        assert!(reason(&t).contains(want), "{name}: {}", reason(&t));
        let status = t.status.unwrap();
        assert!(status.initiated_at.is_some());
        assert_eq!(status.last_errors.len(), 1, "{name}");
        assert!(t.metadata.finalizers.unwrap_or_default().contains(&druidctl::reconciler::FINALIZER.to_string()));
    }
    let text = r.metrics.encode();
    assert_eq!(sample_sum(&text, "etcddruid_operator_tasks_total", &[("state", "rejected")]), 4.0);
    assert_eq!(ledger.all().len(), 0, "nothing executed");
}

#[tokio::test]
async fn tasks_of_one_etcd_run_first_in_first_out_and_duplicates_are_rejected() {
    let server = server_with_etcds(&["shoot"], 2).await;
    let client = server.client();
    let ledger = Arc::new(Ledger::default());
    // All created before any executor runs, so the order is decided by creation alone.
    create(&client, "shoot", "a-first", "etcd-0", noop::TYPE, Some("durationMillis: 200")).await;
    create(&client, "shoot", "b-keyed", "etcd-0", noop::TYPE, Some("key: k")).await;
    create(&client, "shoot", "c-duplicate", "etcd-0", noop::TYPE, Some("key: k")).await;
    create(&client, "shoot", "d-other-etcd", "etcd-1", noop::TYPE, Some("key: k")).await;
    let r = reconciler(client.clone(), &ledger, "serve-1");
    let ctl = spawn_controller(r.clone(), Some("shoot"));
    let all = wait_all_terminal(&client, &["shoot"], 4, Duration::from_secs(20)).await;
    r.shutdown.cancel();
    ctl.await.unwrap();

    let get = |n: &str| all[&format!("shoot/{n}")].clone();
    assert_eq!(get("a-first").state(), TaskState::Succeeded);
    assert_eq!(get("b-keyed").state(), TaskState::Succeeded);
    assert_eq!(get("d-other-etcd").state(), TaskState::Succeeded, "another etcd's task is no duplicate");
    let dup = get("c-duplicate");
    assert_eq!(dup.state(), TaskState::Rejected);
    assert!(reason(&dup).contains("b-keyed"), "{}", reason(&dup));
    // FIFO: b started only after a finished.
    let a_done = get("a-first").status.unwrap().last_operation.unwrap().last_transition_time.0;
    let b_started = get("b-keyed").status.unwrap().initiated_at.unwrap().0;
    assert!(b_started >= a_done.round(jiff::Unit::Second).unwrap() - jiff::SignedDuration::from_secs(1));
    assert_eq!(ledger.overlaps(), 0);
    assert_eq!(ledger.all().values().copied().collect::<Vec<_>>(), vec![1, 1, 1]);
}

#[tokio::test]
async fn two_racing_reconcilers_execute_every_task_exactly_once() {
    let nss = ["ns-a", "ns-b"];
    let server = server_with_etcds(&nss, 3).await;
    let client = server.client();
    let ledger = Arc::new(Ledger::default());
    let mut n = 0;
    for ns in nss {
        for i in 0..15 {
            create(&client, ns, &format!("t-{i}"), &format!("etcd-{}", i % 3), noop::TYPE, Some("durationMillis: 30"))
                .await;
            n += 1;
        }
    }
    let r1 = reconciler(client.clone(), &ledger, "replica-1");
    let r2 = reconciler(server.client(), &ledger, "replica-2");
    let (c1, c2) = (spawn_controller(r1.clone(), None), spawn_controller(r2.clone(), None));
    let all = wait_all_terminal(&client, &nss, n, Duration::from_secs(25)).await;
    r1.shutdown.cancel();
    r2.shutdown.cancel();
    let _ = tokio::join!(c1, c2);

    for (name, t) in &all {
        assert_eq!(t.state(), TaskState::Succeeded, "{name}: {}", reason(t));
    }
    let uids: Vec<String> = all.values().map(|t| t.metadata.uid.clone().unwrap()).collect();
    for uid in &uids {
        assert_eq!(ledger.executions(uid), 1, "task {uid}");
    }
    assert_eq!(ledger.overlaps(), 0);
    let succeeded = |m: &Metrics| sample_sum(&m.encode(), "etcddruid_operator_tasks_total", &[("state", "succeeded")]);
    assert_eq!(succeeded(&r1.metrics) + succeeded(&r2.metrics), n as f64, "each terminal transition counted once");
}

#[tokio::test]
async fn under_api_errors_watch_cuts_and_restarts_every_task_ends_correctly_once() {
    let nss: Vec<String> = (0..4).map(|i| format!("shoot-{i}")).collect();
    let ns_refs: Vec<&str> = nss.iter().map(String::as_str).collect();
    if let Ok(filter) = std::env::var("TASKS_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
    let server = server_with_etcds(&ns_refs, 5).await; // 20 Etcds
    let client = server.client();
    let ledger = Arc::new(Ledger::default());
    let mut expected: HashMap<String, TaskState> = HashMap::new();
    for i in 0..200 {
        let ns = nss[i % 4].as_str();
        let etcd = format!("etcd-{}", (i / 4) % 5);
        let (config, want) = match i % 10 {
            0 => ("fail: true".to_string(), TaskState::Failed),
            1 => ("transientFailures: 2".to_string(), TaskState::Succeeded),
            _ => (format!("durationMillis: {}", i % 7), TaskState::Succeeded),
        };
        let name = format!("task-{i:03}");
        create(&client, ns, &name, &etcd, noop::TYPE, Some(&config)).await;
        expected.insert(format!("{ns}/{name}"), want);
    }
    // Bad inputs mixed in: rejected, never executed.
    create(&client, "shoot-0", "bad-config", "etcd-0", noop::TYPE, Some("durationMillis: soon")).await;
    expected.insert("shoot-0/bad-config".into(), TaskState::Rejected);

    server.faults().add(FaultRule::error("", "", 500).at_rate(0.10));
    let mut opts = fast_options("serve-a");
    opts.events = false;
    let r = Arc::new(Reconciler::new(client.clone(), Arc::new(Registry::with_noop(ledger.clone())), opts));
    let ctl = spawn_controller(r.clone(), None);
    let chaos = {
        let server = server.clone();
        tokio::spawn(async move {
            for round in 0..6 {
                tokio::time::sleep(Duration::from_millis(700)).await;
                if round % 3 == 2 {
                    server.restart(true).await;
                } else {
                    server.faults().cut_watches(None);
                }
            }
        })
    };
    let all = wait_all_terminal(&server.client(), &ns_refs, expected.len(), Duration::from_secs(28)).await;
    chaos.abort();
    server.faults().clear();
    r.shutdown.cancel();
    ctl.await.unwrap();

    for (name, want) in &expected {
        let t = &all[name];
        assert_eq!(t.state(), *want, "{name}: {}", reason(t));
        let executions = ledger.executions(t.metadata.uid.as_deref().unwrap());
        assert_eq!(executions, u32::from(*want == TaskState::Succeeded), "{name} executed {executions} times");
    }
    assert_eq!(ledger.overlaps(), 0);
    let text = r.metrics.encode();
    let count = |state: TaskState| expected.values().filter(|s| **s == state).count() as f64;
    for state in [TaskState::Succeeded, TaskState::Failed, TaskState::Rejected] {
        let label = state.as_str().to_ascii_lowercase();
        assert_eq!(sample_sum(&text, "etcddruid_operator_tasks_total", &[("state", &label)]), count(state), "{label}");
        assert_eq!(
            sample_sum(&text, "etcddruid_operator_task_duration_seconds_count", &[("state", &label)]),
            count(state)
        );
    }
    let retried = all
        .values()
        .filter(|t| t.status.as_ref().is_some_and(|s| s.last_errors.iter().any(|e| e.code == "TransientError")))
        .count();
    assert!(retried >= 20, "transient failures are recorded in lastErrors ({retried})");
}

/// Refuses every write by one user: that replica is as good as dead (it can neither renew nor act).
struct Partition {
    user: String,
    on: std::sync::atomic::AtomicBool,
}

impl kube_sim::AdmissionHook for Partition {
    fn admit(&self, _s: &ApiServer, req: &kube_sim::AdmissionRequest) -> Result<(), String> {
        if self.on.load(std::sync::atomic::Ordering::SeqCst) && req.user == self.user {
            return Err(format!("{} is partitioned away", self.user));
        }
        Ok(())
    }
}

#[tokio::test]
async fn when_the_leader_dies_mid_task_the_standby_takes_over_and_the_task_runs_once() {
    use druidctl::reconciler::controller::{Health, LeaderElection, run_with_leader_election};
    use tokio_util::sync::CancellationToken;
    let server = server_with_etcds(&["shoot"], 1).await;
    for u in ["replica-a", "replica-b"] {
        server.add_user(u, &["system:masters"]);
    }
    let partition = Arc::new(Partition { user: "replica-a".into(), on: false.into() });
    server.add_admission_hook(partition.clone());
    let ledger = Arc::new(Ledger::default());
    let election = LeaderElection {
        namespace: "shoot".into(),
        name: controller::LEADER_LEASE.into(),
        lease: Duration::from_secs(2),
    };
    let opts = ControllerOptions { namespace: Some("shoot".into()), workers: 2, resync: Duration::from_secs(1) };
    let start = |user: &str, stop: CancellationToken, health: Arc<Health>| {
        let mut o = fast_options(user);
        o.executor_lease = Duration::from_secs(2);
        let r = Arc::new(Reconciler::new(server.client_for(user), Arc::new(Registry::with_noop(ledger.clone())), o));
        tokio::spawn(run_with_leader_election(r, opts.clone(), election.clone(), stop, health))
    };
    let (stop_a, health_a) = (CancellationToken::new(), Arc::new(Health::default()));
    let a = start("replica-a", stop_a.clone(), health_a.clone());
    while !health_a.leading.load(std::sync::atomic::Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (stop_b, health_b) = (CancellationToken::new(), Arc::new(Health::default()));
    let b = start("replica-b", stop_b.clone(), health_b.clone());

    let client = server.client();
    let task = create(&client, "shoot", "slow", "etcd-0", noop::TYPE, Some("durationMillis: 1500")).await;
    let api: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), "shoot");
    while api.get("slow").await.unwrap().state() != TaskState::InProgress {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!health_b.leading.load(std::sync::atomic::Ordering::SeqCst), "one leader at a time");
    // The leader "dies" mid-step: none of its writes get through any more.
    partition.on.store(true, std::sync::atomic::Ordering::SeqCst);
    let all = wait_all_terminal(&client, &["shoot"], 1, Duration::from_secs(20)).await;
    assert_eq!(all["shoot/slow"].state(), TaskState::Succeeded, "{}", reason(&all["shoot/slow"]));
    assert!(health_b.leading.load(std::sync::atomic::Ordering::SeqCst), "the standby leads now");
    assert_eq!(ledger.executions(task.metadata.uid.as_deref().unwrap()), 1, "finished exactly once");
    stop_a.cancel();
    stop_b.cancel();
    let _ = tokio::join!(a, b);
}

#[tokio::test]
async fn an_api_server_restart_with_history_costs_the_controller_no_relist() {
    let server = server_with_etcds(&["shoot"], 1).await;
    let client = server.client();
    let ledger = Arc::new(Ledger::default());
    let r = reconciler(client.clone(), &ledger, "serve");
    let synced = Arc::new(AtomicBool::new(false));
    let opts = ControllerOptions { namespace: Some("shoot".into()), workers: 2, resync: Duration::from_secs(60) };
    let ctl = tokio::spawn(controller::run(r.clone(), opts, synced.clone()));
    while !synced.load(std::sync::atomic::Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lists_before = server.request_log().count("list", "etcdoperatortasks");
    for i in 0..3 {
        server.restart(true).await;
        create(&client, "shoot", &format!("after-restart-{i}"), "etcd-0", noop::TYPE, None).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Nothing but the controller lists tasks until here: it resumed its watch from its resourceVersion.
    assert_eq!(server.request_log().count("list", "etcdoperatortasks"), lists_before, "LISTs after 3 restarts");
    let all = wait_all_terminal(&client, &["shoot"], 3, Duration::from_secs(20)).await;
    assert!(all.values().all(|t| t.state() == TaskState::Succeeded));
    r.shutdown.cancel();
    ctl.await.unwrap();
    let text = r.metrics.encode();
    assert_eq!(sample_sum(&text, "druidctl_watch_relists_total", &[]), 1.0, "only the initial list: {text}");
}

#[tokio::test]
async fn a_task_waiting_in_the_fifo_starts_when_the_task_ahead_is_deleted_without_any_polling() {
    let server = server_with_etcds(&["shoot"], 1).await;
    let client = server.client();
    let ledger = Arc::new(Ledger::default());
    // The head is a runbook type: this reconciler leaves it alone, so it holds the FIFO until it is deleted.
    create(&client, "shoot", "a-runbook", "etcd-0", druidctl::api::task::types::QUORUM_LOSS_RECOVERY, None).await;
    create(&client, "shoot", "b-next", "etcd-0", noop::TYPE, None).await;
    let mut opts = fast_options("serve");
    // No poll and no resync within the test: only the watch can tell b that the task ahead of it went away.
    opts.wait_requeue = Duration::from_secs(3600);
    let r = Arc::new(Reconciler::new(client.clone(), Arc::new(Registry::with_noop(ledger.clone())), opts));
    let copts = ControllerOptions { namespace: Some("shoot".into()), workers: 2, resync: Duration::from_secs(3600) };
    let ctl = tokio::spawn(controller::run(r.clone(), copts, Arc::new(AtomicBool::new(false))));
    let api: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), "shoot");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let b = api.get("b-next").await.unwrap();
        if reason(&b).contains("waiting for task a-runbook") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "b never waited: {:?}", b.status);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let b's own status write come back through the watch and be looked at, so that nothing but the deletion
    // is left to wake it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(api.get("b-next").await.unwrap().state(), TaskState::Pending);
    api.delete("a-runbook", &Default::default()).await.unwrap();
    let all = wait_all_terminal(&client, &["shoot"], 1, Duration::from_secs(10)).await;
    assert_eq!(all["shoot/b-next"].state(), TaskState::Succeeded);
    r.shutdown.cancel();
    ctl.await.unwrap();
}
