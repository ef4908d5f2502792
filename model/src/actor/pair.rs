//! The 2-request configuration of the composition: two edges, one request
//! each, and one node that keeps both in a table keyed by request with a
//! memory of **one** finished request, so that one request's result evicts
//! the other's, as the real node's table does.
//!
//! # The node's table
//!
//! Every decision is the real [`custodian::wire::node_slot_step`] (which
//! calls the real [`node::step`], from [`node::State::after_restart`] for a
//! request the table does not hold); what it returns is filed as the real
//! [`custodian::sync::Slots`] files it, here written out on plain values so
//! that a model state stays one: an entry per request (its state, its
//! cleanup cell: owned, awaited, published), and a queue of finished
//! requests (cleanup published, or retired by the step), oldest first, of
//! at most [`MEMORY`] requests. Filing a request beyond the memory forgets
//! the oldest finished one, state and result together, unless its cleanup
//! is still in flight (it is filed again when it publishes). The broken
//! variants [`Variant::EvictsInFlight`] and [`Variant::EvictsNewest`] alter
//! that filing.
//!
//! As in the 1-request configuration, the node's open finishes later or
//! fails (part of its directory made), and its cleanup is started and
//! finishes later; the other request's messages arrive in between (a
//! request's own cannot: its cleanup is its edge's last frame). The node's
//! shutdown cleans every request its table holds that
//! [`node::State::held_open`] says it must, then exits once no open or
//! cleanup runs.
//!
//! # What this configuration narrows, and why that is sound
//!
//! The network is stateright's ordered one: per pair of actors, messages
//! arrive once each, in the order sent, never duplicated (nothing is
//! dropped either). That is the real wire: an edge's frames go over one
//! connection, and the node decides them in the order it reads them
//! (`tests/wire/read_order.rs`); the real `WireClient` neither retries nor
//! reconnects. A duplicating network would deliver an edge's `Open` again
//! after the request's cached result was evicted, to a fresh
//! `after_restart` state that accepts it (by design: `sync::holdings`), and
//! report a leak the wire cannot produce.
//!
//! One order the wire allows is left out: the node's answers are written by
//! the tasks that carried out its decisions, and an open's task returns its
//! answer after it started the cleanup that waited for the open, which runs
//! in a task of its own (`wire::node::Node::finish_open`), so that
//! cleanup's verdict may be written first. Here a node's answers to an edge
//! arrive in the order it decided them. The left-out order changes no frame
//! the node reads: a cleanup's verdict answers the edge's cleanup, its last
//! frame for the request, so the edge has nothing left to send whichever
//! answer it reads first; what the edge makes of the two orders is checked
//! by the 1-request configuration, whose network reorders everything. (It
//! costs: with the open's answer written by a timer of its own, the real
//! configuration had 1 607 436 unique states, 25 s.)
//!
//! Each request has its own edge, so its own connection: the real edge
//! multiplexes its requests on one connection per node, and every order of
//! one connection's frames is an order of two connections' frames, so two
//! edges explore every cross-request order one edge could produce (and
//! more); within a request the order is the wire's.
//!
//! A node shutting down reads nothing more, as the stdio node does:
//! `cli::node` drops the connection's `serve` on the stop signal, and a
//! closed stdin has nothing more to read; `Node::close` then cleans every
//! request the table says it holds. (The socket node stops accepting but
//! keeps serving the connections it has while `close` runs; an open read
//! after `close` listed the requests is left to `Workspace::close`, which
//! refuses new requests and cleans the open ones. That is not modelled:
//! with the node reading on, the configuration leaves a job directory at
//! exit in 13 steps, an open of the other request accepted after the
//! shutdown.)
//!
//! A caller that disconnects first is left out (a disconnect after another
//! candidate stays): at the node it is a cancel. The edge's request machine
//! takes a disconnect in the open phase exactly as a cancel — the same
//! `CancelProcesses` (the same `Cancel` frame), the same stop and cleanup
//! (the same `Cleanup` frame) — and differs only in what the edge does
//! not write to a caller that is gone, which the request model and the
//! 1-request configuration check. With it the real configuration has
//! 717 577 unique states and its progress check took 22 s alone.
//!
//! Left out, for the state count: node crash and restart (the 1-request
//! configuration has them; a restarted node starts every request at
//! `after_restart` from an empty table, which this node already does for
//! every request it does not hold), waiters (they read what the edge
//! publishes and never reach the node), and the timeout (a cancel by another
//! name at the edge).

