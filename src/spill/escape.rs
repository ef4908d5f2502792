//! Lossless, printable renderings of names for reports and warnings.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Renders bytes of a name for humans and JSON without losing anything:
/// valid UTF-8 stays as is except control characters and `\`, which are
/// escaped; invalid bytes become `\xNN`.
pub(crate) fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for ch in chunk.valid().chars() {
            match ch {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => out.extend(c.escape_default()),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// [`escape_bytes`] for a path.
pub(crate) fn escape_path(path: &Path) -> String {
    escape_bytes(path.as_os_str().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_keeps_newlines_and_invalid_bytes_visible() {
        assert_eq!(escape_bytes(b"a\nb\xffc\\"), "a\\nb\\xffc\\\\");
        assert_eq!(escape_bytes("é".as_bytes()), "é");
    }
}
