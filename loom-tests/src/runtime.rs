//! The runtime's races, written once over small traits so the same model
//! runs against the real primitives (`tests/runtime.rs`) and against
//! deliberately broken ones (`tests/harness_can_fail.rs`).
//!
//! - [`direct_commit_races_the_actor`]: the coordinator's per-request
//!   [`CommitLog`]: an actor commits what two handles send, while each
//!   handle tries the direct commit of its "opened" report.
//! - [`cancel_races_open`]: a node's [`Slots`]: an open (decide, open the
//!   workspace, decide again) races a cancel; then the request is cleaned up.
//! - [`cleanup_races_eviction`]: two cleanups of one opened key race a
//!   cleanup of another key that can evict the first one's result.
//! - [`node_cancel_and_cleanup_race_open`] and [`node_cleanup_races_eviction`]:
//!   the same two node races with the node's real decisions
//!   (`machine::node::step` through `wire::node_row_step`, the glue the
//!   node itself uses: its row carries the open request's scope, filed by
//!   the open's success and dropped by the cleanup's end) on the real
//!   `Slots`.
//! - [`open_races_cleanup_of_unknown`]: a workspace's [`Holdings`]: an open
//!   of a request races a cleanup of the same id that holds nothing for it
//!   yet (the embedder's facade announces the workspace, then opens it; a
//!   cancel's cleanup can run in between).

use std::collections::VecDeque;
use std::sync::Arc as StdArc;
use std::sync::atomic::{AtomicUsize as StdAtomicUsize, Ordering as StdOrdering};

use custodian::machine::node;
use custodian::sync::shim::atomic::AtomicBool;
use custodian::sync::shim::atomic::Ordering as LoomOrdering;
use custodian::sync::shim::{self, Arc, Condvar, Mutex, thread};
use custodian::sync::{
    Applied, Commit, CommitLog, Elected, Holdings, OpenRefusal, OwnerGuard, SlotEffect, SlotStep,
    Slots,
};
use custodian::wire::{NodeRow, node_row_retry, node_row_step};

use crate::{Exploration, explore};

// ---------------------------------------------------------------------------
// The coordinator: direct commit vs. the actor
// ---------------------------------------------------------------------------

/// An input of the request model: handle `h`'s candidate, the actor's
/// answer to it, and handle `h`'s "workspace opened" report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// Handle `h` reported a terminal candidate.
    Candidate(u8),
    /// The actor's own follow-up to candidate `h` (never sent).
    Answer(u8),
    /// Handle `h` reported that it opened the workspace.
    Opened(u8),
}

/// One committed step: its index, the state before and after (the state
/// counts commits), and the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rec {
    /// Position the step function was given.
    pub index: usize,
    /// State the step function read.
    pub before: u32,
    /// The input committed.
    pub input: Input,
    /// State committed.
    pub after: u32,
}

/// The step function of the request model.
pub fn step(input: Input) -> impl FnOnce(&u32, usize) -> Commit<u32, Rec, ()> {
    move |state, index| Commit {
        next: state + 1,
        record: Rec {
            index,
            before: *state,
            input,
            after: state + 1,
        },
        output: (),
    }
}

/// The commit cell as the coordinator uses it (the methods of [`CommitLog`]).
pub trait CommitCell: Send + Sync + 'static {
    /// A cell at state 0.
    fn create() -> Self;
    /// Counts an input as pending, then sends it with `send`.
    fn send(&self, send: impl FnOnce());
    /// The actor commits an input that was sent.
    fn commit_sent(&self, input: Input);
    /// The actor commits an input of its own.
    fn commit(&self, input: Input);
    /// A handle commits `input` itself if nothing sent is pending.
    fn commit_direct(&self, input: Input) -> bool;
    /// Every record so far.
    fn log(&self) -> Vec<Rec>;
    /// Inputs sent and not committed.
    fn pending(&self) -> usize;
}

impl CommitCell for CommitLog<u32, Rec> {
    fn create() -> Self {
        CommitLog::new(0)
    }
    fn send(&self, send: impl FnOnce()) {
        let sent: Result<(), ()> = CommitLog::send(self, || {
            send();
            Ok(())
        });
        sent.unwrap();
    }
    fn commit_sent(&self, input: Input) {
        CommitLog::commit_sent(self, step(input));
    }
    fn commit(&self, input: Input) {
        CommitLog::commit(self, step(input));
    }
    fn commit_direct(&self, input: Input) -> bool {
        CommitLog::commit_direct(self, step(input)).is_some()
    }
    fn log(&self) -> Vec<Rec> {
        CommitLog::log(self)
    }
    fn pending(&self) -> usize {
        CommitLog::pending(self)
    }
}

/// The actor's inbox: a queue and the number of handles still alive (the
/// unbounded channel of the coordinator, built on the shim's mutex and
/// condition variable so loom schedules it).
struct Inbox {
    queue: Mutex<(VecDeque<Input>, usize)>,
    ready: Condvar,
}

impl Inbox {
    fn new(handles: usize) -> Self {
        Self {
            queue: Mutex::new((VecDeque::new(), handles)),
            ready: Condvar::new(),
        }
    }

    fn push(&self, input: Input) {
        shim::lock(&self.queue).0.push_back(input);
        self.ready.notify_one();
    }

    fn hang_up(&self) {
        shim::lock(&self.queue).1 -= 1;
        self.ready.notify_one();
    }

    /// The next input, or `None` once the queue is empty and every handle
    /// hung up.
    fn recv(&self) -> Option<Input> {
        let mut queue = shim::lock(&self.queue);
        loop {
            if let Some(input) = queue.0.pop_front() {
                return Some(input);
            }
            if queue.1 == 0 {
                return None;
            }
            queue = shim::wait(&self.ready, queue);
        }
    }
}

