//! `custodian run` under its host's stop signals: SIGTERM, SIGINT or SIGHUP
//! while the process runs cancels it (TERM to the tree, the shutdown grace,
//! KILL of the whole tree), reaps it, removes its cgroup, prints its one
//! evidence object (`status: cancelled`, `cancel_cause` naming the signal)
//! and exits `128 + N`; a second signal skips none of it.
//!
//! Every process of a tree carries a unique marker argument, so what is left
//! is found in `/proc/*/cmdline` whatever other tests run meanwhile. The
//! time each stop took is printed, and asserted only generously: it is a
//! figure for the benchmark, not a bound of the test.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use custodian::contain::{Hierarchy, process_cgroup};
use rustix::process::{Pid, Signal, kill_process};

use crate::marker::{Marker, holding};

/// Far above any stop on a loaded machine; the figure is printed.
const GENEROUS: Duration = Duration::from_secs(20);

/// A tree that dies on SIGTERM: a background `sleep` and a foreground one.
const HONOURS_TERM: &str = "sleep \"$1\" & sleep \"$1\"";
/// A tree that ignores SIGTERM (the `sleep`s inherit the ignored signal):
/// only the KILL after the shutdown grace ends it.
const IGNORES_TERM: &str = "trap '' TERM; sleep \"$1\" & sleep \"$1\"";

/// The processes of the tree (not custodian itself) holding `marker`.
fn tree(marker: &str, custodian: u32) -> Vec<u32> {
    holding(marker)
        .into_iter()
        .filter(|&(pid, _)| pid != custodian)
        .map(|(pid, _)| pid)
        .collect()
}

/// Whether this host lets us create cgroups; prints why not.
fn cgroups() -> bool {
    match process_cgroup() {
        Ok(cg) => {
            cg.remove().expect("an unused cgroup is removable");
            true
        }
        Err(e) => {
            eprintln!(
                "no writable cgroup v2 here ({}): auto is the group tier",
                e.code()
            );
            false
        }
    }
}

/// The cgroup v2 directory `pid` is in.
fn cgroup_of(pid: u32) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let rel = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let h = Hierarchy::discover().ok()?;
    Some(h.mount.join(rel.trim_start_matches('/')))
}

/// One `custodian run` of `script` with its marker, started.
struct Run {
    child: Child,
    /// Stderr, read on the side: its lines as they come, and all of it.
    stderr_lines: std::sync::mpsc::Receiver<String>,
    stderr: std::thread::JoinHandle<Vec<u8>>,
    marker: Marker,
    /// The tree, once it was seen whole.
    members: Vec<u32>,
    /// The per-process cgroup the tree ran in (cgroup tier only).
    cgroup: Option<PathBuf>,
}

