//! Snapshot tests of what people read at a terminal, at 80 and 120 columns (`COLUMNS`): `druidctl demo` (with
//! simulated members, so it needs no etcd binary), a runbook's `--plan`, and two refusals (a bad flag, an
//! unknown Etcd). The parts that change from run to run (times, task name suffixes, snapshot names,
//! revisions) are normalised; the `waiting: …` lines of the demo depend on timing, so they are checked (plain
//! words, within the width) and left out of the snapshot. At a (pseudo-)terminal the runbook's spinner line is
//! checked to fit the terminal's width.

use crate::cli_support;

use cli_support::{Fixture, run_with};

fn widest_line(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

/// Durations as `human_ms` prints them: `850ms`, `3.2s`, `12s`, `1m04s`.
const DURATION: &str = r"(\d+m\d{2}s|\d+(\.\d+)?(ms|s))";

/// The demo's output with what differs between runs replaced.
fn normalise_demo(text: &str) -> String {
    let re = |p: &str| regex::Regex::new(p).unwrap();
    let mut t = re(&format!(r"\[ *{DURATION}\]")).replace_all(text, "[     T]").to_string();
    // Timeline rows end in a right-aligned duration: T keeps the column.
    t = re(&format!(r"(?m)^(  [^ ].*?)( +)({DURATION})$"))
        .replace_all(&t, |c: &regex::Captures| format!("{}{}T", &c[1], " ".repeat(c[2].len() + c[3].len() - 1)))
        .to_string();
    t = re(DURATION).replace_all(&t, "T").to_string();
    t = re(r"quorumlossrecovery-[0-9a-z]+").replace_all(&t, "quorumlossrecovery-XXXXX").to_string();
    t = re(r"Full-\d+-\d+-\d+").replace_all(&t, "Full-START-REV-TIME").to_string();
    t = re(r"revision \d+").replace_all(&t, "revision N").to_string();
    t
}

async fn demo_at(columns: usize) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let cols = columns.to_string();
    let tmpdir = tmp.path().to_str().unwrap().to_string();
    let out = run_with(
        cli_support::bin(),
        &["demo", "--simulated-members", "--keys-before", "12", "--keys-after", "4"],
        &[("COLUMNS", &cols), ("TMPDIR", &tmpdir), ("NO_COLOR", "1")],
        tmp.path(),
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(widest_line(&stdout) <= columns, "a line is wider than {columns} columns:\n{stdout}");
    // The plan once; the runbook's own plan (its kubectl equivalents) not at all without --show-plan.
    assert_eq!(stdout.matches("Plan:").count(), 1, "{stdout}");
    assert!(!stdout.contains("$ kubectl") && !stdout.contains("What can be lost"), "{stdout}");
    // Each step's result once: no summary table, no per-step rows in the timeline.
    for step in ["SuspendDruid", "DeletePersistentVolumeClaims", "VerifyClusterFormed"] {
        assert_eq!(stdout.matches(&format!("✓ {step}: done in")).count(), 1, "{step}: {stdout}");
        assert_eq!(stdout.matches(step).count(), 2, "{step}: its start and its result only:\n{stdout}");
    }
    // The snapshot as a sentence, no JSON; no KUBECONFIG for a directory that is deleted.
    assert!(stdout.contains("✓ full snapshot taken, up to revision "), "{stdout}");
    assert!(!stdout.contains('{') && !stdout.contains("KUBECONFIG"), "{stdout}");
    assert!(!stdout.contains("too many learner members") && !stdout.contains("grpc code"), "{stdout}");
    assert!(std::fs::read_dir(tmp.path()).unwrap().next().is_none(), "the demo deletes its directory");
    let (waiting, rest): (Vec<&str>, Vec<&str>) = stdout.lines().partition(|l| l.trim_start().starts_with("waiting: "));
    assert!(!waiting.is_empty(), "the runbook waited for pods at least once: {stdout}");
    normalise_demo(&(rest.join("\n") + "\n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_at_80_columns() {
    insta::assert_snapshot!(demo_at(80).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_at_120_columns() {
    insta::assert_snapshot!(demo_at(120).await);
}

/// stdout, stderr and exit code of druidctl at `columns` against the fixture cluster.
async fn run_at(fx: &Fixture, columns: usize, args: &[&str]) -> (String, String, i32) {
    let cols = columns.to_string();
    let out = run_with(
        cli_support::bin(),
        args,
        &[("KUBECONFIG", fx.kubeconfig.to_str().unwrap()), ("COLUMNS", &cols), ("NO_COLOR", "1")],
        fx.dir.path(),
    )
    .await;
    (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
        out.status.code().unwrap_or(-1),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runbook_plan_at_80_and_120_columns() {
    let fx = Fixture::start().await;
    fx.server.register_crd_yaml(&serde_json::to_string(&druidctl::api::task::crd()).unwrap()).unwrap();
    let before = fx.writes();
    for columns in [80, 120] {
        let (stdout, stderr, code) =
            run_at(&fx, columns, &["runbook", "quorum-loss-recovery", "etcd-main", "--plan"]).await;
        assert_eq!(code, 0, "{stderr}");
        // Descriptions wrap to the width; only the kubectl equivalents (pasted as they are) and the verdict
        // (one sentence) may be longer.
        for l in stdout.lines() {
            let long = l.chars().count() > columns;
            assert!(!long || l.trim_start().starts_with("$ ") || l.starts_with("a run would"), "{l}\n{stdout}");
        }
        insta::assert_snapshot!(format!("runbook_plan_at_{columns}_columns"), stdout);
    }
    assert_eq!(fx.writes(), before, "a plan changes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_at_80_and_120_columns() {
    let fx = Fixture::start().await;
    for columns in [80, 120] {
        for (name, args, code) in
            [("bad_flag", &["status", "--bogus"][..], 2), ("unknown_etcd", &["status", "etcd-nope"][..], 6)]
        {
            let (stdout, stderr, got) = run_at(&fx, columns, args).await;
            assert_eq!(got, code, "{args:?}: {stderr}");
            assert!(stdout.is_empty(), "{args:?}: {stdout}");
            assert_eq!(stderr.lines().count(), 1, "one sentence: {stderr}");
            insta::assert_snapshot!(format!("error_{name}_at_{columns}_columns"), format!("exit {got}\n{stderr}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_spinner_at_a_terminal_fits_its_width() {
    // `script` (util-linux) gives the demo a pseudo-terminal, so the runbook draws its spinner.
    if std::process::Command::new("script").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "`script` (util-linux) is needed under CI");
        eprintln!("SKIPPED: `script` (util-linux) is not installed; the spinner at a terminal is not tested");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let tmpdir = tmp.path().to_str().unwrap().to_string();
    let command =
        format!("stty cols 60; {} demo --simulated-members --keys-before 3 --keys-after 1", cli_support::bin());
    let out = run_with(
        "script",
        &["-qec", &command, "/dev/null"],
        &[("COLUMNS", "60"), ("TMPDIR", &tmpdir), ("TERM", "xterm"), ("NO_COLOR", "1")],
        tmp.path(),
    )
    .await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let ansi = regex::Regex::new(r"\x1b\[[0-9;?]*[A-Za-z]").unwrap();
    // What the terminal shows: each redraw of the spinner (after `\r`) and each line, without escapes.
    let shown: Vec<String> = text.split(['\r', '\n']).map(|s| ansi.replace_all(s, "").trim_end().to_string()).collect();
    let spinner: Vec<&String> = shown.iter().filter(|s| s.contains(" — waiting: ")).collect();
    assert!(!spinner.is_empty(), "the spinner said what the step waits for:\n{text}");
    for s in &shown {
        assert!(s.chars().count() <= 60, "wider than the 60-column terminal: {s:?}");
    }
}
