//! Every primary candidate × workspace opened or not × cleanup ok or failed
//! × terminal acknowledged or failed: the final category, the cleanup
//! evidence, the delivery and the side-effect counts.

use std::time::Duration;

use custodian::machine::request::{Candidate, CleanupReport, Delivery, RequestStatus};
use custodian::request::RequestLimits;

use crate::support::{Gate, SYMLINK_IN_JOB, coordinator, finish, id, settle};

const EXEC_FAILED: custodian::error::SafeCode = custodian::error::SafeCode::new("tool_failed");

fn primaries() -> [Candidate; 6] {
    [
        Candidate::Success,
        Candidate::ExecutorError { code: EXEC_FAILED },
        Candidate::Timeout,
        Candidate::CallerCancel,
        Candidate::CallerDisconnect,
        Candidate::TerminalWriteFailed,
    ]
}

/// The rules from the seed, written out independently of the machine.
fn expected_status(primary: Candidate, cleanup_failed: bool) -> RequestStatus {
    match primary {
        Candidate::Success if cleanup_failed => RequestStatus::Failed,
        Candidate::Success => RequestStatus::Succeeded,
        Candidate::ExecutorError { .. } | Candidate::TerminalWriteFailed => RequestStatus::Failed,
        Candidate::Timeout => RequestStatus::TimedOut,
        Candidate::CallerCancel | Candidate::CallerDisconnect => RequestStatus::Cancelled,
    }
}

#[tokio::test(start_paused = true)]
async fn every_primary_outcome_merges_with_cleanup_and_delivery() {
    let mut cases = 0;
    for primary in primaries() {
        for opened in [false, true] {
            for cleanup_fails in [false, true] {
                for write_fails in [false, true] {
                    let co = coordinator(
                        Gate::open_always(),
                        Gate::open_always(),
                        Gate::open_always(),
                        RequestLimits::default(),
                    );
                    co.lifecycle()
                        .fail_all
                        .store(cleanup_fails, std::sync::atomic::Ordering::SeqCst);
                    let name = format!("case-{cases}{}", if write_fails { "-wfail" } else { "" });
                    let ctx = format!(
                        "{primary:?} opened={opened} cleanup_fails={cleanup_fails} write_fails={write_fails}"
                    );
                    let r = id(&name);
                    let h = co.start(r.clone());
                    if opened {
                        h.workspace_opening().await.unwrap();
                    }
                    if primary == Candidate::Timeout {
                        tokio::time::advance(RequestLimits::default().request_timeout).await;
                    } else {
                        h.candidate(primary);
                    }
                    // Executor-less candidates wait for the executor to stop;
                    // the fake process control answers at once.
                    let facts = finish(&h, &ctx).await;
                    let c = h.finished().await;
                    let cleanup_failed = opened && cleanup_fails;
                    assert_eq!(
                        c.result.status(),
                        expected_status(primary, cleanup_failed),
                        "{ctx}"
                    );
                    assert_eq!(c.result.primary(), primary, "{ctx}");
                    let expected_cleanup = match (opened, cleanup_fails) {
                        (false, _) => CleanupReport::NotNeeded,
                        (true, false) => CleanupReport::Cleaned,
                        (true, true) => CleanupReport::Failed {
                            code: SYMLINK_IN_JOB,
                        },
                    };
                    assert_eq!(c.result.cleanup(), expected_cleanup, "{ctx}");
                    let lifecycle_calls = co.lifecycle().count(&r);
                    assert_eq!(lifecycle_calls, u32::from(opened), "{ctx}: cleanup calls");
                    assert_eq!(facts.start_cleanups, u32::from(opened), "{ctx}");
                    let disconnected = primary == Candidate::CallerDisconnect;
                    let expected_delivery = if disconnected {
                        Delivery::CallerGone
                    } else if write_fails {
                        Delivery::WriteFailed
                    } else {
                        Delivery::Acknowledged
                    };
                    assert_eq!(c.delivery, expected_delivery, "{ctx}");
                    assert_eq!(
                        h.effects().writes,
                        u32::from(!disconnected),
                        "{ctx}: writes"
                    );
                    assert_eq!(h.effects().publications, 1, "{ctx}");
                    assert_eq!(h.effects().cancels, 1, "{ctx}: one cancel");
                    if primary == Candidate::Success && cleanup_failed {
                        assert_eq!(
                            c.result.error_code().unwrap().as_str(),
                            "cleanup_failed",
                            "{ctx}"
                        );
                    }
                    cases += 1;
                    settle().await;
                }
            }
        }
    }
    assert_eq!(cases, 48);
}

