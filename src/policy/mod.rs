//! Policy for `process.run`: tool registry, exposure, match targets and
//! approval overrides (pure: no I/O, no clock).
//!
//! # Theory of operation
//!
//! Permission rules written over shell strings are bypassable (chaining, env
//! prefixes, wrappers), so custodian decides over exact, structured targets
//! and fails closed. A call flows through four small modules:
//!
//! - [`tool`] names tools. Built-ins (`process.run`, `bash`, …) and reserved
//!   prefixes (`process.`, `tool.`, …) cannot be claimed by a plugin: the
//!   [`Registry`] refuses such a manifest before the plugin's code is loaded,
//!   and [`Registry::route`] repeats the refusal at execution time.
//! - [`exposure`] decides whether a tool is offered at all. `process.run` is
//!   offered only in local state mode and only for the exact literal
//!   `process.run` in `tools.allow` (and in the active execution profile);
//!   no broad selector ever enables it.
//! - [`target`] turns a [`ProcessTarget`] (executable, argv, cwd, unresolved
//!   environment overlay) into a [`MatchTarget`]: a fixed-order, explicitly
//!   escaped JSON text that is injective over argv boundaries and overlay
//!   entries, bounded by [`MAX_TARGET_BYTES`] with a SHA-256 suffix when
//!   longer.
//! - [`decision`] combines routing, exposure, the target, the
//!   [`PolicyConfig`] rules, overrides ([`Pattern`]) and provenance into a
//!   [`Decision`]: a [`Verdict`], a [`Reason`] as data, and on
//!   `require_approval` the exact override that would approve this one
//!   invocation.
//!
//! [`config`] loads and validates the TOML file. Nothing here resolves a
//! secret: overlay values are literals or *references*, so neither a target
//! nor an audit record can hold a resolved secret.
//!
//! # Examples
//!
//! ```
//! use custodian::policy::{
//!     Context, PolicyConfig, ProcessTarget, Provenance, Query, Registry, StateMode, Verdict,
//!     decide,
//! };
//!
//! let config = PolicyConfig::from_toml_str(
//!     r#"
//!     version = 1
//!     [tools]
//!     allow = ["process.run"]
//!     [[policy.rules]]
//!     tool = "process.run"
//!     decision = "allow"
//!     "#,
//! )?;
//! let invocation = ProcessTarget {
//!     executable: "git".into(),
//!     argv: vec!["status".into()],
//!     ..ProcessTarget::default()
//! };
//! let request = Query {
//!     tool: "process.run",
//!     process: Some(&invocation),
//!     context: Context { provenance: Provenance::Untrusted, state_mode: StateMode::Local },
//!     approvals: &[],
//! };
//! let decision = decide(&Registry::new(), &config, &request);
//! // Untrusted provenance raises the broad allow for a shell-like tool.
//! assert_eq!(decision.verdict, Verdict::RequireApproval);
//! assert_eq!(
//!     decision.suggested_override.unwrap().as_str(),
//!     r#"{"executable":"git","argv":["status"],"cwd":".","env":{}}"#
//! );
//! # Ok::<(), custodian::policy::PolicyConfigError>(())
//! ```

pub mod config;
pub mod decision;
pub mod exposure;
pub mod hosts;
pub mod pattern;
pub mod target;
pub mod tool;

pub use config::{ConfigWarning, PolicyConfig, PolicyConfigError};
pub use decision::{
    AuditContext, Context, Decision, OverrideSource, Provenance, Query, Reason, Verdict, decide,
};
pub use exposure::{Hidden, StateMode};
pub use pattern::{Pattern, PatternError};
pub use target::{
    ConfineLevel, ConfineTarget, FsMode, MAX_TARGET_BYTES, MatchTarget, ProcessTarget,
    TargetEnvValue, TargetError,
};
pub use tool::{PROCESS_RUN, Registry, RouteError};

#[cfg(test)]
mod tests;
