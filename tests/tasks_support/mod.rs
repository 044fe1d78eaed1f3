//! Shared by the `tasks_*` tests: a quorate 3-member Etcd with backups on the embedded API server, and a
//! fake leading backup sidecar behind the service proxy that renews the snapshot leases like backup-restore.

#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sim::ApiServer;
use serde_json::{Value, json};

pub const NS: &str = "shoot";
pub const ETCD: &str = "etcd-main";

pub fn etcd_ar() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"), "etcds")
}

/// A quorate 3-member Etcd with backups, its pods, its client Service.
pub async fn landscape() -> ApiServer {
    let server = ApiServer::new();
    landscape::register_upstream_crds(&server).unwrap();
    server.register_crd_yaml(&serde_json::to_string(&druidctl::api::task::crd()).unwrap()).unwrap();
    let c = server.client();
    let post = PostParams::default();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(c.clone())
        .create(&post, &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap())
        .await
        .unwrap();
    let etcds = Api::<DynamicObject>::namespaced_with(c.clone(), NS, &etcd_ar());
    let etcd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
        "metadata": {"name": ETCD, "namespace": NS},
        "spec": {"replicas": 3, "labels": {"app": "etcd-statefulset"}, "etcd": {},
                 "backup": {"port": 8080, "store": {"provider": "Local", "container": "bucket", "prefix": "shoot/etcd-main"}}}
    }))
    .unwrap();
    etcds.create(&post, &etcd).await.unwrap();
    let members: Vec<Value> = (0..3)
        .map(|i| json!({"name": format!("{ETCD}-{i}"), "id": format!("{i}"), "role": if i == 1 { "Leader" } else { "Member" }, "status": "Ready", "reason": "LeaseSucceeded", "lastTransitionTime": "2026-01-01T00:00:00Z"}))
        .collect();
    etcds
        .patch_status(
            ETCD,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"members": members, "ready": true}})),
        )
        .await
        .unwrap();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(c.clone(), NS);
    for i in 0..3 {
        let name = format!("{ETCD}-{i}");
        // The labels etcd-druid's StatefulSet template gives its pods (druid@v0.37.1 internal/component/statefulset).
        let labels = json!({"app": "etcd-statefulset", "app.kubernetes.io/managed-by": "etcd-druid",
                            "app.kubernetes.io/part-of": ETCD, "app.kubernetes.io/name": ETCD});
        let pod = json!({"metadata": {"name": name, "namespace": NS, "labels": labels},
                         "spec": {"containers": [{"name": "etcd", "image": "etcd"}]}});
        pods.create(&post, &serde_json::from_value(pod).unwrap()).await.unwrap();
        let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    }
    // etcd-druid's StatefulSet: the compaction Job takes the sidecar's image from it.
    let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": ETCD, "namespace": NS},
        "spec": {"replicas": 3, "serviceName": format!("{ETCD}-peer"), "selector": {"matchLabels": {"app": "etcd-statefulset"}},
                 "template": {"metadata": {"labels": {"app": "etcd-statefulset"}}, "spec": {"containers": [
                     {"name": "etcd", "image": "etcd-wrapper"},
                     {"name": "backup-restore", "image": "etcdbrctl:v0.43.0"}]}}}});
    Api::<k8s_openapi::api::apps::v1::StatefulSet>::namespaced(c.clone(), NS)
        .create(&post, &serde_json::from_value(sts).unwrap())
        .await
        .unwrap();
    let svc = json!({"metadata": {"name": format!("{ETCD}-client"), "namespace": NS}, "spec": {"ports": [{"name": "backuprestore", "port": 8080}]}});
    Api::<k8s_openapi::api::core::v1::Service>::namespaced(c.clone(), NS)
        .create(&post, &serde_json::from_value(svc).unwrap())
        .await
        .unwrap();
    server
}

