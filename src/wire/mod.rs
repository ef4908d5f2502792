//! Typed, versioned edge–node messages (JSON lines) and the node-side handler.
//!
//! # Theory of operation
//!
//! The edge (the agent runtime that owns a request) talks to a node (the
//! process that owns one workspace on disk) over any byte stream: stdio, a
//! Unix socket, or an in-memory duplex in tests. Each direction carries one
//! JSON object per line ([`codec`]); every frame has the wire version `v` and
//! a sequence number `seq` chosen by the edge, echoed by the node, so calls
//! are pipelined and answered as they complete.
//!
//! The node ([`Node`]) maps requests onto a [`NodeWorkspace`] and makes the
//! wire idempotent per request id: a workspace is opened once, cleanup is
//! elected once (a duplicate, concurrent or late, gets the first result,
//! marked `cached`), and a request whose cleanup started accepts no new work.
//! A frame that is not UTF-8 JSON, names an unknown operation or version,
//! carries an invalid request id, or exceeds the maximum frame size gets a
//! typed error response; the node never panics on input and keeps serving.
//!
//! The edge ([`WireClient`]) implements the coordinator's
//! [`WorkspaceLifecycle`](crate::request::WorkspaceLifecycle), so a
//! request driven by the coordinator cleans up its remote workspace through
//! exactly one `cleanup_workspace` message. The executor opens through
//! [`WireClient::open_announced`]: the request learns of the workspace
//! before the node is asked, so a cancel landing anywhere around the open
//! still ends in that one cleanup, and the node refuses an open that
//! arrives after the request's cancel or cleanup (`machine::node`).
//!
//! A node on another machine or in a container is started through a
//! command the operator already trusts — `ssh -T host custodian node
//! --workspace DIR`, a container exec — with [`WireClient::spawn_node`],
//! which speaks the wire over the command's stdio; the transport's death,
//! the node's death and its restart reach the edge as
//! [`WireError::Disconnected`] and the restarted node's `reclaimed` answer.
//!
//! The node holds under exhaustion: open requests are bounded per node and
//! per connection (`too_many_requests`), connections by the [`listen`]
//! acceptor (`too_many_connections`, answered then closed), a connection
//! whose peer does not read its answers is not read either (backpressure),
//! and on a socket a frame and an idle connection have deadlines
//! ([`NodeConfig`]). At the descriptor limit the accept loop answers from
//! a [`reserve`] of descriptors instead of spinning, and a cleanup runs on
//! that reserve.
//!
//! A request may also run *sessions* over the wire: `start_process`
//! launches a process that outlives the call (through the request's scope,
//! gated by the node's policy like a run, bounded per request and per
//! node), `read_output` long-polls its output from byte offsets,
//! `write_stdin`, `signal_process`, `resize_terminal` and `list_processes`
//! talk to it by the id the node chose; with `terminal` it runs on a
//! pseudo-terminal (a prompt on `/dev/tty` is answered through
//! `write_stdin`). Every session operation is admitted like a run (only
//! while the request is open and accepting), an id another request holds
//! is `unknown_session`, and the request's cancel and cleanup stop its
//! sessions with its other processes. Stdin text is never logged.
//!
//! Cleanup results carry identity, status and a safe code only: never a raw
//! path, an environment value or captured output. The full contract is
//! `docs/contracts/edge-node-wire.md`.

mod client;
pub mod codec;
#[cfg(unix)]
pub mod listen;
pub mod message;
pub(crate) mod node;
#[cfg(unix)]
pub mod reserve;
pub mod transport;
#[cfg(unix)]
mod workspace_node;

pub use client::{
    CODE_NODE_UNREACHABLE, CODE_REMOTE_CLEANUP_FAILED, OpenError, WireClient, WireError,
};
pub use codec::{DEFAULT_MAX_FRAME, DecodeError, FrameError, FrameReader, decode_request};
pub use message::{
    CleanupStatus, CleanupSummary, Code, MAX_READ_BYTES, MAX_READ_WAIT_MS, MAX_SESSION_BUFFER,
    MAX_SESSIONS_PER_NODE, MAX_SESSIONS_PER_REQUEST, MAX_TERMINAL_SIDE, Offsets, Operation,
    PolicyRefusal, ProcessSummary, RequestFrame, Response, ResponseFrame, RunSpec, SessionExit,
    SessionInfo, SessionOutput, SessionSignal, SessionStarted, StartSpec, StdinText, StreamRead,
    VERSION, WindowSize,
};
pub use node::{
    Admitted, CleanupVerdict, DEFAULT_MAX_OPEN_PER_CONNECTION, DEFAULT_MAX_OPEN_REQUESTS,
    DEFAULT_MAX_UNANSWERED_BYTES, Drain, Node, NodeConfig, NodeRow, NodeStats, NodeWorkspace,
    node_row_retry, node_row_step, node_slot_retry, node_slot_step,
};
pub use transport::{NodeTransport, SpawnError};
#[cfg(unix)]
pub use workspace_node::{NodeScope, WorkspaceNode, codes as node_codes};
