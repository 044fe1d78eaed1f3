//! RBAC: Role/ClusterRole/RoleBinding/ClusterRoleBinding evaluated like the real authorizer (apiGroups,
//! resources incl. subresources, verbs, resourceNames), the 403 message, and the access reviews.

use serde_json::{Value, json};

use super::resources::ResourceType;
use super::status::{ApiError, ResourceName};
use super::{ApiServer, UserInfo};

/// Attributes of one request to authorize.
#[derive(Debug, Clone, Default)]
pub struct Attributes {
    /// Verb.
    pub verb: String,
    /// API group.
    pub group: String,
    /// Resource.
    pub resource: String,
    /// Subresource.
    pub subresource: String,
    /// Namespace ("" for cluster scope).
    pub namespace: String,
    /// Object name.
    pub name: String,
}

fn strs(v: Option<&Value>) -> Vec<String> {
    v.and_then(|a| a.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    let verbs = strs(rule.get("verbs"));
    if !verbs.iter().any(|v| v == "*" || *v == a.verb) {
        return false;
    }
    let groups = strs(rule.get("apiGroups"));
    if !groups.iter().any(|g| g == "*" || *g == a.group) {
        return false;
    }
    let combined =
        if a.subresource.is_empty() { a.resource.clone() } else { format!("{}/{}", a.resource, a.subresource) };
    let resources = strs(rule.get("resources"));
    if !resources
        .iter()
        .any(|r| r == "*" || *r == combined || (!a.subresource.is_empty() && *r == format!("*/{}", a.subresource)))
    {
        return false;
    }
    let names = strs(rule.get("resourceNames"));
    names.is_empty() || (!a.name.is_empty() && names.contains(&a.name))
}

fn subject_matches(subjects: Option<&Value>, user: &UserInfo, binding_ns: &str) -> bool {
    let Some(subs) = subjects.and_then(|s| s.as_array()) else {
        return false;
    };
    subs.iter().any(|s| {
        let kind = s.get("kind").and_then(|k| k.as_str()).unwrap_or_default();
        let name = s.get("name").and_then(|k| k.as_str()).unwrap_or_default();
        match kind {
            "User" => name == user.name,
            "Group" => user.groups.iter().any(|g| g == name) || name == "system:authenticated",
            "ServiceAccount" => {
                let ns = s.get("namespace").and_then(|k| k.as_str()).filter(|n| !n.is_empty()).unwrap_or(binding_ns);
                user.name == format!("system:serviceaccount:{ns}:{name}")
            }
            _ => false,
        }
    })
}

/// Whether `user` may perform `a`, and which binding allowed it.
pub fn authorize(server: &ApiServer, user: &UserInfo, a: &Attributes) -> (bool, String) {
    if user.is_master() {
        return (true, String::new());
    }
    let st = server.inner.state.lock().unwrap();
    let rbac = "rbac.authorization.k8s.io";
    let crole_rules = |name: &str| -> Vec<Value> {
        st.get(rbac, "clusterroles", "", name)
            .and_then(|r| r.get("rules").and_then(|x| x.as_array()).cloned())
            .unwrap_or_default()
    };
    for b in st.list(&(rbac.into(), "clusterrolebindings".into()), None) {
        if !subject_matches(b.get("subjects"), user, "") {
            continue;
        }
        let role = b.pointer("/roleRef/name").and_then(|n| n.as_str()).unwrap_or_default();
        if crole_rules(role).iter().any(|r| rule_allows(r, a)) {
            let bname = b.pointer("/metadata/name").and_then(|n| n.as_str()).unwrap_or_default();
            return (
                true,
                format!(
                    "RBAC: allowed by ClusterRoleBinding \"{bname}\" of ClusterRole \"{role}\" to User \"{}\"",
                    user.name
                ),
            );
        }
    }
    if !a.namespace.is_empty() {
        for b in st.list(&(rbac.into(), "rolebindings".into()), Some(&a.namespace)) {
            if !subject_matches(b.get("subjects"), user, &a.namespace) {
                continue;
            }
            let kind = b.pointer("/roleRef/kind").and_then(|n| n.as_str()).unwrap_or_default();
            let role = b.pointer("/roleRef/name").and_then(|n| n.as_str()).unwrap_or_default();
            let rules = if kind == "ClusterRole" {
                crole_rules(role)
            } else {
                st.get(rbac, "roles", &a.namespace, role)
                    .and_then(|r| r.get("rules").and_then(|x| x.as_array()).cloned())
                    .unwrap_or_default()
            };
            if rules.iter().any(|r| rule_allows(r, a)) {
                let bname = b.pointer("/metadata/name").and_then(|n| n.as_str()).unwrap_or_default();
                return (
                    true,
                    format!(
                        "RBAC: allowed by RoleBinding \"{bname}/{}\" of {kind} \"{role}\" to User \"{}\"",
                        a.namespace, user.name
                    ),
                );
            }
        }
    }
    (false, String::new())
}

/// The 403 of a denied request, with kube-apiserver's message.
// kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go `Forbidden`: the
// Status names the resource without its subresource (`schema.GroupResource{Resource: GetResource()}` passed to
// `apierrors.NewForbidden`), only the reason (`forbiddenMessage`) says `resource "pods/log"`.
pub fn forbidden(user: &UserInfo, a: &Attributes) -> ApiError {
    let rn = ResourceName { group: &a.group, resource: &a.resource };
    let res = if a.subresource.is_empty() { a.resource.clone() } else { format!("{}/{}", a.resource, a.subresource) };
    let scope = if a.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", a.namespace)
    };
    let reason =
        format!("User \"{}\" cannot {} resource \"{}\" in API group \"{}\" {}", user.name, a.verb, res, a.group, scope);
    let qual = rn.qualified();
    let msg = if a.name.is_empty() {
        format!("{qual} is forbidden: {reason}")
    } else {
        format!("{qual} \"{}\" is forbidden: {reason}", a.name)
    };
    ApiError::forbidden(&rn, &a.name, msg)
}

