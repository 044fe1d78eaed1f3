//! Talking to the backup-restore sidecar: the leading member's sidecar behind service `E-client` port
//! `backup.port` (default 8080), or one member's sidecar through its pod.
//!
//! The route is decided in one place, [`route`]: through the API server's service/pod proxy, unless the
//! target object (the Service for the leader, the Pod for one member) carries [`ANNOTATION_DIRECT_ADDRESS`].
//! The simulated landscape publishes that annotation when the API server it runs against cannot proxy to its
//! in-process sidecars (an external API server cannot reach a loopback address of this machine); druidctl then
//! talks to the sidecar directly, which works because the landscape runs on the same host.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Client;
use kube::api::Api;

use super::step::StepError;
use crate::api::Etcd;

/// Default port of the backup-restore sidecar.
pub const DEFAULT_BACKUP_PORT: i32 = 8080;

pub use druid_api::names::ANNOTATION_DIRECT_ADDRESS;

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The leading member's sidecar (service `E-client`).
    Leader,
    /// One member's sidecar, through its pod.
    Member(String),
}

/// How a request reaches the sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Through the API server's proxy: the request path (relative to the server URL).
    Proxy(String),
    /// Straight to the sidecar: `http://host:port/path`.
    Direct(String),
}

/// The proxy path for `path` on the sidecar of `etcd` at `target`. With `spec.backup.tls` etcd-druid starts
/// etcd-backup-restore with `--server-cert`/`--server-key` (etcd-druid `internal/component/statefulset/builder.go`)
/// and it serves HTTPS (etcd-backup-restore `pkg/server/httpAPI.go`): the API server's proxy then needs the
/// `https:` scheme prefix in the name, `services/https:NAME:PORT/proxy`.
pub fn proxy_path(etcd: &Etcd, target: &Target, path: &str) -> String {
    let ns = etcd.metadata.namespace.as_deref().unwrap_or("default");
    let port = etcd.spec.backup.port.unwrap_or(DEFAULT_BACKUP_PORT);
    let path = path.trim_start_matches('/');
    let scheme = if etcd.spec.backup.tls.is_some() { "https:" } else { "" };
    match target {
        Target::Leader => format!(
            "/api/v1/namespaces/{ns}/services/{scheme}{}:{port}/proxy/{path}",
            etcd.managed_names().client_service()
        ),
        Target::Member(pod) => format!("/api/v1/namespaces/{ns}/pods/{scheme}{pod}:{port}/proxy/{path}"),
    }
}

/// Decides the route to the sidecar of `etcd` at `target` (see the module doc): one read of the Service or Pod.
pub async fn route(client: &Client, etcd: &Etcd, target: &Target, path: &str) -> Result<Route, StepError> {
    let ns = etcd.metadata.namespace.as_deref().unwrap_or("default");
    let (what, annotations) = match target {
        Target::Leader => {
            let name = etcd.managed_names().client_service();
            let svc = Api::<Service>::namespaced(client.clone(), ns)
                .get_opt(&name)
                .await
                .map_err(|e| StepError::from_kube(&format!("reading service {name}"), e))?;
            (format!("service {name}"), svc.and_then(|s| s.metadata.annotations))
        }
        Target::Member(pod) => {
            let p = Api::<Pod>::namespaced(client.clone(), ns)
                .get_opt(pod)
                .await
                .map_err(|e| StepError::from_kube(&format!("reading pod {pod}"), e))?;
            (format!("pod {pod}"), p.and_then(|p| p.metadata.annotations))
        }
    };
    match annotations.as_ref().and_then(|a| a.get(ANNOTATION_DIRECT_ADDRESS)) {
        Some(addr) => {
            let addr: std::net::SocketAddr = addr.parse().map_err(|_| {
                StepError::Permanent(format!(
                    "{what}: annotation {ANNOTATION_DIRECT_ADDRESS}={addr:?} is not host:port"
                ))
            })?;
            let scheme = if etcd.spec.backup.tls.is_some() { "https" } else { "http" };
            Ok(Route::Direct(format!("{scheme}://{addr}/{}", path.trim_start_matches('/'))))
        }
        None => Ok(Route::Proxy(proxy_path(etcd, target, path))),
    }
}

