//! The filesystem half of cleanup: verify the job tree against the
//! inventory, then remove it deepest first (`cfg(unix)`).
//!
//! # Theory of operation
//!
//! Both passes walk only registered directories, one descriptor at a time:
//! a child is opened `O_NOFOLLOW | O_DIRECTORY` relative to its parent's
//! descriptor and its identity checked; the walk climbs back with
//! `openat(dir, "..")` and checks that the parent it lands in is the
//! registered parent (fts(3)'s trick), so a tree of any depth needs two open
//! descriptors, never one per level.
//!
//! 1. **Verify.** Every name in every registered directory must be a
//!    registered artifact of the recorded kind and identity on the
//!    workspace's device and mount. The first symlink, special file, mount,
//!    device change, replacement or unregistered name stops the cleanup
//!    before anything is removed.
//! 2. **Remove.** Post-order: in each directory, its registered files, then
//!    its registered subdirectories (each emptied first), then the directory
//!    itself from its parent — each through `crate::fs::Quarantine`: moved
//!    out of the tree into `<internal>/quarantine/<id>/`, identified there by
//!    descriptor, destroyed only if it is the registered inode (else put
//!    back), and proven gone by the held descriptor. Any mismatch stops the
//!    walk where it is with `tampered` (the tree changed after it was
//!    verified), and nothing is ever retried under another name.
//!
//! # Two threads
//!
//! The removal pass splits the registered files of a directory holding at
//! least `SPLIT_MIN` of them: the walk's thread removes the first half
//! through its quarantine, a second thread the second half through its own
//! (`<internal>/quarantine/<id>/1`), on its own descriptor of the directory
//! (`dup`); the directory itself is removed only once both halves are
//! done. The protocol runs per entry in either thread, unchanged. The report
//! stays exact and deterministic: counts are of proven destructions only,
//! and a failure in the first half is reported before one in the second,
//! as the sequential order would have met them. A failure in the first half
//! stops the second at its next entry; one in the second half does not stop
//! the first (the sequential walk would have removed all of it first). Two
//! threads because the machine the goal is measured on has two cores and
//! the protocol costs about two and a half times `rm -rf`'s CPU per entry
//! (`docs/performance.md`); the split costs one hand-off per directory.

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

use super::identity::{Anchor, Mismatch};
use super::inventory::{ArtifactKind, Inventory, JOB_ROOT, Tree};
use super::result::CleanupCode;
use crate::fs::{self, Errno, FileKind, Observed, Removal, Settled};

/// What the filesystem passes did.
#[derive(Debug, Default)]
pub(crate) struct FsOutcome {
    pub files_removed: u64,
    pub dirs_removed: u64,
    pub missing: u64,
    pub failure: Option<Fail>,
}

/// A fail-closed stop: the code and, for operators, where.
#[derive(Debug)]
pub(crate) struct Fail {
    pub code: CleanupCode,
    pub suspect: String,
}

struct Ctx<'a> {
    jobs: BorrowedFd<'a>,
    job_name: &'a CStr,
    inv: &'a Inventory,
    tree: Tree,
    anchor: Anchor,
    name_buf: Vec<u8>,
}

impl Ctx<'_> {
    /// `inv.name(i)` as a C string, in a reused buffer.
    fn cname(&mut self, i: u32) -> &CStr {
        if i == JOB_ROOT {
            return self.job_name;
        }
        self.name_buf.clear();
        self.name_buf.extend_from_slice(self.inv.name(i));
        self.name_buf.push(0);
        CStr::from_bytes_with_nul(&self.name_buf).expect("validated names hold no NUL")
    }

    fn fail_at(&self, code: CleanupCode, i: u32) -> Fail {
        Fail {
            code,
            suspect: self.inv.relative_path(i),
        }
    }

    fn fail_name(&self, code: CleanupCode, dir: u32, name: &CStr) -> Fail {
        let mut p = self.inv.relative_path(dir);
        if !p.is_empty() {
            p.push('/');
        }
        p.push_str(&name.to_string_lossy());
        Fail { code, suspect: p }
    }

    /// Checks a fresh observation of registered entry `i`.
    fn check(&self, i: u32, obs: &Observed) -> Result<(), Fail> {
        let e = self.inv.entry(i);
        self.anchor
            .admit(obs)
            .and_then(|()| e.identity.check(e.kind.file_kind(), obs))
            .map_err(|m| self.fail_at(code_of(m), i))
    }
}

