// runMoat against the stub moat (test/stub-moat): the argv moat gets, the environment it gets,
// how its exit statuses are read, and that an abort leaves nothing running.

import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import {
	locateMoat,
	MoatNotRunError,
	moatEnvironment,
	moatRunArgs,
	runMoat,
	setupFailure,
	type MoatConfig,
} from "../src/moat.ts";

const STUB = join(dirname(fileURLToPath(import.meta.url)), "stub-moat");

function stubConfig(mode: string, extraEnv: NodeJS.ProcessEnv = {}) {
	const dir = mkdtempSync(join(tmpdir(), "moat-pi-test-"));
	const log = join(dir, "calls.log");
	const pids = join(dir, "pids");
	const config: MoatConfig = {
		binary: STUB,
		userPolicies: [],
		env: { ...moatEnvironment({ ...process.env, ...extraEnv }), STUB_MOAT_MODE: mode, STUB_MOAT_LOG: log, STUB_MOAT_PIDS: pids },
		killGraceMs: 300,
	};
	return { config, log, pids, dir };
}

function alive(pid: number): boolean {
	try {
		process.kill(pid, 0);
		return true;
	} catch {
		return false;
	}
}

async function waitFor(cond: () => boolean, ms = 5000): Promise<void> {
	const end = Date.now() + ms;
	while (!cond()) {
		if (Date.now() > end) throw new Error("condition not met in time");
		await new Promise((r) => setTimeout(r, 20));
	}
}

test("moat run gets --cwd, the user layers in order, Pi's timeout as a wall-clock limit, then the command", () => {
	const args = moatRunArgs(
		{ binary: "moat", userPolicies: ["/a.json", "/b.json"] },
		{ cwd: "/proj", argv: ["bash", "-c", "echo hi"], timeoutSeconds: 1.5 },
	);
	assert.deepEqual(args, [
		"run", "--cwd", "/proj", "--user-policy", "/a.json", "--user-policy", "/b.json",
		"--wall-timeout", "1500ms", "--", "bash", "-c", "echo hi",
	]);
	assert.ok(!moatRunArgs({ binary: "moat", userPolicies: [] }, { cwd: "/p", argv: ["true"] }).includes("--wall-timeout"));
});

test("only the variables moat needs reach it: none of Pi's API keys", async () => {
	const { config, log } = stubConfig("exec", { OPENAI_API_KEY: "sk-secret", PI_SESSION_ID: "s1", AWS_SECRET_ACCESS_KEY: "x" });
	const r = await runMoat(config, { cwd: "/", argv: ["env"] });
	assert.equal(r.exitCode, 0);
	assert.doesNotMatch(r.stdout.toString(), /sk-secret|OPENAI_API_KEY|PI_SESSION_ID|AWS_SECRET/);
	const envLine = readFileSync(log, "utf8").split("\n").find((l) => l.startsWith("ENV "));
	assert.ok(envLine?.includes("HOME"));
	assert.ok(!envLine?.includes("OPENAI_API_KEY"));
});

test("output streams as it comes, the exit status is the command's, stdin goes in", async () => {
	const { config } = stubConfig("exec");
	const chunks: string[] = [];
	const r = await runMoat(config, {
		cwd: "/",
		argv: ["sh", "-c", "cat; echo err >&2; exit 7"],
		stdin: "from pi\n",
		onStdout: (c) => chunks.push(c.toString()),
		onStderr: (c) => chunks.push(c.toString()),
	});
	assert.equal(r.exitCode, 7);
	assert.equal(r.stdout.toString(), "from pi\n");
	assert.match(chunks.join(""), /from pi\n[\s\S]*err\n/);
});

