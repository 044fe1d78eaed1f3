//! One log line of an etcd pod's container, parsed: the kubelet's time prefix, then etcd's zap JSON
//! (`{"level":"info","ts":"…","msg":"…",…}`), etcd 3.4's capnslog text (`2024-01-01 00:00:00.000000 I | pkg: msg`)
//! or etcd-backup-restore's logrus text (`time="…" level=info msg="…" actor=…`).

use serde::Serialize;

/// Severity, ordered; etcd's zap and logrus names both map here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// `debug` (and logrus `trace`).
    Debug,
    /// `info`.
    Info,
    /// `warn` / `warning`.
    Warn,
    /// `error`.
    Error,
    /// `fatal`, `panic`, `dpanic`.
    Fatal,
}

impl Level {
    /// Reads a level as zap, logrus or capnslog (one letter) spell it.
    pub fn parse(s: &str) -> Option<Level> {
        Some(match s.to_ascii_lowercase().as_str() {
            "debug" | "trace" | "d" => Level::Debug,
            "info" | "i" | "n" => Level::Info,
            "warn" | "warning" | "w" => Level::Warn,
            "error" | "e" => Level::Error,
            "fatal" | "panic" | "dpanic" | "c" => Level::Fatal,
            _ => return None,
        })
    }

    /// Upper-case name, as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
            Level::Fatal => "FATAL",
        }
    }
}

/// What a line says once its format is known.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    /// The component's own time of the line, as written.
    pub time: Option<String>,
    /// Its level.
    pub level: Option<Level>,
    /// The message, with the remaining structured fields after it (`key=value`).
    pub message: String,
}

/// Splits the kubelet's `timestamps=true` prefix (RFC 3339 with nanoseconds, one space) off a line.
pub fn split_kubelet_time(line: &str) -> (Option<jiff::Timestamp>, &str) {
    match line.split_once(' ') {
        Some((head, rest)) => match head.parse::<jiff::Timestamp>() {
            Ok(t) => (Some(t), rest),
            Err(_) => (None, line),
        },
        None => (line.parse::<jiff::Timestamp>().ok(), ""),
    }
}

/// Parses a container's line (without the kubelet's prefix); a line of no known format is its own message.
pub fn parse(line: &str) -> Parsed {
    if line.starts_with('{')
        && let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(line)
    {
        return from_zap(map);
    }
    if let Some(p) = from_logrus(line) {
        return p;
    }
    if let Some(p) = from_capnslog(line) {
        return p;
    }
    Parsed { time: None, level: None, message: line.to_string() }
}

fn from_zap(mut map: serde_json::Map<String, serde_json::Value>) -> Parsed {
    let take = |map: &mut serde_json::Map<String, serde_json::Value>, k: &str| -> Option<String> {
        map.remove(k).map(|v| match v {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        })
    };
    let time = take(&mut map, "ts");
    let level = take(&mut map, "level").and_then(|l| Level::parse(&l));
    let mut message = take(&mut map, "msg").unwrap_or_default();
    // Where the line comes from says little to an operator; the other fields are the facts.
    map.remove("caller");
    for (k, v) in map {
        let v = match v {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        };
        message.push_str(&format!(" {k}={v}"));
    }
    Parsed { time, level, message }
}

/// logrus' text formatter: `key=value` pairs, values bare or Go-quoted.
fn from_logrus(line: &str) -> Option<Parsed> {
    if !line.starts_with("time=") {
        return None;
    }
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut rest = line;
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            let mut end = None;
            let mut escaped = false;
            for (i, c) in quoted.char_indices() {
                match c {
                    '\\' if !escaped => escaped = true,
                    '"' if !escaped => {
                        end = Some(i);
                        break;
                    }
                    _ => escaped = false,
                }
            }
            let end = end?;
            let raw = format!("\"{}\"", &quoted[..end]);
            let v: String = serde_json::from_str(&raw).unwrap_or_else(|_| quoted[..end].to_string());
            (v, &quoted[end + 1..])
        } else {
            match after.split_once(' ') {
                Some((v, n)) => (v.to_string(), n),
                None => (after.to_string(), ""),
            }
        };
        fields.push((key.trim().to_string(), value));
        rest = next.trim_start();
    }
    let mut parsed = Parsed::default();
    let mut extra = String::new();
    for (k, v) in fields {
        match k.as_str() {
            "time" => parsed.time = Some(v),
            "level" => parsed.level = Level::parse(&v),
            "msg" => parsed.message = v,
            _ => extra.push_str(&format!(" {k}={v}")),
        }
    }
    parsed.message.push_str(&extra);
    Some(parsed)
}

/// capnslog: `2024-01-01 00:00:00.000000 I | etcdserver: message`.
fn from_capnslog(line: &str) -> Option<Parsed> {
    let time = line.get(..26)?;
    let rest = line.get(27..)?;
    let (level, message) = rest.split_once(" | ")?;
    if time.replacen(' ', "T", 1).parse::<jiff::civil::DateTime>().is_err() {
        return None;
    }
    Some(Parsed { time: Some(time.to_string()), level: Level::parse(level.trim()), message: message.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_json_lines_become_time_level_message() {
        let p = parse(
            r#"{"level":"warn","ts":"2026-11-28T06:35:12.874Z","caller":"etcdserver/util.go:166","msg":"apply request took too long","took":"120ms"}"#,
        );
        assert_eq!(p.time.as_deref(), Some("2026-11-28T06:35:12.874Z"));
        assert_eq!(p.level, Some(Level::Warn));
        assert_eq!(p.message, "apply request took too long took=120ms");
    }

    #[test]
    fn backup_restore_logrus_lines_are_read() {
        let p = parse(
            r#"time="2026-11-28T06:35:12Z" level=info msg="Successfully saved full snapshot at: Backup-1/Full-0" actor=snapshotter"#,
        );
        assert_eq!(p.level, Some(Level::Info));
        assert_eq!(p.message, "Successfully saved full snapshot at: Backup-1/Full-0 actor=snapshotter");
        assert_eq!(p.time.as_deref(), Some("2026-11-28T06:35:12Z"));
    }

    #[test]
    fn capnslog_and_unknown_lines() {
        let p = parse("2026-11-28 06:35:09.862171 W | etcdserver: slow fdatasync");
        assert_eq!(p.level, Some(Level::Warn));
        assert_eq!(p.message, "etcdserver: slow fdatasync");
        assert_eq!(parse("goroutine 1 [running]:").message, "goroutine 1 [running]:");
    }

    #[test]
    fn the_kubelet_prefix_is_split_off() {
        let (t, rest) = split_kubelet_time("2026-11-28T06:35:12.874123456Z hello world");
        assert_eq!(t.unwrap().to_string(), "2026-11-28T06:35:12.874123456Z");
        assert_eq!(rest, "hello world");
        assert_eq!(split_kubelet_time("no time here").0, None);
    }
}
