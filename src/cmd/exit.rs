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
    /// The reader of stdout went away (a closed pipe); nothing is said.
    OutputClosed = 141,
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
            "A check refused the change (e.g. `reconcile` while spec reconciliation is suspended, a confirmation needed without a terminal and without `--yes`, declined, or another runbook run holding the Etcd); the message says what changed so far, if anything.",
        ),
        (
            ExitCode::Unhealthy,
            "unhealthy",
            "`status`: at least one Etcd is Degraded or has lost quorum (an armed etcd alarm counts); `check`: a member's keyspace differs.",
        ),
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
        (
            ExitCode::OutputClosed,
            "output closed",
            "The reader of stdout went away (a closed pipe, e.g. `| head -1`): the command ends at once without a word. 141 is what a shell reports for coreutils and kubectl, which end by SIGPIPE there (128 + 13), so `set -o pipefail` scripts see the same code.",
        ),
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
        if cause.is::<crate::cmd::playground::NotInPlayground>() {
            return ExitCode::NotFound;
        }
        if let Some(e) = cause.downcast_ref::<ClusterError>() {
            return from_cluster(e);
        }
        if let Some(druidctl::report::ReportError::Etcd(c)) = cause.downcast_ref::<druidctl::report::ReportError>() {
            return from_cluster(c);
        }
        if let Some(e) = cause.downcast_ref::<druidctl::logs::LogsError>() {
            return match e {
                druidctl::logs::LogsError::Forbidden { .. } => ExitCode::Forbidden,
                druidctl::logs::LogsError::UnknownMember { .. } => ExitCode::NotFound,
                druidctl::logs::LogsError::Cluster(c) => from_cluster(c),
            };
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
        if let Some(e) = cause.downcast_ref::<druidctl::etcd::EtcdError>() {
            use druidctl::etcd::EtcdError;
            return match e {
                EtcdError::Unreachable(_) | EtcdError::Failed(_) => ExitCode::Failed,
                EtcdError::Refused(_) => ExitCode::Rejected,
                EtcdError::NotFound(_) => ExitCode::NotFound,
                EtcdError::Divergent(_) => ExitCode::Unhealthy,
            };
        }
        if let Some(e) = cause.downcast_ref::<OutputError>() {
            return if e.is_closed_pipe() { ExitCode::OutputClosed } else { ExitCode::Failed };
        }
    }
    ExitCode::Failed
}

/// Which commands return each code, with an example (the second table of docs/exit-codes.md).
pub const BY_COMMAND: &[(ExitCode, &str, &str)] = &[
    (
        ExitCode::Success,
        "every command",
        "`druidctl runbook quorum-loss-recovery -n shoot--a etcd-main --plan` (also on a healthy cluster: the plan and one line saying whether a run would start now)",
    ),
    (
        ExitCode::Failed,
        "every command that talks to the cluster; `task create --wait`/`--local` and the shortcuts when the task Failed; a runbook step that failed (the task pauses there); a runbook whose task was deleted during the run (after its cleanup)",
        "`druidctl status` → `error: cannot reach https://10.0.0.1:6443: connection refused`",
    ),
    (
        ExitCode::Usage,
        "every command (checked before connecting: names are DNS-1123, durations and counts are in range, contradictory flags refused)",
        "`druidctl serve --workers 0` → `error: invalid value '0' for '--workers <N>': 0 is not in 1..=64`",
    ),
    (
        ExitCode::Rejected,
        "`reconcile`, `task create` and the shortcuts (preconditions), `machine delete` (quorum), `alarm disarm` (a database still at its quota, no terminal without `--yes`), `move-leader` (a learner or a member not ready), every `runbook` (preconditions, no terminal without `--yes`, the plan not confirmed, another run holding the Etcd's task, a task being deleted), `runbook abort` (nothing to abort, or a live executor)",
        "a second `druidctl runbook quorum-loss-recovery etcd-main` while one runs → `error: task … is being executed by druidctl-runbook@host/4711 since 2026-11-25T22:00:00Z; nothing was changed …`",
    ),
    (
        ExitCode::Unhealthy,
        "`status`, `check`",
        "`druidctl status -A` with an Etcd that lost quorum; `druidctl check etcd-main` → `error: member etcd-main-2's keyspace differs from the others' at revision 812; rebuild it with …`",
    ),
    (
        ExitCode::Forbidden,
        "every command that talks to the cluster; runbooks refuse at their RBAC pre-flight before any change",
        "`druidctl runbook member-restore etcd-main etcd-main-2` as a read-only user → `error: forbidden: missing permissions …`",
    ),
    (
        ExitCode::NotFound,
        "every command naming an Etcd, task, certificate, machine or member (`runbook member-restore`, a `SingleMemberRestoreTask`, `move-leader`); `--context`; `playground break` naming a namespace or member the playground does not run; the task commands without the CRD",
        "`druidctl task watch no-such-task` → `error: EtcdOperatorTask \"no-such-task\" not found in namespace \"shoot--a\"`",
    ),
    (
        ExitCode::Timeout,
        "`--wait` commands (`reconcile`, `task create`, shortcuts, `renew`, `machine delete`, `install`), `task watch --timeout`, and any request beyond `--request-timeout` (default: 10 s to connect, 300 s per read)",
        "`druidctl --request-timeout 5s status` against a server that never answers → `error: timed out after 5s waiting for https://… to answer (--request-timeout)`",
    ),
    (
        ExitCode::Interrupted,
        "every command; a runbook stops at the next safe point and prints once, on stderr, the command that continues; a watch (`status --watch`, `task watch`) ends without a word, as `kubectl get -w` does",
        "Ctrl-C during `druidctl runbook quorum-loss-recovery etcd-main` → `stopped at a safe point; continue with: druidctl runbook quorum-loss-recovery -n shoot--a etcd-main --resume`",
    ),
    (
        ExitCode::OutputClosed,
        "every command that prints results; `logs -f` and `status --watch` end at their next line; `demo` runs to its end first, so that it tears its playground down",
        "`druidctl logs etcd-main | head -1` → one line, nothing on stderr (exit 0 for the shell: `head`'s; 141 with `set -o pipefail`)",
    ),
];

/// docs/exit-codes.md, generated from [`ExitCode::ALL`] and [`BY_COMMAND`].
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
    s.push_str("\n## Which commands return it\n\n| code | commands | example |\n|---:|---|---|\n");
    for (code, commands, example) in BY_COMMAND {
        s.push_str(&format!("| {} | {commands} | {example} |\n", code.code()));
    }
    s.push_str(
        "\nA runbook refused at any point (a confirmation declined, another run holding the Etcd) says what has\n\
         changed so far and the two ways out: continue with `--resume`, or undo with `druidctl runbook abort ETCD`\n\
         (etcd-druid reconciles the spec again, component protection is back on, the task is deleted).\n",
    );
    s.push_str(
        "\nCI example: `kubectl druid status -n shoot--a--b etcd-main -o json > health.json || echo \"exit $?\"` —\n\
         exit 4 means the cluster is reachable and judged unhealthy; 5, 6 and 7 mean druidctl could not judge it.\n",
    );
    s
}
