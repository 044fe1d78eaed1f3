//! `demo`: a whole rehearsal of the worst day, end to end, on a throw-away playground with real etcd (simulated
//! members without an etcd binary or with `--simulated-members`): write keys, take a full snapshot, write more,
//! destroy a majority of the members (permanent quorum loss), run the quorum-loss-recovery runbook with `--yes`,
//! check which keys survived, tear down, print a timeline. The plan is printed once, each step's result once
//! (the runbook's own plan only with `--show-plan`), every line fits the terminal's width.
//!
//! `--scenario space` rehearses the other bad day instead: the database hits its quota (NOSPACE), writes fail
//! while etcd-druid stays green, the space-recovery runbook frees it, writes work again.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use druidctl::runbook::catalog::{QUORUM_LOSS_RECOVERY, SPACE_RECOVERY};
use druidctl::runbook::engine::{Outcome, RunOptions};
use landscape::playground::BreakTarget;
use landscape::{BreakKind, Playground, PlaygroundOptions};
use tokio_util::sync::CancellationToken;

use super::Context;
use super::runbook::{CliOperator, human_ms};

/// Arguments of `demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Keys written before the snapshot.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub keys_before: u32,
    /// Keys written after the snapshot (lost by the recovery).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub keys_after: u32,
    /// Keep the state directory (logs, volumes, backups) instead of deleting it.
    #[arg(long)]
    pub keep: bool,
    /// Run simulated etcd members even when an etcd binary is installed (without one they are simulated anyway).
    #[arg(long)]
    pub simulated_members: bool,
    /// Also print the runbook's whole plan (every step with its kubectl equivalents) before it runs.
    #[arg(long)]
    pub show_plan: bool,
    /// Which bad day: permanent quorum loss and its recovery, or a database that hit its quota (NOSPACE).
    #[arg(long, value_enum, default_value_t = Scenario::QuorumLoss)]
    pub scenario: Scenario,
}

/// The rehearsals `demo` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// A majority of members loses its data; recovered from the backup (quorum-loss-recovery).
    QuorumLoss,
    /// The database reaches its quota, etcd raises NOSPACE; freed by space-recovery.
    Space,
}

/// What the demo prints: every line shortened to the terminal's width, steps timed. When stdout is closed
/// (`druidctl demo | head -3`), the demo still runs to its end, so that it tears its playground down, without
/// a word; it then exits 141 (docs/exit-codes.md).
struct Out {
    started: Instant,
    width: usize,
    entries: Vec<(String, Duration)>,
    /// The first failure to write to stdout; nothing more is written after it.
    failed: std::cell::RefCell<Option<std::io::Error>>,
}

/// Indent of the lines under a step.
const UNDER: &str = "         ";

impl Out {
    fn say(&self, line: &str) {
        use std::io::Write;
        let mut failed = self.failed.borrow_mut();
        if failed.is_none()
            && let Err(e) = writeln!(std::io::stdout().lock(), "{}", druidctl::output::fit(line, self.width))
        {
            *failed = Some(e);
        }
    }
    /// An empty line.
    fn blank(&self) {
        self.say("");
    }
    /// A result under the current step.
    fn result(&self, line: &str) {
        self.say(&format!("{UNDER}{line}"));
    }
    fn begin(&self, n: usize, what: &str) -> Instant {
        self.say(&format!("[{:>6}] {n}. {what}", human_ms(self.started.elapsed().as_millis() as u64)));
        Instant::now()
    }
    fn end(&mut self, what: &str, since: Instant) {
        self.entries.push((what.to_string(), since.elapsed()));
    }
}

