//! The composition model: an edge coordinator and a node as stateright
//! actors over a network that reorders, duplicates and drops messages, with
//! node crash and restart. The edge's actor calls the real
//! [`custodian::machine::request::step`]; the node's actor calls the real
//! [`custodian::machine::node::step`]. Waiters are actors too: they ask the
//! edge for the result over the same network.
//!
//! This is the 1-request configuration. The 2-request configuration
//! ([`pair`]) puts two of these edges, one request each, before one node
//! whose table remembers one finished request, over the ordered network.
//!
//! # The actors
//!
//! - **Edge** (one request). Its executor, the caller and the clock are
//!   timers that fire in any order: `Announce` (the executor commits
//!   [`Event::WorkspaceOpening`] and, if the machine accepted it, sends
//!   `Open` to the node), `CallerCancel`, `CallerDisconnect` and `Timeout`
//!   (terminal candidates; an `OpenFailed` answer is the executor's error), `Succeed` (set once the node answered the open: the
//!   executor returns success), `Stopped` (set on `CancelProcesses`: the
//!   executor, local to the edge, is aborted and reported stopped). The
//!   machine's `CancelProcesses` also sends `Cancel` to the node; its
//!   `StartCleanup` sends one `Cleanup`, as the real `WireClient` does (no
//!   retry: within a connection nothing is lost). `WriteTerminal` is
//!   acknowledged at once and `Publish` answers every waiter that asked.
//!   When its connection breaks (`Lost`), the edge does what `WireClient`
//!   does: every call still waiting, and every later one, fails
//!   `Disconnected` — an open still unanswered is the executor's error
//!   `node_unreachable`, a cleanup is `Failed(node_unreachable)` — and it
//!   does not reconnect.
//! - **Node**. Every message goes through `node::step`; `Action::Open`
//!   starts an open that finishes later (timer `OpenDone`: the job directory
//!   now exists on disk) or fails (timer `OpenFails`: part of the directory
//!   may exist, and the node no longer knows), `Action::StartCleanup` starts a cleanup that
//!   finishes later (timer `CleanupDone`: the job directory is removed, and
//!   the verdict is the node's next input), so that messages arrive while
//!   it runs, as they do at a real node. The disk (does the job directory
//!   exist; how many removals)
//!   survives a crash; the node's table does not. Every incarnation, the
//!   first included, starts the request at [`node::State::after_restart`],
//!   as the real node does for an id its table does not hold. A restarted
//!   node reclaims what its predecessor left on disk (timer `Reclaim`: the
//!   journal reclaim at a node's start removes the job directory).
//!   The first incarnation may also be shut down (timer `Shutdown`: a
//!   `SIGTERM`, or its stdin closing), as `wire::node` does it: it cleans
//!   the request if it holds it open and its cleanup has not started (its
//!   own `Cleanup` input, answered to nobody), waits for a running open or
//!   cleanup to finish, then exits; the edge reads the end of its
//!   connection (`Lost`). An exited node reads nothing more.
//! - **Waiter**: sends `Wait` to the edge at start and keeps what it is
//!   answered.
//!
//! The network is unordered and duplicating (a sent message may be
//! delivered any number of times) and lossy (a message may be dropped for
//! good); the node may crash once and recover. States where the edge
//! crashed are outside the model (its durability is not what is checked).
//!
//! # Connections and incarnations
//!
//! A node process serves only the connections made to it: the wire runs
//! over a node's stdio or a connected stream socket, and a message written
//! to a node that died is lost with its connection, never read by the
//! process that replaces it. The model keeps that and nothing stronger:
//! every message carries the incarnation it was sent to or from (the node's
//! restart count); the restarted node drops messages to an earlier
//! incarnation, and its start tells the edge that its connection to the
//! first one broke (`Lost`: the end of file the edge reads). The edge's one
//! connection is to the first incarnation; it ignores what arrives after
//! the loss and anything from a later incarnation. Within one incarnation
//! the network still reorders and duplicates freely. The broken variant
//! [`Variant::ReplayAcrossRestart`] delivers old messages to the new
//! incarnation, and is caught.

pub mod pair;

use std::borrow::Cow;
use std::fmt;
use std::time::Instant;

use custodian::error::SafeCode;
use custodian::machine::node::{self, CleanupVerdict, Input, Reply};
use custodian::machine::request::{self, Action, Candidate, CleanupReport, Event, FinalResult};
use stateright::Expectation;
use stateright::actor::{
    Actor, ActorModel, ActorModelState, Envelope, Id, LossyNetwork, Network, Out, model_timeout,
};

const NODE: usize = 0;
const EDGE: usize = 1;
const FAILED: SafeCode = SafeCode::new("symlink_in_job");

/// A message between the actors.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// Edge → node: open the request's workspace (sent to incarnation `n`).
    Open(u8),
    /// Node → edge: the answer to `Open` (from incarnation `n`).
    OpenAnswer(u8, Reply),
    /// Edge → node: cancel the request (sent to incarnation `n`).
    Cancel(u8),
    /// Node → edge: the answer to `Cancel` (from incarnation `n`). The
    /// real client matches each answer to its call, so this one ends the
    /// cancel's call and is never taken for the open's answer; nothing
    /// waits on it (the request machine's stop is confirmed by
    /// `Stopped`).
    CancelAnswer(u8, Reply),
    /// Edge → node: clean the request's workspace (idempotent; sent to
    /// incarnation `n`).
    Cleanup(u8),
    /// The edge's connection to incarnation `n` broke (the node died): the
    /// end of file the edge reads, delivered once the node restarted.
    Lost(u8),
    /// Node → edge: the cleanup's verdict (from incarnation `n`).
    Cleaned(u8, CleanupVerdict),
    /// Waiter → edge: send me the result.
    Wait,
    /// Edge → waiter: the result.
    Result(FinalResult),
}

