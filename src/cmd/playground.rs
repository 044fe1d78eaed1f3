//! `playground up|down|status|break|apiserver`: a local landscape to rehearse on (the embedded API server over
//! HTTP, or an existing API server with `--kubeconfig`/`--context`, and real etcd processes), everything under one
//! state directory. `up` runs in the foreground (Ctrl-C stops it) or `--detach`ed; `break` hands its request to
//! the running playground through the state directory; `apiserver` serves the embedded API server alone.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use landscape::etcd::EtcdBackend;
use landscape::playground::BreakTarget;
use landscape::playground::SIMULATED_MEMBERS_CAPABILITY;
use landscape::{BreakKind, ExternalServer, LandscapeOptions, Playground, PlaygroundOptions, PlaygroundRecord};

use super::Context;

/// Arguments of `playground`.
#[derive(Debug, Args)]
pub struct PlaygroundArgs {
    /// State directory (kubeconfig, volumes, backups, logs, pid). Default: $DRUIDCTL_PLAYGROUND_DIR; else, for
    /// status, down and break, the playground whose kubeconfig is the first entry of $KUBECONFIG
    /// (DIR/kubeconfig next to its state); else ~/.local/state/druidctl/playground.
    #[arg(long, global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: PlaygroundCommand,
}

/// Playground commands.
#[derive(Debug, Subcommand)]
pub enum PlaygroundCommand {
    /// Start the playground: an API server on loopback (or the one of --kubeconfig/--context) and Etcds with
    /// real etcd processes (simulated members when no etcd binary is found).
    Up(UpArgs),
    /// Stop a detached playground and every process it started; against an external API server, also remove
    /// what it created there.
    Down,
    /// Whether a playground runs, its kubeconfig, its mode and the fallbacks in force.
    Status,
    /// Inject a failure into the running playground.
    Break(BreakArgs),
    /// Serve the embedded API server alone over HTTPS (no landscape) until stopped, e.g. as the external API
    /// server of `playground up --kubeconfig` or of the end-to-end tests.
    Apiserver(ApiserverArgs),
}

/// Arguments of `playground apiserver`.
#[derive(Debug, Args)]
pub struct ApiserverArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0", value_name = "ADDR")]
    pub listen: std::net::SocketAddr,
    /// Where to write the admin kubeconfig (written once the server listens).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig_out: PathBuf,
    /// Also create the user NAME, member of the given groups (none: no permissions at all); its kubeconfig is
    /// written next to the admin one as FILE-NAME. Repeatable, e.g. `--user limited --user ops:viewers:audit`.
    #[arg(long = "user", value_name = "NAME[:GROUP…]")]
    pub users: Vec<String>,
    /// Keep the users' tokens of the kubeconfigs an earlier run wrote to FILE (and FILE-NAME) and its serving
    /// certificate (FILE.tls.json), so that its clients carry on against this server, as after an API server
    /// restart (use the same --listen port).
    #[arg(long)]
    pub reuse_tokens: bool,
    /// Start with the CRDs of etcd-druid and of EtcdOperatorTask registered (as `druidctl install` and
    /// etcd-druid's chart would), e.g. for `druidctl serve` against a server that is restarted.
    #[arg(long)]
    pub crds: bool,
}

/// The token of the first user of the kubeconfig at `path`, if the file exists and names one.
fn token_in(path: &Path) -> anyhow::Result<Option<String>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => anyhow::bail!("cannot read {} for --reuse-tokens: {e}", path.display()),
    };
    let doc: serde_json::Value = serde_saphyr::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{} is not a kubeconfig (--reuse-tokens): {e}", path.display()))?;
    Ok(doc.pointer("/users/0/user/token").and_then(|t| t.as_str()).filter(|t| !t.is_empty()).map(str::to_string))
}

