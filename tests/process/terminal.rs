//! Terminal sessions: a pseudo-terminal as the session's stdin, stdout,
//! stderr and controlling terminal. A program that prompts on `/dev/tty`
//! is answered through the session's stdin; the terminal's line discipline
//! turns Ctrl-C into `SIGINT` for the foreground group and a resize into
//! `SIGWINCH`; every tier that can give a terminal is tried, and the group
//! tier, which cannot, refuses before anything runs.

use std::time::Duration;

use custodian::confine::Confinement;
use custodian::contain::Containment;
use custodian::process::evidence::ProcessStatus;
use custodian::process::session::{self, SessionError, SessionOptions, SessionSignal, WindowSize};
use custodian::process::{Invocation, LaunchOptions, ProcessError};

use super::session::read_until;
use crate::common::*;

const WAIT: Duration = Duration::from_secs(10);

fn terminal() -> SessionOptions {
    SessionOptions::default().with_terminal(WindowSize::new(80, 24))
}

/// Prompts on `/dev/tty` with echo off (`getpass`, what `sudo`, `ssh` and
/// `git` credential prompts do), then reports what it saw.
const PROMPT: &str = r#"
import getpass, os, sys
print("tty", os.isatty(0), os.isatty(1), os.isatty(2), flush=True)
fd = os.open("/dev/tty", os.O_RDWR)
print("ctty", os.isatty(fd), os.tcgetpgrp(fd) == os.getpgrp(), flush=True)
os.close(fd)
answer = getpass.getpass("Password: ")
print("got", answer[::-1], flush=True)
"#;

/// The prompt in every tier that gives a terminal: pipes could not answer
/// it (`/dev/tty` would be the embedder's terminal, or none).
#[tokio::test]
async fn a_prompt_on_dev_tty_is_answered_through_the_session() {
    let _quiet = quiet_host();
    let dir = tempfile::tempdir().unwrap();
    let base = LaunchOptions::new(dir.path());
    let mut cases = vec![("auto", None)];
    if custodian::confine::landlock_abi() > 0 {
        cases.push(("read-only", Some(Confinement::read_only())));
        cases.push(("workspace-write", Some(Confinement::workspace_write())));
    }
    for (name, confinement) in cases {
        let mut spec = spec("python3", &["-c", PROMPT]).with_timeout(WAIT);
        if let Some(c) = confinement {
            spec = spec.with_confinement(c);
        }
        let s = session::start(Invocation::validate(spec).unwrap(), &base, terminal())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(s.is_terminal() && s.status().terminal, "{name}");
        let (text, next) = read_until(&s, 0, "Password: ").await;
        assert!(text.contains("tty True True True"), "{name}: {text:?}");
        assert!(text.contains("ctty True True"), "{name}: {text:?}");
        s.write_stdin(b"s3cret\n").await.unwrap();
        let (shown, _) = read_until(&s, next, "\r\ngot terc3s\r\n").await;
        assert!(shown.contains("got terc3s"), "{name}: {shown:?}");
        // Echo was off while the prompt read: the answer never showed.
        assert!(!shown.contains("s3cret"), "{name}: echoed {shown:?}");
        let ev = s.wait().await;
        assert_eq!(ev.status, ProcessStatus::Exited, "{name}");
        assert_eq!(ev.exit_code, Some(0), "{name}");
        // A terminal is one stream.
        assert_eq!(s.status().output.stderr, 0, "{name}");
        // The evidence counts what was written, never what.
        let i = ev.interactions.as_ref().unwrap();
        assert_eq!((i.bytes_written, i.writes), (7, 1), "{name}");
        assert_eq!((i.resizes, i.terminal), (0, Some(WindowSize::new(80, 24))));
        let value = serde_json::to_value(&*ev).unwrap();
        assert!(evidence_schema().is_valid(&value), "{name}: {value}");
        let json = serde_json::to_string(&*ev).unwrap();
        assert!(!json.contains("s3cret"), "{name}: stdin in the evidence");
        assert_no_leftovers(s.running().pgid());
    }
}

/// Ctrl-C written to the terminal is the line discipline's `SIGINT` to the
/// foreground process group (the program's): the terminal is its
/// controlling one and it runs in the foreground.
#[tokio::test]
async fn ctrl_c_on_the_terminal_interrupts_the_foreground_group() {
    let _quiet = quiet_host();
    let dir = tempfile::tempdir().unwrap();
    let prog = r#"
import os, signal, sys, time
def on_int(*_):
    os.write(1, b"interrupted\n")
    os._exit(3)
signal.signal(signal.SIGINT, on_int)
print("ready", flush=True)
time.sleep(30)
"#;
    let inv = Invocation::validate(spec("python3", &["-c", prog]).with_timeout(WAIT)).unwrap();
    let s = session::start(inv, &LaunchOptions::new(dir.path()), terminal()).unwrap();
    let (_, next) = read_until(&s, 0, "ready").await;
    s.write_stdin(b"\x03").await.unwrap();
    let (text, _) = read_until(&s, next, "interrupted").await;
    assert!(text.contains("interrupted"), "{text:?}");
    let ev = s.wait().await;
    assert_eq!(ev.exit_code, Some(3));
    assert_no_leftovers(s.running().pgid());
}

