//! Invocation validation never panics, and what it accepts obeys the rules.
#![no_main]

use arbitrary::Arbitrary;
use custodian::process::invocation::{
    EnvValue, Invocation, InvocationSpec, OutputBudget, Platform, SecretRef, WorkspaceCwd,
};
use libfuzzer_sys::fuzz_target;
use std::time::Duration;

#[derive(Arbitrary, Debug)]
struct Input {
    executable: String,
    args: Vec<String>,
    cwd: Option<String>,
    env: Vec<(String, Option<String>, bool)>,
    timeout_ms: Option<u64>,
    stdout: usize,
    stderr: usize,
    windows: bool,
}

fuzz_target!(|input: Input| {
    let spec = InvocationSpec {
        executable: input.executable,
        args: input.args,
        cwd: input.cwd.clone(),
        env: input
            .env
            .into_iter()
            .map(|(k, v, secret)| {
                let v = v.unwrap_or_default();
                let v = if secret {
                    EnvValue::Secret(SecretRef::new(v))
                } else {
                    EnvValue::Literal(v)
                };
                (k, v)
            })
            .collect(),
        timeout: input.timeout_ms.map(Duration::from_millis),
        budget: OutputBudget {
            stdout: input.stdout,
            stderr: input.stderr,
        },
        ..InvocationSpec::default()
    };
    let platform = if input.windows {
        Platform::Windows
    } else {
        Platform::Posix
    };
    let Ok(inv) = Invocation::validate_for(spec, platform) else {
        return;
    };
    // Oracle: what was accepted obeys every rule.
    assert!(!inv.executable().is_empty() && !inv.executable().contains('\0'));
    assert!(inv.args().iter().all(|a| !a.contains('\0')));
    assert!(!inv.timeout().is_zero());
    if let Some(cwd) = inv.cwd() {
        let c = cwd.as_str();
        assert!(!c.starts_with('/') && !c.contains('\\') && !c.contains('\0'));
        assert!(c.split('/').all(|p| p != ".." && p != "."));
        // Normalization is idempotent.
        if !c.is_empty() {
            assert_eq!(WorkspaceCwd::new(c).unwrap().as_str(), c);
        }
    }
    for (k, v) in inv.env().iter() {
        assert!(!k.is_empty() && !k.contains('=') && !k.contains('\0'));
        if let EnvValue::Literal(v) = v {
            assert!(!v.contains('\0'));
        }
    }
    if platform == Platform::Windows {
        let lower = inv.executable().to_ascii_lowercase();
        assert!(!lower.ends_with(".cmd") && !lower.ends_with(".bat"));
    }
});
