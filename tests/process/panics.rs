//! Panics after the spawn never leak a process: with a fault injected at
//! each point through the hidden seam, the group is killed, the root
//! reaped, and exactly one evidence (status `internal_error`) reaches every
//! waiter.

use std::time::Duration;

use custodian::process::evidence::{DescendantVerdict, EscalationReason, ProcessStatus};
use custodian::process::fault::FaultPoint;
use custodian::process::{Invocation, launch};

use crate::common::*;

fn faulty(script: &str, at: FaultPoint) -> Invocation {
    sh(script, Duration::from_secs(20)).with_fault(at)
}

/// Runs `script` with a fault at `at`; returns the evidence and the pid the
/// script printed first (a group member it started), if any.
async fn run_faulty(script: &str, at: FaultPoint) -> (custodian::process::Running, u32) {
    let r = tokio::time::timeout(Duration::from_secs(10), async {
        launch(faulty(script, at), &opts()).unwrap()
    })
    .await
    .unwrap();
    (r.clone(), r.pid())
}

async fn settled_in_time(
    r: &custodian::process::Running,
) -> std::sync::Arc<custodian::process::Evidence> {
    tokio::time::timeout(Duration::from_secs(10), r.settled())
        .await
        .expect("a waiter hung after a panic")
}

fn assert_internal_error(ev: &custodian::process::Evidence, killed: bool) {
    assert_eq!(ev.status, ProcessStatus::InternalError, "{ev:?}");
    assert_ne!(
        ev.descendants.verdict,
        DescendantVerdict::Terminated,
        "{ev:?}"
    );
    if killed {
        assert!(
            ev.escalation
                .iter()
                .any(|s| s.reason == EscalationReason::InternalError),
            "{ev:?}"
        );
    }
    // Still one valid JSON object.
    let v: serde_json::Value = serde_json::from_str(&ev.to_json()).unwrap();
    assert_eq!(v["status"], "internal_error");
}

/// Right after the spawn, before a driver exists: the guard that owns the
/// child kills the group (the member too) and reaps the root.
#[tokio::test]
async fn a_panic_right_after_the_spawn() {
    let (r, root) = run_faulty("sleep 30 & wait", FaultPoint::AfterSpawn).await;
    let ev = settled_in_time(&r).await;
    assert_internal_error(&ev, true);
    let other = settled_in_time(&r).await;
    assert!(std::sync::Arc::ptr_eq(&ev, &other), "one evidence");
    assert!(eventually(|| members(root).is_empty()).await);
    assert_no_leftovers(root);
}

/// Right after the spawn, in the cgroup tier (where this host has one) and
/// in the group tier (not yet pinned: the driver pins it): the evidence
/// names the tier, and the guard's one step is a `KILL` for the internal
/// error, aimed at the cgroup or at the process group, and delivered (the
/// root and its member are alive then).
#[tokio::test]
async fn a_panic_right_after_the_spawn_kills_the_cgroup_or_the_group() {
    use custodian::process::evidence::{ContainmentTier, SignalTarget};
    let tiers = group_and_cgroup_tiers(
        (
            group_opts(),
            ContainmentTier::ProcessGroup,
            SignalTarget::ProcessGroup,
        ),
        (opts(), ContainmentTier::Cgroup, SignalTarget::Cgroup),
    );
    for (opts, tier, target) in tiers {
        let r = launch(faulty("sleep 30 & wait", FaultPoint::AfterSpawn), &opts).unwrap();
        let root = r.pid();
        let ev = settled_in_time(&r).await;
        assert_internal_error(&ev, true);
        assert_eq!(ev.descendants.tier, tier, "{ev:?}");
        assert_one_internal_kill(&ev, target);
        assert!(eventually(|| members(root).is_empty()).await);
        assert_no_leftovers(root);
    }
}

