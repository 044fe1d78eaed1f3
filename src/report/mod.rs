//! `report`: one archive with what the next shift or a ticket needs about one Etcd — its objects and everything
//! `list-resources` shows, PersistentVolumes, the compaction Job's pods, EtcdOpsTasks, the namespace's events
//! about them, the `status -o json` verdict, every member container's logs (and the previous run's), optionally
//! etcd-druid's Deployment and logs — with an `index.md` that says what is in it and what was skipped and why.
//!
//! Redaction is not optional: Secrets appear as name, type and key names; the certificates in them as subject,
//! SANs, issuer, serial and validity; `managedFields` and `last-applied-configuration` are left out. Nothing
//! puts a Secret's values or a private key in the bundle.
//!
//! Least privilege: every read that is refused (or fails) becomes a line of the index's "Skipped" section and the
//! collection goes on; only the Etcd itself must be readable.
//!
//! The archive is a gzip-compressed tar (`.tar.gz`): what `kubectl cp`, `must-gather` and `sos report` hand over,
//! readable with `tar xzf` on every Linux and macOS without another tool, and streamable (written as collected).

pub mod redact;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, Pod, Secret};
use kube::api::{Api, ListParams};
use serde_json::Value;

use crate::api::{Etcd, EtcdOpsTask};
use crate::kube::error::{ClusterError, Subject};
use crate::kube::target::ObjectKey;
use crate::logs::{self, LogsError};

/// What to collect.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// The Etcd.
    pub etcd: ObjectKey,
    /// Include the member containers' logs.
    pub logs: bool,
    /// Logs newer than this.
    pub since: Duration,
    /// Where etcd-druid runs: `Some(ns)` to look there, `None` to find it by its labels across namespaces.
    pub druid_namespace: Option<String>,
    /// Include etcd-druid's Deployment and logs.
    pub druid: bool,
    /// The server and context, for the index.
    pub source: Source,
}

/// Where the report was taken from.
#[derive(Debug, Clone, Default)]
pub struct Source {
    /// API server URL.
    pub server: String,
    /// Kubeconfig context.
    pub context: Option<String>,
    /// druidctl's version.
    pub version: String,
}

/// One file of the bundle.
#[derive(Debug, Clone)]
pub struct BundleFile {
    /// Path inside the archive.
    pub path: String,
    /// What it is.
    pub what: String,
    /// Content.
    pub content: Vec<u8>,
}

/// Something that is not in the bundle, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// What.
    pub what: String,
    /// Why (the API server's sentence, shortened).
    pub why: String,
}

/// A collected report.
#[derive(Debug, Clone, Default)]
pub struct Bundle {
    /// Files, in collection order (`index.md` is made from them).
    pub files: Vec<BundleFile>,
    /// What was skipped.
    pub skipped: Vec<Skipped>,
    /// When collection started.
    pub started: Option<jiff::Timestamp>,
}

/// The report cannot be made at all.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The Etcd could not be read.
    #[error(transparent)]
    Etcd(ClusterError),
    /// The archive could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Receives progress (a short phrase per step).
pub type Progress<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// The steps a report takes, for `--dry-run`.
pub fn plan(opts: &ReportOptions) -> Vec<String> {
    let e = &opts.etcd;
    let mut steps = vec![
        format!("etcd {}/{} (get etcds)", e.namespace, e.name),
        "every resource list-resources shows: StatefulSet, pods, PVCs, ConfigMap, Services, Leases, PDB, ServiceAccount, Role, RoleBinding, compaction Job, EtcdOperatorTasks (list on each kind)".into(),
        "PersistentVolumes bound to the PVCs (get persistentvolumes)".into(),
        "pods of the compaction Job (list pods)".into(),
        "EtcdOpsTasks of the Etcd (list etcdopstasks)".into(),
        format!("events in namespace {} about these objects (list events)", e.namespace),
        "status -o json (the reads of status)".into(),
        "etcd's own view of every member: Maintenance Status, alarm list, HashKV (get secrets of the client TLS; from outside the cluster create pods/portforward)".into(),
        "Secrets the Etcd references: name, type, key names, certificate subject/SANs/issuer/serial/validity — never values or keys (get secrets)".into(),
    ];
    if opts.logs {
        steps.push(format!(
            "logs of the etcd and backup-restore containers of every member, last {}, and of their previous runs (get pods/log)",
            crate::output::age::human(opts.since.as_secs() as i64)
        ));
    }
    if opts.druid {
        steps.push(match &opts.druid_namespace {
            Some(ns) => format!("etcd-druid's Deployment and logs in namespace {ns}"),
            None => "etcd-druid's Deployment and logs, found by the label app.kubernetes.io/name=etcd-druid (list deployments in all namespaces)".into(),
        });
    }
    steps
}

