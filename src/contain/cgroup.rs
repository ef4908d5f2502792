//! The cgroup v2 handle and the discovery of where cgroups may be created.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use super::Unavailable;

/// `CGROUP2_SUPER_MAGIC` from `linux/magic.h`: what `fstatfs` reports for a
/// cgroup v2 mount.
const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;

/// Longest name accepted by [`CgroupName::new`].
const MAX_NAME: usize = 64;

/// Why a cgroup operation failed. Never carries a path from input.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CgroupError {
    /// `rmdir` answered `EBUSY`: the cgroup still holds a live task (or a
    /// child cgroup).
    #[error("cgroup {name} is still populated")]
    Busy {
        /// The cgroup's own name.
        name: String,
    },
    /// A name that [`CgroupName::new`] refuses.
    #[error("invalid cgroup name")]
    InvalidName,
    /// A system call failed.
    #[error("cgroup {op} failed: {source}")]
    Io {
        /// What was being done (`mkdir`, `kill`, `read_events`, ...).
        op: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

impl CgroupError {
    /// A short, stable code: `cgroup_busy`, `invalid_cgroup_name`,
    /// `cgroup_io`.
    pub fn code(&self) -> &'static str {
        match self {
            CgroupError::Busy { .. } => "cgroup_busy",
            CgroupError::InvalidName => "invalid_cgroup_name",
            CgroupError::Io { .. } => "cgroup_io",
        }
    }
}

fn io_err(op: &'static str) -> impl FnOnce(Errno) -> CgroupError {
    move |e| CgroupError::Io {
        op,
        source: e.into(),
    }
}

/// A validated cgroup directory name: 1 to 64 bytes of `[a-z0-9_-]`, not
/// starting with `cgroup` (the kernel's interface files). Never a path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CgroupName(CString);

impl CgroupName {
    /// Validates `name`.
    ///
    /// # Errors
    ///
    /// [`CgroupError::InvalidName`] for anything but 1 to 64 bytes of
    /// lowercase ASCII letters, digits, `_` and `-`, or a name starting
    /// with `cgroup`.
    pub fn new(name: &str) -> Result<Self, CgroupError> {
        let ok = !name.is_empty()
            && name.len() <= MAX_NAME
            && !name.starts_with("cgroup")
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !ok {
            return Err(CgroupError::InvalidName);
        }
        CString::new(name)
            .map(CgroupName)
            .map_err(|_| CgroupError::InvalidName)
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        // Validated ASCII.
        self.0.to_str().unwrap_or("")
    }

    fn as_c_str(&self) -> &CStr {
        &self.0
    }
}

/// Where the unified (cgroup v2) hierarchy is mounted and where this
/// process sits in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchy {
    /// The mount point (`/sys/fs/cgroup` on a pure v2 host,
    /// `/sys/fs/cgroup/unified` on a hybrid one).
    pub mount: PathBuf,
    /// This process's cgroup as a directory under the mount.
    pub own: PathBuf,
    /// Whether the own cgroup is the hierarchy's root (which is exempt from
    /// the "no internal processes" rule).
    pub own_is_root: bool,
}

impl Hierarchy {
    /// Reads `/proc/self/mountinfo` and `/proc/self/cgroup` and finds this
    /// process's cgroup in the unified hierarchy.
    ///
    /// # Errors
    ///
    /// [`Unavailable::NoCgroup2`] if no cgroup v2 is mounted, this process
    /// has no `0::` line, or its cgroup is outside every cgroup2 mount.
    pub fn discover() -> Result<Hierarchy, Unavailable> {
        let mountinfo =
            std::fs::read_to_string("/proc/self/mountinfo").map_err(|_| Unavailable::NoCgroup2)?;
        let own =
            std::fs::read_to_string("/proc/self/cgroup").map_err(|_| Unavailable::NoCgroup2)?;
        Self::from_texts(&mountinfo, &own).ok_or(Unavailable::NoCgroup2)
    }

    /// The pure part of [`Hierarchy::discover`].
    pub fn from_texts(mountinfo: &str, proc_cgroup: &str) -> Option<Hierarchy> {
        let own = parse_own_cgroup(proc_cgroup)?;
        let mounts = parse_cgroup2_mounts(mountinfo);
        // Prefer the conventional mount points, then any other.
        let rank = |m: &Path| match m.to_str() {
            Some("/sys/fs/cgroup") => 0,
            Some("/sys/fs/cgroup/unified") => 1,
            _ => 2,
        };
        let mut mounts: Vec<_> = mounts
            .into_iter()
            .filter_map(|(root, mount)| {
                // A mount of a subtree (`root` other than `/`) holds our
                // cgroup only if our path lies beneath that root.
                let rel = if root == "/" {
                    own.trim_start_matches('/').to_owned()
                } else if own == root {
                    String::new()
                } else {
                    own.strip_prefix(&root)?.strip_prefix('/')?.to_owned()
                };
                Some((mount, rel))
            })
            .collect();
        mounts.sort_by_key(|(m, _)| rank(m));
        let (mount, rel) = mounts.into_iter().next()?;
        // The kernel wrote this path; still refuse anything that is not a
        // plain downward path.
        if rel.split('/').any(|c| c == ".." || c == ".") {
            return None;
        }
        let own_is_root = rel.is_empty();
        let own = if own_is_root {
            mount.clone()
        } else {
            mount.join(&rel)
        };
        Some(Hierarchy {
            mount,
            own,
            own_is_root,
        })
    }
}

/// The `0::<path>` line of `/proc/<pid>/cgroup`: this process's cgroup in
/// the unified hierarchy, as an absolute path from the hierarchy's root.
pub(crate) fn parse_own_cgroup(text: &str) -> Option<String> {
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    // A cgroup removed under us is shown with this suffix.
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    path.starts_with('/').then(|| path.to_owned())
}

/// Every `cgroup2` mount in a `mountinfo` text as `(root, mount point)`.
pub(crate) fn parse_cgroup2_mounts(text: &str) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for line in text.lines() {
        // `id parent maj:min root mountpoint opts [optional...] - fstype src superopts`
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        if right.split(' ').next() != Some("cgroup2") {
            continue;
        }
        let mut f = left.split(' ');
        let (Some(root), Some(mount)) = (f.nth(3), f.next()) else {
            continue;
        };
        out.push((unescape(root), PathBuf::from(unescape(mount))));
    }
    out
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let v = (oct[0] - b'0') * 64 + (oct[1] - b'0') * 8 + (oct[2] - b'0');
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A cgroup v2 directory held open. Every operation is relative to the
/// descriptor.
///
/// Dropping a `Cgroup` does not remove it: call [`Cgroup::remove`] (or
/// [`Cgroup::release`]) and report what it says.
#[derive(Debug)]
pub struct Cgroup {
    dir: Arc<OwnedFd>,
    parent: Arc<OwnedFd>,
    name: CgroupName,
    /// Held while this cgroup lives under the per-process base.
    _lease: Option<BaseLease>,
    /// A request cgroup's empty process cgroups, kept for its next
    /// launches ([`Cgroup::process_child`]); `None` for other cgroups.
    spares: Option<Arc<Spares>>,
    /// Where [`Cgroup::release`] keeps this process cgroup once it is seen
    /// empty: its request cgroup's spares (weak: a spare must not keep its
    /// own list alive).
    home: Option<Weak<Spares>>,
    /// `cgroup.kill` was written here: never kept (see [`Cgroup::kill`]).
    killed: AtomicBool,
    /// A process cgroup made directly beneath the base by
    /// [`process_cgroup`] (a launch without a request): kept beneath the
    /// base by [`Cgroup::release`] while a [`SpareKeeper`] lives.
    standalone: bool,
}

/// Empty process cgroups kept beneath one request cgroup.
#[derive(Debug, Default)]
struct Spares {
    kept: Mutex<Vec<Cgroup>>,
    /// The request cgroup was killed: every process cgroup beneath it then
    /// was too, and none is kept or handed out again (see [`Cgroup::kill`]).
    killed: AtomicBool,
}

impl Spares {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Cgroup>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }
}

/// Why a kept cgroup may not serve again (logged with its code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unfit {
    /// Its name no longer links to its directory (renamed or replaced).
    Moved,
    /// A task was moved into it (or beneath it).
    Populated,
    /// It was frozen (`cgroup.freeze` written).
    Frozen,
    /// An attribute differs from what custodian created it with.
    Attribute,
    /// A child cgroup custodian did not make (or kept) is in it.
    StrayChild,
    /// One of its files could not be read.
    Unreadable,
}

