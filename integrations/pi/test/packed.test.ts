// The npm tarball's contents (scripts/pack.sh): a static x86-64 moat, a static ARM64 moat when
// the cross build exists (scripts/cross-arm64.sh; REQUIRE_ARM64=1 makes its absence a failure),
// run under qemu-user when that is installed, and the AppArmor profile for Ubuntu 24.04.
// env: PACKED (the unpacked package directory), REQUIRE_ARM64

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

const PACKED = process.env.PACKED ?? "";
const EM_X86_64 = 62;
const EM_AARCH64 = 183;
const PT_INTERP = 3;

/** The ELF header's machine and whether the file asks for a dynamic loader (PT_INTERP). */
function elf(path: string): { machine: number; dynamic: boolean } {
	const b = readFileSync(path);
	assert.equal(b.subarray(0, 4).toString("latin1"), "\x7fELF", `${path} is not an ELF file`);
	assert.equal(b[4], 2, `${path} is not a 64-bit ELF`);
	assert.equal(b[5], 1, `${path} is not little-endian`);
	const machine = b.readUInt16LE(18);
	const phoff = Number(b.readBigUInt64LE(32));
	const phentsize = b.readUInt16LE(54);
	const phnum = b.readUInt16LE(56);
	let dynamic = false;
	for (let i = 0; i < phnum; i++) {
		if (b.readUInt32LE(phoff + i * phentsize) === PT_INTERP) dynamic = true;
	}
	return { machine, dynamic };
}

function onPath(name: string): string | undefined {
	for (const dir of (process.env.PATH ?? "").split(":")) {
		if (dir && existsSync(join(dir, name))) return join(dir, name);
	}
	return undefined;
}

test("the tarball carries a static x86-64 moat", { skip: !PACKED && "PACKED is not set" }, () => {
	const { machine, dynamic } = elf(join(PACKED, "bin", "linux-x64", "moat"));
	assert.equal(machine, EM_X86_64);
	assert.equal(dynamic, false, "the x86-64 moat must be static");
});

const arm64 = join(PACKED, "bin", "linux-arm64", "moat");
const arm64Skip = !PACKED
	? "PACKED is not set"
	: !existsSync(arm64) && process.env.REQUIRE_ARM64 !== "1"
		? "no ARM64 build was packed (scripts/cross-arm64.sh makes one)"
		: false;

test("the tarball carries a static aarch64 moat, which runs under qemu-user", { skip: arm64Skip }, () => {
	assert.ok(existsSync(arm64), `${arm64} is missing from the tarball`);
	const { machine, dynamic } = elf(arm64);
	assert.equal(machine, EM_AARCH64);
	assert.equal(dynamic, false, "the ARM64 moat must be static");
	const qemu = onPath("qemu-aarch64-static") ?? onPath("qemu-aarch64");
	if (!qemu) {
		console.log("# qemu-user is not installed: the ARM64 moat was checked but not run");
		return;
	}
	const run = spawnSync(qemu, [arm64, "--help"], { encoding: "utf8", timeout: 120_000 });
	assert.equal(run.status, 0, run.stderr);
	assert.match(run.stdout, /usage: moat run/);
});

test("the tarball carries the AppArmor profile", { skip: !PACKED && "PACKED is not set" }, () => {
	const profile = readFileSync(join(PACKED, "apparmor", "moat"), "utf8");
	assert.match(profile, /^\s*userns,$/m);
	assert.match(profile, /bin\/linux-\{x64,arm64\}\/moat/);
});
