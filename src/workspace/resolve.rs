//! Caller path resolution: user file tools never reach the internal namespace.

use std::path::PathBuf;

/// Why a caller's path was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UserPathError {
    /// The path is empty.
    #[error("path is empty")]
    Empty,
    /// The path holds a NUL byte.
    #[error("path holds a NUL byte")]
    Nul,
    /// The path is absolute; caller paths are relative to the workspace root.
    #[error("path is absolute")]
    Absolute,
    /// `..` climbs above the workspace root.
    #[error("path escapes the workspace root")]
    Escapes,
    /// The path names the internal namespace or something in it.
    #[error("path reaches the workspace's internal namespace")]
    Internal,
}

/// Lexically normalises `path` (relative, `/`-separated) and refuses it when
/// its first component is `internal`, compared without regard to case (so a
/// case-insensitive filesystem cannot be used to reach it either).
///
/// `.` and empty components are dropped, `..` pops a component. The result is
/// relative to the workspace root; an empty result is the root itself.
pub(crate) fn resolve(internal: &str, path: &str) -> Result<PathBuf, UserPathError> {
    if path.is_empty() {
        return Err(UserPathError::Empty);
    }
    if path.contains('\0') {
        return Err(UserPathError::Nul);
    }
    if path.starts_with('/') {
        return Err(UserPathError::Absolute);
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop().ok_or(UserPathError::Escapes)?;
            }
            c => parts.push(c),
        }
    }
    if let Some(first) = parts.first() {
        if is_internal(internal, first) {
            return Err(UserPathError::Internal);
        }
    }
    Ok(parts.iter().collect())
}

fn is_internal(internal: &str, component: &str) -> bool {
    component.eq_ignore_ascii_case(internal) || component.to_lowercase() == internal.to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: &str = ".custodian";

    #[test]
    fn ordinary_paths_normalise() {
        assert_eq!(resolve(NS, "a/b.txt").unwrap(), PathBuf::from("a/b.txt"));
        assert_eq!(resolve(NS, "./a//b/").unwrap(), PathBuf::from("a/b"));
        assert_eq!(resolve(NS, "a/../b").unwrap(), PathBuf::from("b"));
        assert_eq!(resolve(NS, ".").unwrap(), PathBuf::from(""));
        // Only the first component is the namespace; deeper names are the user's.
        assert_eq!(
            resolve(NS, "src/.custodian").unwrap(),
            PathBuf::from("src/.custodian")
        );
        assert_eq!(
            resolve(NS, ".custodianx").unwrap(),
            PathBuf::from(".custodianx")
        );
    }

    #[test]
    fn every_spelling_of_the_namespace_is_refused() {
        for p in [
            ".custodian",
            ".custodian/",
            ".custodian//",
            "./.custodian",
            "a/../.custodian",
            "a/b/../../.custodian/job/r1",
            ".CUSTODIAN",
            ".Custodian/job",
            "././.custodian/.",
        ] {
            assert_eq!(resolve(NS, p), Err(UserPathError::Internal), "{p}");
        }
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert_eq!(resolve(NS, ""), Err(UserPathError::Empty));
        assert_eq!(resolve(NS, "/etc/passwd"), Err(UserPathError::Absolute));
        assert_eq!(resolve(NS, ".."), Err(UserPathError::Escapes));
        assert_eq!(resolve(NS, "a/../../b"), Err(UserPathError::Escapes));
        assert_eq!(resolve(NS, "a\0b"), Err(UserPathError::Nul));
    }

    #[test]
    fn a_configured_namespace_is_protected_too() {
        assert_eq!(resolve("_state", "_STATE/x"), Err(UserPathError::Internal));
        assert_eq!(
            resolve("_state", ".custodian").unwrap(),
            PathBuf::from(".custodian")
        );
    }
}