impl Unfit {
    const fn code(self) -> &'static str {
        match self {
            Unfit::Moved => "cgroup_moved",
            Unfit::Populated => "cgroup_populated",
            Unfit::Frozen => "cgroup_frozen",
            Unfit::Attribute => "cgroup_attribute_changed",
            Unfit::StrayChild => "cgroup_stray_child",
            Unfit::Unreadable => "cgroup_unreadable",
        }
    }
}

/// At most this many empty process cgroups are kept beneath one request
/// cgroup.
const MAX_SPARE_PROCESS_CGROUPS: usize = 8;
/// At most this many empty request cgroups are kept beneath the base.
const MAX_SPARE_REQUEST_CGROUPS: usize = 256;
/// At most this many empty standalone process cgroups (launches without a
/// request) are kept beneath the base.
const MAX_SPARE_STANDALONE_CGROUPS: usize = 8;

/// What [`Cgroup::release`] did with a cgroup seen empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Released {
    /// `rmdir` succeeded (or it was already gone).
    Removed,
    /// Seen empty and not frozen (`cgroup.events`: `populated 0`,
    /// `frozen 0`) and kept, unchanged, for another process (or request)
    /// of this custodian process; removed with its parent, or when this
    /// process's last request cgroup is released.
    Kept,
}

/// `open(path, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)` of a cgroup v2
/// directory, checked with `fstatfs`.
fn open_cgroup_dir(at: Option<BorrowedFd<'_>>, path: &CStr) -> Result<OwnedFd, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match at {
        Some(at) => rustix::fs::openat(at, path, flags, Mode::empty())?,
        None => rustix::fs::open(path, flags, Mode::empty())?,
    };
    let st = rustix::fs::fstatfs(&fd)?;
    #[allow(clippy::unnecessary_cast)]
    if st.f_type as u64 != CGROUP2_SUPER_MAGIC {
        return Err(Errno::NOTDIR);
    }
    Ok(fd)
}

impl Cgroup {
    /// The directory descriptor, for `clone3(CLONE_INTO_CGROUP)`.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// The cgroup's own name (the last component).
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// `mkdirat(self, name)` then `openat(O_DIRECTORY | O_NOFOLLOW)`—
    /// Creates a child cgroup.
    ///
    /// # Errors
    ///
    /// [`CgroupError::Io`] with `op = "mkdir"` (`EEXIST` if the name is
    /// taken, `EACCES` if not delegated) or `"open"`.
    ///
    /// # References
    ///  - [cgroup v2](https://docs.kernel.org/admin-guide/cgroup-v2.html)
    #[doc(alias = "mkdirat")]
    pub fn child(&self, name: &CgroupName) -> Result<Cgroup, CgroupError> {
        rustix::fs::mkdirat(&*self.dir, name.as_c_str(), Mode::from_raw_mode(0o755))
            .map_err(io_err("mkdir"))?;
        let dir =
            open_cgroup_dir(Some(self.dir.as_fd()), name.as_c_str()).map_err(io_err("open"))?;
        Ok(Cgroup {
            dir: Arc::new(dir),
            parent: self.dir.clone(),
            name: name.clone(),
            _lease: None,
            spares: None,
            home: None,
            killed: AtomicBool::new(false),
            standalone: false,
        })
    }

