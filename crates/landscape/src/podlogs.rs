//! The kubelet's part for container logs: every container of every etcd pod the landscape runs has a log that
//! `pods/{name}/log` serves ([`LandscapeLogs`], a [`kube_sim::PodLogSource`]).
//!
//! - `etcd`: the real etcd process's output. All runs of a pod's etcd append to one file in the state dir; each
//!   start records where its run begins, so a restarted container keeps its previous log (`previous=true`), as
//!   the kubelet keeps the last terminated container's log. A line's time is etcd's own (`ts` of its JSON lines,
//!   the timestamp of capnslog lines); a line without one (a panic's stack) takes the time of the line before.
//! - `backup-restore`: what the sidecar does, in the form etcd-backup-restore logs it: logrus' text formatter
//!   (`time="…" level=info msg="…" actor=…`, etcd-backup-restore v0.41.2 uses `logrus.New()` with its default
//!   formatter), with the messages of its `pkg/snapshot/snapshotter`, `pkg/member` and `pkg/server`.
//!
//! A recreated pod is a new pod: its containers' logs start empty, as the kubelet removes a deleted pod's logs.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Weak};

use kube_sim::{ContainerLog, LogCursor, LogLine, PodLogSource};

use super::Ctx;

/// The name of the etcd container of an etcd-druid pod.
pub const ETCD_CONTAINER: &str = "etcd";
/// The name of the backup-restore sidecar container.
pub const BACKUP_RESTORE_CONTAINER: &str = "backup-restore";

/// Lines the sidecar's log keeps (a kubelet rotates container logs; the oldest lines go first).
const SIDECAR_LINES: usize = 20_000;

static INSTANCES: AtomicU64 = AtomicU64::new(1);

fn next_instance() -> u64 {
    INSTANCES.fetch_add(1, Ordering::Relaxed)
}

/// One run of the etcd container: where its output starts in the log file.
#[derive(Debug, Clone, Copy)]
struct EtcdRun {
    instance: u64,
    offset: u64,
    started: jiff::Timestamp,
}

/// The logs of one pod's containers.
#[derive(Debug)]
pub struct PodLogs {
    pod: String,
    etcd_file: PathBuf,
    etcd_runs: Mutex<Vec<EtcdRun>>,
    sidecar_instance: u64,
    sidecar: Mutex<SidecarLog>,
}

/// The sidecar's lines, the newest [`SIDECAR_LINES`], and how many were ever written (a follower's cursor).
#[derive(Debug, Default)]
struct SidecarLog {
    lines: std::collections::VecDeque<LogLine>,
    written: u64,
}

/// A logrus level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// `level=info`.
    Info,
    /// `level=warning`.
    Warning,
    /// `level=error`.
    Error,
}

impl PodLogs {
    /// The logs of pod `pod`, whose etcd writes to `etcd_file`.
    pub fn new(pod: &str, etcd_file: PathBuf) -> PodLogs {
        PodLogs {
            pod: pod.into(),
            etcd_file,
            etcd_runs: Mutex::default(),
            sidecar_instance: next_instance(),
            sidecar: Mutex::default(),
        }
    }

    /// Marks the start of a run of the etcd container (call right before the process starts).
    pub fn etcd_starting(&self) {
        let offset = std::fs::metadata(&self.etcd_file).map(|m| m.len()).unwrap_or(0);
        let run = EtcdRun { instance: next_instance(), offset, started: jiff::Timestamp::now() };
        self.etcd_runs.lock().expect("runs").push(run);
    }

    /// Appends a line to the sidecar's log, as logrus' text formatter writes it.
    pub fn sidecar(&self, level: Level, actor: Option<&str>, msg: &str) {
        let time = jiff::Timestamp::now();
        let text = logrus_text(time, level, msg, actor);
        let mut log = self.sidecar.lock().expect("sidecar log");
        if log.lines.len() >= SIDECAR_LINES {
            log.lines.pop_front();
        }
        log.lines.push_back(LogLine { time, text });
        log.written += 1;
    }

