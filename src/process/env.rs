//! The child's environment: a minimal baseline, then the explicit overlay.
//!
//! Nothing else from the parent is inherited. The baseline is read from the
//! parent's environment, but only these variables, when set:
//!
//! | platform | variables |
//! |----------|-----------|
//! | POSIX    | `PATH`, `HOME`, `USER`, `LOGNAME`, `LANG`, `LANGUAGE`, `LC_ALL`, `LC_CTYPE`, `LC_COLLATE`, `LC_MESSAGES`, `LC_MONETARY`, `LC_NUMERIC`, `LC_TIME`, `TZ`, `TMPDIR` |
//! | Windows  | `PATH`, `SystemRoot`, `SystemDrive`, `windir`, `USERPROFILE`, `HOMEDRIVE`, `HOMEPATH`, `USERNAME`, `APPDATA`, `LOCALAPPDATA`, `TEMP`, `TMP`, `TZ` |
//!
//! On POSIX, if the parent has no `PATH`, the baseline uses
//! [`DEFAULT_POSIX_PATH`]. On Windows names compare case-insensitively (the
//! parent's spelling is kept). `PATHEXT` and `ComSpec` are deliberately
//! absent: custodian requires explicit extensions and never uses a shell.
//!
//! Inheriting `HOME` delegates the ambient authority of the parent's OS
//! identity (credentials and configuration under the home directory); a
//! confinement's `deny_read` (`crate::confine`) can keep `~/.ssh` and the
//! like out of reach.
//!
//! The overlay ([`EnvOverlay`]) is applied on top, replacing baseline
//! variables of the same name. Its values are literals or secret references
//! resolved at launch by a [`SecretResolver`]. Resolved values are kept in
//! [`Secrets`], which builds the streaming [`Redactor`] that replaces them
//! in captured output with [`REDACTED`].
//!
//! Environment keys and values never appear in evidence, errors or logs:
//! [`EnvError`] names overlay entries by position, and every `Debug` here
//! hides values.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

use super::invocation::{EnvOverlay, EnvValue, Platform, SecretRef};

/// The baseline `PATH` on POSIX when the parent has none.
pub const DEFAULT_POSIX_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The marker that replaces a secret value in captured output and argv.
pub const REDACTED: &str = "[REDACTED]";

const POSIX_BASELINE: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_COLLATE",
    "LC_MESSAGES",
    "LC_MONETARY",
    "LC_NUMERIC",
    "LC_TIME",
    "TZ",
    "TMPDIR",
];

const WINDOWS_BASELINE: &[&str] = &[
    "PATH",
    "SystemRoot",
    "SystemDrive",
    "windir",
    "USERPROFILE",
    "HOMEDRIVE",
    "HOMEPATH",
    "USERNAME",
    "APPDATA",
    "LOCALAPPDATA",
    "TEMP",
    "TMP",
    "TZ",
];

/// The names of the baseline variables for `platform`.
pub fn baseline_names(platform: Platform) -> &'static [&'static str] {
    match platform {
        Platform::Posix => POSIX_BASELINE,
        Platform::Windows => WINDOWS_BASELINE,
    }
}

/// The baseline environment: the allowed subset of the parent's.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Baseline {
    vars: Vec<(OsString, OsString)>,
}

impl Baseline {
    /// The baseline taken from this process's environment.
    pub fn from_parent() -> Baseline {
        Self::from_vars(Platform::current(), std::env::vars_os())
    }

