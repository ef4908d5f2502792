//! Confinement with real child processes: every denial is shown next to
//! the same action succeeding unconfined (or under the mode that grants
//! it), so each test fails if the confinement is not applied.

use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use custodian::confine::{ConfineError, Confinement, Enforcement, Feature, FsMode, Network};
use custodian::process::evidence::{DescendantVerdict, Evidence, ProcessStatus};
use custodian::process::{Invocation, LaunchOptions, ProcessError, run};

use crate::common::{TUN, quiet_host, spec};

/// Whether this host can confine (Landlock present); prints why not.
fn can_confine() -> bool {
    if custodian::confine::landlock_abi() == 0 {
        skipped!("the kernel has no Landlock");
        return false;
    }
    true
}

fn script(sh: &str, confinement: Confinement) -> Invocation {
    Invocation::validate(
        spec("sh", &["-c", sh])
            .with_timeout(Duration::from_secs(10))
            .with_tunables(TUN)
            .with_confinement(confinement),
    )
    .expect("valid invocation")
}

/// Runs `sh -c script` in `workspace` under `confinement`; `None` (with
/// the reason printed) where this host cannot use the confining spawner.
async fn run_in(workspace: &Path, sh: &str, confinement: Confinement) -> Option<Arc<Evidence>> {
    match run(script(sh, confinement), &LaunchOptions::new(workspace)).await {
        Ok(ev) => Some(ev),
        Err(ProcessError::Confinement(ConfineError::SpawnerUnavailable { reason })) => {
            skipped!("no confining spawner here ({reason})");
            None
        }
        Err(e) => panic!("launch failed: {e}"),
    }
}

#[tokio::test]
async fn read_only_denies_a_write_outside_its_private_tmp() {
    let _quiet = quiet_host();
    if !can_confine() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("written");
    let sh = format!(
        "echo x > '{}' || echo denied; echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"",
        target.display()
    );
    let Some(ev) = run_in(dir.path(), &sh, Confinement::read_only()).await else {
        return;
    };
    // Isolated, the host is a read-only mount in the view.
    assert!(ev.stderr.text.contains("Read-only file system"), "{ev:?}");
    assert_eq!(ev.stdout.text, "denied\nt\n", "{ev:?}");
    assert!(!target.exists());
    let report = ev.confinement.as_ref().expect("the evidence names it");
    assert_eq!(report.filesystem, FsMode::ReadOnly);
    assert!(report.private_tmp && report.no_new_privs);
    assert!(report.handled_access_fs.iter().any(|r| r == "write_file"));
    // The control: unconfined, the same write lands.
    let ev = run_in(dir.path(), &sh, Confinement::none()).await.unwrap();
    assert!(target.exists(), "{ev:?}");
    assert!(ev.confinement.is_none());
}

#[tokio::test]
async fn a_denied_read_path_cannot_be_read_or_listed_and_its_siblings_can() {
    let _quiet = quiet_host();
    if !can_confine() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let ssh = home.path().join(".ssh");
    std::fs::create_dir(&ssh).unwrap();
    std::fs::write(ssh.join("id_ed25519"), "SECRET-KEY\n").unwrap();
    std::fs::write(home.path().join("notes"), "PUBLIC\n").unwrap();
    let sh = format!(
        "cat '{h}/.ssh/id_ed25519'; ls '{h}/.ssh'; cat '{h}/notes'",
        h = home.path().display()
    );
    let confined = Confinement::read_only().with_deny_read(&ssh);
    let Some(ev) = run_in(home.path(), &sh, confined).await else {
        return;
    };
    assert!(!ev.stdout.text.contains("SECRET"), "{ev:?}");
    assert!(!ev.stdout.text.contains("id_ed25519"), "{ev:?}");
    assert!(ev.stdout.text.contains("PUBLIC"), "{ev:?}");
    // Isolated, the denied directory is masked by an empty one.
    let report = ev.confinement.as_ref().unwrap();
    let masked = &report.isolation.as_ref().expect("isolated").masked;
    assert!(masked.iter().any(|m| m.ends_with(".ssh")), "{report:?}");
    // The control: read-only without the deny reads it.
    let ev = run_in(home.path(), &sh, Confinement::read_only())
        .await
        .unwrap();
    assert!(ev.stdout.text.contains("SECRET"), "{ev:?}");
}

