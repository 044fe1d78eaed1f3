//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!key`) and field selectors.

use serde_json::Value;

/// One label requirement.
#[derive(Debug, Clone, PartialEq)]
pub enum LabelReq {
    /// `key=value` / `key==value` / `key in (a,b)`.
    In(String, Vec<String>),
    /// `key!=value` / `key notin (a,b)`.
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    NotExists(String),
    /// `key>n` / `key<n`.
    Gt(String, i64),
    /// `key<n`.
    Lt(String, i64),
}

/// A parsed label selector (all requirements ANDed).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(pub Vec<LabelReq>);

impl LabelSelector {
    /// Parses the `labelSelector` query string as kube-apiserver does (apimachinery `labels.Parse`, through the
    /// `label-selector` crate); the error is the server's message.
    pub fn parse(s: &str) -> Result<Self, String> {
        use label_selector::Operator as Op;
        let reqs = label_selector::parse(s).map_err(|e| e.to_string())?;
        Ok(LabelSelector(
            reqs.into_iter()
                .map(|r| match r.operator {
                    Op::Equals | Op::DoubleEquals | Op::In => LabelReq::In(r.key, r.values),
                    Op::NotEquals | Op::NotIn => LabelReq::NotIn(r.key, r.values),
                    Op::Exists => LabelReq::Exists(r.key),
                    Op::DoesNotExist => LabelReq::NotExists(r.key),
                    // The parser checked that the one value is an integer.
                    Op::GreaterThan => LabelReq::Gt(r.key, r.values[0].parse().unwrap_or(i64::MAX)),
                    Op::LessThan => LabelReq::Lt(r.key, r.values[0].parse().unwrap_or(i64::MIN)),
                })
                .collect(),
        ))
    }

    /// Builds a selector from a `metav1.LabelSelector` JSON object (matchLabels + matchExpressions).
    pub fn from_json(v: &Value) -> Self {
        let mut reqs = Vec::new();
        if let Some(m) = v.get("matchLabels").and_then(|m| m.as_object()) {
            for (k, val) in m {
                reqs.push(LabelReq::In(k.clone(), vec![val.as_str().unwrap_or_default().into()]));
            }
        }
        if let Some(exprs) = v.get("matchExpressions").and_then(|m| m.as_array()) {
            for e in exprs {
                let k = e.get("key").and_then(|k| k.as_str()).unwrap_or_default().to_string();
                let vals: Vec<String> = e
                    .get("values")
                    .and_then(|v| v.as_array())
                    .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
                    .unwrap_or_default();
                match e.get("operator").and_then(|o| o.as_str()).unwrap_or_default() {
                    "In" => reqs.push(LabelReq::In(k, vals)),
                    "NotIn" => reqs.push(LabelReq::NotIn(k, vals)),
                    "Exists" => reqs.push(LabelReq::Exists(k)),
                    "DoesNotExist" => reqs.push(LabelReq::NotExists(k)),
                    _ => {}
                }
            }
        }
        LabelSelector(reqs)
    }

    /// Renders like `metav1.FormatLabelSelector` (used for the scale subresource).
    pub fn to_string_form(&self) -> String {
        self.0
            .iter()
            .map(|r| match r {
                LabelReq::In(k, v) if v.len() == 1 => format!("{k}={}", v[0]),
                LabelReq::In(k, v) => format!("{k} in ({})", v.join(",")),
                LabelReq::NotIn(k, v) if v.len() == 1 => format!("{k}!={}", v[0]),
                LabelReq::NotIn(k, v) => format!("{k} notin ({})", v.join(",")),
                LabelReq::Exists(k) => k.clone(),
                LabelReq::NotExists(k) => format!("!{k}"),
                LabelReq::Gt(k, n) => format!("{k}>{n}"),
                LabelReq::Lt(k, n) => format!("{k}<{n}"),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Whether the object's labels match.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(|l| l.as_object());
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(|v| v.as_str());
        self.0.iter().all(|r| match r {
            LabelReq::In(k, vals) => get(k).is_some_and(|v| vals.iter().any(|x| x == v)),
            LabelReq::NotIn(k, vals) => get(k).is_none_or(|v| !vals.iter().any(|x| x == v)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::Gt(k, n) => get(k).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *n),
            LabelReq::Lt(k, n) => get(k).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *n),
        })
    }
}

/// A parsed field selector: (path, equal?, value) triples ANDed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(pub Vec<(String, bool, String)>);

/// Field labels kube-apiserver supports per resource besides `metadata.name`/`metadata.namespace`.
fn supported_fields(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "reason",
            "reportingController",
            "type",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "persistentvolumeclaims") => &["status.phase"],
        ("", "replicationcontrollers") => &["status.replicas"],
        ("batch", "jobs") => &["status.successful"],
        ("apps", "replicasets") => &["status.replicas"],
        ("certificates.k8s.io", _) => &["spec.signerName"],
        _ => &[],
    }
}

