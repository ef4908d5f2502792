//! Host patterns of a network allow-list (`confine::Network::Allow`): what a
//! confined process may reach through custodian's proxy, decided by the
//! host **name as requested** (the proxy resolves it, the sandbox has no
//! DNS of its own). Pure data and lexical matching, no I/O.
//!
//! A pattern is `NAME`, `*.NAME`, `NAME:PORT` or `*.NAME:PORT`:
//!
//! - `NAME` is a DNS name (labels of ASCII letters, digits, `-` and `_`,
//!   1–63 bytes each, at most 253 in all) or an IPv4 address, compared
//!   case-insensitively, a trailing dot ignored;
//! - `*.NAME` matches every name **beneath** `NAME` (`a.NAME`,
//!   `b.a.NAME`), never `NAME` itself, never `NAME.evil`;
//! - without a port a pattern allows the web's ports, 80 and 443
//!   ([`DEFAULT_PORTS`]); with one, that port only.
//!
//! IPv6 literals are refused (typed), as is anything else.

use std::fmt;

/// The most patterns in one allow-list.
pub const MAX_HOSTS: usize = 64;

/// The ports a pattern without one allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// One parsed allow-list pattern.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPattern {
    /// `*.NAME`: names beneath `name` only.
    wildcard: bool,
    /// Lower-case, no trailing dot.
    name: String,
    /// `None`: [`DEFAULT_PORTS`].
    port: Option<u16>,
}

/// Why a host pattern was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostPatternError {
    /// Empty, or only `*.`.
    Empty,
    /// A `*` anywhere but a leading `*.`.
    Wildcard,
    /// Not a number in 1–65535 after the last `:`.
    Port,
    /// A bracketed or bare IPv6 address.
    Ipv6,
    /// A label empty, longer than 63 bytes, or with a byte outside
    /// letters, digits, `-` and `_`; or the name longer than 253.
    Name,
}

impl HostPatternError {
    /// A stable code for errors and evidence.
    pub fn code(self) -> &'static str {
        match self {
            HostPatternError::Empty => "empty",
            HostPatternError::Wildcard => "bad_wildcard",
            HostPatternError::Port => "bad_port",
            HostPatternError::Ipv6 => "ipv6_unsupported",
            HostPatternError::Name => "bad_name",
        }
    }
}

impl fmt::Display for HostPatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HostPatternError::Empty => "empty host pattern",
            HostPatternError::Wildcard => "a wildcard is allowed only as a leading `*.`",
            HostPatternError::Port => "the port is not a number in 1-65535",
            HostPatternError::Ipv6 => "IPv6 addresses are not supported in an allow-list",
            HostPatternError::Name => "not a DNS name or IPv4 address",
        })
    }
}

impl std::error::Error for HostPatternError {}

