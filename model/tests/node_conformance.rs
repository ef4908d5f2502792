//! Conformance of the real node to the composition model's node: every
//! decision a real `wire::Node` takes (recorded with
//! `custodian::__bench::record_node_steps`: state before, input, state
//! after, actions) is replayed, request by request, into the model's node
//! actor (`custodian_model::actor::Party::Node`, driven through its own
//! `on_start`, `on_msg` and `on_timeout`).
//!
//! For every recorded step: the real state before must be the model's
//! (the node only moves a request with its step function, from the restart
//! state); the input must be one the model's node can receive there (a
//! message from the edge, or the end of an open or a cleanup whose timer the
//! model set: nothing finishes that was not started); feeding it must give
//! the real state after and the real actions. A divergence fails the test.
//! Inputs the model's bounded world cannot produce (a `write`/`run`, a
//! cleanup verdict other than the model's disk gives) end that request's
//! replay and are counted, not dropped silently.
//!
//! The scenarios are the node's own: opens, duplicates, cancels before and
//! after the open, cleanups before, during (a gated open) and after the
//! open, a failed open, a failing cleanup, and the node's shutdown
//! (`Node::close`).

#[path = "../../tests/support/fake_node.rs"]
mod fake_node;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use custodian::__bench::NodeStep;
use custodian::machine::node::{self, Input};
use custodian::request::RequestId;
use custodian::wire::{Node, NodeConfig, Operation};
use custodian_model::actor::{Msg, Party, St, Timer, Variant};
use fake_node::FakeNode;
use stateright::actor::{Actor, Command, Id, Out};

fn id(s: &str) -> RequestId {
    RequestId::new(s).unwrap()
}

fn open(r: &str) -> Operation {
    Operation::OpenWorkspace { request_id: id(r) }
}

fn cancel(r: &str) -> Operation {
    Operation::Cancel { request_id: id(r) }
}

fn cleanup(r: &str) -> Operation {
    Operation::CleanupWorkspace { request_id: id(r) }
}

