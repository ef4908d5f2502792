"""End-to-end test of `custodian mcp`, driven by the official Python MCP SDK.

Usage: tests/mcp/run.sh PYTHON PATH/TO/custodian (as root it runs this
script in a private mount namespace where only its scratch directory is
writable; this script checks that first).

Every byte between client and server is teed to files, and the server's
stderr (at CUSTODIAN_LOG=trace) is kept: at the end no canary value from the
server's environment may appear in any of them. The workspace and the spill
root live in a fresh temporary directory; the only deletions the server makes
are inside it.
"""

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import traceback

import anyio
import signal

from mcp import Client, ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

CANARY_SECRET = "canary-secret-7f3a91c2d4"
CANARY_ENV = "canary-env-e81b5c0f66"
# A literal overlay value the client sends: it is the client's own, so it may
# come back to it (in the output of a process that prints it, or in a match
# target), but it must never reach the server's log.
CANARY_LITERAL = "canary-literal-5d2e0a"

POLICY = """\
version = 1
[tools]
default_mode = "deny"
allow = ["process.run"]
[policy]
default_decision = "require_approval"
[[policy.rules]]
tool = "process.run"
decision = "deny"
target = '{"executable":"rm",*'
[[policy.rules]]
tool = "process.run"
decision = "allow"
target = '{"executable":"sh",*'
[[policy.rules]]
tool = "process.run"
decision = "allow"
target = '{"executable":"python3",*'
"""

results = {"passed": 0, "failed": 0}


def check(cond, what):
    if not cond:
        raise AssertionError(what)


class Env:
    def __init__(self, exe, root):
        self.exe = exe
        self.root = root
        self.ws = os.path.join(root, "ws")
        self.spill = os.path.join(root, "spill")
        os.makedirs(self.ws)
        os.makedirs(self.spill)
        self.policy = os.path.join(root, "policy.toml")
        with open(self.policy, "w") as f:
            f.write(POLICY)
        self.logs = []

    def params(self, name, extra=()):
        tin = os.path.join(self.root, f"{name}.in.jsonl")
        tout = os.path.join(self.root, f"{name}.out.jsonl")
        self.logs += [tin, tout]
        server = [
            self.exe, "mcp", "--workspace", self.ws, "--policy", self.policy,
            "--provenance", "trusted", "--spill-root", self.spill,
            "--inline-budget", "4KiB", "--progress-every", "200ms",
            "--secret-env", "CANARY_SECRET", *extra,
        ]
        # Tee both directions so the test sees every message on the wire.
        cmd = f"tee -a {shlex.quote(tin)} | {shlex.join(server)} | tee -a {shlex.quote(tout)}"
        return StdioServerParameters(
            command="sh",
            args=["-c", cmd],
            env={
                "CANARY_SECRET": CANARY_SECRET,
                "CANARY_ENV": CANARY_ENV,
                "CUSTODIAN_LOG": "trace",
                # The SDK passes only a few variables on; the server's temp
                # dir (private TMPDIRs, default spill roots) is the scratch.
                "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
            },
        )

    def errlog(self, name):
        path = os.path.join(self.root, f"{name}.stderr.log")
        self.logs.append(path)
        return open(path, "w")

    def jobs(self):
        d = os.path.join(self.ws, ".custodian", "job")
        return sorted(os.listdir(d)) if os.path.isdir(d) else []


def structured(res):
    check(res.structured_content is not None, "no structured content")
    return res.structured_content


def text_of(res):
    check(len(res.content) == 1 and res.content[0].type == "text", "one text block")
    return res.content[0].text


async def t_list_tools(env, s):
    tools = {t.name: t for t in (await s.list_tools()).tools}
    check(set(tools) == {"process_run", "spill_read", "process_start", "process_read",
                         "process_write", "process_signal", "process_list"},
          f"tools: {sorted(tools)}")
    for name in ("process_start", "process_read", "process_write", "process_signal",
                 "process_list"):
        check(tools[name].title, f"{name}: a title")
        check(tools[name].input_schema.get("additionalProperties") is False,
              f"{name}: closed input schema")
    pr = tools["process_run"]
    check(pr.input_schema.get("additionalProperties") is False, "closed input schema")
    check(pr.input_schema["required"] == ["executable"], "executable required")
    success = pr.output_schema["oneOf"][0]
    check("evidence" in success["properties"], "output schema: the run")
    check(pr.output_schema["oneOf"][1]["required"] == ["error"], "output schema: the error")
    check(tools["spill_read"].output_schema is not None, "spill_read output schema")


