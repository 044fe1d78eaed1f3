//! Garbage collection of dependents (ownerReferences) with background, foreground and orphan
//! propagation, and namespace termination. Runs synchronously after every deletion (kube runs it
//! asynchronously in kube-controller-manager; the observable end state is the same).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use super::ApiServer;
use super::rest::{DeleteOpts, Mutation, delete, finalizers, update};

enum Action {
    Delete { group: String, plural: String, ns: String, name: String, policy: Option<String> },
    Replace { group: String, plural: String, ns: String, name: String, obj: Value },
}

fn owner_uids(o: &Value) -> Vec<String> {
    o.pointer("/metadata/ownerReferences")
        .and_then(|r| r.as_array())
        .map(|a| a.iter().filter_map(|r| r.get("uid").and_then(|u| u.as_str()).map(String::from)).collect())
        .unwrap_or_default()
}

fn meta<'a>(o: &'a Value, f: &str) -> &'a str {
    o.get("metadata").and_then(|m| m.get(f)).and_then(|v| v.as_str()).unwrap_or_default()
}

fn plan(server: &ApiServer) -> Vec<Action> {
    let st = server.inner.state.lock().unwrap();
    let mut all: Vec<(String, String, Arc<Value>)> = Vec::new();
    for ((g, p), c) in st.data.iter() {
        for o in c.objects.values() {
            all.push((g.clone(), p.clone(), o.clone()));
        }
    }
    drop(st);
    let uids: HashSet<&str> = all.iter().map(|(_, _, o)| meta(o, "uid")).collect();
    let mut actions = Vec::new();
    let deleting = |o: &Value| o.pointer("/metadata/deletionTimestamp").is_some();
    let key = |g: &str, p: &str, o: &Value| {
        (g.to_string(), p.to_string(), meta(o, "namespace").to_string(), meta(o, "name").to_string())
    };
    // Owners being deleted in foreground / orphan mode.
    let mut fg: HashSet<&str> = HashSet::new();
    for (g, p, o) in &all {
        if !deleting(o) {
            continue;
        }
        let fins = finalizers(o);
        let uid = meta(o, "uid");
        let dependents: Vec<&(String, String, Arc<Value>)> =
            all.iter().filter(|(_, _, d)| owner_uids(d).iter().any(|u| u == uid)).collect();
        if fins.iter().any(|f| f == "orphan") {
            for (dg, dp, d) in &dependents {
                let mut nd = (**d).clone();
                if let Some(refs) = nd.pointer_mut("/metadata/ownerReferences").and_then(|r| r.as_array_mut()) {
                    refs.retain(|r| r.get("uid").and_then(|u| u.as_str()) != Some(uid));
                }
                let (g2, p2, ns, name) = key(dg, dp, d);
                actions.push(Action::Replace { group: g2, plural: p2, ns, name, obj: nd });
            }
            let mut no = (**o).clone();
            no["metadata"]["finalizers"] = json!(fins.iter().filter(|f| *f != "orphan").collect::<Vec<_>>());
            let (g2, p2, ns, name) = key(g, p, o);
            actions.push(Action::Replace { group: g2, plural: p2, ns, name, obj: no });
        } else if fins.iter().any(|f| f == "foregroundDeletion") {
            fg.insert(uid);
            if dependents.is_empty() {
                let mut no = (**o).clone();
                no["metadata"]["finalizers"] =
                    json!(fins.iter().filter(|f| *f != "foregroundDeletion").collect::<Vec<_>>());
                let (g2, p2, ns, name) = key(g, p, o);
                actions.push(Action::Replace { group: g2, plural: p2, ns, name, obj: no });
            } else {
                for (dg, dp, d) in dependents {
                    if !deleting(d) {
                        let (g2, p2, ns, name) = key(dg, dp, d);
                        actions.push(Action::Delete {
                            group: g2,
                            plural: p2,
                            ns,
                            name,
                            policy: Some("Foreground".into()),
                        });
                    }
                }
            }
        }
        if g.is_empty() && p == "namespaces" {
            let ns = meta(o, "name");
            let content: Vec<&(String, String, Arc<Value>)> = all
                .iter()
                .filter(|(_, _, d)| {
                    meta(d, "namespace") == ns && d.get("kind").and_then(|k| k.as_str()) != Some("Namespace")
                })
                .collect();
            if content.is_empty() {
                let mut no = (**o).clone();
                if let Some(sf) = no.pointer_mut("/spec/finalizers").and_then(|f| f.as_array_mut()) {
                    sf.retain(|f| f != "kubernetes");
                }
                if no != **o {
                    actions.push(Action::Replace {
                        group: String::new(),
                        plural: "namespaces".into(),
                        ns: String::new(),
                        name: ns.into(),
                        obj: no,
                    });
                }
            } else {
                for (dg, dp, d) in content {
                    if !deleting(d) {
                        let (g2, p2, ns2, name) = key(dg, dp, d);
                        actions.push(Action::Delete { group: g2, plural: p2, ns: ns2, name, policy: None });
                    }
                }
            }
        }
    }
    // kube-controller-manager's pvc-protection controller (pkg/controller/volume/pvcprotection): a deleting
    // PVC loses `kubernetes.io/pvc-protection` once no pod of its namespace uses it; the pv-protection
    // controller releases a deleting PV that no claim is bound to.
    for (g, p, o) in &all {
        if !g.is_empty() || !deleting(o) {
            continue;
        }
        let (fin, in_use) = match p.as_str() {
            "persistentvolumeclaims" => {
                let (ns, name) = (meta(o, "namespace"), meta(o, "name"));
                let used = all.iter().any(|(pg, pp, pod)| {
                    pg.is_empty()
                        && pp == "pods"
                        && meta(pod, "namespace") == ns
                        && !matches!(
                            pod.pointer("/status/phase").and_then(|x| x.as_str()),
                            Some("Succeeded" | "Failed")
                        )
                        && pod.pointer("/spec/volumes").and_then(|v| v.as_array()).is_some_and(|vs| {
                            vs.iter().any(|v| {
                                v.pointer("/persistentVolumeClaim/claimName").and_then(|c| c.as_str()) == Some(name)
                            })
                        })
                });
                ("kubernetes.io/pvc-protection", used)
            }
            "persistentvolumes" => {
                ("kubernetes.io/pv-protection", o.pointer("/status/phase").and_then(|x| x.as_str()) == Some("Bound"))
            }
            _ => continue,
        };
        let fins = finalizers(o);
        if !in_use && fins.iter().any(|f| f == fin) {
            let mut no = (**o).clone();
            no["metadata"]["finalizers"] = json!(fins.iter().filter(|f| *f != fin).collect::<Vec<_>>());
            let (g2, p2, ns, name) = key(g, p, o);
            actions.push(Action::Replace { group: g2, plural: p2, ns, name, obj: no });
        }
    }
    // Dependents whose owners are all gone (background propagation).
    for (g, p, o) in &all {
        let owners = owner_uids(o);
        if owners.is_empty() || deleting(o) {
            continue;
        }
        if owners.iter().all(|u| !uids.contains(u.as_str())) {
            let (g2, p2, ns, name) = key(g, p, o);
            actions.push(Action::Delete { group: g2, plural: p2, ns, name, policy: None });
        }
    }
    actions
}

