//! Bad input of every kind ends in exactly one line on stderr, the documented exit code, and no change to the
//! cluster. Runs the real binary against the embedded API server over HTTP.

use crate::cli_support;

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
    // What kube-apiserver refuses (apimachinery `labels.Parse`) is refused before anything is sent.
    Case { args: &["status", "-l", "role=-main"], code: USAGE, says: "a valid label must be an empty string" },
    Case { args: &["status", "-l", "x/y/z=a"], code: USAGE, says: "a qualified name must be" },
    Case { args: &["status", "-l", "size>big"], code: USAGE, says: "the value must be an integer" },
    Case { args: &["status", "-l", "a,"], code: USAGE, says: "expected: identifier after ','" },
    Case { args: &["reconcile", "-l", "!role=main"], code: USAGE, says: "expected: ',' or 'end of string'" },
    Case { args: &["status", "-l", ""], code: USAGE, says: "empty" },
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
    // `()` is the empty value, as the API server parses it: sent, and nothing has `role=""`.
    Case { args: &["protection", "disable", "-l", "role in ()"], code: NOT_FOUND, says: "not found" },
    // A member is named like any resource: one that does not exist is not found, before any precondition.
    Case {
        args: &["runbook", "member-restore", "etcd-main", "etcd-main-7", "--plan"],
        code: NOT_FOUND,
        says: "member \"etcd-main-7\" not found in namespace \"shoot--a\" (the members of etcd etcd-main are",
    },
    Case { args: &["reconcile", "etcd-events"], code: REJECTED, says: "is suspended" },
    Case { args: &["reconcile", "etcd-main", "etcd-events"], code: REJECTED, says: "resume-reconcile" },
    // Durations: no panic on overflow, a range checked at parse time.
    Case { args: &["--request-timeout", "99999999999999999999999h", "status"], code: USAGE, says: "invalid value" },
    Case { args: &["--request-timeout", "1e400s", "status"], code: USAGE, says: "invalid value" },
    Case { args: &["--request-timeout", "99999999999999999999", "status"], code: USAGE, says: "invalid value" },
    Case { args: &["--request-timeout", "-5s", "status"], code: USAGE, says: "unexpected argument '-5'" },
    Case { args: &["--request-timeout=-5s", "status"], code: USAGE, says: "invalid value" },
    Case { args: &["--request-timeout", "", "status"], code: USAGE, says: "invalid value" },
    Case { args: &["--request-timeout", "9000h", "status"], code: USAGE, says: "too long" },
    Case { args: &["status", "--interval", "0"], code: USAGE, says: "out of range" },
    Case { args: &["status", "-w", "--interval", "0ms"], code: USAGE, says: "out of range" },
    Case { args: &["status", "--interval", "2h"], code: USAGE, says: "out of range" },
    Case { args: &["reconcile", "etcd-main", "--wait", "--timeout", "0s"], code: USAGE, says: "out of range" },
    Case { args: &["reconcile", "etcd-main", "--wait", "--timeout", "48h"], code: USAGE, says: "out of range" },
    Case { args: &["install", "--timeout", "0s"], code: USAGE, says: "out of range" },
    Case { args: &["task", "watch", "t-1", "--timeout", "0s"], code: USAGE, says: "out of range" },
    Case {
        args: &["task", "create", "OnDemandSnapshotTask", "--etcd", "etcd-main", "--timeout", "0s"],
        code: USAGE,
        says: "out of range",
    },
    Case {
        args: &["task", "create", "OnDemandSnapshotTask", "--etcd", "etcd-main", "--timeout", "8d"],
        code: USAGE,
        says: "invalid value",
    },
    Case { args: &["machine", "delete", "m-1", "--wait", "--timeout", "0s"], code: USAGE, says: "out of range" },
    Case { args: &["renew", "etcd-server", "--wait", "--timeout", "0s"], code: USAGE, says: "out of range" },
    Case { args: &["serve", "--lease-duration", "0s"], code: USAGE, says: "out of range" },
    Case { args: &["serve", "--lease-duration", "1ms"], code: USAGE, says: "out of range" },
    Case { args: &["serve", "--lease-duration", "2h"], code: USAGE, says: "out of range" },
    Case { args: &["playground", "up", "--timeout", "0s"], code: USAGE, says: "out of range" },
    Case { args: &["playground", "break", "member-down", "--down-for", "0s"], code: USAGE, says: "out of range" },
    // Counts and sizes.
    Case { args: &["serve", "--workers", "0"], code: USAGE, says: "invalid value '0'" },
    Case { args: &["serve", "--workers", "-1"], code: USAGE, says: "unexpected argument '-1'" },
    Case { args: &["serve", "--workers", "1000"], code: USAGE, says: "invalid value '1000'" },
    Case { args: &["serve", "--default-ttl", "-1"], code: USAGE, says: "unexpected argument '-1'" },
    Case { args: &["serve", "--default-ttl=-1"], code: USAGE, says: "invalid value '-1'" },
    Case { args: &["serve", "--metrics-addr", "nowhere"], code: USAGE, says: "invalid value 'nowhere'" },
    Case { args: &["serve", "--identity", ""], code: USAGE, says: "must not be empty" },
    Case { args: &["serve", "--leader-election-namespace", "Bad_NS"], code: USAGE, says: "invalid namespace" },
    Case { args: &["serve", "--leader-elect", "maybe"], code: USAGE, says: "invalid value 'maybe'" },
    Case { args: &["serve", "--log-format", "xml"], code: USAGE, says: "invalid value 'xml'" },
    Case { args: &["playground", "up", "--members", "0"], code: USAGE, says: "invalid value '0'" },
    Case { args: &["playground", "up", "--members=-1"], code: USAGE, says: "invalid value '-1'" },
    Case { args: &["playground", "up", "--members", "99"], code: USAGE, says: "invalid value '99'" },
    Case { args: &["playground", "up", "--etcds", "0"], code: USAGE, says: "invalid value '0'" },
    Case { args: &["playground", "break", "member-down", "--member", "99"], code: USAGE, says: "invalid value '99'" },
    Case { args: &["playground", "break", "member-down", "--in", "Bad_NS"], code: USAGE, says: "invalid namespace" },
    Case { args: &["demo", "--keys-before", "0"], code: USAGE, says: "invalid value '0'" },
    Case { args: &["demo", "--keys-after=-1"], code: USAGE, says: "invalid value '-1'" },
    Case {
        args: &["task", "create", "OnDemandSnapshotTask", "--etcd", "etcd-main", "--ttl=-1"],
        code: USAGE,
        says: "invalid value '-1'",
    },
    Case {
        args: &["task", "create", "OnDemandSnapshotTask", "--etcd", "etcd-main", "--ttl", "99999999999"],
        code: USAGE,
        says: "invalid value",
    },
    Case { args: &["snapshot", "full", "etcd-main", "--ttl", "x"], code: USAGE, says: "invalid value 'x'" },
    Case {
        args: &["copy-backups", "etcd-main", "--source", "S3:a/p", "--target", "S3:b/p", "--max-backups", "0"],
        code: USAGE,
        says: "invalid value '0'",
    },
    Case {
        args: &["copy-backups", "etcd-main", "--source", "S3:a/p", "--target", "S3:b/p", "--max-backup-age", "0"],
        code: USAGE,
        says: "invalid value '0'",
    },
    Case {
        args: &["copy-backups", "etcd-main", "--source", "S3:a/p", "--target", "S3:b/p", "--max-backups=-1"],
        code: USAGE,
        says: "invalid value '-1'",
    },
    Case { args: &["install", "--serve-image", ""], code: USAGE, says: "must not be empty" },
    Case { args: &["install", "--serve-image", "  "], code: USAGE, says: "must not be empty" },
    Case { args: &["install", "--serve-namespace", "x"], code: USAGE, says: "--serve-image" },
    // Contradictory flags.
    Case { args: &["snapshot", "full", "etcd-main", "--local", "--no-wait"], code: USAGE, says: "cannot be used with" },
    Case { args: &["compact", "etcd-main", "--local", "--no-wait"], code: USAGE, says: "cannot be used with" },
    Case {
        args: &["maintenance", "etcd-main", "--compaction", "--local", "--no-wait"],
        code: USAGE,
        says: "cannot be used with",
    },
    Case { args: &["snapshot", "full", "etcd-main", "--wait", "--no-wait"], code: USAGE, says: "cannot be used with" },
    Case {
        args: &["copy-backups", "etcd-main", "--source", "S3:b/p", "--target", "S3:b/p"],
        code: USAGE,
        says: "the same store",
    },
    Case { args: &["copy-backups", "etcd-main", "--source", "b/p", "--target", "S3:b/q"], code: USAGE, says: "source" },
    Case {
        args: &["runbook", "quorum-loss-recovery", "etcd-main", "--plan", "--resume"],
        code: USAGE,
        says: "cannot be used with",
    },
    Case {
        args: &["runbook", "quorum-loss-recovery", "etcd-main", "--plan", "--from-step", "X"],
        code: USAGE,
        says: "cannot be used with",
    },
    Case {
        args: &["runbook", "machine-replacement", "m-1", "--node", "n-1"],
        code: USAGE,
        says: "cannot be used with",
    },
    Case { args: &["machine", "delete", "m-1", "--node", "n-1"], code: USAGE, says: "cannot be used with" },
    Case { args: &["machine", "delete", "m-1", "--yes"], code: USAGE, says: "--force" },
    Case { args: &["machine", "delete", "m-1", "--timeout", "5m"], code: USAGE, says: "--wait" },
    Case { args: &["renew", "--etcd", "etcd-main", "--all"], code: USAGE, says: "cannot be used with" },
    Case { args: &["renew", "etcd-server", "--etcd", "etcd-main"], code: USAGE, says: "cannot be used with" },
    Case { args: &["cert", "status", "etcd-server", "--etcd", "etcd-main"], code: USAGE, says: "cannot be used with" },
    Case { args: &["task", "watch", "-A", "t-1"], code: USAGE, says: "--all-namespaces cannot be combined" },
    // Names are Kubernetes names, checked before any request.
    Case { args: &["-n", "a/b", "status"], code: USAGE, says: "invalid namespace" },
    Case { args: &["-n", "x;y", "status"], code: USAGE, says: "invalid namespace" },
    Case { args: &["-n", "", "status"], code: USAGE, says: "invalid namespace" },
    Case { args: &["status", "x;y"], code: USAGE, says: "invalid etcd name" },
    Case { args: &["status", "etcd..main"], code: USAGE, says: "invalid etcd name" },
    Case { args: &["list-resources", "x;y"], code: USAGE, says: "invalid etcd name" },
    Case { args: &["reconcile", "a/b/c"], code: USAGE, says: "invalid etcd name" },
    Case { args: &["suspend-reconcile", "x;y"], code: USAGE, says: "invalid etcd name" },
    Case { args: &["resume-reconcile", "Etcd"], code: USAGE, says: "invalid etcd name" },
    Case { args: &["protection", "disable", "x;y"], code: USAGE, says: "invalid etcd name" },
    Case { args: &["snapshot", "full", "a/b/c"], code: USAGE, says: "invalid" },
    Case { args: &["snapshot", "full", "x;y"], code: USAGE, says: "invalid name" },
    Case { args: &["compact", "Etcd_Main"], code: USAGE, says: "invalid name" },
    Case { args: &["maintenance", "x;y", "--compaction"], code: USAGE, says: "invalid name" },
    Case {
        args: &["copy-backups", "x;y", "--source", "S3:a/p", "--target", "S3:b/p"],
        code: USAGE,
        says: "invalid name",
    },
    Case {
        args: &[
            "copy-backups",
            "etcd-main",
            "--source",
            "S3:a/p",
            "--target",
            "S3:b/p",
            "--source-secret",
            "Bad_Secret",
        ],
        code: USAGE,
        says: "invalid name",
    },
    Case { args: &["task", "create", "OnDemandSnapshotTask", "--etcd", "a/b/c"], code: USAGE, says: "invalid name" },
    Case { args: &["task", "list", "--etcd", "x;y"], code: USAGE, says: "invalid name" },
    Case { args: &["task", "get", "x;y"], code: USAGE, says: "invalid name" },
    Case { args: &["task", "describe", "A_B"], code: USAGE, says: "invalid name" },
    Case { args: &["task", "watch", "a/b"], code: USAGE, says: "invalid name" },
    Case { args: &["task", "delete", "x;y"], code: USAGE, says: "invalid name" },
    Case { args: &["runbook", "quorum-loss-recovery", "x;y"], code: USAGE, says: "invalid name" },
    Case { args: &["runbook", "quorum-loss-recovery", "a/b/c"], code: USAGE, says: "invalid name" },
    Case { args: &["runbook", "quorum-loss-recovery", "Bad_NS/etcd-main"], code: USAGE, says: "invalid namespace" },
    Case { args: &["runbook", "member-restore", "etcd-main", "Bad_Member"], code: USAGE, says: "invalid name" },
    Case { args: &["runbook", "cert-renewal", "Etcd"], code: USAGE, says: "invalid name" },
    Case { args: &["runbook", "machine-replacement", "x;y"], code: USAGE, says: "invalid name" },
    Case { args: &["runbook", "machine-replacement", "--node", "a/b"], code: USAGE, says: "invalid name" },
    Case { args: &["runbook", "machine-replacement", "m-1", "--etcd", "x;y"], code: USAGE, says: "invalid name" },
    Case { args: &["runbook", "abort", "x;y"], code: USAGE, says: "invalid name" },
    Case { args: &["renew", "x;y"], code: USAGE, says: "invalid certificate name" },
    Case { args: &["renew", "--etcd", "a/b/c"], code: USAGE, says: "invalid name" },
    Case { args: &["cert", "status", "x;y"], code: USAGE, says: "invalid certificate name" },
    Case { args: &["cert", "status", "--etcd", "x;y"], code: USAGE, says: "invalid name" },
    Case { args: &["machine", "delete", "x;y"], code: USAGE, says: "invalid name" },
    Case { args: &["machine", "delete", "--node", "Bad_Node"], code: USAGE, says: "invalid name" },
    // Missing arguments and unknown commands.
    Case { args: &["task"], code: USAGE, says: "a command is required" },
    Case { args: &["task", "get"], code: USAGE, says: "required" },
    Case { args: &["task", "delete"], code: USAGE, says: "required" },
    Case { args: &["task", "create"], code: USAGE, says: "required" },
    Case { args: &["task", "create", "OnDemandSnapshotTask"], code: USAGE, says: "--etcd" },
    Case { args: &["task", "list", "extra"], code: USAGE, says: "unexpected argument 'extra'" },
    Case { args: &["runbook"], code: USAGE, says: "a command is required" },
    Case { args: &["runbook", "nonexistent"], code: USAGE, says: "unrecognized subcommand" },
    Case { args: &["runbook", "quorum-loss-recovery"], code: USAGE, says: "required" },
    Case { args: &["runbook", "member-restore", "etcd-main"], code: USAGE, says: "required" },
    Case { args: &["runbook", "machine-replacement"], code: USAGE, says: "required" },
    Case { args: &["runbook", "abort"], code: USAGE, says: "required" },
    Case { args: &["machine", "delete"], code: USAGE, says: "required" },
    Case { args: &["snapshot", "weekly", "etcd-main"], code: USAGE, says: "invalid value 'weekly'" },
    Case { args: &["completion"], code: USAGE, says: "required" },
    Case { args: &["version", "--foo"], code: USAGE, says: "unexpected argument '--foo'" },
    Case { args: &["playground", "bogus"], code: USAGE, says: "unrecognized subcommand" },
    // Things that do not exist.
    Case { args: &["suspend-reconcile", "etcd-nope"], code: NOT_FOUND, says: "not found" },
    Case { args: &["protection", "enable", "etcd-nope"], code: NOT_FOUND, says: "not found" },
    Case { args: &["task", "get", "no-such-task"], code: NOT_FOUND, says: "not found" },
    Case { args: &["task", "describe", "no-such-task"], code: NOT_FOUND, says: "not found" },
    Case { args: &["task", "watch", "no-such-task"], code: NOT_FOUND, says: "\"no-such-task\" not found" },
    Case { args: &["task", "delete", "no-such-task"], code: NOT_FOUND, says: "not found" },
    Case { args: &["runbook", "quorum-loss-recovery", "etcd-nope", "--plan"], code: NOT_FOUND, says: "not found" },
    Case { args: &["runbook", "abort", "etcd-nope"], code: NOT_FOUND, says: "not found" },
    // Refused by a safety check.
    Case { args: &["runbook", "abort", "etcd-main"], code: REJECTED, says: "nothing to abort" },
    Case { args: &["runbook", "cert-renewal", "etcd-main", "--resume"], code: REJECTED, says: "no unfinished" },
];

