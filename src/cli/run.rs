//! `custodian run`: one governed process, its evidence on stdout.
//!
//! Raw arguments → a validated [`Invocation`] and [`LaunchOptions`] → the
//! policy's decision, if one is given → one launch as the one request of a
//! one-request [`Runtime`] that opens no job namespace
//! ([`RuntimeConfig::without_job_namespaces`]: the directory it runs in is
//! left as it was found): the process settling is the executor's success,
//! a stop signal the caller's cancel, and the request machine decides the
//! stop (`CancelProcesses`, with the shutdown grace) and completes the
//! request before the evidence is written. The library never sees a flag.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use custodian::confine::{Confinement, Enforcement, FsMode, InvalidConfinement, Network};
use custodian::contain::Containment;
use custodian::process::evidence::{CancelCause, ProcessStatus, StopSignal};
use custodian::process::invocation::{EnvValue, OutputBudget, Tunables};
use custodian::process::{
    Evidence, Invocation, InvocationSpec, LaunchOptions, NetworkProxy, ProcessError, ProxyConfig,
    Running,
};

use custodian::error::SafeCode;
use custodian::request::{RequestId, RequestLimits};
use custodian::runtime::{Executor, Request, Runtime, RuntimeConfig, RuntimeError};

use super::stop::{self, StopSignals};
use super::units::{parse_duration, parse_size};

/// The run completed (whatever the child did; see `status` in the evidence).
/// A run cancelled by a stop signal exits `128 + N` instead
/// ([`super::stop::exit_code`]).
pub(crate) const EXIT_COMPLETED: u8 = 0;
/// The invocation was invalid; nothing was launched (`EX_USAGE`).
pub(crate) const EXIT_INVALID: u8 = 64;
/// The process could not be launched: executable not found or not
/// executable, bad working directory, spawn failure (`EX_OSERR`).
pub(crate) const EXIT_LAUNCH_FAILED: u8 = 71;
/// custodian itself failed (`EX_SOFTWARE`).
pub(crate) const EXIT_INTERNAL: u8 = 70;
/// The run completed (the process settled and was reaped) but its evidence
/// could not be written to stdout, e.g. a closed pipe (`EX_IOERR`).
pub(crate) const EXIT_OUTPUT_FAILED: u8 = 74;

const AFTER_HELP: &str = "\
Output: JSON by default: one evidence object (docs/schemas/process-evidence.v1.json)
as one compact line on stdout (inside the <data source=\"tool\"> boundary with
--for-model). Messages and logs go to stderr.

Exit codes:
  0   the run completed: the child exited, was signalled or timed out;
      read `status`, `exit_code` and `signal` in the evidence
  2   the command line could not be parsed (including a bad duration or
      size); nothing was launched
  64  invalid invocation (an --env entry without `=`, a cwd escaping the
      workspace, a zero timeout, a timeout over 30 days, a grace, drain or
      hard margin over 1 hour, a budget over 64 MiB, ...); nothing was
      launched
  70  internal error (also after a launch: the evidence on stdout then
      says `internal_error`; the process group was killed and reaped)
  71  launch failure: executable not found or not executable, working
      directory missing, spawn failed, or an explicit --containment
      (cgroup, subreaper) unavailable here (code containment_unavailable),
      or a --confine the kernel cannot enforce (confinement_unsupported,
      unless --confine-best-effort) or that needs the cgroup tier
      (confinement_spawner_unavailable); nothing is running
  74  the run completed and its process was reaped, but the evidence could
      not be written to stdout (e.g. stdout is a closed pipe)
  129/130/143  custodian received SIGHUP/SIGINT/SIGTERM while the process
      ran and cancelled it: SIGTERM to its group, --shutdown-grace, SIGKILL
      of the whole tree (cgroup.kill in the cgroup tier); it was reaped, its
      cgroup and private TMPDIR removed, and the evidence (status
      `cancelled`, `cancel_cause` naming the signal) is on stdout. A further
      signal changes nothing: the cleanup and the evidence still come. A
      process that settled on its own before the cancel reached it keeps
      its own status and exit code 0
  65/66  --policy file invalid (not UTF-8, over 1 MiB, does not validate)
      / not readable (missing, or not a regular file); nothing was launched
  75  --policy requires approval; stdout holds the decision with its
      suggested_override, to pass back as --approve; nothing was launched
  77  --policy denies the call; stdout holds the decision; nothing was launched

