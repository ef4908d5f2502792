//! Readable renderings of model states and actions, for the explorer and
//! for counterexample reports.

use std::fmt::Write as _;
use std::time::Duration;

use custodian::machine::process::{Action, ProbeState, Signal, StreamEnd, StreamState};
use custodian::machine::request::{Candidate, CleanupReport, CleanupVerdict, FinalResult, Phase};
use stateright::Model;

use crate::process::{self, ProcessModel, ProcessStep, TIMERS};
use crate::request::{self, CANDIDATES, RequestModel, RequestStep, Waiter};

fn secs(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

fn stream(st: StreamState) -> &'static str {
    match (st.open, st.end) {
        (true, StreamEnd::Closed) => "open",
        (true, StreamEnd::HeldOpen) => "held",
        (true, StreamEnd::CutAtDeadline) => "open(cut)",
        (false, StreamEnd::Closed) => "eof",
        (false, StreamEnd::HeldOpen) => "held→closed",
        (false, StreamEnd::CutAtDeadline) => "cut",
        // `StreamEnd` is `#[non_exhaustive]` (it is the evidence's too).
        (_, _) => "?",
    }
}

/// One line per aspect of a process-model state: time, phase, streams,
/// pending timers, signals, settlement. No raw timing dumps.
pub fn process_state(s: &process::Sys) -> String {
    let m = &s.machine;
    let mut o = String::new();
    let _ = writeln!(o, "t={} phase={:?} tier={:?}", secs(s.now), m.phase, m.tier);
    let root = match (m.root, s.exit_unobserved) {
        (Some(st), _) => format!("{st:?}"),
        (None, true) => "exited, unobserved".to_owned(),
        (None, false) => "alive".to_owned(),
    };
    let cause = m.cause.map_or("-".to_owned(), |c| format!("{c:?}"));
    let _ = writeln!(
        o,
        "root={root} cause={cause} stdout={} stderr={}",
        stream(m.stdout),
        stream(m.stderr)
    );
    let probe = match m.probe {
        ProbeState::Idle => "idle".to_owned(),
        ProbeState::Pending => "pending".to_owned(),
        ProbeState::OccupiedIn(p) => format!("occupied in {p:?}"),
    };
    let timers: Vec<String> = TIMERS
        .iter()
        .zip(s.timers)
        .filter_map(|(t, at)| at.map(|at| format!("{t:?}@{}", secs(at))))
        .collect();
    let _ = writeln!(
        o,
        "timers=[{}] probe={probe} probes_pending={}",
        timers.join(" "),
        s.probes_pending
    );
    let at = |t: Option<Duration>| t.map_or("-".to_owned(), secs);
    let _ = writeln!(
        o,
        "TERM×{}@{} KILL×{} reaps={} settles={}",
        s.terms,
        at(s.term_at),
        s.kills,
        s.reaps,
        s.settles
    );
    if let Some(sum) = s.summary {
        let _ = writeln!(
            o,
            "summary: status={:?} descendants={:?} stdout={:?} stderr={:?} at {}",
            sum.status(),
            sum.descendants,
            sum.stdout,
            sum.stderr,
            at(sum.timings.settled)
        );
    }
    o
}

// ---------------------------------------------------------------------------
// The request model.

fn candidate(c: Candidate) -> String {
    match c {
        Candidate::ExecutorError { code } => format!("ExecutorError({code})"),
        c => format!("{:?}", c.kind()),
    }
}

/// A request-model action by name: `Candidate(Timeout)`, not
/// `Candidate(3)`.
pub fn request_action(act: &request::Act) -> String {
    use request::Act;
    match *act {
        Act::Candidate(i) => match CANDIDATES.get(i) {
            Some(c) if i == 1 => format!("Candidate({}) (duplicate)", candidate(*c)),
            Some(c) => format!("Candidate({})", candidate(*c)),
            None => format!("Candidate(#{i})"),
        },
        Act::CleanupFinished(CleanupVerdict::Failed(code)) => {
            format!("CleanupFinished(Failed({code}))")
        }
        Act::CleanupFinished(v) => format!("CleanupFinished({v:?})"),
        Act::Subscribe(i) => format!("Subscribe(waiter {i})"),
        Act::Observe(i) => format!("Observe(waiter {i})"),
        other => format!("{other:?}"),
    }
}

/// A final result in one line: `cancelled: CallerCancel, cleanup
/// failed(symlink_in_job)`.
pub fn result(r: FinalResult) -> String {
    let cleanup = match r.cleanup() {
        CleanupReport::NotNeeded => "not needed".to_owned(),
        CleanupReport::Cleaned => "cleaned".to_owned(),
        CleanupReport::Failed { code } => format!("failed({code})"),
    };
    let status = format!("{:?}", r.status()).to_lowercase();
    format!("{status}: {}, cleanup {cleanup}", candidate(r.primary()))
}

