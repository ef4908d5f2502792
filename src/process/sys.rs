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

/// `killpg(pgid, sig)`—Sends `sig` to every member of process group `pgid`.
///
/// # References
///  - [POSIX](https://pubs.opengroup.org/onlinepubs/9799919799/functions/killpg.html)
///  - [Linux](https://man7.org/linux/man-pages/man3/killpg.3.html)
#[doc(alias = "killpg")]
#[cfg(unix)]
pub(crate) fn signal_group(pgid: u32, sig: Signal) -> Delivery {
    let Some(pid) = i32::try_from(pgid).ok().and_then(Pid::from_raw) else {
        return Delivery::Failed;
    };
    let sig = match sig {
        Signal::Term => RSignal::TERM,
        Signal::Kill => RSignal::KILL,
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
/// If the reactor refuses the descriptor.
#[cfg(target_os = "linux")]
pub(crate) fn register_pidfd(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // `AsyncFd::new` is deprecated because a generic `T` may hand out a
    // different descriptor later; an `OwnedFd` owns exactly one descriptor
    // for the whole lifetime of the `AsyncFd`, which is the invariant the
    // unsafe replacement asks for. Using it keeps this crate free of unsafe.
    #[allow(deprecated)]
    tokio::io::unix::AsyncFd::with_interest(fd, tokio::io::Interest::READABLE)
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
    /// `/proc` could not be read.
    Unknown,
}

/// Calls `f(proc_fd, pid)` for every process listed in `/proc` until it
/// returns `true`.
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

/// Reads `(state, ppid, pgrp)` from `<proc_fd>/<pid>/stat` into a stack
/// buffer: three syscalls, no allocation. `None` if the process vanished
/// meanwhile (it is gone) or the line cannot be parsed.
#[cfg(target_os = "linux")]
fn read_stat(proc_fd: &OwnedFd, pid: u32) -> Option<(u8, u32, u32)> {
    use rustix::fs::{Mode, OFlags, openat};
    use std::io::Write;
    // "<pid>/stat\0": a u32 has at most 10 digits.
    let mut path = [0u8; 32];
    let len = {
        let mut w = &mut path[..];
        write!(w, "{pid}/stat\0").ok()?;
        32 - w.len()
    };
    let cpath = std::ffi::CStr::from_bytes_with_nul(&path[..len]).ok()?;
    let fd = openat(
        proc_fd,
        cpath,
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    // The fields we need follow the pid and the command name (at most
    // 16 bytes), well inside the first read.
    let mut buf = [0u8; 512];
    let n = rustix::io::read(&fd, &mut buf).ok()?;
    parse_stat(&buf[..n])
}

/// Scans `/proc` for a live (not zombie, not dead) process whose process
/// group is `pgid`, other than `except` (the held root).
///
/// Each listed process costs one `getpgid` (no file opened, no text
/// formatted by the kernel); only a process found in the group has its
/// `stat` read, to tell a live member from a zombie one.
#[cfg(target_os = "linux")]
pub(crate) fn scan_group(pgid: u32, except: u32) -> GroupScan {
    let mut found = false;
    let scanned = each_pid(|proc_fd, pid| {
        if pid == except {
            return false;
        }
        let Ok(raw) = i32::try_from(pid) else {
            return false;
        };
        // Kernel threads are in group 0: `nix` takes that, not rustix.
        let in_group = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(raw)))
            .is_ok_and(|g| i64::from(g.as_raw()) == i64::from(pgid));
        found = in_group
            && read_stat(proc_fd, pid).is_some_and(|(state, _, pgrp)| {
                pgrp == pgid && !matches!(state, b'Z' | b'X' | b'x')
            });
        found
    });
    match (scanned, found) {
        (_, true) => GroupScan::Occupied,
        (Ok(()), false) => GroupScan::Empty,
        (Err(_), false) => GroupScan::Unknown,
    }
}

/// Portable stand-in: no `/proc` to scan.
#[cfg(not(target_os = "linux"))]
pub(crate) fn scan_group(_pgid: u32, _except: u32) -> GroupScan {
    GroupScan::Unknown
}

/// Parses the state, parent and process group out of a `/proc/<pid>/stat`
/// line: `pid (comm) state ppid pgrp ...`. The command name may itself hold
/// spaces and parentheses, so the fields start after the *last* `)`.
pub(crate) fn parse_stat(stat: &[u8]) -> Option<(u8, u32, u32)> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// The children of this process (pid and `/proc` state letter), found by
/// scanning `/proc`. `None` if `/proc` cannot be read.
#[cfg(target_os = "linux")]
pub(crate) fn own_children() -> Option<Vec<(u32, u8)>> {
    let me = std::process::id();
    let mut out = Vec::new();
    each_pid(|proc_fd, pid| {
        if let Some((state, ppid, _)) = read_stat(proc_fd, pid) {
            if ppid == me {
                out.push((pid, state));
            }
        }
        false
    })
    .ok()?;
    Some(out)
}

/// `kill(pid, sig)`—Sends `sig` to one process. Only used on our own
/// unreaped children, whose pid cannot have been reused.
///
/// # References
///  - [POSIX](https://pubs.opengroup.org/onlinepubs/9799919799/functions/kill.html)
#[doc(alias = "kill")]
#[cfg(target_os = "linux")]
pub(crate) fn signal_process(pid: u32, sig: Signal) -> Delivery {
    let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return Delivery::Failed;
    };
    let sig = match sig {
        Signal::Term => RSignal::TERM,
        Signal::Kill => RSignal::KILL,
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
    use super::parse_stat;

    #[test]
    fn stat_with_a_hostile_command_name_parses_after_the_last_paren() {
        let line = b"4242 (a) b) Z 9 (x) R 1 77 77 0 -1\n";
        assert_eq!(parse_stat(line), Some((b'R', 1, 77)));
        assert_eq!(parse_stat(b"1 (init) S 0 1 1 0"), Some((b'S', 0, 1)));
        assert_eq!(parse_stat(b"garbage"), None);
        assert_eq!(parse_stat(b"1 (x) S 0 notanumber"), None);
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
            .is_some_and(|(_, _, pgrp)| pgrp == 0);
        if !visible {
            eprintln!("skipped: no kernel threads visible in /proc (pid namespace)");
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
    }
}
