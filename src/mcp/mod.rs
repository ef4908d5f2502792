//! An MCP server (Model Context Protocol, over stdio) that puts governed
//! `process.run` behind the interface agent runtimes already speak.
//!
//! # Theory of operation
//!
//! [`serve_stdio`] opens the workspace, reclaims what a dead predecessor left
//! (its journalled requests), activates the spill service (which starts the
//! one startup sweep) and serves its tools with the official Rust SDK
//! (`rmcp`):
//!
//! - `process_run` validates its arguments by hand ([`input`]: typed errors
//!   that never quote a value), asks the policy (deny → a tool error with the
//!   reason; require_approval → an MCP elicitation when the client supports
//!   forms, else a tool error with the match target and the exact override
//!   that would allow it), then runs the invocation as a request of the
//!   [`Runtime`] facade, driven through the request machine
//!   ([`machine::request`](crate::machine::request)) by the runtime's
//!   coordinator: the request opens its job namespace, launches with
//!   containment, and waits (reporting progress, turning
//!   `notifications/cancelled` into the request's cancel); the machine stops
//!   the process and runs the request's exactly-once cleanup, and the result
//!   is returned only once the request completed. The result is the
//!   evidence as structured content plus the same JSON inside the
//!   `<data source="tool">` boundary; a stream larger than the inline budget
//!   is written whole (up to the capture cap) to the spill store and its
//!   locator returned.
//! - `spill_read` returns a bounded byte range of a spilled output.
//! - `process_start`, `process_read`, `process_write`, `process_signal` and
//!   `process_list` run sessions ([`crate::process::session`]): processes
//!   that outlive their call, all of them owned by one request of the
//!   runtime, which is cancelled and cleaned when the MCP session ends.
//!
//! When the client goes away (stdin closes, or the client dies) or the server
//! is told to stop ([`serve_until`]), every call in flight is cancelled at
//! once with a short shutdown grace and cleaned up (each through its
//! request), every request still open is cleaned with the workspace
//! ([`Runtime::shutdown`]), the spill sweep is awaited, and the server
//! returns. A gate in
//! front of the SDK answers what the SDK would answer badly (a request before
//! `initialize`, a line that is not JSON-RPC, a `tools/call` whose arguments
//! are not an object, a duplicate in-flight id).
//!
//! Environment values never leave the server: the child gets the minimal
//! baseline plus the call's overlay, secret references are resolved only at
//! launch and redacted from captured output, and no error or log carries an
//! environment key or value.

mod gate;
pub mod input;
mod output;
mod pump;
pub mod schema;
mod server;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;

pub use output::SPILL_SESSION;
pub use server::CustodianServer;

use crate::contain::Containment;
use crate::policy::{PolicyConfig, Provenance};
use crate::process::env::{Blocking, NoSecrets, SecretResolver};
use crate::process::invocation::MAX_STREAM_BUDGET;
use crate::request::RequestObserver;
use crate::runtime::{Runtime, RuntimeConfig, RuntimeError};
use crate::spill::SpillConfig;
use crate::workspace::{WorkspaceConfig, WorkspaceError};

/// The default bytes per stream kept inline in a result.
pub const DEFAULT_INLINE_BUDGET: usize = 16 * 1024;
/// The default bytes per stream captured (and spilled when larger than the
/// inline budget).
pub const DEFAULT_SPILL_CAP: usize = 8 * 1024 * 1024;
/// The default grace between `SIGTERM` and `SIGKILL` for the calls in
/// flight when the server stops: below the 2 s after which the MCP SDKs'
/// clients kill a server they closed.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// How `custodian mcp` serves.
#[derive(Clone)]
#[non_exhaustive]
pub struct McpConfig {
    /// The workspace root.
    pub workspace: PathBuf,
    /// The policy every `process_run` is decided by; `None` allows all.
    pub policy: Option<PolicyConfig>,
    /// The provenance assumed for every call (MCP carries none).
    pub provenance: Provenance,
    /// How processes are contained.
    pub containment: Containment,
    /// What every process may touch while it runs (default: nothing
    /// confined). Part of the policy's match target, so an approval of a
    /// call binds its confinement too.
    pub confinement: crate::confine::Confinement,
    /// The filtering proxy of network `allow` calls; `None`: the
    /// process-wide one (the system resolver).
    pub proxy: Option<crate::process::NetworkProxy>,
    /// The spill store and its startup sweep.
    pub spill: SpillConfig,
    /// Bytes per stream kept inline in a result.
    pub inline_budget: usize,
    /// Bytes per stream captured, and so spilled at most (head and tail
    /// beyond it). At most [`MAX_STREAM_BUDGET`].
    pub spill_cap: usize,
    /// The timeout of a call that names none.
    pub default_timeout: Duration,
    /// How often progress is reported while a process runs.
    pub progress_every: Duration,
    /// Resolves the overlay's secret references.
    pub secrets: Arc<dyn SecretResolver>,
    /// How long cleanup waits for a request's processes.
    pub cleanup_bound: Duration,
    /// The grace between `SIGTERM` and `SIGKILL` for the calls in flight
    /// when the server stops (default 500 ms, below the 2 s after which the
    /// SDKs' clients kill a server they closed).
    pub shutdown_grace: Duration,
    /// Called with a read-only view of each `process_run` call's request
    /// as soon as the request starts, before its job namespace is opened (a
    /// call the policy refuses, or whose approval is declined, is a request
    /// too, started once the refusal is decided: its completion lists the
    /// refusal in `denied`; one cancelled while the user was asked ends
    /// cancelled):
    /// an embedder's audit trail, or a test's window on the request machine
    /// ([`RequestObserver::log`] lists every committed transition). The
    /// view does not keep the request alive. Called on the call's task: it
    /// must not block. Default: none.
    pub on_request: Option<Arc<dyn Fn(RequestObserver) + Send + Sync>>,
}

