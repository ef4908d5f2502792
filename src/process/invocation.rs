//! The invocation: what to run, validated before anything is launched.
//!
//! An [`InvocationSpec`] is the raw, untrusted request (what a tool call or
//! the CLI supplies). [`Invocation::validate`] turns it into an
//! [`Invocation`] or a typed [`InvalidInvocation`]; nothing is ever launched
//! from an unvalidated spec.
//!
//! The rules, each with a unit test that fails without it:
//!
//! - the executable is a non-empty string without NUL; `argv` is a list of
//!   arguments (never a shell string, never joined) without NUL;
//! - the optional `cwd` is *lexically* inside the workspace: relative, no
//!   NUL, and no `..` that climbs above the workspace root. The check is
//!   lexical only: a symlink inside the workspace may still point outside it
//!   (only a confinement, [`crate::confine`], stops the process using it);
//! - environment overlay keys are non-empty, contain no `=` and no NUL, and
//!   appear at most once; literal values contain no NUL;
//! - the timeout is non-zero and at most [`MAX_TIMEOUT`]; the grace, the
//!   drain bound and the hard-deadline margin are at most [`MAX_TUNABLE`],
//!   so no deadline the lifecycle computes can overflow a clock; the
//!   per-stream budgets are at most [`MAX_STREAM_BUDGET`];
//! - on Windows (or when validating *for* Windows with
//!   [`Invocation::validate_for`]) the executable must satisfy
//!   [`check_windows_executable`].
//!
//! No error carries an environment key or value: overlay problems name the
//! entry's position only.
//!
//! [`resolve_executable`] resolves a bare executable name against the
//! child's effective `PATH` on POSIX, so the evidence can name what ran.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crate::confine::{Confinement, InvalidConfinement};

/// The default timeout: 30 seconds.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default per-stream output budget: 64 KiB.
pub const DEFAULT_STREAM_BUDGET: usize = 64 * 1024;
/// The largest per-stream output budget accepted: 64 MiB.
pub const MAX_STREAM_BUDGET: usize = 64 * 1024 * 1024;
/// The largest total size of the executable plus all arguments: 1 MiB.
///
/// It bounds the invocation identity in the evidence (Linux's own
/// `ARG_MAX` is usually 2 MiB including the environment).
pub const MAX_ARGV_BYTES: usize = crate::policy::target::MAX_ARGV_BYTES;
/// The largest number of arguments accepted.
pub const MAX_ARGS: usize = crate::policy::target::MAX_ARGS;
/// The largest number of environment overlay entries accepted.
pub const MAX_ENV_ENTRIES: usize = crate::policy::target::MAX_ENV_ENTRIES;
/// The longest working directory accepted, in bytes (Linux's `PATH_MAX`):
/// it bounds the cwd in the evidence.
pub const MAX_CWD_BYTES: usize = crate::policy::target::MAX_CWD_BYTES;
/// The longest timeout accepted: 30 days.
///
/// Longer than any request an agent runtime should hold open, and far
/// inside every clock the lifecycle adds it to: the deadline is
/// `now + timeout` on a monotonic `Instant` (which panics on overflow),
/// tokio's timer wheel spans about two years, and the evidence's timings
/// are microseconds in a `u64`. A timeout of centuries is a mistake or an
/// attack, never a plan.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// The longest grace, drain bound or hard-deadline margin accepted: 1 hour.
///
/// Each is a short wait after a signal or an exit; an hour is already
/// far more than any process needs to shut down, and keeps
/// `timeout + grace + hard_margin` within [`MAX_TIMEOUT`] plus two hours.
pub const MAX_TUNABLE: Duration = Duration::from_secs(60 * 60);

/// An environment overlay value: a literal, or a reference to a secret that
/// is resolved at launch (see [`crate::process::env::SecretResolver`]).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EnvValue {
    /// A literal value.
    Literal(String),
    /// A reference to a secret, resolved at launch; its value never appears
    /// in evidence, errors or logs, and is redacted from captured output.
    Secret(SecretRef),
}

impl fmt::Debug for EnvValue {
    // Environment values never reach logs, not even through `{:?}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvValue::Literal(_) => f.write_str("Literal(<hidden>)"),
            EnvValue::Secret(r) => write!(f, "Secret({r:?})"),
        }
    }
}

/// The name of a secret in the embedding runtime's secret store.
///
/// The reference is an identifier, not the secret; it is still kept out of
/// evidence (it belongs to the environment overlay).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecretRef(String);

impl SecretRef {
    /// Wraps a secret store identifier.
    pub fn new(name: impl Into<String>) -> Self {
        SecretRef(name.into())
    }

    /// The identifier, for the resolver.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretRef(<hidden>)")
    }
}

/// Tunables of the lifecycle, with documented defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunables {
    /// How long to wait after SIGTERM before SIGKILL. Default: 2 s.
    pub grace: Duration,
    /// After the root exits, how long to keep draining a stream that a
    /// descendant holds open before marking it `held_open`. Default: 500 ms.
    pub drain: Duration,
    /// Added to `timeout + grace`: when it passes, the streams are closed
    /// and the process settles whatever else is pending. Default: 1 s.
    pub hard_margin: Duration,
}

