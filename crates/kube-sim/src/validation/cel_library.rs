//! The Kubernetes CEL libraries CRD rules may use on top of the CEL standard library and the
//! `strings`, `lists`, `math`, `encoders` and optional extensions of the `cel` crate: URLs
//! (`isURL`, `url`), regex (`find`, `findAll`), lists (`isSorted`, `sum`, `min`, `max`,
//! `indexOf`, `lastIndexOf`), quantities (`isQuantity`, `quantity` and its methods) and IPs/CIDRs
//! (`isIP`, `ip`, `isCIDR`, `cidr` and their common methods).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use cel::common::types::DYN_TYPE;
use cel::common::value::{CowVal, Val};
use cel::objects::{Opaque, Value};
use cel::{Env, ExecutionError};

type Res<'b, 'v> = Result<CowVal<'b, 'v>, ExecutionError>;

/// Names of the functions this library adds (for the compile-time reference check).
pub(crate) const FUNCTIONS: &[&str] = &[
    "isURL",
    "url",
    "getScheme",
    "getHost",
    "getHostname",
    "getPort",
    "getEscapedPath",
    "getQuery",
    "find",
    "findAll",
    "isSorted",
    "sum",
    "min",
    "max",
    "indexOf",
    "lastIndexOf",
    "isQuantity",
    "quantity",
    "isInteger",
    "asInteger",
    "asApproximateFloat",
    "sign",
    "add",
    "sub",
    "isLessThan",
    "isGreaterThan",
    "compareTo",
    "isIP",
    "ip",
    "isCIDR",
    "cidr",
    "family",
    "isUnspecified",
    "isLoopback",
    "isLinkLocalMulticast",
    "isLinkLocalUnicast",
    "isGlobalUnicast",
    "containsIP",
    "containsCIDR",
    "prefixLength",
    "masked",
];

fn vals(args: &[CowVal<'_, '_>]) -> Result<Vec<Value>, ExecutionError> {
    args.iter().map(|a| Value::try_from(a.as_ref())).collect()
}

fn ret<'b, 'v>(v: Value) -> Res<'b, 'v> {
    let b: Box<dyn Val> = v.try_into()?;
    Ok(CowVal::Owned(b))
}

fn err(function: &str, msg: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, msg)
}

fn string_arg(function: &str, v: &Value) -> Result<Arc<String>, ExecutionError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        other => Err(ExecutionError::no_such_overload(function, vec![format!("{:?}", other.type_of())])),
    }
}

fn opaque<'a, T: 'static>(function: &str, v: &'a Value) -> Result<&'a T, ExecutionError> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<T>().ok_or_else(|| err(function, "unexpected receiver type")),
        _ => Err(err(function, "unexpected receiver type")),
    }
}

/// Registers the library on `env`.
pub(crate) fn register(env: &mut Env) -> Result<(), cel::DeclarationError> {
    let d = || DYN_TYPE;
    env.add_overload("isURL", "k8s_is_url", vec![d()], is_url)?;
    env.add_overload("url", "k8s_url", vec![d()], url)?;
    for (name, f) in [
        ("getScheme", url_scheme as cel::common::functions::Function),
        ("getHost", url_host),
        ("getHostname", url_hostname),
        ("getPort", url_port),
        ("getEscapedPath", url_path),
        ("getQuery", url_query),
        ("isSorted", list_is_sorted),
        ("sum", list_sum),
        ("min", list_min),
        ("max", list_max),
        ("isInteger", q_is_integer),
        ("asInteger", q_as_integer),
        ("asApproximateFloat", q_as_float),
        ("sign", q_sign),
        ("family", ip_family),
        ("isUnspecified", ip_is_unspecified),
        ("isLoopback", ip_is_loopback),
        ("isLinkLocalMulticast", ip_is_ll_multicast),
        ("isLinkLocalUnicast", ip_is_ll_unicast),
        ("isGlobalUnicast", ip_is_global_unicast),
        ("prefixLength", cidr_prefix_length),
        ("masked", cidr_masked),
    ] {
        env.add_member_overload(name, &format!("k8s_{name}"), d(), vec![], f)?;
    }
    for (name, f) in [
        ("find", regex_find as cel::common::functions::Function),
        ("findAll", regex_find_all),
        ("indexOf", list_index_of),
        ("lastIndexOf", list_last_index_of),
        ("add", q_add),
        ("sub", q_sub),
        ("isLessThan", q_less),
        ("isGreaterThan", q_greater),
        ("compareTo", q_compare),
        ("containsIP", cidr_contains_ip),
        ("containsCIDR", cidr_contains_cidr),
    ] {
        env.add_member_overload(name, &format!("k8s_{name}_1"), d(), vec![d()], f)?;
    }
    env.add_member_overload("findAll", "k8s_findAll_2", d(), vec![d(), d()], regex_find_all_n)?;
    env.add_overload("isQuantity", "k8s_is_quantity", vec![d()], is_quantity)?;
    env.add_overload("quantity", "k8s_quantity", vec![d()], quantity)?;
    env.add_overload("isIP", "k8s_is_ip", vec![d()], is_ip)?;
    env.add_overload("ip", "k8s_ip", vec![d()], ip)?;
    env.add_member_overload("ip", "k8s_cidr_ip", d(), vec![], cidr_ip)?;
    env.add_overload("isCIDR", "k8s_is_cidr", vec![d()], is_cidr)?;
    env.add_overload("cidr", "k8s_cidr", vec![d()], cidr)?;
    Ok(())
}

