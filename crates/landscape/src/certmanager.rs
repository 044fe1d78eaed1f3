//! cert-manager's trigger and issuing controllers for `Certificate`s (`cert-manager.io/v1`), over the
//! Kubernetes API only (seeds/000, DOMAIN.md "Certificate renewal").
//!
//! - A Certificate without an issued revision, or past its `renewalTime`, gets `Issuing=True`.
//! - On `Issuing=True` the actor issues a real x509 key pair (rcgen) into `spec.secretName`
//!   (`tls.crt`, `tls.key`, `ca.crt`), bumps `status.revision`, sets notBefore/notAfter/renewalTime and
//!   `Ready=True`, removes `Issuing`, `lastFailureTime` and `failedIssuanceAttempts`.
//! - While issuance is made to fail ([`CertManager::set_failing`]) it sets `Issuing=False`, `lastFailureTime`
//!   and bumps `failedIssuanceAttempts`; it retries on its own after [`retry_backoff`], and a manual
//!   `Issuing=True` (renew) bypasses that backoff, as in cert-manager.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::runtime::reflector::Store;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use druid_api::Certificate;
use druid_api::certificate::{CONDITION_ISSUING, CONDITION_READY};
use kube::api::ApiResource;

/// `Api` resource of cert-manager's `Certificate`.
fn certificate_resource() -> ApiResource {
    ApiResource::erase::<Certificate>(&())
}

/// How long cert-manager's trigger controller waits after a failed issuance before it sets `Issuing` again on
/// its own (`shouldBackoffReissuingOnFailure` in cert-manager `pkg/controller/certificates/trigger/
/// trigger_controller.go`, since v1.8 with `status.failedIssuanceAttempts`; v1.21 makes both bounds flags): one hour, doubled for every
/// further consecutive failure, never more than 32 hours. A status without the attempts counter (written
/// before v1.6) waits the old fixed hour.
pub fn retry_backoff(failed_issuance_attempts: Option<i64>) -> SignedDuration {
    const MAX_HOURS: i64 = 32;
    let doublings = failed_issuance_attempts.map_or(0, |n| (n - 1).clamp(0, 6)) as u32;
    SignedDuration::from_hours((1i64 << doublings).min(MAX_HOURS))
}

/// Default certificate lifetime when `spec.duration` is unset (cert-manager: 90 days).
pub const DEFAULT_DURATION: SignedDuration = SignedDuration::from_hours(2160);

/// Tunables of the cert-manager actor.
#[derive(Debug, Clone)]
pub struct CertManagerOptions {
    /// Only act in this namespace (`None`: all namespaces).
    pub namespace: Option<String>,
    /// Period of the loop.
    pub tick: Duration,
    /// The CA Issuers, as `(issuer name, CA secret name)`: cert-manager's CA issuer
    /// (`Issuer.spec.ca.secretName`) signs with the key pair in that secret and puts the CA certificate in
    /// `ca.crt` of what it issues. The Issuer CRD is not installed in the test bed, so the Issuers are declared
    /// here; any other issuer name self-signs (cert-manager's SelfSigned issuer).
    pub ca_issuers: Vec<(String, String)>,
}

impl Default for CertManagerOptions {
    fn default() -> Self {
        CertManagerOptions { namespace: None, tick: Duration::from_millis(200), ca_issuers: Vec::new() }
    }
}

/// Certificates (`namespace`, `name`) whose issuance fails; `("*", "*")` makes every issuance fail.
#[derive(Clone, Default)]
pub struct IssuanceFaults(Arc<Mutex<HashSet<(String, String)>>>);

impl IssuanceFaults {
    /// Makes issuance of `ns/name` fail (or work again); `"*"` matches any.
    pub fn set(&self, ns: &str, name: &str, failing: bool) {
        let mut set = self.0.lock().expect("faults");
        let key = (ns.to_string(), name.to_string());
        if failing {
            set.insert(key);
        } else {
            set.remove(&key);
        }
    }
    /// Whether issuance of `ns/name` fails.
    pub fn is_failing(&self, ns: &str, name: &str) -> bool {
        let set = self.0.lock().expect("faults");
        set.iter().any(|(n, c)| (n == "*" || n == ns) && (c == "*" || c == name))
    }
}