#[tokio::test]
async fn a_deny_inside_a_grant_is_masked_and_cannot_be_written() {
    let _quiet = quiet_host();
    if !can_confine() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let secrets = ws.path().join("secrets");
    std::fs::create_dir(&secrets).unwrap();
    std::fs::write(secrets.join("token"), "SECRET\n").unwrap();
    let marker = ws.path().join("ran");
    let sh = format!(
        "cat secrets/token; ls secrets; echo x > secrets/planted || echo refused; touch '{}'",
        marker.display()
    );
    let c = Confinement::workspace_write().with_deny_read(&secrets);
    let Some(ev) = run_in(ws.path(), &sh, c).await else {
        return;
    };
    assert!(!ev.stdout.text.contains("SECRET"), "{ev:?}");
    assert!(!ev.stdout.text.contains("token"), "{ev:?}");
    assert!(ev.stdout.text.contains("refused"), "{ev:?}");
    assert!(
        marker.exists(),
        "the rest of the workspace is writable: {ev:?}"
    );
    assert!(!secrets.join("planted").exists());
    // The control: without the deny, the workspace grant reads it.
    let ev = run_in(ws.path(), &sh, Confinement::workspace_write())
        .await
        .unwrap();
    assert!(ev.stdout.text.contains("SECRET"), "{ev:?}");
}

#[tokio::test]
async fn network_off_denies_a_tcp_connect_and_a_udp_socket() {
    let _quiet = quiet_host();
    if !can_confine() {
        return;
    }
    if !Path::new("/bin/bash").exists() {
        skipped!("no bash for /dev/tcp");
        return;
    }
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let (tp, up) = (
        tcp.local_addr().unwrap().port(),
        udp.local_addr().unwrap().port(),
    );
    let sh = format!(
        "/bin/bash -c 'echo tcp > /dev/tcp/127.0.0.1/{tp}' && echo tcp-ok; \
         /bin/bash -c 'echo udp > /dev/udp/127.0.0.1/{up}' && echo udp-ok"
    );
    let dir = tempfile::tempdir().unwrap();
    let off = Confinement::none().with_network(Network::Off);
    let Some(ev) = run_in(dir.path(), &sh, off).await else {
        return;
    };
    // Isolated, the process has a network namespace of its own: the TCP
    // connect finds nobody listening there, the datagram goes to its own
    // loopback.
    assert!(!ev.stdout.text.contains("tcp-ok"), "{ev:?}");
    assert!(ev.stderr.text.contains("Connection refused"), "{ev:?}");
    assert!(tcp.accept().is_err(), "no connection arrived");
    let mut buf = [0u8; 16];
    assert!(udp.recv(&mut buf).is_err(), "no datagram arrived");
    let report = ev.confinement.as_ref().unwrap();
    assert_eq!(report.network, Network::Off);
    let isolation = report.isolation.as_ref().expect("isolated");
    assert!(
        isolation.namespaces.iter().any(|n| n == "net"),
        "{report:?}"
    );
    // The control: network on, both arrive.
    let on = Confinement::read_only().with_network(Network::On);
    let ev = run_in(dir.path(), &sh, on).await.unwrap();
    assert_eq!(ev.stdout.text, "tcp-ok\nudp-ok\n", "{ev:?}");
    std::thread::sleep(Duration::from_millis(50));
    assert!(tcp.accept().is_ok());
    let n = udp.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"udp\n");
}

