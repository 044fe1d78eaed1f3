//! Get and list (kube-apiserver `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/get.go`): reads, list
//! options, pages and continue tokens.

use super::*;

/// Reads one object.
pub fn get(ctx: &Ctx, name: &str) -> Result<Value, ApiError> {
    let st = ctx.server.inner.state.lock().unwrap();
    st.get_key(&ctx.key(), &ctx.ns_key(), name)
        .map(|o| ctx.out(&o))
        .ok_or_else(|| ApiError::not_found(&ctx.rname(), name))
}

/// List options.
#[derive(Debug, Default)]
pub struct ListOpts {
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
    /// Page size (0 = all).
    pub limit: usize,
    /// Continue token.
    pub cont: Option<String>,
}

/// One page of a list: items, list resourceVersion, continue token, remaining item count.
pub type Page = (Vec<Value>, u64, Option<String>, Option<u64>);

/// Lists objects (one page).
pub fn list_raw(ctx: &Ctx, opts: &ListOpts) -> Result<Page, ApiError> {
    let st = ctx.server.inner.state.lock().unwrap();
    let (list_rv, start_after) = match &opts.cont {
        Some(c) if !c.is_empty() => {
            let (rv, after) = decode_continue(c).ok_or_else(|| ApiError::bad_request(continue_error(c)))?;
            let (ns, name) = after.split_once('\u{1}').unwrap_or(("", after.as_str()));
            (rv, Some((ns.to_string(), name.to_string())))
        }
        _ => (st.rv, None),
    };
    let mut items = Vec::new();
    let mut cont = None;
    let mut remaining = None;
    let mut iter = st.range_after(&ctx.key(), ctx.ns.as_deref(), start_after);
    for o in iter.by_ref() {
        if !opts.labels.matches(o) || !opts.fields.matches(o) {
            continue;
        }
        if opts.limit > 0 && items.len() == opts.limit {
            let last = items.last().map(|v: &Value| obj_key(v)).unwrap_or_default();
            cont = Some(encode_continue(list_rv, &last));
            let rest = 1 + iter.filter(|o| opts.labels.matches(o) && opts.fields.matches(o)).count();
            remaining = Some(rest as u64);
            break;
        }
        items.push(ctx.out(o));
    }
    Ok((items, list_rv, cont, remaining))
}

pub(crate) fn obj_key(o: &Value) -> String {
    let ns = o.pointer("/metadata/namespace").and_then(|n| n.as_str()).unwrap_or_default();
    let name = o.pointer("/metadata/name").and_then(|n| n.as_str()).unwrap_or_default();
    format!("{ns}\u{1}{name}")
}

pub(crate) fn encode_continue(rv: u64, after: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&json!({"v":"meta.k8s.io/v1","rv":rv,"start":after})).unwrap())
}

/// The message of apiserver `storage/continue.go` `DecodeContinue` for a token that does not decode:
/// base64 (RawURLEncoding) then JSON errors as Go words them.
pub(crate) fn continue_error(c: &str) -> String {
    use base64::Engine;
    // Go's RawURLEncoding ignores trailing bits.
    let lenient = base64::engine::GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let inner = match lenient.decode(c) {
        Err(base64::DecodeError::InvalidByte(at, _)) | Err(base64::DecodeError::InvalidLastSymbol(at, _)) => {
            format!("illegal base64 data at input byte {at}")
        }
        Err(_) => format!("illegal base64 data at input byte {}", c.len()),
        Ok(raw) => match raw.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(&b) if !matches!(b, b'{' | b'[' | b'"' | b't' | b'f' | b'n' | b'-' | b'0'..=b'9') => {
                let ch = if (0x20..0x7f).contains(&b) && b != b'\'' {
                    (b as char).to_string()
                } else {
                    format!("\\u{:04x}", b)
                };
                format!("invalid character '{ch}' looking for beginning of value")
            }
            _ => "incorrect encoded start resourceVersion (version meta.k8s.io/v1)".to_string(),
        },
    };
    format!("invalid continue token: continue key is not valid: {inner}")
}

pub(crate) fn decode_continue(c: &str) -> Option<(u64, String)> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(c.trim_end_matches('=')).ok()?;
    let v: Value = serde_json::from_slice(&raw).ok()?;
    Some((v.get("rv")?.as_u64()?, v.get("start")?.as_str()?.to_string()))
}

/// Lists objects as a `<Kind>List`.
pub fn list(ctx: &Ctx, opts: &ListOpts) -> Result<Value, ApiError> {
    let (items, rv, cont, remaining) = list_raw(ctx, opts)?;
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = c.into();
    } else if ctx.rt.crd {
        // Unstructured list metadata always carries `continue` (apimachinery unstructured.UnstructuredList).
        meta["continue"] = "".into();
    }
    // The storage counts the remaining items only for lists without selectors
    // (apiserver pkg/storage/etcd3/store.go `GetList`: `if pred.Empty()`).
    if let Some(r) = remaining
        && opts.labels.0.is_empty()
        && opts.fields.0.is_empty()
    {
        meta["remainingItemCount"] = r.into();
    }
    Ok(json!({"kind": ctx.rt.list_kind, "apiVersion": ctx.api_version(), "metadata": meta, "items": items}))
}

/// Parses list options from the query.
pub fn list_opts(q: &HashMap<String, String>, rt: &ResourceType) -> Result<ListOpts, ApiError> {
    Ok(ListOpts {
        labels: LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
            .map_err(ApiError::bad_request)?,
        fields: FieldSelector::parse_for(
            q.get("fieldSelector").map(String::as_str).unwrap_or(""),
            &rt.group,
            &rt.plural,
            rt.crd,
        )
        .map_err(ApiError::bad_request)?,
        // The query parameter converter's strconv error (apimachinery `pkg/conversion/queryparams`).
        limit: match q.get("limit") {
            Some(l) if !l.is_empty() => l.parse::<i64>().map(|n| n.max(0) as usize).map_err(|_| {
                ApiError::bad_request(format!("strconv.ParseInt: parsing {}: invalid syntax", Value::String(l.clone())))
            })?,
            _ => 0,
        },
        cont: q.get("continue").cloned(),
    })
}
