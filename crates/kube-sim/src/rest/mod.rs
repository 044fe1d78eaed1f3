//! Request routing and the generic REST handlers (create/get/list/update/patch/delete/deletecollection)
//! for every resource, plus subresources (status, scale) and the object lifecycle (finalizers,
//! deletionTimestamp, generation, managedFields).
//!
//! The verbs live in their own files as kube-apiserver splits its handlers
//! (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/{create,get,patch,update,delete}.go`; watches are in
//! `crate::watch`); routing, request context, validation shared by the verbs and subresources stay here.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use serde_json::{Value, json};

use super::admission::{AdmissionOperation, AdmissionRequest};
use super::resources::{ResourceType, apply_builtin_defaults, generation_tracked};
use super::selectors::{FieldSelector, LabelSelector};
use super::status::{ApiError, ResourceName};
use super::store::Key;
use super::validation::Scope;
use super::{ApiServer, UserInfo, apply, gc, rbac};

mod create;
mod delete;
mod get;
mod patch;
mod update;

pub use create::*;
pub use delete::*;
pub use get::*;
pub use patch::*;
pub use update::*;

/// Response body used by both transports.
pub type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// A full body from bytes.
pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never| match never {}).boxed_unsync()
}

/// A JSON response.
pub fn json_response(code: u16, v: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .header("cache-control", "no-cache, private")
        .body(full(serde_json::to_vec(v).unwrap_or_default()))
        .unwrap()
}

/// A JSON response whose body is already text (kept byte for byte).
pub fn json_text_response(code: u16, text: String) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .header("cache-control", "no-cache, private")
        .body(full(text.into_bytes()))
        .unwrap()
}

/// A Status error response.
pub fn error_response(e: &ApiError) -> Response<Body> {
    let mut r = json_response(e.code, &e.to_status());
    if let Some(ra) = e.retry_after {
        r.headers_mut().insert("retry-after", ra.to_string().parse().unwrap());
    }
    r
}

/// RFC 3339 "now" with second precision, like metav1.Time.
pub fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Decodes `%XX` and `+` in a query component.
pub fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses a query string.
pub fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    let mut m = HashMap::new();
    for pair in q.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        m.insert(pct_decode(k), pct_decode(v));
    }
    m
}

/// What a resource request addresses (like kube's RequestInfo).
#[derive(Debug, Clone, Default)]
pub struct ResInfo {
    /// API group.
    pub group: String,
    /// Version.
    pub version: String,
    /// Namespace, if namespaced.
    pub namespace: Option<String>,
    /// Plural resource.
    pub resource: String,
    /// Object name.
    pub name: Option<String>,
    /// Subresource.
    pub subresource: Option<String>,
    /// Remaining path after the subresource (proxy).
    pub subpath: String,
    /// Legacy `/watch/` prefix.
    pub watch_prefix: bool,
}

/// Parses `/api/v1/...` or `/apis/g/v/...` into a [`ResInfo`]; None if it is not a resource path.
pub fn parse_resource_path(path: &str) -> Option<ResInfo> {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] if !rest.is_empty() && !rest[0].is_empty() => ("", *v, rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() && !rest[0].is_empty() => (*g, *v, rest),
        _ => return None,
    };
    let mut info = ResInfo { group: group.into(), version: version.into(), ..Default::default() };
    let mut rest: Vec<&str> = rest.to_vec();
    if rest[0] == "watch" {
        info.watch_prefix = true;
        rest.remove(0);
    }
    if rest.is_empty() {
        return None;
    }
    if rest[0] == "namespaces" && rest.len() >= 2 {
        if rest.len() == 2 || (rest.len() == 3 && (rest[2] == "status" || rest[2] == "finalize")) {
            info.resource = "namespaces".into();
            info.name = Some(pct_decode(rest[1]));
            info.subresource = rest.get(2).map(|s| s.to_string());
            return Some(info);
        }
        info.namespace = Some(rest[1].to_string());
        rest.drain(..2);
    }
    info.resource = rest[0].to_string();
    info.name = rest.get(1).map(|s| pct_decode(s));
    info.subresource = rest.get(2).map(|s| s.to_string());
    if rest.len() > 3 {
        info.subpath = rest[3..].join("/");
    }
    Some(info)
}

thread_local! {
    /// `Warning` headers of the request being handled on this thread (the verb handlers are synchronous).
    static WARNINGS: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Adds a `Warning: 299 - "msg"` header to the answer of the current request.
pub fn add_warning(msg: String) {
    WARNINGS.with(|w| {
        let mut w = w.borrow_mut();
        if !w.contains(&msg) {
            w.push(msg);
        }
    });
}

fn take_warnings() -> Vec<String> {
    WARNINGS.with(|w| std::mem::take(&mut *w.borrow_mut()))
}

fn with_warnings(mut resp: Response<Body>, warnings: Vec<String>) -> Response<Body> {
    for w in warnings {
        let v = format!("299 - {}", Value::String(w));
        if let Ok(h) = http::HeaderValue::from_str(&v) {
            resp.headers_mut().append("warning", h);
        }
    }
    resp
}

/// Drops the fields a built-in kind does not declare (k8s-openapi schemas, see
/// [`super::validation::builtin`]): with `fieldValidation=Strict` they are a 400 like the strict decoder's
/// (`<Kind> in version "v1" cannot be handled as a <Kind>: strict decoding error: unknown field "x"`), otherwise
/// dropped with a warning each (apiserver pkg/endpoints/handlers/rest.go `fieldValidation`).
fn prune_builtin(ctx: &Ctx, obj: &mut Value) -> Result<(), ApiError> {
    if ctx.rt.crd {
        return Ok(());
    }
    let before = ctx.strict.then(|| obj.clone());
    let unknown = super::validation::builtin::prune_unknown(&ctx.rt.group, &ctx.rt.plural, obj);
    if unknown.is_empty() {
        return Ok(());
    }
    if let Some(before) = before {
        *obj = before;
        let list: Vec<String> = unknown.iter().map(|p| format!("unknown field \"{p}\"")).collect();
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"{v}\" cannot be handled as a {kind}: strict decoding error: {}",
            list.join(", "),
            kind = ctx.rt.kind,
            v = ctx.version
        )));
    }
    if ctx.warn_unknown {
        for p in unknown {
            add_warning(format!("unknown field \"{p}\""));
        }
    }
    Ok(())
}

/// Per-request context for the generic handlers.
pub struct Ctx<'a> {
    /// The server.
    pub server: &'a ApiServer,
    /// Who.
    pub user: &'a UserInfo,
    /// Resource type.
    pub rt: Arc<ResourceType>,
    /// Requested version.
    pub version: String,
    /// Namespace (namespaced resources).
    pub ns: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// fieldManager (query or derived from the User-Agent).
    pub manager: String,
    /// `fieldValidation=Strict`: unknown fields are an error instead of pruned.
    pub strict: bool,
    /// Pruned unknown fields are reported as `Warning` headers (`fieldValidation=Warn`, the default; not
    /// with `Ignore`).
    pub warn_unknown: bool,
}

