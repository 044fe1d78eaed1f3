//! `metav1.Status` error bodies in kube-apiserver's exact shape (404, 409, 422, 403, 410, ...).

use serde_json::{Value, json};

/// An API error that is rendered as a `Status` object with the matching HTTP code.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason` (`NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, ...).
    pub reason: String,
    /// Human-readable message, identical to kube-apiserver's where known.
    pub message: String,
    /// `Status.details`, when kube-apiserver sets it.
    pub details: Option<Value>,
    /// `Retry-After` seconds for 429/503 answers.
    pub retry_after: Option<u64>,
}

/// Identifies the resource in messages: `configmaps` or `etcds.druid.gardener.cloud`.
#[derive(Debug, Clone)]
pub struct ResourceName<'a> {
    /// API group ("" for core).
    pub group: &'a str,
    /// Plural resource name.
    pub resource: &'a str,
}

impl ResourceName<'_> {
    /// `resource` or `resource.group` as kube-apiserver prints a GroupResource.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() { self.resource.to_string() } else { format!("{}.{}", self.resource, self.group) }
    }

    fn details(&self, name: &str) -> Value {
        let mut d = serde_json::Map::new();
        if !name.is_empty() {
            d.insert("name".into(), json!(name));
        }
        if !self.group.is_empty() {
            d.insert("group".into(), json!(self.group));
        }
        d.insert("kind".into(), json!(self.resource));
        Value::Object(d)
    }
}

impl ApiError {
    /// Plain error with code, reason and message.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError { code, reason: reason.into(), message: message.into(), details: None, retry_after: None }
    }

    /// `404 NotFound`: `configmaps "x" not found`.
    pub fn not_found(r: &ResourceName, name: &str) -> Self {
        let mut e = Self::new(404, "NotFound", format!("{} \"{}\" not found", r.qualified(), name));
        e.details = Some(r.details(name));
        e
    }

    /// `409 AlreadyExists`.
    pub fn already_exists(r: &ResourceName, name: &str) -> Self {
        let mut e = Self::new(409, "AlreadyExists", format!("{} \"{}\" already exists", r.qualified(), name));
        e.details = Some(r.details(name));
        e
    }

    /// `409 Conflict` on a stale resourceVersion.
    pub fn conflict(r: &ResourceName, name: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                r.qualified(),
                name
            ),
        );
        e.details = Some(r.details(name));
        e
    }

    /// `409 Conflict` of server-side apply: only the causes in `details`, no name or kind
    /// (`errors.NewApplyConflict` in `staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go`).
    pub fn apply_conflict(msg: String, causes: Vec<Value>) -> Self {
        let mut e = Self::new(409, "Conflict", msg);
        e.details = Some(json!({ "causes": causes }));
        e
    }

    /// `422 Invalid` with field causes. `kind` is the Kind, `group` its API group.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: &[(String, String, String)]) -> Self {
        // causes: (reason, field, message-without-field-prefix)
        let qual = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
        // The message is `ErrorList.ToAggregate()`, which drops repeated messages
        // (`staging/src/k8s.io/apimachinery/pkg/util/validation/field/errors.go`); the causes keep them all.
        let mut parts: Vec<String> = Vec::new();
        for (_, f, m) in causes {
            let p = if f.is_empty() { m.clone() } else { format!("{f}: {m}") };
            if !parts.contains(&p) {
                parts.push(p);
            }
        }
        let body = if parts.len() == 1 { parts.remove(0) } else { format!("[{}]", parts.join(", ")) };
        let mut e = Self::new(422, "Invalid", format!("{qual} \"{name}\" is invalid: {body}"));
        let mut d = serde_json::Map::new();
        // StatusDetails.name is `omitempty` (apimachinery pkg/apis/meta/v1/types.go).
        if !name.is_empty() {
            d.insert("name".into(), json!(name));
        }
        if !group.is_empty() {
            d.insert("group".into(), json!(group));
        }
        d.insert("kind".into(), json!(kind));
        d.insert(
            "causes".into(),
            Value::Array(causes.iter().map(|(r, f, m)| json!({"reason": r, "message": m, "field": f})).collect()),
        );
        e.details = Some(Value::Object(d));
        e
    }

    /// `400 BadRequest`.
    pub fn bad_request(msg: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", msg)
    }

    /// `403 Forbidden` with the resource in details.
    pub fn forbidden(r: &ResourceName, name: &str, msg: String) -> Self {
        let mut e = Self::new(403, "Forbidden", msg);
        e.details = Some(r.details(name));
        e
    }

    /// `405 MethodNotAllowed`, with the empty `details` of apimachinery's `errors.NewMethodNotSupported`
    /// (`staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go`: `Details: &metav1.StatusDetails{Group, Kind}`,
    /// both empty for a non-resource path or a collection without DELETE).
    pub fn method_not_allowed() -> Self {
        let mut e =
            Self::new(405, "MethodNotAllowed", "the server does not allow this method on the requested resource");
        e.details = Some(json!({}));
        e
    }

    /// `500` for a plain Go error that is no API status: `responsewriters.ErrorToAPIStatus`
    /// (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/status.go`) answers code 500 with
    /// the error text as message and no reason.
    pub fn plain_500(msg: impl Into<String>) -> Self {
        Self::new(500, "", msg)
    }

    /// `404` for an unknown path (kube-apiserver's generic answer).
    pub fn no_route() -> Self {
        let mut e = Self::new(404, "NotFound", "the server could not find the requested resource");
        e.details = Some(json!({}));
        e
    }

    /// `410 Gone` / Expired: `too old resource version: X (Y)`.
    pub fn gone(requested: u64, oldest: u64) -> Self {
        Self::new(410, "Expired", format!("too old resource version: {requested} ({oldest})"))
    }

    /// `401 Unauthorized`.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// `415 UnsupportedMediaType`.
    pub fn unsupported_media(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {ct:?})"
            ),
        )
    }

    /// `500 InternalError`.
    pub fn internal(msg: impl Into<String>) -> Self {
        let m = msg.into();
        let mut e = Self::new(500, "InternalError", format!("Internal error occurred: {m}"));
        e.details = Some(json!({"causes": [{"message": m}]}));
        e
    }

    /// The `Status` JSON body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        // `reason` is `omitempty` (metav1.Status): a plain error has none.
        if self.reason.is_empty() {
            s.as_object_mut().unwrap().remove("reason");
        }
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        if let Some(ra) = self.retry_after {
            let d = s.as_object_mut().unwrap().entry("details").or_insert_with(|| json!({}));
            d["retryAfterSeconds"] = json!(ra);
        }
        s
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}
