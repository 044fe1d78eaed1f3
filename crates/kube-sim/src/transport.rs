//! The transports: an in-process `tower::Service` for [`kube::Client::new`], and HTTP/1.1 on loopback (hyper),
//! plain or over TLS, with bearer-token authentication. `restart` drops every HTTP connection.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

use super::rest::{Body, collect_body, error_response};
use super::status::ApiError;
use super::{ApiServer, UserInfo};

/// In-process transport acting as one user.
#[derive(Clone)]
pub struct InProcess {
    server: ApiServer,
    user: UserInfo,
}

impl InProcess {
    /// A transport for `user`.
    pub fn new(server: ApiServer, user: UserInfo) -> Self {
        InProcess { server, user }
    }
}

impl tower::Service<Request<kube::client::Body>> for InProcess {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        let server = self.server.clone();
        let user = self.user.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let bytes = match collect_body(body).await {
                Ok(b) => b,
                Err(e) => return Ok(error_response(&ApiError::bad_request(e))),
            };
            Ok(super::router::handle(server, Request::from_parts(parts, bytes), Some(user)).await)
        })
    }
}

/// A running HTTP endpoint; serving stops when it is dropped or shut down.
#[derive(Debug)]
pub struct HttpEndpoint {
    /// `http://127.0.0.1:PORT` or `https://127.0.0.1:PORT`.
    pub url: String,
    /// PEM of the CA that signed the serving certificate (TLS endpoints only).
    pub ca_pem: Option<String>,
    /// The TLS identity served (TLS endpoints only), to serve the same certificate after a restart.
    pub tls: Option<TlsIdentity>,
    /// The bound port.
    pub port: u16,
    /// The bound address.
    pub addr: SocketAddr,
    shutdown: tokio::sync::watch::Sender<bool>,
}

impl HttpEndpoint {
    /// Stops accepting and closes every connection.
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
    }
}

impl Drop for HttpEndpoint {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Path prefix that carries a bearer token in the server URL: kubectl (client-go) does not send
/// `Authorization` headers over plain HTTP, so generated kubeconfigs use `http://127.0.0.1:PORT/u/TOKEN`.
pub const TOKEN_PATH_PREFIX: &str = "/u/";

/// The outcome of authentication (apiserver `pkg/authentication/request/bearertoken`, `anonymous`): a known
/// token is its user, no credentials at all is `system:anonymous`, an unknown token is `None` (401).
fn authenticate(server: &ApiServer, req: &mut Request<Incoming>) -> Option<UserInfo> {
    let path = req.uri().path().to_string();
    if let Some(rest) = path.strip_prefix(TOKEN_PATH_PREFIX) {
        let (token, tail) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let user = server.user_by_token(token);
        let pq = match req.uri().query() {
            Some(q) => format!("{tail}?{q}"),
            None => tail.to_string(),
        };
        if let Ok(uri) = pq.parse() {
            *req.uri_mut() = uri;
        }
        return user;
    }
    let Some(h) = req.headers().get("authorization") else {
        return Some(UserInfo::anonymous());
    };
    let token = h.to_str().ok()?;
    let token = token.strip_prefix("Bearer ").or_else(|| token.strip_prefix("bearer "))?.trim();
    server.user_by_token(token)
}

/// Binds `addr` and serves plain HTTP until the endpoint is dropped.
pub async fn serve_http(server: ApiServer, addr: SocketAddr) -> std::io::Result<HttpEndpoint> {
    serve(server, addr, None).await
}

/// The TLS identity of an HTTPS endpoint: the CA's PEM (for kubeconfigs) and the serving certificate chain
/// and key (DER, base64), so that a restarted server can present the same certificate to clients that kept
/// the old kubeconfig.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct TlsIdentity {
    /// PEM of the CA that signed the serving certificate.
    pub ca_pem: String,
    /// Serving certificate and CA certificate, DER in base64.
    pub chain: Vec<String>,
    /// PKCS#8 key of the serving certificate, DER in base64.
    pub key: String,
}

