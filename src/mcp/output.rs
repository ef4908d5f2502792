//! What a tool call returns: the structured content, its text rendering in
//! the `<data source="tool">` boundary, and the spilling of streams larger
//! than the inline budget.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

use crate::policy::{Context, Decision, Pattern};
use crate::process::capture::{Capture, CapturedStream};
use crate::process::evidence::{Evidence, render_json_for_model};
use crate::runtime::RuntimeError;
use crate::spill::Locator;
use crate::workspace::WorkspaceError;

/// The spill session every `custodian mcp` output is written under.
pub const SPILL_SESSION: &str = "mcp";

/// A tool result: `value` as structured content and, as text, the same JSON
/// inside the model-facing boundary.
pub(crate) fn result(value: Value, is_error: bool) -> CallToolResult {
    let text = render_json_for_model(&value.to_string());
    let mut r = if is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    r.structured_content = Some(value);
    r
}

/// A tool error: `{"error": {"kind", "code", "message"}}`.
pub(crate) fn error(kind: &str, code: &str, message: &str) -> CallToolResult {
    result(
        json!({ "error": { "kind": kind, "code": code, "message": message } }),
        true,
    )
}

/// A policy refusal, as `custodian run --policy` prints it
/// (`custodian.policy.explain/1`) under `error`. On `deny` the match target
/// is left out: it holds the overlay's literal values, and a denial needs
/// none of it. On `require_approval` it is there, with the exact override
/// that would allow this invocation (to add to `policy.overrides`).
pub(crate) fn policy_refusal(
    context: Context,
    decision: &Decision,
    approval: bool,
) -> CallToolResult {
    let mut reason = serde_json::to_value(&decision.reason).unwrap_or_default();
    if let Some(obj) = reason.as_object_mut() {
        obj.insert("message".into(), decision.reason.to_string().into());
    }
    let (code, target, suggested) = if approval {
        (
            "approval_required",
            decision.target.as_ref().map(|t| t.as_str()),
            decision.suggested_override.as_ref(),
        )
    } else {
        ("policy_denied", None, None)
    };
    let message = if approval {
        "policy requires an approval for this exact invocation; nothing was launched. \
         An operator can allow it by adding suggested_override to policy.overrides"
    } else {
        "policy denies this invocation; nothing was launched"
    };
    result(
        json!({
            "error": {
                "kind": "policy_refused",
                "code": code,
                "message": message,
                "schema": "custodian.policy.explain/1",
                "tool": crate::policy::PROCESS_RUN,
                "context": context,
                "decision": decision.verdict,
                "reason": reason,
                "target": target,
                "suggested_override": suggested.map(Pattern::as_str),
                "suggested_override_toml": suggested.and_then(Pattern::toml_literal),
            }
        }),
        true,
    )
}

/// The stable code of a launch the runtime refused: the launcher's own
/// (`not_found`, `bad_cwd`, `env`, `containment_unavailable`, …), else the
/// workspace's (`internal_path`, …) or the request's (`request_finalizing`).
pub(crate) fn launch_code(e: &RuntimeError) -> &'static str {
    match e {
        RuntimeError::Process(e) => e.code(),
        RuntimeError::Env(_) => "env",
        RuntimeError::Confinement(_) => "confinement_invalid",
        RuntimeError::Workspace(e) => match e {
            WorkspaceError::InternalPath(_) => "internal_path",
            WorkspaceError::Closed => "workspace_closed",
            WorkspaceError::Io { .. } => "io_error",
            _ => "workspace_error",
        },
        RuntimeError::Finalizing { .. } => "request_finalizing",
        RuntimeError::Denied(_) => "policy_denied",
        RuntimeError::ApprovalRequired(_) => "approval_required",
        RuntimeError::TooManySessions { .. } => "too_many_sessions",
        _ => "launch_refused",
    }
}

/// Where a stream's full output went.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Spilled {
    /// Pass to `spill_read`.
    locator: String,
    /// Bytes in the spill file.
    bytes: u64,
    /// Whether the file holds the whole stream (it did not pass the cap).
    complete: bool,
}