On exit codes 64 and 71 stdout holds {\"error\":{\"kind\",\"code\",\"message\"}}.

Example: a timeout, and a pipe held open by a background child
  custodian run --timeout 1s --grace 500ms -- sleep 5
  custodian run -- sh -c 'echo started; sleep 30 &'

Example: confined to writing the workspace, no network, ~/.ssh unreadable
  custodian run --confine workspace-write --deny-read \"$HOME/.ssh\" -- make test";

/// The confinement a `custodian run` command line asks for, read from the
/// raw arguments before clap parses them, so that the namespaces' one-time
/// work ([`custodian::process::prepare_isolation`]: the spare network
/// namespace above all, ≈ 0.5 ms of the kernel's) starts while the parse
/// and the rest of the start-up run instead of after them. `None` for
/// anything else, or when a flag's value does not parse.
///
/// Only a head start: [`main`] prepares again from the parsed flags (a
/// repeated part is not started twice), so a command line read wrongly
/// here costs at most one unused namespace, never a different run.
pub(crate) fn early_confinement<I>(args: I) -> Option<Confinement>
where
    I: IntoIterator<Item = std::ffi::OsString>,
{
    let mut args = args.into_iter().skip(1);
    if args.next()? != "run" {
        return None;
    }
    let (mut mode, mut network, mut allow, mut best_effort) = (None, None, false, false);
    while let Some(arg) = args.next() {
        let arg = arg.into_string().ok()?;
        if arg == "--" {
            break;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
            None => (arg, None),
        };
        let mut value = || inline.clone().or_else(|| args.next()?.into_string().ok());
        match flag.as_str() {
            "--confine" => mode = Some(fs_mode(&value()?).ok()?),
            "--network" => network = Some(self::network(&value()?).ok()?.0),
            "--allow-host" => allow = true,
            "--confine-best-effort" => best_effort = true,
            _ => {}
        }
    }
    let mut c = Confinement::for_mode(mode?);
    match network {
        Some(n) => c = c.with_network(n),
        None if allow => c = c.with_network(Network::Allow),
        None => {}
    }
    if best_effort {
        c = c.with_enforcement(Enforcement::BestEffort);
    }
    Some(c)
}

/// Arguments of `custodian run`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct Args {
    /// Time before SIGTERM is sent to the process group.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    timeout: Duration,
    /// Time between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    grace: Duration,
    /// How long to wait, after the root exited, for descendants to close
    /// stdout/stderr.
    #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = parse_duration)]
    drain: Duration,
    /// Extra time after the grace before the streams are closed regardless.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    hard_margin: Duration,
    /// On SIGTERM, SIGINT or SIGHUP to custodian: time between the SIGTERM
    /// sent to the process group and the SIGKILL of the whole tree (at most
    /// --grace). Below the 2 s after which supervisors commonly send
    /// SIGKILL, so the cleanup finishes first.
    #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = parse_duration)]
    shutdown_grace: Duration,
    /// Bytes of stdout kept (head + tail).
    #[arg(long, value_name = "SIZE", default_value = "64KiB", value_parser = size)]
    stdout_budget: usize,
    /// Bytes of stderr kept (head + tail).
    #[arg(long, value_name = "SIZE", default_value = "64KiB", value_parser = size)]
    stderr_budget: usize,
    /// The workspace root (default: the current directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Working directory relative to the workspace.
    #[arg(long, value_name = "REL")]
    cwd: Option<String>,
    /// Add KEY=VALUE to the child's minimal baseline environment
    /// (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// How the process and its descendants are contained: `auto` (a cgroup
    /// v2 where one can be created, else the pinned process group; the
    /// evidence says which and why), `cgroup` (or fail with exit code 71),
    /// `group` (the process group only), `subreaper` (the pinned group,
    /// with this process adopting descendants that escape it).
    #[arg(long, value_name = "TIER", default_value = "auto", value_parser = containment)]
    containment: Containment,
    /// Alias of `--containment subreaper`.
    #[arg(long, conflicts_with = "containment")]
    subreaper: bool,
    #[command(flatten)]
    confine: ConfineArgs,
    #[command(flatten)]
    proxy: ProxyArgs,
    /// Print everything on stdout (the evidence, a policy refusal, an error)
    /// inside the model-facing `<data source="tool">` boundary instead of
    /// bare JSON; `<`, `>` and their look-alikes are escaped inside, so
    /// nothing a tool supplies can close it.
    #[arg(long)]
    for_model: bool,
    #[command(flatten)]
    policy: super::policy::RunPolicyArgs,
    /// The executable and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "EXECUTABLE [ARGS]")]
    command: Vec<String>,
}

