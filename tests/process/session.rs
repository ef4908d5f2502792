//! Sessions: stdin written while the process runs, output read while it
//! runs, interrupts through the process machine, a slow reader's lost
//! bytes, the idle timeout, and every tier a session can run in.

use std::time::Duration;

use custodian::confine::Confinement;
use custodian::contain::Containment;
use custodian::process::evidence::{ContainmentTier, ProcessStatus};
use custodian::process::session::{
    self, Offsets, OutputEvent, SessionError, SessionOptions, SessionSignal,
};
use custodian::process::{Invocation, LaunchOptions};

use crate::common::*;

const WAIT: Duration = Duration::from_secs(10);

fn start(inv: Invocation, options: &LaunchOptions) -> session::Session {
    session::start(inv, options, SessionOptions::default()).expect("session started")
}

/// Reads stdout from `from` until it holds `want` or the output ended;
/// returns everything read and the next offset.
pub(super) async fn read_until(s: &session::Session, from: u64, want: &str) -> (String, u64) {
    let mut text = String::new();
    let mut next = Offsets {
        stdout: from,
        stderr: 0,
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while !text.contains(want) && tokio::time::Instant::now() < deadline {
        let out = s.read(next, 64 * 1024, Duration::from_millis(500)).await;
        text.push_str(&String::from_utf8_lossy(&out.stdout.data));
        next = out.next();
        if out.ended {
            break;
        }
    }
    (text, next.stdout)
}

#[tokio::test]
async fn a_repl_is_driven_through_its_stdin_and_read_while_it_runs() {
    let _quiet = quiet_host();
    let py = inv("python3", &["-i", "-q", "-u"], Duration::from_secs(30));
    let s = start(py, &opts());
    s.write_stdin(b"print(6*7)\n").await.unwrap();
    let (text, next) = read_until(&s, 0, "42").await;
    assert!(text.contains("42"), "stdout: {text:?}");
    assert!(s.status().running, "the REPL waits for more input");

    // The same process keeps its state between writes.
    s.write_stdin(b"x = 20\nprint(x + 1)\n").await.unwrap();
    let (text, _) = read_until(&s, next, "21").await;
    assert!(text.contains("21"), "stdout: {text:?}");

    // End of input ends the REPL by itself.
    s.close_stdin().await;
    let ev = s.wait().await;
    assert_eq!(ev.status, ProcessStatus::Exited);
    assert_eq!(ev.exit_code, Some(0));
    let i = ev
        .interactions
        .as_ref()
        .expect("a session reports its interactions");
    assert_eq!((i.bytes_written, i.writes, i.stdin_closed), (31, 2, true));
    // The evidence counts what was written, never what.
    let json = ev.to_json();
    assert!(!json.contains("x + 1"), "{json}");
    assert!(json.contains("\"bytes_written\":31"), "{json}");
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let errors: Vec<String> = evidence_schema()
        .iter_errors(&value)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}\n{json}");
    // The capture is the evidence's as for any run.
    assert!(ev.stdout.text.contains("42"));
    assert!(matches!(
        s.write_stdin(b"1\n").await,
        Err(SessionError::Ended)
    ));
    assert_no_leftovers(s.running().pgid());
}

#[tokio::test]
async fn the_output_stream_yields_every_byte_in_order_and_ends_with_the_process() {
    use std::future::poll_fn;
    use std::pin::Pin;

    let _quiet = quiet_host();
    let script = "for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.05; done";
    let s = start(sh(script, WAIT), &opts());
    let mut stream = s.output();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let (mut next_out, mut next_err) = (0, 0);
    while let Some(ev) =
        poll_fn(|cx| futures_core::Stream::poll_next(Pin::new(&mut stream), cx)).await
    {
        match ev {
            OutputEvent::Data {
                stream: custodian::machine::process::Stream::Stdout,
                offset,
                bytes,
            } => {
                assert_eq!(offset, next_out, "stdout in order, nothing skipped");
                next_out += bytes.len() as u64;
                out.extend(bytes);
            }
            OutputEvent::Data { offset, bytes, .. } => {
                assert_eq!(offset, next_err);
                next_err += bytes.len() as u64;
                err.extend(bytes);
            }
            other => panic!("nothing is lost with a reader keeping up: {other:?}"),
        }
    }
    assert_eq!(out, b"out1\nout2\nout3\n");
    assert_eq!(err, b"err1\nerr2\nerr3\n");
    let ev = s.wait().await;
    assert_eq!(ev.status, ProcessStatus::Exited);
    assert!(!s.status().running);
}

