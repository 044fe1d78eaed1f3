//! Targeted patches: every write druidctl makes changes only the fields it means to change, so fields it does
//! not model are never dropped (no read-modify-write of partial structs).

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

/// Field manager druidctl uses for server-side apply and patches.
pub const FIELD_MANAGER: &str = "druidctl";

/// A JSON merge patch that sets `key=value` in `metadata.annotations` and leaves the rest alone.
pub fn set_annotation(key: &str, value: &str) -> Patch<Value> {
    Patch::Merge(json!({ "metadata": { "annotations": { key: value } } }))
}

/// A JSON merge patch that removes the annotations `keys` (absent keys are fine).
pub fn remove_annotations(keys: &[&str]) -> Patch<Value> {
    let map: serde_json::Map<String, Value> = keys.iter().map(|k| ((*k).to_string(), Value::Null)).collect();
    Patch::Merge(json!({ "metadata": { "annotations": map } }))
}

/// A JSON merge patch that sets `key=value` in `metadata.labels`.
pub fn set_label(key: &str, value: &str) -> Patch<Value> {
    Patch::Merge(json!({ "metadata": { "labels": { key: value } } }))
}

/// Patch parameters naming druidctl as the field manager.
pub fn params() -> PatchParams {
    PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }
}

/// Server-side apply parameters (force: druidctl owns the objects it installs).
pub fn apply_params(dry_run: bool) -> PatchParams {
    let mut p = PatchParams::apply(FIELD_MANAGER).force();
    p.dry_run = dry_run;
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_annotations_sends_nulls_only_for_the_named_keys() {
        let Patch::Merge(v) = remove_annotations(&["a", "b"]) else { panic!() };
        assert_eq!(v, json!({"metadata": {"annotations": {"a": null, "b": null}}}));
    }

    #[test]
    fn set_annotation_touches_nothing_else() {
        let Patch::Merge(v) = set_annotation("k", "v") else { panic!() };
        assert_eq!(v, json!({"metadata": {"annotations": {"k": "v"}}}));
    }
}