/// A handle reports "opened" as `RequestHandle::workspace_opened` does:
/// directly if nothing is pending, else through the actor. Returns true if
/// it committed directly.
fn report_opened<C: CommitCell>(cell: &C, inbox: &Inbox, h: u8) -> bool {
    if cell.commit_direct(Input::Opened(h)) {
        return true;
    }
    cell.send(|| inbox.push(Input::Opened(h)));
    false
}

/// Handles 1 and 2 (the main thread) each send a candidate and then report
/// "opened"; the actor commits every sent input and,
/// after each candidate, its own answer. Checked in every execution: the
/// log is one chain (each record's `before` is the previous `after`, its
/// index its position), every input is committed exactly once, nothing is
/// left pending, and each handle's "opened" is committed after its own
/// candidate.
///
/// Racer 0 wins when handle 1 committed its "opened" directly, racer 1 when
/// it went through the actor: both paths must be explored. Tag 0 counts
/// executions where handle 2 committed directly, tag 1 where it was sent.
pub fn direct_commit_races_the_actor<C: CommitCell>(name: &str, bound: usize) -> Exploration {
    let exploration = explore(name, bound, 2, 2, |recorder| {
        let cell = Arc::new(C::create());
        let inbox = Arc::new(Inbox::new(2));
        let actor = {
            let (cell, inbox) = (Arc::clone(&cell), Arc::clone(&inbox));
            thread::spawn(move || {
                while let Some(input) = inbox.recv() {
                    cell.commit_sent(input);
                    if let Input::Candidate(h) = input {
                        cell.commit(Input::Answer(h));
                    }
                }
            })
        };
        let handle = {
            let (cell, inbox) = (Arc::clone(&cell), Arc::clone(&inbox));
            thread::spawn(move || {
                cell.send(|| inbox.push(Input::Candidate(1)));
                let direct = report_opened(&*cell, &inbox, 1);
                inbox.hang_up();
                direct
            })
        };
        cell.send(|| inbox.push(Input::Candidate(2)));
        let second_direct = report_opened(&*cell, &inbox, 2);
        inbox.hang_up();
        let first_direct = handle.join().unwrap();
        actor.join().unwrap();

        let log = cell.log();
        let mut before = 0;
        for (position, record) in log.iter().enumerate() {
            assert_eq!(record.index, position, "log index out of place: {log:?}");
            assert_eq!(record.before, before, "the log is not one chain: {log:?}");
            before = record.after;
        }
        let at = |input: Input| {
            let found: Vec<usize> = (0..log.len()).filter(|&i| log[i].input == input).collect();
            assert_eq!(found.len(), 1, "{input:?} not committed once: {log:?}");
            found[0]
        };
        assert!(
            at(Input::Candidate(1)) < at(Input::Opened(1)),
            "a direct commit overtook its own earlier candidate: {log:?}"
        );
        assert!(
            at(Input::Candidate(2)) < at(Input::Opened(2)),
            "a direct commit overtook its own earlier candidate: {log:?}"
        );
        for h in [1, 2] {
            assert!(at(Input::Candidate(h)) < at(Input::Answer(h)));
        }
        assert_eq!(log.len(), 6, "{log:?}");
        assert_eq!(cell.pending(), 0, "an input left pending");
        recorder.won(if first_direct { 0 } else { 1 });
        recorder.tag(if second_direct { 0 } else { 1 });
    });
    assert!(exploration.tags.iter().all(|&t| t > 0), "{exploration:?}");
    exploration
}

// ---------------------------------------------------------------------------
// The node: a slot per request
// ---------------------------------------------------------------------------

/// A request's state on the test node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// An open is in progress.
    Opening,
    /// Opened; work is accepted.
    Open,
    /// Cancelled: nothing new is accepted. `opened`: a workspace exists.
    Fenced {
        /// Whether the workspace was created.
        opened: bool,
    },
    /// Cleanup elected. `opened`: a workspace existed when it was.
    Closed {
        /// Whether the workspace was created.
        opened: bool,
    },
}

/// An operation on one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Asked to open.
    Open,
    /// The workspace was created for an open that was allowed to proceed.
    OpenDone,
    /// Asked to cancel.
    Cancel,
    /// Asked to clean up (only through [`SlotTable::cleanup`]).
    Cleanup,
}

/// What the node does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Create the workspace, then report [`Op::OpenDone`].
    Proceed,
    /// The open is answered "opened".
    Accepted,
    /// The open is refused (answered an error).
    Refused,
    /// The cancel is acknowledged.
    Cancelled,
    /// Cleanup: remove the workspace for real.
    Remove,
    /// Cleanup: the idempotent form, which checks that nothing is left and
    /// never removes anything.
    CheckGone,
}

