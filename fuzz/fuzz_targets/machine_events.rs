//! Arbitrary event sequences, with `now` advancing, driven into the pure
//! machines (request, process, and the node's per-request decisions); an
//! oracle checks the invariants after every step.
//!
//! Unlike the stateright models, events here repeat without bound and arrive
//! whether or not the protocol allows them, so this also checks that a
//! confused runtime cannot make a machine break its promises (or panic).
#![no_main]

use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use custodian::error::SafeCode;
use custodian::machine::{node, process, request};
use libfuzzer_sys::fuzz_target;

const CODES: [SafeCode; 3] = [
    SafeCode::new("executor_failed"),
    SafeCode::new("symlink_in_job"),
    SafeCode::new("cleanup_timeout"),
];

#[derive(Arbitrary, Debug, Clone, Copy)]
enum ReqEvent {
    Success,
    ExecutorError(u8),
    Timeout,
    CallerCancel,
    CallerDisconnect,
    TerminalWriteFailed,
    WorkspaceOpening,
    ExecutionStopped,
    CleanupOk,
    CleanupAlreadyGone,
    CleanupReclaimed,
    CleanupFailed(u8),
    EndpointAcknowledged,
    Published,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum ProcEvent {
    RootExited(bool, i8),
    Stdout,
    Stderr,
    Deadline,
    Grace,
    Drain,
    Hard,
    Cancel,
    Interrupt,
    Probed(u8),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    Request(ReqEvent),
    Process(ProcEvent),
    Node(NodeEvent),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum NodeEvent {
    Open,
    OpenFinished(bool),
    Work,
    Cancel,
    Cleanup,
    CleanupFinished(u8),
    /// The cleanup could not run (out of inodes, descriptors or memory).
    CleanupCouldNotRun,
    /// The node restarts: its memory of the request is lost.
    Restart,
}

/// What the node oracle remembers since the node's last (re)start.
#[derive(Default)]
struct NodeOracle {
    /// A started cleanup has not finished (nor failed to run) yet.
    running: bool,
    /// A cleanup reached a verdict.
    decided: bool,
    fenced: bool,
}

impl NodeOracle {
    fn check(&mut self, before: &node::State, input: node::Input, tr: &node::Transition) {
        use node::{Action, JobState};
        let after = &tr.next;
        assert!(tr.actions.len() <= 3, "{:?}", tr.actions);
        if !before.accepting() {
            self.fenced = true;
        }
        if self.fenced {
            assert!(
                !after.accepting(),
                "the fence reopened: {before:?} {input:?}"
            );
            assert!(
                !tr.actions.contains(&Action::Open) && !tr.actions.contains(&Action::Proceed),
                "work after the fence: {before:?} {input:?} {:?}",
                tr.actions
            );
        }
        for a in &tr.actions {
            match a {
                Action::StartCleanup => {
                    // One at a time, and none once one reached a verdict;
                    // a new one only after one that could not run.
                    assert!(!self.running, "a second cleanup started while one runs");
                    assert!(!self.decided, "a cleanup started after the verdict");
                    self.running = true;
                    assert_ne!(after.job(), JobState::Opening, "cleanup raced an open");
                }
                Action::Open => {
                    assert!(matches!(before.job(), JobState::Absent | JobState::Unknown));
                    assert_eq!(after.job(), JobState::Opening);
                }
                Action::Proceed => assert!(before.is_open()),
                Action::CancelProcesses | Action::AwaitCleanup | Action::Reply(_) => {}
            }
        }
        if before.cleanup_running() {
            match input {
                node::Input::CleanupFinished(_) => {
                    self.running = false;
                    self.decided = true;
                }
                node::Input::CleanupCouldNotRun => {
                    self.running = false;
                    assert!(after.cleaned().is_none(), "could-not-run became a verdict");
                }
                _ => {}
            }
        }
        assert_eq!(
            after.cleanup_running(),
            self.running,
            "{before:?} {input:?}"
        );
        if let Some(v) = before.cleaned() {
            assert_eq!(after.cleaned(), Some(v), "cleaned is absorbing");
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    tier: u8,
    /// Each operation with how far time advances before it, in ms.
    ops: Vec<(Op, u16)>,
}

fn code(i: u8) -> SafeCode {
    CODES[usize::from(i) % CODES.len()]
}

fn req_event(e: ReqEvent) -> request::Event {
    use request::{Candidate as C, CleanupVerdict as R, Event as E};
    match e {
        ReqEvent::Success => E::Candidate(C::Success),
        ReqEvent::ExecutorError(i) => E::Candidate(C::ExecutorError { code: code(i) }),
        ReqEvent::Timeout => E::Candidate(C::Timeout),
        ReqEvent::CallerCancel => E::Candidate(C::CallerCancel),
        ReqEvent::CallerDisconnect => E::Candidate(C::CallerDisconnect),
        ReqEvent::TerminalWriteFailed => E::Candidate(C::TerminalWriteFailed),
        ReqEvent::WorkspaceOpening => E::WorkspaceOpening,
        ReqEvent::ExecutionStopped => E::ExecutionStopped,
        ReqEvent::CleanupOk => E::CleanupFinished(R::Cleaned),
        ReqEvent::CleanupAlreadyGone => E::CleanupFinished(R::AlreadyGone),
        ReqEvent::CleanupReclaimed => E::CleanupFinished(R::Reclaimed),
        ReqEvent::CleanupFailed(i) => E::CleanupFinished(R::Failed(code(i))),
        ReqEvent::EndpointAcknowledged => E::EndpointAcknowledged,
        ReqEvent::Published => E::Published,
    }
}

fn proc_event(e: ProcEvent) -> process::Event {
    use process::{Event as E, ExitStatus, Probe, Stream};
    match e {
        ProcEvent::RootExited(true, n) => E::RootExited(ExitStatus::Code(i32::from(n))),
        ProcEvent::RootExited(false, n) => E::RootExited(ExitStatus::Signal(i32::from(n))),
        ProcEvent::Stdout => E::StreamClosed(Stream::Stdout),
        ProcEvent::Stderr => E::StreamClosed(Stream::Stderr),
        ProcEvent::Deadline => E::DeadlineReached,
        ProcEvent::Grace => E::GraceElapsed,
        ProcEvent::Drain => E::DrainBoundReached,
        ProcEvent::Hard => E::HardDeadlineReached,
        ProcEvent::Cancel => E::Cancel,
        ProcEvent::Interrupt => E::Interrupt,
        ProcEvent::Probed(i) => E::GroupProbed(match i % 3 {
            0 => Probe::Empty,
            1 => Probe::Occupied,
            _ => Probe::Unknown,
        }),
    }
}

/// What the request oracle remembers across steps.
#[derive(Default)]
struct ReqOracle {
    first: Option<request::Candidate>,
    cleanups: u32,
    /// An announcement was accepted: the workspace may exist.
    announced: bool,
    cleanup: Option<request::CleanupReport>,
    writes: u32,
    published: Option<request::FinalResult>,
    completed: Option<request::FinalResult>,
}

impl ReqOracle {
    fn check(&mut self, before: &request::State, e: request::Event, tr: &request::Transition) {
        use request::{Action, Candidate, CleanupReport, Event, RequestStatus};
        let after = &tr.next;
        assert!(tr.actions.len() <= 2, "{:?}", tr.actions);
        if e == Event::WorkspaceOpening && request::accepts_workspace(before) {
            self.announced = true;
        }
        if let Event::Candidate(c) = e {
            self.first.get_or_insert(c);
        }
        // The primary outcome is the first candidate, forever.
        assert_eq!(after.primary(), self.first);
        if let (Event::CleanupFinished(r), request::Phase::Cleaning { .. }) = (e, before.phase()) {
            self.cleanup = Some(r.into());
        }
        for a in &tr.actions {
            match *a {
                Action::CancelProcesses => assert!(before.primary().is_none()),
                Action::StartCleanup => {
                    self.cleanups += 1;
                    assert_eq!(self.cleanups, 1, "cleanup started twice");
                    assert!(after.workspace_announced(), "cleanup without a workspace");
                }
                Action::WriteTerminal(r) | Action::Publish(r) => {
                    if matches!(a, Action::WriteTerminal(_)) {
                        self.writes += 1;
                        assert_eq!(self.writes, 1, "terminal written twice");
                        assert!(!after.caller_gone(), "wrote to a caller that is gone");
                    } else {
                        assert!(self.published.is_none(), "published twice");
                        self.published = Some(r);
                    }
                    // Never before cleanup: it ran and finished, or was not needed.
                    let cleanup = match self.cleanup {
                        Some(c) => c,
                        None => {
                            assert_eq!(self.cleanups, 0, "result before cleanup finished");
                            CleanupReport::NotNeeded
                        }
                    };
                    assert_eq!(r.cleanup(), cleanup);
                    // A workspace that may exist is never left uncleaned.
                    if self.announced {
                        assert_ne!(
                            cleanup,
                            CleanupReport::NotNeeded,
                            "announced workspace skipped"
                        );
                    }
                    assert_eq!(Some(r.primary()), self.first);
                    if matches!(cleanup, CleanupReport::Failed { .. }) {
                        assert_ne!(r.status(), RequestStatus::Succeeded);
                    }
                    if r.primary() != Candidate::Success
                        || !matches!(cleanup, CleanupReport::Failed { .. })
                    {
                        assert_eq!(r.status(), r.primary().status(), "category changed");
                    }
                }
            }
        }
        if let Some(done) = self.completed {
            assert_eq!(after.result(), Some(done), "completed is absorbing");
            assert!(after.is_completed());
            assert!(tr.actions.is_empty(), "acted after completion");
        } else if after.is_completed() {
            assert_eq!(
                after.result(),
                self.published,
                "completed without publishing"
            );
            self.completed = after.result();
        }
        let t = after.timeline();
        if let (Some(d), Some(c)) = (t.decided_at, t.completed_at) {
            assert!(t.opened_at <= d && d <= c);
        }
    }
}

/// What the process oracle remembers across steps.
#[derive(Default)]
struct ProcOracle {
    term: bool,
    grace_seen_after_term: bool,
    settles: u32,
    reaps: u32,
    saw_empty_probe: bool,
}

impl ProcOracle {
    fn check(
        &mut self,
        before: &process::State<Duration>,
        e: process::Event,
        tr: &process::Transition<Duration>,
    ) {
        use process::{Action, DescendantVerdict, Event, Phase, Probe, Signal, StreamEnd, Tier};
        if e == Event::GraceElapsed && self.term {
            self.grace_seen_after_term = true;
        }
        if e == Event::GroupProbed(Probe::Empty) {
            self.saw_empty_probe = true;
        }
        if before.phase == Phase::Settled {
            assert!(
                tr.actions.is_empty(),
                "acted after settlement: {:?}",
                tr.actions
            );
            assert_eq!(tr.next, *before, "settled is absorbing");
        }
        for a in &tr.actions {
            match a {
                Action::SignalGroup(Signal::Term) => {
                    assert!(!self.term, "TERM twice");
                    self.term = true;
                }
                Action::SignalGroup(Signal::Kill) => {
                    assert!(
                        self.term && self.grace_seen_after_term,
                        "KILL before TERM + grace"
                    );
                }
                Action::SignalGroup(Signal::Int) => {
                    assert_eq!(e, Event::Interrupt, "INT for another event");
                    assert!(
                        matches!(before.phase, Phase::Running | Phase::Draining),
                        "INT once a stop began"
                    );
                    assert_eq!(tr.next, *before, "an interrupt changes no state");
                }
                Action::Reap => self.reaps += 1,
                Action::Settle(sum) => {
                    self.settles += 1;
                    assert_eq!(self.settles, 1, "settled twice");
                    assert_eq!(self.reaps, 1, "settled without exactly one reap");
                    if sum.descendants == DescendantVerdict::Terminated {
                        assert!(matches!(sum.tier, Tier::PinnedGroup | Tier::Cgroup));
                        assert!(self.saw_empty_probe, "terminated without an empty probe");
                        // An empty cgroup proves every holder dead; an empty
                        // process group does not.
                        if sum.tier == Tier::PinnedGroup {
                            assert_eq!(
                                (sum.stdout, sum.stderr),
                                (StreamEnd::Closed, StreamEnd::Closed)
                            );
                        }
                    }
                }
                Action::ArmTimer { at, .. } => assert!(*at >= before.timings.started),
                Action::CloseStreams | Action::ProbeGroup => {}
            }
            if matches!(a, Action::SignalGroup(_)) {
                assert!(self.settles == 0, "signal after settlement");
                if !matches!(before.tier, Tier::PinnedGroup | Tier::Cgroup) {
                    assert!(
                        tr.next.root.is_none(),
                        "group signal after an unpinned root exited"
                    );
                }
            }
        }
        assert_eq!(self.settles == 1, tr.next.phase == Phase::Settled);
    }
}

fuzz_target!(|input: Input| {
    let t0 = Instant::now();
    let tier = match input.tier % 4 {
        0 => process::Tier::PinnedGroup,
        1 => process::Tier::Group,
        2 => process::Tier::Cgroup,
        _ => process::Tier::DirectChild,
    };
    let limits = process::ProcessLimits {
        timeout: Duration::from_secs(10),
        grace: Duration::from_secs(2),
        drain: Duration::from_secs(1),
        hard_margin: Duration::from_secs(3),
    };
    let mut elapsed = Duration::ZERO;
    let mut req = request::State::new(t0);
    let mut proc_state = process::start(tier, limits, elapsed).next;
    let mut req_oracle = ReqOracle::default();
    let mut proc_oracle = ProcOracle::default();
    let mut node_state = node::State::new();
    let mut node_oracle = NodeOracle::default();
    for (op, advance) in input.ops.into_iter().take(256) {
        elapsed += Duration::from_millis(u64::from(advance));
        match op {
            Op::Request(e) => {
                let e = req_event(e);
                let tr = request::step(&req, e, t0 + elapsed);
                req_oracle.check(&req, e, &tr);
                req = tr.next;
            }
            Op::Process(e) => {
                let e = proc_event(e);
                let tr = process::step(&proc_state, e, elapsed);
                proc_oracle.check(&proc_state, e, &tr);
                proc_state = tr.next;
            }
            Op::Node(NodeEvent::Restart) => {
                node_state = node::State::after_restart();
                node_oracle = NodeOracle::default();
            }
            Op::Node(e) => {
                let input = match e {
                    NodeEvent::Open => node::Input::Open,
                    NodeEvent::OpenFinished(ok) => node::Input::OpenFinished { ok },
                    NodeEvent::Work => node::Input::Work,
                    NodeEvent::Cancel => node::Input::Cancel,
                    NodeEvent::Cleanup => node::Input::Cleanup,
                    NodeEvent::CleanupFinished(i) => node::Input::CleanupFinished(match i % 3 {
                        0 => node::CleanupVerdict::Cleaned,
                        1 => node::CleanupVerdict::AlreadyGone,
                        _ => node::CleanupVerdict::Failed(code(i)),
                    }),
                    NodeEvent::CleanupCouldNotRun => node::Input::CleanupCouldNotRun,
                    NodeEvent::Restart => unreachable!("handled above"),
                };
                let tr = node::step(&node_state, input);
                node_oracle.check(&node_state, input, &tr);
                node_state = tr.next;
            }
        }
    }
});
