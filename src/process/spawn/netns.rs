//! Spare network namespaces, made off the launch's path.
//!
//! # Theory of operation
//!
//! Making a network namespace is the costliest step of an isolated launch
//! with the network off: the kernel runs every per-namespace init and
//! registers the namespace's sysctl tables (≈ 0.5 ms of the `clone3` here,
//! against ≈ 0.2 ms for the user, pid, mount, ipc and uts namespaces
//! together). Where this process may make one outside a user namespace
//! (`CAP_SYS_ADMIN` in the host's user namespace: root), a thread of its own
//! keeps up to [`SPARES`] of them ready, each with its loopback up and held
//! only by a descriptor. An isolated launch with the network off takes one;
//! the spawner thread that clones the sandbox enters it (`setns`) just for
//! that `clone3`, which then makes every other namespace but not this one,
//! and goes back to the host's network namespace at once. The sandbox's
//! network is then as private as a cloned one (nothing but its loopback, no
//! route out) and is used by exactly one launch: the launch's descriptor is
//! closed once it is cloned, and the kernel releases the namespace with the
//! sandbox's last process.
//!
//! The one difference from a cloned namespace is its owner: the host's user
//! namespace instead of the sandbox's, so that not even a user namespace
//! the tool makes inside its sandbox has a capability over it (a cloned
//! one could be configured by a process holding `CAP_NET_ADMIN` in the
//! sandbox's user namespace; the tool holds no capability either way).
//!
//! Where this process may not (an unprivileged user: `unshare` answers
//! `EPERM`), or anything on the way fails, the pool is off for good and
//! every launch clones its network namespace as before. A `fork` of this
//! process has no filler thread: the pool answers nothing there.
//!
//! # Caveats
//!
//! - A spare lives as long as this process; it holds no socket and no
//!   process, only the namespace.
//! - The filler works while launches run: on a busy machine its work
//!   competes with theirs. A launch that finds no spare (a burst, or the
//!   filler is slow) waits a little for the one being made, then clones
//!   its own.

#![allow(
    unsafe_code,
    reason = "unshare(CLONE_NEWNET) on the filler thread and the loopback ioctl"
)]

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::thread::{LinkNameSpaceType, UnshareFlags};

/// How many namespaces the filler keeps ready.
pub(super) const SPARES: usize = 2;

/// How long a launch that finds no spare waits for the one being made
/// (making one takes well under a millisecond) before it clones its own.
const WAIT_FOR_ONE: Duration = Duration::from_millis(5);

struct Pool {
    spares: Vec<OwnedFd>,
    /// The filler is making one now.
    filling: bool,
    /// Off for good (refused, or a step failed).
    off: bool,
    /// How many more the filler may make (`None`: no limit).
    budget: Option<usize>,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    spares: Vec::new(),
    filling: false,
    off: false,
    budget: None,
});
/// The filler waits here for a spare to be taken.
static TAKEN: Condvar = Condvar::new();
/// Launches wait here for a spare to be made.
static MADE: Condvar = Condvar::new();
/// The process that started the filler (a `fork` of it has none), or
/// `None` where it could not be started.
static FILLER: OnceLock<Option<u32>> = OnceLock::new();

/// Set only for the benchmark's comparison (`custodian::__bench`): every
/// launch clones its own namespace, the spares stay unused.
static SKIPPED: AtomicBool = AtomicBool::new(false);

/// Turns the use of spares off or on (the benchmark measures what they
/// save). On by default.
pub(crate) fn set_spares(on: bool) {
    SKIPPED.store(!on, Ordering::Relaxed);
}

fn lock() -> MutexGuard<'static, Pool> {
    crate::sync::lock_std(&POOL)
}

/// Starts the filler thread once per process, allowed to make `budget`
/// namespaces in all (`None`: as many as launches take); whether it runs
/// for this process. A later call changes nothing.
pub(super) fn start(budget: Option<usize>) -> bool {
    let started = FILLER.get_or_init(|| {
        {
            let mut pool = lock();
            pool.filling = true;
            pool.budget = budget;
        }
        let spawned = std::thread::Builder::new()
            .name("custodian-netns".into())
            .stack_size(64 * 1024)
            .spawn(fill);
        match spawned {
            Ok(_) => Some(std::process::id()),
            Err(e) => {
                tracing::debug!(error = %e, "no network namespace filler thread");
                let mut pool = lock();
                pool.filling = false;
                pool.off = true;
                None
            }
        }
    });
    *started == Some(std::process::id())
}

