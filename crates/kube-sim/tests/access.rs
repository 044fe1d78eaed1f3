//! RBAC, SelfSubjectAccessReview, admission hooks, the service proxy, fault injection, the HTTP
//! transport through a kubeconfig, and CRD registration of the embedded API server.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::{ApiResource, Discovery};
use kube_sim::{AdmissionHook, AdmissionOperation, AdmissionRequest, ApiServer, FaultRule};
use serde_json::json;

fn status_of(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn grant(server: &ApiServer, ns: &str, user: &str, rules: serde_json::Value) {
    let c = server.client();
    let roles: Api<DynamicObject> =
        Api::namespaced_with(c.clone(), ns, &ApiResource::erase::<k8s_openapi::api::rbac::v1::Role>(&()));
    roles.create(&PostParams::default(), &serde_json::from_value(json!({"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":user},"rules":rules})).unwrap()).await.unwrap();
    let rbs: Api<DynamicObject> =
        Api::namespaced_with(c, ns, &ApiResource::erase::<k8s_openapi::api::rbac::v1::RoleBinding>(&()));
    rbs.create(&PostParams::default(), &serde_json::from_value(json!({"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":user},
        "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":user},"subjects":[{"kind":"User","name":user,"apiGroup":"rbac.authorization.k8s.io"}]})).unwrap()).await.unwrap();
}

#[tokio::test]
async fn rbac_resource_names_subresources_and_forbidden_messages() {
    let server = ApiServer::new();
    server.add_user("bob", &["ops"]);
    grant(
        &server,
        "default",
        "bob",
        json!([
            {"apiGroups":[""],"resources":["configmaps"],"verbs":["get"],"resourceNames":["allowed"]},
            {"apiGroups":["apps"],"resources":["statefulsets/scale"],"verbs":["get","patch"]},
        ]),
    )
    .await;
    let admin_cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    for n in ["allowed", "other"] {
        admin_cms
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata":{"name":n}})).unwrap())
            .await
            .unwrap();
    }
    let bob = server.client_for("bob");
    let cms: Api<ConfigMap> = Api::namespaced(bob.clone(), "default");
    cms.get("allowed").await.unwrap();
    let e = status_of(cms.get("other").await.unwrap_err());
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "configmaps \"other\" is forbidden: User \"bob\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    let e = status_of(cms.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(
        e.message,
        "configmaps is forbidden: User \"bob\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    let nss: Api<Namespace> = Api::all(bob.clone());
    let e = status_of(nss.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(
        e.message,
        "namespaces is forbidden: User \"bob\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope"
    );
    let sts: Api<StatefulSet> = Api::namespaced(bob.clone(), "default");
    let e = status_of(sts.get("x").await.unwrap_err());
    assert_eq!(
        e.message,
        "statefulsets.apps \"x\" is forbidden: User \"bob\" cannot get resource \"statefulsets\" in API group \"apps\" in the namespace \"default\""
    );
    let e = status_of(sts.get_scale("x").await.unwrap_err());
    assert_eq!(e.code, 404, "scale is allowed, the object is missing");
    // A denied subresource: the Status names the resource, only the reason names the subresource.
    let e = status_of(sts.get_status("x").await.unwrap_err());
    assert_eq!(
        e.message,
        "statefulsets.apps \"x\" is forbidden: User \"bob\" cannot get resource \"statefulsets/status\" in API group \"apps\" in the namespace \"default\""
    );
    assert_eq!(e.details.map(|d| d.kind), Some("statefulsets".to_string()));

    let ssar: Api<SelfSubjectAccessReview> = Api::all(bob);
    let review = |verb: &str, res: &str, sub: &str, name: &str| {
        serde_json::from_value::<SelfSubjectAccessReview>(json!({"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview",
            "spec":{"resourceAttributes":{"namespace":"default","verb":verb,"group":if res=="statefulsets" {"apps"} else {""},"resource":res,"subresource":sub,"name":name}}})).unwrap()
    };
    let allowed = |r: SelfSubjectAccessReview| r.status.unwrap().allowed;
    assert!(allowed(ssar.create(&PostParams::default(), &review("get", "configmaps", "", "allowed")).await.unwrap()));
    assert!(!allowed(ssar.create(&PostParams::default(), &review("get", "configmaps", "", "other")).await.unwrap()));
    assert!(allowed(
        ssar.create(&PostParams::default(), &review("patch", "statefulsets", "scale", "x")).await.unwrap()
    ));
    assert!(!allowed(ssar.create(&PostParams::default(), &review("patch", "statefulsets", "", "x")).await.unwrap()));
}

struct DenyManaged;

impl AdmissionHook for DenyManaged {
    fn admit(&self, server: &ApiServer, req: &AdmissionRequest) -> Result<(), String> {
        let managed = req
            .old_object
            .as_ref()
            .or(req.object.as_ref())
            .and_then(|o| o.pointer("/metadata/labels/managed-by"))
            .is_some();
        let protection_off = server.get_object("v1", "configmaps", Some("default"), "protection").is_some();
        if managed && req.operation != AdmissionOperation::Create && req.user != "druid" && !protection_off {
            return Err(format!("changes to managed {} are not allowed", req.resource));
        }
        Ok(())
    }
}

#[tokio::test]
async fn admission_hooks_can_deny_and_read_the_store() {
    let server = ApiServer::new();
    server.add_user("druid", &["system:masters"]);
    server.add_admission_hook(Arc::new(DenyManaged));
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata":{"name":"m","labels":{"managed-by":"druid"}}})).unwrap(),
    )
    .await
    .unwrap();
    let e =
        status_of(cms.patch("m", &PatchParams::default(), &Patch::Merge(json!({"data":{"a":"b"}}))).await.unwrap_err());
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "admission webhook \"admission.kube-sim.local\" denied the request: changes to managed configmaps are not allowed"
    );
    let druid: Api<ConfigMap> = Api::namespaced(server.client_for("druid"), "default");
    druid.patch("m", &PatchParams::default(), &Patch::Merge(json!({"data":{"a":"b"}}))).await.unwrap();
    cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata":{"name":"protection"}})).unwrap())
        .await
        .unwrap();
    cms.delete("m", &Default::default()).await.unwrap();
}

