//! Failover of `druidctl serve` with real processes: two replicas against the embedded API server over HTTP,
//! one leads; the leader is SIGKILLed in the middle of a snapshot task, the standby takes over, and the task
//! finishes with the snapshot taken exactly once (counted by the backup sidecar, the only side effect).

use crate::tasks_support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use druidctl::api::task::{EtcdOperatorTaskSpec, NamespacedName, types};
use druidctl::api::{EtcdOperatorTask, TaskState};
use druidctl::reconciler::controller::LEADER_LEASE;
use druidctl::reconciler::executor_lease_name;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use kube_sim::ApiServer;
use serde_json::json;
use tasks_support::{ETCD, NS, landscape, renew};

const TASK: &str = "snap-during-failover";
const REPLICAS: [&str; 2] = ["replica-a", "replica-b"];

/// A backup sidecar that takes the snapshot (moves the snapshot lease) as soon as it is asked, then holds its
/// answer until released: the executor is stuck mid-step, after the side effect, when its leader dies.
#[derive(Clone)]
struct SlowSidecar {
    taken: Arc<Mutex<Vec<String>>>,
    release: tokio::sync::watch::Sender<bool>,
}

impl SlowSidecar {
    async fn start(server: &ApiServer) -> SlowSidecar {
        let me = SlowSidecar { taken: Arc::default(), release: tokio::sync::watch::channel(false).0 };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        server.register_service_backend(NS, &format!("{ETCD}-client"), 8080, addr);
        let (sidecar, client) = (me.clone(), server.client());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (sidecar, client) = (sidecar.clone(), client.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (sidecar, client) = (sidecar.clone(), client.clone());
                        async move {
                            let path = req.uri().path().to_string();
                            let body = match path.as_str() {
                                "/snapshot/full" => {
                                    let reply = renew(&client, &format!("{ETCD}-full-snap")).await;
                                    sidecar.taken.lock().unwrap().push(path.clone());
                                    let mut released = sidecar.release.subscribe();
                                    let _ =
                                        tokio::time::timeout(Duration::from_secs(30), released.wait_for(|r| *r)).await;
                                    reply
                                }
                                _ => json!({"message": "ok"}),
                            };
                            Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(body.to_string()))))
                        }
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        me
    }

    fn snapshots(&self) -> Vec<String> {
        self.taken.lock().unwrap().clone()
    }
}

/// The `serve` replicas, SIGKILLed and reaped on drop.
struct Replicas {
    children: Vec<(String, Child)>,
    logs: PathBuf,
}

impl Replicas {
    fn spawn(dir: &Path) -> Replicas {
        let children = REPLICAS
            .iter()
            .map(|id| {
                let log = std::fs::File::create(dir.join(format!("{id}.log"))).unwrap();
                let child = Command::new(env!("CARGO_BIN_EXE_druidctl"))
                    .args([
                        "serve",
                        "-n",
                        NS,
                        "--identity",
                        id,
                        "--metrics-addr",
                        "127.0.0.1:0",
                        "--lease-duration",
                        "3s",
                    ])
                    .args(["--log-format", "json", "-vv"])
                    .env("KUBECONFIG", dir.join("config"))
                    .env("HOME", dir)
                    .env_remove("RUST_LOG")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .unwrap();
                (id.to_string(), child)
            })
            .collect();
        Replicas { children, logs: dir.to_path_buf() }
    }

    fn child(&mut self, id: &str) -> &mut Child {
        &mut self.children.iter_mut().find(|(n, _)| n == id).unwrap().1
    }

