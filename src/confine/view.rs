//! The composed view of an isolated launch: what the child mounts in its
//! own mount namespace before it forks the program, planned here, in the
//! parent, as a list of [`Step`]s over pre-built C strings.
//!
//! # Theory of operation
//!
//! The child of an isolated launch is cloned into new user, pid, mount,
//! ipc, uts (and, with the network off, net) namespaces. Its mount
//! namespace starts as a copy of the host's; the steps turn it into the
//! view below, in this order, so that nothing the tool may not reach is
//! ever reachable once the program runs:
//!
//! 1. propagation made private (`mount(NULL, "/", MS_REC | MS_PRIVATE)`):
//!    nothing mounted in the view reaches the host, nothing mounted on
//!    the host later appears in the view;
//! 2. detached copies taken (`open_tree(OPEN_TREE_CLONE)`) of what will be
//!    attached again later: the few device nodes of the minimal `/dev`,
//!    and each tree bound into the view (the workspace, `allow_read`,
//!    `allow_write`, the working directory and the program where a fresh
//!    mount would hide them); the copies of `allow_*` trees lose `dev` and
//!    `suid`, a read-only one becomes read-only;
//! 3. every mount of the host made read-only, `nosuid` and `nodev`
//!    (`mount_setattr(AT_RECURSIVE)`): the host is read-only for everyone
//!    in the view, metadata included (`chmod`, `chown`, `utime`,
//!    `setxattr` fail with `EROFS`), and no device node of the host opens;
//! 4. fresh mounts: a private `/tmp` (tmpfs, `nosuid,nodev`, size-bounded),
//!    a minimal `/dev` (tmpfs with `null`, `zero`, `full`, `random`,
//!    `urandom`, `tty` bound from the host copies, `pts` a new `devpts`
//!    instance, `shm` a private tmpfs), a `/proc` of the new pid namespace,
//!    and an empty read-only `/run` (where the host's service sockets live);
//!    all of them go away with the namespace;
//! 5. the copies attached where they belong (mount points made inside the
//!    fresh tmpfs where needed);
//! 6. protected paths (`.git/hooks`, `.git/config` and the `protect` list)
//!    bound read-only over themselves, each ancestor between the writable
//!    tree and the path pinned by a bind of itself (a mount point cannot
//!    be renamed or removed, so the protected path cannot be moved aside
//!    and replaced);
//! 7. masks: custodian's own `.custodian/`, the `hide` list and every
//!    `deny_read` path covered by an empty read-only tmpfs (a directory) or
//!    a read-only `/dev/null` (a file).
//!
//! The tool then has no capability (the child drops every set before it
//! forks the program), so it can neither mount nor unmount anything, and
//! the mounts copied from the host are locked to it by the kernel in any
//! case (a less privileged mount namespace cannot reveal what a mount
//! covers).

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ConfineError;
use super::spec::{Confinement, FsMode, Network};

/// `MOUNT_ATTR_RDONLY`.
pub(crate) const ATTR_RDONLY: u64 = 0x1;
/// `MOUNT_ATTR_NOSUID`.
pub(crate) const ATTR_NOSUID: u64 = 0x2;
/// `MOUNT_ATTR_NODEV`.
pub(crate) const ATTR_NODEV: u64 = 0x4;

/// Paths relative to the workspace that every writable workspace keeps
/// read-only, whatever the spec says: what a later `git` run of the user
/// executes or obeys.
pub const DEFAULT_PROTECT: [&str; 2] = [".git/hooks", ".git/config"];

/// custodian's own namespace in a workspace, masked in every confined mode.
pub const INTERNAL_DIR: &str = ".custodian";

/// The size of the private `/tmp` (tmpfs `size=`).
pub const TMP_SIZE: &str = "1g";
/// The size of the private `/dev/shm`.
pub const SHM_SIZE: &str = "256m";
/// The size of the tmpfs that holds what a tool writes to its `HOME`.
pub const HOME_SIZE: &str = "1g";

/// Where the private `HOME`'s writes live in the view: a tmpfs of its own
/// (upper and work directories of the overlay), beneath the read-only
/// `/run`.
const HOME_LAYER: &str = "/run/custodian-home";

/// Mount points the view replaces with a fresh filesystem: a tree beneath
/// one of them is visible only when bound in again.
const FRESH: [&str; 4] = ["/tmp", "/dev", "/proc", "/run"];

