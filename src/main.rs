//! druidctl: parse, run, map errors to exit codes. Invoked as `kubectl-druid`, it names itself `kubectl druid`.

mod cmd;

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use clap::FromArgMatches;

use cmd::exit::{self, ExitCode as Code};

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let invoked_as = args.first().and_then(|a| Path::new(a).file_name()).map(|f| f.to_string_lossy().to_string());
    if invoked_as.as_deref().is_some_and(|n| n.starts_with("kubectl-druid")) {
        druidctl::output::set_command_name("kubectl druid");
    }
    // `COMPLETE=<shell> druidctl …`: dynamic completion for the registration scripts.
    clap_complete::CompleteEnv::with_factory(cmd::command).var(cmd::completion::COMPLETE_VAR).complete();
    // `druidctl __complete WORDS…`: the kubectl plugin completion protocol (kubectl_complete-druid).
    if args.get(1).is_some_and(|a| a == "__complete") {
        return match cmd::completion::kubectl_complete(args[2..].to_vec()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::from(Code::Failed.code()),
        };
    }

    let matches = match cmd::command().try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) => return clap_error(e),
    };
    let cli = match cmd::Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => return clap_error(e),
    };
    init_logging(cli.global.verbose);
    match cmd::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let code = exit::classify(&err);
            match err.downcast_ref::<cmd::Interrupted>() {
                // Ctrl-C: what to do next, once, without "error:"; a watch ends without a word.
                Some(cmd::Interrupted::Hint(hint)) => eprintln!("{}", one_line(hint)),
                Some(cmd::Interrupted::Silent) => {}
                // The reader went away: nobody to tell, and a pipeline's stderr is no place for it.
                _ if code == exit::ExitCode::OutputClosed => {}
                _ => eprintln!("error: {}", one_line(&format!("{err:#}"))),
            }
            ExitCode::from(code.code())
        }
    }
}

/// Help and version go to stdout with exit 0; usage errors become one line on stderr with exit 2.
fn clap_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            eprintln!("error: a command is required; see `{} --help`", druidctl::output::command_name());
            ExitCode::from(Code::Usage.code())
        }
        _ => {
            let rendered = e.render().to_string();
            let text: Vec<&str> = rendered
                .lines()
                .take_while(|l| !l.starts_with("Usage:"))
                .map(str::trim)
                // clap's `tip: …` is a second sentence; `--help` is named instead.
                .filter(|l| !l.is_empty() && !l.starts_with("For more information") && !l.starts_with("tip:"))
                .collect();
            let msg = text.join(" ");
            let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
            eprintln!("error: {}; see `{} --help`", msg, druidctl::output::command_name());
            ExitCode::from(Code::Usage.code())
        }
    }
}

fn one_line(s: &str) -> String {
    let line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    // Input echoed back (a huge --config, a long name) must not flood the terminal.
    const MAX: usize = 600;
    if line.chars().count() > MAX {
        let cut: String = line.chars().take(MAX).collect();
        format!("{cut}… ({} more characters)", line.chars().count() - MAX)
    } else {
        line
    }
}

fn init_logging(verbose: u8) {
    if verbose == 0 {
        return;
    }
    let level = match verbose {
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::new(format!("druidctl={level},kube={level}")))
        .try_init();
}
