//! The syscalls the driver needs, through rustix (no `unsafe`).
//!
//! Everything here is small and platform-gated: pinning the root with a
//! pidfd, observing its exit without reaping it, signalling its group, and
//! scanning `/proc` for live group members.

use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::{AsFd, OwnedFd};

#[cfg(unix)]
use rustix::process::{Pid, Signal as RSignal};

#[cfg(unix)]
use super::effects::Order;
use crate::machine::process::{ExitStatus, Signal};

/// What came of a group signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// `kill` succeeded.
    Delivered,
    /// `ESRCH`: nobody left in the group.
    NoSuchProcess,
    /// Another error.
    Failed,
}

/// `killpg(pgid, sig)`—Sends the order's signal to every member of its
/// process group; an [`Order`] is made only by
/// [`Effects`](super::effects::Effects), which checks it against the
/// machine's decisions and is the only caller.
///
/// # References
///  - [POSIX](https://pubs.opengroup.org/onlinepubs/9799919799/functions/killpg.html)
///  - [Linux](https://man7.org/linux/man-pages/man3/killpg.3.html)
#[doc(alias = "killpg")]
#[cfg(unix)]
pub(crate) fn signal_group(order: &Order) -> Delivery {
    let Some(pid) = i32::try_from(order.pgid()).ok().and_then(Pid::from_raw) else {
        return Delivery::Failed;
    };
    let sig = match order.signal() {
        Signal::Term => RSignal::TERM,
        Signal::Kill => RSignal::KILL,
        Signal::Int => RSignal::INT,
    };
    match rustix::process::kill_process_group(pid, sig) {
        Ok(()) => Delivery::Delivered,
        Err(rustix::io::Errno::SRCH) => Delivery::NoSuchProcess,
        Err(_) => Delivery::Failed,
    }
}

/// `pidfd_open(pid, 0)`—Opens a descriptor that refers to the process
/// `pid` and becomes readable when it exits.
///
/// The caller must hold `pid` unreaped (it is our own child and nobody else
/// waits for it), so the pid cannot have been reused.
///
/// # Errors
///
/// `ENOSYS` on kernels before 5.3, `ESRCH` if the process is gone.
///
/// # References
///  - [Linux](https://man7.org/linux/man-pages/man2/pidfd_open.2.html)
#[cfg(target_os = "linux")]
pub(crate) fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    Ok(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// Registers a pidfd with the current tokio reactor (readable = exited).
///
/// # Errors
///
/// If the reactor refuses the descriptor: the descriptor, with why.
#[cfg(target_os = "linux")]
pub(crate) fn register_pidfd(
    fd: OwnedFd,
) -> Result<tokio::io::unix::AsyncFd<OwnedFd>, (OwnedFd, io::Error)> {
    // `AsyncFd::try_with_interest` is deprecated because a generic `T` may
    // hand out a different descriptor later; an `OwnedFd` owns exactly one
    // descriptor for the whole lifetime of the `AsyncFd`, which is the
    // invariant the unsafe replacement asks for. Using it keeps this crate
    // free of unsafe. Unlike `with_interest` it gives the descriptor back
    // on failure: the process behind it can still be killed and reaped.
    #[allow(deprecated)]
    tokio::io::unix::AsyncFd::try_with_interest(fd, tokio::io::Interest::READABLE)
        .map_err(|e| e.into_parts())
}

/// `waitid(P_PIDFD, fd, WEXITED | WNOWAIT | WNOHANG)`—Reports the exit of
/// the process behind `fd` **without reaping it**, so its pid (and the id
/// of the group it leads) stays reserved until [`reap_pidfd`].
///
/// Returns `None` while the process runs.
///
/// # Errors
///
/// As `waitid(2)`.
///
/// # References
///  - [Linux](https://man7.org/linux/man-pages/man2/waitid.2.html)
#[doc(alias = "waitid")]
#[cfg(target_os = "linux")]
pub(crate) fn peek_exit(fd: &impl AsFd) -> io::Result<Option<ExitStatus>> {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    let status = waitid(
        WaitId::PidFd(fd.as_fd()),
        WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG,
    )?;
    Ok(status.and_then(|s| {
        if let Some(code) = s.exit_status() {
            Some(ExitStatus::Code(code))
        } else {
            s.terminating_signal().map(ExitStatus::Signal)
        }
    }))
}

/// `waitid(P_PIDFD, fd, WEXITED [| WNOHANG])`—Reaps the process behind
/// `fd` (our own child). With `block` false, returns `false` at once if it
/// has not exited yet; with `block` true, waits for it.
///
/// # Errors
///
/// As `waitid(2)` (`ECHILD` if it was already reaped).
///
/// # References
///  - [Linux](https://man7.org/linux/man-pages/man2/waitid.2.html)
#[doc(alias = "waitid")]
#[cfg(target_os = "linux")]
pub(crate) fn reap_pidfd(fd: &impl AsFd, block: bool) -> io::Result<bool> {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    let mut opts = WaitIdOptions::EXITED;
    if !block {
        opts |= WaitIdOptions::NOHANG;
    }
    Ok(waitid(WaitId::PidFd(fd.as_fd()), opts)?.is_some())
}

/// The result of one scan of `/proc` for a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GroupScan {
    /// No live process in the group besides `except`.
    Empty,
    /// At least one live member besides `except`.
    Occupied,
    /// `/proc` could not be read, or a member's state could not.
    Unknown,
    /// Every pass was empty, but tasks were created during each one, so
    /// none can be trusted ([`scan_group_stable`]); worth retrying.
    Unstable,
}

