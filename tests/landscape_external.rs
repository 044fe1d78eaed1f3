//! The playground against an API server it did not start (`Playground::up` with `external`, `druidctl
//! --kubeconfig F playground up`): the embedded API server stands in for it, served over HTTP in this process
//! with nothing registered for the landscape, so only what works through the API works. `up` installs the CRDs
//! that are missing with server-side apply, works in namespaces of its own and publishes the sidecars'
//! addresses since the server cannot proxy to them; `down` (also after the playground was killed) removes what
//! `up` created and nothing else.
//! Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`, which fails instead).

use std::path::{Path, PathBuf};
use std::time::Duration;

use druidctl::api::Etcd;
use druidctl::tasks::sidecar::{self, ANNOTATION_DIRECT_ADDRESS, Target};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Service};
use kube::Api;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sim::{ApiServer, HttpEndpoint};
use landscape::etcd::process::etcd_children_of_this_process;
use landscape::etcd::require_etcd;
use landscape::playground::BreakTarget;
use landscape::{BreakKind, ExternalServer, Playground, PlaygroundOptions, PlaygroundRecord};
use serde_json::json;

const ETCD_CRD: &str = "etcds.druid.gardener.cloud";

/// An API server with something of somebody else's on it: the Etcd CRD, namespace `garden` with ConfigMap
/// `keep` and Etcd `theirs`.
struct Server {
    server: ApiServer,
    _endpoint: HttpEndpoint,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start() -> Server {
        let server = ApiServer::new();
        let etcd_crd = landscape::upstream_crd_documents()
            .unwrap()
            .into_iter()
            .find(|d| d["metadata"]["name"] == ETCD_CRD)
            .unwrap();
        server.register_crd_yaml(&etcd_crd.to_string()).unwrap();
        let c = server.client();
        let post = PostParams::default();
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "garden"}})).unwrap();
        Api::<Namespace>::all(c.clone()).create(&post, &ns).await.unwrap();
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "keep"}, "data": {"a": "b"}})).unwrap();
        Api::<ConfigMap>::namespaced(c.clone(), "garden").create(&post, &cm).await.unwrap();
        let etcd: Etcd = serde_json::from_value(json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "theirs", "namespace": "garden"},
            "spec": {"replicas": 1, "labels": {"app": "etcd"}, "etcd": {}, "backup": {}}
        }))
        .unwrap();
        Api::<Etcd>::namespaced(c, "garden").create(&post, &etcd).await.unwrap();
        let endpoint = server.serve_http("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, server.kubeconfig_yaml(&endpoint.url, "admin", None)).unwrap();
        Server { server, _endpoint: endpoint, kubeconfig, _dir: dir }
    }

    fn options(&self, state: &Path, prefix: &str) -> PlaygroundOptions {
        let mut opts = PlaygroundOptions::new(state);
        opts.members = 1;
        opts.namespace_prefix = prefix.into();
        opts.external = Some(ExternalServer { kubeconfig: Some(self.kubeconfig.clone()), context: None });
        opts
    }

    fn crds(&self) -> Vec<String> {
        let mut names: Vec<String> = landscape::upstream_crd_documents()
            .unwrap()
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
            .chain(["etcdoperatortasks.druid.gardener.cloud".to_string()])
            .filter(|n| {
                self.server.get_object("apiextensions.k8s.io/v1", "customresourcedefinitions", None, n).is_some()
            })
            .collect();
        names.sort();
        names
    }

    /// What was there before any playground: still exactly there.
    async fn assert_theirs_untouched(&self) {
        let c = self.server.client();
        let cm = Api::<ConfigMap>::namespaced(c.clone(), "garden").get("keep").await.expect("ConfigMap kept");
        assert_eq!(cm.data.unwrap()["a"], "b");
        Api::<Etcd>::namespaced(c, "garden").get("theirs").await.expect("their Etcd kept");
        assert!(self.crds().contains(&ETCD_CRD.to_string()), "the CRD that existed before is kept");
    }

    fn namespaces(&self) -> Vec<String> {
        let mut out = Vec::new();
        for ns in ["default", "garden", "kube-node-lease", "kube-public", "kube-system"] {
            if self.server.get_object("v1", "namespaces", None, ns).is_some() {
                out.push(ns.to_string());
            }
        }
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_removes_what_up_created_on_an_external_server_and_leaves_everything_else() {
    let Some(_) = require_etcd("playground on an external API server") else { return };
    let srv = Server::start().await;
    let state = tempfile::tempdir().unwrap();
    let pg = Playground::up(srv.options(state.path(), "shoot--ext--")).await.expect("playground up");
    assert!(pg.is_external() && pg.embedded_server().is_none());

    // The record: what up created, what it found; the same on disk for `status` and a later `down`.
    let record = pg.record().clone();
    assert_eq!(record.mode, "external");
    assert_eq!(record.created_namespaces, ["shoot--ext--0"]);
    assert_eq!(record.existing_crds, [ETCD_CRD]);
    assert_eq!(record.created_crds.len(), 9, "{:?}", record.created_crds);
    assert!(!record.created_crds.contains(&ETCD_CRD.to_string()));
    assert_eq!(PlaygroundRecord::read(state.path()).as_ref(), Some(&record));
    assert!(record.fallbacks.iter().any(|f| f.capability.contains("proxy")), "{:?}", record.fallbacks);
    let crd = srv
        .server
        .get_object("apiextensions.k8s.io/v1", "customresourcedefinitions", None, "machines.machine.sapcloud.io")
        .unwrap();
    let managers = &crd["metadata"]["managedFields"];
    assert_eq!(managers[0]["manager"], "druidctl-playground", "installed with server-side apply: {managers}");
    assert_eq!(managers[0]["operation"], "Apply");

    pg.wait_ready(Duration::from_secs(60)).await.expect("the Etcd gets ready through the API alone");
    let ns = "shoot--ext--0";
    // The server cannot proxy to the sidecars: their addresses are published instead, and druidctl uses them.
    let c = pg.client();
    let pod = Api::<Pod>::namespaced(c.clone(), ns).get("etcd-main-0").await.unwrap();
    let addr = pg.member(ns, 0).unwrap().backup_addr().to_string();
    assert_eq!(pod.metadata.annotations.unwrap()[ANNOTATION_DIRECT_ADDRESS], addr);
    let svc = Api::<Service>::namespaced(c.clone(), ns).get("etcd-main-client").await.unwrap();
    assert_eq!(svc.metadata.annotations.unwrap()[ANNOTATION_DIRECT_ADDRESS], addr, "the leader's sidecar");
    let proxied = http::Request::post(format!("/api/v1/namespaces/{ns}/services/etcd-main-client:8080/proxy/healthz"))
        .body(Vec::new())
        .unwrap();
    match srv.server.client().request_text(proxied).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 503, "the service proxy cannot reach the sidecar: {s:?}"),
        other => panic!("the service proxy cannot reach the sidecar: {other:?}"),
    }
    let etcd = Api::<Etcd>::namespaced(c.clone(), ns).get("etcd-main").await.unwrap();
    let snap = sidecar::post(&c, &etcd, &Target::Leader, "/snapshot/full").await.expect("direct to the sidecar");
    assert_eq!(snap["kind"], "Full", "{snap}");
    let err = pg.break_(BreakKind::ApiserverRestart, &BreakTarget::default()).await.unwrap_err();
    assert!(err.to_string().contains("unavailable"), "{err}");

    pg.down().await.expect("playground down");
    assert!(etcd_children_of_this_process().is_empty(), "down leaves no etcd behind");
    assert_eq!(srv.namespaces(), ["default", "garden", "kube-node-lease", "kube-public", "kube-system"]);
    assert!(srv.server.get_object("v1", "namespaces", None, ns).is_none(), "the playground's namespace is gone");
    let nodes = Api::<Node>::all(srv.server.client()).list(&ListParams::default()).await.unwrap();
    assert!(nodes.items.is_empty(), "the Nodes of its Machines are gone: {:?}", nodes.items);
    assert_eq!(srv.crds(), [ETCD_CRD], "only the CRDs it created are removed");
    srv.assert_theirs_untouched().await;
    assert!(PlaygroundRecord::read(state.path()).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_refuses_a_namespace_it_did_not_create_and_removes_what_it_had_created() {
    let srv = Server::start().await;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "shoot--taken--0"}})).unwrap();
    Api::<Namespace>::all(srv.server.client()).create(&PostParams::default(), &ns).await.unwrap();
    let state = tempfile::tempdir().unwrap();
    let err = match Playground::up(srv.options(state.path(), "shoot--taken--")).await {
        Ok(_) => panic!("up must refuse an existing namespace"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("namespace shoot--taken--0 already exists"), "{err}");
    assert_eq!(srv.crds(), [ETCD_CRD], "the CRDs it had installed are removed again");
    assert!(srv.server.get_object("v1", "namespaces", None, "shoot--taken--0").is_some(), "not its namespace");
    srv.assert_theirs_untouched().await;
}

