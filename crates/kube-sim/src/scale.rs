//! The `scale` subresource (`autoscaling/v1` Scale) for workloads and CRDs that declare it.

use bytes::Bytes;
use http::{Request, Response};
use serde_json::{Value, json};

use super::apply::{Conflict, FieldPath, Manager, managers_of, set_managers, value_at};
use super::rest::{Body, Ctx, Mutation, ResInfo, error_response, json_response, parse_body, update};
use super::selectors::LabelSelector;
use super::status::ApiError;

fn path_get<'a>(o: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = o;
    for seg in path.trim_start_matches('.').split('.') {
        cur = cur.get(seg)?;
    }
    Some(cur)
}

fn path_set(o: &mut Value, path: &str, v: Value) {
    let segs: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let mut cur = o;
    for s in &segs[..segs.len() - 1] {
        if !cur.get(*s).is_some_and(|x| x.is_object()) {
            cur[*s] = json!({});
        }
        cur = cur.get_mut(*s).unwrap();
    }
    cur[segs[segs.len() - 1]] = v;
}

fn to_scale(ctx: &Ctx, obj: &Value) -> Value {
    let sp = ctx.rt.scale.as_ref().unwrap();
    let selector = match &sp.label_selector {
        Some(p) => path_get(obj, p).and_then(|v| v.as_str()).unwrap_or_default().to_string(),
        None => obj.pointer("/spec/selector").map(|s| LabelSelector::from_json(s).to_string_form()).unwrap_or_default(),
    };
    let md = &obj["metadata"];
    let mut meta = json!({"name": md["name"], "uid": md["uid"], "resourceVersion": md["resourceVersion"], "creationTimestamp": md["creationTimestamp"]});
    if let Some(ns) = md.get("namespace") {
        meta["namespace"] = ns.clone();
    }
    let mut status = json!({"replicas": path_get(obj, &sp.status_replicas).and_then(|v| v.as_i64()).unwrap_or(0)});
    // `selector` is omitempty (autoscaling/v1 ScaleStatus): a CRD without labelSelectorPath reports none.
    if !selector.is_empty() {
        status["selector"] = selector.into();
    }
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": meta,
        "spec": {"replicas": path_get(obj, &sp.spec_replicas).and_then(|v| v.as_i64()).unwrap_or(0)},
        "status": status,
    })
}

/// Handles GET/PUT/PATCH on `.../{name}/scale`.
pub fn handle(ctx: &Ctx, req: &Request<Bytes>, info: &ResInfo, verb: &str, ct: &str) -> Response<Body> {
    let name = info.name.as_deref().unwrap_or_default();
    let res = (|| -> Result<Value, ApiError> {
        let cur = super::rest::get(ctx, name)?;
        let cur_scale = to_scale(ctx, &cur);
        let mut sent = Value::Null;
        let new_scale = match verb {
            "get" => return Ok(cur_scale),
            "update" => parse_body(req.body(), ct)?,
            "patch" => {
                let p = parse_body(req.body(), ct)?;
                sent = p.clone();
                let mut s = cur_scale.clone();
                match ct {
                    "application/json-patch+json" => {
                        super::patch::json_patch(&mut s, &p).map_err(|e| ApiError::new(422, "Invalid", e))?
                    }
                    "application/apply-patch+yaml"
                    | "application/merge-patch+json"
                    | "application/strategic-merge-patch+json" => super::patch::merge_patch(&mut s, &p),
                    other => return Err(ApiError::unsupported_media(other)),
                }
                s
            }
            _ => return Err(ApiError::method_not_allowed()),
        };
        let want_rv = new_scale.pointer("/metadata/resourceVersion").and_then(|r| r.as_str()).unwrap_or_default();
        if !want_rv.is_empty() && Some(want_rv) != cur.pointer("/metadata/resourceVersion").and_then(|r| r.as_str()) {
            return Err(ApiError::conflict(
                &super::status::ResourceName { group: &ctx.rt.group, resource: &ctx.rt.plural },
                name,
            ));
        }
        let replicas = new_scale.pointer("/spec/replicas").and_then(|r| r.as_i64()).unwrap_or(0);
        if replicas < 0 {
            return Err(ApiError::invalid(
                "Scale",
                "autoscaling",
                name,
                &[(
                    "FieldValueInvalid".into(),
                    "spec.replicas".into(),
                    format!("Invalid value: {replicas}: must be greater than or equal to 0"),
                )],
            ));
        }
        let spec_replicas = &ctx.rt.scale.as_ref().unwrap().spec_replicas;
        let mut obj = cur.clone();
        path_set(&mut obj, spec_replicas, replicas.into());
        let apply = ct == "application/apply-patch+yaml";
        let force = super::rest::parse_query(req.uri().query()).get("force").is_some_and(|f| f == "true");
        let managers = scale_managers(&cur, &obj, spec_replicas, &ctx.manager, &ctx.api_version(), apply, force)
            .map_err(super::rest::apply_conflict)?;
        if apply && ctx.rt.crd {
            // kube-apiserver v1.36.2 answers an apply to a custom resource's /scale that passes the conflict
            // check with the CR converter's refusal of the autoscaling/v1 Scale (the field manager converts the
            // applied object to the CR's version), naming the applied object `namespace/name; GVK`.
            let md = &sent["metadata"];
            let str_of = |k: &str| md.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_string();
            return Err(ApiError::plain_500(format!(
                "failed to convert new object ({}/{}; autoscaling/v1, Kind=Scale) to proper version: request to convert CR to an invalid group/version: autoscaling/v1",
                str_of("namespace"),
                str_of("name")
            )));
        }
        set_managers(&mut obj, &managers);
        let (stored, _) = update(ctx, name, Mutation::Replace(obj), Some("scale"))?;
        Ok(to_scale(ctx, &stored))
    })();
    match res {
        Ok(v) => json_response(200, &v),
        Err(e) => error_response(&e),
    }
}

