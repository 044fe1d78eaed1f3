//! Fidelity of the embedded API server as seen by the real `kubectl` over loopback HTTP.

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Output};

use kube_sim::{ApiServer, HttpEndpoint};

/// Kills a child process when dropped (also when a test panics).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Kubectl {
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    _endpoint: HttpEndpoint,
}

impl Kubectl {
    async fn start(server: &ApiServer, user: &str) -> Kubectl {
        let endpoint = server.serve_http("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("config");
        std::fs::write(&kubeconfig, server.kubeconfig_yaml(&endpoint.url, user, Some("default"))).unwrap();
        Kubectl { _dir: dir, kubeconfig, _endpoint: endpoint }
    }

    /// Over HTTPS, with the token in the kubeconfig's user entry only (no `/u/TOKEN` in the server URL).
    async fn start_tls(server: &ApiServer, user: &str) -> Kubectl {
        let endpoint = server.serve_https("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("config");
        std::fs::write(&kubeconfig, server.kubeconfig_yaml_for(&endpoint, user, Some("default"))).unwrap();
        Kubectl { _dir: dir, kubeconfig, _endpoint: endpoint }
    }

    /// The same server as another kubeconfig (another user, or an edited copy).
    fn with_kubeconfig(&self, name: &str, yaml: &str) -> PathBuf {
        let p = self._dir.path().join(name);
        std::fs::write(&p, yaml).unwrap();
        p
    }

    /// Runs kubectl off the async runtime (the server lives on it).
    async fn run(&self, args: &[&str]) -> Output {
        self.run_stdin(args, None).await
    }

    async fn run_stdin(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let kc = self.kubeconfig.clone();
        let cache = self._dir.path().join("cache");
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let stdin = stdin.map(String::from);
        tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let mut cmd = Command::new("kubectl");
            cmd.arg("--kubeconfig").arg(&kc).arg("--cache-dir").arg(&cache).args(&args);
            cmd.stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let mut child = cmd.spawn().expect("kubectl");
            if let Some(s) = stdin {
                child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
            } else {
                drop(child.stdin.take());
            }
            child.wait_with_output().unwrap()
        })
        .await
        .unwrap()
    }

    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_namespaces_and_api_resources() {
    let server = ApiServer::new();
    let k = Kubectl::start(&server, "admin").await;
    let out = k.ok(&["get", "ns"]).await;
    assert!(out.contains("NAME") && out.contains("STATUS") && out.contains("AGE"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("default ") && l.contains("Active")), "{out}");
    let out = k.ok(&["api-resources"]).await;
    assert!(
        out.lines().any(|l| l.starts_with("statefulsets")
            && l.contains("sts")
            && l.contains("apps/v1")
            && l.contains("true")
            && l.contains("StatefulSet")),
        "{out}"
    );
    assert!(out.lines().any(|l| l.starts_with("leases") && l.contains("coordination.k8s.io/v1")), "{out}");
}

const STS: &str = r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: etcd-main
  labels: {app: etcd}
spec:
  replicas: 1
  serviceName: etcd-main
  selector: {matchLabels: {app: etcd}}
  template:
    metadata: {labels: {app: etcd}}
    spec:
      containers:
      - name: etcd
        image: etcd:v3.5
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_patch_label_annotate_scale_delete() {
    let server = ApiServer::new();
    let k = Kubectl::start(&server, "admin").await;
    let out = k.run_stdin(&["apply", "-f", "-"], Some(STS)).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "statefulset.apps/etcd-main created");
    let out = k.run_stdin(&["apply", "-f", "-"], Some(STS)).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "statefulset.apps/etcd-main unchanged",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let changed = STS.replace("etcd:v3.5", "etcd:v3.6");
    let out = k.run_stdin(&["apply", "-f", "-"], Some(&changed)).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "statefulset.apps/etcd-main configured",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sts = server.get_object("apps/v1", "statefulsets", Some("default"), "etcd-main").unwrap();
    assert_eq!(sts["spec"]["template"]["spec"]["containers"][0]["image"], "etcd:v3.6");
    assert_eq!(sts["metadata"]["generation"], 2);

