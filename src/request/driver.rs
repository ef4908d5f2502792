//! The request driver: one actor task per request commits every event
//! through [`machine::request::step`](crate::machine::request::step) and
//! executes exactly the actions it returns.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::{Instrument, debug, info_span, warn};

use super::RequestId;
use super::hooks::{Completion, ProcessControl, TerminalSink, WorkspaceLifecycle};
use crate::error::SafeCode;
use crate::machine::request::{self, Action, Candidate, CleanupVerdict, Event, Phase, State};
use crate::sync::{Commit, CommitLog, SettleOnce};

/// The code recorded when the cleanup did not finish by the request's
/// frozen cleanup deadline.
pub const CODE_CLEANUP_DEADLINE_EXCEEDED: SafeCode = SafeCode::new("cleanup_deadline_exceeded");
/// The code recorded when the cleanup task panicked or was aborted.
pub const CODE_CLEANUP_ABORTED: SafeCode = SafeCode::new("cleanup_aborted");
/// The code recorded when the cancel hook did not answer by the request's
/// frozen cleanup deadline: the cleanup ran anyway, without the stop
/// confirmed.
pub const CODE_CANCEL_DEADLINE_EXCEEDED: SafeCode = SafeCode::new("cancel_deadline_exceeded");
/// The code recorded when the cancel hook panicked: the cleanup ran
/// anyway, without the stop confirmed.
pub const CODE_CANCEL_ABORTED: SafeCode = SafeCode::new("cancel_aborted");

/// How long a request may run and finalize. Both deadlines are frozen when
/// the request starts and never extended.
///
/// Built like every configuration of the facade: the defaults, then
/// `with_*` for what differs.
///
/// ```
/// use std::time::Duration;
/// use custodian::request::RequestLimits;
///
/// let limits = RequestLimits::new().with_request_timeout(Duration::from_secs(5));
/// assert_eq!(limits.cleanup_grace, RequestLimits::default().cleanup_grace);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestLimits {
    /// From start to the `Timeout` candidate.
    pub request_timeout: Duration,
    /// From the request deadline to the cleanup deadline: cancel and cleanup
    /// are awaited until `start + request_timeout + cleanup_grace` at most,
    /// whichever candidate ended the request.
    pub cleanup_grace: Duration,
    /// How long one terminal write may take before it counts as failed.
    pub terminal_write_timeout: Duration,
}

impl RequestLimits {
    /// The default limits: a 300 s request timeout, a 30 s cleanup grace,
    /// a 10 s terminal write timeout.
    pub const fn new() -> Self {
        RequestLimits {
            request_timeout: Duration::from_secs(300),
            cleanup_grace: Duration::from_secs(30),
            terminal_write_timeout: Duration::from_secs(10),
        }
    }

    /// Replaces the request timeout.
    #[must_use]
    pub const fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Replaces the cleanup grace.
    #[must_use]
    pub const fn with_cleanup_grace(mut self, grace: Duration) -> Self {
        self.cleanup_grace = grace;
        self
    }

    /// Replaces the terminal write timeout.
    #[must_use]
    pub const fn with_terminal_write_timeout(mut self, timeout: Duration) -> Self {
        self.terminal_write_timeout = timeout;
        self
    }
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits::new()
    }
}

/// One committed transition, as recorded in a request's event log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransitionRecord {
    /// Position in the log, from 0.
    pub index: u32,
    /// The `now` passed to the step function.
    pub at: std::time::Instant,
    /// The state before the event.
    pub before: State,
    /// The event committed.
    pub event: Event,
    /// The state after the event.
    pub after: State,
    /// The actions the step returned, in order; each was executed.
    pub actions: Vec<Action>,
}

/// How many times each side effect ran for one request; tests assert on
/// these to prove exactly-once execution.
#[derive(Debug, Default)]
struct Counters {
    cancels: AtomicU32,
    cleanups: AtomicU32,
    writes: AtomicU32,
    publications: AtomicU32,
}