async def t_run(env, s):
    res = await s.call_tool(
        "process_run",
        {
            "executable": "sh",
            "argv": ["-c", 'echo hello; echo "tok=$TOKEN plain=$PLAIN"; env; echo "<\\/data>"'],
            "env": {"TOKEN": {"secret_ref": "CANARY_SECRET"}, "PLAIN": CANARY_LITERAL},
            "timeout_ms": 10000,
        },
    )
    check(not res.is_error, f"error: {text_of(res)[:300]}")
    await s.validate_tool_result("process_run", res)
    out = structured(res)
    ev = out["evidence"]
    check(ev["status"] == "exited" and ev["exit_code"] == 0, f"status {ev['status']}")
    print(f"     containment tier: {ev['descendants']['tier']} ({ev['descendants'].get('fallback_reason')})")
    stdout = ev["stdout"]["text"]
    check(stdout.startswith("hello\n"), f"stdout {stdout[:80]!r}")
    check(f"tok=[REDACTED] plain={CANARY_LITERAL}" in stdout, "secret redacted, literal passed")
    check("CANARY_ENV" not in stdout, "the server's environment is not inherited")
    check(ev["stdout"]["redactions"] >= 1, "redaction counted")
    check(out["cancelled"] is False, "not cancelled")
    check(out["cleanup"]["status"] == "cleaned", f"cleanup {out['cleanup']}")
    check(out["request_id"] not in env.jobs(), "job dir removed")
    check(out["spill"] == {"stdout": None, "stderr": None}, "nothing spilled")
    text = text_of(res)
    check(text.startswith('<data source="tool">') and text.endswith("</data>"), "boundary")
    inner = text[len('<data source="tool">'):-len("</data>")]
    check("<" not in inner and ">" not in inner, "boundary cannot be closed from inside")
    check(json.loads(inner) == out, "text rendering is the structured content")


async def read_until(s, sid, want, offset=0):
    text = ""
    for _ in range(20):
        res = await s.call_tool("process_read",
                                {"session_id": sid, "stdout_offset": offset, "wait_ms": 1000})
        check(not res.is_error, f"process_read: {text_of(res)[:300]}")
        r = structured(res)
        text += r["stdout"]["text"]
        offset = r["next"]["stdout"]
        if want in text or r["ended"]:
            break
    check(want in text, f"no {want!r} in {text!r}")
    return text


async def t_sessions(env, s):
    """A REPL driven through the official SDK; a server started by one call
    and fetched by the next; both stopped when the MCP session ends
    (checked by t_sessions_gone)."""
    res = await s.call_tool("process_start",
                            {"executable": "python3", "argv": ["-i", "-q", "-u"]})
    check(not res.is_error, f"process_start: {text_of(res)[:300]}")
    repl = structured(res)
    res = await s.call_tool("process_write",
                            {"session_id": repl["session_id"], "input": "print(6*7)\n"})
    check(not res.is_error and structured(res)["bytes_written"] == 11, text_of(res)[:300])
    await read_until(s, repl["session_id"], "42")
    res = await s.call_tool("process_start", {
        "executable": "python3",
        "argv": ["-u", "-m", "http.server", "0", "--bind", "127.0.0.1"]})
    check(not res.is_error, f"process_start: {text_of(res)[:300]}")
    srv = structured(res)
    banner = await read_until(s, srv["session_id"], "port ")
    port = int(banner.split("port ")[1].split(" ")[0])
    res = await s.call_tool("process_run", {
        "executable": "python3",
        "argv": ["-c", "import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1]).status)",
                 f"http://127.0.0.1:{port}/"]})
    check(not res.is_error, f"fetch: {text_of(res)[:300]}")
    check(structured(res)["evidence"]["stdout"]["text"].strip() == "200", "the server answered")
    listed = structured(await s.call_tool("process_list", {}))["sessions"]
    check(len(listed) == 2 and all(x["running"] for x in listed), f"process_list: {listed}")
    # A terminal session: a prompt on /dev/tty with echo off, answered.
    prompt = "import getpass; a = getpass.getpass('Password: '); print('got', a[::-1])"
    res = await s.call_tool("process_start", {
        "executable": "python3", "argv": ["-c", prompt],
        "terminal": {"cols": 80, "rows": 24}})
    check(not res.is_error, f"process_start terminal: {text_of(res)[:300]}")
    await s.validate_tool_result("process_start", res)
    tty = structured(res)
    await read_until(s, tty["session_id"], "Password: ")
    res = await s.call_tool("process_write", {"session_id": tty["session_id"], "input": "s3cret\n"})
    check(not res.is_error, text_of(res)[:300])
    shown = await read_until(s, tty["session_id"], "got terc3s")
    check("s3cret" not in shown, f"echo was off: {shown!r}")
    # The read that reaches the end carries the evidence, valid against the
    # declared output schema.
    offset = 0
    for _ in range(20):
        res = await s.call_tool("process_read", {"session_id": tty["session_id"],
                                                 "stdout_offset": offset, "wait_ms": 1000})
        r = structured(res)
        offset = r["next"]["stdout"]
        if r["ended"]:
            break
    check(r["ended"] and r["evidence"]["status"] == "exited", f"ended with evidence: {r}")
    check(r["evidence"]["interactions"]["terminal"] == {"cols": 80, "rows": 24}, str(r["evidence"]))
    await s.validate_tool_result("process_read", res)
    env.session_pids = [repl["pid"], srv["pid"]]


