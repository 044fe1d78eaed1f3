//! The mutations of an update: replace, the patch types and server-side apply (kube-apiserver
//! `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go`).

use super::*;

/// How an update body is produced from the current object.
pub enum Mutation<'a> {
    /// PUT with a full object.
    Replace(Value),
    /// PATCH (content type, body).
    Patch(&'a str, &'a Value),
    /// Server-side apply (config, force).
    Apply(&'a Value, bool),
}

pub(crate) fn apply_mutation(ctx: &Ctx, cur: &Value, m: &Mutation, sub: Option<&str>) -> Result<Value, ApiError> {
    let mut new = ctx.out(cur);
    match m {
        Mutation::Replace(v) => Ok(v.clone()),
        Mutation::Patch(ct, p) => {
            match *ct {
                "application/merge-patch+json" => crate::patch::merge_patch(&mut new, p),
                "application/json-patch+json" => {
                    crate::patch::json_patch(&mut new, p).map_err(|e| {
                        if e.contains("test") || e.contains("Test") || e.contains("did not match") {
                            // A failed `test` operation (apiserver pkg/endpoints/handlers/patch.go →
                            // errors.NewInvalid without causes).
                            let mut err = ApiError::new(
                                422,
                                "Invalid",
                                "the server rejected our request due to an error in our request",
                            );
                            err.details = Some(json!({}));
                            err
                        } else {
                            ApiError::new(422, "Invalid", e)
                        }
                    })?;
                }
                "application/strategic-merge-patch+json" => {
                    if ctx.rt.crd {
                        // Custom resources have no strategic merge patch (apiserver pkg/endpoints/handlers/patch.go).
                        return Err(ApiError::new(
                            415,
                            "UnsupportedMediaType",
                            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                        ));
                    }
                    // kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go
                    // `interpretStrategicMergePatchError`: an error of the merge itself that is none of
                    // mergepatch's named ones (the `$setElementOrder` order check) stays a plain 500.
                    crate::patch::strategic_merge(&mut new, p).map_err(ApiError::plain_500)?
                }
                // The patch handler's answer to a content type it does not know
                // (apiserver pkg/endpoints/handlers/patch.go, `negotiation.NewUnsupportedMediaTypeError`).
                _ => {
                    let mut e = ApiError::new(415, "UnsupportedMediaType", "415: Unsupported Media Type");
                    e.details = Some(json!({}));
                    return Err(e);
                }
            }
            Ok(new)
        }
        Mutation::Apply(cfg, force) => {
            if ctx.rt.crd {
                check_typed_apply(ctx, cfg)?;
            }
            let schema = crd_schema(ctx);
            let mut cfgv = (*cfg).clone();
            if sub == Some("status") {
                cfgv = json!({"apiVersion": cfgv.get("apiVersion"), "kind": cfgv.get("kind"), "metadata": cfgv.get("metadata"), "status": cfgv.get("status")});
            }
            match apply::apply(
                Some(&new),
                &cfgv,
                &ctx.manager,
                &ctx.api_version(),
                *force,
                &now(),
                sub.unwrap_or(""),
                shape_of(ctx, schema.as_ref()),
            ) {
                Ok(v) => Ok(v),
                Err(conflicts) => Err(apply_conflict(conflicts)),
            }
        }
    }
}

/// The errors of the field manager's typed conversion of an applied custom resource, before any merge
/// (kube-apiserver v1.36.2 as the differential test sees it): a body of another kind is 400 `invalid object
/// type: GVK`; a field the CRD's schema does not declare or a non-numeric value of a numeric field is a plain 500
/// `failed to create typed patch object (ns/name; GVK): .path: …` (structured-merge-diff `typed` validation;
/// unknown fields count whatever `fieldValidation` says, as they do not prune here).
/// The structural schema of a custom resource's version (`spec.versions[].schema.openAPIV3Schema` of its CRD).
pub(crate) fn crd_schema(ctx: &Ctx) -> Option<Value> {
    if !ctx.rt.crd {
        return None;
    }
    let crd_name = format!("{}.{}", ctx.rt.plural, ctx.rt.group);
    ctx.server.get_object("apiextensions.k8s.io/v1", "customresourcedefinitions", None, &crd_name).and_then(|crd| {
        crd.pointer("/spec/versions")?
            .as_array()?
            .iter()
            .find(|v| v.get("name").and_then(|n| n.as_str()) == Some(ctx.version.as_str()))?
            .pointer("/schema/openAPIV3Schema")
            .cloned()
    })
}

