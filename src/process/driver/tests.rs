//! What the driver keeps that no evidence shows: the registry of the roots
//! launched here ([`ROOTS`]), which keeps a subreaper scan from taking a
//! root for an adopted descendant.

use std::time::Duration;

#[path = "../../../tests/support/logs.rs"]
mod logs;

use super::ROOTS;
use crate::contain::{Containment, Unavailable};
use crate::process::containment::Selected;
use crate::process::env::ChildEnv;
use crate::process::evidence::{
    ContainmentTier, DescendantVerdict, EscalationAction, EscalationReason, SignalTarget,
    StepOutcome,
};
use crate::process::fault::FaultPoint;
use crate::process::{Evidence, Invocation, InvocationSpec, LaunchOptions, Running, launch};

fn sh(script: &str) -> Invocation {
    Invocation::validate(
        InvocationSpec::new("sh")
            .with_args(["-c", script])
            .with_timeout(Duration::from_secs(20)),
    )
    .unwrap()
}

fn registered(pid: u32) -> bool {
    ROOTS.scan(|roots| roots.contains(&pid))
}

async fn settled(r: &Running) -> std::sync::Arc<Evidence> {
    tokio::time::timeout(Duration::from_secs(20), r.settled())
        .await
        .expect("the run did not settle")
}

/// A root is registered while it runs and leaves the registry when it is
/// reaped, whichever way: the driver's settlement, or the guard's kill
/// after a panic right after the spawn; in the cgroup tier (`auto`, where
/// this host has one) and in the group tier. Neither takes another root
/// out: a root running meanwhile stays registered (a subreaper scan would
/// otherwise signal it and reap it as an adopted descendant).
#[tokio::test]
async fn a_root_leaves_the_registry_when_reaped_and_no_other_root_does() {
    let dir = tempfile::tempdir().unwrap();
    let auto = LaunchOptions::new(dir.path());
    let group = auto.clone().with_containment(Containment::Group);
    let keeper = launch(sh("sleep 30"), &group).unwrap();
    assert!(registered(keeper.pid()));
    for options in [&auto, &group] {
        let quick = launch(sh("exit 0"), options).unwrap();
        settled(&quick).await;
        assert!(!registered(quick.pid()), "a settled root is registered");
        assert!(registered(keeper.pid()), "a running root was unregistered");
        let faulty = launch(sh("sleep 30").with_fault(FaultPoint::AfterSpawn), options).unwrap();
        settled(&faulty).await;
        assert!(!registered(faulty.pid()), "a killed root is registered");
        assert!(registered(keeper.pid()), "a running root was unregistered");
    }
    keeper.cancel();
    settled(&keeper).await;
    assert!(!registered(keeper.pid()), "a cancelled root is registered");
}

/// Launches `sh` as `launch` does where this host has no cgroup: `auto`'s
/// fallback plan, which runs an unconfined launch in a pid namespace of its
/// own where user namespaces are allowed (the pid-namespace tier). `None`
/// (with the reason printed) where they are not.
fn launch_without_a_cgroup(invocation: Invocation, dir: &std::path::Path) -> Option<Running> {
    if let Err(e) = crate::process::spawn::isolation_supported() {
        skipped!("no pid namespace here ({e})");
        return None;
    }
    let options = LaunchOptions::new(dir);
    let env = ChildEnv::build(&options.baseline, invocation.env(), &*options.secrets).unwrap();
    let running = super::spawn(
        &tokio::runtime::Handle::current(),
        invocation,
        env,
        dir.to_path_buf(),
        "/bin/sh".into(),
        Selected::fallback(Containment::Auto, Unavailable::NoCgroup2),
        None,
        None,
        super::Stdin {
            read: None,
            session: None,
            terminal: None,
        },
    );
    Some(running.unwrap())
}

/// The (action, reason, target, outcome) of each step.
fn steps(
    ev: &Evidence,
) -> Vec<(
    EscalationAction,
    EscalationReason,
    Option<SignalTarget>,
    StepOutcome,
)> {
    ev.escalation
        .iter()
        .map(|s| (s.action, s.reason, s.target, s.outcome))
        .collect()
}

/// The run's one escalation step: a `KILL` for the internal error, aimed
/// at `target`, delivered.
fn assert_one_internal_kill(ev: &Evidence, target: SignalTarget) {
    assert_eq!(
        steps(ev),
        [(
            EscalationAction::Kill,
            EscalationReason::InternalError,
            Some(target),
            StepOutcome::Delivered
        )],
        "{ev:?}"
    );
}

