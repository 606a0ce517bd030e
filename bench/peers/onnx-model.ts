// A hand-rolled ONNX ModelProto encoder, just big enough for the attention graphs the ONNX Runtime peers run.
// One decision to know: the grid's graph uses plain opset-17 ops (Transpose, MatMul, Mul, Add, Softmax,
// MatMul) with symbolic dims, not the fused Attention ops, which overflow at n = 4096 in onnxruntime-web
// 1.30 (L = S = 4096); G1's decode step (one query) is the standard opset-23 Attention op itself.
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
const INT64 = 7; // TensorProto.DataType.INT64
const ATTR_INT = 2; // AttributeProto.AttributeType.INT
const ATTR_INTS = 7; // AttributeProto.AttributeType.INTS

type Attribute = { name: string; int: number } | { name: string; ints: number[] };

interface Node {
  op: string;
  inputs: string[];
  /** One output name, or several (Attention: Y, present_key, present_value). */
  output: string | string[];
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
  for (const output of typeof n.output === 'string' ? [n.output] : n.output) w.string(2, output);
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

/** A tensor initializer: float32 values, or int64 ones (shapes for Reshape), as raw little-endian data. */
function tensorInitializer(
  w: ProtoWriter,
  name: string,
  dims: number[],
  data: Float32Array | number[],
): void {
  w.packed(1, dims);
  let raw: Uint8Array;
  if (data instanceof Float32Array) {
    w.int(2, FLOAT);
    raw = new Uint8Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength));
  } else {
    w.int(2, INT64);
    raw = new Uint8Array(new BigInt64Array(data.map((d) => BigInt(d))).buffer);
  }
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

/**
 * G1's decode step: the standard Attention op (opset 23, ir_version 11) on 4-D heads, q [B, Hq, L, E]
 * over k, v [B, Hkv, S, E] (GQA: the op reads Hq and Hkv from the shapes; q_num_heads / kv_num_heads
 * serve 3-D inputs only), default scale 1/√E, no mask (one query at the last position sees every key).
 * With `past`, also past_key / past_value [B, Hkv, P, E], which the op concatenates before k and v, and
 * outputs present_key / present_value [B, Hkv, P + S, E] besides out.
 */
export function decodeAttentionModel(options: { past: boolean }): Uint8Array {
  const inputs = ['q', 'k', 'v'];
  const outputs = ['out'];
  if (options.past) {
    inputs.push('', 'past_key', 'past_value'); // '' : no attn_mask
    outputs.push('present_key', 'present_value');
  }
  const model = new ProtoWriter();
  model.int(1, 11); // ir_version 11 (opset 23)
  model.string(2, 'qkv-bench');
  model.message(8, (opset) => opset.string(1, '').int(2, 23));
  model.message(7, (graph) => {
    graph.message(1, (w) => node(w, { op: 'Attention', inputs, output: outputs }, 0));
    graph.string(2, 'decode_attention');
    graph.message(11, (w) => valueInfo(w, 'q', ['B', 'Hq', 'L', 'E']));
    graph.message(11, (w) => valueInfo(w, 'k', ['B', 'Hkv', 'S', 'E']));
    graph.message(11, (w) => valueInfo(w, 'v', ['B', 'Hkv', 'S', 'E']));
    if (options.past) {
      graph.message(11, (w) => valueInfo(w, 'past_key', ['B', 'Hkv', 'P', 'E']));
      graph.message(11, (w) => valueInfo(w, 'past_value', ['B', 'Hkv', 'P', 'E']));
    }
    graph.message(12, (w) => valueInfo(w, 'out', ['B', 'Hq', 'L', 'E']));
    if (options.past) {
      graph.message(12, (w) => valueInfo(w, 'present_key', ['B', 'Hkv', 'T', 'E']));
      graph.message(12, (w) => valueInfo(w, 'present_value', ['B', 'Hkv', 'T', 'E']));
    }
  });
  return model.finish();
}

/** MultiHeadAttention's parameters for mhaDecodeModel, as MatMul wants them: weights [in, out]. */
export interface MhaDecodeWeights {
  embedDim: number;
  numHeads: number;
  numKvHeads: number;
  /** [D, D], [D, Hkv·hd], [D, Hkv·hd], [D, D] and the biases [D], [Hkv·hd], [Hkv·hd], [D]. */
  wq: Float32Array;
  wk: Float32Array;
  wv: Float32Array;
  wo: Float32Array;
  bq: Float32Array;
  bk: Float32Array;
  bv: Float32Array;
  bo: Float32Array;
}

