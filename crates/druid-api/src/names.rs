//! Names of annotations, labels and managed resources that etcd-druid, cert-manager and MCM agree on
//! (DOMAIN.md, "Annotations and labels on Etcd" and "Resources etcd-druid manages").

/// Older operation annotation; `reconcile` asks etcd-druid to reconcile now. Understood by old and new druid.
pub const GARDENER_OPERATION: &str = "gardener.cloud/operation";
/// Newer operation annotation with the same meaning as [`GARDENER_OPERATION`].
pub const DRUID_OPERATION: &str = "druid.gardener.cloud/operation";
/// Value of the operation annotations that requests a reconcile.
pub const OPERATION_RECONCILE: &str = "reconcile";
/// While present, etcd-druid does not reconcile the Etcd spec (status is still updated).
pub const SUSPEND_SPEC_RECONCILE: &str = "druid.gardener.cloud/suspend-etcd-spec-reconcile";
/// While present, the EtcdComponents webhook lets UPDATE/DELETE of managed resources through.
pub const DISABLE_COMPONENT_PROTECTION: &str = "druid.gardener.cloud/disable-etcd-component-protection";
/// Older spelling of [`DISABLE_COMPONENT_PROTECTION`]; still honoured when reading.
pub const DISABLE_RESOURCE_PROTECTION_LEGACY: &str = "druid.gardener.cloud/disable-resource-protection";
/// On an EtcdMember: the new member starts as a learner.
pub const CREATE_AS_LEARNER: &str = "druid.gardener.cloud/create-as-learner";
/// On the StatefulSet: a scale-up from 1 to n members is in progress.
pub const SCALED_TO_MULTI_NODE: &str = "gardener.cloud/scaled-to-multi-node";

/// Label naming the Etcd a managed resource belongs to.
pub const LABEL_PART_OF: &str = "app.kubernetes.io/part-of";
/// Label set to `etcd-druid` on every managed resource.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`].
pub const MANAGED_BY_DRUID: &str = "etcd-druid";
/// Older label naming the Etcd a resource belongs to.
pub const LABEL_INSTANCE_LEGACY: &str = "instance";
/// Older label, value `etcd`.
pub const LABEL_NAME_LEGACY: &str = "name";

/// Label on a Machine that makes MCM skip the drain when it is deleted (value `"True"`).
pub const MACHINE_FORCE_DELETION: &str = "force-deletion";
/// `machineutils.TriggerDeletionByMCM` (MCM `pkg/util/provider/machineutils/utils.go`). Up to v0.60.x, on a Node
/// with value `"true"`, it made MCM delete the Node's Machine (`updateNodeToMachine` in
/// `pkg/util/provider/machinecontroller/machine.go`); v0.61.0 stopped reading it on Nodes (#1055). From v0.56.0
/// it is also the MachineDeployment annotation of cluster-autoscaler's scale-down (`pkg/controller/deployment.go`):
/// a comma-separated list of machine names, `<name>~<RFC3339 time>` from v0.61.3.
pub const NODE_TRIGGER_DELETION_BY_MCM: &str = "node.machine.sapcloud.io/trigger-deletion-by-mcm";
/// Finalizer MCM v0.61.0+ puts on every Node backed by a Machine (`NodeFinalizerName` in
/// `pkg/util/provider/machinecontroller/controller.go`; added in `reconcileClusterNodeKey`, `node.go`). Its
/// presence tells a Node managed by MCM v0.61 or later, on which deleting the Node deletes its Machine.
pub const MCM_NODE_FINALIZER: &str = "node.machine.sapcloud.io/machine-controller";
/// Annotation on a Node that MCM leaves alone (`machineutils.NotManagedByMCM`).
pub const NODE_NOT_MANAGED_BY_MCM: &str = "node.machine.sapcloud.io/not-managed-by-mcm";
/// Machine priority annotation (default 3; lower is deleted first on scale-down).
pub const MACHINE_PRIORITY: &str = "machinepriority.machine.sapcloud.io";
/// Label on a Machine naming its Node.
pub const MACHINE_NODE_LABEL: &str = "node";

