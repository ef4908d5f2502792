//! The front of the server: every line between the client and the SDK passes
//! through here, so that what the SDK would answer badly is answered well.
//!
//! The SDK (`rmcp`) ends the session on a request before `initialize` that is
//! not `initialize` or `ping` (clients probe with `server/discover`), on a
//! line that is not JSON-RPC, and on a `tools/call` whose `arguments` is not
//! an object; and it silently replaces an in-flight request whose id is used
//! again. The gate answers those itself, per JSON-RPC 2.0:
//!
//! | message | answer |
//! | --- | --- |
//! | not JSON | `-32700` parse error, id `null` |
//! | JSON but not one JSON-RPC message (an array, a number, no `method`…) | `-32600`, id `null` (or the message's id) |
//! | a request before `initialize` other than `initialize` and `ping` | `-32601` method not found |
//! | a notification or response before `initialize` | dropped (nothing to answer) |
//! | a request whose id is already in flight | `-32600` "duplicate request id" (the first goes on) |
//! | `tools/call` whose `params` is not an object, `name` not a string, or `arguments` not an object | `-32602` invalid params |
//! | a line over [`MAX_LINE`] bytes | `-32600`, id `null`; the line is discarded |
//!
//! Everything else goes to the SDK unchanged. Lines coming back are passed to
//! the client unchanged; a response retires its id from the in-flight set (as
//! does the client's `notifications/cancelled`).
//!
//! The gate is a pure state machine over lines ([`LineGate::inbound`],
//! [`LineGate::outbound`]); the pumps that move the bytes are in `super::pump`.

use std::collections::HashSet;

use serde_json::{Value, json};

/// The longest line the gate takes from the client: 16 MiB, far above any
/// `tools/call` the input limits accept.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// What to do with one line from the client.
#[derive(Debug, PartialEq, Eq)]
pub enum Inbound {
    /// Pass it to the SDK as it is.
    Forward,
    /// Answer the client with this JSON-RPC message (one line, no newline);
    /// the SDK never sees the line.
    Answer(Vec<u8>),
    /// Nothing to do (a notification or response the SDK must not see).
    Drop,
}

/// The gate's state: whether the session is initialized, and which client
/// request ids are in flight.
#[derive(Debug, Default)]
pub struct LineGate {
    initialized: bool,
    in_flight: HashSet<String>,
}

/// JSON-RPC's error codes used here.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

fn error(id: &Value, code: i64, message: &str) -> Inbound {
    let msg = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": code, "message": message },
    });
    Inbound::Answer(msg.to_string().into_bytes())
}

/// The key of an id in the in-flight set: its JSON text, so `1` and `"1"`
/// stay two ids, as JSON-RPC says.
fn key(id: &Value) -> String {
    id.to_string()
}

fn valid_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

impl LineGate {
    /// A gate for a session that has not been initialized.
    pub fn new() -> LineGate {
        LineGate::default()
    }

    /// Decides one line from the client (without its newline).
    pub fn inbound(&mut self, line: &[u8]) -> Inbound {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            // The SDK skips blank lines; so does the gate.
            return Inbound::Drop;
        }
        let Ok(msg) = serde_json::from_slice::<Value>(line) else {
            return error(&Value::Null, PARSE_ERROR, "parse error: not JSON");
        };
        let Value::Object(obj) = &msg else {
            return error(
                &Value::Null,
                INVALID_REQUEST,
                "invalid request: one JSON-RPC message object per line (batches are not supported)",
            );
        };
        let id = obj.get("id");
        let method = obj.get("method");
        match (method, id) {
            // A response to a request of the server's (an elicitation).
            (None, Some(id)) if obj.contains_key("result") || obj.contains_key("error") => {
                if self.initialized && (valid_id(id) || id.is_null()) {
                    Inbound::Forward
                } else {
                    Inbound::Drop
                }
            }
            (None, id) => error(
                id.filter(|i| valid_id(i)).unwrap_or(&Value::Null),
                INVALID_REQUEST,
                "invalid request: no method",
            ),
            (Some(Value::String(method)), None) => self.notification(method, obj),
            (Some(Value::String(method)), Some(id)) => {
                if !valid_id(id) {
                    return error(
                        &Value::Null,
                        INVALID_REQUEST,
                        "invalid request: the id must be a string or an integer",
                    );
                }
                self.request(method, id, obj)
            }
            (Some(_), id) => error(
                id.filter(|i| valid_id(i)).unwrap_or(&Value::Null),
                INVALID_REQUEST,
                "invalid request: the method must be a string",
            ),
        }
    }

    fn notification(&mut self, method: &str, obj: &serde_json::Map<String, Value>) -> Inbound {
        if !self.initialized {
            return Inbound::Drop;
        }
        if method == "notifications/cancelled" {
            // A cancelled request may never be answered: its id is free.
            if let Some(id) = obj
                .get("params")
                .and_then(|p| p.get("requestId"))
                .filter(|i| valid_id(i))
            {
                self.in_flight.remove(&key(id));
            }
        }
        Inbound::Forward
    }

    fn request(
        &mut self,
        method: &str,
        id: &Value,
        obj: &serde_json::Map<String, Value>,
    ) -> Inbound {
        if !self.initialized {
            match method {
                "initialize" => {}
                "ping" => return self.admit(id),
                _ => {
                    return error(
                        id,
                        METHOD_NOT_FOUND,
                        "method not found (the session is not initialized: send initialize first)",
                    );
                }
            }
        }
        if method == "tools/call" {
            if let Some(why) = bad_call_params(obj.get("params")) {
                return error(id, INVALID_PARAMS, why);
            }
        }
        let admitted = self.admit(id);
        if admitted == Inbound::Forward && method == "initialize" {
            self.initialized = true;
        }
        admitted
    }

    /// Forwards a request unless its id is in flight already.
    fn admit(&mut self, id: &Value) -> Inbound {
        if self.in_flight.insert(key(id)) {
            Inbound::Forward
        } else {
            error(
                id,
                INVALID_REQUEST,
                "duplicate request id: a request with this id is still in flight",
            )
        }
    }

    /// Notes one line from the SDK to the client: a response retires its id.
    pub fn outbound(&mut self, line: &[u8]) {
        let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        if obj.contains_key("method") {
            return; // a request or notification of the server's
        }
        if let Some(id) = obj.get("id") {
            self.in_flight.remove(&key(id));
        }
    }

    /// How many client requests are in flight (admitted, not yet answered).
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

