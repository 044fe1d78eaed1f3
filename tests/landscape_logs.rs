//! End-to-end with real etcd on the playground: pod logs served by the embedded API server (the landscape plays
//! the kubelet), read by the real kubectl, by `druidctl logs` and collected by `druidctl report`.
//! Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`).

use crate::e2e_support;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e_support::E2e;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use landscape::etcd::require_etcd;
use landscape::playground::BreakTarget;
use landscape::{BreakKind, Playground};
use serde_json::{Value, json};

fn druidctl(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_druidctl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .output()
        .expect("run druidctl")
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Option<std::process::Output> {
    Command::new("kubectl").arg("--kubeconfig").arg(kubeconfig).args(args).stdin(Stdio::null()).output().ok()
}

/// A child whose stdout and stderr are collected by threads as they arrive; SIGKILLed on drop.
struct Streaming {
    child: std::process::Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl Streaming {
    fn spawn(mut cmd: Command) -> Streaming {
        let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
        let collect = |r: Box<dyn Read + Send>| {
            let buf = Arc::new(Mutex::new(String::new()));
            let b = buf.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(r).lines().map_while(Result::ok) {
                    b.lock().unwrap().push_str(&format!("{line}\n"));
                }
            });
            buf
        };
        let stdout = collect(Box::new(child.stdout.take().unwrap()));
        let stderr = collect(Box::new(child.stderr.take().unwrap()));
        Streaming { child, stdout, stderr }
    }

    fn out(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    fn err(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until `cond` holds on (stdout, stderr); panics with both after `timeout`.
    fn wait_for(&self, what: &str, timeout: Duration, cond: impl Fn(&str, &str) -> bool) {
        let deadline = Instant::now() + timeout;
        while !cond(&self.out(), &self.err()) {
            assert!(Instant::now() < deadline, "{what}: stdout:\n{}\nstderr:\n{}", self.out(), self.err());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Lines of `druidctl logs` output (`MEMBER CONTAINER │ TIME LEVEL …`) whose time is after `t`.
fn lines_after(out: &str, t: jiff::Timestamp) -> usize {
    out.lines()
        .filter_map(|l| {
            l.split_once("│ ").and_then(|(_, rest)| rest.split(' ').next()?.parse::<jiff::Timestamp>().ok())
        })
        .filter(|lt| *lt > t)
        .count()
}

fn jsonl(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout).lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

/// Creates a user with exactly `rules` in namespace `ns` and returns its kubeconfig.
async fn user_with(pg: &Playground, dir: &Path, user: &str, ns: &str, rules: Value) -> std::path::PathBuf {
    let server = pg.embedded_server().expect("embedded API server");
    server.add_user(user, &[]);
    let role = serde_json::from_value(json!({"metadata": {"name": user, "namespace": ns}, "rules": rules})).unwrap();
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(pg.client(), ns)
        .create(&Default::default(), &role)
        .await
        .unwrap();
    let binding = serde_json::from_value(json!({
        "metadata": {"name": user, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .unwrap();
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(pg.client(), ns)
        .create(&Default::default(), &binding)
        .await
        .unwrap();
    let path = dir.join(format!("{user}.kubeconfig"));
    std::fs::write(&path, pg.user_kubeconfig_yaml(user, Some(ns)).unwrap()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_logs_are_served_to_kubectl_and_follow_ends_when_the_container_stops() {
    let Some(_) = require_etcd("playground pod logs") else { return };
    let pg = E2e::start(3, |_| {}).await;
    if pg.embedded("the landscape serves pod logs only through the embedded API server (no kubelet)").is_none() {
        return;
    }
    let ns = pg.namespace();
    let kc = pg.kubeconfig_path().to_path_buf();

    // The API: a pod with several containers needs one named, with kube-apiserver's sentence, which lists the init
    // containers first (`podutil.VisitContainers`; etcd-druid's Local store adds one that owns the bucket).
    let pods: Api<Pod> = Api::namespaced(pg.client(), &ns);
    let err = pods.logs("etcd-main-0", &Default::default()).await.unwrap_err();
    assert!(
        err.to_string().contains(
            "a container name must be specified for pod etcd-main-0, choose one of: \
             [change-backup-bucket-permissions etcd backup-restore]"
        ),
        "{err}"
    );
    let lp = kube::api::LogParams { container: Some("etcd".into()), tail_lines: Some(3), ..Default::default() };
    let tail = pods.logs("etcd-main-0", &lp).await.unwrap();
    assert_eq!(tail.lines().count(), 3, "{tail}");
    assert!(tail.lines().all(|l| l.starts_with("{\"level\"")), "etcd logs JSON lines:\n{tail}");
    let lp = kube::api::LogParams { container: Some("etcd".into()), previous: true, ..Default::default() };
    let err = pods.logs("etcd-main-0", &lp).await.unwrap_err();
    assert!(
        err.to_string().contains("previous terminated container \"etcd\" in pod \"etcd-main-0\" not found"),
        "{err}"
    );

    let Some(out) = kubectl(&kc, &["logs", "-n", &ns, "etcd-main-0", "-c", "etcd", "--tail", "5", "--timestamps"])
    else {
        eprintln!("kubectl not installed: the kubectl part is not run");
        pg.down().await;
        return;
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(text.lines().count(), 5, "{text}");
    assert!(text.lines().all(|l| l.split(' ').next().unwrap().parse::<jiff::Timestamp>().is_ok()), "{text}");
    // The sidecar's log is backup-restore's logrus text.
    let out = kubectl(&kc, &["logs", "-n", &ns, "etcd-main-0", "-c", "backup-restore"]).unwrap();
    let sidecar = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(sidecar.lines().all(|l| l.starts_with("time=\"") && l.contains(" level=")), "{sidecar}");

    // `kubectl logs -f` streams until the container stops: member 0 goes down, the stream ends.
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(&kc).args(["logs", "-f", "-n", &ns, "etcd-main-0", "-c", "etcd"]);
    let mut follow = Streaming::spawn(cmd);
    follow.wait_for("the log so far", Duration::from_secs(10), |o, _| o.lines().count() > 5);
    let before = follow.out().lines().count();
    let target = BreakTarget { members: vec![0], down_for: Some(Duration::from_secs(5)), ..Default::default() };
    pg.break_(BreakKind::MemberDown, &target).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = follow.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "kubectl logs -f did not end when etcd stopped:\n{}", follow.err());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{}", follow.err());
    assert!(follow.out().lines().count() >= before);

    // Once it is back, its previous run's log is there.
    pg.wait_ready(Duration::from_secs(60)).await.unwrap();
    let lp = kube::api::LogParams { container: Some("etcd".into()), previous: true, ..Default::default() };
    let previous = pods.logs("etcd-main-0", &lp).await.unwrap();
    assert!(!previous.is_empty());
    pg.down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn druidctl_logs_interleaves_three_members_and_follows_a_member_through_loss_and_recreation() {
    let Some(_) = require_etcd("playground druidctl logs") else { return };
    let pg = E2e::start(3, |_| {}).await;
    let Some(_) = pg.embedded("the landscape serves pod logs only through the embedded API server") else { return };
    let ns = pg.namespace();
    let kc = pg.kubeconfig_path().to_path_buf();

    let out = druidctl(&kc, &["logs", "-n", &ns, "etcd-main", "-c", "etcd", "-o", "jsonl"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = jsonl(&out.stdout);
    let members: std::collections::BTreeSet<&str> = lines.iter().map(|l| l["member"].as_str().unwrap()).collect();
    assert_eq!(members.into_iter().collect::<Vec<_>>(), ["etcd-main-0", "etcd-main-1", "etcd-main-2"]);
    let times: Vec<jiff::Timestamp> = lines.iter().map(|l| l["time"].as_str().unwrap().parse().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "lines are in time order");
    // The three members' lines really interleave (not one member after the other).
    let switches = lines.windows(2).filter(|w| w[0]["member"] != w[1]["member"]).count();
    assert!(switches > 2, "only {switches} switches between members");

    // People get one prefix per line, etcd's JSON as time, level and message.
    let out = druidctl(&kc, &["logs", "-n", &ns, "etcd-main", "etcd-main-1", "--tail", "4"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.lines().any(|l| l.starts_with("etcd-main-1 etcd ") && l.contains(" │ ")), "{text}");
    assert!(text.lines().all(|l| l.starts_with("etcd-main-1 ")), "{text}");
    assert!(!text.contains("\"level\""), "JSON is rendered: {text}");
    // A reader that goes away ends the command quietly (exit 141, as coreutils and kubectl under pipefail):
    // stdout closed before druidctl writes a line (it reads the cluster first), for every printing command.
    for args in [["logs", "-n", &ns, "etcd-main"], ["status", "-n", &ns, "etcd-main"]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_druidctl"))
            .arg("--kubeconfig")
            .arg(&kc)
            .args(args)
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(141), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stderr.is_empty(), "{args:?} said: {}", String::from_utf8_lossy(&out.stderr));
    }
    // As people type it: one line, nothing on stderr, 0 or (when the pipe closed mid-write) 141.
    let out = Command::new("bash")
        .args(["-c", "set -o pipefail; \"$@\" | head -1", "sh", env!("CARGO_BIN_EXE_druidctl")])
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["logs", "-n", &ns, "etcd-main"])
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(matches!(out.status.code(), Some(0 | 141)), "{:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    let raw = druidctl(&kc, &["logs", "-n", &ns, "etcd-main", "0", "-c", "etcd", "--tail", "2", "--raw"]);
    assert!(String::from_utf8_lossy(&raw.stdout).contains("\"level\""));
    let warn = druidctl(&kc, &["logs", "-n", &ns, "etcd-main", "--level", "warn", "-o", "jsonl"]);
    assert!(jsonl(&warn.stdout).iter().all(|l| matches!(l["level"].as_str(), Some("warn" | "error" | "fatal"))));

    // Without pods/log: one sentence naming the permission, exit 5.
    let dir = tempfile::tempdir().unwrap();
    let reader = user_with(
        &pg,
        dir.path(),
        "pod-reader",
        &ns,
        json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            {"apiGroups": ["druid.gardener.cloud"], "resources": ["etcds"], "verbs": ["get"]}
        ]),
    )
    .await;
    let out = druidctl(&reader, &["logs", "etcd-main"]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("\"pods/log\""), "{stderr}");

    // -f on member 2: its etcd loses process and data (a restart) and then its pod is recreated.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_druidctl"));
    cmd.arg("--kubeconfig").arg(&kc).args(["logs", "-f", "-n", &ns, "etcd-main", "etcd-main-2", "-c", "etcd"]);
    cmd.env_remove("KUBECONFIG");
    let follow = Streaming::spawn(cmd);
    follow.wait_for("the log so far", Duration::from_secs(10), |o, _| o.lines().count() > 3);
    let target = BreakTarget { members: vec![2], ..Default::default() };
    let broken_at = jiff::Timestamp::now();
    pg.break_(BreakKind::MemberLost, &target).await.unwrap();
    follow.wait_for("a notice of the restart", Duration::from_secs(30), |_, e| e.contains("container restarted"));
    follow.wait_for("lines of the new run", Duration::from_secs(30), |o, _| lines_after(o, broken_at) > 0);
    pg.wait_ready(Duration::from_secs(60)).await.unwrap();
    let deleted_at = jiff::Timestamp::now();
    Api::<Pod>::namespaced(pg.client(), &ns).delete("etcd-main-2", &Default::default()).await.unwrap();
    follow.wait_for("a notice of the new pod", Duration::from_secs(30), |_, e| e.contains("pod recreated"));
    follow.wait_for("lines of the new pod", Duration::from_secs(30), |o, _| lines_after(o, deleted_at) > 0);
    // Ctrl-C ends it silently with 130.
    unsafe { libc::kill(follow.child.id() as i32, libc::SIGINT) };
    let mut follow = follow;
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = follow.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "Ctrl-C did not end logs -f");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130));
    std::thread::sleep(Duration::from_millis(200));
    assert!(!follow.err().contains("error"), "{}", follow.err());
    pg.down().await;
}

/// Lists an archive's files and reads them all.
fn unpack(archive: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let f = std::fs::File::open(archive).unwrap();
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(f));
    let mut out = std::collections::BTreeMap::new();
    for e in tar.entries().unwrap() {
        let mut e = e.unwrap();
        let path = e.path().unwrap().to_string_lossy().to_string();
        let mut data = Vec::new();
        e.read_to_end(&mut data).unwrap();
        // Paths inside the top directory.
        out.insert(path.split_once('/').map(|(_, p)| p.to_string()).unwrap_or(path), data);
    }
    out
}

/// Every file `index.md` lists is in the archive, and the archive holds nothing else.
fn index_matches(files: &std::collections::BTreeMap<String, Vec<u8>>) -> String {
    let index = String::from_utf8(files["index.md"].clone()).unwrap();
    let listed: std::collections::BTreeSet<String> = index
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(p, _)| p.to_string()))
        .filter(|p| !p.contains(' ') && p.contains('.'))
        .collect();
    let present: std::collections::BTreeSet<String> = files.keys().filter(|k| *k != "index.md").cloned().collect();
    assert_eq!(listed, present, "index.md lists exactly the files:\n{index}");
    index
}

/// No file of the bundle holds key material or any value of the namespace's Secrets.
async fn assert_no_secrets(pg: &Playground, ns: &str, files: &std::collections::BTreeMap<String, Vec<u8>>) {
    use base64::Engine;
    let secrets = Api::<Secret>::namespaced(pg.client(), ns).list(&Default::default()).await.unwrap();
    let mut needles: Vec<Vec<u8>> = vec![b"PRIVATE KEY".to_vec(), b"BEGIN CERTIFICATE".to_vec()];
    for s in secrets.items {
        for v in s.data.unwrap_or_default().into_values() {
            if v.0.len() >= 8 {
                needles.push(base64::engine::general_purpose::STANDARD.encode(&v.0).into_bytes());
                // A PEM value: every base64 line of its body.
                let text = String::from_utf8_lossy(&v.0).to_string();
                needles.extend(
                    text.lines().filter(|l| l.len() >= 40 && !l.starts_with("-----")).map(|l| l.as_bytes().to_vec()),
                );
                if !text.contains("-----") {
                    needles.push(v.0.clone());
                }
            }
        }
    }
    for (path, data) in files {
        for n in &needles {
            assert!(
                !data.windows(n.len()).any(|w| w == n.as_slice()),
                "{path} holds secret material {:?}",
                String::from_utf8_lossy(n)
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_of_a_healthy_and_a_broken_etcd_and_with_least_privilege() {
    let Some(_) = require_etcd("playground report") else { return };
    let pg = E2e::start(3, |_| {}).await;
    let Some(_) = pg.embedded("the report's logs come from the landscape behind the embedded API server") else {
        return;
    };
    let ns = pg.namespace();
    let kc = pg.kubeconfig_path().to_path_buf();
    let dir = tempfile::tempdir().unwrap();

    let dry = druidctl(&kc, &["report", "-n", &ns, "etcd-main", "--dry-run"]);
    assert!(dry.status.success());
    assert!(String::from_utf8_lossy(&dry.stdout).contains("would collect"));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    let healthy = dir.path().join("healthy.tar.gz");
    let out = druidctl(&kc, &["report", "-n", &ns, "etcd-main", "--file", healthy.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("wrote "), "the size is said");
    let files = unpack(&healthy);
    let index = index_matches(&files);
    for f in [
        "etcd.yaml",
        "status.json",
        "events.yaml",
        "resources/statefulset.apps/etcd-main.yaml",
        "logs/etcd-main-2/etcd.log",
        "logs/etcd-main-0/backup-restore.log",
        "etcd/etcd-main-0.json",
        "etcd/etcd-main-1.json",
        "etcd/etcd-main-2.json",
        "etcd/alarms.json",
        "etcd/hashkv.json",
    ] {
        assert!(files.contains_key(f), "{f} missing; index:\n{index}");
    }
    // etcd's own view, as real etcd answered: each member's status, no alarm, one consistent keyspace.
    let member: Value = serde_json::from_slice(&files["etcd/etcd-main-1.json"]).unwrap();
    assert!(member["status"]["raftIndex"].as_u64().is_some_and(|i| i > 0), "{member:#}");
    assert_eq!(serde_json::from_slice::<Value>(&files["etcd/alarms.json"]).unwrap(), json!([]));
    let hashkv: Value = serde_json::from_slice(&files["etcd/hashkv.json"]).unwrap();
    assert_eq!((hashkv["members"].as_array().map(Vec::len), &hashkv["divergent"]), (Some(3), &json!([])), "{hashkv:#}");
    assert!(files.keys().any(|k| k.starts_with("secrets/")), "{index}");
    // The PersistentVolume of each PVC: collected, or named as skipped with the reason.
    let pvs = files.keys().filter(|k| k.starts_with("resources/persistentvolume/")).count();
    assert_eq!(pvs + index.matches("| PersistentVolume ").count(), 3, "{index}");
    assert!(!String::from_utf8_lossy(&files["etcd.yaml"]).contains("managedFields"));
    assert_no_secrets(&pg, &ns, &files).await;

    // Broken: a member lost its data and restarted; its previous log is collected.
    pg.break_(BreakKind::MemberLost, &BreakTarget { members: vec![2], ..Default::default() }).await.unwrap();
    pg.wait_ready(Duration::from_secs(60)).await.unwrap();
    let broken = dir.path().join("broken.tar.gz");
    let out = druidctl(&kc, &["report", "-n", &ns, "etcd-main", "--file", broken.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let files = unpack(&broken);
    index_matches(&files);
    assert!(files.contains_key("logs/etcd-main-2/etcd.previous.log"), "{:?}", files.keys());
    assert_no_secrets(&pg, &ns, &files).await;

    // Least privilege: no secrets, no pods/log. The report completes and says what it skipped.
    let least = user_with(&pg, dir.path(), "auditor", &ns, json!([
        {"apiGroups": ["", "apps", "policy", "batch", "coordination.k8s.io", "rbac.authorization.k8s.io", "druid.gardener.cloud"],
         "resources": ["etcds", "etcdopstasks", "etcdoperatortasks", "pods", "persistentvolumeclaims", "configmaps", "services",
                       "leases", "statefulsets", "poddisruptionbudgets", "serviceaccounts", "roles", "rolebindings", "jobs", "events"],
         "verbs": ["get", "list"]}
    ]))
    .await;
    let least_file = dir.path().join("least.tar.gz");
    let out = druidctl(&least, &["report", "etcd-main", "--file", least_file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let files = unpack(&least_file);
    let index = index_matches(&files);
    let skipped = index.split("## Skipped").nth(1).unwrap().to_string();
    assert!(skipped.contains("Secret ") && skipped.contains("forbidden"), "{skipped}");
    assert!(skipped.contains("pods/log"), "{skipped}");
    assert!(skipped.contains("PersistentVolume"), "{skipped}");
    // Without the client TLS secret, etcd's own view is one skipped line saying so.
    let etcd_view: Vec<&str> = skipped.lines().filter(|l| l.contains("etcd's own view")).collect();
    assert_eq!(etcd_view.len(), 1, "{skipped}");
    assert!(etcd_view[0].contains("secret"), "{skipped}");
    assert!(!files.keys().any(|k| k.starts_with("etcd/")), "{:?}", files.keys());
    assert!(files.contains_key("etcd.yaml") && !files.keys().any(|k| k.starts_with("logs/")));

    // Without even the Etcd: non-zero.
    let nobody = user_with(&pg, dir.path(), "nobody", &ns, json!([])).await;
    let out = druidctl(&nobody, &["report", "etcd-main", "--file", dir.path().join("x.tar.gz").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(5), "{}", String::from_utf8_lossy(&out.stderr));
    pg.down().await;
}
