//! Human durations and sizes for the command line.
//!
//! Durations use [`humantime`]: `2s`, `500ms`, `1m30s`, `1m 30s`, `1h`. A
//! bare number has no unit and is refused.
//!
//! Sizes are a non-negative number and an optional unit, case-insensitive,
//! with optional spaces between them:
//!
//! | unit | bytes |
//! |------|-------|
//! | none, `B` | 1 |
//! | `K`, `KiB` | 1024 |
//! | `M`, `MiB` | 1024² |
//! | `G`, `GiB` | 1024³ |
//! | `kB`, `KB` | 1000 |
//! | `MB` | 1000² |
//! | `GB` | 1000³ |
//!
//! A fraction is accepted when it names a whole number of bytes (`1.5MiB`
//! is 1572864; `0.1KiB` is refused, `1.5` is refused).

use std::time::Duration;

/// Why a duration or size could not be parsed. Holds the input (a command
/// line argument, never an environment value).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnitsError {
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
    /// An unknown size unit.
    #[error("unknown size unit in {input:?} (use B, KiB, MiB, GiB, kB, MB or GB)")]
    SizeUnit {
        /// The input.
        input: String,
    },
    /// A fraction that is not a whole number of bytes.
    #[error("size {input:?} is not a whole number of bytes")]
    FractionalBytes {
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
pub fn parse_duration(input: &str) -> Result<Duration, UnitsError> {
    humantime::parse_duration(input.trim()).map_err(|e| UnitsError::Duration {
        input: input.to_owned(),
        reason: e.to_string(),
    })
}

/// Parses a size such as `512`, `64KiB`, `1MiB` or `1.5MiB`, in bytes.
///
/// # Errors
///
/// [`UnitsError::Size`], [`SizeUnit`], [`FractionalBytes`] or
/// [`SizeOverflow`].
///
/// [`SizeUnit`]: UnitsError::SizeUnit
/// [`FractionalBytes`]: UnitsError::FractionalBytes
/// [`SizeOverflow`]: UnitsError::SizeOverflow
pub fn parse_size(input: &str) -> Result<u64, UnitsError> {
    let s = input.trim();
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(num_end);
    let unit = unit.trim_start();
    let err = || UnitsError::Size {
        input: input.to_owned(),
    };
    let overflow = || UnitsError::SizeOverflow {
        input: input.to_owned(),
    };
    let (int, frac) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int.is_empty() || frac.contains('.') || (number.contains('.') && frac.is_empty()) {
        return Err(err());
    }
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => {
            return Err(UnitsError::SizeUnit {
                input: input.to_owned(),
            });
        }
    };
    let whole: u64 = int.parse().map_err(|_| overflow())?;
    let mut bytes = whole.checked_mul(mult).ok_or_else(overflow)?;
    if !frac.is_empty() {
        // frac_value / 10^digits of a unit must be a whole number of bytes.
        let digits = u32::try_from(frac.len()).map_err(|_| overflow())?;
        let scale = 10u128.checked_pow(digits).ok_or_else(overflow)?;
        let frac_value: u128 = frac.parse().map_err(|_| overflow())?;
        let frac_bytes = frac_value
            .checked_mul(u128::from(mult))
            .ok_or_else(overflow)?;
        if frac_bytes % scale != 0 {
            return Err(UnitsError::FractionalBytes {
                input: input.to_owned(),
            });
        }
        let extra = u64::try_from(frac_bytes / scale).map_err(|_| overflow())?;
        bytes = bytes.checked_add(extra).ok_or_else(overflow)?;
    }
    Ok(bytes)
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
            ("2.000", 2),
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
        for bad in ["", "KiB", ".5KiB", "1.KiB", "1.2.3", "-1", "+1"] {
            assert_eq!(parse_size(bad), Err(size(bad)), "{bad:?}");
        }
        assert_eq!(
            parse_size("12 parsecs"),
            Err(UnitsError::SizeUnit {
                input: "12 parsecs".into()
            })
        );
        assert_eq!(
            parse_size("0.1KiB"),
            Err(UnitsError::FractionalBytes {
                input: "0.1KiB".into()
            })
        );
        assert_eq!(
            parse_size("1.5"),
            Err(UnitsError::FractionalBytes {
                input: "1.5".into()
            })
        );
        for big in [
            "18446744073709551616",
            "17179869184GiB",
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
