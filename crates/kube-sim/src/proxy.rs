//! The service and pod proxies: `/api/v1/namespaces/N/services/NAME[:PORT]/proxy/PATH` and
//! `/api/v1/namespaces/N/pods/NAME[:PORT]/proxy/PATH` forwarded to a loopback backend registered with
//! [`ApiServer::register_service_backend`] / [`ApiServer::register_pod_backend`]. Authorization is the
//! generic one (`services/proxy` or `pods/proxy`, verb from the HTTP method).
//!
//! As in the real API server, the name may carry a scheme, `https:NAME:PORT` (also `http:NAME:PORT`): with
//! `https` the backend is dialled over TLS without verifying its certificate (the proxy transport of
//! kube-apiserver skips verification for pod and service proxies).

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::ApiServer;
use super::rest::{Body, ResInfo, error_response, full};
use super::status::{ApiError, ResourceName};

/// Forwards one proxied request (services or pods).
pub async fn forward(server: &ApiServer, req: &Request<Bytes>, info: &ResInfo) -> Response<Body> {
    let ns = info.namespace.clone().unwrap_or_default();
    let full_name = info.name.clone().unwrap_or_default();
    let (https, raw) = match full_name.split_once(':') {
        Some(("https", rest)) => (true, rest.to_string()),
        Some(("http", rest)) => (false, rest.to_string()),
        _ => (false, full_name.clone()),
    };
    let (svc, port) = match raw.split_once(':') {
        Some((s, p)) => (s.to_string(), p.to_string()),
        None => (raw.clone(), String::new()),
    };
    if info.resource == "pods" {
        return forward_pod(server, req, info, &ns, &svc, &port, https).await;
    }
    let Some(svc_obj) = server.get_object("v1", "services", Some(&ns), &svc) else {
        return error_response(&ApiError::not_found(&ResourceName { group: "", resource: "services" }, &svc));
    };
    // A named port (`svc:client`) resolves through the Service's ports.
    let port = if !port.is_empty() && port.parse::<u16>().is_err() {
        svc_obj
            .pointer("/spec/ports")
            .and_then(|p| p.as_array())
            .and_then(|ps| ps.iter().find(|p| p.get("name").and_then(|n| n.as_str()) == Some(port.as_str())))
            .and_then(|p| p.get("port").and_then(|n| n.as_i64()))
            .map(|n| n.to_string())
            .unwrap_or(port)
    } else {
        port
    };
    let target = {
        let b = server.inner.backends.read().unwrap();
        b.get(&(ns.clone(), svc.clone(), port.clone())).copied().or_else(|| {
            if port.is_empty() { b.iter().find(|((n, s, _), _)| *n == ns && *s == svc).map(|(_, a)| *a) } else { None }
        })
    };
    let Some(target) = target else {
        return error_response(&ApiError::new(
            503,
            "ServiceUnavailable",
            format!("no endpoints available for service \"{raw}\""),
        ));
    };
    send(req, info, target, https).await
}

/// The pod proxy: the pod must exist (404), a named port resolves through its containers' ports, and a
/// pod without a registered backend answers 503 like a pod kube cannot dial.
async fn forward_pod(
    server: &ApiServer,
    req: &Request<Bytes>,
    info: &ResInfo,
    ns: &str,
    pod: &str,
    port: &str,
    https: bool,
) -> Response<Body> {
    let Some(pod_obj) = server.get_object("v1", "pods", Some(ns), pod) else {
        return error_response(&ApiError::not_found(&ResourceName { group: "", resource: "pods" }, pod));
    };
    let port = if !port.is_empty() && port.parse::<u16>().is_err() {
        let containers = pod_obj.pointer("/spec/containers").and_then(|c| c.as_array()).cloned().unwrap_or_default();
        containers
            .iter()
            .filter_map(|c| c.get("ports").and_then(|p| p.as_array()))
            .flatten()
            .find(|p| p.get("name").and_then(|n| n.as_str()) == Some(port))
            .and_then(|p| p.get("containerPort").and_then(|n| n.as_i64()))
            .map(|n| n.to_string())
            .unwrap_or_else(|| port.to_string())
    } else {
        port.to_string()
    };
    let target = {
        let b = server.inner.pod_backends.read().unwrap();
        b.get(&(ns.to_string(), pod.to_string(), port.clone())).copied().or_else(|| {
            if port.is_empty() { b.iter().find(|((n, p, _), _)| n == ns && p == pod).map(|(_, a)| *a) } else { None }
        })
    };
    let Some(target) = target else {
        // A pod without an IP has no address to dial; kube's proxy refuses it before dialing
        // (pkg/registry/core/pod/strategy.go `ResourceLocation` + apimachinery `proxy.IsProxyableIP`).
        if pod_obj.pointer("/status/podIP").and_then(|i| i.as_str()).is_none_or(str::is_empty) {
            return error_response(&ApiError::bad_request("address not allowed"));
        }
        let shown = if port.is_empty() { pod.to_string() } else { format!("{pod}:{port}") };
        return error_response(&ApiError::new(
            503,
            "ServiceUnavailable",
            format!("error trying to reach service: no backend for pod \"{shown}\""),
        ));
    };
    send(req, info, target, https).await
}

