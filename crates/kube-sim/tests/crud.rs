//! Fidelity tests of the embedded API server's generic REST machinery through `kube::Client`.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::Status;
use kube_sim::ApiServer;
use serde_json::json;

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name,"labels":labels},"data":{"k":"v"}}),
    )
    .unwrap()
}

fn api_err(e: kube::Error) -> Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn create_get_update_conflict_and_not_found_have_real_status_bodies() {
    let server = ApiServer::new();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let created = cms.create(&PostParams::default(), &cm("a", json!({}))).await.unwrap();
    let md = &created.metadata;
    assert!(md.uid.is_some() && md.creation_timestamp.is_some() && md.resource_version.is_some());
    assert_eq!(md.generation, None, "configmaps carry no generation");

    let e = api_err(cms.create(&PostParams::default(), &cm("a", json!({}))).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(e.message, "configmaps \"a\" already exists");

    let mut stale = created.clone();
    let mut fresh = created.clone();
    fresh.data = Some([("k".to_string(), "2".to_string())].into());
    let updated = cms.replace("a", &PostParams::default(), &fresh).await.unwrap();
    assert!(
        updated.metadata.resource_version.unwrap().parse::<u64>().unwrap()
            > md.resource_version.clone().unwrap().parse::<u64>().unwrap()
    );
    stale.data = Some([("k".to_string(), "3".to_string())].into());
    let e = api_err(cms.replace("a", &PostParams::default(), &stale).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        e.message,
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );

    let e = api_err(cms.get("missing").await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str(), e.message.as_str()), (404, "NotFound", "configmaps \"missing\" not found"));
}