/// The pid-namespace tier: a run whose member ignores `TERM` is killed
/// with its namespace at the grace's end (one `KILL` to the init,
/// delivered) and said `terminated`; a panic right after the spawn kills
/// the namespace the same way (the guard's step, for the internal error),
/// and the root leaves the registry.
#[tokio::test]
async fn the_pid_namespace_tier_kills_its_namespace_at_the_grace_and_after_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let stubborn = Invocation::validate(
        InvocationSpec::new("sh")
            .with_args(["-c", "trap '' TERM; echo up; sleep 30 & wait"])
            .with_timeout(Duration::from_millis(500))
            .with_tunables(crate::process::invocation::Tunables {
                grace: Duration::from_millis(300),
                drain: Duration::from_millis(200),
                hard_margin: Duration::from_millis(300),
            }),
    )
    .unwrap();
    let Some(r) = launch_without_a_cgroup(stubborn, dir.path()) else {
        return;
    };
    let ev = settled(&r).await;
    assert_eq!(ev.descendants.tier, ContainmentTier::PidNamespace, "{ev:?}");
    assert_eq!(
        ev.descendants.verdict,
        DescendantVerdict::Terminated,
        "{ev:?}"
    );
    assert_eq!(ev.stdout.text, "up\n", "{ev:?}");
    let kills: Vec<_> = steps(&ev)
        .into_iter()
        .filter(|s| s.0 == EscalationAction::Kill)
        .collect();
    assert_eq!(
        kills,
        [(
            EscalationAction::Kill,
            EscalationReason::GraceExpired,
            Some(SignalTarget::PidNamespace),
            StepOutcome::Delivered
        )],
        "{ev:?}"
    );
    assert!(!registered(r.pid()));

    let faulty = sh("sleep 30").with_fault(FaultPoint::AfterSpawn);
    let r = launch_without_a_cgroup(faulty, dir.path()).unwrap();
    let ev = settled(&r).await;
    // The minimal evidence of a launch that failed after its spawn names
    // the tier the run had, as a settled run's does.
    assert_eq!(ev.descendants.tier, ContainmentTier::PidNamespace, "{ev:?}");
    assert_one_internal_kill(&ev, SignalTarget::PidNamespace);
    assert!(!registered(r.pid()));
}

/// A panic in the driver while the init runs, in the pid-namespace tier:
/// the driver's `KILL` for the internal error goes to the init (the whole
/// namespace dies with it), delivered, and the root leaves the registry.
#[tokio::test]
async fn a_panic_in_the_driver_kills_the_pid_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let faulty = sh("echo x; sleep 30 & wait").with_fault(FaultPoint::Capture);
    let Some(r) = launch_without_a_cgroup(faulty, dir.path()) else {
        return;
    };
    let ev = settled(&r).await;
    assert_eq!(
        ev.status,
        crate::process::evidence::ProcessStatus::InternalError,
        "{ev:?}"
    );
    assert_eq!(ev.descendants.tier, ContainmentTier::PidNamespace, "{ev:?}");
    assert_one_internal_kill(&ev, SignalTarget::PidNamespace);
    assert!(!registered(r.pid()));
}

/// The pid-namespace tier reports the program's own end, which its init
/// recorded (the init itself exits with the program's code and cannot die
/// of the program's signal): an exit code, or the signal that killed it.
#[tokio::test]
async fn the_pid_namespace_tier_reports_the_programs_code_or_signal() {
    let dir = tempfile::tempdir().unwrap();
    let Some(r) = launch_without_a_cgroup(sh("exit 3"), dir.path()) else {
        return;
    };
    let ev = settled(&r).await;
    assert_eq!(ev.descendants.tier, ContainmentTier::PidNamespace, "{ev:?}");
    assert_eq!((ev.exit_code, ev.signal), (Some(3), None), "{ev:?}");
    let r = launch_without_a_cgroup(sh("kill -TERM $$; sleep 30"), dir.path()).unwrap();
    let ev = settled(&r).await;
    assert_eq!((ev.exit_code, ev.signal), (None, Some(15)), "{ev:?}");
    assert!(ev.escalation.is_empty(), "{ev:?}");
}

