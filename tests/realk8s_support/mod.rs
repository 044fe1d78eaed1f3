//! A real kube-apiserver for tests: the one `DRUIDCTL_REALK8S_KUBECONFIG` names, else a private instance of
//! `../shared/realk8s` (or `DRUIDCTL_REALK8S`) on free ports, wiped (`realk8s.sh reset`) when dropped, also on
//! panic. Under CI (`CI` set) a missing or failing real server fails the test; outside CI the test is skipped
//! with a message, never silently.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// A reachable real API server.
pub struct RealK8s {
    /// Admin kubeconfig (group `system:masters`).
    pub kubeconfig: PathBuf,
    /// Kubeconfig of a user without any RBAC grant.
    pub limited_kubeconfig: PathBuf,
    owned: Option<Instance>,
}

struct Instance {
    script: PathBuf,
    env: Vec<(String, String)>,
}

impl Instance {
    fn run(&self, cmd: &str) -> std::io::Result<Output> {
        Command::new("bash").arg(&self.script).arg(cmd).envs(self.env.iter().cloned()).stdin(Stdio::null()).output()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.run("reset");
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

fn unavailable(what: &str, msg: String) -> Option<RealK8s> {
    if in_ci() {
        panic!("{what}: {msg}");
    }
    eprintln!("{what}: {msg}; SKIPPED (outside CI; under CI this fails)");
    None
}

/// The real API server (with its controller manager) for the test `what`; `None` (skip, with a message) only
/// outside CI when it cannot be had.
pub fn require(what: &str) -> Option<RealK8s> {
    let slug: String = what.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    RealK8s::get(&slug, true)
}

impl RealK8s {
    /// An admin client.
    pub async fn client(&self) -> Client {
        let kc = Kubeconfig::read_from(&self.kubeconfig).expect("realk8s kubeconfig");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.expect("config");
        Client::try_from(cfg).expect("client")
    }

    /// A kubeconfig like the admin one that authenticates with `token` instead (a ServiceAccount's), with
    /// `namespace` as every context's namespace.
    pub fn kubeconfig_with_token(&self, token: &str, namespace: &str, path: &Path) -> PathBuf {
        let mut kc = Kubeconfig::read_from(&self.kubeconfig).expect("realk8s kubeconfig");
        for u in kc.auth_infos.iter_mut() {
            if let Some(a) = u.auth_info.as_mut() {
                a.client_certificate = None;
                a.client_certificate_data = None;
                a.client_key = None;
                a.client_key_data = None;
                a.token = Some(token.to_string().into());
            }
        }
        for c in kc.contexts.iter_mut() {
            if let Some(ctx) = c.context.as_mut() {
                ctx.namespace = Some(namespace.into());
            }
        }
        // JSON is YAML: kubectl and kube-rs read it.
        std::fs::write(path, serde_json::to_string_pretty(&kc).expect("kubeconfig serializes")).expect("write");
        path.to_path_buf()
    }

    /// A private server of its own even when `DRUIDCTL_REALK8S_KUBECONFIG` names a shared one (for tests that
    /// restart it), with `env` added to the script's environment (e.g. `REALK8S_APISERVER_EXTRA_ARGS`).
    pub fn private(name: &str, with_controllers: bool, env: &[(&str, String)]) -> Option<RealK8s> {
        Self::start_private(name, with_controllers, env)
    }

    /// Runs `realk8s.sh ARGS…` on this private server (e.g. `restart-apiserver`); `None` for a shared one.
    pub fn script(&self, args: &[&str]) -> Option<Output> {
        let i = self.owned.as_ref()?;
        Some(
            Command::new("bash")
                .arg(&i.script)
                .args(args)
                .envs(i.env.iter().cloned())
                .stdin(Stdio::null())
                .output()
                .expect("realk8s.sh runs"),
        )
    }

    /// The shared server of `DRUIDCTL_REALK8S_KUBECONFIG`, else a private one (`name` picks its state dir under
    /// the target dir; `with_controllers` starts kube-controller-manager too).
    pub fn get(name: &str, with_controllers: bool) -> Option<RealK8s> {
        if let Some(kc) = std::env::var_os("DRUIDCTL_REALK8S_KUBECONFIG") {
            let kc = PathBuf::from(kc);
            assert!(kc.exists(), "DRUIDCTL_REALK8S_KUBECONFIG={} does not exist", kc.display());
            let limited = kc.with_file_name("kubeconfig-limited");
            return Some(RealK8s { kubeconfig: kc, limited_kubeconfig: limited, owned: None });
        }
        Self::start_private(name, with_controllers, &[])
    }

    fn start_private(name: &str, with_controllers: bool, extra: &[(&str, String)]) -> Option<RealK8s> {
        let what = format!("real API server for {name}");
        let dir = std::env::var_os("DRUIDCTL_REALK8S")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/realk8s"));
        let script = dir.join("realk8s.sh");
        if !script.exists() {
            return unavailable(&what, format!("{} is missing (set DRUIDCTL_REALK8S)", script.display()));
        }
        let state = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("realk8s-{name}"));
        let port = || free_port().to_string();
        let env = vec![
            ("REALK8S_DIR".to_string(), state.display().to_string()),
            ("REALK8S_API_PORT".to_string(), port()),
            ("REALK8S_ETCD_PORT".to_string(), port()),
            ("REALK8S_ETCD_PEER_PORT".to_string(), port()),
            ("REALK8S_KCM_PORT".to_string(), port()),
            ("REALK8S_WITH_KCM".to_string(), if with_controllers { "auto" } else { "0" }.to_string()),
        ];
        let env = env.into_iter().chain(extra.iter().map(|(k, v)| (k.to_string(), v.clone()))).collect();
        let instance = Instance { script, env };
        let _ = instance.run("reset");
        match instance.run("start") {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                let log = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
                return unavailable(&what, format!("realk8s.sh start failed:\n{log}"));
            }
            Err(e) => return unavailable(&what, format!("cannot run realk8s.sh: {e}")),
        }
        Some(RealK8s {
            kubeconfig: state.join("kubeconfig"),
            limited_kubeconfig: state.join("kubeconfig-limited"),
            owned: Some(instance),
        })
    }

