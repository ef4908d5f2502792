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
//!    overwrites (a file moved while another is pending goes onto the
//!    pending file's quarantine name instead: step 3); a rename never follows
//!    a symlink and never crosses a mount (`EXDEV`), and a mount point cannot
//!    be renamed (`EBUSY`).
//! 2. **Identify what arrived.** `openat(quarantine, qname, O_PATH |
//!    O_NOFOLLOW)` pins the inode (a symlink is pinned as itself, a FIFO is
//!    not opened for I/O), and `statx` of that descriptor is compared with the
//!    registered identity (device, inode, birth time, mount, type).
//! 3. **Destroy only the registered inode.** On a mismatch nothing is
//!    destroyed: the entry is renamed back to `parent/name` (again with
//!    `RENAME_NOREPLACE`), or, if that name was taken meanwhile, kept in
//!    quarantine and reported. On a match, the quarantine name is destroyed:
//!    for a directory by `unlinkat(quarantine, qname, AT_REMOVEDIR)` at once;
//!    for a file ([`Quarantine::remove_file`]) by the *next* file's move,
//!    `renameat2(parent2, name2, quarantine, qname, 0)`, which replaces the
//!    name (the kernel unlinks the old inode inside the rename, under the same
//!    locks), or by `unlinkat` when there is no next file
//!    ([`Quarantine::flush`]). The rename that replaces is the only rename
//!    without `RENAME_NOREPLACE`, and what it replaces is always a name in the
//!    cleaner's own quarantine holding a file identified in step 2.
//! 4. **Prove it.** `statx` of the held descriptor must show that the
//!    unlink (or the replacing rename) removed a link of *that* inode:
//!    `nlink` 0 for a directory and for a file that had one link, one less
//!    than before for a file the user hard-linked elsewhere (the user's name
//!    keeps the bytes). Anything else is [`Removal::Tampered`] (for a file,
//!    [`Settled::Tampered`]): the name destroyed was not the inode checked.
//!    A replacing rename that moved the pending inode onto itself (another
//!    link of it held the next name: `rename(2)` then does nothing) is
//!    recognised by the arrival's identity and is `Tampered` whatever the
//!    link count says.
//!
//! A racer exchanging the registered name with an outside file therefore
//! either loses (its exchange finds the name gone once step 1 ran, `ENOENT`),
//! or wins before step 1 and has its own file moved into quarantine,
//! recognised as foreign in step 2 and put back at the name it took; nothing
//! outside the registered inodes is destroyed, and the cleanup reports it.
//!
//! # Why a file's destruction is deferred
//!
//! Measured (`benches/removal_protocol.rs`, `docs/performance.md`): on tmpfs
//! the move costs as much as the unlink it precedes, and a rename onto an
//! existing name costs less than a rename to a fresh name plus an
//! `unlinkat` (no new dentry, no second lookup and lock of the quarantine).
//! Letting the next move destroy the pending file saves a call and about a
//! quarter of the protocol's time, with the same check before destruction
//! and the same proof after. The verdict on a file therefore arrives one
//! call later, through [`Quarantine::settled`], under the caller's tag; a
//! caller flushes before it acts on a batch. The held descriptors of
//! destroyed inodes are closed 16 at a time (the last reference, so the
//! inode's freeing, is paid there in a burst); a cleaner still holds a
//! bounded number of descriptors whatever the tree.
//!
//! # The remaining window, stated honestly
//!
//! Between step 2 and step 3 the entry sits in the quarantine under a name
//! only this process chose; for a file, that window lasts until the next
//! file's move (the caller's bookkeeping between two entries, no other
//! call of the protocol) or the flush at the end of its directory. A racer
//! of the same user that watches the quarantine directory itself (it is
//! private by convention, in the internal namespace no caller path
//! resolves to, not by permission: the same user can reach it) can still
//! exchange the quarantined entry with one of its own files in that window.
//! Then the foreign inode loses its name; step 4 sees the registered
//! inode's link count unchanged and the cleanup reports
//! [`Removal::Tampered`] — a loss can happen only to a racer that aims at
//! the quarantine, and it is never reported as success. A racer that also
//! changes the registered inode's link count at the same instant could hide
//! that; it must then hold another name of the registered inode, i.e. have
//! taken it out of the job tree itself.
//!
//! # Two threads
//!
//! A cleaner may remove with two threads; each has its own `Quarantine`
//! (its own directory), and the protocol above runs per entry in each, so
//! nothing of the argument depends on the other thread.

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
    /// Only from [`Quarantine::remove_file`]: the file was moved out of the
    /// tree and identified as the registered one; it is destroyed by the
    /// next `remove_file` or by [`Quarantine::flush`], and the verdict comes
    /// through [`Quarantine::settled`].
    Pending,
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

