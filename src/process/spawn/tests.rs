//! Real children, real cgroups: each test starts programs through the
//! spawner and checks what the child saw.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::pipe::{PipeFlags, pipe_with};
use rustix::process::{WaitId, WaitIdOptions, waitid};

use super::{SpawnError, SpawnSpec, Spawned, Stage, spawn, supported};

fn cs(s: impl Into<Vec<u8>>) -> CString {
    CString::new(s).unwrap()
}

fn host_ok() -> bool {
    if supported() {
        true
    } else {
        skipped!("clone3 with CLONE_INTO_CGROUP is unavailable on this host");
        false
    }
}

fn dev_null() -> OwnedFd {
    rustix::fs::open("/dev/null", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()).unwrap()
}

/// How a child ended: `Ok(code)` or `Err(signal)`.
fn wait(s: &Spawned) -> Result<i32, i32> {
    let st = loop {
        match waitid(WaitId::PidFd(s.pidfd.as_fd()), WaitIdOptions::EXITED) {
            Err(Errno::INTR) => continue,
            other => break other.unwrap().unwrap(),
        }
    };
    st.exit_status()
        .ok_or_else(|| st.terminating_signal().unwrap())
}

/// A spec template: stdin and stderr on /dev/null.
struct Child {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: Option<CString>,
    group: bool,
}

impl Child {
    fn new(program: &str, argv: &[&[u8]]) -> Child {
        Child {
            program: cs(program),
            argv: argv.iter().map(|a| cs(*a)).collect(),
            envp: vec![cs("PATH=/usr/bin:/bin")],
            cwd: None,
            group: false,
        }
    }

    fn spec<'a>(
        &'a self,
        stdin: &'a OwnedFd,
        stdout: &'a OwnedFd,
        stderr: &'a OwnedFd,
        cgroup: Option<&'a OwnedFd>,
    ) -> SpawnSpec<'a> {
        SpawnSpec {
            program: &self.program,
            argv: &self.argv,
            envp: &self.envp,
            cwd: self.cwd.as_deref(),
            stdin: stdin.as_fd(),
            stdout: stdout.as_fd(),
            stderr: stderr.as_fd(),
            new_process_group: self.group,
            default_sigint: false,
            terminal: false,
            cgroup: cgroup.map(AsFd::as_fd),
            confine: None,
            isolate: None,
        }
    }

    /// Spawns, reads stdout to the end, waits: (stdout, exit).
    fn output(&self, cgroup: Option<&OwnedFd>) -> Result<(Vec<u8>, Result<i32, i32>), SpawnError> {
        let null = dev_null();
        let (r, w) = pipe_with(PipeFlags::CLOEXEC).unwrap();
        let spawned = spawn(&self.spec(&null, &w, &null, cgroup))?;
        drop(w);
        let mut out = Vec::new();
        File::from(r).read_to_end(&mut out).unwrap();
        Ok((out, wait(&spawned)))
    }
}

#[test]
fn argv_boundaries_survive_spaces_empty_strings_and_non_utf8() {
    if !host_ok() {
        return;
    }
    let odd: &[u8] = b"\xff\xfe not utf-8";
    let c = Child::new(
        "/usr/bin/printf",
        &[b"printf", b"%s\\0", b"a b", b"", odd, b"  "],
    );
    let (out, exit) = c.output(None).unwrap();
    assert_eq!(exit, Ok(0));
    assert_eq!(out, b"a b\0\0\xff\xfe not utf-8\0  \0");

    // argv[0] is ours to choose, independent of the program path.
    let c = Child::new("/bin/cat", &[b"zero with space", b"/proc/self/cmdline"]);
    let (out, _) = c.output(None).unwrap();
    assert_eq!(out, b"zero with space\0/proc/self/cmdline\0");
}

#[test]
fn the_environment_is_exactly_the_one_given() {
    if !host_ok() {
        return;
    }
    let mut c = Child::new("/usr/bin/env", &[b"env"]);
    c.envp = vec![
        cs("A=1"),
        cs("B=two words"),
        cs("EMPTY="),
        cs(&b"X=\xff"[..]),
    ];
    let (out, exit) = c.output(None).unwrap();
    assert_eq!(exit, Ok(0));
    assert_eq!(out, b"A=1\nB=two words\nEMPTY=\nX=\xff\n");

    c.envp.clear();
    let (out, _) = c.output(None).unwrap();
    assert_eq!(out, b"", "an empty environment stays empty");
}

#[test]
fn the_working_directory_is_applied() {
    if !host_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().canonicalize().unwrap();
    let mut c = Child::new("/bin/pwd", &[b"pwd", b"-P"]);
    c.cwd = Some(cs(real.as_os_str().as_bytes()));
    let (out, exit) = c.output(None).unwrap();
    assert_eq!(exit, Ok(0));
    assert_eq!(out, [real.as_os_str().as_bytes(), b"\n"].concat());
}