impl Tunables {
    /// The default grace period between SIGTERM and SIGKILL.
    pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);
    /// The default post-exit drain bound.
    pub const DEFAULT_DRAIN: Duration = Duration::from_millis(500);
    /// The default hard-deadline margin.
    pub const DEFAULT_HARD_MARGIN: Duration = Duration::from_secs(1);
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            grace: Self::DEFAULT_GRACE,
            drain: Self::DEFAULT_DRAIN,
            hard_margin: Self::DEFAULT_HARD_MARGIN,
        }
    }
}

/// Output budgets, in bytes, for each captured stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputBudget {
    /// Bytes of stdout kept (head + tail).
    pub stdout: usize,
    /// Bytes of stderr kept (head + tail).
    pub stderr: usize,
}

impl Default for OutputBudget {
    fn default() -> Self {
        OutputBudget {
            stdout: DEFAULT_STREAM_BUDGET,
            stderr: DEFAULT_STREAM_BUDGET,
        }
    }
}

/// The raw, unvalidated request to run a process.
///
/// Build one with [`InvocationSpec::new`] and the `with_*` helpers, or fill
/// the public fields, then call [`Invocation::validate`].
#[derive(Clone, Debug, Default)]
pub struct InvocationSpec {
    /// The executable: a bare name (resolved against the child's `PATH`) or
    /// a path.
    pub executable: String,
    /// The arguments after the executable (`argv[1..]`); `argv[0]` is the
    /// executable as given.
    pub args: Vec<String>,
    /// The working directory, relative to the workspace root. `None` runs in
    /// the workspace root.
    pub cwd: Option<String>,
    /// The explicit environment overlay, applied over the baseline, in
    /// order. Keys must be unique.
    pub env: Vec<(String, EnvValue)>,
    /// The timeout (`None`: [`DEFAULT_TIMEOUT`]).
    pub timeout: Option<Duration>,
    /// The per-stream output budgets.
    pub budget: OutputBudget,
    /// Lifecycle tunables.
    pub tunables: Tunables,
    /// What the process may touch while it runs. `None` (the default)
    /// leaves it to the launcher's default: a
    /// [`Runtime`](crate::Runtime)'s [`RuntimeConfig::confinement`](crate::RuntimeConfig::confinement),
    /// else no confinement; `Some(Confinement::none())` says explicitly
    /// that the process is not confined, whatever the default.
    pub confinement: Option<Confinement>,
}

impl InvocationSpec {
    /// A spec that runs `executable` with no arguments and the defaults.
    pub fn new(executable: impl Into<String>) -> Self {
        InvocationSpec {
            executable: executable.into(),
            ..InvocationSpec::default()
        }
    }

    /// Appends arguments.
    #[must_use]
    pub fn with_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets the workspace-relative working directory.
    #[must_use]
    pub fn with_cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Adds an overlay entry.
    #[must_use]
    pub fn with_env(mut self, key: impl Into<String>, value: EnvValue) -> Self {
        self.env.push((key.into(), value));
        self
    }

    /// Sets the timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets both per-stream budgets.
    #[must_use]
    pub fn with_budget(mut self, budget: OutputBudget) -> Self {
        self.budget = budget;
        self
    }

    /// Sets the tunables.
    #[must_use]
    pub fn with_tunables(mut self, tunables: Tunables) -> Self {
        self.tunables = tunables;
        self
    }

    /// Sets the confinement, overriding any default
    /// ([`Confinement::none`] runs the process unconfined whatever the
    /// default is).
    #[must_use]
    pub fn with_confinement(mut self, confinement: Confinement) -> Self {
        self.confinement = Some(confinement);
        self
    }
}

/// The platform whose executable rules apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Platform {
    /// Linux, macOS and other Unix systems.
    Posix,
    /// Windows.
    Windows,
}

impl Platform {
    /// The platform this build runs on.
    pub const fn current() -> Self {
        if cfg!(windows) {
            Platform::Windows
        } else {
            Platform::Posix
        }
    }
}

