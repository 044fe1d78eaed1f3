//! managedFields bookkeeping and server-side apply (an approximation of structured-merge-diff).
//!
//! Field sets are sets of paths in fieldsV1 tokens (`f:spec`, `k:{"name":"etcd"}`, `v:"x"`, `.`).
//! Lists are associative when their field has a known merge key (see [`super::patch::list_merge_key`]) or, in a
//! custom resource, `x-kubernetes-list-type: map` (see [`Shape`]),
//! sets for primitive lists like `metadata.finalizers`, atomic otherwise.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::patch::list_merge_key;

/// A path in fieldsV1 tokens.
pub type FieldPath = Vec<String>;
/// A set of owned fields.
pub type FieldSet = BTreeSet<FieldPath>;

/// What the field manager knows of a kind's structure.
#[derive(Debug, Clone, Copy)]
pub enum Shape<'a> {
    /// A built-in kind: the merge keys and atomic structs of k8s.io/api.
    Builtin,
    /// A custom resource with its CRD's structural schema for the version, when known.
    Custom(Option<&'a Value>),
}

impl Shape<'_> {
    /// The schema of `field` under the fields `names` (list fields step into their items).
    fn schema_at(&self, names: &[String], field: &str) -> Option<&Value> {
        let Shape::Custom(Some(root)) = self else { return None };
        let mut cur = *root;
        for name in names.iter().map(String::as_str).chain(std::iter::once(field)) {
            if cur.get("type").and_then(|t| t.as_str()) == Some("array") {
                cur = cur.get("items")?;
            }
            cur = cur
                .get("properties")
                .and_then(|p| p.get(name))
                .or_else(|| cur.get("additionalProperties").filter(|a| a.is_object()))?;
        }
        Some(cur)
    }

    /// How a list field merges: `Some(Some(key))` associative, `Some(None)` a set, `None` atomic.
    // apiextensions: `x-kubernetes-list-type` `map` (keyed by `x-kubernetes-list-map-keys`), `set`, or atomic
    // (the default of a CRD's lists); object metadata keeps the built-in rules.
    fn list_key(&self, names: &[String], field: &str) -> Option<Option<String>> {
        if !matches!(self, Shape::Custom(Some(_))) || names.first().is_some_and(|n| n == "metadata") {
            return list_merge_key(names, field).map(|k| k.map(String::from));
        }
        let s = self.schema_at(names, field)?;
        match s.get("x-kubernetes-list-type").and_then(|t| t.as_str()) {
            Some("map") => Some(Some(s.pointer("/x-kubernetes-list-map-keys/0")?.as_str()?.to_string())),
            Some("set") => Some(None),
            _ => None,
        }
    }

    /// Whether a map is one leaf (`+structType=atomic`/`+mapType=atomic`, `x-kubernetes-map-type: atomic`).
    fn atomic_map(&self, names: &[String], field: &str) -> bool {
        match self {
            Shape::Builtin => atomic_builtin(names, field),
            Shape::Custom(_) => {
                self.schema_at(names, field).and_then(|s| s.get("x-kubernetes-map-type")).is_some_and(|t| t == "atomic")
            }
        }
    }
}

const IGNORED_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
];

/// Leaf paths set in `v` (ignoring server-owned metadata, `apiVersion` and `kind`), with a `.` entry for every
/// associative list item: the field set of an applied configuration (structured-merge-diff
/// `typed/tofieldset.go`), for a built-in kind (`builtin`: its atomic structs and maps are leaves) or a custom
/// resource (every map granular, as without `x-kubernetes-map-type`).
pub fn fields_of_kind(v: &Value, with_status: bool, shape: Shape) -> FieldSet {
    let mut out = FieldSet::new();
    walk_fields(v, with_status, shape, &mut out, &mut FieldSet::new());
    out
}

