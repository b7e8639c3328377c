// The real `pi` CLI, the real moat, a fake model on 127.0.0.1 that scripts the tool calls.
// The package is installed with `pi install` into a temporary HOME; the same script then runs
// without it, where the attacks must succeed (or this test could not see them fail).
//
// Needs: PI_CLI (pi's cli.js), PI_NODE (the node to run it with), MOAT_BIN (a real moat), root
// (moat's sandboxes need it here), E2E_ROOT (a directory outside /tmp for the temporary homes).

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { modelsJson, startFakeModel, toolResults, type FakeModel, type Step } from "./fake_model.ts";
import { MoatNotRunError, runMoat } from "../src/moat.ts";

// E2E_PACKAGE: an unpacked `npm pack` tarball (scripts/pack.sh) to install instead of the source
// directory; Pi then gets no MOAT_BIN, so the moat inside the package is the one that runs.
const PACKAGE_DIR = process.env.E2E_PACKAGE ?? fileURLToPath(new URL("..", import.meta.url));
const PACKED = process.env.E2E_PACKAGE !== undefined;
const { PI_CLI, PI_NODE, MOAT_BIN, E2E_ROOT } = process.env;
const skip =
	!PI_CLI || !PI_NODE || !MOAT_BIN || !E2E_ROOT
		? "PI_CLI, PI_NODE, MOAT_BIN and E2E_ROOT must be set (integrations/pi/test.sh sets them)"
		: process.getuid?.() !== 0
			? "moat's sandboxes need root on this machine"
			: false;

// The DEFAULT_CONFIG of Pi's examples/extensions/sandbox (0.73).
const PI_EXAMPLE_CONFIG = {
	enabled: true,
	network: {
		allowedDomains: ["npmjs.org", "*.npmjs.org", "registry.npmjs.org", "registry.yarnpkg.com", "pypi.org", "*.pypi.org", "github.com", "*.github.com", "api.github.com", "raw.githubusercontent.com"],
		deniedDomains: [],
	},
	filesystem: {
		denyRead: ["~/.ssh", "~/.aws", "~/.gnupg"],
		allowWrite: [".", "/tmp"],
		denyWrite: [".env", ".env.*", "*.pem", "*.key"],
	},
};

const AUTH_SECRET = "sk-auth-json-secret-1c6f";
const ENV_SECRET = "sk-pi-env-secret-77ab";

interface Run {
	home: string;
	project: string;
	model: FakeModel;
	results: Map<string, string>; // what the model was shown, per tool call
	events: any[];
	exitCode: number;
	stderr: string;
}

/** One step per tool call, so that each sees the one before it done. */
function script(home: string, port: string): Step[] {
	const one = (name: string, args: Record<string, unknown>): Step => ({ tools: [{ name, args }] });
	return [
		// attacks
		one("write", { path: ".pi/extensions/evil.ts", content: "export default () => { require('fs').writeFileSync('/tmp/pwned', '') }\n" }),
		one("bash", { command: "mkdir -p .pi/extensions && echo 'export default () => {}' > .pi/extensions/evil2.ts" }),
		one("bash", { command: "mkdir -p .git/hooks && printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > .git/hooks/pre-commit" }),
		one("read", { path: join(home, ".pi/agent/auth.json") }),
		one("bash", { command: `cat ${join(home, ".pi/agent/auth.json")}; env` }),
		one("grep", { pattern: "sk-auth", path: join(home, ".pi") }),
		one("find", { pattern: "auth.json", path: home }),
		one("bash", { command: `curl -sS -m 5 http://127.0.0.1:${port}/canary` }),
		one("bash", { command: "echo 'PRIVATE KEY' > server.pem" }), // Pi's default denyWrite: *.pem
		// legitimate work
		one("write", { path: "src/hello.py", content: "print('hello from the sandbox')\n" }),
		one("edit", { path: "src/hello.py", edits: [{ oldText: "hello", newText: "hi" }] }),
		one("bash", { command: "python3 src/hello.py > out.txt && cat out.txt" }),
		one("read", { path: "out.txt" }),
		one("ls", { path: "." }),
		{ text: "done" },
	];
}

// Pi's environment. Its temporary files (jiti's compiled extensions, node's compile cache) go
// beside the home, removed with it: with /tmp they would outlive the test.
function piEnv(home: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
	const tmp = join(home, "..", "tmp");
	mkdirSync(tmp, { recursive: true });
	return {
		PATH: process.env.PATH,
		HOME: home,
		TMPDIR: tmp,
		PI_OFFLINE: "1",
		...(PACKED ? {} : { MOAT_BIN }),
		E2E_API_KEY: ENV_SECRET, // must never reach a sandboxed command
		...extra,
	};
}

