//! Building a confinement in the parent, before the clone: the Landlock
//! ruleset (through the `landlock` crate), the seccomp program (through
//! `seccompiler`) and the private temporary directory. The child only
//! hands these to the kernel.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};
use rustix::fs::{FileType, Mode, OFlags};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::view::{self, View, canonical_deny};
use super::{ConfineError, Confinement, ConfinementReport, FsMode, Plan};

/// x32 system calls are numbered from this bit under `AUDIT_ARCH_X86_64`;
/// their `socket` and `socketpair` are denied outright.
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

/// A confinement ready for the child: everything it needs is built.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// What is enforced (for the evidence); `None` for a launch that is
    /// only contained by a pid namespace ([`Prepared::pid_namespace_only`]).
    report: Option<ConfinementReport>,
    ruleset: Option<OwnedFd>,
    program: Option<&'static [seccompiler::sock_filter]>,
    /// The private temporary directory (removed on drop); `None` when
    /// isolated (the view's `/tmp` is private).
    tmp: Option<PrivateTmp>,
    /// The composed view of an isolated launch.
    view: Option<View>,
    /// The Landlock filesystem rights the ruleset handles, as the kernel's
    /// bits: what the child grants beneath the view's fresh `/tmp` and
    /// `/dev` (0: no filesystem ruleset).
    access_fs: u64,
    /// See [`Prepared::nest`].
    nest: Option<BorrowedFd<'static>>,
    /// See [`Prepared::shared_net`].
    shared_net: Option<std::sync::Arc<SharedNet>>,
    /// A sandbox prepared for this launch, taken from the request's slot
    /// (`process::spawn`, *A prepared sandbox*): opaque here.
    spare: std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

/// A network namespace a request's isolated launches share (made by
/// `process::spawn::shared_network_namespace`), with the user namespace
/// that owns it where that is not the host's.
#[derive(Debug)]
pub(crate) struct SharedNet {
    /// What a launch prepared ahead for the request's next one
    /// (`process::spawn`, *A prepared sandbox*): opaque here. First, so
    /// that it goes (its sandbox killed) before the namespaces below.
    pub(crate) spare: SpareSlot,
    /// The network namespace, its loopback up.
    pub(crate) net: OwnedFd,
    /// The user namespace that owns it, which a launch enters before it
    /// (an unprivileged process's: made with it); `None`: the host's.
    pub(crate) user: Option<OwnedFd>,
}

/// The slot of [`SharedNet::spare`]: what is prepared, and the request
/// cgroup (its id; 0: none) of the last launch that looked. A launch
/// prepares its request's next only when the one before was beneath the
/// same cgroup (the same request): the first launch of a request prepares
/// nothing for its own request (most requests launch once); in an MCP
/// session's namespace it prepares the session's next request's first
/// launch instead (`process::spawn`, *A prepared sandbox*).
pub(crate) struct SpareSlot {
    pub(crate) held: std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>,
    pub(crate) last_parent: std::sync::atomic::AtomicU64,
    /// How many sandboxes were queued here (for the tests).
    pub(crate) queued: std::sync::atomic::AtomicU64,
}

impl Default for SpareSlot {
    fn default() -> Self {
        SpareSlot {
            held: std::sync::Mutex::new(None),
            // No launch yet: matches no cgroup's id, nor 0.
            last_parent: std::sync::atomic::AtomicU64::new(u64::MAX),
            queued: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl std::fmt::Debug for SpareSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpareSlot")
    }
}

impl SharedNet {
    /// The namespaces, nothing prepared yet.
    pub(crate) fn new(net: OwnedFd, user: Option<OwnedFd>) -> SharedNet {
        SharedNet {
            spare: SpareSlot::default(),
            net,
            user,
        }
    }
}

impl Prepared {
    /// The Landlock ruleset to restrict the child with.
    pub(crate) fn ruleset(&self) -> Option<BorrowedFd<'_>> {
        self.ruleset.as_ref().map(AsFd::as_fd)
    }

