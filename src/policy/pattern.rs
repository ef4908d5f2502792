//! Approval overrides and target patterns.
//!
//! An override is a string compared with a [`MatchTarget`]. Without `*` it is
//! *exact*: it matches one target and nothing else. Generated overrides are
//! always exact, because a target never contains a raw `*` (it is escaped as
//! `\u002a`). A manually written override may contain `*`, which matches any
//! sequence of characters, *including the structural separators of the
//! target* (`"`, `,`, `[`, `]`): a pattern written for one argument can match
//! a different argv split, another cwd or extra environment entries. Such
//! patterns are broad by design and should be reviewed as such.

use std::fmt;

use serde::Serialize;

use super::target::{MAX_TARGET_BYTES, MatchTarget};

/// Why a pattern was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
#[non_exhaustive]
pub enum PatternError {
    /// The pattern is empty.
    #[error("the pattern is empty")]
    Empty,
    /// The pattern has more literal bytes than any target can hold, so it
    /// could never match.
    #[error("the pattern has {literal_bytes} literal bytes, more than any target ({max})")]
    TooLong {
        /// Non-wildcard bytes in the pattern.
        literal_bytes: usize,
        /// [`MAX_TARGET_BYTES`].
        max: usize,
    },
}

/// An approval override or a rule's target pattern: exact, or with `*`
/// wildcards (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Pattern {
    text: String,
}

impl Pattern {
    /// Parses an override or pattern.
    ///
    /// # Errors
    ///
    /// [`PatternError`] for an empty pattern or one that could never match.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        if text.is_empty() {
            return Err(PatternError::Empty);
        }
        let literal_bytes = text.bytes().filter(|&b| b != b'*').count();
        if literal_bytes > MAX_TARGET_BYTES {
            return Err(PatternError::TooLong {
                literal_bytes,
                max: MAX_TARGET_BYTES,
            });
        }
        Ok(Pattern {
            text: text.to_owned(),
        })
    }

    /// The exact override that matches `target` and only it.
    pub fn exact(target: &MatchTarget) -> Self {
        debug_assert!(!target.as_str().contains('*'));
        Pattern {
            text: target.as_str().to_owned(),
        }
    }

    /// Whether this pattern has no wildcard.
    pub fn is_exact(&self) -> bool {
        !self.text.contains('*')
    }

    /// The pattern text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the pattern matches the whole target.
    pub fn matches(&self, target: &MatchTarget) -> bool {
        if self.is_exact() {
            return self.text == target.as_str();
        }
        wildcard_match(self.text.as_bytes(), target.as_str().as_bytes())
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `*`-only glob over bytes: greedy with a single backtrack point, which is
/// complete for this pattern language and runs in O(|pattern|·|text|) at
/// worst. Byte matching equals character matching here because both sides
/// are valid UTF-8 and literals must match exactly.
pub(crate) fn wildcard_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::target::ProcessTarget;

    fn t(exe: &str, argv: &[&str]) -> MatchTarget {
        ProcessTarget {
            executable: exe.into(),
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            ..ProcessTarget::default()
        }
        .match_target()
        .unwrap()
    }

    #[test]
    fn exact_override_matches_only_its_target() {
        let target = t("git", &["status"]);
        let o = Pattern::exact(&target);
        assert!(o.is_exact());
        assert!(o.matches(&target));
        assert!(!o.matches(&t("git", &["status", "--porcelain"])));
        assert!(!o.matches(&t("git", &["statu"])));
    }

    #[test]
    fn generated_override_for_a_literal_star_is_still_exact() {
        let target = t("ls", &["*"]);
        let o = Pattern::exact(&target);
        assert!(o.is_exact());
        assert!(!o.matches(&t("ls", &["anything"])));
    }

    #[test]
    fn manual_pattern_for_one_argument_matches_another_argv_split() {
        // Written to allow `echo` with one argument starting with `a`...
        let p =
            Pattern::parse(r#"{"executable":"echo","argv":["a*"],"cwd":".","env":{}}"#).unwrap();
        assert!(p.matches(&t("echo", &["abc"])));
        // ...it also matches two arguments: `*` crosses the `","` separator.
        assert!(p.matches(&t("echo", &["a", "rm -rf /"])));
    }

    #[test]
    fn wildcard_semantics() {
        let cases = [
            ("*", "", true),
            ("*", "abc", true),
            ("a*c", "abc", true),
            ("a*c", "ac", true),
            ("a*c", "abcd", false),
            ("a*b*c", "aXbYbZc", true),
            ("a**c", "abbc", true),
            ("*a", "bab", false),
            ("abc", "abc", true),
            ("abc", "abd", false),
        ];
        for (p, text, want) in cases {
            assert_eq!(
                wildcard_match(p.as_bytes(), text.as_bytes()),
                want,
                "{p} vs {text}"
            );
        }
    }

    #[test]
    fn pattern_refusals() {
        assert_eq!(Pattern::parse(""), Err(PatternError::Empty));
        let long = "a".repeat(MAX_TARGET_BYTES + 1);
        assert!(matches!(
            Pattern::parse(&long),
            Err(PatternError::TooLong { .. })
        ));
        let ok = format!("{}*", "a".repeat(MAX_TARGET_BYTES));
        assert!(Pattern::parse(&ok).is_ok());
    }
}
