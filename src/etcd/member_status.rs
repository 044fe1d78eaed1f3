//! Reading each member's own view: etcd's Maintenance Status (`etcdctl endpoint status`) and the alarm list
//! (`etcdctl alarm list`), every member concurrently and each bounded by [`MEMBER_READ_TIMEOUT`]. A member that
//! cannot be reached is a reading too ([`Unreachable`], with the cause), never an error of the whole read.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{AlarmAction, AlarmType, Client as EtcdClient, ConnectOptions, TlsOptions};
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use crate::api::Etcd;
use crate::kube::ObjectKey;
use crate::tasks::etcd_access::{self, Route};
use crate::tasks::step::StepError;

/// How long one member's reads (connect, status, alarm list) may take together: a member that has not answered
/// by then is reported unreachable and the rest goes on.
pub const MEMBER_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// How long after a first reading that found a member behind the leader `status` reads it (and the leader)
/// again, to tell a member catching up from one lagging.
pub const LAG_READ_AGAIN_AFTER: Duration = Duration::from_millis(1500);

/// What one member's etcd says about itself (etcd's `StatusResponse`, in plain numbers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// The answering member's ID.
    pub member_id: u64,
    /// The cluster ID in the response header.
    pub cluster_id: u64,
    /// The leader this member follows (0: none).
    pub leader: u64,
    /// etcd server version.
    pub version: String,
    /// Size of the backend database file (bytes).
    pub db_size: i64,
    /// Bytes of the database in use (the rest is free pages a defragmentation returns).
    pub db_size_in_use: i64,
    /// The quota etcd enforces (bytes), where etcd reports it (3.6 and later).
    pub db_size_quota: Option<i64>,
    /// Raft term.
    pub raft_term: u64,
    /// Raft index (committed).
    pub raft_index: u64,
    /// Raft index applied to the keyspace.
    pub raft_applied_index: u64,
    /// Whether the member is a learner (not yet promoted to a voting member).
    pub is_learner: bool,
    /// Errors the member reports about itself (e.g. an alarm raised).
    pub errors: Vec<String>,
    /// Keyspace revision in the response header.
    pub revision: i64,
}

impl MemberStatus {
    /// Whether this member says it is the leader.
    pub fn is_leader(&self) -> bool {
        self.leader != 0 && self.leader == self.member_id
    }
}

/// The kind of an etcd alarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AlarmKind {
    /// The database reached its quota: the cluster accepts only reads and deletes.
    #[serde(rename = "NOSPACE")]
    NoSpace,
    /// A corruption check found a member whose keyspace differs.
    #[serde(rename = "CORRUPT")]
    Corrupt,
}

impl AlarmKind {
    /// etcd's name of the alarm.
    pub fn as_str(self) -> &'static str {
        match self {
            AlarmKind::NoSpace => "NOSPACE",
            AlarmKind::Corrupt => "CORRUPT",
        }
    }
    /// etcd_client's alarm type.
    pub fn alarm_type(self) -> AlarmType {
        match self {
            AlarmKind::NoSpace => AlarmType::Nospace,
            AlarmKind::Corrupt => AlarmType::Corrupt,
        }
    }
}

/// One alarm raised in the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Alarm {
    /// The member the alarm was raised for.
    pub member_id: u64,
    /// The alarm.
    pub kind: AlarmKind,
}

/// Why a member's etcd was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum UnreachableCause {
    /// The member has no pod.
    NoPod,
    /// RBAC denies `create pods/portforward`, which the route through the API server needs.
    PortForwardForbidden,
    /// The client TLS secrets the Etcd names could not be read.
    TlsSecret,
    /// The member did not answer (down, not listening, or the route to it failed).
    NotAnswering,
    /// The member did not answer within [`MEMBER_READ_TIMEOUT`].
    Timeout,
}

/// A member whose etcd was not read, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Unreachable {
    /// The cause.
    pub cause: UnreachableCause,
    /// One sentence with the detail.
    pub detail: String,
}

/// One member's reading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberReading {
    /// Pod name.
    pub pod: String,
    /// How the member was (or would have been) reached.
    pub via: String,
    /// What etcd said, or why nothing was read.
    pub outcome: Result<MemberStatus, Unreachable>,
    /// The cluster's alarms as this member listed them (`None`: not read).
    pub alarms: Option<Vec<Alarm>>,
}

