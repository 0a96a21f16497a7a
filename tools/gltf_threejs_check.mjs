#!/usr/bin/env node
// Opens a skinned .glb in three.js inside a real headless Chromium (puppeteer-core): it must
// load with GLTFLoader, hold a SkinnedMesh and an animation, the bone matrices must change
// between two times of the animation, and the rendered frame must show the body (enough pixels
// differ from the background). Writes a PNG screenshot. Exits non-zero on any failure, on any
// page error and on any console error or warning.
//
//   npm install --prefix DIR three@0.170.0 puppeteer-core@23   (PUPPETEER_SKIP_DOWNLOAD=1)
//   NODE_PATH=DIR/node_modules node tools/gltf_threejs_check.mjs FILE.glb OUT.png [CHROMIUM]
//
// CHROMIUM defaults to $CHROMIUM, else /usr/bin/chromium (Debian's `chromium` package).
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const puppeteer = require('puppeteer-core');

const [glbPath, pngPath, chromiumArg] = process.argv.slice(2);
if (!glbPath || !pngPath) {
  console.error('usage: gltf_threejs_check.mjs FILE.glb OUT.png [CHROMIUM]');
  process.exit(2);
}
const chromium = chromiumArg || process.env.CHROMIUM || '/usr/bin/chromium';
// three's main entry is build/three.cjs; its package root is one folder up.
const threeDir = path.resolve(path.dirname(require.resolve('three')), '..');

const page = `<!doctype html><html><body style="margin:0;background:#000">
<script type="importmap">{"imports":{"three":"/three/build/three.module.js","three/addons/":"/three/examples/jsm/"}}</script>
<script type="module">
import * as THREE from 'three';
import { GLTFLoader } from 'three/addons/loaders/GLTFLoader.js';
const out = {};
try {
  const gltf = await new GLTFLoader().loadAsync('/model.glb');
  let mesh = null;
  gltf.scene.traverse((o) => { if (o.isSkinnedMesh && !mesh) mesh = o; });
  out.skinnedMesh = !!mesh;
  out.bones = mesh ? mesh.skeleton.bones.length : 0;
  out.vertices = mesh ? mesh.geometry.attributes.position.count : 0;
  out.clips = gltf.animations.length;
  const clip = gltf.animations[0];
  out.duration = clip ? clip.duration : 0;
  const mixer = new THREE.AnimationMixer(gltf.scene);
  mixer.clipAction(clip).play();
  const at = (t) => {
    mixer.setTime(t);
    gltf.scene.updateMatrixWorld(true);
    mesh.skeleton.update();
    return Float32Array.from(mesh.skeleton.boneMatrices);
  };
  const a = at(0.0);
  const b = at(clip.duration * 0.5);
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
  out.boneMatrixChange = d;
  // Frame the posed body and render it.
  const scene = new THREE.Scene();
  scene.background = new THREE.Color(0x000000);
  scene.add(gltf.scene);
  scene.add(new THREE.HemisphereLight(0xffffff, 0x444444, 3.0));
  const sun = new THREE.DirectionalLight(0xffffff, 2.0);
  sun.position.set(2, 4, 3);
  scene.add(sun);
  const box = new THREE.Box3();
  const v = new THREE.Vector3();
  for (let i = 0; i < mesh.geometry.attributes.position.count; i += 7) {
    v.fromBufferAttribute(mesh.geometry.attributes.position, i);
    mesh.applyBoneTransform(i, v);
    box.expandByPoint(v.applyMatrix4(mesh.matrixWorld));
  }
  const c = box.getCenter(new THREE.Vector3());
  const size = box.getSize(new THREE.Vector3()).length();
  out.bodyHeight = box.max.y - box.min.y;
  const camera = new THREE.PerspectiveCamera(35, 1, 0.01, 100);
  camera.position.set(c.x + size * 0.8, c.y + size * 0.3, c.z + size * 1.6);
  camera.lookAt(c);
  const renderer = new THREE.WebGLRenderer({ antialias: true, preserveDrawingBuffer: true });
  renderer.setSize(512, 512);
  document.body.appendChild(renderer.domElement);
  renderer.render(scene, camera);
  const gl = renderer.getContext();
  const px = new Uint8Array(512 * 512 * 4);
  gl.readPixels(0, 0, 512, 512, gl.RGBA, gl.UNSIGNED_BYTE, px);
  let lit = 0;
  for (let i = 0; i < px.length; i += 4) if (px[i] + px[i + 1] + px[i + 2] > 30) lit++;
  out.bodyPixelFraction = lit / (512 * 512);
} catch (e) {
  out.error = String(e && e.stack || e);
}
window.__result = out;
</script></body></html>`;

const glb = fs.readFileSync(glbPath);
const server = http.createServer((req, res) => {
  const url = decodeURIComponent(req.url.split('?')[0]);
  if (url === '/') {
    res.writeHead(200, { 'content-type': 'text/html' });
    return res.end(page);
  }
  if (url === '/favicon.ico') {
    res.writeHead(204);
    return res.end();
  }
  if (url === '/model.glb') {
    res.writeHead(200, { 'content-type': 'model/gltf-binary' });
    return res.end(glb);
  }
  if (url.startsWith('/three/')) {
    const p = path.join(threeDir, path.normalize(url.slice('/three/'.length)));
    if (p.startsWith(threeDir) && fs.existsSync(p) && fs.statSync(p).isFile()) {
      res.writeHead(200, { 'content-type': 'text/javascript' });
      return res.end(fs.readFileSync(p));
    }
  }
  res.writeHead(404);
  res.end();
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const port = server.address().port;

const problems = [];
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--use-angle=swiftshader', '--enable-unsafe-swiftshader', '--ignore-gpu-blocklist'],
});
let result;
try {
  const tab = await browser.newPage();
  tab.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  tab.on('console', (m) => {
    // SwiftShader's performance note on the one readPixels below is the driver's, not three's.
    const driverNote = /GL Driver Message \(OpenGL, Performance/.test(m.text());
    if ((m.type() === 'error' || m.type() === 'warn') && !driverNote) {
      problems.push(`console ${m.type()}: ${m.text()}`);
    }
  });
  await tab.setViewport({ width: 512, height: 512 });
  await tab.goto(`http://127.0.0.1:${port}/`);
  await tab.waitForFunction('window.__result !== undefined', { timeout: 120000 });
  result = await tab.evaluate('window.__result');
  await tab.screenshot({ path: pngPath });
} finally {
  await browser.close();
  server.close();
}

console.log(JSON.stringify(result, null, 1));
if (result.error) problems.push(result.error);
if (!result.skinnedMesh) problems.push('no SkinnedMesh in the scene');
if (!(result.clips >= 1 && result.duration > 0)) problems.push('no animation');
// A moving body changes bone matrices by centimetres to metres; 1e-3 is far above f32 noise.
if (!(result.boneMatrixChange > 1e-3)) problems.push(`bone matrices did not change (${result.boneMatrixChange})`);
// A 1.6-1.9 m body framed in a 512x512 view covers several percent of it.
if (!(result.bodyPixelFraction > 0.02)) problems.push(`the render shows no body (${result.bodyPixelFraction})`);
if (!(result.bodyHeight > 1.0 && result.bodyHeight < 2.5)) problems.push(`body height ${result.bodyHeight} m`);
if (problems.length > 0) {
  for (const p of problems) console.error(p);
  process.exit(1);
}
console.log(`${glbPath}: three.js loads it, animates the skeleton, and ${pngPath} shows the body`);