/// The field manager's view of the kind: built-in, or a custom resource with its schema.
pub(crate) fn shape_of<'a>(ctx: &Ctx, schema: Option<&'a Value>) -> apply::Shape<'a> {
    if ctx.rt.crd { apply::Shape::Custom(schema) } else { apply::Shape::Builtin }
}

pub(crate) fn check_typed_apply(ctx: &Ctx, cfg: &Value) -> Result<(), ApiError> {
    let api_version = cfg.get("apiVersion").and_then(|a| a.as_str()).unwrap_or_default();
    let kind = cfg.get("kind").and_then(|k| k.as_str()).unwrap_or_default();
    let gvk = if api_version.contains('/') {
        format!("{api_version}, Kind={kind}")
    } else {
        format!("/{api_version}, Kind={kind}")
    };
    if kind != ctx.rt.kind {
        return Err(ApiError::bad_request(format!("invalid object type: {gvk}")));
    }
    let Some(schema) = crd_schema(ctx) else {
        return Ok(());
    };
    let mut top = cfg.clone();
    if let Some(m) = top.as_object_mut() {
        for k in ["apiVersion", "kind", "metadata"] {
            m.remove(k);
        }
    }
    match typed_error(&schema, &top, "") {
        None => Ok(()),
        Some(e) => {
            let md = cfg.get("metadata");
            let field = |k: &str| md.and_then(|m| m.get(k)).and_then(|v| v.as_str()).unwrap_or_default();
            Err(ApiError::plain_500(format!(
                "failed to create typed patch object ({}/{}; {gvk}): {e}",
                field("namespace"),
                field("name")
            )))
        }
    }
}

/// The first value of `v` that the structural `schema` does not admit as a typed value, with its path.
pub(crate) fn typed_error(schema: &Value, v: &Value, path: &str) -> Option<String> {
    if v.is_null() {
        return None;
    }
    let got = match v {
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
        Value::Object(_) => "map",
        Value::Array(_) => "list",
        _ => "numeric",
    };
    match schema.get("type").and_then(|t| t.as_str()) {
        Some("integer") | Some("number") if got != "numeric" => {
            Some(format!("{path}: expected numeric (int or float), got {got}"))
        }
        Some("object") | None => {
            let m = v.as_object()?;
            if schema.get("x-kubernetes-preserve-unknown-fields").and_then(|p| p.as_bool()) == Some(true) {
                return None;
            }
            let props = schema.get("properties").and_then(|p| p.as_object());
            let extra = schema.get("additionalProperties").filter(|a| a.is_object());
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for k in keys {
                let sub = format!("{path}.{k}");
                match props.and_then(|p| p.get(k.as_str())).or(extra) {
                    Some(s) => {
                        if let Some(e) = typed_error(s, &m[k.as_str()], &sub) {
                            return Some(e);
                        }
                    }
                    None if props.is_some() || schema.get("type").is_some() => {
                        return Some(format!("{sub}: field not declared in schema"));
                    }
                    None => {}
                }
            }
            None
        }
        _ => None,
    }
}

/// The 409 of a server-side apply conflict, worded like `NewConflictError` / `getConflictMessage` of
/// `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager/internal/conflict.go`: managers printed
/// with their version (`"unknown" using v1`), grouped and sorted by that printed name, joined by newlines.
pub(crate) fn apply_conflict(conflicts: Vec<apply::Conflict>) -> ApiError {
    // `printManager`: `"m" with subresource "scale"` for a manager of a subresource.
    let printed = |c: &apply::Conflict| {
        let who = if c.subresource.is_empty() {
            format!("\"{}\"", c.manager)
        } else {
            format!("\"{}\" with subresource \"{}\"", c.manager, c.subresource)
        };
        if c.api_version.is_empty() { who } else { format!("{who} using {}", c.api_version) }
    };
    let msg = if conflicts.len() == 1 {
        let c = &conflicts[0];
        format!("Apply failed with 1 conflict: conflict with {}: {}", printed(c), c.field)
    } else {
        let mut by: std::collections::BTreeMap<String, Vec<String>> = std::collections::BTreeMap::new();
        for c in &conflicts {
            by.entry(printed(c)).or_default().push(c.field.clone());
        }
        let mut lines = Vec::new();
        for (m, fs) in by {
            lines.push(format!("conflicts with {m}:"));
            lines.extend(fs.into_iter().map(|f| format!("- {f}")));
        }
        format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
    };
    let causes = conflicts
        .iter()
        .map(|c| json!({"reason":"FieldManagerConflict","message":format!("conflict with {}", printed(c)),"field":c.field}))
        .collect();
    ApiError::apply_conflict(msg, causes)
}