/// A timer: an event that may happen at any moment once set.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Timer {
    /// The executor announces the workspace and asks the node to open it.
    Announce,
    /// The caller cancels.
    CallerCancel,
    /// The caller goes away (every handle dropped).
    CallerDisconnect,
    /// The request times out.
    Timeout,
    /// The executor returns success (after its open was answered).
    Succeed,
    /// The executor was aborted and is reported stopped.
    Stopped,
    /// The node's open finishes: the job directory exists.
    OpenDone,
    /// The node's open fails instead, part of its job directory made.
    OpenFails,
    /// The node's cleanup finishes: the job directory is removed.
    CleanupDone,
    /// A restarted node's journal reclaim removes what its predecessor left.
    Reclaim,
    /// The node is shut down (`SIGTERM`, or its stdin closed).
    Shutdown,
    /// The 2-request node ([`pair`]): request `k`'s open finishes.
    OpenDoneOf(u8),
    /// The 2-request node: request `k`'s open fails instead.
    OpenFailsOf(u8),
    /// The 2-request node: a cleanup of request `k` finishes.
    CleanupDoneOf(u8),
}

/// What survives a node crash: the disk.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Disk {
    /// The request's job directory exists.
    pub job: bool,
    /// Cleanups that removed an existing job directory.
    pub removals: u8,
    /// The job directory was ever created.
    pub ever_opened: bool,
    /// Times the node restarted (bounded by the model's boundary).
    pub restarts: u8,
}

/// The node's volatile state for the one request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeState {
    /// The real node decision state.
    pub req: node::State,
    /// The disk (also saved as the actor's storage).
    pub disk: Disk,
    /// Cleanups started by this incarnation.
    pub cleanups: u8,
    /// The edge waits for a cleanup verdict (`AwaitCleanup`).
    pub awaiting: bool,
    /// This incarnation restarted after a crash.
    pub restarted: bool,
    /// An open was refused because the request was cancelled or cleaned.
    pub refused_closed: bool,
    /// A cleanup arrived after one had started (a duplicate or a retry).
    pub duplicate_cleanup: bool,
    /// An open arrived while this incarnation's cleanup ran.
    pub open_during_cleanup: bool,
    /// An open of this incarnation failed.
    pub open_failed: bool,
    /// This incarnation started an open.
    pub opened: bool,
    /// The node was shut down and cleans up before it exits.
    pub shutting_down: bool,
    /// The node exited after its shutdown: it reads nothing more.
    pub exited: bool,
}

/// The edge's state for its one request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EdgeState {
    /// The real request machine.
    pub req: request::State,
    /// The workspace was announced and accepted; `Open` was sent.
    pub announced: bool,
    /// The node's answer to `Open`, once one arrived.
    pub open_answer: Option<Reply>,
    /// `Cleanup` was sent.
    pub cleanup_sent: bool,
    /// The node's cleanup verdict, once one arrived.
    pub cleanup_answer: Option<CleanupVerdict>,
    /// The result published (first `Publish`).
    pub published: Option<FinalResult>,
    /// `Publish` actions.
    pub publishes: u8,
    /// The request completed.
    pub completed: bool,
    /// Waiters that asked, by actor index.
    pub waiters: Vec<usize>,
    /// The connection to the node broke: every call fails `Disconnected`.
    pub disconnected: bool,
}

/// A waiter's state: what it was answered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WaiterState {
    /// The first result received.
    pub seen: Option<FinalResult>,
    /// A later answer differed from the first.
    pub conflicting: bool,
}

/// Any actor's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[allow(clippy::large_enum_variant)] // one edge per model: boxing buys nothing
pub enum St {
    /// The node.
    Node(NodeState),
    /// The edge.
    Edge(EdgeState),
    /// A waiter.
    Waiter(WaiterState),
    /// The node of the 2-request configuration ([`pair`]).
    PairNode(pair::PairNode),
}

