// The OpenSandbox JS SDK, unchanged, driving one sandbox's execd API on moat-agent directly (no
// lifecycle server): every call of its execd stack (health, metrics, commands: run, runStream,
// options, background status and logs, interrupt; files: write, read (text, bytes, ranges,
// stream), info, list, search, directories, move, replace, permissions, delete; bash sessions).
// Usage: node scenario.mjs EXECD_BASE_URL TOKEN. Exits non-zero on the first mismatch.
import { ConnectionConfig, createDefaultAdapterFactory } from "@alibaba-group/opensandbox";
import assert from "node:assert/strict";

const [execdBaseUrl, token] = process.argv.slice(2);
const connectionConfig = new ConnectionConfig({ domain: new URL(execdBaseUrl).host, protocol: "http" });
const { commands, files, health, metrics } = createDefaultAdapterFactory().createExecdStack({
  connectionConfig,
  execdBaseUrl,
  endpointHeaders: { "X-EXECD-ACCESS-TOKEN": token },
});
// Lines may come one per event (without their newline) or several in one: compare lines.
const lines = (messages) =>
  messages.map((m) => m.text).join("\n").split("\n").filter((l) => l !== "");

// Polls `check` (async) every 100 ms until it is true, for at most `seconds`.
async function waitFor(check, seconds, what) {
  for (let i = 0; i < seconds * 10; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`timed out waiting for ${what}`);
}

assert.equal(await health.ping(), true);
const m = await metrics.getMetrics();
assert.ok(m.cpuCount > 0, JSON.stringify(m));
assert.ok(m.memoryTotalMiB > 0 && m.memoryUsedMiB > 0, JSON.stringify(m));
assert.ok(m.memoryUsedMiB <= m.memoryTotalMiB, JSON.stringify(m));
assert.ok(Math.abs(m.timestamp - Date.now()) < 60_000, JSON.stringify(m));
console.log("health.ping, metrics.getMetrics ok:", JSON.stringify(m));

const run = await commands.run("echo hello; echo oops >&2; echo bye");
assert.deepEqual(lines(run.logs.stdout), ["hello", "bye"]);
assert.deepEqual(lines(run.logs.stderr), ["oops"]);
assert.equal(run.error, undefined, JSON.stringify(run.error));
console.log("commands.run: stdout, stderr ok");

const failed = await commands.run("exit 3");
assert.ok(failed.error, "a non-zero exit is an error");
assert.equal(failed.error.name, "CommandExecError");
assert.equal(String(failed.error.value), "3");
console.log("commands.run: exit 3 is", JSON.stringify(failed.error));

const events = [];
for await (const e of commands.runStream("echo a; echo b >&2")) events.push(e);
const types = events.map((e) => e.type);
assert.equal(types[0], "init", JSON.stringify(types));
assert.ok(types.includes("stdout") && types.includes("stderr"), JSON.stringify(types));
assert.equal(types.at(-1), "execution_complete", JSON.stringify(types));
const withOpts = await commands.run("pwd; echo $GREETING", {
  workingDirectory: "/tmp",
  envs: { GREETING: "hi" },
});
assert.deepEqual(lines(withOpts.logs.stdout), ["/tmp", "hi"]);
const timedOut = await commands.run("sleep 30", { timeoutSeconds: 1 });
assert.ok(timedOut.error, "a command past its timeout is an error");
console.log("commands.runStream, options, timeout ok:", JSON.stringify(timedOut.error));

const bg = await commands.run("echo started; sleep 1; echo finished", { background: true });
assert.ok(bg.id, "a background command has an id");
await waitFor(async () => !(await commands.getCommandStatus(bg.id)).running, 20, "the command");
const status = await commands.getCommandStatus(bg.id);
assert.equal(status.exitCode, 0, JSON.stringify(status));
const logs = await commands.getBackgroundCommandLogs(bg.id);
assert.deepEqual(logs.content.split("\n").filter((l) => l !== ""), ["started", "finished"]);
const long = await commands.run("sleep 60", { background: true });
assert.equal((await commands.getCommandStatus(long.id)).running, true);
await commands.interrupt(long.id);
await waitFor(async () => !(await commands.getCommandStatus(long.id)).running, 10, "interrupt");
console.log("background: status, logs, interrupt ok");