// ---- URLs (k8s.io/apiserver/pkg/cel/library/urls.go) ----

/// A URL as Go's `url.ParseRequestURI` splits it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KubeUrl {
    scheme: String,
    host: String,
    path: String,
    query: String,
}

impl Opaque for KubeUrl {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.URL"
    }
}

/// Go's `url.ParseRequestURI`: an absolute URI (scheme required) or an absolute path.
fn parse_request_uri(s: &str) -> Option<KubeUrl> {
    if s.is_empty() || s.chars().any(|c| c.is_control() || c == ' ') {
        return None;
    }
    let (rest, query) = match s.split_once('?') {
        Some((r, q)) => (r, q.to_string()),
        None => (s, String::new()),
    };
    if rest.starts_with('/') {
        return Some(KubeUrl { scheme: String::new(), host: String::new(), path: rest.into(), query });
    }
    let (scheme, after) = rest.split_once(':')?;
    let valid_scheme = scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !valid_scheme {
        return None;
    }
    let Some(after) = after.strip_prefix("//") else {
        // opaque form (mailto:x); Go accepts it only when it does not start with '/'
        return Some(KubeUrl { scheme: scheme.to_lowercase(), host: String::new(), path: String::new(), query });
    };
    let (authority, path) = match after.find('/') {
        Some(i) => (&after[..i], after[i..].to_string()),
        None => (after, String::new()),
    };
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if !valid_host_port(host) {
        return None;
    }
    Some(KubeUrl { scheme: scheme.to_lowercase(), host: host.to_string(), path, query })
}

fn valid_host_port(host: &str) -> bool {
    let port = if let Some(rest) = host.strip_prefix('[') {
        let Some((_, after)) = rest.split_once(']') else {
            return false;
        };
        if after.is_empty() {
            return true;
        }
        match after.strip_prefix(':') {
            Some(p) => p,
            None => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((_, p)) => p,
            None => return true,
        }
    };
    port.chars().all(|c| c.is_ascii_digit())
}

impl KubeUrl {
    fn hostname(&self) -> String {
        if let Some(rest) = self.host.strip_prefix('[') {
            return rest.split_once(']').map_or(rest, |(h, _)| h).to_string();
        }
        self.host.rsplit_once(':').map_or(self.host.as_str(), |(h, _)| h).to_string()
    }

    fn port(&self) -> String {
        if let Some(rest) = self.host.strip_prefix('[') {
            return rest.split_once("]:").map_or(String::new(), |(_, p)| p.to_string());
        }
        self.host.rsplit_once(':').map_or(String::new(), |(_, p)| p.to_string())
    }
}

/// Whether `s` parses as a URL like the Kubernetes `isURL` function.
pub(crate) fn is_kube_url(s: &str) -> bool {
    parse_request_uri(s).is_some()
}

fn is_url<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let s = string_arg("isURL", &a[0])?;
    ret(Value::Bool(is_kube_url(&s)))
}

fn url<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let s = string_arg("url", &a[0])?;
    match parse_request_uri(&s) {
        Some(u) => ret(Value::Opaque(Arc::new(u))),
        None => Err(err("url", format!("URL parse error during conversion from string: parse {s:?}: invalid URI"))),
    }
}

macro_rules! url_getter {
    ($name:ident, $fname:literal, |$u:ident| $body:expr) => {
        fn $name<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
            let a = vals(&args)?;
            let $u = opaque::<KubeUrl>($fname, &a[0])?;
            ret($body)
        }
    };
}

