//! The request model: pinned state counts, every property holds for the
//! real machine, and every broken variant is caught by the property it
//! breaks.

use custodian_model::check::{self, Report};
use custodian_model::request::{self as model, Real, RequestStep, broken};

fn assert_all_hold(r: &Report) {
    for v in &r.verdicts {
        assert_eq!(
            v.holds,
            Some(true),
            "{}: {} {}\n{:?}",
            r.name,
            v.kind,
            v.name,
            v.path
        );
    }
}

// How the pinned numbers arise (unique states = symmetry classes under
// permutations of the waiters, DFS):
//
// - 0 waiters: 18 244. The environment fires 7 candidates (each once, the
//   duplicate success only after the first), announces the workspace once —
//   while the executor runs, or after it stopped or returned (refused then:
//   the late-open race) — and answers each action once. A state is the set
//   of events fired so far plus the machine state they led to; the machine
//   collapses most orders (only the first candidate, the workspace flag, a
//   disconnect and the phase matter to it), but the environment's record
//   (which candidates fired, which history flags were set) keeps apart
//   orders that reach the same machine state. `check` prints the split: the
//   machine itself reaches 7 570 distinct `request::State` values (phase,
//   primary, flags, per-kind duplicate and unexpected counters), the rest
//   is the environment's record (see
//   `machine_and_environment_are_reported_apart`). Before the
//   "open after stop" action the count was 22 223: the 4 905 new states are
//   refused announcements in every phase from cleaning on. It was 27 128
//   (6 970 machine states) while a success or an executor error skipped
//   finalizing: the machine now holds more states (a success or an error
//   waiting in finalizing, with its duplicates: 7 570), and the
//   environment far fewer, since the stop is always answered in
//   finalizing, before the cleanup, where it used to arrive as an ignored
//   event in any later phase, each arrival a record of its own.
// - Each waiter is Idle, Subscribed(Before | During | After) or
//   Observed(when, result), and the published result is unique per state,
//   so one waiter multiplies the count by the number of local waiter states
//   compatible with the request's progress: ~6× (107 794); a second,
//   interchangeable waiter adds the unordered pairs of those: 390 558
//   (= 3.6× more; without symmetry it would be the ordered pairs). Waiters
//   observe through the real `SettleOnce`, but they never change the
//   machine: they multiply the environment, not the machine's states.
//
// A change in any of these numbers means the machine or the model changed
// shape: review it, then update the pin and docs/verification.md.

/// Pinned unique state counts, by number of waiters.
pub const PINNED: [(usize, usize); 3] = [(0, 18_244), (1, 107_794), (2, 390_558)];

#[test]
fn unique_state_counts_are_pinned_and_every_property_holds() {
    for (waiters, unique) in PINNED {
        let r = check::request(Real, waiters, 2);
        assert_eq!(r.unique, unique, "{waiters} waiters");
        // The longest path: the initial state, 7 candidates, workspace,
        // stop, cleanup, ack, publication, and 2 steps per waiter.
        assert_eq!(r.depth, 1 + 12 + 2 * waiters, "{waiters} waiters");
        if waiters > 0 {
            assert_all_hold(&r);
        } else {
            // Without waiters, only the waiter examples are missing.
            for v in &r.verdicts {
                assert_eq!(
                    v.holds == Some(true),
                    !v.name.starts_with("a waiter"),
                    "{}",
                    v.name
                );
            }
        }
    }
}

#[test]
fn machine_and_environment_are_reported_apart() {
    let (machine, environment) = check::request_state_split();
    assert_eq!(environment, PINNED[0].1, "the walk sees the 0-waiter model");
    assert_eq!(machine, MACHINE_STATES);
    assert!(machine < environment);
}

/// Distinct `request::State` values the real request model reaches (the
/// timeline is constant in the model): the machine's own state space.
pub const MACHINE_STATES: usize = 7_570;

#[test]
fn pins_agree_with_the_check_binary() {
    for (waiters, unique) in PINNED {
        assert_eq!(check::pinned_request_states(waiters), Some(unique));
    }
}

fn assert_caught<S: RequestStep>(step: S) {
    let expected = step
        .breaks()
        .expect("a broken variant names the property it breaks");
    let r = check::request(step, 1, 2);
    let v = r.verdict(expected).expect("the property exists");
    assert_eq!(v.holds, Some(false), "{}: not caught", r.name);
    assert!(v.path.is_some());
    assert!(r.ok());
}

#[test]
fn double_cleanup_is_caught() {
    assert_caught(broken::DoubleCleanup);
}

#[test]
fn complete_before_cleanup_is_caught() {
    assert_caught(broken::CompleteBeforeCleanup);
}

#[test]
fn success_despite_cleanup_failure_is_caught() {
    assert_caught(broken::SuccessDespiteCleanupFailure);
}

#[test]
fn republish_on_duplicate_is_caught() {
    assert_caught(broken::RepublishOnDuplicate);
}

#[test]
fn cleanup_before_stop_is_caught() {
    assert_caught(broken::CleanupBeforeStop);
}

#[test]
fn success_skips_stop_is_caught() {
    assert_caught(broken::SuccessSkipsStop);
}

#[test]
fn accept_late_open_is_caught() {
    assert_caught(broken::AcceptLateOpen);
}

#[test]
fn publish_not_the_result_is_caught() {
    assert_caught(broken::PublishNotTheResult);
}

#[test]
fn the_broken_variants_break_what_they_claim() {
    assert_eq!(
        broken::CleanupBeforeStop.breaks(),
        Some(model::CLEANUP_AFTER_STOP)
    );
    assert_eq!(
        broken::SuccessSkipsStop.breaks(),
        Some(model::PUBLISHED_AFTER_STOP)
    );
    assert_eq!(
        broken::AcceptLateOpen.breaks(),
        Some(model::OPENED_IS_CLEANED)
    );
    assert_eq!(
        broken::PublishNotTheResult.breaks(),
        Some(model::WAITERS_SEE_THE_RESULT)
    );
    assert_eq!(
        broken::DoubleCleanup.breaks(),
        Some(model::AT_MOST_ONE_CLEANUP)
    );
    assert_eq!(
        broken::CompleteBeforeCleanup.breaks(),
        Some(model::COMPLETED_ONLY_AFTER_CLEANUP)
    );
    assert_eq!(
        broken::SuccessDespiteCleanupFailure.breaks(),
        Some(model::CLEANUP_FAILURE_NEVER_SUCCEEDS)
    );
    assert_eq!(
        broken::RepublishOnDuplicate.breaks(),
        Some(model::PUBLISHED_AT_MOST_ONCE)
    );
    assert_eq!(Real.breaks(), None);
}
