//! The group tiers never say `terminated` while a member lives.
//!
//! One test per class of descendant that a `/proc` group scan used to miss:
//! a member that keeps forking (each child forks and exits at once), a
//! thread group whose leader exited, members hidden by a `hidepid=` or
//! `subset=pid` `/proc`, and a `setsid` escapee with closed stdio. Each is
//! run in the pinned group tier (the library's and the CLI's default, named
//! `pinned_process_group` in the evidence) and, through the CLI, in the
//! subreaper tier, the only one of them allowed to say `terminated`: there
//! the test checks that nothing it started is alive when it does.
//!
//! Every test kills what it started before asserting, and checks that
//! nothing is left.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use custodian::process::evidence::{
    ContainmentTier, DescendantVerdict, EscalationReason, VerdictReason,
};
use custodian::process::{Evidence, launch};

use crate::common::*;

/// Compiles `src` with `cc -pthread` into `dir/name`; `None` (and a printed
/// reason) if there is no working C compiler.
fn compile(dir: &Path, name: &str, src: &str) -> Option<PathBuf> {
    let c = dir.join(format!("{name}.c"));
    let exe = dir.join(name);
    std::fs::write(&c, src).unwrap();
    match Command::new("cc")
        .arg("-O1")
        .arg("-pthread")
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .output()
    {
        Ok(out) if out.status.success() => Some(exe),
        Ok(out) => {
            skipped!("cc failed: {}", String::from_utf8_lossy(&out.stderr));
            None
        }
        Err(e) => {
            skipped!("no C compiler ({e})");
            None
        }
    }
}

/// Forks continuously: each process forks a child and exits at once, so
/// the live member is always a fresh pid. Stops by itself after `argv[1]`
/// seconds so that a failing test leaves nothing behind for long.
const WALKER: &str = r#"
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    time_t end = time(0) + (argc > 1 ? atoi(argv[1]) : 5);
    for (;;) {
        if (time(0) > end) _exit(0);
        pid_t p = fork();
        if (p != 0) _exit(0);
    }
}
"#;

/// The leader thread exits (`pthread_exit`) while another thread sleeps
/// `argv[1]` seconds: `/proc/<pid>/stat` says `Z`, yet the process runs.
const LEADERLESS: &str = r#"
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
static void *nap(void *arg) { sleep(*(int *)arg); return 0; }
int main(int argc, char **argv) {
    static int secs;
    secs = argc > 1 ? atoi(argv[1]) : 20;
    pthread_t t;
    pthread_create(&t, 0, nap, &secs);
    pthread_exit(0);
}
"#;

/// `(state, pgrp, threads)` of a process, `None` if it is gone.
fn stat3(pid: u32) -> Option<(char, u32, u32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((
        f.first()?.chars().next()?,
        f.get(2)?.parse().ok()?,
        f.get(17)?.parse().ok()?,
    ))
}

/// Alive in the strict sense: not a zombie, or a zombie leader whose
/// other threads still run.
fn running(pid: u32) -> bool {
    matches!(stat3(pid), Some((s, _, t)) if (s != 'Z' && s != 'X') || (s == 'Z' && t > 1))
}

/// The running processes whose command line contains `token`.
fn running_with(token: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(token))
        })
        .filter(|&p| running(p))
        .collect()
}

/// The running members of process group `pgid`.
fn running_in_group(pgid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| matches!(stat3(p), Some((_, g, _)) if g == pgid) && running(p))
        .collect()
}

fn kill_pid(pid: u32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
}

