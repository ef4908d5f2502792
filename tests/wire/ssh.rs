//! A remote node over a real `sshd` on localhost: the edge starts
//! `custodian node` through `ssh` with [`WireClient::spawn_node`] and drives
//! requests end to end through the coordinator; then kills the transport
//! (the local `ssh` process) mid-request, and later the remote node itself.
//!
//! - End to end: open, write an artifact, run a process, the coordinator's
//!   one cleanup → `cleaned`.
//! - The transport dies: the edge's pending call fails `Disconnected`, the
//!   coordinator's cleanup `node_unreachable`; the node sees its stdin
//!   close, cancels the running process (dead by pid, its cgroup gone),
//!   removes the job and exits on its own.
//! - The node dies (SIGKILL): the edge gets `Disconnected`; a node started
//!   again through ssh reclaims the request from its journal and answers the
//!   edge's cleanup `reclaimed`.
//!
//! The node deletes as root, so the body (sshd, ssh and the node included)
//! runs in a private mount namespace where every mount but its scratch
//! directory and the cgroup v2 hierarchy is read-only, and checks that
//! first. sshd needs its privilege-separation directory `/run/sshd`, which
//! the outer test creates before the namespace makes `/run` read-only.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use custodian::contain::Hierarchy;
use custodian::machine::request::{Candidate, CleanupReport, FinalResult};
use custodian::request::{Coordinator, RequestId, RequestLimits, TerminalSink, TerminalWriteError};
use custodian::wire::{
    CleanupStatus, NodeTransport, ProcessSummary, RunSpec, WireClient, WireError,
};

const BIN: &str = env!("CARGO_BIN_EXE_custodian");
const INNER: &str = "ssh::a_node_over_ssh_cleans_up_when_the_transport_or_the_node_dies_inner";

/// The binaries the test needs, where they are installed.
struct Tools {
    sshd: PathBuf,
    ssh: PathBuf,
    keygen: PathBuf,
}

fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

impl Tools {
    fn find() -> Result<Tools, String> {
        let get = |n: &str| find(n).ok_or_else(|| format!("no {n} installed"));
        Ok(Tools {
            sshd: get("sshd")?,
            ssh: get("ssh")?,
            keygen: get("ssh-keygen")?,
        })
    }
}

fn cgroup_mount() -> Option<PathBuf> {
    Hierarchy::discover().ok().map(|h| h.mount)
}

#[test]
fn a_node_over_ssh_cleans_up_when_the_transport_or_the_node_dies() {
    let tools = match Tools::find() {
        Ok(t) => t,
        Err(why) => {
            skipped!("{why} (.ci/run installs openssh-server and openssh-client)");
            return;
        }
    };
    if !crate::sandbox::is_root() {
        skipped!("an sshd that logs a user in needs root");
        return;
    }
    drop(tools);
    // Privilege separation: sshd refuses to start without it.
    if let Err(e) = std::fs::create_dir_all("/run/sshd") {
        skipped!("cannot create sshd's /run/sshd ({e})");
        return;
    }
    let keep = cgroup_mount();
    let Some(text) =
        crate::sandbox::run_guarded_keeping(INNER, &std::env::temp_dir(), keep.as_deref())
    else {
        return;
    };
    for line in text.lines().filter(|l| l.contains("over ssh:")) {
        eprintln!("{line}");
    }
}

struct AckSink;

impl TerminalSink for AckSink {
    async fn write_terminal(
        &self,
        _: &RequestId,
        _: &FinalResult,
    ) -> Result<(), TerminalWriteError> {
        Ok(())
    }
}

/// sshd on 127.0.0.1, killed and reaped on drop.
struct Sshd {
    child: std::process::Child,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Everything `ssh` needs to log in to the test's sshd.
struct Login {
    ssh: PathBuf,
    port: u16,
    key: PathBuf,
}

impl Login {
    /// The `ssh` argument vector that starts a node on `ws`.
    fn node_args(&self, ws: &Path) -> Vec<String> {
        [
            "-T",
            "-F",
            "/dev/null",
            "-p",
            &self.port.to_string(),
            "-i",
            &self.key.display().to_string(),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "LogLevel=ERROR",
            "root@127.0.0.1",
            BIN,
            "node",
            "--workspace",
            &ws.display().to_string(),
            "--cleanup-bound",
            "5s",
        ]
        .map(str::to_owned)
        .to_vec()
    }

