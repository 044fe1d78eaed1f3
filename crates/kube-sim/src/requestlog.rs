//! Request log and counters (verb × resource × code) that tests and benchmarks read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One handled request.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    /// Kubernetes verb (`get`, `list`, `watch`, `create`, ...) or the HTTP method for non-resource paths.
    pub verb: String,
    /// Resource (`configmaps`, `statefulsets/scale`, `etcds`), or the path for non-resource requests.
    pub resource: String,
    /// Namespace.
    pub namespace: Option<String>,
    /// Request path with query.
    pub path: String,
    /// HTTP status code.
    pub code: u16,
    /// User.
    pub user: String,
    /// User-Agent.
    pub user_agent: String,
    /// Time to the response head.
    pub duration: Duration,
}

#[derive(Default)]
struct LogState {
    records: Vec<RequestRecord>,
    counts: HashMap<(String, String, u16), u64>,
}

/// Shared request log. Cheap to clone.
#[derive(Clone, Default)]
pub struct RequestLog {
    inner: Arc<Mutex<LogState>>,
}

const MAX_RECORDS: usize = 100_000;

impl RequestLog {
    pub(crate) fn record(&self, r: RequestRecord) {
        let mut st = self.inner.lock().unwrap();
        *st.counts.entry((r.verb.clone(), r.resource.clone(), r.code)).or_default() += 1;
        if st.records.len() >= MAX_RECORDS {
            st.records.drain(..MAX_RECORDS / 2);
        }
        st.records.push(r);
    }

    /// Requests with this verb on this resource (any code).
    pub fn count(&self, verb: &str, resource: &str) -> u64 {
        self.inner
            .lock()
            .unwrap()
            .counts
            .iter()
            .filter(|((v, r, _), _)| v == verb && r == resource)
            .map(|(_, n)| n)
            .sum()
    }

    /// Requests with this verb, resource and code.
    pub fn count_code(&self, verb: &str, resource: &str, code: u16) -> u64 {
        self.inner.lock().unwrap().counts.get(&(verb.to_string(), resource.to_string(), code)).copied().unwrap_or(0)
    }

    /// All counters: (verb, resource, code) → count.
    pub fn counters(&self) -> HashMap<(String, String, u16), u64> {
        self.inner.lock().unwrap().counts.clone()
    }

    /// The most recent records (up to 100,000 kept).
    pub fn records(&self) -> Vec<RequestRecord> {
        self.inner.lock().unwrap().records.clone()
    }

    /// Forgets everything.
    pub fn clear(&self) {
        let mut st = self.inner.lock().unwrap();
        st.records.clear();
        st.counts.clear();
    }
}