impl std::fmt::Debug for McpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpConfig")
            .field("workspace", &self.workspace)
            .field("containment", &self.containment)
            .field("inline_budget", &self.inline_budget)
            .field("spill_cap", &self.spill_cap)
            .finish_non_exhaustive()
    }
}

impl McpConfig {
    /// Defaults for `workspace`: no policy, untrusted provenance, `auto`
    /// containment, the default spill store, 16 KiB inline, 8 MiB cap, a
    /// 30 s timeout, progress every second, no secrets, a 500 ms shutdown
    /// grace, no request hook.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        McpConfig {
            workspace: workspace.into(),
            policy: None,
            provenance: Provenance::Untrusted,
            containment: Containment::Auto,
            confinement: crate::confine::Confinement::default(),
            proxy: None,
            spill: SpillConfig::default(),
            inline_budget: DEFAULT_INLINE_BUDGET,
            spill_cap: DEFAULT_SPILL_CAP,
            default_timeout: crate::process::invocation::DEFAULT_TIMEOUT,
            progress_every: Duration::from_secs(1),
            secrets: Arc::new(NoSecrets),
            cleanup_bound: WorkspaceConfig::default().cleanup_bound,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            on_request: None,
        }
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// A budget is out of range.
    #[error(
        "the inline budget must be 1 byte to the spill cap, and the cap at most {MAX_STREAM_BUDGET} bytes"
    )]
    Budget,
    /// The workspace could not be opened.
    #[error("opening the workspace: {0}")]
    Workspace(#[from] WorkspaceError),
    /// The runtime over the workspace could not be opened for another
    /// reason.
    #[error("opening the runtime: {0}")]
    Runtime(#[source] RuntimeError),
    /// The spill store could not be activated.
    #[error("activating the spill store: {0}")]
    Spill(#[from] crate::spill::ServiceError),
    /// The MCP session failed to start or ended in error.
    #[error("mcp session: {0}")]
    Session(String),
}

/// How a session ended (once every call was cancelled and cleaned up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ended<S> {
    /// The client closed the server's input (a clean close, or the client
    /// died).
    InputClosed,
    /// The stop future given to [`serve_until`] completed with this value
    /// (for `custodian mcp`, the signal that stopped it).
    Stopped(S),
    /// The SDK ended the session by itself (the client's first message was
    /// not a valid `initialize`, or the transport failed).
    SessionEnded,
}

/// Serves MCP on this process's stdin/stdout until the client closes it,
/// then cleans up every request still open. Must run inside a tokio
/// runtime (multi-thread or current-thread, with IO and time enabled).
///
/// # Errors
///
/// An [`McpError`] when the workspace or the spill store cannot be opened or
/// the session fails.
pub async fn serve_stdio(config: McpConfig) -> Result<(), McpError> {
    serve(config, (tokio::io::stdin(), tokio::io::stdout())).await
}

/// [`serve_stdio`] over any byte transport (for tests and embedders).
///
/// # Errors
///
/// As [`serve_stdio`].
pub async fn serve<R, W>(config: McpConfig, io: (R, W)) -> Result<(), McpError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    serve_until(config, io, std::future::pending::<()>())
        .await
        .map(|_| ())
}

