//! Effects against decisions, recorded: real runs of `custodian run` under
//! `strace`, whose every group signal (`kill(-pgid, sig)`, `sig` not 0) is
//! checked against what the process machine decided, as the evidence
//! reports it: each `term` and `kill` step of the escalation that names the
//! group (`process_group`, `pinned_process_group`, or `cgroup`, whose
//! `cgroup.kill` is followed by the group's `SIGKILL`) is one recorded
//! signal, in order, and no group signal follows the reaping of the root
//! (after which the group's id may belong to someone else).
//!
//! The driver's own check is `src/process/effects.rs`; this test sees the
//! system calls themselves, so that a signal sent around that check is
//! caught too.
//!
//! The replay (below) checks the other direction, in process: every effect
//! the driver had on a real run (group signals, `cgroup.kill`, pidfd kills,
//! signals to adopted descendants, the reaping), as its one door recorded
//! it, is exactly what `machine::process` decides when the same events are
//! fed to it at the same times.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

/// One recorded system call of interest.
#[derive(Debug, PartialEq)]
enum Call {
    /// `kill(-pgid, sig)` with `sig` not 0.
    GroupSignal { pgid: u32, sig: &'static str },
    /// The root (or any child) `pid` was reaped.
    Reaped { pid: u32 },
}

/// The group signals and reapings in an `strace -f` log, in order.
fn calls(log: &str) -> Vec<Call> {
    let mut out = Vec::new();
    for line in log.lines() {
        // `PID call(args) = ret`, the pid padded to five columns. A call
        // another thread's interrupted is split: its `<unfinished ...>`
        // half never matches below, its `<... NAME resumed>` half is read
        // as the call (it holds the result, and a wait's flags and child).
        let Some(call) = line
            .split_once(char::is_whitespace)
            .map(|(_, c)| c.trim_start())
        else {
            continue;
        };
        let resumed = call
            .strip_prefix("<... ")
            .and_then(|c| c.split_once(" resumed>"));
        let call = match resumed {
            Some((name, rest)) => format!("{name}({rest}"),
            None => call.to_owned(),
        };
        let call = call.as_str();
        if let Some(rest) = call.strip_prefix("kill(-") {
            let (pgid, rest) = rest.split_once(", ").unwrap_or((rest, ""));
            let sig = ["SIGTERM", "SIGKILL"]
                .into_iter()
                .find(|s| rest.starts_with(s));
            if let (Ok(pgid), Some(sig)) = (pgid.parse(), sig) {
                out.push(Call::GroupSignal { pgid, sig });
            }
        } else if call.starts_with("waitid(") && call.contains("WEXITED") {
            // A reaping wait: not a peek (`WNOWAIT`), and it found a child.
            if call.contains("WNOWAIT") || !call.ends_with("= 0") {
                continue;
            }
            if let Some(pid) = call
                .split("si_pid=")
                .nth(1)
                .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|s| s.parse().ok())
            {
                out.push(Call::Reaped { pid });
            }
        } else if let Some(rest) = call.strip_prefix("wait4(") {
            // `wait4(-1, …) = PID` or `wait4(PID, …) = PID`.
            if let Some(pid) = rest
                .rsplit_once("= ")
                .and_then(|(_, r)| r.trim().parse::<u32>().ok())
                .filter(|&p| p > 0)
            {
                out.push(Call::Reaped { pid });
            }
        }
    }
    out
}

/// The group signals the evidence's escalation says were sent, in order.
fn decided(ev: &Value) -> Vec<&'static str> {
    let mut out = Vec::new();
    for step in ev["escalation"].as_array().unwrap() {
        let target = step["target"].as_str().unwrap_or_default();
        if !matches!(target, "process_group" | "pinned_process_group" | "cgroup") {
            continue;
        }
        match step["action"].as_str() {
            Some("term") => out.push("SIGTERM"),
            Some("kill") => out.push("SIGKILL"),
            _ => {}
        }
    }
    out
}