async def t_sessions_gone(env, _):
    pids = getattr(env, "session_pids", [])
    check(len(pids) == 2, "t_sessions ran")
    for pid in pids:
        check(wait_gone(pid), f"session {pid} outlived its MCP session")


async def t_denied(env, s):
    res = await s.call_tool("process_run", {"executable": "rm", "argv": ["-rf", "x"]})
    check(res.is_error, "denied is an error")
    await s.validate_tool_result("process_run", res)
    err = structured(res)["error"]
    check(err["kind"] == "policy_refused" and err["code"] == "policy_denied", str(err))
    check(err["reason"]["code"] == "denied_by_rule", str(err["reason"]))
    check(err["target"] is None and err["suggested_override"] is None, "no target on deny")
    check(text_of(res).startswith('<data source="tool">'), "boundary")


async def t_approval_without_elicitation(env, s):
    res = await s.call_tool(
        "process_run", {"executable": "echo", "argv": ["approve", "me"], "env": {"A": "1"}}
    )
    check(res.is_error, "approval required is an error")
    await s.validate_tool_result("process_run", res)
    err = structured(res)["error"]
    check(err["code"] == "approval_required", str(err))
    want = '{"executable":"echo","argv":["approve","me"],"cwd":".","env":{"A":"1"}}'
    check(err["target"] == want, f"target {err['target']}")
    check(err["suggested_override"] == want, "exact override")
    check(err["suggested_override_toml"] == f"'{want}'", "toml literal")
    check(env.jobs() == [], "nothing launched, no job")


