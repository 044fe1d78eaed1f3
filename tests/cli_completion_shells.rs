//! Completion through zsh's and fish's own machinery, as tests/cli_completion_bash.rs does for bash.
//!
//! fish: the script of `druidctl completion fish` is sourced and `complete -C LINE` (fish's completion of a
//! command line, what TAB lists) prints the candidates. zsh: an interactive `zsh -f -i` runs in a pseudo-terminal
//! (zsh/zpty) with `compinit`, the script of `druidctl completion zsh` and a key bound to a completion widget that
//! runs zsh's `_main_complete`; `compadd` is wrapped to record the matches it adds (with their `-S` suffix), and
//! a `comppostfuncs` hook says when completion has finished. The line is typed and the key pressed, as a user
//! would.
//!
//! Under CI (CI set) a missing zsh or fish fails the test (scripts/test.sh installs both); elsewhere the test
//! says why it did not run and returns.

use crate::cli_support;

use std::path::Path;

use cli_support::Fixture;

/// Whether `shell` can run; without it, fails under CI and otherwise prints why the test returns early.
fn available(shell: &str) -> bool {
    let ok = std::process::Command::new(shell).args(["-c", "exit 0"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{shell} is not installed (scripts/test.sh installs it); CI needs it"
        );
        eprintln!("SKIPPED: {shell} is not installed (apt-get install {shell}); completion through {shell} not tested");
    }
    ok
}

fn path_with_binary() -> String {
    let bin_dir = Path::new(cli_support::bin()).parent().unwrap().to_path_buf();
    format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default())
}

async fn run_shell(fx: &Fixture, program: &str, args: Vec<String>) -> std::process::Output {
    let (program, path) = (program.to_string(), path_with_binary());
    let kubeconfig = fx.kubeconfig.to_str().unwrap().to_string();
    let home = fx.dir.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(&program)
            .args(&args)
            .env("PATH", path)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("KUBECONFIG", kubeconfig)
            .env("TERM", "dumb")
            .env_remove("COMPLETE")
            .env_remove("_CLAP_COMPLETE_INDEX")
            .output()
            .expect("run shell")
    })
    .await
    .unwrap()
}

/// fish's candidates for `line` (the cursor at its end), values only, sorted.
async fn fish(fx: &Fixture, line: &str) -> Vec<String> {
    let script = "druidctl completion fish | source; or exit 9; complete -C $argv[1]";
    let out = run_shell(fx, "fish", vec!["--no-config".into(), "-c".into(), script.into(), line.into()]).await;
    assert!(out.status.success(), "fish {line:?}: {}", String::from_utf8_lossy(&out.stderr));
    let mut values: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('\t').next().unwrap_or_default().to_string())
        .filter(|v| !v.is_empty() && !v.starts_with('-'))
        .collect();
    values.sort();
    values.dedup();
    values
}

/// Drives an interactive zsh in a pseudo-terminal: types the line and presses a key bound to completion.
const ZSH_CAPTURE: &str = r#"
zmodload zsh/zpty || { print -u2 "zsh/zpty is not available"; exit 3 }
out=$1 line=$2
: >| $out
zpty z 'zsh -f -i'
zpty -w z "PS1='' ; autoload -U compinit && compinit -u"
zpty -w z "source <(druidctl completion zsh) || print -r -- FAILED-SOURCE >> ${(q)out}"
zpty -w z "compadd() { local -a __hits __suf; zparseopts -E -a __ign S:=__suf; builtin compadd -A __hits \"\$@\"; local h; for h in \$__hits; do print -r -- \"VALUE \$h\${__suf[2]}\" >> ${(q)out}; done; builtin compadd \"\$@\" }"
zpty -w z "_capture_done() { print -r -- DONE >> ${(q)out} }"
zpty -w z "_capture() { comppostfuncs=(_capture_done); _main_complete }"
zpty -w z "zle -C capture-complete complete-word _capture; bindkey '^T' capture-complete"
zpty -w -n z "$line"$'\024'
integer i
for (( i = 0; i < 300; i++ )); do
  while zpty -rt z chunk 2>/dev/null; do :; done
  grep -q '^DONE$' $out && break
  sleep 0.1