#[tokio::test(start_paused = true)]
async fn an_unopened_workspace_is_never_cleaned() {
    let co = coordinator(
        Gate::open_always(),
        Gate::open_always(),
        Gate::open_always(),
        RequestLimits::default(),
    );
    let r = id("never-opened");
    let h = co.start(r.clone());
    h.candidate(Candidate::Success);
    h.candidate(Candidate::CallerCancel);
    let facts = finish(&h, "unopened").await;
    assert_eq!(facts.start_cleanups, 0);
    assert_eq!(co.lifecycle().total(), 0);
    assert_eq!(
        h.finished().await.result.cleanup(),
        CleanupReport::NotNeeded
    );
}

#[tokio::test(start_paused = true)]
async fn opening_after_a_workspace_less_finalization_is_refused() {
    let co = coordinator(
        Gate::open_always(),
        Gate::open_always(),
        Gate::open_always(),
        RequestLimits::default(),
    );
    let h = co.start(id("late-open"));
    h.candidate(Candidate::Success);
    finish(&h, "late").await;
    assert!(
        h.workspace_opening().await.is_err(),
        "the cleanup was decided without it: the caller must not open it"
    );
    assert!(h.state().open_refused());
    assert!(!h.state().workspace_announced());
}

#[tokio::test(start_paused = true)]
async fn a_cleanup_past_the_frozen_deadline_fails_the_success() {
    let limits = RequestLimits::new()
        .with_request_timeout(Duration::from_secs(10))
        .with_cleanup_grace(Duration::from_secs(5))
        .with_terminal_write_timeout(Duration::from_secs(1));
    // The cleanup gate is never opened: the cleanup hangs.
    let co = coordinator(
        Gate::closed(),
        Gate::open_always(),
        Gate::open_always(),
        limits,
    );
    let h = co.start(id("slow-cleanup"));
    h.workspace_opening().await.unwrap();
    tokio::time::advance(Duration::from_secs(3)).await;
    h.candidate(Candidate::Success);
    settle().await;
    assert!(
        h.try_finished().is_none(),
        "no completion while the cleanup runs"
    );
    // The deadline was frozen at start: 10 s + 5 s, not 3 s + 15 s.
    tokio::time::advance(Duration::from_secs(12)).await;
    let c = h.finished().await;
    assert_eq!(c.result.status(), RequestStatus::Failed);
    assert_eq!(
        c.result.cleanup(),
        CleanupReport::Failed {
            code: custodian::request::CODE_CLEANUP_DEADLINE_EXCEEDED
        }
    );
    finish(&h, "slow").await;
}

#[tokio::test(start_paused = true)]
async fn a_hanging_terminal_write_counts_as_failed_and_still_completes() {
    let limits = RequestLimits::new().with_terminal_write_timeout(Duration::from_secs(2));
    let co = coordinator(
        Gate::open_always(),
        Gate::open_always(),
        Gate::closed(),
        limits,
    );
    let h = co.start(id("hung-sink"));
    h.workspace_opening().await.unwrap();
    h.candidate(Candidate::Success);
    settle().await;
    assert!(h.try_finished().is_none());
    tokio::time::advance(Duration::from_secs(3)).await;
    let c = h.finished().await;
    // The result was already merged before the write: a success whose
    // delivery failed keeps its result, delivery says what happened.
    assert_eq!(c.result.status(), RequestStatus::Succeeded);
    assert_eq!(c.delivery, Delivery::WriteFailed);
    assert_eq!(co.lifecycle().total(), 1);
    finish(&h, "hung sink").await;
}