fn code_of(m: Mismatch) -> CleanupCode {
    match m {
        Mismatch::Symlink => CleanupCode::SymlinkInJob,
        Mismatch::Special => CleanupCode::SpecialFileInJob,
        Mismatch::Mount => CleanupCode::MountBoundary,
        Mismatch::Device => CleanupCode::DeviceChanged,
        Mismatch::Replaced => CleanupCode::IdentityReplaced,
    }
}

fn io_fail(ctx: &Ctx<'_>, i: u32, e: &Errno) -> Fail {
    tracing::warn!(error = %e, "workspace cleanup: filesystem call failed");
    ctx.fail_at(CleanupCode::IoError, i)
}

enum Opened {
    Dir(OwnedFd),
    Vanished,
}

/// Opens registered directory `i` in `parent` without following, and checks it.
fn open_registered(ctx: &mut Ctx<'_>, parent: BorrowedFd<'_>, i: u32) -> Result<Opened, Fail> {
    let fd = match fs::open_dir_at(parent, ctx.cname(i)) {
        Ok(fd) => fd,
        // Already gone: nothing of ours left to remove there.
        Err(e) if e == Errno::NOENT => {
            return Ok(Opened::Vanished);
        }
        Err(e) if e == Errno::LOOP => {
            return Err(ctx.fail_at(CleanupCode::SymlinkInJob, i));
        }
        Err(e) if e == Errno::NOTDIR => {
            // Something else now has the name; say what.
            let code = match fs::observe_at(parent, ctx.cname(i)).map(|o| o.kind) {
                Ok(FileKind::Symlink) => CleanupCode::SymlinkInJob,
                Ok(FileKind::Special) => CleanupCode::SpecialFileInJob,
                _ => CleanupCode::IdentityReplaced,
            };
            return Err(ctx.fail_at(code, i));
        }
        Err(e) => return Err(io_fail(ctx, i, &e)),
    };
    let obs = fs::observe_fd(fd.as_fd()).map_err(|e| io_fail(ctx, i, &e))?;
    ctx.check(i, &obs)?;
    Ok(Opened::Dir(fd))
}

trait Visit {
    /// `dir` has been opened as `fd` and verified.
    fn enter(&mut self, ctx: &mut Ctx<'_>, fd: BorrowedFd<'_>, dir: u32) -> Result<(), Fail>;
    /// Everything below `dir` is done; `parent` is its verified parent.
    fn leave(&mut self, ctx: &mut Ctx<'_>, parent: BorrowedFd<'_>, dir: u32) -> Result<(), Fail>;
    /// Whether to walk into registered directory `dir`.
    fn descend(&self, dir: u32) -> bool;
    /// Registered `dir` was gone when the walk reached it.
    fn vanished(&mut self, dir: u32);
}

