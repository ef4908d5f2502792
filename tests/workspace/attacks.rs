//! Tampered job trees: cleanup fails closed and keeps everything suspect.

use std::fs;
use std::os::unix::fs::MetadataExt;

use custodian::workspace::{CleanupCode, CleanupStatus};

use crate::{Fixture, assert_failed, assert_unchanged, populate};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
async fn an_injected_sibling_job_inside_the_job_fails_closed() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("mine").unwrap();
    let sibling = fx.ws.open_request("theirs").unwrap();
    populate(&job);
    populate(&sibling);
    // Someone plants a job-shaped directory inside ours, and moves a copy of
    // the sibling's result beside it.
    fs::create_dir_all(fx.job_dir("mine").join("job/theirs")).unwrap();
    fs::write(fx.job_dir("mine").join("job/theirs/out.json"), b"sibling").unwrap();
    let before = fx.snapshot();
    let r = job.cleanup().await;
    assert_failed(&r, CleanupCode::UnregisteredEntry);
    assert_eq!(r.counts.files_removed + r.counts.dirs_removed, 0);
    assert_unchanged(&before, &fx.snapshot());
    // The real sibling is intact and still cleans up on its own.
    assert!(fx.job_dir("theirs").join("a/b/out.json").is_file());
    assert!(sibling.cleanup().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
async fn the_first_stray_in_walk_order_is_reported_whichever_thread_finds_it() {
    // Big enough for the cleanup's second thread. The early stray is the last
    // name of a long listing, so while one thread is still looking there the
    // other finds the late stray first; the early one must be reported.
    for round in 0..20 {
        let fx = Fixture::new();
        let job = fx.ws.open_request("many").unwrap();
        let big = job.create_dir("d00").unwrap();
        for f in 0..255 {
            big.create_file(&format!("f{f:03}")).unwrap();
        }
        for d in 1..11 {
            job.create_dir(&format!("d{d:02}"))
                .unwrap()
                .create_file("f")
                .unwrap();
        }
        let jd = fx.job_dir("many");
        fs::write(jd.join("d00/stray"), b"early").unwrap();
        fs::write(jd.join("d10/stray"), b"late").unwrap();
        let before = fx.snapshot();
        let r = job.cleanup().await;
        assert_failed(&r, CleanupCode::UnregisteredEntry);
        assert_eq!(r.suspect.as_deref(), Some("d00/stray"), "round {round}");
        assert_eq!(r.counts.files_removed + r.counts.dirs_removed, 0);
        assert_unchanged(&before, &fx.snapshot());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
async fn an_unregistered_file_fails_closed() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("r").unwrap();
    populate(&job);
    fs::write(fx.job_dir("r").join("a/b/stray.bin"), b"not registered").unwrap();
    let before = fx.snapshot();
    let r = job.cleanup().await;
    assert_failed(&r, CleanupCode::UnregisteredEntry);
    assert_eq!(r.suspect.as_deref(), Some("a/b/stray.bin"));
    assert_unchanged(&before, &fx.snapshot());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
async fn a_symlink_in_the_job_fails_closed_and_its_target_is_untouched() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("r").unwrap();
    populate(&job);
    // Replace the registered directory `a/b` by a link to the user's data,
    // with names that match registered files.
    let b = fx.job_dir("r").join("a/b");
    fs::rename(&b, fx.job_dir("r").join("a/b-moved")).unwrap();
    fs::write(fx.tmp.path().join("outside/out.json"), b"user json").unwrap();
    std::os::unix::fs::symlink(fx.tmp.path().join("outside"), &b).unwrap();
    let before = fx.snapshot();
    let r = job.cleanup().await;
    assert_eq!(r.status, CleanupStatus::Failed, "{r:?}");
    assert!(
        matches!(
            r.code,
            Some(CleanupCode::SymlinkInJob | CleanupCode::UnregisteredEntry)
        ),
        "{r:?}"
    );
    assert_unchanged(&before, &fx.snapshot());
    assert_eq!(
        fs::read(fx.tmp.path().join("outside/out.json")).unwrap(),
        b"user json"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
async fn a_registered_name_turned_symlink_is_reported_as_a_symlink() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("r").unwrap();
    populate(&job);
    let top = fx.job_dir("r").join("top.txt");
    fs::remove_file(&top).unwrap();
    std::os::unix::fs::symlink(fx.tmp.path().join("outside/keep.txt"), &top).unwrap();
    let before = fx.snapshot();
    let r = job.cleanup().await;
    assert_failed(&r, CleanupCode::SymlinkInJob);
    assert_unchanged(&before, &fx.snapshot());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
async fn a_replaced_inode_fails_closed() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("r").unwrap();
    populate(&job);
    let f = fx.job_dir("r").join("a/log.txt");
    let old_ino = fs::metadata(&f).unwrap().ino();
    fs::remove_file(&f).unwrap();
    fs::write(&f, b"an impostor").unwrap();
    // ext4 and tmpfs may hand the same inode number straight back; the birth
    // time (or the number) still tells them apart.
    let _reused = fs::metadata(&f).unwrap().ino() == old_ino;
    let before = fx.snapshot();
    let r = job.cleanup().await;
    assert_failed(&r, CleanupCode::IdentityReplaced);
    assert_eq!(r.suspect.as_deref(), Some("a/log.txt"));
    assert_unchanged(&before, &fx.snapshot());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
async fn a_directory_renamed_away_and_replaced_fails_closed() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("r").unwrap();
    populate(&job);
    let b = fx.job_dir("r").join("a/b");
    fs::rename(&b, fx.tmp.path().join("outside/b-stolen")).unwrap();
    fs::create_dir(&b).unwrap();
    fs::write(b.join("out.json"), b"replacement").unwrap();
    let before = fx.snapshot();
    let r = job.cleanup().await;
    assert_failed(&r, CleanupCode::IdentityReplaced);
    assert_unchanged(&before, &fx.snapshot());
    // The moved original is outside the job now and was not chased.
    assert!(fx.tmp.path().join("outside/b-stolen/out.json").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
async fn special_files_fail_closed() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("fifo").unwrap();
    populate(&job);
    let fifo = fx.job_dir("fifo").join("a/pipe");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    let before = fx.snapshot();
    let r = job.cleanup().await;
    assert_failed(&r, CleanupCode::SpecialFileInJob);
    assert_unchanged(&before, &fx.snapshot());

    let job = fx.ws.open_request("sock").unwrap();
    populate(&job);
    let _listener =
        std::os::unix::net::UnixListener::bind(fx.job_dir("sock").join("a/b/s")).unwrap();
    let before = fx.snapshot();
    let r = job.cleanup().await;
    assert_failed(&r, CleanupCode::SpecialFileInJob);
    assert_unchanged(&before, &fx.snapshot());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
async fn a_hard_link_to_a_user_file_never_modifies_the_users_data() {
    let fx = Fixture::new();
    let user = fx.root().join("result.txt");
    let user_ino = fs::metadata(&user).unwrap().ino();

    // 1. A user file hard-linked in place of a registered file: not ours.
    let job = fx.ws.open_request("swap").unwrap();
    populate(&job);
    let top = fx.job_dir("swap").join("top.txt");
    fs::remove_file(&top).unwrap();
    fs::hard_link(&user, &top).unwrap();
    let before = fx.snapshot();
    let r = job.cleanup().await;
    assert_failed(&r, CleanupCode::IdentityReplaced);
    assert_unchanged(&before, &fx.snapshot());
    assert_eq!(fs::metadata(&user).unwrap().nlink(), 2);

    // 2. The user keeps a hard link to a registered artifact: cleanup removes
    //    only the job's name; the user's name and the bytes stay.
    let job = fx.ws.open_request("keep").unwrap();
    populate(&job);
    let kept = fx.root().join("kept-output.json");
    fs::hard_link(fx.job_dir("keep").join("a/b/out.json"), &kept).unwrap();
    let r = job.cleanup().await;
    assert!(r.is_clean(), "{r:?}");
    assert_eq!(fs::read(&kept).unwrap(), b"{\"ok\":true}");
    assert_eq!(fs::metadata(&kept).unwrap().nlink(), 1);
    assert_eq!(fs::read(&user).unwrap(), b"user result");
    assert_eq!(fs::metadata(&user).unwrap().ino(), user_ino);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
async fn a_failed_cleanup_preserves_everything_and_its_result_is_sticky() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("r").unwrap();
    populate(&job);
    fs::write(fx.job_dir("r").join("stray"), b"?").unwrap();
    let first = job.cleanup().await;
    assert_failed(&first, CleanupCode::UnregisteredEntry);
    // Removing the stray afterwards does not make a duplicate re-run removal.
    fs::remove_file(fx.job_dir("r").join("stray")).unwrap();
    let again = job.cleanup().await;
    assert_eq!(again, first);
    assert!(fx.job_dir("r").join("a/b/out.json").is_file());
    assert!(fx.job_dir("r").join("top.txt").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::attacks_in_a_private_mount_namespace"]
async fn a_fifo_at_a_user_path_never_blocks_open_user_file() {
    let fx = Fixture::new();
    let fifo = fx.root().join("pipe");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    // Without O_NONBLOCK either open would wait for a peer forever.
    for write in [false, true] {
        let r = fx.ws.open_user_file("pipe", write);
        assert!(
            matches!(&r, Err(custodian::workspace::WorkspaceError::Io { .. })),
            "write={write}: {r:?}"
        );
    }
    assert!(fx.ws.open_user_file("result.txt", false).is_ok());
}