/// The test's node decision function: opens are refused once a cancel or a
/// cleanup started; an open that was in flight when a cancel fenced the
/// request is refused when it finishes (its workspace is then cleaned);
/// the first cleanup starts it, later ones wait for it; cleanup removes for
/// real only a request known to hold a workspace, so an unknown (never seen
/// or evicted) one gets the idempotent form.
pub fn node_step(slot: Option<&Slot>, op: Op) -> SlotStep<Slot, Decision> {
    use Decision::*;
    let (next, decision, effect) = match (slot.copied(), op) {
        (None, Op::Open) => (Slot::Opening, Proceed, SlotEffect::None),
        (Some(Slot::Open), Op::Open) => (Slot::Open, Accepted, SlotEffect::None),
        (Some(s), Op::Open) => (s, Refused, SlotEffect::None),
        (Some(Slot::Opening), Op::OpenDone) => (Slot::Open, Accepted, SlotEffect::None),
        (Some(Slot::Fenced { .. }), Op::OpenDone) => {
            (Slot::Fenced { opened: true }, Refused, SlotEffect::None)
        }
        (Some(Slot::Closed { .. }), Op::OpenDone) => {
            (Slot::Closed { opened: true }, Refused, SlotEffect::None)
        }
        (s @ (None | Some(Slot::Open)), Op::OpenDone) => {
            unreachable!("OpenDone without a pending open: {s:?}")
        }
        (None | Some(Slot::Opening), Op::Cancel) => {
            (Slot::Fenced { opened: false }, Cancelled, SlotEffect::None)
        }
        (Some(Slot::Open), Op::Cancel) => {
            (Slot::Fenced { opened: true }, Cancelled, SlotEffect::None)
        }
        (Some(s @ (Slot::Fenced { .. } | Slot::Closed { .. })), Op::Cancel) => {
            (s, Cancelled, SlotEffect::None)
        }
        (Some(s @ Slot::Closed { .. }), Op::Cleanup) => (s, CheckGone, SlotEffect::AwaitCleanup),
        // (The models never clean up while an open runs.)
        (Some(Slot::Open | Slot::Opening | Slot::Fenced { opened: true }), Op::Cleanup) => (
            Slot::Closed { opened: true },
            Remove,
            SlotEffect::StartCleanup,
        ),
        (None | Some(Slot::Fenced { opened: false }), Op::Cleanup) => (
            Slot::Closed { opened: false },
            CheckGone,
            SlotEffect::StartCleanup,
        ),
    };
    SlotStep {
        next: Some(next),
        decision,
        effect,
    }
}

/// A cleanup's published result: who owned it and what it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    /// The owner's racer index.
    pub owner: usize,
    /// Its decision.
    pub decision: Decision,
}

/// The slot table as the node uses it (the methods of [`Slots`]).
pub trait SlotTable: Clone + Send + Sync + 'static {
    /// A table remembering `capacity` finished keys.
    fn create(capacity: usize) -> Self;
    /// Applies `op` to `key` through [`node_step`].
    fn apply(&self, key: u8, op: Op) -> Applied<Report, Decision>;
    /// `key`'s state.
    fn get(&self, key: u8) -> Option<Slot>;
}

impl SlotTable for Slots<u8, Slot, Report> {
    fn create(capacity: usize) -> Self {
        Slots::new(capacity)
    }
    fn apply(&self, key: u8, op: Op) -> Applied<Report, Decision> {
        Slots::apply(self, &key, |slot| node_step(slot, op))
    }
    fn get(&self, key: u8) -> Option<Slot> {
        Slots::get(self, &key)
    }
}

/// Applies an operation that touches no cleanup and returns its decision.
fn decide<T: SlotTable>(table: &T, key: u8, op: Op) -> Decision {
    let applied = table.apply(key, op);
    assert!(applied.cleanup.is_none(), "{op:?} got a cleanup handle");
    applied.decision
}

/// Counts real removals per key, outside loom's control (one per execution).
#[derive(Default)]
struct Removals([StdAtomicUsize; 2]);

impl Removals {
    fn note(&self, key: u8, decision: Decision) {
        if decision == Decision::Remove {
            self.0[usize::from(key)].fetch_add(1, StdOrdering::SeqCst);
        }
    }
    fn of(&self, key: u8) -> usize {
        self.0[usize::from(key)].load(StdOrdering::SeqCst)
    }
}

/// Asks for `key`'s cleanup as racer `me`: an owner does what was decided
/// and publishes; everyone returns (owned, the report it observed).
fn clean<T: SlotTable>(table: &T, removals: &Removals, key: u8, me: usize) -> (bool, Report) {
    let applied = table.apply(key, Op::Cleanup);
    match applied.cleanup {
        Some(Elected::Owner(guard)) => {
            removals.note(key, applied.decision);
            let waiter = guard.waiter();
            guard.complete(Report {
                owner: me,
                decision: applied.decision,
            });
            (true, waiter.wait().expect("the owner completed"))
        }
        Some(Elected::Waiter(waiter)) => (false, waiter.wait().expect("the owner completed")),
        None => panic!("a cleanup got no cleanup handle"),
    }
}