/// The device nodes of the minimal `/dev`, bound from the host.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// One step of the child's view set-up. Every string is built here, in
/// the parent; the child only passes pointers to the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// `mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)`.
    Private,
    /// `open_tree(path, OPEN_TREE_CLONE | AT_RECURSIVE)` into `slot`, then
    /// `mount_setattr` of the copy with `set` (recursive) when not 0.
    Clone {
        /// What to copy.
        path: CString,
        /// Where the child keeps the descriptor.
        slot: usize,
        /// `MOUNT_ATTR_*` to set on the copy.
        set: u64,
    },
    /// `mount_setattr("/", AT_RECURSIVE, RDONLY | NOSUID | NODEV)`.
    HostReadOnly,
    /// `mount(fstype, target, fstype, flags, data)`.
    Mount {
        /// `tmpfs`, `proc` or `devpts`.
        fstype: CString,
        /// The mount point.
        target: CString,
        /// `MS_*` flags.
        flags: u64,
        /// Mount options.
        data: CString,
    },
    /// `mkdir(path, mode)`; an existing entry is fine.
    Mkdir {
        /// The directory.
        path: CString,
        /// Its mode.
        mode: u32,
    },
    /// Creates an empty regular file as a mount point (`O_CREAT`).
    Touch {
        /// The file.
        path: CString,
    },
    /// `symlink(target, link)`.
    Symlink {
        /// What the link points to.
        target: CString,
        /// The link.
        link: CString,
    },
    /// `move_mount` of the copy in `slot` onto `path`, then `close`.
    Attach {
        /// The copy.
        slot: usize,
        /// Where it goes.
        path: CString,
    },
    /// `mount_setattr(path, 0, RDONLY)`: one mount made read-only.
    ReadOnly {
        /// The mount.
        path: CString,
    },
    /// A copy of `path` attached over itself, read-only when `read_only`
    /// (pin: the path becomes a mount point that cannot be renamed or
    /// removed; protect: it also cannot be written).
    BindSelf {
        /// The path.
        path: CString,
        /// Whether the bind is read-only.
        read_only: bool,
    },
    /// An empty read-only tmpfs over a directory.
    MaskDir {
        /// The directory.
        path: CString,
    },
    /// A read-only copy of the view's `/dev/null` over a file.
    MaskFile {
        /// The file.
        path: CString,
    },
    /// [`Step::MaskFile`] over a host socket listed when the launch was
    /// planned; skipped if the socket is gone (`ENOENT`) by the time the
    /// view is composed: a socket removed meanwhile needs no mask, and its
    /// removal must not fail the launch.
    MaskSocket {
        /// The socket.
        path: CString,
    },
}

/// `MS_NOSUID`.
const MS_NOSUID: u64 = 2;
/// `MS_NODEV`.
const MS_NODEV: u64 = 4;
/// `MS_NOEXEC`.
const MS_NOEXEC: u64 = 8;

/// What the isolation put in place, for the evidence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct IsolationReport {
    /// The namespaces the process runs in, all new: `user`, `pid`,
    /// `mount`, `ipc`, `uts`, and `net` when the network is off.
    pub namespaces: Vec<String>,
    /// Every capability set of the tool is empty (effective, permitted,
    /// inheritable, ambient, bounding).
    pub capabilities: String,
    /// The host's mounts are read-only, `nosuid` and `nodev` in the view.
    pub host_read_only: bool,
    /// The fresh mounts of the view: `/tmp`, `/dev`, `/dev/shm`,
    /// `/dev/pts`, `/proc`, `/run`.
    pub fresh: Vec<String>,
    /// Paths bound read-only inside a writable tree.
    pub protected: Vec<PathBuf>,
    /// Paths masked (custodian's own namespace, `hide`, `deny_read`, and
    /// the host's pathname unix sockets the view does not hide otherwise).
    pub masked: Vec<PathBuf>,
    /// How pathname unix sockets outside the sandbox are kept out: `view`
    /// (the host's socket directories `/run`, `/tmp` and `/dev/shm` are
    /// private, and every other socket bound on the host when the launch
    /// began is masked, listed in `masked`); `view_partial` when there were
    /// more than custodian masks in one view (1,024: the first ones in
    /// path order are masked; one removed before the view was composed
    /// needed no mask). A socket bound on the host after the launch
    /// began, or bound in another network namespace, is not seen.
    pub unix_sockets: String,
    /// The tool runs in a new session with no controlling terminal.
    pub new_session: bool,
    /// The tool's `HOME` is a private overlay: it reads the host's files
    /// there, and what it writes (caches, `~/.npm`, `~/.cargo`) lands in
    /// the view and is discarded at the end, never on the host. `false`
    /// when `HOME` is missing, writable already, or not overlayable.
    #[serde(default)]
    pub private_home: bool,
}

/// The child's side of an isolated launch, built by [`plan_view`].
#[derive(Debug)]
pub(crate) struct View {
    /// The mount steps, in order.
    pub(crate) steps: Vec<Step>,
    /// How many descriptor slots the steps use.
    pub(crate) slots: usize,
    /// Directories of the view the child grants every handled Landlock
    /// right beneath (the fresh `/tmp` and `/dev`: their inodes exist only
    /// in the child).
    pub(crate) writable_fresh: Vec<CString>,
    /// `/proc/self/uid_map` content: the caller's uid mapped to itself.
    pub(crate) uid_map: Vec<u8>,
    /// `/proc/self/gid_map` content.
    pub(crate) gid_map: Vec<u8>,
    /// A new network namespace (loopback brought up).
    pub(crate) new_net: bool,
    /// The init opens the proxy's listener on `127.0.0.1:` this port
    /// inside the new network namespace and hands it to the caller
    /// ([`Network::Allow`]).
    pub(crate) proxy_port: Option<u16>,
    /// Only new user and pid namespaces, for an unconfined launch: no view
    /// (the host's mounts), no new session, no capability dropped (the
    /// tool keeps what `execve` gives it), nothing confined
    /// ([`View::pid_namespace_only`]).
    pub(crate) contains_only: bool,
    /// The evidence.
    pub(crate) report: IsolationReport,
}