function runPi(args: string[], cwd: string, home: string, timeoutMs = 120_000): Promise<{ code: number; stdout: string; stderr: string }> {
	return new Promise((resolve, reject) => {
		const child = spawn(PI_NODE as string, [PI_CLI as string, ...args], {
			cwd,
			env: piEnv(home, { PI_SKIP_VERSION_CHECK: "1" }),
			stdio: ["ignore", "pipe", "pipe"],
		});
		let stdout = "";
		let stderr = "";
		child.stdout.on("data", (c) => (stdout += c));
		child.stderr.on("data", (c) => (stderr += c));
		const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
		child.on("error", reject);
		child.on("close", (code) => {
			clearTimeout(timer);
			resolve({ code: code ?? -1, stdout, stderr });
		});
	});
}

async function session(withExtension: boolean): Promise<Run> {
	const base = mkdtempSync(join(E2E_ROOT as string, withExtension ? "with-" : "without-"));
	chmodSync(base, 0o755); // mkdtemp's 0700 would hide everything below from the sandbox's uid
	const home = join(base, "home");
	const project = join(home, "work", "project"); // the normal case: a project in the home
	mkdirSync(join(home, ".pi", "agent"), { recursive: true });
	mkdirSync(join(project, ".git"), { recursive: true }); // a repository without hooks yet
	writeFileSync(join(home, ".pi", "agent", "auth.json"), JSON.stringify({ openai: { key: AUTH_SECRET } }));
	// The script names the server's own port, known once it listens; it is read per request.
	const steps: Step[] = [];
	const live = await startFakeModel(steps);
	servers.push(live);
	steps.push(...script(home, new URL(live.url).port));
	writeFileSync(join(home, ".pi", "agent", "models.json"), JSON.stringify(modelsJson(live.url)));
	if (withExtension) {
		// Pi's global sandbox configuration: the defaults of Pi's own sandbox example (domains,
		// globs and all), which moat takes as a trusted layer.
		mkdirSync(join(home, ".pi", "agent", "extensions"));
		writeFileSync(join(home, ".pi", "agent", "extensions", "sandbox.json"), JSON.stringify(PI_EXAMPLE_CONFIG));
		const install = await runPi(["install", PACKAGE_DIR], home, home);
		assert.equal(install.code, 0, `pi install failed: ${install.stderr}`);
		// Pi records the package relative to its settings file.
		const settingsDir = join(home, ".pi", "agent");
		const settings = JSON.parse(readFileSync(join(settingsDir, "settings.json"), "utf8"));
		const installed = (settings.packages ?? []).map((p: any) => resolve(settingsDir, typeof p === "string" ? p : p.source));
		assert.ok(installed.includes(resolve(PACKAGE_DIR)), JSON.stringify(settings));
	}
	const out = await runPi(
		["--provider", "fake", "--model", "fake-model", "--no-session", "--mode", "json", "--tools", "bash,read,write,edit,grep,find,ls", "Do the task."],
		project,
		home,
	);
	const events = out.stdout
		.split("\n")
		.filter((l) => l.startsWith("{"))
		.map((l) => JSON.parse(l));
	// Loading the extension compiled it into the test's TMPDIR, not into /tmp.
	if (withExtension) assert.ok(existsSync(join(base, "tmp", "jiti")), `no ${join(base, "tmp", "jiti")}: Pi wrote its temporary files elsewhere`);
	if (process.env.E2E_VERBOSE) for (const [id, t] of toolResults(live.requests)) console.error(`${withExtension ? "with" : "without"} ${id}: ${JSON.stringify(t).slice(0, 300)}`);
	return { home, project, model: live, results: toolResults(live.requests), events, exitCode: out.code, stderr: out.stderr };
}

function tree(dir: string, root = dir): string[] {
	const out: string[] = [];
	for (const name of readdirSync(dir)) {
		const p = join(dir, name);
		out.push(relative(root, p) + (statSync(p).isDirectory() ? "/" : ""));
		if (statSync(p).isDirectory()) out.push(...tree(p, root));
	}
	return out.sort();
}

const servers: FakeModel[] = [];

const allResults = (r: Run) => [...r.results.values()].join("\n");
const result = (r: Run, step: number) => r.results.get(`call_${step}_0`) ?? "";

