//! The embedded Kubernetes API server and the simulated landscape.
//!
//! Nothing outside `sim/` (and the `playground` / `demo` commands) imports this module.

pub mod apiserver;
pub mod etcd;
pub mod landscape;
