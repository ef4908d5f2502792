//! Approval overrides and target patterns.
//!
//! An override is a string compared with a [`MatchTarget`]. Without `*` it is
//! *exact*: it matches one target and nothing else — it equals either the
//! target's display text (for an oversized invocation that text ends in the
//! SHA-256 of the whole serialization, so it still binds every byte) or its
//! full serialization. A pattern with `*` is matched against the *full*
//! serialization, never the bounded display text. Generated overrides are
//! always exact, because a target never contains a raw `*` (it is escaped as
//! `\u002a`). A manually written override may contain `*`, which matches any
//! sequence of characters, *including the structural separators of the
//! target* (`"`, `,`, `[`, `]`): a pattern written for one argument can match
//! a different argv split, another cwd or extra environment entries. Such
//! patterns are broad by design and should be reviewed as such.

use std::fmt;

use serde::Serialize;

use super::target::MatchTarget;

/// The longest override or pattern accepted, in bytes. A generated exact
/// override is at most [`MAX_TARGET_BYTES`](super::target::MAX_TARGET_BYTES);
/// hand-written patterns are matched against the full serialization, which
/// may be longer, so this bound only keeps a policy file reasonable.
pub const MAX_PATTERN_BYTES: usize = 64 * 1024;

/// Why a pattern was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
#[non_exhaustive]
pub enum PatternError {
    /// The pattern is empty.
    #[error("the pattern is empty")]
    Empty,
    /// The pattern is longer than [`MAX_PATTERN_BYTES`].
    #[error("the pattern has {bytes} bytes, more than {max}")]
    TooLong {
        /// The pattern's length.
        bytes: usize,
        /// [`MAX_PATTERN_BYTES`].
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
    /// [`PatternError`] for an empty pattern or one longer than
    /// [`MAX_PATTERN_BYTES`].
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        if text.is_empty() {
            return Err(PatternError::Empty);
        }
        if text.len() > MAX_PATTERN_BYTES {
            return Err(PatternError::TooLong {
                bytes: text.len(),
                max: MAX_PATTERN_BYTES,
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

    /// The pattern as a TOML *literal* string (`'...'`), ready to paste into
    /// `policy.overrides`: a literal string decodes nothing, so the loaded
    /// text is exactly this pattern (a basic string `"..."` would turn a
    /// target's `\u002a` back into a wildcard). `None` when the text cannot
    /// be a literal string (it holds `'` or a control character other than
    /// tab); a generated override never does, since targets escape both.
    pub fn toml_literal(&self) -> Option<String> {
        let fits = !self
            .text
            .chars()
            .any(|c| c == '\'' || (c.is_control() && c != '\t'));
        fits.then(|| format!("'{}'", self.text))
    }

    /// The pattern text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the pattern matches the whole target: an exact override
    /// equals its display text or its full serialization; a wildcard pattern
    /// matches its full serialization.
    pub fn matches(&self, target: &MatchTarget) -> bool {
        if self.is_exact() {
            return self.text == target.as_str() || self.text == target.full_text();
        }
        segments_match(&self.text, target.full_text())
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `*`-only glob, linear in the text: the pattern is split at `*` into
/// literal segments; the first must be a prefix, the last a suffix, and the
/// ones between are found leftmost, in order, in what remains. Leftmost is
/// always safe for a `*`-only language (an earlier match leaves more text for
/// the rest), and `str::find` is linear, so an attacker-sized target costs
/// time proportional to its length whatever the pattern.
pub(crate) fn segments_match(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let middle: Vec<&str> = parts.collect();
    let Some((last, middle)) = middle.split_last() else {
        // No `*` at all: the pattern is the whole text.
        return rest.is_empty();
    };
    for seg in middle {
        match rest.find(seg) {
            Some(at) => rest = &rest[at + seg.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
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
        let long = "a".repeat(MAX_PATTERN_BYTES + 1);
        assert!(matches!(
            Pattern::parse(&long),
            Err(PatternError::TooLong { .. })
        ));
        let ok = format!("{}*", "a".repeat(MAX_PATTERN_BYTES - 1));
        assert!(Pattern::parse(&ok).is_ok());
    }

    #[test]
    fn segment_matcher_agrees_with_the_backtracking_one() {
        let alphabet = ["", "a", "b", "*", "ab", "ba", "a*", "*b"];
        let texts = ["", "a", "b", "ab", "ba", "aab", "abab", "bba", "aXbYbZc"];
        for x in alphabet {
            for y in alphabet {
                for z in alphabet {
                    let p = format!("{x}{y}{z}");
                    for t in texts {
                        assert_eq!(
                            segments_match(&p, t),
                            wildcard_match(p.as_bytes(), t.as_bytes()),
                            "{p:?} vs {t:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn patterns_see_what_lies_past_the_display_prefix() {
        let padded = ProcessTarget {
            executable: "x".into(),
            argv: vec!["a".repeat(2 * crate::policy::MAX_TARGET_BYTES)],
            env_overlay: vec![(
                "LD_PRELOAD".into(),
                crate::policy::TargetEnvValue::Literal("/tmp/e.so".into()),
            )],
            ..ProcessTarget::default()
        }
        .match_target()
        .unwrap();
        assert!(padded.is_truncated());
        assert!(!padded.as_str().contains("LD_PRELOAD"));
        let deny = Pattern::parse(r#"*"env":{*"LD_PRELOAD":*"#).unwrap();
        assert!(deny.matches(&padded));
        // Both forms of the exact override bind this invocation.
        assert!(Pattern::exact(&padded).matches(&padded));
        assert!(Pattern::parse(padded.full_text()).unwrap().matches(&padded));
    }
}
