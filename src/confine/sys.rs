//! The one raw system call of this module.

#![allow(
    unsafe_code,
    reason = "the Landlock version probe has no safe wrapper in the landlock crate's public API"
)]

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`—The
/// highest Landlock ABI the running kernel supports, 0 where Landlock is
/// not built in (`ENOSYS`) or not enabled (`EOPNOTSUPP`).
///
/// # References
///
/// <https://man7.org/linux/man-pages/man2/landlock_create_ruleset.2.html>
#[doc(alias = "landlock_create_ruleset")]
pub(super) fn landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with this flag the kernel reads no attribute (NULL, size 0)
    // and returns a number; no memory is touched.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).unwrap_or(0)
}
