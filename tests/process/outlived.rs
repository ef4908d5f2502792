//! A member that outlives its `SIGKILL` for a while.
//!
//! A task frozen by the cgroup v1 freezer does not die of `SIGKILL` (nor of
//! `cgroup.kill`) until it is thawed: the signal stays pending. That is the
//! deterministic stand-in for what the kernel does to any task in
//! uninterruptible sleep (a hung NFS or FUSE request, a slow exit), and the
//! only way a test can hold a killed member alive at a chosen moment. The
//! freezer's hierarchy is independent of the cgroup v2 one custodian uses,
//! so a frozen member stays in the run's cgroup and process group.
//!
//! Needs root and a mounted v1 freezer (a hybrid host, as this one); skips
//! (with the reason) elsewhere.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use custodian::contain::Containment;
use custodian::process::evidence::{
    CgroupRemoval, ContainmentTier, DescendantVerdict, EscalationAction, ProcessStatus,
    VerdictReason,
};
use custodian::process::invocation::Tunables;
use custodian::process::{Invocation, launch};

use crate::common::*;

/// A v1 freezer cgroup of this test's own, removed (thawed first) on drop.
struct Freezer {
    dir: PathBuf,
}

impl Freezer {
    /// `None`, with the reason printed, where this host cannot have one.
    fn new(name: &str) -> Option<Self> {
        if !rustix::process::geteuid().is_root() {
            skipped!("the v1 freezer needs root");
            return None;
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        // `… - cgroup cgroup rw,freezer`: the mount point is the fifth field.
        let Some(mount) = mounts.lines().find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mut r = right.split_whitespace();
            let (fstype, _, options) = (r.next()?, r.next()?, r.next()?);
            let point = left.split_whitespace().nth(4)?;
            (fstype == "cgroup" && options.split(',').any(|o| o == "freezer"))
                .then(|| PathBuf::from(point))
        }) else {
            skipped!("no cgroup v1 freezer is mounted here");
            return None;
        };
        let dir = mount.join(format!("custodian-test-{}-{name}", std::process::id()));
        std::fs::create_dir(&dir).expect("a freezer cgroup of the test's own");
        Some(Self { dir })
    }

    fn procs(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    }

    fn set(&self, state: &str) {
        std::fs::write(self.dir.join("freezer.state"), state).unwrap();
    }

    /// Freezes the cgroup and waits until every task in it is frozen.
    fn freeze(&self) {
        self.set("FROZEN");
        let until = Instant::now() + Duration::from_secs(5);
        while std::fs::read_to_string(self.dir.join("freezer.state")).unwrap() != "FROZEN\n" {
            assert!(Instant::now() < until, "the freezer never froze");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The path the member writes its pid to, to join.
    fn procs_file(&self) -> String {
        self.dir.join("cgroup.procs").display().to_string()
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("freezer.state"), "THAWED");
        for _ in 0..500 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!("the freezer cgroup {} is left", self.dir.display());
    }
}

/// Waits for the one pid the member wrote into the freezer.
async fn member(f: &Freezer) -> u32 {
    assert!(
        eventually(|| !f.procs().is_empty()).await,
        "the member never joined the freezer"
    );
    let procs = f.procs();
    assert_eq!(procs.len(), 1, "{procs:?}");
    procs[0]
}

/// Whether `SIGKILL` is pending for `pid` (a frozen task keeps it pending).
fn kill_pending(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status.lines().any(|l| {
        (l.starts_with("SigPnd:") || l.starts_with("ShdPnd:"))
            && l.split_whitespace()
                .nth(1)
                .and_then(|m| u64::from_str_radix(m, 16).ok())
                .is_some_and(|m| m & (1 << (9 - 1)) != 0)
    })
}

/// A process the test started outside the run, killed when dropped.
struct Killed(rustix::process::Pid);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(self.0, rustix::process::Signal::KILL);
    }
}

/// Returns within a millisecond of the `KILL` becoming pending for `pid`
/// (polled off the runtime's thread, where the driver runs).
async fn kill_seen(pid: u32) {
    tokio::task::spawn_blocking(move || {
        let until = Instant::now() + Duration::from_secs(10);
        while !kill_pending(pid) {
            assert!(Instant::now() < until, "no KILL reached the member");
            std::thread::sleep(Duration::from_millis(1));
        }
    })
    .await
    .unwrap();
}

fn invocation(script: &str, timeout: Duration, grace: Duration) -> Invocation {
    Invocation::validate(
        spec("sh", &["-c", script])
            .with_timeout(timeout)
            .with_tunables(Tunables { grace, ..TUN }),
    )
    .unwrap()
}