/// Two opens of one request (the edge's open and a retry of it: decide;
/// create the workspace; decide again) race a cancel; afterwards the request
/// is cleaned up and opened once more. Checked in every execution:
///
/// - at most one open proceeds to create the workspace;
/// - the cancel's fence holds: the state after all three is fenced and
///   remembers whether a workspace was created, and the later open is
///   refused (never "open accepted after cancel fenced");
/// - a duplicate open is accepted only if the proceeding one was;
/// - the cleanup removes for real exactly when a workspace was created (one
///   removal) and runs the idempotent form otherwise: nothing is left and
///   nothing is removed twice.
///
/// Racer 0 wins when some open was accepted, racer 1 when none was. The
/// tags are the three interleaving classes, each with one outcome: 0 — the
/// cancel came before any open (both refused, nothing created, check only);
/// 1 — the cancel landed while the workspace was being created (refused
/// when done, created, removed); 2 — an open finished first (accepted,
/// created, removed). All three must occur.
pub fn cancel_races_open<T: SlotTable>(name: &str, bound: usize) -> Exploration {
    let exploration = explore(name, bound, 2, 3, |recorder| {
        let table = T::create(4);
        let created = StdArc::new(StdAtomicUsize::new(0));
        let openers: Vec<_> = (0..2)
            .map(|_| {
                let (table, created) = (table.clone(), StdArc::clone(&created));
                thread::spawn(move || match decide(&table, 0, Op::Open) {
                    Decision::Proceed => {
                        created.fetch_add(1, StdOrdering::SeqCst);
                        (true, decide(&table, 0, Op::OpenDone))
                    }
                    other => (false, other),
                })
            })
            .collect();
        assert_eq!(decide(&table, 0, Op::Cancel), Decision::Cancelled);
        let answers: Vec<(bool, Decision)> =
            openers.into_iter().map(|t| t.join().unwrap()).collect();

        let created = created.load(StdOrdering::SeqCst);
        let proceeded: Vec<Decision> = answers.iter().filter(|a| a.0).map(|a| a.1).collect();
        assert_eq!(proceeded.len(), created, "{answers:?}");
        assert!(created <= 1, "the workspace was opened twice: {answers:?}");
        let state = table.get(0);
        assert_eq!(
            state,
            Some(Slot::Fenced {
                opened: created == 1
            }),
            "the cancel's fence was lost, or forgot a created workspace: {answers:?}"
        );
        assert_eq!(
            decide(&table, 0, Op::Open),
            Decision::Refused,
            "open accepted after cancel fenced"
        );
        let accepted = answers.iter().any(|a| a.1 == Decision::Accepted);
        if accepted {
            assert_eq!(proceeded, [Decision::Accepted], "{answers:?}");
        }

        let removals = Removals::default();
        let (owned, report) = clean(&table, &removals, 0, 0);
        assert!(owned);
        let expected = if created == 1 {
            Decision::Remove
        } else {
            Decision::CheckGone
        };
        assert_eq!(report.decision, expected, "{answers:?}");
        assert_eq!(removals.of(0), created, "a workspace left or removed twice");

        let class = match proceeded.first() {
            None => 0,
            Some(Decision::Refused) => 1,
            Some(Decision::Accepted) => 2,
            Some(other) => panic!("an open ended outside every class: {other:?}"),
        };
        recorder.won(usize::from(!accepted));
        recorder.tag(class);
    });
    assert!(exploration.tags.iter().all(|&t| t > 0), "{exploration:?}");
    exploration
}

/// Key 0 holds an opened workspace. Two racers clean it up while a third
/// (the main thread) cleans up key 1, which was never opened; the table
/// caches one completed cleanup, so key 1's completion can evict key 0's
/// result. Checked in every execution:
///
/// - key 0's workspace is removed for real exactly once, key 1's never;
/// - a second owner of key 0 appears only after the first one's result was
///   evicted, and then runs the idempotent form only;
/// - every waiter observes the report of an owner of its key, and the first
///   owner's report is a real removal.
///
/// Racer 0 or 1 wins when it owned key 0's first cleanup. Tag 0 counts the
/// executions with a re-election after eviction, tag 1 those where both
/// racers shared one cleanup; both must occur.
pub fn cleanup_races_eviction<T: SlotTable>(name: &str, bound: usize) -> Exploration {
    let exploration = explore(name, bound, 2, 2, |recorder| {
        let table = T::create(1);
        assert_eq!(decide(&table, 0, Op::Open), Decision::Proceed);
        assert_eq!(decide(&table, 0, Op::OpenDone), Decision::Accepted);
        let removals = StdArc::new(Removals::default());
        let racer = {
            let (table, removals) = (table.clone(), StdArc::clone(&removals));
            thread::spawn(move || clean(&table, &removals, 0, 1))
        };
        let evictor = {
            let (table, removals) = (table.clone(), StdArc::clone(&removals));
            thread::spawn(move || clean(&table, &removals, 1, 2))
        };
        let mine = clean(&table, &removals, 0, 0);
        let theirs = racer.join().unwrap();
        let (evictor_owned, evictor_report) = evictor.join().unwrap();

        assert_eq!(removals.of(0), 1, "key 0 removed {} times", removals.of(0));
        assert_eq!(removals.of(1), 0, "a never-opened key was removed");
        assert!(evictor_owned);
        assert_eq!(evictor_report.decision, Decision::CheckGone);
        let results = [mine, theirs];
        let owners: Vec<usize> = (0..2).filter(|&i| results[i].0).collect();
        assert!(!owners.is_empty());
        for (me, (owned, report)) in results.iter().enumerate() {
            if *owned {
                assert_eq!(report.owner, me, "an owner observes its own report");
            } else {
                assert_eq!(owners.len(), 1, "{results:?}");
                assert_eq!(
                    report.owner, owners[0],
                    "a waiter observes its owner's report"
                );
            }
        }
        let first = if owners.len() == 2 {
            // The re-elected owner met an unknown key.
            let rerun: Vec<&Report> = results
                .iter()
                .map(|r| &r.1)
                .filter(|r| r.decision == Decision::CheckGone)
                .collect();
            assert_eq!(rerun.len(), 1, "{results:?}");
            results
                .iter()
                .find(|r| r.1.decision == Decision::Remove)
                .unwrap()
                .1
                .owner
        } else {
            owners[0]
        };
        assert_eq!(results[first].1.decision, Decision::Remove, "{results:?}");
        recorder.won(first);
        recorder.tag(if owners.len() == 2 { 0 } else { 1 });
    });
    assert!(exploration.tags.iter().all(|&t| t > 0), "{exploration:?}");
    exploration
}

// ---------------------------------------------------------------------------
// The node with its real decisions: `machine::node::step` through the node's
// own table glue (`wire::node_row_step`) on `Slots`
// ---------------------------------------------------------------------------