/// POSTs to the sidecar and returns the response body (JSON when it is JSON).
pub async fn post(client: &Client, etcd: &Etcd, target: &Target, path: &str) -> Result<serde_json::Value, StepError> {
    let text = match route(client, etcd, target, path).await? {
        Route::Proxy(uri) => {
            let req = http::Request::post(&uri).body(Vec::new()).map_err(|e| StepError::Permanent(e.to_string()))?;
            client.request_text(req).await.map_err(|e| StepError::from_kube(&format!("POST {uri}"), e))?
        }
        Route::Direct(url) if url.starts_with("https://") => post_direct_tls(client, etcd, &url).await?,
        Route::Direct(url) => post_direct(&url).await?,
    };
    Ok(serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)))
}

/// POSTs straight to a sidecar; errors are classified like the proxy's ([`StepError::from_http`]; transport errors
/// are transient).
async fn post_direct(url: &str) -> Result<String, StepError> {
    use http_body_util::{BodyExt, Full};
    let action = format!("POST {url}");
    let client: hyper_util::client::legacy::Client<_, Full<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let req = http::Request::post(url).body(Full::default()).map_err(|e| StepError::Permanent(e.to_string()))?;
    let resp = client.request(req).await.map_err(|e| StepError::Transient(format!("{action}: {e}")))?;
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.map_err(|e| StepError::Transient(format!("{action}: {e}")))?;
    let text = String::from_utf8_lossy(&body.to_bytes()).into_owned();
    if (200..300).contains(&code) { Ok(text) } else { Err(StepError::from_http(&action, code, &text)) }
}

