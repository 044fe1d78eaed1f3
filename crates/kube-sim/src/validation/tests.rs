//! Behaviour of the validator on the real CRDs vendored in `crates/druid-api/crds` and on small schemas that pin
//! kube-apiserver's error formats.

use serde_json::{Value, json};

use super::{CrdValidator, FieldError, Scope};

const CRDS: &[(&str, &str)] = &[
    (
        "cert-manager.io_certificaterequests",
        include_str!("../../../druid-api/crds/cert-manager.io_certificaterequests.yaml"),
    ),
    ("cert-manager.io_certificates", include_str!("../../../druid-api/crds/cert-manager.io_certificates.yaml")),
    (
        "druid.gardener.cloud_etcdcopybackupstasks",
        include_str!("../../../druid-api/crds/druid.gardener.cloud_etcdcopybackupstasks.yaml"),
    ),
    (
        "druid.gardener.cloud_etcdopstasks",
        include_str!("../../../druid-api/crds/druid.gardener.cloud_etcdopstasks.yaml"),
    ),
    ("druid.gardener.cloud_etcds", include_str!("../../../druid-api/crds/druid.gardener.cloud_etcds.yaml")),
    (
        "machine.sapcloud.io_machineclasses",
        include_str!("../../../druid-api/crds/machine.sapcloud.io_machineclasses.yaml"),
    ),
    (
        "machine.sapcloud.io_machinedeployments",
        include_str!("../../../druid-api/crds/machine.sapcloud.io_machinedeployments.yaml"),
    ),
    ("machine.sapcloud.io_machines", include_str!("../../../druid-api/crds/machine.sapcloud.io_machines.yaml")),
    ("machine.sapcloud.io_machinesets", include_str!("../../../druid-api/crds/machine.sapcloud.io_machinesets.yaml")),
];

/// Rules per CRD file (all served versions), as measured on the vendored CRDs.
const EXPECTED_RULES: &[(&str, usize)] = &[
    ("cert-manager.io_certificaterequests", 0),
    ("cert-manager.io_certificates", 0),
    ("druid.gardener.cloud_etcdcopybackupstasks", 2),
    ("druid.gardener.cloud_etcdopstasks", 4),
    ("druid.gardener.cloud_etcds", 25),
    ("machine.sapcloud.io_machineclasses", 0),
    ("machine.sapcloud.io_machinedeployments", 0),
    ("machine.sapcloud.io_machines", 0),
    ("machine.sapcloud.io_machinesets", 0),
];

fn served_schemas(yaml: &str) -> Vec<(String, Value)> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("CRD YAML parses");
    let mut out = Vec::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        for v in doc["spec"]["versions"].as_array().expect("versions") {
            if v["served"].as_bool() == Some(true) {
                let name =
                    format!("{}/{}", doc["metadata"]["name"].as_str().unwrap_or(""), v["name"].as_str().unwrap_or(""));
                out.push((name, v["schema"]["openAPIV3Schema"].clone()));
            }
        }
    }
    out
}

fn validator(file: &str) -> CrdValidator {
    let (_, yaml) = CRDS.iter().find(|(n, _)| *n == file).expect("known CRD");
    let (_, schema) = served_schemas(yaml).into_iter().next().expect("a served version");
    CrdValidator::new(&schema).unwrap_or_else(|e| panic!("{file}: {e:?}"))
}

/// What kube-apiserver appends instead of evaluating CEL rules when the schema errors block them.
const SKIPPED: &str = "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

fn messages(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(|e| e.message.clone()).collect()
}

fn etcd(replicas: i64) -> Value {
    json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1",
        "kind": "Etcd",
        "metadata": {"name": "etcd-main", "namespace": "shoot--a--b"},
        "spec": {
            "replicas": replicas,
            "labels": {"app": "etcd-statefulset", "role": "main"},
            "etcd": {"metrics": "basic", "quota": "8Gi"},
            "backup": {"deltaSnapshotPeriod": "5m", "garbageCollectionPeriod": "12h"}
        }
    })
}

#[test]
fn every_rule_of_every_crd_compiles_and_the_counts_are_pinned() {
    let mut measured = Vec::new();
    for (file, yaml) in CRDS {
        let mut total = 0;
        for (name, schema) in served_schemas(yaml) {
            let v = CrdValidator::new(&schema).unwrap_or_else(|e| panic!("{name}: rules that do not compile: {e:?}"));
            println!("{name}: {} CEL rules", v.rule_count());
            total += v.rule_count();
        }
        measured.push((*file, total));
    }
    let expected: Vec<(&str, usize)> = EXPECTED_RULES.to_vec();
    assert_eq!(measured, expected);
}

