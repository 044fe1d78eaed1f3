//! OpenAPI value validation like kube-openapi's schema validator (as kube-apiserver converts its
//! results to field errors), plus the checks kube-apiserver adds for structural schemas:
//! embedded resources and `x-kubernetes-list-type` set/map uniqueness.
//!
//! Update ratcheting: a subtree whose value is unchanged from the correlated old value is not
//! re-validated (kube's `CRDValidationRatcheting`, on by default since 1.30).

use serde_json::Value;

use super::FieldError;
use super::errors::{self as fe, Bad, Seg, field_path, go_float, go_quote, openapi_path};
use super::formats;
use super::schema::Schema;

/// Errors of one walk, in kube-apiserver's order of reporting.
#[derive(Default)]
pub(crate) struct Findings {
    /// kube-openapi schema validation
    pub schema: Vec<FieldError>,
    /// embedded resource checks
    pub embedded: Vec<FieldError>,
    /// list-type set/map uniqueness
    pub lists: Vec<FieldError>,
}

/// Validates `v` against `s`; `old` is the correlated old value on update (for ratcheting).
pub(crate) fn validate(s: &Schema, v: &Value, old: Option<&Value>, path: &mut Vec<Seg>, out: &mut Findings) {
    if !path.is_empty() && old == Some(v) {
        return;
    }
    let name = openapi_path(path);
    if v.is_null() {
        if !s.nullable && (s.ty.is_some() || s.int_or_string) {
            out.schema.push(type_error(&name, s, "null"));
        }
        return;
    }
    let actual = json_type(v);
    if !type_matches(s, v, actual) {
        // a supported format on a non-string value is reported against the format (kube-openapi)
        if let Some(format) = s.format.as_deref().filter(|f| formats::is_supported(f))
            && !v.is_string()
            && !v.is_array()
        {
            let go_format = match actual {
                "integer" => "int64",
                "number" => "double",
                _ => "",
            };
            out.schema.push(fe::type_invalid(
                name.clone(),
                Bad::Str(go_format.to_string()),
                &format!("{name} in body must be of type {format}: {}", go_quote(go_format)),
            ));
            return;
        }
        out.schema.push(type_error(&name, s, actual));
        return;
    }
    props_validators(s, v, &name, out);
    match v {
        Value::String(st) => string_checks(s, st, v, &name, out),
        Value::Number(_) => number_checks(s, v, &name, out),
        _ => {}
    }
    if let Value::Array(items) = v {
        array_checks(s, items, old, path, &name, out);
    }
    if let Some(allowed) = &s.enum_values
        && !allowed.iter().any(|a| json_eq(a, v))
    {
        let values: Vec<String> = allowed
            .iter()
            .map(|a| match a {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        out.schema.push(fe::not_supported(name.clone(), Bad::Json(v.clone()), &values));
    }
    if let Value::Object(map) = v {
        object_checks(s, map, old, path, &name, out);
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(s: &Schema, v: &Value, actual: &str) -> bool {
    let allowed: Vec<&str> = if s.int_or_string {
        vec!["integer", "string"]
    } else {
        match s.ty.as_deref() {
            None | Some("") => return true,
            Some(t) => vec![t],
        }
    };
    if allowed.contains(&actual) {
        return true;
    }
    let float_int = actual == "number" && v.as_f64().is_some_and(|f| f.fract() == 0.0 && f.is_finite());
    (float_int && allowed.contains(&"integer")) || (actual == "integer" && allowed.contains(&"number"))
}

fn type_error(name: &str, s: &Schema, actual: &str) -> FieldError {
    let types = if s.int_or_string { "integer,string".to_string() } else { s.ty.clone().unwrap_or_default() };
    fe::type_invalid(
        name.to_string(),
        Bad::Str(actual.to_string()),
        &format!("{name} in body must be of type {types}: {}", go_quote(actual)),
    )
}

/// Deep JSON equality with numbers compared by value (1 == 1.0).
pub(crate) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, p)| y.get(k).is_some_and(|q| json_eq(p, q)))
        }
        _ => a == b,
    }
}

/// allOf / anyOf / oneOf / not: value validations on the same value (structural schemas allow no
/// types or properties beyond the spine there, except the int-or-string pattern).
fn props_validators(s: &Schema, v: &Value, name: &str, out: &mut Findings) {
    let passes = |sub: &Schema| {
        let mut f = Findings::default();
        validate(sub, v, None, &mut path_of(name), &mut f);
        f.schema.is_empty()
    };
    for sub in &s.all_of {
        let mut f = Findings::default();
        validate(sub, v, None, &mut path_of(name), &mut f);
        out.schema.extend(f.schema);
    }
    if !s.any_of.is_empty() && !s.int_or_string && !s.any_of.iter().any(passes) {
        out.schema.push(fe::invalid(
            String::new(),
            Bad::Str(String::new()),
            &format!("{} must validate at least one schema (anyOf)", go_quote(name)),
        ));
    }
    if !s.one_of.is_empty() {
        let n = s.one_of.iter().filter(|sub| passes(sub)).count();
        if n != 1 {
            let detail = if n == 0 { "Found none valid".to_string() } else { format!("Found {n} valid alternatives") };
            out.schema.push(fe::invalid(
                String::new(),
                Bad::Str(String::new()),
                &format!("{} must validate one and only one schema (oneOf). {detail}", go_quote(name)),
            ));
        }
    }
    if let Some(not) = &s.not
        && passes(not)
    {
        out.schema.push(fe::invalid(
            String::new(),
            Bad::Str(String::new()),
            &format!("{} must not validate the schema (not)", go_quote(name)),
        ));
    }
}

