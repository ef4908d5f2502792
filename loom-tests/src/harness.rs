//! The exploration harness shared by the loom test files.

use std::sync::Arc as StdArc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

/// Records facts about executions outside loom's control.
///
/// Its counters are `std` atomics in a `std::sync::Arc`, which loom neither
/// schedules nor resets, so they accumulate across every execution loom
/// replays.
#[derive(Debug)]
pub struct Recorder {
    executions: AtomicUsize,
    wins: Vec<AtomicUsize>,
    tags: Vec<AtomicUsize>,
}

impl Recorder {
    /// Notes that racer `racer` won this execution.
    ///
    /// # Panics
    ///
    /// If `racer` is not below the number of racers given to [`explore`].
    pub fn won(&self, racer: usize) {
        self.wins[racer].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one occurrence of outcome `tag` (e.g. "the key was re-elected
    /// after eviction"), so a test can show that an outcome was reached.
    ///
    /// # Panics
    ///
    /// If `tag` is not below the number of tags given to [`explore`].
    pub fn tag(&self, tag: usize) {
        self.tags[tag].fetch_add(1, Ordering::Relaxed);
    }
}

/// What one [`explore`] run observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exploration {
    /// Executions loom ran (each a distinct interleaving).
    pub executions: usize,
    /// Per racer, in how many executions it won.
    pub wins: Vec<usize>,
    /// Per tag, in how many executions it was recorded.
    pub tags: Vec<usize>,
    /// Wall-clock time of the whole exploration.
    pub elapsed: Duration,
}

/// Runs `model` under every interleaving loom explores with the given
/// preemption bound, then prints and checks what was explored.
///
/// # Panics
///
/// If loom finds a failing interleaving (a panic in `model`, a deadlock or
/// a leak), if it explored zero executions, or if some racer never won.
pub fn explore<F>(
    name: &str,
    preemption_bound: usize,
    racers: usize,
    tags: usize,
    model: F,
) -> Exploration
where
    F: Fn(&Recorder) + Send + Sync + 'static,
{
    let recorder = StdArc::new(Recorder {
        executions: AtomicUsize::new(0),
        wins: (0..racers).map(|_| AtomicUsize::new(0)).collect(),
        tags: (0..tags).map(|_| AtomicUsize::new(0)).collect(),
    });
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(preemption_bound);
    let started = Instant::now();
    {
        let counted = StdArc::clone(&recorder);
        let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            builder.check(move || {
                counted.executions.fetch_add(1, Ordering::Relaxed);
                model(&counted);
            });
        }));
        if let Err(failure) = checked {
            // A caught bug says how far loom went to find it.
            println!(
                "loom {name}: preemption bound {preemption_bound}, failed in execution {}, {:.2}s",
                recorder.executions.load(Ordering::Relaxed),
                started.elapsed().as_secs_f64(),
            );
            std::panic::resume_unwind(failure);
        }
    }
    let exploration = Exploration {
        executions: recorder.executions.load(Ordering::Relaxed),
        wins: recorder
            .wins
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .collect(),
        tags: recorder
            .tags
            .iter()
            .map(|t| t.load(Ordering::Relaxed))
            .collect(),
        elapsed: started.elapsed(),
    };
    println!(
        "loom {name}: preemption bound {preemption_bound}, {} executions, wins per racer {:?}, tags {:?}, {:.2}s",
        exploration.executions,
        exploration.wins,
        exploration.tags,
        exploration.elapsed.as_secs_f64(),
    );
    assert!(
        exploration.executions > 0,
        "{name}: loom explored no execution"
    );
    for (racer, wins) in exploration.wins.iter().enumerate() {
        assert!(
            *wins > 0,
            "{name}: racer {racer} never won in {} executions",
            exploration.executions
        );
    }
    exploration
}

struct Noop;

impl Wake for Noop {
    fn wake(self: StdArc<Self>) {}
}

/// A waker that does nothing, for polling a future once and dropping it.
pub fn noop_waker() -> Waker {
    Waker::from(StdArc::new(Noop))
}