#[test]
fn stdin_stdout_and_stderr_are_wired_to_the_given_descriptors() {
    if !host_ok() {
        return;
    }
    let (in_r, in_w) = pipe_with(PipeFlags::CLOEXEC).unwrap();
    let (out_r, out_w) = pipe_with(PipeFlags::CLOEXEC).unwrap();
    let (err_r, err_w) = pipe_with(PipeFlags::CLOEXEC).unwrap();
    let c = Child::new(
        "/bin/sh",
        &[
            b"sh",
            b"-c",
            b"read line; echo \"out:$line\"; echo \"err:$line\" >&2",
        ],
    );
    let spawned = spawn(&c.spec(&in_r, &out_w, &err_w, None)).unwrap();
    drop((in_r, out_w, err_w));
    rustix::io::write(&in_w, b"hello\n").unwrap();
    drop(in_w);
    let (mut out, mut err) = (String::new(), String::new());
    File::from(out_r).read_to_string(&mut out).unwrap();
    File::from(err_r).read_to_string(&mut err).unwrap();
    assert_eq!(wait(&spawned), Ok(0));
    assert_eq!(out, "out:hello\n");
    assert_eq!(err, "err:hello\n");
}

#[test]
fn only_stdio_crosses_into_the_child() {
    if !host_ok() {
        return;
    }
    // A descriptor opened without O_CLOEXEC, as careless code elsewhere in
    // the embedding process might.
    let leaky = rustix::fs::open("/dev/null", OFlags::RDONLY, Mode::empty()).unwrap();
    let leaky_no = std::os::fd::AsRawFd::as_raw_fd(&leaky);
    let c = Child::new("/bin/sh", &[b"sh", b"-c", b"/bin/ls /proc/$$/fd; :"]);
    let (out, exit) = c.output(None).unwrap();
    assert_eq!(exit, Ok(0));
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "0\n1\n2\n",
        "fd {leaky_no} (no O_CLOEXEC) or another one leaked"
    );
    drop(leaky);
}

/// Some attacks need a process of their own: a group to signal, or stdio
/// descriptors the test can choose. This re-runs the test binary with only
/// the ignored test `helper`, marked by an environment variable, and its
/// stdout and stderr on two different pipes.
fn run_helper(helper: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &format!("process::spawn::tests::{helper}"),
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER, helper)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "helper failed:\n{text}");
    assert!(text.contains("1 passed"), "helper did not run:\n{text}");
}

/// The environment variable that names the helper a process is.
const HELPER: &str = "CUSTODIAN_SPAWN_TEST_HELPER";

fn assert_helper(name: &str) {
    assert_eq!(
        std::env::var(HELPER).as_deref(),
        Ok(name),
        "run only as a helper"
    );
}

#[test]
fn stdio_sources_on_low_descriptors_are_not_clobbered() {
    if !host_ok() {
        return;
    }
    run_helper("helper_stdio_from_low_descriptors");
}

#[test]
#[ignore = "helper process for stdio_sources_on_low_descriptors_are_not_clobbered"]
fn helper_stdio_from_low_descriptors() {
    assert_helper("helper_stdio_from_low_descriptors");
    // stdin from our fd 1, stdout from our 2, stderr from our 1: installing
    // one must not overwrite the source of another.
    let mine = |fd: i32| std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
    let (one, two) = (mine(1), mine(2));
    assert_ne!(one, two, "the runner gives fds 1 and 2 different pipes");
    let report = tempfile::NamedTempFile::new().unwrap();
    let script = format!(
        "echo $(readlink /proc/$$/fd/0 /proc/$$/fd/1 /proc/$$/fd/2) > {}",
        report.path().display()
    );
    let c = Child::new("/bin/sh", &[b"sh", b"-c", script.as_bytes()]);
    let null = dev_null();
    let (so, se) = (std::io::stdout(), std::io::stderr());
    let spec = SpawnSpec {
        stdin: so.as_fd(),
        stdout: se.as_fd(),
        stderr: so.as_fd(),
        ..c.spec(&null, &null, &null, None)
    };
    let spawned = spawn(&spec).unwrap();
    assert_eq!(wait(&spawned), Ok(0));
    let seen = std::fs::read_to_string(report.path()).unwrap();
    let expect = format!("{} {} {}\n", one.display(), two.display(), one.display());
    assert_eq!(seen, expect);
}

#[test]
fn the_child_leads_its_own_group_only_when_asked() {
    if !host_ok() {
        return;
    }
    let null = dev_null();
    for group in [true, false] {
        let mut c = Child::new("/bin/sleep", &[b"sleep", b"30"]);
        c.group = group;
        let spawned = spawn(&c.spec(&null, &null, &null, None)).unwrap();
        let pid = nix::unistd::Pid::from_raw(spawned.pid as i32);
        let pgid = nix::unistd::getpgid(Some(pid)).unwrap();
        let ours = nix::unistd::getpgid(None).unwrap();
        rustix::process::pidfd_send_signal(&spawned.pidfd, rustix::process::Signal::KILL).unwrap();
        assert_eq!(wait(&spawned), Err(libc::SIGKILL));
        if group {
            assert_eq!(pgid, pid, "leads a new group");
        } else {
            assert_eq!(pgid, ours, "stays in ours");
        }
    }
}

