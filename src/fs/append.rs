//! Calls on an append-only file the workspace keeps for itself (its
//! ownership journals): cutting a torn tail, and moving an emptied journal
//! between its request's name and a spare name.

use std::ffi::CStr;
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

/// `renameat2(dir, from, dir, to, RENAME_NOREPLACE)`—Renames `from` to `to`
/// within one directory of the workspace's own, failing with `EEXIST` when
/// anything holds `to` (an emptied journal to or from a spare name: never
/// onto an existing name).
///
/// # Errors
///
/// The call's `errno`.
///
/// # References
///
/// [rename(2)](https://man7.org/linux/man-pages/man2/rename.2.html)
#[doc(alias = "renameat2")]
pub(crate) fn rename_noreplace(dir: BorrowedFd<'_>, from: &CStr, to: &CStr) -> Result<(), Errno> {
    rustix::fs::renameat_with(dir, from, dir, to, rustix::fs::RenameFlags::NOREPLACE)
}
