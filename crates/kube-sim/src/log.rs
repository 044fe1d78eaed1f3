//! `GET pods/{name}/log`: what kube-apiserver answers itself (option parsing and validation, the pod, the
//! container, the node) and what it relays from the kubelet, here a [`PodLogSource`] registered with
//! [`ApiServer::add_pod_log_source`] (the landscape plays the kubelet).
//!
//! Checked against the real kube-apiserver v1.36.2 of `realk8s` (the differential test's `pod logs` scenario):
//! option conversion errors are 400 with Go's `strconv`/`time` message, `ValidatePodLogOptions` errors are 422
//! `PodLogOptions "<pod>" is invalid`, `stream` is forbidden while the `PodLogsQuerySplitStreams` gate is off,
//! a pod without a node answers 204 with no body, a node that does not exist answers 404 `pods "<node>" not found`
//! (the node getter's resource name), and with a node but no kubelet the dial fails with 500.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::Value;

use super::ApiServer;
use super::rest::{Body, ResInfo, error_response, full, parse_query};
use super::status::{ApiError, ResourceName};

/// One line of a container's log with the time the runtime received it (CRI logs keep one per line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// When the line was written.
    pub time: jiff::Timestamp,
    /// The line without its newline.
    pub text: String,
}

/// Where a follower continues: the container instance it reads and a position in that instance's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogCursor {
    /// Identifies one run of the container; a restart starts another instance.
    pub instance: u64,
    /// Position in the instance's log, opaque to the server.
    pub offset: u64,
}

/// A piece of one container instance's log.
#[derive(Debug, Clone, Default)]
pub struct ContainerLog {
    /// Lines after the cursor asked for (all lines when none was given).
    pub lines: Vec<LogLine>,
    /// Where the next read continues.
    pub next: LogCursor,
    /// Whether the instance still runs (a follower waits for more only while it does).
    pub running: bool,
}

/// The kubelet's side of `pods/log`: the logs of the containers of the pods it runs.
pub trait PodLogSource: Send + Sync {
    /// The log of `container` of pod `namespace/pod` (the current instance, or the last terminated one with
    /// `previous`), from `from` on. `None` when this source does not run that pod; `Some(Err(message))` is the
    /// kubelet's refusal (e.g. `previous terminated container "etcd" in pod "p" not found`).
    fn read(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
        from: Option<LogCursor>,
    ) -> Option<Result<ContainerLog, String>>;
}

/// How often a follower asks its source for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// `PodLogOptions` as the query carries them.
#[derive(Debug, Default, Clone, PartialEq)]
struct LogOptions {
    container: String,
    follow: bool,
    previous: bool,
    timestamps: bool,
    since_seconds: Option<i64>,
    since_time: Option<jiff::Timestamp>,
    tail_lines: Option<i64>,
    limit_bytes: Option<i64>,
    stream: Option<String>,
}

/// Go's `strconv.ParseBool`; the query converter drops a value it cannot parse (`follow=maybe` is false).
fn parse_bool(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// Go's `strconv.ParseInt(v, 10, 64)` with its error text.
fn parse_int(v: &str) -> Result<i64, ApiError> {
    v.parse::<i64>().map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => "value out of range",
            _ => "invalid syntax",
        };
        ApiError::bad_request(format!("strconv.ParseInt: parsing {}: {why}", Value::String(v.into())))
    })
}

/// `time.Parse(time.RFC3339, v)`; the error names the layout as Go does (the part that failed is approximated
/// by the whole value, exact for values that do not start with a year).
fn parse_time(v: &str) -> Result<jiff::Timestamp, ApiError> {
    v.parse::<jiff::Timestamp>().map_err(|_| {
        let (rest, elem) = match v.get(..4).filter(|y| y.chars().all(|c| c.is_ascii_digit())) {
            Some(_) if v.len() == 10 => (String::new(), "T"),
            Some(_) => (v.get(4..).unwrap_or_default().to_string(), "-"),
            None => (v.to_string(), "2006"),
        };
        ApiError::bad_request(format!(
            "parsing time {} as \"2006-01-02T15:04:05Z07:00\": cannot parse {} as {}",
            Value::String(v.into()),
            Value::String(rest),
            Value::String(elem.into())
        ))
    })
}

