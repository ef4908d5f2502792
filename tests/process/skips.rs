//! `skipped!` itself (`tests/support/skip.rs`): a test that cannot run
//! here passes with its reason printed, except where no skip is allowed
//! (`CUSTODIAN_TEST_NO_SKIP=1`, as `.ci/run` sets it), where it fails with
//! its reason. Shown on a body that always skips, run both ways.

use std::process::Command;

#[test]
fn a_skip_fails_the_test_only_where_no_skip_is_allowed() {
    let run = |strict: bool| {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "skips::a_test_that_skips",
            "--ignored",
            "--nocapture",
        ]);
        if strict {
            cmd.env("CUSTODIAN_TEST_NO_SKIP", "1");
        } else {
            cmd.env_remove("CUSTODIAN_TEST_NO_SKIP");
        }
        let out = cmd.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (passed, text) = run(false);
    assert!(passed, "{text}");
    assert!(text.contains("test result: ok. 1 passed"), "{text}");
    assert!(
        text.contains("skipped: planted: nothing is missing"),
        "{text}"
    );
    let (passed, text) = run(true);
    assert!(!passed, "a skip passed where none is allowed: {text}");
    assert!(
        text.contains("test result: FAILED. 0 passed; 1 failed"),
        "{text}"
    );
    assert!(
        text.contains(
            "skipped where no skip is allowed (CUSTODIAN_TEST_NO_SKIP=1): planted: nothing is missing"
        ),
        "{text}"
    );
}

#[test]
#[ignore = "a body: run by a_skip_fails_the_test_only_where_no_skip_is_allowed, both ways"]
fn a_test_that_skips() {
    skipped!("planted: nothing is missing");
}