#[tokio::test]
async fn invalid_names_are_rejected_with_422_causes() {
    let server = ApiServer::new();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let e = api_err(cms.create(&PostParams::default(), &cm("Bad_Name", json!({}))).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(e.message.starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"), "{}", e.message);
}

#[tokio::test]
async fn namespaced_create_requires_an_existing_namespace() {
    let server = ApiServer::new();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "nope");
    let e = api_err(cms.create(&PostParams::default(), &cm("a", json!({}))).await.unwrap_err());
    assert_eq!((e.code, e.message.as_str()), (404, "namespaces \"nope\" not found"));
}

#[tokio::test]
async fn generate_name_label_and_field_selectors_and_pagination() {
    let server = ApiServer::new();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    for i in 0..7 {
        let mut c = cm("", json!({"app": if i % 2 == 0 { "etcd" } else { "other" }, "idx": i.to_string()}));
        c.metadata.name = None;
        c.metadata.generate_name = Some("gen-".into());
        let c = cms.create(&PostParams::default(), &c).await.unwrap();
        assert!(c.metadata.name.unwrap().starts_with("gen-"));
    }
    let sel = |s: &str| ListParams::default().labels(s);
    assert_eq!(cms.list(&sel("app=etcd")).await.unwrap().items.len(), 4);
    assert_eq!(cms.list(&sel("app!=etcd")).await.unwrap().items.len(), 3);
    assert_eq!(cms.list(&sel("idx in (1,2,3)")).await.unwrap().items.len(), 3);
    assert_eq!(cms.list(&sel("idx notin (1,2,3),app")).await.unwrap().items.len(), 4);
    assert_eq!(cms.list(&sel("!app")).await.unwrap().items.len(), 0);
    let first = cms.list(&ListParams::default()).await.unwrap().items[0].metadata.name.clone().unwrap();
    let by_name = cms.list(&ListParams::default().fields(&format!("metadata.name={first}"))).await.unwrap();
    assert_eq!(by_name.items.len(), 1);
    let e = api_err(cms.list(&ListParams::default().fields("spec.bogus=1")).await.unwrap_err());
    // kube-apiserver 1.36 for a kind with only the default field selectors.
    assert_eq!(
        (e.code, e.message.as_str()),
        (400, "\"spec.bogus\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")
    );

    let mut names = Vec::new();
    let mut lp = ListParams::default().limit(3);
    loop {
        let page = cms.list(&lp).await.unwrap();
        assert!(page.items.len() <= 3);
        names.extend(page.items.iter().map(|c| c.metadata.name.clone().unwrap()));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(names.len(), 7);
}

#[tokio::test]
async fn generation_bumps_on_spec_changes_only_and_scale_subresource_works() {
    let server = ApiServer::new();
    let sts: Api<StatefulSet> = Api::namespaced(server.client(), "default");
    let s: StatefulSet =
        serde_json::from_value(json!({"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"etcd-main"},
        "spec":{"replicas":3,"serviceName":"etcd-main","selector":{"matchLabels":{"app":"etcd"}},
        "template":{"metadata":{"labels":{"app":"etcd"}},"spec":{"containers":[{"name":"etcd","image":"etcd:1"}]}}}}))
        .unwrap();
    let s = sts.create(&PostParams::default(), &s).await.unwrap();
    assert_eq!(s.metadata.generation, Some(1));
    let pp = PatchParams::default();
    let s = sts.patch("etcd-main", &pp, &Patch::Merge(json!({"metadata":{"labels":{"x":"y"}}}))).await.unwrap();
    assert_eq!(s.metadata.generation, Some(1), "metadata changes do not bump generation");
    let s = sts
        .patch_status("etcd-main", &pp, &Patch::Merge(json!({"status":{"replicas":3,"readyReplicas":2}})))
        .await
        .unwrap();
    assert_eq!(s.metadata.generation, Some(1), "status changes do not bump generation");
    assert_eq!(s.status.unwrap().ready_replicas, Some(2));
    let scale = sts.get_scale("etcd-main").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(3));
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=etcd"));
    sts.patch_scale("etcd-main", &pp, &Patch::Merge(json!({"spec":{"replicas":5}}))).await.unwrap();
    let s = sts.get("etcd-main").await.unwrap();
    assert_eq!((s.spec.unwrap().replicas, s.metadata.generation), (Some(5), Some(2)));
    // The replicas field now belongs to the scale writer's own entry, which has no time.
    let scaled = s.metadata.managed_fields.unwrap().into_iter().find(|m| m.subresource.as_deref() == Some("scale"));
    let scaled = scaled.expect("an entry of the scale subresource");
    assert_eq!((scaled.operation.as_deref(), scaled.time.is_none()), (Some("Update"), true));
    assert_eq!(scaled.fields_v1.unwrap().0, json!({"f:spec":{"f:replicas":{}}}));
    let applied =
        json!({"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"etcd-main"},"spec":{"replicas":1}});
    let e =
        api_err(sts.patch_scale("etcd-main", &PatchParams::apply("hpa"), &Patch::Apply(&applied)).await.unwrap_err());
    assert_eq!(e.code, 409);
    assert!(
        e.message.contains("conflict with \"")
            && e.message.contains("with subresource \"scale\" using autoscaling/v1: .spec.replicas"),
        "{}",
        e.message
    );
    sts.patch_scale("etcd-main", &PatchParams::apply("hpa").force(), &Patch::Apply(&applied)).await.unwrap();
    assert_eq!(sts.get("etcd-main").await.unwrap().spec.unwrap().replicas, Some(1));
    // Writing status through the main resource is ignored.
    let s2 = sts.patch("etcd-main", &pp, &Patch::Merge(json!({"status":{"readyReplicas":0}}))).await.unwrap();
    assert_eq!(s2.status.unwrap().ready_replicas, Some(2));
}

#[tokio::test]
async fn patches_merge_json_with_test_and_strategic() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let p: Pod = serde_json::from_value(json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},
        "spec":{"containers":[{"name":"etcd","image":"a","env":[{"name":"A","value":"1"}]},{"name":"backup","image":"b"}]}})).unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
    let pp = PatchParams::default();
    let p = pods
        .patch(
            "p",
            &pp,
            &Patch::Strategic(
                // A pod's spec may change only in its images (pod immutability); the merge key keeps both
                // containers and the untouched env.
                json!({"spec":{"containers":[{"name":"etcd","image":"a2"}]}}),
            ),
        )
        .await
        .unwrap();
    let cs = p.spec.unwrap().containers;
    assert_eq!(cs.len(), 2);
    assert_eq!(cs[0].image.as_deref(), Some("a2"));
    assert_eq!(cs[0].env.as_ref().unwrap().len(), 1);
    let jp: json_patch::Patch = serde_json::from_value(json!([{"op":"test","path":"/metadata/name","value":"wrong"},{"op":"add","path":"/metadata/labels","value":{"a":"b"}}])).unwrap();
    let e = api_err(pods.patch("p", &pp, &Patch::<()>::Json(jp)).await.unwrap_err());
    assert_eq!(e.code, 422);
    let jp: json_patch::Patch = serde_json::from_value(json!([{"op":"test","path":"/metadata/name","value":"p"},{"op":"add","path":"/metadata/labels","value":{"a":"b"}}])).unwrap();
    let p = pods.patch("p", &pp, &Patch::<()>::Json(jp)).await.unwrap();
    assert_eq!(p.metadata.labels.unwrap()["a"], "b");
}

