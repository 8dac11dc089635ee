//! Progress bars for long work (indicatif), drawn on stderr only: hidden with the global
//! `--quiet` and whenever stderr is not a terminal, so pipes, files and tests see none.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

static QUIET: AtomicBool = AtomicBool::new(false);

/// Turns every progress bar of this process off (`--quiet`).
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether `--quiet` was given (for notes that only it should silence).
pub fn quiet_flag() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Whether bars are off: `--quiet` was given or stderr is not a terminal.
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed) || !std::io::stderr().is_terminal()
}

/// A bar of `len` steps labelled `what` (e.g. "simulating"), or a hidden one when [`quiet`].
/// Callers `inc(1)` per finished step and `finish_and_clear()` at the end.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    if quiet() {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{msg:>12} [{elapsed_precise}] {wide_bar} {pos}/{len} ETA {eta}") {
        b.set_style(style);
    }
    b.set_message(what.to_string());
    b
}

/// A spinner for work of unknown length (reading a large trace), hidden when [`quiet`].
pub fn spinner(what: &str) -> ProgressBar {
    if quiet() {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} [{elapsed_precise}]") {
        b.set_style(style);
    }
    b.set_message(what.to_string());
    b.enable_steady_tick(std::time::Duration::from_millis(120));
    b
}