#[test]
fn etcd_replicas_cannot_shrink_except_to_zero() {
    let v = validator("druid.gardener.cloud_etcds");
    let old = etcd(3);
    let errs = v.validate(&etcd(1), Some(&old), Scope::Main);
    assert_eq!(
        errs,
        vec![FieldError {
            reason: "FieldValueInvalid".into(),
            field: "spec.replicas".into(),
            message: "spec.replicas: Invalid value: 1: Replicas can either be increased or be downscaled to 0.".into(),
        }]
    );
    assert_eq!(v.validate(&etcd(5), Some(&old), Scope::Main), vec![]);
    assert_eq!(v.validate(&etcd(0), Some(&old), Scope::Main), vec![]);
    // a transition rule is not evaluated on create
    assert_eq!(v.validate(&etcd(1), None, Scope::Main), vec![]);
}

#[test]
fn etcd_without_labels_etcd_and_backup_is_refused_as_required() {
    let v = validator("druid.gardener.cloud_etcds");
    let mut obj = etcd(3);
    let spec = obj["spec"].as_object_mut().unwrap();
    spec.remove("labels");
    spec.remove("etcd");
    spec.remove("backup");
    let errs = v.validate(&obj, None, Scope::Main);
    let required: Vec<(&str, &str, &str)> = errs
        .iter()
        .filter(|e| e.reason == "FieldValueRequired")
        .map(|e| (e.field.as_str(), e.message.as_str(), e.reason.as_str()))
        .collect();
    assert_eq!(
        required,
        vec![
            ("spec.backup", "spec.backup: Required value", "FieldValueRequired"),
            ("spec.etcd", "spec.etcd: Required value", "FieldValueRequired"),
            ("spec.labels", "spec.labels: Required value", "FieldValueRequired"),
        ]
    );
}

#[test]
fn enum_violation_lists_the_supported_values() {
    let v = validator("druid.gardener.cloud_etcds");
    let mut obj = etcd(3);
    obj["spec"]["etcd"]["metrics"] = json!("verbose");
    assert_eq!(
        messages(&v.validate(&obj, None, Scope::Main)),
        vec![r#"spec.etcd.metrics: Unsupported value: "verbose": supported values: "basic", "extensive""#, SKIPPED,]
    );
    let e = &v.validate(&obj, None, Scope::Main)[0];
    assert_eq!((e.reason.as_str(), e.field.as_str()), ("FieldValueNotSupported", "spec.etcd.metrics"));
}

#[test]
fn pattern_violation_quotes_the_pattern() {
    let v = validator("druid.gardener.cloud_etcds");
    let mut obj = etcd(3);
    obj["spec"]["memberNamePrefix"] = json!("Bad_Prefix");
    assert_eq!(
        messages(&v.validate(&obj, None, Scope::Main)),
        vec![
            r#"spec.memberNamePrefix: Invalid value: "Bad_Prefix": spec.memberNamePrefix in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"#
        ]
    );
}

#[test]
fn int_or_string_quantity_pattern_and_type() {
    let v = validator("druid.gardener.cloud_etcds");
    let mut obj = etcd(3);
    obj["spec"]["storageCapacity"] = json!(25);
    assert_eq!(v.validate(&obj, None, Scope::Main), vec![]);
    obj["spec"]["storageCapacity"] = json!(true);
    assert_eq!(
        messages(&v.validate(&obj, None, Scope::Main)),
        vec![
            r#"spec.storageCapacity: Invalid value: "boolean": spec.storageCapacity in body must be of type integer,string: "boolean""#,
            SKIPPED,
        ]
    );
}

#[test]
fn wrong_type_is_reported_with_the_actual_type() {
    let v = validator("druid.gardener.cloud_etcds");
    let mut obj = etcd(3);
    obj["spec"]["replicas"] = json!("three");
    let errs = v.validate(&obj, None, Scope::Main);
    assert_eq!(
        messages(&errs),
        vec![
            r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#,
            SKIPPED,
        ]
    );
    assert_eq!(errs[0].reason, "FieldValueTypeInvalid");
}

#[test]
fn unknown_fields_are_pruned_but_resource_fields_kept() {
    let v = validator("druid.gardener.cloud_etcds");
    let mut obj = etcd(3);
    obj["spec"]["noSuchField"] = json!("x");
    obj["spec"]["etcd"]["alsoUnknown"] = json!(1);
    obj["topLevelJunk"] = json!(true);
    obj["metadata"]["labels"] = json!({"a": "b"});
    v.default_and_prune(&mut obj);
    assert!(obj["spec"].get("noSuchField").is_none());
    assert!(obj["spec"]["etcd"].get("alsoUnknown").is_none());
    assert!(obj.get("topLevelJunk").is_none());
    assert_eq!(obj["metadata"]["labels"], json!({"a": "b"}));
    assert_eq!(obj["kind"], "Etcd");
    // maps (additionalProperties) keep their entries
    assert_eq!(obj["spec"]["labels"]["role"], "main");
}

#[test]
fn preserve_unknown_fields_keeps_everything_below() {
    let v = validator("machine.sapcloud.io_machines");
    let mut obj = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine", "metadata": {"name": "m"},
        "spec": {"nodeTemplate": {"metadata": {"anything": {"goes": 1}}}, "bogus": 1}
    });
    v.default_and_prune(&mut obj);
    assert_eq!(obj["spec"]["nodeTemplate"]["metadata"]["anything"]["goes"], 1);
    assert!(obj["spec"].get("bogus").is_none());
}

