//! `custodian spill`: the spill store and its retention sweep.

use std::process::ExitCode;

/// Subcommands of `custodian spill`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Run one retention sweep and print its report.
    Sweep,
    /// Write a spilled result and print its locator.
    Write,
    /// Print the content behind a locator.
    Read,
}

pub(crate) fn main(cmd: Command) -> ExitCode {
    match cmd {
        Command::Sweep => super::unavailable("spill sweep"),
        Command::Write => super::unavailable("spill write"),
        Command::Read => super::unavailable("spill read"),
    }
}
