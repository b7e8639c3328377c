// The extension inside Pi's real SDK (PI_SDK: the dist/index.js of @mariozechner 0.73 or
// @earendil-works 1.6), with the stub moat: every tool, the ! commands, session_start and /moat
// go through moat, exit 125 is a tool error that says nothing ran, and an abort leaves nothing.

import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { moatEnvironment } from "../src/moat.ts";
import { registerMoat, TOOL_NAMES, type PiSdk } from "../src/extension.ts";

const STUB = join(dirname(fileURLToPath(import.meta.url)), "stub-moat");
const SDK_PATH = process.env.PI_SDK;
const skip = SDK_PATH ? false : "PI_SDK is not set (test.sh sets it to each Pi's dist/index.js)";
const sdk: PiSdk | undefined = SDK_PATH ? await import(pathToFileURL(SDK_PATH).href) : undefined;

interface Harness {
	tools: Map<string, any>;
	handlers: Map<string, any>;
	commands: Map<string, any>;
	notices: Array<[string, string]>;
	ctx: any;
	project: string;
	log: string;
	pids: string;
}

function harness(mode = "exec"): Harness {
	const dir = mkdtempSync(join(tmpdir(), "moat-pi-tools-"));
	const project = join(dir, "project");
	mkdirSync(project);
	const log = join(dir, "calls.log");
	const pids = join(dir, "pids");
	const h: Harness = { tools: new Map(), handlers: new Map(), commands: new Map(), notices: [], ctx: undefined, project, log, pids };
	const pi = {
		registerTool: (def: any) => h.tools.set(def.name, def),
		on: (event: string, handler: any) => h.handlers.set(event, handler),
		registerCommand: (name: string, opts: any) => h.commands.set(name, opts),
	};
	h.ctx = {
		cwd: project,
		hasUI: true,
		ui: { notify: (text: string, level: string) => h.notices.push([level, text]), setStatus: () => {} },
	};
	const env = { ...moatEnvironment(), STUB_MOAT_MODE: mode, STUB_MOAT_LOG: log, STUB_MOAT_PIDS: pids };
	registerMoat(pi, sdk as PiSdk, { binary: STUB, env, killGraceMs: 300 });
	return h;
}

/** A tool call as Pi makes it: a result, or the error Pi would show the model. */
async function call(h: Harness, name: string, params: object, signal?: AbortSignal, onUpdate?: (u: any) => void) {
	try {
		const result = await h.tools.get(name).execute("id", params, signal, onUpdate, h.ctx);
		const text = result.content.map((c: any) => c.text ?? "").join("");
		return { text, isError: Boolean(result.isError) };
	} catch (err) {
		return { text: (err as Error).message, isError: true };
	}
}

const moatCalls = (h: Harness) => (existsSync(h.log) ? readFileSync(h.log, "utf8").split("\n").filter((l) => l.startsWith("ARGV")) : []);

test("all seven tools are replaced, each keeping Pi's schema and description", { skip }, () => {
	const h = harness();
	assert.deepEqual([...h.tools.keys()].sort(), [...TOOL_NAMES].sort());
	for (const name of TOOL_NAMES) {
		assert.ok(h.tools.get(name).parameters, `${name} has Pi's parameter schema`);
		assert.ok(h.tools.get(name).description.length > 20);
	}
});

test("bash runs through moat run --cwd <Pi's cwd>, streams its output, and gets none of Pi's environment", { skip }, async () => {
	const h = harness();
	process.env.PI_TEST_SECRET = "sk-do-not-leak";
	const updates: string[] = [];
	const r = await call(h, "bash", { command: "echo streamed; pwd; env" }, undefined, (u) =>
		updates.push(u.content.map((c: any) => c.text).join("")),
	);
	delete process.env.PI_TEST_SECRET;
	assert.match(r.text, /streamed/);
	assert.ok(r.text.includes(h.project), "the command started in Pi's cwd");
	assert.doesNotMatch(r.text, /sk-do-not-leak|PI_TEST_SECRET/);
	assert.ok(updates.some((u) => u.includes("streamed")), "output arrived as updates");
	const [argv] = moatCalls(h);
	assert.ok(argv.startsWith(`ARGV [run] [--cwd] [${h.project}]`), argv);
	assert.match(argv, /\[--\] \[bash\] \[-c\] \[echo streamed; pwd; env\]/);
});