/// etcd's view of one Etcd: one reading per member pod, in ordinal order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EtcdObservation {
    /// One reading per expected member.
    pub members: Vec<MemberReading>,
    /// The reading a few seconds before (the previous refresh of `status --watch`, or the first of two readings
    /// when a member was behind): whether a member that trails the leader is catching up or falling behind.
    #[serde(skip)]
    pub earlier: Option<Box<EtcdObservation>>,
}

impl EtcdObservation {
    /// The cluster's alarms: the union of what the members that answered listed (`None`: none listed them).
    pub fn alarms(&self) -> Option<Vec<Alarm>> {
        let mut listed = self.members.iter().filter_map(|m| m.alarms.as_ref()).peekable();
        listed.peek()?;
        let mut all: Vec<Alarm> = Vec::new();
        for a in listed.flatten() {
            if !all.contains(a) {
                all.push(a.clone());
            }
        }
        Some(all)
    }

    /// The statuses of the members that answered, with their pod names.
    pub fn answered(&self) -> impl Iterator<Item = (&str, &MemberStatus)> {
        self.members.iter().filter_map(|m| m.outcome.as_ref().ok().map(|s| (m.pod.as_str(), s)))
    }
}

/// Turns etcd_client's status answer into plain numbers.
pub fn member_status(s: &etcd_client::StatusResponse) -> MemberStatus {
    let header = s.header();
    MemberStatus {
        member_id: header.map(|h| h.member_id()).unwrap_or(0),
        cluster_id: header.map(|h| h.cluster_id()).unwrap_or(0),
        leader: s.leader(),
        version: s.version().to_string(),
        db_size: s.db_size(),
        db_size_in_use: s.raft_used_db_size(),
        // 0 from servers before 3.6, which do not report it.
        db_size_quota: Some(s.db_size_quota()).filter(|q| *q > 0),
        raft_term: s.raft_term(),
        raft_index: s.raft_index(),
        raft_applied_index: s.raft_applied_index(),
        is_learner: s.is_learner(),
        errors: s.errors().to_vec(),
        revision: header.map(|h| h.revision()).unwrap_or(0),
    }
}

/// The alarms in etcd_client's answer (the `NONE` placeholder left out).
pub fn alarms_of(r: &etcd_client::AlarmResponse) -> Vec<Alarm> {
    r.alarms()
        .iter()
        .filter_map(|a| {
            let kind = match a.alarm() {
                AlarmType::Nospace => AlarmKind::NoSpace,
                AlarmType::Corrupt => AlarmKind::Corrupt,
                AlarmType::None => return None,
            };
            Some(Alarm { member_id: a.member_id(), kind })
        })
        .collect()
}

/// A client for one member, reached by `route`'s URL (a port-forward bridge lives as long as the guard).
pub(crate) struct Reached {
    pub client: EtcdClient,
    pub via: String,
    _bridge: Option<tokio_util::sync::DropGuard>,
}

/// Connects to member pod `pod` of `etcd` with the client TLS `tls` already read.
pub(crate) async fn reach(
    kube: &kube::Client,
    etcd: &Etcd,
    pod: &Pod,
    tls: Option<TlsOptions>,
    timeout: Duration,
) -> Result<Reached, Unreachable> {
    let (url, via, guard) = etcd_access::member_route(kube, etcd, pod).await.map_err(route_unreachable)?;
    let client = connect_to(&url, &via, tls, timeout).await?;
    Ok(Reached { client, via, _bridge: guard })
}

/// A route that could not be opened, as a reading says it.
fn route_unreachable(e: etcd_access::RouteError) -> Unreachable {
    let cause = match e {
        etcd_access::RouteError::PortForwardForbidden { .. } => UnreachableCause::PortForwardForbidden,
        etcd_access::RouteError::Failed(_) => UnreachableCause::NotAnswering,
    };
    Unreachable { cause, detail: e.to_string() }
}

