//! An in-memory stand-in for an etcd member, used when no etcd binary is installed.
//!
//! It keeps what the landscape observes of a member: a revisioned key-value store, a member ID, and
//! whether it is up. It does not speak the network protocol; the landscape talks to it directly.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Shared state of a simulated single-member store.
#[derive(Debug, Default)]
struct Inner {
    revision: i64,
    data: BTreeMap<Vec<u8>, (Vec<u8>, i64)>,
    running: bool,
}

/// A simulated member: a revisioned KV map that can be stopped and started.
#[derive(Debug, Clone, Default)]
pub struct SimulatedMember {
    inner: Arc<Mutex<Inner>>,
    /// The member ID it reports.
    pub id: u64,
}

impl SimulatedMember {
    /// A running member with an empty store.
    pub fn new(id: u64) -> SimulatedMember {
        let m = SimulatedMember { inner: Arc::default(), id };
        m.inner.lock().expect("sim").running = true;
        m
    }

    /// Whether it is up.
    pub fn is_running(&self) -> bool {
        self.inner.lock().expect("sim").running
    }

    /// Stops it; data is kept.
    pub fn kill(&self) {
        self.inner.lock().expect("sim").running = false;
    }

    /// Starts it again.
    pub fn start(&self) {
        self.inner.lock().expect("sim").running = true;
    }

    /// Drops all data (the equivalent of deleting the data directory).
    pub fn wipe(&self) {
        let mut i = self.inner.lock().expect("sim");
        i.data.clear();
        i.revision = 0;
    }

    /// Puts a key; `None` when the member is down.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Option<i64> {
        let mut i = self.inner.lock().expect("sim");
        if !i.running {
            return None;
        }
        i.revision += 1;
        let rev = i.revision;
        i.data.insert(key.to_vec(), (value.to_vec(), rev));
        Some(rev)
    }

    /// Reads a key; `None` when down, `Some(None)` when absent.
    pub fn get(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        let i = self.inner.lock().expect("sim");
        i.running.then(|| i.data.get(key).map(|(v, _)| v.clone()))
    }

    /// Current revision.
    pub fn revision(&self) -> i64 {
        self.inner.lock().expect("sim").revision
    }

    /// Serializes the whole store (a "snapshot").
    pub fn snapshot(&self) -> Vec<u8> {
        let i = self.inner.lock().expect("sim");
        let entries: Vec<(String, String, i64)> = i
            .data
            .iter()
            .map(|(k, (v, r))| (String::from_utf8_lossy(k).into_owned(), String::from_utf8_lossy(v).into_owned(), *r))
            .collect();
        serde_json::to_vec(&serde_json::json!({"revision": i.revision, "entries": entries})).unwrap_or_default()
    }

    /// Replaces the store with a snapshot produced by [`SimulatedMember::snapshot`].
    pub fn restore(&self, snapshot: &[u8]) -> bool {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(snapshot) else { return false };
        let Ok(entries) = serde_json::from_value::<Vec<(String, String, i64)>>(v["entries"].clone()) else {
            return false;
        };
        let mut i = self.inner.lock().expect("sim");
        i.revision = v["revision"].as_i64().unwrap_or(0);
        i.data = entries.into_iter().map(|(k, v, r)| (k.into_bytes(), (v.into_bytes(), r))).collect();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_member_refuses_while_down_and_keeps_data() {
        let m = SimulatedMember::new(1);
        assert_eq!(m.put(b"a", b"1"), Some(1));
        m.kill();
        assert_eq!(m.put(b"b", b"2"), None);
        m.start();
        assert_eq!(m.get(b"a"), Some(Some(b"1".to_vec())));
        let snap = m.snapshot();
        m.wipe();
        assert_eq!(m.get(b"a"), Some(None));
        assert!(m.restore(&snap));
        assert_eq!(m.get(b"a"), Some(Some(b"1".to_vec())));
    }
}