impl FieldSelector {
    /// Parses `fieldSelector`, rejecting fields the real server does not support for this resource.
    pub fn parse(s: &str, group: &str, plural: &str) -> Result<Self, String> {
        Self::parse_for(s, group, plural, false)
    }

    /// [`FieldSelector::parse`] for a built-in kind (`crd == false`) or a custom resource.
    pub fn parse_for(s: &str, group: &str, plural: &str, crd: bool) -> Result<Self, String> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("invalid selector: '{s}'; can't understand '{part}'"));
            };
            let k = k.trim();
            if k != "metadata.name" && k != "metadata.namespace" && crd {
                // Custom resources: apiextensions-apiserver's field label conversion
                // (`pkg/apiserver/customresource_handler.go`).
                return Err(format!("field label not supported: {k}"));
            }
            if (group, plural) == ("batch", "jobs")
                && k != "metadata.name"
                && k != "metadata.namespace"
                && !supported_fields(group, plural).contains(&k)
            {
                // `pkg/apis/batch/v1/conversion.go` names the kind.
                return Err(format!("field label {k:?} not supported for Job"));
            }
            if k != "metadata.name" && k != "metadata.namespace" && !supported_fields(group, plural).contains(&k) {
                // Kinds with only the default field selectors answer like apimachinery
                // `runtime.DefaultMetaV1FieldSelectorConversion`; the others like their conversion funcs.
                if supported_fields(group, plural).is_empty() {
                    return Err(format!(
                        "\"{k}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                    ));
                }
                return Err(format!("field label not supported: {k}"));
            }
            let k = if group == "events.k8s.io" { super::events::storage_field(k) } else { k.to_string() };
            out.push((k, eq, v.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    /// Whether the object matches.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut cur = Some(obj);
            for seg in path.split('.') {
                cur = cur.and_then(|c| c.get(seg));
            }
            let have = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::Object(o)) if path == "source" => {
                    o.get("component").and_then(|c| c.as_str()).unwrap_or_default().to_string()
                }
                _ => String::new(),
            };
            (have == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_operators() {
        let o = json!({"metadata":{"labels":{"app":"etcd","role":"main","n":"5"}}});
        for (sel, want) in [
            ("app=etcd", true),
            ("app==etcd", true),
            ("app!=etcd", false),
            ("app in (etcd,x)", true),
            ("role notin (main)", false),
            ("app,role", true),
            ("!missing", true),
            ("!app", false),
            ("app=etcd,role in (events, main)", true),
            ("n>4", true),
            ("missing!=x", true),
        ] {
            assert_eq!(LabelSelector::parse(sel).unwrap().matches(&o), want, "{sel}");
        }
        assert!(LabelSelector::parse("a in b").is_err());
    }

    #[test]
    fn field_selector_rejects_unsupported_fields() {
        assert!(FieldSelector::parse("spec.foo=1", "", "configmaps").is_err());
        let f = FieldSelector::parse("status.phase!=Running,metadata.name=p", "", "pods").unwrap();
        assert!(f.matches(&json!({"metadata":{"name":"p"},"status":{"phase":"Pending"}})));
    }
}
