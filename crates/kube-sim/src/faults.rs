//! Fault injection: error answers (500/503/429 with Retry-After) at a rate or on the Nth matching
//! request, added latency, and watch streams cut mid-flight. Also driven over HTTP at `/_sim/faults`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::status::ApiError;

/// One fault rule. Empty `verb`/`resource` match everything.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultRule {
    /// Verb to match (`list`, `watch`, `create`, ...), empty = any.
    pub verb: String,
    /// Resource to match (`configmaps`, `statefulsets/scale`), empty = any.
    pub resource: String,
    /// HTTP code to answer with (500, 503, 429, ...); 0 = no error (latency only).
    pub code: u16,
    /// Retry-After seconds for 429/503.
    pub retry_after: Option<u64>,
    /// Probability in [0,1] of failing a matching request (used when `nth` is 0).
    pub rate: f64,
    /// Fail only the Nth matching request (1-based), counted from when the rule was added.
    pub nth: u64,
    /// Remaining number of times this rule fires (0 = unlimited).
    pub times: u64,
    /// Latency added to matching requests, in milliseconds.
    pub latency_ms: u64,
    #[serde(skip)]
    seen: u64,
    #[serde(skip)]
    fired: u64,
}

impl FaultRule {
    /// An error answer with `code` for requests matching verb/resource, always.
    pub fn error(verb: &str, resource: &str, code: u16) -> Self {
        FaultRule { verb: verb.into(), resource: resource.into(), code, rate: 1.0, ..Default::default() }
    }
    /// Only the Nth matching request fails.
    pub fn on_nth(mut self, n: u64) -> Self {
        self.nth = n;
        self
    }
    /// Fails with this probability.
    pub fn at_rate(mut self, rate: f64) -> Self {
        self.rate = rate;
        self
    }
    /// Sets Retry-After.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }
    /// Fires at most `n` times.
    pub fn times(mut self, n: u64) -> Self {
        self.times = n;
        self
    }
    /// Latency only.
    pub fn latency(verb: &str, resource: &str, d: Duration) -> Self {
        FaultRule {
            verb: verb.into(),
            resource: resource.into(),
            latency_ms: d.as_millis() as u64,
            ..Default::default()
        }
    }
}

/// What the injector decided for one request.
#[derive(Debug, Default)]
pub struct Decision {
    /// Latency to add.
    pub latency: Duration,
    /// Error to answer with.
    pub error: Option<ApiError>,
}

/// Fault controls. Cheap to clone.
#[derive(Clone, Default)]
pub struct FaultInjector {
    rules: Arc<Mutex<Vec<FaultRule>>>,
    pub(crate) cut: Arc<Mutex<Option<CutHook>>>,
}

pub(crate) type CutHook = Arc<dyn Fn(Option<&str>) -> usize + Send + Sync>;

impl FaultInjector {
    /// Adds a rule.
    pub fn add(&self, rule: FaultRule) {
        self.rules.lock().unwrap().push(rule);
    }
    /// Removes all rules.
    pub fn clear(&self) {
        self.rules.lock().unwrap().clear();
    }
    /// Current rules.
    pub fn rules(&self) -> Vec<FaultRule> {
        self.rules.lock().unwrap().clone()
    }
    /// Closes open watch streams of a resource (`None` = all); returns how many.
    pub fn cut_watches(&self, resource: Option<&str>) -> usize {
        let hook = self.cut.lock().unwrap().clone();
        hook.map(|h| h(resource)).unwrap_or(0)
    }

    pub(crate) fn decide(&self, verb: &str, resource: &str) -> Decision {
        let mut d = Decision::default();
        let mut rules = self.rules.lock().unwrap();
        for r in rules.iter_mut() {
            if (!r.verb.is_empty() && r.verb != verb) || (!r.resource.is_empty() && r.resource != resource) {
                continue;
            }
            if r.times > 0 && r.fired >= r.times {
                continue;
            }
            r.seen += 1;
            d.latency += Duration::from_millis(r.latency_ms);
            if r.code == 0 || d.error.is_some() {
                continue;
            }
            let fire = if r.nth > 0 { r.seen == r.nth } else { r.rate >= 1.0 || rand::random::<f64>() < r.rate };
            if fire {
                r.fired += 1;
                let mut e = match r.code {
                    429 => ApiError::new(429, "TooManyRequests", "Too many requests, please try again later."),
                    503 => {
                        ApiError::new(503, "ServiceUnavailable", "the server is currently unable to handle the request")
                    }
                    504 => ApiError::new(
                        504,
                        "Timeout",
                        "the server was unable to return a response in the time allotted, but may still be processing the request",
                    ),
                    c => ApiError { code: c, ..ApiError::internal("injected fault") },
                };
                e.retry_after = r.retry_after.or(if matches!(r.code, 429 | 503) { Some(1) } else { None });
                d.error = Some(e);
            }
        }
        d
    }
}
