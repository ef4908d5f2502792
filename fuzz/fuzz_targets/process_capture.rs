//! Arbitrary bytes in arbitrary chunkings, through the redactor and the
//! capture: the text is valid UTF-8, the counters are consistent, the budget
//! holds, chunking does not change the result, and no secret survives.
#![no_main]

use arbitrary::Arbitrary;
use custodian::process::capture::{MAX_MARKER_LEN, StreamCapture, StreamEnd};
use custodian::process::env::{SecretValue, Secrets};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    budget: u16,
    secrets: Vec<String>,
    chunks: Vec<Vec<u8>>,
}

fuzz_target!(|input: Input| {
    let budget = usize::from(input.budget % 4096);
    let secrets = Secrets::new(
        input
            .secrets
            .iter()
            .take(4)
            .map(|s| SecretValue::new(s.clone()))
            .collect(),
    );
    let mut chunked = StreamCapture::new(budget, secrets.redactor());
    let mut whole = StreamCapture::new(budget, secrets.redactor());
    let mut all = Vec::new();
    for c in &input.chunks {
        chunked.push(c);
        all.extend_from_slice(c);
    }
    whole.push(&all);
    let s = chunked.finish(StreamEnd::Closed);
    let w = whole.finish(StreamEnd::Closed);
    assert_eq!(s, w, "chunking changed the result");
    // `String` already guarantees valid UTF-8; check the counters.
    assert_eq!(s.bytes_kept + s.bytes_omitted, s.bytes_read);
    assert!(s.bytes_kept <= budget as u64);
    assert_eq!(s.truncated, s.bytes_omitted > 0);
    assert!(s.text.len() as u64 <= 3 * s.bytes_kept + MAX_MARKER_LEN as u64);
    if secrets.is_empty() {
        assert_eq!(s.bytes_read, all.len() as u64);
        if !s.truncated {
            assert_eq!(s.text, String::from_utf8_lossy(&all));
        }
    }
});