/// Kills everything running with `token` in its command line until none
/// is left (a walker forks between listing and kill), for at most 5 s.
fn kill_all_with(token: &str) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let left = running_with(token);
        if left.is_empty() {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        for p in left {
            // The group first: a fork racing a group kill is undone by the
            // kernel, a fork racing a pid kill is not.
            if let Some(g) = rustix::process::Pid::from_raw(p as i32) {
                if let Ok(pg) = rustix::process::getpgid(Some(g)) {
                    let _ = rustix::process::kill_process_group(pg, rustix::process::Signal::KILL);
                }
            }
            kill_pid(p);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn custodian(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custodian"))
        .arg("run")
        .args(args)
        .output()
        .unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// The group tier's verdict is never `terminated`, and says why.
fn assert_group_tier_unconfirmed(ev: &Evidence) {
    assert_eq!(
        ev.descendants.tier,
        ContainmentTier::PinnedProcessGroup,
        "{ev:?}"
    );
    assert_eq!(
        ev.descendants.verdict,
        DescendantVerdict::UnconfirmedOrEscaped,
        "{ev:?}"
    );
    assert!(!ev.descendants.reasons.is_empty(), "{ev:?}");
}

/// A member that forks continuously, each child forking and exiting at
/// once, for longer than any scan. The group tier must not call the group
/// empty while it lives (the pid witness sees the forks), and never says
/// `terminated`.
#[tokio::test]
async fn a_continuously_forking_member_is_never_confirmed_gone() {
    let _storm = fork_storm();
    let dir = tempfile::tempdir().unwrap();
    let Some(walker) = compile(dir.path(), "walker", WALKER) else {
        return;
    };
    let token = walker.to_str().unwrap().to_owned();
    let script = format!("'{token}' 8 >/dev/null 2>&1 </dev/null & exit 0");
    let r = launch(sh(&script, Duration::from_secs(20)), &group_opts()).unwrap();
    let ev = r.settled().await;
    // Whatever the verdict, a claim that the group is empty must be true
    // right now.
    let left_in_group = running_in_group(r.pgid());
    let cleaned = kill_all_with(&token);
    assert!(cleaned, "walker processes survived the test's own kill");
    assert_group_tier_unconfirmed(&ev);
    if ev.descendants.reasons == [VerdictReason::MayHaveLeftGroup] {
        assert!(
            left_in_group.is_empty(),
            "group called empty while {left_in_group:?} ran: {ev:?}"
        );
    }
    assert_no_leftovers(r.pgid());
}

/// The same racer in the subreaper tier: every walker is adopted the
/// moment its parent exits. `terminated` is allowed there, but only if no
/// walker is left.
#[test]
fn a_continuously_forking_member_in_the_subreaper_tier() {
    let _storm = fork_storm();
    let dir = tempfile::tempdir().unwrap();
    let Some(walker) = compile(dir.path(), "walker", WALKER) else {
        return;
    };
    let token = walker.to_str().unwrap().to_owned();
    let script = format!("'{token}' 8 >/dev/null 2>&1 </dev/null & exit 0");
    let out = custodian(&["--subreaper", "--grace", "300ms", "--", "sh", "-c", &script]);
    let left = running_with(&token);
    let cleaned = kill_all_with(&token);
    assert!(cleaned, "walker processes survived the test's own kill");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ev = json(&out);
    assert_eq!(ev["descendants"]["tier"], "subreaper");
    if ev["descendants"]["verdict"] == "terminated" {
        assert!(left.is_empty(), "terminated while {left:?} ran: {ev}");
    }
}

/// A member whose leader thread exited while another thread runs reads
/// `Z` in `/proc/<pid>/stat` but is alive: the group is occupied, the
/// ladder runs, and the process is dead at the end.
#[tokio::test]
async fn a_leader_exited_thread_group_is_a_live_member() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile(dir.path(), "leaderless", LEADERLESS) else {
        return;
    };
    let exe = exe.to_str().unwrap().to_owned();
    // Wait until the leader is a zombie before the root exits, so the
    // probe meets exactly the `Z`-with-threads state.
    let script = format!(
        "'{exe}' 20 >/dev/null 2>&1 </dev/null & p=$!; \
         while [ \"$(cut -d' ' -f3 /proc/$p/stat)\" != Z ]; do sleep 0.01; done; \
         echo $p; exit 0"
    );
    let r = launch(sh(&script, Duration::from_secs(20)), &group_opts()).unwrap();
    let ev = r.settled().await;
    let pid: u32 = ev.stdout.text.trim().parse().unwrap();
    let gone = eventually(|| !running(pid)).await;
    if !gone {
        kill_pid(pid);
    }
    assert!(gone, "the thread group {pid} outlived the run: {ev:?}");
    assert_eq!(
        ev.escalation.first().map(|s| s.reason),
        Some(EscalationReason::GroupCleanup),
        "the zombie leader with a live thread was not seen: {ev:?}"
    );
    assert_group_tier_unconfirmed(&ev);
    assert_no_leftovers(r.pgid());
}

/// The same thread group through the CLI in the subreaper tier: adopted
/// when the root exits, seen alive although its leader is `Z`.
#[test]
fn a_leader_exited_thread_group_in_the_subreaper_tier() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile(dir.path(), "leaderless", LEADERLESS) else {
        return;
    };
    let exe = exe.to_str().unwrap().to_owned();
    let script = format!(
        "'{exe}' 20 >/dev/null 2>&1 </dev/null & p=$!; \
         while [ \"$(cut -d' ' -f3 /proc/$p/stat)\" != Z ]; do sleep 0.01; done; \
         echo $p; exit 0"
    );
    let out = custodian(&["--subreaper", "--grace", "300ms", "--", "sh", "-c", &script]);
    let ev = json(&out);
    let pid: u32 = ev["stdout"]["text"]
        .as_str()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let ran = running(pid);
    kill_pid(pid);
    assert!(
        !ran,
        "the adopted thread group {pid} outlived the run: {ev}"
    );
    assert_eq!(ev["descendants"]["tier"], "subreaper");
    let reasons = ev["escalation"].as_array().unwrap();
    assert!(
        reasons.iter().any(|s| s["reason"] == "group_cleanup"),
        "the thread group was not seen alive: {ev}"
    );
}

/// Runs `custodian run ARGS` in a private mount namespace whose `/proc` is
/// a fresh mount with `options`. `None` (and a printed reason) where that
/// cannot be done (not root, no `unshare`).
fn custodian_under_proc(options: &str, args: &[&str]) -> Option<Output> {
    if !rustix::process::geteuid().is_root() {
        skipped!("mounting a proc needs root");
        return None;
    }
    // The namespace belongs to the child only; this test binary's mounts
    // are untouched. `exec` so the custodian process is the one that looks.
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount -t proc -o {options} proc /proc || exit 97; exec \"$0\" run \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_custodian"))
        .args(args);
    match cmd.output() {
        Ok(out) if out.status.code() == Some(97) || out.status.code() == Some(1) => {
            skipped!(
                "cannot mount a private proc: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            None
        }
        Ok(out) => Some(out),
        Err(e) => {
            skipped!("no unshare ({e})");
            None
        }
    }
}

