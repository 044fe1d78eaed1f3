//! `generate` (hidden): writes the artifacts druidctl generates from itself — completions/, man/, deploy/ and
//! docs/exit-codes.md. The test `cli_generated` fails when the checked-in copies are stale.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use druidctl::api::manifests::{self, DEFAULT_SERVE_NAMESPACE};

use super::Context;
use super::completion::{Shell, kubectl_shim, script};

/// Arguments of `generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Repository root to write into.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub out: PathBuf,
}

fn man_pages(files: &mut BTreeMap<String, Vec<u8>>) {
    let mut root = druidctl_command();
    root.build();
    let mut pages = Vec::new();
    collect(&root, &[], &mut pages);
    let shipped: Vec<String> = pages.iter().map(|(path, _)| path.join("-")).collect();
    for (path, cmd) in &pages {
        files.insert(format!("man/{}.1", path.join("-")), man_page(cmd, path, &shipped));
    }
}

/// Every visible command with its path of names (`["druidctl", "runbook", "quorum-loss-recovery"]`).
fn collect<'a>(cmd: &'a clap::Command, prefix: &[String], out: &mut Vec<(Vec<String>, &'a clap::Command)>) {
    let mut path = prefix.to_vec();
    path.push(cmd.get_name().to_string());
    out.push((path.clone(), cmd));
    for sub in visible_subcommands(cmd) {
        collect(sub, &path, out);
    }
}

fn visible_subcommands(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help")
}

/// One man page: clap_mangen's NAME, SYNOPSIS, DESCRIPTION and OPTIONS, then COMMANDS (naming the pages that
/// exist), EXAMPLES, EXIT STATUS, ENVIRONMENT and SEE ALSO.
fn man_page(cmd: &clap::Command, path: &[String], shipped: &[String]) -> Vec<u8> {
    use roff::{Roff, bold, roman};
    let name = path.join("-");
    // clap names are `&'static str` without its `string` feature; the generator runs once per process.
    let static_name: &'static str = Box::leak(name.clone().into_boxed_str());
    let page = cmd.clone().name(static_name).bin_name(path.join(" ")).disable_help_subcommand(true);
    let man = clap_mangen::Man::new(page);
    let mut buf = Vec::new();
    man.render_title(&mut buf).expect("render to memory");
    man.render_name_section(&mut buf).expect("render to memory");
    man.render_synopsis_section(&mut buf).expect("render to memory");
    man.render_description_section(&mut buf).expect("render to memory");
    man.render_options_section(&mut buf).expect("render to memory");

    let mut roff = Roff::new();
    let subs: Vec<&clap::Command> = visible_subcommands(cmd).collect();
    if !subs.is_empty() {
        roff.control("SH", ["COMMANDS"]);
        for sub in &subs {
            roff.control("TP", []);
            roff.text([bold(format!("{}-{}(1)", name, sub.get_name()))]);
            if let Some(about) = sub.get_about() {
                roff.text([roman(about.to_string())]);
            }
        }
    }
    roff.control("SH", ["EXAMPLES"]);
    for (what, line) in examples(path, &subs) {
        roff.control("TP", []);
        roff.text([roman(what)]);
        roff.text([bold(line)]);
    }
    roff.control("SH", ["EXIT STATUS"]);
    for (code, short, long) in super::exit::ExitCode::ALL {
        roff.control("TP", []);
        roff.text([bold(code.code().to_string())]);
        roff.text([roman(format!("{short}: {}", long.replace('`', "")))]);
    }
    roff.control("SH", ["ENVIRONMENT"]);
    for (var, what) in ENVIRONMENT {
        roff.control("TP", []);
        roff.text([bold(*var)]);
        roff.text([roman(*what)]);
    }
    roff.control("SH", ["SEE ALSO"]);
    let mut see: Vec<String> = Vec::new();
    if path.len() > 1 {
        see.push(path[..path.len() - 1].join("-"));
    }
    see.extend(subs.iter().map(|s| format!("{name}-{}", s.get_name())));
    see.retain(|p| shipped.contains(p));
    let mut inlines = Vec::new();
    for p in &see {
        inlines.push(bold(p.clone()));
        inlines.push(roman("(1), "));
    }
    inlines.push(bold("kubectl"));
    inlines.push(roman("(1)"));
    roff.text(inlines);
    roff.to_writer(&mut buf).expect("render to memory");
    man.render_version_section(&mut buf).expect("render to memory");
    buf
}

