//! Fuzzes the TOML policy loader and the decision function behind it.
//!
//! Oracle: loading never panics; an error's message is bounded; a loaded
//! configuration decides a fixed set of calls without panicking, never
//! exposes `process.run` without the exact literal, and never suggests an
//! override unless it requires approval for a well-formed target.
#![no_main]

use custodian::policy::exposure::Selector;
use custodian::policy::{
    Context, PolicyConfig, ProcessTarget, Provenance, Query, Reason, Registry, StateMode, Verdict,
    decide,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let config = match PolicyConfig::from_toml_str(text) {
        Ok(c) => c,
        Err(e) => {
            assert!(e.to_string().len() <= 4096, "unbounded error message");
            return;
        }
    };
    let registry = Registry::new();
    let invocation = ProcessTarget {
        executable: "git".into(),
        argv: vec!["status".into(), "a b".into()],
        ..ProcessTarget::default()
    };
    let exact_allowed = config
        .tools
        .allow
        .iter()
        .any(Selector::is_exact_process_run);
    for tool in [
        "process.run",
        "bash",
        "tool.exec",
        "fs.read",
        "acme.tool",
        "process.x",
    ] {
        for provenance in [Provenance::Trusted, Provenance::Untrusted] {
            for state_mode in [StateMode::Local, StateMode::Shared] {
                let d = decide(
                    &registry,
                    &config,
                    &Query {
                        tool,
                        process: Some(&invocation),
                        context: Context {
                            provenance,
                            state_mode,
                        },
                        approvals: &[],
                    },
                );
                if tool == "process.run" && d.verdict != Verdict::Deny {
                    assert!(exact_allowed && state_mode == StateMode::Local);
                }
                if let Some(o) = &d.suggested_override {
                    assert_eq!(d.verdict, Verdict::RequireApproval);
                    assert!(o.is_exact() && o.matches(d.target.as_ref().unwrap()));
                }
                if matches!(d.reason, Reason::MalformedTarget { .. }) {
                    assert!(d.target.is_none());
                }
            }
        }
    }
});