/// The real node table, keyed by a small id; a row's open request holds
/// `()` here (the node's scope).
type NodeTable = Slots<u8, NodeRow<()>, node::CleanupVerdict>;

/// A fake disk (fresh per execution): whether each key's job exists, how
/// many removals and cleanup runs happened (outside loom's control), and how
/// many cleanups of a key run at once (a loom atomic, so loom can switch
/// threads in the middle of a cleanup and two overlapping runs are seen).
#[derive(Default)]
struct Disk {
    exists: [std::sync::atomic::AtomicBool; 2],
    removals: [StdAtomicUsize; 2],
    runs: [StdAtomicUsize; 2],
    active: [custodian::sync::shim::atomic::AtomicUsize; 2],
}

impl Disk {
    fn at(&self, key: u8) -> usize {
        usize::from(key)
    }

    /// The workspace's cleanup: removes the job if it exists (idempotent).
    fn clean(&self, key: u8) -> node::CleanupVerdict {
        let k = self.at(key);
        assert_eq!(
            self.active[k].fetch_add(1, LoomOrdering::SeqCst),
            0,
            "two cleanups of key {key} at once"
        );
        self.runs[k].fetch_add(1, StdOrdering::SeqCst);
        let existed = self.exists[k].swap(false, StdOrdering::SeqCst);
        if existed {
            self.removals[k].fetch_add(1, StdOrdering::SeqCst);
        }
        self.active[k].fetch_sub(1, LoomOrdering::SeqCst);
        if existed {
            node::CleanupVerdict::Cleaned
        } else {
            node::CleanupVerdict::AlreadyGone
        }
    }
}

fn node_apply(
    table: &NodeTable,
    key: u8,
    input: node::Input,
) -> Applied<node::CleanupVerdict, Vec<node::Action>> {
    // What a successful open returned is filed with its `OpenFinished`, as
    // the node files the request's scope.
    let opened = matches!(input, node::Input::OpenFinished { ok: true }).then_some(());
    table.apply(&key, |row| node_row_step(row, input, opened))
}

/// Runs an owned cleanup as the node's cleanup task does: the workspace,
/// then the verdict into the state, then the publication.
fn run_cleanup(table: &NodeTable, disk: &Disk, key: u8, guard: OwnerGuard<node::CleanupVerdict>) {
    let verdict = disk.clean(key);
    let applied = node_apply(table, key, node::Input::CleanupFinished(verdict));
    assert!(applied.decision.is_empty() && applied.cleanup.is_none());
    guard.complete(verdict);
}

/// Asks the node for `key`'s cleanup and returns its verdict.
fn node_cleanup(table: &NodeTable, disk: &Disk, key: u8) -> node::CleanupVerdict {
    node_cleanup_owning(table, key, |guard| run_cleanup(table, disk, key, guard))
}

/// Asks the node for `key`'s cleanup, runs `own` with the owner guard if
/// this caller was elected, and returns the verdict it receives.
fn node_cleanup_owning(
    table: &NodeTable,
    key: u8,
    own: impl FnOnce(OwnerGuard<node::CleanupVerdict>),
) -> node::CleanupVerdict {
    let applied = node_apply(table, key, node::Input::Cleanup);
    match applied.cleanup {
        Some(Elected::Owner(guard)) => {
            let waiter = guard.waiter();
            own(guard);
            waiter.wait().expect("the owner completed")
        }
        Some(Elected::Waiter(waiter)) => waiter.wait().expect("the owner completed"),
        None => match applied.decision.as_slice() {
            [node::Action::Reply(node::Reply::Cleanup { verdict, .. })] => *verdict,
            other => panic!("a cleanup answered {other:?}"),
        },
    }
}

/// Opens `key` as the node does; returns the open's answer.
fn node_open(table: &NodeTable, disk: &Disk, key: u8) -> node::Reply {
    let applied = node_apply(table, key, node::Input::Open);
    match applied.decision.as_slice() {
        [node::Action::Open] => {}
        [node::Action::Reply(reply)] => return *reply,
        other => panic!("an open decided {other:?}"),
    }
    disk.exists[disk.at(key)].store(true, StdOrdering::SeqCst);
    let applied = node_apply(table, key, node::Input::OpenFinished { ok: true });
    if let Some(Elected::Owner(guard)) = applied.cleanup {
        // A cleanup asked for while the open ran waits for this one.
        run_cleanup(table, disk, key, guard);
    }
    applied
        .decision
        .iter()
        .find_map(|action| match action {
            node::Action::Reply(reply) => Some(*reply),
            _ => None,
        })
        .expect("the open is answered")
}

