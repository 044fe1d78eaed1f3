//! Runbooks: task types an operator watches and approves at a terminal, that CI runs with `--yes`, and
//! that survive any interruption.
//!
//! A runbook is an `EtcdOperatorTask` type from the task registry ([`crate::tasks`]) run **in-process**:
//! - [`catalog`]: the runbook definitions (name, task type, what it is for, what can be lost, the API calls
//!   it makes);
//! - [`engine`]: plan, preconditions, RBAC pre-flight, confirmation of destructive steps, execution under
//!   the task's executor Lease with the task status and journal annotation as the journal, resume, Ctrl-C;
//! - [`rbac`]: the SelfSubjectAccessReview pre-flight;
//! - [`docs`]: the `docs/runbooks/*.md` pages generated from the definitions.

pub mod catalog;
pub mod docs;
pub mod engine;
pub mod guard;
pub mod plain;
pub mod rbac;

pub use catalog::{Runbook, RunbookId};
pub use engine::{Event, Operator, Outcome, RunOptions, RunbookError, Summary, run};
