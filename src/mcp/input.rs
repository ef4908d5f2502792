//! Tool-input validation: the raw JSON arguments of a tool call → a typed
//! input, or an [`InputError`].
//!
//! The arguments are walked by hand rather than through serde's derive: a
//! serde error message quotes the offending value ("invalid type: string
//! \"…\""), and an environment value must never reach an error. Every error
//! here names a field, an index or a limit, never a value, an environment key
//! or a secret reference.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::process::invocation::{
    EnvValue, InvalidInvocation, MAX_ARGS, MAX_ENV_ENTRIES, MAX_TIMEOUT, OutputBudget, SecretRef,
};
use crate::process::{Invocation, InvocationSpec};

/// The longest secret reference accepted, in bytes.
pub const MAX_SECRET_REF_BYTES: usize = 256;
/// The longest spill locator accepted, in bytes.
pub const MAX_LOCATOR_BYTES: usize = 512;
/// The largest range one `spill_read` returns, in bytes.
pub const MAX_SPILL_READ: u64 = 256 * 1024;
/// The range `spill_read` returns when the call names no length.
pub const DEFAULT_SPILL_READ: u64 = 16 * 1024;

/// Why a tool's arguments were refused. Nothing was launched or read.
///
/// Never carries an environment key or value, a secret reference, or any
/// other value the caller sent; an unknown field's name is echoed only when
/// it is short printable ASCII.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// The arguments are not a JSON object.
    #[error("the arguments must be a JSON object")]
    NotAnObject,
    /// A field this tool does not know.
    #[error("unknown field {name}")]
    UnknownField {
        /// The field's name, or `(unprintable)` when it is not short
        /// printable ASCII.
        name: String,
    },
    /// A required field is absent.
    #[error("missing field `{field}`")]
    MissingField {
        /// The field.
        field: &'static str,
    },
    /// A field has the wrong JSON type.
    #[error("field `{field}` must be {expected}")]
    WrongType {
        /// The field (`argv[3]`-style positions are given as `index`).
        field: &'static str,
        /// What it must be.
        expected: &'static str,
        /// The position inside an array or (sorted) object, when relevant.
        index: Option<usize>,
    },
    /// A number is out of its range.
    #[error("field `{field}` is out of range ({range})")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The accepted range, in words.
        range: &'static str,
    },
    /// A list or map has too many entries, or a string is too long.
    #[error("field `{field}` is too large (limit {limit})")]
    TooLarge {
        /// The field.
        field: &'static str,
        /// The limit, in entries or bytes.
        limit: usize,
    },
    /// An environment overlay entry is malformed (named by its position in
    /// key order, never by key).
    #[error("environment overlay entry {index} (sorted by key): {why}")]
    BadEnvEntry {
        /// Position in key order.
        index: usize,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The invocation breaks a launcher rule (absolute or escaping cwd, NUL
    /// bytes, argv too large, ...).
    #[error(transparent)]
    Invalid(#[from] InvalidInvocation),
}

impl InputError {
    /// A stable snake_case code for the error.
    pub fn code(&self) -> &'static str {
        match self {
            InputError::NotAnObject => "not_an_object",
            InputError::UnknownField { .. } => "unknown_field",
            InputError::MissingField { .. } => "missing_field",
            InputError::WrongType { .. } => "wrong_type",
            InputError::OutOfRange { .. } => "out_of_range",
            InputError::TooLarge { .. } => "too_large",
            InputError::BadEnvEntry { .. } => "bad_env_entry",
            InputError::Invalid(_) => "invalid_invocation",
        }
    }
}

/// What `process_run` needs besides the arguments.
#[derive(Clone, Debug)]
pub struct RunDefaults {
    /// The timeout when the call names none.
    pub timeout: Duration,
    /// The capture budget per stream: everything up to it can be spilled.
    pub capture: usize,
    /// The confinement every process runs under (the operator's choice;
    /// a call cannot change it). It is part of the policy's match target.
    pub confinement: crate::confine::Confinement,
}

/// A validated `process_run` call.
#[derive(Clone, Debug)]
pub struct ProcessRunInput {
    /// The invocation, exactly as it will launch.
    pub invocation: Invocation,
}

/// A validated `spill_read` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpillReadInput {
    /// The locator text (parsed by the store).
    pub locator: String,
    /// First byte returned.
    pub offset: u64,
    /// Most bytes returned (1..=[`MAX_SPILL_READ`]).
    pub length: u64,
    /// How the bytes are returned.
    pub encoding: Encoding,
}

/// How `spill_read` returns the bytes of a range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Encoding {
    /// UTF-8 text in `text` (a character cut by the range edge, or a byte
    /// that is not UTF-8, shows as U+FFFD).
    #[default]
    Text,
    /// The exact bytes, base64 (standard alphabet, padded) in `base64`.
    Base64,
}

