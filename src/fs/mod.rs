//! The one audited filesystem layer under both cleaners (layer 0.5).
//!
//! The workspace cleanup and the spill store/sweep delete files on behalf of
//! requests that may be hostile. Every filesystem syscall they make goes
//! through this module, so this is the single place a reviewer reads to
//! audit what they can be made to touch.
//!
//! # Rules every function here keeps
//!
//! - **Descriptor-relative, one name at a time.** Every call takes a
//!   directory descriptor and a single component (from `getdents64` or from
//!   a validated name): no path is ever resolved through more than one
//!   directory, and no name holds a `/`, so a trailing slash cannot turn a
//!   no-follow call into a follow. The only exceptions are roots named by
//!   operator configuration ([`open_configured_dir`], [`mkdir_configured`])
//!   and [`open_dir_path`], which walks an absolute path one component at a
//!   time with the ancestor trust rule.
//! - **Never follow a symlink.** `O_NOFOLLOW` on every open,
//!   `AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT` on every `statx`; `unlinkat` and
//!   `renameat2` act on the name itself.
//! - **Never block on a FIFO.** Directories are opened with `O_DIRECTORY`
//!   (the lookup fails on anything else); files of a user's naming with
//!   `O_NONBLOCK` and a type check before use ([`open_regular`]).
//! - **Identity is the kernel's.** [`Stat`] holds what one `statx` reports:
//!   device, inode, birth time, mount id (unique where the kernel has it),
//!   the mount-root attribute, type, owner, mode, link count. Mount fencing
//!   ([`Stat::on_mount_of`]) sees a bind mount of the same filesystem by its
//!   mount id, and a mount point by `STATX_ATTR_MOUNT_ROOT`.
//! - **Trust** ([`Stat::trusted_dir_for`], [`Stat::trusted_ancestor_for`]):
//!   a directory a cleaner owns is owned by its user and not writable by
//!   group or others; an ancestor is owned by root or that user and not
//!   writable by others unless sticky.
//! - **Removal is tamper-evident** ([`Quarantine`]): an entry leaves the
//!   user-visible tree by `renameat2` into a cleaner-private quarantine
//!   (`RENAME_NOREPLACE`, or onto the name of a file already identified
//!   there, which that destroys) before anything is
//!   destroyed, what arrived is identified by descriptor, and the held
//!   descriptor must show `nlink == 0` afterwards. The argument and the
//!   remaining window are in the [`Quarantine`] docs.
//!
//! Errors are the kernel's `errno` ([`Errno`]); callers map them to their
//! own typed errors and safe codes.
//!
//! # Every syscall, and who makes it
//!
//! | syscall | function | flags that matter | used by |
//! |---|---|---|---|
//! | `openat` | [`open_dir_at`], [`open_parent`] | `O_DIRECTORY \| O_NOFOLLOW` | both cleaners' walks |
//! | `openat` | [`open_regular`] | `O_NOFOLLOW \| O_NONBLOCK`, then a type check | `Workspace::open_user_file` |
//! | `openat` | [`open_file_at`] | `O_NOFOLLOW` (+ the caller's `O_CREAT \| O_EXCL` or `O_NONBLOCK`) | spill store write / read |
//! | `openat` | [`create_file`] | `O_CREAT \| O_EXCL \| O_NOFOLLOW` | workspace artifacts |
//! | `openat` | [`Quarantine::remove`], [`Quarantine::remove_file`] | `O_PATH \| O_NOFOLLOW` | both cleaners' removals |
//! | `open`, `mkdir` | [`open_configured_dir`], [`mkdir_configured`], [`open_dir_path`] | operator-configured roots only | workspace root, spill roots |
//! | `mkdirat` | [`mkdir_at`] | fails on any existing name | job, quarantine, session dirs |
//! | `statx` | [`stat_at`], [`stat_fd`], [`observe_at`], [`observe_fd`] | `AT_SYMLINK_NOFOLLOW \| AT_NO_AUTOMOUNT` | identity, trust, mount fence |
//! | `getdents64` | [`list`], [`for_each_name`] | — | listings |
//! | `renameat2` | [`Quarantine::remove`], [`Quarantine::remove_file`] | `RENAME_NOREPLACE`; `0` only onto the name of a file pending in the caller's own quarantine, which it destroys | the only way anything leaves a tree |
//! | `renameat2` | [`rename_noreplace`] | `RENAME_NOREPLACE`, within one directory | the workspace's own journals, to and from a spare name |
//! | `unlinkat` | [`Quarantine::remove`], [`Quarantine::flush`] (in the quarantine), [`unlink_at`], [`rmdir_at`] | — | destruction; `unlink_at` only for a file the caller just created or the workspace's own journal, `rmdir_at` only for a cleaner's own empty quarantine or root |
//! | `fchmod`, `flock`, `fcntl` | [`fchmod`], [`flock`], [`open_regular`], [`dup`] | `F_DUPFD_CLOEXEC` for [`dup`] | spill roots and sessions; clearing `O_NONBLOCK`; a directory's descriptor for a cleaner's second thread |
//! | `ftruncate` | [`truncate`] | — | the workspace's own ownership journals (cut a torn tail before appending) |
//! | `geteuid` | [`trusting_uid`] | — | the owner the trust rules expect |
//!
//! # References
//!
//! [openat(2)](https://man7.org/linux/man-pages/man2/openat.2.html),
//! [statx(2)](https://man7.org/linux/man-pages/man2/statx.2.html),
//! [unlinkat(2)](https://man7.org/linux/man-pages/man2/unlinkat.2.html),
//! [rename(2)](https://man7.org/linux/man-pages/man2/rename.2.html),
//! [getdents64(2)](https://man7.org/linux/man-pages/man2/getdents64.2.html),
//! [path_resolution(7)](https://man7.org/linux/man-pages/man7/path_resolution.7.html).

mod append;
mod dir;
mod remove;
mod stat;
#[cfg(test)]
mod tests;

pub(crate) use append::{rename_noreplace, truncate};
pub use stat::{BirthTime, FileKind, Identity, MountId, Observed};

pub(crate) use dir::{
    Access, Entry, WalkError, create_file, dup, fchmod, flock, for_each_name, list, mkdir_at,
    mkdir_configured, open_configured_dir, open_dir_at, open_dir_path, open_file_at, open_parent,
    open_regular, rmdir_at, unlink_at,
};
pub(crate) use remove::{Quarantine, Removal, Settled};
pub(crate) use rustix::fs::{FlockOperation, OFlags};
pub(crate) use rustix::io::Errno;
pub(crate) use stat::{
    Stat, Untrusted, nlink_fd, observe_at, observe_fd, stat_at, stat_fd, trusting_uid,
};