/// The edge's side of the late-open race on the real node decisions: an
/// open runs while the edge cancels the request and then cleans it up
/// (a cleanup asked for while the open runs waits for it). Checked in every
/// execution: nothing is left on the disk; the job is removed at most once
/// and by at most one cleanup run; the edge's verdict says `Cleaned` exactly
/// when a job was removed; an open answered `Opened` was decided before the
/// cancel; and a later open is refused.
///
/// Racer 0 wins when the open was answered `Opened`, racer 1 when it was
/// refused or closed. Tags: 0 — refused before running, 1 — ran and was
/// answered "closed" (the cancel or cleanup landed meanwhile), 2 — opened.
pub fn node_cancel_and_cleanup_race_open(name: &str, bound: usize) -> Exploration {
    let exploration = explore(name, bound, 2, 3, |recorder| {
        let table: NodeTable = Slots::new(4);
        let disk = StdArc::new(Disk::default());
        let opener = {
            let (table, disk) = (table.clone(), StdArc::clone(&disk));
            thread::spawn(move || node_open(&table, &disk, 0))
        };
        let cancel = node_apply(&table, 0, node::Input::Cancel);
        assert!(cancel.cleanup.is_none());
        let verdict = node_cleanup(&table, &disk, 0);
        let answer = opener.join().unwrap();

        assert!(
            !disk.exists[0].load(StdOrdering::SeqCst),
            "a job was left on the disk (open answered {answer:?}, cleanup {verdict:?})"
        );
        let removals = disk.removals[0].load(StdOrdering::SeqCst);
        assert!(removals <= 1 && disk.runs[0].load(StdOrdering::SeqCst) <= 1);
        assert_eq!(
            verdict == node::CleanupVerdict::Cleaned,
            removals == 1,
            "the edge's verdict {verdict:?} disagrees with the disk"
        );
        let later = node_apply(&table, 0, node::Input::Open).decision;
        assert_eq!(
            later,
            [node::Action::Reply(node::Reply::Refused(
                node::Refusal::Closed
            ))],
            "open accepted after cancel fenced"
        );
        assert!(
            table.get(&0).is_none_or(|row| row.open().is_none()),
            "the cleaned request's row still holds its scope"
        );
        let class = match answer {
            node::Reply::Refused(_) => 0,
            node::Reply::Closed => 1,
            node::Reply::Opened { already: false } => 2,
            other => panic!("an open answered {other:?}"),
        };
        if class == 0 {
            assert_eq!(removals, 0, "a refused open's request was removed");
        } else {
            assert_eq!(removals, 1, "an opened job was not removed exactly once");
        }
        recorder.won(usize::from(class != 2));
        recorder.tag(class);
    });
    assert!(exploration.tags.iter().all(|&t| t > 0), "{exploration:?}");
    exploration
}

/// Key 0's job exists: opened through this node, or (`after_restart`) left
/// from before a restart of the node and then cancelled, which files key 0
/// for eviction before its cleanup starts. Two edges clean key 0 up while a
/// third cleans up key 1, which this node never opened (it cannot know, so
/// the workspace is asked); the table remembers one finished key, so key
/// 1's cleanup can evict key 0. Checked in every execution: key 0's job is
/// removed exactly once and never by two cleanups at once (a cleanup in
/// flight is never evicted); a second run for key 0 happens only after its
/// eviction and finds the job gone; every answer for key 0 is `Cleaned`
/// from the one real run, or `AlreadyGone` from the re-run after eviction.
///
/// Racer 0 wins when its verdict was `Cleaned`, racer 1 otherwise. Tag 0
/// counts the executions with a re-run after eviction, tag 1 those with one
/// run.
pub fn node_cleanup_races_eviction(name: &str, bound: usize, after_restart: bool) -> Exploration {
    let exploration = explore(name, bound, 2, 2, move |recorder| {
        let table: NodeTable = Slots::new(1);
        let disk = StdArc::new(Disk::default());
        if after_restart {
            disk.exists[0].store(true, StdOrdering::SeqCst);
            let cancel = node_apply(&table, 0, node::Input::Cancel);
            assert!(cancel.cleanup.is_none());
        } else {
            assert_eq!(
                node_open(&table, &disk, 0),
                node::Reply::Opened { already: false }
            );
        }
        let racer = {
            let (table, disk) = (table.clone(), StdArc::clone(&disk));
            thread::spawn(move || node_cleanup(&table, &disk, 0))
        };
        let evictor = {
            let (table, disk) = (table.clone(), StdArc::clone(&disk));
            thread::spawn(move || node_cleanup(&table, &disk, 1))
        };
        let mine = node_cleanup(&table, &disk, 0);
        let theirs = racer.join().unwrap();
        assert_eq!(evictor.join().unwrap(), node::CleanupVerdict::AlreadyGone);

        assert_eq!(
            disk.removals[0].load(StdOrdering::SeqCst),
            1,
            "key 0 removed twice"
        );
        assert_eq!(disk.removals[1].load(StdOrdering::SeqCst), 0);
        let runs = disk.runs[0].load(StdOrdering::SeqCst);
        let verdicts = [mine, theirs];
        let cleaned = verdicts
            .iter()
            .filter(|v| **v == node::CleanupVerdict::Cleaned)
            .count();
        assert!(cleaned >= 1, "{verdicts:?}");
        if runs == 1 {
            assert_eq!(
                cleaned, 2,
                "a shared cleanup answered differently: {verdicts:?}"
            );
        } else {
            assert_eq!(runs, 2);
            assert!(
                verdicts.contains(&node::CleanupVerdict::AlreadyGone),
                "{verdicts:?}"
            );
        }
        recorder.won(usize::from(mine != node::CleanupVerdict::Cleaned));
        recorder.tag(if runs == 2 { 0 } else { 1 });
    });
    assert!(exploration.tags.iter().all(|&t| t > 0), "{exploration:?}");
    exploration
}

/// What the fake workspace answers for a cleanup that could not run.
const NO_SPACE: node::CleanupVerdict =
    node::CleanupVerdict::Failed(custodian::error::SafeCode::new("no_space"));