/// Zombie children of this process whose name is `comm`.
fn zombies_named(comm: &str) -> usize {
    let me = std::process::id();
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read(e.path().join("stat")) else {
            continue;
        };
        let Some(st) = crate::process::sys::parse_stat(&stat) else {
            continue;
        };
        let (state, ppid) = (st.state, st.ppid);
        let name = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if state == b'Z' && ppid == me && name.trim_end() == comm {
            n += 1;
        }
    }
    n
}

/// Spawns `c` from a thread named `comm`, so that a child that fails
/// before exec carries that name (it never exec'ed a new one).
fn fail_from_thread(c: Child, comm: &'static str) -> SpawnError {
    std::thread::Builder::new()
        .name(comm.into())
        .spawn(move || c.output(None).unwrap_err())
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn a_missing_program_fails_at_exec_with_enoent_and_leaves_no_zombie() {
    if !host_ok() {
        return;
    }
    let c = Child::new("/nonexistent/custodian-no-such-program", &[b"x"]);
    let e = fail_from_thread(c, "spawn-noent");
    assert!(
        matches!(
            e,
            SpawnError::Failed {
                stage: Stage::Exec,
                errno: Errno::NOENT
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        zombies_named("spawn-noent"),
        0,
        "the failed child was reaped"
    );
}

#[test]
fn a_file_that_is_not_executable_fails_at_exec_with_eacces() {
    if !host_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-executable");
    std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
    let c = Child::new(path.to_str().unwrap(), &[b"x"]);
    let e = fail_from_thread(c, "spawn-eacces");
    assert!(
        matches!(
            e,
            SpawnError::Failed {
                stage: Stage::Exec,
                errno: Errno::ACCESS
            }
        ),
        "{e:?}"
    );
    assert_eq!(std::io::Error::from(e).raw_os_error(), Some(libc::EACCES));
    assert_eq!(zombies_named("spawn-eacces"), 0);
}

#[test]
fn a_missing_working_directory_fails_at_chdir() {
    if !host_ok() {
        return;
    }
    let mut c = Child::new("/bin/true", &[b"true"]);
    c.cwd = Some(cs("/nonexistent/custodian-no-such-dir"));
    let e = fail_from_thread(c, "spawn-chdir");
    assert!(
        matches!(
            e,
            SpawnError::Failed {
                stage: Stage::Chdir,
                errno: Errno::NOENT
            }
        ),
        "{e:?}"
    );
    assert_eq!(zombies_named("spawn-chdir"), 0);
}

/// One hex mask line (`SigBlk:` …) of `/proc/<pid>/status`.
fn status_mask(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("{key} in status"));
    u64::from_str_radix(line.trim(), 16).unwrap()
}

fn bit(sig: i32) -> u64 {
    1 << (sig - 1)
}

extern "C" fn record_foreign_pid(_: libc::c_int) {
    // Async-signal-safe: a raw getpid and an atomic store.
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::syscall(libc::SYS_getpid) } as i32;
    if pid != PARENT.load(Ordering::Relaxed) {
        FOREIGN.store(pid, Ordering::Relaxed);
    }
}

static PARENT: AtomicI32 = AtomicI32::new(0);
static FOREIGN: AtomicI32 = AtomicI32::new(0);

fn install(sig: i32, handler: libc::sighandler_t) {
    // SAFETY: a zeroed sigaction with a valid handler (SIG_DFL, SIG_IGN or
    // an async-signal-safe extern "C" fn) and an empty mask.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(sig, &sa, std::ptr::null_mut()), 0);
    }
}

fn thread_mask(how: i32, sig: Option<i32>) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; pthread_sigmask reads `set` and
    // writes `old`, both on this stack.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        if let Some(s) = sig {
            libc::sigaddset(&mut set, s);
        }
        assert_eq!(libc::pthread_sigmask(how, &set, &mut old), 0);
        old
    }
}

#[test]
fn the_child_starts_with_an_empty_mask_default_sigpipe_and_no_handler() {
    if !host_ok() {
        return;
    }
    // The parent catches SIGUSR1, ignores SIGPIPE (the Rust runtime already
    // does; made explicit) and this thread blocks SIGUSR2.
    PARENT.store(std::process::id() as i32, Ordering::Relaxed);
    install(
        libc::SIGUSR1,
        record_foreign_pid as *const () as libc::sighandler_t,
    );
    install(libc::SIGPIPE, libc::SIG_IGN);
    thread_mask(libc::SIG_BLOCK, Some(libc::SIGUSR2));

    let null = dev_null();
    let c = Child::new("/bin/sleep", &[b"sleep", b"30"]);
    let spawned = spawn(&c.spec(&null, &null, &null, None)).unwrap();
    let (blk, ign, cgt) = (
        status_mask(spawned.pid, "SigBlk:"),
        status_mask(spawned.pid, "SigIgn:"),
        status_mask(spawned.pid, "SigCgt:"),
    );
    // The parent thread's own mask came back as it was.
    let after = thread_mask(libc::SIG_BLOCK, None);
    rustix::process::pidfd_send_signal(&spawned.pidfd, rustix::process::Signal::KILL).unwrap();
    wait(&spawned).unwrap_err();
    thread_mask(libc::SIG_SETMASK, None);
    // SAFETY: `after` is an initialised sigset.
    let still_blocked = unsafe { libc::sigismember(&after, libc::SIGUSR2) } == 1;
    install(libc::SIGUSR1, libc::SIG_DFL);

    assert!(still_blocked, "the caller's mask is restored");
    assert_eq!(blk, 0, "empty mask in the child, not the parent's");
    assert_eq!(ign & bit(libc::SIGPIPE), 0, "SIGPIPE back to SIG_DFL");
    assert_eq!(cgt & bit(libc::SIGUSR1), 0, "no handler crosses");
}

