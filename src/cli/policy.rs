//! `custodian policy`: inspect process.run policy decisions.

use std::process::ExitCode;

/// Subcommands of `custodian policy`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Print the match target and the decision for an invocation.
    Explain,
}

pub(crate) fn main(cmd: Command) -> ExitCode {
    match cmd {
        Command::Explain => super::unavailable("policy explain"),
    }
}
