//! The runtime's table of requests, as the coordinator's hooks: process
//! control over each request's tracked processes and the workspace
//! lifecycle (its terminal sink is `coordinator::Acknowledge`: the caller
//! reads the completion from its [`Request`](super::Request)).

use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use super::RuntimeError;
use crate::error::SafeCode;
use crate::id::RequestId;
use crate::machine::request::CleanupVerdict;
use crate::request::scope::{Scope, Scopes};
use crate::request::{DeniedLaunch, ProcessControl, ProcessVerdict, WorkspaceLifecycle};
use crate::spill::Locator;
use crate::sync::shim::{Mutex, lock};
use crate::workspace::{CleanupResult, Workspace};

/// One running request's scope (`request::scope`): its job, processes,
/// spills and cleanup detail, plus the launches the run policy refused.
pub(super) type Entry = Scope<Mutex<Vec<DeniedLaunch>>>;

#[derive(Debug)]
pub(super) struct Hooks {
    /// `None`: the runtime opens no job namespaces.
    pub(super) workspace: Option<Workspace>,
    table: Scopes<Mutex<Vec<DeniedLaunch>>>,
    /// `RuntimeConfig::stop_grace`.
    stop_grace: Option<Duration>,
}

impl Hooks {
    pub(super) fn new(workspace: Option<Workspace>, stop_grace: Option<Duration>) -> Self {
        Hooks {
            workspace,
            table: Scopes::default(),
            stop_grace,
        }
    }

    /// Files a new request; refused while one with the same id runs.
    pub(super) fn insert(&self, id: &RequestId) -> Result<Arc<Entry>, RuntimeError> {
        self.table
            .insert(id, Entry::default())
            .ok_or_else(|| RuntimeError::AlreadyRunning {
                request: id.clone(),
            })
    }

    pub(super) fn running(&self) -> Vec<RequestId> {
        self.table.ids()
    }

    fn entry(&self, id: &RequestId) -> Option<Arc<Entry>> {
        self.table.get(id)
    }
}

impl ProcessControl for Hooks {
    async fn cancel_processes(&self, request: &RequestId) {
        let Some(entry) = self.entry(request) else {
            return;
        };
        entry.stop(self.stop_grace).await;
        // Whatever outlived its process's settlement (an escapee of a group
        // tier) is left to the cleanup, which always follows when a job was
        // opened: it kills the request's cgroup and sees it empty before it
        // removes any file, so killing it here too would only double the
        // wait.
    }

    fn spills(&self, request: &RequestId) -> Vec<Locator> {
        self.entry(request)
            .map(|e| e.take_spills())
            .unwrap_or_default()
    }

    fn denied_launches(&self, request: &RequestId) -> Vec<DeniedLaunch> {
        self.entry(request)
            .map(|e| lock(&e.extra).clone())
            .unwrap_or_default()
    }

    fn process_verdicts(&self, request: &RequestId) -> Vec<ProcessVerdict> {
        // The last hook of the request: it is forgotten here.
        let Some(entry) = self.table.remove(request) else {
            return Vec::new();
        };
        entry.processes().iter().map(ProcessVerdict::of).collect()
    }
}

impl WorkspaceLifecycle for Hooks {
    async fn cleanup_workspace(&self, request: &RequestId) -> CleanupVerdict {
        let Some(workspace) = &self.workspace else {
            // Never asked: a request of this runtime announces no workspace.
            return CleanupVerdict::Failed(crate::request::CODE_NO_WORKSPACE_LIFECYCLE);
        };
        info!("cleanup started");
        let result = match workspace.cleanup(request.as_str()).await {
            Ok(r) => r,
            Err(e) => return CleanupVerdict::Failed(crate::request::cleanup_error_code(&e)),
        };
        let c = &result.counts;
        let code = result.safe_code();
        info!(
            status = ?result.status,
            code = code.as_ref().map(SafeCode::as_str),
            processes_cancelled = c.processes_cancelled,
            processes_unsettled = c.processes_unsettled,
            registered = c.registered,
            files_removed = c.files_removed,
            dirs_removed = c.dirs_removed,
            missing = c.missing,
            "cleanup finished"
        );
        let answer = result.verdict();
        if let Some(entry) = self.entry(request) {
            entry.set_cleanup(result);
        }
        answer
    }

    fn cleanup_detail(&self, request: &RequestId) -> Option<CleanupResult> {
        self.entry(request)
            .and_then(|e| e.cleanup())
            .or_else(|| self.workspace.as_ref()?.cleanup_result(request))
    }
}