impl View {
    /// The pid-namespace tier of an unconfined launch: the caller's uid
    /// and gid mapped to themselves in a new user namespace that owns a
    /// new pid namespace, and nothing else.
    pub(crate) fn pid_namespace_only(uid: u32, gid: u32) -> View {
        View {
            steps: Vec::new(),
            slots: 0,
            writable_fresh: Vec::new(),
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            new_net: false,
            proxy_port: None,
            contains_only: true,
            report: IsolationReport {
                namespaces: vec!["user".into(), "pid".into()],
                capabilities: "unchanged".into(),
                host_read_only: false,
                fresh: Vec::new(),
                protected: Vec::new(),
                masked: Vec::new(),
                unix_sockets: "host".into(),
                new_session: false,
                private_home: false,
            },
        }
    }
}

/// One tree bound into the view.
#[derive(Debug, Clone)]
struct Bind {
    path: PathBuf,
    writable: bool,
    dir: bool,
}

fn cstr(path: &Path) -> Result<CString, ConfineError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| ConfineError::Path {
        path: path.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL byte in path"),
    })
}

fn lit(s: &str) -> CString {
    // The literals of this module hold no NUL.
    CString::new(s).unwrap_or_default()
}

/// The fresh mount `path` lies beneath, if any.
fn fresh_root(path: &Path) -> Option<&'static str> {
    FRESH.into_iter().find(|r| path.starts_with(r))
}

/// A relative path of normal components only, or an absolute normal one.
fn normal(path: &Path) -> bool {
    path.components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        && !path
            .as_os_str()
            .as_bytes()
            .split(|&b| b == b'/')
            .any(|c| c == b"." || c == b"..")
}

/// `path` made absolute against `workspace` when relative. Only normal
/// components are accepted, so joining cannot leave `workspace`.
fn anchored(workspace: &Path, path: &Path) -> Option<PathBuf> {
    if path.as_os_str().is_empty() || !normal(path) {
        return None;
    }
    if path.is_absolute() {
        Some(path.to_owned())
    } else {
        Some(workspace.join(path))
    }
}

/// What the parent learnt of the host for one launch.
pub(crate) struct Host<'a> {
    /// The canonical workspace root.
    pub(crate) workspace: &'a Path,
    /// The canonical working directory.
    pub(crate) cwd: &'a Path,
    /// The program about to be executed.
    pub(crate) program: &'a Path,
    /// The child's `HOME`, canonical, if it has one.
    pub(crate) home: Option<&'a Path>,
    /// The caller's effective uid and gid.
    pub(crate) uid: u32,
    /// The caller's effective gid.
    pub(crate) gid: u32,
    /// The pathname unix sockets bound on the host when the launch was
    /// planned ([`host_sockets`]).
    pub(crate) sockets: &'a [PathBuf],
}

/// The most sockets one view masks; past it the view masks the first ones
/// (in path order) and the evidence says `view_partial`.
pub(crate) const MAX_SOCKET_MASKS: usize = 1024;

/// Every pathname unix socket bound in the caller's network namespace that
/// is a socket on the filesystem now: the paths of `/proc/self/net/unix`
/// (the last field, absolute), each checked with `lstat` (a line forged
/// by a socket's name can at most name another socket). Abstract and
/// unnamed sockets have no path; a socket whose file was removed is left
/// out. Empty when the list cannot be read.
pub(crate) fn host_sockets() -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(text) = std::fs::read("/proc/self/net/unix") else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = parse_unix_list(&text)
        .into_iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The absolute paths of a `/proc/net/unix` listing: the text after the
/// seventh field (`Num RefCount Protocol Flags Type St Inode Path`); the
/// fields before it never hold a `/`.
fn parse_unix_list(text: &[u8]) -> Vec<PathBuf> {
    text.split(|&b| b == b'\n')
        .skip(1)
        .filter_map(|line| {
            let at = line.windows(2).position(|w| w == b" /")?;
            let path = Path::new(OsStr::from_bytes(&line[at + 1..]));
            normal(path).then(|| path.to_owned())
        })
        .collect()
}

