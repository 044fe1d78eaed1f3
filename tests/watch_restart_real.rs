//! The long-running commands against the REAL kube-apiserver while it restarts: `druidctl serve`,
//! `druidctl task watch` and `druidctl status --watch` run as processes, the API server is restarted twice with
//! the same state dir (graceful, `realk8s.sh restart-apiserver`; then killed, `restart-apiserver --kill`), and the
//! relists each client made are counted from the API server's own audit log (`REALK8S_APISERVER_EXTRA_ARGS` with
//! an audit policy), told apart by their User-Agent (`druidctl-serve/…`, `druidctl-task-watch/…`,
//! `druidctl-status-watch/…`). A relist is a LIST answered 200 or a streaming list (a WATCH with
//! `sendInitialEvents=true`) answered 200. A freshly restarted API server answers 410 Gone to a resourceVersion
//! older than its new watch cache, so one relist per kind and restart is the floor; more would be a loop.
//!
//! Also: every process still runs after each restart, `status --watch` prints again when the Etcd changes after
//! a restart, and serve keeps its leader Lease across a restart shorter than the lease (holder and
//! leaseTransitions unchanged, its term not stopped).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::realk8s_support::RealK8s;

const NS: &str = "watch-restart";
const LEASE: Duration = Duration::from_secs(30);

/// A child process, SIGKILLed and reaped on drop.
struct Proc {
    child: Child,
    name: &'static str,
    stderr: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn spawn(dir: &Path, kubeconfig: &Path, name: &'static str, args: &[&str]) -> Proc {
        let stderr = dir.join(format!("{name}.stderr"));
        let stdout = dir.join(format!("{name}.stdout"));
        let child = Command::new(env!("CARGO_BIN_EXE_druidctl"))
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("HOME", dir)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        Proc { child, name, stderr }
    }