/// The fake landscape with its sidecar, served over HTTP, and a directory whose `config` is an admin kubeconfig
/// for it (namespace [`NS`]): what tests of the real binary run against.
pub struct Served {
    pub server: ApiServer,
    pub endpoint: kube_sim::HttpEndpoint,
    pub dir: tempfile::TempDir,
    pub sidecar: Sidecar,
}

impl Served {
    pub async fn start() -> Served {
        let server = landscape().await;
        let sidecar = Sidecar::default();
        sidecar.start(&server).await;
        let endpoint = server.serve_http("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config"), server.kubeconfig_yaml(&endpoint.url, "admin", Some(NS))).unwrap();
        Served { server, endpoint, dir, sidecar }
    }
}

/// A fake leading backup sidecar: `/snapshot/full|delta` renew the snapshot lease like backup-restore does.
#[derive(Clone, Default)]
pub struct Sidecar {
    pub calls: Arc<Mutex<Vec<String>>>,
}

impl Sidecar {
    pub async fn start(&self, server: &ApiServer) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        server.register_service_backend(NS, &format!("{ETCD}-client"), 8080, addr);
        // Each member's own sidecar (pod proxy) is this fake too.
        for i in 0..3 {
            server.register_pod_backend(NS, &format!("{ETCD}-{i}"), 8080, addr);
        }
        let (me, client) = (self.clone(), server.client());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (me, client) = (me.clone(), client.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (me, client) = (me.clone(), client.clone());
                        async move {
                            let path = req.uri().path().to_string();
                            me.calls.lock().unwrap().push(path.clone());
                            let body = match path.as_str() {
                                "/snapshot/full" => renew(&client, &format!("{ETCD}-full-snap")).await,
                                "/snapshot/delta" => renew(&client, &format!("{ETCD}-delta-snap")).await,
                                "/healthz" => json!({"health": true}),
                                // Go's ServeMux, for what etcd-backup-restore's server does not register.
                                _ => {
                                    let mut r =
                                        hyper::Response::new(Full::new(Bytes::from_static(b"404 page not found\n")));
                                    *r.status_mut() = hyper::StatusCode::NOT_FOUND;
                                    return Ok::<_, Infallible>(r);
                                }
                            };
                            Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(body.to_string()))))
                        }
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
    }
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

pub async fn renew(client: &Client, lease: &str) -> Value {
    let api: Api<Lease> = Api::namespaced(client.clone(), NS);
    let now = jiff::Timestamp::now();
    let obj = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": lease, "namespace": NS},
                     "spec": {"holderIdentity": format!("{}", now.as_millisecond()),
                              // MicroTime: six fractional digits, as kube-apiserver parses it (RFC3339Micro).
                              "renewTime": now.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()}});
    api.patch(lease, &PatchParams::apply("backup-restore").force(), &Patch::Apply(&obj)).await.unwrap();
    json!({"snapName": "Full-00000000-00000042", "lastRevision": 42})
}

/// Marks members `0` and `2` not ready (the Etcd loses quorum).
pub async fn lose_quorum(client: &Client) {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), NS);
    for i in [0, 2] {
        let status = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        pods.patch_status(&format!("{ETCD}-{i}"), &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    }
}

