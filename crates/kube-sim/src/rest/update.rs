//! Update: `PUT`, and the write path that patches and apply share (kube-apiserver
//! `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/update.go`).

use super::*;

/// Updates an object through a mutation (PUT / PATCH / apply), on the main resource or `status`.
pub fn update(ctx: &Ctx, name: &str, m: Mutation, sub: Option<&str>) -> Result<(Value, bool), ApiError> {
    // The update handler decodes the body first (`handlers/update.go`): a MicroTime or base64 value that does not
    // decode is 400 BadRequest, before the name, the resourceVersion or anything in the store is looked at.
    if let Mutation::Replace(body) = &m
        && !ctx.rt.crd
    {
        crate::corevalidation::decode_errors(&ctx.rt.group, &ctx.rt.plural, &ctx.rt.kind, &ctx.version, body)?;
    }
    // The update handler compares the body's name with the URL before it reads the store
    // (`checkName` in `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/update.go` / `rest.go`).
    if let Mutation::Replace(body) = &m
        && let Some(n) = body.pointer("/metadata/name").and_then(|n| n.as_str())
        && n != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        )));
    }
    for _attempt in 0..16 {
        let cur = {
            let st = ctx.server.inner.state.lock().unwrap();
            st.get_key(&ctx.key(), &ctx.ns_key(), name)
        };
        let Some(cur) = cur else {
            if let Mutation::Apply(cfg, _) = &m
                && sub.is_none()
            {
                let mut cfgv = (*cfg).clone();
                if cfgv.pointer("/metadata/name").is_none() {
                    cfgv["metadata"]["name"] = name.into();
                }
                let schema = crd_schema(ctx);
                let shape = shape_of(ctx, schema.as_ref());
                let mut obj = apply::apply(None, &cfgv, &ctx.manager, &ctx.api_version(), true, &now(), "", shape)
                    .map_err(|_| ApiError::internal("apply"))?;
                if let Some(md) = obj["metadata"].as_object_mut() {
                    md.remove("resourceVersion");
                }
                return create(ctx, obj, Some(cfg)).map(|o| (o, true));
            }
            // `AllowCreateOnUpdate() == true`: PUT creates Leases, Events and Endpoints
            // (pkg/registry/coordination/lease/strategy.go, core/event/strategy.go, core/endpoint/strategy.go).
            if let Mutation::Replace(body) = &m
                && sub.is_none()
                && !ctx.rt.crd
                && matches!(
                    (ctx.rt.group.as_str(), ctx.rt.plural.as_str()),
                    ("coordination.k8s.io", "leases")
                        | ("", "events")
                        | ("events.k8s.io", "events")
                        | ("", "endpoints")
                )
            {
                let mut body = body.clone();
                if let Some(md) = body.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                    md.remove("resourceVersion");
                }
                return create(ctx, body, None).map(|o| (o, true));
            }
            return Err(ApiError::not_found(&ctx.rname(), name));
        };
        let mut new = apply_mutation(ctx, &cur, &m, sub)?;
        if !new.is_object() {
            return Err(ApiError::bad_request("the object provided is not a JSON object"));
        }
        if !matches!(m, Mutation::Apply(..)) {
            prune_builtin(ctx, &mut new)?;
        }
        if ctx.events_api() {
            new = crate::events::to_storage(&new);
        }
        // Preconditions and immutable metadata.
        let body_rv = new.pointer("/metadata/resourceVersion").and_then(|r| r.as_str()).unwrap_or_default().to_string();
        let cur_rv = cur.pointer("/metadata/resourceVersion").and_then(|r| r.as_str()).unwrap_or_default().to_string();
        let explicit_rv = match &m {
            Mutation::Replace(_) => !body_rv.is_empty(),
            Mutation::Patch(..) | Mutation::Apply(..) => !body_rv.is_empty() && body_rv != cur_rv,
        };
        if explicit_rv && body_rv != cur_rv {
            return Err(ApiError::conflict(&ctx.rname(), name));
        }
        // Strategies with `AllowUnconditionalUpdate() == false` (custom resources:
        // apiextensions-apiserver pkg/registry/customresource/strategy.go; Leases:
        // pkg/registry/coordination/lease/strategy.go) need a resourceVersion on PUT
        // (generic/registry/store.go `Update`).
        if matches!(m, Mutation::Replace(_))
            && body_rv.is_empty()
            && (ctx.rt.crd
                || matches!(
                    (ctx.rt.group.as_str(), ctx.rt.plural.as_str()),
                    ("coordination.k8s.io", "leases") | ("policy", "poddisruptionbudgets")
                ))
        {
            // A custom resource's body was decoded (and its unknown fields warned about) before the store
            // rejects the update (`staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/customresource_handler.go`,
            // `unstructuredDecoder`).
            if ctx.rt.crd
                && ctx.warn_unknown
                && !ctx.strict
                && let Some(v) = ctx.rt.validators.get(&ctx.version).or_else(|| ctx.rt.validators.values().next())
            {
                let mut pruned = new.clone();
                v.default_and_prune(&mut pruned);
                let mut unknown = Vec::new();
                pruned_paths(&new, &pruned, "", &mut unknown);
                for p in unknown {
                    add_warning(format!("unknown field \"{p}\""));
                }
            }
            return Err(ApiError::invalid(
                &ctx.rt.plural,
                &ctx.rt.group,
                name,
                &[(
                    "FieldValueInvalid".into(),
                    "metadata.resourceVersion".into(),
                    "Invalid value: 0: must be specified for an update".into(),
                )],
            ));
        }
        let cur_uid = cur.pointer("/metadata/uid").and_then(|u| u.as_str()).unwrap_or_default();
        if let Some(uid) = new.pointer("/metadata/uid").and_then(|u| u.as_str())
            && !uid.is_empty()
            && uid != cur_uid
        {
            // storage.Preconditions.Check (`staging/src/k8s.io/apiserver/pkg/storage/interfaces.go`), turned into a
            // Conflict on the resource by `storeerr.InterpretUpdateError`.
            let rname = ctx.rname();
            let mut e = ApiError::conflict(&rname, name);
            e.message = format!(
                "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID in precondition: {uid}, UID in object meta: {cur_uid}",
                rname.qualified()
            );
            return Err(e);
        }
        if let Some(n) = new.pointer("/metadata/name").and_then(|n| n.as_str())
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(k) = new.get("kind").and_then(|k| k.as_str())
            && k != ctx.rt.kind
        {
            return Err(kind_mismatch(ctx, &new, k));
        }
        if ctx.rt.namespaced
            && let Some(n) = new.pointer("/metadata/namespace").and_then(|n| n.as_str())
            && !n.is_empty()
            && n != ctx.ns_key()
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        new["apiVersion"] = cur["apiVersion"].clone();
        new["kind"] = cur["kind"].clone();
        if !new.get("metadata").is_some_and(|m| m.is_object()) {
            new["metadata"] = json!({});
        }
        for f in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match cur["metadata"].get(f) {
                Some(v) => new["metadata"][f] = v.clone(),
                None => {
                    new["metadata"].as_object_mut().unwrap().remove(f);
                }
            }
        }
        // A deleting object cannot gain new finalizers (kube: Forbidden), but may drop them.
        if cur.pointer("/metadata/deletionTimestamp").is_some() {
            let old_f = finalizers(&cur);
            let added: Vec<String> = finalizers(&new).into_iter().filter(|f| !old_f.contains(f)).collect();
            if !added.is_empty() {
                // `ValidateObjectMetaUpdate` (`staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go`)
                // prints the new finalizers with Go's `%#v`. Built-in kinds run it twice: once in
                // `rest.BeforeUpdate`'s common checks and once in their own `ValidateUpdate`.
                let list: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
                let cause = (
                    "FieldValueForbidden".to_string(),
                    "metadata.finalizers".to_string(),
                    format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                        list.join(", ")
                    ),
                );
                let causes = if ctx.rt.crd { vec![cause] } else { vec![cause.clone(), cause] };
                return Err(ApiError::invalid(&ctx.rt.kind, &ctx.rt.group, name, &causes));
            }
        }
        match sub {
            Some("status") if !ctx.rt.crd => {
                // Built-in status strategies reset only the spec-like fields and ownerReferences
                // (pkg/registry/*/strategy.go `GetResetFields` of the status strategies): label, annotation and
                // finalizer changes made through /status are kept.
                let mut merged = new.clone();
                let keep: Vec<String> = cur
                    .as_object()
                    .map(|o| o.keys().filter(|k| *k != "status" && *k != "metadata").cloned().collect())
                    .unwrap_or_default();
                if let Some(mo) = merged.as_object_mut() {
                    mo.retain(|k, _| k == "status" || k == "metadata" || k == "apiVersion" || k == "kind");
                }
                for k in keep {
                    merged[&k] = cur[&k].clone();
                }
                match cur.pointer("/metadata/ownerReferences") {
                    Some(o) => merged["metadata"]["ownerReferences"] = o.clone(),
                    None => {
                        merged["metadata"].as_object_mut().unwrap().remove("ownerReferences");
                    }
                }
                // The Deployment status strategy also keeps the old labels (`deploymentStatusStrategy.PrepareForUpdate`
                // in `pkg/registry/apps/deployment/strategy.go`).
                if ctx.rt.group == "apps" && ctx.rt.plural == "deployments" {
                    match cur.pointer("/metadata/labels") {
                        Some(l) => merged["metadata"]["labels"] = l.clone(),
                        None => {
                            merged["metadata"].as_object_mut().unwrap().remove("labels");
                        }
                    }
                }
                new = merged;
            }
            Some("status") => {
                // Custom resources keep only status (apiextensions-apiserver pkg/registry/customresource/
                // status_strategy.go `PrepareForUpdate` copies the old object and sets status and managedFields).
                let st = new.get("status").cloned();
                let mut merged = (*cur).clone();
                match st {
                    Some(s) => merged["status"] = s,
                    None => {
                        merged.as_object_mut().unwrap().remove("status");
                    }
                }
                // Status writes keep metadata except managedFields bookkeeping.
                if matches!(m, Mutation::Apply(..)) {
                    match new.pointer("/metadata/managedFields") {
                        Some(mf) => merged["metadata"]["managedFields"] = mf.clone(),
                        None => {
                            if let Some(md) = merged["metadata"].as_object_mut() {
                                md.remove("managedFields");
                            }
                        }
                    }
                }
                new = merged;
            }
            _ => {
                if ctx.rt.status {
                    match cur.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            new.as_object_mut().unwrap().remove("status");
                        }
                    }
                }
            }
        }
        apply_builtin_defaults(&ctx.rt.group, &ctx.rt.plural, &mut new);
        // A scale write is an update of the whole object through the parent's strategy (validated alike).
        if sub.is_none() || sub == Some("scale") {
            if !ctx.rt.crd && !matches!(m, Mutation::Apply(..)) {
                crate::corevalidation::decode_errors(&ctx.rt.group, &ctx.rt.plural, &ctx.rt.kind, &ctx.version, &new)?;
            }
            check_immutable(ctx, name, &cur, &new)?;
            validate_metadata(&ctx.rt, name, &new)?;
            if !ctx.rt.crd {
                let out = ctx.out(&new);
                validate_builtin(ctx, name, &out)?;
            }
        }
        if ctx.rt.crd {
            let scope = if sub == Some("status") { Scope::Status } else { Scope::Main };
            let old_out = ctx.out(&cur);
            new["apiVersion"] = ctx.api_version().into();
            validate_custom(ctx, &mut new, Some(&old_out), scope)?;
            new["apiVersion"] = cur["apiVersion"].clone();
        }
        // A Deployment's annotation change bumps its generation too, since annotations are copied to its
        // ReplicaSets (`deploymentStrategy.PrepareForUpdate` in `pkg/registry/apps/deployment/strategy.go`).
        let annotations_bump = !ctx.rt.crd
            && ctx.rt.group == "apps"
            && ctx.rt.plural == "deployments"
            && new.pointer("/metadata/annotations") != cur.pointer("/metadata/annotations");
        if (ctx.rt.crd || generation_tracked(&ctx.rt.group, &ctx.rt.plural))
            && sub != Some("status")
            && (strip_status_for_spec(&new) != strip_status_for_spec(&cur) || annotations_bump)
        {
            let g = cur.pointer("/metadata/generation").and_then(|g| g.as_i64()).unwrap_or(0);
            new["metadata"]["generation"] = (g + 1).into();
        }
        let ts = now();
        let schema = crd_schema(ctx);
        // The writer's managedFields entry, recorded on `updated` against `before`.
        let record = |before: &Value, updated: &mut Value| {
            apply::record_update(
                Some(before),
                updated,
                &ctx.manager,
                &ctx.api_version(),
                sub.unwrap_or(""),
                &ts,
                &ctx.zero(),
                shape_of(ctx, schema.as_ref()),
            )
        };
        if !matches!(m, Mutation::Apply(..)) && ctx.events_api() {
            // The field manager compares the objects in the request's version (`events.k8s.io/v1` names:
            // `note`, `regarding`, `deprecatedSource`), not in the stored core/v1 form.
            let mut ext_new = crate::events::to_external(&new);
            let ext_cur = crate::events::to_external(&cur);
            record(&ext_cur, &mut ext_new);
            match ext_new.pointer("/metadata/managedFields") {
                Some(mf) => new["metadata"]["managedFields"] = mf.clone(),
                None => {
                    new["metadata"].as_object_mut().map(|m| m.remove("managedFields"));
                }
            }
        } else if !matches!(m, Mutation::Apply(..)) && sub != Some("scale") {
            // A write through /scale brings its managedFields computed by the scale handler.
            record(&cur, &mut new);
        }
        new["metadata"]["resourceVersion"] = cur_rv.clone().into();
        if new == *cur {
            // No-op updates do not bump the resourceVersion (like kube-apiserver).
            return Ok((ctx.out(&cur), false));
        }
        admit(ctx, AdmissionOperation::Update, sub, name, Some(&new), Some(&cur))?;
        let mut st = ctx.server.inner.state.lock().unwrap();
        let now_cur = st.get_key(&ctx.key(), &ctx.ns_key(), name);
        if now_cur.as_ref().map(|c| c.pointer("/metadata/resourceVersion").cloned())
            != Some(Some(Value::String(cur_rv.clone())))
        {
            if matches!(m, Mutation::Replace(_)) && explicit_rv {
                return Err(ApiError::conflict(&ctx.rname(), name));
            }
            continue; // retry like GuaranteedUpdate
        }
        if ctx.dry_run {
            return Ok((ctx.out(&new), false));
        }
        let deleting = new.pointer("/metadata/deletionTimestamp").is_some();
        let spec_fins_done = !(ctx.rt.group.is_empty() && ctx.rt.plural == "namespaces")
            || new.pointer("/spec/finalizers").and_then(|f| f.as_array()).is_none_or(|a| a.is_empty());
        if deleting && finalizers(&new).is_empty() && spec_fins_done {
            let out = ctx.out(&new);
            st.commit(&ctx.key(), &ctx.ns_key(), name, None);
            drop(st);
            crate::crd::after_remove(ctx.server, &ctx.rt, &new);
            gc::after_delete(ctx.server);
            return Ok((out, false));
        }
        let stored = st.commit(&ctx.key(), &ctx.ns_key(), name, Some(new));
        drop(st);
        crate::crd::after_write(ctx.server, &ctx.rt, &stored);
        if deleting {
            gc::after_delete(ctx.server);
        }
        return Ok((ctx.out(&stored), false));
    }
    Err(ApiError::conflict(&ctx.rname(), name))
}
