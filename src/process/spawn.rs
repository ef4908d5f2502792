//! `clone3(CLONE_VM | CLONE_VFORK | CLONE_PIDFD | CLONE_INTO_CGROUP)`—Starts
//! a program inside a cgroup v2 with no window in which it, or anything it
//! forks, runs outside it.
//!
//! # Theory of operation
//!
//! glibc 2.36 has neither `posix_spawnattr_setcgroup_np` nor `pidfd_spawn`,
//! and moving a process into a cgroup after it started leaves a window in
//! which it can fork outside. So this module is a small `posix_spawn` of
//! its own, shaped like glibc's `sysdeps/unix/sysv/linux/spawni.c`:
//!
//! 1. The parent builds everything the child needs (the `argv`/`envp`
//!    pointer arrays with their NULL terminators, the stdio descriptors, a
//!    stack of its own with a guard page) before the clone. The child
//!    allocates nothing, takes no lock, never touches the Rust runtime or
//!    thread-local state, and makes its system calls with inline assembly
//!    (not through libc, which would write `errno` into the *parent's*
//!    thread-local storage it shares).
//! 2. The parent blocks every signal (the raw `rt_sigprocmask`, so glibc's
//!    internal ones too), then calls `clone3`. The kernel places the child in
//!    the cgroup before it runs its first instruction; `CLONE_VFORK` suspends
//!    the calling thread until the child has called `execve` or exited, so
//!    the data the child reads stays alive and unchanged; `CLONE_VM` makes it
//!    cost the same whatever the parent's size (no page tables copied);
//!    `CLONE_PIDFD` returns a pidfd with no pid-reuse window.
//! 3. The child, still with every signal blocked, resets every caught
//!    signal to `SIG_DFL` (a handler such as tokio's `SIGCHLD` one must never
//!    run on the shared memory) and `SIGPIPE` to `SIG_DFL` as std does;
//!    ignored signals stay ignored. Then `setpgid(0, 0)` if asked, the stdio
//!    `dup2`s, every other descriptor marked close-on-exec, `chdir`, an
//!    **empty** signal mask (what std's `Command` gives a child, so the
//!    program starts as it would under `Command`), and `execve`.
//! 4. A failing step writes its stage and errno into a slot in the shared
//!    memory and exits 127. The parent resumes, restores its signal mask,
//!    reads the slot, and on a failure reaps the child through its pidfd so
//!    no zombie remains.
//!
//! ## Inherited seccomp filter
//!
//! Installing a seccomp filter costs the kernel tens of microseconds on
//! every call (it converts and JITs the program, and emulates it for every
//! system call number to fill its allow cache), and releasing it at the
//! child's exit costs more. A filter is a property of a *thread*, and
//! `clone3` copies the calling thread's filter (a reference, no copy) and
//! its `no_new_privs` into the child. So a confinement with a seccomp
//! program is spawned by a dedicated thread of this process, started on
//! first use, that blocked every signal, set `no_new_privs` and installed
//! the program **on itself only** (no `SECCOMP_FILTER_FLAG_TSYNC`: no other
//! thread of the process is affected). That thread does nothing but
//! `clone3` on behalf of the caller, which builds everything as above and
//! sleeps until the child exec'ed or exited; the child is filtered from
//! its first instruction, before it applies the rest. The kernel wakes the
//! caller itself (`CLONE_CHILD_CLEARTID`: the child's `execve` or exit
//! zeroes a futex word in the caller's frame and wakes it, at the moment
//! it releases a `CLONE_VFORK` parent), so the hand-off costs one wake-up
//! each way, not a second one relayed by the spawner thread. One thread
//! per distinct program; it makes one `clone3` at a time, without
//! `CLONE_VFORK` (the caller, not the thread, waits for the `execve`), so
//! it does not wait on a child before cloning the next. Where the thread
//! cannot be started or cannot install the program (or after a `fork` of
//! this process, which does not copy it), the child installs the program
//! itself as its last step.
//!
//! ## A large descriptor table
//!
//! A clone without `CLONE_FILES` copies the whole descriptor table into the
//! child (`dup_fd`), and the child's `execve` closes every copy again (all
//! are close-on-exec): a launch from a node holding thousands of
//! connections pays for each of them twice. So a spawn whose descriptors
//! are numbered from [`LARGE_TABLE`](imp::LARGE_TABLE) up is *handed off*:
//! the parent places the child's stdio (and its Landlock ruleset) in a set
//! of four low slots — descriptors this module opened once, while the table
//! was small (`LaunchOptions::new` does it), each holding `/dev/null`
//! between spawns; `dup3` replaces a slot's file atomically — and clones
//! with `CLONE_FILES`. The child's very first system call is
//! `close_range(below, ~0, CLOSE_RANGE_UNSHARE)`: the kernel gives it a
//! table of its own and copies only the descriptors below the range it
//! closes (the few low ones: the slots, and whatever the process opened
//! first). Until then it touches no descriptor, so the parent's table is
//! never changed by it. Once the spawn returns (the child exec'ed or
//! exited) the slots get `/dev/null` back, which also drops their
//! references to the child's pipe ends (the reader's EOF needs that). Four
//! sets serve four spawns at once; a fifth, or a kernel without
//! `CLOSE_RANGE_UNSHARE` (before 5.9, or one that filters it, probed once
//! on a thread of its own), or slots that landed high (the first launch
//! came from a large table), uses the plain copy. Measured by
//! `benches/process_fd_table.rs`.
//!
//! ## A request's network namespace
//!
//! The isolated launches of one request with the network off share one
//! network namespace (`process::SharedNetwork`). As root it is owned by
//! the host's user namespace: the spawner thread enters it for the
//! `clone3`, which makes every other namespace (`spawn::netns`). An
//! unprivileged process cannot enter a namespace it holds no capability
//! over, and a thread of a process with several threads cannot enter a
//! user namespace at all (`setns(2)`), so the request's network namespace
//! is made together with a user namespace of its own (the *request's user
//! namespace*, mapping this process's ids to themselves), by a child that
//! opens both for this process and exits. A launch then goes through a
//! *pre-init*: cloned with no namespace flag and `CLONE_FILES`, it enters
//! the request's user namespace and its network namespace (a single
//! threaded process with a filesystem context of its own may), unshares
//! the mount, ipc, uts and pid namespaces (the last for its children:
//! they are owned by the request's user namespace, in which it holds every
//! capability), and clones the sandbox's init with `CLONE_PARENT` (the
//! init is this process's child, as without it), `CLONE_PIDFD` (into this
//! process's table, which it shares, and the caller's slot) and the
//! init's stack; then it exits, and the caller reaps it. The init needs no
//! id maps (the user namespace has them) and goes on as any other. A pre-
//! init that cannot enter or unshare reports it before any init exists:
//! the launch then clones a network namespace of its own, as without one.
//! What the sandboxes of one request share is that user namespace, in
//! which their programs hold no capability, and its loopback; each has
//! its own pid, mount, ipc and uts namespaces.
//!
//! ## A prepared sandbox
//!
//! Composing a view is most of an isolated launch's own cost (the
//! namespaces' clone, the id maps, some 40 mount steps). From a request's
//! second isolated launch with the network off (not for a terminal or a
//! network `allow`), each launch, before it starts, queues the clone of
//! the *next* launch's sandbox: an init in new user, pid, mount, ipc and
//! uts namespaces inside the request's network namespace (as root the
//! spawner thread enters it for the clone; otherwise a pre-init enters the
//! request's user and network namespaces and clones the init, as for a
//! launch: *A request's network namespace*), cloned with `CLONE_VM` and
//! `CLONE_FILES` (it shares this process's memory and descriptor table)
//! into a cgroup made for the next launch (`CLONE_INTO_CGROUP`: moving a
//! process between cgroups later would cost an RCU grace period,
//! milliseconds, whenever migrations are rare), or into none where none
//! can be made (the launch then runs in the pid-namespace tier). A
//! helper it clones with a descriptor table of its own (`compose`)
//! writes the id maps and composes the view as planned for this launch:
//! the descriptors that opens must not sit in the shared table, where
//! another launch's copy of it would hold them (an id map's file held open
//! for writing through the view's `/proc` made the host's read-only step
//! fail `EBUSY` in 1.7 % of preparations). Then the init marks itself
//! ready and sleeps on a futex. Nothing waits for it. It is the request's
//! (`confine::build::SharedNet::spare`), one at a time, for a launch
//! beneath the same request cgroup (a launch prepares for its request's
//! next only when the one before in the namespace was its request's);
//! unused, it is killed and reaped when the request stops
//! (`request::barrier`, before the request's cgroup is looked at) or with
//! the request's network namespace.
//!
//! The requests of an MCP session share its network namespace and mostly
//! launch once each (a `process_run` is a request). There a request's
//! first launch queues the sandbox of the session's *next* request's first
//! launch instead: beneath a request cgroup reserved for that request
//! (`process::SharedNetwork`, made or taken from the kept ones as any
//! request cgroup), in a process cgroup of its own. The next request's
//! barrier takes the reserved cgroup as its request cgroup, journalled
//! before anything runs in it as any, and its first launch finds the
//! sandbox keyed by that cgroup. Nothing of a tool ever ran in the
//! reserved cgroup: only the sandbox's init waits in it. A request's stop
//! kills only a sandbox that waits beneath its own cgroup; the session's
//! end kills the one that waits and removes the reserved cgroup.
//!
//! Outside a request, while a [`SpareKeeper`](crate::contain::SpareKeeper)
//! lives (an embedder that launches again and again), each isolated
//! launch with the network off queues the next one's sandbox the same way
//! (`process::launch`, `STANDALONE`), in a network namespace taken from
//! those this process keeps ready ([`netns`]: as root only; making one on
//! the launch's path would cost it more than the sandbox saves) and into
//! a cgroup made beneath the base. The launch that takes it runs in that
//! namespace whether or not the sandbox fits its view, and no other launch
//! does: no two launches outside a request share a network namespace, as
//! without it. The last keeper's drop kills the sandbox that waits.
//!
//! The next launch plans its view as always, from the host as it is then
//! (the sockets bound, the protected paths that exist), and takes the
//! prepared sandbox only if that plan equals the one it was composed
//! from, for the same spawner thread (the same seccomp program), once it
//! is ready; else it kills it and composes its own. The launch's
//! containment is then the cgroup the sandbox waits in
//! (`process::launch`), and the init is handed the launch: its arguments
//! in shared memory, the futex woken. The init first checks the view
//! against the host from inside ([`Stage::Stale`] if not): every
//! mount the steps made is still a mount at its path (a path removed or
//! replaced on the host takes the sandbox's mount on it away), every copy
//! attached has the identity (device, inode) its host path has now, and a
//! masked host socket is still masked or gone. A stale sandbox is killed
//! and the launch composes its own view, as if none had been prepared.
//! Then the init takes a descriptor table of its own (a copy of this
//! process's, which holds the launch's stdio now) and goes on exactly as
//! a composed launch's init does from its stdio on: the view's Landlock
//! rules, every capability dropped, the program cloned. What the launch
//! sees is the view a launch composed at that moment would show, composed
//! a little earlier; the host's changes between the two are those the
//! check covers, and a change after it is one any sandbox meets while it
//! runs.
//!
//! ## Background work beside the launcher
//!
//! An isolated launch sets work off in the background: the network
//! namespace that replaces the spare it took (the filler thread of
//! [`netns`]), the next launch's sandbox (its clone on the spawner
//! thread, its view composed in its init), the view of the launch before
//! released (the release thread). Each is one long stretch in the kernel
//! (a network namespace's making ≈ 300 µs here, a sandbox's clone with
//! its namespaces 150–300 µs), and a kernel without full preemption
//! (`PREEMPT_NONE`, common on servers) lets nothing else run on that CPU
//! until it ends: a step of the launch woken there (its init handed the
//! launch, the program's first run, the caller woken at the `execve`)
//! waits for it. So the threads
//! that do such work keep off the CPU of the last isolated launch
//! ([`Aside`]: `note_launcher` at the launch's start; each narrows itself
//! to its whole set but that CPU before a piece of work, reading its set
//! first and setting it only when that CPU changed; a set something else
//! gave the thread meanwhile, `taskset` say, becomes its whole set and is
//! never widened past), and a sandbox cloned for the next launch
//! inherits that, its init and the helper composing its view included. A
//! launch's own clone, which its caller waits for, comes back to the
//! spawner thread's whole set first. At the launch the caller moves the
//! prepared init onto its own CPU before it wakes it (it runs there once
//! the caller sleeps, not behind the background's work), and the init
//! takes the spawner thread's whole set back (as the spawner thread last
//! published it) before it clones the program: a tool gets every CPU its
//! launcher may use, prepared or not.
//! With one CPU, or an affinity that cannot be read, nothing moves.
//!
//! # Caveats
//!
//! - x86-64 Linux only (the clone trampoline is assembly); elsewhere
//!   [`spawn`] returns [`SpawnError::Unsupported`] and [`supported`] is
//!   `false`, so the caller falls back to its ordinary spawner.
//! - Needs Linux 5.7 (`CLONE_INTO_CGROUP`); a seccomp filter may hide
//!   `clone3` (container runtimes answer `ENOSYS` or `EPERM`): both are
//!   [`SpawnError::Unsupported`].
//! - Checked with `strace -f -e trace=clone3,execve` on the test
//!   `spawns_into_a_fresh_cgroup` (Linux 6.18): the probe, then the spawn.
//!
//!   ```text
//!   clone3({flags=CLONE_VM|CLONE_VFORK|CLONE_INTO_CGROUP, exit_signal=SIGCHLD,
//!           stack=0x7f5ece48c000, stack_size=0x1000, cgroup=2147483647}, 88)
//!           = -1 EBADF (Bad file descriptor)
//!   clone3({flags=CLONE_VM|CLONE_PIDFD|CLONE_VFORK|CLONE_INTO_CGROUP,
//!           pidfd=0x7f5ece1a3e14, exit_signal=SIGCHLD, stack=0x7f5ecdf95000,
//!           stack_size=0x10000, cgroup=3} => {pidfd=[7]}, 88) = 2736
//!   execve("/bin/cat", ["cat", "/proc/self/cgroup"], 0x7f5ec8000dd0 /* 1 var */) = 0
//!   ```

#![allow(
    unsafe_code,
    reason = "the clone3 trampoline and the child's raw system calls cannot be expressed safely"
)]
#![cfg_attr(
    not(test),
    allow(
        dead_code,
        unused_imports,
        reason = "the driver's cgroup tier calls this; until then only the tests do"
    )
)]

use std::ffi::{CStr, CString};
use std::fmt;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::io::Errno;

/// What to start, and how.
pub(crate) struct SpawnSpec<'a> {
    /// The path to `execve` (absolute: nothing is searched).
    pub program: &'a CStr,
    /// The argument vector, `argv[0]` included.
    pub argv: &'a [CString],
    /// The whole environment, `KEY=VALUE` entries. Never logged.
    pub envp: &'a [CString],
    /// `chdir` here in the child before `execve`.
    pub cwd: Option<&'a CStr>,
    /// Becomes the child's descriptor 0.
    pub stdin: BorrowedFd<'a>,
    /// Becomes the child's descriptor 1.
    pub stdout: BorrowedFd<'a>,
    /// Becomes the child's descriptor 2.
    pub stderr: BorrowedFd<'a>,
    /// `setpgid(0, 0)` in the child: it leads a new process group.
    pub new_process_group: bool,
    /// `SIGINT` at its default action in the child even if this process
    /// ignores it (a session: an interrupt must mean what Ctrl-C means).
    pub default_sigint: bool,
    /// Descriptor 0 is a terminal (a session's pseudo-terminal slave) that
    /// becomes the controlling terminal of a new session the child leads
    /// (`setsid` instead of `setpgid`, then `TIOCSCTTY`); isolated, the
    /// sandbox's init leads it and the program runs in its foreground
    /// process group. Either way the root leads the process group the
    /// driver signals.
    pub terminal: bool,
    /// A cgroup v2 directory descriptor the child starts in
    /// (`CLONE_INTO_CGROUP`); `None` keeps the caller's cgroup.
    pub cgroup: Option<BorrowedFd<'a>>,
    /// A confinement to apply just before `execve` (see [`ChildConfine`]).
    pub confine: Option<ChildConfine<'a>>,
    /// Isolate: clone into new namespaces, compose the view, drop every
    /// capability and start the program from a minimal init (see
    /// *Isolation* in the module docs).
    pub isolate: Option<Isolate<'a>>,
}

/// What an isolated launch needs besides [`ChildConfine`].
#[derive(Clone, Copy)]
pub(crate) struct Isolate<'a> {
    /// The view, planned in the parent.
    pub view: &'a crate::confine::view::View,
    /// The Landlock filesystem rights to grant beneath the view's fresh
    /// `/tmp` and `/dev` (kernel bits; 0: no filesystem ruleset).
    pub access_fs: u64,
    /// A ruleset the program restricts itself with after the init did,
    /// so that its domain is nested in the init's (no ptrace-mode access
    /// to the init, which shares this process's memory).
    pub nest: Option<BorrowedFd<'a>>,
    /// With the network off: a network namespace to run in instead of a
    /// new one (a request's, shared by its isolated processes: see
    /// [`shared_network_namespace`]); `None`: one of the launch's own.
    pub net: Option<BorrowedFd<'a>>,
    /// The user namespace that owns `net`, where that is not the host's:
    /// the launch enters both before it makes the others (module docs,
    /// *A request's network namespace*).
    pub net_user: Option<BorrowedFd<'a>>,
    /// Where the sandbox prepared for this launch waits, if one was taken
    /// for it ([`take_prepared`]; module docs, *A prepared sandbox*).
    pub spare: Option<&'a std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>>,
}

/// A network namespace with its loopback up for a request's isolated
/// processes to share. As root it is made outside any user namespace (a
/// spare, or one made now; see `spawn::netns`): owned by the host's user
/// namespace, no sandbox holds a capability over it. Otherwise (an
/// unprivileged process) it is made together with a user namespace of its
/// own, which owns it and which every launch of the request enters first;
/// no sandbox holds a capability in that one either (the program drops
/// every capability). `None` where neither can be made.
pub(crate) fn shared_network_namespace() -> Option<crate::confine::build::SharedNet> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        use crate::confine::build::SharedNet;
        if let Some(net) = netns::shared() {
            return Some(SharedNet::new(net, None));
        }
        imp::user_network_namespace()
            .inspect_err(|e| {
                tracing::debug!(
                    error = %e,
                    "no network namespace for the request; each launch has its own"
                );
            })
            .ok()
            .map(|(user, net)| SharedNet::new(net, Some(user)))
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        None
    }
}

/// A network namespace of the host's user namespace with its loopback up,
/// taken from those this process keeps ready (`netns`), for one launch
/// outside a request; `None` where none is ready (an unprivileged
/// process keeps none).
pub(crate) fn spare_network_namespace() -> Option<crate::confine::build::SharedNet> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        netns::take().map(|net| crate::confine::build::SharedNet::new(net, None))
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        None
    }
}

/// The kind of [`shared_network_namespace`] an unprivileged process makes
/// (a user namespace of its own owns it), made whoever runs (tests).
#[cfg(all(test, target_arch = "x86_64"))]
pub(crate) fn user_network_namespace() -> Result<crate::confine::build::SharedNet, Errno> {
    imp::user_network_namespace()
        .map(|(user, net)| crate::confine::build::SharedNet::new(net, Some(user)))
}

/// What the child applies to itself after `chdir` and before `execve`, in
/// this order: `prctl(PR_SET_NO_NEW_PRIVS, 1)` (unless inherited, below),
/// `landlock_restrict_self(ruleset, 0)`, `seccomp(SECCOMP_SET_MODE_FILTER,
/// 0, program)`. Everything is built by the parent (`crate::confine`).
///
/// The seccomp program is normally not installed by the child: it is
/// installed once on a spawner thread of this process that has nothing
/// else to do (see *Inherited seccomp filter* in the module docs), and
/// the child, cloned by that thread, inherits it with `no_new_privs` from
/// its first instruction, so it does not set `no_new_privs` again. Only
/// where that thread cannot be set up does the child set both itself, as
/// above.
#[derive(Clone, Copy)]
pub(crate) struct ChildConfine<'a> {
    /// A Landlock ruleset descriptor.
    pub ruleset: Option<BorrowedFd<'a>>,
    /// A seccomp BPF program (at most `u16::MAX` instructions); `'static`
    /// because the spawner thread that carries it lives as long as the
    /// process.
    pub seccomp: Option<&'static [seccompiler::sock_filter]>,
}

/// A started child: its pid and a pidfd that refers to it (close-on-exec).
///
/// Nobody has reaped it; the caller owns that (e.g. `waitid(P_PIDFD)`).
#[derive(Debug)]
pub(crate) struct Spawned {
    /// The child's pid (isolated: the sandbox's init, whose process group
    /// and session the program shares).
    pub pid: u32,
    /// A pidfd for the child, obtained atomically with its creation.
    pub pidfd: OwnedFd,
    /// The sandbox's init, when isolated: it must outlive the child's
    /// reaping (see [`IsolatedInit`]).
    pub isolation: Option<IsolatedInit>,
    /// The child started with a small descriptor table of its own
    /// (module docs, *A large descriptor table*), not a copy of this
    /// process's.
    pub small_table: bool,
    /// Network `allow`: the proxy's listener, opened on the sandbox's
    /// loopback by its init (non-blocking, close-on-exec).
    pub proxy_listener: Option<OwnedFd>,
}

#[cfg(target_arch = "x86_64")]
pub(crate) use imp::IsolatedInit;
#[cfg(target_arch = "x86_64")]
pub(crate) use imp::{
    SparePlan, prepare_next, prepared_on, prepared_parent, slot_free, take_prepared, waiting_init,
};
#[cfg(target_arch = "x86_64")]
pub(crate) use imp::{
    prepare_handoff, prepared_launches, set_handoff, set_hold_mount_ns, set_prepared,
};

/// No prepared sandbox off x86-64.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn set_prepared(_on: bool) {}

/// No prepared sandbox off x86-64.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn prepared_launches() -> u64 {
    0
}

/// Nothing to prepare off x86-64.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn prepare_handoff() {}

/// No hand-off off x86-64.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn set_handoff(_on: bool) {}

/// No isolation off x86-64.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn set_hold_mount_ns(_on: bool) {}

/// Never constructed off x86-64.
#[cfg(not(target_arch = "x86_64"))]
#[derive(Debug)]
pub(crate) enum IsolatedInit {}

#[cfg(not(target_arch = "x86_64"))]
impl IsolatedInit {
    pub(crate) fn program_status(&self) -> Option<i32> {
        match *self {}
    }
}

/// The step of a spawn that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Mapping the child's stack (parent).
    Stack,
    /// Moving a stdio source out of the way of descriptors 0–2 (parent).
    StdioDup,
    /// `clone3` itself (parent).
    Clone,
    /// `setpgid(0, 0)` (child).
    SetProcessGroup,
    /// `dup2` onto descriptor 0 (child).
    Stdin,
    /// `dup2` onto descriptor 1 (child).
    Stdout,
    /// `dup2` onto descriptor 2 (child).
    Stderr,
    /// `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)` (child).
    CloseFds,
    /// `chdir` (child).
    Chdir,
    /// `execve` (child): `ENOENT` is "no such program", `EACCES` "not
    /// executable", `ENOEXEC` "not a format the kernel runs".
    Exec,
    /// `prctl(PR_SET_NO_NEW_PRIVS, 1)` (child).
    NoNewPrivs,
    /// `landlock_restrict_self` (child).
    Landlock,
    /// `seccomp(SECCOMP_SET_MODE_FILTER)` (child).
    Seccomp,
    /// Moving the ruleset descriptor out of the way of 0–2 (parent).
    ConfineDup,
    /// Writing `setgroups`, `uid_map` or `gid_map` (isolated child).
    IdMap,
    /// `prctl(PR_SET_PDEATHSIG)` or `setsid` (isolated child).
    Session,
    /// A step of the composed view (isolated child; the step's index is
    /// in [`SpawnError::Failed`]'s message).
    View,
    /// Bringing the loopback interface up (isolated child).
    Loopback,
    /// Opening the proxy's listener in the sandbox's network namespace and
    /// sending it to the caller (isolated child, network `allow`).
    ProxyListener,
    /// A Landlock rule for the view's fresh `/tmp` or `/dev` (isolated
    /// child).
    LandlockRule,
    /// Dropping the capability sets (isolated child).
    Capabilities,
    /// Cloning the program from the sandbox's init (isolated child).
    Fork,
    /// The sandbox's init died before it reported (isolated child).
    InitDied,
    /// Entering the request's user and network namespaces, or making the
    /// others beneath them (the pre-init of a launch that shares the
    /// request's network namespace).
    JoinNetwork,
    /// Cloning the sandbox's init from the pre-init.
    InitClone,
    /// A prepared sandbox's check of its view, at its launch: the view
    /// is no longer the one the host gives now (module docs, *A prepared
    /// sandbox*). Never reported: the launch composes a view of its own.
    Stale,
}