/// A parent's signal handler must never run in the child (it shares the
/// parent's memory until exec). The runner may share this process's group,
/// so the attack runs in a helper that leads a group of its own.
#[test]
fn no_parent_handler_runs_in_the_child_while_signals_rain_on_the_group() {
    if !host_ok() {
        return;
    }
    run_helper("helper_signals_to_the_group_during_spawns");
}

#[test]
#[ignore = "helper process for no_parent_handler_runs_in_the_child_while_signals_rain_on_the_group"]
fn helper_signals_to_the_group_during_spawns() {
    assert_helper("helper_signals_to_the_group_during_spawns");
    // Our own group: the signals below reach this helper and its children
    // only.
    nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0)).unwrap();
    PARENT.store(std::process::id() as i32, Ordering::Relaxed);
    install(
        libc::SIGUSR1,
        record_foreign_pid as *const () as libc::sighandler_t,
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rain = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let group = rustix::process::getpgrp();
            while !stop.load(Ordering::Relaxed) {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::USR1);
            }
        })
    };
    let null = dev_null();
    let c = Child::new("/bin/true", &[b"true"]);
    let mut killed = 0;
    for _ in 0..300 {
        let spawned = spawn(&c.spec(&null, &null, &null, None)).unwrap();
        if wait(&spawned) == Err(libc::SIGUSR1) {
            killed += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    rain.join().unwrap();
    println!("{killed} of 300 children were killed by the rain");
    assert_eq!(
        FOREIGN.load(Ordering::Relaxed),
        0,
        "the parent's handler ran inside a child"
    );
    assert!(
        killed > 0,
        "the rain never reached a child: the test proves nothing"
    );
}

/// A scratch cgroup under this process's own cgroup in the unified
/// hierarchy; killed and removed on drop.
struct Scratch {
    path: PathBuf,
    fd: OwnedFd,
}

static SCRATCH_SEQ: AtomicU32 = AtomicU32::new(0);

impl Scratch {
    fn new() -> Option<Scratch> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let mount = mountinfo.lines().find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            (post.split(' ').next() == Some("cgroup2")).then(|| pre.split(' ').nth(4))?
        });
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("0::").map(str::to_owned));
        let (Some(mount), Some(own)) = (mount, own) else {
            skipped!("no cgroup v2 hierarchy is mounted");
            return None;
        };
        let name = format!(
            "custodian-spawn-test-{}-{}",
            std::process::id(),
            SCRATCH_SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let path = Path::new(mount)
            .join(own.trim_start_matches('/'))
            .join(name);
        if let Err(e) = std::fs::create_dir(&path) {
            skipped!("cannot create a cgroup at {}: {e}", path.display());
            return None;
        }
        let fd = rustix::fs::open(
            &path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        Some(Scratch { path, fd })
    }

    /// The path `/proc/<pid>/cgroup` shows for this cgroup.
    fn relative(&self) -> String {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let own = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap()
            .trim_end_matches('/');
        format!("{own}/{}", self.path.file_name().unwrap().to_str().unwrap())
    }

    fn procs(&self) -> Vec<u32> {
        std::fs::read_to_string(self.path.join("cgroup.procs"))
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path.join("cgroup.kill"), "1");
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let events = std::fs::read_to_string(self.path.join("cgroup.events"));
            if events.is_ok_and(|e| e.contains("populated 0")) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        match std::fs::remove_dir(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                eprintln!("leftover cgroup {}: {e}", self.path.display());
            }
            _ => {}
        }
    }
}

fn zero_line(out: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| l.strip_prefix("0::").map(str::to_owned))
        .collect()
}

#[test]
fn spawns_into_a_fresh_cgroup() {
    if !host_ok() {
        return;
    }
    let Some(cg) = Scratch::new() else { return };
    let c = Child::new("/bin/cat", &[b"cat", b"/proc/self/cgroup"]);
    let (out, exit) = c.output(Some(&cg.fd)).unwrap();
    assert_eq!(exit, Ok(0));
    assert_eq!(zero_line(&out), [cg.relative()]);

    // Without a cgroup the child stays in ours.
    let (out, _) = c.output(None).unwrap();
    assert_ne!(zero_line(&out), [cg.relative()]);
}

#[test]
fn a_child_that_forks_at_once_has_both_in_the_cgroup() {
    if !host_ok() {
        return;
    }
    let Some(cg) = Scratch::new() else { return };
    let c = Child::new(
        "/bin/sh",
        &[
            b"sh",
            b"-c",
            b"cat /proc/self/cgroup & cat /proc/self/cgroup; wait",
        ],
    );
    let (out, exit) = c.output(Some(&cg.fd)).unwrap();
    assert_eq!(exit, Ok(0));
    assert_eq!(zero_line(&out), [cg.relative(), cg.relative()]);
}

