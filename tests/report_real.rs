//! `report` on the real kube-apiserver v1.36 of `../shared/realk8s` (no kubelet, no controller manager) with the
//! real-shaped seed objects: it collects the objects and records that the logs could not be read instead of
//! failing; and no API server lets it write what a Secret holds.

use std::io::Read;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::cli_support::{self, run_with};
use crate::seed_support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_on_the_real_kube_apiserver_collects_the_seed_and_records_that_logs_are_unreadable() {
    let Some(real) = tokio::task::block_in_place(|| crate::realk8s_support::RealK8s::get("report-real", false)) else {
        return;
    };
    let client = real.client().await;
    real.install_seed_prerequisites();
    let ns = format!("shoot--report--{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
        .await
        .unwrap();
    seed_support::apply(&client, &ns, &seed_support::load_into("healthy", jiff::Timestamp::now(), &ns)).await;
    // One of the Secrets the Etcd references, with a value that must not reach the bundle.
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "etcd-client-9a8b7c6d"},
        "stringData": {"tls.key": "not-a-real-key-but-secret-7f3a9c", "tls.crt": "x"}});
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &serde_json::from_value(secret).unwrap())
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.tar.gz");
    let env = [("KUBECONFIG", real.kubeconfig.to_str().unwrap())];
    let out = run_with(
        cli_support::bin(),
        &["report", "-n", &ns, "etcd-main", "--file", file.to_str().unwrap()],
        &env,
        dir.path(),
    )
    .await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(std::fs::File::open(&file).unwrap()));
    let mut files = std::collections::BTreeMap::new();
    for e in tar.entries().unwrap() {
        let mut e = e.unwrap();
        let path = e.path().unwrap().to_string_lossy().to_string();
        let mut data = String::new();
        e.read_to_string(&mut data).unwrap();
        files.insert(path.split_once('/').unwrap().1.to_string(), data);
    }
    for f in [
        "index.md",
        "etcd.yaml",
        "status.json",
        "events.yaml",
        "resources/statefulset.apps/etcd-main.yaml",
        "resources/pod/etcd-main-0.yaml",
        "resources/persistentvolumeclaim/main-etcd-etcd-main-0.yaml",
        "secrets/etcd-client-9a8b7c6d.yaml",
    ] {
        assert!(files.contains_key(f), "{f} missing: {:?}", files.keys());
    }
    let index = &files["index.md"];
    let skipped = index.split("## Skipped").nth(1).unwrap();
    // No kubelet: every member container's log is skipped with the API server's reason, nothing fails.
    for m in ["etcd-main-0", "etcd-main-1", "etcd-main-2"] {
        assert!(skipped.contains(&format!("log of {m} container etcd")), "{skipped}");
    }
    assert!(!files.keys().any(|k| k.starts_with("logs/")));
    // etcd's own view: not reached (the CA bundle the Etcd names is not in the namespace), said in one line.
    let etcd_view: Vec<&str> = skipped.lines().filter(|l| l.contains("etcd's own view")).collect();
    assert_eq!(etcd_view.len(), 1, "{skipped}");
    assert!(etcd_view[0].contains("ca-etcd-bundle-a1b2c3d4"), "{skipped}");
    assert!(!files.keys().any(|k| k.starts_with("etcd/")), "{:?}", files.keys());
    // Secrets the Etcd references but the namespace lacks are named as skipped (NotFound), the one present is
    // summarised without its values.
    assert!(skipped.contains("Secret etcd-server-main-5d6e7f80"), "{skipped}");
    assert!(files["secrets/etcd-client-9a8b7c6d.yaml"].contains("tls.key"));
    for (path, data) in &files {
        assert!(!data.contains("not-a-real-key-but-secret-7f3a9c"), "{path} holds a Secret value");
        // index.md says that they are left out.
        assert!(path == "index.md" || !data.contains("managedFields"), "{path} holds managedFields");
    }
    let _ = Api::<Namespace>::all(client).delete(&ns, &Default::default()).await;
}