impl Run {
    /// Starts `custodian run ARGS -- sh -c SCRIPT sh MARKER` and waits until
    /// both `sleep`s run (so custodian has caught its signals: it does so
    /// before the launch).
    fn start(args: &[&str], script: &str) -> Run {
        let marker = Marker::new();
        let mut child = Command::new(env!("CARGO_BIN_EXE_custodian"))
            // The request machine's transitions, on stderr.
            .env("CUSTODIAN_LOG", "custodian::request=debug")
            .arg("run")
            .args(args)
            .args(["--", "sh", "-c", script, "sh", &marker.0])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pipe = child.stderr.take().unwrap();
        let (lines_tx, stderr_lines) = std::sync::mpsc::channel::<String>();
        let stderr = std::thread::spawn(move || {
            use std::io::BufRead;
            let mut all = Vec::new();
            for line in std::io::BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                all.extend_from_slice(line.as_bytes());
                all.push(b'\n');
                let _ = lines_tx.send(line);
            }
            all
        });
        let mut run = Run {
            child,
            stderr_lines,
            stderr,
            marker,
            members: Vec::new(),
            cgroup: None,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let members = holding(&run.marker.0);
            // Both `sleep`s (the root `sh` may have become the second).
            let sleeps = members
                .iter()
                .filter(|(_, argv)| argv.first().is_some_and(|a| a == "sleep"))
                .count();
            if sleeps == 2 {
                run.members = tree(&run.marker.0, run.child.id());
                break;
            }
            // The marker's drop kills what started.
            assert!(
                Instant::now() < deadline,
                "the tree never started: {:?}",
                holding(&run.marker.0)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        run.cgroup = run.members.iter().find_map(|&p| cgroup_of(p));
        run
    }

    fn signal(&self, sig: Signal) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).unwrap()).unwrap();
        kill_process(pid, sig).unwrap();
    }

    /// Waits until custodian wrote a stderr line holding `needle` (it took
    /// a signal: signals pending together have no order, so a "second"
    /// signal is one sent after the first was acknowledged).
    fn wait_for_stderr(&self, needle: &str) {
        loop {
            match self.stderr_lines.recv_timeout(Duration::from_secs(30)) {
                Ok(line) if line.contains(needle) => return,
                Ok(_) => {}
                Err(e) => panic!("no stderr line with {needle:?}: {e}"),
            }
        }
    }

    /// Waits for custodian to exit, printing how long the stop took.
    fn finish(self, what: &str, since: Instant) -> Finished {
        let Run {
            child,
            stderr,
            marker,
            members,
            cgroup,
            ..
        } = self;
        let pid = child.id();
        let mut out = child.wait_with_output().unwrap();
        out.stderr = stderr.join().unwrap();
        let took = since.elapsed();
        eprintln!("{what}: stopped in {took:?}");
        Finished {
            out,
            took,
            marker,
            members,
            cgroup,
            pid,
        }
    }
}

struct Finished {
    out: Output,
    took: Duration,
    marker: Marker,
    members: Vec<u32>,
    cgroup: Option<PathBuf>,
    pid: u32,
}

impl Finished {
    /// The one evidence object on stdout, one compact line, valid against
    /// the schema.
    fn evidence(&self) -> serde_json::Value {
        let text = std::str::from_utf8(&self.out.stdout).unwrap();
        assert_eq!(
            text.matches('\n').count(),
            1,
            "not one line: {:?}",
            self.out
        );
        let v: serde_json::Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {:?}", self.out));
        let errors: Vec<String> = crate::common::evidence_schema()
            .iter_errors(&v)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{errors:?}\n{v}");
        v
    }

    /// Nothing of the tree is alive; in the cgroup tier its cgroup is gone.
    fn assert_nothing_left(&self, ev: &serde_json::Value) {
        // A member just sent SIGKILL is listed while the kernel tears it
        // down (custodian already saw it dead or dying): a bounded moment.
        let mut left = tree(&self.marker.0, self.pid);
        for _ in 0..100 {
            if left.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
            left = tree(&self.marker.0, self.pid);
        }
        // The marker's drop kills what is left.
        assert!(
            left.is_empty(),
            "left alive: {left:?} (tree {:?}) after {ev}",
            self.members
        );
        if ev["descendants"]["tier"] == "cgroup" {
            let dir = self.cgroup.as_ref().expect("the tree's cgroup was read");
            assert!(
                dir.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('p')),
                "not a per-process cgroup: {dir:?}"
            );
            assert!(!dir.exists(), "cgroup {dir:?} was left behind");
            assert_eq!(ev["descendants"]["cgroup_removal"], "removed", "{ev}");
        }
    }
}

fn stop_signal_name(sig: Signal) -> &'static str {
    match sig {
        Signal::TERM => "SIGTERM",
        Signal::INT => "SIGINT",
        Signal::HUP => "SIGHUP",
        _ => unreachable!("not a stop signal"),
    }
}