/// Variables the binary reads (kubeconfig resolution, color, the playground, completion).
const ENVIRONMENT: &[(&str, &str)] = &[
    ("KUBECONFIG", "Kubeconfig files (a list, like kubectl) when --kubeconfig is not given; else ~/.kube/config."),
    ("NO_COLOR", "When set and not empty, --color auto prints no color."),
    ("DRUIDCTL_PLAYGROUND_DIR", "State directory of the playground when --dir is not given."),
    (
        "DRUIDCTL_ETCD_BIN",
        "The etcd binary the playground and demo run (else etcd on PATH); \"simulated\" asks for simulated members.",
    ),
    ("DRUIDCTL_ETCDCTL_BIN", "The etcdctl binary the playground uses (else etcdctl on PATH)."),
    ("COMPLETE", "Set by the completion scripts (COMPLETE=bash druidctl ...) to ask for completions."),
];

/// Example command lines of a page: hand-written for the commands people start with, else one per subcommand
/// and the help of the command.
fn examples(path: &[String], subs: &[&clap::Command]) -> Vec<(String, String)> {
    let bin = path.join(" ");
    let e = |what: &str, args: &str| (what.to_string(), format!("{bin} {args}").trim_end().to_string());
    let key: Vec<&str> = path.iter().skip(1).map(String::as_str).collect();
    match key.as_slice() {
        [] => vec![
            e("Health of every Etcd in every namespace:", "status -A"),
            e(
                "Print a runbook's plan without changing anything:",
                "runbook quorum-loss-recovery -n shoot--dev etcd-main --plan",
            ),
            e("A rehearsal on a throw-away playground:", "demo"),
        ],
        ["status"] => vec![
            e("Health of one Etcd, with each member's own etcd status and alarms:", "-n shoot--dev etcd-main"),
            e("Without asking etcd itself (Kubernetes objects only):", "-n shoot--dev etcd-main --no-etcd"),
            e("Every Etcd, as JSON, exit code 4 when one is unhealthy:", "-A -o json"),
        ],
        ["reconcile"] => vec![e("Reconcile now and wait until etcd-druid did:", "-n shoot--dev etcd-main --wait")],
        ["check"] => vec![
            e("Compare every member's keyspace hash; exit 4 names a divergent member:", "-n shoot--dev etcd-main"),
            e(
                "The same as JSON, with revision, compact revision and hash per member:",
                "-n shoot--dev etcd-main -o json",
            ),
        ],
        ["alarm", "list"] => vec![e("The alarms etcd raised, by member:", "-n shoot--dev etcd-main")],
        ["alarm", "disarm"] => vec![
            e("Disarm after the space was recovered (asks first):", "-n shoot--dev etcd-main"),
            e("Without a question (CI):", "-n shoot--dev etcd-main --yes"),
        ],
        ["move-leader"] => {
            vec![e("Let etcd-main-1 lead before the leader's node is drained:", "-n shoot--dev etcd-main etcd-main-1")]
        }
        ["suspend-reconcile"] | ["resume-reconcile"] => vec![e("By name or NAMESPACE/NAME:", "shoot--dev/etcd-main")],
        ["list-resources"] => vec![e("Everything etcd-druid manages for an Etcd:", "-n shoot--dev etcd-main")],
        ["logs"] => vec![
            e("Every member's etcd and backup-restore, interleaved by time:", "-n shoot--dev etcd-main"),
            e(
                "Follow one member's etcd warnings and errors:",
                "-n shoot--dev etcd-main etcd-main-1 -c etcd --level warn -f",
            ),
            e("The last hour as JSON lines for a script:", "-n shoot--dev etcd-main --since 1h -o jsonl"),
            e("What a restarted member said before its restart:", "-n shoot--dev etcd-main etcd-main-2 --previous"),
        ],
        ["report"] => vec![
            e("A redacted bundle for the ticket (logs of the last 24 h):", "-n shoot--dev etcd-main"),
            e("What would be collected, without writing anything:", "-n shoot--dev etcd-main --dry-run"),
            e(
                "Objects only, with etcd-druid's own Deployment and logs, to a chosen file:",
                "-n shoot--dev etcd-main --logs=false --druid-namespace garden -f evidence.tar.gz",
            ),
        ],
        ["protection", "enable"] | ["protection", "disable"] => {
            vec![e("Every Etcd matching a selector:", "-n shoot--dev -l role=main")]
        }
        ["snapshot"] => vec![e("A full snapshot now:", "-n shoot--dev etcd-main")],
        ["runbook", rb] if *rb != "list" && *rb != "abort" && *rb != "machine-replacement" => vec![
            e("Print the plan and change nothing:", "-n shoot--dev etcd-main --plan"),
            e("Run without questions (CI):", "-n shoot--dev etcd-main --yes"),
        ],
        ["playground", "up"] => vec![e("Three Etcds with three members each:", "--etcds 3")],
        ["completion"] => vec![("Load bash completion in the current shell:".into(), format!("source <({bin} bash)"))],
        _ if !subs.is_empty() => subs
            .iter()
            .map(|s| {
                (
                    format!("{}:", s.get_about().map(|a| a.to_string()).unwrap_or_default()),
                    format!("{bin} {} --help", s.get_name()),
                )
            })
            .collect(),
        _ => vec![e("Every flag and argument of this command:", "--help")],
    }
}

