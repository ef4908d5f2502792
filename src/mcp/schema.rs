//! The JSON Schemas of the tools' inputs and outputs (draft 2020-12).
//!
//! `process_run`'s output embeds the evidence schema of
//! `docs/schemas/process-evidence.v1.json`, its `$defs` lifted to the root so
//! that its `#/$defs/...` references resolve.

use serde_json::{Value, json};

use super::input::{MAX_LOCATOR_BYTES, MAX_SECRET_REF_BYTES, MAX_SPILL_READ};
use crate::process::invocation::{MAX_ARGS, MAX_CWD_BYTES, MAX_ENV_ENTRIES, MAX_TIMEOUT};

const EVIDENCE: &str = include_str!("../../docs/schemas/process-evidence.v1.json");

/// The input schema of `process_run`.
pub fn process_run_input() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["executable"],
        "properties": {
            "executable": {
                "type": "string", "minLength": 1,
                "description": "The program: a name looked up on the child's PATH, or a path. Never a shell command line."
            },
            "argv": {
                "type": "array", "maxItems": MAX_ARGS, "items": { "type": "string" },
                "description": "The arguments after the executable, passed as given (no shell, no globbing)."
            },
            "cwd": {
                "type": "string", "minLength": 1, "maxLength": MAX_CWD_BYTES,
                "description": "Working directory relative to the workspace root; absolute or escaping paths are refused."
            },
            "env": {
                "type": "object", "maxProperties": MAX_ENV_ENTRIES,
                "description": "Added to the child's minimal baseline environment. A value is a literal string or {\"secret_ref\": NAME}, resolved by the server at launch and redacted from output.",
                "additionalProperties": {
                    "oneOf": [
                        { "type": "string" },
                        {
                            "type": "object", "additionalProperties": false, "required": ["secret_ref"],
                            "properties": { "secret_ref": { "type": "string", "minLength": 1, "maxLength": MAX_SECRET_REF_BYTES } }
                        }
                    ]
                }
            },
            "timeout_ms": {
                "type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT.as_millis() as u64,
                "description": "Time before SIGTERM to the process group (then the grace, then SIGKILL)."
            }
        }
    })
}

/// The output schema of `process_run`.
pub fn process_run_output() -> Value {
    let mut evidence: Value = serde_json::from_str(EVIDENCE).unwrap_or_else(|_| json!({}));
    let defs = evidence
        .as_object_mut()
        .and_then(|o| {
            o.remove("$schema");
            o.remove("$id");
            o.remove("$defs")
        })
        .unwrap_or_else(|| json!({}));
    let spilled = json!({
        "oneOf": [
            { "type": "null" },
            {
                "type": "object", "additionalProperties": false,
                "required": ["locator", "bytes", "complete"],
                "properties": {
                    "locator": { "type": "string", "description": "Pass to spill_read." },
                    "bytes": { "type": "integer", "minimum": 0 },
                    "complete": { "type": "boolean", "description": "false when the stream passed the spill cap: the file then holds its head and tail." }
                }
            },
            {
                "type": "object", "additionalProperties": false, "required": ["error"],
                "properties": { "error": { "type": "string" } }
            }
        ]
    });
    let success = json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["request_id", "cancelled", "evidence", "spill", "cleanup"],
        "properties": {
            "request_id": { "type": "string", "description": "The job namespace the process ran in (removed by now)." },
            "cancelled": { "type": "boolean" },
            "evidence": evidence,
            "spill": {
                "type": "object", "additionalProperties": false,
                "required": ["stdout", "stderr"],
                "properties": { "stdout": spilled.clone(), "stderr": spilled }
            },
            "cleanup": {
                "type": "object",
                "required": ["status"],
                "properties": {
                    "status": { "type": "string", "description": "clean, already_gone, reclaimed or failed." },
                    "code": { "type": ["string", "null"] },
                    "counts": { "type": "object" }
                }
            }
        }
    });
    json!({
        "type": "object",
        "description": "The run (`evidence`, `spill`, `cleanup`), or, on a tool error, `error`.",
        "oneOf": [success, error_shape()],
        "$defs": defs
    })
}

/// The structured content of every tool error (`isError: true`): a
/// refusal, an invalid input, a failed launch or read. Policy refusals add
/// the `custodian.policy.explain/1` fields.
fn error_shape() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["kind", "code", "message"],
                "properties": {
                    "kind": { "enum": ["invalid_input", "policy_refused", "launch_failed", "spill"] },
                    "code": { "type": "string" },
                    "message": { "type": "string" },
                    "target": { "type": ["string", "null"] },
                    "suggested_override": { "type": ["string", "null"] },
                    "suggested_override_toml": { "type": ["string", "null"] }
                }
            }
        }
    })
}

/// The input schema of `spill_read`.
pub fn spill_read_input() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["locator"],
        "properties": {
            "locator": { "type": "string", "minLength": 1, "maxLength": MAX_LOCATOR_BYTES },
            "offset": { "type": "integer", "minimum": 0, "maximum": u32::MAX, "description": "First byte (default 0)." },
            "length": { "type": "integer", "minimum": 1, "maximum": MAX_SPILL_READ, "description": "Most bytes returned (default 16384)." }
        }
    })
}

/// The output schema of `spill_read`.
pub fn spill_read_output() -> Value {
    let success = json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["locator", "offset", "length", "total_bytes", "eof", "text"],
        "properties": {
            "locator": { "type": "string" },
            "offset": { "type": "integer", "minimum": 0 },
            "length": { "type": "integer", "minimum": 0, "description": "Bytes returned." },
            "total_bytes": { "type": "integer", "minimum": 0 },
            "eof": { "type": "boolean" },
            "text": { "type": "string", "description": "The bytes, UTF-8 (a character cut by the range edge shows as U+FFFD)." }
        }
    });
    json!({
        "type": "object",
        "description": "The range, or, on a tool error, `error`.",
        "oneOf": [success, error_shape()]
    })
}