/// Every launch with the network off has a network namespace of its own,
/// made for it or (as root) a spare made ahead of it and entered by its
/// clone: never the host's, never one another launch had, and its
/// loopback up (a listener on 127.0.0.1 inside answers a client inside).
///
/// The launches run at once and each waits until all have said which
/// namespace they are in: a namespace's inode number is reused once the
/// namespace is freed, so only namespaces alive together can be told apart
/// by it.
#[tokio::test]
async fn every_launch_with_the_network_off_has_a_new_network_namespace_with_its_loopback_up() {
    /// As many as `tokio::join!` below.
    const LAUNCHES: usize = 4;
    let _quiet = quiet_host();
    if !can_confine() {
        return;
    }
    if !Path::new("/usr/bin/python3").exists() {
        skipped!("no python3 for the loopback check");
        return;
    }
    let ws = Confinement::workspace_write();
    custodian::process::prepare_isolation(&ws, custodian::process::ExpectedLaunches::Many);
    let host = std::fs::read_link("/proc/self/ns/net").unwrap();
    let sh = "readlink /proc/self/ns/net; /usr/bin/python3 -c '\
import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen()
socket.create_connection(s.getsockname(), timeout=2); print(\"LOOPBACK\")'; \
touch \"$(mktemp ./alive.XXXXXX)\"; i=0; \
while [ ! -e all-alive ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done";
    let dir = tempfile::tempdir().unwrap();
    let alive = async {
        // Every launch has printed its namespace and is still in it.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("alive.")
            })
            .count()
            < LAUNCHES
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        std::fs::write(dir.path().join("all-alive"), b"").unwrap();
    };
    let run = || run_in(dir.path(), sh, ws.clone());
    let ((), a, b, c, d) = tokio::join!(alive, run(), run(), run(), run());
    let evidences = [a, b, c, d];
    let mut seen = vec![host.to_string_lossy().into_owned()];
    for ev in evidences {
        let Some(ev) = ev else {
            return;
        };
        assert_eq!(ev.exit_code, Some(0), "{ev:?}");
        let mut lines = ev.stdout.text.lines();
        let net = lines.next().unwrap_or_default().to_owned();
        assert!(net.starts_with("net:["), "{ev:?}");
        assert!(
            !seen.contains(&net),
            "{net} was the host's or another launch's: {ev:?}"
        );
        assert_eq!(lines.next(), Some("LOOPBACK"), "{ev:?}");
        seen.push(net);
    }
    // The control: with the network on, the launch is in the host's.
    let on = run_in(dir.path(), sh, ws.clone().with_network(Network::On))
        .await
        .unwrap();
    assert_eq!(
        on.stdout.text.lines().next(),
        Some(seen[0].as_str()),
        "{on:?}"
    );
}

#[tokio::test]
async fn a_confined_process_cannot_signal_outside_its_sandbox_but_can_inside() {
    let _quiet = quiet_host();
    if !can_confine() {
        return;
    }
    if custodian::confine::landlock_abi() < 6 {
        skipped!("signal scoping needs Landlock ABI 6");
        return;
    }
    let mut outside = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let sh = format!(
        "kill -0 {} && echo outside-ok; sleep 5 & kill $!; wait $!; echo inside=$?",
        outside.id()
    );
    let dir = tempfile::tempdir().unwrap();
    let confined = run_in(dir.path(), &sh, Confinement::read_only()).await;
    let control = run_in(dir.path(), &sh, Confinement::none()).await;
    let still_running = outside.try_wait().unwrap().is_none();
    let _ = outside.kill();
    let _ = outside.wait();
    let (Some(ev), Some(control)) = (confined, control) else {
        return;
    };
    assert!(still_running);
    assert_eq!(ev.stdout.text, "inside=143\n", "{ev:?}");
    // Isolated, a process outside is not even visible (pid namespace).
    assert!(ev.stderr.text.contains("No such process"), "{ev:?}");
    assert_eq!(
        control.stdout.text, "outside-ok\ninside=143\n",
        "{control:?}"
    );
}

