//! `custodian run` end to end: evidence on stdout, distinct exit codes.

use std::process::{Command, Output};

fn custodian(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custodian"))
        .arg("run")
        .args(args)
        .output()
        .unwrap()
}

/// The one JSON object on stdout, which must be one compact line.
fn json(out: &Output) -> serde_json::Value {
    let text = std::str::from_utf8(&out.stdout).unwrap();
    assert_eq!(text.matches('\n').count(), 1, "not one line: {text}");
    assert!(text.ends_with('\n'), "{text}");
    let value: serde_json::Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(
        text.len() - 1,
        value.to_string().len(),
        "not compact: {text}"
    );
    value
}

#[test]
fn a_timeout_is_a_completed_run_with_exit_code_zero() {
    let _quiet = crate::common::quiet_host();
    let out = custodian(&[
        "--containment",
        "group",
        "--timeout",
        "200ms",
        "--grace",
        "200ms",
        "--",
        "sleep",
        "5",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ev = json(&out);
    assert_eq!(ev["status"], "timed_out");
    assert_eq!(ev["signal"], 15);
    // The pinned group tier never says `terminated`: an escapee would be
    // invisible to it.
    assert_eq!(ev["descendants"]["tier"], "pinned_process_group");
    assert_eq!(ev["descendants"]["verdict"], "unconfirmed_or_escaped");
    let reasons = &ev["descendants"]["reasons"];
    assert!(
        *reasons == serde_json::json!(["may_have_left_group"])
            || *reasons == serde_json::json!(["group_emptiness_unknown"]),
        "{ev}"
    );
}

#[test]
fn a_held_pipe_is_reported_held_open() {
    let out = custodian(&[
        "--containment",
        "group",
        "--drain",
        "100ms",
        "--",
        "sh",
        "-c",
        "echo started; sleep 30 &",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ev = json(&out);
    assert_eq!(ev["status"], "exited");
    assert_eq!(ev["stdout"]["text"], "started\n");
    assert_eq!(ev["stdout"]["state"], "held_open");
    assert_eq!(ev["descendants"]["verdict"], "unconfirmed_or_escaped");
}

#[test]
fn exit_codes_tell_invalid_from_launch_failure() {
    let out = custodian(&["--cwd", "../outside", "--", "true"]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert_eq!(json(&out)["error"]["kind"], "invalid_invocation");

    let out = custodian(&["--env", "NO_EQUALS_SIGN", "--", "true"]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert_eq!(json(&out)["error"]["code"], "bad_env");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("NO_EQUALS_SIGN"));

    let out = custodian(&["--", "custodian-no-such-tool"]);
    assert_eq!(out.status.code(), Some(71), "{out:?}");
    assert_eq!(json(&out)["error"]["code"], "not_found");

    let out = custodian(&["--cwd", "missing-dir", "--", "true"]);
    assert_eq!(out.status.code(), Some(71), "{out:?}");
    assert_eq!(json(&out)["error"]["code"], "bad_cwd");

    let out = custodian(&["--timeout", "soon", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty());
}

#[test]
fn env_overlay_reaches_the_child_and_never_the_evidence() {
    let out = custodian(&["--env", "OVERLAY_KEY_5D=overlay-value-e1", "--", "env"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ev = json(&out);
    assert!(
        ev["stdout"]["text"]
            .as_str()
            .unwrap()
            .contains("OVERLAY_KEY_5D=overlay-value-e1")
    );
    // Only the child's own output mentions it; strip that and look again.
    let mut rest = ev.clone();
    rest["stdout"]["text"] = serde_json::Value::Null;
    let rest = rest.to_string();
    assert!(!rest.contains("OVERLAY_KEY_5D") && !rest.contains("overlay-value-e1"));
}

/// A `setsid` escapee that closes its stdio is invisible to the group
/// probe; only the subreaper tier sees (and stops) it.
#[test]
fn subreaper_tier_adopts_and_stops_a_silent_setsid_escapee() {
    // The root exits only once the escapee has left the group (its session
    // id is its own pid): had the root exited first, a loaded machine could
    // still have the escapee in the group, not yet through `setsid`, and
    // both tiers rightly kill it with the group. A gone escapee exits 9.
    let script = "setsid sleep 30 >/dev/null 2>&1 </dev/null & e=$!; \
        while :; do s=$(cut -d' ' -f6 /proc/$e/stat) || exit 9; \
        [ \"$s\" = \"$e\" ] && break; sleep 0.01; done; echo $e >&2";
    let escapee = |out: &Output| -> u32 {
        let ev = json(out);
        ev["stderr"]["text"]
            .as_str()
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !matches!(
                s[s.rfind(')').unwrap() + 2..].chars().next(),
                Some('Z' | 'X')
            )
        })
    };

    // Group tier: the escapee survives; the verdict can only speak for
    // the group (documented blind spot).
    let out = custodian(&["--containment", "group", "--", "sh", "-c", script]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let pid = escapee(&out);
    let survived = alive(pid);
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    assert!(survived, "without a subreaper the escapee outlives the run");
    assert_eq!(json(&out)["descendants"]["tier"], "pinned_process_group");

    // Subreaper tier: adopted when the root exits, stopped, reaped.
    let out = custodian(&["--subreaper", "--grace", "300ms", "--", "sh", "-c", script]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ev = json(&out);
    let pid = escapee(&out);
    let survived = alive(pid);
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    assert!(!survived, "the adopted escapee {pid} survived");
    assert_eq!(ev["descendants"]["tier"], "subreaper");
    assert_eq!(ev["descendants"]["verdict"], "terminated");
    let targets: Vec<&str> = ev["escalation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["target"].as_str().unwrap())
        .collect();
    assert!(targets.contains(&"adopted_descendants"), "{ev}");
    // The escapee was alive and ours (adopted, unreaped) when signalled.
    for step in ev["escalation"].as_array().unwrap() {
        if step["target"] == "adopted_descendants" {
            assert_eq!(step["outcome"], "delivered", "{ev}");
        }
    }
}

/// Subreaper tier: a pipe held by a process outside the tree (the test
/// itself, which opens the root's stdout through `/proc` before letting
/// the root exit) is cut at the drain bound although no descendant is
/// alive: the verdict says whoever held it may have left the group, not
/// only that the stream was held.
#[test]
fn subreaper_a_pipe_held_outside_the_tree_may_have_left_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let (pid_file, go) = (dir.path().join("pid"), dir.path().join("go"));
    let script = format!(
        "echo $$ > {}; while [ ! -e {} ]; do sleep 0.01; done; echo bye",
        pid_file.display(),
        go.display()
    );
    let child = Command::new(env!("CARGO_BIN_EXE_custodian"))
        .args(["run", "--subreaper", "--drain", "100ms", "--", "sh", "-c"])
        .arg(&script)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let pid = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        {
            break pid;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "no pid"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let holder = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/fd/1"))
        .unwrap();
    std::fs::write(&go, "").unwrap();
    let out = child.wait_with_output().unwrap();
    drop(holder);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ev = json(&out);
    assert_eq!(ev["status"], "exited", "{ev}");
    assert_eq!(ev["stdout"]["text"], "bye\n", "{ev}");
    assert_eq!(ev["stdout"]["state"], "held_open", "{ev}");
    assert_eq!(ev["descendants"]["tier"], "subreaper", "{ev}");
    assert_eq!(
        ev["descendants"]["verdict"], "unconfirmed_or_escaped",
        "{ev}"
    );
    assert_eq!(
        ev["descendants"]["reasons"],
        serde_json::json!(["stdio_held_open", "may_have_left_group"]),
        "{ev}"
    );
    // The pipe was cut at the drain bound after the `KILL`, not at the hard
    // deadline: no `close_streams` step (that step is the deadline's).
    let actions: Vec<&str> = ev["escalation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["action"].as_str().unwrap())
        .collect();
    assert!(actions.contains(&"kill"), "{ev}");
    assert!(!actions.contains(&"close_streams"), "{ev}");
}

/// No input makes `custodian run` panic (exit 101) or leave a process
/// behind: hostile durations and sizes, odd bytes, missing and unusable
/// executables, each with the exit code the README documents.
#[test]
fn hostile_inputs_never_panic_and_launch_nothing() {
    let marker = format!("custodian-hostile-{}", std::process::id());
    let m = marker.as_str();
    let cases: &[(&[&str], i32)] = &[
        (&["--timeout", "500y", "--", "sh", "-c", m], 64),
        (
            &["--timeout", "1000000000000000000y", "--", "sh", "-c", m],
            2,
        ),
        (
            &["--timeout", "99999999999999999999999s", "--", "sh", "-c", m],
            2,
        ),
        (&["--grace", "200y", "--", "sh", "-c", m], 64),
        (&["--drain", "2h", "--", "sh", "-c", m], 64),
        (
            &[
                "--hard-margin",
                "18446744073709551615s",
                "--",
                "sh",
                "-c",
                m,
            ],
            64,
        ),
        (&["--timeout", "0s", "--", "sh", "-c", m], 64),
        (
            &[
                "--stdout-budget",
                "18446744073709551615",
                "--",
                "sh",
                "-c",
                m,
            ],
            64,
        ),
        (
            &[
                "--stderr-budget",
                "99999999999999999999",
                "--",
                "sh",
                "-c",
                m,
            ],
            2,
        ),
        (&["--stdout-budget", "16EiB", "--", "sh", "-c", m], 2),
        (&["--cwd", "../..", "--", "sh", "-c", m], 64),
        (&["--cwd", &"a/".repeat(3000), "--", "sh", "-c", m], 64),
        (&["--env", "=v", "--", "sh", "-c", m], 64),
        (
            &[
                "--workspace",
                "/nonexistent-custodian-ws",
                "--",
                "sh",
                "-c",
                m,
            ],
            71,
        ),
        (&["--", "/nonexistent/custodian-tool", m], 71),
        (&["--", "/tmp", m], 71),
        (&["--", "/", m], 64),
        (&["--", ""], 64),
        (&["--", "\u{1}\u{7f}\u{202e}\u{fffd}", m], 71),
        (&["--", "./\u{0}"], 2),
    ];
    for (args, want) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_custodian"))
            .arg("run")
            .args(*args)
            .output();
        let out = match out {
            Ok(out) => out,
            // A NUL cannot even be passed to exec: nothing to check.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => continue,
            Err(e) => panic!("{args:?}: {e}"),
        };
        let code = out.status.code();
        assert_ne!(code, Some(101), "{args:?} panicked: {out:?}");
        assert_eq!(code, Some(*want), "{args:?}: {out:?}");
        if matches!(want, 64 | 71) {
            let v = json(&out);
            assert!(v["error"]["code"].is_string(), "{args:?}: {v}");
        }
    }
    // Bytes that are not UTF-8 at all, as an argument and as the program.
    use std::os::unix::ffi::OsStrExt;
    for odd in [&[b'-', b'-', 0xff, 0xfe][..], &[0xc3, 0x28]] {
        for args in [
            vec![
                std::ffi::OsStr::new("--"),
                std::ffi::OsStr::new("sh"),
                std::ffi::OsStr::from_bytes(odd),
            ],
            vec![std::ffi::OsStr::new("--"), std::ffi::OsStr::from_bytes(odd)],
        ] {
            let out = Command::new(env!("CARGO_BIN_EXE_custodian"))
                .arg("run")
                .args(&args)
                .output()
                .unwrap();
            assert_ne!(out.status.code(), Some(101), "{args:?} panicked: {out:?}");
            assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        }
    }
    let left: Vec<_> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(m))
        })
        .collect();
    assert!(left.is_empty(), "something was launched: {left:?}");
}

/// `custodian run ... | head -c 1`: stdout closes before the evidence is
/// written. The run still completes and reaps its process, the failure is
/// reported on stderr, and the exit code is 74, never a panic.
#[test]
fn a_closed_stdout_is_reported_not_a_panic() {
    use std::process::Stdio;
    let marker = format!("custodian-closed-{}", std::process::id());
    let mut child = Command::new(env!("CARGO_BIN_EXE_custodian"))
        .args(["run", "--", "sh", "-c"])
        .arg(format!("sleep 0.2; echo {marker}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_ne!(out.status.code(), Some(101), "{out:?}");
    assert_eq!(out.status.code(), Some(74), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot write the result"), "{err}");
    let left = std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&marker))
    });
    assert!(!left, "the governed process outlived custodian");
}

/// The confinement's "must show": a workspace-write run cannot write
/// outside its workspace (and can inside), a read-only run with the
/// network off cannot connect to a local listener, and the evidence names
/// what was enforced; each next to its unconfined control.
#[test]
fn confine_flags_deny_a_write_outside_and_a_connect_and_say_so() {
    let _quiet = crate::common::quiet_host();
    if custodian::confine::landlock_abi() == 0 {
        skipped!("the kernel has no Landlock");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("w");
    std::fs::create_dir(&ws).unwrap();
    let outside = dir.path().join("outside");
    let ws_arg = ws.to_str().unwrap();
    let write = |confine: &str, target: &str| {
        custodian(&[
            "--confine",
            confine,
            "--workspace",
            ws_arg,
            "--",
            "sh",
            "-c",
            &format!("echo x > '{target}'"),
        ])
    };
    let out = write("workspace-write", outside.to_str().unwrap());
    if out.status.code() == Some(71) {
        skipped!("no confining spawner here: {out:?}");
        return;
    }
    let ev = json(&out);
    // Isolated, the path outside lies in the view's private /tmp (the
    // workspace's mount point was made there): the write may land in the
    // view, never on the host.
    assert!(!outside.exists(), "{ev}");
    assert_eq!(
        ev["confinement"]["isolation"]["host_read_only"], true,
        "{ev}"
    );
    assert_eq!(ev["confinement"]["filesystem"], "workspace-write");
    assert_eq!(ev["confinement"]["network"], "off");
    assert_eq!(
        ev["confinement"]["landlock_abi_used"],
        ev["confinement"]["landlock_abi"]
    );
    let inside = ws.join("inside");
    assert_eq!(
        json(&write("workspace-write", inside.to_str().unwrap()))["exit_code"],
        0
    );
    assert!(inside.is_file());
    assert_eq!(
        json(&write("none", outside.to_str().unwrap()))["exit_code"],
        0
    );
    assert!(outside.is_file());

    if !std::path::Path::new("/bin/bash").exists() {
        skipped!("no bash for /dev/tcp");
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = |network: &str| {
        json(&custodian(&[
            "--confine",
            "read-only",
            "--network",
            network,
            "--workspace",
            ws_arg,
            "--",
            "/bin/bash",
            "-c",
            &format!("exec 3<>/dev/tcp/127.0.0.1/{port}"),
        ]))
    };
    let ev = connect("off");
    assert_eq!(ev["exit_code"], 1, "{ev}");
    // Isolated: a network namespace of its own, where nobody listens.
    assert!(
        ev["stderr"]["text"]
            .as_str()
            .unwrap()
            .contains("Connection refused"),
        "{ev}"
    );
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "no connection reached the host");
    assert_eq!(connect("on")["exit_code"], 0);
}

#[test]
fn a_bad_confine_flag_is_a_usage_error_and_a_relative_path_an_invalid_invocation() {
    let out = custodian(&["--confine", "rw", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = custodian(&[
        "--confine",
        "read-only",
        "--deny-read",
        "rel/.ssh",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert_eq!(json(&out)["error"]["code"], "invalid_invocation");
}

/// Every subcommand's `--help` says whether its stdout is JSON and lists
/// its exit codes.
#[test]
fn every_subcommand_help_states_its_output_and_exit_codes() {
    let cases: [(&[&str], &[&str]); 6] = [
        (
            &["run"],
            &[
                "JSON by default",
                "0   the run",
                "64  invalid",
                "71  launch",
                "74  the run",
            ],
        ),
        (
            &["policy", "explain"],
            &[
                "JSON by default",
                "Exit codes: 0",
                "65 invalid",
                "66 no readable",
            ],
        ),
        (
            &["spill", "sweep"],
            &[
                "with --json",
                "0   the sweep",
                "1   the sweep",
                "78  invalid",
            ],
        ),
        (
            &["spill", "write"],
            &["not JSON", "0   written", "66  the input"],
        ),
        (
            &["spill", "read"],
            &["not JSON", "0   the content", "66  no such spill"],
        ),
        (
            &["node"],
            &[
                "JSON by default",
                "0  served",
                "1  the node could not start",
            ],
        ),
    ];
    for (command, wanted) in cases {
        for flag in ["-h", "--help"] {
            let out = Command::new(env!("CARGO_BIN_EXE_custodian"))
                .args(command)
                .arg(flag)
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(0), "{command:?} {flag}");
            let help = String::from_utf8(out.stdout).unwrap();
            for want in wanted {
                assert!(
                    help.contains(want),
                    "{command:?} {flag}: {want:?} missing:\n{help}"
                );
            }
        }
    }
}

/// An isolated run's `TMPDIR` is the view's own `/tmp`, a private tmpfs
/// whatever the embedding process's `TMPDIR`: what the tool writes there
/// never reaches the host and is gone with the run.
#[test]
fn confined_tmpdir_is_the_views_private_tmp_and_leaves_nothing_on_the_host() {
    let _quiet = crate::common::quiet_host();
    if custodian::confine::landlock_abi() == 0 {
        skipped!("the kernel has no Landlock");
        return;
    }
    let chosen = tempfile::tempdir().unwrap();
    let marker = format!("custodian-tmp-probe-{}", std::process::id());
    let out = Command::new(env!("CARGO_BIN_EXE_custodian"))
        .args(["run", "--confine", "read-only", "--", "sh", "-c"])
        .arg(format!(
            "echo \"$TMPDIR\"; echo t > \"$TMPDIR/{marker}\" && echo t > /dev/shm/{marker} && echo wrote"
        ))
        .env("TMPDIR", chosen.path())
        .output()
        .unwrap();
    let ev = json(&out);
    assert_eq!(ev["stdout"]["text"], "/tmp\nwrote\n", "{ev}");
    for host in [
        std::path::Path::new("/tmp"),
        std::path::Path::new("/dev/shm"),
        chosen.path(),
    ] {
        assert!(
            !host.join(&marker).exists(),
            "{} reached the host",
            host.display()
        );
    }
    assert_eq!(std::fs::read_dir(chosen.path()).unwrap().count(), 0);
}

/// `custodian run` started with 300 descriptors open and inherited (not
/// close-on-exec), as under a host that leaks them: its stdio pipes are
/// numbered high, so the spawner hands the child a small table of its own
/// (plain and isolated launches alike). The child sees only its stdio,
/// reads nothing it was not given, and its output reaches EOF.
#[test]
fn from_a_large_inherited_descriptor_table_the_child_sees_only_its_stdio() {
    if Command::new("bash").arg("--version").output().is_err() {
        panic!("needs bash (opening descriptors numbered above 9)");
    }
    let bin = env!("CARGO_BIN_EXE_custodian");
    let dir = tempfile::tempdir().unwrap();
    for confine in ["none", "read-only"] {
        let script = format!(
            "for i in $(seq 10 310); do eval \"exec $i</dev/null\"; done; \
             exec '{bin}' run --confine {confine} --workspace '{}' -- \
             sh -c 'ls /proc/$$/fd; cat'",
            dir.path().display()
        );
        let out = Command::new("bash")
            .args(["-c", &script])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{confine}: {out:?}");
        let ev = json(&out);
        assert_eq!(ev["exit_code"], 0, "{confine}: {ev}");
        assert_eq!(ev["stdout"]["text"], "0\n1\n2\n", "{confine}: {ev}");
    }
}

/// A `custodian run` is one request of the request machine (issue 26): the
/// process settling is the executor's success, the request completes, and
/// only then is the evidence written. (Before, `run` drove the launcher
/// alone and no machine decided anything.)
#[test]
fn a_run_is_one_request_of_the_request_machine() {
    let out = Command::new(env!("CARGO_BIN_EXE_custodian"))
        .env("CUSTODIAN_LOG", "custodian::request=debug")
        .args(["run", "--", "sh", "-c", "echo ran"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(json(&out)["stdout"]["text"], "ran\n");
    let t = crate::common::assert_one_request(&out.stderr, "Candidate(Success)", "a run");
    assert_eq!(
        t.iter()
            .filter(|(e, _)| e.starts_with("Candidate("))
            .count(),
        1,
        "{t:?}"
    );
    // A launch that does not start still ends its request, as the
    // executor's error.
    let out = Command::new(env!("CARGO_BIN_EXE_custodian"))
        .env("CUSTODIAN_LOG", "custodian::request=debug")
        .args(["run", "--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(71), "{out:?}");
    let t = crate::common::transitions(&out.stderr);
    assert!(
        t.first()
            .is_some_and(|(e, _)| e.starts_with("Candidate(ExecutorError")),
        "{t:?}"
    );
    assert_eq!(
        t.last().map(|(_, a)| a.as_str()),
        Some("Completed"),
        "{t:?}"
    );
}

/// `run` is the one request of a runtime that opens no job namespace
/// (`RuntimeConfig::without_job_namespaces`): the directory it runs in is
/// left as it was (no `.custodian/`), and runs in one directory at once
/// take no lock from each other. (Unconfined runs: a `workspace-write`
/// view makes the empty `.custodian/` it masks, CF-15.)
#[test]
fn runs_leave_their_directory_as_it_was_and_take_no_lock_from_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let runs: Vec<_> = (0..3)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_custodian"))
                .current_dir(dir.path())
                .args(["run", "--", "sh", "-c", "sleep 0.3; echo ran"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for run in runs {
        let out = run.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(json(&out)["stdout"]["text"], "ran\n");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "a run left {left:?} in its directory");
}

/// The probe of an occupied group never spins: it rescans after 1, 2, 4, 8
/// and then every 10 ms in the `/proc` tiers, and in the cgroup tier only
/// when `cgroup.events` changes or its window ends. Counted from the
/// driver's debug log (`group probed`, `rescans=N`) for a root that exits
/// and leaves a member alive past the probe's window (so a probe runs it
/// to its end, and another follows the `TERM`): each probe's rescans stay
/// within what its window allows, where a spinning probe makes thousands.
#[test]
fn a_probe_of_an_occupied_group_rescans_at_a_bounded_rate() {
    let cgroups = custodian::contain::process_cgroup().is_ok_and(|cg| cg.remove().is_ok());
    // The window is at most 250 ms: at most 25 rescans 10 ms apart after
    // the 15 ms of the first four; a late timer only makes fewer.
    let mut tiers = vec![("group", 40), ("subreaper", 40)];
    if cgroups {
        tiers.push(("cgroup", 8));
    } else {
        eprintln!("note: no writable cgroup v2 here; the /proc tiers only");
    }
    for (tier, most) in tiers {
        let out = Command::new(env!("CARGO_BIN_EXE_custodian"))
            .env("CUSTODIAN_LOG", "custodian::process=debug")
            .args(["run", "--containment", tier, "--", "sh", "-c"])
            .arg("sleep 0.6 >/dev/null 2>&1 & exit 0")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{tier}: {out:?}");
        let log = String::from_utf8_lossy(&out.stderr);
        let rescans = crate::logs::rescans(&log);
        assert!(!rescans.is_empty(), "{tier}: no probe ran a window: {log}");
        // A probe that did not answer at its first scan answers at a rescan.
        assert!(
            rescans.iter().all(|&n| (1..=most).contains(&n)),
            "{tier}: a probe with no rescan or more than {most}: {rescans:?}"
        );
    }
}