/// Arguments of `playground up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Return once ready and keep the playground running in the background (stop it with `playground down`).
    #[arg(long)]
    pub detach: bool,
    /// Members per Etcd.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=7))]
    pub members: i32,
    /// Number of Etcds (one namespace each).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=20))]
    pub etcds: u16,
    /// How long to wait for the Etcds to become ready (1s to 1h).
    #[arg(long, default_value = "90s", value_parser = super::duration_in(1000, 3600))]
    pub timeout: Duration,
    /// Namespaces are PREFIX0, PREFIX1, …; against an external API server they must not exist yet.
    #[arg(long, default_value = "shoot--playground--", value_name = "PREFIX")]
    pub namespace_prefix: String,
    /// Run simulated etcd members (in-process, same etcd API) even when an etcd binary is installed. Without an
    /// etcd binary (PATH or DRUIDCTL_ETCD_BIN) members are simulated anyway; DRUIDCTL_ETCD_BIN=simulated asks
    /// for them too.
    #[arg(long)]
    pub simulated_members: bool,
    /// Put the Machines in a second API server (MCM's control cluster, kubeconfig DIR/machine-kubeconfig), as on
    /// a seed whose Machines live in its parent cluster; pass it to `machine delete` and `runbook
    /// machine-replacement` with --machine-kubeconfig. Embedded API server only.
    #[arg(long)]
    pub machine_cluster: bool,
    /// Give the Etcds `spec.memberNamePrefix` (etcd-druid v0.37+): member, lease and initial-cluster names become
    /// PREFIX-<pod>.
    #[arg(long, value_name = "PREFIX", value_parser = parse_member_name_prefix)]
    pub member_name_prefix: Option<String>,
}

/// A `spec.memberNamePrefix` as the Etcd CRD accepts it (`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`, a DNS label).
fn parse_member_name_prefix(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a valid memberNamePrefix: use lower-case letters, digits and '-', starting and ending with a letter or digit"
        ))
    }
}

/// Arguments of `playground break`.
#[derive(Debug, Args)]
pub struct BreakArgs {
    /// The failure: member-down, member-lost, quorum-lost, corrupt-member, backup-failing, apiserver-restart,
    /// lagging-member, space-exceeded.
    #[arg(value_name = "KIND", add = clap_complete::engine::ArgValueCompleter::new(super::completion::break_kinds))]
    pub kind: String,
    /// Member ordinals to hit (default: the highest one, or a majority for quorum-lost).
    #[arg(long = "member", value_name = "N", value_parser = clap::value_parser!(u32).range(0..=6), add = clap_complete::engine::ArgValueCompleter::new(super::completion::playground_member_ordinals))]
    pub members: Vec<u32>,
    /// Namespace of the Etcd (default: the first).
    #[arg(long = "in", value_name = "NAMESPACE", value_parser = super::parse_namespace)]
    pub in_namespace: Option<String>,
    /// How long member-down keeps members down, or lagging-member keeps them stopped (1s to 1h).
    #[arg(long, value_parser = super::duration_in(1000, 3600))]
    pub down_for: Option<Duration>,
}

fn pid_alive(dir: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(dir.join("playground.pid")).ok()?.trim().parse().ok()?;
    // SAFETY: signal 0 only checks that the process exists.
    (unsafe { libc::kill(pid, 0) } == 0).then_some(pid)
}

/// Runs `playground …`.
pub fn exec(ctx: &mut Context, args: PlaygroundArgs) -> anyhow::Result<()> {
    // `up` starts a playground of its own; the others act on an existing one, also the one $KUBECONFIG uses.
    let follow_kubeconfig =
        matches!(args.command, PlaygroundCommand::Down | PlaygroundCommand::Status | PlaygroundCommand::Break(_));
    let dir = super::playground_state::state_dir(args.dir, follow_kubeconfig);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    match args.command {
        PlaygroundCommand::Up(a) if a.detach => detach(ctx, &dir, &a),
        PlaygroundCommand::Up(a) => rt.block_on(up(ctx, &dir, &a)),
        PlaygroundCommand::Down => rt.block_on(async {
            let stopped = Playground::down_detached(&dir, Duration::from_secs(10)).await?;
            let _ = std::fs::remove_file(dir.join("ready"));
            ctx.printer.text(&if stopped {
                format!("playground stopped (state {})\n", dir.display())
            } else {
                format!("no playground was running (state {})\n", dir.display())
            })?;
            Ok(())
        }),
        PlaygroundCommand::Status => {
            let mut text = match pid_alive(&dir) {
                Some(pid) if dir.join("ready").exists() => format!(
                    "playground running (pid {pid}, state {})\nexport KUBECONFIG={}\n",
                    dir.display(),
                    dir.join("kubeconfig").display()
                ),
                Some(pid) => format!("playground starting (pid {pid}, state {})\n", dir.display()),
                None => format!("no playground running (state {})\n", dir.display()),
            };
            if let Some(record) = PlaygroundRecord::read(&dir) {
                text.push_str(&describe(&record));
            }
            ctx.printer.text(&text)?;
            Ok(())
        }
        PlaygroundCommand::Break(a) => rt.block_on(request_break(ctx, &dir, a)),
        PlaygroundCommand::Apiserver(a) => rt.block_on(serve_apiserver(ctx, a)),
    }
}

