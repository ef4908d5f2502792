//! The JSON Schemas of the tools' inputs and outputs (draft 2020-12).
//!
//! `process_run`'s output embeds the evidence schema of
//! `docs/schemas/process-evidence.v1.json`, its `$defs` lifted to the root so
//! that its `#/$defs/...` references resolve.

use serde_json::{Value, json};

use super::input::{
    MAX_LOCATOR_BYTES, MAX_SECRET_REF_BYTES, MAX_SESSION_READ, MAX_SESSION_WAIT, MAX_SESSION_WRITE,
    MAX_SPILL_READ,
};
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

/// The input schema of `process_start`: `process_run`'s, plus the idle
/// timeout.
pub fn process_start_input() -> Value {
    let mut v = process_run_input();
    v["properties"]["timeout_ms"]["description"] = json!(
        "The session's whole life: then SIGTERM to its process group, the grace, SIGKILL. Default one hour."
    );
    v["properties"]["idle_timeout_ms"] = json!({
        "type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT.as_millis() as u64,
        "description": "Stop the session after this long without a process_read, process_write or process_signal. Default ten minutes."
    });
    v["properties"]["terminal"] = terminal_size(
        "Run on a pseudo-terminal of this size instead of pipes: the program sees a terminal (isatty, /dev/tty prompts, Ctrl-C as \\u0003), its output is one stream (stdout, with \\r\\n and the terminal's echo), close_stdin sends Ctrl-D. Omit for pipes.",
    );
    v
}

/// A terminal's size: `{"cols": C, "rows": R}`.
fn terminal_size(description: &str) -> Value {
    let side = json!({ "type": "integer", "minimum": 1, "maximum": crate::process::session::MAX_TERMINAL_SIDE });
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["cols", "rows"],
        "properties": { "cols": side, "rows": side },
        "description": description
    })
}

fn session_id() -> Value {
    json!({
        "type": "string", "minLength": 1, "maxLength": 64,
        "description": "The session_id process_start returned."
    })
}

/// The input schema of `process_read`.
pub fn process_read_input() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["session_id"],
        "properties": {
            "session_id": session_id(),
            "stdout_offset": {
                "type": "integer", "minimum": 0,
                "description": "The next stdout byte wanted: 0, then the previous answer's next.stdout."
            },
            "stderr_offset": {
                "type": "integer", "minimum": 0,
                "description": "The next stderr byte wanted: 0, then the previous answer's next.stderr."
            },
            "max_bytes": {
                "type": "integer", "minimum": 1, "maximum": MAX_SESSION_READ,
                "description": "Most bytes returned per stream. Default 65536."
            },
            "wait_ms": {
                "type": "integer", "minimum": 0, "maximum": MAX_SESSION_WAIT.as_millis() as u64,
                "description": "Wait this long for output if there is none past the offsets yet. Default 0."
            }
        }
    })
}

/// The input schema of `process_write`.
pub fn process_write_input() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["session_id"],
        "properties": {
            "session_id": session_id(),
            "input": {
                "type": "string", "maxLength": MAX_SESSION_WRITE,
                "description": "Written to the process's stdin as UTF-8 (include the newline a line-reading program waits for)."
            },
            "close_stdin": {
                "type": "boolean",
                "description": "Close stdin after writing: the process reads end-of-file."
            }
        }
    })
}

/// The input schema of `process_signal`.
pub fn process_signal_input() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["session_id", "signal"],
        "properties": {
            "session_id": session_id(),
            "signal": {
                "enum": ["interrupt", "terminate", "kill", "resize"],
                "description": "interrupt: SIGINT to the process group (Ctrl-C; the process may go on); terminate: SIGTERM, the grace, SIGKILL; kill: SIGKILL of the whole tree now; resize: a terminal session's new size (give terminal)."
            },
            "terminal": terminal_size("With signal resize only: the new size.")
        }
    })
}

/// The input schema of `process_list`.
pub fn process_list_input() -> Value {
    json!({ "type": "object", "additionalProperties": false, "properties": {} })
}

fn or_error(success: Value, what: &str) -> Value {
    json!({
        "type": "object",
        "description": format!("{what}, or, on a tool error, `error`."),
        "oneOf": [success, error_shape()]
    })
}

