//! Prepared sandboxes (`process::spawn`, *A prepared sandbox*): from a
//! request's second isolated launch with the network off, the next
//! launch's sandbox is composed ahead and entered at the launch. Attacked
//! the way a sandbox composed at the launch is, and raced from the host
//! between its preparation and its launch: a protected path made or
//! replaced, a masked socket replaced. Each test checks from
//! `custodian::__bench::prepared_launches` which path a launch took, so
//! that it fails if the prepared path is never taken as well as if it
//! serves a stale view.
//!
//! In-process, so as the test binary's user (root: a test needs a root
//! launcher's request network and cgroups). An unprivileged launcher's
//! prepared launches run through the runtime as `CUSTODIAN_TEST_USER` in
//! `tests/runtime/main.rs::a_requests_prepared_sandbox_goes_with_it_as_an_unprivileged_user`.

use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use custodian::confine::Confinement;
use custodian::process::evidence::Evidence;
use custodian::process::{Invocation, LaunchOptions, run};

use crate::common::{TUN, fork_storm, quiet_host, spec};

/// The tests here read a process-wide counter: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Options whose launches share one network namespace, as a request's do.
fn in_request(ws: &Path) -> LaunchOptions {
    let mut opts = LaunchOptions::new(ws);
    custodian::__bench::share_one_network(&mut opts);
    opts
}

/// `sh -c script` under `workspace-write` in `opts`; with whether it ran
/// in a prepared sandbox.
async fn launch(opts: &LaunchOptions, script: &str) -> (Arc<Evidence>, bool) {
    let inv = Invocation::validate(
        spec("sh", &["-c", script])
            .with_timeout(Duration::from_secs(20))
            .with_tunables(TUN)
            .with_confinement(Confinement::workspace_write()),
    )
    .expect("valid invocation");
    let before = custodian::__bench::prepared_launches();
    let ev = run(inv, opts).await.expect("the launch runs");
    let prepared = custodian::__bench::prepared_launches() > before;
    (ev, prepared)
}

/// The host quiet and this module's tests one at a time, where this host
/// can prepare sandboxes; `None` (with the reason printed) otherwise.
fn one_at_a_time() -> Option<(
    std::sync::RwLockReadGuard<'static, ()>,
    std::sync::MutexGuard<'static, ()>,
)> {
    let quiet = quiet_host();
    let one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    can_prepare().then_some((quiet, one))
}

/// Launches `script` up to five times, `check`ing each, until one runs
/// in a prepared sandbox: whether one did.
async fn until_prepared(opts: &LaunchOptions, script: &str, check: impl Fn(&Evidence)) -> bool {
    for _ in 0..5 {
        let (ev, p) = launch(opts, script).await;
        check(&ev);
        if p {
            return true;
        }
    }
    false
}

/// Where this host cannot prepare sandboxes, says why.
fn can_prepare() -> bool {
    if !is_root() {
        skipped!(
            "these attacks run in-process and need root (a root launcher's request network and cgroups)"
        );
        return false;
    }
    if custodian::confine::landlock_abi() == 0 {
        skipped!("the kernel has no Landlock");
        return false;
    }
    true
}

const ATTACK: &str = r#"grep CapEff /proc/self/status
mknod "$TMPDIR/d" c 1 3 2>/dev/null && echo MADE
ls /proc | grep -c '^[0-9]'
echo x > .custodian/probe 2>/dev/null && echo WROTE_INTERNAL
echo x > .git/hooks/post-commit 2>/dev/null && echo WROTE_HOOK
echo x > .git/config 2>/dev/null && echo WROTE_CONFIG
echo ok > out-$$ && echo WORKSPACE
grep Cpus_allowed_list: /proc/self/status"#;