/// The fields of `/proc/<pid>/stat` the scans need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stat {
    /// The state letter (`R`, `S`, `Z`, ...).
    pub(crate) state: u8,
    /// The parent's pid (the thread group of `real_parent`).
    pub(crate) ppid: u32,
    /// The process group.
    pub(crate) pgrp: u32,
    /// `num_threads`: the live threads plus a zombie leader not yet released.
    pub(crate) threads: u32,
}

impl Stat {
    /// Whether the process can still run code. A zombie leader whose
    /// other threads still run (`pthread_exit` in `main`) reads `Z` but
    /// counts its leader in `num_threads`, so more than one thread means
    /// alive.
    pub(crate) fn live(&self) -> bool {
        match self.state {
            b'X' | b'x' => false,
            b'Z' => self.threads > 1,
            _ => true,
        }
    }
}

/// What reading one process's `stat` gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StatRead {
    /// `ENOENT`/`ESRCH` or an empty read: the process is gone.
    Gone,
    /// Any other failure (`EACCES` under `hidepid=noaccess`, garbage).
    Unreadable,
    /// The fields.
    Stat(Stat),
}

/// Calls `f(proc_fd, pid)` for every process listed in `/proc` until it
/// returns `true`.
///
/// `getdents64` on `/proc` walks the pid table in numeric order from a
/// cursor kept in the file offset, so a process that exists for the whole
/// listing is always listed; one born during the listing is missed when
/// its pid is below the cursor, which is why [`scan_group_stable`]
/// brackets a listing with [`fork_witness`].
///
/// # Errors
///
/// If `/proc` cannot be opened or listed.
#[cfg(target_os = "linux")]
fn each_pid(mut f: impl FnMut(&OwnedFd, u32) -> bool) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags, RawDir};
    let proc_fd = rustix::fs::open(
        "/proc",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    // Large enough for a few thousand entries per `getdents64`: listing
    // `/proc` costs the kernel per entry, the syscalls should not add to it.
    let mut buf = Vec::with_capacity(32 * 1024);
    let mut dir = RawDir::new(&proc_fd, buf.spare_capacity_mut());
    while let Some(entry) = dir.next() {
        let entry = entry?;
        let Some(pid) = std::str::from_utf8(entry.file_name().to_bytes())
            .ok()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if f(&proc_fd, pid) {
            break;
        }
    }
    Ok(())
}