    /// The baseline taken from `vars` with the rules of `platform` (pure, for
    /// tests and embedders that keep their own environment).
    pub fn from_vars(
        platform: Platform,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Baseline {
        let names = baseline_names(platform);
        let mut out: Vec<(OsString, OsString)> = Vec::new();
        for (k, v) in vars {
            let Some(k_str) = k.to_str() else { continue };
            let allowed = match platform {
                Platform::Posix => names.contains(&k_str),
                Platform::Windows => names.iter().any(|n| n.eq_ignore_ascii_case(k_str)),
            };
            if !allowed || contains_nul(&v) {
                continue;
            }
            // First occurrence wins, like getenv.
            if !out.iter().any(|(have, _)| same_name(platform, have, &k)) {
                out.push((k, v));
            }
        }
        if platform == Platform::Posix && !out.iter().any(|(k, _)| k == "PATH") {
            out.push(("PATH".into(), DEFAULT_POSIX_PATH.into()));
        }
        Baseline { vars: out }
    }

    /// The variables.
    pub fn iter(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.vars
            .iter()
            .map(|(k, v)| (k.as_os_str(), v.as_os_str()))
    }
}

impl fmt::Debug for Baseline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Baseline({} variables)", self.vars.len())
    }
}

fn contains_nul(v: &OsStr) -> bool {
    v.as_encoded_bytes().contains(&0)
}

fn same_name(platform: Platform, a: &OsStr, b: &OsStr) -> bool {
    match platform {
        Platform::Posix => a == b,
        Platform::Windows => a.eq_ignore_ascii_case(b),
    }
}

/// A resolved secret value. Its `Debug` output hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    /// Wraps a resolved value.
    pub fn new(value: impl Into<String>) -> Self {
        SecretValue(value.into())
    }

    /// The value (for the child's environment and the redactor only).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretValue(<hidden>)")
    }
}

/// Why a resolver could not produce a secret. Carries no value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The store has no such secret.
    #[error("secret not found")]
    NotFound,
    /// The store refused access.
    #[error("access to the secret was denied")]
    Denied,
    /// The store could not be reached.
    #[error("the secret store is unavailable")]
    Unavailable,
}

/// Resolves secret references at launch (the embedding runtime's secret
/// store).
pub trait SecretResolver: Send + Sync {
    /// Returns the value of `reference`.
    ///
    /// # Errors
    ///
    /// A [`SecretError`]; it must not carry the value.
    fn resolve(&self, reference: &SecretRef) -> Result<SecretValue, SecretError>;
}

/// A resolver that knows no secrets: every reference fails with
/// [`SecretError::NotFound`] (for the CLI and tests).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoSecrets;

impl SecretResolver for NoSecrets {
    fn resolve(&self, _reference: &SecretRef) -> Result<SecretValue, SecretError> {
        Err(SecretError::NotFound)
    }
}

impl<F> SecretResolver for F
where
    F: Fn(&SecretRef) -> Result<SecretValue, SecretError> + Send + Sync,
{
    fn resolve(&self, reference: &SecretRef) -> Result<SecretValue, SecretError> {
        self(reference)
    }
}

/// The future an [`AsyncSecretResolver`] returns.
pub type SecretFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<SecretValue, SecretError>> + Send + 'a>,
>;

/// Resolves secret references without blocking the async runtime: the
/// shape of a real secret store (a network call, a vault agent).
///
/// [`resolve_overlay`] calls it for every secret reference of an
/// invocation *before* the launch, so the launch itself never waits on a
/// store. A sync [`SecretResolver`] becomes one through [`Blocking`].
pub trait AsyncSecretResolver: Send + Sync {
    /// Returns the value of `reference`.
    ///
    /// # Errors
    ///
    /// A [`SecretError`]; it must not carry the value.
    fn resolve<'a>(&'a self, reference: &'a SecretRef) -> SecretFuture<'a>;
}

impl fmt::Debug for dyn AsyncSecretResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AsyncSecretResolver")
    }
}

/// Adapts a sync [`SecretResolver`] to [`AsyncSecretResolver`]: each lookup
/// runs on tokio's blocking pool (inline when called outside a runtime), so
/// a resolver that blocks never stalls the async runtime.
/// `R` may be unsized: `Blocking<dyn SecretResolver>` adapts a shared
/// resolver (`Arc<dyn SecretResolver>`) as it is.
#[derive(Debug)]
pub struct Blocking<R: ?Sized>(pub Arc<R>);

