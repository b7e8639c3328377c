// The OpenSandbox JS SDK, unchanged, driving one sandbox's execd API on moat-agent directly (no
// lifecycle server): commands.run (stdout, stderr, exit codes), files write/read/info/list/
// delete, bash sessions. Usage: node scenario.mjs EXECD_BASE_URL TOKEN. Exits non-zero on the
// first mismatch.
import { ConnectionConfig, createDefaultAdapterFactory } from "@alibaba-group/opensandbox";
import assert from "node:assert/strict";

const [execdBaseUrl, token] = process.argv.slice(2);
const connectionConfig = new ConnectionConfig({ domain: new URL(execdBaseUrl).host, protocol: "http" });
const { commands, files } = createDefaultAdapterFactory().createExecdStack({
  connectionConfig,
  execdBaseUrl,
  endpointHeaders: { "X-EXECD-ACCESS-TOKEN": token },
});
// Lines may come one per event (without their newline) or several in one: compare lines.
const lines = (messages) =>
  messages.map((m) => m.text).join("\n").split("\n").filter((l) => l !== "");

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

const session = await commands.createSession({ workingDirectory: "/workspace" });
await commands.runInSession(session, "x=41; export Y=y; cd /tmp");
const again = await commands.runInSession(session, "echo $((x + 1)) $Y $(pwd)");
assert.deepEqual(lines(again.logs.stdout), ["42 y /tmp"]);
await commands.deleteSession(session);
console.log("sessions: state kept between runs; deleted");
