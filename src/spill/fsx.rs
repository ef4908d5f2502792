//! Descriptor-relative, no-follow filesystem helpers for the spill store and
//! its sweep.
//!
//! Every call here acts on a directory descriptor and a *single* name taken
//! either from `getdents` or from a validated session/file name, so a name
//! never contains `/` and a trailing slash can never turn a no-follow call
//! into a follow. Paths given by a user are walked one component at a time
//! with `O_NOFOLLOW | O_DIRECTORY` ([`open_dir_path`]).

use std::ffi::{CStr, CString, OsStr};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RawDir, StatxAttributes, StatxFlags};
use rustix::io::Errno;

/// What `statx` told us about one inode, reduced to what the trust and
/// identity rules need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) nlink: u32,
    pub(crate) mtime_sec: i64,
    pub(crate) mtime_nsec: u32,
    /// `stx_mnt_id`, when the kernel reports it (Linux ≥ 5.8).
    pub(crate) mnt_id: Option<u64>,
    /// `STATX_ATTR_MOUNT_ROOT`, when the kernel reports it (Linux ≥ 5.8).
    pub(crate) mount_root: Option<bool>,
}

/// The coarse kind of an inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir,
    File,
    Symlink,
    Special,
}

impl Meta {
    pub(crate) fn kind(&self) -> Kind {
        match FileType::from_raw_mode(self.mode) {
            FileType::Directory => Kind::Dir,
            FileType::RegularFile => Kind::File,
            FileType::Symlink => Kind::Symlink,
            _ => Kind::Special,
        }
    }

    /// `(dev, ino)`: the filesystem identity used for de-duplication.
    pub(crate) fn identity(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    /// Same inode on the same mount (the mount id is compared only when the
    /// kernel reported it for both sides).
    pub(crate) fn same_object(&self, other: &Meta) -> bool {
        self.dev == other.dev
            && self.ino == other.ino
            && match (self.mnt_id, other.mnt_id) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }

    /// Whether `self` (a child) lives on the same mount as `parent`: a
    /// mount point — including a bind mount of the same filesystem, which
    /// has the same `dev` — fails this check.
    pub(crate) fn on_mount_of(&self, parent: &Meta) -> bool {
        if self.dev != parent.dev {
            return false;
        }
        if self.mount_root == Some(true) && self.kind() == Kind::Dir {
            return false;
        }
        match (self.mnt_id, parent.mnt_id) {
            (Some(a), Some(b)) => a == b,
            // Without a mount id we cannot see a same-device bind mount;
            // the mount-root attribute above is the remaining fence.
            _ => true,
        }
    }

    /// POSIX trust for a root or session directory: owned by `uid` and not
    /// writable by group or others.
    pub(crate) fn trusted_dir_for(&self, uid: u32) -> Result<(), Untrusted> {
        if self.uid != uid {
            return Err(Untrusted::Owner);
        }
        if self.mode & 0o022 != 0 {
            return Err(Untrusted::Mode);
        }
        Ok(())
    }

    /// Trust for an ancestor: owned by root or `uid`, and either not
    /// writable by group/others or sticky (like `/tmp`).
    pub(crate) fn trusted_ancestor_for(&self, uid: u32) -> Result<(), Untrusted> {
        if self.uid != 0 && self.uid != uid {
            return Err(Untrusted::Ancestor);
        }
        if self.mode & 0o022 != 0 && self.mode & 0o1000 == 0 {
            return Err(Untrusted::Ancestor);
        }
        Ok(())
    }
}

/// Why a directory failed a trust check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Untrusted {
    Owner,
    Mode,
    Ancestor,
}

const STATX_MASK: StatxFlags = StatxFlags::BASIC_STATS.union(StatxFlags::MNT_ID);

