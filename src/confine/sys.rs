//! The raw system calls of this module: the Landlock version probe, and
//! the two a node uses to see whether a peer is inside a sandbox
//! ([`super::peer`]).

#![allow(
    unsafe_code,
    reason = "the Landlock version probe, SO_PEERPIDFD and pidfd_send_signal have no safe wrapper in the landlock crate, rustix 1.1 or std"
)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`—The
/// highest Landlock ABI the running kernel supports, 0 where Landlock is
/// not built in (`ENOSYS`) or not enabled (`EOPNOTSUPP`).
///
/// # References
///
/// <https://man7.org/linux/man-pages/man2/landlock_create_ruleset.2.html>
#[doc(alias = "landlock_create_ruleset")]
pub(super) fn landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with this flag the kernel reads no attribute (NULL, size 0)
    // and returns a number; no memory is touched.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).unwrap_or(0)
}

/// `getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD)`—A pidfd of the process that
/// connected (or created the pair), recorded by the kernel at `connect`
/// time: unlike the pid of `SO_PEERCRED`, it can never name a later
/// process that reused the number. Linux 6.5; earlier kernels answer
/// `ENOPROTOOPT`.
///
/// # References
///
/// <https://man7.org/linux/man-pages/man7/unix.7.html>
#[doc(alias = "SO_PEERPIDFD")]
pub(super) fn peer_pidfd(socket: &impl AsFd) -> io::Result<OwnedFd> {
    const SO_PEERPIDFD: libc::c_int = 77;
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes (one int) into `fd`,
    // which lives across the call, and the length back into `len`.
    let r = unsafe {
        libc::getsockopt(
            socket.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            std::ptr::from_mut(&mut fd).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    if fd < 0 || len as usize != std::mem::size_of::<libc::c_int>() {
        return Err(io::Error::from_raw_os_error(libc::EPROTO));
    }
    // SAFETY: the kernel just installed `fd` in our table for us alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `pidfd_send_signal(pidfd, 0, NULL, 0)`—Whether the process behind
/// `pidfd` is still alive (signal 0 checks existence and permission only;
/// `EPERM` means alive). A dead process, zombie or reaped, answers `ESRCH`.
#[doc(alias = "pidfd_send_signal")]
pub(super) fn pidfd_alive(pidfd: &impl AsFd) -> io::Result<bool> {
    // SAFETY: no memory is passed (info NULL); the descriptor is borrowed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_fd().as_raw_fd(),
            0,
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    if r == 0 {
        return Ok(true);
    }
    match io::Error::last_os_error() {
        e if e.raw_os_error() == Some(libc::ESRCH) => Ok(false),
        e if e.raw_os_error() == Some(libc::EPERM) => Ok(true),
        e => Err(e),
    }
}
