//! `x-kubernetes-validations`: compiling CEL rules at CRD registration (parse, then check every
//! variable, function and field they reference against the environment and the schema, the way
//! kube-apiserver's type-checker rejects them) and evaluating them like
//! apiextensions-apiserver's `schema/cel` validator: `self`/`oldSelf` bound per schema node,
//! transition rules only when an old value correlates, `message`, `messageExpression`,
//! `fieldPath`, `reason`, and ratcheting of unchanged values.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::{Context, Env, ExecutionError, Program};
use serde_json::Value;

use super::errors::{self as fe, Bad, Seg, field_path};
use super::schema::{RuleSpec, Schema};
use super::{FieldError, SchemaError, cel_library, formats};

/// A compiled rule of one schema node.
#[derive(Debug, Clone)]
pub(crate) struct CompiledRule {
    pub spec: RuleSpec,
    pub program: Arc<Program>,
    pub message_program: Option<Arc<Program>>,
    pub uses_old_self: bool,
    /// `fieldPath`, relative to the node
    pub field_path: Vec<Seg>,
}

/// The CEL environment: standard library, the `cel` crate's extensions and the Kubernetes library.
pub(crate) static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings).expect("strings extension");
    env.add_extension(cel::extensions::lists).expect("lists extension");
    env.add_extension(cel::extensions::math).expect("math extension");
    env.add_extension(cel::extensions::encoders).expect("encoders extension");
    cel_library::register(&mut env).expect("kubernetes CEL library");
    Arc::new(env)
});

/// Functions (besides operators) a rule may call.
const STD_FUNCTIONS: &[&str] = &[
    // standard library
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "duration",
    "timestamp",
    "dyn",
    "type",
    "getDate",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
    "getFullYear",
    "getHours",
    "getMilliseconds",
    "getMinutes",
    "getMonth",
    "getSeconds",
    "has",
    "all",
    "exists",
    "exists_one",
    "map",
    "filter",
    // optional
    "optional.of",
    "optional.none",
    "optional.ofNonZeroValue",
    "hasValue",
    "value",
    "or",
    "orValue",
    "optMap",
    "optFlatMap",
    // strings extension
    "charAt",
    "indexOf",
    "lastIndexOf",
    "join",
    "lowerAscii",
    "upperAscii",
    "trim",
    "replace",
    "split",
    "substring",
    "format",
    "strings.quote",
    "reverse",
    // lists extension
    "slice",
    "flatten",
    "distinct",
    "sort",
    "sortBy",
    "lists.range",
    // math extension
    "math.abs",
    "math.bitAnd",
    "math.bitNot",
    "math.bitOr",
    "math.bitShiftLeft",
    "math.bitShiftRight",
    "math.bitXor",
    "math.ceil",
    "math.floor",
    "math.isFinite",
    "math.isInf",
    "math.isNaN",
    "math.round",
    "math.sign",
    "math.sqrt",
    "math.trunc",
    // encoders
    "base64.encode",
    "base64.decode",
];

/// Identifiers that name types or namespaces rather than variables.
const TYPE_IDENTS: &[&str] =
    &["int", "uint", "double", "string", "bytes", "bool", "list", "map", "null_type", "type", "dyn", "optional_type"];

fn known_function(name: &str) -> bool {
    name.starts_with('_')
        || name.starts_with('@')
        || name.starts_with('!')
        || name.starts_with('-')
        || STD_FUNCTIONS.contains(&name)
        || cel_library::FUNCTIONS.contains(&name)
}

/// Every function name a rule may call (for tests that probe them all).
#[cfg(test)]
pub(crate) fn accepted_function_names() -> Vec<&'static str> {
    let macros = ["has", "all", "exists", "exists_one", "map", "filter", "sortBy", "optMap", "optFlatMap"];
    STD_FUNCTIONS.iter().chain(cel_library::FUNCTIONS).copied().filter(|f| !macros.contains(f)).collect()
}

const CEL_RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// Kubernetes' escaping of property names into CEL identifiers (`x-y` → `x__dash__y`); `None`
/// when the name cannot be escaped (such fields are invisible to rules).
pub(crate) fn escape(name: &str) -> Option<String> {
    let first = name.chars().next()?;
    if first.is_ascii_digit() {
        return None;
    }
    if CEL_RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '_' if chars.peek() == Some(&'_') => {
                chars.next();
                out.push_str("__underscores__");
            }
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => return None,
        }
    }
    Some(out)
}