/// A spare network namespace, its loopback up, for one launch; `None` when
/// the pool is off (or this is a `fork` of the process that filled it), or
/// none was ready within [`WAIT_FOR_ONE`].
pub(super) fn take() -> Option<OwnedFd> {
    if SKIPPED.load(Ordering::Relaxed) {
        return None;
    }
    if !start(None) {
        return None;
    }
    let mut pool = lock();
    let mut waited = false;
    loop {
        if pool.off {
            return None;
        }
        if let Some(fd) = pool.spares.pop() {
            // The filler makes the next one (unless its budget is spent):
            // say so now, so that a take before it wakes waits for that
            // one instead of finding the pool idle and giving up.
            if pool.budget != Some(0) {
                pool.filling = true;
            }
            TAKEN.notify_one();
            return Some(fd);
        }
        if !pool.filling || waited {
            return None;
        }
        let (next, _) = MADE
            .wait_timeout(pool, WAIT_FOR_ONE)
            .unwrap_or_else(PoisonError::into_inner);
        pool = next;
        waited = true;
    }
}

/// A namespace for a request to share (`process::SharedNetwork`): a spare
/// if one is ready, else one made now on a thread of its own, so that a
/// burst that emptied the pool does not leave the request without one;
/// `None` only where this process may not make one (the pool was refused
/// or turned off: not root, or a spare could not be entered).
pub(super) fn shared() -> Option<OwnedFd> {
    if let Some(fd) = take() {
        return Some(fd);
    }
    if lock().off {
        return None;
    }
    made_now()
}

/// One namespace with its loopback up, made now on a scratch thread.
fn made_now() -> Option<OwnedFd> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("custodian-netns-1".into())
            .stack_size(64 * 1024)
            .spawn_scoped(s, || {
                // Back in the host's namespace before it returns `Ok`; an
                // `Err` leaves only this thread, which ends here, elsewhere.
                let host = this_threads_net().ok()?;
                make(&host)
                    .inspect_err(
                        |e| tracing::debug!(error = %e, "no network namespace for the request"),
                    )
                    .ok()
            })
            .ok()?
            .join()
            .ok()
            .flatten()
    })
}

/// A namespace made now, whether the pool is on or off (tests).
#[cfg(test)]
pub(super) fn made_for_tests() -> Option<OwnedFd> {
    made_now()
}

/// Turns the pool off for good (a launch could not enter a spare): later
/// launches clone their network namespace.
pub(super) fn turn_off() {
    let mut pool = lock();
    pool.off = true;
    pool.spares.clear();
    MADE.notify_all();
    TAKEN.notify_all();
}

/// Whether the pool is off for good (tests).
#[cfg(test)]
pub(super) fn is_off() -> bool {
    lock().off
}

/// The filler thread: keeps [`SPARES`] namespaces ready until the pool is
/// turned off.
fn fill() {
    let host = match this_threads_net() {
        Ok(fd) => fd,
        Err(errno) => return stop(errno),
    };
    // Off the launcher's CPU while it makes one (`spawn::Aside`).
    let mut aside = super::Aside::new();
    loop {
        let mut pool = lock();
        if pool.spares.len() >= SPARES {
            pool.filling = false;
            MADE.notify_all();
            while pool.spares.len() >= SPARES && !pool.off {
                pool = crate::sync::wait_std(&TAKEN, pool);
            }
        }
        if pool.off || pool.budget == Some(0) {
            pool.filling = false;
            MADE.notify_all();
            return;
        }
        pool.filling = true;
        if let Some(left) = &mut pool.budget {
            *left -= 1;
        }
        drop(pool);
        aside.step_aside();
        match make(&host) {
            Ok(fd) => {
                lock().spares.push(fd);
                MADE.notify_all();
            }
            Err(errno) => return stop(errno),
        }
    }
}

fn stop(errno: Errno) {
    tracing::debug!(
        %errno,
        "no spare network namespaces; each isolated launch clones its own"
    );
    let mut pool = lock();
    pool.filling = false;
    pool.off = true;
    MADE.notify_all();
}