#[tokio::test(start_paused = true)]
async fn dropping_every_handle_is_a_disconnect_that_still_cleans_up() {
    let co = coordinator(
        Gate::open_always(),
        Gate::open_always(),
        Gate::open_always(),
        RequestLimits::default(),
    );
    let r = id("abandoned");
    let h = co.start(r.clone());
    h.workspace_opening().await.unwrap();
    let observer = h.observer();
    drop(h);
    let c = observer.finished().await;
    assert_eq!(c.result.primary(), Candidate::CallerDisconnect);
    assert_eq!(c.delivery, Delivery::CallerGone);
    assert_eq!(
        co.lifecycle().count(&r),
        1,
        "cleanup ran although every caller left"
    );
    assert_eq!(
        co.sink().writes_for(&r),
        0,
        "nothing is written to a gone caller"
    );
    assert_eq!(
        co.processes()
            .cancels
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    crate::support::check_log(&observer.log(), "abandoned");
}

/// Hooks that panic, either on their first poll (so where the action is
/// issued) or after a yield (so in the action's own task).
struct Panicking {
    after_a_yield: bool,
}

impl Panicking {
    async fn panic(&self, what: &str) -> ! {
        if self.after_a_yield {
            tokio::task::yield_now().await;
        }
        panic!("{what} bug")
    }
}

impl custodian::request::WorkspaceLifecycle for Panicking {
    async fn cleanup_workspace(
        &self,
        _: &custodian::request::RequestId,
    ) -> custodian::machine::request::CleanupVerdict {
        self.panic("cleanup hook").await
    }
}

impl custodian::request::TerminalSink for Panicking {
    async fn write_terminal(
        &self,
        _: &custodian::request::RequestId,
        _: &custodian::machine::request::FinalResult,
    ) -> Result<(), custodian::request::TerminalWriteError> {
        self.panic("sink").await
    }
}

/// A success whose cleanup and terminal write both panic still completes,
/// as a failure with typed answers.
async fn panicking_hooks_give_typed_answers(after_a_yield: bool, name: &str) {
    let co = custodian::request::Coordinator::new(
        std::sync::Arc::new(Panicking { after_a_yield }),
        crate::support::Processes::new(Gate::open_always()),
        std::sync::Arc::new(Panicking { after_a_yield }),
        RequestLimits::default(),
    );
    let h = co.start(id(name));
    h.workspace_opening().await.unwrap();
    h.candidate(Candidate::Success);
    let c = h.finished().await;
    assert_eq!(c.result.status(), RequestStatus::Failed);
    assert_eq!(
        c.result.cleanup(),
        CleanupReport::Failed {
            code: custodian::request::CODE_CLEANUP_ABORTED
        }
    );
    assert_eq!(c.delivery, Delivery::WriteFailed);
    finish(&h, name).await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_hook_becomes_a_typed_answer_and_the_request_completes() {
    panicking_hooks_give_typed_answers(false, "panics").await;
}

#[tokio::test(start_paused = true)]
async fn a_hook_panicking_in_its_own_task_becomes_a_typed_answer() {
    panicking_hooks_give_typed_answers(true, "late-panics").await;
}

/// `workspace_opening` commits by itself when nothing its caller sent is
/// queued: its future is ready on the first poll, before the actor (on this
/// single-threaded runtime) could run at all.
#[tokio::test(flavor = "current_thread")]
async fn an_open_with_nothing_queued_is_committed_by_the_handle_itself() {
    let co = coordinator(
        Gate::open_always(),
        Gate::open_always(),
        Gate::open_always(),
        RequestLimits::default(),
    );
    let h = co.start(id("direct-open"));
    let mut open = std::pin::pin!(h.workspace_opening());
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert_eq!(
        std::future::Future::poll(open.as_mut(), &mut cx),
        std::task::Poll::Ready(Ok(())),
        "the open needed the actor"
    );
    let log = h.log();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(
        log[0].event,
        custodian::machine::request::Event::WorkspaceOpening
    );
    assert!(h.state().workspace_announced());
    h.candidate(Candidate::Success);
    let facts = finish(&h, "direct-open").await;
    assert_eq!(facts.start_cleanups, 1);
    assert_eq!(co.lifecycle().count(h.id()), 1);
}

/// An open reported after a candidate the same caller sent goes through the
/// actor, behind that candidate: it never overtakes it.
#[tokio::test(flavor = "current_thread")]
async fn an_open_never_overtakes_a_candidate_its_caller_sent_first() {
    let co = coordinator(
        Gate::closed(),
        Gate::closed(),
        Gate::open_always(),
        RequestLimits::default(),
    );
    let h = co.start(id("queued-open"));
    // Not yet committed: the actor has not run since.
    h.candidate(Candidate::CallerCancel);
    assert!(h.log().is_empty());
    h.workspace_opening()
        .await
        .expect("an open while the cancel finalizes is accepted");
    let events: Vec<_> = h.log().iter().map(|r| r.event).collect();
    assert_eq!(
        events,
        [
            custodian::machine::request::Event::Candidate(Candidate::CallerCancel),
            custodian::machine::request::Event::WorkspaceOpening,
        ]
    );
    co.processes().gate.release(1);
    co.lifecycle().gate.release(1);
    let c = h.finished().await;
    assert_eq!(c.result.status(), RequestStatus::Cancelled);
    assert_eq!(co.lifecycle().count(h.id()), 1, "the late open is cleaned");
    finish(&h, "queued-open").await;
}

/// The edge-side executor learns of the cancel through its handle, before
/// the process hook is even answered.
#[tokio::test(start_paused = true)]
async fn a_cancel_reaches_the_edge_side_executor_through_the_handle() {
    let co = coordinator(
        Gate::open_always(),
        Gate::closed(),
        Gate::open_always(),
        RequestLimits::default(),
    );
    let h = co.start(id("exec-cancel"));
    h.workspace_opening().await.unwrap();
    let executor = tokio::spawn({
        let h = h.clone();
        async move {
            // The executor's work never ends on its own: only the cancel
            // stops it.
            tokio::select! {
                () = h.cancelled() => "stopped",
                () = std::future::pending::<()>() => "never",
            }
        }
    });
    settle().await;
    assert!(!h.is_cancelled());
    assert!(!executor.is_finished());
    h.candidate(Candidate::CallerCancel);
    assert_eq!(executor.await.unwrap(), "stopped");
    assert!(h.is_cancelled());
    // The node-side hook is still parked: the executor did not wait for it.
    assert!(h.try_finished().is_none());
    co.processes().gate.release(1);
    let c = h.finished().await;
    assert_eq!(c.result.cleanup(), CleanupReport::Cleaned);
    assert_eq!(c.stop_unconfirmed, None);
    finish(&h, "exec-cancel").await;
}

/// A cancel hook that never answers: the cleanup still runs at the frozen
/// deadline, and the completion says the stop was not confirmed.
#[tokio::test(start_paused = true)]
async fn a_cancel_hook_past_the_deadline_still_cleans_and_says_so() {
    let limits = RequestLimits::new()
        .with_request_timeout(Duration::from_secs(5))
        .with_cleanup_grace(Duration::from_secs(2));
    let co = coordinator(
        Gate::open_always(),
        Gate::closed(),
        Gate::open_always(),
        limits,
    );
    let h = co.start(id("hung-cancel"));
    h.workspace_opening().await.unwrap();
    h.candidate(Candidate::CallerCancel);
    settle().await;
    assert_eq!(
        co.lifecycle().count(h.id()),
        0,
        "no cleanup before the stop"
    );
    tokio::time::advance(Duration::from_secs(8)).await;
    let c = h.finished().await;
    assert_eq!(co.lifecycle().count(h.id()), 1, "the cleanup ran anyway");
    assert_eq!(c.result.cleanup(), CleanupReport::Cleaned);
    assert_eq!(c.result.status(), RequestStatus::Cancelled);
    assert_eq!(
        c.stop_unconfirmed,
        Some(custodian::request::CODE_CANCEL_DEADLINE_EXCEEDED)
    );
    finish(&h, "hung-cancel").await;
}

struct PanickingCancel;

impl custodian::request::ProcessControl for PanickingCancel {
    async fn cancel_processes(&self, _: &custodian::request::RequestId) {
        tokio::task::yield_now().await;
        panic!("cancel hook bug")
    }
}

/// A cancel hook that panics: the cleanup still runs, and the completion
/// says the stop was not confirmed.
#[tokio::test(start_paused = true)]
async fn a_panicking_cancel_hook_still_cleans_and_says_so() {
    let lifecycle = crate::support::Lifecycle::new(Gate::open_always());
    let co = custodian::request::Coordinator::new(
        std::sync::Arc::clone(&lifecycle),
        std::sync::Arc::new(PanickingCancel),
        crate::support::Sink::new(Gate::open_always()),
        RequestLimits::default(),
    );
    let h = co.start(id("panicking-cancel"));
    h.workspace_opening().await.unwrap();
    h.candidate(Candidate::Timeout);
    let c = h.finished().await;
    assert_eq!(lifecycle.count(h.id()), 1);
    assert_eq!(c.result.cleanup(), CleanupReport::Cleaned);
    assert_eq!(
        c.stop_unconfirmed,
        Some(custodian::request::CODE_CANCEL_ABORTED)
    );
    finish(&h, "panicking-cancel").await;
}