/// Walks the registered directories depth first, pre- and post-order.
fn walk(ctx: &mut Ctx<'_>, v: &mut impl Visit) -> Result<bool, Fail> {
    let jobs = ctx.jobs;
    let mut cur = match open_registered(ctx, jobs, JOB_ROOT)? {
        Opened::Dir(fd) => fd,
        Opened::Vanished => return Ok(false),
    };
    v.enter(ctx, cur.as_fd(), JOB_ROOT)?;
    // (directory, position of the next child to consider); no descriptors.
    let mut stack: Vec<(u32, usize)> = vec![(JOB_ROOT, 0)];
    while let Some(&(dir, pos)) = stack.last() {
        let kids = ctx.tree.children(ctx.inv, dir);
        let next = kids[pos..]
            .iter()
            .position(|&c| ctx.inv.entry(c).kind == ArtifactKind::Dir && v.descend(c));
        if let Some(off) = next {
            let child = kids[pos + off];
            stack.last_mut().expect("non-empty").1 = pos + off + 1;
            match open_registered(ctx, cur.as_fd(), child)? {
                Opened::Dir(fd) => {
                    cur = fd;
                    v.enter(ctx, cur.as_fd(), child)?;
                    stack.push((child, 0));
                }
                Opened::Vanished => v.vanished(child),
            }
            continue;
        }
        stack.pop();
        match stack.last() {
            None => v.leave(ctx, jobs, dir)?,
            Some(&(parent, _)) => {
                // Climb back through "..": it must be the registered parent,
                // or `dir` was moved while we were inside it.
                let up = fs::open_parent(cur.as_fd()).map_err(|e| io_fail(ctx, dir, &e))?;
                let obs = fs::observe_fd(up.as_fd()).map_err(|e| io_fail(ctx, dir, &e))?;
                ctx.check(parent, &obs)
                    .map_err(|_| ctx.fail_at(CleanupCode::IdentityReplaced, dir))?;
                cur = up;
                v.leave(ctx, cur.as_fd(), dir)?;
            }
        }
    }
    Ok(true)
}

/// Pass 1: every name present must be registered and unchanged.
struct Verify {
    seen: Vec<bool>,
    buf: Vec<std::mem::MaybeUninit<u8>>,
    names: Vec<fs::Entry>,
    /// The second thread's `statx` of the second half of a long listing.
    helper: Option<Looker>,
}

/// A directory listing is looked at (`statx`) by two threads from this
/// many names on.
const LOOK_SPLIT_MIN: usize = 16;

/// The verify pass's second thread: `statx` of the second half of a long
/// listing, on its own descriptor; the verdicts stay with the walk.
struct Looker {
    jobs: mpsc::Sender<(OwnedFd, Vec<std::ffi::CString>)>,
    done: mpsc::Receiver<Vec<Result<Observed, Errno>>>,
}

fn observe_all<'a>(
    dir: BorrowedFd<'_>,
    names: impl Iterator<Item = &'a CStr>,
) -> Vec<Result<Observed, Errno>> {
    names.map(|n| fs::observe_at(dir, n)).collect()
}

impl Verify {
    /// `statx` of every listed name, the second half by the second thread
    /// when the listing is long.
    fn observe(&self, fd: BorrowedFd<'_>) -> Vec<Result<Observed, Errno>> {
        let n = self.names.len();
        let all = || observe_all(fd, self.names.iter().map(|e| e.name.as_c_str()));
        let Some(h) = self.helper.as_ref().filter(|_| n >= LOOK_SPLIT_MIN) else {
            return all();
        };
        let Ok(dup) = fs::dup(fd) else {
            return all();
        };
        let mid = n / 2;
        let second: Vec<_> = self.names[mid..].iter().map(|e| e.name.clone()).collect();
        if h.jobs.send((dup, second)).is_err() {
            return all();
        }
        let mut obs = observe_all(fd, self.names[..mid].iter().map(|e| e.name.as_c_str()));
        match h.done.recv() {
            Ok(rest) => obs.extend(rest),
            Err(_) => obs.extend(observe_all(
                fd,
                self.names[mid..].iter().map(|e| e.name.as_c_str()),
            )),
        }
        obs
    }
}

