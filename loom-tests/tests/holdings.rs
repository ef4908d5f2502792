//! loom: a workspace's open of a request racing a cleanup of the same id
//! that holds nothing for it yet, on the real `Holdings`.

#[cfg(not(custodian_loom))]
#[test]
#[ignore = "loom tests need RUSTFLAGS=\"--cfg custodian_loom\" (run by .ci/run's loom stage)"]
fn the_loom_models_need_cfg_custodian_loom() {}

#[cfg(custodian_loom)]
mod loom_models {
    use custodian::sync::Holdings;
    use custodian_loom_tests::runtime::{Verdict, open_races_cleanup_of_unknown};

    #[test]
    fn an_open_racing_a_cleanup_of_an_unknown_id_is_refused_or_cleaned() {
        open_races_cleanup_of_unknown::<Holdings<u8, (), Verdict>>(
            "holdings, open vs cleanup of an unknown id",
            3,
            1,
        );
    }

    #[test]
    fn an_open_after_an_evicted_result_is_held_never_orphaned() {
        open_races_cleanup_of_unknown::<Holdings<u8, (), Verdict>>(
            "holdings, open vs cleanup of an unknown id, nothing cached",
            3,
            0,
        );
    }
}