/// Runs the demo.
pub fn exec(_ctx: &mut Context, args: DemoArgs) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!(
        "druidctl-demo-{}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..6]
    ));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut out = Out {
        started: Instant::now(),
        width: druidctl::output::line_width(),
        entries: Vec::new(),
        failed: Default::default(),
    };
    let result = rt.block_on(async {
        let stop = CancellationToken::new();
        let demo = demo(&dir, &args, &mut out, stop.clone());
        tokio::select! {
            r = demo => r,
            _ = tokio::signal::ctrl_c() => {
                stop.cancel();
                Err(super::Interrupted::Plain.into())
            }
        }
    });
    // Every etcd process is gone with the playground (down, or its Drop on error); then the files.
    drop(rt);
    if !args.keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if result.is_err() && args.keep {
        out.say(&format!("state kept in {}", dir.display()));
    }
    if result.is_ok() {
        out.result(&if args.keep {
            format!("✓ stopped; logs, volumes and backups kept in {}", dir.display())
        } else {
            "✓ stopped; the playground's directory is deleted".to_string()
        });
        out.blank();
        out.say("Timeline:");
        let width = out.entries.iter().map(|(w, _)| w.chars().count()).max().unwrap_or(10);
        for (what, d) in &out.entries {
            out.say(&format!("  {what:<width$}  {:>8}", human_ms(d.as_millis() as u64)));
        }
        out.say(&format!("  {:<width$}  {:>8}", "total", human_ms(out.started.elapsed().as_millis() as u64)));
    }
    result?;
    match out.failed.into_inner() {
        Some(e) => Err(druidctl::output::OutputError::Io(e).into()),
        None => Ok(()),
    }
}

/// The demo's steps, printed once before they run.
fn plan(args: &DemoArgs) -> Vec<String> {
    let tear_down =
        format!("tear down: stop every process{}", if args.keep { "" } else { ", delete the playground's directory" });
    if args.scenario == Scenario::Space {
        return vec![
            "start a playground: API server, 3 etcd members, backups to a local bucket".into(),
            "fill the database: spec.etcd.quota 16Mi, then writes until etcd raises NOSPACE".into(),
            "watch writes fail (reads work, etcd-druid stays green)".into(),
            "recover with the runbook: druidctl runbook space-recovery --yes".into(),
            "write again, and show how much space came back on every member".into(),
            tear_down,
        ];
    }
    vec![
        "start a playground: API server, 3 etcd members, backups to a local bucket".into(),
        format!("write {} keys (/demo/before/*), then take a full snapshot", args.keys_before),
        format!("write {} more keys (/demo/after/*): they are in no backup", args.keys_after),
        "destroy a majority: 2 of 3 members lose their process and data".into(),
        "recover with the runbook: druidctl runbook quorum-loss-recovery --yes".into(),
        "check on every member which keys survived".into(),
        tear_down,
    ]
}

async fn demo(dir: &PathBuf, args: &DemoArgs, out: &mut Out, stop: CancellationToken) -> anyhow::Result<()> {
    out.say(match args.scenario {
        Scenario::QuorumLoss => "druidctl demo: permanent quorum loss and its recovery, on a local playground",
        Scenario::Space => "druidctl demo: a database out of space (NOSPACE) and its recovery, on a local playground",
    });
    out.blank();
    out.say("Plan:");
    let steps = plan(args);
    for (i, s) in steps.iter().enumerate() {
        out.say(&format!("  {}. {s}", i + 1));
    }
    out.blank();

    let t = out.begin(1, "start the playground");
    let mut opts = PlaygroundOptions::new(dir);
    // Delta snapshots only hourly here, so the full snapshot below is the last backup before the disaster.
    opts.delta_snapshot_period = "1h".into();
    if args.simulated_members {
        opts.landscape = Some(super::playground::simulated_members(dir));
    }
    let pg = super::playground::start(opts).await?;
    let result = match ready(&pg, out, t).await {
        Ok((ns, etcd)) => match args.scenario {
            Scenario::QuorumLoss => run_quorum_loss(&pg, &ns, &etcd, out, args, stop).await,
            Scenario::Space => run_space(&pg, &ns, &etcd, out, args, stop).await,
        },
        Err(e) => Err(e),
    };
    let t = out.begin(steps.len(), "tear down");
    let down = pg.down().await;
    out.end("tear down", t);
    down?;
    result
}