#[tokio::test]
async fn the_kill_ladder_still_stops_a_confined_process() {
    let _quiet = quiet_host();
    if !can_confine() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let i = Invocation::validate(
        spec("sh", &["-c", "trap '' TERM; sleep 30 & wait"])
            .with_timeout(Duration::from_millis(200))
            .with_confinement(Confinement::read_only()),
    )
    .unwrap();
    let ev = match run(i, &LaunchOptions::new(dir.path())).await {
        Ok(ev) => ev,
        Err(ProcessError::Confinement(ConfineError::SpawnerUnavailable { reason })) => {
            skipped!("no confining spawner here ({reason})");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!(ev.status, ProcessStatus::TimedOut);
    assert_eq!(ev.descendants.verdict, DescendantVerdict::Terminated);
    assert!(ev.escalation.len() >= 2, "TERM then KILL: {ev:?}");
}

#[tokio::test]
async fn workspace_write_writes_beneath_the_workspace_only() {
    let _quiet = quiet_host();
    if !can_confine() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let (ws, out) = (root.path().join("ws"), root.path().join("out"));
    std::fs::create_dir(&ws).unwrap();
    std::fs::create_dir(&out).unwrap();
    let sh = format!(
        "echo in > in && echo in-ok; echo x > '{o}/f'; \
         mv in '{o}/moved'; ln in '{o}/linked'; true",
        o = out.display()
    );
    let Some(ev) = run_in(&ws, &sh, Confinement::workspace_write()).await else {
        return;
    };
    assert_eq!(ev.stdout.text, "in-ok\n", "{ev:?}");
    assert!(ws.join("in").exists(), "the rename must not move it out");
    for name in ["f", "moved", "linked"] {
        assert!(!out.join(name).exists(), "{name}: {ev:?}");
    }
    assert_eq!(ev.stderr.text.lines().count(), 3, "{ev:?}");
    assert!(ev.confinement.as_ref().unwrap().workspace_writable);
    // The controls: read-only cannot write the workspace; unconfined
    // writes outside.
    std::fs::remove_file(ws.join("in")).unwrap();
    let ev = run_in(&ws, &sh, Confinement::read_only()).await.unwrap();
    assert!(!ws.join("in").exists(), "{ev:?}");
    let _ = run_in(&ws, &sh, Confinement::none()).await.unwrap();
    assert!(out.join("f").exists() && out.join("moved").exists());
}

#[tokio::test]
async fn strict_refuses_what_the_kernel_cannot_enforce_and_launches_nothing() {
    let _quiet = quiet_host();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let sh = format!("touch '{}'", marker.display());
    let mut c = Confinement::workspace_write();
    c.min_abi = Some(99);
    match run(script(&sh, c.clone()), &LaunchOptions::new(dir.path())).await {
        Err(ProcessError::Confinement(ConfineError::Unsupported(u))) => {
            assert_eq!(u.feature, Feature::MinAbi);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!marker.exists());
    if !can_confine() {
        return;
    }
    // Best-effort launches and says what it did not enforce.
    let c = c.with_enforcement(Enforcement::BestEffort);
    let Some(ev) = run_in(dir.path(), &sh, c).await else {
        return;
    };
    assert!(marker.exists(), "{ev:?}");
    let report = ev.confinement.as_ref().unwrap();
    assert_eq!(report.not_enforced.len(), 1);
    assert_eq!(report.not_enforced[0].feature, Feature::MinAbi);
}

#[tokio::test]
async fn the_group_tier_refuses_a_confinement_rather_than_run_unconfined() {
    let _quiet = quiet_host();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let sh = format!("touch '{}'", marker.display());
    let opts =
        LaunchOptions::new(dir.path()).with_containment(custodian::contain::Containment::Group);
    let c = Confinement::read_only();
    if custodian::confine::landlock_abi() == 0 {
        // Strict refuses earlier, for the missing kernel feature.
        assert!(run(script(&sh, c), &opts).await.is_err());
        return;
    }
    match run(script(&sh, c), &opts).await {
        Err(ProcessError::Confinement(ConfineError::SpawnerUnavailable { .. })) => {}
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!marker.exists());
    run(script(&sh, Confinement::none()), &opts).await.unwrap();
    assert!(marker.exists());
}

#[tokio::test]
async fn confined_evidence_validates_against_the_schema() {
    let _quiet = quiet_host();
    if !can_confine() {
        return;
    }
    let validator = crate::common::evidence_schema();
    let dir = tempfile::tempdir().unwrap();
    let c = Confinement::read_only()
        .with_deny_read(dir.path().join("x"))
        .with_allow_read("/usr");
    let Some(ev) = run_in(dir.path(), "true", c).await else {
        return;
    };
    let value: serde_json::Value = serde_json::from_str(&ev.to_json()).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}\n{value}");
    assert!(value["confinement"]["landlock_abi"].as_u64().unwrap() >= 1);
}

#[tokio::test]
async fn a_confined_process_cannot_reach_an_abstract_unix_socket_outside_its_sandbox() {
    use std::os::linux::net::SocketAddrExt;
    let _quiet = quiet_host();
    if !can_confine() {
        return;
    }
    if custodian::confine::landlock_abi() < 6 {
        skipped!("abstract unix socket scoping needs Landlock ABI 6");
        return;
    }
    if !Path::new("/usr/bin/python3").exists() {
        skipped!("no /usr/bin/python3 to connect with");
        return;
    }
    let name = format!("custodian-confine-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    let py = format!(
        "/usr/bin/python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); \
         s.connect(b'\\0{name}'); print('connected')\""
    );
    let dir = tempfile::tempdir().unwrap();
    // Scoping alone, with no filesystem or network rule that could refuse
    // it instead.
    let mut scoped = Confinement::none();
    scoped.scoped = true;
    let Some(ev) = run_in(dir.path(), &py, scoped).await else {
        return;
    };
    assert_eq!(ev.stdout.text, "", "{ev:?}");
    assert!(ev.stderr.text.contains("PermissionError"), "{ev:?}");
    assert!(listener.accept().is_err(), "no connection arrived");
    assert!(
        ev.confinement
            .as_ref()
            .unwrap()
            .scoped
            .iter()
            .any(|s| s == "abstract_unix_socket")
    );
    // The control: unconfined, it connects.
    let ev = run_in(dir.path(), &py, Confinement::none()).await.unwrap();
    assert_eq!(ev.stdout.text, "connected\n", "{ev:?}");
}

/// Whether this process holds a descriptor of the namespace `ns` names
/// (`mnt:[inode]`, as `/proc/PID/ns/mnt` reads).
fn holds_namespace(ns: &Path) -> bool {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == ns))
}