#[test]
fn defaults_are_applied_including_nested_ones() {
    let v = validator("druid.gardener.cloud_etcdopstasks");
    let mut obj = json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "EtcdOpsTask", "metadata": {"name": "t"},
        "spec": {"etcdName": "etcd-main", "config": {"onDemandSnapshot": {"type": "full"}}}
    });
    v.default_and_prune(&mut obj);
    assert_eq!(obj["spec"]["ttlSecondsAfterFinished"], 3600);
    assert_eq!(obj["spec"]["config"]["onDemandSnapshot"]["timeoutSecondsFull"], 900);
    assert_eq!(obj["spec"]["config"]["onDemandSnapshot"]["timeoutSecondsDelta"], 60);
    assert_eq!(v.validate(&obj, None, Scope::Main), vec![]);
}

#[test]
fn etcd_ops_task_rules_immutability_and_conditional() {
    let v = validator("druid.gardener.cloud_etcdopstasks");
    let task = |ty: &str, is_final: Option<bool>, ttl: i64| {
        let mut snap = json!({"type": ty});
        if let Some(f) = is_final {
            snap["isFinal"] = json!(f);
        }
        let mut obj = json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "EtcdOpsTask", "metadata": {"name": "t"},
            "spec": {"etcdName": "etcd-main", "ttlSecondsAfterFinished": ttl, "config": {"onDemandSnapshot": snap}}
        });
        v.default_and_prune(&mut obj);
        obj
    };
    assert_eq!(
        messages(&v.validate(&task("delta", Some(true), 60), None, Scope::Main)),
        vec!["spec.config.onDemandSnapshot: Invalid value: isFinal must be false (or omitted) when type is 'delta'"]
    );
    assert_eq!(v.validate(&task("full", Some(true), 60), None, Scope::Main), vec![]);
    let old = task("full", None, 60);
    assert_eq!(
        messages(&v.validate(&task("full", None, 120), Some(&old), Scope::Main)),
        vec!["spec.ttlSecondsAfterFinished: Invalid value: 120: ttlSecondsAfterFinished is immutable"]
    );
    assert_eq!(
        messages(&v.validate(&task("delta", None, 60), Some(&old), Scope::Main)),
        vec!["spec.config: Invalid value: config is immutable"]
    );
}

#[test]
fn etcd_object_and_root_rules() {
    let v = validator("druid.gardener.cloud_etcds");
    // garbageCollectionPeriod must exceed deltaSnapshotPeriod (duration())
    let mut obj = etcd(3);
    obj["spec"]["backup"]["garbageCollectionPeriod"] = json!("1m");
    assert_eq!(
        messages(&v.validate(&obj, None, Scope::Main)),
        vec![
            "spec.backup: Invalid value: etcd.spec.backup.garbageCollectionPeriod must be greater than etcd.spec.backup.deltaSnapshotPeriod"
        ]
    );
    // isURL on a string
    let mut obj = etcd(3);
    obj["spec"]["backup"]["store"] = json!({"prefix": "p", "endpointOverride": "not a url"});
    assert_eq!(
        messages(&v.validate(&obj, None, Scope::Main)),
        vec![
            r#"spec.backup.store.endpointOverride: Invalid value: "not a url": endpoint override must be a valid URL."#
        ]
    );
    obj["spec"]["backup"]["store"]["endpointOverride"] = json!("https://s3.example.com:9000");
    assert_eq!(v.validate(&obj, None, Scope::Main), vec![]);
    // a root rule reading metadata.name
    let mut obj = etcd(3);
    obj["spec"]["etcd"]["additionalAdvertisePeerURLs"] =
        json!([{"memberName": "other-0", "urls": ["http://10.0.0.1:2380"]}]);
    assert_eq!(
        messages(&v.validate(&obj, None, Scope::Main)),
        vec![
            "<nil>: Invalid value: additionalAdvertisePeerURLs member names must start with the Etcd resource name followed by a dash"
        ]
    );
    obj["spec"]["etcd"]["additionalAdvertisePeerURLs"] =
        json!([{"memberName": "etcd-main-0", "urls": ["http://10.0.0.1:2380"]}]);
    assert_eq!(v.validate(&obj, None, Scope::Main), vec![]);
    // storageClass cannot be added after creation (object-level transition rule with has())
    let old = etcd(3);
    let mut new = etcd(3);
    new["spec"]["storageClass"] = json!("gold");
    assert_eq!(
        messages(&v.validate(&new, Some(&old), Scope::Main)),
        vec!["spec: Invalid value: etcd.spec.storageClass is an immutable field."]
    );
}

