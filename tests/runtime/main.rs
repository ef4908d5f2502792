//! The embedder's facade (`custodian::Runtime`): a request owns its job,
//! processes, spills and finish; the caller and executor sides are separate
//! capabilities; the completion carries the cleanup detail and each
//! process's verdict.
//!
//! The bodies remove files as root (the request cleanups), so they run in a
//! private mount namespace where every mount is read-only except their
//! scratch directory and the cgroup v2 hierarchy (`sandbox`), checked
//! first by each body.

#[macro_use]
#[path = "../support/skip.rs"]
mod skip;
#[path = "../support/http.rs"]
mod http;
#[path = "../support/sandbox.rs"]
mod sandbox;

mod bodies;
mod ids;
mod root;
mod tracing_events;

/// The body that checks a request's shared loopback, run by a copy of this
/// test binary as the unprivileged `CUSTODIAN_TEST_USER` (whose deletions
/// cannot hurt the machine: no guard needed): such a process cannot make a
/// network namespace outside a user namespace, so the request's is made in
/// a user namespace of its own, which each launch enters first.
#[test]
#[ignore = "needs root and an unprivileged CUSTODIAN_TEST_USER (run by .ci/run)"]
fn a_requests_calls_share_its_loopback_as_an_unprivileged_user() {
    sandbox::run_as_user(
        "bodies::sessions::isolated_calls_of_one_request_share_its_loopback_and_no_other_request_does",
    );
}

/// A request's later launches run in prepared sandboxes and the one left
/// goes with the request, its cleanup clean, as the unprivileged
/// `CUSTODIAN_TEST_USER` (its request namespace is entered through a
/// pre-init, its launches contained by their pid namespaces).
#[test]
#[ignore = "needs root and an unprivileged CUSTODIAN_TEST_USER (run by .ci/run)"]
fn a_requests_prepared_sandbox_goes_with_it_as_an_unprivileged_user() {
    sandbox::run_as_user(
        "bodies::embedding::a_requests_prepared_sandbox_goes_with_it_and_its_cleanup_is_clean",
    );
}

/// Runs every body of `bodies::` in the namespace.
#[test]
fn runtime_bodies_in_a_private_mount_namespace() {
    let keep = custodian::contain::Hierarchy::discover()
        .ok()
        .map(|h| h.mount);
    if let Some(out) =
        sandbox::run_guarded_filter_keeping("bodies::", &std::env::temp_dir(), keep.as_deref())
    {
        if let Some(line) = out.lines().find(|l| l.starts_with("test result")) {
            eprintln!("bodies {line}");
        }
    }
}
