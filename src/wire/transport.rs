//! The local end of a node started through a command
//! ([`WireClient::spawn_node`](super::WireClient::spawn_node)): `ssh`, a
//! container exec, or the node binary itself.
//!
//! The command's process is the transport: its stdin and stdout carry the
//! wire, and its exit is the end of the connection. A watcher task owns the
//! child, reaps it, publishes its exit status and then closes the client,
//! so a call can never wait for a transport that is gone, even when
//! something the command left behind still holds its stdout open.

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::Child;
use tokio::sync::{mpsc, watch};
use tracing::info;

/// How long answers already in the pipe may still be read after the
/// transport command exited, before every pending call fails with
/// [`WireError::Disconnected`](super::WireError::Disconnected). Normally the
/// stream ends first (EOF) and this never matters; it bounds the wait when
/// a leftover descendant of the command keeps the pipe open.
pub const EXIT_GRACE: Duration = Duration::from_secs(2);

/// Why [`WireClient::spawn_node`](super::WireClient::spawn_node) could not
/// start the transport command. Carries the program as given and the OS
/// error, never the command's environment.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The command could not be started (not found, not executable, …).
    #[error("could not start the node command {program:?}: {source}")]
    Start {
        /// The program, as given (lossily UTF-8).
        program: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// The transport command's process behind a
/// [`WireClient::spawn_node`](super::WireClient::spawn_node) client.
///
/// Dropping it does not stop the command: the graceful end of a node is
/// dropping every clone of its client, which closes the command's stdin —
/// the node then cleans up every request still open and exits, and the
/// command with it (the watcher reaps it). [`NodeTransport::kill`] is the
/// abrupt end.
#[derive(Debug)]
pub struct NodeTransport {
    pid: Option<u32>,
    kill: mpsc::UnboundedSender<()>,
    exit: watch::Receiver<Option<Result<ExitStatus, io::ErrorKind>>>,
}

impl NodeTransport {
    /// Takes `child` over: a task waits for it (or kills it on request),
    /// publishes its exit status, and calls `close` [`EXIT_GRACE`] later.
    pub(super) fn watch(mut child: Child, close: impl FnOnce() + Send + 'static) -> Self {
        let pid = child.id();
        let (kill, mut kill_rx) = mpsc::unbounded_channel::<()>();
        let (tx, exit) = watch::channel(None);
        tokio::spawn(async move {
            let status = tokio::select! {
                status = child.wait() => status,
                // A dropped handle (`None`) disables this branch: dropping
                // is not a kill.
                Some(()) = kill_rx.recv() => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
            info!(pid = ?pid, status = ?status, "the node's transport command exited");
            let _ = tx.send(Some(status.map_err(|e| e.kind())));
            tokio::time::sleep(EXIT_GRACE).await;
            close();
        });
        NodeTransport { pid, kill, exit }
    }

    /// The local command's process id (`None` if it had already been
    /// reaped when the client was built).
    #[must_use]
    pub fn id(&self) -> Option<u32> {
        self.pid
    }

    /// Asks the watcher to `SIGKILL` the local command: the transport dies,
    /// every pending call fails with
    /// [`WireError::Disconnected`](super::WireError::Disconnected), and a
    /// node on the far side sees its stdin close and cleans up on its own.
    /// Does nothing once the command has exited.
    pub fn kill(&self) {
        let _ = self.kill.send(());
    }

    /// The command's exit status, once it has exited; `None` while it runs.
    #[must_use]
    pub fn try_status(&self) -> Option<io::Result<ExitStatus>> {
        let exit = *self.exit.borrow();
        exit.map(|r| r.map_err(io::Error::from))
    }

    /// Waits until the command has exited; returns its exit status.
    ///
    /// # Errors
    ///
    /// The OS error of waiting for the child (by kind only).
    pub async fn wait(&self) -> io::Result<ExitStatus> {
        let mut exit = self.exit.clone();
        match exit.wait_for(Option::is_some).await {
            Ok(status) => (*status).map_or_else(
                || Err(io::Error::other("no status")),
                |r| r.map_err(io::Error::from),
            ),
            // The watcher is gone without a status: the runtime shut down.
            Err(_) => Err(io::Error::other("the transport watcher stopped")),
        }
    }
}
