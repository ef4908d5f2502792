//! Scenario drivers shared by the coordinator tests and by the model
//! conformance replay (`model/tests/conformance.rs` includes this file):
//! forced orders of racing stimuli on paused time, and the seeded stress
//! run on the multi-threaded runtime. Each returns the event logs.

#![allow(dead_code)]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use custodian::machine::request::{Candidate, CleanupReport, Delivery, RequestStatus};
use custodian::request::{RequestLimits, TransitionRecord};

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
    /// The executor announces the workspace (awaited); it is accepted only
    /// while the request is open or finalizing, and opened only then.
    Open,
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

const LIMITS: RequestLimits = RequestLimits::new()
    .with_request_timeout(Duration::from_secs(60))
    .with_cleanup_grace(Duration::from_secs(30))
    .with_terminal_write_timeout(Duration::from_secs(10));

fn expected_status(primary: Candidate) -> RequestStatus {
    match primary {
        Candidate::Success => RequestStatus::Succeeded,
        Candidate::ExecutorError { .. } | Candidate::TerminalWriteFailed => RequestStatus::Failed,
        Candidate::Timeout => RequestStatus::TimedOut,
        Candidate::CallerCancel | Candidate::CallerDisconnect => RequestStatus::Cancelled,
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
) -> Vec<TransitionRecord> {
    let ctx = format!("{name}: opened={opened} write_fails={write_fails} order={order:?}");
    let r = id(name);
    let h = co.start(r.clone());
    if opened {
        h.workspace_opening().await.unwrap();
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
    let mut opened_any = opened;
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
            Stimulus::Open => {
                let accepts = custodian::machine::request::accepts_workspace(&h.state());
                let accepted = h.workspace_opening().await.is_ok();
                assert_eq!(accepted, accepts, "{ctx}: announcement");
                assert_eq!(h.state().open_refused(), !accepted, "{ctx}");
                opened_any |= accepted;
            }
        }
        settle().await;
        if opened_any && !cleanup_released {
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
    // The lifecycle fake fails the cleanup of every request named `fail…`:
    // a success then becomes a failure; any other category is kept.
    let cleanup_failed = opened_any && name.starts_with("fail");
    let status = match expected_status(primary) {
        RequestStatus::Succeeded if cleanup_failed => RequestStatus::Failed,
        s => s,
    };
    assert_eq!(c.result.status(), status, "{ctx}");
    assert_eq!(
        matches!(c.result.cleanup(), CleanupReport::Failed { .. }),
        cleanup_failed,
        "{ctx}: cleanup report {:?}",
        c.result.cleanup()
    );
    assert_eq!(
        co.lifecycle().count(&r),
        u32::from(opened_any),
        "{ctx}: cleanup calls"
    );
    let writes = co.sink().writes_for(&r);
    assert!(writes <= 1, "{ctx}: {writes} writes");
    match c.delivery {
        Delivery::CallerGone => assert!(disconnected, "{ctx}: caller gone without a disconnect"),
        Delivery::WriteFailed => assert!(
            write_fails
                || primary == Candidate::TerminalWriteFailed
                || order.contains(&Stimulus::Candidate(Candidate::TerminalWriteFailed))
                // Advancing time to the deadline can also expire a terminal
                // write still held by its gate.
                || order.contains(&Stimulus::Deadline),
            "{ctx}"
        ),
        Delivery::Acknowledged => assert!(!write_fails && writes == 1, "{ctx}"),
    }
    if primary == Candidate::CallerDisconnect {
        assert_eq!(writes, 0, "{ctx}: wrote to a disconnected caller");
    }
    let log = h.log();
    let facts = check_log(&log, &ctx);
    assert_eq!(facts.start_cleanups, u32::from(opened_any), "{ctx}");
    log
}

pub fn fresh() -> Fakes {
    coordinator(Gate::closed(), Gate::closed(), Gate::closed(), LIMITS)
}

/// Family A: success, cancel and disconnect race each other and the three
/// action answers.
pub fn family_a() -> Vec<Stimulus> {
    race_the_answers([
        Stimulus::Candidate(Candidate::Success),
        Stimulus::Candidate(Candidate::CallerCancel),
        Stimulus::Candidate(Candidate::CallerDisconnect),
    ])
}

/// Three racing stimuli and the release of the three action answers.
fn race_the_answers(racers: [Stimulus; 3]) -> Vec<Stimulus> {
    let mut all = racers.to_vec();
    all.extend([
        Stimulus::ReleaseCancel,
        Stimulus::ReleaseCleanup,
        Stimulus::ReleaseWrite,
    ]);
    all
}

/// Family B: the deadline, an executor error and a terminal-write failure
/// race the action answers.
pub fn family_b() -> Vec<Stimulus> {
    race_the_answers([
        Stimulus::Deadline,
        Stimulus::Candidate(Candidate::ExecutorError { code: EXEC_FAILED }),
        Stimulus::Candidate(Candidate::TerminalWriteFailed),
    ])
}

/// Family D: a disconnect and a terminal-write failure race each other and
/// the action answers, so a write failure also reaches a request whose
/// caller is already gone while it is still finalizing (an edge the seeded
/// stress run only hits by chance).
pub fn family_d() -> Vec<Stimulus> {
    vec![
        Stimulus::Candidate(Candidate::CallerDisconnect),
        Stimulus::Candidate(Candidate::TerminalWriteFailed),
        Stimulus::ReleaseCancel,
        Stimulus::ReleaseCleanup,
        Stimulus::ReleaseWrite,
    ]
}

/// Families E and F: an executor error (E) or the deadline (F) races a
/// cancel and a disconnect, so those candidates also arrive while another
/// one is finalizing, with and without a caller.
pub fn family_e() -> Vec<Stimulus> {
    cancel_disconnect_race(Stimulus::Candidate(Candidate::ExecutorError {
        code: EXEC_FAILED,
    }))
}

/// See [`family_e`].
pub fn family_f() -> Vec<Stimulus> {
    cancel_disconnect_race(Stimulus::Deadline)
}

fn cancel_disconnect_race(first: Stimulus) -> Vec<Stimulus> {
    race_the_answers([
        first,
        Stimulus::Candidate(Candidate::CallerCancel),
        Stimulus::Candidate(Candidate::CallerDisconnect),
    ])
}

/// Family G: success, cancel and disconnect race the action answers while
/// the cleanup fails (run it under a name starting with `fail`, which the
/// lifecycle fake fails), so the failure reaches the machine with and
/// without a caller.
pub fn family_g() -> Vec<Stimulus> {
    family_a()
}

/// Family H: a timeout reported as a candidate races a success, a
/// disconnect and the action answers, so it also lands while the terminal
/// is being written and after the request completed (with and without a
/// caller). The request timer itself cannot: it is disarmed at completion,
/// and a paused clock advanced to the deadline would expire the terminal
/// write first.
pub fn family_h() -> Vec<Stimulus> {
    race_the_answers([
        Stimulus::Candidate(Candidate::Success),
        Stimulus::Candidate(Candidate::Timeout),
        Stimulus::Candidate(Candidate::CallerDisconnect),
    ])
}

/// Family C: the executor announces its workspace while a cancel or a
/// disconnect is already finalizing the request, or after its stop (a stray
/// executor: the late-open race). Every order is legal: an announcement
/// before the cleanup was decided is cleaned, one after is refused.
pub fn family_c() -> Vec<Stimulus> {
    vec![
        Stimulus::Candidate(Candidate::CallerCancel),
        Stimulus::Candidate(Candidate::CallerDisconnect),
        Stimulus::Open,
        Stimulus::ReleaseCancel,
        Stimulus::ReleaseCleanup,
        Stimulus::ReleaseWrite,
    ]
}

/// Family I: a success and a cancel race an announcement and the action
/// answers with the caller present, so the announcement also lands while
/// the terminal is written and after completion.
pub fn family_i() -> Vec<Stimulus> {
    vec![
        Stimulus::Candidate(Candidate::Success),
        Stimulus::Candidate(Candidate::CallerCancel),
        Stimulus::Open,
        Stimulus::ReleaseCancel,
        Stimulus::ReleaseCleanup,
        Stimulus::ReleaseWrite,
    ]
}

/// Runs every order of an announcement family (C or I), starting without a
/// workspace.
pub async fn run_announcements(family: &[Stimulus], tag: &str) -> Vec<Vec<TransitionRecord>> {
    let mut logs = Vec::new();
    for (n, order) in permutations(family).into_iter().enumerate() {
        let name = format!("{tag}-{n}");
        logs.push(run_order(&fresh(), &name, &order, false, n % 2 == 1).await);
    }
    logs
}

/// Runs every order of family C.
pub async fn run_family_c() -> Vec<Vec<TransitionRecord>> {
    run_announcements(&family_c(), "c").await
}

/// Runs every order of `family`. With a workspace, the terminal write
/// fails in every other order (so both delivery paths race every
/// interleaving of the rest); without one, `ReleaseCleanup` is dropped from
/// the family (no cleanup is ever started) and both write variants run.
pub async fn run_family(family: &[Stimulus], tag: &str) -> Vec<Vec<TransitionRecord>> {
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

// ---- the seeded stress run ----

/// splitmix64: small, seedable, good enough to shuffle races.
#[derive(Clone, Copy, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn seed() -> u64 {
    std::env::var("CUSTODIAN_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// The candidates the model's environment can fire: each kind once, the
/// success twice (a duplicate callback).
const POOL: [Candidate; 7] = [
    Candidate::Success,
    Candidate::Success,
    Candidate::ExecutorError { code: EXEC_FAILED },
    Candidate::Timeout,
    Candidate::CallerCancel,
    Candidate::CallerDisconnect,
    Candidate::TerminalWriteFailed,
];

/// Totals over a stress run.
#[derive(Debug, Default)]
pub struct Totals {
    pub requests: u64,
    pub opened: u64,
    pub cleanups: u64,
    pub double_cleanups: u64,
    pub early_completions: u64,
    pub completions: u64,
    pub publications: u64,
}

/// Runs `n` requests concurrently; returns the totals and every log.
pub async fn run(n: usize, seed: u64) -> (Totals, Vec<Vec<TransitionRecord>>) {
    let limits = RequestLimits::new()
        .with_request_timeout(Duration::from_secs(60))
        .with_cleanup_grace(Duration::from_secs(60))
        .with_terminal_write_timeout(Duration::from_secs(60));
    let co = Arc::new(coordinator(
        Gate::open_always(),
        Gate::open_always(),
        Gate::open_always(),
        limits,
    ));
    let mut rng = Rng(seed);
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let mut r = Rng(rng.next());
        let opened = r.below(2) == 0;
        let prefix = match r.below(8) {
            0 | 1 => "fail-",
            2 | 3 => "wfail-",
            _ => "",
        };
        let name = format!("{prefix}s{i}");
        // 1 to 4 distinct candidates from the pool, in random order.
        let mut pool: Vec<Candidate> = POOL.to_vec();
        let k = 1 + r.below(4) as usize;
        let mut picked = Vec::new();
        for _ in 0..k {
            let j = r.below(pool.len() as u64) as usize;
            picked.push(pool.remove(j));
        }
        let abandon = r.below(16) == 0;
        let co = Arc::clone(&co);
        tasks.push(tokio::spawn(async move {
            let ctx = format!(
                "seed={seed} request={name} opened={opened} candidates={picked:?} abandon={abandon}"
            );
            let h = co.start(id(&name));
            if opened {
                h.workspace_opening()
                    .await
                    .unwrap_or_else(|_| panic!("{ctx}: open refused"));
            }
            let observer = h.observer();
            let early = {
                let o = h.observer();
                tokio::spawn(async move { o.finished().await })
            };
            let mut racers = Vec::new();
            for (j, c) in picked.iter().copied().enumerate() {
                let h = h.clone();
                let yields = (r.next() >> (j * 4)) % 4;
                racers.push(tokio::spawn(async move {
                    for _ in 0..yields {
                        tokio::task::yield_now().await;
                    }
                    h.candidate(c);
                }));
            }
            // An abandoned request loses its last handle as soon as the
            // racers' clones are gone, whatever state it is in.
            let keep = (!abandon).then_some(h);
            for racer in racers {
                racer.await.unwrap();
            }
            let c = observer.finished().await;
            drop(keep);
            while !observer.state().is_completed() {
                tokio::task::yield_now().await;
            }
            assert_eq!(early.await.unwrap(), c, "{ctx}: early waiter");
            assert_eq!(observer.finished().await, c, "{ctx}: late waiter");
            let mut allowed: HashSet<Candidate> = picked.iter().copied().collect();
            if abandon {
                allowed.insert(Candidate::CallerDisconnect);
            }
            assert!(
                allowed.contains(&c.result.primary()),
                "{ctx}: primary {:?} was never sent",
                c.result.primary()
            );
            let expected_cleanup = match (opened, name.starts_with("fail-")) {
                (false, _) => CleanupReport::NotNeeded,
                (true, false) => CleanupReport::Cleaned,
                (true, true) => CleanupReport::Failed {
                    code: crate::support::SYMLINK_IN_JOB,
                },
            };
            assert_eq!(c.result.cleanup(), expected_cleanup, "{ctx}");
            let log = observer.log();
            let facts = check_log(&log, &ctx);
            (opened, facts, log)
        }));
    }
    let mut totals = Totals::default();
    let mut logs = Vec::with_capacity(n);
    for t in tasks {
        let (opened, facts, log) = t.await.unwrap_or_else(|e| panic!("seed={seed}: {e}"));
        totals.requests += 1;
        totals.opened += u64::from(opened);
        totals.cleanups += u64::from(facts.start_cleanups);
        totals.double_cleanups += u64::from(facts.start_cleanups > 1);
        totals.completions += u64::from(facts.completed_at.is_some());
        totals.publications += u64::from(facts.publishes);
        if let (Some(done), true) = (facts.completed_at, facts.start_cleanups == 1) {
            totals.early_completions +=
                u64::from(facts.cleanup_finished_at.is_none_or(|c| c > done));
        }
        logs.push(log);
    }
    let counted: u32 = co.lifecycle().total();
    assert_eq!(
        u64::from(counted),
        totals.cleanups,
        "seed={seed}: lifecycle calls vs logged cleanups"
    );
    (totals, logs)
}
