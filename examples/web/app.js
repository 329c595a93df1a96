// The page's logic: every number comes from the trainer in model.wasm, through edgetrain.js.
import { Trainer, formatG } from "./edgetrain.js";

const $ = (id) => document.getElementById(id);
const load = async (name, View) => new View(await (await fetch(name)).arrayBuffer());
const info = await (await fetch("digits.json")).json();
const [trainX, trainY, testX, testY] = await Promise.all([
  load("train_x.bin", Float32Array), load("train_y.bin", Int32Array),
  load("test_x.bin", Float32Array), load("test_y.bin", Int32Array)]);
const wasm = await (await fetch("model.wasm")).arrayBuffer();
const trainer = await Trainer.load(wasm);
const { batchSize, pixels, classes } = info;
$("size").textContent = `${wasm.byteLength.toLocaleString("en")} bytes`;
trainer.setReference(); // the delta sent to the aggregator is what changed since the last reference

let step = 0; // the batch of step i is i modulo the batches: the order `edgetrain run` takes them in
const losses = [];
const log = (line) => { $("log").textContent += line + "\n"; };
const rows = (array, width, first, count) => array.subarray(first * width, (first + count) * width);
const pause = () => new Promise((resolve) => setTimeout(resolve)); // lets the page redraw

// ---- 1. training ----

$("train").onclick = async () => {
  $("train").disabled = true;
  const end = step + Number($("epochs").value) * info.batches;
  for (; step < end; step++) {
    const batch = step % info.batches;
    const loss = trainer.trainStep(rows(trainX, batchSize * pixels, batch, 1), rows(trainY, batchSize, batch, 1));
    trainer.optimizerStep();
    trainer.lazyResetGrad();
    losses.push(loss);
    log(`step ${step} loss ${formatG(loss, 9)}`);
    if (batch === info.batches - 1) {
      drawCurve();
      showAccuracy();
      await pause();
    }
  }
  log(`params sha256 ${await sha256(trainer.copyParametersToBuffer(true))}`);
  trainer.setReference(); // the trained model is the one the aggregator's clients share
  drawCurve();
  showAccuracy();
  $("train").disabled = false;
};

function predictions(x) {
  const n = x.length / pixels;
  const out = new Int32Array(n);
  for (let first = 0; first < n; first += batchSize) { // any batch from 1 to batchSize
    const count = Math.min(batchSize, n - first);
    const [logits] = trainer.infer(rows(x, pixels, first, count));
    for (let r = 0; r < count; r++) out[first + r] = argmax(logits.subarray(r * classes, (r + 1) * classes));
  }
  return out;
}

function showAccuracy() {
  const predicted = predictions(testX);
  const accuracy = predicted.filter((p, i) => p === testY[i]).length / testY.length;
  $("accuracy").textContent = `Held-out accuracy: ${(100 * accuracy).toFixed(1)} % of ${testY.length} digits ` +
                              `after ${step} steps.`;
  $("accuracy").dataset.value = accuracy;
}

function drawCurve() {
  const canvas = $("curve"), g = canvas.getContext("2d");
  const top = Math.max(...losses), pad = 24;
  g.clearRect(0, 0, canvas.width, canvas.height);
  g.fillStyle = "#555";
  g.fillText(`loss ${top.toFixed(2)}`, 2, 12);
  g.fillText("0", 2, canvas.height - 4);
  g.fillText(`step ${losses.length}`, canvas.width - 60, canvas.height - 4);
  g.strokeStyle = "#1565c0";
  g.beginPath();
  losses.forEach((loss, i) => {
    const x = pad + (i / Math.max(1, losses.length - 1)) * (canvas.width - 2 * pad);
    const y = canvas.height - pad - (loss / top) * (canvas.height - 2 * pad);
    i === 0 ? g.moveTo(x, y) : g.lineTo(x, y);
  });
  g.stroke();
}

// ---- 2. a digit drawn by the user ----

