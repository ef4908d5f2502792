//! JSON-lines framing with a maximum frame size, and the pure decoders.
//!
//! A frame is the bytes up to a `\n` (a trailing `\r` is dropped, blank
//! lines are skipped). The reader never holds more than `max_frame` bytes
//! of one frame: an oversized frame is discarded up to its newline as it
//! streams past and reported as [`FrameError::TooLarge`], after which the
//! next frame is read normally. serde_json never writes a raw newline inside
//! a string, so an encoded message is always exactly one line.
//!
//! The splitting and the bounded discard are tokio-util's
//! [`AnyDelimiterCodec`] (with `\n` as the delimiter and `max_frame` as its
//! maximum length) driven by a [`FramedRead`]. Two rules of the wire
//! contract (`docs/contracts/edge-node-wire.md`) are not what its sibling
//! `LinesCodec` does, and decide the choice and the one override here:
//!
//! - a frame that is not UTF-8 is answered `malformed_frame` and the next
//!   frame is read normally. `LinesCodec` consumes such a line and reports an
//!   `io::Error`, after which `FramedRead` ends the stream; the byte codec
//!   hands the bytes on and serde_json refuses them while decoding.
//! - a stream ending inside a frame is `truncated_frame`. Both codecs return
//!   the unterminated rest as a last frame at end of stream, so
//!   `FrameCodec::decode_eof` reports it as [`FrameError::Truncated`]
//!   instead.

use std::io;
use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use futures_core::Stream;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError, Decoder, FramedRead};

use super::message::{
    Code, Operation, RequestFrame, Response, ResponseFrame, VERSION, codes, terminal_size_ok,
};
use crate::error::SafeCode;
use crate::request::RequestId;

/// The default maximum frame size: 1 MiB.
pub const DEFAULT_MAX_FRAME: usize = 1 << 20;

/// Why no frame could be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// A frame exceeded the maximum size; it was discarded up to its
    /// newline and reading can go on.
    #[error("frame exceeds the maximum of {limit} bytes")]
    TooLarge {
        /// The maximum frame size in force.
        limit: usize,
    },
    /// The stream ended in the middle of a frame.
    #[error("stream ended in the middle of a frame")]
    Truncated,
    /// Reading failed.
    #[error("reading a frame failed")]
    Io(#[from] io::Error),
}

impl FrameError {
    /// The safe code that answers this error on the wire.
    pub fn code(&self) -> SafeCode {
        match self {
            FrameError::TooLarge { .. } => codes::FRAME_TOO_LARGE,
            FrameError::Truncated | FrameError::Io(_) => codes::TRUNCATED_FRAME,
        }
    }
}

/// What the codec yields: a complete line (without its `\n`), or the news
/// that one was too long and is being discarded.
#[derive(Debug)]
enum Chunk {
    Line(Bytes),
    TooLarge,
}

/// [`AnyDelimiterCodec`] split at `\n`, with an oversized line as an item
/// (so `FramedRead` goes on reading) and an unterminated tail at end of
/// stream as [`FrameError::Truncated`].
#[derive(Debug)]
struct FrameCodec {
    lines: AnyDelimiterCodec,
    max_frame: usize,
    /// An oversized frame is being discarded up to its newline (the
    /// codec's own flag is private; this one mirrors it).
    discarding: bool,
}

impl FrameCodec {
    fn new(max_frame: usize) -> Self {
        FrameCodec {
            lines: AnyDelimiterCodec::new_with_max_length(b"\n".to_vec(), Vec::new(), max_frame),
            max_frame,
            discarding: false,
        }
    }
}