/// Why the command line does not make an invocation. Never holds an
/// environment value.
#[derive(Debug, thiserror::Error)]
enum ArgsError {
    #[error("--env entry {index} is not KEY=VALUE")]
    Env { index: usize },
    #[error("no executable after `--`")]
    NoCommand,
    #[error(transparent)]
    Invalid(#[from] custodian::process::invocation::InvalidInvocation),
    #[error("--workspace: {0}")]
    Workspace(std::io::Error),
    #[error("the network proxy could not be started: {0}")]
    Proxy(std::io::Error),
}

impl ArgsError {
    fn code(&self) -> &'static str {
        match self {
            ArgsError::Env { .. } => "bad_env",
            ArgsError::NoCommand => "no_command",
            ArgsError::Invalid(_) => "invalid_invocation",
            ArgsError::Workspace(_) => "bad_workspace",
            ArgsError::Proxy(_) => "proxy_unavailable",
        }
    }
}

fn containment(v: &str) -> Result<Containment, String> {
    v.parse()
        .map_err(|e: custodian::contain::UnknownContainment| e.to_string())
}

fn fs_mode(v: &str) -> Result<FsMode, String> {
    v.parse().map_err(|e: InvalidConfinement| e.to_string())
}

/// `on`, `off`, `allow`, or `allow:PATTERN[,PATTERN…]` (the hosts inline,
/// as `--allow-host` gives them).
fn network(v: &str) -> Result<(Network, Vec<String>), String> {
    if let Some(hosts) = v.strip_prefix("allow:") {
        let hosts: Vec<String> = hosts.split(',').map(str::to_owned).collect();
        return Ok((Network::Allow, hosts));
    }
    let mode = v.parse().map_err(|e: InvalidConfinement| e.to_string())?;
    Ok((mode, Vec::new()))
}

/// The confinement flags of `run` (and of `policy explain`, which must
/// predict `run`).
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ConfineArgs {
    /// Confine what the process may touch while it runs: `none` (default),
    /// `read-only` (read anything readable, write only a private /tmp,
    /// /dev/shm and /dev/null), `workspace-write` (also write beneath the
    /// workspace). A confined process is isolated: new user, pid, mount,
    /// ipc, uts (and, network off, net) namespaces, no capabilities, the
    /// host read-only, custodian's .custodian/ masked, .git/hooks and
    /// .git/config read-only. Both confined modes default to `--network
    /// off` and scope signals and abstract unix sockets (Landlock, seccomp,
    /// no_new_privs; the evidence's `confinement` says what was enforced).
    #[arg(long, value_name = "MODE", default_value = "none", value_parser = fs_mode)]
    pub(crate) confine: FsMode,
    /// `on`, `off`, `allow` or `allow:HOST[,HOST…]` (default: `off` when
    /// confined, else `on`; `allow` with `--allow-host` or the hosts
    /// inline, e.g. `allow:pypi.org,*.crates.io`). `off` gives the process a network
    /// namespace of its own with loopback up: servers on 127.0.0.1 work
    /// inside, nothing outside is reachable. `allow` adds custodian's
    /// filtering proxy inside (127.0.0.1:28080, named by `HTTP_PROXY`,
    /// `HTTPS_PROXY`, `ALL_PROXY` and their lower-case forms): HTTP and
    /// `CONNECT` to the `--allow-host` hosts, `403` for any other.
    #[arg(long, value_name = "on|off|allow[:HOSTS]", value_parser = network)]
    pub(crate) network: Option<(Network, Vec<String>)>,
    /// A host the process may reach through the proxy (repeatable; implies
    /// `--network allow`): `NAME` (ports 80 and 443), `*.NAME` (every name
    /// beneath NAME, not NAME itself), `NAME:PORT`, `*.NAME:PORT`.
    #[arg(long, value_name = "PATTERN")]
    pub(crate) allow_host: Vec<String>,
    /// An extra readable hierarchy, absolute (repeatable).
    #[arg(long, value_name = "PATH")]
    pub(crate) allow_read: Vec<PathBuf>,
    /// An extra readable and writable hierarchy, absolute (repeatable).
    #[arg(long, value_name = "PATH")]
    pub(crate) allow_write: Vec<PathBuf>,
    /// A hierarchy that may not be read or listed, absolute (repeatable),
    /// e.g. `$HOME/.ssh` (masked in the view, inside the workspace too).
    #[arg(long, value_name = "PATH")]
    pub(crate) deny_read: Vec<PathBuf>,
    /// A path kept read-only inside a writable tree, absolute or relative
    /// to the workspace (repeatable; `.git/hooks` and `.git/config` always
    /// are).
    #[arg(long, value_name = "PATH")]
    pub(crate) protect: Vec<PathBuf>,
    /// A path masked (empty) in the view, absolute or relative to the
    /// workspace (repeatable; `.custodian` always is).
    #[arg(long, value_name = "PATH")]
    pub(crate) hide: Vec<PathBuf>,
    /// Launch even if the kernel cannot enforce all of the confinement;
    /// the evidence lists what was not enforced (default: refuse to launch;
    /// `run` then exits 71, `mcp` answers a tool error).
    #[arg(long)]
    pub(crate) confine_best_effort: bool,
}

