//! Racing inputs forced into every order: each permutation of a set of
//! stimuli (terminal candidates, the request deadline, and the release of
//! the cancel, the cleanup and the terminal write) is applied one at a time
//! on paused time, letting the actor settle between stimuli.

use std::time::Duration;

use custodian::coordinator::{Limits, Record, RequestObserver};
use custodian::machine::request::{Candidate, Delivery, Status};

use crate::support::{Fakes, Gate, check_log, coordinator, id, settle};

pub const EXEC_FAILED: custodian::error::SafeCode =
    custodian::error::SafeCode::new("executor_failed");

/// One thing the test can make happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stimulus {
    Candidate(Candidate),
    /// Advance the clock to the request deadline.
    Deadline,
    ReleaseCancel,
    ReleaseCleanup,
    ReleaseWrite,
}

pub fn permutations<T: Copy>(items: &[T]) -> Vec<Vec<T>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for i in 0..items.len() {
        let mut rest = items.to_vec();
        let first = rest.remove(i);
        for mut p in permutations(&rest) {
            p.insert(0, first);
            out.push(p);
        }
    }
    out
}

const LIMITS: Limits = Limits {
    request_timeout: Duration::from_secs(60),
    cleanup_grace: Duration::from_secs(30),
    terminal_write_timeout: Duration::from_secs(10),
};

fn expected_status(primary: Candidate) -> Status {
    match primary {
        Candidate::Success => Status::Succeeded,
        Candidate::ExecutorError { .. } | Candidate::TerminalWriteFailed => Status::Failed,
        Candidate::Timeout => Status::TimedOut,
        Candidate::CallerCancel | Candidate::CallerDisconnect => Status::Cancelled,
    }
}

/// Runs one order; returns the request's log. Panics with `ctx` on any
/// violated expectation.
pub async fn run_order(
    co: &Fakes,
    name: &str,
    order: &[Stimulus],
    opened: bool,
    write_fails: bool,
) -> Vec<Record> {
    let ctx = format!("{name}: opened={opened} write_fails={write_fails} order={order:?}");
    let r = id(name);
    let h = co.start(r.clone());
    if opened {
        h.workspace_opened().await.unwrap();
    }
    co.sink()
        .fail
        .store(write_fails, std::sync::atomic::Ordering::SeqCst);
    let early = h.observer();
    let early_wait = tokio::spawn(async move { early.finished().await });
    let dropped = {
        let o = h.observer();
        tokio::spawn(async move { o.finished().await })
    };
    let mut primary = None;
    let mut disconnected = false;
    let mut cleanup_released = false;
    let mut mid_wait = None;
    for (step, s) in order.iter().enumerate() {
        match *s {
            Stimulus::Candidate(c) => {
                primary.get_or_insert(c);
                disconnected |= c == Candidate::CallerDisconnect;
                h.candidate(c);
            }
            Stimulus::Deadline => {
                primary.get_or_insert(Candidate::Timeout);
                tokio::time::advance(LIMITS.request_timeout).await;
            }
            Stimulus::ReleaseCancel => co.processes().gate.release(1),
            Stimulus::ReleaseCleanup => {
                cleanup_released = true;
                co.lifecycle().gate.release(1);
            }
            Stimulus::ReleaseWrite => co.sink().gate.release(1),
        }
        settle().await;
        if opened && !cleanup_released {
            assert!(
                h.try_finished().is_none(),
                "{ctx}: completed before the cleanup finished"
            );
            assert!(!h.state().is_completed(), "{ctx}: completed before cleanup");
        }
        if step == 1 {
            dropped.abort();
            let o = h.observer();
            mid_wait = Some(tokio::spawn(async move { o.finished().await }));
        }
    }
    let c = tokio::time::timeout(Duration::from_secs(1), h.finished())
        .await
        .unwrap_or_else(|_| panic!("{ctx}: never completed; log {:#?}", h.log()));
    while !h.state().is_completed() {
        tokio::task::yield_now().await;
    }
    let late = h.finished().await;
    assert_eq!(early_wait.await.unwrap(), c, "{ctx}: early waiter");
    assert_eq!(
        mid_wait.unwrap().await.unwrap(),
        c,
        "{ctx}: waiter subscribed mid-way"
    );
    assert_eq!(late, c, "{ctx}: late waiter");
    let primary = primary.expect("every order has a candidate");
    assert_eq!(c.result.primary(), primary, "{ctx}");
    assert_eq!(c.result.status(), expected_status(primary), "{ctx}");
    assert_eq!(
        co.lifecycle().count(&r),
        u32::from(opened),
        "{ctx}: cleanup calls"
    );
    let writes = co.sink().writes_for(&r);
    assert!(writes <= 1, "{ctx}: {writes} writes");
    match c.delivery {
        Delivery::CallerGone => assert!(disconnected, "{ctx}: caller gone without a disconnect"),
        Delivery::WriteFailed => assert!(
            write_fails
                || primary == Candidate::TerminalWriteFailed
                || order.contains(&Stimulus::Candidate(Candidate::TerminalWriteFailed)),
            "{ctx}"
        ),
        Delivery::Acknowledged => assert!(!write_fails && writes == 1, "{ctx}"),
    }
    if primary == Candidate::CallerDisconnect {
        assert_eq!(writes, 0, "{ctx}: wrote to a disconnected caller");
    }
    let log = h.log();
    let facts = check_log(&log, &ctx);
    assert_eq!(facts.start_cleanups, u32::from(opened), "{ctx}");
    log
}

