//! One status row per Certificate: Ready, revision, validity, renewal time, failed attempts, last failure and
//! the next automatic retry (which `cmctl status` does not show).

use jiff::Timestamp;
use serde::Serialize;

use super::backoff::next_retry_at;
use crate::api::Certificate;
use crate::api::certificate::{CONDITION_ISSUING, CONDITION_READY};
use crate::output::{Cell, Printable, Style, Table};

/// The status of one Certificate as druidctl shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CertificateRow {
    /// Namespace.
    pub namespace: String,
    /// Certificate name.
    pub name: String,
    /// Secret that receives the key pair.
    pub secret_name: String,
    /// `True`, `False` or `Unknown` (the Ready condition's status).
    pub ready: String,
    /// Whether an issuance is in progress (`Issuing=True`).
    pub issuing: bool,
    /// Revision of the current certificate.
    pub revision: Option<i64>,
    /// Start of validity.
    pub not_before: Option<Timestamp>,
    /// Expiry.
    pub not_after: Option<Timestamp>,
    /// When cert-manager will renew it.
    pub renewal_time: Option<Timestamp>,
    /// Consecutive failed issuances.
    pub failed_issuance_attempts: Option<i64>,
    /// Time of the last failed issuance.
    pub last_failure_time: Option<Timestamp>,
    /// When cert-manager will retry on its own (seeds/000 backoff); `None` unless issuance is failing.
    pub next_retry_at: Option<Timestamp>,
    /// Message of the Issuing (when failing) or Ready condition.
    pub message: Option<String>,
}

impl CertificateRow {
    /// The row of `cert`.
    pub fn of(cert: &Certificate) -> CertificateRow {
        let status = cert.status.clone().unwrap_or_default();
        let ready = cert.condition(CONDITION_READY).map(|c| c.status.clone()).unwrap_or_else(|| "Unknown".into());
        let issuing_cond = cert.condition(CONDITION_ISSUING);
        let issuing = issuing_cond.is_some_and(|c| c.status == "True");
        let last_failure_time = status.last_failure_time.as_ref().map(|t| t.0);
        // A retry is only pending while the issuance is failing and no manual trigger is in flight.
        let next_retry = if issuing { None } else { next_retry_at(last_failure_time, status.failed_issuance_attempts) };
        let message = issuing_cond
            .filter(|c| c.status == "False")
            .or_else(|| cert.condition(CONDITION_READY))
            .and_then(|c| c.message.clone());
        CertificateRow {
            namespace: cert.metadata.namespace.clone().unwrap_or_default(),
            name: cert.metadata.name.clone().unwrap_or_default(),
            secret_name: cert.spec.secret_name.clone(),
            ready,
            issuing,
            revision: status.revision,
            not_before: status.not_before.as_ref().map(|t| t.0),
            not_after: status.not_after.as_ref().map(|t| t.0),
            renewal_time: status.renewal_time.as_ref().map(|t| t.0),
            failed_issuance_attempts: status.failed_issuance_attempts,
            last_failure_time,
            next_retry_at: next_retry,
            message,
        }
    }
}

/// Rows of several Certificates, printable in every format.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CertificateReport {
    /// The rows, in the order given.
    pub items: Vec<CertificateRow>,
}

fn time(t: Option<Timestamp>) -> String {
    t.map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()).unwrap_or_else(|| "-".into())
}

impl Printable for CertificateReport {
    fn table(&self, wide: bool) -> Table {
        let mut headers = vec![
            "namespace",
            "name",
            "ready",
            "revision",
            "not after",
            "renewal time",
            "failed",
            "last failure",
            "next retry",
        ];
        if wide {
            headers.extend(["secret", "message"]);
        }
        let mut t = Table::new(&headers);
        for r in &self.items {
            let ready_style = match r.ready.as_str() {
                "True" => Style::Good,
                "False" => Style::Bad,
                _ => Style::Warn,
            };
            let ready = if r.issuing { format!("{} (issuing)", r.ready) } else { r.ready.clone() };
            let mut row = vec![
                Cell::plain(&r.namespace),
                Cell::plain(&r.name),
                Cell::styled(ready, ready_style),
                Cell::plain(r.revision.map(|v| v.to_string()).unwrap_or_else(|| "-".into())),
                Cell::plain(time(r.not_after)),
                Cell::plain(time(r.renewal_time)),
                Cell::styled(
                    r.failed_issuance_attempts.map(|v| v.to_string()).unwrap_or_else(|| "0".into()),
                    if r.failed_issuance_attempts.unwrap_or(0) > 0 { Style::Bad } else { Style::Plain },
                ),
                Cell::plain(time(r.last_failure_time)),
                Cell::styled(time(r.next_retry_at), if r.next_retry_at.is_some() { Style::Warn } else { Style::Plain }),
            ];
            if wide {
                row.push(Cell::plain(&r.secret_name));
                row.push(Cell::plain(r.message.clone().unwrap_or_default()));
            }
            t.row(row);
        }
        t
    }
    fn document(&self) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": crate::output::status::STATUS_API_VERSION,
            "kind": "CertificateStatusList",
            "items": self.items,
        })
    }
    fn names(&self) -> Vec<String> {
        self.items.iter().map(|r| format!("certificate.cert-manager.io/{}", r.name)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cert(status: serde_json::Value) -> Certificate {
        serde_json::from_value(json!({
            "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": {"name": "etcd-server", "namespace": "shoot"},
            "spec": {"secretName": "etcd-server-tls", "issuerRef": {"name": "ca"}},
            "status": status
        }))
        .unwrap()
    }

    #[test]
    fn failing_certificate_shows_attempts_last_failure_and_next_retry() {
        let row = CertificateRow::of(&cert(json!({
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Issuing", "status": "False", "reason": "Failed", "message": "issuer unreachable"}],
            "revision": 4, "notAfter": "2026-03-01T00:00:00Z",
            "lastFailureTime": "2026-01-01T10:00:00Z", "failedIssuanceAttempts": 3
        })));
        assert_eq!(row.ready, "True");
        assert!(!row.issuing);
        assert_eq!(row.revision, Some(4));
        assert_eq!(row.failed_issuance_attempts, Some(3));
        assert_eq!(row.next_retry_at, Some("2026-01-01T14:00:00Z".parse().unwrap()));
        assert_eq!(row.message.as_deref(), Some("issuer unreachable"));
    }

    #[test]
    fn healthy_certificate_has_no_pending_retry() {
        let row = CertificateRow::of(&cert(json!({
            "conditions": [{"type": "Ready", "status": "True", "message": "up to date"}], "revision": 1
        })));
        assert_eq!(row.next_retry_at, None);
        assert_eq!(row.failed_issuance_attempts, None);
    }

    #[test]
    fn a_manual_trigger_in_flight_replaces_the_automatic_retry() {
        let row = CertificateRow::of(&cert(json!({
            "conditions": [{"type": "Issuing", "status": "True", "reason": "ManuallyTriggered"}],
            "lastFailureTime": "2026-01-01T10:00:00Z", "failedIssuanceAttempts": 1
        })));
        assert!(row.issuing);
        assert_eq!(row.next_retry_at, None);
    }

    #[test]
    fn table_has_a_next_retry_column() {
        let report = CertificateReport {
            items: vec![CertificateRow::of(&cert(json!({
                "lastFailureTime": "2026-01-01T10:00:00Z", "failedIssuanceAttempts": 6
            })))],
        };
        let text = report.table(false).render(false);
        assert!(text.contains("NEXT RETRY"), "{text}");
        assert!(text.contains("2026-01-02T18:00:00Z"), "{text}");
    }
}