#[tokio::test]
async fn server_side_apply_tracks_managers_removes_fields_and_conflicts() {
    let server = ApiServer::new();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let cfg = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ssa"},"data":{"a":"1","b":"2"}});
    let c = cms.patch("ssa", &PatchParams::apply("mgr-one"), &Patch::Apply(&cfg)).await.unwrap();
    assert_eq!(c.metadata.managed_fields.as_ref().unwrap()[0].manager.as_deref(), Some("mgr-one"));
    let cfg = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ssa"},"data":{"a":"1"}});
    let c = cms.patch("ssa", &PatchParams::apply("mgr-one"), &Patch::Apply(&cfg)).await.unwrap();
    assert_eq!(c.data.unwrap().len(), 1, "field dropped from the applied config is removed");
    let other = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ssa"},"data":{"a":"changed"}});
    let e = api_err(cms.patch("ssa", &PatchParams::apply("mgr-two"), &Patch::Apply(&other)).await.unwrap_err());
    assert_eq!(e.code, 409);
    assert_eq!(e.message, "Apply failed with 1 conflict: conflict with \"mgr-one\": .data.a");
    let c = cms.patch("ssa", &PatchParams::apply("mgr-two").force(), &Patch::Apply(&other)).await.unwrap();
    assert_eq!(c.data.unwrap()["a"], "changed");
}

#[tokio::test]
async fn dry_run_does_not_persist() {
    let server = ApiServer::new();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let pp = PostParams { dry_run: true, ..Default::default() };
    let c = cms.create(&pp, &cm("dry", json!({}))).await.unwrap();
    assert_eq!(c.metadata.name.as_deref(), Some("dry"));
    assert!(cms.get_opt("dry").await.unwrap().is_none());
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let server = ApiServer::new();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let mut c = cm("fin", json!({}));
    c.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &c).await.unwrap();
    cms.delete("fin", &DeleteParams::default()).await.unwrap();
    let c = cms.get("fin").await.unwrap();
    assert!(c.metadata.deletion_timestamp.is_some());
    cms.patch("fin", &PatchParams::default(), &Patch::Merge(json!({"metadata":{"finalizers":null}}))).await.unwrap();
    assert!(cms.get_opt("fin").await.unwrap().is_none());
}

async fn owned_pair(server: &ApiServer, owner: &str) -> (Api<ConfigMap>, String) {
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let o = cms.create(&PostParams::default(), &cm(owner, json!({}))).await.unwrap();
    let mut d = cm(&format!("{owner}-dep"), json!({}));
    d.metadata.owner_references = Some(vec![serde_json::from_value(json!({"apiVersion":"v1","kind":"ConfigMap","name":owner,"uid":o.metadata.uid.unwrap(),"blockOwnerDeletion":true})).unwrap()]);
    d.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &d).await.unwrap();
    (cms, format!("{owner}-dep"))
}

