//! `status` on the real kube-apiserver (`../shared/realk8s`, no kubelet), with the real-shaped seed objects
//! (tests/fixtures/seed): the members' etcd cannot be reached (a port-forward needs a kubelet), so one line says
//! so and the verdict, problems and exit code are those of `status --no-etcd`.

use crate::cli_support::{self, run_with};
use crate::seed_support;

use std::time::{Duration, Instant};

use jiff::Timestamp;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_route_to_etcd_status_says_so_once_and_judges_from_the_rest() {
    let Some(real) =
        tokio::task::block_in_place(|| crate::realk8s_support::RealK8s::get("status-etcd-unreached", false))
    else {
        return;
    };
    let client = real.client().await;
    real.install_seed_prerequisites();
    for (i, scenario) in ["healthy", "one-member-down"].into_iter().enumerate() {
        let ns = format!("shoot--unreached--s{i}");
        let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        match ns_api
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
            .await
        {
            Ok(_) => seed_support::apply(&client, &ns, &seed_support::load_into(scenario, Timestamp::now(), &ns)).await,
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("{ns}: {e}"),
        }
        let dir = tempfile::tempdir().unwrap();
        let env = [("KUBECONFIG", real.kubeconfig.to_str().unwrap())];
        let run = |extra: &[&str]| {
            let mut all: Vec<String> = ["status", "-n", &ns, "etcd-main"].iter().map(|s| s.to_string()).collect();
            all.extend(extra.iter().map(|s| s.to_string()));
            let dir = dir.path().to_path_buf();
            async move {
                let args: Vec<&str> = all.iter().map(String::as_str).collect();
                run_with(cli_support::bin(), &args, &env, &dir).await
            }
        };
        let started = Instant::now();
        let with_etcd = run(&["-o", "json"]).await;
        let took = started.elapsed();
        let without = run(&["-o", "json", "--no-etcd"]).await;
        let table = run(&[]).await;
        let doc = |out: &std::process::Output| -> Value {
            serde_json::from_slice::<Value>(&out.stdout)
                .unwrap_or_else(|e| panic!("{scenario}: {e}: {}", String::from_utf8_lossy(&out.stderr)))["items"][0]
                .clone()
        };
        let (with_doc, without_doc) = (doc(&with_etcd), doc(&without));
        assert_eq!(with_etcd.status.code(), without.status.code(), "{scenario}: exit code");
        assert_ne!(with_etcd.status.code(), Some(5), "{scenario}: an unreachable etcd is never exit 5");
        for field in ["verdict", "problems", "quorum", "summary"] {
            assert_eq!(with_doc[field], without_doc[field], "{scenario}: {field}");
        }
        assert!(without_doc.get("etcdView").is_none(), "{scenario}: --no-etcd asks no etcd");
        let said = with_doc["etcdView"]["notReached"].as_str().unwrap_or_else(|| panic!("{scenario}: {with_doc:#}"));
        assert!(said.starts_with("etcd not reached"), "{said}");
        let shown = String::from_utf8_lossy(&table.stdout);
        let lines: Vec<&str> = shown.lines().filter(|l| l.contains("etcd not reached")).collect();
        assert_eq!(lines.len(), 1, "{scenario}: said once\n{shown}");
        assert_eq!(table.status.code(), without.status.code(), "{scenario}: table exit code");
        // Bounded: each member's read gives up after 2 s, all at once.
        assert!(took < Duration::from_secs(10), "{scenario}: status took {took:?}");
    }
}
