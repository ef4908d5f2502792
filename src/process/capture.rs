//! Bounded capture of one output stream.
//!
//! A [`Capture`] keeps the first `budget / 2` bytes (the head) and the last
//! `budget - budget / 2` bytes (the tail, in a ring) of everything pushed
//! into it, and counts the rest. Memory is bounded by the budget whatever
//! the child writes. On [`Capture::finish`] the kept bytes become text:
//!
//! - the head is cut back to the last UTF-8 character boundary and the tail
//!   starts at the next one (at most 3 bytes each way move into the omitted
//!   count), so a character straddling the budget edge is never split into
//!   replacement characters;
//! - remaining invalid sequences are replaced with U+FFFD, one per maximal
//!   invalid sequence (as [`String::from_utf8_lossy`]), and counted;
//! - if anything was omitted, the marker `[... N bytes omitted ...]` on its
//!   own line sits between head and tail, and `truncated` is set.
//!
//! Counters: `bytes_read = bytes_kept + bytes_omitted`, `bytes_kept <=
//! budget`, and the text is at most `3 * bytes_kept` plus the marker
//! ([`MAX_MARKER_LEN`]).
//!
//! [`StreamCapture`] chains the feed order the launcher uses: raw bytes →
//! [`Redactor`] → [`Capture`]. Its counters are over the stream *after*
//! redaction, so they do not reveal a secret's length.

use serde::{Deserialize, Serialize};

use super::env::Redactor;

/// The longest omitted-bytes marker, in bytes.
pub const MAX_MARKER_LEN: usize = "\n[... 18446744073709551615 bytes omitted ...]\n".len();

/// How a stream ended (the one stream end of the crate, decided by the
/// process machine).
pub use crate::machine::process::StreamEnd;

/// One captured stream, as it appears in the evidence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CapturedStream {
    /// Head, omitted-bytes marker (if truncated) and tail, as valid UTF-8.
    pub text: String,
    /// Bytes received (after secret redaction).
    pub bytes_read: u64,
    /// Bytes of the stream kept in `text` (before U+FFFD replacement).
    pub bytes_kept: u64,
    /// Bytes dropped between head and tail.
    pub bytes_omitted: u64,
    /// Whether anything was omitted.
    pub truncated: bool,
    /// How many invalid UTF-8 sequences were replaced by U+FFFD.
    pub invalid_utf8_sequences: u64,
    /// How many secret values were replaced by the redaction marker.
    pub redactions: u64,
    /// How the stream ended.
    pub state: StreamEnd,
}

impl CapturedStream {
    /// An empty, closed stream (e.g. for a process that never ran).
    pub fn empty(state: StreamEnd) -> Self {
        CapturedStream {
            text: String::new(),
            bytes_read: 0,
            bytes_kept: 0,
            bytes_omitted: 0,
            truncated: false,
            invalid_utf8_sequences: 0,
            redactions: 0,
            state,
        }
    }
}

/// Bounded head + tail capture of one stream.
#[derive(Clone, Debug)]
pub struct Capture {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    /// A ring once full: the oldest byte is at `tail_start`.
    tail: Vec<u8>,
    tail_start: usize,
    bytes_read: u64,
}

impl Capture {
    /// A capture that keeps at most `budget` bytes.
    pub fn new(budget: usize) -> Capture {
        let head_cap = budget / 2;
        Capture {
            head_cap,
            tail_cap: budget - head_cap,
            head: Vec::new(),
            tail: Vec::new(),
            tail_start: 0,
            bytes_read: 0,
        }
    }

    /// The budget.
    pub fn budget(&self) -> usize {
        self.head_cap + self.tail_cap
    }

