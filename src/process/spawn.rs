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
    /// A cgroup v2 directory descriptor the child starts in
    /// (`CLONE_INTO_CGROUP`); `None` keeps the caller's cgroup.
    pub cgroup: Option<BorrowedFd<'a>>,
    /// A confinement to apply just before `execve` (see [`ChildConfine`]).
    pub confine: Option<ChildConfine<'a>>,
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
    /// The child's pid.
    pub pid: u32,
    /// A pidfd for the child, obtained atomically with its creation.
    pub pidfd: OwnedFd,
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
}

impl Stage {
    const CHILD: [Stage; 10] = [
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
pub(crate) use imp::{spawn, supported};

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
mod imp {
    use std::ffi::{CStr, c_char, c_int, c_void};
    use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
    use std::ptr;
    use std::sync::atomic::{AtomicI32, AtomicIsize, AtomicU32, Ordering};
    use std::sync::{Mutex, OnceLock, mpsc};

    use rustix::io::Errno;

    use super::{SpawnError, SpawnSpec, Spawned, Stage};

    /// `CLONE_INTO_CGROUP` (Linux 5.7); libc's constant overflows `c_int`.
    const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
    /// `CLOSE_RANGE_CLOEXEC` (Linux 5.11).
    const CLOSE_RANGE_CLOEXEC: usize = 1 << 2;
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
        /// Set `no_new_privs` (any confinement, unless the cloning thread
        /// has it already and the child inherits it).
        no_new_privs: bool,
        /// A Landlock ruleset descriptor (≥ 3), or -1.
        landlock: c_int,
        /// A seccomp program, or NULL.
        seccomp: *const libc::sock_fprog,
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
        // SAFETY: exit_group takes one integer and does not return.
        unsafe {
            core::arch::asm!(
                "syscall",
                in("rax") libc::SYS_exit_group,
                in("rdi") 127,
                options(noreturn, nostack),
            );
        }
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
        let fail = |stage: Stage, ret: isize| -> ! {
            // ret is -4095..=-1: a plain negation cannot overflow, but
            // wrapping_neg leaves no panic path in the child at all.
            a.failed_errno
                .store((ret as i32).wrapping_neg(), Ordering::Relaxed);
            a.failed_stage.store(stage.code(), Ordering::Relaxed);
            exit_127()
        };

        // 1. No handler may run in the shared memory: every caught signal
        // goes back to SIG_DFL, and SIGPIPE too (std's rule); ignored ones
        // stay ignored (POSIX exec semantics). Signals are all blocked here.
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
            if r == 0 && (caught || pipe) {
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

        // 2. Process group, before anything can be signalled through it.
        if a.new_process_group {
            // SAFETY: setpgid takes two integers.
            let r = unsafe { raw4(libc::SYS_setpgid as usize, 0, 0, 0, 0) };
            if r < 0 {
                fail(Stage::SetProcessGroup, r);
            }
        }

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
        // no_new_privs first: both of the others require it.
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

        // 7. The program starts with an empty mask, as under std's Command.
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

    /// A thread that installed one seccomp program on itself and clones
    /// children that inherit it (module docs, *Inherited seccomp filter*).
    struct FilteringSpawner {
        jobs: mpsc::Sender<Job>,
        /// The process that started the thread: a `fork` of it has none.
        pid: u32,
    }

    /// One clone for the spawner thread to make: pointers into the frame
    /// of a caller that waits until `released` is 0.
    struct Job {
        args: *mut libc::clone_args,
        child: *const ChildArgs,
        /// Where the spawner thread writes a failed clone's `-errno`.
        ret: *const AtomicIsize,
        /// The caller's futex word; see [`FilteringSpawner::clone3`].
        released: *const AtomicU32,
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
            type Key = (usize, usize);
            static SPAWNERS: Mutex<Vec<(Key, Option<&'static FilteringSpawner>)>> =
                Mutex::new(Vec::new());
            let key = (program.as_ptr() as usize, program.len());
            let mut spawners = SPAWNERS.lock().unwrap_or_else(|e| e.into_inner());
            let found = match spawners.iter().find(|(k, _)| *k == key) {
                Some((_, found)) => *found,
                None => {
                    let started = FilteringSpawner::start(program)
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

        fn start(program: &'static [seccompiler::sock_filter]) -> Result<FilteringSpawner, Errno> {
            let (jobs, queue) = mpsc::channel::<Job>();
            let (ready_tx, ready) = mpsc::sync_channel::<Result<(), Errno>>(1);
            std::thread::Builder::new()
                .name("confined-spawn".into())
                .stack_size(128 * 1024)
                .spawn(move || {
                    let setup = filter_this_thread(program);
                    let ok = setup.is_ok();
                    let _ = ready_tx.send(setup);
                    if ok {
                        serve(&queue);
                    }
                })
                .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::AGAIN))?;
            ready.recv().unwrap_or(Err(Errno::CHILD))?;
            Ok(FilteringSpawner {
                jobs,
                pid: std::process::id(),
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
        fn clone3(&self, args: &mut libc::clone_args, child: &ChildArgs) -> isize {
            /// Any value but 0: no child has released the caller yet.
            const WAITING: u32 = u32::MAX;
            let ret = AtomicIsize::new(0);
            let released = AtomicU32::new(WAITING);
            let mut pid: c_int = 0;
            args.flags &= !(libc::CLONE_VFORK as u64);
            args.flags |= (libc::CLONE_CHILD_CLEARTID | libc::CLONE_PARENT_SETTID) as u64;
            args.child_tid = released.as_ptr() as u64;
            args.parent_tid = (&raw mut pid) as u64;
            let job = Job {
                args: ptr::from_mut(args),
                child: ptr::from_ref(child),
                ret: &raw const ret,
                released: &raw const released,
            };
            if self.jobs.send(job).is_err() {
                // The thread is gone (it never exits while the process
                // runs): nothing was cloned.
                return -(libc::EAGAIN as isize);
            }
            while released.load(Ordering::Acquire) != 0 {
                // SAFETY: FUTEX_WAIT reads the word, which lives in this
                // frame, and sleeps while it holds WAITING. Not the private
                // variant: the kernel's wake at mm_release is a shared one
                // (futex(2): a private wait is keyed apart from it).
                unsafe {
                    raw4(
                        libc::SYS_futex as usize,
                        released.as_ptr() as usize,
                        libc::FUTEX_WAIT as usize,
                        WAITING as usize,
                        0,
                    );
                }
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
    fn serve(queue: &mpsc::Receiver<Job>) {
        while let Ok(job) = queue.recv() {
            // SAFETY: the sender waits until `released` is 0, which only
            // the child's exec or exit (or the failure branch below) does,
            // so `args` (with its stack) and `child` (with every pointer in
            // it) stay alive and unchanged for as long as the child uses
            // them; this thread touches none of them after the clone.
            // `child_main` never returns.
            let r = unsafe { clone3(&mut *job.args, child_main, job.child) };
            if r > 0 {
                // The child releases the caller (CLONE_CHILD_CLEARTID): its
                // frame may be gone at any moment.
                continue;
            }
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

    /// Moves `fd` out of 0–2 unless it already sits on `target`, so that
    /// installing one stdio descriptor cannot overwrite the source of
    /// another.
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
        let child = ChildArgs {
            // A child of the spawner thread inherits its no_new_privs.
            no_new_privs: spec.confine.is_some() && filtering.is_none(),
            landlock,
            seccomp: fprog.as_ref().map_or(ptr::null(), ptr::from_ref),
            program: spec.program.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            cwd: spec.cwd.map_or(ptr::null(), CStr::as_ptr),
            stdio: fds,
            new_process_group: spec.new_process_group,
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
        args.pidfd = (&raw mut pidfd) as u64;
        args.exit_signal = libc::SIGCHLD as u64;
        args.stack = lo;
        args.stack_size = size;
        if let Some(cg) = spec.cgroup {
            args.flags |= CLONE_INTO_CGROUP;
            args.cgroup = cg.as_raw_fd() as u64;
        }
        let ret = match filtering {
            Some(worker) => worker.clone3(&mut args, &child),
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
        // The child exec'ed or exited (CLONE_VFORK): nothing uses the stack.
        stack.give_back();
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
        Ok(Spawned { pid, pidfd })
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
