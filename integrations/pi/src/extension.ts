// The Pi side: replaces the seven built-in tools (bash, read, write, edit, grep, find, ls) and
// the user's `!` commands with versions that run through moat, checks moat once per session and
// says what is protected, and adds /moat. Pi's SDK is passed in (extensions/moat.ts) so that the
// tests can give it Pi 0.73's or 1.6's real exports, or none.

import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import {
	existingFiles,
	locateMoat,
	MoatNotRunError,
	moatCommand,
	moatEnvironment,
	runMoat,
	type MoatConfig,
	type RunOptions,
} from "./moat.ts";
import {
	bashOperations,
	editOperations,
	findOperations,
	grepInSandbox,
	lsOperations,
	readOperations,
	writeOperations,
	type GrepParams,
	type RunFn,
} from "./ops.ts";

// The parts of Pi's SDK used here (same names in @mariozechner 0.73 and @earendil-works 1.x).
export interface PiSdk {
	createBashToolDefinition: (cwd: string, options?: any) => any;
	createReadToolDefinition: (cwd: string, options?: any) => any;
	createWriteToolDefinition: (cwd: string, options?: any) => any;
	createEditToolDefinition: (cwd: string, options?: any) => any;
	createGrepToolDefinition: (cwd: string, options?: any) => any;
	createFindToolDefinition: (cwd: string, options?: any) => any;
	createLsToolDefinition: (cwd: string, options?: any) => any;
	getAgentDir: () => string;
	truncateHead: (text: string, options?: any) => any;
	truncateLine: (text: string, maxChars?: number) => { text: string; wasTruncated: boolean };
	formatSize: (bytes: number) => string;
	DEFAULT_MAX_BYTES: number;
}

export interface MoatExtensionOptions {
	/** The moat binary; default locateMoat() ($MOAT_BIN, the packed one, $PATH). */
	binary?: string;
	/** The environment moat runs with (default: moatEnvironment(process.env)). */
	env?: NodeJS.ProcessEnv;
	killGraceMs?: number;
}

export const TOOL_NAMES = ["bash", "read", "write", "edit", "grep", "find", "ls"] as const;

// The package's own layer, lowest of the trusted ones: Pi's project is writable (as in Pi's
// sandbox example). Pi's global sandbox.json, above it, may replace that list.
export const DEFAULT_LAYER = join(dirname(fileURLToPath(import.meta.url)), "..", "policy", "pi-default.json");

// What moat keeps read-only in a writable project and refuses to let a sandbox create
// (docs/policy.md), and the credential stores it hides in every home.
const PROTECTED_IN_PROJECT = ".pi, .moat, .agents, .claude, .mcp.json, .vscode, .idea, .envrc, .git/hooks, .git/config";
const HIDDEN = "your home (except the project), ~/.pi, ~/.ssh, ~/.aws, ~/.gnupg and other credential stores, /root, /run";

/** Pi's global sandbox configuration, which moat takes as a trusted layer (--user-policy). */
export function piGlobalPolicy(sdk: PiSdk): string {
	return join(sdk.getAgentDir(), "extensions", "sandbox.json");
}

/** A path argument as Pi's tools resolve it: a leading @ dropped, ~ expanded, relative to cwd. */
export function resolveToolPath(path: string | undefined, cwd: string): string {
	let p = (path ?? ".").replace(/^@/, "");
	if (p === "~") p = homedir();
	else if (p.startsWith("~/")) p = join(homedir(), p.slice(2));
	return resolve(cwd, p);
}

function policyArgs(config: MoatConfig, cwd: string): string[] {
	const args = ["--cwd", cwd];
	for (const file of config.userPolicies) args.push("--user-policy", file);
	return args;
}

/**
 * What the sandbox protects, for session_start: from `moat policy show --json` (its "policy"
 * object: the merged values) where it says, else what moat always does (docs/policy.md).
 */
