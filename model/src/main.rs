//! `custodian-model`: check every model, explore one in a browser, or draw a
//! counterexample.
//!
//! - `custodian-model check` checks every model configuration and every
//!   deliberately broken variant, prints per run the states explored, the
//!   unique states, the maximum depth, the seconds taken and each property's
//!   verdict, and exits non-zero if a real model violates a property (other
//!   than a listed known violation), a pinned state count changed, or a
//!   broken variant was not caught.
//! - `custodian-model explore [--port N] [--model NAME]` serves stateright's
//!   explorer for one model on `127.0.0.1`, with actions by name and compact
//!   states.
//! - `custodian-model counterexample --variant NAME [--property P]
//!   [--mermaid FILE] [--html FILE]` finds a path that breaks the property
//!   (by default the one the broken variant breaks) and writes it as a
//!   mermaid sequence diagram, and optionally as an HTML page that renders
//!   it.

use std::fmt;
use std::hash::Hash;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use custodian_model::catalog::{self, Visit};
use custodian_model::check;
use custodian_model::explain::Narrate;

#[derive(Parser)]
#[command(
    name = "custodian-model",
    about = "Model-check custodian's state machines"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check every model and broken variant; non-zero exit on any failure.
    Check {
        /// Checker threads (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Serve stateright's web explorer for one model on 127.0.0.1.
    Explore {
        /// TCP port.
        #[arg(long, default_value_t = 3000)]
        port: u16,
        /// Which model (see `custodian-model explore --model list`).
        #[arg(long, default_value = "request")]
        model: String,
        /// Waiters in the request model (ignored by the process model).
        #[arg(long, default_value_t = 2)]
        waiters: usize,
    },
    /// Find a path that breaks a property and draw it as a mermaid
    /// sequence diagram.
    Counterexample {
        /// Which model or broken variant (`list` prints the names).
        #[arg(long)]
        variant: String,
        /// The property (default: the one the broken variant breaks).
        #[arg(long)]
        property: Option<String>,
        /// Write the mermaid text here (default: standard output).
        #[arg(long)]
        mermaid: Option<PathBuf>,
        /// Also write an HTML page that renders the diagram.
        #[arg(long)]
        html: Option<PathBuf>,
        /// The mermaid script the HTML page loads, relative to the page.
        #[arg(long, default_value = "mermaid.min.js")]
        mermaid_js: String,
        /// Waiters in the request model.
        #[arg(long, default_value_t = 1)]
        waiters: usize,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Check { threads } => {
            let threads = threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
                .max(1);
            run_check(threads)
        }
        Command::Explore {
            port,
            model,
            waiters,
        } => run_explore(port, &model, waiters),
        Command::Counterexample {
            variant,
            property,
            mermaid,
            html,
            mermaid_js,
            waiters,
        } => {
            if variant == "list" {
                for m in catalog::names() {
                    println!("{m}");
                }
                return ExitCode::SUCCESS;
            }
            let d = match catalog::counterexample(&variant, property.as_deref(), waiters) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let text = d.mermaid();
            let written = match &mermaid {
                Some(path) => {
                    std::fs::write(path, &text).map(|()| eprintln!("wrote {}", path.display()))
                }
                None => {
                    print!("{text}");
                    Ok(())
                }
            };
            let written = written.and_then(|()| match &html {
                Some(path) => std::fs::write(path, d.html(&mermaid_js))
                    .map(|()| eprintln!("wrote {}", path.display())),
                None => Ok(()),
            });
            match written {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: cannot write: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn run_check(threads: usize) -> ExitCode {
    let mut failed = Vec::new();
    let mut total = 0.0;
    for r in check::all(threads) {
        print!("{r}");
        total += r.seconds;
        if !r.ok() {
            failed.push(r.name.clone());
        }
        println!();
    }
    for p in check::all_progress(threads) {
        println!("== progress: {}", p.name);
        println!(
            "  {} states, {} edges, {:.2}s; {} trap(s): \"{}\" {}",
            p.states,
            p.edges,
            p.seconds,
            p.traps,
            p.property,
            match (p.traps > 0, p.expect_trap) {
                (false, false) => "holds",
                (true, true) => "broken, as intended",
                (true, false) => "FAILS",
                (false, true) => "NOT CAUGHT",
            }
        );
        if let Some(path) = p.trap_path.as_ref().filter(|_| p.traps > 0) {
            println!("  the shortest path to a trap:");
            for line in path.lines() {
                println!("    {line}");
            }
        }
        total += p.seconds;
        if !p.as_expected() {
            failed.push(p.name.clone());
        }
        println!();
    }
    println!("total {total:.2}s on {threads} threads");
    if failed.is_empty() {
        println!("all models hold; every broken variant was caught");
        ExitCode::SUCCESS
    } else {
        println!("FAILED: {}", failed.join(", "));
        ExitCode::FAILURE
    }
}

struct Serve(SocketAddr, String);

impl Visit for Serve {
    type Out = ();

    fn visit<M>(self, model: M, _breaks: Option<&'static str>)
    where
        M: Narrate + Send + Sync + 'static,
        M::State: fmt::Debug + Hash + Clone + PartialEq + Send + Sync + 'static,
        M::Action: fmt::Debug + Clone + PartialEq + Send + Sync + 'static,
    {
        println!("serving {} on http://{}/ (Ctrl-C to stop)", self.1, self.0);
        let _checker = model.checker().serve(self.0);
    }
}

fn run_explore(port: u16, model: &str, waiters: usize) -> ExitCode {
    if model == "list" {
        for m in catalog::names() {
            println!("{m}");
        }
        return ExitCode::SUCCESS;
    }
    if !catalog::NAMES.contains(&model) {
        eprintln!(
            "error: unknown model {model:?}; models: {}",
            catalog::names().join(", ")
        );
        return ExitCode::FAILURE;
    }
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    // stateright panics if it cannot bind; find out first and say why.
    if let Err(e) = TcpListener::bind(addr) {
        eprintln!("error: cannot listen on {addr}: {e}");
        return ExitCode::FAILURE;
    }
    match catalog::with(model, waiters, Serve(addr, model.to_owned())) {
        Some(()) => ExitCode::SUCCESS,
        None => ExitCode::FAILURE,
    }
}
