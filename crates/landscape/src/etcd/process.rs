//! A supervisor for one real etcd member process on loopback (or, built with [`EtcdBackend::Simulated`], for a
//! simulated member: [`super::simulated`]).
//!
//! Leak-proofing, in three layers: every child runs in its own process group and is killed (SIGKILL to
//! the group) when its [`MemberProcess`] is dropped; every child gets `PR_SET_PDEATHSIG=SIGKILL` so the
//! kernel kills it when this process dies, even on `kill -9`; and children are spawned from one
//! long-lived thread, because the death signal fires when the *spawning thread* exits.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::client::EtcdClient;
use super::ports::free_port;
use super::simulated::SimulatedProcess;
use super::{EtcdBackend, EtcdBinary, EtcdError};

/// `--initial-cluster-state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterState {
    /// Bootstrap a new cluster.
    New,
    /// Join an existing cluster (the member was added with MemberAdd first).
    Existing,
}

impl ClusterState {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterState::New => "new",
            ClusterState::Existing => "existing",
        }
    }
}

/// How to start one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberConfig {
    /// `--name`.
    pub name: String,
    /// `--data-dir`.
    pub data_dir: PathBuf,
    /// Loopback client port.
    pub client_port: u16,
    /// Loopback peer port.
    pub peer_port: u16,
    /// `--initial-cluster`, `name=http://127.0.0.1:port,...`.
    pub initial_cluster: String,
    /// `--initial-cluster-state`.
    pub initial_cluster_state: ClusterState,
    /// `--initial-cluster-token`.
    pub initial_cluster_token: String,
    /// `--heartbeat-interval` in milliseconds.
    pub heartbeat_ms: u64,
    /// `--election-timeout` in milliseconds.
    pub election_ms: u64,
    /// `--snapshot-count`, when set.
    pub snapshot_count: Option<u64>,
    /// `--quota-backend-bytes`, when set.
    pub quota_backend_bytes: Option<i64>,
    /// `--metrics` (`basic` or `extensive`), when set.
    pub metrics: Option<String>,
    /// `--auto-compaction-mode` and `--auto-compaction-retention`, when set.
    pub auto_compaction: Option<(String, String)>,
    /// Where stdout and stderr of the process are appended.
    pub log_file: PathBuf,
    /// An additional `https://` client listener, beside the plain-HTTP one (`None`: plain HTTP only).
    pub client_tls: Option<ClientTls>,
}

/// A client TLS listener: etcd serves `https://127.0.0.1:<port>` with `--cert-file`/`--key-file` (loaded on
/// start only, as in real etcd), while the plain `http://` client URL keeps working.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// Loopback port of the TLS listener.
    pub port: u16,
    /// PEM certificate (chain) the member serves.
    pub cert_file: PathBuf,
    /// PEM private key of that certificate.
    pub key_file: PathBuf,
}

impl ClientTls {
    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

impl MemberConfig {
    /// A single-member bootstrap config with fresh ports, fast elections, logging to `log_file`.
    pub fn new(name: &str, data_dir: impl Into<PathBuf>, log_file: impl Into<PathBuf>) -> MemberConfig {
        let peer_port = free_port();
        MemberConfig {
            name: name.to_string(),
            data_dir: data_dir.into(),
            client_port: free_port(),
            peer_port,
            initial_cluster: format!("{name}=http://127.0.0.1:{peer_port}"),
            initial_cluster_state: ClusterState::New,
            initial_cluster_token: "etcd-cluster".to_string(),
            heartbeat_ms: 100,
            election_ms: 1000,
            snapshot_count: None,
            quota_backend_bytes: None,
            metrics: None,
            auto_compaction: None,
            log_file: log_file.into(),
            client_tls: None,
        }
    }

