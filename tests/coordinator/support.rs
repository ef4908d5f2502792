//! Counting fakes for the coordinator's hooks, and the log checker.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use custodian::error::SafeCode;
use custodian::machine::request::{Action, CleanupVerdict, Event, FinalResult, Phase, step};
use custodian::request::{
    Coordinator, ProcessControl, RequestHandle, RequestId, RequestLimits, TerminalSink,
    TerminalWriteError, TransitionRecord, WorkspaceLifecycle,
};
use tokio::sync::Semaphore;

pub const SYMLINK_IN_JOB: SafeCode = SafeCode::new("symlink_in_job");
pub const SINK_CLOSED: SafeCode = SafeCode::new("sink_closed");

pub fn id(s: &str) -> RequestId {
    RequestId::new(s).unwrap()
}

/// A gate: closed until `open`, or always open.
#[derive(Debug)]
pub struct Gate {
    sem: Semaphore,
    enabled: bool,
}

impl Gate {
    pub fn open_always() -> Self {
        Gate {
            sem: Semaphore::new(0),
            enabled: false,
        }
    }
    pub fn closed() -> Self {
        Gate {
            sem: Semaphore::new(0),
            enabled: true,
        }
    }
    pub fn release(&self, n: usize) {
        self.sem.add_permits(n);
    }
    pub async fn pass(&self) {
        if self.enabled {
            self.sem.acquire().await.expect("gate").forget();
        }
    }
}

/// Counts cleanups per request; fails the ones whose id starts with `fail`
/// (or all, with `fail_all`).
#[derive(Debug)]
pub struct Lifecycle {
    pub calls: Mutex<HashMap<RequestId, u32>>,
    pub gate: Gate,
    pub fail_all: AtomicBool,
}

impl Lifecycle {
    pub fn new(gate: Gate) -> Arc<Self> {
        Arc::new(Lifecycle {
            calls: Mutex::default(),
            gate,
            fail_all: AtomicBool::new(false),
        })
    }
    pub fn count(&self, id: &RequestId) -> u32 {
        self.calls.lock().unwrap().get(id).copied().unwrap_or(0)
    }
    pub fn total(&self) -> u32 {
        self.calls.lock().unwrap().values().sum()
    }
}

impl WorkspaceLifecycle for Lifecycle {
    async fn cleanup_workspace(&self, request: &RequestId) -> CleanupVerdict {
        *self
            .calls
            .lock()
            .unwrap()
            .entry(request.clone())
            .or_default() += 1;
        self.gate.pass().await;
        if self.fail_all.load(Ordering::SeqCst) || request.as_str().starts_with("fail") {
            CleanupVerdict::Failed(SYMLINK_IN_JOB)
        } else {
            CleanupVerdict::Cleaned
        }
    }
}

/// Counts cancels.
#[derive(Debug)]
pub struct Processes {
    pub cancels: AtomicU32,
    pub gate: Gate,
}

impl Processes {
    pub fn new(gate: Gate) -> Arc<Self> {
        Arc::new(Processes {
            cancels: AtomicU32::new(0),
            gate,
        })
    }
}

impl ProcessControl for Processes {
    async fn cancel_processes(&self, _request: &RequestId) {
        self.cancels.fetch_add(1, Ordering::SeqCst);
        self.gate.pass().await;
    }
}

/// Records terminal writes; fails them when `fail` is set or the id starts
/// with `wfail`.
#[derive(Debug)]
pub struct Sink {
    pub writes: Mutex<Vec<(RequestId, FinalResult)>>,
    pub gate: Gate,
    pub fail: AtomicBool,
}

impl Sink {
    pub fn new(gate: Gate) -> Arc<Self> {
        Arc::new(Sink {
            writes: Mutex::default(),
            gate,
            fail: AtomicBool::new(false),
        })
    }
    pub fn writes_for(&self, id: &RequestId) -> usize {
        self.writes
            .lock()
            .unwrap()
            .iter()
            .filter(|(i, _)| i == id)
            .count()
    }
}