/// Runs the scenarios on a real node and returns its recorded decisions.
async fn record() -> Vec<NodeStep> {
    custodian::__bench::record_node_steps(true);
    let node = Node::new(FakeNode::new(), NodeConfig::default());
    // In order, one at a time.
    for ops in [
        vec![open("plain"), cleanup("plain")],
        vec![open("dup-open"), open("dup-open"), cleanup("dup-open")],
        vec![
            cancel("cancel-first"),
            open("cancel-first"),
            cleanup("cancel-first"),
        ],
        vec![
            open("cancel-after"),
            cancel("cancel-after"),
            cleanup("cancel-after"),
            cleanup("cancel-after"),
        ],
        vec![cleanup("cleanup-first"), open("cleanup-first")],
        vec![open("openfail-1"), cleanup("openfail-1")],
        vec![open("fail-clean"), cleanup("fail-clean")],
    ] {
        for op in ops {
            let _ = node.handle(op).await;
        }
    }
    // A cleanup and a cancel during a running open.
    node.workspace().open_gated.store(true, Ordering::SeqCst);
    let slow = tokio::spawn({
        let node = Arc::clone(&node);
        async move { node.handle(open("slow-open")).await }
    });
    while node.workspace().calls(&id("slow-open")).open == 0 {
        tokio::task::yield_now().await;
    }
    let _ = node.handle(cancel("slow-open")).await;
    let during = tokio::spawn({
        let node = Arc::clone(&node);
        async move { node.handle(cleanup("slow-open")).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    node.workspace().open_gate.add_permits(1);
    let _ = slow.await;
    let _ = during.await;
    node.workspace().open_gated.store(false, Ordering::SeqCst);
    // The shutdown: one request held open, one whose open failed.
    let _ = node.handle(open("held")).await;
    let _ = node.handle(open("openfail-held")).await;
    let _ = node.close().await;
    custodian::__bench::record_node_steps(false);
    custodian::__bench::take_node_steps()
}

/// The model's node for one request, with the timers it has set.
struct ModelNode {
    party: Party,
    state: St,
    timers: BTreeSet<Timer>,
}

impl ModelNode {
    fn new() -> Self {
        let party = Party::Node(Variant::Real);
        let mut out = Out::new();
        let state = party.on_start(Id::from(0), &None, &mut out);
        let mut n = ModelNode {
            party,
            state,
            timers: BTreeSet::new(),
        };
        n.note(out);
        // The model may shut its node down at any moment; the real node's
        // shutdown is `close`, whose cleanups are recorded as inputs.
        n.timers.remove(&Timer::Shutdown);
        n
    }

    fn note(&mut self, out: Out<Party>) {
        for c in out {
            match c {
                Command::SetTimer(t, _) => {
                    self.timers.insert(t);
                }
                Command::CancelTimer(t) => {
                    self.timers.remove(&t);
                }
                _ => {}
            }
        }
    }

    fn req(&self) -> node::State {
        match &self.state {
            St::Node(n) => n.req,
            _ => unreachable!("the node actor's state"),
        }
    }

    fn job_on_disk(&self) -> bool {
        match &self.state {
            St::Node(n) => n.disk.job,
            _ => unreachable!("the node actor's state"),
        }
    }

    fn msg(&mut self, m: Msg) {
        let mut out = Out::new();
        let mut st = Cow::Borrowed(&self.state);
        self.party
            .on_msg(Id::from(0), &mut st, Id::from(1), m, &mut out);
        let next = st.into_owned();
        self.state = next;
        self.note(out);
    }

    /// Fires `t`; `false` if the model has not set it (the input cannot
    /// happen in the model here).
    fn fire(&mut self, t: Timer) -> bool {
        if !self.timers.remove(&t) {
            return false;
        }
        let mut out = Out::new();
        let mut st = Cow::Borrowed(&self.state);
        self.party.on_timeout(Id::from(0), &mut st, &t, &mut out);
        let next = st.into_owned();
        self.state = next;
        self.note(out);
        true
    }
}

#[derive(Debug, Default)]
struct Replay {
    requests: usize,
    whole: usize,
    steps: usize,
    outside: BTreeMap<String, usize>,
    inputs: BTreeSet<String>,
}

/// Replays one request's steps; `Err` on a divergence.
fn replay(r: &RequestId, steps: &[&NodeStep], out: &mut Replay) -> Result<(), String> {
    let mut m = ModelNode::new();
    let restart = node::State::after_restart();
    for (i, s) in steps.iter().enumerate() {
        let before = s.before.unwrap_or(restart);
        if before != m.req() {
            return Err(format!(
                "{r} step {i}: the real state before {before:?} is not the model's {:?}",
                m.req()
            ));
        }
        let kind = match s.input {
            Input::Open => {
                m.msg(Msg::Open(0));
                "open"
            }
            Input::Cancel => {
                m.msg(Msg::Cancel(0));
                "cancel"
            }
            Input::Cleanup => {
                m.msg(Msg::Cleanup(0));
                "cleanup"
            }
            Input::OpenFinished { ok } => {
                let t = if ok {
                    Timer::OpenDone
                } else {
                    Timer::OpenFails
                };
                if !m.fire(t) {
                    return Err(format!(
                        "{r} step {i}: {:?} without an open running",
                        s.input
                    ));
                }
                if ok { "open_done" } else { "open_failed" }
            }
            Input::CleanupFinished(v) => {
                // The model's verdict is its disk's: cleaned if the job is
                // there, else already gone.
                let model_verdict = if m.job_on_disk() {
                    node::CleanupVerdict::Cleaned
                } else {
                    node::CleanupVerdict::AlreadyGone
                };
                if v != model_verdict {
                    *out.outside.entry(format!("verdict {v:?}")).or_default() += 1;
                    return Ok(());
                }
                if !m.fire(Timer::CleanupDone) {
                    return Err(format!(
                        "{r} step {i}: a cleanup finished that never started"
                    ));
                }
                "cleanup_done"
            }
            other => {
                *out.outside.entry(format!("{other:?}")).or_default() += 1;
                return Ok(());
            }
        };
        out.inputs.insert(kind.to_owned());
        out.steps += 1;
        let after = s.after.unwrap_or(restart);
        if after != m.req() {
            return Err(format!(
                "{r} step {i} ({kind}): the real state after {after:?} is not the model's {:?}",
                m.req()
            ));
        }
    }
    out.whole += 1;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_node_decisions_replay_into_the_composition_models_node() {
    let steps = record().await;
    let mut by_request: BTreeMap<RequestId, Vec<&NodeStep>> = BTreeMap::new();
    for s in &steps {
        by_request.entry(s.request.clone()).or_default().push(s);
    }
    let mut out = Replay::default();
    let mut failures = Vec::new();
    for (r, steps) in &by_request {
        out.requests += 1;
        if let Err(e) = replay(r, steps, &mut out) {
            failures.push(e);
        }
    }
    eprintln!("{out:#?}");
    assert!(failures.is_empty(), "{failures:#?}");
    // The control: the scenarios reached the model through every kind of
    // input it has, and most requests replayed whole.
    for kind in [
        "open",
        "cancel",
        "cleanup",
        "open_done",
        "open_failed",
        "cleanup_done",
    ] {
        assert!(out.inputs.contains(kind), "no {kind} replayed: {out:#?}");
    }
    assert!(out.requests >= 10, "{out:#?}");
    assert!(out.whole + 1 >= out.requests, "{out:#?}");
}

/// The replay can fail: a real node that moved a request's state by hand
/// (a cleanup that finished without having started, a state changed between
/// two steps) is caught.
#[test]
fn the_node_replay_catches_a_step_the_model_does_not_take() {
    let r = id("planted");
    let restart = node::State::after_restart();
    let open = node::step(&restart, Input::Open);
    let mut out = Replay::default();
    // A cleanup finishing that never started.
    let finished = NodeStep::new(
        r.clone(),
        Some(open.next),
        Input::CleanupFinished(node::CleanupVerdict::AlreadyGone),
        None,
        Vec::new(),
    );
    let first = NodeStep::new(r.clone(), None, Input::Open, Some(open.next), open.actions);
    assert!(replay(&r, &[&first, &finished], &mut out).is_err());
    // A state that changed between two steps (the second's "before" is not
    // the first's "after").
    let jumped = NodeStep::new(r.clone(), Some(restart), Input::Cancel, None, Vec::new());
    assert!(replay(&r, &[&first, &jumped], &mut out).is_err());
}