    /// `http://127.0.0.1:<client port>`.
    pub fn client_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// `http://127.0.0.1:<peer port>`.
    pub fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    /// The command-line arguments for etcd.
    pub fn args(&self) -> Vec<OsString> {
        let client = self.client_url();
        let peer = self.peer_url();
        let listen = match &self.client_tls {
            Some(tls) => format!("{client},{}", tls.url()),
            None => client.clone(),
        };
        let mut args: Vec<OsString> = vec![
            "--name".into(),
            self.name.clone().into(),
            "--data-dir".into(),
            self.data_dir.clone().into(),
            "--listen-client-urls".into(),
            listen.into(),
            "--advertise-client-urls".into(),
            client.into(),
            "--listen-peer-urls".into(),
            peer.clone().into(),
            "--initial-advertise-peer-urls".into(),
            peer.into(),
            "--initial-cluster".into(),
            self.initial_cluster.clone().into(),
            "--initial-cluster-state".into(),
            self.initial_cluster_state.as_str().into(),
            "--initial-cluster-token".into(),
            self.initial_cluster_token.clone().into(),
            "--heartbeat-interval".into(),
            self.heartbeat_ms.to_string().into(),
            "--election-timeout".into(),
            self.election_ms.to_string().into(),
            // JSON lines, as etcd 3.5+ (and etcd-druid's etcd-wrapper) log by default; 3.4 defaults to capnslog.
            "--logger".into(),
            "zap".into(),
        ];
        if let Some(n) = self.snapshot_count {
            args.push("--snapshot-count".into());
            args.push(n.to_string().into());
        }
        if let Some(n) = self.quota_backend_bytes {
            args.push("--quota-backend-bytes".into());
            args.push(n.to_string().into());
        }
        if let Some(m) = &self.metrics {
            args.push("--metrics".into());
            args.push(m.into());
        }
        if let Some((mode, retention)) = &self.auto_compaction {
            args.extend(["--auto-compaction-mode".into(), mode.into()]);
            args.extend(["--auto-compaction-retention".into(), retention.into()]);
        }
        if let Some(tls) = &self.client_tls {
            args.extend([
                "--cert-file".into(),
                tls.cert_file.clone().into(),
                "--key-file".into(),
                tls.key_file.clone().into(),
            ]);
        }
        args
    }
}

/// One etcd member process (or none, while stopped). Killed on drop.
#[derive(Debug)]
pub struct MemberProcess {
    binary: PathBuf,
    config: Mutex<MemberConfig>,
    child: Mutex<Option<Child>>,
    starts: Mutex<u32>,
    /// Set when this member is simulated ([`EtcdBackend::Simulated`]): no process, an in-process server.
    simulated: Option<SimulatedProcess>,
}

impl MemberProcess {
    /// Spawns etcd with `config`; does not wait until it serves (see [`MemberProcess::wait_serving`]).
    pub fn spawn(binary: &EtcdBinary, config: MemberConfig) -> Result<MemberProcess, EtcdError> {
        let p = MemberProcess {
            binary: binary.etcd.clone(),
            config: Mutex::new(config),
            child: Mutex::new(None),
            starts: Mutex::new(0),
            simulated: None,
        };
        p.start()?;
        Ok(p)
    }

    /// Like [`MemberProcess::spawn`], running a real process or a simulated member as `backend` says.
    pub fn spawn_with(backend: &EtcdBackend, config: MemberConfig) -> Result<MemberProcess, EtcdError> {
        let p = MemberProcess::stopped_with(backend, config);
        p.start()?;
        Ok(p)
    }

    /// Like [`MemberProcess::stopped`], for a real process or a simulated member as `backend` says.
    pub fn stopped_with(backend: &EtcdBackend, config: MemberConfig) -> MemberProcess {
        match backend {
            EtcdBackend::Real(binary) => MemberProcess::stopped(binary, config),
            EtcdBackend::Simulated { .. } => MemberProcess {
                binary: PathBuf::from("(simulated)"),
                config: Mutex::new(config),
                child: Mutex::new(None),
                starts: Mutex::new(0),
                simulated: Some(SimulatedProcess::default()),
            },
        }
    }

    /// Whether this is a simulated member rather than an etcd process.
    pub fn is_simulated(&self) -> bool {
        self.simulated.is_some()
    }

