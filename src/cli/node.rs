//! `custodian node`: serve the edge–node wire for one workspace.
//!
//! On stdio (the default) the node serves one edge until stdin closes; on a
//! Unix socket (`--socket PATH`) it accepts any number of connections from
//! its own uid in its own user namespace (a confined tool, which runs in a
//! user namespace of its own, is refused) until SIGTERM, SIGINT or SIGHUP. Either way it then cleans up every
//! request that is still open, through the same exactly-once cleanup a wire
//! `cleanup_workspace` uses, and exits. An open still running at that moment
//! (sent just before stdin closed) is answered `request_closed` and its job
//! cleaned like the others (the wire contract's *Liveness*).
//!
//! The bounds (connections, open requests, unread answers, deadlines, the
//! descriptor reserve) are flags with documented defaults; every refusal is
//! a typed answer on the wire (the contract's *Bounds and exhaustion*).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use custodian::contain::Containment;
use custodian::process::LaunchOptions;
use custodian::wire::listen::{Acceptor, DEFAULT_MAX_CONNECTIONS};
use custodian::wire::reserve::{DEFAULT_FD_RESERVE, FdReserve};
use custodian::wire::{
    DEFAULT_MAX_OPEN_PER_CONNECTION, DEFAULT_MAX_OPEN_REQUESTS, DEFAULT_MAX_UNANSWERED_BYTES, Node,
    NodeConfig, WorkspaceNode,
};
use custodian::workspace::{Workspace, WorkspaceConfig, WorkspaceError};
use tracing::{debug, info, warn};

const AFTER_HELP: &str = "\
Output: stdout carries the wire (docs/contracts/edge-node-wire.md): one
compact JSON response per line, JSON by default (with --socket, each
connection carries it instead and stdout stays empty). Messages and logs go
to stderr.

Bounds (each refusal is one error line on the wire, seq null unless a
request is named):
  --max-requests, --max-requests-per-connection
                       an open_workspace beyond either is answered
                       too_many_requests (nothing opened, the request's
                       state unchanged); cancel and cleanup are never refused
  --max-connections    (--socket) a connection beyond is answered
                       too_many_connections and closed; so is one that
                       arrives while the node is out of file descriptors
  --max-unanswered     bytes of answers queued for a peer that does not read
                       them; beyond, the node stops reading that connection
  --frame-timeout      (--socket) a frame begun and not finished in time is
                       answered frame_timeout and the connection closed
  --idle-timeout       (--socket) a connection with nothing in flight, no
                       answer queued and no frame begun is answered
                       idle_timeout and closed; its open requests stay open
                       (clean them from another connection, or at shutdown);
                       a peer that reads no answer for this long is closed
  --fd-reserve         descriptors held back so a cleanup can run when the
                       node is out of them; accept failures back off (10 ms
                       to 1 s) and warn once per 10 s
On stdio the node has no deadlines: its one edge's EOF ends it, or SIGTERM,
SIGINT or SIGHUP (every open request is then cancelled and cleaned first).

Exit codes:
  0  served until stdin closed or SIGTERM/SIGINT/SIGHUP (stdio and socket);
     every request still open was then cleaned up
  1  the node could not start or serve: an invalid --max-frame or
     --process-timeout, a --policy file refused (its error is printed
     first), the workspace cannot be opened, the socket path exists or
     cannot be bound, --containment subreaper unavailable, or reading stdin
     failed, or another owner held the workspace for longer than
     --lock-wait; the cause is printed on stderr
  2  the command line could not be parsed";

/// Arguments of `custodian node`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct Args {
    /// The workspace root this node serves.
    #[arg(long)]
    workspace: PathBuf,
    /// Serve on a Unix socket created at this path (owner-only, refuses
    /// peers of another uid) instead of stdin/stdout. The path must not
    /// exist.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// (--socket) Serve peers in another user namespace than the node's.
    /// By default such a peer gets one `peer_namespace_refused` line and is
    /// disconnected: every confined tool runs in a user namespace of its
    /// own, and must not reach a node that would launch for it.
    #[arg(long, requires = "socket")]
    allow_other_user_namespaces: bool,
    /// Largest request frame accepted, in bytes.
    #[arg(long, default_value_t = custodian::wire::DEFAULT_MAX_FRAME)]
    max_frame: usize,
    /// Deadline of a process whose request names none (e.g. `30s`).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    process_timeout: Duration,
    /// How long cleanup waits for a request's processes to settle.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    cleanup_bound: Duration,
    /// How long to wait for another owner of the workspace (a previous node
    /// still cleaning up after its transport died) to exit before giving
    /// up; `0s` gives up at once.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    lock_wait: Duration,
    /// How processes are contained: `auto` (a cgroup v2 per process, under
    /// one per request, where possible), `cgroup` (or refuse to launch),
    /// `group`, `subreaper`.
    #[arg(long, value_name = "TIER", default_value = "auto", value_parser = containment)]
    containment: Containment,
    /// Enforce this policy file on every `run_process` (the node decides,
    /// whatever its edge decided): a denied call is answered
    /// `policy_refused` / `policy_denied`, one that needs an approval
    /// `policy_refused` / `approval_required` with its target; nothing is
    /// launched. Approvals come only from the file's `policy.overrides`.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// The provenance the node assumes for every call (with --policy; the
    /// wire carries none).
    #[arg(long, value_enum, default_value = "untrusted", requires = "policy")]
    provenance: super::policy::ProvenanceArg,
    /// Requests open on the node at once (opened, cleanup not finished).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_OPEN_REQUESTS)]
    max_requests: usize,
    /// Requests one connection may hold open at once.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_OPEN_PER_CONNECTION)]
    max_requests_per_connection: usize,
    /// Connections served at once (with --socket).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// Bytes of answers queued for a peer before the node stops reading
    /// its connection.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_UNANSWERED_BYTES)]
    max_unanswered: usize,
    /// Deadline of one frame, from its first byte to its newline (with
    /// --socket); `0s` disables it.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    frame_timeout: Duration,
    /// Deadline of an idle connection (with --socket); `0s` disables it.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    idle_timeout: Duration,
    /// File descriptors held in reserve for cleanups at exhaustion.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_FD_RESERVE)]
    fd_reserve: usize,
}

