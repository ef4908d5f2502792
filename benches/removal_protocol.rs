//! What the tamper-evident removal protocol costs per entry, and whether
//! io_uring batching, a rename onto the last quarantine name, batched
//! closes or a second thread pay for it.
//!
//! On a tree of 100 directories × 100 files (10,100 entries + the root),
//! built fresh (then `sync`) for every round, median of the rounds, wall and
//! process CPU time:
//!
//! - `plain`: `unlinkat` per file, `rmdir` per directory (what `rm -rf` and
//!   `remove_dir_all` do); `plain_2t`: the same over two threads;
//! - `protocol`: per entry `renameat2(RENAME_NOREPLACE)` into a quarantine,
//!   `openat(O_PATH | O_NOFOLLOW)`, `statx` (identity), `unlinkat`, `statx`
//!   (`nlink`), `close`; `protocol_2t`: over two threads, one quarantine
//!   each;
//! - `unproven`: `renameat2`, `statx` by name, `unlinkat` — the move and the
//!   check without the descriptor that proves the destruction;
//! - `same_dir`: the six calls, the quarantine name in the entry's own
//!   directory (what a same-directory rename would cost);
//! - `one_name`: the six calls, one quarantine name reused;
//! - `held`: the six calls, a directory's descriptors closed at its end;
//! - `overwrite`: five calls, each file renamed onto the previous one's
//!   quarantine name (the rename does the unlink; what `crate::fs::Quarantine`
//!   does); `overwrite_held`: with batched closes; `overwrite_2t`: that over
//!   two threads (what the cleaners do);
//! - `uring`: the six steps, each submitted for a whole directory at once
//!   through one io_uring (six `io_uring_enter`s per directory).
//!
//! ```text
//! cargo bench --bench removal_protocol                       # the temp dir
//! REMOVAL_BENCH_DIR=/dev/shm cargo bench --bench removal_protocol
//! REMOVAL_BENCH_ONLY=plain,overwrite_2t cargo bench --bench removal_protocol
//! cargo bench --bench removal_protocol -- --calls            # µs per call
//! ```

// io_uring submission entries carry raw pointers to names and `statx`
// buffers the kernel writes into; the bench keeps every one alive until its
// completion has been reaped (see the SAFETY comments).
#![allow(unsafe_code)]
#![allow(clippy::needless_range_loop)] // parallel arrays indexed together

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use io_uring::{IoUring, opcode, squeue, types};
use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, StatxFlags};

const DIRS: usize = 100;
const FILES: usize = 100;

