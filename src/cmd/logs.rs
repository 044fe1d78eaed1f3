//! `logs ETCD [MEMBER…]`: the logs of every member's etcd and backup-restore containers in one stream.

use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
use clap_complete::engine::ArgValueCompleter;
use druidctl::kube::target::{Targets, WhenUnnamed};
use druidctl::logs::{self, Containers, Entry, Filter, FollowEvent, Level, LogRequest};
use druidctl::output::OutputFormat;

use super::{Context, completion, parse_duration};

/// Arguments of `logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The Etcd: NAME or NAMESPACE/NAME.
    #[arg(value_name = "ETCD", value_parser = super::parse_etcd_ref, add = ArgValueCompleter::new(completion::etcd_names))]
    pub etcd: String,
    /// Members to show (pod names such as etcd-main-1, or ordinals); default: every member.
    #[arg(value_name = "MEMBER", add = ArgValueCompleter::new(completion::members))]
    pub members: Vec<String>,
    /// Which containers.
    #[arg(short = 'c', long, value_enum, default_value_t, value_name = "CONTAINER")]
    pub container: Containers,
    /// Only lines newer than this, e.g. 10m or 2h.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub since: Option<Duration>,
    /// Only the last N lines of each container.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(0..))]
    pub tail: Option<i64>,
    /// Show the kubelet's time of each line.
    #[arg(long)]
    pub timestamps: bool,
    /// Keep following; members whose pod is recreated are picked up again. Ctrl-C ends.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// The last terminated run of each container (before its restart).
    #[arg(short = 'p', long, conflicts_with = "follow")]
    pub previous: bool,
    /// Only lines matching this regular expression.
    #[arg(long, value_name = "REGEX", value_parser = parse_regex)]
    pub grep: Option<regex::Regex>,
    /// Only lines of this level or above (lines without a level are left out).
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub level: Option<Level>,
    /// Lines as the containers wrote them (etcd's JSON, logrus' key=value), not as time, level and message.
    #[arg(long)]
    pub raw: bool,
}

fn parse_regex(s: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(s).map_err(|e| e.to_string())
}

/// Colors per member on a terminal (ANSI foreground), as stern cycles them.
const PALETTE: &[&str] = &["36", "33", "35", "32", "34", "31", "96", "93"];

struct LineFormat {
    members: Vec<String>,
    width: usize,
    color: bool,
    timestamps: bool,
    raw: bool,
}

impl LineFormat {
    fn line(&self, e: &Entry) -> String {
        let prefix = format!("{} {}", e.member, e.container);
        let prefix = format!("{prefix:<w$}", w = self.width);
        let prefix = match (self.color, self.members.iter().position(|m| *m == e.member)) {
            (true, Some(i)) => format!("\x1b[{}m{prefix}\x1b[0m", PALETTE[i % PALETTE.len()]),
            _ => prefix,
        };
        let mut out = format!("{prefix} │ ");
        if self.timestamps
            && let Some(t) = e.time
        {
            out.push_str(&format!("{t} "));
        }
        if self.raw || (e.parsed.time.is_none() && e.parsed.level.is_none()) {
            out.push_str(&e.raw);
        } else {
            if let Some(t) = &e.parsed.time {
                out.push_str(t);
                out.push(' ');
            }
            if let Some(l) = e.parsed.level {
                out.push_str(&format!("{:<5} ", l.as_str()));
            }
            out.push_str(&e.parsed.message);
        }
        out
    }
}

/// Runs `logs`.
pub async fn exec(ctx: &mut Context, args: LogsArgs) -> anyhow::Result<()> {
    if !matches!(ctx.printer.format(), OutputFormat::Table | OutputFormat::Wide | OutputFormat::Jsonl) {
        return Err(
            druidctl::kube::UsageError("logs prints lines (or one JSON object per line with -o jsonl)".into()).into()
        );
    }
    let names = vec![args.etcd.clone()];
    ctx.check_targets(&names, WhenUnnamed::RequireOneName)?;
    let cluster = ctx.connect().await?;
    let Targets::Named(keys) = ctx.targets(&cluster, &names, WhenUnnamed::RequireOneName)? else {
        unreachable!("RequireOneName yields a name")
    };
    let etcd = druidctl::kube::etcds::get(&cluster.client, &keys[0]).await?;
    let members = logs::members(&etcd, &args.members)?;
    let req = LogRequest {
        namespace: keys[0].namespace.clone(),
        members: members.clone(),
        containers: args.container.names(),
        since: args.since,
        tail: args.tail,
        previous: args.previous,
    };
    let filter = Filter { grep: args.grep.clone(), min_level: args.level };
    let width =
        members.iter().flat_map(|m| req.containers.iter().map(move |c| m.len() + 1 + c.len())).max().unwrap_or(0);
    let format = LineFormat { members, width, color: ctx.printer.color(), timestamps: args.timestamps, raw: args.raw };
    let jsonl = ctx.printer.format() == OutputFormat::Jsonl;
    let emit = |ctx: &mut Context, e: &Entry| -> anyhow::Result<()> {
        if !filter.keeps(e) {
            return Ok(());
        }
        if jsonl {
            ctx.printer.jsonl(&e.json(args.raw))?;
        } else {
            ctx.printer.text(&format!("{}\n", format.line(e)))?;
        }
        Ok(())
    };
    if !args.follow {
        let collected = logs::collect(&cluster.client, &req).await?;
        for u in &collected.unreadable {
            eprintln!("{} {}: {}", u.member, u.container, u.reason);
        }
        for e in &collected.entries {
            emit(ctx, e)?;
        }
        return Ok(());
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
    let client = cluster.client.clone();
    let follower = tokio::spawn(async move { logs::follow(&client, &req, tx).await });
    let stderr_tty = std::io::stderr().is_terminal();
    while let Some(ev) = rx.recv().await {
        match ev {
            FollowEvent::Line(e) => emit(ctx, &e)?,
            FollowEvent::Notice(n) if stderr_tty && ctx.printer.color() => eprintln!("\x1b[2m{n}\x1b[0m"),
            FollowEvent::Notice(n) => eprintln!("{n}"),
        }
    }
    follower.await??;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_prefixed_and_read_as_time_level_message() {
        let f =
            LineFormat { members: vec!["etcd-main-0".into()], width: 16, color: false, timestamps: false, raw: false };
        let e = Entry::from_line(
            "etcd-main-0",
            "etcd",
            r#"2026-11-28T06:35:12.874Z {"level":"warn","ts":"2026-11-28T06:35:12.874Z","caller":"x.go:1","msg":"slow fdatasync"}"#,
        );
        assert_eq!(f.line(&e), "etcd-main-0 etcd │ 2026-11-28T06:35:12.874Z WARN  slow fdatasync");
        let raw = LineFormat { raw: true, ..f };
        assert!(raw.line(&e).ends_with(r#""msg":"slow fdatasync"}"#));
    }
}
