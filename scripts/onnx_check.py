"""Check qkv's ONNX exports with the official checker: onnx.checker.check_model(model, full_check=True).

Run by hand (CI never runs it), with Debian's python3-onnx (onnx 1.12, which knows opsets up to 17):

    npm run build && node scripts/onnx-samples.mjs --onnx-out /tmp/qkv-onnx
    /usr/bin/python3 scripts/onnx_check.py /tmp/qkv-onnx

The first command writes sample exports (MultiHeadAttention packed and GQA with kdim/vdim, SelfAttention,
TinyTransformer encoder, decoder, decoder with a KV cache, fixed shapes; opset 17 and 23) into the folder;
any .onnx written by toOnnx or `qkv export` can be given instead, as files or folders.

For each model: the full check (the structure, every node against its operator schema, and strict shape
inference over the whole graph), then the output shapes that inference found, which must match what the
model declares. A model whose opset is newer than the installed onnx knows (opset 23 with onnx 1.12) is
listed as skipped, not failed. Exit code 0 when every checked model passes, 1 otherwise.

One decision to know: nothing here runs the models; test/onnx-export.test.ts runs every export in
onnxruntime-web against qkv's forward. This script is the independent reading of the file format.
"""

import os
import sys

import onnx
import onnx.checker
import onnx.shape_inference


def dims(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def check(path):
    """Returns 'ok', 'skipped: …' or raises."""
    model = onnx.load(path)
    opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    known = onnx.defs.onnx_opset_version()
    if opset > known:
        return f"skipped: opset {opset}, but onnx {onnx.__version__} knows opsets up to {known}"
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    declared = {o.name: dims(o) for o in model.graph.output}
    for o in inferred.graph.output:
        if dims(o) != declared[o.name]:
            raise ValueError(f"output {o.name}: inferred {dims(o)}, declared {declared[o.name]}")
    ops = sorted({n.op_type for n in model.graph.node})
    return (
        f"ok (IR {model.ir_version}, opset {opset}, {len(model.graph.node)} nodes, "
        f"{len(model.graph.initializer)} initializers; ops: {', '.join(ops)})"
    )


def main(argv):
    if not argv:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    paths = []
    for arg in argv:
        if os.path.isdir(arg):
            paths += sorted(os.path.join(arg, f) for f in os.listdir(arg) if f.endswith(".onnx"))
        else:
            paths.append(arg)
    failed = skipped = 0
    for path in paths:
        try:
            result = check(path)
            skipped += result.startswith("skipped")
        except Exception as err:  # noqa: BLE001 — every failure is reported, then the next model
            failed += 1
            result = f"FAILED: {type(err).__name__}: {str(err).strip().splitlines()[0]}"
        print(f"{os.path.basename(path)}: {result}")
    checked = len(paths) - skipped
    print(f"{checked - failed} of {checked} checked models passed, {skipped} skipped (onnx {onnx.__version__})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