/// Reads `<proc_fd>/<pid>/stat` into a stack buffer: three syscalls, no
/// allocation.
#[cfg(target_os = "linux")]
fn read_stat(proc_fd: &OwnedFd, pid: u32) -> StatRead {
    use rustix::fs::{Mode, OFlags, openat};
    use rustix::io::Errno;
    use std::io::Write;
    // "<pid>/stat\0": a u32 has at most 10 digits.
    let mut path = [0u8; 32];
    let len = {
        let mut w = &mut path[..];
        if write!(w, "{pid}/stat\0").is_err() {
            return StatRead::Unreadable;
        }
        32 - w.len()
    };
    let Ok(cpath) = std::ffi::CStr::from_bytes_with_nul(&path[..len]) else {
        return StatRead::Unreadable;
    };
    let gone = |e: Errno| {
        if e == Errno::NOENT || e == Errno::SRCH {
            StatRead::Gone
        } else {
            StatRead::Unreadable
        }
    };
    let fd = match openat(
        proc_fd,
        cpath,
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => return gone(e),
    };
    // The fields we need (up to `num_threads`, the 20th) follow the pid
    // and the command name (at most 16 bytes), well inside the first read.
    let mut buf = [0u8; 1024];
    match rustix::io::read(&fd, &mut buf) {
        Ok(0) => StatRead::Gone,
        Ok(n) => parse_stat(&buf[..n]).map_or(StatRead::Unreadable, StatRead::Stat),
        Err(e) => gone(e),
    }
}

/// Scans `/proc` once for a live process whose process group is `pgid`,
/// other than `except` (the held root).
///
/// Each listed process costs one `getpgid` (no file opened, no text
/// formatted by the kernel); only a process found in the group has its
/// `stat` read, to tell a live member (a zombie leader with live threads
/// included) from a dead one. A member whose `stat` cannot be read makes
/// the answer [`GroupScan::Unknown`]: invisible is not absent.
#[cfg(target_os = "linux")]
pub(crate) fn scan_group(pgid: u32, except: u32) -> GroupScan {
    let mut found = false;
    let mut unreadable = false;
    let scanned = each_pid(|proc_fd, pid| {
        match member(proc_fd, pid, pgid, except) {
            Member::Live => found = true,
            Member::Unreadable => unreadable = true,
            Member::No => {}
        }
        found
    });
    match (scanned, found, unreadable) {
        (_, true, _) => GroupScan::Occupied,
        (Ok(()), false, false) => GroupScan::Empty,
        _ => GroupScan::Unknown,
    }
}

/// Whether one pid is a live member of group `pgid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Member {
    /// A live member.
    Live,
    /// In the group, but its `stat` cannot be read.
    Unreadable,
    /// Not in the group, gone, dead, or `except`.
    No,
}

/// `getpgid(pid)`, then, for a member, its `stat`.
#[cfg(target_os = "linux")]
fn member(proc_fd: &OwnedFd, pid: u32, pgid: u32, except: u32) -> Member {
    if pid == except {
        return Member::No;
    }
    let Ok(raw) = i32::try_from(pid) else {
        return Member::No;
    };
    // Kernel threads are in group 0: `nix` takes that, not rustix.
    let in_group = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(raw)))
        .is_ok_and(|g| i64::from(g.as_raw()) == i64::from(pgid));
    if !in_group {
        return Member::No;
    }
    match read_stat(proc_fd, pid) {
        StatRead::Gone => Member::No,
        StatRead::Unreadable => Member::Unreadable,
        StatRead::Stat(st) if st.pgrp == pgid && st.live() => Member::Live,
        StatRead::Stat(_) => Member::No,
    }
}

/// Portable stand-in: no `/proc` to scan.
#[cfg(not(target_os = "linux"))]
pub(crate) fn scan_group(_pgid: u32, _except: u32) -> GroupScan {
    GroupScan::Unknown
}