test("a failing command is a failed tool call with its exit status", { skip }, async () => {
	const r = await call(harness(), "bash", { command: "echo out; exit 3" });
	assert.equal(r.isError, true);
	assert.match(r.text, /out[\s\S]*3/);
});

test("exit 125: every tool fails saying the command did not run, and nothing ran", { skip }, async () => {
	const h = harness("fail125");
	const marker = join(h.project, "ran");
	const calls: Array<[string, object]> = [
		["bash", { command: `touch ${marker}` }],
		["read", { path: "a.txt" }],
		["write", { path: "ran", content: "x" }],
		["edit", { path: "a.txt", edits: [{ oldText: "a", newText: "b" }] }],
		["ls", { path: "." }],
		["find", { pattern: "*" }],
		["grep", { pattern: "x" }],
	];
	for (const [name, params] of calls) {
		const r = await call(h, name, params);
		assert.equal(r.isError, true, name);
		assert.match(r.text, /did not run/, name);
		assert.match(r.text, /cannot create the sandbox's cgroup/, name);
	}
	assert.ok(!existsSync(marker), "nothing ran on the host");
	assert.equal(moatCalls(h).length, calls.length, "one moat call per tool call (edit stops at the first)");
});

test("write, read, edit, ls, find and grep work on the project through moat", { skip }, async () => {
	const h = harness();
	assert.equal((await call(h, "write", { path: "src/app.txt", content: "hello moat\nsecond line\n" })).isError, false);
	assert.equal(readFileSync(join(h.project, "src/app.txt"), "utf8"), "hello moat\nsecond line\n");
	assert.match((await call(h, "read", { path: "src/app.txt" })).text, /hello moat/);
	assert.equal((await call(h, "edit", { path: "src/app.txt", edits: [{ oldText: "second", newText: "2nd" }] })).isError, false);
	assert.equal(readFileSync(join(h.project, "src/app.txt"), "utf8"), "hello moat\n2nd line\n");
	writeFileSync(join(h.project, "top.md"), "# moat\n");
	const ls = await call(h, "ls", { path: "." });
	assert.deepEqual(ls.text.split("\n"), ["src/", "top.md"]);
	assert.equal((await call(h, "find", { pattern: "*.txt" })).text, "src/app.txt");
	assert.equal((await call(h, "find", { pattern: "src/*" })).text, "src/app.txt");
	assert.equal((await call(h, "grep", { pattern: "moat" })).text.split("\n").sort().join("\n"), "src/app.txt:1: hello moat\ntop.md:1: # moat");
	assert.equal((await call(h, "grep", { pattern: "MOAT", ignoreCase: true, glob: "*.md" })).text, "top.md:1: # moat");
	assert.equal((await call(h, "grep", { pattern: "absent" })).text, "No matches found");
	// Every one of them went through moat, in Pi's cwd.
	for (const argv of moatCalls(h)) assert.ok(argv.startsWith(`ARGV [run] [--cwd] [${h.project}]`), argv);
});

test("read of a missing file is an error from inside the sandbox", { skip }, async () => {
	const r = await call(harness(), "read", { path: "nope.txt" });
	assert.equal(r.isError, true);
	assert.match(r.text, /nope\.txt/);
});

test("Pi's global sandbox.json is a --user-policy layer above the package's default", { skip }, async () => {
	const agentDir = mkdtempSync(join(tmpdir(), "moat-pi-agent-"));
	mkdirSync(join(agentDir, "extensions"));
	writeFileSync(join(agentDir, "extensions", "sandbox.json"), "{}");
	const saved = process.env.PI_CODING_AGENT_DIR;
	process.env.PI_CODING_AGENT_DIR = agentDir;
	try {
		const h = harness();
		await call(h, "bash", { command: "true" });
		const [argv] = moatCalls(h);
		const layers = [...argv.matchAll(/\[--user-policy\] \[([^\]]+)\]/g)].map((m) => m[1]);
		assert.equal(layers.length, 2, argv);
		assert.match(layers[0], /policy\/pi-default\.json$/);
		assert.equal(layers[1], join(agentDir, "extensions", "sandbox.json"));
	} finally {
		if (saved === undefined) delete process.env.PI_CODING_AGENT_DIR;
		else process.env.PI_CODING_AGENT_DIR = saved;
	}
});

