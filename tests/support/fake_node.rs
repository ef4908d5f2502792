//! A counting fake of the node's workspace operations, shared by the wire
//! and coordinator test binaries (included with `#[path]`).

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use custodian::error::SafeCode;
use custodian::request::RequestId;
use custodian::wire::{CleanupVerdict, NodeWorkspace, ProcessSummary, RunSpec};
use tokio::sync::Semaphore;

/// Per-request call counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    pub open: u32,
    pub cleanup: u32,
    pub cancel: u32,
    pub run: u32,
    pub write: u32,
}

/// The fake. Request ids starting with `fail` make cleanup fail with
/// `symlink_in_job`; ids starting with `openfail` make the open fail with
/// `open_failed` after it made part of the job (the cleanup then finds
/// something to remove). When `gated`, every cleanup waits for a permit from
/// `gate` before it finishes.
#[derive(Debug)]
pub struct FakeNode {
    calls: Mutex<HashMap<RequestId, Calls>>,
    opened: Mutex<HashMap<RequestId, bool>>,
    pub gated: AtomicBool,
    pub gate: Arc<Semaphore>,
    /// When set, every open waits for a permit from `open_gate` first.
    pub open_gated: AtomicBool,
    pub open_gate: Arc<Semaphore>,
    /// Cleanups currently running per request (to detect overlap).
    running: Mutex<HashMap<RequestId, u32>>,
    pub overlapped: AtomicBool,
}

pub const SYMLINK_IN_JOB: SafeCode = SafeCode::new("symlink_in_job");

impl FakeNode {
    pub fn new() -> Self {
        FakeNode {
            calls: Mutex::default(),
            opened: Mutex::default(),
            gated: AtomicBool::new(false),
            gate: Arc::new(Semaphore::new(0)),
            open_gated: AtomicBool::new(false),
            open_gate: Arc::new(Semaphore::new(0)),
            running: Mutex::default(),
            overlapped: AtomicBool::new(false),
        }
    }

    pub fn gated() -> Self {
        let f = FakeNode::new();
        f.gated.store(true, Ordering::SeqCst);
        f
    }

    pub fn calls(&self, id: &RequestId) -> Calls {
        self.calls
            .lock()
            .unwrap()
            .get(id)
            .copied()
            .unwrap_or_default()
    }

    pub fn total_cleanups(&self) -> u32 {
        self.calls.lock().unwrap().values().map(|c| c.cleanup).sum()
    }

    fn bump(&self, id: &RequestId, f: impl FnOnce(&mut Calls)) {
        f(self.calls.lock().unwrap().entry(id.clone()).or_default());
    }
}

impl NodeWorkspace for FakeNode {
    type Held = ();

    async fn open(&self, request: &RequestId) -> Result<(), SafeCode> {
        self.bump(request, |c| c.open += 1);
        if self.open_gated.load(Ordering::SeqCst) {
            self.open_gate.acquire().await.expect("open gate").forget();
        }
        self.opened.lock().unwrap().insert(request.clone(), true);
        if request.as_str().starts_with("openfail") {
            return Err(SafeCode::new("open_failed"));
        }
        Ok(())
    }

    async fn write_artifact(
        &self,
        request: &RequestId,
        _: &(),
        name: &str,
        contents: &[u8],
    ) -> Result<u64, SafeCode> {
        self.bump(request, |c| c.write += 1);
        if name.contains("..") {
            return Err(SafeCode::new("invalid_artifact_name"));
        }
        Ok(contents.len() as u64)
    }

    async fn run(
        &self,
        request: &RequestId,
        _: &(),
        spec: RunSpec,
    ) -> Result<ProcessSummary, SafeCode> {
        self.bump(request, |c| c.run += 1);
        Ok(ProcessSummary {
            exit_code: Some(0),
            signal: None,
            reason: custodian::wire::Code::new("exited").unwrap(),
            descendants: custodian::wire::Code::new("none").unwrap(),
            stdout: spec.argv.join(" "),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            network: None,
        })
    }

    async fn cancel(&self, request: &RequestId, _: Option<&()>) -> u32 {
        self.bump(request, |c| c.cancel += 1);
        0
    }

    async fn cleanup(&self, request: &RequestId) -> CleanupVerdict {
        self.bump(request, |c| c.cleanup += 1);
        {
            let mut running = self.running.lock().unwrap();
            let n = running.entry(request.clone()).or_default();
            *n += 1;
            if *n > 1 {
                self.overlapped.store(true, Ordering::SeqCst);
            }
        }
        if self.gated.load(Ordering::SeqCst) {
            self.gate.acquire().await.expect("gate open").forget();
        }
        *self.running.lock().unwrap().get_mut(request).unwrap() -= 1;
        let opened = self.opened.lock().unwrap().remove(request).is_some();
        if request.as_str().starts_with("fail") {
            CleanupVerdict::Failed(SYMLINK_IN_JOB)
        } else if opened {
            CleanupVerdict::Cleaned
        } else {
            CleanupVerdict::AlreadyGone
        }
    }
}