#[tokio::test]
async fn service_proxy_forwards_to_registered_backend() {
    let server = ApiServer::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = vec![0u8; 4096];
            let n = sock.read(&mut buf).await.unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]).to_string();
            let line = req.lines().next().unwrap_or_default().to_string();
            let body = format!("backend saw {line}");
            let _ = sock
                .write_all(
                    format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
                        .as_bytes(),
                )
                .await;
        }
    });
    let svcs: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(server.client(), "default");
    svcs.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata":{"name":"etcd-main-client"},"spec":{"ports":[{"name":"backup","port":8080}]}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    server.register_service_backend("default", "etcd-main-client", 8080, addr);
    let req =
        http::Request::get("/api/v1/namespaces/default/services/etcd-main-client:8080/proxy/snapshot/full?final=true")
            .body(Vec::new())
            .unwrap();
    let text = server.client().request_text(req).await.unwrap();
    assert_eq!(text, "backend saw GET /snapshot/full?final=true HTTP/1.1");
    let req = http::Request::get("/api/v1/namespaces/default/services/etcd-main-client:backup/proxy/healthz")
        .body(Vec::new())
        .unwrap();
    assert_eq!(server.client().request_text(req).await.unwrap(), "backend saw GET /healthz HTTP/1.1", "named port");
}

#[tokio::test]
async fn faults_on_nth_request_rate_and_retry_after_are_logged() {
    let server = ApiServer::new();
    server.faults().add(FaultRule::error("list", "configmaps", 503).on_nth(2).retry_after(7));
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    cms.list(&ListParams::default()).await.unwrap();
    let e = status_of(cms.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (503, "ServiceUnavailable"));
    cms.list(&ListParams::default()).await.unwrap();
    server.faults().add(FaultRule::error("create", "", 429).times(1));
    let e = status_of(
        cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata":{"name":"x"}})).unwrap())
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 429);
    cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata":{"name":"x"}})).unwrap())
        .await
        .unwrap();
    let log = server.request_log();
    assert_eq!(log.count("list", "configmaps"), 3);
    assert_eq!(log.count_code("list", "configmaps", 503), 1);
    assert_eq!(log.count_code("create", "configmaps", 429), 1);
    server.faults().clear();
    server.faults().add(FaultRule::latency("get", "configmaps", Duration::from_millis(50)));
    cms.get("x").await.unwrap();
}