impl Ctx<'_> {
    fn key(&self) -> Key {
        self.rt.storage_key()
    }
    fn events_api(&self) -> bool {
        self.rt.group == "events.k8s.io"
    }
    fn rname(&self) -> ResourceName<'_> {
        ResourceName { group: &self.rt.group, resource: &self.rt.plural }
    }
    fn ns_key(&self) -> String {
        self.ns.clone().unwrap_or_default()
    }
    pub(crate) fn api_version(&self) -> String {
        self.rt.api_version(&self.version)
    }
    /// The Go zero value of this kind in the request's version (see [`super::resources::zero_object`]).
    fn zero(&self) -> Value {
        if self.rt.crd { json!({}) } else { super::resources::zero_object(&self.api_version(), &self.rt.plural) }
    }

    /// Object as returned to the client (apiVersion of the requested version).
    fn out(&self, obj: &Value) -> Value {
        let mut o = if self.events_api() { super::events::to_external(obj) } else { obj.clone() };
        if self.rt.group.is_empty() && self.rt.plural == "events" {
            super::events::complete_core(&mut o);
        }
        o["apiVersion"] = self.api_version().into();
        o
    }
}

fn name_error(kind: &str, group: &str, name: &str, msg: String) -> ApiError {
    ApiError::invalid(
        kind,
        group,
        name,
        &[("FieldValueInvalid".into(), "metadata.name".into(), format!("Invalid value: \"{name}\": {msg}"))],
    )
}

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Validates `metadata.name` like the resource's kube-apiserver strategy.
pub fn validate_name(rt: &ResourceType, name: &str) -> Result<(), ApiError> {
    let (kind, group) = (rt.kind.as_str(), rt.group.as_str());
    if rt.group == "rbac.authorization.k8s.io" {
        if name == "." || name == ".." || name.contains('/') || name.contains('%') {
            return Err(name_error(kind, group, name, "may not contain '/' or '%'".to_string()));
        }
        return Ok(());
    }
    match (group, rt.plural.as_str()) {
        ("", "namespaces") => {
            // kube-apiserver 1.36 reports a dotted namespace name (a valid subdomain) with the short message of
            // its declarative name validation.
            if !is_label(name) {
                let msg = if name.contains('.') && name.split('.').all(is_label) {
                    "must not contain dots".to_string()
                } else {
                    DNS1123_LABEL_MSG.into()
                };
                return Err(name_error(kind, group, name, msg));
            }
        }
        // Service names are RFC 1123 labels since the RelaxedServiceNameValidation feature
        // (`pkg/apis/core/validation/validation.go` `ValidateServiceName`); StatefulSet names are labels too, as
        // their pods' hostnames (`pkg/apis/apps/validation/validation.go` `ValidateStatefulSetName`).
        ("", "services") | ("apps", "statefulsets") => {
            if !is_label(name) {
                return Err(name_error(kind, group, name, DNS1123_LABEL_MSG.into()));
            }
        }
        _ => {
            if name.len() > 253 {
                return Err(name_error(kind, group, name, "must be no more than 253 characters".into()));
            }
            if !name.split('.').all(is_label) {
                return Err(name_error(kind, group, name, DNS1123_SUBDOMAIN_MSG.into()));
            }
        }
    }
    Ok(())
}

fn generate_suffix() -> String {
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5).map(|_| ALPHA[rand::random_range(0..ALPHA.len())] as char).collect()
}

fn strip_status_for_spec(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    o
}

/// Paths present in `before` but removed by pruning in `after`.
fn pruned_paths(before: &Value, after: &Value, prefix: &str, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, bv) in b {
                let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                match a.get(k) {
                    None => out.push(p),
                    Some(av) => pruned_paths(bv, av, &p, out),
                }
            }
        }
        (Value::Array(b), Value::Array(a)) => {
            for (i, (bv, av)) in b.iter().zip(a.iter()).enumerate() {
                pruned_paths(bv, av, &format!("{prefix}[{i}]"), out);
            }
        }
        _ => {}
    }
}

const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

fn is_label_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
            && v.as_bytes()[0].is_ascii_alphanumeric()
            && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric())
}

fn is_qualified_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    prefix.is_none_or(|p| !p.is_empty() && p.len() <= 253 && p.split('.').all(is_label))
        && !name.is_empty()
        && is_label_value(name)
}

/// Label and annotation syntax and the 256 KiB annotation limit.
fn validate_metadata(rt: &ResourceType, name: &str, obj: &Value) -> Result<(), ApiError> {
    let mut causes: Vec<(String, String, String)> = Vec::new();
    if let Some(labels) = obj.pointer("/metadata/labels").and_then(|l| l.as_object()) {
        for (k, v) in labels {
            if !is_qualified_key(k) {
                // A key with more than one '/' is reported as a whole (`IsQualifiedName` in
                // `staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go`, worded for label keys).
                let msg = if k.matches('/').count() > 1 {
                    format!(
                        "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                        QUALIFIED_NAME_MSG.trim_start_matches("name part ")
                    )
                } else {
                    QUALIFIED_NAME_MSG.to_string()
                };
                causes.push((
                    "FieldValueInvalid".into(),
                    "metadata.labels".into(),
                    format!("Invalid value: \"{k}\": {msg}"),
                ));
            }
            let v = v.as_str().unwrap_or_default();
            if v.len() > 63 {
                causes.push((
                    "FieldValueInvalid".into(),
                    "metadata.labels".into(),
                    format!("Invalid value: \"{v}\": must be no more than 63 bytes"),
                ));
            } else if !is_label_value(v) {
                causes.push((
                    "FieldValueInvalid".into(),
                    "metadata.labels".into(),
                    format!("Invalid value: \"{v}\": {LABEL_VALUE_MSG}"),
                ));
            }
        }
    }
    if let Some(ann) = obj.pointer("/metadata/annotations").and_then(|l| l.as_object()) {
        let total: usize = ann.iter().map(|(k, v)| k.len() + v.as_str().map(str::len).unwrap_or(0)).sum();
        if total > 262_144 {
            causes.push((
                "FieldValueTooLong".into(),
                "metadata.annotations".into(),
                "Too long: may not be more than 262144 bytes".into(),
            ));
        }
        for k in ann.keys() {
            if !is_qualified_key(k) {
                causes.push((
                    "FieldValueInvalid".into(),
                    "metadata.annotations".into(),
                    format!("Invalid value: \"{k}\": {QUALIFIED_NAME_MSG}"),
                ));
            }
        }
    }
    if let Some(refs) = obj.pointer("/metadata/ownerReferences").and_then(|r| r.as_array()) {
        causes.extend(owner_reference_causes(refs));
    }
    if causes.is_empty() { Ok(()) } else { Err(ApiError::invalid(&rt.kind, &rt.group, name, &causes)) }
}

