//! The krew release layout: `scripts/krew-package.sh` packs the built binary as `kubectl-druid` with the
//! LICENSE and writes a Plugin manifest that krew accepts (the rules of krew's
//! `internal/index/validation/validate.go`) and that matches what `install.sh` produces.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_krew_package_and_manifest_match_the_plugin_install_sh_produces() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(root().join("scripts/krew-package.sh"))
        .args(["--binary", env!("CARGO_BIN_EXE_druidctl"), "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    assert!(run.status.success(), "krew-package.sh: {}", String::from_utf8_lossy(&run.stderr));

    // The manifest: the only apiVersion krew reads, a name equal to the file name, a "v"-prefixed semver equal to
    // the crate's version, non-empty os/arch-only selectors, a lowercase sha256 of the archive it names.
    let manifest_path = out.path().join("druid.yaml");
    let manifest: Value = serde_saphyr::from_str(&std::fs::read_to_string(&manifest_path).unwrap()).unwrap();
    assert_eq!(manifest["apiVersion"], "krew.googlecontainertools.github.com/v1alpha2");
    assert_eq!(manifest["kind"], "Plugin");
    assert_eq!(manifest["metadata"]["name"].as_str(), manifest_path.file_stem().and_then(|s| s.to_str()));
    assert_eq!(manifest["spec"]["version"], format!("v{}", env!("CARGO_PKG_VERSION")));
    let short = manifest["spec"]["shortDescription"].as_str().unwrap();
    assert!(!short.is_empty() && !short.contains('\n'));
    assert!(manifest["spec"]["description"].as_str().is_some_and(|d| !d.trim().is_empty()));
    let platforms = manifest["spec"]["platforms"].as_array().unwrap();
    assert_eq!(platforms.len(), 1, "one archive was built");
    let p = &platforms[0];
    let labels = p["selector"]["matchLabels"].as_object().unwrap();
    assert_eq!(labels.keys().map(String::as_str).collect::<Vec<_>>(), ["arch", "os"]);
    let (os, arch) = (labels["os"].as_str().unwrap(), labels["arch"].as_str().unwrap());
    assert_eq!(os, "linux");
    assert!(["amd64", "arm64"].contains(&arch));
    let archive_name = format!("kubectl-druid_v{}_{os}_{arch}.tar.gz", env!("CARGO_PKG_VERSION"));
    assert!(p["uri"].as_str().unwrap().ends_with(&format!("/{archive_name}")), "{}", p["uri"]);
    let sha = p["sha256"].as_str().unwrap();
    assert!(sha.len() == 64 && sha.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)), "{sha}");
    let archive = out.path().join(&archive_name);
    let sum = Command::new("sha256sum").arg(&archive).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&sum.stdout).split_whitespace().next(), Some(sha));

    // krew links `kubectl-<plugin name>` to `bin`; install.sh links the same name, so both installs are alike.
    let bin = p["bin"].as_str().unwrap();
    assert_eq!(bin, format!("kubectl-{}", manifest["metadata"]["name"].as_str().unwrap()));
    let install_sh = std::fs::read_to_string(root().join("install.sh")).unwrap();
    assert!(install_sh.contains(&format!("ln -sf druidctl \"$BIN/{bin}\"")), "install.sh links another name");

    // The archive holds exactly what `files` copies, and the binary runs as the plugin.
    let unpacked = tempfile::tempdir().unwrap();
    let tar = Command::new("tar").arg("-xzf").arg(&archive).arg("-C").arg(unpacked.path()).status().unwrap();
    assert!(tar.success());
    let mut entries: Vec<String> = std::fs::read_dir(unpacked.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    let mut from: Vec<String> =
        p["files"].as_array().unwrap().iter().map(|f| f["from"].as_str().unwrap().to_string()).collect();
    from.sort();
    assert_eq!(entries, from);
    assert_eq!(entries, ["LICENSE", "kubectl-druid"]);
    let version = Command::new(unpacked.path().join(bin)).arg("version").output().unwrap();
    assert!(version.status.success());
    assert!(String::from_utf8_lossy(&version.stdout).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn bad_arguments_to_the_packager_are_refused_in_one_sentence() {
    let run = Command::new(root().join("scripts/krew-package.sh")).arg("--frobnicate").output().unwrap();
    assert_eq!(run.status.code(), Some(2));
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
}
