//! Server-side Table output (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`): CRD printer
//! columns evaluated with JSONPath, and kubectl-like default columns for built-in kinds.

use serde_json::{Value, json};

use super::resources::{PrinterColumn, ResourceType};

/// Human duration like `k8s.io/apimachinery/pkg/util/duration.HumanDuration`.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let m = s / 60;
    if m < 10 {
        let rs = s % 60;
        return if rs == 0 { format!("{m}m") } else { format!("{m}m{rs}s") };
    }
    if m < 180 {
        return format!("{m}m");
    }
    let h = m / 60;
    if h < 8 {
        let rm = m % 60;
        return if rm == 0 { format!("{h}h") } else { format!("{h}h{rm}m") };
    }
    if h < 48 {
        return format!("{h}h");
    }
    let d = h / 24;
    if h < 24 * 8 {
        let rh = h % 24;
        return if rh == 0 { format!("{d}d") } else { format!("{d}d{rh}h") };
    }
    if d < 365 * 2 {
        return format!("{d}d");
    }
    let y = d / 365;
    if d < 365 * 8 {
        let rd = d % 365;
        return if rd == 0 { format!("{y}y") } else { format!("{y}y{rd}d") };
    }
    format!("{y}y")
}

fn age_of(ts: &str) -> String {
    match ts.parse::<jiff::Timestamp>() {
        Ok(t) => human_duration(jiff::Timestamp::now().as_second() - t.as_second()),
        Err(_) => "<unknown>".into(),
    }
}

/// Evaluates a kubectl-style JSONPath (`.a.b`, `.a[0]`, `.a[*].b`, `.a[?(@.type=="Ready")].status`).
pub fn jsonpath(obj: &Value, path: &str) -> Vec<Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}').trim_start_matches('$');
    let mut cur = vec![obj.clone()];
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let field = &r[..end];
            if !field.is_empty() {
                cur = cur.iter().filter_map(|v| v.get(field).cloned()).collect();
            }
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else {
                return vec![];
            };
            let inner = &r[..end];
            rest = &r[end + 1..];
            if inner == "*" {
                cur = cur.iter().flat_map(|v| v.as_array().cloned().unwrap_or_default()).collect();
            } else if let Some(f) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
                let (lhs, rhs, neq) = match f.split_once("!=") {
                    Some((l, r)) => (l, r, true),
                    None => match f.split_once("==") {
                        Some((l, r)) => (l, r, false),
                        None => return vec![],
                    },
                };
                let field = lhs.trim().trim_start_matches("@.");
                let want = rhs.trim().trim_matches('"').trim_matches('\'');
                cur = cur
                    .iter()
                    .flat_map(|v| v.as_array().cloned().unwrap_or_default())
                    .filter(|it| {
                        let have = match it.get(field) {
                            Some(Value::String(s)) => s.clone(),
                            Some(v) => v.to_string(),
                            None => String::new(),
                        };
                        (have == want) != neq
                    })
                    .collect();
            } else if let Ok(i) = inner.parse::<i64>() {
                cur = cur
                    .iter()
                    .filter_map(|v| {
                        let a = v.as_array()?;
                        let idx = if i < 0 { a.len() as i64 + i } else { i };
                        a.get(idx as usize).cloned()
                    })
                    .collect();
            } else {
                let key = inner.trim_matches('\'').trim_matches('"');
                cur = cur.iter().filter_map(|v| v.get(key).cloned()).collect();
            }
        } else {
            return vec![];
        }
    }
    cur
}