/// Deliberate breakages of the composition, each caught by a property.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The real edge and node.
    Real,
    /// The old order: the edge opens first and reports the workspace to
    /// the request only when the open's answer arrives.
    OpenBeforeAnnounce,
    /// The node starts a cleanup for every cleanup message, duplicates and
    /// retries included.
    CleanupPerMessage,
    /// The edge treats its cleanup as done the moment it sends it.
    CompleteBeforeCleanupAnswer,
    /// The edge answers a waiter at once with the outcome known so far.
    EarlyAnswer,
    /// A restarted node accepts messages sent to its earlier incarnation,
    /// as if a connection outlived the process it was made to.
    ReplayAcrossRestart,
    /// The node's decisions, broken: a cleanup that waited for a running
    /// open is never started when the open finishes.
    CleanupNeverStarted,
    /// The node's decisions, broken: an open that arrives while a cleanup
    /// runs is started.
    OpenDuringCleanup,
    /// The node's shutdown, broken: it exits at once, without cleaning the
    /// request it holds open.
    ShutdownWithoutCleanup,
    /// The answers, broken as this model sent them until 2026-12-05: the
    /// node's answer to a cancel reaches the edge as an open's answer, which
    /// an edge still waiting for its open takes for the open's (and drops
    /// the real one). The real client matches each answer to its call.
    AnswersACancelAsAnOpen,
    /// The edge, broken for progress only: a cleanup answer that arrives
    /// before the open's answer makes it forget the cleanup it sent, so the
    /// request can never complete. Every safety property holds (nothing
    /// completes, so nothing completes wrongly); the progress check
    /// ([`crate::progress`]) finds the trap.
    ForgetsAnEarlyCleanupAnswer,
    /// The 2-request node's table, broken: it evicts the oldest finished
    /// request even while a cleanup of it is in flight.
    EvictsInFlight,
    /// The 2-request node's table, altered: it evicts the newest finished
    /// request (the one just filed) instead of the oldest. It breaks no
    /// property: on the ordered wire nothing asks for a request after its
    /// cleanup's answer, so which finished request is forgotten cannot be
    /// seen ([`pair`]).
    EvictsNewest,
    /// The 2-request node's table, broken as the real node was until
    /// 2026-12-04 (`wire::node`'s `forgettable_now`): a cancel retires a
    /// request whose open failed part-way (its job `Unknown`), so the other
    /// request's result can evict it before the node's shutdown cleans it.
    ForgetsACancelledFailedOpen,
    /// The edge, broken for progress only: the end of its connection fails
    /// nothing that waits (a client that leaves its pending calls waiting at
    /// end of file), so a request whose node was shut down before it
    /// answered the request's cleanup waits for an answer that never comes.
    IgnoresTheEndOfItsConnection,
}

impl Variant {
    /// The report name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Real => "composition",
            Variant::OpenBeforeAnnounce => "composition/broken/open-before-announce",
            Variant::CleanupPerMessage => "composition/broken/cleanup-per-message",
            Variant::CompleteBeforeCleanupAnswer => {
                "composition/broken/complete-before-cleanup-answer"
            }
            Variant::EarlyAnswer => "composition/broken/early-answer",
            Variant::ReplayAcrossRestart => "composition/broken/replay-across-restart",
            Variant::CleanupNeverStarted => "composition/broken/cleanup-never-started",
            Variant::OpenDuringCleanup => "composition/broken/open-during-cleanup",
            Variant::ShutdownWithoutCleanup => "composition/broken/shutdown-without-cleanup",
            Variant::AnswersACancelAsAnOpen => "composition/broken/answers-a-cancel-as-an-open",
            Variant::ForgetsAnEarlyCleanupAnswer => {
                "composition/broken/forgets-an-early-cleanup-answer"
            }
            Variant::EvictsInFlight => "composition/broken/evicts-in-flight",
            Variant::EvictsNewest => "composition/broken/evicts-newest",
            Variant::ForgetsACancelledFailedOpen => {
                "composition/broken/forgets-a-cancelled-failed-open"
            }
            Variant::IgnoresTheEndOfItsConnection => {
                "composition/broken/ignores-the-end-of-its-connection"
            }
        }
    }

    /// The property the variant breaks.
    pub fn breaks(self) -> Option<&'static str> {
        match self {
            Variant::Real => None,
            Variant::OpenBeforeAnnounce => Some(OPENED_IS_CLEANED),
            Variant::CleanupPerMessage => Some(ONE_CLEANUP_PER_NODE),
            Variant::CompleteBeforeCleanupAnswer => Some(COMPLETES_AFTER_CLEANUP_ANSWER),
            Variant::EarlyAnswer => Some(WAITERS_SEE_PUBLISHED),
            Variant::ReplayAcrossRestart => Some(ONLY_ITS_OWN_CONNECTIONS),
            Variant::CleanupNeverStarted => Some(NODE_CLEANUP_PROGRESSES),
            Variant::OpenDuringCleanup => Some(OPENED_IS_CLEANED),
            Variant::ShutdownWithoutCleanup => Some(SHUTDOWN_CLEANS),
            Variant::AnswersACancelAsAnOpen => Some(OPEN_ANSWERED_BY_AN_OPEN),
            Variant::ForgetsAnEarlyCleanupAnswer => Some(COMPLETES_AND_CLEANS),
            Variant::EvictsInFlight => Some(pair::IN_FLIGHT_HELD),
            // Harmless on the ordered wire: see `pair`.
            Variant::EvictsNewest => None,
            Variant::ForgetsACancelledFailedOpen => Some(SHUTDOWN_CLEANS),
            Variant::IgnoresTheEndOfItsConnection => Some(pair::BOTH_COMPLETE_AND_CLEAN),
        }
    }
}

/// Property: a job directory on the node is gone, or its failure reported,
/// once the request completed.
pub const OPENED_IS_CLEANED: &str = "every workspace opened on a node is cleaned or reported";
/// Progress property ([`crate::progress`]): from every reachable state, the
/// request can still complete with its job directory gone or its failure
/// reported.
pub const COMPLETES_AND_CLEANS: &str =
    "every request can still complete, its workspace cleaned or its failure reported";

/// The goal of [`COMPLETES_AND_CLEANS`].
pub fn completed_and_cleaned(s: &Sys) -> bool {
    let (Some(e), Some(d)) = (edge_of(s), disk_of(s)) else {
        return false;
    };
    e.completed
        && (!d.job
            || e.published
                .is_some_and(|r| matches!(r.cleanup(), CleanupReport::Failed { .. })))
}

/// Property: a restarted node opens nothing: the edge's connection was made
/// to its predecessor and died with it, and a node serves only the
/// connections made to it.
pub const ONLY_ITS_OWN_CONNECTIONS: &str =
    "a restarted node opens nothing for a connection made to its predecessor";