const pad = $("pad"), ink = pad.getContext("2d", { willReadFrequently: true });
ink.lineWidth = 14;
ink.lineCap = ink.lineJoin = "round";
ink.strokeStyle = "#fff";
let drawing = false;
pad.onpointerdown = (e) => { drawing = true; ink.beginPath(); ink.moveTo(e.offsetX, e.offsetY); };
pad.onpointermove = (e) => { if (drawing) { ink.lineTo(e.offsetX, e.offsetY); ink.stroke(); } };
pad.onpointerup = pad.onpointerleave = () => { drawing = false; };
$("clear").onclick = () => ink.clearRect(0, 0, pad.width, pad.height);

/** The drawing as the digits data set has its images: the ink's bounding square, 8x8 cells, each
 *  the share of its area that is inked (the data set's 0..16 counts over 16). */
function drawnDigit() {
  const { data, width, height } = ink.getImageData(0, 0, pad.width, pad.height);
  const inked = (x, y) => data[4 * (y * width + x)] / 255;
  let [x0, y0, x1, y1] = [width, height, -1, -1];
  for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) {
    if (inked(x, y) > 0) [x0, y0, x1, y1] = [Math.min(x0, x), Math.min(y0, y), Math.max(x1, x), Math.max(y1, y)];
  }
  if (x1 < 0) return null;
  const side = Math.max(x1 - x0, y1 - y0) + 1, cx = (x0 + x1) / 2, cy = (y0 + y1) / 2;
  const image = new Float32Array(pixels);
  for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) {
    const col = Math.floor(((x - cx) / side + 0.5) * 8), row = Math.floor(((y - cy) / side + 0.5) * 8);
    if (col >= 0 && col < 8 && row >= 0 && row < 8) image[8 * row + col] += inked(x, y) / (side / 8) ** 2;
  }
  return image.map((v) => Math.min(1, v));
}

$("predict").onclick = () => {
  const image = drawnDigit();
  $("prediction").textContent = image ? `It reads a ${predictions(image)[0]}.` : "Draw a digit first.";
};

/** A few steps on a batch of the drawing and 7 training digits, so the rest is not forgotten. */
$("finetune").onclick = () => {
  const image = drawnDigit(), label = Number($("digit").value);
  if (!image) return void ($("prediction").textContent = "Draw a digit first.");
  const x = new Float32Array(8 * pixels), y = new Int32Array(8);
  x.set(image);
  y[0] = label;
  for (let r = 1; r < 8; r++) {
    const k = Math.floor(Math.random() * trainY.length);
    x.set(rows(trainX, pixels, k, 1), r * pixels);
    y[r] = trainY[k];
  }
  let loss = 0;
  for (let i = 0; i < 10; i++) {
    loss = trainer.trainStep(x, y);
    trainer.optimizerStep();
    trainer.lazyResetGrad();
  }
  $("prediction").textContent = `Fine-tuned on your ${label} (10 steps, last loss ${loss.toFixed(4)}): ` +
                                `it now reads a ${predictions(image)[0]}.`;
};

// ---- 3. checkpoint and federated update ----

$("download").onclick = () => {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([trainer.saveCheckpoint(true)]));
  link.download = "digits.ckpt"; // edgetrain's checkpoint format: api.CheckpointState.load_checkpoint reads it
  link.click();
  URL.revokeObjectURL(link.href);
};

$("send").onclick = async () => {
  const response = await fetch("delta", { method: "POST", body: trainer.getDelta() });
  if (!response.ok) return void ($("aggregator").textContent = `The aggregator said ${response.status}.`);
  const report = await response.json();
  $("aggregator").textContent = `The aggregator received ${report.values.toLocaleString("en")} values ` +
    `(${report.changed.toLocaleString("en")} changed, L2 norm ${report.norm.toPrecision(4)}); ` +
    `${report.deltas} delta(s) so far, their average's norm ${report.average_norm.toPrecision(4)}.`;
  $("aggregator").dataset.values = report.values;
};

function argmax(values) {
  return values.reduce((best, v, i) => (v > values[best] ? i : best), 0);
}

async function sha256(floats) {
  const digest = await crypto.subtle.digest("SHA-256", floats);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

$("train").disabled = false;