impl Visit for Verify {
    fn enter(&mut self, ctx: &mut Ctx<'_>, fd: BorrowedFd<'_>, dir: u32) -> Result<(), Fail> {
        // `fd` was just opened by the walk: its offset is at the start.
        if let Err(e) = fs::list(fd, &mut self.buf, &mut self.names) {
            return Err(io_fail(ctx, dir, &e));
        }
        let observed = self.observe(fd);
        for (entry, obs) in self.names.iter().zip(observed) {
            let name = entry.name.as_c_str();
            let found = ctx.tree.child(ctx.inv, dir, name.to_bytes());
            let obs = match obs {
                Ok(o) => o,
                // Vanished between listing and looking: nothing to judge.
                Err(e) if e == Errno::NOENT => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "workspace cleanup: statx failed");
                    return Err(ctx.fail_name(CleanupCode::IoError, dir, name));
                }
            };
            match found {
                Some(c) => {
                    ctx.check(c, &obs)?;
                    self.seen[c as usize] = true;
                }
                None => {
                    return Err(match ctx.anchor.admit(&obs) {
                        Err(m) => ctx.fail_name(code_of(m), dir, name),
                        Ok(()) => ctx.fail_name(CleanupCode::UnregisteredEntry, dir, name),
                    });
                }
            }
        }
        Ok(())
    }

    fn leave(&mut self, _: &mut Ctx<'_>, _: BorrowedFd<'_>, _: u32) -> Result<(), Fail> {
        Ok(())
    }

    fn descend(&self, dir: u32) -> bool {
        self.seen[dir as usize]
    }

    fn vanished(&mut self, dir: u32) {
        self.seen[dir as usize] = false;
    }
}

/// A directory's registered files are split between two threads when it
/// holds at least this many (fewer are not worth the hand-off).
const SPLIT_MIN: usize = 4;

/// What removing one run of files in one directory did.
#[derive(Default)]
struct Half {
    files: u64,
    missing: u64,
    /// The first failure, by position in the run.
    fail: Option<(usize, Fail)>,
}

impl Half {
    fn fail(&mut self, pos: usize, f: Fail) {
        if self.fail.as_ref().is_none_or(|(p, _)| pos < *p) {
            self.fail = Some((pos, f));
        }
    }
}

/// Moves the registered files `files` (all named in `parent`) out through
/// `q` and destroys each that is still its registered inode; stops at the
/// first failure, or once `stop` is set.
///
/// Each file is settled (destroyed and proven) by the next one's move or by
/// the flush at the end, so a run ends with nothing pending.
fn remove_files(
    inv: &Inventory,
    anchor: Anchor,
    q: &mut fs::Quarantine,
    parent: BorrowedFd<'_>,
    files: &[u32],
    stop: Option<&AtomicBool>,
) -> Half {
    let mut half = Half::default();
    let mut name = Vec::with_capacity(256);
    let fail_at = |code, i: u32| Fail {
        code,
        suspect: inv.relative_path(i),
    };
    let io = |e: Errno, i: u32| {
        tracing::warn!(error = %e, "workspace cleanup: filesystem call failed");
        fail_at(CleanupCode::IoError, i)
    };
    for (pos, &i) in files.iter().enumerate() {
        if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            break;
        }
        name.clear();
        name.extend_from_slice(inv.name(i));
        name.push(0);
        let cname = CStr::from_bytes_with_nul(&name).expect("validated names hold no NUL");
        let identity = inv.entry(i).identity;
        let removal = q.remove_file(pos, parent, cname, |seen| {
            let obs = seen.observed();
            anchor
                .admit(&obs)
                .and_then(|()| identity.check(FileKind::File, &obs))
        });
        match removal {
            Ok(Removal::Pending) => {}
            Ok(Removal::Destroyed) => half.files += 1,
            // Already gone: nothing of ours left to remove there.
            Ok(Removal::Missing) => half.missing += 1,
            // The name held something else once it was out of the tree: it
            // is back (or kept in quarantine); the tree changed after
            // verification.
            Ok(Removal::Restored(_) | Removal::Kept(..) | Removal::Tampered) => {
                half.fail(pos, fail_at(CleanupCode::Tampered, i));
            }
            Ok(Removal::NotEmpty(_)) => half.fail(pos, fail_at(CleanupCode::DirectoryNotEmpty, i)),
            Ok(Removal::Mount) => half.fail(pos, fail_at(CleanupCode::MountBoundary, i)),
            Err(e) => half.fail(pos, io(e, i)),
        }
        settle(q, files, &mut half, &fail_at, &io);
        if half.fail.is_some() {
            break;
        }
    }
    q.flush();
    settle(q, files, &mut half, &fail_at, &io);
    half
}