    fn assert_running(&mut self, when: &str) {
        let status = self.child.try_wait().unwrap();
        let log = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        assert!(status.is_none(), "{} exited ({status:?}) {when}; its stderr:\n{log}", self.name);
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

/// One request of a druidctl client in the audit log.
#[derive(Debug)]
struct Request {
    client: String,
    resource: String,
    verb: String,
    streaming: bool,
    code: u16,
    /// A watch still open (its last stage is ResponseStarted).
    open: bool,
}

impl Request {
    fn relist(&self) -> bool {
        self.code == 200 && (self.verb == "list" || (self.verb == "watch" && self.streaming))
    }
}

/// The druidctl requests in the audit log from line `from` on (one per auditID, its last stage).
fn requests(audit: &Path, from: usize) -> (Vec<Request>, usize) {
    let text = std::fs::read_to_string(audit).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut by_id: BTreeMap<String, (usize, Request)> = BTreeMap::new();
    // A watch opened before `from` ends after it (its ResponseComplete): it belongs to the earlier window.
    let earlier: HashSet<&str> = lines[..from.min(lines.len())]
        .iter()
        .filter_map(|l| l.split("\"auditID\":\"").nth(1)?.split('"').next())
        .collect();
    for (i, line) in lines.iter().enumerate().skip(from) {
        let Ok(e) = serde_json::from_str::<Value>(line) else { continue };
        if earlier.contains(e["auditID"].as_str().unwrap_or_default()) {
            continue;
        }
        let ua = e["userAgent"].as_str().unwrap_or_default();
        let client = ua.split('/').next().unwrap_or_default();
        if !client.starts_with("druidctl") {
            continue;
        }
        let uri = e["requestURI"].as_str().unwrap_or_default();
        let r = Request {
            client: client.to_string(),
            resource: e["objectRef"]["resource"].as_str().unwrap_or_default().to_string(),
            verb: e["verb"].as_str().unwrap_or_default().to_string(),
            streaming: uri.contains("sendInitialEvents=true"),
            code: e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
            open: e["stage"] == "ResponseStarted",
        };
        let id = e["auditID"].as_str().unwrap_or_default().to_string();
        let first = by_id.get(&id).map_or(i, |(f, _)| *f);
        by_id.insert(id, (first, r));
    }
    let mut out: Vec<(usize, Request)> = by_id.into_values().collect();
    out.sort_by_key(|(i, _)| *i);
    (out.into_iter().map(|(_, r)| r).collect(), lines.len())
}

/// What each client watches: (user agent, resource).
fn watched() -> BTreeSet<(&'static str, &'static str)> {
    let mut w = BTreeSet::from([("druidctl-serve", "etcdoperatortasks"), ("druidctl-task-watch", "etcdoperatortasks")]);
    for r in ["etcds", "pods", "persistentvolumeclaims", "leases", "etcdoperatortasks"] {
        w.insert(("druidctl-status-watch", r));
    }
    w
}

/// Relists per (client, resource) in `reqs`.
fn relists(reqs: &[Request]) -> BTreeMap<(String, String), usize> {
    let mut n = BTreeMap::new();
    for r in reqs.iter().filter(|r| r.relist()) {
        *n.entry((r.client.clone(), r.resource.clone())).or_insert(0) += 1;
    }
    n
}

/// Waits (up to `limit`) until every watched kind of every client has a watch opened since line `from` that is
/// still open (resumed, or relisted after its 410); returns whether they all have.
fn wait_for_watches(audit: &Path, from: usize, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let (reqs, _) = requests(audit, from);
        let open: BTreeSet<(String, String)> = reqs
            .iter()
            .filter(|r| r.verb == "watch" && r.code == 200 && r.open)
            .map(|r| (r.client.clone(), r.resource.clone()))
            .collect();
        if watched().iter().all(|(c, r)| open.contains(&(c.to_string(), r.to_string()))) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Per (client, resource): LISTs, streaming lists, other watch/list requests and their codes.
type Row = (usize, usize, usize, BTreeSet<u16>);

fn table(reqs: &[Request]) -> String {
    let mut rows: BTreeMap<(String, String), Row> = BTreeMap::new();
    for r in reqs {
        let row = rows.entry((r.client.clone(), r.resource.clone())).or_default();
        if r.relist() {
            if r.streaming {
                row.1 += 1;
            } else {
                row.0 += 1;
            }
        } else if r.verb == "watch" || r.verb == "list" {
            row.2 += 1;
            row.3.insert(r.code);
        }
    }
    let mut out = String::from(
        "  client                 resource                 LIST  streaming-list  other watch/list (codes)\n",
    );
    for ((c, res), (l, s, o, codes)) in rows {
        out.push_str(&format!("  {c:<22} {res:<24} {l:>4}  {s:>14}  {o} {codes:?}\n"));
    }
    out
}

fn lease(real: &RealK8s) -> (String, i64) {
    let out = real.kubectl(&["get", "lease", "-n", NS, "druidctl-serve", "-o", "json"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let l: Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        l["spec"]["holderIdentity"].as_str().unwrap_or_default().to_string(),
        l["spec"]["leaseTransitions"].as_i64().unwrap_or(0),
    )
}

/// Waits until `status --watch` printed a report with `specReconcileSuspended` = `want`.
fn wait_for_status(stdout: &Path, want: bool, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let text = std::fs::read_to_string(stdout).unwrap_or_default();
        let last = text.lines().rev().find_map(|l| serde_json::from_str::<Value>(l).ok());
        if last.as_ref().is_some_and(|r| r["annotations"]["specReconcileSuspended"] == want) {
            return;
        }
        assert!(Instant::now() < deadline, "status --watch did not print suspended={want}; stdout:\n{text}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn suspend(real: &RealK8s, on: bool) {
    let value = if on {
        "druid.gardener.cloud/suspend-etcd-spec-reconcile=true"
    } else {
        "druid.gardener.cloud/suspend-etcd-spec-reconcile-"
    };
    let out = real.kubectl(&["annotate", "--overwrite", "-n", NS, "etcd", "etcd-main", value], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn serve_task_watch_and_status_watch_relist_at_most_once_per_kind_and_api_server_restart() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("audit-policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n  verbs: [list, watch, get, update, create]\n- level: None\n",
    )
    .unwrap();
    let audit = dir.path().join("audit.log");
    let args = format!(
        "--audit-policy-file={} --audit-log-path={} --audit-log-mode=blocking",
        policy.display(),
        audit.display()
    );
    let Some(real) = RealK8s::private("watch-restart", false, &[("REALK8S_APISERVER_EXTRA_ARGS", args)]) else {
        return;
    };
    let crds: Vec<Value> = landscape::external::crd_documents().unwrap();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": crds});
    let out = real.kubectl(&["apply", "--server-side", "-f", "-"], Some(&list.to_string()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = real.kubectl(&["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = real.kubectl(&["create", "namespace", NS], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let etcd = serde_json::json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
        "metadata": {"name": "etcd-main", "namespace": NS},
        "spec": {"replicas": 3, "labels": {"app": "etcd-statefulset"},
                 "selector": {"matchLabels": {"app": "etcd-statefulset"}}, "etcd": {}, "backup": {}}
    });
    let out = real.kubectl(&["apply", "-f", "-"], Some(&etcd.to_string()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let kc = real.kubeconfig.clone();
    let lease_arg = format!("{}s", LEASE.as_secs());
    let mut procs = [
        Proc::spawn(
            dir.path(),
            &kc,
            "serve",
            &[
                "serve",
                "-n",
                NS,
                "--identity",
                "serve-1",
                "--metrics-addr",
                "127.0.0.1:0",
                "--lease-duration",
                &lease_arg,
            ],
        ),
        Proc::spawn(dir.path(), &kc, "task-watch", &["task", "watch", "-n", NS]),
        Proc::spawn(dir.path(), &kc, "status-watch", &["status", "--watch", "-n", NS, "-o", "jsonl"]),
    ];
    let status_out = dir.path().join("status-watch.stdout");
    assert!(
        wait_for_watches(&audit, 0, Duration::from_secs(60)),
        "the clients did not all watch what they show:\n{}",
        table(&requests(&audit, 0).0)
    );
    let initial = requests(&audit, 0).0;
    // The LISTs here are the one-shot reads that check access and input before the watches start.
    println!("initial lists and watches:\n{}", table(&initial));
    let (holder, transitions) = lease(&real);
    assert_eq!(holder, "serve-1");

    let mut want = false;
    for (restart, how) in [("graceful", &["restart-apiserver"][..]), ("kill", &["restart-apiserver", "--kill"][..])] {
        let (_, mark) = requests(&audit, 0);
        let terms_before = procs[0].log().matches("stopping this term").count();
        let leading_before = procs[0].log().matches("became leader").count();
        let t = Instant::now();
        let out = real.script(how).expect("a private server");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let took = t.elapsed();
        // Every kind watches again (resumed, or relisted after its 410); then a while longer, so that a loop
        // would show.
        let all = wait_for_watches(&audit, mark, Duration::from_secs(90));
        std::thread::sleep(Duration::from_secs(5));
        for p in procs.iter_mut() {
            p.assert_running(&format!("after the {restart} restart"));
        }
        let (reqs, _) = requests(&audit, mark);
        println!(
            "{restart} restart of the API server took {:.1}s (realk8s.sh {}):\n{}",
            took.as_secs_f64(),
            how.join(" "),
            table(&reqs)
        );
        assert!(all, "not every watch is open again after the {restart} restart:\n{}", table(&reqs));
        // Streaming lists are on in v1.36 (WatchList): every relist is a watch, not a LIST.
        assert!(
            reqs.iter().filter(|r| r.relist()).all(|r| r.streaming),
            "a LIST although the server offers streaming lists:\n{}",
            table(&reqs)
        );
        for ((client, resource), n) in relists(&reqs) {
            assert!(n <= 1, "{client} relisted {resource} {n} times after one {restart} restart:\n{}", table(&reqs));
        }
        // status --watch still follows the cluster.
        want = !want;
        suspend(&real, want);
        wait_for_status(&status_out, want, Duration::from_secs(30));
        let (h, tr) = lease(&real);
        let terms = procs[0].log().matches("stopping this term").count() - terms_before;
        println!(
            "serve's leader Lease after the {restart} restart: holder {h}, leaseTransitions {tr} (before: {transitions}), terms stopped: {terms}"
        );
        assert_eq!((h.as_str(), tr), ("serve-1", transitions), "serve lost its Lease to someone else");
        if terms > 0 {
            // It stopped its term during the outage: it leads again within a renew period or two of the
            // server's return (the Lease still names it).
            let deadline = Instant::now() + LEASE / 5 * 3;
            while procs[0].log().matches("became leader").count() <= leading_before {
                assert!(Instant::now() < deadline, "serve did not lead again:\n{}", procs[0].log());
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        // The renew deadline is the lease less one renew period: a restart well inside it keeps the term.
        if took + Duration::from_secs(3) < LEASE - LEASE / 5 {
            assert_eq!(
                terms,
                0,
                "serve stopped its term during a {restart} restart of {took:?} (lease {LEASE:?}):\n{}",
                procs[0].log()
            );
        }
    }
    let seen: HashSet<&str> = procs.iter().map(|p| p.name).collect();
    assert_eq!(seen.len(), 3);
}
