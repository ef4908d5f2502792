//! Match targets: the exact, structured identity of one `process.run`
//! invocation, serialized so that policy rules and approval overrides compare
//! whole process identities rather than shell strings.
//!
//! A target is the JSON object
//!
//! ```text
//! {"executable":E,"argv":[A0,A1,...],"cwd":C,"env":{K0:V0,K1:V1,...}}
//! ```
//!
//! followed, for a confined run only, by
//! `,"confine":{"fs":F,"network":N,"scoped":B,"allow_read":[...],"allow_write":[...],"deny_read":[...],"enforcement":E}`
//! (paths sorted, and `,"min_abi":N` when one is required; for network
//! `allow`, `"network":"allow","allow_hosts":[...]` with the patterns
//! canonical and sorted, so an approval for one allow-list never approves
//! another) before the closing
//! brace: an approval of a confined run therefore never matches the same
//! command run unconfined (or confined differently), and the targets of
//! unconfined runs are what they always were.
//!
//! with the keys in exactly that order, the overlay keys sorted by Unicode
//! code point, a literal overlay value written as a JSON string and a secret
//! reference written as `{"secret_ref":NAME}` (never its resolved value).
//! Every string is escaped by [`escape_into`]: besides `"` and `\`, the
//! wildcard `*` and every character a person cannot see or tell apart
//! (controls, format and tag characters, non-ASCII spaces, separators,
//! fillers; see [`needs_unicode_escape`]) are written as `\uXXXX`, and so
//! is `'`. Because the result is valid JSON that decodes back to the
//! canonical input, two different invocations can never share a target, and
//! a generated target never contains a raw `*`, so an exact override can never
//! be mistaken for a wildcard pattern.
//!
//! A serialization longer than [`MAX_TARGET_BYTES`] is *displayed* as a
//! readable prefix ending in [`TRUNCATION_MARKER`] followed by the lowercase
//! hex SHA-256 of the *full* serialization. The display form is for people
//! and for exact approvals (the hash binds the whole invocation); rules and
//! wildcard overrides are always matched against the full serialization
//! ([`MatchTarget::full_text`]), so no part of an invocation can hide from a
//! rule by being pushed past the readable prefix.

use std::fmt::{self, Write as _};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The longest match target, in bytes, including the hash suffix of an
/// oversized one.
pub const MAX_TARGET_BYTES: usize = 4096;

/// Separates the readable prefix of an oversized target from the hex SHA-256
/// of its full serialization.
pub const TRUNCATION_MARKER: &str = "...sha256:";

/// Bytes taken by the suffix of an oversized target: the marker and 64 hex
/// digits.
const SUFFIX_BYTES: usize = TRUNCATION_MARKER.len() + 64;

/// The largest readable prefix an oversized target keeps, in bytes; a prefix
/// is cut back to a character boundary, so it may be up to three bytes
/// shorter.
pub const MAX_PREFIX_BYTES: usize = MAX_TARGET_BYTES - SUFFIX_BYTES;

/// The largest total size of the executable plus all arguments: 1 MiB.
///
/// It bounds the invocation identity (Linux's own `ARG_MAX` is usually
/// 2 MiB including the environment).
pub const MAX_ARGV_BYTES: usize = 1024 * 1024;
/// The largest number of arguments accepted.
pub const MAX_ARGS: usize = 32 * 1024;
/// The largest number of environment overlay entries accepted.
pub const MAX_ENV_ENTRIES: usize = 4096;
/// The longest working directory accepted, in bytes (Linux's `PATH_MAX`).
pub const MAX_CWD_BYTES: usize = 4096;

/// Why a working directory is refused by [`canonical_cwd`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CwdError {
    /// The working directory is empty (omit it to mean the root).
    #[error("the working directory is empty (omit it to use the workspace root)")]
    Empty,
    /// It contains a NUL byte.
    #[error("the working directory contains a NUL byte")]
    Nul,
    /// It is longer than [`MAX_CWD_BYTES`].
    #[error("the working directory is longer than {MAX_CWD_BYTES} bytes")]
    TooLong,
    /// It is absolute, or has a Windows root or drive prefix.
    #[error("the working directory must be relative to the workspace")]
    Absolute,
    /// A `..` climbs above the workspace root.
    #[error("the working directory escapes the workspace")]
    Escapes,
}