url_getter!(url_scheme, "getScheme", |u| Value::String(Arc::new(u.scheme.clone())));
url_getter!(url_host, "getHost", |u| Value::String(Arc::new(u.host.clone())));
url_getter!(url_hostname, "getHostname", |u| Value::String(Arc::new(u.hostname())));
url_getter!(url_port, "getPort", |u| Value::String(Arc::new(u.port())));
url_getter!(url_path, "getEscapedPath", |u| Value::String(Arc::new(u.path.clone())));
url_getter!(url_query, "getQuery", |u| {
    let mut q: HashMap<String, Vec<Value>> = HashMap::new();
    for pair in u.query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        q.entry(k.to_string()).or_default().push(Value::String(Arc::new(v.to_string())));
    }
    let m: HashMap<String, Value> = q.into_iter().map(|(k, v)| (k, Value::List(Arc::new(v)))).collect();
    Value::from(m)
});

// ---- regex (k8s.io/apiserver/pkg/cel/library/regex.go) ----

fn compile_regex(function: &str, re: &str) -> Result<regex::Regex, ExecutionError> {
    regex::Regex::new(re).map_err(|e| err(function, format!("Illegal regex: {e}")))
}

fn regex_find<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let s = string_arg("find", &a[0])?;
    let re = compile_regex("find", &string_arg("find", &a[1])?)?;
    ret(Value::String(Arc::new(re.find(&s).map(|m| m.as_str().to_string()).unwrap_or_default())))
}

fn find_all(s: &str, re: &regex::Regex, n: i64) -> Value {
    let limit = if n < 0 { usize::MAX } else { n as usize };
    let found: Vec<Value> =
        re.find_iter(s).take(limit).map(|m| Value::String(Arc::new(m.as_str().to_string()))).collect();
    Value::List(Arc::new(found))
}

fn regex_find_all<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let s = string_arg("findAll", &a[0])?;
    let re = compile_regex("findAll", &string_arg("findAll", &a[1])?)?;
    ret(find_all(&s, &re, -1))
}

fn regex_find_all_n<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let s = string_arg("findAll", &a[0])?;
    let re = compile_regex("findAll", &string_arg("findAll", &a[1])?)?;
    let Value::Int(n) = a[2] else {
        return Err(err("findAll", "limit must be an int"));
    };
    ret(find_all(&s, &re, n))
}

// ---- lists (k8s.io/apiserver/pkg/cel/library/lists.go) ----

fn list_arg(function: &str, v: &Value) -> Result<Arc<Vec<Value>>, ExecutionError> {
    match v {
        Value::List(l) => Ok(l.clone()),
        other => Err(ExecutionError::no_such_overload(function, vec![format!("{:?}", other.type_of())])),
    }
}

fn cmp(function: &str, a: &Value, b: &Value) -> Result<std::cmp::Ordering, ExecutionError> {
    a.partial_cmp(b).ok_or_else(|| err(function, "list elements are not comparable"))
}

fn list_is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let l = list_arg("isSorted", &a[0])?;
    for w in l.windows(2) {
        if cmp("isSorted", &w[0], &w[1])? == std::cmp::Ordering::Greater {
            return ret(Value::Bool(false));
        }
    }
    ret(Value::Bool(true))
}

fn list_sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let l = list_arg("sum", &a[0])?;
    let mut acc: Option<Value> = None;
    for v in l.iter() {
        acc = Some(match (acc, v) {
            (None, v) => v.clone(),
            (Some(Value::Int(x)), Value::Int(y)) => {
                Value::Int(x.checked_add(*y).ok_or_else(|| err("sum", "integer overflow"))?)
            }
            (Some(Value::UInt(x)), Value::UInt(y)) => {
                Value::UInt(x.checked_add(*y).ok_or_else(|| err("sum", "unsigned integer overflow"))?)
            }
            (Some(Value::Float(x)), Value::Float(y)) => Value::Float(x + y),
            _ => return Err(err("sum", "list elements must be numbers of one type")),
        });
    }
    ret(acc.unwrap_or(Value::Int(0)))
}

fn extreme<'b, 'v>(args: Vec<CowVal<'b, 'v>>, name: &str, want: std::cmp::Ordering) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let l = list_arg(name, &a[0])?;
    let mut best: Option<&Value> = None;
    for v in l.iter() {
        best = match best {
            None => Some(v),
            Some(b) if cmp(name, v, b)? == want => Some(v),
            keep => keep,
        };
    }
    match best {
        Some(v) => ret(v.clone()),
        None => Err(err(name, format!("{name} called on empty list"))),
    }
}