use std::time::Instant;

use custodian::machine::node::{self, CleanupVerdict, Input, Reply};
use custodian::machine::request::{Candidate, CleanupReport};
use custodian::sync::SlotEffect;
use custodian::wire::node_slot_step;
use stateright::Expectation;
use stateright::actor::{ActorModel, Id, LossyNetwork, Network, Out, model_timeout};

use super::{EdgeState, Msg, NODE, Party, St, Sys, Timer, Variant};

/// Finished requests the node remembers: one, so that each request's
/// result evicts the other's.
pub const MEMORY: usize = 1;
/// Requests (and edges: edge `k` is actor `1 + k`).
pub const REQUESTS: usize = 2;

/// A request's entry in the node's table (`sync::Slots`' entry).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The decision state; `None`: not remembered (at `after_restart`).
    pub state: Option<node::State>,
    /// The cleanup cell exists (a cleanup was started or awaited).
    pub cell: bool,
    /// An owner of the cleanup was elected.
    pub owned: bool,
    /// The owner published the cleanup's verdict.
    pub published: bool,
    /// The request is in the queue of finished ones.
    pub filed: bool,
}

impl Entry {
    const fn new() -> Self {
        Entry {
            state: None,
            cell: false,
            owned: false,
            published: false,
            filed: false,
        }
    }

    /// A cleanup owned or awaited and not published pins the entry.
    const fn in_flight(&self) -> bool {
        self.cell && !self.published
    }
}

/// What the node knows and runs for one request, and its disk.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Req {
    /// Its entry in the table; `None`: not held (never seen, or evicted).
    pub entry: Option<Entry>,
    /// The edge's cleanup waits for the verdict (`AwaitCleanup`).
    pub awaiting: bool,
    /// An open runs (its `OpenDoneOf` / `OpenFailsOf` timers are set).
    pub opening: bool,
    /// A cleanup runs (it ends with `CleanupDoneOf`).
    pub cleaning: bool,
    /// Cleanups started, in all.
    pub cleanups: u8,
    /// The job directory exists.
    pub job: bool,
    /// Removals of an existing job directory.
    pub removals: u8,
    /// The job directory was ever created.
    pub ever_opened: bool,
    /// An open of it failed.
    pub open_failed: bool,
    /// An open was refused because it was cancelled or cleaned.
    pub refused_closed: bool,
    /// Its published result was evicted by the other request's.
    pub result_evicted: bool,
    /// It was evicted (its result, or the state its cancel retired).
    pub evicted: bool,
    /// A message met it evicted: the node stepped it from `after_restart`.
    pub met_evicted: bool,
}

/// The node of the 2-request configuration.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PairNode {
    /// Per request.
    pub reqs: [Req; REQUESTS],
    /// Finished requests, oldest first.
    pub finished: Vec<u8>,
    /// The node was shut down and cleans up before it exits.
    pub shutting_down: bool,
    /// The node exited after its shutdown: it reads nothing more.
    pub exited: bool,
}

impl PairNode {
    pub(super) fn new() -> Self {
        let req = Req {
            entry: None,
            awaiting: false,
            opening: false,
            cleaning: false,
            cleanups: 0,
            job: false,
            removals: 0,
            ever_opened: false,
            open_failed: false,
            refused_closed: false,
            result_evicted: false,
            evicted: false,
            met_evicted: false,
        };
        PairNode {
            reqs: [req.clone(), req],
            finished: Vec::new(),
            shutting_down: false,
            exited: false,
        }
    }
}

/// The edge of request `k`.
fn edge_id(k: usize) -> Id {
    Id::from(1 + k)
}

/// The real `node_slot_step`, with the node mutant
/// [`Variant::CleanupNeverStarted`] applied to its decision (and the
/// table's effect following the altered decision), and the table's old
/// retirement [`Variant::ForgetsACancelledFailedOpen`] applied to its
/// effect (a cancel retires a request whose job is unknown, held or not).
/// The other node mutant,
/// [`Variant::OpenDuringCleanup`], is not applied here: its precondition,
/// an open of a request arriving while that request's cleanup runs, cannot
/// occur in this configuration (a request's cleanup is its edge's last
/// frame, and the node's own cleanup comes with its shutdown, after which
/// it reads nothing).
fn slot_step(
    v: Variant,
    before: Option<&node::State>,
    input: Input,
) -> custodian::sync::SlotStep<node::State, Vec<node::Action>> {
    let mut t = node_slot_step(before, input);
    if v == Variant::CleanupNeverStarted
        && matches!(input, Input::OpenFinished { .. })
        && t.decision.contains(&node::Action::StartCleanup)
    {
        t.decision.retain(|a| *a != node::Action::StartCleanup);
        t.effect = SlotEffect::AwaitCleanup;
    }
    if v == Variant::ForgetsACancelledFailedOpen
        && input == Input::Cancel
        && t.effect == SlotEffect::None
        && t.next.is_some_and(|s| {
            s.fence() == node::Fence::Cancelled && s.job() == node::JobState::Unknown
        })
    {
        t.effect = SlotEffect::Retire;
    }
    t
}

