//! Differential test: the same requests against the real kube-apiserver (realk8s) and against the embedded API
//! server of `druidctl playground apiserver`; answers are normalised and compared step by step.
//!
//! See docs/differential.md. Environment:
//! - `DRUIDCTL_REALK8S`: directory of realk8s.sh (default `$CARGO_MANIFEST_DIR/../shared/realk8s`)
//! - `DRUIDCTL_REALK8S_KUBECONFIG`: admin kubeconfig of an already running real API server (not started/stopped
//!   by the test; `kubeconfig-limited` next to it is used for the no-permission user when present)
//! - `DRUIDCTL_DIFF_MIN_SCORE`: minimum percentage of agreeing steps (default [`DEFAULT_MIN_SCORE`])
//! - `DRUIDCTL_DIFF_FILTER`: only scenarios whose name contains this string (for debugging)
//! - `CI`: when set, a missing or unstartable real API server fails the test instead of skipping it.

use crate::realk8s_support;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{Method, Request};
use http_body_util::BodyExt;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use regex::Regex;
use serde_json::{Value, json};

/// Percentage of agreeing steps required to pass: at the last measurement (1194/1205 = 99.1%; the real server's
/// run-to-run variation is normalised, see docs/differential.md; the 11 differing steps are the
/// kube-controller-manager and Go-internal ones of docs/embedded-apiserver.md).
const DEFAULT_MIN_SCORE: f64 = 99.0;

/// The groups the test serves from CustomResourceDefinitions (`crates/druid-api/crds`, `deploy/crd.yaml`).
const CRD_GROUPS: &[&str] = &["druid.gardener.cloud", "cert-manager.io", "machine.sapcloud.io"];

const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const JSONPATCH: &str = "application/json-patch+json";
const SMP: &str = "application/strategic-merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const POM: &str = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io";

// ---------------------------------------------------------------------------------------------------------------
// Processes: the real API server (realk8s.sh) and the embedded one (druidctl playground apiserver)
// ---------------------------------------------------------------------------------------------------------------

/// The embedded API server as a separate process; SIGTERM on drop.
struct Embedded {
    child: Child,
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Embedded {
    fn start() -> Embedded {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let log = std::fs::File::create(dir.path().join("apiserver.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_druidctl"))
            // `--user limited`: a user without permissions, like realk8s' `kubeconfig-limited`.
            .args(["playground", "apiserver", "--listen", "127.0.0.1:0", "--user", "limited-user", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start druidctl playground apiserver");
        let mut e = Embedded { child, _dir: dir, kubeconfig };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !e.kubeconfig.exists() {
            if let Ok(Some(st)) = e.child.try_wait() {
                panic!("druidctl playground apiserver exited: {st}");
            }
            assert!(Instant::now() < deadline, "druidctl playground apiserver wrote no kubeconfig in 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        e
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------------------------
// One server as seen by the test
// ---------------------------------------------------------------------------------------------------------------

struct Side {
    label: &'static str,
    admin: Client,
    invalid: Client,
    anon: Client,
    limited: Client,
    kubeconfig: PathBuf,
    cache: PathBuf,
    /// server-specific strings -> placeholders
    repl: Vec<(String, String)>,
    watches: Mutex<HashMap<usize, Watch>>,
}

/// A running watch: its reader task and the bytes it has read.
type Watch = (tokio::task::JoinHandle<()>, Arc<Mutex<Vec<u8>>>);

async fn client_from_yaml(yaml: &str) -> Client {
    let kc = Kubeconfig::from_yaml(yaml).expect("kubeconfig");
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.expect("config");
    // Answers are compared as sent: no client-side retries of 429/503/504.
    cfg.default_retry = false;
    Client::try_from(cfg).expect("client")
}

fn token_of(yaml: &str) -> String {
    yaml.lines()
        .find_map(|l| l.trim().strip_prefix("token:").map(|t| t.trim().trim_matches('"').to_string()))
        .expect("token in kubeconfig")
}

fn server_of(yaml: &str) -> String {
    yaml.lines()
        .find_map(|l| l.trim().strip_prefix("server:").map(|t| t.trim().trim_matches('"').to_string()))
        .expect("server in kubeconfig")
}

impl Side {
    async fn new(label: &'static str, kubeconfig: &Path, limited: Option<&Path>, tmp: &Path) -> Side {
        let yaml = std::fs::read_to_string(kubeconfig).unwrap();
        let token = token_of(&yaml);
        let server = server_of(&yaml);
        let admin = client_from_yaml(&yaml).await;
        let invalid = client_from_yaml(&yaml.replace(&token, "invalidtoken0123456789")).await;
        let anon_yaml: String = yaml
            .replace(&format!("/u/{token}"), "")
            .lines()
            .filter(|l| !l.trim().starts_with("token:"))
            .map(|l| format!("{l}\n"))
            .collect();
        let anon = client_from_yaml(&anon_yaml).await;
        let limited = match limited {
            Some(p) => client_from_yaml(&std::fs::read_to_string(p).unwrap()).await,
            // The embedded server has no way to add a user from outside: an unknown token.
            None => client_from_yaml(&yaml.replace(&token, "limiteduser0123456789")).await,
        };
        let base = server.replace(&format!("/u/{token}"), "");
        let repl = vec![
            (server.clone(), "<server>".to_string()),
            (base.clone(), "<server>".to_string()),
            (base.replace("https://", "").replace("http://", ""), "<host>".to_string()),
            (token.clone(), "<token>".to_string()),
            ("realk8s-admin".to_string(), "admin".to_string()),
        ];
        let cache = tmp.join(format!("kubectl-cache-{label}"));
        Side {
            label,
            admin,
            invalid,
            anon,
            limited,
            kubeconfig: kubeconfig.to_path_buf(),
            cache,
            repl,
            watches: Mutex::new(HashMap::new()),
        }
    }

    fn client(&self, who: Who) -> &Client {
        match who {
            Who::Admin => &self.admin,
            Who::Invalid => &self.invalid,
            Who::Anon => &self.anon,
            Who::Limited => &self.limited,
        }
    }

    async fn raw(&self, who: Who, method: &Method, path: &str, body: Option<&str>, ctype: &str, accept: &str) -> Raw {
        let mut b = Request::builder().method(method.clone()).uri(path).header("Accept", accept);
        if body.is_some() {
            b = b.header("Content-Type", ctype);
        }
        let req = b.body(body.unwrap_or("").as_bytes().to_vec()).unwrap();
        let req = req.map(kube::client::Body::from);
        let fut = self.client(who).send(req);
        match tokio::time::timeout(Duration::from_secs(15), fut).await {
            Err(_) => Raw { code: -1, ctype: String::new(), warning: String::new(), body: "timeout".into() },
            Ok(Err(e)) => {
                Raw { code: -2, ctype: String::new(), warning: String::new(), body: format!("client error: {e}") }
            }
            Ok(Ok(resp)) => {
                let code = resp.status().as_u16() as i64;
                let hdr = |n: &str| {
                    resp.headers()
                        .get_all(n)
                        .iter()
                        .map(|v| v.to_str().unwrap_or("").to_string())
                        .collect::<Vec<_>>()
                        .join("; ")
                };
                let ctype = hdr("content-type");
                let warning = hdr("warning");
                let body = match resp.into_body().collect().await {
                    Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
                    Err(e) => format!("body error: {e}"),
                };
                Raw { code, ctype, warning, body }
            }
        }
    }
}

#[derive(Clone, Debug)]
struct Raw {
    code: i64,
    ctype: String,
    warning: String,
    body: String,
}

// ---------------------------------------------------------------------------------------------------------------
// Steps
// ---------------------------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Who {
    Admin,
    Invalid,
    Anon,
    Limited,
}

#[derive(Clone, Debug)]
enum Cmp {
    /// status code, Warning header and the whole normalised body
    Full,
    /// status code only
    Code,
    /// status code and the values at these JSON pointers of the normalised body
    Ptrs(Vec<&'static str>),
}

#[derive(Clone, Copy, Debug)]
enum Rv {
    Keep,
    Drop,
    Stale,
}

type Modify = Arc<dyn Fn(&mut Value) + Send + Sync>;

#[derive(Clone)]
enum Op {
    Req {
        method: Method,
        path: String,
        body: Option<String>,
        ctype: &'static str,
        accept: &'static str,
        who: Who,
    },
    /// GET `path` on each server, modify, PUT back (resourceVersion kept, dropped or made stale)
    Put {
        path: String,
        query: String,
        modify: Modify,
        rv: Rv,
    },
    /// open a watch (read in the background) under an id
    WatchStart {
        id: usize,
        path: String,
        accept: &'static str,
    },
    /// stop the watch after a short grace period; the answer is the list of events
    WatchEnd {
        id: usize,
    },
    Kubectl {
        args: Vec<String>,
        stdin: Option<String>,
    },
}

#[derive(Clone)]
struct Step {
    name: String,
    op: Op,
    cmp: Cmp,
    scored: bool,
}

fn req(
    name: impl Into<String>,
    method: Method,
    path: impl Into<String>,
    body: Option<Value>,
    ctype: &'static str,
) -> Step {
    Step {
        name: name.into(),
        op: Op::Req {
            method,
            path: path.into(),
            body: body.map(|b| b.to_string()),
            ctype,
            accept: JSON,
            who: Who::Admin,
        },
        cmp: Cmp::Full,
        scored: true,
    }
}

fn get(name: impl Into<String>, path: impl Into<String>) -> Step {
    req(name, Method::GET, path, None, JSON)
}

impl Step {
    fn accept(mut self, a: &'static str) -> Step {
        if let Op::Req { accept, .. } = &mut self.op {
            *accept = a;
        }
        self
    }
    fn who(mut self, w: Who) -> Step {
        if let Op::Req { who, .. } = &mut self.op {
            *who = w;
        }
        self
    }
    fn raw_body(mut self, b: &str) -> Step {
        if let Op::Req { body, .. } = &mut self.op {
            *body = Some(b.to_string());
        }
        self
    }
    fn cmp(mut self, c: Cmp) -> Step {
        self.cmp = c;
        self
    }
    fn unscored(mut self) -> Step {
        self.scored = false;
        self
    }
}

fn put(
    name: impl Into<String>,
    path: impl Into<String>,
    query: &str,
    rv: Rv,
    modify: impl Fn(&mut Value) + Send + Sync + 'static,
) -> Step {
    Step {
        name: name.into(),
        op: Op::Put { path: path.into(), query: query.to_string(), modify: Arc::new(modify), rv },
        cmp: Cmp::Full,
        scored: true,
    }
}

fn kubectl(name: impl Into<String>, args: &str, stdin: Option<&str>) -> Step {
    Step {
        name: name.into(),
        op: Op::Kubectl { args: args.split_whitespace().map(String::from).collect(), stdin: stdin.map(String::from) },
        cmp: Cmp::Full,
        scored: true,
    }
}

fn watch_start(id: usize, path: impl Into<String>) -> Step {
    Step {
        name: format!("watch #{id} open"),
        op: Op::WatchStart { id, path: path.into(), accept: JSON },
        cmp: Cmp::Code,
        scored: false,
    }
}

fn watch_end(name: impl Into<String>, id: usize) -> Step {
    Step { name: name.into(), op: Op::WatchEnd { id }, cmp: Cmp::Full, scored: true }
}

struct Scenario {
    name: String,
    ns: String,
    steps: Vec<Step>,
}

// ---------------------------------------------------------------------------------------------------------------
// Kinds and their objects
// ---------------------------------------------------------------------------------------------------------------

struct Kind {
    plural: &'static str,
    kind: &'static str,
    /// "v1" or "group/version"
    api_version: &'static str,
    namespaced: bool,
    status: bool,
    scale: bool,
    /// the object's content besides apiVersion/kind/metadata (gets the namespace)
    body: fn(&str) -> Value,
}

impl Kind {
    fn base(&self) -> String {
        if self.api_version.contains('/') {
            format!("/apis/{}", self.api_version)
        } else {
            format!("/api/{}", self.api_version)
        }
    }
    fn coll(&self, ns: &str) -> String {
        if self.namespaced {
            format!("{}/namespaces/{ns}/{}", self.base(), self.plural)
        } else {
            format!("{}/{}", self.base(), self.plural)
        }
    }
    fn name(&self, ns: &str, n: &str) -> String {
        if self.namespaced { n.to_string() } else { format!("{ns}-{n}") }
    }
    fn item(&self, ns: &str, n: &str) -> String {
        format!("{}/{}", self.coll(ns), self.name(ns, n))
    }
    fn object(&self, ns: &str, n: &str) -> Value {
        let mut meta = json!({"name": self.name(ns, n), "labels": {"diff": ns}});
        if self.namespaced {
            meta["namespace"] = json!(ns);
        }
        let mut o = json!({"apiVersion": self.api_version, "kind": self.kind, "metadata": meta});
        if let Value::Object(m) = (self.body)(ns) {
            for (k, v) in m {
                o[k] = v;
            }
        }
        o
    }
}

fn container() -> Value {
    json!({"name": "c", "image": "busybox:1.36"})
}

fn pod_template() -> Value {
    json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [container()]}})
}

fn kinds() -> Vec<Kind> {
    let k = |plural, kind, api_version, namespaced, _builtin: bool, status, scale, body| Kind {
        plural,
        kind,
        api_version,
        namespaced,
        status,
        scale,
        body,
    };
    vec![
        k("configmaps", "ConfigMap", "v1", true, true, false, false, |_| json!({"data": {"a": "1"}})),
        k("secrets", "Secret", "v1", true, true, false, false, |_| json!({"type": "Opaque", "data": {"a": "MQ=="}})),
        k(
            "services",
            "Service",
            "v1",
            true,
            true,
            true,
            false,
            |_| json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}], "selector": {"app": "x"}}}),
        ),
        k("serviceaccounts", "ServiceAccount", "v1", true, true, false, false, |_| json!({})),
        k("pods", "Pod", "v1", true, true, true, false, |_| json!({"spec": {"containers": [container()]}})),
        k(
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            "v1",
            true,
            true,
            true,
            false,
            |_| json!({"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
        ),
        k("events", "Event", "v1", true, true, false, false, |ns| {
            json!({"involvedObject": {"kind": "Pod", "name": "p", "namespace": ns, "apiVersion": "v1"},
                   "reason": "Test", "message": "m", "type": "Normal", "source": {"component": "diff"}})
        }),
        k(
            "leases",
            "Lease",
            "coordination.k8s.io/v1",
            true,
            true,
            false,
            false,
            |_| json!({"spec": {"holderIdentity": "h", "leaseDurationSeconds": 15}}),
        ),
        k(
            "statefulsets",
            "StatefulSet",
            "apps/v1",
            true,
            true,
            true,
            true,
            |_| json!({"spec": {"replicas": 1, "serviceName": "s", "selector": {"matchLabels": {"app": "x"}}, "template": pod_template()}}),
        ),
        k(
            "deployments",
            "Deployment",
            "apps/v1",
            true,
            true,
            true,
            true,
            |_| json!({"spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}}, "template": pod_template()}}),
        ),
        k(
            "replicasets",
            "ReplicaSet",
            "apps/v1",
            true,
            true,
            true,
            true,
            |_| json!({"spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}}, "template": pod_template()}}),
        ),
        k(
            "daemonsets",
            "DaemonSet",
            "apps/v1",
            true,
            true,
            true,
            false,
            |_| json!({"spec": {"selector": {"matchLabels": {"app": "x"}}, "template": pod_template()}}),
        ),
        k(
            "jobs",
            "Job",
            "batch/v1",
            true,
            true,
            true,
            false,
            |_| json!({"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container()]}}}}),
        ),
        k(
            "cronjobs",
            "CronJob",
            "batch/v1",
            true,
            true,
            true,
            false,
            |_| json!({"spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure", "containers": [container()]}}}}}}),
        ),
        k(
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            "policy/v1",
            true,
            true,
            true,
            false,
            |_| json!({"spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}}}),
        ),
        k(
            "roles",
            "Role",
            "rbac.authorization.k8s.io/v1",
            true,
            true,
            false,
            false,
            |_| json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        ),
        k("rolebindings", "RoleBinding", "rbac.authorization.k8s.io/v1", true, true, false, false, |_| {
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
                   "subjects": [{"kind": "User", "name": "u", "apiGroup": "rbac.authorization.k8s.io"}]})
        }),
        k("events", "Event", "events.k8s.io/v1", true, true, false, false, |ns| {
            json!({"eventTime": "2024-01-01T00:00:00.000000Z", "reportingController": "diff/ctl", "reportingInstance": "i",
                   "action": "Act", "reason": "Test", "type": "Normal", "note": "n",
                   "regarding": {"kind": "Pod", "name": "p", "namespace": ns, "apiVersion": "v1"}})
        }),
        k(
            "etcds",
            "Etcd",
            "druid.gardener.cloud/v1alpha1",
            true,
            false,
            true,
            true,
            |_| json!({"spec": {"replicas": 1, "labels": {"app": "etcd"}, "etcd": {}, "backup": {}}}),
        ),
        k(
            "etcdopstasks",
            "EtcdOpsTask",
            "druid.gardener.cloud/v1alpha1",
            true,
            false,
            true,
            false,
            |_| json!({"spec": {"config": {"onDemandSnapshot": {"type": "full"}}}}),
        ),
        k(
            "etcdcopybackupstasks",
            "EtcdCopyBackupsTask",
            "druid.gardener.cloud/v1alpha1",
            true,
            false,
            true,
            false,
            |_| json!({"spec": {"sourceStore": {"prefix": "a"}, "targetStore": {"prefix": "b"}}}),
        ),
        k(
            "etcdoperatortasks",
            "EtcdOperatorTask",
            "druid.gardener.cloud/v1alpha1",
            true,
            false,
            true,
            false,
            |ns| json!({"spec": {"type": "Defragment", "ownerEtcdRefrence": {"name": "e", "namespace": ns}}}),
        ),
        k(
            "certificates",
            "Certificate",
            "cert-manager.io/v1",
            true,
            false,
            true,
            false,
            |_| json!({"spec": {"secretName": "s", "issuerRef": {"name": "i"}}}),
        ),
        k(
            "certificaterequests",
            "CertificateRequest",
            "cert-manager.io/v1",
            true,
            false,
            true,
            false,
            |_| json!({"spec": {"request": "LS0tLQ==", "issuerRef": {"name": "i"}}}),
        ),
        k("machines", "Machine", "machine.sapcloud.io/v1alpha1", true, false, true, false, |_| json!({"spec": {}})),
        k(
            "machinesets",
            "MachineSet",
            "machine.sapcloud.io/v1alpha1",
            true,
            false,
            true,
            true,
            |_| json!({"spec": {"replicas": 1}}),
        ),
        k(
            "machinedeployments",
            "MachineDeployment",
            "machine.sapcloud.io/v1alpha1",
            true,
            false,
            true,
            true,
            |_| json!({"spec": {"replicas": 1, "template": {"spec": {}}}}),
        ),
        k(
            "machineclasses",
            "MachineClass",
            "machine.sapcloud.io/v1alpha1",
            true,
            false,
            false,
            false,
            |_| json!({"providerSpec": {}}),
        ),
        // cluster-scoped
        k("namespaces", "Namespace", "v1", false, true, true, false, |_| json!({})),
        k("nodes", "Node", "v1", false, true, true, false, |_| json!({"spec": {}})),
        k(
            "persistentvolumes",
            "PersistentVolume",
            "v1",
            false,
            true,
            true,
            false,
            |_| json!({"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/x"}}}),
        ),
        k(
            "storageclasses",
            "StorageClass",
            "storage.k8s.io/v1",
            false,
            true,
            false,
            false,
            |_| json!({"provisioner": "example.com/x"}),
        ),
        k(
            "clusterroles",
            "ClusterRole",
            "rbac.authorization.k8s.io/v1",
            false,
            true,
            false,
            false,
            |_| json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        ),
        k(
            "clusterrolebindings",
            "ClusterRoleBinding",
            "rbac.authorization.k8s.io/v1",
            false,
            true,
            false,
            false,
            |_| {
                json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                   "subjects": [{"kind": "User", "name": "u", "apiGroup": "rbac.authorization.k8s.io"}]})
            },
        ),
    ]
}

