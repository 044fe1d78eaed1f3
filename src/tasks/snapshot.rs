//! `OnDemandSnapshotTask` (DEP-05): a full or delta snapshot taken by the leading member's backup sidecar
//! (through the API server's service proxy); success is the snapshot lease (`E-full-snap` / `E-delta-snap`)
//! moving past the value it had before the request.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::{Value, json};

use super::config::{ConfigError, Fields, parse_yaml};
use super::preconditions::{Facts, require_backups, require_quorum};
use super::sidecar::{Target, lease_marker, post};
use super::step::{Readiness, Step, StepContext, StepError, StepFuture};
use super::{TaskKind, TaskPlan};
use crate::api::Etcd;
use crate::api::task::types;

/// Full or delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotType {
    /// A full snapshot.
    Full,
    /// A delta snapshot (changes since the last one).
    Delta,
}

impl SnapshotType {
    /// `full` or `delta`.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotType::Full => "full",
            SnapshotType::Delta => "delta",
        }
    }
}

/// The parsed config: `type: full|delta`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotConfig {
    /// Which snapshot.
    pub type_: SnapshotType,
}

/// Parses `type: full|delta`.
pub fn parse_config(config: Option<&str>) -> Result<SnapshotConfig, ConfigError> {
    let v = parse_yaml(config)?;
    let f = Fields::new(&v, "config", &["type"])?;
    let t = f.one_of("type", &["full", "delta"])?;
    Ok(SnapshotConfig { type_: if t == "full" { SnapshotType::Full } else { SnapshotType::Delta } })
}

/// The task type.
pub struct OnDemandSnapshot;

impl TaskKind for OnDemandSnapshot {
    fn type_name(&self) -> &'static str {
        types::ON_DEMAND_SNAPSHOT
    }
    fn summary(&self) -> &'static str {
        "take a full or delta snapshot now (config: `type: full|delta`)"
    }
    fn parse(&self, config: Option<&str>) -> Result<Arc<dyn TaskPlan>, ConfigError> {
        Ok(Arc::new(parse_config(config)?))
    }
}

impl TaskPlan for SnapshotConfig {
    fn duplicate_key(&self) -> String {
        // DEP-05: no running snapshot task with the same SnapshotType.
        format!("{}/{}", types::ON_DEMAND_SNAPSHOT, self.type_.as_str())
    }
    fn preconditions(&self, facts: &Facts) -> Result<(), String> {
        require_quorum(facts)?;
        require_backups(facts)
    }
    fn steps(&self, etcd: &Etcd) -> Vec<Box<dyn Step>> {
        let names = etcd.managed_names();
        let lease = match self.type_ {
            SnapshotType::Full => names.full_snapshot_lease(),
            SnapshotType::Delta => names.delta_snapshot_lease(),
        };
        vec![Box::new(RecordBaseline { lease: lease.clone() }), Box::new(TriggerSnapshot { type_: self.type_, lease })]
    }
    fn config_json(&self) -> Value {
        json!({"type": self.type_.as_str()})
    }
}

const BASELINE: &str = "snapshotLeaseBefore";
const NOTHING_TO_SNAPSHOT: &str = "nothingToSnapshot";

/// Reads the snapshot lease before asking for a snapshot, so that "moved" has a reference.
struct RecordBaseline {
    lease: String,
}

impl Step for RecordBaseline {
    fn name(&self) -> String {
        "RecordSnapshotLease".into()
    }
    fn description(&self) -> String {
        format!("record the current state of snapshot lease {}", self.lease)
    }
    fn kubectl(&self) -> Vec<String> {
        vec![format!("kubectl get lease {} -o jsonpath='{{.spec.renewTime}}'", self.lease)]
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(cx.journal(BASELINE).is_some()) }.boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let marker = lease_marker(&cx.client, cx.namespace(), &self.lease).await?;
            cx.record(BASELINE, marker.map(Value::String).unwrap_or(Value::Null)).await
        }
        .boxed()
    }
    fn verify<'a>(&'a self, _cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move { Ok(Readiness::Ready) }.boxed()
    }
}

/// Asks the leading sidecar for the snapshot and waits for the lease to move.
struct TriggerSnapshot {
    type_: SnapshotType,
    lease: String,
}

impl TriggerSnapshot {
    async fn moved(&self, cx: &StepContext) -> Result<bool, StepError> {
        if cx.journal(NOTHING_TO_SNAPSHOT).is_some() {
            return Ok(true);
        }
        let before = cx.journal(BASELINE).and_then(|v| v.as_str().map(str::to_string));
        let now = lease_marker(&cx.client, cx.namespace(), &self.lease).await?;
        Ok(now.is_some() && now != before)
    }
}

impl Step for TriggerSnapshot {
    fn name(&self) -> String {
        match self.type_ {
            SnapshotType::Full => "TriggerFullSnapshot".into(),
            SnapshotType::Delta => "TriggerDeltaSnapshot".into(),
        }
    }
    fn description(&self) -> String {
        format!(
            "ask the leading backup sidecar for a {} snapshot and wait for lease {} to move",
            self.type_.as_str(),
            self.lease
        )
    }
    fn kubectl(&self) -> Vec<String> {
        vec![format!(
            "kubectl get --raw /api/v1/namespaces/NS/services/https:ETCD-client:8080/proxy/snapshot/{}   # without https: when spec.backup.tls is unset",
            self.type_.as_str()
        )]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(120)
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { self.moved(cx).await }.boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let reply =
                post(&cx.client, &cx.etcd, &Target::Leader, &format!("snapshot/{}", self.type_.as_str())).await?;
            let nothing = reply.get("message").and_then(Value::as_str).is_some_and(|m| m.contains("no changes"));
            if self.type_ == SnapshotType::Delta && nothing {
                cx.record(NOTHING_TO_SNAPSHOT, Value::Bool(true)).await?;
            }
            Ok(())
        }
        .boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            Ok(if self.moved(cx).await? {
                Readiness::Ready
            } else {
                Readiness::NotReady(format!("snapshot lease {} has not moved yet", self.lease))
            })
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_takes_full_or_delta_only() {
        assert_eq!(parse_config(Some("type: full")).unwrap().type_, SnapshotType::Full);
        assert_eq!(parse_config(Some("type: delta\n")).unwrap().type_, SnapshotType::Delta);
        assert_eq!(parse_config(None).unwrap_err().to_string(), "config.type: required field is missing");
        assert_eq!(
            parse_config(Some("type: incremental")).unwrap_err().to_string(),
            "config.type: expected one of full, delta, found string \"incremental\""
        );
        assert!(
            parse_config(Some("type: full\nforce: true"))
                .unwrap_err()
                .to_string()
                .starts_with("config.force: unknown field")
        );
    }

    #[test]
    fn full_and_delta_are_not_duplicates_of_each_other() {
        let full = parse_config(Some("type: full")).unwrap();
        let delta = parse_config(Some("type: delta")).unwrap();
        assert_ne!(full.duplicate_key(), delta.duplicate_key());
    }
}