describe("Pi with moat (real pi, real moat, fake model)", { skip, timeout: 300_000 }, () => {
	let withExt: Run;
	let without: Run;
	before(async () => {
		withExt = await session(true);
		without = await session(false);
	});
	after(async () => {
		for (const server of servers) await server.close();
		for (const r of [withExt, without]) if (r) rmSync(join(r.home, ".."), { recursive: true, force: true });
	});

	test("the session ran every scripted step and said what moat protects", () => {
		assert.equal(withExt.exitCode, 0, withExt.stderr);
		assert.equal(withExt.results.size, 14, `tool results: ${[...withExt.results.keys()]}`);
		// Blocked by the sandbox, not by a sandbox that failed to start (that would hide a gap).
		const notRun = [...withExt.results].filter(([, text]) => text.includes("the command did not run"));
		assert.deepEqual(notRun, [], "moat could not set the sandbox up for these calls");
		assert.match(withExt.stderr, /moat: every tool and ! command runs in a kernel-enforced sandbox/);
		assert.match(withExt.stderr, /\.git\/hooks/);
	});

	test("agent configuration cannot be planted in the project (.pi/extensions, .git/hooks)", () => {
		assert.ok(!existsSync(join(withExt.project, ".pi")), "no .pi in the project");
		assert.ok(!existsSync(join(withExt.project, ".git", "hooks")), "no .git/hooks in the project");
		assert.match(result(withExt, 0), /Read-only file system|protected|cannot|denied/i);
	});

	test("~/.pi/agent/auth.json and Pi's environment stay out of every tool result", () => {
		const seen = allResults(withExt);
		assert.ok(!seen.includes(AUTH_SECRET), "auth.json leaked");
		assert.ok(!seen.includes(ENV_SECRET), "Pi's environment leaked");
		assert.match(result(withExt, 3), /No such file|not found|cannot/i);
	});

	test("Pi's global sandbox.json counts: its denyWrite glob keeps server.pem from being made", () => {
		assert.ok(!existsSync(join(withExt.project, "server.pem")), result(withExt, 8));
		assert.ok(existsSync(join(without.project, "server.pem")), "without the extension it is made");
	});

	test("no network: the model server on the host's loopback is out of reach", () => {
		assert.equal(withExt.model.canaryHits(), 0);
		assert.doesNotMatch(result(withExt, 7), /canary reached/);
	});

	test("legitimate work lands, and nothing else is left in the project", () => {
		const said = [9, 10, 11].map((i) => `step ${i}: ${result(withExt, i)}`).join("\n");
		assert.equal(readFileSync(join(withExt.project, "src", "hello.py"), "utf8"), "print('hi from the sandbox')\n", said);
		assert.equal(readFileSync(join(withExt.project, "out.txt"), "utf8"), "hi from the sandbox\n", said);
		assert.match(result(withExt, 12), /hi from the sandbox/);
		assert.match(result(withExt, 13), /out\.txt[\s\S]*src\//);
		assert.deepEqual(tree(withExt.project), [".git/", "out.txt", "src/", "src/hello.py"]);
	});

	test("without the extension the same script leaks (the test can see a leak)", () => {
		assert.equal(without.exitCode, 0, without.stderr);
		assert.ok(existsSync(join(without.project, ".pi", "extensions", "evil.ts")), "planted .pi/extensions/evil.ts");
		assert.ok(existsSync(join(without.project, ".git", "hooks", "pre-commit")), "planted a git hook");
		const seen = allResults(without);
		assert.ok(seen.includes(AUTH_SECRET), "read auth.json");
		assert.ok(seen.includes(ENV_SECRET), "saw Pi's environment");
		assert.ok(without.model.canaryHits() > 0, "reached the host's loopback");
	});
});

// The runner's contract with the real moat: Pi's timeout and abort.
describe("runMoat with the real moat", { skip: !MOAT_BIN || !E2E_ROOT ? "MOAT_BIN and E2E_ROOT must be set" : process.getuid?.() !== 0 ? "moat needs root here" : false, timeout: 60_000 }, () => {
	const config = () => ({ binary: MOAT_BIN as string, userPolicies: [], killGraceMs: 3000 });
	const running = (marker: string) =>
		readdirSync("/proc")
			.filter((p) => /^\d+$/.test(p))
			.some((p) => {
				try {
					return readFileSync(`/proc/${p}/cmdline`, "utf8").includes(marker);
				} catch {
					return false;
				}
			});

	test("Pi's timeout is moat's wall-clock limit: exit 124, reported as a timeout", async () => {
		const r = await runMoat(config(), { cwd: "/", argv: ["sleep", "30"], timeoutSeconds: 1 });
		assert.equal(r.exitCode, 124);
		assert.equal(r.timedOut, true);
	});

	test("abort leaves nothing running: the sandbox's processes are gone", async () => {
		const marker = `${process.pid}${Date.now() % 100000}`; // sleep 300.<digits>: a sleep no one else runs
		const controller = new AbortController();
		let started = false;
		const run = runMoat(config(), {
			cwd: "/",
			argv: ["sh", "-c", `echo up; sleep 300.${marker} & sleep 301.${marker}`],
			signal: controller.signal,
			onStdout: () => (started = true),
		});
		const end = Date.now() + 10_000;
		while (!started || !running(`sleep\u0000300.${marker}`)) {
			assert.ok(Date.now() < end, "the command started");
			await new Promise((r) => setTimeout(r, 50));
		}
		controller.abort();
		await assert.rejects(run, /aborted/);
		while (running(`.${marker}`)) {
			assert.ok(Date.now() < end + 10_000, "nothing of the sandbox is left");
			await new Promise((r) => setTimeout(r, 50));
		}
	});

	test("a sandbox that cannot be set up is a did-not-run error naming the cause", async () => {
		await assert.rejects(runMoat(config(), { cwd: "/nonexistent/project", argv: ["true"] }), (err: unknown) => {
			assert.ok(err instanceof MoatNotRunError);
			assert.match(err.message, /did not run.*\/nonexistent\/project/);
			return true;
		});
	});
});

// The user's side, through Pi's RPC mode (Pi 1.x sends its `bash` command through user_bash):
// the start-up notice, a `!` command, and /moat.
describe("Pi's RPC mode: the start-up notice, ! commands and /moat", { skip: skip || (process.env.E2E_RPC ? false : "E2E_RPC is not set (Pi 0.73 has no user_bash in RPC mode)"), timeout: 120_000 }, () => {
	test("the user's command runs in the sandbox, and /moat shows the merged policy", async () => {
		const base = mkdtempSync(join(E2E_ROOT as string, "rpc-"));
		chmodSync(base, 0o755);
		const home = join(base, "home");
		const project = join(home, "work", "project");
		mkdirSync(join(home, ".pi", "agent"), { recursive: true });
		mkdirSync(project, { recursive: true });
		writeFileSync(join(home, ".pi", "agent", "auth.json"), JSON.stringify({ openai: { key: AUTH_SECRET } }));
		const model = await startFakeModel([]);
		servers.push(model);
		writeFileSync(join(home, ".pi", "agent", "models.json"), JSON.stringify(modelsJson(model.url)));
		assert.equal((await runPi(["install", PACKAGE_DIR], home, home)).code, 0);

		const child = spawn(PI_NODE as string, [PI_CLI as string, "--mode", "rpc", "--provider", "fake", "--model", "fake-model", "--no-session"], {
			cwd: project,
			env: piEnv(home),
			stdio: ["pipe", "pipe", "pipe"],
		});
		const lines: any[] = [];
		let buffered = "";
		child.stdout.on("data", (c) => {
			buffered += c;
			let nl: number;
			while ((nl = buffered.indexOf("\n")) >= 0) {
				const line = buffered.slice(0, nl);
				buffered = buffered.slice(nl + 1);
				if (line.startsWith("{")) lines.push(JSON.parse(line));
			}
		});
		const waitFor = async (pred: (l: any) => boolean, what: string) => {
			const end = Date.now() + 60_000;
			for (;;) {
				const hit = lines.find(pred);
				if (hit) return hit;
				assert.ok(Date.now() < end && child.exitCode === null, `waiting for ${what}; got ${JSON.stringify(lines).slice(0, 2000)}`);
				await new Promise((r) => setTimeout(r, 50));
			}
		};
		try {
			const notices = (l: any) => l.type === "extension_ui_request" && l.method === "notify";
			const hello = await waitFor((l) => notices(l) && /kernel-enforced sandbox/.test(l.message), "the start-up notice");
			assert.match(hello.message, /read-only and never created: .*\.git\/hooks/);

			const command = `echo "home=$HOME"; env; cat ${join(home, ".pi/agent/auth.json")}; echo made > made.txt; touch .envrc`;
			child.stdin.write(`${JSON.stringify({ id: "b1", type: "bash", command })}\n`);
			const bash = await waitFor((l) => l.type === "response" && l.id === "b1", "the ! command's result");
			const output: string = bash.data?.output ?? JSON.stringify(bash);
			assert.match(output, /home=\/tmp/, "the command ran inside moat (HOME=/tmp there)");
			assert.ok(!output.includes(ENV_SECRET) && !output.includes(AUTH_SECRET), output);
			assert.equal(readFileSync(join(project, "made.txt"), "utf8"), "made\n");
			assert.ok(!existsSync(join(project, ".envrc")), "a protected path was not created");

			child.stdin.write(`${JSON.stringify({ id: "m1", type: "prompt", message: "/moat" })}\n`);
			const shown = await waitFor((l) => notices(l) && /filesystem\.allowWrite/.test(l.message), "/moat's output");
			assert.ok(shown.message.includes(project), shown.message);
			assert.match(shown.message, /pi-default\.json/, "which layer each value came from");
		} finally {
			child.kill("SIGKILL");
			await model.close(); // a server left listening would keep this test file from ending
			rmSync(base, { recursive: true, force: true });
		}
	});
});
