//! The workspace's dependency rules, checked on the real manifests (`cargo metadata`) and sources, not by
//! convention:
//!
//! - `druid-api` depends on no other workspace crate;
//! - `kube-sim` depends on no druidctl crate at all;
//! - `landscape` never depends on the `druidctl` package (it models the real components, not the product);
//! - the product's library and commands use `landscape`/`kube-sim` only in `src/cmd/playground.rs`,
//!   `src/cmd/playground_state.rs` (the playground's state directory and break kinds, which completion reads too),
//!   `src/cmd/demo.rs` and in test code (`#[cfg(test)]` modules, `tests/`, `benches/`).
//!
//! Each rule is also fed a deliberately forbidden case, so the check is shown to fail when it should.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Normal (non-dev, non-build) dependencies of each workspace package, by package name.
fn workspace_edges(metadata: &Value) -> BTreeMap<String, BTreeSet<String>> {
    let members: BTreeSet<&str> =
        metadata["workspace_members"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let mut edges = BTreeMap::new();
    for pkg in metadata["packages"].as_array().unwrap() {
        if !members.contains(pkg["id"].as_str().unwrap_or_default()) {
            continue;
        }
        let deps = pkg["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null())
            .filter_map(|d| d["name"].as_str().map(str::to_string))
            .collect();
        edges.insert(pkg["name"].as_str().unwrap().to_string(), deps);
    }
    edges
}

/// Every package reachable from `from` through workspace edges (normal dependencies only).
fn reachable(edges: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_string()];
    while let Some(p) = todo.pop() {
        for d in edges.get(&p).into_iter().flatten() {
            if edges.contains_key(d) && seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

/// The manifest rules; returns one line per violation.
fn manifest_violations(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let forbidden: &[(&str, &[&str])] = &[
        ("druid-api", &["druidctl", "kube-sim", "landscape"]),
        ("kube-sim", &["druidctl", "druid-api", "landscape"]),
        ("landscape", &["druidctl"]),
    ];
    let mut out = Vec::new();
    for (pkg, banned) in forbidden {
        assert!(edges.contains_key(*pkg), "workspace member {pkg} is missing");
        let reach = reachable(edges, pkg);
        for b in *banned {
            if reach.contains(*b) {
                out.push(format!("{pkg} depends on {b}"));
            }
        }
    }
    out
}

/// Product source files that name `landscape::` or `kube_sim::` outside the playground commands and outside
/// test code (everything from a file's first `#[cfg(test)]` on is test code in this tree).
fn source_violations(files: &[(PathBuf, String)]) -> Vec<String> {
    let allowed = ["src/cmd/playground.rs", "src/cmd/playground_state.rs", "src/cmd/demo.rs"];
    let mut out = Vec::new();
    for (path, text) in files {
        let rel = path.to_string_lossy().replace('\\', "/");
        if allowed.iter().any(|a| rel.ends_with(a)) {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            let code = line.split("//").next().unwrap_or_default();
            if code.contains("landscape::") || code.contains("kube_sim::") {
                out.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push((p.clone(), std::fs::read_to_string(&p).unwrap()));
        }
    }
}

fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--manifest-path"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("cargo metadata JSON")
}

#[test]
fn the_crates_depend_only_on_what_they_may() {
    let edges = workspace_edges(&metadata());
    println!("workspace edges: {edges:?}");
    assert_eq!(manifest_violations(&edges), Vec::<String>::new());
}

#[test]
fn the_manifest_check_fails_on_a_forbidden_dependency() {
    let mut edges = workspace_edges(&metadata());
    edges.get_mut("landscape").unwrap().insert("druidctl".into());
    edges.get_mut("kube-sim").unwrap().insert("druid-api".into());
    let v = manifest_violations(&edges);
    println!("{v:?}");
    assert!(v.contains(&"landscape depends on druidctl".to_string()), "{v:?}");
    assert!(v.contains(&"kube-sim depends on druid-api".to_string()), "{v:?}");
}

#[test]
fn only_the_playground_commands_use_the_landscape_and_the_embedded_server() {
    let mut files = Vec::new();
    rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    assert!(files.len() > 50, "the product's sources were not found");
    assert_eq!(source_violations(&files), Vec::<String>::new());
}

#[test]
fn the_source_check_fails_on_a_forbidden_import() {
    let bad = vec![
        (PathBuf::from("src/health/assess.rs"), "use landscape::druid::render;\nfn f() {}\n".to_string()),
        (PathBuf::from("src/tasks/ops.rs"), "fn f() { let s = kube_sim::ApiServer::new(); }\n".to_string()),
        (PathBuf::from("src/cmd/demo.rs"), "use landscape::Playground;\n".to_string()),
        (PathBuf::from("src/kube/mod.rs"), "fn f() {}\n#[cfg(test)]\nmod t { use kube_sim::ApiServer; }\n".into()),
    ];
    let v = source_violations(&bad);
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v[0].starts_with("src/health/assess.rs:1"), "{v:?}");
}
