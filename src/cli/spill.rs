//! `custodian spill`: the spill store and its retention sweep.
//!
//! Exit codes (each subcommand's `--help` lists its own): 0 success; 1 the
//! sweep finished with warnings; 2 usage; 65 malformed locator, session or
//! prefix; 66 no such spill, root or input file; 74 I/O error; 77 refused
//! (untrusted, symlink, foreign root); 78 invalid configuration; 128 + N a
//! sweep stopped early by signal N (`SIGTERM`, `SIGINT`, `SIGHUP`).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use custodian::process::evidence::StopSignal;

use custodian::spill::{
    Discovery, Locator, ServiceOptions, SpillConfig, SpillConfigError, SpillService, SpillStore,
    StoreError, SweepPlan, SweepReport, TracingSink, discover_default_roots,
    sweep_spill_roots_until, validate_prefix,
};

use super::stop::{self, StopSignals};

const EXIT_WARNINGS: u8 = 1;
const EXIT_DATAERR: u8 = 65;
const EXIT_NOINPUT: u8 = 66;
const EXIT_IOERR: u8 = 74;
const EXIT_NOPERM: u8 = 77;
const EXIT_CONFIG: u8 = 78;

const SWEEP_HELP: &str = "\
Output: a text summary by default; with --json, one compact JSON line
(schema custodian.spill.sweep_report/1). Messages and logs go to stderr.

Exit codes:
  0   the sweep finished without warnings (or cleanup is disabled)
  1   the sweep finished with warnings (listed in the report)
  2   the command line could not be parsed
  65  invalid --prefix
  74  I/O error (the store or the runtime could not be set up)
  77  a root refused (not owned by this user, a symlink, a foreign root)
  78  invalid configuration (--config unreadable or not valid)
  129/130/143  SIGHUP/SIGINT/SIGTERM arrived mid-sweep: the sweep ended at
      its next safe point (between the entries of a root, every 1024 entries
      of a session's listing, after a session's removals; never with a file
      half removed: what was moved out is destroyed and the quarantine
      removed), and its report (`cancelled`: true) is printed. What it did
      not reach is left for the next sweep. A further signal changes nothing";

const WRITE_HELP: &str = "\
Output: the locator (cspill:...) as one text line on stdout; not JSON.

Exit codes:
  0   written; the locator is on stdout
  2   the command line could not be parsed
  65  invalid --session name or --prefix
  66  the input file does not exist
  74  I/O error (reading the input, writing the store)
  77  the root refused (not owned by this user, a symlink, a foreign root)
  78  invalid configuration (--config unreadable or not valid)";

const READ_HELP: &str = "\
Output: the spilled bytes, unchanged, on stdout; not JSON.

Exit codes:
  0   the content is on stdout
  2   the command line could not be parsed
  65  not a spill locator, or an invalid --prefix
  66  no such spill, or no default root matches the locator (pass --root)
  74  I/O error (reading the store, writing stdout)
  77  the root or the spill refused (a symlink, a special file, another
      mount, a foreign root)
  78  invalid configuration (--config unreadable or not valid)";

/// Subcommands of `custodian spill`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Run one retention sweep and print its report.
    #[command(after_help = SWEEP_HELP)]
    Sweep(SweepArgs),
    /// Write a spilled result and print its locator.
    #[command(after_help = WRITE_HELP)]
    Write(WriteArgs),
    /// Print the content behind a locator.
    #[command(after_help = READ_HELP)]
    Read(ReadArgs),
}

/// Where the store lives (shared by every subcommand).
#[derive(Debug, clap::Args)]
pub(crate) struct Common {
    /// TOML config file (`root`, `cleanup_period_days`, ...).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The temp dir holding default roots (default: the OS temp dir).
    #[arg(long, value_name = "DIR")]
    temp_dir: Option<PathBuf>,
    /// The default-root name prefix (default `custodian-spill-`).
    #[arg(long, value_name = "PREFIX")]
    prefix: Option<String>,
}

/// `custodian spill sweep`.
#[derive(Debug, clap::Args)]
pub(crate) struct SweepArgs {
    /// A root to sweep (repeatable); default: the config's `root`.
    #[arg(long = "root", value_name = "DIR")]
    roots: Vec<PathBuf>,
    /// Retention in whole days (0 disables); overrides the config.
    #[arg(long, value_name = "N")]
    period_days: Option<u64>,
    /// Also sweep prior default roots under the temp dir (the default).
    #[arg(long, overrides_with = "no_discover")]
    discover: bool,
    /// Do not discover prior default roots.
    #[arg(long, overrides_with = "discover")]
    no_discover: bool,
    /// List what would be deleted; delete nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the report as one compact JSON line instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    common: Common,
}

