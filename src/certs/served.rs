//! The certificate a member really serves: its client TLS endpoint, a TLS handshake that reads the presented
//! certificate, and its serial number compared with the one cert-manager issued into the Etcd's server TLS
//! secret (`spec.etcd.clientUrlTls.serverTLSSecretRef`). etcd loads its certificates only on start, so after a
//! renewal a member that was not restarted keeps serving the old serial.
//!
//! Where a member serves client TLS: the cert-renewal check reaches it as maintenance does
//! ([`crate::tasks::etcd_access::member_url`]: the pod annotation [`CLIENT_TLS_URL_ANNOTATION`] the playground
//! sets, the member's DNS name inside the cluster, or a port-forward through the API server from outside).
//! [`member_client_tls_url`] reads the annotation, else `https://<status.podIP>:<clientPort>`. The handshake does not authenticate the member (no CA check, no
//! client certificate): it only reads what is presented.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use tokio_rustls::rustls;
use tokio_rustls::rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{DigitallySignedStruct, SignatureScheme};

use crate::api::Etcd;

pub use druid_api::names::CLIENT_TLS_URL_ANNOTATION;

/// Default etcd client port (`spec.etcd.clientPort` unset).
pub const DEFAULT_CLIENT_PORT: i32 = 2379;

/// One DER TLV: `(tag, value, rest)`.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        (rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | *b as usize), &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// Serial number of a DER X.509 certificate, as upper-case hex without leading zero bytes (like
/// `openssl x509 -serial`). `None` when the bytes are not a certificate.
pub fn serial_of_der(der: &[u8]) -> Option<String> {
    let (tag, cert, _) = tlv(der)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, tbs, _) = tlv(cert)?;
    if tag != 0x30 {
        return None;
    }
    let (mut tag, mut value, rest) = tlv(tbs)?;
    if tag == 0xa0 {
        // [0] EXPLICIT version, then the serial.
        (tag, value, _) = tlv(rest)?;
    }
    if tag != 0x02 || value.is_empty() {
        return None;
    }
    let start = value.iter().position(|b| *b != 0).unwrap_or(value.len() - 1);
    Some(value[start..].iter().map(|b| format!("{b:02X}")).collect())
}

/// The DER certificates of a PEM bundle, in order (sections that do not decode are skipped).
pub fn pem_certificates(pem: &str) -> Vec<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem.as_bytes()).filter_map(Result::ok).map(|c| c.to_vec()).collect()
}

/// Serial number of the first certificate of a PEM bundle.
pub fn serial_of_pem(pem: &str) -> Option<String> {
    pem_certificates(pem).first().and_then(|d| serial_of_der(d))
}

/// Where the member of `pod` serves client TLS (see the module docs); `None` when the pod has no IP yet.
pub fn member_client_tls_url(pod: &Pod, etcd: &Etcd) -> Option<String> {
    if let Some(url) = pod.metadata.annotations.as_ref().and_then(|a| a.get(CLIENT_TLS_URL_ANNOTATION)) {
        return Some(url.clone());
    }
    let ip = pod.status.as_ref()?.pod_ip.clone().filter(|ip| !ip.is_empty())?;
    let port = etcd.spec.etcd.client_port.unwrap_or(DEFAULT_CLIENT_PORT);
    let host = if ip.contains(':') { format!("[{ip}]") } else { ip };
    Some(format!("https://{host}:{port}"))
}

/// The server certificate secret of the Etcd's client TLS and the serial of its `tls.crt`:
/// `Ok(None)` when the Etcd has no client TLS.
pub async fn issued_server_serial(client: &kube::Client, etcd: &Etcd) -> Result<Option<(String, String)>, String> {
    let Some(tls) = etcd.spec.etcd.client_url_tls.as_ref() else { return Ok(None) };
    let ns = tls
        .server_tls_secret_ref
        .namespace
        .clone()
        .or_else(|| etcd.metadata.namespace.clone())
        .unwrap_or_else(|| "default".into());
    let name = tls.server_tls_secret_ref.name.clone();
    let secret = Api::<Secret>::namespaced(client.clone(), &ns)
        .get(&name)
        .await
        .map_err(|e| format!("reading secret {ns}/{name}: {e}"))?;
    let crt = secret.data.as_ref().and_then(|d| d.get("tls.crt")).map(|b| String::from_utf8_lossy(&b.0).into_owned());
    let serial = crt
        .as_deref()
        .and_then(serial_of_pem)
        .ok_or_else(|| format!("secret {ns}/{name} holds no readable certificate in tls.crt"))?;
    Ok(Some((name, serial)))
}