    /// The seccomp program to install in the child.
    pub(crate) fn program(&self) -> Option<&'static [seccompiler::sock_filter]> {
        self.program
    }

    /// The child's `TMPDIR`: the private temporary directory, or the
    /// view's own `/tmp` when isolated.
    pub(crate) fn tmp_dir(&self) -> Option<&Path> {
        if self.view.as_ref().is_some_and(|v| !v.contains_only) {
            return Some(Path::new("/tmp"));
        }
        self.tmp.as_ref().map(PrivateTmp::path)
    }

    /// The composed view, when isolated.
    pub(crate) fn view(&self) -> Option<&View> {
        self.view.as_ref()
    }

    /// The network namespace to run in instead of a new one (the
    /// request's, shared by its isolated launches with the network off).
    /// With the user namespace that owns it, where that is not the host's.
    pub(crate) fn shared_net(&self) -> Option<(BorrowedFd<'_>, Option<BorrowedFd<'_>>)> {
        self.shared_net
            .as_deref()
            .map(|n| (n.net.as_fd(), n.user.as_ref().map(AsFd::as_fd)))
    }

    /// Sets [`Prepared::shared_net`].
    pub(crate) fn set_shared_net(&mut self, ns: Option<std::sync::Arc<SharedNet>>) {
        self.shared_net = ns;
    }

    /// The request's network namespace and its slot, if this launch runs
    /// in it.
    pub(crate) fn shared_arc(&self) -> Option<std::sync::Arc<SharedNet>> {
        self.shared_net.clone()
    }

    /// Where a sandbox prepared for this launch waits for the spawner.
    pub(crate) fn spare(&self) -> &std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>> {
        &self.spare
    }

    /// The handled Landlock filesystem rights (kernel bits; 0: none).
    pub(crate) fn access_fs(&self) -> u64 {
        self.access_fs
    }

    /// The ruleset the program of an isolated launch restricts itself
    /// with once more, after its init did: see [`nest_ruleset`].
    pub(crate) fn nest(&self) -> Option<BorrowedFd<'static>> {
        self.nest
    }

    /// Drops what only the spawn needed; keeps the report and the private
    /// directory, which lives until the process settles. `None` when the
    /// launch was not confined (only contained by its pid namespace).
    pub(crate) fn after_spawn(self) -> Option<(ConfinementReport, Option<PrivateTmp>)> {
        let report = self.report?;
        Some((report, self.tmp))
    }

    /// Whether this confines the process (else it only contains it: the
    /// pid-namespace tier of an unconfined launch).
    pub(crate) fn confines(&self) -> bool {
        self.report.is_some()
    }

    /// The pid-namespace tier of an **unconfined** launch: new user and pid
    /// namespaces only (the caller's uid and gid mapped to themselves), the
    /// sandbox's init reaping and ending the namespace, and nothing else —
    /// the host's view, the host's network, no Landlock, no seccomp, no
    /// `no_new_privs`, the same session. What `auto` picks where no cgroup
    /// can be made and user namespaces are allowed: a `setsid` escapee dies
    /// with the run, without a cgroup or root.
    pub(crate) fn pid_namespace_only() -> Prepared {
        Prepared {
            report: None,
            ruleset: None,
            program: None,
            tmp: None,
            view: Some(View::pid_namespace_only(
                rustix::process::geteuid().as_raw(),
                rustix::process::getegid().as_raw(),
            )),
            access_fs: 0,
            nest: None,
            shared_net: None,
            spare: std::sync::Mutex::new(None),
        }
    }
}

/// A private temporary directory (mode 0700), removed when dropped.
#[derive(Debug)]
pub(crate) struct PrivateTmp {
    path: PathBuf,
}

impl PrivateTmp {
    fn create() -> Result<PrivateTmp, ConfineError> {
        use std::os::unix::fs::DirBuilderExt;
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = tmp_base();
        let mut last = None;
        for _ in 0..16 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let name = format!("custodian-tmp-{}-{n}-{nanos:x}", std::process::id());
            let path = base.join(name);
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(PrivateTmp { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => {
                    last = Some(e);
                    break;
                }
            }
        }
        Err(ConfineError::Build {
            step: "private_tmp",
            message: last.map_or_else(String::new, |e| e.to_string()),
        })
    }

