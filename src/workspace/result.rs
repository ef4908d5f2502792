//! The serializable cleanup result shared by every caller of one cleanup.

use serde::{Deserialize, Serialize};

use crate::error::SafeCode;
pub use crate::machine::cleanup::{CleanupStatus, CleanupVerdict};

/// Why a cleanup failed: a stable code with no path in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CleanupCode {
    /// A symbolic link inside the job tree.
    SymlinkInJob,
    /// A FIFO, socket or device inside the job tree.
    SpecialFileInJob,
    /// A mount root, or an entry on another mount, inside the job tree.
    MountBoundary,
    /// An entry on another device inside the job tree.
    DeviceChanged,
    /// A registered entry was replaced (other inode, birth time or type), or
    /// a registered directory was moved.
    IdentityReplaced,
    /// An entry that the request never registered.
    UnregisteredEntry,
    /// A directory was not empty when it was about to be removed (something
    /// appeared during cleanup).
    DirectoryNotEmpty,
    /// The tree changed while removal was under way: an entry taken out of
    /// the tree was not the registered inode (it was put back or kept in
    /// quarantine, never destroyed), or a destroyed name proved not to be the
    /// registered inode's link (see `docs/contracts/workspace-cleanup.md`).
    Tampered,
    /// After the result was evicted, the job directory still exists; nothing
    /// is known about it, so nothing is removed.
    JobNotOwned,
    /// Process groups had not settled when the cleanup bound expired.
    ProcessBoundExceeded,
    /// A filesystem call failed unexpectedly.
    IoError,
    /// The cleanup could not run: the filesystem was out of space or inodes,
    /// or the user's quota was exhausted (`ENOSPC`, `EDQUOT`). Not a
    /// verdict: nothing suspicious was found, and the cleanup is run again
    /// by the next request for it ([`CleanupCode::is_transient`]).
    NoSpace,
    /// The cleanup could not run: the process or the system was out of file
    /// descriptors (`EMFILE`, `ENFILE`). Not a verdict, like
    /// [`CleanupCode::NoSpace`].
    NoDescriptors,
    /// The cleanup could not run: the kernel was out of memory (`ENOMEM`).
    /// Not a verdict, like [`CleanupCode::NoSpace`].
    NoMemory,
    /// The cleanup task died before publishing a result (nothing is known to
    /// be clean).
    Abandoned,
    /// The platform has no descriptor-relative no-follow primitives.
    Unsupported,
    /// A reclaimed journal names a cgroup custodian did not make (another
    /// shape of name, a live custodian's base, another cgroup's id): it was
    /// reported and left alone, nothing in it was killed, and the job was
    /// kept (its processes could not be stopped first).
    CgroupNotOwned,
}

/// What a failed identity check means for a cleanup.
impl From<super::identity::Mismatch> for CleanupCode {
    fn from(m: super::identity::Mismatch) -> Self {
        use super::identity::Mismatch;
        match m {
            Mismatch::Symlink => CleanupCode::SymlinkInJob,
            Mismatch::Special => CleanupCode::SpecialFileInJob,
            Mismatch::Mount => CleanupCode::MountBoundary,
            Mismatch::Device => CleanupCode::DeviceChanged,
            Mismatch::Replaced => CleanupCode::IdentityReplaced,
        }
    }
}

impl CleanupCode {
    /// The wire-safe code.
    pub const fn safe_code(self) -> SafeCode {
        match self {
            CleanupCode::SymlinkInJob => SafeCode::new("symlink_in_job"),
            CleanupCode::SpecialFileInJob => SafeCode::new("special_file_in_job"),
            CleanupCode::MountBoundary => SafeCode::new("mount_boundary"),
            CleanupCode::DeviceChanged => SafeCode::new("device_changed"),
            CleanupCode::IdentityReplaced => SafeCode::new("identity_replaced"),
            CleanupCode::UnregisteredEntry => SafeCode::new("unregistered_entry"),
            CleanupCode::DirectoryNotEmpty => SafeCode::new("directory_not_empty"),
            CleanupCode::Tampered => SafeCode::new("tampered"),
            CleanupCode::JobNotOwned => SafeCode::new("job_not_owned"),
            CleanupCode::ProcessBoundExceeded => SafeCode::new("process_bound_exceeded"),
            CleanupCode::IoError => SafeCode::new("io_error"),
            CleanupCode::NoSpace => SafeCode::new("no_space"),
            CleanupCode::NoDescriptors => SafeCode::new("no_descriptors"),
            CleanupCode::NoMemory => SafeCode::new("no_memory"),
            CleanupCode::Abandoned => SafeCode::new("abandoned"),
            CleanupCode::Unsupported => SafeCode::new("unsupported"),
            CleanupCode::CgroupNotOwned => SafeCode::new("cgroup_not_owned"),
        }
    }

    /// Whether the code says the cleanup **could not run** (the machine was
    /// out of space, descriptors or memory) rather than a **verdict** on
    /// what it found.
    ///
    /// A verdict (every other code) is final: the cleanup failed closed on
    /// something it could not prove, and every later caller receives it. A
    /// transient code is answered to the callers of that attempt only; the
    /// request stays held and the next cleanup of its id (a caller's,
    /// the workspace's close, a restarted node's reclaim) runs it again.
    pub const fn is_transient(self) -> bool {
        matches!(
            self,
            CleanupCode::NoSpace | CleanupCode::NoDescriptors | CleanupCode::NoMemory
        )
    }
}