/// `hidepid=invisible` and `subset=pid` may hide members: seeing none
/// proves nothing, in either tier (even the subreaper tier, which would
/// otherwise say `terminated` for this clean run).
#[test]
fn a_restricted_proc_is_never_read_as_empty() {
    let _quiet = quiet_host();
    for options in ["hidepid=invisible", "hidepid=2", "subset=pid"] {
        for tier in [["--containment", "group"], ["--containment", "subreaper"]] {
            let mut args: Vec<&str> = tier.to_vec();
            args.extend(["--", "sh", "-c", "echo x; exit 0"]);
            let Some(out) = custodian_under_proc(options, &args) else {
                return;
            };
            assert_eq!(out.status.code(), Some(0), "{options} {tier:?}: {out:?}");
            let ev = json(&out);
            assert_eq!(ev["status"], "exited", "{ev}");
            assert_eq!(
                ev["descendants"]["verdict"], "unconfirmed_or_escaped",
                "{options} {tier:?}: {ev}"
            );
            assert_eq!(
                ev["descendants"]["reasons"],
                serde_json::json!(["proc_restricted"]),
                "{options} {tier:?}: {ev}"
            );
        }
    }
}

/// A restricted `/proc` weakens only what an empty scan proves: a member
/// that is seen is seen. A silent member left behind by the root is found
/// by the first probe and stopped with the group (the cause `leftover`:
/// `TERM` for a group cleanup) in both tiers, and only then does the
/// restriction make the verdict unconfirmed. Read as restricted instead of
/// occupied, the run would settle at once and leave the member running.
#[test]
fn under_a_restricted_proc_a_member_seen_is_still_stopped() {
    let _quiet = quiet_host();
    for tier in [["--containment", "group"], ["--containment", "subreaper"]] {
        let mut args: Vec<&str> = tier.to_vec();
        args.extend([
            "--",
            "sh",
            "-c",
            "sleep 30 </dev/null >/dev/null 2>&1 & echo $!",
        ]);
        let Some(out) = custodian_under_proc("hidepid=2", &args) else {
            return;
        };
        let ev = json(&out);
        let member: u32 = ev["stdout"]["text"]
            .as_str()
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let survived = running(member);
        kill_pid(member);
        assert!(
            !survived,
            "{tier:?}: the member {member} was left running: {ev}"
        );
        assert_eq!(ev["escalation"][0]["action"], "term", "{tier:?}: {ev}");
        assert_eq!(
            ev["escalation"][0]["reason"], "group_cleanup",
            "{tier:?}: {ev}"
        );
        assert_eq!(
            ev["descendants"]["verdict"], "unconfirmed_or_escaped",
            "{tier:?}: {ev}"
        );
    }
}

