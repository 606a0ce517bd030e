// The shared memory of data-parallel training (parallel.ts on the calling thread, threads/train-worker.ts in
// each worker): where every number lives, and the few helpers both sides use. It imports nothing, so a
// worker that fails to load the model's modules can still report why through it.
//
// Memory, all SharedArrayBuffers made by the calling thread when it starts the workers:
// - control (Int32): STEP, the step counter the calling thread bumps (and Atomics.notify's) to start a
//   step; COMMAND (step, Muon's orthogonalisation, or stop); per worker w its DONE (the last STEP it finished, or the STEP it started
//   at once it is ready), STATUS (0, or FAILED with the message's UTF-8 bytes in its error area) and
//   the message's length.
// - params (Float32): every parameter in the model's order, written by the calling thread before each
//   step and copied by each worker into its replica.
// - one grads buffer (Float32, same layout) and one slot per worker: the slot holds its shard (ids,
//   targets, mask), the weight of its loss, its dropout generator's state in and out, and its loss out.
// One decision to know: nothing is posted per step; a worker blocks in Atomics.wait on STEP between steps,
// and the calling thread blocks in Atomics.wait on each worker's DONE (with a timeout) until all are done.

/** Int32 slots of the control buffer. */
export const CONTROL = {
  /** Bumped by the calling thread to start a step. */
  step: 0,
  /** What the bump asks: COMMAND_STEP or COMMAND_STOP. */
  command: 1,
} as const;

export const COMMAND_STEP = 0;
export const COMMAND_STOP = 1;
/**
 * Muon's Newton–Schulz iterations on the blocks the calling thread wrote into the worker's grads buffer
 * (free between steps), listed in its slot's ids area: steps, count, then (offset, rows, cols) per block;
 * the worker overwrites each block with its result.
 */
export const COMMAND_ORTHOGONALISE = 2;
export const STATUS_OK = 0;
export const STATUS_FAILED = 1;

/** Int32 slots per worker in the control buffer, after 4 global ones. */
const PER_WORKER = 4;
const DONE = 0;
const STATUS = 1;
const ERROR_LENGTH = 2;
/** UTF-8 bytes of a worker's error message (longer ones are cut). */
const ERROR_BYTES = 2048;

/** Index of worker `w`'s DONE slot (workers are numbered 1 … n − 1, like their shards). */
export function doneIndex(w: number): number {
  return 4 + PER_WORKER * w + DONE;
}

export function statusIndex(w: number): number {
  return 4 + PER_WORKER * w + STATUS;
}

/** Bytes of a control buffer for `threads` threads (the calling thread is 0, with no slots used). */
export function controlBytes(threads: number): number {
  return 4 * (4 + PER_WORKER * threads) + ERROR_BYTES * threads;
}

function errorArea(control: SharedArrayBuffer, threads: number, w: number): Uint8Array {
  return new Uint8Array(control, 4 * (4 + PER_WORKER * threads) + ERROR_BYTES * w, ERROR_BYTES);
}

/**
 * Worker `w` failed: its message into the control buffer, STATUS failed, DONE = the current STEP, and a
 * notify, so the calling thread wakes whatever it waits for. The first failure's message is kept.
 */
export function reportFailure(init: TrainWorkerInit, error: unknown): void {
  const ctl = new Int32Array(init.control);
  const w = init.index;
  if (Atomics.compareExchange(ctl, statusIndex(w), STATUS_OK, STATUS_FAILED) !== STATUS_OK) return;
  const text = error instanceof Error ? error.message : String(error);
  const area = errorArea(init.control, init.threads, w);
  // Encoded into a plain buffer (TextEncoder.encodeInto refuses shared memory in browsers), then copied.
  const bytes = new TextEncoder().encode(text).subarray(0, area.length);
  area.set(bytes);
  Atomics.store(ctl, 4 + PER_WORKER * w + ERROR_LENGTH, bytes.length);
  Atomics.store(ctl, doneIndex(w), Atomics.load(ctl, CONTROL.step));
  Atomics.notify(ctl, doneIndex(w));
}

/** The message a failed worker wrote ('' if none). */
export function failureMessage(control: SharedArrayBuffer, threads: number, w: number): string {
  const ctl = new Int32Array(control);
  const n = Atomics.load(ctl, 4 + PER_WORKER * w + ERROR_LENGTH);
  return new TextDecoder().decode(errorArea(control, threads, w).slice(0, n));
}

/** Float64 slots at the start of a worker's slot. */
export const SLOT_F64 = {
  /** This shard's share of the batch's scored targets (the seed of its backward). */
  weight: 0,
  /** Its loss (mean over its own scored targets), written by the worker. */
  loss: 1,
  /** Its dropout generator's four state words, in and out. */
  generator: 2,
  /** 1 when the generator holds a spare normal deviate (in SLOT_F64.spare). */
  hasSpare: 6,
  spare: 7,
} as const;

/** Int32 slots after the Float64 ones. */
export const SLOT_I32 = {
  /** Rows of the batch in this shard (0: nothing to do this step). */
  rows: 0,
  /** Sequence length L. */
  length: 1,
  /** MASK_NONE, MASK_FLOAT32 or MASK_FLOAT16. */
  mask: 2,
  maskRank: 3,
  /** The mask's shape, up to MAX_MASK_RANK entries. */
  maskShape: 4,
} as const;

export const MASK_NONE = 0;
export const MASK_FLOAT32 = 1;
export const MASK_FLOAT16 = 2;
export const MAX_MASK_RANK = 8;

const SLOT_F64_BYTES = 8 * 8;
const SLOT_I32_BYTES = 4 * 16;

/** Where a slot's parts are, for `tokens` ids and targets and a mask of `maskElements` 32-bit elements. */
export function slotLayout(tokens: number, maskElements: number) {
  const ids = SLOT_F64_BYTES + SLOT_I32_BYTES;
  const targets = ids + 4 * tokens;
  const mask = targets + 4 * tokens;
  return { ids, targets, mask, byteLength: mask + 4 * maskElements };
}

/** Views on a worker's slot. */
export function slotViews(slot: SharedArrayBuffer, tokens: number, maskElements: number) {
  const at = slotLayout(tokens, maskElements);
  return {
    f64: new Float64Array(slot, 0, SLOT_F64_BYTES / 8),
    i32: new Int32Array(slot, SLOT_F64_BYTES, SLOT_I32_BYTES / 4),
    ids: new Int32Array(slot, at.ids, tokens),
    targets: new Int32Array(slot, at.targets, tokens),
    mask32: new Float32Array(slot, at.mask, maskElements),
    mask16: new Uint16Array(slot, at.mask, 2 * maskElements),
  };
}

/** What a worker is started with (structured-cloned: Node's workerData, or a first message). */
export interface TrainWorkerInit {
  /** This worker's number w (1 … threads − 1): its shard, its DONE and STATUS. */
  index: number;
  threads: number;
  control: SharedArrayBuffer;
  params: SharedArrayBuffer;
  /** This worker's gradients, laid out like params. */
  grads: SharedArrayBuffer;
  slot: SharedArrayBuffer;
  /** Capacity of the slot: ids/targets elements and 32-bit mask elements. */
  tokens: number;
  maskElements: number;
  /** The model's config, every field (also those a spread leaves out). */
  config: Record<string, unknown>;
  /** The parameters' names and sizes in order: the replica must have exactly these. */
  paramNames: string[];
  paramSizes: number[];
}