/// What a cleanup did, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupCounts {
    /// Process groups of the request still running when its cleanup began,
    /// and so cancelled (one that had settled is not counted).
    pub processes_cancelled: u32,
    /// Of those, how many had not settled within the cleanup bound.
    pub processes_unsettled: u32,
    /// Registered artifacts (job directory included).
    pub registered: u64,
    /// Registered files unlinked.
    pub files_removed: u64,
    /// Registered directories removed (job directory included).
    pub dirs_removed: u64,
    /// Registered artifacts already gone when cleanup reached them.
    pub missing: u64,
}

/// The one result of a request's cleanup, cloned to every caller.
///
/// Serializes to `{"status": …, "code": …, "counts": {…}}`; it never carries
/// a path. For operators, [`CleanupResult::suspect`] holds the job-relative
/// path of the first suspect entry; it is not serialized.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupResult {
    /// How the cleanup ended.
    pub status: CleanupStatus,
    /// Why it failed, when it did.
    pub code: Option<CleanupCode>,
    /// What it did.
    pub counts: CleanupCounts,
    /// Job-relative path of the suspect entry (operators' logs only).
    #[serde(skip)]
    pub suspect: Option<String>,
}

impl CleanupResult {
    /// True when nothing of the request remains (`Cleaned`, `AlreadyGone` or
    /// `Reclaimed`).
    pub fn is_clean(&self) -> bool {
        matches!(
            self.status,
            CleanupStatus::Cleaned | CleanupStatus::AlreadyGone | CleanupStatus::Reclaimed
        )
    }

    /// True when the cleanup could not run and will be run again
    /// ([`CleanupCode::is_transient`]); false for every verdict.
    pub fn is_transient(&self) -> bool {
        self.code.is_some_and(CleanupCode::is_transient)
    }

    /// The cleanup's verdict: its status, with its safe code when it failed
    /// (`workspace_cleanup_failed` for a failure that named none).
    pub fn verdict(&self) -> CleanupVerdict {
        match self.status {
            CleanupStatus::Cleaned => CleanupVerdict::Cleaned,
            CleanupStatus::AlreadyGone => CleanupVerdict::AlreadyGone,
            CleanupStatus::Reclaimed => CleanupVerdict::Reclaimed,
            CleanupStatus::Failed => CleanupVerdict::Failed(
                self.safe_code()
                    .unwrap_or(SafeCode::new("workspace_cleanup_failed")),
            ),
        }
    }

    /// The wire-safe failure code, if any.
    pub fn safe_code(&self) -> Option<SafeCode> {
        self.code.map(CleanupCode::safe_code)
    }

    pub(crate) fn failed(
        code: CleanupCode,
        counts: CleanupCounts,
        suspect: Option<String>,
    ) -> Self {
        CleanupResult {
            status: CleanupStatus::Failed,
            code: Some(code),
            counts,
            suspect,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_form_has_no_path() {
        let r = CleanupResult::failed(
            CleanupCode::SymlinkInJob,
            CleanupCounts::default(),
            Some("secret/dir".into()),
        );
        let json = serde_json::to_string(&r).unwrap();
        assert!(!json.contains("secret"), "{json}");
        assert!(json.contains("\"symlink_in_job\""), "{json}");
        let back: CleanupResult = serde_json::from_str(&json).unwrap();
        assert_eq!(back.code, Some(CleanupCode::SymlinkInJob));
        assert_eq!(back.suspect, None);
    }

    /// The contracts' spellings (`docs/contracts/workspace-cleanup.md`,
    /// `docs/contracts/edge-node-wire.md`): one per status, on every surface.
    #[test]
    fn statuses_serialize_as_the_contracts_spell_them() {
        for (status, spelled) in [
            (CleanupStatus::Cleaned, "cleaned"),
            (CleanupStatus::AlreadyGone, "already_gone"),
            (CleanupStatus::Reclaimed, "reclaimed"),
            (CleanupStatus::Failed, "failed"),
        ] {
            let json = serde_json::to_string(&status).unwrap();
            assert_eq!(json, format!("\"{spelled}\""));
            assert_eq!(
                serde_json::from_str::<CleanupStatus>(&json).unwrap(),
                status
            );
        }
        assert!(serde_json::from_str::<CleanupStatus>("\"clean\"").is_err());
    }

    #[test]
    fn serde_names_equal_safe_codes() {
        for c in [
            CleanupCode::SymlinkInJob,
            CleanupCode::SpecialFileInJob,
            CleanupCode::MountBoundary,
            CleanupCode::DeviceChanged,
            CleanupCode::IdentityReplaced,
            CleanupCode::UnregisteredEntry,
            CleanupCode::DirectoryNotEmpty,
            CleanupCode::JobNotOwned,
            CleanupCode::ProcessBoundExceeded,
            CleanupCode::Tampered,
            CleanupCode::IoError,
            CleanupCode::NoSpace,
            CleanupCode::NoDescriptors,
            CleanupCode::NoMemory,
            CleanupCode::Abandoned,
            CleanupCode::Unsupported,
            CleanupCode::CgroupNotOwned,
        ] {
            assert_eq!(
                serde_json::to_string(&c).unwrap(),
                format!("\"{}\"", c.safe_code())
            );
        }
    }
}