/// The generic steps every kind goes through.
fn kind_steps(k: &Kind, ns: &str) -> Vec<Step> {
    let p = format!("{}:{}", k.api_version, k.plural);
    let coll = k.coll(ns);
    let a = k.item(ns, "a");
    let sel = format!("labelSelector=diff%3D{ns}");
    let mut s = vec![
        req(format!("{p} create"), Method::POST, &coll, Some(k.object(ns, "a")), JSON),
        req(format!("{p} create again (AlreadyExists)"), Method::POST, &coll, Some(k.object(ns, "a")), JSON),
        get(format!("{p} get"), &a),
        get(format!("{p} get missing"), k.item(ns, "missing")),
        get(format!("{p} list by label"), format!("{coll}?{sel}")),
        req(format!("{p} create b"), Method::POST, &coll, Some(k.object(ns, "b")), JSON),
        get(format!("{p} list limit=1"), format!("{coll}?{sel}&limit=1")),
        get(format!("{p} list bad label selector"), format!("{coll}?labelSelector=a%20in%20(")),
        get(format!("{p} list unsupported field selector"), format!("{coll}?fieldSelector=spec.bogus%3Dx")),
        get(
            format!("{p} list field selector metadata.name"),
            format!("{coll}?fieldSelector=metadata.name%3D{}", k.name(ns, "a")),
        ),
        req(
            format!("{p} merge patch"),
            Method::PATCH,
            &a,
            Some(json!({"metadata": {"labels": {"patched": "merge"}}})),
            MERGE,
        ),
        req(
            format!("{p} json patch"),
            Method::PATCH,
            &a,
            Some(json!([{"op": "add", "path": "/metadata/annotations", "value": {"j": "1"}}])),
            JSONPATCH,
        ),
        req(
            format!("{p} json patch failing test"),
            Method::PATCH,
            &a,
            Some(json!([{"op": "test", "path": "/metadata/name", "value": "other"}])),
            JSONPATCH,
        ),
        req(
            format!("{p} strategic merge patch"),
            Method::PATCH,
            &a,
            Some(json!({"metadata": {"labels": {"patched": "smp"}}})),
            SMP,
        ),
        {
            let mut o = k.object(ns, "a");
            o["metadata"]["labels"]["applied"] = json!("yes");
            req(format!("{p} server-side apply"), Method::PATCH, format!("{a}?fieldManager=diff-apply"), Some(o), APPLY)
        },
        req(format!("{p} apply without fieldManager"), Method::PATCH, &a, Some(k.object(ns, "a")), APPLY),
        {
            let mut o = k.object(ns, "a");
            o["metadata"]["labels"]["diff"] = json!("conflict");
            req(format!("{p} apply conflict"), Method::PATCH, format!("{a}?fieldManager=other"), Some(o), APPLY)
        },
        req(
            format!("{p} apply create c"),
            Method::PATCH,
            format!("{}?fieldManager=diff-apply", k.item(ns, "c")),
            Some(k.object(ns, "c")),
            APPLY,
        ),
        put(format!("{p} PUT with resourceVersion"), &a, "", Rv::Keep, |o| o["metadata"]["labels"]["put"] = json!("1")),
        put(format!("{p} PUT without resourceVersion"), &a, "", Rv::Drop, |o| {
            o["metadata"]["labels"]["put"] = json!("2")
        }),
        put(format!("{p} PUT stale resourceVersion"), &a, "", Rv::Stale, |o| {
            o["metadata"]["labels"]["put"] = json!("3")
        }),
        req(
            format!("{p} create dryRun=All"),
            Method::POST,
            format!("{coll}?dryRun=All"),
            Some(k.object(ns, "d")),
            JSON,
        ),
        get(format!("{p} get after dryRun create"), k.item(ns, "d")),
        req(
            format!("{p} create dryRun=Some"),
            Method::POST,
            format!("{coll}?dryRun=Some"),
            Some(k.object(ns, "d")),
            JSON,
        ),
        {
            let mut o = k.object(ns, "e");
            o["bogus"] = json!(1);
            req(
                format!("{p} create unknown field Strict"),
                Method::POST,
                format!("{coll}?fieldValidation=Strict"),
                Some(o),
                JSON,
            )
        },
        {
            let mut o = k.object(ns, "f");
            o["bogus"] = json!(1);
            req(
                format!("{p} create unknown field Warn"),
                Method::POST,
                format!("{coll}?fieldValidation=Warn"),
                Some(o),
                JSON,
            )
        },
        {
            let mut o = k.object(ns, "g");
            o["metadata"]["name"] = json!("Bad_Name");
            req(format!("{p} create invalid name"), Method::POST, &coll, Some(o), JSON)
        },
        {
            let mut o = k.object(ns, "x");
            let m = o["metadata"].as_object_mut().unwrap();
            m.remove("name");
            m.insert("generateName".into(), json!(k.name(ns, "gen-")));
            req(format!("{p} create generateName"), Method::POST, &coll, Some(o), JSON)
        },
        get(format!("{p} get as Table"), &a).accept(TABLE),
        get(format!("{p} list as Table"), format!("{coll}?{sel}")).accept(TABLE),
        get(format!("{p} get as PartialObjectMetadata"), &a).accept(POM),
        req(format!("{p} delete dryRun=All"), Method::DELETE, format!("{a}?dryRun=All"), None, JSON),
        req(format!("{p} delete"), Method::DELETE, &a, None, JSON),
        req(format!("{p} delete again"), Method::DELETE, &a, None, JSON),
        req(format!("{p} deletecollection by label"), Method::DELETE, format!("{coll}?{sel}"), None, JSON),
        get(format!("{p} list after deletecollection"), format!("{coll}?{sel}")),
    ];
    // The generic error paths are the same for every kind: run them for a representative subset only.
    const EXTENDED: &[&str] =
        &["configmaps", "pods", "statefulsets", "leases", "etcds", "etcdoperatortasks", "nodes", "jobs"];
    if !EXTENDED.contains(&k.plural) || (k.plural == "events") {
        const ONLY_EXTENDED: &[&str] = &[
            "list bad label selector",
            "list unsupported field selector",
            "list field selector metadata.name",
            "json patch failing test",
            "apply without fieldManager",
            "apply conflict",
            "apply create c",
            "create dryRun=Some",
            "create unknown field Warn",
            "create invalid name",
            "create generateName",
            "list as Table",
            "delete again",
            "get after dryRun create",
            "delete dryRun=All",
            "list after deletecollection",
            "PUT stale resourceVersion",
            "get as PartialObjectMetadata",
        ];
        s.retain(|st| !ONLY_EXTENDED.iter().any(|e| st.name == format!("{p} {e}")));
    }
    if k.status {
        let b = k.item(ns, "s");
        s.push(req(format!("{p} create s"), Method::POST, &coll, Some(k.object(ns, "s")), JSON).unscored());
        s.push(get(format!("{p} get /status"), format!("{b}/status")));
        s.push(req(
            format!("{p} merge patch /status"),
            Method::PATCH,
            format!("{b}/status"),
            Some(json!({"status": {"observedGeneration": 1}, "metadata": {"labels": {"ignored": "yes"}}})),
            MERGE,
        ));
        s.push(put(format!("{p} PUT /status without resourceVersion"), format!("{b}/status"), "", Rv::Drop, |o| {
            o["status"]["observedGeneration"] = json!(2)
        }));
        s.push(put(format!("{p} PUT /status with resourceVersion"), format!("{b}/status"), "", Rv::Keep, |o| {
            o["status"]["observedGeneration"] = json!(3)
        }));
        if k.scale {
            s.push(get(format!("{p} get /scale"), format!("{b}/scale")));
            s.push(req(
                format!("{p} patch /scale"),
                Method::PATCH,
                format!("{b}/scale"),
                Some(json!({"spec": {"replicas": 2}})),
                MERGE,
            ));
            s.push(
                get(format!("{p} get after scale"), &b).cmp(Cmp::Ptrs(vec!["/spec/replicas", "/metadata/generation"])),
            );
            let scale = json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": k.name(ns, "s")},
                               "spec": {"replicas": 3}});
            s.push(req(
                format!("{p} apply /scale (conflict)"),
                Method::PATCH,
                format!("{b}/scale?fieldManager=scaler"),
                Some(scale.clone()),
                APPLY,
            ));
            s.push(req(
                format!("{p} apply /scale force"),
                Method::PATCH,
                format!("{b}/scale?fieldManager=scaler&force=true"),
                Some(scale),
                APPLY,
            ));
            s.push(get(format!("{p} managedFields after scale"), &b).cmp(Cmp::Ptrs(vec!["/metadata/managedFields"])));
        }
        s.push(req(format!("{p} delete s"), Method::DELETE, &b, None, JSON).unscored());
    }
    s
}