/// Counts the proven destructions and records a disproven one.
fn settle(
    q: &mut fs::Quarantine,
    files: &[u32],
    half: &mut Half,
    fail_at: &impl Fn(CleanupCode, u32) -> Fail,
    io: &impl Fn(Errno, u32) -> Fail,
) {
    let mut failed = Vec::new();
    for (pos, verdict) in q.settled() {
        match verdict {
            Settled::Destroyed => half.files += 1,
            Settled::Tampered => failed.push((pos, fail_at(CleanupCode::Tampered, files[pos]))),
            Settled::Failed(e) => failed.push((pos, io(e, files[pos]))),
        }
    }
    for (pos, f) in failed {
        half.fail(pos, f);
    }
}

/// The second thread of the removal pass: removes the second half of a
/// directory's files through its own quarantine while the walk's thread
/// removes the first half.
struct Helper {
    jobs: mpsc::Sender<(OwnedFd, Vec<u32>)>,
    done: mpsc::Receiver<Half>,
    /// Set when the first half fails: the second half (later in the
    /// sequential order) stops too.
    stop: Arc<AtomicBool>,
}

/// Pass 2: registered files, then directories deepest first, each through
/// the quarantine protocol of [`fs::Quarantine`].
struct Remove<'s> {
    seen: &'s [bool],
    quarantine: fs::Quarantine,
    helper: Option<Helper>,
    files: u64,
    dirs: u64,
    missing: u64,
}

impl Remove<'_> {
    /// Moves registered directory `i` (named in `parent`) out through the
    /// quarantine and destroys it if it is still the registered, empty inode.
    fn take_dir(&mut self, ctx: &mut Ctx<'_>, parent: BorrowedFd<'_>, i: u32) -> Result<(), Fail> {
        let anchor = ctx.anchor;
        let identity = ctx.inv.entry(i).identity;
        let name = ctx.cname(i).to_owned();
        let removal = self
            .quarantine
            .remove(parent, &name, FileKind::Dir, |seen| {
                let obs = seen.observed();
                anchor
                    .admit(&obs)
                    .and_then(|()| identity.check(FileKind::Dir, &obs))
            })
            .map_err(|e| io_fail(ctx, i, &e))?;
        match removal {
            Removal::Destroyed => self.dirs += 1,
            Removal::Missing => self.missing += 1,
            Removal::Pending | Removal::Restored(_) | Removal::Kept(..) | Removal::Tampered => {
                return Err(ctx.fail_at(CleanupCode::Tampered, i));
            }
            // Something appeared in the directory after verification: keep
            // it and stop.
            Removal::NotEmpty(_) => return Err(ctx.fail_at(CleanupCode::DirectoryNotEmpty, i)),
            Removal::Mount => return Err(ctx.fail_at(CleanupCode::MountBoundary, i)),
        }
        Ok(())
    }

    fn add(&mut self, half: Half) -> Result<(), Fail> {
        self.files += half.files;
        self.missing += half.missing;
        half.fail.map_or(Ok(()), |(_, f)| Err(f))
    }
}

