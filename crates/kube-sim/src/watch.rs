//! Watch streams: `watch=1` with resourceVersion, bookmarks, timeoutSeconds, sendInitialEvents and the
//! `k8s.io/initial-events-end` bookmark; 410 Gone for versions older than the history.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::{Value, json};

use super::rest::{Body, Ctx, Form, ResInfo, error_response, list_opts, partial_metadata};
use super::status::ApiError;
use super::store::WatchItem;

fn encode(kind: &str, obj: &Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": kind, "object": obj})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// A bookmark's object: the kind with nothing but `metadata`, or its PartialObjectMetadata.
fn bookmark(kind: &str, api_version: &str, form: Form, metadata: Value) -> Value {
    match form {
        Form::Metadata => {
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata})
        }
        _ => json!({"kind": kind, "apiVersion": api_version, "metadata": metadata}),
    }
}

/// Serves a watch request.
pub async fn serve(ctx: &Ctx<'_>, q: &HashMap<String, String>, info: &ResInfo, form: Form) -> Response<Body> {
    let mut opts = match list_opts(q, &ctx.rt) {
        Ok(o) => o,
        Err(e) => return error_response(&e),
    };
    if let Some(name) = &info.name {
        opts.fields.0.push(("metadata.name".into(), true, name.clone()));
    }
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|b| b == "true" || b == "1");
    let send_initial = q.get("sendInitialEvents").is_some_and(|b| b == "true");
    // kube-apiserver 1.36 serves sendInitialEvents without allowWatchBookmarks (the watch then simply gets no
    // end-of-initial-events bookmark); only resourceVersionMatch=NotOlderThan is required.
    if send_initial && q.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan") {
        return error_response(&ApiError::invalid("ListOptions", "meta.k8s.io", "", &[(
            "FieldValueForbidden".into(),
            "sendInitialEvents".into(),
            "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled and allowWatchBookmarks and resourceVersionMatch=NotOlderThan are set".into(),
        )]));
    }
    let rv_param = q.get("resourceVersion").cloned().unwrap_or_default();
    // `sendInitialEvents=false` (ListOptions in apimachinery `pkg/apis/meta/v1/types.go`): no synthetic events
    // for the current objects even without a resourceVersion, the watch starts at the most recent one.
    let no_initial = q.get("sendInitialEvents").is_some_and(|b| b == "false");
    let from_rv = if no_initial && (rv_param.is_empty() || rv_param == "0") {
        Some(ctx.server.resource_version())
    } else if send_initial || rv_param.is_empty() || rv_param == "0" {
        None
    } else {
        match rv_param.parse::<u64>() {
            Ok(v) => Some(v),
            Err(_) => {
                return error_response(&ApiError::invalid(
                    "ListOptions",
                    "meta.k8s.io",
                    "",
                    &[(
                        "FieldValueInvalid".into(),
                        "resourceVersion".into(),
                        format!("Invalid value: \"{rv_param}\": invalid resource version"),
                    )],
                ));
            }
        }
    };
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(ctx.server.inner.opts.default_watch_timeout);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let registered = {
        let mut st = ctx.server.inner.state.lock().unwrap();
        st.watch(&ctx.rt.storage_key(), ctx.ns.clone(), opts.labels, opts.fields, bookmarks, from_rv, send_initial, tx)
    };
    let (btx, brx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(256);
    let body = StreamBody::new(futures::stream::unfold(brx, |mut rx| async move { rx.recv().await.map(|f| (f, rx)) }))
        .boxed_unsync();
    let resp = Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .header("cache-control", "no-cache, private")
        .header("transfer-encoding", "chunked")
        .body(body)
        .unwrap();
    let id = match registered {
        Ok(id) => id,
        Err(e) => {
            let _ = btx.try_send(Ok(Frame::data(encode("ERROR", &e.to_status()))));
            return resp;
        }
    };
    let server = ctx.server.clone();
    let rt = ctx.rt.clone();
    let version = ctx.version.clone();
    let api_version = rt.api_version(&version);
    let mut epoch = server.epoch();
    epoch.borrow_and_update();
    let interval = server.inner.opts.bookmark_interval;
    tokio::spawn(async move {
        // Table watches carry the column definitions in their first event only (the watch encoder of
        // `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/watch.go` omits the header after it).
        let mut table_header_sent = false;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        loop {
            let frame = tokio::select! {
                biased;
                item = rx.recv() => match item {
                    None | Some(WatchItem::Close) => break,
                    Some(WatchItem::Event(t, o, ev)) => {
                        let plain = form == Form::Full && rt.group != "events.k8s.io" && o.get("apiVersion").and_then(|a| a.as_str()) == Some(api_version.as_str());
                        match ev {
                            Some(ev) if plain && ev.kind == t => ev.encoded.get_or_init(|| encode(t.as_str(), &o)).clone(),
                            _ => {
                                let mut o = if rt.group == "events.k8s.io" { super::events::to_external(&o) } else { (*o).clone() };
                                o["apiVersion"] = api_version.clone().into();
                                let o = match form {
                                    Form::Table => {
                                        let mut t = super::table::to_table(&rt, &o, false, "");
                                        if table_header_sent {
                                            t["columnDefinitions"] = Value::Null;
                                        }
                                        table_header_sent = true;
                                        t
                                    }
                                    Form::Metadata => partial_metadata(&o),
                                    Form::Full => o,
                                };
                                encode(t.as_str(), &o)
                            }
                        }
                    }
                    // kube-apiserver v1.36.2 serialises the bookmark's empty ObjectMeta without `creationTimestamp`
                    // (the zero time is omitted), for built-in kinds and custom resources alike.
                    // A PartialObjectMetadata watch gets its bookmarks in that form too (the watch encoder converts
                    // every event object, `handlers/watch.go`).
                    Some(WatchItem::Bookmark(rv)) => {
                        if !bookmarks { continue; }
                        encode("BOOKMARK", &bookmark(&rt.kind, &api_version, form, json!({"resourceVersion": rv.to_string()})))
                    }
                    // The cacher sends the end-of-initial-events bookmark only to watchers that allow bookmarks
                    // (`staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go`).
                    Some(WatchItem::InitialEnd(_)) if !bookmarks => continue,
                    Some(WatchItem::InitialEnd(rv)) => encode("BOOKMARK", &bookmark(&rt.kind, &api_version, form,
                        json!({"resourceVersion": rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}))),
                },
                _ = tick.tick(), if bookmarks => {
                    server.inner.state.lock().unwrap().bookmark(id);
                    continue;
                }
                _ = &mut deadline => break,
                _ = epoch.changed() => break,
                _ = btx.closed() => break,
            };
            if btx.send(Ok(Frame::data(frame))).await.is_err() {
                break;
            }
        }
        server.inner.state.lock().unwrap().unwatch(id);
    });
    resp
}