/// Property: a node that exited after a shutdown left no job directory.
pub const SHUTDOWN_CLEANS: &str = "a node that exited after its shutdown left no job directory";
/// Property: at most one cleanup per request per node incarnation, and at
/// most one removal of the job directory.
pub const ONE_CLEANUP_PER_NODE: &str = "at most one cleanup per request per node";
/// Property: a request whose workspace was announced completes only after
/// the node answered its cleanup.
pub const COMPLETES_AFTER_CLEANUP_ANSWER: &str =
    "a request completes only after its cleanup answer";
/// Property: what the edge holds as its open's answer is an answer to an
/// open (`Opened`, `OpenFailed`, a refusal, `Closed`), never the answer to
/// another call: the real client matches each answer to its call by its
/// sequence number.
pub const OPEN_ANSWERED_BY_AN_OPEN: &str =
    "the edge's open is answered only by an answer to an open";
/// Property: every waiter sees the published result.
pub const WAITERS_SEE_PUBLISHED: &str = "the result every waiter sees is the one published";
/// Property: a cleanup the node was asked for is running, or waits for a
/// running open, until it finished (a bounded form of "every cleanup asked
/// for finishes": each of those two ends with a timer that is set).
pub const NODE_CLEANUP_PROGRESSES: &str =
    "a cleanup asked of a node runs, or waits for a running open, until it finishes";

/// The actors of the composition.
#[derive(Clone, Debug)]
pub enum Party {
    /// The node.
    Node(Variant),
    /// The edge.
    Edge(Variant, Instant),
    /// A waiter.
    Waiter,
    /// The node of the 2-request configuration ([`pair`]).
    PairNode(Variant),
}

fn node_step(v: Variant, s: &node::State, input: Input) -> node::Transition {
    let mut t = node::step(s, input);
    if v == Variant::CleanupNeverStarted && matches!(input, Input::OpenFinished { .. }) {
        t.actions.retain(|a| *a != node::Action::StartCleanup);
    }
    if v == Variant::OpenDuringCleanup && input == Input::Open && s.cleanup_running() {
        t.next = *s;
        t.actions = vec![node::Action::Open];
    }
    if v == Variant::CleanupPerMessage
        && input == Input::Cleanup
        && s.cleanups_started() > 0
        && !t.actions.contains(&node::Action::StartCleanup)
    {
        t.actions.insert(0, node::Action::StartCleanup);
    }
    t
}

impl Party {
    fn node_input(&self, v: Variant, n: &mut NodeState, input: Input, o: &mut Out<Self>) {
        self.node_input_from(v, n, input, true, o);
    }

    /// `input` to the node; its replies go to the edge when `answer` (an
    /// input of the node's own, its shutdown's cleanup, is answered to
    /// nobody). A node shutting down exits once nothing runs any more.
    fn node_input_from(
        &self,
        v: Variant,
        n: &mut NodeState,
        input: Input,
        answer: bool,
        o: &mut Out<Self>,
    ) {
        let mut inputs = vec![input];
        while let Some(input) = inputs.pop() {
            let t = node_step(v, &n.req, input);
            n.req = t.next;
            for a in t.actions {
                match a {
                    node::Action::Open => {
                        n.opened = true;
                        o.set_timer(Timer::OpenDone, model_timeout());
                        o.set_timer(Timer::OpenFails, model_timeout());
                    }
                    node::Action::Proceed | node::Action::CancelProcesses => {}
                    node::Action::StartCleanup => {
                        n.cleanups = n.cleanups.saturating_add(1);
                        o.set_timer(Timer::CleanupDone, model_timeout());
                    }
                    node::Action::AwaitCleanup => n.awaiting = true,
                    node::Action::Reply(_) if !answer => {}
                    node::Action::Reply(r) => {
                        let inc = n.disk.restarts;
                        let msg = match r {
                            Reply::Cleanup { verdict, .. } => Msg::Cleaned(inc, verdict),
                            // The cancel's own call is answered.
                            r if input == Input::Cancel && v != Variant::AnswersACancelAsAnOpen => {
                                Msg::CancelAnswer(inc, r)
                            }
                            r => {
                                if r == Reply::Refused(node::Refusal::Closed) || r == Reply::Closed
                                {
                                    n.refused_closed = true;
                                }
                                Msg::OpenAnswer(inc, r)
                            }
                        };
                        o.send(Id::from(EDGE), msg);
                    }
                }
            }
            if n.awaiting {
                if let Some(v) = n.req.cleaned() {
                    n.awaiting = false;
                    o.send(Id::from(EDGE), Msg::Cleaned(n.disk.restarts, v));
                }
            }
        }
        self.exit_if_done(n, o);
    }

    /// A node shutting down exits once no open and no cleanup runs: the
    /// edge reads the end of its connection.
    fn exit_if_done(&self, n: &mut NodeState, o: &mut Out<Self>) {
        if n.shutting_down
            && !n.exited
            && !n.req.cleanup_running()
            && n.req.job() != node::JobState::Opening
        {
            n.exited = true;
            o.send(Id::from(EDGE), Msg::Lost(n.disk.restarts));
            for t in [
                Timer::OpenDone,
                Timer::OpenFails,
                Timer::CleanupDone,
                Timer::Reclaim,
            ] {
                o.cancel_timer(t);
            }
        }
    }

