//! The filesystem half of cleanup: verify the job tree against the
//! inventory, then remove it, files first, then directories deepest first
//! (`cfg(unix)`).
//!
//! # Theory of operation
//!
//! Every pass walks only registered directories, one descriptor at a time:
//! a child is opened `O_NOFOLLOW | O_DIRECTORY` relative to its parent's
//! descriptor and its identity checked; the walk climbs back with
//! `openat(dir, "..")` and checks that the parent it lands in is the
//! registered parent (fts(3)'s trick), so a tree of any depth needs two
//! descriptors for the walk, never one per level.
//!
//! 1. **Verify.** Every name in every registered directory must be a
//!    registered artifact of the recorded kind and identity on the
//!    workspace's device and mount. The first symlink, special file, mount,
//!    device change, replacement or unregistered name stops the cleanup
//!    before anything is removed.
//! 2. **Remove the files.** Every registered file, each through
//!    `crate::fs::Quarantine`: moved out of the tree into
//!    `<internal>/quarantine/<id>/`, identified there by descriptor,
//!    destroyed only if it is the registered inode (else put back), and
//!    proven gone by the held descriptor.
//! 3. **Remove the directories**, once no file is left: post-order, each
//!    directory (now empty) through the same protocol, from its verified
//!    parent.
//!
//! The quarantine is the empty one the request reserved when it opened
//! (renamed to the job's name: a cleanup allocates no inode), the one an
//! earlier attempt left under that name, or, only when neither is there, a
//! new one; a cleanup that did not fail (or could not run) keeps it, under
//! a spare name, only when a listing finds it empty ([`SpareQuarantine`]).
//! An attempt that found it already there first destroys the registered
//! entries an earlier attempt left in it ([`leftovers::destroy_proven_in`]).
//!
//! A failed syscall is a verdict (`io_error`), or, for exhaustion
//! ([`errno_code`]: `ENOSPC`, `EDQUOT`, `EMFILE`, `ENFILE`, `ENOMEM`), a
//! cleanup that could not run and is run again; a verdict met by either
//! thread is reported before such a failure.
//!
//! Any mismatch stops the cleanup where it is with `tampered` (the tree
//! changed after it was verified); nothing is ever retried under another
//! name, and after a failure among the files no directory is removed.
//!
//! # Two threads, whole directories
//!
//! Passes 1 and 2 share their work between the walk's thread and one helper
//! thread by directory. The walk opens and checks each registered directory
//! as above and queues a job: a duplicate of the directory's descriptor and
//! either its listing (verify: the `statx` of each name and its verdict) or
//! its registered files (remove), in runs of at most `RUN` entries. Whichever
//! thread is free takes the oldest job; the walk's thread joins in once the
//! walk is done, or whenever `QUEUE_MAX` jobs wait (which bounds the
//! descriptors held). Each thread removes through its own quarantine
//! (`<internal>/quarantine/<id>/1` for the helper) and, but for a directory
//! split into several runs, in its own directories, so the two threads share
//! no directory lock; the one lock they do share is the filesystem's rename
//! lock, which every cross-directory rename takes, so their moves are
//! serialised whatever the split (`docs/performance.md`, "Workspace
//! cleanup"). Sharing whole directories costs one hand-off per pass instead
//! of one per directory, and keeps both threads busy however the scheduler
//! treats either.
//!
//! The protocol runs per entry in either thread, unchanged, and the report
//! stays exact: every job carries its place in the walk's order, the
//! verdicts are merged in that order, and the failure reported is the first
//! in that order, the one a single-threaded walk would meet first — except
//! that a suspicious failure the other thread met before the stop reached
//! it outranks an earlier one that only says the cleanup could not run
//! (`no_space` and the like: see `earliest`), so which of the two is
//! reported then depends on the schedule, and both fail the cleanup.
//! A failure in a job stops the jobs after it at their next entry (never
//! those before it) and the walk queues nothing more. Shuttle checks these
//! claims on the real lanes and stop (the `shuttle_tests` below). Counts are of proven
//! destructions only, so after a failure they may include files of later
//! jobs that were removed before the stop reached them. Every job of a pass
//! is finished before the next pass starts: everything that fails in the
//! verify pass removes nothing.

use std::collections::VecDeque;
use std::ffi::{CStr, CString};
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use crate::sync::shim::sim::atomic::{AtomicU64, Ordering};
use crate::sync::shim::sim::thread as scoped;
use crate::sync::shim::sim::{Condvar, Mutex, MutexGuard};

use super::identity::Anchor;
use super::inventory::{ArtifactKind, Inventory, JOB_ROOT, Tree};
use super::leftovers;
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

/// Entries of one directory a job takes at most: a directory holding more
/// is shared out in runs of this many.
const RUN: usize = 256;

/// Jobs that may wait in the queue (each holds a descriptor): when more
/// would, the walk's thread takes one itself.
const QUEUE_MAX: usize = 8;

/// Below this many registered entries the passes run on the walk's thread
/// alone: a second thread costs more to start than it saves.
const HELP_MIN: usize = 64;

/// What every thread of a pass reads.
#[derive(Clone, Copy)]
struct Rules<'a> {
    inv: &'a Inventory,
    tree: &'a Tree,
    anchor: Anchor,
}

impl Rules<'_> {
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

    fn io_fail(&self, i: u32, e: &Errno) -> Fail {
        tracing::warn!(error = %e, "workspace cleanup: filesystem call failed");
        self.fail_at(errno_code(*e), i)
    }

    /// Checks a fresh observation of registered entry `i`.
    fn check(&self, i: u32, obs: &Observed) -> Result<(), Fail> {
        let e = self.inv.entry(i);
        self.anchor
            .admit(obs)
            .and_then(|()| e.identity.check(e.kind.file_kind(), obs))
            .map_err(|m| self.fail_at(CleanupCode::from(m), i))
    }
}

struct Ctx<'a> {
    jobs: BorrowedFd<'a>,
    job_name: &'a CStr,
    rules: Rules<'a>,
    name_buf: Vec<u8>,
}

impl Ctx<'_> {
    /// `inv.name(i)` as a C string, in a reused buffer.
    fn cname(&mut self, i: u32) -> &CStr {
        if i == JOB_ROOT {
            return self.job_name;
        }
        self.name_buf.clear();
        self.name_buf.extend_from_slice(self.rules.inv.name(i));
        self.name_buf.push(0);
        CStr::from_bytes_with_nul(&self.name_buf).expect("validated names hold no NUL")
    }
}