    /// A supervisor that has not started anything yet.
    pub fn stopped(binary: &EtcdBinary, config: MemberConfig) -> MemberProcess {
        MemberProcess {
            binary: binary.etcd.clone(),
            config: Mutex::new(config),
            child: Mutex::new(None),
            starts: Mutex::new(0),
            simulated: None,
        }
    }

    /// The current config.
    pub fn config(&self) -> MemberConfig {
        self.config.lock().expect("config").clone()
    }

    /// Changes the config used by the next start.
    pub fn update_config(&self, f: impl FnOnce(&mut MemberConfig)) {
        f(&mut self.config.lock().expect("config"));
    }

    /// Member name.
    pub fn name(&self) -> String {
        self.config.lock().expect("config").name.clone()
    }

    /// Client URL.
    pub fn client_url(&self) -> String {
        self.config.lock().expect("config").client_url()
    }

    /// Peer URL.
    pub fn peer_url(&self) -> String {
        self.config.lock().expect("config").peer_url()
    }

    /// Log file.
    pub fn log_file(&self) -> PathBuf {
        self.config.lock().expect("config").log_file.clone()
    }

    /// A client for this member only.
    pub fn client(&self) -> EtcdClient {
        EtcdClient::new(&self.client_url())
    }

    /// How often the process was started.
    pub fn starts(&self) -> u32 {
        *self.starts.lock().expect("starts")
    }

    /// Starts the process if it is not running.
    pub fn start(&self) -> Result<(), EtcdError> {
        if let Some(sim) = &self.simulated {
            if sim.start(&self.config())? {
                *self.starts.lock().expect("starts") += 1;
            }
            return Ok(());
        }
        let mut child = self.child.lock().expect("child");
        if let Some(c) = child.as_mut() {
            if c.try_wait().ok().flatten().is_none() {
                return Ok(());
            }
            unregister(c.id());
        }
        let cfg = self.config();
        if let Some(dir) = cfg.log_file.parent() {
            std::fs::create_dir_all(dir).map_err(|e| EtcdError::io("create log dir", dir, e))?;
        }
        let spawned = spawn_on_spawner_thread(SpawnRequest {
            program: self.binary.clone(),
            args: cfg.args(),
            log_file: cfg.log_file.clone(),
        })
        .map_err(|source| EtcdError::Spawn { name: cfg.name.clone(), source })?;
        register(spawned.id());
        *child = Some(spawned);
        *self.starts.lock().expect("starts") += 1;
        Ok(())
    }

    /// Process id while running.
    pub fn pid(&self) -> Option<u32> {
        let mut child = self.child.lock().expect("child");
        let c = child.as_mut()?;
        c.try_wait().ok().flatten().is_none().then(|| c.id())
    }

    /// Whether the process is alive.
    pub fn is_running(&self) -> bool {
        if let Some(sim) = &self.simulated {
            return sim.is_running();
        }
        self.pid().is_some()
    }

    /// Exit status of the last process, once it exited.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        if let Some(sim) = &self.simulated {
            return sim.exit_status();
        }
        let mut child = self.child.lock().expect("child");
        child.as_mut()?.try_wait().ok().flatten()
    }

    /// SIGKILL, then reap. A no-op when not running.
    pub fn kill(&self) {
        if let Some(sim) = &self.simulated {
            sim.kill();
        }
        let mut child = self.child.lock().expect("child");
        if let Some(mut c) = child.take() {
            kill_group(c.id(), libc::SIGKILL);
            let _ = c.kill();
            let _ = c.wait();
            unregister(c.id());
        }
    }

    /// SIGTERM, wait up to `grace` for a clean exit, then SIGKILL.
    pub async fn stop(&self, grace: Duration) {
        let pid = self.pid();
        if let Some(pid) = pid {
            kill_group(pid, libc::SIGTERM);
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline && self.is_running() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        self.kill();
    }

    /// Kills the process (if running) and starts it again with the current config.
    pub fn restart(&self) -> Result<(), EtcdError> {
        self.kill();
        self.start()
    }

    /// Waits until the member answers a status request on its client port (it need not have a leader).
    pub async fn wait_serving(&self, timeout: Duration) -> Result<(), EtcdError> {
        let client = self.client().with_timeout(Duration::from_millis(500));
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit_status() {
                return Err(EtcdError::ExitedEarly {
                    name: self.name(),
                    status: status.to_string(),
                    log: self.log_file(),
                });
            }
            if client.status().await.is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(EtcdError::NotReady { name: self.name(), timeout, log: self.log_file() });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Removes the data directory (the process should be stopped first).
    pub fn wipe_data(&self) -> Result<(), EtcdError> {
        let dir = self.config().data_dir;
        remove_dir_if_exists(&dir)
    }
}

impl Drop for MemberProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Removes a directory tree; a missing directory is fine.
pub fn remove_dir_if_exists(dir: &Path) -> Result<(), EtcdError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(EtcdError::io("remove", dir, e)),
    }
}

