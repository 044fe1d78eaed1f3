//! `runbook cert-renewal` and `runbook machine-replacement` end to end: the real binary against the embedded API
//! server (real CRDs) with the cert-manager and MCM actors, a three-member Etcd whose member pods run on the
//! MachineSet's nodes, and a small in-test kubelet that recreates a deleted member pod, ready, on a Ready node.
//! The member pods here have no TLS endpoint, so the served-certificate check reports them as not verified;
//! `runbook_certs_playground` checks real served certificates.

use crate::certs_machines_support;
use crate::cli_support;

use std::collections::BTreeMap;
use std::time::Duration;

use certs_machines_support::{
    Cli, FAILED, NOT_FOUND, NS, REJECTED, admin_writes, create_certificate, create_etcd, etcd_tls_spec, hosts,
    machine_set_resource, member_pod, server_with_namespace, set_member_ready, start_cert_manager, start_machine_set,
    text, wait_machines_up,
};
use cli_support::{bin, etcd_resource};
use druidctl::api::{Certificate, Machine};
use druidctl::machines::delete::node_ready;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sim::ApiServer;
use landscape::certmanager::CertManager;
use landscape::mcm::Mcm;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const CERTS: [&str; 3] = ["etcd-server", "etcd-client", "etcd-peer"];

struct Fx {
    server: ApiServer,
    cli: Cli,
    _mcm: Mcm,
    cm: CertManager,
    kubelet: CancellationToken,
    /// (machine, node) hosting etcd-main-0, -1, -2.
    hosts: Vec<(String, String)>,
}

impl Drop for Fx {
    fn drop(&mut self) {
        self.kubelet.cancel();
    }
}

async fn create_member(client: &kube::Client, i: usize, node: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    if pods.create(&PostParams::default(), &member_pod(i, node)).await.is_err() {
        return;
    }
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    let _ = pods.patch_status(&format!("etcd-main-{i}"), &PatchParams::default(), &Patch::Merge(status)).await;
}

/// Recreates missing member pods (what the StatefulSet controller and kubelet do) on their node, or on another
/// Ready node whose Machine is not being deleted when theirs is going; removes pods whose node is gone (pod GC).
fn start_kubelet(client: kube::Client, stop: CancellationToken) {
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let nodes: Api<Node> = Api::all(client.clone());
        let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
            let (Ok(all_nodes), Ok(ms)) =
                (nodes.list(&ListParams::default()).await, machines.list(&ListParams::default()).await)
            else {
                continue;
            };
            let existing: Vec<String> = all_nodes.items.iter().filter_map(|n| n.metadata.name.clone()).collect();
            let usable: Vec<String> = all_nodes
                .items
                .iter()
                .filter(|n| node_ready(n))
                .filter_map(|n| n.metadata.name.clone())
                .filter(|n| {
                    ms.items
                        .iter()
                        .any(|m| m.node_name() == Some(n.as_str()) && m.metadata.deletion_timestamp.is_none())
                })
                .collect();
            let mut placed: Vec<Option<String>> = Vec::new();
            for i in 0..3 {
                let name = format!("etcd-main-{i}");
                match pods.get_opt(&name).await {
                    Ok(Some(p)) => {
                        let node = p.spec.and_then(|s| s.node_name);
                        if node.as_ref().is_some_and(|n| !existing.contains(n)) {
                            let _ = pods.delete(&name, &kube::api::DeleteParams::default().grace_period(0)).await;
                        }
                        placed.push(node);
                    }
                    _ => placed.push(None),
                }
            }
            for i in 0..3 {
                if placed[i].is_some() {
                    continue;
                }
                let node = usable
                    .iter()
                    .find(|n| !placed.iter().any(|p| p.as_deref() == Some(n.as_str())))
                    .or(usable.first())
                    .cloned();
                if let Some(node) = node {
                    create_member(&client, i, &node).await;
                    placed[i] = Some(node);
                }
            }
        }
    });
}

