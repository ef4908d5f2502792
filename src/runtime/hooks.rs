//! The runtime's table of requests, as the coordinator's hooks: process
//! control over each request's tracked processes, the workspace lifecycle,
//! and a terminal sink that acknowledges at once (the caller reads the
//! completion from its [`Request`](super::Request)).

use std::collections::HashMap;
use std::sync::Arc;

use tracing::info;

use super::RuntimeError;
use crate::coordinator::{
    DeniedLaunch, ProcessControl, ProcessVerdict, TerminalSink, TerminalWriteError,
    WorkspaceLifecycle,
};
use crate::error::SafeCode;
use crate::id::RequestId;
use crate::machine::request::{CleanupVerdict, FinalResult};
use crate::process::Running;
use crate::spill::Locator;
use crate::sync::shim::{Mutex, lock};
use crate::workspace::{CleanupResult, Job, Workspace};

/// One running request: what it opened, launched and spilled.
#[derive(Debug, Default)]
pub(super) struct Entry {
    pub(super) job: Mutex<Option<Job>>,
    pub(super) procs: Mutex<Procs>,
    pub(super) spills: Mutex<Spills>,
    /// The launches the run policy refused, in order.
    pub(super) denied: Mutex<Vec<DeniedLaunch>>,
    cleanup: Mutex<Option<CleanupResult>>,
}

/// The request's spills. Once `closed` (its completion took the list),
/// a spill is refused: every spill the completion does not list failed.
#[derive(Debug, Default)]
pub(super) struct Spills {
    pub(super) closed: bool,
    pub(super) list: Vec<Locator>,
}

/// The request's process table. Once `closed` (its executor was told to
/// stop), nothing more is launched: a launch takes the same lock.
#[derive(Debug, Default)]
pub(super) struct Procs {
    pub(super) closed: bool,
    pub(super) list: Vec<Running>,
}

#[derive(Debug)]
pub(super) struct Hooks {
    pub(super) workspace: Workspace,
    table: Mutex<HashMap<RequestId, Arc<Entry>>>,
}

impl Hooks {
    pub(super) fn new(workspace: Workspace) -> Self {
        Hooks {
            workspace,
            table: Mutex::new(HashMap::new()),
        }
    }

    /// Files a new request; refused while one with the same id runs.
    pub(super) fn insert(&self, id: &RequestId) -> Result<Arc<Entry>, RuntimeError> {
        let mut table = lock(&self.table);
        if table.contains_key(id) {
            return Err(RuntimeError::AlreadyRunning {
                request: id.clone(),
            });
        }
        let entry = Arc::new(Entry::default());
        table.insert(id.clone(), Arc::clone(&entry));
        Ok(entry)
    }

    pub(super) fn running(&self) -> Vec<RequestId> {
        lock(&self.table).keys().cloned().collect()
    }

    fn entry(&self, id: &RequestId) -> Option<Arc<Entry>> {
        lock(&self.table).get(id).cloned()
    }
}

impl ProcessControl for Hooks {
    async fn cancel_processes(&self, request: &RequestId) {
        let Some(entry) = self.entry(request) else {
            return;
        };
        let list = {
            let mut procs = lock(&entry.procs);
            procs.closed = true;
            procs.list.clone()
        };
        for p in &list {
            p.cancel();
        }
        for p in &list {
            let _ = p.settled().await;
        }
        // Whatever outlived its process's settlement (an escapee of a group
        // tier) is left to the cleanup, which always follows when a job was
        // opened: it kills the request's cgroup and sees it empty before it
        // removes any file, so killing it here too would only double the
        // wait.
    }

    fn spills(&self, request: &RequestId) -> Vec<Locator> {
        let Some(entry) = self.entry(request) else {
            return Vec::new();
        };
        let mut spills = lock(&entry.spills);
        spills.closed = true;
        spills.list.clone()
    }

    fn denied_launches(&self, request: &RequestId) -> Vec<DeniedLaunch> {
        self.entry(request)
            .map(|e| lock(&e.denied).clone())
            .unwrap_or_default()
    }

    fn process_verdicts(&self, request: &RequestId) -> Vec<ProcessVerdict> {
        // The last hook of the request: it is forgotten here.
        let Some(entry) = lock(&self.table).remove(request) else {
            return Vec::new();
        };
        let procs = lock(&entry.procs);
        procs
            .list
            .iter()
            .map(|p| match p.try_settled() {
                Some(ev) => ProcessVerdict::from_evidence(p.pid(), &ev),
                None => ProcessVerdict::unsettled(p.pid()),
            })
            .collect()
    }
}

impl WorkspaceLifecycle for Hooks {
    async fn cleanup_workspace(&self, request: &RequestId) -> CleanupVerdict {
        info!("cleanup started");
        let result = match self.workspace.cleanup(request.as_str()).await {
            Ok(r) => r,
            Err(e) => return CleanupVerdict::Failed(crate::coordinator::cleanup_error_code(&e)),
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
            *lock(&entry.cleanup) = Some(result);
        }
        answer
    }

    fn cleanup_detail(&self, request: &RequestId) -> Option<CleanupResult> {
        self.entry(request)
            .and_then(|e| lock(&e.cleanup).clone())
            .or_else(|| self.workspace.cleanup_result(request))
    }
}

/// The terminal sink of a runtime: the caller reads the completion from
/// its [`Request`](super::Request), so the write is acknowledged at once.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Acknowledge;

impl TerminalSink for Acknowledge {
    async fn write_terminal(
        &self,
        _request: &RequestId,
        _result: &FinalResult,
    ) -> Result<(), TerminalWriteError> {
        Ok(())
    }
}