fn druidctl_command() -> clap::Command {
    super::tailor(<super::Cli as clap::CommandFactory>::command())
}

/// Every generated file, by path relative to the repository root.
pub fn files() -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for shell in Shell::ALL {
        files.insert(format!("completions/{}", shell.file_name()), script(shell).into_bytes());
    }
    files.insert("completions/kubectl_complete-druid".into(), kubectl_shim().into_bytes());
    man_pages(&mut files);
    let header = "# Generated by `druidctl generate`; do not edit. Apply with `druidctl install`.\n";
    files.insert(
        "deploy/crd.yaml".into(),
        format!("{header}{}", manifests::to_yaml_stream(&[manifests::crd()])).into_bytes(),
    );
    files.insert(
        "deploy/rbac.yaml".into(),
        format!("{header}{}", manifests::to_yaml_stream(&manifests::cluster_roles())).into_bytes(),
    );
    let serve =
        manifests::serve_deployment(&format!("druidctl:{}", env!("CARGO_PKG_VERSION")), DEFAULT_SERVE_NAMESPACE);
    files.insert("deploy/serve.yaml".into(), format!("{header}{}", manifests::to_yaml_stream(&serve)).into_bytes());
    files.insert("docs/exit-codes.md".into(), super::exit::markdown().into_bytes());
    files.extend(druidctl::runbook::docs::pages().into_iter().map(|(path, page)| (path, page.into_bytes())));
    files
}

/// Writes every generated file under `--out`.
pub fn exec(ctx: &mut Context, args: GenerateArgs) -> anyhow::Result<()> {
    for (path, content) in files() {
        let target = args.out.join(&path);
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&target, content)?;
        #[cfg(unix)]
        if path.ends_with("kubectl_complete-druid") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))?;
        }
        ctx.printer.text(&format!("wrote {path}\n"))?;
    }
    Ok(())
}
