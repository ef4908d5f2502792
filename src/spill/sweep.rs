//! The ctx-free sweep mechanics: [`sweep_spill_roots`] and
//! [`discover_default_roots`]. No service, no runtime, no clock: the caller
//! passes the cutoff.
//!
//! Two threads share the work, each in session dirs of its own (two
//! threads renaming out of one directory wait on its lock): the second
//! takes every other session dir whole, on its own descriptors (the
//! in-place `statx` and the removal of what expired, through its own
//! quarantine, `.sweep-<pid>-<n>` like the first's), while the sweeping
//! thread does the next one the same way; then the sweeping thread applies
//! what each found and did to the report in listing order and prunes the
//! emptied dirs, so the report and the warnings are those of a sequential
//! sweep. A session dir of at least `SPLIT_LARGE` entries is split in
//! halves between the two threads instead. The removal protocol is
//! `crate::fs`'s, per file, in either thread.

use std::collections::HashSet;
use std::ffi::CString;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{SystemTime, UNIX_EPOCH};

use super::escape;
use super::locator::{is_spill_file_name, validate_session_bytes};
use super::report::{RootKind, RootReport, SkipReason, SpillWarning, SweepReport, WarningSink};
use super::store::MARK;
use crate::fs::{
    self, Entry, Errno, FileKind as Kind, FlockOperation, Removal, Settled, Stat as Meta,
    Untrusted, WalkError,
};

/// Where to look for prior per-process default roots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovery {
    /// The temp dir holding default roots.
    pub temp_dir: PathBuf,
    /// The default-root name prefix, e.g. `custodian-spill-`.
    pub prefix: String,
}

/// What one sweep covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SweepPlan {
    /// Configured roots: scanned, never removed. A symlink here is resolved
    /// once and its target must be trusted.
    pub configured_roots: Vec<PathBuf>,
    /// The running store's root: scanned, never removed.
    pub active_root: Option<PathBuf>,
    /// Prior default roots to discover, if any.
    pub discovery: Option<Discovery>,
    /// Regular spill files whose mtime is strictly older than this are
    /// deleted.
    pub cutoff: SystemTime,
    /// List what would be deleted; delete nothing.
    pub dry_run: bool,
    /// Extra directories (e.g. the workspace) that must never be a root,
    /// nor have an ancestor used as a root; `/`, `$HOME` and the current
    /// directory are always protected.
    pub protected: Vec<PathBuf>,
}

impl SweepPlan {
    /// A plan for `cutoff` with no roots, no discovery and no dry run.
    pub fn new(cutoff: SystemTime) -> Self {
        SweepPlan {
            configured_roots: Vec::new(),
            active_root: None,
            discovery: None,
            cutoff,
            dry_run: false,
            protected: Vec::new(),
        }
    }
}

/// Lists the prior default roots under `temp_dir`: entries whose name
/// starts with `prefix` and that are real directories (symlinks and other
/// entries are rejected), as paths.
///
/// # Errors
///
/// An I/O error if the temp dir cannot be opened or listed, or
/// `PermissionDenied` if it (or an ancestor) fails the trust rules.
pub fn discover_default_roots(temp_dir: &Path, prefix: &str) -> std::io::Result<Vec<PathBuf>> {
    let uid = fs::trusting_uid();
    let (tmp, tmp_path) = open_temp_dir(temp_dir, uid).map_err(|e| match e {
        WalkError::Open(e) => std::io::Error::from(e),
        _ => std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "temp dir or an ancestor fails the trust rules",
        ),
    })?;
    let mut buf = vec![MaybeUninit::uninit(); 32 * 1024];
    let mut entries = Vec::new();
    fs::list(tmp.as_fd(), &mut buf, &mut entries)?;
    let mut out = Vec::new();
    for e in entries {
        if !e.name.to_bytes().starts_with(prefix.as_bytes()) {
            continue;
        }
        if fs::stat_at(tmp.as_fd(), &e.name).is_ok_and(|m| m.kind() == Kind::Dir) {
            out.push(tmp_path.join(std::ffi::OsStr::from_bytes(e.name.to_bytes())));
        }
    }
    out.sort();
    Ok(out)
}

fn open_temp_dir(temp_dir: &Path, uid: u32) -> Result<(OwnedFd, PathBuf), WalkError> {
    let canonical = std::fs::canonicalize(temp_dir)
        .map_err(|e| WalkError::Open(Errno::from_io_error(&e).unwrap_or(Errno::IO)))?;
    let (_p, _n, fd) = fs::open_dir_path(&canonical, uid)?;
    let m = fs::stat_fd(fd.as_fd()).map_err(WalkError::Open)?;
    // The temp dir is every discovered root's parent: the ancestor rule.
    m.trusted_ancestor_for(uid)
        .map_err(|_| WalkError::Ancestor)?;
    Ok((fd, canonical))
}

/// Runs one sweep over `plan`. Never fails: every filesystem and sink
/// failure becomes a warning in the report (and in `sink`).
pub fn sweep_spill_roots(plan: &SweepPlan, sink: &dyn WarningSink) -> SweepReport {
    sweep_spill_roots_until(plan, sink, &AtomicBool::new(false))
}

/// [`sweep_spill_roots`], stopping early (between entries) once `cancel`
/// is set. A cancelled sweep prunes nothing it has not finished.
pub fn sweep_spill_roots_until(
    plan: &SweepPlan,
    sink: &dyn WarningSink,
    cancel: &AtomicBool,
) -> SweepReport {
    let mut s = Sweeper {
        uid: fs::trusting_uid(),
        cutoff: split_time(plan.cutoff),
        dry_run: plan.dry_run,
        sink,
        cancel,
        report: SweepReport::new(plan.dry_run, to_nanos(plan.cutoff)),
        buf: vec![MaybeUninit::uninit(); 64 * 1024],
        dangerous: dangerous_identities(&plan.protected),
        quarantine: None,
        can_remove: true,
        quarantine2: None,
        quarantine2_name: None,
        helper: None,
        handed: None,
        held: Vec::new(),
    };
    s.run(plan);
    s.report
}

struct OpenRoot {
    path: PathBuf,
    kind: RootKind,
    fd: OwnedFd,
    meta: Meta,
    /// For a discovered root: its name in the temp dir.
    name: Option<CString>,
    index: usize,
}

