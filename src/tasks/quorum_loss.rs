//! `QuorumLossRecoveryTask`: recovery of a multi-member Etcd from permanent quorum loss, step by step as
//! seeds/004 7880-8007 describes it (upstream steps 00-10): suspend druid and its webhook, note the
//! ConfigMap, scale the StatefulSet to 0, delete the PVCs and member leases, trim `initial-cluster` and the
//! per-member advertise URLs of the ConfigMap to the first member (upstream step 05), start it (it restores
//! the latest backup), hand the Etcd back to druid, which scales it back (new members join as learners), and
//! verify the cluster formed.
//!
//! The Etcd's `spec.replicas` is never shrunk: the real CRD's CEL rule forbids it (DOMAIN.md); only the
//! StatefulSet is scaled. Every step is idempotent, and its `check` looks at the cluster, so a run killed
//! anywhere resumes without repeating a destructive action.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::config::{ConfigError, expect_none};
use super::preconditions::Facts;
use super::step::{Readiness, Step, StepContext, StepError, StepFuture};
use super::{TaskKind, TaskPlan};
use crate::api::Etcd;
use crate::api::names::{
    CONFIG_VOLUME, DISABLE_COMPONENT_PROTECTION, DISABLE_RESOURCE_PROTECTION_LEGACY, DRUID_OPERATION, DWD_REPLICAS,
    GARDENER_OPERATION, LABEL_PART_OF, OPERATION_RECONCILE, SUSPEND_SPEC_RECONCILE,
};
use crate::api::task::types;

/// Journal key of the ConfigMap recorded before it is edited (`{name, data}`: the last-known-good copy).
pub const JOURNAL_CONFIG_MAP: &str = "configMap";
/// Journal key set once the reconcile was requested.
pub const JOURNAL_RECONCILE_REQUESTED: &str = "reconcileRequestedAt";
/// Journal key prefix of a step's last-known-good copy (`lastKnownGood/<step>` = `{kind: "ConfigMap", name, data}`),
/// recorded by the step before it changes the object; the runbook engine restores it when that step fails permanently.
pub const LAST_KNOWN_GOOD_PREFIX: &str = "lastKnownGood/";

/// The journal key of `step`'s last-known-good copy.
pub fn last_known_good_key(step: &str) -> String {
    format!("{LAST_KNOWN_GOOD_PREFIX}{step}")
}

/// Key of the etcd configuration inside the ConfigMap.
pub const ETCD_CONF_KEY: &str = "etcd.conf.yaml";

/// The task type.
pub struct QuorumLossRecovery;

impl TaskKind for QuorumLossRecovery {
    fn type_name(&self) -> &'static str {
        types::QUORUM_LOSS_RECOVERY
    }
    fn summary(&self) -> &'static str {
        "recover a multi-member etcd from permanent quorum loss: restore the first member from the latest backup, then scale back"
    }
    fn parse(&self, config: Option<&str>) -> Result<Arc<dyn TaskPlan>, ConfigError> {
        expect_none(config)?;
        Ok(Arc::new(QuorumLossRecoveryPlan))
    }
}

/// The parsed (config-less) plan.
#[derive(Debug, Clone, Copy)]
pub struct QuorumLossRecoveryPlan;

/// DEP-05 preconditions of a quorum-loss recovery: a multi-member cluster that has actually lost quorum.
pub fn quorum_loss_preconditions(facts: &Facts) -> Result<(), String> {
    let q = &facts.quorum;
    if q.members <= 1 {
        return Err(
            "the etcd has a single member; quorum-loss recovery is for multi-member clusters (a single member restores itself from its backups)"
                .into(),
        );
    }
    if q.quorate {
        return Err(format!(
            "the etcd cluster still has quorum ({} of {} members ready, {} needed); recovering it would throw away its data",
            q.ready, q.members, q.needed
        ));
    }
    Ok(())
}

impl TaskPlan for QuorumLossRecoveryPlan {
    fn duplicate_key(&self) -> String {
        types::QUORUM_LOSS_RECOVERY.into()
    }
    fn preconditions(&self, facts: &Facts) -> Result<(), String> {
        quorum_loss_preconditions(facts)
    }
    fn steps(&self, etcd: &Etcd) -> Vec<Box<dyn Step>> {
        let e = EtcdRef::of(etcd);
        vec![
            Box::new(SuspendDruid(e.clone())),
            Box::new(RecordConfigMap(e.clone())),
            Box::new(ScaleStatefulSet { e: e.clone(), replicas: 0 }),
            Box::new(DeletePvcs(e.clone())),
            Box::new(DeleteMemberLeases(e.clone())),
            Box::new(EditInitialCluster(e.clone())),
            Box::new(ScaleStatefulSet { e: e.clone(), replicas: 1 }),
            Box::new(WaitMemberReady { e: e.clone(), ordinal: 0 }),
            Box::new(ResumeDruid(e.clone())),
            Box::new(RequestReconcile(e.clone())),
            Box::new(VerifyClusterFormed(e)),
        ]
    }
    fn config_json(&self) -> Value {
        Value::Null
    }
}

/// What the steps need to know about the Etcd.
#[derive(Debug, Clone)]
pub(crate) struct EtcdRef {
    pub(crate) name: String,
    pub(crate) replicas: u32,
    pub(crate) names: crate::api::names::ManagedNames,
}