fn containment(v: &str) -> Result<Containment, String> {
    v.parse()
        .map_err(|e: custodian::contain::UnknownContainment| e.to_string())
}

/// What the arguments resolve to.
struct Config {
    workspace: PathBuf,
    socket: Option<PathBuf>,
    node: NodeConfig,
    process_timeout: Duration,
    cleanup_bound: Duration,
    lock_wait: Duration,
    containment: Containment,
    policy: Option<custodian::RunPolicy>,
    max_connections: usize,
    fd_reserve: usize,
    allow_other_user_namespaces: bool,
}

impl Args {
    fn validate(self) -> anyhow::Result<Config> {
        if self.max_frame < 1024 {
            bail!("--max-frame must be at least 1024 bytes");
        }
        if self.process_timeout.is_zero() {
            bail!("--process-timeout must be positive");
        }
        for (flag, v) in [
            ("--max-requests", self.max_requests),
            (
                "--max-requests-per-connection",
                self.max_requests_per_connection,
            ),
            ("--max-connections", self.max_connections),
            ("--max-unanswered", self.max_unanswered),
        ] {
            if v == 0 {
                bail!("{flag} must be at least 1");
            }
        }
        // Deadlines guard a socket against its peers; on stdio the one edge
        // owns the node and its EOF ends it.
        let on_socket = self.socket.is_some();
        let deadline = |d: Duration| (on_socket && !d.is_zero()).then_some(d);
        let policy = match &self.policy {
            None => None,
            Some(path) => Some(
                custodian::RunPolicy::new(
                    super::policy::load_policy(path)
                        .map_err(|_| anyhow::anyhow!("--policy {} refused", path.display()))?,
                )
                .with_provenance(self.provenance.into()),
            ),
        };
        Ok(Config {
            workspace: self.workspace,
            socket: self.socket,
            node: NodeConfig {
                max_frame: self.max_frame,
                max_open_requests: self.max_requests,
                max_open_per_connection: self.max_requests_per_connection,
                max_unanswered_bytes: self.max_unanswered,
                frame_timeout: deadline(self.frame_timeout),
                idle_timeout: deadline(self.idle_timeout),
                ..NodeConfig::default()
            },
            process_timeout: self.process_timeout,
            cleanup_bound: self.cleanup_bound,
            lock_wait: self.lock_wait,
            containment: self.containment,
            policy,
            max_connections: self.max_connections,
            fd_reserve: self.fd_reserve,
            allow_other_user_namespaces: self.allow_other_user_namespaces,
        })
    }
}

