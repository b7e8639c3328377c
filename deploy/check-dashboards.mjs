// usage: node deploy/check-dashboards.mjs TOOLS_DIR dashboard.json...
// Type-checks each dashboard against Grafana's own Dashboard type (npm @grafana/schema) with the
// TypeScript compiler: `satisfies Dashboard` catches wrong types, missing fields and unknown keys
// that a JSON lint would let through. The .ts files live in a temporary directory inside
// TOOLS_DIR so that '@grafana/schema' resolves from its node_modules. Exit status 1 on failure.
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';

const [toolsDir, ...files] = process.argv.slice(2);
if (!toolsDir || files.length === 0) {
  console.error('usage: node deploy/check-dashboards.mjs TOOLS_DIR dashboard.json...');
  process.exit(2);
}
const tools = path.resolve(toolsDir);
const dir = fs.mkdtempSync(path.join(tools, '.dashcheck-'));
const sources = files.map((f, i) => {
  const out = path.join(dir, `d${i}.ts`);
  // Parenthesised: a newline before `satisfies` would end the statement.
  fs.writeFileSync(out, `// ${f}\nimport type { Dashboard } from '@grafana/schema';\n` +
    `export const d = (${fs.readFileSync(f, 'utf8').trim()}) satisfies Dashboard;\n`);
  return out;
});
try {
  execFileSync(path.join(tools, 'node_modules/.bin/tsc'),
    ['--noEmit', '--strict', '--skipLibCheck', '--module', 'esnext', '--moduleResolution', 'bundler',
     '--target', 'es2022', ...sources], { stdio: 'inherit', cwd: tools });
  console.log(`check-dashboards: ${files.length} dashboard(s) satisfy @grafana/schema's Dashboard`);
} catch {
  console.log('check-dashboards: failed (tsc errors above; dN.ts is the Nth file given: ' +
    files.map((f, i) => `d${i}=${f}`).join(', ') + ')');
  process.exitCode = 1;
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