#[test]
fn a_running_child_is_listed_in_the_cgroup_and_we_are_not() {
    if !host_ok() {
        return;
    }
    let Some(cg) = Scratch::new() else { return };
    let null = dev_null();
    let c = Child::new("/bin/sleep", &[b"sleep", b"30"]);
    let spawned = spawn(&c.spec(&null, &null, &null, Some(&cg.fd))).unwrap();
    // Listed the moment spawn returns: it never ran elsewhere.
    assert_eq!(cg.procs(), [spawned.pid]);
    std::fs::write(cg.path.join("cgroup.kill"), "1").unwrap();
    assert_eq!(wait(&spawned), Err(libc::SIGKILL));
}

#[test]
fn a_removed_cgroup_or_a_plain_directory_refuses_and_starts_nothing() {
    if !host_ok() {
        return;
    }
    let Some(cg) = Scratch::new() else { return };
    let c = Child::new("/bin/true", &[b"true"]);
    let plain = tempfile::tempdir().unwrap();
    let plain = rustix::fs::open(
        plain.path(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap();
    let e = c.output(Some(&plain)).unwrap_err();
    assert!(
        matches!(e, SpawnError::CgroupRefused { errno: Errno::BADF }),
        "{e:?}"
    );

    std::fs::remove_dir(&cg.path).unwrap();
    let e = c.output(Some(&cg.fd)).unwrap_err();
    // ENOENT on Linux 6.x; older kernels said ENODEV.
    assert!(
        matches!(
            e,
            SpawnError::CgroupRefused {
                errno: Errno::NOENT | Errno::NODEV
            }
        ),
        "{e:?}"
    );
}

#[test]
fn many_spawns_from_several_threads_while_others_allocate() {
    if !host_ok() {
        return;
    }
    let cg = Scratch::new();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let allocators: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut keep = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    keep.push(vec![7u8; 64 * 1024]);
                    if keep.len() > 64 {
                        keep.clear();
                    }
                }
            })
        })
        .collect();
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let cg = cg.as_ref();
            s.spawn(move || {
                for i in 0..40u8 {
                    let code = (t * 40 + i) % 200;
                    let script = format!("echo {code}; exit {code}");
                    let c = Child::new("/bin/sh", &[b"sh", b"-c", script.as_bytes()]);
                    let cgroup = if i % 2 == 0 { cg.map(|c| &c.fd) } else { None };
                    let (out, exit) = c.output(cgroup).unwrap();
                    assert_eq!(exit, Ok(i32::from(code)));
                    assert_eq!(out, format!("{code}\n").as_bytes());
                }
            });
        }
    });
    stop.store(true, Ordering::Relaxed);
    for a in allocators {
        a.join().unwrap();
    }
}

#[test]
fn the_stage_names_read_as_the_call_that_failed() {
    let e = SpawnError::Failed {
        stage: Stage::Exec,
        errno: Errno::NOENT,
    };
    assert_eq!(
        e.to_string(),
        format!("spawn failed at execve ({})", Errno::NOENT)
    );
    for s in Stage::CHILD {
        assert_eq!(Stage::from_code(s.code()), Some(s));
    }
    assert_eq!(Stage::from_code(0), None);
}

/// A confinement step that fails in the child comes back through the
/// stage + errno slot, and the program never runs: a ruleset descriptor
/// that is not a ruleset (`EBADFD`), an empty seccomp program (`EINVAL`).
#[test]
fn a_failing_confinement_step_reports_its_stage_and_nothing_runs() {
    if !host_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let script = format!("touch '{}'", marker.display());
    let c = Child::new("/bin/sh", &[b"sh", b"-c", script.as_bytes()]);
    let null = dev_null();
    let not_a_ruleset = dev_null();
    static EMPTY: [seccompiler::sock_filter; 0] = [];
    let cases = [
        (
            super::ChildConfine {
                ruleset: Some(not_a_ruleset.as_fd()),
                seccomp: None,
            },
            Stage::Landlock,
            Errno::BADFD,
        ),
        (
            super::ChildConfine {
                ruleset: None,
                seccomp: Some(&EMPTY),
            },
            Stage::Seccomp,
            Errno::INVAL,
        ),
    ];
    for (confine, stage, errno) in cases {
        let mut spec = c.spec(&null, &null, &null, None);
        spec.confine = Some(confine);
        match spawn(&spec) {
            Err(SpawnError::Failed { stage: s, errno: e }) => assert_eq!((s, e), (stage, errno)),
            other => panic!("expected {stage} to fail, got {other:?}"),
        }
        assert!(!marker.exists(), "{stage}: the program ran");
    }
    // The control: the same child without a confinement runs.
    let spawned = spawn(&c.spec(&null, &null, &null, None)).unwrap();
    assert_eq!(wait(&spawned), Ok(0));
    assert!(marker.exists());
}