/// The one canonical form of a workspace-relative working directory, used by
/// policy targets, `custodian policy explain`, `custodian run`, the library's
/// launcher ([`WorkspaceCwd`](crate::process::invocation::WorkspaceCwd)) and
/// the wire: `/` and `\` both separate components, empty and `.` components
/// are dropped, `a/..` folds lexically, and the result joins the components
/// with `/` (`""` is the root itself).
///
/// Folding `..` is sound because the folded path is the one the launcher
/// uses: `a/../b` runs in `<root>/b`, never through `a`.
///
/// # Errors
///
/// [`CwdError`]: empty, NUL, longer than [`MAX_CWD_BYTES`], absolute (`/x`,
/// `\x`, `C:x`, or a drive prefix on any component, `a/C:x`), or climbing
/// above the root.
pub fn canonical_cwd(cwd: &str) -> Result<String, CwdError> {
    if cwd.is_empty() {
        return Err(CwdError::Empty);
    }
    if cwd.contains('\0') {
        return Err(CwdError::Nul);
    }
    if cwd.len() > MAX_CWD_BYTES {
        return Err(CwdError::TooLong);
    }
    if cwd.starts_with(['/', '\\']) {
        return Err(CwdError::Absolute);
    }
    // A drive prefix (`C:`) counts as absolute in *any* component, not only
    // the first: `./c:` folds to `c:`, and the canonical form must be a fixed
    // point (canonicalizing it again gives it back).
    let drive = |p: &str| {
        let b = p.as_bytes();
        b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':'
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in cwd.split(['/', '\\']) {
        if drive(part) {
            return Err(CwdError::Absolute);
        }
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(CwdError::Escapes);
                }
            }
            other => parts.push(other),
        }
    }
    Ok(parts.join("/"))
}

/// Why an executable is refused by [`check_executable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ExecutableError {
    /// It is empty.
    #[error("the executable is empty")]
    Empty,
    /// It contains a NUL byte.
    #[error("the executable contains a NUL byte")]
    Nul,
    /// It is `.` or `..` or ends in a path separator.
    #[error("the executable does not name a file")]
    NotAFile,
}

/// The executable rules shared by policy and the launcher: non-empty, no
/// NUL, and its last `/`- or `\`-separated component names a file.
///
/// # Errors
///
/// [`ExecutableError`].
pub fn check_executable(exe: &str) -> Result<(), ExecutableError> {
    if exe.is_empty() {
        return Err(ExecutableError::Empty);
    }
    if exe.contains('\0') {
        return Err(ExecutableError::Nul);
    }
    let last = exe.rsplit(['/', '\\']).next().unwrap_or(exe);
    if last.is_empty() || last == "." || last == ".." {
        return Err(ExecutableError::NotAFile);
    }
    Ok(())
}

/// Why an argument list is refused by [`check_argv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ArgvError {
    /// An argument contains a NUL byte.
    #[error("argument {index} contains a NUL byte")]
    Nul {
        /// Position in argv (0 is the first argument after the executable).
        index: usize,
    },
    /// More than [`MAX_ARGS`] arguments, or more than [`MAX_ARGV_BYTES`] in
    /// the executable plus arguments.
    #[error("the argument list is too large (limit {MAX_ARGS} arguments, {MAX_ARGV_BYTES} bytes)")]
    TooLarge,
}

/// The argument rules shared by policy and the launcher.
///
/// # Errors
///
/// [`ArgvError`].
pub fn check_argv(exe: &str, args: &[String]) -> Result<(), ArgvError> {
    if args.len() > MAX_ARGS {
        return Err(ArgvError::TooLarge);
    }
    let mut total = exe.len();
    for (index, arg) in args.iter().enumerate() {
        if arg.contains('\0') {
            return Err(ArgvError::Nul { index });
        }
        total = total.saturating_add(arg.len());
    }
    if total > MAX_ARGV_BYTES {
        return Err(ArgvError::TooLarge);
    }
    Ok(())
}

/// One value of the explicit environment overlay, as policy sees it: before
/// any secret is resolved.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TargetEnvValue {
    /// A literal value, part of the target as written.
    Literal(String),
    /// A reference to a secret that the launcher resolves at spawn time. Only
    /// the reference is ever part of a target or an audit record.
    SecretRef(String),
}

/// The invocation of `process.run` that a target is built from.
///
/// This is policy's own input type, independent of the launcher: the
/// executable as written (not resolved against `PATH`), the arguments after
/// it, the workspace-relative working directory, and the explicit overlay
/// with unresolved values, in the caller's order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessTarget {
    /// The executable as the caller wrote it (a bare name or a path).
    pub executable: String,
    /// The arguments after the executable; boundaries are significant.
    pub argv: Vec<String>,
    /// The working directory relative to the workspace root, in any form
    /// [`canonical_cwd`] accepts; `None` and `"."` mean the root, `""` is
    /// refused (as the launcher refuses it).
    pub cwd: Option<String>,
    /// The explicit environment overlay, unresolved, in any order.
    pub env_overlay: Vec<(String, TargetEnvValue)>,
    /// The confinement the process runs under; `None` (or an unconfined
    /// [`ConfineTarget`]) for none.
    pub confine: Option<ConfineTarget>,
}

/// What the filesystem part of a confinement allows, weakest first (the
/// order [`ConfineTarget::satisfies`] compares by).
///
/// One concept for the launcher, the policy, the CLI, the wire and the
/// evidence: [`crate::confine::FsMode`] is this type.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum FsMode {
    /// No filesystem confinement: the process may do whatever its user may.
    #[default]
    None,
    /// As `read-only`, and also write beneath the workspace root.
    WorkspaceWrite,
    /// Read (and execute) anything readable; write nowhere but a private
    /// temporary directory (its `TMPDIR`) and `/dev/null`.
    ReadOnly,
}

