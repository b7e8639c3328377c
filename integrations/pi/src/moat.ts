// Runs one command in a moat sandbox: where the binary is, what it is told, and how its end is
// read. Everything Pi's tools do goes through runMoat(); nothing here ever runs a command on the
// host itself, and nothing here falls back to doing so when moat fails.
//
// Process model: moat is spawned as the leader of its own process group (detached). moat blocks
// SIGINT/SIGTERM/SIGHUP and turns them into "stop the sandbox and clean up"; the sandbox's init
// dies with moat in any case (PR_SET_PDEATHSIG), taking its pid namespace with it. So an abort is
// SIGTERM to the group, then SIGKILL to the group after a grace period: nothing is left running.

import { spawn } from "node:child_process";
import { existsSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

// moat's exit statuses (docs/policy.md, `moat run --help`).
export const EXIT_TIMEOUT = 124;
export const EXIT_NOT_RUN = 125;

// How long moat gets to stop a sandbox after SIGTERM before the whole group is killed.
export const DEFAULT_KILL_GRACE_MS = 3000;

/** The sandbox could not be set up: the command did not run at all, on the host or anywhere. */
export class MoatNotRunError extends Error {
	readonly reason: string;
	constructor(reason: string) {
		super(
			`moat: the command did not run: the sandbox could not be set up (${reason}). ` +
				"Nothing was run on the host either; fix the cause (see /moat) and try again.",
		);
		this.name = "MoatNotRunError";
		this.reason = reason;
	}
}

/** The directory of the packed binaries for a Node architecture (`process.arch`), under the
 * package: bin/linux-x64 or bin/linux-arm64. Undefined for an architecture moat is not built
 * for: never another architecture's binary. */
export function packedMoatDir(arch: string): string | undefined {
	if (arch === "x64") return join("bin", "linux-x64");
	if (arch === "arm64") return join("bin", "linux-arm64");
	return undefined;
}

const PACKAGE_ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");

/** Where the moat binary is: $MOAT_BIN, then the one packed into this package for this machine's
 * architecture, then $PATH. `arch` and `packageRoot` are this process's and this package's
 * (parameters for the tests). */
export function locateMoat(
	env: NodeJS.ProcessEnv = process.env,
	arch: string = process.arch,
	packageRoot: string = PACKAGE_ROOT,
): string | undefined {
	const explicit = env.MOAT_BIN;
	if (explicit) return explicit;
	const dir = packedMoatDir(arch);
	if (dir) {
		const packed = join(packageRoot, dir, "moat");
		if (existsSync(packed)) return packed;
	}
	for (const dir of (env.PATH ?? "").split(":")) {
		if (!dir) continue;
		const candidate = join(dir, "moat");
		try {
			if (statSync(candidate).isFile()) return candidate;
		} catch {
			// not there
		}
	}
	return undefined;
}

// The only variables moat itself gets: what it needs to find the user's files, its per-user state
// and (rootless) the user's systemd manager. moat passes none of them into the sandbox, but Pi's
// environment holds API keys, so they never even reach moat.
const MOAT_ENV_NAMES = [
	"HOME",
	"PATH",
	"USER",
	"LOGNAME",
	"XDG_RUNTIME_DIR",
	"XDG_STATE_HOME",
	"XDG_CONFIG_HOME",
	"DBUS_SESSION_BUS_ADDRESS",
	"MOAT_NETNS_POOL",
];

export function moatEnvironment(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
	const out: NodeJS.ProcessEnv = {};
	for (const name of MOAT_ENV_NAMES) {
		const value = env[name];
		if (value !== undefined) out[name] = value;
	}
	if (out.PATH === undefined) out.PATH = "/usr/local/bin:/usr/bin:/bin";
	return out;
}

export interface MoatConfig {
	/** The moat binary. */
	binary: string;
	/** Trusted policy layers below the project's files (`--user-policy`), in order. */
	userPolicies: string[];
	/** The environment moat is started with; default moatEnvironment(process.env). */
	env?: NodeJS.ProcessEnv;
	/** SIGTERM-to-SIGKILL grace on abort. */
	killGraceMs?: number;
}

/** The user-policy layers that exist among `candidates` (moat refuses a missing one). */
export function existingFiles(candidates: string[]): string[] {
	return candidates.filter((f) => {
		try {
			return statSync(f).isFile();
		} catch {
			return false;
		}
	});
}

export interface RunOptions {
	/** Pi's working directory: the command starts there, and the project's policy comes from it. */
	cwd: string;
	/** The command and its arguments, run inside the sandbox. */
	argv: string[];
	/** Piped to the command's standard input (else it reads /dev/null). */
	stdin?: Buffer | string;
	/** Each chunk of stdout and stderr as it arrives. */
	onStdout?: (chunk: Buffer) => void;
	onStderr?: (chunk: Buffer) => void;
	/** Aborts the run: the process group is stopped, then killed. */
	signal?: AbortSignal;
	/** Pi's timeout in seconds: moat enforces it as the wall-clock limit. */
	timeoutSeconds?: number;
	/** Keep at most this many bytes of stdout in the result (default: all). */
	maxStdoutBytes?: number;
}

export interface RunResult {
	/** moat's exit status: the command's, 128+N on signal N, 124 on a timeout. */
	exitCode: number;
	stdout: Buffer;
	stderr: string;
	/** A timeout: moat's wall-clock limit that Pi asked for, or a policy's wall/CPU limit. */
	timedOut: boolean;
	aborted: boolean;
}

/** argv for `moat run` (exported for tests and for the /moat command). */
export function moatRunArgs(config: MoatConfig, opts: RunOptions): string[] {
	const args = ["run", "--cwd", opts.cwd];
	for (const file of config.userPolicies) args.push("--user-policy", file);
	if (opts.timeoutSeconds !== undefined && opts.timeoutSeconds > 0) {
		args.push("--wall-timeout", `${Math.ceil(opts.timeoutSeconds * 1000)}ms`);
	}
	args.push("--", ...opts.argv);
	return args;
}

/** The reason moat gave for not running ("moat run: ..."), if it gave one. */
export function setupFailure(stderr: string): string | undefined {
	for (const line of stderr.split("\n")) {
		if (line.startsWith("moat run: ")) return line.slice("moat run: ".length).trim();
	}
	return undefined;
}

// moat's own notice that one of its limits ended the command (run_command.cc, ExplainEnding).
const LIMIT_NOTICE = /^moat: (wall-clock|CPU-time) limit \(.*\) reached; the command was killed$/m;

function killGroup(pid: number, signal: NodeJS.Signals): void {
	try {
		process.kill(-pid, signal);
	} catch {
		// already gone
	}
}

/**
 * Runs argv in a sandbox and resolves when moat has exited and its pipes are closed. Rejects with
 * MoatNotRunError when the sandbox could not be set up (nothing ran), and with an Error when moat
 * cannot be started at all. Never runs anything outside moat.
 */
export function runMoat(config: MoatConfig, opts: RunOptions): Promise<RunResult> {
	if (opts.signal?.aborted) return Promise.reject(new Error("aborted"));
	const args = moatRunArgs(config, opts);
	return new Promise((resolve, reject) => {
		const child = spawn(config.binary, args, {
			cwd: "/",
			detached: true,
			env: config.env ?? moatEnvironment(),
			stdio: [opts.stdin === undefined ? "ignore" : "pipe", "pipe", "pipe"],
		});
		const stdout: Buffer[] = [];
		let stdoutBytes = 0;
		let stderr = "";
		let aborted = false;
		let graceTimer: NodeJS.Timeout | undefined;
		let backstop: NodeJS.Timeout | undefined;

		const stop = () => {
			if (!child.pid) return;
			killGroup(child.pid, "SIGTERM");
			graceTimer ??= setTimeout(
				() => killGroup(child.pid as number, "SIGKILL"),
				config.killGraceMs ?? DEFAULT_KILL_GRACE_MS,
			);
		};
		const onAbort = () => {
			aborted = true;
			stop();
		};
		opts.signal?.addEventListener("abort", onAbort, { once: true });
		// moat enforces Pi's timeout itself; this only catches a moat that does not.
		if (opts.timeoutSeconds !== undefined && opts.timeoutSeconds > 0) {
			backstop = setTimeout(stop, opts.timeoutSeconds * 1000 + 10_000);
		}

		child.stdout?.on("data", (chunk: Buffer) => {
			if (opts.maxStdoutBytes === undefined || stdoutBytes < opts.maxStdoutBytes) {
				stdout.push(chunk);
				stdoutBytes += chunk.length;
			}
			opts.onStdout?.(chunk);
		});
		child.stderr?.on("data", (chunk: Buffer) => {
			if (stderr.length < 1 << 20) stderr += chunk.toString("utf8");
			opts.onStderr?.(chunk);
		});
		if (child.stdin) {
			child.stdin.on("error", () => {}); // a command that does not read its input
			child.stdin.end(opts.stdin);
		}

		const finish = () => {
			opts.signal?.removeEventListener("abort", onAbort);
			if (backstop) clearTimeout(backstop);
			if (graceTimer) clearTimeout(graceTimer);
		};
		child.on("error", (err) => {
			finish();
			reject(new MoatNotRunError(`cannot start ${config.binary}: ${err.message}`));
		});
		child.on("close", (code, signal) => {
			finish();
			if (aborted) {
				reject(new Error("aborted"));
				return;
			}
			const exitCode = code ?? 128 + (signal ? signalNumber(signal) : 9);
			if (exitCode === EXIT_NOT_RUN) {
				const reason = setupFailure(stderr);
				if (reason !== undefined) {
					reject(new MoatNotRunError(reason));
					return;
				}
			}
			resolve({
				exitCode,
				stdout: Buffer.concat(stdout),
				stderr,
				timedOut: exitCode === EXIT_TIMEOUT && LIMIT_NOTICE.test(stderr),
				aborted: false,
			});
		});
	});
}

function signalNumber(signal: NodeJS.Signals): number {
	const numbers: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15 };
	return numbers[signal] ?? 9;
}

/** Runs a moat subcommand that is not `run` (`policy show`, `--version`): output as text. */
export function moatCommand(
	config: MoatConfig,
	args: string[],
): Promise<{ exitCode: number; stdout: string; stderr: string }> {
	return new Promise((resolve, reject) => {
		const child = spawn(config.binary, args, {
			cwd: "/",
			env: config.env ?? moatEnvironment(),
			stdio: ["ignore", "pipe", "pipe"],
		});
		let stdout = "";
		let stderr = "";
		child.stdout?.on("data", (c: Buffer) => (stdout += c.toString("utf8")));
		child.stderr?.on("data", (c: Buffer) => (stderr += c.toString("utf8")));
		child.on("error", (err) => reject(new Error(`cannot start ${config.binary}: ${err.message}`)));
		child.on("close", (code) => resolve({ exitCode: code ?? 1, stdout, stderr }));
	});
}