/// no_new_privs is set in the child (and only there: this process keeps
/// its own value).
#[test]
fn a_confined_child_has_no_new_privs_and_the_parent_is_untouched() {
    if !host_ok() {
        return;
    }
    let c = Child::new("/bin/grep", &[b"grep", b"NoNewPrivs", b"/proc/self/status"]);
    let null = dev_null();
    let (r, w) = pipe_with(PipeFlags::CLOEXEC).unwrap();
    let mut spec = c.spec(&null, &w, &null, None);
    spec.confine = Some(super::ChildConfine {
        ruleset: None,
        seccomp: None,
    });
    let spawned = spawn(&spec).unwrap();
    drop(w);
    let mut out = String::new();
    File::from(r).read_to_string(&mut out).unwrap();
    assert_eq!(wait(&spawned), Ok(0));
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    let me = std::fs::read_to_string("/proc/self/status").unwrap();
    if me.contains("NoNewPrivs:\t1") {
        skipped!("the control: this test process already has no_new_privs");
        return;
    }
    let (plain, _) = c.output(None).unwrap();
    assert!(String::from_utf8_lossy(&plain).contains("NoNewPrivs:\t0"));
}

/// A confinement's seccomp program reaches the child (filter mode, one
/// filter) through the spawner thread that carries it, and no other
/// thread of this process is filtered.
#[test]
fn the_seccomp_filter_reaches_the_child_and_only_the_spawner_thread_carries_it() {
    if !host_ok() {
        return;
    }
    let program = crate::confine::build::network_program().unwrap();
    let c = Child::new("/bin/grep", &[b"grep", b"^Seccomp", b"/proc/self/status"]);
    let null = dev_null();
    for _ in 0..2 {
        let (r, w) = pipe_with(PipeFlags::CLOEXEC).unwrap();
        let mut spec = c.spec(&null, &w, &null, None);
        spec.confine = Some(super::ChildConfine {
            ruleset: None,
            seccomp: Some(program),
        });
        let spawned = spawn(&spec).unwrap();
        drop(w);
        let mut out = String::new();
        File::from(r).read_to_string(&mut out).unwrap();
        assert_eq!(wait(&spawned), Ok(0));
        assert!(out.contains("Seccomp:\t2"), "{out}");
        assert!(out.contains("Seccomp_filters:\t1"), "{out}");
    }
    // no_new_privs comes with the filter, from the spawner thread (the
    // child does not set it again).
    let c = Child::new("/bin/grep", &[b"grep", b"NoNewPrivs", b"/proc/self/status"]);
    let (r, w) = pipe_with(PipeFlags::CLOEXEC).unwrap();
    let mut spec = c.spec(&null, &w, &null, None);
    spec.confine = Some(super::ChildConfine {
        ruleset: None,
        seccomp: Some(program),
    });
    let spawned = spawn(&spec).unwrap();
    drop(w);
    let mut out = String::new();
    File::from(r).read_to_string(&mut out).unwrap();
    assert_eq!(wait(&spawned), Ok(0));
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    let spawners = filtering_spawner_threads();
    // Another spawn with the same program: no new thread. (Other tests of
    // this binary may have started spawners for other programs.)
    let mut again = c.spec(&null, &null, &null, None);
    again.confine = Some(super::ChildConfine {
        ruleset: None,
        seccomp: Some(program),
    });
    let spawned = spawn(&again).unwrap();
    assert_eq!(wait(&spawned), Ok(0));
    assert!(spawners >= 1, "no spawner thread");
    assert_eq!(
        filtering_spawner_threads(),
        spawners,
        "one spawner thread for one program"
    );
}

/// The filtering spawner threads of this process; every other thread is
/// checked to carry no filter.
fn filtering_spawner_threads() -> usize {
    let mut spawners = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let task = task.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(task.join("comm")) else {
            continue; // a test thread that ended meanwhile
        };
        let Ok(status) = std::fs::read_to_string(task.join("status")) else {
            continue;
        };
        if comm.trim_end() == "confined-spawn" {
            // A spawner thread of another test whose program the kernel
            // refused ends right after setting no_new_privs: not counted.
            if status.contains("Seccomp:\t2") {
                spawners += 1;
                assert!(status.contains("NoNewPrivs:\t1"), "{status}");
            }
        } else {
            assert!(status.contains("Seccomp:\t0"), "{comm}: {status}");
        }
    }
    spawners
}

