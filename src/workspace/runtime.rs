//! The workspace runtime: requests, artifacts, their barriers, cleanup (`cfg(unix)`).

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::barrier::{Barrier, Revival, Stopped};
use super::identity::{Anchor, Mismatch};
use super::inventory::{ArtifactKind, Inventory, JOB_ROOT};
use super::journal::{self, Record};
use super::journal_file::{self, JournalFile, SPARE_PREFIX, Spare};
use super::leftovers;
use super::remove;
use super::resolve::{self, UserPathError};
use super::result::{CleanupCode, CleanupCounts, CleanupResult, CleanupStatus};
use super::{RequestId, WorkspaceConfig, WorkspaceError, validate_name};
use crate::fs::{self, Errno, FileKind, FlockOperation, Identity, Observed};
use crate::sync::shim::{Mutex, lock};
use crate::sync::{Abandoned, Elected, Holdings, OpenRefusal, OwnerGuard};

const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;
/// The largest journal replayed (a journal is about 80 bytes per artifact).
const MAX_JOURNAL: u64 = 1 << 30;
/// At most this many emptied journals are kept for reuse.
const MAX_SPARE_JOURNALS: usize = 256;

/// What [`Workspace::reclaim`] does with one journal.
enum Prepared {
    /// The journal holds a verdict: nothing to do.
    Decided,
    /// Decided without a cleanup (nothing proven to remove, or refused).
    Filed(CleanupResult),
    /// The job is proven: run the cleanup on this state.
    Clean(Arc<RequestState>),
}

/// A workspace root held by descriptor, with its internal namespace and the
/// requests open in it.
///
/// Cheap to clone; every clone is the same workspace. Embedders usually
/// reach it through [`Runtime`](crate::Runtime), which opens a request's
/// job and cleans it up for them.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::io::Write;
/// use custodian::workspace::{CleanupStatus, Workspace, WorkspaceConfig};
///
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("user.txt"), "not the request's")?;
/// let workspace = Workspace::open(dir.path(), WorkspaceConfig::default())?;
/// let job = workspace.open_request("req-1")?;
/// job.create_file("out/result.json")?.write_all(b"{}")?;
///
/// let result = workspace.cleanup("req-1").await?;
/// assert_eq!(result.status, CleanupStatus::Cleaned);
/// assert_eq!((result.counts.files_removed, result.counts.dirs_removed), (1, 2));
/// assert!(dir.path().join("user.txt").exists());
/// // Every later caller receives the same result; nothing runs twice.
/// assert_eq!(job.cleanup().await, result);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Workspace {
    inner: Arc<Inner>,
}

struct Inner {
    root: OwnedFd,
    jobs: OwnedFd,
    /// `<internal>/quarantine`: where cleanup moves entries before
    /// destroying them (one subdirectory per request being cleaned).
    quarantine: OwnedFd,
    /// `<internal>/journal`: one ownership journal per request.
    journals: OwnedFd,
    /// `<internal>` itself, holding the exclusive `flock` that makes this
    /// the workspace's only owner until it is closed or dropped.
    owner: OwnedFd,
    internal_identity: Identity,
    /// The root's identity: a launch's `LaunchOptions::workspace` must name
    /// this directory.
    root_identity: Identity,
    anchor: Anchor,
    config: WorkspaceConfig,
    /// The requests held (open, or taken by a cleanup or a reclaim), fenced
    /// by each id's cleanup election: a cleanup of an id held nothing for
    /// refuses every open of the id before it decides the id is gone.
    requests: Holdings<RequestId, Arc<RequestState>, CleanupResult>,
    /// Set by [`Workspace::close`]: no spare is kept from then on (opens
    /// are refused by `requests`).
    closed: AtomicBool,
    /// Set by [`Workspace::close`] before it releases the `flock`: from then
    /// on no cleanup task of this handle touches the namespace (another
    /// owner may hold it).
    released: AtomicBool,
    /// Every cleanup task, so that [`Workspace::close`] releases the lock
    /// only once none is running.
    tasks: tokio_util::task::TaskTracker,
    /// Journals of requests cleaned clean, emptied and renamed to a spare
    /// name, for new requests to reuse (no inode allocated per request).
    spares: Mutex<Vec<Spare>>,
    /// The number of the next spare name.
    next_spare: AtomicU64,
    /// Empty quarantines of requests cleaned, renamed to a spare name, for
    /// the next cleanups (no directory created and removed per cleanup).
    spare_quarantines: Mutex<Vec<remove::SpareQuarantine>>,
    /// The layer above's side: revives the barriers of dead runs' journals,
    /// and is told when the reclaim and the close are done. Without it a
    /// journalled barrier cannot be honoured, and its job is kept.
    revival: Option<Arc<dyn Revival>>,
}

impl Inner {
    /// The journal of a new request `name`: a spare renamed to it, or a new
    /// file. Either way `EEXIST` when anything holds the name.
    fn new_journal(&self, name: &CStr) -> Result<JournalFile, Errno> {
        let journals = self.journals.as_fd();
        let spare = lock(&self.spares).pop();
        if let Some(spare) = spare {
            match JournalFile::adopt(spare, journals, name) {
                Ok(j) => return Ok(j),
                Err((spare, e)) if e == Errno::EXIST => {
                    self.keep_spare(spare);
                    return Err(e);
                }
                Err((spare, _)) => {
                    let _ = fs::unlink_at(journals, spare.name.as_c_str());
                }
            }
        }
        JournalFile::create(journals, name)
    }

    /// Removes the journal `name` of a request cleaned clean: emptied and
    /// kept as a spare while there is room, else unlinked.
    /// Returns whether the journal is gone from the request's name.
    fn retire_journal(&self, journal: JournalFile, id: &RequestId, name: &CStr) -> bool {
        let journals = self.journals.as_fd();
        if lock(&self.spares).len() < MAX_SPARE_JOURNALS && !self.closed.load(Ordering::Acquire) {
            let n = self.next_spare.fetch_add(1, Ordering::Relaxed);
            let spare = CString::new(format!("{SPARE_PREFIX}{n}")).expect("no NUL");
            if let Ok(spare) = journal.retire(journals, name, spare) {
                self.keep_spare(spare);
                return true;
            }
        } else {
            drop(journal);
        }
        match fs::unlink_at(journals, name) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(request = %id, error = %e, "removing a clean request's journal failed");
                false
            }
        }
    }

    fn keep_spare(&self, spare: Spare) {
        let mut spares = lock(&self.spares);
        if spares.len() < MAX_SPARE_JOURNALS && !self.closed.load(Ordering::Acquire) {
            spares.push(spare);
        } else {
            drop(spares);
            let _ = fs::unlink_at(self.journals.as_fd(), spare.name.as_c_str());
        }
    }

    /// Unlinks every spare journal and removes every spare quarantine (the
    /// workspace is closing).
    fn drop_spares(&self) {
        let spares = std::mem::take(&mut *lock(&self.spares));
        for spare in spares {
            let _ = fs::unlink_at(self.journals.as_fd(), spare.name.as_c_str());
        }
        let quarantines = std::mem::take(&mut *lock(&self.spare_quarantines));
        for q in quarantines {
            let _ = fs::rmdir_at(self.quarantine.as_fd(), &q.name);
        }
    }

    /// A name for the next spare quarantine.
    fn spare_quarantine_name(&self) -> CString {
        let n = self.next_spare.fetch_add(1, Ordering::Relaxed);
        CString::new(format!("{SPARE_PREFIX}{n}")).expect("no NUL")
    }

    /// The quarantine a new request's cleanup will use, reserved now so
    /// that the cleanup never needs an inode: a spare one, else
    /// `mkdirat(<internal>/quarantine, .spare-<n>)`.
    ///
    /// # Errors
    ///
    /// The `errno` of the `mkdirat`, `openat` or `statx`, or `EXDEV` when
    /// the new directory is not a plain directory on the workspace's mount.
    fn reserve_quarantine(&self) -> Result<remove::SpareQuarantine, Errno> {
        if let Some(q) = lock(&self.spare_quarantines).pop() {
            return Ok(q);
        }
        let name = self.spare_quarantine_name();
        let qroot = self.quarantine.as_fd();
        fs::mkdir_at(qroot, name.as_c_str(), DIR_MODE)?;
        let opened = fs::open_dir_at(qroot, name.as_c_str()).and_then(|dir| {
            let obs = fs::observe_fd(dir.as_fd())?;
            if obs.kind != FileKind::Dir || self.anchor.admit(&obs).is_err() {
                return Err(Errno::XDEV);
            }
            Ok(dir)
        });
        match opened {
            Ok(dir) => Ok(remove::SpareQuarantine { name, dir }),
            Err(e) => {
                let _ = fs::rmdir_at(qroot, name.as_c_str());
                Err(e)
            }
        }
    }

    fn keep_quarantine(&self, q: remove::SpareQuarantine) {
        let mut kept = lock(&self.spare_quarantines);
        if kept.len() < MAX_SPARE_JOURNALS && !self.closed.load(Ordering::Acquire) {
            kept.push(q);
        } else {
            drop(kept);
            let _ = fs::rmdir_at(self.quarantine.as_fd(), &q.name);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.drop_spares();
        // The quarantines reserved by requests never cleaned here.
        for state in self.requests.states() {
            if let Some(q) = lock(&state.quarantine).take() {
                let _ = fs::rmdir_at(self.quarantine.as_fd(), &q.name);
            }
        }
    }
}

