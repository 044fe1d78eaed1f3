//! A member's client TLS, as the kubelet mounts it: when the Etcd has `spec.etcd.clientUrlTls`, the key pair of
//! its `serverTLSSecretRef` secret (`tls.crt`, `tls.key`) is written into the member's directory on every
//! (re)start and etcd serves `https://127.0.0.1:<port>` with it, beside the plain-HTTP client URL the
//! landscape's own clients use. etcd reads the files only on start, so a renewed certificate is served once the
//! member restarts. While the secret is missing the container does not start (`ContainerCreating`, as a
//! kubelet waits for a secret volume). The URL is published in the pod annotation
//! [`CLIENT_TLS_URL_ANNOTATION`](druid_api::names::CLIENT_TLS_URL_ANNOTATION). Peer traffic stays plain HTTP.

use std::path::Path;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::Ctx;
use crate::etcd::process::ClientTls;
use druid_api::Etcd;

/// The Etcd `ns/etcd` and the server key pair (`tls.crt`, `tls.key` PEM) of the `TlsConfig` `which` picks from
/// it, as the kubelet mounts it into `volume`: `Ok(None)` when the Etcd has no such TLS; `Err(message)` while
/// the secret cannot be mounted.
async fn mounted_key_pair(
    ctx: &Ctx,
    ns: &str,
    etcd: &str,
    volume: &str,
    which: impl Fn(&Etcd) -> Option<druid_api::etcd::TlsConfig>,
) -> Result<Option<(Vec<u8>, Vec<u8>)>, String> {
    let client = ctx.clients.backup_restore.clone();
    let obj = Api::<Etcd>::namespaced(client.clone(), ns)
        .get_opt(etcd)
        .await
        .map_err(|e| format!("reading etcd {ns}/{etcd}: {e}"))?
        .ok_or_else(|| format!("etcd {ns}/{etcd} not found"))?;
    let Some(tls) = which(&obj) else { return Ok(None) };
    let secret_ns = tls.server_tls_secret_ref.namespace.clone().unwrap_or_else(|| ns.to_string());
    let name = &tls.server_tls_secret_ref.name;
    let missing = |what: &str| format!("MountVolume.SetUp failed for volume \"{volume}\": {what}");
    let secret = Api::<Secret>::namespaced(client, &secret_ns)
        .get_opt(name)
        .await
        .map_err(|e| missing(&format!("reading secret {name:?}: {e}")))?
        .ok_or_else(|| missing(&format!("secret {name:?} not found")))?;
    let data = secret.data.unwrap_or_default();
    let (Some(crt), Some(key)) = (data.get("tls.crt"), data.get("tls.key")) else {
        return Err(missing(&format!("secret {name:?} has no tls.crt and tls.key")));
    };
    Ok(Some((crt.0.clone(), key.0.clone())))
}

/// The client TLS listener for pod `ns/pod` of Etcd `etcd`: `Ok(None)` when the Etcd has no client TLS;
/// `Err(message)` while the secret cannot be mounted.
pub(crate) async fn client_tls(ctx: &Ctx, ns: &str, etcd: &str, pod: &str) -> Result<Option<ClientTls>, String> {
    let pair =
        mounted_key_pair(ctx, ns, etcd, "client-url-etcd-server-tls", |e| e.spec.etcd.client_url_tls.clone()).await?;
    let Some((crt, key)) = pair else { return Ok(None) };
    let dir = ctx.opts.state_dir.join("tls").join(ns).join(pod);
    let cert_file = dir.join("tls.crt");
    let key_file = dir.join("tls.key");
    write(&dir, &cert_file, &crt, 0o644).and_then(|_| write(&dir, &key_file, &key, 0o600))?;
    Ok(Some(ClientTls { port: ctx.tls_port(ns, pod), cert_file, key_file }))
}

fn write(dir: &Path, file: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    std::fs::write(file, bytes).map_err(|e| format!("write {}: {e}", file.display()))?;
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", file.display()))
}

/// The HTTPS configuration of the sidecar of Etcd `ns/etcd`: `Ok(None)` without `spec.backup.tls`; `Err` while
/// the server secret cannot be mounted.
pub(crate) async fn backup_server_tls(
    ctx: &Ctx,
    ns: &str,
    etcd: &str,
) -> Result<Option<std::sync::Arc<tokio_rustls::rustls::ServerConfig>>, String> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let volume = "backup-restore-server-tls";
    let Some((crt, key)) = mounted_key_pair(ctx, ns, etcd, volume, |e| e.spec.backup.tls.clone()).await? else {
        return Ok(None);
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&crt).filter_map(Result::ok).collect();
    let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| format!("tls.key of {volume}: {e}"))?;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("key pair of {volume}: {e}"))?;
    Ok(Some(std::sync::Arc::new(config)))
}
