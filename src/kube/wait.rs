//! Waiting for an object to reach a condition, bounded by a timeout, with the error saying what it waited for.
//!
//! The wait watches the one object (field selector on its name) and survives dropped watches and transient API
//! errors through the watcher's backoff; only errors that will not go away (forbidden, missing API) end it.

use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;

use super::error::{ClusterError, Subject};

/// Waits until `cond` holds for object `subject.name`, at most `timeout`; returns the object at that moment.
///
/// `what` words the timeout error ("for etcd-main to be reconciled").
pub async fn until<K>(
    api: &Api<K>,
    subject: Subject<'_>,
    timeout: Duration,
    what: &str,
    cond: impl Fn(&K) -> bool,
) -> Result<K, ClusterError>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={}", subject.name));
    let mut stream = watcher::watcher(api.clone(), config).default_backoff().boxed();
    let wait = async {
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Apply(obj)) | Ok(Event::InitApply(obj)) if cond(&obj) => return Ok(obj),
                Ok(Event::Delete(_)) => {
                    return Err(ClusterError::NotFound {
                        kind: subject.kind.to_string(),
                        name: subject.name.to_string(),
                        namespace: subject.namespace.to_string(),
                        hint: Some("it was deleted while waiting".into()),
                    });
                }
                Ok(_) => {}
                Err(e) => {
                    let err = watch_error(e, &subject);
                    if matches!(err, ClusterError::Forbidden(_) | ClusterError::ApiMissing { .. }) {
                        return Err(err);
                    }
                    tracing::debug!(error = %err, "watch error while waiting; retrying");
                }
            }
        }
        Err(ClusterError::Api("watch ended unexpectedly".into()))
    };
    match tokio::time::timeout(timeout, wait).await {
        Err(_) => Err(ClusterError::Timeout { after: timeout, what: what.to_string() }),
        Ok(result) => result,
    }
}

fn watch_error(e: watcher::Error, subject: &Subject<'_>) -> ClusterError {
    match e {
        watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => {
            ClusterError::from_kube(e, subject)
        }
        watcher::Error::WatchError(status) => ClusterError::from_kube(kube::Error::Api(status), subject),
        other => ClusterError::Api(other.to_string()),
    }
}
