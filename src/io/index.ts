// qkv/io: file formats (package.json "exports" → "./io"): safetensors, decoded with every length and
// offset checked before allocating, and encoded. Checkpoints (a TinyTransformer with its config and
// tokenizer in a safetensors file) are in qkv/nn; ONNX export is qkv/onnx. Re-exports only; the Node file
// helpers next to it (file-node.ts) are the CLI's, not part of this entry.

export {
  type DecodeSafetensorsOptions,
  decodeSafetensors,
  encodeSafetensors,
  type SafetensorsContents,
  SafetensorsError,
} from './safetensors.js';