/// A requested host normalized for matching: lower-case, one trailing dot
/// dropped. `None` for what no pattern can match (empty, IPv6, a byte
/// outside a DNS name).
pub fn normalize_host(host: &str) -> Option<String> {
    let host = host.strip_suffix('.').unwrap_or(host);
    valid_name(host).then(|| host.to_ascii_lowercase())
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

impl HostPattern {
    /// Parses one pattern (see the module docs).
    ///
    /// # Errors
    ///
    /// The first rule broken, as a [`HostPatternError`].
    pub fn parse(text: &str) -> Result<HostPattern, HostPatternError> {
        if text.is_empty() {
            return Err(HostPatternError::Empty);
        }
        if text.starts_with('[') || text.matches(':').count() > 1 {
            return Err(HostPatternError::Ipv6);
        }
        let (host, port) = match text.rsplit_once(':') {
            Some((h, p)) => {
                let port = (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| p.parse::<u16>().ok())
                    .flatten()
                    .filter(|&p| p != 0)
                    .ok_or(HostPatternError::Port)?;
                (h, Some(port))
            }
            None => (text, None),
        };
        let (wildcard, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        if name.contains('*') {
            return Err(HostPatternError::Wildcard);
        }
        if name.is_empty() {
            return Err(HostPatternError::Empty);
        }
        let name = name.strip_suffix('.').unwrap_or(name);
        if !valid_name(name) {
            return Err(HostPatternError::Name);
        }
        Ok(HostPattern {
            wildcard,
            name: name.to_ascii_lowercase(),
            port,
        })
    }

    /// Whether a request for `host` (as [`normalize_host`] gives it) on
    /// `port` is allowed by this pattern.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        let port_ok = match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        };
        if !port_ok {
            return false;
        }
        if self.wildcard {
            host.len() > self.name.len() + 1
                && host.ends_with(self.name.as_str())
                && host.as_bytes()[host.len() - self.name.len() - 1] == b'.'
        } else {
            host == self.name
        }
    }
}

impl HostPattern {
    /// Whether every `host:port` this pattern allows is allowed by
    /// `grant` too (a policy's grant covering a run's allow-list).
    pub fn covered_by(&self, grant: &HostPattern) -> bool {
        let ports_ok = match (self.port, grant.port) {
            (Some(p), _) => grant.port.map_or(DEFAULT_PORTS.contains(&p), |g| g == p),
            (None, None) => true,
            (None, Some(_)) => false,
        };
        if !ports_ok {
            return false;
        }
        let beneath = |name: &str, base: &str| {
            name.len() > base.len()
                && name.ends_with(base)
                && name.as_bytes()[name.len() - base.len() - 1] == b'.'
        };
        match (self.wildcard, grant.wildcard) {
            (false, false) => self.name == grant.name,
            // Every name beneath ours is beneath the grant's when ours is
            // the grant's or beneath it.
            (true, true) => self.name == grant.name || beneath(&self.name, &grant.name),
            (false, true) => beneath(&self.name, &grant.name),
            (true, false) => false,
        }
    }
}

impl AllowList {
    /// Whether every pattern of this list is covered by one of `grant`'s.
    pub fn covered_by(&self, grant: &AllowList) -> bool {
        self.patterns
            .iter()
            .all(|p| grant.patterns.iter().any(|g| p.covered_by(g)))
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.wildcard {
            f.write_str("*.")?;
        }
        f.write_str(&self.name)?;
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// A parsed allow-list: what the proxy checks every request against.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AllowList {
    patterns: Vec<HostPattern>,
}

impl serde::Serialize for AllowList {
    /// The patterns' canonical texts.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.patterns.iter().map(ToString::to_string))
    }
}

impl AllowList {
    /// Parses every pattern of `texts`.
    ///
    /// # Errors
    ///
    /// The first pattern refused, with its text.
    pub fn parse<S: AsRef<str>>(texts: &[S]) -> Result<AllowList, (String, HostPatternError)> {
        let patterns = texts
            .iter()
            .map(|t| HostPattern::parse(t.as_ref()).map_err(|e| (t.as_ref().to_owned(), e)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AllowList { patterns })
    }

    /// The first pattern that allows `host:port`, if any. `host` is as
    /// requested; it is normalized here.
    pub fn allows(&self, host: &str, port: u16) -> Option<&HostPattern> {
        let host = normalize_host(host)?;
        self.patterns.iter().find(|p| p.matches(&host, port))
    }

    /// The patterns, in their canonical text.
    pub fn patterns(&self) -> impl Iterator<Item = &HostPattern> {
        self.patterns.iter()
    }

    /// Whether the list has no pattern.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Adds `other`'s patterns (a grant made of two).
    pub fn extend(&mut self, other: AllowList) {
        self.patterns.extend(other.patterns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(p: &[&str]) -> AllowList {
        AllowList::parse(p).expect("valid patterns")
    }

    #[test]
    fn a_plain_name_allows_itself_on_the_webs_ports_only() {
        let l = list(&["pypi.org"]);
        assert!(l.allows("pypi.org", 443).is_some());
        assert!(l.allows("PyPI.org.", 80).is_some());
        assert!(l.allows("pypi.org", 8080).is_none());
        assert!(l.allows("files.pypi.org", 443).is_none());
        assert!(l.allows("pypi.org.evil", 443).is_none());
        assert!(l.allows("evilpypi.org", 443).is_none());
    }

    #[test]
    fn a_wildcard_allows_names_beneath_and_never_the_name_or_a_suffix_trick() {
        let l = list(&["*.allowed.test"]);
        assert!(l.allows("a.allowed.test", 443).is_some());
        assert!(l.allows("b.a.allowed.test", 80).is_some());
        assert!(l.allows("allowed.test", 443).is_none());
        assert!(l.allows("allowed.test.evil", 443).is_none());
        assert!(l.allows("xallowed.test", 443).is_none());
        assert!(l.allows(".allowed.test", 443).is_none());
    }

    #[test]
    fn a_port_narrows_the_pattern_to_that_port() {
        let l = list(&["allowed.test:18080", "*.crates.io:8443"]);
        assert!(l.allows("allowed.test", 18080).is_some());
        assert!(l.allows("allowed.test", 443).is_none());
        assert!(l.allows("static.crates.io", 8443).is_some());
        assert!(l.allows("static.crates.io", 443).is_none());
        assert!(list(&["127.0.0.1:9"]).allows("127.0.0.1", 9).is_some());
    }

    #[test]
    fn bad_patterns_are_refused_with_a_reason() {
        for (text, why) in [
            ("", HostPatternError::Empty),
            ("*.", HostPatternError::Empty),
            ("*", HostPatternError::Wildcard),
            ("a.*.b", HostPatternError::Wildcard),
            ("**.b", HostPatternError::Wildcard),
            ("host:0", HostPatternError::Port),
            ("host:65536", HostPatternError::Port),
            ("host:", HostPatternError::Port),
            ("host:+1", HostPatternError::Port),
            ("[::1]:80", HostPatternError::Ipv6),
            ("::1", HostPatternError::Ipv6),
            ("a..b", HostPatternError::Name),
            ("a b", HostPatternError::Name),
            ("http://a", HostPatternError::Port),
            ("a/b", HostPatternError::Name),
        ] {
            assert_eq!(HostPattern::parse(text), Err(why), "{text:?}");
        }
        let long = format!("{}.x", "a".repeat(64));
        assert_eq!(HostPattern::parse(&long), Err(HostPatternError::Name));
    }

    #[test]
    fn requests_no_pattern_can_name_are_refused() {
        let l = list(&["*.test"]);
        assert!(l.allows("", 443).is_none());
        assert!(l.allows("[::1]", 443).is_none());
        assert!(l.allows("a.test/x", 443).is_none());
        assert!(l.allows("a.test@b.test", 443).is_none());
    }

    #[test]
    fn a_grant_covers_a_list_only_when_it_allows_everything_the_list_does() {
        let grant = list(&["pypi.org", "*.crates.io", "allowed.test:8080"]);
        for covered in [
            &["pypi.org"][..],
            &["pypi.org:443"],
            &["static.crates.io"],
            &["*.static.crates.io"],
            &["*.crates.io"],
            &["allowed.test:8080", "pypi.org:80"],
        ] {
            assert!(list(covered).covered_by(&grant), "{covered:?}");
        }
        for not in [
            &["pypi.org:8080"][..],
            &["crates.io"],
            &["*.io"],
            &["allowed.test"],
            &["allowed.test:8081"],
            &["files.pypi.org"],
            &["pypi.org", "evil.test"],
        ] {
            assert!(!list(not).covered_by(&grant), "{not:?}");
        }
    }

    #[test]
    fn patterns_print_canonically() {
        let l = list(&["*.Crates.IO", "Allowed.Test.:18080"]);
        let texts: Vec<String> = l.patterns().map(ToString::to_string).collect();
        assert_eq!(texts, ["*.crates.io", "allowed.test:18080"]);
    }
}
