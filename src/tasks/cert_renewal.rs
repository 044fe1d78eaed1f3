//! `CertificateRenewalTask` *(druidctl)*: renew every Certificate behind the Etcd's TLS secrets (like
//! `cmctl renew`), wait for the new revisions — stopping before any restart when issuance fails, with the next
//! automatic retry — then restart the members one at a time, followers first and the leader last, each time
//! waiting until the member is ready again and the Etcd is quorate (etcd only loads certificates on start), and
//! finally connect to each member's client TLS endpoint to check it serves the newly issued certificate (serial
//! number changed and equal to the one in the server TLS secret). A member whose endpoint cannot be reached
//! from where druidctl runs is reported as not verified (a warning), never as verified.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

use super::config::{ConfigError, expect_none};
use super::preconditions::{Facts, require_quorum};
use super::step::{Readiness, Step, StepContext, StepError, StepFuture};
use super::{TaskKind, TaskPlan};
use crate::api::task::types;
use crate::api::{Certificate, Etcd};
use crate::certs::next_retry_at;
use crate::certs::renew::{CertError, CertTargets, failed_since, find, issued_after, trigger};
use crate::certs::served::{issued_server_serial, served_serial};
use crate::health::Quorum;
use crate::kube::target::ObjectKey;
use crate::machines::impact::pod_ready;

/// The task type (no config: every Certificate the Etcd's TLS secrets come from).
pub struct CertificateRenewal;

/// The parsed (empty) config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateRenewalPlan;

impl TaskKind for CertificateRenewal {
    fn type_name(&self) -> &'static str {
        types::CERTIFICATE_RENEWAL
    }
    fn summary(&self) -> &'static str {
        "renew the Etcd's certificates and restart its members one at a time, leader last (no config)"
    }
    fn parse(&self, config: Option<&str>) -> Result<Arc<dyn TaskPlan>, ConfigError> {
        expect_none(config)?;
        Ok(Arc::new(CertificateRenewalPlan))
    }
}

/// Member pods in restart order: followers (by name), then the leader (from `status.members[].role`).
pub fn restart_order(etcd: &Etcd) -> Vec<String> {
    let names = etcd.managed_names();
    let leader = etcd
        .status
        .as_ref()
        .and_then(|s| s.members.iter().find(|m| m.role.as_deref() == Some("Leader")))
        .map(|m| m.name.clone());
    let mut pods: Vec<String> = (0..etcd.spec.replicas.max(0) as u32).map(|i| names.pod(i)).collect();
    pods.sort_by_key(|p| (Some(p) == leader.as_ref(), p.clone()));
    pods
}

impl TaskPlan for CertificateRenewalPlan {
    fn duplicate_key(&self) -> String {
        types::CERTIFICATE_RENEWAL.to_string()
    }
    fn preconditions(&self, facts: &Facts) -> Result<(), String> {
        require_quorum(facts)?;
        // A rolling restart takes one member down at a time; with one already down that could cost quorum.
        if !facts.unready_members.is_empty() {
            return Err(format!(
                "members not ready: {}; a rolling restart could lose quorum",
                facts.unready_members.join(", ")
            ));
        }
        Ok(())
    }
    fn steps(&self, etcd: &Etcd) -> Vec<Box<dyn Step>> {
        let mut steps: Vec<Box<dyn Step>> = vec![Box::new(RenewCertificates)];
        for pod in restart_order(etcd) {
            steps.push(Box::new(RestartMember { pod }));
        }
        steps.push(Box::new(VerifyServedCertificates));
        steps
    }
    fn config_json(&self) -> Value {
        json!({})
    }
}

const RENEWAL_KEY: &str = "certificateRenewal";

struct RenewCertificates;

fn cert_step_error(e: CertError) -> StepError {
    match e {
        CertError::Cluster(c) => StepError::Transient(c.to_string()),
        other => StepError::Permanent(other.to_string()),
    }
}

