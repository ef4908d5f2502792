//! Progress: from every reachable state, the goal is still reachable
//! (`AG EF goal`).
//!
//! Stateright's `eventually` properties are decided on paths that end, and
//! the composition never ends: its network is duplicating, so a message once
//! sent can always be delivered again. This check builds the whole state
//! graph of a model (its representatives, as the safety check does), then
//! walks it backwards from the goal states: a reachable state that cannot
//! reach the goal is a trap — a request that can no longer complete, a job
//! that can no longer be cleaned — and the shortest path to one is the
//! counterexample.
//!
//! Why that is the liveness we want: the graph is finite, so if every state
//! can reach the goal, every run that keeps giving each enabled step its
//! chance (strong fairness on deliveries and timers) reaches it; a trap is
//! exactly a run no fairness can save.
//!
//! The graph is kept as fingerprints and edges, never as states, and the
//! walk stops at `cap` states: it runs on the real models and on a variant
//! broken for progress, never on the unbounded broken variants of the
//! safety check.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::Instant;

use stateright::Model;

/// What a progress check found.
#[derive(Debug, Clone)]
pub struct Progress {
    /// The configuration's name.
    pub name: String,
    /// The property.
    pub property: &'static str,
    /// Whether the configuration is broken on purpose (a trap expected).
    pub expect_trap: bool,
    /// Reachable states.
    pub states: usize,
    /// Edges between them.
    pub edges: usize,
    /// Reachable states from which the goal is unreachable.
    pub traps: usize,
    /// The shortest path to a trap, its actions one per line.
    pub trap_path: Option<String>,
    /// Seconds taken.
    pub seconds: f64,
}

impl Progress {
    /// Whether the result is the expected one: no trap in a real model, a
    /// trap in a broken one.
    pub fn as_expected(&self) -> bool {
        (self.traps > 0) == self.expect_trap
    }
}

fn fingerprint<T: Hash>(t: &T) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    t.hash(&mut h);
    h.finish()
}

/// What a progress check looks for.
pub struct Target<S> {
    /// The property's name.
    pub property: &'static str,
    /// Whether the model is broken on purpose (a trap expected).
    pub expect_trap: bool,
    /// The goal states.
    pub goal: fn(&S) -> bool,
}

/// A successor: the state it came from, and the number of the state it is,
/// or (if it was not reached before this level) the action, its
/// fingerprint, the state and whether it is a goal.
enum Successor<M: Model> {
    Known(u32, u32),
    New(u32, M::Action, u64, M::State, bool),
}

/// The successors of `part`'s states within the boundary, each numbered by
/// its representative.
fn expand<M>(
    model: &M,
    representative: fn(&M::State) -> M::State,
    goal: fn(&M::State) -> bool,
    index: &HashMap<u64, u32>,
    part: &[(u32, M::State)],
) -> Vec<Successor<M>>
where
    M: Model,
    M::State: Hash,
    M::Action: Clone,
{
    let mut out = Vec::new();
    let mut actions = Vec::new();
    for (i, s) in part {
        actions.clear();
        model.actions(s, &mut actions);
        for a in actions.drain(..) {
            let Some(next) = model.next_state(s, a.clone()) else {
                continue;
            };
            if !model.within_boundary(&next) {
                continue;
            }
            // Numbered by its representative, kept as reached: the path to
            // a trap then reads in one frame (a representative may, e.g.,
            // swap two requests, and the next action would name the
            // swapped ones).
            let fp = fingerprint(&representative(&next));
            out.push(match index.get(&fp) {
                Some(&j) => Successor::Known(*i, j),
                None => {
                    let at_goal = goal(&next);
                    Successor::New(*i, a, fp, next, at_goal)
                }
            });
        }
    }
    out
}

/// Checks `AG EF goal` on `model`'s representatives, expanding each level
/// of the graph on `threads` threads.
///
/// # Errors
///
/// The graph has more than `cap` states.
pub fn check<M>(
    name: String,
    target: Target<M::State>,
    model: &M,
    representative: fn(&M::State) -> M::State,
    cap: usize,
    threads: usize,
) -> Result<Progress, String>
where
    M: Model + Sync,
    M::State: Hash + Clone + Send + Sync,
    M::Action: std::fmt::Debug + Clone + Send,
{
    let start = Instant::now();
    let Target {
        property,
        expect_trap,
        goal,
    } = target;
    let mut index: HashMap<u64, u32> = HashMap::new();
    // Per state: the state it was first reached from, by which action.
    let mut parent: Vec<Option<(u32, M::Action)>> = Vec::new();
    let mut is_goal: Vec<bool> = Vec::new();
    let mut edges: Vec<(u32, u32)> = Vec::new();
    let mut frontier: Vec<(u32, M::State)> = Vec::new();
    for s in model.init_states() {
        let fp = fingerprint(&representative(&s));
        if index.contains_key(&fp) {
            continue;
        }
        let i = parent.len() as u32;
        index.insert(fp, i);
        parent.push(None);
        is_goal.push(goal(&s));
        frontier.push((i, s));
    }
    // Level by level: the successors of a level are computed by `threads`
    // threads (the costly part: the step, the representative, the
    // fingerprint), then numbered in order by this one, so the numbering
    // and the counterexample do not depend on the threads.
    let threads = threads.max(1);
    while !frontier.is_empty() {
        let chunk = frontier.len().div_ceil(threads);
        let known = &index;
        let expanded: Vec<Vec<Successor<M>>> = std::thread::scope(|sc| {
            let handles: Vec<_> = frontier
                .chunks(chunk)
                .map(|part| sc.spawn(move || expand(model, representative, goal, known, part)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a progress thread panicked"))
                .collect()
        });
        let mut next = Vec::new();
        for succ in expanded.into_iter().flatten() {
            let (i, a, fp, state, at_goal) = match succ {
                Successor::Known(i, j) => {
                    if j != i {
                        edges.push((i, j));
                    }
                    continue;
                }
                Successor::New(i, a, fp, state, at_goal) => (i, a, fp, state, at_goal),
            };
            let j = match index.get(&fp) {
                Some(&j) => j,
                None => {
                    if parent.len() >= cap {
                        return Err(format!("{name}: more than {cap} states"));
                    }
                    let j = parent.len() as u32;
                    index.insert(fp, j);
                    parent.push(Some((i, a)));
                    is_goal.push(at_goal);
                    next.push((j, state));
                    j
                }
            };
            if j != i {
                edges.push((i, j));
            }
        }
        frontier = next;
    }
    let n = parent.len();
    // Backwards from the goal states.
    let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
    for &(i, j) in &edges {
        preds[j as usize].push(i);
    }
    let mut can = is_goal.clone();
    let mut stack: Vec<u32> = (0..n as u32).filter(|&i| is_goal[i as usize]).collect();
    while let Some(j) = stack.pop() {
        for &i in &preds[j as usize] {
            if !can[i as usize] {
                can[i as usize] = true;
                stack.push(i);
            }
        }
    }
    let traps = can.iter().filter(|c| !**c).count();
    // States are numbered in BFS order: the first trap is a shallowest one.
    let trap_path = can.iter().position(|c| !*c).map(|t| {
        let mut steps = Vec::new();
        let mut at = t as u32;
        while let Some((p, a)) = &parent[at as usize] {
            steps.push(format!("{a:?}"));
            at = *p;
        }
        steps.reverse();
        steps.join("\n")
    });
    Ok(Progress {
        name,
        property,
        expect_trap,
        states: n,
        edges: edges.len(),
        traps,
        trap_path,
        seconds: start.elapsed().as_secs_f64(),
    })
}