#[tokio::test]
async fn a_slow_reader_is_told_what_it_lost_and_memory_stays_bounded() {
    let _quiet = quiet_host();
    // 4 MiB through a 64 KiB buffer, read only once the process ended.
    let script = "head -c 4194304 /dev/zero | tr '\\0' 'a'; echo; echo end";
    let s = session::start(
        sh(script, WAIT),
        &opts(),
        SessionOptions::default().with_buffer(64 * 1024),
    )
    .unwrap();
    let ev = s.wait().await;
    assert_eq!(ev.status, ProcessStatus::Exited);
    let total = 4 * 1024 * 1024 + 1 + 4;
    assert_eq!(ev.stdout.bytes_read, total);
    let out = s.read(Offsets::default(), usize::MAX, Duration::ZERO).await;
    assert!(out.ended);
    assert_eq!(
        out.stdout.lost,
        total - 64 * 1024,
        "everything before the buffer"
    );
    assert_eq!(out.stdout.offset, out.stdout.lost);
    assert_eq!(out.stdout.data.len(), 64 * 1024, "the buffer, and no more");
    assert!(out.stdout.data.ends_with(b"a\nend\n"));
    assert_eq!(out.stdout.next(), total);
    assert_eq!(s.status().output.stdout, total);
}

/// After the process settled, a read cut by its `max` is not the end: the
/// reader is told `ended` only by the answer that reaches the end of both
/// streams, so one that stops at `ended` loses nothing.
#[tokio::test]
async fn ended_is_said_only_by_the_read_that_reaches_the_end() {
    let _quiet = quiet_host();
    let script =
        "head -c 20000 /dev/zero | tr '\\0' 'a'; head -c 3000 /dev/zero | tr '\\0' 'b' >&2";
    let s = start(sh(script, WAIT), &opts());
    s.wait().await;
    let (mut out, mut err, mut next, mut reads) = (0, 0, Offsets::default(), 0);
    loop {
        let r = s.read(next, 4096, Duration::ZERO).await;
        out += r.stdout.data.len();
        err += r.stderr.data.len();
        next = r.next();
        reads += 1;
        if r.ended {
            break;
        }
        assert!(reads < 100, "never ended");
    }
    assert_eq!((out, err, reads), (20000, 3000, 5));
}

/// Prints `ready`, then `intN` at the Nth `SIGINT`; exits 7 at the third.
pub const COUNT_INTERRUPTS: &str = "\
import signal, sys, time
n = 0
def on_int(*_):
    global n
    n += 1
    print(f'int{n}', flush=True)
    if n >= 3:
        sys.exit(7)
signal.signal(signal.SIGINT, on_int)
print('ready', flush=True)
while True:
    time.sleep(0.02)
";

