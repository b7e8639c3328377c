// usage: node deploy/validate-k8s.mjs TOOLS_DIR FILE.yaml...
// Validates every object in the rendered manifests against the Kubernetes 1.34 OpenAPI schemas
// (npm kubernetes-models) and prometheus-operator's CRD schemas (@kubernetes-models/
// prometheus-operator). A kind with no schema fails: nothing is skipped silently.
// Prints one line per object; exit status 1 if any fails.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const [toolsDir, ...files] = process.argv.slice(2);
if (!toolsDir || files.length === 0) {
  console.error('usage: node deploy/validate-k8s.mjs TOOLS_DIR FILE.yaml...');
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(toolsDir), 'package.json'));
const yaml = require('js-yaml');
const modules = path.join(path.resolve(toolsDir), 'node_modules');
const load = (spec) => import(pathToFileURL(path.join(modules, spec + '.js')).href);

async function model(apiVersion, kind) {
  const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
  const candidates = group === 'monitoring.coreos.com'
    ? [`@kubernetes-models/prometheus-operator/${group}/${version}/${kind}`]
    : [`kubernetes-models/${group ? group + '/' : ''}${version}/${kind}`];
  for (const c of candidates) {
    try { return (await load(c))[kind]; } catch { /* try the next */ }
  }
  return null;
}

let ok = 0, bad = 0;
for (const file of files) {
  for (const doc of yaml.loadAll(fs.readFileSync(file, 'utf8'))) {
    if (!doc || typeof doc !== 'object') continue;
    const id = `${path.basename(file)}: ${doc.apiVersion}/${doc.kind} ${doc.metadata?.name}`;
    if (!doc.apiVersion || !doc.kind || !doc.metadata?.name) {
      console.log(`FAIL ${id}: needs apiVersion, kind and metadata.name`); bad++; continue;
    }
    const Model = await model(doc.apiVersion, doc.kind);
    if (!Model) { console.log(`FAIL ${id}: no schema for this kind`); bad++; continue; }
    try {
      new Model(doc).validate();
      console.log(`ok   ${id}`); ok++;
    } catch (e) {
      console.log(`FAIL ${id}: ${e.message}`); bad++;
    }
  }
}
console.log(`validate-k8s: ${ok} valid, ${bad} invalid`);
process.exit(bad ? 1 : 0);