/// Keeps `stream` inline if it fits `inline`; otherwise hands everything
/// captured (the whole stream up to the capture cap) to `spill` and cuts
/// the inline text to `inline` bytes (head + tail), as the launcher would
/// have with that budget. Without `spill` (no store) the stream is only
/// cut.
pub(crate) async fn spill_stream<F, Fut>(
    stream: &mut CapturedStream,
    inline: usize,
    spill: Option<&mut F>,
) -> Result<Option<Spilled>, &'static str>
where
    F: FnMut(Vec<u8>) -> Fut,
    Fut: Future<Output = Result<Locator, &'static str>>,
{
    if stream.bytes_read <= inline as u64 {
        return Ok(None);
    }
    let spilled = match spill {
        None => None,
        Some(spill) => {
            let loc = spill(stream.text.as_bytes().to_vec()).await?;
            Some(Spilled {
                locator: loc.to_string(),
                bytes: stream.text.len() as u64,
                complete: !stream.truncated,
            })
        }
    };
    let mut cut = Capture::new(inline);
    cut.push(stream.text.as_bytes());
    let cut = cut.finish(stream.state);
    stream.text = cut.text;
    stream.bytes_kept = cut.bytes_kept.min(stream.bytes_read);
    stream.bytes_omitted = stream.bytes_read - stream.bytes_kept;
    stream.truncated = true;
    Ok(spilled)
}

/// The type of a missing spill for [`fit_evidence`] (no store: streams are
/// only cut).
#[cfg(test)]
pub(crate) type NoSpill = fn(Vec<u8>) -> std::future::Ready<Result<Locator, &'static str>>;

/// The evidence with both streams fitted to `inline`, and where their
/// full output went (`spill` writes one stream's bytes and names them).
pub(crate) async fn fit_evidence<F, Fut>(
    evidence: &Evidence,
    inline: usize,
    mut spill: Option<F>,
) -> (Evidence, Value)
where
    F: FnMut(Vec<u8>) -> Fut,
    Fut: Future<Output = Result<Locator, &'static str>>,
{
    let mut ev = evidence.clone();
    let mut spilled = serde_json::Map::new();
    for (name, stream) in [("stdout", &mut ev.stdout), ("stderr", &mut ev.stderr)] {
        let v = match spill_stream(stream, inline, spill.as_mut()).await {
            Ok(Some(s)) => serde_json::to_value(s).unwrap_or(Value::Null),
            Ok(None) => Value::Null,
            Err(code) => {
                tracing::warn!(stream = name, code, "spilling the stream failed");
                json!({ "error": code })
            }
        };
        spilled.insert(name.to_owned(), v);
    }
    (ev, Value::Object(spilled))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::capture::StreamEnd;

    fn stream(text: &str) -> CapturedStream {
        let mut c = Capture::new(1 << 20);
        c.push(text.as_bytes());
        c.finish(StreamEnd::Closed)
    }

    /// A spill into `store` under [`SPILL_SESSION`], as the server's
    /// request does it.
    fn into(
        store: &crate::spill::SpillStore,
    ) -> impl FnMut(Vec<u8>) -> std::future::Ready<Result<Locator, &'static str>> + '_ {
        move |bytes| {
            std::future::ready(
                store
                    .write(SPILL_SESSION, &bytes)
                    .map_err(|_| "spill_write_failed"),
            )
        }
    }

    #[tokio::test]
    async fn a_small_stream_stays_inline() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::spill::SpillStore::open(dir.path()).unwrap();
        let mut s = stream("hello");
        let spilled = spill_stream(&mut s, 16, Some(&mut into(&store))).await;
        assert!(spilled.unwrap().is_none());
        assert_eq!(s.text, "hello");
        assert!(!s.truncated);
    }

    #[tokio::test]
    async fn a_large_stream_spills_whole_and_is_cut_inline() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::spill::SpillStore::open(dir.path()).unwrap();
        let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let mut s = stream(&text);
        let spilled = spill_stream(&mut s, 64, Some(&mut into(&store)))
            .await
            .unwrap()
            .unwrap();
        assert!(spilled.complete);
        assert_eq!(spilled.bytes, text.len() as u64);
        let loc = crate::spill::Locator::parse(&spilled.locator).unwrap();
        assert_eq!(store.read(&loc).unwrap(), text.as_bytes());
        assert!(s.truncated);
        assert!(s.text.starts_with("line 0\n"));
        assert!(s.text.ends_with("line 999\n"));
        assert_eq!(s.bytes_read, text.len() as u64);
        assert_eq!(s.bytes_kept + s.bytes_omitted, s.bytes_read);
        assert!(s.bytes_kept <= 64);
    }
}
