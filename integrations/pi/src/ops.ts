// Pi's tool back ends, each through moat: the `*Operations` objects that Pi's own tool
// definitions accept (bash, read, write, edit, ls, find), and a grep that searches inside the
// sandbox (Pi's grep always spawns a host ripgrep, whatever operations it is given).
//
// Every file operation is one short `moat run` in Pi's working directory, so it sees exactly what
// a command would: the project at its own path, the home and credentials hidden, protected paths
// read-only. Paths come from Pi already absolute (resolved against its cwd).

import { basename, join, relative } from "node:path";
import { MoatNotRunError, type RunOptions, type RunResult } from "./moat.ts";

/** runMoat bound to a configuration (tests pass a stub-backed one). */
export type RunFn = (opts: RunOptions) => Promise<RunResult>;

/** An error from inside the sandbox, for a tool: what the command said, else what failed. */
function commandError(result: RunResult, what: string): Error {
	const said = result.stderr
		.split("\n")
		.filter((l) => l.trim() !== "" && !l.startsWith("moat: "))
		.join("\n")
		.trim();
	return new Error(said || `${what} (exit status ${result.exitCode} in the sandbox)`);
}

// ---- bash, and the user's ! commands ----

export interface BashExecOptions {
	onData: (data: Buffer) => void;
	signal?: AbortSignal;
	timeout?: number;
	env?: NodeJS.ProcessEnv; // ignored: nothing of Pi's environment goes into the sandbox
}

export function bashOperations(run: RunFn) {
	return {
		async exec(command: string, cwd: string, options: BashExecOptions): Promise<{ exitCode: number }> {
			const result = await run({
				cwd,
				argv: ["bash", "-c", command],
				onStdout: options.onData,
				onStderr: options.onData,
				signal: options.signal,
				timeoutSeconds: options.timeout,
				maxStdoutBytes: 0, // streamed to Pi, which keeps its own copy
			});
			// Pi's own timeout: Pi words it. A policy's limit: moat's notice is already in the output.
			if (result.timedOut && options.timeout !== undefined) throw new Error(`timeout:${options.timeout}`);
			return { exitCode: result.exitCode };
		},
	};
}

// ---- read ----

const IMAGE_MAGIC: Array<[string, number[]]> = [
	["image/png", [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]],
	["image/jpeg", [0xff, 0xd8, 0xff]],
	["image/gif", [0x47, 0x49, 0x46, 0x38]],
];

export function sniffImage(data: Buffer): string | null {
	for (const [mime, magic] of IMAGE_MAGIC) {
		if (data.length >= magic.length && magic.every((b, i) => data[i] === b)) return mime;
	}
	if (data.length >= 12 && data.toString("latin1", 0, 4) === "RIFF" && data.toString("latin1", 8, 12) === "WEBP") {
		return "image/webp";
	}
	return null;
}

/** One `cat` per file per tool call: access, image detection and reading share it. */
function fileReader(run: RunFn, cwd: string, signal?: AbortSignal, mustBeWritable = false) {
	const cache = new Map<string, Promise<Buffer>>();
	return (path: string): Promise<Buffer> => {
		let pending = cache.get(path);
		if (!pending) {
			const script = mustBeWritable
				? 'if [ -e "$1" ] && [ ! -w "$1" ]; then echo "$1: not writable in the sandbox (read-only or protected)" >&2; exit 1; fi; exec cat -- "$1"'
				: 'exec cat -- "$1"';
			pending = run({ cwd, argv: ["sh", "-c", script, "sh", path], signal }).then((r) => {
				if (r.exitCode !== 0) throw commandError(r, `cannot read ${path}`);
				return r.stdout;
			});
			cache.set(path, pending);
		}
		return pending;
	};
}

export function readOperations(run: RunFn, cwd: string, signal?: AbortSignal) {
	const read = fileReader(run, cwd, signal);
	return {
		readFile: (path: string) => read(path),
		access: async (path: string) => {
			await read(path);
		},
		detectImageMimeType: async (path: string) => sniffImage(await read(path)),
	};
}

// ---- write and edit ----

async function writeFile(run: RunFn, cwd: string, path: string, content: string, signal?: AbortSignal) {
	const r = await run({ cwd, argv: ["sh", "-c", 'cat > "$1"', "sh", path], stdin: content, signal });
	if (r.exitCode !== 0) throw commandError(r, `cannot write ${path}`);
}

