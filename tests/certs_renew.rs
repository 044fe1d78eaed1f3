//! `renew` and `cert status` end to end: the real binary against the embedded API server (real CRDs) with the
//! cert-manager actor issuing real key pairs, or failing on demand.

use crate::certs_machines_support;
use crate::cli_support;

use std::time::Duration;

use certs_machines_support::{
    Cli, FAILED, NOT_FOUND, NS, USAGE, admin_writes, create_certificate, create_etcd, etcd_tls_spec,
    server_with_namespace, start_cert_manager, text,
};
use druidctl::api::Certificate;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube_sim::ApiServer;
use landscape::certmanager::CertManager;
use serde_json::Value;

struct Fx {
    server: ApiServer,
    cli: Cli,
    cm: CertManager,
}

impl Fx {
    async fn start() -> Fx {
        let server = server_with_namespace().await;
        let client = server.client();
        create_etcd(&client, etcd_tls_spec()).await;
        for (name, secret) in [
            ("etcd-server", "etcd-server-tls"),
            ("etcd-client", "etcd-client-tls"),
            ("etcd-peer", "etcd-peer-tls"),
            ("ingress", "ingress-tls"),
        ] {
            create_certificate(&client, name, secret).await;
        }
        let cm = start_cert_manager(&server);
        let cli = Cli::serve(&server).await;
        let fx = Fx { server, cli, cm };
        for name in ["etcd-server", "etcd-client", "etcd-peer", "ingress"] {
            fx.wait_revision(name, 1).await;
        }
        fx.server.request_log().clear();
        fx
    }

    async fn run(&self, args: &[&str]) -> std::process::Output {
        self.cli.run(args).await
    }

    async fn cert(&self, name: &str) -> Certificate {
        Api::<Certificate>::namespaced(self.server.client(), NS).get(name).await.unwrap()
    }

