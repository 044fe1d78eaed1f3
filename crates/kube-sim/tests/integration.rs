//! kube-sim's integration tests as one test binary (each `tests/<name>.rs` is a module, `common` is shared): one
//! link of the server and its dependencies instead of one per file.

mod common;

mod access;
mod crud;
mod kubectl;
mod watch;
