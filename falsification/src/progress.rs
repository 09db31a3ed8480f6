//! The live status line of a run on a terminal; quiet when stderr is not one (a pipe, CI).

use std::io::IsTerminal as _;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

/// A live status line, or nothing off a terminal.
pub struct Status(Option<ProgressBar>);

impl Status {
    /// A line that counts `steps` to an ETA, among `lines` (one per running case).
    pub fn counting(enabled: bool, steps: usize, lines: &MultiProgress) -> Status {
        Status::on_terminal(enabled, "{msg} ETA {eta}", || {
            lines.add(ProgressBar::new(steps as u64))
        })
    }

    /// A spinning line, for a run whose length is not known ahead.
    pub fn spinning() -> Status {
        Status::on_terminal(true, "{spinner} {msg}", ProgressBar::new_spinner)
    }

    fn on_terminal(enabled: bool, template: &str, bar: impl FnOnce() -> ProgressBar) -> Status {
        Status((enabled && std::io::stderr().is_terminal()).then(|| {
            let bar = bar();
            bar.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        }))
    }

    /// One step on, with the line `message` writes (written only on a terminal).
    pub fn step(&self, message: impl FnOnce() -> String) {
        if let Some(bar) = &self.0 {
            bar.set_message(message());
            bar.inc(1);
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
