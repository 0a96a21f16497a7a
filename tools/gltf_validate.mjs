#!/usr/bin/env node
// Runs the Khronos glTF validator (npm `gltf-validator`) on .glb files and exits non-zero on any
// error or warning (infos and hints are printed, not counted). CI runs it on the GLBs the tests
// write (.ci/run, section "glTF validator and three.js"):
//
//   npm install --prefix DIR gltf-validator@2.0.0-dev.3.10
//   NODE_PATH=DIR/node_modules node tools/gltf_validate.mjs FILE.glb...
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

// The validator is a CommonJS package found through NODE_PATH (installed outside the checkout).
const require = createRequire(import.meta.url);
const validator = require('gltf-validator');

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: gltf_validate.mjs FILE.glb...');
  process.exit(2);
}
let bad = 0;
for (const f of files) {
  const report = await validator.validateBytes(new Uint8Array(fs.readFileSync(f)), {
    uri: path.basename(f),
    format: 'glb',
    maxIssues: 0,
  });
  const i = report.issues;
  console.log(`${f}: validator ${report.validatorVersion}: ${i.numErrors} errors, ` +
    `${i.numWarnings} warnings, ${i.numInfos} infos, ${i.numHints} hints`);
  for (const m of i.messages) {
    console.log(`  [${m.severity}] ${m.code} ${m.pointer ?? ''}: ${m.message}`);
  }
  if (i.numErrors > 0 || i.numWarnings > 0) bad += 1;
}
if (bad > 0) {
  console.error(`${bad} file(s) with errors or warnings`);
  process.exit(1);
}