fn fresh() -> Fakes {
    coordinator(Gate::closed(), Gate::closed(), Gate::closed(), LIMITS)
}

/// Family A: success, cancel and disconnect race each other and the three
/// action answers.
pub fn family_a() -> Vec<Stimulus> {
    vec![
        Stimulus::Candidate(Candidate::Success),
        Stimulus::Candidate(Candidate::CallerCancel),
        Stimulus::Candidate(Candidate::CallerDisconnect),
        Stimulus::ReleaseCancel,
        Stimulus::ReleaseCleanup,
        Stimulus::ReleaseWrite,
    ]
}

/// Family B: the deadline, an executor error and a terminal-write failure
/// race the action answers.
pub fn family_b() -> Vec<Stimulus> {
    vec![
        Stimulus::Deadline,
        Stimulus::Candidate(Candidate::ExecutorError { code: EXEC_FAILED }),
        Stimulus::Candidate(Candidate::TerminalWriteFailed),
        Stimulus::ReleaseCancel,
        Stimulus::ReleaseCleanup,
        Stimulus::ReleaseWrite,
    ]
}

/// Runs every order of `family`. With a workspace, the terminal write
/// fails in every other order (so both delivery paths race every
/// interleaving of the rest); without one, `ReleaseCleanup` is dropped from
/// the family (no cleanup is ever started) and both write variants run.
pub async fn run_family(family: &[Stimulus], tag: &str) -> Vec<Vec<Record>> {
    let mut logs = Vec::new();
    for (n, order) in permutations(family).into_iter().enumerate() {
        let name = format!("{tag}-open-{n}");
        logs.push(run_order(&fresh(), &name, &order, true, n % 2 == 1).await);
    }
    let without: Vec<_> = family
        .iter()
        .copied()
        .filter(|s| *s != Stimulus::ReleaseCleanup)
        .collect();
    for (n, order) in permutations(&without).into_iter().enumerate() {
        for write_fails in [false, true] {
            let name = format!("{tag}-closed-{n}-{}", u8::from(write_fails));
            logs.push(run_order(&fresh(), &name, &order, false, write_fails).await);
        }
    }
    logs
}

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

/// Waiters that subscribe before, during and after, and one whose future
/// is dropped: all observe the same completion, and the drop changes
/// nothing.
#[tokio::test(start_paused = true)]
async fn every_waiter_sees_the_same_result_and_dropping_one_changes_nothing() {
    let co = fresh();
    let h = co.start(id("fail-waiters"));
    h.workspace_opened().await.unwrap();
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
        Status::Failed,
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