fn druidctl(home: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_druidctl"))
        .args(args)
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_playground_shows_its_mode_and_fallbacks_and_down_cleans_up_after_a_killed_one() {
    let Some(_) = require_etcd("playground CLI on an external API server") else { return };
    let srv = Server::start().await;
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("pg");
    let (kc, d) = (srv.kubeconfig.to_str().unwrap().to_string(), dir.to_str().unwrap().to_string());
    let run = move |args: Vec<String>| {
        let home = home.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            druidctl(&home, &args)
        })
    };
    let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let out = run(words(&format!(
        "--kubeconfig {kc} playground --dir {d} up --detach --members 1 --namespace-prefix shoot--cli-- --timeout 60s"
    )))
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = run(words(&format!("playground --dir {d} status"))).await.unwrap();
    let status = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(status.contains("playground running"), "{status}");
    assert!(status.contains("mode: external (API server http://127.0.0.1:"), "{status}");
    assert!(status.contains("namespaces: shoot--cli--0"), "{status}");
    assert!(
        status.contains("created (removed by down): namespaces shoot--cli--0; CRDs certificaterequests"),
        "{status}"
    );
    assert!(status.contains(&format!("existing CRDs used as they are: {ETCD_CRD}")), "{status}");
    assert!(status.contains("backup-api-direct") && status.contains("not enforced"), "{status}");
    assert!(srv.server.get_object("v1", "namespaces", None, "shoot--cli--0").is_some());

    // The playground dies without cleaning up; `down` removes what it had created from its record.
    let pid: i32 = std::fs::read_to_string(dir.join("playground.pid")).unwrap().trim().parse().unwrap();
    // SAFETY: killing the playground process this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let out = run(words(&format!("playground --dir {d} down"))).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("playground stopped (state {d})\n"));
    assert!(srv.server.get_object("v1", "namespaces", None, "shoot--cli--0").is_none(), "namespace removed");
    assert_eq!(srv.crds(), [ETCD_CRD]);
    srv.assert_theirs_untouched().await;
    let etcd_resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"), "etcds");
    let left =
        Api::<DynamicObject>::all_with(srv.server.client(), &etcd_resource).list(&ListParams::default()).await.unwrap();
    assert_eq!(left.items.len(), 1, "only their Etcd is left");
}