impl ConfineArgs {
    /// The confinement the flags ask for.
    pub(crate) fn confinement(&self) -> Confinement {
        let mut c = Confinement::for_mode(self.confine);
        let (mode, inline) = self.network.clone().unzip();
        if let Some(n) = mode {
            c = c.with_network(n);
        }
        if !self.allow_host.is_empty() && mode.is_none() {
            c = c.with_network(Network::Allow);
        }
        c.allow_hosts = inline.unwrap_or_default();
        c.allow_hosts.extend(self.allow_host.iter().cloned());
        c.allow_read.clone_from(&self.allow_read);
        c.allow_write.clone_from(&self.allow_write);
        c.deny_read.clone_from(&self.deny_read);
        c.protect.clone_from(&self.protect);
        c.hide.clone_from(&self.hide);
        if self.confine_best_effort {
            c = c.with_enforcement(Enforcement::BestEffort);
        }
        c
    }
}

/// The proxy flags of `run` and `mcp`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ProxyArgs {
    /// Have the proxy of `--network allow` resolve NAME to ADDR (an IP
    /// address) instead of asking DNS, like `curl --resolve` (repeatable).
    /// The allow-list still decides first.
    #[arg(long, value_name = "NAME=ADDR", value_parser = resolve_entry)]
    resolve: Vec<(String, std::net::IpAddr)>,
}

impl ProxyArgs {
    /// A proxy of this process's own when a flag asks for one; `None`: the
    /// process-wide one, started on first use.
    pub(crate) fn proxy(&self) -> std::io::Result<Option<NetworkProxy>> {
        if self.resolve.is_empty() {
            return Ok(None);
        }
        let config = self
            .resolve
            .iter()
            .fold(ProxyConfig::new(), |c, (name, addr)| {
                c.with_host(name, *addr)
            });
        NetworkProxy::start(config).map(Some)
    }
}

fn resolve_entry(v: &str) -> Result<(String, std::net::IpAddr), String> {
    let (name, addr) = v
        .split_once('=')
        .ok_or_else(|| "expected NAME=ADDR".to_owned())?;
    let addr = addr
        .parse()
        .map_err(|_| format!("{addr:?} is not an IP address"))?;
    if custodian::confine::hosts::normalize_host(name).is_none() {
        return Err(format!("{name:?} is not a host name"));
    }
    Ok((name.to_owned(), addr))
}

fn size(v: &str) -> Result<usize, String> {
    let bytes = parse_size(v).map_err(|e| e.to_string())?;
    usize::try_from(bytes).map_err(|_| format!("{bytes} bytes do not fit in memory here"))
}

struct Config {
    invocation: Invocation,
    options: LaunchOptions,
    subreaper: bool,
    shutdown_grace: Duration,
}