/// How many passes [`scan_group_stable`] runs before it answers
/// [`GroupScan::Unstable`].
pub(crate) const STABLE_ATTEMPTS: u32 = 8;

/// Scans the group until an empty answer can be trusted.
///
/// # Why an empty scan needs a witness
///
/// One listing of `/proc` followed by a `getpgid` per pid is not a
/// snapshot. A member may fork and exit while the listing runs, and its
/// child may be born behind the listing's cursor — after a pid
/// wraparound, or because the child's pid was allocated but not yet
/// attached when the listing passed its slot — so nobody live is seen
/// although a member lives (a test below makes a single pass miss such a
/// "walking" member in 10–40 % of passes).
///
/// So a pass is bracketed by the kernel's count of created tasks
/// ([`fork_witness`], `total_forks`, incremented in the same critical
/// section that makes a new task visible). If it did not move, no task
/// became visible during the pass, so every process alive at its end was
/// visible for all of it; `getdents` on `/proc` walks the pid table in
/// numeric order from a cursor, so each was listed and checked, and a
/// member that stayed in the group was seen. If it moved, the pass proves
/// nothing: scan again, at most [`STABLE_ATTEMPTS`] passes, then answer
/// [`GroupScan::Unstable`] (the caller may retry later; it is never
/// "empty"). The counter is host-wide, so unrelated forks move it too;
/// that costs retries, never soundness. Pid numbers are not used at all,
/// so wraparound does not matter.
///
/// What it cannot see: a process that leaves the group during the scan
/// (`setsid`, `setpgid`); the group tier never claims to see those.
#[cfg(target_os = "linux")]
pub(crate) fn scan_group_stable(pgid: u32, except: u32) -> GroupScan {
    stable(
        || {
            // Start each pass on a fresh time slice: a pass that is not
            // preempted is short, so the counter moves less often during
            // it on a busy host. (A hint only; soundness never depends on
            // it.)
            std::thread::yield_now();
            scan_group(pgid, except)
        },
        fork_witness,
    )
}

/// The retry logic of [`scan_group_stable`], over any pass and witness: an
/// answer other than `Empty` is final at once; `Empty` only from a pass
/// with the witness equal before and after; an unreadable witness is
/// `Unknown`.
pub(crate) fn stable(
    mut pass: impl FnMut() -> GroupScan,
    mut witness: impl FnMut() -> Option<u64>,
) -> GroupScan {
    for _ in 0..STABLE_ATTEMPTS {
        let Some(before) = witness() else {
            return GroupScan::Unknown;
        };
        match pass() {
            GroupScan::Empty => {}
            other => return other,
        }
        match witness() {
            None => return GroupScan::Unknown,
            Some(after) if after == before => return GroupScan::Empty,
            Some(_) => {}
        }
    }
    GroupScan::Unstable
}

/// Portable stand-in: no `/proc` to scan.
#[cfg(not(target_os = "linux"))]
pub(crate) fn scan_group_stable(_pgid: u32, _except: u32) -> GroupScan {
    GroupScan::Unknown
}

