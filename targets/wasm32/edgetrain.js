// edgetrain's trainers in JavaScript: a trainer built for wasm32 (edgetrain.wasm.build_module) loaded
// as a WebAssembly module, its C API behind typed arrays. Browsers and Node.js alike.
//
//   const trainer = await Trainer.load(await fetch("model.wasm"));
//   const loss = trainer.trainStep(x, labels);   // Float32Array of n * 64 pixels, Int32Array of n labels
//   trainer.optimizerStep(); trainer.lazyResetGrad();
//
// The trainer's memory is the module's: its arena is static, and nothing here allocates inside it.
// Arrays passed in are copied to a scratch region past the end of the C's data (__heap_base), which
// no C code uses, and results are copied out. A status other than ET_OK becomes a TrainerError.

export const STATUS = ["ET_OK", "ET_BAD_ARGUMENT", "ET_NON_FINITE", "ET_CORRUPT_CHECKPOINT", "ET_WRONG_MODEL",
                       "ET_BUFFER_TOO_SMALL", "ET_NO_CHECKPOINT", "ET_FLASH_ERROR"];

export class TrainerError extends Error {
  constructor(call, status) {
    super(`${call} returned ${STATUS[status] ?? `status ${status}`}`);
    this.name = "TrainerError";
    this.call = call;
    this.status = STATUS[status] ?? status;
  }
}

const PAGE = 65536;

export class Trainer {
  /** A trainer from its wasm module: a Response (fetch), an ArrayBuffer or typed array of its bytes,
   *  or a compiled WebAssembly.Module. */
  static async load(source) {
    let module = source;
    if (typeof Response !== "undefined" && source instanceof Response) {
      module = await WebAssembly.compile(await source.arrayBuffer()); // whatever MIME type the server gave
    } else if (!(source instanceof WebAssembly.Module)) {
      module = await WebAssembly.compile(source);
    }
    return new Trainer((await WebAssembly.instantiate(module, {})).exports);
  }

  constructor(exports) {
    if (exports.edgetrain_model === undefined) throw new Error("not an edgetrain trainer (no edgetrain_model)");
    this.memory = exports.memory;
    // What model.h says to C: prefix, maxBatch, and the inputs', labels' and outputs' types and sizes.
    const text = new Uint8Array(this.memory.buffer, exports.edgetrain_model.value);
    this.model = JSON.parse(new TextDecoder().decode(text.subarray(0, text.indexOf(0))));
    this.scratchStart = exports.__heap_base.value;
    this.fn = {};
    for (const [name, f] of Object.entries(exports)) {
      if (name.startsWith(this.model.prefix + "_")) this.fn[name.slice(this.model.prefix.length + 1)] = f;
    }
    this.call("init");
  }

  // ---- training ----

  /** Forward and backward on one batch: gradients accumulate until lazyResetGrad. Returns the loss. */
  trainStep(...data) {
    return this.step("train_step", data);
  }

  /** The loss of one batch, without gradients. */
  evalStep(...data) {
    return this.step("eval_step", data);
  }

  /** The model's outputs for one batch of inputs, one typed array per output. */
  infer(...inputs) {
    const scratch = this.scratch();
    const [n, pointers] = this.place(scratch, inputs, this.model.inputs);
    const outputs = this.model.outputs.map((o) => scratch.reserve(o.type, o.batched ? n * o.size : o.size));
    this.call("infer", n, ...pointers, ...outputs.map((o) => o.pointer));
    return outputs.map((o) => o.read());
  }

  optimizerStep() { this.call("optimizer_step"); }

  lazyResetGrad() { this.call("lazy_reset_grad"); }

  get learningRate() {
    const scratch = this.scratch();
    const lr = scratch.reserve("float32", 1);
    this.call("get_learning_rate", lr.pointer);
    return lr.read()[0];
  }

  set learningRate(lr) { this.call("set_learning_rate", lr); }

  /** How many optimizer steps the trainer has taken (restored by loadCheckpoint). */
  get optimizerSteps() {
    const steps = this.scratch().reserve("uint32", 1);
    this.call("optimizer_steps", steps.pointer);
    return steps.read()[0];
  }

  // ---- parameters and checkpoints ----

  parametersSize(trainableOnly = true) {
    const count = this.scratch().reserve("uint32", 1);
    this.call("parameters_size", trainableOnly ? 1 : 0, count.pointer);
    return count.read()[0];
  }