    /// Its path (the child's `TMPDIR`).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// Where private temporary directories are made.
///
/// The embedding process's `TMPDIR`, when it sets one (the operator chose).
/// Otherwise `/dev/shm` when it is a tmpfs directory (not a symlink) that
/// every user may create in with the sticky bit set, as on every common
/// distribution; else `/tmp`. A confined launch then costs one `mkdir` and
/// one `rmdir` on a memory filesystem (≈ 20 µs) rather than on a
/// disk-backed `/tmp`, where the pair waits on the journal (≈ 1 ms, more
/// on a busy disk): see `docs/performance.md`, "Confinement overhead".
/// What the process writes there is memory, charged to its cgroup.
fn tmp_base() -> PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        if std::env::var_os("TMPDIR").is_some_and(|v| !v.is_empty()) {
            return std::env::temp_dir();
        }
        let shm = Path::new("/dev/shm");
        if is_shared_tmpfs(shm) {
            return shm.to_path_buf();
        }
        std::env::temp_dir()
    })
    .clone()
}

/// `statx(2)` without following, `statfs(2)`: a directory, on tmpfs,
/// sticky and writable by everyone (a shared temporary directory).
fn is_shared_tmpfs(dir: &Path) -> bool {
    use rustix::fs::{AtFlags, StatxFlags};
    let Ok(st) = rustix::fs::statx(
        rustix::fs::CWD,
        dir,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::TYPE | StatxFlags::MODE,
    ) else {
        return false;
    };
    let mode = u32::from(st.stx_mode);
    if FileType::from_raw_mode(mode) != FileType::Directory || mode & 0o1777 != 0o1777 {
        return false;
    }
    // TMPFS_MAGIC, linux/magic.h.
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    // `f_type`'s integer type differs between architectures.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::statfs(dir).is_ok_and(|fs| fs.f_type as i64 == TMPFS_MAGIC)
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        // Most processes leave it empty: one rmdir(2), which removes only
        // an empty directory and never a symlink (ENOTDIR). Anything else
        // goes through std's remove_dir_all, which never follows a symlink
        // (CVE-2022-21658).
        if rustix::fs::rmdir(&self.path).is_ok() {
            return;
        }
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(error = %e, "removing the private temporary directory failed");
        }
    }
}

fn landlock_err(e: impl std::fmt::Display) -> ConfineError {
    ConfineError::Build {
        step: "landlock",
        message: e.to_string(),
    }
}

fn seccomp_err(e: impl std::fmt::Display) -> ConfineError {
    ConfineError::Build {
        step: "seccomp",
        message: e.to_string(),
    }
}

fn canonical(path: &Path) -> Result<PathBuf, ConfineError> {
    std::fs::canonicalize(path).map_err(|source| ConfineError::Path {
        path: path.to_owned(),
        source,
    })
}

/// Builds `plan` for `spec`, with `workspace` as the workspace root.
///
/// # Errors
///
/// [`ConfineError::Path`] for a grant that cannot be opened,
/// [`ConfineError::DenyInsideGrant`], and [`ConfineError::Build`] when a
/// library or the temporary directory fails.
pub(crate) fn prepare(
    spec: &Confinement,
    plan: Plan,
    workspace: &Path,
    cwd: &Path,
    program_path: &Path,
    home: Option<&Path>,
) -> Result<Prepared, ConfineError> {
    let mut plan = plan;
    let view = if plan.isolate {
        Some(prepare_view(spec, workspace, cwd, program_path, home)?)
    } else {
        None
    };
    let tmp = if plan.fs && view.is_none() {
        Some(PrivateTmp::create()?)
    } else {
        None
    };
    let ruleset = if plan.landlock() {
        Some(ruleset(spec, &plan, workspace, tmp.as_ref())?)
    } else {
        None
    };
    let program = match (plan.seccomp, plan.isolate) {
        (true, true) => Some(isolation_program()?),
        (true, false) => Some(network_program()?),
        (false, _) => None,
    };
    let access_fs = if plan.fs {
        AccessFs::from_all(ABI::from(i32::try_from(plan.abi).unwrap_or(0))).bits()
    } else {
        0
    };
    if let Some(v) = &view {
        plan.report.isolation = Some(v.report.clone());
    }
    let nest = match (&view, plan.abi) {
        (Some(_), 1..) => Some(nest_ruleset()?),
        _ => None,
    };
    Ok(Prepared {
        report: Some(plan.report),
        ruleset,
        program,
        tmp,
        view,
        access_fs,
        nest,
        shared_net: None,
        spare: std::sync::Mutex::new(None),
    })
}