/// The output schema of `process_start`.
pub fn process_start_output() -> Value {
    or_error(
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["session_id", "pid", "request_id"],
            "properties": {
                "session_id": { "type": "string" },
                "pid": { "type": "integer", "minimum": 1 },
                "request_id": { "type": "string", "description": "The request that owns this MCP session's processes." }
            }
        }),
        "The started session",
    )
}

/// The output schema of `process_read`.
pub fn process_read_output() -> Value {
    let (evidence, spill, defs) = evidence_and_spill();
    let chunk = json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["offset", "lost", "bytes", "text"],
        "properties": {
            "offset": { "type": "integer", "minimum": 0, "description": "The offset of the first byte returned." },
            "lost": { "type": "integer", "minimum": 0, "description": "Bytes asked for that left the buffer before they were read." },
            "bytes": { "type": "integer", "minimum": 0 },
            "text": { "type": "string" }
        }
    });
    let mut out = or_error(
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["session_id", "stdout", "stderr", "next", "ended", "running"],
            "properties": {
                "session_id": { "type": "string" },
                "stdout": chunk,
                "stderr": chunk,
                "next": {
                    "type": "object", "additionalProperties": false, "required": ["stdout", "stderr"],
                    "properties": {
                        "stdout": { "type": "integer", "minimum": 0 },
                        "stderr": { "type": "integer", "minimum": 0 }
                    }
                },
                "ended": { "type": "boolean", "description": "No more output will come." },
                "running": { "type": "boolean" },
                "status": { "type": "string", "description": "Once settled: the evidence's status." },
                "exit_code": { "anyOf": [{ "type": "integer" }, { "type": "null" }] },
                "signal": { "anyOf": [{ "type": "integer" }, { "type": "null" }] },
                "evidence": {
                    "description": "Once settled and this answer reached the end of both streams: the process's evidence, as process_run answers it (fitted to the inline budget).",
                    "allOf": [evidence]
                },
                "spill": {
                    "description": "With evidence: the streams too large to inline, spilled whole (read with spill_read).",
                    "allOf": [spill]
                }
            }
        }),
        "The output past the offsets",
    );
    out["$defs"] = defs;
    out
}

/// The output schema of `process_write`.
pub fn process_write_output() -> Value {
    or_error(
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["session_id", "bytes_written", "stdin_closed"],
            "properties": {
                "session_id": { "type": "string" },
                "bytes_written": { "type": "integer", "minimum": 0 },
                "stdin_closed": { "type": "boolean" }
            }
        }),
        "What was written",
    )
}

/// The output schema of `process_signal`.
pub fn process_signal_output() -> Value {
    or_error(
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["session_id", "signal"],
            "properties": {
                "session_id": { "type": "string" },
                "signal": { "enum": ["interrupt", "terminate", "kill", "resize"] },
                "terminal": terminal_size("The size set (resize).")
            }
        }),
        "The signal asked for",
    )
}

/// The output schema of `process_list`.
pub fn process_list_output() -> Value {
    or_error(
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["sessions"],
            "properties": {
                "sessions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": false,
                        "required": ["session_id", "pid", "running", "stdout_bytes", "stderr_bytes", "bytes_written", "idle_ms", "terminal"],
                        "properties": {
                            "session_id": { "type": "string" },
                            "pid": { "type": "integer", "minimum": 1 },
                            "running": { "type": "boolean" },
                            "stdout_bytes": { "type": "integer", "minimum": 0 },
                            "stderr_bytes": { "type": "integer", "minimum": 0 },
                            "bytes_written": { "type": "integer", "minimum": 0 },
                            "idle_ms": { "type": "integer", "minimum": 0 },
                            "terminal": { "type": "boolean", "description": "Runs on a pseudo-terminal." }
                        }
                    }
                }
            }
        }),
        "This MCP session's sessions",
    )
}

/// The evidence's schema (without its `$defs`, which the caller puts at
/// its own root), the schema of a run's `spill`, and the `$defs`.
fn evidence_and_spill() -> (Value, Value, Value) {
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
    let spill = json!({
        "type": "object", "additionalProperties": false,
        "required": ["stdout", "stderr"],
        "properties": { "stdout": spilled.clone(), "stderr": spilled }
    });
    (evidence, spill, defs)
}