/// Plans the view of `spec` (see the module docs).
///
/// # Errors
///
/// [`ConfineError::Path`] for a path that cannot be expressed to the
/// kernel, [`ConfineError::ViewPath`] for a grant beneath the view's own
/// `/dev` or `/proc`.
pub(crate) fn plan_view(spec: &Confinement, host: &Host<'_>) -> Result<View, ConfineError> {
    let mut steps = vec![Step::Private];
    let mut slot = 0usize;
    let mut take = || {
        let s = slot;
        slot += 1;
        s
    };

    // 2. Copies of what is attached again later.
    let mut devices = Vec::new();
    for name in DEVICES {
        let path = Path::new("/dev").join(name);
        if is_char_device(&path) {
            let s = take();
            steps.push(Step::Clone {
                path: cstr(&path)?,
                slot: s,
                set: 0,
            });
            devices.push((path, s));
        }
    }
    let binds = binds(spec, host)?;
    let mut attach = Vec::new();
    for b in &binds {
        let s = take();
        let set = if b.writable {
            ATTR_NOSUID | ATTR_NODEV
        } else {
            ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV
        };
        steps.push(Step::Clone {
            path: cstr(&b.path)?,
            slot: s,
            set,
        });
        attach.push((b, s));
    }
    // resolv.conf pointing into /run (systemd-resolved): keep name
    // resolution working with the network on.
    let resolv = std::fs::canonicalize("/etc/resolv.conf")
        .ok()
        .filter(|p| p.starts_with("/run") && spec.network == Network::On && p.is_file());
    let resolv_slot = match &resolv {
        Some(p) => {
            let s = take();
            steps.push(Step::Clone {
                path: cstr(p)?,
                slot: s,
                set: ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV,
            });
            Some((p.clone(), s))
        }
        None => None,
    };

    // 3. The host read-only.
    steps.push(Step::HostReadOnly);

    // 4. Fresh mounts.
    let tmpfs = lit("tmpfs");
    steps.push(Step::Mount {
        fstype: tmpfs.clone(),
        target: lit("/tmp"),
        flags: MS_NOSUID | MS_NODEV,
        data: lit(&format!("size={TMP_SIZE},mode=1777")),
    });
    steps.push(Step::Mount {
        fstype: tmpfs.clone(),
        target: lit("/dev"),
        flags: MS_NOSUID | MS_NOEXEC,
        data: lit("size=64k,mode=0755"),
    });
    for (path, s) in &devices {
        let p = cstr(path)?;
        steps.push(Step::Touch { path: p.clone() });
        steps.push(Step::Attach { slot: *s, path: p });
    }
    for (target, link) in [
        ("/proc/self/fd", "/dev/fd"),
        ("/proc/self/fd/0", "/dev/stdin"),
        ("/proc/self/fd/1", "/dev/stdout"),
        ("/proc/self/fd/2", "/dev/stderr"),
        ("pts/ptmx", "/dev/ptmx"),
    ] {
        steps.push(Step::Symlink {
            target: lit(target),
            link: lit(link),
        });
    }
    for dir in ["/dev/shm", "/dev/pts"] {
        steps.push(Step::Mkdir {
            path: lit(dir),
            mode: 0o755,
        });
    }
    steps.push(Step::Mount {
        fstype: tmpfs.clone(),
        target: lit("/dev/shm"),
        flags: MS_NOSUID | MS_NODEV,
        data: lit(&format!("size={SHM_SIZE},mode=1777")),
    });
    steps.push(Step::Mount {
        fstype: lit("devpts"),
        target: lit("/dev/pts"),
        flags: MS_NOSUID | MS_NOEXEC,
        data: lit("newinstance,ptmxmode=0666,mode=620"),
    });
    steps.push(Step::Mount {
        fstype: lit("proc"),
        target: lit("/proc"),
        flags: MS_NOSUID | MS_NODEV | MS_NOEXEC,
        // Processes the reader may not ptrace-read are not listed: the
        // init (see `build::nest_ruleset`).
        data: lit("hidepid=invisible"),
    });
    steps.push(Step::Mount {
        fstype: tmpfs,
        target: lit("/run"),
        flags: MS_NOSUID | MS_NODEV | MS_NOEXEC,
        data: lit("size=1m,mode=0755"),
    });
    if let Some((p, s)) = &resolv_slot {
        mount_point(&mut steps, p, false)?;
        steps.push(Step::Attach {
            slot: *s,
            path: cstr(p)?,
        });
    }
    // The private HOME, before the copies: a tree bound beneath it (the
    // workspace under the user's home) is attached on top.
    let home = host.home.filter(|h| overlayable_home(h, &binds));
    if let Some(h) = home {
        let layer = Path::new(HOME_LAYER);
        steps.push(Step::Mkdir {
            path: cstr(layer)?,
            mode: 0o755,
        });
        steps.push(Step::Mount {
            fstype: lit("tmpfs"),
            target: cstr(layer)?,
            flags: MS_NOSUID | MS_NODEV,
            data: lit(&format!("size={HOME_SIZE},mode=0755")),
        });
        for (dir, mode) in [("upper", 0o755), ("work", 0o700)] {
            steps.push(Step::Mkdir {
                path: cstr(&layer.join(dir))?,
                mode,
            });
        }
        let data = format!(
            "lowerdir={},upperdir={HOME_LAYER}/upper,workdir={HOME_LAYER}/work,userxattr",
            h.display()
        );
        steps.push(Step::Mount {
            fstype: lit("overlay"),
            target: home_cstr(h)?,
            flags: MS_NOSUID | MS_NODEV,
            data: CString::new(data).map_err(|_| home_error())?,
        });
    }

    // 5. The copies attached, parents first.
    for (b, s) in &attach {
        if fresh_root(&b.path).is_some() {
            mount_point(&mut steps, &b.path, b.dir)?;
        }
        steps.push(Step::Attach {
            slot: *s,
            path: cstr(&b.path)?,
        });
    }
    steps.push(Step::ReadOnly { path: lit("/run") });

    // 6. Protected paths inside writable trees, their ancestors pinned.
    let writable: Vec<&Bind> = binds.iter().filter(|b| b.writable && b.dir).collect();
    let within = |p: &Path| {
        writable
            .iter()
            .find(|b| p.starts_with(&b.path) && p != b.path)
    };
    let mut protected = Vec::new();
    let mut pinned: Vec<PathBuf> = Vec::new();
    let mut protect: Vec<PathBuf> = Vec::new();
    if spec.fs == FsMode::WorkspaceWrite {
        protect.extend(DEFAULT_PROTECT.iter().map(|p| host.workspace.join(p)));
    }
    for p in &spec.protect {
        match anchored(host.workspace, p) {
            Some(p) => protect.push(p),
            None => return Err(view_path(p, "not_normal")),
        }
    }
    protect.sort();
    protect.dedup();
    for p in protect {
        let Some(tree) = within(&p) else { continue };
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            return Err(view_path(&p, "symlink"));
        }
        pin_ancestors(&mut steps, &mut pinned, &tree.path, &p)?;
        steps.push(Step::BindSelf {
            path: cstr(&p)?,
            read_only: true,
        });
        protected.push(p);
    }

    // 7. Masks.
    let mut masked = Vec::new();
    let mut masks: Vec<PathBuf> = vec![host.workspace.join(INTERNAL_DIR)];
    for p in &spec.hide {
        match anchored(host.workspace, p) {
            Some(p) => masks.push(p),
            None => return Err(view_path(p, "not_normal")),
        }
    }
    masks.extend(spec.deny_read.iter().map(|d| canonical_deny(d)));
    masks.sort();
    masks.dedup();
    // Pathname sockets the view does not hide already: not beneath a fresh
    // mount (unless a tree bound there holds them), not in the private
    // HOME (overlayfs's own inodes: no socket is bound to them), not
    // beneath a masked directory, not in a writable tree of the sandbox's
    // own (where a socket is the tool's to use).
    let mut sockets: Vec<PathBuf> = host
        .sockets
        .iter()
        .filter(|p| p.is_absolute() && normal(p))
        .filter(|p| fresh_root(p).is_none() || binds.iter().any(|b| p.starts_with(&b.path)))
        .filter(|p| !home.is_some_and(|h| p.starts_with(h)))
        .filter(|p| !masks.iter().any(|m| p.starts_with(m)))
        .filter(|p| !binds.iter().any(|b| b.writable && p.starts_with(&b.path)))
        .cloned()
        .collect();
    sockets.sort();
    sockets.dedup();
    let partial = sockets.len() > MAX_SOCKET_MASKS;
    sockets.truncate(MAX_SOCKET_MASKS);
    for p in masks {
        // Beneath a fresh mount and bound by nothing: not in the view.
        if fresh_root(&p).is_some() && !binds.iter().any(|b| p.starts_with(&b.path)) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            return Err(view_path(&p, "symlink"));
        }
        if let Some(tree) = within(&p) {
            pin_ancestors(&mut steps, &mut pinned, &tree.path, &p)?;
        }
        steps.push(if meta.is_dir() {
            Step::MaskDir { path: cstr(&p)? }
        } else {
            Step::MaskFile { path: cstr(&p)? }
        });
        masked.push(p);
    }
    for p in sockets {
        use std::os::unix::fs::FileTypeExt;
        // Still a socket (not replaced by a symlink since it was listed):
        // the mask goes over the socket itself.
        if !std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_socket()) {
            continue;
        }
        steps.push(Step::MaskSocket { path: cstr(&p)? });
        masked.push(p);
    }

    let new_net = spec.network != Network::On;
    let mut namespaces: Vec<String> = ["user", "pid", "mount", "ipc", "uts"]
        .map(String::from)
        .to_vec();
    if new_net {
        namespaces.push("net".into());
    }
    let mut writable_fresh = vec![lit("/tmp"), lit("/dev")];
    if let Some(h) = home {
        writable_fresh.push(home_cstr(h)?);
    }
    Ok(View {
        steps,
        slots: slot,
        writable_fresh,
        uid_map: format!("{0} {0} 1\n", host.uid).into_bytes(),
        gid_map: format!("{0} {0} 1\n", host.gid).into_bytes(),
        new_net,
        proxy_port: (spec.network == Network::Allow).then_some(super::PROXY_PORT),
        contains_only: false,
        report: IsolationReport {
            namespaces,
            capabilities: "none".into(),
            host_read_only: true,
            fresh: ["/tmp", "/dev", "/dev/shm", "/dev/pts", "/proc", "/run"]
                .map(String::from)
                .to_vec(),
            protected,
            masked,
            unix_sockets: if partial { "view_partial" } else { "view" }.into(),
            new_session: true,
            private_home: home.is_some(),
        },
    })
}

