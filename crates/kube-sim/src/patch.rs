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
    // kubernetes staging/src/k8s.io/apimachinery/pkg/util/strategicpatch/patch.go `mergePatchIntoOriginal`: a
    // `$setElementOrder/<field>` list orders the merged list once more, after the field's own merge: the items
    // it names in its order, the other items in their live order (`normalizeElementOrder` with the directive
    // as the patch order and the live list as the server order). The live order is taken before the merge.
    let mut set_orders: Vec<(String, Vec<Value>, Vec<Value>)> = Vec::new();
    for (k, pv) in pobj {
        let Some(field) = k.strip_prefix("$setElementOrder/") else { continue };
        let (Some(key), Some(directive)) = (list_merge_key(path, field), pv.as_array()) else { continue };
        let order: Vec<Value> = directive.iter().map(|x| element_key(x, key)).collect();
        if let Some(items) = pobj.get(field).and_then(|l| l.as_array()) {
            check_patch_order(items, directive, &order, key)?;
        }
        let live: Vec<Value> = target
            .get(field)
            .and_then(|l| l.as_array())
            .map(|l| l.iter().map(|x| element_key(x, key)).collect())
            .unwrap_or_default();
        set_orders.push((field.to_string(), order, live));
    }
    for (k, pv) in pobj {
        if k == "$retainKeys" || k == "$patch" || k.starts_with("$setElementOrder/") {
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
    for (field, order, live) in set_orders {
        let key = list_merge_key(path, &field).flatten();
        if let Some(list) = target.get_mut(&field).and_then(|l| l.as_array_mut()) {
            *list = order_elements(std::mem::take(list), |x| element_key(x, key), &order, &live);
        }
    }
    Ok(())
}

/// kubernetes staging/src/k8s.io/apimachinery/pkg/util/strategicpatch/patch.go
/// `validatePatchWithSetOrderList`: the patch list's items (without those it deletes and directive markers)
/// must come in the order the `$setElementOrder` list gives them; otherwise a plain error that prints both lists
/// with Go's `%v`.
fn check_patch_order(items: &[Value], directive: &[Value], order: &[Value], key: Option<&str>) -> Result<(), String> {
    let kept: Vec<&Value> =
        items.iter().filter(|i| key.is_none() || i.get("$patch").and_then(|p| p.as_str()) != Some("delete")).collect();
    let (mut pi, mut si) = (0, 0);
    while pi < kept.len() && si < order.len() {
        if kept[pi].get("$patch").is_some() {
            pi += 1;
            continue;
        }
        if element_key(kept[pi], key) == order[si] {
            pi += 1;
        }
        si += 1;
    }
    if pi < kept.len() && si >= order.len() {
        return Err(format!(
            "The order in patch list:\n{}\n doesn't match $setElementOrder list:\n{}\n",
            go_format(&Value::Array(items.to_vec())),
            go_format(&Value::Array(directive.to_vec()))
        ));
    }
    Ok(())
}

/// A decoded JSON value as Go's `fmt` `%v` prints it (maps with sorted keys, `<nil>` for null).
fn go_format(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_format).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            format!("map[{}]", keys.iter().map(|k| format!("{k}:{}", go_format(&m[*k]))).collect::<Vec<_>>().join(" "))
        }
    }
}

/// The identity of a list element: its merge key's value, or the element itself in a list of primitives.
fn element_key(x: &Value, merge_key: Option<&str>) -> Value {
    match merge_key {
        Some(mk) => x.get(mk).cloned().unwrap_or(Value::Null),
        None => x.clone(),
    }
}

/// The order of a merged list, as `normalizeElementOrder` / `mergeSortedSlice` of
/// `staging/src/k8s.io/apimachinery/pkg/util/strategicpatch/patch.go` make it: the patch's items in patch
/// order, the server-only items in their old order, interleaved where both were in the old list; a new item
/// goes before a server-only item.
fn normalize_element_order(arr: Vec<Value>, mk: &str, patch_order: &[Value], server_order: &[Value]) -> Vec<Value> {
    order_elements(arr, |x| element_key(x, Some(mk)), patch_order, server_order)
}

/// [`normalize_element_order`] over element identities given by `key`.
fn order_elements(
    arr: Vec<Value>,
    key: impl Fn(&Value) -> Value,
    patch_order: &[Value],
    server_order: &[Value],
) -> Vec<Value> {
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
    fn set_element_order_orders_the_merged_list() {
        let mut t =
            json!({"spec":{"containers":[{"name":"a","image":"1"},{"name":"b","image":"1"},{"name":"c","image":"1"}]}});
        // kubectl's client-side apply: the whole wanted order, only the changed item.
        let p = json!({"spec":{"$setElementOrder/containers":[{"name":"c"},{"name":"a"},{"name":"d"}],
            "containers":[{"name":"a","image":"2"},{"name":"d","image":"1"}]}});
        strategic_merge(&mut t, &p).unwrap();
        let names: Vec<&str> =
            t["spec"]["containers"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        // `mergeSortedSlice`: the server-only `b` stays before `c`, which follows it in the live list.
        assert_eq!(names, ["b", "c", "a", "d"]);
        assert_eq!(t["spec"]["containers"][2]["image"], "2");
        assert!(t["spec"].get("$setElementOrder/containers").is_none());
    }

    #[test]
    fn set_element_order_refuses_a_patch_list_in_another_order() {
        let mut t = json!({"metadata":{"finalizers":["a"]},"spec":{"containers":[{"name":"a"}]}});
        let p = json!({"spec":{"$setElementOrder/containers":[{"name":"b"},{"name":"a"}],
            "containers":[{"name":"a","env":[{"name":"X","value":"1"}]},{"name":"b"}]}});
        let e = strategic_merge(&mut t, &p).unwrap_err();
        assert_eq!(
            e,
            "The order in patch list:\n[map[env:[map[name:X value:1]] name:a] map[name:b]]\n doesn't match $setElementOrder list:\n[map[name:b] map[name:a]]\n"
        );
        let p = json!({"metadata":{"$setElementOrder/finalizers":["b","a"],"finalizers":["a","b"]}});
        assert!(strategic_merge(&mut t, &p).is_err());
        // Deleted items do not count.
        let p = json!({"spec":{"$setElementOrder/containers":[{"name":"b"}],
            "containers":[{"name":"a","$patch":"delete"},{"name":"b","image":"x"}]}});
        strategic_merge(&mut t, &p).unwrap();
        assert_eq!(t["spec"]["containers"], json!([{"name":"b","image":"x"}]));
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