/// The number of tasks (processes and threads) created since boot: the
/// `processes` line of `/proc/stat`, the kernel's `total_forks`, which
/// `copy_process` increments under `tasklist_lock` together with attaching
/// the new task's pids. Monotonic and host-wide. `None` if it cannot be
/// read (e.g. `/proc` mounted with `subset=pid`).
///
/// # References
///  - [proc_stat(5)](https://man7.org/linux/man-pages/man5/proc_stat.5.html)
#[cfg(target_os = "linux")]
pub(crate) fn fork_witness() -> Option<u64> {
    parse_processes(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// The value of the `processes` line of a `/proc/stat` text.
pub(crate) fn parse_processes(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("processes "))?
        .trim()
        .parse()
        .ok()
}

/// Whether `/proc` may hide processes from this one, so that a scan that
/// sees nothing proves nothing.
///
/// Signs, any of which is enough:
/// - a `proc` mount on `/proc` with `hidepid=` other than `0`/`off`
///   (`noaccess`, `invisible`, `ptraceable`) or with `subset=` (as
///   systemd's `ProtectProc=`/`ProcSubset=` set them), read from the
///   mount and super options in `/proc/self/mountinfo`;
/// - `/proc/self` does not name this process (a `/proc` of another pid
///   namespace);
/// - `known`, a process this one holds unreaped, has no readable `stat`.
///
/// Answers `true` (restricted) when `mountinfo` cannot be read.
#[cfg(target_os = "linux")]
pub(crate) fn proc_restricted(known: u32) -> bool {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return true;
    };
    if mountinfo_restricts_proc(&mountinfo) {
        return true;
    }
    let me = std::process::id().to_string();
    if std::fs::read_link("/proc/self").ok().as_deref() != Some(std::path::Path::new(&me)) {
        return true;
    }
    let stat = std::fs::read(format!("/proc/{known}/stat"))
        .ok()
        .and_then(|s| parse_stat(&s));
    stat.is_none_or(|st| st.pgrp != known)
}

/// Portable stand-in: there is no `/proc` to trust.
#[cfg(not(target_os = "linux"))]
pub(crate) fn proc_restricted(_known: u32) -> bool {
    true
}

/// Whether a `mountinfo` text shows a `proc` mount on `/proc` whose
/// options hide processes (`hidepid=` other than `0`/`off`, or any
/// `subset=`). Every `proc` mount on `/proc` counts, stacked ones
/// included, so the answer errs on the side of "restricted".
pub(crate) fn mountinfo_restricts_proc(mountinfo: &str) -> bool {
    mountinfo.lines().any(|line| {
        let Some((mount, sup)) = line.split_once(" - ") else {
            return false;
        };
        let mut m = mount.split(' ');
        let mount_point = m.nth(4);
        let mount_opts = m.next().unwrap_or("");
        let mut s = sup.split(' ');
        let fstype = s.next();
        let super_opts = s.nth(1).unwrap_or("");
        if fstype != Some("proc") || mount_point != Some("/proc") {
            return false;
        }
        mount_opts
            .split(',')
            .chain(super_opts.split(','))
            .any(|opt| match opt.split_once('=') {
                Some(("hidepid", v)) => !matches!(v, "0" | "off"),
                Some(("subset", _)) => true,
                _ => false,
            })
    })
}

/// Parses a `/proc/<pid>/stat` line: `pid (comm) state ppid pgrp ...
/// num_threads ...`. The command name may itself hold spaces and
/// parentheses, so the fields start after the *last* `)`.
pub(crate) fn parse_stat(stat: &[u8]) -> Option<Stat> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    // Fields 6..=19 (session .. nice), then num_threads (20).
    let threads = fields.nth(14)?.parse().ok()?;
    Some(Stat {
        state,
        ppid,
        pgrp,
        threads,
    })
}

/// One pass over this process's children, found by scanning `/proc`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Children {
    /// Live children (zombie leaders with live threads included).
    pub(crate) live: Vec<u32>,
    /// Dead children not yet reaped.
    pub(crate) zombies: Vec<u32>,
}

/// The children of this process, found by scanning `/proc`. `None` if
/// `/proc` cannot be read or some process's `stat` cannot.
#[cfg(target_os = "linux")]
pub(crate) fn own_children() -> Option<Children> {
    let me = std::process::id();
    let mut out = Children::default();
    let mut unreadable = false;
    each_pid(|proc_fd, pid| {
        match read_stat(proc_fd, pid) {
            StatRead::Stat(st) if st.ppid == me => {
                if st.live() {
                    out.live.push(pid);
                } else {
                    out.zombies.push(pid);
                }
            }
            StatRead::Stat(_) | StatRead::Gone => {}
            StatRead::Unreadable => unreadable = true,
        }
        false
    })
    .ok()?;
    (!unreadable).then_some(out)
}