/// `custodian spill write`.
#[derive(Debug, clap::Args)]
pub(crate) struct WriteArgs {
    /// The session the result belongs to.
    #[arg(long)]
    session: String,
    /// The store root (default: the config's `root`, else a new default root).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// The content to spill; `-` or absent reads stdin.
    #[arg(value_name = "FILE|-")]
    input: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

/// `custodian spill read`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReadArgs {
    /// The store root (default: the config's `root`, else the default root
    /// under the temp dir whose tag the locator carries).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// The locator printed by `spill write`.
    locator: String,
    #[command(flatten)]
    common: Common,
}

struct Failure(u8, String);

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        let code = match &e {
            StoreError::Locator(_) | StoreError::InvalidPrefix => EXIT_DATAERR,
            StoreError::NotFound { .. } => EXIT_NOINPUT,
            StoreError::Refused { .. } | StoreError::ForeignRoot { .. } => EXIT_NOPERM,
            _ => EXIT_IOERR,
        };
        Failure(code, super::chain(&e))
    }
}

impl From<SpillConfigError> for Failure {
    fn from(e: SpillConfigError) -> Self {
        Failure(EXIT_CONFIG, super::chain(&e))
    }
}

pub(crate) fn main(cmd: Command) -> ExitCode {
    let result = match cmd {
        Command::Sweep(a) => sweep(a),
        Command::Write(a) => write(a),
        Command::Read(a) => read(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(Failure(code, msg)) => {
            eprintln!("custodian spill: {msg}");
            ExitCode::from(code)
        }
    }
}

fn load(common: &Common) -> Result<SpillConfig, Failure> {
    let mut cfg = match &common.config {
        Some(p) => SpillConfig::load(p)?,
        None => SpillConfig::default(),
    };
    if let Some(t) = &common.temp_dir {
        cfg = cfg.with_temp_dir(t);
    }
    if let Some(p) = &common.prefix {
        validate_prefix(p)?;
        cfg = cfg.with_default_root_prefix(p);
    }
    Ok(cfg)
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure(EXIT_IOERR, format!("cannot start runtime: {e}")))
}

fn sweep(a: SweepArgs) -> Result<u8, Failure> {
    let mut cfg = load(&a.common)?;
    if let Some(days) = a.period_days {
        cfg = cfg.with_cleanup_period_days(days);
    }
    if a.no_discover {
        cfg = cfg.with_discover_default_roots(false);
    } else if a.discover {
        cfg = cfg.with_discover_default_roots(true);
    }
    let mut roots = a.roots.clone();
    if roots.is_empty() {
        roots.extend(cfg.root.clone());
    }
    let report = if cfg.period().is_none() {
        None
    } else {
        let rt = runtime()?;
        Some(rt.block_on(async {
            // Caught before the sweep starts: from here on a stop signal ends
            // it at its next safe point instead of killing it mid-removal.
            let mut stops = StopSignals::install()
                .map_err(|e| Failure(EXIT_IOERR, format!("cannot catch stop signals: {e}")))?;
            if let Some((first, rest)) = roots.split_first() {
                // Boot the real service: activation opens the store and
                // launches the sweep, disposal awaits it.
                cfg.root = Some(first.clone());
                let opts = ServiceOptions {
                    extra_roots: rest.to_vec(),
                    dry_run: a.dry_run,
                    ..ServiceOptions::default()
                };
                let svc = SpillService::activate_with(&cfg, opts).map_err(|e| match e {
                    custodian::spill::ServiceError::Store(s) => Failure::from(s),
                    other => Failure(EXIT_IOERR, super::chain(&other)),
                })?;
                let cancel = svc.sweep_cancel();
                Ok::<_, Failure>(until_stopped(svc.dispose(), &cancel, &mut stops).await)
            } else {
                // No root: sweep only what discovery finds, without creating
                // a default root just to sweep.
                let Some(cutoff) = cfg.cutoff(SystemTime::now()) else {
                    unreachable!("period checked above")
                };
                let mut plan = SweepPlan::new(cutoff);
                plan.dry_run = a.dry_run;
                plan.discovery = cfg.discover_default_roots.then(|| Discovery {
                    temp_dir: cfg.temp_dir(),
                    prefix: cfg.default_root_prefix.clone(),
                });
                let cancel = Arc::new(AtomicBool::new(false));
                let flag = Arc::clone(&cancel);
                let sweep = tokio::task::spawn_blocking(move || {
                    sweep_spill_roots_until(&plan, &TracingSink, &flag)
                });
                let (report, stopped) = until_stopped(sweep, &cancel, &mut stops).await;
                let report = report
                    .map_err(|e| Failure(EXIT_IOERR, format!("the sweep task failed: {e}")))?;
                Ok((Some(report), stopped))
            }
        })?)
    };
    let Some((Some(report), stopped)) = report else {
        if a.json {
            println!("{{\"schema\":\"custodian.spill.sweep_report/1\",\"disabled\":true}}");
        } else {
            println!("cleanup disabled (cleanup_period_days = 0)");
        }
        return Ok(0);
    };
    print_report(&report, a.json);
    // Stopped by the signal, not finished just before it.
    Ok(match stopped.filter(|_| report.cancelled) {
        Some(signal) => stop::exit_code(signal),
        None if report.warnings.is_empty() && report.warnings_dropped == 0 => 0,
        None => EXIT_WARNINGS,
    })
}

