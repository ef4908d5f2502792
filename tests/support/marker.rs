//! A `sleep` duration no other process on the host has, to find what a
//! test's process tree left behind in `/proc` whatever else runs meanwhile.
//!
//! Include with `#[path = "../support/marker.rs"] mod marker;`.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};

use rustix::process::{Pid, Signal, kill_process};

/// `300.<pid><n>` (GNU `sleep` takes fractions), passed to every process of
/// a tree. Dropped, it kills every live process that holds it: a failing
/// test leaks nothing.
pub struct Marker(pub String);

impl Marker {
    pub fn new() -> Marker {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        Marker(format!(
            "300.{}{:03}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ))
    }

    /// `(pid, argv)` of every live process holding the marker.
    pub fn holding(&self) -> Vec<(u32, Vec<String>)> {
        holding(&self.0)
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        for (pid, _) in self.holding() {
            if let Some(pid) = Pid::from_raw(pid as i32) {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
    }
}

/// `(pid, argv)` of every live process whose argv holds `marker` (a zombie
/// has an empty `cmdline` and is not listed).
pub fn holding(marker: &str) -> Vec<(u32, Vec<String>)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let argv: Vec<String> = raw
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            argv.iter().any(|a| a == marker).then_some((pid, argv))
        })
        .collect()
}
