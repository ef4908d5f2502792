//! Conformance of the runtime to the model: traces recorded by the real
//! coordinator (the forced-order races and a seeded stress run, the same
//! scenario code its own tests run) are replayed into the stateright
//! request model.
//!
//! For every recorded transition: the event must be an action the model's
//! environment has enabled in the replayed state; applying it with the
//! model (which calls the real step function) must reach the recorded
//! machine state; and every `always` property of the model must hold in the
//! state reached. Traces whose events the model's bounded environment cannot
//! produce (a candidate repeated beyond its bound, a cleanup code other than
//! the model's) are counted and reported, not silently dropped.
//!
//! The test also measures edge coverage: which (abstract state, event)
//! edges of the model the runtime traces exercised, against every edge
//! reachable in the model. The figures go to docs/verification.md.
//!
//! Why here and not in the root crate's tests: `custodian-model` depends on
//! `custodian`, so a dev-dependency the other way would be a cycle. The
//! scenario files are shared with `#[path]` instead.

#[path = "../../tests/coordinator/support.rs"]
mod support;

#[path = "../../tests/coordinator/scenarios.rs"]
mod scenarios;

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};

use custodian::machine::request::{Event, State};
use custodian::request::TransitionRecord;
use custodian_model::request::{Act, Real, RequestModel, Sys};
use stateright::{Expectation, Model};

type M = RequestModel<Real>;

/// The coverage abstraction of a machine state: its phase, whether a
/// workspace was announced and whether the caller is gone.
fn abstract_state(s: &State) -> String {
    let phase = s.phase().name();
    format!(
        "{phase}{}{}",
        if s.workspace_announced() { "+ws" } else { "" },
        if s.caller_gone() { "+gone" } else { "" }
    )
}

fn event_kind(e: &Event) -> String {
    match e {
        Event::Candidate(c) => format!("candidate:{:?}", c.kind()),
        Event::WorkspaceOpening => "workspace_opening".into(),
        Event::ExecutionStopped => "execution_stopped".into(),
        // Every clean verdict is one kind: the machine treats them alike.
        Event::CleanupFinished(v) if v.is_clean() => "cleanup_finished:ok".into(),
        Event::CleanupFinished(_) => "cleanup_finished:failed".into(),
        Event::EndpointAcknowledged => "endpoint_acknowledged".into(),
        Event::Published => "published".into(),
    }
}

type Edge = (String, String);

/// The machine fields a replay must reproduce (the timeline differs: the
/// model steps at a fixed instant, the runtime at its clock).
fn same_machine(a: &State, b: &State) -> bool {
    a.phase() == b.phase()
        && a.workspace_announced() == b.workspace_announced()
        && a.open_refused() == b.open_refused()
        && a.caller_gone() == b.caller_gone()
        && a.duplicates() == b.duplicates()
        && a.unexpected() == b.unexpected()
}

/// The machine event an environment action feeds in, if any.
fn act_event(model: &M, s: &Sys, act: Act) -> Option<Event> {
    match act {
        Act::Candidate(_) => {
            // Learn the candidate from the model itself: fire it on a fresh
            // state and read `first`.
            let init = model.init_states().remove(0);
            let n = model.next_state(&init, act)?;
            n.first.map(Event::Candidate)
        }
        Act::WorkspaceOpening | Act::OpenAfterStop => Some(Event::WorkspaceOpening),
        Act::ExecutionStopped => Some(Event::ExecutionStopped),
        Act::CleanupFinished(r) => Some(Event::CleanupFinished(r)),
        Act::EndpointAcknowledged => Some(Event::EndpointAcknowledged),
        Act::Published => Some(Event::Published),
        Act::Subscribe(_) | Act::Observe(_) => {
            let _ = s;
            None
        }
    }
}

#[derive(Debug, Default)]
struct Replay {
    traces: usize,
    replayed: usize,
    steps: usize,
    outside: BTreeMap<String, usize>,
    edges: BTreeSet<Edge>,
}

fn replay(model: &M, logs: &[Vec<TransitionRecord>], out: &mut Replay) {
    let properties: Vec<_> = model
        .properties()
        .into_iter()
        .filter(|p| p.expectation == Expectation::Always)
        .collect();
    'trace: for (t, log) in logs.iter().enumerate() {
        out.traces += 1;
        let mut sys = model.init_states().remove(0);
        let mut edges = Vec::new();
        for r in log {
            let mut enabled = Vec::new();
            model.actions(&sys, &mut enabled);
            let matching = enabled
                .into_iter()
                .find(|a| act_event(model, &sys, *a) == Some(r.event));
            let Some(act) = matching else {
                // The prefix up to here was checked and counts.
                *out.outside.entry(event_kind(&r.event)).or_default() += 1;
                out.edges.extend(edges);
                continue 'trace;
            };
            assert!(
                same_machine(&sys.machine, &r.before),
                "trace {t}: replayed state diverged before {r:?}"
            );
            let next = model
                .next_state(&sys, act)
                .expect("an enabled action has a next state");
            assert!(
                same_machine(&next.machine, &r.after),
                "trace {t}: the model reaches {:?}, the runtime recorded {:?}",
                next.machine,
                r.after
            );
            for p in &properties {
                assert!(
                    (p.condition)(model, &next),
                    "trace {t}: property {:?} fails after {r:?}",
                    p.name
                );
            }
            edges.push((abstract_state(&r.before), event_kind(&r.event)));
            sys = next;
            out.steps += 1;
        }
        out.replayed += 1;
        out.edges.extend(edges);
    }
}

