//! etcd-druid's own `druidctl` command lines (gardener/etcd-druid `druidctl/cmd`) work as aliases: each has the
//! same effect on an Etcd as the druidctl command it stands for. The native command runs on `shoot--a/etcd-main`,
//! the alias on `shoot--b/etcd-other` (both start without annotations), and their annotations must be equal after
//! every step.

use crate::cli_support;

use cli_support::Fixture;
use serde_json::Value;

fn annotations(fx: &Fixture, ns: &str, name: &str) -> Value {
    let o = fx.server.get_object("druid.gardener.cloud/v1alpha1", "etcds", Some(ns), name).unwrap();
    o["metadata"]["annotations"].clone()
}

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_command_lines_have_the_effect_of_the_native_commands() {
    let fx = Fixture::start().await;
    let cases: &[(&[&str], &[&str], Option<&str>)] = &[
        (
            &["suspend-reconcile", "shoot--a/etcd-main"],
            &["reconciliation", "suspend", "shoot--b/etcd-other", "--no-banner"],
            Some("druid.gardener.cloud/suspend-etcd-spec-reconcile"),
        ),
        (&["resume-reconcile", "shoot--a/etcd-main"], &["reconciliation", "resume", "-v", "shoot--b/etcd-other"], None),
        (
            &["reconcile", "shoot--a/etcd-main"],
            &["reconciliation", "trigger", "shoot--b/etcd-other"],
            Some("gardener.cloud/operation"),
        ),
        // Inverted naming upstream: `remove` removes the protection (sets the disable annotation).
        (
            &["protection", "disable", "shoot--a/etcd-main"],
            &["component-protection", "remove", "-n", "shoot--b", "etcd-other"],
            Some("druid.gardener.cloud/disable-etcd-component-protection"),
        ),
        (
            &["protection", "enable", "shoot--a/etcd-main"],
            &["component-protection", "add", "shoot--b/etcd-other"],
            None,
        ),
    ];
    for (native, alias, set) in cases {
        let n = fx.run(native).await;
        assert_eq!(n.status.code(), Some(0), "{native:?}: {}", text(&n));
        let a = fx.run(alias).await;
        assert_eq!(a.status.code(), Some(0), "{alias:?}: {}", text(&a));
        let (want, have) = (annotations(&fx, "shoot--a", "etcd-main"), annotations(&fx, "shoot--b", "etcd-other"));
        assert_eq!(want, have, "{alias:?} differs from {native:?}");
        if let Some(key) = set {
            assert!(have.get(*key).is_some(), "{alias:?} did not set {key}: {have}");
        }
        assert_eq!(
            String::from_utf8_lossy(&a.stdout).replace("shoot--b/etcd-other", "X"),
            String::from_utf8_lossy(&n.stdout).replace("shoot--a/etcd-main", "X"),
            "{alias:?} prints what {native:?} prints"
        );
    }
    // After `protection enable` the disable annotation is gone on both.
    assert!(
        annotations(&fx, "shoot--b", "etcd-other")
            .get("druid.gardener.cloud/disable-etcd-component-protection")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_trigger_flags_and_refusals_match_the_native_command() {
    let fx = Fixture::start().await;
    // Upstream: "cannot specify --timeout/-t without --wait-till-ready/-w" — a usage error, nothing written.
    let out = fx.run(&["reconciliation", "trigger", "-t", "1m", "shoot--b/etcd-other"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(annotations(&fx, "shoot--b", "etcd-other").get("gardener.cloud/operation").is_none());
    // A suspended Etcd is refused by both spellings (exit 3), and neither writes the annotation.
    let native = fx.run(&["reconcile", "etcd-events"]).await;
    let alias = fx.run(&["reconciliation", "trigger", "etcd-events"]).await;
    assert_eq!(native.status.code(), Some(3), "{}", text(&native));
    assert_eq!(alias.status.code(), native.status.code(), "{}", text(&alias));
    assert_eq!(alias.stderr, native.stderr);
    assert!(annotations(&fx, "shoot--a", "etcd-events").get("gardener.cloud/operation").is_none());
    // The upstream tree is hidden from help but present for scripts.
    let help = fx.run(&["--help"]).await;
    assert!(!String::from_utf8_lossy(&help.stdout).contains("component-protection"));
    let help = fx.run(&["reconciliation", "trigger", "--help"]).await;
    assert!(String::from_utf8_lossy(&help.stdout).contains("--wait-till-ready"));
}
