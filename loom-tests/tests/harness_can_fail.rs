//! loom: the harness is able to fail.
//!
//! Each test here runs a deliberately broken cell, written with the same shim
//! types as the real one, through the same kind of model as
//! `settle_once.rs` (or, for the runtime's races, through the very model
//! functions of `runtime.rs`), and expects loom (or the model's assertions)
//! to catch the bug. If one of these stops panicking, the real tests prove
//! nothing.

#[cfg(not(custodian_loom))]
#[test]
#[ignore = "loom tests need RUSTFLAGS=\"--cfg custodian_loom\" (run by .ci/run's loom stage)"]
fn the_loom_models_need_cfg_custodian_loom() {}

#[cfg(custodian_loom)]
mod loom_models {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    use custodian::sync::shim::{self, Arc, Mutex, thread};
    use custodian_loom_tests::explore;

    /// Broken: checks for a winner and stores the value in two separate
    /// critical sections, so two settlers can both "win".
    struct CheckThenSetCell(Mutex<Option<usize>>);

    impl CheckThenSetCell {
        fn settle(&self, value: usize) -> bool {
            if shim::lock(&self.0).is_some() {
                return false;
            }
            *shim::lock(&self.0) = Some(value);
            true
        }
    }

    #[test]
    #[should_panic(expected = "exactly one settler wins")]
    fn two_winners_are_caught() {
        explore("broken: check-then-set", 2, 2, 0, |recorder| {
            let cell = Arc::new(CheckThenSetCell(Mutex::new(None)));
            let other = {
                let cell = Arc::clone(&cell);
                thread::spawn(move || cell.settle(1))
            };
            let won = [cell.settle(0), other.join().unwrap()];
            assert_eq!(
                won.iter().filter(|w| **w).count(),
                1,
                "exactly one settler wins"
            );
            recorder.won(won.iter().position(|w| *w).unwrap());
        });
    }

    /// Broken: the value and the waker list have separate locks, so a waiter
    /// can see "unsettled", the settler can then store and wake nobody, and
    /// the waiter registers too late: a lost wake-up, which loom reports as
    /// a deadlock.
    #[derive(Default)]
    struct SplitLockCell {
        value: Mutex<Option<usize>>,
        wakers: Mutex<Vec<Waker>>,
    }

    impl SplitLockCell {
        fn settle(&self, value: usize) {
            *shim::lock(&self.value) = Some(value);
            for waker in shim::lock(&self.wakers).drain(..) {
                waker.wake();
            }
        }
    }

    struct Wait(Arc<SplitLockCell>);

