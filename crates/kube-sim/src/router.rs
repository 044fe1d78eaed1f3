//! The request pipeline shared by both transports: authentication result → fault injection →
//! discovery / resource routing → authorization → handler → request log.

use std::time::Instant;

use bytes::Bytes;
use http::{Method, Request, Response};
use serde_json::json;

use super::requestlog::RequestRecord;
use super::rest::{
    Body, ResInfo, error_response, handle_resource, json_response, parse_query, parse_resource_path, verb_of,
};
use super::status::ApiError;
use super::{ApiServer, UserInfo, discovery, rbac};

fn accepts_aggregated(req: &Request<Bytes>) -> bool {
    req.headers().get("accept").and_then(|a| a.to_str().ok()).is_some_and(|a| a.contains("as=APIGroupDiscoveryList"))
}

fn aggregated_response(v: &serde_json::Value) -> Response<Body> {
    let mut r = json_response(200, v);
    r.headers_mut().insert(
        "content-type",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList".parse().unwrap(),
    );
    r
}

/// Handles one request; `user` is None when authentication failed.
pub async fn handle(server: ApiServer, req: Request<Bytes>, user: Option<UserInfo>) -> Response<Body> {
    let start = Instant::now();
    let path = req.uri().path().to_string();
    let q = parse_query(req.uri().query());
    let info = parse_resource_path(&path);
    let (verb, resource) = match &info {
        Some(i) => (
            verb_of(req.method(), i, &q).to_string(),
            match &i.subresource {
                Some(s) => format!("{}/{s}", i.resource),
                None => i.resource.clone(),
            },
        ),
        None => (req.method().as_str().to_lowercase(), path.clone()),
    };
    let ua = req.headers().get("user-agent").and_then(|u| u.to_str().ok()).unwrap_or_default().to_string();
    let resp = route(&server, &req, user.as_ref(), info.as_ref(), &verb, &resource, &path).await;
    server.inner.log.record(RequestRecord {
        verb,
        resource,
        namespace: info.as_ref().and_then(|i| i.namespace.clone()),
        path: req.uri().path_and_query().map(|p| p.to_string()).unwrap_or(path),
        code: resp.status().as_u16(),
        user: user.map(|u| u.name).unwrap_or_default(),
        user_agent: ua,
        duration: start.elapsed(),
    });
    resp
}

async fn route(
    server: &ApiServer,
    req: &Request<Bytes>,
    user: Option<&UserInfo>,
    info: Option<&ResInfo>,
    verb: &str,
    resource: &str,
    path: &str,
) -> Response<Body> {
    // An unknown bearer token is 401 on every path, /version and health included
    // (apiserver pkg/endpoints/filters/authentication.go runs before authorization).
    let Some(user) = user else {
        return error_response(&ApiError::unauthorized());
    };
    if matches!(path, "/healthz" | "/livez" | "/readyz") {
        return Response::builder()
            .status(200)
            .header("content-type", "text/plain; charset=utf-8")
            .body(super::rest::full("ok"))
            .unwrap();
    }
    // system:public-info-viewer: /version is readable anonymously (kubectl's version dispatcher relies on it);
    // only GET is served (pkg/routes/version.go).
    if path == "/version" || path == "/version/" {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return error_response(&ApiError::method_not_allowed());
        }
        return super::rest::json_text_response(200, discovery::version_text(server));
    }
    // Anonymous requests are authorized by RBAC like any user; apart from the public-info paths above the
    // bootstrap roles grant system:unauthenticated nothing (plugin/pkg/auth/authorizer/rbac/bootstrappolicy).
    if user.is_anonymous() && info.is_none() {
        let mut e = ApiError::new(
            403,
            "Forbidden",
            format!(
                "forbidden: User \"{}\" cannot {} path \"{path}\"",
                user.name,
                req.method().as_str().to_lowercase()
            ),
        );
        e.details = Some(json!({}));
        return error_response(&e);
    }
    if let Some(admin) = path.strip_prefix("/_sim/") {
        return sim_admin(server, req, user, admin);
    }
    let decision = server.inner.faults.decide(verb, resource);
    if !decision.latency.is_zero() {
        tokio::time::sleep(decision.latency).await;
    }
    if let Some(e) = decision.error {
        return error_response(&e);
    }
    let Some(info) = info else {
        return discovery_route(server, req, path);
    };
    let attrs = rbac::Attributes {
        verb: verb.to_string(),
        group: info.group.clone(),
        resource: info.resource.clone(),
        subresource: info.subresource.clone().unwrap_or_default(),
        namespace: info.namespace.clone().unwrap_or_default(),
        name: info.name.clone().unwrap_or_default(),
    };
    // Namespaces are cluster-scoped, but access to one namespace object is checked in that namespace.
    let attrs = if info.resource == "namespaces" && info.group.is_empty() && info.name.is_some() {
        rbac::Attributes { namespace: info.name.clone().unwrap_or_default(), ..attrs }
    } else {
        attrs
    };
    let reviews = info.group == "authorization.k8s.io" || info.group == "authentication.k8s.io";
    if !reviews && !rbac::authorize(server, user, &attrs).0 {
        let mut a = attrs.clone();
        if info.resource == "namespaces" && info.name.is_some() {
            a.namespace.clear();
        }
        return error_response(&rbac::forbidden(user, &a));
    }
    handle_resource(server, req, user, info, verb).await
}