    /// The last lines each replica logged, for failure messages.
    fn logs(&self) -> String {
        REPLICAS
            .iter()
            .map(|id| {
                let text = std::fs::read_to_string(self.logs.join(format!("{id}.log"))).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                format!("--- {id}:\n{}", lines[lines.len().saturating_sub(15)..].join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn holder(client: &kube::Client, lease: &str) -> Option<String> {
    let api: Api<Lease> = Api::namespaced(client.clone(), NS);
    api.get_opt(lease).await.ok().flatten().and_then(|l| l.spec?.holder_identity)
}

/// Polls `probe` every 50ms until it yields a value; panics with `what` and the replica logs after `within`.
async fn eventually<T, F, Fut>(replicas: &Replicas, within: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}\n{}", replicas.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leading_serve_mid_task_hands_the_task_to_the_standby_which_finishes_it_once() {
    let server = landscape().await;
    let sidecar = SlowSidecar::start(&server).await;
    let endpoint = server.serve_http("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config"), server.kubeconfig_yaml(&endpoint.url, "admin", Some(NS))).unwrap();
    let client = server.client();
    let mut replicas = Replicas::spawn(dir.path());

    // One of the two leads, as the leader Lease says.
    let leader = eventually(&replicas, Duration::from_secs(15), "a leader", || {
        let client = client.clone();
        async move { holder(&client, LEADER_LEASE).await.filter(|h| REPLICAS.contains(&h.as_str())) }
    })
    .await;
    let standby = REPLICAS.iter().find(|r| **r != leader).unwrap().to_string();

    let mut task = EtcdOperatorTask::new(
        TASK,
        EtcdOperatorTaskSpec {
            type_: types::ON_DEMAND_SNAPSHOT.into(),
            config: Some("type: full".into()),
            ttl_seconds_after_finished: Some(3600),
            owner_etcd_refrence: NamespacedName { name: ETCD.into(), namespace: NS.into() },
        },
    );
    task.metadata.namespace = Some(NS.into());
    let tasks: Api<EtcdOperatorTask> = Api::namespaced(client.clone(), NS);
    tasks.create(&PostParams::default(), &task).await.unwrap();

    // Mid-task: InProgress under the leader, the snapshot taken, the sidecar's answer not yet delivered.
    eventually(&replicas, Duration::from_secs(15), "the snapshot request under the leader", || {
        let (sidecar, tasks) = (sidecar.clone(), tasks.clone());
        async move {
            let t = tasks.get(TASK).await.ok()?;
            (t.state() == TaskState::InProgress && !sidecar.snapshots().is_empty()).then_some(())
        }
    })
    .await;
    let step = tasks.get(TASK).await.unwrap().status.and_then(|s| s.last_operation).map(|o| o.name);
    assert_eq!(step.as_deref(), Some("TriggerFullSnapshot"), "{}", replicas.logs());
    assert_eq!(
        holder(&client, LEADER_LEASE).await.as_deref(),
        Some(leader.as_str()),
        "still the leader\n{}",
        replicas.logs()
    );
    assert_eq!(
        holder(&client, &executor_lease_name(TASK)).await.as_deref(),
        Some(leader.as_str()),
        "the leader executes"
    );

    // SIGKILL: no graceful shutdown, no lease released.
    let dead = replicas.child(&leader);
    dead.kill().unwrap();
    let status = dead.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let _ = sidecar.release.send(true);
    assert!(replicas.child(&standby).try_wait().unwrap().is_none(), "the standby is still running");

    let done = eventually(&replicas, Duration::from_secs(25), "the task to finish", || {
        let tasks = tasks.clone();
        async move { tasks.get(TASK).await.ok().filter(|t| t.state().is_terminal()) }
    })
    .await;
    assert_eq!(done.state(), TaskState::Succeeded, "{:?}\n{}", done.status, replicas.logs());
    assert_eq!(holder(&client, LEADER_LEASE).await.as_deref(), Some(standby.as_str()), "the standby leads now");
    assert_eq!(sidecar.snapshots(), ["/snapshot/full"], "the snapshot was taken exactly once");

    // Exactly one completion, reported by the standby. serve sends events from a queue after the status write,
    // so the event may follow the task's terminal state by a moment.
    let succeeded_events = || {
        let client = client.clone();
        async move {
            let events: Vec<Event> =
                Api::<Event>::namespaced(client, NS).list(&ListParams::default()).await.unwrap().items;
            let succeeded: Vec<Event> = events
                .into_iter()
                .filter(|e| {
                    e.involved_object.kind.as_deref() == Some("EtcdOperatorTask")
                        && e.involved_object.name.as_deref() == Some(TASK)
                })
                .filter(|e| e.reason.as_deref() == Some("Succeeded"))
                .collect();
            Some(succeeded).filter(|s| !s.is_empty())
        }
    };
    eventually(&replicas, Duration::from_secs(10), "the Succeeded event", succeeded_events).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let succeeded = succeeded_events().await.unwrap();
    assert_eq!(succeeded.len(), 1, "{succeeded:?}");
    assert_eq!(succeeded[0].reporting_instance.as_deref(), Some(standby.as_str()));
}
