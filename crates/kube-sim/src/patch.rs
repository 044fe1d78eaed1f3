//! Patches: JSON merge patch (RFC 7386), JSON patch (RFC 6902, incl. `test`) and an approximation of
//! strategic merge patch driven by the `patchMergeKey`s of well-known fields.

use serde_json::{Map, Value};

/// Merge key of a list field for strategic merge / server-side apply, by field name and parent path.
/// Returns `Some(None)` for a merged list of primitives (set semantics), `None` for atomic lists.
pub fn list_merge_key(path: &[String], field: &str) -> Option<Option<&'static str>> {
    let in_container = path.iter().any(|p| p == "containers" || p == "initContainers" || p == "ephemeralContainers");
    let parent = path.last().map(String::as_str).unwrap_or("");
    Some(Some(match field {
        "containers" | "initContainers" | "ephemeralContainers" | "volumes" | "imagePullSecrets" => "name",
        "env" if in_container => "name",
        "ports" if in_container => "containerPort",
        "ports" if parent == "spec" => "port",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "hostAliases" => "ip",
        "topologySpreadConstraints" => "topologyKey",
        "finalizers" if parent == "metadata" => return Some(None),
        "managedFields" => return None,
        _ => return None,
    }))
}

/// Applies a strategic merge patch (approximation of k8s.io/apimachinery strategicpatch).
pub fn strategic_merge(target: &mut Value, patch: &Value) -> Result<(), String> {
    smp_object(target, patch, &mut Vec::new())
}