    assert_eq!(k.ok(&["label", "sts", "etcd-main", "tier=db"]).await.trim(), "statefulset.apps/etcd-main labeled");
    assert_eq!(k.ok(&["annotate", "sts", "etcd-main", "note=x"]).await.trim(), "statefulset.apps/etcd-main annotated");
    assert_eq!(
        k.ok(&[
            "patch",
            "sts",
            "etcd-main",
            "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"etcd","image":"etcd:v3.7"}]}}}}"#
        ])
        .await
        .trim(),
        "statefulset.apps/etcd-main patched"
    );
    assert_eq!(
        k.ok(&["patch", "sts", "etcd-main", "--type=merge", "-p", r#"{"metadata":{"labels":{"m":"1"}}}"#]).await.trim(),
        "statefulset.apps/etcd-main patched"
    );
    assert_eq!(
        k.ok(&[
            "patch",
            "sts",
            "etcd-main",
            "--type=json",
            "-p",
            r#"[{"op":"test","path":"/metadata/labels/m","value":"1"},{"op":"remove","path":"/metadata/labels/m"}]"#
        ])
        .await
        .trim(),
        "statefulset.apps/etcd-main patched"
    );
    assert_eq!(k.ok(&["scale", "sts", "etcd-main", "--replicas=3"]).await.trim(), "statefulset.apps/etcd-main scaled");
    let sts = server.get_object("apps/v1", "statefulsets", Some("default"), "etcd-main").unwrap();
    assert_eq!(sts["spec"]["replicas"], 3);
    assert_eq!(sts["metadata"]["labels"]["tier"], "db");
    assert!(sts["metadata"]["labels"].get("m").is_none());
    assert_eq!(sts["metadata"]["annotations"]["note"], "x");
    assert_eq!(sts["spec"]["template"]["spec"]["containers"][0]["image"], "etcd:v3.7");
    let out = k.ok(&["get", "sts", "etcd-main", "-o", "jsonpath={.spec.replicas}"]).await;
    assert_eq!(out, "3");
    let out = k.ok(&["get", "sts"]).await;
    assert!(out.starts_with("NAME") && out.contains("READY") && out.contains("0/3"), "{out}");
    let out = k.run(&["apply", "--server-side", "-f", "-"]).await;
    let _ = out;
    assert_eq!(k.ok(&["delete", "sts", "etcd-main"]).await.trim(), "statefulset.apps \"etcd-main\" deleted");
    let out = k.run(&["get", "sts", "etcd-main"]).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("Error from server (NotFound): statefulsets.apps \"etcd-main\" not found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_server_side_apply_and_dry_run() {
    let server = ApiServer::new();
    let k = Kubectl::start(&server, "admin").await;
    let out = k.run_stdin(&["apply", "--server-side", "-f", "-"], Some(STS)).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "statefulset.apps/etcd-main serverside-applied");
    let sts = server.get_object("apps/v1", "statefulsets", Some("default"), "etcd-main").unwrap();
    assert_eq!(sts["metadata"]["managedFields"][0]["manager"], "kubectl");
    assert_eq!(sts["metadata"]["managedFields"][0]["operation"], "Apply");
    let out =
        k.run_stdin(&["apply", "--dry-run=server", "-f", "-"], Some(&STS.replace("replicas: 1", "replicas: 9"))).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sts = server.get_object("apps/v1", "statefulsets", Some("default"), "etcd-main").unwrap();
    assert_eq!(sts["spec"]["replicas"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_wait_and_watch() {
    let server = ApiServer::new();
    let k = Kubectl::start(&server, "admin").await;
    k.ok(&["create", "configmap", "cm1", "--from-literal=a=b"]).await;
    let s2 = server.clone();
    let watches_before = server.request_log().count("watch", "configmaps");
    let waiter = tokio::spawn(async move {
        // Delete only once `kubectl wait` watches: a deletion before it starts would test nothing.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        while s2.request_log().count("watch", "configmaps") == watches_before && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = kube::Api::namespaced(s2.client(), "default");
        cms.delete("cm1", &Default::default()).await.unwrap();
    });
    let out = k.ok(&["wait", "--for=delete", "configmap/cm1", "--timeout=60s"]).await;
    assert!(out.contains("configmap/cm1 condition met"), "{out}");
    waiter.await.unwrap();
    k.ok(&["create", "configmap", "cm2"]).await;
    // `get --watch` prints the list, then streams: cm3 created after the first row shows up must appear too.
    let mut child = KillOnDrop(
        std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&k.kubeconfig)
            .arg("--cache-dir")
            .arg(k._dir.path().join("cache"))
            .args(["get", "configmaps", "--watch", "--request-timeout=60s"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (line_tx, mut line_rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut created_cm3 = false;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while !seen.iter().any(|l: &String| l.starts_with("cm3")) {
        let line = tokio::time::timeout_at(deadline, line_rx.recv())
            .await
            .expect("watch output in time")
            .expect("kubectl still running");
        if line.starts_with("cm2") && !created_cm3 {
            created_cm3 = true;
            let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
                kube::Api::namespaced(server.client(), "default");
            cms.create(
                &Default::default(),
                &serde_json::from_value(serde_json::json!({"metadata":{"name":"cm3"}})).unwrap(),
            )
            .await
            .unwrap();
        }
        seen.push(line);
    }
    drop(child);
    assert!(seen[0].starts_with("NAME"), "{seen:?}");
    let pod =
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#;
    k.run_stdin(&["create", "-f", "-"], Some(pod)).await;
    let s3 = server.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(s3.client(), "default");
        pods.patch_status(
            "p",
            &Default::default(),
            &kube::api::Patch::Merge(serde_json::json!({"status":{"conditions":[{"type":"Ready","status":"True"}]}})),
        )
        .await
        .unwrap();
    });
    let out = k.ok(&["wait", "--for=condition=Ready", "pod/p", "--timeout=60s"]).await;
    assert!(out.contains("pod/p condition met"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_etcd_shows_printer_columns() {
    let server = ApiServer::new();
    common::register_vendored_crds(&server);
    let k = Kubectl::start(&server, "admin").await;
    let etcd = r#"{"apiVersion":"druid.gardener.cloud/v1alpha1","kind":"Etcd","metadata":{"name":"etcd-main"},
      "spec":{"replicas":3,"labels":{"app":"etcd"},"selector":{"matchLabels":{"app":"etcd"}},
      "etcd":{},"backup":{}}}"#;
    let out = k.run_stdin(&["create", "-f", "-"], Some(etcd)).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = k.ok(&["get", "etcd"]).await;
    let header = out.lines().next().unwrap();
    for col in ["NAME", "READY", "QUORATE", "ALL MEMBERS READY", "BACKUP READY", "AGE"] {
        assert!(header.contains(col), "missing {col}: {out}");
    }
    let out = k.ok(&["get", "crd"]).await;
    assert!(out.contains("etcds.druid.gardener.cloud"), "{out}");
    let out = k.ok(&["api-resources", "--api-group=druid.gardener.cloud"]).await;
    assert!(out.contains("etcds") && out.contains("Etcd"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_and_forbidden_message() {
    let server = ApiServer::new();
    server.add_user("alice", &[]);
    let admin = Kubectl::start(&server, "admin").await;
    let role = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"cm-reader"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list"]}]}"#;
    let binding = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"alice-cm"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"cm-reader"},"subjects":[{"kind":"User","name":"alice","apiGroup":"rbac.authorization.k8s.io"}]}"#;
    assert!(admin.run_stdin(&["create", "-f", "-"], Some(role)).await.status.success());
    assert!(admin.run_stdin(&["create", "-f", "-"], Some(binding)).await.status.success());
    let alice = Kubectl::start(&server, "alice").await;
    assert_eq!(alice.ok(&["auth", "can-i", "list", "configmaps"]).await.trim(), "yes");
    let out = alice.run(&["auth", "can-i", "delete", "configmaps"]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    let out = alice.run(&["get", "secrets"]).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains(
        "Error from server (Forbidden): secrets is forbidden: User \"alice\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\""
    ), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_rejects_unknown_fields_of_custom_resources_strictly() {
    let server = ApiServer::new();
    common::register_vendored_crds(&server);
    let k = Kubectl::start(&server, "admin").await;
    let etcd = r#"{"apiVersion":"druid.gardener.cloud/v1alpha1","kind":"Etcd","metadata":{"name":"etcd-main"},
      "spec":{"replicas":3,"labels":{"app":"etcd"},"selector":{"matchLabels":{"app":"etcd"}},"etcd":{},"backup":{},"replicaz":1}}"#;
    let out = k.run_stdin(&["apply", "-f", "-"], Some(etcd)).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("strict decoding error: unknown field \"spec.replicaz\""), "{err}");
    let out = k.run_stdin(&["apply", "--validate=false", "-f", "-"], Some(etcd)).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = k.ok(&["scale", "etcd", "etcd-main", "--replicas=5"]).await;
    assert_eq!(out.trim(), "etcd.druid.gardener.cloud/etcd-main scaled");
}

/// Over TLS kubectl sends the kubeconfig's bearer token on every request, `get --raw` included; an unknown
/// token is 401 and a user without permissions 403, as on kube-apiserver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_raw_over_tls_authenticates_with_the_user_token() {
    let server = ApiServer::new();
    server.add_user("limited", &[]);
    let k = Kubectl::start_tls(&server, "admin").await;
    let yaml = std::fs::read_to_string(&k.kubeconfig).unwrap();
    assert!(yaml.contains("server: https://127.0.0.1:"), "{yaml}");
    assert!(!yaml.contains("/u/"), "the token must not ride in the server URL: {yaml}");
    let api = k.ok(&["get", "--raw", "/api/v1/namespaces/default"]).await;
    assert!(api.contains(r#""name":"default""#), "{api}");
    assert_eq!(server.request_log().count("get", "namespaces"), 1);

    let admin_token = server.token_for("admin").unwrap();
    let bad = k.with_kubeconfig("bad", &yaml.replace(&admin_token, "not-a-token"));
    let limited = k.with_kubeconfig("limited", &yaml.replace(&admin_token, &server.token_for("limited").unwrap()));
    for (kc, want) in [(&bad, "Unauthorized"), (&limited, "forbidden")] {
        let kc = kc.clone();
        let out = tokio::task::spawn_blocking(move || {
            Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&kc)
                .args(["get", "--raw", "/api/v1/namespaces"])
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{want}: {err}");
    }
}
