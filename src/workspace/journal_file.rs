//! The ownership journal on disk: `<internal>/journal/<request id>`, one
//! append-only file per request, written through `crate::fs`.
//!
//! Each record is one `write(2)` of one frame (see [`super::journal`]),
//! made before the operation it announces returns. Nothing is synced per
//! record: the durability policy is in `docs/contracts/workspace-cleanup.md`
//! ("The journal").

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, Read as _, Seek as _, Write as _};
use std::os::fd::{AsFd, BorrowedFd};

use super::journal::{self, Record};
use crate::fs::{self, Errno, OFlags};

const FILE_MODE: u32 = 0o600;

/// An open journal, positioned after its last verified record.
pub(super) struct JournalFile {
    file: File,
    buf: Vec<u8>,
}

impl JournalFile {
    /// Creates the journal `name` in `dir` (`O_CREAT | O_EXCL`: a journal is
    /// never shared by two runs of a request).
    pub(super) fn create(dir: BorrowedFd<'_>, name: &CStr) -> Result<Self, Errno> {
        let fd = fs::create_file(dir, name, FILE_MODE)?;
        Ok(JournalFile {
            file: File::from(fd),
            buf: Vec::with_capacity(128),
        })
    }

    /// Opens the existing journal `name` to append after its verified
    /// prefix of `valid_len` bytes, cutting whatever follows (a torn or
    /// corrupt tail that would hide later records from the reader).
    pub(super) fn reopen(
        dir: BorrowedFd<'_>,
        name: &CStr,
        valid_len: usize,
    ) -> Result<Self, Errno> {
        // `O_NONBLOCK`: something other than our regular file at the name
        // (a FIFO) must not block the node's start; `ftruncate` then fails.
        let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::NONBLOCK;
        let fd = fs::open_file_at(dir, name, flags, 0)?;
        fs::truncate(fd.as_fd(), valid_len as u64)?;
        Ok(JournalFile {
            file: File::from(fd),
            buf: Vec::with_capacity(128),
        })
    }

    /// Appends `record` as one frame with one `write(2)`.
    pub(super) fn append(&mut self, record: &Record) -> io::Result<()> {
        self.buf.clear();
        journal::encode(record, &mut self.buf);
        self.file.write_all(&self.buf)
    }

    /// `ftruncate(fd, 0)`, `lseek(fd, 0)`, then `renameat2(dir, name, dir,
    /// spare, RENAME_NOREPLACE)`—Empties the journal of a request cleaned
    /// clean and moves it to the spare name `spare` (never a request id:
    /// it starts with a dot), for [`JournalFile::adopt`] to reuse: a new
    /// request then costs no inode allocation, nor its removal an inode
    /// release. Emptied first, so that the name `name` never holds a
    /// record after this returns `Ok` or fails after the truncation (an
    /// empty journal proves nothing: a reclaim removes it).
    ///
    /// # Errors
    ///
    /// The failing call's errno, with the journal (still named `name`,
    /// possibly emptied): the caller removes it.
    ///
    /// # References
    ///
    /// [ftruncate(2)](https://man7.org/linux/man-pages/man2/ftruncate.2.html),
    /// [rename(2)](https://man7.org/linux/man-pages/man2/rename.2.html)
    pub(super) fn retire(
        mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        spare: CString,
    ) -> Result<Spare, Errno> {
        fs::truncate(self.file.as_fd(), 0)?;
        self.file
            .rewind()
            .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
        fs::rename_noreplace(dir, name, spare.as_c_str())?;
        self.buf.clear();
        Ok(Spare {
            name: spare,
            journal: self,
        })
    }

    /// `renameat2(dir, spare, dir, name, RENAME_NOREPLACE)`—Reuses an
    /// emptied journal as the new journal `name`. Like [`JournalFile::create`]
    /// (`O_EXCL`), it fails with `EEXIST` when anything holds the name: a
    /// journal left by an earlier run is never reused.
    ///
    /// # Errors
    ///
    /// The errno, with the spare given back (still under its own name).
    ///
    /// # References
    ///
    /// [rename(2)](https://man7.org/linux/man-pages/man2/rename.2.html)
    pub(super) fn adopt(
        spare: Spare,
        dir: BorrowedFd<'_>,
        name: &CStr,
    ) -> Result<Self, (Spare, Errno)> {
        match fs::rename_noreplace(dir, spare.name.as_c_str(), name) {
            Ok(()) => Ok(spare.journal),
            Err(e) => Err((spare, e)),
        }
    }
}

/// An emptied journal kept under a spare name (see [`JournalFile::retire`]).
pub(super) struct Spare {
    /// Its name in the journal directory (`.spare-<n>`).
    pub(super) name: CString,
    journal: JournalFile,
}

/// The prefix of a spare journal's name. Request ids never start with a
/// dot, so no spare is ever read as a request's journal.
pub(super) const SPARE_PREFIX: &str = ".spare-";

/// Reads the whole journal `name` in `dir` (a regular file, never followed
/// through a symlink; at most `limit` bytes).
pub(super) fn read_all(dir: BorrowedFd<'_>, name: &CStr, limit: u64) -> io::Result<Vec<u8>> {
    let fd = fs::open_regular(dir, name, fs::Access::Read)?;
    let mut out = Vec::new();
    File::from(fd).take(limit).read_to_end(&mut out)?;
    Ok(out)
}
