//! The spill configuration and its TOML loader.
//!
//! ```toml
//! root = "/var/lib/agent/spill"        # optional; default: a per-process root
//! cleanup_period_days = 30             # whole days ≥ 0; 0 disables the sweep
//! default_root_prefix = "custodian-spill-"
//! temp_dir = "/tmp"                    # optional; default: the OS temp dir
//! discover_default_roots = true
//! ```
//!
//! The keys may also sit under a `[spill]` table. Unknown keys are refused,
//! so a typo never silently falls back to a default.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The default retention period, in days.
pub const DEFAULT_CLEANUP_PERIOD_DAYS: u64 = 30;
/// The default prefix of per-process default roots under the temp dir.
pub const DEFAULT_ROOT_PREFIX: &str = "custodian-spill-";
const SECONDS_PER_DAY: u64 = 86_400;

/// Why a spill configuration was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpillConfigError {
    /// The file could not be read.
    #[error("cannot read spill config {path}: {source}")]
    Read {
        /// The config file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The text is not TOML.
    #[error("spill config is not valid TOML: {0}")]
    Syntax(String),
    /// `cleanup_period_days` is negative, fractional or not a number.
    #[error(
        "`cleanup_period_days` must be a whole number of days >= 0 (0 disables cleanup), got {found}"
    )]
    InvalidPeriod {
        /// What was found, rendered as TOML.
        found: String,
    },
    /// A key holds a value of the wrong type.
    #[error("`{key}` must be {expected}")]
    WrongType {
        /// The key.
        key: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// `default_root_prefix` is empty, too long, or holds a `/`, NUL or
    /// control character, or starts with `.`.
    #[error(
        "`default_root_prefix` must be 1-64 printable characters without `/`, not starting with `.`"
    )]
    InvalidPrefix,
    /// A path is not absolute.
    #[error("`{key}` must be an absolute path")]
    RelativePath {
        /// The key.
        key: &'static str,
    },
    /// A key this version does not know.
    #[error("unknown key `{0}` in spill config")]
    UnknownKey(String),
}

/// The spill store and sweep configuration: [`SpillConfig::default`], then
/// `with_*` for what differs, or [`SpillConfig::load`] from a file.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpillConfig {
    /// The configured root; `None` means a fresh per-process default root
    /// under [`temp_dir`](Self::temp_dir).
    pub root: Option<PathBuf>,
    /// Retention in whole days; `0` disables the sweep.
    pub cleanup_period_days: u64,
    /// The name prefix of per-process default roots.
    pub default_root_prefix: String,
    /// Where default roots live; `None` means [`std::env::temp_dir`].
    pub temp_dir: Option<PathBuf>,
    /// Whether the sweep also scans prior default roots under the temp dir.
    pub discover_default_roots: bool,
}

impl Default for SpillConfig {
    fn default() -> Self {
        SpillConfig {
            root: None,
            cleanup_period_days: DEFAULT_CLEANUP_PERIOD_DAYS,
            default_root_prefix: DEFAULT_ROOT_PREFIX.to_owned(),
            temp_dir: None,
            discover_default_roots: true,
        }
    }
}

impl SpillConfig {
    /// Sets the configured root.
    #[must_use]
    pub fn with_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.root = Some(root.into());
        self
    }

    /// Replaces the retention, in whole days (`0` disables the sweep).
    #[must_use]
    pub fn with_cleanup_period_days(mut self, days: u64) -> Self {
        self.cleanup_period_days = days;
        self
    }

    /// Replaces the name prefix of per-process default roots.
    #[must_use]
    pub fn with_default_root_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.default_root_prefix = prefix.into();
        self
    }

    /// Sets where default roots live.
    #[must_use]
    pub fn with_temp_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.temp_dir = Some(dir.into());
        self
    }

    /// Replaces whether the sweep also scans prior default roots.
    #[must_use]
    pub fn with_discover_default_roots(mut self, discover: bool) -> Self {
        self.discover_default_roots = discover;
        self
    }

    /// Loads a TOML config file.
    ///
    /// # Errors
    ///
    /// [`SpillConfigError::Read`] if the file cannot be read, otherwise as
    /// [`from_toml_str`](Self::from_toml_str).
    pub fn load(path: &Path) -> Result<Self, SpillConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| SpillConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml_str(&text)
    }

    /// Parses TOML text, validating every value at load time.
    ///
    /// # Errors
    ///
    /// [`SpillConfigError::InvalidPeriod`] for a negative, fractional or
    /// non-integer `cleanup_period_days`; the other variants for syntax,
    /// types, prefixes, relative paths and unknown keys.
    pub fn from_toml_str(text: &str) -> Result<Self, SpillConfigError> {
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| SpillConfigError::Syntax(e.message().to_owned()))?;
        if table.len() == 1 && matches!(table.get("spill"), Some(toml::Value::Table(_))) {
            if let Some(toml::Value::Table(inner)) = table.remove("spill") {
                table = inner;
            }
        }
        let mut cfg = SpillConfig::default();
        for (key, value) in table {
            match key.as_str() {
                "root" => cfg.root = Some(abs_path("root", value)?),
                "temp_dir" => cfg.temp_dir = Some(abs_path("temp_dir", value)?),
                "cleanup_period_days" => cfg.cleanup_period_days = period(value)?,
                "default_root_prefix" => {
                    let toml::Value::String(p) = value else {
                        return Err(SpillConfigError::WrongType {
                            key: "default_root_prefix",
                            expected: "a string",
                        });
                    };
                    validate_prefix(&p)?;
                    cfg.default_root_prefix = p;
                }
                "discover_default_roots" => {
                    let toml::Value::Boolean(b) = value else {
                        return Err(SpillConfigError::WrongType {
                            key: "discover_default_roots",
                            expected: "true or false",
                        });
                    };
                    cfg.discover_default_roots = b;
                }
                _ => return Err(SpillConfigError::UnknownKey(key)),
            }
        }
        Ok(cfg)
    }

    /// The retention period, or `None` when cleanup is disabled.
    pub fn period(&self) -> Option<Duration> {
        (self.cleanup_period_days > 0)
            .then(|| Duration::from_secs(self.cleanup_period_days.saturating_mul(SECONDS_PER_DAY)))
    }

    /// The sweep cutoff for `now`: files whose mtime is strictly older are
    /// expired. `None` when cleanup is disabled; [`SystemTime::UNIX_EPOCH`]
    /// when the period reaches back further than the clock can represent.
    pub fn cutoff(&self, now: SystemTime) -> Option<SystemTime> {
        let period = self.period()?;
        Some(now.checked_sub(period).unwrap_or(SystemTime::UNIX_EPOCH))
    }

    /// The temp dir for default roots.
    pub fn temp_dir(&self) -> PathBuf {
        self.temp_dir.clone().unwrap_or_else(std::env::temp_dir)
    }
}

