#!/usr/bin/env node
// Run the Khronos glTF validator (npm package `gltf-validator`) on .glb files and fail on any
// error or warning. Not part of `cargo test` (it needs node and the npm package).
//
//   npm install --prefix /tmp/gltfval gltf-validator@2.0.0-dev.3.10
//   KINEMA_GLB_DIR=/tmp/glb cargo test --test kimodo_motion glb_files_for_the_validator
//   NODE_PATH=/tmp/gltfval/node_modules node reference/validate_glb.js /tmp/glb/*.glb
const fs = require('fs');
const path = require('path');
const validator = require('gltf-validator');

async function main() {
  const files = process.argv.slice(2);
  if (files.length === 0) {
    console.error('usage: validate_glb.js FILE.glb...');
    process.exit(2);
  }
  let bad = 0;
  for (const f of files) {
    const report = await validator.validateBytes(new Uint8Array(fs.readFileSync(f)), {
      uri: path.basename(f),
      format: 'glb',
    });
    const i = report.issues;
    console.log(`${f}: validator ${report.validatorVersion}: ${i.numErrors} errors, ` +
      `${i.numWarnings} warnings, ${i.numInfos} infos, ${i.numHints} hints`);
    for (const m of i.messages) {
      console.log(`  [${m.severity}] ${m.code} ${m.pointer ?? ''}: ${m.message}`);
    }
    if (i.numErrors > 0 || i.numWarnings > 0) bad += 1;
  }
  process.exit(bad > 0 ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
