//! The runbook pages in docs/runbooks/ are generated from the runbook definitions (`druidctl generate`);
//! this test fails when the checked-in pages are stale (regenerate with `druidctl generate`).

#[test]
fn checked_in_runbook_pages_match_the_runbook_definitions() {
    let out = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_druidctl"))
        .args(["generate", "--out", out.path().to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let generated = out.path().join("docs/runbooks");
    let names: Vec<_> = std::fs::read_dir(&generated).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(names.len() >= 3, "an index and one page per runbook: {names:?}");
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/runbooks");
    for name in names {
        let want = std::fs::read_to_string(generated.join(&name)).unwrap();
        let have = std::fs::read_to_string(repo.join(&name)).unwrap_or_default();
        assert!(have == want, "docs/runbooks/{} is stale; run `druidctl generate`", name.to_string_lossy());
    }
    let checked_in = std::fs::read_dir(&repo).unwrap().count();
    assert_eq!(checked_in, std::fs::read_dir(&generated).unwrap().count(), "no stale extra pages in docs/runbooks");
}
