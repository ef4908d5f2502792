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
