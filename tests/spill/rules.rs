//! The seed's sweep rules, each as its own test, against the ctx-free
//! mechanics (`sweep_spill_roots`, `discover_default_roots`).

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::time::Duration;

use custodian::spill::{
    RootKind, SkipReason, SpillStore, SweepPlan, TracingSink, discover_default_roots,
    sweep_spill_roots,
};

use crate::*;

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn exact_age_boundary_one_nanosecond_either_side() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    let s = root.join("s");
    mkdir(&s);
    let one_ns = Duration::from_nanos(1);
    file_at(&s.join(spill_name(1)), "older", cutoff() - one_ns);
    file_at(&s.join(spill_name(2)), "exact", cutoff());
    file_at(&s.join(spill_name(3)), "newer", cutoff() + one_ns);
    // The filesystem must keep nanoseconds for this test to mean anything.
    let m = fs::metadata(s.join(spill_name(1)))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(m, cutoff() - one_ns, "filesystem truncated the mtime");

    let r = sweep_spill_roots(&plan_for(&[&root]), &TracingSink);
    assert!(
        !s.join(spill_name(1)).exists(),
        "1 ns older than the cutoff must go"
    );
    assert!(
        s.join(spill_name(2)).exists(),
        "exactly at the cutoff is not strictly older"
    );
    assert!(s.join(spill_name(3)).exists());
    assert_eq!((r.files_deleted, r.files_kept), (1, 2));
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn empty_sessions_are_pruned_but_a_configured_root_is_kept() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    mkdir(&root.join("empty"));
    mkdir(&root.join("expiring"));
    file_at(&root.join("expiring").join(spill_name(1)), "x", old());
    mkdir(&root.join("live"));
    file_at(&root.join("live").join(spill_name(2)), "y", fresh());

    let r = sweep_spill_roots(&plan_for(&[&root]), &TracingSink);
    assert!(!root.join("empty").exists());
    assert!(!root.join("expiring").exists());
    assert!(root.join("live").join(spill_name(2)).exists());
    assert_eq!(r.dirs_pruned, 2);

    // Emptied completely: a configured root itself is never removed.
    fs::remove_file(root.join("live").join(spill_name(2))).unwrap();
    let r = sweep_spill_roots(&plan_for(&[&root]), &TracingSink);
    assert!(root.exists());
    assert_eq!((r.dirs_pruned, r.roots_removed), (1, 0));
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn a_session_dir_made_by_hand_is_never_pruned() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    mkdir_by_hand(&root.join("mine"));
    mkdir_by_hand(&root.join("expiring"));
    file_at(&root.join("expiring").join(spill_name(1)), "x", old());
    let r = sweep_spill_roots(&plan_for(&[&root]), &TracingSink);
    // Its expired spill files go; the directory, which the store did not
    // mark as its own, stays even when empty.
    assert!(root.join("mine").is_dir());
    assert!(root.join("expiring").is_dir());
    assert!(!root.join("expiring").join(spill_name(1)).exists());
    assert_eq!((r.files_deleted, r.dirs_pruned), (1, 0));

    // The store's own session directory is marked and does go once empty.
    let store = SpillStore::open(&root).unwrap();
    store.write("made-by-store", b"x").unwrap();
    let made = root.join("made-by-store");
    assert_eq!(
        fs::metadata(&made).unwrap().permissions().mode() & 0o7777,
        0o1700
    );
    for e in fs::read_dir(&made).unwrap() {
        fs::remove_file(e.unwrap().path()).unwrap();
    }
    let r = sweep_spill_roots(&plan_for(&[&root]), &TracingSink);
    assert!(!made.exists());
    assert_eq!(r.dirs_pruned, 1);
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn discovered_prior_roots_are_removed_only_when_empty() {
    let fx = Fx::new();
    let gone = fx.mkdir("custodian-spill-aaaa");
    mkdir(&gone.join("s"));
    file_at(&gone.join("s").join(spill_name(1)), "x", old());
    let stays = fx.mkdir("custodian-spill-bbbb");
    mkdir(&stays.join("s"));
    file_at(&stays.join("s").join(spill_name(2)), "y", fresh());
    let unrelated = fx.mkdir("other-dir");
    mkdir(&unrelated.join("s"));
    file_at(&unrelated.join("s").join(spill_name(3)), "z", old());

    let mut plan = SweepPlan::new(cutoff());
    plan.discovery = Some(fx.discovery());
    let r = sweep_spill_roots(&plan, &TracingSink);
    assert!(!gone.exists(), "an emptied prior default root is removed");
    assert!(stays.join("s").join(spill_name(2)).exists());
    assert!(
        unrelated.join("s").join(spill_name(3)).exists(),
        "no prefix, not a root"
    );
    assert_eq!(r.roots_scanned, 2);
    assert_eq!(r.roots_removed, 1);
    let removed: Vec<_> = r.roots.iter().filter(|x| x.removed).collect();
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0].origin, RootKind::Discovered);
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn symlinks_and_unrelated_entries_are_skipped() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    let victim = fx.mkdir("victim");
    file_at(&victim.join(spill_name(9)), "victim", old());
    let s = root.join("s");
    mkdir(&s);
    // A symlink named like a spill file, itself old, pointing at an old file.
    symlink(victim.join(spill_name(9)), s.join(spill_name(1))).unwrap();
    filetime::set_symlink_file_times(
        s.join(spill_name(1)),
        filetime::FileTime::from_system_time(old()),
        filetime::FileTime::from_system_time(old()),
    )
    .unwrap();
    // A session-named symlink to a directory of expired spill files.
    symlink(&victim, root.join("s2")).unwrap();
    // Unrelated entries, all old.
    file_at(&s.join("notes.txt"), "keep", old());
    mkdir(&s.join("nested"));
    file_at(&s.join("nested").join(spill_name(2)), "keep", old());
    mkdir(&root.join(".hidden"));
    file_at(&root.join(".hidden").join(spill_name(3)), "keep", old());
    file_at(&root.join(spill_name(4)), "keep", old());
    let before = snapshot(fx.path());

    let r = sweep_spill_roots(&plan_for(&[&root]), &TracingSink);
    assert_eq!(snapshot(fx.path()), before, "nothing may change");
    assert_eq!(r.files_deleted, 0);
    assert_eq!(r.skipped_for(SkipReason::Symlink), 2);
    assert_eq!(r.skipped_for(SkipReason::UnrelatedFile), 2);
    assert_eq!(r.skipped_for(SkipReason::NestedDir), 1);
    assert_eq!(r.skipped_for(SkipReason::NonSessionDir), 1);
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn configured_plus_discovered_roots_are_all_covered() {
    let fx = Fx::new();
    let configured = fx.mkdir("configured");
    mkdir(&configured.join("a"));
    file_at(&configured.join("a").join(spill_name(1)), "x", old());
    let d1 = fx.mkdir("custodian-spill-1");
    mkdir(&d1.join("b"));
    file_at(&d1.join("b").join(spill_name(2)), "x", old());
    file_at(&d1.join("b").join(spill_name(3)), "keep", fresh());
    let d2 = fx.mkdir("custodian-spill-2");
    mkdir(&d2.join("c"));
    file_at(&d2.join("c").join(spill_name(4)), "x", old());
    // Discovery rejects a symlink even if it carries the prefix.
    let elsewhere = fx.mkdir("elsewhere");
    mkdir(&elsewhere.join("d"));
    file_at(&elsewhere.join("d").join(spill_name(5)), "victim", old());
    symlink(&elsewhere, fx.path().join("custodian-spill-link")).unwrap();

    let mut plan = plan_for(&[&configured]);
    plan.discovery = Some(fx.discovery());
    let r = sweep_spill_roots(&plan, &TracingSink);
    assert_eq!(r.roots_scanned, 3);
    assert_eq!(r.files_deleted, 3);
    assert!(configured.exists());
    assert!(d1.join("b").join(spill_name(3)).exists());
    assert!(!d2.exists());
    assert!(elsewhere.join("d").join(spill_name(5)).exists());
    assert!(fx.path().join("custodian-spill-link").is_symlink());
    assert_eq!(r.skipped_for(SkipReason::Symlink), 1);
    let found = discover_default_roots(fx.path(), "custodian-spill-").unwrap();
    assert_eq!(found, vec![fs::canonicalize(&d1).unwrap()]);
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn identity_dedup_through_a_configured_symlink() {
    let fx = Fx::new();
    let prior = fx.mkdir("custodian-spill-prior");
    mkdir(&prior.join("s"));
    file_at(&prior.join("s").join(spill_name(1)), "x", old());
    let cfgdir = fx.mkdir("cfg");
    let link = cfgdir.join("spill-root");
    symlink(&prior, &link).unwrap();

    let mut plan = plan_for(&[&link]);
    plan.discovery = Some(fx.discovery());
    let r = sweep_spill_roots(&plan, &TracingSink);
    assert_eq!(
        r.roots_scanned, 1,
        "one directory, scanned once: {:?}",
        r.roots
    );
    assert_eq!(r.files_deleted, 1);
    assert_eq!(r.skipped_for(SkipReason::DuplicateRoot), 1);
    assert_eq!(r.roots[0].origin, RootKind::Configured);
    // The configured identity wins: the emptied root is not removed.
    assert!(prior.exists(), "configured root must be non-prunable");
    assert_eq!(r.roots_removed, 0);
    assert!(link.is_symlink());
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn zero_nothing_older_than_epoch_cutoff_is_deleted() {
    // The service maps `cleanup_period_days = 0` to "no sweep" (see
    // service.rs); the mechanics with an epoch cutoff delete nothing either.
    let fx = Fx::new();
    let root = fx.mkdir("root");
    mkdir(&root.join("s"));
    file_at(&root.join("s").join(spill_name(1)), "x", old());
    let r = sweep_spill_roots(
        &SweepPlan {
            configured_roots: vec![root.clone()],
            ..SweepPlan::new(std::time::UNIX_EPOCH)
        },
        &TracingSink,
    );
    assert_eq!(r.files_deleted, 0);
    assert!(root.join("s").join(spill_name(1)).exists());
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn future_mtimes_are_kept() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    mkdir(&root.join("s"));
    let future = std::time::SystemTime::now() + 3650 * DAY;
    file_at(&root.join("s").join(spill_name(1)), "x", future);
    let mut plan = plan_for(&[&root]);
    plan.cutoff = std::time::SystemTime::now() - DAY;
    let r = sweep_spill_roots(&plan, &TracingSink);
    assert_eq!((r.files_deleted, r.files_kept), (0, 1));
    assert!(root.join("s").join(spill_name(1)).exists());
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn dry_run_lists_and_deletes_nothing() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    mkdir(&root.join("s"));
    mkdir(&root.join("empty"));
    file_at(&root.join("s").join(spill_name(1)), "x", old());
    let before = snapshot(fx.path());
    let mut plan = plan_for(&[&root]);
    plan.dry_run = true;
    let r = sweep_spill_roots(&plan, &TracingSink);
    assert_eq!(snapshot(fx.path()), before);
    assert_eq!(r.files_deleted, 1);
    assert_eq!(r.would_delete.len(), 1);
    assert!(r.would_delete[0].ends_with(&spill_name(1)));
}

// ---- POSIX trust ----

fn one_old_file(root: &std::path::Path) -> std::path::PathBuf {
    mkdir(&root.join("s"));
    let f = root.join("s").join(spill_name(1));
    file_at(&f, "x", old());
    f
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn unsafe_root_owned_by_another_user_is_skipped() {
    if !is_root() {
        eprintln!("SKIP: chown to another uid needs root");
        return;
    }
    let fx = Fx::new();
    let root = fx.mkdir("root");
    let f = one_old_file(&root);
    std::os::unix::fs::chown(&root, Some(4242), Some(4242)).unwrap();
    let rec = Recorder::default();
    let r = sweep_spill_roots(&plan_for(&[&root]), &rec);
    assert!(f.exists());
    assert_eq!(r.skipped_for(SkipReason::UntrustedOwner), 1);
    assert_eq!(rec.codes(), vec!["untrusted_root"]);
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn unsafe_root_writable_by_group_or_others_is_skipped() {
    for mode in [0o770, 0o707, 0o1777] {
        let fx = Fx::new();
        let root = fx.mkdir("root");
        let f = one_old_file(&root);
        fs::set_permissions(&root, fs::Permissions::from_mode(mode)).unwrap();
        let rec = Recorder::default();
        let r = sweep_spill_roots(&plan_for(&[&root]), &rec);
        assert!(f.exists(), "mode {mode:o}");
        assert_eq!(r.skipped_for(SkipReason::UntrustedMode), 1, "mode {mode:o}");
        assert_eq!(rec.codes(), vec!["untrusted_root"]);
    }
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn unsafe_session_is_skipped_with_a_warning() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    let f = one_old_file(&root);
    mkdir(&root.join("ok"));
    file_at(&root.join("ok").join(spill_name(2)), "x", old());
    fs::set_permissions(root.join("s"), fs::Permissions::from_mode(0o722)).unwrap();
    let rec = Recorder::default();
    let r = sweep_spill_roots(&plan_for(&[&root]), &rec);
    assert!(f.exists());
    assert!(
        !root.join("ok").exists(),
        "a trusted session beside it is swept"
    );
    assert_eq!(r.skipped_for(SkipReason::UntrustedMode), 1);
    assert_eq!(rec.codes(), vec!["untrusted_session"]);

    if is_root() {
        fs::set_permissions(root.join("s"), fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(root.join("s"), Some(4242), None).unwrap();
        let r = sweep_spill_roots(&plan_for(&[&root]), &TracingSink);
        assert!(f.exists());
        assert_eq!(r.skipped_for(SkipReason::UntrustedOwner), 1);
    }
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn non_sticky_writable_ancestor_is_refused_and_sticky_is_accepted() {
    let fx = Fx::new();
    let anc = fx.mkdir("anc");
    let root = anc.join("root");
    mkdir(&root);
    let f = one_old_file(&root);
    fs::set_permissions(&anc, fs::Permissions::from_mode(0o777)).unwrap();
    let rec = Recorder::default();
    let r = sweep_spill_roots(&plan_for(&[&root]), &rec);
    assert!(f.exists());
    assert_eq!(r.skipped_for(SkipReason::UntrustedAncestor), 1);
    assert_eq!(rec.codes(), vec!["untrusted_ancestor"]);

    fs::set_permissions(&anc, fs::Permissions::from_mode(0o1777)).unwrap();
    let r = sweep_spill_roots(&plan_for(&[&root]), &TracingSink);
    assert!(
        !f.exists(),
        "a sticky writable ancestor (like /tmp) is fine"
    );
    assert_eq!(r.files_deleted, 1);
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn dangerous_roots_are_refused_whatever_the_config_says() {
    let fx = Fx::new();
    let workspace = fx.mkdir("workspace");
    let f = one_old_file(&workspace);
    // The workspace, an ancestor of it, and `/` (dry run with an epoch
    // cutoff: even a regression could not delete anything).
    let mut plan = plan_for(&[&workspace, fx.path(), std::path::Path::new("/")]);
    plan.protected = vec![workspace.clone()];
    plan.dry_run = true;
    let r = sweep_spill_roots(&plan, &TracingSink);
    assert!(f.exists());
    assert_eq!(r.skipped_for(SkipReason::DangerousRoot), 3, "{:?}", r.roots);
    assert_eq!(r.roots_scanned, 0);
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn a_missing_root_is_a_warning_not_a_failure() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    let f = one_old_file(&root);
    let rec = Recorder::default();
    let missing = fx.path().join("missing");
    let r = sweep_spill_roots(&plan_for(&[&missing, &root]), &rec);
    assert!(!f.exists());
    assert_eq!(rec.codes(), vec!["root_missing"]);
    assert_eq!(r.skipped_for(SkipReason::MissingRoot), 1);
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn filesystem_failures_are_contained_read_only_mount() {
    if !is_root() {
        eprintln!("SKIP: mounting needs root");
        return;
    }
    let fx = Fx::new();
    let ro = fx.mkdir("ro");
    let Some(_g) = tmpfs_mount(&ro) else { return };
    let f = one_old_file(&ro);
    let other = fx.mkdir("other");
    let g = one_old_file(&other);
    rustix::mount::mount_remount(&ro, rustix::mount::MountFlags::RDONLY, c"").unwrap();
    let rec = Recorder::default();
    let r = sweep_spill_roots(&plan_for(&[&ro, &other]), &rec);
    assert!(f.exists(), "EROFS: nothing deleted");
    assert!(
        !g.exists(),
        "the failure in one root does not stop the next"
    );
    // The sweep's quarantine cannot be created on a read-only mount: nothing
    // is removed in that root.
    assert_eq!(rec.codes(), vec!["quarantine_failed"]);
    assert_eq!(r.skipped_for(SkipReason::Error), 1);
    assert_eq!(r.files_deleted, 1);
}

struct PanickingSink;
impl custodian::spill::WarningSink for PanickingSink {
    fn warn(
        &self,
        _: &custodian::spill::SpillWarning,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        panic!("sink exploded");
    }
}

struct FailingSink;
impl custodian::spill::WarningSink for FailingSink {
    fn warn(
        &self,
        _: &custodian::spill::SpillWarning,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Err("sink is full".into())
    }
}

#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn warning_sink_failures_are_contained() {
    let sinks: [&dyn custodian::spill::WarningSink; 2] = [&PanickingSink, &FailingSink];
    for sink in sinks {
        let fx = Fx::new();
        let root = fx.mkdir("root");
        mkdir(&root.join("bad"));
        fs::set_permissions(root.join("bad"), fs::Permissions::from_mode(0o777)).unwrap();
        mkdir(&root.join("bad2"));
        fs::set_permissions(root.join("bad2"), fs::Permissions::from_mode(0o777)).unwrap();
        let f = one_old_file(&root);
        let missing = fx.path().join("missing");
        let r = sweep_spill_roots(&plan_for(&[&missing, &root]), sink);
        assert!(!f.exists(), "the sweep went on after the sink failed");
        assert_eq!(r.sink_failures, 3);
        assert_eq!(r.warnings.len(), 3, "warnings are kept in the report");
    }
}

/// Session dirs are shared between the sweep's two threads (every other
/// one whole to the second, a large one in halves): every expired file of
/// each is deleted and nothing else, the emptied ones are pruned, no
/// quarantine is left, and the warnings come in listing order, as from a
/// sequential sweep: those of a session dir the second thread swept (a
/// bind-mounted spill file in it, as root) among those of the dirs the
/// sweeping thread refused (untrusted).
#[test]
#[ignore = "deletes: run by guarded::rules_in_a_private_mount_namespace"]
fn both_threads_delete_exactly_the_expired_files_with_warnings_in_listing_order() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    let mut n = 0u64;
    let mut fresh_files = Vec::new();
    let mut old_files = Vec::new();
    // Every `old_every`-th file expired (0: none).
    let mut files = |dir: &std::path::Path, count: usize, old_every: usize| {
        for i in 0..count {
            let p = dir.join(spill_name(n));
            n += 1;
            if old_every > 0 && i % old_every == 0 {
                file_at(&p, "old", old());
                old_files.push(p);
            } else {
                file_at(&p, "fresh", fresh());
                fresh_files.push(p);
            }
        }
    };
    for s in 0..12 {
        let d = root.join(format!("s{s:02}"));
        mkdir(&d);
        match s {
            // Untrusted (writable by others): warned about, left alone.
            3 | 4 | 8 => {
                files(&d, 6, 0);
                fs::set_permissions(&d, fs::Permissions::from_mode(0o1777)).unwrap();
            }
            // Only expired files: emptied and pruned.
            5 | 6 => files(&d, 6, 1),
            // Large: split in halves between the threads.
            10 => files(&d, 5000, 2),
            _ => files(&d, 7, 2),
        }
    }
    // As root: an expired spill file in each ordinary session dir is a
    // mount point, skipped with a warning wherever it is swept.
    let mounted: &[&str] = if is_root() {
        &["s00", "s01", "s02", "s07", "s09", "s11"]
    } else {
        eprintln!("SKIP (partly): bind mounts need root");
        &[]
    };
    let source = fx.path().join("mount-source");
    fs::write(&source, "outside").unwrap();
    for s in mounted {
        let target = root.join(s).join(spill_name(1_000_000));
        file_at(&target, "old", old());
        let ok = std::process::Command::new("mount")
            .arg("--bind")
            .arg(&source)
            .arg(&target)
            .status()
            .unwrap()
            .success();
        assert!(ok, "bind mount over {}", target.display());
    }
    let rec = Recorder::default();
    let r = sweep_spill_roots(&plan_for(&[&root]), &rec);
    for s in mounted {
        let target = root.join(s).join(spill_name(1_000_000));
        assert_eq!(fs::read_to_string(&target).unwrap(), "outside");
        let _ = std::process::Command::new("umount").arg(&target).status();
    }

    assert_eq!(r.files_deleted as usize, old_files.len(), "{r:?}");
    assert_eq!(r.files_kept as usize, fresh_files.len() - 18, "{r:?}");
    assert_eq!(r.dirs_pruned, 2, "{r:?}");
    for p in &old_files {
        assert!(!p.exists(), "{} was not deleted", p.display());
    }
    for p in &fresh_files {
        assert!(p.exists(), "{} was deleted", p.display());
    }
    assert!(!root.join("s05").exists() && !root.join("s06").exists());
    let left: Vec<String> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "quarantines left: {left:?}");

    // The warnings, in the root's listing order: an untrusted dir, or the
    // mount point in an ordinary one.
    let listed: Vec<(String, String)> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|n| {
            if ["s03", "s04", "s08"].contains(&n.as_str()) {
                Some(("untrusted_session".to_owned(), n))
            } else if mounted.contains(&n.as_str()) {
                Some((
                    "file_skipped".to_owned(),
                    format!("{n}/{}", spill_name(1_000_000)),
                ))
            } else {
                None
            }
        })
        .collect();
    let warned: Vec<(String, String)> = rec
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|w| {
            let at = w.path.rsplit('/').take(2).collect::<Vec<_>>();
            let tail = if w.code == "file_skipped" {
                format!("{}/{}", at[1], at[0])
            } else {
                at[0].to_owned()
            };
            (w.code.to_owned(), tail)
        })
        .collect();
    assert_eq!(warned, listed);
}