impl Fx {
    async fn start() -> Fx {
        let server = server_with_namespace().await;
        server.register_crd_yaml(&serde_json::to_string(&druidctl::api::task::crd()).unwrap()).expect("task CRD");
        let client = server.client();
        let mcm = start_machine_set(&server).await;
        assert!(wait_machines_up(&client).await, "machines never came up");
        let hosts = hosts(&client).await;

        create_etcd(&client, etcd_tls_spec()).await;
        // What etcd-druid reports: every member Ready, etcd-main-1 the leader.
        let now = jiff::Timestamp::now().to_string();
        let members: Vec<serde_json::Value> = (0..3)
            .map(|i| {
                json!({"name": format!("etcd-main-{i}"), "role": if i == 1 { "Leader" } else { "Member" },
                            "status": "Ready", "reason": "LeaseSucceeded", "lastTransitionTime": now})
            })
            .collect();
        Api::<DynamicObject>::namespaced_with(client.clone(), NS, &etcd_resource())
            .patch_status("etcd-main", &PatchParams::default(), &Patch::Merge(json!({"status": {"members": members}})))
            .await
            .expect("etcd status");
        for name in CERTS {
            create_certificate(&client, name, &format!("{name}-tls")).await;
        }
        let cm = start_cert_manager(&server);
        for (i, (_, node)) in hosts.iter().enumerate() {
            create_member(&client, i, node).await;
        }
        server.add_user("kubelet", &["system:masters"]);
        let kubelet = CancellationToken::new();
        start_kubelet(server.client_for("kubelet"), kubelet.clone());
        let cli = Cli::serve(&server).await;
        let fx = Fx { server, cli, _mcm: mcm, cm, kubelet, hosts };
        for name in CERTS {
            fx.wait_revision(name, 1).await;
        }
        fx.server.request_log().clear();
        fx
    }

    async fn run(&self, args: &[&str]) -> std::process::Output {
        self.cli.run(args).await
    }

    /// [`run_on_terminal`] with this kubeconfig, off the async runtime.
    async fn run_on_terminal(&self, args: &[&str], answer: &str) -> (i32, String, String) {
        let (kc, home, answer) = (self.cli.kubeconfig.clone(), self.cli.dir.path().to_path_buf(), answer.to_string());
        let owned: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        tokio::task::spawn_blocking(move || run_on_terminal(&kc, &home, &owned, &answer)).await.unwrap()
    }

    async fn revision(&self, name: &str) -> Option<i64> {
        let c = Api::<Certificate>::namespaced(self.server.client(), NS).get(name).await.unwrap();
        c.status.as_ref().and_then(|s| s.revision)
    }