/// Why an invocation was refused. Nothing was launched.
///
/// Never carries an environment key or value, nor a secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidInvocation {
    /// The executable is empty.
    #[error("the executable is empty")]
    EmptyExecutable,
    /// The executable contains a NUL byte.
    #[error("the executable contains a NUL byte")]
    ExecutableNul,
    /// The executable is `.` or `..` or ends in a path separator.
    #[error("the executable does not name a file")]
    ExecutableNotAFile,
    /// An argument contains a NUL byte.
    #[error("argument {index} contains a NUL byte")]
    ArgNul {
        /// Position in `args` (0 is the first argument after the executable).
        index: usize,
    },
    /// Too many arguments, or too many bytes in the executable plus arguments.
    #[error("the argument list is too large (limit {MAX_ARGS} arguments, {MAX_ARGV_BYTES} bytes)")]
    ArgvTooLarge,
    /// The working directory is empty.
    #[error("the working directory is empty (omit it to use the workspace root)")]
    CwdEmpty,
    /// The working directory is absolute (or has a Windows drive/root prefix).
    #[error("the working directory must be relative to the workspace")]
    CwdAbsolute,
    /// The working directory climbs above the workspace root with `..`.
    #[error("the working directory escapes the workspace")]
    CwdEscapes,
    /// The working directory contains a NUL byte.
    #[error("the working directory contains a NUL byte")]
    CwdNul,
    /// The working directory is longer than [`MAX_CWD_BYTES`].
    #[error("the working directory is longer than {MAX_CWD_BYTES} bytes")]
    CwdTooLong,
    /// An overlay key is empty.
    #[error("environment overlay entry {index}: the key is empty")]
    EnvKeyEmpty {
        /// Position in the overlay.
        index: usize,
    },
    /// An overlay key contains `=`.
    #[error("environment overlay entry {index}: the key contains '='")]
    EnvKeyEquals {
        /// Position in the overlay.
        index: usize,
    },
    /// An overlay key contains a NUL byte.
    #[error("environment overlay entry {index}: the key contains a NUL byte")]
    EnvKeyNul {
        /// Position in the overlay.
        index: usize,
    },
    /// An overlay literal value contains a NUL byte.
    #[error("environment overlay entry {index}: the value contains a NUL byte")]
    EnvValueNul {
        /// Position in the overlay.
        index: usize,
    },
    /// An overlay key appears twice.
    #[error("environment overlay entry {index}: the key repeats entry {first}")]
    EnvKeyDuplicate {
        /// Position of the repeat.
        index: usize,
        /// Position of the first occurrence.
        first: usize,
    },
    /// Too many overlay entries.
    #[error("the environment overlay has too many entries (limit {MAX_ENV_ENTRIES})")]
    EnvTooLarge,
    /// The timeout is zero.
    #[error("the timeout must be greater than zero")]
    ZeroTimeout,
    /// The timeout is longer than [`MAX_TIMEOUT`].
    #[error("the timeout exceeds the limit of {} days", MAX_TIMEOUT.as_secs() / 86_400)]
    TimeoutTooLarge,
    /// The grace, the drain bound or the hard-deadline margin is longer
    /// than [`MAX_TUNABLE`].
    #[error("the {name} exceeds the limit of {} seconds", MAX_TUNABLE.as_secs())]
    TunableTooLarge {
        /// `"grace"`, `"drain"` or `"hard_margin"`.
        name: &'static str,
    },
    /// A stream budget is larger than [`MAX_STREAM_BUDGET`].
    #[error("the {stream} budget exceeds the limit of {MAX_STREAM_BUDGET} bytes")]
    BudgetTooLarge {
        /// `"stdout"` or `"stderr"`.
        stream: &'static str,
    },
    /// The confinement breaks a lexical rule.
    #[error(transparent)]
    Confinement(#[from] InvalidConfinement),
    /// The executable breaks the Windows executable rules.
    #[error(transparent)]
    Windows(#[from] WindowsExecutableError),
}

/// A validated invocation: safe to hand to the launcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    executable: String,
    args: Vec<String>,
    cwd: Option<WorkspaceCwd>,
    env: EnvOverlay,
    timeout: Duration,
    budget: OutputBudget,
    tunables: Tunables,
    confinement: Confinement,
    /// Whether the spec named the confinement (else a default may replace
    /// it).
    confinement_given: bool,
    fault: Option<super::fault::FaultPoint>,
}

impl Invocation {
    /// Validates `spec` with the rules of the platform this build runs on.
    ///
    /// # Errors
    ///
    /// Returns the first rule `spec` breaks, see [`InvalidInvocation`].
    pub fn validate(spec: InvocationSpec) -> Result<Invocation, InvalidInvocation> {
        Self::validate_for(spec, Platform::current())
    }

    /// Validates `spec` with the rules of `platform` (used to test the
    /// Windows rules on any host).
    ///
    /// # Errors
    ///
    /// Returns the first rule `spec` breaks, see [`InvalidInvocation`].
    pub fn validate_for(
        spec: InvocationSpec,
        platform: Platform,
    ) -> Result<Invocation, InvalidInvocation> {
        let InvocationSpec {
            executable,
            args,
            cwd,
            env,
            timeout,
            budget,
            tunables,
            confinement,
        } = spec;
        check_executable(&executable)?;
        if platform == Platform::Windows {
            check_windows_executable(&executable)?;
        }
        check_args(&executable, &args)?;
        let cwd = cwd.as_deref().map(WorkspaceCwd::new).transpose()?;
        let env = EnvOverlay::new(env)?;
        let timeout = timeout.unwrap_or(DEFAULT_TIMEOUT);
        if timeout.is_zero() {
            return Err(InvalidInvocation::ZeroTimeout);
        }
        if timeout > MAX_TIMEOUT {
            return Err(InvalidInvocation::TimeoutTooLarge);
        }
        for (name, d) in [
            ("grace", tunables.grace),
            ("drain", tunables.drain),
            ("hard_margin", tunables.hard_margin),
        ] {
            if d > MAX_TUNABLE {
                return Err(InvalidInvocation::TunableTooLarge { name });
            }
        }
        if budget.stdout > MAX_STREAM_BUDGET {
            return Err(InvalidInvocation::BudgetTooLarge { stream: "stdout" });
        }
        if budget.stderr > MAX_STREAM_BUDGET {
            return Err(InvalidInvocation::BudgetTooLarge { stream: "stderr" });
        }
        let confinement_given = confinement.is_some();
        let confinement = confinement.unwrap_or_default();
        confinement.validate()?;
        Ok(Invocation {
            executable,
            args,
            cwd,
            env,
            timeout,
            budget,
            tunables,
            confinement,
            confinement_given,
            fault: None,
        })
    }

    /// The executable as given (see [`resolve_executable`]).
    pub fn executable(&self) -> &str {
        &self.executable
    }

    /// The arguments after the executable (`argv[1..]`).
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// The workspace-relative working directory, if any.
    pub fn cwd(&self) -> Option<&WorkspaceCwd> {
        self.cwd.as_ref()
    }

    /// The validated environment overlay.
    pub fn env(&self) -> &EnvOverlay {
        &self.env
    }