fn parse_options(q: &std::collections::HashMap<String, String>) -> Result<LogOptions, ApiError> {
    let int = |k: &str| q.get(k).map(|v| parse_int(v)).transpose();
    Ok(LogOptions {
        container: q.get("container").cloned().unwrap_or_default(),
        follow: q.get("follow").is_some_and(|v| parse_bool(v)),
        previous: q.get("previous").is_some_and(|v| parse_bool(v)),
        timestamps: q.get("timestamps").is_some_and(|v| parse_bool(v)),
        tail_lines: int("tailLines")?,
        limit_bytes: int("limitBytes")?,
        since_seconds: int("sinceSeconds")?,
        since_time: q.get("sinceTime").map(|v| parse_time(v)).transpose()?,
        stream: q.get("stream").cloned(),
    })
}

/// kubernetes `pkg/apis/core/validation/validation.go` `ValidatePodLogOptions`, in its order; `stream` is
/// refused while the `PodLogsQuerySplitStreams` feature gate is off (as on v1.36.2).
fn validate(o: &LogOptions, pod: &str) -> Result<(), ApiError> {
    let mut causes: Vec<(String, String, String)> = Vec::new();
    let invalid = |field: &str, v: i64, why: &str| {
        ("FieldValueInvalid".to_string(), field.to_string(), format!("Invalid value: {v}: {why}"))
    };
    if let Some(t) = o.tail_lines.filter(|t| *t < 0) {
        causes.push(invalid("tailLines", t, "must be greater than or equal to 0"));
    }
    if let Some(l) = o.limit_bytes.filter(|l| *l < 1) {
        causes.push(invalid("limitBytes", l, "must be greater than 0"));
    }
    match (o.since_seconds, o.since_time) {
        (Some(_), Some(_)) => causes.push((
            "FieldValueForbidden".into(),
            "[]".into(),
            "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified".into(),
        )),
        (Some(s), None) if s < 1 => causes.push(invalid("sinceSeconds", s, "must be greater than 0")),
        _ => {}
    }
    if o.stream.is_some() {
        causes.push(("FieldValueForbidden".into(), "stream".into(), "Forbidden: may not be specified".into()));
    }
    if causes.is_empty() { Ok(()) } else { Err(ApiError::invalid("PodLogOptions", "", pod, &causes)) }
}

/// kubernetes `pkg/registry/core/pod/strategy.go` `validateContainer`: the container named, or the only one;
/// init containers count (`VisitContainers`).
fn choose_container(pod_obj: &Value, pod: &str, asked: &str) -> Result<String, ApiError> {
    let names = |key: &str| -> Vec<String> {
        pod_obj["spec"][key]
            .as_array()
            .map(|cs| cs.iter().filter_map(|c| c["name"].as_str().map(String::from)).collect())
            .unwrap_or_default()
    };
    let containers = names("containers");
    let all: Vec<String> =
        names("initContainers").into_iter().chain(containers.clone()).chain(names("ephemeralContainers")).collect();
    if asked.is_empty() {
        return match containers.len() {
            1 => Ok(containers[0].clone()),
            0 => Err(ApiError::bad_request(format!("a container name must be specified for pod {pod}"))),
            _ => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {pod}, choose one of: [{}]",
                all.join(" ")
            ))),
        };
    }
    if !all.iter().any(|c| c == asked) {
        return Err(ApiError::bad_request(format!("container {asked} is not valid for pod {pod}")));
    }
    Ok(asked.to_string())
}

/// What the kubelet writes for the lines of one read (kubelet `pkg/kubelet/kuberuntime/logs/logs.go`):
/// `sinceTime`/`sinceSeconds` drop older lines, `tailLines` keeps the last ones, `timestamps` prefixes the
/// RFC 3339 time with nanoseconds.
fn render(lines: &[LogLine], o: &LogOptions, since: Option<jiff::Timestamp>, tail: bool) -> Vec<u8> {
    let kept: Vec<&LogLine> = lines.iter().filter(|l| since.is_none_or(|s| l.time >= s)).collect();
    let start = match (tail, o.tail_lines) {
        (true, Some(n)) => kept.len().saturating_sub(n as usize),
        _ => 0,
    };
    let mut out = Vec::new();
    for l in &kept[start..] {
        if o.timestamps {
            out.extend_from_slice(format!("{} ", l.time.strftime("%Y-%m-%dT%H:%M:%S%.fZ")).as_bytes());
        }
        out.extend_from_slice(l.text.as_bytes());
        out.push(b'\n');
    }
    out
}

