//! Racing inputs forced into every order: each permutation of a set of
//! stimuli (terminal candidates, the request deadline, and the release of
//! the cancel, the cleanup and the terminal write) is applied one at a time
//! on paused time, letting the actor settle between stimuli.

use custodian::machine::request::{Candidate, RequestStatus};
use custodian::request::RequestObserver;

use crate::scenarios::{
    family_a, family_b, family_d, family_e, family_f, family_g, family_h, family_i, fresh,
    run_announcements, run_family, run_family_c,
};
use crate::support::{check_log, id, settle};

#[tokio::test(start_paused = true)]
async fn success_cancel_disconnect_in_every_order() {
    let logs = run_family(&family_a(), "a").await;
    assert_eq!(logs.len(), 720 + 240);
}

#[tokio::test(start_paused = true)]
async fn deadline_error_write_failure_in_every_order() {
    let logs = run_family(&family_b(), "b").await;
    assert_eq!(logs.len(), 720 + 240);
}

#[tokio::test(start_paused = true)]
async fn disconnect_and_write_failure_in_every_order() {
    let logs = run_family(&family_d(), "d").await;
    // 5! orders with a workspace, 4! × 2 write variants without one.
    assert_eq!(logs.len(), 120 + 48);
}

#[tokio::test(start_paused = true)]
async fn error_cancel_disconnect_in_every_order() {
    let logs = run_family(&family_e(), "e").await;
    assert_eq!(logs.len(), 720 + 240);
}

#[tokio::test(start_paused = true)]
async fn deadline_cancel_disconnect_in_every_order() {
    let logs = run_family(&family_f(), "f").await;
    assert_eq!(logs.len(), 720 + 240);
}

#[tokio::test(start_paused = true)]
async fn a_failing_cleanup_races_success_cancel_disconnect_in_every_order() {
    let logs = run_family(&family_g(), "fail-g").await;
    assert_eq!(logs.len(), 720 + 240);
    // Every opened workspace's cleanup failed, and the machine saw it.
    let failures = logs
        .iter()
        .filter(|log| {
            log.iter().any(|r| {
                matches!(
                    r.event,
                    custodian::machine::request::Event::CleanupFinished(
                        custodian::machine::request::CleanupVerdict::Failed(_)
                    )
                )
            })
        })
        .count();
    assert_eq!(failures, 720);
}

#[tokio::test(start_paused = true)]
async fn a_late_timeout_candidate_in_every_order() {
    let logs = run_family(&family_h(), "h").await;
    assert_eq!(logs.len(), 720 + 240);
}

#[tokio::test(start_paused = true)]
async fn workspace_announced_while_a_cancel_finalizes_is_cleaned_or_refused() {
    let logs = run_family_c().await;
    assert_eq!(logs.len(), 720);
}

#[tokio::test(start_paused = true)]
async fn an_announcement_racing_success_and_cancel_is_cleaned_or_refused() {
    let logs = run_announcements(&family_i(), "i").await;
    assert_eq!(logs.len(), 720);
    // Both fates happen: some announcements are cleaned, some refused.
    let refused = logs
        .iter()
        .filter(|log| log.last().is_some_and(|r| r.after.open_refused()))
        .count();
    assert!(refused > 0 && refused < logs.len(), "{refused}");
}

/// Waiters that subscribe before, during and after, and one whose future
/// is dropped: all observe the same completion, and the drop changes
/// nothing.
#[tokio::test(start_paused = true)]
async fn every_waiter_sees_the_same_result_and_dropping_one_changes_nothing() {
    let co = fresh();
    let h = co.start(id("fail-waiters"));
    h.workspace_opening().await.unwrap();
    let mut early = Vec::new();
    for _ in 0..5 {
        let o: RequestObserver = h.observer();
        early.push(tokio::spawn(async move { o.finished().await }));
    }
    let doomed = {
        let h = h.clone();
        tokio::spawn(async move { h.finished().await })
    };
    h.candidate(Candidate::Success);
    settle().await;
    doomed.abort();
    co.processes().gate.release(1);
    co.lifecycle().gate.release(1);
    settle().await;
    let during = h.observer();
    let during = tokio::spawn(async move { during.finished().await });
    co.sink().gate.release(1);
    let c = h.finished().await;
    assert_eq!(
        c.result.status(),
        RequestStatus::Failed,
        "success + cleanup failure = failed"
    );
    for w in early {
        assert_eq!(w.await.unwrap(), c);
    }
    assert_eq!(during.await.unwrap(), c);
    assert_eq!(h.effects().publications, 1);
    // Late duplicates after completion are recorded and change nothing.
    h.candidate(Candidate::CallerCancel);
    h.candidate(Candidate::Success);
    settle().await;
    assert_eq!(h.finished().await, c);
    let facts = check_log(&h.log(), "waiters");
    assert_eq!(facts.start_cleanups, 1);
    assert_eq!(h.state().duplicates().total(), 2);
}