    fn spawn(&self, ws: &Path) -> (WireClient, NodeTransport) {
        WireClient::spawn_node(&self.ssh, self.node_args(ws), 1 << 20).expect("start ssh")
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run a tool");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts sshd with a throwaway host key and an authorized key in `dir`.
fn start_sshd(tools: &Tools, dir: &Path) -> (Sshd, Login) {
    let keygen = |name: &str| {
        run(Command::new(&tools.keygen)
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(dir.join(name)));
    };
    keygen("host_key");
    keygen("user_key");
    std::fs::copy(dir.join("user_key.pub"), dir.join("authorized_keys")).unwrap();
    let config = dir.join("sshd_config");
    std::fs::write(
        &config,
        format!(
            "ListenAddress 127.0.0.1\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n\
             PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\n",
            d = dir.display()
        ),
    )
    .unwrap();
    // A free port: the kernel picks one, the probe socket lets it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(&tools.sshd)
        .arg("-D")
        .arg("-e")
        .arg("-f")
        .arg(&config)
        .arg("-p")
        .arg(port.to_string())
        .stdin(Stdio::null())
        .spawn()
        .expect("start sshd");
    let sshd = Sshd { child };
    for _ in 0..500 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            let login = Login {
                ssh: tools.ssh.clone(),
                port,
                key: dir.join("user_key"),
            };
            return (sshd, login);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("sshd never listened on {port}");
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !matches!(
            s.rfind(')')
                .and_then(|i| s[i + 1..].trim_start().chars().next()),
            Some('Z' | 'X') | None
        )
    })
}

/// The live `custodian node` processes serving `ws` (started by sshd).
fn nodes_on(ws: &Path) -> Vec<u32> {
    let want = ws.as_os_str().as_encoded_bytes();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let argv: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if argv.first() == Some(&BIN.as_bytes())
            && argv.get(1) == Some(&&b"node"[..])
            && argv.contains(&want)
            && alive(pid)
        {
            out.push(pid);
        }
    }
    out
}

/// The cgroup v2 directory `pid` is in, when it is below a node's
/// `custodian-<pid>` cgroup: the request's `r<n>` cgroup above it.
fn request_cgroup_of(pid: u32, mount: Option<&Path>) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let at = parts.iter().position(|p| p.starts_with("custodian-"))?;
    let r = parts.get(at + 1).filter(|p| p.starts_with('r'))?;
    let mut dir = mount?.to_path_buf();
    for p in &parts[..=at] {
        dir.push(p);
    }
    Some(dir.join(r))
}

