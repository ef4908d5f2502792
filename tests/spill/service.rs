//! The service lifecycle: activation, one background sweep, disposal.

use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use custodian::spill::{ServiceOptions, SpillConfig, SpillService, SpillWarning, WarningSink};

use crate::*;

fn config(fx: &Fx, root: Option<&std::path::Path>, days: u64) -> SpillConfig {
    let config = SpillConfig::default()
        .with_cleanup_period_days(days)
        .with_temp_dir(fx.path());
    match root {
        Some(root) => config.with_root(root),
        None => config,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::service_in_a_private_mount_namespace"]
async fn zero_disables_cleanup() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    mkdir(&root.join("s"));
    let f = root.join("s").join(spill_name(1));
    file_at(&f, "x", SystemTime::now() - 3650 * DAY);
    let prior = fx.mkdir("custodian-spill-old");
    let svc = SpillService::activate(&config(&fx, Some(&root), 0)).unwrap();
    assert!(svc.dispose().await.is_none(), "no sweep is launched");
    assert!(f.exists());
    assert!(prior.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::service_in_a_private_mount_namespace"]
async fn activation_sweeps_configured_and_prior_roots_and_keeps_its_own() {
    let fx = Fx::new();
    let prior = fx.mkdir("custodian-spill-prior");
    mkdir(&prior.join("s"));
    file_at(
        &prior.join("s").join(spill_name(1)),
        "x",
        SystemTime::now() - 31 * DAY,
    );
    let svc = SpillService::activate(&config(&fx, None, 30)).unwrap();
    let own = svc.store().root().to_owned();
    assert!(
        own.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("custodian-spill-")
    );
    let r = svc.dispose().await.unwrap();
    assert!(!prior.exists(), "the emptied prior root is removed");
    assert!(own.exists(), "the active root is never removed");
    assert_eq!(r.roots_removed, 1);
    assert_eq!(
        r.skipped_for(custodian::spill::SkipReason::DuplicateRoot),
        1
    );
}

/// A sink that blocks the sweep on its first warning until released, and
/// records whether it was ever called after disposal returned.
struct Gate {
    released: Mutex<bool>,
    cv: std::sync::Condvar,
    entered: AtomicBool,
    disposed: AtomicBool,
    late_calls: Mutex<u32>,
}

impl WarningSink for Gate {
    fn warn(&self, _: &SpillWarning) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        if self.disposed.load(Ordering::SeqCst) {
            *self.late_calls.lock().unwrap() += 1;
        }
        self.entered.store(true, Ordering::SeqCst);
        let mut g = self.released.lock().unwrap();
        while !*g {
            g = self.cv.wait(g).unwrap();
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::service_in_a_private_mount_namespace"]
async fn quiescence_store_is_available_at_once_and_dispose_awaits_the_sweep() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    for s in 0..20 {
        let d = root.join(format!("s{s}"));
        mkdir(&d);
        for i in 0..10 {
            file_at(&d.join(spill_name(i)), "x", SystemTime::now() - 40 * DAY);
        }
    }
    let gate = Arc::new(Gate {
        released: Mutex::new(false),
        cv: std::sync::Condvar::new(),
        entered: AtomicBool::new(false),
        disposed: AtomicBool::new(false),
        late_calls: Mutex::new(0),
    });
    // A missing extra root makes the sweep warn (and block in the gate)
    // before it touches any file.
    let opts = ServiceOptions {
        sink: gate.clone(),
        extra_roots: vec![fx.path().join("missing")],
        ..ServiceOptions::default()
    };
    let cfg = config(&fx, Some(&root), 30).with_discover_default_roots(false);
    let svc = SpillService::activate_with(&cfg, opts).unwrap();
    while !gate.entered.load(Ordering::SeqCst) {
        tokio::task::yield_now().await;
    }
    // The sweep is blocked; the store works and a write succeeds.
    let loc = svc.store().write("fresh", b"new result").unwrap();
    assert_eq!(svc.store().read(&loc).unwrap(), b"new result");
    assert_eq!(
        snapshot(&root)
            .iter()
            .filter(|(p, _)| p.extension().is_some())
            .count(),
        201
    );

    let releaser = {
        let gate = gate.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            *gate.released.lock().unwrap() = true;
            gate.cv.notify_all();
        })
    };
    let report = svc.dispose().await.unwrap();
    gate.disposed.store(true, Ordering::SeqCst);
    releaser.join().unwrap();
    // dispose returned only after the sweep finished its work.
    assert_eq!(report.files_deleted, 200);
    let after = snapshot(&root);
    assert_eq!(
        after
            .iter()
            .filter(|(p, _)| p.extension().is_some())
            .count(),
        1
    );
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        snapshot(&root),
        after,
        "nothing touches the disk after disposal"
    );
    assert_eq!(*gate.late_calls.lock().unwrap(), 0);
}

struct Panicker;
impl WarningSink for Panicker {
    fn warn(&self, _: &SpillWarning) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        panic!("sink panicked");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::service_in_a_private_mount_namespace"]
async fn sweep_failures_never_fail_activation_or_writes() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    mkdir(&root.join("bad"));
    fs::set_permissions(
        root.join("bad"),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    mkdir(&root.join("s"));
    file_at(
        &root.join("s").join(spill_name(1)),
        "x",
        SystemTime::now() - 40 * DAY,
    );
    let opts = ServiceOptions {
        sink: Arc::new(Panicker),
        extra_roots: vec![fx.path().join("missing")],
        ..ServiceOptions::default()
    };
    let svc = SpillService::activate_with(&config(&fx, Some(&root), 30), opts).unwrap();
    let loc = svc.store().write("s", b"ok").unwrap();
    let r = svc.dispose().await.unwrap();
    assert_eq!(r.sink_failures, 2);
    assert_eq!(r.files_deleted, 1);
    assert!(root.join("s").exists(), "the fresh write kept its session");
    let store = custodian::spill::SpillStore::open_existing(&root).unwrap();
    assert_eq!(store.read(&loc).unwrap(), b"ok");
}

#[test]
#[ignore = "deletes: run by guarded::service_in_a_private_mount_namespace"]
fn activation_outside_a_runtime_is_a_typed_error() {
    let fx = Fx::new();
    let err = SpillService::activate(&config(&fx, None, 30)).unwrap_err();
    assert!(matches!(err, custodian::spill::ServiceError::NoRuntime));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::service_in_a_private_mount_namespace"]
async fn boots_from_the_real_config_file() {
    let fx = Fx::new();
    let root = fx.mkdir("root");
    let cfg_path = fx.path().join("spill.toml");
    fs::write(
        &cfg_path,
        format!(
            "[spill]\nroot = {:?}\ncleanup_period_days = 2\ntemp_dir = {:?}\n",
            root.to_str().unwrap(),
            fx.path().to_str().unwrap()
        ),
    )
    .unwrap();
    mkdir(&root.join("old"));
    file_at(
        &root.join("old").join(spill_name(1)),
        "x",
        SystemTime::now() - 3 * DAY,
    );
    mkdir(&root.join("new"));
    file_at(
        &root.join("new").join(spill_name(2)),
        "y",
        SystemTime::now() - DAY,
    );
    let cfg = SpillConfig::load(&cfg_path).unwrap();
    let svc = SpillService::activate(&cfg).unwrap();
    let r = svc.dispose().await.unwrap();
    assert_eq!((r.files_deleted, r.files_kept, r.dirs_pruned), (1, 1, 1));
    assert!(!root.join("old").exists());
    assert!(root.join("new").join(spill_name(2)).exists());

    fs::write(&cfg_path, "cleanup_period_days = -3\n").unwrap();
    let err = SpillConfig::load(&cfg_path).unwrap_err();
    assert!(err.to_string().contains("whole number of days"), "{err}");
}