    fn edge_events(&self, v: Variant, e: &mut EdgeState, first: Event, o: &mut Out<Self>) {
        let Party::Edge(_, now) = self else { return };
        let mut events = vec![first];
        while let Some(ev) = events.pop() {
            let t = request::step(&e.req, ev, *now);
            e.req = t.next;
            for a in t.actions {
                match a {
                    Action::CancelProcesses => {
                        // Lost with the connection: the node's own cleanup
                        // cancels again before it removes anything.
                        if !e.disconnected {
                            o.send(Id::from(NODE), Msg::Cancel(0));
                        }
                        o.set_timer(Timer::Stopped, model_timeout());
                    }
                    Action::StartCleanup => {
                        e.cleanup_sent = true;
                        if v == Variant::CompleteBeforeCleanupAnswer {
                            events.push(Event::CleanupFinished(CleanupVerdict::Cleaned));
                        } else if e.disconnected {
                            // `WireClient`: a call on a broken connection
                            // fails at once.
                            e.cleanup_answer = Some(UNREACHABLE_VERDICT);
                            events.push(Event::CleanupFinished(UNREACHABLE_VERDICT));
                        } else {
                            o.send(Id::from(NODE), Msg::Cleanup(0));
                        }
                    }
                    Action::WriteTerminal(_) => events.push(Event::EndpointAcknowledged),
                    Action::Publish(r) => {
                        e.publishes = e.publishes.saturating_add(1);
                        e.published.get_or_insert(r);
                        for &w in &e.waiters {
                            o.send(Id::from(w), Msg::Result(r));
                        }
                        events.push(Event::Published);
                    }
                }
            }
        }
        if e.req.is_completed() && !e.completed {
            e.completed = true;
            for t in [
                Timer::Announce,
                Timer::CallerCancel,
                Timer::CallerDisconnect,
                Timer::Timeout,
                Timer::Succeed,
            ] {
                o.cancel_timer(t);
            }
        }
    }
}

/// The code `WireClient` records for a call its broken connection failed.
const UNREACHABLE: SafeCode = SafeCode::new("node_unreachable");
/// The cleanup verdict of a broken connection.
const UNREACHABLE_VERDICT: CleanupVerdict = CleanupVerdict::Failed(UNREACHABLE);

/// The node's verdict as the edge tells its request machine: the node's
/// own (as `WireClient` passes it on), a failure's code made one so that
/// the model stays finite.
fn cleanup_result(v: CleanupVerdict) -> CleanupVerdict {
    match v {
        CleanupVerdict::Failed(_) => CleanupVerdict::Failed(FAILED),
        clean => clean,
    }
}

impl Actor for Party {
    type Msg = Msg;
    type Timer = Timer;
    type State = St;
    type Storage = Disk;
    type Random = ();

    fn on_start(&self, _id: Id, storage: &Option<Disk>, o: &mut Out<Self>) -> St {
        match self {
            Party::Node(_) => {
                if let Some(d) = storage {
                    // The edge reads the end of its connection to the
                    // incarnation that died.
                    o.send(Id::from(EDGE), Msg::Lost(d.restarts));
                    // The journal reclaim of what that incarnation left.
                    if d.job {
                        o.set_timer(Timer::Reclaim, model_timeout());
                    }
                }
                St::Node(NodeState {
                    // As the real node (`wire::node::node_slot_step`): an id
                    // its table does not hold is at `after_restart`, first
                    // incarnation or not, since no node can prove that no
                    // earlier run of it opened the id.
                    req: node::State::after_restart(),
                    disk: match storage {
                        Some(d) => {
                            let d = Disk {
                                restarts: d.restarts.saturating_add(1),
                                ..d.clone()
                            };
                            o.save(d.clone());
                            d
                        }
                        None => {
                            o.set_timer(Timer::Shutdown, model_timeout());
                            // Saved at once: a node that crashes before it wrote
                            // anything still restarts as a restarted node.
                            let d = Disk {
                                job: false,
                                removals: 0,
                                ever_opened: false,
                                restarts: 0,
                            };
                            o.save(d.clone());
                            d
                        }
                    },
                    cleanups: 0,
                    awaiting: false,
                    restarted: storage.is_some(),
                    refused_closed: false,
                    duplicate_cleanup: false,
                    open_during_cleanup: false,
                    open_failed: false,
                    opened: false,
                    shutting_down: false,
                    exited: false,
                })
            }
            Party::Edge(_, now) => {
                for t in [
                    Timer::Announce,
                    Timer::CallerCancel,
                    Timer::CallerDisconnect,
                ] {
                    o.set_timer(t, model_timeout());
                }
                St::Edge(EdgeState {
                    req: request::State::new(*now),
                    announced: false,
                    open_answer: None,
                    cleanup_sent: false,
                    cleanup_answer: None,
                    published: None,
                    publishes: 0,
                    completed: false,
                    waiters: Vec::new(),
                    disconnected: false,
                })
            }
            Party::PairNode(_) => {
                o.set_timer(Timer::Shutdown, model_timeout());
                St::PairNode(pair::PairNode::new())
            }
            Party::Waiter => {
                o.send(Id::from(EDGE), Msg::Wait);
                St::Waiter(WaiterState {
                    seen: None,
                    conflicting: false,
                })
            }
        }
    }