#[tokio::test]
async fn garbage_collection_background_foreground_and_orphan() {
    let server = ApiServer::new();
    // background: owner gone at once, dependent deleted (held by its finalizer)
    let (cms, dep) = owned_pair(&server, "bg").await;
    cms.delete("bg", &DeleteParams::background()).await.unwrap();
    assert!(cms.get_opt("bg").await.unwrap().is_none());
    assert!(cms.get(&dep).await.unwrap().metadata.deletion_timestamp.is_some());
    // foreground: owner stays with foregroundDeletion until the dependent is gone
    let (cms, dep) = owned_pair(&server, "fg").await;
    cms.delete("fg", &DeleteParams::foreground()).await.unwrap();
    let o = cms.get("fg").await.unwrap();
    assert!(o.metadata.finalizers.unwrap().contains(&"foregroundDeletion".to_string()));
    cms.patch(&dep, &PatchParams::default(), &Patch::Merge(json!({"metadata":{"finalizers":null}}))).await.unwrap();
    assert!(cms.get_opt(&dep).await.unwrap().is_none());
    assert!(cms.get_opt("fg").await.unwrap().is_none());
    // orphan: dependent survives without the owner reference
    let (cms, dep) = owned_pair(&server, "or").await;
    cms.delete("or", &DeleteParams::orphan()).await.unwrap();
    assert!(cms.get_opt("or").await.unwrap().is_none());
    let d = cms.get(&dep).await.unwrap();
    assert!(d.metadata.deletion_timestamp.is_none());
    assert!(d.metadata.owner_references.unwrap_or_default().is_empty());
}

#[tokio::test]
async fn namespace_deletion_terminates_then_removes_content() {
    let server = ApiServer::new();
    let nss: Api<Namespace> = Api::all(server.client());
    nss.create(&PostParams::default(), &serde_json::from_value(json!({"metadata":{"name":"shoot--a"}})).unwrap())
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "shoot--a");
    cms.create(&PostParams::default(), &cm("x", json!({}))).await.unwrap();
    nss.delete("shoot--a", &DeleteParams::default()).await.unwrap();
    assert!(nss.get_opt("shoot--a").await.unwrap().is_none());
    assert!(server.get_object("v1", "configmaps", Some("shoot--a"), "x").is_none());
}

#[tokio::test]
async fn events_api_and_core_events_share_storage() {
    let server = ApiServer::new();
    let ev_api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(server.client(), "default");
    let ev: k8s_openapi::api::events::v1::Event = serde_json::from_value(json!({"metadata":{"name":"e1"},"eventTime":"2025-01-01T00:00:00.000000Z",
        "reportingController":"druid","reportingInstance":"druid-0","action":"Reconcile","reason":"Ready","note":"etcd is ready","type":"Normal",
        "regarding":{"kind":"Etcd","name":"etcd-main","namespace":"default"}})).unwrap();
    ev_api.create(&PostParams::default(), &ev).await.unwrap();
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(server.client(), "default");
    let list = core.list(&ListParams::default().fields("involvedObject.name=etcd-main")).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].message.as_deref(), Some("etcd is ready"));
    let list = ev_api.list(&ListParams::default().fields("regarding.name=etcd-main")).await.unwrap();
    assert_eq!(list.items[0].note.as_deref(), Some("etcd is ready"));
}

#[tokio::test]
async fn eviction_honours_pod_disruption_budgets() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    for n in ["etcd-0", "etcd-1", "etcd-2"] {
        pods.create(&PostParams::default(), &serde_json::from_value(json!({"metadata":{"name":n,"labels":{"app":"etcd"}},"spec":{"containers":[{"name":"etcd","image":"e"}]}})).unwrap()).await.unwrap();
    }
    // Only running pods count against a budget: a Pending one is evicted regardless (`canIgnorePDB`).
    for n in ["etcd-0", "etcd-1"] {
        pods.patch_status(n, &PatchParams::default(), &Patch::Merge(json!({"status":{"phase":"Running"}})))
            .await
            .unwrap();
    }
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> = Api::namespaced(server.client(), "default");
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata":{"name":"etcd"},"spec":{"minAvailable":1,"selector":{"matchLabels":{"app":"etcd"}}}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    // A budget whose status has not observed its generation yet refuses every eviction, with a retry.
    let e = api_err(pods.evict("etcd-0", &Default::default()).await.unwrap_err());
    assert_eq!((e.code, e.details.map(|d| d.retry_after_seconds)), (429, Some(10)));
    pdbs.patch_status(
        "etcd",
        &PatchParams::default(),
        &Patch::Merge(json!({"status":{"disruptionsAllowed":1,"currentHealthy":2,"desiredHealthy":1,
            "expectedPods":2,"observedGeneration":1}})),
    )
    .await
    .unwrap();
    pods.evict("etcd-0", &Default::default()).await.unwrap();
    assert!(pods.get_opt("etcd-0").await.unwrap().is_none());
    let status = pdbs.get_status("etcd").await.unwrap().status.unwrap();
    assert_eq!(status.disruptions_allowed, 0);
    assert!(status.disrupted_pods.unwrap().contains_key("etcd-0"), "the evicted pod is recorded");
    let e = api_err(pods.evict("etcd-1", &Default::default()).await.unwrap_err());
    assert_eq!(
        (e.code, e.message.as_str()),
        (429, "Cannot evict pod as it would violate the pod's disruption budget.")
    );
    pods.evict("etcd-2", &Default::default()).await.unwrap();
    assert!(pods.get_opt("etcd-2").await.unwrap().is_none());
}

