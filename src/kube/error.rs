//! Errors of cluster access, turned from `kube::Error` into what an operator can act on.

use std::time::Duration;

/// What went wrong talking to the cluster, with the resource it concerned.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No kubeconfig file and not running inside a cluster.
    #[error("no cluster configured: set KUBECONFIG, pass --kubeconfig, or run inside a cluster")]
    NoConfig,
    /// The kubeconfig could not be read or parsed.
    #[error("cannot load kubeconfig: {0}")]
    Kubeconfig(String),
    /// `--context` names a context the kubeconfig does not have.
    #[error("context {0:?} not found in the kubeconfig")]
    UnknownContext(String),
    /// A named object does not exist.
    #[error("{kind} {name:?} not found in namespace {namespace:?}{}", hint.as_deref().map(|h| format!(" ({h})")).unwrap_or_default())]
    NotFound {
        /// Kind, e.g. `etcd`.
        kind: String,
        /// Object name.
        name: String,
        /// Namespace searched.
        namespace: String,
        /// What to try next.
        hint: Option<String>,
    },
    /// The API (CRD) of a kind is not served by this cluster.
    #[error("the {kind} API is not installed in this cluster ({hint})")]
    ApiMissing {
        /// Kind, e.g. `EtcdOperatorTask`.
        kind: String,
        /// What to do about it.
        hint: String,
    },
    /// The user may not do this.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// A wait or request ran out of time.
    #[error("timed out{} {what}", after_text(.after))]
    Timeout {
        /// How long it waited.
        after: Duration,
        /// What it waited for.
        what: String,
    },
    /// The API server could not be reached (one sentence: the server and why).
    #[error("{0}")]
    Unreachable(String),
    /// The API server refused the request as invalid.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A 409 conflict that retries did not resolve.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Any other API error.
    #[error("API server error: {0}")]
    Api(String),
}

/// Which object a request concerned, to word errors.
#[derive(Debug, Clone)]
pub struct Subject<'a> {
    /// Kind, lower case as a user types it (`etcd`, `pod`).
    pub kind: &'a str,
    /// Name, empty for lists.
    pub name: &'a str,
    /// Namespace, empty for cluster scope or all namespaces.
    pub namespace: &'a str,
}

/// The hint for a missing EtcdOperatorTask CRD: the command that installs it.
pub fn install_hint() -> String {
    format!("run `{} install` to install the EtcdOperatorTask CRD", crate::output::command_name())
}

/// Hint for a missing API of `kind`: druidctl installs its own CRD, the others come with their operators.
pub fn api_missing_hint(kind: &str) -> String {
    match kind.to_ascii_lowercase().as_str() {
        "etcdoperatortask" | "etcdoperatortasks" => install_hint(),
        "etcd" | "etcds" => "etcd-druid is not installed here; check --context".to_string(),
        "certificate" | "certificates" => "cert-manager is not installed here".to_string(),
        "machine" | "machines" | "machineset" | "machinesets" => {
            "machine-controller-manager is not installed here".to_string()
        }
        _ => "check --context".to_string(),
    }
}

/// An error and its causes in one line (`client error (Connect): tcp connect error: Connection refused`).
fn after_text(d: &Duration) -> String {
    if d.is_zero() {
        String::new()
    } else if d.subsec_millis() != 0 && d.as_secs() < 10 {
        format!(" after {}ms", d.as_millis())
    } else {
        format!(" after {}s", d.as_secs())
    }
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = c.source();
    }
    parts.join(": ")
}

