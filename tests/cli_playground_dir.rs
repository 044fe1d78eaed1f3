//! Which playground `playground status|down|break` act on: `--dir`, else $DRUIDCTL_PLAYGROUND_DIR, else the one
//! whose kubeconfig is the first entry of $KUBECONFIG, else the default state directory. No playground is
//! started: the state directories are made by hand, and every answer names the directory it looked at.

use crate::cli_support::{bin, run_with};

use std::path::{Path, PathBuf};
use std::process::Output;

/// A process id that no longer runs (a child that has exited and been reaped).
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    child.wait().unwrap();
    child.id()
}

/// A state directory with a kubeconfig and a pid file (and the ready marker when `ready`).
fn state(root: &Path, name: &str, pid: u32, ready: bool) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kubeconfig"), "apiVersion: v1\nkind: Config\n").unwrap();
    std::fs::write(dir.join("playground.pid"), pid.to_string()).unwrap();
    if ready {
        std::fs::write(dir.join("ready"), "").unwrap();
    }
    dir
}

/// Runs `druidctl playground ARGS` with `KUBECONFIG`, nothing else naming a playground, and the default
/// state directory under `root/xdg`.
async fn playground(root: &Path, kubeconfig: &str, args: &[&str], extra: &[(&str, &str)]) -> Output {
    let xdg = root.join("xdg");
    let mut env =
        vec![("KUBECONFIG", kubeconfig), ("DRUIDCTL_PLAYGROUND_DIR", ""), ("XDG_STATE_HOME", xdg.to_str().unwrap())];
    env.extend_from_slice(extra);
    let mut all = vec!["playground"];
    all.extend_from_slice(args);
    run_with(bin(), &all, &env, root).await
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[tokio::test]
async fn status_finds_the_playground_of_the_first_kubeconfig_entry() {
    let root = tempfile::tempdir().unwrap();
    let pg = state(root.path(), "pg", dead_pid(), false);
    let other = root.path().join("other.yaml");
    let kc = format!("{}:{}", pg.join("kubeconfig").display(), other.display());

    let o = playground(root.path(), &kc, &["status"], &[]).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(out(&o), format!("no playground running (state {})\n", pg.display()));

    // A running one (this test process stands in for it) is reported with its kubeconfig.
    let live = state(root.path(), "live", std::process::id(), true);
    let o = playground(root.path(), live.join("kubeconfig").to_str().unwrap(), &["status"], &[]).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let text = out(&o);
    assert!(
        text.starts_with(&format!("playground running (pid {}, state {})\n", std::process::id(), live.display())),
        "{text}"
    );
    assert!(text.contains(&format!("export KUBECONFIG={}", live.join("kubeconfig").display())), "{text}");

    // The record alone (a playground on an external API server whose process is gone) identifies it too.
    let rec = root.path().join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    std::fs::write(rec.join("kubeconfig"), "").unwrap();
    std::fs::write(rec.join("playground.json"), "{}").unwrap();
    let o = playground(root.path(), rec.join("kubeconfig").to_str().unwrap(), &["status"], &[]).await;
    assert_eq!(out(&o), format!("no playground running (state {})\n", rec.display()));
}

#[tokio::test]
async fn kubeconfig_is_followed_only_to_a_playground_state_and_only_from_its_first_entry() {
    let root = tempfile::tempdir().unwrap();
    let default = root.path().join("xdg/druidctl/playground");
    let pg = state(root.path(), "pg", dead_pid(), false);
    // A kubeconfig named `kubeconfig` in a directory without playground state.
    let plain = root.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::write(plain.join("kubeconfig"), "").unwrap();
    // A kubeconfig next to playground state but under another name.
    std::fs::write(pg.join("admin.yaml"), "").unwrap();
    let cases = [
        plain.join("kubeconfig").display().to_string(),
        format!("{}:{}", plain.join("kubeconfig").display(), pg.join("kubeconfig").display()),
        pg.join("admin.yaml").display().to_string(),
        String::new(),
    ];
    for kc in &cases {
        let o = playground(root.path(), kc, &["status"], &[]).await;
        assert_eq!(out(&o), format!("no playground running (state {})\n", default.display()), "KUBECONFIG={kc}");
    }

    // --dir and DRUIDCTL_PLAYGROUND_DIR come first.
    let kc = pg.join("kubeconfig").display().to_string();
    let chosen = root.path().join("chosen");
    let o = playground(root.path(), &kc, &["--dir", chosen.to_str().unwrap(), "status"], &[]).await;
    assert_eq!(out(&o), format!("no playground running (state {})\n", chosen.display()));
    let o = playground(root.path(), &kc, &["status"], &[("DRUIDCTL_PLAYGROUND_DIR", chosen.to_str().unwrap())]).await;
    assert_eq!(out(&o), format!("no playground running (state {})\n", chosen.display()));
}

#[tokio::test]
async fn break_and_down_act_on_the_playground_of_kubeconfig() {
    let root = tempfile::tempdir().unwrap();
    let pg = state(root.path(), "pg", dead_pid(), false);
    let kc = pg.join("kubeconfig").display().to_string();

    let o = playground(root.path(), &kc, &["break", "member-down"], &[]).await;
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert_eq!(
        err(&o),
        format!(
            "error: no playground is running from {}; start one with `druidctl playground up --detach`\n",
            pg.display()
        )
    );

    let o = playground(root.path(), &kc, &["down"], &[]).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(out(&o), format!("playground stopped (state {})\n", pg.display()));
    assert!(!pg.join("playground.pid").exists(), "down cleared the pid file of that playground");
    assert!(pg.join("kubeconfig").exists());
}