/// Asks for `key`'s cleanup as [`node_cleanup`] does, where the disk's
/// first cleanup run cannot run (`no_space`, the node's [`node_row_retry`]
/// under the table lock, as its cleanup task does) and later ones do; asks
/// again after a `no_space` answer, at most twice.
fn node_cleanup_until_final(
    table: &NodeTable,
    disk: &Disk,
    key: u8,
) -> (node::CleanupVerdict, bool) {
    let mut saw_no_space = false;
    for _ in 0..2 {
        let verdict = node_cleanup_owning(table, key, |guard| {
            let k = disk.at(key);
            if disk.runs[k].load(StdOrdering::SeqCst) == 0 {
                assert_eq!(
                    disk.active[k].fetch_add(1, LoomOrdering::SeqCst),
                    0,
                    "two cleanups of key {key} at once"
                );
                disk.runs[k].fetch_add(1, StdOrdering::SeqCst);
                disk.active[k].fetch_sub(1, LoomOrdering::SeqCst);
                table.retry(&key, guard, NO_SPACE, node_row_retry);
            } else {
                run_cleanup(table, disk, key, guard);
            }
        });
        if verdict != NO_SPACE {
            return (verdict, saw_no_space);
        }
        saw_no_space = true;
    }
    panic!("a cleanup answered no_space twice: the retry never ran");
}

/// Two callers clean one open request whose first cleanup could not run
/// (the node's retry on the real decisions and the real table): whatever
/// the interleaving, never two cleanups at once, exactly two runs (the one
/// that could not run and one that removed), never a caller waiting on an
/// attempt nobody owns (loom reports the deadlock), and both end with
/// `cleaned`. Tag 0 counts executions where both callers received the
/// `no_space` answer, tag 1 those where only one did.
pub fn node_transient_cleanup_is_run_again(name: &str, bound: usize) -> Exploration {
    let exploration = explore(name, bound, 2, 2, |recorder| {
        let table: NodeTable = Slots::new(1);
        let disk = StdArc::new(Disk::default());
        assert_eq!(
            node_open(&table, &disk, 0),
            node::Reply::Opened { already: false }
        );
        let racer = {
            let (table, disk) = (table.clone(), StdArc::clone(&disk));
            thread::spawn(move || node_cleanup_until_final(&table, &disk, 0))
        };
        let (mine, mine_saw) = node_cleanup_until_final(&table, &disk, 0);
        let (theirs, theirs_saw) = racer.join().unwrap();
        assert_eq!(
            disk.runs[0].load(StdOrdering::SeqCst),
            2,
            "one retry, one removal"
        );
        assert_eq!(disk.removals[0].load(StdOrdering::SeqCst), 1);
        assert_eq!([mine, theirs], [node::CleanupVerdict::Cleaned; 2]);
        assert!(
            mine_saw || theirs_saw,
            "nobody received the no_space answer"
        );
        let final_row = table.get(&0).expect("remembered");
        assert_eq!(
            final_row.state().cleaned(),
            Some(node::CleanupVerdict::Cleaned)
        );
        assert!(
            final_row.open().is_none(),
            "the cleaned row still holds its scope"
        );
        recorder.won(usize::from(!mine_saw));
        recorder.tag(if mine_saw && theirs_saw { 0 } else { 1 });
    });
    assert!(exploration.tags.iter().all(|&t| t > 0), "{exploration:?}");
    exploration
}

// ---------------------------------------------------------------------------
// The workspace: an open vs. a cleanup of an id it holds nothing for
// ---------------------------------------------------------------------------

/// What the model's cleanup reports, as `cleanup_work` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It found the request held and removed its job directory.
    Cleaned,
    /// It found nothing held and no job directory.
    AlreadyGone,
    /// It found nothing held but a job directory it cannot prove.
    JobNotOwned,
}

/// The workspace's table of requests as `Workspace::open_request` and its
/// cleanup task use it (the methods of [`Holdings`]).
pub trait HeldTable: Clone + Send + Sync + 'static {
    /// A table whose elections cache `capacity` results.
    fn create(capacity: usize) -> Self;
    /// `open_request`: refused, or `make` (the job directory's creation)
    /// ran under the table's lock and the request is held.
    fn open(&self, key: u8, make: &mut dyn FnMut()) -> Result<(), OpenRefusal>;
    /// `cleanup_id`: enters the key's cleanup election.
    fn elect(&self, key: u8) -> Elected<Verdict>;
    /// `cleanup_work`: whether the owner finds the key held.
    fn find(&self, owner: &OwnerGuard<Verdict>, key: u8) -> bool;
    /// The cleanup task files its final result.
    fn complete(&self, key: u8, owner: OwnerGuard<Verdict>, verdict: Verdict);
    /// Whether the key is held.
    fn held(&self, key: u8) -> bool;
}

impl HeldTable for Holdings<u8, (), Verdict> {
    fn create(capacity: usize) -> Self {
        Holdings::new(capacity)
    }
    fn open(&self, key: u8, make: &mut dyn FnMut()) -> Result<(), OpenRefusal> {
        Holdings::open(self, key, || {
            make();
            Ok::<(), ()>(())
        })
        .map(|made| made.unwrap())
    }
    fn elect(&self, key: u8) -> Elected<Verdict> {
        Holdings::elect(self, key)
    }
    fn find(&self, owner: &OwnerGuard<Verdict>, key: u8) -> bool {
        Holdings::find(self, owner, &key, || Err(())).is_ok()
    }
    fn complete(&self, key: u8, owner: OwnerGuard<Verdict>, verdict: Verdict) {
        Holdings::complete(self, &key, owner, verdict);
    }
    fn held(&self, key: u8) -> bool {
        Holdings::get(self, &key).is_some()
    }
}

