//! A progress bar for the long commands (printMsg over a range, statsAll), drawn on
//! stderr and only when stderr is a terminal, so pipes and scripts see clean output.
//! Lines for stdout go through [`Progress::println`], which takes the bar off the
//! line first, so a terminal showing both never gets them mixed.

use std::io::{IsTerminal, Write};

/// Width of the bar, in cells.
const WIDTH: u64 = 30;

/// Progress of `total` steps.
#[derive(Debug)]
pub struct Progress {
    label: &'static str,
    total: u64,
    done: u64,
    shown: bool,
}

impl Progress {
    /// A bar for `total` steps; draws nothing unless stderr is a terminal.
    pub fn new(label: &'static str, total: u64) -> Self {
        Self {
            label,
            total,
            done: 0,
            shown: std::io::stderr().is_terminal() && total > 0,
        }
    }

    /// `n` more steps done.
    pub fn advance(&mut self, n: u64) {
        self.done = (self.done + n).min(self.total);
        self.draw();
    }

    fn draw(&self) {
        if !self.shown {
            return;
        }
        let filled = self.done * WIDTH / self.total.max(1);
        let bar: String = (0..WIDTH)
            .map(|i| if i < filled { '#' } else { '-' })
            .collect();
        let mut e = std::io::stderr();
        let _ = write!(e, "\r{} [{bar}] {}/{}", self.label, self.done, self.total);
        let _ = e.flush();
    }

    fn clear(&self) {
        if self.shown {
            let mut e = std::io::stderr();
            let _ = write!(e, "\r{:width$}\r", "", width = 80);
            let _ = e.flush();
        }
    }

    /// Prints `line` on stdout with the bar out of its way, then draws the bar again.
    pub fn println(&self, line: &str) {
        self.clear();
        let mut out = std::io::stdout();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
        self.draw();
    }

    /// Clears the bar's line.
    pub fn finish(self) {
        self.clear();
    }
}
