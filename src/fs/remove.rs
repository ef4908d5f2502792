//! Tamper-evident removal: quarantine, identify, destroy, prove.
//!
//! # Why a protocol
//!
//! Linux has no "unlink if this inode". A cleaner that checks an entry's
//! identity and then unlinks it by name loses to a racer of the same user
//! who exchanges the entry with another file (`renameat2(RENAME_EXCHANGE)`)
//! between the two calls: the cleaner destroys the other file and answers
//! success while its own artifact lives on under the other file's name.
//!
//! # The protocol ([`Quarantine::remove`])
//!
//! 1. **Move out of reach.** `renameat2(parent, name, quarantine, qname,
//!    RENAME_NOREPLACE)` moves whatever holds `name` *now* into a
//!    cleaner-private directory on the same mount. `RENAME_NOREPLACE` never
//!    overwrites; a rename never follows a symlink and never crosses a
//!    mount (`EXDEV`), and a mount point cannot be renamed (`EBUSY`).
//! 2. **Identify what arrived.** `openat(quarantine, qname, O_PATH |
//!    O_NOFOLLOW)` pins the inode (a symlink is pinned as itself, a FIFO is
//!    not opened for I/O), and `statx` of that descriptor is compared with the
//!    registered identity (device, inode, birth time, mount, type).
//! 3. **Destroy only the registered inode.** On a mismatch nothing is
//!    destroyed: the entry is renamed back to `parent/name` (again with
//!    `RENAME_NOREPLACE`), or, if that name was taken meanwhile, kept in
//!    quarantine and reported. On a match, `unlinkat(quarantine, qname)`.
//! 4. **Prove it.** `statx` of the held descriptor must show that the
//!    unlink removed a link of *that* inode: `nlink` 0 for a directory and
//!    for a file that had one link, one less than before for a file the user
//!    hard-linked elsewhere (the user's name keeps the bytes). Anything else
//!    is [`Removal::Tampered`]: the name unlinked was not the inode checked.
//!
//! A racer exchanging the registered name with an outside file therefore
//! either loses (its exchange finds the name gone once step 1 ran, `ENOENT`),
//! or wins before step 1 and has its own file moved into quarantine,
//! recognised as foreign in step 2 and put back at the name it took; nothing
//! outside the registered inodes is destroyed, and the cleanup reports it.
//!
//! # The remaining window, stated honestly
//!
//! Between step 2 and step 3's `unlinkat` the entry sits in the quarantine
//! under a name only this process chose. A racer of the same user that
//! watches the quarantine directory itself (it is private by convention, in
//! the internal namespace no caller path resolves to, not by permission:
//! the same user can reach it) can still exchange the quarantined entry with
//! one of its own files in that window. Then the foreign inode loses its
//! name; step 4 sees the registered inode's link count unchanged and the
//! cleanup reports [`Removal::Tampered`] — a loss can happen only to a racer
//! that aims at the quarantine, and it is never reported as success. A racer
//! that also changes the registered inode's link count at the same instant
//! could hide that; it must then hold another name of the registered inode,
//! i.e. have taken it out of the job tree itself.

use std::ffi::{CStr, CString};
use std::io::Write as _;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use super::dir::{rmdir_at, unlink_at};
use super::stat::{FileKind, Stat, nlink_fd, stat_fd};

/// What [`Quarantine::remove`] did with one entry.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Removal<E> {
    /// The registered inode was destroyed (its link removed, verified).
    Destroyed,
    /// Nothing had the name: nothing of ours is left there.
    Missing,
    /// What held the name is not the registered entry (`None`: not even of
    /// the registered type); it was put back.
    Restored(Option<E>),
    /// What held the name is not the registered entry, and its name was
    /// taken meanwhile: it stays in quarantine under this name.
    Kept(Option<E>, CString),
    /// A directory was not empty; it was put back (or kept, when `true`).
    NotEmpty(bool),
    /// The name could not be moved: it is a mount point (`EBUSY`) or on
    /// another mount (`EXDEV`).
    Mount,
    /// The unlink did not remove a link of the registered inode: something
    /// was exchanged into the quarantine between check and unlink. Whatever
    /// was unlinked is gone; the registered inode is not.
    Tampered,
}

/// A cleaner-private directory, on the same mount as what it removes, that
/// every entry passes through on its way out (see the module docs).
pub(crate) struct Quarantine {
    dir: OwnedFd,
    next: u64,
    name: Vec<u8>,
}

impl Quarantine {
    /// Takes `dir` (opened by the caller with [`open_dir_at`](super::open_dir_at)
    /// and checked to be on the mount of what it will receive).
    pub(crate) fn new(dir: OwnedFd) -> Self {
        Quarantine {
            dir,
            next: 0,
            name: Vec::with_capacity(24),
        }
    }

