//! Output: the one printer behind `-o table|wide|json|yaml|name|jsonl`, the color policy (`--color`,
//! `NO_COLOR`, never off a terminal), human durations, the `status` rendering, and progress/prompt helpers.

pub mod age;
pub mod progress;
pub mod status;
pub mod table;

use std::io::Write;
use std::sync::OnceLock;

use serde::Serialize;

pub use table::{Cell, Style, Table};

static COMMAND_NAME: OnceLock<&'static str> = OnceLock::new();

/// Records how the user invoked druidctl: `kubectl druid` when run as the `kubectl-druid` plugin.
pub fn set_command_name(name: &'static str) {
    let _ = COMMAND_NAME.set(name);
}

/// How messages name the program: `druidctl` or `kubectl druid`.
pub fn command_name() -> &'static str {
    COMMAND_NAME.get().copied().unwrap_or("druidctl")
}

/// Columns the terminal has: `COLUMNS` when set to a number (shells export it; tests set it), else 120. The
/// per-member table of `status` never uses more than 120 even on a wider terminal.
pub fn terminal_width() -> usize {
    std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse::<usize>().ok()).filter(|w| *w >= 40).unwrap_or(120)
}

/// Columns a progress line may use: `COLUMNS` when set to a number, else the width of the terminal on stderr
/// (or stdout), else 120.
pub fn line_width() -> usize {
    if let Some(w) = std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse::<usize>().ok()).filter(|w| *w >= 20) {
        return w;
    }
    for fd in [2, 1] {
        // SAFETY: TIOCGWINSZ only fills the winsize struct passed to it.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        if unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_col >= 20 {
            return ws.ws_col as usize;
        }
    }
    120
}

/// `s` shortened to at most `width` characters, ending in `…` when something was cut.
pub fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    out.truncate(out.trim_end().len());
    out.push('…');
    out
}

/// `text` broken into lines of at most `width` characters at spaces (a word longer than `width` stays whole).
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    wrap_hanging(text, width, width)
}

/// Like [`wrap`], with the first line `first` characters wide and the following ones `rest` (the first line
/// follows a label, the others a hanging indent).
pub fn wrap_hanging(text: &str, first: usize, rest: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let width = if lines.is_empty() { first } else { rest };
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// `-o/--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns for people.
    #[default]
    Table,
    /// The table with more columns.
    Wide,
    /// JSON: API objects, or the documented schema of the command.
    Json,
    /// YAML of the same content as `json`.
    Yaml,
    /// `kind.group/name` per object.
    Name,
    /// One JSON document per line (streams).
    Jsonl,
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    /// Color when stdout is a terminal and `NO_COLOR` is unset.
    #[default]
    Auto,
    /// Always color.
    Always,
    /// Never color.
    Never,
}

/// Decides whether to color: `always`/`never` win; `auto` colors only on a terminal without `NO_COLOR`.
pub fn use_color(choice: ColorChoice, no_color_env: Option<&str>, stdout_is_terminal: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => stdout_is_terminal && no_color_env.is_none_or(str::is_empty),
    }
}

