//! End to end through the machine's real kubectl: `kubectl druid …` finds the installed `kubectl-druid` plugin,
//! uses the current context (and its namespace), and `kubectl druid <TAB>` completes through the
//! `kubectl_complete-druid` shim.

use crate::cli_support;

use std::path::Path;

use cli_support::{CONTEXT_NS, Fixture};
use kube::api::{Api, DynamicObject, PostParams};

const KUBECTL: &str = "/usr/bin/kubectl";

/// A PATH directory holding the plugin as install.sh lays it out.
fn plugin_dir(root: &Path) -> std::path::PathBuf {
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(cli_support::bin(), bin.join("druidctl")).unwrap();
    std::os::unix::fs::symlink(cli_support::bin(), bin.join("kubectl-druid")).unwrap();
    let shim = bin.join("kubectl_complete-druid");
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("completions/kubectl_complete-druid"), &shim).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

async fn kubectl(fx: &Fixture, path_dir: &Path, args: &[&str]) -> std::process::Output {
    let path = format!("{}:/usr/bin:/bin", path_dir.display());
    // kubectl refuses flags before a plugin name; HOME (a temp dir) keeps its cache out of the way.
    cli_support::run_with(
        KUBECTL,
        args,
        &[("KUBECONFIG", fx.kubeconfig.to_str().unwrap()), ("PATH", &path)],
        fx.dir.path(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_druid_status_uses_the_current_contexts_namespace() {
    let fx = Fixture::start().await;
    // An Etcd of the same name in "default": the plugin must not fall back to it.
    let api: Api<DynamicObject> = Api::namespaced_with(fx.server.client(), "default", &cli_support::etcd_resource());
    let decoy: DynamicObject =
        serde_json::from_value(cli_support::etcd_json("default", "etcd-main", 1, serde_json::json!({}))).unwrap();
    api.create(&PostParams::default(), &decoy).await.unwrap();
    let bin = plugin_dir(fx.dir.path());

    let out = kubectl(&fx, &bin, &["druid", "status", "etcd-main", "-o", "json"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // No pods exist, so the Etcd is judged as having lost quorum: exit 4 ("unhealthy"), passed through by kubectl.
    assert_eq!(out.status.code(), Some(4), "stderr: {stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(doc["items"][0]["etcd"]["namespace"], CONTEXT_NS);
    assert_eq!(doc["items"][0]["quorum"]["members"], 3, "the shoot--a Etcd, not the 1-replica decoy");
    assert_eq!(doc["items"][0]["verdict"], "QuorumLost");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let help = kubectl(&fx, &bin, &["druid", "--help"]).await;
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("Usage: kubectl druid"), "{help}");

    let out = kubectl(&fx, &bin, &["druid", "status", "etcd-missing"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6));
    assert!(stderr.contains("namespace \"shoot--a\""), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_druid_tab_completes_commands_and_etcd_names() {
    let fx = Fixture::start().await;
    let bin = plugin_dir(fx.dir.path());
    let out = kubectl(&fx, &bin, &["__complete", "druid", "sta"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.starts_with("status")), "{text}");
    assert!(text.trim_end().ends_with(":4"), "cobra directive NoFileComp: {text}");

    let out = kubectl(&fx, &bin, &["__complete", "druid", "status", "etcd-"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = text.lines().filter(|l| !l.starts_with(':')).collect();
    assert_eq!(names, ["etcd-events", "etcd-main"], "names from the context's namespace: {text}");

    // Members of the Etcd typed before them (its spec's replicas here: no status, no pods).
    let out =
        kubectl(&fx, &bin, &["__complete", "druid", "runbook", "member-restore", "shoot--b/etcd-other", ""]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = text.lines().filter(|l| !l.starts_with(':') && !l.starts_with('-')).collect();
    assert_eq!(names, ["etcd-other-0", "etcd-other-1", "etcd-other-2"], "{text}");
}