fn validate(args: Args) -> Result<Config, ArgsError> {
    let shutdown_grace = args.shutdown_grace;
    let confinement = args.confine.confinement();
    let mut command = args.command.into_iter();
    let executable = command.next().ok_or(ArgsError::NoCommand)?;
    let mut spec = InvocationSpec::new(executable)
        .with_args(command)
        .with_timeout(args.timeout)
        .with_tunables(Tunables {
            grace: args.grace,
            drain: args.drain,
            hard_margin: args.hard_margin,
        })
        .with_budget(OutputBudget {
            stdout: args.stdout_budget,
            stderr: args.stderr_budget,
        })
        .with_confinement(confinement);
    if let Some(cwd) = args.cwd {
        spec = spec.with_cwd(cwd);
    }
    for (index, entry) in args.env.into_iter().enumerate() {
        let (k, v) = entry.split_once('=').ok_or(ArgsError::Env { index })?;
        spec = spec.with_env(k, EnvValue::Literal(v.to_owned()));
    }
    let invocation = Invocation::validate(spec)?;
    let workspace = match args.workspace {
        Some(w) => w,
        None => std::env::current_dir().map_err(ArgsError::Workspace)?,
    };
    let containment = if args.subreaper {
        Containment::Subreaper
    } else {
        args.containment
    };
    // The baseline is the documented subset of this process's environment.
    let mut options = LaunchOptions::new(workspace).with_containment(containment);
    if let Some(proxy) = args.proxy.proxy().map_err(ArgsError::Proxy)? {
        options = options.with_proxy(proxy);
    }
    Ok(Config {
        invocation,
        options,
        subreaper: containment == Containment::Subreaper,
        shutdown_grace,
    })
}

/// How stdout is written: bare JSON, or every line inside the model-facing
/// `<data source="tool">` boundary (`--for-model`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Out {
    pub(crate) for_model: bool,
}

impl Out {
    /// Writes one JSON text (evidence, a refusal, an error) on stdout, inside
    /// the boundary when `--for-model` is set. Returns `false` when stdout
    /// could not be written.
    pub(crate) fn json(self, json: &str) -> bool {
        if self.for_model {
            emit(&custodian::process::evidence::render_json_for_model(json))
        } else {
            emit(json)
        }
    }
}

fn print_error(out: Out, kind: &str, code: &str, message: &str) {
    eprintln!("custodian run: {message}");
    let json = serde_json::json!({ "error": { "kind": kind, "code": code, "message": message } });
    // The exit code already says what happened; a closed stdout must not
    // turn it into a panic.
    let _ = out.json(&json.to_string());
}

/// Writes `line` and a newline to stdout and flushes. `println!` would
/// panic (exit 101) on a closed pipe; this reports the failure on stderr
/// and returns `false`.
pub(crate) fn emit(line: &str) -> bool {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("custodian run: cannot write the result to stdout: {e}");
            false
        }
    }
}

/// How a launch attempt ended.
enum Ended {
    /// The process settled; `stopped` is the stop signal that cancelled it,
    /// if one arrived while it ran.
    Settled {
        evidence: Arc<Evidence>,
        stopped: Option<StopSignal>,
    },
    /// Nothing was launched.
    NotLaunched(ProcessError),
    /// The policy refused; its decision was printed.
    Refused(ExitCode),
}

/// The added time a run's request allows beyond the process's own hard
/// deadline (the launch, the reaping, the cgroup's removal) before the
/// request machine's `Timeout` stops it.
const REQUEST_ALLOWANCE: Duration = Duration::from_secs(10);