fn field_name(key: &str) -> String {
    if key.len() <= 64 && key.bytes().all(|b| b.is_ascii_graphic()) {
        format!("`{key}`")
    } else {
        "(unprintable)".to_owned()
    }
}

fn object(
    args: Option<&Map<String, Value>>,
    known: &[&str],
) -> Result<Map<String, Value>, InputError> {
    let map = args.cloned().unwrap_or_default();
    if let Some(k) = map.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(InputError::UnknownField {
            name: field_name(k),
        });
    }
    Ok(map)
}

fn string(v: &Value, field: &'static str, index: Option<usize>) -> Result<String, InputError> {
    v.as_str().map(str::to_owned).ok_or(InputError::WrongType {
        field,
        expected: "a string",
        index,
    })
}

fn integer(
    v: &Value,
    field: &'static str,
    min: u64,
    max: u64,
    range: &'static str,
) -> Result<u64, InputError> {
    // JSON Schema's `integer` is any number with a zero fractional part, so
    // `1000.0` and `1e3` (what a client that keeps numbers as floats sends)
    // are integers; `1.5` is refused rather than rounded. Floats are exact
    // up to 2^53, past every range used here.
    let n = v.as_u64().or_else(|| integral(v)).ok_or_else(|| {
        if v.is_number() {
            InputError::OutOfRange { field, range }
        } else {
            InputError::WrongType {
                field,
                expected: "an integer",
                index: None,
            }
        }
    })?;
    if n < min || n > max {
        return Err(InputError::OutOfRange { field, range });
    }
    Ok(n)
}

/// A non-negative float with no fractional part, exactly representable.
fn integral(v: &Value) -> Option<u64> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    let f = v.as_f64()?;
    if f.fract() == 0.0 && (0.0..=EXACT).contains(&f) {
        // In range and integral: the cast is exact.
        Some(f as u64)
    } else {
        None
    }
}

/// Validates the arguments of `process_run`.
///
/// # Errors
///
/// An [`InputError`]; nothing is launched.
pub fn process_run(
    args: Option<&Map<String, Value>>,
    defaults: &RunDefaults,
) -> Result<ProcessRunInput, InputError> {
    let map = object(args, &["executable", "argv", "cwd", "env", "timeout_ms"])?;
    let executable = string(
        map.get("executable").ok_or(InputError::MissingField {
            field: "executable",
        })?,
        "executable",
        None,
    )?;
    let mut argv = Vec::new();
    if let Some(v) = map.get("argv") {
        let items = v.as_array().ok_or(InputError::WrongType {
            field: "argv",
            expected: "an array of strings",
            index: None,
        })?;
        if items.len() > MAX_ARGS {
            return Err(InputError::TooLarge {
                field: "argv",
                limit: MAX_ARGS,
            });
        }
        for (i, item) in items.iter().enumerate() {
            argv.push(string(item, "argv", Some(i))?);
        }
    }
    let timeout = match map.get("timeout_ms") {
        None => defaults.timeout,
        Some(v) => Duration::from_millis(integer(
            v,
            "timeout_ms",
            1,
            MAX_TIMEOUT.as_millis() as u64,
            "1 to 2592000000 milliseconds",
        )?),
    };
    let mut spec = InvocationSpec::new(executable)
        .with_args(argv)
        .with_timeout(timeout)
        .with_budget(OutputBudget {
            stdout: defaults.capture,
            stderr: defaults.capture,
        })
        .with_confinement(defaults.confinement.clone());
    if let Some(v) = map.get("cwd") {
        spec = spec.with_cwd(string(v, "cwd", None)?);
    }
    if let Some(v) = map.get("env") {
        let env = v.as_object().ok_or(InputError::WrongType {
            field: "env",
            expected: "an object of strings or {\"secret_ref\": string}",
            index: None,
        })?;
        if env.len() > MAX_ENV_ENTRIES {
            return Err(InputError::TooLarge {
                field: "env",
                limit: MAX_ENV_ENTRIES,
            });
        }
        for (index, (key, value)) in env.iter().enumerate() {
            spec = spec.with_env(key.clone(), env_value(index, value)?);
        }
    }
    Ok(ProcessRunInput {
        invocation: Invocation::validate(spec)?,
    })
}