/// `ValidateOwnerReferences` (`staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go`): every
/// reference needs a version, kind, name and uid, and at most one may be the controller. An invalid list is
/// printed as JSON in the Go field order of `metav1.OwnerReference`.
fn owner_reference_causes(refs: &[Value]) -> Vec<(String, String, String)> {
    let mut causes = Vec::new();
    let st = |r: &Value, k: &str| r.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_string();
    let mut first_controller = String::new();
    for r in refs {
        let api_version = st(r, "apiVersion");
        let version = api_version.rsplit('/').next().unwrap_or_default();
        if version.is_empty() {
            causes.push((
                "FieldValueInvalid".into(),
                "metadata.ownerReferences.apiVersion".into(),
                format!("Invalid value: {api_version:?}: version must not be empty"),
            ));
        }
        for f in ["kind", "name", "uid"] {
            let v = st(r, f);
            if v.is_empty() {
                causes.push((
                    "FieldValueInvalid".into(),
                    format!("metadata.ownerReferences.{f}"),
                    format!("Invalid value: {v:?}: must not be empty"),
                ));
            }
        }
        if r.get("controller").and_then(|c| c.as_bool()) == Some(true) {
            let cur = format!("{}/{}", st(r, "kind"), st(r, "name"));
            if first_controller.is_empty() {
                first_controller = cur;
            } else {
                let printed: Vec<String> = refs
                    .iter()
                    .map(|r| {
                        let mut parts = Vec::new();
                        for f in ["apiVersion", "kind", "name", "uid"] {
                            parts.push(format!("{f:?}:{}", serde_json::to_string(&st(r, f)).unwrap_or_default()));
                        }
                        for f in ["controller", "blockOwnerDeletion"] {
                            if let Some(b) = r.get(f).and_then(|b| b.as_bool()) {
                                parts.push(format!("{f:?}:{b}"));
                            }
                        }
                        format!("{{{}}}", parts.join(","))
                    })
                    .collect();
                causes.push((
                    "FieldValueInvalid".into(),
                    "metadata.ownerReferences".into(),
                    format!(
                        "Invalid value: [{}]: Only one reference can have Controller set to true. Found \"true\" in references for {first_controller} and {cur}",
                        printed.join(",")
                    ),
                ));
            }
        }
    }
    causes
}

/// Immutability rules of built-in kinds that clients run into (422 like kube-apiserver).
/// kube prints the old Go struct of an immutable template (`core.PodTemplateSpec{...}`), not reproduced.
fn go_struct_placeholder() -> &'static str {
    "core.PodTemplateSpec{...}"
}

fn check_immutable(ctx: &Ctx, name: &str, cur: &Value, new: &Value) -> Result<(), ApiError> {
    let forbid = |field: &str, msg: &str| {
        Err(ApiError::invalid(
            &ctx.rt.kind,
            &ctx.rt.group,
            name,
            &[("FieldValueForbidden".into(), field.into(), format!("Forbidden: {msg}"))],
        ))
    };
    match (ctx.rt.group.as_str(), ctx.rt.plural.as_str()) {
        ("apps", "statefulsets") => {
            let strip = |o: &Value| {
                let mut spec = o.get("spec").cloned().unwrap_or(Value::Null);
                if let Some(m) = spec.as_object_mut() {
                    for f in [
                        "replicas",
                        "ordinals",
                        "template",
                        "updateStrategy",
                        "persistentVolumeClaimRetentionPolicy",
                        "minReadySeconds",
                        "revisionHistoryLimit",
                    ] {
                        m.remove(f);
                    }
                }
                spec
            };
            if strip(cur) != strip(new) {
                // `ValidateStatefulSetUpdate` (`pkg/apis/apps/validation/validation.go`) also reports a template
                // whose labels no longer match the selector, before the forbidden-update cause.
                let sel = LabelSelector::from_json(new.pointer("/spec/selector").unwrap_or(&Value::Null));
                let tl = new.pointer("/spec/template/metadata/labels").cloned().unwrap_or(json!({}));
                let mut causes = Vec::new();
                if !sel.0.is_empty() && !sel.matches(&json!({"metadata": {"labels": tl}})) {
                    causes.push((
                        "FieldValueInvalid".to_string(),
                        "spec.template.metadata.labels".to_string(),
                        format!(
                            "Invalid value: {}: `selector` does not match template `labels`",
                            serde_json::to_string(&tl).unwrap_or_default()
                        ),
                    ));
                }
                causes.push((
                    "FieldValueForbidden".to_string(),
                    "spec".to_string(),
                    "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden".to_string(),
                ));
                return Err(ApiError::invalid(&ctx.rt.kind, &ctx.rt.group, name, &causes));
            }
        }
        ("", "configmaps") | ("", "secrets") if cur.get("immutable").and_then(|i| i.as_bool()) == Some(true) => {
            for f in ["data", "binaryData"] {
                if cur.get(f) != new.get(f) {
                    return forbid(f, "field is immutable when `immutable` is set");
                }
            }
            if new.get("immutable") != cur.get("immutable") {
                return forbid("immutable", "field is immutable when `immutable` is set");
            }
        }
        ("", "pods") => {
            // ValidatePodUpdate (pkg/apis/core/validation/validation.go): only images, activeDeadlineSeconds,
            // tolerations and terminationGracePeriodSeconds may change. The real message ends with a diff of
            // the internal PodSpec, which is not reproduced. A different number of containers is said first, on
            // `spec.containers`, and alone.
            let count = |o: &Value| o.pointer("/spec/containers").and_then(|c| c.as_array()).map_or(0, Vec::len);
            if count(cur) != count(new) {
                return forbid("spec.containers", "pod updates may not add or remove containers");
            }
            let strip = |o: &Value| {
                let mut spec = o.get("spec").cloned().unwrap_or(Value::Null);
                if let Some(m) = spec.as_object_mut() {
                    for f in
                        ["activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates"]
                    {
                        m.remove(f);
                    }
                    for key in ["containers", "initContainers"] {
                        if let Some(cs) = m.get_mut(key).and_then(|c| c.as_array_mut()) {
                            for c in cs.iter_mut().filter_map(|c| c.as_object_mut()) {
                                c.remove("image");
                            }
                        }
                    }
                }
                spec
            };
            if strip(cur) != strip(new) {
                return forbid(
                    "spec",
                    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
                );
            }
        }
        // ValidateJobSpecUpdate (pkg/apis/batch/validation/validation.go): the template is immutable (except
        // while suspended, not modelled) and so are selector and completionMode.
        ("batch", "jobs") if cur.pointer("/spec/template") != new.pointer("/spec/template") => {
            let suspended = cur.pointer("/spec/suspend").and_then(|s| s.as_bool()) == Some(true);
            if !suspended {
                return Err(ApiError::invalid(
                    &ctx.rt.kind,
                    &ctx.rt.group,
                    name,
                    &[(
                        "FieldValueInvalid".into(),
                        "spec.template".into(),
                        format!("Invalid value: {}: field is immutable", go_struct_placeholder()),
                    )],
                ));
            }
        }
        ("", "secrets") if cur.get("type") != new.get("type") => {
            // `ValidateSecretUpdate` (`pkg/apis/core/validation/validation.go`) also validates the new Secret as
            // a whole: a `kubernetes.io/tls` Secret needs both key pair entries.
            let mut causes = vec![(
                "FieldValueInvalid".to_string(),
                "type".to_string(),
                format!("Invalid value: {}: field is immutable", new.get("type").cloned().unwrap_or_default()),
            )];
            if new.get("type").and_then(|t| t.as_str()) == Some("kubernetes.io/tls") {
                for k in ["tls.crt", "tls.key"] {
                    if new.pointer("/data").and_then(|d| d.get(k)).is_none() {
                        causes.push(("FieldValueRequired".into(), format!("data[{k}]"), "Required value".into()));
                    }
                }
            }
            return Err(ApiError::invalid(&ctx.rt.kind, &ctx.rt.group, name, &causes));
        }
        ("", "persistentvolumeclaims") => {
            // `ValidatePersistentVolumeClaimUpdate` (kubernetes `pkg/apis/core/validation/validation.go`): the
            // specs are compared after the changes that are allowed are copied over, and their diff is part
            // of the message.
            let spec = |o: &Value| o.get("spec").cloned().unwrap_or(Value::Null);
            let (mut old, mut newer) = (spec(cur), spec(new));
            let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
            // The volume name may be set once (by the binding controller).
            if text(&old, "volumeName").is_empty() {
                set(&mut old, "volumeName", newer.get("volumeName").cloned());
            }
            // A storage class may be set on a claim that had none and no beta annotation
            // (`validateStorageClassUpgradeFromNil`).
            let beta = |o: &Value| o.pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class").cloned();
            let new_class = newer.get("storageClassName").and_then(Value::as_str).map(str::to_string);
            if beta(cur).is_none()
                && old.get("storageClassName").is_none_or(Value::is_null)
                && new_class.as_ref().is_some_and(|c| beta(new).is_none_or(|a| a.as_str() == Some(c.as_str())))
            {
                set(&mut newer, "storageClassName", None);
            }
            // A bound claim may change its storage request and its volume attributes class.
            if new.pointer("/status/phase").and_then(Value::as_str) == Some("Bound") {
                let old_size = old.pointer("/resources/requests/storage").cloned();
                if let Some(r) = newer.pointer_mut("/resources/requests").and_then(Value::as_object_mut) {
                    match old_size {
                        Some(size) => r.insert("storage".into(), size),
                        None => r.remove("storage"),
                    };
                }
                if newer.get("volumeAttributesClassName").is_some_and(|v| !v.is_null()) {
                    set(&mut newer, "volumeAttributesClassName", old.get("volumeAttributesClassName").cloned());
                }
            }
            let (old, newer) = (crate::godiff::pvc_spec(&old), crate::godiff::pvc_spec(&newer));
            if old != newer {
                let diff = crate::godiff::unified(&old, &newer);
                return forbid(
                    "spec",
                    &format!(
                        "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n{diff}"
                    ),
                );
            }
        }
        _ => {}
    }
    Ok(())
}