/// On the way out (a failed assertion included): SIGKILLs whatever node
/// still serves the workspace and the sleepers it recorded, so a failing
/// run leaves nothing behind.
struct Reaper(PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        let mut pids = nodes_on(&self.0);
        for f in ["sleeper2.pid", "sleeper3.pid"] {
            let pid = std::fs::read_to_string(self.0.join(f))
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            // Only if the pid is still that sleeper, not a reused one.
            pids.extend(pid.filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c == b"sleep\x00300\0")
            }));
        }
        for pid in pids {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

async fn wait_for_file(path: &Path) -> String {
    for _ in 0..1000 {
        if let Ok(s) = std::fs::read_to_string(path) {
            if s.ends_with('\n') {
                return s;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} never appeared", path.display());
}

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..3000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out: {what}");
}

fn sh(script: &str, timeout_ms: u64) -> RunSpec {
    RunSpec {
        executable: "/bin/sh".into(),
        argv: vec!["-c".into(), script.into()],
        env: Default::default(),
        cwd: None,
        timeout_ms: Some(timeout_ms),
        confinement: None,
    }
}

/// A process that records its pid in `file` (in the workspace root, outside
/// the job) and sleeps.
/// Runs [`sleeper`] for `id` in a task; returns the task and the sleeper's
/// pid once it has written it to `ws/file`.
async fn start_sleeper(
    client: &WireClient,
    id: &RequestId,
    ws: &Path,
    file: &str,
) -> (
    tokio::task::JoinHandle<Result<ProcessSummary, WireError>>,
    u32,
) {
    let running = {
        let (client, id, spec) = (client.clone(), id.clone(), sleeper(file));
        tokio::spawn(async move { client.run_process(&id, spec).await })
    };
    let pid = wait_for_file(&ws.join(file)).await.trim().parse().unwrap();
    (running, pid)
}

fn sleeper(file: &str) -> RunSpec {
    sh(
        &format!("echo $$ > {file}.tmp && mv {file}.tmp {file}; exec sleep 300"),
        120_000,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by a_node_over_ssh_cleans_up_when_the_transport_or_the_node_dies in a mount namespace"]
async fn a_node_over_ssh_cleans_up_when_the_transport_or_the_node_dies_inner() {
    let mount = cgroup_mount();
    let scratch = crate::sandbox::scratch_keeping(mount.as_deref());
    let tools = Tools::find().unwrap();
    let keys = scratch.join("ssh");
    std::fs::create_dir(&keys).unwrap();
    let (_sshd, login) = start_sshd(&tools, &keys);
    let ws = scratch.join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("before.txt"), "the user's").unwrap();
    let _reaper = Reaper(ws.clone());
    let job = |id: &RequestId| ws.join(".custodian/job").join(id.as_str());

    // 1. End to end through ssh, driven by the coordinator.
    let (client, transport) = login.spawn(&ws);
    let co = Coordinator::new(
        Arc::new(client.clone()),
        Arc::new(client.clone()),
        Arc::new(AckSink),
        RequestLimits::default(),
    );
    let id = RequestId::new("ssh-1").unwrap();
    let h = co.start(id.clone());
    assert!(!client.open_announced(&h).await.unwrap(), "a fresh open");
    assert!(job(&id).is_dir());
    let bytes = client
        .write_artifact(&id, "notes/plan.txt", "over ssh")
        .await
        .unwrap();
    assert_eq!(bytes, 8);
    assert_eq!(
        std::fs::read_to_string(job(&id).join("notes/plan.txt")).unwrap(),
        "over ssh"
    );
    let summary = client
        .run_process(&id, sh("echo ran > ran.txt; echo out", 20_000))
        .await
        .unwrap();
    assert_eq!(
        (
            summary.reason.as_str(),
            summary.exit_code,
            summary.stdout.as_str()
        ),
        ("exited", Some(0), "out\n"),
        "{summary:?}"
    );
    h.candidate(Candidate::Success);
    let done = tokio::time::timeout(Duration::from_secs(30), h.finished())
        .await
        .expect("completes");
    assert_eq!(done.result.cleanup(), CleanupReport::Cleaned, "{done:?}");
    assert!(matches!(done.result.primary(), Candidate::Success));
    assert!(!job(&id).exists(), "the job namespace is gone");
    let again = client.cleanup_workspace(&id).await.unwrap();
    assert_eq!((again.status, again.cached), (CleanupStatus::Cleaned, true));
    assert_eq!(
        std::fs::read_to_string(ws.join("ran.txt")).unwrap(),
        "ran\n"
    );

    // 2. The transport dies mid-request: a process runs when the local ssh
    //    is SIGKILLed.
    let id2 = RequestId::new("ssh-2").unwrap();
    let h2 = co.start(id2.clone());
    client.open_announced(&h2).await.unwrap();
    client.write_artifact(&id2, "a/b.txt", "x").await.unwrap();
    let (running, pid2) = start_sleeper(&client, &id2, &ws, "sleeper2.pid").await;
    assert!(alive(pid2));
    let cg2 = request_cgroup_of(pid2, mount.as_deref());
    if let Some(cg) = &cg2 {
        assert!(cg.is_dir(), "{cg:?}");
    } else {
        println!("over ssh: the node runs without a cgroup tier here; checking the pid only");
    }
    let node2 = nodes_on(&ws);
    assert_eq!(node2.len(), 1, "one node serves the workspace: {node2:?}");
    let ssh_pid = transport.id().expect("ssh runs");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(ssh_pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), transport.wait())
        .await
        .expect("the transport exits")
        .unwrap();
    assert_eq!(status.signal(), Some(9), "{status:?}");
    // The edge: a typed failure for the pending call, the next call and the
    // coordinator's cleanup.
    let pending = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the pending call ends")
        .unwrap();
    assert!(
        matches!(pending, Err(WireError::Disconnected)),
        "{pending:?}"
    );
    assert!(matches!(
        client.cleanup_workspace(&id2).await,
        Err(WireError::Disconnected)
    ));
    h2.candidate(Candidate::Success);
    let done2 = tokio::time::timeout(Duration::from_secs(30), h2.finished())
        .await
        .expect("completes");
    match done2.result.cleanup() {
        CleanupReport::Failed { code } => assert_eq!(code.as_str(), "node_unreachable"),
        other => panic!("{other:?}"),
    }
    // The node: its stdin closed; it cancels, cleans up and exits on its own.
    eventually("the node removes the job", || !job(&id2).exists()).await;
    eventually("the node's process is dead", || !alive(pid2)).await;
    eventually("the node exits", || nodes_on(&ws).is_empty()).await;
    if let Some(cg) = &cg2 {
        assert!(!cg.exists(), "the request's cgroup {cg:?} is gone");
    }
    assert_eq!(
        std::fs::read_to_string(ws.join("before.txt")).unwrap(),
        "the user's"
    );

    // 3. The node dies (SIGKILL) mid-request; a node started again reclaims.
    let (client3, transport3) = login.spawn(&ws);
    let id3 = RequestId::new("ssh-3").unwrap();
    client3.open_workspace(&id3).await.unwrap();
    client3.write_artifact(&id3, "c/d.txt", "y").await.unwrap();
    let (running, pid3) = start_sleeper(&client3, &id3, &ws, "sleeper3.pid").await;
    let cg3 = request_cgroup_of(pid3, mount.as_deref());
    let node3 = nodes_on(&ws);
    assert_eq!(node3.len(), 1, "{node3:?}");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(node3[0] as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let pending = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the pending call ends")
        .unwrap();
    assert!(
        matches!(pending, Err(WireError::Disconnected)),
        "{pending:?}"
    );
    let status3 = tokio::time::timeout(Duration::from_secs(30), transport3.wait())
        .await
        .expect("ssh exits with its node")
        .unwrap();
    assert!(!status3.success(), "{status3:?}");
    assert!(job(&id3).is_dir(), "a killed node cleans nothing");
    let (client4, transport4) = login.spawn(&ws);
    let report = tokio::time::timeout(Duration::from_secs(30), client4.cleanup_workspace(&id3))
        .await
        .expect("answered")
        .unwrap();
    assert_eq!(report.status, CleanupStatus::Reclaimed, "{report:?}");
    assert!(!job(&id3).exists(), "reclaimed");
    assert!(
        !alive(pid3),
        "the dead node's process was killed by the reclaim"
    );
    if let Some(cg) = &cg3 {
        assert!(!cg.exists(), "the request's cgroup {cg:?} is gone");
    }
    // The request whose transport died was cleaned by its own node.
    let report2 = client4.cleanup_workspace(&id2).await.unwrap();
    assert_eq!(report2.status, CleanupStatus::AlreadyGone, "{report2:?}");

    // The graceful end: closing the client ends the node and ssh.
    drop(client4);
    let status4 = tokio::time::timeout(Duration::from_secs(30), transport4.wait())
        .await
        .expect("ssh exits")
        .unwrap();
    assert!(status4.success(), "{status4:?}");
    assert!(nodes_on(&ws).is_empty());
    println!(
        "over ssh: end to end cleaned; transport killed → node_unreachable at the edge, node cleaned and exited; node killed → reclaimed on restart (cgroup checked: {})",
        cg2.is_some()
    );
}
