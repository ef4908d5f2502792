//! `custodian mcp`: serve governed `process_run`, `spill_read` and the
//! session tools to an MCP client on stdio.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use custodian::contain::Containment;
use custodian::mcp::{Ended, McpConfig};
use custodian::process::env::{SecretError, SecretValue};
use custodian::process::invocation::SecretRef;
use custodian::spill::SpillConfig;

use super::units::{parse_duration, parse_size};

const AFTER_HELP: &str = "\
Speaks MCP (JSON-RPC) on stdin/stdout; logs go to stderr (CUSTODIAN_LOG=info).
Tools: process_run (executable + argv, workspace-relative cwd, env overlay,
timeout_ms), spill_read (a byte range of a spilled output), and process_start,
process_read, process_write, process_signal, process_list (a process that
outlives its call, stopped when the session ends). See docs/mcp.md.

Example client entry (the `mcpServers` map most clients read):
  \"custodian\": {\"command\": \"custodian\",
                \"args\": [\"mcp\", \"--workspace\", \"/path/to/project\",
                         \"--policy\", \"/path/to/policy.toml\"]}

Stopping: when the client closes stdin (or dies), or on SIGTERM, SIGINT or
SIGHUP, every call in flight is cancelled at once (SIGTERM to its tree,
--shutdown-grace, SIGKILL), reaped and cleaned up, and its result still
sent; a further signal changes nothing.

Exit status: 0 the client closed the session (every request still open was
cleaned up); 129/130/143 stopped by SIGHUP/SIGINT/SIGTERM, after the same
cleanup; 65/66 the --policy file is invalid / not readable; 1 the
workspace or the spill store could not be opened, a budget is out of range,
or the session failed.";

/// Arguments of `custodian mcp`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct Args {
    /// The workspace root processes run in (each call gets its own job
    /// namespace under it).
    #[arg(long, value_name = "DIR")]
    workspace: PathBuf,
    /// Decide every process_run with this policy file: deny → a tool
    /// error; require_approval → an elicitation (when the client supports
    /// it), else a tool error with the exact override. Without it every
    /// call is allowed.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// The provenance assumed for every call (MCP carries none).
    #[arg(long, value_enum, default_value = "untrusted", requires = "policy")]
    provenance: super::policy::ProvenanceArg,
    /// The spill root (default: a fresh per-process root under the temp
    /// directory). The startup sweep runs over it when the server starts.
    #[arg(long, value_name = "DIR")]
    spill_root: Option<PathBuf>,
    /// How processes are contained: `auto`, `cgroup`, `group`, `subreaper`.
    #[arg(long, value_name = "TIER", default_value = "auto", value_parser = containment)]
    containment: Containment,
    #[command(flatten)]
    confine: super::run::ConfineArgs,
    #[command(flatten)]
    proxy: super::run::ProxyArgs,
    /// Bytes per stream kept inline in a result; a larger stream is spilled.
    #[arg(long, value_name = "SIZE", default_value = "16KiB", value_parser = size)]
    inline_budget: usize,
    /// Bytes per stream captured and spilled at most (head and tail beyond
    /// it); at most 64MiB.
    #[arg(long, value_name = "SIZE", default_value = "8MiB", value_parser = size)]
    spill_cap: usize,
    /// The timeout of a call that names none.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    default_timeout: Duration,
    /// How often progress is reported while a process runs.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    progress_every: Duration,
    /// When the server stops (stdin closed, or a stop signal): the grace
    /// between SIGTERM and SIGKILL for every call still running. Below the
    /// 2 s after which the MCP SDKs kill a server they closed.
    #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = parse_duration)]
    shutdown_grace: Duration,
    /// Make the secret reference NAME resolve to this server's environment
    /// variable NAME (repeatable). Only listed names resolve; the value is
    /// read once at start and never printed.
    #[arg(long = "secret-env", value_name = "NAME")]
    secret_env: Vec<String>,
}