export function writeOperations(run: RunFn, cwd: string, signal?: AbortSignal) {
	return {
		writeFile: (path: string, content: string) => writeFile(run, cwd, path, content, signal),
		mkdir: async (dir: string) => {
			const r = await run({ cwd, argv: ["mkdir", "-p", "--", dir], signal });
			if (r.exitCode !== 0) throw commandError(r, `cannot create ${dir}`);
		},
	};
}

export function editOperations(run: RunFn, cwd: string, signal?: AbortSignal) {
	const read = fileReader(run, cwd, signal, true);
	return {
		readFile: (path: string) => read(path),
		access: async (path: string) => {
			await read(path);
		},
		writeFile: (path: string, content: string) => writeFile(run, cwd, path, content, signal),
	};
}

// ---- ls ----

interface Listing {
	isDirectory: boolean;
	entries: Map<string, boolean>; // name -> is a directory (symlinks followed)
}

export function lsOperations(run: RunFn, cwd: string, signal?: AbortSignal) {
	const listings = new Map<string, Promise<Listing | null>>();
	// One run per directory: its own type, then "<type> <name>\0" for each entry.
	const list = (path: string): Promise<Listing | null> => {
		let pending = listings.get(path);
		if (!pending) {
			const script =
				'[ -e "$1" ] || exit 3; [ -d "$1" ] || { printf "f\\0"; exit 0; }; printf "d\\0"; ' +
				"exec find \"$1\" -mindepth 1 -maxdepth 1 -printf '%Y %f\\0'";
			pending = run({ cwd, argv: ["sh", "-c", script, "sh", path], signal }).then((r) => {
				if (r.exitCode === 3) return null;
				const fields = r.stdout.toString("utf8").split("\0");
				if (r.exitCode !== 0 && fields[0] !== "d") throw commandError(r, `cannot list ${path}`);
				const entries = new Map<string, boolean>();
				for (const field of fields.slice(1)) {
					if (field.length < 3) continue;
					entries.set(field.slice(2), field[0] === "d");
				}
				return { isDirectory: fields[0] === "d", entries };
			});
			listings.set(path, pending);
		}
		return pending;
	};
	const parentEntry = async (path: string): Promise<boolean | undefined> => {
		for (const [dir, pending] of listings) {
			if (join(dir, basename(path)) !== path) continue;
			const listing = await pending;
			const isDir = listing?.entries.get(basename(path));
			if (isDir !== undefined) return isDir;
		}
		return undefined;
	};
	return {
		exists: async (path: string) => (await list(path)) !== null,
		stat: async (path: string) => {
			const known = await parentEntry(path);
			if (known !== undefined) return { isDirectory: () => known };
			const listing = await list(path);
			if (listing === null) throw new Error(`${path}: no such file or directory in the sandbox`);
			return { isDirectory: () => listing.isDirectory };
		},
		readdir: async (path: string) => {
			const listing = await list(path);
			if (listing === null) throw new Error(`${path}: no such file or directory in the sandbox`);
			return [...listing.entries.keys()];
		},
	};
}

// ---- find ----

/** A glob (fd's: `*`, `?`, `**`, `[...]`, `{a,b}`) as a regular expression over a whole path. */
export function globToRegExp(glob: string, ignoreCase: boolean): RegExp {
	let re = "";
	for (let i = 0; i < glob.length; i++) {
		const c = glob[i];
		if (c === "*") {
			if (glob[i + 1] === "*") {
				i++;
				if (glob[i + 1] === "/") {
					i++;
					re += "(?:.*/)?";
				} else {
					re += ".*";
				}
			} else {
				re += "[^/]*";
			}
		} else if (c === "?") {
			re += "[^/]";
		} else if (c === "[") {
			const end = glob.indexOf("]", i + 1);
			if (end < 0) {
				re += "\\[";
			} else {
				let body = glob.slice(i + 1, end).replace(/\\/g, "\\\\");
				if (body.startsWith("!")) body = `^${body.slice(1)}`;
				re += `[${body}]`;
				i = end;
			}
		} else if (c === "{") {
			const end = glob.indexOf("}", i + 1);
			if (end < 0) {
				re += "\\{";
			} else {
				const alternatives = glob
					.slice(i + 1, end)
					.split(",")
					.map((a) => globToRegExp(a, ignoreCase).source.slice(1, -1));
				re += `(?:${alternatives.join("|")})`;
				i = end;
			}
		} else if (c === "\\" && i + 1 < glob.length) {
			i++;
			re += glob[i].replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
		} else {
			re += c.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
		}
	}
	return new RegExp(`^${re}$`, ignoreCase ? "i" : "");
}