  /** The parameters as one Float32Array, in the checkpoint's order (copy_parameters_to_buffer). */
  copyParametersToBuffer(trainableOnly = true) {
    const count = this.parametersSize(trainableOnly);
    const buffer = this.scratch().reserve("float32", count);
    this.call("copy_parameters_to_buffer", buffer.pointer, count, trainableOnly ? 1 : 0);
    return buffer.read();
  }

  copyBufferToParameters(values, trainableOnly = true) {
    const buffer = this.scratch().write("float32", values);
    this.call("copy_buffer_to_parameters", buffer.pointer, values.length, trainableOnly ? 1 : 0);
  }

  /** A checkpoint in edgetrain's format (the same bytes as on every target), as an ArrayBuffer. */
  saveCheckpoint(includeOptimizerState = true) {
    return this.sized("checkpoint_size", "save_checkpoint", [includeOptimizerState ? 1 : 0]);
  }

  loadCheckpoint(bytes) {
    const buffer = this.scratch().write("uint8", bytesOf(bytes));
    this.call("load_checkpoint", buffer.pointer, buffer.length);
  }

  /** The trained parameters and buffers the host merges into the inference model (export_parameters). */
  exportParameters() {
    return this.sized("export_size", "export_parameters", []);
  }

  // ---- federated learning (trainers compiled with federated=True) ----

  /** Remembers the trainable parameters as the reference that getDelta subtracts. */
  setReference() { this.call("set_reference"); }

  /** The trainable parameters minus the reference, as a Float32Array. */
  getDelta() {
    const count = this.parametersSize(true);
    const delta = this.scratch().reserve("float32", count);
    this.call("get_delta", delta.pointer, count);
    return delta.read();
  }

  /** Parameters and reference become reference + scale * delta (an aggregated update). */
  applyUpdate(delta, scale = 1) {
    const buffer = this.scratch().write("float32", delta);
    this.call("apply_update", buffer.pointer, delta.length, scale);
  }

  // ---- plumbing ----

  call(name, ...args) {
    const f = this.fn[name];
    if (f === undefined) {
      throw new Error(`${this.model.prefix}_${name}: not in this trainer (the federated functions need ` +
                      "artifacts generated with federated=True)");
    }
    const status = f(...args);
    if (status !== 0) throw new TrainerError(`${this.model.prefix}_${name}`, status);
  }

  step(name, data) {
    const scratch = this.scratch();
    const specs = this.model.labels ? [...this.model.inputs, this.model.labels] : this.model.inputs;
    const [n, pointers] = this.place(scratch, data, specs);
    const loss = scratch.reserve("float32", 1);
    this.call(name, n, ...pointers, loss.pointer);
    return loss.read()[0];
  }

  /** Copies a batch's arrays into scratch memory: [the batch, their pointers]. The batch is the
   *  arrays' length over their per-sample size, which every batched array must agree on. */
  place(scratch, arrays, specs) {
    if (arrays.length !== specs.length) {
      throw new Error(`expected ${specs.length} arrays (${specs.map((s) => s.name).join(", ")}), got ${arrays.length}`);
    }
    let n = null;
    arrays.forEach((a, i) => {
      const s = specs[i];
      if (!s.batched) {
        if (a.length !== s.size) throw new Error(`${s.name}: expected ${s.size} values, got ${a.length}`);
        return;
      }
      const rows = a.length / s.size;
      if (!Number.isInteger(rows) || (n !== null && rows !== n)) {
        throw new Error(`${s.name}: ${a.length} values do not make ${n ?? "whole"} samples of ${s.size}`);
      }
      n = rows;
    });
    n ??= this.model.maxBatch;
    if (n < 1 || n > this.model.maxBatch) {
      throw new Error(`a batch of ${n}: this trainer takes 1 to ${this.model.maxBatch} samples`);
    }
    return [n, arrays.map((a, i) => scratch.write(specs[i].type, a).pointer)];
  }

  sized(sizeName, writeName, args) {
    const scratch = this.scratch();
    const size = scratch.reserve("uint32", 1);
    this.call(sizeName, ...args, size.pointer);
    const capacity = size.read()[0];
    const buffer = scratch.reserve("uint8", capacity);
    this.call(writeName, buffer.pointer, capacity, ...args, size.pointer);
    return buffer.read().slice(0, size.read()[0]).buffer;
  }