/// Runs `custodian run ARGS` in `dir` under `strace`; its evidence and
/// the recorded calls.
fn traced(dir: &Path, args: &[&str]) -> (Value, Vec<Call>) {
    let log = dir.join("strace.log");
    let out = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=kill,waitid,wait4", "-o"])
        .arg(&log)
        .arg(env!("CARGO_BIN_EXE_custodian"))
        .arg("run")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("strace runs (install it: the test is run by .ci/run)");
    let text = String::from_utf8_lossy(&out.stdout);
    let ev: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    let log = std::fs::read_to_string(&log).unwrap();
    (ev, calls(&log))
}

/// The recorded group signals are exactly the decided ones, all to the
/// root's group, none after the root was reaped.
fn assert_signals_follow_the_decisions(ev: &Value, calls: &[Call]) {
    let signals: Vec<(u32, &str)> = calls
        .iter()
        .filter_map(|c| match c {
            Call::GroupSignal { pgid, sig } => Some((*pgid, *sig)),
            Call::Reaped { .. } => None,
        })
        .collect();
    assert_eq!(
        signals.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
        decided(ev),
        "recorded {calls:?} for {ev}"
    );
    let Some(&(root, _)) = signals.first() else {
        return;
    };
    assert!(
        signals.iter().all(|(p, _)| *p == root),
        "a signal to another group: {calls:?}"
    );
    let reaped = calls
        .iter()
        .position(|c| *c == Call::Reaped { pid: root })
        .unwrap_or_else(|| panic!("the root {root} was never reaped: {calls:?}"));
    assert!(
        !calls[reaped..]
            .iter()
            .any(|c| matches!(c, Call::GroupSignal { .. })),
        "a group signal after the root was reaped: {calls:?}"
    );
}

/// The group tier starts its root with std's `posix_spawn` (a
/// `CLONE_VM | CLONE_VFORK` child that execs at once), never a `fork` of
/// the whole custodian process: with glibc linked statically the spawn
/// with a working directory finds `posix_spawn_file_actions_addchdir_np`
/// only because `process::driver` links it (without it, std forks).
#[test]
#[ignore = "needs strace (run by .ci/run, which installs it)"]
fn a_group_tier_launch_is_a_posix_spawn_not_a_fork_of_custodian() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("strace.log");
    let out = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=clone,clone3,fork,vfork", "-o"])
        .arg(&log)
        .arg(env!("CARGO_BIN_EXE_custodian"))
        .args(["run", "--containment", "group", "--", "/bin/true"])
        .current_dir(dir.path())
        .output()
        .expect("strace runs (install it: the test is run by .ci/run)");
    let text = String::from_utf8_lossy(&out.stdout);
    let ev: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(ev["status"], "exited", "{ev}");
    let log = std::fs::read_to_string(&log).unwrap();
    // Threads share the memory; a process started for the root must too,
    // until its exec (a fork copies custodian's whole address space).
    let processes: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("clone") || l.contains("fork("))
        .filter(|l| !l.contains("CLONE_THREAD") && !l.contains("resumed>"))
        .collect();
    assert!(!processes.is_empty(), "no process was started: {log}");
    for call in &processes {
        assert!(
            call.contains("CLONE_VM") && call.contains("CLONE_VFORK"),
            "a process started by copying custodian: {call}\n{log}"
        );
    }
}

