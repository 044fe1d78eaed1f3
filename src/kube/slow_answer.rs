//! Saying that the API server has not answered yet. A server that accepts the connection and then stays silent
//! (a hung apiserver, a half-open tunnel) holds a request until `--request-timeout` (300 s by default, as
//! kubectl's): without a word the command looks hung. The layer calls a notice once per process when a request
//! has waited [`NOTICE_AFTER`] without the answer's head; the binary says it on stderr, naming the server.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

/// How long a request waits for its answer before the notice.
pub const NOTICE_AFTER: Duration = Duration::from_secs(5);

/// What is told: the server, and how long its answer has been awaited.
pub type Notify = Arc<dyn Fn(&str, Duration) + Send + Sync>;

/// The notice: called at most once for all requests of every client built with it (or a clone of it).
#[derive(Clone)]
pub struct SlowAnswerNotice {
    after: Duration,
    notify: Notify,
    said: Arc<AtomicBool>,
}

impl SlowAnswerNotice {
    /// Calls `notify` when a request has waited `after` for its answer, once.
    pub fn new(after: Duration, notify: Notify) -> SlowAnswerNotice {
        SlowAnswerNotice { after, notify, said: Arc::default() }
    }
}

impl std::fmt::Debug for SlowAnswerNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlowAnswerNotice").field("after", &self.after).finish_non_exhaustive()
    }
}

/// The tower layer that times each request's answer for `server`.
#[derive(Clone)]
pub struct SlowAnswerLayer {
    notice: SlowAnswerNotice,
    server: Arc<str>,
}

impl SlowAnswerLayer {
    /// A layer for the client of `server`.
    pub fn new(notice: SlowAnswerNotice, server: &str) -> SlowAnswerLayer {
        SlowAnswerLayer { notice, server: server.trim_end_matches('/').into() }
    }
}

impl<S> tower::Layer<S> for SlowAnswerLayer {
    type Service = SlowAnswer<S>;
    fn layer(&self, inner: S) -> SlowAnswer<S> {
        SlowAnswer { inner, layer: self.clone() }
    }
}

/// The service of [`SlowAnswerLayer`].
#[derive(Clone)]
pub struct SlowAnswer<S> {
    inner: S,
    layer: SlowAnswerLayer,
}

impl<S, R> tower::Service<R> for SlowAnswer<S>
where
    S: tower::Service<R>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        let answer = self.inner.call(req);
        let layer = self.layer.clone();
        Box::pin(async move {
            tokio::pin!(answer);
            tokio::select! {
                r = &mut answer => r,
                _ = tokio::time::sleep(layer.notice.after) => {
                    if !layer.notice.said.swap(true, Ordering::Relaxed) {
                        (layer.notice.notify)(&layer.server, layer.notice.after);
                    }
                    answer.await
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tower::{Layer, Service, ServiceExt};

    #[tokio::test]
    async fn a_late_answer_is_noticed_once_and_a_prompt_one_not_at_all() {
        let told = Arc::new(Mutex::new(Vec::new()));
        let notify: Notify = {
            let told = told.clone();
            Arc::new(move |server: &str, after: Duration| told.lock().unwrap().push(format!("{server} {after:?}")))
        };
        let layer =
            SlowAnswerLayer::new(SlowAnswerNotice::new(Duration::from_millis(200), notify), "https://api:6443/");
        let mut svc = layer.layer(tower::service_fn(|wait: u64| async move {
            tokio::time::sleep(Duration::from_millis(wait)).await;
            Ok::<_, std::convert::Infallible>(wait)
        }));
        assert_eq!(svc.ready().await.unwrap().call(10).await.unwrap(), 10);
        assert!(told.lock().unwrap().is_empty(), "answered within the notice time");
        assert_eq!(svc.ready().await.unwrap().call(400).await.unwrap(), 400, "the late answer still arrives");
        assert_eq!(svc.ready().await.unwrap().call(400).await.unwrap(), 400);
        assert_eq!(*told.lock().unwrap(), ["https://api:6443 200ms"], "said once, naming the server");
    }
}
