//! Locators: the opaque, versioned strings that name one spilled result.
//!
//! Format version 1 (see `docs/contracts/spill.md`):
//!
//! ```text
//! cspill:1:<root tag>:<session>:<file id>
//! ```
//!
//! - `root tag`: 16 lowercase hex digits naming the store root
//!   ([`RootTag`]); a store refuses a locator whose tag is not its own.
//! - `session`: a [session name](validate_session): 1–64 bytes of
//!   `[A-Za-z0-9_.-]`, not starting with `.`.
//! - `file id`: 32 lowercase hex digits; the file on disk is
//!   `<root>/<session>/<file id>.spill`.
//!
//! The parser accepts exactly what [`Locator`]'s `Display` produces, so a
//! parsed locator prints back to the same string.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// The prefix shared by every locator version.
pub const LOCATOR_PREFIX: &str = "cspill";
/// The locator format version this build writes and reads.
pub const LOCATOR_VERSION: u32 = 1;
/// The longest session name accepted, in bytes.
pub const MAX_SESSION_LEN: usize = 64;
/// The suffix of every spill file name.
pub(crate) const FILE_SUFFIX: &str = ".spill";
const FILE_ID_LEN: usize = 32;
const TAG_LEN: usize = 16;

/// Why a string is not a valid locator or session name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LocatorError {
    /// The string does not start with `cspill:`.
    #[error("not a spill locator (expected `cspill:<version>:...`)")]
    NotALocator,
    /// The version field is not a version this build reads.
    #[error("unsupported spill locator version (this build reads version {LOCATOR_VERSION})")]
    UnsupportedVersion,
    /// The locator does not have exactly five `:`-separated fields.
    #[error("malformed spill locator: expected 5 `:`-separated fields")]
    WrongFieldCount,
    /// The root tag is not 16 lowercase hex digits.
    #[error("malformed spill locator: bad root tag")]
    BadRootTag,
    /// The session field is not a valid session name.
    #[error("invalid session name: {0}")]
    BadSession(&'static str),
    /// The file id is not 32 lowercase hex digits.
    #[error("malformed spill locator: bad file id")]
    BadFileId,
}

/// Checks a session name: 1–64 bytes of ASCII letters, digits, `_`, `-`
/// and `.`, not starting with `.` (so never `.`, `..` or a hidden name).
///
/// # Errors
///
/// [`LocatorError::BadSession`] says which rule failed.
pub fn validate_session(session: &str) -> Result<(), LocatorError> {
    validate_session_bytes(session.as_bytes())
}

pub(crate) fn validate_session_bytes(s: &[u8]) -> Result<(), LocatorError> {
    if s.is_empty() {
        return Err(LocatorError::BadSession("empty"));
    }
    if s.len() > MAX_SESSION_LEN {
        return Err(LocatorError::BadSession("longer than 64 bytes"));
    }
    if s[0] == b'.' {
        return Err(LocatorError::BadSession("starts with `.`"));
    }
    if !s
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return Err(LocatorError::BadSession(
            "only ASCII letters, digits, `_`, `-` and `.` are allowed",
        ));
    }
    Ok(())
}

fn is_lower_hex(s: &[u8], len: usize) -> bool {
    s.len() == len && s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `name` is a spill file name (`<32 lowercase hex>.spill`): the
/// only names the sweep ever deletes.
pub(crate) fn is_spill_file_name(name: &[u8]) -> bool {
    name.strip_suffix(FILE_SUFFIX.as_bytes())
        .is_some_and(|id| is_lower_hex(id, FILE_ID_LEN))
}

/// A short tag naming a store root: the first 8 bytes of
/// `SHA-256(canonical root path)`, in hex.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RootTag([u8; 8]);

impl RootTag {
    /// The tag of the root at the canonical path bytes `path`.
    pub fn of_path_bytes(path: &[u8]) -> Self {
        let digest = Sha256::digest(path);
        let mut tag = [0; 8];
        tag.copy_from_slice(&digest[..8]);
        RootTag(tag)
    }
}

impl fmt::Display for RootTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

/// The name of one spilled result. Opaque to callers: print it with
/// `Display`, get it back with `FromStr`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Locator {
    tag: RootTag,
    session: String,
    file_id: [u8; 16],
}

impl Locator {
    pub(crate) fn new(tag: RootTag, session: &str, file_id: [u8; 16]) -> Self {
        Locator {
            tag,
            session: session.to_owned(),
            file_id,
        }
    }

