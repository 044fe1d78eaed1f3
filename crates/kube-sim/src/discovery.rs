//! Discovery documents: `/version`, `/api`, `/apis`, `/api/v1`, `/apis/{group}[/{version}]`, the aggregated
//! discovery (`apidiscovery.k8s.io/v2`) and minimal OpenAPI answers.

use std::sync::Arc;

use serde_json::{Value, json};

use super::ApiServer;
use super::resources::ResourceType;

fn types(server: &ApiServer) -> Vec<Arc<ResourceType>> {
    let st = server.inner.state.lock().unwrap();
    let mut v: Vec<Arc<ResourceType>> = st.types.values().cloned().collect();
    // Built-ins first in registration order of groups, CRDs after.
    v.sort_by_key(|t| (t.crd, group_rank(&t.group)));
    v
}

fn group_rank(g: &str) -> usize {
    const ORDER: &[&str] = &[
        "",
        "apps",
        "events.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "autoscaling",
        "batch",
        "policy",
        "rbac.authorization.k8s.io",
        "storage.k8s.io",
        "apiextensions.k8s.io",
        "coordination.k8s.io",
    ];
    ORDER.iter().position(|x| *x == g).unwrap_or(ORDER.len())
}

/// `/version`.
pub fn version(server: &ApiServer) -> Value {
    let gv = &server.inner.opts.git_version;
    let minor = gv.trim_start_matches('v').split('.').nth(1).unwrap_or("33").to_string();
    json!({"major": "1", "minor": minor, "emulationMajor": "1", "emulationMinor": minor, "minCompatibilityMajor": "1", "minCompatibilityMinor": minor,
        "gitVersion": gv, "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24.0", "compiler": "gc", "platform": "linux/amd64"})
}

/// `/api`.
pub fn core_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]})
}

fn groups(server: &ApiServer) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for t in types(server) {
        if t.group.is_empty() {
            continue;
        }
        let e = match out.iter_mut().find(|(g, _)| *g == t.group) {
            Some(e) => e,
            None => {
                out.push((t.group.clone(), vec![]));
                out.last_mut().unwrap()
            }
        };
        for v in &t.versions {
            if !e.1.contains(v) {
                e.1.push(v.clone());
            }
        }
    }
    // autoscaling is served for the Scale kind.
    if !out.iter().any(|(g, _)| g == "autoscaling") {
        out.push(("autoscaling".into(), vec!["v1".into()]));
    }
    out
}

fn group_json(g: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions.iter().map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v})).collect();
    json!({"name": g, "versions": vs, "preferredVersion": vs[0]})
}

/// `/apis`.
pub fn group_list(server: &ApiServer) -> Value {
    let gs: Vec<Value> = groups(server).iter().map(|(g, v)| group_json(g, v)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs})
}

/// `/apis/{group}`.
pub fn group(server: &ApiServer, g: &str) -> Option<Value> {
    let gs = groups(server);
    let (_, vs) = gs.iter().find(|(n, _)| n == g)?;
    let mut v = group_json(g, vs);
    v["kind"] = "APIGroup".into();
    v["apiVersion"] = "v1".into();
    Some(v)
}