/// A kernel that refuses `clone3` once the cgroup tier was chosen (a
/// seccomp filter installed after the probes, answering `ENOSYS` as a
/// container runtime's does): the plan's cgroup was made and the spawn
/// into it fails. The launch must never run a confined program unconfined,
/// and falls back only under `auto`: a confined `auto` launch is refused
/// (`no_cgroup_tier`), an explicit `cgroup` one is
/// `containment_unavailable` (`clone3_unsupported`), an unconfined `auto`
/// one runs in the group tier and says why; the plan's cgroup is removed
/// each time. The body runs in a process of its own: a filter cannot be
/// taken off.
#[test]
fn a_refused_spawn_into_the_cgroup_never_runs_a_confined_program_and_falls_back_only_under_auto() {
    match crate::contain::process_cgroup() {
        Ok(cg) => cg.remove().expect("an unused cgroup is removable"),
        Err(e) => {
            skipped!("no writable cgroup v2 here ({})", e.code());
            return;
        }
    }
    if let Err(e) = crate::process::spawn::isolation_supported() {
        skipped!("no isolation here ({e})");
        return;
    }
    if crate::confine::landlock_abi() == 0 {
        skipped!("the kernel has no Landlock");
        return;
    }
    let body = "process::driver::tests::a_refused_spawn_into_the_cgroup_never_runs_a_confined_program_and_falls_back_only_under_auto_inner";
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            body,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("test result: ok. 1 passed"),
        "the body did not run: {text}"
    );
}

#[tokio::test]
#[ignore = "a body: run by a_refused_spawn_into_the_cgroup_never_runs_a_confined_program_and_falls_back_only_under_auto in a process of its own, under a seccomp filter"]
async fn a_refused_spawn_into_the_cgroup_never_runs_a_confined_program_and_falls_back_only_under_auto_inner()
 {
    use crate::confine::{ConfineError, Confinement};
    use crate::process::{ProcessError, run};
    let h = crate::contain::Hierarchy::discover().expect("cgroup v2 mounted");
    let scratch = tempfile::tempdir().unwrap();
    let marker = scratch.path().join("ran");
    let touch = |confinement: Confinement| {
        let script = format!("touch '{}'", marker.display());
        Invocation::validate(
            InvocationSpec::new("sh")
                .with_args(["-c", &script])
                .with_timeout(Duration::from_secs(10))
                .with_confinement(confinement),
        )
        .expect("valid invocation")
    };
    let auto = LaunchOptions::new(scratch.path());
    let explicit = auto.clone().with_containment(Containment::Cgroup);
    // The probes run once per process: before the filter, the cgroup
    // tier's spawn and isolation are found to work here. No isolated
    // launch ran yet, so no thread carries a filter of its own.
    assert!(crate::process::spawn::supported(), "clone3 into a cgroup");
    crate::process::spawn::isolation_supported().expect("isolation");
    let _ = crate::confine::landlock_abi();

    // From here `clone3` answers `ENOSYS`, in every thread (and the ones
    // started later inherit it).
    let filter = seccompiler::SeccompFilter::new(
        [(libc::SYS_clone3, vec![])].into_iter().collect(),
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(libc::ENOSYS as u32),
        seccompiler::TargetArch::x86_64,
    )
    .unwrap();
    let program: seccompiler::BpfProgram = filter.try_into().unwrap();
    seccompiler::apply_filter_all_threads(&program).unwrap();

    // This process's base cgroups: none is left after a refusal.
    let base = format!("custodian-{}", std::process::id());
    let leftovers = || -> Vec<std::path::PathBuf> {
        let mut found = Vec::new();
        let mut dirs = vec![(h.mount.clone(), 0)];
        while let Some((dir, depth)) = dirs.pop() {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    if e.file_name().to_str() == Some(base.as_str()) {
                        found.push(e.path());
                    }
                    if depth < 3 {
                        dirs.push((e.path(), depth + 1));
                    }
                }
            }
        }
        found
    };

    // Confined under `auto`: refused, never run unconfined in a group.
    let err = run(touch(Confinement::workspace_write()), &auto)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProcessError::Confinement(ConfineError::SpawnerUnavailable {
                reason: "no_cgroup_tier"
            })
        ),
        "{err:?}"
    );
    assert!(!marker.exists(), "the confined program ran");
    assert_eq!(leftovers(), Vec::<std::path::PathBuf>::new());

    // An explicit cgroup tier: a typed error, no fallback.
    let err = run(touch(Confinement::none()), &explicit)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProcessError::ContainmentUnavailable {
                requested: Containment::Cgroup,
                reason: Unavailable::Clone3Unsupported,
            }
        ),
        "{err:?}"
    );
    assert!(!marker.exists(), "the program ran");
    assert_eq!(leftovers(), Vec::<std::path::PathBuf>::new());

    // Unconfined under `auto`: the group tier, and the evidence says why.
    let ev = run(touch(Confinement::none()), &auto).await.unwrap();
    assert!(marker.exists(), "auto did not run the program");
    assert_eq!(
        ev.descendants.tier,
        ContainmentTier::PinnedProcessGroup,
        "{ev:?}"
    );
    assert_eq!(ev.descendants.requested_containment, Containment::Auto);
    assert_eq!(
        ev.descendants.fallback_reason,
        Some(Unavailable::Clone3Unsupported),
        "{ev:?}"
    );
    assert_eq!(ev.descendants.cgroup_removal, None, "{ev:?}");
    assert_eq!(leftovers(), Vec::<std::path::PathBuf>::new());
}