impl FsMode {
    /// The name used on the command line, the wire, in targets and in
    /// evidence.
    pub fn as_str(self) -> &'static str {
        match self {
            FsMode::None => "none",
            FsMode::WorkspaceWrite => "workspace-write",
            FsMode::ReadOnly => "read-only",
        }
    }
}

/// A confinement a policy can require: the process runs confined at least
/// this much (see [`ConfineTarget::satisfies`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ConfineLevel {
    /// `workspace-write` or stronger.
    WorkspaceWrite,
    /// `read-only`.
    ReadOnly,
}

impl ConfineLevel {
    /// The name used in the policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfineLevel::WorkspaceWrite => "workspace-write",
            ConfineLevel::ReadOnly => "read-only",
        }
    }

    fn fs(self) -> FsMode {
        match self {
            ConfineLevel::WorkspaceWrite => FsMode::WorkspaceWrite,
            ConfineLevel::ReadOnly => FsMode::ReadOnly,
        }
    }
}

impl fmt::Display for ConfineLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Policy's view of a confinement (the launcher's is
/// `crate::confine::Confinement`; `process::governed` maps one onto the
/// other).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct ConfineTarget {
    /// The filesystem mode.
    pub fs: FsMode,
    /// The host's network is out of reach: `off`, or `allow` (then
    /// [`ConfineTarget::allow_hosts`] lists what the proxy lets through).
    pub network_off: bool,
    /// Network `allow`: the allow-list's patterns, canonical (see
    /// [`super::hosts`]); empty for every other network mode.
    pub allow_hosts: Vec<String>,
    /// Signals and abstract unix sockets are scoped to the sandbox.
    pub scoped: bool,
    /// Extra readable hierarchies (absolute paths).
    pub allow_read: Vec<String>,
    /// Extra writable hierarchies (absolute paths).
    pub allow_write: Vec<String>,
    /// Hierarchies that may not be read.
    pub deny_read: Vec<String>,
    /// Paths kept read-only inside a writable tree (beyond the defaults).
    pub protect: Vec<String>,
    /// Paths masked in the view (beyond the defaults).
    pub hide: Vec<String>,
    /// The kernel may enforce less than asked (the evidence says what).
    pub best_effort: bool,
    /// The least Landlock ABI the launch requires.
    pub min_abi: Option<u32>,
}

impl ConfineTarget {
    /// Whether this is no confinement at all (it then adds nothing to the
    /// target).
    pub fn is_unconfined(&self) -> bool {
        self.fs == FsMode::None
            && !self.network_off
            && !self.scoped
            && self.allow_read.is_empty()
            && self.allow_write.is_empty()
            && self.deny_read.is_empty()
            && self.protect.is_empty()
            && self.hide.is_empty()
            && self.min_abi.is_none()
    }

    /// Whether a process run under this confinement is confined at least
    /// as much as `level` asks: the filesystem mode is `level` or stronger,
    /// the network is off, the enforcement is strict (a kernel that cannot
    /// enforce it refuses the launch), and no extra writable hierarchy was
    /// granted. Extra readable hierarchies and read denies do not weaken
    /// it: the confined modes already read anything readable.
    ///
    /// A network `allow` run satisfies it only when `grant` covers its
    /// allow-list ([`super::hosts::AllowList::covered_by`]): a policy that
    /// grants no host accepts no allow-list.
    pub fn satisfies(&self, level: ConfineLevel, grant: &super::hosts::AllowList) -> bool {
        let hosts_granted = self.allow_hosts.is_empty()
            || super::hosts::AllowList::parse(&self.allow_hosts)
                .is_ok_and(|list| list.covered_by(grant));
        self.fs >= level.fs()
            && self.network_off
            && hosts_granted
            && !self.best_effort
            && self.allow_write.is_empty()
    }

    fn canonical(&self) -> ConfineTarget {
        let sorted = |v: &[String]| {
            let mut v = v.to_vec();
            v.sort();
            v.dedup();
            v
        };
        ConfineTarget {
            allow_read: sorted(&self.allow_read),
            allow_write: sorted(&self.allow_write),
            deny_read: sorted(&self.deny_read),
            protect: sorted(&self.protect),
            hide: sorted(&self.hide),
            allow_hosts: sorted(&self.allow_hosts),
            ..self.clone()
        }
    }

    fn serialize_into(&self, out: &mut String) {
        let list = |out: &mut String, key: &str, v: &[String]| {
            out.push_str(key);
            for (i, p) in v.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                escape_into(out, p);
            }
            out.push(']');
        };
        out.push_str("{\"fs\":\"");
        out.push_str(self.fs.as_str());
        if !self.allow_hosts.is_empty() {
            // Only for `allow`: the targets of `on` and `off` runs are
            // what they were before it existed.
            out.push_str("\",\"network\":\"allow\"");
            list(out, ",\"allow_hosts\":[", &self.allow_hosts);
        } else if self.network_off {
            out.push_str("\",\"network\":\"off\"");
        } else {
            out.push_str("\",\"network\":\"on\"");
        }
        out.push_str(if self.scoped {
            ",\"scoped\":true"
        } else {
            ",\"scoped\":false"
        });
        list(out, ",\"allow_read\":[", &self.allow_read);
        list(out, ",\"allow_write\":[", &self.allow_write);
        list(out, ",\"deny_read\":[", &self.deny_read);
        out.push_str(if self.best_effort {
            ",\"enforcement\":\"best-effort\""
        } else {
            ",\"enforcement\":\"strict\""
        });
        if let Some(abi) = self.min_abi {
            let _ = write!(out, ",\"min_abi\":{abi}");
        }
        // Only when given: a target without them is what it was before
        // they existed.
        if !self.protect.is_empty() {
            list(out, ",\"protect\":[", &self.protect);
        }
        if !self.hide.is_empty() {
            list(out, ",\"hide\":[", &self.hide);
        }
        out.push('}');
    }
}

