//! The 2-request configuration of the composition (`model/src/actor/pair.rs`):
//! two edges, one request each, and one node whose table remembers one
//! finished request, over the ordered network; its pinned state count, the
//! violation it found in the real node (fixed), the broken variants it
//! catches, and the one it shows harmless.

use custodian_model::actor::{self, Variant, pair};
use custodian_model::check;

// How the pinned number arises. Each request is the 1-request
// configuration's edge (announce, caller cancel, executor success once the
// open was answered, executor stopped once cancelled) with the node's open
// (done or failed) and cleanup finishing later, and the node's shutdown may
// come at any moment; the two requests interleave freely. The ordered
// network makes each message arrive once, in order, so a request has far
// fewer states than over the duplicating network (no message is ever
// delivered again), and the node's table adds what each request's entry
// holds (state, cleanup cell, filed) and the queue of finished requests.
// The two requests are folded into one another (a state and its mirror
// image are one representative): 185 916 unique states (215 320 while
// the node's answer to a cancel reached its edge as an open's answer, which
// the edge could take for its open's; 255 461 before the node kept a
// cancelled failed open in its table: the states where that request was
// retired, evicted and forgotten are gone).
// With a caller that may also disconnect first: 717 577; with, besides, the
// open's answer written by a timer of its own (so that the cleanup's
// verdict could overtake it): 1 607 436 (see the module documentation for
// why both are left out).

#[test]
fn every_property_holds() {
    let r = check::composition_pair(Variant::Real, 2);
    eprint!("{r}");
    for v in &r.verdicts {
        assert_eq!(v.holds, Some(true), "{} {}\n{:?}", v.kind, v.name, v.path);
    }
    assert_eq!(r.unique, 185_916);
    assert_eq!(check::PINNED_PAIR_STATES, r.unique);
    assert!(r.ok());
}

/// The violation this configuration found in the real node, before
/// `wire::node`'s `forgettable_now` kept a held request whose job is
/// unknown: a request whose open failed and which was cancelled is retired
/// by the node's table, evicted by the other request's result, and no
/// longer cleaned by the node's shutdown. Caught by its property, on a path
/// that fails the open, cancels it and shuts the node down.
#[test]
fn forgetting_a_cancelled_failed_open_is_caught() {
    assert_eq!(
        Variant::ForgetsACancelledFailedOpen.breaks(),
        Some(actor::SHUTDOWN_CLEANS)
    );
    assert_caught(Variant::ForgetsACancelledFailedOpen);
    let r = check::composition_pair(Variant::ForgetsACancelledFailedOpen, 2);
    let v = r
        .verdict(actor::SHUTDOWN_CLEANS)
        .expect("the property exists");
    let path = v.path.as_deref().expect("a path");
    for step in ["OpenFailsOf", "Cancel(0)", "Shutdown"] {
        assert!(path.contains(step), "{step} missing from\n{path}");
    }
}

fn assert_caught(v: Variant) {
    let expected = v.breaks().expect("a broken variant names its property");
    let r = check::composition_pair(v, 2);
    let verdict = r.verdict(expected).expect("the property exists");
    assert_eq!(verdict.holds, Some(false), "{}: not caught\n{r}", r.name);
    assert!(r.ok());
}

/// A table that evicts a request whose cleanup is in flight (not only
/// finished ones): a request retired by its cancel, then cleaned, is
/// forgotten when the other request's result is filed.
#[test]
fn evicting_a_request_in_flight_is_caught() {
    assert_eq!(Variant::EvictsInFlight.breaks(), Some(pair::IN_FLIGHT_HELD));
    assert_caught(Variant::EvictsInFlight);
}

/// Issue 27's first node mutant, with two requests sharing the node.
#[test]
fn a_cleanup_never_started_after_its_open_is_caught() {
    assert_caught(Variant::CleanupNeverStarted);
}

/// A table that evicts the newest finished request instead of the oldest
/// breaks nothing on the ordered wire: nothing asks for a request after its
/// cleanup was answered (its cleanup is its edge's last frame, and a node
/// shutting down reads nothing more), so which finished request is
/// forgotten cannot be seen.
#[test]
fn evicting_the_newest_is_harmless_on_the_ordered_wire() {
    assert_eq!(Variant::EvictsNewest.breaks(), None);
    let r = check::composition_pair(Variant::EvictsNewest, 2);
    eprint!("{r}");
    for v in &r.verdicts {
        if v.kind == "always" {
            assert_eq!(v.holds, Some(true), "{} was violated: {:?}", v.name, v.path);
        }
    }
}

/// The progress check on the 2-request configuration: no trap; its graph
/// is the one the safety check explores.
#[test]
fn both_requests_can_always_still_complete_and_clean() {
    let p = check::composition_pair_progress(Variant::Real, 2);
    assert_eq!(p.property, pair::BOTH_COMPLETE_AND_CLEAN);
    assert_eq!(p.traps, 0, "{p:?}");
    assert_eq!(p.states, check::PINNED_PAIR_STATES);
    assert!(p.as_expected());
}

/// The progress check can fail on this configuration: an edge that fails
/// nothing at the end of its connection waits forever for the answer to a
/// cleanup the node, shut down, never read.
#[test]
fn ignoring_the_end_of_the_connection_is_a_trap() {
    let p = check::composition_pair_progress(Variant::IgnoresTheEndOfItsConnection, 2);
    assert!(p.traps > 0 && p.as_expected(), "{p:?}");
}

/// A node that forgets a cancelled failed open is no trap for progress:
/// its edge still completes, reporting the node unreachable once the node
/// exited, which the goal accepts; what it leaves on disk is the safety
/// property's to catch ([`forgetting_a_cancelled_failed_open_is_caught`]).
#[test]
fn forgetting_a_cancelled_failed_open_is_no_trap() {
    let p = check::composition_pair_progress(Variant::ForgetsACancelledFailedOpen, 2);
    assert_eq!(p.traps, 0, "{p:?}");
}

/// An edge that completes the moment it decides its cleanup (it never
/// sends it) is no trap here: the node still holds the request, and its
/// shutdown cleans it. The 1-request configuration's safety check catches
/// that edge (`composition/broken/complete-before-cleanup-answer`).
#[test]
fn completing_before_the_cleanups_answer_is_no_trap_while_the_node_holds_the_request() {
    let p = check::composition_pair_progress(Variant::CompleteBeforeCleanupAnswer, 2);
    assert_eq!(p.traps, 0, "{p:?}");
}
