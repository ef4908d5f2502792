//! Error conventions shared by every module.
//!
//! Each module boundary has one error type of its own (built with
//! `thiserror`, `#[non_exhaustive]`), carrying context such as a pid, a
//! path relative to a root, or a request id, and never an environment key or
//! value. This module holds what those types share.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::num::NonZeroU8;

/// A short, stable, machine-readable code safe to put on the wire, in
/// evidence and in logs: it never carries a path, an environment value or
/// captured output.
///
/// Codes are 1 to [`SafeCode::MAX_LEN`] lowercase ASCII letters, digits and
/// `_`, e.g. `symlink_in_job`. The crate's own codes are `const`s built with
/// [`SafeCode::new`], checked at compile time; a code that arrives at run
/// time (from a node across the wire) goes through [`SafeCode::parse`].
///
/// # Representation
///
/// A code owns its text, stored inline: at most [`SafeCode::MAX_LEN`]
/// bytes and a length, no heap, no lifetime. That keeps it `Copy`, so the
/// pure machines' states and actions that carry one (`machine::request`,
/// `machine::node`) stay plain values stepped by copy, and a `const` code
/// costs nothing to build. A borrowed `&'static str` would need every code
/// from the wire leaked to live that long (unbounded memory from a
/// hostile node, or a lossy table); a `Cow<'static, str>` or an `Arc<str>`
/// would allocate per runtime code and take `Copy` away from every type
/// that holds a code. The price is a value of 65 bytes instead of 16 (so
/// the wire's messages keep a node's codes as `wire::Code`, a checked
/// `String`, and make a `SafeCode` of one where the crate acts on it), and
/// the bound on the length, which the wire enforces anyway.
#[derive(Clone, Copy)]
pub struct SafeCode {
    /// The code's bytes, then zeros.
    bytes: [u8; SafeCode::MAX_LEN],
    /// How many of `bytes` are the code.
    len: NonZeroU8,
}

/// Why a text is not a [`SafeCode`]. It never quotes the text: the text may
/// be anything a peer sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SafeCodeError {
    /// The text is empty.
    #[error("a safe code is never empty")]
    Empty,
    /// The text is longer than [`SafeCode::MAX_LEN`] bytes.
    #[error("a safe code is at most {max} bytes, this text has {len}", max = SafeCode::MAX_LEN)]
    TooLong {
        /// The text's length in bytes.
        len: usize,
    },
    /// The byte at `index` is not a lowercase ASCII letter, a digit or `_`.
    #[error("a safe code is lowercase ascii letters, digits and '_' (byte {index} is not)")]
    Forbidden {
        /// The offset of the first forbidden byte.
        index: usize,
    },
}

impl SafeCode {
    /// The longest code, in bytes (the wire's bound on a code).
    pub const MAX_LEN: usize = 64;

    /// Wraps a static code, checking it (at compile time when `const`).
    ///
    /// # Panics
    ///
    /// Panics (in a `const` context, at compile time) if `code` is empty,
    /// longer than [`SafeCode::MAX_LEN`], or holds anything but lowercase
    /// ASCII letters, digits and `_`.
    pub const fn new(code: &'static str) -> Self {
        match Self::check(code.as_bytes()) {
            Ok(code) => code,
            Err(SafeCodeError::Empty) => panic!("a safe code is never empty"),
            Err(SafeCodeError::TooLong { .. }) => panic!("a safe code is at most 64 bytes"),
            Err(SafeCodeError::Forbidden { .. }) => {
                panic!("a safe code is lowercase ascii, digits and '_'")
            }
        }
    }

    /// Checks a code that arrives at run time and copies it.
    ///
    /// # Errors
    ///
    /// [`SafeCodeError`] if `code` is empty, longer than
    /// [`SafeCode::MAX_LEN`] bytes, or holds anything but lowercase ASCII
    /// letters, digits and `_`.
    pub fn parse(code: &str) -> Result<Self, SafeCodeError> {
        Self::check(code.as_bytes())
    }

    const fn check(code: &[u8]) -> Result<Self, SafeCodeError> {
        if code.len() > Self::MAX_LEN {
            return Err(SafeCodeError::TooLong { len: code.len() });
        }
        let mut bytes = [0; Self::MAX_LEN];
        let mut i = 0;
        while i < code.len() {
            let b = code[i];
            if !(b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
                return Err(SafeCodeError::Forbidden { index: i });
            }
            bytes[i] = b;
            i += 1;
        }
        // At most MAX_LEN (64), so the cast keeps every bit.
        match NonZeroU8::new(code.len() as u8) {
            Some(len) => Ok(SafeCode { bytes, len }),
            None => Err(SafeCodeError::Empty),
        }
    }

