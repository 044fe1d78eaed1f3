//! Every manifest in `deploy/` (the CRD, the ClusterRoles, the `serve` Deployment) is accepted by the real
//! kube-apiserver: `kubectl apply --dry-run=server`, which runs admission and validation without storing.

use crate::realk8s_support;

use realk8s_support::RealK8s;

#[test]
fn the_deploy_manifests_pass_server_side_dry_run_on_the_real_api_server() {
    let Some(real) = RealK8s::get("deploy-manifests", false) else { return };
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let mut files: Vec<_> = std::fs::read_dir(&deploy)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "{files:?}");
    // The namespace and the CRD must exist for the namespaced objects and the roles to be judged.
    let crd = deploy.join("crd.yaml");
    let out = real.kubectl(&["apply", "--server-side", "-f", crd.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in &files {
        let out = real.kubectl(&["apply", "--dry-run=server", "--server-side", "-f", f.to_str().unwrap()], None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The serve Deployment's namespace is created by the same file; a dry run does not store it.
        let only_missing_namespace = stderr.lines().all(|l| l.contains("namespaces \"druidctl-system\" not found"));
        assert!(out.status.success() || only_missing_namespace, "{}: {stderr}", f.display());
    }
    let ns = real.kubectl(&["create", "namespace", "druidctl-system"], None);
    let ns_err = String::from_utf8_lossy(&ns.stderr);
    assert!(ns.status.success() || ns_err.contains("AlreadyExists"), "{ns_err}");
    let serve = deploy.join("serve.yaml");
    let out = real.kubectl(&["apply", "--dry-run=server", "--server-side", "-f", serve.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let _ = real.kubectl(&["delete", "namespace", "druidctl-system", "--wait=false"], None);
    assert!(stdout.contains("deployment.apps/druidctl-serve serverside-applied (server dry run)"), "{stdout}");
}