fn yaml_of(v: &Value) -> String {
    // JSON is YAML.
    v.to_string()
}

/// Hand-written scenarios for specific behaviours druidctl and the landscape rely on.
fn special_scenarios(ns_for: &mut dyn FnMut(&str) -> String) -> Vec<Scenario> {
    let mut out = Vec::new();

    // Discovery, version, OpenAPI, unknown paths, authentication.
    let ns = ns_for("discovery");
    out.push(Scenario {
        name: "discovery+auth".into(),
        ns: ns.clone(),
        steps: vec![
            get("/version", "/version").cmp(Cmp::Ptrs(vec!["/major", "/minor", "/gitVersion"])),
            get("/version keys", "/version").cmp(Cmp::Ptrs(vec!["/platform", "/goVersion", "/compiler"])),
            get("/api", "/api").cmp(Cmp::Ptrs(vec!["/kind", "/versions"])),
            get("/apis groups druid", "/apis/druid.gardener.cloud").cmp(Cmp::Ptrs(vec!["/kind", "/name", "/preferredVersion"])),
            get("/api/v1 configmaps resource", "/api/v1").cmp(Cmp::Ptrs(vec!["/kind", "/groupVersion"])),
            get("/apis/apps/v1", "/apis/apps/v1").cmp(Cmp::Ptrs(vec!["/kind", "/groupVersion"])),
            get("/apis/druid.gardener.cloud/v1alpha1", "/apis/druid.gardener.cloud/v1alpha1"),
            get("/apis/cert-manager.io/v1", "/apis/cert-manager.io/v1"),
            get("/apis/machine.sapcloud.io/v1alpha1", "/apis/machine.sapcloud.io/v1alpha1"),
            get("/apis/coordination.k8s.io/v1", "/apis/coordination.k8s.io/v1"),
            get("/apis/batch/v1", "/apis/batch/v1"),
            get("/apis/policy/v1", "/apis/policy/v1"),
            get("/openapi/v2", "/openapi/v2").cmp(Cmp::Code),
            get("/openapi/v3", "/openapi/v3").cmp(Cmp::Code),
            get("/openapi/v3 apps/v1", "/openapi/v3/apis/apps/v1").cmp(Cmp::Code),
            get("/healthz", "/healthz"),
            get("/readyz", "/readyz").cmp(Cmp::Code),
            get("/livez", "/livez").cmp(Cmp::Code),
            get("unknown path /foo", "/foo"),
            get("unknown group /apis/nope.example.com/v1", "/apis/nope.example.com/v1"),
            get("unknown resource /api/v1/nopes", "/api/v1/nopes"),
            get("unknown namespaced resource", format!("/api/v1/namespaces/{ns}/nopes")),
            get("namespace missing: list configmaps", "/api/v1/namespaces/diff-missing-ns/configmaps"),
            req("create in missing namespace", Method::POST, "/api/v1/namespaces/diff-missing-ns/configmaps", Some(json!({"metadata": {"name": "a"}, "data": {}})), JSON),
            req("POST to /version", Method::POST, "/version", Some(json!({})), JSON),
            get("invalid token: /api/v1/namespaces", "/api/v1/namespaces").who(Who::Invalid),
            get("invalid token: /version", "/version").who(Who::Invalid),
            get("anonymous: /api/v1/namespaces", "/api/v1/namespaces").who(Who::Anon),
            get("anonymous: /version", "/version").who(Who::Anon).cmp(Cmp::Code),
            get("anonymous: /healthz", "/healthz").who(Who::Anon),
            get("no-permission user: list pods", format!("/api/v1/namespaces/{ns}/pods")).who(Who::Limited),
            get("no-permission user: get etcd", format!("/apis/druid.gardener.cloud/v1alpha1/namespaces/{ns}/etcds/e")).who(Who::Limited),
            get("no-permission user: list nodes", "/api/v1/nodes").who(Who::Limited),
            req("no-permission user: SelfSubjectAccessReview", Method::POST, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                Some(json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                            "spec": {"resourceAttributes": {"namespace": ns, "verb": "list", "resource": "pods"}}})), JSON)
                .who(Who::Limited)
                .cmp(Cmp::Ptrs(vec!["/status/allowed", "/kind"])),
            req("admin SelfSubjectAccessReview", Method::POST, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                Some(json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                            "spec": {"resourceAttributes": {"namespace": ns, "verb": "patch", "group": "druid.gardener.cloud", "resource": "etcds", "subresource": "status"}}})), JSON),
            req("admin SelfSubjectAccessReview non-resource", Method::POST, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                Some(json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                            "spec": {"nonResourceAttributes": {"path": "/healthz", "verb": "get"}}})), JSON),
            req("admin SelfSubjectReview", Method::POST, "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})), JSON)
                .cmp(Cmp::Ptrs(vec!["/kind", "/status/userInfo/groups"])),
            get("list CRDs (druid)", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/etcds.druid.gardener.cloud")
                .cmp(Cmp::Ptrs(vec!["/spec/names", "/spec/scope", "/status/acceptedNames"])),
            get("CRD missing", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nopes.example.com"),
            get("list namespaces filtered by name", format!("/api/v1/namespaces?fieldSelector=metadata.name%3D{ns}")),
            get("get own namespace", format!("/api/v1/namespaces/{ns}")),
            get("get own namespace as Table", format!("/api/v1/namespaces/{ns}")).accept(TABLE),
            req("strategic merge patch of a custom resource that does not exist", Method::PATCH,
                format!("/apis/druid.gardener.cloud/v1alpha1/namespaces/{ns}/etcds/nope"), Some(json!({"spec": {"replicas": 1}})), SMP),
            get("get own namespace as Table v1beta1 only", format!("/api/v1/namespaces/{ns}"))
                .accept("application/json;as=Table;v=v1beta1;g=meta.k8s.io")
                .cmp(Cmp::Ptrs(vec!["/kind", "/apiVersion"])),
            get("list nodes (empty)", "/api/v1/nodes"),
            get("list events all namespaces, by ns field", format!("/api/v1/events?fieldSelector=metadata.namespace%3D{ns}")),
            get("list pods all namespaces, by ns field", format!("/api/v1/pods?fieldSelector=metadata.namespace%3D{ns}")),
            get("list leases all namespaces, by label", format!("/apis/coordination.k8s.io/v1/leases?labelSelector=diff%3D{ns}")),
            get("sendInitialEvents on list without watch", format!("/api/v1/namespaces/{ns}/configmaps?sendInitialEvents=true")),
            get("watch sendInitialEvents without resourceVersionMatch", format!("/api/v1/namespaces/{ns}/configmaps?watch=1&sendInitialEvents=true&timeoutSeconds=1")),
            get("watch sendInitialEvents without allowWatchBookmarks", format!("/api/v1/namespaces/{ns}/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1")),
            get("list resourceVersionMatch without resourceVersion", format!("/api/v1/namespaces/{ns}/configmaps?resourceVersionMatch=NotOlderThan")),
            get("list bad limit", format!("/api/v1/namespaces/{ns}/configmaps?limit=abc")),
            get("list bad continue", format!("/api/v1/namespaces/{ns}/configmaps?continue=garbage")),
            req("unsupported patch type", Method::PATCH, format!("/api/v1/namespaces/{ns}/configmaps/x"), Some(json!({})), "text/plain"),
            req("POST with invalid JSON", Method::POST, format!("/api/v1/namespaces/{ns}/configmaps"), None, JSON).raw_body("{not json"),
            req("POST kind mismatch", Method::POST, format!("/api/v1/namespaces/{ns}/configmaps"),
                Some(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "km"}})), JSON),
            req("POST namespace mismatch", Method::POST, format!("/api/v1/namespaces/{ns}/configmaps"),
                Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "nm", "namespace": "other"}})), JSON),
            req("POST with resourceVersion", Method::POST, format!("/api/v1/namespaces/{ns}/configmaps"),
                Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "rv", "resourceVersion": "5"}})), JSON),
            req("POST without name", Method::POST, format!("/api/v1/namespaces/{ns}/configmaps"),
                Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})), JSON),
            req("PUT name mismatch", Method::PUT, format!("/api/v1/namespaces/{ns}/configmaps/one"),
                Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "two"}})), JSON),
            req("PUT to missing configmap (create on update?)", Method::PUT, format!("/api/v1/namespaces/{ns}/configmaps/putnew"),
                Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "putnew"}, "data": {"a": "b"}})), JSON),
            req("PUT to missing etcd", Method::PUT, format!("/apis/druid.gardener.cloud/v1alpha1/namespaces/{ns}/etcds/putnew"),
                Some(json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd", "metadata": {"name": "putnew"},
                            "spec": {"replicas": 1, "labels": {"a": "b"}, "etcd": {}, "backup": {}}})), JSON),
            req("merge patch missing object", Method::PATCH, format!("/api/v1/namespaces/{ns}/configmaps/nope"), Some(json!({"data": {"a": "b"}})), MERGE),
            req("DELETE collection of namespaces not allowed", Method::DELETE, "/api/v1/namespaces?labelSelector=diff%3Dnone", None, JSON),
            req("label value too long", Method::POST, format!("/api/v1/namespaces/{ns}/configmaps"),
                Some(json!({"metadata": {"name": "lbl", "labels": {"a": "x".repeat(64)}}})), JSON),
            req("invalid label key", Method::POST, format!("/api/v1/namespaces/{ns}/configmaps"),
                Some(json!({"metadata": {"name": "lbl2", "labels": {"a/b/c": "x"}}})), JSON),
            req("invalid annotation key", Method::POST, format!("/api/v1/namespaces/{ns}/configmaps"),
                Some(json!({"metadata": {"name": "ann", "annotations": {"-bad": "x"}}})), JSON),
            req("service name not DNS-1035", Method::POST, format!("/api/v1/namespaces/{ns}/services"),
                Some(json!({"metadata": {"name": "1svc"}, "spec": {"ports": [{"port": 80}]}})), JSON),
            req("namespace name not DNS-1123 label", Method::POST, "/api/v1/namespaces", Some(json!({"metadata": {"name": "a.b"}})), JSON),
        ],
    });

    // Pods: immutability, proxy to a pod without IP, eviction, PDB.
    let ns = ns_for("pods");
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    let pod = |name: &str, labels: Value| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": {"containers": [
            {"name": "c", "image": "busybox:1.36", "ports": [{"name": "http", "containerPort": 8080}]}]}})
    };
    out.push(Scenario {
        name: "pods".into(),
        ns: ns.clone(),
        steps: vec![
            req("create pod p1", Method::POST, &pods, Some(pod("p1", json!({"app": "x"}))), JSON),
            put("pod: change image (allowed)", format!("{pods}/p1"), "", Rv::Keep, |o| o["spec"]["containers"][0]["image"] = json!("busybox:1.37")),
            put("pod: add env (forbidden)", format!("{pods}/p1"), "", Rv::Keep, |o| o["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "1"}])),
            req("pod: patch restartPolicy (forbidden)", Method::PATCH, format!("{pods}/p1"), Some(json!({"spec": {"restartPolicy": "Never"}})), SMP),
            req("pod: patch activeDeadlineSeconds (allowed)", Method::PATCH, format!("{pods}/p1"), Some(json!({"spec": {"activeDeadlineSeconds": 30}})), SMP),
            req("pod: SMP add container env by merge key", Method::PATCH, format!("{pods}/p1"),
                Some(json!({"spec": {"containers": [{"name": "c", "env": [{"name": "B", "value": "2"}]}]}})), SMP),
            req("pod: patch status phase", Method::PATCH, format!("{pods}/p1/status"),
                Some(json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})), SMP),
            get("pod: get after status patch", format!("{pods}/p1")),
            req("pod: SMP add a container to the running pod (forbidden)", Method::PATCH, format!("{pods}/p1"),
                Some(json!({"spec": {"containers": [{"name": "c2", "image": "busybox"}]}})), SMP),
            get("pod proxy to a pod without IP", format!("{pods}/p1/proxy/healthz")),
            get("pod proxy with port to a pod without IP", format!("{pods}/p1:8080/proxy/healthz")),
            get("pod proxy with port name", format!("{pods}/p1:http/proxy/healthz")),
            get("pod proxy missing pod", format!("{pods}/nope/proxy/healthz")),
            get("service proxy missing service", format!("/api/v1/namespaces/{ns}/services/nope:80/proxy/healthz")),
            get("pod log (no kubelet)", format!("{pods}/p1/log")).cmp(Cmp::Code),
            req("create pod without containers", Method::POST, &pods, Some(json!({"metadata": {"name": "empty"}, "spec": {"containers": []}})), JSON),
            req("create pod with invalid restartPolicy", Method::POST, &pods,
                Some(json!({"metadata": {"name": "badrp"}, "spec": {"restartPolicy": "Sometimes", "containers": [container()]}})), JSON),
            req("create pod without image", Method::POST, &pods,
                Some(json!({"metadata": {"name": "noimage"}, "spec": {"containers": [{"name": "c"}]}})), JSON),
            req("create pod with duplicate container names", Method::POST, &pods,
                Some(json!({"metadata": {"name": "dup"}, "spec": {"containers": [container(), container()]}})), JSON),
            req("eviction of a pod without PDB", Method::POST, format!("{pods}/p1/eviction"),
                Some(json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p1", "namespace": ns}})), JSON),
            get("pod after eviction", format!("{pods}/p1")),
            req("eviction of a missing pod", Method::POST, format!("{pods}/nope/eviction"),
                Some(json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "nope", "namespace": ns}})), JSON),
            req("create pod p2", Method::POST, &pods, Some(pod("p2", json!({"app": "guarded"}))), JSON),
            req("create PDB", Method::POST, format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"),
                Some(json!({"metadata": {"name": "pdb"}, "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}}})), JSON),
            req("PDB status: no disruptions allowed", Method::PATCH, format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/pdb/status"),
                Some(json!({"status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1, "observedGeneration": 1}})), MERGE),
            req("eviction blocked by PDB", Method::POST, format!("{pods}/p2/eviction"),
                Some(json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p2", "namespace": ns}})), JSON),
            req("eviction with dryRun", Method::POST, format!("{pods}/p2/eviction?dryRun=All"),
                Some(json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p2", "namespace": ns}, "deleteOptions": {"dryRun": ["All"]}})), JSON),
            req("delete pod with gracePeriodSeconds=0", Method::DELETE, format!("{pods}/p2?gracePeriodSeconds=0"), None, JSON),
            req("create pod with finalizer", Method::POST, &pods,
                Some(json!({"metadata": {"name": "fin", "finalizers": ["example.com/hold"]}, "spec": {"containers": [container()]}})), JSON),
            req("delete pod with finalizer", Method::DELETE, format!("{pods}/fin"), None, JSON),
            req("add finalizer to deleting pod", Method::PATCH, format!("{pods}/fin"),
                Some(json!({"metadata": {"finalizers": ["example.com/hold", "example.com/new"]}})), MERGE),
            req("remove finalizer of deleting pod", Method::PATCH, format!("{pods}/fin"), Some(json!({"metadata": {"finalizers": null}})), MERGE),
            get("deleted pod gone", format!("{pods}/fin")),
            get("list pods by spec.nodeName", format!("{pods}?fieldSelector=spec.nodeName%3D")),
            get("list pods by status.phase", format!("{pods}?fieldSelector=status.phase%3DPending")),
        ],
    });

    // Strategic merge patch list order: `$setElementOrder` as kubectl's client-side apply sends it.
    let ns = ns_for("smporder");
    let deps = format!("/apis/apps/v1/namespaces/{ns}/deployments");
    let named = |names: &[&str]| names.iter().map(|n| json!({"name": n})).collect::<Vec<Value>>();
    let containers =
        |names: &[&str]| names.iter().map(|n| json!({"name": n, "image": "busybox:1.36"})).collect::<Vec<Value>>();
    let template_patch = |spec: Value| json!({"spec": {"template": {"spec": spec}}});
    out.push(Scenario {
        name: "strategic merge order".into(),
        ns: ns.clone(),
        steps: vec![
            req("SMP order: create deployment a,b,c", Method::POST, &deps,
                Some(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}},
                             "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": containers(&["a", "b", "c"])}}}})), JSON)
                .cmp(Cmp::Ptrs(vec!["/spec/template/spec/containers"])),
            req("SMP order: $setElementOrder c,a,d with a changed and d new", Method::PATCH, format!("{deps}/d"),
                Some(template_patch(json!({"$setElementOrder/containers": named(&["c", "a", "d"]),
                    "containers": [{"name": "a", "image": "busybox:1.37"}, {"name": "d", "image": "busybox:1.36"}]}))), SMP)
                .cmp(Cmp::Ptrs(vec!["/spec/template/spec/containers"])),
            req("SMP order: $setElementOrder alone reverses", Method::PATCH, format!("{deps}/d"),
                Some(template_patch(json!({"$setElementOrder/containers": named(&["d", "c", "b", "a"])}))), SMP)
                .cmp(Cmp::Ptrs(vec!["/spec/template/spec/containers"])),
            req("SMP order: patch list against its $setElementOrder (500)", Method::PATCH, format!("{deps}/d"),
                Some(template_patch(json!({"$setElementOrder/containers": named(&["d", "c", "b", "a"]),
                    "containers": [{"name": "b", "$setElementOrder/env": named(&["Y", "X"]),
                                    "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}]}))), SMP),
            req("SMP order: $setElementOrder of env inside a container", Method::PATCH, format!("{deps}/d"),
                Some(template_patch(json!({"$setElementOrder/containers": named(&["d", "c", "b", "a"]),
                    "containers": [{"name": "b", "$setElementOrder/env": named(&["Y", "X"]),
                                    "env": [{"name": "Y", "value": "2"}, {"name": "X", "value": "1"}]}]}))), SMP)
                .cmp(Cmp::Ptrs(vec!["/spec/template/spec/containers"])),
            req("SMP order: $setElementOrder with a deleted container", Method::PATCH, format!("{deps}/d"),
                Some(template_patch(json!({"$setElementOrder/containers": named(&["a", "b", "c"]),
                    "containers": [{"name": "d", "$patch": "delete"}]}))), SMP)
                .cmp(Cmp::Ptrs(vec!["/spec/template/spec/containers"])),
            req("SMP order: finalizers against their $setElementOrder (500)", Method::PATCH, format!("{deps}/d"),
                Some(json!({"metadata": {"$setElementOrder/finalizers": ["example.com/b", "example.com/a"],
                    "finalizers": ["example.com/a", "example.com/b"]}})), SMP),
            req("SMP order: finalizers $setElementOrder", Method::PATCH, format!("{deps}/d"),
                Some(json!({"metadata": {"$setElementOrder/finalizers": ["example.com/b", "example.com/c", "example.com/a"],
                    "finalizers": ["example.com/b", "example.com/a"]}})), SMP)
                .cmp(Cmp::Ptrs(vec!["/metadata/finalizers"])),
            req("SMP order: full answer", Method::PATCH, format!("{deps}/d"),
                Some(json!({"metadata": {"finalizers": null}})), MERGE),
        ],
    });

    // Streaming lists: `sendInitialEvents` watches as client-go's reflector opens them (WatchList), the
    // `k8s.io/initial-events-end` bookmark, and the parameter combinations the server refuses.
    let ns = ns_for("watchlist");
    let cms = format!("/api/v1/namespaces/{ns}/configmaps");
    let etcds = format!("/apis/druid.gardener.cloud/v1alpha1/namespaces/{ns}/etcds");
    let streaming =
        "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=20";
    let labelled = |name: &str, s: &str| json!({"metadata": {"name": name, "labels": {"s": s}}, "data": {"a": "1"}});
    out.push(Scenario {
        name: "watch list".into(),
        ns: ns.clone(),
        steps: vec![
            req("watch list: configmap a (s=1)", Method::POST, &cms, Some(labelled("a", "1")), JSON).unscored(),
            req("watch list: configmap b (s=2)", Method::POST, &cms, Some(labelled("b", "2")), JSON).unscored(),
            req("watch list: etcd e0", Method::POST, &etcds,
                Some(json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd", "metadata": {"name": "e0"},
                            "spec": {"replicas": 1, "labels": {"app": "etcd"}, "etcd": {}, "backup": {}}})), JSON).unscored(),
            watch_start(11, format!("{cms}?{streaming}&labelSelector=s%3D1")),
            watch_start(12, format!("{etcds}?{streaming}")),
            watch_start(13, format!("{cms}?{streaming}&resourceVersion=0")),
            Step {
                name: "watch #14 open".into(),
                op: Op::WatchStart { id: 14, path: format!("{cms}?{streaming}"), accept: POM },
                cmp: Cmp::Code,
                scored: false,
            },
            req("watch list writes: create c (s=1)", Method::POST, &cms, Some(labelled("c", "1")), JSON),
            req("watch list writes: annotate e0", Method::PATCH, format!("{etcds}/e0"),
                Some(json!({"metadata": {"annotations": {"gardener.cloud/operation": "reconcile"}}})), MERGE),
            watch_end("watch list configmaps s=1: events", 11),
            watch_end("watch list etcds: events", 12),
            watch_end("watch list configmaps from resourceVersion 0: events", 13),
            watch_end("watch list configmaps as PartialObjectMetadata: events", 14),
            get("watch list with sendInitialEvents=false and resourceVersionMatch",
                format!("{cms}?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1")),
            get("watch list with resourceVersionMatch=Exact",
                format!("{cms}?watch=1&sendInitialEvents=true&resourceVersionMatch=Exact&allowWatchBookmarks=true&timeoutSeconds=1")),
            get("watch list with a resourceVersion in the future",
                format!("{cms}?{streaming}&resourceVersion=99999999")).cmp(Cmp::Code),
            get("list resourceVersion=0 NotOlderThan", format!("{cms}?resourceVersion=0&resourceVersionMatch=NotOlderThan")),
        ],
    });

    // OpenAPI as kubectl reads it: the v3 index, a group-version document's schemas (explain) and operations
    // (server-side field validation), for a custom resource group and a built-in one.
    let ns = ns_for("openapi");
    let druid_doc = "/openapi/v3/apis/druid.gardener.cloud/v1alpha1";
    out.push(Scenario {
        name: "openapi".into(),
        ns,
        steps: vec![
            get("openapi v3 index", "/openapi/v3").cmp(Cmp::Code),
            get("openapi v3 druid: info", druid_doc).cmp(Cmp::Ptrs(vec!["/openapi", "/info"])),
            get("openapi v3 druid: Etcd apiVersion, kind, metadata", druid_doc).cmp(Cmp::Ptrs(vec![
                "/components/schemas/cloud.gardener.druid.v1alpha1.Etcd/properties/apiVersion",
                "/components/schemas/cloud.gardener.druid.v1alpha1.Etcd/properties/kind",
                "/components/schemas/cloud.gardener.druid.v1alpha1.Etcd/properties/metadata",
            ])),
            get("openapi v3 druid: Etcd spec.replicas and GVK", druid_doc).cmp(Cmp::Ptrs(vec![
                "/components/schemas/cloud.gardener.druid.v1alpha1.Etcd/properties/spec/properties/replicas",
                "/components/schemas/cloud.gardener.druid.v1alpha1.Etcd/x-kubernetes-group-version-kind",
                "/components/schemas/cloud.gardener.druid.v1alpha1.Etcd/type",
            ])),
            get("openapi v3 druid: fieldValidation of Etcd PATCH", druid_doc).cmp(Cmp::Ptrs(vec![
                "/paths/~1apis~1druid.gardener.cloud~1v1alpha1~1namespaces~1{namespace}~1etcds~1{name}/patch/x-kubernetes-action",
            ])),
            get("openapi v3 apps/v1: info", "/openapi/v3/apis/apps/v1").cmp(Cmp::Ptrs(vec!["/openapi", "/info"])),
            get("openapi v3 apps/v1: StatefulSetSpec replicas", "/openapi/v3/apis/apps/v1").cmp(Cmp::Ptrs(vec![
                "/components/schemas/io.k8s.api.apps.v1.StatefulSetSpec/properties/replicas",
                "/components/schemas/io.k8s.api.apps.v1.StatefulSet/properties/kind",
            ])),
            get("openapi v3 unknown group-version", "/openapi/v3/apis/nope.example.com/v1").cmp(Cmp::Code),
            kubectl("kubectl explain etcd", "explain etcd", None),
            kubectl("kubectl explain etcd.metadata", "explain etcd.metadata", None),
            kubectl("kubectl explain etcd.spec.backup.store", "explain etcd.spec.backup.store", None),
            kubectl("kubectl explain statefulset.spec.replicas", "explain statefulset.spec.replicas", None),
            kubectl("kubectl explain pod.spec.containers.image", "explain pod.spec.containers.image", None),
        ],
    });

    // Server-side apply of a custom resource: owners, removal of fields no longer applied, conflicts, force,
    // associative lists (`x-kubernetes-list-type: map`), atomic maps and the status subresource.
    let ns = ns_for("crapply");
    let etcds = format!("/apis/druid.gardener.cloud/v1alpha1/namespaces/{ns}/etcds");
    let e = format!("{etcds}/e");
    let etcd = |extra_labels: Value, spec: Value| {
        let mut spec_all = json!({"replicas": 1, "labels": {"app": "etcd"}, "etcd": {}, "backup": {}});
        if let (Some(m), Some(add)) = (spec_all.as_object_mut(), spec.as_object()) {
            for (k, v) in add {
                m.insert(k.clone(), v.clone());
            }
        }
        json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
               "metadata": {"name": "e", "labels": extra_labels}, "spec": spec_all})
    };
    let partial = |spec: Value| json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd", "metadata": {"name": "e"}, "spec": spec});
    out.push(Scenario {
        name: "apply custom resource".into(),
        ns: ns.clone(),
        steps: vec![
            req("CR apply: create by a", Method::PATCH, format!("{e}?fieldManager=a"),
                Some(etcd(json!({"x": "1", "y": "2"}), json!({"backup": {"resources": {"claims": [{"name": "c1"}, {"name": "c2"}]},
                    "store": {"provider": "S3", "prefix": "p", "secretRef": {"name": "s1", "namespace": ns}}}}))), APPLY),
            req("CR apply: a drops label y", Method::PATCH, format!("{e}?fieldManager=a"),
                Some(etcd(json!({"x": "1"}), json!({"backup": {"resources": {"claims": [{"name": "c1"}, {"name": "c2"}]},
                    "store": {"provider": "S3", "prefix": "p", "secretRef": {"name": "s1", "namespace": ns}}}}))), APPLY),
            req("CR apply: b adds a claim (associative list)", Method::PATCH, format!("{e}?fieldManager=b"),
                Some(partial(json!({"backup": {"resources": {"claims": [{"name": "c3"}]}}}))), APPLY),
            req("CR apply: b changes replicas (conflict)", Method::PATCH, format!("{e}?fieldManager=b"),
                Some(partial(json!({"replicas": 3}))), APPLY),
            req("CR apply: b changes replicas (force)", Method::PATCH, format!("{e}?fieldManager=b&force=true"),
                Some(partial(json!({"replicas": 3}))), APPLY),
            req("CR apply: b replaces the atomic secretRef (force)", Method::PATCH, format!("{e}?fieldManager=b&force=true"),
                Some(partial(json!({"backup": {"store": {"secretRef": {"name": "s2"}}}}))), APPLY),
            req("CR apply: a applies without the claims", Method::PATCH, format!("{e}?fieldManager=a"),
                Some(etcd(json!({"x": "1"}), json!({"replicas": 3, "backup": {"store": {"provider": "S3", "prefix": "p"}}}))), APPLY),
            req("CR apply: status by s", Method::PATCH, format!("{e}/status?fieldManager=s"),
                Some(json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd", "metadata": {"name": "e"},
                            "status": {"observedGeneration": 1, "ready": false}})), APPLY),
            req("CR apply: invalid value", Method::PATCH, format!("{e}?fieldManager=a"),
                Some(partial(json!({"replicas": "three"}))), APPLY),
            req("CR apply: unknown field Strict", Method::PATCH, format!("{e}?fieldManager=a&fieldValidation=Strict"),
                Some(partial(json!({"bogus": 1}))), APPLY),
            req("CR apply: unknown field (default validation)", Method::PATCH, format!("{e}?fieldManager=c"),
                Some(partial(json!({"bogus": 1}))), APPLY),
            req("CR apply: dryRun", Method::PATCH, format!("{e}?fieldManager=d&dryRun=All"),
                Some(partial(json!({"replicas": 5}))), APPLY),
            req("CR apply: kind mismatch", Method::PATCH, format!("{e}?fieldManager=a"),
                Some(json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "EtcdOpsTask", "metadata": {"name": "e"}})), APPLY),
            req("CR apply: name mismatch", Method::PATCH, format!("{e}?fieldManager=a"),
                Some(json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd", "metadata": {"name": "other"}})), APPLY),
            get("CR apply: final object", &e),
        ],
    });

    // Eviction of a running pod guarded by a PodDisruptionBudget: the 429 and its cause, dry run, an allowed
    // eviction that records the disrupted pod, a budget not yet observed, two budgets for one pod.
    let ns = ns_for("eviction");
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    let pdbs = format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets");
    let running = |name: &str, app: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": app}},
               "spec": {"containers": [container()]}})
    };
    let make_running = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    let evict = |name: &str| json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}});
    let budget_status = |allowed: i64, generation: i64| {
        json!({"status": {"disruptionsAllowed": allowed, "currentHealthy": 2, "desiredHealthy": 2 - allowed,
                          "expectedPods": 2, "observedGeneration": generation}})
    };
    out.push(Scenario {
        name: "eviction".into(),
        ns: ns.clone(),
        steps: vec![
            req("evict: pod r1", Method::POST, &pods, Some(running("r1", "guarded")), JSON).unscored(),
            req("evict: pod r2", Method::POST, &pods, Some(running("r2", "guarded")), JSON).unscored(),
            req("evict: r1 running", Method::PATCH, format!("{pods}/r1/status"), Some(make_running.clone()), SMP).unscored(),
            req("evict: r2 running", Method::PATCH, format!("{pods}/r2/status"), Some(make_running.clone()), SMP).unscored(),
            req("evict: create PDB", Method::POST, &pdbs,
                Some(json!({"metadata": {"name": "pdb"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "guarded"}}}})), JSON),
            req("evict: PDB not observed yet", Method::POST, format!("{pods}/r1/eviction"), Some(evict("r1")), JSON),
            req("evict: PDB status without disruptions", Method::PATCH, format!("{pdbs}/pdb/status"), Some(budget_status(0, 1)), MERGE)
                .cmp(Cmp::Ptrs(vec!["/status"])),
            req("evict: blocked by the PDB (429)", Method::POST, format!("{pods}/r1/eviction"), Some(evict("r1")), JSON),
            req("evict: blocked, dry run", Method::POST, format!("{pods}/r1/eviction?dryRun=All"), Some(evict("r1")), JSON),
            req("evict: name in body differs", Method::POST, format!("{pods}/r1/eviction"), Some(evict("r2")), JSON),
            req("evict: PDB allows one disruption", Method::PATCH, format!("{pdbs}/pdb/status"), Some(budget_status(1, 1)), MERGE)
                .cmp(Cmp::Ptrs(vec!["/status"])),
            req("evict: allowed, dry run", Method::POST, format!("{pods}/r1/eviction?dryRun=All"), Some(evict("r1")), JSON),
            get("evict: PDB after dry run", format!("{pdbs}/pdb")).cmp(Cmp::Ptrs(vec!["/status/disruptionsAllowed", "/status/disruptedPods"])),
            req("evict: allowed", Method::POST, format!("{pods}/r1/eviction"), Some(evict("r1")), JSON),
            get("evict: PDB records the disrupted pod", format!("{pdbs}/pdb"))
                .cmp(Cmp::Ptrs(vec!["/status/disruptionsAllowed", "/status/disruptedPods"])),
            get("evict: evicted pod", format!("{pods}/r1")).cmp(Cmp::Ptrs(vec!["/code", "/metadata/deletionTimestamp"])),
            req("evict: second PDB for the same pods", Method::POST, &pdbs,
                Some(json!({"metadata": {"name": "pdb2"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})), JSON)
                .unscored(),
            req("evict: two PDBs", Method::POST, format!("{pods}/r2/eviction"), Some(evict("r2")), JSON),
        ],
    });

    // Pod logs: what kube-apiserver answers itself before it reaches a kubelet (options, their validation, the
    // container, the node) and RBAC on pods/log.
    let ns = ns_for("podlogs");
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    let log_pod = |name: &str, node: Option<&str>, containers: &[&str]| {
        let cs: Vec<Value> = containers.iter().map(|c| json!({"name": c, "image": "busybox:1.36"})).collect();
        let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": cs}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        p
    };
    out.push(Scenario {
        name: "pod logs".into(),
        ns: ns.clone(),
        steps: vec![
            req(
                "log: create two-container pod",
                Method::POST,
                &pods,
                Some(log_pod("two", None, &["etcd", "backup-restore"])),
                JSON,
            ),
            req("log: create one-container pod", Method::POST, &pods, Some(log_pod("one", None, &["etcd"])), JSON),
            req(
                "log: create pod on a node that does not exist",
                Method::POST,
                &pods,
                Some(log_pod("sched", Some("diff-no-such-node"), &["etcd"])),
                JSON,
            ),
            get("log: container required with several", format!("{pods}/two/log")),
            get("log: unknown container", format!("{pods}/two/log?container=nope")),
            get("log: unscheduled pod", format!("{pods}/one/log")),
            get("log: tailLines not a number", format!("{pods}/one/log?tailLines=abc")),
            get("log: tailLines out of range", format!("{pods}/one/log?tailLines=99999999999999999999")),
            get("log: negative tailLines", format!("{pods}/one/log?tailLines=-1")),
            get("log: limitBytes 0", format!("{pods}/one/log?limitBytes=0")),
            get("log: sinceSeconds 0", format!("{pods}/one/log?sinceSeconds=0")),
            get(
                "log: sinceSeconds and sinceTime",
                format!("{pods}/one/log?sinceSeconds=1&sinceTime=2024-01-01T00:00:00Z"),
            ),
            get(
                "log: several invalid options",
                format!("{pods}/one/log?tailLines=-2&limitBytes=0&sinceSeconds=1&sinceTime=2024-01-01T00:00:00Z"),
            ),
            get("log: sinceTime not a time", format!("{pods}/one/log?sinceTime=bad")),
            get("log: sinceTime without time of day", format!("{pods}/one/log?sinceTime=2024-01-01")),
            get("log: stream while the gate is off", format!("{pods}/one/log?stream=Stdout")),
            get("log: follow with a value that is no bool", format!("{pods}/one/log?follow=maybe&timestamps=1")),
            get("log: missing pod", format!("{pods}/nope/log?container=etcd")),
            get("log: node does not exist", format!("{pods}/sched/log")),
            get("log: user without pods/log", format!("{pods}/one/log")).who(Who::Limited),
        ],
    });

    // PVC protection, Lease and Event validation, Jobs.
    let ns = ns_for("validation");
    let pvcs = format!("/api/v1/namespaces/{ns}/persistentvolumeclaims");
    let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases");
    let events = format!("/api/v1/namespaces/{ns}/events");
    let jobs = format!("/apis/batch/v1/namespaces/{ns}/jobs");
    let lease = |name: &str, spec: Value| json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}, "spec": spec});
    out.push(Scenario {
        name: "validation".into(),
        ns: ns.clone(),
        steps: vec![
            req("PVC create", Method::POST, &pvcs,
                Some(json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})), JSON),
            req("PVC resize (allowed? no storage class)", Method::PATCH, format!("{pvcs}/data"),
                Some(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}})), MERGE),
            req("PVC change accessModes (immutable)", Method::PATCH, format!("{pvcs}/data"),
                Some(json!({"spec": {"accessModes": ["ReadWriteMany"]}})), MERGE),
            req("PVC delete (protection finalizer)", Method::DELETE, format!("{pvcs}/data"), None, JSON),
            get("PVC after delete", format!("{pvcs}/data")),
            req("PVC without storage request", Method::POST, &pvcs,
                Some(json!({"metadata": {"name": "nostorage"}, "spec": {"accessModes": ["ReadWriteOnce"]}})), JSON),
            req("Lease create with times", Method::POST, &leases,
                Some(lease("l1", json!({"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": "2024-01-01T00:00:00.000000Z",
                                        "renewTime": "2024-01-01T00:00:01.000000Z", "leaseTransitions": 0}))), JSON),
            req("Lease time without microseconds", Method::POST, &leases,
                Some(lease("l2", json!({"holderIdentity": "a", "renewTime": "2024-01-01T00:00:01Z"}))), JSON),
            req("Lease invalid time", Method::POST, &leases, Some(lease("l3", json!({"renewTime": "yesterday"}))), JSON),
            req("Lease negative duration", Method::POST, &leases, Some(lease("l4", json!({"leaseDurationSeconds": -1}))), JSON),
            req("Lease negative transitions", Method::POST, &leases, Some(lease("l5", json!({"leaseTransitions": -1}))), JSON),
            req("Lease PUT without resourceVersion", Method::PUT, format!("{leases}/l1"),
                Some(lease("l1", json!({"holderIdentity": "b", "leaseDurationSeconds": 15}))), JSON),
            req("Lease PUT with an invalid renewTime, without resourceVersion", Method::PUT, format!("{leases}/l1"),
                Some(lease("l1", json!({"holderIdentity": "b", "renewTime": "yesterday"}))), JSON),
            req("Lease PUT missing without resourceVersion (create)", Method::PUT, format!("{leases}/l9"),
                Some(lease("l9", json!({"holderIdentity": "b"}))), JSON),
            req("Lease PUT with stale resourceVersion", Method::PUT, format!("{leases}/l1"),
                Some(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l1", "resourceVersion": "1"}, "spec": {}})), JSON),
            req("Lease strict unknown spec field", Method::POST, format!("{leases}?fieldValidation=Strict"),
                Some(lease("l6", json!({"holderIdentity": "a", "bogus": true}))), JSON),
            req("Lease duplicate field Strict", Method::POST, format!("{leases}?fieldValidation=Strict"), None, JSON)
                .raw_body(r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l7"},"spec":{"holderIdentity":"a","holderIdentity":"b"}}"#),
            req("Event involvedObject namespace mismatch", Method::POST, &events,
                Some(json!({"metadata": {"name": "ev1"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "other"}, "reason": "R", "type": "Normal"})), JSON),
            req("Event without involvedObject namespace", Method::POST, &events,
                Some(json!({"metadata": {"name": "ev2"}, "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "R", "type": "Normal"})), JSON),
            req("Event invalid type", Method::POST, &events,
                Some(json!({"metadata": {"name": "ev3"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns}, "reason": "R", "type": "Weird"})), JSON),
            req("Event ok", Method::POST, &events,
                Some(json!({"metadata": {"name": "ev4"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns},
                            "reason": "R", "type": "Warning", "message": "hello", "count": 1, "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:00:00Z"})), JSON),
            get("Events by involvedObject.name", format!("{events}?fieldSelector=involvedObject.name%3Dp,type%3DWarning")),
            get("Events by reason", format!("{events}?fieldSelector=reason%3DR")),
            get("events.k8s.io view of a core Event", format!("/apis/events.k8s.io/v1/namespaces/{ns}/events/ev4")),
            req("Job restartPolicy Always", Method::POST, &jobs,
                Some(json!({"metadata": {"name": "j1"}, "spec": {"template": {"spec": {"restartPolicy": "Always", "containers": [container()]}}}})), JSON),
            req("Job without restartPolicy", Method::POST, &jobs,
                Some(json!({"metadata": {"name": "j2"}, "spec": {"template": {"spec": {"containers": [container()]}}}})), JSON),
            req("Job defaults", Method::POST, &jobs,
                Some(json!({"metadata": {"name": "j3"}, "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container()]}}}})), JSON),
            req("Job change template (immutable)", Method::PATCH, format!("{jobs}/j3"),
                Some(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}}}})), SMP),
            req("Job suspend", Method::PATCH, format!("{jobs}/j3"), Some(json!({"spec": {"suspend": true}})), MERGE),
            req("Job delete background", Method::DELETE, format!("{jobs}/j3?propagationPolicy=Background"), None, JSON),
            req("Job negative backoffLimit", Method::POST, &jobs,
                Some(json!({"metadata": {"name": "j4"}, "spec": {"backoffLimit": -1, "template": {"spec": {"restartPolicy": "Never", "containers": [container()]}}}})), JSON),
            req("StatefulSet change selector (immutable)", Method::POST, format!("/apis/apps/v1/namespaces/{ns}/statefulsets"),
                Some(json!({"metadata": {"name": "ss"}, "spec": {"serviceName": "s", "selector": {"matchLabels": {"app": "x"}}, "template": pod_template()}})), JSON),
            req("StatefulSet patch selector", Method::PATCH, format!("/apis/apps/v1/namespaces/{ns}/statefulsets/ss"),
                Some(json!({"spec": {"selector": {"matchLabels": {"app": "y"}}}})), MERGE),
            req("StatefulSet patch podManagementPolicy", Method::PATCH, format!("/apis/apps/v1/namespaces/{ns}/statefulsets/ss"),
                Some(json!({"spec": {"podManagementPolicy": "Parallel"}})), MERGE),
            req("StatefulSet selector not matching template", Method::POST, format!("/apis/apps/v1/namespaces/{ns}/statefulsets"),
                Some(json!({"metadata": {"name": "ss2"}, "spec": {"serviceName": "s", "selector": {"matchLabels": {"app": "z"}}, "template": pod_template()}})), JSON),
            req("Deployment negative replicas", Method::POST, format!("/apis/apps/v1/namespaces/{ns}/deployments"),
                Some(json!({"metadata": {"name": "d"}, "spec": {"replicas": -1, "selector": {"matchLabels": {"app": "x"}}, "template": pod_template()}})), JSON),
            req("immutable ConfigMap", Method::POST, format!("/api/v1/namespaces/{ns}/configmaps"),
                Some(json!({"metadata": {"name": "imm"}, "immutable": true, "data": {"a": "1"}})), JSON),
            req("immutable ConfigMap change", Method::PATCH, format!("/api/v1/namespaces/{ns}/configmaps/imm"), Some(json!({"data": {"a": "2"}})), MERGE),
            req("Secret invalid base64", Method::POST, format!("/api/v1/namespaces/{ns}/secrets"), None, JSON)
                .raw_body(r#"{"metadata":{"name":"b64"},"data":{"a":"%%%"}}"#),
            req("Secret stringData", Method::POST, format!("/api/v1/namespaces/{ns}/secrets"),
                Some(json!({"metadata": {"name": "sd"}, "stringData": {"a": "b"}})), JSON),
            req("Secret change type (immutable)", Method::PATCH, format!("/api/v1/namespaces/{ns}/secrets/sd"),
                Some(json!({"type": "kubernetes.io/tls"})), MERGE),
            req("Service without ports", Method::POST, format!("/api/v1/namespaces/{ns}/services"),
                Some(json!({"metadata": {"name": "noports"}, "spec": {"selector": {"a": "b"}}})), JSON),
            req("headless Service", Method::POST, format!("/api/v1/namespaces/{ns}/services"),
                Some(json!({"metadata": {"name": "headless"}, "spec": {"clusterIP": "None", "ports": [{"name": "peer", "port": 2380}], "selector": {"a": "b"}}})), JSON),
            req("Service SMP ports by merge key", Method::PATCH, format!("/api/v1/namespaces/{ns}/services/headless"),
                Some(json!({"spec": {"ports": [{"name": "client", "port": 2379}]}})), SMP),
            req("Etcd missing required spec field", Method::POST, format!("/apis/druid.gardener.cloud/v1alpha1/namespaces/{ns}/etcds"),
                Some(json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd", "metadata": {"name": "bad"}, "spec": {"replicas": 1}})), JSON),
            req("Etcd wrong type", Method::POST, format!("/apis/druid.gardener.cloud/v1alpha1/namespaces/{ns}/etcds"),
                Some(json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd", "metadata": {"name": "bad2"},
                            "spec": {"replicas": "three", "labels": {}, "etcd": {}, "backup": {}}})), JSON),
            req("EtcdOperatorTask invalid type", Method::POST, format!("/apis/druid.gardener.cloud/v1alpha1/namespaces/{ns}/etcdoperatortasks"),
                Some(json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "EtcdOperatorTask", "metadata": {"name": "bad"}, "spec": {"type": "Nope"}})), JSON),
            req("Etcd unknown field pruned (no validation param)", Method::POST, format!("/apis/druid.gardener.cloud/v1alpha1/namespaces/{ns}/etcds"),
                Some(json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd", "metadata": {"name": "pruned"},
                            "spec": {"replicas": 1, "labels": {"a": "b"}, "etcd": {}, "backup": {}, "bogus": 1}})), JSON),
            req("Etcd foreground delete", Method::DELETE, format!("/apis/druid.gardener.cloud/v1alpha1/namespaces/{ns}/etcds/pruned?propagationPolicy=Foreground"), None, JSON),
            req("Etcd orphan delete of missing", Method::DELETE, format!("/apis/druid.gardener.cloud/v1alpha1/namespaces/{ns}/etcds/pruned?propagationPolicy=Orphan"), None, JSON),
            req("delete with uid precondition mismatch", Method::DELETE, format!("/api/v1/namespaces/{ns}/configmaps/imm"), None, JSON)
                .raw_body(r#"{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"00000000-0000-0000-0000-000000000000"}}"#),
            req("delete with bad propagationPolicy", Method::DELETE, format!("/api/v1/namespaces/{ns}/configmaps/imm?propagationPolicy=Sideways"), None, JSON),
        ],
    });

    // Owner references and garbage collection, as the landscape uses them (only synchronous answers compared).
    let ns = ns_for("owners");
    let cms = format!("/api/v1/namespaces/{ns}/configmaps");
    out.push(Scenario {
        name: "owners".into(),
        ns: ns.clone(),
        steps: vec![
            req("owner create", Method::POST, &cms, Some(json!({"metadata": {"name": "owner"}})), JSON),
            req("dependent with bogus owner uid", Method::POST, &cms,
                Some(json!({"metadata": {"name": "dep", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                    "uid": "00000000-0000-0000-0000-000000000001", "controller": true, "blockOwnerDeletion": true}]}})), JSON),
            req("ownerReference without uid", Method::POST, &cms,
                Some(json!({"metadata": {"name": "dep2", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner"}]}})), JSON),
            req("two controller references", Method::POST, &cms,
                Some(json!({"metadata": {"name": "dep3", "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "o1", "uid": "00000000-0000-0000-0000-000000000001", "controller": true},
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "o2", "uid": "00000000-0000-0000-0000-000000000002", "controller": true}]}})), JSON),
            req("owner delete Foreground", Method::DELETE, format!("{cms}/owner?propagationPolicy=Foreground"), None, JSON),
            req("deletecollection all configmaps", Method::DELETE, cms.to_string(), None, JSON).cmp(Cmp::Code),
        ],
    });

    // Watches.
    let ns = ns_for("watch");
    let cms = format!("/api/v1/namespaces/{ns}/configmaps");
    let etcds = format!("/apis/druid.gardener.cloud/v1alpha1/namespaces/{ns}/etcds");
    let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases");
    let cm = |name: &str, w: &str| json!({"metadata": {"name": name, "labels": {"w": w}}, "data": {"a": "1"}});
    let etcd = |name: &str| {
        json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd", "metadata": {"name": name},
               "spec": {"replicas": 3, "labels": {"app": "etcd"}, "etcd": {}, "backup": {}}})
    };
    out.push(Scenario {
        name: "watch".into(),
        ns: ns.clone(),
        steps: vec![
            req("pre-existing configmap", Method::POST, &cms, Some(cm("pre", "yes")), JSON).unscored(),
            watch_start(1, format!("{cms}?watch=1&labelSelector=w%3Dyes&timeoutSeconds=20")),
            watch_start(2, format!("{cms}?watch=1&timeoutSeconds=20&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")),
            watch_start(3, format!("{cms}?watch=1&fieldSelector=metadata.name%3Dw1&timeoutSeconds=20")),
            req("watch writes: create w1", Method::POST, &cms, Some(cm("w1", "yes")), JSON),
            req("watch writes: patch w1", Method::PATCH, format!("{cms}/w1"), Some(json!({"data": {"a": "2"}})), MERGE),
            req("watch writes: no-op patch w1", Method::PATCH, format!("{cms}/w1"), Some(json!({"data": {"a": "2"}})), MERGE),
            req("watch writes: w1 leaves the selector", Method::PATCH, format!("{cms}/w1"), Some(json!({"metadata": {"labels": {"w": "no"}}})), MERGE),
            req("watch writes: w1 returns to the selector", Method::PATCH, format!("{cms}/w1"), Some(json!({"metadata": {"labels": {"w": "yes"}}})), MERGE),
            req("watch writes: create w2 outside selector", Method::POST, &cms, Some(cm("w2", "no")), JSON),
            req("watch writes: delete w1", Method::DELETE, format!("{cms}/w1"), None, JSON),
            req("watch writes: delete w2", Method::DELETE, format!("{cms}/w2"), None, JSON),
            watch_end("watch configmaps labelSelector w=yes: events", 1),
            watch_end("watch configmaps sendInitialEvents: events", 2),
            watch_end("watch configmaps fieldSelector name=w1: events", 3),
            watch_start(4, format!("{etcds}?watch=1&timeoutSeconds=20")),
            req("etcd create", Method::POST, &etcds, Some(etcd("e1")), JSON),
            req("etcd status patch", Method::PATCH, format!("{etcds}/e1/status"), Some(json!({"status": {"ready": false, "replicas": 0}})), MERGE),
            req("etcd scale patch", Method::PATCH, format!("{etcds}/e1/scale"), Some(json!({"spec": {"replicas": 1}})), MERGE),
            req("etcd annotate", Method::PATCH, format!("{etcds}/e1"),
                Some(json!({"metadata": {"annotations": {"gardener.cloud/operation": "reconcile"}}})), MERGE),
            req("etcd delete", Method::DELETE, format!("{etcds}/e1"), None, JSON),
            watch_end("watch etcds: events", 4),
            watch_start(5, format!("{leases}?watch=1&timeoutSeconds=20")).cmp(Cmp::Code),
            req("lease create", Method::POST, &leases,
                Some(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}})), JSON),
            req("lease renew (PUT without rv)", Method::PUT, format!("{leases}/l"),
                Some(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
                            "spec": {"holderIdentity": "b", "renewTime": "2024-01-01T00:00:01.000000Z"}})), JSON),
            watch_end("watch leases: events", 5),
            Step {
                name: "watch as Table".into(),
                op: Op::WatchStart { id: 6, path: format!("{cms}?watch=1&timeoutSeconds=20"), accept: TABLE },
                cmp: Cmp::Code,
                scored: false,
            },
            req("create t1 for table watch", Method::POST, &cms, Some(cm("t1", "t")), JSON),
            watch_end("watch configmaps as Table: events", 6),
            get("watch too old resourceVersion", format!("{cms}?watch=1&resourceVersion=1&timeoutSeconds=1")),
        ],
    });

    // kubectl as the docs use it.
    let ns = ns_for("kubectl");
    let cm_yaml =
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n  namespace: {ns}\ndata:\n  a: \"1\"\n");
    let etcd_yaml = yaml_of(&json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
        "metadata": {"name": "etcd-main", "namespace": ns},
        "spec": {"replicas": 3, "labels": {"app": "etcd"}, "etcd": {}, "backup": {}}}));
    let task_yaml = yaml_of(&json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "EtcdOperatorTask",
        "metadata": {"name": "defrag", "namespace": ns},
        "spec": {"type": "Defragment", "ownerEtcdRefrence": {"name": "etcd-main", "namespace": ns}}}));
    let n = |s: &str| s.replace("NS", &ns);
    out.push(Scenario {
        name: "kubectl".into(),
        ns: ns.clone(),
        steps: vec![
            kubectl("kubectl create configmap", &n("-n NS create configmap k1 --from-literal=a=1"), None),
            kubectl("kubectl create configmap again", &n("-n NS create configmap k1 --from-literal=a=1"), None),
            kubectl("kubectl create secret generic", &n("-n NS create secret generic s1 --from-literal=a=b"), None),
            kubectl("kubectl get configmap", &n("-n NS get configmap k1"), None),
            kubectl("kubectl get configmap -o yaml", &n("-n NS get configmap k1 -o yaml"), None),
            kubectl("kubectl get configmap -o json", &n("-n NS get configmap k1 -o json"), None),
            kubectl("kubectl get cm -o name", &n("-n NS get cm -o name"), None),
            kubectl("kubectl describe configmap", &n("-n NS describe configmap k1"), None),
            kubectl("kubectl apply (client-side)", &n("-n NS apply -f -"), Some(&cm_yaml)),
            kubectl("kubectl apply again (unchanged)", &n("-n NS apply -f -"), Some(&cm_yaml)),
            kubectl("kubectl apply --server-side etcd", &n("-n NS apply --server-side -f -"), Some(&etcd_yaml)),
            kubectl("kubectl create etcdoperatortask", &n("-n NS create -f -"), Some(&task_yaml)),
            kubectl("kubectl get etcd,sts,pods,pvc,leases", &n("get etcd,sts,pods,pvc,leases -n NS"), None),
            kubectl("kubectl get etcd -o wide", &n("-n NS get etcd -o wide"), None),
            kubectl("kubectl get etask", &n("-n NS get etask"), None),
            kubectl("kubectl get druid (category)", &n("-n NS get druid"), None),
            kubectl("kubectl get etcd jsonpath", &n("-n NS get etcd etcd-main -o jsonpath={.spec.replicas}"), None),
            kubectl("kubectl label", &n("-n NS label configmap k1 x=y"), None),
            kubectl("kubectl annotate", &n("-n NS annotate configmap k1 note=hello"), None),
            kubectl(
                "kubectl patch --type=merge",
                &n("-n NS patch configmap k1 --type=merge -p {\"data\":{\"b\":\"2\"}}"),
                None,
            ),
            kubectl(
                "kubectl patch etcd status",
                &n("-n NS patch etcd etcd-main --subresource=status --type=merge -p {\"status\":{\"ready\":true}}"),
                None,
            ),
            kubectl("kubectl scale etcd", &n("-n NS scale etcd etcd-main --replicas=1"), None),
            kubectl("kubectl get etcd -o yaml", &n("-n NS get etcd etcd-main -o yaml"), None),
            kubectl("kubectl auth can-i list pods", &n("auth can-i list pods -n NS"), None),
            kubectl(
                "kubectl auth can-i patch etcds/status",
                &n("auth can-i patch etcds.druid.gardener.cloud --subresource=status -n NS"),
                None,
            ),
            kubectl("kubectl auth whoami", "auth whoami", None),
            kubectl("kubectl api-resources druid", "api-resources --api-group=druid.gardener.cloud", None),
            kubectl("kubectl api-resources machine", "api-resources --api-group=machine.sapcloud.io", None),
            kubectl("kubectl get --raw /version", "get --raw /version", None),
            kubectl("kubectl cluster-info", "cluster-info", None),
            kubectl("kubectl get events", &n("-n NS get events"), None),
            kubectl("kubectl delete configmap", &n("-n NS delete configmap k1"), None),
            kubectl("kubectl get deleted configmap", &n("-n NS get configmap k1"), None),
            kubectl("kubectl delete etask", &n("-n NS delete etask defrag"), None),
            kubectl("kubectl get unknown kind", &n("-n NS get nopes"), None),
            kubectl("kubectl explain etcd", "explain etcd.spec.replicas", None),
        ],
    });

    // Label selectors as `labels.Parse` reads them: accepted or refused alike (the code; the messages are the
    // parser's own). druidctl's `-l` check pins the real server's answers to the same selectors
    // (`druidctl::kube::selector`, its unit test).
    let ns = ns_for("selectors");
    let selectors = [
        "app in ()",
        "app notin ()",
        "app in (a,)",
        "a in (,)",
        "app=",
        "a>1",
        "a>x",
        "app in (a",
        "!app=b",
        "app in a",
        "x/y/z=a",
        "a==b==c",
        "A_b.c=d",
        "-a=b",
        "a=-b",
        "a b",
        ",",
        "a,",
        "a=b,,c=d",
        "a in (b c)",
        "a notin (b),!c",
    ];
    out.push(Scenario {
        name: "label selectors".into(),
        ns: ns.clone(),
        steps: selectors
            .iter()
            .map(|sel| {
                let q: String = sel
                    .bytes()
                    .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
                    .collect();
                get(format!("labelSelector={sel}"), format!("/api/v1/namespaces/{ns}/configmaps?labelSelector={q}"))
                    .cmp(Cmp::Code)
            })
            .collect(),
    });

    out
}