/// Sets (or, with `None`, removes) field `key` of object `v`.
fn set(v: &mut Value, key: &str, value: Option<Value>) {
    if let Some(m) = v.as_object_mut() {
        match value {
            Some(value) => m.insert(key.to_string(), value),
            None => m.remove(key),
        };
    }
}

/// Validation of the built-in kinds (see [`super::corevalidation`]); the 422 on failure.
fn validate_builtin(ctx: &Ctx, name: &str, obj: &Value) -> Result<(), ApiError> {
    let causes = super::corevalidation::validate(&ctx.rt.group, &ctx.rt.plural, &ctx.ns_key(), obj);
    if causes.is_empty() { Ok(()) } else { Err(ApiError::invalid(&ctx.rt.kind, &ctx.rt.group, name, &causes)) }
}

/// Runs CRD defaulting, pruning and validation; returns the 422 on failure.
fn validate_custom(ctx: &Ctx, obj: &mut Value, old: Option<&Value>, scope: Scope) -> Result<(), ApiError> {
    let Some(v) = ctx.rt.validators.get(&ctx.version).or_else(|| ctx.rt.validators.values().next()) else {
        return Ok(());
    };
    let before = (ctx.strict || ctx.warn_unknown).then(|| obj.clone());
    v.default_and_prune(obj);
    if let Some(before) = before {
        let mut unknown = Vec::new();
        pruned_paths(&before, obj, "", &mut unknown);
        if !ctx.strict {
            for p in unknown.drain(..) {
                add_warning(format!("unknown field \"{p}\""));
            }
        }
        if !unknown.is_empty() {
            let list: Vec<String> = unknown.iter().map(|p| format!("unknown field \"{p}\"")).collect();
            return Err(ApiError::bad_request(format!(
                "{kind} in version \"{v}\" cannot be handled as a {kind}: strict decoding error: {}",
                list.join(", "),
                kind = ctx.rt.kind,
                v = ctx.version
            )));
        }
    }
    let errs = v.validate(obj, old, scope);
    // `ValidateScaleSpec` (apiextensions-apiserver `pkg/registry/customresource/validator.go`) reads the spec
    // replicas with `unstructured.NestedInt64`, whose error names the Go type of a value of another type.
    let mut scale_cause = None;
    if let (Scope::Main, Some(sc)) = (scope, &ctx.rt.scale) {
        let ptr = sc.spec_replicas.replace('.', "/");
        if let Some(val) = obj.pointer(&ptr).filter(|v| !v.is_i64() && !v.is_null()) {
            let (shown, go_type) = match val {
                Value::String(s) => (s.clone(), "string"),
                Value::Bool(b) => (b.to_string(), "bool"),
                Value::Number(n) => (n.to_string(), "float64"),
                Value::Array(_) => (val.to_string(), "[]interface {}"),
                _ => (val.to_string(), "map[string]interface {}"),
            };
            scale_cause = Some((
                "FieldValueInvalid".to_string(),
                sc.spec_replicas.clone(),
                format!(
                    "Invalid value: 0: {} accessor error: {shown} is of the type {go_type}, expected int64",
                    sc.spec_replicas
                ),
            ));
        }
    }
    if errs.is_empty() && scale_cause.is_none() {
        return Ok(());
    }
    let name = obj.pointer("/metadata/name").and_then(|n| n.as_str()).unwrap_or_default().to_string();
    let mut causes: Vec<(String, String, String)> = errs
        .iter()
        .map(|e| {
            let prefix = format!("{}: ", e.field);
            let msg = e.message.strip_prefix(&prefix).unwrap_or(&e.message).to_string();
            (e.reason.clone(), e.field.clone(), msg)
        })
        .collect();
    if let Some(c) = scale_cause {
        // Before the note that CEL rules were skipped, which closes the list.
        let at = causes.iter().position(|(_, f, _)| f == "<nil>").unwrap_or(causes.len());
        causes.insert(at, c);
    }
    Err(ApiError::invalid(&ctx.rt.kind, &ctx.rt.group, &name, &causes))
}

fn admit(
    ctx: &Ctx,
    op: AdmissionOperation,
    sub: Option<&str>,
    name: &str,
    obj: Option<&Value>,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let hooks = ctx.server.inner.hooks.read().unwrap().clone();
    if hooks.is_empty() {
        return Ok(());
    }
    let req = AdmissionRequest {
        operation: op,
        group: ctx.rt.group.clone(),
        version: ctx.version.clone(),
        resource: ctx.rt.plural.clone(),
        subresource: sub.map(String::from),
        namespace: ctx.ns.clone(),
        name: name.into(),
        user: ctx.user.name.clone(),
        groups: ctx.user.groups.clone(),
        object: obj.map(|o| ctx.out(o)),
        old_object: old.map(|o| ctx.out(o)),
    };
    for h in hooks {
        if let Err(msg) = h.admit(ctx.server, &req) {
            return Err(ApiError::new(
                403,
                "Forbidden",
                format!("admission webhook \"{}\" denied the request: {msg}", h.name()),
            ));
        }
    }
    Ok(())
}

