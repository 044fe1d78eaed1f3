//! Certificates behind an Etcd's TLS secrets: which cert-manager `Certificate`s an Etcd depends on, their
//! status with the time of the next automatic retry (cert-manager's issuance backoff, seeds/000), and the
//! `renew` operation that sets `Issuing=True` exactly like `cmctl renew`.
//!
//! - [`backoff`]: `next_retry_at`, pure.
//! - [`report`]: one status row per Certificate, pure, printable.
//! - [`select`]: which Certificates an Etcd depends on, pure.
//! - [`renew`]: the cluster operations (find, trigger, wait).
//! - [`served`]: the certificate a member serves on its client TLS endpoint, compared by serial number.

pub mod backoff;
pub mod renew;
pub mod report;
pub mod select;
pub mod served;

pub use backoff::next_retry_at;
pub use renew::{CertError, RenewOptions, RenewOutcome};
pub use report::{CertificateReport, CertificateRow};
pub use select::certificates_for_etcd;
