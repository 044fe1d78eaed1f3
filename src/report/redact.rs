//! What of an object may go into a report: objects without `managedFields` and `last-applied-configuration`
//! (it can hold anything that was ever applied), Secrets only as a summary of what they hold.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use serde::Serialize;
use serde_json::Value;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

/// The annotation `kubectl apply` keeps the whole applied object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Removes what a report leaves out of every object.
pub fn object(v: &mut Value) {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove(LAST_APPLIED);
        }
    }
}

/// A Secret as a report shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SecretSummary {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// `type`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Key names, sorted; values never.
    pub keys: Vec<String>,
    /// The certificates found in its values, by key.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub certificates: BTreeMap<String, Vec<CertificateSummary>>,
}

/// The public facts of one X.509 certificate.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CertificateSummary {
    /// Subject DN.
    pub subject: String,
    /// DNS names and IP addresses of the subjectAltName extension.
    pub sans: Vec<String>,
    /// Issuer DN.
    pub issuer: String,
    /// Serial number, upper-case hex.
    pub serial: String,
    /// Not valid before (RFC 3339).
    pub not_before: String,
    /// Not valid after (RFC 3339).
    pub not_after: String,
    /// Whether it is a CA.
    pub is_ca: bool,
}

/// Summarises a Secret: type, key names, and the certificates in PEM values (private keys are only named).
pub fn secret_summary(s: &Secret) -> SecretSummary {
    let data = s.data.clone().unwrap_or_default();
    let mut keys: Vec<String> = data.keys().cloned().collect();
    keys.extend(s.string_data.clone().unwrap_or_default().into_keys());
    keys.sort();
    keys.dedup();
    let mut certificates = BTreeMap::new();
    for (k, v) in &data {
        let Ok(text) = std::str::from_utf8(&v.0) else { continue };
        let certs: Vec<CertificateSummary> =
            crate::certs::served::pem_certificates(text).iter().filter_map(|der| certificate(der)).collect();
        if !certs.is_empty() {
            certificates.insert(k.clone(), certs);
        }
    }
    SecretSummary {
        name: s.metadata.name.clone().unwrap_or_default(),
        namespace: s.metadata.namespace.clone().unwrap_or_default(),
        type_: s.type_.clone().unwrap_or_else(|| "Opaque".into()),
        keys,
        certificates,
    }
}

/// The public facts of a DER certificate.
pub fn certificate(der: &[u8]) -> Option<CertificateSummary> {
    let (_, c) = X509Certificate::from_der(der).ok()?;
    let mut sans = Vec::new();
    if let Ok(Some(ext)) = c.subject_alternative_name() {
        for n in &ext.value.general_names {
            match n {
                GeneralName::DNSName(d) => sans.push(d.to_string()),
                GeneralName::IPAddress(ip) => sans.push(match ip.len() {
                    4 => std::net::Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3]).to_string(),
                    16 => {
                        let mut b = [0u8; 16];
                        b.copy_from_slice(ip);
                        std::net::Ipv6Addr::from(b).to_string()
                    }
                    _ => format!("{ip:?}"),
                }),
                other => sans.push(format!("{other:?}")),
            }
        }
    }
    let time = |t: x509_parser::time::ASN1Time| {
        jiff::Timestamp::from_second(t.timestamp()).map(|t| t.to_string()).unwrap_or_default()
    };
    Some(CertificateSummary {
        subject: c.subject().to_string(),
        sans,
        issuer: c.issuer().to_string(),
        serial: crate::certs::served::serial_of_der(der).unwrap_or_default(),
        not_before: time(c.validity().not_before),
        not_after: time(c.validity().not_after),
        is_ca: c.is_ca(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    #[test]
    fn a_secret_shows_key_names_and_certificates_never_values() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["etcd-main-client".into()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, "etcd-server");
        let cert = params.self_signed(&key).unwrap();
        let mut data = BTreeMap::new();
        data.insert("tls.crt".to_string(), ByteString(cert.pem().into_bytes()));
        data.insert("tls.key".to_string(), ByteString(key.serialize_pem().into_bytes()));
        let secret = Secret {
            metadata: kube::core::ObjectMeta { name: Some("etcd-server-tls".into()), ..Default::default() },
            data: Some(data),
            type_: Some("kubernetes.io/tls".into()),
            ..Default::default()
        };
        let s = secret_summary(&secret);
        assert_eq!(s.keys, ["tls.crt", "tls.key"]);
        let c = &s.certificates["tls.crt"][0];
        assert_eq!(c.subject, "CN=etcd-server");
        assert_eq!(c.sans, ["etcd-main-client"]);
        let text = serde_saphyr::to_string(&s).unwrap();
        assert!(!text.contains("PRIVATE KEY") && !text.contains("BEGIN CERTIFICATE"), "{text}");
    }

    #[test]
    fn managed_fields_and_last_applied_are_left_out() {
        let mut v = serde_json::json!({"metadata": {"name": "x", "managedFields": [{}],
            "annotations": {LAST_APPLIED: "{}", "keep": "y"}}});
        object(&mut v);
        assert_eq!(v, serde_json::json!({"metadata": {"name": "x", "annotations": {"keep": "y"}}}));
    }
}