fn check_namespace(ctx: &Ctx, name: &str) -> Result<(), ApiError> {
    if !ctx.rt.namespaced {
        return Ok(());
    }
    let ns = ctx.ns_key();
    let st = ctx.server.inner.state.lock().unwrap();
    match st.get("", "namespaces", "", &ns) {
        None => Err(ApiError::not_found(&ResourceName { group: "", resource: "namespaces" }, &ns)),
        Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
            let what = if name.is_empty() {
                ctx.rname().qualified()
            } else {
                format!("{} \"{name}\"", ctx.rname().qualified())
            };
            Err(ApiError::forbidden(
                &ctx.rname(),
                name,
                format!(
                    "{what} is forbidden: unable to create new content in namespace {ns} because it is being terminated"
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// A body of another kind. Built-in kinds fail in the codec's conversion to the internal type
/// (`runtime.Scheme.Convert` in `staging/src/k8s.io/apimachinery/pkg/runtime/scheme.go`, wrapped by the
/// handlers' "cannot be handled as" decoding error); custom resources compare the kinds.
fn kind_mismatch(ctx: &Ctx, obj: &Value, kind: &str) -> ApiError {
    if ctx.rt.crd {
        return ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            ctx.rt.kind
        ));
    }
    let api_version = obj.get("apiVersion").and_then(|a| a.as_str()).unwrap_or("v1");
    let version = api_version.rsplit('/').next().unwrap_or(api_version);
    let internal = if ctx.rt.group.is_empty() { "core" } else { ctx.rt.group.split('.').next().unwrap_or("core") };
    ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {want}: converting ({version}.{kind}) to ({internal}.{want}): unknown conversion",
        want = ctx.rt.kind
    ))
}

/// Validates the query options of a request like apimachinery `pkg/apis/meta/internalversion/validation`
/// (`ValidateListOptions`, `validateWatchOptions`) and `pkg/apis/meta/v1/validation` (`ValidateDryRun`).
fn validate_options(q: &HashMap<String, String>, verb: &str) -> Result<(), ApiError> {
    let mut causes: Vec<(String, String, String)> = Vec::new();
    let forbidden = |c: &mut Vec<(String, String, String)>, f: &str, m: &str| {
        c.push(("FieldValueForbidden".into(), f.into(), format!("Forbidden: {m}")))
    };
    let options_kind = match verb {
        "list" | "watch" => {
            let rv = q.get("resourceVersion").map(String::as_str).unwrap_or_default();
            let cont = q.get("continue").is_some_and(|c| !c.is_empty());
            let rvm = q.get("resourceVersionMatch").map(String::as_str).unwrap_or_default();
            let sie = q.get("sendInitialEvents").is_some();
            if verb == "watch" {
                // kube-apiserver 1.36 no longer requires allowWatchBookmarks here (`validateWatchOptions` in
                // `staging/src/k8s.io/apimachinery/pkg/apis/meta/internalversion/validation/validation.go`).
                if sie && rvm != "NotOlderThan" {
                    forbidden(
                        &mut causes,
                        "resourceVersionMatch",
                        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                    );
                }
                if !rvm.is_empty() {
                    if !sie {
                        forbidden(
                            &mut causes,
                            "resourceVersionMatch",
                            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                        );
                    }
                    if rvm != "NotOlderThan" {
                        causes.push((
                            "FieldValueNotSupported".into(),
                            "resourceVersionMatch".into(),
                            format!("Unsupported value: \"{rvm}\": supported values: \"NotOlderThan\""),
                        ));
                    }
                    if cont {
                        forbidden(
                            &mut causes,
                            "resourceVersionMatch",
                            "resourceVersionMatch is forbidden when continue is provided",
                        );
                    }
                }
            } else {
                if !rvm.is_empty() {
                    if rv.is_empty() {
                        forbidden(
                            &mut causes,
                            "resourceVersionMatch",
                            "resourceVersionMatch is forbidden unless resourceVersion is provided",
                        );
                    }
                    if cont {
                        forbidden(
                            &mut causes,
                            "resourceVersionMatch",
                            "resourceVersionMatch is forbidden when continue is provided",
                        );
                    }
                    if rvm != "Exact" && rvm != "NotOlderThan" {
                        causes.push((
                            "FieldValueNotSupported".into(),
                            "resourceVersionMatch".into(),
                            format!(
                                "Unsupported value: \"{rvm}\": supported values: \"Exact\", \"NotOlderThan\", \"\""
                            ),
                        ));
                    }
                    if rvm == "Exact" && rv == "0" {
                        forbidden(
                            &mut causes,
                            "resourceVersionMatch",
                            "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                        );
                    }
                }
                if sie {
                    forbidden(&mut causes, "sendInitialEvents", "sendInitialEvents is forbidden for list");
                }
            }
            "ListOptions"
        }
        "create" | "update" | "patch" | "delete" | "deletecollection" => {
            if let Some(d) = q.get("dryRun")
                && d != "All"
            {
                causes.push((
                    "FieldValueNotSupported".into(),
                    "dryRun".into(),
                    format!("Unsupported value: [\"{d}\"]: supported values: \"All\""),
                ));
            }
            match verb {
                "create" => "CreateOptions",
                "update" => "UpdateOptions",
                "patch" => "PatchOptions",
                _ => "DeleteOptions",
            }
        }
        _ => return Ok(()),
    };
    if causes.is_empty() { Ok(()) } else { Err(ApiError::invalid(options_kind, "meta.k8s.io", "", &causes)) }
}

/// Decides the field manager: `fieldManager` query or the User-Agent up to the first `/`.
fn manager_name(q: &HashMap<String, String>, headers: &http::HeaderMap) -> String {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    let ua = headers.get("user-agent").and_then(|u| u.to_str().ok()).unwrap_or("unknown");
    ua.split('/').next().unwrap_or("unknown").to_string()
}

/// Parses YAML or JSON bytes to a JSON value.
pub fn parse_body(body: &[u8], ct: &str) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    if ct.contains("protobuf") {
        return super::protobuf::decode_envelope(body).map_err(|m| ApiError::new(415, "UnsupportedMediaType", m));
    }
    if ct.contains("yaml") {
        let s = std::str::from_utf8(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
        return serde_saphyr::from_str::<Value>(s)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")));
    }
    serde_json::from_slice(body).map_err(|e| {
        // Go's `json.Unmarshal` wording when its scanner rejects the body, serde's otherwise.
        let why = super::gojson::syntax_error(body).unwrap_or_else(|| e.to_string());
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {why}"))
    })
}

/// A JSON body of a create or update that does not decode, as the handlers word it for the kind they expect.
// apiserver endpoints/handlers/rest.go `transformDecodeError` and `summarizeData(body, 30)`: the body as text
// when it starts with `{`, in hex otherwise, cut at 30 bytes.
fn undecodable(e: ApiError, kind: &str, body: &[u8], ct: &str) -> ApiError {
    if e.code != 400 || ct.contains("yaml") || ct.contains("protobuf") {
        return e;
    }
    let cut = &body[..body.len().min(30)];
    let more = if body.len() > 30 { " ..." } else { "" };
    let summary = match body.first() {
        None => "<empty>".to_string(),
        Some(b'{') => format!("{}{more}", String::from_utf8_lossy(cut)),
        Some(_) => format!("{}{more}", cut.iter().map(|b| format!("{b:02x}")).collect::<String>()),
    };
    ApiError::bad_request(format!(
        "the object provided is unrecognized (must be of type {kind}): {} ({summary})",
        e.message
    ))
}

/// The verb of a resource request (kube's RequestInfo verbs).
pub fn verb_of(method: &Method, info: &ResInfo, q: &HashMap<String, String>) -> &'static str {
    let watch = info.watch_prefix || q.get("watch").is_some_and(|w| w == "1" || w == "true");
    match *method {
        Method::GET | Method::HEAD if watch => "watch",
        Method::GET | Method::HEAD if info.name.is_some() => "get",
        Method::GET | Method::HEAD => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if info.name.is_some() => "delete",
        Method::DELETE => "deletecollection",
        _ => "unknown",
    }
}

/// Handles a resource request after authentication and authorization.
pub async fn handle_resource(
    server: &ApiServer,
    req: &Request<Bytes>,
    user: &UserInfo,
    info: &ResInfo,
    verb: &str,
) -> Response<Body> {
    let q = parse_query(req.uri().query());
    let rt = {
        let st = server.inner.state.lock().unwrap();
        st.resource(&info.group, &info.resource)
    };
    let Some(rt) = rt.filter(|r| r.versions.contains(&info.version)) else {
        let served = info.group.is_empty() || super::discovery::group(server, &info.group).is_some();
        if !served {
            return super::router::plain_not_found();
        }
        return error_response(&ApiError::no_route());
    };
    if rt.namespaced != info.namespace.is_some()
        && !(rt.namespaced && info.name.is_none() && matches!(verb, "list" | "watch" | "deletecollection"))
    {
        return error_response(&ApiError::no_route());
    }
    if rt.namespaced && info.namespace.is_none() && verb == "deletecollection" {
        return error_response(&ApiError::no_route());
    }
    // Namespaces have no collection delete (pkg/registry/core/namespace/storage: no DeleteCollection).
    if !rt.crd && rt.group.is_empty() && rt.plural == "namespaces" && verb == "deletecollection" {
        return error_response(&ApiError::method_not_allowed());
    }
    // The patch handler checks the content type before it reads the object (handlers/patch.go).
    if verb == "patch" {
        let ctype = req.headers().get("content-type").and_then(|c| c.to_str().ok()).unwrap_or("");
        let ctype = ctype.split(';').next().unwrap_or("").trim();
        if !matches!(
            ctype,
            "application/json-patch+json"
                | "application/merge-patch+json"
                | "application/strategic-merge-patch+json"
                | "application/apply-patch+yaml"
        ) {
            let mut e = ApiError::new(415, "UnsupportedMediaType", "415: Unsupported Media Type");
            e.details = Some(json!({}));
            return error_response(&e);
        }
        // Custom resources have no strategic merge patch: refused before the object is read, so also for one
        // that does not exist.
        if rt.crd && ctype == "application/strategic-merge-patch+json" {
            return error_response(&ApiError::new(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ));
        }
    }
    let ctx = Ctx {
        server,
        user,
        rt: rt.clone(),
        version: info.version.clone(),
        ns: info.namespace.clone(),
        dry_run: q.get("dryRun").is_some_and(|d| d == "All"),
        manager: manager_name(&q, req.headers()),
        strict: q.get("fieldValidation").is_some_and(|v| v == "Strict"),
        warn_unknown: q.get("fieldValidation").is_none_or(|v| v == "Warn" || v.is_empty()),
    };
    let ct = req
        .headers()
        .get("content-type")
        .and_then(|c| c.to_str().ok())
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let accept = req.headers().get("accept").and_then(|c| c.to_str().ok()).unwrap_or("").to_string();
    let form = if accept.contains("as=Table") {
        Form::Table
    } else if accept.contains("as=PartialObjectMetadata") {
        Form::Metadata
    } else {
        Form::Full
    };
    if let Err(e) = validate_options(&q, verb) {
        return error_response(&e);
    }
    let sub = info.subresource.as_deref();
    if let Some(s) = sub {
        let ok = (s == "status" && rt.status)
            || (s == "scale" && rt.scale.is_some())
            || rt.extra_subresources.iter().any(|e| e == s);
        if !ok || info.name.is_none() {
            return error_response(&ApiError::no_route());
        }
    }
    if rt.create_only {
        if verb != "create" {
            return error_response(&ApiError::method_not_allowed());
        }
        let body = match parse_body(req.body(), &ct) {
            Ok(b) => b,
            Err(e) => return error_response(&e),
        };
        // The create handler runs the field manager on the request object before the registry answers
        // (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go`), so a review's answer owns the
        // fields of its spec.
        let mut recorded = body.clone();
        let api_version = rt.api_version(rt.preferred());
        // Access reviews' spec is a non-pointer struct: it always exists in the Go zero value.
        let zero = json!({"metadata": {}, "spec": {}});
        super::apply::record_update(
            None,
            &mut recorded,
            &manager_name(&q, req.headers()),
            &api_version,
            "",
            &now(),
            &zero,
            apply::Shape::Builtin,
        );
        return match rbac::review(server, user, &rt, body) {
            Ok(mut v) => {
                if let Some(mf) = recorded.pointer("/metadata/managedFields")
                    && v["metadata"].is_object()
                {
                    v["metadata"]["managedFields"] = mf.clone();
                }
                json_response(201, &v)
            }
            Err(e) => error_response(&e),
        };
    }
    if sub == Some("proxy") {
        return super::proxy::forward(server, req, info).await;
    }
    if sub == Some("portforward") {
        if verb != "get" && verb != "create" {
            return error_response(&ApiError::method_not_allowed());
        }
        return super::portforward::handle(server, req, info, user);
    }
    if sub == Some("eviction") {
        if verb != "create" {
            return error_response(&ApiError::method_not_allowed());
        }
        let body: Value = serde_json::from_slice(req.body()).unwrap_or(Value::Null);
        return match evict(&ctx, info.name.as_deref().unwrap_or_default(), &body) {
            Ok(v) => json_response(201, &v),
            Err(e) => error_response(&e),
        };
    }
    if sub == Some("log") {
        if verb != "get" {
            return error_response(&ApiError::method_not_allowed());
        }
        return super::log::handle(server, req, info).await;
    }
    if sub == Some("scale") {
        return super::scale::handle(&ctx, req, info, verb, &ct);
    }
    let _ = take_warnings();
    // Duplicate keys in a JSON create/update body: 400 with Strict, a warning otherwise (sigs.k8s.io/json
    // strict decoding in apimachinery `pkg/runtime/serializer/json`).
    if matches!(verb, "create" | "update") && ct.contains("json") && sub != Some("scale") {
        let dups = super::corevalidation::duplicate_fields(req.body());
        if !dups.is_empty() {
            let list: Vec<String> = dups.iter().map(|p| format!("duplicate field \"{p}\"")).collect();
            if ctx.strict {
                return error_response(&ApiError::bad_request(format!(
                    "{kind} in version \"{v}\" cannot be handled as a {kind}: strict decoding error: {}",
                    list.join(", "),
                    kind = rt.kind,
                    v = info.version
                )));
            }
            if ctx.warn_unknown {
                list.into_iter().for_each(add_warning);
            }
        }
    }
    let result: Result<(u16, Value), ApiError> = match verb {
        "get" => get(&ctx, info.name.as_deref().unwrap()).map(|v| (200, v)),
        "list" => {
            let opts = match list_opts(&q, &rt) {
                Ok(o) => o,
                Err(e) => return error_response(&e),
            };
            list(&ctx, &opts).map(|v| (200, v))
        }
        "watch" => {
            return super::watch::serve(&ctx, &q, info, form).await;
        }
        "create" => match parse_body(req.body(), &ct) {
            Ok(b) => create(&ctx, b, None).map(|v| (201, v)),
            Err(e) => Err(undecodable(e, &rt.kind, req.body(), &ct)),
        },
        "update" => match parse_body(req.body(), &ct) {
            Ok(b) => update(&ctx, info.name.as_deref().unwrap(), Mutation::Replace(b), sub)
                .map(|(v, created)| (if created { 201 } else { 200 }, v)),
            Err(e) => Err(undecodable(e, &rt.kind, req.body(), &ct)),
        },
        "patch" => {
            let name = info.name.as_deref().unwrap();
            if ct == "application/apply-patch+yaml" {
                if q.get("fieldManager").is_none_or(|m| m.is_empty()) {
                    Err(ApiError::invalid(
                        "PatchOptions",
                        "meta.k8s.io",
                        "",
                        &[(
                            "FieldValueRequired".into(),
                            "fieldManager".into(),
                            "Required value: is required for apply patch".into(),
                        )],
                    ))
                } else {
                    match parse_body(req.body(), "yaml") {
                        Ok(b) => {
                            let force = q.get("force").is_some_and(|f| f == "true");
                            update(&ctx, name, Mutation::Apply(&b, force), sub)
                                .map(|(v, created)| (if created { 201 } else { 200 }, v))
                        }
                        Err(e) => Err(e),
                    }
                }
            } else {
                match parse_body(req.body(), "json") {
                    Ok(b) => update(&ctx, name, Mutation::Patch(&ct, &b), sub).map(|(v, _)| (200, v)),
                    Err(e) => Err(e),
                }
            }
        }
        "delete" => {
            let opts = delete_opts(&q, req.body());
            match validate_delete_opts(&opts) {
                Ok(()) => {
                    let opts = default_propagation(&ctx, opts);
                    delete(&ctx, info.name.as_deref().unwrap(), &opts).map(|v| (200, v))
                }
                Err(e) => Err(e),
            }
        }
        "deletecollection" => {
            let lopts = match list_opts(&q, &rt) {
                Ok(o) => o,
                Err(e) => return error_response(&e),
            };
            let dopts = delete_opts(&q, req.body());
            match validate_delete_opts(&dopts) {
                Ok(()) => {
                    let dopts = default_propagation(&ctx, dopts);
                    deletecollection(&ctx, &lopts, &dopts).map(|v| (200, v))
                }
                Err(e) => Err(e),
            }
        }
        _ => Err(ApiError::method_not_allowed()),
    };
    let warnings = take_warnings();
    let resp = match result {
        Ok((code, v)) => match form {
            Form::Table if verb == "get" || verb == "list" => {
                let include = q.get("includeObject").cloned().unwrap_or_default();
                let mut table = super::table::to_table(&rt, &v, verb == "list", &include);
                table["apiVersion"] = super::table::table_api_version(&accept).into();
                json_response(code, &table)
            }
            Form::Metadata if verb == "get" => json_response(code, &partial_metadata(&v)),
            Form::Metadata if verb == "list" => {
                let items: Vec<Value> = v
                    .get("items")
                    .and_then(|i| i.as_array())
                    .map(|a| {
                        a.iter().map(|o| partial_metadata_of(o, rt.group == "apps" && rt.kind == "DaemonSet")).collect()
                    })
                    .unwrap_or_default();
                json_response(
                    code,
                    &json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": v.get("metadata"), "items": items}),
                )
            }
            // Items of built-in lists carry no apiVersion/kind: they are typed objects inside a typed list and
            // only the list gets its GroupVersionKind from the versioning codec
            // (apimachinery/pkg/runtime/serializer/versioning/versioning.go); custom resources are unstructured
            // and keep both (apiextensions-apiserver/pkg/registry/customresource/etcd.go).
            _ if verb == "list" && !rt.crd => {
                let mut v = v;
                if let Some(items) = v.get_mut("items").and_then(|i| i.as_array_mut()) {
                    for it in items.iter_mut().filter_map(|i| i.as_object_mut()) {
                        it.remove("apiVersion");
                        it.remove("kind");
                    }
                }
                json_response(code, &v)
            }
            _ => json_response(code, &v),
        },
        // Warnings collected before the failure (unknown fields of a decoded body) go out with the error too.
        Err(e) => return with_warnings(error_response(&e), warnings),
    };
    with_warnings(resp, warnings)
}

/// The pod eviction subresource: honours PodDisruptionBudgets (429 when no disruption is allowed),
/// then deletes the pod and consumes one allowed disruption.
// kubernetes pkg/registry/core/pod/storage/eviction.go (`Create`, `checkAndDecrement`,
// `createTooManyRequestsError`): the name check comes first, more than one budget is a plain 500, a budget whose
// status has not observed its generation yet is a 429 with a 10 s retry, an allowed eviction records the pod in
// the budget's `disruptedPods` (not on a dry run).
fn evict(ctx: &Ctx, name: &str, body: &Value) -> Result<Value, ApiError> {
    if let Some(n) = body.pointer("/metadata/name").and_then(|n| n.as_str())
        && !n.is_empty()
        && n != name
    {
        return Err(ApiError::bad_request("name in URL does not match name in Eviction object"));
    }
    let pod = get(ctx, name)?;
    let ns = ctx.ns_key();
    // `canIgnorePDB` (`pkg/registry/core/pod/storage/eviction.go`): a pod that is Pending, Succeeded, Failed or
    // already deleting is deleted without consulting any PodDisruptionBudget.
    let ignore_pdb = matches!(
        pod.pointer("/status/phase").and_then(|p| p.as_str()),
        None | Some("Pending") | Some("Succeeded") | Some("Failed")
    ) || pod.pointer("/metadata/deletionTimestamp").is_some();
    let pdbs: Vec<Value> = if ignore_pdb {
        Vec::new()
    } else {
        let st = ctx.server.inner.state.lock().unwrap();
        st.list(&("policy".into(), "poddisruptionbudgets".into()), Some(&ns)).iter().map(|p| (**p).clone()).collect()
    };
    let pdbs: Vec<Value> = pdbs
        .into_iter()
        .filter(|pdb| {
            let sel = LabelSelector::from_json(pdb.pointer("/spec/selector").unwrap_or(&Value::Null));
            !sel.0.is_empty() && sel.matches(&pod)
        })
        .collect();
    if pdbs.len() > 1 {
        return Err(ApiError::plain_500(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        ));
    }
    let disruption_budget_429 = |cause: String, retry: Option<u64>| {
        let mut e =
            ApiError::new(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.");
        let mut details = json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]});
        if let Some(r) = retry {
            details["retryAfterSeconds"] = r.into();
        }
        e.details = Some(details);
        e.retry_after = retry;
        e
    };
    for pdb in pdbs {
        let pdb_name = pdb.pointer("/metadata/name").and_then(|n| n.as_str()).unwrap_or_default().to_string();
        let observed = pdb.pointer("/status/observedGeneration").and_then(|g| g.as_i64()).unwrap_or(0);
        let generation = pdb.pointer("/metadata/generation").and_then(|g| g.as_i64()).unwrap_or(0);
        if observed < generation {
            return Err(disruption_budget_429(
                format!("The disruption budget {pdb_name} is still being processed by the server."),
                Some(10),
            ));
        }
        let allowed = pdb.pointer("/status/disruptionsAllowed").and_then(|d| d.as_i64()).unwrap_or(0);
        if allowed < 1 {
            let desired = pdb.pointer("/status/desiredHealthy").and_then(|d| d.as_i64()).unwrap_or(0);
            let current = pdb.pointer("/status/currentHealthy").and_then(|d| d.as_i64()).unwrap_or(0);
            return Err(disruption_budget_429(
                format!("The disruption budget {pdb_name} needs {desired} healthy pods and has {current} currently"),
                None,
            ));
        }
        if !ctx.dry_run {
            ctx.server.with_system_ctx("policy", "poddisruptionbudgets", Some(&ns), |pctx| {
                let patch = json!({"status": {"disruptionsAllowed": allowed - 1,
                                              "disruptedPods": {name: now()}}});
                let _ =
                    update(pctx, &pdb_name, Mutation::Patch("application/merge-patch+json", &patch), Some("status"));
            });
        }
    }
    delete(ctx, name, &DeleteOpts::default())?;
    Ok(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}))
}

