//! The progress check (`AG EF`): the real composition has no trap, with
//! and without a node restart; the variant broken for progress has traps
//! and breaks no safety property, so only the progress check can catch it.

use custodian_model::actor::{COMPLETES_AND_CLEANS, Variant};
use custodian_model::check::{composition, composition_progress};

#[test]
fn the_real_composition_can_always_still_complete_and_clean() {
    for restarts in [0, 1] {
        let p = composition_progress(Variant::Real, 0, restarts, 2);
        assert_eq!(p.property, COMPLETES_AND_CLEANS);
        assert_eq!(p.traps, 0, "{p:?}");
        // The graph is the one the safety check explores.
        let pinned = custodian_model::check::pinned_composition_states(0, restarts);
        if let Some(n) = pinned {
            assert_eq!(p.states, n);
        }
        assert!(p.states > 10_000 && p.edges > p.states, "{p:?}");
        assert!(p.as_expected());
    }
}

#[test]
fn forgetting_an_early_cleanup_answer_is_a_trap_only_progress_sees() {
    let p = composition_progress(Variant::ForgetsAnEarlyCleanupAnswer, 0, 0, 2);
    assert!(p.traps > 0, "{p:?}");
    assert!(p.as_expected());
    let path = p.trap_path.expect("a path to a trap");
    assert!(
        path.contains("Cleaned"),
        "the trap follows an early cleanup answer: {path}"
    );
    // Every safety property holds on the same variant: nothing completes,
    // so nothing completes wrongly.
    let r = composition(Variant::ForgetsAnEarlyCleanupAnswer, 0, 0, 2);
    for v in &r.verdicts {
        if v.kind == "always" {
            assert!(v.path.is_none(), "{} was violated: {:?}", v.name, v.path);
        }
    }
}

#[test]
fn a_cleanup_that_is_never_started_is_a_trap() {
    // The node mutant of issue 27: caught by the safety check's bounded
    // form, and by the liveness property itself.
    let p = composition_progress(Variant::CleanupNeverStarted, 0, 0, 2);
    assert!(p.traps > 0 && p.as_expected(), "{p:?}");
}
