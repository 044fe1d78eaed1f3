//! The service proxy: `/api/v1/namespaces/N/services/NAME[:PORT]/proxy/PATH` forwarded to a loopback
//! backend registered with [`ApiServer::register_service_backend`].

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::ApiServer;
use super::rest::{Body, ResInfo, error_response, full};
use super::status::{ApiError, ResourceName};

/// Forwards one proxied request.
pub async fn forward(server: &ApiServer, req: &Request<Bytes>, info: &ResInfo) -> Response<Body> {
    let ns = info.namespace.clone().unwrap_or_default();
    let raw = info.name.clone().unwrap_or_default();
    let (svc, port) = match raw.split_once(':') {
        Some((s, p)) => (s.to_string(), p.to_string()),
        None => (raw.clone(), String::new()),
    };
    let Some(svc_obj) = server.get_object("v1", "services", Some(&ns), &svc) else {
        return error_response(&ApiError::not_found(
            &ResourceName {
                group: "",
                resource: "services",
            },
            &svc,
        ));
    };
    // A named port (`svc:client`) resolves through the Service's ports.
    let port = if !port.is_empty() && port.parse::<u16>().is_err() {
        svc_obj
            .pointer("/spec/ports")
            .and_then(|p| p.as_array())
            .and_then(|ps| {
                ps.iter()
                    .find(|p| p.get("name").and_then(|n| n.as_str()) == Some(port.as_str()))
            })
            .and_then(|p| p.get("port").and_then(|n| n.as_i64()))
            .map(|n| n.to_string())
            .unwrap_or(port)
    } else {
        port
    };
    let target = {
        let b = server.inner.backends.read().unwrap();
        b.get(&(ns.clone(), svc.clone(), port.clone()))
            .copied()
            .or_else(|| {
                if port.is_empty() {
                    b.iter()
                        .find(|((n, s, _), _)| *n == ns && *s == svc)
                        .map(|(_, a)| *a)
                } else {
                    None
                }
            })
    };
    let Some(target) = target else {
        return error_response(&ApiError::new(
            503,
            "ServiceUnavailable",
            format!("no endpoints available for service \"{raw}\""),
        ));
    };
    let q = req
        .uri()
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let uri = format!("http://{target}/{}{q}", info.subpath);
    let mut b = Request::builder().method(req.method()).uri(&uri);
    for (k, v) in req.headers() {
        if k != "authorization" && k != "host" {
            b = b.header(k, v);
        }
    }
    let out = b.body(Full::new(req.body().clone())).unwrap();
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    match client.request(out).await {
        Ok(resp) => {
            let (parts, body) = resp.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            Response::from_parts(parts, full(bytes))
        }
        Err(e) => error_response(&ApiError::new(
            503,
            "ServiceUnavailable",
            format!("error trying to reach service: {e}"),
        )),
    }
}