/// What the checker knows about an expression's value.
#[derive(Clone, Copy)]
enum Ty<'s> {
    /// a value of this schema node; `true` when it is a resource root (apiVersion/kind/metadata)
    Node(&'s Schema, bool),
    /// `metadata` of a resource root: only `name` and `generateName` are visible
    RootMeta,
    Unknown,
}

struct Checker<'s> {
    self_ty: Ty<'s>,
    uses_old_self: bool,
    errors: Vec<String>,
}

impl<'s> Checker<'s> {
    fn check(&mut self, e: &IdedExpr, scope: &HashMap<String, Ty<'s>>) -> Ty<'s> {
        match &e.expr {
            Expr::Ident(name) => {
                if let Some(t) = scope.get(name) {
                    *t
                } else if name == "self" {
                    self.self_ty
                } else if name == "oldSelf" {
                    self.uses_old_self = true;
                    self.self_ty
                } else if TYPE_IDENTS.contains(&name.as_str()) {
                    Ty::Unknown
                } else {
                    self.errors.push(format!("undeclared reference to '{name}'"));
                    Ty::Unknown
                }
            }
            Expr::Select(sel) => {
                if let Some(q) = qualified(e)
                    && known_function(&q)
                    && !scope.contains_key(q.split('.').next().unwrap_or(""))
                {
                    return Ty::Unknown;
                }
                let operand = self.check(&sel.operand, scope);
                self.select(operand, &sel.field)
            }
            Expr::Call(call) => {
                if let Some(ns) = call.target.as_deref().and_then(qualified) {
                    let full = format!("{ns}.{}", call.func_name);
                    let root = ns.split('.').next().unwrap_or("");
                    if !scope.contains_key(root) && root != "self" && root != "oldSelf" && known_function(&full) {
                        for a in &call.args {
                            self.check(a, scope);
                        }
                        return Ty::Unknown;
                    }
                }
                if !known_function(&call.func_name) {
                    self.errors.push(format!("undeclared reference to '{}'", call.func_name));
                }
                let target = call.target.as_ref().map(|t| self.check(t, scope));
                let args: Vec<Ty> = call.args.iter().map(|a| self.check(a, scope)).collect();
                if call.func_name == "_[_]"
                    && let Some(Ty::Node(s, _)) = args.first().copied().or(target)
                {
                    if s.ty.as_deref() == Some("array") {
                        return s.items.as_deref().map_or(Ty::Unknown, |i| Ty::Node(i, i.embedded_resource));
                    }
                    if let Some(ap) = &s.additional {
                        return Ty::Node(ap, ap.embedded_resource);
                    }
                }
                Ty::Unknown
            }
            Expr::Comprehension(c) => {
                let range = self.check(&c.iter_range, scope);
                let elem = match range {
                    Ty::Node(s, _) if s.ty.as_deref() == Some("array") => {
                        s.items.as_deref().map_or(Ty::Unknown, |i| Ty::Node(i, i.embedded_resource))
                    }
                    _ => Ty::Unknown,
                };
                let mut inner = scope.clone();
                inner.insert(c.accu_var.clone(), Ty::Unknown);
                self.check(&c.accu_init, scope);
                match &c.iter_var2 {
                    Some(v2) => {
                        inner.insert(c.iter_var.clone(), Ty::Unknown);
                        inner.insert(v2.clone(), elem);
                    }
                    None => {
                        inner.insert(c.iter_var.clone(), elem);
                    }
                }
                self.check(&c.loop_cond, &inner);
                self.check(&c.loop_step, &inner);
                let mut result_scope = scope.clone();
                result_scope.insert(c.accu_var.clone(), Ty::Unknown);
                self.check(&c.result, &result_scope);
                Ty::Unknown
            }
            Expr::List(l) => {
                for el in &l.elements {
                    self.check(el, scope);
                }
                Ty::Unknown
            }
            Expr::Map(m) => {
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        self.check(&me.key, scope);
                        self.check(&me.value, scope);
                    }
                }
                Ty::Unknown
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        self.check(&f.value, scope);
                    }
                }
                Ty::Unknown
            }
            Expr::Literal(_) | Expr::Unspecified => Ty::Unknown,
        }
    }

    fn select(&mut self, operand: Ty<'s>, field: &str) -> Ty<'s> {
        match operand {
            Ty::Unknown => Ty::Unknown,
            Ty::RootMeta => {
                if field != "name" && field != "generateName" {
                    self.errors.push(format!("undefined field '{field}'"));
                }
                Ty::Unknown
            }
            Ty::Node(s, root) => {
                if root && (field == "apiVersion" || field == "kind") {
                    return Ty::Unknown;
                }
                if root && field == "metadata" {
                    return Ty::RootMeta;
                }
                if let Some((_, ps)) = s.properties.iter().find(|(k, _)| escape(k).as_deref() == Some(field)) {
                    return Ty::Node(ps, ps.embedded_resource);
                }
                if let Some(ap) = &s.additional {
                    return Ty::Node(ap, ap.embedded_resource);
                }
                let opaque_object = s.properties.is_empty() && (s.preserve_unknown || s.ty.is_none());
                if opaque_object {
                    return Ty::Unknown;
                }
                match s.ty.as_deref() {
                    Some("object") => self.errors.push(format!("undefined field '{field}'")),
                    Some(t) => self.errors.push(format!("type '{t}' does not support field selection")),
                    None => {}
                }
                Ty::Unknown
            }
        }
    }
}