/// The bytes a `limitBytes` budget still lets through (the kubelet's `LimitWriter` cuts mid-line).
fn take_budget(mut chunk: Vec<u8>, budget: &mut Option<i64>) -> Vec<u8> {
    if let Some(b) = budget {
        let n = (*b).max(0) as usize;
        if chunk.len() > n {
            chunk.truncate(n);
        }
        *b -= chunk.len() as i64;
    }
    chunk
}

/// What kube-apiserver says when no kubelet answers on the node: the address it would dial (kubernetes
/// `pkg/kubelet/client/kubelet_client.go` `NodeConnectionInfoGetter`: the preferred address, the kubelet port
/// from `status.daemonEndpoints`), refused.
fn no_kubelet(node: &Value, ns: &str, pod: &str, container: &str) -> String {
    let known: Vec<String> = node
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|x| format!("{{{} {}}}", x["type"].as_str().unwrap_or(""), x["address"].as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    let preferred = ["Hostname", "InternalDNS", "InternalIP", "ExternalDNS", "ExternalIP"].iter().find_map(|t| {
        node.pointer("/status/addresses")?.as_array()?.iter().find(|a| a["type"] == *t)?["address"]
            .as_str()
            .map(String::from)
    });
    let Some(host) = preferred else {
        return format!("no preferred addresses found; known addresses: [{}]", known.join(" "));
    };
    let port = node.pointer("/status/daemonEndpoints/kubeletEndpoint/Port").and_then(Value::as_u64).unwrap_or(10250);
    format!(
        "Get \"https://{host}:{port}/containerLogs/{ns}/{pod}/{container}\": dial tcp {host}:{port}: connect: connection refused"
    )
}

fn text_response(code: u16, body: Body) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "text/plain")
        .header("cache-control", "no-cache, private")
        .body(body)
        .unwrap()
}

