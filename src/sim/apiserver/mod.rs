//! Embedded Kubernetes API server with real semantics, fault injection and a request log.

pub mod validation;