struct RequestState {
    id: RequestId,
    cname: CString,
    anchor: Anchor,
    fs: Mutex<FsState>,
    /// Locked before `fs` when both are held.
    barrier: Mutex<BarrierSlot>,
    /// Replayed from the journal of a node that died: a clean cleanup is
    /// reported as [`CleanupStatus::Reclaimed`].
    reclaimed: bool,
    /// The quarantine reserved for the request's cleanup (see
    /// [`Inner::reserve_quarantine`]); kept again by an attempt that could
    /// not run, for the next one.
    quarantine: Mutex<Option<remove::SpareQuarantine>>,
}

/// The request's barrier ([`Job::barrier_or_insert`]): stopped by its cleanup
/// before any file is removed. Once `closed` (the cleanup took it), no barrier
/// is put on the request.
#[derive(Default)]
struct BarrierSlot {
    closed: bool,
    barrier: Option<Arc<dyn Barrier>>,
    /// The same barrier as its own type, for
    /// [`Job::barrier_or_insert`] to hand back (a revived one has none:
    /// nothing launches for a reclaimed request).
    typed: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

struct FsState {
    closed: bool,
    /// The job directory; dropped when cleanup starts.
    job: Option<OwnedFd>,
    inventory: Inventory,
    /// The request's ownership journal; `None` once an append failed (then
    /// nothing more is created for the request).
    journal: Option<JournalFile>,
    /// The journal holds the `CleanupStarted` record (written once: an
    /// attempt that could not run is followed by another).
    cleanup_journalled: bool,
    /// The journal holds the request's barrier record.
    barrier_journalled: bool,
}

impl FsState {
    /// Appends `record` to the journal; a failed append closes the journal
    /// for good, so no later record can follow a torn one.
    fn journal(&mut self, record: &Record) -> Result<(), WorkspaceError> {
        let Some(j) = self.journal.as_mut() else {
            return Err(WorkspaceError::Io {
                op: "append journal",
                source: io::Error::other("the request's journal failed earlier"),
            });
        };
        j.append(record).map_err(|e| {
            self.journal = None;
            io_err("append journal")(e)
        })
    }
}

fn io_err<E: Into<io::Error>>(op: &'static str) -> impl FnOnce(E) -> WorkspaceError {
    move |source| WorkspaceError::Io {
        op,
        source: source.into(),
    }
}

fn untrusted(what: &'static str) -> impl FnOnce(Mismatch) -> WorkspaceError {
    move |m| WorkspaceError::Untrusted {
        what,
        code: CleanupCode::from(m),
    }
}

/// Opens (creating if needed) the internal directory `name` in `parent`, and
/// checks that it is a plain directory on `anchor`.
fn ensure_dir(
    parent: BorrowedFd<'_>,
    name: &str,
    anchor: &Anchor,
    what: &'static str,
) -> Result<(OwnedFd, Observed), WorkspaceError> {
    match fs::mkdir_at(parent, name, DIR_MODE) {
        Ok(()) => {}
        Err(e) if e == Errno::EXIST => {}
        Err(e) => return Err(io_err("mkdirat internal")(e)),
    }
    let fd = fs::open_dir_at(parent, name).map_err(|e| {
        let is = |n: Errno| e == n;
        if is(Errno::LOOP) || is(Errno::NOTDIR) {
            // O_NOFOLLOW | O_DIRECTORY on a symlink: ELOOP or ENOTDIR.
            let code = match fs::observe_at(parent, &CString::new(name).unwrap_or_default()) {
                Ok(o) if o.kind == FileKind::Symlink => CleanupCode::SymlinkInJob,
                Ok(o) if o.kind == FileKind::Special => CleanupCode::SpecialFileInJob,
                _ => CleanupCode::IdentityReplaced,
            };
            WorkspaceError::Untrusted { what, code }
        } else {
            io_err("openat internal")(e)
        }
    })?;
    let obs = fs::observe_fd(fd.as_fd()).map_err(io_err("statx internal"))?;
    if obs.kind != FileKind::Dir {
        return Err(WorkspaceError::Untrusted {
            what,
            code: CleanupCode::IdentityReplaced,
        });
    }
    anchor.admit(&obs).map_err(untrusted(what))?;
    Ok((fd, obs))
}

impl Workspace {
    /// Opens the workspace rooted at `root` and its internal namespace
    /// `<root>/<internal>/job`, creating the namespace directories if needed.
    ///
    /// `root` itself is resolved normally (it is operator configuration);
    /// everything below it is opened by descriptor, one component at a time,
    /// without following symlinks, and must stay on the root's device and
    /// mount.
    ///
    /// The returned value (and its clones) is the workspace's only owner
    /// until [`Workspace::close`] returned: it holds an exclusive `flock(2)`
    /// on the internal namespace, which `close` releases (after its last
    /// cleanup task) and the kernel drops when the last clone is dropped or
    /// the process dies.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::InvalidInternalName`] for a bad namespace name,
    /// [`WorkspaceError::Io`] if the root cannot be opened,
    /// [`WorkspaceError::Untrusted`] if a namespace component is a symlink,
    /// another mount, or not a directory, [`WorkspaceError::Locked`] while
    /// another owner (in this process or another) has it open.
    ///
    /// A workspace opened this way cannot honour a barrier a dead run
    /// journalled ([`Job::journal_barrier`]): the reclaim keeps that job
    /// ([`CleanupCode::ProcessBoundExceeded`]). Open it with
    /// [`Workspace::open_with`] (`request::open_workspace` does) where
    /// requests launch processes.
    pub fn open(root: impl AsRef<Path>, config: WorkspaceConfig) -> Result<Self, WorkspaceError> {
        Self::open_with(root, config, None)
    }