/// Handles the create-only review resources (SelfSubjectAccessReview, SubjectAccessReview, rules review,
/// SelfSubjectReview).
pub fn review(server: &ApiServer, user: &UserInfo, rt: &ResourceType, body: Value) -> Result<Value, ApiError> {
    let mut out = body.clone();
    if !out.is_object() {
        return Err(ApiError::bad_request("the object provided is not a JSON object"));
    }
    out["apiVersion"] = rt.api_version(rt.preferred()).into();
    out["kind"] = rt.kind.clone().into();
    if !out.get("metadata").is_some_and(|m| m.is_object()) {
        out["metadata"] = json!({});
    }
    // Reviews are never stored: no creationTimestamp (`metadata.creationTimestamp` is omitted when zero).
    if let Some(m) = out["metadata"].as_object_mut() {
        m.remove("creationTimestamp");
    }
    match rt.plural.as_str() {
        "selfsubjectaccessreviews" | "subjectaccessreviews" => {
            let subject = if rt.plural == "subjectaccessreviews" {
                UserInfo {
                    name: body.pointer("/spec/user").and_then(|u| u.as_str()).unwrap_or_default().into(),
                    groups: strs(body.pointer("/spec/groups")),
                }
            } else {
                user.clone()
            };
            let (allowed, reason) = if let Some(ra) = body.pointer("/spec/resourceAttributes") {
                let g = |k: &str| ra.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_string();
                let a = Attributes {
                    verb: g("verb"),
                    group: g("group"),
                    resource: g("resource"),
                    subresource: g("subresource"),
                    namespace: g("namespace"),
                    name: g("name"),
                };
                authorize(server, &subject, &a)
            } else if let Some(nra) = body.pointer("/spec/nonResourceAttributes") {
                let path = nra.get("path").and_then(|v| v.as_str()).unwrap_or_default();
                let verb = nra.get("verb").and_then(|v| v.as_str()).unwrap_or_default();
                (subject.is_master() || (verb == "get" && is_discovery_path(path)), String::new())
            } else {
                return Err(ApiError::invalid(
                    &rt.kind,
                    &rt.group,
                    "",
                    &[(
                        "FieldValueRequired".into(),
                        "spec.resourceAttributes".into(),
                        "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified"
                            .into(),
                    )],
                ));
            };
            let mut status = json!({"allowed": allowed});
            if !reason.is_empty() {
                status["reason"] = reason.into();
            }
            out["status"] = status;
        }
        "selfsubjectrulesreviews" => {
            let ns = body.pointer("/spec/namespace").and_then(|n| n.as_str()).unwrap_or_default().to_string();
            out["status"] = json!({"resourceRules": rules_for(server, user, &ns), "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"]}], "incomplete": false});
        }
        "selfsubjectreviews" => {
            // pkg/registry/authentication/selfsubjectreview/rest.go: the authenticated user as the
            // authenticator saw it, with `system:authenticated` added by the authentication filter; the uid of a
            // token-file user is its name here, as in realk8s' token file.
            let mut groups = user.groups.clone();
            let anon = user.name == "system:anonymous";
            if !anon && !groups.iter().any(|g| g == "system:authenticated") {
                groups.push("system:authenticated".into());
            }
            out["metadata"]["creationTimestamp"] = super::rest::now().into();
            out["status"] = json!({"userInfo": {"username": user.name, "uid": user.name, "groups": groups}});
        }
        _ => return Err(ApiError::method_not_allowed()),
    }
    Ok(out)
}