/// The error for a `HOME` the kernel cannot be given: never with the path,
/// which is an environment value.
fn home_error() -> ConfineError {
    view_path(Path::new("$HOME"), "not_normal")
}

fn home_cstr(home: &Path) -> Result<CString, ConfineError> {
    CString::new(home.as_os_str().as_bytes()).map_err(|_| home_error())
}

/// Whether `home` gets a private overlay: an absolute, normal directory
/// other than `/`, outside the view's fresh mounts, that no bound tree
/// covers already (a writable one makes it writable, a read-only one is
/// what the caller asked for), and whose path the overlay's options can
/// carry (no `,`, `:` or `\`).
fn overlayable_home(home: &Path, binds: &[Bind]) -> bool {
    let text = home.as_os_str().as_bytes();
    home.is_absolute()
        && normal(home)
        && home != Path::new("/")
        && fresh_root(home).is_none()
        && !text.iter().any(|b| matches!(b, b',' | b':' | b'\\'))
        && !binds.iter().any(|b| home.starts_with(&b.path))
        && std::fs::symlink_metadata(home).is_ok_and(|m| m.is_dir())
}

/// A denied path with its symlinks resolved as far as it exists (the rest
/// cannot be a symlink yet, and nothing may create it unseen: it gets no
/// rule).
pub(crate) fn canonical_deny(path: &Path) -> PathBuf {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(c) = std::fs::canonicalize(existing) {
            let mut out = c;
            out.extend(rest.iter().rev());
            return out;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return path.to_owned(),
        }
    }
}