/// An open of request 0 races the cleanup of request 0, which the table
/// does not hold yet (the facade committed the announcement, then a
/// cancel's cleanup ran before the open). The cleanup runs as the
/// workspace's cleanup task does: elect, find, then either remove the job
/// directory (found) or check that it is gone, then file the result.
/// Checked in every execution:
///
/// - with a cached result (`capacity > 0`): the open is refused, or the
///   cleanup found the open request (and removed its job directory) —
///   never an open that succeeded while the cleanup found nothing and
///   reported the id gone;
/// - whatever the capacity: a job directory left at the end belongs to a
///   request the table still holds (a later cleanup removes it), never to
///   one nobody holds.
///
/// Racer 0 wins when the open succeeded, racer 1 when it was refused.
/// Tags: 0 — refused while the cleanup ran ([`OpenRefusal::Cleaning`]); 1 —
/// refused by the cached result ([`OpenRefusal::Cleaned`]); 2 — opened after
/// the result was published and evicted (only with `capacity == 0`). With
/// a cache, tags 0 and 1 must occur; with none, tags 0 and 2.
pub fn open_races_cleanup_of_unknown<H: HeldTable>(
    name: &str,
    bound: usize,
    capacity: usize,
) -> Exploration {
    let exploration = explore(name, bound, 2, 3, move |recorder| {
        let table = H::create(capacity);
        let job_dir = Arc::new(AtomicBool::new(false));
        let opener = {
            let (table, job_dir) = (table.clone(), Arc::clone(&job_dir));
            thread::spawn(move || {
                table.open(0, &mut || {
                    assert!(
                        !job_dir.swap(true, LoomOrdering::SeqCst),
                        "the job directory was created twice"
                    );
                })
            })
        };
        let Elected::Owner(guard) = table.elect(0) else {
            panic!("the only cleanup does not own its election");
        };
        let found = table.find(&guard, 0);
        let verdict = if found {
            job_dir.store(false, LoomOrdering::SeqCst);
            Verdict::Cleaned
        } else if job_dir.load(LoomOrdering::SeqCst) {
            Verdict::JobNotOwned
        } else {
            Verdict::AlreadyGone
        };
        table.complete(0, guard, verdict);
        let opened = opener.join().unwrap();

        if capacity > 0 {
            assert!(
                opened.is_err() || found,
                "an open succeeded while the cleanup of the id found nothing (it reported {verdict:?})"
            );
        }
        assert!(
            !job_dir.load(LoomOrdering::SeqCst) || table.held(0),
            "a job directory is left that no request holds (the cleanup reported {verdict:?})"
        );
        assert_eq!(
            table.held(0),
            opened.is_ok() && !found,
            "held after the cleanup: exactly an open that came after it"
        );
        recorder.won(usize::from(opened.is_err()));
        match opened {
            Err(OpenRefusal::Cleaning) => recorder.tag(0),
            Err(OpenRefusal::Cleaned) => recorder.tag(1),
            Err(other) => panic!("refused as {other:?}"),
            Ok(()) if !found => recorder.tag(2),
            Ok(()) => {}
        }
    });
    let t = &exploration.tags;
    // With nothing cached, the result is evicted just after it is
    // published (the election files it then), so a refusal as cleaned can
    // still occur in between.
    let expected = if capacity > 0 {
        t[0] > 0 && t[1] > 0 && t[2] == 0
    } else {
        t[0] > 0 && t[2] > 0
    };
    assert!(expected, "{exploration:?}");
    exploration
}

// ---------------------------------------------------------------------------
// The launcher: a fresh root vs. a subreaper scan
// ---------------------------------------------------------------------------

/// What the launcher needs of its root registry
/// ([`custodian::sync::RootRegistry`]).
pub trait Roots: Default + Send + Sync + 'static {
    /// Runs `spawn` (the clone) and registers the pid it returns.
    fn spawn_root(&self, spawn: &mut dyn FnMut() -> u32);
    /// Runs `f` on the registered roots (a subreaper scan).
    fn scan_roots(&self, f: &mut dyn FnMut(&[u32]));
}

impl Roots for custodian::sync::RootRegistry {
    fn spawn_root(&self, spawn: &mut dyn FnMut() -> u32) {
        let _ = self.spawn(|| Ok::<u32, ()>(spawn()), |&pid| pid);
    }

    fn scan_roots(&self, f: &mut dyn FnMut(&[u32])) {
        self.scan(|roots| f(roots));
    }
}

/// Two launches race a scan of the process's children: the kernel's list
/// of children gets each child at its clone, and a scan must find every
/// child it sees registered as a root (else it would take a fresh root for
/// an adopted descendant, and signal or reap it). The first launch may clone
/// without the lock; the second starts after the scan began. Racer 0 wins
/// when the scan saw no child, racer 1 when it saw one: both orders must be
/// explored.
pub fn scan_races_spawn<R: Roots>(name: &str, bound: usize) -> Exploration {
    explore(name, bound, 2, 0, |recorder| {
        let registry = Arc::new(R::default());
        let children = Arc::new(Mutex::new(Vec::<u32>::new()));
        let launch = |registry: Arc<R>, children: Arc<Mutex<Vec<u32>>>, pid: u32| {
            thread::spawn(move || {
                registry.spawn_root(&mut || {
                    shim::lock(&children).push(pid);
                    pid
                })
            })
        };
        let first = launch(registry.clone(), children.clone(), 1);
        let mut seen = 0;
        registry.scan_roots(&mut |roots| {
            let kernel = shim::lock(&children).clone();
            for child in &kernel {
                assert!(
                    roots.contains(child),
                    "a fresh root taken for an adopted descendant"
                );
            }
            seen = kernel.len();
        });
        let second = launch(registry.clone(), children.clone(), 2);
        registry.scan_roots(&mut |roots| {
            for child in shim::lock(&children).iter() {
                assert!(
                    roots.contains(child),
                    "a fresh root taken for an adopted descendant"
                );
            }
        });
        first.join().unwrap();
        second.join().unwrap();
        recorder.won(usize::from(seen > 0));
    })
}
