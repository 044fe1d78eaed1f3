//! The reconciler as a long-running controller (`druidctl serve`): a resumable watch of the tasks (bookmarks;
//! after a dropped watch it continues from the last resourceVersion, relisting only on `410 Gone`,
//! seeds/003), a de-duplicating work queue with delayed requeues, `workers` concurrent reconciles, leader
//! election on a Lease, and the `/metrics`, `/healthz` and `/readyz` endpoints.

use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector as reflect};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::lease::{Acquire, LeaseLock};
use super::{Next, Reconciler};
use crate::api::{EtcdOperatorTask, TaskState};

/// Backoff of the task watch: 100 ms doubling to 5 s, reset by any successful event. (kube's default only
/// resets after two quiet minutes, so under a steady error rate it would keep the cache stale for 30 s.)
#[derive(Debug, Clone, Default)]
pub struct WatchBackoff {
    failures: u32,
}

impl Iterator for WatchBackoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        Some((Duration::from_millis(100) * 2u32.saturating_pow(self.failures.min(6) - 1)).min(Duration::from_secs(5)))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.failures = 0;
    }
}

/// Name of the leader-election Lease of `serve`.
pub const LEADER_LEASE: &str = "druidctl-serve";

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// Only this namespace (`None`: every namespace).
    pub namespace: Option<String>,
    /// Concurrent reconciles.
    pub workers: usize,
    /// Every task is looked at again this often, whatever happened.
    pub resync: Duration,
}

type Key = (String, String);

/// A de-duplicating work queue: a key is queued at most once and never handed to two workers at once.
#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
    notify: Notify,
}

#[derive(Default)]
struct QueueState {
    order: VecDeque<Key>,
    queued: HashSet<Key>,
    active: HashSet<Key>,
    dirty: HashSet<Key>,
}

impl Queue {
    fn push(&self, key: Key) {
        let mut s = self.state.lock().expect("queue");
        if s.active.contains(&key) {
            s.dirty.insert(key);
        } else if s.queued.insert(key.clone()) {
            s.order.push_back(key);
            drop(s);
            self.notify.notify_one();
        }
    }

    fn push_after(self: &Arc<Self>, key: Key, after: Duration) {
        if after.is_zero() {
            return self.push(key);
        }
        let q = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            q.push(key);
        });
    }

    async fn pop(&self) -> Key {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.state.lock().expect("queue");
                if let Some(k) = s.order.pop_front() {
                    s.queued.remove(&k);
                    s.active.insert(k.clone());
                    if !s.order.is_empty() {
                        self.notify.notify_one();
                    }
                    return k;
                }
            }
            notified.await;
        }
    }

    fn done(&self, key: &Key) {
        let again = {
            let mut s = self.state.lock().expect("queue");
            s.active.remove(key);
            s.dirty.remove(key)
        };
        if again {
            self.push(key.clone());
        }
    }
}

fn key_of(t: &EtcdOperatorTask) -> Key {
    (t.metadata.namespace.clone().unwrap_or_default(), t.metadata.name.clone().unwrap_or_default())
}

fn stage(t: &EtcdOperatorTask) -> &'static str {
    match t.state() {
        _ if t.metadata.deletion_timestamp.is_some() => "cleanup",
        TaskState::Pending => "admit",
        TaskState::InProgress => "execute",
        _ => "cleanup",
    }
}

