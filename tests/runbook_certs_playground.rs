//! `runbook cert-renewal` on the real-etcd playground: the members serve client TLS with the key pair of the
//! Etcd's server TLS secret, loaded when they start; the runbook renews, restarts them one at a time and checks
//! on each member's TLS endpoint that the served serial number is the newly issued one. The Etcd's status is
//! watched during the run to prove it never lost quorum.
//! Needs the `etcd` binary (skips without it unless `DRUIDCTL_REQUIRE_ETCD=1`, which fails instead).

use crate::runbook_support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use druidctl::api::Etcd;
use druidctl::certs::served::{member_client_tls_url, serial_of_pem, served_serial};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use landscape::Playground;
use landscape::etcd::require_etcd;
use runbook_support::*;

/// Serial of the certificate in the Etcd's server TLS secret.
async fn issued_serial(pg: &Playground, ns: &str) -> String {
    let s = Api::<Secret>::namespaced(pg.client(), ns).get("etcd-server").await.unwrap();
    let crt = String::from_utf8(s.data.unwrap()["tls.crt"].0.clone()).unwrap();
    serial_of_pem(&crt).expect("a certificate in tls.crt")
}

/// The serial each member serves on its client TLS endpoint (from the pod's published URL).
async fn served_serials(pg: &Playground, ns: &str) -> Vec<String> {
    let client = pg.client();
    let etcd = Api::<Etcd>::namespaced(client.clone(), ns).get("etcd-main").await.unwrap();
    let mut out = Vec::new();
    for i in 0..3 {
        let pod = Api::<Pod>::namespaced(client.clone(), ns).get(&format!("etcd-main-{i}")).await.unwrap();
        let url = member_client_tls_url(&pod, &etcd).expect("the member publishes its client TLS URL");
        out.push(served_serial(&url, Duration::from_secs(3)).await.unwrap_or_else(|e| panic!("etcd-main-{i}: {e}")));
    }
    out
}

/// What the Etcd status said while the runbook ran: `(Ready status, Ready reason, readyReplicas)`.
type Observed = Arc<Mutex<Vec<(String, String, i64)>>>;

fn watch_status(pg: &Playground, ns: &str) -> (Observed, tokio::task::JoinHandle<()>, Arc<tokio::sync::Notify>) {
    let seen: Observed = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let api = Api::<Etcd>::namespaced(pg.client(), ns);
    let (s, st) = (seen.clone(), stop.clone());
    let task = tokio::spawn(async move {
        loop {
            if let Ok(e) = api.get("etcd-main").await {
                let status = serde_json::to_value(e.status).unwrap_or_default();
                let ready = status["conditions"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned())
                    .unwrap_or_default();
                s.lock().unwrap().push((
                    ready["status"].as_str().unwrap_or_default().to_string(),
                    ready["reason"].as_str().unwrap_or_default().to_string(),
                    status["readyReplicas"].as_i64().unwrap_or(-1),
                ));
            }
            tokio::select! {
                _ = st.notified() => return,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    });
    (seen, task, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_renewal_leaves_every_member_serving_a_new_serial_and_the_etcd_never_loses_quorum() {
    let Some(_) = require_etcd("cert renewal on the playground") else { return };
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let pg = playground(dir.path(), 3).await;
    let ns = pg.namespaces()[0].clone();

    // Before: every member serves the certificate of the secret it started with.
    let before = issued_serial(&pg, &ns).await;
    assert_eq!(served_serials(&pg, &ns).await, vec![before.clone(); 3], "members serve the secret's certificate");
    let pids: Vec<Option<u32>> = (0..3).map(|i| pg.member(&ns, i).unwrap().process().pid()).collect();
    assert!(pids.iter().all(Option::is_some), "{pids:?}");

    let (seen, watcher, stop) = watch_status(&pg, &ns);
    let r = run(&pg, &["runbook", "cert-renewal", "-n", &ns, "etcd-main", "--yes", "-o", "jsonl"]).await;
    stop.notify_one();
    watcher.await.unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let evs = events(&r.stdout);
    assert!(evs.iter().any(|e| e["event"] == "finished"), "{}", r.stdout);
    let warnings: Vec<_> = evs.iter().filter(|e| e["event"] == "warning").collect();
    assert!(warnings.is_empty(), "every member was reachable and verified: {warnings:?}");
    assert_eq!(started_steps(&r.stdout).last().map(String::as_str), Some("VerifyServedCertificates"), "{}", r.stdout);

    // After: a new certificate was issued, and each member serves it (its serial changed).
    let after = issued_serial(&pg, &ns).await;
    assert_ne!(after, before, "the renewal issued a new certificate");
    assert_eq!(served_serials(&pg, &ns).await, vec![after.clone(); 3], "every member serves the new serial");
    let now: Vec<Option<u32>> = (0..3).map(|i| pg.member(&ns, i).and_then(|m| m.process().pid())).collect();
    assert!((0..3).all(|i| now[i].is_some() && now[i] != pids[i]), "every etcd process is a new one: {pids:?} {now:?}");

    // Quorum: never lost while the members restarted one at a time.
    let seen = seen.lock().unwrap().clone();
    assert!(seen.len() >= 5, "the status was observed during the run: {seen:?}");
    assert!(
        seen.iter().all(|(status, reason, _)| status == "True" && reason == "Quorate"),
        "Ready stayed True/Quorate: {seen:?}"
    );
    assert!(seen.iter().all(|(_, _, ready)| *ready >= 2), "at most one member was down at a time: {seen:?}");
    assert!(seen.iter().any(|(_, _, ready)| *ready == 2), "a restart was observed in the status: {seen:?}");
    let _ = pg.down().await;
    eprintln!("cert renewal on the playground took {:?}", started.elapsed());
}