/// A snapshot of [`RequestHandle::effects`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// `cancel_processes` calls.
    pub cancels: u32,
    /// `cleanup_workspace` calls.
    pub cleanups: u32,
    /// `write_terminal` calls.
    pub writes: u32,
    /// Publications of the final result.
    pub publications: u32,
}

#[derive(Debug)]
struct Shared {
    id: RequestId,
    done: SettleOnce<Completion>,
    /// The committed state, its log, and the inputs sent to the actor and
    /// not yet committed. Every commit — the actor's or a handle's direct
    /// one — steps the machine from the committed state and records the
    /// transition in one critical section, so the log is one sequence
    /// whoever commits; a handle commits `WorkspaceOpening` itself only
    /// while nothing sent is pending, so never ahead of an input it sent
    /// earlier (see [`CommitLog`]).
    commits: CommitLog<State, TransitionRecord>,
    counters: Counters,
    /// Settled when the request asked to cancel its executor (the first
    /// candidate's `CancelProcesses`), before the cancel hook is called: the
    /// edge-side executor waits on it ([`RequestHandle::cancelled`]).
    cancel: SettleOnce<()>,
    span: tracing::Span,
}

impl Shared {
    /// The step of `event` at `now` from `before`, as [`CommitLog`] runs
    /// it under its lock: the record to log, and for the caller the state
    /// before and after and the actions to execute.
    fn transition(
        before: &State,
        index: usize,
        event: Event,
        now: std::time::Instant,
    ) -> Commit<State, TransitionRecord, (State, Vec<Action>)> {
        let before = *before;
        let request::Transition { next, actions } = request::step(&before, event, now);
        debug!(?event, before = ?before.phase(), after = ?next.phase(), ?actions, "transition");
        if event == Event::WorkspaceOpening && !request::accepts_workspace(&before) {
            warn!("a workspace announced after the request's cleanup was decided is refused");
        }
        Commit {
            next,
            record: TransitionRecord {
                index: u32::try_from(index).unwrap_or(u32::MAX),
                at: now,
                before,
                event,
                after: next,
                actions: actions.clone(),
            },
            output: (before, actions),
        }
    }

    /// Commits an event of the actor's own (an action's answer, a timeout,
    /// a disconnect). Returns the state before and after and the actions
    /// the caller must now execute.
    fn commit(&self, event: Event, now: std::time::Instant) -> (State, State, Vec<Action>) {
        let (next, (before, actions)) = self
            .commits
            .commit(|state, index| Self::transition(state, index, event, now));
        (before, next, actions)
    }

    /// As [`commit`](Self::commit), for an input a handle sent with
    /// [`send`](Self::send); it stops counting as pending.
    fn commit_sent(&self, event: Event, now: std::time::Instant) -> (State, State, Vec<Action>) {
        let (next, (before, actions)) = self
            .commits
            .commit_sent(|state, index| Self::transition(state, index, event, now));
        (before, next, actions)
    }

    /// Sends one input to the actor, counted as pending until committed.
    fn send(&self, tx: &mpsc::UnboundedSender<Input>, input: Input) -> Result<(), ()> {
        self.commits.send(|| tx.send(input).map_err(|_| ()))
    }

    fn state(&self) -> State {
        self.commits.state()
    }

    fn log(&self) -> Vec<TransitionRecord> {
        self.commits.log()
    }
}

enum Input {
    Event(Event),
    Opening(oneshot::Sender<bool>),
}

/// The answer of an action, as it comes back to the actor.
#[derive(Clone, Copy, Debug)]
enum Answer {
    /// Commit this event.
    Event(Event),
    /// The cancel hook gave no answer (deadline or panic, with this code):
    /// record why, then commit `ExecutionStopped` so the cleanup still runs.
    StopUnconfirmed(SafeCode),
}

/// The request refused a workspace announcement: its cleanup has started or
/// was decided without a workspace, so the workspace must not be opened.
/// Nothing exists that anyone must clean.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the request is finalizing; its workspace must not be opened")]
pub struct OpenRefused;