test("abort of a bash call stops moat and everything it started", { skip, timeout: 20_000 }, async (t) => {
	const h = harness("hang");
	const controller = new AbortController();
	const pending = call(h, "bash", { command: "sleep 300" }, controller.signal);
	const end = Date.now() + 5000;
	while (!existsSync(h.pids) || readFileSync(h.pids, "utf8").trim() === "") {
		assert.ok(Date.now() < end, "moat started");
		await new Promise((r) => setTimeout(r, 20));
	}
	const pids = readFileSync(h.pids, "utf8").trim().split(" ").map(Number);
	const alive = (pid: number) => {
		try {
			process.kill(pid, 0);
			return true;
		} catch {
			return false;
		}
	};
	t.after(() => pids.filter(alive).forEach((pid) => process.kill(pid, "SIGKILL")));
	controller.abort();
	const r = await pending;
	assert.equal(r.isError, true);
	assert.match(r.text, /abort/i);
	while (pids.some(alive)) {
		assert.ok(Date.now() < end + 5000, "moat's group is gone");
		await new Promise((r) => setTimeout(r, 20));
	}
});

test("the user's ! commands run through moat too", { skip }, async () => {
	const h = harness();
	const answer = h.handlers.get("user_bash")({ command: "echo bang", cwd: h.project, excludeFromContext: false }, h.ctx);
	const out: string[] = [];
	const r = await answer.operations.exec("echo bang; pwd", h.project, { onData: (d: Buffer) => out.push(d.toString()) });
	assert.equal(r.exitCode, 0);
	assert.equal(out.join(""), `bang\n${h.project}\n`);
	assert.equal(moatCalls(h).length, 1);
});

test("session_start checks moat once and says what is protected", { skip }, async () => {
	const h = harness();
	await h.handlers.get("session_start")({ reason: "startup" }, h.ctx);
	const [[level, text]] = h.notices;
	assert.equal(level, "info");
	// from `moat policy show --json`
	assert.match(text, /writable: \/stub\/project; read-only and never created: \/stub\/project\/\.git\/hooks/);
	assert.match(text, /limits: 60s wall clock, 30s CPU, 512 MiB/);
	assert.match(text, /network: none/);
	const calls = moatCalls(h);
	assert.match(calls[0], /\[run\] \[--cwd\] .* \[--\] \[true\]/);
	assert.match(calls[1], /\[policy\] \[show\] \[--json\] \[--cwd\]/);
});

test("session_start with a moat that cannot set up says every call will fail", { skip }, async () => {
	const h = harness("fail125");
	await h.handlers.get("session_start")({ reason: "startup" }, h.ctx);
	const [[level, text]] = h.notices;
	assert.equal(level, "error");
	assert.match(text, /did not run[\s\S]*cgroup[\s\S]*Every tool call will fail/);
});

test("/moat shows moat policy show for Pi's cwd and layers", { skip }, async () => {
	const h = harness();
	await h.commands.get("moat").handler("", h.ctx);
	assert.deepEqual(h.notices, [["info", "stub policy: allowWrite = /stub/project (from stub)"]]);
	assert.match(moatCalls(h)[0], new RegExp(`\\[policy\\] \\[show\\] \\[--cwd\\] \\[${h.project}\\] \\[--user-policy\\]`));
});