    async fn wait_revision(&self, name: &str, rev: i64) {
        for _ in 0..200 {
            let c = self.cert(name).await;
            if c.status.as_ref().and_then(|s| s.revision) == Some(rev) && !druidctl::certs::renew::is_issuing(&c) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("certificate {name} never reached revision {rev}: {:?}", self.cert(name).await.status);
    }

    async fn key(&self, secret: &str) -> Vec<u8> {
        let s = Api::<Secret>::namespaced(self.server.client(), NS).get(secret).await.unwrap();
        s.data.unwrap().get("tls.key").unwrap().0.clone()
    }

    /// Writes druidctl (user admin) made, leaving out the actor's own.
    fn admin_writes(&self) -> Vec<String> {
        admin_writes(&self.server)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_etcd_with_wait_issues_a_new_revision_and_a_new_key_pair_for_each_of_its_certificates() {
    let fx = Fx::start().await;
    let before_key = fx.key("etcd-server-tls").await;
    let out = fx.run(&["renew", "--etcd", "etcd-main", "--wait", "--timeout", "20s"]).await;
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let stdout = text(&out.stdout);
    for name in ["etcd-client", "etcd-peer", "etcd-server"] {
        assert!(stdout.contains(&format!("certificate {NS}/{name} issued (revision 2)")), "{stdout}");
        let c = fx.cert(name).await;
        assert_eq!(c.status.as_ref().unwrap().revision, Some(2));
        assert!(c.condition("Issuing").is_none(), "Issuing is removed after issuance");
    }
    assert_ne!(fx.key("etcd-server-tls").await, before_key, "a new key pair is in the secret");
    assert_eq!(
        fx.cert("ingress").await.status.unwrap().revision,
        Some(1),
        "certificates the Etcd does not use are left alone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_sets_issuing_manually_triggered_like_cmctl() {
    let fx = Fx::start().await;
    fx.cm.set_failing(NS, "etcd-peer", true);
    // Without --wait the trigger is all that is written; the failing issuer leaves the manual trigger's trace.
    let out = fx.run(&["renew", "etcd-peer", "-o", "json"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["items"][0]["triggered"], true);
    assert_eq!(doc["items"][0]["previousRevision"], 1);
    let writes = fx.admin_writes();
    assert_eq!(writes, [format!("update /apis/cert-manager.io/v1/namespaces/{NS}/certificates/etcd-peer/status")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_issuance_stops_wait_and_cert_status_shows_the_next_automatic_retry() {
    let fx = Fx::start().await;
    fx.cm.set_failing(NS, "etcd-server", true);
    let out = fx.run(&["renew", "etcd-server", "--wait", "--timeout", "20s"]).await;
    assert_eq!(out.status.code(), Some(FAILED), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("issuing certificate \"etcd-server\" in namespace \"shoot--a\" failed"), "{err}");

    // Second manual attempt fails too: attempts 2, so the next retry is lastFailureTime + 2h.
    let out = fx.run(&["renew", "etcd-server", "--wait", "--timeout", "20s"]).await;
    assert_eq!(out.status.code(), Some(FAILED), "{}", text(&out.stderr));

    let out = fx.run(&["cert", "status", "--etcd", "etcd-main", "-o", "json"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let items = doc["items"].as_array().unwrap();
    let names: Vec<&str> = items.iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["etcd-client", "etcd-peer", "etcd-server"]);
    let server = &items[2];
    assert_eq!(server["failedIssuanceAttempts"], 2);
    let last: jiff::Timestamp = server["lastFailureTime"].as_str().unwrap().parse().unwrap();
    let next: jiff::Timestamp = server["nextRetryAt"].as_str().unwrap().parse().unwrap();
    assert_eq!(next.duration_since(last), jiff::SignedDuration::from_hours(2));
    assert_eq!(server["revision"], 1, "the old certificate stays");
    assert!(items[0]["nextRetryAt"].is_null(), "a healthy certificate has no retry pending");

    let out = fx.run(&["cert", "status", "etcd-server"]).await;
    let table = text(&out.stdout);
    assert!(
        table.contains("NEXT RETRY") && table.contains(&next.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        "{table}"
    );

    // Once the cause is fixed, a manual renew bypasses the backoff and clears the failure.
    fx.cm.set_failing(NS, "etcd-server", false);
    let out = fx.run(&["renew", "etcd-server", "--wait", "--timeout", "20s"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let st = fx.cert("etcd-server").await.status.unwrap();
    assert_eq!((st.revision, st.failed_issuance_attempts, st.last_failure_time), (Some(2), None, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_say_one_sentence_exit_with_the_documented_code_and_change_nothing() {
    let fx = Fx::start().await;
    let cases: &[(&[&str], i32, &str)] = &[
        (&["renew"], USAGE, "name the certificates to renew"),
        (&["renew", "--all", "etcd-server"], USAGE, "cannot be used with"),
        (&["renew", "--etcd", "etcd-main", "etcd-server"], USAGE, "cannot be used with"),
        (&["renew", "-A", "etcd-server"], USAGE, "--all-namespaces cannot be combined"),
        (&["renew", "Bad_Name"], USAGE, "invalid certificate name"),
        (&["renew", "etcd-nope"], NOT_FOUND, "certificate \"etcd-nope\" not found in namespace \"shoot--a\""),
        (&["renew", "--etcd", "etcd-nope"], NOT_FOUND, "etcd \"etcd-nope\" not found"),
        (&["renew", "etcd-server", "--timeout", "1m"], USAGE, "--wait"),
        (&["cert", "status", "etcd-nope"], NOT_FOUND, "not found"),
    ];
    for (args, code, says) in cases {
        let out = fx.run(args).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert!(fx.admin_writes().is_empty(), "{:?}", fx.admin_writes());
    assert_eq!(fx.cert("etcd-server").await.status.unwrap().revision, Some(1));
}

/// Gardener's secrets manager labels (gardener/gardener `pkg/utils/secrets/manager/manager.go`).
fn secrets_manager_secret(name: &str, config_name: &str) -> Secret {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": NS, "labels": {
            "name": config_name, "managed-by": "secrets-manager", "manager-identity": "gardenlet",
            "checksum-of-config": "9817203649087231", "last-rotation-initiation-time": ""}},
        "type": "kubernetes.io/tls", "immutable": true,
        "data": {"tls.crt": "", "tls.key": ""}}))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_says_that_gardener_renews_secrets_manager_certificates() {
    use kube::api::{DynamicObject, PostParams};
    let fx = Fx::start().await;
    let client = fx.server.client();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    for (name, config) in [
        ("ca-etcd-bundle-a1b2c3d4", "ca-etcd-bundle"),
        ("etcd-server-main-5d6e7f80", "etcd-server-main"),
        ("etcd-client-9a8b7c6d", "etcd-client"),
    ] {
        secrets.create(&PostParams::default(), &secrets_manager_secret(name, config)).await.unwrap();
    }
    let tls = serde_json::json!({"tlsCASecretRef": {"name": "ca-etcd-bundle-a1b2c3d4", "dataKey": "bundle.crt"},
        "serverTLSSecretRef": {"name": "etcd-server-main-5d6e7f80"}, "clientTLSSecretRef": {"name": "etcd-client-9a8b7c6d"}});
    let etcd = serde_json::json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
        "metadata": {"name": "etcd-gardener", "namespace": NS},
        "spec": {"replicas": 3, "labels": {"app": "etcd-statefulset"}, "etcd": {"clientUrlTls": tls}, "backup": {}}});
    Api::<DynamicObject>::namespaced_with(client.clone(), NS, &cli_support::etcd_resource())
        .create(&PostParams::default(), &serde_json::from_value(etcd).unwrap())
        .await
        .unwrap();
    fx.server.request_log().clear();
    let out = fx.run(&["renew", "--etcd", "etcd-gardener"]).await;
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(certs_machines_support::REJECTED), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("Gardener's secrets manager") && err.contains("etcd-server-main-5d6e7f80"), "{err}");
    assert!(err.contains("rotate-ca-start"), "{err}");
    assert!(fx.admin_writes().is_empty(), "{:?}", fx.admin_writes());
}
