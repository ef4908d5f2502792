//! loom: racing callers of `Election` and `Elections`.

#[cfg(not(custodian_loom))]
#[test]
#[ignore = "loom tests need RUSTFLAGS=\"--cfg custodian_loom\" (run by .ci/run's loom stage)"]
fn the_loom_models_need_cfg_custodian_loom() {}

#[cfg(custodian_loom)]
mod loom_models {
    use std::future::{Future, IntoFuture};
    use std::pin::pin;
    use std::task::{Context, Poll};

    use custodian::sync::shim::atomic::{AtomicUsize, Ordering};
    use custodian::sync::shim::{Arc, thread};
    use custodian::sync::{Abandoned, Elected, Election, Elections, Outcome, Waiter};
    use custodian_loom_tests::{explore, noop_waker};

    /// Waits blocking for even racers and async for odd ones, so both paths
    /// race in every model.
    fn wait_as(me: usize, waiter: Waiter<usize>) -> Outcome<usize> {
        if me % 2 == 0 {
            waiter.wait()
        } else {
            loom::future::block_on(waiter.into_future())
        }
    }

    /// `racers` callers (racer 0 is the main thread) enter one election; the
    /// owner completes with its index (or, when `abandon`, drops its guard).
    /// Exactly one owns, and every caller observes the owner's outcome.
    fn race(racers: usize, bound: usize, abandon: bool) {
        let name = format!(
            "election race, {racers} callers{}",
            if abandon { ", owner abandons" } else { "" }
        );
        explore(&name, bound, racers, 0, move |recorder| {
            let election = Election::new();
            let enter = move |election: Election<usize>, me: usize| match election.elect() {
                Elected::Owner(guard) => {
                    let waiter = guard.waiter();
                    if abandon {
                        drop(guard);
                    } else {
                        guard.complete(me);
                    }
                    (true, wait_as(me, waiter))
                }
                Elected::Waiter(waiter) => (false, wait_as(me, waiter)),
            };
            let others: Vec<_> = (1..racers)
                .map(|me| {
                    let election = election.clone();
                    thread::spawn(move || enter(election, me))
                })
                .collect();
            let mut results = vec![enter(election.clone(), 0)];
            results.extend(others.into_iter().map(|t| t.join().unwrap()));

            let owners: Vec<usize> = (0..racers).filter(|&i| results[i].0).collect();
            assert_eq!(owners.len(), 1, "{results:?}");
            let expected = if abandon {
                Err(Abandoned)
            } else {
                Ok(owners[0])
            };
            assert!(
                results.iter().all(|(_, seen)| *seen == expected),
                "{results:?}"
            );
            assert_eq!(election.result(), Some(expected));
            recorder.won(owners[0]);
        });
    }

    #[test]
    fn election_race_two_callers() {
        race(2, 3, false);
    }

    #[test]
    fn election_race_three_callers() {
        race(3, 3, false);
    }

    #[test]
    fn election_race_owner_abandons() {
        race(2, 3, true);
    }

    /// The owner hands its guard to a worker thread (as the workspace hands
    /// it to a spawned tokio task) and then gives up waiting after one poll,
    /// as a cancelled caller would. A second caller waits. The work still
    /// completes, the second caller gets its result, and no waker is left.
    #[test]
    fn dropped_waiter_does_not_stop_the_work() {
        explore("election, owner's caller cancelled", 3, 2, 0, |recorder| {
            let election = Election::new();
            let enter = move |election: Election<usize>, me: usize| match election.elect() {
                Elected::Owner(guard) => {
                    let waiter = guard.waiter();
                    let worker = thread::spawn(move || guard.complete(me));
                    let waker = noop_waker();
                    let mut wait = pin!(waiter.into_future());
                    let early = match wait.as_mut().poll(&mut Context::from_waker(&waker)) {
                        Poll::Ready(outcome) => Some(outcome),
                        Poll::Pending => None, // cancelled: the wait is dropped
                    };
                    (Some(worker), early)
                }
                Elected::Waiter(waiter) => (None, Some(wait_as(me, waiter))),
            };
            let other = {
                let election = election.clone();
                thread::spawn(move || enter(election, 1))
            };
            let (worker0, seen0) = enter(election.clone(), 0);
            let (worker1, seen1) = other.join().unwrap();
            let owner = if worker0.is_some() { 0 } else { 1 };
            assert!(worker0.is_some() != worker1.is_some(), "exactly one owner");
            for worker in [worker0, worker1].into_iter().flatten() {
                worker.join().unwrap();
            }
            for seen in [seen0, seen1].into_iter().flatten() {
                assert_eq!(seen, Ok(owner));
            }
            assert_eq!(election.result(), Some(Ok(owner)));
            assert_eq!(election.waiter().wait(), Ok(owner));
            recorder.won(owner);
        });
    }

