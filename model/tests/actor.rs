//! The composition model (`model/src/actor.rs`): the real edge and node
//! over a reordering, duplicating network; pinned state counts; every broken
//! variant caught by the property it breaks.

use custodian_model::actor::{self, Variant};
use custodian_model::check;

// How the pinned numbers arise. One node, one edge (one request), one
// waiter. The edge's timers (announce, caller cancel or disconnect,
// executor success once the open was answered, executor stopped once
// cancelled) fire in any order; every sent message stays deliverable any
// number of times (duplicating network; a message never delivered is a
// lost one) and deliveries race. The edge sends one cleanup, as
// `WireClient` does. The network's record of the last delivered message is
// folded away by the representative. The node's open and its cleanup each
// finish later (timers `OpenDone`, `CleanupDone`), so that messages arrive
// while either runs; an open may fail instead (`OpenFails`, part of its
// directory made). The first incarnation may be shut down (`Shutdown`: it
// cleans the request it holds, then exits, and the edge reads the end of
// its connection). The node's answer to a cancel is the cancel call's
// own (`CancelAnswer`): the real client matches each answer to its call,
// so it is never taken for the open's. Without restarts: 71 181 unique
// states, longest path 23. With one node crash and restart: the node's table is lost, its disk
// kept; the restarted node drops what was sent to its first incarnation
// (lost with that connection), tells the edge its connection broke
// (`Lost`: every waiting and later call of the edge fails
// `node_unreachable`, and it does not reconnect) and reclaims a job
// directory its predecessor left (`Reclaim`): 220 118 unique states
// (90 158 without the waiter), longest path 25. They were 76 685, 236 286
// and 96 822 while the answer to a cancel came as an open's answer (an edge
// still waiting for its open took it for the open's, and dropped the real
// one); 96 268, 276 996
// and 110 758 while the edge's request machine took a success as the
// stop: now the success waits in finalizing for the executor's stop, so
// the orders in which the stop and the cleanup's messages used to arrive
// collapse into one (the stop always first).

#[test]
fn every_property_holds_without_restarts() {
    let r = check::composition(Variant::Real, 1, 0, 2);
    eprint!("{r}");
    for v in &r.verdicts {
        assert_eq!(v.holds, Some(true), "{} {}\n{:?}", v.kind, v.name, v.path);
    }
    assert_eq!(r.unique, 71_181);
    assert_eq!(check::pinned_composition_states(1, 0), Some(r.unique));
    assert!(r.ok());
}

#[test]
fn every_property_holds_with_a_node_restart() {
    let r = check::composition(Variant::Real, 1, 1, 2);
    eprint!("{r}");
    assert!(check::KNOWN_COMPOSITION_VIOLATIONS.is_empty());
    for v in &r.verdicts {
        assert_eq!(v.holds, Some(true), "{} {}\n{:?}", v.kind, v.name, v.path);
    }
    assert_eq!(r.unique, 220_118);
    assert_eq!(check::pinned_composition_states(1, 1), Some(r.unique));
    assert!(r.ok());
}

fn assert_caught(v: Variant) {
    let expected = v.breaks().expect("a broken variant names its property");
    let r = if v == Variant::ReplayAcrossRestart {
        check::composition(v, 0, 1, 2)
    } else {
        check::composition(v, 1, 0, 2)
    };
    let verdict = r.verdict(expected).expect("the property exists");
    assert_eq!(verdict.holds, Some(false), "{}: not caught\n{r}", r.name);
    assert!(r.ok());
}

#[test]
fn open_before_announce_is_caught() {
    assert_caught(Variant::OpenBeforeAnnounce);
}

#[test]
fn cleanup_per_message_is_caught() {
    assert_caught(Variant::CleanupPerMessage);
}

#[test]
fn complete_before_cleanup_answer_is_caught() {
    assert_caught(Variant::CompleteBeforeCleanupAnswer);
}

#[test]
fn early_answer_is_caught() {
    assert_caught(Variant::EarlyAnswer);
}

#[test]
fn replay_across_restart_is_caught() {
    assert_caught(Variant::ReplayAcrossRestart);
}

#[test]
fn the_broken_variants_break_what_they_claim() {
    assert_eq!(
        Variant::OpenBeforeAnnounce.breaks(),
        Some(actor::OPENED_IS_CLEANED)
    );
    assert_eq!(
        Variant::CleanupPerMessage.breaks(),
        Some(actor::ONE_CLEANUP_PER_NODE)
    );
    assert_eq!(
        Variant::CompleteBeforeCleanupAnswer.breaks(),
        Some(actor::COMPLETES_AFTER_CLEANUP_ANSWER)
    );
    assert_eq!(
        Variant::EarlyAnswer.breaks(),
        Some(actor::WAITERS_SEE_PUBLISHED)
    );
    assert_eq!(
        Variant::ReplayAcrossRestart.breaks(),
        Some(actor::ONLY_ITS_OWN_CONNECTIONS)
    );
    assert_eq!(
        Variant::ShutdownWithoutCleanup.breaks(),
        Some(actor::SHUTDOWN_CLEANS)
    );
    assert_eq!(Variant::Real.breaks(), None);
}

/// The node's decisions broken in the real code's way (issue 27's first
/// node mutant): a cleanup that waited for a running open is not started
/// when the open finishes. Atomic cleanups hid it; the property that a
/// cleanup asked for runs, or waits for a running open, catches it.
#[test]
fn a_cleanup_never_started_after_its_open_is_caught() {
    assert_caught(Variant::CleanupNeverStarted);
}

/// The second node mutant: an open accepted while a cleanup runs leaves a
/// job directory behind a cleanup that answered `cleaned`; reachable only
/// now that a cleanup takes two steps.
#[test]
fn an_open_during_a_cleanup_is_caught() {
    assert_caught(Variant::OpenDuringCleanup);
}

/// The node's shutdown broken: it exits without cleaning the request it
/// holds open, leaving its job directory; `wire::node`'s `close` cleans
/// every request `held_open` says it holds before the node exits.
#[test]
fn a_shutdown_without_cleanup_is_caught() {
    assert_caught(Variant::ShutdownWithoutCleanup);
}

/// The node's answer to a cancel sent as an open's answer (as this model
/// did until 2026-12-05): an edge still waiting for its open takes it for
/// the open's. The real client matches answers to calls by sequence number.
#[test]
fn a_cancels_answer_taken_for_the_opens_is_caught() {
    assert_caught(Variant::AnswersACancelAsAnOpen);
    assert_eq!(
        Variant::AnswersACancelAsAnOpen.breaks(),
        Some(actor::OPEN_ANSWERED_BY_AN_OPEN)
    );
}
