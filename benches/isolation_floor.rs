//! The kernel's floor under an isolated launch outside a request: what
//! the least isolated launch costs here, measured in the same loop as
//! custodian's own launches.
//!
//! Run (as root): `cargo bench --bench isolation_floor`
//! (`FLOOR_ROUNDS=N`, 1,000 by default; `FLOOR_ONLY=K` runs variant `K`
//! alone, back to back, 0-based).
//!
//! The reference sandbox does strictly less than any launch that meets
//! issue 24's isolation with the network off: one `clone3` into new user,
//! pid, mount, ipc, uts and network namespaces (the network namespace made
//! by the clone, owned by the new user namespace), its id maps written by
//! this process, the loopback brought up by the child, then `execve` of
//! `/bin/true` as the pid namespace's init. No view is composed (the
//! child sees the host's mounts, copied), no capability is dropped, no
//! Landlock or seccomp, no reaping init, no cgroup, no evidence; nothing
//! waits for the `execve` to succeed. Prepared, the next sandbox is cloned
//! by a thread of its own while the launches run, up to the loopback, and
//! a launch only tells it to `execve` and waits for its exit: the whole of
//! the namespaces' making is off the launch's path, as a prepared sandbox
//! of custodian's is.
//!
//! Variants, interleaved round by round (each round starting one further
//! on), with a `SpareKeeper` held throughout:
//! 0. custodian's unconfined launch (the goal's anchor);
//! 1. custodian's `workspace-write` launch, its sandbox prepared while the
//!    one before ran (outside a request: a network namespace of its own);
//! 2. `std::process::Command::status()` of `/bin/true` (a bare launch);
//! 3. the reference sandbox, cloned on the launch's path;
//! 4. the reference sandbox, prepared;
//! 5. the reference sandbox without a network namespace, prepared.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use custodian::confine::Confinement;
use custodian::process::{Invocation, InvocationSpec, LaunchOptions};

#[path = "support/cpu.rs"]
mod cpu;
use cpu::{cpu_children, cpu_self};

/// A reference sandbox whose child waits, its namespaces made and its
/// loopback up, for one byte on `go` before its `execve`.
struct Ready {
    pidfd: OwnedFd,
    go: OwnedFd,
}

/// What the child of a reference clone needs, built before the clone (the
/// child of a multi-threaded process may not allocate).
struct Exec {
    program: CString,
    argv: [*const libc::c_char; 2],
    envp: [*const libc::c_char; 1],
}

// SAFETY: the pointers name `program`, owned by the same value and never
// moved out of it while in use (the value lives in an `Arc`/static).
unsafe impl Send for Exec {}
// SAFETY: as above; nothing writes through them.
unsafe impl Sync for Exec {}

fn exec_true() -> &'static Exec {
    static EXEC: std::sync::OnceLock<Box<Exec>> = std::sync::OnceLock::new();
    EXEC.get_or_init(|| {
        let mut e = Box::new(Exec {
            program: CString::new("/bin/true").unwrap(),
            argv: [std::ptr::null(); 2],
            envp: [std::ptr::null(); 1],
        });
        e.argv[0] = e.program.as_ptr();
        e
    })
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `pipe2` writes two descriptors into the array it is given.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both are new descriptors owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Brings `lo` up in the caller's network namespace; raw system calls
/// only (runs in the clone's child).
fn loopback_up() -> bool {
    // SAFETY: plain system calls on a buffer of `ifreq`'s size (40 bytes:
    // the name, then the flags as a short at offset 16).
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return false;
        }
        let mut req = [0u8; 40];
        req[0] = b'l';
        req[1] = b'o';
        if libc::ioctl(s, libc::SIOCGIFFLAGS, req.as_mut_ptr()) != 0 {
            return false;
        }
        let flags = i16::from_ne_bytes([req[16], req[17]]) | libc::IFF_UP as i16;
        req[16..18].copy_from_slice(&flags.to_ne_bytes());
        let ok = libc::ioctl(s, libc::SIOCSIFFLAGS, req.as_mut_ptr()) == 0;
        libc::close(s);
        ok
    }
}

