//! The older deleting tests (`basics`, `attacks`, `races`, `mounts`) remove files as
//! root: each module runs as a whole inside a private mount namespace where
//! only its scratch directory is writable (`sandbox`), checked first.

use crate::sandbox;

fn run(module: &str) {
    // Checked once per module here, before any of its tests deletes.
    if let Some(out) = sandbox::run_guarded_filter(module, &std::env::temp_dir()) {
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
fn journal_in_a_private_mount_namespace() {
    run("journal::");
}
