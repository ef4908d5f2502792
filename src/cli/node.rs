//! `custodian node`: serve the edge–node wire for one workspace.

use std::process::ExitCode;

/// Arguments of `custodian node`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The workspace root this node serves.
    #[arg(long)]
    workspace: Option<std::path::PathBuf>,
}

pub(crate) fn main(_args: Args) -> ExitCode {
    super::unavailable("node")
}
