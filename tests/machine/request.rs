//! The request machine, exhaustively: every state reachable with
//! representative data × every event, checked against the table in
//! [`expected`] (the same table as `docs/state-machines.md`).

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::time::{Duration, Instant};

use custodian::error::SafeCode;
use custodian::machine::request::{
    Action, Candidate, CandidateKind, CleanupReport, CleanupVerdict, Delivery, Event, FinalResult,
    Phase, RequestStatus, State, accepts_workspace, step,
};

const EXEC: SafeCode = SafeCode::new("executor_crashed");
const CLEAN: SafeCode = SafeCode::new("symlink_in_job");

/// Every event, with representative data.
const EVENTS: [Event; 12] = [
    Event::Candidate(Candidate::Success),
    Event::Candidate(Candidate::ExecutorError { code: EXEC }),
    Event::Candidate(Candidate::Timeout),
    Event::Candidate(Candidate::CallerCancel),
    Event::Candidate(Candidate::CallerDisconnect),
    Event::Candidate(Candidate::TerminalWriteFailed),
    Event::WorkspaceOpening,
    Event::ExecutionStopped,
    Event::CleanupFinished(CleanupVerdict::Cleaned),
    Event::CleanupFinished(CleanupVerdict::Failed(CLEAN)),
    Event::EndpointAcknowledged,
    Event::Published,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum P {
    Open,
    Finalizing,
    Cleaning,
    Writing,
    Acknowledged(Delivery),
    Completed(Delivery),
}

fn kind(phase: Phase) -> P {
    match phase {
        Phase::Open => P::Open,
        Phase::Finalizing { .. } => P::Finalizing,
        Phase::Cleaning { .. } => P::Cleaning,
        Phase::Writing { .. } => P::Writing,
        Phase::Acknowledged { delivery, .. } => P::Acknowledged(delivery),
        Phase::Completed { delivery, .. } => P::Completed(delivery),
    }
}

/// Coarse phase, for coverage of phase × event.
fn coarse(p: P) -> u8 {
    match p {
        P::Open => 0,
        P::Finalizing => 1,
        P::Cleaning => 2,
        P::Writing => 3,
        P::Acknowledged(_) => 4,
        P::Completed(_) => 5,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum A {
    Cancel,
    Cleanup,
    Write,
    Publish,
}

#[derive(Debug, PartialEq, Eq)]
struct Expect {
    phase: P,
    actions: Vec<A>,
    duplicate: bool,
    unexpected: bool,
}

fn stay(p: P) -> Expect {
    Expect {
        phase: p,
        actions: vec![],
        duplicate: false,
        unexpected: false,
    }
}
fn dup(p: P) -> Expect {
    Expect {
        duplicate: true,
        ..stay(p)
    }
}
fn unexpected(p: P) -> Expect {
    Expect {
        unexpected: true,
        ..stay(p)
    }
}
fn go(p: P, actions: &[A]) -> Expect {
    Expect {
        phase: p,
        actions: actions.to_vec(),
        duplicate: false,
        unexpected: false,
    }
}

/// The executor stopped: clean if a workspace was opened, else merge and
/// write (or publish straight away if the caller is gone).
fn after_stop(ws: bool, gone: bool) -> (P, A) {
    if ws {
        (P::Cleaning, A::Cleanup)
    } else if gone {
        (P::Acknowledged(Delivery::CallerGone), A::Publish)
    } else {
        (P::Writing, A::Write)
    }
}

/// The table: what `event` does to a state of phase `p`.
fn expected(s: &State, event: Event) -> Expect {
    let p = kind(s.phase());
    let ws = s.workspace_announced();
    let gone = s.caller_gone();
    use Event as E;
    match (p, event) {
        // Every candidate, a success too, waits for the processes' stop.
        (P::Open, E::Candidate(_)) => go(P::Finalizing, &[A::Cancel]),
        (P::Open, E::WorkspaceOpening) => stay(P::Open),
        (
            P::Open,
            E::ExecutionStopped | E::CleanupFinished(_) | E::EndpointAcknowledged | E::Published,
        ) => unexpected(P::Open),

        // A disconnect while finalizing is remembered for the write.
        (P::Finalizing, E::Candidate(_)) => dup(P::Finalizing),
        (P::Finalizing, E::WorkspaceOpening) => stay(P::Finalizing),
        (P::Finalizing, E::ExecutionStopped) => {
            let (next, a) = after_stop(ws, gone);
            go(next, &[a])
        }
        (P::Finalizing, E::CleanupFinished(_) | E::EndpointAcknowledged | E::Published) => {
            unexpected(P::Finalizing)
        }

        (P::Cleaning, E::Candidate(_)) => dup(P::Cleaning),
        (P::Cleaning, E::WorkspaceOpening | E::ExecutionStopped) => stay(P::Cleaning),
        (P::Cleaning, E::CleanupFinished(_)) if gone => {
            go(P::Acknowledged(Delivery::CallerGone), &[A::Publish])
        }
        (P::Cleaning, E::CleanupFinished(_)) => go(P::Writing, &[A::Write]),
        (P::Cleaning, E::EndpointAcknowledged | E::Published) => unexpected(P::Cleaning),

        (P::Writing, E::Candidate(Candidate::CallerDisconnect)) => Expect {
            duplicate: true,
            ..go(P::Acknowledged(Delivery::CallerGone), &[A::Publish])
        },
        (P::Writing, E::Candidate(Candidate::TerminalWriteFailed)) => Expect {
            duplicate: true,
            ..go(P::Acknowledged(Delivery::WriteFailed), &[A::Publish])
        },
        (P::Writing, E::Candidate(_)) => dup(P::Writing),
        (P::Writing, E::WorkspaceOpening | E::ExecutionStopped) => stay(P::Writing),
        (P::Writing, E::CleanupFinished(_) | E::Published) => unexpected(P::Writing),
        (P::Writing, E::EndpointAcknowledged) => {
            go(P::Acknowledged(Delivery::Acknowledged), &[A::Publish])
        }

        (P::Acknowledged(d), E::Candidate(_)) => dup(P::Acknowledged(d)),
        (P::Acknowledged(d), E::WorkspaceOpening | E::ExecutionStopped) => stay(P::Acknowledged(d)),
        (P::Acknowledged(d), E::CleanupFinished(_) | E::EndpointAcknowledged) => {
            unexpected(P::Acknowledged(d))
        }
        (P::Acknowledged(d), E::Published) => go(P::Completed(d), &[]),

        (P::Completed(d), E::Candidate(_)) => dup(P::Completed(d)),
        (P::Completed(d), E::WorkspaceOpening | E::ExecutionStopped) => stay(P::Completed(d)),
        (P::Completed(d), E::CleanupFinished(_) | E::EndpointAcknowledged | E::Published) => {
            unexpected(P::Completed(d))
        }
    }
}

fn action_kind(a: &Action) -> A {
    match a {
        Action::CancelProcesses => A::Cancel,
        Action::StartCleanup => A::Cleanup,
        Action::WriteTerminal(_) => A::Write,
        Action::Publish(_) => A::Publish,
    }
}

/// Every state reachable from `State::new` with [`EVENTS`], keeping the
/// duplicate and unexpected counters at most 1 so the set is finite (higher
/// counts behave the same: they only ever saturate upwards).
fn reachable(t0: Instant) -> Vec<State> {
    let start = State::new(t0);
    let mut seen = HashSet::from([start]);
    let mut queue = VecDeque::from([start]);
    let mut out = Vec::new();
    while let Some(s) = queue.pop_front() {
        out.push(s);
        for e in EVENTS {
            let next = step(&s, e, t0).next;
            if next.duplicates().total() <= 1 && next.unexpected() <= 1 && seen.insert(next) {
                queue.push_back(next);
            }
        }
    }
    out
}

#[test]
fn every_reachable_state_times_every_event_matches_the_table() {
    let t0 = Instant::now();
    let now = t0 + Duration::from_secs(7);
    let states = reachable(t0);
    // Pinned (see REACHABLE_STATES): a change means the machine's reachable
    // shape changed; update docs/state-machines.md too.
    assert_eq!(
        states.len(),
        REACHABLE_STATES,
        "reachable representative states"
    );

    let mut pairs = BTreeSet::new();
    let mut fine = BTreeSet::new();
    for s in &states {
        for e in EVENTS {
            let want = expected(s, e);
            let tr = step(s, e, now);
            let n = tr.next;
            let got = Expect {
                phase: kind(n.phase()),
                actions: tr.actions.iter().map(action_kind).collect(),
                duplicate: n.duplicates().total() == s.duplicates().total() + 1,
                unexpected: n.unexpected() == s.unexpected() + 1,
            };
            assert_eq!(got, want, "state {s:?}\nevent {e:?}");
            pairs.insert((coarse(kind(s.phase())), e));
            fine.insert((kind(s.phase()), e, s.workspace_announced(), s.caller_gone()));

            // Counters move only as the table says.
            if !want.duplicate {
                assert_eq!(n.duplicates(), s.duplicates());
            }
            if !want.unexpected {
                assert_eq!(n.unexpected(), s.unexpected());
            }
            // The primary outcome: fixed by the first candidate, then never changes.
            match (s.primary(), e) {
                (Some(p), _) => assert_eq!(n.primary(), Some(p)),
                (None, Event::Candidate(c)) => {
                    assert_eq!(n.primary(), Some(c));
                    assert_eq!(n.timeline().decided_at, Some(now));
                }
                (None, _) => assert_eq!(n.primary(), None),
            }
            // A result, once there, never changes; a new one is the merge of
            // the primary and what cleanup did.
            match (s.result(), n.result()) {
                (Some(a), b) => assert_eq!(Some(a), b),
                (None, Some(r)) => {
                    let cleanup = match e {
                        Event::CleanupFinished(c) => c.into(),
                        _ => CleanupReport::NotNeeded,
                    };
                    assert!(!n.workspace_announced() || matches!(e, Event::CleanupFinished(_)));
                    assert_eq!(r, FinalResult::merge(n.primary().unwrap(), cleanup));
                }
                (None, None) => {}
            }
            // Written and published payloads are the state's result.
            for a in &tr.actions {
                match a {
                    Action::WriteTerminal(r) | Action::Publish(r) => {
                        assert_eq!(Some(*r), n.result())
                    }
                    Action::CancelProcesses | Action::StartCleanup => {}
                }
                if matches!(a, Action::WriteTerminal(_)) {
                    assert!(!n.caller_gone(), "never write to a caller that is gone");
                }
            }
            // Completion is stamped once.
            match (s.is_completed(), n.is_completed()) {
                (false, true) => assert_eq!(n.timeline().completed_at, Some(now)),
                _ => assert_eq!(n.timeline().completed_at, s.timeline().completed_at),
            }
            // Disconnect is remembered; an announcement is accepted while
            // open or finalizing and refused (flagged) afterwards.
            assert_eq!(
                n.caller_gone(),
                s.caller_gone() || e == Event::Candidate(Candidate::CallerDisconnect)
            );
            let accepted = matches!(kind(s.phase()), P::Open | P::Finalizing);
            assert_eq!(accepts_workspace(s), accepted);
            let announced = e == Event::WorkspaceOpening;
            assert_eq!(
                n.open_refused(),
                s.open_refused() || (announced && !accepted)
            );
            assert_eq!(
                n.workspace_announced(),
                s.workspace_announced() || (announced && accepted)
            );
            // Once announced, no path ends without the cleanup: a result
            // never says "not needed".
            if let (true, Some(r)) = (n.workspace_announced(), n.result()) {
                assert_ne!(r.cleanup(), CleanupReport::NotNeeded, "{s:?} {e:?}");
            }
        }
    }
    // Every phase met every event, and the branching facts (workspace opened,
    // caller gone) were met in both values where they matter.
    assert_eq!(pairs.len(), 6 * EVENTS.len(), "phase × event coverage");
    for p in [P::Open, P::Finalizing] {
        for ws in [false, true] {
            for gone in [false, true] {
                if p == P::Open && gone {
                    continue; // a disconnect always leaves Open
                }
                for e in EVENTS {
                    assert!(
                        fine.contains(&(p, e, ws, gone)),
                        "{p:?} ws={ws} gone={gone} {e:?}"
                    );
                }
            }
        }
    }
    for gone in [false, true] {
        assert!(fine.contains(&(
            P::Cleaning,
            Event::CleanupFinished(CleanupVerdict::Cleaned),
            true,
            gone
        )));
    }
    for d in [
        Delivery::Acknowledged,
        Delivery::WriteFailed,
        Delivery::CallerGone,
    ] {
        assert!(states.iter().any(|s| kind(s.phase()) == P::Completed(d)));
    }
}

/// Reachable representative states (counters capped at 1).
///
/// 1948 = 2 × 974: the `unexpected` counter (0 or 1) doubles every state.
/// The 974 split by phase: Open 2 (workspace announced or not), Finalizing
/// 84, Cleaning 84, Writing 180, Acknowledged 312, Completed 312
/// (publication maps each Acknowledged state to exactly one Completed
/// state). From Cleaning on, every state comes in two: with and without the
/// `open_refused` flag (an announcement after the cleanup was decided), so
/// Cleaning is 2 × 42, Writing 2 × 90, Acknowledged and Completed 2 × 156.
/// Within a phase a state is the primary candidate (6) × workspace announced
/// (2) × caller gone (2) × cleanup result (not needed / ok / failed) ×
/// delivery (3) × which kind of duplicate was recorded, if any (7), minus
/// the combinations the machine cannot reach (e.g. cleaning without a
/// workspace, a result without a cleanup, a write to a caller that is gone).
/// Before the announcement was an intent (`WorkspaceOpened` accepted in
/// Cleaning and flagged only without a workspace) the count was 1232; it
/// was 1852 (Finalizing 40, Writing 176) while a success or an executor
/// error skipped `Finalizing`: now every candidate waits there for the
/// processes' stop (`ExecutionStopped`), with its duplicates.
const REACHABLE_STATES: usize = 1948;

#[test]
fn merge_table() {
    use CleanupReport as R;
    use RequestStatus as S;
    let cf = R::Failed { code: CLEAN };
    let rows: [(Candidate, CleanupReport, RequestStatus, Option<&str>); 18] = [
        (Candidate::Success, R::NotNeeded, S::Succeeded, None),
        (Candidate::Success, R::Cleaned, S::Succeeded, None),
        (Candidate::Success, cf, S::Failed, Some("cleanup_failed")),
        (
            Candidate::ExecutorError { code: EXEC },
            R::NotNeeded,
            S::Failed,
            Some("executor_crashed"),
        ),
        (
            Candidate::ExecutorError { code: EXEC },
            R::Cleaned,
            S::Failed,
            Some("executor_crashed"),
        ),
        (
            Candidate::ExecutorError { code: EXEC },
            cf,
            S::Failed,
            Some("executor_crashed"),
        ),
        (
            Candidate::Timeout,
            R::NotNeeded,
            S::TimedOut,
            Some("request_timeout"),
        ),
        (
            Candidate::Timeout,
            R::Cleaned,
            S::TimedOut,
            Some("request_timeout"),
        ),
        (Candidate::Timeout, cf, S::TimedOut, Some("request_timeout")),
        (
            Candidate::CallerCancel,
            R::NotNeeded,
            S::Cancelled,
            Some("caller_cancelled"),
        ),
        (
            Candidate::CallerCancel,
            R::Cleaned,
            S::Cancelled,
            Some("caller_cancelled"),
        ),
        (
            Candidate::CallerCancel,
            cf,
            S::Cancelled,
            Some("caller_cancelled"),
        ),
        (
            Candidate::CallerDisconnect,
            R::NotNeeded,
            S::Cancelled,
            Some("caller_disconnected"),
        ),
        (
            Candidate::CallerDisconnect,
            R::Cleaned,
            S::Cancelled,
            Some("caller_disconnected"),
        ),
        (
            Candidate::CallerDisconnect,
            cf,
            S::Cancelled,
            Some("caller_disconnected"),
        ),
        (
            Candidate::TerminalWriteFailed,
            R::NotNeeded,
            S::Failed,
            Some("terminal_write_failed"),
        ),
        (
            Candidate::TerminalWriteFailed,
            R::Cleaned,
            S::Failed,
            Some("terminal_write_failed"),
        ),
        (
            Candidate::TerminalWriteFailed,
            cf,
            S::Failed,
            Some("terminal_write_failed"),
        ),
    ];
    for (primary, cleanup, status, code) in rows {
        let r = FinalResult::merge(primary, cleanup);
        assert_eq!(r.status(), status, "{primary:?} {cleanup:?}");
        assert_eq!(
            r.error_code().as_ref().map(SafeCode::as_str),
            code,
            "{primary:?} {cleanup:?}"
        );
        // The cleanup evidence always travels, whatever the category.
        assert_eq!(r.cleanup(), cleanup);
        assert_eq!(r.primary(), primary);
    }
}

#[test]
fn final_result_serializes_to_the_documented_json() {
    let r = FinalResult::merge(Candidate::Success, CleanupReport::Failed { code: CLEAN });
    assert_eq!(
        serde_json::to_string(&r).unwrap(),
        r#"{"status":"failed","primary":{"kind":"success"},"cleanup":{"status":"failed","code":"symlink_in_job"},"error_code":"cleanup_failed"}"#
    );
    let r = FinalResult::merge(Candidate::Success, CleanupReport::NotNeeded);
    assert_eq!(
        serde_json::to_string(&r).unwrap(),
        r#"{"status":"succeeded","primary":{"kind":"success"},"cleanup":{"status":"not_needed"}}"#
    );
    let r = FinalResult::merge(
        Candidate::ExecutorError { code: EXEC },
        CleanupReport::Cleaned,
    );
    assert_eq!(
        serde_json::to_string(&r).unwrap(),
        r#"{"status":"failed","primary":{"kind":"executor_error","code":"executor_crashed"},"cleanup":{"status":"cleaned"},"error_code":"executor_crashed"}"#
    );
}

/// Drives `events` from a fresh state, returning the final state and every
/// action in order.
fn run(events: &[Event]) -> (State, Vec<Action>) {
    let t = Instant::now();
    let mut s = State::new(t);
    let mut all = Vec::new();
    for &e in events {
        let tr = step(&s, e, t);
        s = tr.next;
        all.extend(tr.actions);
    }
    (s, all)
}

#[test]
fn disconnect_cancels_and_cleans_but_writes_nothing() {
    let (s, actions) = run(&[
        Event::WorkspaceOpening,
        Event::Candidate(Candidate::CallerDisconnect),
        Event::ExecutionStopped,
        Event::CleanupFinished(CleanupVerdict::Cleaned),
        Event::Published,
    ]);
    let r = FinalResult::merge(Candidate::CallerDisconnect, CleanupReport::Cleaned);
    assert_eq!(
        actions,
        [
            Action::CancelProcesses,
            Action::StartCleanup,
            Action::Publish(r)
        ]
    );
    assert_eq!(
        s.phase(),
        Phase::Completed {
            result: r,
            delivery: Delivery::CallerGone
        }
    );
}

#[test]
fn workspace_announced_while_finalizing_is_still_cleaned() {
    // The race the Finalizing phase exists for: the executor announces the
    // workspace after the timeout fired but before it stopped.
    let (s, actions) = run(&[
        Event::Candidate(Candidate::Timeout),
        Event::WorkspaceOpening,
        Event::ExecutionStopped,
    ]);
    assert_eq!(actions, [Action::CancelProcesses, Action::StartCleanup]);
    assert!(matches!(
        s.phase(),
        Phase::Cleaning {
            primary: Candidate::Timeout
        }
    ));
}

#[test]
fn an_announcement_before_a_cancel_is_cleaned_whatever_the_stop_order() {
    // The late-open race: the executor announces, a cancel lands before
    // the open's answer, the executor stops (its open answered or lost).
    for events in [
        &[
            Event::WorkspaceOpening,
            Event::Candidate(Candidate::CallerCancel),
            Event::ExecutionStopped,
        ][..],
        &[
            Event::WorkspaceOpening,
            Event::Candidate(Candidate::Timeout),
            Event::Candidate(Candidate::ExecutorError { code: EXEC }),
            Event::ExecutionStopped,
        ],
    ] {
        let (s, actions) = run(events);
        assert_eq!(actions, [Action::CancelProcesses, Action::StartCleanup]);
        assert!(matches!(s.phase(), Phase::Cleaning { .. }));
    }
}

#[test]
fn an_announcement_after_cleanup_was_decided_is_refused_and_changes_nothing_else() {
    let (s, _) = run(&[
        Event::Candidate(Candidate::CallerCancel),
        Event::ExecutionStopped,
    ]);
    assert!(!accepts_workspace(&s));
    let tr = step(&s, Event::WorkspaceOpening, Instant::now());
    assert!(tr.actions.is_empty());
    assert!(tr.next.open_refused());
    assert!(!tr.next.workspace_announced());
    assert_eq!(tr.next.result(), s.result());
    // While the cleanup runs, a second announcement is refused too: the
    // cleanup may already be past the job it would open.
    let (s, _) = run(&[
        Event::WorkspaceOpening,
        Event::Candidate(Candidate::Success),
        Event::ExecutionStopped,
    ]);
    assert!(matches!(s.phase(), Phase::Cleaning { .. }));
    let tr = step(&s, Event::WorkspaceOpening, Instant::now());
    assert!(tr.next.open_refused() && tr.actions.is_empty());
}

#[test]
fn every_duplicate_after_completion_is_recorded_and_changes_nothing() {
    let (done, _) = run(&[
        Event::Candidate(Candidate::Success),
        Event::ExecutionStopped,
        Event::EndpointAcknowledged,
        Event::Published,
    ]);
    let mut s = done;
    for e in EVENTS {
        let tr = step(&s, e, Instant::now());
        assert!(tr.actions.is_empty(), "{e:?}");
        assert_eq!(tr.next.phase(), done.phase());
        s = tr.next;
    }
    for k in CandidateKind::ALL {
        assert_eq!(s.duplicates().count(k), 1, "{k:?}");
    }
    assert_eq!(s.unexpected(), 4);
}

// ---- Tests added from mutation testing (scripts/mutants machine-request) ----

#[test]
fn duplicate_counts_are_per_kind_and_count_every_repeat() {
    let (done, _) = run(&[
        Event::Candidate(Candidate::Success),
        Event::ExecutionStopped,
        Event::EndpointAcknowledged,
        Event::Published,
    ]);
    for k in CandidateKind::ALL {
        assert_eq!(done.duplicates().count(k), 0, "{k:?}");
    }
    let mut s = done;
    for round in 1..=3u32 {
        for e in EVENTS {
            s = step(&s, e, Instant::now()).next;
        }
        for k in CandidateKind::ALL {
            assert_eq!(s.duplicates().count(k), round, "{k:?}");
        }
    }
    assert_eq!(s.duplicates().total(), 3 * CandidateKind::ALL.len() as u64);
}