impl Party {
    /// `input` for request `k` at the pair node, filed as `Slots::apply`
    /// files it; its replies go to the request's edge when `answer` (the
    /// shutdown's own cleanup is answered to nobody).
    pub(super) fn pair_input(
        &self,
        v: Variant,
        n: &mut PairNode,
        k: usize,
        input: Input,
        answer: bool,
        o: &mut Out<Self>,
    ) {
        let r = &mut n.reqs[k];
        let before = r.entry.as_ref().and_then(|e| e.state);
        let step = slot_step(v, before.as_ref(), input);
        let entry = r.entry.get_or_insert_with(Entry::new);
        entry.state = step.next;
        let owner = match step.effect {
            SlotEffect::StartCleanup => {
                entry.cell = true;
                !std::mem::replace(&mut entry.owned, true)
            }
            SlotEffect::AwaitCleanup => {
                entry.cell = true;
                false
            }
            SlotEffect::None | SlotEffect::Retire => false,
        };
        let retire = step.effect == SlotEffect::Retire && !entry.filed;
        if retire {
            entry.filed = true;
        } else if entry.state.is_none() && !entry.cell && !entry.filed {
            r.entry = None;
        }
        for a in step.decision {
            match a {
                node::Action::Open => {
                    r.opening = true;
                    o.set_timer(Timer::OpenDoneOf(k as u8), model_timeout());
                    o.set_timer(Timer::OpenFailsOf(k as u8), model_timeout());
                }
                node::Action::Proceed | node::Action::CancelProcesses => {}
                // A second `StartCleanup` of the same cell gets a waiter,
                // never a second owner.
                node::Action::StartCleanup if owner => {
                    r.cleaning = true;
                    r.cleanups = r.cleanups.saturating_add(1);
                    o.set_timer(Timer::CleanupDoneOf(k as u8), model_timeout());
                }
                node::Action::StartCleanup => {}
                node::Action::AwaitCleanup => r.awaiting |= answer,
                node::Action::Reply(_) if !answer => {}
                node::Action::Reply(Reply::Cleanup { verdict, .. }) => {
                    o.send(edge_id(k), Msg::Cleaned(0, verdict));
                }
                // The cancel's own call is answered.
                node::Action::Reply(reply) if input == Input::Cancel => {
                    o.send(edge_id(k), Msg::CancelAnswer(0, reply));
                }
                node::Action::Reply(reply) => {
                    if reply == Reply::Refused(node::Refusal::Closed) || reply == Reply::Closed {
                        r.refused_closed = true;
                    }
                    o.send(edge_id(k), Msg::OpenAnswer(0, reply));
                }
            }
        }
        if retire {
            file(v, n, k);
        }
    }

    /// The pair node's messages: request `k` is the one of the edge that
    /// sent it.
    pub(super) fn pair_on_msg(
        &self,
        v: Variant,
        n: &mut PairNode,
        src: Id,
        msg: Msg,
        o: &mut Out<Self>,
    ) {
        // Shut down, the node reads nothing more: `cli::node` drops the
        // connection's `serve` on the stop signal (and a closed stdin has
        // nothing more to read).
        if n.shutting_down {
            return;
        }
        let input = match msg {
            Msg::Open(_) => Input::Open,
            Msg::Cancel(_) => Input::Cancel,
            Msg::Cleanup(_) => Input::Cleanup,
            _ => return,
        };
        let Some(k) = usize::from(src).checked_sub(1).filter(|k| *k < REQUESTS) else {
            return;
        };
        let r = &mut n.reqs[k];
        r.met_evicted |= r.entry.is_none() && r.evicted;
        self.pair_input(v, n, k, input, true, o);
        self.pair_exit_if_done(n, o);
    }

