//! The upstream CustomResourceDefinitions druidctl works with, vendored unchanged in `crates/druid-api/crds/`:
//! etcd-druid's `Etcd`, `EtcdOpsTask` and `EtcdCopyBackupsTask`, cert-manager's `Certificate` and
//! `CertificateRequest`, machine-controller-manager's `Machine`, `MachineSet`, `MachineDeployment` and
//! `MachineClass`. Each entry is `(file name, YAML)`.

pub const UPSTREAM: &[(&str, &str)] = &[
    ("cert-manager.io_certificaterequests.yaml", include_str!("../crds/cert-manager.io_certificaterequests.yaml")),
    ("cert-manager.io_certificates.yaml", include_str!("../crds/cert-manager.io_certificates.yaml")),
    (
        "druid.gardener.cloud_etcdcopybackupstasks.yaml",
        include_str!("../crds/druid.gardener.cloud_etcdcopybackupstasks.yaml"),
    ),
    ("druid.gardener.cloud_etcdopstasks.yaml", include_str!("../crds/druid.gardener.cloud_etcdopstasks.yaml")),
    ("druid.gardener.cloud_etcds.yaml", include_str!("../crds/druid.gardener.cloud_etcds.yaml")),
    ("machine.sapcloud.io_machineclasses.yaml", include_str!("../crds/machine.sapcloud.io_machineclasses.yaml")),
    (
        "machine.sapcloud.io_machinedeployments.yaml",
        include_str!("../crds/machine.sapcloud.io_machinedeployments.yaml"),
    ),
    ("machine.sapcloud.io_machines.yaml", include_str!("../crds/machine.sapcloud.io_machines.yaml")),
    ("machine.sapcloud.io_machinesets.yaml", include_str!("../crds/machine.sapcloud.io_machinesets.yaml")),
];
