//! Timeout ladder, held pipes, escapes, cancel and drop.

use std::time::{Duration, Instant};

use custodian::process::evidence::{
    DescendantVerdict, EscalationAction, EscalationReason, ProcessStatus, SignalTarget,
    VerdictReason,
};
use custodian::process::{launch, run};

use crate::common::*;

const SHORT: Duration = Duration::from_millis(300);

#[tokio::test]
async fn term_respecting_child_settles_on_term_without_kill() {
    let _quiet = quiet_host();
    let r = launch(inv("sleep", &["30"], SHORT), &group_opts()).unwrap();
    let ev = r.settled().await;
    assert_eq!(ev.status, ProcessStatus::TimedOut);
    assert_eq!(ev.signal, Some(15));
    let steps: Vec<_> = ev.escalation.iter().map(|s| s.action).collect();
    assert_eq!(steps, [EscalationAction::Term]);
    assert_eq!(ev.escalation[0].reason, EscalationReason::Timeout);
    assert_group_confirmed_empty(&ev);
    assert!(ev.timings.kill_sent_us.is_none());
    assert_no_leftovers(r.pgid());
}

#[tokio::test]
async fn term_ignoring_child_is_killed_after_the_grace() {
    let _quiet = quiet_host();
    // `trap "" TERM` is inherited through exec: the sleeps ignore it too.
    let script = "trap '' TERM; echo ready; while :; do sleep 0.05; done";
    let r = launch(sh(script, SHORT), &group_opts()).unwrap();
    let ev = r.settled().await;
    assert_eq!(ev.status, ProcessStatus::TimedOut);
    assert_eq!(ev.signal, Some(9));
    let steps: Vec<_> = ev.escalation.iter().map(|s| s.action).collect();
    assert_eq!(steps, [EscalationAction::Term, EscalationAction::Kill]);
    let grace = ev.timings.grace_us.unwrap();
    assert!(
        grace >= TUN.grace.as_micros() as u64,
        "KILL before the grace: {grace}"
    );
    assert_eq!(ev.stdout.text, "ready\n");
    assert_group_confirmed_empty(&ev);
    assert_no_leftovers(r.pgid());
}

#[tokio::test]
async fn grandchild_ignoring_term_does_not_survive_its_root() {
    let _quiet = quiet_host();
    // The root dies on TERM at once; its grandchild ignores TERM and holds
    // no pipe. Only a pinned group lets KILL reach it after the root exit.
    let script = "(trap '' TERM; exec sleep 30) >/dev/null 2>&1 & echo $!; wait";
    let r = launch(sh(script, SHORT), &group_opts()).unwrap();
    let ev = r.settled().await;
    let grandchild: u32 = ev.stdout.text.trim().parse().unwrap();
    assert_eq!(ev.status, ProcessStatus::TimedOut);
    let steps: Vec<_> = ev.escalation.iter().map(|s| s.action).collect();
    assert_eq!(steps, [EscalationAction::Term, EscalationAction::Kill]);
    assert!(ev.timings.root_exit_us.unwrap() < ev.timings.kill_sent_us.unwrap());
    assert!(!alive(grandchild), "grandchild {grandchild} survived");
    assert_group_confirmed_empty(&ev);
    assert_no_leftovers(r.pgid());
}

#[tokio::test]
async fn grandchild_holding_stdout_and_ignoring_term_is_killed() {
    let script = "(trap '' TERM; exec sleep 30) & echo $!; wait";
    let r = launch(sh(script, SHORT), &group_opts()).unwrap();
    let ev = r.settled().await;
    let grandchild: u32 = ev.stdout.text.trim().parse().unwrap();
    assert!(!alive(grandchild), "grandchild {grandchild} survived");
    assert_ne!(ev.descendants.verdict, DescendantVerdict::Terminated);
    assert_no_leftovers(r.pgid());
}