    /// The pair node's timers.
    pub(super) fn pair_on_timeout(
        &self,
        v: Variant,
        n: &mut PairNode,
        timer: &Timer,
        o: &mut Out<Self>,
    ) {
        match *timer {
            Timer::OpenDoneOf(k) | Timer::OpenFailsOf(k) => {
                let ok = matches!(timer, Timer::OpenDoneOf(_));
                // Either ends the open: the other will not fire.
                o.cancel_timer(if ok {
                    Timer::OpenFailsOf(k)
                } else {
                    Timer::OpenDoneOf(k)
                });
                let r = &mut n.reqs[usize::from(k)];
                r.opening = false;
                // A failed open may have made part of the job directory.
                r.job = true;
                r.ever_opened = true;
                r.open_failed |= !ok;
                self.pair_input(v, n, usize::from(k), Input::OpenFinished { ok }, true, o);
            }
            Timer::CleanupDoneOf(k) => {
                let k = usize::from(k);
                let r = &mut n.reqs[k];
                r.cleaning = false;
                let verdict = if r.job {
                    r.job = false;
                    r.removals = r.removals.saturating_add(1);
                    CleanupVerdict::Cleaned
                } else {
                    CleanupVerdict::AlreadyGone
                };
                self.pair_input(v, n, k, Input::CleanupFinished(verdict), true, o);
                // The owner publishes: the cell's waiters get the verdict,
                // and the request is filed as finished.
                let r = &mut n.reqs[k];
                if std::mem::take(&mut r.awaiting) {
                    o.send(edge_id(k), Msg::Cleaned(0, verdict));
                }
                let unfiled = r.entry.as_mut().is_some_and(|e| {
                    e.published = true;
                    !std::mem::replace(&mut e.filed, true)
                });
                if unfiled {
                    file(v, n, k);
                }
            }
            Timer::Shutdown => {
                n.shutting_down = true;
                // `Node::close`: every request the table holds whose state
                // says the node must clean it itself.
                for k in 0..REQUESTS {
                    let held = n.reqs[k].entry.as_ref().and_then(|e| e.state);
                    if held.is_some_and(|s| s.held_open()) {
                        self.pair_input(v, n, k, Input::Cleanup, false, o);
                    }
                }
            }
            _ => return,
        }
        self.pair_exit_if_done(n, o);
    }

    /// The pair node exits after its shutdown once no open and no cleanup
    /// runs: both edges read the end of their connection.
    fn pair_exit_if_done(&self, n: &mut PairNode, o: &mut Out<Self>) {
        let idle = n.reqs.iter().all(|r| !r.opening && !r.cleaning);
        if n.shutting_down && !n.exited && idle {
            n.exited = true;
            for k in 0..REQUESTS {
                o.send(edge_id(k), Msg::Lost(0));
            }
        }
    }
}

/// Files request `k` as finished and evicts the oldest finished requests
/// beyond the memory, state and result together; one whose cleanup is in
/// flight is skipped (filed again when it publishes). `Slots::file`.
fn file(v: Variant, n: &mut PairNode, k: usize) {
    n.finished.push(k as u8);
    while n.finished.len() > MEMORY {
        let evicted = if v == Variant::EvictsNewest {
            n.finished.pop()
        } else {
            Some(n.finished.remove(0))
        };
        let Some(e) = evicted else { break };
        let r = &mut n.reqs[usize::from(e)];
        let Some(entry) = r.entry.as_mut() else {
            continue;
        };
        if entry.in_flight() && v != Variant::EvictsInFlight {
            entry.filed = false;
        } else {
            r.result_evicted |= entry.published;
            r.evicted = true;
            r.entry = None;
        }
    }
}

fn pair_node(s: &Sys) -> Option<&PairNode> {
    match s.actor_states.get(NODE).map(|a| &**a) {
        Some(St::PairNode(n)) => Some(n),
        _ => None,
    }
}

/// Each request's edge and what the node keeps of it.
fn requests(s: &Sys) -> impl Iterator<Item = (&EdgeState, &Req)> {
    let node = pair_node(s);
    (0..REQUESTS).filter_map(move |k| {
        let e = match s.actor_states.get(1 + k).map(|a| &**a) {
            Some(St::Edge(e)) => e,
            _ => return None,
        };
        Some((e, &node?.reqs[k]))
    })
}

/// The request completed with its job directory gone or its failure
/// reported.
fn cleaned_or_reported(e: &EdgeState, r: &Req) -> bool {
    !r.job
        || e.published
            .is_some_and(|p| matches!(p.cleanup(), CleanupReport::Failed { .. }))
}

