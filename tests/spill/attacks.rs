//! Attacks on the sweep: racing symlink swaps, mounts inside a root,
//! special files, hard links, hostile names, and a writer racing a prune.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use custodian::spill::{SkipReason, SpillStore, SweepPlan, TracingSink, sweep_spill_roots};

use crate::*;

#[test]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
fn racer_swapping_a_session_for_a_symlink_changes_nothing_outside_the_root() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    let victim = fx.mkdir("victim");
    for i in 0..20 {
        file_at(&victim.join(spill_name(i)), "victim data", old());
    }
    let before = snapshot(&victim);
    let s = root.join("s");
    let aside = root.join("aside");
    mkdir(&s);
    // Filler sessions widen the window between listing `s` and opening it.
    for f in 0..40 {
        let d = root.join(format!("filler{f}"));
        mkdir(&d);
        for i in 0..5 {
            file_at(&d.join(spill_name(i)), "kept", fresh());
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let racer = {
        let (s, aside, victim, stop) = (s.clone(), aside.clone(), victim.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Swap the real session dir for a symlink to the victim...
                if fs::rename(&s, &aside).is_ok() {
                    let _ = symlink(&victim, &s);
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    let _ = fs::remove_file(&s);
                    let _ = fs::rename(&aside, &s);
                    swaps += 1;
                }
                // ...and keep an expired spill in it so it is worth sweeping.
                let _ = fs::create_dir(&s);
                let f = s.join(spill_name(99));
                if fs::write(&f, "bait").is_ok() {
                    // As the store writes it: with the store's mark.
                    let _ = fs::set_permissions(&f, fs::Permissions::from_mode(0o1600));
                    let _ =
                        filetime::set_file_mtime(&f, filetime::FileTime::from_system_time(old()));
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            swaps
        })
    };
    let mut deleted = 0;
    for _ in 0..200 {
        deleted += sweep_spill_roots(&plan_for(&[&root]), &TracingSink).files_deleted;
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = racer.join().unwrap();
    assert!(swaps > 0, "the racer never swapped");
    assert!(deleted > 0, "the sweep never ran against the bait");
    assert_eq!(
        snapshot(&victim),
        before,
        "nothing outside the root may change"
    );
}

#[test]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
fn bind_mount_inside_a_root_is_fenced() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    let victim = fx.mkdir("victim");
    file_at(&victim.join(spill_name(1)), "victim", old());
    // Same filesystem: device numbers cannot reveal this mount.
    let target = root.join("s");
    mkdir(&target);
    // A bind-mounted *file* named like a spill inside a real session.
    let real = root.join("real");
    mkdir(&real);
    file_at(&real.join(spill_name(2)), "placeholder", old());
    let victim_file = victim.join(spill_name(3));
    file_at(&victim_file, "victim file", old());
    let Some(_g1) = bind_mount(&victim, &target) else {
        return;
    };
    let Some(_g2) = bind_mount(&victim_file, &real.join(spill_name(2))) else {
        return;
    };
    assert_eq!(
        fs::metadata(&target).unwrap().dev(),
        fs::metadata(&root).unwrap().dev(),
        "the bind mount is on the same device"
    );
    let before = snapshot(&victim);
    let r = sweep_spill_roots(&plan_for(&[&root]), &TracingSink);
    assert_eq!(snapshot(&victim), before);
    assert_eq!(fs::read_to_string(&victim_file).unwrap(), "victim file");
    assert_eq!(r.skipped_for(SkipReason::MountPoint), 2, "{:?}", r.skipped);
    assert_eq!(r.files_deleted, 0);
}

#[test]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
fn tmpfs_mount_inside_a_root_is_fenced() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    let target = root.join("s");
    mkdir(&target);
    let Some(_g) = tmpfs_mount(&target) else {
        return;
    };
    file_at(&target.join(spill_name(1)), "on tmpfs", old());
    let r = sweep_spill_roots(&plan_for(&[&root]), &TracingSink);
    assert!(target.join(spill_name(1)).exists());
    assert_eq!(r.skipped_for(SkipReason::MountPoint), 1);
    // Never deleted from, and never removed either.
    assert!(target.exists());
}

