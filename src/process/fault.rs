//! A hidden seam for the panic-safety tests: an invocation can carry a
//! point at which the launcher panics on purpose
//! ([`crate::process::Invocation::with_fault`]). It exists in release builds
//! too, so the tests exercise the very code that ships; nothing sets it but
//! those tests.

/// Where an injected panic fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultPoint {
    /// Right after the child was spawned, before its driver exists.
    AfterSpawn,
    /// In the driver, before the machine is stepped with an event.
    Step,
    /// In the driver, while captured output is stored.
    Capture,
    /// At settlement, once the machine has settled and before the evidence
    /// is published: where the cgroup's check and removal and the effects'
    /// end run.
    Settle,
    /// While the evidence is built at settlement.
    Evidence,
}

/// Panics if `plan` is `at`.
pub(crate) fn hit(plan: Option<FaultPoint>, at: FaultPoint) {
    if plan == Some(at) {
        panic!("custodian: injected fault at {at:?}");
    }
}
