//! The cgroup v2 tier: every descendant, whatever it does to leave the
//! process group, is in the process's cgroup; `cgroup.kill` ends them all
//! and `terminated` is said only when the cgroup was observed empty.
//!
//! Each test skips (with the reason printed) where this host has no
//! writable cgroup v2. After each test, the processes the test started are
//! gone and the cgroup directory the child reported was removed.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use custodian::contain::{Containment, Hierarchy, process_cgroup};
use custodian::process::evidence::{
    CgroupRemoval, ContainmentTier, DescendantVerdict, EscalationAction, ProcessStatus,
    SignalTarget,
};
use custodian::process::{Evidence, launch};

use crate::common::*;

#[path = "../support/sandbox.rs"]
mod sandbox;

/// Whether this host lets us create cgroups; prints why not.
fn cgroups() -> bool {
    match process_cgroup() {
        Ok(cg) => {
            cg.remove().expect("an unused cgroup is removable");
            true
        }
        Err(e) => {
            skipped!("no writable cgroup v2 here ({})", e.code());
            false
        }
    }
}

fn cgroup_opts() -> custodian::process::LaunchOptions {
    opts().with_containment(Containment::Cgroup)
}

/// Prints the child's own cgroup (as `cg=<path>`) before `script`.
fn traced(script: &str) -> String {
    format!("echo cg=$(sed -n 's/^0:://p' /proc/self/cgroup) >&2; {script}")
}

/// The cgroup directory the child reported on stderr.
fn reported_cgroup(ev: &Evidence) -> PathBuf {
    let rel = ev
        .stderr
        .text
        .lines()
        .find_map(|l| l.strip_prefix("cg="))
        .unwrap_or_else(|| panic!("no cgroup reported: {:?}", ev.stderr.text));
    let h = Hierarchy::discover().expect("cgroup v2 mounted");
    // The hierarchy's own cgroup is a prefix of the child's.
    h.mount.join(rel.trim_start_matches('/'))
}

/// The run was contained in a cgroup that is now gone, and nothing of it
/// is alive.
fn assert_cgroup_gone(ev: &Evidence, pids: &[u32]) {
    let dir = reported_cgroup(ev);
    assert!(
        dir.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('p')),
        "not a per-process cgroup: {dir:?}"
    );
    assert!(!dir.exists(), "cgroup {dir:?} was left behind");
    assert_eq!(ev.descendants.cgroup_removal, Some(CgroupRemoval::Removed));
    for &pid in pids {
        assert!(!alive(pid), "process {pid} survived");
    }
}