fn base() -> PathBuf {
    std::env::var_os("REMOVAL_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

fn rounds() -> usize {
    std::env::var("REMOVAL_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7)
}

fn name(prefix: char, i: usize) -> CString {
    CString::new(format!("{prefix}{i:03}")).unwrap()
}

fn open_dir(dir: BorrowedFd<'_>, name: &std::ffi::CStr) -> OwnedFd {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

/// Builds `at/tree/dNNN/fNNN` and `at/q`, returns (tree, quarantine) and the
/// expected inode of every entry, files of each directory first.
fn build(at: &Path) -> (OwnedFd, OwnedFd, Vec<Vec<u64>>, Vec<u64>) {
    std::fs::create_dir(at.join("tree")).unwrap();
    std::fs::create_dir(at.join("q")).unwrap();
    let tree = rustix::fs::open(
        at.join("tree"),
        OFlags::RDONLY | OFlags::DIRECTORY,
        Mode::empty(),
    )
    .unwrap();
    let q = rustix::fs::open(
        at.join("q"),
        OFlags::RDONLY | OFlags::DIRECTORY,
        Mode::empty(),
    )
    .unwrap();
    let mut file_inos = Vec::new();
    let mut dir_inos = Vec::new();
    for d in 0..DIRS {
        rustix::fs::mkdirat(&tree, name('d', d).as_c_str(), Mode::from_raw_mode(0o700)).unwrap();
        let dfd = open_dir(tree.as_fd(), &name('d', d));
        dir_inos.push(rustix::fs::fstat(&dfd).unwrap().st_ino);
        let mut inos = Vec::new();
        for f in 0..FILES {
            let fd = rustix::fs::openat(
                &dfd,
                name('f', f).as_c_str(),
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .unwrap();
            inos.push(rustix::fs::fstat(&fd).unwrap().st_ino);
        }
        file_inos.push(inos);
    }
    rustix::fs::sync();
    (tree, q, file_inos, dir_inos)
}

fn plain(tree: &OwnedFd) {
    for d in 0..DIRS {
        let dfd = open_dir(tree.as_fd(), &name('d', d));
        for f in 0..FILES {
            rustix::fs::unlinkat(&dfd, name('f', f).as_c_str(), AtFlags::empty()).unwrap();
        }
        drop(dfd);
        rustix::fs::unlinkat(tree, name('d', d).as_c_str(), AtFlags::REMOVEDIR).unwrap();
    }
}

/// The six calls, one entry at a time.
fn sync_one(
    parent: BorrowedFd<'_>,
    n: &std::ffi::CStr,
    q: BorrowedFd<'_>,
    qn: &std::ffi::CStr,
    ino: u64,
    dir: bool,
) {
    rustix::fs::renameat_with(parent, n, q, qn, RenameFlags::NOREPLACE).unwrap();
    let fd = rustix::fs::openat(
        q,
        qn,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap();
    let s = rustix::fs::statx(
        &fd,
        c"",
        AtFlags::EMPTY_PATH,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME | StatxFlags::MNT_ID,
    )
    .unwrap();
    assert_eq!(s.stx_ino, ino);
    let flags = if dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    rustix::fs::unlinkat(q, qn, flags).unwrap();
    let s = rustix::fs::statx(&fd, c"", AtFlags::EMPTY_PATH, StatxFlags::NLINK).unwrap();
    assert_eq!(s.stx_nlink, 0);
}

/// Moving and checking without the proof: `renameat2`, `statx` by name,
/// `unlinkat` (no descriptor held, so no `nlink` check).
fn unproven_one(
    parent: BorrowedFd<'_>,
    n: &std::ffi::CStr,
    q: BorrowedFd<'_>,
    qn: &std::ffi::CStr,
    ino: u64,
    dir: bool,
) {
    rustix::fs::renameat_with(parent, n, q, qn, RenameFlags::NOREPLACE).unwrap();
    let s = rustix::fs::statx(
        q,
        qn,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME | StatxFlags::MNT_ID,
    )
    .unwrap();
    assert_eq!(s.stx_ino, ino);
    let flags = if dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    rustix::fs::unlinkat(q, qn, flags).unwrap();
}

fn unproven(tree: &OwnedFd, q: &OwnedFd, files: &[Vec<u64>], dirs: &[u64]) {
    let mut k = 0;
    for d in 0..DIRS {
        let dfd = open_dir(tree.as_fd(), &name('d', d));
        for f in 0..FILES {
            unproven_one(
                dfd.as_fd(),
                &name('f', f),
                q.as_fd(),
                &name('q', k),
                files[d][f],
                false,
            );
            k += 1;
        }
        drop(dfd);
        unproven_one(
            tree.as_fd(),
            &name('d', d),
            q.as_fd(),
            &name('q', k),
            dirs[d],
            true,
        );
        k += 1;
    }
}

/// The six calls with the quarantine name in the entry's own directory
/// (a same-directory rename: no cross-directory rename lock).
fn same_dir(tree: &OwnedFd, files: &[Vec<u64>], dirs: &[u64]) {
    let mut k = 0;
    for d in 0..DIRS {
        let dfd = open_dir(tree.as_fd(), &name('d', d));
        for f in 0..FILES {
            sync_one(
                dfd.as_fd(),
                &name('f', f),
                dfd.as_fd(),
                &name('q', k),
                files[d][f],
                false,
            );
            k += 1;
        }
        drop(dfd);
        sync_one(
            tree.as_fd(),
            &name('d', d),
            tree.as_fd(),
            &name('q', k),
            dirs[d],
            true,
        );
        k += 1;
    }
}

fn protocol(tree: &OwnedFd, q: &OwnedFd, files: &[Vec<u64>], dirs: &[u64]) {
    let mut k = 0;
    for d in 0..DIRS {
        let dfd = open_dir(tree.as_fd(), &name('d', d));
        for f in 0..FILES {
            sync_one(
                dfd.as_fd(),
                &name('f', f),
                q.as_fd(),
                &name('q', k),
                files[d][f],
                false,
            );
            k += 1;
        }
        drop(dfd);
        sync_one(
            tree.as_fd(),
            &name('d', d),
            q.as_fd(),
            &name('q', k),
            dirs[d],
            true,
        );
        k += 1;
    }
}

/// The six calls over two threads, each with its own quarantine, the
/// directories split between them.
fn protocol_2t(tree: &OwnedFd, qs: &[OwnedFd; 2], files: &[Vec<u64>], dirs: &[u64]) {
    std::thread::scope(|sc| {
        for t in 0..2 {
            let q = &qs[t];
            sc.spawn(move || {
                let mut k = 0;
                for d in (t..DIRS).step_by(2) {
                    let dfd = open_dir(tree.as_fd(), &name('d', d));
                    for f in 0..FILES {
                        sync_one(
                            dfd.as_fd(),
                            &name('f', f),
                            q.as_fd(),
                            &name('q', k),
                            files[d][f],
                            false,
                        );
                        k += 1;
                    }
                    drop(dfd);
                    sync_one(
                        tree.as_fd(),
                        &name('d', d),
                        q.as_fd(),
                        &name('q', k),
                        dirs[d],
                        true,
                    );
                    k += 1;
                }
            });
        }
    });
}

/// Plain unlinking over two threads (for scale only).
fn plain_2t(tree: &OwnedFd) {
    std::thread::scope(|sc| {
        for t in 0..2 {
            sc.spawn(move || {
                for d in (t..DIRS).step_by(2) {
                    let dfd = open_dir(tree.as_fd(), &name('d', d));
                    for f in 0..FILES {
                        rustix::fs::unlinkat(&dfd, name('f', f).as_c_str(), AtFlags::empty())
                            .unwrap();
                    }
                    drop(dfd);
                    rustix::fs::unlinkat(tree, name('d', d).as_c_str(), AtFlags::REMOVEDIR)
                        .unwrap();
                }
            });
        }
    });
}

/// Five calls: the next entry's rename replaces the previous (verified)
/// quarantine name, which does the unlink. `hold`: the descriptors of a
/// directory's entries are closed together at its end.
fn overwrite_dirs(
    tree: &OwnedFd,
    q: &OwnedFd,
    files: &[Vec<u64>],
    dirs: &[u64],
    which: impl Iterator<Item = usize>,
    hold: bool,
) {
    let mut fds = Vec::with_capacity(FILES);
    for (k, d) in which.enumerate() {
        let dfd = open_dir(tree.as_fd(), &name('d', d));
        let mut prev: Option<OwnedFd> = None;
        for f in 0..FILES {
            rustix::fs::renameat_with(
                &dfd,
                name('f', f).as_c_str(),
                q,
                c"slot",
                RenameFlags::empty(),
            )
            .unwrap();
            if let Some(p) = prev.take() {
                let s = rustix::fs::statx(&p, c"", AtFlags::EMPTY_PATH, StatxFlags::NLINK).unwrap();
                assert_eq!(s.stx_nlink, 0);
                if hold {
                    fds.push(p);
                }
            }
            let fd = rustix::fs::openat(
                q,
                c"slot",
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .unwrap();
            let s = rustix::fs::statx(
                &fd,
                c"",
                AtFlags::EMPTY_PATH,
                StatxFlags::BASIC_STATS | StatxFlags::BTIME | StatxFlags::MNT_ID,
            )
            .unwrap();
            assert_eq!(s.stx_ino, files[d][f]);
            prev = Some(fd);
        }
        rustix::fs::unlinkat(q, c"slot", AtFlags::empty()).unwrap();
        drop(prev);
        fds.clear();
        drop(dfd);
        sync_one(
            tree.as_fd(),
            &name('d', d),
            q.as_fd(),
            &name('q', k),
            dirs[d],
            true,
        );
    }
}

fn overwrite_2t(tree: &OwnedFd, qs: &[OwnedFd; 2], files: &[Vec<u64>], dirs: &[u64]) {
    std::thread::scope(|sc| {
        for t in 0..2 {
            let q = &qs[t];
            sc.spawn(move || overwrite_dirs(tree, q, files, dirs, (t..DIRS).step_by(2), true));
        }
    });
}

/// The five calls of `overwrite` for files `fs` of one directory, through
/// quarantine slot `slot`; descriptors closed 16 at a time.
fn overwrite_run(
    dfd: BorrowedFd<'_>,
    q: BorrowedFd<'_>,
    slot: &std::ffi::CStr,
    fs: std::ops::Range<usize>,
    inos: &[u64],
    fds: &mut Vec<OwnedFd>,
) {
    let mut prev: Option<OwnedFd> = None;
    for f in fs {
        rustix::fs::renameat_with(dfd, name('f', f).as_c_str(), q, slot, RenameFlags::empty())
            .unwrap();
        if let Some(p) = prev.take() {
            let s = rustix::fs::statx(&p, c"", AtFlags::EMPTY_PATH, StatxFlags::NLINK).unwrap();
            assert_eq!(s.stx_nlink, 0);
            if fds.len() >= 16 {
                fds.clear();
            }
            fds.push(p);
        }
        let fd = rustix::fs::openat(
            q,
            slot,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let s = rustix::fs::statx(
            &fd,
            c"",
            AtFlags::EMPTY_PATH,
            StatxFlags::BASIC_STATS | StatxFlags::BTIME | StatxFlags::MNT_ID,
        )
        .unwrap();
        assert_eq!(s.stx_ino, inos[f]);
        prev = Some(fd);
    }
    rustix::fs::unlinkat(q, slot, AtFlags::empty()).unwrap();
    let s = rustix::fs::statx(
        prev.as_ref().unwrap(),
        c"",
        AtFlags::EMPTY_PATH,
        StatxFlags::NLINK,
    )
    .unwrap();
    assert_eq!(s.stx_nlink, 0);
}

/// The directories, deepest first, after all their files are gone.
fn remove_dirs(tree: &OwnedFd, q: &OwnedFd, dirs: &[u64]) {
    for d in 0..DIRS {
        sync_one(
            tree.as_fd(),
            &name('d', d),
            q.as_fd(),
            &name('q', d),
            dirs[d],
            true,
        );
    }
}

/// The cleaners' split before whole directories were shared out: each
/// directory's files halved, the second half handed to a helper thread and
/// waited for, then the directory removed.
fn overwrite_split(tree: &OwnedFd, qs: &[OwnedFd; 2], files: &[Vec<u64>], dirs: &[u64]) {
    let (jobs, inbox) = std::sync::mpsc::channel::<(OwnedFd, usize)>();
    let (reply, done) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|sc| {
        let q1 = &qs[1];
        sc.spawn(move || {
            let mut fds = Vec::with_capacity(16);
            for (dfd, d) in inbox {
                overwrite_run(
                    dfd.as_fd(),
                    q1.as_fd(),
                    c"slot",
                    FILES / 2..FILES,
                    &files[d],
                    &mut fds,
                );
                reply.send(()).unwrap();
            }
        });
        let mut fds = Vec::with_capacity(16);
        for d in 0..DIRS {
            let dfd = open_dir(tree.as_fd(), &name('d', d));
            jobs.send((rustix::io::fcntl_dupfd_cloexec(&dfd, 0).unwrap(), d))
                .unwrap();
            overwrite_run(
                dfd.as_fd(),
                qs[0].as_fd(),
                c"slot",
                0..FILES / 2,
                &files[d],
                &mut fds,
            );
            done.recv().unwrap();
            drop(dfd);
            sync_one(
                tree.as_fd(),
                &name('d', d),
                qs[0].as_fd(),
                &name('q', d),
                dirs[d],
                true,
            );
        }
        drop(jobs);
    });
}

/// Whole directories claimed one at a time by two threads (an atomic
/// counter), each through its own quarantine; one barrier, then the
/// directories.
fn overwrite_claim(tree: &OwnedFd, qs: &[OwnedFd; 2], files: &[Vec<u64>], dirs: &[u64]) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|sc| {
        let work = |q: &OwnedFd| {
            let mut fds = Vec::with_capacity(16);
            loop {
                let d = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if d >= DIRS {
                    break;
                }
                let dfd = open_dir(tree.as_fd(), &name('d', d));
                overwrite_run(
                    dfd.as_fd(),
                    q.as_fd(),
                    c"slot",
                    0..FILES,
                    &files[d],
                    &mut fds,
                );
            }
        };
        let q1 = &qs[1];
        sc.spawn(move || work(q1));
        work(&qs[0]);
    });
    remove_dirs(tree, &qs[0], dirs);
}

/// Two threads in a pipeline: the first moves every file into a fresh
/// quarantine name (the renames are serialised by the filesystem's rename
/// lock anyway), the second identifies, unlinks, proves and closes; a
/// directory's batch is handed over whole, into alternating quarantines so
/// the two never lock the same one.
fn pipeline(tree: &OwnedFd, qs: &[OwnedFd; 2], files: &[Vec<u64>], dirs: &[u64]) {
    let (jobs, inbox) = std::sync::mpsc::sync_channel::<(usize, usize)>(0);
    std::thread::scope(|sc| {
        sc.spawn(move || {
            let mut fds: Vec<OwnedFd> = Vec::with_capacity(16);
            for (d, which) in inbox {
                let q = qs[which].as_fd();
                for f in 0..FILES {
                    let qn = name('q', f);
                    let fd = rustix::fs::openat(
                        q,
                        &qn,
                        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .unwrap();
                    let s = rustix::fs::statx(
                        &fd,
                        c"",
                        AtFlags::EMPTY_PATH,
                        StatxFlags::BASIC_STATS | StatxFlags::BTIME | StatxFlags::MNT_ID,
                    )
                    .unwrap();
                    assert_eq!(s.stx_ino, files[d][f]);
                    rustix::fs::unlinkat(q, &qn, AtFlags::empty()).unwrap();
                    let s = rustix::fs::statx(&fd, c"", AtFlags::EMPTY_PATH, StatxFlags::NLINK)
                        .unwrap();
                    assert_eq!(s.stx_nlink, 0);
                    if fds.len() >= 16 {
                        fds.clear();
                    }
                    fds.push(fd);
                }
            }
        });
        for d in 0..DIRS {
            let dfd = open_dir(tree.as_fd(), &name('d', d));
            let q = qs[d % 2].as_fd();
            for f in 0..FILES {
                rustix::fs::renameat_with(
                    &dfd,
                    name('f', f).as_c_str(),
                    q,
                    name('q', f).as_c_str(),
                    RenameFlags::NOREPLACE,
                )
                .unwrap();
            }
            jobs.send((d, d % 2)).unwrap();
        }
        drop(jobs);
    });
    remove_dirs(tree, &qs[0], dirs);
}

/// The six calls, the descriptors of a directory's entries closed together
/// at its end.
fn held(tree: &OwnedFd, q: &OwnedFd, files: &[Vec<u64>], dirs: &[u64]) {
    let mut k = 0;
    let mut fds = Vec::with_capacity(FILES);
    for d in 0..DIRS {
        let dfd = open_dir(tree.as_fd(), &name('d', d));
        for f in 0..FILES {
            let qn = name('q', k);
            rustix::fs::renameat_with(
                &dfd,
                name('f', f).as_c_str(),
                q,
                &qn,
                RenameFlags::NOREPLACE,
            )
            .unwrap();
            let fd = rustix::fs::openat(
                q,
                &qn,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .unwrap();
            let s = rustix::fs::statx(
                &fd,
                c"",
                AtFlags::EMPTY_PATH,
                StatxFlags::BASIC_STATS | StatxFlags::BTIME | StatxFlags::MNT_ID,
            )
            .unwrap();
            assert_eq!(s.stx_ino, files[d][f]);
            rustix::fs::unlinkat(q, &qn, AtFlags::empty()).unwrap();
            let s = rustix::fs::statx(&fd, c"", AtFlags::EMPTY_PATH, StatxFlags::NLINK).unwrap();
            assert_eq!(s.stx_nlink, 0);
            fds.push(fd);
            k += 1;
        }
        fds.clear();
        drop(dfd);
        sync_one(
            tree.as_fd(),
            &name('d', d),
            q.as_fd(),
            &name('q', k),
            dirs[d],
            true,
        );
        k += 1;
    }
}

/// The six calls, each timed: where a protocol removal's time goes.
fn protocol_timed(tree: &OwnedFd, q: &OwnedFd, files: &[Vec<u64>]) -> [Duration; 7] {
    let mut t = [Duration::ZERO; 7];
    let mut k = 0;
    let mut lap = |i: usize, s: &mut Instant| {
        let n = Instant::now();
        t[i] += n - *s;
        *s = n;
    };
    for d in 0..DIRS {
        let dfd = open_dir(tree.as_fd(), &name('d', d));
        for f in 0..FILES {
            let (n, qn) = (name('f', f), name('q', k));
            let mut s = Instant::now();
            let st = rustix::fs::statx(
                &dfd,
                &n,
                AtFlags::SYMLINK_NOFOLLOW,
                StatxFlags::BASIC_STATS | StatxFlags::BTIME | StatxFlags::MNT_ID,
            )
            .unwrap();
            assert_eq!(st.stx_ino, files[d][f]);
            lap(0, &mut s);
            rustix::fs::renameat_with(&dfd, &n, q, &qn, RenameFlags::NOREPLACE).unwrap();
            lap(1, &mut s);
            let fd = rustix::fs::openat(
                q,
                &qn,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .unwrap();
            lap(2, &mut s);
            let st = rustix::fs::statx(
                &fd,
                c"",
                AtFlags::EMPTY_PATH,
                StatxFlags::BASIC_STATS | StatxFlags::BTIME | StatxFlags::MNT_ID,
            )
            .unwrap();
            assert_eq!(st.stx_ino, files[d][f]);
            lap(3, &mut s);
            rustix::fs::unlinkat(q, &qn, AtFlags::empty()).unwrap();
            lap(4, &mut s);
            let st = rustix::fs::statx(&fd, c"", AtFlags::EMPTY_PATH, StatxFlags::NLINK).unwrap();
            assert_eq!(st.stx_nlink, 0);
            lap(5, &mut s);
            drop(fd);
            lap(6, &mut s);
            k += 1;
        }
    }
    t
}

fn plain_timed(tree: &OwnedFd) -> Duration {
    let mut t = Duration::ZERO;
    for d in 0..DIRS {
        let dfd = open_dir(tree.as_fd(), &name('d', d));
        for f in 0..FILES {
            let n = name('f', f);
            let s = Instant::now();
            rustix::fs::unlinkat(&dfd, &n, AtFlags::empty()).unwrap();
            t += s.elapsed();
        }
    }
    t
}

/// The six calls with one quarantine name, reused for every entry.
fn one_name(tree: &OwnedFd, q: &OwnedFd, files: &[Vec<u64>], dirs: &[u64]) {
    for d in 0..DIRS {
        let dfd = open_dir(tree.as_fd(), &name('d', d));
        for f in 0..FILES {
            sync_one(
                dfd.as_fd(),
                &name('f', f),
                q.as_fd(),
                c"slot",
                files[d][f],
                false,
            );
        }
        drop(dfd);
        sync_one(
            tree.as_fd(),
            &name('d', d),
            q.as_fd(),
            c"slot",
            dirs[d],
            true,
        );
    }
}

/// Submits `entries`, waits for all, returns each result by index.
fn batch(ring: &mut IoUring, entries: &[squeue::Entry]) -> Vec<i32> {
    for e in entries {
        // SAFETY: every pointer in `e` (names, statx buffers) lives in the
        // caller's vectors, untouched until this function has reaped all
        // completions below.
        unsafe { ring.submission().push(e).expect("ring large enough") };
    }
    ring.submit_and_wait(entries.len()).unwrap();
    let mut out = vec![0; entries.len()];
    let mut got = 0;
    while got < entries.len() {
        for c in ring.completion() {
            out[c.user_data() as usize] = c.result();
            got += 1;
        }
        if got < entries.len() {
            ring.submit_and_wait(1).unwrap();
        }
    }
    out
}

fn uring_dir(
    ring: &mut IoUring,
    parent: RawFd,
    names: &[CString],
    q: RawFd,
    qnames: &[CString],
    inos: &[u64],
    dir: bool,
) {
    let n = names.len();
    let rename: Vec<_> = (0..n)
        .map(|i| {
            opcode::RenameAt::new(
                types::Fd(parent),
                names[i].as_ptr(),
                types::Fd(q),
                qnames[i].as_ptr(),
            )
            .flags(libc::RENAME_NOREPLACE)
            .build()
            .user_data(i as u64)
        })
        .collect();
    assert!(batch(ring, &rename).iter().all(|&r| r == 0));
    let open: Vec<_> = (0..n)
        .map(|i| {
            opcode::OpenAt::new(types::Fd(q), qnames[i].as_ptr())
                .flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .build()
                .user_data(i as u64)
        })
        .collect();
    let fds = batch(ring, &open);
    assert!(fds.iter().all(|&fd| fd >= 0));
    // SAFETY: `statx` is plain old data; all-zero is a valid value.
    let mut bufs: Vec<libc::statx> = vec![unsafe { std::mem::zeroed() }; n];
    let stat: Vec<_> = (0..n)
        .map(|i| {
            opcode::Statx::new(
                types::Fd(fds[i]),
                c"".as_ptr(),
                (&mut bufs[i] as *mut libc::statx).cast(),
            )
            .flags(libc::AT_EMPTY_PATH)
            .mask(libc::STATX_BASIC_STATS | libc::STATX_BTIME | libc::STATX_MNT_ID)
            .build()
            .user_data(i as u64)
        })
        .collect();
    assert!(batch(ring, &stat).iter().all(|&r| r == 0));
    assert!((0..n).all(|i| bufs[i].stx_ino == inos[i]));
    let flags = if dir { libc::AT_REMOVEDIR } else { 0 };
    let unlink: Vec<_> = (0..n)
        .map(|i| {
            opcode::UnlinkAt::new(types::Fd(q), qnames[i].as_ptr())
                .flags(flags)
                .build()
                .user_data(i as u64)
        })
        .collect();
    assert!(batch(ring, &unlink).iter().all(|&r| r == 0));
    let stat: Vec<_> = (0..n)
        .map(|i| {
            opcode::Statx::new(
                types::Fd(fds[i]),
                c"".as_ptr(),
                (&mut bufs[i] as *mut libc::statx).cast(),
            )
            .flags(libc::AT_EMPTY_PATH)
            .mask(libc::STATX_NLINK)
            .build()
            .user_data(i as u64)
        })
        .collect();
    assert!(batch(ring, &stat).iter().all(|&r| r == 0));
    assert!(bufs.iter().all(|b| b.stx_nlink == 0));
    let close: Vec<_> = (0..n)
        .map(|i| {
            opcode::Close::new(types::Fd(fds[i]))
                .build()
                .user_data(i as u64)
        })
        .collect();
    assert!(batch(ring, &close).iter().all(|&r| r == 0));
}

fn uring(ring: &mut IoUring, tree: &OwnedFd, q: &OwnedFd, files: &[Vec<u64>], dirs: &[u64]) {
    let fnames: Vec<CString> = (0..FILES).map(|f| name('f', f)).collect();
    let mut k = 0;
    for d in 0..DIRS {
        let dfd = open_dir(tree.as_fd(), &name('d', d));
        let qnames: Vec<CString> = (k..k + FILES).map(|i| name('q', i)).collect();
        k += FILES;
        uring_dir(
            ring,
            dfd.as_raw_fd(),
            &fnames,
            q.as_raw_fd(),
            &qnames,
            &files[d],
            false,
        );
    }
    let dnames: Vec<CString> = (0..DIRS).map(|d| name('d', d)).collect();
    let qnames: Vec<CString> = (k..k + DIRS).map(|i| name('q', i)).collect();
    uring_dir(
        ring,
        tree.as_raw_fd(),
        &dnames,
        q.as_raw_fd(),
        &qnames,
        dirs,
        true,
    );
}

/// CPU time of the whole process (all threads), user and system.
fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

const VARIANTS: [(&str, &str); 15] = [
    ("plain", "plain unlinkat (rm -rf's calls)"),
    ("unproven", "moved and checked, unproven (3 calls)"),
    ("protocol", "protocol, 6 calls per entry"),
    ("same_dir", "protocol, quarantine name in the same dir"),
    ("uring", "protocol, io_uring batched per directory"),
    ("held", "protocol, closes at the end of each dir"),
    ("overwrite", "protocol, rename replaces the last (5 calls)"),
    ("protocol_2t", "protocol, two threads"),
    ("plain_2t", "plain unlinkat, two threads"),
    (
        "overwrite_held",
        "protocol, 5 calls, closes at the end of each dir",
    ),
    (
        "overwrite_2t",
        "protocol, 5 calls, closes held, two threads",
    ),
    ("one_name", "protocol, one quarantine name reused"),
    (
        "overwrite_split",
        "protocol, 5 calls, each dir halved over 2 threads",
    ),
    (
        "overwrite_claim",
        "protocol, 5 calls, whole dirs claimed by 2 threads",
    ),
    ("pipeline", "protocol, 6 calls, mover + destroyer pipeline"),
];

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // `REMOVAL_BENCH_ONLY=plain,protocol`: a subset of the variants.
    let only: Option<Vec<String>> = std::env::var("REMOVAL_BENCH_ONLY")
        .ok()
        .map(|s| s.split(',').map(str::to_owned).collect());
    let chosen: Vec<usize> = (0..VARIANTS.len())
        .filter(|&i| {
            only.as_ref()
                .is_none_or(|o| o.iter().any(|n| n == VARIANTS[i].0))
        })
        .collect();
    let rounds = rounds();
    if std::env::args().any(|a| a == "--calls") {
        // Per call, files only, summed over the tree; median of the rounds.
        let labels = [
            "statx by name (verify)",
            "renameat2 NOREPLACE",
            "openat O_PATH",
            "statx fd (identity)",
            "unlinkat in quarantine",
            "statx fd (nlink)",
            "close",
        ];
        let mut per: Vec<Vec<Duration>> = vec![Vec::new(); 8];
        for _ in 0..rounds {
            let tmp = tempfile::tempdir_in(base()).unwrap();
            let (tree, q, files, _) = build(tmp.path());
            for (i, d) in protocol_timed(&tree, &q, &files).into_iter().enumerate() {
                per[i].push(d);
            }
            let tmp = tempfile::tempdir_in(base()).unwrap();
            let (tree, _, _, _) = build(tmp.path());
            per[7].push(plain_timed(&tree));
        }
        let n = (DIRS * FILES) as f64;
        for (i, l) in labels.iter().chain(["plain unlinkat"].iter()).enumerate() {
            let m = median(per[i].clone());
            println!("{l:<28} {:>7.2} us/file", m.as_secs_f64() * 1e6 / n);
        }
        return;
    }
    let mut ring = IoUring::new(256).expect("io_uring");
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); VARIANTS.len()];
    let mut cpu: Vec<Vec<Duration>> = vec![Vec::new(); VARIANTS.len()];
    for _ in 0..rounds {
        for &which in &chosen {
            let tmp = tempfile::tempdir_in(base()).unwrap();
            let (tree, q, files, dirs) = build(tmp.path());
            std::fs::create_dir(tmp.path().join("q1")).unwrap();
            let q1 = rustix::fs::open(
                tmp.path().join("q1"),
                OFlags::RDONLY | OFlags::DIRECTORY,
                Mode::empty(),
            )
            .unwrap();
            let qs = [q, q1];
            let c = cpu_time();
            let t = Instant::now();
            match VARIANTS[which].0 {
                "plain" => plain(&tree),
                "unproven" => unproven(&tree, &qs[0], &files, &dirs),
                "protocol" => protocol(&tree, &qs[0], &files, &dirs),
                "same_dir" => same_dir(&tree, &files, &dirs),
                "uring" => uring(&mut ring, &tree, &qs[0], &files, &dirs),
                "held" => held(&tree, &qs[0], &files, &dirs),
                "overwrite" => overwrite_dirs(&tree, &qs[0], &files, &dirs, 0..DIRS, false),
                "overwrite_held" => overwrite_dirs(&tree, &qs[0], &files, &dirs, 0..DIRS, true),
                "overwrite_2t" => overwrite_2t(&tree, &qs, &files, &dirs),
                "protocol_2t" => protocol_2t(&tree, &qs, &files, &dirs),
                "plain_2t" => plain_2t(&tree),
                "one_name" => one_name(&tree, &qs[0], &files, &dirs),
                "overwrite_split" => overwrite_split(&tree, &qs, &files, &dirs),
                "overwrite_claim" => overwrite_claim(&tree, &qs, &files, &dirs),
                "pipeline" => pipeline(&tree, &qs, &files, &dirs),
                other => unreachable!("{other}"),
            }
            times[which].push(t.elapsed());
            cpu[which].push(cpu_time() - c);
        }
    }
    let entries = (DIRS * FILES + DIRS) as f64;
    println!(
        "{DIRS}×{FILES} files in {}, median of {rounds}",
        base().display()
    );
    println!(
        "{:<50} {:>9} {:>9} {:>9} {:>8} {:>9}",
        "remover", "wall ms", "us/entry", "vs plain", "cpu ms", "vs plain"
    );
    let plain_m = (!times[0].is_empty()).then(|| median(times[0].clone()));
    let plain_c = (!cpu[0].is_empty()).then(|| median(cpu[0].clone()));
    for &which in &chosen {
        let d = median(times[which].clone());
        let c = median(cpu[which].clone());
        let vs = plain_m.map_or(f64::NAN, |p| d.as_secs_f64() / p.as_secs_f64());
        let vc = plain_c.map_or(f64::NAN, |p| c.as_secs_f64() / p.as_secs_f64());
        println!(
            "{:<50} {:>9.2} {:>9.2} {:>8.2}x {:>8.1} {:>8.2}x",
            VARIANTS[which].1,
            d.as_secs_f64() * 1e3,
            d.as_secs_f64() * 1e6 / entries,
            vs,
            c.as_secs_f64() * 1e3,
            vc
        );
    }
}