impl Stage {
    const CHILD: [Stage; 22] = [
        Stage::Stale,
        Stage::JoinNetwork,
        Stage::InitClone,
        Stage::ProxyListener,
        Stage::IdMap,
        Stage::Session,
        Stage::View,
        Stage::Loopback,
        Stage::LandlockRule,
        Stage::Capabilities,
        Stage::Fork,
        Stage::InitDied,
        Stage::SetProcessGroup,
        Stage::Stdin,
        Stage::Stdout,
        Stage::Stderr,
        Stage::CloseFds,
        Stage::Chdir,
        Stage::Exec,
        Stage::NoNewPrivs,
        Stage::Landlock,
        Stage::Seccomp,
    ];

    /// The child's code for this stage in the shared slot (0 = no failure).
    const fn code(self) -> u32 {
        match self {
            Stage::SetProcessGroup => 1,
            Stage::Stdin => 2,
            Stage::Stdout => 3,
            Stage::Stderr => 4,
            Stage::CloseFds => 5,
            Stage::Chdir => 6,
            Stage::Exec => 7,
            Stage::NoNewPrivs => 8,
            Stage::Landlock => 9,
            Stage::Seccomp => 10,
            Stage::IdMap => 11,
            Stage::Session => 12,
            Stage::View => 13,
            Stage::Loopback => 14,
            Stage::LandlockRule => 15,
            Stage::Capabilities => 16,
            Stage::Fork => 17,
            Stage::InitDied => 18,
            Stage::ProxyListener => 19,
            Stage::JoinNetwork => 20,
            Stage::InitClone => 21,
            Stage::Stale => 22,
            Stage::Stack | Stage::StdioDup | Stage::Clone | Stage::ConfineDup => 0,
        }
    }

    fn from_code(code: u32) -> Option<Stage> {
        Stage::CHILD.into_iter().find(|s| s.code() == code)
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Stack => "stack mmap",
            Stage::StdioDup => "stdio dup",
            Stage::Clone => "clone3",
            Stage::SetProcessGroup => "setpgid",
            Stage::Stdin => "dup2 stdin",
            Stage::Stdout => "dup2 stdout",
            Stage::Stderr => "dup2 stderr",
            Stage::CloseFds => "close_range",
            Stage::Chdir => "chdir",
            Stage::Exec => "execve",
            Stage::NoNewPrivs => "prctl no_new_privs",
            Stage::Landlock => "landlock_restrict_self",
            Stage::Seccomp => "seccomp",
            Stage::ConfineDup => "ruleset dup",
            Stage::IdMap => "uid/gid map",
            Stage::Session => "setsid/pdeathsig",
            Stage::View => "view",
            Stage::Loopback => "loopback up",
            Stage::ProxyListener => "proxy listener",
            Stage::LandlockRule => "landlock_add_rule",
            Stage::Capabilities => "capability drop",
            Stage::Fork => "clone3 of the program",
            Stage::InitDied => "init died",
            Stage::JoinNetwork => "entering the request's network namespace",
            Stage::InitClone => "clone3 of the init",
            Stage::Stale => "the prepared sandbox's check",
        })
    }
}

/// Why a spawn failed. No variant carries the program's environment.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum SpawnError {
    /// `clone3` (or its `CLONE_INTO_CGROUP`) is not available: an old
    /// kernel, a seccomp filter, or a target without the trampoline. Fall
    /// back to another spawner.
    #[error("clone3 into a cgroup is unavailable ({errno})")]
    Unsupported {
        /// What `clone3` answered (`ENOSYS` where it was never tried).
        errno: Errno,
    },
    /// The cgroup given in [`SpawnSpec::cgroup`] refused the child: it was
    /// removed (`ENODEV`), is not a cgroup v2 directory (`EBADF`), has
    /// controllers enabled for its children (`EBUSY`, the "no internal
    /// processes" rule), is a threaded domain (`EOPNOTSUPP`), or may not be
    /// written (`EACCES`, `EPERM`). Nothing was started.
    #[error("the cgroup refused the new process ({errno})")]
    CgroupRefused {
        /// What `clone3` answered.
        errno: Errno,
    },
    /// A step failed; for a child step the child was reaped.
    #[error("spawn failed at {stage} ({errno})")]
    Failed {
        /// The step that failed.
        stage: Stage,
        /// Its errno.
        errno: Errno,
    },
}

impl SpawnError {
    /// The errno behind the failure.
    pub(crate) fn errno(&self) -> Errno {
        match self {
            SpawnError::Unsupported { errno }
            | SpawnError::CgroupRefused { errno }
            | SpawnError::Failed { errno, .. } => *errno,
        }
    }
}

impl From<SpawnError> for io::Error {
    fn from(e: SpawnError) -> Self {
        io::Error::from_raw_os_error(e.errno().raw_os_error())
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use imp::{
    isolation_known, isolation_supported, net_namespace_supported, spawn, supported,
};

/// Starts, on a thread of its own, the work an isolated launch needs once
/// per process (the seccomp program and the spawner thread that carries
/// it, the Landlock ABI), with `probe` the isolation probe (a best-effort
/// launch waits for its answer before it plans; a strict one does not, see
/// [`isolation_known`]) and, with `new_net`, the spare network namespaces
/// of [`netns`] (`spares`: how many in all; `None`: as many as launches
/// take).
///
/// Each part is started once per process: a later call that asks for
/// nothing new returns without a thread (one whose thread could not be
/// started leaves the work to the first launch, as without a call).
/// Whether this call had anything to start.
///
/// The thread also discovers the cgroup hierarchy and starts the thread
/// that tears views down ([`imp::release_queue`]), so that neither waits
/// on the launch's path. It starts on a CPU other than the caller's
/// ([`Beside`]): a new thread otherwise queues behind its creator on the
/// creator's CPU (measured here: its work began only when the caller
/// blocked, 0.3–0.4 ms later, while the other CPU idled), and the work it
/// exists to move off the caller's path stays on it.
#[cfg(target_arch = "x86_64")]
pub(crate) fn prepare_isolation(new_net: bool, spares: Option<usize>, probe: bool) -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    /// What a call has started: [`BASE`], [`NET`], [`PROBE`].
    static PREPARED: AtomicU8 = AtomicU8::new(0);
    /// The seccomp program and its spawner, the Landlock ABI.
    const BASE: u8 = 1;
    /// The spare network namespaces.
    const NET: u8 = 2;
    /// The isolation probe.
    const PROBE: u8 = 4;
    let want = BASE | if new_net { NET } else { 0 } | if probe { PROBE } else { 0 };
    let todo = want & !PREPARED.fetch_or(want, Ordering::Relaxed);
    if todo == 0 {
        return false;
    }
    let launcher = rustix::thread::sched_getcpu();
    let beside = Beside::avoiding(Some(launcher));
    let placed = beside.placed();
    let started = std::thread::Builder::new()
        .name("custodian-prepare".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            // Back on every CPU the caller may use before anything else
            // (the threads this one starts, and the sandboxes cloned from
            // the spawner, inherit its affinity).
            placed.wait_and_widen();
            if todo & NET != 0 {
                netns::start(spares);
            }
            if todo & PROBE != 0 {
                let _ = imp::isolation_supported();
            }
            if todo & BASE != 0 {
                // The spawner thread every isolated launch clones from,
                // with the isolation's seccomp program installed on it.
                if let Ok(program) = crate::confine::build::isolation_program() {
                    imp::start_spawner(program, launcher);
                }
                let _ = crate::confine::landlock_abi();
                crate::contain::discover_once();
                let _ = imp::release_queue();
            }
        });
    match started {
        Ok(thread) => beside.place(&thread),
        Err(e) => tracing::debug!(error = %e, "isolation not prepared ahead of the launch"),
    }
    true
}

/// The CPU the last isolated launch started on (`usize::MAX`: none yet),
/// which custodian's background threads keep off ([`Aside`]).
#[cfg(target_arch = "x86_64")]
static LAUNCHER_CPU: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(usize::MAX);