fn request_phase(p: Phase) -> String {
    match p {
        Phase::Open => "Open".to_owned(),
        Phase::Finalizing { primary } => format!("Finalizing({})", candidate(primary)),
        Phase::Cleaning { primary } => format!("Cleaning({})", candidate(primary)),
        Phase::Writing { .. } => "Writing".to_owned(),
        Phase::Acknowledged { delivery, .. } => format!("Acknowledged({delivery:?})"),
        Phase::Completed { delivery, .. } => format!("Completed({delivery:?})"),
    }
}

/// A request-model state in a few lines: phase, primary, flags, counts,
/// the published result and the waiters. No timeline instants.
pub fn request_state(s: &request::Sys) -> String {
    let m = &s.machine;
    let mut o = String::new();
    let primary = m.primary().map_or("-".to_owned(), candidate);
    let _ = writeln!(o, "phase={} primary={primary}", request_phase(m.phase()));
    let yes = |b: bool| if b { "yes" } else { "no" };
    let cleanup = match (s.cleanups, s.cleanup) {
        (0, _) => "-".to_owned(),
        (_, None) => "running".to_owned(),
        (_, Some(CleanupVerdict::Failed(code))) => format!("failed({code})"),
        (_, Some(v)) => format!("{v:?}").to_lowercase(),
    };
    let _ = writeln!(
        o,
        "workspace={} cancel_asked={} stopped={} cleanup={cleanup} acked={} confirmed={}",
        yes(s.ws_opened),
        yes(s.cancel_requested),
        yes(s.stopped),
        yes(s.acked),
        yes(s.confirmed)
    );
    let _ = writeln!(
        o,
        "cleanups={} writes={} publishes={} duplicates={} unexpected={}",
        s.cleanups,
        s.writes,
        s.publishes,
        m.duplicates().total(),
        m.unexpected()
    );
    if let Some(r) = s.published {
        let _ = writeln!(o, "published: {}", result(r));
    }
    let waiters: Vec<String> = s
        .waiters
        .iter()
        .map(|w| match w {
            Waiter::Idle => "idle".to_owned(),
            Waiter::Subscribed(when) => format!("subscribed({when:?})"),
            Waiter::Observed(when, _) => format!("observed({when:?})"),
        })
        .collect();
    if !waiters.is_empty() {
        let _ = writeln!(o, "waiters: {}", waiters.join(", "));
    }
    o
}

// ---------------------------------------------------------------------------
// Sequence diagrams.

/// One line of a sequence diagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// `from` sends `text` to `to`.
    Message {
        /// Sender participant id.
        from: &'static str,
        /// Receiver participant id.
        to: &'static str,
        /// What is sent.
        text: String,
    },
    /// A note spanning participants.
    Note {
        /// Participant ids the note spans.
        over: Vec<&'static str>,
        /// The note.
        text: String,
    },
}

fn msg(from: &'static str, to: &'static str, text: impl Into<String>) -> Line {
    Line::Message {
        from,
        to,
        text: text.into(),
    }
}

fn note(over: &[&'static str], text: impl Into<String>) -> Line {
    Line::Note {
        over: over.to_vec(),
        text: text.into(),
    }
}

/// A model whose steps can be told as a sequence diagram.
pub trait Narrate: Model {
    /// `(id, label)` of each participant, in column order.
    fn participants(&self) -> Vec<(&'static str, &'static str)>;
    /// The lines for one step: `act` taken in `before`, leading to `after`.
    fn narrate(
        &self,
        before: &Self::State,
        act: &Self::Action,
        after: &Self::State,
        out: &mut Vec<Line>,
    );
}

/// A counterexample (or example) path as a sequence diagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagram {
    /// What the diagram shows.
    pub title: String,
    /// `(id, label)` of each participant.
    pub participants: Vec<(&'static str, &'static str)>,
    /// The lines, in order.
    pub lines: Vec<Line>,
}

