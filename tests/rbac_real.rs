//! The ClusterRoles `druidctl install` ships are exactly what their commands need, judged by the REAL
//! kube-apiserver of `../shared/realk8s` (see `realk8s_support`; fails under CI without it).
//!
//! 1. Every API call is recorded on the embedded server while `serve` (the task controller with leader election,
//!    as `druidctl serve` runs it) executes every task type to its end and TTL cleanup, and while the operator
//!    commands run as the druidctl binary. Both act as users bound only to the shipped role.
//! 2. The real server gets the roles from the real `druidctl install`, and a SubjectAccessReview per distinct
//!    call (verb, group, resource, subresource, namespace, name) must answer allowed for the ServiceAccount
//!    bound to the role.
//! 3. Each (group, resource, verb) a role grants must be used by at least one recorded call: nothing extra.
//! 4. The operator commands then run again as the druidctl binary on the real server, authenticated with a
//!    token of a ServiceAccount bound only to `druidctl:operator`.

use crate::cli_support;
use crate::realk8s_support;
use crate::tasks_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use druidctl::api::EtcdOperatorTask;
use druidctl::api::manifests::{self, InstallOptions, OPERATOR_ROLE, SERVE_NAME, SERVE_ROLE};
use druidctl::api::task::{EtcdOperatorTaskSpec, NamespacedName};
use druidctl::reconciler::controller::{self, ControllerOptions, Health, LeaderElection};
use druidctl::reconciler::{Reconciler, ReconcilerOptions};
use druidctl::tasks::Registry;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sim::{ApiServer, RequestRecord};
use serde_json::{Value, json};
use tasks_support::{ETCD, NS, Reach, Sidecar, landscape, real_member_etcd};
use tokio_util::sync::CancellationToken;

const SERVE_NS: &str = "druidctl-system";
const OPERATOR_SA: &str = "druidctl-operator-probe";

fn sa_user(ns: &str, name: &str) -> String {
    format!("system:serviceaccount:{ns}:{name}")
}

fn sa_groups(ns: &str) -> Vec<String> {
    vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{ns}"), "system:authenticated".into()]
}

/// One API call as the authorizer sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Call {
    Resource { verb: String, group: String, resource: String, subresource: String, namespace: String, name: String },
    NonResource { verb: String, path: String },
}

/// The authorizer's attributes of a request path (`/api/v1/...`, `/apis/GROUP/VERSION/...`).
fn call_of(r: &RequestRecord) -> Call {
    let path = r.path.split('?').next().unwrap_or_default();
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match segs.as_slice() {
        ["api", _v, rest @ ..] if !rest.is_empty() => ("", rest),
        ["apis", g, _v, rest @ ..] if !rest.is_empty() => (*g, rest),
        _ => return Call::NonResource { verb: r.verb.clone(), path: path.to_string() },
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (ns.to_string(), rest),
        _ => (String::new(), rest),
    };
    let resource = rest[0].to_string();
    let name = rest.get(1).map(|s| s.to_string()).unwrap_or_default();
    let subresource = rest.get(2).map(|s| s.to_string()).unwrap_or_default();
    // `namespaces/NAME` is cluster scoped with the namespace as the name.
    let namespace = if group.is_empty() && resource == "namespaces" { name.clone() } else { namespace };
    Call::Resource { verb: r.verb.clone(), group: group.into(), resource, subresource, namespace, name }
}

fn calls_of(server: &ApiServer, user: &str) -> (BTreeSet<Call>, Vec<String>) {
    let records: Vec<RequestRecord> = server.request_log().records().into_iter().filter(|r| r.user == user).collect();
    let forbidden = records.iter().filter(|r| r.code == 403).map(|r| format!("{} {}", r.verb, r.path)).collect();
    (records.iter().map(call_of).collect(), forbidden)
}

/// (group, resource[/subresource], verb) triples a role grants.
fn grants(rules: &[PolicyRule]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for r in rules {
        for g in r.api_groups.clone().unwrap_or_default() {
            for res in r.resources.clone().unwrap_or_default() {
                for v in &r.verbs {
                    out.insert((g.clone(), res.clone(), v.clone()));
                }
            }
        }
    }
    out
}

fn used(calls: &BTreeSet<Call>) -> BTreeSet<(String, String, String)> {
    calls
        .iter()
        .filter_map(|c| match c {
            Call::Resource { verb, group, resource, subresource, .. } => {
                let res = if subresource.is_empty() { resource.clone() } else { format!("{resource}/{subresource}") };
                Some((group.clone(), res, verb.clone()))
            }
            Call::NonResource { .. } => None,
        })
        .collect()
}

