//! Completion through bash's own machinery: the script of `druidctl completion bash` is sourced in `bash`, the
//! function that `complete -p druidctl` names is called with COMP_WORDS/COMP_CWORD as bash would, and COMPREPLY
//! is checked. The cluster is the embedded API server (namespaces shoot--a, shoot--b; Etcds shoot--a/etcd-main,
//! shoot--a/etcd-events, shoot--b/etcd-other).

use crate::cli_support;

use std::path::Path;

use cli_support::Fixture;

/// COMPREPLY for the command line `words` with the cursor at the end of the last word.
async fn complete(fx: &Fixture, words: &[&str]) -> Vec<String> {
    let bin_dir = Path::new(cli_support::bin()).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let script = format!(
        r#"set -u
source <(druidctl completion bash)
spec=$(complete -p druidctl) || {{ echo "no completion registered" >&2; exit 9; }}
func=$(sed -E 's/.* -F ([^ ]+) .*/\1/' <<<"$spec")
COMP_WORDS=({words})
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="${{COMP_WORDS[*]}}"
COMP_POINT=${{#COMP_LINE}}
COMP_TYPE=9
"$func" druidctl "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\n' "${{COMPREPLY[@]}}"
"#,
        words = quoted.join(" ")
    );
    let kubeconfig = fx.kubeconfig.to_str().unwrap().to_string();
    let home = fx.dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("bash")
            .args(["-c", &script])
            .env("PATH", path)
            .env("HOME", home)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("COMPLETE")
            .output()
            .expect("bash")
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{words:?}: {}", String::from_utf8_lossy(&out.stderr));
    let mut reply: Vec<String> =
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()).map(String::from).collect();
    reply.sort();
    reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_completes_etcds_namespaces_runbooks_break_kinds_and_contexts() {
    let fx = Fixture::start().await;

    // Etcd names of the context's namespace, and NAMESPACE/ prefixes.
    assert_eq!(complete(&fx, &["druidctl", "status", "etcd-"]).await, ["etcd-events", "etcd-main"]);
    assert_eq!(complete(&fx, &["druidctl", "status", "shoot"]).await, ["shoot--a/", "shoot--b/"]);
    assert_eq!(complete(&fx, &["druidctl", "reconcile", "shoot--b/"]).await, ["shoot--b/etcd-other"]);
    assert_eq!(complete(&fx, &["druidctl", "runbook", "cert-renewal", "etcd-m"]).await, ["etcd-main"]);

    // -n / --namespace: the namespaces of the cluster.
    let ns = complete(&fx, &["druidctl", "status", "-n", "shoot"]).await;
    assert_eq!(ns, ["shoot--a", "shoot--b"]);
    assert_eq!(complete(&fx, &["druidctl", "status", "--namespace", "shoot--b"]).await, ["shoot--b"]);

    // Runbook names.
    let runbooks = complete(&fx, &["druidctl", "runbook", ""]).await;
    for rb in ["quorum-loss-recovery", "member-restore", "cert-renewal", "machine-replacement"] {
        assert!(runbooks.contains(&rb.to_string()), "{rb} missing from {runbooks:?}");
    }

    // playground break kinds.
    assert_eq!(complete(&fx, &["druidctl", "playground", "break", "member-"]).await, ["member-down", "member-lost"]);
    let kinds = complete(&fx, &["druidctl", "playground", "break", ""]).await;
    assert!(
        kinds.contains(&"quorum-lost".to_string()) && kinds.contains(&"apiserver-restart".to_string()),
        "{kinds:?}"
    );

    // --context: the contexts of the kubeconfig.
    let config = kube::config::Kubeconfig::read_from(&fx.kubeconfig).unwrap();
    let want: Vec<String> = config.contexts.iter().map(|c| c.name.clone()).collect();
    assert!(!want.is_empty());
    assert_eq!(complete(&fx, &["druidctl", "status", "--context", ""]).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_completion_follows_the_cluster_flags_typed_on_the_line() {
    let fx = Fixture::start().await;
    // -n names the namespace whose Etcds complete (in every spelling).
    assert_eq!(complete(&fx, &["druidctl", "status", "-n", "shoot--b", "etcd-"]).await, ["etcd-other"]);
    assert_eq!(complete(&fx, &["druidctl", "-n", "shoot--b", "reconcile", "etcd-"]).await, ["etcd-other"]);
    assert_eq!(complete(&fx, &["druidctl", "status", "--namespace=shoot--b", "etcd-"]).await, ["etcd-other"]);
    // An unknown --context gives no candidates (and no error output in the shell).
    assert!(complete(&fx, &["druidctl", "status", "--context", "nope", "etcd-"]).await.is_empty());
    // With -A, names are refused (write NAMESPACE/NAME without -A), so none are offered.
    assert!(complete(&fx, &["druidctl", "status", "-A", "etcd-"]).await.is_empty());
}
