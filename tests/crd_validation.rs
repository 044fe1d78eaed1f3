//! Custom resources are validated like kube-apiserver validates them: the real CRDs of
//! `crates/druid-api/crds` registered into the embedded API server refuse what a real seed refuses, through
//! `kube::Client` and through the real `kubectl`.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::core::Status;
use kube_sim::{ApiServer, HttpEndpoint};
use serde_json::{Value, json};

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn etcds(server: &ApiServer) -> Api<DynamicObject> {
    Api::namespaced_with(server.client(), "default", &resource("druid.gardener.cloud", "v1alpha1", "Etcd", "etcds"))
}

fn etcd(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1",
        "kind": "Etcd",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "labels": {"app": "etcd-statefulset", "role": "main"},
            "etcd": {"metrics": "basic"},
            "backup": {"deltaSnapshotPeriod": "5m", "garbageCollectionPeriod": "12h"}
        }
    })
}

fn dynamic(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("dynamic object")
}

fn server() -> ApiServer {
    let server = ApiServer::new();
    landscape::register_upstream_crds(&server).expect("every vendored CRD registers (all CEL rules compile)");
    server
}

fn api_err(e: kube::Error) -> Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The cause kube-apiserver adds instead of evaluating CEL rules when schema errors block them.
fn skipped() -> (String, String, String) {
    (
        "FieldValueInvalid".into(),
        "<nil>".into(),
        "Invalid value: null: some validation rules were not checked because the object was invalid; \
         correct the existing errors to complete validation"
            .into(),
    )
}

/// `(reason, field, message)` of each cause of a 422.
fn causes(s: &Status) -> Vec<(String, String, String)> {
    let details = s.details.as_ref().expect("422 carries details");
    details.causes.iter().map(|c| (c.reason.clone(), c.field.clone(), c.message.clone())).collect()
}

async fn patch_replicas(api: &Api<DynamicObject>, name: &str, replicas: i64) -> Result<DynamicObject, kube::Error> {
    api.patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": replicas}}))).await
}

#[tokio::test]
async fn etcd_replicas_shrink_is_refused_except_to_zero() {
    let server = server();
    let api = etcds(&server);
    api.create(&PostParams::default(), &dynamic(etcd("etcd-main", 3))).await.unwrap();

    let e = api_err(patch_replicas(&api, "etcd-main", 1).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        "Etcd.druid.gardener.cloud \"etcd-main\" is invalid: spec.replicas: Invalid value: 1: Replicas can either be increased or be downscaled to 0."
    );
    assert_eq!(
        causes(&e),
        vec![(
            "FieldValueInvalid".into(),
            "spec.replicas".into(),
            "Invalid value: 1: Replicas can either be increased or be downscaled to 0.".into()
        )]
    );

    let up = patch_replicas(&api, "etcd-main", 5).await.unwrap();
    assert_eq!(up.data["spec"]["replicas"], 5);
    let down = patch_replicas(&api, "etcd-main", 0).await.unwrap();
    assert_eq!(down.data["spec"]["replicas"], 0);
}