done
zpty -d z
grep -q '^DONE$' $out || { print -u2 "zsh did not finish completing ${(q)line}"; exit 4 }
"#;

/// zsh's candidates for `line` (the cursor at its end), values with their suffix, sorted; flags dropped.
async fn zsh(fx: &Fixture, line: &str) -> Vec<String> {
    let script = fx.dir.path().join("capture.zsh");
    std::fs::write(&script, ZSH_CAPTURE).unwrap();
    let out_file = fx.dir.path().join("zsh-candidates");
    let args = vec!["-f".into(), script.to_str().unwrap().into(), out_file.to_str().unwrap().into(), line.into()];
    let out = run_shell(fx, "zsh", args).await;
    assert!(out.status.success(), "zsh {line:?}: {}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&out_file).unwrap();
    assert!(!text.contains("FAILED-SOURCE"), "sourcing `druidctl completion zsh` failed");
    let mut values: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("VALUE "))
        .filter(|v| !v.starts_with('-'))
        .map(String::from)
        .collect();
    values.sort();
    values.dedup();
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fish_completes_subcommands_etcds_namespaces_and_members() {
    if !available("fish") {
        return;
    }
    let fx = Fixture::start().await;
    assert_eq!(fish(&fx, "druidctl sta").await, ["status"]);
    let runbooks = fish(&fx, "druidctl runbook ").await;
    for rb in ["quorum-loss-recovery", "member-restore", "cert-renewal", "machine-replacement"] {
        assert!(runbooks.contains(&rb.to_string()), "{rb} missing from {runbooks:?}");
    }
    assert_eq!(fish(&fx, "druidctl status etcd-").await, ["etcd-events", "etcd-main"]);
    assert_eq!(fish(&fx, "druidctl status shoot").await, ["shoot--a/", "shoot--b/"]);
    assert_eq!(fish(&fx, "druidctl reconcile shoot--b/").await, ["shoot--b/etcd-other"]);
    assert_eq!(fish(&fx, "druidctl status -n shoot--b etcd-").await, ["etcd-other"]);
    assert_eq!(fish(&fx, "druidctl status -n shoot").await, ["shoot--a", "shoot--b"]);
    assert_eq!(fish(&fx, "druidctl status -A shoot--a/").await, ["shoot--a/etcd-events", "shoot--a/etcd-main"]);
    assert_eq!(
        fish(&fx, "druidctl runbook member-restore shoot--b/etcd-other ").await,
        ["etcd-other-0", "etcd-other-1", "etcd-other-2"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zsh_completes_subcommands_etcds_namespaces_and_members() {
    if !available("zsh") {
        return;
    }
    let fx = Fixture::start().await;
    assert_eq!(zsh(&fx, "druidctl sta").await, ["status"]);
    assert_eq!(zsh(&fx, "druidctl runbook m").await, ["machine-replacement", "member-restore"]);
    assert_eq!(zsh(&fx, "druidctl status etcd-").await, ["etcd-events", "etcd-main"]);
    // Namespaces as NAMESPACE/ (zsh adds the `/` as a suffix, with no space after it).
    assert_eq!(zsh(&fx, "druidctl status shoot").await, ["shoot--a/", "shoot--b/"]);
    assert_eq!(zsh(&fx, "druidctl reconcile shoot--b/").await, ["shoot--b/etcd-other"]);
    assert_eq!(zsh(&fx, "druidctl status --namespace shoot--b etcd-").await, ["etcd-other"]);
    assert_eq!(zsh(&fx, "druidctl status -n shoot").await, ["shoot--a", "shoot--b"]);
    assert_eq!(
        zsh(&fx, "druidctl runbook member-restore etcd-main etcd-main-").await,
        ["etcd-main-0", "etcd-main-1", "etcd-main-2"]
    );
}
