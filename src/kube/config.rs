//! Building a client the way kubectl does: `--kubeconfig`, else the `KUBECONFIG` list (merged, missing files
//! skipped), else `~/.kube/config`, else the in-cluster service account; `--context` picks the context; the
//! namespace is `-n`, else the context's, else `default`; `--request-timeout` bounds every request.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};

use super::error::ClusterError;
use super::slow_answer::{SlowAnswerLayer, SlowAnswerNotice};

/// How to reach the cluster, resolved from flags and environment.
#[derive(Debug, Clone, Default)]
pub struct AccessOptions {
    /// `--kubeconfig`: this file only, ignoring `KUBECONFIG`.
    pub kubeconfig: Option<PathBuf>,
    /// `--context`.
    pub context: Option<String>,
    /// `-n/--namespace`.
    pub namespace: Option<String>,
    /// `--request-timeout`; `None` means no limit.
    pub request_timeout: Option<Duration>,
    /// Prefer the in-cluster service account even when a kubeconfig exists (`serve`).
    pub prefer_in_cluster: bool,
    /// Told once when a request has had no answer for a while ([`super::slow_answer`]).
    pub slow_answer: Option<SlowAnswerNotice>,
}

/// A connected client and what it resolved to.
#[derive(Clone)]
pub struct Cluster {
    /// The client.
    pub client: Client,
    /// Namespace for commands that need one.
    pub namespace: String,
    /// Name of the kubeconfig context used, if any.
    pub context: Option<String>,
    /// URL of the API server.
    pub server: String,
    /// The configuration of a client that can upgrade connections, when [`Cluster::client`] cannot (the
    /// multiplexed client of [`connect_for_reads`]); built only when a port-forward is opened.
    upgrades: Option<Box<Upgrades>>,
}

impl Cluster {
    /// A client that can open WebSocket upgrades (port-forwards): HTTP/1.1, as kube's own. The multiplexed
    /// client of [`connect_for_reads`] cannot: an upgrade needs HTTP/1.1, and over HTTP/2 the request reaches
    /// the API server without its `Upgrade` header.
    pub fn upgrade_client(&self) -> Result<Client, ClusterError> {
        self.upgrade_client_opening(0)
    }

    /// [`Cluster::upgrade_client`], whose first `ahead` connections are opened now (TCP and TLS, in the
    /// background: a command that will open port-forwards once its reads are in does not wait for the
    /// handshakes then). Needs a Tokio runtime when `ahead` is not 0.
    pub fn upgrade_client_opening(&self, ahead: usize) -> Result<Client, ClusterError> {
        let built = match self.upgrades.as_deref() {
            None => return Ok(self.client.clone()),
            Some(Upgrades { config, tls: Some(tls) }) => upgrade_client_sharing(config, tls.clone(), ahead),
            Some(Upgrades { config, tls: None }) => single_client(config.clone(), None),
        };
        built.map_err(|e| ClusterError::Kubeconfig(e.to_string()))
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("namespace", &self.namespace)
            .field("context", &self.context)
            .field("server", &self.server)
            .finish()
    }
}