fn kill_group(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) on a process group we created (the child is its group leader).
    unsafe {
        libc::kill(-(pid as libc::pid_t), signal);
    }
}

fn live() -> &'static Mutex<HashSet<u32>> {
    static LIVE: OnceLock<Mutex<HashSet<u32>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
}

fn register(pid: u32) {
    live().lock().expect("live pids").insert(pid);
}

fn unregister(pid: u32) {
    live().lock().expect("live pids").remove(&pid);
}

/// Process ids of member processes started by this process that have not been killed or reaped.
pub fn live_member_pids() -> Vec<u32> {
    let mut v: Vec<u32> = live().lock().expect("live pids").iter().copied().collect();
    v.sort_unstable();
    v
}

/// SIGKILLs every member process this process started (for signal handlers and `playground down`).
pub fn kill_all_members() {
    for pid in live_member_pids() {
        kill_group(pid, libc::SIGKILL);
    }
}

/// Child processes of this process whose executable name is `etcd` (read from `/proc`); used by
/// tests to prove that nothing leaked.
pub fn etcd_children_of_this_process() -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // pid (comm) state ppid ...
        let Some(close) = stat.rfind(')') else { continue };
        let comm = &stat[stat.find('(').map_or(0, |i| i + 1)..close];
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let (Some(state), Some(ppid)) = (rest.first(), rest.get(1)) else { continue };
        if comm == "etcd" && *state != "Z" && ppid.parse::<u32>().ok() == Some(me) {
            out.push(pid);
        }
    }
    out
}

struct SpawnRequest {
    program: PathBuf,
    args: Vec<OsString>,
    log_file: PathBuf,
}

type SpawnReply = mpsc::Sender<std::io::Result<Child>>;

fn spawn_on_spawner_thread(req: SpawnRequest) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<(SpawnRequest, SpawnReply)>>> = OnceLock::new();
    let tx = SPAWNER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<(SpawnRequest, SpawnReply)>();
            std::thread::Builder::new()
                .name("etcd-spawner".into())
                .spawn(move || {
                    for (req, reply) in rx {
                        let _ = reply.send(spawn_now(req));
                    }
                })
                .expect("spawn etcd-spawner thread");
            Mutex::new(tx)
        })
        .lock()
        .expect("spawner")
        .clone();
    let (reply_tx, reply_rx) = mpsc::channel();
    tx.send((req, reply_tx)).map_err(|_| std::io::Error::other("etcd spawner thread is gone"))?;
    reply_rx.recv().map_err(|_| std::io::Error::other("etcd spawner thread is gone"))?
}

fn spawn_now(req: SpawnRequest) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let log = OpenOptions::new().create(true).append(true).open(&req.log_file)?;
    let log2 = log.try_clone()?;
    let parent = std::process::id() as libc::pid_t;
    let mut cmd = Command::new(&req.program);
    cmd.args(&req.args).stdin(Stdio::null()).stdout(log).stderr(log2).process_group(0);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("ETCD") {
            cmd.env_remove(k);
        }
    }
    // SAFETY: only async-signal-safe calls (prctl, getppid, _exit) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    cmd.spawn()
}