    /// [`Workspace::open`], with the layer above's [`Revival`]: a reclaim
    /// revives each barrier a dead run journalled through it and stops it
    /// before any file of that job is removed.
    ///
    /// # Errors
    ///
    /// As [`Workspace::open`].
    pub fn open_with(
        root: impl AsRef<Path>,
        config: WorkspaceConfig,
        revival: Option<Arc<dyn Revival>>,
    ) -> Result<Self, WorkspaceError> {
        if validate_name(&config.internal_name).is_err() {
            return Err(WorkspaceError::InvalidInternalName);
        }
        let root = fs::open_configured_dir(root.as_ref()).map_err(io_err("open root"))?;
        let root_obs = fs::observe_fd(root.as_fd()).map_err(io_err("statx root"))?;
        let anchor = Anchor {
            dev: root_obs.identity.dev,
            mount: root_obs.identity.mount,
        };
        let (internal, internal_obs) =
            ensure_dir(root.as_fd(), &config.internal_name, &anchor, "internal")?;
        // One owner per workspace: a reclaim adopts every journal without a
        // verdict, which is right only if no other owner is alive to write
        // one. The kernel drops the lock with the last descriptor, so a
        // killed owner never holds it.
        match fs::flock(internal.as_fd(), FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(Errno::WOULDBLOCK) => return Err(WorkspaceError::Locked),
            Err(e) => return Err(io_err("lock the internal namespace")(e)),
        }
        let (jobs, _) = ensure_dir(internal.as_fd(), super::JOB_DIR_NAME, &anchor, "job")?;
        let (quarantine, _) = ensure_dir(internal.as_fd(), "quarantine", &anchor, "quarantine")?;
        let (journals, _) = ensure_dir(internal.as_fd(), "journal", &anchor, "journal")?;
        Ok(Workspace {
            inner: Arc::new(Inner {
                root,
                jobs,
                quarantine,
                journals,
                owner: internal,
                internal_identity: internal_obs.identity,
                root_identity: root_obs.identity,
                anchor,
                config: config.clone(),
                requests: Holdings::new(config.result_cache),
                closed: AtomicBool::new(false),
                released: AtomicBool::new(false),
                tasks: tokio_util::task::TaskTracker::new(),
                spares: Mutex::new(Vec::new()),
                next_spare: AtomicU64::new(0),
                spare_quarantines: Mutex::new(Vec::new()),
                revival,
            }),
        })
    }

    /// The configuration the workspace was opened with.
    pub fn config(&self) -> &WorkspaceConfig {
        &self.inner.config
    }

    /// The device and mount every artifact must live on.
    pub fn anchor(&self) -> Anchor {
        self.inner.anchor
    }

    /// Opens request `id`: validates it (before any syscall), then creates
    /// its job directory `<internal>/job/<id>` with `mkdirat` and registers
    /// the directory's identity as the inventory's root.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::InvalidRequestId`] for a refused id (no syscall made),
    /// [`WorkspaceError::AlreadyOpen`], [`WorkspaceError::AlreadyCleaned`]
    /// once a cleanup of the id started (even one that found nothing to
    /// clean) while its result is cached, [`WorkspaceError::JobExists`] if
    /// the directory is already there, [`WorkspaceError::Closed`] after
    /// [`Workspace::close`], [`WorkspaceError::Untrusted`] /
    /// [`WorkspaceError::Io`] if it cannot be created safely.
    pub fn open_request(&self, id: &str) -> Result<Job, WorkspaceError> {
        let id = RequestId::new(id)?;
        // Decided and created under the lock of `requests`: a cleanup of
        // the id either entered its election first (refused here: it may
        // have found nothing and be about to report the id gone), or it
        // finds this request held and cleans it. `close` refuses under the
        // same lock, so a request is either listed (and cleaned) or refused.
        let opened = self
            .inner
            .requests
            .open(id.clone(), || self.make_request(&id));
        match opened {
            Ok(made) => made.map(|state| Job {
                ws: self.clone(),
                state,
            }),
            Err(OpenRefusal::Closed) => Err(WorkspaceError::Closed),
            Err(OpenRefusal::Held) => Err(WorkspaceError::AlreadyOpen { request: id }),
            Err(OpenRefusal::Cleaning | OpenRefusal::Cleaned) => {
                Err(WorkspaceError::AlreadyCleaned { request: id })
            }
        }
    }

    /// The state of a new request `id`: its quarantine reserved, its
    /// journal and job directory created.
    fn make_request(&self, id: &RequestId) -> Result<Arc<RequestState>, WorkspaceError> {
        let cname = CString::new(id.as_str()).expect("validated ids hold no NUL");
        // The cleanup's quarantine is reserved first: the cleanup then needs
        // no new inode, whatever the filesystem is short of by then.
        let reserved = self
            .inner
            .reserve_quarantine()
            .map_err(io_err("reserve quarantine"))?;
        let (job, obs, journal) = match self.create_job(id, &cname) {
            Ok(made) => made,
            Err(e) => {
                self.inner.keep_quarantine(reserved);
                return Err(e);
            }
        };
        let state = Arc::new(RequestState {
            id: id.clone(),
            cname,
            anchor: self.inner.anchor,
            fs: Mutex::new(FsState {
                closed: false,
                job: Some(job),
                inventory: Inventory::new(obs.identity),
                journal: Some(journal),
                cleanup_journalled: false,
                barrier_journalled: false,
            }),
            barrier: Mutex::new(BarrierSlot::default()),
            reclaimed: false,
            quarantine: Mutex::new(Some(reserved)),
        });
        Ok(state)
    }

    /// The journal and the job directory of a new request, each checked.
    fn create_job(
        &self,
        id: &RequestId,
        cname: &CString,
    ) -> Result<(OwnedFd, Observed, JournalFile), WorkspaceError> {
        let id = id.clone();
        let jobs = self.inner.jobs.as_fd();
        // The journal comes first: a job directory without one is never
        // adopted, and one left by an earlier run (awaiting reclaim, or kept
        // with a failed verdict) is never reused.
        let journals = self.inner.journals.as_fd();
        let mut journal = match self.inner.new_journal(cname) {
            Ok(j) => j,
            Err(e) if e == Errno::EXIST => {
                return Err(WorkspaceError::JobExists { request: id });
            }
            Err(e) => return Err(io_err("create journal")(e)),
        };
        let drop_journal = || {
            let _ = fs::unlink_at(journals, cname.as_c_str());
        };
        if let Err(e) = journal.append(&Record::Open {
            request: id.as_str().as_bytes().to_vec(),
        }) {
            drop_journal();
            return Err(io_err("append journal")(e));
        }
        match fs::mkdir_at(jobs, cname.as_c_str(), DIR_MODE) {
            Ok(()) => {}
            Err(e) if e == Errno::EXIST => {
                drop_journal();
                return Err(WorkspaceError::JobExists { request: id });
            }
            Err(e) => {
                drop_journal();
                return Err(io_err("mkdirat job")(e));
            }
        }
        let job = fs::open_dir_at(jobs, cname.as_c_str()).map_err(io_err("openat job"))?;
        let obs = fs::observe_fd(job.as_fd()).map_err(io_err("statx job"))?;
        if obs.kind != FileKind::Dir {
            return Err(WorkspaceError::Untrusted {
                what: "job",
                code: CleanupCode::IdentityReplaced,
            });
        }
        self.inner.anchor.admit(&obs).map_err(untrusted("job"))?;
        journal
            .append(&Record::JobCreated {
                identity: obs.identity,
            })
            .map_err(io_err("append journal"))?;
        Ok((job, obs, journal))
    }

    /// The ids of the requests open (not yet cleaned) in this workspace.
    pub fn active_requests(&self) -> Vec<RequestId> {
        self.inner.requests.keys()
    }

    /// Resolves a caller's file-tool path, relative to the workspace root.
    ///
    /// The result never names the internal namespace or anything in it,
    /// whatever the spelling (`./.custodian`, `a/../.custodian`,
    /// `.CUSTODIAN/`, …). The check is lexical: open the result with
    /// [`Workspace::open_user_file`] (or another no-follow opener) so that a
    /// symlink cannot lead there either.
    ///
    /// # Errors
    ///
    /// [`UserPathError`] for empty, absolute, escaping or internal paths.
    pub fn resolve_user_path(&self, path: &str) -> Result<PathBuf, UserPathError> {
        resolve::resolve(&self.inner.config.internal_name, path)
    }

