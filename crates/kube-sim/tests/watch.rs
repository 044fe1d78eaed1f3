//! Watch semantics of the embedded API server: resourceVersion, bookmarks, timeouts, sendInitialEvents,
//! bounded history with 410 Gone, selector transitions, and resumption across restarts.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use kube_sim::{ApiServer, ApiServerOptions};
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata":{"name":name,"labels":{"app":"etcd"}}})).unwrap()
}

async fn next_event<S>(s: &mut S) -> WatchEvent<ConfigMap>
where
    S: futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .expect("event in time")
        .expect("stream open")
        .expect("no error")
}

#[tokio::test]
async fn watch_from_resource_version_replays_history_and_filters_by_label() {
    let server = ApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    api.create(&PostParams::default(), &cm("b")).await.unwrap();
    let mut s = api.watch(&WatchParams::default().labels("app=etcd"), &rv).await.unwrap().boxed();
    match next_event(&mut s).await {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("b")),
        e => panic!("unexpected {e:?}"),
    }
    // Removing the label makes the object leave the selector: the watcher sees DELETED.
    api.patch("b", &PatchParams::default(), &Patch::Merge(json!({"metadata":{"labels":{"app":null}}}))).await.unwrap();
    match next_event(&mut s).await {
        WatchEvent::Deleted(o) => assert_eq!(o.metadata.name.as_deref(), Some("b")),
        e => panic!("unexpected {e:?}"),
    }
    api.patch("b", &PatchParams::default(), &Patch::Merge(json!({"metadata":{"labels":{"app":"etcd"}}})))
        .await
        .unwrap();
    assert!(matches!(next_event(&mut s).await, WatchEvent::Added(_)));
}

#[tokio::test]
async fn bookmarks_timeout_and_initial_events_end() {
    let server = ApiServer::with_options(ApiServerOptions {
        bookmark_interval: Duration::from_millis(100),
        ..Default::default()
    });
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let wp = WatchParams::streaming_lists();
    let mut s = api.watch(&wp, "").await.unwrap().boxed();
    assert!(matches!(next_event(&mut s).await, WatchEvent::Added(_)));
    match next_event(&mut s).await {
        WatchEvent::Bookmark(b) => {
            assert_eq!(b.metadata.annotations.get("k8s.io/initial-events-end").map(String::as_str), Some("true"))
        }
        e => panic!("unexpected {e:?}"),
    }
    assert!(matches!(next_event(&mut s).await, WatchEvent::Bookmark(_)), "periodic bookmark");
    // timeoutSeconds ends the stream.
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut s = api.watch(&WatchParams::default().timeout(1).disable_bookmarks(), &rv).await.unwrap().boxed();
    let end = tokio::time::timeout(Duration::from_secs(10), s.next()).await.expect("stream ends by itself");
    assert!(end.is_none());
}

#[tokio::test]
async fn watch_older_than_history_gets_410_gone() {
    let server = ApiServer::with_options(ApiServerOptions { watch_history: 2, ..Default::default() });
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let first = api.create(&PostParams::default(), &cm("a")).await.unwrap();
    for n in ["b", "c", "d"] {
        api.create(&PostParams::default(), &cm(n)).await.unwrap();
    }
    let mut s = api.watch(&WatchParams::default(), &first.metadata.resource_version.unwrap()).await.unwrap().boxed();
    match next_event(&mut s).await {
        WatchEvent::Error(e) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(e.message.starts_with("too old resource version: "), "{}", e.message);
        }
        e => panic!("unexpected {e:?}"),
    }
}

/// Drives a runtime watcher until it yields an object named `name`.
async fn until_seen<S>(s: &mut S, name: &str)
where
    S: futures::Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Unpin,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let ev = tokio::time::timeout_at(deadline, s.next())
            .await
            .unwrap_or_else(|_| panic!("{name} not seen in time"))
            .expect("stream open");
        match ev {
            Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o))
                if o.metadata.name.as_deref() == Some(name) =>
            {
                return;
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn runtime_watcher_survives_restart_with_history_without_relisting() {
    let server = ApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let mut s = watcher(api.clone(), watcher::Config::default()).boxed();
    until_seen(&mut s, "a").await;
    api.create(&PostParams::default(), &cm("b")).await.unwrap();
    until_seen(&mut s, "b").await;
    let log = server.request_log();
    assert_eq!(log.count("list", "configmaps"), 1);
    let watches_before = log.count("watch", "configmaps");
    server.restart(true).await;
    api.create(&PostParams::default(), &cm("c")).await.unwrap();
    until_seen(&mut s, "c").await;
    assert_eq!(log.count("list", "configmaps"), 1, "resumed without a new LIST");
    assert!(log.count("watch", "configmaps") > watches_before, "the watch was re-established");
}

#[tokio::test]
async fn runtime_watcher_relists_exactly_once_when_history_is_lost() {
    let server = ApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let mut s = watcher(api.clone(), watcher::Config::default()).boxed();
    until_seen(&mut s, "a").await;
    api.create(&PostParams::default(), &cm("b")).await.unwrap();
    until_seen(&mut s, "b").await; // the watch is established
    let log = server.request_log();
    assert_eq!(log.count("list", "configmaps"), 1);
    server.restart(false).await;
    api.create(&PostParams::default(), &cm("c")).await.unwrap();
    until_seen(&mut s, "c").await;
    api.create(&PostParams::default(), &cm("d")).await.unwrap();
    until_seen(&mut s, "d").await;
    assert_eq!(log.count("list", "configmaps"), 2, "exactly one relist after the history was lost");
    assert_eq!(log.count("watch", "configmaps"), 3, "first watch, the 410 one, and the watch after the relist");
}

#[tokio::test]
async fn cut_watches_make_clients_reconnect() {
    let server = ApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let mut s = watcher(api.clone(), watcher::Config::default()).boxed();
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    until_seen(&mut s, "a").await;
    api.create(&PostParams::default(), &cm("b")).await.unwrap();
    until_seen(&mut s, "b").await;
    assert_eq!(server.faults().cut_watches(Some("configmaps")), 1);
    api.create(&PostParams::default(), &cm("c")).await.unwrap();
    until_seen(&mut s, "c").await;
    assert_eq!(server.request_log().count("list", "configmaps"), 1);
    assert_eq!(server.request_log().count("watch", "configmaps"), 2);
}
