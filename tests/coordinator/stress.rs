//! 10,000 requests on the multi-threaded runtime with seeded random racing
//! candidates. Set `CUSTODIAN_STRESS_SEED` to replay a failing seed; every
//! assertion message carries the seed.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use custodian::coordinator::{Limits, Record};
use custodian::machine::request::{Candidate, CleanupReport};

use crate::forced_orders::EXEC_FAILED;
use crate::support::{Gate, check_log, coordinator, id};

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
pub async fn run(n: usize, seed: u64) -> (Totals, Vec<Vec<Record>>) {
    let limits = Limits {
        request_timeout: Duration::from_secs(60),
        cleanup_grace: Duration::from_secs(60),
        terminal_write_timeout: Duration::from_secs(60),
    };
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
                h.workspace_opened()
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
                (true, false) => CleanupReport::Succeeded,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_racing_requests_clean_up_exactly_once() {
    let seed = seed();
    eprintln!("stress seed: {seed} (replay with CUSTODIAN_STRESS_SEED={seed})");
    let (t, _) = run(10_000, seed).await;
    eprintln!("stress totals: {t:?}");
    assert_eq!(t.requests, 10_000, "seed={seed}");
    assert_eq!(
        t.cleanups, t.opened,
        "seed={seed}: one cleanup per opened workspace"
    );
    assert_eq!(t.double_cleanups, 0, "seed={seed}");
    assert_eq!(t.early_completions, 0, "seed={seed}");
    assert_eq!(t.completions, 10_000, "seed={seed}");
    assert_eq!(t.publications, 10_000, "seed={seed}");
}
