//! custodian's log, as a test reads it: a capture of this thread's
//! `tracing` output, and what the process driver's debug lines say.
//!
//! Included (with `#[path]`) by the test binaries and the library's own
//! tests that read a log; each uses a part of it.

#![allow(dead_code)]

use std::cell::RefCell;
use std::sync::{Arc, Mutex, Once};

/// Every line this thread logs while a [`Captured::install`] guard lives,
/// kept in memory.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

thread_local! {
    /// This thread's capture and the least severe level it keeps.
    static HERE: RefCell<Option<(Captured, tracing::Level)>> = const { RefCell::new(None) };
}

/// Ends a capture (restores the one it replaced, if any) when dropped.
pub struct Guard {
    previous: Option<(Captured, tracing::Level)>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        HERE.with(|h| *h.borrow_mut() = previous);
    }
}

impl Captured {
    /// Captures this thread's log from `level` up until the guard is
    /// dropped. A test runtime that is single-threaded runs its tasks on
    /// this thread, so they log here.
    ///
    /// One subscriber serves the whole test binary: the global default,
    /// set on the first call, whose filter asks on every event whether the
    /// thread that logs it captures (a dynamic filter: tracing keeps no
    /// answer per callsite). A subscriber per thread (`set_default`) lost
    /// events in CI: tracing's callsite cache is global, and a callsite
    /// that another thread registered while this thread's subscriber was
    /// being installed could stay cached as of interest to none.
    pub fn install(&self, level: tracing::Level) -> Guard {
        static GLOBAL: Once = Once::new();
        GLOBAL.call_once(|| {
            use tracing_subscriber::Layer as _;
            use tracing_subscriber::layer::SubscriberExt as _;
            let capturing = tracing_subscriber::filter::filter_fn(|meta| {
                HERE.with(|h| {
                    h.borrow()
                        .as_ref()
                        .is_some_and(|(_, level)| meta.level() <= level)
                })
            });
            let layer = tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(|| ThisThread)
                .with_filter(capturing);
            tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
                .expect("no other global subscriber in a test binary");
        });
        let previous = HERE.with(|h| h.borrow_mut().replace((self.clone(), level)));
        Guard { previous }
    }

    /// What was written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// How many times `needle` was written.
    pub fn count(&self, needle: &str) -> usize {
        self.text().matches(needle).count()
    }
}

/// Writes to the capture of the thread that logs (nothing without one).
struct ThisThread;

impl std::io::Write for ThisThread {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        HERE.with(|h| {
            if let Some((captured, _)) = &*h.borrow() {
                captured.0.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The rescans of every probe that answered, in order: the `rescans=N` of
/// each `group probed` line of the process driver's debug log.
pub fn rescans(log: &str) -> Vec<u32> {
    log.lines()
        .filter(|l| l.contains("group probed"))
        .filter_map(|l| {
            let at = l.find("rescans=")? + "rescans=".len();
            l[at..]
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}