fn smp_object(target: &mut Value, patch: &Value, path: &mut Vec<String>) -> Result<(), String> {
    let Some(pobj) = patch.as_object() else {
        *target = patch.clone();
        return Ok(());
    };
    if pobj.get("$patch").and_then(|p| p.as_str()) == Some("replace") {
        let mut p = pobj.clone();
        p.remove("$patch");
        *target = Value::Object(p);
        return Ok(());
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    // $retainKeys: drop keys not listed.
    if let Some(keep) = pobj.get("$retainKeys").and_then(|k| k.as_array()) {
        let keep: Vec<&str> = keep.iter().filter_map(|k| k.as_str()).collect();
        target.as_object_mut().unwrap().retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, pv) in pobj {
        if k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if let Some(field) = k.strip_prefix("$setElementOrder/") {
            let _ = field; // ordering is advisory; lists keep server order plus appended items
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(list), Some(del)) = (target.get_mut(field).and_then(|l| l.as_array_mut()), pv.as_array()) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        let tobj = target.as_object_mut().unwrap();
        if pv.is_null() {
            tobj.remove(k);
            continue;
        }
        match pv {
            Value::Object(_) => {
                if pv.get("$patch").and_then(|p| p.as_str()) == Some("delete") {
                    tobj.remove(k);
                    continue;
                }
                let entry = tobj.entry(k.clone()).or_insert(Value::Object(Map::new()));
                path.push(k.clone());
                smp_object(entry, pv, path)?;
                path.pop();
            }
            Value::Array(items) => {
                let key = list_merge_key(path, k);
                let cur = tobj.entry(k.clone()).or_insert(Value::Array(vec![]));
                if !cur.is_array() {
                    *cur = Value::Array(vec![]);
                }
                match key {
                    None => *cur = Value::Array(items.iter().filter(|i| !is_directive(i)).cloned().collect()),
                    Some(None) => {
                        let arr = cur.as_array_mut().unwrap();
                        for it in items {
                            if !arr.contains(it) {
                                arr.push(it.clone());
                            }
                        }
                    }
                    Some(Some(mk)) => {
                        if items.iter().any(|i| i.get("$patch").and_then(|p| p.as_str()) == Some("replace")) {
                            *cur = Value::Array(items.iter().filter(|i| !is_directive(i)).cloned().collect());
                            continue;
                        }
                        path.push(k.clone());
                        let arr = cur.as_array_mut().unwrap();
                        let server_order: Vec<Value> =
                            arr.iter().map(|x| x.get(mk).cloned().unwrap_or(Value::Null)).collect();
                        for it in items {
                            let kv = it.get(mk).cloned().unwrap_or(Value::Null);
                            let pos = arr.iter().position(|x| x.get(mk) == Some(&kv) && !kv.is_null());
                            if it.get("$patch").and_then(|p| p.as_str()) == Some("delete") {
                                if let Some(p) = pos {
                                    arr.remove(p);
                                }
                                continue;
                            }
                            match pos {
                                Some(p) => smp_object(&mut arr[p], it, path)?,
                                None => {
                                    let mut fresh = Value::Object(Map::new());
                                    smp_object(&mut fresh, it, path)?;
                                    arr.push(fresh);
                                }
                            }
                        }
                        let patch_order: Vec<Value> = items
                            .iter()
                            .filter(|i| !is_directive(i) && i.get("$patch").is_none())
                            .filter_map(|i| i.get(mk).cloned())
                            .collect();
                        *arr = normalize_element_order(std::mem::take(arr), mk, &patch_order, &server_order);
                        path.pop();
                    }
                }
            }
            _ => {
                tobj.insert(k.clone(), pv.clone());
            }
        }
    }
    Ok(())
}

/// The order of a merged list, as `normalizeElementOrder` / `mergeSortedSlice` of
/// `staging/src/k8s.io/apimachinery/pkg/util/strategicpatch/patch.go` make it: the patch's items in patch
/// order, the server-only items in their old order, interleaved where both were in the old list; a new item
/// goes before a server-only item.
fn normalize_element_order(arr: Vec<Value>, mk: &str, patch_order: &[Value], server_order: &[Value]) -> Vec<Value> {
    let key = |x: &Value| x.get(mk).cloned().unwrap_or(Value::Null);
    let in_patch = |x: &Value| patch_order.contains(&key(x));
    let mut right: Vec<Value> = Vec::new();
    for k in patch_order {
        if let Some(x) = arr.iter().find(|x| key(x) == *k && !right.iter().any(|r| key(r) == *k)) {
            right.push(x.clone());
        }
    }
    let left: Vec<Value> = arr.iter().filter(|x| !in_patch(x)).cloned().collect();
    let index = |x: &Value| server_order.iter().position(|s| *s == key(x) && !s.is_null());
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(left.len() + right.len());
    while i < left.len() || j < right.len() {
        if i >= left.len() {
            out.push(right[j].clone());
            j += 1;
        } else if j >= right.len() {
            out.push(left[i].clone());
            i += 1;
        } else {
            match (index(&left[i]), index(&right[j])) {
                (Some(l), Some(r)) if l < r => {
                    out.push(left[i].clone());
                    i += 1;
                }
                _ => {
                    out.push(right[j].clone());
                    j += 1;
                }
            }
        }
    }
    out
}

fn is_directive(v: &Value) -> bool {
    v.as_object().is_some_and(|o| o.keys().all(|k| k.starts_with('$')))
}

/// RFC 7386 merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// RFC 6902 JSON patch; errors carry kube-apiserver-like text.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let p: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| format!("error decoding patch: {e}"))?;
    json_patch::patch(target, &p).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merge_merges_containers_by_name_and_env_by_name() {
        let mut t = json!({"spec":{"template":{"spec":{"containers":[
            {"name":"etcd","image":"a","env":[{"name":"X","value":"1"}]},
            {"name":"backup","image":"b"}]}}}});
        let p = json!({"spec":{"template":{"spec":{"containers":[
            {"name":"etcd","image":"a2","env":[{"name":"Y","value":"2"}]}]}}}});
        strategic_merge(&mut t, &p).unwrap();
        let cs = &t["spec"]["template"]["spec"]["containers"];
        assert_eq!(cs.as_array().unwrap().len(), 2);
        assert_eq!(cs[0]["image"], "a2");
        assert_eq!(cs[0]["env"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn strategic_merge_delete_directive_and_null() {
        let mut t = json!({"metadata":{"labels":{"a":"1","b":"2"},"finalizers":["x"]},
            "spec":{"volumes":[{"name":"v1"},{"name":"v2"}]}});
        let p = json!({"metadata":{"labels":{"a":null},"finalizers":["y"]},
            "spec":{"volumes":[{"name":"v1","$patch":"delete"}]}});
        strategic_merge(&mut t, &p).unwrap();
        assert_eq!(t["metadata"]["labels"], json!({"b":"2"}));
        assert_eq!(t["metadata"]["finalizers"], json!(["x", "y"]));
        assert_eq!(t["spec"]["volumes"], json!([{"name":"v2"}]));
    }
}
