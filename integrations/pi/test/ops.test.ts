// The pure parts of the back ends: fd's glob rules for find, and image detection for read.

import assert from "node:assert/strict";
import { test } from "node:test";
import { findMatcher, globToRegExp, sniffImage } from "../src/ops.ts";

test("a pattern without / matches the name at any depth, with / the path under the root", () => {
	const ts = findMatcher("*.ts");
	assert.ok(ts("a.ts") && ts("src/deep/b.ts"));
	assert.ok(!ts("a.tsx") && !ts("a.ts/readme"));
	const src = findMatcher("src/*.ts");
	assert.ok(src("src/a.ts"));
	assert.ok(!src("pkg/src/a.ts") && !src("src/deep/a.ts"));
	const any = findMatcher("**/src/*.ts");
	assert.ok(any("src/a.ts") && any("pkg/src/a.ts"));
	assert.ok(findMatcher("./src/*.ts")("src/a.ts"), "a leading ./ is dropped, as Pi does for fd");
});

test("fd's smart case: lower-case patterns ignore case, others do not", () => {
	assert.ok(findMatcher("readme*")("README.md"));
	assert.ok(!findMatcher("Readme*")("README.md"));
});

test("globs: ?, classes, braces, escapes, and dots taken literally", () => {
	assert.ok(globToRegExp("a?c", false).test("abc") && !globToRegExp("a?c", false).test("a/c"));
	assert.ok(globToRegExp("[ab]x", false).test("bx") && !globToRegExp("[!ab]x", false).test("ax"));
	const braces = globToRegExp("*.{ts,js}", false);
	assert.ok(braces.test("x.ts") && braces.test("x.js") && !braces.test("x.py"));
	assert.ok(!globToRegExp("a.b", false).test("axb"));
	assert.ok(globToRegExp("a\\*", false).test("a*") && !globToRegExp("a\\*", false).test("ab"));
});

test("images are told by their first bytes, anything else is text", () => {
	assert.equal(sniffImage(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0])), "image/png");
	assert.equal(sniffImage(Buffer.from([0xff, 0xd8, 0xff, 0xe0])), "image/jpeg");
	assert.equal(sniffImage(Buffer.from("GIF89a")), "image/gif");
	assert.equal(sniffImage(Buffer.from("RIFF\0\0\0\0WEBPVP8 ")), "image/webp");
	assert.equal(sniffImage(Buffer.from("just text")), null);
});