impl Decoder for FrameCodec {
    type Item = Chunk;
    type Error = FrameError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Chunk>, FrameError> {
        if self.discarding && buf.contains(&b'\n') {
            // The codec stops discarding at this newline.
            self.discarding = false;
        }
        match self.lines.decode(buf) {
            Ok(line) => Ok(line.map(Chunk::Line)),
            // The codec now discards up to the next newline.
            Err(AnyDelimiterCodecError::MaxChunkLengthExceeded) => {
                self.discarding = true;
                Ok(Some(Chunk::TooLarge))
            }
            Err(AnyDelimiterCodecError::Io(e)) => Err(FrameError::Io(e)),
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Chunk>, FrameError> {
        match self.decode(buf)? {
            Some(chunk) => Ok(Some(chunk)),
            // While discarding, the codec has already dropped every byte.
            None if buf.is_empty() => Ok(None),
            None => {
                buf.clear();
                // The codec remembers how far it searched `buf`; a reader
                // that yields more after its end must start afresh.
                *self = FrameCodec::new(self.max_frame);
                Err(FrameError::Truncated)
            }
        }
    }
}

/// Reads newline-delimited frames of at most `max_frame` bytes.
#[derive(Debug)]
pub struct FrameReader<R> {
    frames: FramedRead<R, FrameCodec>,
    frame: Bytes,
    max_frame: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Wraps a reader (it is read in chunks; it need not be buffered).
    pub fn new(inner: R, max_frame: usize) -> Self {
        FrameReader {
            frames: FramedRead::new(inner, FrameCodec::new(max_frame)),
            frame: Bytes::new(),
            max_frame,
        }
    }

    /// Whether part of a frame has been read and its newline has not: bytes
    /// are buffered, or an oversized frame is being discarded.
    pub fn mid_frame(&self) -> bool {
        !self.frames.read_buffer().is_empty() || self.frames.decoder().discarding
    }

    /// Reads the next non-blank frame; `Ok(None)` at a clean end of stream.
    ///
    /// # Errors
    ///
    /// [`FrameError::TooLarge`] for an oversized frame (skipped as it
    /// streams past: call again for the next one), [`FrameError::Truncated`]
    /// when the stream ends inside a frame, [`FrameError::Io`] when reading
    /// fails.
    pub async fn next_frame(&mut self) -> Result<Option<&[u8]>, FrameError> {
        loop {
            let next = std::future::poll_fn(|cx| Pin::new(&mut self.frames).poll_next(cx)).await;
            let mut line = match next {
                None => return Ok(None),
                Some(Err(e)) => return Err(e),
                Some(Ok(Chunk::TooLarge)) => {
                    return Err(FrameError::TooLarge {
                        limit: self.max_frame,
                    });
                }
                Some(Ok(Chunk::Line(line))) => line,
            };
            if line.last() == Some(&b'\r') {
                line.truncate(line.len() - 1);
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            self.frame = line;
            return Ok(Some(&self.frame));
        }
    }
}

/// Appends `value` as one JSON line to `out`.
pub fn encode_line<T: serde::Serialize>(value: &T, out: &mut Vec<u8>) {
    // Serializing these message types cannot fail: every map key is a string
    // and no type has a fallible `Serialize`.
    serde_json::to_writer(&mut *out, value).expect("wire messages always serialize");
    out.push(b'\n');
}

/// Writes one already-encoded line and flushes.
///
/// # Errors
///
/// Any I/O error from the writer.
pub async fn write_line<W: AsyncWrite + Unpin>(w: &mut W, line: &[u8]) -> io::Result<()> {
    w.write_all(line).await?;
    w.flush().await
}

/// Writes every line received on `lines` to `write`, batching the lines
/// already queued into one flush, until the channel closes (then shuts the
/// write half down, so the peer reads end of stream) or a write fails.
/// Each side of a connection runs one of these as its only writer, so
/// frames never interleave.
pub(crate) async fn write_lines<W: AsyncWrite + Unpin>(
    write: W,
    mut lines: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
) {
    let mut w = tokio::io::BufWriter::new(write);
    while let Some(line) = lines.recv().await {
        if w.write_all(&line).await.is_err() {
            return;
        }
        while let Ok(more) = lines.try_recv() {
            if w.write_all(&more).await.is_err() {
                return;
            }
        }
        if w.flush().await.is_err() {
            return;
        }
    }
    let _ = w.shutdown().await;
}

/// A request frame that could not be decoded, with what could be salvaged
/// from it for the error response.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("undecodable request frame: {code}")]
pub struct DecodeError {
    /// The frame's `seq`, if it had a readable one.
    pub seq: Option<u64>,
    /// The frame's request id, if it had a valid one.
    pub request_id: Option<RequestId>,
    /// Why it was refused.
    pub code: SafeCode,
}

impl DecodeError {
    /// The error response answering this frame.
    pub fn response(&self) -> ResponseFrame {
        ResponseFrame {
            v: VERSION,
            seq: self.seq,
            result: Response::Error {
                request_id: self.request_id.clone(),
                code: Code::from(self.code),
            },
        }
    }
}

/// The operations of this version, for classifying a bad frame.
const KNOWN_OPS: [&str; 11] = [
    "open_workspace",
    "write_artifact",
    "run_process",
    "start_process",
    "read_output",
    "write_stdin",
    "signal_process",
    "resize_terminal",
    "list_processes",
    "cancel",
    "cleanup_workspace",
];

/// Decodes one request frame.
///
/// Never panics, whatever the bytes; memory is bounded by a constant factor
/// of the frame's length (serde_json also bounds nesting depth at 128).
///
/// # Errors
///
/// A [`DecodeError`] whose code says what was wrong: `malformed_frame` (not
/// UTF-8 JSON), `unsupported_version`, `unknown_op`, `invalid_request_id` or
/// `invalid_message`; it keeps `seq` and the request id when those were
/// readable so the error response can be routed.
pub fn decode_request(frame: &[u8]) -> Result<RequestFrame, DecodeError> {
    match serde_json::from_slice::<RequestFrame>(frame) {
        Ok(f) if f.v == VERSION => Ok(f),
        Ok(f) => Err(DecodeError {
            seq: Some(f.seq),
            request_id: Some(f.op.request_id().clone()),
            code: codes::UNSUPPORTED_VERSION,
        }),
        Err(_) => Err(classify(frame)),
    }
}

/// Works out why a frame failed to decode, salvaging `seq` and the request
/// id. Only runs on the error path.
fn classify(frame: &[u8]) -> DecodeError {
    let mut err = DecodeError {
        seq: None,
        request_id: None,
        code: codes::MALFORMED_FRAME,
    };
    let Ok(value) = serde_json::from_slice::<Value>(frame) else {
        return err;
    };
    let Value::Object(map) = value else {
        err.code = codes::INVALID_MESSAGE;
        return err;
    };
    err.seq = map.get("seq").and_then(Value::as_u64);
    let id = map.get("request_id").and_then(Value::as_str);
    err.request_id = id.and_then(|s| RequestId::new(s).ok());
    err.code = if map.get("v").and_then(Value::as_u64) != Some(u64::from(VERSION)) {
        codes::UNSUPPORTED_VERSION
    } else if !map
        .get("op")
        .and_then(Value::as_str)
        .is_some_and(|op| KNOWN_OPS.contains(&op))
    {
        codes::UNKNOWN_OP
    } else if id.is_some_and(|s| !RequestId::is_valid(s)) {
        codes::INVALID_REQUEST_ID
    } else if bad_terminal_size(&map) {
        codes::INVALID_TERMINAL_SIZE
    } else {
        codes::INVALID_MESSAGE
    };
    err
}

/// Whether the frame's operation takes a terminal size and `terminal` is
/// there but not one the wire accepts (`null` is no terminal for a
/// `start_process`).
fn bad_terminal_size(map: &serde_json::Map<String, Value>) -> bool {
    let Some(op) = map.get("op").and_then(Value::as_str) else {
        return false;
    };
    let terminal = match (op, map.get("terminal")) {
        ("start_process" | "resize_terminal", Some(t)) => t,
        _ => return false,
    };
    if op == "start_process" && terminal.is_null() {
        return false;
    }
    let side = |name| terminal.get(name).and_then(Value::as_u64);
    match (side("cols"), side("rows")) {
        (Some(cols), Some(rows)) => !terminal_size_ok(cols, rows),
        _ => true,
    }
}

/// A response frame the edge could not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("undecodable response frame")]
pub struct BadResponse;

/// Decodes one response frame (edge side).
///
/// # Errors
///
/// [`BadResponse`] when the frame is not a version-1 response.
pub fn decode_response(frame: &[u8]) -> Result<ResponseFrame, BadResponse> {
    match serde_json::from_slice::<ResponseFrame>(frame) {
        Ok(f) if f.v == VERSION => Ok(f),
        _ => Err(BadResponse),
    }
}

/// Encodes a request frame as one line (edge side).
pub fn encode_request(seq: u64, op: Operation, out: &mut Vec<u8>) {
    encode_line(
        &RequestFrame {
            v: VERSION,
            seq,
            op,
        },
        out,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::ReadBuf;

    /// Hands out at most 7 bytes per read, so frames and the limit fall
    /// across reads.
    struct Trickle<'a>(&'a [u8]);

    impl AsyncRead for Trickle<'_> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            let n = self.0.len().min(7).min(buf.remaining());
            buf.put_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            std::task::Poll::Ready(Ok(()))
        }
    }

    async fn frames(input: &[u8], max: usize) -> Vec<Result<Vec<u8>, String>> {
        let mut r = FrameReader::new(Trickle(input), max);
        let mut out = Vec::new();
        loop {
            match r.next_frame().await {
                Ok(Some(f)) => out.push(Ok(f.to_vec())),
                Ok(None) => return out,
                Err(e) => {
                    let truncated = matches!(e, FrameError::Truncated);
                    out.push(Err(e.code().to_string()));
                    if truncated {
                        return out;
                    }
                }
            }
        }
    }

    #[tokio::test]
    async fn oversized_frame_is_skipped_and_the_next_one_is_read() {
        let input = b"abc\n0123456789abcdef\r\n\n  \nxyz\r\n";
        let got = frames(input, 10).await;
        assert_eq!(
            got,
            vec![
                Ok(b"abc".to_vec()),
                Err("frame_too_large".into()),
                Ok(b"xyz".to_vec())
            ]
        );
    }

    #[tokio::test]
    async fn frame_of_exactly_the_limit_is_accepted() {
        let got = frames(b"0123456789\n01234567890\n", 10).await;
        assert_eq!(
            got,
            vec![Ok(b"0123456789".to_vec()), Err("frame_too_large".into())]
        );
    }

    #[tokio::test]
    async fn a_frame_that_is_not_utf8_is_handed_on_and_the_next_is_read() {
        let got = frames(b"\xff\xfe\n{}\n", 100).await;
        assert_eq!(got, vec![Ok(b"\xff\xfe".to_vec()), Ok(b"{}".to_vec())]);
    }

    #[tokio::test]
    async fn a_frame_split_across_reads_is_whole() {
        let (mut tx, rx) = tokio::io::duplex(64);
        let mut r = FrameReader::new(rx, 100);
        tokio::spawn(async move {
            for part in [&b"{\"a\""[..], b":1", b"}\r", b"\n"] {
                tx.write_all(part).await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        assert_eq!(r.next_frame().await.unwrap(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(r.next_frame().await.unwrap(), None);
    }

    #[test]
    fn the_codec_reads_on_after_a_truncated_tail() {
        // A reader may yield more after reporting its end (a terminal does).
        let mut codec = FrameCodec::new(100);
        let mut buf = BytesMut::from(&b"0123456789"[..]);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        assert!(matches!(
            codec.decode_eof(&mut buf),
            Err(FrameError::Truncated)
        ));
        buf.extend_from_slice(b"ab\n");
        match codec.decode(&mut buf) {
            Ok(Some(Chunk::Line(line))) => assert_eq!(&line[..], b"ab"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn unterminated_last_frame_is_truncated() {
        let got = frames(b"ok\npartial", 100).await;
        assert_eq!(got, vec![Ok(b"ok".to_vec()), Err("truncated_frame".into())]);
        // An oversized unterminated tail reports too-large, then a clean end.
        let got = frames(b"0123456789abc", 5).await;
        assert_eq!(got, vec![Err("frame_too_large".into())]);
    }

    #[test]
    fn request_round_trips() {
        let op = Operation::CleanupWorkspace {
            request_id: RequestId::new("r1").unwrap(),
        };
        let mut line = Vec::new();
        encode_request(9, op.clone(), &mut line);
        assert_eq!(
            std::str::from_utf8(&line).unwrap(),
            "{\"v\":1,\"seq\":9,\"op\":\"cleanup_workspace\",\"request_id\":\"r1\"}\n"
        );
        let f = decode_request(&line[..line.len() - 1]).unwrap();
        assert_eq!((f.seq, f.op), (9, op));
    }

    #[test]
    fn bad_frames_are_classified_with_what_can_be_salvaged() {
        type Case<'a> = (&'a [u8], &'a str, Option<u64>, Option<&'a str>);
        let cases: [Case<'_>; 15] = [
            (b"not json", "malformed_frame", None, None),
            (b"\xff\xfe", "malformed_frame", None, None),
            (b"[1,2]", "invalid_message", None, None),
            (
                br#"{"v":2,"seq":3,"op":"cancel","request_id":"r"}"#,
                "unsupported_version",
                Some(3),
                Some("r"),
            ),
            (
                br#"{"seq":3,"op":"cancel","request_id":"r"}"#,
                "unsupported_version",
                Some(3),
                Some("r"),
            ),
            (
                br#"{"v":1,"seq":4,"op":"rm_rf","request_id":"r"}"#,
                "unknown_op",
                Some(4),
                Some("r"),
            ),
            (
                br#"{"v":1,"seq":5,"op":"cancel","request_id":"../x"}"#,
                "invalid_request_id",
                Some(5),
                None,
            ),
            (
                br#"{"v":1,"seq":6,"op":"run_process","request_id":"r"}"#,
                "invalid_message",
                Some(6),
                Some("r"),
            ),
            (
                br#"{"v":1,"seq":-1,"op":"cancel","request_id":"r"}"#,
                "invalid_message",
                None,
                Some("r"),
            ),
            (
                br#"{"v":1,"seq":7,"op":"start_process","request_id":"r","executable":"sh","terminal":{"cols":1001,"rows":24}}"#,
                "invalid_terminal_size",
                Some(7),
                Some("r"),
            ),
            (
                br#"{"v":1,"seq":8,"op":"resize_terminal","request_id":"r","session_id":"s1","terminal":{"cols":80,"rows":0}}"#,
                "invalid_terminal_size",
                Some(8),
                Some("r"),
            ),
            (
                br#"{"v":1,"seq":9,"op":"resize_terminal","request_id":"r","session_id":"s1","terminal":{"cols":70000,"rows":24}}"#,
                "invalid_terminal_size",
                Some(9),
                Some("r"),
            ),
            (
                br#"{"v":1,"seq":10,"op":"resize_terminal","request_id":"r","session_id":"s1","terminal":"80x24"}"#,
                "invalid_terminal_size",
                Some(10),
                Some("r"),
            ),
            (
                br#"{"v":1,"seq":11,"op":"resize_terminal","request_id":"r","session_id":"s1"}"#,
                "invalid_message",
                Some(11),
                Some("r"),
            ),
            // A good size does not name a fault elsewhere in the frame.
            (
                br#"{"v":1,"seq":12,"op":"start_process","request_id":"r","terminal":{"cols":80,"rows":24}}"#,
                "invalid_message",
                Some(12),
                Some("r"),
            ),
        ];
        for (frame, code, seq, id) in cases {
            let e = decode_request(frame).unwrap_err();
            assert_eq!(e.code.as_str(), code, "{}", String::from_utf8_lossy(frame));
            assert_eq!(e.seq, seq);
            assert_eq!(e.request_id.as_ref().map(RequestId::as_str), id);
        }
    }

    #[test]
    fn error_responses_never_echo_the_frame() {
        let secret = r#"{"v":1,"seq":1,"op":"run_process","request_id":"r","executable":5,"env":{"TOKEN":"hunter2"}}"#;
        let e = decode_request(secret.as_bytes()).unwrap_err();
        let mut line = Vec::new();
        encode_line(&e.response(), &mut line);
        let text = String::from_utf8(line).unwrap();
        assert!(
            !text.contains("hunter2") && !text.contains("TOKEN"),
            "{text}"
        );
        assert_eq!(
            text,
            "{\"v\":1,\"seq\":1,\"result\":\"error\",\"request_id\":\"r\",\"code\":\"invalid_message\"}\n"
        );
    }

    #[test]
    fn deeply_nested_frames_are_refused_without_overflow() {
        let deep = "[".repeat(100_000);
        assert_eq!(
            decode_request(deep.as_bytes()).unwrap_err().code,
            codes::MALFORMED_FRAME
        );
        let deep_obj = format!("{{\"v\":1,\"seq\":1,\"x\":{}}}", "[".repeat(10_000));
        assert_eq!(
            decode_request(deep_obj.as_bytes()).unwrap_err().code,
            codes::MALFORMED_FRAME
        );
    }
}
