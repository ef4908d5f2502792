//! CPU clocks the removal benches report next to wall time.

use std::time::Duration;

/// CPU time (user + system) of this process, all threads.
pub fn cpu_self() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// CPU time (user + system) of the waited-for children.
pub fn cpu_children() -> Duration {
    // SAFETY: `getrusage` only writes the `rusage` it is given, which is
    // plain old data and lives across the call.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_CHILDREN is a valid `who`.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) }, 0);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}