/// Representation requested through `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// The object itself.
    Full,
    /// `meta.k8s.io/v1` Table.
    Table,
    /// `meta.k8s.io/v1` PartialObjectMetadata.
    Metadata,
}

/// The `PartialObjectMetadata` view of an object.
// apiserver endpoints/handlers/response.go (`asPartialObjectMetadata`, `asTable` for `includeObject=Metadata`)
// takes the metadata of the internal object the registry returned, before any conversion to the request's
// version. A DaemonSet's template generation lives in its internal spec and only the apps/v1 conversion writes
// it into the `deprecated.daemonset.template.generation` annotation (pkg/apis/apps/v1/conversion.go
// `Convert_v1_DaemonSet_To_apps_DaemonSet` deletes it on the way in), so these views lack that annotation.
pub fn partial_metadata(o: &Value) -> Value {
    let daemonset = o.get("kind").and_then(|k| k.as_str()) == Some("DaemonSet")
        && o.get("apiVersion").and_then(|a| a.as_str()).is_some_and(|a| a.starts_with("apps/"));
    partial_metadata_of(o, daemonset)
}

/// [`partial_metadata`] of an object known to be (or not to be) an apps DaemonSet, e.g. a list item without kind.
pub fn partial_metadata_of(o: &Value, daemonset: bool) -> Value {
    let mut metadata = o.get("metadata").cloned().unwrap_or(json!({}));
    if daemonset && let Some(annotations) = metadata.get_mut("annotations").and_then(|a| a.as_object_mut()) {
        annotations.remove("deprecated.daemonset.template.generation");
        if annotations.is_empty() {
            metadata.as_object_mut().unwrap().remove("annotations");
        }
    }
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata})
}