    /// Creates a child named `<prefix><n>` with the first free `n` from a
    /// process-wide counter.
    fn fresh_child(&self, prefix: &str) -> Result<Cgroup, CgroupError> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let mut last = None;
        // A name can only be taken by a leftover of an earlier process with
        // the same pid: skip it.
        for _ in 0..16 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let name = CgroupName::new(&format!("{prefix}{n}"))?;
            match self.child(&name) {
                Err(CgroupError::Io { source, .. })
                    if source.raw_os_error() == Some(Errno::EXIST.raw_os_error()) =>
                {
                    last = Some(source);
                }
                other => return other,
            }
        }
        Err(CgroupError::Io {
            op: "mkdir",
            source: last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)),
        })
    }

    /// A cgroup for one governed process under this one (a request's
    /// cgroup): one of its empty process cgroups kept by
    /// [`Cgroup::release`] if there is one, else a fresh child.
    ///
    /// # Errors
    ///
    /// As [`Cgroup::child`].
    pub fn process_child(&self) -> Result<Cgroup, CgroupError> {
        let home = self.spares.as_ref().map(Arc::downgrade);
        let spares = self.spares.as_ref().filter(|s| !s.killed());
        // Popped one at a time, never under the list's lock: a kept cgroup
        // is verified again before it serves (a tool may have written it
        // since it was kept), and one that fails is not reused.
        while let Some(mut kept) = spares.and_then(|s| s.lock().pop()) {
            match kept.fit_for_reuse(&[]) {
                Ok(()) => {
                    kept.home = home;
                    return Ok(kept);
                }
                Err(why) => kept.discard_unfit(why),
            }
        }
        let mut cg = self.fresh_child("p")?;
        cg.home = home;
        Ok(cg)
    }

    /// `read(cgroup.events)`—Whether this cgroup is empty and not frozen
    /// (`populated 0` and `frozen 0`): a cgroup a new process may be
    /// cloned into as if it were fresh.
    fn empty_and_thawed(&self) -> bool {
        let Ok(fd) = rustix::fs::openat(
            &*self.dir,
            c"cgroup.events",
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            return false;
        };
        let mut buf = [0u8; 256];
        let Ok(n) = rustix::io::read(&fd, &mut buf) else {
            return false;
        };
        parse_populated(&buf[..n]) == Some(false) && parse_frozen(&buf[..n]) == Some(false)
    }

    /// `fstat(dir)`—The cgroup's id: the inode number of its directory,
    /// which the kernel never hands to another cgroup while this boot
    /// lasts. A workspace journals it with the request cgroup's names so
    /// that a reclaim opens that cgroup and no other
    /// ([`reopen_request_cgroup`]).
    ///
    /// # Errors
    ///
    /// [`CgroupError::Io`] with `op = "stat"`.
    pub fn id(&self) -> Result<u64, CgroupError> {
        rustix::fs::fstat(&*self.dir)
            .map(|st| st.st_ino)
            .map_err(io_err("stat"))
    }

    /// Whether this kept cgroup may serve again as if it were fresh: still
    /// linked under its name in its parent, empty (`cgroup.events`:
    /// `populated 0`, `frozen 0`; `cgroup.procs` empty), every attribute a
    /// process can write at its default (`cgroup.freeze` `0`,
    /// `cgroup.max.descendants` and `cgroup.max.depth` `max`, `cgroup.type`
    /// `domain`, `cgroup.subtree_control` empty), and no child cgroup but
    /// the `expected` ones (a request cgroup's kept process cgroups, by
    /// name and inode).
    fn fit_for_reuse(&self, expected: &[&Cgroup]) -> Result<(), Unfit> {
        let own = rustix::fs::fstat(&*self.dir).map_err(|_| Unfit::Unreadable)?;
        match rustix::fs::statat(
            &*self.parent,
            self.name.as_c_str(),
            AtFlags::SYMLINK_NOFOLLOW,
        ) {
            Ok(st) if st.st_ino == own.st_ino && st.st_dev == own.st_dev => {}
            _ => return Err(Unfit::Moved),
        }
        let events = read_all(&self.dir, c"cgroup.events").ok_or(Unfit::Unreadable)?;
        if parse_populated(&events) != Some(false) {
            return Err(Unfit::Populated);
        }
        if parse_frozen(&events) != Some(false) {
            return Err(Unfit::Frozen);
        }
        let procs = read_all(&self.dir, c"cgroup.procs").ok_or(Unfit::Unreadable)?;
        if procs.iter().any(|b| !b.is_ascii_whitespace()) {
            return Err(Unfit::Populated);
        }
        for (file, default) in [
            (c"cgroup.freeze", "0"),
            (c"cgroup.max.descendants", "max"),
            (c"cgroup.max.depth", "max"),
            (c"cgroup.type", "domain"),
            (c"cgroup.subtree_control", ""),
        ] {
            let text = read_all(&self.dir, file).ok_or(Unfit::Unreadable)?;
            if std::str::from_utf8(&text).map(str::trim) != Ok(default) {
                return Err(Unfit::Attribute);
            }
        }
        for (name, child) in child_dirs(&self.dir) {
            let known = rustix::fs::fstat(&child).ok().is_some_and(|st| {
                expected.iter().any(|e| {
                    e.name.as_c_str() == name.as_c_str()
                        && rustix::fs::fstat(&*e.dir)
                            .is_ok_and(|k| k.st_ino == st.st_ino && k.st_dev == st.st_dev)
                })
            });
            if !known {
                return Err(Unfit::StrayChild);
            }
        }
        Ok(())
    }

    /// A kept cgroup that [`Cgroup::fit_for_reuse`] refused: reported,
    /// never handed out, and removed where the kernel lets it go (an empty
    /// tree); one that holds a task, or that no longer sits under its name,
    /// is left where it is.
    fn discard_unfit(self, why: Unfit) {
        tracing::warn!(
            cgroup = self.name(),
            reason = why.code(),
            "a kept cgroup was changed; not reused"
        );
        if why == Unfit::Moved {
            // Its name may now be another cgroup's: never rmdir by it.
            return;
        }
        self.discard();
    }

    /// Ends this cgroup's use: a process cgroup of a request cgroup, or a
    /// request cgroup, that `cgroup.events` shows empty and not frozen is
    /// kept for the next process of the request (or the next request of
    /// this custodian process) instead of being removed and created again,
    /// as is a standalone process cgroup ([`process_cgroup`]) while a
    /// [`SpareKeeper`] lives; any other is removed as by
    /// [`Cgroup::remove`].
    ///
    /// A kept cgroup is verified again before it serves (see
    /// [`request_cgroup`] and [`Cgroup::process_child`]): a tool that could
    /// write cgroupfs (root, or the delegatee) may since have moved a
    /// process into it, changed one of its attributes or made a child
    /// cgroup in it, and such a cgroup is not reused. A frozen one is never
    /// kept.
    ///
    /// # Errors
    ///
    /// As [`Cgroup::remove`], with the cgroup handed back so that the
    /// caller can kill it and retry.
    pub fn release(mut self) -> Result<Released, (Cgroup, CgroupError)> {
        let killed =
            self.killed.load(Ordering::Acquire) || self.spares.as_ref().is_some_and(|s| s.killed());
        if killed {
            // Neither it nor what was beneath it when it was killed may
            // serve again.
        } else if self.spares.is_some() && self._lease.is_some() {
            if self.empty_and_thawed() {
                return Ok(keep_request_cgroup(self));
            }
        } else if self.standalone && self._lease.is_some() {
            if self.empty_and_thawed() {
                match keep_standalone_cgroup(self) {
                    Ok(released) => return Ok(released),
                    Err(back) => self = back,
                }
            }
        } else if let Some(home) = self.home.take().and_then(|w| w.upgrade()) {
            if !home.killed() && self.empty_and_thawed() {
                let mut kept = home.lock();
                if kept.len() < MAX_SPARE_PROCESS_CGROUPS {
                    kept.push(self);
                    return Ok(Released::Kept);
                }
            }
        }
        match self.remove_tree() {
            Ok(()) => Ok(Released::Removed),
            Err(e) => Err((self, e)),
        }
    }

    /// Removes a kept cgroup: its own kept process cgroups first (known,
    /// so no listing), then it, best effort.
    fn discard(self) {
        if let Some(spares) = &self.spares {
            for p in std::mem::take(&mut *spares.lock()) {
                let _ = p.remove_tree();
            }
        }
        if let Err(e) = self.remove_tree() {
            tracing::warn!(error = %e, "removing a spare cgroup failed");
        }
    }

    /// `write(cgroup.kill, "1")`—Sends `SIGKILL` to every task in this
    /// cgroup and its descendants, including tasks forked while the kill
    /// runs.
    ///
    /// # Errors
    ///
    /// [`CgroupError::Io`] (`ENOENT` before Linux 5.14).
    ///
    /// `cgroup.kill` walks processes by their leader and misses a process
    /// whose leader thread has exited while other threads run (observed on
    /// Linux 6.18), so every thread still listed afterwards is killed
    /// through a thread pidfd as well ([`Cgroup::kill_threads`]).
    ///
    /// A cgroup once killed (and every cgroup beneath it then) is never kept
    /// for reuse by [`Cgroup::release`]: Linux 6.18 kills at once a process
    /// cloned with `CLONE_INTO_CGROUP` into a cgroup whose kill count
    /// differs from the cloning process's own cgroup's (`kill_seq`, compared
    /// across the two cgroups in `cgroup_post_fork`).
    #[doc(alias = "cgroup.kill")]
    pub fn kill(&self) -> Result<(), CgroupError> {
        self.killed.store(true, Ordering::Release);
        if let Some(spares) = &self.spares {
            spares.killed.store(true, Ordering::Release);
        }
        self.write_file(c"cgroup.kill", b"1", "kill")?;
        kill_threads(&self.dir, 0);
        Ok(())
    }

    /// Sends `SIGKILL` to every thread listed in `cgroup.threads` of this
    /// cgroup and its descendants, through `pidfd_open(tid, PIDFD_THREAD)`
    /// and `pidfd_send_signal`, never to a reused id (see the code).
    /// Returns how many signals were delivered.
    pub fn kill_threads(&self) -> usize {
        kill_threads(&self.dir, 0)
    }

    /// `write(cgroup.freeze, "1"|"0")`—Freezes or thaws every task inside.
    ///
    /// # Errors
    ///
    /// [`CgroupError::Io`].
    #[doc(alias = "cgroup.freeze")]
    pub fn freeze(&self, frozen: bool) -> Result<(), CgroupError> {
        self.write_file(c"cgroup.freeze", if frozen { b"1" } else { b"0" }, "freeze")
    }

    fn write_file(&self, file: &CStr, data: &[u8], op: &'static str) -> Result<(), CgroupError> {
        let fd = rustix::fs::openat(
            &*self.dir,
            file,
            OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_err(op))?;
        rustix::io::write(&fd, data).map_err(io_err(op))?;
        Ok(())
    }

    /// Whether the kernel offers `cgroup.kill` here (Linux 5.14).
    pub fn has_kill(&self) -> bool {
        rustix::fs::accessat(
            &*self.dir,
            c"cgroup.kill",
            rustix::fs::Access::EXISTS,
            AtFlags::empty(),
        )
        .is_ok()
    }

    /// `read(cgroup.events)`—Whether any task lives in this cgroup or
    /// beneath it (`populated 1`). Zombies do not count.
    ///
    /// # Errors
    ///
    /// [`CgroupError::Io`] if the file cannot be read or has no
    /// `populated` line.
    #[doc(alias = "cgroup.events")]
    pub fn populated(&self) -> Result<bool, CgroupError> {
        let fd = rustix::fs::openat(
            &*self.dir,
            c"cgroup.events",
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_err("read_events"))?;
        let mut buf = [0u8; 256];
        let n = rustix::io::read(&fd, &mut buf).map_err(io_err("read_events"))?;
        parse_populated(&buf[..n]).ok_or(CgroupError::Io {
            op: "read_events",
            source: io::Error::from(io::ErrorKind::InvalidData),
        })
    }

    /// Starts watching `cgroup.events` (inotify `IN_MODIFY`), registered
    /// with the current tokio reactor.
    ///
    /// # Errors
    ///
    /// [`CgroupError::Io`] if inotify or `/proc/self/fd` is unavailable, or
    /// outside a tokio runtime.
    pub fn watch(&self) -> Result<EventsWatch, CgroupError> {
        // kernfs reports a change of `cgroup.events` as EPOLLPRI on any open
        // descriptor of the file (until that descriptor reads it again).
        // A plain descriptor rather than an inotify instance: closing an
        // inotify instance waits for an SRCU grace period (≈ 8 ms per
        // launch on a loaded machine); closing this costs microseconds.
        let file = rustix::fs::openat(
            &*self.dir,
            c"cgroup.events",
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_err("watch"))?;
        // Deprecated because a generic `T` may hand out another descriptor
        // later; an `OwnedFd` owns exactly one for the `AsyncFd`'s whole
        // life (as in `process::sys::register_pidfd`).
        #[allow(deprecated)]
        let fd = tokio::io::unix::AsyncFd::with_interest(file, tokio::io::Interest::PRIORITY)
            .map_err(|source| CgroupError::Io {
                op: "watch",
                source,
            })?;
        Ok(EventsWatch { fd })
    }

    /// Waits until the cgroup is observed unpopulated or `deadline` passes:
    /// `Ok(true)` when it was seen empty, `Ok(false)` at the deadline.
    /// Woken by inotify on `cgroup.events`, not by polling.
    ///
    /// # Errors
    ///
    /// As [`Cgroup::watch`] and [`Cgroup::populated`].
    pub async fn wait_unpopulated(
        &self,
        deadline: tokio::time::Instant,
    ) -> Result<bool, CgroupError> {
        // Already empty (the common case once a process settled): seen
        // empty is the answer, and no watch is needed to see it.
        if !self.populated()? {
            return Ok(true);
        }
        let mut watch = self.watch()?;
        loop {
            // Read after the watch exists, so no change can fall between.
            if !self.populated()? {
                return Ok(true);
            }
            tokio::select! {
                r = watch.changed() => r?,
                _ = tokio::time::sleep_until(deadline) => return Ok(!self.populated()?),
            }
        }
    }

    /// `rmdir` of this cgroup, relative to its parent's descriptor.
    ///
    /// # Errors
    ///
    /// [`CgroupError::Busy`] (`EBUSY`) while a task or a child cgroup is
    /// left: the caller must report it. A cgroup already gone (`ENOENT`) is
    /// removed.
    #[doc(alias = "rmdir")]
    pub fn remove(&self) -> Result<(), CgroupError> {
        match rustix::fs::unlinkat(&*self.parent, self.name.as_c_str(), AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(Errno::BUSY) => Err(CgroupError::Busy {
                name: self.name.as_str().to_owned(),
            }),
            Err(e) => Err(io_err("rmdir")(e)),
        }
    }
}

