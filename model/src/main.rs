//! `custodian-model`: check every model, or explore one in a browser.
//!
//! - `custodian-model check` checks every model configuration and every
//!   deliberately broken variant, prints per run the states explored, the
//!   unique states, the maximum depth, the seconds taken and each property's
//!   verdict, and exits non-zero if a real model violates a property, a
//!   pinned state count changed, or a broken variant was not caught.
//! - `custodian-model explore [--port N] [--model NAME]` serves stateright's
//!   explorer for one model on `127.0.0.1`.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use custodian_model::check;
use std::fmt;
use std::hash::Hash;

use custodian_model::process::{self, ProcessModel};
use custodian_model::request::{Real, RequestModel, broken};
use stateright::Model;

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
}

const MODELS: [&str; 12] = [
    "request",
    "process",
    "process/broken/signal-after-settle",
    "process/broken/settle-twice",
    "process/broken/kill-before-grace",
    "request/broken/double-cleanup",
    "request/broken/complete-before-cleanup",
    "request/broken/success-despite-cleanup-failure",
    "request/broken/republish-on-duplicate",
    "request/broken/cleanup-before-stop",
    "request/broken/accept-late-open",
    "request/broken/publish-not-the-result",
];

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
    println!("total {total:.2}s on {threads} threads");
    if failed.is_empty() {
        println!("all models hold; every broken variant was caught");
        ExitCode::SUCCESS
    } else {
        println!("FAILED: {}", failed.join(", "));
        ExitCode::FAILURE
    }
}

fn run_explore(port: u16, model: &str, waiters: usize) -> ExitCode {
    if model == "list" {
        for m in MODELS {
            println!("{m}");
        }
        return ExitCode::SUCCESS;
    }
    if !MODELS.contains(&model) {
        eprintln!(
            "error: unknown model {model:?}; models: {}",
            MODELS.join(", ")
        );
        return ExitCode::FAILURE;
    }
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    // stateright panics if it cannot bind; find out first and say why.
    if let Err(e) = TcpListener::bind(addr) {
        eprintln!("error: cannot listen on {addr}: {e}");
        return ExitCode::FAILURE;
    }
    match model {
        "request" => serve(RequestModel::new(Real, waiters), addr),
        "request/broken/double-cleanup" => {
            serve(RequestModel::new(broken::DoubleCleanup, waiters), addr)
        }
        "request/broken/complete-before-cleanup" => serve(
            RequestModel::new(broken::CompleteBeforeCleanup, waiters),
            addr,
        ),
        "request/broken/success-despite-cleanup-failure" => serve(
            RequestModel::new(broken::SuccessDespiteCleanupFailure, waiters),
            addr,
        ),
        "request/broken/republish-on-duplicate" => serve(
            RequestModel::new(broken::RepublishOnDuplicate, waiters),
            addr,
        ),
        "request/broken/cleanup-before-stop" => {
            serve(RequestModel::new(broken::CleanupBeforeStop, waiters), addr)
        }
        "request/broken/accept-late-open" => {
            serve(RequestModel::new(broken::AcceptLateOpen, waiters), addr)
        }
        "request/broken/publish-not-the-result" => serve(
            RequestModel::new(broken::PublishNotTheResult, waiters),
            addr,
        ),
        "process" => serve(ProcessModel::new(process::Real), addr),
        "process/broken/signal-after-settle" => {
            serve(ProcessModel::new(process::broken::SignalAfterSettle), addr)
        }
        "process/broken/settle-twice" => {
            serve(ProcessModel::new(process::broken::SettleTwice), addr)
        }
        "process/broken/kill-before-grace" => {
            serve(ProcessModel::new(process::broken::KillBeforeGrace), addr)
        }
        other => {
            eprintln!(
                "error: unknown model {other:?}; models: {}",
                MODELS.join(", ")
            );
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn serve<M>(model: M, addr: SocketAddr)
where
    M: Model + fmt::Debug + Send + Sync + 'static,
    M::State: fmt::Debug + Hash + Clone + PartialEq + Send + Sync,
    M::Action: fmt::Debug + Clone + PartialEq + Send + Sync,
{
    println!("serving {model:?} on http://{addr}/ (Ctrl-C to stop)");
    let _checker = model.checker().serve(addr);
}