/// The goal of the progress check on this configuration: both requests
/// completed, each cleaned or its failure reported.
pub fn both_completed_and_cleaned(s: &Sys) -> bool {
    let mut n = 0;
    for (e, r) in requests(s) {
        if !(e.completed && cleaned_or_reported(e, r)) {
            return false;
        }
        n += 1;
    }
    n == REQUESTS
}

/// Property: the node's table holds every request whose cleanup runs or is
/// awaited, so that a cleanup asked for it meanwhile (a duplicate, the
/// node's shutdown) waits for that one instead of starting another: the
/// contract of `sync::Slots` ("a key whose cleanup is still running is
/// never evicted"), which `sync::holdings` states as "eviction never
/// re-runs destructive work".
pub const IN_FLIGHT_HELD: &str =
    "the node's table holds every request whose cleanup runs or is awaited";
/// Progress property of this configuration ([`crate::progress`]).
pub const BOTH_COMPLETE_AND_CLEAN: &str =
    "both requests can still complete, each cleaned or its failure reported";

/// The 2-request configuration: one node with a table of memory one, two
/// edges, one request each, over the ordered network; `variant` alters the
/// node or the edges.
pub fn model(variant: Variant) -> ActorModel<Party> {
    let now = Instant::now();
    let mut m = ActorModel::new((), ()).actor(Party::PairNode(variant));
    for _ in 0..REQUESTS {
        m = m.actor(Party::Edge(variant, now));
    }
    m.init_network(Network::new_ordered([]))
        .lossy_network(LossyNetwork::No)
        // The caller's disconnect as the first candidate is left out (see
        // the module documentation).
        .within_boundary(|_, s| {
            requests(s).all(|(e, _)| e.req.primary() != Some(Candidate::CallerDisconnect))
        })
        .property(Expectation::Always, super::OPENED_IS_CLEANED, |_, s| {
            requests(s).all(|(e, r)| !e.completed || cleaned_or_reported(e, r))
        })
        .property(
            Expectation::Always,
            super::NODE_CLEANUP_PROGRESSES,
            |_, s| {
                let set = |t: Timer| s.timers_set[NODE].iter().any(|x| *x == t);
                pair_node(s).is_none_or(|n| {
                    n.reqs.iter().enumerate().all(|(k, r)| {
                        let k = k as u8;
                        let Some(st) = r.entry.as_ref().and_then(|e| e.state) else {
                            return true;
                        };
                        st.fence() != node::Fence::Cleaning
                            || (r.cleaning && set(Timer::CleanupDoneOf(k)))
                            || (st.job() == node::JobState::Opening && set(Timer::OpenDoneOf(k)))
                    })
                })
            },
        )
        .property(Expectation::Always, super::SHUTDOWN_CLEANS, |_, s| {
            pair_node(s).is_none_or(|n| !n.exited || n.reqs.iter().all(|r| !r.job))
        })
        .property(Expectation::Always, super::ONE_CLEANUP_PER_NODE, |_, s| {
            pair_node(s).is_none_or(|n| n.reqs.iter().all(|r| r.cleanups <= 1 && r.removals <= 1))
        })
        .property(Expectation::Always, IN_FLIGHT_HELD, |_, s| {
            pair_node(s).is_none_or(|n| {
                n.reqs.iter().all(|r| {
                    !(r.cleaning || r.awaiting) || r.entry.as_ref().is_some_and(Entry::in_flight)
                })
            })
        })
        .property(
            Expectation::Always,
            super::COMPLETES_AFTER_CLEANUP_ANSWER,
            |_, s| {
                requests(s).all(|(e, _)| !e.completed || !e.announced || e.cleanup_answer.is_some())
            },
        )
        .property(Expectation::Always, "published at most once", |_, s| {
            requests(s).all(|(e, _)| e.publishes <= 1)
        })
        .property(
            Expectation::Sometimes,
            "eviction: one request's result evicts the other's, both complete",
            |_, s| {
                requests(s).count() == REQUESTS
                    && requests(s).all(|(e, _)| e.completed)
                    && requests(s).any(|(_, r)| r.result_evicted && r.ever_opened)
            },
        )
        .property(
            Expectation::Sometimes,
            "a request evicted after its cancel is asked again at after_restart",
            |_, s| requests(s).any(|(e, r)| r.met_evicted && e.completed),
        )
        .property(
            Expectation::Sometimes,
            "node shutdown: it cleans both jobs it held and both edges are told",
            |_, s| {
                pair_node(s).is_some_and(|n| n.exited)
                    && requests(s).count() == REQUESTS
                    && requests(s)
                        .all(|(e, r)| r.ever_opened && !r.job && e.completed && e.disconnected)
            },
        )
        .property(
            Expectation::Sometimes,
            "cancel before open: the node refuses the open",
            |_, s| requests(s).any(|(e, r)| r.refused_closed && !r.ever_opened && e.completed),
        )
        .property(
            Expectation::Sometimes,
            "open failed: its partial job directory is still cleaned",
            |_, s| {
                requests(s).any(|(e, r)| {
                    r.open_failed && !r.job && e.completed && e.cleanup_answer.is_some()
                })
            },
        )
}