/// POSTs straight to a sidecar that serves HTTPS (`spec.backup.tls`), verifying its certificate against the CA
/// bundle of `backup.tls.tlsCASecretRef` (key `dataKey`, `ca.crt` when unset) for the name
/// `<etcd>-client.<namespace>.svc`, and presenting the client key pair of `clientTLSSecretRef` when set.
async fn post_direct_tls(client: &Client, etcd: &Etcd, url: &str) -> Result<String, StepError> {
    use http_body_util::{BodyExt, Full};
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let action = format!("POST {url}");
    let tls = etcd.spec.backup.tls.as_ref().ok_or_else(|| StepError::Permanent("no spec.backup.tls".into()))?;
    let ns = etcd.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let material = super::etcd_access::tls_material(client, etcd, tls).await?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&material.ca).filter_map(Result::ok) {
        roots.add(cert).map_err(|e| StepError::Permanent(format!("the CA bundle of spec.backup.tls: {e}")))?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StepError::Permanent(e.to_string()))?
        .with_root_certificates(roots);
    let config = match material.client {
        Some((crt, key)) => {
            let chain = CertificateDer::pem_slice_iter(&crt).filter_map(Result::ok).collect();
            let key = PrivateKeyDer::from_pem_slice(&key)
                .map_err(|e| StepError::Permanent(format!("the client key of spec.backup.tls: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| StepError::Permanent(format!("the client key pair of spec.backup.tls: {e}")))?
        }
        None => builder.with_no_client_auth(),
    };
    let uri: http::Uri = url.parse().map_err(|e| StepError::Permanent(format!("{url}: {e}")))?;
    let authority = uri.authority().map(|a| a.as_str().to_string()).unwrap_or_default();
    let tcp =
        tokio::net::TcpStream::connect(&authority).await.map_err(|e| StepError::Transient(format!("{action}: {e}")))?;
    let name = ServerName::try_from(format!("{}.{ns}.svc", etcd.managed_names().client_service()))
        .map_err(|e| StepError::Permanent(e.to_string()))?;
    let stream = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| StepError::Transient(format!("{action}: TLS: {e}")))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| StepError::Transient(format!("{action}: {e}")))?;
    tokio::spawn(conn);
    let req = http::Request::post(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"))
        .header("host", &authority)
        .body(Full::<bytes::Bytes>::default())
        .map_err(|e| StepError::Permanent(e.to_string()))?;
    let resp = sender.send_request(req).await.map_err(|e| StepError::Transient(format!("{action}: {e}")))?;
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.map_err(|e| StepError::Transient(format!("{action}: {e}")))?;
    let text = String::from_utf8_lossy(&body.to_bytes()).into_owned();
    if (200..300).contains(&code) { Ok(text) } else { Err(StepError::from_http(&action, code, &text)) }
}

/// `(renewTime, holderIdentity)` of a lease, as a comparable string; `None` when the lease does not exist.
pub async fn lease_marker(client: &Client, namespace: &str, name: &str) -> Result<Option<String>, StepError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = api.get_opt(name).await.map_err(|e| StepError::from_kube(&format!("reading lease {name}"), e))?;
    Ok(lease.map(|l| {
        let spec = l.spec.unwrap_or_default();
        format!(
            "{}|{}",
            spec.renew_time.map(|t| t.0.to_string()).unwrap_or_default(),
            spec.holder_identity.unwrap_or_default()
        )
    }))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::PostParams;
    use serde_json::json;

    use super::*;
    use kube_sim::ApiServer;

    fn etcd() -> Etcd {
        serde_json::from_value(json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "etcd-main", "namespace": "ns"},
            "spec": {"replicas": 3, "labels": {}, "etcd": {}, "backup": {"port": 8080}},
        }))
        .unwrap()
    }

    async fn create<K>(client: &Client, obj: serde_json::Value)
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(client.clone(), "ns");
        api.create(&PostParams::default(), &serde_json::from_value(obj).unwrap()).await.unwrap();
    }

    #[tokio::test]
    async fn the_direct_address_annotation_alone_turns_the_proxy_route_into_a_direct_one() {
        let server = ApiServer::new();
        let client = server.client();
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "ns"}})).unwrap();
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
        let pod = |name: &str, annotations: serde_json::Value| {
            json!({"metadata": {"name": name, "annotations": annotations},
                   "spec": {"containers": [{"name": "etcd", "image": "etcd"}]}})
        };
        create::<Pod>(&client, pod("etcd-main-0", json!({ANNOTATION_DIRECT_ADDRESS: "127.0.0.1:4100"}))).await;
        create::<Pod>(&client, pod("etcd-main-1", json!({"other": "x"}))).await;
        create::<Pod>(&client, pod("etcd-main-2", json!({ANNOTATION_DIRECT_ADDRESS: "somewhere"}))).await;
        let e = etcd();

        // No Service yet, and a Pod without the annotation: through the API server's proxy, as on a seed.
        assert_eq!(
            route(&client, &e, &Target::Leader, "/snapshot/full").await.unwrap(),
            Route::Proxy("/api/v1/namespaces/ns/services/etcd-main-client:8080/proxy/snapshot/full".into())
        );
        assert_eq!(
            route(&client, &e, &Target::Member("etcd-main-1".into()), "defrag").await.unwrap(),
            Route::Proxy("/api/v1/namespaces/ns/pods/etcd-main-1:8080/proxy/defrag".into())
        );
        // Published addresses: straight to the sidecar.
        assert_eq!(
            route(&client, &e, &Target::Member("etcd-main-0".into()), "defrag").await.unwrap(),
            Route::Direct("http://127.0.0.1:4100/defrag".into())
        );
        let svc = json!({"metadata": {"name": "etcd-main-client", "annotations": {ANNOTATION_DIRECT_ADDRESS: "127.0.0.1:4200"}},
                         "spec": {"ports": [{"name": "backuprestore", "port": 8080}]}});
        create::<Service>(&client, svc).await;
        assert_eq!(
            route(&client, &e, &Target::Leader, "/snapshot/full").await.unwrap(),
            Route::Direct("http://127.0.0.1:4200/snapshot/full".into())
        );
        // A malformed address is a permanent error, not a silent fallback to a proxy that cannot work.
        let err = route(&client, &e, &Target::Member("etcd-main-2".into()), "defrag").await.unwrap_err();
        assert!(!err.is_transient() && err.to_string().contains("is not host:port"), "{err}");
    }

    #[tokio::test]
    async fn a_direct_post_classifies_answers_like_the_proxy() {
        use std::convert::Infallible;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                        let (code, body) = match req.uri().path() {
                            "/ok" => (200, r#"{"message":"done"}"#),
                            "/busy" => (503, "busy"),
                            _ => (404, "no such path"),
                        };
                        let resp = hyper::Response::builder()
                            .status(code)
                            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                            .unwrap();
                        Ok::<_, Infallible>(resp)
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
                });
            }
        });
        assert_eq!(post_direct(&format!("http://{addr}/ok")).await.unwrap(), r#"{"message":"done"}"#);
        assert!(post_direct(&format!("http://{addr}/busy")).await.unwrap_err().is_transient());
        let err = post_direct(&format!("http://{addr}/nope")).await.unwrap_err();
        assert!(!err.is_transient() && err.to_string().contains("no such path (404)"), "{err}");
        let closed = landscape::etcd::ports::free_port();
        assert!(post_direct(&format!("http://127.0.0.1:{closed}/ok")).await.unwrap_err().is_transient());
    }
}
