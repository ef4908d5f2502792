//! custodian owns the lifecycle of what an agent runtime's tools create.
//!
//! **Start here:** an embedder needs [`Runtime`] (one per workspace) and,
//! per request, a [`Request`] (the caller's side) and its [`Executor`] (the
//! side doing the work); `use custodian::prelude::*` brings them and the
//! types they return. The modules below are the mechanisms the runtime is
//! built from, public for embedders that need one of them alone (a node
//! across the wire, a bare governed launch).
//!
//! # Theory of operation
//!
//! An agent runtime launches processes for tools, writes files for requests
//! and spills oversized tool results to disk. custodian makes three promises
//! about those and proves them:
//!
//! 1. **Governed processes** ([`process`]): no shell, a minimal environment,
//!    the child leads its own process group, `TERM → grace → KILL`, bounded
//!    capture, and one honest JSON evidence object. Every process settles
//!    exactly once.
//! 2. **Request-owned cleanup** ([`workspace`], [`request`]): everything a
//!    request creates lives under its own job namespace and is registered in
//!    an ownership inventory. When the request ends, exactly one cleanup runs,
//!    removes only what the inventory proves the request owns, fails closed on
//!    anything suspicious, and finishes before the terminal result is
//!    committed.
//! 3. **Bounded spill retention** ([`spill`]): a one-shot startup sweep
//!    expires old spilled results and cannot be tricked into deleting anything
//!    else.
//!
//! Decisions are made in pure code ([`machine`], [`policy`]); the mechanisms
//! execute the actions those decisions return. The exactly-once primitives in
//! [`sync`] are checked under every interleaving by loom, and the state
//! machines by a stateright model that calls the very same step functions.
//!
//! Dependencies point one way, down: `machine`, `sync` and `policy` depend
//! on nothing in the crate but its vocabulary (`error`, `id`); `fs`,
//! `contain` and `confine` are the OS layer; `process`, `spill` and
//! `workspace` build on both; [`request`] owns a request and drives it end
//! to end;
//! [`runtime`] puts a request's job, processes, spills and finish behind one
//! facade; `wire`, `mcp` and the CLI sit on top. `scripts/check-layers`
//! enforces it, with its documented exception, from `docs/architecture.md`.

#[cfg(test)]
#[macro_use]
#[path = "../tests/support/skip.rs"]
mod test_skip;
pub mod confine;
pub mod contain;
pub mod error;
mod fs;
pub mod id;
pub mod machine;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod policy;
pub mod process;
pub mod request;
pub mod runtime;
pub mod spill;
pub mod sync;
pub mod wire;
pub mod workspace;

pub use id::{RequestId, RequestIdError};
pub use request::{Completion, ProcessVerdict};
pub use runtime::{Executor, Request, RunPolicy, Runtime, RuntimeConfig, RuntimeError};

/// What an embedder touches, in one import: `use custodian::prelude::*;`.
pub mod prelude {
    pub use crate::contain::Containment;
    pub use crate::id::{RequestId, RequestIdError};
    pub use crate::machine::request::{Delivery, RequestStatus};
    pub use crate::process::evidence::ProcessStatus;
    pub use crate::process::{Evidence, Invocation, InvocationSpec};
    pub use crate::request::{Completion, ProcessVerdict, RequestLimits};
    pub use crate::runtime::{Executor, Request, RunPolicy, Runtime, RuntimeConfig, RuntimeError};
    pub use crate::spill::{Locator, SpillConfig};
    pub use crate::workspace::{CleanupResult, CleanupStatus, WorkspaceConfig};
}

/// The README's library snippet, compiled with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeSnippets;

/// Thin wrappers over crate-private mechanisms, for `benches/` only. Not
/// part of the API: no stability, no semver.
#[doc(hidden)]
#[cfg(target_os = "linux")]
pub mod __bench {
    use std::ffi::{CStr, CString};
    use std::fs::File;
    use std::io::{self, Read};
    use std::os::fd::{AsFd, BorrowedFd};

    /// Whether the clone3 spawner works on this host.
    pub fn raw_spawn_supported() -> bool {
        crate::process::spawn::supported()
    }

    /// Turns the spawner's descriptor hand-off (a child of a large table
    /// gets a small one of its own) off or on, for the benchmark that
    /// measures what it saves. On by default.
    pub fn set_fd_handoff(on: bool) {
        crate::process::spawn::set_handoff(on);
    }

    /// Gives `options` one network namespace, shared by every isolated
    /// launch with the network off made with them or a clone of them: what
    /// a request's scope gives its launches, for the benchmark of a
    /// request's launches (made at the first, entered by each later one).
    pub fn share_one_network(options: &mut crate::process::LaunchOptions) {
        options.network = Some(Default::default());
    }

    pub use crate::process::effects::{Effect, KillTarget, RecordedRun};

    /// Turns the recording of process runs on or off: while on, every run
    /// the process driver starts records the events it feeds its machine
    /// and every effect it has (group signals, `cgroup.kill`, pidfd kills,
    /// the reaping), published when it settles, for the test that replays
    /// them into `machine::process` (`tests/process/effects.rs`). Off by
    /// default.
    pub fn record_process_runs(on: bool) {
        crate::process::effects::set_recording(on);
    }

    /// The runs recorded and settled since the last call.
    pub fn take_process_runs() -> Vec<RecordedRun> {
        crate::process::effects::take_recorded()
    }

    pub use crate::wire::node::NodeStep;

    /// Turns the recording of every wire node's decisions on or off: while
    /// on, each step of a request's state on any [`crate::wire::Node`] of
    /// this process is recorded (state before, input, state after, actions),
    /// for the test that replays them into the composition model's node
    /// (`model/tests/node_conformance.rs`). Off by default.
    pub fn record_node_steps(on: bool) {
        crate::wire::node::set_recording(on);
    }

