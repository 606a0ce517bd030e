// The ONNX wire format, written by hand: a protobuf encoder (varints, length-delimited fields, fixed32)
// and the handful of onnx.proto messages an exported model needs (ModelProto, GraphProto, NodeProto,
// AttributeProto, TensorProto, ValueInfoProto). Field numbers are onnx/onnx.proto's, which ONNX never
// renumbers (the format promises that old readers read new files).
// One decision to know: no protobuf library. An exporter only writes, and only these six messages, so
// the encoder is ~200 lines with no dependency; protobufjs plus the official onnx.proto would add a
// runtime dependency (and a .proto to ship and parse) to a package whose entries have none. The tests
// read every model back with a decoder of their own and load it in onnxruntime-web, and
// scripts/onnx_check.py runs onnx.checker on it, so a wrong field number cannot pass unnoticed.

/** TensorProto.DataType values used by the exporter. */
export const DataType = { FLOAT: 1, INT64: 7, BOOL: 9 } as const;
export type DataTypeCode = (typeof DataType)[keyof typeof DataType];

const LITTLE_ENDIAN = new Uint8Array(Uint32Array.of(1).buffer)[0] === 1;

/** AttributeProto.AttributeType values used by the exporter. */
const AttrType = { FLOAT: 1, INT: 2, STRING: 3, TENSOR: 4, INTS: 7 } as const;

/** Protobuf wire encoding into a growing byte buffer. */
export class ProtoWriter {
  #buf = new Uint8Array(256);
  #len = 0;

