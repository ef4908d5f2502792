//! Readable renderings of model states and actions, for the explorer and
//! for counterexample reports.

use std::fmt::Write as _;
use std::time::Duration;

use custodian::machine::process::{Phase, ProbeState, StreamEnd, StreamState};

use crate::process::{self, TIMERS};

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
    }
}

/// One line per aspect of a process-model state: time, phase, streams,
/// pending timers, signals, settlement. No raw timing dumps.
pub fn process_state(s: &process::Sys) -> String {
    let m = &s.machine;
    let mut o = String::new();
    let phase = match m.phase {
        Phase::Running => "Running",
        Phase::Draining => "Draining",
        Phase::Term => "Term",
        Phase::Kill => "Kill",
        Phase::Settled => "Settled",
    };
    let _ = writeln!(o, "t={} phase={phase} tier={:?}", secs(s.now), m.tier);
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