impl Step for RenewCertificates {
    fn name(&self) -> String {
        "RenewCertificates".into()
    }
    fn description(&self) -> String {
        "set Issuing=True (ManuallyTriggered) on every Certificate behind the Etcd's TLS secrets and wait for the new revisions".into()
    }
    fn kubectl(&self) -> Vec<String> {
        vec!["cmctl renew CERTIFICATE…".into()]
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move {
            let Some(j) = cx.journal(RENEWAL_KEY) else { return Ok(false) };
            // Resumed after a failed issuance (the issuer may be fixed now): trigger again, like a second
            // `cmctl renew`, instead of waiting for cert-manager's backoff.
            let since = j.get("since").and_then(Value::as_i64).unwrap_or(0);
            let api: Api<Certificate> = Api::namespaced(cx.client.clone(), cx.namespace());
            for name in j.get("revisions").and_then(Value::as_object).into_iter().flatten().map(|(n, _)| n) {
                let c = api.get(name).await.map_err(|e| StepError::from_kube("reading certificates", e))?;
                if failed_since(&c, since).is_some() {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        .boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let key = ObjectKey { namespace: cx.namespace().to_string(), name: cx.etcd_name().to_string() };
            let certs = find(&cx.client, &CertTargets::Etcd(key)).await.map_err(cert_step_error)?;
            let since = jiff::Timestamp::now();
            // After a failed issuance the baseline stays the one from before the renewal: the members still
            // serve that certificate.
            let earlier = cx.journal(RENEWAL_KEY);
            let revisions: BTreeMap<String, Option<i64>> = certs
                .iter()
                .map(|c| (c.metadata.name.clone().unwrap_or_default(), c.status.as_ref().and_then(|s| s.revision)))
                .collect();
            // The serial the members serve before the renewal (unreadable: not compared later).
            let server_serial = match earlier.as_ref() {
                Some(j) => j.get("serverSerial").and_then(Value::as_str).map(String::from),
                None => issued_server_serial(&cx.client, &cx.etcd).await.ok().flatten().map(|(_, s)| s),
            };
            // Journal the baseline first, so a resumed task waits for revisions newer than these.
            let baseline = json!({"revisions": revisions, "since": since.as_second(), "serverSerial": server_serial});
            cx.record(RENEWAL_KEY, baseline).await?;
            for c in &certs {
                trigger(&cx.client, c).await.map_err(cert_step_error)?;
            }
            Ok(())
        }
        .boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            let j = cx.journal(RENEWAL_KEY).unwrap_or_default();
            let since = j.get("since").and_then(Value::as_i64).unwrap_or(0);
            let revisions: BTreeMap<String, Option<i64>> =
                serde_json::from_value(j.get("revisions").cloned().unwrap_or(json!({}))).unwrap_or_default();
            let api: Api<Certificate> = Api::namespaced(cx.client.clone(), cx.namespace());
            for (name, previous) in &revisions {
                let c = api.get(name).await.map_err(|e| StepError::from_kube("reading certificates", e))?;
                if issued_after(&c, *previous) {
                    continue;
                }
                if let Some(message) = failed_since(&c, since) {
                    let st = c.status.clone().unwrap_or_default();
                    let next = next_retry_at(st.last_failure_time.map(|t| t.0), st.failed_issuance_attempts);
                    return Err(StepError::Permanent(format!(
                        "issuing certificate {name} failed: {message}; no member was restarted; cert-manager retries at {}",
                        next.map(|t| t.to_string()).unwrap_or_else(|| "an unknown time".into())
                    )));
                }
                return Ok(Readiness::NotReady(format!("certificate {name} has no new revision yet")));
            }
            Ok(Readiness::Ready)
        }
        .boxed()
    }
}

struct RestartMember {
    pod: String,
}

impl Step for RestartMember {
    fn name(&self) -> String {
        format!("RestartMember/{}", self.pod)
    }
    fn description(&self) -> String {
        format!("restart {} so it loads the new certificates; wait until it is ready and the Etcd is quorate", self.pod)
    }
    fn kubectl(&self) -> Vec<String> {
        vec![format!("kubectl delete pod {}", self.pod)]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(600)
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(cx.journal(&self.name()).is_some()) }.boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let pods: Api<Pod> = Api::namespaced(cx.client.clone(), cx.namespace());
            let uid = pods
                .get_opt(&self.pod)
                .await
                .map_err(|e| StepError::from_kube("reading the member pod", e))?
                .and_then(|p| p.metadata.uid);
            cx.record(&self.name(), json!({"uid": uid})).await?;
            match pods.delete(&self.pod, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(StepError::from_kube("deleting the member pod", e)),
            }
        }
        .boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            let old_uid = cx.journal(&self.name()).and_then(|j| j.get("uid").and_then(Value::as_str).map(String::from));
            let pods: Api<Pod> = Api::namespaced(cx.client.clone(), cx.namespace());
            let get = |name: String| {
                let pods = pods.clone();
                async move { pods.get_opt(&name).await.map_err(|e| StepError::from_kube("reading member pods", e)) }
            };
            match get(self.pod.clone()).await? {
                Some(p) if p.metadata.uid.is_some() && p.metadata.uid != old_uid && pod_ready(&p) => {}
                Some(p) if p.metadata.uid == old_uid => {
                    return Ok(Readiness::NotReady(format!("{} has not restarted yet", self.pod)));
                }
                _ => return Ok(Readiness::NotReady(format!("{} is not ready yet", self.pod))),
            }
            let names = cx.etcd.managed_names();
            let members = cx.etcd.spec.replicas.max(0) as u32;
            let mut ready = 0;
            for i in 0..members {
                if get(names.pod(i)).await?.is_some_and(|p| pod_ready(&p)) {
                    ready += 1;
                }
            }
            let q = Quorum::of(members, ready);
            if q.quorate {
                Ok(Readiness::Ready)
            } else {
                Ok(Readiness::NotReady(format!("{ready} of {members} members ready; not quorate")))
            }
        }
        .boxed()
    }
}