/// A Landlock ruleset that handles one right nobody in a sandbox has
/// (making block devices) and grants nothing, built once per process.
///
/// The sandbox's init shares custodian's memory (`CLONE_VM`) and so shows
/// custodian's command line, environment and memory in `/proc/1`. The
/// program restricts itself with this ruleset after the init restricted
/// both with the launch's own: its Landlock domain is then nested inside
/// the init's, and Landlock denies a process every ptrace-mode access
/// (`/proc/<pid>/mem`, `environ`, `fd`, `root`, attaching) to a process
/// outside its own domain or those nested in it. The view's `/proc` is
/// mounted `hidepid=invisible`, which hides every process the reader may
/// not access that way: the init is not even listed.
fn nest_ruleset() -> Result<BorrowedFd<'static>, ConfineError> {
    static NEST: OnceLock<Result<OwnedFd, String>> = OnceLock::new();
    let made = NEST.get_or_init(|| {
        let rs = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::MakeBlock)
            .map_err(|e| e.to_string())?
            .create()
            .map_err(|e| e.to_string())?;
        let fd: Option<OwnedFd> = rs.into();
        fd.ok_or_else(|| "no ruleset was created".to_owned())
    });
    match made {
        Ok(fd) => Ok(fd.as_fd()),
        Err(message) => Err(landlock_err(message)),
    }
}

/// Plans the view, after making the mount points the masks and
/// protections need where a writable workspace lacks them: custodian's own
/// `.custodian/` (so a tool cannot create one for custodian to trust
/// later) and `.git/hooks` in a `.git` directory (so a tool cannot create
/// a hook that the user's next `git commit` runs).
fn prepare_view(
    spec: &Confinement,
    workspace: &Path,
    cwd: &Path,
    program_path: &Path,
    home: Option<&Path>,
) -> Result<View, ConfineError> {
    use std::os::unix::fs::DirBuilderExt;
    let workspace = canonical(workspace)?;
    let cwd = canonical(cwd)?;
    if spec.fs == FsMode::WorkspaceWrite {
        let internal = workspace.join(view::INTERNAL_DIR);
        let git = workspace.join(".git");
        let mut wanted = vec![(internal, 0o700)];
        if std::fs::symlink_metadata(&git).is_ok_and(|m| m.is_dir()) {
            wanted.push((git.join("hooks"), 0o755));
        }
        for (dir, mode) in wanted {
            match std::fs::DirBuilder::new().mode(mode).create(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(source) => return Err(ConfineError::Path { path: dir, source }),
            }
        }
    }
    // The child's HOME, resolved (a symlinked home is overlaid where it
    // leads); one that does not resolve gets no overlay.
    let home = home.and_then(|h| std::fs::canonicalize(h).ok());
    let sockets = view::host_sockets();
    let host = view::Host {
        workspace: &workspace,
        cwd: &cwd,
        program: program_path,
        home: home.as_deref(),
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
        sockets: &sockets,
    };
    view::plan_view(spec, &host)
}

fn ruleset(
    spec: &Confinement,
    plan: &Plan,
    workspace: &Path,
    tmp: Option<&PrivateTmp>,
) -> Result<OwnedFd, ConfineError> {
    let abi = ABI::from(i32::try_from(plan.abi).unwrap_or(0));
    // A hard requirement: the crate refuses rather than silently handling
    // less than the plan says (the plan only asks for what the ABI has).
    let mut rs = Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
    if plan.fs {
        rs = rs
            .handle_access(AccessFs::from_all(abi))
            .map_err(landlock_err)?;
    }
    if plan.net_tcp {
        rs = rs
            .handle_access(AccessNet::from_all(abi))
            .map_err(landlock_err)?;
    }
    if plan.scope {
        rs = rs.scope(Scope::from_all(abi)).map_err(landlock_err)?;
    }
    let mut created = rs.create().map_err(landlock_err)?;
    if plan.fs {
        created = fs_rules(created, spec, abi, workspace, tmp, plan.isolate)?;
    }
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or_else(|| landlock_err("no ruleset was created"))
}

