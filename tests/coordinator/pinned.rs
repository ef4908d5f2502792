//! Decisions of the coordinator that the other tests did not pin, each
//! found by a mutant that survived them (docs/verification.md, "Mutation
//! testing").

use std::sync::Arc;

use custodian::machine::request::{Candidate, CleanupReport};
use custodian::request::{OpenRefused, RequestLimits};

use crate::logs::Captured;
use crate::support::{Gate, coordinator, finish, id};

/// The warning the coordinator logs when it refuses a late announcement.
const REFUSED: &str = "a workspace announced after the request's cleanup was decided is refused";

/// The refusal of a late announcement is what an operator sees of a
/// runtime that opens too late: it is warned about once, and neither an
/// accepted announcement nor any other event of a finalizing request logs
/// it. (The test runtime is single-threaded, so the actor's task logs
/// through this thread's subscriber.)
#[tokio::test]
async fn only_a_refused_announcement_is_warned_about() {
    let logs = Captured::default();
    let _guard = logs.install(tracing::Level::WARN);
    let co = coordinator(
        Gate::open_always(),
        Gate::open_always(),
        Gate::open_always(),
        RequestLimits::default(),
    );

    // Accepted, then cleaned: every phase of a request with a workspace.
    let accepted = co.start(id("warn-accepted"));
    accepted.workspace_opening().await.unwrap();
    accepted.candidate(Candidate::Success);
    finish(&accepted, "accepted").await;
    assert_eq!(
        accepted.finished().await.result.cleanup(),
        CleanupReport::Cleaned
    );
    assert_eq!(
        logs.count(REFUSED),
        0,
        "an accepted announcement is no refusal"
    );

    // No workspace: cleanup is decided "not needed", then an announcement
    // comes too late.
    let late = co.start(id("warn-late"));
    late.candidate(Candidate::Success);
    finish(&late, "late").await;
    assert_eq!(
        logs.count(REFUSED),
        0,
        "only an announcement can be refused"
    );
    assert_eq!(late.workspace_opening().await, Err(OpenRefused));
    assert!(late.state().open_refused());
    assert_eq!(logs.count(REFUSED), 1, "the refusal is warned about once");
}

/// `try_finished` answers `None` while a request runs and the published
/// completion once it completed, on the handle and on an observer alike.
#[tokio::test(start_paused = true)]
async fn try_finished_returns_the_published_completion() {
    let co = coordinator(
        Gate::open_always(),
        Gate::open_always(),
        Gate::closed(),
        RequestLimits::default(),
    );
    let h = co.start(id("try-finished"));
    let o = h.observer();
    h.workspace_opening().await.unwrap();
    h.candidate(Candidate::CallerCancel);
    crate::support::settle().await;
    assert!(h.try_finished().is_none(), "the terminal write is held");
    assert!(o.try_finished().is_none(), "the terminal write is held");
    co.sink().gate.release(1);
    let c = h.finished().await;
    assert_eq!(h.try_finished(), Some(c.clone()));
    assert_eq!(o.try_finished(), Some(c));
}

/// Once a request completed and every handle is gone, its actor ends and
/// drops what it held (here: its clone of the coordinator's hooks); an
/// actor that kept waiting would leak one task per request.
#[tokio::test(start_paused = true)]
async fn a_completed_request_whose_handles_are_gone_leaves_no_task_behind() {
    let co = coordinator(
        Gate::open_always(),
        Gate::open_always(),
        Gate::open_always(),
        RequestLimits::default(),
    );
    let h = co.start(id("no-task-left"));
    h.workspace_opening().await.unwrap();
    h.candidate(Candidate::Success);
    finish(&h, "no task left").await;
    assert_eq!(
        Arc::strong_count(co.lifecycle()),
        2,
        "the actor still takes duplicates while a handle lives"
    );
    let observer = h.observer();
    drop(h);
    crate::support::settle().await;
    assert_eq!(
        Arc::strong_count(co.lifecycle()),
        1,
        "the actor ended and dropped the hooks"
    );
    assert!(observer.state().is_completed());
}