pub(crate) fn main(args: Args) -> ExitCode {
    let result = args.validate().and_then(|config| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the runtime")?;
        let served = rt.block_on(serve(config));
        // Stdin is read on a blocking thread that an edge which keeps stdin
        // open never releases: do not wait for it.
        rt.shutdown_background();
        served
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("custodian node: {}", super::chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// Opens the workspace as its only owner, waiting up to `wait` for a
/// previous owner (a node whose transport died, still cleaning up) to exit.
async fn open_owned(
    root: &Path,
    config: WorkspaceConfig,
    wait: Duration,
) -> Result<Workspace, WorkspaceError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut told = false;
    loop {
        match custodian::request::open_workspace(root, config.clone()) {
            Err(WorkspaceError::Locked) if tokio::time::Instant::now() < deadline => {
                if !told {
                    info!("the workspace has another owner; waiting for it to exit");
                    told = true;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let ws_config = WorkspaceConfig::default().with_cleanup_bound(config.cleanup_bound);
    let workspace = open_owned(&config.workspace, ws_config, config.lock_wait)
        .await
        .with_context(|| format!("opening workspace {}", config.workspace.display()))?;
    // Before serving: an edge asking about a dead run's request must find
    // the reclaim's result, not a job directory nobody owns.
    for (request_id, result) in workspace.reclaim().await {
        info!(%request_id, status = ?result.status, code = ?result.code, "reclaimed at start");
    }
    if config.containment == Containment::Subreaper {
        custodian::process::enable_subreaper().context("--containment subreaper")?;
    }
    let reserve = FdReserve::new(config.fd_reserve).context("opening the --fd-reserve")?;
    let launch = LaunchOptions::new(&config.workspace).with_containment(config.containment);
    let mut adapter = WorkspaceNode::new(workspace.clone(), launch, config.process_timeout)
        .with_fd_reserve(Arc::clone(&reserve));
    if let Some(policy) = config.policy {
        adapter = adapter.with_policy(policy);
    }
    let node = Node::with_fd_reserve(adapter, config.node, reserve);
    match &config.socket {
        None => {
            // Caught before serving: from now on a stop signal is a message
            // (a second one changes nothing), never a death mid-request.
            let mut stops =
                super::stop::StopSignals::install().context("catching the stop signals")?;
            let io = tokio::io::join(tokio::io::stdin(), tokio::io::stdout());
            let serving = node.serve(io);
            tokio::pin!(serving);
            let served = tokio::select! {
                served = &mut serving => Some(served),
                signal = stops.recv() => {
                    info!(signal = signal.name(), "stopping: every open request is cancelled and cleaned");
                    None
                }
            };
            // The edge closed stdin (it is gone), or the node was told to
            // stop: clean up every request still open (this also cancels
            // its running processes, so their answers arrive), then let the
            // remaining answers reach stdout.
            shutdown(&node, &workspace).await;
            if let Some(served) = served {
                served.context("reading stdin")?.wait().await;
            }
        }
        Some(path) => {
            let listener = bind_owner_only(path)?;
            info!(socket = %path.display(), "serving");
            // A peer in another user namespace (a confined tool) is refused
            // by the acceptor unless the flag admits it.
            let acceptor = Acceptor::new(
                listener,
                config.max_connections,
                Arc::clone(node.fd_reserve()),
            )
            .admit_other_user_namespaces(config.allow_other_user_namespaces);
            let served = accept_loop(&node, acceptor).await;
            let _ = std::fs::remove_file(path);
            shutdown(&node, &workspace).await;
            served?;
        }
    }
    Ok(())
}

/// Cleans every request still open, then closes the workspace.
async fn shutdown(node: &Arc<Node<WorkspaceNode>>, workspace: &Workspace) {
    for report in node.close().await {
        info!(request_id = %report.request_id, status = ?report.status, "cleaned at shutdown");
    }
    workspace.close().await;
}

/// Creates the socket with mode 0600: the umask is narrowed around `bind`
/// so the socket never exists with wider permissions, then the mode is set
/// explicitly in case the filesystem ignores the umask.
fn bind_owner_only(path: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    use rustix::fs::Mode;
    use std::os::unix::fs::PermissionsExt;
    if path.symlink_metadata().is_ok() {
        bail!("{} already exists; refusing to replace it", path.display());
    }
    let old = rustix::process::umask(Mode::from_raw_mode(0o177));
    let bound = std::os::unix::net::UnixListener::bind(path);
    rustix::process::umask(old);
    let listener = bound.with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod 0600 {}", path.display()))?;
    listener.set_nonblocking(true).context("set_nonblocking")?;
    tokio::net::UnixListener::from_std(listener).context("registering the socket")
}

/// The error code sent to a peer whose uid differs from the node's.
const PEER_REFUSED: custodian::error::SafeCode = custodian::error::SafeCode::new("peer_refused");

/// Answers one error line and closes the connection
/// ([`custodian::wire::listen::refuse`]).
fn refuse(stream: tokio::net::UnixStream, code: custodian::error::SafeCode) {
    if let Ok(stream) = stream.into_std() {
        custodian::wire::listen::refuse(stream, code);
    }
}

async fn accept_loop(
    node: &Arc<Node<WorkspaceNode>>,
    mut acceptor: Acceptor,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let mut hup = signal(SignalKind::hangup()).context("SIGHUP handler")?;
    let me = rustix::process::geteuid().as_raw();
    loop {
        // Bounds, backoff and the reserve are the acceptor's: it returns
        // only connections to serve.
        let (stream, slot) = tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
            _ = hup.recv() => return Ok(()),
            accepted = acceptor.accept() => accepted,
        };
        // The kernel's record of who connected (SO_PEERCRED), not anything
        // the peer says about itself. (The acceptor checked its user
        // namespace.)
        let peer = stream.peer_cred().map(|c| c.uid()).ok();
        if peer != Some(me) {
            warn!(peer_uid = ?peer, "refused a peer of another uid");
            refuse(stream, PEER_REFUSED);
            continue;
        }
        let node = Arc::clone(node);
        tokio::spawn(async move {
            if let Err(e) = node.serve_to_end(stream).await {
                // A peer's reset is its own business: not one warning per
                // connection when thousands go away at once.
                debug!(error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
}
