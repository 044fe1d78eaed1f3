//! The object store: one global monotonic resourceVersion, per-resource collections, bounded watch
//! history and the registry of live watchers.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use super::resources::{ResourceType, builtin_types};
use super::selectors::{FieldSelector, LabelSelector};
use super::status::ApiError;

/// Storage key: (group, plural).
pub type Key = (String, String);

/// Type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventType {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change in history.
#[derive(Debug)]
pub struct Event {
    /// Change type.
    pub kind: EventType,
    /// resourceVersion of the change.
    pub rv: u64,
    /// Object after the change (for DELETED: last state with the deletion's resourceVersion).
    pub obj: Arc<Value>,
    /// Object before the change.
    pub prev: Option<Arc<Value>>,
    /// The event's wire encoding in the storage version, computed once for all watchers.
    pub encoded: std::sync::OnceLock<bytes::Bytes>,
}

/// What is sent to a watcher.
#[derive(Debug)]
pub enum WatchItem {
    /// A change (already filtered for the watcher's selectors; type possibly adjusted), with the
    /// shared encoding cache of the stored event (None for synthetic initial events).
    Event(EventType, Arc<Value>, Option<Arc<Event>>),
    /// Progress notification at this resourceVersion.
    Bookmark(u64),
    /// End-of-initial-events bookmark (`k8s.io/initial-events-end`).
    InitialEnd(u64),
    /// The stream must end (restart, cut).
    Close,
}

/// A live watch registration.
pub struct Watcher {
    /// id.
    pub id: u64,
    /// Watched storage.
    pub key: Key,
    /// Namespace filter.
    pub namespace: Option<String>,
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
    /// Whether bookmarks were requested.
    pub bookmarks: bool,
    /// Sink.
    pub tx: UnboundedSender<WatchItem>,
}

impl Watcher {
    fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && obj.pointer("/metadata/namespace").and_then(|n| n.as_str()) != Some(ns.as_str())
        {
            return false;
        }
        self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// Translates a stored event into what this watcher sees (label transitions become ADDED/DELETED).
    pub fn translate(&self, ev: &Event) -> Option<(EventType, Arc<Value>)> {
        let now = self.matches(&ev.obj);
        match ev.kind {
            EventType::Added => now.then(|| (EventType::Added, ev.obj.clone())),
            EventType::Deleted => now.then(|| (EventType::Deleted, ev.obj.clone())),
            EventType::Modified => {
                let before = ev.prev.as_ref().is_some_and(|p| self.matches(p));
                match (before, now) {
                    (true, true) => Some((EventType::Modified, ev.obj.clone())),
                    (false, true) => Some((EventType::Added, ev.obj.clone())),
                    // The previous content with the event's resourceVersion, as the cacher sends an object that
                    // leaves the selector (`convertToWatchEvent` in
                    // `staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go`).
                    (true, false) => {
                        let mut old = ev.prev.as_deref().cloned().unwrap_or(Value::Null);
                        if let Some(md) = old.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                            md.insert("resourceVersion".into(), ev.rv.to_string().into());
                        }
                        Some((EventType::Deleted, Arc::new(old)))
                    }
                    (false, false) => None,
                }
            }
        }
    }
}

/// One resource's objects and history.
#[derive(Default)]
pub struct Collection {
    /// Objects by (namespace, name); namespace "" for cluster-scoped.
    pub objects: BTreeMap<(String, String), Arc<Value>>,
    /// Recent events, oldest first.
    pub history: VecDeque<Arc<Event>>,
    /// Watches from a resourceVersion below this get `410 Gone`.
    pub history_start: u64,
}

/// The whole mutable state behind one lock.
pub struct State {
    /// Global resourceVersion (last assigned).
    pub rv: u64,
    /// Served resource types by (group, plural).
    pub types: BTreeMap<Key, Arc<ResourceType>>,
    /// Collections by storage key.
    pub data: HashMap<Key, Collection>,
    /// Live watchers.
    pub watchers: Vec<Watcher>,
    next_watcher: u64,
    history_cap: usize,
}

impl State {
    /// A store with the built-in types.
    pub fn new(history_cap: usize) -> State {
        let mut st = State {
            rv: 1,
            types: BTreeMap::new(),
            data: HashMap::new(),
            watchers: Vec::new(),
            next_watcher: 0,
            history_cap: history_cap.max(1),
        };
        for t in builtin_types() {
            st.types.insert((t.group.clone(), t.plural.clone()), Arc::new(t));
        }
        st
    }

    /// Looks a resource type up.
    pub fn resource(&self, group: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.types.get(&(group.to_string(), plural.to_string())).cloned()
    }

