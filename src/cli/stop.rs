//! The host's stop signals: `SIGTERM`, `SIGINT` and `SIGHUP`, caught so that
//! a command cancels what it runs and cleans up before it exits, instead of
//! dying with its work left behind.
//!
//! Installing the handlers replaces the signals' default action (terminate)
//! for the whole process: once [`StopSignals::install`] returned, a stop
//! signal is only ever a message to the command, however many arrive. The
//! children a command launches start with the default action again (`exec`
//! resets caught signals).

use custodian::process::evidence::StopSignal;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// The exit code of a command that stopped because of `signal`: the shell's
/// `128 + N` (143 for `SIGTERM`, 130 for `SIGINT`, 129 for `SIGHUP`), the
/// code a supervisor expects from a process its signal ended.
pub(crate) fn exit_code(signal: StopSignal) -> u8 {
    // 1, 2 and 15: always in range.
    u8::try_from(128 + signal.number()).unwrap_or(u8::MAX)
}

/// The three stop signals, caught.
pub(crate) struct StopSignals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl StopSignals {
    /// Catches `SIGTERM`, `SIGINT` and `SIGHUP` from now on. Must be called
    /// inside a tokio runtime with the signal driver (`enable_all`).
    ///
    /// # Errors
    ///
    /// The error of registering a handler (the runtime has no signal
    /// driver, or the OS refused).
    pub(crate) fn install() -> std::io::Result<StopSignals> {
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// Waits for the next stop signal (one already delivered since
    /// [`StopSignals::install`] is returned at once).
    pub(crate) async fn recv(&mut self) -> StopSignal {
        // `recv` yields `None` only once the runtime shuts down; a signal
        // that can no longer arrive is waited for forever.
        tokio::select! {
            Some(()) = self.term.recv() => StopSignal::Term,
            Some(()) = self.int.recv() => StopSignal::Int,
            Some(()) = self.hup.recv() => StopSignal::Hup,
            else => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_the_shells() {
        assert_eq!(exit_code(StopSignal::Term), 143);
        assert_eq!(exit_code(StopSignal::Int), 130);
        assert_eq!(exit_code(StopSignal::Hup), 129);
    }
}