/// A gRPC client of the member at `url` (reached `via`), each call bounded by `timeout`.
async fn connect_to(
    url: &str,
    via: &str,
    tls: Option<TlsOptions>,
    timeout: Duration,
) -> Result<EtcdClient, Unreachable> {
    let mut options = ConnectOptions::new().with_connect_timeout(timeout).with_timeout(timeout);
    if let Some(tls) = tls {
        options = options.with_tls(tls);
    }
    EtcdClient::connect([url], Some(options))
        .await
        .map_err(|e| Unreachable { cause: UnreachableCause::NotAnswering, detail: format!("{via}: {e}") })
}

/// Reads the client TLS of `etcd` as an [`Unreachable`] on failure (a secret that cannot be read).
pub(crate) async fn client_tls(kube: &kube::Client, etcd: &Etcd) -> Result<Option<TlsOptions>, Unreachable> {
    etcd_access::tls_options(kube, etcd).await.map_err(|e| Unreachable {
        cause: UnreachableCause::TlsSecret,
        detail: format!(
            "the client TLS secret cannot be read ({})",
            match e {
                StepError::Transient(s) | StepError::Permanent(s) => s,
            }
        ),
    })
}

/// How a member is reached, for messages, without reaching it.
fn via(etcd: &Etcd, pod: &Pod) -> String {
    match etcd_access::route(etcd, pod, etcd_access::in_cluster()) {
        Route::Direct(url) => url,
        Route::PortForward { pod, port } => format!("a port-forward to {pod}:{port}"),
    }
}

/// The client TLS of one Etcd, read once (in the background, from the moment the Etcd is known) and shared by
/// its members' reads.
pub type SharedTls = Shared<BoxFuture<'static, Result<Option<TlsOptions>, Unreachable>>>;

/// Starts reading the client TLS of `etcd` in the background, bounded by `timeout`; the result is shared.
pub fn start_client_tls(kube: &kube::Client, etcd: &Etcd, timeout: Duration) -> SharedTls {
    let (kube, etcd) = (kube.clone(), etcd.clone());
    let read = tokio::spawn(async move {
        tokio::time::timeout(timeout, client_tls(&kube, &etcd)).await.unwrap_or_else(|_| {
            Err(Unreachable {
                cause: UnreachableCause::Timeout,
                detail: format!("reading the client TLS secret took longer than {}s", timeout.as_secs()),
            })
        })
    });
    async move {
        read.await.unwrap_or_else(|e| {
            Err(Unreachable { cause: UnreachableCause::TlsSecret, detail: format!("reading the client TLS: {e}") })
        })
    }
    .boxed()
    .shared()
}

/// How many members an Etcd is expected to have before it is read, for the connections opened ahead.
const MEMBERS_EXPECTED: usize = 3;

/// A port-forward route opened before the member's pod was read ([`ViewReader::etcds_known`]): its URL, how
/// the member is reached, and the bridge's guard; shared by the reads of that member.
type SharedRoute =
    Shared<BoxFuture<'static, Result<(String, String, Arc<tokio_util::sync::DropGuard>), etcd_access::RouteError>>>;

/// Opens, in the background, the port-forward route to member pod `pod` of `etcd`; the result is shared.
fn start_route(upgrades: &kube::Client, etcd: &Etcd, pod: String) -> SharedRoute {
    let (kube, etcd) = (upgrades.clone(), etcd.clone());
    let port = etcd_access::client_port(&etcd);
    let opening = tokio::spawn(async move {
        let route = etcd_access::port_forward_route(&kube, &etcd, &pod, port).await;
        route.map(|(url, via, guard)| (url, via, Arc::new(guard)))
    });
    async move {
        opening.await.unwrap_or_else(|e| Err(etcd_access::RouteError::Failed(format!("opening the port-forward: {e}"))))
    }
    .boxed()
    .shared()
}