/// Serves MCP over `io` until the client closes the input or `stop`
/// completes, whichever is first; then stops at once: every call in flight
/// is cancelled (`SIGTERM`, [`McpConfig::shutdown_grace`], `SIGKILL` of its
/// whole tree) and its request cleaned up, each cancelled call still gets
/// its result (if the client still reads), every request left is cleaned
/// with the workspace, and the spill sweep is awaited. The SDK's own drain
/// of in-flight handlers is never waited for: they have finished by then.
///
/// Every line passes the gate first (`src/mcp/gate.rs`: what the SDK would
/// answer badly, it answers itself).
///
/// # Errors
///
/// As [`serve_stdio`]; a session the SDK refused to start (a first message
/// that is not `initialize`) is [`Ended::SessionEnded`] when it follows a
/// close, else [`McpError::Session`].
pub async fn serve_until<R, W, S>(
    config: McpConfig,
    io: (R, W),
    stop: S,
) -> Result<Ended<S::Output>, McpError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    S: std::future::Future,
{
    if config.inline_budget == 0
        || config.spill_cap > MAX_STREAM_BUDGET
        || config.inline_budget > config.spill_cap
    {
        return Err(McpError::Budget);
    }
    let ws_config = WorkspaceConfig::default().with_cleanup_bound(config.cleanup_bound);
    let internal = config.workspace.join(&ws_config.internal_name);
    // The runtime owns the workspace and drives every call's request; the
    // policy stays here, at the edge, where an approval can be asked for.
    // Without a configured root, spills go to the workspace's internal
    // namespace: the next server on this workspace reads the same root, so
    // a locator stays valid across restarts until the retention sweep.
    let mut spill_config = config.spill.clone();
    if spill_config.root.is_none() {
        spill_config.root = Some(internal.join(DEFAULT_SPILL_DIR));
    }
    // The runtime owns the spill store too (its activation starts the one
    // startup sweep; the store is usable at once): a call's output is
    // spilled through its request, which lists it in its completion.
    let mut runtime_config = RuntimeConfig::new(&config.workspace)
        .with_workspace(ws_config)
        .with_containment(config.containment)
        .with_spill(spill_config)
        // A session's whole output is recorded where `spill_read` reads.
        .with_session_record(
            crate::runtime::SessionRecord::new().with_spill_session(output::SPILL_SESSION),
        )
        .with_secrets(Arc::new(Blocking(Arc::clone(&config.secrets))));
    runtime_config.proxy.clone_from(&config.proxy);
    let runtime = Runtime::open(runtime_config).map_err(|e| match e {
        RuntimeError::Workspace(e) => McpError::Workspace(e),
        RuntimeError::SpillService(e) => McpError::Spill(e),
        e => McpError::Runtime(e),
    })?;
    for (request_id, result) in runtime.reclaim().await {
        tracing::info!(%request_id, status = ?result.status, "reclaimed at start");
    }
    let inner = Arc::new(server::Inner::new(
        runtime.clone(),
        server::Settings {
            policy: config.policy,
            provenance: config.provenance,
            store: runtime.spill_store().cloned(),
            defaults: input::RunDefaults {
                timeout: config.default_timeout,
                capture: config.spill_cap,
                confinement: config.confinement,
            },
            inline_budget: config.inline_budget,
            progress_every: config.progress_every,
            shutdown_grace: config.shutdown_grace,
            cleanup_bound: config.cleanup_bound,
            on_request: config.on_request,
        },
    ));
    let handler = CustodianServer {
        inner: Arc::clone(&inner),
    };

    let (input, output) = io;
    // The SDK talks to the gate over two in-memory pipes.
    let (mut to_sdk, sdk_input) = tokio::io::duplex(PIPE_BYTES);
    let (sdk_output, from_sdk) = tokio::io::duplex(PIPE_BYTES);
    let gate = Arc::new(std::sync::Mutex::new(gate::LineGate::new()));
    let (lines, queue) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    let writer = tokio::spawn(pump::write_lines(output, queue));
    let returning = tokio::spawn(pump::from_sdk(from_sdk, Arc::clone(&gate), lines.clone()));
    let mut session = tokio::spawn(async move {
        match handler.serve((sdk_input, sdk_output)).await {
            Ok(running) => running
                .waiting()
                .await
                .map(|_| ())
                .map_err(|e| McpError::Session(e.to_string())),
            Err(e) => Err(McpError::Session(e.to_string())),
        }
    });
    let mut finished = None;
    let ended = {
        let reading = pump::from_client(input, &gate, &mut to_sdk, &lines);
        tokio::pin!(reading);
        tokio::pin!(stop);
        tokio::select! {
            read = &mut reading => {
                if let Err(e) = read {
                    tracing::warn!(error = %e, "reading the client's input failed; stopping");
                }
                Ended::InputClosed
            }
            s = &mut stop => Ended::Stopped(s),
            r = &mut session => {
                finished = Some(r);
                Ended::SessionEnded
            }
        }
    };
    // Stop now, not after the SDK's drain: cancel every call, wait for its
    // request to complete (its process stopped, its cleanup done).
    inner.stop().await;
    // Then the SDK sees its input close, answers what it still holds and
    // ends.
    drop(to_sdk);
    drop(lines);
    let served = match finished {
        Some(r) => r,
        None => session.await,
    };
    let served = served.unwrap_or_else(|e| Err(McpError::Session(e.to_string())));
    let _ = returning.await;
    let _ = writer.await;
    // Whatever is left (a request still finishing its cleanup) is cleaned
    // with the workspace; then the spill store's startup sweep is awaited.
    for (request_id, result) in runtime.shutdown().await {
        tracing::info!(%request_id, status = ?result.status, "cleaned at shutdown");
    }
    match (served, ended) {
        (Ok(()), e) => Ok(e),
        // A session the SDK ended because the client went away before (or
        // while) it initialized is a close, not a failure.
        (Err(_), e @ (Ended::InputClosed | Ended::Stopped(_))) => Ok(e),
        (Err(e), Ended::SessionEnded) => Err(e),
    }
}

/// The bytes buffered in each direction between the gate and the SDK.
const PIPE_BYTES: usize = 256 * 1024;

/// The directory of the default spill root inside the workspace's internal
/// namespace.
pub const DEFAULT_SPILL_DIR: &str = "spill";