/// The output schema of `process_run`.
pub fn process_run_output() -> Value {
    let (evidence, spill, defs) = evidence_and_spill();
    let success = json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["request_id", "cancelled", "evidence", "spill", "cleanup"],
        "properties": {
            "request_id": { "type": "string", "description": "The job namespace the process ran in (removed by now)." },
            "cancelled": { "type": "boolean" },
            "evidence": evidence,
            "spill": spill,
            "cleanup": {
                "type": "object",
                "required": ["status"],
                "properties": {
                    "status": { "type": "string", "description": "cleaned, already_gone, reclaimed or failed." },
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
                    "kind": { "enum": ["invalid_input", "policy_refused", "launch_failed", "spill", "internal"] },
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
            "length": { "type": "integer", "minimum": 1, "maximum": MAX_SPILL_READ, "description": "Most bytes returned (default 16384)." },
            "encoding": { "type": "string", "enum": ["text", "base64"], "description": "`text` (default): UTF-8, a cut character shown as U+FFFD; `base64`: the exact bytes." }
        }
    })
}

/// The output schema of `spill_read`.
pub fn spill_read_output() -> Value {
    let success = json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["locator", "offset", "length", "total_bytes", "eof"],
        "properties": {
            "locator": { "type": "string" },
            "offset": { "type": "integer", "minimum": 0 },
            "length": { "type": "integer", "minimum": 0, "description": "Bytes returned." },
            "total_bytes": { "type": "integer", "minimum": 0 },
            "eof": { "type": "boolean" },
            "text": { "type": "string", "description": "The bytes, UTF-8 (a character cut by the range edge shows as U+FFFD); with `encoding: text`." },
            "base64": { "type": "string", "contentEncoding": "base64", "description": "The exact bytes; with `encoding: base64`." }
        },
        "oneOf": [{ "required": ["text"] }, { "required": ["base64"] }]
    });
    json!({
        "type": "object",
        "description": "The range, or, on a tool error, `error`.",
        "oneOf": [success, error_shape()]
    })
}