/// DWD prober: the replica count a dependent had before it was scaled down.
pub const DWD_REPLICAS: &str = "dependency-watchdog.gardener.cloud/replicas";
/// DWD prober: opt a resource out of scaling.
pub const DWD_IGNORE_SCALING: &str = "dependency-watchdog.gardener.cloud/ignore-scaling";

/// Name of the StatefulSet volume that mounts the etcd configuration ConfigMap.
pub const CONFIG_VOLUME: &str = "etcd-config-file";

/// Names of the resources etcd-druid manages for one Etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedNames {
    etcd: String,
    claim_template: String,
    member_prefix: Option<String>,
}

impl ManagedNames {
    /// Names for Etcd `etcd`; `volume_claim_template` is `spec.volumeClaimTemplate` (defaults to the Etcd name).
    pub fn new(etcd: &str, volume_claim_template: Option<&str>) -> Self {
        ManagedNames {
            etcd: etcd.to_string(),
            claim_template: volume_claim_template.unwrap_or(etcd).to_string(),
            member_prefix: None,
        }
    }
    /// The same names for an Etcd with `spec.memberNamePrefix` (etcd-druid v0.37+); an empty prefix is none.
    pub fn with_member_name_prefix(mut self, prefix: Option<&str>) -> Self {
        self.member_prefix = prefix.filter(|p| !p.is_empty()).map(String::from);
        self
    }
    /// `spec.memberNamePrefix`, if set.
    pub fn member_name_prefix(&self) -> Option<&str> {
        self.member_prefix.as_deref()
    }
    /// Name of the etcd member of pod `i`: `<prefix>-<pod>` with `spec.memberNamePrefix`, else the pod name
    /// (etcd-druid v0.37.1 `api/core/v1alpha1/helper.go` GetMemberName). It is the member lease name, the
    /// `status.members[].name`, the key in `initial-cluster` and the name etcd itself knows the member by.
    pub fn member(&self, i: u32) -> String {
        self.member_of_pod(&self.pod(i))
    }
    /// Member name of the pod called `pod`.
    pub fn member_of_pod(&self, pod: &str) -> String {
        match &self.member_prefix {
            Some(p) => format!("{p}-{pod}"),
            None => pod.to_string(),
        }
    }
    /// Pod of the member called `member` (etcd-druid trims `<prefix>-`, `internal/health/etcdmember/check_ready.go`).
    pub fn pod_of_member<'a>(&self, member: &'a str) -> &'a str {
        match &self.member_prefix {
            Some(p) => member.strip_prefix(p.as_str()).and_then(|m| m.strip_prefix('-')).unwrap_or(member),
            None => member,
        }
    }
    /// Ordinal of the member or pod called `name`, if it is one of this Etcd's.
    pub fn ordinal_of(&self, name: &str) -> Option<u32> {
        let pod = self.pod_of_member(name);
        pod.strip_prefix(self.etcd.as_str())?.strip_prefix('-')?.parse().ok()
    }
    /// The StatefulSet, PodDisruptionBudget and ServiceAccount name.
    pub fn statefulset(&self) -> String {
        self.etcd.clone()
    }
    /// Pod of member `i`.
    pub fn pod(&self, i: u32) -> String {
        format!("{}-{i}", self.etcd)
    }
    /// PVC of member `i`: `<claimTemplate>-<etcd>-<i>`.
    pub fn pvc(&self, i: u32) -> String {
        format!("{}-{}-{i}", self.claim_template, self.etcd)
    }
    /// Member lease of member `i`: the member name (etcd-druid `GetMemberLeaseNames`).
    pub fn member_lease(&self, i: u32) -> String {
        self.member(i)
    }
    /// Lease whose renewTime is the time of the last full snapshot.
    pub fn full_snapshot_lease(&self) -> String {
        format!("{}-full-snap", self.etcd)
    }
    /// Lease whose renewTime is the time of the last delta snapshot.
    pub fn delta_snapshot_lease(&self) -> String {
        format!("{}-delta-snap", self.etcd)
    }
    /// Client service.
    pub fn client_service(&self) -> String {
        format!("{}-client", self.etcd)
    }
    /// Peer service.
    pub fn peer_service(&self) -> String {
        format!("{}-peer", self.etcd)
    }
    /// Newer name of the configuration ConfigMap (older druid uses `etcd-bootstrap-<hash>`).
    pub fn config_map(&self) -> String {
        format!("{}-config", self.etcd)
    }
    /// Role and RoleBinding.
    pub fn role(&self) -> String {
        format!("druid.gardener.cloud:etcd:{}", self.etcd)
    }
    /// Snapshot compaction Job.
    pub fn compaction_job(&self) -> String {
        format!("{}-compactor", self.etcd)
    }
    /// Label selector for the managed resources (newer labels).
    pub fn selector(&self) -> String {
        format!("{LABEL_PART_OF}={},{LABEL_MANAGED_BY}={MANAGED_BY_DRUID}", self.etcd)
    }
    /// Label selector for resources labelled the older way.
    pub fn legacy_selector(&self) -> String {
        format!("{LABEL_INSTANCE_LEGACY}={},{LABEL_NAME_LEGACY}=etcd", self.etcd)
    }
}

