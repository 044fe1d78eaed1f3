//! Field errors in kube-apiserver's shape: the `field.Error` constructors of
//! `k8s.io/apimachinery/pkg/util/validation/field` and Go's value printing (`%v`, `%q`, `%#v`),
//! so messages read exactly like a real server's.

use serde_json::Value;

use super::FieldError;

/// One step of a path into an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    /// object property
    Field(String),
    /// list element
    Index(usize),
    /// map (additionalProperties) entry
    Key(String),
}

/// Path as kube-openapi's schema validator prints it: `spec.items[0].name`, map keys dotted.
pub(crate) fn openapi_path(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Field(f) | Seg::Key(f) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(f);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Path as `field.Path.String()` prints it: `spec.items[0].name`, map keys as `labels[key]`.
pub(crate) fn field_path(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Field(f) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(f);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
            Seg::Key(k) => out.push_str(&format!("[{k}]")),
        }
    }
    out
}

/// The bad value of a field error, printed like Go's `field.Error.ErrorBody`.
#[derive(Debug, Clone)]
pub(crate) enum Bad {
    /// `field.OmitValueType{}`: no value printed
    Omit,
    /// a Go string (`%q`)
    Str(String),
    /// a Go int64 (`%v`)
    Int(i64),
    /// a decoded JSON value
    Json(Value),
    /// Go `nil`
    Null,
}

impl Bad {
    fn render(&self) -> Option<String> {
        match self {
            Bad::Omit => None,
            Bad::Str(s) => Some(go_quote(s)),
            Bad::Int(i) => Some(i.to_string()),
            Bad::Json(v) => Some(go_value(v)),
            Bad::Null => Some("null".into()),
        }
    }
}

fn build(reason: &str, field: String, body: String) -> FieldError {
    // `(*field.Path)(nil).String()` is "<nil>": errors at the object root read `<nil>: ...`
    let field = if field.is_empty() { "<nil>".to_string() } else { field };
    FieldError { reason: reason.to_string(), message: format!("{field}: {body}"), field }
}

fn with_detail(mut s: String, detail: &str) -> String {
    if !detail.is_empty() {
        s.push_str(": ");
        s.push_str(detail);
    }
    s
}

fn valued(kind: &str, bad: &Bad, detail: &str) -> String {
    let head = match bad.render() {
        Some(v) => format!("{kind}: {v}"),
        None => kind.to_string(),
    };
    with_detail(head, detail)
}

/// `field.Required`
pub(crate) fn required(field: String, detail: &str) -> FieldError {
    build("FieldValueRequired", field, with_detail("Required value".into(), detail))
}

/// `field.Forbidden`
pub(crate) fn forbidden(field: String, detail: &str) -> FieldError {
    build("FieldValueForbidden", field, with_detail("Forbidden".into(), detail))
}

/// `field.Invalid`
pub(crate) fn invalid(field: String, bad: Bad, detail: &str) -> FieldError {
    build("FieldValueInvalid", field, valued("Invalid value", &bad, detail))
}

/// `field.TypeInvalid`
pub(crate) fn type_invalid(field: String, bad: Bad, detail: &str) -> FieldError {
    build("FieldValueTypeInvalid", field, valued("Invalid value", &bad, detail))
}

/// `field.NotSupported` with the allowed values quoted like `strconv.Quote`.
pub(crate) fn not_supported(field: String, bad: Bad, allowed: &[String]) -> FieldError {
    let detail = if allowed.is_empty() {
        String::new()
    } else {
        let quoted: Vec<String> = allowed.iter().map(|v| go_quote(v)).collect();
        format!("supported values: {}", quoted.join(", "))
    };
    build("FieldValueNotSupported", field, valued("Unsupported value", &bad, &detail))
}

/// `field.TooLong` (the value is never printed)
pub(crate) fn too_long(field: String, max: i64) -> FieldError {
    let detail = if max >= 0 {
        format!("may not be more than {max} {}", if max == 1 { "byte" } else { "bytes" })
    } else {
        "value is too long".to_string()
    };
    build("FieldValueTooLong", field, with_detail("Too long".into(), &detail))
}

/// `field.TooMany`
pub(crate) fn too_many(field: String, actual: i64, max: i64) -> FieldError {
    let detail = if max >= 0 { format!("must have at most {max} items") } else { "has too many items".to_string() };
    let bad = if actual >= 0 { Bad::Int(actual) } else { Bad::Omit };
    build("FieldValueTooMany", field, valued("Too many", &bad, &detail))
}

/// `field.Duplicate`
pub(crate) fn duplicate(field: String, bad: Bad) -> FieldError {
    build("FieldValueDuplicate", field, valued("Duplicate value", &bad, ""))
}

/// Go's `strconv.Quote`.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => {
                if (c as u32) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", c as u32))
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32))
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): shortest digits, exponent form
/// when the decimal exponent is below -4 or at least 6.
pub(crate) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        return format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    format!("{f}")
}

/// Go's `%v` of a decoded JSON value as it reaches `field.Error` (int64, float64, string via `%q`,
/// maps and slices via `%#v`).
pub(crate) fn go_value(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        Value::String(s) => go_quote(s),
        Value::Array(_) | Value::Object(_) => go_sharp_v(v),
    }
}

fn number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() { i.to_string() } else { go_float(n.as_f64().unwrap_or(0.0)) }
}

/// Go's `%#v` of `map[string]interface{}` / `[]interface{}` trees.
fn go_sharp_v(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        Value::String(s) => go_quote(s),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(go_sharp_v).collect();
            format!("[]interface {{}}{{{}}}", inner.join(", "))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys.iter().map(|k| format!("{}:{}", go_quote(k), go_sharp_v(&map[*k]))).collect();
            format!("map[string]interface {{}}{{{}}}", inner.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_go() {
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(123456.5), "123456.5");
        assert_eq!(go_float(1234567.5), "1.2345675e+06");
    }

    #[test]
    fn strings_quote_like_go() {
        assert_eq!(go_quote("a\"b\n"), "\"a\\\"b\\n\"");
        assert_eq!(go_quote("é"), "\"é\"");
    }

    #[test]
    fn invalid_prints_value_then_detail() {
        let e = invalid("spec.replicas".into(), Bad::Int(1), "nope");
        assert_eq!(e.message, "spec.replicas: Invalid value: 1: nope");
        let e = invalid("spec".into(), Bad::Omit, "nope");
        assert_eq!(e.message, "spec: Invalid value: nope");
    }
}