struct Sweeper<'a> {
    uid: u32,
    cutoff: (i64, u32),
    dry_run: bool,
    sink: &'a dyn WarningSink,
    cancel: &'a AtomicBool,
    report: SweepReport,
    buf: Vec<MaybeUninit<u8>>,
    dangerous: HashSet<(u64, u64)>,
    /// The current root's quarantine (created on its first removal), and
    /// its name in the root.
    quarantine: Option<(fs::Quarantine, CString)>,
    /// `false` once creating the current root's quarantine failed: nothing
    /// more is removed in that root.
    can_remove: bool,
    /// The current root's second quarantine, for the second thread (out of
    /// here while that thread holds it), and its name in the root.
    quarantine2: Option<fs::Quarantine>,
    quarantine2_name: Option<CString>,
    /// The second thread, once a session had enough expired files.
    helper: Option<Helper>,
    /// The session dir the second thread has whole, finished (its report
    /// applied, pruned) after the next one or at the end of the root.
    handed: Option<Handed>,
    /// Warnings about entries listed after the handed session, held until
    /// it is finished.
    held: Vec<SpillWarning>,
}

/// A session dir handed whole to the second thread.
struct Handed {
    path: PathBuf,
    name: CString,
    meta: Meta,
    dir: OwnedFd,
}

/// A session dir is handed to the second thread when it has at least this
/// many entries (fewer are not worth the hand-off).
const SPLIT_MIN: usize = 4;
/// A session dir of at least this many entries is split in halves between
/// the two threads (it would keep one of them alone for long).
const SPLIT_LARGE: usize = 4096;

/// An expired spill file found in place, to be removed.
struct Expired {
    /// Its position in the session dir's listing.
    index: usize,
    name: CString,
    /// `d_ino` from the listing.
    ino: u64,
    /// What `statx` showed in place.
    meta: Meta,
}

/// What the in-place look at one entry found.
enum Check {
    /// Vanished since the listing.
    Gone,
    /// Stays: fresh, or not ours to delete (counted in the report).
    Stays,
    /// An expired spill file of ours.
    Expired(Meta),
}

/// What a look at one entry of a session dir in place found; [`look`]
/// has no other effect, so either thread can take it.
enum Look {
    /// Not ours to delete, for this reason.
    Skip(SkipReason),
    /// Vanished since the listing.
    Gone,
    StatFailed(Errno),
    /// A spill file of ours, not expired.
    Fresh,
    /// An expired spill file of ours, as `statx` showed it.
    Expired(Meta),
}

/// `statx` of entry `f` of the session dir `dir` (whose own `statx` is
/// `dmeta`), in place: the identity check must show the very inode
/// `getdents` listed, a regular file, on the session dir's mount, with the
/// store's mark.
fn look(dir: BorrowedFd<'_>, dmeta: &Meta, f: &Entry, cutoff: (i64, u32)) -> Look {
    let reason = match f.kind {
        Some(Kind::Dir) => Some(SkipReason::NestedDir),
        Some(Kind::Symlink) => Some(SkipReason::Symlink),
        Some(Kind::Special) => Some(SkipReason::SpecialFile),
        _ if !is_spill_file_name(f.name.to_bytes()) => Some(SkipReason::UnrelatedFile),
        _ => None,
    };
    if let Some(r) = reason {
        return Look::Skip(r);
    }
    let m = match fs::stat_at(dir, &f.name) {
        Ok(m) => m,
        Err(Errno::NOENT) => return Look::Gone,
        Err(err) => return Look::StatFailed(err),
    };
    let reason = match m.kind() {
        Kind::Symlink => Some(SkipReason::Symlink),
        Kind::Dir => Some(SkipReason::NestedDir),
        Kind::Special => Some(SkipReason::SpecialFile),
        // A bind-mounted file shows the mounted inode: fence it first.
        Kind::File if !m.on_mount_of(dmeta) => Some(SkipReason::MountPoint),
        Kind::File if m.ino != f.ino => Some(SkipReason::IdentityChanged),
        // Not created by the store (no ownership mark): not ours.
        Kind::File if m.mode & MARK == 0 => Some(SkipReason::UnrelatedFile),
        Kind::File => None,
    };
    if let Some(r) = reason {
        return Look::Skip(r);
    }
    if (m.mtime_sec, m.mtime_nsec) >= cutoff {
        return Look::Fresh;
    }
    Look::Expired(m)
}