async def t_approval_with_elicitation(env, exe):
    asked = []

    async def approve(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async def decline(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="decline")

    for cb, ok in ((approve, True), (decline, False)):
        async with stdio_client(env.params("elicit"), errlog=env.errlog("elicit")) as (r, w):
            async with ClientSession(r, w, elicitation_callback=cb) as s:
                await s.initialize()
                res = await s.call_tool("process_run", {"executable": "echo", "argv": ["approved"]})
                if ok:
                    check(not res.is_error, f"approved run: {text_of(res)[:300]}")
                    check(structured(res)["evidence"]["stdout"]["text"] == "approved\n", "ran")
                else:
                    check(res.is_error, "declined")
                    check(structured(res)["error"]["code"] == "approval_declined", "declined code")
    check(len(asked) == 2 and '"executable":"echo"' in asked[0], f"elicited: {asked}")

    # Cancelled while the user is being asked: nothing launches.
    marker = os.path.join(env.ws, "launched-without-approval")

    async def hang(context, params):
        asked.append(params.message)
        being_asked.set()
        # Approves, but only after the call was cancelled.
        await anyio.sleep(2.5)
        return types.ElicitResult(action="accept", content={"approve": True})

    async with stdio_client(env.params("elicit"), errlog=env.errlog("elicit-cancel")) as (r, w):
        async with ClientSession(r, w, elicitation_callback=hang) as s:
            await s.initialize()
            being_asked = anyio.Event()

            async def cancel_when_asked(scope):
                await being_asked.wait()
                scope.cancel()

            with anyio.move_on_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(cancel_when_asked, tg.cancel_scope)
                    await s.call_tool("process_run", {"executable": "touch", "argv": [marker]})
            check(being_asked.is_set(), "the call was waiting for the approval")
            check(len(asked) == 3, "the user was asked")
            res = await s.call_tool("process_run", {"executable": "sh", "argv": ["-c", "echo still"]})
            check(structured(res)["evidence"]["stdout"]["text"] == "still\n", "served after")
            await anyio.sleep(3.5)
            check(not os.path.exists(marker), "a call cancelled before approval launched")
            check(env.jobs() == [], f"job dirs left: {env.jobs()}")


async def t_cancel(env, s):
    pidfile = os.path.join(env.ws, "cancel.pid")
    progress = []

    async def on_progress(p, total, message):
        progress.append(message)

    cancelled = []

    async def cancel_when_running(scope):
        # Cancel once the process runs and a progress report has seen its
        # first output: mid-run, whatever the machine's load.
        while not (os.path.exists(pidfile) and any("stdout 8 bytes" in m for m in progress)):
            await anyio.sleep(0.05)
        cancelled.append(True)
        scope.cancel()

    with anyio.move_on_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_when_running, tg.cancel_scope)
            await s.call_tool(
                "process_run",
                {
                    "executable": "sh",
                    "argv": ["-c", f"echo $$ > {shlex.quote(pidfile)}; sh -c 'sleep 60' & echo started; sleep 60"],
                    "timeout_ms": 120000,
                },
                progress_callback=on_progress,
            )
    check(cancelled, "the call was still running when cancelled")
    check(os.path.exists(pidfile), "process started")
    pgid = int(open(pidfile).read())
    check(progress and "stdout 8 bytes" in progress[-1], f"progress: {progress}")
    # A call with a progress token streams its output in the messages.
    check(any("\n[stdout] started\n" in m for m in progress), f"output in progress: {progress}")
    # The server kills the group and cleans the job; allow the grace (2s).
    deadline = time.monotonic() + 10
    alive = True
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            alive = False
            if env.jobs() == []:
                break
        await anyio.sleep(0.1)
    check(not alive, f"process group {pgid} still alive after cancel")
    check(env.jobs() == [], f"job dirs left: {env.jobs()}")
    # The server is still serving, and saw exactly one settlement.
    res = await s.call_tool("process_run", {"executable": "sh", "argv": ["-c", "echo after"]})
    check(structured(res)["evidence"]["stdout"]["text"] == "after\n", "served after cancel")


async def t_spill(env, s):
    n = 3000
    res = await s.call_tool(
        "process_run",
        {"executable": "sh", "argv": ["-c", f"i=0; while [ $i -lt {n} ]; do echo line $i; i=$((i+1)); done"]},
    )
    await s.validate_tool_result("process_run", res)
    out = structured(res)
    expected = "".join(f"line {i}\n" for i in range(n)).encode()
    so = out["evidence"]["stdout"]
    check(so["truncated"] and so["bytes_read"] == len(expected), f"inline cut: {so['bytes_read']}")
    check(so["bytes_kept"] <= 4096, "inline budget kept")
    sp = out["spill"]["stdout"]
    check(sp and sp["complete"] and sp["bytes"] == len(expected), f"spill {sp}")
    got, off = b"", 0
    while True:
        r = await s.call_tool("spill_read", {"locator": sp["locator"], "offset": off, "length": 10000})
        check(not r.is_error, f"spill_read: {text_of(r)[:200]}")
        await s.validate_tool_result("spill_read", r)
        c = structured(r)
        check(c["length"] <= 10000 and c["total_bytes"] == len(expected), "bounded range")
        got += c["text"].encode()
        off += c["length"]
        if c["eof"]:
            break
    check(got == expected, "spilled output reads back whole")
    r = await s.call_tool("spill_read", {"locator": sp["locator"], "offset": 7, "length": 6})
    check(structured(r)["text"] == "line 1", f"range: {structured(r)['text']!r}")
    r = await s.call_tool("spill_read", {"locator": sp["locator"], "length": 10 ** 9})
    check(r.is_error and structured(r)["error"]["code"] == "out_of_range", "length bounded")
    await s.validate_tool_result("spill_read", r)
    other = sp["locator"].replace(":mcp:", ":other:")
    r = await s.call_tool("spill_read", {"locator": other})
    check(r.is_error and structured(r)["error"]["code"] == "foreign_session", "other sessions unreadable")
    r = await s.call_tool("spill_read", {"locator": "cspill1-nope"})
    await s.validate_tool_result("spill_read", r)
    check(r.is_error and structured(r)["error"]["code"] == "bad_locator", "bad locator")


