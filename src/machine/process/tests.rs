//! Exhaustive tables over every named state × every event, plus randomized
//! sequences checked against the invariants after every step.

use super::*;
use proptest::prelude::*;

const LIMITS: ProcessLimits = ProcessLimits {
    timeout: Duration::from_secs(10),
    grace: Duration::from_secs(2),
    drain: Duration::from_secs(1),
    hard_margin: Duration::from_secs(3),
};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Drives `events` (each at its own second) from a fresh machine.
fn reach(tier: Tier, events: &[(u64, Event)]) -> State<Duration> {
    let mut s = start(tier, LIMITS, secs(0)).next;
    for &(t, e) in events {
        s = step(&s, e, secs(t)).next;
    }
    s
}

fn render(actions: &[Action<Duration>]) -> String {
    let words: Vec<String> = actions
        .iter()
        .map(|a| match a {
            Action::SignalGroup(Signal::Term) => "TERM".to_owned(),
            Action::SignalGroup(Signal::Kill) => "KILL".to_owned(),
            Action::SignalGroup(Signal::Int) => "INT".to_owned(),
            Action::ArmTimer { timer, at } => {
                format!("arm:{timer:?}@{}", at.as_secs()).to_lowercase()
            }
            Action::CloseStreams => "close".to_owned(),
            Action::ProbeGroup => "probe".to_owned(),
            Action::Reap => "reap".to_owned(),
            Action::Settle(s) => {
                let status = serde_json::to_value(s.status()).unwrap();
                let verdict = match s.descendants {
                    DescendantVerdict::Terminated => "terminated",
                    DescendantVerdict::UnconfirmedOrEscaped => "unconfirmed",
                    DescendantVerdict::Unsupported => "unsupported",
                };
                format!("settle:{}:{verdict}", status.as_str().unwrap())
            }
        })
        .collect();
    words.join(" ")
}

const EXIT0: Event = Event::RootExited(ExitStatus::Code(0));
const OUT: Event = Event::StreamClosed(Stream::Stdout);
const ERR: Event = Event::StreamClosed(Stream::Stderr);

/// Every event, in the column order of the tables.
const EVENTS: [Event; 11] = [
    EXIT0,
    OUT,
    ERR,
    Event::DeadlineReached,
    Event::GraceElapsed,
    Event::DrainBoundReached,
    Event::HardDeadlineReached,
    Event::Cancel,
    Event::GroupProbed(Probe::Empty),
    Event::GroupProbed(Probe::Occupied),
    Event::GroupProbed(Probe::Unknown),
];