impl ApiServer {
    /// Creates an object bypassing authorization and admission (bootstrap, CRD registration).
    pub(crate) fn create_internal(
        &self,
        group: &str,
        plural: &str,
        ns: Option<&str>,
        obj: Value,
    ) -> Result<Value, ApiError> {
        let rt = self.inner.state.lock().unwrap().resource(group, plural).ok_or_else(ApiError::no_route)?;
        let user = UserInfo { name: "system:apiserver".into(), groups: vec!["system:masters".into()] };
        create(&self.system_ctx(&user, rt, ns, "kube-apiserver"), obj, None)
    }

    /// Internal system context for (group, plural).
    pub(crate) fn with_system_ctx<R>(
        &self,
        group: &str,
        plural: &str,
        ns: Option<&str>,
        f: impl FnOnce(&Ctx) -> R,
    ) -> Option<R> {
        let rt = self.inner.state.lock().unwrap().resource(group, plural)?;
        let user = UserInfo {
            name: "system:serviceaccount:kube-system:generic-garbage-collector".into(),
            groups: vec!["system:masters".into()],
        };
        Some(f(&self.system_ctx(&user, rt, ns, "kube-controller-manager")))
    }

    /// A context at the preferred version for server-internal requests by `user`, managed by `manager`.
    fn system_ctx<'a>(&'a self, user: &'a UserInfo, rt: Arc<ResourceType>, ns: Option<&str>, manager: &str) -> Ctx<'a> {
        Ctx {
            server: self,
            user,
            version: rt.preferred().to_string(),
            rt,
            ns: ns.map(String::from),
            dry_run: false,
            manager: manager.into(),
            strict: false,
            warn_unknown: false,
        }
    }
}