/// Every (abstract state, event) edge reachable in the model (0 waiters).
fn reachable_edges(model: &M) -> BTreeSet<Edge> {
    let mut seen: HashSet<Sys> = HashSet::new();
    let mut queue: VecDeque<Sys> = model.init_states().into();
    let mut edges = BTreeSet::new();
    while let Some(s) = queue.pop_front() {
        if !seen.insert(s.clone()) {
            continue;
        }
        let mut acts = Vec::new();
        model.actions(&s, &mut acts);
        for a in acts {
            let Some(next) = model.next_state(&s, a) else {
                continue;
            };
            if let Some(e) = act_event(model, &s, a) {
                edges.insert((abstract_state(&s.machine), event_kind(&e)));
            }
            if !seen.contains(&next) {
                queue.push_back(next);
            }
        }
    }
    edges
}

#[test]
fn runtime_traces_conform_to_the_model_and_cover_its_edges() {
    let model = RequestModel::new(Real, 0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let mut logs = rt.block_on(async {
        let mut logs = scenarios::run_family(&scenarios::family_a(), "a").await;
        logs.extend(scenarios::run_family(&scenarios::family_b(), "b").await);
        logs.extend(scenarios::run_family_c().await);
        logs.extend(scenarios::run_family(&scenarios::family_d(), "d").await);
        logs.extend(scenarios::run_family(&scenarios::family_e(), "e").await);
        logs.extend(scenarios::run_family(&scenarios::family_f(), "f").await);
        logs.extend(scenarios::run_family(&scenarios::family_g(), "fail-g").await);
        logs.extend(scenarios::run_family(&scenarios::family_h(), "h").await);
        logs.extend(scenarios::run_announcements(&scenarios::family_i(), "i").await);
        logs
    });
    let seed = scenarios::seed();
    eprintln!("stress seed: {seed} (replay with CUSTODIAN_STRESS_SEED={seed})");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (totals, stress_logs) = rt.block_on(scenarios::run(2_000, seed));
    assert_eq!(totals.double_cleanups, 0, "seed={seed}");

    // The forced orders alone must reach every edge the runtime can take:
    // coverage must not depend on the random seed.
    let mut forced = Replay::default();
    replay(&model, &logs, &mut forced);
    logs.extend(stress_logs);
    let mut out = Replay::default();
    replay(&model, &logs, &mut out);
    let reachable = reachable_edges(&model);
    let forced_covered = forced.edges.intersection(&reachable).count();
    let covered: BTreeSet<_> = out.edges.intersection(&reachable).cloned().collect();
    let outside_model: BTreeSet<_> = out.edges.difference(&reachable).cloned().collect();
    let missing: BTreeSet<_> = reachable.difference(&out.edges).cloned().collect();
    eprintln!(
        "conformance: {} traces, {} replayed ({} steps), outside the model's environment: {:?}",
        out.traces, out.replayed, out.steps, out.outside
    );
    eprintln!(
        "edge coverage: {}/{} reachable edges exercised ({} by the forced orders alone)",
        covered.len(),
        reachable.len(),
        forced_covered
    );
    for (s, e) in &missing {
        eprintln!("  not exercised: {s} --{e}-->");
    }
    assert!(
        outside_model.is_empty(),
        "runtime edges the model cannot take: {outside_model:?}"
    );
    // Traces leave the model's environment only where the runtime repeats a
    // candidate the model fires once (a sink failure after a reported
    // write failure, a dropped handle after a reported disconnect).
    for kind in out.outside.keys() {
        assert!(
            kind == "candidate:TerminalWriteFailed" || kind == "candidate:CallerDisconnect",
            "unexpected event outside the model: {kind}"
        );
    }
    assert!(
        out.replayed * 4 >= out.traces * 3,
        "most traces must replay whole: {out:?}"
    );
    // Every reachable edge not exercised must be one the runtime cannot
    // take: events while `acknowledged` (the runtime commits `Published` in
    // the same step as `Publish`, so nothing else lands in between).
    for (s, e) in reachable.difference(&forced.edges) {
        assert!(
            s.starts_with("acknowledged") && e != "published",
            "edge not exercised by the forced orders: {s} --{e}-->"
        );
    }
    assert!(!covered.is_empty());
}