/// Spawns through the seccomp spawner thread, from several threads at
/// once: the caller is woken by the child's `execve` or exit
/// (`CLONE_CHILD_CLEARTID`), or by the spawner thread when the clone made
/// no child; the pid (`CLONE_PARENT_SETTID`), a failing child stage and a
/// refused cgroup all come back to the right caller.
#[test]
fn the_spawner_thread_hands_back_pid_stage_and_refusal_to_each_caller() {
    if !host_ok() {
        return;
    }
    let program = crate::confine::build::network_program().unwrap();
    let confine = super::ChildConfine {
        ruleset: None,
        seccomp: Some(program),
    };
    let plain = tempfile::tempdir().unwrap();
    let plain = rustix::fs::open(
        plain.path(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap();
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let plain = &plain;
            s.spawn(move || {
                let null = dev_null();
                for i in 0..30u8 {
                    let code = t * 30 + i;
                    let script = format!("echo $$; exit {code}");
                    let mut c = Child::new("/bin/sh", &[b"sh", b"-c", script.as_bytes()]);
                    match i % 3 {
                        0 => {
                            let mut spec = c.spec(&null, &null, &null, Some(plain));
                            spec.confine = Some(confine);
                            let e = spawn(&spec).unwrap_err();
                            assert!(
                                matches!(e, SpawnError::CgroupRefused { errno: Errno::BADF }),
                                "{e:?}"
                            );
                        }
                        1 => {
                            c.cwd = Some(cs("/nonexistent/custodian-no-such-dir"));
                            let mut spec = c.spec(&null, &null, &null, None);
                            spec.confine = Some(confine);
                            let e = spawn(&spec).unwrap_err();
                            assert!(
                                matches!(
                                    e,
                                    SpawnError::Failed {
                                        stage: Stage::Chdir,
                                        errno: Errno::NOENT
                                    }
                                ),
                                "{e:?}"
                            );
                        }
                        _ => {
                            let (r, w) = pipe_with(PipeFlags::CLOEXEC).unwrap();
                            let mut spec = c.spec(&null, &w, &null, None);
                            spec.confine = Some(confine);
                            let spawned = spawn(&spec).unwrap();
                            drop(w);
                            let mut out = String::new();
                            File::from(r).read_to_string(&mut out).unwrap();
                            assert_eq!(wait(&spawned), Ok(i32::from(code)));
                            assert_eq!(out.trim_end(), spawned.pid.to_string());
                        }
                    }
                }
            });
        }
    });
}

#[test]
fn from_a_large_descriptor_table_the_child_gets_a_small_one_of_its_own() {
    if !host_ok() {
        return;
    }
    run_helper("helper_large_descriptor_table");
}

/// A process with hundreds of descriptors open (some without `O_CLOEXEC`),
/// as a node with many connections: every spawn is handed off (the child
/// shares the table only until its first system call unshares a small
/// copy), sees exactly its stdio, is wired right (stdin read, stdout and
/// stderr written), and its pipes reach EOF once it exits (the slots gave
/// their references back). Eight threads at once, for four slot sets:
/// those that find every set busy use the plain copy, and are right too.
#[test]
#[ignore = "helper process for from_a_large_descriptor_table_the_child_gets_a_small_one_of_its_own"]
fn helper_large_descriptor_table() {
    assert_helper("helper_large_descriptor_table");
    // The slots are made while the table is small, as a node does at start.
    super::prepare_handoff();
    let mut held = Vec::new();
    for i in 0..400 {
        let flags = if i % 2 == 0 {
            OFlags::RDONLY | OFlags::CLOEXEC
        } else {
            OFlags::RDONLY // careless code elsewhere in the process
        };
        held.push(rustix::fs::open("/dev/null", flags, Mode::empty()).unwrap());
    }
    let handed_off = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for t in 0..8 {
            let handed_off = &handed_off;
            scope.spawn(move || {
                for round in 0..10 {
                    let (in_r, in_w) = pipe_with(PipeFlags::CLOEXEC).unwrap();
                    let (out_r, out_w) = pipe_with(PipeFlags::CLOEXEC).unwrap();
                    let (err_r, err_w) = pipe_with(PipeFlags::CLOEXEC).unwrap();
                    let c = Child::new(
                        "/bin/sh",
                        &[
                            b"sh",
                            b"-c",
                            b"read line; echo \"$line\"; /bin/ls /proc/$$/fd; echo err >&2",
                        ],
                    );
                    let spawned = spawn(&c.spec(&in_r, &out_w, &err_w, None)).unwrap();
                    if spawned.small_table {
                        handed_off.fetch_add(1, Ordering::Relaxed);
                    }
                    drop((in_r, out_w, err_w));
                    rustix::io::write(&in_w, format!("t{t}r{round}\n").as_bytes()).unwrap();
                    drop(in_w);
                    // EOF comes only if no slot still holds the write end.
                    let (tx, rx) = std::sync::mpsc::channel();
                    std::thread::spawn(move || {
                        let (mut out, mut err) = (String::new(), String::new());
                        File::from(out_r).read_to_string(&mut out).unwrap();
                        File::from(err_r).read_to_string(&mut err).unwrap();
                        let _ = tx.send((out, err));
                    });
                    let (out, err) = rx
                        .recv_timeout(Duration::from_secs(20))
                        .expect("no EOF: a slot kept the child's pipe open");
                    assert_eq!(wait(&spawned), Ok(0));
                    assert_eq!(out, format!("t{t}r{round}\n0\n1\n2\n"));
                    assert_eq!(err, "err\n");
                }
            });
        }
    });
    let n = handed_off.load(Ordering::Relaxed);
    eprintln!("{n} of 80 spawns handed off");
    assert!(n > 0, "no spawn was handed off");
    drop(held);
}