/// Awaits `sweep`; on the first stop signal sets `cancel`, so that the
/// sweep ends at its next safe point, and keeps awaiting it: a later signal
/// is reported and changes nothing, so the report always comes.
async fn until_stopped<T>(
    sweep: impl std::future::Future<Output = T>,
    cancel: &AtomicBool,
    stops: &mut StopSignals,
) -> (T, Option<StopSignal>) {
    tokio::pin!(sweep);
    let first = tokio::select! {
        biased;
        done = &mut sweep => return (done, None),
        signal = stops.recv() => signal,
    };
    eprintln!(
        "custodian spill: {}: stopping the sweep at its next safe point",
        first.name()
    );
    cancel.store(true, Ordering::Relaxed);
    loop {
        tokio::select! {
            biased;
            done = &mut sweep => return (done, Some(first)),
            again = stops.recv() => eprintln!(
                "custodian spill: {}: already stopping; the report still comes",
                again.name()
            ),
        }
    }
}

fn print_report(r: &SweepReport, json: bool) {
    if json {
        match serde_json::to_string(r) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("custodian spill: cannot encode report: {e}"),
        }
        return;
    }
    let verb = if r.dry_run { "would delete" } else { "deleted" };
    println!(
        "roots scanned: {}, files {verb}: {}, kept: {}, session dirs pruned: {}, roots removed: {}",
        r.roots_scanned, r.files_deleted, r.files_kept, r.dirs_pruned, r.roots_removed
    );
    for p in &r.would_delete {
        println!("would delete: {p}");
    }
    for (reason, n) in &r.skipped {
        println!("skipped {reason:?}: {n}");
    }
    for w in &r.warnings {
        println!("warning [{}] {}: {}", w.code, w.path, w.message);
    }
}

fn write(a: WriteArgs) -> Result<u8, Failure> {
    let cfg = load(&a.common)?;
    let mut bytes = Vec::new();
    match a.input.as_deref() {
        None => std::io::stdin().read_to_end(&mut bytes),
        Some(p) if p.as_os_str() == "-" => std::io::stdin().read_to_end(&mut bytes),
        Some(p) => std::fs::File::open(p).and_then(|mut f| f.read_to_end(&mut bytes)),
    }
    .map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::NotFound {
            EXIT_NOINPUT
        } else {
            EXIT_IOERR
        };
        Failure(code, format!("cannot read input: {e}"))
    })?;
    let store = match a.root.or(cfg.root.clone()) {
        Some(r) => SpillStore::open(&r)?,
        None => SpillStore::create_default(&cfg.temp_dir(), &cfg.default_root_prefix)?,
    };
    let loc = store.write(&a.session, &bytes)?;
    println!("{loc}");
    Ok(0)
}

fn read(a: ReadArgs) -> Result<u8, Failure> {
    let cfg = load(&a.common)?;
    let loc = Locator::parse(&a.locator).map_err(|e| Failure(EXIT_DATAERR, super::chain(&e)))?;
    let store = match a.root.or(cfg.root.clone()) {
        Some(r) => SpillStore::open_existing(&r)?,
        None => find_default_root(&cfg, &loc)?,
    };
    let bytes = store.read(&loc)?;
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes)
        .and_then(|()| out.flush())
        .map_err(|e| Failure(EXIT_IOERR, format!("cannot write output: {e}")))?;
    Ok(0)
}

fn find_default_root(cfg: &SpillConfig, loc: &Locator) -> Result<SpillStore, Failure> {
    let roots = discover_default_roots(&cfg.temp_dir(), &cfg.default_root_prefix)
        .map_err(|e| Failure(EXIT_IOERR, format!("cannot list the temp dir: {e}")))?;
    for r in roots {
        if let Ok(store) = SpillStore::open_existing(&r) {
            if store.tag() == loc.root_tag() {
                return Ok(store);
            }
        }
    }
    Err(Failure(
        EXIT_NOINPUT,
        "no default root under the temp dir matches this locator; pass --root".into(),
    ))
}