// ---------------------------------------------------------------------------------------------------------------
// Normalisation
// ---------------------------------------------------------------------------------------------------------------

struct Norm {
    time: Regex,
    uuid: Regex,
    age: Regex,
    rv_words: Regex,
    genname: Regex,
    ip: Regex,
    kubectl_age: Regex,
}

impl Norm {
    fn new() -> Norm {
        Norm {
            time: Regex::new(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$").unwrap(),
            uuid: Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").unwrap(),
            age: Regex::new(r"^(\d+[smhd])+$|^<invalid>$").unwrap(),
            rv_words: Regex::new(r"(resource ?[vV]ersion:? ?)\d+( \(\d+\))?").unwrap(),
            genname: Regex::new(r"kube-api-access-[a-z0-9]{5}").unwrap(),
            ip: Regex::new(r"^\d+\.\d+\.\d+\.\d+$").unwrap(),
            kubectl_age: Regex::new(r"(\s)(\d+[smhd])+(\s|$)").unwrap(),
        }
    }

    fn string(&self, side: &Side, s: &str) -> String {
        let mut s = s.to_string();
        for (from, to) in &side.repl {
            if !from.is_empty() {
                s = s.replace(from.as_str(), to);
            }
        }
        let s = self.uuid.replace_all(&s, "<uid>");
        let s = self.rv_words.replace_all(&s, "${1}<rv>");
        let s = self.genname.replace_all(&s, "kube-api-access-<gen>");
        s.into_owned()
    }

    fn value(&self, side: &Side, v: &mut Value, key: &str, in_cells: bool) {
        match v {
            Value::String(s) => {
                if self.time.is_match(s) {
                    *s = "<time>".into();
                } else if in_cells && self.age.is_match(s) {
                    *s = "<age>".into();
                } else if (key == "clusterIP" || key == "clusterIPs" || in_cells) && self.ip.is_match(s) {
                    *s = "<ip>".into();
                } else {
                    *s = self.string(side, s);
                }
            }
            Value::Array(a) => {
                for x in a.iter_mut() {
                    self.value(side, x, key, in_cells || key == "cells");
                }
            }
            Value::Object(m) => {
                m.remove("selfLink");
                // The real server orders managedFields by operation, then by each entry's time in whole seconds,
                // then by manager (apiserver `pkg/endpoints/handlers/fieldmanager/internal/managedfields.go`
                // `sortEncodedManagedFields`): two applies in one second or across a second boundary come out in
                // either order. Times are normalised, so entries are compared in operation and manager order.
                if let Some(Value::Array(entries)) = m.get_mut("managedFields") {
                    entries.sort_by_key(|e| {
                        ["operation", "manager", "apiVersion", "subresource"]
                            .map(|k| e.get(k).and_then(Value::as_str).unwrap_or_default().to_string())
                    });
                }
                for k in ["uid", "resourceVersion", "continue"] {
                    if let Some(Value::String(s)) = m.get_mut(k)
                        && !s.is_empty()
                    {
                        *s = format!("<{k}>");
                    }
                }
                if let Some(Value::Number(_)) = m.get("remainingItemCount") {
                    // kept: compared as is
                }
                // A Job created with generateName repeats its generated name in the pod template's `job-name`
                // labels (pkg/registry/batch/job/strategy.go `generateSelector`): the same random suffix.
                let job_gen = m.get("metadata").and_then(|md| {
                    let g = md.get("generateName")?.as_str()?;
                    let n = md.get("name")?.as_str()?;
                    (n.starts_with(g) && n.len() == g.len() + 5).then(|| (g.to_string(), n.to_string()))
                });
                if let Some((g, n)) = job_gen
                    && let Some(Value::Object(labels)) =
                        m.get_mut("spec").and_then(|s| s.pointer_mut("/template/metadata/labels"))
                {
                    for k in ["batch.kubernetes.io/job-name", "job-name"] {
                        if let Some(Value::String(v)) = labels.get_mut(k)
                            && *v == n
                        {
                            *v = format!("{g}<gen>");
                        }
                    }
                }
                // `/version` (`version.Info`): `goVersion` and `gitCommit` describe how the real binary was built
                // (component-base/version/base.go, set by the build's ldflags), not how it behaves.
                if m.contains_key("gitVersion") && m.contains_key("goVersion") && m.contains_key("compiler") {
                    for k in ["goVersion", "gitCommit"] {
                        if let Some(v) = m.get_mut(k) {
                            *v = json!("<build>");
                        }
                    }
                }
                // The resources of a group served from CRDs come in Go map order: the discovery controller builds
                // the list from its informer cache (apiextensions-apiserver pkg/apiserver/
                // customresource_discovery_controller.go `sync`), so the real order changes from run to run.
                // Compared sorted by name; built-in groups keep their (registration) order.
                let crd_group = m.get("kind").and_then(|k| k.as_str()) == Some("APIResourceList")
                    && m.get("groupVersion")
                        .and_then(|gv| gv.as_str())
                        .and_then(|gv| gv.split('/').next())
                        .is_some_and(|g| CRD_GROUPS.contains(&g));
                if crd_group && let Some(Value::Array(rs)) = m.get_mut("resources") {
                    rs.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
                }
                // generateName suffixes
                let g = m.get("generateName").and_then(|g| g.as_str()).map(String::from);
                if let (Some(g), Some(Value::String(n))) = (g, m.get_mut("name"))
                    && n.starts_with(&g)
                    && n.len() == g.len() + 5
                {
                    *n = format!("{g}<gen>");
                }
                // The same rule for the name cell of a Table row whose object (metadata) carries the
                // generateName: the random suffix is no behaviour.
                let row_gen = m.get("object").and_then(|o| o.get("metadata")).and_then(|md| {
                    let g = md.get("generateName")?.as_str()?;
                    let n = md.get("name")?.as_str()?;
                    (n.starts_with(g) && n.len() == g.len() + 5).then(|| (g.to_string(), n.to_string()))
                });
                if let (Some((g, n)), Some(Value::Array(cells))) = (row_gen, m.get_mut("cells"))
                    && let Some(Value::String(c0)) = cells.first_mut()
                    && *c0 == n
                {
                    *c0 = format!("{g}<gen>");
                }
                for (k, x) in m.iter_mut() {
                    self.value(side, x, k, in_cells);
                }
            }
            _ => {}
        }
    }

    /// The comparable form of a watch stream: its events, each normalised like an object.
    fn events(&self, side: &Side, body: &str) -> Value {
        let mut events = Vec::new();
        for line in body.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<Value>(line) {
                // A periodic BOOKMARK (progress only, without `k8s.io/initial-events-end`) comes when the
                // server's bookmark timer fires, which the collection window does not control.
                Ok(e)
                    if e["type"] == "BOOKMARK"
                        && e.pointer("/object/metadata/annotations/k8s.io~1initial-events-end").is_none() => {}
                Ok(mut e) => {
                    self.value(side, &mut e, "", false);
                    events.push(status_only(e));
                }
                Err(_) => events.push(json!({"unparsed": self.string(side, line)})),
            }
        }
        Value::Array(events)
    }

