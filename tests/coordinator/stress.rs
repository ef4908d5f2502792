//! 10,000 requests on the multi-threaded runtime with seeded random racing
//! candidates. Set `CUSTODIAN_STRESS_SEED` to replay a failing seed; every
//! assertion message carries the seed.

use crate::scenarios::{run, seed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_racing_requests_clean_up_exactly_once() {
    let seed = seed();
    eprintln!("stress seed: {seed} (replay with CUSTODIAN_STRESS_SEED={seed})");
    let (t, _) = run(10_000, seed).await;
    eprintln!("stress totals: {t:?}");
    assert_eq!(t.requests, 10_000, "seed={seed}");
    assert_eq!(
        t.cleanups, t.opened,
        "seed={seed}: one cleanup per opened workspace"
    );
    assert_eq!(t.double_cleanups, 0, "seed={seed}");
    assert_eq!(t.early_completions, 0, "seed={seed}");
    assert_eq!(t.completions, 10_000, "seed={seed}");
    assert_eq!(t.publications, 10_000, "seed={seed}");
}
