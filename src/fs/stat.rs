//! `statx` and what it says about an inode: identity, type, owner, mode,
//! link count, mount.

use std::ffi::CStr;
use std::os::fd::BorrowedFd;

use rustix::fs::{AtFlags, FileType, StatxAttributes, StatxFlags};
use rustix::io::Errno;

/// The mount an inode was observed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MountId {
    /// `STATX_MNT_ID_UNIQUE` (Linux 6.8+): never reused while the system runs.
    Unique(u64),
    /// `STATX_MNT_ID` (Linux 5.8+): may be reused after an unmount.
    Reusable(u64),
}

/// A file's birth time as the kernel reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BirthTime {
    /// Seconds since the epoch.
    pub sec: i64,
    /// Nanoseconds.
    pub nsec: u32,
}

/// The identity of one inode, as strong as the platform allows.
///
/// Device and inode number alone are not enough: an inode number is reused
/// as soon as the file is deleted, and a directory renamed away and replaced
/// by a fresh one may receive the very same number. The birth time of the
/// replacement differs, and the mount id tells a bind mount of the same
/// filesystem apart from the original tree although the device is equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    /// Device number, encoded like `st_dev` (`makedev(3)`).
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// The mount the inode was seen on, where the kernel reports one.
    pub mount: Option<MountId>,
    /// The inode's birth time, where the filesystem records one.
    pub btime: Option<BirthTime>,
}

/// The type of a directory entry, as observed without following it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link (never followed).
    Symlink,
    /// A FIFO, socket, or block/character device.
    Special,
}

impl FileKind {
    pub(crate) fn from_mode(mode: u32) -> FileKind {
        match FileType::from_raw_mode(mode as _) {
            FileType::Directory => FileKind::Dir,
            FileType::RegularFile => FileKind::File,
            FileType::Symlink => FileKind::Symlink,
            _ => FileKind::Special,
        }
    }
}

/// A fresh `statx` of one entry, never following a symlink: the part the
/// workspace's identity rules compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observed {
    /// What identifies the inode.
    pub identity: Identity,
    /// Its type.
    pub kind: FileKind,
    /// `STATX_ATTR_MOUNT_ROOT`: the entry is the root of a mount.
    pub mount_root: bool,
    /// Hard link count.
    pub nlink: u64,
}

/// Everything one `statx` call reports that a cleaner uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) nlink: u64,
    pub(crate) mtime_sec: i64,
    pub(crate) mtime_nsec: u32,
    pub(crate) btime: Option<BirthTime>,
    /// `stx_mnt_id`, unique where the kernel offers it (Linux ≥ 6.8), else
    /// the reusable one (Linux ≥ 5.8).
    pub(crate) mount: Option<MountId>,
    /// `STATX_ATTR_MOUNT_ROOT`, when the kernel reports it (Linux ≥ 5.8).
    pub(crate) mount_root: Option<bool>,
}

/// Why a directory failed a trust check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Untrusted {
    /// Not owned by the expected user.
    Owner,
    /// Writable by group or others.
    Mode,
    /// An ancestor owned by someone else, or writable by others without the
    /// sticky bit.
    Ancestor,
}

/// `geteuid()`—The user the trust rules ([`Stat::trusted_dir_for`],
/// [`Stat::trusted_ancestor_for`]) compare owners against.
///
/// # References
///
/// [geteuid(2)](https://man7.org/linux/man-pages/man2/geteuid.2.html)
#[doc(alias = "geteuid")]
pub(crate) fn trusting_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

impl Stat {
    pub(crate) fn kind(&self) -> FileKind {
        FileKind::from_mode(self.mode)
    }

