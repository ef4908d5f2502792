//! The three pumps that move lines between the client, the gate and the SDK.
//!
//! - [`from_client`]: the client's input, line by line, through
//!   [`LineGate::inbound`] to the SDK (or answered by the gate).
//! - [`from_sdk`]: the SDK's output, line by line, noted by
//!   [`LineGate::outbound`], to the writer.
//! - [`write_lines`]: the one writer of the client's output, so the gate's
//!   answers and the SDK's lines never interleave inside a line. Once the
//!   client stops reading (a write fails) it keeps draining, so the SDK is
//!   never blocked on a client that is gone.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::gate::{Inbound, LineGate, MAX_LINE};

fn with_gate<T>(gate: &Mutex<LineGate>, f: impl FnOnce(&mut LineGate) -> T) -> T {
    f(&mut crate::sync::lock_std(gate))
}

/// The answer to a line over [`MAX_LINE`] bytes.
fn too_long() -> Vec<u8> {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": -32600, "message": "invalid request: the message is over 16 MiB" },
    })
    .to_string()
    .into_bytes()
}

/// Reads the client's lines until its input ends (`Ok`) or fails.
pub(crate) async fn from_client<R, W>(
    input: R,
    gate: &Mutex<LineGate>,
    to_sdk: &mut W,
    answers: &mpsc::Sender<Vec<u8>>,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        let limit = u64::try_from(MAX_LINE + 1).unwrap_or(u64::MAX);
        let n = (&mut input)
            .take(limit)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return Ok(());
        }
        let ended = line.last() == Some(&b'\n');
        if !ended && line.len() > MAX_LINE {
            // Too long: answer once, then skip to the end of the line.
            if answers.send(too_long()).await.is_err() {
                return Ok(());
            }
            loop {
                line.clear();
                let n = (&mut input)
                    .take(64 * 1024)
                    .read_until(b'\n', &mut line)
                    .await?;
                if n == 0 {
                    return Ok(());
                }
                if line.last() == Some(&b'\n') {
                    break;
                }
            }
            continue;
        }
        let body = line.strip_suffix(b"\n").unwrap_or(&line);
        match with_gate(gate, |g| g.inbound(body)) {
            Inbound::Forward => {
                to_sdk.write_all(body).await?;
                to_sdk.write_all(b"\n").await?;
                to_sdk.flush().await?;
            }
            Inbound::Answer(answer) => {
                if answers.send(answer).await.is_err() {
                    return Ok(());
                }
            }
            Inbound::Drop => {}
        }
        if !ended {
            // The input ended without a newline after its last line.
            return Ok(());
        }
    }
}

/// Passes the SDK's lines to the writer until the SDK closes its output.
pub(crate) async fn from_sdk<R>(
    from_sdk: R,
    gate: Arc<Mutex<LineGate>>,
    lines: mpsc::Sender<Vec<u8>>,
) where
    R: AsyncRead + Unpin,
{
    let mut from_sdk = BufReader::new(from_sdk);
    loop {
        let mut line = Vec::new();
        match from_sdk.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        with_gate(&gate, |g| g.outbound(&line));
        if lines.send(line).await.is_err() {
            return;
        }
    }
}

/// Writes each line (and its newline) to the client's output until every
/// sender is gone.
pub(crate) async fn write_lines<W>(mut output: W, mut lines: mpsc::Receiver<Vec<u8>>)
where
    W: AsyncWrite + Unpin,
{
    let mut open = true;
    while let Some(mut line) = lines.recv().await {
        if !open {
            continue; // the client is gone: drain, so nobody blocks
        }
        line.push(b'\n');
        let wrote = async {
            output.write_all(&line).await?;
            output.flush().await
        };
        if let Err(e) = wrote.await {
            tracing::debug!(error = %e, "the client's output is closed; discarding the rest");
            open = false;
        }
    }
    let _ = output.shutdown().await;
}