    /// The timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The per-stream output budgets.
    pub fn budget(&self) -> OutputBudget {
        self.budget
    }

    /// The lifecycle tunables.
    pub fn tunables(&self) -> Tunables {
        self.tunables
    }

    /// The confinement (none when the spec named none and no default was
    /// applied).
    pub fn confinement(&self) -> &Confinement {
        &self.confinement
    }

    /// Whether the spec named the confinement itself
    /// ([`InvocationSpec::confinement`] was `Some`), [`Confinement::none`]
    /// included.
    pub fn confinement_is_explicit(&self) -> bool {
        self.confinement_given
    }

    /// This invocation under `default` if its spec named no confinement of
    /// its own; unchanged otherwise. The result's confinement counts as
    /// explicit.
    ///
    /// # Errors
    ///
    /// [`InvalidConfinement`] if `default` is used and breaks a lexical
    /// rule.
    pub fn with_default_confinement(
        mut self,
        default: &Confinement,
    ) -> Result<Invocation, InvalidConfinement> {
        if !self.confinement_given {
            default.validate()?;
            self.confinement = default.clone();
            self.confinement_given = true;
        }
        Ok(self)
    }

    /// Test seam: makes the launcher panic at `at` (see
    /// [`crate::process::fault`]).
    #[doc(hidden)]
    #[must_use]
    pub fn with_fault(mut self, at: super::fault::FaultPoint) -> Self {
        self.fault = Some(at);
        self
    }

    pub(crate) fn fault(&self) -> Option<super::fault::FaultPoint> {
        self.fault
    }

    /// The hard deadline, measured from the start: `timeout + grace +
    /// hard_margin` (saturating).
    pub fn hard_deadline(&self) -> Duration {
        self.timeout
            .saturating_add(self.tunables.grace)
            .saturating_add(self.tunables.hard_margin)
    }
}

// The identity rules live in `policy::target`, so that policy decides over
// exactly what the launcher accepts.
fn check_executable(exe: &str) -> Result<(), InvalidInvocation> {
    use crate::policy::target::ExecutableError;
    crate::policy::target::check_executable(exe).map_err(|e| match e {
        ExecutableError::Empty => InvalidInvocation::EmptyExecutable,
        ExecutableError::Nul => InvalidInvocation::ExecutableNul,
        _ => InvalidInvocation::ExecutableNotAFile,
    })
}

fn check_args(exe: &str, args: &[String]) -> Result<(), InvalidInvocation> {
    use crate::policy::target::ArgvError;
    crate::policy::target::check_argv(exe, args).map_err(|e| match e {
        ArgvError::Nul { index } => InvalidInvocation::ArgNul { index },
        _ => InvalidInvocation::ArgvTooLarge,
    })
}

/// A working directory lexically inside the workspace, normalized (`.`
/// components and repeated separators removed, `a/../b` folded to `b`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkspaceCwd(String);

impl WorkspaceCwd {
    /// Checks `cwd` lexically with [`crate::policy::target::canonical_cwd`],
    /// the one canonical form policy targets use too: relative, no NUL, and
    /// never above the workspace root.
    ///
    /// Both `/` and `\` count as separators, and a Windows drive prefix
    /// (`C:`) counts as absolute, whatever the host.
    ///
    /// # Errors
    ///
    /// [`InvalidInvocation::CwdEmpty`], [`CwdAbsolute`],
    /// [`CwdEscapes`] or [`CwdNul`].
    ///
    /// [`CwdAbsolute`]: InvalidInvocation::CwdAbsolute
    /// [`CwdEscapes`]: InvalidInvocation::CwdEscapes
    /// [`CwdNul`]: InvalidInvocation::CwdNul
    pub fn new(cwd: &str) -> Result<WorkspaceCwd, InvalidInvocation> {
        use crate::policy::target::{CwdError, canonical_cwd};
        canonical_cwd(cwd).map(WorkspaceCwd).map_err(|e| match e {
            CwdError::Empty => InvalidInvocation::CwdEmpty,
            CwdError::Nul => InvalidInvocation::CwdNul,
            CwdError::TooLong => InvalidInvocation::CwdTooLong,
            CwdError::Absolute => InvalidInvocation::CwdAbsolute,
            _ => InvalidInvocation::CwdEscapes,
        })
    }

    /// The normalized relative path (`""` means the workspace root itself).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The absolute directory for a workspace rooted at `root`.
    pub fn under(&self, root: &Path) -> PathBuf {
        if self.0.is_empty() {
            root.to_path_buf()
        } else {
            root.join(&self.0)
        }
    }
}

impl fmt::Display for WorkspaceCwd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The validated environment overlay, sorted by key (code point order).
///
/// Its `Debug` output hides keys and values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EnvOverlay(BTreeMap<String, EnvValue>);

impl EnvOverlay {
    /// Validates overlay entries.
    ///
    /// # Errors
    ///
    /// The first broken key or value rule, naming the entry's position only.
    pub fn new(entries: Vec<(String, EnvValue)>) -> Result<EnvOverlay, InvalidInvocation> {
        if entries.len() > MAX_ENV_ENTRIES {
            return Err(InvalidInvocation::EnvTooLarge);
        }
        let mut map = BTreeMap::new();
        let mut first_index: BTreeMap<&str, usize> = BTreeMap::new();
        for (index, (key, _)) in entries.iter().enumerate() {
            check_env_key(key, index)?;
            if let Some(&first) = first_index.get(key.as_str()) {
                return Err(InvalidInvocation::EnvKeyDuplicate { index, first });
            }
            first_index.insert(key, index);
        }
        drop(first_index);
        for (index, (key, value)) in entries.into_iter().enumerate() {
            if let EnvValue::Literal(v) = &value {
                if v.contains('\0') {
                    return Err(InvalidInvocation::EnvValueNul { index });
                }
            }
            map.insert(key, value);
        }
        Ok(EnvOverlay(map))
    }