/// Loads the kubeconfig kubectl would use, or `None` when there is none.
pub fn load_kubeconfig(explicit: Option<&Path>) -> Result<Option<Kubeconfig>, ClusterError> {
    let read = |p: &Path| {
        Kubeconfig::read_from(p).map_err(|e| ClusterError::Kubeconfig(format!("{}: {}", p.display(), short(&e))))
    };
    if let Some(p) = explicit {
        if !p.exists() {
            return Err(ClusterError::Kubeconfig(format!("{}: no such file", p.display())));
        }
        return read(p).map(Some);
    }
    if let Some(list) = std::env::var_os("KUBECONFIG") {
        let paths: Vec<PathBuf> = std::env::split_paths(&list).filter(|p| !p.as_os_str().is_empty()).collect();
        if !paths.is_empty() {
            // kubectl skips files of the list that do not exist; the first file to set a value wins.
            let mut merged: Option<Kubeconfig> = None;
            for p in paths.iter().filter(|p| p.exists()) {
                let next = read(p)?;
                merged = Some(match merged {
                    None => next,
                    Some(m) => m.merge(next).map_err(|e| ClusterError::Kubeconfig(short(&e)))?,
                });
            }
            return Ok(merged);
        }
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    match home.map(|h| h.join(".kube").join("config")) {
        Some(p) if p.exists() => read(&p).map(Some),
        _ => Ok(None),
    }
}

fn short(e: &KubeconfigError) -> String {
    e.to_string()
}

fn in_cluster_available() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

/// Resolves the configuration without connecting: the `kube::Config`, the namespace and the context name.
pub async fn resolve_config(opts: &AccessOptions) -> Result<(Config, Option<String>), ClusterError> {
    let (mut config, context) = if opts.prefer_in_cluster && in_cluster_available() {
        (Config::incluster().map_err(|e| ClusterError::Kubeconfig(e.to_string()))?, None)
    } else {
        match load_kubeconfig(opts.kubeconfig.as_deref())? {
            Some(kc) => {
                let context = opts.context.clone().or_else(|| kc.current_context.clone());
                if let Some(ctx) = &opts.context
                    && !kc.contexts.iter().any(|c| &c.name == ctx)
                {
                    return Err(ClusterError::UnknownContext(ctx.clone()));
                }
                let kopts = KubeConfigOptions { context: opts.context.clone(), cluster: None, user: None };
                let config = Config::from_custom_kubeconfig(kc, &kopts).await.map_err(|e| match e {
                    KubeconfigError::CurrentContextNotSet => {
                        ClusterError::Kubeconfig("the kubeconfig has no current-context; pass --context".to_string())
                    }
                    other => ClusterError::Kubeconfig(other.to_string()),
                })?;
                (config, context)
            }
            None if in_cluster_available() => {
                (Config::incluster().map_err(|e| ClusterError::Kubeconfig(e.to_string()))?, None)
            }
            None => return Err(ClusterError::NoConfig),
        }
    };
    if let Some(ns) = &opts.namespace {
        config.default_namespace = ns.clone();
    }
    match opts.request_timeout {
        Some(t) => {
            config.connect_timeout = Some(t);
            config.read_timeout = Some(t);
            config.write_timeout = Some(t);
        }
        None => {
            // A server that accepts connections and never answers must not hold a command forever: a connect
            // limit and, per request, a read limit longer than a watch's server-side timeout (kube-rs asks
            // for 290 s), so watches are not cut.
            config.connect_timeout = Some(DEFAULT_CONNECT_TIMEOUT);
            config.read_timeout = Some(DEFAULT_READ_TIMEOUT);
            config.write_timeout = Some(DEFAULT_READ_TIMEOUT);
        }
    }
    config.headers.retain(|(k, _)| k != http::header::USER_AGENT);
    if let Ok(v) = http::HeaderValue::from_str(&user_agent()) {
        config.headers.push((http::header::USER_AGENT, v));
    }
    Ok((config, context))
}

/// Connect limit when `--request-timeout` is not given.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Per-read limit when `--request-timeout` is not given.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(300);
/// The largest `--request-timeout` and duration flag accepted.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

static PRODUCT: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Names the client in the User-Agent: `druidctl` (default) or `druidctl-serve`. Set once, before connecting.
pub fn set_product(name: &'static str) {
    let _ = PRODUCT.set(name);
}

/// The User-Agent of every request, as kubectl's: `druidctl/VERSION (OS/ARCH)`.
pub fn user_agent() -> String {
    format!(
        "{}/{} ({}/{})",
        PRODUCT.get().copied().unwrap_or("druidctl"),
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        go_arch(std::env::consts::ARCH)
    )
}

fn go_arch(arch: &str) -> &str {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// Connects as kubectl would (see the module doc).
pub async fn connect(opts: &AccessOptions) -> Result<Cluster, ClusterError> {
    connect_with(opts, upgrading_client).await
}

/// kube's own client (HTTP/1.1, through a proxy when the kubeconfig names one), with the slow-answer notice.
fn single_client(config: Config, slow: Option<SlowAnswerLayer>) -> Result<Client, kube::Error> {
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(match slow {
        Some(layer) => builder.with_layer(&layer).build(),
        None => builder.build(),
    })
}

/// Resolves the configuration and builds the client with `build`, which also says how to build a client that
/// can open WebSocket upgrades when its own client cannot.
async fn connect_with(
    opts: &AccessOptions,
    build: fn(Config, Option<SlowAnswerLayer>) -> Result<Built, kube::Error>,
) -> Result<Cluster, ClusterError> {
    let (config, context) = resolve_config(opts).await?;
    let namespace = config.default_namespace.clone();
    let server = config.cluster_url.to_string();
    super::in_force::record(super::in_force::InForce {
        server: server.trim_end_matches('/').to_string(),
        request_timeout: opts.request_timeout.unwrap_or(DEFAULT_READ_TIMEOUT),
        is_default: opts.request_timeout.is_none(),
    });
    let slow = opts.slow_answer.clone().map(|n| SlowAnswerLayer::new(n, &server));
    let (client, upgrades) = build(config, slow).map_err(|e| ClusterError::Kubeconfig(e.to_string()))?;
    Ok(Cluster { client, namespace, context, server, upgrades })
}

/// [`single_client`], whose client opens upgrades itself.
fn upgrading_client(
    config: Config,
    slow: Option<SlowAnswerLayer>,
) -> Result<(Client, Option<Box<Upgrades>>), kube::Error> {
    Ok((single_client(config, slow)?, None))
}

/// Connects as [`connect`] does, with a client that sends concurrent requests over one HTTP/2 connection
/// when the server offers HTTP/2 (TLS with ALPN `h2`, as kube-apiserver does), and over HTTP/1.1 otherwise.
/// client-go does the same: `SetTransportDefaults` in k8s.io/apimachinery `pkg/util/net/http.go` configures
/// HTTP/2 on every transport unless `DISABLE_HTTP2` is set. kube's own connector
/// is HTTP/1.1 only, so each concurrent request costs a TCP connection and a TLS handshake of its own.
///
/// WebSocket upgrades (port-forward) need HTTP/1.1: [`Cluster::upgrade_client`] gives a client for them.
pub async fn connect_for_reads(opts: &AccessOptions) -> Result<Cluster, ClusterError> {
    connect_with(opts, multiplexed_client).await
}

/// A client, and how to build one that can open upgrades when it cannot (`None`: it can).
type Built = (Client, Option<Box<Upgrades>>);

/// How [`Cluster::upgrade_client`] builds its HTTP/1.1 client: from the configuration and, when the reads'
/// client was built here, its TLS configuration: the credentials and CA are parsed once, and the two clients
/// share rustls's session cache. Whether a port-forward's handshake resumes a session of the reads' connection
/// is not measured: `status` opens its port-forward connections beside the first read, before any session
/// ticket can have arrived.
#[derive(Clone)]
pub(crate) struct Upgrades {
    config: Config,
    tls: Option<tokio_rustls::rustls::ClientConfig>,
}

/// The client of [`connect_for_reads`]: kube's stack (base URI, credentials, headers, timeouts) over a
/// connector that offers `h2` and `http/1.1` by ALPN, every request over one HTTP/2 connection when the
/// server chooses `h2` ([`super::one_connection`]). A proxy in the kubeconfig keeps kube's own builder, which
/// knows how to tunnel.
fn multiplexed_client(config: Config, slow: Option<SlowAnswerLayer>) -> Result<Built, kube::Error> {
    use kube::client::ConfigExt;

    if config.proxy_url.is_some() {
        let client = single_client(config.clone(), slow)?;
        return Ok((client, Some(Box::new(Upgrades { config, tls: None }))));
    }
    let tls = config.rustls_client_config()?;
    // A connection that stopped answering is noticed by HTTP/2 pings, as client-go does
    // (k8s.io/apimachinery pkg/util/net/http.go `SetTransportDefaults` → `configureHTTP2Transport`: a ping after
    // `ReadIdleTimeout` 30s without a frame read, the connection closed when it is not acknowledged within
    // `PingTimeout` 15s); requests on it then fail at once instead of waiting for their own timeout.
    let mut pooled = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new());
    pooled
        .timer(hyper_util::rt::TokioTimer::new())
        .http2_keep_alive_interval(HTTP2_READ_IDLE_TIMEOUT)
        .http2_keep_alive_timeout(HTTP2_PING_TIMEOUT)
        .http2_keep_alive_while_idle(true);
    // The connector offers `h2` and `http/1.1` by ALPN itself (`enable_all_versions`).
    let connector = connector(&config, tls.clone(), true)?;
    let http_client = super::one_connection::OneConnection::new(connector, &pooled);
    let client = stack(&config, slow, http_client)?;
    Ok((client, Some(Box::new(Upgrades { config, tls: Some(tls) }))))
}

/// The HTTP/1.1 client of [`Cluster::upgrade_client`] over `tls`, shared with the reads' client, with `ahead`
/// connections opened now.
fn upgrade_client_sharing(
    config: &Config,
    tls: tokio_rustls::rustls::ClientConfig,
    ahead: usize,
) -> Result<Client, kube::Error> {
    let connector = super::one_connection::Stashed::new(connector(config, tls, false)?);
    if ahead > 0 {
        connector.open_ahead(&config.cluster_url, ahead);
    }
    let pooled = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, kube::client::Body>(connector);
    stack(config, None, pooled)
}

type Connector =
    hyper_timeout::TimeoutConnector<hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>>;

/// A connector over `tls` that offers `h2` and `http/1.1` by ALPN (`http2`) or `http/1.1` only, with the
/// configuration's TLS server name and connect/read/write limits.
fn connector(config: &Config, tls: tokio_rustls::rustls::ClientConfig, http2: bool) -> Result<Connector, kube::Error> {
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    // As kube's own connector: a request written in pieces must not wait for the peer's delayed ACK.
    http.set_nodelay(true);
    let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http();
    let builder = match &config.tls_server_name {
        Some(name) => {
            let name = tokio_rustls::rustls::pki_types::ServerName::try_from(name.clone())
                .map_err(|e| kube::Error::Service(format!("tls-server-name {name:?}: {e}").into()))?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    let https = if http2 {
        builder.enable_all_versions().wrap_connector(http)
    } else {
        builder.enable_http1().wrap_connector(http)
    };
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    Ok(connector)
}

/// kube's layers (base URI, credentials, extra headers) and the slow-answer notice over `http`.
fn stack<S>(config: &Config, slow: Option<SlowAnswerLayer>, http: S) -> Result<Client, kube::Error>
where
    S: tower::Service<http::Request<kube::client::Body>, Response = http::Response<hyper::body::Incoming>>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    tower::BoxError: From<S::Error>,
{
    use kube::client::ConfigExt;
    use tower::ServiceBuilder;

    let service = ServiceBuilder::new()
        .option_layer(slow)
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(http);
    Ok(Client::new(service, config.default_namespace.clone()))
}

/// An HTTP/2 connection with no frame read for this long is pinged (client-go's `ReadIdleTimeout`).
pub const HTTP2_READ_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A ping not acknowledged within this closes the connection (client-go's `PingTimeout`).
pub const HTTP2_PING_TIMEOUT: Duration = Duration::from_secs(15);

/// Parses kubectl's `--request-timeout`: `0` (no limit), a plain number of seconds, or a duration such as
/// `500ms`, `30s`, `5m`, `1h`, `1m30s`.
pub fn parse_request_timeout(text: &str) -> Result<Option<Duration>, String> {
    let d = parse_duration(text)?;
    Ok(if d.is_zero() { None } else { Some(d) })
}

/// Parses a Go-style duration (`1h2m3s`, `500ms`) or a plain number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let bad = || format!("invalid duration {text:?}: use e.g. 30s, 5m, 1h or a number of seconds");
    if t.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = t.parse::<u64>() {
        let d = Duration::from_secs(secs);
        if d > MAX_DURATION {
            return Err(format!("duration {text:?} is too long: at most {} days", MAX_DURATION.as_secs() / 86400));
        }
        return Ok(d);
    }
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let value: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        let part = Duration::try_from_secs_f64(value * factor).map_err(|_| bad())?;
        total = total
            .checked_add(part)
            .filter(|t| *t <= MAX_DURATION)
            .ok_or_else(|| format!("duration {text:?} is too long: at most {} days", MAX_DURATION.as_secs() / 86400))?;
    }
    Ok(total)
}

/// Parses a duration flag that must lie in `min..=max` (checked at parse time: a usage error otherwise).
pub fn parse_duration_in(text: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d < min || d > max {
        return Err(format!("{text:?} is out of range: use {} to {}", human(min), human(max)));
    }
    Ok(d)
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_timeout_accepts_kubectl_forms() {
        assert_eq!(parse_request_timeout("0").unwrap(), None);
        assert_eq!(parse_request_timeout("15").unwrap(), Some(Duration::from_secs(15)));
        assert_eq!(parse_request_timeout("1m30s").unwrap(), Some(Duration::from_secs(90)));
        assert_eq!(parse_request_timeout("500ms").unwrap(), Some(Duration::from_millis(500)));
        assert!(parse_request_timeout("soon").is_err());
        assert!(parse_request_timeout("5x").is_err());
        assert!(parse_request_timeout("-1s").is_err());
        assert!(parse_request_timeout("99999999999999999999999h").is_err(), "no panic, an error");
        assert!(parse_request_timeout("1e308h").is_err());
        assert!(parse_request_timeout("99999999999999999999").is_err());
        assert!(parse_request_timeout("367d").is_err());
        assert!(parse_duration_in("0s", Duration::from_secs(1), Duration::from_secs(60)).is_err());
        assert!(parse_duration_in("2m", Duration::from_secs(1), Duration::from_secs(60)).is_err());
        assert_eq!(
            parse_duration_in("30s", Duration::from_secs(1), Duration::from_secs(60)),
            Ok(Duration::from_secs(30))
        );
    }

    #[test]
    fn the_user_agent_names_product_version_and_platform() {
        let ua = user_agent();
        assert!(ua.starts_with(&format!("druidctl/{} (", env!("CARGO_PKG_VERSION"))), "{ua}");
        assert!(ua.ends_with(')') && ua.contains('/'), "{ua}");
    }

    /// A TLS server that speaks only HTTP/2 (ALPN `h2`, as kube-apiserver offers it) and counts connections:
    /// one read followed by four concurrent LISTs must share a single connection.
    #[tokio::test]
    async fn concurrent_reads_share_one_http2_connection() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};

        use base64::Engine;
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::{Api, ListParams};
        use tokio_rustls::rustls;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().self_signed(&key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
        server.alpn_protocols = vec![b"h2".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service = hyper::service::service_fn(|_req| async {
                        let body = r#"{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[]}"#;
                        Ok::<_, std::convert::Infallible>(
                            http::Response::builder()
                                .header("content-type", "application/json")
                                .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                                .unwrap(),
                        )
                    });
                    let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let ca = base64::engine::general_purpose::STANDARD.encode(cert.pem());
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: \
                 https://127.0.0.1:{port}\n    certificate-authority-data: {ca}\ncontexts:\n- name: c\n  context:\n    \
                 cluster: c\n    user: u\nusers:\n- name: u\n  user:\n    token: t\n"
            ),
        )
        .unwrap();
        let opts = AccessOptions { kubeconfig: Some(kubeconfig), ..Default::default() };
        let cluster = connect_for_reads(&opts).await.unwrap();
        let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "ns");
        let lp = ListParams::default();
        api.list(&lp).await.unwrap();
        let lists = (0..4).map(|_| api.list(&lp));
        for result in futures::future::join_all(lists).await {
            result.unwrap();
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "five reads over one HTTP/2 connection");
    }
}