/// `schema` with every type array (`"type": ["string", "null"]`) written as
/// an `anyOf` of single types: the same meaning, in the form strict
/// validators (MCP Inspector's among them) accept.
pub fn without_type_arrays(schema: Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut map: serde_json::Map<String, Value> = map
                .into_iter()
                .map(|(k, v)| (k, without_type_arrays(v)))
                .collect();
            let typed_array = map.get("type").is_some_and(Value::is_array);
            if let Some(Value::Array(types)) = typed_array.then(|| map.remove("type")).flatten() {
                let one_of_these =
                    Value::Array(types.into_iter().map(|t| json!({ "type": t })).collect());
                // An `anyOf` already there must hold as well.
                match map.remove("anyOf") {
                    None => map.insert("anyOf".to_owned(), one_of_these),
                    Some(existing) => map.insert(
                        "allOf".to_owned(),
                        json!([{ "anyOf": existing }, { "anyOf": one_of_these }]),
                    ),
                };
            }
            Value::Object(map)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(without_type_arrays).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::policy::{Context, Provenance, StateMode};
    use crate::process::env::Secrets;
    use crate::process::evidence::{ContainmentTier, Evidence, InvocationIdentity};
    use crate::process::{Invocation, InvocationSpec};

    fn validator(schema: &Value) -> jsonschema::Validator {
        jsonschema::validator_for(schema).expect("a valid JSON Schema")
    }

    fn errors(v: &jsonschema::Validator, value: &Value) -> Vec<String> {
        v.iter_errors(value).map(|e| e.to_string()).collect()
    }

    fn evidence() -> Evidence {
        let inv = Invocation::validate(InvocationSpec::new("echo").with_args(["hi"])).unwrap();
        let id = InvocationIdentity::new(&inv, Path::new("/bin/echo"), &Secrets::new(vec![]));
        Evidence::internal_failure(
            id,
            SystemTime::now(),
            Duration::from_millis(1),
            None,
            ContainmentTier::Cgroup,
        )
    }

    #[test]
    fn every_schema_compiles() {
        for s in [
            process_run_input(),
            process_run_output(),
            spill_read_input(),
            spill_read_output(),
        ] {
            validator(&s);
        }
    }

    #[test]
    fn type_arrays_become_any_of_with_the_same_meaning() {
        let given = json!({
            "type": "object",
            "properties": {
                "code": { "type": ["string", "null"], "minLength": 1 },
                "deep": { "items": { "type": ["integer", "null"], "anyOf": [{ "minimum": 1 }, { "type": "null" }] } }
            }
        });
        let strict = without_type_arrays(given.clone());
        assert!(!strict.to_string().contains("\"type\":["), "{strict}");
        let (a, b) = (validator(&given), validator(&strict));
        for v in [
            json!({"code": "x"}),
            json!({"code": null}),
            json!({"code": 3}),
            json!({"code": ""}),
            json!({"deep": [1, null]}),
            json!({"deep": [0]}),
            json!({"deep": ["x"]}),
        ] {
            assert_eq!(a.is_valid(&v), b.is_valid(&v), "{v}");
        }
        for s in [process_run_output(), spill_read_output()] {
            let strict = without_type_arrays(s);
            assert!(!strict.to_string().contains("\"type\":["), "{strict}");
            validator(&strict);
        }
    }

    #[tokio::test]
    async fn results_and_errors_match_the_output_schemas() {
        let run = validator(&process_run_output());
        let (ev, spill) =
            crate::mcp::output::fit_evidence(&evidence(), 16, None::<crate::mcp::output::NoSpill>)
                .await;
        let ok = json!({
            "request_id": "mcp-1-2-3",
            "cancelled": true,
            "evidence": ev,
            "spill": spill,
            "cleanup": { "status": "cleaned", "code": null, "counts": {} },
        });
        assert_eq!(errors(&run, &ok), Vec::<String>::new());
        let invalid = crate::mcp::output::error("invalid_input", "wrong_type", "m");
        let invalid = invalid.structured_content.unwrap();
        assert_eq!(errors(&run, &invalid), Vec::<String>::new());
        let decision = crate::policy::decide(
            &crate::policy::Registry::new(),
            &crate::policy::PolicyConfig::from_toml_str(
                "version = 1\n[tools]\nallow = [\"process.run\"]\n",
            )
            .unwrap(),
            &crate::policy::Query {
                tool: crate::policy::PROCESS_RUN,
                process: Some(&crate::process::governed::policy_target(
                    &Invocation::validate(InvocationSpec::new("ls")).unwrap(),
                )),
                context: Context {
                    provenance: Provenance::Trusted,
                    state_mode: StateMode::Local,
                },
                approvals: &[],
            },
        );
        let ctx = Context {
            provenance: Provenance::Trusted,
            state_mode: StateMode::Local,
        };
        for approval in [false, true] {
            let refused = crate::mcp::output::policy_refusal(ctx, &decision, approval);
            assert_eq!(refused.is_error, Some(true));
            let v = refused.structured_content.unwrap();
            assert_eq!(errors(&run, &v), Vec::<String>::new(), "{v}");
        }
        // Neither shape admits a mixture.
        let mut both = ok.clone();
        both["error"] = json!({"kind": "spill", "code": "x", "message": "m"});
        assert!(!errors(&run, &both).is_empty());
        let read = validator(&spill_read_output());
        let range = json!({"locator": "l", "offset": 0, "length": 1, "total_bytes": 1, "eof": true, "text": "a"});
        assert_eq!(errors(&read, &range), Vec::<String>::new());
        assert!(!errors(&read, &json!({"text": "a"})).is_empty());
    }

    #[test]
    fn the_input_schema_refuses_what_validation_refuses() {
        let v = validator(&process_run_input());
        for bad in [
            json!({}),
            json!({"executable": "x", "shell": "ls"}),
            json!({"executable": "x", "argv": "a b"}),
            json!({"executable": "x", "env": {"A": 1}}),
            json!({"executable": "x", "env": {"A": {"secret_ref": "a", "b": 1}}}),
            json!({"executable": "x", "timeout_ms": 0}),
        ] {
            assert!(!errors(&v, &bad).is_empty(), "{bad}");
        }
        let good = json!({"executable": "x", "argv": ["a"], "cwd": "s", "env": {"A": "1", "B": {"secret_ref": "t"}}, "timeout_ms": 5});
        assert_eq!(errors(&v, &good), Vec::<String>::new());
    }
}
