//! The spill service: owns the config, the cutoff, the store, and the one
//! background sweep it launches at activation and awaits at disposal.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use tokio::task::JoinHandle;

use super::config::SpillConfig;
use super::locator::Locator;
use super::report::{SpillWarning, SweepReport, TracingSink, WarningSink};
use super::store::{SpillStore, StoreError};
use super::sweep::{Discovery, SweepPlan, sweep_spill_roots_until};

/// Why activation failed. The sweep never causes this: only the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// The store root could not be opened or created.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `activate` was called outside a tokio runtime.
    #[error("the spill service must be activated inside a tokio runtime")]
    NoRuntime,
}

/// Options beyond the config file.
#[derive(Clone)]
pub struct ServiceOptions {
    /// Where sweep warnings go; [`TracingSink`] by default.
    pub sink: Arc<dyn WarningSink>,
    /// More configured roots to sweep (never removed).
    pub extra_roots: Vec<PathBuf>,
    /// Directories (e.g. the workspace) that must never be swept as a root.
    pub protected: Vec<PathBuf>,
    /// Run the sweep as a dry run.
    pub dry_run: bool,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            sink: Arc::new(TracingSink),
            extra_roots: Vec::new(),
            protected: Vec::new(),
            dry_run: false,
        }
    }
}

impl std::fmt::Debug for ServiceOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceOptions")
            .field("extra_roots", &self.extra_roots)
            .field("protected", &self.protected)
            .field("dry_run", &self.dry_run)
            .finish_non_exhaustive()
    }
}

/// A running spill service.
///
/// [`activate`](Self::activate) opens the store and returns at once; the
/// store is usable immediately while exactly one best-effort sweep runs on
/// tokio's blocking pool. [`dispose`](Self::dispose) awaits that sweep, so
/// once it returns no sweep I/O is in flight or will start. There is no
/// timer and no second sweep: a long-lived service is swept again only at
/// its next activation.
///
/// Dropping the service without disposing asks the sweep to stop early
/// but cannot wait for it; call `dispose` for the quiescence guarantee.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use custodian::spill::{Locator, SpillConfig, SpillService};
///
/// let dir = tempfile::tempdir()?;
/// let config = SpillConfig::default().with_root(dir.path().join("spill"));
/// let service = SpillService::activate(&config)?; // the sweep starts now
/// let locator = service.write("session-1", b"a large tool result".to_vec()).await?;
/// // The locator is opaque text the caller keeps.
/// let again = Locator::parse(&locator.to_string())?;
/// assert_eq!(service.read(&again).await?, b"a large tool result");
/// let report = service.dispose().await; // no sweep I/O after this
/// assert!(report.is_some());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct SpillService {
    store: Arc<SpillStore>,
    sweep: Option<JoinHandle<SweepReport>>,
    cancel: Arc<AtomicBool>,
}

impl SpillService {
    /// [`activate_with`](Self::activate_with) default options.
    ///
    /// # Errors
    ///
    /// As [`activate_with`](Self::activate_with).
    pub fn activate(config: &SpillConfig) -> Result<Self, ServiceError> {
        Self::activate_with(config, ServiceOptions::default())
    }