impl EtcdRef {
    pub(crate) fn of(etcd: &Etcd) -> EtcdRef {
        EtcdRef {
            name: etcd.metadata.name.clone().unwrap_or_default(),
            replicas: etcd.spec.replicas.max(0) as u32,
            names: etcd.managed_names(),
        }
    }
}

fn kube_err(action: impl std::fmt::Display, e: kube::Error) -> StepError {
    StepError::from_kube(&action.to_string(), e)
}

fn etcds(cx: &StepContext) -> Api<Etcd> {
    Api::namespaced(cx.client.clone(), cx.namespace())
}

async fn etcd_annotations(cx: &StepContext, name: &str) -> Result<BTreeMap<String, String>, StepError> {
    let e = etcds(cx).get(name).await.map_err(|e| kube_err(format!("reading etcd {name}"), e))?;
    Ok(e.metadata.annotations.unwrap_or_default())
}

async fn patch_etcd_annotations(cx: &StepContext, name: &str, annotations: Value) -> Result<(), StepError> {
    let patch = json!({"metadata": {"annotations": annotations}});
    etcds(cx)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| kube_err(format!("annotating etcd {name}"), e))?;
    Ok(())
}

/// Whether a pod is Ready.
pub(crate) fn pod_is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Why pod `name` is not ready, in the words of seeds/002 plus the kubelet's waiting message.
pub(crate) async fn pod_readiness(cx: &StepContext, name: &str) -> Result<Readiness, StepError> {
    let pods: Api<Pod> = Api::namespaced(cx.client.clone(), cx.namespace());
    let Some(pod) = pods.get_opt(name).await.map_err(|e| kube_err(format!("reading pod {name}"), e))? else {
        return Ok(Readiness::NotReady(format!("pod {name} does not exist yet (NeverStartedUp)")));
    };
    if pod_is_ready(&pod) {
        return Ok(Readiness::Ready);
    }
    let reason = crate::health::assess::pod_not_ready_reason(&pod);
    let waiting = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find_map(|c| c.state.as_ref().and_then(|s| s.waiting.as_ref())))
        .map(|w| format!(": {} {}", w.reason.clone().unwrap_or_default(), w.message.clone().unwrap_or_default()))
        .unwrap_or_default();
    Ok(Readiness::NotReady(format!("pod {name} is not ready ({reason}{})", waiting.trim_end())))
}

/// Step 1: druid stops reconciling the spec and its webhook stops protecting the managed resources.
struct SuspendDruid(EtcdRef);

impl Step for SuspendDruid {
    fn name(&self) -> String {
        "SuspendDruid".into()
    }
    fn description(&self) -> String {
        format!(
            "annotate etcd {} with {SUSPEND_SPEC_RECONCILE} and {DISABLE_COMPONENT_PROTECTION}, so etcd-druid neither undoes the recovery nor blocks changes to its resources",
            self.0.name
        )
    }
    fn kubectl(&self) -> Vec<String> {
        vec![
            format!("kubectl annotate etcd {} {SUSPEND_SPEC_RECONCILE}=", self.0.name),
            format!("kubectl annotate etcd {} {DISABLE_COMPONENT_PROTECTION}=", self.0.name),
        ]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move {
            let a = etcd_annotations(cx, &self.0.name).await?;
            Ok(a.contains_key(SUSPEND_SPEC_RECONCILE) && a.contains_key(DISABLE_COMPONENT_PROTECTION))
        }
        .boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            patch_etcd_annotations(
                cx,
                &self.0.name,
                json!({SUSPEND_SPEC_RECONCILE: "", DISABLE_COMPONENT_PROTECTION: ""}),
            )
            .await
        }
        .boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            Ok(if self.check(cx).await? {
                Readiness::Ready
            } else {
                Readiness::NotReady("annotations not visible yet".into())
            })
        }
        .boxed()
    }
}

/// The ConfigMap mounted as volume `etcd-config-file` in a StatefulSet.
pub fn config_map_of(sts: &StatefulSet) -> Option<String> {
    sts.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .volumes
        .as_ref()?
        .iter()
        .find(|v| v.name == CONFIG_VOLUME)?
        .config_map
        .as_ref()
        .map(|c| c.name.clone())
}

/// Step 2: find the ConfigMap through the StatefulSet volume and record it (the last-known-good copy).
struct RecordConfigMap(EtcdRef);

impl Step for RecordConfigMap {
    fn name(&self) -> String {
        "RecordConfigMap".into()
    }
    fn description(&self) -> String {
        format!(
            "find the ConfigMap mounted as volume {CONFIG_VOLUME} in StatefulSet {} and record its content in the task journal (the last-known-good copy)",
            self.0.names.statefulset()
        )
    }
    fn kubectl(&self) -> Vec<String> {
        vec![format!(
            "kubectl get sts {} -o jsonpath='{{.spec.template.spec.volumes[?(@.name==\"{CONFIG_VOLUME}\")].configMap.name}}'",
            self.0.names.statefulset()
        )]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(cx.journal(JOURNAL_CONFIG_MAP).is_some()) }.boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let sts_name = self.0.names.statefulset();
            let sts = Api::<StatefulSet>::namespaced(cx.client.clone(), cx.namespace())
                .get(&sts_name)
                .await
                .map_err(|e| kube_err(format!("reading statefulset {sts_name}"), e))?;
            let cm_name = config_map_of(&sts).ok_or_else(|| {
                StepError::Permanent(format!(
                    "statefulset {sts_name} has no volume {CONFIG_VOLUME}; cannot find the etcd configuration"
                ))
            })?;
            let cm = Api::<ConfigMap>::namespaced(cx.client.clone(), cx.namespace())
                .get(&cm_name)
                .await
                .map_err(|e| kube_err(format!("reading configmap {cm_name}"), e))?;
            cx.record(JOURNAL_CONFIG_MAP, json!({"name": cm_name, "data": cm.data.unwrap_or_default()})).await
        }
        .boxed()
    }
    fn verify<'a>(&'a self, _cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move { Ok(Readiness::Ready) }.boxed()
    }
}