impl Bundle {
    fn add(&mut self, path: impl Into<String>, what: impl Into<String>, content: Vec<u8>) {
        self.files.push(BundleFile { path: path.into(), what: what.into(), content });
    }

    fn skip(&mut self, what: impl Into<String>, why: impl Into<String>) {
        self.skipped.push(Skipped { what: what.into(), why: why.into() });
    }

    fn add_yaml(&mut self, path: impl Into<String>, what: impl Into<String>, mut v: Value) {
        redact::object(&mut v);
        let text = serde_saphyr::to_string(&v).unwrap_or_else(|e| format!("# not serializable: {e}\n"));
        self.add(path, what, text.into_bytes());
    }
}

fn reason(e: kube::Error, subject: &Subject<'_>) -> String {
    ClusterError::from_kube(e, subject).to_string()
}

/// Collects the report. Fails only when the Etcd cannot be read.
pub async fn collect(
    client: &kube::Client,
    opts: &ReportOptions,
    progress: Progress<'_>,
) -> Result<Bundle, ReportError> {
    let key = &opts.etcd;
    let ns = key.namespace.as_str();
    let mut b = Bundle { started: Some(jiff::Timestamp::now()), ..Default::default() };
    progress("etcd");
    let etcd = crate::kube::etcds::get(client, key).await.map_err(ReportError::Etcd)?;
    let etcd_value = serde_json::to_value(&etcd).unwrap_or_default();
    let mut names: BTreeSet<String> = BTreeSet::from([key.name.clone()]);
    b.add_yaml("etcd.yaml", format!("Etcd {}", key.name), etcd_value);

    progress("resources");
    let mut pvcs: Vec<Value> = Vec::new();
    match crate::kube::inventory::list(client, &etcd).await {
        Ok(inv) => {
            for g in inv.groups {
                if let Some(why) = g.unavailable {
                    b.skip(format!("{} objects", g.kind), why);
                    continue;
                }
                for o in g.objects {
                    let v = serde_json::to_value(&o).unwrap_or_default();
                    let name = o.metadata.name.clone().unwrap_or_default();
                    if g.kind == "PersistentVolumeClaim" {
                        pvcs.push(v.clone());
                    }
                    names.insert(name.clone());
                    b.add_yaml(format!("resources/{}/{name}.yaml", g.resource), format!("{} {name}", g.kind), v);
                }
            }
        }
        Err(e) => b.skip("the Etcd's resources", e.to_string()),
    }

    progress("persistent volumes");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for pvc in &pvcs {
        let Some(pv) = pvc.pointer("/spec/volumeName").and_then(Value::as_str).filter(|v| !v.is_empty()) else {
            continue;
        };
        match pvs.get(pv).await {
            Ok(o) => {
                names.insert(pv.to_string());
                b.add_yaml(
                    format!("resources/persistentvolume/{pv}.yaml"),
                    format!("PersistentVolume {pv}"),
                    serde_json::to_value(&o).unwrap_or_default(),
                );
            }
            Err(e) => b.skip(
                format!("PersistentVolume {pv}"),
                reason(e, &Subject { kind: "persistentvolume", name: pv, namespace: "" }),
            ),
        }
    }

    progress("compaction job pods");
    let job = etcd.managed_names().compaction_job();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    match pods.list(&ListParams::default().labels(&format!("job-name={job}"))).await {
        Ok(list) => {
            for p in list.items {
                let name = p.metadata.name.clone().unwrap_or_default();
                names.insert(name.clone());
                let mut v = serde_json::to_value(&p).unwrap_or_default();
                v["apiVersion"] = "v1".into();
                v["kind"] = "Pod".into();
                b.add_yaml(format!("resources/pod/{name}.yaml"), format!("compaction Job pod {name}"), v);
            }
        }
        Err(e) => b.skip(format!("pods of Job {job}"), reason(e, &Subject { kind: "pod", name: "", namespace: ns })),
    }

    progress("etcdopstasks");
    let ops: Api<EtcdOpsTask> = Api::namespaced(client.clone(), ns);
    match ops.list(&ListParams::default()).await {
        Ok(list) => {
            for t in list.items {
                let v = serde_json::to_value(&t).unwrap_or_default();
                if v.pointer("/spec/etcdName").and_then(Value::as_str) != Some(key.name.as_str()) {
                    continue;
                }
                let name = t.metadata.name.clone().unwrap_or_default();
                names.insert(name.clone());
                b.add_yaml(
                    format!("resources/etcdopstask.druid.gardener.cloud/{name}.yaml"),
                    format!("EtcdOpsTask {name}"),
                    v,
                );
            }
        }
        Err(e) => b.skip("EtcdOpsTasks", reason(e, &Subject { kind: "EtcdOpsTask", name: "", namespace: ns })),
    }

    progress("events");
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    match events.list(&ListParams::default()).await {
        Ok(list) => {
            let mut items: Vec<Value> = list
                .items
                .into_iter()
                .filter(|e| e.involved_object.name.as_ref().is_some_and(|n| names.contains(n)))
                .map(|e| serde_json::to_value(&e).unwrap_or_default())
                .collect();
            items.sort_by_key(|e| {
                e["lastTimestamp"].as_str().or(e["eventTime"].as_str()).unwrap_or_default().to_string()
            });
            let n = items.len();
            for e in &mut items {
                redact::object(e);
            }
            b.add_yaml(
                "events.yaml",
                format!("{n} events about these objects"),
                serde_json::json!({"apiVersion": "v1", "kind": "EventList", "items": items}),
            );
        }
        Err(e) => b.skip("events", reason(e, &Subject { kind: "event", name: "", namespace: ns })),
    }

    progress("status");
    match crate::health::collect_named(client, std::slice::from_ref(key)).await {
        Ok(mut inputs) => {
            progress("etcd's own view");
            crate::health::observe_etcd(client, &mut inputs, crate::etcd::MEMBER_READ_TIMEOUT).await;
            let now = jiff::Timestamp::now();
            let reports: Vec<_> = inputs.iter().map(|i| crate::health::assess(i, now)).collect();
            let doc = crate::output::status::document(&reports);
            b.add("status.json", "druidctl status -o json", serde_json::to_vec_pretty(&doc).unwrap_or_default());
            if let (Some(input), Some(report)) = (inputs.first(), reports.first()) {
                collect_etcd_view(client, input, report, &mut b).await;
            }
        }
        Err(e) => b.skip("status -o json", e.to_string()),
    }

    progress("secrets");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    for name in referenced_secrets(&etcd) {
        match secrets.get(&name).await {
            Ok(s) => {
                let summary = redact::secret_summary(&s);
                b.add(
                    format!("secrets/{name}.yaml"),
                    format!("Secret {name}: type, key names, certificates (no values)"),
                    serde_saphyr::to_string(&summary).unwrap_or_default().into_bytes(),
                );
            }
            Err(e) => {
                b.skip(format!("Secret {name}"), reason(e, &Subject { kind: "secret", name: &name, namespace: ns }))
            }
        }
    }

    if opts.logs {
        let members = logs::members(&etcd, &[]).unwrap_or_default();
        collect_logs(
            client,
            ns,
            &members,
            &[logs::ETCD_CONTAINER, logs::BACKUP_RESTORE_CONTAINER],
            opts.since,
            "logs",
            &mut b,
            progress,
        )
        .await;
    } else {
        b.skip("member logs", "left out (--logs=false)");
    }

    if opts.druid {
        progress("etcd-druid");
        collect_druid(client, opts, &mut b, progress).await;
    }
    Ok(b)
}