/// The answer of the backup sidecar's `/snapshot/full` as a sentence: what it holds and where it went.
pub fn snapshot_sentence(answer: &str) -> Vec<String> {
    let v: serde_json::Value = match serde_json::from_str(answer.trim()) {
        Ok(v) => v,
        Err(_) => return vec![format!("✓ full snapshot taken: {}", answer.trim())],
    };
    let kind = v["kind"].as_str().unwrap_or("Full").to_lowercase();
    let mut lines = vec![match v["lastRevision"].as_i64() {
        Some(rev) => format!("✓ {kind} snapshot taken, up to revision {rev}"),
        None => format!("✓ {kind} snapshot taken"),
    }];
    if let Some(name) = v["snapName"].as_str() {
        lines.push(format!("  stored in the backup bucket as {name}"));
    }
    lines
}

/// How long writing or reading the demo's keys may take (a few dozen keys on loopback take milliseconds).
const KEYS: Duration = Duration::from_secs(30);
/// How long the sidecar's full snapshot may take through the API server's service proxy.
const SNAPSHOT: Duration = Duration::from_secs(60);

/// Runs `fut`, or fails with one sentence naming `what` when it has not finished within `limit`: the demo never
/// waits without saying so.
async fn within<T>(
    what: &str,
    limit: Duration,
    fut: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| anyhow::anyhow!("{what} did not finish within {}s", limit.as_secs()))?
}

/// What the playground's etcd runs as, under the first step.
fn say_backend(pg: &Playground, out: &Out) {
    match pg.etcd_backend() {
        landscape::etcd::EtcdBackend::Real(b) => {
            out.result(&format!("  etcd members: real etcd processes ({})", b.etcd.display()))
        }
        landscape::etcd::EtcdBackend::Simulated { reason } => {
            out.result("  etcd members: simulated etcd members, not real etcd");
            out.result(&format!("  ({reason})"));
        }
    }
}

/// Each member's database size (bytes), by ordinal.
async fn db_sizes(pg: &Playground, ns: &str) -> anyhow::Result<Vec<i64>> {
    let mut sizes = Vec::new();
    for m in 0..3 {
        let c = pg.etcd_client(ns, m).ok_or_else(|| anyhow::anyhow!("member {m} does not run"))?;
        sizes.push(
            within(&format!("reading the status of member {m}"), KEYS, async { Ok(c.status().await?.db_size) }).await?,
        );
    }
    Ok(sizes)
}

/// Demo step `n`: runs `runbook` on the demo's Etcd in-process with `--yes`, its steps indented under the demo's
/// step, and says how long it took and how much of that was spent waiting for `waited_on`.
#[allow(clippy::too_many_arguments)]
async fn recover(
    pg: &Playground,
    out: &mut Out,
    n: usize,
    (ns, etcd): (&str, &str),
    runbook: &druidctl::runbook::Runbook,
    waited_on: &str,
    show_plan: bool,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let t = out.begin(n, &format!("recover: druidctl runbook {} --yes", runbook.name));
    let mut o = RunOptions::new(ns, etcd);
    o.yes = true;
    o.resume_command = format!("druidctl runbook {} -n {ns} {etcd} --resume --yes", runbook.name);
    let mut op = CliOperator::new(druidctl::output::OutputFormat::Table, false);
    op.indent = UNDER;
    op.compact = true;
    op.show_plan = show_plan;
    let outcome = druidctl::runbook::run(&pg.client(), runbook, &o, &op, stop).await;
    op.finish();
    let summary = match outcome {
        Ok(Outcome::Completed(s)) => s,
        Ok(_) => anyhow::bail!("the recovery was interrupted"),
        Err(e) => return Err(super::runbook::to_cli_error(e)),
    };
    out.end("recover (runbook)", t);
    out.result(&format!(
        "✓ recovered in {} ({} of it waiting for {waited_on})",
        human_ms(summary.total_ms),
        human_ms(summary.waited_ms),
    ));
    Ok(())
}