/// The verdict on a file [`Quarantine::remove_file`] accepted
/// ([`Removal::Pending`]), once its quarantine name has been destroyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settled {
    /// A link of the registered inode was removed, proven by its descriptor.
    Destroyed,
    /// What was destroyed under the quarantine name was not the registered
    /// inode (or nothing was): see [`Removal::Tampered`].
    Tampered,
    /// An unexpected `errno` while destroying or proving.
    Failed(Errno),
}

/// A file moved out of the tree and identified as the registered one, not
/// destroyed yet.
struct Pending {
    tag: usize,
    /// Its name in the quarantine.
    qname: CString,
    /// The pinned inode (`O_PATH`).
    fd: OwnedFd,
    /// What `statx` of `fd` showed when it was identified.
    seen: Stat,
}

/// Descriptors of destroyed inodes are closed this many at a time.
const SPENT_BATCH: usize = 16;

/// A cleaner-private directory, on the same mount as what it removes, that
/// every entry passes through on its way out (see the module docs).
pub(crate) struct Quarantine {
    dir: OwnedFd,
    next: u64,
    name: Vec<u8>,
    pending: Option<Pending>,
    settled: Vec<(usize, Settled)>,
    /// Pinned descriptors whose proof is done, closed together.
    spent: Vec<OwnedFd>,
}

/// How the move into the quarantine went.
enum Moved {
    /// Under this quarantine name.
    To(CString),
    /// Over the pending file's quarantine name, which held it until then.
    Over(Pending),
}

impl Quarantine {
    /// Takes `dir` (opened by the caller with [`open_dir_at`](super::open_dir_at)
    /// and checked to be on the mount of what it will receive).
    pub(crate) fn new(dir: OwnedFd) -> Self {
        Quarantine {
            dir,
            next: 0,
            name: Vec::with_capacity(24),
            pending: None,
            settled: Vec::new(),
            spent: Vec::with_capacity(SPENT_BATCH),
        }
    }

