// qkv/onnx: the ONNX exporter's entry (package.json "exports" → "./onnx"), kept apart from the main
// entry so that importing qkv never loads it.
// One decision to know: like the main entry it has no runtime dependency — the protobuf encoding is
// qkv's own (src/onnx/proto.ts) — so the subpath is for size and focus, not for a dependency.

export {
  type OnnxExportable,
  type OnnxExportOptions,
  type OnnxFixedShape,
  toOnnx,
} from './export.js';
