//! What the driver keeps that no evidence shows: the registry of the roots
//! launched here ([`ROOTS`]), which keeps a subreaper scan from taking a
//! root for an adopted descendant.

use std::time::Duration;

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
        eprintln!("skipped: no pid namespace here ({e})");
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
    assert_eq!(
        steps(&ev),
        [(
            EscalationAction::Kill,
            EscalationReason::InternalError,
            Some(SignalTarget::PidNamespace),
            StepOutcome::Delivered
        )],
        "{ev:?}"
    );
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
    assert_eq!(
        steps(&ev),
        [(
            EscalationAction::Kill,
            EscalationReason::InternalError,
            Some(SignalTarget::PidNamespace),
            StepOutcome::Delivered
        )],
        "{ev:?}"
    );
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