/// The mode, namespaces, what was created and the fallbacks in force, for `status`.
fn describe(r: &PlaygroundRecord) -> String {
    let mut out = match &r.context {
        Some(c) => format!("mode: {} (API server {}, context {c})\n", r.mode, r.server),
        None => format!("mode: {} (API server {})\n", r.mode, r.server),
    };
    out.push_str(&format!("namespaces: {}\n", r.namespaces.join(", ")));
    if r.is_external() {
        let list = |v: &[String]| if v.is_empty() { "none".to_string() } else { v.join(", ") };
        out.push_str(&format!(
            "created (removed by down): namespaces {}; CRDs {}\nexisting CRDs used as they are: {}\n",
            list(&r.created_namespaces),
            list(&r.created_crds),
            list(&r.existing_crds)
        ));
    }
    if r.fallbacks.is_empty() {
        out.push_str("fallbacks: none (the embedded API server provides everything)\n");
    } else {
        out.push_str("fallbacks:\n");
        for f in &r.fallbacks {
            out.push_str(&format!("  - {}: {}\n", f.capability, f.instead));
        }
    }
    out
}

/// `playground apiserver`: the embedded API server alone over HTTP, until SIGINT/SIGTERM.
async fn serve_apiserver(ctx: &mut Context, a: ApiserverArgs) -> anyhow::Result<()> {
    let server = kube_sim::ApiServer::new();
    if a.reuse_tokens
        && let Some(token) = token_in(&a.kubeconfig_out)?
    {
        server.set_token("admin", &["system:masters"], &token);
    }
    if a.crds {
        landscape::register_upstream_crds(&server)?;
        server.register_crd_yaml(&serde_json::to_string(&druidctl::api::task::crd())?)?;
    }
    // HTTPS with the token in the kubeconfig's user entry: client-go sends a bearer token only over TLS.
    let tls_file = {
        let mut f = a.kubeconfig_out.clone().into_os_string();
        f.push(".tls.json");
        PathBuf::from(f)
    };
    let identity = match std::fs::read(&tls_file) {
        Ok(bytes) if a.reuse_tokens => serde_json::from_slice(&bytes)
            .map_err(|e| anyhow::anyhow!("{} is not a serving identity (--reuse-tokens): {e}", tls_file.display()))?,
        _ => {
            kube_sim::TlsIdentity::generate().map_err(|e| anyhow::anyhow!("cannot make a serving certificate: {e}"))?
        }
    };
    let endpoint = server.serve_https_as(a.listen, identity.clone()).await?;
    write_private(&tls_file, &serde_json::to_vec(&identity)?)?;
    // Written atomically once the server listens, so a script can wait for the file.
    let tmp = a.kubeconfig_out.with_extension("tmp");
    let mut user_files = Vec::new();
    for spec in &a.users {
        let mut parts = spec.split([':', ',']).filter(|p| !p.is_empty());
        let Some(name) = parts.next() else {
            anyhow::bail!("--user needs a user name (NAME[:GROUP…]), got {spec:?}");
        };
        let groups: Vec<&str> = parts.collect();
        server.add_user(name, &groups);
        let mut file = a.kubeconfig_out.clone().into_os_string();
        file.push(format!("-{name}"));
        let file = PathBuf::from(file);
        if a.reuse_tokens
            && let Some(token) = token_in(&file)?
        {
            server.set_token(name, &groups, &token);
        }
        write_private(&file, server.kubeconfig_yaml_for(&endpoint, name, None).as_bytes())?;
        user_files.push((name.to_string(), file));
    }
    write_private(&tmp, server.kubeconfig_yaml_for(&endpoint, "admin", None).as_bytes())?;
    std::fs::rename(&tmp, &a.kubeconfig_out)?;
    let mut msg = format!(
        "embedded API server listening on {}\nexport KUBECONFIG={}\n",
        endpoint.url,
        a.kubeconfig_out.display()
    );
    for (name, file) in &user_files {
        msg.push_str(&format!("user {name}: KUBECONFIG={}\n", file.display()));
    }
    ctx.printer.text(&msg)?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    endpoint.shutdown();
    Ok(())
}

/// Writes a file only its owner can read (kubeconfigs with tokens, the serving key).
fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(bytes)?;
    Ok(())
}