/// The running cert-manager actor; stops on [`CertManager::stop`] and on drop.
pub struct CertManager {
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
    faults: IssuanceFaults,
}

impl CertManager {
    /// Starts the actor on `client`.
    pub fn start(client: Client, opts: CertManagerOptions) -> CertManager {
        let cancel = CancellationToken::new();
        let faults = IssuanceFaults::default();
        let task = tokio::spawn(run(client, opts, cancel.clone(), faults.clone()));
        CertManager { cancel, task: Some(task), faults }
    }
    /// Makes issuance of `ns/name` fail (or work again); `"*"` matches any.
    pub fn set_failing(&self, ns: &str, name: &str, failing: bool) {
        self.faults.set(ns, name, failing);
    }
    /// The fault switch, shareable with other owners (the landscape, the playground).
    pub fn faults(&self) -> IssuanceFaults {
        self.faults.clone()
    }
    /// Stops the actor.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for CertManager {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// The actor loop (also spawned by the landscape).
pub(crate) async fn run(client: Client, opts: CertManagerOptions, cancel: CancellationToken, faults: IssuanceFaults) {
    // cert-manager's issuing and trigger controllers read Secrets from its informer cache, not from the API
    // server on every sync (pkg/controller/certificates/trigger, issuing: `secretLister`).
    let secret_api: Api<Secret> = match &opts.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let secrets = crate::cache::spawn_store(secret_api, cancel.clone());
    loop {
        if let Err(e) = reconcile_all(&client, &opts, &faults, &secrets).await {
            tracing::debug!(error = %e, "cert-manager actor: reconcile failed; retrying");
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(opts.tick) => {}
        }
    }
}

async fn reconcile_all(
    client: &Client,
    opts: &CertManagerOptions,
    faults: &IssuanceFaults,
    secrets: &Store<Secret>,
) -> Result<(), kube::Error> {
    let ar = certificate_resource();
    let api: Api<DynamicObject> = match &opts.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    for obj in api.list(&ListParams::default()).await?.items {
        let ns = obj.metadata.namespace.clone().unwrap_or_default();
        let name = obj.metadata.name.clone().unwrap_or_default();
        if let Err(e) = reconcile(client, &ns, &name, obj, faults, &opts.ca_issuers, secrets).await {
            tracing::debug!(error = %e, certificate = %format!("{ns}/{name}"), "cert-manager actor: certificate failed");
        }
    }
    Ok(())
}

/// RFC 3339 with second precision, as cert-manager writes times.
fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Parses a Go duration (`2160h`, `1h30m`, `90m0s`).
pub fn parse_go_duration(s: &str) -> Option<SignedDuration> {
    let mut total = 0f64;
    let mut num = String::new();
    let mut chars = s.trim().chars().peekable();
    chars.peek()?;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        let mut unit = c.to_string();
        if c == 'm' && chars.peek() == Some(&'s') {
            unit.push(chars.next()?);
        }
        let n: f64 = num.parse().ok()?;
        num.clear();
        total += n * match unit.as_str() {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return None,
        };
    }
    if !num.is_empty() {
        return None;
    }
    Some(SignedDuration::from_secs_f64(total))
}