#[test]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
fn fifo_socket_and_device_nodes_are_never_opened_or_deleted() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    let s = root.join("s");
    mkdir(&s);
    use rustix::fs::{CWD, FileType, Mode, makedev, mknodat};
    mknodat(
        CWD,
        s.join(spill_name(1)),
        FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let _l = std::os::unix::net::UnixListener::bind(s.join(spill_name(2))).unwrap();
    let mut nodes = 2;
    if is_root() {
        mknodat(
            CWD,
            s.join(spill_name(3)),
            FileType::CharacterDevice,
            Mode::from_raw_mode(0o600),
            makedev(1, 3),
        )
        .unwrap();
        mknodat(
            CWD,
            s.join(spill_name(4)),
            FileType::BlockDevice,
            Mode::from_raw_mode(0o600),
            makedev(7, 200),
        )
        .unwrap();
        nodes = 4;
    } else {
        eprintln!("SKIP (partly): device nodes need root");
    }
    for i in 1..=nodes {
        filetime::set_symlink_file_times(
            s.join(spill_name(i)),
            filetime::FileTime::from_system_time(old()),
            filetime::FileTime::from_system_time(old()),
        )
        .unwrap();
    }
    // A FIFO opened for reading would block this call forever.
    let r = sweep_spill_roots(&plan_for(&[&root]), &TracingSink);
    for i in 1..=nodes {
        assert!(fs::symlink_metadata(s.join(spill_name(i))).is_ok());
    }
    assert_eq!(r.skipped_for(SkipReason::SpecialFile), nodes);
    assert_eq!(r.files_deleted, 0);
}

/// Decision (docs/contracts/spill.md): an expired spill file that is a hard
/// link is unlinked like any other — `unlinkat` removes only the name inside
/// the session dir; the other name's data and content survive.
#[test]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
fn hard_link_to_a_victim_only_loses_the_link() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    let victim = fx.mkdir("victim").join("precious");
    file_at(&victim, "precious data", old());
    mkdir(&root.join("s"));
    let link = root.join("s").join(spill_name(1));
    fs::hard_link(&victim, &link).unwrap();
    assert_eq!(fs::metadata(&victim).unwrap().nlink(), 2);
    let r = sweep_spill_roots(&plan_for(&[&root]), &TracingSink);
    assert_eq!(r.files_deleted, 1);
    assert!(!link.exists());
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious data");
    assert_eq!(fs::metadata(&victim).unwrap().nlink(), 1);
}

#[test]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
fn names_with_newlines_and_invalid_utf8() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let fx = Fx::new();
    let root = fx.mkdir("custodian-spill-\n\u{7f}\u{fffd}");
    let weird_session = root.join(OsStr::from_bytes(b"bad\nsession\xff"));
    mkdir(&weird_session);
    file_at(&weird_session.join(spill_name(1)), "keep", old());
    let s = root.join("s");
    mkdir(&s);
    file_at(&s.join(OsStr::from_bytes(b"x\n\xfe.spill")), "keep", old());
    file_at(&s.join(spill_name(2)), "go", old());
    let mut plan = SweepPlan::new(cutoff());
    plan.discovery = Some(fx.discovery());
    plan.dry_run = true;
    let dry = sweep_spill_roots(&plan, &TracingSink);
    let json = serde_json::to_string(&dry).unwrap();
    assert!(
        json.contains("\\\\n"),
        "newline is escaped in paths: {json}"
    );
    plan.dry_run = false;
    let r = sweep_spill_roots(&plan, &TracingSink);
    assert_eq!(r.files_deleted, 1);
    assert!(weird_session.join(spill_name(1)).exists());
    assert!(s.join(OsStr::from_bytes(b"x\n\xfe.spill")).exists());
    assert_eq!(r.skipped_for(SkipReason::NonSessionDir), 1);
    assert_eq!(r.skipped_for(SkipReason::UnrelatedFile), 1);
    serde_json::to_string(&r).unwrap();
}

#[test]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
fn a_writer_recreates_its_session_while_the_sweep_prunes_it() {
    let fx = Fx::new();
    let store = Arc::new(SpillStore::open(&fx.path().join("root")).unwrap());
    let root = store.root().to_owned();
    let stop = Arc::new(AtomicBool::new(false));
    let sweeper = {
        let (root, stop) = (root.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut pruned = 0;
            let mut plan = SweepPlan::new(SystemTime::now() - DAY);
            plan.configured_roots = vec![root];
            while !stop.load(Ordering::Relaxed) {
                pruned += sweep_spill_roots(&plan, &TracingSink).dirs_pruned;
            }
            pruned
        })
    };
    let mut written = 0;
    for i in 0..3000u32 {
        let body = format!("result {i}");
        let loc = store
            .write("s", body.as_bytes())
            .expect("no write is lost to the sweep");
        assert_eq!(store.read(&loc).unwrap(), body.as_bytes());
        written += 1;
        // Empty the session again so the sweep prunes it.
        let f = root.join("s").join(format!(
            "{}.spill",
            loc.to_string().rsplit(':').next().unwrap()
        ));
        fs::remove_file(f).unwrap();
        if i > 500 && store.session_dirs_created() > 20 {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let pruned = sweeper.join().unwrap();
    assert!(pruned > 0, "the sweep never pruned the session");
    assert!(
        store.session_dirs_created() > 1,
        "the writer never had to recreate"
    );
    assert!(written > 0);
}