impl<R: ?Sized> Clone for Blocking<R> {
    fn clone(&self) -> Self {
        Blocking(Arc::clone(&self.0))
    }
}

impl<R: SecretResolver + ?Sized + 'static> AsyncSecretResolver for Blocking<R> {
    fn resolve<'a>(&'a self, reference: &'a SecretRef) -> SecretFuture<'a> {
        let resolver = Arc::clone(&self.0);
        let reference = reference.clone();
        Box::pin(async move {
            if tokio::runtime::Handle::try_current().is_err() {
                return resolver.resolve(&reference);
            }
            tokio::task::spawn_blocking(move || resolver.resolve(&reference))
                .await
                .unwrap_or(Err(SecretError::Unavailable))
        })
    }
}

/// The secret values of one invocation, resolved ahead of its launch by
/// [`resolve_overlay`]: a [`SecretResolver`] that knows exactly those
/// references. Its `Debug` output hides references and values.
#[derive(Clone, Default)]
pub struct ResolvedSecrets(Vec<(SecretRef, SecretValue)>);

impl fmt::Debug for ResolvedSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ResolvedSecrets({} hidden)", self.0.len())
    }
}

impl SecretResolver for ResolvedSecrets {
    fn resolve(&self, reference: &SecretRef) -> Result<SecretValue, SecretError> {
        self.0
            .iter()
            .find(|(r, _)| r == reference)
            .map(|(_, v)| v.clone())
            .ok_or(SecretError::NotFound)
    }
}

/// Resolves every secret reference in `overlay` through `resolver`, in key
/// order, and returns them as a sync resolver for the launch
/// ([`LaunchOptions::with_secrets`](super::LaunchOptions::with_secrets)).
///
/// # Errors
///
/// [`EnvError::Secret`] naming the entry's position (never its key) when
/// the resolver fails, [`EnvError::SecretNul`] when a value holds a NUL.
pub async fn resolve_overlay(
    overlay: &EnvOverlay,
    resolver: &dyn AsyncSecretResolver,
) -> Result<ResolvedSecrets, EnvError> {
    let mut out = Vec::new();
    for (index, (_, value)) in overlay.iter().enumerate() {
        if let EnvValue::Secret(r) = value {
            let v = resolver
                .resolve(r)
                .await
                .map_err(|source| EnvError::Secret { index, source })?;
            if v.0.contains('\0') {
                return Err(EnvError::SecretNul { index });
            }
            out.push((r.clone(), v));
        }
    }
    Ok(ResolvedSecrets(out))
}

/// Why the child's environment could not be built. Names the overlay entry
/// by its position in key order ([`EnvOverlay::iter`]), never by key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvError {
    /// The resolver failed.
    #[error("environment overlay entry {index} (sorted order): {source}")]
    Secret {
        /// Position of the entry in key order.
        index: usize,
        /// What the resolver said.
        source: SecretError,
    },
    /// A resolved secret value contains a NUL byte.
    #[error(
        "environment overlay entry {index} (sorted order): the resolved secret contains a NUL byte"
    )]
    SecretNul {
        /// Position of the entry in key order.
        index: usize,
    },
}

/// The child's complete environment, and the secrets to redact.
#[derive(Clone)]
pub struct ChildEnv {
    vars: Vec<(OsString, OsString)>,
    secrets: Secrets,
    platform: Platform,
}

impl ChildEnv {
    /// The baseline followed by the overlay, with secret references resolved
    /// through `resolver` (only for entries that are secret references).
    ///
    /// # Errors
    ///
    /// An [`EnvError`] if a secret cannot be resolved or holds a NUL.
    pub fn build(
        baseline: &Baseline,
        overlay: &EnvOverlay,
        resolver: &dyn SecretResolver,
    ) -> Result<ChildEnv, EnvError> {
        Self::build_for(Platform::current(), baseline, overlay, resolver)
    }