    fn on_msg(&self, id: Id, state: &mut Cow<St>, _src: Id, msg: Msg, o: &mut Out<Self>) {
        let mut s = state.as_ref().clone();
        match (self, &mut s, msg) {
            (Party::PairNode(v), St::PairNode(n), msg) => self.pair_on_msg(*v, n, _src, msg, o),
            (Party::Node(_), St::Node(n), _) if n.exited => return,
            (Party::Node(v), St::Node(n), msg) => {
                let (input, sent_to) = match msg {
                    Msg::Open(i) => (Input::Open, i),
                    Msg::Cancel(i) => (Input::Cancel, i),
                    Msg::Cleanup(i) => (Input::Cleanup, i),
                    _ => return,
                };
                // Sent over a connection to an earlier incarnation: lost
                // with it.
                if sent_to != n.disk.restarts && *v != Variant::ReplayAcrossRestart {
                    return;
                }
                if input == Input::Cleanup && (n.req.cleanups_started() > 0 || n.cleanups > 0) {
                    n.duplicate_cleanup = true;
                }
                if input == Input::Open && n.req.cleanup_running() {
                    n.open_during_cleanup = true;
                }
                self.node_input(*v, n, input, o);
            }
            (Party::Edge(v, now), St::Edge(e), msg) => match msg {
                Msg::Lost(0) => {
                    if e.disconnected {
                        return;
                    }
                    e.disconnected = true;
                    if *v == Variant::IgnoresTheEndOfItsConnection {
                        return;
                    }
                    // Every call still waiting fails `Disconnected`: an
                    // unanswered open is the executor's error, a cleanup
                    // `Failed(node_unreachable)`.
                    if e.announced && e.open_answer.is_none() {
                        let failed = Candidate::ExecutorError { code: UNREACHABLE };
                        self.edge_events(*v, e, Event::Candidate(failed), o);
                    }
                    if e.cleanup_sent && e.cleanup_answer.is_none() {
                        e.cleanup_answer = Some(UNREACHABLE_VERDICT);
                        self.edge_events(*v, e, Event::CleanupFinished(UNREACHABLE_VERDICT), o);
                    }
                }
                // Read from the one connection, to the first incarnation,
                // while it lasts.
                Msg::OpenAnswer(0, r) if !e.disconnected => {
                    if e.open_answer.is_some() {
                        return;
                    }
                    e.open_answer = Some(r);
                    if let Reply::Opened { .. } = r {
                        if *v == Variant::OpenBeforeAnnounce {
                            // The old order: report the workspace now.
                            let t = request::step(&e.req, Event::WorkspaceOpening, *now);
                            e.req = t.next;
                        }
                        o.set_timer(Timer::Succeed, model_timeout());
                    } else if r == Reply::OpenFailed {
                        // The executor's open failed: it reports its error.
                        let failed = Candidate::ExecutorError { code: FAILED };
                        self.edge_events(*v, e, Event::Candidate(failed), o);
                    }
                }
                Msg::Cleaned(0, verdict) if !e.disconnected => {
                    if !e.cleanup_sent || e.cleanup_answer.is_some() {
                        return;
                    }
                    if *v == Variant::ForgetsAnEarlyCleanupAnswer && e.open_answer.is_none() {
                        e.cleanup_sent = false;
                        *state = Cow::Owned(s);
                        return;
                    }
                    e.cleanup_answer = Some(verdict);
                    self.edge_events(*v, e, Event::CleanupFinished(cleanup_result(verdict)), o);
                }
                Msg::Wait => {
                    let w = usize::from(_src);
                    if !e.waiters.contains(&w) {
                        e.waiters.push(w);
                        e.waiters.sort_unstable();
                    }
                    if let Some(r) = e.published {
                        o.send(_src, Msg::Result(r));
                    } else if *v == Variant::EarlyAnswer {
                        if let Some(p) = e.req.primary() {
                            let r = FinalResult::merge(p, CleanupReport::NotNeeded);
                            o.send(_src, Msg::Result(r));
                        }
                    }
                }
                _ => return,
            },
            (Party::Waiter, St::Waiter(w), Msg::Result(r)) => match w.seen {
                None => w.seen = Some(r),
                Some(seen) if seen != r => w.conflicting = true,
                Some(_) => return,
            },
            _ => return,
        }
        let _ = id;
        if s != **state {
            *state = Cow::Owned(s);
        }
    }