/// The pair configuration's representative: of the state and its mirror
/// image (the two requests, with their edges, entries, timers and messages,
/// swapped), the one whose first request sorts first by a fingerprint of
/// what is its own (the whole state's fingerprint breaks a tie). The two
/// edges are the same actor and the node treats its requests alike, so a
/// state and its mirror have mirrored futures; the ordered network keeps no
/// record of the last delivery to fold away.
pub fn representative(s: &Sys) -> Sys {
    let (a, b) = (own(s, 0), own(s, 1));
    if a < b || (a == b && fingerprint(s) <= fingerprint(&mirror(s))) {
        s.clone()
    } else {
        mirror(s)
    }
}

fn fingerprint<T: std::hash::Hash>(t: &T) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    t.hash(&mut h);
    h.finish()
}

/// A fingerprint of what belongs to request `k`: its edge's state and
/// timers, the node's record of it, its open and cleanup timers, and the
/// messages between its edge and the node.
fn own(s: &Sys, k: usize) -> u64 {
    use std::hash::{Hash, Hasher};
    let edge = Id::from(1 + k);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.actor_states[1 + k].hash(&mut h);
    let mut timers: Vec<&Timer> = s.timers_set[1 + k].iter().collect();
    timers.sort_unstable();
    timers.hash(&mut h);
    if let Some(St::PairNode(n)) = s.actor_states.get(NODE).map(|a| &**a) {
        n.reqs[k].hash(&mut h);
    }
    let k = k as u8;
    for t in [
        Timer::OpenDoneOf(k),
        Timer::OpenFailsOf(k),
        Timer::CleanupDoneOf(k),
    ] {
        s.timers_set[NODE].iter().any(|x| *x == t).hash(&mut h);
    }
    if let Network::Ordered(flows) = &s.network {
        flows.get(&(edge, Id::from(NODE))).hash(&mut h);
        flows.get(&(Id::from(NODE), edge)).hash(&mut h);
    }
    h.finish()
}

/// `s` with its two requests swapped.
fn mirror(s: &Sys) -> Sys {
    let swap_id = |id: Id| match usize::from(id) {
        1 => Id::from(2),
        2 => Id::from(1),
        other => Id::from(other),
    };
    let swap_timer = |t: &Timer| match *t {
        Timer::OpenDoneOf(k) => Timer::OpenDoneOf(1 - k),
        Timer::OpenFailsOf(k) => Timer::OpenFailsOf(1 - k),
        Timer::CleanupDoneOf(k) => Timer::CleanupDoneOf(1 - k),
        ref other => other.clone(),
    };
    let mut m = s.clone();
    m.actor_states.swap(1, 2);
    m.timers_set.swap(1, 2);
    m.random_choices.swap(1, 2);
    m.crashed.swap(1, 2);
    m.actor_storages.swap(1, 2);
    if let Some(St::PairNode(n)) = s.actor_states.get(NODE).map(|a| &**a) {
        let mut n = n.clone();
        n.reqs.swap(0, 1);
        for k in &mut n.finished {
            *k = 1 - *k;
        }
        m.actor_states[NODE] = std::sync::Arc::new(St::PairNode(n));
        let mut timers = stateright::actor::Timers::new();
        for t in s.timers_set[NODE].iter() {
            timers.set(swap_timer(t));
        }
        m.timers_set[NODE] = timers;
    }
    // Flow by flow (stateright's `iter_all` repeats the first message of an
    // ordered flow of more than one forever).
    if let Network::Ordered(flows) = &s.network {
        m.network = Network::Ordered(
            flows
                .iter()
                .map(|(&(src, dst), msgs)| ((swap_id(src), swap_id(dst)), msgs.clone()))
                .collect(),
        );
    }
    m
}