    /// Bytes pushed so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Appends `data`. Costs one copy of at most `budget` bytes, whatever
    /// `data.len()`.
    pub fn push(&mut self, mut data: &[u8]) {
        self.bytes_read += data.len() as u64;
        if self.head.len() < self.head_cap {
            let take = (self.head_cap - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
        if data.is_empty() || self.tail_cap == 0 {
            return;
        }
        if data.len() >= self.tail_cap {
            // The chunk alone fills the tail: only its end survives.
            self.tail.clear();
            self.tail
                .extend_from_slice(&data[data.len() - self.tail_cap..]);
            self.tail_start = 0;
            return;
        }
        if self.tail.len() < self.tail_cap {
            let take = (self.tail_cap - self.tail.len()).min(data.len());
            self.tail.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
        while !data.is_empty() {
            let n = (self.tail_cap - self.tail_start).min(data.len());
            self.tail[self.tail_start..self.tail_start + n].copy_from_slice(&data[..n]);
            self.tail_start = (self.tail_start + n) % self.tail_cap;
            data = &data[n..];
        }
    }

    /// Turns the kept bytes into the evidence form.
    pub fn finish(self, state: StreamEnd) -> CapturedStream {
        self.finish_with(state, 0)
    }

    fn finish_with(mut self, state: StreamEnd, redactions: u64) -> CapturedStream {
        let mut tail = std::mem::take(&mut self.tail);
        tail.rotate_left(self.tail_start);
        let mut head = self.head;
        let kept = (head.len() + tail.len()) as u64;
        let mut invalid = 0;
        if kept == self.bytes_read {
            head.extend_from_slice(&tail);
            let text = decode_lossy(&head, &mut invalid);
            return CapturedStream {
                text,
                bytes_read: self.bytes_read,
                bytes_kept: kept,
                bytes_omitted: 0,
                truncated: false,
                invalid_utf8_sequences: invalid,
                redactions,
                state,
            };
        }
        head.truncate(char_boundary_before_end(&head));
        let skip = char_boundary_after_start(&tail);
        let tail = &tail[skip..];
        let kept = (head.len() + tail.len()) as u64;
        let omitted = self.bytes_read - kept;
        let mut text = decode_lossy(&head, &mut invalid);
        text.push_str(&format!("\n[... {omitted} bytes omitted ...]\n"));
        text.push_str(&decode_lossy(tail, &mut invalid));
        CapturedStream {
            text,
            bytes_read: self.bytes_read,
            bytes_kept: kept,
            bytes_omitted: omitted,
            truncated: true,
            invalid_utf8_sequences: invalid,
            redactions,
            state,
        }
    }
}

/// The width of the UTF-8 sequence that `lead` starts, if it is a lead byte.
fn lead_width(lead: u8) -> Option<usize> {
    match lead {
        0xC2..=0xDF => Some(2),
        0xE0..=0xEF => Some(3),
        0xF0..=0xF4 => Some(4),
        _ => None,
    }
}

fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// Where to cut `head` so that it does not end inside a character: drops an
/// incomplete (but so far well-formed) multi-byte prefix at the end.
fn char_boundary_before_end(head: &[u8]) -> usize {
    let len = head.len();
    for back in 1..=3.min(len) {
        let b = head[len - back];
        if is_continuation(b) {
            continue;
        }
        return match lead_width(b) {
            Some(w) if w > back => len - back,
            _ => len,
        };
    }
    len
}

/// How many bytes at the start of `tail` belong to a character whose lead
/// byte was omitted (at most 3 continuation bytes).
fn char_boundary_after_start(tail: &[u8]) -> usize {
    tail.iter()
        .take(3)
        .take_while(|&&b| is_continuation(b))
        .count()
}

fn decode_lossy(bytes: &[u8], invalid: &mut u64) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        if !chunk.invalid().is_empty() {
            out.push(char::REPLACEMENT_CHARACTER);
            *invalid += 1;
        }
    }
    out
}

/// One stream's feed path: raw bytes → [`Redactor`] → [`Capture`].
#[derive(Debug)]
pub struct StreamCapture {
    redactor: Redactor,
    capture: Capture,
    /// A session's log, fed the same redacted bytes as the capture.
    tap: Option<(
        std::sync::Arc<super::session::SessionShared>,
        crate::machine::process::Stream,
    )>,
}

impl StreamCapture {
    /// A capture of at most `budget` bytes behind `redactor` (use
    /// [`Redactor::passthrough`] when there are no secrets).
    pub fn new(budget: usize, redactor: Redactor) -> StreamCapture {
        StreamCapture {
            redactor,
            capture: Capture::new(budget),
            tap: None,
        }
    }