impl TerminalSink for Sink {
    async fn write_terminal(
        &self,
        request: &RequestId,
        result: &FinalResult,
    ) -> Result<(), TerminalWriteError> {
        self.writes.lock().unwrap().push((request.clone(), *result));
        self.gate.pass().await;
        if self.fail.load(Ordering::SeqCst) || request.as_str().contains("wfail") {
            Err(TerminalWriteError { code: SINK_CLOSED })
        } else {
            Ok(())
        }
    }
}

pub type Fakes = Coordinator<Lifecycle, Processes, Sink>;

pub fn coordinator(lifecycle: Gate, processes: Gate, sink: Gate, limits: RequestLimits) -> Fakes {
    Coordinator::new(
        Lifecycle::new(lifecycle),
        Processes::new(processes),
        Sink::new(sink),
        limits,
    )
}

/// What a checked log says about one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogFacts {
    pub start_cleanups: u32,
    pub cleanup_finished_at: Option<usize>,
    pub completed_at: Option<usize>,
    pub publishes: u32,
    pub writes: u32,
}

/// Checks a request's event log against the pure machine: every record is
/// exactly what `step` returns from its `before` state (conformance), the
/// records chain, cleanup is started at most once, completion is committed
/// at most once and never before a started cleanup finished, and exactly
/// one publication precedes completion. `ctx` is printed on failure (it
/// carries the stress seed).
pub fn check_log(log: &[TransitionRecord], ctx: &str) -> LogFacts {
    let mut facts = LogFacts::default();
    for (i, r) in log.iter().enumerate() {
        assert_eq!(r.index as usize, i, "{ctx}: log index");
        let t = step(&r.before, r.event, r.at);
        assert_eq!(
            t.next, r.after,
            "{ctx}: record {i} does not match step: {r:?}"
        );
        assert_eq!(
            t.actions, r.actions,
            "{ctx}: record {i} actions differ from step"
        );
        if i > 0 {
            assert_eq!(
                log[i - 1].after,
                r.before,
                "{ctx}: record {i} does not chain"
            );
        }
        for a in &r.actions {
            match a {
                Action::StartCleanup => facts.start_cleanups += 1,
                Action::Publish(_) => facts.publishes += 1,
                Action::WriteTerminal(_) => facts.writes += 1,
                Action::CancelProcesses => {}
            }
        }
        if matches!(r.event, Event::CleanupFinished(_))
            && matches!(r.before.phase(), Phase::Cleaning { .. })
        {
            facts.cleanup_finished_at = Some(i);
        }
        if r.after.is_completed() && !r.before.is_completed() {
            assert!(facts.completed_at.is_none(), "{ctx}: completed twice");
            facts.completed_at = Some(i);
        }
        if r.before.is_completed() {
            assert_eq!(
                r.after.phase(),
                r.before.phase(),
                "{ctx}: completed is absorbing"
            );
        }
    }
    assert!(
        facts.start_cleanups <= 1,
        "{ctx}: {} cleanups started",
        facts.start_cleanups
    );
    assert!(
        facts.publishes <= 1,
        "{ctx}: {} publications",
        facts.publishes
    );
    if let Some(done) = facts.completed_at {
        assert_eq!(
            facts.publishes, 1,
            "{ctx}: completed without one publication"
        );
        if facts.start_cleanups == 1 {
            let cleaned = facts
                .cleanup_finished_at
                .expect("cleanup finished before completion");
            assert!(cleaned < done, "{ctx}: completed before cleanup finished");
        }
    }
    facts
}

/// Lets every ready task run (on paused time this also means: until all
/// tasks are idle, without advancing the clock past `d`).
pub async fn settle() {
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
}

/// Waits until the request completed and checks its log; returns the facts.
pub async fn finish(h: &RequestHandle, ctx: &str) -> LogFacts {
    let c = h.finished().await;
    assert_eq!(&c.request_id, h.id());
    // The actor commits `Published` right after settling the cell.
    let mut spins = 0;
    while !h.state().is_completed() {
        tokio::task::yield_now().await;
        spins += 1;
        assert!(spins < 10_000, "{ctx}: published but never completed");
    }
    check_log(&h.log(), ctx)
}