    /// The code as a string.
    pub fn as_str(&self) -> &str {
        match std::str::from_utf8(self.as_bytes()) {
            Ok(s) => s,
            // Only `check` builds a code, and it lets ASCII through only.
            Err(_) => unreachable!("a safe code is ascii"),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len.get())]
    }
}

impl TryFrom<&str> for SafeCode {
    type Error = SafeCodeError;
    fn try_from(code: &str) -> Result<Self, SafeCodeError> {
        Self::parse(code)
    }
}

impl std::str::FromStr for SafeCode {
    type Err = SafeCodeError;
    fn from_str(code: &str) -> Result<Self, SafeCodeError> {
        Self::parse(code)
    }
}

// Equality, order and hash are the text's, as they were when a code was a
// `&'static str`: the bytes past `len` are always zero, but need not be read.
impl PartialEq for SafeCode {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for SafeCode {}

impl PartialOrd for SafeCode {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SafeCode {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl Hash for SafeCode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for SafeCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SafeCode").field(&self.as_str()).finish()
    }
}

impl fmt::Display for SafeCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for SafeCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::DefaultHasher;
    use std::hash::{Hash, Hasher};

    use super::{SafeCode, SafeCodeError};

    #[test]
    fn safe_code_round_trips_its_text() {
        const C: SafeCode = SafeCode::new("symlink_in_job");
        assert_eq!(C.as_str(), "symlink_in_job");
        assert_eq!(C.to_string(), "symlink_in_job");
        assert_eq!(format!("{C:?}"), r#"SafeCode("symlink_in_job")"#);
        assert_eq!(serde_json::to_string(&C).unwrap(), "\"symlink_in_job\"");
        assert_eq!(SafeCode::parse("symlink_in_job"), Ok(C));
    }

    #[test]
    #[should_panic(expected = "lowercase")]
    fn safe_code_refuses_a_path() {
        let _ = SafeCode::new("/etc/passwd");
    }

    #[test]
    #[should_panic(expected = "at most 64")]
    fn a_static_code_longer_than_the_bound_is_refused() {
        let _ = SafeCode::new("a_code_of_sixty_five_bytes_is_one_byte_more_than_the_wire_carries");
    }

    #[test]
    fn a_runtime_code_of_the_longest_length_is_kept_whole() {
        let text = "x".repeat(SafeCode::MAX_LEN);
        let code = SafeCode::parse(&text).unwrap();
        assert_eq!(code.as_str(), text);
        assert_eq!(
            SafeCode::parse(&"x".repeat(SafeCode::MAX_LEN + 1)),
            Err(SafeCodeError::TooLong {
                len: SafeCode::MAX_LEN + 1
            })
        );
    }

    /// Run-time text that is not a code is refused with the reason and the
    /// offending offset, never with the text itself.
    #[test]
    fn runtime_text_that_is_not_a_code_is_refused() {
        let cases: [(&str, SafeCodeError); 8] = [
            ("", SafeCodeError::Empty),
            ("Symlink", SafeCodeError::Forbidden { index: 0 }),
            ("no space", SafeCodeError::Forbidden { index: 2 }),
            ("../etc", SafeCodeError::Forbidden { index: 0 }),
            ("key=value", SafeCodeError::Forbidden { index: 3 }),
            ("caf\u{e9}", SafeCodeError::Forbidden { index: 3 }),
            ("nul\0", SafeCodeError::Forbidden { index: 3 }),
            ("dash-ed", SafeCodeError::Forbidden { index: 4 }),
        ];
        for (text, why) in cases {
            assert_eq!(SafeCode::parse(text), Err(why), "{text:?}");
            assert_eq!(SafeCode::try_from(text), Err(why), "{text:?}");
            assert_eq!(text.parse::<SafeCode>(), Err(why), "{text:?}");
            if !text.is_empty() {
                assert!(!why.to_string().contains(text), "{why} quotes {text:?}");
            }
        }
    }

    fn hash_of<T: Hash + ?Sized>(v: &T) -> u64 {
        let mut h = DefaultHasher::new();
        v.hash(&mut h);
        h.finish()
    }

    /// Equality, order and hash are the text's, as when a code was a
    /// `&'static str`: a static and a parsed code of the same text are one
    /// code, and sets of codes sort as their text does.
    #[test]
    fn codes_compare_and_hash_as_their_text() {
        let parsed = SafeCode::parse("ab").unwrap();
        assert_eq!(parsed, SafeCode::new("ab"));
        assert_eq!(hash_of(&parsed), hash_of("ab"));
        assert_ne!(parsed, SafeCode::new("abc"));
        let mut sorted = ["b", "abc", "ab", "a_", "a0"].map(SafeCode::new);
        sorted.sort();
        let mut texts = ["b", "abc", "ab", "a_", "a0"];
        texts.sort_unstable();
        assert_eq!(
            sorted.map(|c| c.as_str().to_owned()),
            texts.map(str::to_owned)
        );
    }
}
