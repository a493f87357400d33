//! What a pull shows while it runs.

use std::io::{self, IsTerminal};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Bars on a terminal, plain lines otherwise, nothing when quiet.
#[derive(Clone)]
pub(super) struct Ui {
    quiet: bool,
    pub(super) multi: Option<MultiProgress>,
}

impl Ui {
    pub(super) fn new(quiet: bool) -> Ui {
        let multi = (!quiet && io::stderr().is_terminal())
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        Ui { quiet, multi }
    }

    pub(super) fn line(&self, s: &str) {
        if self.quiet {
            return;
        }
        match &self.multi {
            Some(m) => {
                let _ = m.println(s);
            }
            None => eprintln!("{s}"),
        }
    }

    pub(super) fn bar(&self, len: u64, label: String) -> ProgressBar {
        match &self.multi {
            Some(m) => {
                let b = m.add(ProgressBar::new(len));
                // Without a known size (a directory source) a spinner and a byte count.
                let template = if len == 0 {
                    "{prefix:>20} {spinner} {bytes:>10} {bytes_per_sec}"
                } else {
                    "{prefix:>20} [{bar:30}] {bytes:>10}/{total_bytes:10} {bytes_per_sec}"
                };
                b.set_style(
                    ProgressStyle::with_template(template)
                        .expect("template")
                        .progress_chars("=> "),
                );
                b.set_prefix(label);
                b
            }
            None => ProgressBar::hidden(),
        }
    }
}

pub(super) fn short(digest: &str) -> &str {
    let hex = digest.split_once(':').map_or(digest, |(_, h)| h);
    &hex[..hex.len().min(12)]
}

/// Sizes in messages and bars: binary units (KiB, MiB, GiB), as everywhere in gpurun.
pub(super) fn mb(bytes: u64) -> String {
    crate::units::human_size(bytes)
}
