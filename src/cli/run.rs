//! `custodian run`: one governed process, its evidence on stdout.

use std::process::ExitCode;

/// Arguments of `custodian run`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The executable and its arguments, after `--`.
    #[arg(last = true)]
    command: Vec<String>,
}

pub(crate) fn main(_args: Args) -> ExitCode {
    super::unavailable("run")
}