/// One rule: `access` beneath `fd` (restricted to file rights if `fd` is
/// not a directory).
fn add(
    rs: RulesetCreated,
    fd: impl AsFd,
    dir: bool,
    access: BitFlags<AccessFs>,
    abi: ABI,
) -> Result<RulesetCreated, ConfineError> {
    let access = if dir {
        access
    } else {
        access & AccessFs::from_file(abi)
    };
    if access.is_empty() {
        return Ok(rs);
    }
    rs.add_rule(PathBeneath::new(fd, access))
        .map_err(landlock_err)
}

/// `open(2)` of a grant with `O_PATH`: as a directory if it is one (no
/// `fstat` needed to know), else as what it is.
fn open_grant(path: &Path) -> Result<(OwnedFd, bool), ConfineError> {
    let open = |flags: OFlags| {
        rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC | flags, Mode::empty())
    };
    let (fd, dir) = match open(OFlags::DIRECTORY) {
        Ok(fd) => Ok((fd, true)),
        // Not a directory (a file grant): open it as what it is, and check,
        // since it may have become a directory meanwhile.
        Err(rustix::io::Errno::NOTDIR) => open(OFlags::empty()).and_then(|fd| {
            let st = rustix::fs::fstat(&fd)?;
            Ok((
                fd,
                FileType::from_raw_mode(st.st_mode) == FileType::Directory,
            ))
        }),
        Err(e) => Err(e),
    }
    .map_err(|e| ConfineError::Path {
        path: path.to_owned(),
        source: e.into(),
    })?;
    Ok((fd, dir))
}

