//! Delete and deletecollection (kube-apiserver `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/delete.go`):
//! options, preconditions, finalizers, graceful pod deletion and the answers.

use super::*;

/// `metadata.finalizers`.
pub fn finalizers(o: &Value) -> Vec<String> {
    o.pointer("/metadata/finalizers")
        .and_then(|f| f.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

/// Delete options.
#[derive(Debug, Default, Clone)]
pub struct DeleteOpts {
    /// `Background`, `Foreground` or `Orphan`.
    pub propagation: Option<String>,
    /// Precondition uid.
    pub uid: Option<String>,
    /// Precondition resourceVersion.
    pub rv: Option<String>,
    /// `gracePeriodSeconds`.
    pub grace: Option<i64>,
}

/// `409 Conflict` for a delete precondition that does not match the stored object, as `rest.BeforeDelete`
/// (`staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go`) words it: the resource is named by its Kind.
pub(crate) fn precondition_failed(ctx: &Ctx, name: &str, uid: bool, want: &str, have: &str) -> ApiError {
    let kind = ResourceName { group: &ctx.rt.group, resource: &ctx.rt.kind };
    let why = if uid {
        format!(
            "the UID in the precondition ({want}) does not match the UID in record ({have}). The object might have been deleted and then recreated"
        )
    } else {
        format!(
            "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({have}). The object might have been modified"
        )
    };
    let mut e = ApiError::conflict(&kind, name);
    e.message = format!("Operation cannot be fulfilled on {} \"{name}\": {why}", kind.qualified());
    e
}

/// Deletes an object: with finalizers it is only marked (deletionTimestamp); otherwise removed and its
/// dependents garbage-collected.
pub fn delete(ctx: &Ctx, name: &str, opts: &DeleteOpts) -> Result<Value, ApiError> {
    let cur = {
        let st = ctx.server.inner.state.lock().unwrap();
        st.get_key(&ctx.key(), &ctx.ns_key(), name)
    }
    .ok_or_else(|| ApiError::not_found(&ctx.rname(), name))?;
    if let Some(uid) = &opts.uid {
        let have = cur.pointer("/metadata/uid").and_then(|u| u.as_str()).unwrap_or_default();
        if uid != have {
            return Err(precondition_failed(ctx, name, true, uid, have));
        }
    }
    if let Some(rv) = &opts.rv {
        let have = cur.pointer("/metadata/resourceVersion").and_then(|u| u.as_str()).unwrap_or_default();
        if rv != have {
            return Err(precondition_failed(ctx, name, false, rv, have));
        }
    }
    admit(ctx, AdmissionOperation::Delete, None, name, None, Some(&cur))?;
    let is_ns = ctx.rt.group.is_empty() && ctx.rt.plural == "namespaces";
    let mut fins = finalizers(&cur);
    match opts.propagation.as_deref() {
        Some("Foreground") if !fins.contains(&"foregroundDeletion".to_string()) => {
            fins.push("foregroundDeletion".into())
        }
        Some("Orphan") if !fins.contains(&"orphan".to_string()) => fins.push("orphan".into()),
        _ => {}
    }
    let ns_done = is_ns
        && cur.pointer("/metadata/deletionTimestamp").is_some()
        && cur.pointer("/spec/finalizers").and_then(|f| f.as_array()).is_none_or(|a| a.is_empty());
    // A dry run answers what the delete would: the removed object, or the object marked for deletion.
    if ctx.dry_run && fins.is_empty() && (!is_ns || ns_done) {
        return Ok(deleted_answer(ctx, &graceful_pod_answer(ctx, &cur, opts)));
    }
    let mut st = ctx.server.inner.state.lock().unwrap();
    if fins.is_empty() && (!is_ns || ns_done) {
        let mut out = ctx.out(&cur);
        st.commit(&ctx.key(), &ctx.ns_key(), name, None);
        drop(st);
        crate::crd::after_remove(ctx.server, &ctx.rt, &cur);
        gc::after_delete(ctx.server);
        out["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"].clone();
        return Ok(deleted_answer(ctx, &graceful_pod_answer(ctx, &out, opts)));
    }
    let mut new = (*cur).clone();
    if new.pointer("/metadata/deletionTimestamp").is_none() {
        new["metadata"]["deletionTimestamp"] = now().into();
        // The namespace REST sets only the deletionTimestamp (`pkg/registry/core/namespace/storage/storage.go`
        // `Delete`); the generic store adds a zero grace period for objects that wait for finalizers
        // (`updateForGracefulDeletionAndFinalizers` in `staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`).
        if !is_ns {
            new["metadata"]["deletionGracePeriodSeconds"] = 0.into();
        }
        // rest.BeforeDelete (apiserver pkg/registry/rest/delete.go) bumps the generation when it sets the
        // deletionTimestamp of an object that tracks one.
        if let Some(g) = new.pointer("/metadata/generation").and_then(|g| g.as_i64()) {
            new["metadata"]["generation"] = (g + 1).into();
        }
    }
    if !fins.is_empty() {
        new["metadata"]["finalizers"] = json!(fins);
    }
    if is_ns {
        new["status"]["phase"] = "Terminating".into();
    }
    if ctx.dry_run {
        return Ok(ctx.out(&new));
    }
    let stored = if new == *cur { cur.clone() } else { st.commit(&ctx.key(), &ctx.ns_key(), name, Some(new)) };
    drop(st);
    gc::after_delete(ctx.server);
    Ok(ctx.out(&stored))
}

/// The answer to a DELETE that removed the object at once: the object for the kinds whose registry sets
/// `ReturnDeletedObject: true` (pkg/registry/core/{pod,service,serviceaccount,persistentvolume,
/// persistentvolumeclaim,namespace}/storage/storage.go, storage/storageclass/storage/storage.go), otherwise a
/// Success Status naming the object (apiserver pkg/registry/generic/registry/store.go `finalizeDelete`).
pub(crate) fn deleted_answer(ctx: &Ctx, obj: &Value) -> Value {
    let returns_object = !ctx.rt.crd
        && matches!(
            (ctx.rt.group.as_str(), ctx.rt.plural.as_str()),
            ("", "pods")
                | ("", "services")
                | ("", "serviceaccounts")
                | ("", "persistentvolumes")
                | ("", "persistentvolumeclaims")
                | ("", "namespaces")
                | ("storage.k8s.io", "storageclasses")
                | ("apiextensions.k8s.io", "customresourcedefinitions")
        );
    if returns_object {
        return ctx.out(obj);
    }
    let mut details = json!({
        "name": obj.pointer("/metadata/name").cloned().unwrap_or_default(),
        "kind": ctx.rt.plural,
        "uid": obj.pointer("/metadata/uid").cloned().unwrap_or_default(),
    });
    if !ctx.rt.group.is_empty() {
        details["group"] = ctx.rt.group.clone().into();
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

/// Deletes every object matching the selectors; returns the list of deleted objects.
pub fn deletecollection(ctx: &Ctx, lopts: &ListOpts, dopts: &DeleteOpts) -> Result<Value, ApiError> {
    let all = ListOpts { labels: lopts.labels.clone(), fields: lopts.fields.clone(), limit: 0, cont: None };
    let (items, rv, _, _) = list_raw(ctx, &all)?;
    let mut out = Vec::new();
    for it in items {
        let name = it.pointer("/metadata/name").and_then(|n| n.as_str()).unwrap_or_default().to_string();
        let ns = it.pointer("/metadata/namespace").and_then(|n| n.as_str()).map(String::from);
        let c2 = Ctx {
            server: ctx.server,
            user: ctx.user,
            rt: ctx.rt.clone(),
            version: ctx.version.clone(),
            ns,
            dry_run: ctx.dry_run,
            manager: ctx.manager.clone(),
            strict: false,
            warn_unknown: false,
        };
        // The answer lists the objects as they were listed before deletion
        // (generic/registry/store.go `DeleteCollection` returns its list).
        match delete(&c2, &name, dopts) {
            Ok(_) => out.push(it),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    if !ctx.rt.crd {
        for it in out.iter_mut().filter_map(|i| i.as_object_mut()) {
            it.remove("apiVersion");
            it.remove("kind");
        }
    }
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if ctx.rt.crd {
        meta["continue"] = "".into();
    }
    Ok(json!({"kind": ctx.rt.list_kind, "apiVersion": ctx.api_version(), "metadata": meta, "items": out}))
}

pub(crate) fn delete_opts(q: &HashMap<String, String>, body: &[u8]) -> DeleteOpts {
    let b: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let orphan =
        b.get("orphanDependents").and_then(|o| o.as_bool()).or_else(|| q.get("orphanDependents").map(|o| o == "true"));
    DeleteOpts {
        propagation: b
            .get("propagationPolicy")
            .and_then(|p| p.as_str())
            .map(String::from)
            .or_else(|| q.get("propagationPolicy").cloned())
            .or_else(|| (orphan == Some(true)).then(|| "Orphan".to_string())),
        uid: b.pointer("/preconditions/uid").and_then(|u| u.as_str()).map(String::from),
        rv: b.pointer("/preconditions/resourceVersion").and_then(|u| u.as_str()).map(String::from),
        grace: b
            .get("gracePeriodSeconds")
            .and_then(|g| g.as_i64())
            .or_else(|| q.get("gracePeriodSeconds").and_then(|g| g.parse().ok())),
    }
}

/// `ValidateDeleteOptions` (`staging/src/k8s.io/apimachinery/pkg/apis/meta/internalversion/validation/validation.go`),
/// run by the delete handlers before the store (`handlers/delete.go`).
pub(crate) fn validate_delete_opts(o: &DeleteOpts) -> Result<(), ApiError> {
    match o.propagation.as_deref() {
        None | Some("Foreground") | Some("Background") | Some("Orphan") => Ok(()),
        Some(p) => Err(ApiError::invalid(
            "DeleteOptions",
            "meta.k8s.io",
            "",
            &[(
                "FieldValueNotSupported".into(),
                "propagationPolicy".into(),
                format!(
                    "Unsupported value: \"{p}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            )],
        )),
    }
}

/// batch/v1 Jobs orphan their pods by default (`DefaultGarbageCollectionPolicy` in
/// `pkg/registry/batch/job/strategy.go`), and the Job REST warns about it when the client chose no policy
/// (`deleteOptionWarnings` in `pkg/registry/batch/job/storage/storage.go`).
pub(crate) fn default_propagation(ctx: &Ctx, mut o: DeleteOpts) -> DeleteOpts {
    if !ctx.rt.crd && ctx.rt.group == "batch" && ctx.rt.plural == "jobs" && o.propagation.is_none() {
        add_warning("child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning".into());
        o.propagation = Some("Orphan".into());
    }
    o
}

/// What `rest.BeforeDelete` (`staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go`) writes into a pod it
/// deletes gracefully, as the answer shows it: a deletionTimestamp, the grace period chosen by the pod strategy's
/// `CheckGracefulDelete` (`pkg/registry/core/pod/strategy.go`: 0 for a pod without node or in a terminal phase,
/// else the option or `terminationGracePeriodSeconds`) and a generation bump. Without a kubelet the pod is then
/// removed at once.
pub(crate) fn graceful_pod_answer(ctx: &Ctx, obj: &Value, opts: &DeleteOpts) -> Value {
    let mut o = obj.clone();
    if ctx.rt.crd
        || !ctx.rt.group.is_empty()
        || ctx.rt.plural != "pods"
        || o.pointer("/metadata/deletionTimestamp").is_some()
    {
        return o;
    }
    let unscheduled = o.pointer("/spec/nodeName").and_then(|n| n.as_str()).is_none_or(|n| n.is_empty());
    let terminal = matches!(o.pointer("/status/phase").and_then(|p| p.as_str()), Some("Succeeded") | Some("Failed"));
    let grace = if unscheduled || terminal {
        0
    } else {
        opts.grace.or_else(|| o.pointer("/spec/terminationGracePeriodSeconds").and_then(|g| g.as_i64())).unwrap_or(30)
    };
    o["metadata"]["deletionTimestamp"] = now().into();
    o["metadata"]["deletionGracePeriodSeconds"] = grace.into();
    if let Some(g) = o.pointer("/metadata/generation").and_then(|g| g.as_i64()) {
        o["metadata"]["generation"] = (g + 1).into();
    }
    o
}
