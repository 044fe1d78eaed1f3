//! `NoOpTask`: a task that touches nothing, for tests and benchmarks only (never in the standard registry).
//! Its [`Ledger`] records every execution, so tests can prove that no task ran twice or concurrently.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use serde_json::{Value, json};

use super::config::{ConfigError, Fields, parse_yaml};
use super::preconditions::Facts;
use super::step::{Readiness, Step, StepContext, StepError, StepFuture};
use super::{TaskKind, TaskPlan};
use crate::api::Etcd;

/// The type name.
pub const TYPE: &str = "NoOpTask";

/// Executions per task UID, and overlaps seen.
#[derive(Debug, Default)]
pub struct Ledger {
    inner: Mutex<LedgerState>,
    /// Keeps nothing of a task once it has executed (a long-running `serve` in a benchmark).
    forget: bool,
}

#[derive(Debug, Default)]
struct LedgerState {
    executions: HashMap<String, u32>,
    attempts: HashMap<String, u32>,
    running: HashSet<String>,
    overlaps: u32,
}

impl Ledger {
    /// A ledger that keeps nothing of a task once it has executed, so that it does not grow with every task:
    /// for `serve --noop-task-type` (benchmarks), where nobody reads it.
    pub fn forgetful() -> Ledger {
        Ledger { forget: true, ..Ledger::default() }
    }

    /// Completed executions of the task with this UID.
    pub fn executions(&self, uid: &str) -> u32 {
        self.inner.lock().expect("ledger").executions.get(uid).copied().unwrap_or(0)
    }
    /// Every task UID with its completed executions.
    pub fn all(&self) -> HashMap<String, u32> {
        self.inner.lock().expect("ledger").executions.clone()
    }
    /// How often an execution started while another of the same task was running.
    pub fn overlaps(&self) -> u32 {
        self.inner.lock().expect("ledger").overlaps
    }
}

/// The task type.
pub struct NoOp {
    /// Where executions are recorded.
    pub ledger: Arc<Ledger>,
}

/// The parsed config.
#[derive(Clone)]
pub struct NoOpPlan {
    ledger: Arc<Ledger>,
    duration: Duration,
    transient_failures: u32,
    fail: bool,
    key: Option<String>,
}

impl TaskKind for NoOp {
    fn type_name(&self) -> &'static str {
        TYPE
    }
    fn summary(&self) -> &'static str {
        "does nothing (tests and benchmarks): `durationMillis`, `transientFailures`, `fail`, `key`"
    }
    fn parse(&self, config: Option<&str>) -> Result<Arc<dyn TaskPlan>, ConfigError> {
        let v = parse_yaml(config)?;
        let f = Fields::new(&v, "config", &["durationMillis", "transientFailures", "fail", "key"])?;
        Ok(Arc::new(NoOpPlan {
            ledger: self.ledger.clone(),
            duration: Duration::from_millis(u64::from(f.u32("durationMillis")?.unwrap_or(0))),
            transient_failures: f.u32("transientFailures")?.unwrap_or(0),
            fail: f.bool("fail")?.unwrap_or(false),
            key: f.string("key")?,
        }))
    }
}

impl TaskPlan for NoOpPlan {
    fn duplicate_key(&self) -> String {
        // Only tasks with the same explicit key are duplicates; by default every no-op task is unique.
        match &self.key {
            Some(k) => format!("{TYPE}/{k}"),
            None => format!("{TYPE}/{}", uuid::Uuid::new_v4()),
        }
    }
    fn needs_health(&self) -> bool {
        false
    }
    fn preconditions(&self, _facts: &Facts) -> Result<(), String> {
        Ok(())
    }
    fn steps(&self, _etcd: &Etcd) -> Vec<Box<dyn Step>> {
        vec![Box::new(self.clone())]
    }
    fn config_json(&self) -> Value {
        json!({"durationMillis": self.duration.as_millis() as u64, "transientFailures": self.transient_failures, "fail": self.fail, "key": self.key})
    }
}

fn uid(cx: &StepContext) -> String {
    cx.task.metadata.uid.clone().unwrap_or_default()
}

impl Step for NoOpPlan {
    fn name(&self) -> String {
        "NoOp".into()
    }
    fn description(&self) -> String {
        "do nothing for a while".into()
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(cx.journal("noop").is_some()) }.boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let id = uid(cx);
            {
                let mut s = self.ledger.inner.lock().expect("ledger");
                let attempt = s.attempts.entry(id.clone()).or_default();
                *attempt += 1;
                if *attempt <= self.transient_failures {
                    return Err(StepError::Transient(format!("simulated transient failure {attempt}")));
                }
                if self.fail {
                    return Err(StepError::Permanent("simulated failure".into()));
                }
                if !s.running.insert(id.clone()) {
                    s.overlaps += 1;
                }
            }
            tokio::time::sleep(self.duration).await;
            let recorded = cx.record("noop", Value::Bool(true)).await;
            let mut s = self.ledger.inner.lock().expect("ledger");
            s.running.remove(&id);
            if recorded.is_ok() {
                if self.ledger.forget {
                    s.attempts.remove(&id);
                } else {
                    *s.executions.entry(id).or_default() += 1;
                }
            }
            recorded
        }
        .boxed()
    }
    fn verify<'a>(&'a self, _cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move { Ok(Readiness::Ready) }.boxed()
    }
}