fn meta_from(s: rustix::fs::Statx) -> Meta {
    let has_mnt = StatxFlags::from_bits_retain(s.stx_mask).contains(StatxFlags::MNT_ID);
    let root_known = s.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT);
    Meta {
        dev: rustix::fs::makedev(s.stx_dev_major, s.stx_dev_minor),
        ino: s.stx_ino,
        mode: u32::from(s.stx_mode),
        uid: s.stx_uid,
        nlink: s.stx_nlink,
        mtime_sec: s.stx_mtime.tv_sec,
        mtime_nsec: s.stx_mtime.tv_nsec,
        mnt_id: has_mnt.then_some(s.stx_mnt_id),
        mount_root: root_known.then(|| s.stx_attributes.contains(StatxAttributes::MOUNT_ROOT)),
    }
}

/// `statx(dir, name, AT_SYMLINK_NOFOLLOW)`: the entry itself, never what a
/// symlink points to.
pub(crate) fn stat_at(dir: BorrowedFd<'_>, name: &CStr) -> Result<Meta, Errno> {
    rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK).map(meta_from)
}

/// `statx(fd, "", AT_EMPTY_PATH)`: the open descriptor.
pub(crate) fn stat_fd(fd: BorrowedFd<'_>) -> Result<Meta, Errno> {
    rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, STATX_MASK).map(meta_from)
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// `openat(dir, name, O_DIRECTORY | O_NOFOLLOW)`: fails with `ELOOP` or
/// `ENOTDIR` on a symlink and never opens a FIFO or a device (`O_DIRECTORY`
/// makes the lookup itself require a directory).
pub(crate) fn open_dir_at(dir: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty())
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

/// Opens an absolute, normalized directory path one component at a time
/// with `O_NOFOLLOW | O_DIRECTORY`, checking every ancestor against
/// [`Meta::trusted_ancestor_for`]. Returns the parent descriptor, the final
/// name and the directory descriptor.
///
/// `Path::components` drops a trailing slash before anything reaches the
/// kernel, so `link/` is opened as `link` with `O_NOFOLLOW` and fails.
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
            Component::RootDir => {}
            Component::Normal(n) => names.push(cstring(n).ok_or(WalkError::NotNormal)?),
            Component::CurDir => {}
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
    pub(crate) kind: Option<Kind>,
}

/// Lists `dir` with `getdents64` into a reusable buffer, skipping `.` and
/// `..`. The listing is taken whole before anything is unlinked, so
/// removals never disturb the directory stream.
pub(crate) fn list(
    dir: BorrowedFd<'_>,
    buf: &mut [MaybeUninit<u8>],
    out: &mut Vec<Entry>,
) -> Result<(), Errno> {
    out.clear();
    // `RawDir` reads from the descriptor's current offset; a fresh `openat`
    // descriptor starts at 0, and each directory is listed once.
    let mut raw = RawDir::new(dir, buf);
    while let Some(entry) = raw.next() {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let kind = match entry.file_type() {
            FileType::Directory => Some(Kind::Dir),
            FileType::RegularFile => Some(Kind::File),
            FileType::Symlink => Some(Kind::Symlink),
            FileType::Unknown => None,
            _ => Some(Kind::Special),
        };
        out.push(Entry {
            name: name.to_owned(),
            ino: entry.ino(),
            kind,
        });
    }
    Ok(())
}

/// `unlinkat(dir, name, flags)`.
pub(crate) fn unlink_at(dir: BorrowedFd<'_>, name: &CStr, rmdir: bool) -> Result<(), Errno> {
    let flags = if rmdir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    rustix::fs::unlinkat(dir, name, flags)
}

/// Renders bytes of a name for humans and JSON without losing anything:
/// valid UTF-8 stays as is except control characters and `\`, which are
/// escaped; invalid bytes become `\xNN`.
pub(crate) fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for ch in chunk.valid().chars() {
            match ch {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => out.extend(c.escape_default()),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// [`escape_bytes`] for a path.
pub(crate) fn escape_path(path: &Path) -> String {
    escape_bytes(path.as_os_str().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_keeps_newlines_and_invalid_bytes_visible() {
        assert_eq!(escape_bytes(b"a\nb\xffc\\"), "a\\nb\\xffc\\\\");
        assert_eq!(escape_bytes("é".as_bytes()), "é");
    }

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
}