/// Label MCM puts on a Node naming its Machine (MCM `machineutils.MachineLabelKey` in
/// `pkg/util/provider/machineutils/utils.go`, added by gardener/machine-controller-manager#919); the other
/// direction is the Machine's `node` label (seeds/004 ~1913: `machine.Labels['node'] = nodeName`).
pub const NODE_MACHINE_NAME_LABEL: &str = "node.gardener.cloud/machine-name";

/// Annotation (on the `E-client` Service for the leader, on a Pod for its member) with the `host:port` of a
/// sidecar the API server's proxy cannot reach; requests then go there directly.
pub const ANNOTATION_DIRECT_ADDRESS: &str = "playground.druidctl.gardener.cloud/backup-api-direct";

/// Pod annotation naming the `https://host:port` URL where the member serves client TLS, when that is not
/// `status.podIP` and the Etcd's client port (set by the playground; usable for a port-forward).
pub const CLIENT_TLS_URL_ANNOTATION: &str = "playground.druidctl.gardener.cloud/etcd-client-tls-url";

/// Pod annotation naming the plain `http://host:port` client URL of the member's etcd, for an Etcd without
/// client TLS whose members the API server cannot reach (set by the playground, whose members listen on
/// loopback ports).
pub const CLIENT_URL_ANNOTATION: &str = "playground.druidctl.gardener.cloud/etcd-client-url";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pvc_names_follow_the_claim_template() {
        let n = ManagedNames::new("etcd-main", Some("main-etcd"));
        assert_eq!(n.pvc(0), "main-etcd-etcd-main-0");
        assert_eq!(ManagedNames::new("etcd-main", None).pvc(2), "etcd-main-etcd-main-2");
        assert_eq!(n.full_snapshot_lease(), "etcd-main-full-snap");
        assert_eq!(n.role(), "druid.gardener.cloud:etcd:etcd-main");
        assert_eq!(n.member_lease(1), "etcd-main-1");
    }

    #[test]
    fn member_names_follow_the_member_name_prefix() {
        let n = ManagedNames::new("etcd-main", Some("main-etcd")).with_member_name_prefix(Some("shoot1"));
        assert_eq!(n.member(0), "shoot1-etcd-main-0");
        assert_eq!(n.member_lease(2), "shoot1-etcd-main-2");
        assert_eq!(n.pod(2), "etcd-main-2", "pod names do not change");
        assert_eq!(n.pod_of_member("shoot1-etcd-main-1"), "etcd-main-1");
        assert_eq!(n.ordinal_of("shoot1-etcd-main-1"), Some(1));
        assert_eq!(n.ordinal_of("etcd-main-2"), Some(2));
        assert_eq!(n.ordinal_of("etcd-events-2"), None);
        let plain = ManagedNames::new("etcd-main", None).with_member_name_prefix(Some(""));
        assert_eq!(plain.member(0), "etcd-main-0");
    }
}
