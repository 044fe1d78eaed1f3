//! Shared by the integration tests: real-world CRDs to serve.

use kube_sim::ApiServer;

/// Registers every CRD of `crates/druid-api/crds` (vendored, unchanged upstream CRDs of etcd-druid,
/// cert-manager and machine-controller-manager): large real schemas with CEL rules, read as files so that
/// this crate does not depend on any druidctl crate.
pub fn register_vendored_crds(server: &ApiServer) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../druid-api/crds");
    let mut files: Vec<_> =
        std::fs::read_dir(&dir).expect("vendored CRD directory").flatten().map(|e| e.path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no CRDs in {}", dir.display());
    for f in files {
        let yaml = std::fs::read_to_string(&f).expect("CRD file reads");
        server.register_crd_yaml(&yaml).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    }
}
