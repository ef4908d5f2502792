//! The pure rules that compare a recorded [`Identity`] (taken by `crate::fs`
//! when the workspace helper created the inode) with a fresh observation.

use crate::fs::{FileKind, Identity, MountId, Observed};

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
    use crate::fs::BirthTime;

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
