//! Termination signals for the server binaries: SIGINT and SIGTERM start a graceful
//! shutdown instead of killing the process, so the broker can flush and persist offsets and
//! the name server can finish in-flight requests.
//!
//! Install the handlers early ([`TerminationSignals::install`]), before the process
//! announces that it is ready: a signal that arrives before installation still kills the
//! process with the default action.

use std::io;

use async_signal::{Signal, Signals};
use async_std::stream::StreamExt;

/// Which termination signal arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM (service managers, `kill`).
    Terminate,
}

/// Installed SIGINT/SIGTERM handlers; while this lives, those signals no longer kill the
/// process but are reported by [`wait`](Self::wait).
#[derive(Debug)]
pub struct TerminationSignals {
    signals: Signals,
}

impl TerminationSignals {
    /// Replaces the default action of SIGINT and SIGTERM (SIGINT only on Windows).
    pub fn install() -> io::Result<Self> {
        #[cfg(unix)]
        let wanted = [Signal::Int, Signal::Term];
        #[cfg(not(unix))]
        let wanted = [Signal::Int];
        Ok(Self {
            signals: Signals::new(wanted)?,
        })
    }

    /// Resolves at the next SIGINT or SIGTERM.
    pub async fn wait(&mut self) -> Termination {
        loop {
            match self.signals.next().await {
                Some(Ok(Signal::Int)) => return Termination::Interrupt,
                #[cfg(unix)]
                Some(Ok(Signal::Term)) => return Termination::Terminate,
                Some(_) => continue,
                // The stream never ends while `signals` lives; wait forever rather than
                // reporting a signal that did not come.
                None => std::future::pending::<()>().await,
            }
        }
    }
}

/// Installs the handlers and waits for SIGINT or SIGTERM. Prefer
/// [`TerminationSignals::install`] at startup when a signal must not be lost.
pub async fn wait_for_termination() -> io::Result<Termination> {
    let mut s = TerminationSignals::install()?;
    Ok(s.wait().await)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::runtime::{block_on, timeout};
    use std::time::Duration;

    #[test]
    fn sigterm_is_reported_instead_of_killing_the_process() {
        block_on(async {
            let mut s = TerminationSignals::install().unwrap();
            let me = std::process::id().to_string();
            let status = std::process::Command::new("kill")
                .args(["-TERM", &me])
                .status()
                .unwrap();
            assert!(status.success());
            let got = timeout(Duration::from_secs(5), s.wait()).await.unwrap();
            assert_eq!(got, Termination::Terminate);
        });
    }
}