/// Answers `GET pods/{name}/log` (authorized as `get pods/log` by the router).
pub async fn handle(server: &ApiServer, req: &Request<Bytes>, info: &ResInfo) -> Response<Body> {
    let ns = info.namespace.clone().unwrap_or_default();
    let name = info.name.clone().unwrap_or_default();
    let q = parse_query(req.uri().query());
    let opts = match parse_options(&q) {
        Ok(o) => o,
        Err(e) => return error_response(&e),
    };
    if let Err(e) = validate(&opts, &name) {
        return error_response(&e);
    }
    let Some(pod) = server.get_object("v1", "pods", Some(&ns), &name) else {
        return error_response(&ApiError::not_found(&ResourceName { group: "", resource: "pods" }, &name));
    };
    let container = match choose_container(&pod, &name, &opts.container) {
        Ok(c) => c,
        Err(e) => return error_response(&e),
    };
    let node = pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or_default().to_string();
    // `LogLocation` has no location for a pod without a node; the streaming handler answers a nil stream with
    // 204 (apiserver `pkg/endpoints/handlers/responsewriters/writers.go` `StreamObject`).
    if node.is_empty() {
        return Response::builder().status(204).header("cache-control", "no-cache, private").body(full("")).unwrap();
    }
    let sources: Vec<Arc<dyn PodLogSource>> = server.inner.log_sources.read().unwrap().clone();
    let found =
        sources.iter().find_map(|s| s.read(&ns, &name, &container, opts.previous, None).map(|r| (s.clone(), r)));
    let Some((source, first)) = found else {
        // No kubelet for this pod. kube-apiserver looks the node up first (its getter names the resource
        // `pods`), then dials the kubelet.
        let Some(node_obj) = server.get_object("v1", "nodes", None, &node) else {
            return error_response(&ApiError::not_found(&ResourceName { group: "", resource: "pods" }, &node));
        };
        return error_response(&ApiError::new(500, "", no_kubelet(&node_obj, &ns, &name, &container)));
    };
    let first = match first {
        Ok(l) => l,
        // genericrest `GenericHttpResponseChecker`: the kubelet's 400 becomes a BadRequest with its text.
        Err(msg) => return error_response(&ApiError::bad_request(msg)),
    };
    let since = opts.since_time.or_else(|| {
        opts.since_seconds.map(|s| {
            jiff::Timestamp::now().checked_sub(jiff::SignedDuration::from_secs(s)).unwrap_or(jiff::Timestamp::MIN)
        })
    });
    let mut budget = opts.limit_bytes;
    let head = take_budget(render(&first.lines, &opts, since, true), &mut budget);
    if !opts.follow || !first.running || budget.is_some_and(|b| b <= 0) {
        return text_response(200, full(head));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(64);
    let body = StreamBody::new(futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|f| (f, rx)) }))
        .boxed_unsync();
    let mut epoch = server.epoch();
    epoch.borrow_and_update();
    tokio::spawn(async move {
        if !head.is_empty() && tx.send(Ok(Frame::data(Bytes::from(head)))).await.is_err() {
            return;
        }
        let mut cursor = first.next;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(FOLLOW_POLL) => {}
                _ = epoch.changed() => return,
                _ = tx.closed() => return,
            }
            // The kubelet follows until the container stops (kubelet `logs.go` `waitLogs`): a pod that is gone,
            // a restarted container or a stopped one ends the stream.
            let Some(Ok(more)) = source.read(&ns, &name, &container, opts.previous, Some(cursor)) else { return };
            let chunk = take_budget(render(&more.lines, &opts, since, false), &mut budget);
            if !chunk.is_empty() && tx.send(Ok(Frame::data(Bytes::from(chunk)))).await.is_err() {
                return;
            }
            if !more.running || more.next.instance != cursor.instance || budget.is_some_and(|b| b <= 0) {
                return;
            }
            cursor = more.next;
        }
    });
    let mut resp = text_response(200, body);
    resp.headers_mut().insert("transfer-encoding", "chunked".parse().unwrap());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(secs: i64, text: &str) -> LogLine {
        LogLine { time: jiff::Timestamp::from_second(secs).unwrap(), text: text.into() }
    }

    #[test]
    fn tail_and_since_keep_the_newest_lines() {
        let lines = vec![line(10, "a"), line(20, "b"), line(30, "c")];
        let o = LogOptions { tail_lines: Some(2), ..Default::default() };
        assert_eq!(render(&lines, &o, None, true), b"b\nc\n");
        let since = jiff::Timestamp::from_second(25).ok();
        assert_eq!(render(&lines, &LogOptions::default(), since, true), b"c\n");
        let o = LogOptions { timestamps: true, ..Default::default() };
        assert_eq!(render(&lines[..1], &o, None, true), b"1970-01-01T00:00:10Z a\n");
    }

    #[test]
    fn limit_bytes_cuts_mid_line_across_chunks() {
        let mut budget = Some(3);
        assert_eq!(take_budget(b"ab\n".to_vec(), &mut budget), b"ab\n");
        assert_eq!(take_budget(b"cd\n".to_vec(), &mut budget), b"");
        let mut budget = Some(2);
        assert_eq!(take_budget(b"abc\n".to_vec(), &mut budget), b"ab");
    }

    #[test]
    fn options_are_validated_like_kube_apiserver() {
        let q = |s: &str| parse_query(Some(s));
        assert_eq!(
            parse_options(&q("tailLines=abc")).unwrap_err().message,
            "strconv.ParseInt: parsing \"abc\": invalid syntax"
        );
        let o = parse_options(&q("tailLines=-2&limitBytes=0&sinceSeconds=1&sinceTime=2024-01-01T00:00:00Z")).unwrap();
        let e = validate(&o, "one").unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "PodLogOptions \"one\" is invalid: [tailLines: Invalid value: -2: must be greater than or equal to 0, limitBytes: Invalid value: 0: must be greater than 0, []: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified]"
        );
        assert_eq!(
            parse_options(&q("sinceTime=bad")).unwrap_err().message,
            "parsing time \"bad\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"bad\" as \"2006\""
        );
        assert!(!parse_options(&q("follow=maybe")).unwrap().follow);
    }

    #[test]
    fn a_pod_with_several_containers_needs_a_name() {
        let pod = serde_json::json!({"spec": {"containers": [{"name": "etcd"}, {"name": "backup-restore"}]}});
        assert_eq!(
            choose_container(&pod, "p", "").unwrap_err().message,
            "a container name must be specified for pod p, choose one of: [etcd backup-restore]"
        );
        assert_eq!(choose_container(&pod, "p", "nope").unwrap_err().message, "container nope is not valid for pod p");
        assert_eq!(choose_container(&pod, "p", "etcd").unwrap(), "etcd");
    }
}