/// The tiers a member frozen in its group reaches: the cgroup (where this
/// host has one) and the pinned group.
fn tiers() -> Vec<(Containment, ContainmentTier)> {
    let mut tiers = vec![(Containment::Group, ContainmentTier::PinnedProcessGroup)];
    match custodian::contain::process_cgroup() {
        Ok(cg) => {
            cg.remove().unwrap();
            tiers.push((Containment::Cgroup, ContainmentTier::Cgroup));
        }
        Err(e) => skipped!(
            "no writable cgroup v2 here ({}): the group tier only",
            e.code()
        ),
    }
    tiers
}

/// A member still dying when the grace ends is waited for, not given up
/// on: a `KILL` that comes while a probe of the group is running gives that
/// probe its whole window again, so a member that dies within it is seen
/// gone and the run is `terminated`. The member here is frozen when the
/// `KILL` comes and thawed 100 ms after it sees the signal pending: after
/// the end of the window the probe had before the `KILL`, within the new
/// one.
#[tokio::test]
async fn a_member_that_dies_just_after_its_kill_is_seen_gone_by_the_running_probe() {
    let _quiet = quiet_host();
    for (containment, tier) in tiers() {
        let Some(f) = Freezer::new("late") else {
            return;
        };
        // The member holds no pipe (the run would wait for it to close).
        // The root ignores the TERM (0.2 s in) and exits by itself 1 s in,
        // within the last half of the grace (1 s), so the probe its exit
        // starts (a 250 ms window, to 1.25 s) is running at the KILL
        // (1.2 s); the thaw comes at 1.3 s, before the new window's end
        // (1.45 s).
        let script = format!(
            "trap '' TERM; sh -c 'echo $$ > {} && exec sleep 30' >/dev/null 2>&1 & sleep 1",
            f.procs_file()
        );
        let inv = invocation(&script, Duration::from_millis(200), Duration::from_secs(1));
        let r = launch(inv, &opts().with_containment(containment)).unwrap();
        let pid = member(&f).await;
        f.freeze();
        kill_seen(pid).await;
        // Not a blocking sleep: the driver runs on this thread.
        tokio::time::sleep(Duration::from_millis(100)).await;
        f.set("THAWED");
        let ev = r.settled().await;
        assert_eq!(ev.status, ProcessStatus::TimedOut, "{}", ev.to_json());
        assert_eq!(ev.descendants.tier, tier, "{}", ev.to_json());
        let actions: Vec<_> = ev.escalation.iter().map(|s| s.action).collect();
        assert_eq!(
            actions,
            [EscalationAction::Term, EscalationAction::Kill],
            "{}",
            ev.to_json()
        );
        match containment {
            Containment::Cgroup => assert_eq!(
                ev.descendants.verdict,
                DescendantVerdict::Terminated,
                "{}",
                ev.to_json()
            ),
            // The pinned group never says `terminated`; confirmed empty it
            // says only that a member may have left the group.
            _ => assert_group_confirmed_empty(&ev),
        }
        assert!(!alive(pid), "the member lives on");
        assert_no_leftovers(r.pgid());
    }
}

/// A member that does not die of the `KILL` at all (until long after the
/// run settled) leaves the cgroup populated: the run is not `terminated`,
/// and nothing says the member *left* the cgroup, for it never did. The
/// cgroup is removed once the member is gone.
#[tokio::test]
async fn a_member_that_outlives_its_kill_is_reported_in_the_cgroup_not_as_having_left_it() {
    let _quiet = quiet_host();
    if !tiers().contains(&(Containment::Cgroup, ContainmentTier::Cgroup)) {
        return;
    }
    let Some(f) = Freezer::new("stuck") else {
        return;
    };
    let script = format!(
        "sh -c 'echo $$ > {} && exec sleep 30' & sleep 30",
        f.procs_file()
    );
    let inv = invocation(
        &script,
        Duration::from_millis(200),
        Duration::from_millis(200),
    );
    let r = launch(inv, &opts().with_containment(Containment::Cgroup)).unwrap();
    let pid = member(&f).await;
    f.freeze();
    // The run's cgroup, as the member's own v2 line names it.
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let rel = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    let dir = custodian::contain::Hierarchy::discover()
        .unwrap()
        .mount
        .join(rel.trim_start_matches('/'));
    assert!(dir.is_dir(), "{dir:?}");
    let ev = r.settled().await;
    let json = ev.to_json();
    assert!(
        kill_pending(pid),
        "the member was never sent a KILL: {json}"
    );
    assert!(alive(pid), "the member did not outlive its KILL: {json}");
    assert_eq!(ev.status, ProcessStatus::TimedOut, "{json}");
    assert_eq!(ev.descendants.tier, ContainmentTier::Cgroup, "{json}");
    assert_eq!(
        ev.descendants.verdict,
        DescendantVerdict::UnconfirmedOrEscaped,
        "{json}"
    );
    assert_eq!(
        ev.descendants.reasons,
        [VerdictReason::StdioHeldOpen, VerdictReason::GroupNotEmpty],
        "a member still in its cgroup is not one that left it: {json}"
    );
    assert_eq!(
        ev.descendants.cgroup_removal,
        Some(CgroupRemoval::LeftPopulated),
        "{json}"
    );
    assert!(dir.is_dir(), "the populated cgroup is gone: {json}");
    f.set("THAWED");
    assert!(
        eventually(|| !alive(pid)).await,
        "the thawed member lives on"
    );
    // Removed once empty, by the thread that retries it.
    assert!(eventually(|| !dir.exists()).await, "{dir:?} is left");
    assert_no_leftovers(r.pgid());
}