    /// Opens a caller's file for reading (or creates/truncates it for writing
    /// when `write`), relative to the root, without following any symlink and
    /// never inside the internal namespace.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::InternalPath`] if the path is refused or reaches the
    /// internal namespace; [`WorkspaceError::Io`] if a component is a symlink
    /// (`ELOOP`/`ENOTDIR`) or cannot be opened.
    pub fn open_user_file(&self, path: &str, write: bool) -> Result<File, WorkspaceError> {
        let rel = self
            .resolve_user_path(path)
            .map_err(WorkspaceError::InternalPath)?;
        let comps: Vec<_> = rel.components().map(|c| c.as_os_str().to_owned()).collect();
        let Some((last, dirs)) = comps.split_last() else {
            return Err(WorkspaceError::InvalidName { reason: "empty" });
        };
        let mut cur: Option<OwnedFd> = None;
        for d in dirs {
            let parent = cur.as_ref().map_or(self.inner.root.as_fd(), |f| f.as_fd());
            let fd = fs::open_dir_at(parent, d.as_os_str()).map_err(io_err("openat user dir"))?;
            let obs = fs::observe_fd(fd.as_fd()).map_err(io_err("statx user dir"))?;
            if obs.identity.dev == self.inner.internal_identity.dev
                && obs.identity.ino == self.inner.internal_identity.ino
            {
                return Err(WorkspaceError::InternalPath(UserPathError::Internal));
            }
            cur = Some(fd);
        }
        let parent = cur.as_ref().map_or(self.inner.root.as_fd(), |f| f.as_fd());
        let access = if write {
            fs::Access::WriteTruncate
        } else {
            fs::Access::Read
        };
        let fd = fs::open_regular(parent, last.as_os_str(), access)
            .map_err(io_err("openat user file"))?;
        Ok(File::from(fd))
    }

    /// Cleans up request `id` exactly once and returns its result.
    ///
    /// The first caller for an id starts the work on the tokio runtime (it
    /// finishes even if every caller goes away); concurrent and later callers
    /// receive a clone of the same result while it is cached. Once evicted, a
    /// repeated call only checks that the job directory is gone.
    ///
    /// A cleanup that **could not run** ([`CleanupResult::is_transient`]:
    /// `no_space`, `no_descriptors`, `no_memory`) is the exception: its
    /// result reaches the callers of that attempt only, is neither cached
    /// nor journalled, and the request stays held, so the next call (or
    /// [`Workspace::close`], or a restarted runtime's
    /// [`Workspace::reclaim`]) runs it again. Attempts never overlap.
    /// For an id this runtime holds nothing for whose journal has no
    /// verdict, the call replays the journal as the reclaim would.
    ///
    /// Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::InvalidRequestId`] for a refused id (no syscall
    /// made). Cleanup failures are not errors: they are a
    /// [`CleanupResult`] with status [`CleanupStatus::Failed`].
    pub async fn cleanup(&self, id: &str) -> Result<CleanupResult, WorkspaceError> {
        let id = RequestId::new(id)?;
        if self.inner.released.load(Ordering::SeqCst) {
            return self.cleanup_result(&id).ok_or(WorkspaceError::Closed);
        }
        Ok(self.cleanup_id(id).await)
    }

    /// The result of request `id`'s cleanup, if it finished and is still
    /// cached (a later [`Workspace::cleanup`] of the id returns the same).
    /// Never a result of a cleanup that could not run: that one is run
    /// again.
    pub fn cleanup_result(&self, id: &RequestId) -> Option<CleanupResult> {
        match self.inner.requests.result(id)? {
            Ok(r) => Some(r),
            Err(Abandoned) => Some(CleanupResult::failed(
                CleanupCode::Abandoned,
                CleanupCounts::default(),
                None,
            )),
        }
    }

    async fn cleanup_id(&self, id: RequestId) -> CleanupResult {
        // Entering the election fences every later open of the id
        // (`Holdings`), before the task looks at what the id holds.
        let waiter = match self.inner.requests.elect(id.clone()) {
            Elected::Owner(guard) => {
                let waiter = guard.waiter();
                let inner = self.inner.clone();
                // The guard moves into the task: the work finishes even if
                // every caller, this one included, goes away. If the task
                // dies, the guard's drop publishes `Abandoned`. Tracked, and
                // refused once `close` released the lock: the namespace may
                // have another owner by then.
                self.inner.tasks.spawn(async move {
                    if inner.released.load(Ordering::SeqCst) {
                        guard.abandon();
                        return;
                    }
                    let result = cleanup_work(&inner, &guard, &id).await;
                    if result.is_transient() {
                        // Could not run: this attempt's callers get the
                        // answer, the request stays held, and the next
                        // cleanup of the id (a caller's, the close's) owns
                        // a new attempt.
                        guard.complete_transient(result);
                        return;
                    }
                    // The request is forgotten, then the result filed; the
                    // id is refused in between and while the result is
                    // cached, so a duplicate cannot mistake a new job's
                    // cleanup for this one.
                    inner.requests.complete(&id, guard, result);
                });
                waiter
            }
            Elected::Waiter(waiter) => waiter,
        };
        match waiter.await {
            Ok(result) => result,
            Err(Abandoned) => {
                CleanupResult::failed(CleanupCode::Abandoned, CleanupCounts::default(), None)
            }
        }
    }

    /// Replays every ownership journal in the workspace that holds no
    /// verdict (left by a node that died before its cleanup finished) and
    /// runs the same fail-closed cleanup for those requests, in this
    /// workspace's name. Returns each replayed request's result, which is
    /// also cached under its id like any cleanup: a later
    /// [`Workspace::cleanup`] of the id receives it.
    ///
    /// A journal proves the job directory and each entry whose identity it
    /// recorded; the cleanup removes exactly those and refuses (keeping
    /// everything) a tree holding anything else, including an entry whose
    /// intent was journalled but whose identity was not. A clean reclaim is
    /// [`CleanupStatus::Reclaimed`]; a job directory whose creation the
    /// journal does not prove is [`CleanupCode::JobNotOwned`] and kept. A
    /// job directory with no journal at all is not looked at: it stays
    /// refused ([`WorkspaceError::JobExists`]) as before.
    ///
    /// Entries that a dead run's cleanup had moved out of the tree into the
    /// job's quarantine but not destroyed (it was killed in between) are
    /// destroyed too, each only if it is an inode the journal registered;
    /// anything else there is kept. The empty spare quarantines a dead run
    /// left are adopted first, so that the replayed cleanups need no new
    /// inode. A request whose cleanup could not run here either
    /// ([`CleanupResult::is_transient`]) is returned with that result, not
    /// cached, and run again by the next [`Workspace::cleanup`] of its id
    /// (or the next start). A journal that names a barrier
    /// ([`Job::journal_barrier`]) is cleaned only once the workspace's
    /// [`Revival`] revived it and it stopped; then the `Revival` is told
    /// that the reclaim is done ([`Revival::reclaimed`]: the request
    /// layer's remove the empty base cgroups dead runs left).
    ///
    /// Must be called within a tokio runtime, before requests are opened.
    ///
    /// # Caveats
    ///
    /// The dead node's processes are stopped only through its barrier: with
    /// the request layer's, where they ran in the request cgroup its
    /// journal names (the cgroup tier, and this process in the same cgroup
    /// as the dead one); see
    /// `docs/contracts/workspace-cleanup.md`, "Reclaim on restart".
    pub async fn reclaim(&self) -> Vec<(RequestId, CleanupResult)> {
        if self.inner.closed.load(Ordering::Acquire) {
            tracing::warn!("reclaim on a closed workspace; nothing reclaimed");
            return Vec::new();
        }
        let mut names = Vec::new();
        let listed = fs::for_each_name(self.inner.journals.as_fd(), |n| {
            names.push(n.to_owned());
            Ok(())
        });
        if let Err(e) = listed {
            tracing::warn!(error = %e, "listing the ownership journals failed; nothing reclaimed");
            return Vec::new();
        }
        // First, so that the replayed requests' cleanups take them and need
        // no new inode.
        self.adopt_spare_quarantines();
        let mut out = Vec::new();
        for cname in names {
            if cname.as_bytes().starts_with(SPARE_PREFIX.as_bytes()) {
                // An emptied journal an earlier run kept for reuse: it
                // belongs to no request.
                if !lock(&self.inner.spares).iter().any(|s| s.name == cname) {
                    let _ = fs::unlink_at(self.inner.journals.as_fd(), cname.as_c_str());
                }
                continue;
            }
            let Some(id) = cname.to_str().ok().and_then(|s| RequestId::new(s).ok()) else {
                tracing::warn!("a journal not named by a request id is kept, unread");
                continue;
            };
            // Under the requests' lock, as a cleanup of an id this runtime
            // holds nothing for replays the journal: one replay per journal.
            // An id held, or whose cleanup started (that cleanup replays
            // the journal itself), is skipped.
            let prepared = self.inner.requests.open(id.clone(), || {
                match self.prepare_reclaim(&id, cname) {
                    Prepared::Clean(state) => Ok(state),
                    // Filed before the lock is released, so that an open of
                    // the id after it is refused. (Could not even read the
                    // journal: nothing is filed, so the next cleanup of the
                    // id, or the next start, tries again.)
                    Prepared::Filed(result) if !result.is_transient() => {
                        if let Elected::Owner(guard) = self.inner.requests.elect(id.clone()) {
                            guard.complete(result.clone());
                        }
                        Err(Prepared::Filed(result))
                    }
                    other => Err(other),
                }
            });
            let result = match prepared {
                Err(_) | Ok(Err(Prepared::Decided)) => continue,
                Ok(Err(Prepared::Filed(result))) => result,
                Ok(Ok(_)) | Ok(Err(Prepared::Clean(_))) => self.cleanup_id(id.clone()).await,
            };
            match result.safe_code() {
                Some(code) => {
                    tracing::warn!(request = %id, status = ?result.status, code = %code, "reclaim on restart failed closed; the job is kept")
                }
                None => {
                    tracing::info!(request = %id, status = ?result.status, "reclaimed a request of a node that died")
                }
            }
            out.push((id, result));
        }
        if let Some(revival) = &self.inner.revival {
            revival.reclaimed();
        }
        out
    }

