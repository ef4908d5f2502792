//! The Windows executable rules never panic and never accept a script.
#![no_main]

use custodian::process::invocation::check_windows_executable;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|exe: &str| {
    if check_windows_executable(exe).is_err() {
        return;
    }
    // Oracle, written independently of the checker: the final component,
    // after Windows strips trailing dots and spaces, has an extension that
    // is not a command script, and there is no stream suffix.
    let name = exe.rsplit(['/', '\\']).next().unwrap_or(exe);
    assert!(!name.is_empty());
    assert_eq!(name.trim_end_matches(['.', ' ']), name);
    let stripped = name.trim_end_matches(['.', ' ']);
    let ext = stripped.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    assert!(!ext.is_empty(), "accepted without an extension: {exe:?}");
    // Full Unicode upper-casing: no non-ASCII spelling folds onto a script.
    let upper = ext.to_uppercase();
    assert!(
        upper != "CMD" && upper != "BAT",
        "accepted a script: {exe:?}"
    );
    let drive = exe.as_bytes().get(1) == Some(&b':');
    assert!(
        !name.contains(':') || drive,
        "accepted a stream suffix: {exe:?}"
    );
});