async fn reconcile(
    client: &Client,
    ns: &str,
    name: &str,
    mut obj: DynamicObject,
    faults: &IssuanceFaults,
    ca_issuers: &[(String, String)],
    secrets: &Store<Secret>,
) -> Result<(), kube::Error> {
    let cert: Certificate = match serde_json::to_value(&obj).ok().and_then(|v| serde_json::from_value(v).ok()) {
        Some(c) => c,
        None => return Ok(()),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &certificate_resource());
    let now = Timestamp::now();
    let status = cert.status.clone().unwrap_or_default();
    let issuing = cert.condition(CONDITION_ISSUING);
    match issuing.map(|c| c.status.as_str()) {
        Some("True") => {
            if faults.is_failing(ns, name) {
                let attempts = status.failed_issuance_attempts.unwrap_or(0) + 1;
                let data = &mut obj.data;
                ensure_status(data);
                data["status"]["lastFailureTime"] = json!(rfc3339(now));
                data["status"]["failedIssuanceAttempts"] = json!(attempts);
                set_condition(
                    data,
                    CONDITION_ISSUING,
                    "False",
                    "Failed",
                    "The certificate request has failed to complete and will be retried: issuer is not ready",
                    now,
                );
                api.replace_status(name, &PostParams::default(), &obj).await?;
            } else {
                if issue(client, ns, &cert, &mut obj, now, ca_issuers).await? {
                    api.replace_status(name, &PostParams::default(), &obj).await?;
                }
            }
        }
        Some("False") => {
            // Automatic retry once the backoff has passed (seeds/000).
            if let Some(last_failure) = status.last_failure_time.map(|t| t.0)
                && let Ok(at) = last_failure.checked_add(retry_backoff(status.failed_issuance_attempts))
                && now >= at
            {
                set_condition(
                    &mut obj.data,
                    CONDITION_ISSUING,
                    "True",
                    "Retrying",
                    "Retrying issuance after backoff",
                    now,
                );
                api.replace_status(name, &PostParams::default(), &obj).await?;
            }
        }
        _ => {
            // A Secret the cache does not hold yet is looked up before it counts as missing.
            let secret_missing = crate::cache::cached(secrets, ns, &cert.spec.secret_name).is_none()
                && Api::<Secret>::namespaced(client.clone(), ns).get_opt(&cert.spec.secret_name).await?.is_none();
            let reason = if status.revision.is_none() || secret_missing {
                Some(("DoesNotExist", "Issuing certificate as Secret does not exist"))
            } else if status.renewal_time.as_ref().is_some_and(|t| now >= t.0) {
                Some(("Renewing", "Renewing certificate as renewal was scheduled at the renewal time"))
            } else {
                None
            };
            if let Some((reason, message)) = reason {
                ensure_status(&mut obj.data);
                set_condition(&mut obj.data, CONDITION_ISSUING, "True", reason, message, now);
                api.replace_status(name, &PostParams::default(), &obj).await?;
            }
        }
    }
    Ok(())
}

fn ensure_status(data: &mut Value) {
    if !data.get("status").is_some_and(Value::is_object) {
        data["status"] = json!({});
    }
}

fn set_condition(data: &mut Value, type_: &str, status: &str, reason: &str, message: &str, now: Timestamp) {
    ensure_status(data);
    let generation = data.pointer("/metadata/generation").cloned();
    let conds = data["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let mut out: Vec<Value> = conds.into_iter().filter(|c| c["type"] != type_).collect();
    let mut c = json!({"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": rfc3339(now)});
    if let Some(g) = generation {
        c["observedGeneration"] = g;
    }
    out.push(c);
    data["status"]["conditions"] = Value::Array(out);
}

fn remove_condition(data: &mut Value, type_: &str) {
    if let Some(conds) = data["status"]["conditions"].as_array_mut() {
        conds.retain(|c| c["type"] != type_);
    }
}

/// A fresh key pair and self-signed certificate valid `[not_before, not_after]`: `(cert PEM, key PEM)`.
pub fn generate_key_pair(
    common_name: &str,
    dns_names: &[String],
    not_before: Timestamp,
    not_after: Timestamp,
) -> Result<(String, String), rcgen::Error> {
    generate_signed(&KeyPairRequest { common_name, dns_names, not_before, not_after, is_ca: false }, None)
}

/// What a key pair is issued for.
pub struct KeyPairRequest<'a> {
    /// Subject common name.
    pub common_name: &'a str,
    /// DNS SANs.
    pub dns_names: &'a [String],
    /// Start of validity.
    pub not_before: Timestamp,
    /// End of validity.
    pub not_after: Timestamp,
    /// A CA certificate (basic constraints `CA:TRUE`), as `spec.isCA` asks.
    pub is_ca: bool,
}