/// Scales the StatefulSet (never the Etcd) and waits for its pods to match.
struct ScaleStatefulSet {
    e: EtcdRef,
    replicas: i32,
}

async fn etcd_pods(cx: &StepContext, e: &EtcdRef) -> Result<Vec<Pod>, StepError> {
    let pods: Api<Pod> = Api::namespaced(cx.client.clone(), cx.namespace());
    let list = pods
        .list(&ListParams::default().labels(&format!("{LABEL_PART_OF}={}", e.name)))
        .await
        .map_err(|err| kube_err("listing pods", err))?;
    let prefix = format!("{}-", e.name);
    Ok(list
        .items
        .into_iter()
        .filter(|p| {
            p.metadata.name.as_deref().and_then(|n| n.strip_prefix(&prefix)).is_some_and(|i| i.parse::<u32>().is_ok())
        })
        .collect())
}

impl Step for ScaleStatefulSet {
    fn name(&self) -> String {
        format!("ScaleStatefulSetTo{}", self.replicas)
    }
    fn description(&self) -> String {
        if self.replicas == 0 {
            format!(
                "scale StatefulSet {} to 0 and wait until its pods are gone (the Etcd's spec.replicas stays {}: the CRD forbids shrinking it)",
                self.e.names.statefulset(),
                self.e.replicas
            )
        } else {
            format!(
                "scale StatefulSet {} to {}: only {} starts, from an empty volume",
                self.e.names.statefulset(),
                self.replicas,
                self.e.names.pod(0)
            )
        }
    }
    fn kubectl(&self) -> Vec<String> {
        vec![format!("kubectl scale sts {} --replicas={}", self.e.names.statefulset(), self.replicas)]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(120)
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move {
            let sts_name = self.e.names.statefulset();
            let sts = Api::<StatefulSet>::namespaced(cx.client.clone(), cx.namespace())
                .get(&sts_name)
                .await
                .map_err(|e| kube_err(format!("reading statefulset {sts_name}"), e))?;
            let replicas = sts.spec.and_then(|s| s.replicas).unwrap_or(1);
            if replicas != self.replicas {
                return Ok(false);
            }
            Ok(self.replicas != 0 || etcd_pods(cx, &self.e).await?.is_empty())
        }
        .boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let sts_name = self.e.names.statefulset();
            Api::<StatefulSet>::namespaced(cx.client.clone(), cx.namespace())
                .patch(&sts_name, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"replicas": self.replicas}})))
                .await
                .map_err(|e| kube_err(format!("scaling statefulset {sts_name}"), e))?;
            Ok(())
        }
        .boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            if self.replicas != 0 {
                return Ok(Readiness::Ready);
            }
            let pods = etcd_pods(cx, &self.e).await?;
            Ok(if pods.is_empty() {
                Readiness::Ready
            } else {
                let names: Vec<String> = pods.iter().filter_map(|p| p.metadata.name.clone()).collect();
                Readiness::NotReady(format!("pods still present: {}", names.join(", ")))
            })
        }
        .boxed()
    }
}

/// The PVCs of the Etcd's members: by name (`<claimTemplate>-E-<i>`) and by label.
async fn member_pvcs(cx: &StepContext, e: &EtcdRef) -> Result<Vec<String>, StepError> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(cx.client.clone(), cx.namespace());
    let list = api.list(&ListParams::default()).await.map_err(|err| kube_err("listing persistentvolumeclaims", err))?;
    let expected: Vec<String> = (0..e.replicas.max(1)).map(|i| e.names.pvc(i)).collect();
    let suffix = regex::Regex::new(&format!("-{}-[0-9]+$", regex::escape(&e.name))).expect("valid regex");
    let mut names: Vec<String> = list
        .items
        .into_iter()
        .filter_map(|p| {
            let name = p.metadata.name.clone()?;
            let labelled = p.metadata.labels.as_ref().and_then(|l| l.get(LABEL_PART_OF)).is_some_and(|v| *v == e.name);
            (expected.contains(&name) || (labelled && suffix.is_match(&name))).then_some(name)
        })
        .collect();
    names.sort();
    Ok(names)
}

/// Step 4 (destructive): delete every member PVC.
struct DeletePvcs(EtcdRef);