/// What became of one expired file.
enum Outcome {
    Deleted,
    /// Gone before we moved it (a concurrent sweep).
    Gone,
    Mount,
    /// Not what was checked once out of the tree (put back or kept), or the
    /// destroyed name proved not to be the checked inode's.
    Tampered(&'static str, CString),
    Failed(Errno, CString),
}

/// Moves each of `files` (named in `dir`) out through `q` and destroys it
/// if it is still the expired spill file checked in place; the outcomes by
/// listing position.
fn remove_files(
    q: &mut fs::Quarantine,
    dir: BorrowedFd<'_>,
    files: &[Expired],
    cutoff: (i64, u32),
) -> Vec<(usize, Outcome)> {
    let mut out = Vec::with_capacity(files.len());
    let settle = |q: &mut fs::Quarantine, out: &mut Vec<(usize, Outcome)>| {
        for (pos, verdict) in q.settled() {
            let f = &files[pos];
            out.push((
                f.index,
                match verdict {
                    Settled::Destroyed => Outcome::Deleted,
                    Settled::Tampered => Outcome::Tampered(
                        "the unlinked name was not the checked inode",
                        f.name.clone(),
                    ),
                    Settled::Failed(e) => Outcome::Failed(e, f.name.clone()),
                },
            ));
        }
    };
    for (pos, f) in files.iter().enumerate() {
        // Out of the session dir first; destroyed only if what arrived is
        // still the expired spill file checked in place.
        let m = &f.meta;
        let removal = q.remove_file(pos, dir, &f.name, |seen| {
            (seen.same_object(m) && seen.ino == f.ino && (seen.mtime_sec, seen.mtime_nsec) < cutoff)
                .then_some(())
                .ok_or(())
        });
        let outcome = match removal {
            // Destroyed by the next file's move or the flush below.
            Ok(Removal::Pending) => None,
            Ok(Removal::Destroyed) => Some(Outcome::Deleted),
            // Deleted by a concurrent sweep: the outcome we wanted.
            Ok(Removal::Missing) => Some(Outcome::Gone),
            Ok(Removal::Mount) => Some(Outcome::Mount),
            Ok(Removal::Restored(_) | Removal::NotEmpty(false)) => Some(Outcome::Tampered(
                "changed during removal; put back",
                f.name.clone(),
            )),
            Ok(Removal::Kept(..) | Removal::NotEmpty(true)) => Some(Outcome::Tampered(
                "changed during removal; kept in the sweep's quarantine",
                f.name.clone(),
            )),
            Ok(Removal::Tampered) => Some(Outcome::Tampered(
                "the unlinked name was not the checked inode",
                f.name.clone(),
            )),
            Err(e) => Some(Outcome::Failed(e, f.name.clone())),
        };
        settle(q, &mut out);
        if let Some(o) = outcome {
            out.push((f.index, o));
        }
    }
    // Nothing is left pending in the quarantine past its session.
    q.flush();
    settle(q, &mut out);
    out
}

/// The second half of a session dir's entries for the second thread, with
/// what it needs to look at them and remove the expired ones: its own
/// descriptors, and its quarantine (or what it takes to create one).
struct Job {
    /// The second thread's quarantine in this root, once created, and the
    /// name of one it created.
    q: Option<fs::Quarantine>,
    root: OwnedFd,
    root_meta: Meta,
    uid: u32,
    dir: OwnedFd,
    dmeta: Meta,
    entries: Vec<Entry>,
    /// Listing position of `entries[0]`.
    base: usize,
    cutoff: (i64, u32),
}

/// What the second thread found and did with a [`Job`].
struct Done {
    /// Its quarantine, and the name of the one it created for this job.
    q: Option<(fs::Quarantine, Option<CString>)>,
    /// One per entry.
    looks: Vec<Look>,
    entries: Vec<Entry>,
    outcomes: Vec<(usize, Outcome)>,
    /// Creating its quarantine failed: it removed nothing.
    quarantine_failed: Option<Errno>,
    /// Stopped before looking at every entry: removed nothing.
    cancelled: bool,
}

impl Job {
    /// Looks at every entry and removes the expired ones; on the sweeping
    /// thread, stops looking once `cancel` is set (then removes nothing).
    fn run(self, cancel: Option<&AtomicBool>) -> Done {
        let Job {
            q,
            root,
            root_meta,
            uid,
            dir,
            dmeta,
            entries,
            base,
            cutoff,
        } = self;
        let mut looks = Vec::with_capacity(entries.len());
        let mut expired = Vec::new();
        let mut cancelled = false;
        for (i, f) in entries.iter().enumerate() {
            if i % 1024 == 1023 && cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                cancelled = true;
                break;
            }
            let found = look(dir.as_fd(), &dmeta, f, cutoff);
            if let Look::Expired(m) = &found {
                expired.push(Expired {
                    index: base + i,
                    name: f.name.clone(),
                    ino: f.ino,
                    meta: *m,
                });
            }
            looks.push(found);
        }
        let mut done = Done {
            q: q.map(|q| (q, None)),
            looks,
            entries,
            outcomes: Vec::new(),
            quarantine_failed: None,
            cancelled,
        };
        if expired.is_empty() || cancelled {
            return done;
        }
        if done.q.is_none() {
            match open_quarantine_in(root.as_fd(), &root_meta, uid) {
                Ok((q, name)) => done.q = Some((q, Some(name))),
                Err(e) => {
                    done.quarantine_failed = Some(e);
                    return done;
                }
            }
        }
        let (q, _) = done.q.as_mut().expect("set above");
        done.outcomes = remove_files(q, dir.as_fd(), &expired, cutoff);
        done
    }
}