/// Sends the request to `target` (over TLS with `https`) and relays the answer (503 when the backend cannot be
/// reached).
async fn send(req: &Request<Bytes>, info: &ResInfo, target: std::net::SocketAddr, https: bool) -> Response<Body> {
    let q = req.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
    let scheme = if https { "https" } else { "http" };
    let uri = format!("{scheme}://{target}/{}{q}", info.subpath);
    let mut b = Request::builder().method(req.method()).uri(&uri);
    for (k, v) in req.headers() {
        if k != "authorization" && k != "host" {
            b = b.header(k, v);
        }
    }
    let out = b.body(Full::new(req.body().clone())).unwrap();
    let answer = if https {
        send_tls(out, target).await
    } else {
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        client.request(out).await.map_err(|e| e.to_string())
    };
    match answer {
        Ok(resp) => {
            let (parts, body) = resp.into_parts();
            let bytes = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
            Response::from_parts(parts, full(bytes))
        }
        Err(e) => {
            error_response(&ApiError::new(503, "ServiceUnavailable", format!("error trying to reach service: {e}")))
        }
    }
}

/// One request over a TLS connection to `target` that accepts any server certificate.
async fn send_tls(
    out: Request<Full<Bytes>>,
    target: std::net::SocketAddr,
) -> Result<Response<hyper::body::Incoming>, String> {
    use std::sync::Arc;
    use tokio_rustls::rustls;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(SkipVerify(provider)))
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(target).await.map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::IpAddress(target.ip().into());
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.map_err(|e| e.to_string())?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await.map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    // A connection-level client sends the URI as given: origin form, with the authority in Host.
    let (mut parts, body) = out.into_parts();
    let origin = parts.uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
    parts.uri = origin.parse().map_err(|e: http::uri::InvalidUri| e.to_string())?;
    parts.headers.insert(http::header::HOST, target.to_string().parse().map_err(|_| "invalid host".to_string())?);
    sender.send_request(Request::from_parts(parts, body)).await.map_err(|e| e.to_string())
}

/// Accepts any certificate; handshake signatures are still checked.
#[derive(Debug)]
struct SkipVerify(std::sync::Arc<tokio_rustls::rustls::crypto::CryptoProvider>);

