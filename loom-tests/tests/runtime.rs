//! loom: the runtime's races on the primitives it is built from — the
//! coordinator's `CommitLog` and the node's `Slots`.

#[cfg(not(custodian_loom))]
#[test]
#[ignore = "loom tests need RUSTFLAGS=\"--cfg custodian_loom\" (run by .ci/run's loom stage)"]
fn the_loom_models_need_cfg_custodian_loom() {}

#[cfg(custodian_loom)]
mod loom_models {
    use custodian::sync::{CommitLog, RootRegistry, Slots};
    use custodian_loom_tests::runtime::{
        Rec, Report, Slot, cancel_races_open, cleanup_races_eviction,
        direct_commit_races_the_actor, node_cancel_and_cleanup_race_open,
        node_cleanup_races_eviction, node_transient_cleanup_is_run_again, scan_races_spawn,
    };

    #[test]
    fn direct_commit_never_overtakes_the_handles_candidate() {
        direct_commit_races_the_actor::<CommitLog<u32, Rec>>(
            "commit log, direct commit vs actor",
            3,
        );
    }

    #[test]
    fn cancel_racing_open_is_fenced() {
        cancel_races_open::<Slots<u8, Slot, Report>>("slots, cancel vs open", 3);
    }

    #[test]
    fn cleanup_racing_eviction_removes_once() {
        cleanup_races_eviction::<Slots<u8, Slot, Report>>("slots, cleanup vs eviction", 3);
    }

    #[test]
    fn node_decisions_cancel_and_cleanup_racing_open_leave_nothing() {
        node_cancel_and_cleanup_race_open("node (real decisions), cancel + cleanup vs open", 3);
    }

    #[test]
    fn node_decisions_cleanup_racing_eviction_removes_once() {
        node_cleanup_races_eviction("node (real decisions), cleanup vs eviction", 3, false);
    }

    #[test]
    fn node_decisions_cleanup_racing_eviction_after_restart_removes_once() {
        node_cleanup_races_eviction(
            "node (real decisions), cancel after restart, cleanup vs eviction",
            3,
            true,
        );
    }

    #[test]
    fn node_decisions_a_cleanup_that_could_not_run_is_run_again_once() {
        node_transient_cleanup_is_run_again("node (real decisions), no_space then retry", 3);
    }

    #[test]
    fn a_scan_never_sees_a_fresh_root_unregistered() {
        scan_races_spawn::<RootRegistry>("root registry, scan vs spawn", 3);
    }
}
