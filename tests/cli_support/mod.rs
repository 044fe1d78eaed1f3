//! Shared by the `cli_*` tests: an embedded API server on loopback HTTP with a few Etcds, a kubeconfig in a
//! temp dir, and a runner for the real druidctl binary.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sim::{ApiServer, HttpEndpoint};
use serde_json::{Value, json};

/// Namespace of the kubeconfig's current context.
pub const CONTEXT_NS: &str = "shoot--a";

/// A running fixture cluster.
pub struct Fixture {
    pub server: ApiServer,
    pub endpoint: HttpEndpoint,
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
}

/// The path of the binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_druidctl")
}

pub fn etcd_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"), "etcds")
}

/// An Etcd object valid under the real CRD.
pub fn etcd_json(namespace: &str, name: &str, replicas: i32, annotations: Value) -> Value {
    json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations,
                     "labels": {"role": "main"}},
        "spec": {"replicas": replicas, "labels": {"app": "etcd-statefulset"}, "etcd": {}, "backup": {}}
    })
}

impl Fixture {
    /// Server with the upstream CRDs, namespaces `shoot--a` and `shoot--b`, and Etcds
    /// `shoot--a/etcd-main`, `shoot--a/etcd-events` (spec reconcile suspended), `shoot--b/etcd-other`.
    pub async fn start() -> Fixture {
        let server = ApiServer::new();
        landscape::register_upstream_crds(&server).expect("upstream CRDs register");
        let client = server.client();
        let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        for ns in [CONTEXT_NS, "shoot--b"] {
            let obj = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
            ns_api.create(&PostParams::default(), &obj).await.expect("namespace");
        }
        let fx_etcds = [
            (CONTEXT_NS, "etcd-main", json!({})),
            (CONTEXT_NS, "etcd-events", json!({"druid.gardener.cloud/suspend-etcd-spec-reconcile": "true"})),
            ("shoot--b", "etcd-other", json!({})),
        ];
        for (ns, name, ann) in fx_etcds {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &etcd_resource());
            let obj: DynamicObject = serde_json::from_value(etcd_json(ns, name, 3, ann)).unwrap();
            api.create(&PostParams::default(), &obj).await.expect("etcd");
        }
        let endpoint = server.serve_http("127.0.0.1:0".parse().unwrap()).await.expect("serve");
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("config");
        std::fs::write(&kubeconfig, server.kubeconfig_yaml(&endpoint.url, "admin", Some(CONTEXT_NS))).unwrap();
        Fixture { server, endpoint, dir, kubeconfig }
    }

    /// A kubeconfig for another user (created without any RBAC binding).
    pub fn kubeconfig_for(&self, user: &str) -> PathBuf {
        self.server.add_user(user, &[]);
        let path = self.dir.path().join(format!("config-{user}"));
        std::fs::write(&path, self.server.kubeconfig_yaml(&self.endpoint.url, user, Some(CONTEXT_NS))).unwrap();
        path
    }

    /// Runs druidctl with this kubeconfig, off the async runtime.
    pub async fn run(&self, args: &[&str]) -> Output {
        run_with(bin(), args, &[("KUBECONFIG", self.kubeconfig.to_str().unwrap())], self.dir.path()).await
    }

    /// Mutating requests the server has handled so far.
    pub fn writes(&self) -> Vec<String> {
        self.server
            .request_log()
            .records()
            .into_iter()
            .filter(|r| matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete" | "deletecollection"))
            .map(|r| format!("{} {} {}", r.verb, r.path, r.code))
            .collect()
    }
}

/// Runs `program` with `args` and extra environment, HOME pointing at `home` (no stray ~/.kube/config).
pub async fn run_with(program: &str, args: &[&str], env: &[(&str, &str)], home: &Path) -> Output {
    let program = program.to_string();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let home = home.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(&program);
        cmd.args(&args).env("HOME", &home).env_remove("KUBECONFIG").env_remove("NO_COLOR").env_remove("COMPLETE");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run binary")
    })
    .await
    .unwrap()
}

/// A child process, SIGKILLed and reaped on drop.
pub struct Proc(pub std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `druidctl playground apiserver` with the CRDs in its own process, on `listen`, writing `kubeconfig`; with
/// `reuse`, the tokens and serving certificate an earlier run wrote (a restart). Returns once it accepts
/// connections (it prints where it listens once it does).
pub fn playground_apiserver(kubeconfig: &Path, listen: &str, reuse: bool) -> Proc {
    use std::io::Read;
    use std::process::Stdio;
    let mut cmd = Command::new(bin());
    cmd.args(["playground", "apiserver", "--crds", "--listen", listen, "--kubeconfig-out"]).arg(kubeconfig);
    if reuse {
        cmd.arg("--reuse-tokens");
    }
    let mut child = Proc(cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap());
    let mut first = [0u8; 1];
    let n = child.0.stdout.as_mut().unwrap().read(&mut first).unwrap();
    assert_eq!(n, 1, "playground apiserver exited: {:?}", child.0.try_wait());
    child
}

/// The port of the server a kubeconfig written by `playground apiserver` names.
pub fn port_of(kubeconfig: &Path) -> u16 {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let url = text.lines().find_map(|l| l.trim().strip_prefix("server: ")).unwrap();
    let hostport = url.split("://").nth(1).unwrap_or(url);
    hostport.trim_start_matches("127.0.0.1:").split('/').next().unwrap().parse().unwrap()
}
