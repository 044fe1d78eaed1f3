//! Bad input of every kind ends in exactly one line on stderr, the documented exit code, and no change to the
//! cluster. Runs the real binary against the embedded API server over HTTP.

mod cli_support;

use cli_support::Fixture;

const USAGE: i32 = 2;
const REJECTED: i32 = 3;
const FORBIDDEN: i32 = 5;
const NOT_FOUND: i32 = 6;

struct Case {
    args: &'static [&'static str],
    code: i32,
    /// A fragment the one stderr line must contain.
    says: &'static str,
}

const CASES: &[Case] = &[
    Case { args: &["status", "--foo"], code: USAGE, says: "unexpected argument '--foo'" },
    Case { args: &["statuss"], code: USAGE, says: "unrecognized subcommand" },
    Case { args: &[], code: USAGE, says: "a command is required" },
    Case { args: &["-o", "bogus", "status"], code: USAGE, says: "invalid value 'bogus'" },
    Case { args: &["--color", "sometimes", "status"], code: USAGE, says: "invalid value 'sometimes'" },
    Case { args: &["status", "-A", "etcd-main"], code: USAGE, says: "--all-namespaces cannot be combined" },
    Case { args: &["status", "-l", "role=main", "etcd-main"], code: USAGE, says: "--selector cannot be combined" },
    Case { args: &["status", "-n", "shoot--b", "shoot--a/etcd-main"], code: USAGE, says: "but --namespace is" },
    Case { args: &["status", "-A", "-n", "shoot--a"], code: USAGE, says: "contradict" },
    Case { args: &["status", "Etcd_Main"], code: USAGE, says: "invalid etcd name" },
    Case { args: &["status", "shoot--a/"], code: USAGE, says: "invalid etcd name" },
    Case { args: &["status", "a/b/c"], code: USAGE, says: "invalid etcd name" },
    Case { args: &["status", "-n", "Not_A_Namespace"], code: USAGE, says: "invalid namespace" },
    Case { args: &["status", "-l", "role in main"], code: USAGE, says: "invalid label selector" },
    Case { args: &["--request-timeout", "forever", "status"], code: USAGE, says: "invalid duration" },
    Case { args: &["reconcile"], code: USAGE, says: "name the etcd" },
    Case { args: &["reconcile", "-A"], code: USAGE, says: "name the etcd" },
    Case { args: &["reconcile", "etcd-main", "--timeout", "5m"], code: USAGE, says: "--wait" },
    Case { args: &["reconcile", "etcd-main", "--wait", "--timeout", "soon"], code: USAGE, says: "invalid duration" },
    Case { args: &["suspend-reconcile"], code: USAGE, says: "name the etcd" },
    Case { args: &["list-resources"], code: USAGE, says: "expected an etcd name" },
    Case { args: &["list-resources", "etcd-main", "etcd-events"], code: USAGE, says: "exactly one" },
    Case { args: &["protection"], code: USAGE, says: "a command is required" },
    Case { args: &["protection", "toggle", "etcd-main"], code: USAGE, says: "unrecognized subcommand" },
    Case { args: &["completion", "tcsh"], code: USAGE, says: "invalid value 'tcsh'" },
    Case { args: &["install", "--print", "--dry-run"], code: USAGE, says: "cannot be used with" },
    Case {
        args: &["install", "--serve-image", "x", "--serve-namespace", "Bad_NS"],
        code: USAGE,
        says: "invalid --serve-namespace",
    },
    Case { args: &["--kubeconfig", "/nonexistent/config", "status"], code: USAGE, says: "cannot load kubeconfig" },
    Case { args: &["--context", "nope", "status"], code: NOT_FOUND, says: "context \"nope\" not found" },
    Case {
        args: &["status", "etcd-nope"],
        code: NOT_FOUND,
        says: "etcd \"etcd-nope\" not found in namespace \"shoot--a\"",
    },
    Case { args: &["status", "etcd-other"], code: NOT_FOUND, says: "did you mean -n shoot--b?" },
    Case {
        args: &["reconcile", "shoot--b/etcd-missing"],
        code: NOT_FOUND,
        says: "not found in namespace \"shoot--b\"",
    },
    Case { args: &["protection", "disable", "-l", "role=none"], code: NOT_FOUND, says: "not found" },
    Case { args: &["reconcile", "etcd-events"], code: REJECTED, says: "is suspended" },
    Case { args: &["reconcile", "etcd-main", "etcd-events"], code: REJECTED, says: "resume-reconcile" },
];

fn one_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr).to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "expected exactly one line on stderr, got {text:?}");
    assert!(lines[0].starts_with("error: "), "{text:?}");
    lines[0].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_fail_with_one_line_their_exit_code_and_no_change() {
    let fx = Fixture::start().await;
    assert!(CASES.len() >= 25);
    let writes_before = fx.writes();
    let etcds_before: Vec<_> = ["etcd-main", "etcd-events"]
        .iter()
        .map(|n| fx.server.get_object("druid.gardener.cloud/v1alpha1", "etcds", Some("shoot--a"), n).unwrap())
        .collect();
    let mut failures = Vec::new();
    for case in CASES {
        let out = fx.run(case.args).await;
        let code = out.status.code().unwrap_or(-1);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        let lines = stderr.lines().count();
        if code != case.code || lines != 1 || !stderr.contains(case.says) || !stderr.starts_with("error: ") {
            failures.push(format!(
                "{:?}: exit {code} (want {}), stderr {stderr:?} (want one line with {:?})",
                case.args, case.code, case.says
            ));
        }
        if !out.stdout.is_empty() {
            failures.push(format!("{:?}: printed to stdout: {:?}", case.args, String::from_utf8_lossy(&out.stdout)));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases wrong:\n{}", failures.len(), CASES.len(), failures.join("\n"));
    assert_eq!(fx.writes(), writes_before, "bad input must not change the cluster");
    for (before, name) in etcds_before.iter().zip(["etcd-main", "etcd-events"]) {
        let after = fx.server.get_object("druid.gardener.cloud/v1alpha1", "etcds", Some("shoot--a"), name).unwrap();
        assert_eq!(before["metadata"]["resourceVersion"], after["metadata"]["resourceVersion"], "{name} changed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_permission_is_told_forbidden_and_changes_nothing() {
    let fx = Fixture::start().await;
    let kc = fx.kubeconfig_for("intern");
    let writes_before = fx.writes();
    for args in [&["reconcile", "etcd-main"][..], &["status", "etcd-main"], &["protection", "disable", "etcd-main"]] {
        let out =
            cli_support::run_with(cli_support::bin(), args, &[("KUBECONFIG", kc.to_str().unwrap())], fx.dir.path())
                .await;
        let line = one_line(&out.stderr);
        assert_eq!(out.status.code(), Some(FORBIDDEN), "{args:?}: {line}");
        assert!(line.contains("forbidden"), "{line}");
    }
    assert_eq!(fx.writes(), writes_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_kubeconfig_at_all_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli_support::run_with(cli_support::bin(), &["status"], &[], dir.path()).await;
    let line = one_line(&out.stderr);
    assert_eq!(out.status.code(), Some(USAGE), "{line}");
    assert!(line.contains("no cluster configured"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_is_one_line_and_operation_failed() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let kc = dir.path().join("config");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{token: t}}\n"
        ),
    )
    .unwrap();
    let out =
        cli_support::run_with(cli_support::bin(), &["status"], &[("KUBECONFIG", kc.to_str().unwrap())], dir.path())
            .await;
    let line = one_line(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{line}");
    assert!(line.contains("cannot reach the API server"), "{line}");
}
