//! `renew` and `cert status` end to end: the real binary against the embedded API server (real CRDs) with the
//! cert-manager actor issuing real key pairs, or failing on demand.

mod cli_support;

use std::time::Duration;

use cli_support::{bin, run_with};
use druidctl::api::Certificate;
use druidctl::sim::apiserver::{ApiServer, HttpEndpoint};
use druidctl::sim::landscape::certmanager::{CertManager, CertManagerOptions};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

const NS: &str = "shoot--a";
const USAGE: i32 = 2;
const NOT_FOUND: i32 = 6;
const FAILED: i32 = 1;

struct Fx {
    server: ApiServer,
    _endpoint: HttpEndpoint,
    dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
    cm: CertManager,
}

impl Fx {
    async fn start() -> Fx {
        let server = ApiServer::new();
        server.register_upstream_crds().expect("CRDs");
        let client = server.client();
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
        let tls = |server_secret: &str, client_secret: Option<&str>| {
            let mut v = json!({"tlsCASecretRef": {"name": "ca-etcd"}, "serverTLSSecretRef": {"name": server_secret}});
            if let Some(c) = client_secret {
                v["clientTLSSecretRef"] = json!({"name": c});
            }
            v
        };
        let etcd = json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "etcd-main", "namespace": NS},
            "spec": {"replicas": 3, "labels": {"app": "etcd-statefulset"},
                     "etcd": {"clientUrlTls": tls("etcd-server-tls", Some("etcd-client-tls")), "peerUrlTls": tls("etcd-peer-tls", None)},
                     "backup": {}}
        });
        let etcd_ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"),
            "etcds",
        );
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &etcd_ar);
        api.create(&PostParams::default(), &serde_json::from_value(etcd).unwrap()).await.expect("etcd");
        let certs: Api<Certificate> = Api::namespaced(client.clone(), NS);
        for (name, secret) in [
            ("etcd-server", "etcd-server-tls"),
            ("etcd-client", "etcd-client-tls"),
            ("etcd-peer", "etcd-peer-tls"),
            ("ingress", "ingress-tls"),
        ] {
            let c: Certificate = serde_json::from_value(json!({
                "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"secretName": secret, "issuerRef": {"name": "etcd-ca", "kind": "Issuer"},
                         "commonName": name, "dnsNames": [format!("{name}.{NS}.svc")], "duration": "720h"}
            }))
            .unwrap();
            certs.create(&PostParams::default(), &c).await.expect("certificate");
        }
        server.add_user("cert-manager", &["system:masters"]);
        let cm = CertManager::start(
            server.client_for("cert-manager"),
            CertManagerOptions { namespace: Some(NS.into()), tick: Duration::from_millis(100) },
        );
        let endpoint = server.serve_http("127.0.0.1:0".parse().unwrap()).await.expect("serve");
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("config");
        std::fs::write(&kubeconfig, server.kubeconfig_yaml(&endpoint.url, "admin", Some(NS))).unwrap();
        let fx = Fx { server, _endpoint: endpoint, dir, kubeconfig, cm };
        for name in ["etcd-server", "etcd-client", "etcd-peer", "ingress"] {
            fx.wait_revision(name, 1).await;
        }
        fx.server.request_log().clear();
        fx
    }

    async fn run(&self, args: &[&str]) -> std::process::Output {
        run_with(bin(), args, &[("KUBECONFIG", self.kubeconfig.to_str().unwrap())], self.dir.path()).await
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
        self.server
            .request_log()
            .records()
            .into_iter()
            .filter(|r| r.user == "admin" && matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete"))
            .map(|r| format!("{} {}", r.verb, r.path.split('?').next().unwrap_or_default()))
            .collect()
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
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