/// Errors of the printer.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// Writing to stdout failed (e.g. a closed pipe).
    #[error("cannot write output: {0}")]
    Io(#[from] std::io::Error),
    /// The format does not apply to this command.
    #[error("output format {0:?} is not supported by this command")]
    Unsupported(&'static str),
}

impl OutputError {
    /// Whether the reader of stdout went away (a closed pipe: `druidctl logs ETCD | head -1`). Not a failure
    /// worth a word: the command ends quietly, as coreutils and kubectl do.
    pub fn is_closed_pipe(&self) -> bool {
        matches!(self, OutputError::Io(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// Something the printer can show in every format.
pub trait Printable {
    /// The table (`wide` adds columns).
    fn table(&self, wide: bool) -> Table;
    /// The value for `json`/`yaml`.
    fn document(&self) -> serde_json::Value;
    /// `kind.group/name` lines for `-o name`.
    fn names(&self) -> Vec<String>;
}

/// Writes command results to stdout in the chosen format.
pub struct Printer {
    format: OutputFormat,
    color: bool,
    out: Box<dyn Write + Send>,
}

impl Printer {
    /// A printer to stdout.
    pub fn stdout(format: OutputFormat, color: bool) -> Printer {
        Printer { format, color, out: Box::new(std::io::stdout()) }
    }
    /// A printer to any writer (tests).
    pub fn to_writer(format: OutputFormat, color: bool, out: Box<dyn Write + Send>) -> Printer {
        Printer { format, color, out }
    }
    /// The chosen format.
    pub fn format(&self) -> OutputFormat {
        self.format
    }
    /// Whether color is on.
    pub fn color(&self) -> bool {
        self.color
    }
    /// Prints `item` in the chosen format.
    pub fn print(&mut self, item: &dyn Printable) -> Result<(), OutputError> {
        match self.format {
            OutputFormat::Table | OutputFormat::Wide => {
                let t = item.table(self.format == OutputFormat::Wide);
                write!(self.out, "{}", t.render(self.color))?;
            }
            OutputFormat::Json => self.json(&item.document())?,
            OutputFormat::Jsonl => self.jsonl(&item.document())?,
            OutputFormat::Yaml => self.yaml(&item.document())?,
            OutputFormat::Name => {
                for n in item.names() {
                    writeln!(self.out, "{n}")?;
                }
            }
        }
        self.out.flush()?;
        Ok(())
    }
    /// Prints raw text (already rendered for a person).
    pub fn text(&mut self, text: &str) -> Result<(), OutputError> {
        write!(self.out, "{text}")?;
        self.out.flush()?;
        Ok(())
    }
    /// Pretty JSON.
    pub fn json<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), OutputError> {
        let s = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
        writeln!(self.out, "{s}")?;
        Ok(())
    }
    /// One JSON document on one line.
    pub fn jsonl<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), OutputError> {
        let s = serde_json::to_string(value).map_err(std::io::Error::other)?;
        writeln!(self.out, "{s}")?;
        self.out.flush()?;
        Ok(())
    }
    /// YAML.
    pub fn yaml<T: Serialize>(&mut self, value: &T) -> Result<(), OutputError> {
        let s = serde_saphyr::to_string(value).map_err(std::io::Error::other)?;
        write!(self.out, "{s}")?;
        Ok(())
    }
}

/// Wraps API objects as kubectl does for several: `{"apiVersion":"v1","kind":"List","items":[…]}`.
pub fn list_document(items: Vec<serde_json::Value>) -> serde_json::Value {
    serde_json::json!({ "apiVersion": "v1", "kind": "List", "metadata": {}, "items": items })
}

/// Objects as `-o json|yaml` shows them: one object alone, several as a `v1` `List` (as kubectl does).
pub fn objects_document<T: serde::Serialize>(objects: &[T]) -> serde_json::Value {
    let mut items: Vec<serde_json::Value> =
        objects.iter().map(|o| serde_json::to_value(o).unwrap_or_default()).collect();
    if items.len() == 1 { items.pop().unwrap_or_default() } else { list_document(items) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn color_policy() {
        assert!(!use_color(ColorChoice::Auto, None, false), "never off a terminal");
        assert!(use_color(ColorChoice::Auto, None, true));
        assert!(!use_color(ColorChoice::Auto, Some("1"), true), "NO_COLOR");
        assert!(use_color(ColorChoice::Auto, Some(""), true), "empty NO_COLOR is unset");
        assert!(use_color(ColorChoice::Always, Some("1"), false), "explicit flag wins");
        assert!(!use_color(ColorChoice::Never, None, true));
    }

    #[test]
    fn fit_cuts_with_an_ellipsis_and_wrap_breaks_at_spaces() {
        assert_eq!(fit("short", 10), "short");
        assert_eq!(fit("waiting: pod etcd-main-2 is not ready", 20), "waiting: pod etcd-m…");
        assert_eq!(fit("a b c d e f", 4), "a b…");
        assert_eq!(fit("a b c d e f", 4).chars().count(), 4);
        assert_eq!(wrap("one two three four", 9), ["one two", "three", "four"]);
        assert_eq!(wrap("averyveryverylongword x", 5), ["averyveryverylongword", "x"]);
        assert_eq!(wrap("", 5), [""]);
        assert_eq!(wrap_hanging("one two three four", 3, 9), ["one", "two three", "four"]);
    }
}
