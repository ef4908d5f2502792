//! Human durations and sizes for the command line.
//!
//! Durations use [`humantime`]: `2s`, `500ms`, `1m30s`, `1m 30s`, `1h`. A
//! bare number has no unit and is refused.
//!
//! Sizes are parsed by the [`parse_size`](https://docs.rs/parse-size)
//! crate: a non-negative number (digits, an optional fraction, an optional
//! exponent such as `1e6`; `_` and spaces group digits) and an optional unit,
//! case-insensitive, with optional spaces between them:
//!
//! | unit | bytes |
//! |------|-------|
//! | none, `B` | 1 |
//! | `K`, `Ki`, `KiB` | 1024 |
//! | `M`, `Mi`, `MiB` | 1024² |
//! | `G`, `Gi`, `GiB` | 1024³ (and `T`, `P`, `E` likewise) |
//! | `kB`, `KB` | 1000 |
//! | `MB` | 1000² |
//! | `GB` | 1000³ (and `TB`, `PB`, `EB` likewise) |
//!
//! A bare prefix (`64K`) is binary, as in GNU coreutils; the crate alone
//! reads it as decimal, so [`parse_size()`] rewrites it to `64Ki` first. A
//! fraction is rounded to the nearest byte (`1.5MiB` is 1572864, `0.1KiB`
//! is 102).

use std::time::Duration;

/// Why a duration or size could not be parsed. Holds the input (a command
/// line argument, never an environment value).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum UnitsError {
    /// Not a duration humantime understands.
    #[error("invalid duration {input:?}: {reason} (try 2s, 500ms or 1m30s)")]
    Duration {
        /// The input.
        input: String,
        /// What humantime said.
        reason: String,
    },
    /// Not a number followed by a known unit.
    #[error("invalid size {input:?} (try 512, 64KiB or 1MiB)")]
    Size {
        /// The input.
        input: String,
    },
    /// A number followed by an unknown size unit.
    #[error("unknown size unit in {input:?} (use B, KiB, MiB, GiB, kB, MB or GB)")]
    SizeUnit {
        /// The input.
        input: String,
    },
    /// A size that does not fit in 64 bits.
    #[error("size {input:?} is too large")]
    SizeOverflow {
        /// The input.
        input: String,
    },
}

/// Parses a human duration such as `2s`, `500ms` or `1m30s`.
///
/// # Errors
///
/// [`UnitsError::Duration`] for anything humantime refuses, including an
/// empty string and a bare number.
pub(crate) fn parse_duration(input: &str) -> Result<Duration, UnitsError> {
    humantime::parse_duration(input.trim()).map_err(|e| UnitsError::Duration {
        input: input.to_owned(),
        reason: e.to_string(),
    })
}

/// Parses a size such as `512`, `64KiB`, `64K`, `1MiB` or `1.5MiB`, in
/// bytes (the syntax is in the [module docs](self)).
///
/// # Errors
///
/// [`UnitsError::SizeOverflow`] past `u64::MAX` bytes,
/// [`UnitsError::SizeUnit`] for a number followed by an unknown unit,
/// [`UnitsError::Size`] for anything else refused (empty, no number, a
/// sign).
pub(crate) fn parse_size(input: &str) -> Result<u64, UnitsError> {
    const SIZES: parse_size::Config = parse_size::Config::new();
    let s = input.trim();
    // `K`, `M`, ... alone are binary here, as they always were; `Ki` makes
    // the crate read them so.
    let binary;
    let s = match s.as_bytes() {
        [.., digit, prefix] if !digit.is_ascii_alphabetic() && b"kmgtpeKMGTPE".contains(prefix) => {
            binary = format!("{s}i");
            binary.as_str()
        }
        _ => s,
    };
    SIZES.parse_size(s).map_err(|e| match e {
        parse_size::Error::PosOverflow => UnitsError::SizeOverflow {
            input: input.to_owned(),
        },
        // A number followed by letters the crate refused: the unit is at
        // fault, not the number.
        _ if s.ends_with(|c: char| c.is_ascii_alphabetic())
            && SIZES
                .parse_size(
                    s.trim_end_matches(|c: char| c.is_ascii_alphabetic())
                        .trim_end(),
                )
                .is_ok() =>
        {
            UnitsError::SizeUnit {
                input: input.to_owned(),
            }
        }
        _ => UnitsError::Size {
            input: input.to_owned(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration(" 1m 30s "), Ok(Duration::from_secs(90)));
        for bad in ["", "2", "2 parsecs", "-1s", "s"] {
            assert!(
                matches!(parse_duration(bad), Err(UnitsError::Duration { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn sizes() {
        for (input, want) in [
            ("512", 512),
            ("0", 0),
            ("512B", 512),
            ("64KiB", 65_536),
            ("64kib", 65_536),
            ("64K", 65_536),
            ("64 KiB", 65_536),
            ("1MiB", 1 << 20),
            ("1GiB", 1 << 30),
            ("1.5MiB", 1_572_864),
            ("0.5KiB", 512),
            ("0.5 k", 512),
            ("2.000", 2),
            ("1Ki", 1024),
            ("1TiB", 1 << 40),
            ("1e3", 1_000),
            ("1_000 kB", 1_000_000),
            ("0.1KiB", 102),
            ("1.5", 2),
            ("64kB", 64_000),
            ("64KB", 64_000),
            ("3MB", 3_000_000),
            ("1GB", 1_000_000_000),
        ] {
            assert_eq!(parse_size(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn bad_sizes_are_typed() {
        let size = |s: &str| UnitsError::Size { input: s.into() };
        for bad in ["", "KiB", "-1", "+1", "1.2.3", "k1"] {
            assert_eq!(parse_size(bad), Err(size(bad)), "{bad:?}");
        }
        for unit in ["12 parsecs", "1KiBB", "3x"] {
            assert_eq!(
                parse_size(unit),
                Err(UnitsError::SizeUnit { input: unit.into() }),
                "{unit:?}"
            );
        }
        for big in [
            "18446744073709551616",
            "17179869184GiB",
            "16EiB",
            "16E",
            "99999999999999999999999.5",
        ] {
            assert_eq!(
                parse_size(big),
                Err(UnitsError::SizeOverflow { input: big.into() }),
                "{big}"
            );
        }
    }
}