/// `sig` mid-run, for a tree that honours TERM and one that ignores it.
fn stops_on(sig: Signal, containment: &str) {
    let _quiet = crate::common::quiet_host();
    let auto_is_cgroup = containment == "auto" && cgroups();
    let name = stop_signal_name(sig);
    let code = 128 + sig.as_raw();
    for (script, ignores) in [(HONOURS_TERM, false), (IGNORES_TERM, true)] {
        let what = format!(
            "{name}, --containment {containment}, TERM {}",
            if ignores { "ignored" } else { "honoured" }
        );
        // The invocation's own grace is long: only the shutdown grace can
        // make the stop quick.
        let run = Run::start(
            &[
                "--containment",
                containment,
                "--grace",
                "30s",
                "--shutdown-grace",
                "300ms",
            ],
            script,
        );
        let cgroup = run.cgroup.clone();
        let at = Instant::now();
        run.signal(sig);
        let done = run.finish(&what, at);
        let ev = done.evidence();
        assert_eq!(done.out.status.code(), Some(code), "{what}: {:?}", done.out);
        assert_eq!(ev["status"], "cancelled", "{what}: {ev}");
        assert_eq!(
            ev["cancel_cause"],
            serde_json::json!({"kind": "signal", "signal": sig.as_raw(), "name": name}),
            "{what}: {ev}"
        );
        let steps: Vec<(&str, &str)> = ev["escalation"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["action"].as_str().unwrap(), s["reason"].as_str().unwrap()))
            .collect();
        assert_eq!(steps.first(), Some(&("term", "cancel")), "{what}: {ev}");
        if ignores {
            // Only the KILL after the grace ends a tree that ignores TERM.
            assert_eq!(ev["signal"], 9, "{what}: {ev}");
            assert!(steps.contains(&("kill", "grace_expired")), "{what}: {ev}");
        } else {
            assert_eq!(ev["signal"], 15, "{what}: {ev}");
        }
        if auto_is_cgroup {
            assert_eq!(ev["descendants"]["tier"], "cgroup", "{what}: {ev}");
            assert!(cgroup.is_some(), "{what}: no cgroup read");
        } else {
            assert_ne!(ev["descendants"]["tier"], "cgroup", "{what}: {ev}");
        }
        done.assert_nothing_left(&ev);
        assert!(done.took < GENEROUS, "{what}: took {:?}", done.took);
        let stderr = String::from_utf8_lossy(&done.out.stderr);
        assert!(stderr.contains(name), "{what}: {stderr}");
        // The signal is the run's request's caller cancel: the request
        // machine decided the stop, and the request completed before the
        // evidence was written.
        crate::common::assert_one_request(&done.out.stderr, "Candidate(CallerCancel)", &what);
    }
}

#[test]
fn sigterm_mid_run_cancels_the_whole_tree_with_auto_containment() {
    stops_on(Signal::TERM, "auto");
}

#[test]
fn sigint_mid_run_cancels_the_whole_tree_with_auto_containment() {
    stops_on(Signal::INT, "auto");
}

#[test]
fn sighup_mid_run_cancels_the_whole_tree_with_auto_containment() {
    stops_on(Signal::HUP, "auto");
}

#[test]
fn sigterm_mid_run_cancels_the_whole_tree_with_group_containment() {
    stops_on(Signal::TERM, "group");
}

#[test]
fn sigint_mid_run_cancels_the_whole_tree_with_group_containment() {
    stops_on(Signal::INT, "group");
}

#[test]
fn sighup_mid_run_cancels_the_whole_tree_with_group_containment() {
    stops_on(Signal::HUP, "group");
}

