//! `custodian policy`: inspect process.run policy decisions.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use custodian::policy::{
    Context, Decision, Pattern, PolicyConfig, ProcessTarget, Provenance, Query, Registry,
    StateMode, TargetEnvValue, decide,
};

/// Exit code for a policy file that does not validate (`EX_DATAERR`).
pub(crate) const EXIT_BAD_POLICY: u8 = 65;
/// Exit code for a policy file that cannot be read (`EX_NOINPUT`).
pub(crate) const EXIT_NO_POLICY: u8 = 66;
/// Exit code for an argument clap accepted but policy refused (`EX_USAGE`).
pub(crate) const EXIT_USAGE: u8 = 64;

/// Subcommands of `custodian policy`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Print the match target and the decision for an invocation as JSON.
    #[command(after_help = EXPLAIN_SHORT_HELP, after_long_help = EXPLAIN_HELP)]
    Explain(ExplainArgs),
}

const EXPLAIN_SHORT_HELP: &str = concat!(
    "Output: JSON by default: one compact line on stdout (--help says more).\n\n",
    "Exit codes: 0 decision printed (whatever the verdict); 2 bad arguments;\n",
    "74 stdout not writable; 64 invalid --approve or --env; 65 invalid policy\n",
    "file; 66 no readable policy file."
);

const EXPLAIN_HELP: &str = "\
Output: JSON by default: one object as one compact line on stdout; messages
go to stderr.

Prints one JSON object (schema \"custodian.policy.explain/1\", see
docs/contracts/process-run.md) with the match target, the decision, its reason
and, on require_approval, the exact override to pass to `--approve`, also as
a TOML literal string (suggested_override_toml) to paste into
policy.overrides: paste it as printed, in single quotes. In a TOML basic
string (double quotes) `\\u002a` decodes to `*` and the override turns into
a broad wildcard pattern (the loader warns about such patterns).

--env values are literals and are printed as part of the target: the target is
the process identity an approval binds to. --env-secret takes a secret
REFERENCE, which is printed as a reference; nothing is ever resolved.

Exit codes: 0 decision printed (whatever the verdict); 2 bad arguments;
74 the decision could not be written to stdout (closed pipe, full disk);
64 invalid --approve pattern or --env entry; 65 invalid policy file (does not
validate, not UTF-8 (with its line and column), or over 1 MiB); 66 no readable
policy file (missing, unreadable, or not a regular file: a FIFO or a device is
refused without reading).";

/// Provenance as a command-line value.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum ProvenanceArg {
    /// A trusted operator.
    Trusted,
    /// Untrusted driving provenance (the default: fail closed).
    Untrusted,
}

impl From<ProvenanceArg> for Provenance {
    fn from(p: ProvenanceArg) -> Self {
        match p {
            ProvenanceArg::Trusted => Provenance::Trusted,
            ProvenanceArg::Untrusted => Provenance::Untrusted,
        }
    }
}

/// State mode as a command-line value.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum StateModeArg {
    /// State on the local host.
    Local,
    /// Shared state (process.run fails closed).
    Shared,
}

/// Arguments of `custodian policy explain`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExplainArgs {
    /// The policy file (TOML).
    #[arg(long, value_name = "FILE")]
    policy: PathBuf,
    /// Who drives the call.
    #[arg(long, value_enum, default_value = "untrusted")]
    provenance: ProvenanceArg,
    /// Where the runtime keeps its state.
    #[arg(long = "state-mode", value_enum, default_value = "local")]
    state_mode: StateModeArg,
    /// The tool to decide for.
    #[arg(long, default_value = "process.run", value_name = "ID")]
    tool: String,
    /// Working directory relative to the workspace root.
    #[arg(long, value_name = "REL")]
    cwd: Option<String>,
    /// A literal environment overlay entry (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// An overlay entry whose value is a secret reference (repeatable).
    #[arg(long = "env-secret", value_name = "KEY=REF")]
    env_secret: Vec<String>,
    /// An approval held for this call: an exact override or a `*` pattern
    /// (repeatable).
    #[arg(long = "approve", value_name = "TARGET")]
    approve: Vec<String>,
    #[command(flatten)]
    confine: super::run::ConfineArgs,
    /// The executable and its arguments, after `--`.
    #[arg(last = true, value_name = "EXE ARGS")]
    command: Vec<String>,
}