    /// Spare quarantines an earlier run kept or reserved (renamed empty, so
    /// they belong to no job): each still empty and a plain directory on
    /// the workspace's mount is adopted for this run's cleanups, as many as
    /// the pool holds, the others removed when empty; one holding anything
    /// is kept for the operator.
    fn adopt_spare_quarantines(&self) {
        let qroot = self.inner.quarantine.as_fd();
        let mut names = Vec::new();
        let _ = fs::for_each_name(qroot, |n| {
            if n.to_bytes().starts_with(SPARE_PREFIX.as_bytes()) {
                names.push(n.to_owned());
            }
            Ok(())
        });
        for name in names {
            if lock(&self.inner.spare_quarantines)
                .iter()
                .any(|q| q.name == name)
            {
                continue;
            }
            let adopted = (lock(&self.inner.spare_quarantines).len() < MAX_SPARE_JOURNALS)
                .then(|| fs::open_dir_at(qroot, &name).ok())
                .flatten()
                .filter(|dir| {
                    let plain = fs::observe_fd(dir.as_fd()).is_ok_and(|obs| {
                        obs.kind == FileKind::Dir && self.inner.anchor.admit(&obs).is_ok()
                    });
                    let mut entries = 0;
                    let listed = fs::for_each_name(dir.as_fd(), |_| {
                        entries += 1;
                        Err(())
                    });
                    plain && matches!(listed, Ok(Ok(()))) && entries == 0
                });
            match adopted {
                Some(dir) => self
                    .inner
                    .keep_quarantine(remove::SpareQuarantine { name, dir }),
                None => {
                    if let Err(e) = fs::rmdir_at(qroot, &name) {
                        tracing::warn!(error = %e, "a spare quarantine holds something; it is kept");
                    }
                }
            }
        }
    }

    /// A journal of `id` left without a verdict while this runtime holds no
    /// state for it: its reclaim at start could not run (out of space,
    /// descriptors or memory), or it is an earlier run's that the start's
    /// reclaim did not see. It is replayed now, as the start's reclaim
    /// would. `None`: no journal.
    fn reclaim_on_demand(&self, id: &RequestId) -> Option<Prepared> {
        let cname = CString::new(id.as_str()).expect("validated ids hold no NUL");
        match fs::observe_at(self.inner.journals.as_fd(), &cname) {
            Err(e) if e == Errno::NOENT => None,
            _ => Some(self.prepare_reclaim(id, cname)),
        }
    }