fn assert_contained(ev: &Evidence, ws: &Path) {
    let out = &ev.stdout.text;
    assert!(out.contains("CapEff:\t0000000000000000"), "{ev:?}");
    for bad in ["MADE", "WROTE_INTERNAL", "WROTE_HOOK", "WROTE_CONFIG"] {
        assert!(!out.contains(bad), "{bad}: {ev:?}");
    }
    assert!(out.contains("WORKSPACE"), "{ev:?}");
    // The spawner thread, placed beside its launcher, took the whole
    // affinity back before it cloned anything.
    let own = super::own_cpus();
    assert!(out.lines().any(|l| l == own), "{own} not kept: {ev:?}");
    let procs: usize = out
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(usize::MAX);
    assert!(procs < 10, "{procs} processes visible: {ev:?}");
    assert!(!ws.join(".git/hooks/post-commit").exists());
    assert!(!ws.join(".custodian/probe").exists());
}

/// A workspace with `.git` and `.custodian/`, and options for its
/// launches as one request's.
fn git_workspace() -> (tempfile::TempDir, LaunchOptions) {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    git_dir(dir.path());
    let opts = in_request(dir.path());
    (dir, opts)
}

fn git_dir(ws: &Path) {
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::create_dir_all(ws.join(".custodian")).unwrap();
}

#[tokio::test]
async fn a_requests_later_launches_run_prepared_and_stay_confined() {
    let Some(_guards) = one_at_a_time() else {
        return;
    };
    let (dir, opts) = git_workspace();
    let ws = dir.path();
    let mut prepared = Vec::new();
    for _ in 0..5 {
        let (ev, p) = launch(&opts, ATTACK).await;
        assert_eq!(ev.exit_code, Some(0), "{ev:?}");
        assert_contained(&ev, ws);
        prepared.push(p);
    }
    // The first two compose their own; the second prepares the third's,
    // and each prepared one the next. (A host socket bound or removed by
    // anything else between a preparation and its launch changes the
    // plan, and that launch composes its own: not every one is counted.)
    assert_eq!(prepared[..2], [false, false]);
    assert!(prepared[2..].contains(&true), "{prepared:?}");
    // A launch that is not the request's composes its own.
    let (ev, p) = launch(&LaunchOptions::new(ws), ATTACK).await;
    assert_contained(&ev, ws);
    assert!(!p);
}

#[tokio::test]
async fn a_protected_path_made_after_the_preparation_is_protected() {
    let Some(_guards) = one_at_a_time() else {
        return;
    };
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let ws = dir.path();
    let opts = in_request(ws);
    for _ in 0..2 {
        launch(&opts, "true").await;
    }
    // The third launch's sandbox is prepared for a workspace without
    // `.git`; the host makes one before the launch.
    std::thread::sleep(Duration::from_millis(50));
    git_dir(ws);
    let (ev, p) = launch(&opts, ATTACK).await;
    assert!(!p, "a sandbox prepared for another view served: {ev:?}");
    assert_contained(&ev, ws);
    // A later one is prepared with `.git` in its view.
    assert!(until_prepared(&opts, ATTACK, |ev| assert_contained(ev, ws)).await);
}

#[tokio::test]
async fn a_protected_path_replaced_after_the_preparation_is_protected() {
    let Some(_guards) = one_at_a_time() else {
        return;
    };
    let (dir, opts) = git_workspace();
    let ws = dir.path();
    for _ in 0..3 {
        launch(&opts, "true").await;
    }
    // The fourth launch's sandbox is prepared (the third ran prepared and
    // prepared it): its read-only mount sits on the `.git/hooks` of now.
    // The host replaces the directory (the same path, another inode),
    // which takes that mount away in the sandbox.
    std::thread::sleep(Duration::from_millis(50));
    std::fs::rename(ws.join(".git/hooks"), ws.join("hooks.old")).unwrap();
    std::fs::create_dir(ws.join(".git/hooks")).unwrap();
    let (ev, p) = launch(&opts, ATTACK).await;
    assert!(!p, "a stale prepared sandbox served: {ev:?}");
    assert_contained(&ev, ws);
    // The workspace itself replaced: the same check on its copy.
    for _ in 0..1 {
        launch(&opts, "true").await;
    }
    std::thread::sleep(Duration::from_millis(50));
    let moved = tempfile::tempdir_in("/var/tmp").unwrap();
    let old = moved.path().join("old");
    std::fs::rename(ws, &old).unwrap();
    std::fs::create_dir(ws).unwrap();
    git_dir(ws);
    let (ev, p) = launch(&opts, "echo new > here").await;
    assert!(!p, "a stale prepared sandbox served: {ev:?}");
    assert!(ws.join("here").exists(), "{ev:?}");
    assert!(!old.join("here").exists(), "{ev:?}");
}