impl Diagram {
    /// Tells `path` (as [`stateright::Path::into_vec`] returns it) with
    /// `model`, ending in a note across all participants saying `end`.
    pub fn from_path<M: Narrate>(
        model: &M,
        title: String,
        path: Vec<(M::State, Option<M::Action>)>,
        end: &str,
    ) -> Diagram {
        let participants = model.participants();
        let mut lines = Vec::new();
        for pair in path.windows(2) {
            if let [(before, Some(act)), (after, _)] = pair {
                model.narrate(before, act, after, &mut lines);
            }
        }
        let all: Vec<&'static str> = match (participants.first(), participants.last()) {
            (Some(a), Some(b)) => vec![a.0, b.0],
            _ => Vec::new(),
        };
        lines.push(note(&all, end));
        Diagram {
            title,
            participants,
            lines,
        }
    }

    /// The diagram as mermaid `sequenceDiagram` text.
    pub fn mermaid(&self) -> String {
        let mut o = String::from("sequenceDiagram\n");
        for (id, label) in &self.participants {
            let _ = writeln!(o, "    participant {id} as {}", mermaid_text(label));
        }
        for l in &self.lines {
            match l {
                Line::Message { from, to, text } => {
                    let _ = writeln!(o, "    {from}->>{to}: {}", mermaid_text(text));
                }
                Line::Note { over, text } => {
                    let _ = writeln!(
                        o,
                        "    Note over {}: {}",
                        over.join(","),
                        mermaid_text(text)
                    );
                }
            }
        }
        o
    }

    /// A standalone HTML page that renders the diagram with the mermaid
    /// script at `mermaid_js` (a path or URL, relative to the page).
    pub fn html(&self, mermaid_js: &str) -> String {
        format!(
            "<!doctype html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n\
             </head>\n<body>\n<h1>{title}</h1>\n<pre class=\"mermaid\">\n{text}</pre>\n\
             <script src=\"{js}\"></script>\n<script>\n\
             mermaid.initialize({{ startOnLoad: false, securityLevel: 'strict' }});\n\
             mermaid.run({{ querySelector: '.mermaid' }});\n</script>\n</body>\n</html>\n",
            title = html_escape(&self.title),
            text = html_escape(&self.mermaid()),
            js = html_escape(mermaid_js),
        )
    }
}

/// Text safe inside one mermaid statement: no statement separator, entity
/// or comment markers, no angle brackets (read as HTML by mermaid).
fn mermaid_text(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            ';' => ',',
            '#' => '№',
            '%' => ' ',
            '<' => '‹',
            '>' => '›',
            '{' => '(',
            '}' => ')',
            '\n' | '\r' => ' ',
            c => c,
        })
        .collect()
}

/// Escapes `&`, `<`, `>` and quotes for HTML text and attributes.
pub fn html_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

impl<S: RequestStep> Narrate for RequestModel<S> {
    fn participants(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            ("Env", "executor, caller, node"),
            ("M", "request::step"),
            ("W", "waiters"),
        ]
    }

    fn narrate(
        &self,
        before: &request::Sys,
        act: &request::Act,
        after: &request::Sys,
        out: &mut Vec<Line>,
    ) {
        use request::Act;
        let name = request_action(act);
        match *act {
            Act::Subscribe(_) => out.push(msg("W", "M", name)),
            Act::Observe(i) => {
                let seen = match after.waiters.get(i) {
                    Some(Waiter::Observed(_, r)) => result(*r),
                    _ => "nothing".to_owned(),
                };
                out.push(msg("M", "W", format!("waiter {i} observes {seen}")));
                return;
            }
            _ => out.push(msg("Env", "M", name)),
        }
        if after.cancel_requested && !before.cancel_requested {
            out.push(msg("M", "Env", "CancelProcesses"));
        }
        for _ in before.cleanups..after.cleanups {
            out.push(msg("M", "Env", "StartCleanup"));
        }
        let current = after.machine.result();
        for _ in before.writes..after.writes {
            let r = current.map_or("?".to_owned(), result);
            out.push(msg("M", "Env", format!("WriteTerminal({r})")));
        }
        for _ in before.publishes..after.publishes {
            let r = after.published.map_or("?".to_owned(), result);
            out.push(msg("M", "W", format!("Publish({r})")));
        }
        if before.machine.phase() != after.machine.phase() {
            out.push(note(&["M"], request_phase(after.machine.phase())));
        }
    }
}

