//! The one place that maps errors to exit codes (table in docs/exit-codes.md, generated from `ExitCode::ALL`).

use crate::cmd::Interrupted;
use druidctl::health::NotHealthy;
use druidctl::kube::annotate::AnnotateError;
use druidctl::kube::{ClusterError, UsageError};
use druidctl::output::OutputError;
use druidctl::output::progress::PromptError;

/// Exit codes of druidctl.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// Success.
    Success = 0,
    /// The operation failed.
    Failed = 1,
    /// Invalid input or usage (clap's own code).
    Usage = 2,
    /// Rejected by a precondition or safety check; nothing was changed.
    Rejected = 3,
    /// `status`: at least one Etcd is not healthy.
    Unhealthy = 4,
    /// Forbidden or not authenticated.
    Forbidden = 5,
    /// A named resource, or the API (CRD) of its kind, does not exist.
    NotFound = 6,
    /// A wait or request timed out.
    Timeout = 7,
    /// A runbook did every step, but could not verify part of the result.
    NotVerified = 8,
    /// Interrupted (Ctrl-C).
    Interrupted = 130,
}

impl ExitCode {
    /// Every code with its meaning, in table order.
    pub const ALL: &[(ExitCode, &str, &str)] = &[
        (
            ExitCode::Success,
            "success",
            "The command did what was asked (for `status`: every Etcd is healthy or hibernated).",
        ),
        (
            ExitCode::Failed,
            "operation failed",
            "The API server refused or failed the operation, the cluster could not be reached, or output could not be written.",
        ),
        (
            ExitCode::Usage,
            "invalid input or usage",
            "Unknown flag or command, malformed name/selector/duration, contradictory flags (`-A` with names, `NS/NAME` with a different `-n`, `-l` with names). Nothing was sent to the cluster.",
        ),
        (
            ExitCode::Rejected,
            "rejected by a precondition or safety check",
            "A check refused the change before anything was changed (e.g. `reconcile` while spec reconciliation is suspended, a confirmation needed without a terminal and without `--yes`).",
        ),
        (ExitCode::Unhealthy, "unhealthy", "`status`: at least one Etcd is Degraded or has lost quorum."),
        (ExitCode::Forbidden, "forbidden", "RBAC denied a request, or the credentials were not accepted."),
        (
            ExitCode::NotFound,
            "not found",
            "A named resource does not exist, or its API is not installed (`druidctl install` installs the EtcdOperatorTask CRD).",
        ),
        (ExitCode::Timeout, "timeout", "A `--wait`/`--timeout` or `--request-timeout` ran out."),
        (
            ExitCode::NotVerified,
            "done, not verified",
            "A runbook completed every step but could not verify part of the result (e.g. `runbook cert-renewal` could not reach a member's client TLS endpoint to check the certificate it serves); the warnings name what is unverified.",
        ),
        (ExitCode::Interrupted, "interrupted", "Ctrl-C (SIGINT)."),
    ];

    /// The process exit code.
    pub fn code(self) -> u8 {
        self as i32 as u8
    }
}

fn from_cluster(e: &ClusterError) -> ExitCode {
    match e {
        ClusterError::NotFound { .. } | ClusterError::ApiMissing { .. } | ClusterError::UnknownContext(_) => {
            ExitCode::NotFound
        }
        ClusterError::Forbidden(_) => ExitCode::Forbidden,
        ClusterError::Timeout { .. } => ExitCode::Timeout,
        ClusterError::NoConfig | ClusterError::Kubeconfig(_) => ExitCode::Usage,
        ClusterError::Invalid(_) => ExitCode::Usage,
        ClusterError::Unreachable(_) | ClusterError::Conflict(_) | ClusterError::Api(_) => ExitCode::Failed,
    }
}

/// Maps an error (and its causes) to the exit code.
pub fn classify(err: &anyhow::Error) -> ExitCode {
    for cause in err.chain() {
        if cause.is::<Interrupted>() {
            return ExitCode::Interrupted;
        }
        if cause.is::<UsageError>() {
            return ExitCode::Usage;
        }
        if cause.is::<NotHealthy>() {
            return ExitCode::Unhealthy;
        }
        if cause.is::<crate::cmd::runbook::NotVerified>() {
            return ExitCode::NotVerified;
        }
        if let Some(e) = cause.downcast_ref::<ClusterError>() {
            return from_cluster(e);
        }
        if let Some(e) = cause.downcast_ref::<AnnotateError>() {
            return match e {
                AnnotateError::Cluster(c) => from_cluster(c),
                AnnotateError::Rejected(_) => ExitCode::Rejected,
            };
        }
        if let Some(e) = cause.downcast_ref::<PromptError>() {
            return match e {
                PromptError::NoTerminal { .. } | PromptError::Declined(_) => ExitCode::Rejected,
                PromptError::Io(_) => ExitCode::Failed,
            };
        }
        if let Some(druidctl::certs::renew::CertError::ManagedByGardener { .. }) =
            cause.downcast_ref::<druidctl::certs::renew::CertError>()
        {
            return ExitCode::Rejected;
        }
        if cause.is::<OutputError>() {
            return ExitCode::Failed;
        }
    }
    ExitCode::Failed
}

/// docs/exit-codes.md, generated from [`ExitCode::ALL`].
pub fn markdown() -> String {
    let mut s = String::from(
        "# Exit codes\n\n<!-- Generated by `druidctl generate`; do not edit. -->\n\n\
         Every druidctl command (also as `kubectl druid`) ends with one of these codes. Errors print exactly one\n\
         line on stderr, starting with `error:`. The mapping lives in one place: `src/cmd/exit.rs`.\n\n\
         | code | meaning | when |\n|---:|---|---|\n",
    );
    for (code, name, when) in ExitCode::ALL {
        s.push_str(&format!("| {} | {name} | {when} |\n", code.code()));
    }
    s.push_str(
        "\nCI example: `kubectl druid status -n shoot--a--b etcd-main -o json > health.json || echo \"exit $?\"` —\n\
         exit 4 means the cluster is reachable and judged unhealthy; 5, 6 and 7 mean druidctl could not judge it.\n",
    );
    s
}
