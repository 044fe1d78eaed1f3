//! Which Certificates an Etcd depends on: every Certificate in the Etcd's namespace whose `spec.secretName`
//! is one of the TLS secrets the Etcd references (`spec.etcd.clientUrlTls`, `spec.etcd.peerUrlTls`,
//! `spec.backup.tls`: CA, server and client secret refs).

use crate::api::{Certificate, Etcd};

/// The Certificates among `certs` that write a TLS secret of `etcd`, sorted by name.
pub fn certificates_for_etcd<'a>(etcd: &Etcd, certs: &'a [Certificate]) -> Vec<&'a Certificate> {
    let secrets = etcd.tls_secret_names();
    let ns = etcd.metadata.namespace.as_deref();
    let mut out: Vec<&Certificate> = certs
        .iter()
        .filter(|c| c.metadata.namespace.as_deref() == ns && secrets.contains(&c.spec.secret_name))
        .collect();
    out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cert(ns: &str, name: &str, secret: &str) -> Certificate {
        serde_json::from_value(json!({
            "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"secretName": secret, "issuerRef": {"name": "ca"}}
        }))
        .unwrap()
    }

    fn etcd() -> Etcd {
        let tls = |server: &str, client: Option<&str>| {
            let mut v = json!({"tlsCASecretRef": {"name": "ca-etcd"}, "serverTLSSecretRef": {"name": server}});
            if let Some(c) = client {
                v["clientTLSSecretRef"] = json!({"name": c});
            }
            v
        };
        serde_json::from_value(json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "etcd-main", "namespace": "shoot"},
            "spec": {"replicas": 3, "labels": {}, "etcd": {
                "clientUrlTls": tls("etcd-server", Some("etcd-client")),
                "peerUrlTls": tls("etcd-peer", None)},
                "backup": {"tls": tls("backup-server", None)}}
        }))
        .unwrap()
    }

    #[test]
    fn picks_certificates_behind_client_peer_and_backup_tls_secrets_in_the_etcds_namespace() {
        let certs = vec![
            cert("shoot", "server", "etcd-server"),
            cert("shoot", "client", "etcd-client"),
            cert("shoot", "peer", "etcd-peer"),
            cert("shoot", "backup", "backup-server"),
            cert("shoot", "ca", "ca-etcd"),
            cert("shoot", "unrelated", "ingress-tls"),
            cert("other", "server-elsewhere", "etcd-server"),
        ];
        let names: Vec<_> =
            certificates_for_etcd(&etcd(), &certs).iter().map(|c| c.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["backup", "ca", "client", "peer", "server"]);
    }

    #[test]
    fn an_etcd_without_tls_depends_on_no_certificate() {
        let mut e = etcd();
        e.spec.etcd.client_url_tls = None;
        e.spec.etcd.peer_url_tls = None;
        e.spec.backup.tls = None;
        assert!(certificates_for_etcd(&e, &[cert("shoot", "server", "etcd-server")]).is_empty());
    }
}