/// A run that exits, one whose tree honours `TERM` at its timeout, one that
/// ignores it (`KILL` after the grace), each in the cgroup tier and in the
/// group tier.
#[test]
#[ignore = "needs strace (run by .ci/run, which installs it)"]
fn every_group_signal_of_a_real_run_is_one_the_machine_decided_and_none_follows_the_reaping() {
    let dir = tempfile::tempdir().unwrap();
    let scripts = [
        ("exits", "sleep 0.2 & wait; echo done"),
        ("honours TERM", "sleep 5 & sleep 5"),
        ("ignores TERM", "trap '' TERM; sleep 5 & sleep 5"),
    ];
    let mut signalled = 0;
    for containment in ["auto", "group"] {
        for (what, script) in scripts {
            let (ev, calls) = traced(
                dir.path(),
                &[
                    "--containment",
                    containment,
                    "--timeout",
                    "300ms",
                    "--grace",
                    "200ms",
                    "--",
                    "sh",
                    "-c",
                    script,
                ],
            );
            eprintln!("{containment} / {what}: {calls:?}");
            assert_signals_follow_the_decisions(&ev, &calls);
            signalled += decided(&ev).len();
        }
    }
    // The control: the runs above did signal (TERM, and KILL after the
    // grace), so the comparison had something to compare.
    assert!(signalled >= 6, "only {signalled} group signals decided");
}

/// The check itself can fail: a recorded `SIGTERM` after the reaping, or
/// one the evidence does not list, is caught.
#[test]
fn the_recorded_signals_check_catches_a_late_or_undecided_signal() {
    let ev: Value = serde_json::json!({"escalation": [
        {"action": "term", "reason": "timeout", "target": "process_group"}
    ]});
    let good = "\
100  kill(-200, SIGTERM)                = 0
100  waitid(P_PIDFD, 9, {si_signo=SIGCHLD, si_code=CLD_KILLED, si_pid=200, si_uid=0, si_status=SIGTERM, si_utime=0, si_stime=0}, WNOHANG|WEXITED|WNOWAIT, NULL) = 0
100  waitid(P_PIDFD, 9, {si_signo=SIGCHLD, si_code=CLD_KILLED, si_pid=200, si_uid=0, si_status=SIGTERM, si_utime=0, si_stime=0}, WNOHANG|WEXITED, NULL) = 0
100  kill(-200, 0)                      = -1 ESRCH (No such process)
";
    // Five-digit pids are not padded; a wait split by another thread's
    // call is read from its resumed half.
    let wide = "\
32360 kill(-32362, SIGTERM)             = 0
32361 wait4(-1,  <unfinished ...>
32360 waitid(P_PIDFD, 9, {si_signo=SIGCHLD, si_code=CLD_KILLED, si_pid=32362, si_uid=0, si_status=SIGTERM, si_utime=0, si_stime=0}, WNOHANG|WEXITED, NULL) = 0
32361 <... wait4 resumed>0x7ffd43c77f4c, 0, NULL) = 32364
";
    assert_eq!(
        calls(wide),
        [
            Call::GroupSignal {
                pgid: 32362,
                sig: "SIGTERM"
            },
            Call::Reaped { pid: 32362 },
            Call::Reaped { pid: 32364 }
        ]
    );
    assert_signals_follow_the_decisions(&ev, &calls(good));
    let late =
        format!("{good}100  kill(-200, SIGTERM)                = -1 ESRCH (No such process)\n");
    let ev_two: Value = serde_json::json!({"escalation": [
        {"action": "term", "reason": "timeout", "target": "process_group"},
        {"action": "term", "reason": "timeout", "target": "process_group"}
    ]});
    for (ev, log) in [(&ev_two, late.as_str()), (&ev, late.as_str())] {
        let caught =
            std::panic::catch_unwind(|| assert_signals_follow_the_decisions(ev, &calls(log)));
        assert!(caught.is_err(), "not caught: {log}");
    }
}

// --- the replay: recorded effects against the machine's actions ---------

use custodian::__bench::{Effect, KillTarget, RecordedRun};
use custodian::machine::process::{self as m, Action, Signal};