/// This thread's network namespace, as a descriptor.
fn this_threads_net() -> Result<OwnedFd, Errno> {
    rustix::fs::open(
        "/proc/thread-self/ns/net",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// One new network namespace with its loopback up; this thread is back in
/// `host` when it returns `Ok` (an `Err` after leaving `host` stops the
/// filler, which is then in a namespace nobody else uses).
fn make(host: &OwnedFd) -> Result<OwnedFd, Errno> {
    // SAFETY: `NEWNET` alone moves only this thread into a new network
    // namespace; it shares nothing that other threads could observe (the
    // descriptor table, the filesystem context and the memory stay shared,
    // and this thread opens no socket but the one below).
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }?;
    // SAFETY: raw system calls on that function's own stack.
    let up = unsafe { super::imp::loopback_up() };
    let made = if up < 0 {
        Err(Errno::from_raw_os_error((up as i32).wrapping_neg()))
    } else {
        this_threads_net()
    };
    rustix::thread::move_into_link_name_space(host.as_fd(), Some(LinkNameSpaceType::Network))?;
    made
}

/// Puts `fd` in the pool, once the filler is idle, where the next launch
/// takes it (tests of the launch's fallback).
#[cfg(test)]
pub(super) fn put(fd: OwnedFd) {
    let mut pool = lock();
    while pool.filling && !pool.off {
        pool = crate::sync::wait_std(&MADE, pool);
    }
    pool.spares.push(fd);
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};

    use super::*;

    fn inode(fd: &OwnedFd) -> u64 {
        rustix::fs::fstat(fd).unwrap().st_ino
    }

    /// Whether a TCP listener on 127.0.0.1 answers a connect from inside
    /// `net` (on a thread of its own, which enters it and ends there).
    fn loopback_answers_in(net: &OwnedFd) -> bool {
        let net = net.try_clone().unwrap();
        std::thread::spawn(move || {
            move_into_link_name_space(net.as_fd(), Some(LinkNameSpaceType::Network)).unwrap();
            let Ok(listener) = std::net::TcpListener::bind("127.0.0.1:0") else {
                return false;
            };
            std::net::TcpStream::connect(listener.local_addr().unwrap()).is_ok()
        })
        .join()
        .unwrap()
    }

    /// A request whose first isolated launch finds no spare ready (a
    /// burst emptied the pool) still gets a namespace of its own to share:
    /// made now, new, its loopback up.
    #[test]
    fn a_namespace_made_now_is_new_with_its_loopback_up() {
        if !rustix::process::geteuid().is_root() {
            skipped!("a network namespace is made outside a user namespace as root only");
            return;
        }
        let host = this_threads_net().unwrap();
        let made = made_now().expect("made as root");
        assert_ne!(inode(&made), inode(&host), "the host's namespace");
        assert!(loopback_answers_in(&made), "its loopback is down");
        assert_eq!(
            inode(&this_threads_net().unwrap()),
            inode(&host),
            "this thread never left the host's namespace"
        );
    }

    #[test]
    fn spares_are_new_namespaces_with_their_loopback_up_each_taken_once() {
        if !rustix::process::geteuid().is_root() {
            skipped!("spare network namespaces are made as root only");
            return;
        }
        let host = this_threads_net().unwrap();
        let mut seen = vec![inode(&host)];
        // Held until the end: a freed namespace's inode number is reused,
        // so only live ones can be told apart by it.
        let mut held = Vec::new();
        for _ in 0..3 {
            // A take that finds none within its few milliseconds is a
            // launch that makes its own; keep taking for a while (a loaded
            // machine may schedule the filler late) before calling the pool
            // broken.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            let mut spare = take();
            while spare.is_none() && !is_off() && std::time::Instant::now() < deadline {
                spare = take();
            }
            let Some(spare) = spare else {
                assert!(
                    is_off() || SKIPPED.load(Ordering::Relaxed),
                    "no spare, pool on"
                );
                skipped!("the pool is off on this host");
                return;
            };
            let ino = inode(&spare);
            assert!(
                !seen.contains(&ino),
                "a namespace was handed out twice or is the host's"
            );
            seen.push(ino);
            assert!(loopback_answers_in(&spare), "the spare's loopback is down");
            held.push(spare);
        }
        drop(held);
        // The control: the check fails where the loopback is down.
        let down = std::thread::spawn(|| {
            // SAFETY: NEWNET alone, on this scratch thread.
            unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }.unwrap();
            this_threads_net().unwrap()
        })
        .join()
        .unwrap();
        assert!(!loopback_answers_in(&down));

        // A spare the spawner thread cannot enter (here not a namespace at
        // all): the launch clones a network namespace of its own and the
        // pool is off from then on.
        let landlock = crate::confine::landlock_abi() > 0;
        if !landlock {
            skipped!("(fallback): no Landlock, no confined launch");
            return;
        }
        let bogus =
            rustix::fs::open("/dev/null", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).unwrap();
        put(bogus);
        let ws = tempfile::tempdir().unwrap();
        let inv = crate::process::Invocation::validate(
            crate::process::InvocationSpec::new("/bin/sh")
                .with_args(["-c", "readlink /proc/self/ns/net"])
                .with_confinement(crate::confine::Confinement::workspace_write()),
        )
        .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let ev = rt
            .block_on(crate::process::run(
                inv,
                &crate::process::LaunchOptions::new(ws.path()),
            ))
            .unwrap();
        assert_eq!(ev.exit_code, Some(0), "{ev:?}");
        let net = ev.stdout.text.trim();
        let host = std::fs::read_link("/proc/self/ns/net").unwrap();
        assert!(
            net.starts_with("net:[") && net != host.to_str().unwrap(),
            "{ev:?}"
        );
        assert!(is_off(), "the pool stayed on after a spare failed");
        assert!(take().is_none());
    }
}