/// `a.b.c` as a dotted name, when the expression is only identifiers and selections.
fn qualified(e: &IdedExpr) -> Option<String> {
    match &e.expr {
        Expr::Ident(n) => Some(n.clone()),
        Expr::Select(s) if !s.test => qualified(&s.operand).map(|q| format!("{q}.{}", s.field)),
        _ => None,
    }
}

/// Parses a `fieldPath` (`.spec.x`, `['key']`) against the node schema.
fn parse_field_path(fp: &str, mut s: &Schema) -> Result<Vec<Seg>, String> {
    let mut out = Vec::new();
    let mut rest = fp;
    while !rest.is_empty() {
        let (name, next) = if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            (r[..end].to_string(), &r[end..])
        } else if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']").ok_or("unexpected end of JSON path")?;
            (r[..end].replace("\\'", "'"), &r[end + 2..])
        } else {
            return Err(format!("expected [ or . but got: {rest}"));
        };
        if let Some(ps) = s.properties.get(&name) {
            out.push(Seg::Field(name));
            s = ps;
        } else if let Some(ap) = &s.additional {
            out.push(Seg::Key(name));
            s = ap;
        } else {
            return Err("does not refer to a valid field".into());
        }
        rest = next;
    }
    Ok(out)
}

/// Compiles every rule of the tree in place; `correlatable` is false below atomic/set lists.
pub(crate) fn compile_tree(
    s: &mut Schema,
    label: &str,
    resource_root: bool,
    correlatable: bool,
    errors: &mut Vec<SchemaError>,
) {
    let specs = s.rule_specs.clone();
    let mut compiled = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let at = format!("{label}.x-kubernetes-validations[{i}]");
        match compile_rule(spec, s, resource_root) {
            Ok(rule) => {
                if rule.uses_old_self && !correlatable {
                    errors.push(SchemaError {
                        path: format!("{at}.rule"),
                        message: format!(
                            "oldSelf cannot be used on the uncorrelatable portion of the schema within {label}"
                        ),
                    });
                }
                compiled.push(rule);
            }
            Err((field, msg)) => errors.push(SchemaError { path: format!("{at}.{field}"), message: msg }),
        }
    }
    s.rules = compiled;
    let item_correlatable = correlatable && s.list_type.as_deref() == Some("map");
    for (k, ps) in s.properties.iter_mut() {
        let root = ps.embedded_resource;
        compile_tree(ps, &format!("{label}.properties[{k}]"), root, correlatable, errors);
    }
    if let Some(ap) = s.additional.as_deref_mut() {
        let root = ap.embedded_resource;
        compile_tree(ap, &format!("{label}.additionalProperties"), root, correlatable, errors);
    }
    if let Some(items) = s.items.as_deref_mut() {
        let root = items.embedded_resource;
        compile_tree(items, &format!("{label}.items"), root, item_correlatable, errors);
    }
    for (i, sub) in s.all_of.iter_mut().enumerate() {
        compile_tree(sub, &format!("{label}.allOf[{i}]"), resource_root, correlatable, errors);
    }
    s.has_rules = !s.rules.is_empty()
        || s.properties.values().any(|p| p.has_rules)
        || s.additional.as_deref().is_some_and(|a| a.has_rules)
        || s.items.as_deref().is_some_and(|i| i.has_rules)
        || s.all_of.iter().any(|a| a.has_rules);
}