fn s(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

fn builtin_cell(key: &str, o: &Value) -> Value {
    let i = |p: &str| o.pointer(p).and_then(|v| v.as_i64()).unwrap_or(0);
    match key {
        "@pod.ready" => {
            let cs = o.pointer("/status/containerStatuses").and_then(|c| c.as_array()).cloned().unwrap_or_default();
            let total = o.pointer("/spec/containers").and_then(|c| c.as_array()).map(|a| a.len()).unwrap_or(0);
            let ready = cs.iter().filter(|c| c.get("ready").and_then(|r| r.as_bool()) == Some(true)).count();
            json!(format!("{ready}/{total}"))
        }
        "@pod.status" => {
            if o.pointer("/metadata/deletionTimestamp").is_some() {
                return json!("Terminating");
            }
            let cs = o.pointer("/status/containerStatuses").and_then(|c| c.as_array()).cloned().unwrap_or_default();
            for c in &cs {
                if let Some(r) = c.pointer("/state/waiting/reason").and_then(|r| r.as_str()) {
                    return json!(r);
                }
                if let Some(r) = c.pointer("/state/terminated/reason").and_then(|r| r.as_str()) {
                    return json!(r);
                }
            }
            let reason = s(o.pointer("/status/reason"));
            json!(if reason.is_empty() { s(o.pointer("/status/phase")) } else { reason })
        }
        "@pod.restarts" => {
            let n: i64 = o
                .pointer("/status/containerStatuses")
                .and_then(|c| c.as_array())
                .map(|a| a.iter().map(|c| c.get("restartCount").and_then(|r| r.as_i64()).unwrap_or(0)).sum())
                .unwrap_or(0);
            json!(n.to_string())
        }
        "@count.data" => {
            let n = o.get("data").and_then(|d| d.as_object()).map(|d| d.len()).unwrap_or(0)
                + o.get("binaryData").and_then(|d| d.as_object()).map(|d| d.len()).unwrap_or(0);
            json!(n)
        }
        "@pvc.modes" => {
            let modes: Vec<String> = o
                .pointer("/status/accessModes")
                .and_then(|m| m.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|m| m.as_str())
                        .map(|m| match m {
                            "ReadWriteOnce" => "RWO".to_string(),
                            "ReadOnlyMany" => "ROX".to_string(),
                            "ReadWriteMany" => "RWX".to_string(),
                            "ReadWriteOncePod" => "RWOP".to_string(),
                            x => x.to_string(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            json!(modes.join(","))
        }
        "@svc.external" => {
            let ext = o
                .pointer("/spec/externalIPs")
                .and_then(|e| e.as_array())
                .map(|a| a.iter().map(|x| s(Some(x))).collect::<Vec<_>>().join(","));
            json!(ext.filter(|e| !e.is_empty()).unwrap_or_else(|| "<none>".into()))
        }
        "@svc.ports" => {
            let ports: Vec<String> = o
                .pointer("/spec/ports")
                .and_then(|p| p.as_array())
                .map(|a| {
                    a.iter()
                        .map(|p| {
                            let proto = p.get("protocol").and_then(|x| x.as_str()).unwrap_or("TCP");
                            match p.get("nodePort") {
                                Some(np) => format!("{}:{}/{}", i64_of(p.get("port")), np, proto),
                                None => format!("{}/{}", i64_of(p.get("port")), proto),
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            json!(if ports.is_empty() { "<none>".to_string() } else { ports.join(",") })
        }
        "@svc.selector" => {
            let sel = o
                .pointer("/spec/selector")
                .and_then(|s| s.as_object())
                .map(|m| m.iter().map(|(k, v)| format!("{k}={}", s(Some(v)))).collect::<Vec<_>>().join(","));
            json!(sel.filter(|s| !s.is_empty()).unwrap_or_else(|| "<none>".into()))
        }
        "@ep.addresses" => {
            let mut addrs = Vec::new();
            for sub in o.get("subsets").and_then(|s| s.as_array()).cloned().unwrap_or_default() {
                for a in sub.get("addresses").and_then(|a| a.as_array()).cloned().unwrap_or_default() {
                    for p in sub.get("ports").and_then(|a| a.as_array()).cloned().unwrap_or_default() {
                        addrs.push(format!("{}:{}", s(a.get("ip")), i64_of(p.get("port"))));
                    }
                }
            }
            json!(if addrs.is_empty() { "<none>".to_string() } else { addrs.join(",") })
        }
        "@node.status" => {
            let ready = o
                .pointer("/status/conditions")
                .and_then(|c| c.as_array())
                .and_then(|a| a.iter().find(|c| c.get("type").and_then(|t| t.as_str()) == Some("Ready")))
                .and_then(|c| c.get("status").and_then(|s| s.as_str()).map(String::from));
            json!(if ready.as_deref() == Some("True") { "Ready" } else { "NotReady" })
        }
        "@node.roles" => {
            let roles: Vec<String> = o
                .pointer("/metadata/labels")
                .and_then(|l| l.as_object())
                .map(|l| {
                    l.keys().filter_map(|k| k.strip_prefix("node-role.kubernetes.io/").map(String::from)).collect()
                })
                .unwrap_or_default();
            json!(if roles.is_empty() { "<none>".to_string() } else { roles.join(",") })
        }
        "@event.lastseen" => {
            let ts = o
                .get("lastTimestamp")
                .and_then(|t| t.as_str())
                .or_else(|| o.get("eventTime").and_then(|t| t.as_str()))
                .or_else(|| o.pointer("/metadata/creationTimestamp").and_then(|t| t.as_str()));
            json!(ts.map(age_of).unwrap_or_else(|| "<unknown>".into()))
        }
        "@event.object" => json!(format!(
            "{}/{}",
            s(o.pointer("/involvedObject/kind")).to_lowercase(),
            s(o.pointer("/involvedObject/name"))
        )),
        "@ready.replicas" => json!(format!(
            "{}/{}",
            i("/status/readyReplicas"),
            o.pointer("/spec/replicas").and_then(|r| r.as_i64()).unwrap_or(1)
        )),
        "@containers.names" | "@containers.images" => {
            let f = if key.ends_with("names") { "name" } else { "image" };
            let v: Vec<String> = o
                .pointer("/spec/template/spec/containers")
                .and_then(|c| c.as_array())
                .map(|a| a.iter().map(|c| s(c.get(f))).collect())
                .unwrap_or_default();
            json!(v.join(","))
        }
        "@job.status" => {
            let conds = o.pointer("/status/conditions").and_then(|c| c.as_array()).cloned().unwrap_or_default();
            let has = |t: &str| {
                conds.iter().any(|c| {
                    c.get("type").and_then(|x| x.as_str()) == Some(t)
                        && c.get("status").and_then(|x| x.as_str()) == Some("True")
                })
            };
            json!(if has("Complete") {
                "Complete"
            } else if has("Failed") {
                "Failed"
            } else if has("Suspended") {
                "Suspended"
            } else {
                "Running"
            })
        }
        "@job.completions" => json!(format!(
            "{}/{}",
            i("/status/succeeded"),
            o.pointer("/spec/completions").and_then(|c| c.as_i64()).unwrap_or(1)
        )),
        "@binding.role" => json!(format!("{}/{}", s(o.pointer("/roleRef/kind")), s(o.pointer("/roleRef/name")))),
        _ => Value::Null,
    }
}

fn i64_of(v: Option<&Value>) -> String {
    match v {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    }
}

fn cell(c: &PrinterColumn, o: &Value) -> Value {
    if c.json_path.starts_with('@') {
        return builtin_cell(&c.json_path, o);
    }
    let vals = jsonpath(o, &c.json_path);
    if vals.is_empty() {
        return Value::Null;
    }
    if c.type_ == "date" {
        return json!(vals[0].as_str().map(age_of).unwrap_or_else(|| "<unknown>".into()));
    }
    if vals.len() == 1 {
        return match (&vals[0], c.type_.as_str()) {
            (Value::Object(_) | Value::Array(_), _) => json!(vals[0].to_string()),
            (v, _) => v.clone(),
        };
    }
    json!(vals.iter().map(|v| s(Some(v))).collect::<Vec<_>>().join(","))
}

fn row(rt: &ResourceType, o: &Value, include: &str) -> Value {
    let mut cells = vec![o.pointer("/metadata/name").cloned().unwrap_or(Value::Null)];
    for c in &rt.columns {
        cells.push(cell(c, o));
    }
    let object = match include {
        "None" => Value::Null,
        "Object" => o.clone(),
        _ => super::rest::partial_metadata_of(o, rt.group == "apps" && rt.kind == "DaemonSet"),
    };
    let mut r = json!({"cells": cells});
    if !object.is_null() {
        r["object"] = object;
    }
    r
}

/// The column definitions kube-apiserver v1.36 serves for the built-in kinds (name, type, format, priority,
/// description), as its printers declare them (kubernetes `pkg/printers/internalversion/printers.go`; the
/// descriptions are the API field documentation), keyed by `group/plural`.
fn recorded_columns() -> &'static serde_json::Map<String, Value> {
    static C: std::sync::OnceLock<serde_json::Map<String, Value>> = std::sync::OnceLock::new();
    C.get_or_init(|| serde_json::from_str(include_str!("table_columns.json")).unwrap_or_default())
}

fn none_if_empty(v: String) -> Value {
    json!(if v.is_empty() { "<none>".to_string() } else { v })
}

fn join_strs(o: &Value, ptr: &str) -> String {
    o.pointer(ptr)
        .and_then(|a| a.as_array())
        .map(|a| a.iter().map(|x| s(Some(x))).collect::<Vec<_>>().join(","))
        .unwrap_or_default()
}

fn selector_string(sel: Option<&Value>) -> String {
    let Some(sel) = sel else { return String::new() };
    let mut parts: Vec<String> = sel
        .get("matchLabels")
        .and_then(|m| m.as_object())
        .map(|m| m.iter().map(|(k, v)| format!("{k}={}", s(Some(v)))).collect())
        .unwrap_or_default();
    if parts.is_empty()
        && let Some(m) =
            sel.as_object().filter(|m| !m.contains_key("matchLabels") && !m.contains_key("matchExpressions"))
    {
        parts = m.iter().map(|(k, v)| format!("{k}={}", s(Some(v)))).collect();
    }
    parts.join(",")
}

/// Cells of the printer columns the embedded column table has no entry for (printers.go `print*`).
fn printer_cell(plural: &str, name: &str, o: &Value) -> Value {
    let containers = |f: &str, base: &str| -> String {
        o.pointer(base)
            .and_then(|c| c.as_array())
            .map(|a| a.iter().map(|c| s(c.get(f))).collect::<Vec<_>>().join(","))
            .unwrap_or_default()
    };
    let tmpl = if plural == "cronjobs" {
        "/spec/jobTemplate/spec/template/spec/containers"
    } else {
        "/spec/template/spec/containers"
    };
    match (plural, name) {
        (_, "Containers") => json!(containers("name", tmpl)),
        (_, "Images") => json!(containers("image", tmpl)),
        ("cronjobs", "Selector") => none_if_empty(selector_string(o.pointer("/spec/jobTemplate/spec/selector"))),
        (_, "Selector") => none_if_empty(selector_string(o.pointer("/spec/selector"))),
        ("pods", "IP") => none_if_empty(s(o.pointer("/status/podIP"))),
        ("pods", "Node") => none_if_empty(s(o.pointer("/spec/nodeName"))),
        ("pods", "Nominated Node") => none_if_empty(s(o.pointer("/status/nominatedNodeName"))),
        ("pods", "Readiness Gates") => {
            let n = o.pointer("/spec/readinessGates").and_then(|g| g.as_array()).map(|a| a.len()).unwrap_or(0);
            if n == 0 { json!("<none>") } else { json!(format!("0/{n}")) }
        }
        // printPersistentVolumeClaim: empty strings for unbound claims, `<unset>` without a class.
        ("persistentvolumeclaims", "Volume") => json!(s(o.pointer("/spec/volumeName"))),
        ("persistentvolumeclaims", "Capacity") => json!(s(o.pointer("/status/capacity/storage"))),
        ("persistentvolumeclaims", "StorageClass") => json!(s(o.pointer("/spec/storageClassName"))),
        ("persistentvolumeclaims", "VolumeAttributesClass") => {
            let v = s(o.pointer("/spec/volumeAttributesClassName"));
            json!(if v.is_empty() { "<unset>".to_string() } else { v })
        }
        ("persistentvolumeclaims" | "persistentvolumes", "VolumeMode") => {
            none_if_empty(s(o.pointer("/spec/volumeMode")))
        }
        ("persistentvolumes", "Access Modes") => json!(
            join_strs(o, "/spec/accessModes")
                .replace("ReadWriteOncePod", "RWOP")
                .replace("ReadWriteOnce", "RWO")
                .replace("ReadOnlyMany", "ROX")
                .replace("ReadWriteMany", "RWX")
        ),
        ("persistentvolumes", "Reclaim Policy") => json!(s(o.pointer("/spec/persistentVolumeReclaimPolicy"))),
        ("persistentvolumes", "Claim") => {
            let ns = s(o.pointer("/spec/claimRef/namespace"));
            let n = s(o.pointer("/spec/claimRef/name"));
            json!(if n.is_empty() { String::new() } else { format!("{ns}/{n}") })
        }
        ("persistentvolumes", "StorageClass") => json!(s(o.pointer("/spec/storageClassName"))),
        ("persistentvolumes", "Reason") => json!(s(o.pointer("/status/reason"))),
        ("daemonsets", "Desired") => {
            json!(o.pointer("/status/desiredNumberScheduled").and_then(|v| v.as_i64()).unwrap_or(0))
        }
        ("daemonsets", "Current") => {
            json!(o.pointer("/status/currentNumberScheduled").and_then(|v| v.as_i64()).unwrap_or(0))
        }
        ("daemonsets", "Ready") => json!(o.pointer("/status/numberReady").and_then(|v| v.as_i64()).unwrap_or(0)),
        ("daemonsets", "Up-to-date") => {
            json!(o.pointer("/status/updatedNumberScheduled").and_then(|v| v.as_i64()).unwrap_or(0))
        }
        ("daemonsets", "Available") => {
            json!(o.pointer("/status/numberAvailable").and_then(|v| v.as_i64()).unwrap_or(0))
        }
        ("daemonsets", "Node Selector") => {
            let sel = o
                .pointer("/spec/template/spec/nodeSelector")
                .and_then(|m| m.as_object())
                .map(|m| m.iter().map(|(k, v)| format!("{k}={}", s(Some(v)))).collect::<Vec<_>>().join(","))
                .unwrap_or_default();
            none_if_empty(sel)
        }
        ("jobs", "Duration") => json!(""),
        ("cronjobs", "Timezone") => none_if_empty(s(o.pointer("/spec/timeZone"))),
        ("cronjobs", "Active") => {
            json!(o.pointer("/status/active").and_then(|a| a.as_array()).map(|a| a.len()).unwrap_or(0))
        }
        ("cronjobs", "Last Schedule") => match o.pointer("/status/lastScheduleTime").and_then(|t| t.as_str()) {
            Some(t) => json!(age_of(t)),
            None => json!("<none>"),
        },
        ("deployments", "Up-to-date") => {
            json!(o.pointer("/status/updatedReplicas").and_then(|v| v.as_i64()).unwrap_or(0))
        }
        ("deployments", "Available") => {
            json!(o.pointer("/status/availableReplicas").and_then(|v| v.as_i64()).unwrap_or(0))
        }
        ("replicasets", "Desired") => json!(o.pointer("/spec/replicas").and_then(|v| v.as_i64()).unwrap_or(0)),
        ("replicasets", "Current") => json!(o.pointer("/status/replicas").and_then(|v| v.as_i64()).unwrap_or(0)),
        ("replicasets", "Ready") => json!(o.pointer("/status/readyReplicas").and_then(|v| v.as_i64()).unwrap_or(0)),
        ("events", "Subobject") => {
            json!(s(o.pointer("/involvedObject/fieldPath").or(o.pointer("/regarding/fieldPath"))))
        }
        // printEvent: `component, host` of the source, else `reportingController, reportingInstance`.
        ("events", "Source") => {
            let src = o.get("source").or(o.get("deprecatedSource"));
            let c = s(src.and_then(|x| x.get("component")));
            let h = s(src.and_then(|x| x.get("host")));
            let (c, h) = if c.is_empty() {
                (s(o.get("reportingComponent").or(o.get("reportingController"))), s(o.get("reportingInstance")))
            } else {
                (c, h)
            };
            json!(if h.is_empty() { c } else { format!("{c}, {h}") })
        }
        ("events", "Type") => json!(s(o.get("type"))),
        ("events", "Message") => json!(s(o.get("message").or(o.get("note")))),
        ("events", "Object") => {
            let r = o.get("involvedObject").or(o.get("regarding"));
            json!(format!("{}/{}", s(r.and_then(|x| x.get("kind"))).to_lowercase(), s(r.and_then(|x| x.get("name")))))
        }
        ("events", "First Seen") => {
            let t = o
                .get("firstTimestamp")
                .or(o.get("deprecatedFirstTimestamp"))
                .and_then(|t| t.as_str())
                .or_else(|| o.get("eventTime").and_then(|t| t.as_str()));
            json!(t.map(age_of).unwrap_or_else(|| "<unknown>".into()))
        }
        ("events", "Count") => json!(o.get("count").or(o.get("deprecatedCount")).and_then(|c| c.as_i64()).unwrap_or(1)),
        // printEvent: the last timestamp, else the event time; never the creation time.
        ("events", "Last Seen") => {
            let t = o
                .get("lastTimestamp")
                .or(o.get("deprecatedLastTimestamp"))
                .and_then(|t| t.as_str())
                .or_else(|| o.get("eventTime").and_then(|t| t.as_str()));
            json!(t.map(age_of).unwrap_or_else(|| "<unknown>".into()))
        }
        ("events", "Name") => json!(s(o.pointer("/metadata/name"))),
        ("rolebindings" | "clusterrolebindings", k @ ("Users" | "Groups" | "ServiceAccounts")) => {
            let want = match k {
                "Users" => "User",
                "Groups" => "Group",
                _ => "ServiceAccount",
            };
            let v: Vec<String> = o
                .get("subjects")
                .and_then(|x| x.as_array())
                .map(|a| {
                    a.iter()
                        .filter(|sub| sub.get("kind").and_then(|k| k.as_str()) == Some(want))
                        .map(|sub| {
                            if want == "ServiceAccount" {
                                format!("{}/{}", s(sub.get("namespace")), s(sub.get("name")))
                            } else {
                                s(sub.get("name"))
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            json!(v.join(", "))
        }
        ("storageclasses", "ReclaimPolicy") => json!(s(o.get("reclaimPolicy"))),
        ("storageclasses", "VolumeBindingMode") => json!(s(o.get("volumeBindingMode"))),
        ("nodes", "Internal-IP" | "External-IP") => {
            let t = if name == "Internal-IP" { "InternalIP" } else { "ExternalIP" };
            let ip = o
                .pointer("/status/addresses")
                .and_then(|a| a.as_array())
                .and_then(|a| a.iter().find(|x| x.get("type").and_then(|y| y.as_str()) == Some(t)))
                .map(|x| s(x.get("address")))
                .unwrap_or_default();
            none_if_empty(ip)
        }
        ("nodes", "OS-Image" | "Kernel-Version" | "Container-Runtime") => {
            let f = match name {
                "OS-Image" => "osImage",
                "Kernel-Version" => "kernelVersion",
                _ => "containerRuntimeVersion",
            };
            let v = s(o.pointer(&format!("/status/nodeInfo/{f}")));
            json!(if v.is_empty() { "<unknown>".to_string() } else { v })
        }
        ("nodes", "Status") => {
            let ready = o
                .pointer("/status/conditions")
                .and_then(|c| c.as_array())
                .and_then(|a| a.iter().find(|c| c.get("type").and_then(|t| t.as_str()) == Some("Ready")))
                .and_then(|c| c.get("status").and_then(|s| s.as_str()).map(String::from));
            let mut st = match ready.as_deref() {
                Some("True") => "Ready".to_string(),
                Some("False") => "NotReady".to_string(),
                _ => "Unknown".to_string(),
            };
            if o.pointer("/spec/unschedulable").and_then(|u| u.as_bool()) == Some(true) {
                st.push_str(",SchedulingDisabled");
            }
            json!(st)
        }
        ("persistentvolumes", "VolumeAttributesClass") => {
            let v = s(o.pointer("/spec/volumeAttributesClassName"));
            json!(if v.is_empty() { "<unset>".to_string() } else { v })
        }
        ("storageclasses", "AllowVolumeExpansion") => {
            json!(o.get("allowVolumeExpansion").and_then(|b| b.as_bool()).unwrap_or(false))
        }
        ("cronjobs", "Suspend") => {
            json!(if o.pointer("/spec/suspend").and_then(|b| b.as_bool()) == Some(true) { "True" } else { "False" })
        }
        ("poddisruptionbudgets", "Min Available" | "Max Unavailable") => {
            let f = if name == "Min Available" { "minAvailable" } else { "maxUnavailable" };
            json!(match o.pointer(&format!("/spec/{f}")) {
                Some(Value::String(v)) => v.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => "N/A".to_string(),
            })
        }
        _ => Value::Null,
    }
}

fn builtin_row(rt: &ResourceType, defs: &[Value], o: &Value, include: &str) -> Value {
    let cells: Vec<Value> = defs
        .iter()
        .map(|d| {
            let name = d.get("name").and_then(|n| n.as_str()).unwrap_or_default();
            if name == "Name" && rt.plural != "events" {
                return o.pointer("/metadata/name").cloned().unwrap_or(Value::Null);
            }
            // `Created At` is a date column: the timestamp itself (printers.go `printRole`).
            if name == "Created At" {
                return o.pointer("/metadata/creationTimestamp").cloned().unwrap_or(Value::Null);
            }
            if name == "Age" {
                let ts = o.pointer("/metadata/creationTimestamp").and_then(|t| t.as_str());
                return json!(ts.map(age_of).unwrap_or_else(|| "<unknown>".into()));
            }
            let special = printer_cell(&rt.plural, name, o);
            if !special.is_null() {
                return special;
            }
            match rt.columns.iter().find(|c| c.name == name) {
                Some(c) => cell(c, o),
                None => Value::Null,
            }
        })
        .collect();
    let mut r = row(rt, o, include);
    r["cells"] = Value::Array(cells);
    r
}

/// The ListMeta of a Table: `continue` is `omitempty` (metav1.ListMeta).
fn list_meta(v: &Value) -> Value {
    let mut m = v.get("metadata").cloned().unwrap_or(json!({}));
    if m.get("continue").and_then(|c| c.as_str()) == Some("")
        && let Some(o) = m.as_object_mut()
    {
        o.remove("continue");
    }
    m
}

/// The Table version the client asked for: that of the first `as=Table` media range of `Accept` (`v1beta1` is
/// still served next to `v1`: apiserver `pkg/endpoints/handlers/responsewriters` negotiates either, in the
/// client's order).
pub fn table_api_version(accept: &str) -> &'static str {
    for range in accept.split(',') {
        let params: Vec<&str> = range.split(';').map(str::trim).collect();
        if params.contains(&"as=Table") {
            return if params.contains(&"v=v1beta1") { "meta.k8s.io/v1beta1" } else { "meta.k8s.io/v1" };
        }
    }
    "meta.k8s.io/v1"
}

/// Converts an object or a list into a `meta.k8s.io/v1` Table.
pub fn to_table(rt: &ResourceType, v: &Value, is_list: bool, include: &str) -> Value {
    if !rt.crd
        && let Some(rec) = recorded_columns().get(&format!("{}/{}", rt.group, rt.plural)).and_then(|r| r.as_array())
    {
        let defs: Vec<Value> = rec
            .iter()
            .map(|c| json!({"name": c[0], "type": c[1], "format": c[2], "description": c[4], "priority": c[3]}))
            .collect();
        let (rows, meta) = if is_list {
            let rows: Vec<Value> = v
                .get("items")
                .and_then(|i| i.as_array())
                .map(|a| a.iter().map(|o| builtin_row(rt, &defs, o, include)).collect())
                .unwrap_or_default();
            (rows, list_meta(v))
        } else {
            (
                vec![builtin_row(rt, &defs, v, include)],
                json!({"resourceVersion": v.pointer("/metadata/resourceVersion")}),
            )
        };
        return json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": defs, "rows": rows});
    }
    let mut defs = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names", "priority": 0}),
    ];
    for c in &rt.columns {
        defs.push(json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority}));
    }
    let (rows, meta) = if is_list {
        let rows: Vec<Value> = v
            .get("items")
            .and_then(|i| i.as_array())
            .map(|a| a.iter().map(|o| row(rt, o, include)).collect())
            .unwrap_or_default();
        (rows, list_meta(v))
    } else {
        (vec![row(rt, v, include)], json!({"resourceVersion": v.pointer("/metadata/resourceVersion")}))
    };
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": defs, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpath_filters_conditions() {
        let o =
            json!({"status":{"conditions":[{"type":"Ready","status":"True"},{"type":"BackupReady","status":"False"}]}});
        assert_eq!(jsonpath(&o, ".status.conditions[?(@.type==\"BackupReady\")].status"), vec![json!("False")]);
        assert_eq!(jsonpath(&o, ".status.conditions[?(@.type == \"Ready\")].status"), vec![json!("True")]);
        assert_eq!(jsonpath(&o, ".status.conditions[0].type"), vec![json!("Ready")]);
        assert!(jsonpath(&o, ".spec.replicas").is_empty());
    }

    #[test]
    fn human_durations_match_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(125), "2m5s");
        assert_eq!(human_duration(3600 * 5 + 60), "5h1m");
        assert_eq!(human_duration(86400 * 3), "3d");
    }
}
