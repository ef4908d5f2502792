//! Request ids: the only input from which a job directory name is derived.

use std::fmt;

/// The longest request id accepted, in bytes.
///
/// Far below `NAME_MAX` (255) so that the id is always a single, short
/// directory name on every supported filesystem.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// A validated request id: `1..=128` bytes of `[A-Za-z0-9_-]` plus `.` not in
/// the first position.
///
/// Validation is pure and happens before any syscall, so an id can never be
/// empty, `.`, `..`, contain a path separator or NUL, or start a hidden name.
/// The id is immutable once built; the job directory is named by it exactly.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(Box<str>);

/// Why a request id was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestIdError {
    /// The id is empty.
    #[error("request id is empty")]
    Empty,
    /// The id is longer than [`MAX_REQUEST_ID_LEN`] bytes.
    #[error("request id is {len} bytes, longer than {MAX_REQUEST_ID_LEN}")]
    TooLong {
        /// Length of the refused id in bytes.
        len: usize,
    },
    /// The id starts with `.` (covers `.`, `..` and hidden names).
    #[error("request id starts with '.'")]
    LeadingDot,
    /// The id holds a byte outside `[A-Za-z0-9._-]` (a separator, NUL, space, non-ASCII…).
    #[error("request id holds a disallowed byte at offset {index}")]
    DisallowedByte {
        /// Offset of the first disallowed byte.
        index: usize,
    },
}

impl RequestId {
    /// Validates `id` and wraps it.
    ///
    /// # Errors
    ///
    /// [`RequestIdError`] when `id` is empty, too long, starts with `.` or
    /// holds a byte outside `[A-Za-z0-9._-]`. No syscall is made either way.
    pub fn new(id: &str) -> Result<Self, RequestIdError> {
        validate(id.as_bytes())?;
        Ok(RequestId(id.into()))
    }

    /// The id as text; it is also the job directory's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for RequestId {
    type Err = RequestIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RequestId::new(s)
    }
}

fn validate(id: &[u8]) -> Result<(), RequestIdError> {
    if id.is_empty() {
        return Err(RequestIdError::Empty);
    }
    if id.len() > MAX_REQUEST_ID_LEN {
        return Err(RequestIdError::TooLong { len: id.len() });
    }
    if id[0] == b'.' {
        return Err(RequestIdError::LeadingDot);
    }
    match id
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
    {
        Some(index) => Err(RequestIdError::DisallowedByte { index }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_conservative_ids() {
        for ok in [
            "r1",
            "req-0001",
            "a_b.c",
            "X",
            &"z".repeat(MAX_REQUEST_ID_LEN),
        ] {
            assert_eq!(RequestId::new(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn refuses_every_dangerous_shape() {
        assert_eq!(RequestId::new(""), Err(RequestIdError::Empty));
        assert_eq!(RequestId::new("."), Err(RequestIdError::LeadingDot));
        assert_eq!(RequestId::new(".."), Err(RequestIdError::LeadingDot));
        assert_eq!(RequestId::new(".hidden"), Err(RequestIdError::LeadingDot));
        assert_eq!(
            RequestId::new("a/b"),
            Err(RequestIdError::DisallowedByte { index: 1 })
        );
        assert_eq!(
            RequestId::new("a\0b"),
            Err(RequestIdError::DisallowedByte { index: 1 })
        );
        assert_eq!(
            RequestId::new("a\\b"),
            Err(RequestIdError::DisallowedByte { index: 1 })
        );
        assert_eq!(
            RequestId::new("sp ace"),
            Err(RequestIdError::DisallowedByte { index: 2 })
        );
        assert_eq!(
            RequestId::new("é"),
            Err(RequestIdError::DisallowedByte { index: 0 })
        );
        assert_eq!(
            RequestId::new(&"z".repeat(MAX_REQUEST_ID_LEN + 1)),
            Err(RequestIdError::TooLong {
                len: MAX_REQUEST_ID_LEN + 1
            })
        );
    }
}