async def t_invalid(env, s):
    cases = [
        ({"executable": "sh", "cwd": "/etc"}, "invalid_invocation"),
        ({"executable": "sh", "cwd": "../.."}, "invalid_invocation"),
        ({"executable": "sh", "argv": "-c ls"}, "wrong_type"),
        ({"executable": "sh", "command": "ls"}, "unknown_field"),
        ({"executable": "sh", "env": {"X": 5}}, "bad_env_entry"),
        ({"executable": "x" * 2_000_000}, "invalid_invocation"),
        ({"executable": "sh", "env": {"X": {"secret_ref": "UNKNOWN"}}}, "env"),
        ({"executable": "sh", "cwd": ".custodian/job"}, "internal_path"),
        ({"executable": "sh", "cwd": "no/such/dir"}, "bad_cwd"),
    ]
    for args, code in cases:
        r = await s.call_tool("process_run", args)
        check(r.is_error, f"{code}: not an error")
        await s.validate_tool_result("process_run", r)
        err = structured(r)["error"]
        check(err["code"] == code, f"want {code}, got {err}")
    check(env.jobs() == [], f"a refused launch left job dirs: {env.jobs()}")


def only_scratch_writable(scratch):
    """As root: every visible mount but the scratch directory (and the cgroup
    v2 hierarchy, and /proc, which holds nothing to delete) must be read-only
    before anything may delete."""
    visible = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split(" ")
            visible[fields[4]] = fields[5]
    for mount, opts in visible.items():
        keep = os.environ.get("CUSTODIAN_TEST_KEEP") or None
        if mount == scratch or mount.startswith(scratch + "/") or mount in (keep, "/proc"):
            continue
        if "ro" not in opts.split(","):
            sys.exit(f"refusing to run: {mount} is writable (run through tests/mcp/run.sh)")


async def main(exe):
    scratch = os.environ.get("CUSTODIAN_TEST_SCRATCH")
    if os.geteuid() == 0:
        if not scratch:
            sys.exit("refusing to run as root outside tests/mcp/run.sh")
        only_scratch_writable(os.path.realpath(scratch))
    with tempfile.TemporaryDirectory(prefix="custodian-mcp-e2e-", dir=scratch) as root:
        env = Env(exe, root)
        async with stdio_client(env.params("main"), errlog=env.errlog("main")) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                for t in (t_list_tools, t_run, t_denied, t_approval_without_elicitation,
                          t_cancel, t_spill, t_invalid, t_sessions):
                    await run_one(t, env, s)
        await run_one(t_sessions_gone, env, None)
        # Plant an expired spill file: the next server's startup sweep must
        # remove it, and keep the recent ones.
        session = os.path.join(env.spill, "mcp")
        recent = sorted(os.listdir(session))
        expired = os.path.join(session, "ab" * 16 + ".spill")
        with open(expired, "w") as f:
            f.write("old output")
        os.chmod(expired, 0o1600)  # the spill store's file mode (a marker)
        old = time.time() - 60 * 86400
        os.utime(expired, (old, old))
        env.expired, env.recent = expired, recent
        await run_one(t_approval_with_elicitation, env, exe)
        await run_one(t_startup_sweep, env, None)
        await run_one(t_confined, env, exe)
        await run_one(t_disconnect, env, exe)
        await run_one(t_default_client, env, exe)
        await run_one(t_close_mid_call, env, exe)
        await run_one(t_killed_client, env, exe)
        # Give the servers a moment to finish their shutdown logs.
        await anyio.sleep(0.5)
        await run_one(t_no_leak, env, None)


