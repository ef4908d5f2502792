//! Saying that a test (or a part of one) cannot run here.
//!
//! `skipped!("reason {x}")` prints `skipped: reason …` and the caller then
//! returns (or leaves that part out). Rust's test harness cannot mark a
//! test ignored once it runs, so such a test would count as passed; a run
//! that must not count anything it did not run as passed sets
//! `CUSTODIAN_TEST_NO_SKIP=1` (`.ci/run` does, on the machine it set up
//! with everything the tests need), and there a skip fails the test
//! instead, with its reason.
//!
//! Declared first, with `#[macro_use]`, in each test binary (and, under
//! `cfg(test)`, in the library) so that every module after it sees it.

#![allow(unused_macros)]

/// See the [module](self).
macro_rules! skipped {
    ($($arg:tt)*) => {{
        let reason = format!($($arg)*);
        if std::env::var_os("CUSTODIAN_TEST_NO_SKIP").is_some_and(|v| v == "1") {
            panic!("skipped where no skip is allowed (CUSTODIAN_TEST_NO_SKIP=1): {reason}");
        }
        eprintln!("skipped: {reason}");
    }};
}
