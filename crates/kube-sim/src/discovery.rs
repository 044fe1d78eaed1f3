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
    let minor = gv.trim_start_matches('v').split('.').nth(1).unwrap_or("36").to_string();
    // The compatibility version is one minor below the binary version (component-base/compatibility).
    let min_compat = minor.parse::<u32>().map(|m| m.saturating_sub(1).to_string()).unwrap_or_else(|_| minor.clone());
    json!({"major": "1", "minor": minor, "emulationMajor": "1", "emulationMinor": minor, "minCompatibilityMajor": "1", "minCompatibilityMinor": min_compat,
        "gitVersion": gv, "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24.0", "compiler": "gc", "platform": "linux/amd64"})
}

/// The body of `GET /version` as kube-apiserver writes it: `version.Info`'s fields in struct order, indented by
/// two spaces (apiserver endpoints/handlers/responsewriters/writers.go `WriteRawJSON` uses `json.MarshalIndent`;
/// `kubectl get --raw /version` prints these bytes).
pub fn version_text(server: &ApiServer) -> String {
    // component-base/version/types.go `Info`.
    const ORDER: &[&str] = &[
        "major",
        "minor",
        "emulationMajor",
        "emulationMinor",
        "minCompatibilityMajor",
        "minCompatibilityMinor",
        "gitVersion",
        "gitCommit",
        "gitTreeState",
        "buildDate",
        "goVersion",
        "compiler",
        "platform",
    ];
    let v = version(server);
    let fields: Vec<String> = ORDER
        .iter()
        .filter_map(|k| v.get(*k).map(|x| format!("  \"{k}\": {}", serde_json::to_string(x).unwrap_or_default())))
        .collect();
    format!("{{\n{}\n}}", fields.join(",\n"))
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
    main["storageVersionHash"] = json!(storage_version_hash(&t.group, t.preferred(), &t.kind));
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
            "portforward" => ("PodPortForwardOptions", json!(["create", "get"])),
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

/// apiserver `pkg/endpoints/discovery/storageversionhash.go`: the first 8 bytes of
/// sha256("group/version/kind") of the storage version, base64.
fn storage_version_hash(group: &str, version: &str, kind: &str) -> String {
    use base64::Engine;
    let digest = sha256(format!("{group}/{version}/{kind}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(&digest[..8])
}

/// SHA-256 (FIPS 180-4).
fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
        0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
        0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
        0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
        0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
        0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
        0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] =
        [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for chunk in msg.chunks(64) {
        let mut w = [0u32; 64];
        for i in 0..16 {
            w[i] = u32::from_be_bytes([chunk[4 * i], chunk[4 * i + 1], chunk[4 * i + 2], chunk[4 * i + 3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh.wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (i, x) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
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

/// Rewrites `$ref`s of a schemars schema (`#/$defs/X`) to `prefix` + X.
// kube-openapi pkg/spec3 conversion (as served by kube-apiserver v1.36.2): OpenAPI v3 allows no siblings next to
// a `$ref`, so a reference with a description becomes `{"description": …, "allOf": [{"$ref": …}]}`; Swagger 2.0
// keeps the siblings.
fn rewrite_refs(v: &mut Value, prefix: &str) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get_mut("$ref")
                && let Some(name) = r.strip_prefix("#/$defs/")
            {
                *r = format!("{prefix}{name}");
            }
            // (A `properties` map may have a property named `$ref`, as JSONSchemaProps does: not a reference.)
            if prefix == V3_PREFIX && m.len() > 1 && m.get("$ref").is_some_and(|r| r.is_string()) {
                let r = m.remove("$ref").unwrap();
                m.insert("allOf".into(), json!([{"$ref": r}]));
            }
            for c in m.values_mut() {
                rewrite_refs(c, prefix);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|c| rewrite_refs(c, prefix)),
        _ => {}
    }
}

/// The schema definitions of a kind, keyed like kube's OpenAPI (`io.k8s.api.core.v1.Pod`), with `$ref`s under
/// `prefix`: built-in kinds from k8s-openapi's schemas (generated from kube's OpenAPI document), custom
/// resources from their CRD's `openAPIV3Schema` with `metadata` pointing at ObjectMeta, as
/// apiextensions-apiserver `pkg/controller/openapi/builder` does (definition name: reversed group, version,
/// kind).
fn kind_definitions(server: &ApiServer, t: &ResourceType, version: &str, prefix: &str) -> Vec<(String, Value)> {
    let gvk = json!([{"group": t.group, "version": version, "kind": t.kind}]);
    let mut out = Vec::new();
    if !t.crd {
        let Some(root) = super::validation::builtin::schema(&t.group, &t.plural) else {
            return out;
        };
        let mut root = root.clone();
        let defs = root.as_object_mut().and_then(|m| m.remove("$defs")).unwrap_or_default();
        let name = root.get("title").and_then(|n| n.as_str()).map(String::from).unwrap_or_else(|| t.kind.clone());
        if let Some(m) = root.as_object_mut() {
            m.remove("$schema");
            m.remove("title");
            m.insert("x-kubernetes-group-version-kind".into(), gvk);
        }
        rewrite_refs(&mut root, prefix);
        out.push((name, root));
        if let Some(d) = defs.as_object() {
            for (k, v) in d {
                let mut v = v.clone();
                rewrite_refs(&mut v, prefix);
                out.push((k.clone(), v));
            }
        }
        return out;
    }
    let crd_name = format!("{}.{}", t.plural, t.group);
    let Some(crd) = server.get_object("apiextensions.k8s.io/v1", "customresourcedefinitions", None, &crd_name) else {
        return out;
    };
    let schema = crd
        .pointer("/spec/versions")
        .and_then(|vs| vs.as_array())
        .and_then(|vs| vs.iter().find(|x| x.get("name").and_then(|n| n.as_str()) == Some(version)))
        .and_then(|x| x.pointer("/schema/openAPIV3Schema"))
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    let mut schema = schema;
    if let Some(m) = schema.as_object_mut() {
        // apiextensions-apiserver pkg/controller/openapi/builder/builder.go: `apiVersion` and `kind` get
        // TypeMeta's definitions, `metadata` a reference to ObjectMeta with the standard description
        // (`addTypeMetaProperties`, `swaggerPartialObjectMetadataDescriptions`), whatever the CRD's schema says.
        let props = m.entry("properties").or_insert_with(|| json!({}));
        props["metadata"] = json!({"description": METADATA_DESCRIPTION,
                                   "$ref": format!("{prefix}io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")});
        rewrite_refs(&mut props["metadata"], prefix);
        props["apiVersion"] = json!({"type": "string", "description": API_VERSION_DESCRIPTION});
        props["kind"] = json!({"type": "string", "description": KIND_DESCRIPTION});
        m.insert("x-kubernetes-group-version-kind".into(), gvk);
    }
    let reversed: Vec<&str> = t.group.split('.').rev().collect();
    out.push((format!("{}.{version}.{}", reversed.join("."), t.kind), schema));
    let mut meta = k8s_openapi::schemars::SchemaGenerator::default()
        .into_root_schema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>()
        .to_value();
    let defs = meta.as_object_mut().and_then(|m| m.remove("$defs")).unwrap_or_default();
    if let Some(m) = meta.as_object_mut() {
        m.remove("$schema");
        m.remove("title");
    }
    rewrite_refs(&mut meta, prefix);
    out.push(("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".into(), meta));
    if let Some(d) = defs.as_object() {
        for (k, v) in d {
            let mut v = v.clone();
            rewrite_refs(&mut v, prefix);
            out.push((k.clone(), v));
        }
    }
    out
}

/// `$ref` prefix of OpenAPI v3 documents.
const V3_PREFIX: &str = "#/components/schemas/";
/// TypeMeta's `apiVersion` description.
const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
/// TypeMeta's `kind` description.
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
/// The standard description of an object's `metadata`.
const METADATA_DESCRIPTION: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// `/openapi/v2`: a Swagger 2.0 document with the definitions of every served kind (kube-openapi
/// `pkg/handler`), so clients that read v2 (older kubectl validation) find the schemas.
pub fn openapi_v2(server: &ApiServer) -> Value {
    let mut defs = serde_json::Map::new();
    for t in types(server).iter().filter(|t| !t.create_only) {
        for v in &t.versions {
            for (k, s) in kind_definitions(server, t, v, "#/definitions/") {
                defs.entry(k).or_insert(s);
            }
        }
    }
    json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": server.inner.opts.git_version}, "paths": {}, "definitions": defs})
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/{g}/{v}`: the schemas of the group-version's kinds
/// (`components.schemas`, see `kind_definitions`, so `kubectl explain` works) and per kind the GET/PUT/PATCH
/// operations with the `fieldValidation` query parameter, by which kubectl decides to rely on server-side field
/// validation (kubectl `pkg/cmd/util` `QueryParamVerifierV3`).
pub fn openapi_v3_group(server: &ApiServer, g: &str, v: &str) -> Option<Value> {
    let ts: Vec<Arc<ResourceType>> =
        types(server).into_iter().filter(|t| t.group == g && t.versions.iter().any(|x| x == v)).collect();
    if ts.is_empty() {
        return None;
    }
    let crd_group = ts.iter().all(|t| t.crd);
    let prefix = if g.is_empty() { format!("/api/{v}") } else { format!("/apis/{g}/{v}") };
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for t in &ts {
        if t.create_only {
            continue;
        }
        for (k, s) in kind_definitions(server, t, v, V3_PREFIX) {
            schemas.entry(k).or_insert(s);
        }
    }
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
    // The info of a custom resources' group-version is the CRD builder's (`builder.go` `BuildOpenAPIV3`); the
    // built-in groups' is kube-apiserver's, with the version as major.minor.
    let info = if crd_group {
        json!({"title": "Kubernetes CRD Swagger", "version": "v0.1.0"})
    } else {
        let gv = server.inner.opts.git_version.trim_start_matches('v');
        let minor: Vec<&str> = gv.splitn(3, '.').take(2).collect();
        json!({"title": "Kubernetes", "version": minor.join(".")})
    };
    Some(json!({"openapi": "3.0.0", "info": info, "paths": paths, "components": {"schemas": schemas}}))
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_is_indented_in_struct_order() {
        let text = super::version_text(&crate::ApiServer::new());
        assert!(text.starts_with("{\n  \"major\": \"1\",\n  \"minor\": "), "{text}");
        assert!(text.ends_with(",\n  \"compiler\": \"gc\",\n  \"platform\": \"linux/amd64\"\n}"), "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 13);
    }

    #[test]
    fn storage_version_hash_of_pods_matches_kube() {
        // kube-apiserver answers `xPOwRZ+Yhw8=` for pods (core v1 Pod).
        assert_eq!(super::storage_version_hash("", "v1", "Pod"), "xPOwRZ+Yhw8=");
    }
}