impl Step for DeletePvcs {
    fn name(&self) -> String {
        "DeletePersistentVolumeClaims".into()
    }
    fn description(&self) -> String {
        let names: Vec<String> = (0..self.0.replicas).map(|i| self.0.names.pvc(i)).collect();
        format!("delete the data volumes of every member ({}); their data is gone for good", names.join(", "))
    }
    fn destructive(&self) -> bool {
        true
    }
    fn kubectl(&self) -> Vec<String> {
        vec![format!("kubectl delete pvc -l {LABEL_PART_OF}={}", self.0.name)]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(60)
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(member_pvcs(cx, &self.0).await?.is_empty()) }.boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let api: Api<PersistentVolumeClaim> = Api::namespaced(cx.client.clone(), cx.namespace());
            for name in member_pvcs(cx, &self.0).await? {
                // A claim already terminating (a run killed right after deleting it) is not deleted again.
                let terminating = api
                    .get_opt(&name)
                    .await
                    .map_err(|e| kube_err(format!("reading persistentvolumeclaim {name}"), e))?
                    .is_none_or(|p| p.metadata.deletion_timestamp.is_some());
                if terminating {
                    continue;
                }
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(kube_err(format!("deleting persistentvolumeclaim {name}"), e)),
                }
            }
            Ok(())
        }
        .boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            let left = member_pvcs(cx, &self.0).await?;
            Ok(if left.is_empty() {
                Readiness::Ready
            } else {
                Readiness::NotReady(format!("still terminating: {}", left.join(", ")))
            })
        }
        .boxed()
    }
}

/// Step 5: delete the member leases `E-<i>`, never the snapshot leases `E-full-snap` / `E-delta-snap`.
struct DeleteMemberLeases(EtcdRef);

impl DeleteMemberLeases {
    fn lease_names(&self) -> Vec<String> {
        (0..self.0.replicas).map(|i| self.0.names.member_lease(i)).collect()
    }
    async fn existing(&self, cx: &StepContext) -> Result<Vec<String>, StepError> {
        let api: Api<Lease> = Api::namespaced(cx.client.clone(), cx.namespace());
        let mut out = Vec::new();
        for name in self.lease_names() {
            if api.get_opt(&name).await.map_err(|e| kube_err(format!("reading lease {name}"), e))?.is_some() {
                out.push(name);
            }
        }
        Ok(out)
    }
}

impl Step for DeleteMemberLeases {
    fn name(&self) -> String {
        "DeleteMemberLeases".into()
    }
    fn description(&self) -> String {
        format!(
            "delete the member leases {} (the snapshot leases {} and {} stay: they tell which backup is the latest)",
            self.lease_names().join(", "),
            self.0.names.full_snapshot_lease(),
            self.0.names.delta_snapshot_lease()
        )
    }
    fn kubectl(&self) -> Vec<String> {
        vec![format!("kubectl delete lease {}", self.lease_names().join(" "))]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(self.existing(cx).await?.is_empty()) }.boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let api: Api<Lease> = Api::namespaced(cx.client.clone(), cx.namespace());
            for name in self.existing(cx).await? {
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(kube_err(format!("deleting lease {name}"), e)),
                }
            }
            Ok(())
        }
        .boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            let left = self.existing(cx).await?;
            Ok(if left.is_empty() {
                Readiness::Ready
            } else {
                Readiness::NotReady(format!("still present: {}", left.join(", ")))
            })
        }
        .boxed()
    }
}

/// The keys of `etcd.conf.yaml` that etcd-druid's quorum-loss procedure trims to the first member
/// (etcd-druid v0.37.1 `docs/usage/recovering-etcd-clusters.md`, step 05).
pub const TRIMMED_KEYS: [&str; 3] = ["initial-cluster", "initial-advertise-peer-urls", "advertise-client-urls"];

/// An `etcd.conf.yaml` parsed as YAML: its top-level keys in file order, each value as JSON, so that an edit
/// keeps every other key where and as it was (comments are not kept; etcd-druid writes none).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EtcdConfDocument(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for EtcdConfDocument {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = EtcdConfDocument;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a mapping of etcd configuration keys")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    out.push(entry);
                }
                Ok(EtcdConfDocument(out))
            }
        }
        d.deserialize_map(Entries)
    }
}

impl serde::Serialize for EtcdConfDocument {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl EtcdConfDocument {
    /// Parses `etcd.conf.yaml` (an empty text is an empty document).
    pub fn parse(text: &str) -> Result<EtcdConfDocument, String> {
        if text.trim().is_empty() {
            return Ok(EtcdConfDocument::default());
        }
        serde_saphyr::from_str(text).map_err(|e| format!("{ETCD_CONF_KEY} is not a YAML mapping: {e}"))
    }