    /// [`ChildEnv::build`] with the name rules of `platform`.
    ///
    /// # Errors
    ///
    /// As [`ChildEnv::build`].
    pub fn build_for(
        platform: Platform,
        baseline: &Baseline,
        overlay: &EnvOverlay,
        resolver: &dyn SecretResolver,
    ) -> Result<ChildEnv, EnvError> {
        let mut vars: Vec<(OsString, OsString)> = baseline.vars.clone();
        let mut secrets = Vec::new();
        for (index, (key, value)) in overlay.iter().enumerate() {
            let value: OsString = match value {
                EnvValue::Literal(v) => v.into(),
                EnvValue::Secret(r) => {
                    let s = resolver
                        .resolve(r)
                        .map_err(|source| EnvError::Secret { index, source })?;
                    if s.0.contains('\0') {
                        return Err(EnvError::SecretNul { index });
                    }
                    let v = OsString::from(s.expose());
                    secrets.push(s);
                    v
                }
            };
            let key = OsStr::new(key);
            vars.retain(|(k, _)| !same_name(platform, k, key));
            vars.push((key.to_owned(), value));
        }
        Ok(ChildEnv {
            vars,
            secrets: Secrets::new(secrets),
            platform,
        })
    }

    /// The variables to give the child (after clearing its environment).
    pub fn vars(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.vars
            .iter()
            .map(|(k, v)| (k.as_os_str(), v.as_os_str()))
    }

    /// The value of `name` in the child's environment (e.g. `PATH` for
    /// [`super::invocation::resolve_executable`]).
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.vars
            .iter()
            .find(|(k, _)| same_name(self.platform, k, OsStr::new(name)))
            .map(|(_, v)| v.as_os_str())
    }

    /// The child's effective `PATH`.
    pub fn path(&self) -> Option<&OsStr> {
        self.get("PATH")
    }

    /// The resolved secrets, for redaction.
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }
}

impl fmt::Debug for ChildEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ChildEnv({} variables, {} secrets)",
            self.vars.len(),
            self.secrets.values.len()
        )
    }
}

/// The resolved secret values of one invocation; builds redactors.
#[derive(Clone, Default)]
pub struct Secrets {
    values: Vec<Vec<u8>>,
    matcher: Option<AhoCorasick>,
    max_len: usize,
}

impl Secrets {
    /// Secrets to redact. Empty values are ignored (they would match
    /// everywhere).
    pub fn new(values: Vec<SecretValue>) -> Secrets {
        let mut values: Vec<Vec<u8>> = values
            .into_iter()
            .map(|v| v.0.into_bytes())
            .filter(|v| !v.is_empty())
            .collect();
        values.sort();
        values.dedup();
        let max_len = values.iter().map(Vec::len).max().unwrap_or(0);
        // Leftmost-longest: the redaction of a whole stream is the same
        // however it is chunked (see `Redactor`).
        let matcher = if values.is_empty() {
            None
        } else {
            AhoCorasickBuilder::new()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&values)
                .ok()
        };
        Secrets {
            values,
            matcher,
            max_len,
        }
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The length of the longest secret, in bytes.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// `text` with every secret replaced by [`REDACTED`] (for argv).
    pub fn redact_str(&self, text: &str) -> String {
        match &self.matcher {
            None => text.to_owned(),
            Some(m) => m.replace_all(text, &vec![REDACTED; self.values.len()]),
        }
    }

    /// A streaming redactor over these secrets.
    pub fn redactor(&self) -> Redactor {
        Redactor {
            matcher: self.matcher.clone(),
            max_len: self.max_len,
            carry: Vec::new(),
            redactions: 0,
        }
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets({} values)", self.values.len())
    }
}

