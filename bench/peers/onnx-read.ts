// A hand-rolled ONNX ModelProto reader, just big enough to take the weights and the check data out of the
// exported MultiheadAttention (bench/fixtures/mha-512x8.onnx): float initializers and metadata_props.
// One decision to know: the .onnx is the bench's only copy of the P2 weights, so qkv, tfjs and ONNX Runtime
// all read the same bytes; tensors stored outside the file (data_location EXTERNAL) are refused.
// Field numbers are those of onnx/onnx.proto (ModelProto, GraphProto, TensorProto, StringStringEntryProto).

/** Protobuf wire decoding: the four wire types, fields visited in order. */
class ProtoReader {
  private pos = 0;

  constructor(private readonly bytes: Uint8Array) {}

  get done(): boolean {
    return this.pos >= this.bytes.length;
  }

  /** A varint as a JS number (exact below 2^53, which every value read here is). */
  varint(): number {
    let value = 0;
    let scale = 1;
    for (;;) {
      if (this.pos >= this.bytes.length) throw new RangeError('onnx: truncated varint');
      const byte = this.bytes[this.pos++];
      value += (byte & 0x7f) * scale;
      if (byte < 0x80) return value;
      scale *= 0x80;
    }
  }

  /** The next field's number and wire type. */
  tag(): { field: number; wire: number } {
    const t = this.varint();
    return { field: Math.floor(t / 8), wire: t % 8 };
  }

  /** A length-delimited field's bytes (a view, not a copy). */
  bytesField(): Uint8Array {
    const n = this.varint();
    if (this.pos + n > this.bytes.length) throw new RangeError('onnx: truncated field');
    const out = this.bytes.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  skip(wire: number): void {
    if (wire === 0) this.varint();
    else if (wire === 1) this.pos += 8;
    else if (wire === 2) this.bytesField();
    else if (wire === 5) this.pos += 4;
    else throw new RangeError(`onnx: unsupported wire type ${wire}`);
  }
}

const FLOAT = 1; // TensorProto.DataType.FLOAT
const EXTERNAL = 1; // TensorProto.DataLocation.EXTERNAL

/** A float32 initializer: dims and a fresh little-endian-decoded copy of its values. */
export interface OnnxTensor {
  dims: number[];
  data: Float32Array;
}

export interface OnnxContents {
  /** Float initializers by name (other data types are not read). */
  initializers: Map<string, OnnxTensor>;
  /** metadata_props, key → value. */
  metadata: Map<string, string>;
}

const text = (b: Uint8Array) => new TextDecoder().decode(b);

/** TensorProto → name and float tensor (undefined for a non-float tensor). */
function readTensor(bytes: Uint8Array): { name: string; tensor?: OnnxTensor } {
  const r = new ProtoReader(bytes);
  const dims: number[] = [];
  let name = '';
  let dataType = 0;
  let raw: Uint8Array | undefined;
  const floats: number[] = [];
  while (!r.done) {
    const { field, wire } = r.tag();
    if (field === 1 && wire === 0) dims.push(r.varint());
    else if (field === 1 && wire === 2) {
      const packed = new ProtoReader(r.bytesField());
      while (!packed.done) dims.push(packed.varint());
    } else if (field === 2 && wire === 0) dataType = r.varint();
    else if (field === 4 && wire === 2) {
      const b = r.bytesField();
      const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
      for (let i = 0; i + 4 <= b.byteLength; i += 4) floats.push(view.getFloat32(i, true));
    } else if (field === 8 && wire === 2) name = text(r.bytesField());
    else if (field === 9 && wire === 2) raw = r.bytesField();
    else if (field === 14 && wire === 0) {
      if (r.varint() === EXTERNAL) throw new RangeError('onnx: external tensor data is not supported');
    } else r.skip(wire);
  }
  if (dataType !== FLOAT) return { name };
  const count = dims.reduce((a, d) => a * d, 1);
  let data: Float32Array;
  if (raw) {
    const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    data = new Float32Array(raw.byteLength / 4);
    for (let i = 0; i < data.length; i++) data[i] = view.getFloat32(4 * i, true);
  } else data = Float32Array.from(floats);
  if (data.length !== count) {
    throw new RangeError(`onnx: initializer ${name} has ${data.length} values for dims [${dims}]`);
  }
  return { name, tensor: { dims, data } };
}

/** The float initializers and metadata_props of a serialized ModelProto. */
export function readOnnx(bytes: Uint8Array): OnnxContents {
  const initializers = new Map<string, OnnxTensor>();
  const metadata = new Map<string, string>();
  const model = new ProtoReader(bytes);
  while (!model.done) {
    const { field, wire } = model.tag();
    if (field === 7 && wire === 2) {
      const graph = new ProtoReader(model.bytesField());
      while (!graph.done) {
        const g = graph.tag();
        if (g.field === 5 && g.wire === 2) {
          const { name, tensor } = readTensor(graph.bytesField());
          if (tensor) initializers.set(name, tensor);
        } else graph.skip(g.wire);
      }
    } else if (field === 14 && wire === 2) {
      const entry = new ProtoReader(model.bytesField());
      let key = '';
      let value = '';
      while (!entry.done) {
        const e = entry.tag();
        if (e.field === 1 && e.wire === 2) key = text(entry.bytesField());
        else if (e.field === 2 && e.wire === 2) value = text(entry.bytesField());
        else entry.skip(e.wire);
      }
      metadata.set(key, value);
    } else model.skip(wire);
  }
  return { initializers, metadata };
}
