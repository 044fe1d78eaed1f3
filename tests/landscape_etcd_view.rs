//! etcd's own view with real etcd on the playground: `status` shows each member's Maintenance Status and the
//! alarms and judges them; `check` compares the members' HashKV; `move-leader` moves etcd's leadership;
//! `alarm disarm` refuses while the database is still at its quota; `playground break lagging-member` stops a
//! member while writes go on. Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`).

use crate::cli_support::{bin, run_with};
use crate::e2e_support::E2e;

use std::process::Output;
use std::time::{Duration, Instant};

use etcd_client::{AlarmAction, AlarmOptions, AlarmType};
use kube::Api;
use kube::api::{Patch, PatchParams};
use landscape::etcd::require_etcd;
use landscape::playground::BreakTarget;
use landscape::{BreakKind, Playground};
use serde_json::{Value, json};

async fn druidctl(pg: &Playground, args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    let kc = pg.kubeconfig_path().to_str().unwrap().to_string();
    run_with(bin(), args, &[("KUBECONFIG", &kc)], home.path()).await
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

async fn status_json(pg: &Playground, ns: &str) -> (Option<i32>, Value) {
    let out = druidctl(pg, &["status", "-n", ns, pg.etcd_name(), "-o", "json"]).await;
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    (out.status.code(), doc["items"][0].clone())
}

fn leader_of(report: &Value) -> Option<String> {
    report["members"]
        .as_array()?
        .iter()
        .find(|m| m["etcd"]["isLeader"].as_bool() == Some(true))
        .and_then(|m| m["name"].as_str().map(String::from))
}

/// A client of member `ordinal`'s etcd on its own loopback URL.
async fn raw_client(pg: &Playground, ns: &str, ordinal: u32) -> etcd_client::Client {
    let url = pg.member(ns, ordinal).unwrap().process().client_url();
    etcd_client::Client::connect([url], None).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_check_move_leader_and_alarms_with_real_etcd() {
    let Some(_) = require_etcd("etcd's own view on the playground") else { return };
    let pg = E2e::start(3, |_| {}).await;
    let ns = pg.namespace();
    let etcd = pg.etcd_name().to_string();

    // A healthy cluster: Healthy, every member's own view, no alarm, the new columns within 120 characters.
    let (code, report) = status_json(&pg, &ns).await;
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["verdict"], "Healthy", "{report:#}");
    assert_eq!(report["etcdView"]["alarms"], json!([]), "{report:#}");
    for m in report["members"].as_array().unwrap() {
        assert!(m["etcd"]["dbSize"].as_i64().unwrap() > 0, "{m:#}");
        assert_eq!(m["etcd"]["quota"].as_i64(), Some(8 * 1024 * 1024 * 1024), "{m:#}");
        assert!(!m["etcd"]["version"].as_str().unwrap().is_empty(), "{m:#}");
    }
    let leader = leader_of(&report).expect("a leader");
    assert_eq!(report["etcdView"]["leader"].as_str(), Some(leader.as_str()));
    let table = druidctl(&pg, &["status", "-n", &ns, &etcd]).await;
    let shown = String::from_utf8_lossy(&table.stdout).to_string();
    assert_eq!(table.status.code(), Some(0), "{}", text(&table));
    for header in ["DB SIZE/QUOTA", "IN USE", "RAFT INDEX", "VERSION"] {
        assert!(shown.contains(header), "{header} in\n{shown}");
    }
    assert!(shown.contains("/8Gi "), "{shown}");
    assert!(shown.lines().all(|l| l.chars().count() <= 120), "{shown}");
    let no_etcd = druidctl(&pg, &["status", "-n", &ns, &etcd, "--no-etcd"]).await;
    assert!(!String::from_utf8_lossy(&no_etcd.stdout).contains("DB SIZE/QUOTA"), "{}", text(&no_etcd));

    // check: every member has the same keyspace at one revision.
    let c = pg.etcd_client(&ns, 0).unwrap();
    for i in 0..20 {
        c.put(format!("/registry/configmaps/c{i}"), format!("v{i}")).await.unwrap();
    }
    let out = druidctl(&pg, &["check", "-n", &ns, &etcd, "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["consistent"], true, "{doc:#}");
    let hashes: Vec<u64> = doc["members"].as_array().unwrap().iter().map(|m| m["hash"].as_u64().unwrap()).collect();
    assert_eq!(hashes.len(), 3, "{doc:#}");
    assert!(hashes.iter().all(|h| *h == hashes[0]), "{doc:#}");
    assert!(doc["members"].as_array().unwrap().iter().all(|m| m["hashRevision"] == doc["revision"]), "{doc:#}");

    // move-leader: to another member, which then leads; a name that is no member is "not found".
    let target = (0..3).map(|i| format!("{etcd}-{i}")).find(|m| *m != leader).unwrap();
    let out = druidctl(&pg, &["move-leader", "-n", &ns, &etcd, &target]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let (_, report) = status_json(&pg, &ns).await;
    assert_eq!(leader_of(&report).as_deref(), Some(target.as_str()), "{report:#}");
    let out = druidctl(&pg, &["move-leader", "-n", &ns, &etcd, &format!("{etcd}-7")]).await;
    assert_eq!(out.status.code(), Some(6), "{}", text(&out));

    // NOSPACE: etcd refuses writes; status is not healthy and names the alarm and the runbook.
    let mut raw = raw_client(&pg, &ns, 0).await;
    let id = raw.status().await.unwrap().header().unwrap().member_id();
    let mut options = AlarmOptions::new();
    options.with_member(id);
    raw.alarm(AlarmAction::Activate, AlarmType::Nospace, Some(options)).await.unwrap();
    assert!(c.put("/registry/configmaps/refused", "x").await.is_err(), "NOSPACE refuses writes");
    let out = druidctl(&pg, &["status", "-n", &ns, &etcd]).await;
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(4), "{shown}");
    assert!(shown.contains("NOSPACE") && shown.contains("runbook space-recovery"), "{shown}");
    let out = druidctl(&pg, &["alarm", "list", "-n", &ns, &etcd, "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["items"][0]["alarm"], "NOSPACE", "{doc:#}");

    // While the database is at its quota (here the Etcd's quota is below the database's size), disarming is
    // refused and nothing changes; without a terminal and without --yes it is refused too.
    let etcds: Api<druidctl::api::Etcd> = Api::namespaced(pg.client(), &ns);
    let quota = |q: &str| Patch::Merge(json!({"spec": {"etcd": {"quota": q}}}));
    etcds.patch(&etcd, &PatchParams::default(), &quota("16Ki")).await.unwrap();
    let out = druidctl(&pg, &["alarm", "disarm", "-n", &ns, &etcd, "--yes"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("still at its quota"), "{}", text(&out));
    assert!(c.put("/registry/configmaps/refused", "x").await.is_err(), "still NOSPACE");
    etcds.patch(&etcd, &PatchParams::default(), &quota("8Gi")).await.unwrap();
    let out = druidctl(&pg, &["alarm", "disarm", "-n", &ns, &etcd]).await;
    assert_eq!(out.status.code(), Some(3), "no terminal, no --yes: {}", text(&out));
    let out = druidctl(&pg, &["alarm", "disarm", "-n", &ns, &etcd, "--yes"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    c.put("/registry/configmaps/accepted", "x").await.expect("writes work again");
    let (code, report) = status_json(&pg, &ns).await;
    assert_eq!((code, report["etcdView"]["alarms"].clone()), (Some(0), json!([])), "{report:#}");

    // lagging-member: the stopped member does not answer while writes go on; then it catches up.
    let target = BreakTarget { members: vec![2], down_for: Some(Duration::from_secs(20)), ..Default::default() };
    pg.break_(BreakKind::LaggingMember, &target).await.unwrap();
    let out = druidctl(&pg, &["status", "-n", &ns, &etcd, "-o", "json"]).await;
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    let stopped = format!("{etcd}-2");
    let unreachable = &doc["items"][0]["etcdView"]["unreachable"];
    assert!(
        unreachable.as_array().unwrap().iter().any(|u| u["member"] == stopped.as_str()),
        "the stopped member does not answer: {doc:#}"
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (code, report) = status_json(&pg, &ns).await;
        // A member that has just come back and is closing the gap is never called lagging: that takes a second
        // reading in which it is still behind and not catching up.
        let problems = report["problems"].to_string();
        assert!(!problems.contains("not catching up"), "a member catching up was called lagging: {report:#}");
        let caught_up = report["members"][2]["etcd"]["lag"].as_u64().is_some_and(|l| l < 100);
        if code == Some(0) && caught_up {
            break;
        }
        assert!(Instant::now() < deadline, "the member did not catch up: {report:#}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    pg.down().await;
}