/// Background threads work on every CPU of theirs ([`set_aside`]).
#[cfg(target_arch = "x86_64")]
static ASIDE_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether background threads keep off the launcher's CPU ([`Aside`]);
/// on by default. For the benchmark that measures what it saves.
#[cfg(target_arch = "x86_64")]
pub(crate) fn set_aside(on: bool) {
    ASIDE_OFF.store(!on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether background threads keep off the launcher's CPU.
#[cfg(target_arch = "x86_64")]
fn aside_on() -> bool {
    !ASIDE_OFF.load(std::sync::atomic::Ordering::Relaxed)
}

/// Nothing runs in the background off x86-64.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn set_aside(_on: bool) {}

/// Notes the calling thread's CPU as the launcher's ([`Aside`]).
#[cfg(target_arch = "x86_64")]
pub(crate) fn note_launcher() {
    LAUNCHER_CPU.store(
        rustix::thread::sched_getcpu(),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// A background thread's affinity (module docs, *Background work beside
/// the launcher*): its whole set, narrowed while it works to every CPU of
/// it but the launcher's ([`note_launcher`]). On a kernel without full
/// preemption a background stretch in the kernel (a network namespace
/// made: ≈ 300 µs here; a sandbox's clone) holds the CPU it runs on
/// until it ends, and a step of a launch woken there waits for it. With
/// one CPU in the set, or an affinity that cannot be read, nothing is
/// narrowed.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Aside {
    /// The thread's set as last seen: at its start, or as something else
    /// (the embedder, `taskset`) set it since.
    whole: Option<rustix::thread::CpuSet>,
    /// The CPU kept off now (`None`: the whole set).
    off: Option<usize>,
}

#[cfg(target_arch = "x86_64")]
impl Aside {
    /// The calling thread's set as it is now.
    pub(crate) fn new() -> Aside {
        Aside {
            whole: rustix::thread::sched_getaffinity(None).ok(),
            off: None,
        }
    }

    /// The calling thread's whole set, as last seen.
    pub(crate) fn whole(&self) -> Option<&rustix::thread::CpuSet> {
        self.whole.as_ref()
    }

    /// Narrows the calling thread to its set but the launcher's CPU.
    pub(crate) fn step_aside(&mut self) {
        if aside_on() {
            self.keep_off(LAUNCHER_CPU.load(std::sync::atomic::Ordering::Relaxed));
        } else {
            self.come_back();
        }
    }

    /// Narrows the calling thread to its set but `cpu` (nothing if `cpu`
    /// is not in it, is its only CPU, or is kept off already).
    fn keep_off(&mut self, cpu: usize) {
        self.refresh();
        let Some(whole) = &self.whole else {
            return;
        };
        if self.off == Some(cpu)
            || cpu >= rustix::thread::CpuSet::MAX_CPU
            || !whole.is_set(cpu)
            || whole.count() < 2
        {
            return;
        }
        let mut narrow = *whole;
        narrow.unset(cpu);
        if rustix::thread::sched_setaffinity(None, &narrow).is_ok() {
            self.off = Some(cpu);
        }
    }

    /// The calling thread's whole set back.
    pub(crate) fn come_back(&mut self) {
        self.refresh();
        if let (Some(whole), Some(_)) = (&self.whole, self.off) {
            if rustix::thread::sched_setaffinity(None, whole).is_ok() {
                self.off = None;
            }
        }
    }

    /// A set that something else gave the thread since this one last set
    /// it is its whole set from now on (never widened back past it).
    fn refresh(&mut self) {
        let Ok(now) = rustix::thread::sched_getaffinity(None) else {
            return;
        };
        let expected = match (&self.whole, self.off) {
            (Some(whole), Some(cpu)) => {
                let mut narrow = *whole;
                narrow.unset(cpu);
                Some(narrow)
            }
            (whole, _) => *whole,
        };
        if expected != Some(now) {
            self.whole = Some(now);
            self.off = None;
        }
    }
}

/// Starts a new thread on a CPU other than its creator's: the creator
/// narrows the new thread's affinity to every CPU it may use but its own
/// ([`Beside::place`]), which moves the thread there at once; the thread
/// waits for that ([`Placed::wait_and_widen`]) and then takes the
/// creator's whole set back, so it keeps no narrower affinity than its
/// creator's. With one CPU, or an affinity that cannot be read, nothing is
/// narrowed.
#[cfg(target_arch = "x86_64")]
struct Beside {
    /// The creator's affinity, when there is another CPU in it.
    mask: Option<rustix::thread::CpuSet>,
    /// The CPU to keep the thread off (`None`: the creator's at placing).
    avoid: Option<usize>,
    placed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The new thread's side of a [`Beside`].
#[cfg(target_arch = "x86_64")]
struct Placed {
    mask: Option<rustix::thread::CpuSet>,
    placed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[cfg(target_arch = "x86_64")]
impl Beside {
    /// To start a thread on a CPU other than `cpu` (`None`: the caller's).
    fn avoiding(cpu: Option<usize>) -> Beside {
        let mask = rustix::thread::sched_getaffinity(None)
            .ok()
            .filter(|m| m.count() > 1);
        Beside {
            mask,
            avoid: cpu,
            placed: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }

    fn placed(&self) -> Placed {
        Placed {
            mask: self.mask,
            placed: self.placed.clone(),
        }
    }

    /// Narrows `thread` to the creator's CPUs but the one to avoid, then
    /// lets it run on.
    fn place(self, thread: &std::thread::JoinHandle<()>) {
        use std::os::unix::thread::JoinHandleExt as _;
        if let Some(mask) = &self.mask {
            let here = self.avoid.unwrap_or_else(rustix::thread::sched_getcpu);
            // SAFETY: an all-zero `cpu_set_t` is the empty set.
            let mut others: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            let mut any = false;
            for cpu in (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| c != here) {
                if mask.is_set(cpu) {
                    // SAFETY: `cpu` is below `MAX_CPU`, the set's size.
                    unsafe { libc::CPU_SET(cpu, &mut others) };
                    any = true;
                }
            }
            if any {
                // SAFETY: the handle names a live thread of this process
                // (not joined before this returns); `others` is a
                // `cpu_set_t` of the size given.
                unsafe {
                    libc::pthread_setaffinity_np(
                        thread.as_pthread_t(),
                        std::mem::size_of::<libc::cpu_set_t>(),
                        &raw const others,
                    );
                }
            }
        }
        self.placed
            .store(true, std::sync::atomic::Ordering::Release);
        thread.thread().unpark();
    }
}

#[cfg(target_arch = "x86_64")]
impl Placed {
    fn wait_and_widen(self) {
        while !self.placed.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::park();
        }
        if let Some(mask) = &self.mask {
            let _ = rustix::thread::sched_setaffinity(None, mask);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
/// Nothing to prepare: isolation needs the x86-64 clone trampoline.
pub(crate) fn prepare_isolation(_new_net: bool, _spares: Option<usize>, _probe: bool) -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
/// Never: the clone trampoline exists for x86-64 only.
pub(crate) fn isolation_supported() -> Result<(), Errno> {
    Err(Errno::NOSYS)
}

#[cfg(not(target_arch = "x86_64"))]
/// Always known: never (the clone trampoline exists for x86-64 only).
pub(crate) fn isolation_known() -> Option<Result<(), Errno>> {
    Some(Err(Errno::NOSYS))
}

#[cfg(not(target_arch = "x86_64"))]
/// Always `false`: the clone trampoline exists for x86-64 only.
pub(crate) fn supported() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
/// Always [`SpawnError::Unsupported`] (`ENOSYS`) on this architecture.
///
/// # Errors
///
/// Always.
pub(crate) fn spawn(_spec: &SpawnSpec<'_>) -> Result<Spawned, SpawnError> {
    Err(SpawnError::Unsupported {
        errno: Errno::NOSYS,
    })
}

#[cfg(target_arch = "x86_64")]
mod netns;
#[cfg(target_arch = "x86_64")]
pub(crate) use netns::set_spares;

#[cfg(not(target_arch = "x86_64"))]
/// Nothing to turn: no isolation on this architecture.
pub(crate) fn set_spares(_on: bool) {}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::ffi::{CStr, c_char, c_int, c_void};
    use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
    use std::ptr;
    use std::sync::atomic::{AtomicI32, AtomicIsize, AtomicPtr, AtomicU32, Ordering};
    use std::sync::{Mutex, OnceLock, mpsc};

    use std::sync::atomic::{AtomicBool, AtomicU64};

    use rustix::io::Errno;

    use super::{SpawnError, SpawnSpec, Spawned, Stage};
    use crate::confine::view::{ATTR_NODEV, ATTR_NOSUID, ATTR_RDONLY, Step, View};

    /// `CLONE_INTO_CGROUP` (Linux 5.7); libc's constant overflows `c_int`.
    const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
    /// `CLOSE_RANGE_CLOEXEC` (Linux 5.11).
    const CLOSE_RANGE_CLOEXEC: usize = 1 << 2;
    /// `CLOSE_RANGE_UNSHARE` (Linux 5.9).
    const CLOSE_RANGE_UNSHARE: usize = 1 << 1;
    /// x86-64 base pages are always 4 KiB.
    const PAGE: usize = 4096;
    /// The child's stack: its frames are small (no allocation, no
    /// formatting); glibc's spawni uses 32 KiB plus the argv size.
    const STACK: usize = 64 * 1024;
    /// Signals 1..=64 (`_NSIG` is 65 on Linux).
    const NSIG: usize = 64;

    /// The kernel's `struct sigaction` on x86-64 (not glibc's).
    #[repr(C)]
    struct KernelSigaction {
        handler: usize,
        flags: u64,
        restorer: usize,
        mask: u64,
    }

    /// Everything the child reads, built by the parent before the clone,
    /// and the slot the child writes a failure into.
    #[repr(C)]
    struct ChildArgs {
        program: *const c_char,
        argv: *const *const c_char,
        envp: *const *const c_char,
        /// NULL: no `chdir`.
        cwd: *const c_char,
        /// Sources for descriptors 0, 1, 2: each is ≥ 3 or equal to its
        /// target (the parent moved any other low one up).
        stdio: [c_int; 3],
        new_process_group: bool,
        /// An ignored `SIGINT` goes back to `SIG_DFL` too.
        default_sigint: bool,
        /// Descriptor 0 becomes the controlling terminal of a new session
        /// (see [`SpawnSpec::terminal`]).
        terminal: bool,
        /// Set `no_new_privs` (any confinement, unless the cloning thread
        /// has it already and the child inherits it).
        no_new_privs: bool,
        /// A Landlock ruleset descriptor (≥ 3), or -1.
        landlock: c_int,
        /// A seccomp program, or NULL.
        seccomp: *const libc::sock_fprog,
        /// Isolation (NULL: none): the child becomes the sandbox's init.
        isolate: *const IsolateArgs,
        /// Cloned with `CLONE_FILES` (sharing this process's descriptor
        /// table): the child's first step is `close_range(unshare_below,
        /// ~0, CLOSE_RANGE_UNSHARE)`, a table of its own holding only the
        /// descriptors below. -1: cloned without `CLONE_FILES`.
        unshare_below: c_int,
        failed_stage: AtomicU32,
        failed_errno: AtomicI32,
    }

    /// An anonymous mapping for the child's stack, with a guard page at
    /// its low end; unmapped on drop.
    struct Stack {
        base: *mut c_void,
        len: usize,
    }

    // SAFETY: a `Stack` is an address range this process owns; moving the
    // owner to another thread moves nothing the type does not own.
    unsafe impl Send for Stack {}

    /// Stacks of children that have exec'ed or exited, kept for the next
    /// spawns: a mapping, its guard page and its first touched pages are not
    /// made again per launch.
    static SPARE_STACKS: std::sync::Mutex<Vec<Stack>> = std::sync::Mutex::new(Vec::new());
    /// At most this many spare stacks are kept (64 KiB + a page each).
    const MAX_SPARE_STACKS: usize = 16;

    impl Stack {
        /// A spare stack, or a new one.
        fn take() -> Result<Stack, Errno> {
            let spare = SPARE_STACKS.lock().unwrap_or_else(|e| e.into_inner()).pop();
            match spare {
                Some(stack) => Ok(stack),
                None => Stack::new(STACK),
            }
        }

        /// Keeps this stack for a later spawn, or unmaps it. Only for a
        /// stack whose child has exec'ed or exited (`CLONE_VFORK` returned).
        fn give_back(self) {
            let mut spare = SPARE_STACKS.lock().unwrap_or_else(|e| e.into_inner());
            if spare.len() < MAX_SPARE_STACKS {
                spare.push(self);
            }
        }
    }

    /// The calling thread's `errno` after a failed libc call (parent only).
    fn last_errno() -> Errno {
        Errno::from_raw_os_error(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOMEM),
        )
    }

    impl Stack {
        fn new(usable: usize) -> Result<Stack, Errno> {
            let len = usable + PAGE;
            // SAFETY: an anonymous private mapping at an address the kernel
            // chooses aliases nothing; the result is checked below.
            let base = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(last_errno());
            }
            let stack = Stack { base, len };
            // SAFETY: the first page of the mapping just created, which
            // nothing references yet.
            if unsafe { libc::mprotect(base, PAGE, libc::PROT_NONE) } != 0 {
                return Err(last_errno());
            }
            Ok(stack)
        }

        /// The usable range as `clone3` wants it: (lowest address, size).
        fn region(&self) -> (u64, u64) {
            ((self.base as usize + PAGE) as u64, (self.len - PAGE) as u64)
        }
    }

    impl Drop for Stack {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`; the child that ran on it has
            // exec'ed or exited (CLONE_VFORK), so nothing uses it any more.
            unsafe {
                libc::munmap(self.base, self.len);
            }
        }
    }

    /// Blocks every signal in the calling thread (the raw system call, so
    /// glibc's internal ones too) and restores the previous mask on drop.
    struct BlockAll {
        old: u64,
    }

    impl BlockAll {
        fn new() -> BlockAll {
            let all: u64 = !0;
            let mut old: u64 = 0;
            // SAFETY: rt_sigprocmask reads and writes two 8-byte sets that
            // live on this stack for the duration of the call.
            unsafe {
                raw4(
                    libc::SYS_rt_sigprocmask as usize,
                    libc::SIG_SETMASK as usize,
                    (&raw const all) as usize,
                    (&raw mut old) as usize,
                    8,
                );
            }
            BlockAll { old }
        }
    }

    impl Drop for BlockAll {
        fn drop(&mut self) {
            // SAFETY: as in `new`; restores the mask saved there.
            unsafe {
                raw4(
                    libc::SYS_rt_sigprocmask as usize,
                    libc::SIG_SETMASK as usize,
                    (&raw const self.old) as usize,
                    0,
                    8,
                );
            }
        }
    }

    /// A raw system call with up to four arguments; returns `-errno` on
    /// failure. Touches no memory of its own and no thread-local state.
    ///
    /// # Safety
    ///
    /// The arguments must be valid for system call `nr`.
    #[inline(always)]
    unsafe fn raw4(nr: usize, a1: usize, a2: usize, a3: usize, a4: usize) -> isize {
        let ret: isize;
        // SAFETY: the caller vouches for the arguments; `syscall` clobbers
        // only rax (the result), rcx and r11.
        unsafe {
            core::arch::asm!(
                "syscall",
                inlateout("rax") nr as isize => ret,
                in("rdi") a1,
                in("rsi") a2,
                in("rdx") a3,
                in("r10") a4,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret
    }

    /// [`raw4`] with a fifth argument (in `r8`).
    ///
    /// # Safety
    ///
    /// The arguments must be valid for system call `nr`.
    #[inline(always)]
    unsafe fn raw5(nr: usize, a1: usize, a2: usize, a3: usize, a4: usize, a5: usize) -> isize {
        let ret: isize;
        // SAFETY: as in `raw4`.
        unsafe {
            core::arch::asm!(
                "syscall",
                inlateout("rax") nr as isize => ret,
                in("rdi") a1,
                in("rsi") a2,
                in("rdx") a3,
                in("r10") a4,
                in("r8") a5,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret
    }

    /// `exit_group(127)` without libc (no atexit handlers, no flushing of
    /// the parent's stdio buffers, which the child shares).
    fn exit_127() -> ! {
        exit_group(127)
    }

    /// `exit_group(code)` without libc, as [`exit_127`].
    fn exit_group(code: i32) -> ! {
        // SAFETY: exit_group takes one integer and does not return.
        unsafe {
            core::arch::asm!(
                "syscall",
                in("rax") libc::SYS_exit_group,
                in("rdi") code,
                options(noreturn, nostack),
            );
        }
    }

    /// `CLONE_NEWUSER` and the other namespace flags (`libc`'s are
    /// `c_int`).
    const NEW_NAMESPACES: u64 = (libc::CLONE_NEWUSER
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS) as u64;
    /// `open_tree` flags.
    const OPEN_TREE_CLONE: usize = 1;
    const OPEN_TREE_CLOEXEC: usize = libc::O_CLOEXEC as usize;
    const AT_RECURSIVE: usize = 0x8000;
    const AT_EMPTY_PATH: usize = 0x1000;
    const MOVE_MOUNT_F_EMPTY_PATH: usize = 0x4;
    const AT_FDCWD: isize = -100;
    /// `__WALL`: wait for every kind of child.
    const WALL: usize = 0x4000_0000;

    /// One step of the view, as the child reads it (see
    /// `crate::confine::view::Step`).
    #[repr(C)]
    pub(super) struct RawStep {
        op: u32,
        flags: u64,
        slot: usize,
        a: *const c_char,
        b: *const c_char,
        c: *const c_char,
    }

    const OP_PRIVATE: u32 = 1;
    const OP_CLONE: u32 = 2;
    const OP_HOST_RO: u32 = 3;
    const OP_MOUNT: u32 = 4;
    const OP_MKDIR: u32 = 5;
    const OP_TOUCH: u32 = 6;
    const OP_SYMLINK: u32 = 7;
    const OP_ATTACH: u32 = 8;
    const OP_READ_ONLY: u32 = 9;
    const OP_BIND_SELF: u32 = 10;
    const OP_MASK_DIR: u32 = 11;
    const OP_MASK_FILE: u32 = 12;
    const OP_MASK_SOCKET: u32 = 13;

    /// The raw steps of `view`, pointing into its strings (which outlive
    /// them: the caller keeps the view until the child released it).
    pub(super) fn raw_steps(steps: &[Step]) -> Vec<RawStep> {
        let none = ptr::null();
        steps
            .iter()
            .map(|s| {
                let mut r = RawStep {
                    op: 0,
                    flags: 0,
                    slot: 0,
                    a: none,
                    b: none,
                    c: none,
                };
                match s {
                    Step::Private => r.op = OP_PRIVATE,
                    Step::Clone { path, slot, set } => {
                        (r.op, r.a, r.slot, r.flags) = (OP_CLONE, path.as_ptr(), *slot, *set);
                    }
                    Step::HostReadOnly => r.op = OP_HOST_RO,
                    Step::Mount {
                        fstype,
                        target,
                        flags,
                        data,
                    } => {
                        (r.op, r.a, r.b, r.c, r.flags) = (
                            OP_MOUNT,
                            fstype.as_ptr(),
                            target.as_ptr(),
                            data.as_ptr(),
                            *flags,
                        );
                    }
                    Step::Mkdir { path, mode } => {
                        (r.op, r.a, r.flags) = (OP_MKDIR, path.as_ptr(), u64::from(*mode));
                    }
                    Step::Touch { path } => (r.op, r.a) = (OP_TOUCH, path.as_ptr()),
                    Step::Symlink { target, link } => {
                        (r.op, r.a, r.b) = (OP_SYMLINK, target.as_ptr(), link.as_ptr());
                    }
                    Step::Attach { slot, path } => {
                        (r.op, r.a, r.slot) = (OP_ATTACH, path.as_ptr(), *slot);
                    }
                    Step::ReadOnly { path } => (r.op, r.a) = (OP_READ_ONLY, path.as_ptr()),
                    Step::BindSelf { path, read_only } => {
                        (r.op, r.a, r.flags) = (OP_BIND_SELF, path.as_ptr(), u64::from(*read_only));
                    }
                    Step::MaskDir { path } => (r.op, r.a) = (OP_MASK_DIR, path.as_ptr()),
                    Step::MaskFile { path } => (r.op, r.a) = (OP_MASK_FILE, path.as_ptr()),
                    Step::MaskSocket { path } => (r.op, r.a) = (OP_MASK_SOCKET, path.as_ptr()),
                }
                r
            })
            .collect()
    }

    /// What the init of an isolated launch reads (besides [`ChildArgs`]).
    #[repr(C)]
    pub(super) struct IsolateArgs {
        steps: *const RawStep,
        n_steps: usize,
        /// Descriptor slots the steps fill (`n_slots` of them).
        fds: *mut c_int,
        n_slots: usize,
        uid_map: *const u8,
        uid_map_len: usize,
        gid_map: *const u8,
        gid_map_len: usize,
        /// Bring the loopback up: the clone made this launch's network
        /// namespace (a spare from [`super::netns`] has it up already).
        /// Set by the caller before each clone attempt.
        loopback: AtomicBool,
        /// Only contained (an unconfined launch's pid-namespace tier): a
        /// new process group instead of a new session, and neither the
        /// view's Landlock rules nor the capability drop.
        contains_only: bool,
        /// `prctl(PR_SET_PDEATHSIG, SIGKILL)`: only when the cloning thread
        /// lives as long as the process (the spawner thread).
        death_signal: bool,
        /// Directories of the view to grant `access_fs` beneath.
        rw_dirs: *const *const c_char,
        n_rw_dirs: usize,
        access_fs: u64,
        /// The program's stack (it runs there until its `execve`).
        tool_stack: (u64, u64),
        /// Where the init stores the program's wait status, tagged
        /// (`1 << 32 | status`); lives until the init is reaped.
        status: *const AtomicU64,
        /// The caller's futex word: the init zeroes it and wakes the caller
        /// once the program exec'ed, or when the set-up failed.
        released: *const AtomicU32,
        /// The index of the failed view step.
        failed_step: AtomicU32,
        /// The nesting ruleset (≥ 3), or -1.
        nest: c_int,
        /// Network `allow`: the init's end of a datagram socket pair over
        /// which it sends the proxy's listener (`SCM_RIGHTS`), or -1.
        proxy_channel: c_int,
        /// The loopback port the proxy's listener binds.
        proxy_port: u16,
        /// The request's user namespace and network namespace, which the
        /// pre-init enters (module docs, *A request's network
        /// namespace*), or -1 each.
        join_user: c_int,
        join_net: c_int,
        /// This attempt goes through the pre-init (set by the caller
        /// before each clone attempt, as `loopback`): the init writes no
        /// id maps.
        joined: AtomicBool,
        /// The init's stack, for the pre-init's clone of it.
        init_stack: (u64, u64),
        /// The caller's pidfd slot, where the pre-init's clone stores the
        /// init's pidfd (`CLONE_PIDFD`), and where it stores its pid
        /// (`CLONE_PARENT_SETTID`).
        init_pidfd: *const AtomicI32,
        init_pid: AtomicI32,
        /// A prepared sandbox's init ([`prepared_main`]) waits on this
        /// word until it is 1, then reads its launch from `job`; NULL for
        /// any other child.
        go: *const AtomicU32,
        job: *const AtomicPtr<ChildArgs>,
        /// A launch in a prepared sandbox: per view step, what the step's
        /// mount must show now ([`Expect`]); NULL otherwise.
        expect: *const Expect,
    }

    /// What a prepared sandbox's view step must show at its launch
    /// ([`verify`]): for a copy attached, the identity (device, inode)
    /// its host path has now; for every other mount, only that it is
    /// still a mount there.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Expect {
        /// Compare the identity below.
        identity: bool,
        dev_major: u32,
        dev_minor: u32,
        ino: u64,
    }

    impl IsolateArgs {
        /// Nothing to do: every pointer NULL, every descriptor -1; the
        /// start of a prepared sandbox's arguments and of its launch's.
        fn blank() -> IsolateArgs {
            IsolateArgs {
                steps: ptr::null(),
                n_steps: 0,
                fds: ptr::null_mut(),
                n_slots: 0,
                uid_map: ptr::null(),
                uid_map_len: 0,
                gid_map: ptr::null(),
                gid_map_len: 0,
                loopback: AtomicBool::new(false),
                contains_only: false,
                death_signal: true,
                rw_dirs: ptr::null(),
                n_rw_dirs: 0,
                access_fs: 0,
                tool_stack: (0, 0),
                status: ptr::null(),
                released: ptr::null(),
                failed_step: AtomicU32::new(u32::MAX),
                nest: -1,
                proxy_channel: -1,
                proxy_port: 0,
                join_user: -1,
                join_net: -1,
                joined: AtomicBool::new(false),
                init_stack: (0, 0),
                init_pidfd: ptr::null(),
                init_pid: AtomicI32::new(0),
                go: ptr::null(),
                job: ptr::null(),
                expect: ptr::null(),
            }
        }
    }

    /// `struct landlock_path_beneath_attr` (packed, as the kernel's).
    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }

    /// `struct mount_attr`.
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }

    /// [`raw4`] with a sixth argument unused; for five-argument calls.
    ///
    /// # Safety
    ///
    /// As [`raw5`].
    #[inline(always)]
    unsafe fn sys5(
        nr: libc::c_long,
        a1: usize,
        a2: usize,
        a3: usize,
        a4: usize,
        a5: usize,
    ) -> isize {
        // SAFETY: the caller vouches for the arguments.
        unsafe { raw5(nr as usize, a1, a2, a3, a4, a5) }
    }

    /// Zeroes the caller's futex word and wakes it. After this the init
    /// touches neither [`ChildArgs`] nor [`IsolateArgs`] again.
    ///
    /// # Safety
    ///
    /// `released` is the live word of a caller that waits on it.
    unsafe fn release(released: *const AtomicU32) {
        // SAFETY: the caller of `spawn` waits until the word is 0; the wake
        // names only its address.
        unsafe {
            (*released).store(0, Ordering::Release);
            raw4(
                libc::SYS_futex as usize,
                released as usize,
                libc::FUTEX_WAKE as usize,
                1,
                0,
            );
        }
    }

    /// Writes `len` bytes at `data` into the file at `path` (the id maps).
    ///
    /// # Safety
    ///
    /// `path` is a NUL-terminated string and `data` `len` readable bytes.
    unsafe fn write_file(path: &CStr, data: *const u8, len: usize) -> isize {
        // SAFETY: open/write/close on valid pointers.
        unsafe {
            let fd = raw4(
                libc::SYS_open as usize,
                path.as_ptr() as usize,
                (libc::O_WRONLY | libc::O_CLOEXEC) as usize,
                0,
                0,
            );
            if fd < 0 {
                return fd;
            }
            let w = raw4(libc::SYS_write as usize, fd as usize, data as usize, len, 0);
            raw4(libc::SYS_close as usize, fd as usize, 0, 0, 0);
            if w < 0 { w } else { 0 }
        }
    }

    /// `mount_setattr(dfd, path, flags, {attr_set: set})`.
    ///
    /// # Safety
    ///
    /// `path` is NUL-terminated.
    unsafe fn set_attr(dfd: isize, path: *const c_char, flags: usize, set: u64) -> isize {
        let attr = MountAttr {
            attr_set: set,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        // SAFETY: the attribute lives on this stack for the call.
        unsafe {
            sys5(
                libc::SYS_mount_setattr,
                dfd as usize,
                path as usize,
                flags,
                (&raw const attr) as usize,
                size_of::<MountAttr>(),
            )
        }
    }

    /// A detached copy of the tree at `path` (`-errno` on failure).
    ///
    /// # Safety
    ///
    /// `path` is NUL-terminated.
    unsafe fn open_tree(path: *const c_char, recursive: bool) -> isize {
        let flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | if recursive { AT_RECURSIVE } else { 0 };
        // SAFETY: open_tree reads the path.
        unsafe {
            raw4(
                libc::SYS_open_tree as usize,
                AT_FDCWD as usize,
                path as usize,
                flags,
                0,
            )
        }
    }

    /// Attaches the detached tree `fd` at `path` and closes `fd`.
    ///
    /// # Safety
    ///
    /// `path` is NUL-terminated.
    unsafe fn attach(fd: isize, path: *const c_char) -> isize {
        // SAFETY: move_mount reads two paths; close takes an integer.
        unsafe {
            let r = sys5(
                libc::SYS_move_mount,
                fd as usize,
                c"".as_ptr() as usize,
                AT_FDCWD as usize,
                path as usize,
                MOVE_MOUNT_F_EMPTY_PATH,
            );
            raw4(libc::SYS_close as usize, fd as usize, 0, 0, 0);
            r
        }
    }

    /// Runs one view step; `-errno` on failure.
    ///
    /// # Safety
    ///
    /// `step`'s pointers are NUL-terminated strings the caller keeps alive;
    /// `fds` has `n` writable slots.
    unsafe fn run_step(step: &RawStep, fds: *mut c_int, n: usize) -> isize {
        let slot = |i: usize| -> Option<*mut c_int> {
            // SAFETY: in bounds, checked.
            (i < n).then(|| unsafe { fds.add(i) })
        };
        let none = 0usize;
        // SAFETY: every call below passes strings and structures that live
        // for the call, as the function's contract says.
        unsafe {
            match step.op {
                OP_PRIVATE => sys5(
                    libc::SYS_mount,
                    none,
                    c"/".as_ptr() as usize,
                    none,
                    (libc::MS_REC | libc::MS_PRIVATE) as usize,
                    none,
                ),
                OP_CLONE => {
                    let Some(out) = slot(step.slot) else {
                        return -(libc::EINVAL as isize);
                    };
                    let fd = open_tree(step.a, true);
                    if fd < 0 {
                        return fd;
                    }
                    *out = fd as c_int;
                    if step.flags != 0 {
                        let r =
                            set_attr(fd, c"".as_ptr(), AT_EMPTY_PATH | AT_RECURSIVE, step.flags);
                        if r < 0 {
                            return r;
                        }
                    }
                    0
                }
                OP_HOST_RO => set_attr(
                    AT_FDCWD,
                    c"/".as_ptr(),
                    AT_RECURSIVE,
                    ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV,
                ),
                OP_MOUNT => sys5(
                    libc::SYS_mount,
                    step.a as usize,
                    step.b as usize,
                    step.a as usize,
                    step.flags as usize,
                    step.c as usize,
                ),
                OP_MKDIR => {
                    let r = raw4(
                        libc::SYS_mkdir as usize,
                        step.a as usize,
                        step.flags as usize,
                        0,
                        0,
                    );
                    if r == -(libc::EEXIST as isize) { 0 } else { r }
                }
                OP_TOUCH => {
                    let fd = raw4(
                        libc::SYS_open as usize,
                        step.a as usize,
                        (libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW)
                            as usize,
                        0o644,
                        0,
                    );
                    if fd < 0 {
                        return fd;
                    }
                    raw4(libc::SYS_close as usize, fd as usize, 0, 0, 0);
                    0
                }
                OP_SYMLINK => {
                    let r = raw4(
                        libc::SYS_symlink as usize,
                        step.a as usize,
                        step.b as usize,
                        0,
                        0,
                    );
                    if r == -(libc::EEXIST as isize) { 0 } else { r }
                }
                OP_ATTACH => {
                    let Some(fd) = slot(step.slot) else {
                        return -(libc::EINVAL as isize);
                    };
                    let fd = *fd;
                    if fd < 0 {
                        return -(libc::EBADF as isize);
                    }
                    attach(fd as isize, step.a)
                }
                OP_READ_ONLY => set_attr(AT_FDCWD, step.a, 0, ATTR_RDONLY),
                OP_BIND_SELF => {
                    let fd = open_tree(step.a, true);
                    if fd < 0 {
                        return fd;
                    }
                    if step.flags != 0 {
                        let r =
                            set_attr(fd, c"".as_ptr(), AT_EMPTY_PATH | AT_RECURSIVE, ATTR_RDONLY);
                        if r < 0 {
                            raw4(libc::SYS_close as usize, fd as usize, 0, 0, 0);
                            return r;
                        }
                    }
                    attach(fd, step.a)
                }
                OP_MASK_DIR => sys5(
                    libc::SYS_mount,
                    c"tmpfs".as_ptr() as usize,
                    step.a as usize,
                    c"tmpfs".as_ptr() as usize,
                    (libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC) as usize,
                    c"size=4k,nr_inodes=1,mode=0555".as_ptr() as usize,
                ),
                OP_MASK_FILE | OP_MASK_SOCKET => {
                    let fd = open_tree(c"/dev/null".as_ptr(), false);
                    if fd < 0 {
                        return fd;
                    }
                    let r = set_attr(fd, c"".as_ptr(), AT_EMPTY_PATH, ATTR_RDONLY);
                    if r < 0 {
                        raw4(libc::SYS_close as usize, fd as usize, 0, 0, 0);
                        return r;
                    }
                    match attach(fd, step.a) {
                        // The host socket was removed since it was listed.
                        r if step.op == OP_MASK_SOCKET && r == -(libc::ENOENT as isize) => 0,
                        r => r,
                    }
                }
                _ => -(libc::EINVAL as isize),
            }
        }
    }

    /// `ioctl(SIOCSIFFLAGS, "lo", IFF_UP)` on a datagram socket.
    ///
    /// # Safety
    ///
    /// Raw system calls on this stack only.
    pub(super) unsafe fn loopback_up() -> isize {
        // SAFETY: socket/ioctl/close with a `struct ifreq` on this stack.
        unsafe {
            let fd = raw4(
                libc::SYS_socket as usize,
                libc::AF_INET as usize,
                (libc::SOCK_DGRAM | libc::SOCK_CLOEXEC) as usize,
                0,
                0,
            );
            if fd < 0 {
                return fd;
            }
            // struct ifreq: the name, then (a union) the flags as a short.
            let mut ifr = [0u8; 40];
            ifr[0] = b'l';
            ifr[1] = b'o';
            let flags = (libc::IFF_UP as u16).to_ne_bytes();
            ifr[16] = flags[0];
            ifr[17] = flags[1];
            let r = raw4(
                libc::SYS_ioctl as usize,
                fd as usize,
                libc::SIOCSIFFLAGS as usize,
                (&raw mut ifr) as usize,
                0,
            );
            raw4(libc::SYS_close as usize, fd as usize, 0, 0, 0);
            r
        }
    }

    /// Empties every capability set: ambient, bounding, then effective,
    /// permitted and inheritable (`capset` with zeroes).
    ///
    /// # Safety
    ///
    /// Raw system calls on this stack only.
    unsafe fn drop_capabilities() -> isize {
        // SAFETY: prctl takes integers; capset reads two structures on this
        // stack.
        unsafe {
            let r = raw5(
                libc::SYS_prctl as usize,
                libc::PR_CAP_AMBIENT as usize,
                libc::PR_CAP_AMBIENT_CLEAR_ALL as usize,
                0,
                0,
                0,
            );
            if r < 0 && r != -(libc::EINVAL as isize) {
                return r;
            }
            for cap in 0..64usize {
                let r = raw5(
                    libc::SYS_prctl as usize,
                    libc::PR_CAPBSET_DROP as usize,
                    cap,
                    0,
                    0,
                    0,
                );
                if r == -(libc::EINVAL as isize) {
                    break; // past the kernel's last capability
                }
                if r < 0 {
                    return r;
                }
            }
            // _LINUX_CAPABILITY_VERSION_3, this process; two zeroed data.
            let header: [u32; 2] = [0x2008_0522, 0];
            let data = [0u32; 6];
            raw4(
                libc::SYS_capset as usize,
                (&raw const header) as usize,
                (&raw const data) as usize,
                0,
                0,
            )
        }
    }

    /// The isolated child's set-up before stdio (id maps, session, view,
    /// loopback). `Err((stage, -errno))` on failure, with the view step's
    /// index stored in `i.failed_step`.
    ///
    /// # Safety
    ///
    /// `i` is the live [`IsolateArgs`] of this child.
    unsafe fn isolate_early(i: &IsolateArgs, terminal: bool) -> Result<(), (Stage, isize)> {
        // SAFETY: as each part says.
        unsafe {
            isolate_ids(i)?;
            isolate_session(i, terminal)?;
            isolate_view(i)
        }
    }

    /// The user namespace's id maps (none when joined: the request's user
    /// namespace has them).
    ///
    /// # Safety
    ///
    /// `i` is the live [`IsolateArgs`] of a child in the new user
    /// namespace.
    unsafe fn isolate_ids(i: &IsolateArgs) -> Result<(), (Stage, isize)> {
        // SAFETY: the pointers and lengths were built by the parent for
        // exactly this and are kept alive until the release.
        unsafe {
            if !i.joined.load(Ordering::Relaxed) {
                let r = write_file(c"/proc/self/setgroups", b"deny".as_ptr(), 4);
                if r < 0 && r != -(libc::ENOENT as isize) {
                    return Err((Stage::IdMap, r));
                }
                let r = write_file(c"/proc/self/uid_map", i.uid_map, i.uid_map_len);
                if r < 0 {
                    return Err((Stage::IdMap, r));
                }
                let r = write_file(c"/proc/self/gid_map", i.gid_map, i.gid_map_len);
                if r < 0 {
                    return Err((Stage::IdMap, r));
                }
            }
        }
        Ok(())
    }

    /// The init's death signal and its session (or, contained only, its
    /// process group). Opens no descriptor.
    ///
    /// # Safety
    ///
    /// `i` is the live [`IsolateArgs`] of the sandbox's init.
    unsafe fn isolate_session(i: &IsolateArgs, terminal: bool) -> Result<(), (Stage, isize)> {
        // SAFETY: prctl, setpgid and setsid take integers.
        unsafe {
            if i.death_signal {
                let r = raw5(
                    libc::SYS_prctl as usize,
                    libc::PR_SET_PDEATHSIG as usize,
                    libc::SIGKILL as usize,
                    0,
                    0,
                    0,
                );
                if r < 0 {
                    return Err((Stage::Session, r));
                }
            }
            // Contained only: the run keeps its session (and terminal), in
            // a process group of its own like the group tier's; a session
            // with a terminal of its own leads a new session either way.
            let r = if i.contains_only && !terminal {
                raw4(libc::SYS_setpgid as usize, 0, 0, 0, 0)
            } else {
                raw4(libc::SYS_setsid as usize, 0, 0, 0, 0)
            };
            if r < 0 {
                return Err((Stage::Session, r));
            }
        }
        Ok(())
    }

    /// The view's steps, then the loopback and the proxy's listener.
    /// `Err((stage, -errno))` on failure, with the view step's index
    /// stored in `i.failed_step`.
    ///
    /// # Safety
    ///
    /// `i` is the live [`IsolateArgs`] of a child in the sandbox's
    /// namespaces, with every capability of its user namespace.
    unsafe fn isolate_view(i: &IsolateArgs) -> Result<(), (Stage, isize)> {
        // SAFETY: the steps, the slots and their strings are the parent's,
        // kept alive until the release.
        unsafe {
            for k in 0..i.n_slots {
                *i.fds.add(k) = -1;
            }
            for k in 0..i.n_steps {
                let r = run_step(&*i.steps.add(k), i.fds, i.n_slots);
                if r < 0 {
                    i.failed_step.store(k as u32, Ordering::Relaxed);
                    return Err((Stage::View, r));
                }
            }
            if i.loopback.load(Ordering::Relaxed) {
                let r = loopback_up();
                if r < 0 {
                    return Err((Stage::Loopback, r));
                }
            }
            if i.proxy_channel >= 0 {
                let r = proxy_listener(i.proxy_channel, i.proxy_port);
                if r < 0 {
                    return Err((Stage::ProxyListener, r));
                }
            }
        }
        Ok(())
    }

    /// Network `allow`: a TCP listener on `127.0.0.1:port` in this
    /// process's (the sandbox's) network namespace, sent to the caller
    /// over `channel` with `SCM_RIGHTS`, then closed here. The caller's
    /// proxy accepts on it from outside: the connections the tool makes
    /// to the port inside arrive there, and nothing else of the sandbox's
    /// network is reachable from outside or the other way round.
    ///
    /// # Safety
    ///
    /// Raw system calls on this stack only; `channel` is a descriptor of
    /// this process.
    unsafe fn proxy_listener(channel: c_int, port: u16) -> isize {
        // SAFETY: socket/setsockopt/bind/listen/sendmsg/close with
        // structures on this stack, which outlive each call.
        unsafe {
            let fd = raw4(
                libc::SYS_socket as usize,
                libc::AF_INET as usize,
                (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as usize,
                0,
                0,
            );
            if fd < 0 {
                return fd;
            }
            let one: c_int = 1;
            let mut r = raw5(
                libc::SYS_setsockopt as usize,
                fd as usize,
                libc::SOL_SOCKET as usize,
                libc::SO_REUSEADDR as usize,
                (&raw const one) as usize,
                size_of::<c_int>(),
            );
            if r >= 0 {
                let addr = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: port.to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
                    },
                    sin_zero: [0; 8],
                };
                r = raw4(
                    libc::SYS_bind as usize,
                    fd as usize,
                    (&raw const addr) as usize,
                    size_of::<libc::sockaddr_in>(),
                    0,
                );
            }
            if r >= 0 {
                r = raw4(libc::SYS_listen as usize, fd as usize, 128, 0, 0);
            }
            if r >= 0 {
                /// `CMSG_SPACE(sizeof(int))` on x86-64: the header, the
                /// descriptor, padding to 8.
                #[repr(C)]
                struct Rights {
                    len: usize,
                    level: c_int,
                    kind: c_int,
                    fd: c_int,
                    pad: c_int,
                }
                let mut control = Rights {
                    // CMSG_LEN(sizeof(int)): header + data, unpadded.
                    len: 16 + size_of::<c_int>(),
                    level: libc::SOL_SOCKET,
                    kind: libc::SCM_RIGHTS,
                    fd: fd as c_int,
                    pad: 0,
                };
                let mut byte = 0u8;
                let mut iov = libc::iovec {
                    iov_base: (&raw mut byte).cast(),
                    iov_len: 1,
                };
                let mut msg: libc::msghdr = core::mem::zeroed();
                msg.msg_iov = &raw mut iov;
                msg.msg_iovlen = 1;
                msg.msg_control = (&raw mut control).cast();
                msg.msg_controllen = size_of::<Rights>();
                r = raw4(
                    libc::SYS_sendmsg as usize,
                    channel as usize,
                    (&raw const msg) as usize,
                    libc::MSG_NOSIGNAL as usize,
                    0,
                );
            }
            raw4(libc::SYS_close as usize, fd as usize, 0, 0, 0);
            r
        }
    }

    /// The isolated child's last steps before the confinement proper: the
    /// Landlock rules for the view's own trees, then no capability left.
    ///
    /// # Safety
    ///
    /// `i` is the live [`IsolateArgs`] of this child; `ruleset` is a
    /// Landlock ruleset descriptor or -1.
    unsafe fn isolate_late(i: &IsolateArgs, ruleset: c_int) -> Result<(), (Stage, isize)> {
        if i.contains_only {
            // Nothing is confined: the tool keeps what `execve` gives it.
            return Ok(());
        }
        // SAFETY: as in `isolate_early`.
        unsafe {
            if ruleset >= 0 && i.access_fs != 0 {
                for k in 0..i.n_rw_dirs {
                    let path = *i.rw_dirs.add(k);
                    let fd = raw4(
                        libc::SYS_open as usize,
                        path as usize,
                        (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as usize,
                        0,
                        0,
                    );
                    if fd < 0 {
                        return Err((Stage::LandlockRule, fd));
                    }
                    let attr = PathBeneath {
                        allowed_access: i.access_fs,
                        parent_fd: fd as i32,
                    };
                    let r = raw4(
                        libc::SYS_landlock_add_rule as usize,
                        ruleset as usize,
                        1, // LANDLOCK_RULE_PATH_BENEATH
                        (&raw const attr) as usize,
                        0,
                    );
                    raw4(libc::SYS_close as usize, fd as usize, 0, 0, 0);
                    if r < 0 {
                        return Err((Stage::LandlockRule, r));
                    }
                }
            }
            let r = drop_capabilities();
            if r < 0 {
                return Err((Stage::Capabilities, r));
            }
        }
        Ok(())
    }

    /// The program of an isolated launch: cloned by the init with
    /// `CLONE_VM | CLONE_VFORK` (the init waits for its `execve`), it only
    /// restores an empty signal mask and executes.
    ///
    /// # Safety
    ///
    /// `args` is the live [`ChildArgs`] of the init that cloned it.
    unsafe extern "C" fn program_main(args: *const ChildArgs) -> ! {
        // SAFETY: the init (and, through it, the caller) keeps `*args`
        // alive until this process exec'ed or exited.
        let a = unsafe { &*args };
        // SAFETY: the init's live IsolateArgs (the caller waits).
        let nest = unsafe { a.isolate.as_ref() }.map_or(-1, |i| i.nest);
        if nest >= 0 {
            // SAFETY: landlock_restrict_self takes a descriptor and flags.
            let r = unsafe {
                raw4(
                    libc::SYS_landlock_restrict_self as usize,
                    nest as usize,
                    0,
                    0,
                    0,
                )
            };
            if r < 0 {
                a.failed_errno
                    .store((r as i32).wrapping_neg(), Ordering::Relaxed);
                a.failed_stage
                    .store(Stage::Landlock.code(), Ordering::Relaxed);
                exit_127()
            }
        }
        let empty: u64 = 0;
        // SAFETY: as in `child_main`.
        let r = unsafe {
            raw4(
                libc::SYS_rt_sigprocmask as usize,
                libc::SIG_SETMASK as usize,
                (&raw const empty) as usize,
                0,
                8,
            );
            raw4(
                libc::SYS_execve as usize,
                a.program as usize,
                a.argv as usize,
                a.envp as usize,
                0,
            )
        };
        a.failed_errno
            .store((r as i32).wrapping_neg(), Ordering::Relaxed);
        a.failed_stage.store(Stage::Exec.code(), Ordering::Relaxed);
        exit_127()
    }

    /// The init of an isolated launch, once everything is set up: clones
    /// the program, releases the caller, closes every descriptor, then
    /// reaps every child until the program's own exit, whose wait status
    /// it stores for the driver before it exits (the kernel then kills
    /// whatever else is left in the pid namespace).
    ///
    /// # Safety
    ///
    /// `a` and `i` are the live arguments of this child.
    unsafe fn init(a: &ChildArgs, i: &IsolateArgs) -> ! {
        let mut args = zeroed_args();
        args.flags = (libc::CLONE_VM | libc::CLONE_VFORK) as u64;
        args.exit_signal = libc::SIGCHLD as u64;
        (args.stack, args.stack_size) = i.tool_stack;
        // SAFETY: the program runs on its own stack, reads `a` (alive until
        // the release below) and never returns.
        let pid = unsafe { clone3(&mut args, program_main, ptr::from_ref(a)) };
        let released = i.released;
        let status = i.status;
        if pid <= 0 || a.failed_stage.load(Ordering::Relaxed) != 0 {
            if pid <= 0 {
                a.failed_errno
                    .store((pid as i32).wrapping_neg(), Ordering::Relaxed);
                a.failed_stage.store(Stage::Fork.code(), Ordering::Relaxed);
            }
            // SAFETY: the caller waits on `released`.
            unsafe { release(released) };
            exit_127()
        }
        // SAFETY: the caller waits on `released`; from here on nothing of
        // `a` or `i` is read (both may be gone once it runs).
        unsafe {
            release(released);
            raw4(libc::SYS_close_range as usize, 0, u32::MAX as usize, 0, 0);
        }
        loop {
            let mut st: c_int = 0;
            // SAFETY: wait4 writes one int on this stack.
            let r = unsafe {
                raw4(
                    libc::SYS_wait4 as usize,
                    usize::MAX, // -1: any child
                    (&raw mut st) as usize,
                    WALL,
                    0,
                )
            };
            if r == pid {
                // SAFETY: the slot lives until this process is reaped.
                unsafe { (*status).store((1 << 32) | u64::from(st as u32), Ordering::Release) };
                let code = if st & 0x7f == 0 {
                    (st >> 8) & 0xff
                } else {
                    128 + (st & 0x7f)
                };
                // SAFETY: exit_group takes one integer and does not return.
                unsafe {
                    core::arch::asm!(
                        "syscall",
                        in("rax") libc::SYS_exit_group,
                        in("rdi") code as usize,
                        options(noreturn, nostack),
                    );
                }
            }
            if r == -(libc::ECHILD as isize) {
                exit_127()
            }
        }
    }

    /// The pre-init of a launch that shares the request's network
    /// namespace (module docs, *A request's network namespace*): enters
    /// the request's user and network namespaces, unshares the others (the
    /// pid namespace for its children), clones the init into them as the
    /// caller's child, and exits. A failure before the init exists is
    /// stored and releases the caller. Only raw system calls, as
    /// [`child_main`].
    ///
    /// # Safety
    ///
    /// As [`child_main`], for a `ChildArgs` with live `IsolateArgs`
    /// whose `join_user` and `join_net` are open; cloned with
    /// `CLONE_FILES` and no namespace flag.
    unsafe extern "C" fn pre_init_main(args: *const ChildArgs) -> ! {
        // SAFETY: the caller keeps `*args` and its `IsolateArgs` alive
        // until the release, which only the init (or this process's
        // failure, below) makes.
        let a = unsafe { &*args };
        // SAFETY: as above; non-NULL for a joined launch.
        let i = unsafe { &*a.isolate };
        // SAFETY: this child's live arguments.
        let fail =
            |stage: Stage, ret: isize| -> ! { unsafe { fail_child(a, Some(i), stage, ret) } };
        // SAFETY: setns and unshare take integers.
        unsafe {
            // The user namespace first: it grants the capability over the
            // network namespace it owns.
            for (fd, kind) in [
                (i.join_user, libc::CLONE_NEWUSER),
                (i.join_net, libc::CLONE_NEWNET),
            ] {
                let r = raw4(libc::SYS_setns as usize, fd as usize, kind as usize, 0, 0);
                if r < 0 {
                    fail(Stage::JoinNetwork, r);
                }
            }
            let r = raw4(
                libc::SYS_unshare as usize,
                (NEW_NAMESPACES & !(libc::CLONE_NEWUSER as u64)) as usize,
                0,
                0,
                0,
            );
            if r < 0 {
                fail(Stage::JoinNetwork, r);
            }
        }
        let mut init = zeroed_args();
        init.flags =
            (libc::CLONE_VM | libc::CLONE_PARENT | libc::CLONE_PIDFD | libc::CLONE_PARENT_SETTID)
                as u64;
        init.pidfd = i.init_pidfd as u64;
        init.parent_tid = i.init_pid.as_ptr() as u64;
        (init.stack, init.stack_size) = i.init_stack;
        // A prepared sandbox's init shares this process's table, as the
        // pre-init does, until its launch (module docs, *A prepared
        // sandbox*).
        let entry: unsafe extern "C" fn(*const ChildArgs) -> ! = if i.go.is_null() {
            child_main
        } else {
            init.flags |= libc::CLONE_FILES as u64;
            prepared_main
        };
        // SAFETY: the init runs on its own stack (the caller keeps it until
        // the init is reaped), reads `a` (alive until the release, or for a
        // prepared one while it lives) and never returns.
        let r = unsafe { clone3(&mut init, entry, args) };
        if r < 0 {
            fail(Stage::InitClone, r);
        }
        exit_127()
    }

    /// A user namespace mapping this process's ids to themselves and a
    /// network namespace it owns, its loopback up: (user, network), made by
    /// a child that opens both into this process's descriptor table
    /// (`CLONE_FILES`) and exits (module docs, *A request's network
    /// namespace*).
    pub(crate) fn user_network_namespace() -> Result<(OwnedFd, OwnedFd), Errno> {
        let (uid_map, gid_map) = own_id_maps();
        let made = MadeNamespaces {
            uid: uid_map.as_bytes(),
            gid: gid_map.as_bytes(),
            user: AtomicI32::new(-1),
            net: AtomicI32::new(-1),
            errno: AtomicI32::new(0),
        };
        let flags = libc::CLONE_FILES | libc::CLONE_NEWUSER | libc::CLONE_NEWNET;
        // SAFETY: the child reads and writes `made`, which outlives the
        // call, and exits.
        unsafe {
            run_vforked(
                flags as u64,
                user_network_namespace_child,
                ptr::from_ref(&made).cast(),
            )?;
        }
        // SAFETY: each is -1 or a descriptor the child opened in this
        // process's table (CLONE_FILES), owned by nobody else.
        let own = |fd: &AtomicI32| {
            let fd = fd.load(Ordering::Relaxed);
            (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
        };
        let (user, net) = (own(&made.user), own(&made.net));
        match (made.errno.load(Ordering::Relaxed), user, net) {
            (0, Some(user), Some(net)) => Ok((user, net)),
            (0, _, _) => Err(Errno::BADF),
            (e, _, _) => Err(Errno::from_raw_os_error(e)),
        }
    }

    /// What the child of [`user_network_namespace`] reads and fills.
    struct MadeNamespaces<'a> {
        uid: &'a [u8],
        gid: &'a [u8],
        user: AtomicI32,
        net: AtomicI32,
        errno: AtomicI32,
    }

    unsafe extern "C" fn user_network_namespace_child(arg: *const ChildArgs) -> ! {
        // SAFETY: `arg` is the parent's live MadeNamespaces (CLONE_VFORK).
        let m = unsafe { &*arg.cast::<MadeNamespaces<'_>>() };
        let open = |path: &CStr| {
            // SAFETY: openat with a NUL-terminated path.
            unsafe {
                raw4(
                    libc::SYS_openat as usize,
                    AT_FDCWD as usize,
                    path.as_ptr() as usize,
                    (libc::O_RDONLY | libc::O_CLOEXEC) as usize,
                    0,
                )
            }
        };
        // SAFETY: raw system calls on the parent's live buffers.
        let r = unsafe {
            let mut r = map_ids(m.uid, m.gid);
            if r == 0 {
                r = loopback_up().min(0);
            }
            r
        };
        let r = if r == 0 {
            let user = open(c"/proc/self/ns/user");
            if user >= 0 {
                m.user.store(user as i32, Ordering::Relaxed);
            }
            let net = open(c"/proc/self/ns/net");
            if net >= 0 {
                m.net.store(net as i32, Ordering::Relaxed);
            }
            user.min(net).min(0)
        } else {
            r
        };
        m.errno.store((r as i32).wrapping_neg(), Ordering::Relaxed);
        exit_127()
    }

    /// Stores a child's failure (`stage`, `-errno` in `ret`) in `a`,
    /// releases the caller of an isolated child (which waits on its word:
    /// no `CLONE_VFORK`) and exits 127.
    ///
    /// # Safety
    ///
    /// `a` and `iso` are the live arguments of this child.
    unsafe fn fail_child(a: &ChildArgs, iso: Option<&IsolateArgs>, stage: Stage, ret: isize) -> ! {
        // ret is -4095..=-1: a plain negation cannot overflow, but
        // wrapping_neg leaves no panic path in the child at all.
        a.failed_errno
            .store((ret as i32).wrapping_neg(), Ordering::Relaxed);
        a.failed_stage.store(stage.code(), Ordering::Relaxed);
        if let Some(i) = iso {
            // SAFETY: the caller waits on the word.
            unsafe { release(i.released) };
        }
        exit_127()
    }

    /// Step 1 of a child: no handler may run in the shared memory. Every
    /// caught signal goes back to `SIG_DFL`, and `SIGPIPE` too (std's
    /// rule); ignored ones stay ignored (POSIX exec semantics), but for a
    /// session's `SIGINT` (`default_sigint`). Signals are all blocked here.
    ///
    /// # Safety
    ///
    /// Only in a child of [`clone3`], before its `execve`.
    unsafe fn reset_signals(default_sigint: bool) {
        let dfl = KernelSigaction {
            handler: libc::SIG_DFL,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        for sig in 1..=NSIG {
            if sig == libc::SIGKILL as usize || sig == libc::SIGSTOP as usize {
                continue;
            }
            let mut old = KernelSigaction {
                handler: 0,
                flags: 0,
                restorer: 0,
                mask: 0,
            };
            // SAFETY: rt_sigaction writes one kernel sigaction into `old`.
            let r = unsafe {
                raw4(
                    libc::SYS_rt_sigaction as usize,
                    sig,
                    0,
                    (&raw mut old) as usize,
                    8,
                )
            };
            let caught = old.handler != libc::SIG_DFL && old.handler != libc::SIG_IGN;
            let pipe = sig == libc::SIGPIPE as usize && old.handler != libc::SIG_DFL;
            let interrupt =
                default_sigint && sig == libc::SIGINT as usize && old.handler == libc::SIG_IGN;
            if r == 0 && (caught || pipe || interrupt) {
                // SAFETY: rt_sigaction reads one kernel sigaction from `dfl`.
                unsafe {
                    raw4(
                        libc::SYS_rt_sigaction as usize,
                        sig,
                        (&raw const dfl) as usize,
                        0,
                        8,
                    );
                }
            }
        }
    }

    /// Steps 3 to 7 of a child (stdio, descriptors, working directory,
    /// confinement, then the program or, isolated, the init's loop): the
    /// end of [`child_main`], and of a prepared sandbox's init once its
    /// launch arrived ([`prepared_main`]).
    ///
    /// # Safety
    ///
    /// As [`child_main`]: `a` and `iso` are the live arguments of this
    /// child, which has a descriptor table of its own.
    unsafe fn finish(a: &ChildArgs, iso: Option<&IsolateArgs>) -> ! {
        // SAFETY: this child's live arguments.
        let fail = |stage: Stage, ret: isize| -> ! { unsafe { fail_child(a, iso, stage, ret) } };
        // 3. stdio. A source already on its target only loses CLOEXEC.
        for (target, (src, stage)) in a
            .stdio
            .iter()
            .zip([Stage::Stdin, Stage::Stdout, Stage::Stderr])
            .enumerate()
        {
            let (src, target) = (*src as usize, target);
            // SAFETY: dup2/fcntl take integers; a bad descriptor is an error.
            let r = unsafe {
                if src == target {
                    raw4(libc::SYS_fcntl as usize, src, libc::F_SETFD as usize, 0, 0)
                } else {
                    raw4(libc::SYS_dup2 as usize, src, target, 0, 0)
                }
            };
            if r < 0 {
                fail(stage, r);
            }
        }
        if a.terminal {
            // The session this child leads (isolated: the init's, which
            // the program joins as its foreground process group) gets
            // descriptor 0 as its controlling terminal. No steal (arg 0):
            // the terminal was opened with O_NOCTTY and is no one's.
            // SAFETY: ioctl(0, TIOCSCTTY, 0) takes integers.
            let r = unsafe { raw4(libc::SYS_ioctl as usize, 0, libc::TIOCSCTTY as usize, 0, 0) };
            if r < 0 {
                fail(Stage::Session, r);
            }
        }

        // 4. Nothing but stdio crosses the exec, whatever other code in this
        // process opened without O_CLOEXEC. EINVAL: a kernel without
        // CLOSE_RANGE_CLOEXEC (before 5.11), where closing does the same;
        // ENOSYS (before 5.9) is tolerated, as std tolerates it.
        // SAFETY: close_range takes integers and acts on this process's
        // own descriptor table (not shared: no CLONE_FILES).
        let mut r = unsafe {
            raw4(
                libc::SYS_close_range as usize,
                3,
                u32::MAX as usize,
                CLOSE_RANGE_CLOEXEC,
                0,
            )
        };
        if r == -(libc::EINVAL as isize) {
            // SAFETY: as above.
            r = unsafe { raw4(libc::SYS_close_range as usize, 3, u32::MAX as usize, 0, 0) };
        }
        if r < 0 && r != -(libc::ENOSYS as isize) {
            fail(Stage::CloseFds, r);
        }

        // 5. Working directory.
        if !a.cwd.is_null() {
            // SAFETY: `cwd` is a NUL-terminated string the parent keeps alive.
            let r = unsafe { raw4(libc::SYS_chdir as usize, a.cwd as usize, 0, 0, 0) };
            if r < 0 {
                fail(Stage::Chdir, r);
            }
        }

        // 6. Confinement, last: nothing above needs a right it takes away.
        // Isolated: the view's own trees granted, every capability dropped.
        // no_new_privs first: both of the others require it.
        if let Some(i) = iso {
            // SAFETY: `i` is this child's live IsolateArgs.
            if let Err((stage, r)) = unsafe { isolate_late(i, a.landlock) } {
                fail(stage, r);
            }
        }
        if a.no_new_privs {
            // SAFETY: prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) takes integers.
            let r = unsafe {
                raw5(
                    libc::SYS_prctl as usize,
                    libc::PR_SET_NO_NEW_PRIVS as usize,
                    1,
                    0,
                    0,
                    0,
                )
            };
            if r < 0 {
                fail(Stage::NoNewPrivs, r);
            }
        }
        if a.landlock >= 0 {
            // SAFETY: landlock_restrict_self takes a descriptor and flags.
            let r = unsafe {
                raw4(
                    libc::SYS_landlock_restrict_self as usize,
                    a.landlock as usize,
                    0,
                    0,
                    0,
                )
            };
            if r < 0 {
                fail(Stage::Landlock, r);
            }
        }
        if !a.seccomp.is_null() {
            // SAFETY: seccomp reads one sock_fprog and the program it points
            // to, both kept alive by the parent.
            let r = unsafe {
                raw4(
                    libc::SYS_seccomp as usize,
                    libc::SECCOMP_SET_MODE_FILTER as usize,
                    0,
                    a.seccomp as usize,
                    0,
                )
            };
            if r < 0 {
                fail(Stage::Seccomp, r);
            }
        }

        // 7. Isolated: this process is the sandbox's init; it starts the
        // program and reaps. Otherwise the program starts here, with an
        // empty mask, as under std's Command.
        if let Some(i) = iso {
            // SAFETY: `a` and `i` are this child's live arguments.
            unsafe { init(a, i) }
        }
        let empty: u64 = 0;
        // SAFETY: rt_sigprocmask reads one 8-byte set from this stack.
        unsafe {
            raw4(
                libc::SYS_rt_sigprocmask as usize,
                libc::SIG_SETMASK as usize,
                (&raw const empty) as usize,
                0,
                8,
            );
        }
        // SAFETY: NUL-terminated program path and NULL-terminated arrays of
        // NUL-terminated strings, all kept alive by the parent.
        let r = unsafe {
            raw4(
                libc::SYS_execve as usize,
                a.program as usize,
                a.argv as usize,
                a.envp as usize,
                0,
            )
        };
        fail(Stage::Exec, r)
    }

    /// `STATX_ATTR_MOUNT_ROOT` (Linux 5.8).
    const STATX_ATTR_MOUNT_ROOT: u64 = 0x2000;

    /// Whether the view a prepared sandbox composed is still the one the
    /// host gives now, checked by its init from inside at the launch:
    /// every mount the steps made is still a mount at its path (a path
    /// removed or replaced on the host since takes the sandbox's mount on
    /// it away, `umount` included, and would leave the new one
    /// unprotected), a copy attached still has the identity its host path
    /// has now (`expect`), and a host socket masked then or missing then
    /// is masked now or still missing.
    ///
    /// # Safety
    ///
    /// `i` is the prepared init's live [`IsolateArgs`] and `expect` the
    /// launch's, `i.n_steps` long.
    unsafe fn verify(i: &IsolateArgs, expect: *const Expect) -> bool {
        for k in 0..i.n_steps {
            // SAFETY: the steps and `expect` are `n_steps` long and alive.
            let (step, want) = unsafe { (&*i.steps.add(k), *expect.add(k)) };
            let (path, missing_ok) = match step.op {
                OP_MOUNT => (step.b, false),
                OP_ATTACH | OP_BIND_SELF | OP_MASK_DIR | OP_MASK_FILE => (step.a, false),
                OP_MASK_SOCKET => (step.a, true),
                _ => continue,
            };
            // SAFETY: a zeroed statx is a valid buffer for the call.
            let mut st: libc::statx = unsafe { core::mem::zeroed() };
            // SAFETY: statx with a NUL-terminated path and a buffer on this
            // stack.
            let r = unsafe {
                raw5(
                    libc::SYS_statx as usize,
                    AT_FDCWD as usize,
                    path as usize,
                    libc::AT_SYMLINK_NOFOLLOW as usize,
                    (libc::STATX_TYPE | libc::STATX_INO) as usize,
                    (&raw mut st) as usize,
                )
            };
            if r == -(libc::ENOENT as isize) && missing_ok {
                continue;
            }
            if r < 0
                || st.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT == 0
                || st.stx_attributes & STATX_ATTR_MOUNT_ROOT == 0
            {
                return false;
            }
            if want.identity
                && (st.stx_dev_major != want.dev_major
                    || st.stx_dev_minor != want.dev_minor
                    || st.stx_ino != want.ino)
            {
                return false;
            }
        }
        true
    }

    /// A prepared init's id maps and view, made by a helper it clones
    /// (`CLONE_VM | CLONE_VFORK`, on `i.tool_stack`, unused until the
    /// launch) without `CLONE_FILES`: the init shares this process's
    /// descriptor table until its launch, and the descriptors a view's
    /// composing opens (its copies of trees, the id maps' files, the
    /// loopback's socket) must not be in it, where any copy of the table
    /// made meanwhile (another launch's) would hold them. The helper shares
    /// the init's namespaces, closes its copy of the table first and exits.
    ///
    /// # Safety
    ///
    /// `a` and `i` are the prepared init's live arguments; called by the
    /// init, which must be single-threaded.
    unsafe fn compose(a: &ChildArgs, i: &IsolateArgs) -> Result<(), (Stage, isize)> {
        let mut h = zeroed_args();
        h.flags = (libc::CLONE_VM | libc::CLONE_VFORK) as u64;
        h.exit_signal = libc::SIGCHLD as u64;
        (h.stack, h.stack_size) = i.tool_stack;
        // SAFETY: the helper runs on its own stack, reads `a` (alive while
        // the init lives) and never returns; the init waits for its exit.
        let pid = unsafe { clone3(&mut h, compose_main, ptr::from_ref(a)) };
        if pid < 0 {
            return Err((Stage::Fork, pid));
        }
        loop {
            let mut st: c_int = 0;
            // SAFETY: wait4 writes one int on this stack.
            let r = unsafe {
                raw4(
                    libc::SYS_wait4 as usize,
                    pid as usize,
                    (&raw mut st) as usize,
                    WALL,
                    0,
                )
            };
            if r != -(libc::EINTR as isize) {
                break;
            }
        }
        match Stage::from_code(a.failed_stage.load(Ordering::Relaxed)) {
            None => Ok(()),
            Some(stage) => Err((stage, -(a.failed_errno.load(Ordering::Relaxed) as isize))),
        }
    }

    /// The helper of [`compose`]: a table of its own, emptied; the id maps;
    /// the view; its failure stored in `a`; exit.
    ///
    /// # Safety
    ///
    /// As [`compose`]; cloned by it.
    unsafe extern "C" fn compose_main(args: *const ChildArgs) -> ! {
        // SAFETY: the init keeps its arguments alive and waits.
        let a = unsafe { &*args };
        // SAFETY: as above; non-NULL for a prepared sandbox.
        let i = unsafe { &*a.isolate };
        // SAFETY: close_range takes integers and acts on this process's
        // own table (a copy: no CLONE_FILES).
        unsafe { raw4(libc::SYS_close_range as usize, 0, u32::MAX as usize, 0, 0) };
        // SAFETY: raw system calls on the init's live arguments.
        if let Err((stage, r)) = unsafe { isolate_ids(i).and_then(|()| isolate_view(i)) } {
            a.failed_errno
                .store((r as i32).wrapping_neg(), Ordering::Relaxed);
            a.failed_stage.store(stage.code(), Ordering::Relaxed);
            exit_127()
        }
        exit_group(0)
    }

    /// The init of a prepared sandbox (module docs, *A prepared
    /// sandbox*): cloned ahead of its launch with the caller's descriptor
    /// table shared (`CLONE_FILES`), it composes the view as
    /// [`child_main`] does, marks itself ready (its `released` word
    /// becomes [`READY`]) and sleeps until a launch arrives. Then it
    /// checks the view against the host ([`verify`]), takes a table of
    /// its own (a copy, the launch's descriptors in it) and goes on as
    /// [`child_main`] with the launch's arguments. Only raw system calls.
    ///
    /// # Safety
    ///
    /// Words of a `cpu_set_t` (an array of `u64` on x86-64: CPU `n` is bit
    /// `n % 64` of word `n / 64`).
    const MASK_WORDS: usize = std::mem::size_of::<libc::cpu_set_t>() / 8;

    /// The spawner thread's whole affinity as last seen
    /// ([`super::Aside::whole`]), published for a prepared sandbox's init,
    /// cloned beside the launcher, to take back at its launch; valid once
    /// [`SPAWNER_WHOLE_SET`]. (Published anew only when something else
    /// changed the spawner thread's set; an init reading it meanwhile may
    /// take a mix of the two sets.)
    static SPAWNER_WHOLE: [AtomicU64; MASK_WORDS] = [const { AtomicU64::new(0) }; MASK_WORDS];
    /// Whether [`SPAWNER_WHOLE`] holds a set of more than one CPU.
    static SPAWNER_WHOLE_SET: AtomicBool = AtomicBool::new(false);

    /// Publishes the spawner thread's whole set ([`SPAWNER_WHOLE`]).
    fn publish_whole(set: &rustix::thread::CpuSet) {
        let mut words = [0u64; MASK_WORDS];
        for cpu in
            (0..(MASK_WORDS * 64).min(rustix::thread::CpuSet::MAX_CPU)).filter(|&c| set.is_set(c))
        {
            words[cpu / 64] |= 1 << (cpu % 64);
        }
        for (slot, word) in SPAWNER_WHOLE.iter().zip(words) {
            slot.store(word, Ordering::Relaxed);
        }
        SPAWNER_WHOLE_SET.store(set.count() > 1, Ordering::Release);
    }

    /// As [`child_main`], for a `ChildArgs` whose `IsolateArgs` has `go`
    /// and `job` set; the caller keeps both alive until the init is
    /// reaped, and a launch's until its release.
    unsafe extern "C" fn prepared_main(args: *const ChildArgs) -> ! {
        // SAFETY: the caller keeps the prepared arguments alive while the
        // init lives.
        let a = unsafe { &*args };
        // SAFETY: as above; non-NULL for a prepared sandbox.
        let i = unsafe { &*a.isolate };
        // SAFETY: raw system calls on this stack and the live arguments.
        unsafe {
            reset_signals(false);
            let composed = isolate_session(i, false).and_then(|()| compose(a, i));
            if let Err((stage, r)) = composed {
                a.failed_errno
                    .store((r as i32).wrapping_neg(), Ordering::Relaxed);
                a.failed_stage.store(stage.code(), Ordering::Relaxed);
                release(i.released);
                exit_127()
            }
            (*i.released).store(READY, Ordering::Release);
            raw4(
                libc::SYS_futex as usize,
                i.released as usize,
                libc::FUTEX_WAKE as usize,
                1,
                0,
            );
            while (*i.go).load(Ordering::Acquire) != 1 {
                raw4(
                    libc::SYS_futex as usize,
                    i.go as usize,
                    libc::FUTEX_WAIT as usize,
                    0,
                    0,
                );
            }
        }
        if SPAWNER_WHOLE_SET.load(Ordering::Acquire) {
            // The spawner thread's whole set: what a sandbox composed at
            // its launch starts with (the program inherits it).
            let mut words = [0u64; MASK_WORDS];
            for (word, slot) in words.iter_mut().zip(&SPAWNER_WHOLE) {
                *word = slot.load(Ordering::Relaxed);
            }
            // SAFETY: a raw system call on a set on this stack.
            unsafe {
                raw4(
                    libc::SYS_sched_setaffinity as usize,
                    0,
                    std::mem::size_of_val(&words),
                    words.as_ptr() as usize,
                    0,
                );
            }
        }
        // SAFETY: the caller stored its launch's live arguments before it
        // set `go`, and waits on their `released` word.
        let job = unsafe { &*(*i.job).load(Ordering::Acquire) };
        // SAFETY: non-NULL for a launch in a prepared sandbox.
        let ji = unsafe { &*job.isolate };
        // SAFETY: the launch's live arguments; its caller waits.
        let fail =
            |stage: Stage, ret: isize| -> ! { unsafe { fail_child(job, Some(ji), stage, ret) } };
        // SAFETY: the prepared steps and the launch's expectations.
        if !unsafe { verify(i, ji.expect) } {
            fail(Stage::Stale, -(libc::ESTALE as isize));
        }
        // A table of its own: a copy of the caller's, which holds the
        // launch's descriptors now (the range closed is descriptor
        // 2^32 - 1 alone, which no table has).
        // SAFETY: close_range takes integers.
        let r = unsafe {
            raw4(
                libc::SYS_close_range as usize,
                u32::MAX as usize,
                u32::MAX as usize,
                CLOSE_RANGE_UNSHARE,
                0,
            )
        };
        if r < 0 {
            fail(Stage::CloseFds, r);
        }
        if job.default_sigint {
            // SAFETY: raw rt_sigaction calls on this stack.
            unsafe { reset_signals(true) };
        }
        // SAFETY: the launch's live arguments, with a table of its own.
        unsafe { finish(job, Some(ji)) }
    }

    /// The child: runs on its own stack, shares the parent's memory while
    /// the calling parent thread is suspended, and ends in `execve` or
    /// `exit_group(127)`. Only raw system calls, no allocation, no panic
    /// path.
    ///
    /// # Safety
    ///
    /// `args` points to a live `ChildArgs` whose pointers are valid, and
    /// the caller is the child of a `CLONE_VM | CLONE_VFORK` clone.
    unsafe extern "C" fn child_main(args: *const ChildArgs) -> ! {
        // SAFETY: the parent keeps `*args` alive and unchanged until this
        // process exec'ed or exited (CLONE_VFORK).
        let a = unsafe { &*args };
        // SAFETY: NULL or the parent's live IsolateArgs, kept alive (with
        // everything it points to) until the release.
        let iso = unsafe { a.isolate.as_ref() };
        // SAFETY: this child's live arguments.
        let fail = |stage: Stage, ret: isize| -> ! { unsafe { fail_child(a, iso, stage, ret) } };

        // 0. Sharing the parent's descriptor table (`CLONE_FILES`): a table
        // of its own first, a copy of only the few descriptors below
        // `unshare_below` (the kernel copies nothing above the range it
        // closes), before any descriptor is touched. Exiting while still
        // sharing closes nothing of the parent's.
        if a.unshare_below > 0 {
            // SAFETY: close_range takes integers; with CLOSE_RANGE_UNSHARE
            // it acts on the new private table only.
            let r = unsafe {
                raw4(
                    libc::SYS_close_range as usize,
                    a.unshare_below as usize,
                    u32::MAX as usize,
                    CLOSE_RANGE_UNSHARE,
                    0,
                )
            };
            if r < 0 {
                fail(Stage::CloseFds, r);
            }
        }

        // 1. Signal dispositions ([`reset_signals`]).
        // SAFETY: raw rt_sigaction calls on this stack.
        unsafe { reset_signals(a.default_sigint) };

        // 2. Isolated: the user namespace's maps, a new session (the init
        // leads it and its process group; no controlling terminal), the
        // view, the loopback. Otherwise the process group, before anything
        // can be signalled through it.
        if let Some(i) = iso {
            // SAFETY: `i` is this child's live IsolateArgs.
            if let Err((stage, r)) = unsafe { isolate_early(i, a.terminal) } {
                fail(stage, r);
            }
        } else if a.terminal {
            // A new session (which leads a new process group): the one a
            // terminal can become the controlling terminal of.
            // SAFETY: setsid takes no argument.
            let r = unsafe { raw4(libc::SYS_setsid as usize, 0, 0, 0, 0) };
            if r < 0 {
                fail(Stage::Session, r);
            }
        } else if a.new_process_group {
            // SAFETY: setpgid takes two integers.
            let r = unsafe { raw4(libc::SYS_setpgid as usize, 0, 0, 0, 0) };
            if r < 0 {
                fail(Stage::SetProcessGroup, r);
            }
        }

        // SAFETY: `a` and `iso` are this child's live arguments.
        unsafe { finish(a, iso) }
    }

    /// `clone3(args, sizeof args)`, switching the child onto the stack in
    /// `args` and calling `child(arg)` there. Returns the child's pid to the
    /// parent, or `-errno`.
    ///
    /// # Safety
    ///
    /// `args` must carry a stack (`stack`, `stack_size`) the child may use
    /// for its whole life, and `child(arg)` must be sound to run in the
    /// child the flags create; it must never return.
    unsafe fn clone3(
        args: &mut libc::clone_args,
        child: unsafe extern "C" fn(*const ChildArgs) -> !,
        arg: *const ChildArgs,
    ) -> isize {
        let ret: isize;
        // SAFETY: in the parent this is a plain system call (clobbers rax,
        // rcx, r11). In the child the kernel returns to the same place with
        // rax = 0 and rsp = top of the new stack, all other registers as the
        // parent's: `child` and `arg` sit in callee-saved r12/r13, the stack
        // top is page-aligned, so rsp is 16-byte aligned at the `call` as
        // the ABI wants. The child never comes back (`ud2` if it did), so the
        // registers it changes (rbp, rdi) never reach compiled code.
        unsafe {
            core::arch::asm!(
                "syscall",
                "test rax, rax",
                "jnz 2f",
                "xor ebp, ebp",
                "mov rdi, r12",
                "call r13",
                "ud2",
                "2:",
                inlateout("rax") libc::SYS_clone3 as isize => ret,
                in("rdi") ptr::from_mut(args),
                in("rsi") size_of::<libc::clone_args>(),
                in("r12") arg,
                in("r13") child,
                lateout("rcx") _,
                lateout("r11") _,
            );
        }
        ret
    }

    fn zeroed_args() -> libc::clone_args {
        libc::clone_args {
            flags: 0,
            pidfd: 0,
            child_tid: 0,
            parent_tid: 0,
            exit_signal: 0,
            stack: 0,
            stack_size: 0,
            tls: 0,
            set_tid: 0,
            set_tid_size: 0,
            cgroup: 0,
        }
    }

    /// Whether `clone3` with `CLONE_INTO_CGROUP` works here. Probed once:
    /// a `clone3` naming descriptor `INT_MAX` (never open, `nr_open` is at
    /// most 2^30) as the cgroup fails with `EBADF` on Linux ≥ 5.7, with
    /// `EINVAL` before (unknown flag), `ENOSYS`/`EPERM` under a filter. No
    /// process is created.
    pub(crate) fn supported() -> bool {
        static PROBE: OnceLock<bool> = OnceLock::new();
        *PROBE.get_or_init(|| probe().is_ok())
    }

    /// The probe behind [`supported`]: `Err` carries `clone3`'s answer.
    fn probe() -> Result<(), Errno> {
        let stack = Stack::new(PAGE)?;
        let (lo, size) = stack.region();
        let mut args = zeroed_args();
        args.flags = (libc::CLONE_VM | libc::CLONE_VFORK) as u64 | CLONE_INTO_CGROUP;
        args.exit_signal = libc::SIGCHLD as u64;
        args.stack = lo;
        args.stack_size = size;
        args.cgroup = i32::MAX as u64;
        let _blocked = BlockAll::new();
        // SAFETY: the child (which the bad cgroup fd prevents) would only
        // call `exit_127` on the stack given, which outlives the call.
        let r = unsafe { clone3(&mut args, probe_child, ptr::null()) };
        match r {
            r if r == -(libc::EBADF as isize) => Ok(()),
            r if r > 0 => {
                // Cannot happen (see above); reap it rather than leak it.
                let _ = rustix::process::waitpid(
                    rustix::process::Pid::from_raw(r as i32),
                    rustix::process::WaitOptions::empty(),
                );
                Ok(())
            }
            r => Err(Errno::from_raw_os_error(-(r as i32))),
        }
    }

    unsafe extern "C" fn probe_child(_: *const ChildArgs) -> ! {
        exit_127()
    }

    /// Whether an isolated launch can be made here: a child cloned into new
    /// user, pid, mount, ipc and uts namespaces that can map its ids and
    /// change its mounts (a sysctl or a security module may refuse the
    /// namespace, or let it be made with no capability in it). Probed once,
    /// by a child that does exactly that and exits.
    ///
    /// The network namespace is not part of it: it is the costliest to
    /// make and to tear down, and a launch that needs one makes its own
    /// anyway, so a refusal is seen there (`clone3` answers `ENOSPC` at a
    /// `max_net_namespaces` limit) and reported as
    /// `network_namespace_unavailable`. Only a best-effort launch, which
    /// must know before its plan is made, asks
    /// [`net_namespace_supported`] too.
    pub(crate) fn isolation_supported() -> Result<(), Errno> {
        *ISOLATION.get_or_init(|| probe_isolation(false))
    }

    /// [`isolation_supported`]'s answer if the probe has given one, without
    /// waiting for it or running it: what a strict launch plans by (see
    /// `launch::prepare_confinement`).
    pub(crate) fn isolation_known() -> Option<Result<(), Errno>> {
        ISOLATION.get().copied()
    }

    /// The answer of the probe behind [`isolation_supported`].
    static ISOLATION: OnceLock<Result<(), Errno>> = OnceLock::new();

    /// Whether an isolated launch with a network namespace of its own can
    /// be made here: [`isolation_supported`] with a new net namespace too.
    /// Probed once, the same way.
    pub(crate) fn net_namespace_supported() -> Result<(), Errno> {
        static PROBE: OnceLock<Result<(), Errno>> = OnceLock::new();
        *PROBE.get_or_init(|| isolation_supported().and_then(|()| probe_isolation(true)))
    }

    /// The probe behind [`isolation_supported`] (and, with `new_net`,
    /// [`net_namespace_supported`]).
    fn probe_isolation(new_net: bool) -> Result<(), Errno> {
        let (uid_map, gid_map) = own_id_maps();
        let maps = ProbeMaps {
            uid: uid_map.as_bytes(),
            gid: gid_map.as_bytes(),
            errno: AtomicI32::new(0),
        };
        let mut flags = NEW_NAMESPACES;
        if new_net {
            flags |= libc::CLONE_NEWNET as u64;
        }
        // SAFETY: the child reads `maps`, which outlives the call, and
        // exits.
        unsafe { run_vforked(flags, probe_isolation_child, ptr::from_ref(&maps).cast())? };
        match maps.errno.load(Ordering::Relaxed) {
            0 => Ok(()),
            e => Err(Errno::from_raw_os_error(e)),
        }
    }

    /// The one-line id maps of a user namespace that maps this process's
    /// effective uid and gid to themselves: (uid_map, gid_map).
    fn own_id_maps() -> (String, String) {
        (
            format!("{0} {0} 1\n", rustix::process::geteuid().as_raw()),
            format!("{0} {0} 1\n", rustix::process::getegid().as_raw()),
        )
    }

    /// Runs `child(arg)` in a `CLONE_VM | CLONE_VFORK` clone with `flags`
    /// added, on a stack of its own, every signal blocked, and reaps it;
    /// `Err` carries a failed `clone3`'s answer.
    ///
    /// # Safety
    ///
    /// `child(arg)` must be sound to run in such a child (raw system calls
    /// only, on what `arg` points to, which outlives the call) and exit.
    unsafe fn run_vforked(
        flags: u64,
        child: unsafe extern "C" fn(*const ChildArgs) -> !,
        arg: *const ChildArgs,
    ) -> Result<(), Errno> {
        let stack = Stack::new(PAGE * 4)?;
        let (lo, size) = stack.region();
        let mut args = zeroed_args();
        args.flags = (libc::CLONE_VM | libc::CLONE_VFORK) as u64 | flags;
        args.exit_signal = libc::SIGCHLD as u64;
        args.stack = lo;
        args.stack_size = size;
        let r = {
            let _blocked = BlockAll::new();
            // SAFETY: the child runs on `stack`, which outlives it (the call
            // returns only once it exited, CLONE_VFORK); the caller vouches
            // for `child(arg)`.
            unsafe { clone3(&mut args, child, arg) }
        };
        if r < 0 {
            return Err(Errno::from_raw_os_error(-(r as i32)));
        }
        let _ = rustix::process::waitpid(
            rustix::process::Pid::from_raw(r as i32),
            rustix::process::WaitOptions::empty(),
        );
        Ok(())
    }

    /// Writes `deny` to `setgroups` (absent before Linux 3.19: skipped),
    /// then the one-line `uid` and `gid` maps of this process's new user
    /// namespace; 0 or `-errno`.
    ///
    /// # Safety
    ///
    /// Raw system calls only, on `uid` and `gid`.
    unsafe fn map_ids(uid: &[u8], gid: &[u8]) -> isize {
        // SAFETY: open/write/close on the live buffers.
        unsafe {
            let mut r = write_file(c"/proc/self/setgroups", b"deny".as_ptr(), 4);
            if r == -(libc::ENOENT as isize) {
                r = 0;
            }
            if r == 0 {
                r = write_file(c"/proc/self/uid_map", uid.as_ptr(), uid.len());
            }
            if r == 0 {
                r = write_file(c"/proc/self/gid_map", gid.as_ptr(), gid.len());
            }
            r
        }
    }

    /// What the isolation probe's child reads.
    struct ProbeMaps<'a> {
        uid: &'a [u8],
        gid: &'a [u8],
        errno: AtomicI32,
    }

    unsafe extern "C" fn probe_isolation_child(arg: *const ChildArgs) -> ! {
        // SAFETY: `arg` is the parent's live ProbeMaps (CLONE_VFORK).
        let m = unsafe { &*arg.cast::<ProbeMaps<'_>>() };
        // SAFETY: raw system calls on the parent's live buffers.
        let r = unsafe {
            let mut r = map_ids(m.uid, m.gid);
            if r == 0 {
                r = sys5(
                    libc::SYS_mount,
                    0,
                    c"/".as_ptr() as usize,
                    0,
                    (libc::MS_REC | libc::MS_PRIVATE) as usize,
                    0,
                );
            }
            r
        };
        m.errno.store((r as i32).wrapping_neg(), Ordering::Relaxed);
        exit_127()
    }

    /// Starts the spawner thread for `program` now (see
    /// [`super::prepare_isolation`]) rather than at the first launch.
    /// Starts the spawner thread for `program` on a CPU other than
    /// `launcher` (the CPU of the thread that asked for the preparation,
    /// which goes on to launch: [`super::Beside`]).
    pub(super) fn start_spawner(program: &'static [seccompiler::sock_filter], launcher: usize) {
        let _ = FilteringSpawner::get_beside(program, Some(launcher));
    }

    /// A thread that installed one seccomp program on itself and clones
    /// children that inherit it (module docs, *Inherited seccomp filter*).
    struct FilteringSpawner {
        jobs: mpsc::Sender<Job>,
        /// The process that started the thread: a `fork` of it has none.
        pid: u32,
        /// The thread holds its network namespace and can clone into a
        /// spare one ([`super::netns`]) and come back.
        enters_net: bool,
    }

    /// One clone for the spawner thread to make: pointers into the frame
    /// of a caller that waits until `released` is 0.
    struct Job {
        args: *mut libc::clone_args,
        /// What the child runs: `child_main`, or `pre_init_main`.
        entry: unsafe extern "C" fn(*const ChildArgs) -> !,
        child: *const ChildArgs,
        /// Where the spawner thread writes a failed clone's `-errno`.
        ret: *const AtomicIsize,
        /// The caller's futex word; see [`FilteringSpawner::clone3`].
        released: *const AtomicU32,
        /// A spare network namespace to clone in (the caller keeps it open
        /// until `released`), or -1 for this process's own.
        netns: c_int,
        /// A sandbox prepared beside a launch: cloned off the launcher's
        /// CPU ([`super::Aside`]); a launch's own clone, which its caller
        /// waits for, is not.
        aside: bool,
    }

    // SAFETY: a `Job`'s pointers refer to the frame of the thread that sent
    // it, which does not return (and so keeps them alive and unmoved)
    // until `released` is 0. The kernel zeroes it when the child exec'ed or
    // exited, and then the spawner thread touches none of them; the
    // spawner thread zeroes it only when the clone failed, after its last
    // access.
    unsafe impl Send for Job {}

    impl FilteringSpawner {
        /// The spawner thread for `program`, started (and the program
        /// installed on it) on first use; `None` when that failed or this
        /// process is a `fork` of the one that started it.
        fn get(program: &'static [seccompiler::sock_filter]) -> Option<&'static FilteringSpawner> {
            FilteringSpawner::get_beside(program, None)
        }

        /// [`FilteringSpawner::get`], the thread (if started now) started
        /// on a CPU other than `avoid` (`None`: the caller's).
        fn get_beside(
            program: &'static [seccompiler::sock_filter],
            avoid: Option<usize>,
        ) -> Option<&'static FilteringSpawner> {
            type Key = (usize, usize);
            static SPAWNERS: Mutex<Vec<(Key, Option<&'static FilteringSpawner>)>> =
                Mutex::new(Vec::new());
            let key = (program.as_ptr() as usize, program.len());
            let mut spawners = SPAWNERS.lock().unwrap_or_else(|e| e.into_inner());
            let found = match spawners.iter().find(|(k, _)| *k == key) {
                Some((_, found)) => *found,
                None => {
                    let started = FilteringSpawner::start(program, avoid)
                        .map(|s| &*Box::leak(Box::new(s)))
                        .inspect_err(|e| {
                            tracing::debug!(
                                error = %e,
                                "no seccomp spawner thread; the child installs the filter"
                            );
                        })
                        .ok();
                    spawners.push((key, started));
                    started
                }
            };
            drop(spawners);
            found.filter(|s| s.pid == std::process::id())
        }

        fn start(
            program: &'static [seccompiler::sock_filter],
            avoid: Option<usize>,
        ) -> Result<FilteringSpawner, Errno> {
            let (jobs, queue) = mpsc::channel::<Job>();
            let (ready_tx, ready) = mpsc::sync_channel::<Result<bool, Errno>>(1);
            // Started beside the launching thread, which would otherwise
            // hold it queued on its own CPU until it blocks (waiting for
            // this very thread); the whole affinity is back before the
            // thread clones anything (the sandboxes inherit it).
            let beside = super::Beside::avoiding(avoid);
            let placed = beside.placed();
            let thread = std::thread::Builder::new()
                .name("confined-spawn".into())
                .stack_size(128 * 1024)
                .spawn(move || {
                    placed.wait_and_widen();
                    // Its own network namespace, to come back to from a
                    // spare one; without it the thread clones in its own
                    // only.
                    let host = rustix::fs::open(
                        "/proc/thread-self/ns/net",
                        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                        rustix::fs::Mode::empty(),
                    )
                    .ok();
                    let setup = filter_this_thread(program).map(|()| host.is_some());
                    let ok = setup.is_ok();
                    let _ = ready_tx.send(setup);
                    if ok {
                        serve(&queue, host.as_ref());
                    }
                })
                .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::AGAIN))?;
            beside.place(&thread);
            let enters_net = ready.recv().unwrap_or(Err(Errno::CHILD))?;
            Ok(FilteringSpawner {
                jobs,
                pid: std::process::id(),
                enters_net,
            })
        }

        /// Has the spawner thread run `clone3(args)` for `child_main(child)`
        /// and waits for the child to exec or exit; returns its pid, or
        /// `-errno`.
        ///
        /// The caller is woken by the kernel, not by the spawner thread:
        /// with `CLONE_CHILD_CLEARTID` the child's `mm_release` (at
        /// `execve` or exit, the very point that releases a `CLONE_VFORK`
        /// parent) zeroes `released` and `FUTEX_WAKE`s it (clone(2),
        /// set_tid_address(2)); `CLONE_PARENT_SETTID` and `CLONE_PIDFD`
        /// have stored the pid and the pidfd in this frame before the child
        /// ran. Waking the caller thus takes one hop, not two (child, then
        /// the spawner thread back from its vfork wait, then the caller).
        /// Only a failed `clone3`, which makes no child, is reported by the
        /// spawner thread itself.
        ///
        /// The clone drops `CLONE_VFORK`: what it protects (the frame and
        /// stack the child runs on, until it exec'ed or exited) belongs to
        /// this caller, which is held by `released` instead, and the
        /// spawner thread uses neither. It returns to its queue at once
        /// rather than sleeping until the `execve` and being woken for
        /// nothing, one wake-up per launch less; its next clone, for
        /// another caller, uses another frame and stack. (A `CLONE_VM`
        /// clone without `CLONE_VFORK` marks this process's memory as
        /// shared with another process, `MMF_MULTIPROCESS`, for as long as
        /// it runs: a later write to its `oom_score_adj` then also walks
        /// the process list for others sharing it, `fs/proc/base.c`.)
        ///
        /// An isolated child never execs (it becomes the sandbox's init):
        /// with `watch` (its pidfd slot) the kernel does not release the
        /// caller; the init does itself once the program exec'ed, and the
        /// caller also watches for the init dying first (and, with `pre`,
        /// the pre-init's pidfd slot, for the pre-init dying before it
        /// made the init: `entry` is then `pre_init_main`).
        #[allow(clippy::too_many_arguments, reason = "one clone's parts, all borrowed")]
        fn clone3(
            &self,
            args: &mut libc::clone_args,
            entry: unsafe extern "C" fn(*const ChildArgs) -> !,
            child: &ChildArgs,
            released: &AtomicU32,
            watch: Option<&AtomicI32>,
            pre: Option<&AtomicI32>,
            netns: Option<BorrowedFd<'_>>,
        ) -> isize {
            let ret = AtomicIsize::new(0);
            let mut pid: c_int = 0;
            args.flags &= !(libc::CLONE_VFORK as u64);
            args.flags |= libc::CLONE_PARENT_SETTID as u64;
            if watch.is_none() {
                args.flags |= libc::CLONE_CHILD_CLEARTID as u64;
                args.child_tid = released.as_ptr() as u64;
            }
            args.parent_tid = (&raw mut pid) as u64;
            let job = Job {
                args: ptr::from_mut(args),
                entry,
                child: ptr::from_ref(child),
                ret: &raw const ret,
                released: ptr::from_ref(released),
                netns: netns.map_or(-1, |fd| fd.as_raw_fd()),
                aside: false,
            };
            if self.jobs.send(job).is_err() {
                // The thread is gone (it never exits while the process
                // runs): nothing was cloned.
                return -(libc::EAGAIN as isize);
            }
            if !wait_released(released, watch, pre) {
                // The init died before it released: report it as a failed
                // child (the caller reaps it through its pidfd).
                return -(libc::ECHILD as isize);
            }
            match ret.load(Ordering::Relaxed) {
                0 => pid as isize,
                failed => failed,
            }
        }
    }

    /// On the calling thread only: every signal blocked for good (a child
    /// starts with the mask of the thread that cloned it, and no handler
    /// may run here), `prctl(PR_SET_NO_NEW_PRIVS, 1)`, then
    /// `seccomp(SECCOMP_SET_MODE_FILTER, 0, program)` without
    /// `SECCOMP_FILTER_FLAG_TSYNC` (seccomp(2): the filter applies to the
    /// calling thread and what it creates).
    fn filter_this_thread(program: &'static [seccompiler::sock_filter]) -> Result<(), Errno> {
        std::mem::forget(BlockAll::new());
        // SAFETY: prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) takes integers.
        let r = unsafe {
            raw5(
                libc::SYS_prctl as usize,
                libc::PR_SET_NO_NEW_PRIVS as usize,
                1,
                0,
                0,
                0,
            )
        };
        if r < 0 {
            return Err(Errno::from_raw_os_error(-(r as i32)));
        }
        let fprog = libc::sock_fprog {
            len: u16::try_from(program.len()).map_err(|_| Errno::INVAL)?,
            // seccompiler's sock_filter is `repr(C)` with the kernel's
            // layout (u16, u8, u8, u32), as is libc's.
            filter: program.as_ptr().cast::<libc::sock_filter>().cast_mut(),
        };
        // SAFETY: seccomp reads one sock_fprog from this frame and the
        // 'static program it points to.
        let r = unsafe {
            raw4(
                libc::SYS_seccomp as usize,
                libc::SECCOMP_SET_MODE_FILTER as usize,
                0,
                (&raw const fprog) as usize,
                0,
            )
        };
        if r < 0 {
            return Err(Errno::from_raw_os_error(-(r as i32)));
        }
        Ok(())
    }

    /// The spawner thread's loop: one `clone3` per job, for as long as the
    /// process runs.
    fn serve(queue: &mpsc::Receiver<Job>, host: Option<&OwnedFd>) {
        // Whether this thread is (or may be) outside its own network
        // namespace: a clone for a spare one entered it, and coming back
        // failed.
        let mut away = false;
        let mut aside = super::Aside::new();
        let mut published = aside.whole().copied();
        if let Some(whole) = &published {
            publish_whole(whole);
        }
        while let Ok(job) = queue.recv() {
            // The sandbox (its init, the helper composing its view)
            // inherits this thread's affinity until its launch.
            if job.aside {
                aside.step_aside();
            } else {
                aside.come_back();
            }
            if aside.whole() != published.as_ref() {
                published = aside.whole().copied();
                if let Some(whole) = &published {
                    publish_whole(whole);
                }
            }
            let spare = job.netns;
            let r = match enter_net(spare, host, &mut away) {
                Err(r) => r,
                Ok(()) => {
                    // SAFETY: the sender waits until `released` is 0, which
                    // only the child's exec or exit (or the failure branch
                    // below) does, so `args` (with its stack) and `child`
                    // (with every pointer in it) stay alive and unchanged
                    // for as long as the child uses them; this thread
                    // touches none of them after the clone. `child_main`
                    // never returns.
                    let r = unsafe { clone3(&mut *job.args, job.entry, job.child) };
                    if spare >= 0 {
                        // Back at once: the spare is the sandbox's alone.
                        away = enter_net(-1, host, &mut away).is_err();
                    }
                    if r > 0 {
                        // The child releases the caller
                        // (CLONE_CHILD_CLEARTID): its frame may be gone at
                        // any moment.
                        continue;
                    }
                    r
                }
            };
            // SAFETY: no child, so nothing zeroed `released`: the sender
            // still waits and its frame is alive. Nothing in it is touched
            // after the store to `released`; the wake names only its
            // address (a wake at an address nobody waits on is a no-op).
            unsafe {
                let r = if r == 0 { -(libc::EAGAIN as isize) } else { r };
                (*job.ret).store(r, Ordering::Relaxed);
                (*job.released).store(0, Ordering::Release);
                raw4(
                    libc::SYS_futex as usize,
                    job.released as usize,
                    libc::FUTEX_WAKE as usize,
                    1,
                    0,
                );
            }
        }
    }

    /// Puts the spawner thread in the network namespace a clone wants: the
    /// spare `spare` (≥ 0), or its own (`host`) when it is `away`. `Err`
    /// holds `-errno`: the clone must not be made.
    fn enter_net(spare: c_int, host: Option<&OwnedFd>, away: &mut bool) -> Result<(), isize> {
        use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
        let target = if spare >= 0 {
            // SAFETY: the caller keeps the spare open until it is released,
            // which is after this clone.
            unsafe { BorrowedFd::borrow_raw(spare) }
        } else if *away {
            let Some(host) = host else {
                return Err(-(libc::EINVAL as isize));
            };
            host.as_fd()
        } else {
            return Ok(());
        };
        match move_into_link_name_space(target, Some(LinkNameSpaceType::Network)) {
            Ok(()) => {
                *away = spare >= 0;
                Ok(())
            }
            Err(errno) => Err(-(errno.raw_os_error() as isize)),
        }
    }

    /// Moves `fd` out of 0–2 unless it already sits on `target`, so that
    /// installing one stdio descriptor cannot overwrite the source of
    /// another.
    /// The descriptor slots of a child that starts with a small table of
    /// its own (module docs, *A large descriptor table*): sets of five low
    /// descriptors (stdin, stdout, stderr, the launch's Landlock ruleset,
    /// an isolated program's nesting ruleset), each holding
    /// `/dev/null` between spawns, opened once while this process's table
    /// was still small.
    struct HandOff {
        null: OwnedFd,
        sets: Vec<SlotSet>,
    }

    struct SlotSet {
        busy: std::sync::atomic::AtomicBool,
        fds: [OwnedFd; SLOTS],
        /// One above the highest descriptor of the set: what the child
        /// copies is everything below.
        below: c_int,
    }

    /// Spawns at once that can each have a set (more use the plain copy).
    const HANDOFF_SETS: usize = 4;
    /// Slots per set: stdin, stdout, stderr, ruleset, nesting ruleset.
    const SLOTS: usize = 5;
    /// Slots above this are not worth it: the copy below them is the cost
    /// the hand-off saves.
    const HANDOFF_MAX_FD: c_int = 128;
    /// A spawn whose descriptors are numbered this high is from a large
    /// table: it is handed off.
    pub(super) const LARGE_TABLE: c_int = 64;

    impl HandOff {
        /// The slots, made on first use (`prepare_handoff`: cheap, a few
        /// `dup`s); `None` where they landed too high already.
        fn slots() -> Option<&'static HandOff> {
            static HANDOFF: OnceLock<Option<HandOff>> = OnceLock::new();
            HANDOFF.get_or_init(HandOff::make).as_ref()
        }

        /// The slots, for a spawn from a large table: `None` also where the
        /// kernel cannot unshare a table in `close_range` (before 5.9, or
        /// filtered), probed once, on the first such spawn (a process that
        /// never has a large table never pays for the probe).
        fn get() -> Option<&'static HandOff> {
            static UNSHARE: OnceLock<bool> = OnceLock::new();
            let slots = HandOff::slots()?;
            UNSHARE.get_or_init(unshare_supported).then_some(slots)
        }

        fn make() -> Option<HandOff> {
            let null = rustix::fs::open(
                c"/dev/null",
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .ok()?;
            let mut sets = Vec::with_capacity(HANDOFF_SETS);
            for _ in 0..HANDOFF_SETS {
                let dup = || rustix::io::fcntl_dupfd_cloexec(&null, 3).ok();
                let fds = [dup()?, dup()?, dup()?, dup()?, dup()?];
                let below = fds.iter().map(|f| f.as_raw_fd()).max().unwrap_or(0) + 1;
                // A set that landed high saves nothing: closed again.
                if below <= HANDOFF_MAX_FD {
                    sets.push(SlotSet {
                        busy: std::sync::atomic::AtomicBool::new(false),
                        fds,
                        below,
                    });
                }
            }
            if sets.is_empty() {
                return None;
            }
            // A child copies everything below its set: make each set's
            // copy as small as it can be.
            sets.sort_by_key(|s| s.below);
            Some(HandOff { null, sets })
        }

        /// A free set, with `stdio`, `ruleset` and `nest` (each unless -1)
        /// placed in its slots; `None` when every set is busy or a
        /// placement failed.
        fn lease(&self, stdio: [c_int; 3], ruleset: c_int, nest: c_int) -> Option<Lease<'_>> {
            let set = self
                .sets
                .iter()
                .find(|s| !s.busy.swap(true, Ordering::Acquire))?;
            let lease = Lease { handoff: self, set };
            let sources = [stdio[0], stdio[1], stdio[2], ruleset, nest];
            for (src, slot) in sources.into_iter().zip(&set.fds) {
                if src < 0 {
                    continue;
                }
                // SAFETY: `src` is a descriptor the caller keeps open for
                // the whole spawn.
                let src = unsafe { BorrowedFd::borrow_raw(src) };
                // dup3 onto the slot: its /dev/null is replaced at once.
                let mut slot = ManuallyOwned(slot.as_raw_fd());
                rustix::io::dup3(src, &mut slot.owned(), rustix::io::DupFlags::CLOEXEC).ok()?;
            }
            Some(lease)
        }
    }

    /// Whether `close_range(…, CLOSE_RANGE_UNSHARE)` works here, probed on
    /// a thread of its own: unsharing changes only that thread's table,
    /// which goes with it.
    fn unshare_supported() -> bool {
        std::thread::spawn(|| {
            // SAFETY: close_range takes integers; the range is empty.
            unsafe {
                raw4(
                    libc::SYS_close_range as usize,
                    u32::MAX as usize,
                    u32::MAX as usize,
                    CLOSE_RANGE_UNSHARE,
                    0,
                )
            }
        })
        .join()
        .is_ok_and(|r| r == 0)
    }

    /// A descriptor number this module owns for the whole process (a slot),
    /// borrowed as an `OwnedFd` for `dup3` without ever being closed.
    struct ManuallyOwned(RawFd);

    impl ManuallyOwned {
        fn owned(&mut self) -> std::mem::ManuallyDrop<OwnedFd> {
            // SAFETY: the slot stays open for the life of the process; the
            // ManuallyDrop never closes it.
            std::mem::ManuallyDrop::new(unsafe { OwnedFd::from_raw_fd(self.0) })
        }
    }

    /// One spawn's set: its slots hold the child's descriptors until the
    /// child has its own table (it has, once the spawn returns: the child
    /// exec'ed or exited); dropping puts `/dev/null` back and frees the set.
    struct Lease<'a> {
        handoff: &'a HandOff,
        set: &'a SlotSet,
    }

    impl Lease<'_> {
        fn stdio(&self) -> [c_int; 3] {
            [
                self.set.fds[0].as_raw_fd(),
                self.set.fds[1].as_raw_fd(),
                self.set.fds[2].as_raw_fd(),
            ]
        }

        fn ruleset(&self, ruleset: c_int) -> c_int {
            if ruleset < 0 {
                -1
            } else {
                self.set.fds[3].as_raw_fd()
            }
        }

        fn nest(&self, nest: c_int) -> c_int {
            if nest < 0 {
                -1
            } else {
                self.set.fds[4].as_raw_fd()
            }
        }
    }

    impl Drop for Lease<'_> {
        fn drop(&mut self) {
            for slot in &self.set.fds {
                let mut slot = ManuallyOwned(slot.as_raw_fd());
                // Drops the slot's reference to the child's pipe end (the
                // reader's EOF depends on it). A failure leaves that
                // reference until the next lease replaces it.
                let _ = rustix::io::dup3(
                    &self.handoff.null,
                    &mut slot.owned(),
                    rustix::io::DupFlags::CLOEXEC,
                );
            }
            self.set.busy.store(false, Ordering::Release);
        }
    }

    /// Off only for the benchmark's comparison (`custodian::__bench`).
    static HANDOFF_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    /// Turns the hand-off off or on (the benchmark measures the plain copy
    /// it saves).
    pub(crate) fn set_handoff(on: bool) {
        HANDOFF_OFF.store(!on, Ordering::Relaxed);
    }

    /// Makes the hand-off slots now, while this process's descriptor table
    /// is small (a node calls it at start; otherwise the first spawn does).
    pub(crate) fn prepare_handoff() {
        let _ = HandOff::slots();
    }

    fn lift(fd: BorrowedFd<'_>, target: RawFd) -> Result<Option<OwnedFd>, SpawnError> {
        let raw = fd.as_raw_fd();
        if raw == target || raw > 2 {
            return Ok(None);
        }
        rustix::io::fcntl_dupfd_cloexec(fd, 3)
            .map(Some)
            .map_err(|errno| SpawnError::Failed {
                stage: Stage::StdioDup,
                errno,
            })
    }

    /// Starts `spec.program` as described by `spec`; see the module docs.
    ///
    /// # Errors
    ///
    /// [`SpawnError::Unsupported`] where `clone3` is unavailable,
    /// [`SpawnError::CgroupRefused`] when the cgroup refuses the child, and
    /// [`SpawnError::Failed`] with the stage and errno otherwise (a failed
    /// child has been reaped).
    pub(crate) fn spawn(spec: &SpawnSpec<'_>) -> Result<Spawned, SpawnError> {
        let argv: Vec<*const c_char> = spec
            .argv
            .iter()
            .map(|a| a.as_ptr())
            .chain(std::iter::once(ptr::null()))
            .collect();
        let envp: Vec<*const c_char> = spec
            .envp
            .iter()
            .map(|e| e.as_ptr())
            .chain(std::iter::once(ptr::null()))
            .collect();
        let lifted = [
            lift(spec.stdin, 0)?,
            lift(spec.stdout, 1)?,
            lift(spec.stderr, 2)?,
        ];
        let stdio = [spec.stdin, spec.stdout, spec.stderr];
        let mut fds = [0; 3];
        for ((slot, lifted), fd) in fds.iter_mut().zip(&lifted).zip(stdio) {
            *slot = lifted
                .as_ref()
                .map_or(fd.as_raw_fd(), |l| l.as_fd().as_raw_fd());
        }
        // The ruleset must survive the stdio dup2s onto 0-2.
        let ruleset = spec.confine.and_then(|c| c.ruleset);
        let lifted_ruleset = match ruleset {
            Some(fd) if fd.as_raw_fd() <= 2 => {
                Some(rustix::io::fcntl_dupfd_cloexec(fd, 3).map_err(|errno| {
                    SpawnError::Failed {
                        stage: Stage::ConfineDup,
                        errno,
                    }
                })?)
            }
            _ => None,
        };
        let landlock = lifted_ruleset
            .as_ref()
            .map(|l| l.as_fd().as_raw_fd())
            .or(ruleset.map(|fd| fd.as_raw_fd()))
            .unwrap_or(-1);
        let program = spec.confine.and_then(|c| c.seccomp);
        // A thread that carries the program spawns the child, which then
        // inherits it; otherwise the child installs it.
        let filtering = program.and_then(FilteringSpawner::get);
        let fprog = program
            .filter(|_| filtering.is_none())
            .map(|prog| libc::sock_fprog {
                // The parent checked the length (`confine::build`).
                len: u16::try_from(prog.len()).unwrap_or(u16::MAX),
                // seccompiler's sock_filter is `repr(C)` with the kernel's
                // layout (u16, u8, u8, u32), as is libc's.
                filter: prog.as_ptr().cast::<libc::sock_filter>().cast_mut(),
            });
        if let Some(iso) = spec.isolate {
            return spawn_isolated(
                spec,
                iso,
                ChildParts {
                    argv: &argv,
                    envp: &envp,
                    stdio: fds,
                    landlock,
                    filtering,
                    fprog: fprog.as_ref(),
                },
            );
        }
        // From a large descriptor table, the child shares this one and
        // keeps only a few low slots holding its descriptors: the kernel
        // neither copies the whole table at the clone nor closes it again at
        // the exec. Held until the child exec'ed or exited.
        let large = fds.iter().chain([&landlock]).any(|&f| f >= LARGE_TABLE)
            && !HANDOFF_OFF.load(Ordering::Relaxed);
        let lease = if large {
            HandOff::get().and_then(|h| h.lease(fds, landlock, -1))
        } else {
            None
        };
        let child = ChildArgs {
            // A child of the spawner thread inherits its no_new_privs.
            no_new_privs: spec.confine.is_some() && filtering.is_none(),
            landlock: lease.as_ref().map_or(landlock, |l| l.ruleset(landlock)),
            seccomp: fprog.as_ref().map_or(ptr::null(), ptr::from_ref),
            program: spec.program.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            cwd: spec.cwd.map_or(ptr::null(), CStr::as_ptr),
            stdio: lease.as_ref().map_or(fds, Lease::stdio),
            new_process_group: spec.new_process_group,
            default_sigint: spec.default_sigint,
            terminal: spec.terminal,
            isolate: ptr::null(),
            unshare_below: lease.as_ref().map_or(-1, |l| l.set.below),
            failed_stage: AtomicU32::new(0),
            failed_errno: AtomicI32::new(0),
        };
        let stack = Stack::take().map_err(|errno| SpawnError::Failed {
            stage: Stage::Stack,
            errno,
        })?;
        let (lo, size) = stack.region();
        let mut pidfd: c_int = -1;
        let mut args = zeroed_args();
        args.flags = (libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD) as u64;
        if lease.is_some() {
            args.flags |= libc::CLONE_FILES as u64;
        }
        args.pidfd = (&raw mut pidfd) as u64;
        args.exit_signal = libc::SIGCHLD as u64;
        args.stack = lo;
        args.stack_size = size;
        if let Some(cg) = spec.cgroup {
            args.flags |= CLONE_INTO_CGROUP;
            args.cgroup = cg.as_raw_fd() as u64;
        }
        let ret = match filtering {
            Some(worker) => {
                let released = AtomicU32::new(WAITING);
                worker.clone3(&mut args, child_main, &child, &released, None, None, None)
            }
            None => {
                let _blocked = BlockAll::new();
                // SAFETY: `stack` outlives the child's use of it and `child`
                // (with every pointer in it: `argv`, `envp`, the spec's
                // strings, the lifted descriptors) outlives the call, which
                // returns only once the child exec'ed or exited
                // (CLONE_VFORK). `child_main` never returns and is written
                // for exactly this child.
                unsafe { clone3(&mut args, child_main, &raw const child) }
            }
        };
        // The child exec'ed or exited (CLONE_VFORK): nothing uses the stack,
        // and it has a table of its own (the slots are free again).
        stack.give_back();
        let small_table = lease.is_some();
        drop(lease);
        if ret < 0 {
            return Err(classify(
                Errno::from_raw_os_error(-(ret as i32)),
                spec.cgroup.is_some(),
            ));
        }
        // SAFETY: with CLONE_PIDFD a successful clone3 stored a new
        // descriptor, owned by nobody else, in `pidfd`.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
        let pid = ret as u32;
        let code = child.failed_stage.load(Ordering::Relaxed);
        if let Some(stage) = Stage::from_code(code) {
            let errno = Errno::from_raw_os_error(child.failed_errno.load(Ordering::Relaxed));
            reap(&pidfd);
            return Err(SpawnError::Failed { stage, errno });
        }
        Ok(Spawned {
            pid,
            pidfd,
            isolation: None,
            small_table,
            proxy_listener: None,
        })
    }

    /// What [`spawn`] built for the child, handed to [`spawn_isolated`].
    #[derive(Clone, Copy)]
    struct ChildParts<'a> {
        argv: &'a [*const c_char],
        envp: &'a [*const c_char],
        stdio: [c_int; 3],
        landlock: c_int,
        filtering: Option<&'static FilteringSpawner>,
        fprog: Option<&'a libc::sock_fprog>,
    }

    /// The sandbox's init of an isolated launch, as the parent holds it.
    ///
    /// The init shares this process's memory (`CLONE_VM`, so no page is
    /// copied however large this process is, and none is written twice
    /// later) and runs on a stack of its own for as long as it lives; it
    /// writes only that stack and the program's status slot. Both belong
    /// to this value, which must therefore outlive the init: dropping it
    /// first kills the init (`pidfd_send_signal(SIGKILL)`, which ends the
    /// whole pid namespace) and waits for its exit (`WNOWAIT`, so the
    /// driver's own reaping still works) before the stack is released.
    pub(crate) struct IsolatedInit {
        pidfd: OwnedFd,
        stack: Option<Stack>,
        status: Box<AtomicU64>,
        /// The sandbox's mount namespace, held so that the init's exit
        /// does not tear the composed view down (`umount` of every mount
        /// and an expedited RCU grace period) before the driver sees the
        /// exit: released off the settle path ([`release_later`]).
        mount_ns: Option<OwnedFd>,
    }

    impl std::fmt::Debug for IsolatedInit {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("IsolatedInit")
                .field("status", &self.program_status())
                .finish_non_exhaustive()
        }
    }

    impl IsolatedInit {
        /// The program's wait status (as `waitpid` gives it), once the init
        /// saw it exit; `None` before, or when the init was killed first
        /// (the whole namespace then died with it).
        pub(crate) fn program_status(&self) -> Option<i32> {
            let v = self.status.load(Ordering::Acquire);
            (v >> 32 == 1).then_some(v as u32 as i32)
        }

        /// Hands the held view to the release thread now: the init has
        /// exited, and its exit waited for every other process of its pid
        /// namespace, so nothing uses the view any more. Its teardown then
        /// runs while the driver settles instead of after.
        pub(crate) fn release_view(&mut self) {
            if let Some(ns) = self.mount_ns.take() {
                release_later(ns);
            }
        }
    }

    impl Drop for IsolatedInit {
        fn drop(&mut self) {
            use rustix::process::{WaitId, WaitIdOptions, waitid};
            let _ = rustix::process::pidfd_send_signal(
                self.pidfd.as_fd(),
                rustix::process::Signal::KILL,
            );
            // Returns at once for a zombie, ECHILD once reaped.
            while let Err(Errno::INTR) = waitid(
                WaitId::PidFd(self.pidfd.as_fd()),
                WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
            ) {}
            if let Some(stack) = self.stack.take() {
                stack.give_back();
            }
            if let Some(ns) = self.mount_ns.take() {
                release_later(ns);
            }
        }
    }

    /// `ioctl(PIDFD_GET_MNT_NAMESPACE)` (Linux 6.11): the mount namespace
    /// of the process `pidfd` names, while it lives. `None` where the
    /// kernel has no such call (the view is then torn down at the init's
    /// exit, as before).
    fn mount_namespace(pidfd: &OwnedFd) -> Option<OwnedFd> {
        if HOLD_MOUNT_NS_OFF.load(Ordering::Relaxed) {
            return None;
        }
        /// `_IO(PIDFS_IOCTL_MAGIC, 3)`.
        const PIDFD_GET_MNT_NAMESPACE: libc::c_ulong = 0xFF03;
        // SAFETY: the ioctl takes no argument and returns a new descriptor
        // (close-on-exec) or -1; nothing else is read or written.
        let fd = unsafe { libc::ioctl(pidfd.as_raw_fd(), PIDFD_GET_MNT_NAMESPACE, 0) };
        // SAFETY: a non-negative result is a new descriptor owned by
        // nobody else.
        (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Set by the benchmark that measures what holding the view saves.
    static HOLD_MOUNT_NS_OFF: AtomicBool = AtomicBool::new(false);

    /// Turns the holding of a sandbox's mount namespace past its init's
    /// exit on or off (on by default).
    pub(crate) fn set_hold_mount_ns(on: bool) {
        HOLD_MOUNT_NS_OFF.store(!on, Ordering::Relaxed);
    }

    /// Closes a sandbox's mount namespace on a thread of its own: the last
    /// reference goes there, with the teardown of the view. A full queue
    /// (the thread behind) closes it here instead, so namespaces never
    /// pile up.
    fn release_later(ns: OwnedFd) {
        let refused = match release_queue() {
            Some(tx) => match crate::sync::lock_std(tx).try_send(ns) {
                Ok(()) => None,
                Err(mpsc::TrySendError::Full(ns) | mpsc::TrySendError::Disconnected(ns)) => {
                    Some(ns)
                }
            },
            None => Some(ns),
        };
        drop(refused);
    }

    /// The release thread's queue ([`release_later`]), the thread started
    /// by the first call (`None` where it could not be started).
    pub(crate) fn release_queue() -> &'static Option<Mutex<mpsc::SyncSender<OwnedFd>>> {
        static RELEASE: OnceLock<Option<Mutex<mpsc::SyncSender<OwnedFd>>>> = OnceLock::new();
        RELEASE.get_or_init(|| {
            let (tx, rx) = mpsc::sync_channel::<OwnedFd>(64);
            std::thread::Builder::new()
                .name("custodian-ns-release".into())
                .spawn(move || {
                    let mut aside = super::Aside::new();
                    for ns in rx {
                        aside.step_aside();
                        drop(ns);
                    }
                })
                .ok()
                .map(|_| Mutex::new(tx))
        })
    }

    /// Any value but 0: no child has released the caller yet.
    const WAITING: u32 = u32::MAX;
    /// A prepared sandbox's `released` word once its view is composed.
    const READY: u32 = 1;

    /// Sleeps until `released` is 0. With `watch` (the init's pidfd, once
    /// the kernel stored it), wakes every few milliseconds to see whether
    /// the child exited without releasing (killed): `false` then.
    fn wait_released(
        released: &AtomicU32,
        watch: Option<&AtomicI32>,
        pre: Option<&AtomicI32>,
    ) -> bool {
        use rustix::process::{WaitId, WaitIdOptions, waitid};
        let tick = libc::timespec {
            tv_sec: 0,
            tv_nsec: 5_000_000,
        };
        while released.load(Ordering::Acquire) != 0 {
            let timeout = watch.map_or(ptr::null(), |_| ptr::from_ref(&tick));
            // SAFETY: FUTEX_WAIT reads the word, which lives in the caller's
            // frame, and sleeps while it holds WAITING (at most `timeout`).
            // Not the private variant: the kernel's wake at mm_release is a
            // shared one (futex(2): a private wait is keyed apart from it).
            unsafe {
                raw4(
                    libc::SYS_futex as usize,
                    released.as_ptr() as usize,
                    libc::FUTEX_WAIT as usize,
                    WAITING as usize,
                    timeout as usize,
                );
            }
            let Some(fd) = watch.map(|w| w.load(Ordering::Relaxed)) else {
                continue;
            };
            if fd < 0 {
                // No init yet: a pre-init that is gone without one (and
                // without a release) never makes it.
                let pre = pre.map_or(-1, |p| p.load(Ordering::Relaxed));
                if pre >= 0 && released.load(Ordering::Acquire) != 0 {
                    // SAFETY: the kernel stored a pidfd owned by the caller
                    // there.
                    let pidfd = unsafe { BorrowedFd::borrow_raw(pre) };
                    let exited = waitid(
                        WaitId::PidFd(pidfd),
                        WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
                    );
                    if matches!(exited, Ok(Some(_)))
                        && watch.is_some_and(|w| w.load(Ordering::Relaxed) < 0)
                        && released.load(Ordering::Acquire) != 0
                    {
                        return false;
                    }
                }
                continue;
            }
            if released.load(Ordering::Acquire) == 0 {
                continue;
            }
            // SAFETY: the kernel stored a pidfd owned by the caller there.
            let pidfd = unsafe { BorrowedFd::borrow_raw(fd) };
            let exited = waitid(
                WaitId::PidFd(pidfd),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
            );
            if matches!(exited, Ok(Some(_))) && released.load(Ordering::Acquire) != 0 {
                return false;
            }
        }
        true
    }

    /// The clone of a joined launch (module docs, *A request's network
    /// namespace*): the pre-init, cloned with `normal`'s cgroup on a stack
    /// of its own, makes the init; the pre-init is reaped before this
    /// returns. `Some(r)`: as a clone's answer, `r > 0` when the init exists
    /// (its pid is in `IsolateArgs::init_pid`, its pidfd in `pidfd`; the
    /// init may have failed a later step, as after any clone), `-errno`
    /// when none was made. `None`: the pre-init could not enter the
    /// request's namespaces (no init exists, `child`'s failure slots hold
    /// why).
    fn clone_joined(
        normal: &libc::clone_args,
        filtering: Option<&FilteringSpawner>,
        child: &ChildArgs,
        released: &AtomicU32,
        pidfd: &AtomicI32,
    ) -> Result<Option<isize>, SpawnError> {
        let stack = Stack::take().map_err(|errno| SpawnError::Failed {
            stage: Stage::Stack,
            errno,
        })?;
        let pre = AtomicI32::new(-1);
        let mut args = zeroed_args();
        args.flags = (libc::CLONE_VM | libc::CLONE_PIDFD | libc::CLONE_FILES) as u64
            | (normal.flags & CLONE_INTO_CGROUP);
        args.cgroup = normal.cgroup;
        args.pidfd = pre.as_ptr() as u64;
        args.exit_signal = libc::SIGCHLD as u64;
        (args.stack, args.stack_size) = stack.region();
        let r = match filtering {
            Some(worker) => worker.clone3(
                &mut args,
                pre_init_main,
                child,
                released,
                Some(pidfd),
                Some(&pre),
                None,
            ),
            None => {
                let r = {
                    let _blocked = BlockAll::new();
                    // SAFETY: the pre-init runs on `stack` until it exits,
                    // which the reap below waits for; `child` and what it
                    // points to outlive the release, which
                    // `wait_released` waits for.
                    unsafe { clone3(&mut args, pre_init_main, child) }
                };
                if r > 0 && !wait_released(released, Some(pidfd), Some(&pre)) {
                    -(libc::ECHILD as isize)
                } else {
                    r
                }
            }
        };
        let pre = pre.load(Ordering::Relaxed);
        if pre >= 0 {
            // SAFETY: with CLONE_PIDFD a successful clone3 stored a new
            // descriptor, owned by nobody else, in `pre`.
            let pre = unsafe { OwnedFd::from_raw_fd(pre) };
            // It exits right after it cloned the init (or failed).
            reap(&pre);
        }
        // Nothing runs on the pre-init's stack any more.
        stack.give_back();
        if pidfd.load(Ordering::Relaxed) >= 0 {
            // The init exists: as a clone that made it (or it died before
            // it released: `-ECHILD`, reaped by the caller).
            return Ok(Some(if r < 0 { r } else { 1 }));
        }
        let failed = Stage::from_code(child.failed_stage.load(Ordering::Relaxed));
        let errno = -(child.failed_errno.load(Ordering::Relaxed) as isize);
        Ok(match failed {
            Some(Stage::JoinNetwork) => None,
            Some(Stage::InitClone) => Some(errno),
            // The pre-init's own clone failed (`r < 0`), or it died.
            _ => Some(if r < 0 { r } else { -(libc::ECHILD as isize) }),
        })
    }

    /// The isolated path of [`spawn`] (module docs, *Isolation*): in the
    /// sandbox prepared for it if there is one that fits, else in one
    /// composed now; then, for a request's launch, a sandbox prepared for
    /// the next (module docs, *A prepared sandbox*).
    fn spawn_isolated(
        spec: &SpawnSpec<'_>,
        iso: super::Isolate<'_>,
        parts: ChildParts<'_>,
    ) -> Result<Spawned, SpawnError> {
        let nest = iso.nest.map_or(-1, |fd| fd.as_raw_fd());
        let taken = iso
            .spare
            .and_then(|s| s.lock().unwrap_or_else(|e| e.into_inner()).take())
            .and_then(|b| b.downcast::<SpareSandbox>().ok());
        if let Some(spare) = taken {
            // The stdio sources are ≥ 3 or on their targets already
            // (`lift`); the rulesets must survive the stdio `dup2`s. The
            // init copies the whole table, as a composed launch's clone
            // does without the hand-off.
            let usable = parts
                .filtering
                .is_some_and(|w| std::ptr::eq(w, spare.state.program))
                && !spec.terminal
                && [parts.landlock, nest].iter().all(|&f| f == -1 || f > 2);
            if usable {
                match spawn_prepared(*spare, spec, &iso, &parts, nest) {
                    Ok(spawned) => {
                        PREPARED_LAUNCHES.fetch_add(1, Ordering::Relaxed);
                        return Ok(spawned);
                    }
                    Err(Some(e)) => return Err(e),
                    Err(None) => {}
                }
            }
        }
        spawn_isolated_cold(spec, iso, parts)
    }

    /// [`spawn_isolated`] in a sandbox composed now.
    fn spawn_isolated_cold(
        spec: &SpawnSpec<'_>,
        iso: super::Isolate<'_>,
        parts: ChildParts<'_>,
    ) -> Result<Spawned, SpawnError> {
        let stack_err = |errno| SpawnError::Failed {
            stage: Stage::Stack,
            errno,
        };
        let view = iso.view;
        let steps = raw_steps(&view.steps);
        let mut slots: Vec<c_int> = vec![-1; view.slots];
        let rw_dirs: Vec<*const c_char> = view.writable_fresh.iter().map(|c| c.as_ptr()).collect();
        let init_stack = Stack::take().map_err(stack_err)?;
        let program_stack = Stack::take().map_err(stack_err)?;
        let status = Box::new(AtomicU64::new(0));
        let released = AtomicU32::new(WAITING);
        // The nesting ruleset must survive the stdio dup2s onto 0-2.
        let lifted_nest = match iso.nest {
            Some(fd) if fd.as_raw_fd() <= 2 => {
                Some(rustix::io::fcntl_dupfd_cloexec(fd, 3).map_err(|errno| {
                    SpawnError::Failed {
                        stage: Stage::ConfineDup,
                        errno,
                    }
                })?)
            }
            _ => None,
        };
        let nest = lifted_nest
            .as_ref()
            .map(|l| l.as_fd().as_raw_fd())
            .or(iso.nest.map(|fd| fd.as_raw_fd()))
            .unwrap_or(-1);
        // As for a plain spawn: from a large table, the init shares this
        // one until its first system call unshares a copy of a few slots
        // (held until the program exec'ed, which the release waits for).
        // Network `allow`: the init sends the proxy's listener back over
        // this pair (its end must be in the init's own table: no hand-off).
        let proxy_pair = match view.proxy_port {
            Some(_) => Some(
                rustix::net::socketpair(
                    rustix::net::AddressFamily::UNIX,
                    rustix::net::SocketType::DGRAM,
                    rustix::net::SocketFlags::CLOEXEC,
                    None,
                )
                .map_err(|errno| SpawnError::Failed {
                    stage: Stage::ProxyListener,
                    errno,
                })?,
            ),
            None => None,
        };
        let large = parts
            .stdio
            .iter()
            .chain([&parts.landlock, &nest])
            .any(|&f| f >= LARGE_TABLE)
            && !HANDOFF_OFF.load(Ordering::Relaxed)
            && proxy_pair.is_none();
        let lease = if large {
            HandOff::get().and_then(|h| h.lease(parts.stdio, parts.landlock, nest))
        } else {
            None
        };
        // With the network off in a request's namespace owned by a user
        // namespace of its own: through a pre-init (module docs, *A
        // request's network namespace*).
        let joined = match (iso.net, iso.net_user) {
            (Some(net), Some(user)) if view.new_net && !view.contains_only => Some((user, net)),
            _ => None,
        };
        let pidfd = AtomicI32::new(-1);
        let isolate = IsolateArgs {
            nest: lease.as_ref().map_or(nest, |l| l.nest(nest)),
            steps: steps.as_ptr(),
            n_steps: steps.len(),
            fds: slots.as_mut_ptr(),
            n_slots: slots.len(),
            uid_map: view.uid_map.as_ptr(),
            uid_map_len: view.uid_map.len(),
            gid_map: view.gid_map.as_ptr(),
            gid_map_len: view.gid_map.len(),
            loopback: AtomicBool::new(false),
            contains_only: view.contains_only,
            death_signal: parts.filtering.is_some(),
            rw_dirs: rw_dirs.as_ptr(),
            n_rw_dirs: rw_dirs.len(),
            access_fs: iso.access_fs,
            tool_stack: program_stack.region(),
            status: ptr::from_ref(&*status),
            released: &raw const released,
            failed_step: AtomicU32::new(u32::MAX),
            proxy_channel: proxy_pair.as_ref().map_or(-1, |(_, c)| c.as_raw_fd()),
            proxy_port: view.proxy_port.unwrap_or(0),
            join_user: joined.map_or(-1, |(user, _)| user.as_raw_fd()),
            join_net: joined.map_or(-1, |(_, net)| net.as_raw_fd()),
            joined: AtomicBool::new(false),
            init_stack: init_stack.region(),
            init_pidfd: &raw const pidfd,
            init_pid: AtomicI32::new(0),
            go: ptr::null(),
            job: ptr::null(),
            expect: ptr::null(),
        };
        let child = ChildArgs {
            // An unconfined launch keeps setuid programs working.
            no_new_privs: parts.filtering.is_none() && !view.contains_only,
            landlock: lease
                .as_ref()
                .map_or(parts.landlock, |l| l.ruleset(parts.landlock)),
            seccomp: parts.fprog.map_or(ptr::null(), ptr::from_ref),
            program: spec.program.as_ptr(),
            argv: parts.argv.as_ptr(),
            envp: parts.envp.as_ptr(),
            cwd: spec.cwd.map_or(ptr::null(), CStr::as_ptr),
            stdio: lease.as_ref().map_or(parts.stdio, Lease::stdio),
            new_process_group: true,
            default_sigint: spec.default_sigint,
            terminal: spec.terminal,
            isolate: &raw const isolate,
            unshare_below: lease.as_ref().map_or(-1, |l| l.set.below),
            failed_stage: AtomicU32::new(0),
            failed_errno: AtomicI32::new(0),
        };
        let (lo, size) = init_stack.region();
        let mut args = zeroed_args();
        args.flags = (libc::CLONE_VM | libc::CLONE_PIDFD) as u64
            | if view.contains_only {
                (libc::CLONE_NEWUSER | libc::CLONE_NEWPID) as u64
            } else {
                NEW_NAMESPACES
            };
        // The network off: the request's shared namespace or a spare one,
        // entered by the spawner thread for the clone, or one the clone
        // makes (see `super::netns`).
        let enters = matches!(parts.filtering, Some(w) if w.enters_net)
            && view.new_net
            && iso.net_user.is_none();
        let shared = iso.net.filter(|_| enters);
        let mut spare = match parts.filtering {
            Some(_) if enters && shared.is_none() => super::netns::take(),
            _ => None,
        };
        let entered = shared.or(spare.as_ref().map(AsFd::as_fd));
        if view.new_net && entered.is_none() {
            args.flags |= libc::CLONE_NEWNET as u64;
            isolate.loopback.store(true, Ordering::Relaxed);
        }
        if lease.is_some() {
            args.flags |= libc::CLONE_FILES as u64;
        }
        args.pidfd = pidfd.as_ptr() as u64;
        args.exit_signal = libc::SIGCHLD as u64;
        args.stack = lo;
        args.stack_size = size;
        if let Some(cg) = spec.cgroup {
            args.flags |= CLONE_INTO_CGROUP;
            args.cgroup = cg.as_raw_fd() as u64;
        }
        // Joined: the pre-init makes the init; `None` where it could not
        // enter the request's namespaces (no init exists), and the launch
        // makes its own below (`args` has `CLONE_NEWNET`: `entered` is
        // `None` for it).
        let joined_ret = match joined {
            Some(_) => {
                // Its loopback is up already.
                let loopback = isolate.loopback.swap(false, Ordering::Relaxed);
                isolate.joined.store(true, Ordering::Relaxed);
                let r = clone_joined(&args, parts.filtering, &child, &released, &pidfd)?;
                if r.is_none() {
                    tracing::warn!(
                        "the request's network namespace could not be entered; \
                         this launch has one of its own"
                    );
                    isolate.joined.store(false, Ordering::Relaxed);
                    isolate.loopback.store(loopback, Ordering::Relaxed);
                    child.failed_stage.store(0, Ordering::Relaxed);
                    child.failed_errno.store(0, Ordering::Relaxed);
                    released.store(WAITING, Ordering::Relaxed);
                }
                r.map(|pid| {
                    if pid > 0 {
                        isolate.init_pid.load(Ordering::Relaxed) as isize
                    } else {
                        pid
                    }
                })
            }
            None => None,
        };
        let ret = match (joined_ret, parts.filtering) {
            (Some(r), _) => r,
            (None, Some(worker)) => {
                let mut r = worker.clone3(
                    &mut args,
                    child_main,
                    &child,
                    &released,
                    Some(&pidfd),
                    None,
                    entered,
                );
                if r < 0 && entered.is_some() && pidfd.load(Ordering::Relaxed) < 0 {
                    // No child, so nothing reads `isolate` or `args`: the
                    // spare (or the shared namespace) could not be entered,
                    // or the clone failed in it; once more with a namespace
                    // of its own, and no spare for any later launch.
                    if spare.is_some() {
                        super::netns::turn_off();
                    } else {
                        tracing::warn!(
                            "the request's network namespace could not be entered; \
                             this launch has one of its own"
                        );
                    }
                    spare = None;
                    args.flags |= libc::CLONE_NEWNET as u64;
                    isolate.loopback.store(true, Ordering::Relaxed);
                    released.store(WAITING, Ordering::Relaxed);
                    r = worker.clone3(
                        &mut args,
                        child_main,
                        &child,
                        &released,
                        Some(&pidfd),
                        None,
                        None,
                    );
                }
                r
            }
            (None, None) => {
                let r = {
                    let _blocked = BlockAll::new();
                    // SAFETY: `init_stack` and `program_stack` outlive the
                    // child's use of them (the init's until it is reaped,
                    // held by `IsolatedInit`; the program's until its
                    // exec, which precedes the release), and `child`,
                    // `isolate` with everything they point to outlive the
                    // release, which `wait_released` waits for.
                    unsafe { clone3(&mut args, child_main, &raw const child) }
                };
                if r > 0 && !wait_released(&released, Some(&pidfd), None) {
                    -(libc::ECHILD as isize)
                } else {
                    r
                }
            }
        };
        // The sandbox holds its network namespace itself now.
        drop(spare);
        // The init has a table of its own (it unshared first, before the
        // release): the slots are free again.
        let small_table = lease.is_some();
        drop(lease);
        if ret < 0 && pidfd.load(Ordering::Relaxed) < 0 {
            // No child: nothing uses either stack.
            program_stack.give_back();
            init_stack.give_back();
            return Err(classify(
                Errno::from_raw_os_error(-(ret as i32)),
                spec.cgroup.is_some(),
            ));
        }
        // SAFETY: with CLONE_PIDFD a successful clone3 stored a new
        // descriptor, owned by nobody else, in `pidfd`.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd.load(Ordering::Relaxed)) };
        let failed = if ret < 0 {
            Some((Stage::InitDied, Errno::CHILD))
        } else {
            Stage::from_code(child.failed_stage.load(Ordering::Relaxed)).map(|stage| {
                (
                    stage,
                    Errno::from_raw_os_error(child.failed_errno.load(Ordering::Relaxed)),
                )
            })
        };
        if let Some((stage, errno)) = failed {
            if stage == Stage::View {
                tracing::debug!(
                    step = isolate.failed_step.load(Ordering::Relaxed),
                    %errno,
                    "an isolated launch failed at a view step"
                );
            }
            // The init exits right after it released (or is dead): once it
            // is reaped, neither stack is in use.
            reap(&pidfd);
            program_stack.give_back();
            init_stack.give_back();
            return Err(SpawnError::Failed { stage, errno });
        }
        // The program exec'ed (the init waited for it before releasing).
        program_stack.give_back();
        let proxy_listener = match &proxy_pair {
            Some((ours, _)) => match receive_listener(ours) {
                Ok(fd) => Some(fd),
                Err(errno) => {
                    kill_and_reap(&pidfd);
                    init_stack.give_back();
                    return Err(SpawnError::Failed {
                        stage: Stage::ProxyListener,
                        errno,
                    });
                }
            },
            None => None,
        };
        drop(proxy_pair);
        let keeper = pidfd.try_clone().map_err(|e| SpawnError::Failed {
            stage: Stage::Clone,
            errno: Errno::from_io_error(&e).unwrap_or(Errno::MFILE),
        });
        let keeper = match keeper {
            Ok(k) => k,
            Err(e) => {
                kill_and_reap(&pidfd);
                init_stack.give_back();
                return Err(e);
            }
        };
        Ok(Spawned {
            pid: ret as u32,
            pidfd,
            isolation: Some(IsolatedInit {
                mount_ns: mount_namespace(&keeper),
                pidfd: keeper,
                stack: Some(init_stack),
                status,
            }),
            small_table,
            proxy_listener,
        })
    }

    /// Set by the benchmark that measures what prepared sandboxes save.
    static PREPARED_OFF: AtomicBool = AtomicBool::new(false);
    /// Launches that ran in a prepared sandbox, since the process began.
    static PREPARED_LAUNCHES: AtomicU64 = AtomicU64::new(0);

    /// Turns prepared sandboxes on or off (on by default).
    pub(crate) fn set_prepared(on: bool) {
        PREPARED_OFF.store(!on, Ordering::Relaxed);
    }

    /// Whether sandboxes are prepared ([`set_prepared`]).
    pub(crate) fn prepared_on() -> bool {
        !PREPARED_OFF.load(Ordering::Relaxed)
    }

    /// How many launches ran in a prepared sandbox so far.
    pub(crate) fn prepared_launches() -> u64 {
        PREPARED_LAUNCHES.load(Ordering::Relaxed)
    }

    /// A sandbox composed ahead of a request's next isolated launch with
    /// the network off (module docs, *A prepared sandbox*): an init in
    /// new user, pid, mount, ipc and uts namespaces, in the request's
    /// network namespace, its view composed, asleep until a launch with
    /// the same view arrives. Dropped unused, its init is killed (the
    /// whole pid namespace with it) and reaped.
    pub(crate) struct SpareSandbox {
        state: Box<SpareState>,
        /// The cgroup its init was cloned into, made for the launch that
        /// takes it ([`SpareSandbox::take_cgroup`]). Dropped after the init
        /// was reaped (`Drop` runs before the fields go).
        cgroup: Option<crate::contain::Cgroup>,
    }

    /// What a sandbox is prepared from: a launch's view, and the spawner
    /// thread its clone goes through.
    pub(crate) struct SparePlan {
        steps: Vec<Step>,
        slots: usize,
        writable_fresh: Vec<std::ffi::CString>,
        uid_map: Vec<u8>,
        gid_map: Vec<u8>,
        worker: &'static FilteringSpawner,
        /// The id of the cgroup its cgroup is made beneath (the
        /// request's), or 0 for the base.
        parent: u64,
        /// The request's network namespace is owned by a user namespace of
        /// its own (an unprivileged process's): a pre-init enters both.
        joined: bool,
    }

    impl SparePlan {
        /// The same plan for a launch beneath the cgroup `parent` (its id)
        /// instead: the next request's, reserved for it.
        pub(crate) fn beneath(self, parent: u64) -> SparePlan {
            SparePlan { parent, ..self }
        }

        /// The plan for the next launch of `view` under the seccomp
        /// `program`; `None` where none is prepared: prepared sandboxes
        /// turned off, no spawner thread, not an isolated view with the
        /// network off, or a network `allow`.
        pub(crate) fn of(
            view: &View,
            program: Option<&'static [seccompiler::sock_filter]>,
            parent: u64,
            joined: bool,
        ) -> Option<SparePlan> {
            if PREPARED_OFF.load(Ordering::Relaxed)
                || !view.new_net
                || view.contains_only
                || view.proxy_port.is_some()
            {
                return None;
            }
            let worker = program.and_then(FilteringSpawner::get)?;
            (joined || worker.enters_net).then(|| SparePlan {
                steps: view.steps.clone(),
                slots: view.slots,
                writable_fresh: view.writable_fresh.clone(),
                uid_map: view.uid_map.clone(),
                gid_map: view.gid_map.clone(),
                worker,
                parent,
                joined,
            })
        }
    }

    /// The sandbox prepared in `slot` for a launch of `view` under the
    /// seccomp `program` beneath the cgroup `parent` ([`SparePlan::of`]),
    /// once its view is composed and while its init lives; `None` if there
    /// is none, or it was prepared for another launch (it is killed then).
    pub(crate) fn take_prepared(
        slot: &crate::confine::build::SpareSlot,
        view: &View,
        program: Option<&'static [seccompiler::sock_filter]>,
        parent: u64,
    ) -> Option<Box<SpareSandbox>> {
        let spare = slot
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?
            .downcast::<SpareSandbox>()
            .ok()?;
        let worker = program.and_then(FilteringSpawner::get)?;
        (!PREPARED_OFF.load(Ordering::Relaxed)
            && spare.state.parent == parent
            && spare.fits(view, worker)
            && spare.ready()
            && spare.alive())
        .then_some(spare)
    }

    /// The id of the cgroup a prepared sandbox waits beneath ([`SparePlan`]'s
    /// parent; 0: the base), if `spare` is one.
    pub(crate) fn prepared_parent(spare: &(dyn std::any::Any + Send)) -> Option<u64> {
        spare.downcast_ref::<SpareSandbox>().map(|s| s.state.parent)
    }

    /// Whether `slot` holds no prepared sandbox (one may be prepared).
    pub(crate) fn slot_free(slot: &crate::confine::build::SpareSlot) -> bool {
        slot.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// The pid of the init of the sandbox prepared in `slot`, once its view
    /// is composed (for the tests); `None` if there is none, or it was
    /// made through a pre-init.
    pub(crate) fn waiting_init(slot: &crate::confine::build::SpareSlot) -> Option<u32> {
        let held = slot.held.lock().unwrap_or_else(|e| e.into_inner());
        let spare = held.as_ref()?.downcast_ref::<SpareSandbox>()?;
        (!spare.state.joined && spare.ready())
            .then(|| u32::try_from(spare.state.pid.load(Ordering::Acquire)).ok())
            .flatten()
    }

    /// Queues the preparation of a sandbox in `net`'s slot (nothing if it
    /// holds one): its init is cloned into `cgroup`, in `net`'s namespaces.
    pub(crate) fn prepare_next(
        net: &crate::confine::build::SharedNet,
        plan: SparePlan,
        cgroup: Option<crate::contain::Cgroup>,
    ) {
        SpareSandbox::start(
            &net.spare,
            plan,
            net.net.as_fd(),
            net.user.as_ref().map(AsFd::as_fd),
            cgroup,
        );
    }

    // SAFETY: the raw pointers in the state point into the same box (and
    // the spawner thread's stack-free job), which moves with it; the init
    // that reads them shares this process's memory whichever thread owns
    // the box.
    unsafe impl Send for SpareSandbox {}

    struct SpareState {
        /// The view it composed, as planned (the key, with `program`).
        steps: Vec<Step>,
        writable_fresh: Vec<std::ffi::CString>,
        uid_map: Vec<u8>,
        gid_map: Vec<u8>,
        /// The seccomp program its spawner thread installs.
        program: &'static FilteringSpawner,
        raw: Vec<RawStep>,
        fds: Vec<c_int>,
        rw_dirs: Vec<*const c_char>,
        isolate: IsolateArgs,
        child: ChildArgs,
        args: libc::clone_args,
        /// [`WAITING`], then [`READY`], or 0 when the clone or the view
        /// failed.
        state: AtomicU32,
        go: AtomicU32,
        job: AtomicPtr<ChildArgs>,
        ret: AtomicIsize,
        /// The init's pidfd (the clone's, or the pre-init's clone's).
        pidfd: AtomicI32,
        /// Joined: the pre-init's pidfd, until it is reaped.
        pre_pidfd: AtomicI32,
        /// The init's pid (joined: the pre-init's; see [`SpareState::pid`]).
        pid: AtomicI32,
        /// Made through a pre-init ([`SparePlan::joined`]).
        joined: bool,
        /// The init's stack; `None` once a launch took it.
        stack: Option<Stack>,
        /// The stack of the helper that composes the view ([`compose`]),
        /// which has exited once the sandbox is ready.
        helper: Option<Stack>,
        /// Joined: the pre-init's stack, given back once it is reaped.
        pre_stack: std::sync::Mutex<Option<Stack>>,
        /// A launch ran in it: its init belongs to that launch now.
        used: bool,
        /// The cgroup its init was cloned into (its id).
        cgroup_id: u64,
        /// See [`SparePlan::parent`].
        parent: u64,
    }

    impl SpareState {
        /// Joined: whether the pre-init exited without making the init (it
        /// stores a failure and releases when it can; a kill cannot).
        fn pre_gone_without_init(&self) -> bool {
            use rustix::process::{WaitId, WaitIdOptions, waitid};
            let pre = self.pre_pidfd.load(Ordering::Acquire);
            if pre < 0 || self.pidfd.load(Ordering::Acquire) >= 0 {
                return false;
            }
            // SAFETY: the kernel stored a pidfd this box owns.
            let pidfd = unsafe { BorrowedFd::borrow_raw(pre) };
            let exited = waitid(
                WaitId::PidFd(pidfd),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
            );
            matches!(exited, Ok(Some(_))) && self.pidfd.load(Ordering::Acquire) < 0
        }

        /// Joined: reaps the pre-init (it exits right after it cloned the
        /// init, or failed) and closes its pidfd.
        fn reap_pre(&self) {
            let pre = self.pre_pidfd.swap(-1, Ordering::AcqRel);
            if pre >= 0 {
                // SAFETY: the kernel stored a new pidfd, owned by this box
                // until now.
                let pre = unsafe { OwnedFd::from_raw_fd(pre) };
                reap(&pre);
                // Nothing runs on its stack any more.
                let stack = self
                    .pre_stack
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                if let Some(stack) = stack {
                    stack.give_back();
                }
            }
        }
    }

    impl SpareSandbox {
        /// Prepares one in `slot` for the next launch of `view` (nothing
        /// if the slot holds one already): the clone is queued for the
        /// spawner thread `worker`, which enters `net` for it; nothing
        /// here waits for it.
        fn start(
            slot: &crate::confine::build::SpareSlot,
            view: SparePlan,
            net: BorrowedFd<'_>,
            user: Option<BorrowedFd<'_>>,
            cgroup: Option<crate::contain::Cgroup>,
        ) {
            let worker = view.worker;
            let joined = view.joined;
            // 0: none (the pid-namespace tier); no cgroup has inode 0.
            let cgroup_id = match cgroup.as_ref().map(crate::contain::Cgroup::id) {
                None => 0,
                Some(Ok(id)) => id,
                Some(Err(_)) => return,
            };
            if joined && user.is_none() {
                return;
            }
            let mut held = slot.held.lock().unwrap_or_else(|e| e.into_inner());
            if held.is_some() {
                return;
            }
            let (Ok(stack), Ok(helper)) = (Stack::take(), Stack::take()) else {
                return;
            };
            // Joined: the pre-init runs on a stack of its own until it
            // exits, while the init it clones starts on `stack`.
            let pre_stack = match joined.then(Stack::take) {
                Some(Ok(pre)) => Some(pre),
                Some(Err(_)) => return,
                None => None,
            };
            let (lo, size) = stack.region();
            let helper_region = helper.region();
            let clone_region = pre_stack.as_ref().map_or((lo, size), Stack::region);
            let mut st = Box::new(SpareState {
                steps: view.steps,
                writable_fresh: view.writable_fresh,
                uid_map: view.uid_map,
                gid_map: view.gid_map,
                program: worker,
                parent: view.parent,
                cgroup_id,
                raw: Vec::new(),
                fds: vec![-1; view.slots],
                rw_dirs: Vec::new(),
                isolate: IsolateArgs::blank(),
                child: ChildArgs {
                    program: ptr::null(),
                    argv: ptr::null(),
                    envp: ptr::null(),
                    cwd: ptr::null(),
                    stdio: [-1; 3],
                    new_process_group: true,
                    default_sigint: false,
                    terminal: false,
                    no_new_privs: false,
                    landlock: -1,
                    seccomp: ptr::null(),
                    isolate: ptr::null(),
                    unshare_below: -1,
                    failed_stage: AtomicU32::new(0),
                    failed_errno: AtomicI32::new(0),
                },
                args: zeroed_args(),
                state: AtomicU32::new(WAITING),
                go: AtomicU32::new(0),
                job: AtomicPtr::new(ptr::null_mut()),
                ret: AtomicIsize::new(0),
                pidfd: AtomicI32::new(-1),
                pre_pidfd: AtomicI32::new(-1),
                pid: AtomicI32::new(0),
                joined,
                stack: Some(stack),
                helper: Some(helper),
                pre_stack: std::sync::Mutex::new(pre_stack),
                used: false,
            });
            st.raw = raw_steps(&st.steps);
            st.rw_dirs = st.writable_fresh.iter().map(|c| c.as_ptr()).collect();
            let p: *mut SpareState = &raw mut *st;
            // SAFETY: `p` is the box's live, uniquely owned state; every
            // pointer stored points into it (the vectors' heap buffers are
            // never resized again) and stays valid while the box lives,
            // which its drop makes last until the init is reaped.
            unsafe {
                let i = &raw mut (*p).isolate;
                (*i).steps = (*p).raw.as_ptr();
                (*i).n_steps = (*p).raw.len();
                (*i).fds = (*p).fds.as_mut_ptr();
                (*i).n_slots = (*p).fds.len();
                (*i).uid_map = (*p).uid_map.as_ptr();
                (*i).uid_map_len = (*p).uid_map.len();
                (*i).gid_map = (*p).gid_map.as_ptr();
                (*i).gid_map_len = (*p).gid_map.len();
                (*i).rw_dirs = (*p).rw_dirs.as_ptr();
                (*i).n_rw_dirs = (*p).rw_dirs.len();
                (*i).released = &raw const (*p).state;
                (*i).go = &raw const (*p).go;
                (*i).job = &raw const (*p).job;
                (*i).tool_stack = helper_region;
                (*p).child.isolate = i;
                let a = &raw mut (*p).args;
                (*a).flags = (libc::CLONE_VM
                    | libc::CLONE_PIDFD
                    | libc::CLONE_FILES
                    | libc::CLONE_PARENT_SETTID) as u64;
                if let Some(cg) = &cgroup {
                    (*a).flags |= CLONE_INTO_CGROUP;
                    (*a).cgroup = cg.as_fd().as_raw_fd() as u64;
                }
                if joined {
                    // The pre-init enters the request's user and network
                    // namespaces, unshares the others and clones the init
                    // (`pre_init_main`), which needs no id maps.
                    (*i).joined = AtomicBool::new(true);
                    (*i).join_user = user.map_or(-1, |u| u.as_raw_fd());
                    (*i).join_net = net.as_raw_fd();
                    (*i).init_stack = (lo, size);
                    (*i).init_pidfd = &raw const (*p).pidfd;
                    (*a).pidfd = (*p).pre_pidfd.as_ptr() as u64;
                } else {
                    (*a).flags |= NEW_NAMESPACES;
                    (*a).pidfd = (*p).pidfd.as_ptr() as u64;
                }
                (*a).parent_tid = (*p).pid.as_ptr() as u64;
                (*a).exit_signal = libc::SIGCHLD as u64;
                ((*a).stack, (*a).stack_size) = clone_region;
            }
            let job = Job {
                args: &raw mut st.args,
                entry: if joined { pre_init_main } else { prepared_main },
                child: &raw const st.child,
                ret: &raw const st.ret,
                released: &raw const st.state,
                netns: if joined { -1 } else { net.as_raw_fd() },
                aside: true,
            };
            // The cgroup's descriptor stays open (in the box) until the
            // clone was made or failed: `Drop` waits for it.
            if worker.jobs.send(job).is_err() {
                // Never queued: nothing reads the state.
                st.state.store(0, Ordering::Relaxed);
                return;
            }
            slot.queued.fetch_add(1, Ordering::Relaxed);
            *held = Some(Box::new(SpareSandbox { state: st, cgroup }));
        }

        /// The cgroup its init runs in: the launch that takes this sandbox
        /// runs there (the caller makes it the launch's containment).
        pub(crate) fn take_cgroup(&mut self) -> Option<crate::contain::Cgroup> {
            self.cgroup.take()
        }

        /// Whether it was prepared for `view` and the spawner thread of
        /// `worker`.
        fn fits(&self, view: &View, worker: &'static FilteringSpawner) -> bool {
            let st = &*self.state;
            std::ptr::eq(st.program, worker)
                && st.steps == view.steps
                && st.fds.len() == view.slots
                && st.writable_fresh == view.writable_fresh
                && st.uid_map == view.uid_map
                && st.gid_map == view.gid_map
        }

        /// Whether its init has not exited (a request's cleanup may have
        /// killed it with everything in the request's cgroup).
        fn alive(&self) -> bool {
            use rustix::process::{WaitId, WaitIdOptions, waitid};
            let fd = self.state.pidfd.load(Ordering::Acquire);
            if fd < 0 {
                return false;
            }
            // SAFETY: the kernel stored a pidfd this box owns.
            let pidfd = unsafe { BorrowedFd::borrow_raw(fd) };
            matches!(
                waitid(
                    WaitId::PidFd(pidfd),
                    WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
                ),
                Ok(None)
            )
        }

        /// Waits until the view is composed: `false` if the clone or the
        /// view failed, or the init died.
        fn ready(&self) -> bool {
            use rustix::process::{WaitId, WaitIdOptions, waitid};
            let st = &*self.state;
            let tick = libc::timespec {
                tv_sec: 0,
                tv_nsec: 5_000_000,
            };
            loop {
                match st.state.load(Ordering::Acquire) {
                    READY => return true,
                    0 => return false,
                    _ => {}
                }
                // SAFETY: FUTEX_WAIT reads the word, which lives in the
                // box, for at most `tick`.
                unsafe {
                    raw4(
                        libc::SYS_futex as usize,
                        st.state.as_ptr() as usize,
                        libc::FUTEX_WAIT as usize,
                        WAITING as usize,
                        (&raw const tick) as usize,
                    );
                }
                if st.pre_gone_without_init() {
                    return false;
                }
                let fd = st.pidfd.load(Ordering::Acquire);
                if fd >= 0 && st.state.load(Ordering::Acquire) == WAITING {
                    // SAFETY: the kernel stored a pidfd this box owns.
                    let pidfd = unsafe { BorrowedFd::borrow_raw(fd) };
                    let exited = waitid(
                        WaitId::PidFd(pidfd),
                        WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
                    );
                    if matches!(exited, Ok(Some(_))) && st.state.load(Ordering::Acquire) == WAITING
                    {
                        return false;
                    }
                }
            }
        }
    }

    impl Drop for SpareSandbox {
        fn drop(&mut self) {
            let st = &mut *self.state;
            if st.used {
                return;
            }
            // The spawner thread may not have cloned it yet: the job points
            // into this box until it did (a pidfd) or failed (0).
            while st.pidfd.load(Ordering::Acquire) < 0
                && st.state.load(Ordering::Acquire) != 0
                && !st.pre_gone_without_init()
            {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            st.reap_pre();
            let fd = st.pidfd.load(Ordering::Acquire);
            if fd >= 0 {
                // SAFETY: the kernel stored a new pidfd, owned by this box.
                let pidfd = unsafe { OwnedFd::from_raw_fd(fd) };
                // Its view is held and torn down off this path, as a
                // launch's is ([`release_later`]): the init's exit, which
                // the reap waits for, then only drops a reference.
                let view = mount_namespace(&pidfd);
                kill_and_reap(&pidfd);
                if let Some(view) = view {
                    release_later(view);
                }
            }
            // Nothing runs on either stack any more.
            for stack in [st.stack.take(), st.helper.take()].into_iter().flatten() {
                stack.give_back();
            }
            // Its init reaped, its cgroup is empty. One beneath the base
            // (outside a request) is released here: nothing else removes
            // it (a request's goes with the request's cgroup).
            if st.parent == 0 {
                if let Some(Err((_, e))) = self.cgroup.take().map(crate::contain::Cgroup::release) {
                    tracing::warn!(error = %e, "an unused prepared sandbox's cgroup was not removed");
                }
            }
        }
    }

    /// A launch in the prepared sandbox `spare`: its view checked from
    /// inside, the init moved into the launch's cgroup, the launch handed
    /// over. `Err(None)`: the sandbox could not serve (not ready, stale, its
    /// cgroup refused it); it is gone, and the launch composes its own.
    fn spawn_prepared(
        mut spare: SpareSandbox,
        spec: &SpawnSpec<'_>,
        iso: &super::Isolate<'_>,
        parts: &ChildParts<'_>,
        nest: c_int,
    ) -> Result<Spawned, Option<SpawnError>> {
        if !spare.ready() {
            return Err(None);
        }
        let st = &*spare.state;
        // What each attached copy must be now: its host path's identity.
        let mut expect = vec![Expect::default(); st.steps.len()];
        for (k, step) in st.steps.iter().enumerate() {
            let Step::Attach { slot, .. } = step else {
                continue;
            };
            let source = st.steps.iter().find_map(|s| match s {
                Step::Clone { path, slot: s, .. } if s == slot => Some(path),
                _ => None,
            });
            let Some(source) = source else {
                continue;
            };
            let Ok(x) = rustix::fs::statx(
                rustix::fs::CWD,
                source.as_c_str(),
                rustix::fs::AtFlags::empty(),
                rustix::fs::StatxFlags::TYPE | rustix::fs::StatxFlags::INO,
            ) else {
                return Err(None);
            };
            expect[k] = Expect {
                identity: true,
                dev_major: x.stx_dev_major,
                dev_minor: x.stx_dev_minor,
                ino: x.stx_ino,
            };
        }
        st.reap_pre();
        let pid = if st.joined {
            st.isolate.init_pid.load(Ordering::Relaxed)
        } else {
            st.pid.load(Ordering::Relaxed)
        };
        // Its init was cloned into the cgroup made for this launch, or
        // into none as this launch runs in none.
        let same_cgroup = match spec.cgroup {
            None => st.cgroup_id == 0,
            Some(cg) => rustix::fs::fstat(cg).is_ok_and(|c| c.st_ino == st.cgroup_id),
        };
        if !same_cgroup {
            return Err(None);
        }
        let program_stack = Stack::take().map_err(|errno| {
            Some(SpawnError::Failed {
                stage: Stage::Stack,
                errno,
            })
        })?;
        let status = Box::new(AtomicU64::new(0));
        let released = AtomicU32::new(WAITING);
        let launch_iso = IsolateArgs {
            steps: st.raw.as_ptr(),
            n_steps: st.raw.len(),
            rw_dirs: st.rw_dirs.as_ptr(),
            n_rw_dirs: st.rw_dirs.len(),
            access_fs: iso.access_fs,
            tool_stack: program_stack.region(),
            status: ptr::from_ref(&*status),
            released: &raw const released,
            nest,
            expect: expect.as_ptr(),
            ..IsolateArgs::blank()
        };
        let child = ChildArgs {
            // The spawner thread's child inherits its no_new_privs and
            // seccomp program.
            no_new_privs: false,
            landlock: parts.landlock,
            seccomp: ptr::null(),
            program: spec.program.as_ptr(),
            argv: parts.argv.as_ptr(),
            envp: parts.envp.as_ptr(),
            cwd: spec.cwd.map_or(ptr::null(), CStr::as_ptr),
            stdio: parts.stdio,
            new_process_group: true,
            default_sigint: spec.default_sigint,
            terminal: false,
            isolate: &raw const launch_iso,
            unshare_below: -1,
            failed_stage: AtomicU32::new(0),
            failed_errno: AtomicI32::new(0),
        };
        st.job
            .store(ptr::from_ref(&child).cast_mut(), Ordering::Release);
        if pid > 0 && super::aside_on() && SPAWNER_WHOLE_SET.load(Ordering::Acquire) {
            // The init was prepared off this CPU; woken here, it runs as
            // soon as this thread sleeps (below), and takes the whole set
            // back first thing (`prepared_main`).
            let mut here = rustix::thread::CpuSet::new();
            here.set(rustix::thread::sched_getcpu());
            let _ = rustix::thread::sched_setaffinity(rustix::process::Pid::from_raw(pid), &here);
        }
        st.go.store(1, Ordering::Release);
        // SAFETY: the wake names only the word's address.
        unsafe {
            raw4(
                libc::SYS_futex as usize,
                st.go.as_ptr() as usize,
                libc::FUTEX_WAKE as usize,
                1,
                0,
            );
        }
        let alive = wait_released(&released, Some(&st.pidfd), None);
        // From here the init belongs to this launch, whatever happened.
        let st = &mut *spare.state;
        st.used = true;
        let init_stack = st.stack.take();
        // The helper exited before the sandbox was ready.
        if let Some(helper) = st.helper.take() {
            helper.give_back();
        }
        // SAFETY: the clone stored a new pidfd (the sandbox was ready),
        // owned by the box until now.
        let pidfd = unsafe { OwnedFd::from_raw_fd(st.pidfd.load(Ordering::Acquire)) };
        let failed = if alive {
            Stage::from_code(child.failed_stage.load(Ordering::Relaxed)).map(|stage| {
                (
                    stage,
                    Errno::from_raw_os_error(child.failed_errno.load(Ordering::Relaxed)),
                )
            })
        } else {
            Some((Stage::InitDied, Errno::CHILD))
        };
        if let Some((stage, errno)) = failed {
            let _ =
                rustix::process::pidfd_send_signal(pidfd.as_fd(), rustix::process::Signal::KILL);
            reap(&pidfd);
            program_stack.give_back();
            if let Some(stack) = init_stack {
                stack.give_back();
            }
            return Err(match stage {
                Stage::Stale | Stage::InitDied => {
                    tracing::debug!(%stage, "a prepared sandbox did not serve; the launch composes its own");
                    None
                }
                _ => Some(SpawnError::Failed { stage, errno }),
            });
        }
        program_stack.give_back();
        let keeper = match pidfd.try_clone() {
            Ok(k) => k,
            Err(e) => {
                kill_and_reap(&pidfd);
                if let Some(stack) = init_stack {
                    stack.give_back();
                }
                return Err(Some(SpawnError::Failed {
                    stage: Stage::Clone,
                    errno: Errno::from_io_error(&e).unwrap_or(Errno::MFILE),
                }));
            }
        };
        Ok(Spawned {
            pid: pid as u32,
            pidfd,
            isolation: Some(IsolatedInit {
                mount_ns: mount_namespace(&keeper),
                pidfd: keeper,
                stack: init_stack,
                status,
            }),
            small_table: false,
            proxy_listener: None,
        })
    }

    /// The listener the init sent (it did before it released the caller,
    /// so the datagram is queued): non-blocking, close-on-exec.
    fn receive_listener(ours: &OwnedFd) -> Result<OwnedFd, Errno> {
        use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut byte = [0u8; 1];
        recvmsg(
            ours,
            &mut [std::io::IoSliceMut::new(&mut byte)],
            &mut control,
            RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
        )?;
        let fd = control
            .drain()
            .find_map(|m| match m {
                RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
                _ => None,
            })
            .ok_or(Errno::NOMSG)?;
        rustix::io::ioctl_fionbio(&fd, true)?;
        Ok(fd)
    }

    /// `SIGKILL` to the child `pidfd` names (its whole pid namespace, for
    /// an init), then [`reap`].
    fn kill_and_reap(pidfd: &OwnedFd) {
        let _ = rustix::process::pidfd_send_signal(pidfd.as_fd(), rustix::process::Signal::KILL);
        reap(pidfd);
    }

    /// `waitid(P_PIDFD, fd, WEXITED)`, retried on `EINTR`: the child has
    /// already exited (`exit_group` released the vfork), so this does not
    /// block for long.
    fn reap(pidfd: &OwnedFd) {
        use rustix::process::{WaitId, WaitIdOptions, waitid};
        while let Err(Errno::INTR) = waitid(WaitId::PidFd(pidfd.as_fd()), WaitIdOptions::EXITED) {}
    }

    fn classify(errno: Errno, into_cgroup: bool) -> SpawnError {
        const REFUSALS: [Errno; 7] = [
            Errno::BADF,
            Errno::NODEV,
            Errno::BUSY,
            Errno::OPNOTSUPP,
            Errno::ACCESS,
            Errno::PERM,
            Errno::NOENT,
        ];
        if errno == Errno::NOSYS || !supported() {
            SpawnError::Unsupported { errno }
        } else if into_cgroup && REFUSALS.contains(&errno) {
            SpawnError::CgroupRefused { errno }
        } else {
            SpawnError::Failed {
                stage: Stage::Clone,
                errno,
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests;