/// A path whose rendering is `name` (sub-validations report under the same name).
fn path_of(name: &str) -> Vec<Seg> {
    if name.is_empty() { Vec::new() } else { vec![Seg::Field(name.to_string())] }
}

fn string_checks(s: &Schema, st: &str, v: &Value, name: &str, out: &mut Findings) {
    let len = st.chars().count() as i64;
    if let Some(max) = s.max_length
        && len > max
    {
        out.schema.push(fe::too_long(name.to_string(), max));
    }
    if let Some(min) = s.min_length
        && len < min
    {
        out.schema.push(fe::invalid(
            name.to_string(),
            Bad::Json(v.clone()),
            &format!("{name} in body should be at least {min} chars long"),
        ));
    }
    if let Some((src, re)) = &s.pattern
        && !re.is_match(st)
    {
        out.schema.push(fe::invalid(
            name.to_string(),
            Bad::Json(v.clone()),
            &format!("{name} in body should match '{src}'"),
        ));
    }
    if let Some(format) = &s.format
        && !formats::is_valid(format, st)
    {
        out.schema.push(fe::type_invalid(
            name.to_string(),
            Bad::Json(v.clone()),
            &format!("{name} in body must be of type {format}: {}", go_quote(st)),
        ));
    }
}

fn bound(b: f64, integral_value: bool) -> String {
    if integral_value && b.fract() == 0.0 && b.abs() < 9.2e18 { format!("{}", b as i64) } else { go_float(b) }
}

fn number_checks(s: &Schema, v: &Value, name: &str, out: &mut Findings) {
    let Some(x) = v.as_f64() else { return };
    let integral = v.is_i64() || v.is_u64();
    if let Some(m) = s.multiple_of
        && m > 0.0
        && (x / m).fract() != 0.0
    {
        out.schema.push(fe::invalid(
            name.to_string(),
            Bad::Json(v.clone()),
            &format!("{name} in body should be a multiple of {}", bound(m, integral)),
        ));
    }
    if let Some(max) = s.maximum {
        let bad = if s.exclusive_maximum { x >= max } else { x > max };
        if bad {
            let rel = if s.exclusive_maximum { "less than" } else { "less than or equal to" };
            out.schema.push(fe::invalid(
                name.to_string(),
                Bad::Json(v.clone()),
                &format!("{name} in body should be {rel} {}", bound(max, integral)),
            ));
        }
    }
    if let Some(min) = s.minimum {
        let bad = if s.exclusive_minimum { x <= min } else { x < min };
        if bad {
            let rel = if s.exclusive_minimum { "greater than" } else { "greater than or equal to" };
            out.schema.push(fe::invalid(
                name.to_string(),
                Bad::Json(v.clone()),
                &format!("{name} in body should be {rel} {}", bound(min, integral)),
            ));
        }
    }
}

/// The old element correlated with `item` (map lists by key, set lists by value).
fn correlate<'o>(s: &Schema, item: &Value, old: Option<&'o Value>) -> Option<&'o Value> {
    let old_items = old?.as_array()?;
    match s.list_type.as_deref() {
        Some("map") => {
            let key = map_key(item, &s.list_map_keys)?;
            old_items.iter().find(|o| map_key(o, &s.list_map_keys).as_ref() == Some(&key))
        }
        Some("set") => old_items.iter().find(|o| json_eq(o, item)),
        _ => None,
    }
}

fn map_key(item: &Value, keys: &[String]) -> Option<Vec<Value>> {
    let obj = item.as_object()?;
    Some(keys.iter().map(|k| obj.get(k).cloned().unwrap_or(Value::Null)).collect())
}

fn array_checks(s: &Schema, items: &[Value], old: Option<&Value>, path: &mut Vec<Seg>, name: &str, out: &mut Findings) {
    if let Some(is) = &s.items {
        for (i, item) in items.iter().enumerate() {
            path.push(Seg::Index(i));
            validate(is, item, correlate(s, item, old), path, out);
            path.pop();
        }
    }
    let size = items.len() as i64;
    if let Some(min) = s.min_items
        && size < min
    {
        out.schema.push(fe::invalid(
            name.to_string(),
            Bad::Int(size),
            &format!("{name} in body should have at least {min} items"),
        ));
    }
    if let Some(max) = s.max_items
        && size > max
    {
        out.schema.push(fe::too_many(name.to_string(), size, max));
    }
    if s.unique_items && has_duplicates(items) {
        out.schema.push(fe::invalid(
            name.to_string(),
            Bad::Str(String::new()),
            &format!("{name} in body shouldn't contain duplicates"),
        ));
    }
    list_type_checks(s, items, path, out);
}