/// A holder of the run's stdout that writes `LATE` on `SIGUSR1` and, if
/// that write fails, `failed` to the file it was given; it forks nothing
/// (a fork would keep the group's scan from ever being stable).
const WRITER: &str = "
import os, signal, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
def late(*_):
    try:
        os.write(1, b'LATE\\n')
    except OSError:
        with open(sys.argv[2], 'w') as f:
            f.write('failed\\n')
signal.signal(signal.SIGUSR1, late)
with open(sys.argv[1] + '.tmp', 'w') as f:
    f.write(f'{os.getpid()}\\n')
os.rename(sys.argv[1] + '.tmp', sys.argv[1])
while True:
    signal.pause()
";

/// Output written after the run cut its streams is not captured: once the
/// machine closes a stream (here at the drain bound after the `KILL`, for a
/// pipe still held by a process outside the group), its reader is dropped
/// at once, not kept until the run settles. A member frozen through the
/// `KILL` keeps the group occupied, so the probe after the cut runs its
/// whole window (250 ms) before the run settles; the holder, a `setsid`
/// escapee the group's `KILL` does not reach, writes `LATE` 100 ms after
/// the cut, and its write fails for want of a reader.
#[tokio::test]
async fn output_written_after_the_streams_were_cut_is_not_captured() {
    let _quiet = quiet_host();
    let Some(f) = Freezer::new("cut") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (writer_file, late) = (dir.path().join("writer"), dir.path().join("late"));
    // The root (it ignores TERM) is killed 1.2 s in; the drain bound
    // (200 ms) after its exit cuts the pipe the writer holds.
    let script = format!(
        "trap '' TERM; \
         sh -c 'echo $$ > {procs} && exec sleep 30' >/dev/null 2>&1 & \
         setsid python3 -c \"$0\" {writer} {late} & \
         exec sleep 30",
        procs = f.procs_file(),
        writer = writer_file.display(),
        late = late.display(),
    );
    let inv = Invocation::validate(
        spec("sh", &["-c", &script, WRITER])
            .with_timeout(Duration::from_millis(200))
            .with_tunables(Tunables {
                grace: Duration::from_secs(1),
                // Not before the probe after the cut ends.
                hard_margin: Duration::from_secs(2),
                ..TUN
            }),
    )
    .unwrap();
    let r = launch(inv, &group_opts()).unwrap();
    let pid = member(&f).await;
    f.freeze();
    let writer = {
        assert!(
            eventually(|| std::fs::read_to_string(&writer_file).is_ok_and(|s| s.ends_with('\n')))
                .await
        );
        let pid: i32 = std::fs::read_to_string(&writer_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Outside the group: no KILL of the run reaches it, so the test
        // kills it, also when an assertion fails first.
        Killed(rustix::process::Pid::from_raw(pid).unwrap())
    };
    kill_seen(pid).await;
    // The cut comes 200 ms after the KILL, the settlement 250 ms later.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        r.try_settled().is_none(),
        "settled before the writer wrote: {}",
        r.try_settled().unwrap().to_json()
    );
    rustix::process::kill_process(writer.0, rustix::process::Signal::USR1).unwrap();
    let wrote = eventually(|| std::fs::read_to_string(&late).is_ok_and(|s| s == "failed\n")).await;
    let ev = r.settled().await;
    let json = ev.to_json();
    let writer_pid = writer.0.as_raw_nonzero().get().unsigned_abs();
    drop(writer);
    f.set("THAWED");
    assert!(wrote, "the writer's late write did not fail: {json}");
    assert!(!ev.stdout.text.contains("LATE"), "{json}");
    assert_eq!(
        ev.stdout.state,
        custodian::process::capture::StreamEnd::HeldOpen,
        "{json}"
    );
    assert!(eventually(|| !alive(pid) && !alive(writer_pid)).await);
    assert_no_leftovers(r.pgid());
}