    fn on_timeout(&self, _id: Id, state: &mut Cow<St>, timer: &Timer, o: &mut Out<Self>) {
        let mut s = state.as_ref().clone();
        match (self, &mut s) {
            (Party::PairNode(v), St::PairNode(n)) => self.pair_on_timeout(*v, n, timer, o),
            (Party::Node(v), St::Node(n))
                if *timer == Timer::OpenDone || *timer == Timer::OpenFails =>
            {
                // Either ends the open: the other will not fire.
                o.cancel_timer(if *timer == Timer::OpenDone {
                    Timer::OpenFails
                } else {
                    Timer::OpenDone
                });
                // A failed open may have made part of the job directory.
                n.disk.job = true;
                n.disk.ever_opened = true;
                o.save(n.disk.clone());
                let ok = *timer == Timer::OpenDone;
                if !ok {
                    n.open_failed = true;
                }
                self.node_input(*v, n, Input::OpenFinished { ok }, o);
            }
            (Party::Node(v), St::Node(n)) if *timer == Timer::Shutdown => {
                n.shutting_down = true;
                if *v == Variant::ShutdownWithoutCleanup {
                    n.req = node::State::after_restart();
                    for t in [Timer::OpenDone, Timer::OpenFails, Timer::CleanupDone] {
                        o.cancel_timer(t);
                    }
                    self.exit_if_done(n, o);
                } else if n.req.held_open() {
                    // `open_requests`: a job that exists or is being opened,
                    // whose cleanup has not started.
                    self.node_input_from(*v, n, Input::Cleanup, false, o);
                } else {
                    self.exit_if_done(n, o);
                }
            }
            (Party::Node(_), St::Node(n)) if *timer == Timer::Reclaim && n.disk.job => {
                n.disk.job = false;
                n.disk.removals = n.disk.removals.saturating_add(1);
                o.save(n.disk.clone());
            }
            (Party::Node(v), St::Node(n)) if *timer == Timer::CleanupDone => {
                let verdict = if n.disk.job {
                    n.disk.job = false;
                    n.disk.removals = n.disk.removals.saturating_add(1);
                    CleanupVerdict::Cleaned
                } else {
                    CleanupVerdict::AlreadyGone
                };
                o.save(n.disk.clone());
                self.node_input(*v, n, Input::CleanupFinished(verdict), o);
            }
            (Party::Edge(v, now), St::Edge(e)) => match timer {
                Timer::Announce => {
                    if *v == Variant::OpenBeforeAnnounce {
                        e.announced = true;
                        o.send(Id::from(NODE), Msg::Open(0));
                    } else {
                        let accepted = request::accepts_workspace(&e.req);
                        let t = request::step(&e.req, Event::WorkspaceOpening, *now);
                        e.req = t.next;
                        if accepted {
                            e.announced = true;
                            if e.disconnected {
                                // The open fails at once: the executor's
                                // error.
                                let failed = Candidate::ExecutorError { code: UNREACHABLE };
                                self.edge_events(*v, e, Event::Candidate(failed), o);
                            } else {
                                o.send(Id::from(NODE), Msg::Open(0));
                            }
                        }
                    }
                }
                // The caller cancels or goes away, once: the other does not
                // follow (a disconnect after a cancel changes only whether
                // the terminal is written, which the request model covers).
                Timer::CallerCancel => {
                    o.cancel_timer(Timer::CallerDisconnect);
                    self.edge_events(*v, e, Event::Candidate(Candidate::CallerCancel), o)
                }
                Timer::CallerDisconnect => {
                    o.cancel_timer(Timer::CallerCancel);
                    self.edge_events(*v, e, Event::Candidate(Candidate::CallerDisconnect), o)
                }
                Timer::Timeout => self.edge_events(*v, e, Event::Candidate(Candidate::Timeout), o),
                Timer::Succeed => self.edge_events(*v, e, Event::Candidate(Candidate::Success), o),
                Timer::Stopped => self.edge_events(*v, e, Event::ExecutionStopped, o),
                Timer::OpenDone
                | Timer::OpenFails
                | Timer::CleanupDone
                | Timer::Reclaim
                | Timer::Shutdown
                | Timer::OpenDoneOf(_)
                | Timer::OpenFailsOf(_)
                | Timer::CleanupDoneOf(_) => {}
            },
            _ => {}
        }
        if s != **state {
            *state = Cow::Owned(s);
        }
    }

    fn name(&self) -> String {
        match self {
            Party::Node(_) | Party::PairNode(_) => "node".into(),
            Party::Edge(..) => "edge".into(),
            Party::Waiter => "waiter".into(),
        }
    }
}

/// The composition's system state.
pub type Sys = ActorModelState<Party>;

fn node_of(s: &Sys) -> Option<&NodeState> {
    match s.actor_states.get(NODE).map(|a| &**a) {
        Some(St::Node(n)) => Some(n),
        _ => None,
    }
}

fn edge_of(s: &Sys) -> Option<&EdgeState> {
    match s.actor_states.get(EDGE).map(|a| &**a) {
        Some(St::Edge(e)) => Some(e),
        _ => None,
    }
}

fn waiters_of(s: &Sys) -> impl Iterator<Item = &WaiterState> {
    s.actor_states.iter().filter_map(|a| match &**a {
        St::Waiter(w) => Some(w),
        _ => None,
    })
}

/// The disk as it is now (the node's, or its storage while crashed).
fn disk_of(s: &Sys) -> Option<Disk> {
    if s.crashed.get(NODE) == Some(&true) {
        s.actor_storages.get(NODE).cloned().flatten()
    } else {
        node_of(s).map(|n| n.disk.clone())
    }
}