#[test]
fn status_scope_validates_only_status() {
    let v = validator("druid.gardener.cloud_etcds");
    let mut obj = etcd(3);
    obj["spec"]["etcd"]["metrics"] = json!("verbose");
    obj["status"] = json!({"lastOperation": {"type": "Reconcile"}, "ready": "yes"});
    let status_errs = messages(&v.validate(&obj, None, Scope::Status));
    assert!(
        status_errs.contains(
            &r#"status.ready: Invalid value: "string": status.ready in body must be of type boolean: "string""#
                .to_string()
        ),
        "{status_errs:?}"
    );
    assert!(status_errs.contains(&"status.lastOperation.runID: Required value".to_string()), "{status_errs:?}");
    assert!(status_errs.iter().all(|m| m.starts_with("status.") || m == SKIPPED), "{status_errs:?}");
    let main_errs = messages(&v.validate(&obj, None, Scope::Main));
    assert!(main_errs.iter().all(|m| !m.starts_with("status.")), "{main_errs:?}");
    assert_eq!(main_errs.len(), 2, "{main_errs:?}");
    assert_eq!(main_errs[1], SKIPPED);
}

#[test]
fn cert_manager_certificate_enum_and_pattern() {
    // The vendored cert-manager CRDs carry no x-kubernetes-validations (count pinned above), so
    // their structural validation is what a write can trip over.
    let v = validator("cert-manager.io_certificates");
    let cert = |alg: &str, window: &str| {
        json!({
            "apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "c"},
            "spec": {"secretName": "s", "issuerRef": {"name": "ca"}, "privateKey": {"algorithm": alg},
                     "renewal": {"windows": [{"cron": "0 0 * * *", "windowDuration": window}]}}
        })
    };
    assert_eq!(v.validate(&cert("ECDSA", "1h"), None, Scope::Main), vec![]);
    let errs = messages(&v.validate(&cert("DSA", "1d"), None, Scope::Main));
    assert_eq!(
        errs,
        vec![
            r#"spec.privateKey.algorithm: Unsupported value: "DSA": supported values: "RSA", "ECDSA", "Ed25519""#,
            r#"spec.renewal.windows[0].windowDuration: Invalid value: "1d": spec.renewal.windows[0].windowDuration in body should match '^([0-9]+(\.[0-9]+)?(s|m|h))+$'"#,
        ],
    );
}

#[test]
fn mcm_machine_deployment_int_or_string_and_required() {
    // The vendored MCM CRDs carry no x-kubernetes-validations either.
    let v = validator("machine.sapcloud.io_machinedeployments");
    let md = |surge: Value| {
        json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment", "metadata": {"name": "md"},
            "spec": {"template": {"spec": {"class": {"kind": "MachineClass", "name": "c"}}},
                     "strategy": {"rollingUpdate": {"maxSurge": surge}}}
        })
    };
    assert_eq!(v.validate(&md(json!("25%")), None, Scope::Main), vec![]);
    assert_eq!(v.validate(&md(json!(1)), None, Scope::Main), vec![]);
    assert_eq!(
        messages(&v.validate(&md(json!([1])), None, Scope::Main)),
        vec![
            r#"spec.strategy.rollingUpdate.maxSurge: Invalid value: "array": spec.strategy.rollingUpdate.maxSurge in body must be of type integer,string: "array""#
        ]
    );
    let mut no_template = md(json!(1));
    no_template["spec"].as_object_mut().unwrap().remove("template");
    assert_eq!(messages(&v.validate(&no_template, None, Scope::Main)), vec!["spec.template: Required value"]);
}