    /// Opens the configured root (or creates a per-process default root),
    /// then spawns the sweep unless `cleanup_period_days` is 0. The cutoff
    /// is `now − cleanup_period_days`, read once here.
    ///
    /// # Errors
    ///
    /// [`ServiceError::NoRuntime`] outside a tokio runtime,
    /// [`ServiceError::Store`] if the store root is unusable. A sweep
    /// problem is never an activation error.
    pub fn activate_with(config: &SpillConfig, opts: ServiceOptions) -> Result<Self, ServiceError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| ServiceError::NoRuntime)?;
        let store = Arc::new(match &config.root {
            Some(root) => SpillStore::open(root)?,
            None => SpillStore::create_default(&config.temp_dir(), &config.default_root_prefix)?,
        });
        let cancel = Arc::new(AtomicBool::new(false));
        let sweep = config.cutoff(SystemTime::now()).map(|cutoff| {
            let mut plan = SweepPlan::new(cutoff);
            match &config.root {
                Some(root) => plan.configured_roots.push(root.clone()),
                None => plan.active_root = Some(store.root().to_owned()),
            }
            plan.configured_roots
                .extend(opts.extra_roots.iter().cloned());
            plan.discovery = config.discover_default_roots.then(|| Discovery {
                temp_dir: config.temp_dir(),
                prefix: config.default_root_prefix.clone(),
            });
            plan.dry_run = opts.dry_run;
            plan.protected = opts.protected.clone();
            let sink = Arc::clone(&opts.sink);
            let cancel = Arc::clone(&cancel);
            handle.spawn_blocking(move || sweep_spill_roots_until(&plan, &*sink, &cancel))
        });
        Ok(SpillService {
            store,
            sweep,
            cancel,
        })
    }

    /// The store, available from activation on. Its methods make blocking
    /// filesystem calls; from async code use [`SpillService::write`] and
    /// [`SpillService::read`].
    pub fn store(&self) -> &Arc<SpillStore> {
        &self.store
    }

    /// Spills `bytes` under `session` ([`SpillStore::write`]) on tokio's
    /// blocking pool, so the async runtime never waits on the disk.
    ///
    /// # Errors
    ///
    /// As [`SpillStore::write`]; [`StoreError::Io`] if the blocking task
    /// died.
    pub async fn write(&self, session: &str, bytes: Vec<u8>) -> Result<Locator, StoreError> {
        write_on_pool(Arc::clone(&self.store), session.to_owned(), bytes).await
    }

    /// Reads the spilled result behind `locator` ([`SpillStore::read`]) on
    /// tokio's blocking pool.
    ///
    /// # Errors
    ///
    /// As [`SpillStore::read`]; [`StoreError::Io`] if the blocking task
    /// died.
    pub async fn read(&self, locator: &Locator) -> Result<Vec<u8>, StoreError> {
        read_on_pool(Arc::clone(&self.store), locator.clone()).await
    }

    /// The flag the sweep checks at its safe points (between the entries of
    /// a root, every 1024 entries of a session's listing, and after a
    /// session's removals, before it is pruned): set it to end the sweep
    /// early. [`dispose`](Self::dispose) still awaits the sweep and returns
    /// its report, `cancelled: true`; nothing is left half removed (every
    /// file already moved out is destroyed first, the quarantine removed).
    pub fn sweep_cancel(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.cancel)
    }

    /// Awaits the sweep and returns its report (`None` when cleanup is
    /// disabled). After this returns, the sweep performs no more I/O.
    pub async fn dispose(mut self) -> Option<SweepReport> {
        let handle = self.sweep.take()?;
        Some(match handle.await {
            Ok(report) => report,
            Err(e) => {
                // The sweep contains its own failures; this is a panic in
                // the sweep itself, still contained here.
                let mut r = SweepReport::new(false, 0);
                r.warnings.push(SpillWarning {
                    code: "sweep_panicked",
                    path: String::new(),
                    message: format!("the sweep task failed: {e}"),
                });
                r
            }
        })
    }
}

/// [`SpillStore::write`] on tokio's blocking pool.
pub(crate) async fn write_on_pool(
    store: Arc<SpillStore>,
    session: String,
    bytes: Vec<u8>,
) -> Result<Locator, StoreError> {
    let root = store.root().to_owned();
    tokio::task::spawn_blocking(move || store.write(&session, &bytes))
        .await
        .map_err(|e| joined(root, "write task", e))?
}

/// [`SpillStore::read`] on tokio's blocking pool.
pub(crate) async fn read_on_pool(
    store: Arc<SpillStore>,
    locator: Locator,
) -> Result<Vec<u8>, StoreError> {
    let root = store.root().to_owned();
    tokio::task::spawn_blocking(move || store.read(&locator))
        .await
        .map_err(|e| joined(root, "read task", e))?
}

/// A blocking task that died (panicked or was cancelled at shutdown).
fn joined(path: PathBuf, op: &'static str, e: tokio::task::JoinError) -> StoreError {
    StoreError::Io {
        path,
        op,
        source: std::io::Error::other(e),
    }
}

impl Drop for SpillService {
    fn drop(&mut self) {
        if self.sweep.is_some() {
            self.cancel.store(true, Ordering::Relaxed);
        }
    }
}