await files.writeFiles([{ path: "/workspace/sdk/note.txt", data: "written by the SDK" }]);
await files.writeFiles([{ path: "/tmp/other.txt", data: "in /tmp" }]);
assert.equal(await files.readFile("/workspace/sdk/note.txt"), "written by the SDK");
assert.equal(await files.readFile("/tmp/other.txt"), "in /tmp");
const info = await files.getFileInfo(["/workspace/sdk/note.txt"]);
assert.equal(info["/workspace/sdk/note.txt"].size, "written by the SDK".length);
const listed = await files.listDirectory({ path: "/workspace/sdk" });
assert.ok(
  listed.some((f) => f.path === "/workspace/sdk/note.txt"),
  JSON.stringify(listed),
);
const seen = await commands.run("cat /workspace/sdk/note.txt");
assert.deepEqual(lines(seen.logs.stdout), ["written by the SDK"]);
await files.deleteFiles(["/workspace/sdk/note.txt"]);
let gone = false;
try {
  await files.readFile("/workspace/sdk/note.txt");
} catch (e) {
  gone = true;
}
assert.ok(gone, "the deleted file can still be read");
console.log("files: write, read, info, list, delete ok");

await files.createDirectories([{ path: "/workspace/tree/sub", mode: 755 }]);
const dirInfo = await files.getFileInfo(["/workspace/tree/sub"]);
assert.equal(dirInfo["/workspace/tree/sub"].type, "directory", JSON.stringify(dirInfo));
await files.writeFiles([
  { path: "/workspace/tree/a.txt", data: "alpha beta alpha", mode: 640 },
  { path: "/workspace/tree/sub/b.log", data: new Uint8Array([0, 1, 2, 255]) },
]);
assert.equal((await files.getFileInfo(["/workspace/tree/a.txt"]))["/workspace/tree/a.txt"].mode, 640);
const found = await files.search({ path: "/workspace/tree", pattern: "*.txt" });
assert.deepEqual(found.map((f) => f.path), ["/workspace/tree/a.txt"]);
const deep = await files.listDirectory({ path: "/workspace/tree", depth: 2 });
assert.ok(deep.some((f) => f.path === "/workspace/tree/sub/b.log"), JSON.stringify(deep));
assert.deepEqual([...(await files.readBytes("/workspace/tree/sub/b.log"))], [0, 1, 2, 255]);
const chunks = [];
for await (const c of files.readBytesStream("/workspace/tree/sub/b.log")) chunks.push(...c);
assert.deepEqual(chunks, [0, 1, 2, 255]);
assert.equal(await files.readFile("/workspace/tree/a.txt", { range: "bytes=6-9" }), "beta");
const replaced = await files.replaceContentsDetailed([
  { path: "/workspace/tree/a.txt", oldContent: "alpha", newContent: "gamma" },
]);
assert.equal(replaced.length, 1, JSON.stringify(replaced));
assert.equal(replaced[0].replacedCount, 2, JSON.stringify(replaced));
await files.replaceContents([{ path: "/workspace/tree/a.txt", oldContent: "beta", newContent: "delta" }]);
assert.equal(await files.readFile("/workspace/tree/a.txt"), "gamma delta gamma");
await files.moveFiles([{ src: "/workspace/tree/a.txt", dest: "/workspace/tree/sub/c.txt" }]);
assert.equal(await files.readFile("/workspace/tree/sub/c.txt"), "gamma delta gamma");
assert.equal(Object.keys(await files.search({ path: "/workspace/tree", pattern: "a.txt" })).length, 0);
await files.setPermissions([{ path: "/workspace/tree/sub/c.txt", mode: 600 }]);
const perm = await files.getFileInfo(["/workspace/tree/sub/c.txt"]);
assert.equal(perm["/workspace/tree/sub/c.txt"].mode, 600, JSON.stringify(perm));
const statSeen = await commands.run("stat -c %a /workspace/tree/sub/c.txt");
assert.deepEqual(lines(statSeen.logs.stdout), ["600"]);
await files.deleteDirectories(["/workspace/tree"]);
const after = await files.listDirectory({ path: "/workspace" });
assert.ok(!after.some((f) => f.path.startsWith("/workspace/tree")), JSON.stringify(after));
console.log("files: directories, modes, search, bytes, ranges, stream, replace, move, delete ok");

const session = await commands.createSession({ workingDirectory: "/workspace" });
await commands.runInSession(session, "x=41; export Y=y; cd /tmp");
const again = await commands.runInSession(session, "echo $((x + 1)) $Y $(pwd)");
assert.deepEqual(lines(again.logs.stdout), ["42 y /tmp"]);
const elsewhere = await commands.runInSession(session, "pwd", { workingDirectory: "/workspace" });
assert.deepEqual(lines(elsewhere.logs.stdout), ["/workspace"]);
await commands.deleteSession(session);
console.log("sessions: state kept between runs; deleted");