    /// `renameat2(parent, name, q, qname, RENAME_NOREPLACE)`, `openat(q, qname,
    /// O_PATH | O_NOFOLLOW)`, `statx`, `unlinkat(q, qname, …)`, `statx`—
    /// Removes the entry `name` of `parent` if, once moved out of the tree,
    /// it is the registered `kind` entry that `verify` accepts.
    ///
    /// `kind` must be [`FileKind::Dir`] or [`FileKind::File`]; a directory
    /// must be empty.
    ///
    /// # Errors
    ///
    /// An unexpected `errno` from any of the calls. The entry is then where
    /// the protocol left it: in place, put back (an entry that could not be
    /// identified is always tried back), or in quarantine.
    ///
    /// # References
    ///
    /// [rename(2)](https://man7.org/linux/man-pages/man2/rename.2.html),
    /// [open(2)](https://man7.org/linux/man-pages/man2/open.2.html) (`O_PATH`),
    /// [unlinkat(2)](https://man7.org/linux/man-pages/man2/unlinkat.2.html),
    /// [statx(2)](https://man7.org/linux/man-pages/man2/statx.2.html)
    #[doc(alias = "renameat2")]
    pub(crate) fn remove<E>(
        &mut self,
        parent: BorrowedFd<'_>,
        name: &CStr,
        kind: FileKind,
        verify: impl FnOnce(&Stat) -> Result<(), E>,
    ) -> Result<Removal<E>, Errno> {
        // 1. Out of the tree, under a name nobody else chose.
        let qname = loop {
            self.name.clear();
            write!(self.name, "q{:x}\0", self.next).expect("writing to a Vec");
            self.next += 1;
            let qname = CStr::from_bytes_with_nul(&self.name).expect("one trailing NUL");
            let q = self.dir.as_fd();
            match rustix::fs::renameat_with(parent, name, q, qname, RenameFlags::NOREPLACE) {
                Ok(()) => break qname.to_owned(),
                // Left by an earlier cleanup: take the next name.
                Err(Errno::EXIST) => continue,
                Err(Errno::NOENT) => return Ok(Removal::Missing),
                Err(Errno::BUSY | Errno::XDEV) => return Ok(Removal::Mount),
                Err(e) => return Err(e),
            }
        };
        let q = self.dir.as_fd();
        // 2. Pin and identify what arrived.
        let pinned = match rustix::fs::openat(
            q,
            &qname,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            // Taken out of the quarantine before we looked: nothing was
            // destroyed, but the tree was changed under us.
            Err(Errno::NOENT) => return Ok(Removal::Tampered),
            Err(e) => {
                // Unidentified: it goes back where it came from if it can.
                let _ = self.put_back::<E>(parent, name, &qname, None);
                return Err(e);
            }
        };
        let seen = match stat_fd(pinned.as_fd()) {
            Ok(s) => s,
            Err(e) => {
                let _ = self.put_back::<E>(parent, name, &qname, None);
                return Err(e);
            }
        };
        if seen.kind() != kind {
            return self.put_back(parent, name, &qname, None);
        }
        if let Err(why) = verify(&seen) {
            return self.put_back(parent, name, &qname, Some(why));
        }
        // 3. Destroy the registered inode's quarantine name.
        let links_before = seen.nlink;
        let gone = if kind == FileKind::Dir {
            rmdir_at(q, &qname)
        } else {
            unlink_at(q, &qname)
        };
        match gone {
            Ok(()) => {}
            Err(Errno::NOTEMPTY | Errno::EXIST) => {
                return match self.put_back::<E>(parent, name, &qname, None)? {
                    Removal::Restored(_) => Ok(Removal::NotEmpty(false)),
                    Removal::Kept(..) => Ok(Removal::NotEmpty(true)),
                    _ => Ok(Removal::Tampered),
                };
            }
            Err(Errno::NOENT) => return Ok(Removal::Tampered),
            Err(e) => return Err(e),
        }
        // 4. Prove that the link removed was one of the registered inode.
        let links_after = nlink_fd(pinned.as_fd())?;
        let expected = if kind == FileKind::Dir {
            0
        } else {
            links_before.saturating_sub(1)
        };
        if links_after == expected {
            Ok(Removal::Destroyed)
        } else {
            Ok(Removal::Tampered)
        }
    }

    /// `renameat2(q, qname, parent, name, RENAME_NOREPLACE)`: puts a foreign
    /// entry back where it was taken from, or keeps it in quarantine when
    /// the name has been taken meanwhile.
    fn put_back<E>(
        &self,
        parent: BorrowedFd<'_>,
        name: &CStr,
        qname: &CStr,
        why: Option<E>,
    ) -> Result<Removal<E>, Errno> {
        match rustix::fs::renameat_with(
            self.dir.as_fd(),
            qname,
            parent,
            name,
            RenameFlags::NOREPLACE,
        ) {
            Ok(()) => Ok(Removal::Restored(why)),
            Err(Errno::EXIST | Errno::NOENT) => Ok(Removal::Kept(why, qname.to_owned())),
            Err(e) => Err(e),
        }
    }
}
