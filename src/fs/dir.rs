//! Opening, creating, listing and unlinking, one name at a time relative to
//! a directory descriptor.

use std::ffi::{CStr, CString, OsStr};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags, RawDir};
use rustix::io::Errno;
use rustix::path::Arg;

use super::stat::{FileKind, stat_fd};

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// `openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)`—Opens
/// a directory without following a symlink.
///
/// `O_DIRECTORY` makes the lookup itself require a directory, so a FIFO or
/// device is never opened.
///
/// # Errors
///
/// `ELOOP` (or `ENOTDIR`) on a symlink, `ENOTDIR` on another non-directory,
/// `ENOENT` when the name is gone.
///
/// # References
///
/// [openat(2)](https://man7.org/linux/man-pages/man2/openat.2.html)
#[doc(alias = "openat")]
pub(crate) fn open_dir_at(dir: BorrowedFd<'_>, name: impl Arg) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty())
}

/// `openat(dir, "..", O_DIRECTORY | O_NOFOLLOW)`—Opens the parent of `dir`.
///
/// # Errors
///
/// The call's `errno`.
///
/// # References
///
/// [openat(2)](https://man7.org/linux/man-pages/man2/openat.2.html)
#[doc(alias = "openat")]
pub(crate) fn open_parent(dir: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
    open_dir_at(dir, c"..")
}

/// `open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)`—Opens a directory named by
/// operator configuration, resolving it normally (symlinks included).
///
/// Only for roots given by the operator; never for a path built from what
/// a request or a directory listing supplied.
///
/// # Errors
///
/// The call's `errno`.
///
/// # References
///
/// [open(2)](https://man7.org/linux/man-pages/man2/open.2.html)
#[doc(alias = "open")]
pub(crate) fn open_configured_dir(path: &Path) -> Result<OwnedFd, Errno> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// `mkdir(path, mode)`—Creates a directory named by operator configuration.
///
/// # Errors
///
/// `EEXIST` if anything (a symlink included) has the name.
///
/// # References
///
/// [mkdir(2)](https://man7.org/linux/man-pages/man2/mkdir.2.html)
#[doc(alias = "mkdir")]
pub(crate) fn mkdir_configured(path: &Path, mode: u32) -> Result<(), Errno> {
    rustix::fs::mkdir(path, Mode::from_raw_mode(mode as _))
}

/// `mkdirat(dir, name, mode)`—Creates a directory; fails if anything (a
/// symlink included) already has the name.
///
/// # Errors
///
/// `EEXIST`, or the call's other `errno`.
///
/// # References
///
/// [mkdirat(2)](https://man7.org/linux/man-pages/man2/mkdirat.2.html)
#[doc(alias = "mkdirat")]
pub(crate) fn mkdir_at(dir: BorrowedFd<'_>, name: impl Arg, mode: u32) -> Result<(), Errno> {
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(mode as _))
}

/// `openat(dir, name, O_CREAT | O_EXCL | O_NOFOLLOW | O_RDWR | O_CLOEXEC)`—
/// Creates a new regular file; never opens an existing one or a symlink.
///
/// # Errors
///
/// `EEXIST` if the name is taken, or the call's other `errno`.
///
/// # References
///
/// [openat(2)](https://man7.org/linux/man-pages/man2/openat.2.html)
#[doc(alias = "openat")]
pub(crate) fn create_file(
    dir: BorrowedFd<'_>,
    name: impl Arg,
    mode: u32,
) -> Result<OwnedFd, Errno> {
    let flags = OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::RDWR | OFlags::CLOEXEC;
    rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(mode as _))
}

/// How [`open_regular`] opens a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// `O_RDONLY`.
    Read,
    /// `O_WRONLY | O_CREAT | O_TRUNC`, mode `0644` for a new file.
    WriteTruncate,
}

