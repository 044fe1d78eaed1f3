//! `pods/portforward` over WebSocket, the protocol kube-rs speaks: a `GET
//! /api/v1/namespaces/N/pods/NAME/portforward?ports=P[,P…]` upgraded to a WebSocket with subprotocol
//! `v4.channel.k8s.io`. Every binary message starts with a channel byte: port `i` has data channel `2i` and
//! error channel `2i+1`; the server first sends each channel's port number (two bytes, little endian), then
//! relays data (the frames kube-client's `api/portforward.rs` reads: a 3-byte initial frame per channel, then
//! data). Authorization is `get` on `pods/portforward`, and `create` as well, as kube-apiserver checks for
//! WebSocket upgrades of exec, attach and portforward since 1.35 (`AuthorizePodWebsocketUpgradeCreatePermission`,
//! beta and on by default, kubernetes `pkg/features/kube_features.go`).
//!
//! Each port is dialled at the loopback backend registered for the pod with
//! [`ApiServer::register_pod_backend`], the same registry as the pod proxy; there is no kubelet. Only the
//! TCP transport ([`ApiServer::serve_http`](super::ApiServer)) can upgrade a connection.

use std::net::SocketAddr;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{Request, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::ApiServer;
use super::rest::{Body, ResInfo, error_response, full, parse_query};
use super::status::{ApiError, ResourceName};

/// The WebSocket subprotocol the server speaks.
pub const PROTOCOL: &str = "v4.channel.k8s.io";

/// The backends of an accepted port-forward, in the order of `ports`, for the transport to bridge once the
/// connection is upgraded.
#[derive(Clone, Debug)]
pub struct Targets(pub Vec<(u16, SocketAddr)>);

/// Answers a `pods/portforward` request (authorized as `get` by the router): `101 Switching Protocols` with
/// [`Targets`] in the response extensions, or the error kube-apiserver gives.
pub fn handle(server: &ApiServer, req: &Request<Bytes>, info: &ResInfo, user: &super::UserInfo) -> Response<Body> {
    let ns = info.namespace.clone().unwrap_or_default();
    let pod = info.name.clone().unwrap_or_default();
    let create = super::rbac::Attributes {
        verb: "create".into(),
        group: String::new(),
        resource: "pods".into(),
        subresource: "portforward".into(),
        namespace: ns.clone(),
        name: pod.clone(),
    };
    if !super::rbac::authorize(server, user, &create).0 {
        return error_response(&super::rbac::forbidden(user, &create));
    }
    if server.get_object("v1", "pods", Some(&ns), &pod).is_none() {
        return error_response(&ApiError::not_found(&ResourceName { group: "", resource: "pods" }, &pod));
    }
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let key = header("sec-websocket-key");
    if !header("upgrade").eq_ignore_ascii_case("websocket") || key.is_empty() {
        return error_response(&ApiError::bad_request("Upgrade request required"));
    }
    if !header("sec-websocket-protocol").split(',').any(|p| p.trim() == PROTOCOL) {
        return error_response(&ApiError::bad_request(format!(
            "unable to upgrade: no supported WebSocket subprotocol (want {PROTOCOL})"
        )));
    }
    let q = parse_query(req.uri().query());
    let ports: Vec<u16> =
        match q.get("ports").map(|p| p.split(',').map(|x| x.trim().parse::<u16>()).collect::<Result<Vec<u16>, _>>()) {
            Some(Ok(p)) if !p.is_empty() => p,
            _ => return error_response(&ApiError::bad_request("query parameter \"ports\" is required")),
        };
    let mut targets = Vec::new();
    for port in ports {
        let b = server.inner.pod_backends.read().unwrap();
        match b.get(&(ns.clone(), pod.clone(), port.to_string())) {
            Some(addr) => targets.push((port, *addr)),
            None => {
                return error_response(&ApiError::new(
                    500,
                    "InternalError",
                    format!("error forwarding port {port} to pod {pod}: no backend for pod \"{pod}:{port}\""),
                ));
            }
        }
    }
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let mut resp = Response::builder()
        .status(101)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-accept", accept)
        .header("sec-websocket-protocol", PROTOCOL)
        .body(full(""))
        .unwrap();
    resp.extensions_mut().insert(Targets(targets));
    resp
}

/// Relays an upgraded connection: the initial port frames, then data both ways until either side closes.
pub async fn bridge(upgraded: hyper::upgrade::Upgraded, targets: Targets) {
    let io = hyper_util::rt::TokioIo::new(upgraded);
    let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(io, Role::Server, None).await;
    let (mut ws_tx, mut ws_rx) = ws.split();
    // Each port: announce the port on its data and its error channel.
    let mut conns = Vec::new();
    for (i, (port, addr)) in targets.0.iter().enumerate() {
        let le = port.to_le_bytes();
        for ch in [2 * i as u8, 2 * i as u8 + 1] {
            if ws_tx.send(Message::binary(vec![ch, le[0], le[1]])).await.is_err() {
                return;
            }
        }
        match tokio::net::TcpStream::connect(addr).await {
            Ok(c) => conns.push(Some(c)),
            Err(e) => {
                let msg = format!("error forwarding port {port}: {e}");
                let mut frame = vec![2 * i as u8 + 1];
                frame.extend_from_slice(msg.as_bytes());
                let _ = ws_tx.send(Message::binary(frame)).await;
                conns.push(None);
            }
        }
    }
    // Backend → WebSocket: one reader task per port feeding one channel.
    let (out_tx, mut out_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let mut writers = Vec::new();
    for (i, conn) in conns.into_iter().enumerate() {
        let Some(conn) = conn else {
            writers.push(None);
            continue;
        };
        let (mut rd, wr) = conn.into_split();
        writers.push(Some(wr));
        let out_tx = out_tx.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                match rd.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        let mut frame = Vec::with_capacity(n + 1);
                        frame.push(2 * i as u8);
                        frame.extend_from_slice(&buf[..n]);
                        if out_tx.send(frame).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
    drop(out_tx);
    loop {
        tokio::select! {
            frame = out_rx.recv() => match frame {
                Some(f) => if ws_tx.send(Message::binary(f)).await.is_err() { return },
                // Every backend closed: end the stream as the kubelet does.
                None => { let _ = ws_tx.send(Message::Close(None)).await; return }
            },
            msg = ws_rx.next() => match msg {
                Some(Ok(Message::Binary(data))) if data.len() > 1 && data[0] % 2 == 0 => {
                    let port_index = (data[0] / 2) as usize;
                    if let Some(Some(w)) = writers.get_mut(port_index)
                        && w.write_all(&data[1..]).await.is_err()
                    {
                        return;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
        }
    }
}