/// The CEL type of an expression's result when it is evident (literals, operators, schema nodes).
fn result_type(e: &IdedExpr, ty: Ty<'_>) -> Option<&'static str> {
    use cel::common::ast::LiteralValue as L;
    match &e.expr {
        Expr::Literal(L::Boolean(_)) => Some("bool"),
        Expr::Literal(L::Int(_)) => Some("int"),
        Expr::Literal(L::UInt(_)) => Some("uint"),
        Expr::Literal(L::Double(_)) => Some("double"),
        Expr::Literal(L::String(_)) => Some("string"),
        Expr::Literal(L::Bytes(_)) => Some("bytes"),
        Expr::Literal(L::Null) => Some("null_type"),
        Expr::List(_) => Some("list"),
        Expr::Map(_) => Some("map"),
        Expr::Select(sel) if sel.test => Some("bool"),
        Expr::Call(c)
            if ["_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "_&&_", "_||_", "!_", "@in"]
                .contains(&c.func_name.as_str()) =>
        {
            Some("bool")
        }
        _ => match ty {
            Ty::Node(s, _) if !s.int_or_string => match s.ty.as_deref()? {
                "boolean" => Some("bool"),
                "string" if s.format.is_none() => Some("string"),
                "integer" => Some("int"),
                "number" => Some("double"),
                "array" => Some("list"),
                "object" => Some("map"),
                _ => None,
            },
            _ => None,
        },
    }
}

/// Compiles one expression whose result must be of type `want` (`bool` for rules, `string` for
/// messageExpressions).
fn compile_expr(src: &str, node: &Schema, resource_root: bool, want: &str) -> Result<(Program, bool), String> {
    let program = ENV.compile(src).map_err(|e| format!("compilation failed: {e}"))?;
    let mut checker = Checker { self_ty: Ty::Node(node, resource_root), uses_old_self: false, errors: Vec::new() };
    let ty = checker.check(program.expression(), &HashMap::new());
    if let Some(first) = checker.errors.first() {
        return Err(format!("compilation failed: ERROR: <input>: {first}"));
    }
    if let Some(got) = result_type(program.expression(), ty)
        && got != want
    {
        return Err(if want == "bool" {
            format!("compilation failed: cel expression must evaluate to a bool (found {got})")
        } else {
            format!("messageExpression must evaluate to a string (found {got})")
        });
    }
    Ok((program, checker.uses_old_self))
}

fn compile_rule(spec: &RuleSpec, node: &Schema, resource_root: bool) -> Result<CompiledRule, (&'static str, String)> {
    if spec.rule.trim().is_empty() {
        return Err(("rule", "Required value".into()));
    }
    let (program, uses_old_self) = compile_expr(&spec.rule, node, resource_root, "bool").map_err(|e| ("rule", e))?;
    let message_program = match &spec.message_expression {
        Some(src) => {
            let (p, _) = compile_expr(src, node, resource_root, "string").map_err(|e| ("messageExpression", e))?;
            Some(Arc::new(p))
        }
        None => None,
    };
    if let Some(reason) = &spec.reason {
        let ok = ["FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"];
        if !ok.contains(&reason.as_str()) {
            return Err((
                "reason",
                format!(
                    "Unsupported value: {reason:?}: supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""
                ),
            ));
        }
    }
    let field_path = match &spec.field_path {
        Some(fp) => parse_field_path(fp, node).map_err(|e| ("fieldPath", format!("Invalid value: {fp:?}: {e}")))?,
        None => Vec::new(),
    };
    Ok(CompiledRule { spec: spec.clone(), program: Arc::new(program), message_program, uses_old_self, field_path })
}

// ---- evaluation ----

/// Converts a JSON value to a CEL value the way kube-apiserver types it through the schema.
pub(crate) fn to_cel(v: &Value, s: Option<&Schema>, resource_root: bool) -> cel::Value {
    use cel::Value as C;
    match v {
        Value::Null => C::Null,
        Value::Bool(b) => C::Bool(*b),
        Value::Number(n) => {
            let number_typed = s.is_some_and(|s| s.ty.as_deref() == Some("number"));
            match (n.as_i64(), n.as_u64()) {
                (Some(i), _) if !number_typed => C::Int(i),
                (None, Some(u)) if !number_typed => C::UInt(u),
                _ => C::Float(n.as_f64().unwrap_or(0.0)),
            }
        }
        Value::String(st) => match s.and_then(|s| s.format.as_deref()) {
            Some("byte") => {
                use base64::Engine;
                match base64::engine::general_purpose::STANDARD.decode(st) {
                    Ok(b) => C::Bytes(Arc::new(b)),
                    Err(_) => C::String(Arc::new(st.clone())),
                }
            }
            Some("date-time") | Some("datetime") => match formats::parse_date_time(st) {
                Some(t) => C::Timestamp(t),
                None => C::String(Arc::new(st.clone())),
            },
            Some("date") => match chrono::NaiveDate::parse_from_str(st, "%Y-%m-%d") {
                Ok(d) => C::Timestamp(d.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc().fixed_offset()),
                Err(_) => C::String(Arc::new(st.clone())),
            },
            Some("duration") => match formats::parse_go_duration(st) {
                Some(d) => C::Duration(d),
                None => C::String(Arc::new(st.clone())),
            },
            _ => C::String(Arc::new(st.clone())),
        },
        Value::Array(items) => {
            let is = s.and_then(|s| s.items.as_deref());
            C::List(Arc::new(items.iter().map(|i| to_cel(i, is, is.is_some_and(|x| x.embedded_resource))).collect()))
        }
        Value::Object(map) => {
            let mut out: HashMap<String, C> = HashMap::new();
            for (k, child) in map {
                if let Some(ap) = s.and_then(|s| s.additional.as_deref())
                    && s.is_some_and(|s| !s.properties.contains_key(k))
                {
                    out.insert(k.clone(), to_cel(child, Some(ap), ap.embedded_resource));
                    continue;
                }
                if resource_root && k == "metadata" {
                    let mut meta: HashMap<String, C> = HashMap::new();
                    for f in ["name", "generateName"] {
                        if let Some(Value::String(x)) = child.get(f) {
                            meta.insert(f.to_string(), C::String(Arc::new(x.clone())));
                        }
                    }
                    out.insert(k.clone(), C::from(meta));
                    continue;
                }
                let ps = s.and_then(|s| s.properties.get(k));
                let Some(name) = escape(k) else { continue };
                out.insert(name, to_cel(child, ps, ps.is_some_and(|p| p.embedded_resource)));
            }
            C::from(out)
        }
    }
}

/// cel-go's wording of an evaluation error.
fn go_error_text(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::NoSuchOverload(_) => "no such overload".into(),
        ExecutionError::DivisionByZero(_) => "division by zero".into(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".into(),
        ExecutionError::Overflow(..) => "integer overflow".into(),
        ExecutionError::IndexOutOfBounds(v) => format!("index out of bounds: {v:?}"),
        ExecutionError::FunctionError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

fn rule_error_string(spec: &RuleSpec) -> String {
    match &spec.message {
        Some(m) => m.trim().to_string(),
        None => spec.rule.trim().to_string(),
    }
}

/// How a node relates to the old object: `correlatable` nodes compare with their own old value;
/// the others inherit `parent_unchanged` from the nearest correlatable ancestor (ratcheting).
#[derive(Clone, Copy)]
pub(crate) struct Correlation {
    pub correlatable: bool,
    pub parent_unchanged: bool,
}

/// Evaluates the rules of `s` and below for value `v` (with the correlated `old`), at `path`.
pub(crate) fn eval_tree(
    s: &Schema,
    v: &Value,
    old: Option<&Value>,
    corr: Correlation,
    path: &mut Vec<Seg>,
    errors: &mut Vec<FieldError>,
) {
    if v.is_null() || !s.has_rules {
        return;
    }
    let Correlation { correlatable, parent_unchanged } = corr;
    let resource_root = s.embedded_resource;
    let unchanged = if correlatable { old == Some(v) } else { parent_unchanged };
    eval_node(s, v, old, unchanged, resource_root, path, errors);
    for sub in &s.all_of {
        eval_node(sub, v, old, false, resource_root, path, errors);
    }
    match v {
        Value::Object(map) => {
            let old_map = old.and_then(Value::as_object);
            for (k, child) in map {
                let (cs, seg) = match (s.properties.get(k), s.additional.as_deref()) {
                    (Some(ps), _) => (ps, Seg::Field(k.clone())),
                    (None, Some(ap)) => (ap, Seg::Key(k.clone())),
                    _ => continue,
                };
                path.push(seg);
                let old_child = if correlatable { old_map.and_then(|m| m.get(k)) } else { None };
                let corr = Correlation { correlatable, parent_unchanged: unchanged };
                eval_tree(cs, child, old_child, corr, path, errors);
                path.pop();
            }
        }
        Value::Array(items) => {
            let Some(is) = s.items.as_deref() else { return };
            let map_list = correlatable && s.list_type.as_deref() == Some("map");
            let old_items = old.and_then(Value::as_array);
            for (i, item) in items.iter().enumerate() {
                let old_item = if map_list {
                    let key = |x: &Value| -> Option<Vec<Value>> {
                        let o = x.as_object()?;
                        Some(s.list_map_keys.iter().map(|k| o.get(k).cloned().unwrap_or(Value::Null)).collect())
                    };
                    let k = key(item);
                    old_items.and_then(|olds| olds.iter().find(|o| k.is_some() && key(o) == k))
                } else {
                    None
                };
                path.push(Seg::Index(i));
                let corr = Correlation { correlatable: map_list, parent_unchanged: unchanged };
                eval_tree(is, item, old_item, corr, path, errors);
                path.pop();
            }
        }
        _ => {}
    }
}

pub(crate) fn eval_node(
    s: &Schema,
    v: &Value,
    old: Option<&Value>,
    unchanged: bool,
    resource_root: bool,
    path: &mut [Seg],
    errors: &mut Vec<FieldError>,
) {
    if s.rules.is_empty() {
        return;
    }
    let type_name = s.type_name().to_string();
    let mut ctx = Context::with_env(ENV.clone());
    ctx.add_variable_from_value("self", to_cel(v, Some(s), resource_root));
    if let Some(o) = old {
        ctx.add_variable_from_value("oldSelf", to_cel(o, Some(s), resource_root));
    }
    let here = field_path(path);
    for rule in &s.rules {
        if rule.uses_old_self && old.is_none() && !rule.spec.optional_old_self {
            continue; // transition rules need an old value
        }
        let result = if rule.uses_old_self && rule.spec.optional_old_self {
            // optionalOldSelf: oldSelf is an optional, empty on create
            let opt = match old {
                Some(o) => cel::objects::OptionalValue::of(to_cel(o, Some(s), resource_root)),
                None => cel::objects::OptionalValue::none(),
            };
            let mut octx = Context::with_env(ENV.clone());
            octx.add_variable_from_value("self", to_cel(v, Some(s), resource_root));
            octx.add_variable_from_value("oldSelf", cel::Value::Opaque(Arc::new(opt)));
            rule.program.execute(&octx)
        } else {
            rule.program.execute(&ctx)
        };
        match result {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                if !rule.uses_old_self && unchanged {
                    continue; // ratcheted: the value did not change
                }
                let mut at: Vec<Seg> = path.to_vec();
                at.extend(rule.field_path.iter().cloned());
                let field = field_path(&at);
                let detail = message_for(rule, &ctx);
                let bad = if type_name == "object" || type_name == "array" { Bad::Omit } else { Bad::Json(v.clone()) };
                let err = match rule.spec.reason.as_deref() {
                    Some("FieldValueForbidden") => fe::forbidden(field, &detail),
                    Some("FieldValueRequired") => fe::required(field, &detail),
                    Some("FieldValueDuplicate") => fe::duplicate(field, bad),
                    _ => fe::invalid(field, bad, &detail),
                };
                errors.push(err);
            }
            Ok(other) => errors.push(fe::invalid(
                here.clone(),
                Bad::Str(type_name.clone()),
                &format!(
                    "rule did not evaluate to a bool ({:?}) for rule: {}",
                    other.type_of(),
                    rule_error_string(&rule.spec)
                ),
            )),
            Err(e @ ExecutionError::NoSuchOverload(_)) => errors.push(fe::invalid(
                here.clone(),
                Bad::Str(type_name.clone()),
                &format!(
                    "'{}': call arguments did not match a supported operator, function or macro signature for rule: {}",
                    go_error_text(&e),
                    rule_error_string(&rule.spec)
                ),
            )),
            Err(e) => errors.push(fe::invalid(
                here.clone(),
                Bad::Str(type_name.clone()),
                &format!("{} evaluating rule: {}", go_error_text(&e), rule_error_string(&rule.spec)),
            )),
        }
    }
}

/// The detail of a failed rule: `messageExpression` if it yields a usable string, else `message`,
/// else `failed rule: <rule>`.
fn message_for(rule: &CompiledRule, ctx: &Context<'_, '_>) -> String {
    if let Some(p) = &rule.message_program
        && let Ok(cel::Value::String(s)) = p.execute(ctx)
    {
        let t = s.trim();
        if !t.is_empty() && !t.contains('\n') && t.len() <= 5000 {
            return t.to_string();
        }
    }
    match &rule.spec.message {
        Some(m) => m.trim().to_string(),
        None => format!("failed rule: {}", rule.spec.rule.trim()),
    }
}