#[test]
fn rules_that_do_not_compile_are_reported_not_skipped() {
    let schema = json!({
        "type": "object",
        "properties": {"spec": {"type": "object",
            "properties": {"a": {"type": "string"}},
            "x-kubernetes-validations": [
                {"rule": "self.a == 'x'"},
                {"rule": "self.b == 'x'"},
                {"rule": "noSuchFunction(self.a)"},
                {"rule": "self.a ==", "message": "broken"},
                {"rule": "self.a.size() > 0", "reason": "Bogus"},
                {"rule": "other == 1"},
                {"rule": "self.a"},
                {"rule": "true", "messageExpression": "1"}
            ]}}
    });
    let errs = CrdValidator::new(&schema).expect_err("must not compile");
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    assert_eq!(errs.len(), 7, "{text:?}");
    assert!(
        text[0].contains("x-kubernetes-validations[1].rule") && text[0].contains("undefined field 'b'"),
        "{text:?}"
    );
    assert!(text[1].contains("undeclared reference to 'noSuchFunction'"), "{text:?}");
    assert!(text[2].contains("x-kubernetes-validations[3].rule"), "{text:?}");
    assert!(text[3].contains("reason"), "{text:?}");
    assert!(text[4].contains("undeclared reference to 'other'"), "{text:?}");
    assert!(text[5].contains("must evaluate to a bool (found string)"), "{text:?}");
    assert!(text[6].contains("[7].messageExpression") && text[6].contains("must evaluate to a string"), "{text:?}");
}

#[test]
fn old_self_below_an_atomic_list_does_not_compile() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "xs": {"type": "array", "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}
    }}}});
    let errs = CrdValidator::new(&schema).expect_err("uncorrelatable");
    assert!(errs[0].message.contains("oldSelf cannot be used on the uncorrelatable portion"), "{errs:?}");
}

fn custom(spec_schema: Value) -> CrdValidator {
    CrdValidator::new(&json!({"type": "object", "properties": {"spec": spec_schema}})).expect("compiles")
}

fn obj(spec: Value) -> Value {
    json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n"}, "spec": spec})
}

#[test]
fn message_expression_field_path_and_reason() {
    let v = custom(json!({"type": "object", "properties": {
        "min": {"type": "integer"}, "max": {"type": "integer"}, "name": {"type": "string"}},
    "x-kubernetes-validations": [
        {"rule": "self.min <= self.max", "messageExpression": "'min ' + string(self.min) + ' exceeds max ' + string(self.max)", "fieldPath": ".min"},
        {"rule": "has(self.name)", "message": "name is required", "reason": "FieldValueRequired", "fieldPath": ".name"},
        {"rule": "self.min >= 0", "reason": "FieldValueForbidden", "message": "negative"}
    ]}));
    let errs = v.validate(&obj(json!({"min": -1, "max": -5})), None, Scope::Main);
    assert_eq!(
        errs.iter().map(|e| (e.reason.as_str(), e.field.as_str(), e.message.as_str())).collect::<Vec<_>>(),
        vec![
            ("FieldValueInvalid", "spec.min", "spec.min: Invalid value: min -1 exceeds max -5"),
            ("FieldValueRequired", "spec.name", "spec.name: Required value: name is required"),
            ("FieldValueForbidden", "spec", "spec: Forbidden: negative"),
        ]
    );
}

#[test]
fn rules_on_maps_lists_and_scalars_with_kubernetes_functions() {
    let v = custom(json!({"type": "object", "properties": {
        "labels": {"type": "object", "additionalProperties": {"type": "string",
            "x-kubernetes-validations": [{"rule": "self.lowerAscii() == self", "message": "lower case only"}]},
            "x-kubernetes-validations": [{"rule": "self.all(k, k.startsWith('x-'))", "message": "keys need x-"}]},
        "ports": {"type": "array", "items": {"type": "integer"}, "x-kubernetes-validations": [{"rule": "self.isSorted()", "message": "sorted"}]},
        "size": {"type": "string", "x-kubernetes-validations": [{"rule": "quantity(self).isLessThan(quantity('1Gi'))", "message": "too big"}]},
        "endpoint": {"type": "string", "x-kubernetes-validations": [{"rule": "url(self).getScheme() == 'https' && url(self).getPort() == '443'", "message": "https:443"}]},
        "when": {"type": "string", "format": "date-time", "x-kubernetes-validations": [{"rule": "self > timestamp('2020-01-01T00:00:00Z')", "message": "too old"}]},
        "net": {"type": "string", "x-kubernetes-validations": [{"rule": "isCIDR(self) && cidr(self).containsIP('10.0.0.1')", "message": "cidr"}]},
        "word": {"type": "string", "x-kubernetes-validations": [{"rule": "self.find('[0-9]+') == '42' && self.matches('^[a-z0-9]+$')", "message": "word"}]}
    }}));
    let good = obj(json!({"labels": {"x-a": "b"}, "ports": [1, 2, 3], "size": "512Mi", "endpoint": "https://h:443/p",
        "when": "2024-05-01T00:00:00Z", "net": "10.0.0.0/8", "word": "ab42"}));
    assert_eq!(v.validate(&good, None, Scope::Main), vec![]);
    let bad = obj(json!({"labels": {"a": "B"}, "ports": [3, 1], "size": "2Gi", "endpoint": "http://h/p",
        "when": "2019-05-01T00:00:00Z", "net": "192.168.0.0/16", "word": "abc"}));
    assert_eq!(
        messages(&v.validate(&bad, None, Scope::Main)),
        vec![
            r#"spec.endpoint: Invalid value: "http://h/p": https:443"#,
            "spec.labels: Invalid value: keys need x-",
            r#"spec.labels[a]: Invalid value: "B": lower case only"#,
            r#"spec.net: Invalid value: "192.168.0.0/16": cidr"#,
            "spec.ports: Invalid value: sorted",
            r#"spec.size: Invalid value: "2Gi": too big"#,
            r#"spec.when: Invalid value: "2019-05-01T00:00:00Z": too old"#,
            r#"spec.word: Invalid value: "abc": word"#,
        ]
    );
}