fn abs_path(key: &'static str, value: toml::Value) -> Result<PathBuf, SpillConfigError> {
    let toml::Value::String(s) = value else {
        return Err(SpillConfigError::WrongType {
            key,
            expected: "a string path",
        });
    };
    if s.contains('\0') {
        return Err(SpillConfigError::WrongType {
            key,
            expected: "a path without NUL",
        });
    }
    let p = PathBuf::from(s);
    if !p.is_absolute() {
        return Err(SpillConfigError::RelativePath { key });
    }
    Ok(p)
}

fn period(value: toml::Value) -> Result<u64, SpillConfigError> {
    match value {
        toml::Value::Integer(n) if n >= 0 => Ok(n.unsigned_abs()),
        other => Err(SpillConfigError::InvalidPeriod {
            found: render(&other),
        }),
    }
}

fn render(v: &toml::Value) -> String {
    let s = v.to_string();
    // Bound what an error message echoes back.
    if s.len() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

/// Checks a default-root prefix: 1–64 bytes, no `/`, NUL or control
/// characters, not starting with `.`.
///
/// # Errors
///
/// [`SpillConfigError::InvalidPrefix`].
pub fn validate_prefix(p: &str) -> Result<(), SpillConfigError> {
    if p.is_empty()
        || p.len() > 64
        || p.starts_with('.')
        || p.chars().any(|c| c == '/' || c.is_control())
    {
        return Err(SpillConfigError::InvalidPrefix);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_apply_to_an_empty_file() {
        let cfg = SpillConfig::from_toml_str("").unwrap();
        assert_eq!(cfg, SpillConfig::default());
        assert_eq!(cfg.cleanup_period_days, 30);
    }

    #[test]
    fn zero_disables() {
        let cfg = SpillConfig::from_toml_str("cleanup_period_days = 0").unwrap();
        assert_eq!(cfg.period(), None);
        assert_eq!(cfg.cutoff(SystemTime::now()), None);
    }

    #[test]
    fn bad_periods_are_refused_with_the_rule() {
        for bad in [
            "-1", "1.5", "30.0", "\"30\"", "true", "1e3", "[1]", "inf", "nan",
        ] {
            let err =
                SpillConfig::from_toml_str(&format!("cleanup_period_days = {bad}")).unwrap_err();
            assert!(
                matches!(err, SpillConfigError::InvalidPeriod { .. }),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains("whole number of days"));
        }
    }

    #[test]
    fn spill_table_and_unknown_keys() {
        let cfg =
            SpillConfig::from_toml_str("[spill]\ncleanup_period_days = 7\nroot = \"/x\"").unwrap();
        assert_eq!(cfg.cleanup_period_days, 7);
        assert_eq!(cfg.root.as_deref(), Some(Path::new("/x")));
        assert!(matches!(
            SpillConfig::from_toml_str("cleanup_period_dayz = 1"),
            Err(SpillConfigError::UnknownKey(_))
        ));
        assert!(matches!(
            SpillConfig::from_toml_str("root = \"rel\""),
            Err(SpillConfigError::RelativePath { .. })
        ));
        assert!(matches!(
            SpillConfig::from_toml_str("default_root_prefix = \"a/b\""),
            Err(SpillConfigError::InvalidPrefix)
        ));
    }
}
