//! The immutable identity of a request: one type for the whole crate.
//!
//! The coordinator keys its actors by it, the workspace names the request's
//! job directory after it, the wire carries it, and the [`Runtime`] facade
//! takes it. Because a job directory is named by the id *exactly*, the rule
//! is the strictest any of them needs, and it is checked once, here, before
//! any syscall:
//!
//! - 1 to [`MAX_REQUEST_ID_LEN`] (128) bytes,
//! - each byte an ASCII letter, digit, `-`, `_` or `.`,
//! - not starting with `.` (which rules out `.`, `..` and hidden names).
//!
//! So an id is always one short, visible path component, never a separator,
//! NUL, space or non-ASCII character, and safe in logs and on the wire.
//!
//! [`Runtime`]: crate::runtime::Runtime

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The longest request id accepted, in bytes.
///
/// Far below `NAME_MAX` (255) so that the id is always a single, short
/// directory name on every supported filesystem.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// A validated request id (see the [module docs](self) for the rule).
///
/// Cloning is cheap (a shared string). `Display` is the id itself (the
/// `request_id` field of every request's log span); `Debug` quotes it.
///
/// # Examples
///
/// ```
/// use custodian::{RequestId, RequestIdError};
///
/// let id = RequestId::new("req-42.a_b")?;
/// assert_eq!(id.as_str(), "req-42.a_b");
/// assert_eq!(RequestId::new(".hidden"), Err(RequestIdError::LeadingDot));
/// assert!(RequestId::new("a/b").is_err());
/// # Ok::<(), RequestIdError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RequestId(Arc<str>);

/// Why a request id was refused. It deliberately does not echo the
/// rejected text.
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
    /// The id holds a byte outside `[A-Za-z0-9._-]` (a separator, NUL,
    /// space, non-ASCII…).
    #[error("request id holds a disallowed byte at offset {index}")]
    DisallowedByte {
        /// Offset of the first disallowed byte.
        index: usize,
    },
}

impl RequestId {
    /// The longest id accepted, in bytes ([`MAX_REQUEST_ID_LEN`]).
    pub const MAX_LEN: usize = MAX_REQUEST_ID_LEN;

    /// Validates `id` and wraps it. No syscall is made either way.
    ///
    /// # Errors
    ///
    /// [`RequestIdError`] when `id` is empty, too long, starts with `.` or
    /// holds a byte outside `[A-Za-z0-9._-]`.
    pub fn new(id: &str) -> Result<Self, RequestIdError> {
        validate(id.as_bytes())?;
        Ok(RequestId(Arc::from(id)))
    }

    /// Whether `id` would be accepted by [`RequestId::new`].
    pub fn is_valid(id: &str) -> bool {
        validate(id.as_bytes()).is_ok()
    }

    /// The id as text; it is also the job directory's name.
    pub fn as_str(&self) -> &str {
        &self.0
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

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
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

impl TryFrom<String> for RequestId {
    type Error = RequestIdError;
    fn try_from(s: String) -> Result<Self, RequestIdError> {
        RequestId::new(&s)
    }
}

impl TryFrom<&str> for RequestId {
    type Error = RequestIdError;
    fn try_from(s: &str) -> Result<Self, RequestIdError> {
        RequestId::new(s)
    }
}

impl From<RequestId> for String {
    fn from(id: RequestId) -> String {
        id.0.to_string()
    }
}

impl AsRef<str> for RequestId {
    fn as_ref(&self) -> &str {
        &self.0
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
            "a..",
            &"z".repeat(MAX_REQUEST_ID_LEN),
        ] {
            assert_eq!(RequestId::new(ok).unwrap().as_str(), ok);
            assert!(RequestId::is_valid(ok));
        }
    }

    #[test]
    fn refuses_every_dangerous_shape() {
        assert_eq!(RequestId::new(""), Err(RequestIdError::Empty));
        for dot in [".", "..", "...", ".hidden", ".x"] {
            assert_eq!(
                RequestId::new(dot),
                Err(RequestIdError::LeadingDot),
                "{dot:?}"
            );
        }
        for (bad, index) in [
            ("a/b", 1),
            ("a\0b", 1),
            ("a\\b", 1),
            ("sp ace", 2),
            ("é", 0),
        ] {
            assert_eq!(
                RequestId::new(bad),
                Err(RequestIdError::DisallowedByte { index }),
                "{bad:?}"
            );
        }
        assert_eq!(
            RequestId::new(&"z".repeat(MAX_REQUEST_ID_LEN + 1)),
            Err(RequestIdError::TooLong {
                len: MAX_REQUEST_ID_LEN + 1
            })
        );
    }

    #[test]
    fn deserializes_only_when_valid() {
        let ok: RequestId = serde_json::from_str("\"r-1\"").unwrap();
        assert_eq!(ok.as_str(), "r-1");
        assert!(serde_json::from_str::<RequestId>("\"../etc\"").is_err());
        assert!(serde_json::from_str::<RequestId>("\".x\"").is_err());
    }

    #[test]
    fn displays_as_itself_and_debugs_quoted() {
        let id = RequestId::new("req-1.a_b").unwrap();
        assert_eq!(id.to_string(), "req-1.a_b");
        assert_eq!(format!("{id:?}"), "\"req-1.a_b\"");
    }
}