#[tokio::test]
async fn statefulset_spec_outside_the_mutable_fields_is_immutable() {
    let server = ApiServer::new();
    let sts: Api<StatefulSet> = Api::namespaced(server.client(), "default");
    sts.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata":{"name":"s"},"spec":{"serviceName":"s","selector":{"matchLabels":{"a":"b"}},
        "template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i"}]}}}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let e = api_err(
        sts.patch("s", &PatchParams::default(), &Patch::Merge(json!({"spec":{"serviceName":"other"}})))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(e.message.starts_with("StatefulSet.apps \"s\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas'"), "{}", e.message);
    sts.patch("s", &PatchParams::default(), &Patch::Merge(json!({"spec":{"replicas":2}}))).await.unwrap();
}

#[tokio::test]
async fn label_values_are_validated_like_kube() {
    let server = ApiServer::new();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let e = api_err(cms.create(&PostParams::default(), &cm("l", json!({"app": "bad value"}))).await.unwrap_err());
    assert_eq!(e.code, 422);
    assert!(e.message.starts_with("ConfigMap \"l\" is invalid: metadata.labels: Invalid value: \"bad value\": a valid label must be an empty string"), "{}", e.message);
    cms.create(&PostParams::default(), &cm("l", json!({"app.kubernetes.io/name": "etcd-main", "empty": ""})))
        .await
        .unwrap();
}

#[tokio::test]
async fn partial_object_metadata_for_get_list_and_create_rejects_resource_version() {
    let server = ApiServer::new();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    cms.create(&PostParams::default(), &cm("m", json!({"app":"x"}))).await.unwrap();
    let list = cms.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].metadata.labels.as_ref().unwrap()["app"], "x");
    let one = cms.get_metadata("m").await.unwrap();
    assert_eq!(one.metadata.name.as_deref(), Some("m"));
    let mut again = cm("n", json!({}));
    again.metadata.resource_version = Some("5".into());
    let e = api_err(cms.create(&PostParams::default(), &again).await.unwrap_err());
    assert_eq!(
        (e.code, e.message.as_str()),
        // A plain error of `rest.BeforeCreate`: code 500, its text as the message, no reason (as kube-apiserver 1.36).
        (500, "resourceVersion should not be set on objects to be created")
    );
}

#[tokio::test]
async fn server_side_apply_on_the_status_subresource_records_its_manager() {
    let server = ApiServer::new();
    let sts: Api<StatefulSet> = Api::namespaced(server.client(), "default");
    let s = json!({"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"s"},"spec":{"serviceName":"s","selector":{"matchLabels":{"a":"b"}},
        "template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i"}]}}}});
    sts.patch("s", &PatchParams::apply("druid"), &Patch::Apply(&s)).await.unwrap();
    let st = json!({"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"s"},"status":{"replicas":1,"readyReplicas":1}});
    let got = sts.patch_status("s", &PatchParams::apply("kubelet-sim"), &Patch::Apply(&st)).await.unwrap();
    assert_eq!(got.status.unwrap().ready_replicas, Some(1));
    let mf = got.metadata.managed_fields.unwrap();
    assert!(mf.iter().any(|m| m.manager.as_deref() == Some("druid") && m.subresource.is_none()));
    assert!(
        mf.iter().any(|m| m.manager.as_deref() == Some("kubelet-sim") && m.subresource.as_deref() == Some("status"))
    );
    let other =
        json!({"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"s"},"status":{"readyReplicas":0}});
    let e = api_err(sts.patch_status("s", &PatchParams::apply("someone"), &Patch::Apply(&other)).await.unwrap_err());
    assert_eq!(e.code, 409);
}
