//! Whether the peer of a Unix socket is inside a sandbox: in another user
//! namespace than this process.
//!
//! # Why
//!
//! An isolated tool sees the host's tree read-only, and on a kernel whose
//! Landlock cannot scope pathname Unix sockets (ABI < 9) a socket outside
//! the view's private trees stays connectable: connecting needs write
//! permission on the socket's inode, which a read-only mount does not take
//! away, and the tool's uid is its launcher's. A `custodian node --socket`
//! is such a socket, and one without `--policy` launches whatever it is
//! sent, unconfined. So the node asks who connected: every confined launch
//! runs in a user namespace of its own (`docs/contracts/confinement.md`,
//! *Isolation*), and a peer in another user namespace than the node's is
//! refused.
//!
//! # How
//!
//! The kernel's record of the connecting process is a pidfd
//! (`SO_PEERPIDFD`, taken at `connect`), so the answer is about the process
//! that connected, never a later one that reused its pid. Its pid in this
//! process's pid namespace is read from the pidfd's `fdinfo`; the user
//! namespace from `/proc/<pid>/ns/user` (device and inode, compared with
//! `/proc/self/ns/user`); and the pidfd is asked afterwards whether the
//! process is still alive: if it is, the pid named it throughout (a pid is
//! reused only once its process is reaped). A peer that exited, or whose
//! namespace cannot be read, is [`PeerNamespace::Unknown`]: the caller
//! refuses it (fail closed).
//!
//! Where `SO_PEERPIDFD` is missing (Linux before 6.5) the pid of
//! `SO_PEERCRED` is opened with `pidfd_open` instead; the check is then
//! about the process holding that pid a moment after the connect, which a
//! peer could only subvert by exiting and having its pid reused in
//! between (a full cycle of the pid space).

use std::io;
use std::os::fd::AsFd;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
use std::os::fd::{AsRawFd, OwnedFd};
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
use std::os::unix::fs::MetadataExt;

/// Where the peer of a socket runs, as seen by [`peer_namespace`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerNamespace {
    /// In this process's user namespace.
    Same,
    /// In another user namespace (e.g. a custodian sandbox, or a
    /// container).
    Other,
    /// Not known: the peer exited, or its namespace could not be read.
    Unknown,
}

/// Whether the process that connected `socket` (a connected Unix socket)
/// runs in this process's user namespace; see the [module docs](self).
///
/// It takes two descriptors for a moment (the peer's pidfd, and its
/// `fdinfo` while it is read).
///
/// # Errors
///
/// Where `socket` is not a connected Unix socket, where this process's own
/// namespace or its own descriptors cannot be read, and where it is out of
/// descriptors (`EMFILE`, `ENFILE`: a caller at its limit answers as it
/// answers any connection it has no room for); everything about the peer
/// that cannot be established is [`PeerNamespace::Unknown`].
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub fn peer_namespace(socket: &impl AsFd) -> io::Result<PeerNamespace> {
    let ours = std::fs::metadata("/proc/self/ns/user")?;
    let pidfd = match super::sys::peer_pidfd(socket) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => {
            let cred = rustix::net::sockopt::socket_peercred(socket)?;
            match rustix::process::pidfd_open(cred.pid, rustix::process::PidfdFlags::empty()) {
                Ok(fd) => fd,
                Err(_) => return Ok(PeerNamespace::Unknown),
            }
        }
        Err(e) => return Err(e),
    };
    let Some(pid) = pidfd_pid(&pidfd)? else {
        return Ok(PeerNamespace::Unknown);
    };
    let theirs = match std::fs::metadata(format!("/proc/{pid}/ns/user")) {
        Ok(m) => m,
        Err(_) => return Ok(PeerNamespace::Unknown),
    };
    if !super::sys::pidfd_alive(&pidfd).unwrap_or(false) {
        return Ok(PeerNamespace::Unknown);
    }
    Ok(
        if (theirs.dev(), theirs.ino()) == (ours.dev(), ours.ino()) {
            PeerNamespace::Same
        } else {
            PeerNamespace::Other
        },
    )
}

/// Elsewhere no confined tool runs (the launcher refuses a confinement
/// off x86-64 Linux), so every peer is in this namespace.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
pub fn peer_namespace(_socket: &impl AsFd) -> io::Result<PeerNamespace> {
    Ok(PeerNamespace::Same)
}

/// The pid of a pidfd's process in this pid namespace (`Pid:` of its
/// `fdinfo`): `None` when it exited and was reaped (`-1`) or lives in a pid
/// namespace this one cannot see (`0`).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn pidfd_pid(pidfd: &OwnedFd) -> io::Result<Option<u32>> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd()))?;
    Ok(parse_fdinfo_pid(&info))
}

fn parse_fdinfo_pid(info: &str) -> Option<u32> {
    let value = info.lines().find_map(|l| l.strip_prefix("Pid:"))?.trim();
    value.parse::<u32>().ok().filter(|&p| p > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn fdinfo_pid_is_read_and_a_dead_or_foreign_one_is_none() {
        assert_eq!(
            parse_fdinfo_pid("pos:\t0\nflags:\t02000002\nPid:\t4242\nNSpid:\t4242\n"),
            Some(4242)
        );
        assert_eq!(parse_fdinfo_pid("pos:\t0\nPid:\t-1\n"), None);
        assert_eq!(parse_fdinfo_pid("pos:\t0\nPid:\t0\n"), None);
        assert_eq!(parse_fdinfo_pid("pos:\t0\n"), None);
    }

    #[test]
    fn a_pair_made_here_is_in_the_same_namespace() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(peer_namespace(&a).unwrap(), PeerNamespace::Same);
    }

    #[test]
    fn a_socket_that_is_not_unix_is_an_error() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert!(peer_namespace(&c).is_err());
    }
}
