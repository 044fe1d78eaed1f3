//! The end-to-end harness: a ready playground (landscape with real etcd processes) on the embedded API server,
//! or, when `DRUIDCTL_TEST_KUBECONFIG` is set, on that external API server (context `DRUIDCTL_TEST_CONTEXT`,
//! else the kubeconfig's current one). The same test body runs in both modes.
//!
//! On an external server every test works in namespaces of its own (`shoot--e2e-<random>--0`, …) that are
//! removed afterwards, also when the test panics: [`E2e`]'s drop stops the landscape (every etcd process) and
//! removes what the playground created. The CRDs are installed once per server by the harness (field manager
//! `druidctl-e2e`) and kept, so that concurrent tests never remove them from under each other.
//!
//! Tests that need powers only the embedded server has (fault injection, API server restarts, the request log,
//! admission hooks, extra users) ask [`E2e::embedded`] and say why; against an external server they stop there.
#![allow(dead_code)]

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube_sim::ApiServer;
use landscape::external::crd_documents;
use landscape::{ExternalServer, Playground, PlaygroundOptions};

/// Kubeconfig of the external API server to run against.
pub const KUBECONFIG_ENV: &str = "DRUIDCTL_TEST_KUBECONFIG";
/// Its context (optional).
pub const CONTEXT_ENV: &str = "DRUIDCTL_TEST_CONTEXT";

/// The external API server of the environment, if any.
pub fn external_server() -> Option<ExternalServer> {
    let kubeconfig = std::env::var_os(KUBECONFIG_ENV).filter(|v| !v.is_empty())?;
    Some(ExternalServer {
        kubeconfig: Some(PathBuf::from(kubeconfig)),
        context: std::env::var(CONTEXT_ENV).ok().filter(|v| !v.is_empty()),
    })
}

/// A ready playground for one test. Derefs to [`Playground`].
pub struct E2e {
    pg: Option<Playground>,
    state: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl E2e {
    /// A ready playground with `members` members; `tweak` adjusts the options (the namespaces and the server
    /// are the harness's).
    pub async fn start(members: i32, tweak: impl FnOnce(&mut PlaygroundOptions)) -> E2e {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut e2e = Self::start_in(dir.path(), members, tweak).await;
        e2e._dir = Some(dir);
        e2e
    }

    /// Like [`E2e::start`], with the state directory `<root>/playground` (the caller keeps `root`).
    pub async fn start_in(root: &Path, members: i32, tweak: impl FnOnce(&mut PlaygroundOptions)) -> E2e {
        let state = root.join("playground");
        let mut opts = PlaygroundOptions::new(&state);
        opts.members = members;
        tweak(&mut opts);
        if let Some(ext) = external_server() {
            install_crds(&ext).await;
            let id = uuid::Uuid::new_v4().simple().to_string();
            opts.namespace_prefix = format!("shoot--e2e-{}--", &id[..10]);
            opts.external = Some(ext);
        }
        // From here on a panic drops the guard, which removes whatever `up` created.
        let mut e2e = E2e { pg: None, state, _dir: None };
        e2e.pg = Some(Playground::up(opts).await.expect("playground up"));
        e2e.wait_ready(Duration::from_secs(60)).await.expect("etcd ready");
        e2e
    }

    /// Whether the test runs against an external API server.
    pub fn external() -> bool {
        external_server().is_some()
    }

    /// The first namespace.
    pub fn namespace(&self) -> String {
        self.namespaces()[0].clone()
    }

    /// The embedded API server, for a test that needs one of its powers (`why`). Against an external server
    /// the reason is printed and `None` returned: the test ends there.
    pub fn embedded(&self, why: &str) -> Option<&ApiServer> {
        let server = self.embedded_server();
        if server.is_none() {
            eprintln!("not run against an external API server: {why}");
        }
        server
    }

    /// Stops the playground and removes what it created; panics when that fails.
    pub async fn down(mut self) {
        let pg = self.pg.take().expect("playground runs");
        pg.down().await.expect("playground down");
    }

    /// The state directory (kubeconfig, record).
    pub fn state_dir(&self) -> &Path {
        &self.state
    }
}

impl Deref for E2e {
    type Target = Playground;
    fn deref(&self) -> &Playground {
        self.pg.as_ref().expect("playground runs")
    }
}

impl Drop for E2e {
    fn drop(&mut self) {
        let Some(pg) = self.pg.take() else { return };
        let external = pg.is_external();
        // Kills every etcd process and stops the actors.
        drop(pg);
        if external {
            // Drop may run on the test's runtime, which cannot be blocked on: clean up from a thread of its own,
            // through the record in the state directory.
            let state = self.state.clone();
            let cleaned = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                rt.block_on(Playground::down_detached(&state, Duration::from_secs(60)))
            })
            .join();
            if !matches!(cleaned, Ok(Ok(_))) {
                eprintln!("e2e: removing the playground's namespaces from the external server failed: {cleaned:?}");
            }
        }
    }
}

/// Applies every CRD the landscape needs (idempotent; concurrent tests apply the same content) and waits until
/// they are Established.
async fn install_crds(ext: &ExternalServer) {
    let opts = druidctl::kube::AccessOptions {
        kubeconfig: ext.kubeconfig.clone(),
        context: ext.context.clone(),
        namespace: None,
        request_timeout: None,
        prefer_in_cluster: false,
        slow_answer: None,
    };
    let client = druidctl::kube::connect(&opts).await.expect("connect to the external API server").client;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for doc in crd_documents().expect("CRD documents") {
        let name = doc["metadata"]["name"].as_str().unwrap().to_string();
        // Tests start concurrently: two applies may race to create the same CRD; the loser tries again.
        let mut attempt = 0;
        while let Err(e) = api.patch(&name, &PatchParams::apply("druidctl-e2e").force(), &Patch::Apply(&doc)).await {
            attempt += 1;
            match e {
                kube::Error::Api(s) if s.code == 409 && attempt < 5 => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                e => panic!("apply CRD {name}: {e}"),
            }
        }
        druidctl::kube::install::wait_established(&client, &name, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("CRD {name} established: {e}"));
    }
}