#[tokio::test]
async fn background_sleep_holding_stdout_returns_within_the_drain_bound() {
    let t0 = Instant::now();
    // The sleep holds stdout only: stderr closes with the root.
    let r = launch(
        sh(
            "echo partial; sleep 30 2>/dev/null &",
            Duration::from_secs(20),
        ),
        &group_opts(),
    )
    .unwrap();
    let ev = r.settled().await;
    let took = t0.elapsed();
    // Drain bound, then TERM to the group ends the sleep: far from 30 s.
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(Duration::from_micros(ev.timings.drain_us.unwrap()) >= TUN.drain);
    assert_eq!(ev.status, ProcessStatus::Exited);
    assert_eq!(ev.exit_code, Some(0));
    assert_eq!(ev.stdout.text, "partial\n");
    assert_eq!(
        serde_json::to_value(ev.stdout.state).unwrap(),
        serde_json::json!("held_open")
    );
    assert_eq!(
        serde_json::to_value(ev.stderr.state).unwrap(),
        serde_json::json!("closed")
    );
    assert_eq!(
        ev.descendants.verdict,
        DescendantVerdict::UnconfirmedOrEscaped
    );
    // One stream held is enough to say so.
    assert!(
        ev.descendants
            .reasons
            .contains(&VerdictReason::StdioHeldOpen),
        "{ev:?}"
    );
    // At the drain bound the held pipe starts the ladder: one `TERM` to
    // the group, which ends the sleep and closes the pipe (nothing cut).
    let steps: Vec<_> = ev.escalation.iter().map(|s| (s.action, s.reason)).collect();
    assert_eq!(
        steps,
        [(EscalationAction::Term, EscalationReason::GroupCleanup)],
        "{ev:?}"
    );
    assert_no_leftovers(r.pgid());
}

#[tokio::test]
async fn setsid_escapee_is_never_reported_terminated() {
    // `setsid` leaves the group; the escapee keeps stdout open.
    let script = "setsid sleep 30 & echo $!";
    let r = launch(sh(script, Duration::from_secs(20)), &group_opts()).unwrap();
    let ev = r.settled().await;
    let escapee: u32 = ev.stdout.text.trim().parse().unwrap();
    let escaped = alive(escapee);
    // Clean up before asserting so a failure leaves nothing behind.
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &escapee.to_string()])
        .status();
    assert!(
        escaped,
        "the escapee should have outlived the group signals"
    );
    assert_eq!(
        ev.descendants.verdict,
        DescendantVerdict::UnconfirmedOrEscaped
    );
    assert!(
        ev.descendants
            .reasons
            .contains(&VerdictReason::StdioHeldOpen)
    );
    // Either the group was found empty (and the tier says it cannot see a
    // descendant that left it), or a busy host never let a scan through
    // quietly: both are honest, neither is `terminated`.
    assert!(
        ev.descendants.reasons.iter().any(|r| matches!(
            r,
            VerdictReason::MayHaveLeftGroup | VerdictReason::GroupEmptinessUnknown
        )),
        "{:?}",
        ev.descendants
    );
    assert_no_leftovers(r.pgid());
}

#[tokio::test]
async fn double_fork_holding_stdout_is_unconfirmed_and_stopped() {
    let script = "(sleep 30 & echo $!); echo done";
    let r = launch(sh(script, Duration::from_secs(20)), &group_opts()).unwrap();
    let ev = r.settled().await;
    let orphan: u32 = ev.stdout.text.lines().next().unwrap().parse().unwrap();
    assert!(!alive(orphan), "double-forked {orphan} survived");
    assert_eq!(ev.status, ProcessStatus::Exited);
    assert_eq!(
        ev.descendants.verdict,
        DescendantVerdict::UnconfirmedOrEscaped
    );
    assert_no_leftovers(r.pgid());
}

#[tokio::test]
async fn silent_double_fork_left_in_the_group_is_stopped_and_confirmed() {
    let _quiet = quiet_host();
    let script = "(sleep 30 >/dev/null 2>&1 & echo $! >&2); echo done";
    let r = launch(sh(script, Duration::from_secs(20)), &group_opts()).unwrap();
    let ev = r.settled().await;
    let orphan: u32 = ev.stderr.text.trim().parse().unwrap();
    assert!(!alive(orphan), "double-forked {orphan} survived");
    assert_eq!(ev.status, ProcessStatus::Exited);
    assert_eq!(ev.escalation[0].action, EscalationAction::Term);
    assert_eq!(ev.escalation[0].reason, EscalationReason::GroupCleanup);
    // Confirmed by the probe after TERM: the group is empty, nothing held
    // a pipe (the group tier still cannot say `terminated`).
    assert_group_confirmed_empty(&ev);
    assert_no_leftovers(r.pgid());
}

/// A probe that finds the group occupied rescans for at most half the
/// grace (under 250 ms) before answering: with a 120 ms grace, the `TERM`
/// to a silent member left in the group follows the root's exit by about
/// 60 ms, never the 240 ms of twice the grace.
#[tokio::test]
async fn a_probe_of_an_occupied_group_answers_within_half_the_grace() {
    use custodian::process::invocation::Tunables;
    let _quiet = quiet_host();
    let script = "(sleep 30 >/dev/null 2>&1 &); echo done";
    let inv = custodian::process::Invocation::validate(spec("sh", &["-c", script]).with_tunables(
        Tunables {
            grace: Duration::from_millis(120),
            ..TUN
        },
    ))
    .unwrap();
    let r = launch(inv, &group_opts()).unwrap();
    let ev = r.settled().await;
    assert_eq!(ev.escalation[0].reason, EscalationReason::GroupCleanup);
    // The root had exited: its unreaped zombie pins the group signalled.
    assert_eq!(
        ev.escalation[0].target,
        Some(SignalTarget::PinnedProcessGroup),
        "{ev:?}"
    );
    let t = &ev.timings;
    let (exited, term) = (t.root_exit_us.unwrap(), t.term_sent_us.unwrap());
    assert!(term - exited < 240_000, "{}", ev.to_json());
    assert_no_leftovers(r.pgid());
}