fn env_value(index: usize, value: &Value) -> Result<EnvValue, InputError> {
    const SHAPE: &str = "the value must be a string or {\"secret_ref\": string}";
    match value {
        Value::String(s) => Ok(EnvValue::Literal(s.clone())),
        Value::Object(o) => {
            if o.len() != 1 {
                return Err(InputError::BadEnvEntry { index, why: SHAPE });
            }
            let name = o
                .get("secret_ref")
                .and_then(Value::as_str)
                .ok_or(InputError::BadEnvEntry { index, why: SHAPE })?;
            if name.is_empty() || name.len() > MAX_SECRET_REF_BYTES || name.contains('\0') {
                return Err(InputError::BadEnvEntry {
                    index,
                    why: "the secret reference must be 1 to 256 bytes without NUL",
                });
            }
            Ok(EnvValue::Secret(SecretRef::new(name)))
        }
        _ => Err(InputError::BadEnvEntry { index, why: SHAPE }),
    }
}

/// The timeout of a `process_start` that names none: a session is meant to
/// outlive its call (its idle timeout ends a forgotten one sooner).
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(3600);

/// The idle timeout of a `process_start` that names none.
pub const SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// The most bytes one `process_read` returns per stream.
pub const MAX_SESSION_READ: u64 = 256 * 1024;

/// The longest a `process_read` waits for output.
pub const MAX_SESSION_WAIT: Duration = Duration::from_secs(60);

/// The most bytes one `process_write` writes.
pub const MAX_SESSION_WRITE: usize = 1024 * 1024;

/// The most bytes a session id may have.
const MAX_SESSION_ID_BYTES: usize = 64;

/// A validated `process_start` call.
#[derive(Clone, Debug)]
pub struct ProcessStartInput {
    /// The invocation, exactly as it will launch.
    pub invocation: Invocation,
    /// Ends the session after this long without a read, write or signal.
    pub idle_timeout: Duration,
    /// Run on a pseudo-terminal of this size (`terminal`); `None`: pipes.
    pub terminal: Option<crate::process::session::WindowSize>,
}

use crate::process::session::MAX_TERMINAL_SIDE;

/// A `{"cols": C, "rows": R}` object under `field`.
fn window_size(
    v: &Value,
    field: &'static str,
) -> Result<crate::process::session::WindowSize, InputError> {
    let map = v.as_object().ok_or(InputError::WrongType {
        field,
        expected: "an object {\"cols\": C, \"rows\": R}",
        index: None,
    })?;
    let side = |name: &'static str| -> Result<u16, InputError> {
        let v = map
            .get(name)
            .ok_or(InputError::MissingField { field: name })?;
        let n = integer(v, name, 1, u64::from(MAX_TERMINAL_SIDE), "1 to 1000")?;
        Ok(u16::try_from(n).unwrap_or(u16::MAX))
    };
    if let Some(other) = map.keys().find(|k| *k != "cols" && *k != "rows") {
        return Err(InputError::UnknownField {
            name: other.clone(),
        });
    }
    Ok(crate::process::session::WindowSize::new(
        side("cols")?,
        side("rows")?,
    ))
}

/// What `process_signal` asks for: a signal, or a terminal's new size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalRequest {
    /// `interrupt`, `terminate` or `kill`.
    Signal(crate::process::session::SessionSignal),
    /// `resize`, with `cols` and `rows`.
    Resize(crate::process::session::WindowSize),
}

/// Validates the arguments of `process_start`: those of `process_run`
/// (its `timeout_ms` bounds the whole session, default
/// [`SESSION_TIMEOUT`]) and `idle_timeout_ms` (default
/// [`SESSION_IDLE_TIMEOUT`]).
///
/// # Errors
///
/// An [`InputError`]; nothing is launched.
pub fn process_start(
    args: Option<&Map<String, Value>>,
    defaults: &RunDefaults,
) -> Result<ProcessStartInput, InputError> {
    let mut map = object(
        args,
        &[
            "executable",
            "argv",
            "cwd",
            "env",
            "timeout_ms",
            "idle_timeout_ms",
            "terminal",
        ],
    )?;
    let terminal = match map.remove("terminal") {
        None | Some(Value::Null) => None,
        Some(v) => Some(window_size(&v, "terminal")?),
    };
    let idle_timeout = match map.remove("idle_timeout_ms") {
        None => SESSION_IDLE_TIMEOUT,
        Some(v) => Duration::from_millis(integer(
            &v,
            "idle_timeout_ms",
            1,
            MAX_TIMEOUT.as_millis() as u64,
            "1 to 2592000000 milliseconds",
        )?),
    };
    let defaults = RunDefaults {
        timeout: SESSION_TIMEOUT,
        ..defaults.clone()
    };
    Ok(ProcessStartInput {
        invocation: process_run(Some(&map), &defaults)?.invocation,
        idle_timeout,
        terminal,
    })
}