#[test]
fn evaluation_errors_are_reported_like_kube() {
    let v = custom(json!({"type": "object", "properties": {"a": {"type": "string"}},
        "x-kubernetes-validations": [{"rule": "self.a == 'x'", "message": "a must be x"}]}));
    assert_eq!(
        messages(&v.validate(&obj(json!({})), None, Scope::Main)),
        vec![r#"spec: Invalid value: "object": no such key: a evaluating rule: a must be x"#]
    );
}

#[test]
fn optional_syntax_and_optional_old_self() {
    let v = custom(json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
    "x-kubernetes-validations": [
        {"rule": "self.?a.orValue('') == self.?b.orValue('')", "message": "a and b differ"},
        {"rule": "!oldSelf.hasValue() || oldSelf.value().a == self.a", "optionalOldSelf": true, "message": "a is immutable"}
    ]}));
    assert_eq!(v.validate(&obj(json!({"a": "1", "b": "1"})), None, Scope::Main), vec![]);
    assert_eq!(
        messages(&v.validate(&obj(json!({"a": "1"})), None, Scope::Main)),
        vec!["spec: Invalid value: a and b differ"]
    );
    let old = obj(json!({"a": "1", "b": "1"}));
    assert_eq!(
        messages(&v.validate(&obj(json!({"a": "2", "b": "2"})), Some(&old), Scope::Main)),
        vec!["spec: Invalid value: a is immutable"]
    );
}

#[test]
fn unchanged_values_are_ratcheted() {
    let v = custom(json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 3},
        "other": {"type": "string"}
    }}));
    let old = obj(json!({"name": "toolong", "other": "a"}));
    // an update that leaves the invalid field alone passes
    assert_eq!(v.validate(&obj(json!({"name": "toolong", "other": "b"})), Some(&old), Scope::Main), vec![]);
    let errs = v.validate(&obj(json!({"name": "toolong2", "other": "b"})), Some(&old), Scope::Main);
    assert_eq!(messages(&errs), vec!["spec.name: Too long: may not be more than 3 bytes"]);
    assert_eq!(errs[0].reason, "FieldValueTooLong");
}

#[test]
fn bounds_items_properties_and_formats() {
    let v = custom(json!({"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 1, "maximum": 10},
        "x": {"type": "number", "exclusiveMinimum": true, "minimum": 0.5},
        "s": {"type": "string", "minLength": 2},
        "xs": {"type": "array", "maxItems": 2, "minItems": 1, "items": {"type": "string"}},
        "m": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string"}},
        "t": {"type": "string", "format": "date-time"},
        "b": {"type": "string", "format": "byte"},
        "nul": {"type": "string", "nullable": true}
    }}));
    let bad = obj(json!({"n": 11, "x": 0.5, "s": "a", "xs": ["a", "b", "c"], "m": {"a": "1", "b": "2"},
        "t": "noon", "b": "%%%", "nul": null}));
    assert_eq!(
        messages(&v.validate(&bad, None, Scope::Main)),
        vec![
            r#"spec.b: Invalid value: "%%%": spec.b in body must be of type byte: "%%%""#,
            "spec.m: Too many: 2: must have at most 1 items",
            "spec.n: Invalid value: 11: spec.n in body should be less than or equal to 10",
            r#"spec.s: Invalid value: "a": spec.s in body should be at least 2 chars long"#,
            r#"spec.t: Invalid value: "noon": spec.t in body must be of type date-time: "noon""#,
            "spec.x: Invalid value: 0.5: spec.x in body should be greater than 0.5",
            "spec.xs: Too many: 3: must have at most 2 items",
        ]
    );
    let empty = obj(json!({"xs": []}));
    assert_eq!(
        messages(&v.validate(&empty, None, Scope::Main)),
        vec!["spec.xs: Invalid value: 0: spec.xs in body should have at least 1 items"]
    );
}

