//! Calls on an append-only file the workspace keeps for itself (its
//! ownership journals): cutting a torn tail.

use std::os::fd::BorrowedFd;

use rustix::io::Errno;

/// `ftruncate(fd, len)`—Cuts the file to `len` bytes (a journal's torn
/// tail, before appending after its verified prefix).
///
/// # Errors
///
/// The call's `errno`.
///
/// # References
///
/// [ftruncate(2)](https://man7.org/linux/man-pages/man2/ftruncate.2.html)
#[doc(alias = "ftruncate")]
pub(crate) fn truncate(fd: BorrowedFd<'_>, len: u64) -> Result<(), Errno> {
    rustix::fs::ftruncate(fd, len)
}
