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

/// Creates `obj` (JSON with apiVersion/kind/metadata) in its namespace.
/// COMPREPLY without the flags (offered next to values when nothing is typed yet).
async fn values(fx: &Fixture, words: &[&str]) -> Vec<String> {
    complete(fx, words).await.into_iter().filter(|c| !c.starts_with('-')).collect()
}

async fn create(fx: &Fixture, group: &str, version: &str, kind: &str, plural: &str, obj: serde_json::Value) {
    use kube::api::{Api, DynamicObject, PostParams};
    use kube::core::{ApiResource, GroupVersionKind};
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    let ns = obj["metadata"]["namespace"].as_str().unwrap().to_string();
    let api: Api<DynamicObject> = Api::namespaced_with(fx.server.client(), &ns, &ar);
    let obj: DynamicObject = serde_json::from_value(obj).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap_or_else(|e| panic!("create {kind}: {e}"));
}

async fn pod(fx: &Fixture, ns: &str, name: &str) {
    let obj = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "etcd", "image": "etcd"}]}});
    create(fx, "", "v1", "Pod", "pods", obj).await;
}

/// Sets `status.members` of an Etcd (through the status subresource, as etcd-druid does).
async fn status_members(fx: &Fixture, ns: &str, etcd: &str, members: &[&str]) {
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    let api: Api<DynamicObject> = Api::namespaced_with(fx.server.client(), ns, &cli_support::etcd_resource());
    let members: Vec<serde_json::Value> = members
        .iter()
        .map(|m| {
            serde_json::json!({"name": m, "id": "1", "role": "Member", "status": "Ready", "reason": "LeaseSucceeded",
            "lastTransitionTime": "2026-01-01T00:00:00Z"})
        })
        .collect();
    let patch = serde_json::json!({"status": {"members": members}});
    api.patch_status(etcd, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("status");
    let got = api.get(etcd).await.unwrap();
    assert_eq!(got.data["status"]["members"].as_array().map(Vec::len), Some(members.len()), "status members stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_completes_the_members_of_the_etcd_typed_on_the_line() {
    let fx = Fixture::start().await;
    // etcd-main: status names members 0 and 1; member 2 is missing from the status, its pod exists. A pod that is
    // not a member (its name does not end in an ordinal) is never offered.
    status_members(&fx, "shoot--a", "etcd-main", &["etcd-main-0", "etcd-main-1"]).await;
    pod(&fx, "shoot--a", "etcd-main-1").await;
    pod(&fx, "shoot--a", "etcd-main-2").await;
    pod(&fx, "shoot--a", "etcd-main-compaction").await;
    let main = ["etcd-main-0", "etcd-main-1", "etcd-main-2"];
    assert_eq!(values(&fx, &["druidctl", "runbook", "member-restore", "etcd-main", ""]).await, main);
    assert_eq!(
        values(&fx, &["druidctl", "runbook", "member-restore", "etcd-main", "etcd-main-2"]).await,
        ["etcd-main-2"]
    );
    // Flags before the Etcd (and the value of -n) are not taken for it.
    assert_eq!(
        values(&fx, &["druidctl", "runbook", "member-restore", "--yes", "-n", "shoot--a", "etcd-main", ""]).await,
        main
    );
    // NAMESPACE/NAME and -n name the Etcd's namespace; without status or pods, the members of its spec.
    let other = ["etcd-other-0", "etcd-other-1", "etcd-other-2"];
    assert_eq!(values(&fx, &["druidctl", "runbook", "member-restore", "shoot--b/etcd-other", ""]).await, other);
    assert_eq!(
        values(&fx, &["druidctl", "-n", "shoot--b", "runbook", "member-restore", "etcd-other", ""]).await,
        other
    );
    // An Etcd that does not exist has no members to offer.
    assert!(values(&fx, &["druidctl", "runbook", "member-restore", "etcd-nope", ""]).await.is_empty());
    // The position of the Etcd still completes Etcds.
    assert_eq!(values(&fx, &["druidctl", "runbook", "member-restore", "etcd-m"]).await, ["etcd-main"]);

    // playground break --member: ordinals of the playground's Etcd (its kubeconfig under --dir), in the namespace
    // of --in, else the first one.
    let pg = fx.dir.path().join("pg");
    std::fs::create_dir_all(&pg).unwrap();
    std::fs::copy(&fx.kubeconfig, pg.join("kubeconfig")).unwrap();
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shoot--c"}});
    {
        use kube::api::{Api, PostParams};
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(fx.server.client());
        api.create(&PostParams::default(), &serde_json::from_value(ns).unwrap()).await.unwrap();
    }
    create(
        &fx,
        "druid.gardener.cloud",
        "v1alpha1",
        "Etcd",
        "etcds",
        cli_support::etcd_json("shoot--c", "etcd-five", 5, serde_json::json!({})),
    )
    .await;
    let dir = pg.to_str().unwrap();
    let five = values(
        &fx,
        &["druidctl", "playground", "--dir", dir, "break", "member-down", "--in", "shoot--c", "--member", ""],
    )
    .await;
    assert_eq!(five, ["0", "1", "2", "3", "4"]);
    // Without --in: the first namespace's first Etcd (shoot--a/etcd-events, 3 members).
    let first = values(&fx, &["druidctl", "playground", "break", "member-lost", "--dir", dir, "--member", ""]).await;
    assert_eq!(first, ["0", "1", "2"]);
    // No playground in --dir: nothing (and no error in the shell).
    let none = fx.dir.path().join("none");
    assert!(
        values(
            &fx,
            &["druidctl", "playground", "--dir", none.to_str().unwrap(), "break", "member-down", "--member", ""]
        )
        .await
        .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_completes_task_names_in_the_namespace_on_the_line() {
    let fx = Fixture::start().await;
    fx.server.register_crd_yaml(&serde_json::to_string(&druidctl::api::task::crd()).unwrap()).unwrap();
    let task = |ns: &str, name: &str| {
        serde_json::json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "EtcdOperatorTask",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"type": "OnDemandSnapshotTask", "ownerEtcdRefrence": {"name": "etcd-main", "namespace": ns}}})
    };
    for (ns, name) in [("shoot--a", "snap-full-1"), ("shoot--a", "snap-delta-2"), ("shoot--b", "compact-1")] {
        create(&fx, "druid.gardener.cloud", "v1alpha1", "EtcdOperatorTask", "etcdoperatortasks", task(ns, name)).await;
    }
    let ops = serde_json::json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "EtcdOpsTask",
        "metadata": {"name": "ops-snap", "namespace": "shoot--a"},
        "spec": {"etcdName": "etcd-main", "config": {"onDemandSnapshot": {"type": "full"}}}});
    create(&fx, "druid.gardener.cloud", "v1alpha1", "EtcdOpsTask", "etcdopstasks", ops).await;

    let operator = ["snap-delta-2", "snap-full-1"];
    for cmd in ["describe", "watch", "delete"] {
        assert_eq!(values(&fx, &["druidctl", "task", cmd, ""]).await, operator, "task {cmd}");
    }
    // `task get` shows EtcdOpsTasks too, so it offers them.
    assert_eq!(values(&fx, &["druidctl", "task", "get", ""]).await, ["ops-snap", "snap-delta-2", "snap-full-1"]);
    assert_eq!(values(&fx, &["druidctl", "task", "get", "snap-full-1", "snap-d"]).await, ["snap-delta-2"]);
    // The namespace of -n, in any position.
    assert_eq!(values(&fx, &["druidctl", "task", "describe", "-n", "shoot--b", ""]).await, ["compact-1"]);
    assert_eq!(values(&fx, &["druidctl", "-n", "shoot--b", "task", "delete", "c"]).await, ["compact-1"]);
    assert!(values(&fx, &["druidctl", "task", "describe", "compact"]).await.is_empty());
    // --etcd of task create/list completes Etcds.
    assert_eq!(values(&fx, &["druidctl", "task", "list", "--etcd", "etcd-m"]).await, ["etcd-main"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_completes_namespace_slash_name_with_all_namespaces() {
    let fx = Fixture::start().await;
    let all = ["shoot--a/etcd-events", "shoot--a/etcd-main", "shoot--b/etcd-other"];
    assert_eq!(values(&fx, &["druidctl", "status", "-A", ""]).await, all);
    assert_eq!(values(&fx, &["druidctl", "-A", "reconcile", "shoot--b"]).await, ["shoot--b/etcd-other"]);
    assert_eq!(
        values(&fx, &["druidctl", "status", "--all-namespaces", "shoot--a/etcd-m"]).await,
        ["shoot--a/etcd-main"]
    );
    // The completed line runs: -A with NAMESPACE/NAME names is accepted.
    let out = fx.run(&["status", "-A", "shoot--b/etcd-other", "-o", "name"]).await;
    assert_ne!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("etcd-other"), "{}", String::from_utf8_lossy(&out.stdout));
    // Other completions after the new ones still work (snapshot, compact, maintenance, copy-backups take Etcds).
    for cmd in ["snapshot", "compact", "maintenance", "copy-backups"] {
        let mut words = vec!["druidctl", cmd];
        if cmd == "snapshot" {
            words.push("full");
        }
        words.push("etcd-ma");
        assert_eq!(values(&fx, &words).await, ["etcd-main"], "{cmd}");
    }
}