    /// The value of top-level `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn set(&mut self, key: &str, value: Value) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.0.push((key.to_string(), value)),
        }
    }

    /// The `initial-cluster` entries (`<member>=<peer url>`).
    pub fn initial_cluster_members(&self) -> Vec<String> {
        self.get("initial-cluster")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    }

    /// The members an advertise URL key names: the keys of its per-member map (etcd-druid v0.25+), `None` for the
    /// older `<scheme>@<peer service>@<namespace>@<port>` string (v0.22–v0.24), which names no member.
    pub fn advertised_members(&self, key: &str) -> Option<Vec<String>> {
        self.get(key)?.as_object().map(|m| m.keys().cloned().collect())
    }

    /// Whether the three [`TRIMMED_KEYS`] name only member `first` (an older-format advertise string counts as
    /// trimmed: it names no member).
    pub fn names_only(&self, first: &str) -> bool {
        let ic = self.initial_cluster_members();
        let ic_ok = ic.len() == 1 && ic[0].split_once('=').is_some_and(|(n, _)| n == first);
        ic_ok
            && TRIMMED_KEYS[1..]
                .iter()
                .all(|k| self.advertised_members(k).is_none_or(|m| m.len() == 1 && m[0] == first))
    }

    /// The document with the three [`TRIMMED_KEYS`] reduced to member `first`; every other key unchanged. An
    /// older-format advertise string is kept: etcd-backup-restore makes the pod's own URL of it.
    pub fn first_member_only(&self, first: &str) -> Result<EtcdConfDocument, String> {
        let mut out = self.clone();
        let entry = self
            .initial_cluster_members()
            .into_iter()
            .find(|m| m.split_once('=').is_some_and(|(n, _)| n == first))
            .ok_or_else(|| format!("initial-cluster does not name {first}"))?;
        out.set("initial-cluster", Value::String(entry));
        for key in &TRIMMED_KEYS[1..] {
            match self.get(key) {
                Some(Value::Object(map)) => {
                    let urls = map.get(first).ok_or_else(|| format!("{key} does not name {first}"))?;
                    out.set(key, json!({first: urls}));
                }
                Some(Value::String(_)) | None => {}
                Some(other) => return Err(format!("{key} is neither a per-member map nor a string: {other}")),
            }
        }
        Ok(out)
    }

    /// The document as YAML.
    pub fn to_yaml(&self) -> Result<String, String> {
        serde_saphyr::to_string(self).map_err(|e| e.to_string())
    }
}

/// The `initial-cluster` entries of an `etcd.conf.yaml` (none when it is not YAML).
pub fn initial_cluster_members(conf: &str) -> Vec<String> {
    EtcdConfDocument::parse(conf).map(|d| d.initial_cluster_members()).unwrap_or_default()
}

/// `conf` with the three [`TRIMMED_KEYS`] reduced to member `first`, as YAML.
pub fn first_member_only(conf: &str, first: &str) -> Result<String, String> {
    EtcdConfDocument::parse(conf)?.first_member_only(first)?.to_yaml()
}

/// Step 6: the ConfigMap names only the first member (etcd-druid's step 05: `initial-cluster`,
/// `initial-advertise-peer-urls` and `advertise-client-urls`; the member started next then bootstraps alone).
struct EditInitialCluster(EtcdRef);

impl EditInitialCluster {
    fn config_map_name(&self, cx: &StepContext) -> Result<String, StepError> {
        cx.journal(JOURNAL_CONFIG_MAP)
            .and_then(|v| v["name"].as_str().map(String::from))
            .ok_or_else(|| StepError::Permanent("the ConfigMap was not recorded (step RecordConfigMap)".into()))
    }
    async fn current(&self, cx: &StepContext) -> Result<(String, EtcdConfDocument), StepError> {
        let name = self.config_map_name(cx)?;
        let cm = Api::<ConfigMap>::namespaced(cx.client.clone(), cx.namespace())
            .get(&name)
            .await
            .map_err(|e| kube_err(format!("reading configmap {name}"), e))?;
        let conf = cm.data.unwrap_or_default().remove(ETCD_CONF_KEY).unwrap_or_default();
        let doc = EtcdConfDocument::parse(&conf).map_err(|e| StepError::Permanent(format!("configmap {name}: {e}")))?;
        Ok((name, doc))
    }
}

impl Step for EditInitialCluster {
    fn name(&self) -> String {
        "EditInitialCluster".into()
    }
    fn description(&self) -> String {
        format!(
            "edit etcd.conf.yaml in the recorded ConfigMap so that initial-cluster, initial-advertise-peer-urls and advertise-client-urls name only {} (an advertise string of etcd-druid before v0.25 names no member and is kept)",
            self.0.names.member(0)
        )
    }
    fn kubectl(&self) -> Vec<String> {
        vec![format!(
            "kubectl edit cm \"$(kubectl get sts {} -o jsonpath='{{.spec.template.spec.volumes[?(@.name==\"{CONFIG_VOLUME}\")].configMap.name}}')\"   # {ETCD_CONF_KEY}: keep only {} in initial-cluster, initial-advertise-peer-urls and advertise-client-urls",
            self.0.names.statefulset(),
            self.0.names.member(0)
        )]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move {
            let (_, doc) = self.current(cx).await?;
            Ok(doc.names_only(&self.0.names.member(0)))
        }
        .boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            let (name, doc) = self.current(cx).await?;
            // The last-known-good copy, restored by the runbook engine if this step fails permanently.
            let lkg = last_known_good_key(&self.name());
            if cx.journal(&lkg).is_none()
                && let Some(rec) = cx.journal(JOURNAL_CONFIG_MAP)
            {
                cx.record(&lkg, json!({"kind": "ConfigMap", "name": name, "data": rec["data"]})).await?;
            }
            let edited = doc
                .first_member_only(&self.0.names.member(0))
                .and_then(|d| d.to_yaml())
                .map_err(|e| StepError::Permanent(format!("configmap {name}: {e}")))?;
            Api::<ConfigMap>::namespaced(cx.client.clone(), cx.namespace())
                .patch(&name, &PatchParams::default(), &Patch::Merge(&json!({"data": {ETCD_CONF_KEY: edited}})))
                .await
                .map_err(|e| kube_err(format!("editing configmap {name}"), e))?;
            Ok(())
        }
        .boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            Ok(if self.check(cx).await? {
                Readiness::Ready
            } else {
                Readiness::NotReady("the ConfigMap does not name only the first member yet".into())
            })
        }
        .boxed()
    }
}