/// Waits for `running`'s request to complete. The process settling on its
/// own is the executor's success; the first stop signal is the caller's
/// cancel, on which the request machine stops the process (`SIGTERM`, at
/// most the shutdown grace, `SIGKILL`). A later signal is reported and
/// changes nothing, so the settlement (the reaping, the cgroup's removal)
/// and the evidence always come.
async fn settle(
    running: &Running,
    request: &Request,
    executor: &Executor,
    stops: &mut StopSignals,
    shutdown_grace: Duration,
) -> (Arc<Evidence>, Option<StopSignal>) {
    let first = tokio::select! {
        biased;
        _ = running.settled() => {
            executor.succeed();
            None
        }
        signal = stops.recv() => Some(signal),
    };
    if let Some(signal) = first {
        eprintln!(
            "custodian run: {}: stopping the process (SIGTERM, {} grace, SIGKILL)",
            signal.name(),
            humantime::format_duration(shutdown_grace)
        );
        request.cancel();
    }
    let completion = loop {
        tokio::select! {
            biased;
            completion = request.finished() => break completion,
            again = stops.recv() => eprintln!(
                "custodian run: {}: already stopping; the cleanup and the evidence still come",
                again.name()
            ),
        }
    };
    tracing::debug!(
        request_id = %completion.request_id,
        status = ?completion.result.status(),
        "run request completed"
    );
    // Settled by now, unless the machine's stop was not confirmed in time:
    // the launcher's own deadline still ends it.
    (running.settled().await, first)
}

/// Opens the run's one-request runtime (`config` opens no job namespace)
/// and starts its request.
fn start_request(config: RuntimeConfig) -> Result<(Request, Executor), RuntimeError> {
    let runtime = Runtime::open(config)?;
    let id = RequestId::new(&format!("run-{}", std::process::id())).expect("a valid request id");
    let request = runtime.start(id)?;
    let executor = request.executor();
    Ok((request, executor))
}

/// The request machine's code for a launch that did not start.
fn not_launched_code(code: &str) -> SafeCode {
    SafeCode::parse(code).unwrap_or(SafeCode::new("launch_failed"))
}