    /// `(dev, ino)`: the filesystem identity used for de-duplication.
    pub(crate) fn dev_ino(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    pub(crate) fn identity(&self) -> Identity {
        Identity {
            dev: self.dev,
            ino: self.ino,
            mount: self.mount,
            btime: self.btime,
        }
    }

    pub(crate) fn observed(&self) -> Observed {
        Observed {
            identity: self.identity(),
            kind: self.kind(),
            mount_root: self.mount_root == Some(true),
            nlink: self.nlink,
        }
    }

    /// Same inode on the same mount (the mount id is compared only when the
    /// kernel reported it for both sides).
    pub(crate) fn same_object(&self, other: &Stat) -> bool {
        self.dev == other.dev
            && self.ino == other.ino
            && match (self.mount, other.mount) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }

    /// Whether `self` (a child) lives on the same mount as `parent`: a
    /// mount point — including a bind mount of the same filesystem, which
    /// has the same `dev` — fails this check.
    pub(crate) fn on_mount_of(&self, parent: &Stat) -> bool {
        if self.dev != parent.dev {
            return false;
        }
        if self.mount_root == Some(true) && self.kind() == FileKind::Dir {
            return false;
        }
        match (self.mount, parent.mount) {
            (Some(a), Some(b)) => a == b,
            // Without a mount id a same-device bind mount is invisible; the
            // mount-root attribute above is the remaining fence.
            _ => true,
        }
    }

    /// POSIX trust for a directory a cleaner owns: owned by `uid` and not
    /// writable by group or others.
    ///
    /// # Errors
    ///
    /// [`Untrusted::Owner`] or [`Untrusted::Mode`].
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
    ///
    /// # Errors
    ///
    /// [`Untrusted::Ancestor`].
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

/// `STATX_MNT_ID_UNIQUE` (Linux 6.8); rustix 1.1 has no name for it yet.
const MNT_ID_UNIQUE: u32 = 0x4000;

fn mask() -> StatxFlags {
    StatxFlags::BASIC_STATS
        | StatxFlags::BTIME
        | StatxFlags::MNT_ID
        | StatxFlags::from_bits_retain(MNT_ID_UNIQUE)
}

fn from_statx(s: &rustix::fs::Statx) -> Stat {
    let got = StatxFlags::from_bits_retain(s.stx_mask);
    let mount = if got.contains(StatxFlags::from_bits_retain(MNT_ID_UNIQUE)) {
        Some(MountId::Unique(s.stx_mnt_id))
    } else if got.contains(StatxFlags::MNT_ID) {
        Some(MountId::Reusable(s.stx_mnt_id))
    } else {
        None
    };
    let root_known = s.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT);
    Stat {
        dev: rustix::fs::makedev(s.stx_dev_major, s.stx_dev_minor),
        ino: s.stx_ino,
        mode: u32::from(s.stx_mode),
        uid: s.stx_uid,
        nlink: u64::from(s.stx_nlink),
        mtime_sec: s.stx_mtime.tv_sec,
        mtime_nsec: s.stx_mtime.tv_nsec,
        btime: got.contains(StatxFlags::BTIME).then_some(BirthTime {
            sec: s.stx_btime.tv_sec,
            nsec: s.stx_btime.tv_nsec,
        }),
        mount,
        mount_root: root_known.then(|| s.stx_attributes.contains(StatxAttributes::MOUNT_ROOT)),
    }
}

/// `statx(dir, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, …)`—Describes the
/// entry `name` itself, never what a symlink points to, without triggering
/// an automount.
///
/// # Errors
///
/// The call's `errno` (`ENOENT` when the name is gone).
///
/// # References
///
/// [statx(2)](https://man7.org/linux/man-pages/man2/statx.2.html)
#[doc(alias = "statx")]
pub(crate) fn stat_at(dir: BorrowedFd<'_>, name: &CStr) -> Result<Stat, Errno> {
    let flags = AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT;
    rustix::fs::statx(dir, name, flags, mask()).map(|s| from_statx(&s))
}

/// `statx(fd, "", AT_EMPTY_PATH, …)`—Describes the inode `fd` refers to.
///
/// # Errors
///
/// The call's `errno`.
///
/// # References
///
/// [statx(2)](https://man7.org/linux/man-pages/man2/statx.2.html)
#[doc(alias = "statx")]
pub(crate) fn stat_fd(fd: BorrowedFd<'_>) -> Result<Stat, Errno> {
    let flags = AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW;
    rustix::fs::statx(fd, c"", flags, mask()).map(|s| from_statx(&s))
}

/// `statx(fd, "", AT_EMPTY_PATH, STATX_NLINK)`—The link count of the inode
/// `fd` refers to: 0 once its last name is gone.
///
/// # Errors
///
/// The call's `errno`.
///
/// # References
///
/// [statx(2)](https://man7.org/linux/man-pages/man2/statx.2.html)
#[doc(alias = "statx")]
pub(crate) fn nlink_fd(fd: BorrowedFd<'_>) -> Result<u64, Errno> {
    rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, StatxFlags::NLINK)
        .map(|s| u64::from(s.stx_nlink))
}

/// [`stat_at`], reduced to an [`Observed`].
///
/// # Errors
///
/// As [`stat_at`].
pub(crate) fn observe_at(dir: BorrowedFd<'_>, name: &CStr) -> Result<Observed, Errno> {
    stat_at(dir, name).map(|s| s.observed())
}

/// [`stat_fd`], reduced to an [`Observed`].
///
/// # Errors
///
/// As [`stat_fd`].
pub(crate) fn observe_fd(fd: BorrowedFd<'_>) -> Result<Observed, Errno> {
    stat_fd(fd).map(|s| s.observed())
}