    /// The comparable form of an answer.
    fn answer(&self, side: &Side, raw: &Raw) -> Value {
        let body = if raw.ctype == "kubectl" {
            let v: Value = serde_json::from_str(&raw.body).unwrap();
            let f = |s: &str| {
                let s = self.string(side, s);
                let s = self.kubectl_age.replace_all(&s, "${1}<age>${3}");
                let s = self.kubectl_age.replace_all(&s, "${1}<age>${3}");
                let t = Regex::new(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z").unwrap();
                let s = t.replace_all(&s, "<time>");
                let rv = Regex::new(r#"(resourceVersion"?:\s*"?)\d+"#).unwrap();
                let s = rv.replace_all(&s, "${1}<rv>");
                let ts = Regex::new(r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d [+-]\d{4}").unwrap();
                let s = ts.replace_all(&s, "<date>");
                // `/version` as kubectl prints it: the build fields, as in the object rule above.
                let build = Regex::new(r#"("(?:goVersion|gitCommit)":\s*")[^"]*""#).unwrap();
                build.replace_all(&s, "${1}<build>\"").into_owned()
            };
            json!({"stdout": f(v["stdout"].as_str().unwrap_or("")), "stderr": f(v["stderr"].as_str().unwrap_or(""))})
        } else if raw.ctype == "watch" {
            self.events(side, &raw.body)
        } else {
            match serde_json::from_str::<Value>(&raw.body) {
                Ok(mut v) => {
                    self.value(side, &mut v, "", false);
                    status_only(v)
                }
                // A watch answered to a plain GET (`?watch=1&timeoutSeconds=…`) is a stream of JSON events, one a
                // line: compared event by event like the watches above, so that, as in every other JSON body, the
                // values count and not the key order of the encoder (Go's struct order on the real server).
                Err(_) if is_event_stream(&raw.body) => self.events(side, &raw.body),
                Err(_) => Value::String(self.string(side, raw.body.trim())),
            }
        };
        let warning = Regex::new(r#"^\d{3} \S+ ""#).unwrap().replace_all(&raw.warning, "").into_owned();
        let ctype = raw.ctype.split(';').next().unwrap_or("").trim().to_string();
        json!({"code": raw.code, "ctype": ctype, "warning": self.string(side, &warning), "body": body})
    }
}

/// Whether `body` is a watch stream: one JSON event (`type` and `object`) a line, at least one.
fn is_event_stream(body: &str) -> bool {
    let mut lines = body.lines().filter(|l| !l.trim().is_empty()).peekable();
    lines.peek().is_some()
        && lines.all(|l| {
            serde_json::from_str::<Value>(l).is_ok_and(|e| e.get("type").is_some() && e.get("object").is_some())
        })
}

/// For Status bodies only code, reason, message, details and status count.
fn status_only(v: Value) -> Value {
    if v.get("kind").and_then(|k| k.as_str()) == Some("Status") {
        let mut o = serde_json::Map::new();
        for k in ["kind", "status", "code", "reason", "message", "details"] {
            if let Some(x) = v.get(k) {
                o.insert(k.to_string(), x.clone());
            }
        }
        // The causes of a server-side apply conflict come in Go map order: structured-merge-diff collects them
        // by iterating the managers' map (merge/conflict.go `ConflictsFromManagers`), so the real order changes
        // from run to run (the message sorts the managers and stays compared as is). Compared as a sorted list.
        if o.get("reason").and_then(|r| r.as_str()) == Some("Conflict")
            && let Some(Value::Array(causes)) = o.get_mut("details").and_then(|d| d.get_mut("causes"))
            && causes.iter().all(|c| c["reason"] == "FieldManagerConflict")
        {
            causes.sort_by_key(|c| c.to_string());
        }
        return Value::Object(o);
    }
    v
}

fn project(cmp: &Cmp, a: &Value) -> Value {
    match cmp {
        Cmp::Full => a.clone(),
        Cmp::Code => json!({"code": a["code"]}),
        Cmp::Ptrs(ps) => {
            let mut o = serde_json::Map::new();
            o.insert("code".into(), a["code"].clone());
            for p in ps {
                o.insert(p.to_string(), a["body"].pointer(p).cloned().unwrap_or(Value::Null));
            }
            Value::Object(o)
        }
    }
}

/// JSON paths where two values differ (arrays indexed), at most `max`.
fn diff_paths(a: &Value, b: &Value, path: &str, out: &mut Vec<String>, max: usize) {
    if out.len() >= max {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => diff_paths(p, q, &format!("{path}.{k}"), out, max),
                    (Some(_), None) => out.push(format!("{path}.{k} (only real)")),
                    (None, Some(_)) => out.push(format!("{path}.{k} (only embedded)")),
                    _ => {}
                }
                if out.len() >= max {
                    return;
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff_paths(p, q, &format!("{path}[{i}]"), out, max);
            }
        }
        (Value::Array(x), Value::Array(y)) => out.push(format!("{path} (length {} vs {})", x.len(), y.len())),
        _ if a != b => out.push(path.to_string()),
        _ => {}
    }
}

/// A coarse cause of a difference, for grouping.
fn cause(real: &Value, emb: &Value, paths: &[String]) -> String {
    let (rc, ec) = (&real["code"], &emb["code"]);
    if rc != ec {
        return format!("status code {rc} (real) vs {ec} (embedded)");
    }
    let idx = Regex::new(r"\[\d+\]").unwrap();
    let first = paths.first().map(|p| idx.replace_all(p, "[*]").into_owned()).unwrap_or_default();
    let (rk, ek) = (&real["body"]["kind"], &emb["body"]["kind"]);
    if rk != ek {
        return format!("same code {rc}, body kind {rk} (real) vs {ek} (embedded)");
    }
    if real["body"]["kind"] == "Status" {
        return format!("same code {rc}, Status differs at {first}");
    }
    format!("same code {rc}, body differs at {first}")
}

fn short(v: &Value, n: usize) -> String {
    let s = v.to_string();
    if s.len() > n {
        let mut end = n;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &s[..end])
    } else {
        s
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Execution
// ---------------------------------------------------------------------------------------------------------------

async fn exec(side: &Side, op: &Op) -> Raw {
    match op {
        Op::Req { method, path, body, ctype, accept, who } => {
            side.raw(*who, method, path, body.as_deref(), ctype, accept).await
        }
        Op::Put { path, query, modify, rv } => {
            let got = side.raw(Who::Admin, &Method::GET, path, None, JSON, JSON).await;
            let Ok(mut obj) = serde_json::from_str::<Value>(&got.body) else {
                return got;
            };
            if got.code != 200 {
                return got;
            }
            modify(&mut obj);
            if let Some(m) = obj["metadata"].as_object_mut() {
                match rv {
                    Rv::Keep => {}
                    Rv::Drop => {
                        m.remove("resourceVersion");
                    }
                    Rv::Stale => {
                        m.insert("resourceVersion".into(), json!("1"));
                    }
                }
                m.remove("managedFields");
            }
            let target = if query.is_empty() { path.clone() } else { format!("{path}?{query}") };
            side.raw(Who::Admin, &Method::PUT, &target, Some(&obj.to_string()), JSON, JSON).await
        }
        Op::WatchStart { id, path, accept } => {
            let req = Request::builder()
                .method(Method::GET)
                .uri(path.as_str())
                .header("Accept", *accept)
                .body(Vec::new())
                .unwrap();
            let buf = Arc::new(Mutex::new(Vec::new()));
            let client = side.admin.clone();
            let b = buf.clone();
            let (tx, rx) = tokio::sync::oneshot::channel();
            let task = tokio::spawn(async move {
                match client.send(req.map(kube::client::Body::from)).await {
                    Ok(resp) => {
                        let _ = tx.send(resp.status().as_u16() as i64);
                        let mut body = resp.into_body();
                        while let Some(Ok(frame)) = body.frame().await {
                            if let Some(d) = frame.data_ref() {
                                b.lock().unwrap().extend_from_slice(d);
                            }
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(-2);
                        b.lock().unwrap().extend_from_slice(format!("client error: {e}").as_bytes());
                    }
                }
            });
            let code = tokio::time::timeout(Duration::from_secs(10), rx).await.ok().and_then(|r| r.ok()).unwrap_or(-1);
            side.watches.lock().unwrap().insert(*id, (task, buf));
            // Give the server a moment to register the watcher.
            tokio::time::sleep(Duration::from_millis(100)).await;
            Raw { code, ctype: String::new(), warning: String::new(), body: String::new() }
        }
        Op::WatchEnd { id } => {
            tokio::time::sleep(Duration::from_millis(400)).await;
            let entry = side.watches.lock().unwrap().remove(id);
            match entry {
                None => Raw { code: -4, ctype: "watch".into(), warning: String::new(), body: String::new() },
                Some((task, buf)) => {
                    task.abort();
                    let body = String::from_utf8_lossy(&buf.lock().unwrap()).into_owned();
                    Raw { code: 0, ctype: "watch".into(), warning: String::new(), body }
                }
            }
        }
        Op::Kubectl { args, stdin } => {
            let args = args.clone();
            let stdin = stdin.clone();
            let side_kc = side.kubeconfig.clone();
            let cache = side.cache.clone();
            let label = side.label;
            tokio::task::spawn_blocking(move || {
                // Side is not Send across spawn_blocking; re-create the minimal part.
                let s = KubectlRunner { kubeconfig: side_kc, cache, _label: label };
                s.run(&args, stdin.as_deref())
            })
            .await
            .unwrap()
        }
    }
}

struct KubectlRunner {
    kubeconfig: PathBuf,
    cache: PathBuf,
    _label: &'static str,
}

impl KubectlRunner {
    fn run(&self, args: &[String], stdin: Option<&str>) -> Raw {
        use std::io::Write;
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).arg("--cache-dir").arg(&self.cache).args(args);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return Raw {
                    code: -3,
                    ctype: "kubectl".into(),
                    warning: String::new(),
                    body: json!({"stdout": "", "stderr": format!("kubectl: {e}")}).to_string(),
                };
            }
        };
        if let Some(s) = stdin {
            child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        let body =
            json!({"stdout": String::from_utf8_lossy(&out.stdout), "stderr": String::from_utf8_lossy(&out.stderr)});
        Raw {
            code: out.status.code().unwrap_or(-9) as i64,
            ctype: "kubectl".into(),
            warning: String::new(),
            body: body.to_string(),
        }
    }
}

/// kubectl apply of a file to one server (setup).
fn kubectl_setup(kubeconfig: &Path, args: &[&str]) {
    let out = Command::new("kubectl").arg("--kubeconfig").arg(kubeconfig).args(args).output().expect("kubectl");
    assert!(
        out.status.success(),
        "kubectl {args:?} against {}: {}{}",
        kubeconfig.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn install_crds(kubeconfig: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("crates/druid-api/crds"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files.push(root.join("deploy/crd.yaml"));
    let mut args = vec!["apply".to_string(), "--server-side".to_string(), "--force-conflicts".to_string()];
    for f in &files {
        args.push("-f".into());
        args.push(f.display().to_string());
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    kubectl_setup(kubeconfig, &a);
    // A CRD the apiserver has not given any condition yet makes `kubectl wait` fail at once
    // (".status.conditions accessor error: <nil>"): wait again until every CRD has its conditions.
    let wait = ["wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"];
    for _ in 0..20 {
        let out = Command::new("kubectl").arg("--kubeconfig").arg(kubeconfig).args(wait).output().expect("kubectl");
        if out.status.success() || !String::from_utf8_lossy(&out.stderr).contains("accessor error") {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    kubectl_setup(kubeconfig, &wait);
}

#[derive(serde::Serialize)]
struct StepReport {
    scenario: String,
    step: String,
    agree: bool,
    cause: Option<String>,
    paths: Vec<String>,
    real: Value,
    embedded: Value,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_differential() {
    let started = Instant::now();
    // The shared helper starts a private instance (state `$CARGO_TARGET_TMPDIR/realk8s-diff`) without the
    // controller manager, so that no controller changes what the test compares; it fails under CI when missing.
    let Some(real_guard) = tokio::task::block_in_place(|| realk8s_support::RealK8s::get("diff", false)) else {
        return;
    };
    let real_kc = real_guard.kubeconfig.clone();
    let real_limited = real_guard.limited_kubeconfig.exists().then(|| real_guard.limited_kubeconfig.clone());
    let embedded = tokio::task::block_in_place(Embedded::start);
    eprintln!("differential: servers up after {:.1}s", started.elapsed().as_secs_f64());

    let tmp = tempfile::tempdir().unwrap();
    tokio::task::block_in_place(|| {
        std::thread::scope(|s| {
            s.spawn(|| install_crds(&real_kc));
            s.spawn(|| install_crds(&embedded.kubeconfig));
        })
    });
    eprintln!("differential: CRDs established after {:.1}s", started.elapsed().as_secs_f64());

    let real = Side::new("real", &real_kc, real_limited.as_deref(), tmp.path()).await;
    let emb_limited = embedded.kubeconfig.with_file_name("kubeconfig-limited-user");
    let emb = Side::new("embedded", &embedded.kubeconfig, Some(&emb_limited), tmp.path()).await;
    let norm = Norm::new();

    let run: String = {
        use rand::Rng;
        let mut r = rand::rng();
        (0..5).map(|_| (b'a' + r.random_range(0..26u8)) as char).collect()
    };
    let mut ns_for = |what: &str| format!("diff-{run}-{what}");
    let mut scenarios = special_scenarios(&mut ns_for);
    for k in kinds() {
        let tag = format!("{}-{}", k.plural, k.api_version.split('/').next().unwrap().replace('.', "-"));
        let tag: String = tag.chars().take(30).collect::<String>().trim_end_matches('-').to_string();
        let ns = ns_for(&tag);
        scenarios.push(Scenario {
            name: format!("kind {}:{}", k.api_version, k.plural),
            ns: ns.clone(),
            steps: kind_steps(&k, &ns),
        });
    }
    if let Ok(f) = std::env::var("DRUIDCTL_DIFF_FILTER") {
        scenarios.retain(|s| s.name.contains(&f));
    }

    let mut reports = Vec::new();
    for (i, sc) in scenarios.iter().enumerate() {
        let first = i == 0;
        let mut steps = vec![
            {
                let s = req(
                    "namespace create",
                    Method::POST,
                    "/api/v1/namespaces",
                    Some(json!({"metadata": {"name": sc.ns}})),
                    JSON,
                );
                if first { s } else { s.unscored() }
            },
            req(
                "default ServiceAccount",
                Method::POST,
                format!("/api/v1/namespaces/{}/serviceaccounts", sc.ns),
                Some(json!({"metadata": {"name": "default"}})),
                JSON,
            )
            .unscored(),
        ];
        steps.extend(sc.steps.iter().cloned());
        steps.push({
            let s = req("namespace delete", Method::DELETE, format!("/api/v1/namespaces/{}", sc.ns), None, JSON);
            if first { s } else { s.unscored() }
        });
        let t0 = Instant::now();
        for st in &steps {
            let (r, e) = tokio::join!(exec(&real, &st.op), exec(&emb, &st.op));
            if !st.scored {
                continue;
            }
            let (ra, ea) = (norm.answer(&real, &r), norm.answer(&emb, &e));
            let (rp, ep) = (project(&st.cmp, &ra), project(&st.cmp, &ea));
            let agree = rp == ep;
            let mut paths = Vec::new();
            let mut c = None;
            if !agree {
                diff_paths(&rp, &ep, "", &mut paths, 6);
                c = Some(cause(&ra, &ea, &paths));
            }
            reports.push(StepReport {
                scenario: sc.name.clone(),
                step: st.name.clone(),
                agree,
                cause: c,
                paths,
                real: rp,
                embedded: ep,
            });
        }
        if t0.elapsed() > Duration::from_secs(3) {
            eprintln!("differential: scenario {} took {:.1}s", sc.name, t0.elapsed().as_secs_f64());
        }
    }

    let total = reports.len();
    eprintln!("differential: steps done after {:.1}s", started.elapsed().as_secs_f64());
    let agreeing = reports.iter().filter(|r| r.agree).count();
    let score = if total == 0 { 100.0 } else { 100.0 * agreeing as f64 / total as f64 };

    let mut by_cause: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in reports.iter().filter(|r| !r.agree) {
        by_cause.entry(r.cause.clone().unwrap_or_default()).or_default().push(format!("{} / {}", r.scenario, r.step));
    }
    let mut causes: Vec<(&String, &Vec<String>)> = by_cause.iter().collect();
    causes.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));

    println!("\n== differing steps ==");
    for r in reports.iter().filter(|r| !r.agree) {
        println!("- [{}] {}: {}", r.scenario, r.step, r.paths.join(", "));
        println!("    real:     {}", short(&r.real, 400));
        println!("    embedded: {}", short(&r.embedded, 400));
    }
    println!("\n== difference classes ==");
    for (c, steps) in &causes {
        println!("{:4}  {c}", steps.len());
    }
    let report_path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("apiserver_differential.json");
    let report = json!({
        "score": score,
        "agree": agreeing,
        "total": total,
        "classes": causes.iter().map(|(c, s)| json!({"cause": c, "count": s.len(), "steps": s})).collect::<Vec<_>>(),
        "steps": reports,
    });
    std::fs::write(&report_path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    println!("report: {}", report_path.display());
    println!("differential: {agreeing}/{total} steps agree ({score:.1}%) in {:.1}s", started.elapsed().as_secs_f64());

    drop(emb);
    drop(real);
    drop(embedded);
    drop(real_guard);

    let min: f64 =
        std::env::var("DRUIDCTL_DIFF_MIN_SCORE").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_MIN_SCORE);
    assert!(score >= min, "differential score {score:.1}% is below DRUIDCTL_DIFF_MIN_SCORE={min}");
}