fn walk_fields(v: &Value, with_status: bool, shape: Shape, out: &mut FieldSet, nodes: &mut FieldSet) {
    let mut w = Walk { shape, out, nodes };
    if let Some(m) = v.as_object() {
        for (k, child) in m {
            if k == "apiVersion" || k == "kind" || (k == "status" && !with_status) {
                continue;
            }
            if k == "metadata" {
                if let Some(mm) = child.as_object() {
                    for (mk, mv) in mm {
                        if IGNORED_META.contains(&mk.as_str()) {
                            continue;
                        }
                        let mut p = vec!["f:metadata".to_string(), format!("f:{mk}")];
                        w.collect(mv, &mut p, &mut vec!["metadata".into()], mk);
                    }
                }
                continue;
            }
            let mut p = vec![format!("f:{k}")];
            w.collect(child, &mut p, &mut vec![], k);
        }
    }
}

/// Structs and maps of the built-in kinds that are atomic (`+structType=atomic` / `+mapType=atomic` in
/// k8s.io/api and apimachinery): `LabelSelector` (workload and PDB `spec.selector`), the Service and pod
/// `selector`/`nodeSelector` maps, `RoleRef`, `ObjectReference` (Event `involvedObject`/`regarding`/`related`).
/// structured-merge-diff records them as one leaf (`f:selector: {}`).
fn atomic_builtin(names: &[String], field: &str) -> bool {
    let parent = names.last().map(String::as_str).unwrap_or("");
    match field {
        "selector" => parent == "spec",
        "nodeSelector" | "roleRef" | "involvedObject" | "regarding" | "related" => true,
        _ => false,
    }
}

/// Items of associative lists that are atomic structs, owned as a whole (`k:{"uid":"…"}: {}`): an
/// `OwnerReference` (`+structType=atomic` in apimachinery `pkg/apis/meta/v1/types.go`), in every kind's metadata.
fn atomic_item(names: &[String], field: &str) -> bool {
    field == "ownerReferences" && names.len() == 1 && names[0] == "metadata"
}

struct Walk<'a> {
    shape: Shape<'a>,
    out: &'a mut FieldSet,
    nodes: &'a mut FieldSet,
}

impl Walk<'_> {
    fn collect(&mut self, v: &Value, path: &mut FieldPath, names: &mut Vec<String>, field: &str) {
        match v {
            Value::Object(_) if self.shape.atomic_map(names, field) => {
                self.out.insert(path.clone());
            }
            Value::Object(m) if !m.is_empty() => {
                self.nodes.insert(path.clone());
                names.push(field.to_string());
                for (k, child) in m {
                    path.push(format!("f:{k}"));
                    self.collect(child, path, names, k);
                    path.pop();
                }
                names.pop();
            }
            Value::Array(items) if !items.is_empty() => match self.shape.list_key(names, field) {
                Some(Some(mk)) if items.iter().all(|i| i.get(&mk).is_some()) => {
                    self.nodes.insert(path.clone());
                    for it in items {
                        path.push(key_token(it, &mk));
                        if atomic_item(names, field) {
                            self.out.insert(path.clone());
                            path.pop();
                            continue;
                        }
                        let mut dot = path.clone();
                        dot.push(".".into());
                        self.out.insert(dot);
                        names.push(field.to_string());
                        if let Some(m) = it.as_object() {
                            for (k, child) in m {
                                path.push(format!("f:{k}"));
                                self.collect(child, path, names, k);
                                path.pop();
                            }
                        }
                        names.pop();
                        path.pop();
                    }
                }
                Some(None) => {
                    self.nodes.insert(path.clone());
                    for it in items {
                        let mut p = path.clone();
                        p.push(format!("v:{it}"));
                        self.out.insert(p);
                    }
                }
                _ => {
                    self.out.insert(path.clone());
                }
            },
            _ => {
                self.out.insert(path.clone());
            }
        }
    }
}

fn key_token(item: &Value, mk: &str) -> String {
    let mut m = Map::new();
    m.insert(mk.into(), item.get(mk).cloned().unwrap_or(Value::Null));
    // Container and Service ports are keyed by port and protocol (`+listMapKey=containerPort`,
    // `+listMapKey=protocol` in k8s.io/api core/v1/types.go).
    // An absent protocol is its schema default, TCP.
    if mk == "containerPort" || mk == "port" {
        m.insert("protocol".into(), item.get("protocol").cloned().unwrap_or_else(|| "TCP".into()));
    }
    format!("k:{}", Value::Object(m))
}

