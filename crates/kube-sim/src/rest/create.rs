//! Create: `POST` of a collection (kube-apiserver `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go`):
//! defaults, strategy fields, validation, admission and the first managedFields entry.

use super::*;

/// Prepares a new object for creation (metadata, defaults, validation) without storing it.
pub(crate) fn prepare_create(ctx: &Ctx, mut obj: Value) -> Result<Value, ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request("the object provided is not a JSON object"));
    }
    let want_av = ctx.api_version();
    match obj.get("apiVersion").and_then(|a| a.as_str()) {
        Some(av) if av != want_av && !ctx.rt.versions.iter().any(|v| ctx.rt.api_version(v) == av) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
        _ => {}
    }
    match obj.get("kind").and_then(|a| a.as_str()) {
        Some(k) if k != ctx.rt.kind => return Err(kind_mismatch(ctx, &obj, k)),
        _ => {}
    }
    prune_builtin(ctx, &mut obj)?;
    if !ctx.rt.crd {
        crate::corevalidation::decode_errors(&ctx.rt.group, &ctx.rt.plural, &ctx.rt.kind, &ctx.version, &obj)?;
    }
    obj["apiVersion"] = ctx.rt.api_version(ctx.rt.preferred()).into();
    obj["kind"] = ctx.rt.kind.clone().into();
    if !obj.get("metadata").is_some_and(|m| m.is_object()) {
        obj["metadata"] = json!({});
    }
    if ctx.rt.namespaced {
        let ns = ctx.ns_key();
        match obj.pointer("/metadata/namespace").and_then(|n| n.as_str()) {
            Some(n) if !n.is_empty() && n != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => obj["metadata"]["namespace"] = ns.into(),
        }
    } else if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("namespace");
    }
    let name = obj.pointer("/metadata/name").and_then(|n| n.as_str()).unwrap_or_default().to_string();
    let name = if name.is_empty() {
        match obj.pointer("/metadata/generateName").and_then(|n| n.as_str()) {
            Some(g) if !g.is_empty() => {
                let mut g = g.to_string();
                g.truncate(58);
                format!("{g}{}", generate_suffix())
            }
            _ => {
                return Err(ApiError::invalid(
                    &ctx.rt.kind,
                    &ctx.rt.group,
                    "",
                    &[(
                        "FieldValueRequired".into(),
                        "metadata.name".into(),
                        "Required value: name or generateName is required".into(),
                    )],
                ));
            }
        }
    } else {
        name
    };
    validate_name(&ctx.rt, &name)?;
    let md = obj["metadata"].as_object_mut().unwrap();
    md.insert("name".into(), name.clone().into());
    md.insert("uid".into(), uuid::Uuid::new_v4().to_string().into());
    md.insert("creationTimestamp".into(), now().into());
    md.remove("deletionTimestamp");
    md.remove("deletionGracePeriodSeconds");
    if md.get("resourceVersion").and_then(|r| r.as_str()).is_some_and(|r| !r.is_empty()) {
        // `rest.BeforeCreate` returns a plain error here (`staging/src/k8s.io/apiserver/pkg/registry/rest/create.go`).
        return Err(ApiError::plain_500("resourceVersion should not be set on objects to be created"));
    }
    md.remove("resourceVersion");
    md.remove("selfLink");
    if ctx.rt.crd || generation_tracked(&ctx.rt.group, &ctx.rt.plural) {
        md.insert("generation".into(), 1.into());
    } else {
        md.remove("generation");
    }
    // Status is reset on create for kinds with a status subresource (nodes keep it, like kube).
    if ctx.rt.status
        && !(ctx.rt.group.is_empty() && ctx.rt.plural == "nodes")
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
        // The status a new object starts with: the Go zero value of its status type (non-omitempty counters),
        // as the create strategies reset it (pkg/registry/apps/*/strategy.go, policy/poddisruptionbudget).
        let zero = match (ctx.rt.group.as_str(), ctx.rt.plural.as_str()) {
            ("apps", "statefulsets") => Some(json!({"availableReplicas": 0, "replicas": 0})),
            ("apps", "replicasets") => Some(json!({"replicas": 0})),
            ("apps", "daemonsets") => Some(
                json!({"currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0, "numberReady": 0}),
            ),
            ("apps", "deployments") | ("batch", "jobs") | ("batch", "cronjobs") => Some(json!({})),
            ("policy", "poddisruptionbudgets") => {
                Some(json!({"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0}))
            }
            ("", "persistentvolumes") => Some(json!({"phase": "Pending"})),
            _ => None,
        };
        if let Some(z) = zero {
            m.insert("status".into(), z);
        }
    }
    validate_metadata(&ctx.rt, &name, &obj)?;
    apply_builtin_defaults(&ctx.rt.group, &ctx.rt.plural, &mut obj);
    // The StorageObjectInUseProtection admission plugin
    // (plugin/pkg/admission/storage/storageobjectinuseprotection/admission.go) adds the protection finalizers.
    let protection = match (ctx.rt.group.as_str(), ctx.rt.plural.as_str()) {
        ("", "persistentvolumeclaims") => Some("kubernetes.io/pvc-protection"),
        ("", "persistentvolumes") => Some("kubernetes.io/pv-protection"),
        _ => None,
    };
    if let Some(fin) = protection {
        let mut fins = finalizers(&obj);
        if !fins.iter().any(|f| f == fin) {
            fins.push(fin.into());
            obj["metadata"]["finalizers"] = json!(fins);
        }
    }
    if ctx.rt.crd {
        validate_custom(ctx, &mut obj, None, Scope::Main)?;
    } else {
        validate_builtin(ctx, &name, &obj)?;
    }
    Ok(obj)
}

/// What create strategies add after managedFields are computed: a Job's generated selector and template labels
/// (pkg/registry/batch/job/strategy.go `generateSelector`), a DaemonSet's template generation annotation
/// (pkg/registry/apps/daemonset/strategy.go), a PersistentVolume's phase transition time.
pub(crate) fn create_strategy_fields(ctx: &Ctx, obj: &mut Value) {
    let uid = obj.pointer("/metadata/uid").and_then(|u| u.as_str()).unwrap_or_default().to_string();
    let name = obj.pointer("/metadata/name").and_then(|u| u.as_str()).unwrap_or_default().to_string();
    match (ctx.rt.group.as_str(), ctx.rt.plural.as_str()) {
        ("batch", "jobs") if obj.pointer("/spec/manualSelector").and_then(|m| m.as_bool()) != Some(true) => {
            if obj.pointer("/spec/selector").is_none() {
                obj["spec"]["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
            }
            if obj.pointer("/spec/template").is_some() {
                if obj.pointer("/spec/template/metadata/labels").is_none() {
                    obj["spec"]["template"]["metadata"]["labels"] = json!({});
                }
                if let Some(l) = obj.pointer_mut("/spec/template/metadata/labels").and_then(|l| l.as_object_mut()) {
                    for (k, v) in [
                        ("batch.kubernetes.io/controller-uid", &uid),
                        ("batch.kubernetes.io/job-name", &name),
                        ("controller-uid", &uid),
                        ("job-name", &name),
                    ] {
                        l.entry(k).or_insert_with(|| v.clone().into());
                    }
                }
                // A Job without labels takes its pod template's labels (`SetDefaults_Job`,
                // `pkg/apis/batch/v1/defaults.go`), which kube-apiserver 1.36 answers with the generated ones.
                if obj.pointer("/metadata/labels").and_then(|l| l.as_object()).is_none_or(|l| l.is_empty())
                    && let Some(tl) = obj.pointer("/spec/template/metadata/labels").cloned()
                {
                    obj["metadata"]["labels"] = tl;
                }
            }
        }
        ("", "nodes") => {
            // The TaintNodesByCondition admission plugin (plugin/pkg/admission/nodetaint) taints new nodes.
            let taints = obj["spec"].as_object_mut().map(|s| s.entry("taints").or_insert_with(|| json!([])));
            if let Some(t) = taints.and_then(|t| t.as_array_mut())
                && !t.iter().any(|x| x.get("key").and_then(|k| k.as_str()) == Some("node.kubernetes.io/not-ready"))
            {
                t.push(json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}));
            }
        }
        ("", "persistentvolumes") => {
            obj["status"]["lastPhaseTransitionTime"] = now().into();
        }
        _ => {}
    }
}

/// What kube-apiserver's default admission plugins add to a new pod, after managedFields are computed: `priority`
/// 0 and `preemptionPolicy` (plugin/pkg/admission/priority), the not-ready/unreachable `NoExecute` tolerations
/// of 300 s (plugin/pkg/admission/defaulttolerationseconds), and the `qosClass` of its status
/// (pkg/apis/core/helper/qos).
pub(crate) fn pod_admission_defaults(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(|s| s.as_object_mut()) else {
        return;
    };
    spec.entry("priority").or_insert(json!(0));
    spec.entry("preemptionPolicy").or_insert(json!("PreemptLowerPriority"));
    let tol = spec.entry("tolerations").or_insert(json!([]));
    if let Some(t) = tol.as_array_mut() {
        for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
            let tolerated = t.iter().any(|x| {
                (x.get("key").and_then(|k| k.as_str()) == Some(key) || x.get("key").is_none())
                    && x.get("effect").and_then(|e| e.as_str()).is_none_or(|e| e == "NoExecute")
            });
            if !tolerated {
                t.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
    let containers: Vec<Value> = spec.get("containers").and_then(|c| c.as_array()).cloned().unwrap_or_default();
    let res = |c: &Value, kind: &str, r: &str| c.pointer(&format!("/resources/{kind}/{r}")).cloned();
    let best_effort = containers.iter().all(|c| {
        c.pointer("/resources/requests").and_then(|r| r.as_object()).is_none_or(|r| r.is_empty())
            && c.pointer("/resources/limits").and_then(|r| r.as_object()).is_none_or(|r| r.is_empty())
    });
    let guaranteed = !containers.is_empty()
        && containers.iter().all(|c| {
            ["cpu", "memory"].iter().all(|r| {
                let l = res(c, "limits", r);
                l.is_some() && res(c, "requests", r).is_none_or(|q| Some(q) == l)
            })
        });
    let qos = if best_effort {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    };
    if obj.pointer("/status/qosClass").is_none() {
        obj["status"]["qosClass"] = qos.into();
    }
}

/// `obj` without what registry strategies (`PrepareForCreate`, REST create) and admission plugins add on
/// create: namespace `spec.finalizers`, Service cluster IPs and IP families, protection finalizers.
pub(crate) fn without_strategy_fields(ctx: &Ctx, obj: &Value) -> Value {
    let mut o = obj.clone();
    match (ctx.rt.group.as_str(), ctx.rt.plural.as_str()) {
        ("", "namespaces") => {
            if let Some(spec) = o.get_mut("spec").and_then(|s| s.as_object_mut()) {
                spec.remove("finalizers");
            }
        }
        ("", "services") => {
            if let Some(spec) = o.get_mut("spec").and_then(|s| s.as_object_mut()) {
                // Allocated addresses are the registry's; a headless `clusterIP: None` can only come from the
                // client, which then owns it.
                let headless = spec.get("clusterIP").and_then(|c| c.as_str()) == Some("None");
                for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
                    if !(headless && f == "clusterIP") {
                        spec.remove(f);
                    }
                }
            }
        }
        _ => {}
    }
    if let Some(f) = o.pointer_mut("/metadata/finalizers").and_then(|f| f.as_array_mut()) {
        f.retain(|x| !matches!(x.as_str(), Some("kubernetes.io/pvc-protection" | "kubernetes.io/pv-protection")));
        if f.is_empty() {
            o["metadata"].as_object_mut().map(|m| m.remove("finalizers"));
        }
    }
    o
}

/// Creates an object (the POST handler body).
pub fn create(ctx: &Ctx, obj: Value, apply_manager: Option<&Value>) -> Result<Value, ApiError> {
    check_namespace(ctx, obj.pointer("/metadata/name").and_then(|n| n.as_str()).unwrap_or_default())?;
    let mut obj = prepare_create(ctx, obj)?;
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let ts = now();
    if apply_manager.is_none() {
        // managedFields are computed by the handler before the registry strategy and admission run
        // (apiserver pkg/endpoints/handlers/create.go): what they add is nobody's.
        let mut seen = without_strategy_fields(ctx, &obj);
        let schema = crd_schema(ctx);
        let shape = shape_of(ctx, schema.as_ref());
        apply::record_update(None, &mut seen, &ctx.manager, &ctx.api_version(), "", &ts, &ctx.zero(), shape);
        match seen.pointer("/metadata/managedFields") {
            Some(mf) => obj["metadata"]["managedFields"] = mf.clone(),
            None => {
                obj["metadata"].as_object_mut().map(|m| m.remove("managedFields"));
            }
        }
    }
    if !ctx.rt.crd && ctx.rt.group.is_empty() && ctx.rt.plural == "pods" {
        pod_admission_defaults(&mut obj);
    }
    create_strategy_fields(ctx, &mut obj);
    admit(ctx, AdmissionOperation::Create, None, &name, Some(&obj), None)?;
    if ctx.events_api() {
        obj = crate::events::to_storage(&obj);
    }
    if ctx.rt.plural == "customresourcedefinitions" && ctx.rt.group == "apiextensions.k8s.io" {
        crate::crd::prepare_crd(&mut obj).map_err(|m| {
            ApiError::invalid(
                "CustomResourceDefinition",
                "apiextensions.k8s.io",
                &name,
                &[("FieldValueInvalid".into(), "spec".into(), m)],
            )
        })?;
    }
    let mut st = ctx.server.inner.state.lock().unwrap();
    if st.get_key(&ctx.key(), &ctx.ns_key(), &name).is_some() {
        return Err(ApiError::already_exists(&ctx.rname(), &name));
    }
    if ctx.dry_run {
        return Ok(ctx.out(&obj));
    }
    let stored = st.commit(&ctx.key(), &ctx.ns_key(), &name, Some(obj));
    drop(st);
    crate::crd::after_write(ctx.server, &ctx.rt, &stored);
    Ok(ctx.out(&stored))
}