fn is_discovery_path(p: &str) -> bool {
    ["/api", "/apis", "/version", "/healthz", "/livez", "/readyz", "/openapi"]
        .iter()
        .any(|x| p == *x || p.starts_with(&format!("{x}/")))
}

fn rules_for(server: &ApiServer, user: &UserInfo, ns: &str) -> Vec<Value> {
    if user.is_master() {
        return vec![json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})];
    }
    let st = server.inner.state.lock().unwrap();
    let rbac = "rbac.authorization.k8s.io";
    let mut out = Vec::new();
    let crole = |name: &str| {
        st.get(rbac, "clusterroles", "", name)
            .and_then(|r| r.get("rules").and_then(|x| x.as_array()).cloned())
            .unwrap_or_default()
    };
    for b in st.list(&(rbac.into(), "clusterrolebindings".into()), None) {
        if subject_matches(b.get("subjects"), user, "") {
            out.extend(crole(b.pointer("/roleRef/name").and_then(|n| n.as_str()).unwrap_or_default()));
        }
    }
    if !ns.is_empty() {
        for b in st.list(&(rbac.into(), "rolebindings".into()), Some(ns)) {
            if subject_matches(b.get("subjects"), user, ns) {
                let role = b.pointer("/roleRef/name").and_then(|n| n.as_str()).unwrap_or_default();
                if b.pointer("/roleRef/kind").and_then(|n| n.as_str()) == Some("ClusterRole") {
                    out.extend(crole(role));
                } else if let Some(r) = st.get(rbac, "roles", ns, role) {
                    out.extend(r.get("rules").and_then(|x| x.as_array()).cloned().unwrap_or_default());
                }
            }
        }
    }
    out.into_iter().filter(|r| r.get("resources").is_some()).collect()
}

/// The bootstrap ClusterRoles (`cluster-admin`, `admin`, `edit`, `view`, `system:basic-user`, `system:discovery`).
pub fn bootstrap_cluster_roles() -> Vec<(&'static str, Value)> {
    let read = json!(["get", "list", "watch"]);
    let write = json!(["create", "delete", "deletecollection", "patch", "update", "get", "list", "watch"]);
    let common = json!([
        "pods",
        "pods/log",
        "pods/status",
        "services",
        "endpoints",
        "configmaps",
        "persistentvolumeclaims",
        "persistentvolumeclaims/status",
        "events",
        "serviceaccounts",
        "replicationcontrollers",
        "limitranges",
        "resourcequotas"
    ]);
    let apps = json!([
        "statefulsets",
        "statefulsets/scale",
        "statefulsets/status",
        "deployments",
        "deployments/scale",
        "deployments/status",
        "replicasets",
        "replicasets/scale",
        "daemonsets"
    ]);
    // Rules shared by admin/edit (with `write`) and view (with `read`), after the core ones.
    let workloads = |verbs: &Value| {
        vec![
            json!({"apiGroups": ["apps"], "resources": apps, "verbs": verbs}),
            json!({"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": verbs}),
            json!({"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": verbs}),
            json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": verbs}),
        ]
    };
    let mut edit = vec![
        json!({"apiGroups": [""], "resources": common, "verbs": write}),
        json!({"apiGroups": [""], "resources": ["secrets"], "verbs": write}),
    ];
    edit.extend(workloads(&write));
    let mut admin = edit.clone();
    admin.extend([
        json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": write}),
        json!({"apiGroups": ["authorization.k8s.io"], "resources": ["localsubjectaccessreviews"], "verbs": ["create"]}),
    ]);
    let mut view = vec![json!({"apiGroups": [""], "resources": common, "verbs": read})];
    view.extend(workloads(&read));
    vec![
        (
            "cluster-admin",
            json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
        ),
        ("admin", Value::Array(admin)),
        ("edit", Value::Array(edit)),
        ("view", Value::Array(view)),
        (
            "system:basic-user",
            json!([
                {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
                {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
            ]),
        ),
        (
            "system:discovery",
            json!([{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"], "verbs": ["get"]}]),
        ),
    ]
}
