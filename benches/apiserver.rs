//! Benchmark of the embedded API server: LIST at 10,000 objects (in-process and over HTTP, whole and
//! paginated) and watch fan-out to 100 concurrent watches. Prints figures; asserts nothing about time.
//!
//! Run: `cargo bench --bench apiserver` (or `--profile dev` to reuse the test build).

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube_sim::ApiServer;
use serde_json::json;

const OBJECTS: usize = 10_000;
const WATCHES: usize = 100;
const FANOUT_EVENTS: usize = 200;

fn cm(i: usize) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata":{"name":format!("cm-{i:05}"),"labels":{"app":"bench","shard":(i % 10).to_string()}},
        "data":{"key":"x".repeat(64)}}),
    )
    .unwrap()
}

async fn time_lists(api: &Api<ConfigMap>, lp: &ListParams, rounds: usize) -> (Duration, usize) {
    let start = Instant::now();
    let mut n = 0;
    for _ in 0..rounds {
        let mut lp = lp.clone();
        loop {
            let page = api.list(&lp).await.unwrap();
            n += page.items.len();
            match page.metadata.continue_ {
                Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
                _ => break,
            }
        }
    }
    (start.elapsed() / rounds as u32, n / rounds)
}

/// Waits until all WATCHES watchers are ready, creates FANOUT_EVENTS configmaps numbered from `first`, and
/// returns how long the writes took and how long until the last watcher had seen them all.
async fn fan_out(
    api: &Api<ConfigMap>,
    first: usize,
    ready_rx: &mut tokio::sync::mpsc::Receiver<()>,
    handles: Vec<tokio::task::JoinHandle<Instant>>,
) -> (Duration, Duration) {
    for _ in 0..WATCHES {
        ready_rx.recv().await.unwrap();
    }
    let start = Instant::now();
    for i in 0..FANOUT_EVENTS {
        api.create(&PostParams::default(), &cm(first + i)).await.unwrap();
    }
    let writes = start.elapsed();
    let mut last = start;
    for h in handles {
        last = last.max(h.await.unwrap());
    }
    (writes, last - start)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = ApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let start = Instant::now();
    for i in 0..OBJECTS {
        api.create(&PostParams::default(), &cm(i)).await.unwrap();
    }
    let create = start.elapsed();
    println!(
        "create {OBJECTS} configmaps in-process: {:.2?} ({:.0} creates/s)",
        create,
        OBJECTS as f64 / create.as_secs_f64()
    );

    let (inproc, n) = time_lists(&api, &ListParams::default(), 5).await;
    assert_eq!(n, OBJECTS);
    println!("LIST {OBJECTS} in-process: {inproc:.2?} per list");
    let (paged, _) = time_lists(&api, &ListParams::default().limit(500), 5).await;
    println!(
        "LIST {OBJECTS} in-process, pages of 500: {paged:.2?} per full walk ({:.2}x the single list)",
        paged.as_secs_f64() / inproc.as_secs_f64()
    );
    let (selected, m) = time_lists(&api, &ListParams::default().labels("shard=3"), 5).await;
    println!("LIST with labelSelector (1/10 match, {m} items): {selected:.2?}");

    let ep = server.serve_http("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let kc = kube::config::Kubeconfig::from_yaml(&server.kubeconfig_yaml(&ep.url, "admin", Some("default"))).unwrap();
    let http =
        kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap()).unwrap();
    let http_api: Api<ConfigMap> = Api::namespaced(http, "default");
    let (over_http, _) = time_lists(&http_api, &ListParams::default(), 5).await;
    println!(
        "LIST {OBJECTS} over loopback HTTP: {over_http:.2?} per list ({:.2}x in-process)",
        over_http.as_secs_f64() / inproc.as_secs_f64()
    );

    // Watch fan-out: WATCHES concurrent watches, FANOUT_EVENTS creates; time until every watcher has all.
    let rv = api.list(&ListParams::default().limit(1)).await.unwrap().metadata.resource_version.unwrap();
    let mut handles = Vec::new();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(WATCHES);
    for _ in 0..WATCHES {
        let api = api.clone();
        let rv = rv.clone();
        let ready = ready_tx.clone();
        handles.push(tokio::spawn(async move {
            let mut s = api.watch(&WatchParams::default().disable_bookmarks(), &rv).await.unwrap().boxed();
            ready.send(()).await.unwrap();
            let mut seen = 0;
            while seen < FANOUT_EVENTS {
                if let Some(Ok(WatchEvent::Added(_))) = s.next().await {
                    seen += 1;
                }
            }
            Instant::now()
        }));
    }
    let (writes_done, total) = fan_out(&api, OBJECTS, &mut ready_rx, handles).await;
    let deliveries = WATCHES * FANOUT_EVENTS;
    println!(
        "watch fan-out: {FANOUT_EVENTS} creates to {WATCHES} watches ({OBJECTS} objects stored): writes {writes_done:.2?}, all delivered after {total:.2?} ({:.0} deliveries/s)",
        deliveries as f64 / total.as_secs_f64()
    );
    // Baseline: the same creates with no watcher.
    let start = Instant::now();
    for i in 0..FANOUT_EVENTS {
        api.create(&PostParams::default(), &cm(OBJECTS + FANOUT_EVENTS + i)).await.unwrap();
    }
    let base = start.elapsed();
    println!(
        "creates without watchers: {base:.2?}; cost of {WATCHES} watches on writes: {:.2}x",
        writes_done.as_secs_f64() / base.as_secs_f64()
    );
    // Same fan-out with raw watch streams (no client-side decoding): the server's own cost.
    let rv = api.list(&ListParams::default().limit(1)).await.unwrap().metadata.resource_version.unwrap();
    let mut handles = Vec::new();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(WATCHES);
    for _ in 0..WATCHES {
        let client = server.client();
        let rv = rv.clone();
        let ready = ready_tx.clone();
        handles.push(tokio::spawn(async move {
            use futures::AsyncBufReadExt;
            let req = http::Request::get(format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}"))
                .body(Vec::new())
                .unwrap();
            let stream = client.request_stream(req).await.unwrap();
            ready.send(()).await.unwrap();
            let mut lines = stream.lines();
            let mut seen = 0;
            while seen < FANOUT_EVENTS {
                if let Some(Ok(_)) = lines.next().await {
                    seen += 1;
                }
            }
            Instant::now()
        }));
    }
    let (raw_writes, raw_total) = fan_out(&api, OBJECTS + 2 * FANOUT_EVENTS, &mut ready_rx, handles).await;
    println!(
        "raw watch fan-out (no client decoding): writes {raw_writes:.2?} ({:.2}x no watchers), all delivered after {raw_total:.2?} ({:.0} deliveries/s)",
        raw_writes.as_secs_f64() / base.as_secs_f64(),
        deliveries as f64 / raw_total.as_secs_f64()
    );
    println!(
        "request log: {} LIST, {} WATCH, {} CREATE",
        server.request_log().count("list", "configmaps"),
        server.request_log().count("watch", "configmaps"),
        server.request_log().count("create", "configmaps")
    );
}