    /// Also feeds what passes the redactor to a session's log.
    pub(crate) fn tapped(
        mut self,
        session: Option<&std::sync::Arc<super::session::SessionShared>>,
        stream: crate::machine::process::Stream,
    ) -> Self {
        self.tap = session.map(|s| (s.clone(), stream));
        self
    }

    /// Feeds bytes read from the pipe.
    pub fn push(&mut self, data: &[u8]) {
        let capture = &mut self.capture;
        let tap = self.tap.as_ref();
        self.redactor.push(data, |b| {
            capture.push(b);
            if let Some((log, stream)) = tap {
                log.push(*stream, b);
            }
        });
    }

    /// Bytes that passed the redactor so far (the counter the evidence's
    /// `bytes_read` ends at).
    pub fn bytes_read(&self) -> u64 {
        self.capture.bytes_read()
    }

    /// Flushes the redactor and returns the evidence form.
    pub fn finish(mut self, state: StreamEnd) -> CapturedStream {
        let capture = &mut self.capture;
        let tap = self.tap.as_ref();
        self.redactor.finish(|b| {
            capture.push(b);
            if let Some((log, stream)) = tap {
                log.push(*stream, b);
            }
        });
        let redactions = self.redactor.redactions();
        self.capture.finish_with(state, redactions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::env::{SecretValue, Secrets};
    use proptest::prelude::*;

    fn capture(budget: usize, chunks: &[&[u8]]) -> CapturedStream {
        let mut c = Capture::new(budget);
        for ch in chunks {
            c.push(ch);
        }
        c.finish(StreamEnd::Closed)
    }

    #[test]
    fn small_output_is_kept_whole() {
        let s = capture(16, &[b"hello ", b"world"]);
        assert_eq!(s.text, "hello world");
        assert_eq!((s.bytes_read, s.bytes_kept, s.bytes_omitted), (11, 11, 0));
        assert!(!s.truncated);
    }

    #[test]
    fn large_output_keeps_head_and_tail_around_a_marker() {
        let data: Vec<u8> = (0..100u8).map(|i| b'a' + i % 26).collect();
        let s = capture(10, &[&data[..33], &data[33..34], &data[34..]]);
        assert_eq!(s.text, "abcde\n[... 90 bytes omitted ...]\nrstuv");
        assert_eq!((s.bytes_read, s.bytes_kept, s.bytes_omitted), (100, 10, 90));
        assert!(s.truncated);
    }

    #[test]
    fn the_tail_ring_wraps_with_small_chunks() {
        let data: Vec<u8> = (0..50u8).map(|i| b'0' + i % 10).collect();
        let mut c = Capture::new(8);
        for b in &data {
            c.push(std::slice::from_ref(b));
        }
        let s = c.finish(StreamEnd::HeldOpen);
        assert_eq!(s.text, "0123\n[... 42 bytes omitted ...]\n6789");
        assert_eq!(s.state, StreamEnd::HeldOpen);
    }

    #[test]
    fn a_zero_budget_keeps_only_the_count() {
        let s = capture(0, &[b"abc"]);
        assert_eq!(s.text, "\n[... 3 bytes omitted ...]\n");
        assert_eq!((s.bytes_kept, s.bytes_omitted), (0, 3));
    }

    #[test]
    fn a_character_straddling_the_budget_edge_is_not_split() {
        // "é" is C3 A9: the head (3 bytes) ends in its lead byte, the tail
        // (3 bytes) starts with the continuation byte of "ü" (C3 BC).
        let data = "ab\u{e9}xyz-----\u{fc}cd".as_bytes();
        assert_eq!(&data[2..4], [0xC3, 0xA9]);
        let s = capture(6, &[&data[..3], &data[3..]]);
        assert_eq!(s.invalid_utf8_sequences, 0, "{:?}", s.text);
        assert!(s.text.starts_with("ab\n[..."), "{:?}", s.text);
        assert!(s.text.ends_with("...]\ncd"), "{:?}", s.text);
        assert_eq!(s.bytes_kept + s.bytes_omitted, s.bytes_read);
        assert!(s.bytes_kept <= 6);
    }

    #[test]
    fn the_tail_skips_orphan_continuation_bytes() {
        // Tail keeps the last 4 bytes: A9 'x' 'y' 'z' — A9 lost its lead.
        let data = "......\u{e9}xyz".as_bytes();
        let s = capture(8, &[data]);
        assert!(s.text.ends_with("]\nxyz"), "{:?}", s.text);
        assert_eq!(s.invalid_utf8_sequences, 0);
        assert_eq!(s.bytes_kept, 7);
    }

    #[test]
    fn a_character_split_across_reads_decodes_whole() {
        let s = capture(64, &[b"a\xE2\x82", b"\xACb"]);
        assert_eq!(s.text, "a\u{20ac}b");
        assert_eq!(s.invalid_utf8_sequences, 0);
    }

    #[test]
    fn invalid_sequences_are_replaced_and_counted() {
        let s = capture(64, &[b"a\xFFb\xC3(c\xE2\x82"]);
        assert_eq!(s.text, "a\u{FFFD}b\u{FFFD}(c\u{FFFD}");
        assert_eq!(s.invalid_utf8_sequences, 3);
    }

    #[test]
    fn stream_capture_redacts_before_capturing() {
        let secrets = Secrets::new(vec![SecretValue::new("hunter2")]);
        let mut sc = StreamCapture::new(1024, secrets.redactor());
        sc.push(b"token=hun");
        sc.push(b"ter2!");
        let s = sc.finish(StreamEnd::Closed);
        assert_eq!(s.text, "token=[REDACTED]!");
        assert_eq!(s.redactions, 1);
        assert_eq!(s.bytes_read, s.text.len() as u64);
    }

    #[test]
    fn a_secret_in_the_omitted_middle_is_counted_not_shown() {
        let secrets = Secrets::new(vec![SecretValue::new("hunter2")]);
        let mut sc = StreamCapture::new(8, secrets.redactor());
        sc.push(b"aaaaaaaaaahun");
        sc.push(b"ter2bbbbbbbbbbb");
        let s = sc.finish(StreamEnd::Closed);
        assert!(!s.text.contains("hunter2"));
        assert_eq!(s.redactions, 1);
    }

    fn check(s: &CapturedStream, budget: usize, input_len: u64) -> Result<(), TestCaseError> {
        prop_assert_eq!(s.bytes_read, input_len);
        prop_assert_eq!(s.bytes_kept + s.bytes_omitted, s.bytes_read);
        prop_assert!(s.bytes_kept <= budget as u64);
        prop_assert_eq!(s.truncated, s.bytes_omitted > 0);
        prop_assert!(s.text.len() as u64 <= 3 * s.bytes_kept + MAX_MARKER_LEN as u64);
        Ok(())
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_in_arbitrary_chunkings(
            data in proptest::collection::vec(any::<u8>(), 0..400),
            cuts in proptest::collection::vec(0usize..400, 0..10),
            budget in 0usize..64,
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.sort_unstable();
            let mut c = Capture::new(budget);
            let mut whole = Capture::new(budget);
            whole.push(&data);
            let mut last = 0;
            for cut in cuts { c.push(&data[last..cut]); last = cut; }
            c.push(&data[last..]);
            let s = c.finish(StreamEnd::Closed);
            check(&s, budget, data.len() as u64)?;
            // Chunking never changes the result.
            prop_assert_eq!(&s, &whole.finish(StreamEnd::Closed));
            if !s.truncated {
                prop_assert_eq!(s.text, String::from_utf8_lossy(&data));
            }
        }

        #[test]
        fn valid_utf8_is_never_mangled(
            text in "\\PC{0,120}",
            budget in 0usize..48,
            cut in 0usize..500,
        ) {
            let data = text.as_bytes();
            let cut = cut.min(data.len());
            let s = capture(budget, &[&data[..cut], &data[cut..]]);
            check(&s, budget, data.len() as u64)?;
            prop_assert_eq!(s.invalid_utf8_sequences, 0);
            let repl = char::REPLACEMENT_CHARACTER;
            prop_assert!(!s.text.contains(repl) || text.contains(repl), "mangled");
        }
    }
}
