//! [`RootRegistry`]: the roots this process launched, kept so that a scan of
//! its children never takes a fresh root for an adopted descendant, without
//! one launch holding up every other.
//!
//! # Theory of operation
//!
//! In the subreaper tier every child of this process that is not a
//! registered root is an adopted descendant, and a scan of the children
//! may signal it or reap it. A root exists from its `clone3` on, but its pid
//! is known (and can be registered) only after, so a scan that ran between
//! the two would take it for an adopted one. Holding the registry's lock
//! across every clone closes that window, but serialises every launch of the
//! process behind the one in flight (a clone with `CLONE_VFORK` lasts until
//! the child's `execve`), and with two launching threads halved their
//! throughput.
//!
//! So launches clone without the lock while no scan has ever run, counting
//! themselves in flight; a scan first marks scans as on (from then on every
//! launch holds the lock across its clone, as before), then waits until no
//! unlocked launch is in flight, and runs under the lock. The flag, the count
//! and the list share one mutex, so there is no ordering argument to make
//! beyond the lock's. Processes that never scan (no subreaper tier) never
//! serialise their launches.

use super::shim::{Mutex, lock, thread};

#[derive(Debug, Default)]
struct State {
    roots: Vec<u32>,
    /// Launches cloning without the lock, not registered yet.
    unlocked: usize,
    /// A scan has run: every launch now holds the lock across its clone.
    scans: bool,
}

/// The roots launched here and not yet reaped; see the module docs.
#[derive(Debug, Default)]
pub struct RootRegistry {
    state: Mutex<State>,
}

impl RootRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        RootRegistry::default()
    }

    /// Runs `spawn` and registers the pid `pid_of` reads from its result, so
    /// that no [`scan`](Self::scan) ever sees the child unregistered. Runs
    /// without the lock while no scan has run.
    ///
    /// # Errors
    ///
    /// Whatever `spawn` returns; nothing is registered then.
    pub fn spawn<T, E>(
        &self,
        spawn: impl FnOnce() -> Result<T, E>,
        pid_of: impl FnOnce(&T) -> u32,
    ) -> Result<T, E> {
        let mut state = lock(&self.state);
        if state.scans {
            let spawned = spawn()?;
            state.roots.push(pid_of(&spawned));
            return Ok(spawned);
        }
        state.unlocked += 1;
        drop(state);
        // Counted out even if `spawn` unwinds, so that no scan waits for
        // ever.
        let in_flight = InFlight(self);
        let spawned = spawn();
        std::mem::forget(in_flight);
        let mut state = lock(&self.state);
        state.unlocked -= 1;
        let spawned = spawned?;
        state.roots.push(pid_of(&spawned));
        Ok(spawned)
    }

    /// Runs `f` on the registered roots once no launch is between its clone
    /// and its registration; from the first scan on, every launch holds the
    /// lock across its clone.
    pub fn scan<R>(&self, f: impl FnOnce(&[u32]) -> R) -> R {
        let mut state = lock(&self.state);
        state.scans = true;
        while state.unlocked > 0 {
            drop(state);
            thread::yield_now();
            state = lock(&self.state);
        }
        f(&state.roots)
    }

    /// Runs `f` on the registered roots under the lock (to reap and
    /// unregister a root at once).
    pub fn with<R>(&self, f: impl FnOnce(&mut Vec<u32>) -> R) -> R {
        f(&mut lock(&self.state).roots)
    }
}

/// Counts an unlocked launch out when its spawn unwinds.
struct InFlight<'a>(&'a RootRegistry);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        lock(&self.0.state).unlocked -= 1;
    }
}

#[cfg(all(test, not(custodian_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_spawn_that_panics_does_not_hold_up_scans() {
        let registry = std::sync::Arc::new(RootRegistry::new());
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = registry.spawn(|| -> Result<u32, ()> { panic!("spawn failed") }, |&p| p);
        }));
        assert!(unwound.is_err());
        // A scan would spin for ever if the launch were still counted in
        // flight.
        let (tx, rx) = std::sync::mpsc::channel();
        let scanner = registry.clone();
        std::thread::spawn(move || tx.send(scanner.scan(|roots| roots.len())));
        let scanned = rx.recv_timeout(std::time::Duration::from_secs(5));
        assert_eq!(scanned, Ok(0), "the scan waits for a launch that unwound");
        assert_eq!(registry.spawn(|| Ok::<u32, ()>(7), |&p| p), Ok(7));
        assert_eq!(registry.scan(<[u32]>::to_vec), vec![7]);
    }
}