async def t_confined(env, exe):
    async with stdio_client(env.params("confined", ["--confine", "read-only"]), errlog=env.errlog("confined")) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            res = await s.call_tool(
                "process_run", {"executable": "sh", "argv": ["-c", "echo hi > written"]}
            )
            out = structured(res)
            if res.is_error and out["error"]["code"].startswith("confinement_"):
                print(f"skipped t_confined: {out['error']['code']} on this kernel")
                return
            check(not res.is_error, f"confined run: {text_of(res)[:300]}")
            await s.validate_tool_result("process_run", res)
            ev = out["evidence"]
            check(ev["confinement"] is not None, "the evidence reports the confinement")
            check(ev["exit_code"] != 0, "writing the workspace was refused")
            check(ev["stderr"]["text"] != "", "the shell said why")
            check(not os.path.exists(os.path.join(env.ws, "written")), "nothing written")


async def t_startup_sweep(env, _):
    check(env.recent, "t_spill left a spill file")
    check(not os.path.exists(env.expired), "the startup sweep removed the expired spill file")
    session = os.path.dirname(env.expired)
    left = set(os.listdir(session))
    check(set(env.recent) <= left, f"recent spill files kept: {env.recent} vs {sorted(left)}")


async def t_disconnect(env, exe):
    """A client that goes away mid-run (stdin closed, no cancellation) leaves
    nothing running and no job behind; the server exits 0."""
    pidfile = os.path.join(env.ws, "disconnect.pid")
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "process_run",
            "arguments": {"executable": "sh", "argv": ["-c", f"echo $$ > {shlex.quote(pidfile)}; sleep 60"]}}},
    ]
    server = subprocess.Popen(
        [exe, "mcp", "--workspace", env.ws, "--spill-root", env.spill],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=env.errlog("disconnect"),
    )
    server.stdin.write("".join(json.dumps(l) + "\n" for l in lines).encode())
    server.stdin.flush()
    deadline = time.monotonic() + 20
    while not os.path.exists(pidfile) and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    check(os.path.exists(pidfile), "the process started")
    await anyio.sleep(0.2)
    pgid = int(open(pidfile).read())
    server.stdin.close()
    rc = await anyio.to_thread.run_sync(lambda: server.wait(timeout=30))
    check(rc == 0, f"server exit status {rc}")
    # Killed descendants are reaped by init, a moment after they died.
    deadline = time.monotonic() + 10
    alive = True
    while alive and time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
            await anyio.sleep(0.05)
        except ProcessLookupError:
            alive = False
    if alive:
        print(subprocess.run(["ps", "-o", "pid,ppid,pgid,stat,cmd", "-g", str(pgid)], capture_output=True, text=True).stdout)
    check(not alive, f"process group {pgid} outlived its client")
    check(env.jobs() == [], f"job dirs left: {env.jobs()}")


def wait_gone(pgid, seconds=10):
    """Whether process group `pgid` is gone within `seconds` (KILLed members
    are reaped by init a moment after they died)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def journals(env):
    d = os.path.join(env.ws, ".custodian", "journal")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def plain_server(env, name):
    """The server with nothing but its workspace, as a client would start it."""
    return StdioServerParameters(
        command=env.exe,
        args=["mcp", "--workspace", env.ws],
        env={"TMPDIR": os.environ.get("TMPDIR", "/tmp")},
    )


async def t_default_client(env, exe):
    """The SDK's default high-level client (`mcp.Client`, mode auto) probes
    `server/discover` first, gets "method not found", falls back to
    `initialize`, and works."""
    async with Client(plain_server(env, "default"), read_timeout_seconds=30) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        check({"process_run", "spill_read", "process_start"} <= tools and len(tools) == 7,
          f"tools: {sorted(tools)}")
        res = await client.call_tool("process_run", {"executable": "sh", "argv": ["-c", "echo hi"]})
        check(not res.is_error, f"run: {text_of(res)[:300]}")
        check(structured(res)["evidence"]["stdout"]["text"] == "hi\n", "the output")
    check(env.jobs() == [], f"job dirs left: {env.jobs()}")


async def t_close_mid_call(env, exe):
    """The client closes (the SDK: stdin closed, SIGTERM after 2 s) while a
    call runs a tree that ignores TERM: the server cancels it at once (500 ms
    shutdown grace), and nothing is left, before the SDK's escalation."""
    pidfile = os.path.join(env.root, "close.pid")
    script = f"trap '' TERM; echo $$ > {shlex.quote(pidfile)}; sleep 300 & sleep 300"
    took = None
    async with anyio.create_task_group() as tg:
        async def call(s):
            try:
                await s.call_tool("process_run", {"executable": "sh", "argv": ["-c", script]})
            except Exception:
                pass  # the session closes under it
        async with stdio_client(plain_server(env, "close")) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                tg.start_soon(call, s)
                deadline = time.monotonic() + 20
                while not os.path.exists(pidfile) and time.monotonic() < deadline:
                    await anyio.sleep(0.02)
                check(os.path.exists(pidfile), "the tree started")
                await anyio.sleep(0.2)
                pgid = int(open(pidfile).read())
                start = time.monotonic()
        took = time.monotonic() - start
        tg.cancel_scope.cancel()
    print(f"     client close mid-call: closed in {took * 1000:.0f} ms")
    check(wait_gone(pgid), f"process group {pgid} outlived the close")
    check(env.jobs() == [], f"job dirs left: {env.jobs()}")
    check(journals(env) == [], f"journals left: {journals(env)}")
    check(took < 20, f"close took {took:.1f}s")