/// SIGINT and SIGHUP during the grace that followed a SIGTERM: the KILL, the
/// reaping, the cgroup's removal and the evidence of the first all come.
fn a_second_signal_changes_nothing(containment: &str) {
    let _quiet = crate::common::quiet_host();
    let what = format!("SIGTERM then SIGINT and SIGHUP, --containment {containment}");
    // A grace long enough that the later signals surely land inside it.
    let run = Run::start(
        &[
            "--containment",
            containment,
            "--grace",
            "30s",
            "--shutdown-grace",
            "1s",
        ],
        IGNORES_TERM,
    );
    let at = Instant::now();
    run.signal(Signal::TERM);
    run.wait_for_stderr("stopping the process");
    std::thread::sleep(Duration::from_millis(100));
    run.signal(Signal::INT);
    run.signal(Signal::HUP);
    let done = run.finish(&what, at);
    let ev = done.evidence();
    assert_eq!(done.out.status.code(), Some(143), "{what}: {:?}", done.out);
    assert_eq!(ev["status"], "cancelled", "{what}: {ev}");
    assert_eq!(ev["cancel_cause"]["name"], "SIGTERM", "{what}: {ev}");
    assert_eq!(ev["signal"], 9, "{what}: {ev}");
    done.assert_nothing_left(&ev);
    assert!(done.took < GENEROUS, "{what}: took {:?}", done.took);
    let stderr = String::from_utf8_lossy(&done.out.stderr);
    assert!(stderr.contains("already stopping"), "{what}: {stderr}");
}

#[test]
fn a_second_signal_during_the_grace_skips_no_cleanup_with_auto_containment() {
    a_second_signal_changes_nothing("auto");
}

#[test]
fn a_second_signal_during_the_grace_skips_no_cleanup_with_group_containment() {
    a_second_signal_changes_nothing("group");
}