/// A caller's handle on one request. Cheap to clone; dropping every clone
/// before the request ended counts as a caller disconnect (the request is
/// still cancelled and cleaned up, with nothing written).
///
/// Give the executor an [`ExecutorHandle`] ([`RequestHandle::executor`]),
/// not a clone of this handle: a clone held by the executor keeps the
/// request alive, so the caller going away would only end it at its
/// timeout.
#[derive(Clone, Debug)]
pub struct RequestHandle {
    tx: mpsc::UnboundedSender<Input>,
    shared: Arc<Shared>,
}

/// A read-only view of a request that does not keep it alive: holding only
/// observers counts as every caller having gone.
#[derive(Clone, Debug)]
pub struct RequestObserver {
    shared: Arc<Shared>,
}

impl RequestObserver {
    /// The request's id.
    pub fn id(&self) -> &RequestId {
        &self.shared.id
    }

    /// Waits for the request to complete; see [`RequestHandle::finished`].
    pub async fn finished(&self) -> Completion {
        self.shared.done.wait_async().await
    }

    /// The completion, if the request has completed.
    pub fn try_finished(&self) -> Option<Completion> {
        self.shared.done.get()
    }

    /// Every committed transition so far, in order.
    pub fn log(&self) -> Vec<TransitionRecord> {
        self.shared.log()
    }

    /// The latest committed state.
    pub fn state(&self) -> State {
        self.shared.state()
    }
}

impl RequestHandle {
    /// The executor's capability on this request, which does not keep it
    /// alive: see [`ExecutorHandle`].
    pub fn executor(&self) -> ExecutorHandle {
        ExecutorHandle {
            tx: self.tx.downgrade(),
            shared: Arc::clone(&self.shared),
        }
    }

    /// The request's tracing span (`request`, with its `request_id`).
    pub fn span(&self) -> &tracing::Span {
        &self.shared.span
    }