#[tokio::test]
async fn clean_exit_with_a_code_is_a_completed_result() {
    let _quiet = quiet_host();
    let ev = run(sh("echo out; echo err >&2; exit 3", SHORT), &group_opts())
        .await
        .unwrap();
    assert_eq!(ev.status, ProcessStatus::Exited);
    assert_eq!(ev.exit_code, Some(3));
    assert_eq!(ev.stdout.text, "out\n");
    assert_eq!(ev.stderr.text, "err\n");
    assert!(ev.escalation.is_empty());
    assert_group_confirmed_empty(&ev);
    assert_eq!(
        ev.invocation.argv,
        ["sh", "-c", "echo out; echo err >&2; exit 3"]
    );
    assert!(ev.invocation.executable.ends_with("/sh"));
}

#[tokio::test]
async fn a_child_reading_stdin_gets_eof() {
    let r = launch(inv("cat", &[], Duration::from_secs(10)), &opts()).unwrap();
    let ev = r.settled().await;
    assert_eq!(ev.status, ProcessStatus::Exited);
    assert_eq!(ev.exit_code, Some(0));
    assert!(ev.escalation.is_empty());
    assert_no_leftovers(r.pgid());
}

#[tokio::test]
async fn cancel_runs_the_ladder_and_every_waiter_sees_the_same_evidence() {
    let r = launch(inv("sleep", &["30"], Duration::from_secs(30)), &opts()).unwrap();
    let other = r.clone();
    let early = tokio::spawn(async move { other.settled().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(r.try_settled().is_none());
    r.cancel();
    r.cancel();
    let ev = r.settled().await;
    assert_eq!(ev.status, ProcessStatus::Cancelled);
    assert_eq!(ev.escalation.len(), 1);
    assert_eq!(ev.escalation[0].reason, EscalationReason::Cancel);
    let early = early.await.unwrap();
    assert!(std::sync::Arc::ptr_eq(&ev, &early));
    let late = r.settled().await;
    assert!(std::sync::Arc::ptr_eq(&ev, &late));
    r.cancel(); // after settlement: nothing happens
    assert_no_leftovers(r.pgid());
}

#[tokio::test]
async fn dropping_every_handle_still_settles_and_reaps() {
    let r = launch(inv("sleep", &["30"], SHORT), &opts()).unwrap();
    let pid = r.pid();
    drop(r);
    assert!(alive(pid));
    assert!(
        eventually(|| stat(pid).is_none_or(|(_, pg)| pg != pid)).await,
        "root {pid} was not reaped after its handle was dropped"
    );
    assert_no_leftovers(pid);
}

#[tokio::test]
async fn dropping_the_run_future_still_settles_and_reaps() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > '{}'; exec sleep 30", pidfile.display());
    let options = opts();
    let fut = run(sh(&script, SHORT), &options);
    // Poll it until the child has started, then drop it.
    let mut fut = Box::pin(fut);
    let started = tokio::select! {
        _ = &mut fut => false,
        ok = eventually(|| std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))) => ok,
    };
    assert!(started);
    drop(fut);
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid));
    assert!(
        eventually(|| stat(pid).is_none_or(|(_, pg)| pg != pid)).await,
        "root {pid} was not reaped after the run future was dropped"
    );
    assert_no_leftovers(pid);
}

#[test]
fn shutting_the_runtime_down_still_settles_and_stops_the_group() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt
        .block_on(async { launch(inv("sleep", &["30"], Duration::from_secs(30)), &opts()) })
        .unwrap();
    let pid = r.pid();
    assert!(r.try_settled().is_none());
    // Dropping the runtime drops the driver task before it settled.
    drop(rt);
    let ev = r.try_settled().expect("settled by the driver's drop");
    assert_eq!(ev.status, ProcessStatus::Cancelled);
    assert_ne!(ev.descendants.verdict, DescendantVerdict::Terminated);
    // Killed and reaped by the drop itself: no zombie, no live member.
    assert_no_leftovers(pid);
}