/// `PIDFD_THREAD` (Linux 6.9): a pidfd for one thread, which need not be
/// a thread-group leader.
const PIDFD_THREAD: u32 = 0o200;
/// Deepest nesting [`kill_threads`] descends into.
const MAX_DEPTH: usize = 16;

/// Reads a whole small cgroup file relative to `dir`.
fn read_all(dir: &OwnedFd, file: &CStr) -> Option<Vec<u8>> {
    let fd = rustix::fs::openat(
        dir,
        file,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match rustix::io::read(&fd, &mut buf) {
            Ok(0) => return Some(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(Errno::INTR) => {}
            Err(_) => return None,
        }
    }
}

fn ids(text: &[u8]) -> Vec<i32> {
    std::str::from_utf8(text)
        .unwrap_or("")
        .split_ascii_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect()
}

/// The thread pass of [`Cgroup::kill`].
///
/// A thread id is only signalled through a pidfd opened on it *before* the
/// list is read a second time: if the id is still listed then, the task
/// holding it is in this cgroup, and either it is the one the pidfd
/// refers to, or that one has exited (the id was reused meanwhile) and the
/// signal fails with `ESRCH`. No other process can be hit.
fn kill_threads(dir: &OwnedFd, depth: usize) -> usize {
    let mut delivered = 0;
    if let Some(first) = read_all(dir, c"cgroup.threads") {
        let fds: Vec<(i32, OwnedFd)> = ids(&first)
            .into_iter()
            .filter_map(|tid| {
                let pid = rustix::process::Pid::from_raw(tid)?;
                let flags = rustix::process::PidfdFlags::from_bits_retain(PIDFD_THREAD);
                rustix::process::pidfd_open(pid, flags)
                    .ok()
                    .map(|fd| (tid, fd))
            })
            .collect();
        if !fds.is_empty() {
            let second = read_all(dir, c"cgroup.threads").unwrap_or_default();
            let still = ids(&second);
            for (tid, fd) in fds {
                if still.contains(&tid)
                    && rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL)
                        .is_ok()
                {
                    delivered += 1;
                }
            }
        }
    }
    if depth < MAX_DEPTH {
        delivered += each_child_dir(dir, |child| kill_threads(child, depth + 1));
    }
    delivered
}

/// Calls `f` on every child cgroup directory of `dir` (opened no-follow)
/// and sums its answers.
fn each_child_dir(dir: &OwnedFd, mut f: impl FnMut(&OwnedFd) -> usize) -> usize {
    child_dirs(dir).iter().map(|(_, child)| f(child)).sum()
}

impl Cgroup {
    /// `rmdir` of every child cgroup (deepest first, at most 16 levels),
    /// then of this one. A cgroup without children is removed with one
    /// `rmdir`, without listing it.
    ///
    /// # Errors
    ///
    /// As [`Cgroup::remove`]: [`CgroupError::Busy`] if a task is left
    /// anywhere in the tree.
    pub fn remove_tree(&self) -> Result<(), CgroupError> {
        // `EBUSY` while a child cgroup (or a task) is left: then the walk.
        if let Ok(()) = self.remove() {
            return Ok(());
        }
        remove_children(&self.dir, 0)?;
        self.remove()
    }
}

fn remove_children(dir: &OwnedFd, depth: usize) -> Result<(), CgroupError> {
    if depth >= MAX_DEPTH {
        return Ok(());
    }
    let mut failure = None;
    for (name, child) in child_dirs(dir) {
        let r = remove_children(&child, depth + 1).and_then(|()| {
            match rustix::fs::unlinkat(dir, name.as_c_str(), AtFlags::REMOVEDIR) {
                // Removed meanwhile (e.g. by its process's driver).
                Ok(()) | Err(Errno::NOENT) => Ok(()),
                Err(Errno::BUSY) => Err(CgroupError::Busy {
                    name: name.to_string_lossy().into_owned(),
                }),
                Err(e) => Err(io_err("rmdir")(e)),
            }
        });
        if let Err(e) = r {
            failure.get_or_insert(e);
        }
    }
    failure.map_or(Ok(()), Err)
}

/// The child cgroup directories of `dir`, opened no-follow.
fn child_dirs(dir: &OwnedFd) -> Vec<(CString, OwnedFd)> {
    let Ok(listing) = rustix::fs::openat(
        dir,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return Vec::new();
    };
    let mut buf = Vec::with_capacity(8192);
    let mut entries = rustix::fs::RawDir::new(&listing, buf.spare_capacity_mut());
    let mut names = Vec::new();
    while let Some(Ok(e)) = entries.next() {
        if e.file_type() == rustix::fs::FileType::Directory {
            let name = e.file_name();
            if name != c"." && name != c".." {
                names.push(name.to_owned());
            }
        }
    }
    names
        .into_iter()
        .filter_map(|n| {
            let fd = open_cgroup_dir(Some(dir.as_fd()), &n).ok()?;
            Some((n, fd))
        })
        .collect()
}

fn parse_frozen(text: &[u8]) -> Option<bool> {
    let text = std::str::from_utf8(text).ok()?;
    text.lines().find_map(|l| match l.strip_prefix("frozen ")? {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    })
}

fn parse_populated(text: &[u8]) -> Option<bool> {
    let text = std::str::from_utf8(text).ok()?;
    text.lines()
        .find_map(|l| match l.strip_prefix("populated ")? {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        })
}

/// A watch on one cgroup's `cgroup.events` (EPOLLPRI on its descriptor).
#[derive(Debug)]
pub struct EventsWatch {
    fd: tokio::io::unix::AsyncFd<OwnedFd>,
}

impl EventsWatch {
    /// Waits for the next modification of `cgroup.events` (and consumes
    /// every event queued so far). Read the file afterwards.
    ///
    /// # Errors
    ///
    /// [`CgroupError::Io`] if the inotify descriptor fails.
    pub async fn changed(&mut self) -> Result<(), CgroupError> {
        let mut guard = self
            .fd
            .ready(tokio::io::Interest::PRIORITY)
            .await
            .map_err(|source| CgroupError::Io {
                op: "watch",
                source,
            })?;
        // Edge-triggered: the next change wakes the reactor again whether
        // or not this descriptor ever reads the file.
        guard.clear_ready();
        Ok(())
    }
}

/// The per-process base cgroup `custodian-<pid>` and how many cgroups live
/// under it.
#[derive(Debug, Default)]
struct BaseState {
    dir: Option<(Arc<OwnedFd>, Arc<OwnedFd>)>,
    /// Request cgroups in use (each holds a lease), and process cgroups
    /// made directly beneath the base.
    live: usize,
    /// Empty request cgroups kept for the next requests; they hold no
    /// lease, and go when the last lease does if no keeper is left.
    spares: Vec<Cgroup>,
    /// Empty standalone process cgroups kept for the next launches without
    /// a request, only while a keeper lives; no lease either.
    standalone: Vec<Cgroup>,
    /// Live [`SpareKeeper`]s.
    keepers: usize,
}