const SERVED_KEY: &str = "servedCertificates";

/// How long one TLS handshake with a member may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

struct VerifyServedCertificates;

impl Step for VerifyServedCertificates {
    fn name(&self) -> String {
        "VerifyServedCertificates".into()
    }
    fn description(&self) -> String {
        "connect to each member's client TLS endpoint and check it serves the newly issued certificate (serial number)"
            .into()
    }
    fn kubectl(&self) -> Vec<String> {
        vec!["openssl s_client -connect MEMBER:2379 </dev/null | openssl x509 -noout -serial".into()]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(60)
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            let Some((secret, issued)) =
                issued_server_serial(&cx.client, &cx.etcd).await.map_err(StepError::Transient)?
            else {
                cx.record(SERVED_KEY, json!({"clientTls": false})).await?;
                return Ok(Readiness::Ready);
            };
            let previous = cx.journal(RENEWAL_KEY).and_then(|j| j["serverSerial"].as_str().map(String::from));
            if previous.as_deref() == Some(issued.as_str()) {
                return Ok(Readiness::NotReady(format!(
                    "secret {secret} still holds the certificate from before the renewal (serial {issued})"
                )));
            }
            let pods: Api<Pod> = Api::namespaced(cx.client.clone(), cx.namespace());
            let names = cx.etcd.managed_names();
            let mut members = serde_json::Map::new();
            for i in 0..cx.etcd.spec.replicas.max(0) as u32 {
                let pod = names.pod(i);
                let p = pods.get_opt(&pod).await.map_err(|e| StepError::from_kube("reading member pods", e))?;
                let Some(p) = p else {
                    members.insert(pod, json!({"error": "the pod does not exist"}));
                    continue;
                };
                // The member's client port as etcd_access reaches it: the published URL, its DNS name inside
                // the cluster, or a port-forward through the API server from outside (never some other etcd on
                // this machine's loopback).
                // A member that cannot be reached from here (no route, port-forward refused) is recorded as
                // unverified, like one whose TLS handshake fails: the renewal itself is done.
                let (url, _via, _bridge) = match super::etcd_access::member_url(&cx.client, &cx.etcd, &p).await {
                    Ok(route) => route,
                    Err(e) => {
                        members.insert(pod, json!({"error": e.to_string()}));
                        continue;
                    }
                };
                match served_serial(&url, PROBE_TIMEOUT).await {
                    Ok(served) if served == issued => {
                        members.insert(pod, json!({"url": url, "servedSerial": served}));
                    }
                    Ok(served) => {
                        return Ok(Readiness::NotReady(format!(
                            "{pod} serves serial {served} at {url}, not the issued {issued} (secret {secret}); \
                             it did not load the new certificate — restart it with `kubectl delete pod {pod}`"
                        )));
                    }
                    Err(e) => {
                        members.insert(pod, json!({"url": url, "error": e}));
                    }
                }
            }
            let rec = json!({"clientTls": true, "secret": secret, "issuedSerial": issued, "previousSerial": previous,
                             "members": members});
            cx.record(SERVED_KEY, rec).await?;
            Ok(Readiness::Ready)
        }
        .boxed()
    }
    fn warnings(&self, cx: &StepContext) -> Vec<String> {
        served_warnings(&cx.journal(SERVED_KEY).unwrap_or_default())
    }
    fn unverified(&self, cx: &StepContext) -> Vec<String> {
        unverified_members(&cx.journal(SERVED_KEY).unwrap_or_default())
    }
}