    impl Future for Wait {
        type Output = usize;

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            if let Some(value) = *shim::lock(&self.0.value) {
                return Poll::Ready(value);
            }
            shim::lock(&self.0.wakers).push(cx.waker().clone());
            Poll::Pending
        }
    }

    /// Set in the child process that runs the lost-wake-up model.
    const CHILD: &str = "CUSTODIAN_LOOM_BROKEN_CHILD";

    /// loom reports the deadlock by panicking, then aborts the process while
    /// unwinding its blocked threads, so `#[should_panic]` cannot observe it:
    /// the model runs in a child process whose failure and message we check.
    #[test]
    fn lost_wake_up_is_caught() {
        if std::env::var_os(CHILD).is_some() {
            explore("broken: split-lock waker list", 2, 1, 0, |recorder| {
                let cell = Arc::new(SplitLockCell::default());
                let settler = {
                    let cell = Arc::clone(&cell);
                    thread::spawn(move || cell.settle(0))
                };
                assert_eq!(loom::future::block_on(Wait(Arc::clone(&cell))), 0);
                settler.join().unwrap();
                recorder.won(0);
            });
            return;
        }
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "loom_models::lost_wake_up_is_caught",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&child.stderr);
        assert!(!child.status.success(), "the lost wake-up went unnoticed");
        assert!(stderr.contains("deadlock"), "unexpected failure: {stderr}");
        println!("loom broken: split-lock waker list: caught (child reported a deadlock)");
    }

    #[test]
    #[should_panic(expected = "racer 1 never won")]
    fn a_racer_that_never_wins_is_caught() {
        explore("broken: racer 1 never wins", 2, 2, 0, |recorder| {
            let cell = custodian::sync::SettleOnce::new();
            let other = {
                let cell = cell.clone();
                thread::spawn(move || cell.settle(1).is_ok())
            };
            let _ = cell.settle(0);
            let _ = other.join().unwrap();
            // Records a fixed racer instead of the real winner.
            recorder.won(0);
        });
    }

    // -----------------------------------------------------------------
    // The runtime's races: broken uses of the real primitives, run
    // through the same model functions as `runtime.rs`.
    // -----------------------------------------------------------------

    use custodian::sync::shim::atomic::{AtomicUsize, Ordering};
    use custodian::sync::{
        Applied, CommitLog, Elected, Elections, OpenRefusal, OwnerGuard, SlotEffect, Slots,
    };
    use custodian_loom_tests::runtime::{
        CommitCell, Decision, HeldTable, Input, Op, Rec, Report, Roots, Slot, SlotTable, Verdict,
        cancel_races_open, cleanup_races_eviction, direct_commit_races_the_actor, node_step,
        open_races_cleanup_of_unknown, scan_races_spawn, step,
    };

    /// Broken: the actor lowers the pending count *before* it commits the
    /// input, so a handle can see zero and commit its "opened" ahead of the
    /// candidate it sent earlier.
    struct LoweredBeforeCommit {
        log: CommitLog<u32, Rec>,
        pending: AtomicUsize,
    }

    impl CommitCell for LoweredBeforeCommit {
        fn create() -> Self {
            Self {
                log: CommitLog::new(0),
                pending: AtomicUsize::new(0),
            }
        }
        fn send(&self, send: impl FnOnce()) {
            self.pending.fetch_add(1, Ordering::SeqCst);
            send();
        }
        fn commit_sent(&self, input: Input) {
            self.pending.fetch_sub(1, Ordering::SeqCst);
            self.log.commit(step(input));
        }
        fn commit(&self, input: Input) {
            self.log.commit(step(input));
        }
        fn commit_direct(&self, input: Input) -> bool {
            if self.pending.load(Ordering::SeqCst) != 0 {
                return false;
            }
            self.log.commit(step(input));
            true
        }
        fn log(&self) -> Vec<Rec> {
            self.log.log()
        }
        fn pending(&self) -> usize {
            self.pending.load(Ordering::SeqCst)
        }
    }

    #[test]
    #[should_panic(expected = "a direct commit overtook its own earlier candidate")]
    fn direct_commit_overtaking_a_candidate_is_caught() {
        direct_commit_races_the_actor::<LoweredBeforeCommit>(
            "broken: pending lowered before the commit",
            2,
        );
    }

    /// Broken: reads a key's state in one critical section and stores the
    /// decision's next state in another (as a node with its state in one
    /// table and its decisions taken outside the lock would), so a racing
    /// cancel or cleanup is overwritten or decided on a stale state.
    #[derive(Clone)]
    struct StaleSlots(Slots<u8, Slot, Report>);

    impl SlotTable for StaleSlots {
        fn create(capacity: usize) -> Self {
            Self(Slots::new(capacity))
        }
        fn apply(&self, key: u8, op: Op) -> Applied<Report, Decision> {
            let seen = self.0.get(&key);
            let decided = node_step(seen.as_ref(), op);
            self.0.apply(&key, |_| decided)
        }
        fn get(&self, key: u8) -> Option<Slot> {
            self.0.get(&key)
        }
    }

    #[test]
    #[should_panic(expected = "the cancel's fence was lost")]
    fn open_overwriting_a_cancel_is_caught() {
        cancel_races_open::<StaleSlots>("broken: stale slot decision, cancel vs open", 3);
    }

    /// Broken: elects the cleanup on the current state, but decides its
    /// form (real removal or idempotent check) on a snapshot read before
    /// the election, as a node that looks its request up and then enters
    /// the election would. A snapshot from before an eviction says "open".
    #[derive(Clone)]
    struct SnapshotFormSlots(Slots<u8, Slot, Report>);

    impl SlotTable for SnapshotFormSlots {
        fn create(capacity: usize) -> Self {
            Self(Slots::new(capacity))
        }
        fn apply(&self, key: u8, op: Op) -> Applied<Report, Decision> {
            let form = node_step(self.0.get(&key).as_ref(), op).decision;
            self.0.apply(&key, |slot| {
                let mut fresh = node_step(slot, op);
                if op == Op::Cleanup && fresh.effect == SlotEffect::StartCleanup {
                    fresh.decision = form;
                }
                fresh
            })
        }
        fn get(&self, key: u8) -> Option<Slot> {
            self.0.get(&key)
        }
    }

    #[test]
    #[should_panic(expected = "key 0 removed 2 times")]
    fn a_cleanup_form_decided_before_eviction_is_caught() {
        cleanup_races_eviction::<SnapshotFormSlots>(
            "broken: cleanup form from a snapshot, cleanup vs eviction",
            2,
        );
    }

    /// Broken: clones without the lock and registers afterwards, with no
    /// count of launches in flight, so a scan can run between a root's
    /// clone and its registration.
    #[derive(Default)]
    struct RegisterAfterSpawn(Mutex<Vec<u32>>);

    impl Roots for RegisterAfterSpawn {
        fn spawn_root(&self, spawn: &mut dyn FnMut() -> u32) {
            let pid = spawn();
            shim::lock(&self.0).push(pid);
        }
        fn scan_roots(&self, f: &mut dyn FnMut(&[u32])) {
            f(&shim::lock(&self.0));
        }
    }

    #[test]
    #[should_panic(expected = "a fresh root taken for an adopted descendant")]
    fn a_scan_between_clone_and_registration_is_caught() {
        scan_races_spawn::<RegisterAfterSpawn>("broken: register after an unlocked clone", 2);
    }

    /// Broken: the workspace's former ordering. The requests and the
    /// cleanup elections are two tables; an open is refused only once the
    /// id's cleanup result is filed, and the cleanup task forgets the
    /// request only after filing it. A cleanup that found nothing can then
    /// report the id gone while an open creates its job directory, and its
    /// late removal can forget a request opened after the result.
    #[derive(Clone)]
    struct FencedByFiledResult {
        requests: Arc<Mutex<std::collections::HashMap<u8, ()>>>,
        elections: Elections<u8, Verdict>,
    }

    impl HeldTable for FencedByFiledResult {
        fn create(capacity: usize) -> Self {
            Self {
                requests: Arc::new(Mutex::new(std::collections::HashMap::new())),
                elections: Elections::new(capacity),
            }
        }
        fn open(&self, key: u8, make: &mut dyn FnMut()) -> Result<(), OpenRefusal> {
            let mut requests = shim::lock(&self.requests);
            if self.elections.result(&key).is_some() {
                return Err(OpenRefusal::Cleaned);
            }
            if requests.contains_key(&key) {
                return Err(OpenRefusal::Held);
            }
            make();
            requests.insert(key, ());
            Ok(())
        }
        fn elect(&self, key: u8) -> Elected<Verdict> {
            self.elections.elect(key)
        }
        fn find(&self, _owner: &OwnerGuard<Verdict>, key: u8) -> bool {
            shim::lock(&self.requests).contains_key(&key)
        }
        fn complete(&self, key: u8, owner: OwnerGuard<Verdict>, verdict: Verdict) {
            owner.complete(verdict);
            shim::lock(&self.requests).remove(&key);
        }
        fn held(&self, key: u8) -> bool {
            shim::lock(&self.requests).contains_key(&key)
        }
    }

    #[test]
    #[should_panic(expected = "an open succeeded while the cleanup of the id found nothing")]
    fn an_open_fenced_only_by_a_filed_result_is_caught() {
        open_races_cleanup_of_unknown::<FencedByFiledResult>(
            "broken: opens fenced by the filed result, open vs cleanup of an unknown id",
            3,
            1,
        );
    }

    #[test]
    #[should_panic(expected = "a job directory is left that no request holds")]
    fn a_request_forgotten_after_its_result_is_caught() {
        open_races_cleanup_of_unknown::<FencedByFiledResult>(
            "broken: opens fenced by the filed result, nothing cached",
            3,
            0,
        );
    }
}