static BASE: Mutex<BaseState> = Mutex::new(BaseState {
    dir: None,
    live: 0,
    spares: Vec::new(),
    standalone: Vec::new(),
    keepers: 0,
});

/// Keeps `cg`, a request cgroup seen empty, for the next
/// [`request_cgroup`] while there is room, else removes it.
fn keep_request_cgroup(mut cg: Cgroup) -> Released {
    let lease = cg._lease.take();
    let mut base = BASE.lock().unwrap_or_else(|e| e.into_inner());
    let out = if base.dir.is_some() && base.spares.len() < MAX_SPARE_REQUEST_CGROUPS {
        base.spares.push(cg);
        drop(base);
        Released::Kept
    } else {
        drop(base);
        cg.discard();
        Released::Removed
    };
    // Last: the lease's drop takes the lock (and, the last one, removes
    // every spare and the base).
    drop(lease);
    out
}

/// Keeps `cg`, a standalone process cgroup seen empty, for the next
/// [`process_cgroup`] while a keeper lives and there is room; else hands
/// it back to be removed.
fn keep_standalone_cgroup(mut cg: Cgroup) -> Result<Released, Cgroup> {
    let mut base = BASE.lock().unwrap_or_else(|e| e.into_inner());
    if base.dir.is_none()
        || base.keepers == 0
        || base.standalone.len() >= MAX_SPARE_STANDALONE_CGROUPS
    {
        return Err(cg);
    }
    let lease = cg._lease.take();
    base.standalone.push(cg);
    drop(base);
    // Last: the lease's drop takes the lock.
    drop(lease);
    Ok(Released::Kept)
}

/// Keeps the base alive; the last lease to go removes it, best effort
/// (unless a [`SpareKeeper`] keeps the spare request cgroups).
#[derive(Debug)]
struct BaseLease;

impl Drop for BaseLease {
    fn drop(&mut self) {
        let mut base = BASE.lock().unwrap_or_else(|e| e.into_inner());
        base.live = base.live.saturating_sub(1);
        base.tidy();
    }
}

impl BaseState {
    /// With no cgroup in use: the spares go unless a keeper keeps them,
    /// and the base goes once it holds nothing.
    fn tidy(&mut self) {
        if self.live > 0 {
            return;
        }
        if self.keepers == 0 {
            // Spares hold no lease: removing them takes no lock.
            for spare in std::mem::take(&mut self.spares) {
                spare.discard();
            }
            for spare in std::mem::take(&mut self.standalone) {
                spare.discard();
            }
        }
        if self.spares.is_empty() && self.standalone.is_empty() {
            if let Some((parent, _)) = self.dir.take() {
                // Best effort: a leftover child (reported by its owner)
                // keeps the base; the next launch opens it again.
                let _ = rustix::fs::unlinkat(&*parent, base_name().as_c_str(), AtFlags::REMOVEDIR);
            }
        }
    }
}

/// While one lives, empty request cgroups released by
/// [`Cgroup::release`] are kept beneath the base for the next requests
/// even when no request is open, and so are the empty cgroups of
/// standalone launches ([`process_cgroup`], a launch without a request) for
/// the next standalone launch; the last keeper's drop removes them (and
/// the base, if nothing else is in use). A workspace holds one for its
/// lifetime; an embedder that launches processes without requests again
/// and again holds one to spare each launch a `mkdir` and `rmdir` of its
/// cgroup and of the base; its isolated launches with the network off then
/// have the next one's sandbox prepared while they run, as a request's
/// launches do (`process::spawn`, *A prepared sandbox*; as root), and the
/// last keeper's drop kills the one that waits. A process that dies leaves
/// the cgroups to [`remove_dead_bases`], as it leaves its base (a waiting
/// sandbox dies with it).
#[derive(Debug)]
#[must_use = "the spares go when the keeper is dropped"]
pub struct SpareKeeper(());

impl SpareKeeper {
    /// Takes a keeper.
    pub fn new() -> SpareKeeper {
        let mut base = BASE.lock().unwrap_or_else(|e| e.into_inner());
        base.keepers += 1;
        SpareKeeper(())
    }
}

impl Default for SpareKeeper {
    fn default() -> Self {
        SpareKeeper::new()
    }
}

impl Drop for SpareKeeper {
    fn drop(&mut self) {
        let mut base = BASE.lock().unwrap_or_else(|e| e.into_inner());
        base.keepers = base.keepers.saturating_sub(1);
        let last = base.keepers == 0;
        drop(base);
        // Outside the lock: what the hook drops may release cgroups, whose
        // leases take it.
        if last {
            if let Some(hook) = LAST_KEEPER_GONE.get() {
                hook();
            }
        }
        BASE.lock().unwrap_or_else(|e| e.into_inner()).tidy();
    }
}

/// What else goes with the last [`SpareKeeper`]: set once, by the
/// launches that prepare sandboxes for the next launch without a request
/// (`process::spawn`, *A prepared sandbox*), which are kept while a keeper
/// lives.
static LAST_KEEPER_GONE: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Sets what runs (outside every lock of this module) when the last
/// [`SpareKeeper`] is dropped; only the first call sets it.
pub(crate) fn on_last_keeper(hook: fn()) {
    let _ = LAST_KEEPER_GONE.set(hook);
}

/// Whether a [`SpareKeeper`] lives now.
pub(crate) fn keeper_lives() -> bool {
    BASE.lock().unwrap_or_else(|e| e.into_inner()).keepers > 0
}

fn base_name() -> CgroupName {
    // "custodian-" + at most 10 digits: always valid.
    CgroupName::new(&format!("custodian-{}", std::process::id()))
        .unwrap_or_else(|_| CgroupName(CString::from(c"custodian")))
}

/// Discovers the hierarchy now (reads `/proc/self/mountinfo` and
/// `/proc/self/cgroup`) unless done already, so that the first cgroup a
/// launch makes does not wait for it.
pub(crate) fn discover_once() {
    let _ = hierarchy();
}

/// The hierarchy, discovered once per process.
fn hierarchy() -> Result<&'static Hierarchy, Unavailable> {
    static H: OnceLock<Result<Hierarchy, Unavailable>> = OnceLock::new();
    H.get_or_init(Hierarchy::discover).as_ref().map_err(|e| *e)
}

fn unavailable_from(e: Errno) -> Unavailable {
    match e {
        Errno::ACCESS | Errno::PERM | Errno::ROFS => Unavailable::NotDelegated,
        Errno::NOENT | Errno::NOTDIR => Unavailable::NoCgroup2,
        _ => Unavailable::SetupFailed,
    }
}