#[tokio::test]
async fn an_interrupt_reaches_the_group_and_the_process_may_go_on() {
    let _quiet = quiet_host();
    // Counts interrupts, exits on the third. A handler Python installs
    // whatever this process ignores (a shell cannot trap a signal ignored
    // on entry, and the group tier keeps an ignored SIGINT ignored).
    for options in [opts(), group_opts()] {
        let s = start(
            inv("python3", &["-u", "-c", COUNT_INTERRUPTS], WAIT),
            &options,
        );
        let (_, mut next) = read_until(&s, 0, "ready").await;
        for k in 1..=3 {
            s.signal(SessionSignal::Interrupt);
            let (text, after) = read_until(&s, next, &format!("int{k}")).await;
            assert!(text.contains(&format!("int{k}")), "interrupt {k}: {text:?}");
            next = after;
        }
        let ev = s.wait().await;
        assert_eq!(
            ev.status,
            ProcessStatus::Exited,
            "{:?}",
            ev.descendants.tier
        );
        assert_eq!(ev.exit_code, Some(7));
        assert!(
            ev.escalation.is_empty(),
            "an interrupt is not a step of the ladder"
        );
        let i = ev.interactions.as_ref().unwrap();
        assert_eq!(i.signals, [SessionSignal::Interrupt; 3]);
        assert_no_leftovers(s.running().pgid());
    }
}

#[tokio::test]
async fn terminate_and_kill_stop_the_session_through_the_ladder() {
    let _quiet = quiet_host();
    let s = start(inv("sleep", &["30"], WAIT), &opts());
    s.signal(SessionSignal::Terminate);
    let ev = s.wait().await;
    assert_eq!(ev.status, ProcessStatus::Cancelled);
    assert_eq!(ev.signal, Some(15));

    let script = "trap '' TERM; echo ready; while :; do sleep 0.02; done";
    let s = start(sh(script, WAIT), &opts());
    // Only once TERM is ignored: a KILL is what stops it.
    read_until(&s, 0, "ready").await;
    s.signal(SessionSignal::Kill);
    let ev = s.wait().await;
    assert_eq!(ev.status, ProcessStatus::Cancelled);
    assert_eq!(ev.signal, Some(9));
    assert!(
        ev.timings.grace_us.unwrap_or(0) < TUN.grace.as_micros() as u64,
        "KILL without the grace: {:?}",
        ev.timings
    );
    assert_eq!(
        ev.interactions.as_ref().unwrap().signals,
        [SessionSignal::Kill]
    );
    assert_no_leftovers(s.running().pgid());
}

#[tokio::test]
async fn an_idle_session_is_stopped_and_says_why() {
    let _quiet = quiet_host();
    let s = session::start(
        inv("cat", &[], WAIT),
        &opts(),
        SessionOptions::default().with_idle_timeout(Duration::from_millis(400)),
    )
    .unwrap();
    // Activity keeps it alive past the idle timeout...
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        s.write_stdin(b"x\n").await.unwrap();
    }
    assert!(s.status().running, "written to every 200 ms");
    // ...and silence ends it.
    let ev = tokio::time::timeout(WAIT, s.wait()).await.expect("stopped");
    assert_eq!(ev.status, ProcessStatus::Cancelled);
    let i = ev.interactions.as_ref().unwrap();
    assert!(i.idle_timeout);
    assert_eq!(i.writes, 4);
}

#[tokio::test]
async fn a_closed_stdin_is_refused_and_a_process_that_closed_its_own_is_seen() {
    let _quiet = quiet_host();
    let s = start(sh("exec 0<&-; echo closed; sleep 30", WAIT), &opts());
    read_until(&s, 0, "closed").await;
    // Its only reader is gone: the pipe is broken, not blocking.
    let r = tokio::time::timeout(WAIT, s.write_stdin(b"anyone?\n"))
        .await
        .expect("a write to a pipe nobody reads fails at once");
    assert!(matches!(r, Err(SessionError::StdinClosed)), "{r:?}");
    s.close_stdin().await;
    assert!(matches!(
        s.write_stdin(b"x").await,
        Err(SessionError::StdinClosed)
    ));
    s.signal(SessionSignal::Terminate);
    s.wait().await;
}