/// The code of a filesystem call that failed with `e`: the machine was out
/// of something, so the cleanup **could not run** (`no_space`,
/// `no_descriptors`, `no_memory`: transient, run again later), or an
/// unexpected failure (`io_error`: a verdict, final).
///
/// Only exhaustion is transient. `EIO`, `EROFS`, `EPERM`, `EACCES`,
/// `EBUSY`, `ELOOP` and the rest say something about the tree or the
/// filesystem that a retry would not change, or that nobody can explain:
/// they stay fail-closed verdicts.
pub(crate) fn errno_code(e: Errno) -> CleanupCode {
    match e {
        Errno::NOSPC | Errno::DQUOT => CleanupCode::NoSpace,
        Errno::MFILE | Errno::NFILE => CleanupCode::NoDescriptors,
        Errno::NOMEM => CleanupCode::NoMemory,
        _ => CleanupCode::IoError,
    }
}

enum Opened {
    Dir(OwnedFd),
    Vanished,
}

/// Opens registered directory `i` in `parent` without following, and checks it.
fn open_registered(ctx: &mut Ctx<'_>, parent: BorrowedFd<'_>, i: u32) -> Result<Opened, Fail> {
    let rules = ctx.rules;
    let fd = match fs::open_dir_at(parent, ctx.cname(i)) {
        Ok(fd) => fd,
        // Already gone: nothing of ours left to remove there.
        Err(e) if e == Errno::NOENT => {
            return Ok(Opened::Vanished);
        }
        Err(e) if e == Errno::LOOP => {
            return Err(rules.fail_at(CleanupCode::SymlinkInJob, i));
        }
        Err(e) if e == Errno::NOTDIR => {
            // Something else now has the name; say what.
            let code = match fs::observe_at(parent, ctx.cname(i)).map(|o| o.kind) {
                Ok(FileKind::Symlink) => CleanupCode::SymlinkInJob,
                Ok(FileKind::Special) => CleanupCode::SpecialFileInJob,
                _ => CleanupCode::IdentityReplaced,
            };
            return Err(rules.fail_at(code, i));
        }
        Err(e) => return Err(rules.io_fail(i, &e)),
    };
    let obs = fs::observe_fd(fd.as_fd()).map_err(|e| rules.io_fail(i, &e))?;
    rules.check(i, &obs)?;
    Ok(Opened::Dir(fd))
}

trait Visit {
    /// `dir` has been opened as `fd` and verified; `parent` is its verified
    /// parent (`None` for the job directory).
    fn enter(
        &mut self,
        ctx: &mut Ctx<'_>,
        parent: Option<&Arc<OwnedFd>>,
        fd: &Arc<OwnedFd>,
        dir: u32,
    ) -> Result<(), Fail>;
    /// Everything below `dir` is done; `parent` is its verified parent.
    fn leave(&mut self, ctx: &mut Ctx<'_>, parent: BorrowedFd<'_>, dir: u32) -> Result<(), Fail>;
    /// Whether to walk into registered directory `dir`.
    fn descend(&self, dir: u32) -> bool;
    /// Registered `dir` was gone when the walk reached it.
    fn vanished(&mut self, dir: u32);
    /// Whether the walk leaves a directory it does not descend from by
    /// returning to the parent's descriptor it still holds, rather than
    /// climbing through `..` and checking where it landed. Only for a
    /// visitor whose jobs may remove such a directory while the walk is
    /// still in it, and which re-identify it then themselves.
    fn keeps_parent(&self) -> bool {
        false
    }
}