/// `pidfd_send_signal(pidfd, SIGKILL)`—Kills the process behind `fd` (an
/// isolated root: the pid namespace's init, with which the namespace
/// dies), for a `KILL` [`Order`]; through
/// [`Effects`](super::effects::Effects) only.
///
/// # Errors
///
/// `ESRCH` once the process exited.
///
/// # References
///  - [Linux](https://man7.org/linux/man-pages/man2/pidfd_send_signal.2.html)
#[doc(alias = "pidfd_send_signal")]
#[cfg(target_os = "linux")]
pub(crate) fn pidfd_kill(order: &Order, fd: std::os::fd::BorrowedFd<'_>) -> rustix::io::Result<()> {
    debug_assert_eq!(order.signal(), Signal::Kill);
    rustix::process::pidfd_send_signal(fd, RSignal::KILL)
}

/// `kill(pid, sig)`—Sends the order's signal to one process. Only used on
/// our own unreaped children (the subreaper tier's adopted descendants),
/// whose pid cannot have been reused; through
/// [`Effects`](super::effects::Effects) only.
///
/// # References
///  - [POSIX](https://pubs.opengroup.org/onlinepubs/9799919799/functions/kill.html)
#[doc(alias = "kill")]
#[cfg(target_os = "linux")]
pub(crate) fn signal_process(order: &Order, pid: u32) -> Delivery {
    let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return Delivery::Failed;
    };
    let sig = match order.signal() {
        Signal::Term => RSignal::TERM,
        Signal::Kill => RSignal::KILL,
        Signal::Int => RSignal::INT,
    };
    match rustix::process::kill_process(p, sig) {
        Ok(()) => Delivery::Delivered,
        Err(rustix::io::Errno::SRCH) => Delivery::NoSuchProcess,
        Err(_) => Delivery::Failed,
    }
}

/// `waitpid(pid, WNOHANG)`—Reaps our child `pid` if it has exited.
#[doc(alias = "waitpid")]
#[cfg(target_os = "linux")]
pub(crate) fn reap_child(pid: u32) {
    if let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = rustix::process::waitpid(Some(p), rustix::process::WaitOptions::NOHANG);
    }
}

/// `prctl(PR_SET_CHILD_SUBREAPER, 1)`—Makes the calling process adopt
/// orphaned descendants instead of `init`.
///
/// # Errors
///
/// As `prctl(2)`.
#[doc(alias = "PR_SET_CHILD_SUBREAPER")]
#[cfg(target_os = "linux")]
pub(crate) fn become_subreaper() -> io::Result<()> {
    Ok(rustix::process::set_child_subreaper(Some(
        rustix::process::getpid(),
    ))?)
}

#[cfg(test)]
mod tests {
    use super::{Stat, mountinfo_restricts_proc, parse_stat};

    /// A `stat` line with `state`, `ppid`, `pgrp` and `num_threads`; the
    /// fields between are real values from a sleeping shell.
    fn line(comm: &str, state: char, ppid: u32, pgrp: u32, threads: u32) -> Vec<u8> {
        format!(
            "4242 ({comm}) {state} {ppid} {pgrp} 77 34816 77 4194304 126 0 0 0 0 0 0 0 20 0 {threads} 0 1234 5 6\n"
        )
        .into_bytes()
    }

    #[test]
    fn stat_with_a_hostile_command_name_parses_after_the_last_paren() {
        let st = parse_stat(&line("a) b) Z 9 (x", 'R', 1, 77, 1)).unwrap();
        assert_eq!(
            st,
            Stat {
                state: b'R',
                ppid: 1,
                pgrp: 77,
                threads: 1
            }
        );
        assert_eq!(parse_stat(b"garbage"), None);
        assert_eq!(parse_stat(b"1 (x) S 0 notanumber"), None);
        // Truncated before num_threads: unreadable, never "no threads".
        assert_eq!(parse_stat(b"1 (init) S 0 1 1 0"), None);
    }