/// The reactor refusing the root's pidfd (as it can for want of memory or
/// of epoll watches; injected, [`FaultPoint::RegisterPidfd`]) after the
/// root started in the cgroup tier: the launch is a spawn error, and the
/// root is killed with its cgroup, reaped (no zombie is left) and taken
/// out of the registry, while a root running meanwhile stays in it.
#[tokio::test]
async fn a_root_whose_pidfd_the_reactor_refuses_is_killed_reaped_and_unregistered() {
    match crate::contain::process_cgroup() {
        Ok(cg) => cg.remove().expect("an unused cgroup is removable"),
        Err(e) => {
            skipped!("no writable cgroup v2 here ({})", e.code());
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let auto = LaunchOptions::new(dir.path());
    let group = auto.clone().with_containment(Containment::Group);
    let keeper = launch(sh("sleep 30"), &group).unwrap();
    // A program of its own name, to look for its process afterwards.
    let program = dir.path().join("refused-root");
    std::fs::copy("/bin/sleep", &program).unwrap();
    let refused = Invocation::validate(
        InvocationSpec::new(program.to_str().unwrap())
            .with_args(["30"])
            .with_timeout(Duration::from_secs(20)),
    )
    .unwrap()
    .with_fault(FaultPoint::RegisterPidfd);
    let err = launch(refused, &auto).unwrap_err();
    assert!(
        matches!(&err, crate::process::ProcessError::Spawn { source, .. } if source.raw_os_error() == Some(libc::ENOMEM)),
        "{err:?}"
    );
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter_map(|e| {
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            (comm.trim() == "refused-root")
                .then(|| std::fs::read_to_string(e.path().join("stat")).unwrap_or_default())
        })
        .collect();
    assert_eq!(
        left,
        Vec::<String>::new(),
        "the refused root is left (alive or a zombie)"
    );
    assert!(registered(keeper.pid()), "a running root was unregistered");
    keeper.cancel();
    settled(&keeper).await;
}

/// A `cancel_within` shorter than the invocation's grace narrows the probe
/// of an occupied group to half of it, as a grace given at the launch
/// does. The root exits at once and leaves a member that ignores `TERM`
/// (its output elsewhere, so that the streams close with the root):
/// the first probe has half the invocation's grace (a window of 250 ms, a
/// few dozen rescans). `cancel_within(40 ms)` comes during it; once it
/// answers, the `TERM` goes out and the next probe gives up after 20 ms:
/// at most five rescans (after 1, 3, 7, 15 and 25 ms), where a window
/// outliving the `KILL` 40 ms after the `TERM` keeps rescanning until the
/// member is gone. In the group tier, whose probe rescans on a timer; a
/// late timer only makes fewer rescans.
#[tokio::test]
async fn a_cancel_within_narrows_the_probe_to_half_its_grace() {
    // The driver's debug lines (the test runtime is single-threaded, so
    // the driver task logs through this thread's subscriber).
    let logs = logs::Captured::default();
    let _guard = logs.install(tracing::Level::DEBUG);
    let dir = tempfile::tempdir().unwrap();
    let group = LaunchOptions::new(dir.path()).with_containment(Containment::Group);
    let r = launch(
        sh("sh -c 'trap \"\" TERM; sleep 5' >/dev/null 2>&1 & exit 0"),
        &group,
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    r.cancel_within(Duration::from_millis(40));
    let ev = settled(&r).await;
    let steps: Vec<_> = ev.escalation.iter().map(|s| s.action).collect();
    assert_eq!(
        steps,
        [EscalationAction::Term, EscalationAction::Kill],
        "{ev:?}"
    );
    let log = logs.text();
    let rescans = logs::rescans(&log);
    assert!(rescans.len() >= 2, "the probes after the cancel: {log}");
    assert!(
        rescans[1..].iter().all(|&n| n <= 5),
        "a probe after the cancel outlived half its grace: {rescans:?}"
    );
}