/// The effects `machine::process` decides for `run`'s inputs, replayed from
/// its start, as the driver must carry them out for `run.kill_target`.
fn replay(run: &RecordedRun) -> Vec<Effect> {
    let t0 = std::time::Instant::now();
    let mut out = Vec::new();
    let mut carry = |actions: Vec<Action<std::time::Instant>>| {
        for a in actions {
            match a {
                Action::SignalGroup(Signal::Kill) => match run.kill_target {
                    KillTarget::Group => out.push(Effect::GroupSignal(Signal::Kill)),
                    KillTarget::Cgroup => {
                        out.extend([Effect::CgroupKill, Effect::GroupSignal(Signal::Kill)])
                    }
                    KillTarget::PidNamespace => out.push(Effect::PidfdKill),
                    _ => panic!("an unknown kill target: {run:?}"),
                },
                Action::SignalGroup(sig) => out.push(Effect::GroupSignal(sig)),
                Action::Reap => out.push(Effect::Reap),
                _ => {}
            }
        }
    };
    let start = m::start(run.tier, run.limits, t0);
    let mut state = start.next;
    carry(start.actions);
    for (event, at) in &run.inputs {
        let now = t0 + *at;
        let t = match event {
            Some(e) => m::step(&state, *e, now),
            None => m::abandon(&state, now),
        };
        state = t.next;
        carry(t.actions);
    }
    out
}

/// The recorded effects of `run` are the replayed ones: the same signals,
/// kills and reaping in the same order; a signal to adopted descendants
/// only right after the group signal it follows; after the reaping, at most
/// the removal's kill of leftovers in the run's own cgroup.
fn check_replay(run: &RecordedRun) -> Result<(), String> {
    let expected = replay(run);
    let mut core = Vec::new();
    let mut last_group = None;
    for (i, e) in run.effects.iter().enumerate() {
        match e {
            Effect::AdoptedSignal(sig) => {
                if last_group != Some(*sig) {
                    return Err(format!(
                        "effect {i}: an adopted signal after {last_group:?}"
                    ));
                }
            }
            Effect::LeftoverKill => {
                if !core.contains(&Effect::Reap) || run.kill_target != KillTarget::Cgroup {
                    return Err(format!("effect {i}: a leftover kill before the reaping"));
                }
            }
            other => {
                last_group = match other {
                    Effect::GroupSignal(sig) => Some(*sig),
                    _ => None,
                };
                core.push(*other);
            }
        }
    }
    if core == expected {
        Ok(())
    } else {
        Err(format!(
            "recorded {:?}, the machine decided {expected:?}",
            run.effects
        ))
    }
}

/// Set in the process the replay test starts for its inner half.
const CHILD: &str = "CUSTODIAN_EFFECTS_REPLAY_CHILD";

/// Real runs of every tier the launcher offers here, each replayed: an
/// exit, a tree that honours `TERM` at its timeout, one that ignores it
/// (`KILL` after the grace), a cancel, an escapee that leaves the group
/// (`setsid`), and an isolated run (the sandbox's init), in the cgroup,
/// group and subreaper tiers. In a process of its own: the subreaper tier
/// makes its process adopt every orphan, which the other tests of this
/// binary must not see.
#[test]
fn every_effect_of_a_real_run_is_what_the_machine_decides_for_its_events() {
    replay_in_a_process_of_its_own();
}

