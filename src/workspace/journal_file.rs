//! The ownership journal on disk: `<internal>/journal/<request id>`, one
//! append-only file per request, written through `crate::fs`.
//!
//! Each record is one `write(2)` of one frame (see [`super::journal`]),
//! made before the operation it announces returns. Nothing is synced per
//! record: the durability policy is in `docs/contracts/workspace-cleanup.md`
//! ("The journal").

use std::ffi::CStr;
use std::fs::File;
use std::io::{self, Read as _, Write as _};
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
}

/// Reads the whole journal `name` in `dir` (a regular file, never followed
/// through a symlink; at most `limit` bytes).
pub(super) fn read_all(dir: BorrowedFd<'_>, name: &CStr, limit: u64) -> io::Result<Vec<u8>> {
    let fd = fs::open_regular(dir, name, fs::Access::Read)?;
    let mut out = Vec::new();
    File::from(fd).take(limit).read_to_end(&mut out)?;
    Ok(out)
}