export function describeProtection(policyJson: string | undefined, cwd: string): string {
	let writable = "the project (Pi's working directory)";
	let readOnly = PROTECTED_IN_PROJECT;
	let network = "none";
	let limits = "";
	if (policyJson) {
		try {
			const policy = JSON.parse(policyJson).policy ?? {};
			const fs = policy.filesystem ?? {};
			const show = (p: string) => (p === cwd ? `. (${cwd})` : p.startsWith(`${cwd}/`) ? p.slice(cwd.length + 1) : p);
			if (Array.isArray(fs.allowWrite)) writable = fs.allowWrite.length ? fs.allowWrite.map(show).join(", ") : "nothing";
			if (Array.isArray(fs.denyWrite) && fs.denyWrite.length) readOnly = fs.denyWrite.map(show).join(", ");
			const domains = policy.network?.allowedDomains;
			if (Array.isArray(domains)) network = domains.length ? `only ${domains.join(", ")}, through moat's proxy` : "none";
			const l = policy.limits ?? {};
			if (l.wallTimeout !== undefined) limits = `  limits: ${l.wallTimeout}s wall clock, ${l.cpuTimeout}s CPU, ${Math.round((l.memory ?? 0) / 1048576)} MiB per command`;
		} catch {
			// not JSON: the static description stands
		}
	}
	const lines = [
		"moat: every tool and ! command runs in a kernel-enforced sandbox.",
		`  writable: ${writable}; read-only and never created: ${readOnly}`,
		`  hidden: ${HIDDEN}`,
		`  network: ${network}; Pi's environment (API keys) is not passed in`,
	];
	if (limits) lines.push(limits);
	lines.push("  /moat shows the whole merged policy and where each value came from");
	return lines.join("\n");
}