/// Runs the controller until `reconciler.shutdown` fires; `synced` turns true once the first list arrived.
pub async fn run(reconciler: Arc<Reconciler>, opts: ControllerOptions, synced: Arc<AtomicBool>) {
    let stop = reconciler.shutdown.clone();
    let api: Api<EtcdOperatorTask> = match &opts.namespace {
        Some(ns) => Api::namespaced(reconciler.client.clone(), ns),
        None => Api::all(reconciler.client.clone()),
    };
    let (reader, writer) = reflector::store::<EtcdOperatorTask>();
    let queue = Arc::new(Queue::default());
    let workers: Vec<_> = (0..opts.workers.max(1))
        .map(|_| tokio::spawn(worker(reconciler.clone(), reader.clone(), queue.clone())))
        .collect();

    let stream = reflect(writer, watcher::watcher(api, watcher::Config::default())).backoff(WatchBackoff::default());
    let mut stream = std::pin::pin!(stream);
    let mut resync = tokio::time::interval(opts.resync);
    resync.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = resync.tick() => for t in reader.state() { queue.push(key_of(&t)) },
            ev = stream.next() => match ev {
                None => break,
                Some(Ok(Event::Init)) => { reconciler.metrics.relists.inc(); }
                Some(Ok(Event::InitApply(t) | Event::Apply(t))) => {
                    queue.push(key_of(&t));
                    // FIFO: when a task finishes, the next one of its Etcd need not wait for its requeue.
                    if t.state().is_terminal() {
                        let r = &t.spec.owner_etcd_refrence;
                        for other in reader.state() {
                            if !other.state().is_terminal() && other.targets(&r.namespace, &r.name) {
                                queue.push(key_of(&other));
                            }
                        }
                    }
                }
                Some(Ok(Event::InitDone)) => {
                    synced.store(true, Ordering::SeqCst);
                    for t in reader.state() { queue.push(key_of(&t)) }
                }
                Some(Ok(Event::Delete(_))) => {}
                Some(Err(e)) => {
                    reconciler.metrics.watch_restarts.inc();
                    tracing::debug!(error = %e, "task watch failed; resuming");
                }
            },
        }
    }
    // Graceful: running steps stop at their next safe point and release their leases.
    reconciler.shutdown.cancel();
    queue.notify.notify_waiters();
    for w in workers {
        let _ = tokio::time::timeout(Duration::from_secs(30), w).await;
    }
}

async fn worker(reconciler: Arc<Reconciler>, reader: Store<EtcdOperatorTask>, queue: Arc<Queue>) {
    let stop = reconciler.shutdown.clone();
    loop {
        let key = tokio::select! {
            _ = stop.cancelled() => return,
            k = queue.pop() => k,
        };
        let found = reader.get(&ObjectRef::new(&key.1).within(&key.0));
        if let Some(task) = found {
            let others: Vec<EtcdOperatorTask> = reader
                .state()
                .iter()
                .filter(|t| t.metadata.namespace.as_deref() == Some(key.0.as_str()))
                .map(|t| (**t).clone())
                .collect();
            match reconciler.reconcile(&task, &others).await {
                Ok(Next::Done) => {}
                Ok(Next::RequeueAfter(d)) => queue.push_after(key.clone(), d),
                Err(e) => {
                    reconciler.metrics.reconcile_error(stage(&task));
                    tracing::debug!(task = %key.1, error = %e, "reconcile failed; requeued");
                    queue.push_after(key.clone(), reconciler.opts.error_requeue);
                }
            }
        }
        queue.done(&key);
    }
}

/// Leader election for `serve`.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// Lease duration.
    pub lease: Duration,
}

/// State `serve` exposes on `/healthz` and `/readyz`.
#[derive(Debug, Default)]
pub struct Health {
    /// This replica leads.
    pub leading: AtomicBool,
    /// The leader's cache is synced.
    pub synced: AtomicBool,
    /// Shutting down.
    pub stopping: AtomicBool,
    /// Took part in an election at least once.
    pub started: AtomicBool,
}

impl Health {
    /// Ready: standing by, or leading with a synced cache; never while stopping.
    pub fn ready(&self) -> bool {
        let s = |a: &AtomicBool| a.load(Ordering::SeqCst);
        !s(&self.stopping) && s(&self.started) && (!s(&self.leading) || s(&self.synced))
    }
}