    /// The quarantine directory itself.
    pub(crate) fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// `fcntl(F_DUPFD_CLOEXEC)`—Destroys what is pending and hands back
    /// the directory (a duplicate of its descriptor), for another use.
    ///
    /// # Errors
    ///
    /// `EMFILE` and the like from the duplication.
    pub(crate) fn into_dir(mut self) -> Result<OwnedFd, Errno> {
        self.flush();
        self.dir
            .try_clone()
            .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))
    }

    /// `renameat2(parent, name, q, qname, RENAME_NOREPLACE)`, `openat(q, qname,
    /// O_PATH | O_NOFOLLOW)`, `statx`, `unlinkat(q, qname, …)`, `statx`—
    /// Removes the entry `name` of `parent` if, once moved out of the tree,
    /// it is the registered `kind` entry that `verify` accepts, and proves it.
    ///
    /// `kind` must be [`FileKind::Dir`] or [`FileKind::File`]; a directory
    /// must be empty. Settles any file still pending from
    /// [`remove_file`](Self::remove_file) first.
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
        self.flush();
        if kind == FileKind::File {
            let r = self.remove_file(usize::MAX, parent, name, verify)?;
            self.flush();
            let Some(&(usize::MAX, verdict)) = self.settled.last() else {
                return Ok(r);
            };
            self.settled.pop();
            return match verdict {
                Settled::Destroyed => Ok(Removal::Destroyed),
                Settled::Tampered => Ok(Removal::Tampered),
                Settled::Failed(e) => Err(e),
            };
        }
        let qname = match self.move_out(parent, name, false)? {
            Ok(Moved::To(q)) => q,
            Ok(Moved::Over(_)) => unreachable!("no file is pending"),
            Err(r) => return Ok(r),
        };
        let (pinned, seen) = match self.pin(parent, name, &qname)? {
            Ok(p) => p,
            Err(r) => return Ok(r),
        };
        if let Some(r) = self.accept(parent, name, &qname, &seen, kind, verify)? {
            return Ok(r);
        }
        let q = self.dir.as_fd();
        match rmdir_at(q, &qname) {
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
        let verdict = prove(&pinned, &seen, FileKind::Dir);
        self.spend(pinned);
        match verdict {
            Settled::Destroyed => Ok(Removal::Destroyed),
            Settled::Tampered => Ok(Removal::Tampered),
            Settled::Failed(e) => Err(e),
        }
    }

    /// `renameat2(parent, name, q, qname, flags)`, `openat(q, qname, O_PATH |
    /// O_NOFOLLOW)`, `statx`—Moves the file `name` of `parent` out of the
    /// tree and, if it is the registered regular file `verify` accepts,
    /// leaves it pending in the quarantine ([`Removal::Pending`]).
    ///
    /// A pending file is destroyed by the next call's rename, which moves the
    /// next file over its quarantine name (the one rename does the unlink's
    /// work), or by [`flush`](Self::flush); either way its held descriptor
    /// must then show the link gone, and the verdict is queued under `tag`
    /// for [`settled`](Self::settled). Call `flush` before acting on the
    /// verdicts of a batch; a `Quarantine` dropped with a file pending
    /// destroys it unreported.
    ///
    /// # Errors
    ///
    /// As [`remove`](Self::remove).
    ///
    /// # References
    ///
    /// [rename(2)](https://man7.org/linux/man-pages/man2/rename.2.html),
    /// [open(2)](https://man7.org/linux/man-pages/man2/open.2.html) (`O_PATH`),
    /// [statx(2)](https://man7.org/linux/man-pages/man2/statx.2.html)
    #[doc(alias = "renameat2")]
    pub(crate) fn remove_file<E>(
        &mut self,
        tag: usize,
        parent: BorrowedFd<'_>,
        name: &CStr,
        verify: impl FnOnce(&Stat) -> Result<(), E>,
    ) -> Result<Removal<E>, Errno> {
        let (qname, over) = match self.move_out(parent, name, true)? {
            Ok(Moved::To(q)) => (q, None),
            Ok(Moved::Over(p)) => {
                let q = p.qname.clone();
                (q, Some(p))
            }
            Err(r) => return Ok(r),
        };
        let pinned = self.pin(parent, name, &qname);
        let accepted = match &pinned {
            Ok(Ok((_, seen))) => {
                Some(self.accept(parent, name, &qname, seen, FileKind::File, verify))
            }
            _ => None,
        };
        if let Some(prev) = over {
            // The rename replaced `prev`'s name. If what arrived is `prev`
            // itself (another link to it had the name), the rename did
            // nothing at all, whatever the link count says.
            let again = matches!(&pinned, Ok(Ok((_, seen))) if seen.same_object(&prev.seen));
            let verdict = if again {
                Settled::Tampered
            } else {
                prove(&prev.fd, &prev.seen, FileKind::File)
            };
            self.settled.push((prev.tag, verdict));
            self.spend(prev.fd);
        }
        let (fd, seen) = match pinned? {
            Ok(p) => p,
            Err(r) => return Ok(r),
        };
        if let Some(r) = accepted.expect("pinned")? {
            return Ok(r);
        }
        self.pending = Some(Pending {
            tag,
            qname,
            fd,
            seen,
        });
        Ok(Removal::Pending)
    }

    /// `unlinkat(q, qname, 0)`, `statx`—Destroys the pending file, if any,
    /// and queues its verdict.
    #[doc(alias = "unlinkat")]
    pub(crate) fn flush(&mut self) {
        let Some(p) = self.pending.take() else {
            return;
        };
        let verdict = match unlink_at(self.dir.as_fd(), &p.qname) {
            Ok(()) => prove(&p.fd, &p.seen, FileKind::File),
            // Taken out of the quarantine, or exchanged with a directory:
            // the registered inode no longer has the name.
            Err(Errno::NOENT | Errno::ISDIR | Errno::PERM) => Settled::Tampered,
            Err(e) => Settled::Failed(e),
        };
        self.settled.push((p.tag, verdict));
        self.spend(p.fd);
    }

    /// The verdicts on files [`remove_file`](Self::remove_file) accepted,
    /// in the order they were destroyed.
    pub(crate) fn settled(&mut self) -> std::vec::Drain<'_, (usize, Settled)> {
        self.settled.drain(..)
    }

    /// Step 1: moves whatever holds `name` *now* out of the tree. With
    /// `over` and a file pending, onto the pending file's name (destroying
    /// it); otherwise under a fresh name, never replacing anything.
    fn move_out<E>(
        &mut self,
        parent: BorrowedFd<'_>,
        name: &CStr,
        over: bool,
    ) -> Result<Result<Moved, Removal<E>>, Errno> {
        if let (true, Some(p)) = (over, &self.pending) {
            let q = self.dir.as_fd();
            match rustix::fs::renameat_with(parent, name, q, &p.qname, RenameFlags::empty()) {
                Ok(()) => {
                    let p = self.pending.take().expect("checked above");
                    return Ok(Ok(Moved::Over(p)));
                }
                Err(Errno::NOENT) => return Ok(Err(Removal::Missing)),
                // Not a file over a file (a directory arrived, or one sits
                // at the pending name), or a mount: settle the pending file
                // on its own and take the careful path.
                Err(_) => self.flush(),
            }
        }
        loop {
            self.name.clear();
            write!(self.name, "q{:x}\0", self.next).expect("writing to a Vec");
            self.next += 1;
            let qname = CStr::from_bytes_with_nul(&self.name).expect("one trailing NUL");
            let q = self.dir.as_fd();
            match rustix::fs::renameat_with(parent, name, q, qname, RenameFlags::NOREPLACE) {
                Ok(()) => return Ok(Ok(Moved::To(qname.to_owned()))),
                // Left by an earlier cleanup: take the next name.
                Err(Errno::EXIST) => continue,
                Err(Errno::NOENT) => return Ok(Err(Removal::Missing)),
                Err(Errno::BUSY | Errno::XDEV) => return Ok(Err(Removal::Mount)),
                Err(e) => return Err(e),
            }
        }
    }

    /// Step 2: pins what arrived at `qname` and describes it; what cannot
    /// be identified goes back to `parent/name`.
    #[allow(clippy::type_complexity)]
    fn pin<E>(
        &mut self,
        parent: BorrowedFd<'_>,
        name: &CStr,
        qname: &CStr,
    ) -> Result<Result<(OwnedFd, Stat), Removal<E>>, Errno> {
        let q = self.dir.as_fd();
        let pinned = match rustix::fs::openat(
            q,
            qname,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            // Taken out of the quarantine before we looked: nothing was
            // destroyed, but the tree was changed under us.
            Err(Errno::NOENT) => return Ok(Err(Removal::Tampered)),
            Err(e) => {
                // Unidentified: it goes back where it came from if it can.
                let _ = self.put_back::<E>(parent, name, qname, None);
                return Err(e);
            }
        };
        match stat_fd(pinned.as_fd()) {
            Ok(s) => Ok(Ok((pinned, s))),
            Err(e) => {
                let _ = self.put_back::<E>(parent, name, qname, None);
                Err(e)
            }
        }
    }

    /// Step 2, continued: what arrived must be the registered `kind` entry
    /// `verify` accepts; anything else goes back (`Some`).
    fn accept<E>(
        &mut self,
        parent: BorrowedFd<'_>,
        name: &CStr,
        qname: &CStr,
        seen: &Stat,
        kind: FileKind,
        verify: impl FnOnce(&Stat) -> Result<(), E>,
    ) -> Result<Option<Removal<E>>, Errno> {
        if seen.kind() != kind {
            return self.put_back(parent, name, qname, None).map(Some);
        }
        if let Err(why) = verify(seen) {
            return self.put_back(parent, name, qname, Some(why)).map(Some);
        }
        Ok(None)
    }

    /// Closes proven descriptors a batch at a time.
    fn spend(&mut self, fd: OwnedFd) {
        if self.spent.len() >= SPENT_BATCH {
            self.spent.clear();
        }
        self.spent.push(fd);
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

impl Drop for Quarantine {
    fn drop(&mut self) {
        // A verified file is not left lying in the quarantine.
        self.flush();
    }
}

/// Step 4: `statx(fd, STATX_NLINK)` must show that the unlink (or the
/// rename over the name) removed a link of *that* inode: 0 for a directory,
/// one less than when it was identified for a file.
fn prove(fd: &OwnedFd, seen: &Stat, kind: FileKind) -> Settled {
    let expected = if kind == FileKind::Dir {
        0
    } else {
        seen.nlink.saturating_sub(1)
    };
    match nlink_fd(fd.as_fd()) {
        Ok(n) if n == expected => Settled::Destroyed,
        Ok(_) => Settled::Tampered,
        Err(e) => Settled::Failed(e),
    }
}
