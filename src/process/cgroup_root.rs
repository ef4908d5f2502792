//! Starting the root inside its own cgroup: pipes, `/dev/null`, and the
//! `clone3(CLONE_INTO_CGROUP)` spawner, so that neither the root nor any
//! child of it ever runs outside the cgroup.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::pipe::{PipeFlags, pipe_with};
use tokio::net::unix::pipe::Receiver;

use super::env::ChildEnv;
use super::invocation::Invocation;
use super::spawn::{self, ChildConfine, Isolate, IsolatedInit, SpawnError, SpawnSpec, Stage};
use crate::confine::build::Prepared;
use crate::confine::{ApplyStep, ConfineError};
use crate::contain::Cgroup;
use rustix::io::Errno;

fn confine_step(stage: Stage) -> Option<ApplyStep> {
    match stage {
        Stage::NoNewPrivs => Some(ApplyStep::NoNewPrivs),
        Stage::Landlock => Some(ApplyStep::Landlock),
        Stage::Seccomp => Some(ApplyStep::Seccomp),
        Stage::IdMap => Some(ApplyStep::IdMap),
        Stage::Session => Some(ApplyStep::Session),
        Stage::View => Some(ApplyStep::View),
        Stage::Loopback => Some(ApplyStep::Loopback),
        Stage::ProxyListener => Some(ApplyStep::ProxyListener),
        Stage::LandlockRule => Some(ApplyStep::LandlockRule),
        Stage::Capabilities => Some(ApplyStep::Capabilities),
        Stage::Fork | Stage::InitDied => Some(ApplyStep::Fork),
        _ => None,
    }
}

/// A root started in its cgroup: nobody has reaped it.
pub(crate) struct CgroupRoot {
    pub(crate) pid: u32,
    pub(crate) pidfd: OwnedFd,
    pub(crate) stdout: Receiver,
    pub(crate) stderr: Receiver,
    /// The sandbox's init, when isolated (`pid` is the init's).
    pub(crate) isolation: Option<IsolatedInit>,
    /// Network `allow`: the proxy's listener inside the sandbox.
    pub(crate) proxy_listener: Option<OwnedFd>,
}

/// Why the root could not be started in its cgroup.
#[derive(Debug)]
pub(crate) enum StartError {
    /// `clone3` with `CLONE_INTO_CGROUP` is not available here.
    Unsupported,
    /// The cgroup refused the new process (its errno); nothing was
    /// started.
    Refused(rustix::io::Errno),
    /// The child could not apply its confinement; nothing is running.
    Confine(crate::confine::ConfineError),
    /// Anything else; nothing is running.
    Failed(std::io::Error),
}

fn cstring(bytes: &[u8]) -> Result<CString, StartError> {
    CString::new(bytes).map_err(|_| {
        StartError::Failed(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "argument or environment entry holds a NUL byte",
        ))
    })
}

fn io(e: rustix::io::Errno) -> StartError {
    StartError::Failed(e.into())
}

/// A session's side of the child's stdio (both `None`: a run, stdin on
/// `/dev/null`).
#[derive(Clone, Copy, Default)]
pub(crate) struct SessionStdio<'a> {
    /// The read end of the session's stdin pipe.
    pub(crate) stdin: Option<BorrowedFd<'a>>,
    /// A terminal session's pseudo-terminal slave: stdin, stdout and
    /// stderr, and the controlling terminal.
    pub(crate) terminal: Option<BorrowedFd<'a>>,
    /// The output is read while the process runs (a session or a streamed
    /// run): its pipes get [`STREAMED_PIPE`] bytes instead of the default
    /// 64 KiB.
    pub(crate) streamed: bool,
}

/// The capacity of a streamed launch's output pipes: 256 KiB, one driver
/// read (`READ_CHUNK`), so that a fast writer fills a quarter as many
/// wake-ups (a 1 GiB stream: 0.85–1.18× a raw drain instead of 0.79–0.94×,
/// `docs/performance.md`). Counted against an unprivileged user's pipe
/// quota (`/proc/sys/fs/pipe-user-pages-soft`, 64 MiB by default): the 64
/// sessions a runtime runs at most hold 32 MiB of it. Where the kernel
/// refuses (the quota, `pipe-max-size`), the pipe keeps its default.
const STREAMED_PIPE: usize = 256 * 1024;