/// A resize reaches the program as `SIGWINCH` with the new size; it is
/// recorded (sizes, no content); a session on pipes refuses it.
#[tokio::test]
async fn a_resize_is_seen_by_the_program_and_recorded() {
    let _quiet = quiet_host();
    let dir = tempfile::tempdir().unwrap();
    let options = LaunchOptions::new(dir.path());
    let prog = r#"
import os, signal, sys, time
def on_winch(*_):
    c, r = os.get_terminal_size(0)
    os.write(1, f"size {c}x{r}\n".encode())
signal.signal(signal.SIGWINCH, on_winch)
c, r = os.get_terminal_size(0)
print(f"start {c}x{r}", flush=True)
sys.stdin.readline()
"#;
    let inv = Invocation::validate(spec("python3", &["-c", prog]).with_timeout(WAIT)).unwrap();
    let s = session::start(inv, &options, terminal()).unwrap();
    let (text, next) = read_until(&s, 0, "start 80x24\r\n").await;
    assert!(text.contains("start 80x24"), "{text:?}");
    s.resize(WindowSize::new(132, 43)).unwrap();
    let (text, _) = read_until(&s, next, "size 132x43").await;
    assert!(text.contains("size 132x43"), "{text:?}");
    s.write_stdin(b"\n").await.unwrap();
    let ev = s.wait().await;
    assert_eq!(ev.exit_code, Some(0));
    let i = ev.interactions.as_ref().unwrap();
    assert_eq!((i.resizes, i.terminal), (1, Some(WindowSize::new(132, 43))));
    assert!(matches!(
        s.resize(WindowSize::default()),
        Err(SessionError::Ended)
    ));

    let inv = Invocation::validate(spec("cat", &[]).with_timeout(WAIT)).unwrap();
    let piped = session::start(inv, &options, SessionOptions::default()).unwrap();
    let refused = piped.resize(WindowSize::default()).unwrap_err();
    assert_eq!(refused.code(), "not_a_terminal");
    piped.signal(SessionSignal::Kill);
    piped.wait().await;
}

/// Closing a terminal session's stdin is the terminal's end-of-file: `cat`
/// ends on its own, and later writes are refused.
#[tokio::test]
async fn closing_stdin_sends_the_terminal_end_of_file() {
    let _quiet = quiet_host();
    let dir = tempfile::tempdir().unwrap();
    let inv = Invocation::validate(spec("cat", &[]).with_timeout(WAIT)).unwrap();
    let s = session::start(inv, &LaunchOptions::new(dir.path()), terminal()).unwrap();
    s.write_stdin(b"ping\n").await.unwrap();
    // The terminal echoes the line, then cat writes it: `\r\n` endings.
    let (text, _) = read_until(&s, 0, "ping\r\nping\r\n").await;
    assert_eq!(text, "ping\r\nping\r\n");
    s.close_stdin().await;
    let ev = tokio::time::timeout(WAIT, s.wait())
        .await
        .expect("cat saw EOF");
    assert_eq!((ev.status, ev.exit_code), (ProcessStatus::Exited, Some(0)));
    assert!(ev.interactions.as_ref().unwrap().stdin_closed);
    assert!(matches!(
        s.write_stdin(b"late\n").await,
        Err(SessionError::Ended | SessionError::StdinClosed)
    ));
    assert_no_leftovers(s.running().pgid());
}

/// The group tier (`posix_spawn`) cannot make the child a session leader
/// with a controlling terminal: a terminal session there is refused, typed,
/// and nothing runs.
#[tokio::test]
async fn the_group_tier_refuses_a_terminal_session() {
    let _quiet = quiet_host();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let options = LaunchOptions::new(dir.path()).with_containment(Containment::Group);
    let inv = Invocation::validate(spec("touch", &[marker.to_str().unwrap()]).with_timeout(WAIT))
        .unwrap();
    let err = session::start(inv, &options, terminal()).unwrap_err();
    assert!(matches!(err, ProcessError::TerminalUnavailable), "{err:?}");
    assert_eq!(err.code(), "terminal_unavailable");
    assert!(!marker.exists(), "nothing ran");
}
