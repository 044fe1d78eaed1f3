//! CustomResourceDefinitions: creating a CRD object (through the API or [`ApiServer::register_crd_yaml`])
//! makes its resource served with the schema's defaults, pruning and validation, the status and scale
//! subresources, printer columns and an `Established` condition.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::resources::{PrinterColumn, ResourceType, ScalePaths};
use super::rest::{Mutation, now, update};
use super::validation::CrdValidator;
use super::{ApiServer, ApiServerError};

/// Splits a multi-document YAML string into JSON values (empty documents skipped).
pub fn parse_documents(yaml: &str) -> Result<Vec<Value>, ApiServerError> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut docs = Vec::new();
    for line in yaml.lines() {
        if line.trim_end() == "---" || line.starts_with("--- ") {
            docs.push(std::mem::take(&mut cur));
        } else {
            cur.push_str(line);
            cur.push('\n');
        }
    }
    docs.push(cur);
    for d in docs {
        if d.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
            continue;
        }
        let v: Value = serde_saphyr::from_str(&d).map_err(|e| ApiServerError::Yaml(e.to_string()))?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// Registers (creates or replaces) every CRD document in `yaml`.
pub fn register_yaml(server: &ApiServer, yaml: &str) -> Result<(), ApiServerError> {
    for doc in parse_documents(yaml)? {
        if doc.get("kind").and_then(|k| k.as_str()) != Some("CustomResourceDefinition") {
            continue;
        }
        let name = doc.pointer("/metadata/name").and_then(|n| n.as_str()).unwrap_or_default().to_string();
        let existing = server.get_object("apiextensions.k8s.io/v1", "customresourcedefinitions", None, &name);
        let res = match existing {
            None => server.create_internal("apiextensions.k8s.io", "customresourcedefinitions", None, doc).map(|_| ()),
            Some(cur) => server
                .with_system_ctx("apiextensions.k8s.io", "customresourcedefinitions", None, |ctx| {
                    let mut d = doc.clone();
                    d["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"].clone();
                    update(ctx, &name, Mutation::Replace(d), None).map(|_| ())
                })
                .unwrap_or(Ok(())),
        };
        res.map_err(|e| ApiServerError::CrdRejected { name: name.clone(), message: e.message })?;
    }
    Ok(())
}

/// Kubernetes version priority: v1 > v1beta2 > v1beta1 > v1alpha1 > other.
fn version_rank(v: &str) -> (u8, i64, i64) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let num: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let major: i64 = num.parse().unwrap_or(0);
    let tail = &rest[num.len()..];
    if tail.is_empty() {
        (3, major, 0)
    } else if let Some(b) = tail.strip_prefix("beta") {
        (2, major, b.parse().unwrap_or(0))
    } else if let Some(a) = tail.strip_prefix("alpha") {
        (1, major, a.parse().unwrap_or(0))
    } else {
        (0, 0, 0)
    }
}

/// Validates a CRD object and fills its status (NamesAccepted, Established, storedVersions).
pub fn prepare_crd(obj: &mut Value) -> Result<(), String> {
    let rt = resource_type(obj)?;
    let name = obj.pointer("/metadata/name").and_then(|n| n.as_str()).unwrap_or_default();
    let want = format!("{}.{}", rt.plural, rt.group);
    if name != want {
        return Err(format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"));
    }
    let storage: Vec<String> = obj
        .pointer("/spec/versions")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter(|v| v.get("storage").and_then(|s| s.as_bool()) == Some(true))
                .filter_map(|v| v.get("name").and_then(|n| n.as_str()).map(String::from))
                .collect()
        })
        .unwrap_or_default();
    if storage.len() != 1 {
        return Err("Invalid value: must have exactly one version marked as storage version".into());
    }
    let ts = now();
    let names = obj.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let mut accepted = names.clone();
    accepted["singular"] = rt.singular.clone().into();
    accepted["listKind"] = rt.list_kind.clone().into();
    obj["status"] = json!({
        "acceptedNames": accepted,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": ts, "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": ts, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
        ],
        "storedVersions": storage,
    });
    Ok(())
}