/// The opening both scenarios share: the playground's Etcd Ready with its members, and what etcd runs as.
/// Returns the Etcd's namespace and name.
async fn ready(pg: &Playground, out: &mut Out, t: Instant) -> anyhow::Result<(String, String)> {
    pg.wait_ready(Duration::from_secs(60)).await?;
    out.end("start the playground", t);
    let ns = pg.namespaces()[0].clone();
    let etcd = pg.etcd_name().to_string();
    out.result(&format!("✓ etcd {ns}/{etcd} is Ready with 3 members"));
    say_backend(pg, out);
    Ok((ns, etcd))
}

/// The space scenario: fill, fail, recover, write again.
async fn run_space(
    pg: &Playground,
    ns: &str,
    etcd: &str,
    out: &mut Out,
    args: &DemoArgs,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    use druidctl::tasks::space_recovery::bytes;
    let t = out.begin(2, "fill the database until etcd raises NOSPACE");
    within("filling the database", Duration::from_secs(240), async {
        Ok(pg.break_(BreakKind::SpaceExceeded, &BreakTarget::default()).await?)
    })
    .await?;
    out.end("fill the database", t);
    let full = db_sizes(pg, ns).await?;
    let sizes: Vec<String> = full.iter().map(|b| bytes(*b)).collect();
    out.result(&format!(
        "✓ spec.etcd.quota is {}; the members restarted with it",
        landscape::space::SPACE_EXCEEDED_QUOTA
    ));
    out.result(&format!("  100 KiB values over 8 keys filled the databases ({})", sizes.join(", ")));
    out.result("  etcd raised NOSPACE");

    let t = out.begin(3, "write a key");
    let client = pg.etcd_client(ns, 0).ok_or_else(|| anyhow::anyhow!("member 0 does not run"))?;
    let refused = within("the write", KEYS, async { Ok(client.put("/demo/while-full", "x").await) }).await?;
    let Err(refused) = refused else { anyhow::bail!("etcd accepted a write although NOSPACE is raised") };
    let readable =
        within("reading the keys", KEYS, async { Ok(client.get_prefix(landscape::space::FILL_PREFIX).await?.len()) })
            .await?;
    let ready = pg.etcd_ready(ns).await.map(|(s, r)| format!("Ready={s} ({r})")).unwrap_or_else(|| "no Ready".into());
    out.end("writes fail", t);
    let refused = refused.to_string();
    // The member's own words, without the endpoint and path before them.
    let why = refused.find("etcdserver: ").map(|i| &refused[i..]).unwrap_or(&refused);
    out.result(&format!("✗ the write is refused: {why}"));
    out.result(&format!("  reads still work ({readable} keys read); etcd-druid reports {ready}"));

    recover(pg, out, 4, (ns, etcd), &SPACE_RECOVERY, "etcd", args.show_plan, stop).await?;

    let t = out.begin(5, "write again, and measure the space that came back");
    within("the write", KEYS, async { Ok(client.put("/demo/after-recovery", "written").await?) }).await?;
    let now = db_sizes(pg, ns).await?;
    out.end("write again", t);
    out.result("✓ the write succeeded");
    for (m, (before, after)) in full.iter().zip(&now).enumerate() {
        out.result(&format!("  {etcd}-{m}: {} → {} ({} freed)", bytes(*before), bytes(*after), bytes(before - after)));
    }
    Ok(())
}