fn list_min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    extreme(args, "min", std::cmp::Ordering::Less)
}

fn list_max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    extreme(args, "max", std::cmp::Ordering::Greater)
}

fn list_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let l = list_arg("indexOf", &a[0])?;
    ret(Value::Int(l.iter().position(|v| *v == a[1]).map_or(-1, |i| i as i64)))
}

fn list_last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let l = list_arg("lastIndexOf", &a[0])?;
    ret(Value::Int(l.iter().rposition(|v| *v == a[1]).map_or(-1, |i| i as i64)))
}

// ---- quantities (k8s.io/apiserver/pkg/cel/library/quantity.go) ----

/// A resource quantity; compared through its value as a float (exact for the common sizes).
#[derive(Debug, Clone)]
struct Quantity {
    value: f64,
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl Eq for Quantity {}

impl Opaque for Quantity {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

/// Parses a Kubernetes quantity (`500m`, `1Gi`, `1e3`, `2.5`).
fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let end = s
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || *c == '.' || ((*c == '+' || *c == '-') && *i == 0)))
        .map_or(s.len(), |(i, _)| i);
    let (num, suffix) = s.split_at(end);
    if num.is_empty() || num == "+" || num == "-" || num.matches('.').count() > 1 {
        return None;
    }
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    Some(n * mult)
}

fn is_quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    ret(Value::Bool(parse_quantity(&string_arg("isQuantity", &a[0])?).is_some()))
}

fn quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let s = string_arg("quantity", &a[0])?;
    match parse_quantity(&s) {
        Some(value) => ret(Value::Opaque(Arc::new(Quantity { value }))),
        None => Err(err(
            "quantity",
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        )),
    }
}

fn q_operand(function: &str, v: &Value) -> Result<f64, ExecutionError> {
    match v {
        Value::Int(i) => Ok(*i as f64),
        other => Ok(opaque::<Quantity>(function, other)?.value),
    }
}

fn q_is_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let q = opaque::<Quantity>("isInteger", &a[0])?;
    ret(Value::Bool(q.value.fract() == 0.0 && q.value.abs() < 9.2e18))
}

fn q_as_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let q = opaque::<Quantity>("asInteger", &a[0])?;
    if q.value.fract() != 0.0 || q.value.abs() >= 9.2e18 {
        return Err(err("asInteger", "cannot convert value to integer"));
    }
    ret(Value::Int(q.value as i64))
}

fn q_as_float<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    ret(Value::Float(opaque::<Quantity>("asApproximateFloat", &a[0])?.value))
}

fn q_sign<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let v = opaque::<Quantity>("sign", &a[0])?.value;
    ret(Value::Int(if v > 0.0 {
        1
    } else if v < 0.0 {
        -1
    } else {
        0
    }))
}

fn q_binary<'b, 'v>(args: Vec<CowVal<'b, 'v>>, name: &str) -> Result<(f64, f64), ExecutionError> {
    let a = vals(&args)?;
    Ok((opaque::<Quantity>(name, &a[0])?.value, q_operand(name, &a[1])?))
}

fn q_add<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let (x, y) = q_binary(args, "add")?;
    ret(Value::Opaque(Arc::new(Quantity { value: x + y })))
}

fn q_sub<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let (x, y) = q_binary(args, "sub")?;
    ret(Value::Opaque(Arc::new(Quantity { value: x - y })))
}

fn q_less<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let (x, y) = q_binary(args, "isLessThan")?;
    ret(Value::Bool(x < y))
}

fn q_greater<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let (x, y) = q_binary(args, "isGreaterThan")?;
    ret(Value::Bool(x > y))
}

fn q_compare<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let (x, y) = q_binary(args, "compareTo")?;
    ret(Value::Int(if x < y {
        -1
    } else if x > y {
        1
    } else {
        0
    }))
}

// ---- IPs and CIDRs (k8s.io/apiserver/pkg/cel/library/ip.go, cidr.go) ----

#[derive(Debug, Clone, PartialEq, Eq)]
struct Ip(IpAddr);