/// Builds the served resource type of a CRD object.
pub fn resource_type(crd: &Value) -> Result<ResourceType, String> {
    let s = |p: &str| crd.pointer(p).and_then(|v| v.as_str()).unwrap_or_default().to_string();
    let group = s("/spec/group");
    let plural = s("/spec/names/plural");
    let kind = s("/spec/names/kind");
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return Err("Required value: spec.group, spec.names.plural and spec.names.kind are required".into());
    }
    let versions = crd.pointer("/spec/versions").and_then(|v| v.as_array()).cloned().unwrap_or_default();
    let mut served: Vec<&Value> =
        versions.iter().filter(|v| v.get("served").and_then(|s| s.as_bool()) != Some(false)).collect();
    if served.is_empty() {
        return Err("Required value: at least one served version".into());
    }
    served.sort_by_key(|v| std::cmp::Reverse(version_rank(v.get("name").and_then(|n| n.as_str()).unwrap_or_default())));
    let pref = served[0];
    let mut validators = BTreeMap::new();
    for v in &served {
        let vname = v.get("name").and_then(|n| n.as_str()).unwrap_or_default().to_string();
        if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
            let val = CrdValidator::new(schema)
                .map_err(|errs| errs.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))?;
            validators.insert(vname, Arc::new(val));
        }
    }
    let mut columns: Vec<PrinterColumn> = pref
        .get("additionalPrinterColumns")
        .and_then(|c| c.as_array())
        .map(|a| {
            a.iter()
                .map(|c| {
                    let json_path: String = c.get("jsonPath").and_then(|x| x.as_str()).unwrap_or_default().into();
                    // A column without a description is described by its JSONPath, as the table convertor of
                    // `staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor/tableconvertor.go` does.
                    let description = match c.get("description").and_then(|x| x.as_str()) {
                        Some(d) if !d.is_empty() => d.to_string(),
                        _ => format!("Custom resource definition column (in JSONPath format): {json_path}"),
                    };
                    PrinterColumn {
                        name: c.get("name").and_then(|x| x.as_str()).unwrap_or_default().into(),
                        type_: c.get("type").and_then(|x| x.as_str()).unwrap_or("string").into(),
                        format: c.get("format").and_then(|x| x.as_str()).unwrap_or_default().into(),
                        description,
                        priority: c.get("priority").and_then(|x| x.as_i64()).unwrap_or(0),
                        json_path,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    if columns.is_empty() {
        // `serveDefaultColumnsIfEmpty` (apiextensions-apiserver `pkg/apiserver/customresource_handler.go`): an Age
        // column described by ObjectMeta's `creationTimestamp` documentation.
        columns.push(PrinterColumn {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata".into(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        });
    }
    let strs = |p: &str| -> Vec<String> {
        crd.pointer(p)
            .and_then(|v| v.as_array())
            .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
            .unwrap_or_default()
    };
    let singular = match s("/spec/names/singular") {
        x if x.is_empty() => kind.to_lowercase(),
        x => x,
    };
    let list_kind = match s("/spec/names/listKind") {
        x if x.is_empty() => format!("{kind}List"),
        x => x,
    };
    Ok(ResourceType {
        group,
        versions: served.iter().filter_map(|v| v.get("name").and_then(|n| n.as_str()).map(String::from)).collect(),
        plural,
        singular,
        kind,
        list_kind,
        namespaced: s("/spec/scope") != "Cluster",
        short_names: strs("/spec/names/shortNames"),
        categories: strs("/spec/names/categories"),
        status: pref.pointer("/subresources/status").is_some(),
        scale: pref.pointer("/subresources/scale").map(|sc| ScalePaths {
            spec_replicas: sc.get("specReplicasPath").and_then(|x| x.as_str()).unwrap_or(".spec.replicas").into(),
            status_replicas: sc.get("statusReplicasPath").and_then(|x| x.as_str()).unwrap_or(".status.replicas").into(),
            label_selector: sc.get("labelSelectorPath").and_then(|x| x.as_str()).map(String::from),
        }),
        columns,
        validators,
        crd: true,
        create_only: false,
        extra_subresources: vec![],
    })
}

fn is_crd_type(rt: &ResourceType) -> bool {
    rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions"
}

/// After a CRD object is stored: serve (or re-serve) its resource.
pub fn after_write(server: &ApiServer, rt: &ResourceType, stored: &Value) {
    if !is_crd_type(rt) {
        return;
    }
    if stored.pointer("/metadata/deletionTimestamp").is_some() {
        return;
    }
    if let Ok(t) = resource_type(stored) {
        let mut st = server.inner.state.lock().unwrap();
        st.types.insert((t.group.clone(), t.plural.clone()), Arc::new(t));
    }
}

/// After a CRD object is removed: stop serving its resource and drop its objects.
pub fn after_remove(server: &ApiServer, rt: &ResourceType, removed: &Value) {
    if !is_crd_type(rt) {
        return;
    }
    if let Ok(t) = resource_type(removed) {
        let key = (t.group.clone(), t.plural.clone());
        let mut st = server.inner.state.lock().unwrap();
        st.types.remove(&key);
        st.data.remove(&key);
        st.cut_watchers(Some(&t.plural));
    }
}