    /// The entries, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &EnvValue)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The value for `key`, if the overlay sets it.
    pub fn get(&self, key: &str) -> Option<&EnvValue> {
        self.0.get(key)
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the overlay is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for EnvOverlay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EnvOverlay({} entries)", self.0.len())
    }
}

fn check_env_key(key: &str, index: usize) -> Result<(), InvalidInvocation> {
    if key.is_empty() {
        return Err(InvalidInvocation::EnvKeyEmpty { index });
    }
    if key.contains('=') {
        return Err(InvalidInvocation::EnvKeyEquals { index });
    }
    if key.contains('\0') {
        return Err(InvalidInvocation::EnvKeyNul { index });
    }
    Ok(())
}

/// Why an executable breaks the Windows rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WindowsExecutableError {
    /// The executable has no file name.
    #[error("the executable has no file name")]
    NoFileName,
    /// A bare name without an extension: `PATHEXT` could resolve it to a
    /// command script.
    #[error("on Windows the executable needs an explicit extension (e.g. tool.exe)")]
    MissingExtension,
    /// A `.cmd` or `.bat` script, which Windows runs through `cmd.exe`.
    #[error("on Windows .cmd and .bat scripts are refused (they run through cmd.exe)")]
    CommandScript,
    /// The name ends in `.` or a space, which Windows strips (so `x.cmd.`
    /// would run `x.cmd`).
    #[error("on Windows an executable name may not end in '.' or a space")]
    TrailingDotOrSpace,
    /// The name holds a `:` (an alternate data stream, e.g. `x.exe:y.cmd`).
    #[error("on Windows an executable name may not contain ':'")]
    StreamSuffix,
}

/// Checks an executable against the Windows rules, on any host.
///
/// Only the final path component is examined (`\` and `/` both separate,
/// a leading drive `C:` is set aside). It must:
///
/// - not end in `.` or a space (Windows strips them, so `run.bat.` runs
///   `run.bat`);
/// - hold no `:` (an alternate data stream);
/// - have a non-empty stem and an explicit, non-empty extension, so
///   `PATHEXT` never picks one (which could resolve a `.cmd` script);
/// - not have the extension `cmd` or `bat`, in any case.
///
/// # Errors
///
/// The first rule broken, as a [`WindowsExecutableError`].
pub fn check_windows_executable(exe: &str) -> Result<(), WindowsExecutableError> {
    let bytes = exe.as_bytes();
    let rest = if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
        &exe[2..]
    } else {
        exe
    };
    let name = rest.rsplit(['/', '\\']).next().unwrap_or(rest);
    if name.is_empty() || name == "." || name == ".." {
        return Err(WindowsExecutableError::NoFileName);
    }
    if name.ends_with(['.', ' ']) {
        return Err(WindowsExecutableError::TrailingDotOrSpace);
    }
    if name.contains(':') {
        return Err(WindowsExecutableError::StreamSuffix);
    }
    let Some((stem, ext)) = name.rsplit_once('.') else {
        return Err(WindowsExecutableError::MissingExtension);
    };
    if stem.is_empty() || ext.is_empty() {
        return Err(WindowsExecutableError::MissingExtension);
    }
    // Only ASCII letters can fold onto "cmd"/"bat" (no non-ASCII letter
    // upper-cases to C, M, D, B, A or T), so an ASCII comparison is exact.
    if ext.eq_ignore_ascii_case("cmd") || ext.eq_ignore_ascii_case("bat") {
        return Err(WindowsExecutableError::CommandScript);
    }
    Ok(())
}

/// Why an executable could not be resolved. Carries no environment value
/// (the `PATH` searched is not included).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// No directory of the child's `PATH` holds an executable file of that
    /// name.
    #[error("executable {name:?} not found in the child's PATH")]
    NotFound {
        /// The bare name searched for.
        name: String,
    },
    /// A path was given, but it is not an executable file.
    #[error("{path:?} is not an executable file")]
    NotExecutable {
        /// The path as resolved.
        path: PathBuf,
    },
}