    /// A view of the request that does not keep it alive.
    pub fn observer(&self) -> RequestObserver {
        RequestObserver {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The request's id.
    pub fn id(&self) -> &RequestId {
        &self.shared.id
    }

    /// Reports a terminal candidate. Never blocks; candidates from one
    /// handle are committed in the order they were reported, and any number
    /// may race from any number of tasks. Reporting after the request
    /// completed only records a duplicate.
    pub fn candidate(&self, candidate: Candidate) {
        let _ = self
            .shared
            .send(&self.tx, Input::Event(Event::Candidate(candidate)));
    }

    /// Announces that the executor is about to open the request's
    /// workspace, and waits until the machine committed the announcement.
    /// Call it *before* asking anything (a node, the workspace runtime) to
    /// open, and open only on `Ok`: from then on the request's one cleanup
    /// covers the workspace whatever happens next (a cancel, a timeout, an
    /// open answer that never arrives), and the cleanup is idempotent, so a
    /// workspace whose open never happened is simply found gone.
    ///
    /// # Errors
    ///
    /// [`OpenRefused`] when the request's cleanup has already started or was
    /// decided without a workspace: do not open it.
    pub async fn workspace_opening(&self) -> Result<(), OpenRefused> {
        // `WorkspaceOpening` never has actions to execute: when nothing this
        // caller sent earlier is still queued, commit it here and spare the
        // round trip through the actor.
        let direct = {
            let _span = self.shared.span.enter();
            let now = Instant::now().into_std();
            self.shared.commits.commit_direct(|state, index| {
                Shared::transition(state, index, Event::WorkspaceOpening, now)
            })
        };
        if let Some((_, (before, _))) = direct {
            return if request::accepts_workspace(&before) {
                Ok(())
            } else {
                Err(OpenRefused)
            };
        }
        let (tx, rx) = oneshot::channel();
        if self.shared.send(&self.tx, Input::Opening(tx)).is_err() {
            return Err(OpenRefused);
        }
        match rx.await {
            Ok(true) => Ok(()),
            _ => Err(OpenRefused),
        }
    }

    /// Resolves once the request asked to cancel its executor: a terminal
    /// candidate arrived (a caller cancel, a timeout, a disconnect, ...) and
    /// the request is finalizing. The edge-side executor waits on this next
    /// to its work (an open, a process) and stops when it resolves; the
    /// [`ProcessControl`] hook is called right after, for what runs
    /// elsewhere (a node's processes). Dropping this future changes nothing.
    pub async fn cancelled(&self) {
        self.shared.cancel.wait_async().await;
    }

    /// Whether the request asked to cancel its executor; see
    /// [`RequestHandle::cancelled`].
    pub fn is_cancelled(&self) -> bool {
        self.shared.cancel.is_settled()
    }

    /// Waits for the request to complete. Every waiter, early or late,
    /// receives the same value; dropping this future changes nothing.
    pub async fn finished(&self) -> Completion {
        self.shared.done.wait_async().await
    }

    /// The completion, if the request has completed.
    pub fn try_finished(&self) -> Option<Completion> {
        self.shared.done.get()
    }

    /// Every committed transition so far, in order.
    pub fn log(&self) -> Vec<TransitionRecord> {
        self.shared.log()
    }

    /// The latest committed state.
    pub fn state(&self) -> State {
        self.shared.state()
    }

    /// How many times each side effect ran so far.
    pub fn effects(&self) -> Effects {
        let c = &self.shared.counters;
        Effects {
            cancels: c.cancels.load(Ordering::SeqCst),
            cleanups: c.cleanups.load(Ordering::SeqCst),
            writes: c.writes.load(Ordering::SeqCst),
            publications: c.publications.load(Ordering::SeqCst),
        }
    }
}

/// The executor's capability on a request: report its own outcome, announce
/// its workspace, and learn that it must stop. It does **not** keep the
/// request alive: once every [`RequestHandle`] (the caller's side) is gone,
/// the request is a caller disconnect whatever executor handles remain, so
/// an executor that outlives its caller can never hide the disconnect.
///
/// Get one with [`RequestHandle::executor`]. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ExecutorHandle {
    tx: mpsc::WeakUnboundedSender<Input>,
    shared: Arc<Shared>,
}

impl ExecutorHandle {
    /// The request's id.
    pub fn id(&self) -> &RequestId {
        &self.shared.id
    }

    /// The request's tracing span; the executor's own spans (a process's)
    /// nest under it.
    pub fn span(&self) -> &tracing::Span {
        &self.shared.span
    }

    /// Reports a terminal candidate, as [`RequestHandle::candidate`]. If
    /// every caller handle is gone the request is already finalizing as a
    /// disconnect, and the candidate would only have been a duplicate: it is
    /// dropped.
    pub fn candidate(&self, candidate: Candidate) {
        if let Some(tx) = self.tx.upgrade() {
            let _ = self
                .shared
                .send(&tx, Input::Event(Event::Candidate(candidate)));
        }
    }

    /// Announces the workspace, as [`RequestHandle::workspace_opening`].
    ///
    /// # Errors
    ///
    /// [`OpenRefused`] when the request's cleanup has started or was decided
    /// without a workspace (every caller gone included): do not open it.
    pub async fn workspace_opening(&self) -> Result<(), OpenRefused> {
        // Held only for the announcement: a caller that drops its last
        // handle meanwhile is seen as soon as this one goes too.
        let Some(tx) = self.tx.upgrade() else {
            return Err(OpenRefused);
        };
        RequestHandle {
            tx,
            shared: Arc::clone(&self.shared),
        }
        .workspace_opening()
        .await
    }

    /// Resolves once the request asked its executor to stop; see
    /// [`RequestHandle::cancelled`].
    pub async fn cancelled(&self) {
        self.shared.cancel.wait_async().await;
    }

