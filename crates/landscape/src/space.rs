//! The playground's `space-exceeded` failure: an Etcd gets a small backend quota the way an operator gives it
//! one (`spec.etcd.quota`), and writes fill its database until etcd raises `NOSPACE`.
//!
//! What happens then is what happens on a seed:
//! - etcd-druid renders the quota into the ConfigMap (`quota-backend-bytes`, druid v0.37.1
//!   `internal/component/configmap/etcdconfig.go` `getDBQuotaBytes`) and puts the ConfigMap's checksum on the pod
//!   template (`checksum/etcd-configmap`, `internal/component/statefulset/builder.go`), so the StatefulSet rolls
//!   its pods, highest ordinal first, one at a time; each member starts with the new quota. The landscape's
//!   StatefulSet controller does not roll on template changes, so this failure deletes the pods in that order
//!   itself and waits for each to be Ready again, as the rolling update would.
//! - Once the database reaches the quota, etcd refuses writes ("mvcc: database space exceeded") and raises
//!   `NOSPACE` for the whole cluster; reads keep working.
//! - The pods stay Ready (etcd-wrapper v0.6.2's readiness is a linearizable Get), the sidecar keeps renewing
//!   the member leases from the Maintenance Status it reads (etcd-backup-restore v0.41.2
//!   `pkg/health/heartbeat/heartbeat.go` `RenewMemberLease`, which ignores the status' errors), full snapshots
//!   are reads and succeed, delta snapshots find no events and still renew the delta lease
//!   (`pkg/snapshot/snapshotter/snapshotter.go`, `DeltaSnapshotCaseLeaseUpdate` on every delta period). So
//!   etcd-druid's Ready, AllMembersReady and BackupReady stay True: only etcd itself tells (see
//!   [`crate::member`]'s readiness).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::LandscapeError;
use super::etcdconf::EtcdConf;
use super::playground::Playground;
use druid_api::Etcd;
use druid_api::quantity::parse_bytes;

/// The quota the failure gives the Etcd: small enough to fill in seconds, large enough for a defragmented
/// database of the playground to fit with room to spare.
pub const SPACE_EXCEEDED_QUOTA: &str = "16Mi";
/// Size of each value written to fill the database.
const VALUE_BYTES: usize = 100 * 1024;
/// The keys written over and over: every write keeps the old revision until a compaction, so the history (not
/// the live data) fills the database, as a kube-apiserver's churn does between compactions.
const KEYS: usize = 8;
/// Prefix of the keys written.
pub const FILL_PREFIX: &str = "/playground/space-exceeded/";

/// Gives the Etcd in `ns` the small quota and writes until etcd raises `NOSPACE`; says what it did.
pub(crate) async fn exceed_space(pg: &Playground, ns: &str) -> Result<String, LandscapeError> {
    let name = pg.etcd_name().to_string();
    if let crate::etcd::EtcdBackend::Simulated { .. } = pg.etcd_backend() {
        return Err(LandscapeError::External(
            "space-exceeded needs real etcd members (the simulated ones keep no backend quota)".into(),
        ));
    }
    let quota = parse_bytes(SPACE_EXCEEDED_QUOTA).expect("a quantity") as u64;
    let etcds: Api<Etcd> = Api::namespaced(pg.client(), ns);
    let etcd = etcds.get(&name).await.map_err(|e| LandscapeError::kube("get etcd", e))?;
    if etcd.spec.etcd.quota_bytes() != quota {
        let patch = json!({"spec": {"etcd": {"quota": SPACE_EXCEEDED_QUOTA}}});
        etcds
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| LandscapeError::kube("set spec.etcd.quota", e))?;
    }
    wait_config_quota(pg, ns, &etcd, quota).await?;
    let members = u32::try_from(etcd.spec.replicas.max(1)).unwrap_or(1);
    let mut rolled = Vec::new();
    for i in (0..members).rev() {
        let runs_with_quota =
            pg.member(ns, i).is_some_and(|m| m.process().config().quota_backend_bytes == Some(quota as i64));
        if !runs_with_quota {
            roll_pod(pg, ns, &etcd.managed_names().pod(i)).await?;
            rolled.push(i);
        }
    }
    pg.wait_ready(Duration::from_secs(60)).await?;
    let writes = fill(pg, ns, quota).await?;
    let rolled = if rolled.is_empty() {
        "its members already ran with it".to_string()
    } else {
        format!("members {rolled:?} restarted with it, highest ordinal first")
    };
    Ok(format!(
        "etcd {ns}/{name} got spec.etcd.quota {SPACE_EXCEEDED_QUOTA} (quota-backend-bytes {quota}; {rolled}); {writes} writes of {} KiB to {KEYS} keys under {FILL_PREFIX} filled its database until etcd raised NOSPACE: writes fail with \"mvcc: database space exceeded\", reads still work, and etcd-druid's conditions stay green",
        VALUE_BYTES / 1024
    ))
}

