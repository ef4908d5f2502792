//! Subcommands of the `custodian` binary, one module each.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[cfg(feature = "mcp")]
mod mcp;
mod node;
mod policy;
mod run;
mod spill;

/// custodian owns the lifecycle of what agent tools create: governed
/// processes, request-owned cleanup and bounded spill retention.
#[derive(Debug, Parser)]
#[command(name = "custodian", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one governed process and print its evidence JSON.
    Run(run::Args),
    /// Write, read and sweep spilled tool results.
    #[command(subcommand)]
    Spill(spill::Command),
    /// Serve the edge–node wire for one workspace.
    Node(node::Args),
    /// Inspect process.run policy decisions.
    #[command(subcommand)]
    Policy(policy::Command),
    /// Serve governed process_run and spill_read to an MCP client on stdio.
    #[cfg(feature = "mcp")]
    Mcp(mcp::Args),
}

impl Cli {
    pub(crate) fn dispatch(self) -> ExitCode {
        match self.command {
            Command::Run(args) => run::main(args),
            Command::Spill(cmd) => spill::main(cmd),
            Command::Node(args) => node::main(args),
            Command::Policy(cmd) => policy::main(cmd),
            #[cfg(feature = "mcp")]
            Command::Mcp(args) => mcp::main(args),
        }
    }
}

/// Logs go to stderr so that stdout stays a clean JSON channel.
pub(crate) fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CUSTODIAN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