/// Clones a reference sandbox (with a network namespace of its own when
/// `net`), writes its id maps and waits until its loopback is up.
fn clone_sandbox(net: bool) -> Ready {
    let exec = exec_true();
    let (maps_r, maps_w) = pipe();
    let (ready_r, ready_w) = pipe();
    let (go_r, go_w) = pipe();
    let mut pidfd: libc::c_int = -1;
    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_PIDFD
        | if net { libc::CLONE_NEWNET } else { 0 };
    // SAFETY: `clone_args` is plain integers; all zero is "none" for each.
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.flags = flags as u64;
    args.pidfd = (&raw mut pidfd) as u64;
    args.exit_signal = libc::SIGCHLD as u64;
    // SAFETY: a fork-like `clone3` (no `CLONE_VM`): the child runs on a
    // copy of this thread's stack and makes raw system calls only, then
    // `execve`s or exits.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &raw mut args,
            std::mem::size_of::<libc::clone_args>(),
        )
    };
    assert!(pid >= 0, "clone3: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: the child: raw system calls on descriptors it inherited
        // and on `exec`, built before the clone.
        unsafe {
            // Dies with the thread that cloned it (a prepared one is left
            // waiting when the bench ends).
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            let mut b = 0u8;
            if libc::read(maps_r.as_raw_fd(), (&raw mut b).cast(), 1) != 1 {
                libc::_exit(120);
            }
            if net && !loopback_up() {
                libc::_exit(121);
            }
            if libc::write(ready_w.as_raw_fd(), (&raw const b).cast(), 1) != 1 {
                libc::_exit(122);
            }
            if libc::read(go_r.as_raw_fd(), (&raw mut b).cast(), 1) != 1 {
                libc::_exit(123);
            }
            libc::execve(
                exec.program.as_ptr(),
                exec.argv.as_ptr(),
                exec.envp.as_ptr(),
            );
            libc::_exit(127);
        }
    }
    // SAFETY: the clone stored a new pidfd owned by nobody else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    drop((maps_r, ready_w, go_r));
    for (file, map) in [("uid_map", "0 0 1"), ("gid_map", "0 0 1")] {
        std::fs::write(format!("/proc/{pid}/{file}"), map).unwrap();
    }
    write_byte(&maps_w);
    let mut b = 0u8;
    // SAFETY: reads one byte into `b`.
    let got = unsafe { libc::read(ready_r.as_raw_fd(), (&raw mut b).cast(), 1) };
    assert_eq!(got, 1, "the reference sandbox died before it was ready");
    Ready { pidfd, go: go_w }
}

fn write_byte(fd: &OwnedFd) {
    let b = 1u8;
    // SAFETY: writes one byte from `b`.
    assert_eq!(
        unsafe { libc::write(fd.as_raw_fd(), (&raw const b).cast(), 1) },
        1
    );
}

/// Lets the sandbox `execve` and waits for its exit (`/bin/true`: 0).
fn run(ready: Ready) {
    write_byte(&ready.go);
    // SAFETY: `waitid` writes the `siginfo_t` it is given; `P_PIDFD`
    // names the child by its pidfd.
    let code = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        assert_eq!(
            libc::waitid(
                libc::P_PIDFD,
                ready.pidfd.as_raw_fd() as libc::id_t,
                &raw mut info,
                libc::WEXITED
            ),
            0
        );
        info.si_status()
    };
    assert_eq!(code, 0, "the reference sandbox's program failed");
}

/// A thread that keeps one reference sandbox ready: it clones the next
/// as soon as the one it handed out is taken.
struct Preparer {
    ready: mpsc::Receiver<Ready>,
}

impl Preparer {
    fn start(net: bool) -> Preparer {
        let (tx, rx) = mpsc::sync_channel(0);
        std::thread::Builder::new()
            .name(if net { "floor-net" } else { "floor-nonet" }.into())
            .spawn(move || while tx.send(clone_sandbox(net)).is_ok() {})
            .unwrap();
        Preparer { ready: rx }
    }