    fn read_etcd(
        &self,
        previous: bool,
        running: bool,
        waiting: Option<String>,
        from: Option<LogCursor>,
    ) -> Result<ContainerLog, String> {
        let runs = self.etcd_runs.lock().expect("runs").clone();
        // kubelet `pkg/kubelet/kubelet_pods.go` `validateContainerLogStatus`: `previous` is the last terminated
        // run; without it, the running one, else the last terminated one.
        let index = match (previous, running) {
            (true, true) if runs.len() >= 2 => runs.len() - 2,
            (true, false) if !runs.is_empty() => runs.len() - 1,
            (true, _) => {
                return Err(format!(
                    "previous terminated container \"{ETCD_CONTAINER}\" in pod \"{}\" not found",
                    self.pod
                ));
            }
            (false, _) if !runs.is_empty() => runs.len() - 1,
            (false, _) => {
                let reason = waiting.unwrap_or_else(|| "PodInitializing".into());
                return Err(format!(
                    "container \"{ETCD_CONTAINER}\" in pod \"{}\" is waiting to start: {reason}",
                    self.pod
                ));
            }
        };
        let run = runs[index];
        let end = runs.get(index + 1).map(|r| r.offset);
        let instance_running = running && index + 1 == runs.len() && !previous;
        let start = match from {
            Some(c) if c.instance == run.instance => c.offset,
            // The run followed is over: nothing more from it.
            Some(c) => return Ok(ContainerLog { lines: vec![], next: c, running: false }),
            None => run.offset,
        };
        let (lines, next) = read_lines(&self.etcd_file, start, end, run.started).map_err(|e| e.to_string())?;
        Ok(ContainerLog { lines, next: LogCursor { instance: run.instance, offset: next }, running: instance_running })
    }

    fn read_sidecar(&self, previous: bool, from: Option<LogCursor>) -> Result<ContainerLog, String> {
        if previous {
            // The sidecar of a landscape pod never restarts.
            return Err(format!(
                "previous terminated container \"{BACKUP_RESTORE_CONTAINER}\" in pod \"{}\" not found",
                self.pod
            ));
        }
        let log = self.sidecar.lock().expect("sidecar log");
        // The cursor counts lines ever written; lines rotated out are gone, as after a kubelet's log rotation.
        let seen = from.map_or(0, |c| c.offset);
        let first = log.written - log.lines.len() as u64;
        let lines: Vec<LogLine> = log.lines.iter().skip(seen.saturating_sub(first) as usize).cloned().collect();
        Ok(ContainerLog {
            lines,
            next: LogCursor { instance: self.sidecar_instance, offset: log.written },
            running: true,
        })
    }
}

/// Reads complete lines of `file` from byte `start` to `end` (or its end): the lines with their times and the
/// offset after the last complete line.
fn read_lines(
    file: &std::path::Path,
    start: u64,
    end: Option<u64>,
    started: jiff::Timestamp,
) -> std::io::Result<(Vec<LogLine>, u64)> {
    let mut f = match std::fs::File::open(file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((vec![], start)),
        Err(e) => return Err(e),
    };
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::new();
    match end {
        Some(end) => {
            f.take(end.saturating_sub(start)).read_to_end(&mut buf)?;
        }
        None => {
            f.read_to_end(&mut buf)?;
        }
    }
    // A run that ended keeps its last line even without a newline; a running one's partial line waits.
    let complete = match (end, buf.iter().rposition(|b| *b == b'\n')) {
        (Some(_), _) => buf.len(),
        (None, Some(i)) => i + 1,
        (None, None) => 0,
    };
    let mut time = started;
    let mut lines = Vec::new();
    for raw in buf[..complete].split(|b| *b == b'\n') {
        if raw.is_empty() {
            continue;
        }
        let text = String::from_utf8_lossy(raw).into_owned();
        if let Some(t) = line_time(&text) {
            time = t;
        }
        lines.push(LogLine { time, text });
    }
    Ok((lines, start + complete as u64))
}

/// etcd's time of a line: `ts` of a zap JSON line, or the leading `YYYY-MM-DD HH:MM:SS.ffffff` of capnslog.
pub fn line_time(line: &str) -> Option<jiff::Timestamp> {
    if line.starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        return v.get("ts")?.as_str()?.parse().ok();
    }
    let head = line.get(..26)?;
    let civil: jiff::civil::DateTime = head.replacen(' ', "T", 1).parse().ok()?;
    civil.to_zoned(jiff::tz::TimeZone::UTC).ok().map(|z| z.timestamp())
}