/// The signing CA of a CA Issuer: the common name of its certificate and its private key (PEM), as held in
/// the Issuer's secret.
pub struct SigningCa<'a> {
    /// Subject common name of the CA certificate (the issuer name of what it signs).
    pub common_name: &'a str,
    /// PEM private key of the CA.
    pub key_pem: &'a str,
}

/// A fresh key pair and its certificate, signed by `ca` (a CA Issuer) or self-signed: `(cert PEM, key PEM)`.
pub fn generate_signed(req: &KeyPairRequest<'_>, ca: Option<&SigningCa<'_>>) -> Result<(String, String), rcgen::Error> {
    let mut params = rcgen::CertificateParams::new(req.dns_names.to_vec())?;
    params.distinguished_name.push(rcgen::DnType::CommonName, req.common_name);
    params.serial_number = Some(rcgen::SerialNumber::from(rand::random::<u64>() >> 1));
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + Duration::from_secs(req.not_before.as_second().max(0) as u64);
    params.not_after = epoch + Duration::from_secs(req.not_after.as_second().max(0) as u64);
    if req.is_ca {
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::DigitalSignature,
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
    }
    let key = rcgen::KeyPair::generate()?;
    let cert = match ca {
        None => params.self_signed(&key)?,
        Some(ca) => {
            // The issuer is named by its subject and identified by its key (rcgen derives the authority key
            // identifier from the key), which is all a verifier matches on.
            let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
            ca_params.distinguished_name.push(rcgen::DnType::CommonName, ca.common_name);
            ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            let ca_key = rcgen::KeyPair::from_pem(ca.key_pem)?;
            let issuer = rcgen::Issuer::new(ca_params, ca_key);
            params.signed_by(&key, &issuer)?
        }
    };
    Ok((cert.pem(), key.serialize_pem()))
}

/// The playground's one CA Issuer: `etcd-ca`, backed by the secret of Certificate `ca-etcd` (isCA).
pub fn playground_ca_issuers() -> Vec<(String, String)> {
    vec![("etcd-ca".into(), "ca-etcd".into())]
}

