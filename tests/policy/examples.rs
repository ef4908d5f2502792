//! The example policy files under `docs/examples/` load and mean what their
//! comments say.

use custodian::policy::{
    Context, PolicyConfig, ProcessTarget, Provenance, Query, Registry, StateMode, Verdict, decide,
};

fn load(name: &str) -> PolicyConfig {
    let path = format!("{}/docs/examples/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    PolicyConfig::from_toml_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn verdict(c: &PolicyConfig, provenance: Provenance, exe: &str, argv: &[&str]) -> Verdict {
    let p = ProcessTarget {
        executable: exe.into(),
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        ..ProcessTarget::default()
    };
    decide(
        &Registry::new(),
        c,
        &Query {
            tool: "process.run",
            process: Some(&p),
            context: Context {
                provenance,
                state_mode: StateMode::Local,
            },
            approvals: &[],
        },
    )
    .verdict
}

#[test]
fn every_example_loads() {
    let dir = format!("{}/docs/examples", env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            PolicyConfig::from_toml_str(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            n += 1;
        }
    }
    assert!(n >= 2, "expected example policies in {dir}");
}

#[test]
fn strict_example_behaves_as_documented() {
    let c = load("policy-strict.toml");
    assert_eq!(
        verdict(&c, Provenance::Trusted, "git", &["status"]),
        Verdict::Allow
    );
    assert_eq!(
        verdict(&c, Provenance::Untrusted, "git", &["status"]),
        Verdict::Allow
    );
    assert_eq!(
        verdict(&c, Provenance::Trusted, "git", &["push"]),
        Verdict::Deny
    );
    assert_eq!(
        verdict(&c, Provenance::Trusted, "cargo", &["test"]),
        Verdict::Allow
    );
    assert_eq!(
        verdict(&c, Provenance::Untrusted, "cargo", &["test"]),
        Verdict::RequireApproval
    );
    assert_eq!(
        verdict(&c, Provenance::Trusted, "rm", &["-rf", "x"]),
        Verdict::RequireApproval
    );
}

#[test]
fn disabled_example_never_exposes_process_run() {
    let c = load("policy-process-run-disabled.toml");
    assert_eq!(verdict(&c, Provenance::Trusted, "true", &[]), Verdict::Deny);
}