  /** Scratch memory for one call, from __heap_base up: the memory grows when a call needs more. */
  scratch() {
    return new Scratch(this.memory, this.scratchStart);
  }
}

const TYPES = { float32: Float32Array, int32: Int32Array, uint32: Uint32Array, uint8: Uint8Array };

class Scratch {
  constructor(memory, start) {
    this.memory = memory;
    this.next = start;
  }

  reserve(type, length) {
    const View = TYPES[type];
    const pointer = Math.ceil(this.next / 8) * 8;
    this.next = pointer + length * View.BYTES_PER_ELEMENT;
    if (this.next > this.memory.buffer.byteLength) {
      this.memory.grow(Math.ceil((this.next - this.memory.buffer.byteLength) / PAGE));
    }
    // The view is made when read: growing the memory detaches the views made before.
    return { pointer, length, read: () => new View(this.memory.buffer, pointer, length).slice() };
  }

  write(type, values) {
    const slot = this.reserve(type, values.length);
    new TYPES[type](this.memory.buffer, slot.pointer, values.length).set(values);
    return slot;
  }
}

function bytesOf(data) {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw new TypeError("a checkpoint is an ArrayBuffer or a typed array");
}

// ---- C's printf %.<precision>g, digit for digit ----

/** `value` as C's printf("%.<precision>g") writes it (glibc: ties to even, "-nan" for a NaN with its
 *  sign bit set), so that lines printed here match those the C harness prints on other targets.
 *  Exact: the double's binary value is expanded to all its decimal digits with BigInt, then rounded. */
export function formatG(value, precision = 6) {
  const bits = new DataView(new ArrayBuffer(8));
  bits.setFloat64(0, value);
  const sign = bits.getUint8(0) >> 7 ? "-" : "";
  if (Number.isNaN(value)) return sign + "nan";
  if (!Number.isFinite(value)) return sign + "inf";
  if (value === 0) return sign + "0";
  const p = precision === 0 ? 1 : precision;
  let [digits, exponent] = roundedDigits(decimalDigits(bits), p);
  // Style e unless -4 <= exponent < p, then trailing zeros go (no # flag).
  if (exponent < -4 || exponent >= p) {
    const mantissa = stripZeros(digits[0] + "." + digits.slice(1));
    return `${sign}${mantissa}e${exponent < 0 ? "-" : "+"}${String(Math.abs(exponent)).padStart(2, "0")}`;
  }
  const fixed = exponent >= 0 ? digits.slice(0, exponent + 1) + "." + digits.slice(exponent + 1)
                              : "0." + "0".repeat(-exponent - 1) + digits;
  return sign + stripZeros(fixed);
}

/** {digits, point}: the magnitude of the finite, non-zero double in `bits` is exactly
 *  digits * 10^-point (digits a decimal string without leading zeros). */
function decimalDigits(bits) {
  const high = bits.getUint32(0), low = bits.getUint32(4);
  const biased = (high >>> 20) & 0x7ff;
  let mantissa = (BigInt(high & 0xfffff) << 32n) | BigInt(low);
  if (biased !== 0) mantissa |= 1n << 52n;
  const power = (biased === 0 ? 1 : biased) - 1075; // magnitude = mantissa * 2^power
  if (power >= 0) return { digits: (mantissa << BigInt(power)).toString(), point: 0 };
  // mantissa / 2^k = mantissa * 5^k / 10^k
  return { digits: (mantissa * 5n ** BigInt(-power)).toString(), point: -power };
}

/** [p significant digits rounded to nearest, ties to even; the decimal exponent of the first]. */
function roundedDigits({ digits, point }, p) {
  let exponent = digits.length - 1 - point;
  if (digits.length <= p) return [digits.padEnd(p, "0"), exponent];
  let head = BigInt(digits.slice(0, p));
  const rest = digits.slice(p);
  const tie = rest[0] === "5" && /^0*$/.test(rest.slice(1));
  if (rest[0] > "5" || (rest[0] === "5" && !tie) || (tie && head % 2n === 1n)) head += 1n;
  let rounded = head.toString();
  if (rounded.length > p) { // 99..9 rounded up to 100..0
    rounded = rounded.slice(0, p);
    exponent += 1;
  }
  return [rounded, exponent];
}

function stripZeros(text) {
  return text.replace(/0+$/, "").replace(/\.$/, "");
}
