//! The deleting spill tests run as a whole, module by module, inside a
//! private mount namespace where only their scratch directory is writable
//! (as root; `sandbox`), which each fixture checks before it is made. The
//! scratch is also their `TMPDIR`.

use crate::sandbox;

fn run(module: &str) {
    if let Some(out) = sandbox::run_guarded_filter(module, &std::env::temp_dir()) {
        if let Some(line) = out.lines().find(|l| l.starts_with("test result")) {
            eprintln!("{module} {line}");
        }
    }
}

#[test]
fn attacks_in_a_private_mount_namespace() {
    run("attacks::");
}

#[test]
fn cli_in_a_private_mount_namespace() {
    run("cli::");
}

#[test]
fn rules_in_a_private_mount_namespace() {
    run("rules::");
}

#[test]
fn service_in_a_private_mount_namespace() {
    run("service::");
}

#[test]
fn signals_in_a_private_mount_namespace() {
    run("signals::");
}

#[test]
fn store_in_a_private_mount_namespace() {
    run("store::");
}