/// Reads one member within `timeout`: the route to it (a port-forward is opened while the TLS secret is still
/// being read, or was opened already: `early`), then status and alarm list at once.
async fn read_member(
    upgrades: &kube::Client,
    etcd: &Etcd,
    pod: &Pod,
    tls: SharedTls,
    early: Option<SharedRoute>,
    timeout: Duration,
) -> MemberReading {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let via = via(etcd, pod);
    let route = async {
        match (early, etcd_access::route(etcd, pod, etcd_access::in_cluster())) {
            (Some(early), Route::PortForward { .. }) => early.await.map(|(url, via, guard)| (url, via, Some(guard))),
            _ => etcd_access::member_route(upgrades, etcd, pod)
                .await
                .map(|(url, via, guard)| (url, via, guard.map(Arc::new))),
        }
    };
    let read = async {
        let (tls, route) = tokio::join!(tls, route);
        // An unreadable secret is said first: without it, even a route would not do.
        let tls = tls?;
        let (url, via, _bridge) = route.map_err(route_unreachable)?;
        let client = connect_to(&url, &via, tls, timeout).await?;
        let (mut for_status, mut for_alarms) = (client.clone(), client);
        // The alarm list is the cluster's; a member that cannot answer it (no leader) still has its status.
        let (status, alarms) =
            tokio::join!(for_status.status(), for_alarms.alarm(AlarmAction::Get, AlarmType::None, None));
        let status =
            status.map_err(|e| Unreachable { cause: UnreachableCause::NotAnswering, detail: format!("{via}: {e}") })?;
        Ok::<_, Unreachable>((member_status(&status), alarms.ok().map(|r| alarms_of(&r))))
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok((status, alarms))) => MemberReading { pod: name, via, outcome: Ok(status), alarms },
        Ok(Err(unreachable)) => MemberReading { pod: name, via, outcome: Err(unreachable), alarms: None },
        Err(_) => MemberReading {
            pod: name,
            outcome: Err(Unreachable {
                cause: UnreachableCause::Timeout,
                detail: format!("{via} did not answer within {}s", timeout.as_secs()),
            }),
            via,
            alarms: None,
        },
    }
}

/// Reads etcd's own view of Etcds as early as their objects allow, so that it costs no round trip after the
/// API reads of `status` but the members' own: [`ViewReader::etcds_known`] starts an Etcd's TLS secret reads as
/// soon as the Etcd is read (while its pods, PVCs and leases are still being listed), and
/// [`ViewReader::observe`] opens each member's port-forward while those reads are still under way.
pub struct ViewReader {
    /// For the secrets (the multiplexed client of the API reads is fine).
    reads: kube::Client,
    /// For port-forwards (a client that can upgrade connections).
    upgrades: kube::Client,
    /// Bound of each member's read, and of the TLS read.
    timeout: Duration,
    /// Up to this many Etcds known at once are read early (`None`: any number).
    early_up_to: Option<usize>,
    /// The TLS reads started, by Etcd.
    tls: std::sync::Mutex<std::collections::HashMap<ObjectKey, SharedTls>>,
    /// The port-forwards opened before the pods were read, by namespace and pod.
    early_routes: std::sync::Mutex<std::collections::HashMap<(String, String), SharedRoute>>,
}

impl ViewReader {
    /// A reader whose member reads are each bounded by `timeout`. `early_up_to`: batches of more Etcds than
    /// this are not read early (`status` asks etcd for a few Etcds of a namespace only, unless told to).
    pub fn new(reads: kube::Client, upgrades: kube::Client, timeout: Duration, early_up_to: Option<usize>) -> Self {
        ViewReader { reads, upgrades, timeout, early_up_to, tls: Default::default(), early_routes: Default::default() }
    }

    /// Starts the client TLS reads of `etcds`, now known, in the background (of those with members and a
    /// client TLS; without it there is nothing to read). Outside the cluster it also opens their members'
    /// port-forwards, which need only the pod names the Etcd gives: a member is reached that way unless its pod
    /// carries the playground's URL annotation, which only the pod list tells, and a port-forward is then
    /// dropped unused.
    pub fn etcds_known(&self, etcds: &[Etcd]) {
        if self.early_up_to.is_some_and(|max| etcds.len() > max) {
            return;
        }
        for etcd in etcds.iter().filter(|e| e.spec.replicas > 0) {
            if etcd.spec.etcd.client_url_tls.is_some() {
                // The read runs in its own task; the handle is kept for the members' reads.
                drop(self.tls_of(etcd));
            }
            if !etcd_access::in_cluster() {
                let ns = etcd.metadata.namespace.clone().unwrap_or_default();
                let names = etcd.managed_names();
                let mut routes = self.early_routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                for i in 0..u32::try_from(etcd.spec.replicas).unwrap_or(0) {
                    let pod = names.pod(i);
                    routes.entry((ns.clone(), pod.clone())).or_insert_with(|| start_route(&self.upgrades, etcd, pod));
                }
            }
        }
    }