fn resource_entries(t: &ResourceType) -> Vec<Value> {
    let mut main = json!({"name": t.plural, "singularName": t.singular, "namespaced": t.namespaced, "kind": t.kind, "verbs": t.verbs()});
    if !t.short_names.is_empty() {
        main["shortNames"] = json!(t.short_names);
    }
    if !t.categories.is_empty() {
        main["categories"] = json!(t.categories);
    }
    main["storageVersionHash"] =
        json!(format!("{:x}", fxhash(&format!("{}/{}", t.group, t.plural))).chars().take(11).collect::<String>());
    let mut out = vec![main];
    if t.status {
        out.push(json!({"name": format!("{}/status", t.plural), "singularName": "", "namespaced": t.namespaced, "kind": t.kind, "verbs": ["get", "patch", "update"]}));
    }
    if t.scale.is_some() {
        out.push(json!({"name": format!("{}/scale", t.plural), "singularName": "", "namespaced": t.namespaced, "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
    }
    for s in &t.extra_subresources {
        let (kind, verbs) = match s.as_str() {
            "log" => ("Pod", json!(["get"])),
            "eviction" => ("Eviction", json!(["create"])),
            "proxy" => (
                if t.plural == "pods" { "PodProxyOptions" } else { "ServiceProxyOptions" },
                json!(["create", "delete", "get", "patch", "update"]),
            ),
            _ => ("", json!(["get"])),
        };
        out.push(json!({"name": format!("{}/{s}", t.plural), "singularName": "", "namespaced": t.namespaced, "kind": kind, "verbs": verbs}));
    }
    out
}

fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

/// `/api/v1` or `/apis/{group}/{version}`.
pub fn resource_list(server: &ApiServer, g: &str, v: &str) -> Option<Value> {
    let ts: Vec<Arc<ResourceType>> =
        types(server).into_iter().filter(|t| t.group == g && t.versions.iter().any(|x| x == v)).collect();
    let gv = if g.is_empty() { v.to_string() } else { format!("{g}/{v}") };
    if ts.is_empty() {
        if g == "autoscaling" && v == "v1" {
            return Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": []}));
        }
        return None;
    }
    let resources: Vec<Value> = ts.iter().flat_map(|t| resource_entries(t)).collect();
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

fn aggregated_resource(t: &ResourceType) -> Value {
    let mut r = json!({
        "resource": t.plural, "responseKind": {"group": "", "version": "", "kind": t.kind},
        "scope": if t.namespaced { "Namespaced" } else { "Cluster" }, "singularResource": t.singular, "verbs": t.verbs(),
    });
    if !t.short_names.is_empty() {
        r["shortNames"] = json!(t.short_names);
    }
    if !t.categories.is_empty() {
        r["categories"] = json!(t.categories);
    }
    let mut subs = Vec::new();
    if t.status {
        subs.push(json!({"subresource": "status", "responseKind": {"group": "", "version": "", "kind": t.kind}, "verbs": ["get", "patch", "update"]}));
    }
    if t.scale.is_some() {
        subs.push(json!({"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"}, "verbs": ["get", "patch", "update"]}));
    }
    if !subs.is_empty() {
        r["subresources"] = json!(subs);
    }
    r
}

/// Aggregated discovery (`APIGroupDiscoveryList`) for `/api` (core) or `/apis`.
pub fn aggregated(server: &ApiServer, core: bool) -> Value {
    let ts = types(server);
    let mut items = Vec::new();
    let group_names: Vec<(String, Vec<String>)> =
        if core { vec![("".into(), vec!["v1".into()])] } else { groups(server) };
    for (g, versions) in group_names {
        let vs: Vec<Value> = versions
            .iter()
            .map(|v| {
                let rs: Vec<Value> = ts
                    .iter()
                    .filter(|t| t.group == g && t.versions.contains(v))
                    .map(|t| aggregated_resource(t))
                    .collect();
                json!({"version": v, "resources": rs, "freshness": "Current"})
            })
            .collect();
        let mut item = json!({"metadata": {"creationTimestamp": null}, "versions": vs});
        if !g.is_empty() {
            item["metadata"]["name"] = g.into();
        }
        items.push(item);
    }
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

/// `/openapi/v3`: the root listing one document per group/version.
pub fn openapi_v3_root(server: &ApiServer) -> Value {
    let mut paths = serde_json::Map::new();
    let mut gvs: Vec<(String, String)> = vec![(String::new(), "v1".into())];
    for (g, vs) in groups(server) {
        for v in vs {
            gvs.push((g.clone(), v));
        }
    }
    let rv = server.resource_version();
    for (g, v) in gvs {
        let p = if g.is_empty() { format!("api/{v}") } else { format!("apis/{g}/{v}") };
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={:016X}", fxhash(&format!("{p}{rv}")))}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/{g}/{v}`: a minimal document with one PATCH operation per
/// kind that advertises the `fieldValidation` query parameter, so kubectl relies on server-side field
/// validation instead of downloading schemas. It carries no schemas (kubectl then falls back to its
/// compiled-in strategic-merge metadata for built-in kinds and to JSON merge patch for custom resources).
pub fn openapi_v3_group(server: &ApiServer, g: &str, v: &str) -> Option<Value> {
    let ts: Vec<Arc<ResourceType>> =
        types(server).into_iter().filter(|t| t.group == g && t.versions.iter().any(|x| x == v)).collect();
    if ts.is_empty() {
        return None;
    }
    let prefix = if g.is_empty() { format!("/api/{v}") } else { format!("/apis/{g}/{v}") };
    let mut paths = serde_json::Map::new();
    for t in ts {
        let p = if t.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
        } else {
            format!("{prefix}/{}/{{name}}", t.plural)
        };
        let gvk = json!({"group": g, "version": v, "kind": t.kind});
        let params = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}},
        ]);
        paths.insert(p, json!({
            "get": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "get", "responses": {}},
            "put": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "put", "parameters": params, "responses": {}},
            "patch": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "patch", "parameters": params, "responses": {}},
        }));
    }
    Some(
        json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": server.inner.opts.git_version}, "paths": paths, "components": {"schemas": {}}}),
    )
}