/// Renders a field set as fieldsV1 JSON.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for p in set {
        let mut cur = &mut root;
        for tok in p {
            cur = cur.entry(tok.clone()).or_insert_with(|| json!({})).as_object_mut().unwrap();
        }
    }
    // structured-merge-diff `fieldpath/serialize.go`: the `.` marker says that a node is a member besides its
    // children; a member without children is written as `{}` alone (e.g. `f:spec` after /scale took
    // `f:spec.f:replicas` from it).
    fn collapse(m: &mut Map<String, Value>) {
        for child in m.values_mut() {
            if let Some(c) = child.as_object_mut() {
                collapse(c);
                if c.len() == 1 && c.contains_key(".") {
                    c.clear();
                }
            }
        }
    }
    collapse(&mut root);
    Value::Object(root)
}

/// Parses fieldsV1 JSON into a field set.
pub fn from_fields_v1(v: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    fn walk(v: &Value, path: &mut FieldPath, out: &mut FieldSet) {
        match v.as_object() {
            Some(m) if !m.is_empty() => {
                for (k, c) in m {
                    path.push(k.clone());
                    walk(c, path, out);
                    path.pop();
                }
            }
            _ => {
                if !path.is_empty() {
                    out.insert(path.clone());
                }
            }
        }
    }
    walk(v, &mut Vec::new(), &mut out);
    out
}

/// Whether a list element has the key values of a `k:` token. An absent `protocol` of a port is its schema
/// default, TCP, as in [`key_token`] (structured-merge-diff keys an element by its defaulted key fields).
fn has_keys(it: &Value, keys: &Map<String, Value>) -> bool {
    keys.iter().all(|(kk, kv)| match it.get(kk) {
        Some(v) => v == kv,
        None => kk == "protocol" && kv == "TCP",
    })
}

/// The value at a field path (None when absent). For `.` paths, the list element.
pub fn value_at<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = obj;
    for tok in path {
        if tok == "." {
            return Some(cur);
        }
        if let Some(f) = tok.strip_prefix("f:") {
            cur = cur.get(f)?;
        } else if let Some(k) = tok.strip_prefix("k:") {
            let keys: Map<String, Value> = serde_json::from_str(k).ok()?;
            cur = cur.as_array()?.iter().find(|it| has_keys(it, &keys))?;
        } else if let Some(v) = tok.strip_prefix("v:") {
            let want: Value = serde_json::from_str(v).ok()?;
            cur = cur.as_array()?.iter().find(|it| **it == want)?;
        } else {
            return None;
        }
    }
    Some(cur)
}

/// Removes the field at `path` from `obj` (a `.` path removes the whole list element).
pub fn remove_at(obj: &mut Value, path: &[String]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    if last == "." {
        if let Some((elem, list_path)) = parent_path.split_last() {
            remove_elem(obj, list_path, elem);
        }
        return;
    }
    if last.starts_with("v:") || last.starts_with("k:") {
        remove_elem(obj, parent_path, last);
        return;
    }
    let Some(parent) = value_at_mut(obj, parent_path) else {
        return;
    };
    if let (Some(m), Some(f)) = (parent.as_object_mut(), last.strip_prefix("f:")) {
        m.remove(f);
    }
}

/// Drops the maps and lists above a removed `path` that the removal left empty, like structured-merge-diff's
/// removing walker (`typed/remove.go`), which keeps a map or list only when something is left in it.
fn prune_emptied(obj: &mut Value, path: &[String]) {
    // A `.` path names a list element: its list is two tokens up.
    let mut end = path.len().saturating_sub(if path.last().is_some_and(|l| l == ".") { 2 } else { 1 });
    while end > 0 {
        let parent = &path[..end];
        let emptied = value_at_mut(obj, parent).is_some_and(|v| match v {
            Value::Object(m) => m.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => false,
        });
        if !emptied || !parent.last().is_some_and(|t| t.starts_with("f:")) {
            return;
        }
        remove_at(obj, parent);
        end -= 1;
    }
}