/// Replaces secret values in a byte stream with [`REDACTED`], even when a
/// value straddles two reads.
///
/// It holds back at most `max_len - 1` bytes between calls (a possible
/// secret prefix). The output of any chunking equals the leftmost-longest
/// redaction of the whole stream at once. With no secrets it passes bytes
/// through untouched and holds nothing.
#[derive(Clone)]
pub struct Redactor {
    matcher: Option<AhoCorasick>,
    max_len: usize,
    carry: Vec<u8>,
    redactions: u64,
}

impl Redactor {
    /// A redactor that redacts nothing.
    pub fn passthrough() -> Redactor {
        Secrets::default().redactor()
    }

    /// Feeds `input`; redacted output is handed to `out` (possibly in several
    /// slices, possibly none yet).
    pub fn push(&mut self, input: &[u8], mut out: impl FnMut(&[u8])) {
        let Redactor {
            matcher,
            max_len,
            carry,
            redactions,
        } = self;
        let Some(matcher) = matcher.as_ref() else {
            out(input);
            return;
        };
        let max_len = *max_len;
        if input.len() < max_len {
            // Small input: decide over carry + input as one buffer.
            carry.extend_from_slice(input);
            let emit_to = emit_final(matcher, max_len, carry, redactions, &mut out);
            carry.drain(..emit_to);
            return;
        }
        // Large input: settle the held-back bytes against the first
        // `max_len` input bytes (enough to finish any match that starts in
        // them), then scan the input in place instead of copying it.
        let mut off = 0;
        if !carry.is_empty() {
            let held = carry.len();
            carry.extend_from_slice(&input[..max_len]);
            let pos = scan(matcher, carry, held, redactions, &mut out);
            if pos < held {
                out(&carry[pos..held]);
            }
            off = pos.max(held) - held;
            carry.clear();
        }
        let rest = &input[off..];
        let emit_to = emit_final(matcher, max_len, rest, redactions, &mut out);
        carry.extend_from_slice(&rest[emit_to..]);
    }

    /// Flushes the held-back bytes at end of stream.
    pub fn finish(&mut self, mut out: impl FnMut(&[u8])) {
        let Some(matcher) = &self.matcher else {
            return;
        };
        let buf = std::mem::take(&mut self.carry);
        let mut pos = 0;
        for m in matcher.find_iter(buf.as_slice()) {
            out(&buf[pos..m.start()]);
            out(REDACTED.as_bytes());
            self.redactions += 1;
            pos = m.end();
        }
        out(&buf[pos..]);
    }

    /// How many secret occurrences were replaced so far.
    pub fn redactions(&self) -> u64 {
        self.redactions
    }

    /// Bytes currently held back (always `< max_len`).
    pub fn held(&self) -> usize {
        self.carry.len()
    }
}

/// Emits `buf` up to where every decision is final (`len - (max_len - 1)`,
/// or the end of a match that starts before that) and returns that offset.
fn emit_final(
    matcher: &AhoCorasick,
    max_len: usize,
    buf: &[u8],
    redactions: &mut u64,
    out: &mut impl FnMut(&[u8]),
) -> usize {
    // A match starting before `safe_end` lies wholly inside `buf` for every
    // secret length, so deciding there is final.
    let safe_end = buf.len().saturating_sub(max_len - 1);
    let pos = scan(matcher, buf, safe_end, redactions, out);
    let emit_to = safe_end.max(pos);
    if emit_to > pos {
        out(&buf[pos..emit_to]);
    }
    emit_to
}

