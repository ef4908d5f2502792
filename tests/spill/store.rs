//! The store: layout, permissions, exclusive no-follow writes, strict reads.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};

use custodian::spill::{Locator, SpillStore, StoreError};

use crate::*;

#[test]
#[ignore = "deletes: run by guarded::store_in_a_private_mount_namespace"]
fn layout_and_modes() {
    let fx = Fx::new();
    let store = SpillStore::create_default(fx.path(), "custodian-spill-").unwrap();
    let loc = store.write("sess", b"payload").unwrap();
    let root = store.root();
    assert_eq!(
        fs::metadata(root).unwrap().permissions().mode() & 0o7777,
        0o700
    );
    let s = root.join("sess");
    assert_eq!(
        fs::metadata(&s).unwrap().permissions().mode() & 0o7777,
        0o1700
    );
    let files: Vec<_> = fs::read_dir(&s).unwrap().flatten().collect();
    assert_eq!(files.len(), 1);
    assert_eq!(
        files[0].metadata().unwrap().permissions().mode() & 0o7777,
        0o1600
    );
    assert_eq!(store.read(&loc).unwrap(), b"payload");
    let parsed: Locator = loc.to_string().parse().unwrap();
    assert_eq!(parsed, loc);
}

/// A result created empty and written as it arrives (a session's record):
/// made like a written one (mode, exclusive), readable at any time with
/// what was written so far, and never through a symlinked session.
#[test]
#[ignore = "deletes: run by guarded::store_in_a_private_mount_namespace"]
fn a_created_result_is_read_with_what_was_written_so_far() {
    use std::io::Write;
    let fx = Fx::new();
    let store = SpillStore::open(&fx.path().join("root")).unwrap();
    let (loc, mut file) = store.create("rec").unwrap();
    assert_eq!(store.read(&loc).unwrap(), b"");
    let mode = fs::metadata(store.root().join("rec"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o1700);
    file.write_all(b"first ").unwrap();
    assert_eq!(store.read(&loc).unwrap(), b"first ");
    file.write_all(b"second").unwrap();
    drop(file);
    assert_eq!(store.read(&loc).unwrap(), b"first second");
    let (other, _) = store.create("rec").unwrap();
    assert_ne!(other, loc, "each creation is a new result");
    let files: Vec<_> = fs::read_dir(store.root().join("rec"))
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().permissions().mode() & 0o7777)
        .collect();
    assert_eq!(files, [0o1600, 0o1600]);
    let victim = fx.mkdir("victim");
    symlink(&victim, store.root().join("s")).unwrap();
    let err = store.create("s").unwrap_err();
    assert!(matches!(err, StoreError::Refused { .. }), "{err}");
    assert_eq!(fs::read_dir(&victim).unwrap().count(), 0);
}

#[test]
#[ignore = "deletes: run by guarded::store_in_a_private_mount_namespace"]
fn write_never_goes_through_a_symlinked_session() {
    let fx = Fx::new();
    let store = SpillStore::open(&fx.path().join("root")).unwrap();
    let victim = fx.mkdir("victim");
    symlink(&victim, store.root().join("s")).unwrap();
    let err = store.write("s", b"x").unwrap_err();
    assert!(matches!(err, StoreError::Refused { .. }), "{err}");
    assert_eq!(fs::read_dir(&victim).unwrap().count(), 0);
    assert!(matches!(
        store.write("../x", b"x"),
        Err(StoreError::Locator(_))
    ));
    assert!(matches!(store.write("", b"x"), Err(StoreError::Locator(_))));
}

#[test]
#[ignore = "deletes: run by guarded::store_in_a_private_mount_namespace"]
fn read_refuses_symlinks_special_files_and_foreign_roots() {
    let fx = Fx::new();
    let store = SpillStore::open(&fx.path().join("root")).unwrap();
    let other = SpillStore::open(&fx.path().join("other")).unwrap();
    let loc = store.write("s", b"mine").unwrap();
    assert!(matches!(
        other.read(&loc),
        Err(StoreError::ForeignRoot { .. })
    ));

    // Replace the file with a symlink to a secret.
    let secret = fx.path().join("secret");
    fs::write(&secret, "secret").unwrap();
    let file = store.root().join("s").join(format!(
        "{}.spill",
        loc.to_string().rsplit(':').next().unwrap()
    ));
    fs::remove_file(&file).unwrap();
    symlink(&secret, &file).unwrap();
    assert!(matches!(store.read(&loc), Err(StoreError::Refused { .. })));
    // A FIFO there must be refused without blocking.
    fs::remove_file(&file).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &file,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    assert!(matches!(store.read(&loc), Err(StoreError::Refused { .. })));
    fs::remove_file(&file).unwrap();
    assert!(matches!(store.read(&loc), Err(StoreError::NotFound { .. })));
    // The session dir as a symlink.
    let s2 = store.write("t", b"t").unwrap();
    fs::rename(store.root().join("t"), fx.path().join("t-moved")).unwrap();
    symlink(fx.path().join("t-moved"), store.root().join("t")).unwrap();
    assert!(matches!(store.read(&s2), Err(StoreError::Refused { .. })));
}

#[test]
#[ignore = "deletes: run by guarded::store_in_a_private_mount_namespace"]
fn configured_root_must_be_trusted() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    fs::set_permissions(&root, fs::Permissions::from_mode(0o777)).unwrap();
    assert!(matches!(
        SpillStore::open(&root),
        Err(StoreError::Refused { .. })
    ));
    fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).unwrap();
    let store = SpillStore::open(&root).unwrap();
    assert_eq!(
        fs::metadata(store.root()).unwrap().ino(),
        fs::metadata(&root).unwrap().ino()
    );
}

#[test]
#[ignore = "deletes: run by guarded::store_in_a_private_mount_namespace"]
fn a_live_default_root_is_not_removed_by_another_sweep() {
    let fx = Fx::new();
    let store = SpillStore::create_default(fx.path(), "custodian-spill-").unwrap();
    let mut plan = custodian::spill::SweepPlan::new(cutoff());
    plan.discovery = Some(fx.discovery());
    let r = custodian::spill::sweep_spill_roots(&plan, &custodian::spill::TracingSink);
    assert_eq!(r.roots_scanned, 1);
    assert!(store.root().exists(), "its shared lock protects it");
    drop(store);
    let r = custodian::spill::sweep_spill_roots(&plan, &custodian::spill::TracingSink);
    assert_eq!(r.roots_removed, 1);
}