/// The quorum-loss scenario: keys, snapshot, more keys, a majority lost, recovery, what survived.
async fn run_quorum_loss(
    pg: &Playground,
    ns: &str,
    etcd: &str,
    out: &mut Out,
    args: &DemoArgs,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let client = pg.etcd_client(ns, 0).ok_or_else(|| anyhow::anyhow!("member 0 does not run"))?;

    let t = out.begin(2, &format!("write {} keys, then take a full snapshot", args.keys_before));
    within("writing the keys", KEYS, async {
        for i in 0..args.keys_before {
            client.put(format!("/demo/before/{i:03}"), format!("value-{i}")).await?;
        }
        anyhow::Ok(())
    })
    .await?;
    // Through the API server's service proxy, with the `https:` prefix when the sidecar serves TLS.
    let etcd_obj: druidctl::api::Etcd = kube::Api::namespaced(pg.client(), ns).get(etcd).await?;
    let path =
        druidctl::tasks::sidecar::proxy_path(&etcd_obj, &druidctl::tasks::sidecar::Target::Leader, "snapshot/full");
    let req = http::Request::get(path).body(Vec::new())?;
    let answer = within("the full snapshot", SNAPSHOT, async {
        pg.client().request_text(req).await.map_err(|e| anyhow::anyhow!("full snapshot: {e}"))
    })
    .await?;
    out.end("write keys, full snapshot", t);
    for l in snapshot_sentence(&answer) {
        out.result(&l);
    }

    let t = out.begin(3, &format!("write {} more keys, in no backup", args.keys_after));
    // These keys must stay out of every backup, whatever the sidecar's schedule does meanwhile (a leading
    // sidecar takes its first delta a tick after its first full snapshot, however long the delta period, and a
    // newly elected leader snapshots at once): its snapshots fail from here until quorum is lost, when no
    // sidecar leads and none is taken. The recovery then reads the store as usual.
    let landscape = pg.landscape(ns).ok_or_else(|| anyhow::anyhow!("the playground does not run {ns}"))?;
    landscape.set_backup_failing(ns, etcd, true);
    within("writing the keys", KEYS, async {
        for i in 0..args.keys_after {
            client.put(format!("/demo/after/{i:03}"), format!("value-{i}")).await?;
        }
        anyhow::Ok(())
    })
    .await?;
    out.end("write keys after the snapshot", t);
    out.result(&format!("✓ {} keys written after the snapshot", args.keys_after));

    let t = out.begin(4, "destroy a majority of the members");
    pg.break_(BreakKind::QuorumLost, &BreakTarget::default()).await?;
    pg.wait_ready_reason(ns, "QuorumLost", Duration::from_secs(30)).await?;
    landscape.set_backup_failing(ns, etcd, false);
    out.end("destroy a majority", t);
    out.result("✓ 2 of 3 members lost their process and data: quorum is lost");
    out.result("  etcd-druid reports Ready=False (QuorumLost)");

    recover(pg, out, 5, (ns, etcd), &QUORUM_LOSS_RECOVERY, "etcd, pods and druid", args.show_plan, stop).await?;

    let t = out.begin(6, "check the keys on every member");
    let mut survived = 0;
    let mut lost = 0;
    for m in 0..3 {
        let c = pg.etcd_client(ns, m).ok_or_else(|| anyhow::anyhow!("member {m} does not run"))?;
        let (before, after) = within(&format!("reading the keys of member {m}"), KEYS, async {
            anyhow::Ok((c.get_prefix("/demo/before/").await?.len(), c.get_prefix("/demo/after/").await?.len()))
        })
        .await?;
        if m == 0 {
            survived = before;
            lost = (args.keys_after as usize).saturating_sub(after);
        }
        anyhow::ensure!(
            before == args.keys_before as usize,
            "member {m} has {before} of the {} keys written before the snapshot",
            args.keys_before
        );
        anyhow::ensure!(after == 0, "member {m} still has {after} keys written after the snapshot");
    }
    out.end("check the keys", t);
    out.result(&format!("✓ survived: {survived}/{} keys written before the snapshot", args.keys_before));
    out.result(&format!("  lost:     {lost}/{} keys written after it, as expected", args.keys_after));
    Ok(())
}