/// Opens the own cgroup of `h` and checks that children may be created
/// there.
fn open_own(h: &Hierarchy) -> Result<OwnedFd, Unavailable> {
    let path =
        CString::new(h.own.as_os_str().as_encoded_bytes()).map_err(|_| Unavailable::NoCgroup2)?;
    let own = open_cgroup_dir(None, &path).map_err(unavailable_from)?;
    if !h.own_is_root {
        let mut buf = [0u8; 512];
        let fd = rustix::fs::openat(
            &own,
            c"cgroup.subtree_control",
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(unavailable_from)?;
        let n = rustix::io::read(&fd, &mut buf).map_err(unavailable_from)?;
        if buf[..n].iter().any(|b| !b.is_ascii_whitespace()) {
            return Err(Unavailable::InternalProcessRule);
        }
    }
    Ok(own)
}

/// Runs `f` on the base cgroup (created if needed) and takes a lease.
fn with_base<T>(
    f: impl FnOnce(&Cgroup) -> Result<T, CgroupError>,
) -> Result<(T, BaseLease), Unavailable> {
    let h = hierarchy()?;
    let mut base = BASE.lock().unwrap_or_else(|e| e.into_inner());
    let (own, dir) = match &base.dir {
        Some(pair) => pair.clone(),
        None => {
            let own = Arc::new(open_own(h)?);
            let dir = Arc::new(open_locked_base(&own)?);
            base.dir = Some((own.clone(), dir.clone()));
            (own, dir)
        }
    };
    let handle = Cgroup {
        dir,
        parent: own,
        name: base_name(),
        _lease: None,
        spares: None,
        home: None,
        killed: AtomicBool::new(false),
        standalone: false,
    };
    let out = if handle.has_kill() {
        f(&handle).map_err(|e| match e {
            CgroupError::Io { source, .. } => source
                .raw_os_error()
                .map(Errno::from_raw_os_error)
                .map_or(Unavailable::SetupFailed, unavailable_from),
            _ => Unavailable::SetupFailed,
        })
    } else {
        Err(Unavailable::NoCgroupKill)
    };
    match out {
        Ok(out) => {
            base.live += 1;
            Ok((out, BaseLease))
        }
        Err(why) => {
            // Nothing lives under a base we may just have created: do not
            // leave it behind.
            if base.live == 0 {
                base.dir = None;
                let _ = rustix::fs::unlinkat(
                    &*handle.parent,
                    handle.name.as_c_str(),
                    AtFlags::REMOVEDIR,
                );
            }
            Err(why)
        }
    }
}

/// Creates (or reuses) this process's base cgroup beneath `own`, opens it
/// and takes a shared `flock` on it for as long as the descriptor lives: the
/// proof, for [`remove_dead_bases`] in another process, that the base is in
/// use even where that process cannot see our pid (another pid namespace).
/// A sweeper may hold its exclusive lock for the moment it removes a base
/// whose pid it saw dead; the lock is then retried, and a base removed
/// meanwhile is created again.
fn open_locked_base(own: &OwnedFd) -> Result<OwnedFd, Unavailable> {
    let name = base_name();
    for _ in 0..100 {
        match rustix::fs::mkdirat(own, name.as_c_str(), Mode::from_raw_mode(0o755)) {
            // A leftover of an earlier process with our pid: reuse it.
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(unavailable_from(e)),
        }
        let dir = match open_cgroup_dir(Some(own.as_fd()), name.as_c_str()) {
            Ok(fd) => fd,
            // Removed by a sweeper between our mkdir and open.
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(unavailable_from(e)),
        };
        match rustix::fs::flock(&dir, rustix::fs::FlockOperation::NonBlockingLockShared) {
            Ok(()) => {}
            Err(Errno::WOULDBLOCK | Errno::INTR) => {
                std::thread::sleep(std::time::Duration::from_millis(1));
                continue;
            }
            Err(e) => return Err(unavailable_from(e)),
        }
        // Locked: still the directory under that name (a sweeper that held
        // the lock may have removed it)?
        let linked = rustix::fs::statat(own, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW);
        let ours = rustix::fs::fstat(&dir);
        match (linked, ours) {
            (Ok(a), Ok(b)) if a.st_ino == b.st_ino && a.st_dev == b.st_dev => return Ok(dir),
            (Err(Errno::NOENT), _) | (Ok(_), Ok(_)) => continue,
            (Err(e), _) | (_, Err(e)) => return Err(unavailable_from(e)),
        }
    }
    Err(Unavailable::SetupFailed)
}

/// What [`remove_dead_bases`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadBases {
    /// Base cgroups of dead custodian processes removed (with their empty
    /// children).
    pub removed: u32,
    /// Base cgroups of dead custodian processes kept: still populated (a
    /// process of theirs is alive) or not removable here.
    pub kept: u32,
}

/// `kill(pid, 0)`, `openat(O_DIRECTORY | O_NOFOLLOW)`, `flock(LOCK_EX |
/// LOCK_NB)`, `unlinkat(AT_REMOVEDIR)`—Removes the base cgroups
/// `custodian-<pid>` that custodian processes which have died left beside
/// this process's own base (a SIGKILLed node, an embedder that exited while
/// it held one), each with its empty request and process cgroups.
///
/// A base counts as dead only when both proofs hold: no process with that
/// pid exists here (`ESRCH`), **and** no process holds the shared lock that
/// every custodian process takes on its own base while it uses it (that
/// covers a live one in another pid namespace sharing this cgroup). The
/// kernel refuses to remove a cgroup that still holds a task or a child, so
/// a base with a live process beneath (a dead node's escaped process, left
/// for the reclaim of its journal) is kept and counted. Nothing is killed.
///
/// # Errors
///
/// [`Unavailable`] when the cgroup tier cannot be used here.
///
/// # Caveats
///
/// A base left by a version without the lock, whose pid a live process
/// (any) has since taken, is kept until that pid is free again.
///
/// # References
///
/// [cgroups(7)](https://man7.org/linux/man-pages/man7/cgroups.7.html),
/// [flock(2)](https://man7.org/linux/man-pages/man2/flock.2.html),
/// [kill(2)](https://man7.org/linux/man-pages/man2/kill.2.html)
#[doc(alias = "flock")]
pub fn remove_dead_bases() -> Result<DeadBases, Unavailable> {
    let h = hierarchy()?;
    let own = open_own(h)?;
    let mine = std::process::id();
    let mut out = DeadBases::default();
    for (name, dir) in child_dirs(&own) {
        let Some(pid) = name
            .to_str()
            .ok()
            .and_then(|n| n.strip_prefix("custodian-"))
            .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse::<i32>().ok())
        else {
            continue;
        };
        if pid as u32 == mine {
            continue;
        }
        let alive = match rustix::process::Pid::from_raw(pid) {
            Some(p) => !matches!(rustix::process::test_kill_process(p), Err(Errno::SRCH)),
            None => true,
        };
        if alive {
            continue;
        }
        if rustix::fs::flock(&dir, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            continue;
        }
        let removed = remove_children(&dir, 0).and_then(|()| {
            match rustix::fs::unlinkat(&own, name.as_c_str(), AtFlags::REMOVEDIR) {
                Ok(()) | Err(Errno::NOENT) => Ok(()),
                Err(e) => Err(io_err("rmdir")(e)),
            }
        });
        match removed {
            Ok(()) => out.removed += 1,
            Err(_) => out.kept += 1,
        }
    }
    Ok(out)
}

/// A fresh cgroup `custodian-<pid>/p<n>` for one governed process.
///
/// # Errors
///
/// [`Unavailable`] with the reason the cgroup tier cannot be used here.
///
/// While a [`SpareKeeper`] lives, one released empty by
/// [`Cgroup::release`] is kept beneath the base and handed out here again
/// instead of a fresh one, once verified as fit as a fresh one (see
/// [`Cgroup::release`]).
pub fn process_cgroup() -> Result<Cgroup, Unavailable> {
    if let Some(kept) = reuse_spare(|b| b.standalone.pop(), false) {
        return Ok(kept);
    }
    let (mut cg, lease) = with_base(|b| b.fresh_child("p"))?;
    cg._lease = Some(lease);
    cg.standalone = true;
    Ok(cg)
}

/// Pops kept cgroups with `pick` until one is fit to serve again (with a
/// lease taken for it); an unfit one is discarded. `None` when no kept one
/// is left. A request cgroup (`with_children`) may hold its own kept
/// process cgroups, and no other child.
fn reuse_spare(
    pick: impl Fn(&mut BaseState) -> Option<Cgroup>,
    with_children: bool,
) -> Option<Cgroup> {
    loop {
        let mut base = BASE.lock().unwrap_or_else(|e| e.into_inner());
        let mut kept = pick(&mut base)?;
        base.live += 1;
        drop(base);
        kept._lease = Some(BaseLease);
        // Verified outside the lock: a tool may have written it since it
        // was kept. One that fails is discarded (its lease goes with it)
        // and the next spare, or a fresh cgroup, serves instead.
        let fit = if with_children {
            let spares = kept.spares.as_ref().map(|s| s.lock());
            let expected: Vec<&Cgroup> = spares.iter().flat_map(|s| s.iter()).collect();
            kept.fit_for_reuse(&expected)
        } else {
            kept.fit_for_reuse(&[])
        };
        match fit {
            Ok(()) => return Some(kept),
            Err(why) => kept.discard_unfit(why),
        }
    }
}

/// A cgroup `custodian-<pid>/r<n>` for one request: an empty one kept by
/// [`Cgroup::release`] if there is one, else a fresh one. Its processes'
/// cgroups are created (or reused) beneath it with
/// [`Cgroup::process_child`].
///
/// # Errors
///
/// As [`process_cgroup`].
pub fn request_cgroup() -> Result<Cgroup, Unavailable> {
    if let Some(kept) = reuse_spare(|b| b.spares.pop(), true) {
        return Ok(kept);
    }
    let (mut cg, lease) = with_base(|b| b.fresh_child("r"))?;
    cg._lease = Some(lease);
    cg.spares = Some(Arc::default());
    Ok(cg)
}