fn kill_all(pids: &[u32]) {
    for pid in pids {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
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

/// A descendant that leaves the session and closes its stdio: nothing held,
/// nothing in the group. `echo $!` is its pid (setsid need not fork: a
/// background job of `sh -c` is no group leader).
const SILENT_ESCAPEE: &str =
    "setsid sh -c 'exec >/dev/null 2>&1 </dev/null; exec sleep 30' & echo $! >&2; echo x";

fn escapee(ev: &serde_json::Value) -> u32 {
    ev["stderr"]["text"]
        .as_str()
        .unwrap()
        .lines()
        .find_map(|l| l.parse().ok())
        .expect("the escapee's pid on stderr")
}

/// The issue's must-show, through the command line: the default (`auto`)
/// run kills the silent `setsid` escapee and says `terminated`, tier
/// `cgroup`.
#[test]
fn cli_kills_a_silent_setsid_escapee_and_says_terminated_in_the_cgroup_tier() {
    if !cgroups() {
        return;
    }
    let out = custodian(&["--grace", "300ms", "--", "sh", "-c", SILENT_ESCAPEE]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ev = json(&out);
    let pid = escapee(&ev);
    let survived = alive(pid);
    kill_all(&[pid]);
    assert!(!survived, "the escapee {pid} survived the cgroup tier");
    assert_eq!(ev["descendants"]["tier"], "cgroup", "{ev}");
    assert_eq!(ev["descendants"]["verdict"], "terminated", "{ev}");
    assert_eq!(ev["descendants"]["requested_containment"], "auto");
    assert_eq!(
        ev["descendants"]["fallback_reason"],
        serde_json::Value::Null
    );
    assert_eq!(ev["descendants"]["cgroup_removal"], "removed");
    assert_eq!(ev["stdout"]["text"], "x\n");
    let targets: Vec<&str> = ev["escalation"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["target"].as_str())
        .collect();
    assert!(targets.contains(&"cgroup"), "{ev}");
}

/// The same run in the group tier can never say `terminated`: the escapee
/// is invisible to a process-group probe.
#[test]
fn cli_group_tier_never_says_terminated_for_a_silent_setsid_escapee() {
    let out = custodian(&[
        "--containment",
        "group",
        "--grace",
        "300ms",
        "--",
        "sh",
        "-c",
        SILENT_ESCAPEE,
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ev = json(&out);
    kill_all(&[escapee(&ev)]);
    assert_eq!(ev["descendants"]["tier"], "pinned_process_group", "{ev}");
    assert_ne!(ev["descendants"]["verdict"], "terminated", "{ev}");
}

#[tokio::test]
async fn a_descendant_that_keeps_forking_is_terminated_and_reported_exactly() {
    if !cgroups() {
        return;
    }
    // Each generation forks the next (in a new session, stdio closed) and
    // exits at once: a pid scan always lags one generation behind.
    let script = traced(
        "export R='sleep 0.002; setsid sh -c \"$R\" </dev/null >/dev/null 2>&1 & exit 0'; \
         setsid sh -c \"$R\" </dev/null >/dev/null 2>&1 & echo started",
    );
    let r = launch(sh(&script, Duration::from_secs(20)), &cgroup_opts()).unwrap();
    let ev = r.settled().await;
    assert_eq!(ev.status, ProcessStatus::Exited);
    assert_eq!(ev.stdout.text, "started\n");
    assert_eq!(ev.descendants.tier, ContainmentTier::Cgroup);
    assert_eq!(
        ev.descendants.verdict,
        DescendantVerdict::Terminated,
        "{ev:?}"
    );
    let kill = ev
        .escalation
        .iter()
        .find(|s| s.action == EscalationAction::Kill)
        .expect("the chain ignores the group TERM: cgroup.kill ends it");
    assert_eq!(kill.target, Some(SignalTarget::Cgroup));
    assert_cgroup_gone(&ev, &[r.pid()]);
}

#[tokio::test]
async fn a_fork_bomb_bounded_by_a_short_loop_is_killed_whole() {
    if !cgroups() {
        return;
    }
    // 2^7 - 1 shells in a session of their own, ignoring TERM, stdio
    // closed; the root closes its own stdio and leaves at once.
    let script = traced(
        "exec >/dev/null 2>&1 </dev/null; \
         setsid sh -c 'trap \"\" TERM; \
           b() { if [ $1 -gt 0 ]; then b $(($1 - 1)) & b $(($1 - 1)) & fi; exec sleep 30; }; \
           b 6' &",
    );
    let r = launch(sh(&script, Duration::from_secs(20)), &cgroup_opts()).unwrap();
    let ev = r.settled().await;
    assert_eq!(ev.descendants.tier, ContainmentTier::Cgroup);
    assert_eq!(
        ev.descendants.verdict,
        DescendantVerdict::Terminated,
        "{ev:?}"
    );
    assert!(
        ev.escalation
            .iter()
            .any(|s| s.action == EscalationAction::Kill && s.target == Some(SignalTarget::Cgroup)),
        "{ev:?}"
    );
    assert_cgroup_gone(&ev, &[r.pid()]);
}

/// A tiny C program whose main thread `pthread_exit`s while another thread
/// runs (ignoring TERM): its leader is a zombie, the process is alive.
fn zombie_leader_program() -> Option<(tempfile::TempDir, PathBuf)> {
    let dir = tempfile::tempdir().ok()?;
    let src = dir.path().join("zl.c");
    let exe = dir.path().join("zl");
    std::fs::write(
        &src,
        "#include <pthread.h>\n#include <signal.h>\n#include <unistd.h>\n\
         static void *spin(void *a) { (void)a; for (;;) sleep(1); return 0; }\n\
         int main(void) { signal(SIGTERM, SIG_IGN); pthread_t t;\n\
         pthread_create(&t, 0, spin, 0); pthread_exit(0); }\n",
    )
    .ok()?;
    let ok = Command::new("cc")
        .arg("-pthread")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .ok()?
        .success();
    ok.then_some((dir, exe))
}

/// Whether any thread of `pid` is alive (not a zombie).
fn live_task(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        std::fs::read_to_string(t.path().join("stat")).is_ok_and(|s| {
            !matches!(
                s.rfind(')')
                    .and_then(|i| s[i + 1..].trim_start().chars().next()),
                Some('Z' | 'X') | None
            )
        })
    })
}

#[tokio::test]
async fn a_process_whose_leader_thread_exited_is_alive_until_killed() {
    if !cgroups() {
        return;
    }
    let Some((_dir, exe)) = zombie_leader_program() else {
        skipped!("no C compiler (cc) to build the zombie-leader program");
        return;
    };
    let script = traced(&format!(
        "setsid '{}' >/dev/null 2>&1 </dev/null & echo $! >&2; sleep 0.2; \
         grep -q '^State:.*Z' /proc/$!/status && echo zombie-leader",
        exe.display()
    ));
    let r = launch(sh(&script, Duration::from_secs(20)), &cgroup_opts()).unwrap();
    let ev = r.settled().await;
    let pid: u32 = ev
        .stderr
        .text
        .lines()
        .find_map(|l| l.parse().ok())
        .expect("pid on stderr");
    // The leader's own state says `Z` either way: look at every thread.
    // (A zombie left afterwards is init's to reap: its parent was the root.)
    let gone = !live_task(pid);
    kill_all(&[pid]);
    // The scenario really happened: the leader was a zombie while the
    // process lived.
    assert_eq!(ev.stdout.text, "zombie-leader\n", "{ev:?}");
    assert!(
        gone,
        "the process {pid} with a live thread survived: {ev:?}"
    );
    assert_eq!(ev.descendants.tier, ContainmentTier::Cgroup);
    assert_eq!(
        ev.descendants.verdict,
        DescendantVerdict::Terminated,
        "{ev:?}"
    );
    assert!(
        ev.escalation
            .iter()
            .any(|s| s.action == EscalationAction::Kill && s.target == Some(SignalTarget::Cgroup)),
        "TERM is ignored: only cgroup.kill ends it: {ev:?}"
    );
    assert_cgroup_gone(&ev, &[r.pid()]);
}

#[tokio::test]
async fn a_timeout_settles_with_cgroup_kill() {
    if !cgroups() {
        return;
    }
    let script = traced("trap '' TERM; setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $!; wait");
    let r = launch(sh(&script, Duration::from_millis(300)), &cgroup_opts()).unwrap();
    let ev = r.settled().await;
    let child: u32 = ev.stdout.text.trim().parse().unwrap();
    assert_eq!(ev.status, ProcessStatus::TimedOut);
    let steps: Vec<_> = ev.escalation.iter().map(|s| (s.action, s.target)).collect();
    assert_eq!(
        steps[1],
        (EscalationAction::Kill, Some(SignalTarget::Cgroup))
    );
    assert_eq!(ev.signal, Some(9));
    assert_eq!(
        ev.descendants.verdict,
        DescendantVerdict::Terminated,
        "{ev:?}"
    );
    assert_cgroup_gone(&ev, &[r.pid(), child]);
}

#[tokio::test]
async fn a_cancel_settles_with_cgroup_kill() {
    if !cgroups() {
        return;
    }
    // The loop is out of the group: only cgroup.kill reaches it.
    let script = traced(
        "trap '' TERM; echo ready; \
         setsid sh -c 'while :; do sleep 0.05; done' </dev/null >/dev/null 2>&1 & wait",
    );
    let r = launch(sh(&script, Duration::from_secs(20)), &cgroup_opts()).unwrap();
    // Cancel only once the shell ignores TERM (it printed "ready"): on a
    // loaded machine a fixed pause may end before it ran at all.
    let waited = std::time::Instant::now();
    while r.bytes_captured().0 == 0 && waited.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    r.cancel();
    let ev = r.settled().await;
    assert_eq!(ev.status, ProcessStatus::Cancelled);
    assert!(
        ev.escalation
            .iter()
            .any(|s| s.action == EscalationAction::Kill && s.target == Some(SignalTarget::Cgroup)),
        "{ev:?}"
    );
    assert_eq!(
        ev.descendants.verdict,
        DescendantVerdict::Terminated,
        "{ev:?}"
    );
    assert_cgroup_gone(&ev, &[r.pid()]);
}

/// A held pipe no longer lowers the verdict: the holder was in the cgroup,
/// and the cgroup is empty. The stream state stays in the evidence.
#[tokio::test]
async fn a_held_pipe_is_reported_and_the_empty_cgroup_still_terminated() {
    if !cgroups() {
        return;
    }
    let script = traced("echo partial; setsid sleep 30 & echo $! >&2");
    let r = launch(sh(&script, Duration::from_secs(20)), &cgroup_opts()).unwrap();
    let ev = r.settled().await;
    let holder: u32 = ev.stderr.text.lines().find_map(|l| l.parse().ok()).unwrap();
    assert_eq!(ev.status, ProcessStatus::Exited);
    assert_eq!(
        serde_json::to_value(ev.stdout.state).unwrap(),
        serde_json::json!("held_open")
    );
    assert_eq!(
        ev.descendants.verdict,
        DescendantVerdict::Terminated,
        "{ev:?}"
    );
    assert_cgroup_gone(&ev, &[r.pid(), holder]);
}

/// With the cgroup hierarchy hidden (a tmpfs mounted over it in a private
/// mount namespace), an explicit `--containment cgroup` is a launch error
/// (exit code 71, `containment_unavailable`) and nothing runs; `auto` falls
/// back and says why: to the pid-namespace tier where user namespaces are
/// allowed (as here), else to the pinned group.
#[test]
fn an_unavailable_explicit_cgroup_is_a_typed_launch_error_and_auto_falls_back() {
    let Ok(h) = Hierarchy::discover() else {
        skipped!("no cgroup v2 mounted");
        return;
    };
    let probe = Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        skipped!("cannot create a mount namespace (unshare -m)");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let marker = scratch.path().join("ran");
    let bin = env!("CARGO_BIN_EXE_custodian");
    let run = |containment: &str| -> Output {
        // The tmpfs lives only in the private namespace.
        let script = format!(
            "mount -t tmpfs none '{}' && exec '{bin}' run --containment {containment} \
             -- sh -c 'touch \"$0\"' '{}'",
            h.mount.display(),
            marker.display()
        );
        Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .output()
            .unwrap()
    };
    let out = run("cgroup");
    assert_eq!(out.status.code(), Some(71), "{out:?}");
    let err = json(&out);
    assert_eq!(err["error"]["code"], "containment_unavailable", "{err}");
    assert!(
        err["error"]["message"].as_str().unwrap().contains("cgroup"),
        "{err}"
    );
    assert!(!marker.exists(), "something was launched");

    let out = run("auto");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ev = json(&out);
    assert!(marker.exists(), "auto did not run the command");
    let userns = Command::new("unshare")
        .args(["-U", "-p", "--fork", "true"])
        .status()
        .is_ok_and(|s| s.success());
    let want = if userns {
        "pid_namespace"
    } else {
        "pinned_process_group"
    };
    assert_eq!(ev["descendants"]["tier"], want, "{ev}");
    assert_eq!(ev["descendants"]["requested_containment"], "auto");
    assert_eq!(ev["descendants"]["fallback_reason"], "no_cgroup2", "{ev}");
    assert_eq!(ev["descendants"]["cgroup_removal"], serde_json::Value::Null);
}

/// `custodian run ARGS -- sh -c SCRIPT` with the cgroup hierarchy hidden
/// (as above), where this host allows a mount namespace, user namespaces
/// and Landlock; `None` (with the reason printed) elsewhere.
fn run_without_cgroups(args: &[&str], script: &str) -> Option<Output> {
    let Ok(h) = Hierarchy::discover() else {
        skipped!("no cgroup v2 mounted");
        return None;
    };
    let can = |args: &[&str]| {
        Command::new("unshare")
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    };
    if !can(&["-m", "--propagation", "private", "true"]) || !can(&["-U", "-p", "--fork", "true"]) {
        skipped!("no mount namespace or no user and pid namespaces here");
        return None;
    }
    if custodian::confine::landlock_abi() == 0 {
        skipped!("no Landlock here");
        return None;
    }
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let mut run = vec![env!("CARGO_BIN_EXE_custodian"), "run"];
    run.extend_from_slice(args);
    run.extend(["--", "sh", "-c", script]);
    let run: Vec<String> = run.iter().map(|a| quote(a)).collect();
    let script = format!(
        "mount -t tmpfs none '{}' && exec {}",
        h.mount.display(),
        run.join(" ")
    );
    Some(
        Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .output()
            .unwrap(),
    )
}

/// Without a cgroup, `auto` contains a confined run by its pid namespace:
/// isolated, tier `pid_namespace`, never refused for want of a cgroup (the
/// group tier would have to refuse it: only the `clone3` spawner
/// confines). A member that ignores `TERM` outlives the grace and is
/// killed with the namespace: one `KILL` to the namespace's init,
/// delivered, and the verdict `terminated`.
#[test]
fn without_a_cgroup_auto_confines_a_run_in_its_pid_namespace_and_kills_it_there() {
    let script = "trap '' TERM; echo up; sleep 30 & wait";
    let Some(out) = run_without_cgroups(
        &[
            "--confine",
            "read-only",
            "--timeout",
            "500ms",
            "--grace",
            "300ms",
        ],
        script,
    ) else {
        return;
    };
    let ev = json(&out);
    assert_eq!(ev["status"], "timed_out", "{ev}");
    assert_eq!(ev["stdout"]["text"], "up\n", "{ev}");
    assert_eq!(
        ev["confinement"]["isolation"]["host_read_only"], true,
        "{ev}"
    );
    assert_eq!(ev["descendants"]["tier"], "pid_namespace", "{ev}");
    assert_eq!(ev["descendants"]["verdict"], "terminated", "{ev}");
    assert_eq!(ev["descendants"]["fallback_reason"], "no_cgroup2", "{ev}");
    let kills: Vec<(&str, &str)> = ev["escalation"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["action"] == "kill")
        .map(|s| {
            (
                s["target"].as_str().unwrap(),
                s["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(kills, [("pid_namespace", "delivered")], "{ev}");
}

const ESCAPE_INNER: &str =
    "containment::a_member_that_writes_itself_into_another_cgroup_is_never_terminated_inner";

/// PE-16: an unconfined root tool's child writes its own pid into the
/// `cgroup.procs` of a cgroup the test made, and lives on there: the
/// process's cgroup is then empty, yet the verdict is
/// `unconfirmed_or_escaped` with `left_cgroup`, never `terminated`.
#[test]
fn a_member_that_writes_itself_into_another_cgroup_is_never_terminated() {
    if !cgroups() {
        return;
    }
    if !sandbox::is_root() {
        skipped!("moving a process into a cgroup of the test's needs root here");
        return;
    }
    let h = Hierarchy::discover().expect("cgroup v2 mounted");
    sandbox::run_guarded_keeping(ESCAPE_INNER, &std::env::temp_dir(), Some(&h.mount));
}

#[tokio::test]
#[ignore = "run by a_member_that_writes_itself_into_another_cgroup_is_never_terminated in a mount namespace"]
async fn a_member_that_writes_itself_into_another_cgroup_is_never_terminated_inner() {
    let h = Hierarchy::discover().unwrap();
    sandbox::scratch_keeping(Some(&h.mount));
    let dest = h.own.join(format!("escape-dest-{}", std::process::id()));
    std::fs::create_dir(&dest).unwrap();
    let procs = dest.join("cgroup.procs");
    // The child stays in the root's process group; it only changes cgroup.
    let script = "sh -c 'echo $$ > \"$1\" && exec sleep 30' escapee \"$0\" \
                  </dev/null >/dev/null 2>&1 & echo $! >&2; sleep 0.5";
    let r = launch(
        inv(
            "sh",
            &["-c", script, procs.to_str().unwrap()],
            Duration::from_secs(20),
        ),
        &cgroup_opts(),
    )
    .unwrap();
    let ev = r.settled().await;
    let pid: u32 = ev
        .stderr
        .text
        .lines()
        .find_map(|l| l.parse().ok())
        .expect("the escapee's pid on stderr");
    let moved = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let lives = alive(pid);
    kill_all(&[pid]);
    for _ in 0..500 {
        if std::fs::remove_dir(&dest).is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        lives
            && moved
                .trim_end()
                .ends_with(dest.file_name().unwrap().to_str().unwrap()),
        "the escape did not happen: {moved:?}"
    );
    assert_eq!(ev.descendants.tier, ContainmentTier::Cgroup, "{ev:?}");
    assert_eq!(
        ev.descendants.verdict,
        DescendantVerdict::UnconfirmedOrEscaped,
        "a live member that left the cgroup was reported terminated: {ev:?}"
    );
    assert!(
        ev.descendants
            .reasons
            .contains(&custodian::process::evidence::VerdictReason::LeftCgroup),
        "{ev:?}"
    );
}

const KEPT_INNER: &str = "containment::with_a_keeper_a_standalone_launch_reuses_an_empty_cgroup_never_a_changed_or_killed_one_inner";

/// PE-18: while a `SpareKeeper` lives, the cgroup of a standalone launch
/// (no request) seen empty at settlement is kept and serves the next
/// launch; one its tool changed, or one that was killed, never serves
/// again; without a keeper each launch's cgroup (and the base) goes.
#[test]
fn with_a_keeper_a_standalone_launch_reuses_an_empty_cgroup_never_a_changed_or_killed_one() {
    if !cgroups() {
        return;
    }
    if !sandbox::is_root() {
        skipped!("a tool writing its cgroup's attributes needs root here");
        return;
    }
    let h = Hierarchy::discover().expect("cgroup v2 mounted");
    sandbox::run_guarded_keeping(KEPT_INNER, &std::env::temp_dir(), Some(&h.mount));
}

#[tokio::test]
#[ignore = "run by with_a_keeper_a_standalone_launch_reuses_an_empty_cgroup_never_a_changed_or_killed_one in a mount namespace"]
async fn with_a_keeper_a_standalone_launch_reuses_an_empty_cgroup_never_a_changed_or_killed_one_inner()
 {
    let h = Hierarchy::discover().unwrap();
    sandbox::scratch_keeping(Some(&h.mount));
    let mount = h.mount.display().to_string();
    let dir_of = |cg: &str| h.mount.join(cg.trim_start_matches('/'));
    let base = h.own.join(format!("custodian-{}", std::process::id()));
    // Runs `script` (with the cgroupfs mount as `$0`) in the cgroup tier;
    // its first stdout line is its own cgroup.
    let run = |script: String| {
        let mount = mount.clone();
        async move {
            let r = launch(
                inv(
                    "sh",
                    &[
                        "-c",
                        &format!("sed -n 's/^0:://p' /proc/self/cgroup; {script}"),
                        &mount,
                    ],
                    Duration::from_secs(20),
                ),
                &cgroup_opts(),
            )
            .unwrap();
            let ev = r.settled().await;
            assert_eq!(ev.status, ProcessStatus::Exited, "{ev:?}");
            let cg = ev.stdout.text.lines().next().unwrap_or("").to_owned();
            (cg, ev.descendants.cgroup_removal)
        }
    };

    // Without a keeper: removed, and the base with it.
    let (first, removal) = run(String::new()).await;
    assert_eq!(removal, Some(CgroupRemoval::Removed));
    assert!(!dir_of(&first).exists() && !base.exists(), "{first}");

    let keeper = custodian::contain::SpareKeeper::new();
    let (c1, removal) = run(String::new()).await;
    assert_eq!(removal, Some(CgroupRemoval::KeptEmpty));
    assert!(dir_of(&c1).is_dir());
    let (again, removal) = run(String::new()).await;
    assert_eq!(again, c1, "the kept cgroup did not serve the next launch");
    assert_eq!(removal, Some(CgroupRemoval::KeptEmpty));

    // Its tool changes an attribute of its own cgroup: kept empty at
    // settlement, refused by the check before reuse, and removed.
    let (changed, _) =
        run("echo 0 > \"$0$(sed -n 's/^0:://p' /proc/self/cgroup)/cgroup.max.depth\"".into()).await;
    assert_eq!(changed, c1);
    let (c2, removal) = run(String::new()).await;
    assert_ne!(c2, c1, "a changed cgroup served again");
    assert!(!dir_of(&c1).exists(), "the changed cgroup was not removed");
    assert_eq!(removal, Some(CgroupRemoval::KeptEmpty));

    // A descendant that ignores TERM outlives the root: the cgroup is
    // killed at settlement, and a killed cgroup is never kept.
    let (killed, removal) =
        run("(trap '' TERM; exec sleep 30) </dev/null >/dev/null 2>&1 &".into()).await;
    assert_eq!(killed, c2);
    assert_eq!(removal, Some(CgroupRemoval::Removed));
    let (c3, _) = run(String::new()).await;
    assert_ne!(c3, c2, "a killed cgroup served again");

    // The keeper's drop takes the kept cgroups and the base.
    drop(keeper);
    assert!(!dir_of(&c3).exists() && !base.exists(), "{c3} left behind");
}