export function registerMoat(pi: any, sdk: PiSdk, options: MoatExtensionOptions = {}) {
	const binary = options.binary ?? locateMoat();
	// Read at every call: a sandbox.json written during the session counts from then on.
	const config = (): MoatConfig => ({
		binary: binary ?? "",
		userPolicies: existingFiles([DEFAULT_LAYER, piGlobalPolicy(sdk)]),
		env: options.env ?? moatEnvironment(),
		killGraceMs: options.killGraceMs,
	});
	const run: RunFn = (opts: RunOptions) => {
		if (!binary) {
			return Promise.reject(
				new MoatNotRunError("no moat binary: set MOAT_BIN, or install the package with its bin/, or put moat on PATH"),
			);
		}
		return runMoat(config(), opts);
	};
	const cwdOf = (ctx: any) => ctx?.cwd ?? process.cwd();

	// Each call gets operations bound to its abort signal, through Pi's own tool definition (its
	// schema, prompt text, truncation, result shape and rendering stay Pi's).
	const wrap = (name: string, factory: (cwd: string, options?: any) => any, ops: (cwd: string, signal?: AbortSignal) => any, extra: object = {}) => {
		const base = factory(process.cwd(), extra);
		pi.registerTool({
			...base,
			name,
			async execute(id: string, params: any, signal: AbortSignal | undefined, onUpdate: any, ctx: any) {
				const cwd = cwdOf(ctx);
				const tool = factory(cwd, { ...extra, operations: ops(cwd, signal) });
				return tool.execute(id, params, signal, onUpdate, ctx);
			},
		});
	};
	// Pi 1.x would put PI_* session variables in the environment and say so in the prompt: no
	// environment reaches the sandbox, so neither is offered.
	wrap("bash", sdk.createBashToolDefinition, () => bashOperations(run), { exposeSessionEnvironment: false });
	wrap("read", sdk.createReadToolDefinition, (cwd, signal) => readOperations(run, cwd, signal));
	wrap("write", sdk.createWriteToolDefinition, (cwd, signal) => writeOperations(run, cwd, signal));
	wrap("edit", sdk.createEditToolDefinition, (cwd, signal) => editOperations(run, cwd, signal));
	wrap("find", sdk.createFindToolDefinition, (cwd, signal) => findOperations(run, cwd, signal));
	wrap("ls", sdk.createLsToolDefinition, (cwd, signal) => lsOperations(run, cwd, signal));

	// grep: Pi's always runs a host ripgrep, so only its schema, prompt and rendering are kept.
	const grepBase = sdk.createGrepToolDefinition(process.cwd());
	pi.registerTool({
		...grepBase,
		name: "grep",
		async execute(_id: string, params: GrepParams, signal: AbortSignal | undefined, _onUpdate: any, ctx: any) {
			const cwd = cwdOf(ctx);
			const searchPath = resolveToolPath(params.path, cwd);
			const limit = Math.max(1, Math.floor(params.limit ?? 100));
			const outcome = await grepInSandbox(run, cwd, searchPath, params, signal);
			if (outcome.lines.length === 0) return { content: [{ type: "text", text: "No matches found" }], details: undefined };
			let linesTruncated = false;
			const shown = outcome.lines.map((line) => {
				const t = sdk.truncateLine(line);
				linesTruncated ||= t.wasTruncated;
				return t.text;
			});
			const truncation = sdk.truncateHead(shown.join("\n"), { maxLines: Number.MAX_SAFE_INTEGER });
			let text: string = truncation.content;
			const details: Record<string, unknown> = {};
			const notices: string[] = [];
			if (outcome.matchLimitReached) {
				notices.push(`${limit} matches limit reached. Use limit=${limit * 2} for more, or refine pattern`);
				details.matchLimitReached = limit;
			}
			if (truncation.truncated) {
				notices.push(`${sdk.formatSize(sdk.DEFAULT_MAX_BYTES)} limit reached`);
				details.truncation = truncation;
			}
			if (linesTruncated) {
				notices.push("Some lines truncated. Use read tool to see full lines");
				details.linesTruncated = true;
			}
			if (notices.length) text += `\n\n[${notices.join(". ")}]`;
			return { content: [{ type: "text", text }], details: Object.keys(details).length ? details : undefined };
		},
	});

	// The user's ! and !! commands: the same sandbox as the model's.
	pi.on("user_bash", () => ({ operations: bashOperations(run) }));

	const say = (ctx: any, text: string, level: "info" | "warning" | "error") => {
		if (ctx?.hasUI) ctx.ui.notify(text, level);
		else process.stderr.write(`${text}\n`);
	};

	// Once per session: can moat set a sandbox up here, and what does it protect?
	pi.on("session_start", async (_event: unknown, ctx: any) => {
		const cwd = cwdOf(ctx);
		if (!binary) {
			say(ctx, "moat: no moat binary found (set MOAT_BIN or put moat on PATH). Every tool call will fail; nothing runs unsandboxed.", "error");
			return;
		}
		try {
			const probe = await run({ cwd, argv: ["true"] });
			if (probe.exitCode !== 0) throw new MoatNotRunError(`a test command exited with ${probe.exitCode}`);
		} catch (err) {
			say(ctx, `${(err as Error).message}\nEvery tool call will fail the same way until this is fixed.`, "error");
			ctx?.ui?.setStatus?.("moat", "moat: NOT READY");
			return;
		}
		let policyJson: string | undefined;
		try {
			const shown = await moatCommand(config(), ["policy", "show", "--json", ...policyArgs(config(), cwd)]);
			if (shown.exitCode === 0) policyJson = shown.stdout;
		} catch {
			// an older moat without `policy show`: the static description stands
		}
		say(ctx, describeProtection(policyJson, cwd), "info");
		ctx?.ui?.setStatus?.("moat", "moat: sandboxed");
	});

	pi.registerCommand("moat", {
		description: "Show moat's merged sandbox policy and where each value came from",
		handler: async (_args: string, ctx: any) => {
			if (!binary) {
				say(ctx, "moat: no moat binary found (set MOAT_BIN or put moat on PATH)", "error");
				return;
			}
			const shown = await moatCommand(config(), ["policy", "show", ...policyArgs(config(), cwdOf(ctx))]);
			if (shown.exitCode === 0) say(ctx, shown.stdout.trimEnd(), "info");
			else say(ctx, `moat policy show failed: ${shown.stderr.trim() || `exit status ${shown.exitCode}`}`, "error");
		},
	});
}
