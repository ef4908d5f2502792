//! `custodian mcp` driven over its stdio by raw JSON-RPC, the way clients
//! really behave: probes before `initialize`, malformed and duplicate
//! requests, and a client that closes, dies or signals the server mid-call.
//!
//! The server's cleanup deletes inside its workspace, so every body runs (as
//! root) in a private mount namespace where only its scratch directory and
//! the cgroup v2 hierarchy are writable, checked first. The end-to-end suites
//! with the official SDKs as clients are `e2e.py` (Python) and `e2e.mjs`
//! (TypeScript), run by `.ci/run`. `observed.rs` serves in this process
//! and watches each call's request in the request machine.

#[macro_use]
#[path = "../support/skip.rs"]
mod skip;
mod client;
mod early;
#[path = "../support/http.rs"]
mod http;
#[path = "../support/marker.rs"]
mod marker;
mod observed;
#[path = "../support/sandbox.rs"]
mod sandbox;
mod session;
mod sessions;
mod stops;

fn run_keeping_cgroups(module: &str) {
    let keep = custodian::contain::Hierarchy::discover()
        .ok()
        .map(|h| h.mount);
    if let Some(out) =
        sandbox::run_guarded_filter_keeping(module, &std::env::temp_dir(), keep.as_deref())
    {
        // The figures the bodies measured, then their summary.
        for line in out.lines().filter(|l| l.contains("stopped in")) {
            eprintln!("{line}");
        }
        if let Some(line) = out.lines().find(|l| l.starts_with("test result")) {
            eprintln!("{module} {line}");
        }
    }
}

/// The body that checks an MCP session's shared loopback, run by a copy of
/// this test binary as the unprivileged `CUSTODIAN_TEST_USER`: the server
/// (`custodian mcp`, as that user) makes the session's network namespace in
/// a user namespace of its own, which each call's launch enters first.
#[test]
#[ignore = "needs root and an unprivileged CUSTODIAN_TEST_USER (run by .ci/run)"]
fn an_mcp_sessions_calls_share_its_loopback_as_an_unprivileged_user() {
    sandbox::run_as_user(
        "sessions::confined_calls_of_one_mcp_session_share_its_loopback_and_no_other_does",
    );
}

#[test]
fn session_in_a_private_mount_namespace() {
    run_keeping_cgroups("session::");
}

#[test]
fn sessions_in_a_private_mount_namespace() {
    run_keeping_cgroups("sessions::");
}

#[test]
fn early_returns_in_a_private_mount_namespace() {
    run_keeping_cgroups("early::");
}

#[test]
fn stops_in_a_private_mount_namespace() {
    run_keeping_cgroups("stops::");
}

#[test]
fn observed_in_a_private_mount_namespace() {
    run_keeping_cgroups("observed::");
}
