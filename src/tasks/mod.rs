//! The task registry: one module per `EtcdOperatorTask` type (DEP-05, seeds/004 7527-7879) with its config
//! schema (parsed from `spec.config`), its preconditions (pure functions over the health model) and its steps.
//!
//! The step model ([`step`]) is shared with the runbooks: a plan of named steps, each with `check` (already
//! done?), an idempotent `act`, and `verify` (wait with a timeout, saying why when not ready).

pub mod cert_renewal;
pub mod compaction;
pub mod config;
pub mod copy_backups;
pub mod etcd_access;
pub mod machine_deletion;
pub mod maintenance;
pub mod member_restore;
pub mod noop;
pub mod ops;
pub mod opstask;
pub mod preconditions;
pub mod quorum_loss;
pub mod sidecar;
pub mod snapshot;
pub mod space_recovery;
pub mod step;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::Etcd;
use crate::api::task::types;

pub use config::ConfigError;
pub use preconditions::Facts;
pub use step::{Readiness, Step, StepContext, StepError};

/// A task type: parses its config into a [`TaskPlan`].
pub trait TaskKind: Send + Sync {
    /// `spec.type`.
    fn type_name(&self) -> &'static str;
    /// One sentence for `task create --help` and docs.
    fn summary(&self) -> &'static str;
    /// Parses `spec.config`; unknown keys and wrong types are errors naming the field.
    fn parse(&self, config: Option<&str>) -> Result<Arc<dyn TaskPlan>, ConfigError>;
}

/// A parsed task: what it conflicts with, what must hold before it runs, and its steps.
pub trait TaskPlan: Send + Sync {
    /// DEP-05 duplicate rule: two unfinished tasks of the same Etcd with the same key are duplicates.
    fn duplicate_key(&self) -> String;
    /// Whether the preconditions need the health model (a task that does not touch etcd skips reading it).
    fn needs_health(&self) -> bool {
        true
    }
    /// The preconditions (DEP-05), a pure function of the facts; `Err` says why the task is rejected.
    fn preconditions(&self, facts: &Facts) -> Result<(), String>;
    /// The steps, in order, for this Etcd.
    fn steps(&self, etcd: &Etcd) -> Vec<Box<dyn Step>>;
    /// The normalized config, for `task describe`.
    fn config_json(&self) -> serde_json::Value;
    /// The member of the Etcd this task names, if it names one: a name that is no member of the Etcd is not
    /// found (exit 6), like any other named resource, before any precondition is looked at.
    fn named_member(&self) -> Option<&str> {
        None
    }
}

/// `NotFound` for `member`, which is no member of `etcd` (its members are `E-0` … `E-<replicas-1>`).
pub fn member_not_found(etcd: &Etcd, member: &str) -> crate::kube::ClusterError {
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let members = match etcd.spec.replicas {
        n if n <= 0 => format!("etcd {name} has no members (replicas 0)"),
        1 => format!("the member of etcd {name} is {name}-0"),
        n => format!("the members of etcd {name} are {name}-0 … {name}-{}", n - 1),
    };
    crate::kube::ClusterError::NotFound {
        kind: "member".into(),
        name: member.to_string(),
        namespace: etcd.metadata.namespace.clone().unwrap_or_default(),
        hint: Some(members),
    }
}

/// Errors of looking up a task type.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// `spec.type` names no known task type.
    #[error("unknown task type {given:?}; known types: {}", known.join(", "))]
    UnknownType {
        /// The type given.
        given: String,
        /// The types this registry knows.
        known: Vec<String>,
    },
    /// The config does not fit the type's schema.
    #[error("invalid config for {type_}: {source}")]
    Config {
        /// The task type.
        type_: String,
        /// What is wrong.
        source: ConfigError,
    },
}

/// The task types an executor can run.
#[derive(Clone, Default)]
pub struct Registry {
    kinds: BTreeMap<&'static str, Arc<dyn TaskKind>>,
}

impl Registry {
    /// The DEP-05 types druidctl executes: snapshot, snapshot compaction, maintenance, copy-backups.
    pub fn standard() -> Registry {
        let mut r = Registry::default();
        r.register(Arc::new(snapshot::OnDemandSnapshot));
        r.register(Arc::new(compaction::OnDemandSnapshotCompaction));
        r.register(Arc::new(maintenance::OnDemandMaintenance));
        r.register(Arc::new(copy_backups::CopyBackups));
        r
    }

    /// The standard types plus the no-op type (tests and benchmarks only), recording into `ledger`.
    pub fn with_noop(ledger: Arc<noop::Ledger>) -> Registry {
        let mut r = Registry::standard();
        r.register(Arc::new(noop::NoOp { ledger }));
        r
    }

    /// Adds (or replaces) a type; runbooks register theirs the same way.
    pub fn register(&mut self, kind: Arc<dyn TaskKind>) {
        self.kinds.insert(kind.type_name(), kind);
    }

    /// The type named `type_`.
    pub fn kind(&self, type_: &str) -> Result<&Arc<dyn TaskKind>, RegistryError> {
        self.kinds
            .get(type_)
            .ok_or_else(|| RegistryError::UnknownType { given: type_.to_string(), known: self.names() })
    }

    /// Parses a task's type and config.
    pub fn plan(&self, type_: &str, config: Option<&str>) -> Result<Arc<dyn TaskPlan>, RegistryError> {
        self.kind(type_)?.parse(config).map_err(|source| RegistryError::Config { type_: type_.to_string(), source })
    }

    /// Names of the registered types.
    pub fn names(&self) -> Vec<String> {
        self.kinds.keys().map(|k| k.to_string()).collect()
    }

    /// Whether `type_` is a DEP-05 type druidctl knows but this registry does not execute (e.g. runbook types).
    pub fn is_known_elsewhere(type_: &str) -> bool {
        types::ALL.contains(&type_)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_registry_knows_the_dep05_types_but_not_noop() {
        let r = Registry::standard();
        assert_eq!(
            r.names(),
            ["CopyBackupsTask", "OnDemandMaintenanceTask", "OnDemandSnapshotCompactionTask", "OnDemandSnapshotTask"]
        );
        let err = r.plan(noop::TYPE, None).err().unwrap();
        assert!(err.to_string().contains("unknown task type \"NoOpTask\""), "{err}");
    }

    #[test]
    fn config_errors_name_the_type_and_field() {
        let r = Registry::standard();
        let err = r.plan(types::ON_DEMAND_SNAPSHOT, Some("type: full\nextra: 1\n")).err().unwrap().to_string();
        assert!(err.contains("OnDemandSnapshotTask") && err.contains("extra"), "{err}");
    }
}