/// Splits each `KEY=VALUE` at its first `=`.
///
/// Parsed here rather than by clap so that a malformed entry is never echoed:
/// it may be a secret pasted by mistake.
pub(crate) fn parse_pairs(
    flag: &str,
    values: &[String],
) -> Result<Vec<(String, String)>, ExitCode> {
    values
        .iter()
        .enumerate()
        .map(|(i, s)| match s.split_once('=') {
            Some((k, v)) => Ok((k.to_owned(), v.to_owned())),
            None => {
                eprintln!("custodian: {flag} #{}: expected KEY=VALUE", i + 1);
                Err(ExitCode::from(EXIT_USAGE))
            }
        })
        .collect()
}

/// The largest policy file read, in bytes.
pub(crate) const MAX_POLICY_BYTES: u64 = 1024 * 1024;

/// Why a policy file could not be loaded. Each variant maps to one exit
/// code ([`PolicyFileError::exit_code`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum PolicyFileError {
    /// `open` failed (missing, permission, ...).
    #[error("cannot open: {0}")]
    Open(std::io::Error),
    /// The path opened something other than a regular file (a FIFO, a
    /// device, a directory, a socket): it is refused without reading, so a
    /// FIFO cannot block and `/dev/zero` cannot grow without bound.
    #[error("not a regular file (a {kind})")]
    NotRegular {
        /// What it is.
        kind: &'static str,
    },
    /// `read` failed.
    #[error("cannot read: {0}")]
    Read(std::io::Error),
    /// The file is larger than [`MAX_POLICY_BYTES`].
    #[error("larger than {MAX_POLICY_BYTES} bytes")]
    TooLarge,
    /// The file is not UTF-8; the location is the first invalid byte.
    #[error("not valid UTF-8 at line {line}, column {column} (byte offset {offset})")]
    NotUtf8 {
        /// Byte offset of the first invalid byte.
        offset: usize,
        /// Its 1-based line.
        line: usize,
        /// Its 1-based column, in bytes.
        column: usize,
    },
    /// The text does not validate.
    #[error(transparent)]
    Invalid(#[from] custodian::policy::PolicyConfigError),
}

impl PolicyFileError {
    /// 66 (`EX_NOINPUT`) when there is no readable regular file, 65
    /// (`EX_DATAERR`) when its contents are refused.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            PolicyFileError::Open(_)
            | PolicyFileError::NotRegular { .. }
            | PolicyFileError::Read(_) => EXIT_NO_POLICY,
            _ => EXIT_BAD_POLICY,
        }
    }
}

fn file_kind(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_socket() {
        "socket"
    } else {
        "non-regular file"
    }
}

/// Opens `path` with `O_NONBLOCK` (so opening a FIFO never waits for a
/// writer), checks on the opened descriptor (`fstat`, not the path, which
/// could be swapped) that it is a regular file, reads at most
/// [`MAX_POLICY_BYTES`], and validates the text.
///
/// # Errors
///
/// [`PolicyFileError`].
pub(crate) fn read_policy(path: &Path) -> Result<PolicyConfig, PolicyFileError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(PolicyFileError::Open)?;
    let meta = file.metadata().map_err(PolicyFileError::Read)?;
    if !meta.file_type().is_file() {
        return Err(PolicyFileError::NotRegular {
            kind: file_kind(meta.file_type()),
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_POLICY_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(PolicyFileError::Read)?;
    if bytes.len() as u64 > MAX_POLICY_BYTES {
        return Err(PolicyFileError::TooLarge);
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let before = &e.as_bytes()[..offset];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let column = offset
            - before
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1)
            + 1;
        PolicyFileError::NotUtf8 {
            offset,
            line,
            column,
        }
    })?;
    Ok(PolicyConfig::from_toml_str(&text)?)
}