/// The parent's managedFields after a write of `replicas` through /scale by `manager`.
// kubernetes staging/src/k8s.io/apimachinery/pkg/util/managedfields/internal/scalehandler.go: the parent's
// managers that own the replicas field become managers of the Scale (`ToSubresource`, all in autoscaling/v1),
// the write runs the field manager on the Scale, and `ToParent` maps the result back: a manager that lost
// `.spec.replicas` has it "stolen" in the parent, the writer owns the parent's replicas path in an entry with
// `subresource: scale` and the parent's time for that entry, which never has one (no `time`).
fn scale_managers(
    cur: &Value,
    new: &Value,
    spec_replicas: &str,
    manager: &str,
    api_version: &str,
    apply: bool,
    force: bool,
) -> Result<Vec<Manager>, Vec<Conflict>> {
    let path: FieldPath = spec_replicas.trim_start_matches('.').split('.').map(|s| format!("f:{s}")).collect();
    let operation = if apply { "Apply" } else { "Update" };
    let changed = value_at(cur, &path) != value_at(new, &path);
    let mine = |m: &Manager| m.manager == manager && m.operation == operation && m.subresource == "scale";
    let mut managers = managers_of(cur);
    if apply && changed && !force {
        // structured-merge-diff names the version only of Update managers (`merge/conflict.go`).
        let conflicts: Vec<Conflict> = managers
            .iter()
            .filter(|m| !mine(m) && m.fields.contains(&path))
            .map(|m| Conflict {
                manager: m.manager.clone(),
                api_version: if m.operation == "Apply" { String::new() } else { "autoscaling/v1".into() },
                field: ".spec.replicas".into(),
                subresource: m.subresource.clone(),
            })
            .collect();
        if !conflicts.is_empty() {
            return Err(conflicts);
        }
    }
    if !changed && !apply {
        return Ok(managers);
    }
    if changed {
        for m in managers.iter_mut().filter(|m| !mine(m)) {
            m.fields.remove(&path);
        }
    }
    match managers.iter_mut().find(|m| mine(m)) {
        Some(m) => {
            m.fields.insert(path);
            m.api_version = api_version.into();
        }
        None => managers.push(Manager {
            manager: manager.into(),
            operation: operation.into(),
            api_version: api_version.into(),
            subresource: "scale".into(),
            fields: [path].into_iter().collect(),
            time: String::new(),
        }),
    }
    Ok(managers)
}