/// Resolves the executable to the path that will run, on POSIX.
///
/// - a name holding `/` is a path: absolute as is, relative against the
///   child's working directory `cwd` (as `execve` would); it must pass
///   `is_exec`;
/// - a bare name is searched in the child's effective `PATH` (`path_var`,
///   the baseline's `PATH` or the overlay's), first match wins. Empty and
///   relative `PATH` entries are skipped: they would make the result depend
///   on the child's working directory. `None` or an empty `PATH` finds
///   nothing.
///
/// `is_exec` says whether a path is an executable regular file; use
/// [`is_executable_file`] for the real check.
///
/// # Errors
///
/// [`ResolveError::NotFound`] or [`ResolveError::NotExecutable`].
pub fn resolve_executable(
    exe: &str,
    path_var: Option<&OsStr>,
    cwd: &Path,
    mut is_exec: impl FnMut(&Path) -> bool,
) -> Result<PathBuf, ResolveError> {
    if exe.contains('/') {
        let path = Path::new(exe);
        let full = if path.is_absolute() {
            path.to_path_buf()
        } else {
            cwd.join(path)
        };
        return if is_exec(&full) {
            Ok(full)
        } else {
            Err(ResolveError::NotExecutable { path: full })
        };
    }
    if let Some(path_var) = path_var {
        for dir in std::env::split_paths(path_var) {
            if dir.as_os_str().is_empty() || !dir.is_absolute() {
                continue;
            }
            // A PATH entry like `/usr/bin/..` is fine: it is absolute and the
            // evidence names the candidate as found.
            if dir.components().any(|c| matches!(c, Component::Prefix(_))) {
                continue;
            }
            let candidate = dir.join(exe);
            if is_exec(&candidate) {
                return Ok(candidate);
            }
        }
    }
    Err(ResolveError::NotFound {
        name: exe.to_owned(),
    })
}