#[tokio::test]
async fn a_host_socket_bound_again_after_the_preparation_is_masked() {
    let Some(_guards) = one_at_a_time() else {
        return;
    };
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let ws = dir.path();
    let outside = tempfile::tempdir_in("/var/tmp").unwrap();
    let sock = outside.path().join("s.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let opts = in_request(ws);
    let probe = format!(
        "python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print(\"CONNECTED\")' {} 2>&1 || echo REFUSED",
        sock.display()
    );
    for _ in 0..3 {
        let (ev, _) = launch(&opts, &probe).await;
        assert!(ev.stdout.text.contains("REFUSED"), "{ev:?}");
    }
    // The host binds the path again (another inode): the prepared
    // sandbox's mask was on the old one.
    std::thread::sleep(Duration::from_millis(50));
    drop(listener);
    std::fs::remove_file(&sock).unwrap();
    let _listener = UnixListener::bind(&sock).unwrap();
    let (ev, p) = launch(&opts, &probe).await;
    assert!(!p, "a stale prepared sandbox served: {ev:?}");
    assert!(ev.stdout.text.contains("REFUSED"), "{ev:?}");
    assert!(!ev.stdout.text.contains("CONNECTED"), "{ev:?}");
    // A successor prepared with the new socket masks it too.
    let refused = |ev: &Evidence| assert!(ev.stdout.text.contains("REFUSED"), "{ev:?}");
    assert!(until_prepared(&opts, &probe, refused).await);
}

/// The processes on the host whose network namespace is `ns`.
fn in_namespace(ns: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read_link(entry.path().join("ns/net")).is_ok_and(|l| l.to_string_lossy() == ns)
        {
            found.push(pid);
        }
    }
    found
}

#[tokio::test]
async fn an_unused_prepared_sandbox_goes_with_its_request() {
    let Some(_guards) = one_at_a_time() else {
        return;
    };
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let opts = in_request(dir.path());
    let mut ns = String::new();
    for _ in 0..3 {
        let (ev, _) = launch(&opts, "readlink /proc/self/ns/net").await;
        ns = ev.stdout.text.trim().to_owned();
    }
    // The fourth launch's sandbox waits in the request's namespace.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while in_namespace(&ns).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!in_namespace(&ns).is_empty(), "no sandbox prepared in {ns}");
    drop(opts);
    assert_eq!(in_namespace(&ns), Vec::<u32>::new(), "left in {ns}");
}

#[tokio::test]
async fn a_launch_from_a_large_descriptor_table_runs_prepared_with_only_its_stdio() {
    let Some(_guards) = one_at_a_time() else {
        return;
    };
    // Hundreds of descriptors open in this process (not close-on-exec):
    // the launch's pipes are numbered high, and none of these may reach
    // the program.
    let held: Vec<std::os::fd::OwnedFd> = (0..300)
        .map(|_| {
            rustix::fs::open(
                "/dev/null",
                rustix::fs::OFlags::RDONLY,
                rustix::fs::Mode::empty(),
            )
            .unwrap()
        })
        .collect();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let opts = in_request(dir.path());
    let mut prepared = Vec::new();
    for _ in 0..5 {
        let (ev, p) = launch(&opts, "echo hello; ls /proc/self/fd | wc -l").await;
        assert_eq!(ev.exit_code, Some(0), "{ev:?}");
        let mut lines = ev.stdout.text.lines();
        assert_eq!(lines.next(), Some("hello"), "{ev:?}");
        let open: usize = lines.next().unwrap().trim().parse().unwrap();
        // 0, 1, 2 and the one `ls` reads the directory through.
        assert!(open <= 4, "{open} descriptors in the program: {ev:?}");
        prepared.push(p);
    }
    assert_eq!(prepared[..2], [false, false]);
    assert!(prepared[2..].contains(&true), "{prepared:?}");
    drop(held);
}

