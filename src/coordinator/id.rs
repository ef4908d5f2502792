//! The immutable identity of a request.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A validated request id: 1 to 128 ASCII letters, digits, `-`, `_` and `.`,
/// never `.` or `..`. It is safe as one path component (the workspace derives
/// the request's job directory from it) and safe in logs and on the wire.
///
/// Cloning is cheap (a shared string).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RequestId(Arc<str>);

impl RequestId {
    /// The longest id accepted, in bytes.
    pub const MAX_LEN: usize = 128;

    /// Validates `id`.
    ///
    /// # Errors
    ///
    /// [`InvalidRequestId`] when `id` is empty, `.`, `..`, longer than
    /// [`RequestId::MAX_LEN`], or holds a byte outside `[A-Za-z0-9._-]`
    /// (which rules out `/`, NUL and every non-ASCII character).
    pub fn new(id: &str) -> Result<Self, InvalidRequestId> {
        if Self::is_valid(id) {
            Ok(RequestId(Arc::from(id)))
        } else {
            Err(InvalidRequestId)
        }
    }

    /// Whether `id` would be accepted by [`RequestId::new`].
    pub fn is_valid(id: &str) -> bool {
        !id.is_empty()
            && id.len() <= Self::MAX_LEN
            && id != "."
            && id != ".."
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
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

impl TryFrom<String> for RequestId {
    type Error = InvalidRequestId;
    fn try_from(s: String) -> Result<Self, InvalidRequestId> {
        RequestId::new(&s)
    }
}

impl From<RequestId> for String {
    fn from(id: RequestId) -> String {
        id.0.to_string()
    }
}

/// A request id that fails validation. It deliberately does not echo the
/// rejected text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a request id is 1-128 bytes of [A-Za-z0-9._-] and not `.` or `..`")]
pub struct InvalidRequestId;

#[cfg(test)]
mod tests {
    use super::RequestId;

    #[test]
    fn request_id_accepts_conservative_names() {
        for ok in ["a", "req-1", "A_b.c", &"x".repeat(128), "..."] {
            assert!(RequestId::new(ok).is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn request_id_refuses_path_like_and_empty_names() {
        let long = "x".repeat(129);
        for bad in ["", ".", "..", "a/b", "/", "a\0b", "é", "a b", "a\\b", &long] {
            assert!(RequestId::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn request_id_deserializes_only_when_valid() {
        let ok: RequestId = serde_json::from_str("\"r-1\"").unwrap();
        assert_eq!(ok.as_str(), "r-1");
        assert!(serde_json::from_str::<RequestId>("\"../etc\"").is_err());
    }

    /// Display is the id itself (the `request_id` field of every request's
    /// log span); Debug quotes it.
    #[test]
    fn request_id_displays_as_itself_and_debugs_quoted() {
        let id = RequestId::new("req-1.a_b").unwrap();
        assert_eq!(id.to_string(), "req-1.a_b");
        assert_eq!(format!("{id:?}"), "\"req-1.a_b\"");
    }
}
