//! Subcommands of the `custodian` binary, one module each.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[cfg(feature = "mcp")]
mod mcp;
mod node;
mod policy;
mod run;
mod spill;
mod stop;
mod units;

const AFTER_HELP: &str = "\
Output: machine output on stdout is compact JSON, one object per line
(`run`, `policy explain` and `node` by default, `spill sweep` with --json);
`spill write` prints a locator and `spill read` the spilled bytes. Messages
and logs go to stderr. Each subcommand's --help lists its exit codes.

Environment:
  RUST_LOG       log filter for stderr (tracing-subscriber EnvFilter syntax,
                 e.g. `custodian=debug`); default `warn`
  CUSTODIAN_LOG  the same, and takes precedence over RUST_LOG when set";

/// custodian owns the lifecycle of what agent tools create: governed
/// processes, request-owned cleanup and bounded spill retention.
#[derive(Debug, Parser)]
#[command(name = "custodian", version, about, long_about = None, after_help = AFTER_HELP)]
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

/// Starts the isolation's one-time work before the arguments are parsed
/// when the command line is a confined `run` ([`run::early_confinement`]).
pub(crate) fn prepare_early() {
    if let Some(confinement) = run::early_confinement(std::env::args_os()) {
        custodian::process::prepare_isolation(
            &confinement,
            custodian::process::ExpectedLaunches::One,
        );
    }
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

/// Logs go to stderr so that stdout stays a clean JSON channel. The filter
/// is `CUSTODIAN_LOG`, else `RUST_LOG`, else `warn`.
pub(crate) fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("CUSTODIAN_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}

/// An error and its causes as one line, `outer: cause: root cause`, each
/// cause once.
///
/// Most of the library's errors already end their message with their
/// source's (`open root failed: No such file or directory (os error 2)`)
/// and also return it from `source()`; a context added here (`opening
/// workspace …`) does not. A cause is appended only when the text so far
/// does not already end with it, so neither kind is printed twice or lost.
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let said = cause.to_string();
        if !said.is_empty() && !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        next = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::chain;
    use std::io;

    #[derive(Debug, thiserror::Error)]
    enum Inclusive {
        #[error("open root failed: {0}")]
        Open(#[source] io::Error),
    }

    #[derive(Debug, thiserror::Error)]
    #[error("reading a frame failed")]
    struct Exclusive(#[source] io::Error);

    fn not_found() -> io::Error {
        io::Error::from_raw_os_error(2)
    }

    #[test]
    fn a_source_already_in_the_message_is_not_repeated() {
        let text = chain(&Inclusive::Open(not_found()));
        assert_eq!(text.matches("(os error 2)").count(), 1, "{text}");
        assert!(text.starts_with("open root failed: "), "{text}");
    }

    #[test]
    fn a_source_missing_from_the_message_is_appended() {
        let text = chain(&Exclusive(not_found()));
        assert!(text.starts_with("reading a frame failed: "), "{text}");
        assert_eq!(text.matches("(os error 2)").count(), 1, "{text}");
    }

    #[test]
    fn a_context_keeps_every_cause_once() {
        let e = anyhow::Error::new(Inclusive::Open(not_found())).context("opening workspace /x");
        let text = chain(e.as_ref());
        assert!(
            text.starts_with("opening workspace /x: open root failed: "),
            "{text}"
        );
        assert_eq!(text.matches("(os error 2)").count(), 1, "{text}");
    }
}