    async fn wait_revision(&self, name: &str, rev: i64) {
        for _ in 0..200 {
            if self.revision(name).await == Some(rev) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("certificate {name} never reached revision {rev}");
    }

    async fn pod_uids(&self) -> Vec<Option<String>> {
        let pods: Api<Pod> = Api::namespaced(self.server.client(), NS);
        let mut out = Vec::new();
        for i in 0..3 {
            out.push(pods.get_opt(&format!("etcd-main-{i}")).await.unwrap().and_then(|p| p.metadata.uid));
        }
        out
    }

    /// Writes druidctl (user admin) made.
    fn admin_writes(&self) -> Vec<String> {
        admin_writes(&self.server)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runbook_list_shows_the_certificate_and_machine_runbooks() {
    let fx = Fx::start().await;
    let out = fx.run(&["runbook", "list"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("cert-renewal") && stdout.contains("CertificateRenewalTask"), "{stdout}");
    assert!(stdout.contains("machine-replacement") && stdout.contains("MachineForceDeletionTask"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_renewal_plan_prints_renewal_then_restarts_and_changes_nothing() {
    let fx = Fx::start().await;
    let uids = fx.pod_uids().await;
    let out = fx.run(&["runbook", "cert-renewal", "etcd-main", "--plan"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains(&format!("Runbook cert-renewal for etcd {NS}/etcd-main")), "{stdout}");
    let renew = stdout.find("RenewCertificates").expect("renewal step");
    let restarts: Vec<usize> =
        (0..3).map(|i| stdout.find(&format!("RestartMember/etcd-main-{i}")).expect("restart step")).collect();
    assert!(restarts.iter().all(|r| *r > renew), "renewal comes before any restart: {stdout}");
    assert!(stdout.contains(&format!("$ kubectl -n {NS} delete pod etcd-main-0")), "pastable as is: {stdout}");
    assert!(!stdout.contains("DESTRUCTIVE"), "{stdout}");
    assert_eq!(fx.admin_writes(), Vec::<String>::new(), "a plan changes nothing");
    for name in CERTS {
        assert_eq!(fx.revision(name).await, Some(1));
    }
    assert_eq!(fx.pod_uids().await, uids, "no member restarted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_renewal_with_yes_issues_new_revisions_and_restarts_every_member() {
    let fx = Fx::start().await;
    let uids = fx.pod_uids().await;
    let out = fx.run(&["runbook", "cert-renewal", "etcd-main", "--yes"]).await;
    let stdout = text(&out.stdout);
    // Every step done, but no member's served certificate could be checked: "done, not verified" (exit 8).
    assert_eq!(out.status.code(), Some(8), "{stdout}{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("not everything was verified"), "{}", text(&out.stderr));
    for name in CERTS {
        assert!(fx.revision(name).await >= Some(2), "certificate {name} has a new revision: {stdout}");
    }
    let after = fx.pod_uids().await;
    for i in 0..3 {
        assert!(after[i].is_some() && after[i] != uids[i], "etcd-main-{i} restarted: {stdout}");
    }
    let order: Vec<usize> = ["RestartMember/etcd-main-0", "RestartMember/etcd-main-2", "RestartMember/etcd-main-1"]
        .iter()
        .map(|s| stdout.find(&format!("✓ {s}")).unwrap_or_else(|| panic!("{s} completed: {stdout}")))
        .collect();
    assert!(order[0] < order[1] && order[1] < order[2], "followers first, the leader last: {stdout}");
    // These pods publish no TLS endpoint: the served certificates are reported as not verified, not as verified.
    for i in 0..3 {
        assert!(
            stdout.contains(&format!("warning: VerifyServedCertificates: etcd-main-{i}: NOT verified")),
            "{stdout}"
        );
    }
    assert!(stdout.contains("✓ VerifyServedCertificates: done with warnings"), "{stdout}");
    let tasks = Api::<DynamicObject>::namespaced_with(
        fx.server.client(),
        NS,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("druid.gardener.cloud", "v1alpha1", "EtcdOperatorTask"),
            "etcdoperatortasks",
        ),
    )
    .list(&ListParams::default())
    .await
    .unwrap()
    .items;
    assert_eq!(tasks.len(), 1, "one task journals the run");
    assert_eq!(tasks[0].data["spec"]["type"], "CertificateRenewalTask");
    assert_eq!(tasks[0].data["status"]["state"], "Succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_replacement_plan_shows_the_blast_radius_and_the_steps_and_changes_nothing() {
    let fx = Fx::start().await;
    let (machine, node) = fx.hosts[0].clone();
    let out = fx.run(&["runbook", "machine-replacement", &machine, "--force", "--plan"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains(&format!("machine {NS}/{machine} backs node {node}")), "{stdout}");
    assert!(stdout.contains(&format!("Runbook machine-replacement for etcd {NS}/etcd-main")), "{stdout}");
    assert!(stdout.contains("DESTRUCTIVE RequestMachineDeletion"), "{stdout}");
    assert!(stdout.contains(&format!("$ kubectl -n {NS} label machine {machine} force-deletion=True")), "{stdout}");
    assert!(stdout.contains("WaitForReplacementNode") && stdout.contains("WaitForMembersReady"), "{stdout}");

    let out = fx.run(&["runbook", "machine-replacement", "--node", &node, "--plan"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("RequestMachineDeletion"), "{stdout}");
    assert_eq!(fx.admin_writes(), Vec::<String>::new(), "a plan changes nothing");
    assert!(Api::<Machine>::namespaced(fx.server.client(), NS).get_opt(&machine).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_replacement_of_an_unknown_machine_is_not_found_in_one_line() {
    let fx = Fx::start().await;
    let out = fx.run(&["runbook", "machine-replacement", "no-such-machine", "--yes"]).await;
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(NOT_FOUND), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("no-such-machine"), "{err}");
    assert_eq!(fx.admin_writes(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_replacement_with_yes_replaces_the_machine_and_waits_for_the_members() {
    let fx = Fx::start().await;
    let (machine, node) = fx.hosts[0].clone();
    let out = fx.run(&["runbook", "machine-replacement", &machine, "--force", "--yes"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for step in ["RequestMachineDeletion", "WaitForReplacementNode", "WaitForMembersReady"] {
        assert!(stdout.contains(&format!("✓ {step}")), "{step}: {stdout}");
    }
    assert!(
        Api::<Machine>::namespaced(fx.server.client(), NS).get_opt(&machine).await.unwrap().is_none(),
        "the machine is gone"
    );
    let nodes = Api::<Node>::all(fx.server.client()).list(&ListParams::default()).await.unwrap().items;
    assert!(!nodes.iter().any(|n| n.metadata.name.as_deref() == Some(node.as_str())), "the old node is gone");
    let member = Api::<Pod>::namespaced(fx.server.client(), NS).get("etcd-main-0").await.unwrap();
    assert_ne!(member.spec.unwrap().node_name.as_deref(), Some(node.as_str()), "the member runs elsewhere");
    let writes = fx.admin_writes();
    assert!(
        writes.contains(&format!("delete /apis/machine.sapcloud.io/v1alpha1/namespaces/{NS}/machines/{machine}")),
        "{writes:?}"
    );
}

/// The druidctl binary with stdin and stderr on a pseudo-terminal (stdout piped): waits until the typed
/// confirmation is asked, types `answer` and Enter, and returns `(exit code, stdout, terminal output)`.
fn run_on_terminal(
    kubeconfig: &std::path::Path,
    home: &std::path::Path,
    args: &[String],
    answer: &str,
) -> (i32, String, String) {
    use std::io::{Read, Write};
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    // SAFETY: plain libc pty calls; the master fd is owned by the File created right after.
    let master = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY) };
    assert!(master >= 0, "posix_openpt");
    let slave_name = unsafe {
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
        std::ffi::CStr::from_ptr(libc::ptsname(master)).to_string_lossy().into_owned()
    };
    let mut master = unsafe { std::fs::File::from_raw_fd(master) };
    let slave =
        || std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOCTTY).open(&slave_name).unwrap();
    let mut child = std::process::Command::new(bin())
        .args(args)
        .env("HOME", home)
        .env("KUBECONFIG", kubeconfig)
        .env("NO_COLOR", "1")
        .env_remove("COMPLETE")
        .stdin(slave())
        .stderr(slave())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let (seen, mut master) = (seen.clone(), master.try_clone().unwrap());
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            // Ends with EIO once the child (the last holder of the terminal) exits.
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !seen.lock().unwrap().contains("to confirm") {
        assert!(std::time::Instant::now() < deadline, "no confirmation asked: {}", seen.lock().unwrap());
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    master.write_all(format!("{answer}\r").as_bytes()).unwrap();
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    let code = child.wait().unwrap().code().unwrap_or(-1);
    drop(master);
    let _ = reader.join();
    let terminal = seen.lock().unwrap().clone();
    (code, stdout, terminal)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_renewal_with_failing_issuance_restarts_no_member_shows_the_next_retry_and_resumes_once_fixed() {
    let fx = Fx::start().await;
    let uids = fx.pod_uids().await;
    fx.cm.set_failing(NS, "etcd-server", true);
    let out = fx.run(&["runbook", "cert-renewal", "etcd-main", "--yes"]).await;
    let (stdout, err) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(FAILED), "{stdout}{err}");
    assert!(err.contains("issuing certificate etcd-server failed") && err.contains("no member was restarted"), "{err}");
    assert!(!stdout.contains("→ [2/5] RestartMember"), "no restart step started: {stdout}");
    assert_eq!(fx.pod_uids().await, uids, "no member restarted");
    assert!(!fx.admin_writes().iter().any(|w| w.starts_with("delete ")), "{:?}", fx.admin_writes());

    // The retry time the runbook names is the one `cert status` shows: lastFailureTime + 1h (first failure).
    let said: jiff::Timestamp = err
        .split("cert-manager retries at ")
        .nth(1)
        .and_then(|rest| rest.split([';', ' ', ',']).next())
        .expect("the next retry in the error")
        .parse()
        .unwrap();
    let out = fx.run(&["cert", "status", "--etcd", "etcd-main", "-o", "json"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let server = doc["items"].as_array().unwrap().iter().find(|i| i["name"] == "etcd-server").unwrap().clone();
    assert_eq!(server["failedIssuanceAttempts"], 1, "{server}");
    let last: jiff::Timestamp = server["lastFailureTime"].as_str().unwrap().parse().unwrap();
    let next: jiff::Timestamp = server["nextRetryAt"].as_str().unwrap().parse().unwrap();
    assert_eq!(next.duration_since(last), jiff::SignedDuration::from_hours(1), "{server}");
    assert_eq!(said, next, "the runbook and cert status name the same retry time");
    assert_eq!(server["revision"], 1, "the old certificate stays");

    // Once the issuer works again, re-running continues the same task: it triggers again and restarts the members.
    fx.cm.set_failing(NS, "etcd-server", false);
    let out = fx.run(&["runbook", "cert-renewal", "etcd-main", "--yes"]).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(8), "done, the served certificates not verified: {stdout}{}", text(&out.stderr));
    assert!(stdout.contains("continuing task"), "{stdout}");
    assert!(fx.revision("etcd-server").await >= Some(2));
    let after = fx.pod_uids().await;
    assert!((0..3).all(|i| after[i].is_some() && after[i] != uids[i]), "every member restarted: {stdout}");
}

/// Name, labels, annotations and deletion timestamp of an object.
type Changeable = (Option<String>, Option<BTreeMap<String, String>>, Option<BTreeMap<String, String>>, Option<Time>);

fn changeable(meta: ObjectMeta) -> Changeable {
    (meta.name, meta.labels, meta.annotations, meta.deletion_timestamp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_replacement_refuses_while_another_member_is_down_and_for_a_node_without_members() {
    let fx = Fx::start().await;
    let client = fx.server.client();
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    let snapshot = || async {
        // What druidctl could change: existence, labels (force-deletion), annotations (trigger-deletion-by-mcm)
        // and deletion (resource versions move with MCM's own status updates).
        let ms: Vec<_> = machines
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|m| changeable(m.metadata))
            .collect();
        let nodes: Vec<_> = Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|n| changeable(n.metadata))
            .collect();
        (ms, nodes, fx.pod_uids().await)
    };

    // Another member of the Etcd is down: replacing the node of etcd-main-0 would leave 1 of 3.
    set_member_ready(&client, 1, false).await;
    fx.server.request_log().clear();
    let before = snapshot().await;
    let (machine, node) = fx.hosts[0].clone();
    for args in [
        vec!["runbook", "machine-replacement", machine.as_str(), "--yes"],
        vec!["runbook", "machine-replacement", "--node", node.as_str(), "--force", "--yes"],
    ] {
        let out = fx.run(&args).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(REJECTED), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains("etcd shoot--a/etcd-main would lose quorum (2 of 3 members ready now, 2 needed; etcd-main-0 on this node)"),
            "{err}"
        );
        assert!(err.contains("nothing was changed"), "{err}");
    }
    // `--plan` works in this state too: the plan, and a verdict saying why a run would be refused now.
    let out = fx.run(&["runbook", "machine-replacement", machine.as_str(), "--plan"]).await;
    let text_out = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text_out.contains("RequestMachineDeletion"), "the plan's steps: {text_out}");
    assert!(
        text_out.contains("a run would be refused now: ")
            && text_out.contains("etcd shoot--a/etcd-main would lose quorum (2 of 3 members ready now"),
        "{text_out}"
    );
    assert_eq!(fx.admin_writes(), Vec::<String>::new(), "no task, no label, no deletion");
    assert_eq!(snapshot().await, before, "machines, nodes and member pods unchanged");
    set_member_ready(&client, 1, true).await;

    // A fourth machine whose node hosts no member.
    Api::<DynamicObject>::namespaced_with(client.clone(), NS, &machine_set_resource())
        .patch("worker", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}})))
        .await
        .unwrap();
    let mut spare = None;
    for _ in 0..200 {
        let hosts: Vec<&String> = fx.hosts.iter().map(|(m, _)| m).collect();
        spare = machines
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|m| !hosts.contains(&m.metadata.name.as_ref().unwrap()) && m.node_name().is_some());
        if spare.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let spare = spare.expect("a fourth machine with a node");
    let (spare_machine, spare_node) = (spare.metadata.name.clone().unwrap(), spare.node_name().unwrap().to_string());
    fx.server.request_log().clear();
    let before = snapshot().await;
    for args in [
        vec!["runbook", "machine-replacement", spare_machine.as_str(), "--yes"],
        vec!["runbook", "machine-replacement", "--node", spare_node.as_str(), "--yes"],
    ] {
        let out = fx.run(&args).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(REJECTED), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(&format!("no etcd member runs on node {spare_node}")), "{err}");
        assert!(err.contains("machine delete"), "it names the command for a node without members: {err}");
    }
    assert_eq!(fx.admin_writes(), Vec::<String>::new());
    assert_eq!(snapshot().await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_replacement_with_force_needs_the_etcd_name_typed_on_a_terminal() {
    let fx = Fx::start().await;
    let (machine, node) = fx.hosts[2].clone();
    let machines: Api<Machine> = Api::namespaced(fx.server.client(), NS);
    let args = ["runbook", "machine-replacement", machine.as_str(), "--force"];

    // Without a terminal and without --yes: refused before anything is created.
    let out = fx.run(&args).await;
    assert_eq!(out.status.code(), Some(REJECTED), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--yes"), "{}", text(&out.stderr));
    assert_eq!(fx.admin_writes(), Vec::<String>::new());

    // On a terminal, a wrong answer declines: the machine and its node stay.
    let (code, stdout, terminal) = fx.run_on_terminal(&args, "etcd-events").await;
    assert_eq!(code, REJECTED, "{stdout}{terminal}");
    assert!(terminal.contains("Type \"etcd-main\" to confirm"), "{terminal}");
    assert!(stdout.contains("DESTRUCTIVE RequestMachineDeletion"), "{stdout}");
    let m = machines.get(&machine).await.unwrap();
    assert!(m.metadata.deletion_timestamp.is_none(), "the machine is not deleted");
    assert!(!m.metadata.labels.unwrap_or_default().contains_key("force-deletion"), "no force-deletion label");
    assert!(
        !fx.admin_writes().iter().any(|w| w.contains("/machines/") || w.contains("/nodes/")),
        "{:?}",
        fx.admin_writes()
    );

    // Typing the Etcd's name confirms: the machine is force-deleted and replaced, the members are ready again.
    let (code, stdout, terminal) = fx.run_on_terminal(&args, "etcd-main").await;
    assert_eq!(code, 0, "{stdout}{terminal}");
    for step in ["RequestMachineDeletion", "WaitForReplacementNode", "WaitForMembersReady"] {
        assert!(stdout.contains(&format!("✓ {step}")), "{step}: {stdout}");
    }
    assert!(machines.get_opt(&machine).await.unwrap().is_none(), "the machine is gone");
    let writes = fx.admin_writes();
    assert!(
        writes.contains(&format!("patch /apis/machine.sapcloud.io/v1alpha1/namespaces/{NS}/machines/{machine}")),
        "the force-deletion label was set: {writes:?}"
    );
    let nodes = Api::<Node>::all(fx.server.client()).list(&ListParams::default()).await.unwrap().items;
    assert!(!nodes.iter().any(|n| n.metadata.name.as_deref() == Some(node.as_str())), "the old node is gone");
}