/// The log subscriber of the server: `CUSTODIAN_LOG` as everywhere, but the
/// MCP SDK never below `info`. At `debug` it logs every request with its
/// arguments, and a `process_run`'s arguments hold the environment overlay.
fn subscriber() -> impl tracing::Subscriber + Send + Sync {
    use tracing_subscriber::EnvFilter;
    let (filter, sdk) = match EnvFilter::try_from_env("CUSTODIAN_LOG") {
        Ok(f) => (f, "rmcp=info"),
        Err(_) => (EnvFilter::new("warn"), "rmcp=warn"),
    };
    let filter = match sdk.parse() {
        Ok(d) => filter.add_directive(d),
        Err(_) => filter,
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .finish()
}

fn containment(v: &str) -> Result<Containment, String> {
    v.parse()
        .map_err(|e: custodian::contain::UnknownContainment| e.to_string())
}

fn size(v: &str) -> Result<usize, String> {
    let bytes = parse_size(v).map_err(|e| e.to_string())?;
    usize::try_from(bytes).map_err(|_| format!("{bytes} bytes do not fit in memory here"))
}

pub(crate) fn main(args: Args) -> ExitCode {
    let policy = match &args.policy {
        None => None,
        Some(path) => match super::policy::load_policy(path) {
            Ok(p) => Some(p),
            Err(code) => return code,
        },
    };
    // Snapshot the named variables now; a missing one resolves to
    // `not_found` at launch, never to an empty value.
    let secrets: HashMap<String, SecretValue> = args
        .secret_env
        .iter()
        .filter_map(|name| {
            std::env::var(name)
                .ok()
                .map(|v| (name.clone(), SecretValue::new(v)))
        })
        .collect();
    let resolver = move |r: &SecretRef| -> Result<SecretValue, SecretError> {
        secrets
            .get(r.as_str())
            .cloned()
            .ok_or(SecretError::NotFound)
    };
    let mut config = McpConfig::new(&args.workspace);
    config.policy = policy;
    config.provenance = args.provenance.into();
    config.containment = args.containment;
    config.confinement = args.confine.confinement();
    config.proxy = match args.proxy.proxy() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("custodian mcp: the network proxy could not be started: {e}");
            return ExitCode::from(70);
        }
    };
    config.spill = match args.spill_root {
        Some(root) => SpillConfig::default().with_root(root),
        None => SpillConfig::default(),
    };
    config.inline_budget = args.inline_budget;
    config.spill_cap = args.spill_cap;
    config.default_timeout = args.default_timeout;
    config.progress_every = args.progress_every;
    config.shutdown_grace = args.shutdown_grace;
    config.secrets = Arc::new(resolver);
    if args.containment == Containment::Subreaper {
        if let Err(e) = custodian::process::enable_subreaper() {
            eprintln!("custodian mcp: --containment subreaper: {e}");
            return ExitCode::FAILURE;
        }
    }
    // One thread: every task of the server runs inside `block_on` on this
    // thread, so the scoped subscriber below sees all of them.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("custodian mcp: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let served = tracing::subscriber::with_default(subscriber(), || {
        rt.block_on(async {
            let mut stops = match super::stop::StopSignals::install() {
                Ok(s) => s,
                Err(e) => return Err(format!("catching the stop signals: {e}")),
            };
            let stop = async move {
                let first = stops.recv().await;
                eprintln!(
                    "custodian mcp: {}: stopping (every call: SIGTERM, {} grace, SIGKILL; then cleanup)",
                    first.name(),
                    humantime::format_duration(args.shutdown_grace)
                );
                // Later signals are caught (they cannot kill the server
                // mid-cleanup) and only said.
                tokio::spawn(async move {
                    loop {
                        let again = stops.recv().await;
                        eprintln!(
                            "custodian mcp: {}: already stopping; the cleanups still run",
                            again.name()
                        );
                    }
                });
                first
            };
            let io = (tokio::io::stdin(), tokio::io::stdout());
            custodian::mcp::serve_until(config, io, stop)
                .await
                .map_err(|e| e.to_string())
        })
    });
    // Stdin is read on a blocking thread that a client which keeps stdin
    // open never releases: do not wait for it.
    rt.shutdown_background();
    match served {
        Ok(Ended::Stopped(signal)) => ExitCode::from(super::stop::exit_code(signal)),
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("custodian mcp: {e}");
            ExitCode::FAILURE
        }
    }
}