/// The external API server of `--kubeconfig` / `--context`, if either is given.
fn external(ctx: &Context) -> Option<ExternalServer> {
    (ctx.global.kubeconfig.is_some() || ctx.global.context.is_some())
        .then(|| ExternalServer { kubeconfig: ctx.global.kubeconfig.clone(), context: ctx.global.context.clone() })
}

async fn up(ctx: &mut Context, dir: &Path, a: &UpArgs) -> anyhow::Result<()> {
    if let Some(pid) = pid_alive(dir) {
        anyhow::bail!(
            "a playground already runs from {} (pid {pid}); stop it with `druidctl playground down --dir {}`",
            dir.display(),
            dir.display()
        );
    }
    let _ = std::fs::remove_file(dir.join("ready"));
    let mut opts = PlaygroundOptions::new(dir);
    opts.members = a.members;
    opts.etcds = usize::from(a.etcds);
    opts.namespace_prefix = a.namespace_prefix.clone();
    opts.external = external(ctx);
    if a.machine_cluster && opts.external.is_some() {
        return Err(druidctl::kube::UsageError(
            "--machine-cluster starts a second embedded API server; it does not combine with --kubeconfig/--context (an external API server)".into(),
        )
        .into());
    }
    opts.machine_cluster = a.machine_cluster;
    opts.member_name_prefix = a.member_name_prefix.clone();
    if a.simulated_members {
        opts.landscape = Some(simulated_members(dir));
    }
    let pg = start(opts).await?;
    let ready = pg.wait_ready(a.timeout).await;
    if let Err(e) = ready {
        pg.down().await?;
        return Err(e.into());
    }
    std::fs::write(dir.join("ready"), "")?;
    let machines = match pg.machine_kubeconfig_path() {
        Some(p) => format!(
            "machines: in a second API server; pass --machine-kubeconfig {} (or export DRUIDCTL_MACHINE_KUBECONFIG={})\n",
            p.display(),
            p.display()
        ),
        None => String::new(),
    };
    ctx.printer.text(&format!(
        "playground ready: {} Etcd(s) {} with {} members each in {}\netcd members: {}\n{machines}{}\n",
        pg.namespaces().len(),
        pg.etcd_name(),
        a.members,
        pg.namespaces().join(", "),
        pg.etcd_backend().describe(),
        pg.export_line()
    ))?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = tokio::time::sleep(Duration::from_millis(200)) => serve_break_requests(&pg, dir).await,
        }
    }
    let _ = std::fs::remove_file(dir.join("ready"));
    pg.down().await?;
    eprintln!("playground stopped");
    Ok(())
}

/// Starts a playground (with the EtcdOperatorTask CRD: runbooks journal in tasks): real etcd members when an etcd
/// binary is found, else simulated ones ([`Playground::etcd_backend`] says which and why; `status` shows it too).
pub async fn start(opts: PlaygroundOptions) -> anyhow::Result<Playground> {
    Ok(Playground::up(opts).await?)
}

/// Landscape options with simulated etcd members, as `--simulated-members` asks.
pub fn simulated_members(dir: &Path) -> LandscapeOptions {
    LandscapeOptions {
        etcd: Some(EtcdBackend::simulated("requested with --simulated-members")),
        ..LandscapeOptions::new(dir)
    }
}

