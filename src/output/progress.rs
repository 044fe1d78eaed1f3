//! Progress and prompts for long operations and runbooks: spinners only on a terminal (stderr), and
//! confirmations that refuse without a terminal unless `--yes` was given.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Errors of prompts.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// No terminal to ask on and `--yes` not given.
    #[error("{action} needs confirmation but stdin is not a terminal; pass --yes to proceed without asking")]
    NoTerminal {
        /// What needed confirmation.
        action: String,
    },
    /// The operator said no (or typed the wrong name).
    #[error("not confirmed: {0}")]
    Declined(String),
    /// The prompt failed.
    #[error("prompt failed: {0}")]
    Io(String),
}

/// A spinner on stderr with elapsed time; hidden when stderr is not a terminal.
pub fn spinner(message: impl Into<String>) -> ProgressBar {
    let pb = if std::io::stderr().is_terminal() { ProgressBar::new_spinner() } else { ProgressBar::hidden() };
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.set_message(message.into());
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

/// Asks a yes/no question; `assume_yes` skips it, no terminal without `assume_yes` is an error.
pub fn confirm(question: &str, assume_yes: bool) -> Result<(), PromptError> {
    if assume_yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(PromptError::NoTerminal { action: question.to_string() });
    }
    let ok = dialoguer::Confirm::new()
        .with_prompt(question)
        .default(false)
        .interact()
        .map_err(|e| PromptError::Io(e.to_string()))?;
    if ok { Ok(()) } else { Err(PromptError::Declined(question.to_string())) }
}

/// For destructive steps: the operator must type `expected` (e.g. the Etcd's name).
pub fn confirm_by_typing(question: &str, expected: &str, assume_yes: bool) -> Result<(), PromptError> {
    if assume_yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(PromptError::NoTerminal { action: question.to_string() });
    }
    let typed: String = dialoguer::Input::new()
        .with_prompt(format!("{question} Type {expected:?} to confirm"))
        .allow_empty(true)
        .interact_text()
        .map_err(|e| PromptError::Io(e.to_string()))?;
    if typed.trim() == expected { Ok(()) } else { Err(PromptError::Declined(question.to_string())) }
}