pub(crate) fn main(args: Args) -> ExitCode {
    // The namespaces' one-time work runs beside the rest of the start-up.
    custodian::process::prepare_isolation(
        &args.confine.confinement(),
        custodian::process::ExpectedLaunches::One,
    );
    let out = Out {
        for_model: args.for_model,
    };
    let gate = match super::policy::RunGate::from_args(&args.policy) {
        Ok(gate) => gate,
        Err(code) => return code,
    };
    let Config {
        invocation,
        options,
        subreaper,
        shutdown_grace,
    } = match validate(args) {
        Ok(v) => v,
        Err(e) => {
            print_error(out, "invalid_invocation", e.code(), &super::chain(&e));
            return ExitCode::from(EXIT_INVALID);
        }
    };
    if subreaper {
        if let Err(e) = custodian::process::enable_subreaper() {
            print_error(out, "launch_failed", e.code(), &super::chain(&e));
            return ExitCode::from(EXIT_LAUNCH_FAILED);
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            print_error(out, "internal", "runtime", &super::chain(&e));
            return ExitCode::from(EXIT_INTERNAL);
        }
    };
    let ended = runtime.block_on(async {
        // Caught before the launch: from here on a stop signal cancels the
        // run instead of killing custodian with the process left running.
        let mut stops = match StopSignals::install() {
            Ok(stops) => stops,
            Err(e) => {
                print_error(out, "internal", "signal_handlers", &super::chain(&e));
                return Ended::Refused(ExitCode::from(EXIT_INTERNAL));
            }
        };
        // The run is the one request of a runtime that opens no job
        // namespace: what ends it (the process settling, a stop signal, its
        // deadline) and when the process is stopped are the request
        // machine's decisions.
        let limits = RequestLimits::new()
            .with_request_timeout(invocation.hard_deadline().saturating_add(REQUEST_ALLOWANCE))
            .with_cleanup_grace(
                RequestLimits::new()
                    .cleanup_grace
                    .saturating_add(shutdown_grace),
            );
        let mut config = RuntimeConfig::new(options.workspace.clone())
            .without_job_namespaces()
            .with_containment(options.containment)
            .with_baseline(options.baseline.clone())
            .with_stop_grace(shutdown_grace)
            .with_limits(limits);
        if let Some(proxy) = options.proxy.clone() {
            config = config.with_proxy(proxy);
        }
        let (request, executor) = match start_request(config) {
            Ok(started) => started,
            Err(e) => {
                print_error(out, "internal", "runtime", &super::chain(&e));
                return Ended::Refused(ExitCode::from(EXIT_INTERNAL));
            }
        };
        if let Some(gate) = &gate {
            if let Err((code, denied)) = gate.admit(&invocation, out) {
                if let Some(denied) = denied {
                    executor.record_denied(*denied);
                }
                executor.fail(SafeCode::new("policy_refused"));
                request.finished().await;
                return Ended::Refused(code);
            }
        }
        match executor.launch(invocation).await {
            Ok(running) => {
                let (evidence, stopped) =
                    settle(&running, &request, &executor, &mut stops, shutdown_grace).await;
                Ended::Settled { evidence, stopped }
            }
            Err(RuntimeError::Process(e)) => {
                executor.fail(not_launched_code(e.code()));
                request.finished().await;
                Ended::NotLaunched(e)
            }
            Err(e) => {
                // Only the request's own deadline can end it before the
                // launch, long after the launch was tried; the launch takes
                // no other path to a refusal here (no job, no policy of the
                // runtime's own, literal environment values).
                executor.fail(SafeCode::new("launch_failed"));
                request.finished().await;
                print_error(out, "internal", "request_ended", &super::chain(&e));
                Ended::Refused(ExitCode::from(EXIT_INTERNAL))
            }
        }
    });
    match ended {
        Ended::Settled { evidence, stopped } => {
            let evidence = match stopped {
                Some(signal) => Arc::new(
                    Evidence::clone(&evidence).with_cancel_cause(CancelCause::signal(signal)),
                ),
                None => evidence,
            };
            let internal = evidence.status == ProcessStatus::InternalError;
            // Stopped by the signal, not settled on its own just before.
            let stopped = stopped.filter(|_| evidence.status == ProcessStatus::Cancelled);
            match (out.json(&evidence.to_json()), internal, stopped) {
                (false, _, _) => ExitCode::from(EXIT_OUTPUT_FAILED),
                // custodian failed after the launch (the group was killed,
                // the evidence says `internal_error`).
                (true, true, _) => ExitCode::from(EXIT_INTERNAL),
                (true, false, Some(signal)) => ExitCode::from(stop::exit_code(signal)),
                (true, false, None) => ExitCode::from(EXIT_COMPLETED),
            }
        }
        Ended::Refused(code) => code,
        Ended::NotLaunched(e) => {
            let (kind, exit) = match e {
                ProcessError::NoRuntime => ("internal", EXIT_INTERNAL),
                ProcessError::Env(_) => ("invalid_invocation", EXIT_INVALID),
                _ => ("launch_failed", EXIT_LAUNCH_FAILED),
            };
            print_error(out, kind, e.code(), &super::chain(&e));
            ExitCode::from(exit)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    fn args(line: &str) -> Vec<std::ffi::OsString> {
        line.split(' ').map(Into::into).collect()
    }

    /// What clap makes of `line`, for the parts the early read gives.
    fn parsed(line: &str) -> (FsMode, Network, Enforcement) {
        let cli = super::super::Cli::try_parse_from(args(line)).unwrap();
        let super::super::Command::Run(a) = cli.command else {
            panic!("not a run: {line}");
        };
        let c = a.confine.confinement();
        (c.fs, c.network, c.enforcement)
    }

    #[test]
    fn the_early_read_agrees_with_the_parse() {
        for line in [
            "custodian run --confine workspace-write -- /bin/true",
            "custodian run --confine=read-only --network on -- /bin/true",
            "custodian run --timeout 5s --confine read-only --network=off -- x",
            "custodian run --confine read-only --network allow:pypi.org -- x",
            "custodian run --confine workspace-write --allow-host a.test -- x",
            "custodian run --confine workspace-write --confine-best-effort -- x",
            "custodian run --confine workspace-write -- sh -c --network on",
            "custodian run --confine none -- x",
        ] {
            let early = early_confinement(args(line)).unwrap_or_else(|| panic!("{line}"));
            assert_eq!(
                (early.fs, early.network, early.enforcement),
                parsed(line),
                "{line}"
            );
        }
    }

    #[test]
    fn anything_else_is_not_read_early() {
        for line in [
            "custodian run -- /bin/true",
            "custodian run -- --confine workspace-write",
            "custodian run --confine sideways -- x",
            "custodian run --confine workspace-write --network sideways -- x",
            "custodian policy explain --confine workspace-write -- x",
            "custodian",
        ] {
            assert!(early_confinement(args(line)).is_none(), "{line}");
        }
    }
}
