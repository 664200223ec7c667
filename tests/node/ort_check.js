// Runs an ONNX model with ONNX Runtime (npm onnxruntime-node) and compares its outputs with
// an attngraph trace: usage: node ort_check.js MODEL.onnx TRACE_DIR [TOLERANCE]
// Every model input is read from TRACE_DIR/<name>.npy, every output compared with
// TRACE_DIR/<name>.npy; prints one line per output with the largest difference, exits 1 when
// one differs by more than TOLERANCE (default 1e-5) or cannot be compared.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

// .npy as attngraph writes it: little-endian float32/float64, C order, version 1-3
function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  const headerLen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = (major === 1 ? 10 : 12);
  const header = buf.toString('latin1', start, start + headerLen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${file}: Fortran order`);
  const dims = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim()).filter((s) => s).map(Number);
  const data = buf.subarray(start + headerLen);
  const copy = new Uint8Array(data).buffer;
  if (descr === '<f4') return { type: 'float32', dims, data: new Float32Array(copy) };
  if (descr === '<f8') return { type: 'float64', dims, data: new Float64Array(copy) };
  throw new Error(`${file}: dtype ${descr}`);
}

async function main() {
  const [model, traceDir, tolText] = process.argv.slice(2);
  const tol = tolText ? Number(tolText) : 1e-5;
  const session = await ort.InferenceSession.create(model, { graphOptimizationLevel: 'disabled', intraOpNumThreads: 1 });
  const feeds = {};
  for (const name of session.inputNames) {
    const a = readNpy(path.join(traceDir, `${name}.npy`));
    feeds[name] = new ort.Tensor(a.type, a.data, a.dims);
  }
  const results = await session.run(feeds);
  let ok = true;
  for (const name of session.outputNames) {
    const want = readNpy(path.join(traceDir, `${name}.npy`));
    const got = results[name];
    let worst = 0;
    if (got.dims.join('x') !== want.dims.join('x')) {
      console.log(`${name}: ONNX Runtime shape ${got.dims.join('x')}, attngraph ${want.dims.join('x')}`);
      ok = false;
      continue;
    }
    for (let i = 0; i < want.data.length; i++) {
      const d = Math.abs(got.data[i] - want.data[i]);
      if (!(d <= worst)) worst = Number.isNaN(d) ? Infinity : d;
    }
    console.log(`${name}: max |ONNX Runtime - attngraph| = ${worst.toExponential(3)}`);
    if (!(worst <= tol)) ok = false;
  }
  process.exit(ok ? 0 : 1);
}

main().catch((e) => {
  console.log(`error: ${e.message}`);
  process.exit(1);
});
