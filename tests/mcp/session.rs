//! What clients send that the SDK alone answers badly, answered well: a
//! probe before `initialize`, lines that are not JSON-RPC, a `tools/call`
//! whose arguments are not an object, a duplicate in-flight id; and the
//! tool surface strict clients check (titles, annotations, no type arrays,
//! integral floats, base64 spill reads, locators valid across restarts).

use serde_json::{Value, json};

use crate::client::Server;
use crate::sandbox;

fn tools(server: &mut Server) -> Vec<Value> {
    let r = server.request(json!("tools"), "tools/list", json!({}));
    r["result"]["tools"].as_array().cloned().unwrap_or_default()
}

#[test]
#[ignore = "deletes: run by session_in_a_private_mount_namespace"]
fn a_probe_before_initialize_is_method_not_found_and_the_session_goes_on() {
    let tmp = sandbox::tempdir();
    let mut server = Server::start(tmp.path(), &[]);
    // What the Python SDK's default client sends first.
    let r = server.request(json!(1), "server/discover", json!({}));
    assert_eq!(r["error"]["code"], -32601, "{r}");
    // A notification before initialize is dropped, never fatal.
    server.send(&json!({"jsonrpc": "2.0", "method": "notifications/whatever"}));
    let r = server.request(json!(2), "ping", json!({}));
    assert_eq!(r["result"], json!({}), "{r}");
    server.initialize();
    assert_eq!(tools(&mut server).len(), 7);
    let (code, stderr) = server.wait();
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
#[ignore = "deletes: run by session_in_a_private_mount_namespace"]
fn malformed_and_duplicate_requests_are_answered_and_the_session_goes_on() {
    let tmp = sandbox::tempdir();
    let mut server = Server::start(tmp.path(), &[]);
    server.initialize();
    server.send_raw("{this is not json");
    let r = server.next();
    assert_eq!(
        (r["error"]["code"].clone(), r["id"].clone()),
        (json!(-32700), Value::Null),
        "{r}"
    );
    server.send_raw("[1, 2]");
    assert_eq!(server.next()["error"]["code"], -32600);
    let r = server.request(
        json!(3),
        "tools/call",
        json!({"name": "process_run", "arguments": "ls -l"}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // A duplicate of an id still in flight is refused; the first is
    // answered as usual.
    server.call_run(json!(4), "sleep", &["0.5"]);
    server.call_run(json!(4), "true", &[]);
    let dup = server.response(&json!(4));
    assert_eq!(dup["error"]["code"], -32600, "{dup}");
    let first = server.response(&json!(4));
    assert_eq!(
        first["result"]["structuredContent"]["evidence"]["status"], "exited",
        "{first}"
    );
    // Once answered, the id is free again; an integral float is an integer.
    let r = server.request(
        json!(4),
        "tools/call",
        json!({"name": "process_run", "arguments": {"executable": "true", "timeout_ms": 5000.0}}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
    let (code, stderr) = server.wait();
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
#[ignore = "deletes: run by session_in_a_private_mount_namespace"]
fn tools_carry_titles_annotations_and_schemas_without_type_arrays() {
    let tmp = sandbox::tempdir();
    let mut server = Server::start(tmp.path(), &[]);
    server.initialize();
    let listed = tools(&mut server);
    let by_name = |n: &str| listed.iter().find(|t| t["name"] == n).cloned().unwrap();
    let run = by_name("process_run");
    let read = by_name("spill_read");
    for (name, read_only) in [
        ("process_start", false),
        ("process_read", true),
        ("process_write", false),
        ("process_signal", false),
        ("process_list", true),
    ] {
        let t = by_name(name);
        assert!(t["title"].is_string(), "{t}");
        assert_eq!(t["annotations"]["readOnlyHint"], read_only, "{t}");
        assert_eq!(t["inputSchema"]["additionalProperties"], false, "{t}");
    }
    assert!(run["title"].is_string(), "{run}");
    assert_eq!(run["annotations"]["destructiveHint"], true, "{run}");
    assert_eq!(run["annotations"]["openWorldHint"], true, "{run}");
    assert_eq!(read["annotations"]["readOnlyHint"], true, "{read}");
    for t in &listed {
        let text = t.to_string();
        assert!(
            !text.contains("\"type\":["),
            "a type array in {}",
            t["name"]
        );
    }
}

/// A range of a spilled output read as base64 is exact where text would
/// show a cut character as U+FFFD; a server started again on the same
/// workspace reads the same locator (the default spill root is the
/// workspace's, not one per process). (The spill holds the captured text:
/// output that is not UTF-8 was captured with U+FFFD already.)
#[test]
#[ignore = "deletes: run by session_in_a_private_mount_namespace"]
fn spills_read_back_exactly_and_survive_a_restart() {
    let tmp = sandbox::tempdir();
    let args = ["--inline-budget", "1KiB"];
    let mut server = Server::start(tmp.path(), &args);
    server.initialize();
    // 4 KiB of `é` (c3 a9).
    let r = server.request(
        json!(1),
        "tools/call",
        json!({"name": "process_run", "arguments": {
            "executable": "sh", "argv": ["-c", "i=0; while [ $i -lt 2048 ]; do printf '\\303\\251'; i=$((i+1)); done"]}}),
    );
    let content = &r["result"]["structuredContent"];
    let locator = content["spill"]["stdout"]["locator"]
        .as_str()
        .unwrap_or_else(|| panic!("no spill: {r}"))
        .to_owned();
    let read = |server: &mut Server, id: i64, encoding: &str| {
        let r = server.request(
            json!(id),
            "tools/call",
            json!({"name": "spill_read", "arguments": {
                "locator": locator, "offset": 1, "length": 4, "encoding": encoding}}),
        );
        r["result"]["structuredContent"].clone()
    };
    // Bytes 1..5: a9 c3 a9 c3, two halves around one whole `é`.
    let got = read(&mut server, 2, "base64");
    assert_eq!(got["base64"], "qcOpww==", "{got}");
    assert_eq!(got["total_bytes"], 4096, "{got}");
    assert!(got.get("text").is_none(), "{got}");
    let text = read(&mut server, 3, "text");
    assert_eq!(text["text"], "\u{fffd}é\u{fffd}", "{text}");
    let (code, _) = server.wait();
    assert_eq!(code, Some(0));
    let mut again = Server::start(tmp.path(), &args);
    again.initialize();
    let got = read(&mut again, 4, "base64");
    assert_eq!(got["base64"], "qcOpww==", "after a restart: {got}");
}

#[test]
#[ignore = "deletes: run by session_in_a_private_mount_namespace"]
fn an_operators_allow_list_lets_a_call_reach_its_hosts_only() {
    if custodian::confine::landlock_abi() == 0 {
        skipped!("the kernel has no Landlock");
        return;
    }
    let port = crate::http::http_server("fetched-over-mcp");
    let tmp = sandbox::tempdir();
    let allowed = format!("allowed.test:{port}");
    let mut server = Server::start(
        tmp.path(),
        &[
            "--confine",
            "workspace-write",
            "--allow-host",
            &allowed,
            "--resolve",
            "allowed.test=127.0.0.1",
            "--resolve",
            "denied.test=127.0.0.1",
        ],
    );
    server.initialize();
    let script = format!(
        "curl -sS http://allowed.test:{port}/; echo; \
         curl -sS -o /dev/null -w 'denied=%{{http_code}}' http://denied.test:{port}/"
    );
    let r = server.request(
        json!(1),
        "tools/call",
        json!({"name": "process_run", "arguments": {"executable": "sh", "argv": ["-c", script]}}),
    );
    let ev = &r["result"]["structuredContent"]["evidence"];
    if ev.is_null() {
        let text = r.to_string();
        assert!(
            text.contains("confinement_spawner_unavailable")
                || text.contains("confinement_isolation_unavailable"),
            "{r}"
        );
        skipped!("this host cannot confine ({text})");
        return;
    }
    assert_eq!(ev["stdout"]["text"], "fetched-over-mcp\ndenied=403", "{r}");
    assert_eq!(ev["confinement"]["network"], "allow", "{r}");
    assert_eq!(ev["network"]["allowed"][0]["host"], "allowed.test", "{r}");
    assert_eq!(ev["network"]["refused"][0]["host"], "denied.test", "{r}");
    let (code, stderr) = server.wait();
    assert_eq!(code, Some(0), "{stderr}");
}

/// No tool is served as a task: a `process_run` asked as one is refused
/// as invalid params (the tool's listing forbids it) and runs nothing; a
/// name that is no tool finds no listing to refuse it by, and fails as a
/// task nothing serves. A plain call still runs.
#[test]
#[ignore = "deletes: run by session_in_a_private_mount_namespace"]
fn a_call_asked_as_a_task_is_refused_by_its_tools_listing() {
    let tmp = sandbox::tempdir();
    let mut server = Server::start(tmp.path(), &[]);
    server.initialize();
    let marker = tmp.path().join("ran-as-a-task");
    let r = server.request(
        json!(1),
        "tools/call",
        json!({"name": "process_run", "task": {},
            "arguments": {"executable": "touch", "argv": [marker.to_str().unwrap()]}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("task"),
        "{r}"
    );
    let r = server.request(
        json!(2),
        "tools/call",
        json!({"name": "no_such_tool", "task": {}}),
    );
    assert!(r["error"].is_object(), "{r}");
    assert_ne!(r["error"]["code"], -32602, "refused by a listing: {r}");
    let r = server.request(
        json!(3),
        "tools/call",
        json!({"name": "process_run", "arguments": {"executable": "true"}}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert!(!marker.exists(), "a call asked as a task ran");
    let (code, stderr) = server.wait();
    assert_eq!(code, Some(0), "{stderr}");
}