  #reserve(n: number): void {
    if (this.#len + n <= this.#buf.length) return;
    let size = this.#buf.length * 2;
    while (size < this.#len + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.#buf.subarray(0, this.#len));
    this.#buf = next;
  }

  /** A varint: non-negative integers below 2^53, or negative ones as 10-byte two's complement (int64). */
  varint(value: number): void {
    if (!Number.isSafeInteger(value))
      throw new RangeError(`ProtoWriter.varint: ${value} is not a safe integer`);
    this.#reserve(10);
    if (value < 0) {
      let v = BigInt.asUintN(64, BigInt(value));
      while (v >= 0x80n) {
        this.#buf[this.#len++] = Number(v & 0x7fn) | 0x80;
        v >>= 7n;
      }
      this.#buf[this.#len++] = Number(v);
      return;
    }
    let v = value;
    while (v >= 0x80) {
      this.#buf[this.#len++] = (v % 0x80) | 0x80;
      v = Math.floor(v / 0x80);
    }
    this.#buf[this.#len++] = v;
  }

  /** A varint field (wire type 0): int32, int64, enum, bool. */
  int(field: number, value: number): this {
    this.varint(field * 8);
    this.varint(value);
    return this;
  }

  /** A float field (wire type 5, fixed32, little-endian). */
  float(field: number, value: number): this {
    this.varint(field * 8 + 5);
    this.#reserve(4);
    new DataView(this.#buf.buffer).setFloat32(this.#len, value, true);
    this.#len += 4;
    return this;
  }

  /** A length-delimited field (wire type 2) holding raw bytes. */
  bytes(field: number, data: Uint8Array): this {
    this.varint(field * 8 + 2);
    this.varint(data.length);
    this.#reserve(data.length);
    this.#buf.set(data, this.#len);
    this.#len += data.length;
    return this;
  }

  /** A packed repeated varint field (int64s, negatives included). */
  packed(field: number, values: readonly number[]): this {
    const inner = new ProtoWriter();
    for (const v of values) inner.varint(v);
    return this.bytes(field, inner.finish());
  }

  string(field: number, value: string): this {
    return this.bytes(field, new TextEncoder().encode(value));
  }

  /** An embedded message, built by `build` into its own writer. */
  message(field: number, build: (w: ProtoWriter) => void): this {
    const inner = new ProtoWriter();
    build(inner);
    return this.bytes(field, inner.finish());
  }

  finish(): Uint8Array {
    return this.#buf.slice(0, this.#len);
  }
}

/** A tensor value: float32, int64 (as numbers) or bool data, row-major. */
export type TensorData =
  | { type: 'float32'; data: Float32Array }
  | { type: 'int64'; data: readonly number[] }
  | { type: 'bool'; data: readonly boolean[] };

/** An initializer or a Constant's value. */
export interface TensorValue {
  name: string;
  dims: readonly number[];
  value: TensorData;
}

/** An attribute of a node. */
export type Attribute =
  | { name: string; int: number }
  | { name: string; float: number }
  | { name: string; ints: readonly number[] }
  | { name: string; string: string }
  | { name: string; tensor: TensorValue };

/** One NodeProto. */
export interface NodeSpec {
  op: string;
  inputs: readonly string[];
  outputs: readonly string[];
  name: string;
  attributes?: readonly Attribute[];
}

/** A graph input or output: element type and dims (a string dim is symbolic: dim_param). */
export interface ValueSpec {
  name: string;
  type: DataTypeCode;
  dims: readonly (number | string)[];
}

/** Everything a ModelProto holds here. */
export interface ModelSpec {
  irVersion: number;
  opset: number;
  producerVersion: string;
  graphName: string;
  docString?: string;
  nodes: readonly NodeSpec[];
  initializers: readonly TensorValue[];
  inputs: readonly ValueSpec[];
  outputs: readonly ValueSpec[];
  metadata?: Record<string, string>;
}

/** TensorProto (fields: dims 1, data_type 2, name 8, raw_data 9). Data goes in raw_data, little-endian. */
function writeTensor(w: ProtoWriter, t: TensorValue): void {
  if (t.dims.length) w.packed(1, t.dims);
  const { value } = t;
  let raw: Uint8Array;
  if (value.type === 'float32') {
    w.int(2, DataType.FLOAT);
    const { data } = value;
    if (LITTLE_ENDIAN) raw = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    else {
      // Through the bits, not setFloat32, so every value (a NaN's payload included) is kept as it is.
      const bits = new Uint32Array(data.buffer, data.byteOffset, data.length);
      raw = new Uint8Array(data.length * 4);
      const view = new DataView(raw.buffer);
      bits.forEach((b, i) => {
        view.setUint32(i * 4, b, true);
      });
    }
  } else if (value.type === 'int64') {
    w.int(2, DataType.INT64);
    raw = new Uint8Array(value.data.length * 8);
    const view = new DataView(raw.buffer);
    value.data.forEach((x, i) => {
      view.setBigInt64(i * 8, BigInt(x), true);
    });
  } else {
    w.int(2, DataType.BOOL);
    raw = Uint8Array.from(value.data, (b) => (b ? 1 : 0));
  }
  w.string(8, t.name);
  w.bytes(9, raw);
}

/** AttributeProto (name 1, f 2, i 3, s 4, t 5, ints 8, type 20). */
function writeAttribute(w: ProtoWriter, a: Attribute): void {
  w.string(1, a.name);
  if ('int' in a) w.int(20, AttrType.INT).int(3, a.int);
  else if ('float' in a) w.int(20, AttrType.FLOAT).float(2, a.float);
  else if ('ints' in a) {
    w.int(20, AttrType.INTS);
    for (const v of a.ints) w.int(8, v); // unpacked, as onnx's own helper writes them
  } else if ('string' in a) w.int(20, AttrType.STRING).string(4, a.string);
  else w.int(20, AttrType.TENSOR).message(5, (t) => writeTensor(t, a.tensor));
}

/** NodeProto (input 1, output 2, name 3, op_type 4, attribute 5). */
function writeNode(w: ProtoWriter, n: NodeSpec): void {
  for (const input of n.inputs) w.string(1, input);
  for (const output of n.outputs) w.string(2, output);
  w.string(3, n.name);
  w.string(4, n.op);
  for (const a of n.attributes ?? []) w.message(5, (m) => writeAttribute(m, a));
}

/** ValueInfoProto (name 1, type 2 → TypeProto.tensor_type 1 → elem_type 1, shape 2 → dim 1). */
function writeValueInfo(w: ProtoWriter, v: ValueSpec): void {
  w.string(1, v.name);
  w.message(2, (type) =>
    type.message(1, (tensor) => {
      tensor.int(1, v.type);
      tensor.message(2, (shape) => {
        for (const d of v.dims)
          shape.message(1, (dim) => (typeof d === 'number' ? dim.int(1, d) : dim.string(2, d)));
      });
    }),
  );
}

/**
 * ModelProto bytes (ir_version 1, producer_name 2, producer_version 3, doc_string 6, graph 7,
 * opset_import 8, metadata_props 14; GraphProto: node 1, name 2, initializer 5, input 11, output 12).
 */
export function encodeModel(m: ModelSpec): Uint8Array {
  const w = new ProtoWriter();
  w.int(1, m.irVersion);
  w.string(2, 'qkv');
  w.string(3, m.producerVersion);
  if (m.docString) w.string(6, m.docString);
  w.message(7, (g) => {
    for (const n of m.nodes) g.message(1, (x) => writeNode(x, n));
    g.string(2, m.graphName);
    for (const t of m.initializers) g.message(5, (x) => writeTensor(x, t));
    for (const v of m.inputs) g.message(11, (x) => writeValueInfo(x, v));
    for (const v of m.outputs) g.message(12, (x) => writeValueInfo(x, v));
  });
  w.message(8, (o) => o.string(1, '').int(2, m.opset));
  for (const [key, value] of Object.entries(m.metadata ?? {})) {
    w.message(14, (e) => e.string(1, key).string(2, value));
  }
  return w.finish();
}
