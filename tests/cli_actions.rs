//! The foundation commands against the embedded API server: install, the annotation commands, reconcile with
//! --wait (an actor plays etcd-druid), list-resources, and output formats.

use crate::cli_support;

use std::time::Duration;

use cli_support::{CONTEXT_NS, Fixture};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

fn annotations(fx: &Fixture, name: &str) -> Value {
    let o = fx.server.get_object("druid.gardener.cloud/v1alpha1", "etcds", Some(CONTEXT_NS), name).unwrap();
    o["metadata"]["annotations"].clone()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_applies_the_crd_and_roles_and_is_idempotent() {
    let fx = Fixture::start().await;
    let out = fx.run(&["install", "--dry-run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).contains("(server dry run)"));
    assert!(
        fx.server
            .get_object(
                "apiextensions.k8s.io/v1",
                "customresourcedefinitions",
                None,
                "etcdoperatortasks.druid.gardener.cloud"
            )
            .is_none(),
        "dry run stores nothing"
    );

    let out = fx.run(&["install", "--serve-image", "druidctl:test"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = stdout(&out);
    assert!(
        text.contains("customresourcedefinition.apiextensions.k8s.io/etcdoperatortasks.druid.gardener.cloud created"),
        "{text}"
    );
    assert!(text.contains("clusterrole.rbac.authorization.k8s.io/druidctl:serve created"), "{text}");
    assert!(text.contains("deployment.apps/druidctl-serve created"), "{text}");

    let again = fx.run(&["install", "--serve-image", "druidctl:test"]).await;
    assert_eq!(again.status.code(), Some(0));
    assert!(!stdout(&again).contains(" created"), "second install creates nothing: {}", stdout(&again));

    // With the CRD installed, status lists tasks (none yet) instead of pointing at `install`.
    let out = fx.run(&["status", "etcd-main", "-o", "json"]).await;
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["items"][0]["tasks"]["crdInstalled"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_resume_and_protection_patch_only_their_annotation() {
    let fx = Fixture::start().await;
    // An annotation druidctl does not know must survive every write.
    let api: Api<DynamicObject> = Api::namespaced_with(fx.server.client(), CONTEXT_NS, &cli_support::etcd_resource());
    api.patch(
        "etcd-main",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"team": "etcd"}}})),
    )
    .await
    .unwrap();

    let out = fx.run(&["suspend-reconcile", "etcd-main"]).await;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "etcd shoot--a/etcd-main: spec reconciliation suspended\n");
    assert_eq!(annotations(&fx, "etcd-main")["druid.gardener.cloud/suspend-etcd-spec-reconcile"], "true");

    let out = fx.run(&["suspend-reconcile", "etcd-main"]).await;
    assert_eq!(stdout(&out), "etcd shoot--a/etcd-main: spec reconciliation already suspended\n");

    let out = fx.run(&["resume-reconcile", "etcd-main", "-o", "json"]).await;
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["items"][0]["changed"], true);
    assert!(annotations(&fx, "etcd-main").get("druid.gardener.cloud/suspend-etcd-spec-reconcile").is_none());

    let out = fx.run(&["protection", "disable", "-l", "role=main"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout(&out).lines().count(), 2, "both Etcds of shoot--a: {}", stdout(&out));
    assert_eq!(annotations(&fx, "etcd-main")["druid.gardener.cloud/disable-etcd-component-protection"], "true");
    let out = fx.run(&["protection", "enable", "etcd-main", "shoot--a/etcd-events"]).await;
    assert_eq!(out.status.code(), Some(0));
    assert!(annotations(&fx, "etcd-events").get("druid.gardener.cloud/disable-etcd-component-protection").is_none());
    assert_eq!(annotations(&fx, "etcd-main")["team"], "etcd", "unmodelled annotations are never dropped");
}

/// Plays etcd-druid: removes the reconcile annotation and observes the generation.
async fn druid_actor(fx_server: kube_sim::ApiServer) {
    let api: Api<DynamicObject> = Api::namespaced_with(fx_server.client(), CONTEXT_NS, &cli_support::etcd_resource());
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Ok(e) = api.get("etcd-main").await else { continue };
        let pending = e.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("gardener.cloud/operation"));
        if pending {
            let _ = api
                .patch(
                    "etcd-main",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {"gardener.cloud/operation": null}}})),
                )
                .await;
            let _ = api
                .patch_status(
                    "etcd-main",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"observedGeneration": e.metadata.generation}})),
                )
                .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_wait_times_out_without_druid_and_succeeds_with_it() {
    let fx = Fixture::start().await;
    let out = fx.run(&["reconcile", "etcd-main", "--wait", "--timeout", "1s"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(
        stderr.contains("timed out after 1s waiting for etcd-druid to reconcile etcd shoot--a/etcd-main"),
        "{stderr}"
    );
    assert_eq!(annotations(&fx, "etcd-main")["gardener.cloud/operation"], "reconcile");

    let actor = tokio::spawn(druid_actor(fx.server.clone()));
    let out = fx.run(&["reconcile", "etcd-main", "--wait", "--timeout", "20s"]).await;
    actor.abort();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout(&out), "etcd shoot--a/etcd-main: reconciled\n");
    assert!(annotations(&fx, "etcd-main").get("gardener.cloud/operation").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_resources_groups_by_kind_and_status_exit_code_gates_ci() {
    let fx = Fixture::start().await;
    let client = fx.server.client();
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), CONTEXT_NS);
    let cm = serde_json::from_value(json!({"metadata": {"name": "etcd-main-config",
        "labels": {"app.kubernetes.io/part-of": "etcd-main", "app.kubernetes.io/managed-by": "etcd-druid"}}}))
    .unwrap();
    cms.create(&Default::default(), &cm).await.unwrap();
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client.clone(), CONTEXT_NS);
    for name in ["etcd-main-0", "etcd-main-full-snap"] {
        let l = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {}})).unwrap();
        leases.create(&Default::default(), &l).await.unwrap();
    }

    let out = fx.run(&["list-resources", "etcd-main"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = stdout(&out);
    assert!(text.starts_with("KIND"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("ConfigMap") && l.contains("etcd-main-config")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("Lease") && l.contains("etcd-main-full-snap")), "{text}");
    assert!(text.contains("EtcdOperatorTask"), "a missing task CRD is reported, not fatal: {text}");

    let out = fx.run(&["list-resources", "etcd-main", "-o", "name"]).await;
    let names = stdout(&out);
    assert!(
        names.contains("configmap/etcd-main-config\n") && names.contains("lease.coordination.k8s.io/etcd-main-0\n"),
        "{names}"
    );

    let out = fx.run(&["list-resources", "etcd-main", "-o", "json"]).await;
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["kind"], "List");
    assert!(doc["items"].as_array().unwrap().iter().any(|o| o["kind"] == "ConfigMap"));

    // No pods exist: every Etcd of the namespace has lost quorum → exit 4 with one line on stderr.
    let out = fx.run(&["status"]).await;
    assert_eq!(out.status.code(), Some(4));
    let text = stdout(&out);
    // Several Etcds: one line each, a header first.
    assert_eq!(text.lines().count(), 3, "{text}");
    let line_of = |name: &str| text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}: {text}"));
    assert!(line_of("shoot--a/etcd-events ").contains(" QuorumLost "), "{text}");
    assert!(line_of("shoot--a/etcd-main ").contains(" QuorumLost "), "{text}");
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    let out = fx.run(&["status", "-o", "wide"]).await;
    assert_eq!(out.status.code(), Some(4));
    let text = stdout(&out);
    assert!(
        text.contains("Etcd shoot--a/etcd-events: QuorumLost") && text.contains("Etcd shoot--a/etcd-main: QuorumLost"),
        "-o wide shows the full block of each: {text}"
    );
    assert!(text.contains("`druidctl install` installs it"), "{text}");
    let out = fx.run(&["status", "-A", "-o", "name"]).await;
    assert_eq!(
        stdout(&out),
        "etcd.druid.gardener.cloud/etcd-events\netcd.druid.gardener.cloud/etcd-main\netcd.druid.gardener.cloud/etcd-other\n"
    );
    // Nothing found: one sentence saying where it looked, exit 0 (nothing unhealthy).
    for (args, said) in [
        (&["status", "-A", "-l", "role=none"][..], "No Etcds found in any namespace with labels matching role=none.\n"),
        (&["-n", "foo", "status"][..], "No Etcds found in namespace foo.\n"),
        (
            &["status", "-n", "shoot--b", "-l", "role=none"][..],
            "No Etcds found in namespace shoot--b with labels matching role=none.\n",
        ),
        (&["status", "-l", "role=none"][..], "No Etcds found in namespace shoot--a with labels matching role=none.\n"),
    ] {
        let out = fx.run(args).await;
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(stdout(&out), said, "{args:?}");
        assert!(out.stderr.is_empty(), "{args:?}");
    }
    let out = fx.run(&["-n", "foo", "status", "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(0));
    assert!(!stdout(&out).contains("No Etcds"), "documents stay documents: {}", stdout(&out));
    let out = fx.run(&["status", "etcd-main", "--color", "always"]).await;
    assert!(stdout(&out).contains("\x1b[31mQuorumLost\x1b[0m"));
    let out = fx.run(&["status", "etcd-main"]).await;
    assert!(!stdout(&out).contains('\x1b'), "no color off a terminal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_prints_again_when_something_changes() {
    use std::io::BufRead;
    let fx = Fixture::start().await;
    let mut child = std::process::Command::new(cli_support::bin())
        .args(["status", "etcd-main", "--watch", "--interval", "100ms", "-o", "jsonl"])
        .env("KUBECONFIG", &fx.kubeconfig)
        .env("HOME", fx.dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let _guard = Kill(child);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = async |rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>| -> Value {
        let line = tokio::time::timeout(Duration::from_secs(20), rx.recv()).await.expect("watch printed").unwrap();
        serde_json::from_str(&line).unwrap()
    };
    let first = next(&mut rx).await;
    assert_eq!(first["annotations"]["specReconcileSuspended"], false);
    let api: Api<DynamicObject> = Api::namespaced_with(fx.server.client(), CONTEXT_NS, &cli_support::etcd_resource());
    let suspend = json!({"metadata": {"annotations": {"druid.gardener.cloud/suspend-etcd-spec-reconcile": "true"}}});
    api.patch("etcd-main", &PatchParams::default(), &Patch::Merge(suspend)).await.unwrap();
    let second = next(&mut rx).await;
    assert_eq!(second["annotations"]["specReconcileSuspended"], true);
}

/// Starts `druidctl ARGS` against the fixture, waits for its first line on stdout, sends it SIGINT (Ctrl-C) and
/// returns its exit code, the first line and everything it wrote on stderr.
async fn interrupt_after_first_line(fx: &Fixture, args: &[&str]) -> (Result<i32, String>, String, String) {
    use std::io::{BufRead, Read};
    let mut child = std::process::Command::new(cli_support::bin())
        .args(args)
        .env("KUBECONFIG", &fx.kubeconfig)
        .env("HOME", fx.dir.path())
        .env_remove("NO_COLOR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut stderr = child.stderr.take().unwrap();
    let what = args.join(" ");
    tokio::task::spawn_blocking(move || {
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        assert!(!first.is_empty(), "the watch printed before it was interrupted");
        // SAFETY: signalling the child this test started.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("{what} did not end on Ctrl-C");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        stderr.read_to_string(&mut err).unwrap();
        use std::os::unix::process::ExitStatusExt;
        let code = status.code().ok_or_else(|| format!("ended by signal {:?}", status.signal()));
        (code, first, err)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_says_once_what_it_watches_and_ctrl_c_ends_it_silently() {
    let fx = Fixture::start().await;
    let cases: [(&[&str], &str); 4] = [
        (
            &["status", "etcd-main", "--watch", "--interval", "100ms"],
            "watching shoot--a/etcd-main (judged again on every change and every 100ms); Ctrl-C to stop\n",
        ),
        (
            &["status", "-w", "-o", "jsonl"],
            "watching the Etcds in namespace shoot--a (judged again on every change and every 2s); Ctrl-C to stop\n",
        ),
        (
            &["status", "-A", "-l", "role=main", "-w"],
            "watching the Etcds of every namespace with labels matching role=main (judged again on every change and every 2s); Ctrl-C to stop\n",
        ),
        (&["task", "watch", "-A"], "watching the tasks of every namespace; Ctrl-C to stop\n"),
    ];
    for (args, said) in cases {
        let mut args = args.to_vec();
        let task = args[0] == "task";
        if task {
            // Something for the watch to print: it streams every task it sees.
            let out = fx.run(&["install"]).await;
            assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
            let out = fx.run(&["snapshot", "full", "etcd-main", "--no-wait", "--force", "--engine", "druidctl"]).await;
            assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
            args.extend(["--color", "never"]);
        }
        let (code, first, stderr) = interrupt_after_first_line(&fx, &args).await;
        // 130 is the documented code of Ctrl-C; nothing but the watching line is said, no "error:", no hint.
        assert_eq!(code, Ok(130), "{args:?}: {stderr}");
        assert_eq!(stderr, said, "{args:?}");
        assert!(!first.contains("watching"), "stdout carries only the output: {first}");
    }
}
