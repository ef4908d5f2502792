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

use std::path::Path;
use std::process::Command;

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