/// The preparation starts each part once per process: the second of two
/// identical calls has nothing to start (and spawns no thread).
#[cfg(target_arch = "x86_64")]
#[test]
fn a_second_preparation_starts_nothing() {
    let _ = super::prepare_isolation(true, None, true);
    assert!(!super::prepare_isolation(true, None, true));
    assert!(!super::prepare_isolation(false, Some(1), false));
}

/// Requests that share one network namespace (an MCP session's) prepare
/// nothing while their launches alternate: each launch is the first its
/// request cgroup shows the slot. A request's second launch in a row
/// prepares the next, which its third takes (and prepares the next).
#[tokio::test]
async fn requests_sharing_a_namespace_prepare_only_their_own_next_launch() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use crate::confine::Confinement;
    use crate::process::{Invocation, InvocationSpec, LaunchOptions, SharedNetwork, run};

    if !rustix::process::geteuid().is_root() || crate::confine::landlock_abi() == 0 {
        eprintln!("skipped: needs root (request cgroups) and Landlock");
        return;
    }
    let (Ok(a), Ok(b)) = (
        crate::contain::request_cgroup(),
        crate::contain::request_cgroup(),
    ) else {
        eprintln!("skipped: no request cgroups here");
        return;
    };
    // Made here: another test may have turned the pool of spares off,
    // and a request namespace made without it is owned by a user
    // namespace of its own (where nothing is prepared).
    let Some(ns) = super::netns::made_for_tests() else {
        eprintln!("skipped: no network namespace can be made here");
        return;
    };
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let shared = Arc::new(SharedNetwork::with(Some(
        crate::confine::build::SharedNet::new(ns, None),
    )));
    let options = |cg| {
        let mut o = LaunchOptions::new(dir.path());
        o.network = Some(Arc::clone(&shared));
        o.cgroup_parent = Some(Arc::new(cg));
        o
    };
    let (in_a, in_b) = (options(a), options(b));
    async fn launch(
        o: &LaunchOptions,
    ) -> Result<Arc<crate::process::evidence::Evidence>, crate::process::ProcessError> {
        let inv = Invocation::validate(
            InvocationSpec::new("/bin/true").with_confinement(Confinement::workspace_write()),
        )
        .unwrap();
        run(inv, o).await
    }
    let queued = || {
        shared
            .namespace()
            .map_or(0, |n| n.spare.queued.load(Ordering::Relaxed))
    };
    for _ in 0..3 {
        assert_eq!(launch(&in_a).await.unwrap().exit_code, Some(0));
        assert_eq!(launch(&in_b).await.unwrap().exit_code, Some(0));
    }
    assert_eq!(queued(), 0, "alternating requests prepared a sandbox");
    launch(&in_a).await.unwrap();
    assert_eq!(queued(), 0, "the first launch after another request's");
    launch(&in_a).await.unwrap();
    assert_eq!(queued(), 1, "a request's second launch in a row prepares");
    launch(&in_a).await.unwrap();
    assert_eq!(queued(), 2, "the prepared launch prepares the next");
    // The other request's launch neither takes nor keeps it.
    launch(&in_b).await.unwrap();
    assert_eq!(queued(), 2);
    drop((in_a, in_b));
}

/// A background thread keeps off the launcher's CPU while it works and
/// takes its whole set back after (`Aside`); a CPU outside its set changes
/// nothing. On a thread of its own: the test thread's set stays as it is.
#[test]
fn a_background_thread_keeps_off_the_launchers_cpu_and_comes_back() {
    std::thread::spawn(|| {
        let get = || rustix::thread::sched_getaffinity(None).unwrap();
        let whole = get();
        if whole.count() < 2 {
            skipped!("one CPU: nothing to keep off");
            return;
        }
        let cpus: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| whole.is_set(c))
            .collect();
        let mut aside = super::Aside::new();
        for &cpu in &cpus {
            aside.keep_off(cpu);
            let now = get();
            assert!(!now.is_set(cpu), "still on CPU {cpu}");
            assert_eq!(
                now.count(),
                whole.count() - 1,
                "more than CPU {cpu} kept off"
            );
            assert_ne!(rustix::thread::sched_getcpu(), cpu);
        }
        aside.come_back();
        assert!(get() == whole, "the whole set not back");
        // A CPU the thread may not use: nothing narrowed.
        let outside = (0..rustix::thread::CpuSet::MAX_CPU).find(|&c| !whole.is_set(c));
        if let Some(cpu) = outside {
            aside.keep_off(cpu);
            assert!(get() == whole);
        }
        // Something else (the embedder, `taskset`) narrows the thread while
        // it keeps off a CPU: that set is its whole set from then on, never
        // widened back past it.
        // (The set given is the CPU kept off alone, which no narrowing of
        // its own makes.)
        aside.keep_off(cpus[0]);
        let mut only = rustix::thread::CpuSet::new();
        only.set(cpus[0]);
        rustix::thread::sched_setaffinity(None, &only).unwrap();
        aside.come_back();
        assert!(get() == only, "widened past the set it was given");
        aside.keep_off(cpus[0]);
        assert!(get() == only, "its one CPU kept off");
        assert!(aside.whole() == Some(&only));
    })
    .join()
    .unwrap();
}