    #[test]
    fn a_zombie_leader_with_live_threads_is_alive() {
        let st = |s, t| parse_stat(&line("x", s, 1, 7, t)).unwrap();
        assert!(st('S', 1).live());
        assert!(st('R', 3).live());
        assert!(!st('Z', 1).live(), "a plain zombie is dead");
        assert!(st('Z', 2).live(), "leader exited, a thread runs");
        assert!(!st('X', 1).live());
    }

    #[test]
    fn empty_is_trusted_only_from_a_pass_during_which_nothing_was_created() {
        use super::{GroupScan, STABLE_ATTEMPTS, stable};
        use std::cell::Cell;
        let passes = Cell::new(0);
        let pass = || {
            passes.set(passes.get() + 1);
            GroupScan::Empty
        };
        // Quiet host: one pass.
        assert_eq!(stable(pass, || Some(7)), GroupScan::Empty);
        assert_eq!(passes.replace(0), 1);

        // A task created during every pass (a member forking, or the
        // host): bounded, and never empty.
        let n = Cell::new(0);
        let moving = || {
            n.set(n.get() + 1);
            Some(n.get())
        };
        assert_eq!(stable(pass, moving), GroupScan::Unstable);
        assert_eq!(passes.replace(0), STABLE_ATTEMPTS);

        // Created during the first pass only: the second is trusted.
        let reads = std::cell::RefCell::new(vec![1, 2, 2, 2].into_iter());
        assert_eq!(stable(pass, || reads.borrow_mut().next()), GroupScan::Empty);
        assert_eq!(passes.replace(0), 2);

        // A member seen, or no witness: final at once.
        assert_eq!(stable(|| GroupScan::Occupied, moving), GroupScan::Occupied);
        assert_eq!(stable(pass, || None), GroupScan::Unknown);
        let reads = std::cell::RefCell::new(vec![Some(1), None].into_iter());
        assert_eq!(
            stable(pass, || reads.borrow_mut().next().flatten()),
            GroupScan::Unknown
        );
    }