#[tokio::test]
async fn a_session_runs_in_every_tier_and_confined() {
    let _quiet = quiet_host();
    let dir = tempfile::tempdir().unwrap();
    let base = LaunchOptions::new(dir.path());
    let mut cases = vec![
        (
            "group",
            base.clone().with_containment(Containment::Group),
            None,
        ),
        ("auto", base.clone(), None),
    ];
    if custodian::confine::landlock_abi() > 0 {
        cases.push((
            "confined",
            base.clone(),
            Some(Confinement::workspace_write()),
        ));
    }
    for (name, options, confinement) in cases {
        let mut spec = spec("cat", &[]).with_timeout(WAIT);
        if let Some(c) = confinement {
            spec = spec.with_confinement(c);
        }
        let s = session::start(
            Invocation::validate(spec).unwrap(),
            &options,
            SessionOptions::default(),
        )
        .unwrap();
        s.write_stdin(b"ping\n").await.unwrap();
        let (text, _) = read_until(&s, 0, "ping").await;
        assert_eq!(text, "ping\n", "{name}");
        s.close_stdin().await;
        let ev = s.wait().await;
        assert_eq!(ev.status, ProcessStatus::Exited, "{name}");
        if name == "group" {
            assert_eq!(ev.descendants.tier, ContainmentTier::PinnedProcessGroup);
        }
        assert_no_leftovers(s.running().pgid());
    }
}

/// Set in the process the next test starts, with SIGINT ignored.
const IGNORING: &str = "CUSTODIAN_SESSION_SIGINT_IGNORED";

/// An embedder that ignores `SIGINT` (a background job of a shell, a
/// service) still gets an interruptible session in the clone3 tiers: the
/// child's `SIGINT` is back at its default action, so a shell can trap it;
/// a plain run keeps it ignored, as an exec does. Run in a process of its
/// own started with `SIGINT` ignored (the disposition is per process).
#[test]
fn a_session_is_interruptible_even_when_its_embedder_ignores_sigint() {
    let out = std::process::Command::new("sh")
        .args(["-c", "trap '' INT; exec \"$0\" \"$@\""])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "--nocapture",
            "session::a_session_is_interruptible_even_when_its_embedder_ignores_sigint_inner",
        ])
        .env(IGNORING, "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether this process ignores `SIGINT` (`SigIgn` of `/proc/self/status`).
fn ignores_sigint(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (2 - 1)) != 0)
}

#[tokio::test]
#[ignore = "run by a_session_is_interruptible_even_when_its_embedder_ignores_sigint with SIGINT ignored"]
async fn a_session_is_interruptible_even_when_its_embedder_ignores_sigint_inner() {
    if std::env::var_os(IGNORING).is_none() {
        // Forced with `--ignored` beside the others: run it as it must be.
        tokio::task::spawn_blocking(
            a_session_is_interruptible_even_when_its_embedder_ignores_sigint,
        )
        .await
        .unwrap();
        return;
    }
    assert!(
        ignores_sigint(&std::fs::read_to_string("/proc/self/status").unwrap()),
        "the test process must ignore SIGINT"
    );
    // A plain run inherits the ignored SIGINT.
    let ev = custodian::process::run(inv("cat", &["/proc/self/status"], WAIT), &opts())
        .await
        .unwrap();
    assert!(
        ignores_sigint(&ev.stdout.text),
        "a run keeps SIGINT ignored"
    );
    // A session in the cgroup (or pid-namespace) tier does not: a shell's
    // trap works.
    let script = "trap 'echo int; exit 7' INT; echo ready; while :; do sleep 0.02; done";
    let s = start(sh(script, WAIT), &opts());
    let (_, next) = read_until(&s, 0, "ready").await;
    s.signal(SessionSignal::Interrupt);
    let (text, _) = read_until(&s, next, "int").await;
    assert!(text.contains("int"), "the trap did not run: {text:?}");
    let ev = s.wait().await;
    assert_eq!(ev.exit_code, Some(7), "{ev:?}");
}