type Row = (Phase, &'static str);

const LADDER: &str = "TERM arm:grace@22 arm:hard@25";

/// Checks one named state against its row of 11 expectations, every event
/// applied at t = 20 s.
fn check_row(name: &str, s: &State<Duration>, row: [Row; 11]) {
    for (event, (phase, actions)) in EVENTS.iter().zip(row) {
        let t = step(s, *event, secs(20));
        assert_eq!(
            (t.next.phase, render(&t.actions).as_str()),
            (phase, actions),
            "state {name} × {event:?}"
        );
    }
}

#[allow(clippy::vec_init_then_push)] // one named state per push reads best
fn pinned_states() -> Vec<(&'static str, State<Duration>, [Row; 11])> {
    use Phase::*;
    let nothing = |p: Phase| -> [Row; 11] { [(p, ""); 11] };
    let mut v = Vec::new();

    v.push((
        "running",
        reach(Tier::PinnedGroup, &[]),
        [
            (Draining, "arm:drain@21"),
            (Running, ""),
            (Running, ""),
            (Term, LADDER),
            (Running, ""),
            (Running, ""),
            (Running, ""),
            (Term, LADDER),
            (Running, ""),
            (Running, ""),
            (Running, ""),
        ],
    ));
    v.push((
        "draining",
        reach(Tier::PinnedGroup, &[(1, EXIT0)]),
        [
            (Draining, ""),
            (Draining, ""),
            (Draining, ""),
            (Term, LADDER),
            (Draining, ""),
            (Term, LADDER),
            (Draining, ""),
            (Term, LADDER),
            (Draining, ""),
            (Draining, ""),
            (Draining, ""),
        ],
    ));
    v.push((
        "draining, last stream closes",
        reach(Tier::PinnedGroup, &[(1, EXIT0), (1, ERR)]),
        [
            (Draining, ""),
            (Draining, "probe"),
            (Draining, ""),
            (Term, LADDER),
            (Draining, ""),
            (Term, LADDER),
            (Draining, ""),
            (Term, LADDER),
            (Draining, ""),
            (Draining, ""),
            (Draining, ""),
        ],
    ));
    v.push((
        "probing after a clean exit",
        reach(Tier::PinnedGroup, &[(1, EXIT0), (1, OUT), (1, ERR)]),
        [
            (Draining, ""),
            (Draining, ""),
            (Draining, ""),
            (Draining, ""),
            (Draining, ""),
            (Draining, ""),
            (Draining, ""),
            (Draining, ""),
            (Settled, "reap settle:exited:terminated"),
            (Term, "TERM arm:grace@22 arm:hard@25 probe"),
            (Settled, "reap settle:exited:unconfirmed"),
        ],
    ));
    v.push((
        "term, root alive",
        reach(Tier::PinnedGroup, &[(10, Event::DeadlineReached)]),
        [
            (Term, "arm:drain@21"),
            (Term, ""),
            (Term, ""),
            (Term, ""),
            (Kill, "KILL"),
            (Term, ""),
            (Settled, "close reap settle:timed_out:unconfirmed"),
            (Term, ""),
            (Term, ""),
            (Term, ""),
            (Term, ""),
        ],
    ));
    v.push((
        "term, root exited, group occupied",
        reach(
            Tier::PinnedGroup,
            &[
                (10, Event::DeadlineReached),
                (11, EXIT0),
                (11, OUT),
                (11, ERR),
                (11, Event::GroupProbed(Probe::Occupied)),
            ],
        ),
        [
            (Term, ""),
            (Term, ""),
            (Term, ""),
            (Term, ""),
            (Kill, "KILL probe"),
            (Term, ""),
            (Settled, "reap settle:timed_out:unconfirmed"),
            (Term, ""),
            (Term, ""),
            (Term, ""),
            (Term, ""),
        ],
    ));
    v.push((
        "term, root exited, stdout held past the drain bound",
        reach(
            Tier::PinnedGroup,
            &[
                (10, Event::DeadlineReached),
                (11, EXIT0),
                (11, ERR),
                (12, Event::DrainBoundReached),
            ],
        ),
        [
            (Term, ""),
            (Term, "probe"),
            (Term, ""),
            (Term, ""),
            (Kill, "KILL close probe"),
            (Term, ""),
            (Settled, "close reap settle:timed_out:unconfirmed"),
            (Term, ""),
            (Term, ""),
            (Term, ""),
            (Term, ""),
        ],
    ));
    v.push((
        "kill, root alive",
        reach(
            Tier::PinnedGroup,
            &[(10, Event::DeadlineReached), (12, Event::GraceElapsed)],
        ),
        [
            (Kill, "arm:drain@21"),
            (Kill, ""),
            (Kill, ""),
            (Kill, ""),
            (Kill, ""),
            (Kill, ""),
            (Settled, "close reap settle:timed_out:unconfirmed"),
            (Kill, ""),
            (Kill, ""),
            (Kill, ""),
            (Kill, ""),
        ],
    ));
    v.push((
        "kill, root exited, stdout open before the drain bound",
        reach(
            Tier::PinnedGroup,
            &[
                (10, Event::DeadlineReached),
                (12, Event::GraceElapsed),
                (13, Event::RootExited(ExitStatus::Signal(9))),
                (13, ERR),
            ],
        ),
        [
            (Kill, ""),
            (Kill, "probe"),
            (Kill, ""),
            (Kill, ""),
            (Kill, ""),
            (Kill, "close probe"),
            (Settled, "close reap settle:timed_out:unconfirmed"),
            (Kill, ""),
            (Kill, ""),
            (Kill, ""),
            (Kill, ""),
        ],
    ));
    v.push((
        "kill, probing",
        reach(
            Tier::PinnedGroup,
            &[
                (10, Event::Cancel),
                (12, Event::GraceElapsed),
                (13, Event::RootExited(ExitStatus::Signal(9))),
                (13, OUT),
                (13, ERR),
            ],
        ),
        [
            (Kill, ""),
            (Kill, ""),
            (Kill, ""),
            (Kill, ""),
            (Kill, ""),
            (Kill, ""),
            (Settled, "reap settle:cancelled:unconfirmed"),
            (Kill, ""),
            (Settled, "reap settle:cancelled:terminated"),
            (Settled, "reap settle:cancelled:unconfirmed"),
            (Settled, "reap settle:cancelled:unconfirmed"),
        ],
    ));
    v.push((
        "settled",
        reach(
            Tier::PinnedGroup,
            &[
                (1, EXIT0),
                (1, OUT),
                (1, ERR),
                (1, Event::GroupProbed(Probe::Empty)),
            ],
        ),
        nothing(Settled),
    ));
    v
}

#[test]
fn pinned_tier_every_state_times_every_event() {
    let states = pinned_states();
    // Every phase is covered by at least one named state.
    for p in [
        Phase::Running,
        Phase::Draining,
        Phase::Term,
        Phase::Kill,
        Phase::Settled,
    ] {
        assert!(states.iter().any(|(_, s, _)| s.phase == p), "{p:?}");
    }
    for (name, s, row) in states {
        check_row(name, &s, row);
    }
}

#[test]
fn unpinned_tier_never_signals_a_group_whose_root_exited() {
    use Phase::*;
    let g = Tier::Group;
    check_row(
        "group: running",
        &reach(g, &[]),
        [
            (Draining, "arm:drain@21"),
            (Running, ""),
            (Running, ""),
            (Term, LADDER),
            (Running, ""),
            (Running, ""),
            (Running, ""),
            (Term, LADDER),
            (Running, ""),
            (Running, ""),
            (Running, ""),
        ],
    );
    // The root exited: the group id may be reused, so a deadline, a cancel
    // or the drain bound give up on the streams instead of signalling.
    check_row(
        "group: draining",
        &reach(g, &[(1, EXIT0)]),
        [
            (Draining, ""),
            (Draining, ""),
            (Draining, ""),
            (Settled, "close reap settle:timed_out:unconfirmed"),
            (Draining, ""),
            (Settled, "close reap settle:exited:unconfirmed"),
            (Draining, ""),
            (Settled, "close reap settle:cancelled:unconfirmed"),
            (Draining, ""),
            (Draining, ""),
            (Draining, ""),
        ],
    );
    // Root exited during the grace: no KILL.
    check_row(
        "group: term, root exited",
        &reach(g, &[(10, Event::DeadlineReached), (11, EXIT0)]),
        [
            (Term, ""),
            (Term, ""),
            (Term, ""),
            (Term, ""),
            (Kill, ""),
            (Term, ""),
            (Settled, "close reap settle:timed_out:unconfirmed"),
            (Term, ""),
            (Term, ""),
            (Term, ""),
            (Term, ""),
        ],
    );
    let t = step(&reach(g, &[(1, EXIT0), (1, OUT)]), ERR, secs(2));
    assert_eq!(render(&t.actions), "reap settle:exited:unconfirmed");
}

#[test]
fn direct_child_tier_reports_unsupported() {
    let s = reach(Tier::DirectChild, &[(1, EXIT0), (1, OUT)]);
    let t = step(&s, ERR, secs(2));
    assert_eq!(render(&t.actions), "reap settle:exited:unsupported");
    let s = reach(Tier::DirectChild, &[]);
    assert_eq!(render(&step(&s, Event::Cancel, secs(20)).actions), LADDER);
}

#[test]
fn start_arms_the_deadline_only() {
    let t = start(Tier::PinnedGroup, LIMITS, secs(5));
    assert_eq!(render(&t.actions), "arm:deadline@15");
    assert_eq!(t.next.phase, Phase::Running);
}

#[test]
fn a_held_pipe_after_a_clean_exit_climbs_the_ladder_and_stays_unconfirmed() {
    // `sh -c 'sleep 30 &'`: root exits, sleep holds stdout.
    let s = reach(Tier::PinnedGroup, &[(1, EXIT0), (1, ERR)]);
    let t = step(&s, Event::DrainBoundReached, secs(2));
    assert_eq!(render(&t.actions), "TERM arm:grace@4 arm:hard@7");
    assert_eq!(t.next.stdout.end, StreamEnd::HeldOpen);
    // TERM kills sleep, the pipe closes, the group is empty: still not
    // `terminated`, because a descendant held stdio.
    let t = step(&t.next, OUT, secs(2));
    assert_eq!(render(&t.actions), "probe");
    let t = step(&t.next, Event::GroupProbed(Probe::Empty), secs(2));
    assert_eq!(render(&t.actions), "reap settle:exited:unconfirmed");
    match &t.actions[1] {
        Action::Settle(s) => {
            assert_eq!(s.cause, Some(Cause::HeldStdio));
            assert_eq!(s.stdout, StreamEnd::HeldOpen);
            assert_eq!(s.stderr, StreamEnd::Closed);
            assert_eq!(s.timings.term_sent, Some(secs(2)));
            assert_eq!(s.timings.settled, Some(secs(2)));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_root_that_leaves_a_silent_group_member_gets_it_stopped() {
    let s = reach(Tier::PinnedGroup, &[(1, EXIT0), (1, OUT), (1, ERR)]);
    let t = step(&s, Event::GroupProbed(Probe::Occupied), secs(1));
    // Root exited and streams done: probe again at once (the driver's probe
    // waits briefly for the group to empty), not only after the grace.
    assert_eq!(render(&t.actions), "TERM arm:grace@3 arm:hard@6 probe");
    assert_eq!(t.next.cause, Some(Cause::Leftover));
    let t = step(&t.next, Event::GroupProbed(Probe::Empty), secs(1));
    assert_eq!(render(&t.actions), "reap settle:exited:terminated");
}

// ---- the cgroup tier ----

/// The cgroup tier takes every step the pinned tier takes (the same ladder,
/// probes, timers and closes); only the verdict differs: an empty cgroup is
/// `terminated` whatever the streams went through.
#[test]
fn cgroup_tier_steps_like_the_pinned_tier_with_its_own_verdict() {
    for (name, pinned, row) in pinned_states() {
        let cg = State {
            tier: Tier::Cgroup,
            ..pinned
        };
        for (event, (phase, actions)) in EVENTS.iter().zip(row) {
            let t = step(&cg, *event, secs(20));
            let expected = if t.next.probed_empty {
                actions.replace(":unconfirmed", ":terminated")
            } else {
                actions.to_owned()
            };
            assert_eq!(
                (t.next.phase, render(&t.actions)),
                (phase, expected),
                "cgroup state {name} × {event:?}"
            );
        }
    }
}

#[test]
fn cgroup_tier_a_held_pipe_then_an_empty_cgroup_is_terminated() {
    // `sh -c 'setsid sleep 30 &'`: the escapee holds stdout; the drain bound
    // starts the ladder, KILL (cgroup.kill) ends it, the cgroup is empty.
    let s = reach(Tier::Cgroup, &[(1, EXIT0), (1, ERR)]);
    let t = step(&s, Event::DrainBoundReached, secs(2));
    assert_eq!(render(&t.actions), "TERM arm:grace@4 arm:hard@7");
    let t = step(&t.next, Event::GraceElapsed, secs(4));
    // The holder is killed with the cgroup; the held pipe is closed.
    assert_eq!(render(&t.actions), "KILL close probe");
    let t = step(&t.next, Event::GroupProbed(Probe::Empty), secs(4));
    assert_eq!(render(&t.actions), "reap settle:exited:terminated");
    match &t.actions[1] {
        Action::Settle(s) => {
            assert_eq!(s.tier, Tier::Cgroup);
            // The stream states stay in the evidence.
            assert_eq!(s.stdout, StreamEnd::HeldOpen);
            assert_eq!(s.cause, Some(Cause::HeldStdio));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn cgroup_tier_a_silent_escapee_is_killed_and_the_verdict_waits_for_empty() {
    let s = reach(Tier::Cgroup, &[(1, EXIT0), (1, OUT), (1, ERR)]);
    let t = step(&s, Event::GroupProbed(Probe::Occupied), secs(1));
    assert_eq!(render(&t.actions), "TERM arm:grace@3 arm:hard@6 probe");
    // TERM went to the process group; the escapee is not in it.
    let t = step(&t.next, Event::GroupProbed(Probe::Occupied), secs(1));
    assert_eq!(render(&t.actions), "");
    let t = step(&t.next, Event::GraceElapsed, secs(3));
    assert_eq!(render(&t.actions), "KILL probe");
    let occupied = step(&t.next, Event::GroupProbed(Probe::Occupied), secs(3));
    assert_eq!(render(&occupied.actions), "reap settle:exited:unconfirmed");
    let unknown = step(&t.next, Event::GroupProbed(Probe::Unknown), secs(3));
    assert_eq!(render(&unknown.actions), "reap settle:exited:unconfirmed");
    let empty = step(&t.next, Event::GroupProbed(Probe::Empty), secs(3));
    assert_eq!(render(&empty.actions), "reap settle:exited:terminated");
}

#[test]
fn cgroup_tier_without_an_observed_empty_cgroup_is_never_terminated() {
    // The hard deadline cuts the streams and settles without a probe.
    let s = reach(
        Tier::Cgroup,
        &[(10, Event::DeadlineReached), (12, Event::GraceElapsed)],
    );
    let t = step(&s, Event::HardDeadlineReached, secs(15));
    assert_eq!(
        render(&t.actions),
        "close reap settle:timed_out:unconfirmed"
    );
}

/// A cancel or deadline that arrives while a probe is outstanding is not
/// lost: the probe still decides what to stop, and the evidence keeps the
/// cause (regression: the probe-pending early return dropped it, so the
/// run was reported `exited`).
#[test]
fn a_cancel_or_deadline_during_a_probe_keeps_its_cause() {
    for (event, cause, status) in [
        (Event::Cancel, Cause::Cancel, "cancelled"),
        (Event::DeadlineReached, Cause::Timeout, "timed_out"),
    ] {
        let probing = reach(Tier::PinnedGroup, &[(1, EXIT0), (1, OUT), (1, ERR)]);
        assert_eq!(probing.probe, ProbeState::Pending);
        let t = step(&probing, event, secs(2));
        assert_eq!(render(&t.actions), "", "the probe decides, nothing sent");
        assert_eq!(t.next.cause, Some(cause));
        let waiting = t.next;

        // Empty: settles with the cause, no signal was needed.
        let t = step(&waiting, Event::GroupProbed(Probe::Empty), secs(2));
        assert_eq!(
            render(&t.actions),
            format!("reap settle:{status}:terminated")
        );

        // Unknown: the same, unconfirmed.
        let t = step(&waiting, Event::GroupProbed(Probe::Unknown), secs(2));
        assert_eq!(
            render(&t.actions),
            format!("reap settle:{status}:unconfirmed")
        );

        // Occupied: the ladder runs under the recorded cause, not
        // `leftover`; a second cause does not replace it.
        let t = step(&waiting, Event::GroupProbed(Probe::Occupied), secs(2));
        assert_eq!(render(&t.actions), "TERM arm:grace@4 arm:hard@7 probe");
        assert_eq!(t.next.cause, Some(cause));
        let other = if cause == Cause::Cancel {
            Event::DeadlineReached
        } else {
            Event::Cancel
        };
        let t = step(&t.next, other, secs(3));
        assert_eq!(t.next.cause, Some(cause));
    }
}

// ---- randomized sequences against the invariants ----

fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        Just(EXIT0),
        Just(Event::RootExited(ExitStatus::Signal(15))),
        Just(OUT),
        Just(ERR),
        Just(Event::DeadlineReached),
        Just(Event::GraceElapsed),
        Just(Event::DrainBoundReached),
        Just(Event::HardDeadlineReached),
        Just(Event::Cancel),
        Just(Event::Interrupt),
        Just(Event::GroupProbed(Probe::Empty)),
        Just(Event::GroupProbed(Probe::Occupied)),
        Just(Event::GroupProbed(Probe::Unknown)),
    ]
}

fn arb_tier() -> impl Strategy<Value = Tier> {
    prop_oneof![
        Just(Tier::PinnedGroup),
        Just(Tier::Group),
        Just(Tier::DirectChild),
        Just(Tier::Cgroup)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn invariants_hold_for_any_event_sequence(
        tier in arb_tier(),
        events in proptest::collection::vec(arb_event(), 0..24),
    ) {
        let mut s = start(tier, LIMITS, secs(0)).next;
        let mut settles = 0;
        let mut reaps = 0;
        let mut term_sent = false;
        let mut grace_seen_in_term = false;
        let mut last_probe = None;
        let mut held_or_cut = false;
        for (i, e) in events.into_iter().enumerate() {
            let before = s;
            let t = step(&s, e, secs(i as u64));
            if before.phase == Phase::Settled {
                prop_assert!(t.actions.is_empty(), "settled machines emit nothing");
                prop_assert_eq!(t.next, before);
            }
            if before.phase == Phase::Term && e == Event::GraceElapsed {
                grace_seen_in_term = true;
            }
            if let Event::GroupProbed(p) = e {
                if before.probe == ProbeState::Pending {
                    last_probe = Some(p);
                }
            }
            for a in &t.actions {
                match a {
                    Action::SignalGroup(sig) => {
                        prop_assert!(settles == 0, "signal after settle");
                        if !matches!(tier, Tier::PinnedGroup | Tier::Cgroup) {
                            prop_assert!(before.root.is_none(), "unpinned signal after exit");
                        }
                        match sig {
                            Signal::Term => {
                                prop_assert!(!term_sent, "TERM twice");
                                term_sent = true;
                            }
                            Signal::Kill => {
                                prop_assert!(term_sent && grace_seen_in_term, "KILL before TERM+grace");
                            }
                            Signal::Int => {
                                prop_assert_eq!(e, Event::Interrupt);
                                prop_assert!(!term_sent, "INT during the ladder");
                                prop_assert_eq!(t.next, before, "an interrupt changes no state");
                            }
                        }
                    }
                    Action::Reap => {
                        reaps += 1;
                        prop_assert_eq!(settles, 0, "reap after settle");
                    }
                    Action::Settle(sum) => {
                        settles += 1;
                        prop_assert_eq!(reaps, 1, "exactly one reap precedes settle");
                        held_or_cut |= sum.stdout != StreamEnd::Closed || sum.stderr != StreamEnd::Closed;
                        if sum.descendants == DescendantVerdict::Terminated {
                            prop_assert!(matches!(tier, Tier::PinnedGroup | Tier::Cgroup));
                            prop_assert_eq!(last_probe, Some(Probe::Empty));
                            if tier == Tier::PinnedGroup {
                                prop_assert!(!held_or_cut);
                            }
                        }
                        // The cgroup tier says terminated whenever the
                        // cgroup was seen empty, held pipes or not.
                        if tier == Tier::Cgroup && last_probe == Some(Probe::Empty) {
                            prop_assert_eq!(sum.descendants, DescendantVerdict::Terminated);
                        }
                        if tier == Tier::DirectChild {
                            prop_assert_eq!(sum.descendants, DescendantVerdict::Unsupported);
                        }
                        prop_assert_eq!(t.next.phase, Phase::Settled);
                    }
                    Action::ArmTimer { .. } | Action::CloseStreams | Action::ProbeGroup => {
                        prop_assert!(settles == 0);
                    }
                }
            }
            prop_assert!(settles <= 1, "settled twice");
            s = t.next;
        }
    }
}

#[test]
fn abandon_kills_only_when_safe_cuts_and_settles_once() {
    let t = secs(4);
    // Running, every tier: the root is alive, so KILL is safe everywhere.
    for tier in [Tier::PinnedGroup, Tier::Group, Tier::DirectChild] {
        let tr = abandon(&reach(tier, &[]), t);
        let verdict = if tier == Tier::DirectChild {
            "unsupported"
        } else {
            "unconfirmed"
        };
        assert_eq!(
            render(&tr.actions),
            format!("KILL close reap settle:cancelled:{verdict}"),
            "{tier:?}"
        );
        assert_eq!(tr.next.phase, Phase::Settled);
        assert_eq!(tr.next.timings.kill_sent, Some(t));
        assert_eq!(tr.next.timings.settled, Some(t));
        let Some(Action::Settle(sum)) = tr.actions.last() else {
            panic!("no settle")
        };
        assert_eq!(sum.stdout, StreamEnd::CutAtDeadline);
        // A settled machine is left alone: no second settle, no signal.
        assert!(abandon(&tr.next, secs(5)).actions.is_empty());
    }
    // The root exited: only the pinned tier may still signal the group.
    let exited = [(1, EXIT0)];
    assert_eq!(
        render(&abandon(&reach(Tier::PinnedGroup, &exited), t).actions),
        "KILL close reap settle:cancelled:unconfirmed"
    );
    assert_eq!(
        render(&abandon(&reach(Tier::Group, &exited), t).actions),
        "close reap settle:cancelled:unconfirmed"
    );
    // A cause of its own is kept: a run abandoned after its timeout timed out.
    let timed_out = reach(Tier::PinnedGroup, &[(10, Event::DeadlineReached)]);
    assert_eq!(
        render(&abandon(&timed_out, secs(11)).actions),
        "KILL close reap settle:timed_out:unconfirmed"
    );
    // KILL already sent by the ladder: not again.
    let killed = reach(
        Tier::PinnedGroup,
        &[(10, Event::DeadlineReached), (12, Event::GraceElapsed)],
    );
    assert_eq!(
        render(&abandon(&killed, secs(13)).actions),
        "close reap settle:timed_out:unconfirmed"
    );
    // Streams already done: nothing to close.
    let done = reach(Tier::Group, &[(1, OUT), (1, ERR)]);
    assert_eq!(
        render(&abandon(&done, t).actions),
        "KILL reap settle:cancelled:unconfirmed"
    );
}

// ---- Tests added from mutation testing (scripts/mutants machine-process) ----

/// A drain bound that fires after both streams closed (its timer is not
/// cancelled) while the group probe is out must neither act nor record a
/// held-stdio cause: the streams were not held.
#[test]
fn a_late_drain_bound_during_a_probe_records_no_held_stdio() {
    for tier in [Tier::PinnedGroup, Tier::Cgroup] {
        let probing = reach(tier, &[(1, EXIT0), (2, OUT), (3, ERR)]);
        assert_eq!(probing.probe, ProbeState::Pending, "{tier:?}");
        let late = step(&probing, Event::DrainBoundReached, secs(4));
        assert_eq!(render(&late.actions), "", "{tier:?}");
        assert_eq!(late.next.cause, None, "{tier:?}");
        let done = step(&late.next, Event::GroupProbed(Probe::Empty), secs(5));
        let Some(Action::Settle(summary)) = done.actions.last() else {
            panic!("{tier:?}: no settle in {:?}", done.actions);
        };
        assert_eq!(summary.cause, None, "{tier:?}");
        assert_eq!(
            summary.descendants,
            DescendantVerdict::Terminated,
            "{tier:?}"
        );
    }
}

/// A timeout or cancel that arrives after the ladder already climbed for
/// the run's own reason (here a pipe held past a signalled root's exit) is
/// what the evidence reports (regression found by the process model's
/// "requested cause reported" property: the run was reported `signaled`).
#[test]
fn a_requested_stop_after_a_held_pipe_ladder_is_reported() {
    for (event, status) in [
        (Event::DeadlineReached, ProcessStatus::TimedOut),
        (Event::Cancel, ProcessStatus::Cancelled),
    ] {
        let held = reach(
            Tier::PinnedGroup,
            &[
                (1, Event::RootExited(ExitStatus::Signal(9))),
                (1, ERR),
                (2, Event::DrainBoundReached),
            ],
        );
        assert_eq!(held.cause, Some(Cause::HeldStdio));
        assert_eq!(held.phase, Phase::Term);
        let t = step(&held, event, secs(3));
        assert_eq!(render(&t.actions), "", "the ladder is already running");
        let t = step(&t.next, Event::GraceElapsed, secs(4));
        let t = step(&t.next, Event::HardDeadlineReached, secs(5));
        let Some(Action::Settle(sum)) = t.actions.last() else {
            panic!("no settle in {:?}", t.actions);
        };
        assert_eq!(sum.status(), status, "{event:?}");
    }
}

/// An interrupt is forwarded to the group only before any stop began and
/// while the group id is the root's, and it changes no state: the process
/// may go on running, and the ladder is untouched.
#[test]
fn an_interrupt_is_forwarded_only_before_a_stop_and_while_the_group_is_the_roots() {
    let exited = Event::RootExited(ExitStatus::Code(0));
    for tier in [
        Tier::DirectChild,
        Tier::Group,
        Tier::PinnedGroup,
        Tier::Cgroup,
    ] {
        let running = reach(tier, &[]);
        let t = step(&running, Event::Interrupt, secs(1));
        assert_eq!(render(&t.actions), "INT", "{tier:?} running");
        assert_eq!(t.next, running, "{tier:?}: an interrupt changes no state");

        // The root exited, a stream still open: only a tier whose root is
        // unreaped still names the group.
        let draining = reach(tier, &[(1, exited)]);
        assert_eq!(draining.phase, Phase::Draining);
        let t = step(&draining, Event::Interrupt, secs(2));
        let safe = matches!(tier, Tier::PinnedGroup | Tier::Cgroup);
        assert_eq!(
            render(&t.actions),
            if safe { "INT" } else { "" },
            "{tier:?} draining"
        );
        assert_eq!(t.next, draining);

        // A stop began: the ladder owns the signals.
        for stopping in [
            reach(tier, &[(1, Event::Cancel)]),
            reach(tier, &[(1, Event::Cancel), (3, Event::GraceElapsed)]),
        ] {
            let t = step(&stopping, Event::Interrupt, secs(4));
            assert_eq!(render(&t.actions), "", "{tier:?} {:?}", stopping.phase);
            assert_eq!(t.next, stopping);
        }

        let settled = reach(
            tier,
            &[
                (1, exited),
                (1, OUT),
                (1, ERR),
                (1, Event::GroupProbed(Probe::Empty)),
            ],
        );
        assert_eq!(settled.phase, Phase::Settled, "{tier:?}");
        let t = step(&settled, Event::Interrupt, secs(2));
        assert!(t.actions.is_empty(), "{tier:?} settled: {:?}", t.actions);
    }
}
