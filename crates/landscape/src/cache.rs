//! Watch-driven caches of what the actors read on every pass, as the real components read it through their
//! informers (client-go shared informers in etcd-druid and cert-manager): a kube-runtime reflector keeps a
//! store current from one LIST and a WATCH, so an idle landscape does not GET the same object on every tick.
//!
//! A store only ever saves requests: a lookup that misses (the store is not filled yet, the watch is failing,
//! or the object was created a moment ago) falls back to a GET, so a stale or empty store never makes an
//! actor act on something that is not so.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

/// A store kept current by a watch, and whether its first list is in.
#[derive(Clone)]
pub(crate) struct Cache<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    pub(crate) store: Store<K>,
    ready: Arc<AtomicBool>,
}

impl<K> Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    /// Every object, once the first list is in (`None` before: read the API server instead).
    pub(crate) fn all(&self) -> Option<Vec<Arc<K>>> {
        self.ready.load(Ordering::Acquire).then(|| self.store.state())
    }
}

/// Starts a reflector of `api` that runs until `cancel` fires (errors are retried with kube-runtime's
/// default backoff) and returns its store.
pub(crate) fn spawn_store<K>(api: Api<K>, cancel: CancellationToken) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    spawn_cache(api, cancel).store
}

/// Starts a reflector of `api` that runs until `cancel` fires (errors are retried with kube-runtime's
/// default backoff).
pub(crate) fn spawn_cache<K>(api: Api<K>, cancel: CancellationToken) -> Cache<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store::<K>();
    let ready = Arc::new(AtomicBool::new(false));
    let stream = watcher(api, watcher::Config::default()).default_backoff().reflect(writer);
    let flag = ready.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                ev = stream.next() => match ev {
                    None => return,
                    Some(Err(e)) => tracing::debug!(error = %e, "landscape cache: watch failed; retrying"),
                    Some(Ok(watcher::Event::InitDone)) => flag.store(true, Ordering::Release),
                    Some(Ok(_)) => {}
                },
            }
        }
    });
    Cache { store: reader, ready }
}

/// `ns/name` from the store, if it holds it.
pub(crate) fn cached<K>(store: &Store<K>, ns: &str, name: &str) -> Option<K>
where
    K: Resource + Clone,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    store.get(&ObjectRef::new(name).within(ns)).map(|o| (*o).clone())
}
