//! File identities and the pure rules that compare a recorded identity with a
//! fresh observation.
//!
//! An [`Identity`] is what the kernel says about an inode at the moment it was
//! created through the workspace helper. Device and inode number alone are not
//! enough: an inode number is reused as soon as the file is deleted, and a
//! directory renamed away and replaced by a fresh one may receive the very
//! same number. The birth time (`stx_btime`) of the replacement differs, and
//! the mount id (`stx_mnt_id`, preferably the never-reused
//! `STATX_MNT_ID_UNIQUE`) tells a bind mount of the same filesystem apart from
//! the original tree even though the device number is equal.

/// The mount a file was observed on.
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    /// Device number (`major << 32 | minor`).
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

/// A fresh `statx`/`fstat` of one entry, never following a symlink.
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

/// Where every artifact of a workspace must live: the device and mount of
/// the workspace's internal namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Anchor {
    /// Device of the workspace root.
    pub dev: u64,
    /// Mount of the workspace root, where known.
    pub mount: Option<MountId>,
}

/// Why an observation does not match what was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// A symbolic link where a registered entry (or any entry) should be.
    Symlink,
    /// A FIFO, socket or device.
    Special,
    /// The entry is a mount root or lives on another mount.
    Mount,
    /// The entry lives on another device.
    Device,
    /// Same name, but a different inode, birth time or type.
    Replaced,
}

impl Anchor {
    /// Checks that `obs` is neither a symlink nor special and stays on this
    /// anchor's device and mount.
    ///
    /// # Errors
    ///
    /// The first [`Mismatch`] found, in the order symlink, special, mount,
    /// device.
    pub fn admit(&self, obs: &Observed) -> Result<(), Mismatch> {
        match obs.kind {
            FileKind::Symlink => return Err(Mismatch::Symlink),
            FileKind::Special => return Err(Mismatch::Special),
            FileKind::Dir | FileKind::File => {}
        }
        if obs.mount_root || !same_mount(self.mount, obs.identity.mount) {
            return Err(Mismatch::Mount);
        }
        if obs.identity.dev != self.dev {
            return Err(Mismatch::Device);
        }
        Ok(())
    }
}

fn same_mount(recorded: Option<MountId>, seen: Option<MountId>) -> bool {
    match (recorded, seen) {
        (Some(a), Some(b)) => a == b,
        // The recording kernel gave a mount id and this observation did not:
        // we cannot prove it is the same mount, so it is not.
        (Some(_), None) => false,
        (None, _) => true,
    }
}

impl Identity {
    /// Checks that `obs` is this very inode, of kind `kind`.
    ///
    /// Fields the platform did not report at recording time are not compared;
    /// a field recorded then but missing now is a mismatch.
    ///
    /// # Errors
    ///
    /// [`Mismatch::Replaced`] when type, device, inode or birth time differ;
    /// [`Mismatch::Mount`] when the mount differs.
    pub fn check(&self, kind: FileKind, obs: &Observed) -> Result<(), Mismatch> {
        if obs.kind != kind || obs.identity.dev != self.dev || obs.identity.ino != self.ino {
            return Err(Mismatch::Replaced);
        }
        if let Some(b) = self.btime {
            if obs.identity.btime != Some(b) {
                return Err(Mismatch::Replaced);
            }
        }
        if !same_mount(self.mount, obs.identity.mount) {
            return Err(Mismatch::Mount);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ino: u64, btime: i64) -> Identity {
        Identity {
            dev: 7,
            ino,
            mount: Some(MountId::Unique(40)),
            btime: Some(BirthTime {
                sec: btime,
                nsec: 5,
            }),
        }
    }

    fn obs(identity: Identity, kind: FileKind) -> Observed {
        Observed {
            identity,
            kind,
            mount_root: false,
            nlink: 1,
        }
    }

    #[test]
    fn same_inode_matches() {
        let a = id(10, 100);
        assert_eq!(a.check(FileKind::Dir, &obs(a, FileKind::Dir)), Ok(()));
    }

    #[test]
    fn reused_inode_number_with_new_birth_time_is_a_replacement() {
        let recorded = id(10, 100);
        let reused = id(10, 101);
        assert_eq!(
            recorded.check(FileKind::File, &obs(reused, FileKind::File)),
            Err(Mismatch::Replaced)
        );
    }

    #[test]
    fn missing_birth_time_now_is_a_replacement() {
        let recorded = id(10, 100);
        let mut now = recorded;
        now.btime = None;
        assert_eq!(
            recorded.check(FileKind::File, &obs(now, FileKind::File)),
            Err(Mismatch::Replaced)
        );
    }

    #[test]
    fn unrecorded_fields_are_not_compared() {
        let mut recorded = id(10, 100);
        recorded.btime = None;
        recorded.mount = None;
        assert_eq!(
            recorded.check(FileKind::File, &obs(id(10, 999), FileKind::File)),
            Ok(())
        );
    }

    #[test]
    fn type_change_inode_change_and_mount_change_are_caught() {
        let a = id(10, 100);
        assert_eq!(
            a.check(FileKind::Dir, &obs(a, FileKind::File)),
            Err(Mismatch::Replaced)
        );
        assert_eq!(
            a.check(FileKind::Dir, &obs(id(11, 100), FileKind::Dir)),
            Err(Mismatch::Replaced)
        );
        let mut other_mount = a;
        other_mount.mount = Some(MountId::Unique(41));
        assert_eq!(
            a.check(FileKind::Dir, &obs(other_mount, FileKind::Dir)),
            Err(Mismatch::Mount)
        );
    }

    #[test]
    fn anchor_refuses_links_specials_mount_roots_and_foreign_devices() {
        let anchor = Anchor {
            dev: 7,
            mount: Some(MountId::Unique(40)),
        };
        let a = id(10, 100);
        assert_eq!(anchor.admit(&obs(a, FileKind::File)), Ok(()));
        assert_eq!(
            anchor.admit(&obs(a, FileKind::Symlink)),
            Err(Mismatch::Symlink)
        );
        assert_eq!(
            anchor.admit(&obs(a, FileKind::Special)),
            Err(Mismatch::Special)
        );
        let mut root = obs(a, FileKind::Dir);
        root.mount_root = true;
        assert_eq!(anchor.admit(&root), Err(Mismatch::Mount));
        // A bind mount of the same filesystem: same device, other mount.
        let mut bind = a;
        bind.mount = Some(MountId::Unique(77));
        assert_eq!(
            anchor.admit(&obs(bind, FileKind::Dir)),
            Err(Mismatch::Mount)
        );
        let mut tmpfs = a;
        tmpfs.dev = 99;
        assert_eq!(
            anchor.admit(&obs(tmpfs, FileKind::Dir)),
            Err(Mismatch::Device)
        );
        // A reusable id never equals a unique one: not provably the same mount.
        let mut legacy = a;
        legacy.mount = Some(MountId::Reusable(40));
        assert_eq!(
            anchor.admit(&obs(legacy, FileKind::Dir)),
            Err(Mismatch::Mount)
        );
    }
}