#[tokio::test]
async fn http_transport_with_generated_kubeconfig_and_admin_fault_endpoint() {
    let server = ApiServer::new();
    let ep = server.serve_http("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let kc = kube::config::Kubeconfig::from_yaml(&server.kubeconfig_yaml(&ep.url, "admin", Some("default"))).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
    let client = kube::Client::try_from(cfg).unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata":{"name":"over-http"}})).unwrap())
        .await
        .unwrap();
    assert!(server.get_object("v1", "configmaps", Some("default"), "over-http").is_some());
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    assert!(discovery.groups().any(|g| g.name() == "apps"));
    let rule = http::Request::post("/_sim/faults")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&json!({"verb":"get","resource":"configmaps","code":500,"rate":1.0})).unwrap())
        .unwrap();
    client.request_text(rule).await.unwrap();
    let e = status_of(cms.get("over-http").await.unwrap_err());
    assert_eq!(e.code, 500);
    // An unknown token is rejected.
    let bad = kube::config::Kubeconfig::from_yaml(
        &server.kubeconfig_yaml(&ep.url, "admin", None).replace(&server.token_for("admin").unwrap(), "nope"),
    )
    .unwrap();
    let bad =
        kube::Client::try_from(kube::Config::from_custom_kubeconfig(bad, &Default::default()).await.unwrap()).unwrap();
    let e = status_of(Api::<ConfigMap>::default_namespaced(bad).list(&ListParams::default()).await.unwrap_err());
    assert_eq!(e.code, 401);
}

#[tokio::test]
async fn crds_register_with_defaults_validation_status_and_discovery() {
    let server = ApiServer::new();
    common::register_vendored_crds(&server);
    let client = server.client();
    let aggregated = Discovery::new(client.clone()).run_aggregated().await.unwrap();
    assert!(
        aggregated
            .resolve_gvk(&kube::core::GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"))
            .is_some()
    );
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let (ar, caps) = discovery
        .resolve_gvk(&kube::core::GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "Etcd"))
        .expect("Etcd served");
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "etcds/status" || s.plural == "status"));
    let etcds: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let bad = serde_json::from_value(json!({"apiVersion":"druid.gardener.cloud/v1alpha1","kind":"Etcd","metadata":{"name":"bad"},"spec":{"replicas":"three"}})).unwrap();
    let e = status_of(etcds.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(e.message.starts_with("Etcd.druid.gardener.cloud \"bad\" is invalid: "), "{}", e.message);
    let good = serde_json::from_value(json!({"apiVersion":"druid.gardener.cloud/v1alpha1","kind":"Etcd","metadata":{"name":"etcd-main"},
        "spec":{"replicas":3,"labels":{"app":"etcd"},"selector":{"matchLabels":{"app":"etcd"}},"etcd":{},"backup":{},"unknownField":1},"status":{"ready":true}})).unwrap();
    let e = etcds.create(&PostParams::default(), &good).await.unwrap();
    assert!(e.data["spec"].get("unknownField").is_none(), "pruned");
    assert!(e.data.get("status").is_none(), "status is ignored on create");
    assert_eq!(e.metadata.generation, Some(1));
    let e = etcds
        .patch_status(
            "etcd-main",
            &PatchParams::default(),
            &Patch::Merge(json!({"status":{"ready":true,"replicas":3}})),
        )
        .await
        .unwrap();
    assert_eq!(e.data["status"]["ready"], true);
    let crd = server
        .get_object("apiextensions.k8s.io/v1", "customresourcedefinitions", None, "etcds.druid.gardener.cloud")
        .unwrap();
    let conds = crd["status"]["conditions"].as_array().unwrap();
    assert!(conds.iter().any(|c| c["type"] == "Established" && c["status"] == "True"));
    // Scale subresource from the CRD.
    let sts_like: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
    let scale = sts_like.get_scale("etcd-main").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(3));
}
