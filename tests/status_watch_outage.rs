//! `status --watch` rides out an API-server outage (embedded API server in its own process, killed and started
//! again on the same port with the same credentials): it keeps running, says once on stderr that it reconnects
//! and once that the server answers again, and prints again when the Etcd changes on the restarted server.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::cli_support::{Proc, playground_apiserver as apiserver, port_of};

fn kubectl_apply(kubeconfig: &Path, doc: &serde_json::Value) {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child.stdin.take().unwrap().write_all(doc.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn etcd(suspended: bool) -> serde_json::Value {
    let annotations = if suspended {
        serde_json::json!({"druid.gardener.cloud/suspend-etcd-spec-reconcile": "true"})
    } else {
        serde_json::json!({})
    };
    serde_json::json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
        "metadata": {"name": "etcd-main", "namespace": "default", "annotations": annotations},
        "spec": {"replicas": 1, "labels": {"app": "etcd-statefulset"},
                 "selector": {"matchLabels": {"app": "etcd-statefulset"}}, "etcd": {}, "backup": {}}
    })
}

/// The next report line of `status --watch -o jsonl` (up to `limit`).
fn next(lines: &mpsc::Receiver<String>, limit: Duration) -> serde_json::Value {
    let line = lines.recv_timeout(limit).expect("status --watch printed");
    serde_json::from_str(&line).unwrap()
}

#[test]
fn status_watch_rides_out_an_api_server_outage_and_follows_the_restarted_server() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    let first = apiserver(&kubeconfig, "127.0.0.1:0", false);
    let port = port_of(&kubeconfig);
    kubectl_apply(&kubeconfig, &etcd(false));

    let stderr_path = dir.path().join("stderr");
    let mut watch = Proc(
        Command::new(env!("CARGO_BIN_EXE_druidctl"))
            .args(["status", "--watch", "-n", "default", "-o", "jsonl", "--interval", "500ms"])
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .unwrap(),
    );
    let stdout = watch.0.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    assert_eq!(next(&lines, Duration::from_secs(30))["annotations"]["specReconcileSuspended"], false);
    let stderr = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let wait_for = |needle: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !stderr().contains(needle) {
            assert!(Instant::now() < deadline, "no {needle:?} on stderr:\n{}", stderr());
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    // The API server goes away for a while; status --watch keeps running and says so once.
    drop(first);
    wait_for("reconnecting: ");
    std::thread::sleep(Duration::from_secs(3));
    assert!(watch.0.try_wait().unwrap().is_none(), "status --watch exited during the outage:\n{}", stderr());
    let _second = apiserver(&kubeconfig, &format!("127.0.0.1:{port}"), true);
    wait_for("reconnected: the API server answers again");
    // The restarted server is empty: the Etcd comes back changed, and status --watch shows it.
    kubectl_apply(&kubeconfig, &etcd(true));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = next(&lines, deadline.saturating_duration_since(Instant::now()));
        if r["annotations"]["specReconcileSuspended"] == true {
            break;
        }
    }
    assert!(watch.0.try_wait().unwrap().is_none(), "status --watch exited:\n{}", stderr());
    let said = stderr();
    assert_eq!(said.matches("reconnecting: ").count(), 1, "one notice per outage:\n{said}");
    assert_eq!(said.matches("reconnected: ").count(), 1, "{said}");
}