impl Visit for Remove<'_> {
    fn enter(&mut self, ctx: &mut Ctx<'_>, fd: BorrowedFd<'_>, dir: u32) -> Result<(), Fail> {
        let files: Vec<u32> = ctx
            .tree
            .children(ctx.inv, dir)
            .iter()
            .copied()
            .filter(|&c| ctx.inv.entry(c).kind == ArtifactKind::File && self.seen[c as usize])
            .collect();
        let (inv, anchor) = (ctx.inv, ctx.anchor);
        let Some(helper) = self.helper.as_ref().filter(|_| files.len() >= SPLIT_MIN) else {
            let half = remove_files(inv, anchor, &mut self.quarantine, fd, &files, None);
            return self.add(half);
        };
        let mid = files.len() / 2;
        let dup = fs::dup(fd).map_err(|e| io_fail(ctx, dir, &e))?;
        helper.stop.store(false, Ordering::Relaxed);
        let sent = helper.jobs.send((dup, files[mid..].to_vec())).is_ok();
        let first = remove_files(inv, anchor, &mut self.quarantine, fd, &files[..mid], None);
        if first.fail.is_some() {
            helper.stop.store(true, Ordering::Relaxed);
        }
        let second = if sent { helper.done.recv().ok() } else { None };
        let first = self.add(first);
        let second = match second {
            Some(h) => self.add(h),
            // The helper is gone (it panicked): do its half here.
            None => {
                let half = remove_files(inv, anchor, &mut self.quarantine, fd, &files[mid..], None);
                self.add(half)
            }
        };
        // The first half comes first in the walk's order.
        first.and(second)
    }

    fn leave(&mut self, ctx: &mut Ctx<'_>, parent: BorrowedFd<'_>, dir: u32) -> Result<(), Fail> {
        self.take_dir(ctx, parent, dir)
    }

    fn descend(&self, dir: u32) -> bool {
        self.seen[dir as usize]
    }

    fn vanished(&mut self, _: u32) {
        self.missing += 1;
    }
}

/// Creates (or reuses) `<quarantine root>/<job name>` (or, for the second
/// thread, `<that>/1`) and checks it is a plain directory on the
/// workspace's device and mount.
fn open_quarantine(
    qroot: BorrowedFd<'_>,
    job_name: &CStr,
    anchor: Anchor,
) -> Result<fs::Quarantine, Fail> {
    let fail = |code| Fail {
        code,
        suspect: String::new(),
    };
    match fs::mkdir_at(qroot, job_name, 0o700) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => {
            tracing::warn!(error = %e, "workspace cleanup: cannot create the quarantine");
            return Err(fail(CleanupCode::IoError));
        }
    }
    let dir = match fs::open_dir_at(qroot, job_name) {
        Ok(fd) => fd,
        Err(Errno::LOOP | Errno::NOTDIR) => return Err(fail(CleanupCode::SymlinkInJob)),
        Err(e) => {
            tracing::warn!(error = %e, "workspace cleanup: cannot open the quarantine");
            return Err(fail(CleanupCode::IoError));
        }
    };
    let obs = fs::observe_fd(dir.as_fd()).map_err(|_| fail(CleanupCode::IoError))?;
    if obs.kind != FileKind::Dir {
        return Err(fail(CleanupCode::IdentityReplaced));
    }
    anchor.admit(&obs).map_err(|m| fail(code_of(m)))?;
    Ok(fs::Quarantine::new(dir))
}