fn discovery_route(server: &ApiServer, req: &Request<Bytes>, path: &str) -> Response<Body> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return error_response(&ApiError::method_not_allowed());
    }
    let p = path.trim_end_matches('/');
    let segs: Vec<&str> = p.trim_start_matches('/').split('/').collect();
    let found = match segs.as_slice() {
        ["version"] => Some(discovery::version(server)),
        ["api"] if accepts_aggregated(req) => {
            return aggregated_response(&discovery::aggregated(server, true));
        }
        ["apis"] if accepts_aggregated(req) => {
            return aggregated_response(&discovery::aggregated(server, false));
        }
        ["api"] => Some(discovery::core_versions()),
        ["apis"] => Some(discovery::group_list(server)),
        ["api", v] => discovery::resource_list(server, "", v),
        ["apis", g] => discovery::group(server, g),
        ["apis", g, v] => discovery::resource_list(server, g, v),
        ["openapi", "v3"] => Some(discovery::openapi_v3_root(server)),
        // Only JSON is served; a client asking for the protobuf form alone gets 406 and reads JSON instead.
        ["openapi", "v2"] => {
            let accept = req.headers().get("accept").and_then(|a| a.to_str().ok()).unwrap_or("");
            if !accept.is_empty() && !accept.contains("json") && !accept.contains("*/*") {
                return error_response(&ApiError::new(406, "NotAcceptable", "only application/json is served"));
            }
            Some(discovery::openapi_v2(server))
        }
        ["openapi", "v3", "api", v] => discovery::openapi_v3_group(server, "", v),
        ["openapi", "v3", "apis", g, v] => discovery::openapi_v3_group(server, g, v),
        _ => None,
    };
    match found {
        Some(v) => json_response(200, &v),
        // Paths outside /api/v1 and the served /apis/GROUP/VERSION prefixes reach the mux's NotFound handler,
        // a plain-text 404 (apiserver pkg/server/mux/pathrecorder.go, `http.NotFound`); inside a served
        // group-version an unknown resource is a JSON Status (pkg/endpoints/discovery).
        None if !in_served_group_version(server, &segs) => plain_not_found(),
        None => error_response(&ApiError::no_route()),
    }
}

fn in_served_group_version(server: &ApiServer, segs: &[&str]) -> bool {
    match segs {
        ["api", _, ..] => true,
        ["apis", g, _, ..] => discovery::group(server, g).is_some(),
        _ => false,
    }
}

/// `404 page not found` as text, like Go's `http.NotFound`.
pub fn plain_not_found() -> Response<Body> {
    Response::builder()
        .status(404)
        .header("content-type", "text/plain; charset=utf-8")
        .header("x-content-type-options", "nosniff")
        .body(super::rest::full("404 page not found\n"))
        .unwrap()
}

/// `/_sim/faults` (GET rules, POST a rule, DELETE all), `/_sim/cut-watches`, `/_sim/requests` (counters).
fn sim_admin(server: &ApiServer, req: &Request<Bytes>, user: &UserInfo, what: &str) -> Response<Body> {
    if !user.is_master() {
        return error_response(&ApiError::new(
            403,
            "Forbidden",
            format!("User \"{}\" cannot use the simulator admin API", user.name),
        ));
    }
    let faults = server.faults();
    match (req.method().clone(), what) {
        (Method::GET, "faults") => json_response(200, &serde_json::to_value(faults.rules()).unwrap_or_default()),
        (Method::POST, "faults") => match serde_json::from_slice::<super::FaultRule>(req.body()) {
            Ok(r) => {
                faults.add(r);
                json_response(201, &serde_json::to_value(faults.rules()).unwrap_or_default())
            }
            Err(e) => error_response(&ApiError::bad_request(e.to_string())),
        },
        (Method::DELETE, "faults") => {
            faults.clear();
            json_response(200, &json!([]))
        }
        (Method::POST, "cut-watches") => {
            let q = parse_query(req.uri().query());
            let n = faults.cut_watches(q.get("resource").map(String::as_str));
            json_response(200, &json!({"cut": n}))
        }
        (Method::POST, "restart") => {
            // Answer first, then restart (the restart drops this connection too).
            let q = parse_query(req.uri().query());
            let keep = q.get("keepHistory").is_none_or(|k| k != "false");
            let s = server.clone();
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                s.restart(keep).await;
            });
            json_response(202, &json!({"restart": true, "keepHistory": keep}))
        }
        (Method::GET, "requests") => {
            let c: Vec<_> = server
                .request_log()
                .counters()
                .into_iter()
                .map(|((v, r, c), n)| json!({"verb": v, "resource": r, "code": c, "count": n}))
                .collect();
            json_response(200, &json!(c))
        }
        _ => error_response(&ApiError::no_route()),
    }
}