/// Why an invocation has no match target.
///
/// Indices point into the caller's argv or overlay; environment keys and
/// values are never part of the reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
#[non_exhaustive]
pub enum TargetError {
    /// `process.run` was asked for without an invocation.
    #[error("process.run needs an invocation (executable and argv)")]
    MissingInvocation,
    /// The executable is empty.
    #[error("the executable is empty")]
    EmptyExecutable,
    /// The executable contains a NUL byte.
    #[error("the executable contains a NUL byte")]
    NulInExecutable,
    /// The executable is `.` or `..` or ends in a path separator.
    #[error("the executable does not name a file")]
    ExecutableNotAFile,
    /// An argument contains a NUL byte.
    #[error("argument {index} contains a NUL byte")]
    NulInArgument {
        /// Position in argv (0 is the first argument after the executable).
        index: usize,
    },
    /// Too many arguments or argument bytes (see [`MAX_ARGS`],
    /// [`MAX_ARGV_BYTES`]).
    #[error("the argument list is too large (limit {MAX_ARGS} arguments, {MAX_ARGV_BYTES} bytes)")]
    ArgvTooLarge,
    /// The working directory is empty.
    #[error("the working directory is empty (omit it to use the workspace root)")]
    EmptyCwd,
    /// The working directory is absolute (or has a Windows root or drive
    /// prefix).
    #[error("the working directory must be relative to the workspace")]
    AbsoluteCwd,
    /// The working directory climbs above the workspace root with `..`.
    #[error("the working directory escapes the workspace")]
    ParentInCwd,
    /// The working directory contains a NUL byte.
    #[error("the working directory contains a NUL byte")]
    NulInCwd,
    /// The working directory is longer than [`MAX_CWD_BYTES`].
    #[error("the working directory is longer than {MAX_CWD_BYTES} bytes")]
    CwdTooLong,
    /// More than [`MAX_ENV_ENTRIES`] overlay entries.
    #[error("the environment overlay has too many entries (limit {MAX_ENV_ENTRIES})")]
    EnvTooLarge,
    /// An overlay key is empty or contains `=` or a NUL byte.
    #[error("environment overlay entry {index} has an invalid key")]
    InvalidEnvKey {
        /// Position in the overlay.
        index: usize,
    },
    /// An overlay value contains a NUL byte.
    #[error("environment overlay entry {index} has a value with a NUL byte")]
    NulInEnvValue {
        /// Position in the overlay.
        index: usize,
    },
    /// An overlay secret reference is empty or contains a NUL byte.
    #[error("environment overlay entry {index} has an invalid secret reference")]
    InvalidSecretRef {
        /// Position in the overlay.
        index: usize,
    },
    /// An overlay key repeats an earlier one.
    #[error("environment overlay entry {index} repeats an earlier key")]
    DuplicateEnvKey {
        /// Position of the repetition in the overlay.
        index: usize,
    },
}

/// A validated invocation in canonical form: normalized cwd, overlay sorted by
/// key code point. It is what a target serializes and what an approval audit
/// records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CanonicalProcess {
    /// The executable as written.
    pub executable: String,
    /// The arguments, boundaries intact.
    pub argv: Vec<String>,
    /// The normalized workspace-relative cwd (`.` for the root).
    pub cwd: String,
    /// The unresolved overlay, sorted by key code point.
    pub env_overlay: Vec<(String, TargetEnvValue)>,
    /// The confinement, paths sorted; `None` when unconfined.
    pub confine: Option<ConfineTarget>,
}

/// The serialized identity of one invocation; see the [module docs](self).
///
/// It holds both forms: the bounded display text ([`MatchTarget::as_str`])
/// and the full serialization ([`MatchTarget::full_text`]) that rules match.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct MatchTarget {
    text: String,
    truncated: bool,
    #[serde(skip)]
    full: Arc<str>,
}

impl MatchTarget {
    /// The display text, at most [`MAX_TARGET_BYTES`] long: the full
    /// serialization, or its readable prefix plus the SHA-256 of the whole.
    /// An exact override equal to it binds the full invocation.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The full, unbounded serialization: what rules and wildcard overrides
    /// are matched against.
    pub fn full_text(&self) -> &str {
        &self.full
    }

    /// Whether the full serialization exceeded [`MAX_TARGET_BYTES`] and this
    /// target is a readable prefix plus a SHA-256 suffix.
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }
}