/// A real one-member etcd (Debian's `etcd`) standing in for the members' etcd, serving client TLS as a Gardener
/// seed's members do: a CA, a server certificate for `<etcd>-client.<ns>.svc` signed by it and a client key
/// pair, in the secrets the Etcd's `spec.etcd.clientUrlTls` then names (`ca-etcd` with `bundle.crt` as its
/// `dataKey`, as Gardener sets it; `etcd-server`; `etcd-client`). Every member pod of the fake landscape gets
/// the playground's TLS client-URL annotation pointing at it (`reach` [`Reach::Annotation`]), or the server
/// forwards the pods' port 2379 to it (`pods/portforward`, [`Reach::PortForward`]), so compaction and
/// defragmentation go through etcd's own API over verified TLS. `None` (skipped) without the binary, unless
/// `DRUIDCTL_REQUIRE_ETCD=1`, which fails instead. Keep the returned values alive while the member is used.
pub async fn real_member_etcd(
    server: &ApiServer,
    test: &str,
    reach: Reach,
) -> Option<(landscape::etcd::MemberProcess, tempfile::TempDir)> {
    use druidctl::api::names::CLIENT_TLS_URL_ANNOTATION;
    use k8s_openapi::api::core::v1::{Pod, Secret};
    use landscape::certmanager::{KeyPairRequest, SigningCa, generate_signed};
    use landscape::etcd::process::ClientTls;
    let binary = landscape::etcd::require_etcd(test)?;
    let dir = tempfile::tempdir().unwrap();
    let now = jiff::Timestamp::now();
    let later = now.checked_add(jiff::SignedDuration::from_hours(1)).unwrap();
    let req = |cn: &'static str, dns: &'static [String], is_ca| KeyPairRequest {
        common_name: cn,
        dns_names: dns,
        not_before: now,
        not_after: later,
        is_ca,
    };
    let (ca_crt, ca_key) = generate_signed(&req("etcd-ca", &[], true), None).unwrap();
    let ca = SigningCa { common_name: "etcd-ca", key_pem: &ca_key };
    let server_dns: &'static [String] = Box::leak(Box::new([format!("{ETCD}-client.{NS}.svc")]));
    let (server_crt, server_key) = generate_signed(&req("etcd-server", server_dns, false), Some(&ca)).unwrap();
    let (client_crt, client_key) = generate_signed(&req("etcd-client", &[], false), Some(&ca)).unwrap();
    let (cert_file, key_file) = (dir.path().join("server.crt"), dir.path().join("server.key"));
    std::fs::write(&cert_file, &server_crt).unwrap();
    std::fs::write(&key_file, &server_key).unwrap();
    let mut config = landscape::etcd::MemberConfig::new("member", dir.path().join("data"), dir.path().join("etcd.log"));
    let port = landscape::etcd::ports::free_port();
    config.client_tls = Some(ClientTls { port, cert_file, key_file });
    let member = landscape::etcd::MemberProcess::spawn(&binary, config).unwrap();
    member.wait_serving(std::time::Duration::from_secs(30)).await.unwrap();

    let secrets: Api<Secret> = Api::namespaced(server.client(), NS);
    for (name, data) in [
        ("ca-etcd", json!({"bundle.crt": ca_crt})),
        ("etcd-server", json!({"tls.crt": server_crt, "tls.key": server_key})),
        ("etcd-client", json!({"tls.crt": client_crt, "tls.key": client_key})),
    ] {
        let secret = json!({"metadata": {"name": name, "namespace": NS}, "stringData": data});
        secrets.create(&PostParams::default(), &serde_json::from_value(secret).unwrap()).await.unwrap();
    }
    let etcds: Api<DynamicObject> = Api::namespaced_with(server.client(), NS, &etcd_ar());
    let tls = json!({"spec": {"etcd": {"clientUrlTls": {
        "tlsCASecretRef": {"name": "ca-etcd", "dataKey": "bundle.crt"},
        "serverTLSSecretRef": {"name": "etcd-server"}, "clientTLSSecretRef": {"name": "etcd-client"}}}}});
    etcds.patch(ETCD, &PatchParams::default(), &Patch::Merge(&tls)).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(server.client(), NS);
    for i in 0..3 {
        let pod = format!("{ETCD}-{i}");
        match reach {
            Reach::Annotation => {
                let url = format!("https://127.0.0.1:{port}");
                let patch = json!({"metadata": {"annotations": {CLIENT_TLS_URL_ANNOTATION: url}}});
                pods.patch(&pod, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
            }
            Reach::PortForward => server.register_pod_backend(NS, &pod, 2379, SocketAddr::from(([127, 0, 0, 1], port))),
        }
    }
    Some((member, dir))
}

/// How druidctl finds the member etcd of [`real_member_etcd`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// The pods carry the playground's client-URL annotation.
    Annotation,
    /// Only through the API server's `pods/portforward`.
    PortForward,
}
