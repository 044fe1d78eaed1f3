//! Pruning of unknown fields and structural defaulting, in kube-apiserver's order: prune what the
//! schema does not specify, apply `default`s top-down (a defaulted value is itself defaulted), and
//! drop `null`s of non-nullable fields that have no default.

use serde_json::Value;

use super::schema::Schema;

/// Fields kept on an object whose schema is a resource root (the CR itself or an
/// `x-kubernetes-embedded-resource`).
const RESOURCE_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Removes fields the schema does not specify (unless `x-kubernetes-preserve-unknown-fields`).
pub(crate) fn prune(v: &mut Value, s: &Schema, resource_root: bool) {
    match v {
        Value::Object(map) => {
            if let Some(ap) = &s.additional {
                for (k, child) in map.iter_mut() {
                    if let Some(ps) = s.properties.get(k) {
                        prune(child, ps, ps.embedded_resource);
                    } else {
                        prune(child, ap, ap.embedded_resource);
                    }
                }
                return;
            }
            if !s.preserve_unknown {
                map.retain(|k, _| {
                    s.properties.contains_key(k) || (resource_root && RESOURCE_FIELDS.contains(&k.as_str()))
                });
            }
            for (k, child) in map.iter_mut() {
                // metadata of a resource is ObjectMeta, not the (empty) schema declared for it
                if resource_root && RESOURCE_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(ps) = s.properties.get(k) {
                    prune(child, ps, ps.embedded_resource);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = &s.items {
                for item in items {
                    prune(item, is, is.embedded_resource);
                }
            }
        }
        _ => {}
    }
}

fn is_non_nullable_null(v: &Value, s: &Schema) -> bool {
    v.is_null() && !s.nullable
}

/// Applies `default`s: a missing property (or a `null` in a non-nullable one) gets its default.
pub(crate) fn apply_defaults(v: &mut Value, s: &Schema) {
    match v {
        Value::Object(map) => {
            for (k, ps) in &s.properties {
                let Some(def) = &ps.default else { continue };
                match map.get(k) {
                    None => {
                        map.insert(k.clone(), def.clone());
                    }
                    Some(cur) if is_non_nullable_null(cur, ps) => {
                        map.insert(k.clone(), def.clone());
                    }
                    _ => {}
                }
            }
            for (k, child) in map.iter_mut() {
                if let Some(ps) = s.properties.get(k) {
                    apply_defaults(child, ps);
                } else if let Some(ap) = &s.additional {
                    if let Some(def) = &ap.default
                        && is_non_nullable_null(child, ap)
                    {
                        *child = def.clone();
                    }
                    apply_defaults(child, ap);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = &s.items {
                for item in items.iter_mut() {
                    if let Some(def) = &is.default
                        && is_non_nullable_null(item, is)
                    {
                        *item = def.clone();
                    }
                    apply_defaults(item, is);
                }
            }
        }
        _ => {}
    }
}

/// Drops `null` values of non-nullable fields without default (kube-apiserver does this after
/// defaulting so that `null` means "unset").
pub(crate) fn prune_non_nullable_nulls(v: &mut Value, s: &Schema) {
    match v {
        Value::Object(map) => {
            let mut drop = Vec::new();
            for (k, child) in map.iter() {
                let cs = s.properties.get(k).or(s.additional.as_deref());
                if let Some(cs) = cs
                    && child.is_null()
                    && !cs.nullable
                    && cs.default.is_none()
                {
                    drop.push(k.clone());
                }
            }
            for k in drop {
                map.remove(&k);
            }
            for (k, child) in map.iter_mut() {
                if let Some(cs) = s.properties.get(k).or(s.additional.as_deref()) {
                    prune_non_nullable_nulls(child, cs);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = &s.items {
                for item in items {
                    prune_non_nullable_nulls(item, is);
                }
            }
        }
        _ => {}
    }
}

/// Prune, default, then drop non-nullable nulls: what a create/update does before validation.
pub(crate) fn default_and_prune(v: &mut Value, root: &Schema) {
    prune(v, root, true);
    apply_defaults(v, root);
    // A default may carry fields the schema does not know (kube prunes defaults at CRD creation).
    prune(v, root, true);
    prune_non_nullable_nulls(v, root);
}