    /// How many connections to open ahead for the port-forwards of `etcds` Etcds that will be read early
    /// ([`crate::kube::Cluster::upgrade_client_opening`]): three per Etcd (etcd-druid's usual replicas) outside
    /// the cluster, none inside it, where members are reached by their DNS names.
    pub fn connections_ahead(etcds: usize) -> usize {
        if etcd_access::in_cluster() { 0 } else { etcds * MEMBERS_EXPECTED }
    }

    /// The port-forward to `pod` opened early, if any.
    fn early_route(&self, pod: &Pod) -> Option<SharedRoute> {
        let key = (pod.metadata.namespace.clone().unwrap_or_default(), pod.metadata.name.clone().unwrap_or_default());
        self.early_routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key).cloned()
    }

    /// The TLS read of `etcd`, started now unless it already was.
    fn tls_of(&self, etcd: &Etcd) -> SharedTls {
        let mut started = self.tls.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        started
            .entry(crate::kube::etcds::key_of(etcd))
            .or_insert_with(|| start_client_tls(&self.reads, etcd, self.timeout))
            .clone()
    }

    /// Reads again the members of `etcd` at `ordinals` (the rest of `observation` stays as it was), and keeps
    /// `observation` as the earlier reading of the result.
    pub async fn reread(
        &self,
        etcd: &Etcd,
        pods: &[Pod],
        observation: EtcdObservation,
        ordinals: &[usize],
    ) -> EtcdObservation {
        let mut later = observation.clone();
        let tls = self.tls_of(etcd);
        let reads = ordinals.iter().filter_map(|&i| {
            let name = &observation.members.get(i)?.pod;
            let pod = pods.iter().find(|p| p.metadata.name.as_deref() == Some(name.as_str()))?;
            let tls = tls.clone();
            let early = self.early_route(pod);
            Some(async move { (i, read_member(&self.upgrades, etcd, pod, tls, early, self.timeout).await) })
        });
        for (i, reading) in futures::future::join_all(reads).await {
            later.members[i] = reading;
        }
        later.earlier = Some(Box::new(EtcdObservation { earlier: None, ..observation }));
        later
    }

    /// Reads every member of `etcd` concurrently: `pods` are its member pods as listed (in ordinal order,
    /// missing ones absent); each member is bounded by the reader's timeout. Never fails: what could not be
    /// read says why.
    pub async fn observe(&self, etcd: &Etcd, pods: &[Pod]) -> EtcdObservation {
        let names = etcd.managed_names();
        let replicas = u32::try_from(etcd.spec.replicas.max(0)).unwrap_or(0);
        let has_pods =
            (0..replicas).any(|i| pods.iter().any(|p| p.metadata.name.as_deref() == Some(names.pod(i).as_str())));
        // Without a member pod there is nothing to reach: no request beyond a TLS read started already.
        let tls = if has_pods { Some(self.tls_of(etcd)) } else { None };
        let reads = (0..replicas).map(|i| {
            let pod_name = names.pod(i);
            let pod = pods.iter().find(|p| p.metadata.name.as_deref() == Some(pod_name.as_str()));
            let tls = tls.clone();
            async move {
                match (pod, tls) {
                    (Some(pod), Some(tls)) => {
                        read_member(&self.upgrades, etcd, pod, tls, self.early_route(pod), self.timeout).await
                    }
                    _ => MemberReading {
                        pod: pod_name.clone(),
                        via: String::new(),
                        outcome: Err(Unreachable {
                            cause: UnreachableCause::NoPod,
                            detail: format!("pod {pod_name} does not exist"),
                        }),
                        alarms: None,
                    },
                }
            }
        });
        EtcdObservation { members: futures::future::join_all(reads).await, earlier: None }
    }
}

/// Reads every member of `etcd` concurrently with one client for everything (see [`ViewReader::observe`]).
pub async fn observe(kube: &kube::Client, etcd: &Etcd, pods: &[Pod], timeout: Duration) -> EtcdObservation {
    ViewReader::new(kube.clone(), kube.clone(), timeout, None).observe(etcd, pods).await
}
