//! No etcd process outlives its playground: neither the in-process `Playground::down` nor
//! `druidctl playground up --detach` followed by `druidctl playground down`. Leaks are found by scanning
//! `/proc/*/cmdline` for etcd processes whose `--data-dir` lies under the test's own state directory, so
//! tests running in parallel do not see each other's members.
//! Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`, which fails instead).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use landscape::etcd::process::etcd_children_of_this_process;
use landscape::etcd::require_etcd;
use landscape::{Playground, PlaygroundOptions};

/// Live (non-zombie) etcd processes whose `--data-dir` is under `root`.
fn etcd_processes_under(root: &Path) -> Vec<u32> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let args: Vec<String> = raw.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        let is_etcd = args.first().and_then(|a| Path::new(a).file_name()).is_some_and(|n| n == "etcd");
        if !is_etcd || is_zombie(pid) {
            continue;
        }
        let data_dir = args
            .iter()
            .position(|a| a == "--data-dir")
            .and_then(|i| args.get(i + 1).cloned())
            .or_else(|| args.iter().find_map(|a| a.strip_prefix("--data-dir=").map(str::to_string)));
        if let Some(d) = data_dir {
            let d = PathBuf::from(d);
            let d = d.canonicalize().unwrap_or(d);
            if d.starts_with(&root) {
                out.push(pid);
            }
        }
    }
    out.sort_unstable();
    out
}

fn is_zombie(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return true };
    stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()).is_none_or(|s| s == "Z" || s == "X")
}

/// Waits (briefly) for the etcd processes under `root` to be gone; returns the survivors.
fn survivors_after(root: &Path, grace: Duration) -> Vec<u32> {
    let deadline = Instant::now() + grace;
    loop {
        let left = etcd_processes_under(root);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills whatever survived so that a failing test does not leak into the rest of the run.
fn kill_all(pids: &[u32]) {
    for &pid in pids {
        // SAFETY: signalling etcd processes this test started (their data dir is under its temp dir).
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn playground_down_stops_every_etcd_it_started() {
    let Some(_) = require_etcd("playground down leaks") else { return };
    let dir = tempfile::tempdir().unwrap();
    let pg = Playground::up(PlaygroundOptions::new(dir.path())).await.expect("playground up");
    pg.wait_ready(Duration::from_secs(40)).await.expect("3-member Etcd ready");

    let started = etcd_processes_under(dir.path());
    assert_eq!(started.len(), 3, "a ready 3-member Etcd runs three etcd processes under the state dir: {started:?}");
    let children = etcd_children_of_this_process();
    for pid in &started {
        assert!(children.contains(pid), "etcd {pid} is a child of this process ({children:?})");
    }

    pg.down().await.expect("playground down");
    let left = survivors_after(dir.path(), Duration::from_secs(2));
    kill_all(&left);
    assert!(left.is_empty(), "etcd processes survived Playground::down: {left:?}");
    let children: Vec<u32> = etcd_children_of_this_process().into_iter().filter(|p| started.contains(p)).collect();
    assert!(children.is_empty(), "etcd children survived Playground::down: {children:?}");
}

fn druidctl(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_druidctl"))
        .arg("playground")
        .arg("--dir")
        .arg(dir)
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run druidctl")
}

/// Stops a detached playground left behind by a failing test.
struct DownOnDrop(PathBuf);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        if self.0.join("playground.pid").exists() {
            let _ = druidctl(&self.0, &["down"]);
        }
        kill_all(&etcd_processes_under(&self.0));
    }
}

#[test]
fn detached_playground_down_leaves_no_etcd_behind() {
    let Some(_) = require_etcd("detached playground down leaks") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pg");
    let guard = DownOnDrop(dir.clone());

    let up = druidctl(&dir, &["up", "--detach", "--timeout", "40s"]);
    let log = std::fs::read_to_string(dir.join("playground.log")).unwrap_or_default();
    assert!(
        up.status.success(),
        "playground up --detach failed: {}\n{}\nlog:\n{log}",
        String::from_utf8_lossy(&up.stdout),
        String::from_utf8_lossy(&up.stderr)
    );
    let running = etcd_processes_under(&dir);
    assert_eq!(running.len(), 3, "the detached playground runs three etcd processes: {running:?}");
    assert!(
        etcd_children_of_this_process().iter().all(|p| !running.contains(p)),
        "the etcd processes belong to the detached playground, not to the test"
    );

    // Breaking a namespace the playground does not run is not found (exit 6), and breaks nothing.
    let nowhere = druidctl(&dir, &["break", "quorum-lost", "--in", "no-such-namespace"]);
    let said = String::from_utf8_lossy(&nowhere.stderr).into_owned();
    assert_eq!(nowhere.status.code(), Some(6), "{said}");
    assert!(said.starts_with("error: namespace \"no-such-namespace\" is not part of the playground"), "{said}");
    assert_eq!(etcd_processes_under(&dir).len(), 3, "nothing was broken");

    let down = druidctl(&dir, &["down"]);
    assert!(down.status.success(), "playground down failed: {}", String::from_utf8_lossy(&down.stderr));
    assert!(String::from_utf8_lossy(&down.stdout).contains("playground stopped"));
    let left = survivors_after(&dir, Duration::from_secs(3));
    drop(guard);
    assert!(left.is_empty(), "etcd processes survived `druidctl playground down`: {left:?}");
    assert!(!dir.join("playground.pid").exists(), "down removes the pid file");
}