/// Right after the spawn of an isolated (confined) launch in the cgroup
/// tier: its pid namespace lives in the run's cgroup, so the tier is the
/// cgroup's (not the pid namespace's, which is the tier of an isolated
/// launch without a cgroup) and the guard's `KILL` goes to the cgroup.
#[tokio::test]
async fn a_panic_right_after_an_isolated_spawn_in_a_cgroup_names_the_cgroup_tier() {
    use custodian::confine::Confinement;
    use custodian::process::evidence::{ContainmentTier, SignalTarget};
    if !custodian::contain::process_cgroup().is_ok_and(|cg| cg.remove().is_ok()) {
        skipped!("no writable cgroup v2 here");
        return;
    }
    if custodian::confine::landlock_abi() == 0 {
        skipped!("the kernel has no Landlock");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let invocation = Invocation::validate(
        custodian::process::InvocationSpec::new("sh")
            .with_args(["-c", "sleep 30 & wait"])
            .with_timeout(Duration::from_secs(20))
            .with_confinement(Confinement::workspace_write()),
    )
    .unwrap()
    .with_fault(FaultPoint::AfterSpawn);
    let options = custodian::process::LaunchOptions::new(dir.path());
    let r = match launch(invocation, &options) {
        Ok(r) => r,
        Err(e) => {
            skipped!("no isolated launch here ({e})");
            return;
        }
    };
    let ev = settled_in_time(&r).await;
    assert_internal_error(&ev, true);
    assert_eq!(ev.descendants.tier, ContainmentTier::Cgroup, "{ev:?}");
    assert_one_internal_kill(&ev, SignalTarget::Cgroup);
}

/// In the driver, at the first event: the root already exited and left a
/// silent member; the member is killed.
#[tokio::test]
async fn a_panic_while_stepping_the_machine() {
    let script = "sleep 30 >/dev/null 2>&1 & echo $!";
    let (r, root) = run_faulty(script, FaultPoint::Step).await;
    let ev = settled_in_time(&r).await;
    assert_internal_error(&ev, true);
    assert!(eventually(|| members(root).is_empty()).await);
    assert_no_leftovers(root);
}

/// While storing captured output: the root is alive and is killed with
/// its group.
#[tokio::test]
async fn a_panic_while_capturing() {
    let (r, root) = run_faulty("echo x; sleep 30", FaultPoint::Capture).await;
    let ev = settled_in_time(&r).await;
    assert_internal_error(&ev, true);
    assert!(eventually(|| members(root).is_empty()).await);
    assert_no_leftovers(root);
}

/// In the driver, after the root exited (its member writes only once the
/// root is a zombie), in the group tier (pinned by the unreaped root) and
/// in the cgroup tier (where this host has one): the driver's `KILL` for
/// the internal error is aimed at the pinned group, or at the cgroup
/// through `cgroup.kill`, and delivered; the root is reaped and its member
/// killed.
#[tokio::test]
async fn a_panic_in_the_driver_kills_the_pinned_group_or_the_cgroup() {
    use custodian::process::evidence::{ContainmentTier, SignalTarget};
    let tiers = group_and_cgroup_tiers(
        (
            group_opts(),
            ContainmentTier::PinnedProcessGroup,
            SignalTarget::PinnedProcessGroup,
        ),
        (opts(), ContainmentTier::Cgroup, SignalTarget::Cgroup),
    );
    for (opts, tier, target) in tiers {
        let script = "sh -c 'while [ \"$(cut -d\" \" -f3 /proc/$1/stat)\" != Z ]; \
                      do sleep 0.01; done; echo x; sleep 30' member $$ & exit 0";
        let r = launch(faulty(script, FaultPoint::Capture), &opts).unwrap();
        let root = r.pid();
        let ev = settled_in_time(&r).await;
        assert_internal_error(&ev, true);
        assert_eq!(ev.descendants.tier, tier, "{ev:?}");
        assert_one_internal_kill(&ev, target);
        assert!(eventually(|| members(root).is_empty()).await);
        assert_no_leftovers(root);
    }
}

/// While building the evidence: a minimal evidence is published instead.
#[tokio::test]
async fn a_panic_while_building_the_evidence() {
    let (r, root) = run_faulty("echo hi", FaultPoint::Evidence).await;
    let ev = settled_in_time(&r).await;
    assert_internal_error(&ev, false);
    assert_eq!(ev.stdout.text, "", "the minimal evidence claims nothing");
    assert_no_leftovers(root);
}

/// At settlement, before the evidence is published (the cgroup's check
/// and removal, the effects' end): the machine has settled, so the driver
/// publishes the minimal evidence once, naming the run's tier, and still
/// removes the cgroup. Both tiers where this host has a cgroup.
#[tokio::test]
async fn a_panic_while_settling_publishes_the_minimal_evidence_once_and_removes_the_cgroup() {
    use custodian::process::evidence::{CgroupRemoval, ContainmentTier};
    let tiers = group_and_cgroup_tiers(
        (group_opts(), ContainmentTier::PinnedProcessGroup, None),
        (
            opts(),
            ContainmentTier::Cgroup,
            Some(CgroupRemoval::Removed),
        ),
    );
    for (opts, tier, removal) in tiers {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cg");
        let script = format!(
            "sed -n 's/^0:://p' /proc/self/cgroup > '{}'; echo hi",
            file.display()
        );
        let r = launch(faulty(&script, FaultPoint::Settle), &opts).unwrap();
        let root = r.pid();
        let ev = settled_in_time(&r).await;
        assert_internal_error(&ev, false);
        assert_eq!(ev.descendants.tier, tier, "{ev:?}");
        assert_eq!(ev.descendants.cgroup_removal, removal, "{ev:?}");
        assert_eq!(ev.stdout.text, "", "the minimal evidence claims nothing");
        let other = settled_in_time(&r).await;
        assert!(std::sync::Arc::ptr_eq(&ev, &other), "one evidence");
        assert_no_leftovers(root);
        if removal.is_some() {
            let rel = std::fs::read_to_string(&file).unwrap();
            let h = custodian::contain::Hierarchy::discover().expect("cgroup v2 mounted");
            let cg = h.mount.join(rel.trim().trim_start_matches('/'));
            assert!(rel.trim().len() > 1, "the run's cgroup: {rel:?}");
            assert!(!cg.exists(), "the run's cgroup {} is left", cg.display());
        }
    }
}

/// `group`, and `cgroup` too where this host lets us create a cgroup (the
/// group tier only, with a note, elsewhere).
fn group_and_cgroup_tiers<T>(group: T, cgroup: T) -> Vec<T> {
    if custodian::contain::process_cgroup().is_ok_and(|cg| cg.remove().is_ok()) {
        vec![group, cgroup]
    } else {
        eprintln!("note: no writable cgroup v2 here; the group tier only");
        vec![group]
    }
}

/// The run's one escalation step: a `KILL` for the internal error, aimed
/// at `target`, delivered.
fn assert_one_internal_kill(
    ev: &custodian::process::Evidence,
    target: custodian::process::evidence::SignalTarget,
) {
    use custodian::process::evidence::{EscalationAction, StepOutcome};
    let steps: Vec<_> = ev
        .escalation
        .iter()
        .map(|s| (s.action, s.reason, s.target, s.outcome))
        .collect();
    assert_eq!(
        steps,
        [(
            EscalationAction::Kill,
            EscalationReason::InternalError,
            Some(target),
            StepOutcome::Delivered
        )],
        "{ev:?}"
    );
}

/// The live members of group `pgid`.
fn members(pgid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| matches!(stat(p), Some((s, pg)) if pg == pgid && s != 'Z' && s != 'X'))
        .collect()
}
