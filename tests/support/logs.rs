//! custodian's log, as a test reads it: a capture of this thread's
//! `tracing` output, and what the process driver's debug lines say.
//!
//! Included (with `#[path]`) by the test binaries and the library's own
//! tests that read a log; each uses a part of it.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

/// Every line a `fmt` subscriber of this thread writes, kept in memory.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Makes a subscriber that writes here, from `level` up, this thread's
    /// default until the guard is dropped. A test runtime that is
    /// single-threaded runs its tasks on this thread, so they log here.
    pub fn install(&self, level: tracing::Level) -> tracing::subscriber::DefaultGuard {
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        // A callsite first reached by another test's thread while this
        // subscriber was being registered can keep an interest cached
        // without it (tracing's callsite cache is global): ask every
        // callsite again.
        tracing::callsite::rebuild_interest_cache();
        guard
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

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
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
