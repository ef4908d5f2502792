// End-to-end test of `custodian mcp` with the official TypeScript MCP SDK
// as the client (what MCP Inspector and Node-based hosts run).
//
// Usage: tests/mcp/run-ts.sh SDK_DIR PATH/TO/custodian, where SDK_DIR holds
// the node_modules of tests/mcp/package.json. As root it runs in a private
// mount namespace where only its scratch directory (and the cgroup v2
// hierarchy) is writable; this script checks that first.
//
// What it shows: the SDK connects, lists the tools and validates every
// structured result against the tools' output schemas; and its
// `client.close()` mid-call (stdin closed, SIGTERM after 2 s, SIGKILL after
// 2 more) leaves no process, no job directory and no journal, within the
// shutdown grace for a tree that ignores TERM. And MCP Inspector's CLI
// (`--strict`) lists the tools with no schema portability finding (0
// errors, 0 warnings) and runs one.

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, exeArg] = process.argv.slice(2);
const exe = path.resolve(exeArg);
const sdk = (p) =>
  import(pathToFileURL(path.join(sdkDir, "node_modules/@modelcontextprotocol/sdk/dist/esm", p)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");

let passed = 0;
let failed = 0;

function check(cond, what) {
  if (!cond) throw new Error(what);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function onlyScratchWritable(scratch) {
  const keep = process.env.CUSTODIAN_TEST_KEEP || null;
  const visible = new Map();
  for (const line of fs.readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
    const f = line.split(" ");
    if (f.length > 5) visible.set(f[4], f[5]);
  }
  for (const [mount, opts] of visible) {
    if (mount === scratch || mount.startsWith(scratch + "/") || mount === keep || mount === "/proc") continue;
    if (!opts.split(",").includes("ro")) {
      console.error(`refusing to run: ${mount} is writable (run through tests/mcp/run-ts.sh)`);
      process.exit(2);
    }
  }
}

const scratch = process.env.CUSTODIAN_TEST_SCRATCH;
if (process.getuid() === 0) {
  if (!scratch) {
    console.error("refusing to run as root outside tests/mcp/run-ts.sh");
    process.exit(2);
  }
  onlyScratchWritable(fs.realpathSync(scratch));
}
const root = fs.mkdtempSync(path.join(scratch || os.tmpdir(), "custodian-mcp-ts-"));
const ws = path.join(root, "ws");
fs.mkdirSync(ws);

const listing = (d) => (fs.existsSync(d) ? fs.readdirSync(d).sort() : []);
const jobs = () => listing(path.join(ws, ".custodian", "job"));
const journals = () => listing(path.join(ws, ".custodian", "journal"));

function groupGone(pgid) {
  try {
    process.kill(-pgid, 0);
    return false;
  } catch (e) {
    return e.code === "ESRCH";
  }
}

async function waitGroupGone(pgid, ms = 10000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (groupGone(pgid)) return true;
    await sleep(20);
  }
  return false;
}

async function connect() {
  const transport = new StdioClientTransport({
    command: exe,
    args: ["mcp", "--workspace", ws],
    env: { PATH: process.env.PATH, TMPDIR: process.env.TMPDIR || "/tmp" },
    stderr: "inherit",
  });
  const client = new Client({ name: "custodian-e2e-ts", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
}

async function tListAndRun() {
  const { client } = await connect();
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  check(JSON.stringify(names) === '["process_list","process_read","process_run","process_signal","process_start","process_write","spill_read"]', `tools: ${names}`);
  const run = tools.find((t) => t.name === "process_run");
  check(run.annotations?.destructiveHint === true, "process_run is destructive");
  check(tools.find((t) => t.name === "spill_read").annotations?.readOnlyHint === true, "spill_read is read-only");
  check(!JSON.stringify(tools).includes('"type":['), "no type arrays in the schemas");
  // The SDK validates structured content against the output schema here.
  const res = await client.callTool({ name: "process_run", arguments: { executable: "sh", argv: ["-c", "echo hi"] } });
  check(!res.isError, `run: ${JSON.stringify(res).slice(0, 300)}`);
  check(res.structuredContent.evidence.stdout.text === "hi\n", "the output");
  const bad = await client.callTool({ name: "process_run", arguments: { executable: "" } });
  check(bad.isError && bad.structuredContent.error.kind === "invalid_input", "an invalid call is a tool error");
  await client.close();
  check(jobs().length === 0, `job dirs left: ${jobs()}`);
}

async function closeMidCall(script, label) {
  const pidfile = path.join(root, `${label.replaceAll(" ", "-")}.pid`);
  const { client } = await connect();
  try {
    await closeWhileRunning(client, script, label, pidfile);
  } finally {
    await client.close();
  }
}

async function closeWhileRunning(client, script, label, pidfile) {
  const call = client
    .callTool({ name: "process_run", arguments: { executable: "sh", argv: ["-c", `echo $$ > '${pidfile}'; ${script}`] } })
    .catch(() => null); // the close ends it
  const deadline = Date.now() + 20000;
  while (!fs.existsSync(pidfile) && Date.now() < deadline) await sleep(20);
  check(fs.existsSync(pidfile), "the tree started");
  await sleep(200);
  const pgid = parseInt(fs.readFileSync(pidfile, "utf8"), 10);
  const start = Date.now();
  await client.close();
  const took = Date.now() - start;
  await call;
  console.log(`     client.close() mid-call (${label}): closed in ${took} ms`);
  check(await waitGroupGone(pgid), `process group ${pgid} outlived the close`);
  check(jobs().length === 0, `job dirs left: ${jobs()}`);
  check(journals().length === 0, `journals left: ${journals()}`);
  check(took < 20000, `close took ${took} ms`);
}

// MCP Inspector's CLI, as a user runs it: `--strict` prints every schema
// portability finding (errors and warnings) on stderr and exits 6 on an
// error; a clean listing prints nothing there.
function inspector(args) {
  const bin = path.join(sdkDir, "node_modules/.bin/mcp-inspector");
  return spawnSync(bin, ["--cli", exe, "mcp", "--workspace", ws, ...args], {
    encoding: "utf8",
    timeout: 60000,
    // Its catalog file lives in HOME unless told otherwise.
    env: { PATH: process.env.PATH, TMPDIR: process.env.TMPDIR || "/tmp", MCP_CATALOG_PATH: path.join(root, "inspector.json") },
  });
}

async function tInspectorStrict() {
  const list = inspector(["--strict", "--method", "tools/list"]);
  check(list.status === 0, `inspector --strict exited ${list.status}: ${list.stderr}`);
  check(list.stderr.trim() === "", `inspector --strict found problems: ${list.stderr}`);
  const names = JSON.parse(list.stdout).tools.map((t) => t.name).sort();
  check(JSON.stringify(names) === '["process_list","process_read","process_run","process_signal","process_start","process_write","spill_read"]', `tools: ${names}`);
  const call = inspector(["--method", "tools/call", "--tool-name", "process_run", "--tool-arg", "executable=/bin/echo", 'argv=["hi"]']);
  check(call.status === 0, `inspector tools/call exited ${call.status}: ${call.stderr}`);
  const res = JSON.parse(call.stdout);
  check(res.structuredContent?.evidence?.stdout?.text === "hi\n", `the output: ${call.stdout.slice(0, 300)}`);
  check(jobs().length === 0, `job dirs left: ${jobs()}`);
}

const tCloseHonoursTerm = () => closeMidCall("sleep 300 & sleep 300", "honours TERM");
const tCloseIgnoresTerm = () => closeMidCall("trap '' TERM; sleep 300 & sleep 300", "ignores TERM");

for (const [name, t] of [
  ["t_list_and_run", tListAndRun],
  ["t_close_mid_call_honours_term", tCloseHonoursTerm],
  ["t_close_mid_call_ignores_term", tCloseIgnoresTerm],
  ["t_inspector_strict", tInspectorStrict],
]) {
  try {
    await t();
    passed += 1;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}`);
    console.log(e.stack || e);
  }
}
fs.rmSync(root, { recursive: true, force: true });
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
