//! The reconciler as a long-running controller (`druidctl serve`): a resumable watch of the tasks (bookmarks;
//! after a dropped watch it continues from the last resourceVersion, relisting only on `410 Gone`,
//! seeds/003), a de-duplicating work queue with delayed requeues, `workers` concurrent reconciles, leader
//! election on a Lease, and the `/metrics`, `/healthz` and `/readyz` endpoints.

use std::collections::{HashMap, HashSet, VecDeque};
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
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector as reflect;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::lease::{Acquire, LeaseLock};
use super::{Next, Reconciler};
use crate::api::{EtcdOperatorTask, TaskState};

/// An API-server outage, logged once when it starts (WARN) and once when it ends (INFO); the attempts in
/// between are DEBUG, so a down API server does not flood the log while the callers back off. One per process
/// ([`API_OUTAGE`]): the watch, leader election and lease renewals all see the same outage, and it is logged
/// once, not once by each of them.
#[derive(Debug, Default)]
pub struct Outage {
    since: Mutex<Option<std::time::Instant>>,
}

/// The outage of this process's API server, shared by everything that talks to it.
pub static API_OUTAGE: Outage = Outage::new();

impl Outage {
    /// No outage.
    pub const fn new() -> Outage {
        Outage { since: Mutex::new(None) }
    }

    /// Whether an outage is going on (a call failed since the last success).
    pub fn active(&self) -> bool {
        self.since.lock().expect("outage").is_some()
    }

    /// A call failed.
    pub fn failed(&self, what: &str, error: &dyn std::fmt::Display) {
        let mut since = self.since.lock().expect("outage");
        if since.is_none() {
            *since = Some(std::time::Instant::now());
            tracing::warn!(%error, "{what} failed; retrying with backoff (logged again when the API server answers)");
        } else {
            tracing::debug!(%error, "{what} failed again");
        }
    }

    /// A call succeeded.
    pub fn ok(&self) {
        if let Some(t) = self.since.lock().expect("outage").take() {
            tracing::info!(after_seconds = t.elapsed().as_secs(), "the API server answers again");
        }
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

/// A de-duplicating work queue: a key is queued at most once and never handed to two workers at once; a
/// delayed requeue keeps only the earliest pending time of a key, so requeueing a key again and again (every
/// resync of a finished task) does not pile up timers. One timer task serves every delayed requeue (a finished
/// task waits for its TTL in the queue: a spawned sleeping task per key would cost about a kilobyte each).
/// tokio-util's `DelayQueue` is not used: it is polled and changed through `&mut` by one owner, while requeues
/// come from every worker, so it would need this same lock and wake-up around it.
#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
    notify: Notify,
    /// Wakes the timer task when an earlier due time is scheduled.
    timer: Arc<Notify>,
}

#[derive(Default)]
struct QueueState {
    order: VecDeque<Key>,
    queued: HashSet<Key>,
    active: HashSet<Key>,
    dirty: HashSet<Key>,
    /// Delayed requeues: the earliest time each key is due.
    scheduled: HashMap<Key, tokio::time::Instant>,
    /// The same, ordered by due time.
    due: std::collections::BTreeSet<(tokio::time::Instant, Key)>,
    /// The timer task runs.
    timer_started: bool,
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
        let due = tokio::time::Instant::now() + after;
        let (earliest, start_timer) = {
            let mut s = self.state.lock().expect("queue");
            match s.scheduled.get(&key).copied() {
                Some(earlier) if earlier <= due => return,
                Some(later) => {
                    s.due.remove(&(later, key.clone()));
                }
                None => {}
            }
            s.scheduled.insert(key.clone(), due);
            s.due.insert((due, key));
            let earliest = s.due.first().is_some_and(|(d, _)| *d == due);
            (earliest, !std::mem::replace(&mut s.timer_started, true))
        };
        if start_timer {
            tokio::spawn(Self::timer(Arc::downgrade(self), self.timer.clone()));
        } else if earliest {
            self.timer.notify_one();
        }
    }