/// The name of this process's base cgroup (`custodian-<pid>`), beneath
/// which [`request_cgroup`] creates request cgroups (`r<n>`). A workspace
/// journals it with the request cgroup's name so that a later process can
/// find the request cgroup with [`reopen_request_cgroup`].
pub fn base_cgroup_name() -> CgroupName {
    base_name()
}

/// Why a request cgroup named by a journal is not honoured by
/// [`reopen_request_cgroup`]. A journal lies inside a tree that tools may
/// write, so its record is an input: whatever it names that fails one of
/// these checks is reported, never killed or removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum UntrustedCgroup {
    /// The names are not of custodian's own making: the base is not
    /// exactly `custodian-<pid>` and the cgroup not exactly `r<n>`
    /// (decimal, no leading zero, no other byte).
    #[error("the journalled cgroup is not named as custodian names request cgroups")]
    NotCustodianName,
    /// The base may belong to a live process: a process has its pid (this
    /// one included), or a custodian process holds the lock on it. Its
    /// request cgroups are that process's, never a reclaim's.
    #[error("the journalled cgroup's base may belong to a live process")]
    BaseInUse,
    /// The cgroup under that name is not the one the journal recorded (its
    /// id differs): it was removed and another made under its name.
    #[error("the journalled cgroup's identity does not match")]
    IdentityMismatch,
}

impl UntrustedCgroup {
    /// A short, stable code for logs: `cgroup_not_custodian_name`,
    /// `cgroup_base_in_use`, `cgroup_identity_mismatch`.
    pub const fn code(self) -> &'static str {
        match self {
            UntrustedCgroup::NotCustodianName => "cgroup_not_custodian_name",
            UntrustedCgroup::BaseInUse => "cgroup_base_in_use",
            UntrustedCgroup::IdentityMismatch => "cgroup_identity_mismatch",
        }
    }
}

/// Why [`reopen_request_cgroup`] opened nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReopenError {
    /// The record is not honoured: nothing was (or will be) killed or
    /// removed for it.
    #[error(transparent)]
    Untrusted(#[from] UntrustedCgroup),
    /// The cgroup tier cannot be used here, or a directory could not be
    /// opened.
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
}

/// `custodian-<pid>` with `<pid>` a decimal in `1..=i32::MAX`, no leading
/// zero: the pid.
fn parse_base_name(b: &[u8]) -> Option<i32> {
    let digits = b.strip_prefix(b"custodian-")?;
    parse_decimal(digits).and_then(|n| i32::try_from(n).ok())
}

/// A decimal without sign, leading zero or any other byte, at least 1.
fn parse_decimal(d: &[u8]) -> Option<u64> {
    if d.is_empty() || d.len() > 19 || d[0] == b'0' || !d.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(d).ok()?.parse().ok()
}

/// Checks the names a journal's cgroup record holds against the only shape
/// custodian writes: the base `custodian-<pid>` and the request cgroup
/// `r<n>`.
///
/// # Errors
///
/// [`UntrustedCgroup::NotCustodianName`] for anything else (`..`, a path,
/// another prefix, `p<n>`, a leading zero, a byte too many).
pub fn check_request_record(
    base: &[u8],
    name: &[u8],
) -> Result<(CgroupName, CgroupName), UntrustedCgroup> {
    let bad = UntrustedCgroup::NotCustodianName;
    parse_base_name(base).ok_or(bad)?;
    name.strip_prefix(b"r").and_then(parse_decimal).ok_or(bad)?;
    let as_name = |b: &[u8]| {
        std::str::from_utf8(b)
            .ok()
            .and_then(|s| CgroupName::new(s).ok())
            .ok_or(bad)
    };
    Ok((as_name(base)?, as_name(name)?))
}