/// A control for the test above: the same run under a plain private proc
/// is `terminated` in the subreaper tier, so the restriction (not the
/// namespace) is what the verdict reacts to.
#[test]
fn a_plain_private_proc_still_confirms_in_the_subreaper_tier() {
    let _quiet = quiet_host();
    let Some(out) =
        custodian_under_proc("rw", &["--subreaper", "--", "sh", "-c", "echo x; exit 0"])
    else {
        return;
    };
    let ev = json(&out);
    assert_eq!(ev["descendants"]["verdict"], "terminated", "{ev}");
    assert_eq!(ev["descendants"]["tier"], "subreaper", "{ev}");
}

/// A descendant that calls `setsid` and closes its stdio leaves the group
/// and holds nothing: the group tier cannot see it at all, so it can never
/// say `terminated` (not even here, where the group is really empty).
#[tokio::test]
async fn a_silent_setsid_escapee_keeps_the_group_tier_unconfirmed() {
    let _quiet = quiet_host();
    let script = "setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $!";
    let r = launch(sh(script, Duration::from_secs(20)), &group_opts()).unwrap();
    let ev = r.settled().await;
    let escapee: u32 = ev.stdout.text.trim().parse().unwrap();
    let escaped = running(escapee);
    kill_pid(escapee);
    assert!(escaped, "the escapee should be invisible to group signals");
    assert_eq!(
        ev.status,
        custodian::process::evidence::ProcessStatus::Exited
    );
    assert_group_confirmed_empty(&ev);
    assert_no_leftovers(r.pgid());
}

/// The issue's must-show, through the CLI: the group tier never
/// reports `terminated` for the escapee; the subreaper tier kills it and
/// may then say so.
#[test]
fn a_silent_setsid_escapee_through_the_cli() {
    let _quiet = quiet_host();
    let script = "setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $!";
    let pid_of = |ev: &serde_json::Value| -> u32 {
        ev["stdout"]["text"]
            .as_str()
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };

    let out = custodian(&["--containment", "group", "--", "sh", "-c", script]);
    let ev = json(&out);
    let escapee = pid_of(&ev);
    let ran = running(escapee);
    kill_pid(escapee);
    assert!(ran, "the group tier cannot stop the escapee");
    assert_eq!(ev["descendants"]["tier"], "pinned_process_group", "{ev}");
    assert_eq!(
        ev["descendants"]["verdict"], "unconfirmed_or_escaped",
        "{ev}"
    );
    let reasons = &ev["descendants"]["reasons"];
    assert!(
        *reasons == serde_json::json!(["may_have_left_group"])
            || *reasons == serde_json::json!(["group_emptiness_unknown"]),
        "{ev}"
    );

    let out = custodian(&["--subreaper", "--grace", "300ms", "--", "sh", "-c", script]);
    let ev = json(&out);
    let escapee = pid_of(&ev);
    let ran = running(escapee);
    kill_pid(escapee);
    assert!(
        !ran,
        "the subreaper tier should have stopped {escapee}: {ev}"
    );
    assert_eq!(ev["descendants"]["verdict"], "terminated", "{ev}");
}