    /// Pushes each delayed key when it is due; ends with the queue.
    async fn timer(queue: std::sync::Weak<Queue>, wakeup: Arc<Notify>) {
        loop {
            let Some(q) = queue.upgrade() else { return };
            let now = tokio::time::Instant::now();
            let (ready, next) = {
                let mut s = q.state.lock().expect("queue");
                let mut ready = Vec::new();
                while let Some((d, _)) = s.due.first()
                    && *d <= now
                {
                    let (_, k) = s.due.pop_first().expect("first");
                    s.scheduled.remove(&k);
                    ready.push(k);
                }
                (ready, s.due.first().map(|(d, _)| *d))
            };
            for k in ready {
                q.push(k);
            }
            // Not holding the queue while asleep: the timer ends once the queue is dropped (checked every minute).
            drop(q);
            let wake = wakeup.notified();
            let until = next.unwrap_or(now + Duration::from_secs(60)).min(now + Duration::from_secs(60));
            tokio::select! {
                _ = wake => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
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

/// The unfinished tasks of each Etcd (by the Etcd's namespace and name), with the state each was last seen in.
/// Admission needs only a task's Etcd-mates (FIFO and duplicates), and when a task changes state only they need
/// another look, so nothing scans every task of a namespace or of the cluster per reconcile or event.
#[derive(Default)]
struct EtcdIndex {
    by_etcd: HashMap<Key, HashMap<Key, TaskState>>,
    etcd_of: HashMap<Key, Key>,
}

fn etcd_key(t: &EtcdOperatorTask) -> Key {
    let r = &t.spec.owner_etcd_refrence;
    (r.namespace.clone(), r.name.clone())
}

impl EtcdIndex {
    /// Records a change of `task`; returns the keys of the tasks that should look again because a task ahead of
    /// them may have moved (it changed state, finished, or left its Etcd).
    fn apply(&mut self, task: &EtcdOperatorTask) -> Vec<Key> {
        let key = key_of(task);
        let etcd = etcd_key(task);
        let mut wake = Vec::new();
        if let Some(old) = self.etcd_of.get(&key).cloned()
            && old != etcd
        {
            wake.extend(self.remove(&key));
        }
        let state = task.state();
        if state.is_terminal() {
            wake.extend(self.remove(&key));
            return wake;
        }
        self.etcd_of.insert(key.clone(), etcd.clone());
        let mates = self.by_etcd.entry(etcd.clone()).or_default();
        if mates.insert(key.clone(), state).is_some_and(|before| before != state) {
            wake.extend(mates.keys().filter(|k| **k != key).cloned());
        }
        wake
    }

    /// Forgets a task (finished or deleted); returns the keys of its Etcd's remaining unfinished tasks.
    fn remove(&mut self, key: &Key) -> Vec<Key> {
        let Some(etcd) = self.etcd_of.remove(key) else { return Vec::new() };
        let Some(mates) = self.by_etcd.get_mut(&etcd) else { return Vec::new() };
        mates.remove(key);
        let rest: Vec<Key> = mates.keys().cloned().collect();
        if mates.is_empty() {
            self.by_etcd.remove(&etcd);
        }
        rest
    }

    /// Rebuilds the index from a complete cache (after a relist).
    fn rebuild<'a>(&mut self, tasks: impl IntoIterator<Item = &'a EtcdOperatorTask>) {
        *self = EtcdIndex::default();
        for t in tasks {
            self.apply(t);
        }
    }

    /// Keys of the unfinished tasks targeting the same Etcd as `task` (`task` included when unfinished).
    fn mates(&self, task: &EtcdOperatorTask) -> Vec<Key> {
        self.by_etcd.get(&etcd_key(task)).map(|m| m.keys().cloned().collect()).unwrap_or_default()
    }
}

/// What the cache keeps of a task: what reconciles read from it. Not its managedFields (a third of a task as the
/// real API server returns it) nor its journal annotation (a runbook's journal holds whole copies of objects): an
/// executor reads the task itself before it acts, and every write returns the whole task. Of a finished task,
/// which stays cached until its TTL, also not its config nor its errors: only its state, its last operation (when
/// it finished) and its metadata are read.
fn slim(t: &mut EtcdOperatorTask) {
    t.metadata.managed_fields = None;
    if let Some(a) = t.metadata.annotations.as_mut() {
        a.remove(crate::tasks::step::JOURNAL_ANNOTATION);
    }
    if t.state().is_terminal() {
        t.spec.config = None;
        if let Some(s) = t.status.as_mut() {
            s.last_errors = Vec::new();
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
    let index = Arc::new(Mutex::new(EtcdIndex::default()));
    let workers: Vec<_> = (0..opts.workers.max(1))
        .map(|_| tokio::spawn(worker(reconciler.clone(), reader.clone(), queue.clone(), index.clone())))
        .collect();

    // A streaming list where the server offers it (the backoff is inside `events`), slimmed before caching.
    let stream = reflect(writer, crate::kube::watch::events(api, watcher::Config::default()).modify(slim));
    let mut stream = std::pin::pin!(stream);
    let mut resync = tokio::time::interval(opts.resync);
    resync.tick().await;
    let outage = &API_OUTAGE;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = resync.tick() => for t in reader.state() { queue.push(key_of(&t)) },
            ev = stream.next() => match ev {
                None => break,
                Some(Ok(Event::Init)) => { outage.ok(); reconciler.metrics.relists.inc(); }
                // The store takes a relist's objects only at `InitDone`.
                Some(Ok(Event::InitApply(_))) => {}
                Some(Ok(Event::Apply(t))) => {
                    queue.push(key_of(&t));
                    // FIFO: when a task moves on, the tasks behind it look again at once instead of polling.
                    let wake = index.lock().expect("index").apply(&t);
                    for k in wake { queue.push(k) }
                }
                Some(Ok(Event::InitDone)) => {
                    synced.store(true, Ordering::SeqCst);
                    let all = reader.state();
                    index.lock().expect("index").rebuild(all.iter().map(|t| &**t));
                    for t in all { queue.push(key_of(&t)) }
                }
                Some(Ok(Event::Delete(t))) => {
                    // A deleted task no longer holds up the tasks behind it.
                    let wake = index.lock().expect("index").remove(&key_of(&t));
                    for k in wake { queue.push(k) }
                }
                // 410 Gone (a restarted API server's answer to a version older than its new watch cache) only
                // starts the relist that follows at once: not an outage of its own.
                Some(Err(watcher::Error::WatchError(s))) if s.code == 410 => {
                    reconciler.metrics.watch_restarts.inc();
                    tracing::debug!("task watch: 410 Gone, relisting");
                }
                Some(Err(e)) => {
                    reconciler.metrics.watch_restarts.inc();
                    outage.failed("watching tasks", &e);
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

async fn worker(
    reconciler: Arc<Reconciler>,
    reader: Store<EtcdOperatorTask>,
    queue: Arc<Queue>,
    index: Arc<Mutex<EtcdIndex>>,
) {
    let stop = reconciler.shutdown.clone();
    loop {
        let key = tokio::select! {
            _ = stop.cancelled() => return,
            k = queue.pop() => k,
        };
        let found = reader.get(&ObjectRef::new(&key.1).within(&key.0));
        if let Some(task) = found {
            // Only the unfinished tasks of the same Etcd matter to admission; a finished task needs none.
            let others: Vec<EtcdOperatorTask> = if task.state().is_terminal() {
                Vec::new()
            } else {
                let mates = index.lock().expect("index").mates(&task);
                mates
                    .iter()
                    .filter(|k| **k != key)
                    .filter_map(|k| reader.get(&ObjectRef::new(&k.1).within(&k.0)))
                    .map(|t| (*t).clone())
                    .collect()
            };
            match reconciler.reconcile(&task, &others).await {
                Ok(Next::Done) => {}
                // Woken by the index when a task ahead of it moves; the resync is the safety net.
                Ok(Next::Waiting(_)) => {}
                Ok(Next::RequeueAfter(d)) => queue.push_after(key.clone(), d),
                Err(e) => {
                    reconciler.metrics.reconcile_error(stage(&task));
                    tracing::debug!(task = %key.1, error = %e, "reconcile failed; requeued");
                    queue.push_after(key.clone(), reconciler.opts.error_requeue);
                }
            }
        }
        queue.done(&key);
        // A reconcile that makes no API call (a finished task, a task still waiting) never returns `Pending`, so
        // without this a worker with a full queue would keep its thread for the whole queue: the watch, timers,
        // lease renewals (and an in-process API server) on that runtime would starve, and reconciles of a stale
        // cache would keep it that way.
        tokio::task::yield_now().await;
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
    let outage = &API_OUTAGE;
    let mut retry = Duration::from_millis(500);
    while !stop.is_cancelled() {
        let attempt = lock.try_acquire().await;
        health.started.store(true, Ordering::SeqCst);
        if attempt.is_ok() {
            outage.ok();
            retry = Duration::from_millis(500);
        }
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
                    events: base.events.clone(),
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
                    // While the API server is down this follows from the outage, already logged.
                    if API_OUTAGE.active() {
                        tracing::info!("leader lease not renewed during the outage; stopping this term");
                    } else {
                        tracing::warn!("leader lease lost; stopping this term");
                    }
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
                outage.failed("leader election", &e);
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = tokio::time::sleep(retry) => {}
                }
                // A candidate retries at least every renew period (a fifth of the lease), as client-go's
                // leader election retries every `RetryPeriod` (tools/leaderelection/leaderelection.go): after an
                // API-server outage the Lease, which still names this replica, is taken up again within seconds
                // of the server's return instead of after a backoff grown to 30 s.
                retry = (retry * 2).min(election.lease / 5).max(Duration::from_millis(500));
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

    #[tokio::test]
    async fn a_key_requeued_again_and_again_keeps_one_timer_for_its_earliest_time() {
        let q = Arc::new(Queue::default());
        let k = ("ns".to_string(), "done-task".to_string());
        // Every resync of a finished task asks for a look when its TTL runs out: one timer, not one per resync.
        for _ in 0..1000 {
            q.push_after(k.clone(), Duration::from_millis(300));
        }
        q.push_after(k.clone(), Duration::from_millis(20));
        q.push_after(k.clone(), Duration::from_millis(100));
        assert_eq!(q.state.lock().unwrap().scheduled.len(), 1);
        assert_eq!(q.pop().await, k, "due at the earliest time asked for");
        q.done(&k);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let s = q.state.lock().unwrap();
        assert!(s.order.is_empty() && s.scheduled.is_empty(), "the superseded timers did not push it again");
    }

    #[tokio::test]
    async fn a_worker_with_a_full_queue_of_cheap_reconciles_lets_other_tasks_run() {
        use crate::tasks::Registry;
        let server = kube_sim::ApiServer::new();
        let opts = crate::reconciler::ReconcilerOptions::new("test");
        let r = Arc::new(Reconciler::new(server.client(), Arc::new(Registry::default()), opts));
        let (reader, mut writer) = reflector::store::<EtcdOperatorTask>();
        let queue = Arc::new(Queue::default());
        let n = 500;
        for i in 0..n {
            // Finished, due for deletion in an hour: its reconcile makes no API call and never waits.
            let mut t = task(&format!("t{i}"), "e", Some(TaskState::Succeeded));
            t.spec.ttl_seconds_after_finished = Some(3600);
            t.status.as_mut().unwrap().last_operation =
                Some(crate::reconciler::status::operation("NoOp", crate::api::task::OperationState::Completed, ""));
            writer.apply_watcher_event(&Event::Apply(t.clone()));
            queue.push(key_of(&t));
        }
        // Current-thread runtime: the worker is polled first; the probe runs only when the worker gives way.
        let w = tokio::spawn(worker(r.clone(), reader, queue.clone(), Arc::new(Mutex::new(EtcdIndex::default()))));
        let q = queue.clone();
        let left_when_probed = tokio::spawn(async move { q.state.lock().unwrap().order.len() }).await.unwrap();
        assert!(left_when_probed > n / 2, "the worker kept the thread for {} reconciles", n - left_when_probed);
        r.shutdown.cancel();
        w.abort();
    }

    fn task(name: &str, etcd: &str, state: Option<TaskState>) -> EtcdOperatorTask {
        use crate::api::task::{EtcdOperatorTaskSpec, EtcdOperatorTaskStatus, NamespacedName};
        let mut t = EtcdOperatorTask::new(
            name,
            EtcdOperatorTaskSpec {
                type_: "NoOpTask".into(),
                config: None,
                ttl_seconds_after_finished: None,
                owner_etcd_refrence: NamespacedName { name: etcd.into(), namespace: "ns".into() },
            },
        );
        t.metadata.namespace = Some("ns".into());
        t.status = state.map(|s| EtcdOperatorTaskStatus { state: Some(s), ..Default::default() });
        t
    }

    fn sorted(mut keys: Vec<Key>) -> Vec<String> {
        keys.sort();
        keys.into_iter().map(|k| k.1).collect()
    }

    #[test]
    fn the_index_wakes_the_tasks_of_an_etcd_when_one_of_them_moves_on() {
        let mut ix = EtcdIndex::default();
        assert!(ix.apply(&task("a", "e1", None)).is_empty());
        assert!(ix.apply(&task("b", "e1", None)).is_empty(), "a new task wakes nobody");
        assert!(ix.apply(&task("c", "e1", None)).is_empty());
        assert!(ix.apply(&task("x", "e2", None)).is_empty());
        assert_eq!(sorted(ix.mates(&task("b", "e1", None))), ["a", "b", "c"]);
        // A status write that does not change the state (a waiting task's reason) wakes nobody.
        assert!(ix.apply(&task("b", "e1", Some(TaskState::Pending))).is_empty());
        assert_eq!(sorted(ix.apply(&task("a", "e1", Some(TaskState::InProgress)))), ["b", "c"]);
        assert!(ix.apply(&task("a", "e1", Some(TaskState::InProgress))).is_empty());
        assert_eq!(sorted(ix.apply(&task("a", "e1", Some(TaskState::Succeeded)))), ["b", "c"]);
        assert_eq!(sorted(ix.mates(&task("b", "e1", None))), ["b", "c"], "finished tasks leave the index");
        // Deleting an unfinished task wakes the rest of its Etcd.
        assert_eq!(sorted(ix.remove(&("ns".into(), "b".into()))), ["c"]);
        assert!(ix.remove(&("ns".into(), "b".into())).is_empty());
        assert_eq!(sorted(ix.mates(&task("x", "e2", None))), ["x"]);
        ix.rebuild([task("y", "e2", None), task("z", "e2", Some(TaskState::Failed))].iter());
        assert_eq!(sorted(ix.mates(&task("x", "e2", None))), ["y"]);
        assert!(ix.mates(&task("c", "e1", None)).is_empty());
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