/// The calls the real server denies to `user`, asked with SubjectAccessReviews.
async fn denied(real: &Client, user: &str, groups: &[String], calls: &BTreeSet<Call>) -> Vec<String> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("authorization.k8s.io", "v1", "SubjectAccessReview"),
        "subjectaccessreviews",
    );
    let api: Api<DynamicObject> = Api::all_with(real.clone(), &ar);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut out = Vec::new();
    for c in calls {
        let attrs = match c {
            Call::Resource { verb, group, resource, subresource, namespace, name } => json!({"resourceAttributes": {
                "verb": verb, "group": group, "resource": resource, "subresource": subresource,
                "namespace": namespace, "name": name}}),
            Call::NonResource { verb, path } => json!({"nonResourceAttributes": {"verb": verb, "path": path}}),
        };
        let mut spec = attrs;
        spec["user"] = json!(user);
        spec["groups"] = json!(groups);
        let review: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {}, "spec": spec}))
        .unwrap();
        // kube-apiserver's RBAC authorizer reads bindings from an informer: a binding created a moment ago may not
        // count yet. A denial is asked again until the deadline, so only a grant that is really missing is
        // reported.
        loop {
            let answer = api.create(&PostParams::default(), &review).await.expect("SubjectAccessReview");
            if answer.data["status"]["allowed"] == json!(true) {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                out.push(format!("{c:?}: {}", answer.data["status"]));
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    out
}

/// Applies the shipped manifests to the embedded server and makes `user` (with `groups`) a known user.
async fn ship_to_embedded(server: &ApiServer, user: &str, groups: &[String]) {
    let objects =
        manifests::all(&InstallOptions { serve_image: Some("druidctl:test".into()), serve_namespace: SERVE_NS.into() });
    let objects: Vec<Value> = objects.into_iter().filter(|o| o["kind"] != "CustomResourceDefinition").collect();
    druidctl::kube::install::apply(&server.client(), &objects, false).await.expect("install on the embedded server");
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    server.add_user(user, &groups);
}

async fn create_task(client: &Client, name: &str, type_: &str, config: Option<&str>) {
    let mut t = EtcdOperatorTask::new(
        name,
        EtcdOperatorTaskSpec {
            type_: type_.into(),
            config: config.map(str::to_string),
            ttl_seconds_after_finished: Some(0),
            owner_etcd_refrence: NamespacedName { name: ETCD.into(), namespace: NS.into() },
        },
    );
    t.metadata.namespace = Some(NS.into());
    Api::<EtcdOperatorTask>::namespaced(client.clone(), NS).create(&PostParams::default(), &t).await.unwrap();
}

/// etcd-druid's and the Job controller's part, done by the admin: every Job of a task completes, every
/// EtcdCopyBackupsTask succeeds.
fn fake_controllers(admin: Client, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let jobs: Api<Job> = Api::namespaced(admin.clone(), NS);
        let copy_ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "EtcdCopyBackupsTask"),
            "etcdcopybackupstasks",
        );
        let copies: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &copy_ar);
        while !stop.is_cancelled() {
            for j in jobs.list(&ListParams::default()).await.unwrap() {
                if j.status.as_ref().and_then(|s| s.succeeded).is_none() {
                    let st =
                        json!({"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}});
                    let _ =
                        jobs.patch_status(&j.metadata.name.unwrap(), &PatchParams::default(), &Patch::Merge(st)).await;
                }
            }
            for c in copies.list(&ListParams::default()).await.unwrap() {
                if c.data["status"]["conditions"].is_null() {
                    let st = json!({"status": {"conditions": [{"type": "Succeeded", "status": "True", "reason": "CopySucceeded",
                        "message": "copied", "lastTransitionTime": "2026-01-01T00:00:00Z", "lastUpdateTime": "2026-01-01T00:00:00Z"}]}});
                    let _ = copies
                        .patch_status(&c.metadata.name.unwrap(), &PatchParams::default(), &Patch::Merge(st))
                        .await;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

/// Records what `serve` calls while it runs every task type, on the embedded server as the shipped
/// ServiceAccount bound to `druidctl:serve`.
async fn record_serve() -> BTreeSet<Call> {
    let server = landscape().await;
    Sidecar::default().start(&server).await;
    // Compaction and defragmentation talk to etcd itself: a real member behind the pods' client URL.
    let member_etcd = real_member_etcd(&server, "serve runs an OnDemandMaintenanceTask", Reach::Annotation).await;
    let user = sa_user(SERVE_NS, SERVE_NAME);
    ship_to_embedded(&server, &user, &sa_groups(SERVE_NS)).await;
    let admin = server.client();
    let stop = CancellationToken::new();
    let fakes = fake_controllers(admin.clone(), stop.clone());
    let mut opts = ReconcilerOptions::new("rbac-probe");
    opts.wait_requeue = Duration::from_millis(100);
    let base = Arc::new(Reconciler::new(server.client_for(&user), Arc::new(Registry::standard()), opts));
    let election =
        LeaderElection { namespace: NS.into(), name: controller::LEADER_LEASE.into(), lease: Duration::from_secs(15) };
    let copts = ControllerOptions { namespace: Some(NS.into()), workers: 2, resync: Duration::from_secs(1) };
    let serve = tokio::spawn(controller::run_with_leader_election(
        base,
        copts,
        election,
        stop.clone(),
        Arc::new(Health::default()),
    ));
    let copy = "sourceStore: {provider: Local, container: bucket, prefix: shoot/etcd-main}\ntargetStore: {provider: Local, container: other, prefix: copy}\n";
    let tasks = [
        ("snap-full", "OnDemandSnapshotTask", Some("type: full")),
        ("snap-delta", "OnDemandSnapshotTask", Some("type: delta")),
        (
            "maint",
            "OnDemandMaintenanceTask",
            Some("maintenanceType: {etcdCompaction: true, etcdDefragmentation: true}"),
        ),
        ("compact", "OnDemandSnapshotCompactionTask", None),
        ("copy", "CopyBackupsTask", Some(copy)),
    ];
    for (name, type_, config) in tasks {
        if name == "maint" && member_etcd.is_none() {
            continue;
        }
        create_task(&admin, name, type_, config).await;
    }
    // TTL 0: each task is deleted by serve once it ends; all gone = all ran to their end and cleanup.
    let api: Api<EtcdOperatorTask> = Api::namespaced(admin.clone(), NS);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut finished_states = BTreeMap::new();
    loop {
        let left = api.list(&ListParams::default()).await.unwrap().items;
        for t in &left {
            finished_states.insert(t.metadata.name.clone().unwrap(), format!("{:?}", t.state()));
        }
        if left.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "tasks not done in 120 s: {:?}; forbidden so far: {:?}",
            left.iter().map(|t| (t.metadata.name.clone(), t.status.clone())).collect::<Vec<_>>(),
            calls_of(&server, &user).1
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(30), serve).await;
    let _ = fakes.await;
    let (calls, forbidden) = calls_of(&server, &user);
    assert!(forbidden.is_empty(), "serve was refused on the embedded server: {forbidden:#?}");
    eprintln!("states seen: {finished_states:?}");
    calls
}

/// The operator commands, as the druidctl binary.
fn operator_commands() -> Vec<Vec<&'static str>> {
    vec![
        vec!["status", ETCD],
        vec!["list-resources", ETCD],
        vec!["snapshot", "full", ETCD, "--no-wait"],
        vec!["task", "list"],
        vec!["suspend-reconcile", ETCD],
        vec!["resume-reconcile", ETCD],
    ]
}

/// Records what the operator commands call on the embedded server as a user bound to `druidctl:operator`.
async fn record_operator() -> BTreeSet<Call> {
    let server = landscape().await;
    let user = sa_user(NS, OPERATOR_SA);
    ship_to_embedded(&server, &user, &sa_groups(NS)).await;
    bind(&server.client(), &user_binding(OPERATOR_SA, NS)).await;
    let endpoint = server.serve_http("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml(&endpoint.url, &user, Some(NS))).unwrap();
    let mut status_stderr = String::new();
    for args in operator_commands() {
        let out = cli_support::run_with(
            cli_support::bin(),
            &args,
            &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
            dir.path(),
        )
        .await;
        if args[0] == "status" {
            status_stderr = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        }
        eprintln!(
            "embedded: druidctl {}: {:?}\n{}",
            args.join(" "),
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (calls, forbidden) = calls_of(&server, &user);
    // `status` also asks etcd itself, which from outside the cluster goes through `pods/portforward`. The role
    // leaves that out on purpose (docs/rbac.md: etcd's client key is a privilege of its own); status tries, is
    // refused, says so once and judges from the Kubernetes objects. Those refusals are the designed degradation,
    // not a gap in the role.
    let (etcd_view, forbidden): (Vec<String>, Vec<String>) =
        forbidden.into_iter().partition(|call| call.contains("/portforward"));
    assert!(forbidden.is_empty(), "operator commands were refused on the embedded server: {forbidden:#?}");
    if !etcd_view.is_empty() {
        assert!(
            status_stderr.contains("no permission to create pods/portforward"),
            "status was refused a port-forward ({etcd_view:?}) without saying so: {status_stderr}"
        );
    }
    // After refused port-forwards, status asks once whether the refusal is RBAC (a SelfSubjectAccessReview, which
    // Kubernetes' bootstrap ClusterRole `system:basic-user` grants every authenticated user, not this role).
    calls
        .into_iter()
        .filter(|c| {
            !matches!(c, Call::Resource { subresource, resource, .. }
                if subresource == "portforward" || (!etcd_view.is_empty() && resource == "selfsubjectaccessreviews"))
        })
        .collect()
}

fn user_binding(sa: &str, ns: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
           "metadata": {"name": format!("{sa}-{ns}")},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": OPERATOR_ROLE},
           "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]})
}

async fn bind(client: &Client, obj: &Value) {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
        "clusterrolebindings",
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let name = obj["metadata"]["name"].as_str().unwrap();
    api.patch(name, &PatchParams::apply("rbac-test").force(), &Patch::Apply(obj)).await.expect("binding");
}

/// Grants a recorded run may not exercise, each needed by a path named here: (group, resource, verb, why).
const NOT_ALWAYS_CALLED: &[(&str, &str, &str, &str)] = &[(
    "druid.gardener.cloud",
    "etcdoperatortasks",
    "get",
    // src/reconciler/execute.rs: a task executed right after its admission is carried on from the admission's
    // own write; one picked up from the cache (after a restart, a failover or a requeue) is read fresh first.
    "an executor that starts from the cache reads the task before taking its lease",
)];

fn unused_grants(role: &str, rules: &[PolicyRule], calls: &BTreeSet<Call>) -> Vec<String> {
    let used = used(calls);
    grants(rules)
        .into_iter()
        .filter(|g| !used.contains(g))
        .filter(|(g, r, v)| !NOT_ALWAYS_CALLED.iter().any(|(ng, nr, nv, _)| g == ng && r == nr && v == nv))
        .map(|(g, r, v)| format!("{role}: {v} {r}.{g} is granted but no command calls it"))
        .collect()
}

fn missing_grants(calls: &BTreeSet<Call>, rules: &[PolicyRule]) -> Vec<String> {
    let granted = grants(rules);
    used(calls)
        .into_iter()
        .filter(|u| !granted.contains(u))
        .map(|(g, r, v)| format!("{v} {r}.{g} is called but not granted"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serve_role_is_exactly_what_every_task_type_needs_on_the_real_api_server() {
    let Some(real) = realk8s_support::require("the druidctl:serve RBAC check") else { return };
    let calls = record_serve().await;
    let rules = manifests::serve_rules();
    let mut problems = missing_grants(&calls, &rules);
    problems.extend(unused_grants(SERVE_ROLE, &rules, &calls));
    // The real server, with the roles from the real `install`.
    let dir = tempfile::tempdir().unwrap();
    let out = cli_support::run_with(
        cli_support::bin(),
        &["install", "--serve-image", "druidctl:test", "--serve-namespace", SERVE_NS],
        &[("KUBECONFIG", real.kubeconfig.to_str().unwrap())],
        dir.path(),
    )
    .await;
    assert!(out.status.success(), "install on the real server: {}", String::from_utf8_lossy(&out.stderr));
    let client = real.client().await;
    problems.extend(denied(&client, &sa_user(SERVE_NS, SERVE_NAME), &sa_groups(SERVE_NS), &calls).await);
    assert!(problems.is_empty(), "druidctl:serve is not exactly what serve calls:\n{}", problems.join("\n"));
    // A negative control: what the role does not grant, the real server refuses.
    let mut without: BTreeSet<Call> = BTreeSet::new();
    without.insert(Call::Resource {
        verb: "delete".into(),
        group: "".into(),
        resource: "persistentvolumeclaims".into(),
        subresource: "".into(),
        namespace: NS.into(),
        name: "main-etcd-etcd-main-0".into(),
    });
    assert_eq!(denied(&client, &sa_user(SERVE_NS, SERVE_NAME), &sa_groups(SERVE_NS), &without).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_role_is_exactly_what_the_operator_commands_need_on_the_real_api_server() {
    let Some(real) = realk8s_support::require("the druidctl:operator RBAC check") else { return };
    let calls = record_operator().await;
    let dir = tempfile::tempdir().unwrap();
    let out = cli_support::run_with(
        cli_support::bin(),
        &["install"],
        &[("KUBECONFIG", real.kubeconfig.to_str().unwrap())],
        dir.path(),
    )
    .await;
    assert!(out.status.success(), "install on the real server: {}", String::from_utf8_lossy(&out.stderr));
    let client = real.client().await;
    bind(&client, &user_binding(OPERATOR_SA, NS)).await;
    let mut problems = missing_grants(&calls, &manifests::operator_rules());
    problems.extend(denied(&client, &sa_user(NS, OPERATOR_SA), &sa_groups(NS), &calls).await);
    assert!(problems.is_empty(), "druidctl:operator lacks what the operator commands call:\n{}", problems.join("\n"));
}
