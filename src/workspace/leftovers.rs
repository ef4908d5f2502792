//! What a killed cleanup left in its quarantine.
//!
//! The removal protocol ([`fs::Quarantine`]) moves each registered entry out
//! of the job tree into `<internal>/quarantine/<job>/q<n>` and only then
//! destroys it. A node killed between the move and the destruction leaves
//! the entry there: out of the tree, so the next pass counts it missing,
//! but not gone. The reclaim after a restart hands each such leftover to
//! the same protocol again, which destroys it only if it is still an inode
//! the journal's inventory registered; anything else is kept and logged.
//! A cleanup run again after an attempt that could not run (out of space,
//! descriptors or memory) sweeps that attempt's quarantine the same way.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd};

use super::identity::Anchor;
use super::inventory::Inventory;
use super::remove;
use super::result::CleanupCode;
use crate::fs::{self, Errno, FileKind, Removal};

/// What [`destroy_proven`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Swept {
    pub files: u64,
    pub dirs: u64,
    /// Entries left in the quarantine: not proven by the inventory, or not
    /// removable now.
    pub kept: u64,
    /// Of the kept, the first whose removal could not run (the machine was
    /// out of space, descriptors or memory): a retry may still remove it.
    pub transient: Option<CleanupCode>,
}

impl Swept {
    fn add(&mut self, other: Swept) {
        self.files += other.files;
        self.dirs += other.dirs;
        self.kept += other.kept;
        self.transient = self.transient.or(other.transient);
    }

    fn keep(&mut self, e: Errno) {
        self.kept += 1;
        let code = remove::errno_code(e);
        if code.is_transient() && self.transient.is_none() {
            self.transient = Some(code);
        }
    }
}

/// The removal pass's second thread quarantines beneath the job's own
/// quarantine, in this directory (`<internal>/quarantine/<job>/1`).
const SECOND_QUARANTINE: &CStr = c"1";

/// Destroys every entry of `<qroot>/<job_name>` that `inv` registered (same
/// kind, device, inode, birth time and mount, admitted by `anchor`), then
/// removes that directory if nothing was kept. Never follows a symlink,
/// never descends into what it destroys: a quarantined directory must
/// already be empty. The second thread's quarantine inside it is swept the
/// same way first.
pub(crate) fn destroy_proven(
    qroot: BorrowedFd<'_>,
    job_name: &CStr,
    inv: &Inventory,
    anchor: Anchor,
) -> Swept {
    destroy_proven_at(qroot, job_name, inv, anchor, true)
}

/// [`destroy_proven`] on a job's quarantine the caller holds open (`dir`,
/// checked to be a plain directory on `anchor`), which stays in place
/// whatever it did: a cleanup run again after an attempt that could not
/// run sweeps what that attempt left there before it removes anything else.
pub(crate) fn destroy_proven_in(dir: BorrowedFd<'_>, inv: &Inventory, anchor: Anchor) -> Swept {
    sweep(dir, inv, anchor, true)
}

fn destroy_proven_at(
    qroot: BorrowedFd<'_>,
    job_name: &CStr,
    inv: &Inventory,
    anchor: Anchor,
    top: bool,
) -> Swept {
    let mut out = Swept::default();
    let dir = match fs::open_dir_at(qroot, job_name) {
        Ok(fd) => fd,
        // The usual case: no cleanup of this job was interrupted there.
        Err(Errno::NOENT) => return out,
        Err(e) => {
            tracing::warn!(error = %e, "cannot open a job's quarantine; its leftovers are kept");
            out.keep(e);
            return out;
        }
    };
    match fs::observe_fd(dir.as_fd()) {
        Ok(obs) if obs.kind == FileKind::Dir && anchor.admit(&obs).is_ok() => {}
        Err(e) => {
            out.keep(e);
            return out;
        }
        _ => {
            tracing::warn!("a job's quarantine is not a plain directory here; it is kept");
            out.kept = 1;
            return out;
        }
    }
    out = sweep(dir.as_fd(), inv, anchor, top);
    if out.kept == 0 {
        let _ = fs::rmdir_at(qroot, job_name);
    }
    out
}

/// Destroys the proven entries of the open quarantine `dir`.
fn sweep(dir: BorrowedFd<'_>, inv: &Inventory, anchor: Anchor, top: bool) -> Swept {
    let mut out = Swept::default();
    let mut names: Vec<CString> = Vec::new();
    match fs::for_each_name(dir, |n| {
        names.push(n.to_owned());
        Ok::<(), ()>(())
    }) {
        Ok(_) => {}
        Err(e) => {
            out.keep(e);
            return out;
        }
    }
    if names.is_empty() {
        return out;
    }
    let by_ino: HashMap<u64, u32> = (0..inv.len() as u32)
        .map(|i| (inv.entry(i).identity.ino, i))
        .collect();
    // A second descriptor of the same directory: the protocol moves each
    // leftover to a fresh name there before it identifies and destroys it.
    let mut quarantine = match fs::dup(dir) {
        Ok(fd) => fs::Quarantine::new(fd),
        Err(e) => {
            out.keep(e);
            out.kept = names.len() as u64;
            return out;
        }
    };
    for name in names {
        if top && name.as_c_str() == SECOND_QUARANTINE {
            out.add(destroy_proven_at(dir, &name, inv, anchor, false));
            continue;
        }
        let obs = match fs::observe_at(dir, &name) {
            Ok(obs) => obs,
            Err(Errno::NOENT) => continue,
            Err(e) => {
                out.keep(e);
                continue;
            }
        };
        let Some(&i) = by_ino.get(&obs.identity.ino) else {
            out.kept += 1;
            continue;
        };
        let entry = inv.entry(i);
        let kind = entry.kind.file_kind();
        let identity = entry.identity;
        let removal = quarantine.remove(dir, &name, kind, |seen| {
            let obs = seen.observed();
            anchor.admit(&obs).and_then(|()| identity.check(kind, &obs))
        });
        match removal {
            Ok(Removal::Destroyed) if kind == FileKind::Dir => out.dirs += 1,
            Ok(Removal::Destroyed) => out.files += 1,
            Ok(Removal::Missing) => {}
            Ok(_) => out.kept += 1,
            Err(e) => out.keep(e),
        }
    }
    if out.kept > 0 {
        tracing::warn!(
            kept = out.kept,
            "entries not proven by the journal are kept in a job's quarantine"
        );
    }
    out
}
