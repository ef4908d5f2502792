//! The spill store: root naming, path derivation, writes and reads.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::config::validate_prefix;
use super::locator::{self, Locator, LocatorError, RootTag};
use crate::fs::{self, Errno, FileKind as Kind, FlockOperation, OFlags, Stat as Meta, WalkError};

/// How many times a write retries after its session directory vanished
/// under it (pruned by a concurrent sweep) or its name collided.
const WRITE_ATTEMPTS: usize = 64;

/// Why a store operation failed. Paths are the store's own root; no
/// environment value is ever included.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The session name or locator is malformed.
    #[error(transparent)]
    Locator(#[from] LocatorError),
    /// The locator names another store root.
    #[error("spill locator belongs to another root (tag {found}, this root is {expected})")]
    ForeignRoot {
        /// The locator's tag.
        found: RootTag,
        /// This store's tag.
        expected: RootTag,
    },
    /// No spilled result exists at the locator.
    #[error("no spilled result for this locator under {root}")]
    NotFound {
        /// The store root.
        root: PathBuf,
    },
    /// The root, a session directory or the file is not what the store
    /// creates: a symlink, a special file, a mount point, or an untrusted
    /// owner or mode.
    #[error("refusing {what} under {root}: {reason}")]
    Refused {
        /// The store root.
        root: PathBuf,
        /// Which object.
        what: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// An I/O error.
    #[error("spill store I/O failed on {path} during {op}: {source}")]
    Io {
        /// The root (or temp dir) involved.
        path: PathBuf,
        /// The operation.
        op: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The default-root prefix is invalid.
    #[error("invalid default root prefix")]
    InvalidPrefix,
}

impl From<StoreError> for std::io::Error {
    fn from(e: StoreError) -> Self {
        let kind = match &e {
            StoreError::NotFound { .. } => std::io::ErrorKind::NotFound,
            StoreError::Refused { .. } | StoreError::ForeignRoot { .. } => {
                std::io::ErrorKind::PermissionDenied
            }
            StoreError::Io { source, .. } => source.kind(),
            _ => std::io::ErrorKind::InvalidInput,
        };
        std::io::Error::new(kind, e)
    }
}

/// Whether the root was configured or created for this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RootOrigin {
    /// A configured root.
    Configured,
    /// A per-process default root under the temp dir.
    Default,
}

/// A spill store rooted at one trusted directory, held open by descriptor.
///
/// Writes go to `<root>/<session>/<32 hex>.spill` (directories `0700`, files
/// `0600`, created exclusively with `O_NOFOLLOW`). A default root holds a
/// shared `flock` for the store's lifetime so that another process's sweep
/// does not remove it while it is empty.
#[derive(Debug)]
pub struct SpillStore {
    path: PathBuf,
    root: OwnedFd,
    meta: Meta,
    tag: RootTag,
    origin: RootOrigin,
    uid: u32,
    counter: AtomicU64,
    recreated: AtomicU64,
}

fn io_err(path: &Path, op: &'static str, e: Errno) -> StoreError {
    StoreError::Io {
        path: path.to_owned(),
        op,
        source: e.into(),
    }
}

fn refused(root: &Path, what: &'static str, reason: &'static str) -> StoreError {
    StoreError::Refused {
        root: root.to_owned(),
        what,
        reason,
    }
}

fn walk_err(path: &Path, e: WalkError) -> StoreError {
    match e {
        WalkError::NotNormal => refused(path, "root", "not an absolute path"),
        WalkError::Ancestor => refused(
            path,
            "root",
            "an ancestor is writable by others without the sticky bit or owned by another user",
        ),
        WalkError::Open(Errno::LOOP | Errno::NOTDIR) => refused(
            path,
            "root",
            "a path component is a symlink or not a directory",
        ),
        WalkError::Open(Errno::NOENT) => StoreError::NotFound {
            root: path.to_owned(),
        },
        WalkError::Open(e) => io_err(path, "open root", e),
    }
}

/// A session directory's mode: `0700` plus the sticky bit, which is the
/// store's ownership mark. `mkdirat` sets it atomically with the creation
/// (the umask never clears it), and the sweep prunes only an empty session
/// directory that carries it: a directory made by hand (`mkdir` gives no
/// sticky bit) is never removed.
pub(crate) const SESSION_DIR_MODE: u32 = 0o1700;

/// A spill file's mode: `0600` plus the sticky bit (meaningless on a
/// regular file to the kernel), the same ownership mark, set by the
/// `O_CREAT` that creates the file. The sweep deletes only marked files, so
/// a file of the user's moved under a spill name is never deleted.
pub(crate) const SPILL_FILE_MODE: u32 = 0o1600;

/// The ownership mark in a mode.
pub(crate) const MARK: u32 = 0o1000;

impl SpillStore {
    /// Opens (creating it `0700` if missing) a configured root. A root that
    /// is a symlink is resolved once; the resolved directory must pass the
    /// trust rules (owned by the current user, not group/other writable,
    /// ancestors not writable by others unless sticky).
    ///
    /// # Errors
    ///
    /// [`StoreError::Refused`] for an untrusted root, [`StoreError::Io`] or
    /// [`StoreError::NotFound`] when it cannot be created or opened.
    pub fn open(root: &Path) -> Result<Self, StoreError> {
        match fs::mkdir_configured(root, 0o700) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(io_err(root, "create root", e)),
        }
        Self::open_existing(root)
    }

    /// Opens an existing root under the same rules as [`open`](Self::open),
    /// without creating it (for readers).
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open); [`StoreError::NotFound`] if it is missing.
    pub fn open_existing(root: &Path) -> Result<Self, StoreError> {
        let uid = fs::trusting_uid();
        let canonical = std::fs::canonicalize(root).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                StoreError::NotFound {
                    root: root.to_owned(),
                }
            } else {
                StoreError::Io {
                    path: root.to_owned(),
                    op: "resolve root",
                    source,
                }
            }
        })?;
        let (_parent, _name, fd) =
            fs::open_dir_path(&canonical, uid).map_err(|e| walk_err(root, e))?;
        Self::from_fd(canonical, fd, RootOrigin::Configured, uid)
    }

    /// Creates a fresh per-process default root `<temp_dir>/<prefix><16 hex>`
    /// (mode `0700`) and holds a shared lock on it.
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidPrefix`], or as [`open`](Self::open) for the
    /// temp dir.
    pub fn create_default(temp_dir: &Path, prefix: &str) -> Result<Self, StoreError> {
        validate_prefix(prefix).map_err(|_| StoreError::InvalidPrefix)?;
        let uid = fs::trusting_uid();
        let canonical_tmp = std::fs::canonicalize(temp_dir).map_err(|source| StoreError::Io {
            path: temp_dir.to_owned(),
            op: "resolve temp dir",
            source,
        })?;
        let (_p, _n, tmp) =
            fs::open_dir_path(&canonical_tmp, uid).map_err(|e| walk_err(temp_dir, e))?;
        // The temp dir is the root's ancestor: it must be safe too.
        let tmeta = fs::stat_fd(tmp.as_fd()).map_err(|e| io_err(temp_dir, "stat temp dir", e))?;
        tmeta.trusted_ancestor_for(uid).map_err(|_| {
            refused(
                temp_dir,
                "temp dir",
                "writable by others without the sticky bit",
            )
        })?;
        for attempt in 0..WRITE_ATTEMPTS as u64 {
            let name = format!("{prefix}{}", hex::encode(&unique_bytes(attempt)[..8]));
            let cname = CString::new(name.clone()).map_err(|_| StoreError::InvalidPrefix)?;
            match fs::mkdir_at(tmp.as_fd(), &cname, 0o700) {
                Ok(()) => {}
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(io_err(temp_dir, "create default root", e)),
            }
            let fd = fs::open_dir_at(tmp.as_fd(), &cname)
                .map_err(|e| io_err(temp_dir, "open default root", e))?;
            fs::fchmod(fd.as_fd(), 0o700).map_err(|e| io_err(temp_dir, "chmod default root", e))?;
            fs::flock(fd.as_fd(), FlockOperation::LockShared)
                .map_err(|e| io_err(temp_dir, "lock default root", e))?;
            // Between mkdir and flock another process's sweep may have
            // removed the (then empty, unlocked) directory: only keep it if
            // the name still leads to the inode we locked.
            let held = fs::stat_fd(fd.as_fd()).map_err(|e| io_err(temp_dir, "stat root", e))?;
            match fs::stat_at(tmp.as_fd(), &cname) {
                Ok(now) if now.same_object(&held) => {}
                _ => continue,
            }
            return Self::from_fd(canonical_tmp.join(name), fd, RootOrigin::Default, uid);
        }
        Err(io_err(temp_dir, "create default root", Errno::EXIST))
    }

    fn from_fd(
        path: PathBuf,
        root: OwnedFd,
        origin: RootOrigin,
        uid: u32,
    ) -> Result<Self, StoreError> {
        let meta = fs::stat_fd(root.as_fd()).map_err(|e| io_err(&path, "stat root", e))?;
        if meta.trusted_dir_for(uid).is_err() {
            return Err(refused(
                &path,
                "root",
                "not owned by the current user or writable by group/others",
            ));
        }
        Ok(SpillStore {
            tag: RootTag::of_path_bytes(path.as_os_str().as_bytes()),
            path,
            root,
            meta,
            origin,
            uid,
            counter: AtomicU64::new(0),
            recreated: AtomicU64::new(0),
        })
    }

    /// The canonical root path.
    pub fn root(&self) -> &Path {
        &self.path
    }

    /// The tag that locators of this root carry.
    pub fn tag(&self) -> RootTag {
        self.tag
    }

    /// Whether the root was configured or created as a default root.
    pub fn origin(&self) -> RootOrigin {
        self.origin
    }

    /// How many times a write had to (re)create its session directory
    /// because it did not exist — including after a concurrent sweep
    /// pruned it.
    pub fn session_dirs_created(&self) -> u64 {
        self.recreated.load(Ordering::Relaxed)
    }

    /// Opens `session` under the root, creating it `0700` when missing,
    /// and checks it is a trusted directory on the root's mount.
    fn session_dir(&self, session: &CString, create: bool) -> Result<OwnedFd, StoreError> {
        for _ in 0..WRITE_ATTEMPTS {
            match fs::open_dir_at(self.root.as_fd(), session) {
                Ok(fd) => {
                    let m = fs::stat_fd(fd.as_fd())
                        .map_err(|e| io_err(&self.path, "stat session dir", e))?;
                    if !m.on_mount_of(&self.meta) {
                        return Err(refused(&self.path, "session dir", "it is a mount point"));
                    }
                    if m.trusted_dir_for(self.uid).is_err() {
                        return Err(refused(
                            &self.path,
                            "session dir",
                            "not owned by the current user or writable by group/others",
                        ));
                    }
                    return Ok(fd);
                }
                Err(Errno::NOENT) if create => {
                    match fs::mkdir_at(self.root.as_fd(), session, SESSION_DIR_MODE) {
                        Ok(()) => {
                            self.recreated.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(Errno::EXIST) => {}
                        Err(e) => return Err(io_err(&self.path, "create session dir", e)),
                    }
                }
                Err(Errno::NOENT) => {
                    return Err(StoreError::NotFound {
                        root: self.path.clone(),
                    });
                }
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    return Err(refused(
                        &self.path,
                        "session dir",
                        "it is a symlink or not a directory",
                    ));
                }
                Err(e) => return Err(io_err(&self.path, "open session dir", e)),
            }
        }
        Err(io_err(&self.path, "open session dir", Errno::NOENT))
    }

    /// Writes `bytes` as a new spilled result of `session` and returns its
    /// locator.
    ///
    /// The file is created with `O_CREAT | O_EXCL | O_NOFOLLOW`, mode
    /// `0600`. If a concurrent sweep prunes the (empty) session directory
    /// between opening it and creating the file, the directory is recreated
    /// and the write retried, so no write is lost to the sweep.
    ///
    /// # Errors
    ///
    /// [`StoreError::Locator`] for a bad session name,
    /// [`StoreError::Refused`] if the session path is a symlink, a mount
    /// point or untrusted, [`StoreError::Io`] if writing fails (the partial
    /// file is removed).
    pub fn write(&self, session: &str, bytes: &[u8]) -> Result<Locator, StoreError> {
        let (loc, mut file) = self.create(session)?;
        if let Err(source) = file.write_all(bytes) {
            drop(file);
            self.remove_own(&loc);
            return Err(StoreError::Io {
                path: self.path.clone(),
                op: "write spill file",
                source,
            });
        }
        Ok(loc)
    }

    /// Creates an empty spilled result of `session`, to be written as it
    /// arrives (a session's output, recorded while it runs): its locator
    /// and the file, open for writing. Created as by [`SpillStore::write`]
    /// (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode `0600` with the store's mark,
    /// safe against a concurrent sweep); once created it is a spilled
    /// result like any other, readable by its locator at any time (what
    /// was written so far) and expired by the sweep by its age (its last
    /// write).
    ///
    /// # Errors
    ///
    /// As [`SpillStore::write`].
    pub fn create(&self, session: &str) -> Result<(Locator, std::fs::File), StoreError> {
        locator::validate_session(session)?;
        let csession = CString::new(session).map_err(|_| LocatorError::BadSession("NUL"))?;
        for attempt in 0..WRITE_ATTEMPTS as u64 {
            let dir = self.session_dir(&csession, true)?;
            // A sweep prunes a session dir only under an exclusive lock,
            // moving it out of the root first: under the shared lock, a dir
            // still at its name stays there until the file is written.
            fs::flock(dir.as_fd(), FlockOperation::LockShared)
                .map_err(|e| io_err(&self.path, "lock session dir", e))?;
            let held =
                fs::stat_fd(dir.as_fd()).map_err(|e| io_err(&self.path, "stat session dir", e))?;
            match fs::stat_at(self.root.as_fd(), &csession) {
                Ok(now) if now.same_object(&held) => {}
                // Pruned (or being pruned) since we opened it: start over.
                _ => continue,
            }
            let mut id = [0u8; 16];
            id.copy_from_slice(
                &unique_bytes(self.counter.fetch_add(1, Ordering::Relaxed) ^ attempt)[..16],
            );
            let loc = Locator::new(self.tag, session, id);
            let fname = CString::new(loc.file_name()).expect("hex has no NUL");
            let flags =
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = match fs::open_file_at(dir.as_fd(), &fname, flags, SPILL_FILE_MODE) {
                Ok(fd) => fd,
                // The session directory was removed after we opened it
                // (a sweep pruned it while empty): recreate and retry.
                Err(Errno::NOENT) => continue,
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(io_err(&self.path, "create spill file", e)),
            };
            return Ok((loc, std::fs::File::from(fd)));
        }
        Err(io_err(&self.path, "create spill file", Errno::NOENT))
    }

    /// Removes the spilled result this store just created at `loc` (a
    /// write that failed), by name in its session directory, never
    /// following a link; a failure is ignored (the sweep expires it).
    fn remove_own(&self, loc: &Locator) {
        let Ok(session) = CString::new(loc.session()) else {
            return;
        };
        let Ok(fname) = CString::new(loc.file_name()) else {
            return;
        };
        if let Ok(dir) = self.session_dir(&session, false) {
            let _ = fs::unlink_at(dir.as_fd(), &fname);
        }
    }

    /// Reads the spilled result behind `locator`.
    ///
    /// # Errors
    ///
    /// [`StoreError::ForeignRoot`] if the locator names another root,
    /// [`StoreError::NotFound`] if it is gone (for example expired),
    /// [`StoreError::Refused`] if the session directory or file is a
    /// symlink, a special file or on another mount.
    pub fn read(&self, locator: &Locator) -> Result<Vec<u8>, StoreError> {
        if locator.root_tag() != self.tag {
            return Err(StoreError::ForeignRoot {
                found: locator.root_tag(),
                expected: self.tag,
            });
        }
        let csession =
            CString::new(locator.session()).map_err(|_| LocatorError::BadSession("NUL"))?;
        let dir = self.session_dir(&csession, false)?;
        let fname = CString::new(locator.file_name()).expect("hex has no NUL");
        let meta = match fs::stat_at(dir.as_fd(), &fname) {
            Ok(m) => m,
            Err(Errno::NOENT) => {
                return Err(StoreError::NotFound {
                    root: self.path.clone(),
                });
            }
            Err(e) => return Err(io_err(&self.path, "stat spill file", e)),
        };
        // Checked before opening so that a FIFO or device is never opened.
        if meta.kind() != Kind::File {
            return Err(refused(&self.path, "spill file", "not a regular file"));
        }
        if !meta.on_mount_of(&self.meta) {
            return Err(refused(&self.path, "spill file", "it is a mount point"));
        }
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = fs::open_file_at(dir.as_fd(), &fname, flags, 0)
            .map_err(|e| io_err(&self.path, "open spill file", e))?;
        let opened =
            fs::stat_fd(fd.as_fd()).map_err(|e| io_err(&self.path, "stat spill file", e))?;
        if !opened.same_object(&meta) {
            return Err(refused(
                &self.path,
                "spill file",
                "it changed while being opened",
            ));
        }
        let mut out = Vec::new();
        std::fs::File::from(fd)
            .read_to_end(&mut out)
            .map_err(|source| StoreError::Io {
                path: self.path.clone(),
                op: "read spill file",
                source,
            })?;
        Ok(out)
    }
}

/// 32 bytes that differ per process, per call and per clock tick.
fn unique_bytes(salt: u64) -> [u8; 32] {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut h = Sha256::new();
    h.update(nanos.to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(SEQ.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    h.update(salt.to_le_bytes());
    h.finalize().into()
}