/// Runs the controller whenever this replica holds the leader Lease, until `stop` fires; a lost lease stops
/// the term (its running steps stop at a safe point) and the replica becomes a candidate again.
pub async fn run_with_leader_election(
    base: Arc<Reconciler>,
    opts: ControllerOptions,
    election: LeaderElection,
    stop: CancellationToken,
    health: Arc<Health>,
) {
    let lock =
        LeaseLock::new(base.client.clone(), &election.namespace, &election.name, &base.opts.identity, election.lease);
    while !stop.is_cancelled() {
        let attempt = lock.try_acquire().await;
        health.started.store(true, Ordering::SeqCst);
        match attempt {
            Ok(Acquire::Acquired) => {
                tracing::info!(identity = %base.opts.identity, "became leader");
                health.leading.store(true, Ordering::SeqCst);
                let term = stop.child_token();
                let lost = lock.keep_renewed(term.clone());
                let reconciler = Arc::new(Reconciler {
                    client: base.client.clone(),
                    registry: base.registry.clone(),
                    opts: base.opts.clone(),
                    metrics: base.metrics.clone(),
                    shutdown: term.clone(),
                });
                let synced = Arc::new(AtomicBool::new(false));
                let watch_synced = {
                    let (synced, health, term) = (synced.clone(), health.clone(), term.clone());
                    tokio::spawn(async move {
                        while !term.is_cancelled() {
                            health.synced.store(synced.load(Ordering::SeqCst), Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    })
                };
                let term2 = term.clone();
                tokio::spawn(async move {
                    lost.cancelled().await;
                    tracing::warn!("leader lease lost; stopping this term");
                    term2.cancel();
                });
                run(reconciler, opts.clone(), synced).await;
                term.cancel();
                let _ = watch_synced.await;
                health.leading.store(false, Ordering::SeqCst);
                health.synced.store(false, Ordering::SeqCst);
                lock.release().await;
            }
            Ok(Acquire::HeldBy { expires_in, .. }) => {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = tokio::time::sleep(expires_in.clamp(Duration::from_millis(200), election.lease / 3)) => {}
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "leader election failed; retrying");
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` until `stop` fires; returns the bound address.
pub async fn serve_endpoints(
    addr: SocketAddr,
    metrics: Arc<super::Metrics>,
    health: Arc<Health>,
    stop: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let conn = tokio::select! {
                _ = stop.cancelled() => return,
                c = listener.accept() => c,
            };
            let Ok((stream, _)) = conn else { continue };
            let (metrics, health) = (metrics.clone(), health.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (metrics, health) = (metrics.clone(), health.clone());
                    async move {
                        let (code, ctype, body) = match req.uri().path() {
                            "/metrics" => {
                                (200, "application/openmetrics-text; version=1.0.0; charset=utf-8", metrics.encode())
                            }
                            "/healthz" => (200, "text/plain", "ok\n".to_string()),
                            "/readyz" if health.ready() => (200, "text/plain", "ok\n".to_string()),
                            "/readyz" => (503, "text/plain", "not ready\n".to_string()),
                            _ => (404, "text/plain", "not found\n".to_string()),
                        };
                        Ok::<_, Infallible>(
                            hyper::Response::builder()
                                .status(code)
                                .header("content-type", ctype)
                                .body(Full::new(Bytes::from(body)))
                                .expect("response"),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn queue_hands_a_key_to_one_worker_at_a_time_and_remembers_changes_meanwhile() {
        let q = Arc::new(Queue::default());
        let k = ("ns".to_string(), "t".to_string());
        q.push(k.clone());
        q.push(k.clone());
        assert_eq!(q.pop().await, k);
        q.push(k.clone()); // changed while active: queued again after done
        assert!(q.state.lock().unwrap().order.is_empty());
        q.done(&k);
        assert_eq!(q.pop().await, k);
        q.done(&k);
        assert!(q.state.lock().unwrap().order.is_empty());
    }

    #[test]
    fn watch_backoff_doubles_to_five_seconds_and_resets() {
        use kube::runtime::utils::Backoff;
        let mut b = WatchBackoff::default();
        let d: Vec<u128> = (0..8).map(|_| b.next().unwrap().as_millis()).collect();
        assert_eq!(d, [100, 200, 400, 800, 1600, 3200, 3200, 3200].map(|v: u128| v.min(5000)));
        b.reset();
        assert_eq!(b.next(), Some(Duration::from_millis(100)));
    }

    #[test]
    fn readiness_needs_a_synced_cache_only_when_leading() {
        let h = Health::default();
        assert!(!h.ready());
        h.started.store(true, Ordering::SeqCst);
        assert!(h.ready(), "standby");
        h.leading.store(true, Ordering::SeqCst);
        assert!(!h.ready());
        h.synced.store(true, Ordering::SeqCst);
        assert!(h.ready());
        h.stopping.store(true, Ordering::SeqCst);
        assert!(!h.ready());
    }
}
