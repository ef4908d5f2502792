//! The older deleting tests (`basics`, `attacks`, `races`, `mounts`,
//! `journal`, `procs`, `full_disk`, `barriers`) remove files as root: each module runs as a whole
//! inside a private mount namespace where only its scratch directory is
//! writable (`procs`: and the cgroup v2 hierarchy), checked first.

use crate::sandbox;

fn run(module: &str) {
    run_keeping(module, None);
}

fn run_keeping(module: &str, keep: Option<&std::path::Path>) {
    // Checked by each fixture, before any of its tests deletes.
    if let Some(out) = sandbox::run_guarded_filter_keeping(module, &std::env::temp_dir(), keep) {
        if let Some(line) = out.lines().find(|l| l.starts_with("test result")) {
            eprintln!("{module} {line}");
        }
    }
}

#[test]
fn basics_in_a_private_mount_namespace() {
    run("basics::");
}

#[test]
fn attacks_in_a_private_mount_namespace() {
    run("attacks::");
}

#[test]
fn races_in_a_private_mount_namespace() {
    run("races::");
}

#[test]
fn mounts_in_a_private_mount_namespace() {
    run("mounts::");
}

#[test]
fn full_disk_in_a_private_mount_namespace() {
    run("full_disk::");
}

#[test]
fn barriers_in_a_private_mount_namespace() {
    run("barriers::");
}

#[test]
fn journal_in_a_private_mount_namespace() {
    run("journal::");
}

#[test]
fn procs_in_a_private_mount_namespace() {
    let keep = custodian::contain::Hierarchy::discover()
        .ok()
        .map(|h| h.mount);
    run_keeping("procs::", keep.as_deref());
}
