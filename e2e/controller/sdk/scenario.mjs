// The OpenSandbox JS SDK, unchanged, against moat-controller: create, run, files, info, renew,
// pause, resume, list, kill. Usage: node scenario.mjs HOST:PORT API_KEY. Exits non-zero on the first mismatch.
import { ConnectionConfig, Sandbox, SandboxManager } from "@alibaba-group/opensandbox";
import assert from "node:assert/strict";

const [domain, apiKey] = process.argv.slice(2);
const connectionConfig = new ConnectionConfig({ domain, apiKey, protocol: "http" });

const t0 = Date.now();
const sandbox = await Sandbox.create({
  connectionConfig,
  image: "python:3.11",
  timeoutSeconds: 10 * 60,
  metadata: { suite: "sdk" },
});
console.log(`created ${sandbox.id} in ${Date.now() - t0} ms`);

const run = await sandbox.commands.run("echo hello from moat; uname -m");
// Lines may come one per event (without their newline) or several in one: compare lines.
const lines = run.logs.stdout.map((l) => l.text).join("\n").split("\n").filter((l) => l !== "");
assert.deepEqual(lines.length, 2, JSON.stringify(lines));
assert.equal(lines[0], "hello from moat");
assert.match(lines[1], /^(x86_64|aarch64)$/);
console.log("commands.run:", JSON.stringify(lines));

await sandbox.files.writeFiles([{ path: "/workspace/note.txt", data: "written by the SDK" }]);
const text = await sandbox.files.readFile("/workspace/note.txt");
assert.equal(text, "written by the SDK");
console.log("files: write + read ok");

const info = await sandbox.getInfo();
assert.equal(info.status.state, "Running");
assert.equal(info.metadata.suite, "sdk");

const renewed = await sandbox.renew(30 * 60);
console.log("renew:", JSON.stringify(renewed));

await sandbox.pause();
assert.equal((await sandbox.getInfo()).status.state, "Paused");
const resumed = await sandbox.resume();
assert.equal((await resumed.getInfo()).status.state, "Running");
const after = await resumed.commands.run("echo thawed");
assert.equal(after.logs.stdout.map((l) => l.text).join("").trim(), "thawed");
console.log("pause + resume: ok");

const manager = SandboxManager.create({ connectionConfig });
const list = await manager.listSandboxInfos({ states: ["Running"], metadata: { suite: "sdk" } });
assert.ok(list.items.some((s) => s.id === sandbox.id), JSON.stringify(list));
console.log(`listSandboxInfos: ${list.items.length} sandbox(es)`);

await sandbox.kill();
await sandbox.close();
let gone = false;
try {
  await manager.getSandboxInfo(sandbox.id);
} catch (e) {
  gone = true;
}
assert.ok(gone, "the killed sandbox is still listed");
console.log("kill: ok");
