// A hand-rolled ONNX ModelProto encoder, just big enough for the attention graph the ONNX Runtime peers run.
// One decision to know: the graph uses plain opset-17 ops (Transpose, MatMul, Mul, Add, Softmax, MatMul)
// with symbolic dims, not the fused Attention ops, which overflow at n = 4096 in onnxruntime-web 1.30.
// Field numbers are those of onnx/onnx.proto (ModelProto, GraphProto, NodeProto, TensorProto, ...).

/** Protobuf wire encoding: varints and length-delimited fields, nothing else is needed here. */
class ProtoWriter {
  private readonly bytes: number[] = [];

  private varint(value: number): void {
    let v = value;
    while (v >= 0x80) {
      this.bytes.push((v % 0x80) | 0x80);
      v = Math.floor(v / 0x80);
    }
    this.bytes.push(v);
  }

  /** A varint field (wire type 0): int32, int64, enum. Only non-negative values occur here. */
  int(field: number, value: number): this {
    this.varint(field * 8);
    this.varint(value);
    return this;
  }

  /** A length-delimited field (wire type 2) holding raw bytes. */
  raw(field: number, data: Uint8Array): this {
    this.varint(field * 8 + 2);
    this.varint(data.length);
    for (const byte of data) this.bytes.push(byte);
    return this;
  }

  /** A packed repeated varint field (wire type 2): non-negative values only. */
  packed(field: number, values: number[]): this {
    const inner = new ProtoWriter();
    for (const v of values) inner.varint(v);
    return this.raw(field, inner.finish());
  }

  string(field: number, value: string): this {
    return this.raw(field, new TextEncoder().encode(value));
  }

  message(field: number, build: (w: ProtoWriter) => void): this {
    const inner = new ProtoWriter();
    build(inner);
    return this.raw(field, inner.finish());
  }

  finish(): Uint8Array {
    return Uint8Array.from(this.bytes);
  }
}

const FLOAT = 1; // TensorProto.DataType.FLOAT
const ATTR_INT = 2; // AttributeProto.AttributeType.INT
const ATTR_INTS = 7; // AttributeProto.AttributeType.INTS

type Attribute = { name: string; int: number } | { name: string; ints: number[] };

interface Node {
  op: string;
  inputs: string[];
  output: string;
  attributes?: Attribute[];
}

/** ValueInfoProto for a float tensor; a string dim is symbolic (dim_param), a number fixed (dim_value). */
function valueInfo(w: ProtoWriter, name: string, dims: (string | number)[]): void {
  w.string(1, name);
  w.message(2, (type) =>
    type.message(1, (tensor) => {
      tensor.int(1, FLOAT);
      tensor.message(2, (shape) => {
        for (const d of dims)
          shape.message(1, (dim) => (typeof d === 'number' ? dim.int(1, d) : dim.string(2, d)));
      });
    }),
  );
}

function node(w: ProtoWriter, n: Node, index: number): void {
  for (const input of n.inputs) w.string(1, input);
  w.string(2, n.output);
  w.string(3, `${n.op.toLowerCase()}_${index}`);
  w.string(4, n.op);
  for (const a of n.attributes ?? []) {
    w.message(5, (attr) => {
      attr.string(1, a.name);
      if ('int' in a) attr.int(20, ATTR_INT).int(3, a.int);
      else attr.int(20, ATTR_INTS).packed(8, a.ints);
    });
  }
}

/** A scalar float initializer (TensorProto with no dims and one raw little-endian float32). */
function scalarInitializer(w: ProtoWriter, name: string, value: number): void {
  const raw = new Uint8Array(4);
  new DataView(raw.buffer).setFloat32(0, value, true);
  w.int(2, FLOAT);
  w.string(8, name);
  w.raw(9, raw);
}

/**
 * The attention graph out = Softmax(MatMul(Q, Kᵀ)·scale (+ mask)) · V over [B, H, L, E] inputs.
 * With `masked`, a float input `mask` [L, S] (0 or −Infinity) is added to the scaled scores.
 */
export function attentionModel(options: { scale: number; masked: boolean }): Uint8Array {
  const nodes: Node[] = [
    { op: 'Transpose', inputs: ['k'], output: 'kT', attributes: [{ name: 'perm', ints: [0, 1, 3, 2] }] }, // [B, H, E, S]
    { op: 'MatMul', inputs: ['q', 'kT'], output: 'scores' }, // [B, H, L, S]
    { op: 'Mul', inputs: ['scores', 'scale'], output: 'scaled' },
  ];
  let logits = 'scaled';
  if (options.masked) {
    nodes.push({ op: 'Add', inputs: ['scaled', 'mask'], output: 'masked' }); // mask [L, S] broadcasts
    logits = 'masked';
  }
  nodes.push(
    { op: 'Softmax', inputs: [logits], output: 'probs', attributes: [{ name: 'axis', int: 3 }] },
    { op: 'MatMul', inputs: ['probs', 'v'], output: 'out' }, // [B, H, L, Ev]
  );

  const model = new ProtoWriter();
  model.int(1, 8); // ir_version 8
  model.string(2, 'qkv-bench');
  model.message(8, (opset) => opset.string(1, '').int(2, 17));
  model.message(7, (graph) => {
    nodes.forEach((n, i) => {
      graph.message(1, (w) => node(w, n, i));
    });
    graph.string(2, 'attention');
    graph.message(5, (w) => scalarInitializer(w, 'scale', options.scale));
    graph.message(11, (w) => valueInfo(w, 'q', ['B', 'H', 'L', 'E']));
    graph.message(11, (w) => valueInfo(w, 'k', ['B', 'H', 'S', 'E']));
    graph.message(11, (w) => valueInfo(w, 'v', ['B', 'H', 'S', 'Ev']));
    if (options.masked) graph.message(11, (w) => valueInfo(w, 'mask', ['L', 'S']));
    graph.message(12, (w) => valueInfo(w, 'out', ['B', 'H', 'L', 'Ev']));
  });
  return model.finish();
}
