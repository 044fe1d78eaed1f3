//! Prometheus metrics of the reconciler: DEP-05's `etcddruid_operator_task_duration_seconds` (histogram) and
//! `etcddruid_operator_tasks_total` (counter), labelled `type`, `state` (failed/succeeded/rejected), `etcd`,
//! `etcd_namespace`, plus reconcile errors, watch restarts and relists.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::api::{EtcdOperatorTask, TaskState};

/// Label set: `(name, value)` pairs.
pub type Labels = Vec<(String, String)>;

fn task_duration_histogram() -> Histogram {
    // 0.1 s .. ~27 min
    Histogram::new(exponential_buckets(0.1, 2.0, 15))
}

/// The reconciler's metrics and their registry.
pub struct Metrics {
    registry: Registry,
    /// DEP-05 histogram.
    pub task_duration: Family<Labels, Histogram, fn() -> Histogram>,
    /// DEP-05 counter (exposed as `etcddruid_operator_tasks_total`).
    pub tasks: Family<Labels, Counter>,
    /// Reconcile errors by stage (`admit`, `execute`, `cleanup`).
    pub reconcile_errors: Family<Labels, Counter>,
    /// Watch streams restarted after an error.
    pub watch_restarts: Counter,
    /// Full relists (initial list and after `410 Gone`).
    pub relists: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// The DEP-05 labels of a finished task.
pub fn task_labels(task: &EtcdOperatorTask, state: TaskState) -> Labels {
    let r = &task.spec.owner_etcd_refrence;
    vec![
        ("type".into(), task.spec.type_.clone()),
        ("state".into(), state.as_str().to_ascii_lowercase()),
        ("etcd".into(), r.name.clone()),
        ("etcd_namespace".into(), r.namespace.clone()),
    ]
}

impl Metrics {
    /// Registers every metric in a fresh registry.
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let task_duration = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(
            task_duration_histogram as fn() -> Histogram,
        );
        let tasks = Family::<Labels, Counter>::default();
        let reconcile_errors = Family::<Labels, Counter>::default();
        let watch_restarts = Counter::default();
        let relists = Counter::default();
        registry.register(
            "etcddruid_operator_task_duration_seconds",
            "Runtime of each etcd operator task",
            task_duration.clone(),
        );
        registry.register("etcddruid_operator_tasks", "Number of etcd operator tasks by final state", tasks.clone());
        registry.register(
            "druidctl_reconcile_errors",
            "Reconcile attempts that ended in an error, by stage",
            reconcile_errors.clone(),
        );
        registry.register("druidctl_watch_restarts", "Task watches restarted after an error", watch_restarts.clone());
        registry.register(
            "druidctl_watch_relists",
            "Full LISTs of tasks (initial and after 410 Gone)",
            relists.clone(),
        );
        Metrics { registry, task_duration, tasks, reconcile_errors, watch_restarts, relists }
    }

    /// Records a task that reached a terminal state (called once, by whoever wrote that state).
    pub fn task_finished(&self, task: &EtcdOperatorTask, state: TaskState) {
        let labels = task_labels(task, state);
        let start = task.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let secs = start
            .map(|s| (jiff::Timestamp::now().as_millisecond() - s.as_millisecond()).max(0) as f64 / 1000.0)
            .unwrap_or(0.0);
        self.task_duration.get_or_create(&labels).observe(secs);
        self.tasks.get_or_create(&labels).inc();
    }

    /// Counts a reconcile error in `stage`.
    pub fn reconcile_error(&self, stage: &str) {
        self.reconcile_errors.get_or_create(&vec![("stage".into(), stage.into())]).inc();
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        encode(&mut s, &self.registry).expect("writing to a String cannot fail");
        s
    }
}

/// Sum of the samples named `name` whose labels include every pair of `filter` (for tests and benchmarks).
pub fn sample_sum(text: &str, name: &str, filter: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, labels) = match series.split_once('{') {
                Some((m, rest)) => (m, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            if metric != name {
                return None;
            }
            let ok = filter.iter().all(|(k, v)| labels.split(',').any(|p| p == format!("{k}=\"{v}\"")));
            if ok { value.parse::<f64>().ok() } else { None }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::task::{EtcdOperatorTaskSpec, NamespacedName};

    #[test]
    fn finished_tasks_are_counted_with_dep05_labels() {
        let m = Metrics::new();
        let t = EtcdOperatorTask::new(
            "t",
            EtcdOperatorTaskSpec {
                type_: "OnDemandSnapshotTask".into(),
                config: None,
                ttl_seconds_after_finished: None,
                owner_etcd_refrence: NamespacedName { name: "etcd-main".into(), namespace: "shoot".into() },
            },
        );
        m.task_finished(&t, TaskState::Succeeded);
        m.task_finished(&t, TaskState::Rejected);
        m.task_finished(&t, TaskState::Succeeded);
        let text = m.encode();
        assert!(text.contains("# TYPE etcddruid_operator_task_duration_seconds histogram"), "{text}");
        assert_eq!(sample_sum(&text, "etcddruid_operator_tasks_total", &[("state", "succeeded")]), 2.0);
        assert_eq!(
            sample_sum(&text, "etcddruid_operator_tasks_total", &[("etcd", "etcd-main"), ("etcd_namespace", "shoot")]),
            3.0
        );
        assert_eq!(
            sample_sum(&text, "etcddruid_operator_task_duration_seconds_count", &[("type", "OnDemandSnapshotTask")]),
            3.0
        );
    }
}
