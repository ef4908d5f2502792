//! The coordinator: racing terminal candidates, cancel, disconnect and
//! terminal-write failure against counting fakes and a real node handler,
//! plus a seeded stress run. Every test checks the request's event log
//! against the pure step function (see `support::check_log`).

#[macro_use]
#[path = "../support/skip.rs"]
mod skip;
#[path = "../support/fake_node.rs"]
mod fake_node;

mod forced_orders;
#[path = "../support/logs.rs"]
mod logs;
mod outcomes;
mod pinned;
#[path = "../support/sandbox.rs"]
mod sandbox;
mod scenarios;
mod stress;
mod support;
mod through_wire;
mod with_workspace;

/// Runs every body of `with_workspace::` (they delete as root) in a private
/// mount namespace where only their scratch directory is writable.
#[test]
fn with_workspace_in_a_private_mount_namespace() {
    if let Some(out) = sandbox::run_guarded_filter("with_workspace::", &std::env::temp_dir()) {
        if let Some(line) = out.lines().find(|l| l.starts_with("test result")) {
            eprintln!("with_workspace {line}");
        }
    }
}