    /// Reads and replays one journal; proves the job directory against it.
    fn prepare_reclaim(&self, id: &RequestId, cname: CString) -> Prepared {
        let journals = self.inner.journals.as_fd();
        let failed = |code| CleanupResult::failed(code, CleanupCounts::default(), None);
        let bytes = match journal_file::read_all(journals, &cname, MAX_JOURNAL) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(request = %id, error = %e, "reading a journal failed; the job is kept");
                let code =
                    Errno::from_io_error(&e).map_or(CleanupCode::IoError, remove::errno_code);
                return Prepared::Filed(failed(code));
            }
        };
        let read = journal::read(&bytes);
        if read.tail != journal::Tail::Clean {
            tracing::info!(request = %id, tail = ?read.tail, "journal tail ignored");
        }
        // No complete record: the run died between creating the journal
        // (`O_EXCL`) and completing its `Open` record, which precedes the
        // job directory's `mkdirat`. It proves nothing, as below when the
        // job directory's identity is missing.
        let rep = if read.records.is_empty() {
            None
        } else {
            match journal::replay(&read) {
                Ok(rep) if rep.request == id.as_str().as_bytes() => Some(rep),
                Ok(_) => {
                    tracing::warn!(request = %id, "journal names another request; the job is kept");
                    return Prepared::Filed(failed(CleanupCode::JobNotOwned));
                }
                Err(e) => {
                    tracing::warn!(request = %id, error = %e, "journal does not replay; the job is kept");
                    return Prepared::Filed(failed(CleanupCode::JobNotOwned));
                }
            }
        };
        if rep.as_ref().is_some_and(|rep| rep.verdict.is_some()) {
            return Prepared::Decided;
        }
        let finish = |result: CleanupResult| {
            self.journal_verdict(id, &cname, read.valid_len, &result);
            Prepared::Filed(result)
        };
        let reclaimed_nothing = CleanupResult {
            status: CleanupStatus::Reclaimed,
            code: None,
            counts: CleanupCounts::default(),
            suspect: None,
        };
        let jobs = self.inner.jobs.as_fd();
        let Some((rep, inventory)) = rep.and_then(|mut rep| rep.inventory.take().map(|i| (rep, i)))
        else {
            // The job directory's creation is not proven: it was never made,
            // or its identity record was lost.
            return match fs::observe_at(jobs, &cname) {
                Err(e) if e == Errno::NOENT => finish(reclaimed_nothing),
                Ok(_) => finish(failed(CleanupCode::JobNotOwned)),
                Err(e) => Prepared::Filed(failed(remove::errno_code(e))),
            };
        };
        // A node killed inside its removal pass can leave registered
        // entries in the job's quarantine: out of the tree, not destroyed.
        let swept = leftovers::destroy_proven(
            self.inner.quarantine.as_fd(),
            &cname,
            &inventory,
            self.inner.anchor,
        );
        if swept != leftovers::Swept::default() {
            tracing::info!(request = %id, files = swept.files, dirs = swept.dirs, kept = swept.kept, "quarantine leftovers of the dead run");
        }
        let job = match fs::open_dir_at(jobs, cname.as_c_str()) {
            Ok(fd) => fd,
            Err(e) if e == Errno::NOENT => return finish(reclaimed_nothing),
            Err(e) if e == Errno::LOOP || e == Errno::NOTDIR => {
                return finish(failed(CleanupCode::IdentityReplaced));
            }
            Err(e) => return Prepared::Filed(failed(remove::errno_code(e))),
        };
        let proven = fs::observe_fd(job.as_fd())
            .map_err(remove::errno_code)
            .and_then(|obs| {
                self.inner
                    .anchor
                    .admit(&obs)
                    .and_then(|()| {
                        inventory
                            .entry(JOB_ROOT)
                            .identity
                            .check(FileKind::Dir, &obs)
                    })
                    .map_err(CleanupCode::from)
            });
        if let Err(code) = proven {
            return finish(failed(code));
        }
        let journal = match JournalFile::reopen(journals, &cname, read.valid_len) {
            Ok(j) => j,
            Err(e) => {
                tracing::warn!(request = %id, error = %e, "reopening a journal failed; the job is kept");
                return Prepared::Filed(failed(remove::errno_code(e)));
            }
        };
        // Whatever the dead run barrierd must be stopped before any file
        // goes: a barrier that cannot be revived keeps the job.
        let barrier = match (&rep.barrier, &self.inner.revival) {
            (None, _) => None,
            (Some(record), Some(revival)) => match revival.revive(record) {
                Ok(barrier) => barrier,
                Err(code) => {
                    tracing::warn!(request = %id, code = %code.safe_code(), "the dead run's barrier is not honoured; the job is kept");
                    return finish(failed(code));
                }
            },
            (Some(_), None) => {
                tracing::warn!(request = %id, "a journalled barrier, and nothing to revive it; the job is kept");
                return finish(failed(CleanupCode::ProcessBoundExceeded));
            }
        };
        // Best effort: the dead run's spares were adopted first, so this
        // usually takes one; without it the cleanup makes its quarantine,
        // and if it cannot, it answers `no_space` and is run again.
        let quarantine = self.inner.reserve_quarantine().ok();
        Prepared::Clean(Arc::new(RequestState {
            id: id.clone(),
            cname,
            anchor: self.inner.anchor,
            fs: Mutex::new(FsState {
                closed: false,
                job: Some(job),
                inventory,
                journal: Some(journal),
                cleanup_journalled: rep.cleanup_started,
                barrier_journalled: rep.barrier.is_some(),
            }),
            barrier: Mutex::new(BarrierSlot {
                closed: false,
                barrier,
                typed: None,
            }),
            reclaimed: true,
            quarantine: Mutex::new(quarantine),
        }))
    }

    /// Appends a reclaim's verdict to the journal `cname` (after its
    /// verified prefix); a clean one's journal is then removed.
    fn journal_verdict(&self, id: &RequestId, cname: &CStr, valid_len: usize, r: &CleanupResult) {
        let journals = self.inner.journals.as_fd();
        let written = JournalFile::reopen(journals, cname, valid_len)
            .map_err(io::Error::from)
            .and_then(|mut j| {
                j.append(&Record::Verdict {
                    status: r.status,
                    code: r.code,
                })
            });
        match written {
            Ok(()) if r.is_clean() => {
                if let Err(e) = fs::unlink_at(journals, cname) {
                    tracing::warn!(request = %id, error = %e, "removing a reclaimed journal failed");
                }
            }
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(request = %id, error = %e, "journalling a reclaim verdict failed")
            }
        }
    }

    /// Refuses new requests, cleans every open request through
    /// [`Workspace::cleanup`], waits for every cleanup task of this
    /// workspace, then releases its `flock`, and returns each result.
    ///
    /// Once it returned, the workspace can be opened again at once (in this
    /// process or another), whatever clones of this handle, its [`Job`]s
    /// included, are still alive: they refuse new requests
    /// ([`WorkspaceError::Closed`]), a cleanup whose result is no longer
    /// cached ([`WorkspaceError::Closed`]) and a reclaim (nothing
    /// reclaimed), so the next owner's namespace is never touched from here.
    /// A request whose cleanup could not run ([`CleanupResult::is_transient`])
    /// is left to the next owner's reclaim. The workspace's [`Revival`] is
    /// told ([`Revival::closed`]) before the lock is released.
    pub async fn close(&self) -> Vec<(RequestId, CleanupResult)> {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.drop_spares();
        let ids = self.inner.requests.close();
        let mut set = tokio::task::JoinSet::new();
        for id in ids {
            let ws = self.clone();
            set.spawn(async move {
                let r = ws.cleanup_id(id.clone()).await;
                (id, r)
            });
        }
        let mut out = Vec::new();
        while let Some(r) = set.join_next().await {
            if let Ok(r) = r {
                out.push(r);
            }
        }
        // Before the wait: a cleanup task started after it sees the flag and
        // does nothing.
        self.inner.released.store(true, Ordering::SeqCst);
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        // Every cleanup has finished its barrier: what the revival keeps for
        // the next requests goes now. A process exits right after its close
        // (a node), often before the last clone of this handle is dropped by
        // its runtime's shutdown.
        if let Some(revival) = &self.inner.revival {
            revival.closed();
        }
        if let Err(e) = fs::flock(self.inner.owner.as_fd(), FlockOperation::Unlock) {
            tracing::warn!(error = %e, "releasing the workspace lock failed; it is released when the last handle goes");
        }
        out
    }
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspace")
            .field("internal_name", &self.inner.config.internal_name)
            .field("active", &self.inner.requests.len())
            .finish()
    }
}

/// The work elected once per request, with its verdict journalled: a clean
/// request's journal is then removed, a failed one's kept with the verdict
/// (its job directory is kept too, and never adopted again).
async fn cleanup_work(
    inner: &Arc<Inner>,
    guard: &OwnerGuard<CleanupResult>,
    id: &RequestId,
) -> CleanupResult {
    let ws = Workspace {
        inner: inner.clone(),
    };
    // An id held nothing for is replayed from its journal under the
    // requests' lock, so that no open of the id writes the journal while it
    // is read.
    let found = inner
        .requests
        .find(guard, id, || match ws.reclaim_on_demand(id) {
            Some(Prepared::Clean(state)) => Ok(state),
            Some(Prepared::Filed(result)) => Err(Some(result)),
            Some(Prepared::Decided) | None => Err(None),
        });
    let state = match found {
        Ok(state) => state,
        Err(Some(result)) => return result,
        // Nothing held, and nothing can be opened for the id until this
        // result is filed: the election this task owns fences every open
        // of the id, so "gone" stays true when it is reported.
        Err(None) => return gone_check(inner, id),
    };
    let mut result = cleanup_request(inner, id, &state).await;
    if state.reclaimed && result.status == CleanupStatus::Cleaned {
        result.status = CleanupStatus::Reclaimed;
    }
    let barrier = lock(&state.barrier).barrier.clone();
    let mut fs = lock(&state.fs);
    if result.is_clean() {
        // A clean request's journal goes: emptied (a verdict record would be
        // cut with it) and kept as a spare, or removed.
        let retired = if let Some(journal) = fs.journal.take() {
            inner.retire_journal(journal, id, state.cname.as_c_str())
        } else if let Err(e) = fs::unlink_at(inner.journals.as_fd(), state.cname.as_c_str()) {
            tracing::warn!(request = %id, error = %e, "removing a clean request's journal failed");
            false
        } else {
            true
        };
        drop(fs);
        // Only once no journal names it may what the barrier holds serve
        // another request: a reclaim of a kept journal acts on it.
        if let Some(barrier) = barrier {
            barrier.finished(retired);
        }
        return result;
    }
    // Finished while the journal still names it.
    if let Some(barrier) = barrier {
        barrier.finished(false);
    }
    if result.is_transient() {
        // Not a verdict: the journal stays without one, so that a restart
        // reclaims the request if no later attempt here finishes it.
        return result;
    }
    let verdict = Record::Verdict {
        status: result.status,
        code: result.code,
    };
    if let Err(e) = fs.journal(&verdict) {
        tracing::warn!(request = %id, error = %e, "journalling the cleanup verdict failed")
    }
    result
}