/// Collects a request body of any `http_body::Body` into bytes.
pub async fn collect_body<B>(b: B) -> Result<Bytes, String>
where
    B: http_body::Body,
    B::Error: std::fmt::Display,
{
    b.collect().await.map(|c| c.to_bytes()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undecodable_json_is_worded_like_kube_apiserver() {
        // What kube-apiserver v1.36 answers to `POST .../configmaps` with the body `{not json`.
        let body = b"{not json";
        let e = undecodable(parse_body(body, "application/json").unwrap_err(), "ConfigMap", body, "application/json");
        assert_eq!(
            e.message,
            "the object provided is unrecognized (must be of type ConfigMap): couldn't get version/kind; json parse \
             error: invalid character 'n' looking for beginning of object key string ({not json)"
        );
        let long = br#"{"metadata": {"name": "a", "labels": oops}}"#;
        let e = undecodable(parse_body(long, "application/json").unwrap_err(), "Pod", long, "application/json");
        assert!(e.message.ends_with(r#"({"metadata": {"name": "a", "la ...)"#), "{}", e.message);
        let e = undecodable(parse_body(b"x", "application/json").unwrap_err(), "Pod", b"x", "application/json");
        assert!(e.message.ends_with("looking for beginning of value (78)"), "{}", e.message);
    }

    #[test]
    fn daemonset_metadata_views_lack_the_template_generation_annotation() {
        let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d",
            "annotations": {"deprecated.daemonset.template.generation": "1", "j": "1"}}});
        assert_eq!(partial_metadata(&ds)["metadata"]["annotations"], json!({"j": "1"}));
        let only = json!({"metadata": {"name": "d", "annotations": {"deprecated.daemonset.template.generation": "2"}}});
        assert_eq!(partial_metadata_of(&only, true)["metadata"], json!({"name": "d"}));
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c",
            "annotations": {"deprecated.daemonset.template.generation": "1"}}});
        assert_eq!(partial_metadata(&cm)["metadata"], cm["metadata"]);
    }
}