/// Step 8 (also used by member restore): wait until a member's pod is Ready.
pub(crate) struct WaitMemberReady {
    pub(crate) e: EtcdRef,
    pub(crate) ordinal: u32,
}

impl Step for WaitMemberReady {
    fn name(&self) -> String {
        format!("WaitMember{}Ready", self.ordinal)
    }
    fn description(&self) -> String {
        if self.ordinal == 0 {
            format!(
                "wait until {} is ready: its backup sidecar restores the latest full snapshot and the deltas after it",
                self.e.names.pod(0)
            )
        } else {
            format!("wait until {} is ready again", self.e.names.pod(self.ordinal))
        }
    }
    fn kubectl(&self) -> Vec<String> {
        vec![format!("kubectl wait pod {} --for=condition=Ready --timeout=5m", self.e.names.pod(self.ordinal))]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(300)
    }
    fn poll_interval(&self) -> Duration {
        Duration::from_millis(250)
    }
    fn check<'a>(&'a self, _cx: &'a StepContext) -> StepFuture<'a, bool> {
        // Waiting has no effect to skip: verify returns at once when the pod is ready.
        async move { Ok(false) }.boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move { pod_readiness(cx, &self.e.names.pod(self.ordinal)).await }.boxed()
    }
}

/// Step 9: remove both annotations again.
struct ResumeDruid(EtcdRef);

impl Step for ResumeDruid {
    fn name(&self) -> String {
        "ResumeDruid".into()
    }
    fn description(&self) -> String {
        format!("remove {SUSPEND_SPEC_RECONCILE} and {DISABLE_COMPONENT_PROTECTION} from etcd {}", self.0.name)
    }
    fn kubectl(&self) -> Vec<String> {
        vec![
            format!("kubectl annotate etcd {} {SUSPEND_SPEC_RECONCILE}-", self.0.name),
            format!("kubectl annotate etcd {} {DISABLE_COMPONENT_PROTECTION}-", self.0.name),
        ]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move {
            let a = etcd_annotations(cx, &self.0.name).await?;
            Ok(![SUSPEND_SPEC_RECONCILE, DISABLE_COMPONENT_PROTECTION, DISABLE_RESOURCE_PROTECTION_LEGACY]
                .iter()
                .any(|k| a.contains_key(*k)))
        }
        .boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            patch_etcd_annotations(
                cx,
                &self.0.name,
                json!({SUSPEND_SPEC_RECONCILE: null, DISABLE_COMPONENT_PROTECTION: null, DISABLE_RESOURCE_PROTECTION_LEGACY: null}),
            )
            .await
        }
        .boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            Ok(if self.check(cx).await? {
                Readiness::Ready
            } else {
                Readiness::NotReady("annotations still present".into())
            })
        }
        .boxed()
    }
}

/// Step 10: `gardener.cloud/operation=reconcile`; druid scales back to `spec.replicas`.
struct RequestReconcile(EtcdRef);

impl Step for RequestReconcile {
    fn name(&self) -> String {
        "RequestReconcile".into()
    }
    fn description(&self) -> String {
        format!(
            "annotate etcd {} with {GARDENER_OPERATION}={OPERATION_RECONCILE}: etcd-druid restores initial-cluster and scales back to {} members, the new ones join as learners",
            self.0.name, self.0.replicas
        )
    }
    fn kubectl(&self) -> Vec<String> {
        vec![format!("kubectl annotate etcd {} {GARDENER_OPERATION}={OPERATION_RECONCILE} --overwrite", self.0.name)]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(120)
    }
    fn check<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, bool> {
        async move { Ok(cx.journal(JOURNAL_RECONCILE_REQUESTED).is_some()) }.boxed()
    }
    fn act<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, ()> {
        async move {
            patch_etcd_annotations(cx, &self.0.name, json!({GARDENER_OPERATION: OPERATION_RECONCILE})).await?;
            cx.record(JOURNAL_RECONCILE_REQUESTED, json!(jiff::Timestamp::now().to_string())).await
        }
        .boxed()
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            let a = etcd_annotations(cx, &self.0.name).await?;
            let pending = [GARDENER_OPERATION, DRUID_OPERATION]
                .iter()
                .any(|k| a.get(*k).map(String::as_str) == Some(OPERATION_RECONCILE));
            let sts_name = self.0.names.statefulset();
            let sts = Api::<StatefulSet>::namespaced(cx.client.clone(), cx.namespace())
                .get(&sts_name)
                .await
                .map_err(|e| kube_err(format!("reading statefulset {sts_name}"), e))?;
            let replicas = sts.spec.and_then(|s| s.replicas).unwrap_or(0);
            Ok(if !pending && replicas == self.0.replicas as i32 {
                Readiness::Ready
            } else if pending {
                Readiness::NotReady("etcd-druid has not picked up the reconcile yet".into())
            } else {
                Readiness::NotReady(format!(
                    "statefulset {sts_name} has {replicas} replicas, waiting for {}",
                    self.0.replicas
                ))
            })
        }
        .boxed()
    }
}