impl Opaque for Ip {
    fn runtime_type_name(&self) -> &str {
        "net.IP"
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Opaque for Cidr {
    fn runtime_type_name(&self) -> &str {
        "net.CIDR"
    }
}

fn parse_ip(s: &str) -> Option<IpAddr> {
    // Kubernetes rejects IPv4-mapped IPv6 and zones
    if s.contains('%') {
        return None;
    }
    let ip: IpAddr = s.parse().ok()?;
    if let IpAddr::V6(v6) = ip
        && v6.to_ipv4_mapped().is_some()
    {
        return None;
    }
    Some(ip)
}

fn parse_cidr(s: &str) -> Option<Cidr> {
    let (ip, bits) = s.split_once('/')?;
    let addr = parse_ip(ip)?;
    let prefix: u8 = bits.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (prefix <= max).then_some(Cidr { addr, prefix })
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix as u32) };
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix as u32) };
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

fn is_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    ret(Value::Bool(parse_ip(&string_arg("isIP", &a[0])?).is_some()))
}

fn ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let s = string_arg("ip", &a[0])?;
    match parse_ip(&s) {
        Some(addr) => ret(Value::Opaque(Arc::new(Ip(addr)))),
        None => Err(err("ip", format!("IP Address {s:?} parse error during conversion from string"))),
    }
}

fn is_cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    ret(Value::Bool(parse_cidr(&string_arg("isCIDR", &a[0])?).is_some()))
}

fn cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let s = string_arg("cidr", &a[0])?;
    match parse_cidr(&s) {
        Some(c) => ret(Value::Opaque(Arc::new(c))),
        None => Err(err("cidr", format!("network address {s:?} parse error during conversion from string"))),
    }
}

macro_rules! ip_pred {
    ($name:ident, $fname:literal, |$ip:ident| $body:expr) => {
        fn $name<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
            let a = vals(&args)?;
            let $ip = opaque::<Ip>($fname, &a[0])?.0;
            ret($body)
        }
    };
}

ip_pred!(ip_family, "family", |ip| Value::Int(if ip.is_ipv4() { 4 } else { 6 }));
ip_pred!(ip_is_unspecified, "isUnspecified", |ip| Value::Bool(ip.is_unspecified()));
ip_pred!(ip_is_loopback, "isLoopback", |ip| Value::Bool(ip.is_loopback()));
ip_pred!(ip_is_ll_multicast, "isLinkLocalMulticast", |ip| Value::Bool(match ip {
    IpAddr::V4(a) => a.octets()[..3] == [224, 0, 0],
    IpAddr::V6(a) => a.segments()[0] & 0xff0f == 0xff02,
}));
ip_pred!(ip_is_ll_unicast, "isLinkLocalUnicast", |ip| Value::Bool(match ip {
    IpAddr::V4(a) => a.is_link_local(),
    IpAddr::V6(a) => a.segments()[0] & 0xffc0 == 0xfe80,
}));
ip_pred!(ip_is_global_unicast, "isGlobalUnicast", |ip| Value::Bool(match ip {
    IpAddr::V4(a) =>
        !(a.is_unspecified() || a.is_loopback() || a.is_multicast() || a.is_link_local() || a.is_broadcast()),
    IpAddr::V6(a) => !(a.is_unspecified() || a.is_loopback() || a.is_multicast() || a.segments()[0] & 0xffc0 == 0xfe80),
}));

fn cidr_prefix_length<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    ret(Value::Int(opaque::<Cidr>("prefixLength", &a[0])?.prefix as i64))
}

fn cidr_masked<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let c = opaque::<Cidr>("masked", &a[0])?;
    ret(Value::Opaque(Arc::new(Cidr { addr: mask(c.addr, c.prefix), prefix: c.prefix })))
}

fn cidr_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    ret(Value::Opaque(Arc::new(Ip(opaque::<Cidr>("ip", &a[0])?.addr))))
}

fn contains(c: &Cidr, addr: IpAddr) -> bool {
    addr.is_ipv4() == c.addr.is_ipv4() && mask(addr, c.prefix) == mask(c.addr, c.prefix)
}

fn cidr_contains_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let c = opaque::<Cidr>("containsIP", &a[0])?;
    let addr = match &a[1] {
        Value::String(s) => parse_ip(s).ok_or_else(|| err("containsIP", "invalid IP"))?,
        other => opaque::<Ip>("containsIP", other)?.0,
    };
    ret(Value::Bool(contains(c, addr)))
}

fn cidr_contains_cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let a = vals(&args)?;
    let c = opaque::<Cidr>("containsCIDR", &a[0])?;
    let other = match &a[1] {
        Value::String(s) => parse_cidr(s).ok_or_else(|| err("containsCIDR", "invalid CIDR"))?,
        other => opaque::<Cidr>("containsCIDR", other)?.clone(),
    };
    ret(Value::Bool(other.prefix >= c.prefix && contains(c, other.addr)))
}