/// `stat(path)` + `access(path, X_OK)`—Whether `path` is a regular file this
/// process may execute (following symlinks, as `execve` does).
#[cfg(unix)]
#[doc(alias = "access")]
pub fn is_executable_file(path: &Path) -> bool {
    use rustix::fs::{Access, FileType, access, stat};
    match stat(path) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {
            access(path, Access::EXEC_OK).is_ok()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(exe: &str) -> InvocationSpec {
        InvocationSpec::new(exe)
    }

    #[test]
    fn a_plain_invocation_validates_with_defaults() {
        let inv = Invocation::validate(spec("ls").with_args(["-l", "a b"])).unwrap();
        assert_eq!(inv.executable(), "ls");
        assert_eq!(inv.args(), ["-l", "a b"]);
        assert_eq!(inv.timeout(), DEFAULT_TIMEOUT);
        assert_eq!(inv.budget(), OutputBudget::default());
        assert_eq!(inv.tunables(), Tunables::default());
        assert_eq!(inv.hard_deadline(), Duration::from_secs(33));
        assert!(inv.cwd().is_none());
    }

    #[test]
    fn executable_rules() {
        assert_eq!(
            Invocation::validate(spec("")),
            Err(InvalidInvocation::EmptyExecutable)
        );
        assert_eq!(
            Invocation::validate(spec("l\0s")),
            Err(InvalidInvocation::ExecutableNul)
        );
        for bad in [".", "..", "bin/", "/usr/.."] {
            assert_eq!(
                Invocation::validate(spec(bad)),
                Err(InvalidInvocation::ExecutableNotAFile),
                "{bad}"
            );
        }
    }

    #[test]
    fn argv_rules() {
        assert_eq!(
            Invocation::validate(spec("x").with_args(["ok", "b\0d"])),
            Err(InvalidInvocation::ArgNul { index: 1 })
        );
        let big = "a".repeat(MAX_ARGV_BYTES);
        assert_eq!(
            Invocation::validate(spec("x").with_args([big])),
            Err(InvalidInvocation::ArgvTooLarge)
        );
        let many = vec![String::new(); MAX_ARGS + 1];
        assert_eq!(
            Invocation::validate(spec("x").with_args(many)),
            Err(InvalidInvocation::ArgvTooLarge)
        );
        // Shell metacharacters are just bytes of one argument.
        let inv = Invocation::validate(spec("x").with_args(["a; rm -rf /", "$(id)"])).unwrap();
        assert_eq!(inv.args().len(), 2);
    }

    #[test]
    fn cwd_is_lexically_inside_the_workspace() {
        let ok = |c: &str| WorkspaceCwd::new(c).unwrap().as_str().to_owned();
        assert_eq!(ok("a/b"), "a/b");
        assert_eq!(ok("./a//b/"), "a/b");
        assert_eq!(ok("a/../b"), "b");
        assert_eq!(ok("a/.."), "");
        assert_eq!(ok("a\\b"), "a/b");
        for (bad, err) in [
            ("", InvalidInvocation::CwdEmpty),
            ("/etc", InvalidInvocation::CwdAbsolute),
            ("\\etc", InvalidInvocation::CwdAbsolute),
            ("C:x", InvalidInvocation::CwdAbsolute),
            ("..", InvalidInvocation::CwdEscapes),
            ("a/../..", InvalidInvocation::CwdEscapes),
            ("a/../../b", InvalidInvocation::CwdEscapes),
            ("..\\x", InvalidInvocation::CwdEscapes),
            ("a\0b", InvalidInvocation::CwdNul),
            (
                &*"a".repeat(MAX_CWD_BYTES + 1),
                InvalidInvocation::CwdTooLong,
            ),
        ] {
            assert_eq!(WorkspaceCwd::new(bad), Err(err.clone()), "{bad:?}");
            assert_eq!(
                Invocation::validate(spec("x").with_cwd(bad)),
                Err(err),
                "{bad:?}"
            );
        }
        let cwd = WorkspaceCwd::new("a/b").unwrap();
        assert_eq!(cwd.under(Path::new("/ws")), PathBuf::from("/ws/a/b"));
        let root = WorkspaceCwd::new(".").unwrap();
        assert_eq!(root.under(Path::new("/ws")), PathBuf::from("/ws"));
    }

    #[test]
    fn env_key_and_value_rules_name_positions_only() {
        let lit = |v: &str| EnvValue::Literal(v.into());
        let cases = [
            (
                vec![("", lit("v"))],
                InvalidInvocation::EnvKeyEmpty { index: 0 },
            ),
            (
                vec![("OK", lit("v")), ("SEC=RET", lit("v"))],
                InvalidInvocation::EnvKeyEquals { index: 1 },
            ),
            (
                vec![("K\0EY", lit("v"))],
                InvalidInvocation::EnvKeyNul { index: 0 },
            ),
            (
                vec![("KEY", lit("hun\0ter2"))],
                InvalidInvocation::EnvValueNul { index: 0 },
            ),
            (
                vec![("A", lit("1")), ("B", lit("2")), ("A", lit("3"))],
                InvalidInvocation::EnvKeyDuplicate { index: 2, first: 0 },
            ),
        ];
        for (entries, want) in cases {
            let mut s = spec("x");
            for (k, v) in entries {
                s = s.with_env(k, v);
            }
            let err = Invocation::validate(s).unwrap_err();
            assert_eq!(err, want);
            let text = format!("{err} {err:?}");
            for secret in ["SEC", "RET", "K\0EY", "hun", "ter2"] {
                assert!(!text.contains(secret), "{text}");
            }
        }
        let inv = Invocation::validate(
            spec("x")
                .with_env("Z", lit("1"))
                .with_env("A", EnvValue::Secret(SecretRef::new("tok"))),
        )
        .unwrap();
        let keys: Vec<_> = inv.env().iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["A", "Z"]);
        let dbg = format!("{inv:?}");
        assert!(!dbg.contains("tok") && !dbg.contains("\"Z\""), "{dbg}");
    }

    #[test]
    fn too_many_env_entries_are_refused() {
        let entries = (0..=MAX_ENV_ENTRIES)
            .map(|i| (format!("K{i}"), EnvValue::Literal(String::new())))
            .collect();
        assert_eq!(
            EnvOverlay::new(entries),
            Err(InvalidInvocation::EnvTooLarge)
        );
    }

    #[test]
    fn timeout_and_budget_rules() {
        assert_eq!(
            Invocation::validate(spec("x").with_timeout(Duration::ZERO)),
            Err(InvalidInvocation::ZeroTimeout)
        );
        assert_eq!(
            Invocation::validate(spec("x").with_budget(OutputBudget {
                stdout: MAX_STREAM_BUDGET + 1,
                stderr: 1
            })),
            Err(InvalidInvocation::BudgetTooLarge { stream: "stdout" })
        );
        assert_eq!(
            Invocation::validate(spec("x").with_budget(OutputBudget {
                stdout: 0,
                stderr: MAX_STREAM_BUDGET + 1
            })),
            Err(InvalidInvocation::BudgetTooLarge { stream: "stderr" })
        );
        assert!(
            Invocation::validate(spec("x").with_budget(OutputBudget {
                stdout: MAX_STREAM_BUDGET,
                stderr: 0
            }))
            .is_ok()
        );
    }

    /// Durations that would overflow the clock or the timer (a timeout or a
    /// grace of centuries, `u64::MAX` milliseconds from the wire) are
    /// refused before anything is launched; the limits themselves pass.
    #[test]
    fn durations_that_overflow_a_clock_are_refused() {
        let huge = [
            Duration::MAX,
            Duration::from_millis(u64::MAX),
            Duration::from_secs(100 * 365 * 86_400),
            MAX_TIMEOUT + Duration::from_nanos(1),
        ];
        for t in huge {
            assert_eq!(
                Invocation::validate(spec("x").with_timeout(t)),
                Err(InvalidInvocation::TimeoutTooLarge),
                "{t:?}"
            );
        }
        type Set = fn(&mut Tunables, Duration);
        let with = |f: Set, d| {
            let mut tun = Tunables::default();
            f(&mut tun, d);
            Invocation::validate(spec("x").with_tunables(tun))
        };
        let setters: [(&str, Set); 3] = [
            ("grace", |t, d| t.grace = d),
            ("drain", |t, d| t.drain = d),
            ("hard_margin", |t, d| t.hard_margin = d),
        ];
        for (name, set) in setters {
            for d in [Duration::MAX, MAX_TUNABLE + Duration::from_nanos(1)] {
                assert_eq!(
                    with(set, d),
                    Err(InvalidInvocation::TunableTooLarge { name }),
                    "{name} {d:?}"
                );
            }
            assert!(with(set, MAX_TUNABLE).is_ok(), "{name} at the limit");
        }
        let max =
            Invocation::validate(spec("x").with_timeout(MAX_TIMEOUT).with_tunables(Tunables {
                grace: MAX_TUNABLE,
                drain: MAX_TUNABLE,
                hard_margin: MAX_TUNABLE,
            }))
            .unwrap();
        // The furthest deadline the lifecycle computes still fits the
        // monotonic clock.
        assert!(
            std::time::Instant::now()
                .checked_add(max.hard_deadline())
                .is_some()
        );
        assert_eq!(max.hard_deadline(), MAX_TIMEOUT + 2 * MAX_TUNABLE);
    }

    #[test]
    fn windows_rules() {
        use WindowsExecutableError as W;
        for ok in [
            "tool.exe",
            "C:\\Tools\\tool.EXE",
            "C:tool.com",
            "dir/sub.d/x.exe",
            "a.cmd.exe",
        ] {
            assert_eq!(check_windows_executable(ok), Ok(()), "{ok}");
        }
        for (bad, err) in [
            ("tool", W::MissingExtension),
            ("C:\\bin.d\\tool", W::MissingExtension),
            (".exe", W::MissingExtension),
            ("run.cmd", W::CommandScript),
            ("run.CMD", W::CommandScript),
            ("run.Bat", W::CommandScript),
            ("x\\y/run.bAT", W::CommandScript),
            ("run.bat.", W::TrailingDotOrSpace),
            ("run.bat ", W::TrailingDotOrSpace),
            ("run.exe. . ", W::TrailingDotOrSpace),
            ("tool.", W::TrailingDotOrSpace),
            ("run.exe:evil.cmd", W::StreamSuffix),
            ("run.bat::$DATA", W::StreamSuffix),
            ("", W::NoFileName),
            ("C:", W::NoFileName),
            ("dir\\", W::NoFileName),
        ] {
            assert_eq!(check_windows_executable(bad), Err(err), "{bad:?}");
        }
        // Validation applies them when asked to, and only then.
        assert_eq!(
            Invocation::validate_for(spec("run.cmd"), Platform::Windows),
            Err(InvalidInvocation::Windows(W::CommandScript))
        );
        assert!(Invocation::validate_for(spec("run.cmd"), Platform::Posix).is_ok());
        assert_eq!(
            Invocation::validate_for(spec("git"), Platform::Windows),
            Err(InvalidInvocation::Windows(W::MissingExtension))
        );
    }

    #[test]
    fn bare_names_resolve_against_the_childs_path_only() {
        let files = ["/opt/a/tool", "/usr/bin/tool", "/usr/bin/other"];
        let is = |p: &Path| files.iter().any(|f| Path::new(f) == p);
        let cwd = Path::new("/ws");
        let path = OsStr::new("/nope:/opt/a:/usr/bin");
        assert_eq!(
            resolve_executable("tool", Some(path), cwd, is),
            Ok(PathBuf::from("/opt/a/tool"))
        );
        assert_eq!(
            resolve_executable("other", Some(path), cwd, is),
            Ok(PathBuf::from("/usr/bin/other"))
        );
        assert_eq!(
            resolve_executable("tool", Some(OsStr::new("/usr/bin")), cwd, is),
            Ok(PathBuf::from("/usr/bin/tool"))
        );
        assert_eq!(
            resolve_executable("missing", Some(path), cwd, is),
            Err(ResolveError::NotFound {
                name: "missing".into()
            })
        );
        assert!(resolve_executable("tool", None, cwd, is).is_err());
    }

    #[test]
    fn empty_and_relative_path_entries_are_skipped() {
        let mut asked = Vec::new();
        let r = resolve_executable(
            "tool",
            Some(OsStr::new(":.:bin:/ok")),
            Path::new("/ws"),
            |p| {
                asked.push(p.to_path_buf());
                false
            },
        );
        assert!(r.is_err());
        assert_eq!(asked, [PathBuf::from("/ok/tool")]);
    }

    #[test]
    fn paths_with_a_slash_are_not_searched() {
        let is = |p: &Path| p == Path::new("/ws/sub/run.sh") || p == Path::new("/bin/sh");
        let cwd = Path::new("/ws/sub");
        let path = OsStr::new("/bin");
        assert_eq!(
            resolve_executable("./run.sh", Some(path), cwd, is),
            Ok(PathBuf::from("/ws/sub/./run.sh"))
        );
        assert_eq!(
            resolve_executable("/bin/sh", Some(path), cwd, is),
            Ok(PathBuf::from("/bin/sh"))
        );
        assert_eq!(
            resolve_executable("bin/sh", Some(path), cwd, is),
            Err(ResolveError::NotExecutable {
                path: PathBuf::from("/ws/sub/bin/sh")
            })
        );
    }

    #[cfg(unix)]
    #[test]
    fn the_real_check_wants_an_executable_regular_file() {
        use std::os::unix::fs::PermissionsExt;
        assert!(is_executable_file(Path::new("/bin/sh")));
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_executable_file(dir.path()), "a directory");
        let f = dir.path().join("f");
        std::fs::write(&f, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(!is_executable_file(&f), "no x bit");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(is_executable_file(&f));
        assert!(!is_executable_file(&dir.path().join("missing")));
    }

    /// Unset and explicitly none are two things: only the first takes a
    /// default.
    #[test]
    fn a_default_confinement_replaces_only_an_unset_one() {
        let default = Confinement::workspace_write();
        let unset = Invocation::validate(spec("true")).unwrap();
        assert!(!unset.confinement_is_explicit());
        assert!(unset.confinement().is_none());
        let applied = unset.with_default_confinement(&default).unwrap();
        assert!(applied.confinement_is_explicit());
        assert_eq!(applied.confinement(), &default);
        let none =
            Invocation::validate(spec("true").with_confinement(Confinement::none())).unwrap();
        assert!(none.confinement_is_explicit());
        let kept = none.with_default_confinement(&default).unwrap();
        assert!(kept.confinement().is_none());
        let own = Invocation::validate(spec("true").with_confinement(Confinement::read_only()))
            .unwrap()
            .with_default_confinement(&default)
            .unwrap();
        assert_eq!(own.confinement(), &Confinement::read_only());
        // A bad default is refused where it would apply, and only there.
        let bad = Confinement::read_only().with_deny_read("relative");
        assert!(
            Invocation::validate(spec("true"))
                .unwrap()
                .with_default_confinement(&bad)
                .is_err()
        );
        assert!(kept.with_default_confinement(&bad).is_ok());
    }
}