/// Reads and validates a policy file, reporting failures on stderr.
pub(crate) fn load_policy(path: &Path) -> Result<PolicyConfig, ExitCode> {
    let config = read_policy(path).map_err(|e| {
        eprintln!(
            "custodian: policy file {}: {}",
            path.display(),
            super::chain(&e)
        );
        ExitCode::from(e.exit_code())
    })?;
    for warning in config.warnings() {
        eprintln!(
            "custodian: policy file {}: warning: {warning}",
            path.display()
        );
    }
    Ok(config)
}

/// Parses `--approve` values.
pub(crate) fn parse_approvals(values: &[String]) -> Result<Vec<Pattern>, ExitCode> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            Pattern::parse(v).map_err(|e| {
                eprintln!("custodian: --approve #{}: {e}", i + 1);
                ExitCode::from(EXIT_USAGE)
            })
        })
        .collect()
}

/// Builds policy's view of an invocation from command-line parts.
pub(crate) fn process_target(
    command: &[String],
    cwd: Option<&str>,
    env: &[(String, String)],
    env_secret: &[(String, String)],
    confinement: &custodian::confine::Confinement,
) -> Option<ProcessTarget> {
    let (executable, argv) = command.split_first()?;
    let literals = env
        .iter()
        .map(|(k, v)| (k.clone(), TargetEnvValue::Literal(v.clone())));
    let secrets = env_secret
        .iter()
        .map(|(k, r)| (k.clone(), TargetEnvValue::SecretRef(r.clone())));
    Some(ProcessTarget {
        executable: executable.clone(),
        argv: argv.to_vec(),
        cwd: cwd.map(str::to_owned),
        env_overlay: literals.chain(secrets).collect(),
        confine: Some(custodian::process::governed::confine_target(confinement)),
    })
}

/// The `custodian.policy.explain/1` JSON object.
pub(crate) fn explain_json(tool: &str, context: Context, decision: &Decision) -> serde_json::Value {
    let mut reason = serde_json::to_value(&decision.reason).unwrap_or_default();
    if let Some(obj) = reason.as_object_mut() {
        obj.insert("message".into(), decision.reason.to_string().into());
    }
    serde_json::json!({
        "schema": "custodian.policy.explain/1",
        "tool": tool,
        "context": context,
        "target": decision.target.as_ref().map(|t| t.as_str()),
        "target_truncated": decision.target.as_ref().is_some_and(|t| t.is_truncated()),
        "decision": decision.verdict,
        "reason": reason,
        "suggested_override": decision.suggested_override.as_ref().map(|o| o.as_str()),
        "suggested_override_toml": decision
            .suggested_override
            .as_ref()
            .and_then(custodian::policy::Pattern::toml_literal),
        "audit": decision.audit,
    })
}

pub(crate) fn main(cmd: Command) -> ExitCode {
    match cmd {
        Command::Explain(args) => explain(args),
    }
}