/// A kubeconfig in `dir` whose one context points at `http://127.0.0.1:<port>`.
fn kubeconfig_for(dir: &std::path::Path, port: u16) -> std::path::PathBuf {
    let kc = dir.join("config");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{token: t}}\n"
        ),
    )
    .unwrap();
    kc
}

/// `druidctl --request-timeout <timeout> status` against the server at `port`, with a kubeconfig in `dir`.
async fn status_with_timeout(dir: &std::path::Path, port: u16, timeout: &str) -> std::process::Output {
    let kc = kubeconfig_for(dir, port);
    cli_support::run_with(
        cli_support::bin(),
        &["--request-timeout", timeout, "status"],
        &[("KUBECONFIG", kc.to_str().unwrap())],
        dir,
    )
    .await
}

/// The port of a server that accepts connections and never answers (held open for the test's process).
fn silent_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming().flatten() {
            held.push(c);
        }
    });
    port
}

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
    fx.server.register_crd_yaml(&serde_json::to_string(&druidctl::api::task::crd()).unwrap()).expect("task CRD");
    assert!(CASES.len() >= 100, "{} cases", CASES.len());
    fx.server.request_log().clear();
    let writes_before = fx.writes();
    let version_before = fx.server.resource_version();
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
    // A delete of a task that does not exist is sent and answered 404: refused writes change nothing.
    let applied = |w: &Vec<String>| w.iter().filter(|w| !w.ends_with(" 404")).cloned().collect::<Vec<_>>();
    assert_eq!(applied(&fx.writes()), applied(&writes_before), "bad input must not change the cluster");
    assert_eq!(fx.server.resource_version(), version_before, "no object changed (the store's resourceVersion)");
    // Every request the bad inputs made carried druidctl's User-Agent, as kubectl's carry kubectl's (the
    // long-running watches name themselves: `druidctl-task-watch`, `druidctl-status-watch`).
    let want: Vec<String> = ["druidctl", "druidctl-task-watch", "druidctl-status-watch"]
        .iter()
        .map(|p| format!("{p}/{} (", env!("CARGO_PKG_VERSION")))
        .collect();
    let agents: std::collections::BTreeSet<String> =
        fx.server.request_log().records().into_iter().map(|r| r.user_agent).collect();
    assert!(agents.iter().all(|a| want.iter().any(|w| a.starts_with(w)) && a.ends_with(')')), "{agents:?}");
    assert!(agents.iter().any(|a| a.starts_with(&want[0])), "{agents:?}");
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
    let kc = kubeconfig_for(dir.path(), port);
    let out =
        cli_support::run_with(cli_support::bin(), &["status"], &[("KUBECONFIG", kc.to_str().unwrap())], dir.path())
            .await;
    let line = one_line(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{line}");
    assert_eq!(
        line,
        format!("error: cannot reach http://127.0.0.1:{port}: connection refused"),
        "one sentence for a person"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_times_out_naming_the_timeout_in_force() {
    let dir = tempfile::tempdir().unwrap();
    let port = silent_server();
    let out = status_with_timeout(dir.path(), port, "1s").await;
    let line = one_line(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{line}");
    assert_eq!(
        line,
        format!("error: timed out after 1s waiting for http://127.0.0.1:{port} to answer (--request-timeout)")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_is_named_on_stderr_after_a_few_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let port = silent_server();
    let started = std::time::Instant::now();
    let out = status_with_timeout(dir.path(), port, "7s").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(started.elapsed() >= std::time::Duration::from_secs(7), "held until the timeout");
    assert_eq!(
        lines,
        [
            format!("note: http://127.0.0.1:{port} has not answered after 5s; waiting up to 7s (--request-timeout)"),
            format!("error: timed out after 7s waiting for http://127.0.0.1:{port} to answer (--request-timeout)"),
        ],
        "the silent server is named while the command still waits, once"
    );
}
