//! Running a deleting test as root safely: the test body (an `#[ignore]`d
//! test of the same binary) is re-executed inside `unshare -m` with every
//! mount but its scratch directory remounted read-only, and the body checks
//! that before it deletes anything. Unprivileged, the body runs without a
//! namespace: it can then delete only what its user may.
//!
//! Include with `#[path = "../support/sandbox.rs"] mod sandbox;`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The scratch directory handed to the body.
pub const SCRATCH_ENV: &str = "CUSTODIAN_TEST_SCRATCH";

/// The mount a `_keeping` wrapper kept writable besides the scratch (unset
/// for none), so that helpers shared by bodies ([`tempdir`]) check the
/// namespace the wrapper asked for.
pub const KEEP_ENV: &str = "CUSTODIAN_TEST_KEEP";

/// Remounts every mount read-only except `$1` (the scratch dir, bound onto
/// itself), `$2` (a mount the body needs writable, e.g. the cgroup v2
/// hierarchy; empty for none) and `/proc` (procfs holds no file a cleaner
/// could delete, and an isolated launch maps its user namespace's ids
/// through it), then runs the body.
const NAMESPACE_SCRIPT: &str = r#"
set -e
mount --bind "$1" "$1"
for m in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do
  case "$m" in "$1"|"$2"|/proc) ;; *) mount -o remount,bind,ro "$m" 2>/dev/null || true ;; esac
done
shift 2
exec "$@"
"#;

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Runs the `#[ignore]`d test `inner` of this test binary with a fresh
/// scratch directory below `base`: as root inside a private mount namespace
/// where only the scratch directory is writable, else directly. Returns the
/// body's output, or `None` (after printing why) when it cannot run here.
///
/// # Panics
///
/// If the body fails or did not run.
pub fn run_guarded(inner: &str, base: &Path) -> Option<String> {
    run_guarded_keeping(inner, base, None)
}

/// Runs the `#[ignore]`d body `inner` (its full path) of this test binary
/// as the unprivileged user named by `CUSTODIAN_TEST_USER` (`runuser`),
/// from a copy of the binary in a directory the user owns, which is also
/// its `HOME`, `TMPDIR` and the body's scratch: an unprivileged body
/// deletes only what its user may, so it needs no namespace. The body must
/// not answer "skipped".
///
/// # Panics
///
/// Without `CUSTODIAN_TEST_USER`, or if the body fails or did not run.
pub fn run_as_user(inner: &str) -> String {
    let user = std::env::var("CUSTODIAN_TEST_USER").expect("CUSTODIAN_TEST_USER");
    let dir = tempfile::Builder::new()
        .prefix("custodian-user-")
        .tempdir_in("/var/tmp")
        .expect("scratch dir");
    let copy = dir.path().join("tests");
    std::fs::copy(std::env::current_exe().expect("test binary"), &copy).expect("copy");
    let st = Command::new("chown")
        .args(["-R", &user])
        .arg(dir.path())
        .status()
        .expect("chown");
    assert!(st.success());
    let out = Command::new("runuser")
        .args(["-u", &user, "--"])
        .arg(&copy)
        .args(["--exact", inner, "--ignored", "--nocapture"])
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .env("TMPDIR", dir.path())
        .env(SCRATCH_ENV, dir.path())
        .output()
        .expect("runuser");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("test result: ok. 1 passed"), "{text}");
    assert!(!text.contains("skipped"), "{text}");
    text
}

/// [`run_guarded`], also keeping the mount at `keep` writable (the body
/// checks with [`scratch_keeping`]).
///
/// # Panics
///
/// If the body fails or did not run.
pub fn run_guarded_keeping(inner: &str, base: &Path, keep: Option<&Path>) -> Option<String> {
    let text = run_in_namespace(&["--exact", inner], base, keep)?;
    assert!(text.contains("1 passed"), "the body did not run: {text}");
    Some(text)
}

/// [`run_guarded`] for every `#[ignore]`d test whose name contains
/// `filter` (e.g. a module path `basics::`).
///
/// # Panics
///
/// If any of them fails, or none ran.
pub fn run_guarded_filter(filter: &str, base: &Path) -> Option<String> {
    let text = run_in_namespace(&[filter], base, None)?;
    assert!(
        text.contains("test result: ok.") && !text.contains(" 0 passed"),
        "the bodies did not run: {text}"
    );
    Some(text)
}

/// [`run_guarded_filter`], also keeping the mount at `keep` writable (the
/// bodies check with [`scratch_keeping`]).
///
/// # Panics
///
/// As [`run_guarded_filter`].
pub fn run_guarded_filter_keeping(
    filter: &str,
    base: &Path,
    keep: Option<&Path>,
) -> Option<String> {
    let text = run_in_namespace(&[filter], base, keep)?;
    assert!(
        text.contains("test result: ok.") && !text.contains(" 0 passed"),
        "the bodies did not run: {text}"
    );
    Some(text)
}