/// Walks the registered directories depth first, pre- and post-order.
///
/// The walk holds the descriptors of the directory it is in and, while
/// entering, of its parent; a visitor may keep either (shared) for a job.
fn walk(ctx: &mut Ctx<'_>, v: &mut impl Visit) -> Result<bool, Fail> {
    let jobs = ctx.jobs;
    let mut cur = match open_registered(ctx, jobs, JOB_ROOT)? {
        Opened::Dir(fd) => Arc::new(fd),
        Opened::Vanished => return Ok(false),
    };
    v.enter(ctx, None, &cur, JOB_ROOT)?;
    // (directory, position of the next child to consider); no descriptors.
    let mut stack: Vec<(u32, usize)> = vec![(JOB_ROOT, 0)];
    while let Some(&(dir, pos)) = stack.last() {
        let (inv, tree) = (ctx.rules.inv, ctx.rules.tree);
        let kids = tree.children(inv, dir);
        let next = kids[pos..]
            .iter()
            .position(|&c| inv.entry(c).kind == ArtifactKind::Dir && v.descend(c));
        if let Some(off) = next {
            let child = kids[pos + off];
            stack.last_mut().expect("non-empty").1 = pos + off + 1;
            match open_registered(ctx, cur.as_fd(), child)? {
                Opened::Dir(fd) => {
                    let leaf = v.keeps_parent()
                        && !tree
                            .children(inv, child)
                            .iter()
                            .any(|&c| inv.entry(c).kind == ArtifactKind::Dir && v.descend(c));
                    let parent = std::mem::replace(&mut cur, Arc::new(fd));
                    v.enter(ctx, Some(&parent), &cur, child)?;
                    if leaf {
                        cur = parent;
                        v.leave(ctx, cur.as_fd(), child)?;
                    } else {
                        stack.push((child, 0));
                    }
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
                let rules = ctx.rules;
                let up = fs::open_parent(cur.as_fd()).map_err(|e| rules.io_fail(dir, &e))?;
                let obs = fs::observe_fd(up.as_fd()).map_err(|e| rules.io_fail(dir, &e))?;
                rules
                    .check(parent, &obs)
                    .map_err(|_| rules.fail_at(CleanupCode::IdentityReplaced, dir))?;
                cur = Arc::new(up);
                v.leave(ctx, cur.as_fd(), dir)?;
            }
        }
    }
    Ok(true)
}

/// The earliest job, in the walk's order, that failed so far.
struct Stop(AtomicU64);

impl Stop {
    fn new() -> Self {
        Stop(AtomicU64::new(u64::MAX))
    }

    fn fail(&self, seq: u64) {
        self.0.fetch_min(seq, Ordering::Relaxed);
    }

    /// Whether a job before `seq` failed: job `seq` then stops.
    fn before(&self, seq: u64) -> bool {
        #[cfg(all(test, custodian_shuttle))]
        if shuttle_tests::planted(shuttle_tests::Plant::StopOnAnyFailure) {
            return self.any();
        }
        self.0.load(Ordering::Relaxed) < seq
    }

    fn any(&self) -> bool {
        self.0.load(Ordering::Relaxed) != u64::MAX
    }
}

/// The jobs of one pass, queued by the walk, taken oldest first by the walk's
/// thread and the helper thread.
struct Lanes<J> {
    state: Mutex<(VecDeque<J>, bool)>,
    ready: Condvar,
}

impl<J> Lanes<J> {
    fn new() -> Self {
        Lanes {
            state: Mutex::new((VecDeque::new(), false)),
            ready: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, (VecDeque<J>, bool)> {
        // Plain data: a panic elsewhere leaves nothing half-done here.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `job`; once more than `max` jobs wait, takes the oldest back
    /// for the caller to do itself (which bounds the queue).
    fn push_or_take(&self, job: J, max: usize) -> Option<J> {
        if self.push(job) > max {
            self.try_take()
        } else {
            None
        }
    }

    /// The walk is done: no more jobs will come, and the walk's thread does
    /// `work` on each job still waiting, beside the helper.
    fn close_and_drain(&self, mut work: impl FnMut(J)) {
        self.close();
        while let Some(j) = self.try_take() {
            work(j);
        }
    }

    /// Queues `job`; returns how many jobs wait.
    fn push(&self, job: J) -> usize {
        let n = {
            let mut s = self.lock();
            s.0.push_back(job);
            s.0.len()
        };
        self.ready.notify_one();
        n
    }

    /// The oldest waiting job, if any.
    fn try_take(&self) -> Option<J> {
        self.lock().0.pop_front()
    }

    /// The oldest job, waiting for one; `None` once closed and empty.
    fn take(&self) -> Option<J> {
        let mut s = self.lock();
        loop {
            if let Some(j) = s.0.pop_front() {
                return Some(j);
            }
            if s.1 {
                return None;
            }
            s = self.ready.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// No more jobs will come.
    fn close(&self) {
        self.lock().1 = true;
        #[cfg(all(test, custodian_shuttle))]
        if shuttle_tests::planted(shuttle_tests::Plant::CloseWithoutWaking) {
            return;
        }
        self.ready.notify_all();
    }
}

/// Runs one pass: `walk_pass` queues jobs into the lanes (and may do some
/// itself), `work` does one job; a helper thread (when `help`) takes jobs
/// until the walk is done and the queue empty. Returns the walk's result and
/// every job's output (the helper's last), or `None` for the helper's if it
/// died.
fn shared_pass<J: Send, O: Send, R>(
    lanes: &Lanes<J>,
    help: Option<impl FnMut(&J) -> O + Send>,
    walk_pass: impl FnOnce() -> R,
) -> (R, Option<Vec<O>>) {
    scoped::scope(|sc| {
        let helper = help.and_then(|mut work| {
            scoped::spawn_named(sc, "custodian-cleanup", move || {
                let mut out = Vec::new();
                while let Some(j) = lanes.take() {
                    out.push(work(&j));
                }
                out
            })
            .ok()
        });
        let r = walk_pass();
        lanes.close();
        let theirs = match helper {
            Some(h) => h.join().ok(),
            None => Some(Vec::new()),
        };
        (r, theirs)
    })
}

/// One run of a directory's listing for the verify pass.
struct Look {
    seq: u64,
    dir: u32,
    fd: Arc<OwnedFd>,
    names: Arc<Vec<fs::Entry>>,
    run: Range<usize>,
}

/// What looking at one run found.
struct Looked {
    seq: u64,
    /// Registered entries seen and matching.
    seen: Vec<u32>,
    /// The first mismatch, by position in the listing.
    fail: Option<(usize, Fail)>,
}

/// `statx` of every name in the run and its verdict, in listing order, up to
/// the first mismatch.
fn look(rules: Rules<'_>, job: &Look, stop: &Stop) -> Looked {
    let mut out = Looked {
        seq: job.seq,
        seen: Vec::with_capacity(job.run.len()),
        fail: None,
    };
    let kids = rules.tree.children(rules.inv, job.dir);
    for pos in job.run.clone() {
        if stop.before(job.seq) {
            break;
        }
        let name = job.names[pos].name.as_c_str();
        let obs = match fs::observe_at(job.fd.as_fd(), name) {
            Ok(o) => o,
            // Vanished between listing and looking: nothing to judge.
            Err(e) if e == Errno::NOENT => continue,
            Err(e) => {
                tracing::warn!(error = %e, "workspace cleanup: statx failed");
                out.fail = Some((pos, rules.fail_name(errno_code(e), job.dir, name)));
                break;
            }
        };
        let registered = kids
            .binary_search_by(|&i| rules.inv.name(i).cmp(name.to_bytes()))
            .map(|k| kids[k]);
        let verdict = match registered.ok() {
            Some(c) => rules.check(c, &obs).map(|()| c),
            None => Err(match rules.anchor.admit(&obs) {
                Err(m) => rules.fail_name(CleanupCode::from(m), job.dir, name),
                Ok(()) => rules.fail_name(CleanupCode::UnregisteredEntry, job.dir, name),
            }),
        };
        match verdict {
            Ok(c) => out.seen.push(c),
            Err(f) => {
                out.fail = Some((pos, f));
                break;
            }
        }
    }
    if out.fail.is_some() {
        stop.fail(job.seq);
    }
    out
}

/// Pass 1: every name present must be registered and unchanged.
struct Verify<'l> {
    lanes: &'l Lanes<Look>,
    stop: &'l Stop,
    /// The next job's place in the walk's order.
    seq: u64,
    /// Registered directories whose names their parent's listing showed.
    listed: Vec<bool>,
    vanished: Vec<u32>,
    buf: Vec<std::mem::MaybeUninit<u8>>,
    /// What the walk's thread looked at itself.
    done: Vec<Looked>,
}

impl Visit for Verify<'_> {
    fn enter(
        &mut self,
        ctx: &mut Ctx<'_>,
        _: Option<&Arc<OwnedFd>>,
        fd: &Arc<OwnedFd>,
        dir: u32,
    ) -> Result<(), Fail> {
        let rules = ctx.rules;
        let mut names = Vec::new();
        // `fd` was just opened by the walk: its offset is at the start.
        fs::list(fd.as_fd(), &mut self.buf, &mut names).map_err(|e| rules.io_fail(dir, &e))?;
        for e in &names {
            if matches!(e.kind, Some(FileKind::Dir) | None) {
                if let Some(c) = rules.tree.child(rules.inv, dir, e.name.to_bytes()) {
                    self.listed[c as usize] = rules.inv.entry(c).kind == ArtifactKind::Dir;
                }
            }
        }
        if names.is_empty() {
            return Ok(());
        }
        let names = Arc::new(names);
        let mut start = 0;
        while start < names.len() {
            let run = start..names.len().min(start + RUN);
            start = run.end;
            let job = Look {
                seq: self.seq,
                dir,
                fd: fd.clone(),
                names: names.clone(),
                run,
            };
            self.seq += 1;
            if let Some(j) = self.lanes.push_or_take(job, QUEUE_MAX) {
                self.done.push(look(rules, &j, self.stop));
            }
        }
        Ok(())
    }

    fn leave(&mut self, _: &mut Ctx<'_>, _: BorrowedFd<'_>, _: u32) -> Result<(), Fail> {
        Ok(())
    }

    fn descend(&self, dir: u32) -> bool {
        self.listed[dir as usize] && !self.stop.any()
    }

    fn vanished(&mut self, dir: u32) {
        self.vanished.push(dir);
    }
}

/// Keeps the first failure in the walk's order: `(job, position + 1)`, or
/// `(next job, 0)` for the walk's own. A verdict goes before any failure
/// that only says the cleanup could not run (`no_space` and the like): when
/// the two threads met both, what was found suspicious is final, and it is
/// never hidden behind a retry.
fn earliest(best: &mut Option<((u64, usize), Fail)>, key: (u64, usize), f: Fail) {
    let rank = |key: (u64, usize), f: &Fail| (f.code.is_transient(), key);
    if best
        .as_ref()
        .is_none_or(|(k, b)| rank(key, &f) < rank(*k, b))
    {
        *best = Some((key, f));
    }
}

/// The verify pass. `Ok(None)`: the job directory is gone.
fn verify(ctx: &mut Ctx<'_>, seen: &mut [bool], help: bool) -> Result<Option<()>, Fail> {
    let rules = ctx.rules;
    let lanes = Lanes::new();
    let stop = Stop::new();
    let mut v = Verify {
        lanes: &lanes,
        stop: &stop,
        seq: 0,
        listed: vec![false; rules.inv.len()],
        vanished: Vec::new(),
        buf: vec![std::mem::MaybeUninit::uninit(); 64 * 1024],
        done: Vec::new(),
    };
    let helper = help.then_some(|j: &Look| look(rules, j, &stop));
    let (walked, theirs) = shared_pass(&lanes, helper, || {
        let r = walk(ctx, &mut v);
        let r = r.map_err(|f| ((v.seq, 0), f));
        // The walk is done: help with what is left.
        lanes.close_and_drain(|j| v.done.push(look(rules, &j, &stop)));
        r
    });
    let Some(theirs) = theirs else {
        tracing::warn!("workspace cleanup: the verify pass's helper thread died");
        return Err(rules.fail_at(CleanupCode::IoError, JOB_ROOT));
    };
    let mut first = None;
    let present = match walked {
        Ok(p) => p,
        Err((key, f)) => {
            earliest(&mut first, key, f);
            true
        }
    };
    for l in v.done.into_iter().chain(theirs) {
        for c in l.seen {
            seen[c as usize] = true;
        }
        if let Some((pos, f)) = l.fail {
            earliest(&mut first, (l.seq, pos + 1), f);
        }
    }
    if let Some((_, f)) = first {
        return Err(f);
    }
    for d in v.vanished {
        seen[d as usize] = false;
    }
    Ok(present.then_some(()))
}

/// One run of a directory's registered files for the removal pass.
struct Sweep {
    seq: u64,
    fd: Arc<OwnedFd>,
    files: Arc<Vec<u32>>,
    run: Range<usize>,
    /// A registered directory with no registered subdirectory, all of whose
    /// files are in this run: removed from this parent once they are gone.
    then: Option<(Arc<OwnedFd>, u32)>,
}

/// What removing one run of files (and maybe its directory) did.
#[derive(Default)]
struct Half {
    seq: u64,
    files: u64,
    missing: u64,
    /// The directory removed after the files.
    dir: Option<u32>,
    /// The first failure, by position in the run (the directory's is the
    /// run's length).
    fail: Option<(usize, Fail)>,
}

impl Half {
    fn fail(&mut self, pos: usize, f: Fail) {
        if self.fail.as_ref().is_none_or(|(p, _)| pos < *p) {
            self.fail = Some((pos, f));
        }
    }
}

/// Moves the run's files out through `q` and destroys each that is still its
/// registered inode; stops at the first failure, or once a job before this
/// one failed.
///
/// Each file is settled (destroyed and proven) by the next one's move or by
/// the flush at the end, so a run ends with nothing pending.
fn remove_files(rules: Rules<'_>, q: &mut fs::Quarantine, job: &Sweep, stop: &Stop) -> Half {
    let Rules { inv, anchor, .. } = rules;
    let mut half = Half {
        seq: job.seq,
        ..Half::default()
    };
    let files = &job.files[job.run.clone()];
    let parent = job.fd.as_fd();
    let mut name = Vec::with_capacity(256);
    let fail_at = |code, i: u32| rules.fail_at(code, i);
    let io = |e: Errno, i: u32| rules.io_fail(i, &e);
    for (pos, &i) in files.iter().enumerate() {
        if stop.before(job.seq) {
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
    if let (None, Some((parent, dir))) = (&half.fail, &job.then) {
        if !stop.before(job.seq) {
            name.clear();
            name.extend_from_slice(inv.name(*dir));
            name.push(0);
            let cname = CStr::from_bytes_with_nul(&name).expect("validated names hold no NUL");
            match remove_dir(rules, q, parent.as_fd(), cname, *dir) {
                Ok(Some(())) => half.dir = Some(*dir),
                // We were inside it a moment ago, and now its name is gone
                // from its verified parent: moved or removed under us.
                Ok(None) => half.fail(files.len(), fail_at(CleanupCode::Tampered, *dir)),
                Err(f) => half.fail(files.len(), f),
            }
        }
    }
    if half.fail.is_some() {
        stop.fail(job.seq);
    }
    half
}

/// Moves registered directory `i` (`name` in `parent`) out through the
/// quarantine and destroys it if it is still the registered, empty inode.
/// `Ok(None)`: nothing had its name.
fn remove_dir(
    rules: Rules<'_>,
    q: &mut fs::Quarantine,
    parent: BorrowedFd<'_>,
    name: &CStr,
    i: u32,
) -> Result<Option<()>, Fail> {
    let anchor = rules.anchor;
    let identity = rules.inv.entry(i).identity;
    let removal = q
        .remove(parent, name, FileKind::Dir, |seen| {
            let obs = seen.observed();
            anchor
                .admit(&obs)
                .and_then(|()| identity.check(FileKind::Dir, &obs))
        })
        .map_err(|e| rules.io_fail(i, &e))?;
    match removal {
        Removal::Destroyed => Ok(Some(())),
        Removal::Missing => Ok(None),
        Removal::Pending | Removal::Restored(_) | Removal::Kept(..) | Removal::Tampered => {
            Err(rules.fail_at(CleanupCode::Tampered, i))
        }
        // Something appeared in the directory after verification: keep it
        // and stop.
        Removal::NotEmpty(_) => Err(rules.fail_at(CleanupCode::DirectoryNotEmpty, i)),
        Removal::Mount => Err(rules.fail_at(CleanupCode::MountBoundary, i)),
    }
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

/// Pass 2: queues every directory's registered files.
struct Files<'l, 's> {
    lanes: &'l Lanes<Sweep>,
    stop: &'l Stop,
    seen: &'s [bool],
    seq: u64,
    quarantine: &'l mut fs::Quarantine,
    /// What the walk's thread removed itself.
    done: Vec<Half>,
}

impl Visit for Files<'_, '_> {
    fn enter(
        &mut self,
        ctx: &mut Ctx<'_>,
        parent: Option<&Arc<OwnedFd>>,
        fd: &Arc<OwnedFd>,
        dir: u32,
    ) -> Result<(), Fail> {
        let rules = ctx.rules;
        let kids = rules.tree.children(rules.inv, dir);
        let registered = |c: u32, kind| rules.inv.entry(c).kind == kind && self.seen[c as usize];
        let files: Vec<u32> = kids
            .iter()
            .copied()
            .filter(|&c| registered(c, ArtifactKind::File))
            .collect();
        // A directory with nothing but files goes with its files' job; the
        // job directory and the others after every file (pass 3).
        let leaf = !kids.iter().any(|&c| registered(c, ArtifactKind::Dir));
        let then = parent
            .filter(|_| leaf && files.len() <= RUN)
            .map(|p| (p.clone(), dir));
        if files.is_empty() && then.is_none() {
            return Ok(());
        }
        let files = Arc::new(files);
        let mut start = 0;
        loop {
            let run = start..files.len().min(start + RUN);
            start = run.end;
            let job = Sweep {
                seq: self.seq,
                fd: fd.clone(),
                files: files.clone(),
                run,
                then: if start >= files.len() {
                    then.clone()
                } else {
                    None
                },
            };
            self.seq += 1;
            if let Some(j) = self.lanes.push_or_take(job, QUEUE_MAX) {
                let half = remove_files(rules, self.quarantine, &j, self.stop);
                self.done.push(half);
            }
            if start >= files.len() {
                return Ok(());
            }
        }
    }

    fn leave(&mut self, _: &mut Ctx<'_>, _: BorrowedFd<'_>, _: u32) -> Result<(), Fail> {
        Ok(())
    }

    fn descend(&self, dir: u32) -> bool {
        self.seen[dir as usize] && !self.stop.any()
    }

    fn vanished(&mut self, _: u32) {
        // Counted by the directories' pass, which meets it again.
    }

    fn keeps_parent(&self) -> bool {
        // A job removes a directory without subdirectories right after its
        // files, perhaps before the walk is out of it; it re-identifies the
        // directory in the quarantine, and a name gone from its parent is
        // `tampered` there.
        true
    }
}

/// Pass 3: the registered directories the files' jobs did not take,
/// deepest first, each through the quarantine protocol of [`fs::Quarantine`].
struct Dirs<'s> {
    /// Seen by the verify pass, and not removed yet.
    left: &'s [bool],
    quarantine: fs::Quarantine,
    dirs: u64,
    missing: u64,
}

impl Visit for Dirs<'_> {
    fn enter(
        &mut self,
        _: &mut Ctx<'_>,
        _: Option<&Arc<OwnedFd>>,
        _: &Arc<OwnedFd>,
        _: u32,
    ) -> Result<(), Fail> {
        Ok(())
    }

    fn leave(&mut self, ctx: &mut Ctx<'_>, parent: BorrowedFd<'_>, dir: u32) -> Result<(), Fail> {
        let rules = ctx.rules;
        match remove_dir(rules, &mut self.quarantine, parent, ctx.cname(dir), dir)? {
            Some(()) => self.dirs += 1,
            None => self.missing += 1,
        }
        Ok(())
    }

    fn descend(&self, dir: u32) -> bool {
        self.left[dir as usize]
    }

    fn vanished(&mut self, _: u32) {
        self.missing += 1;
    }
}

/// Creates (or reuses) `<quarantine root>/<job name>` (or, for the second
/// thread, `<that>/1`) and checks it is a plain directory on the
/// workspace's device and mount. Also says whether it existed already.
fn open_quarantine(
    qroot: BorrowedFd<'_>,
    job_name: &CStr,
    anchor: Anchor,
) -> Result<(fs::Quarantine, bool), Fail> {
    let fail = |code| Fail {
        code,
        suspect: String::new(),
    };
    let existed = match fs::mkdir_at(qroot, job_name, 0o700) {
        Ok(()) => false,
        Err(Errno::EXIST) => true,
        Err(e) => {
            tracing::warn!(error = %e, "workspace cleanup: cannot create the quarantine");
            return Err(fail(errno_code(e)));
        }
    };
    let dir = match fs::open_dir_at(qroot, job_name) {
        Ok(fd) => fd,
        Err(Errno::LOOP | Errno::NOTDIR) => return Err(fail(CleanupCode::SymlinkInJob)),
        Err(e) => {
            tracing::warn!(error = %e, "workspace cleanup: cannot open the quarantine");
            return Err(fail(errno_code(e)));
        }
    };
    let obs = fs::observe_fd(dir.as_fd()).map_err(|e| fail(errno_code(e)))?;
    if obs.kind != FileKind::Dir {
        return Err(fail(CleanupCode::IdentityReplaced));
    }
    anchor.admit(&obs).map_err(|m| fail(CleanupCode::from(m)))?;
    Ok((fs::Quarantine::new(dir), existed))
}

/// What the files pass did.
struct FilesDone {
    /// The job directory was there.
    present: bool,
    files: u64,
    dirs: u64,
    missing: u64,
    failure: Option<Fail>,
}

/// The files pass: every registered file the verify pass saw, shared out
/// by directory, and each directory holding no registered subdirectory
/// right after its files. `seen` loses the directories removed.
fn remove_all_files(
    ctx: &mut Ctx<'_>,
    seen: &mut [bool],
    quarantine: &mut fs::Quarantine,
    second: Option<fs::Quarantine>,
) -> FilesDone {
    let rules = ctx.rules;
    let lanes = Lanes::new();
    let stop = Stop::new();
    let mut files = Files {
        lanes: &lanes,
        stop: &stop,
        seen: &*seen,
        seq: 0,
        quarantine,
        done: Vec::new(),
    };
    let stop_ = &stop;
    let helper = second.map(|mut q2| move |j: &Sweep| remove_files(rules, &mut q2, j, stop_));
    let (walked, theirs) = shared_pass(&lanes, helper, || {
        let r = walk(ctx, &mut files);
        let r = r.map_err(|f| ((files.seq, 0), f));
        if r.is_err() {
            stop.fail(files.seq);
        }
        lanes.close_and_drain(|j| {
            let half = remove_files(rules, files.quarantine, &j, &stop);
            files.done.push(half);
        });
        r
    });
    let mut first = None;
    let present = match walked {
        Ok(p) => p,
        Err((key, f)) => {
            earliest(&mut first, key, f);
            true
        }
    };
    let mut gone = Vec::new();
    let mut done = FilesDone {
        present,
        files: 0,
        dirs: 0,
        missing: 0,
        failure: None,
    };
    let theirs = theirs.unwrap_or_else(|| {
        tracing::warn!("workspace cleanup: the removal's helper thread died");
        earliest(
            &mut first,
            (0, 0),
            rules.fail_at(CleanupCode::IoError, JOB_ROOT),
        );
        Vec::new()
    });
    for h in files.done.into_iter().chain(theirs) {
        done.files += h.files;
        done.missing += h.missing;
        gone.extend(h.dir);
        if let Some((pos, f)) = h.fail {
            earliest(&mut first, (h.seq, pos + 1), f);
        }
    }
    done.dirs = gone.len() as u64;
    for d in gone {
        seen[d as usize] = false;
    }
    done.failure = first.map(|(_, f)| f);
    done
}

/// An empty quarantine directory kept under a spare name in the
/// quarantine root, with its descriptor, for the next cleanup.
pub(crate) struct SpareQuarantine {
    pub(crate) name: CString,
    pub(crate) dir: OwnedFd,
}

/// The quarantine for `job_name`, and whether it was there already (an
/// earlier attempt of this cleanup that could not run, or a killed run,
/// left it, perhaps with what they had moved out of the tree): `spare`
/// renamed to it when given (no inode allocated), else the one there, else
/// a new one (the only case that allocates an inode).
fn claim_quarantine(
    qroot: BorrowedFd<'_>,
    job_name: &CStr,
    anchor: Anchor,
    spare: Option<SpareQuarantine>,
) -> Result<(fs::Quarantine, bool), Fail> {
    if let Some(spare) = spare {
        match fs::rename_noreplace(qroot, &spare.name, job_name) {
            Ok(()) => return Ok((fs::Quarantine::new(spare.dir), false)),
            // Gone, or the name taken (left by an earlier attempt or a
            // killed run): the one there is used, and the spare dropped.
            Err(_) => {
                let _ = fs::rmdir_at(qroot, &spare.name);
            }
        }
    }
    open_quarantine(qroot, job_name, anchor)
}

/// Ends the use of `job_name`'s quarantine: kept as `keep_as` when it is
/// empty (checked by listing it: nothing foreign is ever reused), else
/// removed if empty (or kept where it is, for the operator, if not).
fn end_quarantine(
    qroot: BorrowedFd<'_>,
    job_name: &CStr,
    q: Option<fs::Quarantine>,
    keep_as: Option<CString>,
) -> Option<SpareQuarantine> {
    if let (Some(q), Some(name)) = (q, keep_as) {
        if let Ok(dir) = q.into_dir() {
            let mut entries = 0;
            let listed = fs::for_each_name(dir.as_fd(), |_| {
                entries += 1;
                Err(())
            });
            if matches!(listed, Ok(Ok(())))
                && entries == 0
                && fs::rename_noreplace(qroot, job_name, &name).is_ok()
            {
                return Some(SpareQuarantine { name, dir });
            }
        }
    }
    // Empty unless something foreign was kept there: then it stays, for
    // the operator, and the failure says why.
    let _ = fs::rmdir_at(qroot, job_name);
    None
}

/// Verifies and removes the job directory `job_name` in `jobs` against `inv`.
///
/// Touches nothing but registered entries below (and including)
/// `jobs/job_name`; stops at the first mismatch. The quarantine is `spare`
/// if given (renamed to `job_name`: no inode allocated); when the removal
/// did not fail, or could not run ([`CleanupCode::is_transient`]), and
/// nothing is left in the quarantine, it is renamed to `keep_as` and
/// returned for the next cleanup (or the next attempt of this one). A
/// `spare` the removal did not reach is returned as it was.
pub(crate) fn clean_job(
    jobs: BorrowedFd<'_>,
    qroot: BorrowedFd<'_>,
    job_name: &CStr,
    inv: &Inventory,
    anchor: Anchor,
    spare: Option<SpareQuarantine>,
    keep_as: Option<CString>,
) -> (FsOutcome, Option<SpareQuarantine>) {
    let tree = Tree::new(inv);
    let mut ctx = Ctx {
        jobs,
        job_name,
        rules: Rules {
            inv,
            tree: &tree,
            anchor,
        },
        name_buf: Vec::with_capacity(256),
    };
    let live = tree.live() as u64 + 1;
    let help = tree.live() >= HELP_MIN;
    let mut out = FsOutcome::default();
    let mut seen = vec![false; inv.len()];
    seen[JOB_ROOT as usize] = true;
    let verified = verify(&mut ctx, &mut seen, help);
    match verified {
        Ok(Some(())) => {}
        Ok(None) => {
            out.missing = live;
            // An earlier attempt may have removed the job directory itself
            // and left what it moved out in the quarantine.
            sweep_earlier(qroot, job_name, inv, anchor, &mut out);
            return (out, spare);
        }
        Err(f) => {
            out.failure = Some(f);
            return (out, spare);
        }
    }
    let seen_count = tree
        .children_all()
        .iter()
        .filter(|&&i| seen[i as usize])
        .count() as u64
        + 1;
    let (mut quarantine, existed) = match claim_quarantine(qroot, job_name, anchor, spare) {
        Ok(q) => q,
        Err(f) => {
            out.failure = Some(f);
            return (out, None);
        }
    };
    out.missing = live - seen_count;
    if existed {
        // What an earlier attempt (or a killed run) moved out of the tree
        // and could not destroy: the registered inodes go; anything else
        // is out of the tree already and stays there, for the operator.
        let swept = leftovers::destroy_proven_in(quarantine.dir(), inv, anchor);
        out.files_removed += swept.files;
        out.dirs_removed += swept.dirs;
        if let Some(code) = swept.transient {
            out.failure = Some(Fail {
                code,
                suspect: String::new(),
            });
            let keep = end_quarantine(qroot, job_name, Some(quarantine), keep_as);
            return (out, keep);
        }
    }
    let second = if help {
        // Optional: without an inode for it, the pass runs on one thread.
        open_quarantine(quarantine.dir(), c"1", anchor)
            .ok()
            .map(|(q, _)| q)
    } else {
        None
    };
    let helped = second.is_some();
    let done = remove_all_files(&mut ctx, &mut seen, &mut quarantine, second);
    if helped {
        let _ = fs::rmdir_at(quarantine.dir(), c"1");
    }
    out.files_removed += done.files;
    out.dirs_removed += done.dirs;
    out.missing += done.missing;
    let mut quarantine = Some(quarantine);
    let result = match done.failure {
        Some(f) => Err(f),
        None if !done.present => Ok(false),
        None => {
            let mut dirs = Dirs {
                left: &seen,
                quarantine: quarantine.take().expect("not taken yet"),
                dirs: 0,
                missing: 0,
            };
            let r = walk(&mut ctx, &mut dirs);
            out.dirs_removed += dirs.dirs;
            out.missing += dirs.missing;
            quarantine = Some(dirs.quarantine);
            r
        }
    };
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
    let keep_as = keep_as.filter(|_| out.failure.as_ref().is_none_or(|f| f.code.is_transient()));
    let kept = end_quarantine(qroot, job_name, quarantine, keep_as);
    (out, kept)
}

/// The job directory is gone: destroys what an earlier attempt that could
/// not run left in the job's quarantine, if it left one, as
/// [`leftovers::destroy_proven`] (which removes it once empty).
fn sweep_earlier(
    qroot: BorrowedFd<'_>,
    job_name: &CStr,
    inv: &Inventory,
    anchor: Anchor,
    out: &mut FsOutcome,
) {
    let swept = leftovers::destroy_proven(qroot, job_name, inv, anchor);
    out.files_removed += swept.files;
    out.dirs_removed += swept.dirs;
    if let Some(code) = swept.transient {
        out.failure = Some(Fail {
            code,
            suspect: String::new(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exhaustion says the cleanup could not run (transient, run again);
    /// every other failure, and every fail-closed code, is a verdict.
    #[test]
    fn each_errno_class_maps_to_a_verdict_or_could_not_run() {
        let could_not_run = [
            (Errno::NOSPC, CleanupCode::NoSpace),
            (Errno::DQUOT, CleanupCode::NoSpace),
            (Errno::MFILE, CleanupCode::NoDescriptors),
            (Errno::NFILE, CleanupCode::NoDescriptors),
            (Errno::NOMEM, CleanupCode::NoMemory),
        ];
        for (e, code) in could_not_run {
            assert_eq!(errno_code(e), code, "{e}");
            assert!(code.is_transient(), "{e}");
        }
        for e in [
            Errno::IO,
            Errno::ROFS,
            Errno::PERM,
            Errno::ACCESS,
            Errno::BUSY,
            Errno::LOOP,
            Errno::NOTDIR,
            Errno::NOTEMPTY,
            Errno::XDEV,
            Errno::STALE,
            Errno::INVAL,
            Errno::AGAIN,
        ] {
            assert_eq!(errno_code(e), CleanupCode::IoError, "{e}");
            assert!(!errno_code(e).is_transient(), "{e}");
        }
        for verdict in [
            CleanupCode::SymlinkInJob,
            CleanupCode::SpecialFileInJob,
            CleanupCode::MountBoundary,
            CleanupCode::DeviceChanged,
            CleanupCode::IdentityReplaced,
            CleanupCode::UnregisteredEntry,
            CleanupCode::DirectoryNotEmpty,
            CleanupCode::Tampered,
            CleanupCode::JobNotOwned,
            CleanupCode::ProcessBoundExceeded,
            CleanupCode::IoError,
            CleanupCode::Abandoned,
            CleanupCode::Unsupported,
        ] {
            assert!(!verdict.is_transient(), "{verdict:?}");
        }
    }

    /// When the two threads of a pass met both, the verdict is reported,
    /// whatever their order in the walk; among equals, the first in it.
    #[test]
    fn a_verdict_is_never_hidden_behind_a_transient_failure() {
        let f = |code| Fail {
            code,
            suspect: String::new(),
        };
        let mut best = None;
        earliest(&mut best, (0, 1), f(CleanupCode::NoSpace));
        earliest(&mut best, (3, 1), f(CleanupCode::Tampered));
        earliest(&mut best, (2, 1), f(CleanupCode::NoDescriptors));
        assert_eq!(
            best.as_ref().map(|(k, f)| (*k, f.code)),
            Some(((3, 1), CleanupCode::Tampered))
        );
        earliest(&mut best, (1, 5), f(CleanupCode::UnregisteredEntry));
        assert_eq!(
            best.map(|(k, f)| (k, f.code)),
            Some(((1, 5), CleanupCode::UnregisteredEntry))
        );
        let mut best = None;
        earliest(&mut best, (4, 0), f(CleanupCode::NoMemory));
        earliest(&mut best, (2, 0), f(CleanupCode::NoSpace));
        assert_eq!(
            best.map(|(k, f)| (k, f.code)),
            Some(((2, 0), CleanupCode::NoSpace))
        );
    }
}

/// The cleanup's two threads under shuttle's scheduler: the real
/// [`Lanes`], [`Stop`], [`shared_pass`] and [`earliest`], driven by a walk
/// and jobs shaped like the verify pass's (`look`), the filesystem left out.
/// Built and run only under `cfg(custodian_shuttle)` (`.ci/run`, stage
/// "shuttle"); see `docs/verification.md`.
#[cfg(all(test, custodian_shuttle))]
mod shuttle_tests {
    use super::*;
    use std::sync::atomic::{AtomicU8, AtomicUsize};

    /// A deliberately broken line planted in the real code, to show a
    /// scenario fails on it.
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub(super) enum Plant {
        /// `Lanes::close` does not wake the helper.
        CloseWithoutWaking = 1,
        /// `Stop::before` stops every job once any failed, those before
        /// the failing one included.
        StopOnAnyFailure = 2,
    }

    /// The planted line, if any (`std`: outside shuttle's control; the
    /// stage runs these tests one at a time).
    static PLANTED: AtomicU8 = AtomicU8::new(0);

    pub(super) fn planted(p: Plant) -> bool {
        PLANTED.load(std::sync::atomic::Ordering::Relaxed) == p as u8
    }

    /// Entries per job: the stop is looked at before each.
    const ENTRIES: usize = 2;

    /// What one job did: its place, whether it looked at every entry, and
    /// its failure (entry, failure).
    struct Ran {
        seq: u64,
        whole: bool,
        fail: Option<(usize, Fail)>,
        by_helper: bool,
    }

    /// `look`'s shape: the stop before each entry; a failing job fails at
    /// its last entry and stops the jobs after it.
    fn job(fates: &[Option<CleanupCode>], stop: &Stop, seq: u64, by_helper: bool) -> Ran {
        let mut out = Ran {
            seq,
            whole: false,
            fail: None,
            by_helper,
        };
        for pos in 0..ENTRIES {
            if stop.before(seq) {
                return out;
            }
            if pos + 1 == ENTRIES {
                if let Some(code) = fates[seq as usize] {
                    out.fail = Some((
                        pos,
                        Fail {
                            code,
                            suspect: String::new(),
                        },
                    ));
                }
            }
        }
        out.whole = true;
        if out.fail.is_some() {
            stop.fail(seq);
        }
        out
    }

    /// One pass over jobs `0..fates.len()` (a queue of at most `max`),
    /// with the helper; returns every job's record and the merged failure.
    fn pass(fates: &[Option<CleanupCode>], max: usize) -> (Vec<Ran>, Option<((u64, usize), Fail)>) {
        let lanes = Lanes::new();
        let stop = Stop::new();
        let mut mine = Vec::new();
        let helper = Some(|j: &u64| job(fates, &stop, *j, true));
        let ((), theirs) = shared_pass(&lanes, helper, || {
            for seq in 0..fates.len() as u64 {
                // The walk descends no further once a job failed.
                if stop.any() {
                    break;
                }
                if let Some(j) = lanes.push_or_take(seq, max) {
                    mine.push(job(fates, &stop, j, false));
                }
            }
            lanes.close_and_drain(|j| mine.push(job(fates, &stop, j, false)));
        });
        let theirs = theirs.expect("the helper thread ended");
        let mut first = None;
        let mut all = Vec::new();
        for r in mine.into_iter().chain(theirs) {
            if let Some((pos, f)) = &r.fail {
                earliest(
                    &mut first,
                    (r.seq, pos + 1),
                    Fail {
                        code: f.code,
                        suspect: String::new(),
                    },
                );
            }
            all.push(r);
        }
        (all, first)
    }

    /// Counts outside shuttle's control, across its executions.
    static EXECUTIONS: AtomicUsize = AtomicUsize::new(0);
    static BY_HELPER: AtomicUsize = AtomicUsize::new(0);
    static HARDER_LATER: AtomicUsize = AtomicUsize::new(0);

    /// The properties of one pass over `fates`.
    fn check(fates: &'static [Option<CleanupCode>], max: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        EXECUTIONS.fetch_add(1, Relaxed);
        let (ran, first) = pass(fates, max);
        // Every job queued is taken once, by one thread.
        let mut seqs: Vec<u64> = ran.iter().map(|r| r.seq).collect();
        seqs.sort_unstable();
        let n = seqs.len();
        seqs.dedup();
        assert_eq!(seqs.len(), n, "a job was taken twice");
        if ran.iter().any(|r| r.by_helper) {
            BY_HELPER.fetch_add(1, Relaxed);
        }
        let first_failing = fates.iter().position(Option::is_some).map(|i| i as u64);
        match first_failing {
            None => {
                // Nothing fails: every job, whole, and no failure.
                assert_eq!(n, fates.len(), "a job was lost");
                assert!(ran.iter().all(|r| r.whole), "a job stopped with no failure");
                assert!(first.is_none());
            }
            Some(f) => {
                // Every job up to the first failing one ran whole: nothing
                // before a failure is skipped, and that failure is found.
                for s in 0..=f {
                    let r = ran.iter().find(|r| r.seq == s);
                    assert!(
                        r.is_some_and(|r| r.whole),
                        "job {s}, before or at the first failure {f}, did not run whole"
                    );
                }
                let ((seq, _), fail) = first.expect("a failure was found");
                let expected = fates[f as usize].unwrap();
                if seq == f {
                    assert_eq!(fail.code, expected);
                } else {
                    // Only a suspicious failure found later by the other
                    // thread may stand before a transient first one.
                    assert!(
                        expected.is_transient() && !fail.code.is_transient() && seq > f,
                        "reported job {seq} ({:?}), the first failing is {f} ({expected:?})",
                        fail.code
                    );
                    HARDER_LATER.fetch_add(1, Relaxed);
                }
            }
        }
    }

    const T: Option<CleanupCode> = Some(CleanupCode::Tampered);
    const N: Option<CleanupCode> = Some(CleanupCode::NoSpace);

    /// Runs `f` under shuttle's random and PCT schedulers, 2,000 schedules
    /// each; returns the executions counted.
    fn explore(f: impl Fn() + Send + Sync + Clone + 'static) -> usize {
        use std::sync::atomic::Ordering::Relaxed;
        let before = EXECUTIONS.load(Relaxed);
        crate::sync::shim::shuttle_explore(f, 2_000);
        let n = EXECUTIONS.load(Relaxed) - before;
        assert!(n >= 4_000, "explored {n} executions");
        n
    }

    #[test]
    fn every_job_is_done_once_and_none_is_lost_by_either_thread() {
        use std::sync::atomic::Ordering::Relaxed;
        static FATES: [Option<CleanupCode>; 6] = [None; 6];
        let helped = BY_HELPER.load(Relaxed);
        let n = explore(|| check(&FATES, 2));
        eprintln!("no failure, 6 jobs, a queue of 2: {n} executions");
        assert!(
            BY_HELPER.load(Relaxed) > helped,
            "the helper never took a job"
        );
    }

    #[test]
    fn the_first_failure_in_the_walks_order_is_reported_and_nothing_before_it_skipped() {
        static FATES: [Option<CleanupCode>; 6] = [None, None, T, None, T, None];
        let n = explore(|| check(&FATES, 2));
        eprintln!("two suspicious failures, 6 jobs: {n} executions");
    }

    /// A transient failure first and a suspicious one later: the single
    /// walk would report the first; with two threads the later one may be
    /// found too, and then it is what is reported (never hidden behind a
    /// retry). Both outcomes occur.
    #[test]
    fn a_suspicious_failure_found_beside_a_transient_one_is_never_hidden() {
        use std::sync::atomic::Ordering::Relaxed;
        static FATES: [Option<CleanupCode>; 5] = [None, N, None, T, None];
        let later = HARDER_LATER.load(Relaxed);
        let n = explore(|| check(&FATES, 2));
        let harder = HARDER_LATER.load(Relaxed) - later;
        eprintln!(
            "transient then suspicious: {n} executions, the suspicious one reported in {harder}"
        );
        assert!(harder > 0 && harder < n, "both verdicts are reachable");
    }

    /// Runs `f` with `plant` in the real code; the message of the failing
    /// schedule shuttle found, if it found one.
    fn caught(plant: Plant, f: impl Fn() + Send + Sync + Clone + 'static) -> Option<String> {
        PLANTED.store(plant as u8, std::sync::atomic::Ordering::Relaxed);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::sync::shim::shuttle_explore(f, 2_000);
        }));
        PLANTED.store(0, std::sync::atomic::Ordering::Relaxed);
        let payload = r.err()?;
        Some(
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default(),
        )
    }

    #[test]
    fn a_close_that_does_not_wake_the_helper_is_caught() {
        static FATES: [Option<CleanupCode>; 4] = [None; 4];
        let why = caught(Plant::CloseWithoutWaking, || check(&FATES, 2));
        eprintln!("caught: {why:?}");
        assert!(why.is_some_and(|m| m.contains("deadlock")));
    }

    #[test]
    fn a_stop_that_also_stops_the_jobs_before_the_failure_is_caught() {
        static FATES: [Option<CleanupCode>; 4] = [None, None, T, None];
        let why = caught(Plant::StopOnAnyFailure, || check(&FATES, 2));
        eprintln!("caught: {why:?}");
        assert!(why.is_some_and(|m| m.contains("did not run whole")));
    }
}