/// Spawns `resolved` with argv `[executable as given, args...]`, the
/// child's environment, `cwd`, stdin on `/dev/null` (or `stdin`) and two
/// pipes, as the leader of a new process group (or, on a `terminal`: that
/// terminal as all three, the controlling terminal of a new session it
/// leads; the pipes then only carry their end-of-file), inside `cgroup`, confined by `confine`
/// (whose private directory becomes `TMPDIR`). Must run inside the tokio
/// runtime that will read the pipes.
pub(crate) fn start(
    invocation: &Invocation,
    env: &ChildEnv,
    cwd: &Path,
    resolved: &Path,
    cgroup: Option<&Cgroup>,
    confine: Option<&Prepared>,
    stdio: SessionStdio<'_>,
) -> Result<CgroupRoot, StartError> {
    let SessionStdio {
        stdin,
        terminal,
        streamed,
    } = stdio;
    let program = cstring(resolved.as_os_str().as_bytes())?;
    let argv = std::iter::once(invocation.executable().as_bytes())
        .chain(invocation.args().iter().map(|a| a.as_bytes()))
        .map(cstring)
        .collect::<Result<Vec<_>, _>>()?;
    let tmpdir = confine.and_then(Prepared::tmp_dir);
    let tmp_entry = tmpdir.map(|t| (OsStr::new("TMPDIR"), t.as_os_str()));
    // Network `allow`: the proxy's variables replace any of the same name.
    let proxied = confine
        .and_then(Prepared::view)
        .is_some_and(|v| v.proxy_port.is_some());
    let proxy_env = if proxied {
        super::proxy::proxy_env().to_vec()
    } else {
        Vec::new()
    };
    let proxy_entries = proxy_env
        .iter()
        .map(|(k, v)| (OsStr::new(*k), OsStr::new(v.as_str())));
    let envp = env
        .vars()
        .filter(|(k, _)| tmp_entry.is_none() || *k != "TMPDIR")
        .filter(|(k, _)| !proxy_env.iter().any(|(p, _)| OsStr::new(*p) == *k))
        .chain(tmp_entry)
        .chain(proxy_entries)
        .map(|(k, v)| {
            let mut kv = Vec::with_capacity(k.len() + v.len() + 1);
            kv.extend_from_slice(k.as_bytes());
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            cstring(&kv)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let cwd = cstring(cwd.as_os_str().as_bytes())?;
    let null = rustix::fs::open(
        c"/dev/null",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io)?;
    let (out_r, out_w) = pipe_with(PipeFlags::CLOEXEC).map_err(io)?;
    let (err_r, err_w) = pipe_with(PipeFlags::CLOEXEC).map_err(io)?;
    if streamed {
        let _ = rustix::pipe::fcntl_setpipe_size(&out_r, STREAMED_PIPE);
        let _ = rustix::pipe::fcntl_setpipe_size(&err_r, STREAMED_PIPE);
    }
    let spec = SpawnSpec {
        program: &program,
        argv: &argv,
        envp: &envp,
        cwd: Some(&cwd),
        stdin: terminal.or(stdin).unwrap_or(null.as_fd()),
        stdout: terminal.unwrap_or(out_w.as_fd()),
        stderr: terminal.unwrap_or(err_w.as_fd()),
        new_process_group: true,
        default_sigint: stdin.is_some() || terminal.is_some(),
        terminal: terminal.is_some(),
        cgroup: cgroup.map(|c| c.as_fd()),
        confine: confine.filter(|c| c.confines()).map(|c| ChildConfine {
            ruleset: c.ruleset(),
            seccomp: c.program(),
        }),
        isolate: confine.and_then(|c| {
            c.view().map(|view| Isolate {
                view,
                access_fs: c.access_fs(),
                nest: c.nest(),
                net: c.shared_net().map(|(net, _)| net),
                net_user: c.shared_net().and_then(|(_, user)| user),
                spare: Some(c.spare()),
            })
        }),
    };
    let new_net = spec.isolate.as_ref().is_some_and(|i| i.view.new_net);
    let isolated = spec.isolate.is_some();
    let spawned = spawn::spawn(&spec).map_err(|e| match e {
        // A strict launch did not wait for the isolation probe
        // (`launch::prepare_confinement`): where the host refuses isolation
        // its clone (or its init's first step) failed, and the answer is
        // the probe's, the one it would have had before the launch.
        _ if isolated && spawn::isolation_supported().is_err() => {
            StartError::Confine(ConfineError::IsolationUnavailable {
                reason: "user_namespaces_unavailable",
            })
        }
        SpawnError::Unsupported { .. } => StartError::Unsupported,
        // The isolation probe leaves the network namespace out: a limit on
        // them (`max_net_namespaces`) or a refusal is seen here.
        SpawnError::Failed {
            stage: Stage::Clone,
            errno: Errno::NOSPC | Errno::USERS,
        } if new_net => StartError::Confine(ConfineError::IsolationUnavailable {
            reason: "network_namespace_unavailable",
        }),
        SpawnError::CgroupRefused { errno } => StartError::Refused(errno),
        SpawnError::Failed { stage, errno } if confine_step(stage).is_some() => {
            StartError::Confine(ConfineError::Apply {
                step: confine_step(stage).unwrap_or(ApplyStep::NoNewPrivs),
                errno: errno.raw_os_error(),
            })
        }
        other => StartError::Failed(other.into()),
    })?;
    // Our copies of the write ends must go, or the reads never see EOF.
    drop((out_w, err_w, null));
    let stdout = Receiver::from_owned_fd(out_r);
    let stderr = Receiver::from_owned_fd(err_r);
    match (stdout, stderr) {
        (Ok(stdout), Ok(stderr)) => Ok(CgroupRoot {
            pid: spawned.pid,
            pidfd: spawned.pidfd,
            stdout,
            stderr,
            isolation: spawned.isolation,
            proxy_listener: spawned.proxy_listener,
        }),
        (Err(e), _) | (_, Err(e)) => {
            // The root runs but cannot be read: kill it with its cgroup
            // (or, isolated, its pid namespace) and reap it before
            // reporting.
            let mut effects = super::effects::Effects::new(spawned.pid);
            if let Some(order) = effects.teardown() {
                if let Some(cgroup) = cgroup {
                    let _ = effects.kill_cgroup(&order, cgroup);
                }
                let _ = effects.kill_pidfd(&order, spawned.pidfd.as_fd());
            }
            effects.torn_down();
            let _ = super::sys::reap_pidfd(&spawned.pidfd, true);
            Err(StartError::Failed(e))
        }
    }
}