#[tokio::test]
async fn etcd_without_required_fields_is_refused() {
    let server = server();
    let api = etcds(&server);
    let mut obj = etcd("etcd-bare", 3);
    for f in ["labels", "etcd", "backup"] {
        obj["spec"].as_object_mut().unwrap().remove(f);
    }
    let e = api_err(api.create(&PostParams::default(), &dynamic(obj)).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    let required: Vec<(String, String)> =
        causes(&e).into_iter().filter(|(r, _, _)| r == "FieldValueRequired").map(|(_, f, m)| (f, m)).collect();
    assert_eq!(
        required,
        vec![
            ("spec.backup".into(), "Required value".into()),
            ("spec.etcd".into(), "Required value".into()),
            ("spec.labels".into(), "Required value".into()),
        ]
    );
    assert!(server.get_object("druid.gardener.cloud/v1alpha1", "etcds", Some("default"), "etcd-bare").is_none());
}

#[tokio::test]
async fn enum_and_pattern_violations_and_pruning() {
    let server = server();
    let api = etcds(&server);
    let mut obj = etcd("etcd-enum", 3);
    obj["spec"]["etcd"]["metrics"] = json!("verbose");
    let e = api_err(api.create(&PostParams::default(), &dynamic(obj)).await.unwrap_err());
    assert_eq!(
        causes(&e),
        vec![
            (
                "FieldValueNotSupported".into(),
                "spec.etcd.metrics".into(),
                r#"Unsupported value: "verbose": supported values: "basic", "extensive""#.into()
            ),
            skipped(),
        ]
    );

    let mut obj = etcd("etcd-pattern", 3);
    obj["spec"]["memberNamePrefix"] = json!("Bad_Prefix");
    let e = api_err(api.create(&PostParams::default(), &dynamic(obj)).await.unwrap_err());
    assert_eq!(
        causes(&e),
        vec![(
            "FieldValueInvalid".into(),
            "spec.memberNamePrefix".into(),
            r#"Invalid value: "Bad_Prefix": spec.memberNamePrefix in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"#.into()
        )]
    );

    let mut obj = etcd("etcd-pruned", 3);
    obj["spec"]["unknownField"] = json!("dropped");
    let created = api.create(&PostParams::default(), &dynamic(obj)).await.unwrap();
    assert!(created.data["spec"].get("unknownField").is_none(), "{:?}", created.data);
    let stored = server.get_object("druid.gardener.cloud/v1alpha1", "etcds", Some("default"), "etcd-pruned").unwrap();
    assert!(stored["spec"].get("unknownField").is_none());
    assert_eq!(stored["spec"]["labels"]["role"], "main");
}

#[tokio::test]
async fn status_subresource_is_validated_against_the_status_schema() {
    let server = server();
    let api = etcds(&server);
    api.create(&PostParams::default(), &dynamic(etcd("etcd-status", 3))).await.unwrap();
    let e = api_err(
        api.patch_status("etcd-status", &PatchParams::default(), &Patch::Merge(json!({"status": {"ready": "yes"}})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        causes(&e),
        vec![
            (
                "FieldValueTypeInvalid".into(),
                "status.ready".into(),
                r#"Invalid value: "string": status.ready in body must be of type boolean: "string""#.into()
            ),
            skipped(),
        ]
    );
    api.patch_status("etcd-status", &PatchParams::default(), &Patch::Merge(json!({"status": {"ready": true}})))
        .await
        .unwrap();
}

#[tokio::test]
async fn etcd_ops_task_cel_rules_and_defaults() {
    let server = server();
    let api: Api<DynamicObject> = Api::namespaced_with(
        server.client(),
        "default",
        &resource("druid.gardener.cloud", "v1alpha1", "EtcdOpsTask", "etcdopstasks"),
    );
    let task = |ty: &str| {
        dynamic(json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "EtcdOpsTask", "metadata": {"name": "snap"},
            "spec": {"etcdName": "etcd-main", "config": {"onDemandSnapshot": {"type": ty, "isFinal": true}}}
        }))
    };
    let e = api_err(api.create(&PostParams::default(), &task("delta")).await.unwrap_err());
    assert_eq!(
        causes(&e),
        vec![(
            "FieldValueInvalid".into(),
            "spec.config.onDemandSnapshot".into(),
            "Invalid value: isFinal must be false (or omitted) when type is 'delta'".into()
        )]
    );
    let created = api.create(&PostParams::default(), &task("full")).await.unwrap();
    assert_eq!(created.data["spec"]["ttlSecondsAfterFinished"], 3600, "default applied");
    let e = api_err(
        api.patch("snap", &PatchParams::default(), &Patch::Merge(json!({"spec": {"etcdName": "other"}})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        causes(&e),
        vec![(
            "FieldValueInvalid".into(),
            "spec.etcdName".into(),
            r#"Invalid value: "other": etcdName is immutable"#.into()
        )]
    );
}

#[tokio::test]
async fn cert_manager_and_mcm_resources_are_validated() {
    // The vendored cert-manager and MCM CRDs carry no CEL rules; their schema checks apply.
    let server = server();
    let certs: Api<DynamicObject> = Api::namespaced_with(
        server.client(),
        "default",
        &resource("cert-manager.io", "v1", "Certificate", "certificates"),
    );
    let cert = |alg: &str| {
        dynamic(json!({
            "apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "tls"},
            "spec": {"secretName": "tls", "issuerRef": {"name": "ca"}, "privateKey": {"algorithm": alg}}
        }))
    };
    let e = api_err(certs.create(&PostParams::default(), &cert("DSA")).await.unwrap_err());
    assert_eq!(
        causes(&e),
        vec![(
            "FieldValueNotSupported".into(),
            "spec.privateKey.algorithm".into(),
            r#"Unsupported value: "DSA": supported values: "RSA", "ECDSA", "Ed25519""#.into()
        )]
    );
    certs.create(&PostParams::default(), &cert("ECDSA")).await.unwrap();

    let mds: Api<DynamicObject> = Api::namespaced_with(
        server.client(),
        "default",
        &resource("machine.sapcloud.io", "v1alpha1", "MachineDeployment", "machinedeployments"),
    );
    let md = dynamic(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment", "metadata": {"name": "md"},
        "spec": {"replicas": "three", "template": {"spec": {"class": {"kind": "MachineClass", "name": "c"}}}}
    }));
    let e = api_err(mds.create(&PostParams::default(), &md).await.unwrap_err());
    // The scale subresource's replicas path is read as an int64 too (`ValidateScaleSpec`, apiextensions-apiserver
    // `pkg/registry/customresource/validator.go`), as on kube-apiserver 1.36.
    assert_eq!(
        causes(&e),
        vec![
            (
                "FieldValueTypeInvalid".into(),
                "spec.replicas".into(),
                r#"Invalid value: "string": spec.replicas in body must be of type integer: "string""#.into()
            ),
            (
                "FieldValueInvalid".into(),
                ".spec.replicas".into(),
                "Invalid value: 0: .spec.replicas accessor error: three is of the type string, expected int64".into()
            ),
        ]
    );
}

// ---- the same through the real kubectl ----

struct Kubectl {
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    _endpoint: HttpEndpoint,
}

impl Kubectl {
    async fn start(server: &ApiServer) -> Kubectl {
        let endpoint = server.serve_http("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("config");
        std::fs::write(&kubeconfig, server.kubeconfig_yaml(&endpoint.url, "admin", Some("default"))).unwrap();
        Kubectl { dir, kubeconfig, _endpoint: endpoint }
    }

    /// Runs kubectl off the async runtime (the server lives on it).
    async fn run(&self, args: &[&str], stdin: Option<String>) -> Output {
        let kubeconfig = self.kubeconfig.clone();
        let cache = self.dir.path().join("cache");
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let mut child = Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .arg("--cache-dir")
                .arg(&cache)
                .args(&args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("kubectl on PATH");
            let mut input = child.stdin.take().unwrap();
            if let Some(s) = stdin {
                input.write_all(s.as_bytes()).unwrap();
            }
            drop(input);
            child.wait_with_output().unwrap()
        })
        .await
        .unwrap()
    }

    async fn ok(&self, args: &[&str], stdin: Option<String>) -> String {
        let out = self.run(args, stdin).await;
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    async fn fails(&self, args: &[&str], stdin: Option<String>) -> String {
        let out = self.run(args, stdin).await;
        assert!(
            !out.status.success(),
            "kubectl {args:?} unexpectedly succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_the_replicas_rule_and_required_fields() {
    let server = server();
    let k = Kubectl::start(&server).await;
    k.ok(&["create", "-f", "-"], Some(etcd("etcd-main", 3).to_string())).await;

    let err =
        k.fails(&["patch", "etcd", "etcd-main", "--type", "merge", "-p", r#"{"spec":{"replicas":1}}"#], None).await;
    assert!(
        err.contains(r#"The Etcd "etcd-main" is invalid: spec.replicas: Invalid value: 1: Replicas can either be increased or be downscaled to 0."#),
        "{err}"
    );
    // the scale subresource writes spec.replicas through the same validation
    let err = k.fails(&["scale", "etcd", "etcd-main", "--replicas=2"], None).await;
    assert!(
        err.contains("spec.replicas: Invalid value: 2: Replicas can either be increased or be downscaled to 0."),
        "{err}"
    );
    k.ok(&["patch", "etcd", "etcd-main", "--type", "merge", "-p", r#"{"spec":{"replicas":5}}"#], None).await;
    k.ok(&["patch", "etcd", "etcd-main", "--type", "merge", "-p", r#"{"spec":{"replicas":0}}"#], None).await;
    let replicas = k.ok(&["get", "etcd", "etcd-main", "-o", "jsonpath={.spec.replicas}"], None).await;
    assert_eq!(replicas.trim(), "0");

    let mut bare = etcd("etcd-bare", 3);
    for f in ["labels", "etcd", "backup"] {
        bare["spec"].as_object_mut().unwrap().remove(f);
    }
    let err = k.fails(&["create", "-f", "-"], Some(bare.to_string())).await;
    for field in ["spec.backup", "spec.etcd", "spec.labels"] {
        assert!(err.contains(&format!("{field}: Required value")), "{err}");
    }
}

#[test]
fn etcd_operator_task_crd_generated_from_the_rust_type_validates() {
    let crd = serde_json::to_value(druidctl::api::task::crd()).expect("CRD serializes");
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let v =
        kube_sim::validation::CrdValidator::new(schema).unwrap_or_else(|e| panic!("EtcdOperatorTask schema: {e:?}"));
    println!("etcdoperatortasks.druid.gardener.cloud: {} CEL rules", v.rule_count());
    assert!(v.rule_count() >= 1);
    let task = |spec: Value| json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "EtcdOperatorTask", "metadata": {"name": "t"}, "spec": spec});
    let owner = json!({"name": "etcd-main", "namespace": "shoot--a--b"});
    let ok = task(json!({"type": "OnDemandSnapshot", "ownerEtcdRefrence": owner}));
    assert_eq!(v.validate(&ok, None, kube_sim::validation::Scope::Main), vec![]);
    let both = task(json!({"type": "OnDemandSnapshot", "ownerEtcdRefrence": owner, "ownerEtcdReference": owner}));
    let errs = v.validate(&both, None, kube_sim::validation::Scope::Main);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!((errs[0].reason.as_str(), errs[0].field.as_str()), ("FieldValueInvalid", "spec"));
    let neither = task(json!({"type": "OnDemandSnapshot"}));
    assert_eq!(v.validate(&neither, None, kube_sim::validation::Scope::Main).len(), 1);
}
