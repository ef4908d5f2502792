//! Error conventions shared by every module.
//!
//! Each module boundary has one error type of its own (built with
//! `thiserror`, `#[non_exhaustive]`), carrying context such as a pid, a
//! path relative to a root, or a request id, and never an environment key or
//! value. This module holds what those types share.

use std::fmt;

/// A short, stable, machine-readable code safe to put on the wire, in
/// evidence and in logs: it never carries a path, an environment value or
/// captured output.
///
/// Codes are lowercase ASCII words separated by `_`, e.g. `symlink_in_job`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SafeCode(&'static str);

impl SafeCode {
    /// Wraps a static code.
    ///
    /// # Panics
    ///
    /// Panics (in a `const` context, at compile time) if `code` is empty or
    /// holds anything but lowercase ASCII letters, digits and `_`.
    pub const fn new(code: &'static str) -> Self {
        let bytes = code.as_bytes();
        assert!(!bytes.is_empty(), "a safe code is never empty");
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            assert!(
                b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_',
                "a safe code is lowercase ascii, digits and '_'"
            );
            i += 1;
        }
        SafeCode(code)
    }

    /// The code as a string.
    pub const fn as_str(self) -> &'static str {
        self.0
    }
}

impl fmt::Display for SafeCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl serde::Serialize for SafeCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::SafeCode;

    #[test]
    fn safe_code_round_trips_its_text() {
        const C: SafeCode = SafeCode::new("symlink_in_job");
        assert_eq!(C.as_str(), "symlink_in_job");
        assert_eq!(C.to_string(), "symlink_in_job");
        assert_eq!(serde_json::to_string(&C).unwrap(), "\"symlink_in_job\"");
    }

    #[test]
    #[should_panic(expected = "lowercase")]
    fn safe_code_refuses_a_path() {
        let _ = SafeCode::new("/etc/passwd");
    }
}