/// What is still missing for a formed cluster: all pods ready, Etcd Ready, one `:Leader` lease and the rest
/// `:Member`, no dependent left scaled down by DWD. Empty when formed.
pub(crate) async fn cluster_formed_problems(cx: &StepContext, e: &EtcdRef) -> Result<Vec<String>, StepError> {
    let mut problems = Vec::new();
    for i in 0..e.replicas {
        if let Readiness::NotReady(r) = pod_readiness(cx, &e.names.pod(i)).await? {
            problems.push(r);
        }
    }
    let etcd = etcds(cx).get(&e.name).await.map_err(|err| kube_err(format!("reading etcd {}", e.name), err))?;
    let cond = |t: &str| etcd.condition(t).map(|c| (c.status.clone(), c.reason.clone()));
    match cond("Ready") {
        Some((s, _)) if s == "True" => {}
        Some((s, r)) => problems.push(format!("etcd condition Ready is {s} ({r})")),
        None => problems.push("etcd has no Ready condition yet".into()),
    }
    if let Some((s, r)) = cond("AllMembersReady").filter(|(s, _)| s != "True") {
        problems.push(format!("etcd condition AllMembersReady is {s} ({r})"));
    }
    let leases: Api<Lease> = Api::namespaced(cx.client.clone(), cx.namespace());
    let (mut leaders, mut members) = (0, 0);
    for i in 0..e.replicas {
        let name = e.names.member_lease(i);
        let holder = leases
            .get_opt(&name)
            .await
            .map_err(|err| kube_err(format!("reading lease {name}"), err))?
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .unwrap_or_default();
        if holder.ends_with(":Leader") {
            leaders += 1;
        } else if holder.ends_with(":Member") {
            members += 1;
        } else {
            problems.push(format!("lease {name} has no holder yet (LeaseNotRenewed)"));
        }
    }
    if leaders != 1 && leaders + members == e.replicas {
        problems.push(format!("{leaders} member leases say :Leader, exactly one should"));
    }
    let deployments: Api<Deployment> = Api::namespaced(cx.client.clone(), cx.namespace());
    let list = deployments.list(&ListParams::default()).await.map_err(|err| kube_err("listing deployments", err))?;
    for d in list.items {
        let scaled_down = d.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(DWD_REPLICAS));
        if scaled_down && d.spec.as_ref().and_then(|s| s.replicas) == Some(0) {
            problems.push(format!(
                "deployment {} is still scaled down by dependency-watchdog",
                d.metadata.name.unwrap_or_default()
            ));
        }
    }
    Ok(problems)
}

/// Step 11: the cluster formed again.
struct VerifyClusterFormed(EtcdRef);

