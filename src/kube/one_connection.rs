//! Every concurrent request of a command over one HTTP/2 connection, when the API server offers HTTP/2.
//!
//! hyper-util's pooled client shares a connection between concurrent requests only when it is configured for
//! HTTP/2 alone: with HTTP/2 and HTTP/1.1 both offered by ALPN, it cannot know a connection will be HTTP/2
//! before the TLS handshake, so each request that starts before the first handshake is done opens a connection
//! of its own (`Pool::connecting` in hyper-util `client/legacy/pool.rs` locks only for `Ver::Http2`). A command
//! that sends its reads at once (`status`: the Etcd, its pods, PVCs, leases and tasks) would pay five TLS
//! handshakes, on both sides, where one does.
//!
//! [`OneConnection`] opens the first connection itself and asks it what ALPN chose. HTTP/2: every request
//! goes through an HTTP/2-only client, whose pool shares one connection (the one just opened, handed over by
//! [`Stashed`]). Anything else (HTTP/1.1, or `http://`): the negotiating client, as before. A first connection
//! that fails fails the request that opened it with the connector's own error, and the next request tries
//! again.
//!
//! The HTTP/1.1 client that opens port-forwards uses [`Stashed`] too: `status` opens its connections (TCP and
//! TLS) while its reads are under way, so that the port-forwards, which can only be asked for once the Etcd is
//! read, do not wait for handshakes.
//!
//! There is no maintained crate for this: hyper-util's client has no "HTTP/2 when negotiated, pooled as
//! HTTP/2" mode, and this is the smallest piece on top of it that gives one.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as PooledClient;
use hyper_util::client::legacy::connect::Connection;
use tower::{BoxError, Service, ServiceExt};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A connection opened ahead of its request: open, or still being opened in the background.
enum Opened<T> {
    Ready(T),
    Opening(tokio::task::JoinHandle<Result<T, BoxError>>),
}

/// A connector that first hands out connections opened ahead (a first connection [`OneConnection`] opened
/// itself, or those [`Stashed::open_ahead`] started), then connects as `inner` does. A connection opened ahead
/// that failed is replaced by a new one.
pub(crate) struct Stashed<C: Service<Uri>> {
    inner: C,
    opened: Arc<Mutex<VecDeque<Opened<C::Response>>>>,
}

impl<C: Service<Uri> + Clone> Clone for Stashed<C> {
    fn clone(&self) -> Self {
        Stashed { inner: self.inner.clone(), opened: self.opened.clone() }
    }
}

impl<C> Stashed<C>
where
    C: Service<Uri> + Clone + Send + 'static,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
    C::Response: Send + 'static,
{
    pub(crate) fn new(inner: C) -> Self {
        Stashed { inner, opened: Arc::new(Mutex::new(VecDeque::new())) }
    }

    fn stash(&self, connection: C::Response) {
        self.opened.lock().unwrap_or_else(PoisonError::into_inner).push_back(Opened::Ready(connection));
    }

    /// Starts opening `count` connections to `uri` in the background (TCP and TLS, no request), for the next
    /// `count` requests that need a connection. Needs a Tokio runtime.
    pub(crate) fn open_ahead(&self, uri: &Uri, count: usize) {
        let mut opened = self.opened.lock().unwrap_or_else(PoisonError::into_inner);
        for _ in 0..count {
            let (connector, uri) = (self.inner.clone(), uri.clone());
            opened.push_back(Opened::Opening(tokio::spawn(
                async move { connector.oneshot(uri).await.map_err(Into::into) },
            )));
        }
    }
}

impl<C> Service<Uri> for Stashed<C>
where
    C: Service<Uri> + Clone + Send + 'static,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
    C::Response: Send + 'static,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = BoxFuture<Result<C::Response, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Readiness of `inner` is awaited in `call` (`oneshot`), only when a new connection is needed.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let next = self.opened.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
        let connector = self.inner.clone();
        Box::pin(async move {
            match next {
                Some(Opened::Ready(connection)) => return Ok(connection),
                Some(Opened::Opening(opening)) => {
                    if let Ok(Ok(connection)) = opening.await {
                        return Ok(connection);
                    }
                }
                None => {}
            }
            connector.oneshot(uri).await.map_err(Into::into)
        })
    }
}

/// A client service that sends every request over one HTTP/2 connection when the server negotiates HTTP/2, and
/// over HTTP/1.1 connections otherwise (see the module doc).
pub(crate) struct OneConnection<C: Service<Uri>> {
    connector: Stashed<C>,
    http2: PooledClient<Stashed<C>, kube::client::Body>,
    negotiating: PooledClient<Stashed<C>, kube::client::Body>,
    /// Whether the server chose HTTP/2, known once a first connection is open.
    offers_http2: Arc<tokio::sync::OnceCell<bool>>,
}

impl<C: Service<Uri> + Clone> Clone for OneConnection<C> {
    fn clone(&self) -> Self {
        OneConnection {
            connector: self.connector.clone(),
            http2: self.http2.clone(),
            negotiating: self.negotiating.clone(),
            offers_http2: self.offers_http2.clone(),
        }
    }
}

impl<C> OneConnection<C>
where
    C: Service<Uri> + Clone + Send + Sync + 'static,
    C::Future: Send + Unpin + 'static,
    C::Error: Into<BoxError>,
    C::Response: hyper::rt::Read + hyper::rt::Write + Connection + Unpin + Send + 'static,
{
    /// The service over `connector`; `builder` configures both pooled clients (timers, keep-alive pings).
    pub(crate) fn new(connector: C, builder: &hyper_util::client::legacy::Builder) -> Self {
        let connector = Stashed::new(connector);
        let http2 = builder.clone().http2_only(true).build(connector.clone());
        let negotiating = builder.build(connector.clone());
        OneConnection { connector, http2, negotiating, offers_http2: Arc::new(tokio::sync::OnceCell::new()) }
    }
}

impl<C> Service<Request<kube::client::Body>> for OneConnection<C>
where
    C: Service<Uri> + Clone + Send + Sync + 'static,
    C::Future: Send + Unpin + 'static,
    C::Error: Into<BoxError>,
    C::Response: hyper::rt::Read + hyper::rt::Write + Connection + Unpin + Send + 'static,
{
    type Response = Response<Incoming>;
    type Error = BoxError;
    type Future = BoxFuture<Result<Response<Incoming>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Both pooled clients are always ready; connections are opened per request.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let uri = request.uri().clone();
            let offers_http2 = *this
                .offers_http2
                .get_or_try_init(|| async {
                    let connection = this.connector.inner.clone().oneshot(uri).await.map_err(Into::into)?;
                    let http2 = connection.connected().is_negotiated_h2();
                    this.connector.stash(connection);
                    Ok::<_, BoxError>(http2)
                })
                .await?;
            let client = if offers_http2 { &this.http2 } else { &this.negotiating };
            client.request(request).await.map_err(BoxError::from)
        })
    }
}