fn session_id(map: &Map<String, Value>) -> Result<String, InputError> {
    let id = string(
        map.get("session_id").ok_or(InputError::MissingField {
            field: "session_id",
        })?,
        "session_id",
        None,
    )?;
    if id.is_empty() || id.len() > MAX_SESSION_ID_BYTES {
        return Err(InputError::OutOfRange {
            field: "session_id",
            range: "1 to 64 bytes",
        });
    }
    Ok(id)
}

/// A validated `process_read` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessReadInput {
    /// The session.
    pub session_id: String,
    /// The next byte wanted of each stream.
    pub offsets: crate::process::session::Offsets,
    /// Most bytes returned per stream (1..=[`MAX_SESSION_READ`]).
    pub max_bytes: usize,
    /// How long to wait for output (at most [`MAX_SESSION_WAIT`]).
    pub wait: Duration,
}

/// Validates the arguments of `process_read`.
///
/// # Errors
///
/// An [`InputError`]; nothing is read.
pub fn process_read(args: Option<&Map<String, Value>>) -> Result<ProcessReadInput, InputError> {
    let map = object(
        args,
        &[
            "session_id",
            "stdout_offset",
            "stderr_offset",
            "max_bytes",
            "wait_ms",
        ],
    )?;
    let offset = |field: &'static str| match map.get(field) {
        None => Ok(0),
        Some(v) => integer(v, field, 0, u64::MAX >> 11, "0 to 2^53"),
    };
    Ok(ProcessReadInput {
        session_id: session_id(&map)?,
        offsets: crate::process::session::Offsets {
            stdout: offset("stdout_offset")?,
            stderr: offset("stderr_offset")?,
        },
        max_bytes: match map.get("max_bytes") {
            None => 64 * 1024,
            Some(v) => integer(v, "max_bytes", 1, MAX_SESSION_READ, "1 to 262144 bytes")? as usize,
        },
        wait: match map.get("wait_ms") {
            None => Duration::ZERO,
            Some(v) => Duration::from_millis(integer(
                v,
                "wait_ms",
                0,
                MAX_SESSION_WAIT.as_millis() as u64,
                "0 to 60000 milliseconds",
            )?),
        },
    })
}

/// A validated `process_write` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessWriteInput {
    /// The session.
    pub session_id: String,
    /// What to write (UTF-8), possibly empty.
    pub input: String,
    /// Close stdin after writing.
    pub close_stdin: bool,
}

/// Validates the arguments of `process_write`.
///
/// # Errors
///
/// An [`InputError`]; nothing is written.
pub fn process_write(args: Option<&Map<String, Value>>) -> Result<ProcessWriteInput, InputError> {
    let map = object(args, &["session_id", "input", "close_stdin"])?;
    let input = match map.get("input") {
        None => String::new(),
        Some(v) => string(v, "input", None)?,
    };
    if input.len() > MAX_SESSION_WRITE {
        return Err(InputError::TooLarge {
            field: "input",
            limit: MAX_SESSION_WRITE,
        });
    }
    let close_stdin = match map.get("close_stdin") {
        None => false,
        Some(v) => v.as_bool().ok_or(InputError::WrongType {
            field: "close_stdin",
            expected: "a boolean",
            index: None,
        })?,
    };
    Ok(ProcessWriteInput {
        session_id: session_id(&map)?,
        input,
        close_stdin,
    })
}

/// Validates the arguments of `process_signal`: the session and one of
/// `interrupt`, `terminate`, `kill`, or `resize` with `terminal` (a
/// terminal session's new size).
///
/// # Errors
///
/// An [`InputError`]; nothing is signalled.
pub fn process_signal(
    args: Option<&Map<String, Value>>,
) -> Result<(String, SignalRequest), InputError> {
    use crate::process::session::SessionSignal;
    let map = object(args, &["session_id", "signal", "terminal"])?;
    let signal = match map
        .get("signal")
        .ok_or(InputError::MissingField { field: "signal" })?
        .as_str()
    {
        Some("interrupt") => SignalRequest::Signal(SessionSignal::Interrupt),
        Some("terminate") => SignalRequest::Signal(SessionSignal::Terminate),
        Some("kill") => SignalRequest::Signal(SessionSignal::Kill),
        Some("resize") => SignalRequest::Resize(window_size(
            map.get("terminal")
                .ok_or(InputError::MissingField { field: "terminal" })?,
            "terminal",
        )?),
        _ => {
            return Err(InputError::WrongType {
                field: "signal",
                expected: "one of \"interrupt\", \"terminate\", \"kill\", \"resize\"",
                index: None,
            });
        }
    };
    if matches!(signal, SignalRequest::Signal(_)) && map.contains_key("terminal") {
        return Err(InputError::UnknownField {
            name: "terminal".to_owned(),
        });
    }
    Ok((session_id(&map)?, signal))
}