/// The barrier first, then the filesystem.
async fn cleanup_request(
    inner: &Arc<Inner>,
    id: &RequestId,
    state: &Arc<RequestState>,
) -> CleanupResult {
    let mut counts = CleanupCounts::default();

    // 1. Stop whatever the request's barrier holds (its processes, and all
    //    that their cgroup holds), bounded; nothing behind it can write
    //    after this, or nothing is removed.
    let barrier = {
        let mut slot = lock(&state.barrier);
        slot.closed = true;
        slot.barrier.clone()
    };
    if let Some(barrier) = barrier {
        let stopped: Stopped = barrier.stop(inner.config.cleanup_bound).await;
        counts.processes_cancelled = stopped.cancelled;
        counts.processes_unsettled = stopped.unsettled;
        if stopped.unsettled > 0 {
            tracing::warn!(request = %id, unsettled = stopped.unsettled, "cleanup bound exceeded waiting for the request's processes");
        }
        if let Some(code) = stopped.refused {
            tracing::warn!(request = %id, code = %code.safe_code(), "the request's barrier did not stop; files kept");
            return CleanupResult::failed(code, counts, None);
        }
    }

    // 2. Freeze the inventory    // 3. Freeze the inventory; nothing more can be created for the request.
    let inventory = {
        let mut fs = lock(&state.fs);
        fs.closed = true;
        fs.job = None;
        if !fs.cleanup_journalled {
            fs.cleanup_journalled = true;
            if let Err(e) = fs.journal(&Record::CleanupStarted) {
                // The inventory in memory is intact; only a restart would
                // miss the record, and a restart runs this same cleanup.
                tracing::warn!(request = %id, error = %e, "journalling the cleanup start failed");
            }
        }
        std::mem::take(&mut fs.inventory)
    };
    let (dirs, files) = inventory.counts();
    counts.registered = (dirs + files) as u64;
    let fs_inner = inner.clone();
    let fs_state = state.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        // The request's reserved quarantine: no inode is allocated for it.
        let spare = lock(&fs_state.quarantine)
            .take()
            .or_else(|| lock(&fs_inner.spare_quarantines).pop());
        let keep_as = fs_inner.spare_quarantine_name();
        let (outcome, kept) = remove::clean_job(
            fs_inner.jobs.as_fd(),
            fs_inner.quarantine.as_fd(),
            &fs_state.cname,
            &inventory,
            fs_state.anchor,
            spare,
            Some(keep_as),
        );
        if outcome
            .failure
            .as_ref()
            .is_some_and(|f| f.code.is_transient())
        {
            // Could not run: the next attempt starts from the same
            // inventory and, if one is left, the same quarantine.
            *lock(&fs_state.quarantine) = kept;
            let mut fs = lock(&fs_state.fs);
            fs.inventory = inventory;
        } else if let Some(kept) = kept {
            fs_inner.keep_quarantine(kept);
        }
        outcome
    })
    .await;
    let outcome = match outcome {
        Ok(o) => o,
        Err(_) => return CleanupResult::failed(CleanupCode::IoError, counts, None),
    };
    counts.files_removed = outcome.files_removed;
    counts.dirs_removed = outcome.dirs_removed;
    counts.missing = outcome.missing;
    if let Some(f) = outcome.failure {
        tracing::warn!(request = %id, code = %f.code.safe_code(), suspect = %f.suspect, "workspace cleanup failed closed");
        return CleanupResult::failed(f.code, counts, Some(f.suspect));
    }
    if counts.processes_unsettled > 0 {
        return CleanupResult::failed(CleanupCode::ProcessBoundExceeded, counts, None);
    }
    CleanupResult {
        status: CleanupStatus::Cleaned,
        code: None,
        counts,
        suspect: None,
    }
}

/// After eviction (or for a request never opened here): is the directory gone?
fn gone_check(inner: &Inner, id: &RequestId) -> CleanupResult {
    let name = CString::new(id.as_str()).expect("validated ids hold no NUL");
    match fs::observe_at(inner.jobs.as_fd(), &name) {
        Err(e) if e == Errno::NOENT => CleanupResult {
            status: CleanupStatus::AlreadyGone,
            code: None,
            counts: CleanupCounts::default(),
            suspect: None,
        },
        Ok(_) => CleanupResult::failed(CleanupCode::JobNotOwned, CleanupCounts::default(), None),
        Err(e) => CleanupResult::failed(remove::errno_code(e), CleanupCounts::default(), None),
    }
}

/// An open request: creates its artifacts; carries its barrier.
#[derive(Clone)]
pub struct Job {
    ws: Workspace,
    state: Arc<RequestState>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("id", &self.state.id).finish()
    }
}

impl Job {
    /// The request's id.
    pub fn id(&self) -> &RequestId {
        &self.state.id
    }

    /// The workspace the request belongs to.
    pub fn workspace(&self) -> &Workspace {
        &self.ws
    }

    /// A handle on the job directory itself, to create artifacts in it.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::RequestClosed`] once cleanup started.
    pub fn root(&self) -> Result<ArtifactDir, WorkspaceError> {
        let fs = lock(&self.state.fs);
        let job = self.open_fs(&fs)?;
        let fd = job.try_clone_to_owned().map_err(io_err("dup job"))?;
        Ok(ArtifactDir {
            state: self.state.clone(),
            fd,
            index: JOB_ROOT,
        })
    }