fn remove_elem(obj: &mut Value, list_path: &[String], elem: &str) {
    let Some(list) = value_at_mut(obj, list_path).and_then(|l| l.as_array_mut()) else {
        return;
    };
    if let Some(k) = elem.strip_prefix("k:") {
        if let Ok(keys) = serde_json::from_str::<Map<String, Value>>(k) {
            list.retain(|it| !has_keys(it, &keys));
        }
    } else if let Some(v) = elem.strip_prefix("v:")
        && let Ok(want) = serde_json::from_str::<Value>(v)
    {
        list.retain(|it| *it != want);
    }
}

fn value_at_mut<'a>(obj: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    let mut cur = obj;
    for tok in path {
        if let Some(f) = tok.strip_prefix("f:") {
            cur = cur.get_mut(f)?;
        } else if let Some(k) = tok.strip_prefix("k:") {
            let keys: Map<String, Value> = serde_json::from_str(k).ok()?;
            cur = cur.as_array_mut()?.iter_mut().find(|it| has_keys(it, &keys))?;
        } else {
            return None;
        }
    }
    Some(cur)
}

/// Merges an apply configuration into `target`: maps merge, associative lists merge by key,
/// primitive sets union, other lists and scalars are replaced.
pub fn merge_applied(target: &mut Value, applied: &Value, shape: Shape) {
    merge_rec(target, applied, &mut Vec::new(), "", shape)
}

fn merge_rec(target: &mut Value, applied: &Value, names: &mut Vec<String>, field: &str, shape: Shape) {
    match applied {
        Value::Object(am) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            if !field.is_empty() {
                names.push(field.to_string());
            }
            for (k, av) in am {
                let tm = target.as_object_mut().unwrap();
                if av.is_null() {
                    tm.remove(k);
                    continue;
                }
                let t = tm.entry(k.clone()).or_insert(Value::Null);
                merge_rec(t, av, names, k, shape);
            }
            if !field.is_empty() {
                names.pop();
            }
        }
        Value::Array(items) => match shape.list_key(names, field) {
            Some(Some(mk)) if target.is_array() && items.iter().all(|i| i.get(&mk).is_some()) => {
                let arr = target.as_array_mut().unwrap();
                names.push(field.to_string());
                for it in items {
                    match arr.iter_mut().find(|x| x.get(&mk) == it.get(&mk)) {
                        Some(x) => merge_rec(x, it, names, "", shape),
                        None => arr.push(it.clone()),
                    }
                }
                names.pop();
            }
            Some(None) if target.is_array() => {
                let arr = target.as_array_mut().unwrap();
                for it in items {
                    if !arr.contains(it) {
                        arr.push(it.clone());
                    }
                }
            }
            _ => *target = applied.clone(),
        },
        _ => *target = applied.clone(),
    }
}

/// One managedFields entry, parsed.
#[derive(Debug, Clone)]
pub struct Manager {
    /// Manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// apiVersion the fields were written with.
    pub api_version: String,
    /// `status` or empty.
    pub subresource: String,
    /// Owned fields.
    pub fields: FieldSet,
    /// Time of the last change.
    pub time: String,
}