/// Validates the arguments of `process_list` (none).
///
/// # Errors
///
/// [`InputError::UnknownField`] for any argument.
pub fn process_list(args: Option<&Map<String, Value>>) -> Result<(), InputError> {
    object(args, &[]).map(drop)
}

/// Validates the arguments of `spill_read`.
///
/// # Errors
///
/// An [`InputError`]; nothing is read.
pub fn spill_read(args: Option<&Map<String, Value>>) -> Result<SpillReadInput, InputError> {
    let map = object(args, &["locator", "offset", "length", "encoding"])?;
    let locator = string(
        map.get("locator")
            .ok_or(InputError::MissingField { field: "locator" })?,
        "locator",
        None,
    )?;
    if locator.len() > MAX_LOCATOR_BYTES {
        return Err(InputError::TooLarge {
            field: "locator",
            limit: MAX_LOCATOR_BYTES,
        });
    }
    let offset = match map.get("offset") {
        None => 0,
        Some(v) => integer(v, "offset", 0, u64::from(u32::MAX), "0 to 4294967295")?,
    };
    let length = match map.get("length") {
        None => DEFAULT_SPILL_READ,
        Some(v) => integer(v, "length", 1, MAX_SPILL_READ, "1 to 262144 bytes")?,
    };
    let encoding = match map.get("encoding") {
        None => Encoding::Text,
        Some(v) => match v.as_str() {
            Some("text") => Encoding::Text,
            Some("base64") => Encoding::Base64,
            Some(_) => {
                return Err(InputError::OutOfRange {
                    field: "encoding",
                    range: "\"text\" or \"base64\"",
                });
            }
            None => {
                return Err(InputError::WrongType {
                    field: "encoding",
                    expected: "a string",
                    index: None,
                });
            }
        },
    };
    Ok(SpillReadInput {
        locator,
        offset,
        length,
        encoding,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn defaults() -> RunDefaults {
        RunDefaults {
            timeout: Duration::from_secs(30),
            capture: 1024,
            confinement: crate::confine::Confinement::default(),
        }
    }

    fn run(v: Value) -> Result<ProcessRunInput, InputError> {
        match v {
            Value::Object(m) => process_run(Some(&m), &defaults()),
            _ => Err(InputError::NotAnObject),
        }
    }

    #[test]
    fn a_plain_call_validates() {
        let ok = run(
            json!({"executable": "echo", "argv": ["a", "b"], "cwd": "sub/./x",
            "env": {"B": "1", "A": {"secret_ref": "tok"}}, "timeout_ms": 1500}),
        )
        .unwrap();
        assert_eq!(ok.invocation.args(), ["a", "b"]);
        assert_eq!(ok.invocation.timeout(), Duration::from_millis(1500));
        assert_eq!(ok.invocation.cwd().unwrap().as_str(), "sub/x");
        assert_eq!(ok.invocation.env().len(), 2);
    }

    #[test]
    fn escaping_and_absolute_cwds_are_refused() {
        for cwd in ["/etc", "..", "a/../../b", "", "a\0b"] {
            let e = run(json!({"executable": "echo", "cwd": cwd})).unwrap_err();
            assert!(matches!(e, InputError::Invalid(_)), "{cwd:?}: {e:?}");
        }
    }

    #[test]
    fn shapes_are_typed_errors() {
        let cases = [
            (json!({"argv": []}), "missing_field"),
            (json!({"executable": 3}), "wrong_type"),
            (json!({"executable": "x", "argv": "a b"}), "wrong_type"),
            (json!({"executable": "x", "argv": ["a", 1]}), "wrong_type"),
            (
                json!({"executable": "x", "shell": "rm -rf /"}),
                "unknown_field",
            ),
            (json!({"executable": "x", "timeout_ms": 0}), "out_of_range"),
            (
                json!({"executable": "x", "timeout_ms": 1.5}),
                "out_of_range",
            ),
            (
                json!({"executable": "x", "timeout_ms": 1.0e300}),
                "out_of_range",
            ),
            (json!({"executable": "x", "timeout_ms": -1}), "out_of_range"),
            (json!({"executable": "x", "env": {"A": 1}}), "bad_env_entry"),
            (
                json!({"executable": "x", "env": {"A": {"secret_ref": "a", "x": 1}}}),
                "bad_env_entry",
            ),
            (
                json!({"executable": "x", "env": {"A=B": "1"}}),
                "invalid_invocation",
            ),
            (json!({"executable": ""}), "invalid_invocation"),
        ];
        for (v, code) in cases {
            assert_eq!(run(v.clone()).unwrap_err().code(), code, "{v}");
        }
    }

    #[test]
    fn integral_floats_are_integers() {
        for (given, ms) in [(json!(1000.0), 1000), (json!(1e3), 1000), (json!(250), 250)] {
            let got = run(json!({"executable": "x", "timeout_ms": given.clone()})).unwrap();
            assert_eq!(
                got.invocation.timeout(),
                Duration::from_millis(ms),
                "{given}"
            );
        }
        let m = |v: Value| v.as_object().cloned().unwrap();
        let read = spill_read(Some(&m(
            json!({"locator": "l", "offset": 8.0, "length": 16.0, "encoding": "base64"}),
        )))
        .unwrap();
        assert_eq!((read.offset, read.length), (8, 16));
        assert_eq!(read.encoding, Encoding::Base64);
    }

    #[test]
    fn errors_never_quote_env_keys_or_values() {
        let e = run(json!({"executable": "x", "env": {"KEY_CANARY": 7}})).unwrap_err();
        assert!(!e.to_string().contains("CANARY"), "{e}");
        let e = run(json!({"executable": "x", "env": {"K": "VALUE_CANARY\u{0}"}})).unwrap_err();
        assert!(!e.to_string().contains("CANARY"), "{e}");
    }

    #[test]
    fn the_session_tools_take_their_defaults_and_refuse_out_of_range_input() {
        let args = |v: serde_json::Value| v.as_object().cloned().unwrap();
        let start = process_start(Some(&args(json!({"executable": "cat"}))), &defaults()).unwrap();
        assert_eq!(start.invocation.timeout(), SESSION_TIMEOUT);
        assert_eq!(start.idle_timeout, SESSION_IDLE_TIMEOUT);
        let start = process_start(
            Some(&args(
                json!({"executable": "cat", "timeout_ms": 5, "idle_timeout_ms": 7}),
            )),
            &defaults(),
        )
        .unwrap();
        assert_eq!(start.invocation.timeout(), Duration::from_millis(5));
        assert_eq!(start.idle_timeout, Duration::from_millis(7));
        assert_eq!(start.terminal, None);
        let start = process_start(
            Some(&args(
                json!({"executable": "python3", "terminal": {"cols": 120, "rows": 40}}),
            )),
            &defaults(),
        )
        .unwrap();
        assert_eq!(
            start.terminal,
            Some(crate::process::session::WindowSize::new(120, 40))
        );
        let code = |r: Result<(), InputError>| r.unwrap_err().code();
        assert_eq!(
            code(
                process_start(
                    Some(&args(
                        json!({"executable": "cat", "terminal": {"cols": 1001, "rows": 1}})
                    )),
                    &defaults()
                )
                .map(drop)
            ),
            "out_of_range"
        );
        let start_err = |v| process_start(Some(&args(v)), &defaults()).map(drop);
        assert_eq!(
            code(start_err(
                json!({"executable": "cat", "idle_timeout_ms": 0})
            )),
            "out_of_range"
        );
        assert_eq!(
            code(start_err(json!({"executable": "cat", "shell": true}))),
            "unknown_field"
        );

        let read = process_read(Some(&args(json!({"session_id": "s1"})))).unwrap();
        assert_eq!(
            (
                read.offsets.stdout,
                read.offsets.stderr,
                read.max_bytes,
                read.wait
            ),
            (0, 0, 64 * 1024, Duration::ZERO)
        );
        let read_err = |v| process_read(Some(&args(v))).map(drop);
        assert_eq!(code(read_err(json!({}))), "missing_field");
        assert_eq!(code(read_err(json!({"session_id": ""}))), "out_of_range");
        assert_eq!(
            code(read_err(
                json!({"session_id": "s1", "max_bytes": MAX_SESSION_READ + 1})
            )),
            "out_of_range"
        );
        assert_eq!(
            code(read_err(json!({"session_id": "s1", "wait_ms": 60_001}))),
            "out_of_range"
        );
        assert_eq!(
            code(read_err(json!({"session_id": "s1", "stdout_offset": -1}))),
            "out_of_range"
        );

        let write_err = |v| process_write(Some(&args(v))).map(drop);
        let big = "x".repeat(MAX_SESSION_WRITE + 1);
        assert_eq!(
            code(write_err(json!({"session_id": "s1", "input": big}))),
            "too_large"
        );
        assert_eq!(
            code(write_err(json!({"session_id": "s1", "close_stdin": "yes"}))),
            "wrong_type"
        );
        let w = process_write(Some(&args(
            json!({"session_id": "s1", "close_stdin": true}),
        )))
        .unwrap();
        assert!(w.input.is_empty() && w.close_stdin);

        let signal_err = |v| process_signal(Some(&args(v))).map(drop);
        assert_eq!(
            code(signal_err(json!({"session_id": "s1", "signal": "hup"}))),
            "wrong_type"
        );
        let resize = |v| process_signal(Some(&args(v)));
        assert_eq!(
            resize(json!({"session_id": "s1", "signal": "resize", "terminal": {"cols": 100, "rows": 30}}))
                .unwrap()
                .1,
            SignalRequest::Resize(crate::process::session::WindowSize::new(100, 30))
        );
        for (bad, want) in [
            (
                json!({"session_id": "s1", "signal": "resize"}),
                "missing_field",
            ),
            (
                json!({"session_id": "s1", "signal": "resize", "terminal": {"cols": 0, "rows": 3}}),
                "out_of_range",
            ),
            (
                json!({"session_id": "s1", "signal": "resize", "terminal": {"cols": 3}}),
                "missing_field",
            ),
            (
                json!({"session_id": "s1", "signal": "resize", "terminal": {"cols": 3, "rows": 3, "x": 1}}),
                "unknown_field",
            ),
            (
                json!({"session_id": "s1", "signal": "resize", "terminal": [80, 24]}),
                "wrong_type",
            ),
            (
                json!({"session_id": "s1", "signal": "kill", "terminal": {"cols": 3, "rows": 3}}),
                "unknown_field",
            ),
        ] {
            assert_eq!(code(resize(bad.clone()).map(drop)), want, "{bad}");
        }
        assert_eq!(
            code(signal_err(json!({"session_id": "s1"}))),
            "missing_field"
        );
        assert_eq!(
            code(process_list(Some(&args(json!({"all": true}))))),
            "unknown_field"
        );
        assert!(process_list(None).is_ok());
    }

    #[test]
    fn spill_read_bounds() {
        let m = |v: Value| v.as_object().cloned().unwrap();
        assert_eq!(
            spill_read(Some(&m(json!({"locator": "l"}))))
                .unwrap()
                .length,
            DEFAULT_SPILL_READ
        );
        for bad in [
            json!({"locator": "l", "length": 0}),
            json!({"locator": "l", "length": MAX_SPILL_READ + 1}),
            json!({"locator": "l", "offset": -1}),
            json!({"locator": "l", "path": "/etc/passwd"}),
            json!({"offset": 1}),
            json!({"locator": "x".repeat(MAX_LOCATOR_BYTES + 1)}),
            json!({"locator": "l", "encoding": "hex"}),
            json!({"locator": "l", "encoding": 64}),
        ] {
            assert!(spill_read(Some(&m(bad.clone()))).is_err(), "{bad}");
        }
    }

    /// Arbitrary JSON, biased towards the shapes the tool expects.
    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>().prop_map(|f| json!(f)),
            ".{0,40}".prop_map(Value::String),
            prop_oneof![
                Just("/"),
                Just(".."),
                Just("a/../.."),
                Just("\0"),
                Just(".custodian")
            ]
            .prop_map(|s| Value::String(s.to_owned())),
            (0usize..200_000).prop_map(|n| Value::String("x".repeat(n))),
        ];
        leaf.prop_recursive(3, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("executable".to_owned()),
                        Just("argv".to_owned()),
                        Just("cwd".to_owned()),
                        Just("env".to_owned()),
                        Just("timeout_ms".to_owned()),
                        Just("secret_ref".to_owned()),
                        Just("locator".to_owned()),
                        Just("offset".to_owned()),
                        Just("length".to_owned()),
                        ".{0,10}",
                    ],
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A `process_run` call close to valid: each field well-typed most of
    /// the time, with hostile values (escaping cwds, NULs, huge strings,
    /// wrong types, unknown fields) mixed in.
    fn arb_call() -> impl Strategy<Value = Value> {
        let string = prop_oneof![
            4 => "[a-z./_-]{0,12}".prop_map(Value::String),
            1 => (0usize..1_200_000).prop_map(|n| Value::String("a".repeat(n))),
            1 => ".{0,12}".prop_map(Value::String),
            1 => arb_json(),
        ];
        let cwd = prop_oneof![
            3 => "[a-z]{1,4}(/[a-z.]{1,4}){0,3}".prop_map(Value::String),
            1 => prop_oneof![
                Just("/"), Just("/etc"), Just(".."), Just("a/../.."), Just("./../x"),
                Just("a/./b/../../.."), Just(""), Just("a\0"), Just("C:\\x"),
            ]
            .prop_map(|s| Value::String(s.replace("\\0", "\0"))),
            1 => arb_json(),
        ];
        let env_value = prop_oneof![
            3 => ".{0,8}".prop_map(Value::String),
            2 => "[A-Z]{1,6}".prop_map(|r| json!({"secret_ref": r})),
            1 => arb_json(),
        ];
        let env = prop_oneof![
            4 => prop::collection::btree_map("[A-Z_=]{0,6}", env_value, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            1 => arb_json(),
        ];
        let argv = prop_oneof![
            4 => prop::collection::vec(string.clone(), 0..6).prop_map(Value::Array),
            1 => arb_json(),
        ];
        let timeout = prop_oneof![
            3 => (0u64..100_000).prop_map(|n| json!(n)),
            1 => any::<i64>().prop_map(|n| json!(n)),
            1 => arb_json(),
        ];
        (
            prop::option::weighted(0.9, string),
            prop::option::of(argv),
            prop::option::of(cwd),
            prop::option::of(env),
            prop::option::of(timeout),
            prop::option::weighted(0.1, ("[a-z_]{1,10}", arb_json())),
        )
            .prop_map(|(exe, argv, cwd, env, timeout, extra)| {
                let mut m = Map::new();
                let fields = [
                    ("executable", exe),
                    ("argv", argv),
                    ("cwd", cwd),
                    ("env", env),
                    ("timeout_ms", timeout),
                ];
                for (k, v) in fields {
                    if let Some(v) = v {
                        m.insert(k.to_owned(), v);
                    }
                }
                if let Some((k, v)) = extra {
                    m.insert(k, v);
                }
                Value::Object(m)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Near-valid calls: an accepted one launches exactly what was
        /// asked (argv as given, a relative non-escaping cwd, the timeout),
        /// a refused one gets a short typed error that quotes no value.
        #[test]
        fn near_valid_calls(v in arb_call()) {
            let m = v.as_object().unwrap();
            match process_run(Some(m), &defaults()) {
                Ok(ok) => {
                    let inv = &ok.invocation;
                    prop_assert!(m.keys().all(|k| ["executable", "argv", "cwd", "env", "timeout_ms"].contains(&k.as_str())));
                    prop_assert_eq!(Some(inv.executable()), m["executable"].as_str());
                    let argv: Vec<&str> = m.get("argv").and_then(Value::as_array)
                        .map(|a| a.iter().map(|x| x.as_str().unwrap()).collect()).unwrap_or_default();
                    prop_assert_eq!(inv.args(), &argv[..]);
                    if let Some(cwd) = inv.cwd() {
                        prop_assert!(!cwd.as_str().starts_with('/'));
                        prop_assert!(!cwd.as_str().split('/').any(|c| c == ".."));
                    }
                    let want = m.get("timeout_ms").and_then(Value::as_u64).map_or(defaults().timeout, Duration::from_millis);
                    prop_assert_eq!(inv.timeout(), want);
                    prop_assert_eq!(inv.env().len(), m.get("env").and_then(Value::as_object).map_or(0, Map::len));
                }
                Err(e) => {
                    let text = e.to_string();
                    prop_assert!(text.len() < 512, "{}", text);
                    if let Some(env) = m.get("env").and_then(Value::as_object) {
                        // Tokens that could be the error's own words
                        // (`executable`, `JSON`) prove nothing.
                        let telling = |t: &str| {
                            t.len() >= 4 && t != "JSON" && t.chars().any(|c| c.is_ascii_uppercase())
                        };
                        for (k, v) in env {
                            if telling(k) {
                                prop_assert!(!text.contains(k.as_str()), "key in {}", text);
                            }
                            if let Some(v) = v.as_str().filter(|v| telling(v)) {
                                prop_assert!(!text.contains(v), "value in {}", text);
                            }
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Whatever arrives, validation returns (never panics), and an
        /// accepted call obeys the launcher's rules: relative, non-escaping
        /// cwd; only known fields.
        #[test]
        fn validation_is_total(v in arb_json(), canary in "[A-Z]{12}") {
            let mut v = v;
            // Plant a canary env value; it must never show in an error.
            if let Value::Object(m) = &mut v {
                if let Some(Value::Object(env)) = m.get_mut("env") {
                    env.insert("CANARY_KEY_X".into(), Value::String(format!("CANARY{canary}\0")));
                }
            }
            let args = v.as_object();
            match process_run(args, &defaults()) {
                Ok(ok) => {
                    let m = args.unwrap();
                    prop_assert!(m.keys().all(|k| ["executable", "argv", "cwd", "env", "timeout_ms"].contains(&k.as_str())));
                    if let Some(cwd) = ok.invocation.cwd() {
                        prop_assert!(!cwd.as_str().starts_with('/'));
                        prop_assert!(!cwd.as_str().split('/').any(|c| c == ".."));
                    }
                }
                Err(e) => {
                    let text = e.to_string();
                    prop_assert!(!text.contains("CANARY"), "{}", text);
                    prop_assert!(text.len() < 512);
                }
            }
            match spill_read(args) {
                Ok(ok) => prop_assert!(ok.length >= 1 && ok.length <= MAX_SPILL_READ),
                Err(e) => prop_assert!(e.to_string().len() < 512),
            }
        }
    }
}