impl tokio_rustls::rustls::client::danger::ServerCertVerifier for SkipVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[tokio_rustls::rustls::pki_types::CertificateDer<'_>],
        _server_name: &tokio_rustls::rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: tokio_rustls::rustls::pki_types::UnixTime,
    ) -> Result<tokio_rustls::rustls::client::danger::ServerCertVerified, tokio_rustls::rustls::Error> {
        Ok(tokio_rustls::rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
        dss: &tokio_rustls::rustls::DigitallySignedStruct,
    ) -> Result<tokio_rustls::rustls::client::danger::HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        tokio_rustls::rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
        dss: &tokio_rustls::rustls::DigitallySignedStruct,
    ) -> Result<tokio_rustls::rustls::client::danger::HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        tokio_rustls::rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<tokio_rustls::rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::ApiServer;
    use serde_json::json;

    async fn echo_backend() -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut sock, _)) = listener.accept().await {
                let mut buf = vec![0u8; 4096];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                let line = String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or_default().to_string();
                let body = format!("pod saw {line}");
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
                let _ = sock.write_all(format!("{head}{body}").as_bytes()).await;
            }
        });
        addr
    }

    async fn send(client: &kube::Client, method: http::Method, uri: &str) -> Result<String, u16> {
        let req = http::Request::builder().method(method).uri(uri).body(Vec::new()).unwrap();
        client.request_text(req).await.map_err(|e| match e {
            kube::Error::Api(s) => s.code,
            other => panic!("{other}"),
        })
    }

    #[tokio::test]
    async fn pod_proxy_forwards_to_the_pod_backend_with_pods_proxy_rbac_and_kube_error_shapes() {
        let server = ApiServer::new();
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(server.client(), "default");
        let pod = json!({"metadata": {"name": "etcd-main-0"}, "spec": {"containers": [
            {"name": "backup-restore", "image": "br", "ports": [{"name": "server", "containerPort": 8080}]}]}});
        pods.create(&Default::default(), &serde_json::from_value(pod).unwrap()).await.unwrap();
        let admin = server.client();
        let uri = "/api/v1/namespaces/default/pods/etcd-main-0:8080/proxy/defrag?x=1";
        assert_eq!(
            send(&admin, http::Method::GET, "/api/v1/namespaces/default/pods/nope:8080/proxy/defrag").await,
            Err(404)
        );
        // No IP and no backend: kube refuses to dial (400 "address not allowed").
        assert_eq!(send(&admin, http::Method::POST, uri).await, Err(400), "no backend yet");
        server.register_pod_backend("default", "etcd-main-0", 8080, echo_backend().await);
        assert_eq!(send(&admin, http::Method::POST, uri).await.unwrap(), "pod saw POST /defrag?x=1 HTTP/1.1");
        let named = "/api/v1/namespaces/default/pods/etcd-main-0:server/proxy/healthz";
        assert_eq!(
            send(&admin, http::Method::GET, named).await.unwrap(),
            "pod saw GET /healthz HTTP/1.1",
            "named port"
        );

        // RBAC: `pods/proxy` with the verb of the method (POST → create, GET → get); `pods` alone is not enough.
        server.add_user("reader", &[]);
        server.add_user("proxier", &[]);
        let rbac = |kind: &str, body: serde_json::Value| {
            let req = http::Request::post(format!("/apis/rbac.authorization.k8s.io/v1/namespaces/default/{kind}"))
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&body).unwrap())
                .unwrap();
            let c = server.client();
            async move { c.request_text(req).await.unwrap() }
        };
        rbac("roles", json!({"metadata": {"name": "read"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "create"]}]})).await;
        rbac("roles", json!({"metadata": {"name": "proxy"}, "rules": [{"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["create"]}]})).await;
        for (user, role) in [("reader", "read"), ("proxier", "proxy")] {
            rbac("rolebindings", json!({"metadata": {"name": user}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}]})).await;
        }
        assert_eq!(send(&server.client_for("reader"), http::Method::POST, uri).await, Err(403));
        let proxier = server.client_for("proxier");
        assert_eq!(send(&proxier, http::Method::POST, uri).await.unwrap(), "pod saw POST /defrag?x=1 HTTP/1.1");
        assert_eq!(send(&proxier, http::Method::GET, uri).await, Err(403), "GET needs get on pods/proxy");
        assert_eq!(server.request_log().count_code("create", "pods/proxy", 200), 2);

        server.unregister_pod_backend("default", "etcd-main-0", 8080);
        // The pod has no IP: with its backend gone kube-sim refuses like kube ("address not allowed").
        assert_eq!(send(&admin, http::Method::POST, uri).await, Err(400));
    }

    /// A TLS backend with a self-signed certificate answering like [`echo_backend`].
    async fn tls_echo_backend() -> std::net::SocketAddr {
        use std::sync::Arc;
        use tokio_rustls::rustls;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert =
            rcgen::CertificateParams::new(vec!["etcd-main-local".to_string()]).unwrap().self_signed(&key).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((sock, _)) = listener.accept().await {
                let Ok(mut tls) = acceptor.accept(sock).await else { continue };
                let mut buf = vec![0u8; 4096];
                let n = tls.read(&mut buf).await.unwrap_or(0);
                let line = String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or_default().to_string();
                let body = format!("tls pod saw {line}");
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
                let _ = tls.write_all(format!("{head}{body}").as_bytes()).await;
                let _ = tls.shutdown().await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn an_https_scheme_prefix_dials_the_backend_over_tls() {
        let server = ApiServer::new();
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(server.client(), "default");
        let pod = json!({"metadata": {"name": "etcd-main-0"}, "spec": {"containers": [
            {"name": "backup-restore", "image": "br", "ports": [{"name": "server", "containerPort": 8080}]}]}});
        pods.create(&Default::default(), &serde_json::from_value(pod).unwrap()).await.unwrap();
        let admin = server.client();
        server.register_pod_backend("default", "etcd-main-0", 8080, tls_echo_backend().await);
        let https = "/api/v1/namespaces/default/pods/https:etcd-main-0:8080/proxy/snapshot/full";
        assert_eq!(send(&admin, http::Method::POST, https).await.unwrap(), "tls pod saw POST /snapshot/full HTTP/1.1");
        // Without the prefix the proxy speaks plain HTTP to a TLS server: the backend cannot answer.
        let plain = "/api/v1/namespaces/default/pods/etcd-main-0:8080/proxy/snapshot/full";
        assert!(send(&admin, http::Method::POST, plain).await.is_err());
        // And `https:` against a plain HTTP backend fails the handshake.
        server.register_pod_backend("default", "etcd-main-0", 8080, echo_backend().await);
        assert_eq!(send(&admin, http::Method::POST, https).await, Err(503));
        assert_eq!(
            send(&admin, http::Method::POST, "/api/v1/namespaces/default/pods/http:etcd-main-0:8080/proxy/x")
                .await
                .unwrap(),
            "pod saw POST /x HTTP/1.1"
        );
    }
}