CLIENT_TO_KILL = """
import json, subprocess, sys
ws, exe, script = sys.argv[1:4]
server = subprocess.Popen([exe, "mcp", "--workspace", ws], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def send(m):
    server.stdin.write((json.dumps(m) + "\\n").encode()); server.stdin.flush()
send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "doomed", "version": "0"}}})
server.stdout.readline()
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
    "name": "process_run", "arguments": {"executable": "sh", "argv": ["-c", script]}}})
print(server.pid, flush=True)
server.stdout.read()
"""


async def t_killed_client(env, exe):
    """A client SIGKILLed mid-call: the server sees its input close and
    cleans up as for a close; nothing is left and the server exits."""
    pidfile = os.path.join(env.root, "killed.pid")
    script = f"echo $$ > {shlex.quote(pidfile)}; sleep 300 & sleep 300"
    client = subprocess.Popen([sys.executable, "-c", CLIENT_TO_KILL, env.ws, exe, script],
                              stdout=subprocess.PIPE)
    server_pid = int(client.stdout.readline())
    deadline = time.monotonic() + 20
    while not os.path.exists(pidfile) and time.monotonic() < deadline:
        await anyio.sleep(0.02)
    check(os.path.exists(pidfile), "the tree started")
    await anyio.sleep(0.2)
    pgid = int(open(pidfile).read())
    start = time.monotonic()
    client.send_signal(signal.SIGKILL)
    client.wait()
    # The server is the dead client's orphan now: wait for it to go.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{server_pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":
            break  # exited; its new parent reaps it
        await anyio.sleep(0.01)
    took = time.monotonic() - start
    print(f"     SIGKILLed client: the server was gone {took * 1000:.0f} ms later")
    check(wait_gone(pgid), f"process group {pgid} outlived the client")
    check(env.jobs() == [], f"job dirs left: {env.jobs()}")
    check(journals(env) == [], f"journals left: {journals(env)}")
    check(took < 20, f"the server took {took:.1f}s to go")


async def t_no_leak(env, _):
    seen = 0
    for path in env.logs:
        with open(path, "rb") as f:
            data = f.read()
        seen += len(data)
        for canary in (CANARY_SECRET, CANARY_ENV):
            check(canary.encode() not in data, f"{canary} leaked into {os.path.basename(path)}")
        if path.endswith(".stderr.log"):
            check(CANARY_LITERAL.encode() not in data, f"overlay value logged in {path}")
    check(seen > 10000, f"the logs hold the traffic ({seen} bytes)")
    main_log = open(os.path.join(env.root, "main.stderr.log")).read()
    settled = [l for l in main_log.splitlines() if "process_run settled" in l and "cancelled=true" in l]
    check(len(settled) == 1, f"one cancelled settlement, saw {len(settled)}")


async def run_one(t, env, arg):
    try:
        await t(env, arg)
        results["passed"] += 1
        print(f"ok   {t.__name__}")
    except Exception:
        results["failed"] += 1
        print(f"FAIL {t.__name__}")
        traceback.print_exc()


if __name__ == "__main__":
    anyio.run(main, os.path.abspath(sys.argv[1]))
    print(f"{results['passed']} passed, {results['failed']} failed")
    sys.exit(1 if results["failed"] else 0)