    /// `kubectl --kubeconfig ADMIN ARGS…`, stdin from `input`.
    pub fn kubectl(&self, args: &[&str], input: Option<&str>) -> Output {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.unwrap_or_default().as_bytes()).unwrap();
        drop(stdin);
        child.wait_with_output().unwrap()
    }

    /// What a Gardener seed has before any Etcd: etcd-druid's Etcd CRD (Established) and the PriorityClass
    /// `gardener-system-500` that the seed's etcd pods name (the Priority admission plugin refuses pods naming a
    /// missing one). Idempotent (server-side apply).
    pub fn install_seed_prerequisites(&self) {
        let crd = format!("{}/crates/druid-api/crds/druid.gardener.cloud_etcds.yaml", env!("CARGO_MANIFEST_DIR"));
        let out = self.kubectl(&["apply", "--server-side", "-f", &crd], None);
        assert!(out.status.success(), "Etcd CRD: {}", String::from_utf8_lossy(&out.stderr));
        // Right after the create, kubectl (seen with the image's default, v1.32) fails the wait instead of
        // waiting while the CRD has no conditions yet (`.status.conditions accessor error: <nil>`): asked again until Established, 60 s at most.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let out = self.kubectl(
                &["wait", "--for=condition=Established", "--timeout=30s", "crd/etcds.druid.gardener.cloud"],
                None,
            );
            if out.status.success() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "Etcd CRD not Established: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let pc = r#"{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"gardener-system-500"},"value":999998500}"#;
        let out = self.kubectl(&["apply", "--server-side", "-f", "-"], Some(pc));
        assert!(out.status.success(), "PriorityClass: {}", String::from_utf8_lossy(&out.stderr));
    }
}