/// Starts this test binary again with [`CHILD`] set, running only the
/// inner half, and fails unless that run passed.
fn replay_in_a_process_of_its_own() {
    let out = Command::new(std::env::current_exe().unwrap())
        .env(CHILD, "1")
        .args([
            "--ignored",
            "--exact",
            "--nocapture",
            "effects::every_effect_of_a_real_run_is_what_the_machine_decides_for_its_events_inner",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by every_effect_of_a_real_run_is_what_the_machine_decides_for_its_events in a process of its own"]
async fn every_effect_of_a_real_run_is_what_the_machine_decides_for_its_events_inner() {
    if std::env::var_os(CHILD).is_none() {
        // Forced beside the other tests (`--ignored`), the subreaper tier
        // would adopt their orphans: the replay runs in a process made for
        // it instead, so this half never passes without replaying.
        tokio::task::spawn_blocking(replay_in_a_process_of_its_own)
            .await
            .unwrap();
        return;
    }
    use custodian::confine::Confinement;
    use custodian::contain::Containment;
    custodian::__bench::record_process_runs(true);
    let dir = tempfile::tempdir().unwrap();
    let scripts = [
        ("exits", "sleep 0.1 & wait; echo done"),
        ("honours TERM", "sleep 5 & sleep 5"),
        ("ignores TERM", "trap '' TERM; sleep 5 & sleep 5"),
        ("escapes", "setsid sleep 5 & sleep 5"),
    ];
    let _ = custodian::process::enable_subreaper();
    let mut pids = Vec::new();
    for containment in [
        Containment::Auto,
        Containment::Group,
        Containment::Subreaper,
    ] {
        for (what, script) in scripts {
            for confined in [false, true] {
                if confined && containment != Containment::Auto {
                    continue;
                }
                let mut spec = crate::common::spec("sh", &["-c", script])
                    .with_timeout(Duration::from_millis(300));
                if confined {
                    spec = spec.with_confinement(Confinement::workspace_write());
                }
                let inv = custodian::process::Invocation::validate(spec).unwrap();
                let opts = custodian::process::LaunchOptions::new(dir.path())
                    .with_containment(containment);
                let running = match custodian::process::launch(inv, &opts) {
                    Ok(r) => r,
                    Err(e) => {
                        skipped!("{containment:?} / {what} / {confined}: {e}");
                        continue;
                    }
                };
                pids.push(running.pid());
                if what == "exits" {
                    let _ = running.settled().await;
                } else {
                    // The cancel races the timeout: either way is decided.
                    let r = &running;
                    let cancel = async {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        r.cancel();
                    };
                    let (_, _) = tokio::join!(cancel, r.settled());
                }
            }
        }
    }
    // Sessions interrupted while they run (the machine forwards each
    // `SIGINT`), then cancelled: in every tier, confined or not.
    let mut interrupts = 0;
    for containment in [
        Containment::Auto,
        Containment::Group,
        Containment::Subreaper,
    ] {
        for confined in [false, true] {
            if confined && containment != Containment::Auto {
                continue;
            }
            // Python installs its handler whatever this process ignores.
            let script = "import signal, time\n\
                          signal.signal(signal.SIGINT, lambda *_: print('int', flush=True))\n\
                          print('ready', flush=True)\n\
                          while True: time.sleep(0.02)\n";
            let mut spec = crate::common::spec("python3", &["-u", "-c", script])
                .with_timeout(Duration::from_secs(10));
            if confined {
                spec = spec.with_confinement(Confinement::workspace_write());
            }
            let inv = custodian::process::Invocation::validate(spec).unwrap();
            let opts =
                custodian::process::LaunchOptions::new(dir.path()).with_containment(containment);
            use custodian::process::session::{self, Offsets, SessionOptions, SessionSignal};
            let s = match session::start(inv, &opts, SessionOptions::default()) {
                Ok(s) => s,
                Err(e) => {
                    skipped!("the session in {containment:?} / {confined}: {e}");
                    continue;
                }
            };
            pids.push(s.running().pid());
            let mut next = Offsets::default();
            let mut seen = String::new();
            // One interrupt seen handled, then two more at once: each is
            // an event of its own, and a `SIGINT` of its own (the shell may
            // see them as one: the kernel does not queue them).
            for (want, asked) in [("ready", 0), ("int", 1), ("", 2)] {
                for _ in 0..asked {
                    s.signal(SessionSignal::Interrupt);
                }
                while !seen.contains(want) {
                    let out = s.read(next, 4096, Duration::from_secs(5)).await;
                    assert!(
                        !out.ended,
                        "{containment:?}: ended before {want:?}: {seen:?}"
                    );
                    seen.push_str(&String::from_utf8_lossy(&out.stdout.data));
                    next = out.next();
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            interrupts += 3;
            s.signal(SessionSignal::Terminate);
            let _ = s.wait().await;
        }
    }
    // The records are published at settlement; other tests of this binary
    // may record too.
    let runs: Vec<RecordedRun> = custodian::__bench::take_process_runs()
        .into_iter()
        .filter(|r| pids.contains(&r.pid))
        .collect();
    custodian::__bench::record_process_runs(false);
    assert_eq!(runs.len(), pids.len(), "every run was recorded: {runs:?}");
    let mut kills = 0;
    let mut targets = std::collections::HashSet::new();
    for run in &runs {
        eprintln!(
            "{:?} / {:?}: {} inputs, {:?}",
            run.tier,
            run.kill_target,
            run.inputs.len(),
            run.effects
        );
        if let Err(e) = check_replay(run) {
            panic!("{e}\nthe run: {run:?}");
        }
        kills += run
            .effects
            .iter()
            .filter(|e| matches!(e, Effect::GroupSignal(Signal::Kill) | Effect::CgroupKill))
            .count();
        targets.insert(run.kill_target);
    }
    // The control: the runs did signal and kill, in more than one tier,
    // and forwarded every interrupt asked for.
    assert!(kills >= 2, "only {kills} kills among {runs:?}");
    let forwarded = runs
        .iter()
        .flat_map(|r| &r.effects)
        .filter(|e| **e == Effect::GroupSignal(Signal::Int))
        .count();
    assert_eq!(forwarded, interrupts, "interrupts forwarded");
    assert!(targets.len() >= 2, "one kill target only: {targets:?}");
}

/// The replay check can fail: a `TERM` after the reaping (the driver
/// signalling a group whose id may be someone else's), a `KILL` the
/// machine did not decide, a second reaping, a kill of leftovers before the
/// reaping: each is caught.
#[test]
fn the_replay_catches_an_effect_the_machine_did_not_decide() {
    let run = || {
        let limits = m::ProcessLimits {
            timeout: Duration::from_millis(300),
            grace: Duration::from_millis(300),
            drain: Duration::from_millis(200),
            hard_margin: Duration::from_millis(300),
        };
        let mut r = custodian::__bench::RecordedRun::new(
            4242,
            m::Tier::PinnedGroup,
            limits,
            KillTarget::Group,
        );
        r.inputs = vec![
            (Some(m::Event::DeadlineReached), Duration::from_millis(300)),
            (
                Some(m::Event::RootExited(m::ExitStatus::Signal(15))),
                Duration::from_millis(310),
            ),
            (
                Some(m::Event::StreamClosed(m::Stream::Stdout)),
                Duration::from_millis(311),
            ),
            (
                Some(m::Event::StreamClosed(m::Stream::Stderr)),
                Duration::from_millis(311),
            ),
            (
                Some(m::Event::GroupProbed(m::Probe::Empty)),
                Duration::from_millis(312),
            ),
        ];
        r
    };
    let mut good = run();
    good.effects = replay(&good);
    assert!(
        good.effects.contains(&Effect::GroupSignal(Signal::Term))
            && good.effects.last() == Some(&Effect::Reap),
        "the scenario signals and reaps: {good:?}"
    );
    check_replay(&good).unwrap();
    let mutants: [fn(&mut Vec<Effect>); 4] = [
        |e| e.push(Effect::GroupSignal(Signal::Term)),
        |e| e.insert(1, Effect::GroupSignal(Signal::Kill)),
        |e| e.push(Effect::Reap),
        |e| e.insert(0, Effect::LeftoverKill),
    ];
    for (i, plant) in mutants.iter().enumerate() {
        let mut bad = run();
        bad.effects = good.effects.clone();
        plant(&mut bad.effects);
        assert!(
            check_replay(&bad).is_err(),
            "mutant {i} not caught: {bad:?}"
        );
    }
}