/// Every Secret the Etcd's spec references (`…SecretRef`/`secretRef` objects with a name), sorted.
pub fn referenced_secrets(etcd: &Etcd) -> Vec<String> {
    fn walk(v: &Value, out: &mut BTreeSet<String>) {
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    if (k.ends_with("SecretRef") || k == "secretRef")
                        && let Some(n) = child.get("name").and_then(Value::as_str)
                        && !n.is_empty()
                    {
                        out.insert(n.to_string());
                    }
                    walk(child, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|c| walk(c, out)),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(&serde_json::to_value(&etcd.spec).unwrap_or_default(), &mut out);
    out.into_iter().collect()
}

#[allow(clippy::too_many_arguments)]
async fn collect_logs(
    client: &kube::Client,
    ns: &str,
    pods: &[String],
    containers: &[&str],
    since: Duration,
    dir: &str,
    b: &mut Bundle,
    progress: Progress<'_>,
) {
    for pod in pods {
        for c in containers {
            progress(&format!("logs {pod} {c}"));
            for previous in [false, true] {
                let what = format!("{}log of {pod} container {c}", if previous { "previous " } else { "" });
                match logs::read_stream(client, ns, pod, c, Some(since), previous).await {
                    Ok(Ok(text)) => {
                        let file = if previous { format!("{c}.previous.log") } else { format!("{c}.log") };
                        b.add(format!("{dir}/{pod}/{file}"), what, text.into_bytes());
                    }
                    // Only a restarted container has a previous run: nothing is missing.
                    Ok(Err(why)) if previous && why.contains("previous terminated container") => {}
                    Ok(Err(why)) => {
                        b.skip(what, why);
                        // What kept the current log away (no kubelet, not started) keeps the previous one too.
                        break;
                    }
                    Err(e @ LogsError::Forbidden { .. }) => {
                        b.skip(format!("every container log in namespace {ns}"), e.to_string());
                        return;
                    }
                    Err(e) => b.skip(what, e.to_string()),
                }
            }
        }
    }
}

/// What the skipped line of etcd's own view is called in the index.
pub const ETCD_VIEW: &str = "etcd's own view (member status, alarms, hashkv)";

/// etcd's own view, as `status`, `alarm list` and `check` read it: each member's Maintenance Status and alarm
/// list (`etcd/<member>.json`), the cluster's alarms (`etcd/alarms.json`) and the members' HashKV at one
/// common revision (`etcd/hashkv.json`). When no member answered, one skipped line says why.
async fn collect_etcd_view(
    client: &kube::Client,
    input: &crate::health::HealthInputs,
    report: &crate::health::HealthReport,
    b: &mut Bundle,
) {
    let Some(observation) = input.etcd_observation.as_ref() else { return };
    if observation.answered().next().is_none() {
        let why = report.etcd_view.as_ref().and_then(|v| v.not_reached.clone()).unwrap_or_default();
        // The status line's sentence without its preamble about the verdict.
        let why = why.split_once(": ").map_or(why.as_str(), |(_, w)| w);
        b.skip(ETCD_VIEW, why);
        return;
    }
    for m in &observation.members {
        match &m.outcome {
            Ok(status) => {
                let doc = serde_json::json!({"member": m.pod, "via": m.via, "status": status, "alarms": m.alarms});
                b.add(
                    format!("etcd/{}.json", m.pod),
                    format!("etcd's own status of member {} (Maintenance Status, alarm list)", m.pod),
                    serde_json::to_vec_pretty(&doc).unwrap_or_default(),
                );
            }
            Err(u) => b.skip(format!("etcd's own view of member {}", m.pod), u.detail.clone()),
        }
    }
    match observation.alarms() {
        Some(alarms) => b.add(
            "etcd/alarms.json",
            format!("the cluster's alarms ({})", alarms.len()),
            serde_json::to_vec_pretty(&alarms).unwrap_or_default(),
        ),
        None => b.skip("etcd alarm list", "no member that answered listed the alarms"),
    }
    let names = input.etcd.managed_names();
    let members: Vec<(String, Option<Pod>)> = report
        .members
        .iter()
        .map(|m| {
            let pod = names.pod(m.index);
            (m.name.clone(), input.pods.iter().find(|p| p.metadata.name.as_deref() == Some(&pod)).cloned())
        })
        .collect();
    match crate::etcd::consistency::check(client, &input.etcd, &members, crate::etcd::MEMBER_READ_TIMEOUT).await {
        Ok(hashes) => b.add(
            "etcd/hashkv.json",
            format!(
                "the members' HashKV at revision {}: {}",
                hashes.revision,
                if hashes.consistent() { "consistent" } else { "divergent" }
            ),
            serde_json::to_vec_pretty(&hashes).unwrap_or_default(),
        ),
        Err(e) => b.skip("etcd hashkv", e.to_string()),
    }
}

/// The label etcd-druid's Deployment carries (etcd-druid `charts/templates/deployment.yaml`).
pub const DRUID_LABEL: &str = "app.kubernetes.io/name=etcd-druid";

async fn collect_druid(client: &kube::Client, opts: &ReportOptions, b: &mut Bundle, progress: Progress<'_>) {
    let lp = ListParams::default().labels(DRUID_LABEL);
    let api: Api<Deployment> = match &opts.druid_namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let deployments = match api.list(&lp).await {
        Ok(l) => l.items,
        Err(e) => {
            let ns = opts.druid_namespace.clone().unwrap_or_default();
            b.skip("etcd-druid's Deployment", reason(e, &Subject { kind: "deployment", name: "", namespace: &ns }));
            return;
        }
    };
    if deployments.is_empty() {
        b.skip(
            "etcd-druid's Deployment",
            format!("no Deployment labelled {DRUID_LABEL} found (--druid-namespace names where it runs)"),
        );
        return;
    }
    for d in deployments {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let name = d.metadata.name.clone().unwrap_or_default();
        let selector: Vec<String> = d
            .spec
            .as_ref()
            .and_then(|s| s.selector.match_labels.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let mut v = serde_json::to_value(&d).unwrap_or_default();
        v["apiVersion"] = "apps/v1".into();
        v["kind"] = "Deployment".into();
        b.add_yaml(format!("etcd-druid/{ns}/deployment-{name}.yaml"), format!("etcd-druid Deployment {ns}/{name}"), v);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        match pods.list(&ListParams::default().labels(&selector.join(","))).await {
            Ok(list) => {
                for p in list.items {
                    let pod = p.metadata.name.clone().unwrap_or_default();
                    let containers: Vec<String> = p
                        .spec
                        .as_ref()
                        .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
                        .unwrap_or_default();
                    let refs: Vec<&str> = containers.iter().map(String::as_str).collect();
                    collect_logs(
                        client,
                        &ns,
                        std::slice::from_ref(&pod),
                        &refs,
                        opts.since,
                        &format!("etcd-druid/{ns}/logs"),
                        b,
                        progress,
                    )
                    .await;
                }
            }
            Err(e) => {
                b.skip(format!("pods of {ns}/{name}"), reason(e, &Subject { kind: "pod", name: "", namespace: &ns }))
            }
        }
    }
}

/// `index.md`: what the bundle holds, from where, by which druidctl, when, and what was skipped and why.
pub fn index(b: &Bundle, opts: &ReportOptions) -> String {
    let started = b.started.map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()).unwrap_or_default();
    let mut s = format!(
        "# druidctl report: etcd {ns}/{name}\n\n\
         | | |\n|---|---|\n\
         | Etcd | `{ns}/{name}` |\n\
         | API server | `{server}` |\n\
         | context | `{context}` |\n\
         | druidctl | {version} |\n\
         | collected at | {started} |\n\
         | logs | {logs} |\n\n\
         Secrets appear as name, type and key names; certificates as subject, SANs, issuer, serial and validity.\n\
         No Secret value and no private key is in this bundle. `managedFields` are left out.\n\n\
         ## Files\n\n| file | what | bytes |\n|---|---|---:|\n",
        ns = opts.etcd.namespace,
        name = opts.etcd.name,
        server = opts.source.server,
        context = opts.source.context.as_deref().unwrap_or("(none)"),
        version = opts.source.version,
        logs = if opts.logs {
            format!(
                "last {} of every container, and the previous run of restarted ones",
                crate::output::age::human(opts.since.as_secs() as i64)
            )
        } else {
            "left out".into()
        },
    );
    for f in &b.files {
        s.push_str(&format!("| `{}` | {} | {} |\n", f.path, f.what.replace('|', "\\|"), f.content.len()));
    }
    s.push_str("\n## Skipped\n\n");
    if b.skipped.is_empty() {
        s.push_str("Nothing.\n");
    } else {
        s.push_str("| what | why |\n|---|---|\n");
        for k in &b.skipped {
            s.push_str(&format!(
                "| {} | {} |\n",
                k.what.replace('|', "\\|"),
                k.why.replace('|', "\\|").replace('\n', " ")
            ));
        }
    }
    s
}

/// Writes the bundle as a `.tar.gz` with `index.md` first, every file under the directory `root`; returns the
/// archive's size in bytes.
pub fn write_tar_gz(b: &Bundle, opts: &ReportOptions, root: &str, out: &std::path::Path) -> Result<u64, ReportError> {
    let err = |source: std::io::Error| ReportError::Write { path: out.display().to_string(), source };
    let file = std::fs::File::create(out).map_err(err)?;
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let mtime = b.started.map(|t| t.as_second().max(0) as u64).unwrap_or(0);
    let mut append = |path: &str, data: &[u8]| -> std::io::Result<()> {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(mtime);
        h.set_cksum();
        tar.append_data(&mut h, format!("{root}/{path}"), data)
    };
    append("index.md", index(b, opts).as_bytes()).map_err(err)?;
    for f in &b.files {
        append(&f.path, &f.content).map_err(err)?;
    }
    let gz = tar.into_inner().map_err(err)?;
    let file = gz.finish().map_err(err)?;
    file.sync_all().map_err(err)?;
    Ok(std::fs::metadata(out).map_err(err)?.len())
}

/// The archive's default file name and its top directory: `druidctl-report-<etcd>-<UTC time>`.
pub fn default_name(key: &ObjectKey, at: jiff::Timestamp) -> String {
    format!("druidctl-report-{}-{}-{}", key.namespace, key.name, at.strftime("%Y%m%dT%H%M%SZ"))
}
