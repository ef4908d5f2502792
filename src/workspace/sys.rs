//! Descriptor-relative, no-follow filesystem primitives (`cfg(unix)`).
//!
//! Every call here takes a directory descriptor and a single-component name:
//! no path is ever resolved through more than one directory, and no symlink is
//! ever followed (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`, `unlinkat` never
//! follows).

use std::ffi::CStr;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::fs::{self, AtFlags, Mode, OFlags};

#[cfg(target_os = "linux")]
use super::identity::{BirthTime, MountId};
use super::identity::{FileKind, Identity, Observed};

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// `openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)`—Opens
/// a directory without following a symlink.
#[doc(alias = "openat")]
pub(crate) fn open_dir(dir: BorrowedFd<'_>, name: impl rustix::path::Arg) -> io::Result<OwnedFd> {
    Ok(fs::openat(dir, name, DIR_FLAGS, Mode::empty())?)
}

/// `openat(dir, "..", O_DIRECTORY | O_NOFOLLOW)`—Opens the parent directory.
pub(crate) fn open_parent(dir: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    open_dir(dir, c"..")
}

/// `mkdirat(dir, name, mode)`—Creates a directory (fails if `name` exists,
/// symlink or not).
#[doc(alias = "mkdirat")]
pub(crate) fn mkdir(
    dir: BorrowedFd<'_>,
    name: impl rustix::path::Arg,
    mode: u32,
) -> io::Result<()> {
    Ok(fs::mkdirat(dir, name, Mode::from_raw_mode(mode as _))?)
}

/// `openat(dir, name, O_CREAT | O_EXCL | O_NOFOLLOW | O_RDWR | O_CLOEXEC)`—
/// Creates a new regular file; never opens an existing one or a symlink.
#[doc(alias = "openat")]
pub(crate) fn create_file(
    dir: BorrowedFd<'_>,
    name: impl rustix::path::Arg,
    mode: u32,
) -> io::Result<OwnedFd> {
    let flags = OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::RDWR | OFlags::CLOEXEC;
    Ok(fs::openat(
        dir,
        name,
        flags,
        Mode::from_raw_mode(mode as _),
    )?)
}

/// `unlinkat(dir, name, 0)`—Removes a non-directory name (a symlink itself,
/// never its target).
#[doc(alias = "unlinkat")]
pub(crate) fn unlink(dir: BorrowedFd<'_>, name: impl rustix::path::Arg) -> io::Result<()> {
    Ok(fs::unlinkat(dir, name, AtFlags::empty())?)
}

/// `unlinkat(dir, name, AT_REMOVEDIR)`—Removes an empty directory.
#[doc(alias = "unlinkat")]
pub(crate) fn rmdir(dir: BorrowedFd<'_>, name: impl rustix::path::Arg) -> io::Result<()> {
    Ok(fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?)
}

/// Reads the names in `dir` (without `.` and `..`), calling `f` for each.
///
/// Opens its own descriptor on `dir` so the caller's offset is untouched.
pub(crate) fn for_each_name(
    dir: BorrowedFd<'_>,
    mut f: impl FnMut(&CStr) -> Result<(), ()>,
) -> io::Result<Result<(), ()>> {
    let mut d = fs::Dir::read_from(dir)?;
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

fn kind_of(mode: u32) -> FileKind {
    match fs::FileType::from_raw_mode(mode as _) {
        fs::FileType::Directory => FileKind::Dir,
        fs::FileType::RegularFile => FileKind::File,
        fs::FileType::Symlink => FileKind::Symlink,
        _ => FileKind::Special,
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use super::*;
    use rustix::fs::{StatxAttributes, StatxFlags};

    /// `STATX_MNT_ID_UNIQUE` (Linux 6.8); rustix 1.1 has no name for it yet.
    const MNT_ID_UNIQUE: u32 = 0x4000;

    fn mask() -> StatxFlags {
        StatxFlags::TYPE
            | StatxFlags::INO
            | StatxFlags::NLINK
            | StatxFlags::BTIME
            | StatxFlags::MNT_ID
            | StatxFlags::from_bits_retain(MNT_ID_UNIQUE)
    }

    pub(super) fn observe_fd(fd: BorrowedFd<'_>) -> io::Result<Observed> {
        statx(fd, c"", AtFlags::EMPTY_PATH)
    }

    pub(super) fn observe_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Observed> {
        statx(dir, name, AtFlags::empty())
    }

    fn statx(dir: BorrowedFd<'_>, name: &CStr, flags: AtFlags) -> io::Result<Observed> {
        let flags = flags | AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT;
        let s = fs::statx(dir, name, flags, mask())?;
        let got = StatxFlags::from_bits_retain(s.stx_mask);
        let mount = if got.contains(StatxFlags::from_bits_retain(MNT_ID_UNIQUE)) {
            Some(MountId::Unique(s.stx_mnt_id))
        } else if got.contains(StatxFlags::MNT_ID) {
            Some(MountId::Reusable(s.stx_mnt_id))
        } else {
            None
        };
        let btime = got.contains(StatxFlags::BTIME).then_some(BirthTime {
            sec: s.stx_btime.tv_sec,
            nsec: s.stx_btime.tv_nsec,
        });
        let mount_root = s.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT)
            && s.stx_attributes.contains(StatxAttributes::MOUNT_ROOT);
        Ok(Observed {
            identity: Identity {
                dev: (u64::from(s.stx_dev_major) << 32) | u64::from(s.stx_dev_minor),
                ino: s.stx_ino,
                mount,
                btime,
            },
            kind: kind_of(u32::from(s.stx_mode)),
            mount_root,
            nlink: u64::from(s.stx_nlink),
        })
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;

    // No statx: device and inode only; a mount root shows as a device change
    // (bind mounts of the same filesystem cannot be told apart here).
    pub(super) fn observe_fd(fd: BorrowedFd<'_>) -> io::Result<Observed> {
        Ok(from_stat(&fs::fstat(fd)?))
    }

    pub(super) fn observe_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Observed> {
        Ok(from_stat(&fs::statat(
            dir,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
        )?))
    }

    #[allow(clippy::unnecessary_cast)] // field widths differ between platforms
    fn from_stat(s: &fs::Stat) -> Observed {
        Observed {
            identity: Identity {
                dev: s.st_dev as u64,
                ino: s.st_ino as u64,
                mount: None,
                btime: None,
            },
            kind: kind_of(s.st_mode as u32),
            mount_root: false,
            nlink: s.st_nlink as u64,
        }
    }
}

/// `statx(fd, "", AT_EMPTY_PATH)`—Observes the inode `fd` refers to.
#[doc(alias = "statx")]
pub(crate) fn observe_fd(fd: BorrowedFd<'_>) -> io::Result<Observed> {
    imp::observe_fd(fd)
}

/// `statx(dir, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT)`—Observes an
/// entry without following it.
#[doc(alias = "statx")]
pub(crate) fn observe_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Observed> {
    imp::observe_at(dir, name)
}