    /// The node decisions recorded since the last call.
    pub fn take_node_steps() -> Vec<NodeStep> {
        crate::wire::node::take_recorded()
    }

    /// A launch's use of a [`crate::process::NetworkProxy`], for the
    /// benchmark that measures the proxy's data path: what a sandbox's
    /// listener gets, given a listener of the benchmark's own.
    #[derive(Debug)]
    pub struct ProxyAttachment(crate::process::proxy::Attachment);

    impl ProxyAttachment {
        /// Stops serving, and the summary the evidence would record.
        pub fn finish(self) -> crate::process::NetworkAccess {
            self.0.finish()
        }
    }

    /// Serves the connections arriving on `listener` with the allow-list
    /// `hosts`, as for a sandbox's listener.
    ///
    /// # Errors
    ///
    /// A bad pattern, or a listener the proxy cannot take.
    pub fn proxy_attach(
        proxy: &crate::process::NetworkProxy,
        listener: std::net::TcpListener,
        hosts: &[String],
    ) -> io::Result<ProxyAttachment> {
        let allow = crate::confine::hosts::AllowList::parse(hosts)
            .map_err(|(p, e)| io::Error::new(io::ErrorKind::InvalidInput, format!("{p}: {e}")))?;
        listener.set_nonblocking(true)?;
        proxy
            .attach(std::os::fd::OwnedFd::from(listener), allow)
            .map(ProxyAttachment)
    }

    /// Takes one of the spare network namespaces (its descriptor), as an
    /// isolated launch outside a request does: the filler thread makes
    /// the next at once, beside whatever runs. `None` where this process
    /// keeps none (not root, or turned off). For the benchmark that
    /// measures what making one costs a launch that runs beside it.
    pub fn take_spare_network_namespace() -> Option<std::os::fd::OwnedFd> {
        crate::process::spawn::spare_network_namespace().map(|n| n.net)
    }

    /// Turns the spare network namespaces of isolated launches with the
    /// network off on or off (off: each launch's `clone3` makes its own),
    /// for the benchmark that measures what they save. On by default.
    pub fn set_netns_spares(on: bool) {
        crate::process::spawn::set_spares(on);
    }

    /// Turns on or off the holding of an isolated launch's mount namespace
    /// past its init's exit (off: the init's exit tears the view down
    /// before the driver sees it), for the benchmark that measures what it
    /// saves. On by default.
    pub fn set_hold_mount_ns(on: bool) {
        crate::process::spawn::set_hold_mount_ns(on);
    }

    /// Turns on or off the sandboxes prepared ahead of a request's next
    /// isolated launch with the network off (off: every launch composes
    /// its own view), for the benchmark that measures what they save. On
    /// by default.
    pub fn set_prepared_sandboxes(on: bool) {
        crate::process::spawn::set_prepared(on);
    }

    /// Whether custodian's background threads (the network namespaces'
    /// filler, a prepared sandbox's clone, the views' release) keep off
    /// the CPU of the launch that set them off, for the benchmark that
    /// measures what it saves. On by default.
    pub fn set_background_aside(on: bool) {
        crate::process::spawn::set_aside(on);
    }

    /// How many launches of this process ran in a prepared sandbox (for
    /// the tests that check a launch took that path).
    pub fn prepared_launches() -> u64 {
        crate::process::spawn::prepared_launches()
    }

    /// The pid of the sandbox's init prepared for the next isolated launch
    /// outside a request (while a `SpareKeeper` lives), once its view is
    /// composed; `None` if none waits.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    pub fn standalone_sandbox_init() -> Option<u32> {
        crate::process::standalone_init()
    }

    /// Runs `program` (argv `[program]`, empty environment, new process
    /// group) through the clone3 spawner, into `cgroup` if given, with
    /// stdin on `/dev/null` and stdout/stderr on pipes it reads to the end
    /// (stdout first: for small outputs only), then reaps it through its
    /// pidfd. Returns the exit code (`-signal` if killed).
    ///
    /// # Errors
    ///
    /// The spawn's error, or a pipe or `waitid` error.
    pub fn raw_output(program: &CStr, cgroup: Option<BorrowedFd<'_>>) -> io::Result<i32> {
        use rustix::fs::{Mode, OFlags};
        use rustix::pipe::{PipeFlags, pipe_with};
        use rustix::process::{WaitId, WaitIdOptions, waitid};
        let null = rustix::fs::open("/dev/null", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
        let (out_r, out_w) = pipe_with(PipeFlags::CLOEXEC)?;
        let (err_r, err_w) = pipe_with(PipeFlags::CLOEXEC)?;
        let argv = [CString::from(program)];
        let spawned = crate::process::spawn::spawn(&crate::process::spawn::SpawnSpec {
            program,
            argv: &argv,
            envp: &[],
            cwd: None,
            stdin: null.as_fd(),
            stdout: out_w.as_fd(),
            stderr: err_w.as_fd(),
            new_process_group: true,
            default_sigint: false,
            terminal: false,
            cgroup,
            confine: None,
            isolate: None,
        })?;
        drop((out_w, err_w));
        let mut sink = Vec::new();
        File::from(out_r).read_to_end(&mut sink)?;
        File::from(err_r).read_to_end(&mut sink)?;
        let status = loop {
            match waitid(WaitId::PidFd(spawned.pidfd.as_fd()), WaitIdOptions::EXITED) {
                Err(rustix::io::Errno::INTR) => {}
                other => break other?,
            }
        };
        let status = status.ok_or_else(|| io::Error::other("waitid returned no status"))?;
        Ok(status
            .exit_status()
            .or_else(|| status.terminating_signal().map(|s| -s))
            .unwrap_or(i32::MIN))
    }
}
