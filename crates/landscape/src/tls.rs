//! A member's TLS files, as the kubelet mounts them: a file the configuration names (etcd's
//! `client-transport-security.cert-file` in `etcd.conf.yaml`, the sidecar's `--server-cert` arg) is looked up in
//! the container's `volumeMounts` of the StatefulSet's pod template, and the Secret volume mounted there provides
//! it. The files are written into the member's directory on every (re)start: etcd reads them only on start, so a
//! renewed certificate is served once the member restarts. While the secret is missing the container does not
//! start (`ContainerCreating`, as a kubelet waits for a secret volume).
//!
//! etcd serves its client TLS on `https://127.0.0.1:<port>`, beside the plain-HTTP client URL the landscape's own
//! clients use (see `PLAYGROUND_DIFFERENCES` in [`crate::resources`]); the URL is published in the pod annotation
//! [`CLIENT_TLS_URL_ANNOTATION`](druid_api::names::CLIENT_TLS_URL_ANNOTATION). Peer traffic stays plain HTTP.

use std::path::Path;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::Value;

use super::Ctx;
use crate::etcd::process::ClientTls;
use crate::etcdconf::TransportSecurity;

/// The Secret volume container `container` of the StatefulSet `sts` (JSON) mounts at the directory of `path`, and
/// the key of `path` in it: `(volume, secret, key)`. `None` when no Secret volume is mounted there.
pub fn mounted_secret(sts: &Value, container: &str, path: &str) -> Option<(String, String, String)> {
    let pod = sts.pointer("/spec/template/spec")?;
    let c = pod["containers"].as_array()?.iter().find(|c| c["name"] == container)?;
    let (dir, file) = path.rsplit_once('/')?;
    let mount = c["volumeMounts"]
        .as_array()?
        .iter()
        .find(|m| m["mountPath"].as_str().is_some_and(|p| p.trim_end_matches('/') == dir))?;
    let volume = mount["name"].as_str()?;
    let v = pod["volumes"].as_array()?.iter().find(|v| v["name"] == volume)?;
    let secret = v.pointer("/secret/secretName")?.as_str()?;
    // A volume with `items` maps keys to paths; without, every key is a file of its name.
    let key = match v.pointer("/secret/items").and_then(Value::as_array) {
        Some(items) => items.iter().find(|i| i["path"] == file)?["key"].as_str()?.to_string(),
        None => file.to_string(),
    };
    Some((volume.to_string(), secret.to_string(), key))
}

/// The content of `path` in container `container` of pod `ns/<pod of sts>`, read from the mounted Secret:
/// `Err(message)` while it cannot be mounted.
async fn mounted_file(ctx: &Ctx, ns: &str, sts: &Value, container: &str, path: &str) -> Result<Vec<u8>, String> {
    let (volume, secret, key) = mounted_secret(sts, container, path)
        .ok_or_else(|| format!("{path} is not on a secret volume of container {container}"))?;
    let missing = |what: &str| format!("MountVolume.SetUp failed for volume \"{volume}\": {what}");
    let s = Api::<Secret>::namespaced(ctx.clients.backup_restore.clone(), ns)
        .get_opt(&secret)
        .await
        .map_err(|e| missing(&format!("reading secret {secret:?}: {e}")))?
        .ok_or_else(|| missing(&format!("secret {secret:?} not found")))?;
    s.data
        .unwrap_or_default()
        .remove(&key)
        .map(|b| b.0)
        .ok_or_else(|| missing(&format!("secret {secret:?} has no key {key:?}")))
}

/// The client TLS listener of pod `ns/pod`, from `client-transport-security` of its configuration and the
/// secrets the etcd container mounts (StatefulSet `sts`): `Ok(None)` without client TLS; `Err(message)` while the
/// files cannot be mounted.
pub(crate) async fn client_tls(
    ctx: &Ctx,
    ns: &str,
    pod: &str,
    sts: &Value,
    security: Option<&TransportSecurity>,
) -> Result<Option<ClientTls>, String> {
    let Some(security) = security.filter(|s| !s.cert_file.is_empty() && !s.key_file.is_empty()) else {
        return Ok(None);
    };
    let crt = mounted_file(ctx, ns, sts, "etcd", &security.cert_file).await?;
    let key = mounted_file(ctx, ns, sts, "etcd", &security.key_file).await?;
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

/// The value of `--<flag>=` in `args`.
pub fn arg<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter().find_map(|a| a.strip_prefix("--")?.strip_prefix(flag)?.strip_prefix('='))
}

/// The HTTPS configuration of the sidecar of pod `ns/<pod>`: its `--server-cert` / `--server-key` args (etcd-druid
/// passes them with `spec.backup.tls`, internal/component/statefulset/builder.go), read from the secret the
/// backup-restore container mounts there. `Ok(None)` without those args; `Err` while they cannot be mounted.
pub(crate) async fn backup_server_tls(
    ctx: &Ctx,
    ns: &str,
    sts: &Value,
    args: &[String],
) -> Result<Option<std::sync::Arc<tokio_rustls::rustls::ServerConfig>>, String> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let (Some(cert_path), Some(key_path)) = (arg(args, "server-cert"), arg(args, "server-key")) else {
        return Ok(None);
    };
    let crt = mounted_file(ctx, ns, sts, "backup-restore", cert_path).await?;
    let key = mounted_file(ctx, ns, sts, "backup-restore", key_path).await?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&crt).filter_map(Result::ok).collect();
    let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| format!("{key_path}: {e}"))?;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("key pair {cert_path}: {e}"))?;
    Ok(Some(std::sync::Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{StatefulSetInputs, stateful_set};

    #[test]
    fn the_files_the_config_names_come_from_the_mounted_secrets() {
        let mut etcd = crate::resources::tests::etcd(3);
        etcd.spec.etcd.client_url_tls = Some(
            serde_json::from_value(serde_json::json!({
            "tlsCASecretRef": {"name": "ca", "dataKey": "bundle.crt"}, "serverTLSSecretRef": {"name": "server"},
            "clientTLSSecretRef": {"name": "client"}}))
            .unwrap(),
        );
        let sts = stateful_set(&etcd, &StatefulSetInputs { replicas: 3, ..Default::default() });
        let conf = crate::etcdconf::render(&etcd);
        let security = conf.client_transport_security.unwrap();
        assert_eq!(
            mounted_secret(&sts, "etcd", &security.cert_file),
            Some(("etcd-server-tls".into(), "server".into(), "tls.crt".into()))
        );
        assert_eq!(
            mounted_secret(&sts, "etcd", &security.trusted_ca_file),
            Some(("etcd-ca".into(), "ca".into(), "bundle.crt".into()))
        );
        // The sidecar does not mount the server key pair.
        assert_eq!(mounted_secret(&sts, "backup-restore", &security.cert_file), None);
        assert_eq!(mounted_secret(&sts, "etcd", "/var/etcd/data/new.etcd"), None);
    }

    #[test]
    fn args_are_read_by_flag() {
        let args = vec!["server".to_string(), "--server-cert=/a/tls.crt".into(), "--server-port=8080".into()];
        assert_eq!(arg(&args, "server-cert"), Some("/a/tls.crt"));
        assert_eq!(arg(&args, "server"), None);
        assert_eq!(arg(&args, "server-key"), None);
    }
}
