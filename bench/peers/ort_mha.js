// Times an ONNX model with ONNX Runtime (npm onnxruntime-node) and prints one JSON line.
// usage: node bench/peers/ort_mha.js MODEL.onnx SEQ D_MODEL THREADS REPS
const ort = require('onnxruntime-node');

async function main() {
  const [model, seq, dModel, threads, reps] = process.argv.slice(2);
  const n = Number(seq), d = Number(dModel);
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: Number(threads), interOpNumThreads: 1, graphOptimizationLevel: 'all',
  });
  const x = new Float32Array(n * d);
  for (let i = 0; i < x.length; ++i) x[i] = Math.sin(i) ;
  const feeds = { X: new ort.Tensor('float32', x, [1, n, d]) };
  const times = [];
  for (let r = 0; r <= Number(reps); ++r) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (r > 0) times.push(ms);
  }
  times.sort((a, b) => a - b);
  const m = times.length;
  const median = m % 2 ? times[(m - 1) / 2] : (times[m / 2 - 1] + times[m / 2]) / 2;
  console.log(JSON.stringify({ runtime: 'onnxruntime-node ' + require('onnxruntime-node/package.json').version,
    seq: n, d_model: d, threads: Number(threads), median_ms: Number(median.toFixed(3)),
    min_ms: Number(times[0].toFixed(3)) }));
}
main().catch((e) => { console.error('error: ' + e.message); process.exit(1); });