    /// Keyed elections with a cache of one completed result: two callers
    /// race on key 0 while a third completes key 1, which can evict key 0's
    /// result. Whatever the interleaving: never two owners of a key at once
    /// (an in-flight election is never evicted), each caller observes the
    /// outcome of the owner it followed, and a second owner of key 0 only
    /// appears after the first one's result was evicted (tag 0 counts those
    /// executions, tag 1 those with a single owner).
    #[test]
    fn keyed_eviction_never_overlaps_owners() {
        let exploration = explore("elections, key race with eviction", 3, 2, 2, |recorder| {
            let elections: Elections<u8, usize> = Elections::new(1);
            let active = Arc::new(AtomicUsize::new(0));
            let enter =
                move |elections: Elections<u8, usize>, active: Arc<AtomicUsize>, me: usize| {
                    match elections.elect(0) {
                        Elected::Owner(guard) => {
                            assert_eq!(
                                active.fetch_add(1, Ordering::SeqCst),
                                0,
                                "two owners at once"
                            );
                            let waiter = guard.waiter();
                            active.fetch_sub(1, Ordering::SeqCst);
                            guard.complete(me);
                            (true, waiter.wait())
                        }
                        Elected::Waiter(waiter) => (false, wait_as(me, waiter)),
                    }
                };
            let racer = {
                let (elections, active) = (elections.clone(), Arc::clone(&active));
                thread::spawn(move || enter(elections, active, 1))
            };
            let evictor = {
                let elections = elections.clone();
                thread::spawn(move || match elections.elect(1) {
                    Elected::Owner(guard) => guard.complete(100),
                    Elected::Waiter(_) => panic!("key 1 has a single caller"),
                })
            };
            let results = [
                enter(elections.clone(), Arc::clone(&active), 0),
                racer.join().unwrap(),
            ];
            evictor.join().unwrap();

            let owners: Vec<usize> = (0..2).filter(|&i| results[i].0).collect();
            assert!(!owners.is_empty());
            for (me, (owned, seen)) in results.iter().enumerate() {
                if *owned {
                    assert_eq!(*seen, Ok(me), "an owner observes its own result");
                } else {
                    assert_eq!(owners.len(), 1);
                    assert_eq!(*seen, Ok(owners[0]), "a waiter observes its owner's result");
                }
            }
            assert_eq!(elections.in_flight(), 0);
            assert!(elections.cached() <= 1);
            recorder.won(owners[0]);
            recorder.tag(if owners.len() == 2 { 0 } else { 1 });
        });
        assert!(
            exploration.tags[0] > 0,
            "re-election after eviction was never explored"
        );
        assert!(
            exploration.tags[1] > 0,
            "a shared election was never explored"
        );
    }

    /// Keyed elections where the first attempt could not run (its owner
    /// completes with `complete_transient`): two callers each enter until
    /// they get a final result. Whatever the interleaving: never two owners
    /// of the key at once, exactly two attempts (the transient one and one
    /// final one: a final result is cached, never run again), a caller that
    /// received the transient result and enters again meets a new attempt
    /// (never the old result), and both callers end with the final result. Tag 0 counts executions where a
    /// waiter of the first attempt received its transient answer, tag 1
    /// those where none did.
    #[test]
    fn keyed_transient_retry_never_overlaps_owners() {
        const COULD_NOT_RUN: usize = 100;
        let exploration = explore("elections, transient then retry", 3, 2, 2, |recorder| {
            let elections: Elections<u8, usize> = Elections::new(4);
            let active = Arc::new(AtomicUsize::new(0));
            let attempts = Arc::new(AtomicUsize::new(0));
            let enter = move |elections: Elections<u8, usize>,
                              active: Arc<AtomicUsize>,
                              attempts: Arc<AtomicUsize>,
                              me: usize| {
                let mut saw_transient_as_waiter = false;
                let mut final_owner = false;
                // The second entry must meet a new attempt: a transient
                // result is forgotten before anyone can receive it.
                for _ in 0..2 {
                    let seen = match elections.elect(0) {
                        Elected::Owner(guard) => {
                            assert_eq!(
                                active.fetch_add(1, Ordering::SeqCst),
                                0,
                                "two owners at once"
                            );
                            let attempt = attempts.fetch_add(1, Ordering::SeqCst);
                            let waiter = guard.waiter();
                            active.fetch_sub(1, Ordering::SeqCst);
                            if attempt == 0 {
                                guard.complete_transient(COULD_NOT_RUN);
                            } else {
                                final_owner = true;
                                guard.complete(attempt);
                            }
                            wait_as(me, waiter)
                        }
                        Elected::Waiter(waiter) => {
                            let seen = wait_as(me, waiter);
                            saw_transient_as_waiter |= seen == Ok(COULD_NOT_RUN);
                            seen
                        }
                    };
                    if seen != Ok(COULD_NOT_RUN) {
                        return (seen, final_owner, saw_transient_as_waiter);
                    }
                }
                panic!("a caller that received the transient result met it again");
            };
            let racer = {
                let (elections, active, attempts) = (
                    elections.clone(),
                    Arc::clone(&active),
                    Arc::clone(&attempts),
                );
                thread::spawn(move || enter(elections, active, attempts, 1))
            };
            let results = [
                enter(
                    elections.clone(),
                    Arc::clone(&active),
                    Arc::clone(&attempts),
                    0,
                ),
                racer.join().unwrap(),
            ];
            assert_eq!(attempts.load(Ordering::SeqCst), 2, "{results:?}");
            for (seen, ..) in &results {
                assert_eq!(*seen, Ok(1), "{results:?}");
            }
            let owners: Vec<usize> = (0..2).filter(|&i| results[i].1).collect();
            assert_eq!(owners.len(), 1, "{results:?}");
            assert_eq!(elections.result(&0), Some(Ok(1)));
            assert_eq!(elections.in_flight(), 0);
            recorder.won(owners[0]);
            recorder.tag(if results.iter().any(|r| r.2) { 0 } else { 1 });
        });
        assert!(
            exploration.tags[0] > 0,
            "a waiter of the transient attempt was never explored"
        );
        assert!(
            exploration.tags[1] > 0,
            "a retry without a waiter was never explored"
        );
    }
}