/// The sweep's second thread: looks at the second half of a session dir's
/// entries and removes the expired ones through its own quarantine while
/// the sweeping thread does the first half.
struct Helper {
    jobs: Option<mpsc::Sender<Box<Job>>>,
    done: mpsc::Receiver<Box<Done>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Helper {
    fn start() -> Helper {
        let (jobs, inbox) = mpsc::channel::<Box<Job>>();
        let (reply, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("custodian-sweep".into())
            .spawn(move || {
                for job in inbox {
                    if reply.send(Box::new(job.run(None))).is_err() {
                        break;
                    }
                }
            })
            .ok();
        Helper {
            jobs: Some(jobs),
            done,
            thread,
        }
    }

    /// Hands `job` to the thread, or gives it back when there is none.
    fn send(&self, job: Box<Job>) -> Result<(), Box<Job>> {
        match (&self.thread, &self.jobs) {
            (Some(_), Some(jobs)) => jobs.send(job).map_err(|e| e.0),
            _ => Err(job),
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop.
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Counts quarantine directories made by this process, so that concurrent
/// sweeps never share one.
static QUARANTINES: AtomicU64 = AtomicU64::new(0);

fn split_time(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            d.subsec_nanos(),
        ),
        Err(e) => {
            let d = e.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            if d.subsec_nanos() == 0 {
                (-secs, 0)
            } else {
                (-secs - 1, 1_000_000_000 - d.subsec_nanos())
            }
        }
    }
}

fn to_nanos(t: SystemTime) -> i128 {
    let (s, n) = split_time(t);
    i128::from(s) * 1_000_000_000 + i128::from(n)
}

/// `/`, `$HOME`, the current directory and `protected`, plus every
/// ancestor of each: a root equal to any of them is refused.
fn dangerous_identities(protected: &[PathBuf]) -> HashSet<(u64, u64)> {
    let mut paths: Vec<PathBuf> = vec![PathBuf::from("/")];
    if let Some(home) = std::env::var_os("HOME") {
        paths.push(PathBuf::from(home));
    }
    if let Ok(cwd) = std::env::current_dir() {
        paths.push(cwd);
    }
    paths.extend(protected.iter().cloned());
    let mut out = HashSet::new();
    for p in paths {
        let Ok(c) = std::fs::canonicalize(&p) else {
            continue;
        };
        for a in c.ancestors() {
            if let Ok(m) = std::fs::metadata(a) {
                out.insert((m.dev(), m.ino()));
            }
        }
    }
    out
}

impl Sweeper<'_> {
    fn warn(&mut self, code: &'static str, path: &Path, message: String) {
        let w = SpillWarning {
            code,
            path: escape::escape_path(path),
            message,
        };
        if self.handed.is_some() {
            // After the handed session's own, in listing order.
            self.held.push(w);
            return;
        }
        self.report.warn(self.sink, w);
    }

    fn cancelled(&mut self) -> bool {
        if self.cancel.load(Ordering::Relaxed) {
            self.report.cancelled = true;
        }
        self.report.cancelled
    }

    fn root_report(&mut self, path: &Path, kind: RootKind, skipped: Option<SkipReason>) -> usize {
        self.report.roots.push(RootReport {
            path: escape::escape_path(path),
            origin: kind,
            scanned: false,
            skipped,
            removed: false,
        });
        if let Some(r) = skipped {
            self.report.skip(r);
        }
        self.report.roots.len() - 1
    }

    fn run(&mut self, plan: &SweepPlan) {
        let mut seen = HashSet::new();
        let mut roots = Vec::new();
        let configured = plan
            .configured_roots
            .iter()
            .map(|p| (p, RootKind::Configured))
            .chain(plan.active_root.iter().map(|p| (p, RootKind::Active)));
        // Configured and active roots first, so that their identity wins
        // over a discovered alias of the same directory.
        for (path, kind) in configured {
            if let Some(r) = self.open_configured(path, kind, &mut seen) {
                roots.push(r);
            }
        }
        let mut tmp = None;
        if let Some(d) = &plan.discovery {
            tmp = self.discover(d, &mut seen, &mut roots);
        }
        for root in &roots {
            if self.cancelled() {
                break;
            }
            self.report.roots[root.index].scanned = true;
            self.report.roots_scanned += 1;
            self.can_remove = true;
            let remaining = self.sweep_root(root);
            self.close_quarantine(root);
            if remaining != 0 || root.kind != RootKind::Discovered || self.dry_run {
                continue;
            }
            if let (Some(tmp), Some(name)) = (&tmp, &root.name) {
                if !self.cancelled() {
                    self.remove_root(tmp.as_fd(), name, root);
                }
            }
        }
    }

    fn admit(
        &mut self,
        path: &Path,
        kind: RootKind,
        fd: OwnedFd,
        meta: Meta,
        name: Option<CString>,
        seen: &mut HashSet<(u64, u64)>,
    ) -> Option<OpenRoot> {
        if self.dangerous.contains(&meta.dev_ino()) {
            self.root_report(path, kind, Some(SkipReason::DangerousRoot));
            self.warn(
                "dangerous_root",
                path,
                "refusing to sweep `/`, the home directory, the workspace, the current directory or one of their ancestors".into(),
            );
            return None;
        }
        if let Err(u) = meta.trusted_dir_for(self.uid) {
            let reason = match u {
                Untrusted::Owner => SkipReason::UntrustedOwner,
                _ => SkipReason::UntrustedMode,
            };
            self.root_report(path, kind, Some(reason));
            self.warn(
                "untrusted_root",
                path,
                "root is not owned by the current user or is writable by group/others".into(),
            );
            return None;
        }
        if !seen.insert(meta.dev_ino()) {
            self.root_report(path, kind, Some(SkipReason::DuplicateRoot));
            return None;
        }
        let index = self.root_report(path, kind, None);
        Some(OpenRoot {
            path: path.to_owned(),
            kind,
            fd,
            meta,
            name,
            index,
        })
    }

    fn open_configured(
        &mut self,
        path: &Path,
        kind: RootKind,
        seen: &mut HashSet<(u64, u64)>,
    ) -> Option<OpenRoot> {
        // A configured root may be a symlink: resolve it once, then open the
        // target component by component without following anything.
        let canonical = match std::fs::canonicalize(path) {
            Ok(c) => c,
            Err(e) => {
                self.root_report(path, kind, Some(SkipReason::MissingRoot));
                self.warn("root_missing", path, format!("cannot resolve root: {e}"));
                return None;
            }
        };
        let fd = match fs::open_dir_path(&canonical, self.uid) {
            Ok((_parent, _name, fd)) => fd,
            Err(WalkError::Ancestor) => {
                self.root_report(path, kind, Some(SkipReason::UntrustedAncestor));
                self.warn(
                    "untrusted_ancestor",
                    path,
                    "an ancestor of the root is writable by others without the sticky bit or owned by another user".into(),
                );
                return None;
            }
            Err(WalkError::Open(Errno::NOTDIR | Errno::NOENT | Errno::LOOP)) => {
                self.root_report(path, kind, Some(SkipReason::MissingRoot));
                self.warn("root_missing", path, "root is not a directory".into());
                return None;
            }
            Err(e) => {
                self.root_report(path, kind, Some(SkipReason::Error));
                self.warn("root_open_failed", path, format!("cannot open root: {e:?}"));
                return None;
            }
        };
        let meta = match fs::stat_fd(fd.as_fd()) {
            Ok(m) => m,
            Err(e) => {
                self.root_report(path, kind, Some(SkipReason::Error));
                self.warn("root_stat_failed", path, format!("cannot stat root: {e}"));
                return None;
            }
        };
        self.admit(path, kind, fd, meta, None, seen)
    }

    fn discover(
        &mut self,
        d: &Discovery,
        seen: &mut HashSet<(u64, u64)>,
        roots: &mut Vec<OpenRoot>,
    ) -> Option<OwnedFd> {
        let (tmp, tmp_path) = match open_temp_dir(&d.temp_dir, self.uid) {
            Ok(t) => t,
            Err(e) => {
                self.warn(
                    "temp_dir_unusable",
                    &d.temp_dir,
                    format!("cannot discover default roots: {e:?}"),
                );
                return None;
            }
        };
        let tmeta = match fs::stat_fd(tmp.as_fd()) {
            Ok(m) => m,
            Err(e) => {
                self.warn("temp_dir_unusable", &d.temp_dir, format!("stat: {e}"));
                return None;
            }
        };
        let mut entries = Vec::new();
        if let Err(e) = fs::list(tmp.as_fd(), &mut self.buf, &mut entries) {
            self.warn(
                "list_failed",
                &d.temp_dir,
                format!("cannot list temp dir: {e}"),
            );
            return None;
        }
        for e in entries {
            if !e.name.to_bytes().starts_with(d.prefix.as_bytes()) {
                continue;
            }
            let path = tmp_path.join(std::ffi::OsStr::from_bytes(e.name.to_bytes()));
            let m = match fs::stat_at(tmp.as_fd(), &e.name) {
                Ok(m) => m,
                Err(Errno::NOENT) => continue,
                Err(err) => {
                    self.warn("stat_failed", &path, format!("{err}"));
                    continue;
                }
            };
            match m.kind() {
                Kind::Dir => {}
                Kind::Symlink => {
                    // Discovery never follows a symlink, whatever it names.
                    self.root_report(&path, RootKind::Discovered, Some(SkipReason::Symlink));
                    continue;
                }
                _ => continue,
            }
            if !m.on_mount_of(&tmeta) {
                self.root_report(&path, RootKind::Discovered, Some(SkipReason::MountPoint));
                self.warn(
                    "mount_point",
                    &path,
                    "discovered root is a mount point".into(),
                );
                continue;
            }
            let fd = match fs::open_dir_at(tmp.as_fd(), &e.name) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => continue,
                Err(err) => {
                    self.root_report(&path, RootKind::Discovered, Some(SkipReason::Error));
                    self.warn("root_open_failed", &path, format!("{err}"));
                    continue;
                }
            };
            match fs::stat_fd(fd.as_fd()) {
                Ok(now) if now.same_object(&m) => {
                    if let Some(r) =
                        self.admit(&path, RootKind::Discovered, fd, now, Some(e.name), seen)
                    {
                        roots.push(r);
                    }
                }
                _ => {
                    self.root_report(
                        &path,
                        RootKind::Discovered,
                        Some(SkipReason::IdentityChanged),
                    );
                    self.warn(
                        "identity_changed",
                        &path,
                        "root changed while opening".into(),
                    );
                }
            }
        }
        Some(tmp)
    }

    /// Sweeps one root; returns how many entries remain in it.
    fn sweep_root(&mut self, root: &OpenRoot) -> u64 {
        let mut entries = Vec::new();
        if let Err(e) = fs::list(root.fd.as_fd(), &mut self.buf, &mut entries) {
            self.warn("list_failed", &root.path, format!("cannot list root: {e}"));
            self.report.skip(SkipReason::Error);
            return 1;
        }
        let mut remaining = 0;
        let mut session_entries = Vec::new();
        for e in &entries {
            if self.cancelled() {
                self.report.skip(SkipReason::Cancelled);
                return remaining + self.finish_handed(root) + 1;
            }
            // `DT_UNKNOWN` (some filesystems): ask `statx`, never follow.
            let kind = match e.kind {
                Some(k) => Some(k),
                None => match fs::stat_at(root.fd.as_fd(), &e.name) {
                    Ok(m) => Some(m.kind()),
                    Err(Errno::NOENT) => None,
                    Err(err) => {
                        let p = root
                            .path
                            .join(std::ffi::OsStr::from_bytes(e.name.to_bytes()));
                        self.warn("stat_failed", &p, format!("{err}"));
                        self.report.skip(SkipReason::Error);
                        remaining += 1;
                        continue;
                    }
                },
            };
            let reason = match kind {
                None => continue, // vanished since listing
                Some(Kind::Symlink) => SkipReason::Symlink,
                Some(Kind::File) => SkipReason::UnrelatedFile,
                Some(Kind::Special) => SkipReason::SpecialFile,
                Some(Kind::Dir) if validate_session_bytes(e.name.to_bytes()).is_err() => {
                    SkipReason::NonSessionDir
                }
                Some(Kind::Dir) => {
                    remaining += self.sweep_session(root, e, &mut session_entries);
                    continue;
                }
            };
            self.report.skip(reason);
            remaining += 1;
        }
        remaining + self.finish_handed(root)
    }

    /// Sweeps one session directory, or hands it to the second thread;
    /// returns how many of the session dirs it finished still exist (this
    /// one and the one handed before it; a dir handed now is counted when
    /// [`Sweeper::finish_handed`] finishes it).
    fn sweep_session(&mut self, root: &OpenRoot, e: &Entry, entries: &mut Vec<Entry>) -> u64 {
        let path = root
            .path
            .join(std::ffi::OsStr::from_bytes(e.name.to_bytes()));
        let dir = match fs::open_dir_at(root.fd.as_fd(), &e.name) {
            Ok(fd) => fd,
            // Replaced by a symlink (or a non-directory) since listing.
            Err(Errno::LOOP | Errno::NOTDIR) => {
                self.report.skip(SkipReason::Symlink);
                return 1;
            }
            // Removed since listing (a concurrent sweep): nothing to do.
            Err(Errno::NOENT) => return 0,
            Err(err) => {
                self.report.skip(SkipReason::Error);
                self.warn(
                    "open_failed",
                    &path,
                    format!("cannot open session dir: {err}"),
                );
                return 1;
            }
        };
        let meta = match fs::stat_fd(dir.as_fd()) {
            Ok(m) => m,
            Err(err) => {
                self.report.skip(SkipReason::Error);
                self.warn("stat_failed", &path, format!("{err}"));
                return 1;
            }
        };
        if !meta.on_mount_of(&root.meta) {
            self.report.skip(SkipReason::MountPoint);
            self.warn(
                "mount_point",
                &path,
                "not descending into a mount point".into(),
            );
            return 1;
        }
        if meta.ino != e.ino {
            self.report.skip(SkipReason::IdentityChanged);
            self.warn(
                "identity_changed",
                &path,
                "session dir changed since listing".into(),
            );
            return 1;
        }
        if let Err(u) = meta.trusted_dir_for(self.uid) {
            self.report.skip(match u {
                Untrusted::Owner => SkipReason::UntrustedOwner,
                _ => SkipReason::UntrustedMode,
            });
            self.warn(
                "untrusted_session",
                &path,
                "session dir is not owned by the current user or is writable by group/others"
                    .into(),
            );
            return 1;
        }
        if let Err(err) = fs::list(dir.as_fd(), &mut self.buf, entries) {
            self.report.skip(SkipReason::Error);
            self.warn(
                "list_failed",
                &path,
                format!("cannot list session dir: {err}"),
            );
            return 1;
        }
        let whole = !self.dry_run && self.can_remove && entries.len() >= SPLIT_MIN;
        if whole && entries.len() < SPLIT_LARGE {
            if let Some(job) = self.job(root, dir.as_fd(), &meta) {
                // To the second thread whole when it has none; else here,
                // while it does the one before.
                let handing = self.handed.is_none();
                let (q, old) = if handing {
                    (self.quarantine2.take(), None)
                } else {
                    match self.quarantine.take() {
                        Some((q, name)) => (Some(q), Some(name)),
                        None => (None, None),
                    }
                };
                let job = job(q, std::mem::take(entries), 0);
                let here = Handed {
                    path,
                    name: e.name.clone(),
                    meta,
                    dir,
                };
                if !handing {
                    let mut done = job.run(Some(self.cancel));
                    self.take_back(&mut done, Some(old));
                    // Both applied in listing order: the one before first.
                    let left = self.finish_handed(root);
                    return left + self.finish(root, here, done);
                }
                match self.helper().send(job) {
                    Ok(()) => {
                        self.handed = Some(here);
                        return 0;
                    }
                    // No second thread: all of it here, below.
                    Err(job) => {
                        *entries = job.entries;
                        self.quarantine2 = job.q;
                        return self.sweep_in_place(root, here, entries, false);
                    }
                }
            }
        }
        let here = Handed {
            path,
            name: e.name.clone(),
            meta,
            dir,
        };
        let split = whole && entries.len() >= SPLIT_LARGE;
        self.sweep_in_place(root, here, entries, split)
    }

    /// Sweeps the session dir `h` on this thread (a dry run, a small or a
    /// large one, or no second thread), after the one handed before is
    /// applied; `split`: its second half goes to the second thread. Returns
    /// how many of the two still exist.
    fn sweep_in_place(
        &mut self,
        root: &OpenRoot,
        h: Handed,
        entries: &mut Vec<Entry>,
        split: bool,
    ) -> u64 {
        let Handed {
            path,
            name,
            meta,
            dir,
        } = h;
        let mut left = self.finish_handed(root);
        // A large one: the second half goes to the second thread, which
        // looks at each in place and removes the expired ones through its
        // own quarantine while this thread does the same with the first.
        let mut sent = None;
        if split {
            if let Some(job) = self.job(root, dir.as_fd(), &meta) {
                let base = entries.len() / 2;
                let job = job(self.quarantine2.take(), entries.split_off(base), base);
                match self.helper().send(job) {
                    Ok(()) => sent = Some(base),
                    // No second thread: all of it here.
                    Err(job) => {
                        entries.extend(job.entries);
                        self.quarantine2 = job.q;
                    }
                }
            }
        }
        // In place: which entries are expired spill files of ours.
        let mut remaining = 0u64;
        let mut cancelled = false;
        let mut expired = Vec::new();
        for (i, f) in entries.iter().enumerate() {
            if i % 1024 == 1023 && self.cancelled() {
                self.report.skip(SkipReason::Cancelled);
                cancelled = true;
                break;
            }
            let found = look(dir.as_fd(), &meta, f, self.cutoff);
            match self.apply(found, &path, f) {
                Check::Gone => {}
                Check::Stays => remaining += 1,
                Check::Expired(m) => expired.push(Expired {
                    index: i,
                    name: f.name.clone(),
                    ino: f.ino,
                    meta: m,
                }),
            }
        }
        // Then out through the quarantine.
        if !cancelled && !expired.is_empty() {
            remaining += self.remove_expired(root, dir.as_fd(), &path, expired);
        }
        if let Some(base) = sent {
            remaining += self.second_half(root, &path, base);
        }
        if cancelled || remaining > 0 || self.dry_run || self.cancelled() {
            return left + 1;
        }
        if !self.prune(root, dir.as_fd(), &name, &meta, &path) {
            left += 1;
        }
        left
    }

    /// Finishes the session dir handed whole to the second thread, if any:
    /// waits for what it found and did, applies that to the report and
    /// prunes the dir if it is empty; returns 1 if it still exists.
    fn finish_handed(&mut self, root: &OpenRoot) -> u64 {
        let Some(h) = self.handed.take() else {
            return 0;
        };
        let left = match self.receive() {
            Some(mut done) => {
                self.take_back(&mut done, None);
                self.finish(root, h, done)
            }
            None => 1,
        };
        for w in std::mem::take(&mut self.held) {
            self.report.warn(self.sink, w);
        }
        left
    }

    /// Takes the quarantine back from what a [`Job`] did: the sweeping
    /// thread's (`here` holds its name, if it had one) when the job ran
    /// here, else the second thread's.
    fn take_back(&mut self, done: &mut Done, here: Option<Option<CString>>) {
        let q = done.q.take();
        if let Some(old) = here {
            self.quarantine = match q {
                Some((q, created)) => created.or(old).map(|name| (q, name)),
                None => None,
            };
        } else if let Some((q, name)) = q {
            self.quarantine2 = Some(q);
            if name.is_some() {
                self.quarantine2_name = name;
            }
        }
    }

    /// Applies what a [`Job`] found and did in the session dir `h` to the
    /// report and prunes it if nothing stays; returns 1 if it still exists.
    /// Its quarantine was taken back ([`Sweeper::take_back`]).
    fn finish(&mut self, root: &OpenRoot, h: Handed, done: Done) -> u64 {
        let cancelled = done.cancelled;
        if cancelled {
            // It stopped on the flag: say so in the report.
            let _ = self.cancelled();
            self.report.skip(SkipReason::Cancelled);
        }
        let remaining = self.apply_done(root, &h.path, done, 0);
        if cancelled || remaining > 0 || self.dry_run || self.cancelled() {
            return 1;
        }
        u64::from(!self.prune(root, h.dir.as_fd(), &h.name, &h.meta, &h.path))
    }

    /// Removes the `expired` files of the session dir `dir` (at `dpath`)
    /// and returns how many of them are not gone.
    fn remove_expired(
        &mut self,
        root: &OpenRoot,
        dir: BorrowedFd<'_>,
        dpath: &Path,
        expired: Vec<Expired>,
    ) -> u64 {
        let cutoff = self.cutoff;
        let Some(q) = self.quarantine(root) else {
            self.report.skip(SkipReason::Error);
            return expired.len() as u64;
        };
        let outcomes = remove_files(q, dir, &expired, cutoff);
        // Files never reached (none today) stay too.
        let unreached = expired.len().saturating_sub(outcomes.len()) as u64;
        unreached + self.outcomes(dpath, outcomes)
    }

    /// Applies the outcomes of removals, in listing order; returns how many
    /// files are not gone.
    fn outcomes(&mut self, dpath: &Path, outcomes: Vec<(usize, Outcome)>) -> u64 {
        let mut left = 0;
        for (_, outcome) in outcomes {
            let p = |name: &CString| dpath.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
            match outcome {
                Outcome::Deleted => self.report.files_deleted += 1,
                Outcome::Gone => {}
                Outcome::Mount => {
                    self.report.skip(SkipReason::MountPoint);
                    left += 1;
                }
                Outcome::Tampered(what, name) => {
                    self.report.skip(SkipReason::IdentityChanged);
                    self.warn("tampered", &p(&name), what.into());
                    left += 1;
                }
                Outcome::Failed(err, name) => {
                    self.report.skip(SkipReason::Error);
                    self.warn(
                        "unlink_failed",
                        &p(&name),
                        format!("cannot delete expired file: {err}"),
                    );
                    left += 1;
                }
            }
        }
        left
    }

    /// Waits for the second thread's half of the session at `dpath` (its
    /// entries from listing position `base` on) and applies what it found
    /// and did, after the first half; returns how many entries stay.
    fn second_half(&mut self, root: &OpenRoot, dpath: &Path, base: usize) -> u64 {
        let Some(mut done) = self.receive() else {
            return 1;
        };
        self.take_back(&mut done, None);
        self.apply_done(root, dpath, done, base)
    }

    /// What the second thread did with the job it has, its quarantine not
    /// yet taken back; `None` when the thread is gone (it panicked) with
    /// that quarantine: the job's entries stay for the next sweep, and
    /// nothing more is removed in this root.
    fn receive(&mut self) -> Option<Done> {
        let done = self.helper.as_ref().and_then(|h| h.done.recv().ok());
        if done.is_none() {
            self.helper = None;
            self.can_remove = false;
            self.report.skip(SkipReason::Error);
        }
        done.map(|d| *d)
    }

    /// A job in the session dir `dir` (`meta`) of `root`, on descriptors of
    /// its own: given its quarantine, its entries and the listing position
    /// of the first; `None` when the descriptors cannot be had.
    fn job(
        &self,
        root: &OpenRoot,
        dir: BorrowedFd<'_>,
        meta: &Meta,
    ) -> Option<impl FnOnce(Option<fs::Quarantine>, Vec<Entry>, usize) -> Box<Job> + use<>> {
        let (rootfd, dirfd) = (fs::dup(root.fd.as_fd()).ok()?, fs::dup(dir).ok()?);
        let (root_meta, dmeta, uid, cutoff) = (root.meta, *meta, self.uid, self.cutoff);
        Some(move |q, entries, base| {
            Box::new(Job {
                q,
                root: rootfd,
                root_meta,
                uid,
                dir: dirfd,
                dmeta,
                entries,
                base,
                cutoff,
            })
        })
    }

    /// Applies what a [`Job`] found and did in the session dir at `dpath`
    /// (its entries from listing position `base` on) to the report, its
    /// quarantine already taken back; returns how many entries stay.
    fn apply_done(&mut self, root: &OpenRoot, dpath: &Path, done: Done, base: usize) -> u64 {
        let Done {
            q: _,
            looks,
            entries,
            outcomes,
            quarantine_failed,
            cancelled: _,
        } = done;
        let mut remaining = 0;
        let mut expired = 0u64;
        for (found, f) in looks.into_iter().zip(&entries) {
            match self.apply(found, dpath, f) {
                Check::Gone => {}
                Check::Stays => remaining += 1,
                Check::Expired(_) => expired += 1,
            }
        }
        if let Some(err) = quarantine_failed {
            self.can_remove = false;
            self.warn(
                "quarantine_failed",
                &root.path,
                format!("cannot create the sweep's quarantine; removing nothing here: {err}"),
            );
            for _ in 0..expired {
                self.report.skip(SkipReason::Error);
            }
            return remaining + expired;
        }
        debug_assert!(outcomes.iter().all(|(i, _)| *i >= base));
        let unreached = expired.saturating_sub(outcomes.len() as u64);
        remaining + unreached + self.outcomes(dpath, outcomes)
    }

    /// Counts what [`look`] found at entry `f` of the session dir at
    /// `dpath` in the report: gone, stays, or an expired spill file of ours
    /// (in a dry run: listed, and it stays).
    fn apply(&mut self, found: Look, dpath: &Path, f: &Entry) -> Check {
        let p = || dpath.join(std::ffi::OsStr::from_bytes(f.name.to_bytes()));
        match found {
            Look::Skip(r) => {
                self.report.skip(r);
                if matches!(r, SkipReason::MountPoint | SkipReason::IdentityChanged) {
                    self.warn("file_skipped", &p(), format!("{r:?}"));
                }
                Check::Stays
            }
            Look::Gone => Check::Gone,
            Look::StatFailed(err) => {
                self.report.skip(SkipReason::Error);
                self.warn("stat_failed", &p(), format!("{err}"));
                Check::Stays
            }
            Look::Fresh => {
                self.report.files_kept += 1;
                Check::Stays
            }
            Look::Expired(_) if self.dry_run => {
                self.report.files_deleted += 1;
                self.report.would_delete.push(escape::escape_path(&p()));
                Check::Stays
            }
            Look::Expired(m) => Check::Expired(m),
        }
    }

    /// The second thread, started on first use.
    fn helper(&mut self) -> &mut Helper {
        self.helper.get_or_insert_with(Helper::start)
    }

    /// Reports an entry that was not what the sweep checked once it was out
    /// of the tree (put back, or kept in the quarantine), or a destroyed
    /// name that proved not to be the checked inode's.
    fn tampered<E>(&mut self, path: &Path, r: &Removal<E>) {
        self.report.skip(SkipReason::IdentityChanged);
        let what = match r {
            Removal::Restored(_) | Removal::NotEmpty(false) => "changed during removal; put back",
            Removal::Kept(..) | Removal::NotEmpty(true) => {
                "changed during removal; kept in the sweep's quarantine"
            }
            _ => "the unlinked name was not the checked inode",
        };
        self.warn("tampered", path, what.into());
    }

    /// The current root's quarantine, created on first use: a directory
    /// `.sweep-<pid>-<n>` in the root (never a session name, so no sweep
    /// treats it as one), `0700`, on the root's mount.
    fn quarantine(&mut self, root: &OpenRoot) -> Option<&mut fs::Quarantine> {
        if self.quarantine.is_none() && self.can_remove {
            match open_quarantine(root, self.uid) {
                Ok(q) => self.quarantine = Some(q),
                Err(err) => {
                    self.can_remove = false;
                    self.warn(
                        "quarantine_failed",
                        &root.path,
                        format!(
                            "cannot create the sweep's quarantine; removing nothing here: {err}"
                        ),
                    );
                }
            }
        }
        self.quarantine.as_mut().map(|(q, _)| q)
    }

    /// Removes the current root's quarantine if empty; anything kept there
    /// was reported when it was kept.
    fn close_quarantine(&mut self, root: &OpenRoot) {
        if let Some((q, name)) = self.quarantine.take() {
            drop(q);
            let _ = fs::rmdir_at(root.fd.as_fd(), &name);
        }
        drop(self.quarantine2.take());
        if let Some(name) = self.quarantine2_name.take() {
            let _ = fs::rmdir_at(root.fd.as_fd(), &name);
        }
    }

    /// Removes an empty session dir after re-checking that its name still
    /// leads to the directory we swept. Returns `true` if it is gone.
    fn prune(
        &mut self,
        root: &OpenRoot,
        dir: BorrowedFd<'_>,
        name: &CString,
        meta: &Meta,
        path: &Path,
    ) -> bool {
        // Only a directory the store created (its ownership mark) is ours to
        // remove; one made by hand stays, empty or not.
        if meta.mode & MARK == 0 {
            return false;
        }
        // A writer holds a shared lock while it creates a file: leave the
        // directory to it. Ours is released when `dir` is closed.
        match fs::flock(dir, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(Errno::WOULDBLOCK) => return false,
            Err(err) => {
                self.warn("lock_failed", path, format!("{err}"));
                return false;
            }
        }
        let Some(q) = self.quarantine(root) else {
            return false;
        };
        let removal = q.remove(root.fd.as_fd(), name, Kind::Dir, |seen| {
            (seen.same_object(meta) && seen.mode & MARK != 0)
                .then_some(())
                .ok_or(())
        });
        match removal {
            Ok(Removal::Destroyed) => {
                self.report.dirs_pruned += 1;
                true
            }
            Ok(Removal::Missing) => true,
            // A writer put a new spill in it since the listing: it is back
            // in place, kept.
            Ok(Removal::NotEmpty(false) | Removal::Mount) => false,
            Ok(r) => {
                self.tampered(path, &r);
                false
            }
            Err(err) => {
                self.warn(
                    "prune_failed",
                    path,
                    format!("cannot remove empty session dir: {err}"),
                );
                false
            }
        }
    }

    fn remove_root(&mut self, tmp: BorrowedFd<'_>, name: &CString, root: &OpenRoot) {
        // A live process holds a shared lock on its default root: leave it.
        match fs::flock(root.fd.as_fd(), FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(Errno::WOULDBLOCK) => return,
            Err(err) => {
                self.warn("lock_failed", &root.path, format!("{err}"));
                return;
            }
        }
        match fs::stat_at(tmp, name) {
            Ok(now) if now.same_object(&root.meta) => {}
            _ => {
                self.report.skip(SkipReason::IdentityChanged);
                return;
            }
        }
        // A root lives in the shared temp dir, where no quarantine of ours
        // can be: removed in place, and proven by the held descriptor.
        match fs::rmdir_at(tmp, name) {
            Ok(()) if fs::nlink_fd(root.fd.as_fd()) != Ok(0) => {
                self.warn(
                    "tampered",
                    &root.path,
                    "the directory removed was not the root swept".into(),
                );
            }
            Ok(()) => {
                self.report.roots_removed += 1;
                self.report.roots[root.index].removed = true;
            }
            Err(Errno::NOENT | Errno::NOTEMPTY | Errno::EXIST) => {}
            Err(err) => self.warn("root_remove_failed", &root.path, format!("{err}")),
        }
    }
}

fn open_quarantine(root: &OpenRoot, uid: u32) -> Result<(fs::Quarantine, CString), Errno> {
    open_quarantine_in(root.fd.as_fd(), &root.meta, uid)
}

fn open_quarantine_in(
    root: BorrowedFd<'_>,
    root_meta: &Meta,
    uid: u32,
) -> Result<(fs::Quarantine, CString), Errno> {
    let n = QUARANTINES.fetch_add(1, Ordering::Relaxed);
    let name = CString::new(format!(".sweep-{}-{n}", std::process::id())).expect("no NUL");
    fs::mkdir_at(root, &name, 0o700)?;
    let fd = fs::open_dir_at(root, &name)?;
    let m = fs::stat_fd(fd.as_fd())?;
    if !m.on_mount_of(root_meta) || m.trusted_dir_for(uid).is_err() {
        let _ = fs::rmdir_at(root, &name);
        return Err(Errno::XDEV);
    }
    Ok((fs::Quarantine::new(fd), name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_time_orders_like_system_time() {
        let base = UNIX_EPOCH + std::time::Duration::new(100, 5);
        assert_eq!(split_time(base), (100, 5));
        let before = UNIX_EPOCH - std::time::Duration::new(1, 1);
        assert_eq!(split_time(before), (-2, 999_999_999));
        assert!(split_time(before) < split_time(UNIX_EPOCH));
        assert_eq!(to_nanos(before), -1_000_000_001);
    }
}