/// `openat(dir, name, … | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)`, then
/// `statx(fd)` and `fcntl(fd, F_SETFL, …)`—Opens an existing (or, for
/// [`Access::WriteTruncate`], new) **regular file** without following a
/// symlink and without ever blocking.
///
/// `O_NONBLOCK` makes opening a FIFO return at once (`ENXIO` for a writer
/// without a reader) instead of waiting for a peer; whatever was opened is
/// then checked to be a regular file before it is handed out, and only then
/// is `O_NONBLOCK` cleared so that reads and writes behave normally.
///
/// # Errors
///
/// `ELOOP` on a symlink; `ENXIO` for anything that is not a regular file
/// (a FIFO, socket, device or directory), whether the kernel or the type
/// check refused it.
///
/// # References
///
/// [openat(2)](https://man7.org/linux/man-pages/man2/openat.2.html),
/// [fifo(7)](https://man7.org/linux/man-pages/man7/fifo.7.html),
/// [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html)
#[doc(alias = "openat")]
pub(crate) fn open_regular(
    dir: BorrowedFd<'_>,
    name: impl Arg,
    access: Access,
) -> Result<OwnedFd, Errno> {
    let flags = match access {
        Access::Read => OFlags::RDONLY,
        Access::WriteTruncate => OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC,
    } | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(0o644))?;
    if stat_fd(fd.as_fd())?.kind() != FileKind::File {
        return Err(Errno::NXIO);
    }
    let fl = rustix::fs::fcntl_getfl(fd.as_fd())?;
    rustix::fs::fcntl_setfl(fd.as_fd(), fl - OFlags::NONBLOCK)?;
    Ok(fd)
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)`—Opens a file of
/// the caller's own naming without following a symlink.
///
/// # Errors
///
/// The call's `errno` (`ELOOP` on a symlink).
///
/// # References
///
/// [openat(2)](https://man7.org/linux/man-pages/man2/openat.2.html)
#[doc(alias = "openat")]
pub(crate) fn open_file_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: OFlags,
    mode: u32,
) -> Result<OwnedFd, Errno> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(mode as _))
}

/// `fcntl(fd, F_DUPFD_CLOEXEC, 0)`—Another descriptor of the same open
/// directory (or file), for a second thread of a cleaner.
///
/// # Errors
///
/// `EMFILE` when the process is out of descriptors.
///
/// # References
///
/// [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html)
#[doc(alias = "fcntl")]
pub(crate) fn dup(fd: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
    rustix::io::fcntl_dupfd_cloexec(fd, 0)
}

/// `fchmod(fd, mode)`—Sets the mode of an open inode.
///
/// # Errors
///
/// The call's `errno`.
///
/// # References
///
/// [fchmod(2)](https://man7.org/linux/man-pages/man2/fchmod.2.html)
pub(crate) fn fchmod(fd: BorrowedFd<'_>, mode: u32) -> Result<(), Errno> {
    rustix::fs::fchmod(fd, Mode::from_raw_mode(mode as _))
}

/// `flock(fd, op)`—Takes (or tries to take) an advisory lock.
///
/// # Errors
///
/// `EWOULDBLOCK` for a non-blocking request that would wait.
///
/// # References
///
/// [flock(2)](https://man7.org/linux/man-pages/man2/flock.2.html)
pub(crate) fn flock(fd: BorrowedFd<'_>, op: FlockOperation) -> Result<(), Errno> {
    rustix::fs::flock(fd, op)
}

/// `unlinkat(dir, name, 0)`—Removes a non-directory name (a symlink itself,
/// never its target).
///
/// # Errors
///
/// `ENOENT` when the name is gone, `EISDIR` for a directory.
///
/// # References
///
/// [unlinkat(2)](https://man7.org/linux/man-pages/man2/unlinkat.2.html)
#[doc(alias = "unlinkat")]
pub(crate) fn unlink_at(dir: BorrowedFd<'_>, name: impl Arg) -> Result<(), Errno> {
    rustix::fs::unlinkat(dir, name, AtFlags::empty())
}

/// `unlinkat(dir, name, AT_REMOVEDIR)`—Removes an empty directory.
///
/// # Errors
///
/// `ENOTEMPTY`/`EEXIST` if it holds anything, `ENOENT` when gone, `EBUSY`
/// for a mount point.
///
/// # References
///
/// [unlinkat(2)](https://man7.org/linux/man-pages/man2/unlinkat.2.html)
#[doc(alias = "unlinkat")]
pub(crate) fn rmdir_at(dir: BorrowedFd<'_>, name: impl Arg) -> Result<(), Errno> {
    rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
}

/// Failure while walking a path component by component.
#[derive(Debug)]
pub(crate) enum WalkError {
    /// The path is not absolute or holds a `..` component.
    NotNormal,
    /// A component could not be opened (`ELOOP`/`ENOTDIR` for a symlink).
    Open(Errno),
    /// An ancestor failed the trust rule.
    Ancestor,
}

/// `openat(…, O_NOFOLLOW | O_DIRECTORY)` for each component of an absolute,
/// normalized path, checking every ancestor against
/// [`Stat::trusted_ancestor_for`](super::Stat::trusted_ancestor_for).
/// Returns the parent descriptor, the final name and the directory
/// descriptor.
///
/// `Path::components` drops a trailing slash before anything reaches the
/// kernel, so `link/` is opened as `link` with `O_NOFOLLOW` and fails.
///
/// # Errors
///
/// [`WalkError`].
pub(crate) fn open_dir_path(
    path: &Path,
    uid: u32,
) -> Result<(OwnedFd, CString, OwnedFd), WalkError> {
    if !path.is_absolute() {
        return Err(WalkError::NotNormal);
    }
    let mut names = Vec::new();
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => names.push(cstring(n).ok_or(WalkError::NotNormal)?),
            Component::ParentDir | Component::Prefix(_) => return Err(WalkError::NotNormal),
        }
    }
    let mut cur = rustix::fs::open("/", DIR_FLAGS, Mode::empty()).map_err(WalkError::Open)?;
    let Some((last, ancestors)) = names.split_last() else {
        // The path is `/` itself: its "parent" is itself.
        let again = rustix::fs::open("/", DIR_FLAGS, Mode::empty()).map_err(WalkError::Open)?;
        return Ok((again, c".".to_owned(), cur));
    };
    for name in ancestors {
        let meta = stat_fd(cur.as_fd()).map_err(WalkError::Open)?;
        meta.trusted_ancestor_for(uid)
            .map_err(|_| WalkError::Ancestor)?;
        cur = open_dir_at(cur.as_fd(), name).map_err(WalkError::Open)?;
    }
    let meta = stat_fd(cur.as_fd()).map_err(WalkError::Open)?;
    meta.trusted_ancestor_for(uid)
        .map_err(|_| WalkError::Ancestor)?;
    let dir = open_dir_at(cur.as_fd(), last).map_err(WalkError::Open)?;
    Ok((cur, last.clone(), dir))
}

/// A name as a C string, refusing an interior NUL or a `/`.
pub(crate) fn cstring(name: &OsStr) -> Option<CString> {
    let bytes = name.as_bytes();
    if bytes.contains(&b'/') {
        return None;
    }
    CString::new(bytes).ok()
}

/// One directory entry as listed by `getdents64`.
pub(crate) struct Entry {
    pub(crate) name: CString,
    pub(crate) ino: u64,
    /// `d_type`, when the filesystem fills it in.
    pub(crate) kind: Option<FileKind>,
}

/// `getdents64(dir, …)`—Lists `dir` into a reusable buffer, skipping `.` and
/// `..`.
///
/// The listing is taken whole before anything is unlinked, so removals never
/// disturb the directory stream. `RawDir` reads from the descriptor's
/// current offset: pass a fresh descriptor.
///
/// # Errors
///
/// The call's `errno`.
///
/// # References
///
/// [getdents64(2)](https://man7.org/linux/man-pages/man2/getdents64.2.html)
#[doc(alias = "getdents64")]
pub(crate) fn list(
    dir: BorrowedFd<'_>,
    buf: &mut [MaybeUninit<u8>],
    out: &mut Vec<Entry>,
) -> Result<(), Errno> {
    out.clear();
    let mut raw = RawDir::new(dir, buf);
    while let Some(entry) = raw.next() {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let kind = match entry.file_type() {
            FileType::Directory => Some(FileKind::Dir),
            FileType::RegularFile => Some(FileKind::File),
            FileType::Symlink => Some(FileKind::Symlink),
            FileType::Unknown => None,
            _ => Some(FileKind::Special),
        };
        out.push(Entry {
            name: name.to_owned(),
            ino: entry.ino(),
            kind,
        });
    }
    Ok(())
}

/// `getdents64` on a fresh descriptor of `dir`—Calls `f` with each name in
/// `dir` (without `.` and `..`) until `f` says stop; the caller's offset is
/// untouched.
///
/// # Errors
///
/// The call's `errno`; `Ok(Err(()))` when `f` stopped the listing.
///
/// # References
///
/// [getdents64(2)](https://man7.org/linux/man-pages/man2/getdents64.2.html)
#[doc(alias = "getdents64")]
pub(crate) fn for_each_name(
    dir: BorrowedFd<'_>,
    mut f: impl FnMut(&CStr) -> Result<(), ()>,
) -> Result<Result<(), ()>, Errno> {
    let mut d = rustix::fs::Dir::read_from(dir)?;
    while let Some(entry) = d.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        if f(name).is_err() {
            return Ok(Err(()));
        }
    }
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cstring_refuses_slash_and_nul() {
        assert!(cstring(OsStr::new("a/b")).is_none());
        assert!(cstring(OsStr::from_bytes(b"a\0b")).is_none());
        assert!(cstring(OsStr::new("ok")).is_some());
    }

    #[test]
    fn trailing_slash_does_not_follow_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, tmp.path().join("link")).unwrap();
        let uid = rustix::process::geteuid().as_raw();
        let with_slash = format!("{}/link/", tmp.path().display());
        assert!(matches!(
            open_dir_path(Path::new(&with_slash), uid),
            Err(WalkError::Open(Errno::LOOP | Errno::NOTDIR))
        ));
        assert!(open_dir_path(&real, uid).is_ok());
    }

    #[test]
    fn open_regular_never_blocks_on_a_fifo() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        std::fs::write(tmp.path().join("plain"), b"x").unwrap();
        let dir = open_configured_dir(tmp.path()).unwrap();
        // Without O_NONBLOCK both opens would wait for a peer forever.
        assert_eq!(
            open_regular(dir.as_fd(), "fifo", Access::Read).err(),
            Some(Errno::NXIO)
        );
        assert_eq!(
            open_regular(dir.as_fd(), "fifo", Access::WriteTruncate).err(),
            Some(Errno::NXIO)
        );
        let fd = open_regular(dir.as_fd(), "plain", Access::Read).unwrap();
        let fl = rustix::fs::fcntl_getfl(fd.as_fd()).unwrap();
        assert!(!fl.contains(OFlags::NONBLOCK), "cleared before use");
    }
}
