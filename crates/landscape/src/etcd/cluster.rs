//! A set of real etcd members started together on loopback: the building block of tests and of the
//! landscape's kubelet.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::process::remove_dir_if_exists;
use super::{ClusterState, EtcdBinary, EtcdClient, EtcdError, MemberConfig, MemberProcess};

/// Options for [`LocalCluster::start`].
#[derive(Debug, Clone)]
pub struct LocalClusterOptions {
    /// Member name prefix; members are `<prefix>-0`, `<prefix>-1`, ...
    pub name_prefix: String,
    /// `--heartbeat-interval` in ms.
    pub heartbeat_ms: u64,
    /// `--election-timeout` in ms.
    pub election_ms: u64,
    /// How long to wait for all members to serve and a leader to exist.
    pub ready_timeout: Duration,
}

impl Default for LocalClusterOptions {
    fn default() -> Self {
        LocalClusterOptions {
            name_prefix: "etcd".into(),
            heartbeat_ms: 100,
            election_ms: 1000,
            ready_timeout: Duration::from_secs(20),
        }
    }
}

/// Member processes of one cluster under one root directory (`<root>/<name>/data`, `<root>/<name>.log`).
#[derive(Debug)]
pub struct LocalCluster {
    binary: EtcdBinary,
    root: PathBuf,
    opts: LocalClusterOptions,
    members: Vec<MemberProcess>,
}

impl LocalCluster {
    /// Starts `size` members bootstrapping a new cluster and waits until it has a leader.
    pub async fn start(
        binary: &EtcdBinary,
        root: &Path,
        size: usize,
        opts: LocalClusterOptions,
    ) -> Result<LocalCluster, EtcdError> {
        let mut configs: Vec<MemberConfig> = (0..size)
            .map(|i| {
                let name = format!("{}-{i}", opts.name_prefix);
                let mut c = MemberConfig::new(&name, root.join(&name).join("data"), root.join(format!("{name}.log")));
                c.heartbeat_ms = opts.heartbeat_ms;
                c.election_ms = opts.election_ms;
                c
            })
            .collect();
        let initial = configs.iter().map(|c| format!("{}={}", c.name, c.peer_url())).collect::<Vec<_>>().join(",");
        for c in &mut configs {
            c.initial_cluster = initial.clone();
        }
        let mut members = Vec::with_capacity(size);
        for c in configs {
            members.push(MemberProcess::spawn(binary, c)?);
        }
        let cluster = LocalCluster { binary: binary.clone(), root: root.to_path_buf(), opts, members };
        let timeout = cluster.opts.ready_timeout;
        for m in &cluster.members {
            m.wait_serving(timeout).await?;
        }
        cluster.wait_quorate(timeout).await?;
        Ok(cluster)
    }

    /// The binary the members run.
    pub fn binary(&self) -> &EtcdBinary {
        &self.binary
    }

    /// Member `i`.
    pub fn member(&self, i: usize) -> &MemberProcess {
        &self.members[i]
    }

    /// All members, in ordinal order.
    pub fn members(&self) -> &[MemberProcess] {
        &self.members
    }

    /// A client for member `i`.
    pub fn client(&self, i: usize) -> EtcdClient {
        self.members[i].client()
    }

    /// A client for the first running member.
    pub fn any_client(&self) -> Option<EtcdClient> {
        self.members.iter().find(|m| m.is_running()).map(|m| m.client())
    }

    /// Whether some running member reports a healthy (quorate) cluster.
    pub async fn is_quorate(&self) -> bool {
        for m in self.members.iter().filter(|m| m.is_running()) {
            if m.client().with_timeout(Duration::from_secs(1)).is_healthy().await {
                return true;
            }
        }
        false
    }