#[tokio::test]
async fn a_prepared_launchs_evidence_is_a_composed_ones() {
    let Some(_guards) = one_at_a_time() else {
        return;
    };
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let opts = in_request(dir.path());
    let (mut composed, mut prepared) = (None, None);
    for _ in 0..6 {
        let (ev, p) = launch(&opts, "echo out; echo err >&2; exit 3").await;
        if p {
            prepared.get_or_insert(ev);
        } else {
            composed.get_or_insert(ev);
        }
    }
    let composed = composed.expect("the request's first launch composes its view");
    let prepared = prepared.expect("no launch ran in a prepared sandbox");
    // Everything but the timings and the pids: what was enforced (the
    // isolation report with its namespaces, masks and protected paths),
    // how it ended, what it wrote.
    let facts = |ev: &Evidence| {
        serde_json::json!({
            "confinement": ev.confinement,
            "status": ev.status,
            "exit_code": ev.exit_code,
            "signal": ev.signal,
            "escalation": ev.escalation,
            "stdout": ev.stdout.text,
            "stderr": ev.stderr.text,
            "network": ev.network,
        })
    };
    assert_eq!(facts(&prepared), facts(&composed));
    assert_eq!(prepared.exit_code, Some(3), "{prepared:?}");
    assert!(
        prepared
            .confinement
            .as_ref()
            .is_some_and(|c| c.isolation.is_some()),
        "{prepared:?}"
    );
}

/// Prints `cookie <n>`: the network namespace's cookie
/// (`SO_NETNS_COOKIE`), which the kernel never gives another namespace
/// while the machine runs (an inode number is reused once its namespace is
/// released).
const NET_COOKIE: &str = "python3 -c 'import socket, struct
s = socket.socket(socket.AF_UNIX)
print(\"cookie\", struct.unpack(\"Q\", s.getsockopt(socket.SOL_SOCKET, 71, 8))[0])'";

/// The cookie [`NET_COOKIE`] printed in `text`.
fn net_cookie(text: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix("cookie "))
        .unwrap_or_else(|| panic!("no cookie in {text:?}"))
        .to_owned()
}

/// The cookie of the network namespace `ns` (a `/proc/<pid>/ns/net`), or
/// of this process's (`None`).
fn cookie_of(ns: Option<&str>) -> String {
    let mut cmd = std::process::Command::new("nsenter");
    if let Some(ns) = ns {
        cmd.arg(format!("--net={ns}"));
    }
    let out = cmd
        .args(["sh", "-c", NET_COOKIE])
        .output()
        .expect("the cookie's probe runs");
    assert!(out.status.success(), "{out:?}");
    net_cookie(&String::from_utf8_lossy(&out.stdout))
}

/// Asserts that no two of the namespace cookies `nets` are the same and
/// that none is this process's; returns this process's.
fn all_distinct_from_the_hosts(nets: &[String]) -> String {
    let host = cookie_of(None);
    let distinct: std::collections::HashSet<&String> = nets.iter().collect();
    assert_eq!(
        distinct.len(),
        nets.len(),
        "a namespace served twice: {nets:?}"
    );
    assert!(!nets.contains(&host), "{nets:?}");
    host
}