/// The must-show, verbatim: `custodian run -- sh -c 'sleep 300 &
/// sleep 300'` killed with SIGTERM after 0.5 s prints one evidence object
/// with `status: cancelled` and leaves no `sleep 300` alive. The `sleep`s
/// are told from any other `sleep 300` on the host by their ancestry.
#[test]
fn sigterm_after_half_a_second_leaves_no_sleep_300_alive() {
    let _quiet = crate::common::quiet_host();
    let child = Command::new(env!("CARGO_BIN_EXE_custodian"))
        .args(["run", "--", "sh", "-c", "sleep 300 & sleep 300"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // On a loaded host the tree may take longer to start.
    let mut sleeps = descendants(child.id());
    for _ in 0..500 {
        if sleeps.len() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        sleeps = descendants(child.id());
    }
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    let at = Instant::now();
    kill_process(pid, Signal::TERM).unwrap();
    let out = child.wait_with_output().unwrap();
    eprintln!("must-show: stopped in {:?}", at.elapsed());
    // Whatever fails below, these sleeps do not outlive the test.
    let _guard = Sleeps300(sleeps.clone());
    let text = std::str::from_utf8(&out.stdout).unwrap();
    assert_eq!(text.matches('\n').count(), 1, "not one object: {out:?}");
    let ev: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(ev["status"], "cancelled", "{ev}");
    assert_eq!(out.status.code(), Some(143), "{out:?}");
    assert_eq!(sleeps.len(), 2, "the two sleeps ran: {sleeps:?}");
    for p in sleeps {
        let argv = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        assert!(
            !argv.starts_with(b"sleep\x00300\x00"),
            "sleep 300 ({p}) is alive"
        );
    }
}

/// Kills those of its pids that are still a `sleep 300` when dropped.
struct Sleeps300(Vec<u32>);

impl Drop for Sleeps300 {
    fn drop(&mut self) {
        for &p in &self.0 {
            let argv = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            if argv.starts_with(b"sleep\x00300\x00") {
                if let Some(pid) = Pid::from_raw(p as i32) {
                    let _ = kill_process(pid, Signal::KILL);
                }
            }
        }
    }
}

/// The live `sleep` processes descended from `root`.
fn descendants(root: u32) -> Vec<u32> {
    let parent = |pid: u32| -> Option<u32> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        s[s.rfind(')')? + 1..]
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    holding("300")
        .into_iter()
        .filter(|(_, argv)| argv.first().is_some_and(|a| a == "sleep"))
        .map(|(pid, _)| pid)
        .filter(|&pid| {
            let mut p = pid;
            for _ in 0..16 {
                match parent(p) {
                    Some(q) if q == root => return true,
                    Some(q) if q > 1 => p = q,
                    _ => return false,
                }
            }
            false
        })
        .collect()
}

/// What the evidence's grace was (TERM to KILL), in milliseconds.
fn grace_ms(ev: &custodian::process::Evidence) -> u64 {
    ev.timings.grace_us.expect("TERM and KILL were sent") / 1000
}

/// A tree that ignores TERM, with a 30 s grace of its own.
fn long_grace(script: &str, timeout: Duration) -> custodian::process::Invocation {
    use custodian::process::invocation::Tunables;
    custodian::process::Invocation::validate(
        crate::common::spec("sh", &["-c", script])
            .with_timeout(timeout)
            .with_tunables(Tunables {
                grace: Duration::from_secs(30),
                ..crate::common::TUN
            }),
    )
    .unwrap()
}

/// `cancel_within` is what `custodian run` calls on a stop signal: the KILL
/// comes after the short grace, not the invocation's.
#[tokio::test]
async fn cancel_within_kills_after_the_short_grace_not_the_invocations() {
    use custodian::process::evidence::{EscalationReason, ProcessStatus};
    let _quiet = crate::common::quiet_host();
    let script = "trap '' TERM; while :; do sleep 0.05; done";
    let r = custodian::process::launch(
        long_grace(script, Duration::from_secs(60)),
        &crate::common::group_opts(),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    r.cancel_within(Duration::from_millis(200));
    let ev = tokio::time::timeout(GENEROUS, r.settled())
        .await
        .expect("settled long before the invocation's 30 s grace");
    eprintln!("cancel_within(200ms): grace {} ms", grace_ms(&ev));
    assert_eq!(ev.status, ProcessStatus::Cancelled);
    assert_eq!(ev.signal, Some(9));
    assert!(grace_ms(&ev) < 10_000, "{}", ev.to_json());
    assert_eq!(ev.escalation[0].reason, EscalationReason::Cancel);
    crate::common::assert_no_leftovers(r.pgid());
}

/// A ladder already climbing (a plain cancel, a timeout) is shortened: its
/// KILL comes at most the short grace after its TERM, and the first cause
/// stays the status.
#[tokio::test]
async fn cancel_within_shortens_a_ladder_already_climbing() {
    use custodian::process::evidence::ProcessStatus;
    let _quiet = crate::common::quiet_host();
    let script = "trap '' TERM; while :; do sleep 0.05; done";
    for (timeout, status) in [
        (Duration::from_secs(60), ProcessStatus::Cancelled),
        (Duration::from_millis(100), ProcessStatus::TimedOut),
    ] {
        let r =
            custodian::process::launch(long_grace(script, timeout), &crate::common::group_opts())
                .unwrap();
        if status == ProcessStatus::Cancelled {
            tokio::time::sleep(Duration::from_millis(100)).await;
            r.cancel();
        }
        // TERM sent (by the cancel or the timeout), the 30 s grace running.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(r.try_settled().is_none(), "TERM is ignored");
        r.cancel_within(Duration::from_millis(100));
        let ev = tokio::time::timeout(GENEROUS, r.settled())
            .await
            .expect("settled long before the invocation's 30 s grace");
        eprintln!(
            "{status:?}, then cancel_within(100ms): grace {} ms",
            grace_ms(&ev)
        );
        assert_eq!(ev.status, status, "{}", ev.to_json());
        assert_eq!(ev.signal, Some(9), "{}", ev.to_json());
        assert!(grace_ms(&ev) < 10_000, "{}", ev.to_json());
        crate::common::assert_no_leftovers(r.pgid());
    }
}

/// `cancel_within` only ever shortens: a grace longer than the
/// invocation's leaves the invocation's (300 ms here). On a ladder already
/// climbing, the short grace counts from the `TERM`: asked 1 s for soon
/// after the `TERM`, the `KILL` comes a second after it, not at once, and
/// the hard deadline keeps its whole margin after that `KILL`, so the
/// streams close on their own (nothing cut, no `close_streams` step).
#[tokio::test]
async fn cancel_within_never_lengthens_the_grace_and_counts_from_the_term() {
    use custodian::process::capture::StreamEnd;
    use custodian::process::evidence::{EscalationAction, ProcessStatus, StepOutcome};
    let _quiet = crate::common::quiet_host();
    let script = "trap '' TERM; while :; do sleep 0.05; done";
    let r = custodian::process::launch(
        crate::common::sh(script, Duration::from_secs(60)),
        &crate::common::group_opts(),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    r.cancel_within(Duration::from_secs(60));
    let ev = tokio::time::timeout(GENEROUS, r.settled())
        .await
        .expect("settled after the invocation's grace, not the 60 s asked for");
    assert_eq!(ev.status, ProcessStatus::Cancelled, "{}", ev.to_json());
    assert!(grace_ms(&ev) < 10_000, "{}", ev.to_json());
    crate::common::assert_no_leftovers(r.pgid());

    let r = custodian::process::launch(
        long_grace(script, Duration::from_secs(60)),
        &crate::common::group_opts(),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    r.cancel();
    tokio::time::sleep(Duration::from_millis(50)).await;
    r.cancel_within(Duration::from_secs(1));
    let ev = tokio::time::timeout(GENEROUS, r.settled())
        .await
        .expect("settled long before the invocation's 30 s grace");
    assert_eq!(ev.status, ProcessStatus::Cancelled, "{}", ev.to_json());
    assert_eq!(ev.signal, Some(9), "{}", ev.to_json());
    let grace = grace_ms(&ev);
    assert!((1000..10_000).contains(&grace), "{}", ev.to_json());
    assert_eq!(ev.stdout.state, StreamEnd::Closed, "{}", ev.to_json());
    assert_eq!(ev.stderr.state, StreamEnd::Closed, "{}", ev.to_json());
    assert!(
        ev.escalation
            .iter()
            .all(|s| s.action != EscalationAction::CloseStreams
                && s.outcome != StepOutcome::Failed),
        "{}",
        ev.to_json()
    );
    crate::common::assert_no_leftovers(r.pgid());
}

/// A confined run's private `TMPDIR` is removed before custodian exits on a
/// stop signal, like its cgroup.
#[test]
fn a_stop_signal_removes_the_private_tmpdir() {
    let _quiet = crate::common::quiet_host();
    let probe = Command::new(env!("CARGO_BIN_EXE_custodian"))
        .args(["run", "--confine", "read-only", "--", "true"])
        .output()
        .unwrap();
    if probe.status.code() != Some(0) {
        skipped!(
            "read-only confinement is not enforceable here: {}",
            String::from_utf8_lossy(&probe.stdout)
        );
        return;
    }
    let marker = format!("custodian-stop-probe-{}", std::process::id());
    let run = Run::start(
        &["--confine", "read-only"],
        &format!("echo t > \"$TMPDIR/{marker}\"; echo \"$TMPDIR\"; sleep \"$1\" & sleep \"$1\""),
    );
    let at = Instant::now();
    run.signal(Signal::TERM);
    let done = run.finish("SIGTERM, --confine read-only", at);
    let ev = done.evidence();
    assert_eq!(done.out.status.code(), Some(143), "{:?}", done.out);
    assert_eq!(ev["status"], "cancelled", "{ev}");
    assert_eq!(ev["confinement"]["private_tmp"], true, "{ev}");
    // Isolated, the TMPDIR is the view's own /tmp: a tmpfs gone with the
    // namespace, and nothing written there reaches the host's /tmp.
    let tmp = PathBuf::from(ev["stdout"]["text"].as_str().unwrap().trim());
    assert_eq!(tmp, PathBuf::from("/tmp"), "{ev}");
    assert!(
        !tmp.join(&marker).exists(),
        "a file of the private TMPDIR reached the host"
    );
    done.assert_nothing_left(&ev);
}