    /// Waits until the cluster is quorate.
    pub async fn wait_quorate(&self, timeout: Duration) -> Result<(), EtcdError> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.is_quorate().await {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let m = &self.members[0];
                return Err(EtcdError::NotReady { name: m.name(), timeout, log: m.log_file() });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Kills member `i` and removes its data directory: its data is permanently gone.
    pub fn destroy_member_data(&self, i: usize) -> Result<(), EtcdError> {
        let m = &self.members[i];
        m.kill();
        remove_dir_if_exists(&m.config().data_dir)
    }

    /// Adds a new learner through a running member and starts it; returns its index and member ID.
    pub async fn add_learner(&mut self) -> Result<(usize, u64), EtcdError> {
        let i = self.members.len();
        let name = format!("{}-{i}", self.opts.name_prefix);
        let mut cfg =
            MemberConfig::new(&name, self.root.join(&name).join("data"), self.root.join(format!("{name}.log")));
        cfg.heartbeat_ms = self.opts.heartbeat_ms;
        cfg.election_ms = self.opts.election_ms;
        cfg.initial_cluster_state = ClusterState::Existing;
        let client = self.any_client().ok_or_else(|| EtcdError::Unavailable {
            endpoint: "-".into(),
            message: "no running member to add a learner through".into(),
        })?;
        let added = add_member_retrying(&client, &[cfg.peer_url()], true, self.opts.ready_timeout).await?;
        let members = client.member_list().await?;
        cfg.initial_cluster = initial_cluster_for_join(&members, added.id, &name);
        let p = MemberProcess::spawn(&self.binary, cfg)?;
        p.wait_serving(self.opts.ready_timeout).await?;
        self.members.push(p);
        Ok((i, added.id))
    }

    /// Promotes learner `id`, retrying while etcd says it is not yet in sync.
    pub async fn promote_when_synced(&self, id: u64, timeout: Duration) -> Result<(), EtcdError> {
        promote_when_synced(self, id, timeout).await
    }

    /// Stops every member (SIGKILL).
    pub fn kill_all(&self) {
        for m in &self.members {
            m.kill();
        }
    }
}

async fn promote_when_synced(cluster: &LocalCluster, id: u64, timeout: Duration) -> Result<(), EtcdError> {
    let deadline = Instant::now() + timeout;
    loop {
        let client = cluster
            .any_client()
            .ok_or_else(|| EtcdError::Unavailable { endpoint: "-".into(), message: "no running member".into() })?;
        match client.member_promote(id).await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(error = %e, "learner not promotable yet");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Runs `op` until it succeeds, fails with a non-transient error, or `timeout` passes; transient errors
/// ([`EtcdError::is_unavailable`]: timeouts, no leader) are retried — elections on a loaded machine
/// take a moment.
pub async fn retry_transient<T, F, Fut>(timeout: Duration, mut op: F) -> Result<T, EtcdError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, EtcdError>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match op().await {
            Err(e) if e.is_unavailable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// MemberAdd, retried while etcd refuses with "unhealthy cluster": with strict reconfiguration checks
/// (the default) a member accepts MemberAdd only after it has been connected to every voting member for
/// 5 s, which is not yet the case right after a start or a removal.
pub async fn add_member_retrying(
    client: &EtcdClient,
    peer_urls: &[String],
    learner: bool,
    timeout: Duration,
) -> Result<super::Member, EtcdError> {
    let deadline = Instant::now() + timeout;
    loop {
        match client.member_add(peer_urls, learner).await {
            Err(EtcdError::Server { message, .. })
                if message.contains("unhealthy cluster") && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => return other,
        }
    }
}

/// `--initial-cluster` for a member joining an existing cluster: every member that has a name, plus
/// the joining member (`joining_id`, which has no name until it starts) under `joining_name`.
pub fn initial_cluster_for_join(members: &[super::Member], joining_id: u64, joining_name: &str) -> String {
    members
        .iter()
        .filter_map(|m| {
            let name = if m.id == joining_id { joining_name } else { m.name.as_str() };
            let url = m.peer_urls.first()?;
            (!name.is_empty()).then(|| format!("{name}={url}"))
        })
        .collect::<Vec<_>>()
        .join(",")
}
