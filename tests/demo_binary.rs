//! `druidctl demo`, the README's first command, run as the real binary: it succeeds, reports which keys
//! survived (written before the snapshot) and which were lost (after it), prints a timeline, and leaves no
//! etcd process behind. `demo --scenario space` shows writes refused under NOSPACE, the space-recovery runbook,
//! writes working again and the space freed per member. Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`).

use landscape::etcd::require_etcd;

/// Runs `druidctl demo ARGS` with its state under a fresh TMPDIR (at most 150 s); returns its stdout once it
/// succeeded and left nothing behind (no state, no etcd process).
fn run_demo(args: &[&str]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_druidctl"))
        .arg("demo")
        .args(args)
        .env("TMPDIR", tmp.path())
        .env("NO_COLOR", "1")
        .env("COLUMNS", "100")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read the output on threads so that a stuck demo is killed and its progress shown.
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out_thread = read(Box::new(child.stdout.take().unwrap()));
    let err_thread = read(Box::new(child.stderr.take().unwrap()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(150);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let stdout = out_thread.join().unwrap();
    let stderr = err_thread.join().unwrap();
    let status =
        status.unwrap_or_else(|| panic!("demo did not finish within 150 s; stdout:\n{stdout}\nstderr:\n{stderr}"));
    assert!(status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    // Every line fits the width.
    assert!(stdout.lines().all(|l| l.chars().count() <= 100), "wider than COLUMNS=100:\n{stdout}");
    // Everything lived under TMPDIR and is gone, processes included.
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "the demo removes its state: {left:?}");
    let leaked = std::process::Command::new("pgrep").args(["-f", &tmp.path().display().to_string()]).output().unwrap();
    assert!(String::from_utf8_lossy(&leaked.stdout).trim().is_empty(), "no etcd process left behind");
    stdout
}

#[test]
fn demo_recovers_the_snapshotted_keys_reports_the_lost_ones_and_cleans_up() {
    let Some(_) = require_etcd("druidctl demo") else { return };
    let stdout = run_demo(&["--keys-before", "12", "--keys-after", "4"]);
    assert!(stdout.contains("survived: 12/12 keys written before the snapshot"), "{stdout}");
    assert!(stdout.contains("lost:     4/4 keys written after it"), "{stdout}");
    // etcd's transient refusals (a second learner while one catches up) are said as what the run waits for, in
    // plain words.
    assert!(!stdout.contains("too many learner members") && !stdout.contains("grpc code"), "{stdout}");
    assert!(stdout.lines().any(|l| l.trim_start().starts_with("waiting: ")), "{stdout}");
    assert!(
        stdout.contains("Timeline:") && stdout.contains("DeletePersistentVolumeClaims") && stdout.contains("total"),
        "{stdout}"
    );
}

#[test]
fn demo_space_shows_writes_refused_then_recovered_and_the_space_freed() {
    let Some(_) = require_etcd("druidctl demo --scenario space") else { return };
    let stdout = run_demo(&["--scenario", "space"]);
    assert!(stdout.contains("✗ the write is refused: etcdserver: mvcc: database space exceeded"), "{stdout}");
    assert!(stdout.contains("etcd-druid reports Ready=True"), "etcd-druid stays green: {stdout}");
    assert!(stdout.contains("✓ VerifyWrite: done") && stdout.contains("✓ the write succeeded"), "{stdout}");
    let freed: Vec<&str> =
        stdout.lines().filter(|l| l.trim_start().starts_with("etcd-main-") && l.ends_with("freed)")).collect();
    assert_eq!(freed.len(), 3, "the space freed on every member: {stdout}");
    assert!(stdout.contains("Timeline:") && stdout.contains("recover (runbook)"), "{stdout}");
}

/// A reader that goes away (`druidctl demo | head -3`) does not stop the demo half-way with its playground up: it
/// runs to its end without a word, tears everything down, and exits 141 (docs/exit-codes.md), never a panic.
#[test]
fn a_closed_stdout_ends_the_demo_quietly_after_its_teardown() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_druidctl"))
        .args(["demo", "--simulated-members", "--keys-before", "3", "--keys-after", "1"])
        .env("TMPDIR", tmp.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "the demo removes its state: {left:?}");
}