impl fmt::Display for MatchTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl ProcessTarget {
    /// Validates the invocation and puts it in canonical form.
    ///
    /// # Errors
    ///
    /// A [`TargetError`] naming the first malformed part; nothing is
    /// repaired.
    pub fn canonicalize(&self) -> Result<CanonicalProcess, TargetError> {
        check_executable(&self.executable).map_err(|e| match e {
            ExecutableError::Empty => TargetError::EmptyExecutable,
            ExecutableError::Nul => TargetError::NulInExecutable,
            ExecutableError::NotAFile => TargetError::ExecutableNotAFile,
        })?;
        check_argv(&self.executable, &self.argv).map_err(|e| match e {
            ArgvError::Nul { index } => TargetError::NulInArgument { index },
            ArgvError::TooLarge => TargetError::ArgvTooLarge,
        })?;
        let cwd = match self.cwd.as_deref() {
            None => ".".to_owned(),
            Some(c) => match canonical_cwd(c) {
                Ok(c) if c.is_empty() => ".".to_owned(),
                Ok(c) => c,
                Err(e) => {
                    return Err(match e {
                        CwdError::Empty => TargetError::EmptyCwd,
                        CwdError::Nul => TargetError::NulInCwd,
                        CwdError::TooLong => TargetError::CwdTooLong,
                        CwdError::Absolute => TargetError::AbsoluteCwd,
                        CwdError::Escapes => TargetError::ParentInCwd,
                    });
                }
            },
        };
        if self.env_overlay.len() > MAX_ENV_ENTRIES {
            return Err(TargetError::EnvTooLarge);
        }
        let mut env_overlay: Vec<(usize, &String, &TargetEnvValue)> = Vec::new();
        for (index, (key, value)) in self.env_overlay.iter().enumerate() {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                return Err(TargetError::InvalidEnvKey { index });
            }
            match value {
                TargetEnvValue::Literal(v) if v.contains('\0') => {
                    return Err(TargetError::NulInEnvValue { index });
                }
                TargetEnvValue::SecretRef(r) if r.is_empty() || r.contains('\0') => {
                    return Err(TargetError::InvalidSecretRef { index });
                }
                _ => {}
            }
            env_overlay.push((index, key, value));
        }
        // Stable sort: among equal keys the later entry follows, so it is the
        // one reported as the repetition.
        env_overlay.sort_by(|a, b| a.1.cmp(b.1));
        if let Some(pair) = env_overlay.windows(2).find(|w| w[0].1 == w[1].1) {
            return Err(TargetError::DuplicateEnvKey { index: pair[1].0 });
        }
        Ok(CanonicalProcess {
            executable: self.executable.clone(),
            argv: self.argv.clone(),
            cwd,
            env_overlay: env_overlay
                .into_iter()
                .map(|(_, k, v)| (k.clone(), v.clone()))
                .collect(),
            confine: self
                .confine
                .as_ref()
                .filter(|c| !c.is_unconfined())
                .map(ConfineTarget::canonical),
        })
    }

    /// Builds the match target of this invocation.
    ///
    /// # Errors
    ///
    /// A [`TargetError`] when the invocation is malformed; there is then no
    /// target and therefore no override to suggest.
    pub fn match_target(&self) -> Result<MatchTarget, TargetError> {
        Ok(self.canonicalize()?.match_target())
    }
}

impl CanonicalProcess {
    /// The full serialization, before any length bound.
    pub fn serialize_full(&self) -> String {
        let mut out = String::with_capacity(64);
        out.push_str("{\"executable\":");
        escape_into(&mut out, &self.executable);
        out.push_str(",\"argv\":[");
        for (i, arg) in self.argv.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            escape_into(&mut out, arg);
        }
        out.push_str("],\"cwd\":");
        escape_into(&mut out, &self.cwd);
        out.push_str(",\"env\":{");
        for (i, (key, value)) in self.env_overlay.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            escape_into(&mut out, key);
            out.push(':');
            match value {
                TargetEnvValue::Literal(v) => escape_into(&mut out, v),
                TargetEnvValue::SecretRef(r) => {
                    out.push_str("{\"secret_ref\":");
                    escape_into(&mut out, r);
                    out.push('}');
                }
            }
        }
        out.push('}');
        if let Some(c) = &self.confine {
            out.push_str(",\"confine\":");
            c.serialize_into(&mut out);
        }
        out.push('}');
        out
    }

    /// The bounded match target.
    pub fn match_target(&self) -> MatchTarget {
        bound(self.serialize_full())
    }
}

/// Applies [`MAX_TARGET_BYTES`] to a full serialization.
fn bound(full: String) -> MatchTarget {
    if full.len() <= MAX_TARGET_BYTES {
        return MatchTarget {
            full: Arc::from(full.as_str()),
            text: full,
            truncated: false,
        };
    }
    let mut cut = MAX_PREFIX_BYTES;
    while !full.is_char_boundary(cut) {
        cut -= 1;
    }
    let digest = Sha256::digest(full.as_bytes());
    let mut text = String::with_capacity(MAX_TARGET_BYTES);
    text.push_str(&full[..cut]);
    text.push_str(TRUNCATION_MARKER);
    text.push_str(&hex::encode(digest));
    MatchTarget {
        text,
        truncated: true,
        full: Arc::from(full),
    }
}