/// Outside a request, while a `SpareKeeper` lives (an embedder that
/// launches again and again): each isolated launch has the next one's
/// sandbox prepared, in a network namespace made for that launch alone.
/// The launch that takes it stays as contained as a composed one, and no
/// two launches share a network namespace. Without a keeper nothing is
/// prepared; the last keeper's drop kills the sandbox that waits.
#[tokio::test]
async fn outside_a_request_a_keeper_has_the_next_launch_prepared_in_a_network_of_its_own() {
    let Some(_guards) = one_at_a_time() else {
        return;
    };
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let ws = dir.path();
    git_dir(ws);
    let opts = LaunchOptions::new(ws);
    let script = format!("{ATTACK}\n{NET_COOKIE}");
    for _ in 0..3 {
        let (ev, p) = launch(&opts, &script).await;
        assert_contained(&ev, ws);
        assert!(!p, "prepared without a keeper: {ev:?}");
    }
    assert_eq!(custodian::__bench::standalone_sandbox_init(), None);

    let keeper = custodian::contain::SpareKeeper::new();
    let (mut nets, mut prepared) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let (ev, p) = launch(&opts, &script).await;
        assert_eq!(ev.exit_code, Some(0), "{ev:?}");
        assert_contained(&ev, ws);
        nets.push(net_cookie(&ev.stdout.text));
        prepared.push(p);
    }
    // The first after the keeper composes its own and prepares the next;
    // each later one runs prepared (a host socket bound or removed between
    // a preparation and its launch changes the plan: not every one).
    assert!(!prepared[0], "{prepared:?}");
    assert!(
        prepared[1..].iter().filter(|&&p| p).count() >= 2,
        "{prepared:?}"
    );
    let host = all_distinct_from_the_hosts(&nets);

    // The next launch's sandbox waits, in a namespace no launch had.
    let init = custodian::__bench::standalone_sandbox_init().expect("a sandbox waits");
    let waiting = format!("/proc/{init}");
    let its_net = std::fs::read_link(format!("{waiting}/ns/net"))
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let its_cookie = cookie_of(Some(&format!("{waiting}/ns/net")));
    assert!(
        its_cookie != host && !nets.contains(&its_cookie),
        "{its_cookie}: {nets:?}"
    );
    assert!(in_namespace(&its_net).contains(&init));
    // Its cgroup, made beneath the base for the launch that never came.
    let cgroup = std::fs::read_to_string(format!("{waiting}/cgroup")).unwrap();
    let cgroup = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_owned);
    let cgroup_dir = cgroup.as_deref().and_then(|c| {
        let h = custodian::contain::Hierarchy::discover().ok()?;
        Some(h.mount.join(c.trim_start_matches('/')))
    });
    if let Some(dir) = &cgroup_dir {
        assert!(dir.is_dir(), "{}", dir.display());
        assert!(
            dir.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('p')),
            "{}",
            dir.display()
        );
    }
    drop(keeper);
    assert_eq!(custodian::__bench::standalone_sandbox_init(), None);
    assert_eq!(
        in_namespace(&its_net),
        Vec::<u32>::new(),
        "left in {its_net}"
    );
    assert!(!Path::new(&waiting).exists(), "{waiting} not reaped");
    if let Some(dir) = cgroup_dir {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }

    // Without a keeper again: composed, nothing prepared.
    let (ev, p) = launch(&opts, &script).await;
    assert_contained(&ev, ws);
    assert!(!p);
    assert_eq!(custodian::__bench::standalone_sandbox_init(), None);
}

/// Launches outside a request from several threads at once, a keeper
/// held: whichever takes the sandbox prepared by another's launch, each
/// launch runs in a network namespace no other launch had, and each is as
/// contained as a composed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn concurrent_launches_outside_a_request_never_share_a_prepared_network() {
    // Three streams of launches fork without pause: no test that needs a
    // quiet host for its group scan runs meanwhile.
    let _storm = fork_storm();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !can_prepare() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let ws = dir.path().to_owned();
    git_dir(&ws);
    let keeper = custodian::contain::SpareKeeper::new();
    let before = custodian::__bench::prepared_launches();
    let script = format!("{ATTACK}\n{NET_COOKIE}");
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let (ws, script) = (ws.clone(), script.clone());
            tokio::spawn(async move {
                let opts = LaunchOptions::new(&ws);
                let mut nets = Vec::new();
                for _ in 0..6 {
                    let (ev, _) = launch(&opts, &script).await;
                    assert_eq!(ev.exit_code, Some(0), "{ev:?}");
                    assert_contained(&ev, &ws);
                    nets.push(net_cookie(&ev.stdout.text));
                }
                nets
            })
        })
        .collect();
    let mut nets = Vec::new();
    for t in tasks {
        nets.extend(t.await.unwrap());
    }
    let prepared = custodian::__bench::prepared_launches() - before;
    all_distinct_from_the_hosts(&nets);
    assert!(prepared >= 3, "only {prepared} of 18 launches ran prepared");
    drop(keeper);
    assert_eq!(custodian::__bench::standalone_sandbox_init(), None);
}
