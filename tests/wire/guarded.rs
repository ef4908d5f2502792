//! The tests that run a real node (`custodian node`, or the workspace node
//! in process) remove job directories as root when their requests are
//! cleaned up: each of those modules runs as a whole inside a private mount
//! namespace where only its scratch directory and the cgroup v2 hierarchy
//! (the node's request cgroups) are writable (`sandbox`), which each
//! body's temp dir checks before it is made.

use crate::sandbox;

fn run(module: &str) {
    let keep = custodian::contain::Hierarchy::discover()
        .ok()
        .map(|h| h.mount);
    if let Some(out) =
        sandbox::run_guarded_filter_keeping(module, &std::env::temp_dir(), keep.as_deref())
    {
        if let Some(line) = out.lines().find(|l| l.starts_with("test result")) {
            eprintln!("{module} {line}");
        }
    }
}

#[test]
fn cli_in_a_private_mount_namespace() {
    run("cli::");
}

#[test]
fn e2e_in_a_private_mount_namespace() {
    run("e2e::");
}

#[test]
fn exhaustion_in_a_private_mount_namespace() {
    run("exhaustion::");
}

#[test]
fn policy_in_a_private_mount_namespace() {
    run("policy::");
}

#[test]
fn race_in_a_private_mount_namespace() {
    run("race::");
}

#[test]
fn sessions_in_a_private_mount_namespace() {
    run("sessions::");
}

#[test]
fn signals_in_a_private_mount_namespace() {
    run("signals::");
}