    /// The root tag this locator belongs to.
    pub fn root_tag(&self) -> RootTag {
        self.tag
    }

    /// The session the result was spilled for.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The file name inside the session directory.
    pub(crate) fn file_name(&self) -> String {
        format!("{}{FILE_SUFFIX}", hex::encode(self.file_id))
    }

    /// Parses a locator string.
    ///
    /// # Errors
    ///
    /// A [`LocatorError`] for anything but the exact version-1 form: a
    /// wrong prefix or version, a field count other than five, or a field
    /// that breaks its rule (so no `/`, `..`, NUL or other traversal can get
    /// through).
    pub fn parse(s: &str) -> Result<Self, LocatorError> {
        let mut fields = s.split(':');
        let (Some(prefix), Some(version)) = (fields.next(), fields.next()) else {
            return Err(LocatorError::NotALocator);
        };
        if prefix != LOCATOR_PREFIX {
            return Err(LocatorError::NotALocator);
        }
        if version != "1" {
            return Err(LocatorError::UnsupportedVersion);
        }
        let (Some(tag), Some(session), Some(file), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(LocatorError::WrongFieldCount);
        };
        if !is_lower_hex(tag.as_bytes(), TAG_LEN) {
            return Err(LocatorError::BadRootTag);
        }
        validate_session(session)?;
        if !is_lower_hex(file.as_bytes(), FILE_ID_LEN) {
            return Err(LocatorError::BadFileId);
        }
        let mut t = [0; 8];
        let mut id = [0; 16];
        hex::decode_to_slice(tag, &mut t).map_err(|_| LocatorError::BadRootTag)?;
        hex::decode_to_slice(file, &mut id).map_err(|_| LocatorError::BadFileId)?;
        Ok(Locator::new(RootTag(t), session, id))
    }
}

impl FromStr for Locator {
    type Err = LocatorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Locator::parse(s)
    }
}

/// A locator serializes as the string it prints (`cspill:1:…`).
impl serde::Serialize for Locator {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl fmt::Display for Locator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{LOCATOR_PREFIX}:{LOCATOR_VERSION}:{}:{}:{}",
            self.tag,
            self.session,
            hex::encode(self.file_id)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "cspill:1:0123456789abcdef:sess-1.a:0123456789abcdef0123456789abcdef";

    #[test]
    fn round_trips() {
        let l = Locator::parse(GOOD).unwrap();
        assert_eq!(l.to_string(), GOOD);
        assert_eq!(l.session(), "sess-1.a");
        assert_eq!(l.file_name(), "0123456789abcdef0123456789abcdef.spill");
    }

    #[test]
    fn rejects_traversal_and_malformed_input() {
        let bad = [
            "",
            "cspill",
            "cspill:2:0123456789abcdef:s:0123456789abcdef0123456789abcdef",
            "xspill:1:0123456789abcdef:s:0123456789abcdef0123456789abcdef",
            "cspill:1:0123456789abcdef:..:0123456789abcdef0123456789abcdef",
            "cspill:1:0123456789abcdef:a/b:0123456789abcdef0123456789abcdef",
            "cspill:1:0123456789abcdef:.hidden:0123456789abcdef0123456789abcdef",
            "cspill:1:0123456789ABCDEF:s:0123456789abcdef0123456789abcdef",
            "cspill:1:0123456789abcdef:s:0123456789abcdef0123456789abcde",
            "cspill:1:0123456789abcdef:s:../../../../etc/passwd",
            "cspill:1:0123456789abcdef:s:0123456789abcdef0123456789abcdef:x",
            "cspill:1:0123456789abcdef::0123456789abcdef0123456789abcdef",
            "cspill:1:0123456789abcdef:s\0:0123456789abcdef0123456789abcdef",
            " cspill:1:0123456789abcdef:s:0123456789abcdef0123456789abcdef",
        ];
        for b in bad {
            assert!(Locator::parse(b).is_err(), "accepted {b:?}");
        }
        assert_eq!(
            Locator::parse("cspill:9:x").unwrap_err(),
            LocatorError::UnsupportedVersion
        );
    }

    #[test]
    fn spill_file_names_are_strict() {
        assert!(is_spill_file_name(
            b"0123456789abcdef0123456789abcdef.spill"
        ));
        assert!(!is_spill_file_name(b"0123456789abcdef0123456789abcdef"));
        assert!(!is_spill_file_name(
            b"0123456789abcdef0123456789abcdeF.spill"
        ));
        assert!(!is_spill_file_name(b"notes.txt"));
    }
}
