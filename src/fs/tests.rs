//! `fs` against real filesystems: the quarantine protocol's every outcome
//! (the racer's moves made deterministically, from inside the protocol's
//! own window where needed), mount fencing with a tmpfs mounted inside the
//! tree and a bind mount of the same filesystem.
//!
//! These delete files, so as root the body runs in a private mount
//! namespace where only its scratch directory is writable.

#[path = "../../tests/support/sandbox.rs"]
mod sandbox;

use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{CWD, Mode, RenameFlags};

use super::*;

fn dir(p: &Path) -> OwnedFd {
    open_configured_dir(p).unwrap()
}

fn pin(p: &Path) -> OwnedFd {
    rustix::fs::open(
        p,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

fn nlink(fd: &OwnedFd) -> u64 {
    nlink_fd(fd.as_fd()).unwrap()
}

fn exchange(a: &Path, b: &Path) {
    rustix::fs::renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).unwrap();
}

fn same(registered: Stat) -> impl FnOnce(&Stat) -> Result<(), ()> {
    move |seen| {
        (seen.same_object(&registered) && seen.btime == registered.btime)
            .then_some(())
            .ok_or(())
    }
}

#[test]
fn against_real_filesystems() {
    let base = if Path::new("/dev/shm").is_dir() {
        Path::new("/dev/shm")
    } else {
        Path::new("/tmp")
    };
    sandbox::run_guarded("fs::tests::against_real_filesystems_body", base);
}

#[test]
#[ignore = "run by against_real_filesystems, in a mount namespace as root"]
fn against_real_filesystems_body() {
    let scratch = sandbox::scratch();
    quarantine_outcomes(&scratch);
    deferred_outcomes(&scratch);
    if sandbox::is_root() {
        mounts_are_fenced(&scratch);
    } else {
        skipped!("mount fencing: mounting needs root");
    }
}

fn quarantine_outcomes(base: &Path) {
    let t = base.join("tree");
    let o = base.join("outside");
    let qp = base.join("q");
    for d in [&t, &o, &qp] {
        std::fs::create_dir(d).unwrap();
    }
    let tree = dir(&t);
    let mut q = Quarantine::new(dir(&qp));
    let stat = |name: &str| stat_at(tree.as_fd(), &CString::new(name).unwrap()).unwrap();

    // The registered file: destroyed, proven by the pinned descriptor.
    std::fs::write(t.join("a"), b"ours").unwrap();
    let a = stat("a");
    let pinned = pin(&t.join("a"));
    assert_eq!(
        q.remove(tree.as_fd(), c"a", FileKind::File, same(a)),
        Ok(Removal::Destroyed)
    );
    assert_eq!(nlink(&pinned), 0);
    assert!(!t.join("a").exists());
    assert_eq!(std::fs::read_dir(&qp).unwrap().count(), 0);

    // Gone already.
    assert_eq!(
        q.remove(tree.as_fd(), c"a", FileKind::File, same(a)),
        Ok(Removal::Missing)
    );

    // Exchanged with an outside file before removal: the outside inode is
    // put back where it was taken from, and nothing is destroyed.
    std::fs::write(t.join("b"), b"ours").unwrap();
    std::fs::write(o.join("user"), b"user").unwrap();
    let b = stat("b");
    let user = pin(&o.join("user"));
    exchange(&t.join("b"), &o.join("user"));
    assert_eq!(
        q.remove(tree.as_fd(), c"b", FileKind::File, same(b)),
        Ok(Removal::Restored(Some(())))
    );
    assert_eq!(nlink(&user), 1);
    assert_eq!(std::fs::read(t.join("b")).unwrap(), b"user");
    exchange(&t.join("b"), &o.join("user"));

    // A symlink where a file was registered: the type alone refuses it.
    std::os::unix::fs::symlink(o.join("user"), t.join("l")).unwrap();
    assert_eq!(
        q.remove(tree.as_fd(), c"l", FileKind::File, |_| Ok::<(), ()>(())),
        Ok(Removal::Restored(None))
    );
    assert!(t.join("l").symlink_metadata().unwrap().is_symlink());
    assert_eq!(std::fs::read(o.join("user")).unwrap(), b"user");

    // Foreign, and its name retaken while it was out: kept in quarantine.
    exchange(&t.join("b"), &o.join("user"));
    let tb = t.join("b");
    let kept = q.remove(tree.as_fd(), c"b", FileKind::File, |_seen| {
        std::fs::write(&tb, b"new").unwrap();
        Err(())
    });
    let Ok(Removal::Kept(Some(()), qname)) = kept else {
        panic!("{kept:?}")
    };
    assert_eq!(nlink(&user), 1, "kept, not destroyed");
    let in_q = qp.join(qname.to_str().unwrap());
    assert_eq!(std::fs::read(&in_q).unwrap(), b"user");
    std::fs::rename(&in_q, o.join("user")).unwrap();
    std::fs::remove_file(&tb).unwrap();

    // The remaining window, taken on purpose: a racer aiming at the
    // quarantine swaps its own file in between the check and the unlink.
    // Its file is lost, and the loss is reported, never a success.
    std::fs::write(t.join("c"), b"ours").unwrap();
    std::fs::write(o.join("bait"), b"bait").unwrap();
    let c = stat("c");
    let ours = pin(&t.join("c"));
    let bait = pin(&o.join("bait"));
    let (qdir, bait_path) = (qp.clone(), o.join("bait"));
    let check = same(c);
    let r = q.remove(tree.as_fd(), c"c", FileKind::File, move |seen| {
        let verdict = check(seen);
        let arrived = std::fs::read_dir(&qdir).unwrap().next().unwrap().unwrap();
        exchange(&arrived.path(), &bait_path);
        verdict
    });
    assert_eq!(r, Ok(Removal::Tampered));
    assert_eq!(nlink(&ours), 1, "the registered inode survives");
    assert_eq!(nlink(&bait), 0, "the window's cost, reported");

    // A hard link the user keeps to a registered file: only the tree's name
    // goes; one link less is the proof.
    std::fs::write(t.join("h"), b"ours").unwrap();
    std::fs::hard_link(t.join("h"), o.join("kept")).unwrap();
    let h = stat("h");
    assert_eq!(
        q.remove(tree.as_fd(), c"h", FileKind::File, same(h)),
        Ok(Removal::Destroyed)
    );
    assert_eq!(std::fs::read(o.join("kept")).unwrap(), b"ours");

    // A directory that is not empty any more: put back whole.
    std::fs::create_dir(t.join("d")).unwrap();
    let d = stat("d");
    std::fs::write(t.join("d/late"), b"late").unwrap();
    assert_eq!(
        q.remove(tree.as_fd(), c"d", FileKind::Dir, same(d)),
        Ok(Removal::NotEmpty(false))
    );
    assert_eq!(std::fs::read(t.join("d/late")).unwrap(), b"late");
    std::fs::remove_file(t.join("d/late")).unwrap();
    let dpin = pin(&t.join("d"));
    assert_eq!(
        q.remove(tree.as_fd(), c"d", FileKind::Dir, same(d)),
        Ok(Removal::Destroyed)
    );
    assert_eq!(nlink(&dpin), 0);
    assert_eq!(std::fs::read_dir(&qp).unwrap().count(), 0);
}

/// The one entry in the quarantine directory `qp`.
fn only_entry(qp: &Path) -> std::path::PathBuf {
    let mut all: Vec<_> = std::fs::read_dir(qp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(all.len(), 1, "{all:?}");
    all.pop().unwrap()
}

/// Files whose destruction is deferred to the next file's move.
fn deferred_outcomes(base: &Path) {
    let t = base.join("dtree");
    let o = base.join("doutside");
    let qp = base.join("dq");
    for d in [&t, &o, &qp] {
        std::fs::create_dir(d).unwrap();
    }
    let tree = dir(&t);
    let mut q = Quarantine::new(dir(&qp));
    let stat = |name: &str| stat_at(tree.as_fd(), &CString::new(name).unwrap()).unwrap();
    let file = |name: &str| {
        std::fs::write(t.join(name), b"ours").unwrap();
        (stat(name), pin(&t.join(name)))
    };

    // The first file waits in the quarantine; the second one's move
    // destroys it, and the held descriptor proves it.
    let (a1, a1_pin) = file("a1");
    let (a2, a2_pin) = file("a2");
    assert_eq!(
        q.remove_file(7, tree.as_fd(), c"a1", same(a1)),
        Ok(Removal::Pending)
    );
    assert!(!t.join("a1").exists());
    assert_eq!(nlink(&a1_pin), 1, "pending, not destroyed yet");
    assert_eq!(q.settled().count(), 0);
    assert_eq!(
        q.remove_file(8, tree.as_fd(), c"a2", same(a2)),
        Ok(Removal::Pending)
    );
    assert_eq!(q.settled().collect::<Vec<_>>(), [(7, Settled::Destroyed)]);
    assert_eq!(nlink(&a1_pin), 0);
    assert_eq!(nlink(&a2_pin), 1);
    q.flush();
    assert_eq!(q.settled().collect::<Vec<_>>(), [(8, Settled::Destroyed)]);
    assert_eq!(nlink(&a2_pin), 0);
    assert_eq!(std::fs::read_dir(&qp).unwrap().count(), 0);

    // A name gone meanwhile: the pending file stays pending.
    let (_, b1_pin) = file("b1");
    std::fs::hard_link(t.join("b1"), t.join("b2")).unwrap();
    let b1 = stat_at(tree.as_fd(), c"b1").unwrap();
    assert_eq!(b1.nlink, 2);
    assert_eq!(
        q.remove_file(0, tree.as_fd(), c"b1", same(b1)),
        Ok(Removal::Pending)
    );
    assert_eq!(
        q.remove_file(1, tree.as_fd(), c"gone", same(b1)),
        Ok(Removal::Missing)
    );
    assert_eq!(q.settled().count(), 0);

    // The next name is another link of the pending inode: the rename does
    // nothing at all. Not destroyed, so never reported as such, even when
    // the extra link goes at the same time and the count alone would say
    // "one link less".
    let (other, _) = file("other");
    let tb2 = t.join("b2");
    let r = q.remove_file(2, tree.as_fd(), c"b2", |seen| {
        std::fs::remove_file(&tb2).unwrap();
        same(other)(seen)
    });
    assert_eq!(r, Ok(Removal::Restored(Some(()))));
    assert_eq!(q.settled().collect::<Vec<_>>(), [(0, Settled::Tampered)]);
    assert_eq!(nlink(&b1_pin), 1, "the pending inode survives, at b2");
    std::fs::remove_file(t.join("b2")).unwrap();
    std::fs::remove_file(t.join("other")).unwrap();
    assert_eq!(std::fs::read_dir(&qp).unwrap().count(), 0);

    // A racer aiming at the quarantine swaps its own file in for the
    // pending one: the next move destroys the racer's file (the window's
    // cost), and the proof reports it.
    let (c1, c1_pin) = file("c1");
    let (c2, c2_pin) = file("c2");
    std::fs::write(o.join("bait"), b"bait").unwrap();
    let bait = pin(&o.join("bait"));
    assert_eq!(
        q.remove_file(0, tree.as_fd(), c"c1", same(c1)),
        Ok(Removal::Pending)
    );
    exchange(&only_entry(&qp), &o.join("bait"));
    assert_eq!(
        q.remove_file(1, tree.as_fd(), c"c2", same(c2)),
        Ok(Removal::Pending)
    );
    assert_eq!(q.settled().collect::<Vec<_>>(), [(0, Settled::Tampered)]);
    assert_eq!(nlink(&bait), 0, "the window's cost, reported");
    assert_eq!(nlink(&c1_pin), 1, "the registered inode survives");
    q.flush();
    assert_eq!(q.settled().collect::<Vec<_>>(), [(1, Settled::Destroyed)]);
    assert_eq!(nlink(&c2_pin), 0);

    // A foreign file arriving over the pending name: the pending file is
    // destroyed (it was the registered one), the foreign one put back.
    let (d1, d1_pin) = file("d1");
    let (d2, _) = file("d2");
    std::fs::write(o.join("user"), b"user").unwrap();
    let user = pin(&o.join("user"));
    assert_eq!(
        q.remove_file(0, tree.as_fd(), c"d1", same(d1)),
        Ok(Removal::Pending)
    );
    exchange(&t.join("d2"), &o.join("user"));
    assert_eq!(
        q.remove_file(1, tree.as_fd(), c"d2", same(d2)),
        Ok(Removal::Restored(Some(())))
    );
    assert_eq!(q.settled().collect::<Vec<_>>(), [(0, Settled::Destroyed)]);
    assert_eq!(nlink(&d1_pin), 0);
    assert_eq!(nlink(&user), 1);
    assert_eq!(std::fs::read(t.join("d2")).unwrap(), b"user");
    assert_eq!(std::fs::read_dir(&qp).unwrap().count(), 0);
    drop(q);
}

fn mounts_are_fenced(base: &Path) {
    let t = base.join("mounts");
    std::fs::create_dir_all(t.join("tmpfs")).unwrap();
    std::fs::create_dir_all(t.join("src")).unwrap();
    std::fs::create_dir_all(t.join("bind")).unwrap();
    std::fs::create_dir_all(base.join("mq")).unwrap();
    rustix::mount::mount(
        "tmpfs",
        t.join("tmpfs"),
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        c"size=1m",
    )
    .unwrap();
    rustix::mount::mount_bind(t.join("src"), t.join("bind")).unwrap();
    let tree = dir(&t);
    let parent = stat_fd(tree.as_fd()).unwrap();

    // A tmpfs mounted inside the tree: another device and a mount root.
    let tm = stat_at(tree.as_fd(), c"tmpfs").unwrap();
    assert_ne!(tm.dev, parent.dev);
    assert_eq!(tm.mount_root, Some(true));
    assert!(!tm.on_mount_of(&parent));

    // A bind mount of the same filesystem: same device, another mount.
    let src = stat_at(tree.as_fd(), c"src").unwrap();
    let bind = stat_at(tree.as_fd(), c"bind").unwrap();
    assert_eq!(bind.dev, parent.dev);
    assert_eq!((bind.dev, bind.ino), (src.dev, src.ino));
    assert_ne!(bind.mount, parent.mount);
    assert!(src.on_mount_of(&parent));
    assert!(!bind.on_mount_of(&parent));
    assert!(
        !bind.same_object(&src),
        "the same inode seen through another mount"
    );

    // Neither can be moved out of the tree: a mount point is not renamed.
    let mut q = Quarantine::new(dir(&base.join("mq")));
    for name in [c"tmpfs", c"bind"] {
        assert_eq!(
            q.remove(tree.as_fd(), name, FileKind::Dir, |_| Ok::<(), ()>(())),
            Ok(Removal::Mount),
            "{name:?}"
        );
    }
    assert!(t.join("tmpfs").is_dir() && t.join("bind").is_dir());

    // A quarantine on another mount: the rename cannot cross it.
    std::fs::write(t.join("f"), b"f").unwrap();
    let mut far = Quarantine::new(dir(&t.join("tmpfs")));
    assert_eq!(
        far.remove(tree.as_fd(), c"f", FileKind::File, |_| Ok::<(), ()>(())),
        Ok(Removal::Mount)
    );
    assert!(t.join("f").exists());
}