impl<S: ProcessStep> Narrate for ProcessModel<S> {
    fn participants(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            ("C", "caller, runtime"),
            ("OS", "root, streams"),
            ("T", "timers"),
            ("M", "process::step"),
            ("G", "process group"),
        ]
    }

    fn narrate(
        &self,
        before: &process::Sys,
        act: &process::Act,
        after: &process::Sys,
        out: &mut Vec<Line>,
    ) {
        use process::Act;
        let at = secs(after.now);
        let tr = match *act {
            Act::Tick => {
                out.push(note(&["T"], format!("t={at}")));
                return;
            }
            Act::ExitUnobserved => {
                out.push(note(&["OS"], format!("root exits, unobserved (t={at})")));
                return;
            }
            Act::Abandon => {
                out.push(msg("C", "M", format!("driver dropped (t={at})")));
                self.step.abandon(&before.machine, after.now)
            }
            Act::Cancel => {
                out.push(msg("C", "M", format!("Cancel (t={at})")));
                match self.transition(before, *act) {
                    Some((_, tr)) => tr,
                    None => return,
                }
            }
            Act::Fire(t) => {
                out.push(msg("T", "M", format!("{t:?} fires (t={at})")));
                match self.transition(before, *act) {
                    Some((_, tr)) => tr,
                    None => return,
                }
            }
            _ => {
                let (event, tr) = match self.transition(before, *act) {
                    Some(x) => x,
                    None => return,
                };
                out.push(msg("OS", "M", format!("{event:?} (t={at})")));
                tr
            }
        };
        for a in &tr.actions {
            out.push(match a {
                Action::SignalGroup(Signal::Term) => msg("M", "G", "SIGTERM"),
                Action::SignalGroup(Signal::Kill) => msg("M", "G", "SIGKILL"),
                Action::SignalGroup(Signal::Int) => msg("M", "G", "SIGINT"),
                Action::ArmTimer { timer, at } => {
                    msg("M", "T", format!("arm {timer:?} at {}", secs(*at)))
                }
                Action::CloseStreams => msg("M", "OS", "close streams"),
                Action::ProbeGroup => msg("M", "OS", "probe group"),
                Action::Reap => msg("M", "OS", "reap"),
                Action::Settle(sum) => msg(
                    "M",
                    "C",
                    format!(
                        "settle {:?}, descendants {:?}",
                        sum.status(),
                        sum.descendants
                    ),
                ),
            });
        }
        if before.machine.phase != after.machine.phase {
            out.push(note(&["M"], format!("{:?}", after.machine.phase)));
        }
    }
}

/// The participant actor `i` of `actors` is: the 2-request configuration's
/// two edges are told apart (`edge1`, `edge2`).
fn party(actors: &[crate::actor::Party], i: usize) -> &'static str {
    use crate::actor::Party;
    let pair = matches!(actors.first(), Some(Party::PairNode(_)));
    match actors.get(i) {
        Some(Party::Node(_) | Party::PairNode(_)) => "node",
        Some(Party::Edge(..)) if pair && i == 1 => "edge1",
        Some(Party::Edge(..)) if pair => "edge2",
        Some(Party::Edge(..)) | None => "edge",
        Some(Party::Waiter) => "waiter",
    }
}

impl Narrate for stateright::actor::ActorModel<crate::actor::Party> {
    fn participants(&self) -> Vec<(&'static str, &'static str)> {
        let mut p: Vec<(&'static str, &'static str)> = Vec::new();
        for (i, a) in self.actors.iter().enumerate() {
            let id = party(&self.actors, i);
            if !p.iter().any(|(x, _)| *x == id) {
                p.push((
                    id,
                    match (a, id) {
                        (crate::actor::Party::Node(_) | crate::actor::Party::PairNode(_), _) => {
                            "node (node::step)"
                        }
                        (crate::actor::Party::Edge(..), "edge1") => "edge 1 (request::step)",
                        (crate::actor::Party::Edge(..), "edge2") => "edge 2 (request::step)",
                        (crate::actor::Party::Edge(..), _) => "edge (request::step)",
                        (crate::actor::Party::Waiter, _) => "waiters",
                    },
                ));
            }
        }
        p
    }

    fn narrate(
        &self,
        before: &Self::State,
        act: &Self::Action,
        after: &Self::State,
        out: &mut Vec<Line>,
    ) {
        use stateright::actor::ActorModelAction as A;
        let name = |id: stateright::actor::Id| party(&self.actors, usize::from(id));
        match act {
            A::Deliver { src, dst, msg: m } => {
                out.push(msg(name(*src), name(*dst), format!("{m:?}")))
            }
            A::Drop(e) => out.push(note(&[name(e.dst)], format!("lost: {:?}", e.msg))),
            A::Timeout(id, t) => out.push(note(&[name(*id)], format!("{t:?}"))),
            A::Crash(id) => out.push(note(&[name(*id)], "crash")),
            A::Recover(id) => out.push(note(&[name(*id)], "restart")),
            A::SelectRandom { .. } => {}
        }
        // Each edge's request phase, when it changed.
        let phase = |s: &Self::State, i: usize| match s.actor_states.get(i).map(|a| &**a) {
            Some(crate::actor::St::Edge(e)) => Some(request_phase(e.req.phase())),
            _ => None,
        };
        for i in 0..self.actors.len() {
            if let (Some(b), Some(a)) = (phase(before, i), phase(after, i)) {
                if a != b {
                    out.push(note(&[party(&self.actors, i)], a));
                }
            }
        }
    }
}