fn run_in_namespace(select: &[&str], base: &Path, keep: Option<&Path>) -> Option<String> {
    let scratch = tempfile::tempdir_in(base).expect("scratch dir");
    let exe = std::env::current_exe().expect("test binary");
    let mut test_args: Vec<&str> = select.to_vec();
    test_args.extend(["--include-ignored", "--nocapture", "--test-threads=1"]);
    let mut cmd;
    if is_root() {
        let probe = Command::new("unshare")
            .args(["-m", "--propagation", "private", "true"])
            .status();
        if !probe.is_ok_and(|s| s.success()) {
            skipped!("running as root and cannot create a mount namespace (unshare -m)");
            return None;
        }
        cmd = Command::new("unshare");
        cmd.args([
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            NAMESPACE_SCRIPT,
            "sh",
        ])
        .arg(scratch.path())
        .arg(keep.unwrap_or(Path::new("")))
        .arg(&exe);
    } else {
        cmd = Command::new(&exe);
    }
    cmd.env_remove(KEEP_ENV);
    if let Some(keep) = keep {
        cmd.env(KEEP_ENV, keep);
    }
    let out = cmd
        .args(&test_args)
        .env(SCRATCH_ENV, scratch.path())
        // Whatever the bodies create in "the temp dir" lands in the scratch.
        .env("TMPDIR", scratch.path())
        .output()
        .expect("run the body");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    Some(text)
}

/// A temporary directory in the scratch directory when run by
/// [`run_guarded`] or one of its variants (as root: after checking that
/// everything else but the mount the wrapper kept is read-only), else, not
/// as root, in the OS temp dir.
///
/// # Panics
///
/// As root outside [`run_guarded`]'s namespace: a body that deletes must
/// not run there unguarded (e.g. by `--include-ignored` without its
/// wrapper).
pub fn tempdir() -> tempfile::TempDir {
    match std::env::var_os(SCRATCH_ENV) {
        Some(_) => tempfile::tempdir_in(scratch_as_run()),
        None => {
            assert!(
                !is_root(),
                "a deleting body runs as root only by run_guarded, in a mount namespace"
            );
            tempfile::tempdir()
        }
    }
    .expect("tempdir")
}

/// In the body: [`scratch_keeping`] with the mount its wrapper kept
/// writable ([`KEEP_ENV`]), if any.
///
/// # Panics
///
/// As [`scratch`].
pub fn scratch_as_run() -> PathBuf {
    let keep = std::env::var_os(KEEP_ENV).map(PathBuf::from);
    scratch_keeping(keep.as_deref())
}

/// In the body: the scratch directory, after checking that (as root) every
/// other visible mount is read-only.
///
/// # Panics
///
/// If not run by [`run_guarded`], or if another mount is writable.
pub fn scratch() -> PathBuf {
    scratch_keeping(None)
}

/// [`scratch`] for a body run by [`run_guarded_keeping`]: the mount at
/// `keep` may be writable too.
///
/// # Panics
///
/// As [`scratch`].
pub fn scratch_keeping(keep: Option<&Path>) -> PathBuf {
    let scratch = PathBuf::from(std::env::var_os(SCRATCH_ENV).expect("run by run_guarded"));
    if is_root() {
        only_writable(&scratch, keep).unwrap();
    }
    scratch
}

/// Every visible mount but `scratch` (and mounts the body made beneath it)
/// is read-only (of mounts stacked on one mount point, the last listed is
/// the visible one).
pub fn only_scratch_writable(scratch: &Path) -> Result<(), String> {
    only_writable(scratch, None)
}

/// [`only_scratch_writable`], except that the mount at `keep` may be
/// writable too.
pub fn only_writable(scratch: &Path, keep: Option<&Path>) -> Result<(), String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
    let mut visible = std::collections::BTreeMap::new();
    for line in info.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        visible.insert(f[4].to_owned(), f[5].to_owned());
    }
    for (mount, opts) in visible {
        let m = Path::new(&mount);
        if m.starts_with(scratch) || Some(m) == keep || m == Path::new("/proc") {
            continue;
        }
        if !opts.split(',').any(|o| o == "ro") {
            return Err(format!("{mount} is writable"));
        }
    }
    Ok(())
}

/// Mounts a fresh ext4 image (made with `mkfs.ext4`, loop-mounted) at
/// `dir/ext4` and returns that directory, or `None` (after printing why).
/// Only inside [`run_guarded`]'s namespace: the mount vanishes with it.
pub fn ext4_in(dir: &Path) -> Option<PathBuf> {
    if !is_root() {
        skipped!("ext4: loop mounts need root");
        return None;
    }
    let img = dir.join("ext4.img");
    let mnt = dir.join("ext4");
    std::fs::create_dir(&mnt).ok()?;
    let f = std::fs::File::create(&img).ok()?;
    f.set_len(256 << 20).ok()?;
    drop(f);
    let mkfs = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&img)
        .output();
    match mkfs {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            skipped!(
                "ext4: mkfs.ext4 failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            return None;
        }
        Err(e) => {
            skipped!("ext4: no mkfs.ext4 ({e})");
            return None;
        }
    }
    let mount = Command::new("mount")
        .args(["-o", "loop"])
        .arg(&img)
        .arg(&mnt)
        .output();
    match mount {
        Ok(o) if o.status.success() => Some(mnt),
        Ok(o) => {
            skipped!(
                "ext4: loop mount failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            None
        }
        Err(e) => {
            skipped!("ext4: no mount ({e})");
            None
        }
    }
}