/// Members whose served certificate could not be checked (no address, unreachable).
fn unverified_members(rec: &Value) -> Vec<String> {
    rec["members"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, m)| m["error"].is_string())
        .map(|(pod, m)| format!("{pod} not verified ({})", m["error"].as_str().unwrap_or_default()))
        .collect()
}

/// The warnings of a `servedCertificates` journal entry: what was not verified, and why.
fn served_warnings(rec: &Value) -> Vec<String> {
    if rec["clientTls"] == json!(false) {
        return vec!["the etcd has no client TLS (spec.etcd.clientUrlTls); no served certificate was checked".into()];
    }
    let mut out = Vec::new();
    if rec["previousSerial"].is_null() {
        out.push(
            "the serial from before the renewal was not recorded; only the match with the issued one was checked"
                .into(),
        );
    }
    for (pod, m) in rec["members"].as_object().into_iter().flatten() {
        if let Some(e) = m["error"].as_str() {
            out.push(format!(
                "{pod}: NOT verified — its client TLS endpoint could not be reached from here ({e}); check it from inside the cluster"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn etcd(leader: &str) -> Etcd {
        serde_json::from_value(json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "etcd-main", "namespace": "ns"},
            "spec": {"replicas": 3, "labels": {}, "etcd": {}, "backup": {}},
            "status": {"members": [
                {"name": "etcd-main-0", "role": if leader == "etcd-main-0" { "Leader" } else { "Member" }, "status": "Ready", "reason": ""},
                {"name": "etcd-main-1", "role": if leader == "etcd-main-1" { "Leader" } else { "Member" }, "status": "Ready", "reason": ""},
                {"name": "etcd-main-2", "role": if leader == "etcd-main-2" { "Leader" } else { "Member" }, "status": "Ready", "reason": ""}]}}))
        .unwrap()
    }

    #[test]
    fn followers_restart_first_and_the_leader_last() {
        assert_eq!(restart_order(&etcd("etcd-main-0")), ["etcd-main-1", "etcd-main-2", "etcd-main-0"]);
        assert_eq!(restart_order(&etcd("etcd-main-2")), ["etcd-main-0", "etcd-main-1", "etcd-main-2"]);
    }

    #[test]
    fn renewal_comes_before_any_restart() {
        let names: Vec<String> = CertificateRenewalPlan.steps(&etcd("etcd-main-1")).iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            [
                "RenewCertificates",
                "RestartMember/etcd-main-0",
                "RestartMember/etcd-main-2",
                "RestartMember/etcd-main-1",
                "VerifyServedCertificates"
            ]
        );
    }

    #[test]
    fn unreachable_members_and_a_missing_client_tls_are_warned_about_never_passed_as_verified() {
        assert!(served_warnings(&json!({"clientTls": false}))[0].contains("no served certificate was checked"));
        let rec = json!({"clientTls": true, "issuedSerial": "AB", "previousSerial": "CD", "members": {
            "etcd-main-0": {"url": "https://127.0.0.1:1", "servedSerial": "AB"},
            "etcd-main-1": {"url": "https://10.0.0.1:2379", "error": "https://10.0.0.1:2379: timed out after 3s"}}});
        let w = served_warnings(&rec);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("etcd-main-1: NOT verified") && w[0].contains("timed out"), "{w:?}");
        let all_good =
            json!({"clientTls": true, "previousSerial": "CD", "members": {"etcd-main-0": {"servedSerial": "AB"}}});
        assert!(served_warnings(&all_good).is_empty());
    }

    #[test]
    fn config_must_be_empty() {
        assert!(CertificateRenewal.parse(None).is_ok());
        assert!(CertificateRenewal.parse(Some("certificates: [a]")).is_err());
    }
}
