//! Namespaces, inventories and the ordinary cleanup path.

use std::fs;

use custodian::workspace::{
    CleanupCode, CleanupResult, CleanupStatus, UserPathError, Workspace, WorkspaceConfig,
    WorkspaceError,
};

use crate::{Fixture, assert_failed, assert_only_removed, inventoried, populate};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::basics_in_a_private_mount_namespace"]
async fn user_results_beside_the_internal_namespace_survive_cleanup() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("req-1").unwrap();
    populate(&job);
    // The user writes results right beside the internal namespace.
    fs::write(fx.root().join("answer.md"), b"user answer").unwrap();
    fs::write(fx.root().join(".custodian-notes"), b"not ours").unwrap();
    let before = fx.snapshot();
    let gone = inventoried(&fx, &job);
    assert_eq!(gone.len(), 6);
    let r = job.cleanup().await;
    assert_eq!(r.status, CleanupStatus::Cleaned, "{r:?}");
    assert_eq!(
        (
            r.counts.files_removed,
            r.counts.dirs_removed,
            r.counts.missing
        ),
        (3, 3, 0)
    );
    assert_only_removed(&before, &fx.snapshot(), &gone);
    assert!(
        fx.root().join(".custodian/job").is_dir(),
        "the shared namespace stays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::basics_in_a_private_mount_namespace"]
