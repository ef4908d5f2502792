//! Fuzzes the tool-input validation of `custodian mcp`: whatever JSON a
//! client sends, `process_run` and `spill_read` return (never panic); an
//! accepted `process_run` names only known fields and a relative,
//! non-escaping cwd and runs argv exactly as given; an error is short and
//! never quotes an environment value.
#![no_main]

use std::time::Duration;

use custodian::mcp::input::{self, MAX_SPILL_READ, RunDefaults};
use serde_json::Value;

const KNOWN: [&str; 5] = ["executable", "argv", "cwd", "env", "timeout_ms"];

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let args = v.as_object();
    let defaults = RunDefaults {
        timeout: Duration::from_secs(30),
        capture: 4096,
        confinement: custodian::confine::Confinement::default(),
    };
    match input::process_run(args, &defaults) {
        Ok(ok) => {
            let m = args.expect("accepted without arguments");
            assert!(m.keys().all(|k| KNOWN.contains(&k.as_str())));
            let inv = &ok.invocation;
            assert_eq!(Some(inv.executable()), m["executable"].as_str());
            let argv: Vec<&str> = m
                .get("argv")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            assert_eq!(inv.args(), &argv[..]);
            if let Some(cwd) = inv.cwd() {
                assert!(!cwd.as_str().starts_with('/'));
                assert!(!cwd.as_str().split('/').any(|c| c == ".."));
            }
        }
        Err(e) => {
            let text = e.to_string();
            assert!(text.len() < 512, "{text}");
            // A value could spell the error's own words ("environment");
            // one with a character no message template uses cannot. An
            // unknown field's error echoes that (top-level) field's name.
            let telling = |s: &str| {
                s.len() >= 4 && s.chars().any(|c| "#%~^|@!$&".contains(c) || !c.is_ascii())
            };
            let env = args.and_then(|m| m.get("env")).and_then(Value::as_object);
            if !matches!(e, input::InputError::UnknownField { .. }) {
                for (k, v) in env.into_iter().flat_map(|e| e.iter()) {
                    assert!(
                        !telling(k) || !text.contains(k.as_str()),
                        "an env key in {text}"
                    );
                    if let Some(s) = v.as_str().filter(|s| telling(s)) {
                        assert!(!text.contains(s), "an env value in {text}");
                    }
                }
            }
        }
    }
    if let Ok(r) = input::spill_read(args) {
        assert!((1..=MAX_SPILL_READ).contains(&r.length));
    }
});