fn explain(args: ExplainArgs) -> ExitCode {
    let config = match load_policy(&args.policy) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let approvals = match parse_approvals(&args.approve) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let (env, env_secret) = match (
        parse_pairs("--env", &args.env),
        parse_pairs("--env-secret", &args.env_secret),
    ) {
        (Ok(e), Ok(s)) => (e, s),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    // As `run` would: a confinement it refuses is a usage error here too.
    let confinement = args.confine.confinement();
    if let Err(e) = confinement.validate() {
        eprintln!("custodian: {e}");
        return ExitCode::from(EXIT_USAGE);
    }
    let process = process_target(
        &args.command,
        args.cwd.as_deref(),
        &env,
        &env_secret,
        &confinement,
    );
    let context = Context {
        provenance: args.provenance.into(),
        state_mode: match args.state_mode {
            StateModeArg::Local => StateMode::Local,
            StateModeArg::Shared => StateMode::Shared,
        },
    };
    let decision = decide(
        &Registry::new(),
        &config,
        &Query {
            tool: &args.tool,
            process: process.as_ref(),
            context,
            approvals: &approvals,
        },
    );
    let json = explain_json(&args.tool, context, &decision);
    // A closed or full stdout is reported (74), never a panic.
    if super::run::emit(&json.to_string()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(super::run::EXIT_OUTPUT_FAILED)
    }
}

/// Exit code of `custodian run --policy` when policy requires an approval
/// that was not presented (`EX_TEMPFAIL`: retry with `--approve`).
pub(crate) const EXIT_APPROVAL_REQUIRED: u8 = 75;
/// Exit code of `custodian run --policy` when policy denies the call
/// (`EX_NOPERM`).
pub(crate) const EXIT_DENIED: u8 = 77;

/// Policy flags of `custodian run`.
#[derive(Debug, clap::Args)]
pub(crate) struct RunPolicyArgs {
    /// Decide with this policy file before launching; nothing is launched
    /// on deny (exit 77) or require_approval (exit 75), and stdout then holds
    /// the `custodian.policy.explain/1` object with the suggested override.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Who drives the call (with --policy).
    #[arg(long, value_enum, default_value = "untrusted", requires = "policy")]
    provenance: ProvenanceArg,
    /// An approval held for this call: an exact override printed by a
    /// previous refusal, or a `*` pattern (with --policy; repeatable).
    #[arg(long = "approve", value_name = "TARGET", requires = "policy")]
    approve: Vec<String>,
}

/// A loaded policy for `custodian run`.
pub(crate) struct RunGate {
    config: PolicyConfig,
    provenance: Provenance,
    approvals: Vec<Pattern>,
}

impl RunGate {
    /// Loads the gate when `--policy` is given.
    pub(crate) fn from_args(args: &RunPolicyArgs) -> Result<Option<RunGate>, ExitCode> {
        let Some(path) = &args.policy else {
            return Ok(None);
        };
        Ok(Some(RunGate {
            config: load_policy(path)?,
            provenance: args.provenance.into(),
            approvals: parse_approvals(&args.approve)?,
        }))
    }

    /// Decides on `invocation`. A refusal is printed and returned as the
    /// exit code, with the refusal as the request's completion lists it.
    pub(crate) fn admit(
        &self,
        invocation: &custodian::process::Invocation,
        out: super::run::Out,
    ) -> Result<(), (ExitCode, Option<Box<custodian::request::DeniedLaunch>>)> {
        use custodian::process::governed::{Gate, Governed, decide_governed};
        use custodian::request::{CODE_APPROVAL_REQUIRED, CODE_POLICY_DENIED, DeniedLaunch};
        let registry = Registry::new();
        let context = Context {
            provenance: self.provenance,
            state_mode: StateMode::Local,
        };
        let gate = Gate {
            registry: &registry,
            config: &self.config,
            context,
            approvals: &self.approvals,
        };
        let (decision, exit, what, code) = match decide_governed(invocation, &gate) {
            Ok(_) => return Ok(()),
            Err(Governed::ApprovalRequired(a)) => (
                a.decision,
                EXIT_APPROVAL_REQUIRED,
                "approval required",
                CODE_APPROVAL_REQUIRED,
            ),
            Err(Governed::Denied(d)) => (*d, EXIT_DENIED, "denied", CODE_POLICY_DENIED),
            // No other refusal exists; whatever it would be, nothing runs.
            Err(_) => return Err((ExitCode::from(EXIT_DENIED), None)),
        };
        let denied = DeniedLaunch::new(code, &decision.reason);
        eprintln!(
            "custodian run: not launched, policy: {what}: {}",
            decision.reason
        );
        if let Some(line) = decision
            .suggested_override
            .as_ref()
            .and_then(Pattern::toml_literal)
        {
            eprintln!(
                "custodian run: to approve this invocation for good, add this TOML literal \
                 string to policy.overrides: {line}"
            );
        }
        let json = explain_json(custodian::policy::PROCESS_RUN, context, &decision);
        let _ = out.json(&json.to_string());
        Err((ExitCode::from(exit), Some(Box::new(denied))))
    }
}
