//! The explicit `unsupported` fallback for platforms without the
//! descriptor-relative no-follow primitives cleanup relies on.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::barrier::{Barrier, Revival};
use super::resolve::{self, UserPathError};
use super::result::{CleanupCode, CleanupCounts, CleanupResult};
use super::{RequestId, WorkspaceConfig, WorkspaceError};

/// A workspace; on this platform it can never be opened.
#[derive(Clone, Debug)]
pub struct Workspace {
    config: WorkspaceConfig,
}

/// An open request; never constructed on this platform.
#[derive(Clone, Debug)]
pub struct Job {
    ws: Workspace,
    id: RequestId,
}

/// A registered directory; never constructed on this platform.
#[derive(Debug)]
pub struct ArtifactDir {
    _private: (),
}

impl Workspace {
    /// Always fails.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::Unsupported`].
    pub fn open(_root: impl AsRef<Path>, _config: WorkspaceConfig) -> Result<Self, WorkspaceError> {
        Err(WorkspaceError::Unsupported)
    }

    /// Always fails.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::Unsupported`].
    pub fn open_with(
        _root: impl AsRef<Path>,
        _config: WorkspaceConfig,
        _revival: Option<Arc<dyn Revival>>,
    ) -> Result<Self, WorkspaceError> {
        Err(WorkspaceError::Unsupported)
    }

    /// The configuration.
    pub fn config(&self) -> &WorkspaceConfig {
        &self.config
    }

    /// Validates `id`, then fails.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::InvalidRequestId`] or [`WorkspaceError::Unsupported`].
    pub fn open_request(&self, id: &str) -> Result<Job, WorkspaceError> {
        RequestId::new(id)?;
        Err(WorkspaceError::Unsupported)
    }

    /// Lexical resolution works everywhere.
    ///
    /// # Errors
    ///
    /// [`UserPathError`] for empty, absolute, escaping or internal paths.
    pub fn resolve_user_path(&self, path: &str) -> Result<PathBuf, UserPathError> {
        resolve::resolve(&self.config.internal_name, path)
    }

    /// Always fails.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::Unsupported`].
    pub fn open_user_file(&self, _path: &str, _write: bool) -> Result<File, WorkspaceError> {
        Err(WorkspaceError::Unsupported)
    }

    /// Validates `id`, then reports an `unsupported` failure.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::InvalidRequestId`].
    pub async fn cleanup(&self, id: &str) -> Result<CleanupResult, WorkspaceError> {
        RequestId::new(id)?;
        Ok(CleanupResult::failed(
            CleanupCode::Unsupported,
            CleanupCounts::default(),
            None,
        ))
    }

    /// No cleanup result is ever cached here.
    pub fn cleanup_result(&self, _id: &RequestId) -> Option<CleanupResult> {
        None
    }

    /// Nothing is ever open here.
    pub async fn close(&self) -> Vec<(RequestId, CleanupResult)> {
        Vec::new()
    }

    /// Nothing to reclaim: no workspace opens here.
    pub async fn reclaim(&self) -> Vec<(RequestId, CleanupResult)> {
        Vec::new()
    }
}

impl Job {
    /// The request's id.
    pub fn id(&self) -> &RequestId {
        &self.id
    }

    /// Always fails.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::Unsupported`].
    pub fn barrier_or_insert<F: Barrier>(
        &self,
        _make: impl FnOnce() -> Arc<F>,
    ) -> Result<Arc<F>, WorkspaceError> {
        Err(WorkspaceError::Unsupported)
    }

    /// Never one: no job exists on this platform.
    pub fn barrier<F: Barrier>(&self) -> Option<Arc<F>> {
        None
    }

    /// Always fails.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::Unsupported`].
    pub fn journal_barrier(&self, _record: &[u8]) -> Result<(), WorkspaceError> {
        Err(WorkspaceError::Unsupported)
    }

    /// Always fails.
    ///
    /// # Errors
    ///
    /// [`WorkspaceError::Unsupported`].
    pub fn check_launch(
        &self,
        _workspace: &Path,
        _cwd: Option<&str>,
    ) -> Result<(), WorkspaceError> {
        Err(WorkspaceError::Unsupported)
    }

    /// Reports an `unsupported` failure.
    pub async fn cleanup(&self) -> CleanupResult {
        let _ = &self.ws;
        CleanupResult::failed(CleanupCode::Unsupported, CleanupCounts::default(), None)
    }
}
