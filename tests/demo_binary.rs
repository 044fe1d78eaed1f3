//! `druidctl demo`, the README's first command, run as the real binary: it succeeds, reports which keys
//! survived (written before the snapshot) and which were lost (after it), prints a timeline, and leaves no
//! etcd process behind. Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`).

use druidctl::sim::etcd::require_etcd;

#[test]
fn demo_recovers_the_snapshotted_keys_reports_the_lost_ones_and_cleans_up() {
    let Some(_) = require_etcd("druidctl demo") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_druidctl"))
        .args(["demo", "--keys-before", "12", "--keys-after", "4"])
        .env("TMPDIR", tmp.path())
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("survived: 12/12 keys written before the snapshot"), "{stdout}");
    assert!(stdout.contains("lost:     4/4 keys written after the snapshot"), "{stdout}");
    assert!(stdout.contains("Timeline:") && stdout.contains("DeletePersistentVolumeClaims") && stdout.contains("total"), "{stdout}");
    // Everything lived under TMPDIR and is gone, processes included.
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "the demo removes its state: {left:?}");
    let leaked = std::process::Command::new("pgrep").args(["-f", &tmp.path().display().to_string()]).output().unwrap();
    assert!(String::from_utf8_lossy(&leaked.stdout).trim().is_empty(), "no etcd process left behind");
}