/// Runs garbage collection until nothing is left to do.
pub fn after_delete(server: &ApiServer) {
    let inner = &server.inner;
    inner.gc_dirty.store(true, Ordering::SeqCst);
    if inner.gc_running.swap(true, Ordering::SeqCst) {
        return;
    }
    let mut rounds = 0;
    while inner.gc_dirty.swap(false, Ordering::SeqCst) && rounds < 100 {
        rounds += 1;
        for a in plan(server) {
            match a {
                Action::Delete { group, plural, ns, name, policy } => {
                    let nsopt = (!ns.is_empty()).then_some(ns.as_str());
                    server.with_system_ctx(&group, &plural, nsopt, |ctx| {
                        let _ = delete(ctx, &name, &DeleteOpts { propagation: policy, ..Default::default() });
                    });
                }
                Action::Replace { group, plural, ns, name, obj } => {
                    let nsopt = (!ns.is_empty()).then_some(ns.as_str());
                    // With the resourceVersion of the planned snapshot: custom resources and Leases refuse
                    // unconditional updates; a conflict is planned again in the next round.
                    server.with_system_ctx(&group, &plural, nsopt, |ctx| {
                        let _ = update(ctx, &name, Mutation::Replace(obj), None);
                    });
                }
            }
            inner.gc_dirty.store(true, Ordering::SeqCst);
        }
    }
    inner.gc_running.store(false, Ordering::SeqCst);
}
