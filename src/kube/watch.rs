//! Long-running watches that survive API-server restarts with as few relists as the server allows: a
//! kube-runtime watcher that starts with a streaming list (`sendInitialEvents=true`, the `WatchList` feature,
//! beta and on by default since Kubernetes 1.32: `pkg/features/kube_features.go`), so its initial state and
//! every relist arrive on a watch instead of a LIST; a server that refuses the parameter (an older API server,
//! or the gate off, answers 400/422 Invalid: `staging/src/k8s.io/apimachinery/pkg/apis/meta/internalversion/
//! validation/validation.go`) gets LIST and WATCH instead.
//!
//! After a dropped watch the watcher resumes from the last resourceVersion it saw (bookmarks keep it recent) and
//! relists only when the server answers 410 Gone, as a freshly restarted API server does for any version older
//! than its new watch cache: one relist per restart, the floor. Errors are retried with
//! [`WatchBackoff`] (100 ms doubling to 5 s, reset by the first
//! event) and yielded, never ending the stream. Not kube-runtime's `default_backoff`: it grows to 30 s and
//! resets only after two quiet minutes, so after an outage the watches would come back up to 30 s after the
//! server.

use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::Resource;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;

/// Whether `e` says the server does not take `sendInitialEvents` (a server without streaming lists).
pub fn streaming_refused(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::WatchStartFailed(kube::Error::Api(s)) | watcher::Error::WatchFailed(kube::Error::Api(s)) => {
            matches!(s.code, 400 | 422)
        }
        watcher::Error::WatchError(s) => matches!(s.code, 400 | 422),
        _ => false,
    }
}

/// The events of `K` under `config`, from a streaming list when the server offers it, else LIST and WATCH;
/// resumed after errors with backoff. Ends only when dropped.
pub fn events<K>(api: Api<K>, config: watcher::Config) -> BoxStream<'static, Result<Event<K>, watcher::Error>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    struct State<K: Resource + Clone + 'static> {
        api: Api<K>,
        config: watcher::Config,
        streaming: bool,
        synced: bool,
        inner: BoxStream<'static, Result<Event<K>, watcher::Error>>,
    }
    fn open<K>(
        api: &Api<K>,
        config: &watcher::Config,
        streaming: bool,
    ) -> BoxStream<'static, Result<Event<K>, watcher::Error>>
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let cfg = if streaming { config.clone().streaming_lists() } else { config.clone() };
        watcher::watcher(api.clone(), cfg).backoff(WatchBackoff::default()).boxed()
    }
    let inner = open(&api, &config, true);
    let state = State { api, config, streaming: true, synced: false, inner };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            let ev = st.inner.next().await?;
            match &ev {
                Ok(Event::InitDone) => st.synced = true,
                Err(e) if st.streaming && !st.synced && streaming_refused(e) => {
                    tracing::debug!(error = %e, "the API server refuses streaming lists; LIST and WATCH instead");
                    st.streaming = false;
                    st.inner = open(&st.api, &st.config, false);
                    continue;
                }
                _ => {}
            }
            return Some((ev, st));
        }
    })
    .boxed()
}

/// Backoff of every resilient watch (the task controller's, `status --watch`'s): 100 ms doubling to 5 s, reset by any successful event. (kube's default only
/// resets after two quiet minutes, so under a steady error rate it would keep the cache stale for 30 s.)
#[derive(Debug, Clone, Default)]
pub struct WatchBackoff {
    failures: u32,
}

impl Iterator for WatchBackoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        Some((Duration::from_millis(100) * 2u32.saturating_pow(self.failures.min(6) - 1)).min(Duration::from_secs(5)))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_backoff_doubles_to_five_seconds_and_resets() {
        use kube::runtime::utils::Backoff;
        let mut b = WatchBackoff::default();
        let d: Vec<u128> = (0..8).map(|_| b.next().unwrap().as_millis()).collect();
        assert_eq!(d, [100, 200, 400, 800, 1600, 3200, 3200, 3200].map(|v: u128| v.min(5000)));
        b.reset();
        assert_eq!(b.next(), Some(Duration::from_millis(100)));
    }

    fn status(code: u16) -> Box<kube::core::Status> {
        Box::new(kube::core::Status { code, message: "x".into(), ..Default::default() })
    }

    #[test]
    fn a_refused_streaming_list_is_told_from_other_errors() {
        assert!(streaming_refused(&watcher::Error::WatchStartFailed(kube::Error::Api(status(422)))));
        assert!(streaming_refused(&watcher::Error::WatchError(status(400))));
        assert!(!streaming_refused(&watcher::Error::WatchStartFailed(kube::Error::Api(status(403)))));
        assert!(!streaming_refused(&watcher::Error::WatchError(status(410))));
    }
}