/// Parses `metadata.managedFields`.
pub fn managers_of(obj: &Value) -> Vec<Manager> {
    obj.pointer("/metadata/managedFields")
        .and_then(|m| m.as_array())
        .map(|a| {
            a.iter()
                .map(|e| Manager {
                    manager: e.get("manager").and_then(|v| v.as_str()).unwrap_or_default().into(),
                    operation: e.get("operation").and_then(|v| v.as_str()).unwrap_or("Update").into(),
                    api_version: e.get("apiVersion").and_then(|v| v.as_str()).unwrap_or_default().into(),
                    subresource: e.get("subresource").and_then(|v| v.as_str()).unwrap_or_default().into(),
                    fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
                    time: e.get("time").and_then(|v| v.as_str()).unwrap_or_default().into(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Writes managers back into `metadata.managedFields` (dropping empty ones).
pub fn set_managers(obj: &mut Value, managers: &[Manager]) {
    // Sorted by operation (Apply before Update), time, manager and subresource, like apiserver
    // `managedfields/internal/managedfields.go` `sortEncodedManagedFields`.
    let mut sorted: Vec<&Manager> = managers.iter().collect();
    sorted.sort_by(|a, b| {
        (a.operation.as_str(), a.time.as_str(), a.manager.as_str(), a.subresource.as_str()).cmp(&(
            b.operation.as_str(),
            b.time.as_str(),
            b.manager.as_str(),
            b.subresource.as_str(),
        ))
    });
    let arr: Vec<Value> = sorted
        .into_iter()
        .filter(|m| !m.fields.is_empty())
        .map(|m| {
            let mut e = json!({
                "manager": m.manager, "operation": m.operation, "apiVersion": m.api_version,
                "time": m.time, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(&m.fields),
            });
            if !m.subresource.is_empty() {
                e["subresource"] = m.subresource.clone().into();
            }
            // `time` is a pointer: entries of the scale handler have none.
            if m.time.is_empty() {
                e.as_object_mut().unwrap().remove("time");
            }
            e
        })
        .collect();
    if arr.is_empty() {
        if let Some(m) = obj.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            m.remove("managedFields");
        }
    } else {
        obj["metadata"]["managedFields"] = Value::Array(arr);
    }
}

/// Records an Update by `manager`, like structured-merge-diff `merge/update.go` (`Updater.Update`): the manager
/// gains the fields that were added or modified between `old` and `new`, every other manager loses them, and
/// fields removed from the object leave every manager. A map, list or list item that did not exist before
/// (in `old` or in `zero`, the Go zero value of the kind, whose non-pointer structs always exist) is itself
/// added (`typed/compare.go` inserts non-leaf paths into `Added`), which fieldsV1 shows as a `".": {}` entry.
#[allow(clippy::too_many_arguments)]
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    subresource: &str,
    now: &str,
    zero: &Value,
    shape: Shape,
) {
    let status = subresource == "status";
    let mut new_fields = FieldSet::new();
    let mut nodes = FieldSet::new();
    walk_fields(new, status, shape, &mut new_fields, &mut nodes);
    if status {
        // A status write records status and metadata (labels/annotations), never spec.
        new_fields.retain(|p| p[0] == "f:status" || p[0] == "f:metadata");
        nodes.retain(|p| p[0] == "f:status" || p[0] == "f:metadata");
    }
    let existed = |p: &[String]| old.and_then(|o| value_at(o, p)).is_some() || value_at(zero, p).is_some();
    let mut changed: FieldSet = new_fields
        .into_iter()
        .filter(|p| {
            if p.last().is_some_and(|l| l == ".") {
                !existed(&p[..p.len() - 1])
            } else {
                // Against the zero value where the old object lacks the field: an empty struct or null time
                // that the Go type always serialises is no change.
                let before = old.and_then(|o| value_at(o, p)).or_else(|| value_at(zero, p));
                before != value_at(new, p)
            }
        })
        .collect();
    for n in nodes {
        if !existed(&n) {
            let mut d = n;
            d.push(".".into());
            changed.insert(d);
        }
    }
    let mut managers = managers_of(old.unwrap_or(&Value::Null));
    for m in managers.iter_mut() {
        m.fields.retain(|p| !changed.contains(p) && value_at(new, p).is_some());
    }
    if !changed.is_empty() {
        match managers
            .iter_mut()
            .find(|m| m.manager == manager && m.operation == "Update" && m.subresource == subresource)
        {
            Some(m) => {
                m.fields.extend(changed);
                m.time = now.into();
                m.api_version = api_version.into();
            }
            None => managers.push(Manager {
                manager: manager.into(),
                operation: "Update".into(),
                api_version: api_version.into(),
                subresource: subresource.into(),
                fields: changed,
                time: now.into(),
            }),
        }
    }
    set_managers(new, &managers);
}

/// A field owned by another manager with a different value.
#[derive(Debug, Clone)]
pub struct Conflict {
    /// The other manager.
    pub manager: String,
    /// Its apiVersion.
    pub api_version: String,
    /// The field, printed like `.spec.replicas`.
    pub field: String,
    /// The subresource the other manager wrote through (`scale`), or empty.
    pub subresource: String,
}

/// Prints a field path like structured-merge-diff: `.spec.containers[name="etcd"].image`.
pub fn print_path(p: &[String]) -> String {
    let mut s = String::new();
    for tok in p {
        if let Some(f) = tok.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = tok.strip_prefix("k:") {
            let keys: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            let inner: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
            s.push_str(&format!("[{}]", inner.join(",")));
        } else if let Some(v) = tok.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        }
    }
    s
}

/// Server-side apply of `applied` by `manager` onto `current` (None = create). Returns the new object or
/// the conflicts (when not forced).
#[allow(clippy::too_many_arguments)]
pub fn apply(
    current: Option<&Value>,
    applied: &Value,
    manager: &str,
    api_version: &str,
    force: bool,
    now: &str,
    subresource: &str,
    shape: Shape,
) -> Result<Value, Vec<Conflict>> {
    let new_set = fields_of_kind(applied, subresource == "status", shape);
    let mine = |m: &Manager| m.manager == manager && m.operation == "Apply" && m.subresource == subresource;
    let mut managers = managers_of(current.unwrap_or(&Value::Null));
    let base = current.cloned().unwrap_or_else(|| json!({}));
    let mut conflicts = Vec::new();
    for m in managers.iter_mut().filter(|m| !mine(m)) {
        let clash: Vec<FieldPath> = m
            .fields
            .iter()
            // A map or list item's own entry (`.`) only changes when it is added or removed (structured-merge-diff
            // `typed/compare.go` never reports it modified), so it never conflicts by itself.
            .filter(|p| p.last().is_none_or(|l| l != "."))
            .filter(|p| new_set.contains(*p) && value_at(&base, p) != value_at(applied, p))
            // An empty map merges into a live map without changing it, so it conflicts with nothing
            // (structured-merge-diff compares the merged object with the live one).
            .filter(|p| {
                !(value_at(applied, p).is_some_and(|v| v.as_object().is_some_and(|m| m.is_empty()))
                    && value_at(&base, p).is_some_and(|v| v.is_object()))
            })
            .cloned()
            .collect();
        if force {
            m.fields.retain(|p| !clash.contains(p));
        } else {
            // structured-merge-diff names the version only of Update managers (`merge/conflict.go`).
            conflicts.extend(clash.iter().map(|p| Conflict {
                manager: m.manager.clone(),
                api_version: if m.operation == "Apply" { String::new() } else { m.api_version.clone() },
                field: print_path(p),
                subresource: m.subresource.clone(),
            }));
        }
    }
    if !conflicts.is_empty() {
        return Err(conflicts);
    }
    let mut obj = base;
    // Fields this manager applied before and no longer applies are removed unless someone else owns them.
    if let Some(prev) = managers.iter().find(|m| mine(m)) {
        let others: FieldSet = managers.iter().filter(|m| !mine(m)).flat_map(|m| m.fields.iter().cloned()).collect();
        let mut gone: Vec<&FieldPath> =
            prev.fields.iter().filter(|p| !new_set.contains(*p) && !others.contains(*p)).collect();
        gone.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in gone {
            let elem_owned_elsewhere = p.last().is_some_and(|l| l == ".")
                && others.iter().any(|o| o.len() > p.len() - 1 && o[..p.len() - 1] == p[..p.len() - 1]);
            if !elem_owned_elsewhere {
                remove_at(&mut obj, p);
                prune_emptied(&mut obj, p);
            }
        }
    }
    merge_applied(&mut obj, applied, shape);
    // Shared ownership: other managers keep fields applied with the same value.
    match managers.iter_mut().find(|m| mine(m)) {
        Some(m) => {
            m.fields = new_set;
            m.time = now.into();
            m.api_version = api_version.into();
        }
        None => managers.push(Manager {
            manager: manager.into(),
            operation: "Apply".into(),
            api_version: api_version.into(),
            subresource: subresource.into(),
            fields: new_set,
            time: now.into(),
        }),
    }
    set_managers(&mut obj, &managers);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_removes_fields_dropped_from_config_and_detects_conflicts() {
        let cfg1 = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","labels":{"a":"1","b":"2"}},"data":{"x":"1","y":"2"}});
        let o1 = apply(None, &cfg1, "mgr", "v1", false, "t", "", Shape::Builtin).unwrap();
        let cfg2 =
            json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","labels":{"a":"1"}},"data":{"x":"1"}});
        let o2 = apply(Some(&o1), &cfg2, "mgr", "v1", false, "t", "", Shape::Builtin).unwrap();
        assert_eq!(o2["data"], json!({"x":"1"}));
        assert_eq!(o2["metadata"]["labels"], json!({"a":"1"}));
        let cfg3 = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"x":"other"}});
        let err = apply(Some(&o2), &cfg3, "other", "v1", false, "t", "", Shape::Builtin).unwrap_err();
        assert_eq!(err[0].field, ".data.x");
        let o3 = apply(Some(&o2), &cfg3, "other", "v1", true, "t", "", Shape::Builtin).unwrap();
        assert_eq!(o3["data"]["x"], "other");
    }

    #[test]
    fn updates_own_added_maps_and_list_items_but_not_zero_value_structs() {
        // What kube-apiserver v1.36 records for `kubectl create` of such a pod and custom resource.
        let zero = json!({"metadata": {}, "spec": {"containers": null}, "status": {}});
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "protocol": "TCP"}]}],
                     "nodeSelector": {"k": "v"}}});
        record_update(None, &mut pod, "kubectl-create", "v1", "", "t", &zero, Shape::Builtin);
        let f = &pod["metadata"]["managedFields"][0]["fieldsV1"];
        assert_eq!(f["f:metadata"]["f:labels"], json!({".": {}, "f:a": {}}));
        assert!(f["f:spec"].get(".").is_none(), "{f}");
        assert!(f["f:spec"]["f:containers"].get(".").is_none(), "{f}");
        let c = &f["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"];
        assert!(c.get(".").is_some(), "{f}");
        assert_eq!(
            c["f:ports"],
            json!({".": {}, "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:protocol": {}}})
        );
        assert_eq!(f["f:spec"]["f:nodeSelector"], json!({}));
        let mut cr = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "x"}, "spec": {"replicas": 1, "backup": {"port": 1}}});
        record_update(None, &mut cr, "m", "x/v1", "", "t", &json!({}), Shape::Custom(None));
        let f = &cr["metadata"]["managedFields"][0]["fieldsV1"];
        assert_eq!(f["f:spec"], json!({".": {}, "f:backup": {".": {}, "f:port": {}}, "f:replicas": {}}));
    }

    #[test]
    fn owner_references_are_owned_as_whole_items() {
        // kube-apiserver v1.36 records an OwnerReference as one leaf under its uid key.
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u1", "controller": true}]}});
        record_update(None, &mut cm, "m", "v1", "", "t", &json!({"metadata": {}}), Shape::Builtin);
        let f = &cm["metadata"]["managedFields"][0]["fieldsV1"];
        assert_eq!(f["f:metadata"]["f:ownerReferences"], json!({".": {}, "k:{\"uid\":\"u1\"}": {}}), "{f}");
    }

    #[test]
    fn fields_v1_roundtrip_with_keyed_lists() {
        let o = json!({"spec":{"template":{"spec":{"containers":[{"name":"etcd","image":"x"}]}}}});
        let s = fields_of_kind(&o, false, Shape::Builtin);
        let v = to_fields_v1(&s);
        assert!(v.pointer("/f:spec/f:template/f:spec/f:containers/k:{\"name\":\"etcd\"}/f:image").is_some());
        assert_eq!(from_fields_v1(&v), s);
    }
}
