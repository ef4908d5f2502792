//! Fuzzes the node's view of the wire: arbitrary bytes are split into frames
//! by the bounded frame reader and each frame is decoded.
//!
//! Oracles, checked for every input: nothing panics; no frame handed to the
//! decoder exceeds the maximum frame size (memory is bounded by it, not by
//! the input); a frame that decodes re-encodes to a line that decodes to the
//! same request; a refused frame's error response is itself one valid
//! response line that never echoes more than the salvaged `seq` and id.
#![no_main]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use custodian::wire::codec::{decode_response, encode_line, encode_request};
use custodian::wire::{FrameError, FrameReader, decode_request};

const MAX_FRAME: usize = 4096;

/// Polls a future over in-memory input to completion; `&[u8]` never
/// returns `Pending`.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut reader = FrameReader::new(data, MAX_FRAME);
    loop {
        match block_on(reader.next_frame()) {
            Ok(None) | Err(FrameError::Truncated) | Err(FrameError::Io(_)) => break,
            Err(FrameError::TooLarge { limit }) => assert_eq!(limit, MAX_FRAME),
            Err(_) => break,
            Ok(Some(frame)) => {
                assert!(frame.len() <= MAX_FRAME);
                assert!(!frame.contains(&b'\n'));
                match decode_request(frame) {
                    Ok(req) => {
                        let mut line = Vec::new();
                        encode_request(req.seq, req.op.clone(), &mut line);
                        let again = decode_request(&line[..line.len() - 1]).expect("re-decodes");
                        assert_eq!(again, req);
                    }
                    Err(e) => {
                        let mut line = Vec::new();
                        encode_line(&e.response(), &mut line);
                        assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
                        let resp =
                            decode_response(&line[..line.len() - 1]).expect("valid response");
                        assert_eq!(resp.seq, e.seq);
                    }
                }
                // The edge's decoder sees the same bytes too.
                let _ = decode_response(frame);
            }
        }
    }
});