/// Emits `buf` with every match that starts before `limit` replaced by the
/// marker, up to the end of the last such match; returns that offset
/// (0 if none). Bytes after it are not emitted.
fn scan(
    matcher: &AhoCorasick,
    buf: &[u8],
    limit: usize,
    redactions: &mut u64,
    out: &mut impl FnMut(&[u8]),
) -> usize {
    let mut pos = 0;
    for m in matcher.find_iter(buf) {
        if m.start() >= limit {
            break;
        }
        out(&buf[pos..m.start()]);
        out(REDACTED.as_bytes());
        *redactions += 1;
        pos = m.end();
    }
    pos
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Redactor(holding {} bytes)", self.carry.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::invocation::{Invocation, InvocationSpec};
    use proptest::prelude::*;

    fn os(v: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        v.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    fn names(b: &Baseline) -> Vec<String> {
        b.iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_posix_baseline_keeps_only_the_listed_variables() {
        let parent = os(&[
            ("PATH", "/bin"),
            ("HOME", "/root"),
            ("LC_TIME", "C"),
            ("TMPDIR", "/tmp"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("LD_PRELOAD", "/evil.so"),
            ("CUSTODIAN_PARENT_ONLY", "1"),
            ("path", "/lower"),
        ]);
        let b = Baseline::from_vars(Platform::Posix, parent);
        assert_eq!(names(&b), ["PATH", "HOME", "LC_TIME", "TMPDIR"]);
    }

    #[test]
    fn a_missing_posix_path_gets_the_default() {
        let b = Baseline::from_vars(Platform::Posix, os(&[("HOME", "/h")]));
        let path: Vec<_> = b.iter().filter(|(k, _)| *k == "PATH").collect();
        assert_eq!(path, [(OsStr::new("PATH"), OsStr::new(DEFAULT_POSIX_PATH))]);
        let w = Baseline::from_vars(Platform::Windows, os(&[("TEMP", "C:\\t")]));
        assert_eq!(names(&w), ["TEMP"]);
    }

    #[test]
    fn the_windows_baseline_matches_names_case_insensitively() {
        let parent = os(&[
            ("Path", "C:\\bin"),
            ("SYSTEMROOT", "C:\\Windows"),
            ("PATHEXT", ".COM;.EXE;.BAT;.CMD"),
            ("ComSpec", "cmd.exe"),
            ("HOME", "/posix/only"),
        ]);
        let b = Baseline::from_vars(Platform::Windows, parent);
        assert_eq!(names(&b), ["Path", "SYSTEMROOT"]);
        let overlay = Invocation::validate(
            InvocationSpec::new("x.exe").with_env("PATH", EnvValue::Literal("D:\\x".into())),
        )
        .unwrap();
        let env = ChildEnv::build_for(Platform::Windows, &b, overlay.env(), &NoSecrets).unwrap();
        assert_eq!(env.path(), Some(OsStr::new("D:\\x")));
        assert_eq!(env.vars().count(), 2, "the overlay replaced `Path`");
    }

    fn overlay(entries: &[(&str, EnvValue)]) -> EnvOverlay {
        EnvOverlay::new(
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn the_overlay_follows_and_replaces_the_baseline() {
        let b = Baseline::from_vars(Platform::Posix, os(&[("PATH", "/bin"), ("HOME", "/h")]));
        let o = overlay(&[
            ("PATH", EnvValue::Literal("/opt/bin".into())),
            ("TOKEN", EnvValue::Secret(SecretRef::new("gh"))),
        ]);
        let resolver = |r: &SecretRef| {
            assert_eq!(r.as_str(), "gh");
            Ok(SecretValue::new("s3cr3t"))
        };
        let env = ChildEnv::build_for(Platform::Posix, &b, &o, &resolver).unwrap();
        let vars: Vec<_> = env
            .vars()
            .map(|(k, v)| (k.to_str().unwrap(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            vars,
            [("HOME", "/h"), ("PATH", "/opt/bin"), ("TOKEN", "s3cr3t")]
        );
        assert_eq!(env.path(), Some(OsStr::new("/opt/bin")));
        assert!(!format!("{env:?}").contains("s3cr3t"));
        assert_eq!(env.secrets().redact_str("a s3cr3t b"), "a [REDACTED] b");
    }

    #[test]
    fn resolution_errors_are_typed_and_hold_no_value() {
        let b = Baseline::default();
        let o = overlay(&[
            ("A", EnvValue::Literal("1".into())),
            ("B_KEY", EnvValue::Secret(SecretRef::new("missing"))),
        ]);
        let err = ChildEnv::build_for(Platform::Posix, &b, &o, &NoSecrets).unwrap_err();
        assert_eq!(
            err,
            EnvError::Secret {
                index: 1,
                source: SecretError::NotFound
            }
        );
        let nul = |_: &SecretRef| Ok(SecretValue::new("pa\0ss"));
        let err = ChildEnv::build_for(Platform::Posix, &b, &o, &nul).unwrap_err();
        assert_eq!(err, EnvError::SecretNul { index: 1 });
        let text = format!("{err} {err:?}");
        assert!(!text.contains("B_KEY") && !text.contains("pa") && !text.contains("missing"));
    }

    fn redact_chunks(secrets: &Secrets, chunks: &[&[u8]]) -> (Vec<u8>, u64) {
        let mut r = secrets.redactor();
        let mut out = Vec::new();
        for c in chunks {
            r.push(c, |b| out.extend_from_slice(b));
            assert!(r.held() < secrets.max_len().max(1));
        }
        r.finish(|b| out.extend_from_slice(b));
        (out, r.redactions())
    }

    #[test]
    fn a_secret_straddling_two_reads_is_redacted() {
        let s = Secrets::new(vec![SecretValue::new("hunter2")]);
        let (out, n) = redact_chunks(&s, &[b"pass=hun", b"ter2\n"]);
        assert_eq!(out, b"pass=[REDACTED]\n");
        assert_eq!(n, 1);
    }

    #[test]
    fn without_secrets_the_redactor_holds_nothing() {
        let s = Secrets::new(vec![SecretValue::new("")]);
        assert!(s.is_empty());
        let mut r = s.redactor();
        let mut got = Vec::new();
        r.push(b"abc", |b| got.extend_from_slice(b));
        assert_eq!(got, b"abc");
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn the_longest_overlapping_secret_wins() {
        let s = Secrets::new(vec![SecretValue::new("abc"), SecretValue::new("abcdef")]);
        let (out, _) = redact_chunks(&s, &[b"xabcd", b"efabcx"]);
        assert_eq!(out, b"x[REDACTED][REDACTED]x");
    }

    proptest! {
        #[test]
        fn a_secret_at_every_split_point_is_redacted(
            secret in "[a-z0-9]{1,24}",
            pre in proptest::collection::vec(any::<u8>(), 0..40),
            post in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let s = Secrets::new(vec![SecretValue::new(secret.clone())]);
            let mut stream = pre.clone();
            stream.extend_from_slice(secret.as_bytes());
            stream.extend_from_slice(&post);
            let (whole, _) = redact_chunks(&s, &[&stream]);
            for split in 0..=stream.len() {
                let (a, b) = stream.split_at(split);
                let (out, n) = redact_chunks(&s, &[a, b]);
                prop_assert_eq!(&out, &whole);
                prop_assert!(n >= 1);
                prop_assert!(!out.windows(secret.len()).any(|w| w == secret.as_bytes()));
            }
        }

        #[test]
        fn any_chunking_redacts_like_the_whole(
            secrets in proptest::collection::vec("[ab]{1,5}", 1..4),
            stream in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'c')], 0..80),
            cuts in proptest::collection::vec(0usize..80, 0..8),
        ) {
            let s = Secrets::new(secrets.iter().map(|v| SecretValue::new(v.clone())).collect());
            let (whole, wn) = redact_chunks(&s, &[&stream]);
            let one_shot = s.redact_str(std::str::from_utf8(&stream).unwrap());
            prop_assert_eq!(&whole, one_shot.as_bytes());
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(stream.len())).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut last = 0;
            for c in cuts { chunks.push(&stream[last..c]); last = c; }
            chunks.push(&stream[last..]);
            let (out, n) = redact_chunks(&s, &chunks);
            prop_assert_eq!(out, whole);
            prop_assert_eq!(n, wn);
        }
    }
}