/**
 * G1's decode step with projections: x [B, L, D] → q, k, v projections (MatMul + Add), split into heads
 * (Reshape, Transpose), the opset-23 Attention op over past_key / past_value [B, Hkv, P, hd] plus this
 * step's keys (GQA from the shapes; no mask: the step's one query sees every key), heads merged, output
 * projection → out [B, L, D], present_key / present_value [B, Hkv, P + L, hd]: what qkv's
 * `MultiHeadAttention.forward(x, x, x, { cache, layer, causal: true })` computes for one token.
 */
export function mhaDecodeModel(p: MhaDecodeWeights): Uint8Array {
  const { embedDim: D, numHeads: H, numKvHeads: Hkv } = p;
  const hd = D / H;
  const nodes: Node[] = [];
  const projectHeads = (name: string) => {
    nodes.push(
      { op: 'MatMul', inputs: ['x', `w${name}`], output: `${name}_mm` },
      { op: 'Add', inputs: [`${name}_mm`, `b${name}`], output: `${name}_flat` }, // [B, L, heads·hd]
      { op: 'Reshape', inputs: [`${name}_flat`, `${name}_shape`], output: `${name}_split` }, // [B, L, heads, hd]
      {
        op: 'Transpose',
        inputs: [`${name}_split`],
        output: `${name}_heads`, // [B, heads, L, hd]
        attributes: [{ name: 'perm', ints: [0, 2, 1, 3] }],
      },
    );
  };
  projectHeads('q');
  projectHeads('k');
  projectHeads('v');
  nodes.push(
    {
      op: 'Attention',
      inputs: ['q_heads', 'k_heads', 'v_heads', '', 'past_key', 'past_value'],
      output: ['attn', 'present_key', 'present_value'],
    },
    {
      op: 'Transpose',
      inputs: ['attn'],
      output: 'attn_t',
      attributes: [{ name: 'perm', ints: [0, 2, 1, 3] }],
    },
    { op: 'Reshape', inputs: ['attn_t', 'merge_shape'], output: 'merged' }, // [B, L, D]
    { op: 'MatMul', inputs: ['merged', 'wo'], output: 'o_mm' },
    { op: 'Add', inputs: ['o_mm', 'bo'], output: 'out' },
  );
  const model = new ProtoWriter();
  model.int(1, 11); // ir_version 11 (opset 23)
  model.string(2, 'qkv-bench');
  model.message(8, (opset) => opset.string(1, '').int(2, 23));
  model.message(7, (graph) => {
    nodes.forEach((n, i) => {
      graph.message(1, (w) => node(w, n, i));
    });
    graph.string(2, 'mha_decode');
    const init = (name: string, dims: number[], data: Float32Array | number[]) =>
      graph.message(5, (w) => tensorInitializer(w, name, dims, data));
    init('wq', [D, D], p.wq);
    init('wk', [D, Hkv * hd], p.wk);
    init('wv', [D, Hkv * hd], p.wv);
    init('wo', [D, D], p.wo);
    init('bq', [D], p.bq);
    init('bk', [Hkv * hd], p.bk);
    init('bv', [Hkv * hd], p.bv);
    init('bo', [D], p.bo);
    init('q_shape', [4], [0, 0, H, hd]); // 0: keep that axis (B, L)
    init('k_shape', [4], [0, 0, Hkv, hd]);
    init('v_shape', [4], [0, 0, Hkv, hd]);
    init('merge_shape', [3], [0, 0, D]);
    graph.message(11, (w) => valueInfo(w, 'x', ['B', 'L', D]));
    graph.message(11, (w) => valueInfo(w, 'past_key', ['B', Hkv, 'P', hd]));
    graph.message(11, (w) => valueInfo(w, 'past_value', ['B', Hkv, 'P', hd]));
    graph.message(12, (w) => valueInfo(w, 'out', ['B', 'L', D]));
    graph.message(12, (w) => valueInfo(w, 'present_key', ['B', Hkv, 'T', hd]));
    graph.message(12, (w) => valueInfo(w, 'present_value', ['B', Hkv, 'T', hd]));
  });
  return model.finish();
}
