// Drives a trainer through edgetrain.js under Node.js for tests/target/test_wasm.py:
//   node wasm_driver.mjs job.json
// The job names edgetrain.js, the module, the data (x as little-endian float32, y as int32 or
// float32, `batches` batches used in turn), the steps and a learning rate. Training prints what the
// C harness prints on every target: `step <i> loss <%.9g>` lines, then `params sha256 <hex>`.
// With `api`, a last line `api <json>` holds what the rest of the API returned, for the test to
// compare with the host trainer's.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const job = JSON.parse(readFileSync(process.argv[2]));
const { Trainer, TrainerError, formatG } = await import(pathToFileURL(job.edgetrain).href);
const trainer = await Trainer.load(readFileSync(job.module));
const file = (path) => { // a Buffer may be a view of a larger pool
  const bytes = readFileSync(path);
  return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
};
const x = new Float32Array(file(job.x));
const y = job.floatLabels ? new Float32Array(file(job.y)) : new Int32Array(file(job.y));
const batch = (array, i) => {
  const size = array.length / job.batches;
  return array.subarray((i % job.batches) * size, (i % job.batches + 1) * size);
};
const hex = (data) => Buffer.from(data.buffer ?? data, data.byteOffset ?? 0, data.byteLength).toString("hex");
const lines = [];

if (job.lr !== null) trainer.learningRate = job.lr;
if (job.api) trainer.setReference();
for (let i = 0; i < job.steps; i++) {
  const loss = trainer.trainStep(batch(x, i), batch(y, i));
  trainer.optimizerStep();
  trainer.lazyResetGrad();
  lines.push(`step ${i} loss ${formatG(loss, 9)}`);
}
const params = trainer.copyParametersToBuffer(true);
lines.push(`params sha256 ${createHash("sha256").update(new Uint8Array(params.buffer)).digest("hex")}`);
if (job.api) lines.push(`api ${JSON.stringify(exerciseApi())}`);
process.stdout.write(lines.join("\n") + "\n");

/** Every other call of the API once, after training; what it returned, bytes as hex. */
function exerciseApi() {
  const out = { steps: trainer.optimizerSteps, learningRate: trainer.learningRate };
  out.eval = formatG(trainer.evalStep(batch(x, 1), batch(y, 1)), 9);
  out.infer = trainer.infer(batch(x, 0)).map(hex);
  out.inferOne = hex(trainer.infer(batch(x, 0).subarray(0, x.length / job.batches / trainer.model.maxBatch))[0]);
  out.export = hex(trainer.exportParameters());
  const checkpoint = trainer.saveCheckpoint(true);
  out.checkpoint = hex(checkpoint);
  out.errors = errorsLeaveTheTrainerAsItWas();
  out.delta = hex(trainer.getDelta());
  trainer.applyUpdate(trainer.getDelta(), 0.5);
  out.updated = hex(trainer.copyParametersToBuffer(true));
  out.all = hex(trainer.copyParametersToBuffer(false));
  trainer.loadCheckpoint(checkpoint);
  out.restored = hex(trainer.saveCheckpoint(true)) === out.checkpoint;
  const halved = trainer.copyParametersToBuffer(true).map((v) => v / 2);
  trainer.copyBufferToParameters(halved, true);
  out.copiedBack = hex(trainer.copyParametersToBuffer(true)) === hex(halved);
  return out;
}

/** [call, error name, status] of calls that must fail, and whether the trainer's checkpoint after
 *  them is the one before. */
function errorsLeaveTheTrainerAsItWas() {
  const before = hex(trainer.saveCheckpoint(true));
  const attempts = {
    corrupt: () => trainer.loadCheckpoint(new Uint8Array(64)),
    badLabel: () => trainer.trainStep(batch(x, 0), batch(y, 0).map(() => 1000)),
    shortInput: () => trainer.trainStep(batch(x, 0).subarray(1), batch(y, 0)),
    tooSmall: () => trainer.call("save_checkpoint", trainer.scratchStart, 8, 1, trainer.scratchStart + 8),
  };
  const errors = Object.entries(attempts).map(([name, attempt]) => {
    try {
      attempt();
      return [name, "none"];
    } catch (error) {
      return [name, error.name, error instanceof TrainerError ? error.status : null];
    }
  });
  return { errors, unchanged: hex(trainer.saveCheckpoint(true)) === before };
}