/// Writes `s` as a JSON string literal with explicit escaping.
///
/// `"` and `\` get their two-character escapes; every character for which
/// [`needs_unicode_escape`] holds is written as `\uXXXX` (surrogate pairs
/// above the BMP); everything else is copied. The output is valid JSON and
/// decodes back to `s`, so the mapping is injective.
pub fn escape_into(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if needs_unicode_escape(c) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Characters written as `\uXXXX` in a target: the wildcard `*` (so a
/// generated target never contains a raw wildcard) and every character a
/// person cannot see or tell apart from another:
///
/// - control characters (Unicode `Cc`: C0, DEL, C1);
/// - format characters (`Cf`: soft hyphen, Arabic and Syriac marks,
///   zero-width characters, bidirectional controls, invisible operators,
///   the byte-order mark, interlinear annotation, Egyptian and shorthand
///   format controls, musical formatting, and the tag characters
///   `U+E0000..U+E0FFF`);
/// - line and paragraph separators (`Zl`, `Zp`) and every space separator
///   (`Zs`) except the ASCII space;
/// - the remaining default-ignorable code points (combining grapheme joiner,
///   Hangul fillers, Khmer inherent vowels, Mongolian and other variation
///   selectors, `U+FFF0..U+FFF8`) and the braille blank, which renders as a
///   space.
pub fn needs_unicode_escape(c: char) -> bool {
    matches!(
        c,
        '\u{0}'..='\u{1f}'
            | '*'
            | '\''
            | '\u{7f}'..='\u{a0}'
            | '\u{ad}'
            | '\u{34f}'
            | '\u{600}'..='\u{605}'
            | '\u{61c}'
            | '\u{6dd}'
            | '\u{70f}'
            | '\u{890}'..='\u{891}'
            | '\u{8e2}'
            | '\u{115f}'..='\u{1160}'
            | '\u{1680}'
            | '\u{17b4}'..='\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{2000}'..='\u{200f}'
            | '\u{2028}'..='\u{202f}'
            | '\u{205f}'..='\u{206f}'
            | '\u{2800}'
            | '\u{3000}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff0}'..='\u{fffb}'
            | '\u{110bd}'
            | '\u{110cd}'
            | '\u{13430}'..='\u{1343f}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0000}'..='\u{e0fff}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(exe: &str, argv: &[&str]) -> ProcessTarget {
        ProcessTarget {
            executable: exe.to_owned(),
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            cwd: None,
            env_overlay: Vec::new(),
            confine: None,
        }
    }

    fn lit(k: &str, v: &str) -> (String, TargetEnvValue) {
        (k.to_owned(), TargetEnvValue::Literal(v.to_owned()))
    }

    #[test]
    fn target_has_fixed_field_order() {
        let mut t = target("git", &["status", "-s"]);
        t.cwd = Some("sub".into());
        t.env_overlay = vec![lit("PATH", "/usr/bin")];
        assert_eq!(
            t.match_target().unwrap().as_str(),
            r#"{"executable":"git","argv":["status","-s"],"cwd":"sub","env":{"PATH":"/usr/bin"}}"#
        );
    }

    #[test]
    fn argv_boundaries_survive_serialization() {
        let joined = target("echo", &["a b"]).match_target().unwrap();
        let split = target("echo", &["a", "b"]).match_target().unwrap();
        assert_ne!(joined, split);
        // Quote and comma inside one argument must not forge a boundary.
        let forged = target("echo", &["a\",\"b"]).match_target().unwrap();
        assert_ne!(forged, split);
        assert_eq!(
            forged.as_str(),
            r#"{"executable":"echo","argv":["a\",\"b"],"cwd":".","env":{}}"#
        );
    }

    #[test]
    fn overlay_keys_are_sorted_by_code_point() {
        let mut a = target("x", &[]);
        a.env_overlay = vec![
            lit("b", "1"),
            lit("B", "2"),
            lit("\u{e9}", "3"),
            lit("a", "4"),
        ];
        let mut b = a.clone();
        b.env_overlay.reverse();
        let ta = a.match_target().unwrap();
        assert_eq!(ta, b.match_target().unwrap());
        assert!(
            ta.as_str()
                .ends_with(r#""env":{"B":"2","a":"4","b":"1","é":"3"}}"#)
        );
    }

    #[test]
    fn secret_references_differ_from_equal_literals() {
        let mut a = target("x", &[]);
        a.env_overlay = vec![lit("TOKEN", "gh")];
        let mut b = target("x", &[]);
        b.env_overlay = vec![("TOKEN".into(), TargetEnvValue::SecretRef("gh".into()))];
        let tb = b.match_target().unwrap();
        assert_ne!(a.match_target().unwrap(), tb);
        assert!(tb.as_str().contains(r#""TOKEN":{"secret_ref":"gh"}"#));
    }

    #[test]
    fn every_identity_change_changes_the_target() {
        let mut base = target("git", &["push"]);
        base.cwd = Some("repo".into());
        base.env_overlay = vec![lit("PATH", "/usr/bin"), lit("LD_PRELOAD", "")];
        let t0 = base.match_target().unwrap();
        let mut variants = Vec::new();
        let mut v = base.clone();
        v.executable = "/usr/bin/git".into();
        variants.push(v);
        let mut v = base.clone();
        v.argv.push("--force".into());
        variants.push(v);
        let mut v = base.clone();
        v.cwd = Some("other".into());
        variants.push(v);
        let mut v = base.clone();
        v.env_overlay[0].1 = TargetEnvValue::Literal("/tmp/evil".into());
        variants.push(v);
        let mut v = base.clone();
        v.env_overlay.pop();
        variants.push(v);
        let mut v = base.clone();
        v.env_overlay.push(lit("GIT_SSH_COMMAND", "x"));
        variants.push(v);
        for v in variants {
            assert_ne!(v.match_target().unwrap(), t0, "{v:?}");
        }
    }

    #[test]
    fn wildcards_and_invisible_characters_are_escaped() {
        let t = target("rm", &["*", "a\u{202e}b", "\n"])
            .match_target()
            .unwrap();
        assert!(!t.as_str().contains('*'));
        assert!(!t.as_str().contains('\u{202e}'));
        assert!(t.as_str().contains(r#"["\u002a","a\u202eb","\u000a"]"#));
        let decoded: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
        assert_eq!(decoded["argv"][1], "a\u{202e}b");
    }

    /// Unicode 14 `Cf`, `Zs` (but U+0020), `Zl` and `Zp`, from the UCD.
    const INVISIBLE: &[(u32, u32)] = &[
        (0xad, 0xad),
        (0x600, 0x605),
        (0x61c, 0x61c),
        (0x6dd, 0x6dd),
        (0x70f, 0x70f),
        (0x890, 0x891),
        (0x8e2, 0x8e2),
        (0x180e, 0x180e),
        (0x200b, 0x200f),
        (0x202a, 0x202e),
        (0x2060, 0x2064),
        (0x2066, 0x206f),
        (0xfeff, 0xfeff),
        (0xfff9, 0xfffb),
        (0x110bd, 0x110bd),
        (0x110cd, 0x110cd),
        (0x13430, 0x13438),
        (0x1bca0, 0x1bca3),
        (0x1d173, 0x1d17a),
        (0xe0001, 0xe0001),
        (0xe0020, 0xe007f),
        (0xa0, 0xa0),
        (0x1680, 0x1680),
        (0x2000, 0x200a),
        (0x202f, 0x202f),
        (0x205f, 0x205f),
        (0x3000, 0x3000),
        (0x2028, 0x2029),
        // Fillers and the braille blank.
        (0x115f, 0x1160),
        (0x3164, 0x3164),
        (0xffa0, 0xffa0),
        (0x2800, 0x2800),
    ];

    #[test]
    fn every_invisible_character_is_escaped_like_a_wildcard() {
        let mut checked = 0;
        for &(lo, hi) in INVISIBLE {
            for c in (lo..=hi).filter_map(char::from_u32) {
                assert!(needs_unicode_escape(c), "U+{:04X}", c as u32);
                let t = target("x", &[&format!("a{c}b")]).match_target().unwrap();
                assert!(!t.as_str().contains(c), "U+{:04X}", c as u32);
                checked += 1;
            }
        }
        assert!(checked > 150, "{checked}");
        // Exhaustively against the standard library's own tables: every
        // control character and every whitespace but the ASCII space.
        for c in (0..=0x10ffff).filter_map(char::from_u32) {
            if c.is_control() || (c.is_whitespace() && c != ' ') {
                assert!(needs_unicode_escape(c), "U+{:04X}", c as u32);
            }
        }
        // What a person can read stays readable.
        for c in [' ', 'a', 'Z', '~', 'é', 'ß', '中', '😀', '\u{301}'] {
            assert!(!needs_unicode_escape(c), "{c:?}");
        }
        // Tag characters spelling text after a visible word.
        let tagged: String = "status"
            .chars()
            .chain(
                "rm".chars()
                    .map(|c| char::from_u32(0xe0000 + c as u32).unwrap()),
            )
            .collect();
        let t = target("git", &[&tagged]).match_target().unwrap();
        assert!(
            t.as_str().contains(r"status\udb40\udc72\udb40\udc6d"),
            "{t}"
        );
    }

    #[test]
    fn cwd_is_normalized_lexically() {
        for (given, want) in [
            (None, "."),
            (Some("."), "."),
            (Some("./a//b/"), "a/b"),
            (Some("a\\b"), "a/b"),
            (Some("sub/.."), "."),
            (Some("a/../b"), "b"),
        ] {
            // The canonical form is a fixed point.
            if let Some(g) = given {
                let once = canonical_cwd(g).unwrap();
                if !once.is_empty() {
                    assert_eq!(canonical_cwd(&once), Ok(once));
                }
            }
            let mut t = target("x", &[]);
            t.cwd = given.map(str::to_owned);
            assert_eq!(t.canonicalize().unwrap().cwd, want);
        }
    }

    #[test]
    fn malformed_inputs_get_typed_reasons() {
        let cases: Vec<(ProcessTarget, TargetError)> = vec![
            (target("", &[]), TargetError::EmptyExecutable),
            (target("a\0", &[]), TargetError::NulInExecutable),
            (
                target("a", &["ok", "b\0"]),
                TargetError::NulInArgument { index: 1 },
            ),
            (
                ProcessTarget {
                    cwd: Some("/etc".into()),
                    ..target("a", &[])
                },
                TargetError::AbsoluteCwd,
            ),
            (
                ProcessTarget {
                    cwd: Some("a/../..".into()),
                    ..target("a", &[])
                },
                TargetError::ParentInCwd,
            ),
            (
                ProcessTarget {
                    cwd: Some("C:x".into()),
                    ..target("a", &[])
                },
                TargetError::AbsoluteCwd,
            ),
            (
                ProcessTarget {
                    cwd: Some("./c:".into()),
                    ..target("a", &[])
                },
                TargetError::AbsoluteCwd,
            ),
            (
                ProcessTarget {
                    cwd: Some(String::new()),
                    ..target("a", &[])
                },
                TargetError::EmptyCwd,
            ),
            (target("bin/", &[]), TargetError::ExecutableNotAFile),
            (
                ProcessTarget {
                    cwd: Some("a\0".into()),
                    ..target("a", &[])
                },
                TargetError::NulInCwd,
            ),
            (
                ProcessTarget {
                    env_overlay: vec![lit("A=B", "1")],
                    ..target("a", &[])
                },
                TargetError::InvalidEnvKey { index: 0 },
            ),
            (
                ProcessTarget {
                    env_overlay: vec![lit("", "1")],
                    ..target("a", &[])
                },
                TargetError::InvalidEnvKey { index: 0 },
            ),
            (
                ProcessTarget {
                    env_overlay: vec![lit("A", "\0")],
                    ..target("a", &[])
                },
                TargetError::NulInEnvValue { index: 0 },
            ),
            (
                ProcessTarget {
                    env_overlay: vec![("A".into(), TargetEnvValue::SecretRef(String::new()))],
                    ..target("a", &[])
                },
                TargetError::InvalidSecretRef { index: 0 },
            ),
            (
                ProcessTarget {
                    env_overlay: vec![lit("B", "1"), lit("A", "1"), lit("B", "2")],
                    ..target("a", &[])
                },
                TargetError::DuplicateEnvKey { index: 2 },
            ),
        ];
        for (input, want) in cases {
            assert_eq!(input.match_target(), Err(want.clone()), "{input:?}");
        }
    }

    #[test]
    fn errors_never_carry_environment_keys_or_values() {
        let t = ProcessTarget {
            env_overlay: vec![
                lit("SECRET_KEY_NAME", "hunter2"),
                lit("SECRET_KEY_NAME", "hunter3"),
            ],
            ..target("a", &[])
        };
        let err = t.match_target().unwrap_err();
        let shown = format!("{err} {err:?} {}", serde_json::to_string(&err).unwrap());
        assert!(!shown.contains("SECRET_KEY_NAME") && !shown.contains("hunter"));
    }

    #[test]
    fn oversized_target_keeps_prefix_and_hash_of_full_text() {
        let t = target("x", &[&"a".repeat(MAX_TARGET_BYTES)]);
        let full = t.canonicalize().unwrap().serialize_full();
        let m = t.match_target().unwrap();
        assert!(m.is_truncated());
        assert_eq!(m.as_str().len(), MAX_TARGET_BYTES);
        assert!(m.as_str().starts_with(&full[..MAX_PREFIX_BYTES]));
        let hex = hex::encode(Sha256::digest(full.as_bytes()));
        assert!(m.as_str().ends_with(&format!("{TRUNCATION_MARKER}{hex}")));
    }

    #[test]
    fn target_at_the_bound_is_not_truncated() {
        let overhead = target("x", &[""]).match_target().unwrap().as_str().len();
        let t = target("x", &[&"a".repeat(MAX_TARGET_BYTES - overhead)]);
        let m = t.match_target().unwrap();
        assert_eq!(m.as_str().len(), MAX_TARGET_BYTES);
        assert!(!m.is_truncated());
        let t = target("x", &[&"a".repeat(MAX_TARGET_BYTES - overhead + 1)]);
        assert!(t.match_target().unwrap().is_truncated());
    }

    #[test]
    fn truncation_cuts_at_a_character_boundary() {
        for pad in 0..4 {
            let arg = format!(
                "{}{}",
                "a".repeat(pad),
                "\u{1f600}".repeat(MAX_TARGET_BYTES)
            );
            let m = target("x", &[&arg]).match_target().unwrap();
            assert!(m.as_str().len() <= MAX_TARGET_BYTES);
            assert!(m.as_str().len() >= MAX_TARGET_BYTES - 3);
        }
    }
}
