//! The process model: pinned state count, every property holds for the real
//! machine, and every broken variant is caught by the property it breaks.

use custodian_model::check;
use custodian_model::process::{self as model, ProcessStep, Real, broken};

// How the pinned number arises: 3 initial states (one per tier), then the
// environment fires each of 8 one-shot events (root exit, stdout and stderr
// closed, cancel, and the deadline, grace, drain and hard timers once they
// are armed) and answers each probe with empty, occupied or unknown. A state
// is the set of events fired so far, the probes outstanding, the machine
// state they led to and the environment's record (signals sent, settles,
// reaps, the first summary). The machine ignores most events once settled,
// but the environment still tells apart which late events fired, so the
// settled states form a large share of the count. A deadline or cancel that
// arrives while a probe is outstanding records its cause, so those probing
// states are told apart by the cause too (61 more than before that rule).
// 3 685 unique states, of 8 182 generated; longest path 12 (initial state,
// 8 events, 3 probes).
//
// A change in this number means the machine or the model changed shape:
// review it, then update the pin and docs/verification.md.

#[test]
fn unique_state_count_is_pinned_and_every_property_holds() {
    let r = check::process(Real, 2);
    assert_eq!(r.unique, check::PINNED_PROCESS_STATES);
    assert_eq!(r.unique, 3_685);
    assert_eq!(r.depth, 12);
    for v in &r.verdicts {
        assert_eq!(v.holds, Some(true), "{} {}\n{:?}", v.kind, v.name, v.path);
    }
    assert!(r.ok());
}

fn assert_caught<S: ProcessStep>(step: S) {
    let expected = step
        .breaks()
        .expect("a broken variant names the property it breaks");
    let r = check::process(step, 2);
    let v = r.verdict(expected).expect("the property exists");
    assert_eq!(v.holds, Some(false), "{}: not caught", r.name);
    assert!(v.path.is_some());
    assert!(r.ok());
}

#[test]
fn signal_after_settle_is_caught() {
    assert_caught(broken::SignalAfterSettle);
}

#[test]
fn settle_twice_is_caught() {
    assert_caught(broken::SettleTwice);
}

#[test]
fn kill_before_grace_is_caught() {
    assert_caught(broken::KillBeforeGrace);
}

#[test]
fn the_broken_variants_break_what_they_claim() {
    assert_eq!(
        broken::SignalAfterSettle.breaks(),
        Some(model::NO_SIGNAL_AFTER_SETTLE)
    );
    assert_eq!(
        broken::SettleTwice.breaks(),
        Some(model::SETTLES_AT_MOST_ONCE)
    );
    assert_eq!(
        broken::KillBeforeGrace.breaks(),
        Some(model::KILL_ONLY_AFTER_TERM_AND_GRACE)
    );
    assert_eq!(Real.breaks(), None);
}
