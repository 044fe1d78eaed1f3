//! Where a playground keeps its state and what can break in it: what both the `playground` command and the
//! completion of its flags need, kept below both so that neither imports the other.

use std::path::PathBuf;

/// The state directory: `--dir`, else $DRUIDCTL_PLAYGROUND_DIR, else (when `follow_kubeconfig`) the
/// playground $KUBECONFIG points at, else the default under the XDG state directory.
pub fn state_dir(dir: Option<PathBuf>, follow_kubeconfig: bool) -> PathBuf {
    if let Some(d) =
        dir.or_else(|| std::env::var_os("DRUIDCTL_PLAYGROUND_DIR").filter(|v| !v.is_empty()).map(PathBuf::from))
    {
        return d;
    }
    if follow_kubeconfig && let Some(d) = std::env::var_os("KUBECONFIG").and_then(|k| playground_of_kubeconfig(&k)) {
        return d;
    }
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("druidctl/playground")
}

/// The playground state directory a `KUBECONFIG` value points at: its first entry is `DIR/kubeconfig` and DIR
/// holds a playground's state (its pid file or its record); `None` otherwise.
fn playground_of_kubeconfig(kubeconfig: &std::ffi::OsStr) -> Option<PathBuf> {
    let first = std::env::split_paths(kubeconfig).next()?;
    if first.file_name()? != "kubeconfig" {
        return None;
    }
    let dir = first.parent().filter(|d| !d.as_os_str().is_empty())?;
    let is_state = dir.join("playground.pid").is_file() || dir.join(landscape::external::RECORD_FILE).is_file();
    is_state.then(|| dir.to_path_buf())
}

/// The names `playground break` accepts (for completion; the landscape defines them).
pub fn break_kind_names() -> Vec<&'static str> {
    landscape::BreakKind::ALL.iter().map(|(name, _)| *name).collect()
}
