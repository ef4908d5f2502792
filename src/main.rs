//! The `custodian` command line: raw arguments → validated configuration →
//! a library call. The library never sees a flag.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    cli::prepare_early();
    let parsed = cli::Cli::parse();
    cli::init_tracing();
    parsed.dispatch()
}