test("exit 125 with moat's own line: the command did not run, and the error says so and why", async () => {
	const { config } = stubConfig("fail125");
	await assert.rejects(runMoat(config, { cwd: "/", argv: ["touch", "/tmp/never"] }), (err: unknown) => {
		assert.ok(err instanceof MoatNotRunError);
		assert.match(err.message, /did not run/);
		assert.match(err.message, /cannot create the sandbox's cgroup/);
		return true;
	});
});

test("exit 125 from the command itself (no moat line) is just its exit status", async () => {
	const { config } = stubConfig("exec");
	const r = await runMoat(config, { cwd: "/", argv: ["sh", "-c", "exit 125"] });
	assert.equal(r.exitCode, 125);
	assert.equal(setupFailure("some output\nmoat run: policy file bad\n"), "policy file bad");
});

test("a limit moat enforced is reported as a timeout", async () => {
	const { config } = stubConfig("timeout");
	const r = await runMoat(config, { cwd: "/", argv: ["sleep", "5"], timeoutSeconds: 1 });
	assert.equal(r.exitCode, 124);
	assert.equal(r.timedOut, true);
	const own = await runMoat(stubConfig("exec").config, { cwd: "/", argv: ["sh", "-c", "exit 124"] });
	assert.equal(own.timedOut, false, "a command's own 124 is not moat's timeout");
});

for (const mode of ["hang", "ignore-term"]) {
	test(`abort stops moat's whole process group, nothing left running (${mode})`, { timeout: 20_000 }, async (t) => {
		const { config, pids } = stubConfig(mode);
		const controller = new AbortController();
		let started = false;
		const running = runMoat(config, {
			cwd: "/",
			argv: ["sleep", "300"],
			signal: controller.signal,
			onStdout: () => (started = true),
		});
		await waitFor(() => started);
		const [moatPid, childPid] = readFileSync(pids, "utf8").trim().split(" ").map(Number);
		// Whatever the outcome, the test itself leaves nothing behind.
		t.after(() => {
			for (const pid of [moatPid, childPid]) if (alive(pid)) process.kill(pid, "SIGKILL");
		});
		assert.ok(alive(moatPid) && alive(childPid));
		controller.abort();
		await assert.rejects(running, /aborted/);
		await waitFor(() => !alive(moatPid) && !alive(childPid));
	});
}

test("a missing binary is a did-not-run error, never a fallback", async () => {
	const config: MoatConfig = { binary: "/nonexistent/moat", userPolicies: [] };
	await assert.rejects(runMoat(config, { cwd: "/", argv: ["true"] }), MoatNotRunError);
});

// The packed binary is chosen by the machine's architecture: x64 and arm64 each get their own,
// any other architecture none of them (then $PATH), and $MOAT_BIN wins over both.
test("locateMoat picks the packed binary of the machine's architecture", () => {
	const root = mkdtempSync(join(tmpdir(), "moat-pi-arch-"));
	for (const arch of ["linux-x64", "linux-arm64"]) {
		mkdirSync(join(root, "bin", arch), { recursive: true });
		writeFileSync(join(root, "bin", arch, "moat"), "#!/bin/sh\n", { mode: 0o755 });
	}
	const noPath = { PATH: "" };
	assert.equal(locateMoat(noPath, "x64", root), join(root, "bin", "linux-x64", "moat"));
	assert.equal(locateMoat(noPath, "arm64", root), join(root, "bin", "linux-arm64", "moat"));
	assert.equal(locateMoat(noPath, "riscv64", root), undefined);
	assert.equal(locateMoat(noPath, "ia32", root), undefined);
	assert.equal(locateMoat({ ...noPath, MOAT_BIN: "/opt/m" }, "arm64", root), "/opt/m");
	// A package packed without the ARM64 build: an arm64 machine never gets the x86-64 binary.
	rmSync(join(root, "bin", "linux-arm64"), { recursive: true });
	assert.equal(locateMoat(noPath, "arm64", root), undefined);
	const onPath = mkdtempSync(join(tmpdir(), "moat-pi-path-"));
	writeFileSync(join(onPath, "moat"), "#!/bin/sh\n", { mode: 0o755 });
	assert.equal(locateMoat({ PATH: onPath }, "arm64", root), join(onPath, "moat"));
});
