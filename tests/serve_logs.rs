//! What `druidctl serve` logs, with real processes: two replicas (text and `--log-format json`) against
//! `druidctl playground apiserver` in its own process, their stderr piped as a log collector reads it. The API
//! server is killed, stays down for a while and comes back on the same port with the same credentials: each
//! replica logs the outage once and its end once, in plain text without colour or as one JSON object a line.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cli_support::{Proc, playground_apiserver as apiserver, port_of};

/// A `serve` replica whose stderr is collected through a pipe.
struct Replica {
    proc: Proc,
    log: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Replica {
    fn spawn(dir: &Path, kubeconfig: &Path, identity: &str, format: &str) -> Replica {
        let mut child = Command::new(env!("CARGO_BIN_EXE_druidctl"))
            .args(["serve", "-n", "default", "--identity", identity, "--metrics-addr", "127.0.0.1:0"])
            .args(["--lease-duration", "3s", "--log-format", format])
            .env("KUBECONFIG", kubeconfig)
            .env("HOME", dir)
            .env_remove("RUST_LOG")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Replica { proc: Proc(child), log, reader: Some(reader) }
    }

    fn text(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn count(&self, needle: &str) -> usize {
        self.text().lines().filter(|l| l.contains(needle)).count()
    }

    /// Waits (up to `limit`) until the log has a line containing `needle`.
    fn wait_for(&self, needle: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.count(needle) == 0 {
            assert!(Instant::now() < deadline, "no {needle:?} in the log:\n{}", self.text());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM, then the whole log once the process has exited.
    fn stop(mut self) -> String {
        unsafe { libc::kill(self.proc.0.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.proc.0.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
        self.reader.take().unwrap().join().unwrap();
        self.text()
    }
}

#[test]
fn serve_logs_plain_text_or_json_and_an_api_server_outage_once_with_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig: PathBuf = dir.path().join("config");
    let first = apiserver(&kubeconfig, "127.0.0.1:0", false);
    let port = port_of(&kubeconfig);

    let text = Replica::spawn(dir.path(), &kubeconfig, "replica-text", "text");
    let json = Replica::spawn(dir.path(), &kubeconfig, "replica-json", "json");
    for r in [&text, &json] {
        r.wait_for("serving", Duration::from_secs(30));
    }
    // One of them leads; the other stands by. Both talk to the API server all the time.
    let deadline = Instant::now() + Duration::from_secs(30);
    while text.count("became leader") + json.count("became leader") == 0 {
        assert!(Instant::now() < deadline, "nobody leads:\n{}\n{}", text.text(), json.text());
        std::thread::sleep(Duration::from_millis(100));
    }

    // The API server goes away for a while: every call of both replicas fails, again and again.
    drop(first);
    std::thread::sleep(Duration::from_secs(5));
    let _second = apiserver(&kubeconfig, &format!("127.0.0.1:{port}"), true);
    assert_eq!(port_of(&kubeconfig), port);
    for r in [&text, &json] {
        r.wait_for("answers again", Duration::from_secs(60));
    }
    // Somebody leads again (the restarted server lost the leader Lease).
    let deadline = Instant::now() + Duration::from_secs(60);
    while text.count("became leader") + json.count("became leader") < 2 {
        assert!(Instant::now() < deadline, "nobody leads again:\n{}\n{}", text.text(), json.text());
        std::thread::sleep(Duration::from_millis(100));
    }

    let text_log = text.stop();
    let json_log = json.stop();

    // (a) A pipe is not a terminal: no colour, no escape sequence at all.
    assert!(!text_log.contains('\u{1b}'), "ANSI escapes in the log:\n{text_log:?}");
    let levels: Vec<&str> = text_log.lines().filter_map(|l| l.split_whitespace().nth(1)).collect();
    assert!(levels.iter().all(|l| ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(l)), "{text_log}");
    // (b) JSON: one object a line, each with its level and message.
    let events: Vec<serde_json::Value> = json_log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}\n{json_log}")))
        .collect();
    for e in &events {
        assert!(e.is_object(), "{e}");
        assert!(e["level"].is_string(), "no level: {e}");
        assert!(e["message"].is_string(), "no message: {e}");
    }
    assert!(events.len() >= 4, "{json_log}");

    // (c) The outage: one WARN when it starts, one line when it ends, nothing else above INFO, however often
    // the replica tried meanwhile.
    let warn = |level: &str, message: &str| (level == "WARN").then(|| message.to_string());
    let text_warns: Vec<String> = text_log
        .lines()
        .filter_map(|l| {
            let mut p = l.split_whitespace();
            let (_, level) = (p.next(), p.next().unwrap_or(""));
            warn(level, l)
        })
        .collect();
    let json_warns: Vec<String> =
        events.iter().filter_map(|e| warn(e["level"].as_str().unwrap(), &e.to_string())).collect();
    for (log, warns) in [(&text_log, &text_warns), (&json_log, &json_warns)] {
        assert_eq!(warns.len(), 1, "one WARN for the outage:\n{log}");
        assert!(warns[0].contains("retrying with backoff"), "{}", warns[0]);
        assert_eq!(log.lines().filter(|l| l.contains("answers again")).count(), 1, "{log}");
        assert_eq!(log.lines().filter(|l| l.contains("ERROR")).count(), 0, "{log}");
    }
}