/// The composition model: one node, one edge, `waiters` waiters, at most
/// `max_crashes` node crashes.
pub fn model(variant: Variant, waiters: usize, max_crashes: usize) -> ActorModel<Party> {
    let now = Instant::now();
    let mut m = ActorModel::new((), ())
        .actor(Party::Node(variant))
        .actor(Party::Edge(variant, now));
    for _ in 0..waiters {
        m = m.actor(Party::Waiter);
    }
    let m = m
        .init_network(Network::new_unordered_duplicating([]))
        .lossy_network(LossyNetwork::No)
        .max_crashes(max_crashes)
        // Only the node crashes (the edge's and the waiters' durability is
        // not what is checked), and it restarts at most once.
        .within_boundary(|_, s| {
            s.crashed.iter().enumerate().all(|(i, &c)| i == NODE || !c)
                && disk_of(s).is_none_or(|d| d.restarts <= 1)
        })
        .property(Expectation::Always, OPENED_IS_CLEANED, |_, s| {
            let (Some(e), Some(d)) = (edge_of(s), disk_of(s)) else {
                return true;
            };
            !e.completed
                || !d.job
                || e.published
                    .is_some_and(|r| matches!(r.cleanup(), CleanupReport::Failed { .. }))
        })
        .property(Expectation::Always, NODE_CLEANUP_PROGRESSES, |_, s| {
            // A crashed node's timers are gone with it; it restarts from
            // `after_restart`.
            let Some(n) = node_of(s).filter(|_| s.crashed.get(NODE) != Some(&true)) else {
                return true;
            };
            let set = |t: Timer| s.timers_set[NODE].iter().any(|x| *x == t);
            n.req.fence() != node::Fence::Cleaning
                || (n.req.cleanup_running() && set(Timer::CleanupDone))
                || (n.req.job() == node::JobState::Opening && set(Timer::OpenDone))
        })
        .property(Expectation::Always, SHUTDOWN_CLEANS, |_, s| {
            let exited = node_of(s).is_some_and(|n| n.exited);
            !exited || disk_of(s).is_some_and(|d| !d.job)
        })
        .property(
            Expectation::Sometimes,
            "node shutdown: the node cleans the job it held and the edge is told",
            |_, s| {
                node_of(s).is_some_and(|n| n.exited && n.disk.ever_opened && !n.disk.job)
                    && edge_of(s).is_some_and(|e| e.completed && e.disconnected)
            },
        )
        .property(Expectation::Always, ONLY_ITS_OWN_CONNECTIONS, |_, s| {
            node_of(s).is_none_or(|n| !(n.restarted && n.opened))
        })
        .property(Expectation::Always, ONE_CLEANUP_PER_NODE, |_, s| {
            node_of(s).is_none_or(|n| n.cleanups <= 1) && disk_of(s).is_none_or(|d| d.removals <= 1)
        })
        .property(
            Expectation::Always,
            COMPLETES_AFTER_CLEANUP_ANSWER,
            |_, s| {
                edge_of(s)
                    .is_none_or(|e| !e.completed || !e.announced || e.cleanup_answer.is_some())
            },
        )
        .property(Expectation::Always, OPEN_ANSWERED_BY_AN_OPEN, |_, s| {
            edge_of(s).is_none_or(|e| {
                e.open_answer.is_none_or(|r| {
                    matches!(
                        r,
                        Reply::Opened { .. }
                            | Reply::OpenFailed
                            | Reply::Refused(_)
                            | Reply::Closed
                    )
                })
            })
        })
        .property(Expectation::Always, WAITERS_SEE_PUBLISHED, |_, s| {
            let published = edge_of(s).and_then(|e| e.published);
            waiters_of(s).all(|w| !w.conflicting && (w.seen.is_none() || w.seen == published))
        })
        .property(Expectation::Always, "published at most once", |_, s| {
            edge_of(s).is_none_or(|e| e.publishes <= 1)
        })
        .property(
            Expectation::Sometimes,
            "cancel before open: the node refuses the open",
            |_, s| {
                node_of(s).is_some_and(|n| n.refused_closed && !n.disk.ever_opened)
                    && edge_of(s).is_some_and(|e| e.completed)
            },
        )
        .property(
            Expectation::Sometimes,
            "open answer lost: the workspace is still cleaned",
            |_, s| {
                edge_of(s).is_some_and(|e| {
                    e.completed && e.open_answer.is_none() && e.cleanup_answer.is_some()
                }) && disk_of(s).is_some_and(|d| d.ever_opened && !d.job)
            },
        )
        .property(
            Expectation::Sometimes,
            "duplicate cleanup: answered from the first",
            |_, s| node_of(s).is_some_and(|n| n.duplicate_cleanup && n.cleanups == 1),
        )
        .property(
            Expectation::Sometimes,
            "open failed: its partial job directory is still cleaned",
            |_, s| {
                node_of(s).is_some_and(|n| n.open_failed)
                    && edge_of(s).is_some_and(|e| e.completed && e.cleanup_answer.is_some())
                    && disk_of(s).is_some_and(|d| !d.job)
            },
        )
        .property(
            Expectation::Sometimes,
            "caller disconnect: the request still completes cleaned",
            |_, s| {
                edge_of(s).is_some_and(|e| {
                    e.completed
                        && e.cleanup_answer.is_some()
                        && e.req.primary() == Some(Candidate::CallerDisconnect)
                })
            },
        )
        .property(
            Expectation::Sometimes,
            "an open while the node's cleanup runs: refused",
            |_, s| node_of(s).is_some_and(|n| n.open_during_cleanup && n.refused_closed),
        );
    let m = if waiters == 0 {
        m
    } else {
        m.property(
            Expectation::Sometimes,
            "a waiter sees the published result",
            |_, s| {
                let published = edge_of(s).and_then(|e| e.published);
                published.is_some() && waiters_of(s).any(|w| w.seen == published)
            },
        )
    };
    if max_crashes == 0 {
        return m;
    }
    m.property(
        Expectation::Sometimes,
        "node crash: node_unreachable reported, the job reclaimed by the restarted node",
        |_, s| {
            node_of(s).is_some_and(|n| n.restarted)
                && edge_of(s)
                    .is_some_and(|e| e.completed && e.cleanup_answer == Some(UNREACHABLE_VERDICT))
                && disk_of(s).is_some_and(|d| d.ever_opened && !d.job)
        },
    )
}

/// Folds away the network's record of the last delivered message: the
/// duplicating network keeps it only so that a redelivery that changes
/// nothing still makes a new state, which multiplies every state by the
/// messages in flight without adding any behaviour.
pub fn representative(s: &Sys) -> Sys {
    let mut r = s.clone();
    let envelopes: Vec<Envelope<Msg>> = s
        .network
        .iter_all()
        .map(|e| Envelope {
            src: e.src,
            dst: e.dst,
            msg: e.msg.clone(),
        })
        .collect();
    r.network = Network::new_unordered_duplicating(envelopes);
    r
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