async fn issue(
    client: &Client,
    ns: &str,
    cert: &Certificate,
    obj: &mut DynamicObject,
    now: Timestamp,
    ca_issuers: &[(String, String)],
) -> Result<bool, kube::Error> {
    let duration = cert.spec.duration.as_deref().and_then(parse_go_duration).unwrap_or(DEFAULT_DURATION);
    // cert-manager renews at 2/3 of the lifetime unless renewBefore says otherwise.
    let renew_before = cert.spec.renew_before.as_deref().and_then(parse_go_duration).unwrap_or(duration / 3);
    let not_after = now.checked_add(duration).unwrap_or(now);
    let renewal = not_after.checked_sub(renew_before).unwrap_or(now);
    let name = cert.metadata.name.clone().unwrap_or_default();
    let cn = cert.spec.common_name.clone().unwrap_or_else(|| name.clone());
    let req = KeyPairRequest {
        common_name: &cn,
        dns_names: &cert.spec.dns_names,
        not_before: now,
        not_after,
        is_ca: cert.spec.is_ca.unwrap_or(false),
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let ca_secret = ca_issuers.iter().find(|(issuer, _)| *issuer == cert.spec.issuer_ref.name).map(|(_, s)| s.as_str());
    let (crt, key, ca_crt) = match ca_secret {
        None => {
            let (crt, key) = generate_signed(&req, None)
                .map_err(|e| kube::Error::Service(format!("generate key pair: {e}").into()))?;
            (crt.clone(), key, crt)
        }
        Some(ca_secret) => {
            // Until the CA's secret holds a key pair, the request cannot be signed; the next pass retries.
            let Some(ca) = secrets.get_opt(ca_secret).await? else { return Ok(false) };
            let data = ca.data.clone().unwrap_or_default();
            let text = |k: &str| data.get(k).map(|b| String::from_utf8_lossy(&b.0).into_owned());
            let ca_cn = ca.metadata.annotations.as_ref().and_then(|a| a.get("cert-manager.io/common-name")).cloned();
            let (Some(ca_crt), Some(ca_key), Some(ca_cn)) = (text("tls.crt"), text("tls.key"), ca_cn) else {
                return Ok(false);
            };
            let (crt, key) = generate_signed(&req, Some(&SigningCa { common_name: &ca_cn, key_pem: &ca_key }))
                .map_err(|e| kube::Error::Service(format!("sign key pair with {ca_secret}: {e}").into()))?;
            (crt, key, ca_crt)
        }
    };
    let data: BTreeMap<String, ByteString> = [
        ("tls.crt".to_string(), ByteString(crt.into_bytes())),
        ("tls.key".to_string(), ByteString(key.into_bytes())),
        ("ca.crt".to_string(), ByteString(ca_crt.into_bytes())),
    ]
    .into();
    let annotations: BTreeMap<String, String> = [
        ("cert-manager.io/certificate-name".to_string(), name.clone()),
        ("cert-manager.io/common-name".to_string(), cn),
        ("cert-manager.io/issuer-name".to_string(), cert.spec.issuer_ref.name.clone()),
    ]
    .into();
    match secrets.get_opt(&cert.spec.secret_name).await? {
        Some(mut s) => {
            s.data = Some(data);
            s.metadata.annotations.get_or_insert_default().extend(annotations);
            secrets.replace(&cert.spec.secret_name, &PostParams::default(), &s).await?;
        }
        None => {
            let mut s = Secret { type_: Some("kubernetes.io/tls".into()), data: Some(data), ..Default::default() };
            s.metadata.name = Some(cert.spec.secret_name.clone());
            s.metadata.annotations = Some(annotations);
            secrets.create(&PostParams::default(), &s).await?;
        }
    }
    let revision = cert.status.as_ref().and_then(|s| s.revision).unwrap_or(0) + 1;
    let data = &mut obj.data;
    ensure_status(data);
    let st = data["status"].as_object_mut().expect("status object");
    st.remove("lastFailureTime");
    st.remove("failedIssuanceAttempts");
    st.insert("revision".into(), json!(revision));
    st.insert("notBefore".into(), json!(rfc3339(now)));
    st.insert("notAfter".into(), json!(rfc3339(not_after)));
    st.insert("renewalTime".into(), json!(rfc3339(renewal)));
    remove_condition(data, CONDITION_ISSUING);
    set_condition(data, CONDITION_READY, "True", "Ready", "Certificate is up to date and has not expired", now);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_backoff_doubles_from_one_hour_up_to_32_hours() {
        let hours = |n| retry_backoff(n).as_hours();
        assert_eq!([hours(None), hours(Some(0)), hours(Some(1)), hours(Some(2)), hours(Some(3))], [1, 1, 1, 2, 4]);
        assert_eq!([hours(Some(6)), hours(Some(7)), hours(Some(1000))], [32, 32, 32]);
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("2160h"), Some(SignedDuration::from_hours(2160)));
        assert_eq!(parse_go_duration("1h30m"), Some(SignedDuration::from_mins(90)));
        assert_eq!(parse_go_duration("90m0s"), Some(SignedDuration::from_mins(90)));
        assert_eq!(parse_go_duration("soon"), None);
        assert_eq!(parse_go_duration("5"), None);
    }

    #[test]
    fn generated_key_pairs_differ_every_time() {
        let now = Timestamp::now();
        let later = now.checked_add(SignedDuration::from_hours(1)).unwrap();
        let (c1, k1) = generate_key_pair("etcd", &["etcd-main-client".into()], now, later).unwrap();
        let (c2, k2) = generate_key_pair("etcd", &["etcd-main-client".into()], now, later).unwrap();
        assert!(c1.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(k1.contains("PRIVATE KEY"));
        assert_ne!(k1, k2);
        assert_ne!(c1, c2);
    }

    #[test]
    fn faults_match_by_name_or_wildcard() {
        let f = IssuanceFaults::default();
        assert!(!f.is_failing("ns", "a"));
        f.set("ns", "a", true);
        assert!(f.is_failing("ns", "a") && !f.is_failing("ns", "b"));
        f.set("*", "*", true);
        assert!(f.is_failing("other", "b"));
    }
}