/// Waits until etcd-druid rendered `quota` into the Etcd's ConfigMap.
async fn wait_config_quota(pg: &Playground, ns: &str, etcd: &Etcd, quota: u64) -> Result<(), LandscapeError> {
    let cms: Api<ConfigMap> = Api::namespaced(pg.client(), ns);
    let cm = etcd.managed_names().config_map();
    let timeout = Duration::from_secs(30);
    let deadline = Instant::now() + timeout;
    loop {
        let rendered = cms
            .get_opt(&cm)
            .await
            .ok()
            .flatten()
            .and_then(|c| c.data?.get("etcd.conf.yaml").cloned())
            .and_then(|y| EtcdConf::parse(&y).ok())
            .and_then(|c| u64::try_from(c.quota_backend_bytes).ok());
        if rendered == Some(quota) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(LandscapeError::Timeout {
                what: format!("quota-backend-bytes {quota} in configmap {cm}"),
                timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Deletes pod `pod` and waits until its replacement is Ready (one step of a StatefulSet rolling update).
async fn roll_pod(pg: &Playground, ns: &str, pod: &str) -> Result<(), LandscapeError> {
    let pods: Api<Pod> = Api::namespaced(pg.client(), ns);
    let old = pods.get_opt(pod).await.map_err(|e| LandscapeError::kube("get pod", e))?.and_then(|p| p.metadata.uid);
    match pods.delete(pod, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(LandscapeError::kube(format!("delete pod {pod}"), e)),
    }
    let timeout = Duration::from_secs(60);
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(p)) = pods.get_opt(pod).await
            && p.metadata.uid != old
            && p.metadata.deletion_timestamp.is_none()
            && p.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(LandscapeError::Timeout { what: format!("pod {ns}/{pod} to be Ready again"), timeout });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Writes [`VALUE_BYTES`]-sized values over [`KEYS`] keys until etcd refuses for lack of space; returns how
/// many writes succeeded.
async fn fill(pg: &Playground, ns: &str, quota: u64) -> Result<usize, LandscapeError> {
    let client = pg
        .etcd_client(ns, 0)
        .ok_or_else(|| LandscapeError::NotFound(format!("member 0 of {ns}/{} does not run", pg.etcd_name())))?
        .with_timeout(Duration::from_secs(10));
    let value = "x".repeat(VALUE_BYTES);
    // Far more than the quota holds: a loop that never meets NOSPACE is an error, not a hang.
    let limit = 4 * quota as usize / VALUE_BYTES + 100;
    for n in 0..limit {
        match client.put(format!("{FILL_PREFIX}{:02}", n % KEYS), &value).await {
            Ok(_) => {}
            // etcd's ErrGRPCNoSpace: "etcdserver: mvcc: database space exceeded".
            Err(e) if e.to_string().contains("database space exceeded") => return Ok(n),
            Err(e) => return Err(e.into()),
        }
    }
    Err(LandscapeError::External(format!(
        "{limit} writes did not fill the database of {ns}/{} (quota {quota} bytes)",
        pg.etcd_name()
    )))
}