/// A transport failure as one sentence for a person: the server and why, without client-library text.
pub fn transport(text: &str) -> ClusterError {
    let lower = text.to_lowercase();
    let (server, timeout, default) = match super::in_force::in_force() {
        Some(f) => (f.server.clone(), f.request_timeout, f.is_default),
        None => ("the API server".to_string(), Duration::ZERO, false),
    };
    if lower.contains("timed out") || lower.contains("elapsed") || lower.contains("timeout") {
        let which = if default {
            "the default request timeout; set another with --request-timeout"
        } else {
            "--request-timeout"
        };
        return ClusterError::Timeout { after: timeout, what: format!("waiting for {server} to answer ({which})") };
    }
    let why = if lower.contains("connection refused") {
        "connection refused".to_string()
    } else if lower.contains("unknownissuer")
        || lower.contains("unknown issuer")
        || lower.contains("self-signed")
        || lower.contains("self signed")
        || lower.contains("badsignature")
        || lower.contains("unable to get local issuer")
    {
        return ClusterError::Unreachable(format!(
            "cannot reach {server}: the server's certificate is not signed by the kubeconfig's CA"
        ));
    } else if lower.contains("notvalidforname") || lower.contains("not valid for name") {
        "the server's certificate is not valid for its host name".to_string()
    } else if lower.contains("expired") && lower.contains("certificate") {
        "the server's certificate has expired".to_string()
    } else if lower.contains("dns error")
        || lower.contains("failed to lookup")
        || lower.contains("name or service not known")
    {
        "its host name does not resolve".to_string()
    } else if lower.contains("connection reset") || lower.contains("broken pipe") || lower.contains("connection closed")
    {
        "the connection was closed by the server".to_string()
    } else if lower.contains("network is unreachable") || lower.contains("no route to host") {
        "the network is unreachable".to_string()
    } else if lower.contains("invalid http version") || lower.contains("invalid http") || lower.contains("http2 error")
    {
        "it does not speak HTTP as an API server should".to_string()
    } else {
        // Keep only the innermost cause: the outer ones are the client library's wrappers.
        text.rsplit(": ").next().unwrap_or(text).trim().to_string()
    };
    ClusterError::Unreachable(format!("cannot reach {server}: {why}"))
}

impl ClusterError {
    /// Classifies a `kube::Error` for the object `subject`.
    pub fn from_kube(err: kube::Error, subject: &Subject<'_>) -> ClusterError {
        match err {
            kube::Error::Api(status) => {
                let message = status.message.clone();
                match status.code {
                    404 => {
                        // A named object answers `<resource> "<name>" not found`; a missing API answers the
                        // generic 404 page.
                        if !subject.name.is_empty() && message.contains("not found") && message.contains('"') {
                            ClusterError::NotFound {
                                kind: subject.kind.to_string(),
                                name: subject.name.to_string(),
                                namespace: subject.namespace.to_string(),
                                hint: None,
                            }
                        } else {
                            ClusterError::ApiMissing {
                                kind: subject.kind.to_string(),
                                hint: api_missing_hint(subject.kind),
                            }
                        }
                    }
                    401 => ClusterError::Forbidden(format!("not authenticated: {message}")),
                    403 => ClusterError::Forbidden(message),
                    409 => ClusterError::Conflict(message),
                    422 | 400 => ClusterError::Invalid(message),
                    504 => ClusterError::Timeout { after: Duration::ZERO, what: message },
                    _ => ClusterError::Api(format!("{} ({})", message, status.code)),
                }
            }
            kube::Error::HyperError(e) => transport(&chain(&e)),
            kube::Error::Service(e) => transport(&chain(&*e)),
            kube::Error::Auth(e) => ClusterError::Forbidden(format!("authentication failed: {e}")),
            other => ClusterError::Api(other.to_string()),
        }
    }

    /// Adds a hint to a `NotFound` error (other variants are returned unchanged).
    pub fn with_hint(self, new_hint: impl Into<String>) -> ClusterError {
        match self {
            ClusterError::NotFound { kind, name, namespace, .. } => {
                ClusterError::NotFound { kind, name, namespace, hint: Some(new_hint.into()) }
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, message: &str) -> kube::Error {
        let mut s = kube::core::Status::failure(message, "");
        s.code = code;
        kube::Error::Api(Box::new(s))
    }

    #[test]
    fn named_404_is_not_found_and_generic_404_is_a_missing_api() {
        let subject = Subject { kind: "etcd", name: "main", namespace: "ns" };
        let e = ClusterError::from_kube(api(404, "etcds.druid.gardener.cloud \"main\" not found"), &subject);
        assert!(matches!(e, ClusterError::NotFound { .. }), "{e}");
        let subject = Subject { kind: "EtcdOperatorTask", name: "", namespace: "ns" };
        let e = ClusterError::from_kube(api(404, "the server could not find the requested resource"), &subject);
        assert!(e.to_string().contains("install"), "{e}");
    }

    #[test]
    fn forbidden_keeps_the_servers_sentence() {
        let subject = Subject { kind: "etcd", name: "main", namespace: "ns" };
        let e = ClusterError::from_kube(api(403, "etcds is forbidden: user \"bob\" cannot patch"), &subject);
        assert_eq!(e.to_string(), "forbidden: etcds is forbidden: user \"bob\" cannot patch");
    }
}