impl Step for VerifyClusterFormed {
    fn name(&self) -> String {
        "VerifyClusterFormed".into()
    }
    fn description(&self) -> String {
        format!(
            "verify: all {} pods ready, etcd {} Ready, exactly one member lease :Leader and the others :Member, and the dependents dependency-watchdog scaled down are back",
            self.0.replicas, self.0.name
        )
    }
    fn kubectl(&self) -> Vec<String> {
        vec![
            format!("kubectl get pods -l {LABEL_PART_OF}={}", self.0.name),
            format!("kubectl get etcd {}", self.0.name),
            format!(
                "kubectl get lease {}",
                (0..self.0.replicas).map(|i| self.0.names.member_lease(i)).collect::<Vec<_>>().join(" ")
            ),
            format!(
                "kubectl get deploy -o custom-columns=NAME:.metadata.name,REPLICAS:.spec.replicas,DWD:'.metadata.annotations.{}'",
                DWD_REPLICAS.replace('.', "\\.")
            ),
        ]
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(300)
    }
    fn poll_interval(&self) -> Duration {
        Duration::from_millis(250)
    }
    fn verify<'a>(&'a self, cx: &'a StepContext) -> StepFuture<'a, Readiness> {
        async move {
            let problems = cluster_formed_problems(cx, &self.0).await?;
            Ok(if problems.is_empty() { Readiness::Ready } else { Readiness::NotReady(problems.join("; ")) })
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{Quorum, Verdict};

    fn facts(members: u32, ready: u32) -> Facts {
        Facts {
            quorum: Quorum::of(members, ready),
            verdict: Verdict::QuorumLost,
            backups_enabled: true,
            unready_members: vec![],
        }
    }

    #[test]
    fn recovery_is_refused_for_a_quorate_or_single_member_cluster() {
        assert!(quorum_loss_preconditions(&facts(3, 2)).unwrap_err().contains("still has quorum"));
        assert!(quorum_loss_preconditions(&facts(1, 0)).unwrap_err().contains("single member"));
        assert!(quorum_loss_preconditions(&facts(3, 1)).is_ok());
        assert!(quorum_loss_preconditions(&facts(5, 2)).is_ok());
    }

    /// etcd.conf.yaml as etcd-druid v0.37.1 writes it for a 3-member etcd-main with TLS (keys sorted).
    const V0_37_CONF: &str = "advertise-client-urls:\n  etcd-main-0:\n  - https://etcd-main-0.etcd-main-peer.default.svc:2379\n  etcd-main-1:\n  - https://etcd-main-1.etcd-main-peer.default.svc:2379\n  etcd-main-2:\n  - https://etcd-main-2.etcd-main-peer.default.svc:2379\nauto-compaction-mode: periodic\nauto-compaction-retention: 30m\nclient-transport-security:\n  auto-tls: false\n  cert-file: /var/etcd/ssl/server/tls.crt\n  client-cert-auth: true\n  key-file: /var/etcd/ssl/server/tls.key\n  trusted-ca-file: /var/etcd/ssl/ca/bundle.crt\ndata-dir: /var/etcd/data/new.etcd\nenable-grpc-gateway: false\ninitial-advertise-peer-urls:\n  etcd-main-0:\n  - https://etcd-main-0.etcd-main-peer.default.svc:2380\n  etcd-main-1:\n  - https://etcd-main-1.etcd-main-peer.default.svc:2380\n  etcd-main-2:\n  - https://etcd-main-2.etcd-main-peer.default.svc:2380\ninitial-cluster: etcd-main-0=https://etcd-main-0.etcd-main-peer.default.svc:2380,etcd-main-1=https://etcd-main-1.etcd-main-peer.default.svc:2380,etcd-main-2=https://etcd-main-2.etcd-main-peer.default.svc:2380\ninitial-cluster-state: new\ninitial-cluster-token: etcd-cluster\nlisten-client-urls: https://0.0.0.0:2379\nlisten-peer-urls: https://0.0.0.0:2380\nmetrics: basic\nname: etcd-config\nnext-cluster-version-compatible: true\nquota-backend-bytes: 8589934592\nsnapshot-count: 10000\n";

    #[test]
    fn the_three_keys_of_step_05_are_trimmed_to_the_first_member_and_the_rest_is_kept() {
        let edited = first_member_only(V0_37_CONF, "etcd-main-0").unwrap();
        let doc = EtcdConfDocument::parse(&edited).unwrap();
        assert_eq!(doc.initial_cluster_members(), ["etcd-main-0=https://etcd-main-0.etcd-main-peer.default.svc:2380"]);
        assert_eq!(
            doc.get("initial-advertise-peer-urls"),
            Some(&json!({"etcd-main-0": ["https://etcd-main-0.etcd-main-peer.default.svc:2380"]}))
        );
        assert_eq!(
            doc.get("advertise-client-urls"),
            Some(&json!({"etcd-main-0": ["https://etcd-main-0.etcd-main-peer.default.svc:2379"]}))
        );
        assert!(doc.names_only("etcd-main-0"));
        // Every other key is unchanged and stays where it was.
        let before = EtcdConfDocument::parse(V0_37_CONF).unwrap();
        let others = |d: &EtcdConfDocument| {
            d.0.iter().filter(|(k, _)| !TRIMMED_KEYS.contains(&k.as_str())).cloned().collect::<Vec<_>>()
        };
        assert_eq!(others(&doc), others(&before));
        assert_eq!(
            doc.0.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            before.0.iter().map(|(k, _)| k).collect::<Vec<_>>()
        );
        assert!(!before.names_only("etcd-main-0"));
        assert_eq!(
            first_member_only(V0_37_CONF, "etcd-main-9").unwrap_err(),
            "initial-cluster does not name etcd-main-9"
        );
    }

    #[test]
    fn the_older_format_keeps_its_advertise_strings() {
        // etcd-druid v0.22-v0.24 (pkg/component/etcd/configmap/configmap.go, internal/component/configmap/etcdconfig.go).
        let conf = "name: etcd-main\ninitial-advertise-peer-urls: https@etcd-main-peer@default@2380\ninitial-cluster: etcd-main-0=https://etcd-main-0.etcd-main-peer.default.svc:2380,etcd-main-1=https://etcd-main-1.etcd-main-peer.default.svc:2380\nadvertise-client-urls: https@etcd-main-peer@default@2379\ninitial-cluster-state: new\n";
        let doc = EtcdConfDocument::parse(&first_member_only(conf, "etcd-main-0").unwrap()).unwrap();
        assert_eq!(doc.initial_cluster_members(), ["etcd-main-0=https://etcd-main-0.etcd-main-peer.default.svc:2380"]);
        assert_eq!(doc.get("initial-advertise-peer-urls"), Some(&json!("https@etcd-main-peer@default@2380")));
        assert_eq!(doc.get("initial-cluster-state"), Some(&json!("new")));
        assert!(doc.names_only("etcd-main-0"));
    }

    #[test]
    fn a_per_member_map_without_the_first_member_or_bad_yaml_is_refused() {
        let conf = "initial-cluster: etcd-main-0=https://a:2380\ninitial-advertise-peer-urls:\n  etcd-main-1:\n  - https://b:2380\n";
        assert_eq!(
            first_member_only(conf, "etcd-main-0").unwrap_err(),
            "initial-advertise-peer-urls does not name etcd-main-0"
        );
        assert!(first_member_only("initial-cluster: [unclosed", "etcd-main-0").is_err());
    }

    #[test]
    fn the_plan_scales_the_statefulset_and_deletes_data_only_in_the_pvc_step() {
        let etcd: Etcd = serde_json::from_value(json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "etcd-main", "namespace": "ns"}, "spec": {"replicas": 3}
        }))
        .unwrap();
        let steps = QuorumLossRecoveryPlan.steps(&etcd);
        let destructive: Vec<String> = steps.iter().filter(|s| s.destructive()).map(|s| s.name()).collect();
        assert_eq!(destructive, ["DeletePersistentVolumeClaims"]);
        let all = steps.iter().flat_map(|s| s.kubectl()).collect::<Vec<_>>().join("\n");
        assert!(all.contains("kubectl scale sts etcd-main --replicas=0"), "{all}");
        assert!(
            !all.contains("etcd etcd-main --replicas") && !all.contains("patch etcd"),
            "never shrink the Etcd: {all}"
        );
        assert!(all.contains("kubectl delete lease etcd-main-0 etcd-main-1 etcd-main-2\n"), "{all}");
    }
}