/// logrus `TextFormatter` without colors: `time`, `level`, `msg`, then the fields sorted by key; a value is
/// quoted (`%q`) unless it only has the characters logrus leaves bare.
fn logrus_text(time: jiff::Timestamp, level: Level, msg: &str, actor: Option<&str>) -> String {
    fn value(v: &str) -> String {
        let bare = !v.is_empty()
            && v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '/' | '@' | '^' | '+'));
        if bare { v.to_string() } else { serde_json::Value::String(v.into()).to_string() }
    }
    let level = match level {
        Level::Info => "info",
        Level::Warning => "warning",
        Level::Error => "error",
    };
    let mut s =
        format!("time={} level={level} msg={}", value(&time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()), value(msg));
    if let Some(a) = actor {
        s.push_str(&format!(" actor={}", value(a)));
    }
    s
}

/// The landscape's kubelet log source: the containers of the member pods it runs.
pub struct LandscapeLogs {
    pub(crate) ctx: Weak<Ctx>,
}

impl PodLogSource for LandscapeLogs {
    fn read(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
        from: Option<LogCursor>,
    ) -> Option<Result<ContainerLog, String>> {
        let ctx = self.ctx.upgrade()?;
        let rt = ctx.members.lock().expect("members").get(&(namespace.to_string(), pod.to_string())).cloned()?;
        let logs = rt.logs();
        Some(match container {
            ETCD_CONTAINER => {
                let view = rt.view();
                logs.read_etcd(previous, rt.process().is_running(), view.waiting.map(|w| w.0), from)
            }
            BACKUP_RESTORE_CONTAINER => logs.read_sidecar(previous, from),
            other => Err(format!("container \"{other}\" in pod \"{pod}\" is not available")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_lines_carry_etcds_own_time() {
        let t = line_time(r#"{"level":"info","ts":"2026-11-28T06:35:12.874Z","msg":"x"}"#).unwrap();
        assert_eq!(t.to_string(), "2026-11-28T06:35:12.874Z");
        let t = line_time("2026-11-28 06:35:09.862171 I | etcdmain: etcd Version: 3.4.23").unwrap();
        assert_eq!(t.to_string(), "2026-11-28T06:35:09.862171Z");
        assert!(line_time("goroutine 1 [running]:").is_none());
    }

    #[test]
    fn sidecar_lines_look_like_logrus() {
        let t: jiff::Timestamp = "2026-11-28T06:35:12Z".parse().unwrap();
        assert_eq!(
            logrus_text(t, Level::Info, "Successfully saved full snapshot at: Backup-1/Full-0", Some("snapshotter")),
            "time=\"2026-11-28T06:35:12Z\" level=info msg=\"Successfully saved full snapshot at: Backup-1/Full-0\" actor=snapshotter"
        );
    }

    #[test]
    fn a_restarted_etcd_keeps_its_previous_log() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("etcd.log");
        let logs = PodLogs::new("etcd-main-0", file.clone());
        assert!(logs.read_etcd(false, false, None, None).unwrap_err().contains("is waiting to start: PodInitializing"));
        logs.etcd_starting();
        std::fs::write(&file, "{\"ts\":\"2026-11-28T06:00:00Z\",\"msg\":\"first\"}\n").unwrap();
        let cur = logs.read_etcd(false, true, None, None).unwrap();
        assert_eq!(cur.lines.len(), 1);
        assert!(logs.read_etcd(true, true, None, None).unwrap_err().starts_with("previous terminated container"));
        logs.etcd_starting();
        std::fs::write(&file, "{\"ts\":\"2026-11-28T06:00:00Z\",\"msg\":\"first\"}\n{\"ts\":\"2026-11-28T06:01:00Z\",\"msg\":\"second\"}\npartial").unwrap();
        let prev = logs.read_etcd(true, true, None, None).unwrap();
        assert_eq!(prev.lines.iter().map(|l| l.text.contains("first")).collect::<Vec<_>>(), [true]);
        assert!(!prev.running);
        let cur = logs.read_etcd(false, true, None, None).unwrap();
        assert_eq!(cur.lines.len(), 1, "the partial line waits for its newline");
        assert!(cur.lines[0].text.contains("second"));
        let more = logs.read_etcd(false, true, None, Some(cur.next)).unwrap();
        assert!(more.lines.is_empty() && more.running);
    }
}