async fn two_concurrent_requests_each_remove_only_their_own() {
    let fx = Fixture::new();
    let one = fx.ws.open_request("one").unwrap();
    let two = fx.ws.open_request("two").unwrap();
    populate(&one);
    populate(&two);
    let before = fx.snapshot();
    let gone_one = inventoried(&fx, &one);
    // Request two keeps creating while one is cleaned.
    let two_writer = two.clone();
    let writer = std::thread::spawn(move || {
        for i in 0..200 {
            two_writer.create_file(&format!("late-{i}")).unwrap();
        }
    });
    let r1 = one.cleanup().await;
    writer.join().unwrap();
    assert_eq!(r1.status, CleanupStatus::Cleaned, "{r1:?}");
    let mut after = fx.snapshot();
    after.retain(|p, _| {
        !p.to_string_lossy()
            .starts_with("ws/.custodian/job/two/late-")
    });
    assert_only_removed(&before, &after, &gone_one);
    assert_eq!(two.artifact_count(), 1 + 5 + 200);
    let gone_two = inventoried(&fx, &two);
    let before2 = fx.snapshot();
    let r2 = two.cleanup().await;
    assert!(r2.is_clean(), "{r2:?}");
    assert_eq!(r2.counts.files_removed, 203);
    assert_only_removed(&before2, &fx.snapshot(), &gone_two);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::basics_in_a_private_mount_namespace"]
async fn nested_artifacts_through_handles_are_removed_deepest_first() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("nest").unwrap();
    let root = job.root().unwrap();
    let mut dir = root.create_dir("d0").unwrap();
    for i in 1..20 {
        dir.create_file(&format!("f{i}")).unwrap();
        dir = dir.create_dir(&format!("d{i}")).unwrap();
    }
    drop(dir);
    let before = fx.snapshot();
    let gone = inventoried(&fx, &job);
    assert_eq!(gone.len(), 1 + 20 + 19);
    let r = job.cleanup().await;
    assert!(r.is_clean(), "{r:?}");
    assert_eq!(r.counts.files_removed, 19);
    assert_eq!(r.counts.dirs_removed, 21);
    assert_only_removed(&before, &fx.snapshot(), &gone);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::basics_in_a_private_mount_namespace"]
async fn invalid_ids_are_refused_before_any_syscall() {
    let fx = Fixture::new();
    // Pull the whole tree away from under the workspace: any syscall on its
    // descriptors now fails with ENOENT, so a typed id error proves that no
    // syscall was attempted.
    fs::remove_dir_all(fx.tmp.path()).unwrap();
    for bad in [
        "",
        ".",
        "..",
        "a/b",
        "../x",
        "a\0b",
        "x\\y",
        &"z".repeat(129),
    ] {
        assert!(
            matches!(
                fx.ws.open_request(bad),
                Err(WorkspaceError::InvalidRequestId(_))
            ),
            "{bad:?}"
        );
        assert!(
            matches!(
                fx.ws.cleanup(bad).await,
                Err(WorkspaceError::InvalidRequestId(_))
            ),
            "{bad:?}"
        );
    }
    // A valid id does reach the (now failing) syscall.
    assert!(matches!(
        fx.ws.open_request("fine"),
        Err(WorkspaceError::Io { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::basics_in_a_private_mount_namespace"]
async fn caller_paths_never_reach_the_internal_namespace() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("r").unwrap();
    job.create_file("secret.txt").unwrap();
    for p in [
        ".custodian",
        ".custodian/",
        "./.custodian",
        "a/../.custodian",
        ".CUSTODIAN/job/r/secret.txt",
        ".Custodian/",
        "src/../.custodian/job",
    ] {
        assert_eq!(
            fx.ws.resolve_user_path(p),
            Err(UserPathError::Internal),
            "{p}"
        );
        assert!(fx.ws.open_user_file(p, false).is_err(), "{p}");
        assert!(fx.ws.open_user_file(p, true).is_err(), "{p}");
    }
    // A symlink the user planted towards the namespace is never followed.
    std::os::unix::fs::symlink(".custodian", fx.root().join("link")).unwrap();
    std::os::unix::fs::symlink(".custodian/job/r/secret.txt", fx.root().join("flink")).unwrap();
    assert!(
        fx.ws
            .open_user_file("link/job/r/secret.txt", false)
            .is_err()
    );
    assert!(fx.ws.open_user_file("flink", true).is_err());
    // Ordinary user paths work.
    assert_eq!(
        fx.ws.resolve_user_path("src/main.rs").unwrap(),
        std::path::PathBuf::from("src/main.rs")
    );
    assert!(fx.ws.open_user_file("src/main.rs", false).is_ok());
    assert!(fx.ws.open_user_file("out/../new.txt", true).is_ok());
    assert!(fx.root().join("new.txt").exists());
    assert!(job.cleanup().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::basics_in_a_private_mount_namespace"]
async fn the_internal_namespace_is_configurable() {
    let tmp = crate::sandbox::tempdir();
    let ws = Workspace::open(
        tmp.path(),
        WorkspaceConfig::default().with_internal_name("_agent"),
    )
    .unwrap();
    let job = ws.open_request("r9").unwrap();
    job.create_file("x").unwrap();
    assert!(tmp.path().join("_agent/job/r9/x").is_file());
    assert_eq!(
        ws.resolve_user_path("_AGENT/x"),
        Err(UserPathError::Internal)
    );
    assert!(job.cleanup().await.is_clean());
    assert!(!tmp.path().join("_agent/job/r9").exists());
    for bad in ["", "..", "a/b"] {
        let c = WorkspaceConfig::default().with_internal_name(bad);
        assert!(matches!(
            Workspace::open(tmp.path(), c),
            Err(WorkspaceError::InvalidInternalName)
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::basics_in_a_private_mount_namespace"]
async fn a_symlinked_namespace_is_refused_at_open() {
    let tmp = crate::sandbox::tempdir();
    fs::create_dir(tmp.path().join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("elsewhere"), tmp.path().join(".custodian"))
        .unwrap();
    let r = Workspace::open(tmp.path(), WorkspaceConfig::default());
    assert!(
        matches!(
            r,
            Err(WorkspaceError::Untrusted {
                code: CleanupCode::SymlinkInJob,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(
        fs::read_dir(tmp.path().join("elsewhere"))
            .unwrap()
            .next()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::basics_in_a_private_mount_namespace"]
async fn an_existing_job_directory_is_never_adopted() {
    let fx = Fixture::new();
    fs::create_dir(fx.job_dir("stale")).unwrap();
    fs::write(fx.job_dir("stale").join("f"), b"x").unwrap();
    assert!(matches!(
        fx.ws.open_request("stale"),
        Err(WorkspaceError::JobExists { .. })
    ));
    // Cleanup of an id never opened here only looks: it is not ours.
    let r = fx.ws.cleanup("stale").await.unwrap();
    assert_failed(&r, CleanupCode::JobNotOwned);
    assert!(fx.job_dir("stale").join("f").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::basics_in_a_private_mount_namespace"]
async fn nothing_can_be_created_after_cleanup_started() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("done").unwrap();
    let handle = job.root().unwrap();
    assert!(job.cleanup().await.is_clean());
    assert!(matches!(
        job.create_file("x"),
        Err(WorkspaceError::RequestClosed { .. })
    ));
    assert!(matches!(
        handle.create_file("x"),
        Err(WorkspaceError::RequestClosed { .. })
    ));
    assert!(matches!(
        fx.ws.open_request("done"),
        Err(WorkspaceError::AlreadyCleaned { .. })
    ));
    assert!(!fx.job_dir("done").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::basics_in_a_private_mount_namespace"]
async fn after_eviction_a_repeated_cleanup_only_checks_the_directory_is_gone() {
    let fx = Fixture::with_config(WorkspaceConfig::default().with_result_cache(1));
    let a = fx.ws.open_request("a").unwrap();
    populate(&a);
    let first = a.cleanup().await;
    assert_eq!(first.status, CleanupStatus::Cleaned);
    // Cached: the very same result.
    assert_eq!(fx.ws.cleanup("a").await.unwrap(), first);
    // Evict "a" by cleaning "b".
    let b = fx.ws.open_request("b").unwrap();
    assert!(b.cleanup().await.is_clean());
    // Something reappears under the old name: it is not ours, so untouched.
    fs::create_dir(fx.job_dir("a")).unwrap();
    fs::write(fx.job_dir("a").join("new"), b"n").unwrap();
    let again = after_eviction(&fx, "a", &first).await;
    assert_failed(&again, CleanupCode::JobNotOwned);
    assert!(fx.job_dir("a").join("new").exists());
    fs::remove_dir_all(fx.job_dir("a")).unwrap();
    // Once gone, "gone" is all it says (the failure above is cached: evict it).
    let c = fx.ws.open_request("c").unwrap();
    assert!(c.cleanup().await.is_clean());
    let gone = after_eviction(&fx, "a", &again).await;
    assert_eq!(gone.status, CleanupStatus::AlreadyGone, "{gone:?}");
    assert_eq!(gone.counts, Default::default());
}

/// Cleans `id` until the answer is no longer the `cached` one: the election
/// files a result in its cache just after publishing it, so an eviction may
/// trail the evicting cleanup's result by a moment.
async fn after_eviction(fx: &Fixture, id: &str, cached: &CleanupResult) -> CleanupResult {
    for _ in 0..200 {
        let r = fx.ws.cleanup(id).await.unwrap();
        if r != *cached {
            return r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{id} was never evicted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::basics_in_a_private_mount_namespace"]
async fn the_wire_form_of_a_failure_carries_no_path() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("wire").unwrap();
    job.create_dir("very-secret-dir").unwrap();
    fs::write(fx.job_dir("wire").join("very-secret-dir/intruder"), b"x").unwrap();
    let r = job.cleanup().await;
    assert_failed(&r, CleanupCode::UnregisteredEntry);
    assert_eq!(r.suspect.as_deref(), Some("very-secret-dir/intruder"));
    let json = serde_json::to_string(&r).unwrap();
    assert!(
        !json.contains("secret") && !json.contains("intruder"),
        "{json}"
    );
    assert_eq!(r.safe_code().unwrap().as_str(), "unregistered_entry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::basics_in_a_private_mount_namespace"]
async fn records_the_strongest_identity_this_kernel_offers() {
    for fx in [Fixture::new(), Fixture::on_tmpfs()] {
        let job = fx.ws.open_request("ident").unwrap();
        job.create_file("f").unwrap();
        let inv = job.inventory();
        let file = inv.entry(1).identity;
        let meta = std::os::unix::fs::MetadataExt::ino(
            &fs::metadata(fx.job_dir("ident").join("f")).unwrap(),
        );
        assert_eq!(file.ino, meta);
        println!(
            "{}: dev={:#x} ino={} mount={:?} btime={:?}",
            fx.tmp.path().display(),
            file.dev,
            file.ino,
            file.mount,
            file.btime
        );
        #[cfg(target_os = "linux")]
        assert!(
            file.mount.is_some(),
            "statx reports a mount id since Linux 5.8"
        );
        assert_eq!(file.mount, fx.ws.anchor().mount);
        assert!(job.cleanup().await.is_clean());
    }
}