fn detach(ctx: &mut Context, dir: &Path, a: &UpArgs) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    if let Some(pid) = pid_alive(dir) {
        anyhow::bail!("a playground already runs from {} (pid {pid})", dir.display());
    }
    std::fs::create_dir_all(dir)?;
    let _ = std::fs::remove_file(dir.join("ready"));
    let log = std::fs::File::create(dir.join("playground.log"))?;
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    if let Some(k) = &ctx.global.kubeconfig {
        cmd.arg("--kubeconfig").arg(k);
    }
    if let Some(c) = &ctx.global.context {
        cmd.args(["--context", c]);
    }
    cmd.args(["playground", "--dir"])
        .arg(dir)
        .args([
            "up",
            "--namespace-prefix",
            &a.namespace_prefix,
            "--members",
            &a.members.to_string(),
            "--etcds",
            &a.etcds.to_string(),
            "--timeout",
            &format!("{}s", a.timeout.as_secs()),
        ])
        .args(a.simulated_members.then_some("--simulated-members"))
        .args(a.machine_cluster.then_some("--machine-cluster"))
        .args(a.member_name_prefix.iter().flat_map(|p| ["--member-name-prefix", p.as_str()]))
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: setsid in the child only detaches it from our terminal's session.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let deadline = Instant::now() + a.timeout + Duration::from_secs(10);
    while !dir.join("ready").exists() {
        if let Some(status) = child.try_wait()? {
            anyhow::bail!(
                "the playground exited ({status}) before it was ready; see {}",
                dir.join("playground.log").display()
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            anyhow::bail!(
                "the playground was not ready after {}s; see {}",
                a.timeout.as_secs(),
                dir.join("playground.log").display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let simulated = PlaygroundRecord::read(dir)
        .and_then(|r| r.fallbacks.into_iter().find(|f| f.capability.starts_with(SIMULATED_MEMBERS_CAPABILITY)))
        .map(|f| format!("etcd members: {}\n", f.instead))
        .unwrap_or_default();
    let machines = match a.machine_cluster {
        true => {
            let p = dir.join(landscape::playground::MACHINE_KUBECONFIG);
            format!("export DRUIDCTL_MACHINE_KUBECONFIG={}   # the Machines' API server\n", p.display())
        }
        false => String::new(),
    };
    ctx.printer.text(&format!(
        "playground running in the background (pid {}); stop it with `druidctl playground down --dir {}`\n{simulated}{machines}export KUBECONFIG={}\n",
        child.id(),
        dir.display(),
        dir.join("kubeconfig").display()
    ))?;
    Ok(())
}

fn requests_dir(dir: &Path) -> PathBuf {
    dir.join("break-requests")
}

async fn serve_break_requests(pg: &Playground, dir: &Path) {
    let Ok(entries) = std::fs::read_dir(requests_dir(dir)) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "json") {
            let answer = match std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            {
                Some(req) => {
                    let kind = req["kind"].as_str().unwrap_or_default().parse::<BreakKind>();
                    match kind {
                        Ok(kind) => {
                            let target = BreakTarget {
                                namespace: req["namespace"].as_str().map(String::from),
                                members: req["members"]
                                    .as_array()
                                    .map(|a| a.iter().filter_map(|m| m.as_u64()).map(|m| m as u32).collect())
                                    .unwrap_or_default(),
                                down_for: req["downForMs"].as_u64().map(Duration::from_millis),
                            };
                            match pg.break_(kind, &target).await {
                                Ok(s) => serde_json::json!({"ok": s}),
                                Err(e @ landscape::LandscapeError::NotFound(_)) => {
                                    serde_json::json!({"error": e.to_string(), "notFound": true})
                                }
                                Err(e) => serde_json::json!({"error": e.to_string()}),
                            }
                        }
                        Err(e) => serde_json::json!({"error": e}),
                    }
                }
                None => serde_json::json!({"error": "unreadable request"}),
            };
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::write(path.with_extension("done"), answer.to_string());
        }
    }
}

async fn request_break(ctx: &mut Context, dir: &Path, a: BreakArgs) -> anyhow::Result<()> {
    let kind = a.kind.parse::<BreakKind>().map_err(druidctl::kube::UsageError)?;
    if pid_alive(dir).is_none() || !dir.join("ready").exists() {
        anyhow::bail!(
            "no playground is running from {}; start one with `druidctl playground up --detach`",
            dir.display()
        );
    }
    std::fs::create_dir_all(requests_dir(dir))?;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let req = serde_json::json!({"kind": a.kind, "members": a.members, "namespace": a.in_namespace, "downForMs": a.down_for.map(|d| d.as_millis() as u64)});
    let tmp = requests_dir(dir).join(format!("{id}.tmp"));
    std::fs::write(&tmp, req.to_string())?;
    std::fs::rename(&tmp, requests_dir(dir).join(format!("{id}.json")))?;
    let done = requests_dir(dir).join(format!("{id}.done"));
    // space-exceeded rolls the members with the new quota, then fills the database.
    let answer_within = if kind == BreakKind::SpaceExceeded { 240 } else { 30 };
    let deadline = Instant::now() + Duration::from_secs(answer_within);
    while !done.exists() {
        if Instant::now() > deadline {
            anyhow::bail!("the playground did not answer the break request within {answer_within}s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answer: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&done)?)?;
    let _ = std::fs::remove_file(&done);
    let error = answer["error"].as_str().unwrap_or("break failed").to_string();
    match answer["ok"].as_str() {
        Some(s) => ctx.printer.text(&format!("{s}\n"))?,
        None if answer["notFound"] == true => return Err(NotInPlayground(error).into()),
        None => anyhow::bail!("{error}"),
    }
    Ok(())
}

/// `playground break` named a namespace or member the playground does not run: not found (exit 6).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotInPlayground(pub String);