/// Verifies and removes the job directory `job_name` in `jobs` against `inv`.
///
/// Touches nothing but registered entries below (and including)
/// `jobs/job_name`; stops at the first mismatch.
pub(crate) fn clean_job(
    jobs: BorrowedFd<'_>,
    qroot: BorrowedFd<'_>,
    job_name: &CStr,
    inv: &Inventory,
    anchor: Anchor,
) -> FsOutcome {
    let mut ctx = Ctx {
        jobs,
        job_name,
        inv,
        tree: Tree::new(inv),
        anchor,
        name_buf: Vec::with_capacity(256),
    };
    let live = ctx.tree.live() as u64 + 1;
    let mut out = FsOutcome::default();
    let mut verify = Verify {
        seen: vec![false; inv.len()],
        buf: vec![std::mem::MaybeUninit::uninit(); 64 * 1024],
        names: Vec::new(),
        helper: None,
    };
    verify.seen[JOB_ROOT as usize] = true;
    // A second thread for the `statx`s where a directory lists enough names.
    let looks = live as usize >= LOOK_SPLIT_MIN;
    let verified = std::thread::scope(|scope| {
        if looks {
            let (jobs, inbox) = mpsc::channel::<(OwnedFd, Vec<std::ffi::CString>)>();
            let (reply, done) = mpsc::channel();
            scope.spawn(move || {
                for (dir, names) in inbox {
                    let obs = observe_all(dir.as_fd(), names.iter().map(|n| n.as_c_str()));
                    if reply.send(obs).is_err() {
                        break;
                    }
                }
            });
            verify.helper = Some(Looker { jobs, done });
        }
        let r = walk(&mut ctx, &mut verify);
        // Ends the thread's loop; the scope joins it.
        verify.helper = None;
        r
    });
    match verified {
        Ok(true) => {}
        Ok(false) => {
            out.missing = live;
            return out;
        }
        Err(f) => {
            out.failure = Some(f);
            return out;
        }
    }
    let seen_count = ctx
        .tree
        .children_all()
        .iter()
        .filter(|&&i| verify.seen[i as usize])
        .count() as u64
        + 1;
    let quarantine = match open_quarantine(qroot, job_name, anchor) {
        Ok(q) => q,
        Err(f) => {
            out.failure = Some(f);
            return out;
        }
    };
    // A second thread pays where some directory holds enough files.
    let mut per_dir = std::collections::HashMap::<u32, usize>::new();
    for &i in ctx.tree.children_all() {
        let e = inv.entry(i);
        if e.kind == ArtifactKind::File && verify.seen[i as usize] {
            *per_dir.entry(e.parent()).or_default() += 1;
        }
    }
    let split = per_dir.values().any(|&n| n >= SPLIT_MIN);
    let second = if split {
        open_quarantine(quarantine.dir(), c"1", anchor).ok()
    } else {
        None
    };
    let missing = live - seen_count;
    let seen = &verify.seen;
    let (result, remove) = std::thread::scope(|scope| {
        let helper = second.map(|mut q2| {
            let (jobs, inbox) = mpsc::channel::<(OwnedFd, Vec<u32>)>();
            let (reply, done) = mpsc::channel();
            let stop = Arc::new(AtomicBool::new(false));
            let stop2 = stop.clone();
            scope.spawn(move || {
                for (dir, files) in inbox {
                    let half =
                        remove_files(inv, anchor, &mut q2, dir.as_fd(), &files, Some(&stop2));
                    if reply.send(half).is_err() {
                        break;
                    }
                }
                drop(q2);
            });
            Helper { jobs, done, stop }
        });
        let mut remove = Remove {
            seen,
            quarantine,
            helper,
            files: 0,
            dirs: 0,
            missing,
        };
        let result = walk(&mut ctx, &mut remove);
        // Ends the helper's loop; the scope joins it.
        remove.helper = None;
        (result, remove)
    });
    if split {
        let _ = fs::rmdir_at(remove.quarantine.dir(), c"1");
    }
    out.files_removed = remove.files;
    out.dirs_removed = remove.dirs;
    out.missing = remove.missing;
    drop(remove);
    match result {
        Ok(true) => {}
        Ok(false) => out.missing += 1,
        // The tree verified whole, and now something no longer matches:
        // it was changed while removal was under way.
        Err(mut f) => {
            if matches!(
                f.code,
                CleanupCode::SymlinkInJob
                    | CleanupCode::SpecialFileInJob
                    | CleanupCode::MountBoundary
                    | CleanupCode::DeviceChanged
                    | CleanupCode::IdentityReplaced
            ) {
                f.code = CleanupCode::Tampered;
            }
            out.failure = Some(f);
        }
    }
    // Empty unless something foreign was kept there: then it stays, for
    // the operator, and the failure above says why.
    let _ = fs::rmdir_at(qroot, job_name);
    out
}