impl TlsIdentity {
    /// A fresh CA and a serving certificate for `127.0.0.1` and `localhost` signed by it (kube-apiserver
    /// likewise makes a self-signed serving certificate when given none:
    /// `staging/src/k8s.io/apiserver/pkg/server/options/serving.go` `MaybeDefaultWithSelfSignedCerts`).
    pub fn generate() -> Result<Self, String> {
        use base64::Engine;
        let b64 = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
        let e = |e: rcgen::Error| e.to_string();
        let ca_key = rcgen::KeyPair::generate().map_err(e)?;
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(e)?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "kube-sim-ca");
        let ca_cert = ca_params.self_signed(&ca_key).map_err(e)?;
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().map_err(e)?;
        let mut params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).map_err(e)?;
        params.distinguished_name.push(rcgen::DnType::CommonName, "kube-sim");
        let cert = params.signed_by(&key, &issuer).map_err(e)?;
        Ok(TlsIdentity {
            ca_pem: ca_cert.pem(),
            chain: vec![b64(cert.der()), b64(ca_cert.der())],
            key: b64(&key.serialize_der()),
        })
    }

    fn server_config(&self) -> Result<tokio_rustls::rustls::ServerConfig, String> {
        use base64::Engine;
        use tokio_rustls::rustls;
        let d = |s: &str| base64::engine::general_purpose::STANDARD.decode(s).map_err(|e| e.to_string());
        let chain = self
            .chain
            .iter()
            .map(|c| d(c).map(rustls::pki_types::CertificateDer::from))
            .collect::<Result<Vec<_>, _>>()?;
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(d(&self.key)?.into());
        rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| e.to_string())
    }
}

/// Binds `addr` and serves HTTPS with `identity` until the endpoint is dropped. Over TLS, client-go sends the
/// kubeconfig's bearer token (over plain http it sends none), so `kubectl get --raw` authenticates.
pub async fn serve_https(server: ApiServer, addr: SocketAddr, identity: TlsIdentity) -> std::io::Result<HttpEndpoint> {
    let config = identity.server_config().map_err(std::io::Error::other)?;
    let mut ep = serve(server, addr, Some(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)))).await?;
    ep.ca_pem = Some(identity.ca_pem.clone());
    ep.tls = Some(identity);
    Ok(ep)
}

async fn serve(
    server: ApiServer,
    addr: SocketAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> std::io::Result<HttpEndpoint> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    let mut stop = rx.clone();
    let scheme = if tls.is_some() { "https" } else { "http" };
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = stop.changed() => break,
            };
            let Ok((stream, _)) = accepted else { continue };
            let _ = stream.set_nodelay(true);
            let server = server.clone();
            let rx = rx.clone();
            match &tls {
                None => {
                    tokio::spawn(serve_connection(server, stream, rx));
                }
                Some(acceptor) => {
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            serve_connection(server, stream, rx).await;
                        }
                    });
                }
            }
        }
    });
    Ok(HttpEndpoint {
        url: format!("{scheme}://{local}"),
        ca_pem: None,
        tls: None,
        port: local.port(),
        addr: local,
        shutdown: tx,
    })
}

async fn serve_connection<S>(server: ApiServer, stream: S, rx: tokio::sync::watch::Receiver<bool>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut stop = rx;
    let mut epoch = server.epoch();
    epoch.borrow_and_update();
    let svc_server = server.clone();
    let svc = service_fn(move |mut req: Request<Incoming>| {
        let server = svc_server.clone();
        async move {
            let user = authenticate(&server, &mut req);
            // Upgrades (pods/portforward): hyper hands the upgraded connection over once the
            // 101 answer is sent.
            let on_upgrade = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>();
            let (parts, body) = req.into_parts();
            let bytes: Bytes = match collect_body(body).await {
                Ok(b) => b,
                Err(e) => {
                    return Ok::<_, Infallible>(error_response(&ApiError::bad_request(e)));
                }
            };
            let mut resp = super::router::handle(server, Request::from_parts(parts, bytes), user).await;
            if resp.status() == 101
                && let (Some(targets), Some(on_upgrade)) =
                    (resp.extensions_mut().remove::<super::portforward::Targets>(), on_upgrade)
            {
                tokio::spawn(async move {
                    if let Ok(upgraded) = on_upgrade.await {
                        super::portforward::bridge(upgraded, targets).await;
                    }
                });
            }
            Ok(resp)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).with_upgrades();
    tokio::select! {
        _ = conn => {}
        _ = stop.changed() => {}
        _ = epoch.changed() => {}
    }
}
