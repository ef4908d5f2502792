//! The one door for a signal to a root's process group, checked against
//! the process machine's decisions.
//!
//! A group signal (`killpg`) names the group by the root's pid, which
//! identifies the group only while the root is unreaped: once it is
//! reaped and the last member gone, the id can be given to an unrelated
//! process, and a `SIGTERM` or `SIGKILL` sent then hits someone else's
//! processes. [`machine::process`](crate::machine::process) never orders a
//! signal after [`Action::Reap`](crate::machine::process::Action::Reap); this
//! module makes sure the driver does not either:
//!
//! - [`sys::signal_group`] takes an [`Order`], and an `Order` is made only
//!   here: by [`GroupSignals::ordered`], for a signal the machine ordered
//!   ([`GroupSignals::license`], called with each `SignalGroup` action) and
//!   not yet sent, or by [`GroupSignals::teardown`], for the `SIGKILL` of a
//!   launch abandoned before it settled; both refuse once the root was
//!   reaped ([`GroupSignals::reaped`]).
//! - A refusal is a bug in the driver: it sends nothing, is counted
//!   ([`refused_group_signals`]) and logged, and in a debug build (every test) it
//!   panics, so that it fails loudly where it is made.
//!
//! Signals that need no group id (the pidfd's `SIGKILL` of an isolated
//! root, `cgroup.kill`) and the `kill(-pgid, 0)` probe (which delivers
//! nothing) are not group signals and do not pass here.
//!
//! [`sys::signal_group`]: super::sys::signal_group

use std::sync::atomic::{AtomicU64, Ordering};

use crate::machine::process::Signal;

/// Refused group signals since the process started.
static VIOLATIONS: AtomicU64 = AtomicU64::new(0);

/// How many group signals the process driver refused since this process
/// started: signals its machine did not order, or ordered after the root
/// was reaped (see `docs/verification.md`, *Effects against decisions*). A
/// correct driver refuses none; a debug build panics at the first. For an
/// embedder's health checks.
pub fn refused_group_signals() -> u64 {
    VIOLATIONS.load(Ordering::Relaxed)
}

/// The right to send one signal to one process group, made only by
/// [`GroupSignals`].
#[derive(Debug)]
pub(crate) struct Order {
    pgid: u32,
    sig: Signal,
}

impl Order {
    /// The group, named by its leader's pid.
    pub(crate) fn pgid(&self) -> u32 {
        self.pgid
    }

    /// The signal.
    pub(crate) fn signal(&self) -> Signal {
        self.sig
    }
}

/// The group signals of one root: the ones its machine ordered and not yet
/// sent, and whether the root was reaped.
#[derive(Debug)]
pub(crate) struct GroupSignals {
    pgid: u32,
    /// Ordered and not yet sent, by signal: `[TERM, KILL]`.
    licensed: [u8; 2],
    reaped: bool,
}

impl GroupSignals {
    /// The group led by the (unreaped) root `pgid`.
    pub(crate) fn new(pgid: u32) -> Self {
        GroupSignals {
            pgid,
            licensed: [0; 2],
            reaped: false,
        }
    }

    /// The machine ordered `sig` (`Action::SignalGroup`).
    pub(crate) fn license(&mut self, sig: Signal) {
        let n = &mut self.licensed[slot(sig)];
        *n = n.saturating_add(1);
    }

    /// The order to send `sig`, which the machine ordered and which was not
    /// sent yet, while the root is unreaped; `None` (a violation: see the
    /// [module docs](self)) otherwise. Sending nothing for an ordered
    /// signal consumes its order as well.
    pub(crate) fn ordered(&mut self, sig: Signal) -> Option<Order> {
        let n = &mut self.licensed[slot(sig)];
        if *n == 0 {
            violation(self.pgid, sig, "not ordered by the machine");
            return None;
        }
        *n -= 1;
        if self.reaped {
            violation(self.pgid, sig, "after the root was reaped");
            return None;
        }
        Some(Order {
            pgid: self.pgid,
            sig,
        })
    }

    /// The order to `SIGKILL` the group of a launch that is torn down before
    /// it settled (its driver dropped or failed), while the root is
    /// unreaped; `None` (a violation) once it was reaped.
    pub(crate) fn teardown(&mut self) -> Option<Order> {
        if self.reaped {
            violation(self.pgid, Signal::Kill, "after the root was reaped");
            return None;
        }
        Some(Order {
            pgid: self.pgid,
            sig: Signal::Kill,
        })
    }

    /// The root was reaped (or handed to a reaper): no group signal may
    /// follow.
    pub(crate) fn reaped(&mut self) {
        self.reaped = true;
    }
}

fn slot(sig: Signal) -> usize {
    match sig {
        Signal::Term => 0,
        Signal::Kill => 1,
    }
}

fn violation(pgid: u32, sig: Signal, why: &'static str) {
    VIOLATIONS.fetch_add(1, Ordering::Relaxed);
    tracing::error!(pgid, ?sig, why, "group signal refused");
    debug_assert!(false, "group signal {sig:?} to {pgid} refused: {why}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every refusal below panics in a debug build; count them instead.
    fn refused(f: impl FnOnce() -> Option<Order> + std::panic::UnwindSafe) -> bool {
        match std::panic::catch_unwind(f) {
            Ok(order) => order.is_none(),
            Err(_) => true,
        }
    }

    #[test]
    fn only_an_ordered_signal_of_an_unreaped_root_is_sent_and_only_once() {
        let before = refused_group_signals();
        let mut g = GroupSignals::new(4242);
        g.license(Signal::Term);
        let order = g.ordered(Signal::Term).expect("ordered");
        assert_eq!((order.pgid(), order.signal()), (4242, Signal::Term));
        // Sent once; a second TERM, or a KILL, was never ordered.
        assert!(refused(move || g.ordered(Signal::Term)));
        let mut kill = GroupSignals::new(4242);
        assert!(refused(move || kill.ordered(Signal::Kill)));
        // Ordered, but the root was reaped first.
        let mut late = GroupSignals::new(4242);
        late.license(Signal::Kill);
        late.reaped();
        assert!(refused(move || late.ordered(Signal::Kill)));
        let mut torn = GroupSignals::new(4242);
        assert!(torn.teardown().is_some());
        torn.reaped();
        assert!(refused(move || torn.teardown()));
        assert!(
            refused_group_signals() >= before + 4,
            "each refusal is counted"
        );
    }
}