/// `kill(pid, 0)`, `openat(own, base, O_DIRECTORY | O_NOFOLLOW)`,
/// `flock(LOCK_EX | LOCK_NB)`, then `openat(base, name, …)` and
/// `fstat`—Opens the request
/// cgroup `<own cgroup>/<base>/<name>` that an earlier process (a node that
/// died) created with [`request_cgroup`] and journalled, to kill what is
/// left in it and remove it. One validated component at a time below this
/// process's own cgroup; nothing is created.
///
/// The record comes from a journal, which tools may be able to write, so
/// it is honoured only when every check holds: the names are of
/// custodian's own shape ([`check_request_record`]), the base is not in
/// use (no process has the pid it is named for, and no custodian process
/// holds its lock: this process's own base is always in use), and, where
/// the journal recorded the cgroup's id
/// (`id`), the directory found is that cgroup. The exclusive lock on the
/// base is held by the returned handle until it is dropped, so no process
/// can take that base up while the reclaim works in it.
///
/// Returns `Ok(None)` when either directory is gone (nothing is left).
///
/// # Errors
///
/// [`ReopenError::Untrusted`] when a check fails: the caller must report
/// it and must not kill or remove anything for it;
/// [`ReopenError::Unavailable`] when the hierarchy cannot be used here, or
/// a directory cannot be opened for another reason.
///
/// # Caveats
///
/// The process must sit in the same cgroup as the one that created it (a
/// node restarted by the same supervisor does); from another cgroup the
/// request cgroup is not found and `Ok(None)` is returned. A tool with
/// write access to cgroupfs can still make, beside this process's base, a
/// cgroup of custodian's naming and forge a journal naming it (with its id):
/// that tool is unconfined and as strong as custodian itself.
#[doc(alias = "flock")]
pub fn reopen_request_cgroup(
    base: &[u8],
    name: &[u8],
    id: Option<u64>,
) -> Result<Option<Cgroup>, ReopenError> {
    let (base, name) = check_request_record(base, name)?;
    // The pid the base is named for must be free, as for
    // `remove_dead_bases` (a base whose pid was since reused is then
    // refused: kept, never guessed).
    let pid = parse_base_name(base.as_str().as_bytes()).and_then(rustix::process::Pid::from_raw);
    match pid.map(rustix::process::test_kill_process) {
        Some(Err(Errno::SRCH)) => {}
        _ => return Err(UntrustedCgroup::BaseInUse.into()),
    }
    let h = hierarchy()?;
    let path =
        CString::new(h.own.as_os_str().as_encoded_bytes()).map_err(|_| Unavailable::NoCgroup2)?;
    let own = open_cgroup_dir(None, &path).map_err(unavailable_from)?;
    let base_fd = match open_cgroup_dir(Some(own.as_fd()), base.as_c_str()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(unavailable_from(e).into()),
    };
    // Every live custodian process holds a shared lock on its own base
    // (this one too, on its own, through another open file description).
    match rustix::fs::flock(
        &base_fd,
        rustix::fs::FlockOperation::NonBlockingLockExclusive,
    ) {
        Ok(()) => {}
        Err(Errno::WOULDBLOCK) => return Err(UntrustedCgroup::BaseInUse.into()),
        Err(e) => return Err(unavailable_from(e).into()),
    }
    let dir = match open_cgroup_dir(Some(base_fd.as_fd()), name.as_c_str()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(unavailable_from(e).into()),
    };
    if let Some(id) = id {
        let st = rustix::fs::fstat(&dir).map_err(unavailable_from)?;
        if st.st_ino != id {
            return Err(UntrustedCgroup::IdentityMismatch.into());
        }
    }
    Ok(Some(Cgroup {
        dir: Arc::new(dir),
        parent: Arc::new(base_fd),
        name,
        _lease: None,
        spares: None,
        home: None,
        killed: AtomicBool::new(false),
        standalone: false,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
25 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
31 25 0:26 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw
42 31 0:39 / /sys/fs/cgroup/pids rw shared:11 - cgroup cgroup rw,pids
";

    #[test]
    fn a_hybrid_host_finds_the_unified_mount_and_the_own_cgroup() {
        let h = Hierarchy::from_texts(HYBRID, "9:pids:/\n0::/\n").unwrap();
        assert_eq!(h.mount, Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(h.own, Path::new("/sys/fs/cgroup/unified"));
        assert!(h.own_is_root);
        let h = Hierarchy::from_texts(HYBRID, "0::/user.slice/a b.scope\n").unwrap();
        assert_eq!(
            h.own,
            Path::new("/sys/fs/cgroup/unified/user.slice/a b.scope")
        );
        assert!(!h.own_is_root);
    }

    #[test]
    fn a_pure_v2_host_is_preferred_and_escapes_are_undone() {
        let text = "\
30 1 0:25 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw
50 1 0:25 / /mnt/with\\040space rw - cgroup2 cgroup2 rw
";
        let h = Hierarchy::from_texts(text, "0::/x\n").unwrap();
        assert_eq!(h.mount, Path::new("/sys/fs/cgroup"));
        let mounts = parse_cgroup2_mounts(text);
        assert_eq!(mounts[1].1, Path::new("/mnt/with space"));
    }

    #[test]
    fn a_subtree_mount_only_holds_cgroups_beneath_its_root() {
        let text = "30 1 0:25 /a /c rw - cgroup2 cgroup2 rw\n";
        let h = Hierarchy::from_texts(text, "0::/a/b\n").unwrap();
        assert_eq!(h.own, Path::new("/c/b"));
        assert!(Hierarchy::from_texts(text, "0::/ab\n").is_none());
        assert!(Hierarchy::from_texts(text, "0::/z\n").is_none());
    }

    #[test]
    fn without_cgroup2_or_a_0_line_there_is_no_hierarchy() {
        let v1_only = "42 31 0:39 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n";
        assert!(Hierarchy::from_texts(v1_only, "0::/\n").is_none());
        assert!(Hierarchy::from_texts(HYBRID, "9:pids:/\n").is_none());
        assert!(Hierarchy::from_texts(HYBRID, "0::relative\n").is_none());
        assert!(Hierarchy::from_texts(HYBRID, "0::/a/../b\n").is_none());
        assert_eq!(
            parse_own_cgroup("0::/gone (deleted)\n").as_deref(),
            Some("/gone")
        );
    }

    #[test]
    fn names_are_validated_never_paths() {
        for bad in [
            "",
            "..",
            ".",
            "a/b",
            "cgroup.kill",
            "cgroupx",
            "A",
            "a b",
            &"x".repeat(65),
        ] {
            assert!(CgroupName::new(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["p1", "custodian-42", "r_7", &"x".repeat(64)] {
            assert_eq!(CgroupName::new(good).unwrap().as_str(), good);
        }
    }

    /// Real cgroups, where this host lets us create them.
    #[tokio::test]
    async fn a_process_cgroup_is_created_watched_killed_and_removed() {
        let cg = match process_cgroup() {
            Ok(cg) => cg,
            Err(e) => {
                skipped!("no writable cgroup v2 here ({})", e.code());
                return;
            }
        };
        assert!(cg.name().starts_with('p'));
        assert!(!cg.populated().unwrap());
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
        assert!(cg.wait_unpopulated(deadline).await.unwrap());
        cg.kill().unwrap();
        let other = process_cgroup().unwrap();
        assert_ne!(other.name(), cg.name());
        cg.remove().unwrap();
        other.remove().unwrap();
        // Removing twice is not an error: it is gone.
        cg.remove().unwrap();
    }

    /// The watch is what wakes settlement: it must fire when a process in
    /// the cgroup dies, without the watcher ever reading the file.
    #[cfg(target_arch = "x86_64")]
    #[tokio::test]
    async fn the_watch_wakes_when_the_last_process_dies() {
        use crate::process::spawn::{SpawnSpec, spawn, supported};
        let cg = match process_cgroup() {
            Ok(cg) if supported() => cg,
            _ => {
                skipped!("no writable cgroup v2 or no clone3 here");
                return;
            }
        };
        let mut watch = cg.watch().unwrap();
        let null =
            rustix::fs::open("/dev/null", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()).unwrap();
        let argv = [CString::new("sleep").unwrap(), CString::new("30").unwrap()];
        let child = spawn(&SpawnSpec {
            program: c"/bin/sleep",
            argv: &argv,
            envp: &[],
            cwd: None,
            stdin: null.as_fd(),
            stdout: null.as_fd(),
            stderr: null.as_fd(),
            new_process_group: true,
            default_sigint: false,
            terminal: false,
            cgroup: Some(cg.as_fd()),
            confine: None,
            isolate: None,
        })
        .unwrap();
        assert!(cg.populated().unwrap());
        // Drain the change that the spawn itself caused (populated 1).
        let drain = std::time::Duration::from_millis(200);
        let _ = tokio::time::timeout(drain, watch.changed()).await;
        cg.kill().unwrap();
        let woke = tokio::time::timeout(std::time::Duration::from_secs(5), watch.changed()).await;
        assert!(woke.is_ok(), "no wake-up within 5 s of cgroup.kill");
        let _ = rustix::process::waitid(
            rustix::process::WaitId::PidFd(child.pidfd.as_fd()),
            rustix::process::WaitIdOptions::EXITED,
        );
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        assert!(cg.wait_unpopulated(deadline).await.unwrap());
        cg.remove().unwrap();
    }

    /// Kept cgroups are reused only empty and thawed; they go with their
    /// keeper.
    #[test]
    fn an_empty_process_cgroup_is_kept_for_the_next_and_a_frozen_one_is_not() {
        let keeper = SpareKeeper::new();
        let request = match request_cgroup() {
            Ok(cg) => cg,
            Err(e) => {
                skipped!("no writable cgroup v2 here ({})", e.code());
                return;
            }
        };
        let first = request.process_child().unwrap();
        let name = first.name().to_owned();
        assert_eq!(first.release().unwrap(), Released::Kept);
        let again = request.process_child().unwrap();
        assert_eq!(
            again.name(),
            name,
            "the kept cgroup was not handed out again"
        );

        // Frozen (by whoever can write its `cgroup.freeze`): removed, never
        // kept, and the next launch gets a fresh one.
        again.freeze(true).unwrap();
        assert_eq!(again.release().unwrap(), Released::Removed);
        let fresh = request.process_child().unwrap();
        assert_ne!(fresh.name(), name);
        assert_eq!(fresh.release().unwrap(), Released::Kept);

        // (That the request cgroup itself serves the next request is
        // checked in `tests/workspace/containment.rs`, in a process of its
        // own: here other tests share the pool.)
        assert!(matches!(
            request.release(),
            Ok(Released::Kept | Released::Removed)
        ));
        drop(keeper);
    }

    #[test]
    fn only_custodians_own_request_cgroup_names_are_honoured() {
        assert!(check_request_record(b"custodian-4242", b"r7").is_ok());
        assert!(check_request_record(b"custodian-1", b"r1").is_ok());
        for (base, name) in [
            (&b"custodian-4242"[..], &b"p7"[..]),
            (b"custodian-4242", b".."),
            (b"custodian-4242", b"r07"),
            (b"custodian-4242", b"r"),
            (b"custodian-4242", b"r7/p1"),
            (b"custodian-4242", b"r7x"),
            (b"custodian-04242", b"r7"),
            (b"custodian-", b"r7"),
            (b"custodian-4242/..", b"r7"),
            (b"..", b"r7"),
            (b"/sys/fs/cgroup", b"r7"),
            (b"victim", b"r7"),
            (b"custodian-99999999999", b"r7"),
            (b"custodian-4242", b"r1\0"),
        ] {
            assert_eq!(
                check_request_record(base, name).err(),
                Some(UntrustedCgroup::NotCustodianName),
                "{:?}/{:?} honoured",
                String::from_utf8_lossy(base),
                String::from_utf8_lossy(name)
            );
        }
    }

    /// A journal naming this very process's base (or any live custodian's)
    /// is refused before anything beneath it is opened.
    #[test]
    fn a_record_naming_a_live_base_is_refused() {
        let request = match request_cgroup() {
            Ok(cg) => cg,
            Err(e) => {
                skipped!("no writable cgroup v2 here ({})", e.code());
                return;
            }
        };
        let id = request.id().unwrap();
        let r = reopen_request_cgroup(
            base_cgroup_name().as_str().as_bytes(),
            request.name().as_bytes(),
            Some(id),
        );
        assert_eq!(
            r.err(),
            Some(ReopenError::Untrusted(UntrustedCgroup::BaseInUse))
        );
        request.remove().unwrap();
    }

    #[test]
    fn populated_is_read_from_the_events_text() {
        assert_eq!(parse_populated(b"populated 1\nfrozen 0\n"), Some(true));
        assert_eq!(parse_populated(b"frozen 0\npopulated 0\n"), Some(false));
        assert_eq!(parse_populated(b"frozen 0\n"), None);
        assert_eq!(parse_populated(b"populated 2\n"), None);
        assert_eq!(parse_frozen(b"populated 0\nfrozen 1\n"), Some(true));
        assert_eq!(parse_frozen(b"populated 0\nfrozen 0\n"), Some(false));
        assert_eq!(parse_frozen(b"populated 0\n"), None);
    }
}
