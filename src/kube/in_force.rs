//! The API server this process talks to and the request timeout in force, recorded when the client is built
//! ([`super::config`]) and read when an error or a notice has to name them ([`super::error`]). It sits below
//! both, so that neither imports the other.

use std::sync::OnceLock;
use std::time::Duration;

/// The server of the connection and its request timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InForce {
    /// URL of the API server, without a trailing slash.
    pub server: String,
    /// The per-request limit.
    pub request_timeout: Duration,
    /// Whether that limit is the default (no `--request-timeout` given).
    pub is_default: bool,
}

static IN_FORCE: OnceLock<InForce> = OnceLock::new();

/// Records the first connection's server and timeout (later connections go to the same server).
pub fn record(in_force: InForce) {
    let _ = IN_FORCE.set(in_force);
}

/// The server and timeout of this process's connection, once connected.
pub fn in_force() -> Option<&'static InForce> {
    IN_FORCE.get()
}