fn fs_rules(
    mut rs: RulesetCreated,
    spec: &Confinement,
    abi: ABI,
    workspace: &Path,
    tmp: Option<&PrivateTmp>,
    isolated: bool,
) -> Result<RulesetCreated, ConfineError> {
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    // Every grant that can read, canonical, to check the denies against.
    let mut grants: Vec<(PathBuf, BitFlags<AccessFs>)> = Vec::new();
    if spec.fs == FsMode::WorkspaceWrite {
        grants.push((canonical(workspace)?, all));
    }
    for p in &spec.allow_read {
        grants.push((canonical(p)?, read));
    }
    for p in &spec.allow_write {
        grants.push((canonical(p)?, all));
    }
    // Isolated, a denied path is masked in the view (inside a grant too):
    // Landlock reads beneath `/` as a whole.
    let denies: Vec<PathBuf> = if isolated {
        Vec::new()
    } else {
        spec.deny_read.iter().map(|d| canonical_deny(d)).collect()
    };
    for d in &denies {
        if let Some((g, _)) = grants.iter().find(|(g, _)| d.starts_with(g)) {
            return Err(ConfineError::DenyInsideGrant {
                deny: d.clone(),
                grant: g.clone(),
            });
        }
    }
    // Read and execute everywhere but the denied hierarchies.
    if denies.is_empty() {
        rs = add(rs, fixed_fd(&ROOT)?, true, read, abi)?;
    } else {
        let root = rustix::fs::open(
            "/",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| landlock_err(std::io::Error::from(e)))?;
        rs = read_except(rs, root, Path::new("/"), &denies, read, abi)?;
    }
    for (path, access) in grants {
        let (fd, dir) = open_grant(&path)?;
        rs = add(rs, fd, dir, access, abi)?;
    }
    if let Some(tmp) = tmp {
        // Just made by this process as a directory: O_DIRECTORY and
        // O_NOFOLLOW make sure it still is one (no fstat needed).
        let fd = rustix::fs::open(
            tmp.path(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ConfineError::Path {
            path: tmp.path().to_owned(),
            source: e.into(),
        })?;
        rs = add(rs, fd, true, all, abi)?;
    }
    // `> /dev/null` opens it for writing, with O_TRUNC.
    let null_access = (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate) & all;
    add(rs, fixed_fd(&DEV_NULL)?, false, null_access, abi)
}

/// A path every filesystem confinement grants the same rights on.
struct Fixed {
    path: &'static str,
    flags: OFlags,
    fd: OnceLock<OwnedFd>,
}

/// `/`, read and execute beneath it when nothing is denied.
static ROOT: Fixed = Fixed {
    path: "/",
    flags: OFlags::DIRECTORY,
    fd: OnceLock::new(),
};

/// `/dev/null`, read and write (a character device: not a directory).
static DEV_NULL: Fixed = Fixed {
    path: "/dev/null",
    flags: OFlags::empty(),
    fd: OnceLock::new(),
};

/// An `O_PATH` descriptor of `fixed`, opened once per process rather
/// than re-resolved on every launch (`landlock_add_rule` only reads it).
///
/// A cached descriptor can only grant *less* than a fresh open: if the
/// path is replaced later, the rule names the old inode (a root that was
/// `chroot`ed away still contains the new one; a replaced `/dev/null` is
/// simply not writable). Neither path is ever a denied one (`/` cannot be
/// denied; a deny beneath `/` takes the other branch).
fn fixed_fd(fixed: &'static Fixed) -> Result<BorrowedFd<'static>, ConfineError> {
    let fd = match fixed.fd.get() {
        Some(fd) => fd,
        None => {
            let fd = rustix::fs::open(
                fixed.path,
                OFlags::PATH | OFlags::CLOEXEC | fixed.flags,
                Mode::empty(),
            )
            .map_err(|e| ConfineError::Path {
                path: PathBuf::from(fixed.path),
                source: e.into(),
            })?;
            fixed.fd.get_or_init(|| fd)
        }
    };
    Ok(fd.as_fd())
}

/// Grants `read` beneath `dir` (at `path`) unless a denied path lies
/// beneath it: then grants each entry of `dir` except the denied ones, and
/// recurses into the entries on the way to one. Symlinks get no rule (an
/// access through one is checked on its target). Entries are opened
/// relative to `dir` with `O_NOFOLLOW`; `path` only names them for the
/// comparison with the denies.
///
/// An entry that is neither denied nor on the way to a denied path is
/// classified by the type `getdents(2)` gave (no `fstat`): if it changed
/// meanwhile the rule can only grant less (file rights on what became a
/// directory, a right on what became a symlink, which is never an
/// ancestor in a path walk, or nothing), and never covers a denied path,
/// which lies beneath none of these names. Entries on the way to a denied
/// path are always opened as directories and checked.
fn read_except(
    mut rs: RulesetCreated,
    dir: OwnedFd,
    path: &Path,
    denies: &[PathBuf],
    read: BitFlags<AccessFs>,
    abi: ABI,
) -> Result<RulesetCreated, ConfineError> {
    if !denies.iter().any(|d| d.starts_with(path)) {
        return add(rs, dir, true, read, abi);
    }
    let io = |e: rustix::io::Errno| landlock_err(std::io::Error::from(e));
    let entries = rustix::fs::Dir::read_from(&dir).map_err(io)?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io)?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push((entry.file_name().to_owned(), entry.file_type()));
        }
    }
    for (name, listed) in names {
        let child = path.join(OsStr::from_bytes(name.as_bytes()));
        if denies.contains(&child) {
            continue;
        }
        if !denies.iter().any(|d| d.starts_with(&child)) {
            let (flags, is_dir) = match listed {
                FileType::Symlink => continue,
                FileType::Directory => (OFlags::DIRECTORY, true),
                _ => (OFlags::empty(), false),
            };
            if listed != FileType::Unknown {
                match rustix::fs::openat(
                    &dir,
                    &name,
                    OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC | flags,
                    Mode::empty(),
                ) {
                    Ok(fd) => {
                        rs = add(rs, fd, is_dir, read, abi)?;
                        continue;
                    }
                    Err(rustix::io::Errno::NOENT) => continue,
                    // No longer a directory: classify it below.
                    Err(rustix::io::Errno::NOTDIR) if is_dir => {}
                    Err(e) => return Err(io(e)),
                }
            }
        }
        let fd = match rustix::fs::openat(
            &dir,
            &name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            // Removed meanwhile: nothing to grant.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(io(e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(io)?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => continue,
            FileType::Directory if denies.iter().any(|d| d.starts_with(&child)) => {
                let sub = rustix::fs::openat(
                    &dir,
                    &name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(io)?;
                rs = read_except(rs, sub, &child, denies, read, abi)?;
            }
            FileType::Directory => rs = add(rs, fd, true, read, abi)?,
            _ => rs = add(rs, fd, false, read, abi)?,
        }
    }
    Ok(rs)
}