    /// Gets an object.
    pub fn get(&self, group: &str, plural: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.data
            .get(&(group.to_string(), plural.to_string()))?
            .objects
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Gets an object by storage key.
    pub fn get_key(&self, key: &Key, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.data.get(key)?.objects.get(&(ns.to_string(), name.to_string())).cloned()
    }

    /// Objects after `after` (exclusive, as (namespace, name)), optionally in one namespace, in order.
    pub fn range_after<'a>(
        &'a self,
        key: &Key,
        ns: Option<&'a str>,
        after: Option<(String, String)>,
    ) -> Box<dyn Iterator<Item = &'a Arc<Value>> + 'a> {
        use std::ops::Bound;
        let Some(c) = self.data.get(key) else {
            return Box::new(std::iter::empty());
        };
        let lower = match (after, ns) {
            (Some(a), _) => Bound::Excluded(a),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        Box::new(
            c.objects
                .range((lower, Bound::Unbounded))
                .take_while(move |((n, _), _)| ns.is_none_or(|ns| n == ns))
                .map(|(_, v)| v),
        )
    }

    /// Objects of a resource, optionally in one namespace, in (namespace, name) order.
    pub fn list(&self, key: &Key, ns: Option<&str>) -> Vec<Arc<Value>> {
        let Some(c) = self.data.get(key) else {
            return vec![];
        };
        match ns {
            Some(ns) => c
                .objects
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
            None => c.objects.values().cloned().collect(),
        }
    }

    /// Stores (or with `None` removes) an object, assigning the next resourceVersion, recording history and
    /// notifying watchers. Returns the stored object.
    pub fn commit(&mut self, key: &Key, ns: &str, name: &str, obj: Option<Value>) -> Arc<Value> {
        self.rv += 1;
        let rv = self.rv;
        let coll = self.data.entry(key.clone()).or_default();
        let k = (ns.to_string(), name.to_string());
        let prev = coll.objects.get(&k).cloned();
        let (kind, stored) = match obj {
            Some(mut o) => {
                o["metadata"]["resourceVersion"] = Value::String(rv.to_string());
                let o = Arc::new(o);
                coll.objects.insert(k, o.clone());
                (if prev.is_some() { EventType::Modified } else { EventType::Added }, o)
            }
            None => {
                coll.objects.remove(&k);
                let mut last = prev.as_deref().cloned().unwrap_or(Value::Null);
                if last.is_object() {
                    last["metadata"]["resourceVersion"] = Value::String(rv.to_string());
                }
                (EventType::Deleted, Arc::new(last))
            }
        };
        let ev = Arc::new(Event { kind, rv, obj: stored.clone(), prev, encoded: Default::default() });
        coll.history.push_back(ev.clone());
        while coll.history.len() > self.history_cap {
            let old = coll.history.pop_front().unwrap();
            coll.history_start = old.rv;
        }
        self.watchers.retain(|w| {
            if &w.key != key {
                return true;
            }
            match w.translate(&ev) {
                Some((t, o)) => w.tx.send(WatchItem::Event(t, o, Some(ev.clone()))).is_ok(),
                None => !w.tx.is_closed(),
            }
        });
        stored
    }

    /// Registers a watcher from `from_rv` (exclusive): replays history, or fails with 410.
    #[allow(clippy::too_many_arguments)]
    pub fn watch(
        &mut self,
        key: &Key,
        namespace: Option<String>,
        labels: LabelSelector,
        fields: FieldSelector,
        bookmarks: bool,
        from_rv: Option<u64>,
        initial_end_bookmark: bool,
        tx: UnboundedSender<WatchItem>,
    ) -> Result<u64, ApiError> {
        self.next_watcher += 1;
        let w = Watcher { id: self.next_watcher, key: key.clone(), namespace, labels, fields, bookmarks, tx };
        let coll = self.data.entry(key.clone()).or_default();
        match from_rv {
            Some(rv) => {
                if rv < coll.history_start {
                    return Err(ApiError::gone(rv, coll.history_start + 1));
                }
                for ev in coll.history.iter().filter(|e| e.rv > rv) {
                    if let Some((t, o)) = w.translate(ev) {
                        let _ = w.tx.send(WatchItem::Event(t, o, Some(ev.clone())));
                    }
                }
            }
            None => {
                for o in coll.objects.values() {
                    if w.matches(o) {
                        let _ = w.tx.send(WatchItem::Event(EventType::Added, o.clone(), None));
                    }
                }
                if initial_end_bookmark {
                    let _ = w.tx.send(WatchItem::InitialEnd(self.rv));
                }
            }
        }
        let id = w.id;
        self.watchers.push(w);
        Ok(id)
    }

    /// Sends a progress BOOKMARK to one watcher (under the lock, so it is ordered after all prior events).
    pub fn bookmark(&mut self, id: u64) {
        let rv = self.rv;
        if let Some(w) = self.watchers.iter().find(|w| w.id == id) {
            let _ = w.tx.send(WatchItem::Bookmark(rv));
        }
    }

    /// Removes a watcher.
    pub fn unwatch(&mut self, id: u64) {
        self.watchers.retain(|w| w.id != id);
    }

    /// Bookmarks every watcher that allows bookmarks.
    pub fn bookmark_all(&mut self) {
        let rv = self.rv;
        for w in &self.watchers {
            if w.bookmarks {
                let _ = w.tx.send(WatchItem::Bookmark(rv));
            }
        }
    }

    /// Closes every watch stream (and forgets the watchers).
    pub fn drop_watchers(&mut self) {
        for w in self.watchers.drain(..) {
            let _ = w.tx.send(WatchItem::Close);
        }
    }

    /// Closes the watch streams matching a resource (`None` = all), for fault injection.
    pub fn cut_watchers(&mut self, resource: Option<&str>) -> usize {
        let mut n = 0;
        self.watchers.retain(|w| {
            if resource.is_none_or(|r| w.key.1 == r) {
                let _ = w.tx.send(WatchItem::Close);
                n += 1;
                false
            } else {
                true
            }
        });
        n
    }

    /// Forgets all history: the cache restarts at a new resourceVersion that no client has seen.
    pub fn reset_history(&mut self) {
        self.rv += 1;
        let start = self.rv;
        for c in self.data.values_mut() {
            c.history.clear();
            c.history_start = start;
        }
        for t in self.types.keys() {
            self.data.entry(t.clone()).or_default().history_start = start;
        }
    }
}