    fn launch(&self) {
        run(self.ready.recv().unwrap());
    }
}

fn custodian_once(rt: &tokio::runtime::Runtime, opts: &LaunchOptions, c: &Confinement) {
    let inv =
        Invocation::validate(InvocationSpec::new("/bin/true").with_confinement(c.clone())).unwrap();
    let ev = rt.block_on(async {
        custodian::process::launch(inv, opts)
            .unwrap()
            .settled()
            .await
    });
    assert_eq!(ev.exit_code, Some(0), "{ev:?}");
}

fn main() {
    if !rustix::process::geteuid().is_root() {
        println!("isolation_floor: run as root (the id maps are written as root's)");
        return;
    }
    let n: usize = std::env::var("FLOOR_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n >= 20)
        .unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ws = std::env::temp_dir();
    let opts = LaunchOptions::new(&ws);
    let _keeper = custodian::contain::SpareKeeper::new();
    let with_net = Preparer::start(true);
    let without_net = Preparer::start(false);
    let none = Confinement::none();
    let isolated = Confinement::workspace_write();
    let names = [
        "custodian, unconfined",
        "custodian, workspace-write, prepared",
        "std Command::status()",
        "reference sandbox, cloned per launch",
        "reference sandbox, prepared",
        "reference sandbox, prepared, no netns",
    ];
    let once = |k: usize| match k {
        0 => custodian_once(&rt, &opts, &none),
        1 => custodian_once(&rt, &opts, &isolated),
        2 => {
            let s = std::process::Command::new("/bin/true").status().unwrap();
            assert!(s.success());
        }
        3 => run(clone_sandbox(true)),
        4 => with_net.launch(),
        _ => without_net.launch(),
    };
    let timed = |k: usize| {
        let c0 = cpu_self() + cpu_children();
        let t = Instant::now();
        once(k);
        (
            t.elapsed(),
            (cpu_self() + cpu_children()).saturating_sub(c0),
        )
    };
    if let Some(k) = std::env::var("FLOOR_ONLY")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        let k = k.min(names.len() - 1);
        once(k);
        let mut s: Vec<Duration> = (0..n).map(|_| timed(k).0).collect();
        s.sort();
        println!(
            "{}: {n} launches back to back, p50 {:.0} us, p95 {:.0} us",
            names[k],
            s[n / 2].as_secs_f64() * 1e6,
            s[n * 95 / 100].as_secs_f64() * 1e6
        );
        return;
    }
    for k in 0..names.len() {
        once(k);
    }
    let mut samples = vec![Vec::with_capacity(n); names.len()];
    let mut cpu = vec![Duration::ZERO; names.len()];
    for round in 0..n {
        for j in 0..names.len() {
            let k = (round + j) % names.len();
            let (d, c) = timed(k);
            samples[k].push(d);
            cpu[k] += c;
        }
    }
    println!(
        "isolated launch + settle of /bin/true, {n} rounds interleaved, a SpareKeeper held \
         (CPU: this process and its reaped children, while the launch ran)"
    );
    println!(
        "{:<40} {:>9} {:>9} {:>12} {:>13} {:>12}",
        "variant", "p50 us", "p95 us", "vs unconf.", "vs std", "CPU/launch"
    );
    let p = |s: &[Duration], q: usize| s[n * q / 100].as_secs_f64();
    for s in &mut samples {
        s.sort();
    }
    let anchor = p(&samples[0], 50);
    let bare = p(&samples[2], 50);
    for ((name, s), c) in names.iter().zip(&samples).zip(&cpu) {
        println!(
            "{:<40} {:>9.0} {:>9.0} {:>11.3}x {:>12.3}x {:>9.0} us",
            name,
            p(s, 50) * 1e6,
            p(s, 95) * 1e6,
            p(s, 50) / anchor,
            p(s, 50) / bare,
            c.as_secs_f64() * 1e6 / n as f64,
        );
    }
}