/// Why a `tools/call`'s params are refused, if they are.
fn bad_call_params(params: Option<&Value>) -> Option<&'static str> {
    let Some(Value::Object(p)) = params else {
        return Some("invalid params: tools/call needs a params object");
    };
    if !p.get("name").is_some_and(Value::is_string) {
        return Some("invalid params: tools/call needs a tool name (a string)");
    }
    match p.get("arguments") {
        None | Some(Value::Null | Value::Object(_)) => None,
        Some(_) => Some("invalid params: arguments must be an object"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(i: Inbound) -> Value {
        match i {
            Inbound::Answer(b) => serde_json::from_slice(&b).unwrap(),
            other => panic!("not an answer: {other:?}"),
        }
    }

    const INIT: &[u8] = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#;

    fn initialized() -> LineGate {
        let mut g = LineGate::new();
        assert_eq!(g.inbound(INIT), Inbound::Forward);
        g.outbound(br#"{"jsonrpc":"2.0","id":0,"result":{}}"#);
        g
    }

    #[test]
    fn before_initialize_unknown_requests_are_method_not_found() {
        let mut g = LineGate::new();
        let a = answer(g.inbound(br#"{"jsonrpc":"2.0","id":"d","method":"server/discover"}"#));
        assert_eq!(a["id"], "d");
        assert_eq!(a["error"]["code"], -32601);
        assert_eq!(
            g.inbound(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Inbound::Drop
        );
        assert_eq!(
            g.inbound(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Inbound::Forward
        );
        g.outbound(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        assert_eq!(g.inbound(INIT), Inbound::Forward);
        // Initialized: the SDK answers unknown methods itself.
        assert_eq!(
            g.inbound(br#"{"jsonrpc":"2.0","id":"e","method":"server/discover"}"#),
            Inbound::Forward
        );
    }

    #[test]
    fn malformed_lines_are_answered_not_forwarded() {
        let mut g = initialized();
        for (line, code) in [
            (&b"{not json"[..], -32700),
            (b"[1,2]", -32600),
            (b"3", -32600),
            (br#"{"jsonrpc":"2.0","id":1}"#, -32600),
            (br#"{"jsonrpc":"2.0","id":1,"method":7}"#, -32600),
            (br#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#, -32600),
            (br#"{"jsonrpc":"2.0","id":2.5,"method":"ping"}"#, -32600),
        ] {
            let a = answer(g.inbound(line));
            assert_eq!(
                a["error"]["code"],
                code,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        assert_eq!(g.inbound(b"  \r"), Inbound::Drop);
    }

    #[test]
    fn tools_call_params_are_checked() {
        let mut g = initialized();
        for params in [
            r#""x""#,
            r#"{"arguments":{}}"#,
            r#"{"name":3}"#,
            r#"{"name":"process_run","arguments":"ls"}"#,
            r#"{"name":"process_run","arguments":[1]}"#,
        ] {
            let line =
                format!(r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{params}}}"#);
            let a = answer(g.inbound(line.as_bytes()));
            assert_eq!(a["error"]["code"], -32602, "{params}");
            assert_eq!(a["id"], 9);
        }
        // None of those took the id.
        assert_eq!(g.in_flight(), 0);
        let ok = br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"x","arguments":{}}}"#;
        assert_eq!(g.inbound(ok), Inbound::Forward);
    }

    #[test]
    fn a_duplicate_in_flight_id_is_answered_and_freed_by_the_response() {
        let mut g = initialized();
        let call = br#"{"jsonrpc":"2.0","id":"c1","method":"tools/list"}"#;
        assert_eq!(g.inbound(call), Inbound::Forward);
        let a = answer(g.inbound(call));
        assert_eq!(a["error"]["code"], -32600);
        assert_eq!(a["id"], "c1");
        // The number 1 and the string "1" are two ids.
        assert_eq!(
            g.inbound(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            Inbound::Forward
        );
        assert_eq!(
            g.inbound(br#"{"jsonrpc":"2.0","id":"1","method":"tools/list"}"#),
            Inbound::Forward
        );
        // A server request's line does not retire a client id.
        g.outbound(br#"{"jsonrpc":"2.0","id":"c1","method":"elicitation/create"}"#);
        assert!(matches!(g.inbound(call), Inbound::Answer(_)));
        g.outbound(br#"{"jsonrpc":"2.0","id":"c1","result":{}}"#);
        assert_eq!(g.inbound(call), Inbound::Forward);
        // A cancellation frees the id as well.
        g.inbound(
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c1"}}"#,
        );
        assert_eq!(g.inbound(call), Inbound::Forward);
    }

    #[test]
    fn responses_to_the_server_pass_once_initialized() {
        let mut g = LineGate::new();
        let resp = br#"{"jsonrpc":"2.0","id":0,"result":{"action":"accept"}}"#;
        assert_eq!(g.inbound(resp), Inbound::Drop);
        let mut g = initialized();
        assert_eq!(g.inbound(resp), Inbound::Forward);
    }
}