/// [`network_filter`], compiled once: it never changes.
pub(crate) fn network_program() -> Result<&'static [seccompiler::sock_filter], ConfineError> {
    static PROGRAM: OnceLock<Result<BpfProgram, String>> = OnceLock::new();
    compiled_once(&PROGRAM, network_filter)
}

/// [`isolation_filter`], compiled once.
pub(crate) fn isolation_program() -> Result<&'static [seccompiler::sock_filter], ConfineError> {
    static PROGRAM: OnceLock<Result<BpfProgram, String>> = OnceLock::new();
    compiled_once(&PROGRAM, isolation_filter)
}

/// The program `build` makes, compiled on first use and kept in `cell`
/// (a failure is kept too, as its message).
fn compiled_once(
    cell: &'static OnceLock<Result<BpfProgram, String>>,
    build: fn() -> Result<BpfProgram, ConfineError>,
) -> Result<&'static [seccompiler::sock_filter], ConfineError> {
    match cell.get_or_init(|| {
        build().map_err(|e| match e {
            ConfineError::Build { message, .. } => message,
            other => other.to_string(),
        })
    }) {
        Ok(p) => Ok(p),
        Err(message) => Err(seccomp_err(message)),
    }
}

/// The isolation filter: `io_uring_setup`, `io_uring_enter` and
/// `io_uring_register` (and their x32 numbers) fail with `EACCES` — io_uring
/// performs operations that no other filter or Landlock rule sees — and any
/// other architecture's system call kills the process. Sockets are left to
/// the namespaces (a private network namespace, the view).
fn isolation_filter() -> Result<BpfProgram, ConfineError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ] {
        rules.insert(nr, vec![]);
        rules.insert(X32_SYSCALL_BIT | nr, vec![]);
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        TargetArch::x86_64,
    )
    .map_err(seccomp_err)?;
    let program: BpfProgram = filter.try_into().map_err(seccomp_err)?;
    if program.len() > usize::from(u16::MAX) {
        return Err(seccomp_err("program too long"));
    }
    Ok(program)
}

/// The network-off filter: `socket` and `socketpair` of any family but
/// `AF_UNIX`, and `io_uring_setup` (io_uring can create sockets without
/// `socket()`), fail with `EACCES`; everything else is allowed. Any other
/// architecture's system call kills the process (seccompiler's arch check).
fn network_filter() -> Result<BpfProgram, ConfineError> {
    let not_unix = || -> Result<Vec<SeccompRule>, ConfineError> {
        let cond = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )
        .map_err(seccomp_err)?;
        Ok(vec![SeccompRule::new(vec![cond]).map_err(seccomp_err)?])
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_socket, not_unix()?);
    rules.insert(libc::SYS_socketpair, not_unix()?);
    rules.insert(libc::SYS_io_uring_setup, vec![]);
    rules.insert(X32_SYSCALL_BIT | libc::SYS_socket, vec![]);
    rules.insert(X32_SYSCALL_BIT | libc::SYS_socketpair, vec![]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        TargetArch::x86_64,
    )
    .map_err(seccomp_err)?;
    let program: BpfProgram = filter.try_into().map_err(seccomp_err)?;
    if program.len() > usize::from(u16::MAX) {
        return Err(seccomp_err("program too long"));
    }
    Ok(program)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_deny_keeps_its_existing_prefix_resolved() {
        let d = canonical_deny(Path::new("/proc/self/no-such-dir/x"));
        assert!(d.ends_with("no-such-dir/x"));
        assert!(!d.starts_with("/proc/self"), "self is a symlink: {d:?}");
    }

    #[test]
    fn a_grant_is_opened_as_a_directory_or_a_file_by_what_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let (_, is_dir) = open_grant(dir.path()).unwrap();
        assert!(is_dir);
        let (fd, is_dir) = open_grant(&file).unwrap();
        assert!(!is_dir);
        let st = rustix::fs::fstat(&fd).unwrap();
        assert_eq!(FileType::from_raw_mode(st.st_mode), FileType::RegularFile);
        let e = open_grant(&dir.path().join("missing")).unwrap_err();
        assert!(matches!(e, ConfineError::Path { .. }), "{e:?}");
    }

    #[test]
    fn the_network_filter_compiles() {
        let p = network_filter().unwrap();
        assert!(p.len() > 5);
    }
}