    fn open_fs<'a>(&self, fs: &'a FsState) -> Result<BorrowedFd<'a>, WorkspaceError> {
        match (&fs.job, fs.closed) {
            (Some(job), false) => Ok(job.as_fd()),
            _ => Err(WorkspaceError::RequestClosed {
                request: self.state.id.clone(),
            }),
        }
    }

    /// Creates the directory `rel` (`a/b/c`, relative to the job directory),
    /// creating missing registered parents on the way, and returns a handle
    /// on it. Existing parents must be registered directories and are
    /// re-verified by identity as they are opened.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::InvalidName`] (before any syscall) for an empty
    /// component, `.`, `..` or NUL; [`WorkspaceError::Io`] if the final name
    /// exists; [`WorkspaceError::Untrusted`] if a parent is not the
    /// registered directory; [`WorkspaceError::RequestClosed`] once cleanup
    /// started.
    pub fn create_dir(&self, rel: &str) -> Result<ArtifactDir, WorkspaceError> {
        let (parent, index, name) = self.walk_to_parent(rel)?;
        let fs = &mut *lock(&self.state.fs);
        self.open_fs(fs)?;
        let (index, fd) = create_in(
            &self.state,
            fs,
            parent.as_fd(),
            index,
            name,
            ArtifactKind::Dir,
        )?;
        Ok(ArtifactDir {
            state: self.state.clone(),
            fd,
            index,
        })
    }

    /// Creates the regular file `rel` (relative to the job directory) with
    /// `O_CREAT | O_EXCL | O_NOFOLLOW`, creating missing registered parent
    /// directories, and returns it open for reading and writing.
    ///
    /// # Errors
    ///
    /// As [`Job::create_dir`].
    pub fn create_file(&self, rel: &str) -> Result<File, WorkspaceError> {
        let (parent, index, name) = self.walk_to_parent(rel)?;
        let fs = &mut *lock(&self.state.fs);
        self.open_fs(fs)?;
        let (_, fd) = create_in(
            &self.state,
            fs,
            parent.as_fd(),
            index,
            name,
            ArtifactKind::File,
        )?;
        Ok(File::from(fd))
    }

    /// Splits `rel`, opens (or creates) each parent, and returns the last
    /// parent's descriptor and index and the final name.
    fn walk_to_parent<'r>(&self, rel: &'r str) -> Result<(OwnedFd, u32, &'r str), WorkspaceError> {
        let parts: Vec<&str> = rel.split('/').collect();
        for p in &parts {
            validate_name(p)?;
        }
        let (last, dirs) = parts.split_last().expect("split yields one part");
        let fs = &mut *lock(&self.state.fs);
        let job = self.open_fs(fs)?;
        let mut cur = job.try_clone_to_owned().map_err(io_err("dup job"))?;
        let mut index = JOB_ROOT;
        for d in dirs {
            match fs.inventory.find_child(index, d.as_bytes()) {
                Some(child) if fs.inventory.entry(child).kind == ArtifactKind::Dir => {
                    let fd =
                        fs::open_dir_at(cur.as_fd(), *d).map_err(io_err("openat artifact dir"))?;
                    let obs = fs::observe_fd(fd.as_fd()).map_err(io_err("statx artifact dir"))?;
                    self.state
                        .anchor
                        .admit(&obs)
                        .and_then(|()| {
                            fs.inventory
                                .entry(child)
                                .identity
                                .check(FileKind::Dir, &obs)
                        })
                        .map_err(untrusted("artifact"))?;
                    cur = fd;
                    index = child;
                }
                Some(_) => {
                    return Err(WorkspaceError::InvalidName {
                        reason: "a parent is a registered file",
                    });
                }
                None => {
                    let (child, fd) =
                        create_in(&self.state, fs, cur.as_fd(), index, d, ArtifactKind::Dir)?;
                    cur = fd;
                    index = child;
                }
            }
        }
        Ok((cur, index, last))
    }

    /// Checks a launch's directories against this request's workspace:
    /// `workspace` (the launch's workspace directory) must be this
    /// workspace's root, compared by identity, not by spelling, and `cwd`
    /// (the working directory, relative to it) must not be in the internal
    /// namespace.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::RootMismatch`] if `workspace` is another directory
    /// (the process's cwd would be outside the workspace this request
    /// belongs to); [`WorkspaceError::InternalPath`] if `cwd` is in the
    /// internal namespace.
    pub fn check_launch(&self, workspace: &Path, cwd: Option<&str>) -> Result<(), WorkspaceError> {
        let root = &self.ws.inner.root_identity;
        match std::fs::metadata(workspace) {
            Ok(m) if m.is_dir() && m.dev() == root.dev && m.ino() == root.ino => {}
            _ => return Err(WorkspaceError::RootMismatch),
        }
        if let Some(cwd) = cwd.filter(|c| !c.is_empty()) {
            self.ws
                .resolve_user_path(cwd)
                .map_err(WorkspaceError::InternalPath)?;
        }
        Ok(())
    }

    /// The request's barrier: the one already on it, else `make()`'s, put on
    /// it now. Every cleanup of the request stops it before any file is
    /// removed ([`Barrier::stop`]). One barrier per request: the layer that
    /// owns the request's processes puts all of them behind it.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::RequestClosed`] once the request's cleanup took its
    /// barrier (nothing may start for it any more);
    /// [`WorkspaceError::BarrierTaken`] if the barrier on it is of another type
    /// than `F`.
    pub fn barrier_or_insert<F: Barrier>(
        &self,
        make: impl FnOnce() -> Arc<F>,
    ) -> Result<Arc<F>, WorkspaceError> {
        let mut slot = lock(&self.state.barrier);
        if slot.closed {
            return Err(WorkspaceError::RequestClosed {
                request: self.state.id.clone(),
            });
        }
        if slot.barrier.is_none() {
            let made = make();
            slot.barrier = Some(made.clone());
            slot.typed = Some(made.clone());
            return Ok(made);
        }
        slot.typed
            .clone()
            .and_then(|typed| typed.downcast::<F>().ok())
            .ok_or_else(|| WorkspaceError::BarrierTaken {
                request: self.state.id.clone(),
            })
    }

    /// The request's barrier, if one of type `F` is on it (nothing is put
    /// on it).
    pub fn barrier<F: Barrier>(&self) -> Option<Arc<F>> {
        let typed = lock(&self.state.barrier).typed.clone()?;
        typed.downcast::<F>().ok()
    }

    /// Journals the request's barrier `record`, for a reclaim after this
    /// process died to revive through its [`Revival`] (and stop before any
    /// file of the job goes). Write it before anything behind the barrier can
    /// write into the job. At most one per request.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::BarrierRecord`] for a record longer than
    /// [`journal::MAX_BARRIER`] or a second record; [`WorkspaceError::RequestClosed`]
    /// once cleanup started; [`WorkspaceError::Io`] if it cannot be
    /// appended (then nothing more is created for the request).
    pub fn journal_barrier(&self, record: &[u8]) -> Result<(), WorkspaceError> {
        if record.len() > journal::MAX_BARRIER {
            return Err(WorkspaceError::BarrierRecord {
                reason: "longer than the journal's bound",
            });
        }
        let mut fs = lock(&self.state.fs);
        if fs.closed {
            return Err(WorkspaceError::RequestClosed {
                request: self.state.id.clone(),
            });
        }
        if fs.barrier_journalled {
            return Err(WorkspaceError::BarrierRecord {
                reason: "the request's barrier is journalled already",
            });
        }
        fs.journal(&Record::Barrier {
            record: record.to_vec(),
        })?;
        fs.barrier_journalled = true;
        Ok(())
    }

    /// Number of registered artifacts, the job directory included.
    pub fn artifact_count(&self) -> usize {
        lock(&self.state.fs).inventory.len()
    }

    /// A copy of the request's inventory (for inspection and tests).
    pub fn inventory(&self) -> Inventory {
        lock(&self.state.fs).inventory.clone()
    }

    /// Cleans up this request: same as [`Workspace::cleanup`] with its id.
    pub async fn cleanup(&self) -> CleanupResult {
        self.ws.cleanup_id(self.state.id.clone()).await
    }
}

/// Creates `name` in `parent` (registered as `parent_index`) and registers it.
fn create_in(
    state: &RequestState,
    fs: &mut FsState,
    parent: BorrowedFd<'_>,
    parent_index: u32,
    name: &str,
    kind: ArtifactKind,
) -> Result<(u32, OwnedFd), WorkspaceError> {
    validate_name(name)?;
    if fs.closed {
        return Err(WorkspaceError::RequestClosed {
            request: state.id.clone(),
        });
    }
    fs.journal(&Record::Intent {
        parent: parent_index,
        kind,
        name: name.as_bytes().to_vec(),
    })?;
    let fd = match kind {
        ArtifactKind::Dir => {
            fs::mkdir_at(parent, name, DIR_MODE).map_err(io_err("mkdirat artifact"))?;
            fs::open_dir_at(parent, name).map_err(io_err("openat artifact"))?
        }
        ArtifactKind::File => {
            fs::create_file(parent, name, FILE_MODE).map_err(io_err("openat artifact"))?
        }
    };
    let obs = fs::observe_fd(fd.as_fd()).map_err(io_err("statx artifact"))?;
    if obs.kind != kind.file_kind() {
        return Err(WorkspaceError::Untrusted {
            what: "artifact",
            code: CleanupCode::IdentityReplaced,
        });
    }
    // An artifact that is not on the workspace's mount is left unregistered:
    // cleanup will then refuse the tree instead of removing it.
    state.anchor.admit(&obs).map_err(untrusted("artifact"))?;
    let index = fs
        .inventory
        .register(parent_index, name.as_bytes(), kind, obs.identity)?;
    // Registered in memory first: if the record cannot be written, this
    // run's cleanup still removes the entry; a restart would find it
    // unproven and keep it.
    fs.journal(&Record::Created {
        index,
        identity: obs.identity,
    })?;
    Ok((index, fd))
}

/// A registered directory of a request, held open to create artifacts in it.
///
/// # Caveats
///
/// The handle pins the directory's inode. If someone moves the directory out
/// of the job tree, artifacts created through the handle follow it; cleanup
/// then finds the registered directory missing and never looks outside the
/// job tree for it.
pub struct ArtifactDir {
    state: Arc<RequestState>,
    fd: OwnedFd,
    index: u32,
}

impl std::fmt::Debug for ArtifactDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactDir")
            .field("request", &self.state.id)
            .field("index", &self.index)
            .finish()
    }
}

impl ArtifactDir {
    /// The directory's index in the request's inventory.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The directory's descriptor.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// `mkdirat(self, name)`—Creates and registers the subdirectory `name`.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::InvalidName`] (no syscall) unless `name` is a single
    /// component; [`WorkspaceError::Io`] if it exists;
    /// [`WorkspaceError::RequestClosed`] once cleanup started.
    #[doc(alias = "mkdirat")]
    pub fn create_dir(&self, name: &str) -> Result<ArtifactDir, WorkspaceError> {
        let fs = &mut *lock(&self.state.fs);
        let (index, fd) = create_in(
            &self.state,
            fs,
            self.fd.as_fd(),
            self.index,
            name,
            ArtifactKind::Dir,
        )?;
        Ok(ArtifactDir {
            state: self.state.clone(),
            fd,
            index,
        })
    }

    /// `openat(self, name, O_CREAT | O_EXCL | O_NOFOLLOW)`—Creates and
    /// registers the regular file `name`.
    ///
    /// # Errors
    ///
    /// As [`ArtifactDir::create_dir`].
    #[doc(alias = "openat")]
    pub fn create_file(&self, name: &str) -> Result<File, WorkspaceError> {
        let fs = &mut *lock(&self.state.fs);
        let (_, fd) = create_in(
            &self.state,
            fs,
            self.fd.as_fd(),
            self.index,
            name,
            ArtifactKind::File,
        )?;
        Ok(File::from(fd))
    }
}