/// An isolated launch's composed view (its mount namespace) is held past
/// the init's exit, so the driver sees the exit without waiting for the
/// view's teardown (every `umount` and an RCU grace period), and it is
/// released a moment after the settlement, off its path: nothing is left.
#[tokio::test]
async fn an_isolated_views_mount_namespace_is_released_after_the_settlement() {
    if !can_confine() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let inv = Invocation::validate(
        spec("sleep", &["30"])
            .with_timeout(Duration::from_secs(60))
            .with_tunables(TUN)
            .with_confinement(Confinement::workspace_write()),
    )
    .unwrap();
    let running = match custodian::process::launch(inv, &LaunchOptions::new(ws.path())) {
        Ok(r) => r,
        Err(e) => {
            skipped!("no isolated launch here: {e}");
            return;
        }
    };
    let ns = std::fs::read_link(format!("/proc/{}/ns/mnt", running.pid())).unwrap();
    assert_ne!(ns, std::fs::read_link("/proc/self/ns/mnt").unwrap());
    assert!(holds_namespace(&ns), "the view {ns:?} is not held");
    running.cancel();
    let ev = running.settled().await;
    assert_eq!(ev.status, ProcessStatus::Cancelled, "{ev:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while holds_namespace(&ns) {
        assert!(
            std::time::Instant::now() < deadline,
            "the view {ns:?} was never released"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A host socket that is removed between the launch's plan (which lists the
/// host's sockets to mask them) and the composition of its view needs no
/// mask, and must not fail the launch: here a thread binds and removes
/// sockets outside every fresh mount of the view (`/var/tmp`) as fast as it
/// can while isolated launches run. Before, the mask's `move_mount` onto
/// the vanished path failed the launch (`confinement_apply_failed` at
/// `View`, `ENOENT`), as other tests' sockets did under CI's parallel runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_socket_removed_while_a_view_is_composed_does_not_fail_the_launch() {
    if !can_confine() {
        return;
    }
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let churn = tempfile::Builder::new()
        .prefix("custodian-sockets-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicU64::new(0));
    let churner = {
        let (dir, stop, made) = (churn.path().to_owned(), stop.clone(), made.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // A few at once, so that some are listed by each plan.
                let paths: Vec<_> = (0..8)
                    .map(|k| dir.join(format!("s{}", (n + k) % 64)))
                    .collect();
                let held: Vec<_> = paths
                    .iter()
                    .filter_map(|p| std::os::unix::net::UnixListener::bind(p).ok())
                    .collect();
                made.fetch_add(held.len() as u64, Ordering::Relaxed);
                for p in &paths {
                    let _ = std::fs::remove_file(p);
                }
                drop(held);
                n += 8;
            }
        })
    };
    let mut failures = Vec::new();
    for i in 0..150 {
        match run(
            script("true", Confinement::workspace_write()),
            &LaunchOptions::new(ws.path()),
        )
        .await
        {
            Ok(ev) => assert_eq!(ev.exit_code, Some(0), "{ev:?}"),
            Err(ProcessError::Confinement(ConfineError::SpawnerUnavailable { reason })) => {
                skipped!("no confining spawner here ({reason})");
                break;
            }
            Err(e) => failures.push(format!("launch {i}: {e}")),
        }
    }
    stop.store(true, Ordering::Relaxed);
    churner.join().unwrap();
    assert!(made.load(Ordering::Relaxed) > 0, "no socket was made");
    assert!(
        failures.is_empty(),
        "{} failed: {failures:#?}",
        failures.len()
    );
}
