// Runs a harness built for wasm32 (templates/harness.c.j2 with ./stdio.c): node run.mjs firmware.
// The harness's printf writes through et_write, and its %g through et_write_g, formatted here as C
// formats it; the process exits with main's status.
import { readFileSync } from "node:fs";
import { formatG } from "./edgetrain.js";

const chunks = [];
let memory;
const env = {
  et_write: (pointer, n) => chunks.push(Buffer.from(new Uint8Array(memory.buffer, pointer, n))),
  et_write_g: (value, precision) => chunks.push(Buffer.from(formatG(value, precision))),
};
const { instance } = await WebAssembly.instantiate(readFileSync(process.argv[2]), { env });
memory = instance.exports.memory;
let status = 70;
try {
  status = instance.exports.main();
} finally { // what was printed before a trap too
  process.stdout.write(Buffer.concat(chunks));
}
process.exitCode = status;