fn has_duplicates(items: &[Value]) -> bool {
    items.iter().enumerate().any(|(i, a)| items[..i].iter().any(|b| json_eq(a, b)))
}

/// `structurallisttype.ValidateListSetsAndMaps`
fn list_type_checks(s: &Schema, items: &[Value], path: &mut Vec<Seg>, out: &mut Findings) {
    match s.list_type.as_deref() {
        Some("set") => {
            for (i, item) in items.iter().enumerate() {
                if items[..i].iter().any(|b| json_eq(item, b)) {
                    path.push(Seg::Index(i));
                    out.lists.push(fe::duplicate(field_path(path), Bad::Json(item.clone())));
                    path.pop();
                }
            }
        }
        Some("map") => {
            let mut seen: Vec<Vec<Value>> = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let Some(obj) = item.as_object() else {
                    continue;
                };
                path.push(Seg::Index(i));
                let mut complete = true;
                for k in &s.list_map_keys {
                    let has_default =
                        s.items.as_ref().and_then(|is| is.properties.get(k)).is_some_and(|p| p.default.is_some());
                    if !obj.contains_key(k) && !has_default {
                        path.push(Seg::Field(k.clone()));
                        out.lists.push(fe::required(field_path(path), ""));
                        path.pop();
                        complete = false;
                    }
                }
                if complete {
                    let key = map_key(item, &s.list_map_keys).unwrap_or_default();
                    if seen.iter().any(|k| k.iter().zip(&key).all(|(a, b)| json_eq(a, b))) {
                        let shown: serde_json::Map<String, Value> =
                            s.list_map_keys.iter().cloned().zip(key.iter().cloned()).collect();
                        out.lists.push(fe::duplicate(field_path(path), Bad::Json(Value::Object(shown))));
                    } else {
                        seen.push(key);
                    }
                }
                path.pop();
            }
        }
        _ => {}
    }
}

fn object_checks(
    s: &Schema,
    map: &serde_json::Map<String, Value>,
    old: Option<&Value>,
    path: &mut Vec<Seg>,
    name: &str,
    out: &mut Findings,
) {
    let n = map.len() as i64;
    if let Some(min) = s.min_properties
        && n < min
    {
        out.schema.push(fe::invalid(
            name.to_string(),
            Bad::Int(n),
            &format!("{name} in body should have at least {min} properties"),
        ));
        return;
    }
    if let Some(max) = s.max_properties
        && n > max
    {
        out.schema.push(fe::too_many(name.to_string(), n, max));
        return;
    }
    if s.additional_forbidden {
        for k in map.keys() {
            if !s.properties.contains_key(k) {
                out.schema.push(fe::invalid(
                    name.to_string(),
                    Bad::Str(k.clone()),
                    &format!("{name}.{k} in body is a forbidden property"),
                ));
            }
        }
    }
    let old_map = old.and_then(Value::as_object);
    if let Some(ap) = &s.additional {
        for (k, child) in map {
            if s.properties.contains_key(k) {
                continue;
            }
            path.push(Seg::Key(k.clone()));
            validate(ap, child, old_map.and_then(|m| m.get(k)), path, out);
            path.pop();
        }
    }
    for (k, ps) in &s.properties {
        if let Some(child) = map.get(k) {
            path.push(Seg::Field(k.clone()));
            validate(ps, child, old_map.and_then(|m| m.get(k)), path, out);
            path.pop();
        }
    }
    for k in &s.required {
        if !map.contains_key(k) {
            path.push(Seg::Field(k.clone()));
            out.schema.push(fe::required(openapi_path(path), ""));
            path.pop();
        }
    }
    if s.embedded_resource {
        embedded_checks(map, path, out);
    }
}

/// `objectmeta.validateEmbeddedResource` (metadata itself is not validated here).
fn embedded_checks(map: &serde_json::Map<String, Value>, path: &mut Vec<Seg>, out: &mut Findings) {
    for key in ["apiVersion", "kind"] {
        path.push(Seg::Field(key.to_string()));
        match map.get(key) {
            None => out.embedded.push(fe::required(field_path(path), "must not be empty")),
            Some(Value::String(s)) if s.is_empty() => {
                out.embedded.push(fe::invalid(field_path(path), Bad::Str(String::new()), "must not be empty"))
            }
            Some(Value::String(_)) => {}
            Some(other) => {
                out.embedded.push(fe::invalid(field_path(path), Bad::Json(other.clone()), "must be a string"))
            }
        }
        path.pop();
    }
}
