//! A hidden seam for the panic-safety tests: an invocation can carry a
//! point at which the launcher panics on purpose
//! ([`crate::process::Invocation::with_fault`]), or, at
//! [`FaultPoint::RegisterPidfd`], a step that fails as the kernel could
//! make it fail where no host here does. It exists in release builds too,
//! so the tests exercise the very code that ships; nothing sets it but
//! those tests.

/// Where an injected fault fires: a panic, but for
/// [`FaultPoint::RegisterPidfd`], an error.
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
    /// No panic: the reactor refuses the cgroup tier's (or the pid
    /// namespace tier's) root pidfd, as it can for want of memory or of
    /// epoll watches (`ENOMEM`), after the root started.
    RegisterPidfd,
}

/// Whether `plan` makes the step at `at` fail (a fault that is an error,
/// not a panic).
pub(crate) fn refuses(plan: Option<FaultPoint>, at: FaultPoint) -> bool {
    plan == Some(at)
}

/// Panics if `plan` is `at`.
pub(crate) fn hit(plan: Option<FaultPoint>, at: FaultPoint) {
    if plan == Some(at) {
        panic!("custodian: injected fault at {at:?}");
    }
}