/** fd's rules: a pattern without `/` matches the name, with `/` the path under the search root. */
export function findMatcher(pattern: string): (relativePath: string) => boolean {
	const effective = pattern.replace(/^(?:\.\/)+/, "");
	const ignoreCase = effective === effective.toLowerCase(); // fd's smart case
	const re = globToRegExp(effective, ignoreCase);
	if (effective.includes("/")) return (rel) => re.test(rel);
	return (rel) => re.test(basename(rel));
}

export function findOperations(run: RunFn, cwd: string, signal?: AbortSignal) {
	return {
		exists: async (path: string) => (await run({ cwd, argv: ["test", "-e", path], signal })).exitCode === 0,
		glob: async (pattern: string, searchPath: string, options: { ignore: string[]; limit: number }) => {
			const script =
				"exec find \"$1\" -mindepth 1 \\( -name .git -o -name node_modules \\) -prune -o -printf '%P\\0'";
			const r = await run({ cwd, argv: ["sh", "-c", script, "sh", searchPath], signal, maxStdoutBytes: 32 << 20 });
			const names = r.stdout.toString("utf8").split("\0").filter((n) => n !== "");
			if (r.exitCode !== 0 && names.length === 0) throw commandError(r, `cannot search ${searchPath}`);
			const matches = findMatcher(pattern);
			const out: string[] = [];
			for (const name of names.sort()) {
				if (!matches(name)) continue;
				out.push(join(searchPath, name));
				if (out.length >= options.limit) break;
			}
			return out;
		},
	};
}

// ---- grep ----

export interface GrepParams {
	pattern: string;
	path?: string;
	glob?: string;
	ignoreCase?: boolean;
	literal?: boolean;
	context?: number;
	limit?: number;
}

export interface GrepOutcome {
	lines: string[]; // already formatted the way Pi's grep formats them
	matchLimitReached: boolean;
}

/**
 * Searches inside the sandbox with GNU grep (`-P`, Perl-compatible, close to ripgrep's syntax;
 * `-F` for literal), skipping .git and node_modules, and formats as Pi's grep does:
 * `path:N: text` for matches and `path-N- text` for context lines.
 */
export async function grepInSandbox(
	run: RunFn,
	cwd: string,
	searchPath: string,
	params: GrepParams,
	signal?: AbortSignal,
): Promise<GrepOutcome> {
	const limit = Math.max(1, Math.floor(params.limit ?? 100));
	const context = params.context && params.context > 0 ? Math.floor(params.context) : 0;
	const args = ["grep", "-rnHI", "-Z", "--exclude-dir=.git", "--exclude-dir=node_modules"];
	args.push(params.literal ? "-F" : "-P");
	if (params.ignoreCase) args.push("-i");
	if (context > 0) args.push(`-C${context}`);
	const glob = params.glob?.replace(/^(?:\.\/)+/, "");
	if (glob && !glob.includes("/")) args.push(`--include=${glob}`);
	args.push("-e", params.pattern, "--", searchPath);
	const r = await run({ cwd, argv: args, signal, maxStdoutBytes: 16 << 20 });
	if (r.exitCode !== 0 && r.exitCode !== 1) throw commandError(r, "grep failed");

	const pathFilter = glob?.includes("/") ? globToRegExp(glob, false) : undefined;
	// A directory's files by their path under it, a single file by its name (as Pi's grep does).
	const display = (file: string): string => {
		const rel = relative(searchPath, file);
		return rel === "" || rel.startsWith("..") ? basename(file) : rel;
	};
	const lines: string[] = [];
	let matches = 0;
	let matchLimitReached = false;
	for (const raw of r.stdout.toString("utf8").split("\n")) {
		const nul = raw.indexOf("\0");
		if (nul < 0) continue; // "--" between context groups, or a trailing empty line
		const file = raw.slice(0, nul);
		if (pathFilter && !pathFilter.test(relative(searchPath, file))) continue;
		const rest = raw.slice(nul + 1);
		const m = /^(\d+)([:-])(.*)$/s.exec(rest);
		if (!m) continue;
		const isMatch = m[2] === ":";
		if (isMatch) {
			if (matches >= limit) {
				matchLimitReached = true;
				break;
			}
			matches++;
		}
		const text = m[3].replace(/\r/g, "");
		lines.push(isMatch ? `${display(file)}:${m[1]}: ${text}` : `${display(file)}-${m[1]}- ${text}`);
	}
	return { lines: matches === 0 ? [] : lines, matchLimitReached };
}

export { MoatNotRunError };