    /// The real scan against a member that forks continuously (each
    /// process forks once and exits, so the live one is always a new pid):
    /// it is never called empty while the walker runs.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_walking_member_is_never_scanned_empty() {
        use std::os::unix::process::CommandExt;
        // Each `sh` starts the next one in the background and exits: the
        // live member is always a new pid.
        let step = r#"sh -c "$1" x "$1" & exit 0"#;
        let mut child = std::process::Command::new("sh")
            .args(["-c", step, "x", step])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id();
        let _ = child.wait();
        let mut empty = 0;
        let mut occupied = 0;
        let mut plain_empty = 0;
        for _ in 0..50 {
            match super::scan_group_stable(pgid, 0) {
                super::GroupScan::Empty => empty += 1,
                super::GroupScan::Occupied => occupied += 1,
                _ => {}
            }
            if super::scan_group(pgid, 0) == super::GroupScan::Empty {
                plain_empty += 1;
            }
        }
        let g = rustix::process::Pid::from_raw(pgid as i32).unwrap();
        let mut left = super::GroupScan::Unknown;
        for _ in 0..200 {
            let _ = rustix::process::kill_process_group(g, rustix::process::Signal::KILL);
            left = super::scan_group_stable(pgid, 0);
            if left == super::GroupScan::Empty {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        eprintln!("of 50 passes: single missed the walker {plain_empty}, stable saw it {occupied}");
        assert_eq!(
            left,
            super::GroupScan::Empty,
            "the walker outlived the test"
        );
        assert!(
            occupied > 0,
            "the walker never ran: the test proves nothing"
        );
        assert_eq!(empty, 0, "called empty while a member ran");
        assert_eq!(
            left,
            super::GroupScan::Empty,
            "the walker outlived the test"
        );
        assert_eq!(empty, 0, "called empty while a member ran");
    }

    #[test]
    fn the_fork_witness_is_the_processes_line() {
        let stat = "cpu  1 2 3\nintr 5 0 0\nctxt 99\nbtime 1700000000\nprocesses 175991\nprocs_running 2\n";
        assert_eq!(super::parse_processes(stat), Some(175_991));
        assert_eq!(super::parse_processes("cpu 1\n"), None);
        assert_eq!(super::parse_processes("processes x\n"), None);
    }

    #[test]
    fn hidepid_and_subset_on_proc_are_restrictions() {
        let root = "1 0 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n";
        let proc = |opts: &str| format!("{root}22 1 0:21 / /proc rw,nosuid - proc proc {opts}\n");
        assert!(!mountinfo_restricts_proc(&proc("rw")));
        assert!(!mountinfo_restricts_proc(&proc("rw,hidepid=0")));
        assert!(!mountinfo_restricts_proc(&proc("rw,hidepid=off")));
        for bad in [
            "rw,hidepid=invisible",
            "rw,hidepid=2",
            "rw,hidepid=noaccess",
            "rw,hidepid=ptraceable",
            "rw,subset=pid",
            "rw,gid=5,hidepid=1",
        ] {
            assert!(mountinfo_restricts_proc(&proc(bad)), "{bad}");
        }
        // A stacked restricted mount counts even if listed first.
        let stacked = format!(
            "{root}22 1 0:21 / /proc rw - proc proc rw,hidepid=2\n63 22 0:39 / /proc rw - proc proc rw\n"
        );
        assert!(mountinfo_restricts_proc(&stacked));
        // Only proc on /proc: a proc elsewhere, or another fs on /proc, is
        // not this check's business.
        let elsewhere = format!("{root}30 1 0:40 / /mnt/p rw - proc proc rw,hidepid=2\n");
        assert!(!mountinfo_restricts_proc(&elsewhere));
        assert!(!mountinfo_restricts_proc("garbage without separator"));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_plain_proc_is_complete_and_a_foreign_pid_is_a_sign() {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        if mountinfo_restricts_proc(&info) {
            skipped!("this host's /proc is mounted with hidepid/subset");
            return;
        }
        assert!(super::fork_witness().is_some());
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id();
        let complete = !super::proc_restricted(pid);
        // A pid that leads no group (or does not exist) is not visible as
        // the known leader: a sign of a restricted or foreign /proc.
        let foreign = super::proc_restricted(u32::MAX - 1);
        let _ = child.kill();
        let _ = child.wait();
        assert!(complete);
        assert!(foreign);
    }

    /// Kernel threads are in process group 0; the scan must read that
    /// group like any other (rustix's `getpgid` cannot represent it).
    #[cfg(target_os = "linux")]
    #[test]
    fn kernel_threads_in_group_zero_are_seen() {
        // kthreadd is pid 2 wherever kernel threads are visible.
        let visible = std::fs::read("/proc/2/stat")
            .ok()
            .and_then(|s| parse_stat(&s))
            .is_some_and(|st| st.pgrp == 0);
        if !visible {
            skipped!("no kernel threads visible in /proc (pid namespace)");
            return;
        }
        assert_eq!(super::scan_group(0, 0), super::GroupScan::Occupied);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn our_own_group_is_occupied_and_a_fresh_id_is_empty() {
        let me = std::process::id();
        let pgid = rustix::process::getpgrp().as_raw_nonzero().get() as u32;
        assert_eq!(super::scan_group(pgid, 0), super::GroupScan::Occupied);
        // pid_max is at most 2^22: no group can have this id.
        assert_eq!(super::scan_group(u32::MAX - 1, me), super::GroupScan::Empty);
        // The bracketed scan reaches "empty" too (retried: a busy host may
        // keep the task counter moving for a while).
        let reached = (0..200).any(|_| {
            let r = super::scan_group_stable(u32::MAX - 1, me);
            assert_ne!(r, super::GroupScan::Occupied);
            r == super::GroupScan::Empty || {
                std::thread::sleep(std::time::Duration::from_millis(10));
                false
            }
        });
        assert!(reached, "never stable in 200 tries");
    }
}
