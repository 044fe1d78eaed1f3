//! `demo`: a whole rehearsal of the worst day, end to end, on a throw-away playground with real etcd (simulated
//! members without an etcd binary or with `--simulated-members`): write
//! keys, take a full snapshot, write more, destroy a majority of the members (permanent quorum loss), run
//! the quorum-loss-recovery runbook with `--yes`, check which keys survived, print a timeline, tear down.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use druidctl::runbook::catalog::QUORUM_LOSS_RECOVERY;
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
}

struct Timeline {
    started: Instant,
    entries: Vec<(String, Duration)>,
}

impl Timeline {
    fn begin(&self, what: &str) -> Instant {
        println!("[{:>6}] {what}", human_ms(self.started.elapsed().as_millis() as u64));
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
    let result = rt.block_on(async {
        let stop = CancellationToken::new();
        let demo = demo(&dir, &args, stop.clone());
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
    } else {
        println!("state kept in {}", dir.display());
    }
    result
}

async fn demo(dir: &PathBuf, args: &DemoArgs, stop: CancellationToken) -> anyhow::Result<()> {
    let mut tl = Timeline { started: Instant::now(), entries: Vec::new() };
    println!("druidctl demo: permanent quorum loss and its recovery, on a local playground\n");

    let t = tl.begin(
        "start the playground: embedded API server + 3 etcd members (etcd-druid, StatefulSet, sidecars simulated)",
    );
    let mut opts = PlaygroundOptions::new(dir);
    // Delta snapshots only hourly here, so the full snapshot below is the last backup before the disaster.
    opts.delta_snapshot_period = "1h".into();
    if args.simulated_members {
        opts.landscape = Some(super::playground::simulated_members(dir));
    }
    let pg = super::playground::start(opts).await?;
    println!("         etcd members: {}", pg.etcd_backend().describe());
    let result = run_on(&pg, &mut tl, t, args, stop).await;
    let t = tl.begin("tear down: stop every etcd process and the API server");
    let down = pg.down().await;
    tl.end("tear down", t);
    down?;
    result?;
    println!("\nTimeline:");
    let width = tl.entries.iter().map(|(w, _)| w.chars().count()).max().unwrap_or(10);
    for (what, d) in &tl.entries {
        println!("  {what:<width$}  {:>8}", human_ms(d.as_millis() as u64));
    }
    println!("  {:<width$}  {:>8}", "total", human_ms(tl.started.elapsed().as_millis() as u64));
    Ok(())
}

async fn run_on(
    pg: &Playground,
    tl: &mut Timeline,
    t: Instant,
    args: &DemoArgs,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    pg.wait_ready(Duration::from_secs(60)).await?;
    tl.end("start the playground", t);
    let ns = pg.namespaces()[0].clone();
    let etcd = pg.etcd_name().to_string();
    let client = pg.etcd_client(&ns, 0).ok_or_else(|| anyhow::anyhow!("member 0 does not run"))?;
    println!("         etcd {ns}/{etcd} is Ready with 3 members ({})", pg.export_line());

    let t = tl.begin(&format!("write {} keys /demo/before/*", args.keys_before));
    for i in 0..args.keys_before {
        client.put(format!("/demo/before/{i:03}"), format!("value-{i}")).await?;
    }
    tl.end("write keys before the snapshot", t);

    let t = tl.begin("take a full snapshot through the backup sidecar (service proxy /snapshot/full)");
    let req = http::Request::get(format!("/api/v1/namespaces/{ns}/services/{etcd}-client:8080/proxy/snapshot/full"))
        .body(Vec::new())?;
    let answer = pg.client().request_text(req).await.map_err(|e| anyhow::anyhow!("full snapshot: {e}"))?;
    tl.end("full snapshot", t);
    println!("         snapshot: {}", answer.trim().chars().take(160).collect::<String>());

    let t = tl.begin(&format!("write {} more keys /demo/after/* (in no backup)", args.keys_after));
    for i in 0..args.keys_after {
        client.put(format!("/demo/after/{i:03}"), format!("value-{i}")).await?;
    }
    tl.end("write keys after the snapshot", t);

    let t = tl.begin("destroy a majority: 2 of 3 members lose process and data (permanent quorum loss)");
    let what = pg.break_(BreakKind::QuorumLost, &BreakTarget::default()).await?;
    pg.wait_ready_reason(&ns, "QuorumLost", Duration::from_secs(30)).await?;
    tl.end("destroy a majority", t);
    println!("         {what}; etcd Ready=False (QuorumLost)");

    let t = tl.begin(&format!("druidctl runbook quorum-loss-recovery -n {ns} {etcd} --yes"));
    let mut o = RunOptions::new(&ns, &etcd);
    o.yes = true;
    o.resume_command = format!("druidctl runbook quorum-loss-recovery -n {ns} {etcd} --resume --yes");
    let mut op = CliOperator::new(druidctl::output::OutputFormat::Table, false);
    op.indent = "         ";
    let outcome = druidctl::runbook::run(&pg.client(), &QUORUM_LOSS_RECOVERY, &o, &op, stop).await;
    op.finish();
    let summary = match outcome {
        Ok(Outcome::Completed(s)) => s,
        Ok(_) => anyhow::bail!("the recovery was interrupted"),
        Err(e) => return Err(super::runbook::to_cli_error(e)),
    };
    tl.end("quorum-loss recovery (runbook)", t);
    for s in &summary.steps {
        tl.entries.push((format!("  {}", s.name), Duration::from_millis(s.duration_ms)));
    }

    let t = tl.begin("check the keys on every member");
    let mut survived = 0;
    let mut lost = 0;
    for m in 0..3 {
        let c = pg.etcd_client(&ns, m).ok_or_else(|| anyhow::anyhow!("member {m} does not run"))?;
        let before = c.get_prefix("/demo/before/").await?.len();
        let after = c.get_prefix("/demo/after/").await?.len();
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
    tl.end("check the keys", t);
    println!("         survived: {survived}/{} keys written before the snapshot (/demo/before/*)", args.keys_before);
    println!(
        "         lost:     {lost}/{} keys written after the snapshot (/demo/after/*), as expected",
        args.keys_after
    );
    println!(
        "         runbook: {} total, {} waiting for etcd/pods/druid, {} runbook overhead",
        human_ms(summary.total_ms),
        human_ms(summary.waited_ms),
        human_ms(summary.overhead_ms)
    );
    Ok(())
}