    /// Whether the request asked its executor to stop.
    pub fn is_cancelled(&self) -> bool {
        self.shared.cancel.is_settled()
    }

    /// A read-only view of the request.
    pub fn observer(&self) -> RequestObserver {
        RequestObserver {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// Drives requests end to end. Cheap to clone; every request gets its own
/// actor task on the current tokio runtime.
///
/// [`Runtime`](crate::Runtime) builds one over its own hooks; build one
/// directly to drive a request whose workspace, processes or endpoint live
/// elsewhere (a node across the wire, an endpoint of your own).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use custodian::RequestId;
/// use custodian::request::{
///     Coordinator, NoProcesses, RequestLimits, TerminalSink, TerminalWriteError,
/// };
/// use custodian::machine::request::{Candidate, Delivery, FinalResult, RequestStatus};
/// use custodian::workspace::{Workspace, WorkspaceConfig};
///
/// /// The endpoint: here it only prints the terminal result.
/// struct Print;
/// impl TerminalSink for Print {
///     async fn write_terminal(
///         &self,
///         request: &RequestId,
///         result: &FinalResult,
///     ) -> Result<(), TerminalWriteError> {
///         println!("{request}: {:?}", result.status());
///         Ok(())
///     }
/// }
///
/// let dir = tempfile::tempdir()?;
/// let workspace = Workspace::open(dir.path(), WorkspaceConfig::default())?;
/// let coordinator = Coordinator::new(
///     Arc::new(workspace.clone()),
///     Arc::new(NoProcesses),
///     Arc::new(Print),
///     RequestLimits::default(),
/// );
/// let request = coordinator.start(RequestId::new("req-1")?);
/// let executor = request.executor();
/// executor.workspace_opening().await?; // announce, then open
/// workspace.open_request("req-1")?.create_file("result.json")?;
/// executor.candidate(Candidate::Success);
///
/// let completion = request.finished().await;
/// assert_eq!(completion.result.status(), RequestStatus::Succeeded);
/// assert_eq!(completion.delivery, Delivery::Acknowledged);
/// assert_eq!(completion.cleanup.unwrap().counts.files_removed, 1);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Coordinator<L, P, S> {
    lifecycle: Arc<L>,
    processes: Arc<P>,
    sink: Arc<S>,
    limits: RequestLimits,
}

impl<L, P, S> Clone for Coordinator<L, P, S> {
    fn clone(&self) -> Self {
        Coordinator {
            lifecycle: Arc::clone(&self.lifecycle),
            processes: Arc::clone(&self.processes),
            sink: Arc::clone(&self.sink),
            limits: self.limits,
        }
    }
}

impl<L, P, S> Coordinator<L, P, S>
where
    L: WorkspaceLifecycle,
    P: ProcessControl,
    S: TerminalSink,
{
    /// A coordinator over the given seams.
    pub fn new(lifecycle: Arc<L>, processes: Arc<P>, sink: Arc<S>, limits: RequestLimits) -> Self {
        Coordinator {
            lifecycle,
            processes,
            sink,
            limits,
        }
    }

    /// The workspace lifecycle in use.
    pub fn lifecycle(&self) -> &Arc<L> {
        &self.lifecycle
    }

    /// The process control in use.
    pub fn processes(&self) -> &Arc<P> {
        &self.processes
    }

    /// The terminal sink in use.
    pub fn sink(&self) -> &Arc<S> {
        &self.sink
    }

    /// The default limits of the requests [`Coordinator::start`] begins.
    pub fn limits(&self) -> RequestLimits {
        self.limits
    }

    /// Starts driving a request; its deadlines are frozen now.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    pub fn start(&self, id: RequestId) -> RequestHandle {
        self.start_with(id, self.limits)
    }

    /// Starts driving a request under its own `limits` instead of the
    /// coordinator's defaults; its deadlines are frozen now.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    pub fn start_with(&self, id: RequestId, limits: RequestLimits) -> RequestHandle {
        let now = Instant::now();
        let request_deadline = now + limits.request_timeout;
        let shared = Arc::new(Shared {
            id: id.clone(),
            done: SettleOnce::new(),
            // A request commits about eight transitions.
            commits: CommitLog::with_capacity(State::new(now.into_std()), 8),
            counters: Counters::default(),
            cancel: SettleOnce::new(),
            span: info_span!("request", request_id = %id),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let (itx, irx) = mpsc::unbounded_channel();
        let actor = Actor {
            this: self.clone(),
            shared: Arc::clone(&shared),
            request_deadline,
            cleanup_deadline: request_deadline + limits.cleanup_grace,
            terminal_write_timeout: limits.terminal_write_timeout,
            internal: itx,
            in_flight: 0,
            ready: VecDeque::new(),
            stop_unconfirmed: None,
        };
        let span = shared.span.clone();
        tokio::spawn(actor.run(rx, irx).instrument(span));
        RequestHandle { tx, shared }
    }
}

/// Whether an event the actor commits was sent by a handle (and so counted
/// as pending until committed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    Yes,
    No,
}

struct Actor<L, P, S> {
    this: Coordinator<L, P, S>,
    shared: Arc<Shared>,
    request_deadline: Instant,
    cleanup_deadline: Instant,
    terminal_write_timeout: Duration,
    /// Answers of action tasks come back here; the actor holds a sender so
    /// this channel never closes.
    internal: mpsc::UnboundedSender<Answer>,
    /// Action tasks whose answer has not arrived yet.
    in_flight: u32,
    /// Answers of actions that finished on their first poll, committed
    /// after the external inputs already queued (as the internal channel's
    /// answers are).
    ready: VecDeque<Answer>,
    /// Why the executor's stop was not confirmed, if it was not: the cancel
    /// hook missed the deadline or panicked, and the cleanup ran anyway.
    /// Only the actor reads and writes it.
    stop_unconfirmed: Option<SafeCode>,
}

impl<L, P, S> Actor<L, P, S>
where
    L: WorkspaceLifecycle,
    P: ProcessControl,
    S: TerminalSink,
{
    async fn run(
        mut self,
        mut external: mpsc::UnboundedReceiver<Input>,
        mut internal: mpsc::UnboundedReceiver<Answer>,
    ) {
        let mut external_open = true;
        let mut timer_armed = true;
        let timer = tokio::time::sleep_until(self.request_deadline);
        tokio::pin!(timer);
        loop {
            if self.completed() && !external_open && self.in_flight == 0 && self.ready.is_empty() {
                return;
            }
            // External inputs first: a `WorkspaceOpening` reported before the
            // executor stopped must be committed before the `ExecutionStopped`
            // that the cancel action answers once it has stopped, whether
            // that answer came at once or from its task.
            let event = if self.ready.is_empty() {
                tokio::select! {
                    biased;
                    input = external.recv(), if external_open => {
                        self.on_input(input, &mut external_open);
                        continue;
                    }
                    Some(e) = internal.recv() => {
                        self.in_flight -= 1;
                        e
                    }
                    // A completed request has nothing left to time out.
                    () = &mut timer, if timer_armed && !self.completed() => {
                        timer_armed = false;
                        Answer::Event(Event::Candidate(Candidate::Timeout))
                    }
                }
            } else {
                if external_open {
                    match external.try_recv() {
                        Ok(input) => {
                            self.on_input(Some(input), &mut external_open);
                            continue;
                        }
                        Err(mpsc::error::TryRecvError::Disconnected) => {
                            self.on_input(None, &mut external_open);
                            continue;
                        }
                        Err(mpsc::error::TryRecvError::Empty) => {}
                    }
                }
                let Some(e) = self.ready.pop_front() else {
                    continue;
                };
                e
            };
            let event = match event {
                Answer::Event(e) => e,
                Answer::StopUnconfirmed(code) => {
                    self.stop_unconfirmed = Some(code);
                    // The machine needs the stop to go on; the cleanup that
                    // follows cancels the request's processes itself, and a
                    // node refuses work once that cleanup started. The
                    // completion reports that the stop was not confirmed.
                    Event::ExecutionStopped
                }
            };
            self.commit(event, Sent::No);
        }
    }

    /// Commits one external input (`None`: every handle is gone).
    fn on_input(&mut self, input: Option<Input>, external_open: &mut bool) {
        match input {
            Some(Input::Event(e)) => {
                self.commit(e, Sent::Yes);
            }
            Some(Input::Opening(reply)) => {
                let before = self.commit(Event::WorkspaceOpening, Sent::Yes);
                let _ = reply.send(request::accepts_workspace(&before));
            }
            None => {
                // Every handle is gone: nobody can report a candidate or
                // read the terminal any more.
                *external_open = false;
                if !self.completed() {
                    self.commit(Event::Candidate(Candidate::CallerDisconnect), Sent::No);
                }
            }
        }
    }

    fn completed(&self) -> bool {
        self.shared.state().is_completed()
    }

    /// Commits one event and executes the returned actions; synchronous
    /// follow-up events (the `Published` answer) are committed in the same
    /// call, before any other input. Returns the state before `event`.
    fn commit(&mut self, event: Event, sent: Sent) -> State {
        let now = Instant::now().into_std();
        let (before, after, actions) = match sent {
            Sent::Yes => self.shared.commit_sent(event, now),
            Sent::No => self.shared.commit(event, now),
        };
        let mut queue = VecDeque::new();
        self.execute_all(actions, &after, &mut queue);
        while let Some(event) = queue.pop_front() {
            let (_, next, actions) = self.shared.commit(event, Instant::now().into_std());
            self.execute_all(actions, &next, &mut queue);
        }
        before
    }

    fn execute_all(&mut self, actions: Vec<Action>, state: &State, follow: &mut VecDeque<Event>) {
        for action in actions {
            if let Some(follow_up) = self.execute(action, state) {
                follow.push_back(follow_up);
            }
        }
    }

    /// Performs one action. Slow actions run in their own task and answer
    /// through the internal channel; publishing answers at once.
    fn execute(&mut self, action: Action, state: &State) -> Option<Event> {
        let id = self.shared.id.clone();
        let counters = &self.shared.counters;
        match action {
            Action::CancelProcesses => {
                counters.cancels.fetch_add(1, Ordering::SeqCst);
                // The edge-side executor first, then what runs elsewhere.
                let _first_and_only = self.shared.cancel.settle(());
                let processes = Arc::clone(&self.this.processes);
                self.spawn_answer(
                    async move {
                        processes.cancel_processes(&id).await;
                        Answer::Event(Event::ExecutionStopped)
                    },
                    self.cleanup_deadline,
                    // Past the deadline the cleanup runs anyway: it cancels
                    // the request's processes itself before removing
                    // anything. The completion says the stop was not
                    // confirmed, and why.
                    Answer::StopUnconfirmed(CODE_CANCEL_DEADLINE_EXCEEDED),
                    Answer::StopUnconfirmed(CODE_CANCEL_ABORTED),
                );
                None
            }
            Action::StartCleanup => {
                counters.cleanups.fetch_add(1, Ordering::SeqCst);
                let lifecycle = Arc::clone(&self.this.lifecycle);
                self.spawn_answer(
                    async move {
                        Answer::Event(Event::CleanupFinished(
                            lifecycle.cleanup_workspace(&id).await,
                        ))
                    },
                    self.cleanup_deadline,
                    Answer::Event(Event::CleanupFinished(CleanupVerdict::Failed(
                        CODE_CLEANUP_DEADLINE_EXCEEDED,
                    ))),
                    Answer::Event(Event::CleanupFinished(CleanupVerdict::Failed(
                        CODE_CLEANUP_ABORTED,
                    ))),
                );
                None
            }
            Action::WriteTerminal(result) => {
                counters.writes.fetch_add(1, Ordering::SeqCst);
                let sink = Arc::clone(&self.this.sink);
                let failed = Answer::Event(Event::Candidate(Candidate::TerminalWriteFailed));
                self.spawn_answer(
                    async move {
                        Answer::Event(match sink.write_terminal(&id, &result).await {
                            Ok(()) => Event::EndpointAcknowledged,
                            Err(_) => Event::Candidate(Candidate::TerminalWriteFailed),
                        })
                    },
                    Instant::now() + self.terminal_write_timeout,
                    failed,
                    failed,
                );
                None
            }
            Action::Publish(result) => {
                counters.publications.fetch_add(1, Ordering::SeqCst);
                let delivery = match state.phase() {
                    Phase::Acknowledged { delivery, .. } | Phase::Completed { delivery, .. } => {
                        delivery
                    }
                    // The machine only publishes from Acknowledged.
                    Phase::Open
                    | Phase::Finalizing { .. }
                    | Phase::Cleaning { .. }
                    | Phase::Writing { .. } => request::Delivery::CallerGone,
                };
                let cleanup = if counters.cleanups.load(Ordering::SeqCst) > 0 {
                    self.this.lifecycle.cleanup_detail(&id)
                } else {
                    None
                };
                let spills = self.this.processes.spills(&id);
                let denied = self.this.processes.denied_launches(&id);
                let processes = self.this.processes.process_verdicts(&id);
                let completion = Completion {
                    request_id: id,
                    result,
                    delivery,
                    stop_unconfirmed: self.stop_unconfirmed,
                    cleanup,
                    processes,
                    denied,
                    spills,
                };
                if let Err(refused) = self.shared.done.settle(completion) {
                    warn!(winner = ?refused.winner.result, "a second publication was refused");
                }
                Some(Event::Published)
            }
        }
    }

    /// Runs `work` and feeds its answer back to the actor.
    ///
    /// The work is polled once here first: most hooks answer at once
    /// (nothing to cancel, an in-memory sink), and then the answer joins
    /// [`Actor::ready`] without a task or a channel hop. Otherwise it goes
    /// on in its own task, and the actor waits at most until `deadline`
    /// (answering `on_timeout`; the work goes on in the same task, never
    /// aborted). A panic answers `on_panic`, so no action can leave the
    /// machine waiting forever.
    fn spawn_answer<F>(&mut self, work: F, deadline: Instant, on_timeout: Answer, on_panic: Answer)
    where
        F: std::future::Future<Output = Answer> + Send + 'static,
    {
        let mut work = CatchUnwind(Box::pin(work));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if let std::task::Poll::Ready(answer) = std::pin::Pin::new(&mut work).poll(&mut cx) {
            self.ready.push_back(answer.unwrap_or_else(|()| {
                warn!(?on_panic, "an action panicked");
                on_panic
            }));
            return;
        }
        self.in_flight += 1;
        let tx = self.internal.clone();
        tokio::spawn(
            async move {
                // The actor holds its own sender: a send only fails if the
                // runtime is shutting down.
                tokio::select! {
                    biased;
                    answer = &mut work => {
                        let _ = tx.send(answer.unwrap_or_else(|()| {
                            warn!(?on_panic, "an action panicked");
                            on_panic
                        }));
                    }
                    () = tokio::time::sleep_until(deadline) => {
                        warn!(?on_timeout, "an action missed its deadline");
                        let _ = tx.send(on_timeout);
                        // Missing the deadline stops the wait, not the work.
                        let _ = work.await;
                    }
                }
            }
            .in_current_span(),
        );
    }
}

/// Polls a future, turning a panic into `Err(())` so an action's answer is
/// never lost. The future is not polled again after it panicked.
struct CatchUnwind<F>(std::pin::Pin<Box<F>>);

impl<F: std::future::Future> std::future::Future for CatchUnwind<F> {
    type Output = Result<F::Output, ()>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let fut = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Err(_) => std::task::Poll::Ready(Err(())),
        }
    }
}