fn view_path(path: &Path, reason: &'static str) -> ConfineError {
    ConfineError::ViewPath {
        path: path.to_owned(),
        reason,
    }
}

fn is_char_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_char_device())
}

/// The trees bound into the view, sorted so that a parent comes before
/// what lies beneath it; a tree already covered by one at least as
/// writable is left out.
fn binds(spec: &Confinement, host: &Host<'_>) -> Result<Vec<Bind>, ConfineError> {
    let mut wanted: Vec<Bind> = Vec::new();
    let ws_writable = spec.fs == FsMode::WorkspaceWrite;
    wanted.push(Bind {
        path: host.workspace.to_owned(),
        writable: ws_writable,
        dir: true,
    });
    for p in &spec.allow_write {
        wanted.push(grant(p, true)?);
    }
    for p in &spec.allow_read {
        wanted.push(grant(p, false)?);
    }
    wanted.push(Bind {
        path: host.cwd.to_owned(),
        writable: false,
        dir: true,
    });
    if let Ok(program) = std::fs::canonicalize(host.program) {
        wanted.push(Bind {
            path: program,
            writable: false,
            dir: false,
        });
    }
    for b in &wanted {
        if b.path.starts_with("/dev") || b.path.starts_with("/proc") {
            return Err(view_path(&b.path, "beneath_dev_or_proc"));
        }
    }
    wanted.sort_by(|a, b| a.path.cmp(&b.path));
    let mut kept: Vec<Bind> = Vec::new();
    for b in wanted {
        // Covered by a kept tree at least as writable: nothing to add.
        let covered = kept
            .iter()
            .any(|k| b.path.starts_with(&k.path) && (k.writable || !b.writable));
        // A read-only tree outside every fresh mount is already in the
        // read-only host.
        let in_host = !b.writable
            && fresh_root(&b.path).is_none()
            && !kept.iter().any(|k| b.path.starts_with(&k.path));
        if covered || in_host {
            continue;
        }
        kept.push(b);
    }
    Ok(kept)
}

fn grant(path: &Path, writable: bool) -> Result<Bind, ConfineError> {
    let canonical = std::fs::canonicalize(path).map_err(|e| ConfineError::Path {
        path: path.to_owned(),
        source: e,
    })?;
    let dir = canonical.is_dir();
    Ok(Bind {
        path: canonical,
        writable,
        dir,
    })
}

/// The directories (and, for a file, the empty file) to create beneath a
/// fresh mount so that `path` can be a mount point.
fn mount_point(steps: &mut Vec<Step>, path: &Path, dir: bool) -> Result<(), ConfineError> {
    let Some(root) = fresh_root(path) else {
        return Ok(());
    };
    let mut at = PathBuf::from(root);
    let rest: Vec<&OsStr> = path
        .strip_prefix(root)
        .map(|r| r.iter().collect())
        .unwrap_or_default();
    let last = rest.len();
    for (i, part) in rest.into_iter().enumerate() {
        at.push(part);
        if i + 1 == last && !dir {
            steps.push(Step::Touch { path: cstr(&at)? });
        } else {
            steps.push(Step::Mkdir {
                path: cstr(&at)?,
                mode: 0o755,
            });
        }
    }
    Ok(())
}

