//! loom: racing settlers and waiters on `SettleOnce`.

#[cfg(not(custodian_loom))]
#[test]
#[ignore = "loom tests need RUSTFLAGS=\"--cfg custodian_loom\" (run by .ci/run's loom stage)"]
fn the_loom_models_need_cfg_custodian_loom() {}

#[cfg(custodian_loom)]
mod loom_models {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll};

    use custodian::sync::SettleOnce;
    use custodian::sync::shim::thread;
    use custodian_loom_tests::{explore, noop_waker};

    /// `racers` threads (racer 0 is the model's main thread) each try to
    /// settle with their own index, then wait (blocking for even racers,
    /// async for odd ones): exactly one settles, every refusal names the
    /// winner, every racer reads the winner back.
    fn race(racers: usize, bound: usize) {
        explore(
            &format!("settle_once race, {racers} settlers"),
            bound,
            racers,
            0,
            move |recorder| {
                let cell = SettleOnce::new();
                let attempt = move |cell: SettleOnce<usize>, me: usize| {
                    let refused = cell.settle(me).err().map(|refused| {
                        assert_eq!(refused.rejected, me);
                        refused.winner
                    });
                    let seen = if me % 2 == 0 {
                        cell.wait()
                    } else {
                        loom::future::block_on(cell.wait_async())
                    };
                    (refused, seen)
                };
                let others: Vec<_> = (1..racers)
                    .map(|me| {
                        let cell = cell.clone();
                        thread::spawn(move || attempt(cell, me))
                    })
                    .collect();
                let mut results = vec![attempt(cell.clone(), 0)];
                results.extend(others.into_iter().map(|t| t.join().unwrap()));

                let winner = cell.get().expect("every racer settled or was refused");
                assert_eq!(
                    results
                        .iter()
                        .filter(|(refused, _)| refused.is_none())
                        .count(),
                    1
                );
                assert!(
                    results[winner].0.is_none(),
                    "the stored value is the Ok racer's"
                );
                for (refused, seen) in &results {
                    assert_eq!(*seen, winner);
                    if let Some(told) = refused {
                        assert_eq!(*told, winner);
                    }
                }
                assert_eq!(cell.registered_wakers(), 0);
                recorder.won(winner);
            },
        );
    }

    #[test]
    fn settle_race_two_settlers() {
        race(2, 3);
    }

    #[test]
    fn settle_race_three_settlers() {
        race(3, 3);
    }

    /// Two settlers race while an async waiter that subscribed before, a
    /// blocking waiter, and a waiter that polls once and gives up run
    /// concurrently: the waiters are woken (a lost wake-up would leave loom
    /// with a deadlock), and the abandoned wait leaves no waker behind.
    #[test]
    fn settle_wakes_every_waiter_and_dropped_waits_leave_nothing() {
        explore("settle_once waiters", 3, 2, 0, |recorder| {
            let cell = SettleOnce::new();
            let settlers: Vec<_> = (0..2usize)
                .map(|me| {
                    let cell = cell.clone();
                    thread::spawn(move || cell.settle(me).is_ok())
                })
                .collect();
            let quitter = {
                let cell = cell.clone();
                thread::spawn(move || {
                    let waker = noop_waker();
                    let mut wait = pin!(cell.wait_async());
                    match wait.as_mut().poll(&mut Context::from_waker(&waker)) {
                        Poll::Ready(value) => Some(value),
                        Poll::Pending => None, // gives up: the future is dropped here
                    }
                })
            };
            let seen = loom::future::block_on(cell.wait_async());
            let won: Vec<bool> = settlers.into_iter().map(|t| t.join().unwrap()).collect();
            let quit_seen = quitter.join().unwrap();

            assert_eq!(won.iter().filter(|w| **w).count(), 1);
            let winner = won.iter().position(|w| *w).unwrap();
            assert_eq!(seen, winner);
            assert_eq!(cell.wait(), winner);
            if let Some(value) = quit_seen {
                assert_eq!(value, winner);
            }
            assert_eq!(
                cell.registered_wakers(),
                0,
                "a dropped wait leaked its waker"
            );
            recorder.won(winner);
        });
    }
}