#[test]
fn list_type_set_and_map_uniqueness() {
    let v = custom(json!({"type": "object", "properties": {
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}}
    }}));
    let bad = obj(
        json!({"tags": ["a", "b", "a"], "ports": [{"name": "http", "port": 80}, {"name": "http", "port": 81}, {"port": 1}]}),
    );
    assert_eq!(
        messages(&v.validate(&bad, None, Scope::Main)),
        vec![
            r#"spec.ports[1]: Duplicate value: map[string]interface {}{"name":"http"}"#,
            "spec.ports[2].name: Required value",
            r#"spec.tags[2]: Duplicate value: "a""#,
        ]
    );
}

#[test]
fn embedded_resources_keep_and_require_type_fields() {
    let v = custom(json!({"type": "object", "properties": {
        "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}
    }}));
    let mut o = obj(json!({"template": {"metadata": {"name": "x"}, "spec": {"a": 1}}}));
    v.default_and_prune(&mut o);
    assert_eq!(o["spec"]["template"]["spec"]["a"], 1);
    assert_eq!(
        messages(&v.validate(&o, None, Scope::Main)),
        vec![
            "spec.template.apiVersion: Required value: must not be empty",
            "spec.template.kind: Required value: must not be empty"
        ]
    );
}

#[test]
fn escaped_property_names_are_visible_to_rules() {
    let v = custom(json!({"type": "object", "properties": {"x-y": {"type": "string"}, "in": {"type": "string"}},
        "x-kubernetes-validations": [{"rule": "self.x__dash__y == self.__in__", "message": "differ"}]}));
    assert_eq!(v.validate(&obj(json!({"x-y": "a", "in": "a"})), None, Scope::Main), vec![]);
    assert_eq!(
        messages(&v.validate(&obj(json!({"x-y": "a", "in": "b"})), None, Scope::Main)),
        vec!["spec: Invalid value: differ"]
    );
}