/// Pins every directory strictly between `tree` and `path` (once each).
fn pin_ancestors(
    steps: &mut Vec<Step>,
    pinned: &mut Vec<PathBuf>,
    tree: &Path,
    path: &Path,
) -> Result<(), ConfineError> {
    let Ok(rel) = path.strip_prefix(tree) else {
        return Ok(());
    };
    let mut at = tree.to_owned();
    let parts: Vec<&OsStr> = rel.iter().collect();
    for part in parts.iter().take(parts.len().saturating_sub(1)) {
        at.push(part);
        if pinned.contains(&at) {
            continue;
        }
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(view_path(&at, "symlink"));
        }
        steps.push(Step::BindSelf {
            path: cstr(&at)?,
            read_only: false,
        });
        pinned.push(at.clone());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host<'a>(ws: &'a Path, cwd: &'a Path) -> Host<'a> {
        Host {
            workspace: ws,
            cwd,
            program: Path::new("/bin/sh"),
            home: None,
            uid: 1000,
            gid: 1000,
            sockets: &[],
        }
    }

    #[test]
    fn a_home_gets_a_private_overlay_unless_a_bound_tree_covers_it() {
        let tmp = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
        let ws = tmp.path().join("ws");
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let spec = Confinement::workspace_write();
        let mut h = host(&ws, &ws);
        h.home = Some(&home);
        let view = plan_view(&spec, &h).unwrap();
        assert!(view.report.private_home);
        let overlay = view
            .steps
            .iter()
            .position(
                |s| matches!(s, Step::Mount { fstype, .. } if fstype.as_bytes() == b"overlay"),
            )
            .expect("an overlay mount");
        // Before the copies are attached, so a tree beneath HOME stays on top.
        let first_attach = view
            .steps
            .iter()
            .position(|s| matches!(s, Step::Attach { path, .. } if path.as_bytes() == ws.as_os_str().as_bytes()))
            .unwrap();
        assert!(overlay < first_attach);
        assert!(
            view.writable_fresh
                .iter()
                .any(|p| p.as_bytes() == home.as_os_str().as_bytes())
        );
        // HOME inside the writable workspace: already writable, no overlay.
        let inner = ws.join("home");
        std::fs::create_dir(&inner).unwrap();
        h.home = Some(&inner);
        assert!(!plan_view(&spec, &h).unwrap().report.private_home);
        // Beneath a fresh mount, `/`, a comma in the path, or missing: none.
        let comma = tmp.path().join("a,b");
        std::fs::create_dir(&comma).unwrap();
        for p in [
            Path::new("/tmp"),
            Path::new("/"),
            comma.as_path(),
            Path::new("/nonexistent-home"),
        ] {
            h.home = Some(p);
            assert!(!plan_view(&spec, &h).unwrap().report.private_home, "{p:?}");
        }
    }

    fn names(view: &View) -> Vec<String> {
        view.steps
            .iter()
            .map(|s| match s {
                Step::Private => "private".into(),
                Step::Clone { path, .. } => format!("clone {}", path.to_string_lossy()),
                Step::HostReadOnly => "host_ro".into(),
                Step::Mount { fstype, target, .. } => {
                    format!("{} {}", fstype.to_string_lossy(), target.to_string_lossy())
                }
                Step::Mkdir { path, .. } => format!("mkdir {}", path.to_string_lossy()),
                Step::Touch { path } => format!("touch {}", path.to_string_lossy()),
                Step::Symlink { link, .. } => format!("symlink {}", link.to_string_lossy()),
                Step::Attach { path, .. } => format!("attach {}", path.to_string_lossy()),
                Step::ReadOnly { path } => format!("ro {}", path.to_string_lossy()),
                Step::BindSelf { path, read_only } => {
                    format!(
                        "bind{} {}",
                        if *read_only { "_ro" } else { "" },
                        path.to_string_lossy()
                    )
                }
                Step::MaskDir { path } => format!("mask_dir {}", path.to_string_lossy()),
                Step::MaskFile { path } => format!("mask_file {}", path.to_string_lossy()),
                Step::MaskSocket { path } => format!("mask_socket {}", path.to_string_lossy()),
            })
            .collect()
    }

    fn position(names: &[String], what: &str) -> usize {
        names
            .iter()
            .position(|n| n == what)
            .unwrap_or_else(|| panic!("{what} not in {names:#?}"))
    }

    #[test]
    fn copies_come_before_the_host_is_made_read_only_and_masks_last() {
        let ws = tempfile::tempdir_in("/var/tmp").unwrap();
        let ws = std::fs::canonicalize(ws.path()).unwrap();
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::write(ws.join(".git/config"), b"").unwrap();
        std::fs::create_dir(ws.join(".custodian")).unwrap();
        let view = plan_view(&Confinement::workspace_write(), &host(&ws, &ws)).unwrap();
        let n = names(&view);
        let w = ws.to_string_lossy();
        let clone = position(&n, &format!("clone {w}"));
        let ro = position(&n, "host_ro");
        let tmp = position(&n, "tmpfs /tmp");
        let attach = position(&n, &format!("attach {w}"));
        let pin = position(&n, &format!("bind {w}/.git"));
        let hooks = position(&n, &format!("bind_ro {w}/.git/hooks"));
        let mask = position(&n, &format!("mask_dir {w}/.custodian"));
        assert!(clone < ro && ro < tmp && tmp < attach && attach < pin);
        assert!(pin < hooks && hooks < mask);
        assert!(n.contains(&format!("bind_ro {w}/.git/config")));
        assert_eq!(position(&n, "private"), 0);
        assert_eq!(view.uid_map, b"1000 1000 1\n");
        assert!(view.new_net);
        assert_eq!(view.report.masked, vec![ws.join(".custodian")]);
    }

    #[test]
    fn a_workspace_beneath_tmp_gets_its_mount_point_in_the_private_tmp() {
        let ws = tempfile::tempdir_in("/tmp").unwrap();
        let ws = std::fs::canonicalize(ws.path()).unwrap();
        let view = plan_view(&Confinement::read_only(), &host(&ws, &ws)).unwrap();
        let n = names(&view);
        let w = ws.to_string_lossy();
        let mkdir = position(&n, &format!("mkdir {w}"));
        let attach = position(&n, &format!("attach {w}"));
        assert!(position(&n, "tmpfs /tmp") < mkdir && mkdir < attach);
        // Read-only mode: nothing protected, nothing pinned.
        assert!(!n.iter().any(|s| s.starts_with("bind")), "{n:#?}");
    }

    #[test]
    fn a_read_only_workspace_outside_the_fresh_mounts_is_not_bound_again() {
        let ws = tempfile::tempdir_in("/var/tmp").unwrap();
        let ws = std::fs::canonicalize(ws.path()).unwrap();
        let view = plan_view(&Confinement::read_only(), &host(&ws, &ws)).unwrap();
        let n = names(&view);
        assert!(
            !n.iter()
                .any(|s| s == &format!("clone {}", ws.to_string_lossy())),
            "{n:#?}"
        );
    }

    #[test]
    fn a_deny_inside_the_workspace_is_masked_and_its_ancestors_pinned() {
        let ws = tempfile::tempdir_in("/var/tmp").unwrap();
        let ws = std::fs::canonicalize(ws.path()).unwrap();
        std::fs::create_dir_all(ws.join("a/secret")).unwrap();
        std::fs::write(ws.join("a/key"), b"k").unwrap();
        let spec = Confinement::workspace_write()
            .with_deny_read(ws.join("a/secret"))
            .with_deny_read(ws.join("a/key"));
        let view = plan_view(&spec, &host(&ws, &ws)).unwrap();
        let n = names(&view);
        let w = ws.to_string_lossy();
        assert!(n.contains(&format!("mask_dir {w}/a/secret")), "{n:#?}");
        assert!(n.contains(&format!("mask_file {w}/a/key")), "{n:#?}");
        assert_eq!(n.iter().filter(|s| **s == format!("bind {w}/a")).count(), 1);
    }

    #[test]
    fn protect_and_hide_paths_must_be_normal_and_symlinks_are_refused() {
        let ws = tempfile::tempdir_in("/var/tmp").unwrap();
        let ws = std::fs::canonicalize(ws.path()).unwrap();
        let mut spec = Confinement::workspace_write();
        spec.protect.push(PathBuf::from("../escape"));
        assert!(matches!(
            plan_view(&spec, &host(&ws, &ws)),
            Err(ConfineError::ViewPath {
                reason: "not_normal",
                ..
            })
        ));
        std::os::unix::fs::symlink("/etc", ws.join("link")).unwrap();
        let mut spec = Confinement::workspace_write();
        spec.hide.push(PathBuf::from("link"));
        assert!(matches!(
            plan_view(&spec, &host(&ws, &ws)),
            Err(ConfineError::ViewPath {
                reason: "symlink",
                ..
            })
        ));
    }

    #[test]
    fn a_grant_beneath_dev_or_proc_is_refused() {
        let ws = tempfile::tempdir_in("/var/tmp").unwrap();
        let ws = std::fs::canonicalize(ws.path()).unwrap();
        let spec = Confinement::read_only().with_allow_read("/dev/shm");
        assert!(matches!(
            plan_view(&spec, &host(&ws, &ws)),
            Err(ConfineError::ViewPath {
                reason: "beneath_dev_or_proc",
                ..
            })
        ));
    }

    #[test]
    fn the_unix_list_yields_absolute_paths_only() {
        let text = b"Num       RefCount Protocol Flags    Type St Inode Path\n\
0000000000000000: 00000002 00000000 00010000 0001 01 21345 /run/dbus/system_bus_socket\n\
0000000000000000: 00000002 00000000 00000000 0002 01 21350\n\
0000000000000000: 00000002 00000000 00010000 0001 01 21351 @/tmp/.X11-unix/X0\n\
0000000000000000: 00000002 00000000 00010000 0001 01  1234 /var/lib/a dir/with spaces.sock\n\
0000000000000000: 00000002 00000000 00010000 0001 01  1235 /var/../etc/x.sock\n";
        assert_eq!(
            parse_unix_list(text),
            vec![
                PathBuf::from("/run/dbus/system_bus_socket"),
                PathBuf::from("/var/lib/a dir/with spaces.sock"),
            ]
        );
    }

    #[test]
    fn sockets_outside_the_writable_trees_are_masked_and_the_tools_own_are_not() {
        use std::os::unix::net::UnixListener;
        let tmp = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let ws = root.join("ws");
        let home = root.join("home");
        let other = root.join("srv");
        for d in [&ws, &home, &other] {
            std::fs::create_dir(d).unwrap();
        }
        let outside = other.join("service.sock");
        let in_ws = ws.join("dev.sock");
        let in_home = home.join("agent.sock");
        let _held: Vec<UnixListener> = [&outside, &in_ws, &in_home]
            .iter()
            .map(|p| UnixListener::bind(p).unwrap())
            .collect();
        // A listed path that is no socket (a regular file now) is left alone.
        let plain = other.join("plain");
        std::fs::write(&plain, b"").unwrap();
        let listed = vec![
            outside.clone(),
            in_ws.clone(),
            in_home.clone(),
            plain.clone(),
            PathBuf::from("/tmp/hidden-anyway.sock"),
        ];
        let masks = |spec: &Confinement| {
            let mut h = host(&ws, &ws);
            h.home = Some(&home);
            h.sockets = &listed;
            let view = plan_view(spec, &h).unwrap();
            let steps: Vec<CString> = view
                .steps
                .iter()
                .filter_map(|s| match s {
                    Step::MaskSocket { path } => Some(path.clone()),
                    _ => None,
                })
                .collect();
            (view.report, steps)
        };
        // Writable workspace: its own socket stays, the one outside goes.
        let (report, steps) = masks(&Confinement::workspace_write());
        assert_eq!(steps, vec![cstr(&outside).unwrap()]);
        assert!(report.masked.contains(&outside), "{report:?}");
        assert!(!report.masked.contains(&in_ws), "{report:?}");
        assert!(!report.masked.contains(&in_home), "the overlay hides it");
        assert_eq!(report.unix_sockets, "view");
        // Read-only workspace: a socket in it is no tool's own.
        let (_, steps) = masks(&Confinement::read_only());
        assert_eq!(steps, vec![cstr(&outside).unwrap(), cstr(&in_ws).unwrap()]);
    }
}