/// Accepts whatever certificate is presented (the handshake signatures are still checked): the probe reads
/// the served certificate, it does not authenticate the member.
#[derive(Debug)]
struct ReadOnly(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for ReadOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Connects to `url` (`https://host:port`), completes a TLS handshake and returns the serial of the presented
/// leaf certificate. The error says why (address, refused, timed out, not TLS).
pub async fn served_serial(url: &str, timeout: Duration) -> Result<String, String> {
    let authority = url.strip_prefix("https://").ok_or_else(|| format!("{url} is not an https:// URL"))?;
    let authority = authority.split('/').next().unwrap_or_default();
    let (host, port) = authority.rsplit_once(':').ok_or_else(|| format!("{url} names no port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
    let port: u16 = port.parse().map_err(|_| format!("{url} names no valid port"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ReadOnly(provider)))
        .with_no_client_auth();
    let name = ServerName::try_from(host.clone()).map_err(|e| format!("{url}: invalid host: {e}"))?;
    let handshake = async {
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await.map_err(|e| format!("{url}: {e}"))?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("{url}: TLS handshake failed: {e}"))?;
        let leaf = tls.get_ref().1.peer_certificates().and_then(|c| c.first().cloned());
        leaf.ok_or_else(|| format!("{url}: no certificate presented"))
    };
    let leaf =
        tokio::time::timeout(timeout, handshake).await.map_err(|_| format!("{url}: timed out after {timeout:?}"))??;
    serial_of_der(&leaf).ok_or_else(|| format!("{url}: the presented certificate is not readable"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::{SignedDuration, Timestamp};
    use landscape::certmanager::generate_key_pair;

    #[test]
    fn serials_of_generated_certificates_are_read_and_differ() {
        let now = Timestamp::now();
        let later = now.checked_add(SignedDuration::from_hours(1)).unwrap();
        let (a, _) = generate_key_pair("etcd", &["etcd-main-local".into()], now, later).unwrap();
        let (b, _) = generate_key_pair("etcd", &["etcd-main-local".into()], now, later).unwrap();
        let (sa, sb) = (serial_of_pem(&a).unwrap(), serial_of_pem(&b).unwrap());
        assert!(sa.len() >= 2 && sa.chars().all(|c| c.is_ascii_hexdigit()), "{sa}");
        assert_ne!(sa, sb);
        assert_eq!(pem_certificates(&format!("{a}{b}")).len(), 2);
    }

    #[test]
    fn a_known_serial_is_read_without_its_sign_padding() {
        let mut params = rcgen::CertificateParams::new(vec!["x".to_string()]).unwrap();
        params.serial_number = Some(rcgen::SerialNumber::from(vec![0x00, 0x8f, 0x01, 0x02]));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(serial_of_der(cert.der()), Some("8F0102".into()));
        assert_eq!(serial_of_der(b"not a certificate"), None);
        assert_eq!(serial_of_pem("no pem here"), None);
    }

    #[test]
    fn the_annotation_wins_over_the_pod_ip() {
        let etcd: Etcd = serde_json::from_value(serde_json::json!({"apiVersion": "druid.gardener.cloud/v1alpha1",
            "kind": "Etcd", "metadata": {"name": "e", "namespace": "ns"},
            "spec": {"replicas": 3, "labels": {}, "etcd": {"clientPort": 2479}, "backup": {}}}))
        .unwrap();
        let mut pod: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "e-0"},
            "status": {"podIP": "10.1.2.3"}}))
        .unwrap();
        assert_eq!(member_client_tls_url(&pod, &etcd).as_deref(), Some("https://10.1.2.3:2479"));
        pod.metadata.annotations =
            Some([(CLIENT_TLS_URL_ANNOTATION.to_string(), "https://127.0.0.1:4000".to_string())].into());
        assert_eq!(member_client_tls_url(&pod, &etcd).as_deref(), Some("https://127.0.0.1:4000"));
        pod.metadata.annotations = None;
        pod.status = None;
        assert_eq!(member_client_tls_url(&pod, &etcd), None);
    }
}