/// Every function the compile-time check accepts must exist at run time: one probe per name.
#[test]
fn every_accepted_function_evaluates() {
    let probes = [
        "size('ab') == 2 && 'ab'.size() == 2",
        "'ab'.contains('a') && 'ab'.startsWith('a') && 'ab'.endsWith('b') && 'ab'.matches('^a')",
        "int('1') == 1 && uint(1) == 1u && double(1) == 1.0 && string(1) == '1' && bytes('a') == b'a'",
        "bool('true') && dyn(1) == 1 && type(1) == int",
        "duration('1m').getSeconds() == 60",
        "timestamp('2020-03-04T05:06:07.008Z').getFullYear() == 2020",
        "timestamp('2020-03-04T05:06:07.008Z').getMonth() == 2 && timestamp('2020-03-04T05:06:07.008Z').getDate() == 4",
        "timestamp('2020-03-04T05:06:07.008Z').getDayOfMonth() == 3 && timestamp('2020-03-04T05:06:07.008Z').getDayOfWeek() == 3",
        "timestamp('2020-03-04T05:06:07.008Z').getDayOfYear() == 63 && timestamp('2020-03-04T05:06:07.008Z').getHours() == 5",
        "timestamp('2020-03-04T05:06:07.008Z').getMinutes() == 6 && timestamp('2020-03-04T05:06:07.008Z').getMilliseconds() == 8",
        "has({'a': 1}.a) && [1, 2].all(x, x > 0) && [1, 2].exists(x, x > 1) && [1, 2].exists_one(x, x > 1)",
        "[1, 2].map(x, x * 2) == [2, 4] && [1, 2].filter(x, x > 1) == [2]",
        "optional.of(1).hasValue() && optional.none().orValue(2) == 2 && !optional.ofNonZeroValue(0).hasValue()",
        "optional.of(1).value() == 1 && optional.none().or(optional.of(3)).value() == 3",
        "optional.of(1).optMap(x, x + 1).value() == 2 && optional.of(1).optFlatMap(x, optional.of(x + 2)).value() == 3",
        "'abc'.charAt(1) == 'b' && 'abcb'.indexOf('b') == 1 && 'abcb'.lastIndexOf('b') == 3",
        "['a', 'b'].join('-') == 'a-b' && 'Ab'.lowerAscii() == 'ab' && 'ab'.upperAscii() == 'AB' && ' a '.trim() == 'a'",
        "'aa'.replace('a', 'b') == 'bb' && 'a,b'.split(',') == ['a', 'b'] && 'abc'.substring(1) == 'bc'",
        "'%s!'.format(['x']) == 'x!' && strings.quote('a') == '\"a\"' && 'ab'.reverse() == 'ba'",
        "[1, 2, 3].slice(0, 1) == [1] && [[1], [2]].flatten() == [1, 2] && [1, 1].distinct() == [1]",
        "[2, 1].sort() == [1, 2] && [2, 1].sortBy(x, x) == [1, 2] && lists.range(2) == [0, 1]",
        "math.abs(-1) == 1 && math.bitAnd(3, 1) == 1 && math.bitNot(0) == -1 && math.bitOr(2, 1) == 3",
        "math.bitShiftLeft(1, 2) == 4 && math.bitShiftRight(4, 2) == 1 && math.bitXor(3, 1) == 2",
        "math.ceil(1.2) == 2.0 && math.floor(1.8) == 1.0 && math.isFinite(1.0) && !math.isInf(1.0) && !math.isNaN(1.0)",
        "math.round(1.5) == 2.0 && math.sign(-3) == -1 && math.sqrt(4) == 2.0 && math.trunc(1.7) == 1.0",
        "base64.encode(b'a') == 'YQ==' && base64.decode('YQ==') == b'a'",
        "isURL('https://h:1/p?q=1') && !isURL('h p')",
        "url('https://u@h:8443/p?q=1&q=2').getScheme() == 'https' && url('https://h:8443/p').getHost() == 'h:8443'",
        "url('https://[::1]:8443/p').getHostname() == '::1' && url('https://h:8443/p').getPort() == '8443'",
        "url('https://h/a%20b').getEscapedPath() == '/a%20b' && url('https://h/?q=1&q=2').getQuery()['q'] == ['1', '2']",
        "'ab12cd34'.find('[0-9]+') == '12' && 'ab12cd34'.findAll('[0-9]+') == ['12', '34'] && 'a1b2'.findAll('[0-9]', 1) == ['1']",
        "[1, 2].isSorted() && [1, 2].sum() == 3 && [2, 1].min() == 1 && [1, 2].max() == 2",
        "[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2",
        "isQuantity('1Gi') && quantity('1Gi').isInteger() && quantity('1k').asInteger() == 1000",
        "quantity('500m').asApproximateFloat() == 0.5 && quantity('-1').sign() == -1",
        "quantity('1').add(quantity('1')).isGreaterThan(quantity('1')) && quantity('2').sub(1).compareTo(quantity('1')) == 0",
        "quantity('1Mi').isLessThan(quantity('1Gi'))",
        "isIP('10.0.0.1') && ip('10.0.0.1').family() == 4 && ip('::').isUnspecified() && ip('127.0.0.1').isLoopback()",
        "ip('224.0.0.1').isLinkLocalMulticast() && ip('169.254.0.1').isLinkLocalUnicast() && ip('8.8.8.8').isGlobalUnicast()",
        "isCIDR('10.0.0.0/8') && cidr('10.1.0.0/8').masked() == cidr('10.0.0.0/8') && cidr('10.0.0.0/8').prefixLength() == 8",
        "cidr('10.0.0.0/8').containsIP('10.1.2.3') && cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16') && cidr('10.0.0.0/8').ip() == ip('10.0.0.0')",
    ];
    let joined = probes.join(" ");
    let names = super::cel_rules::accepted_function_names();
    for name in &names {
        let call = name.rsplit('.').next().unwrap_or(name);
        assert!(joined.contains(&format!("{call}(")), "no probe calls {name}");
    }
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object"}}});
    for probe in probes {
        let mut s = schema.clone();
        s["properties"]["spec"]["x-kubernetes-validations"] = json!([{"rule": probe}]);
        let v = CrdValidator::new(&s).unwrap_or_else(|e| panic!("{probe}: {e:?}"));
        assert_eq!(v.validate(&obj(json!({})), None, Scope::Main), vec![], "{probe}");
    }
}

#[test]
fn a_format_on_a_non_string_value_is_reported_against_the_format() {
    let v = custom(json!({"type": "object", "properties": {"t": {"type": "string", "format": "date-time"}}}));
    let errs = v.validate(&obj(json!({"t": 5})), None, Scope::Main);
    assert_eq!(
        messages(&errs),
        vec![r#"spec.t: Invalid value: "int64": spec.t in body must be of type date-time: "int64""#]
    );
    assert_eq!(errs[0].reason, "FieldValueTypeInvalid");
}
