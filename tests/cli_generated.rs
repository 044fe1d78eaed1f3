//! The checked-in generated artifacts (completions/, man/, deploy/, docs/exit-codes.md) match what the binary
//! generates now. When this fails, run `cargo run -- generate` and commit the result.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn files_under(root: &Path, dirs: &[&str]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for d in dirs {
        if let Ok(entries) = std::fs::read_dir(root.join(d)) {
            for e in entries.flatten() {
                out.insert(format!("{d}/{}", e.file_name().to_string_lossy()));
            }
        }
    }
    out
}

#[test]
fn generated_artifacts_are_up_to_date() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_druidctl")).args(["generate", "--out"]).arg(tmp.path()).output().unwrap();
    assert!(
        out.status.success(),
        "{:?} {} {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = files_under(tmp.path(), &["completions", "man", "deploy"]);
    assert!(generated.len() >= 15, "{generated:?}");
    let mut stale = Vec::new();
    for f in generated.iter().chain(std::iter::once(&"docs/exit-codes.md".to_string())) {
        let want = std::fs::read(tmp.path().join(f)).unwrap();
        match std::fs::read(repo.join(f)) {
            Ok(have) if have == want => {}
            Ok(_) => stale.push(format!("{f} differs")),
            Err(_) => stale.push(format!("{f} missing")),
        }
    }
    for extra in files_under(repo, &["completions", "man", "deploy"]).difference(&generated) {
        stale.push(format!("{extra} is no longer generated"));
    }
    assert!(stale.is_empty(), "generated files are stale (run `cargo run -- generate`): {stale:#?}");
}

#[test]
fn deploy_crd_is_the_task_crd_with_both_owner_spellings() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let crd = std::fs::read_to_string(repo.join("deploy/crd.yaml")).unwrap();
    assert!(crd.contains("kind: EtcdOperatorTask") && crd.contains("- etask"));
    assert!(crd.contains("ownerEtcdRefrence:") && crd.contains("ownerEtcdReference:"));
}
