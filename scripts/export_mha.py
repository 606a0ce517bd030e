"""Export the P2 benchmark's layer: torch.nn.MultiheadAttention(512, 8, batch_first=True) as ONNX.

Run by hand with Debian's python and PyTorch 1.13: `/usr/bin/python3 scripts/export_mha.py`.
Writes bench/fixtures/mha-512x8.onnx: the self-attention forward out = MHA(x, x, x, need_weights=False)
for x [1, 1024, 512], opset 17, fixed shapes. CI never runs this script: the .onnx is committed.

One decision to know: the .onnx is the only copy of the weights. It is exported without constant folding,
so its initializers keep PyTorch's state-dict names (mha.in_proj_weight, mha.in_proj_bias,
mha.out_proj.weight, mha.out_proj.bias) and the bench reads them back into qkv's MultiHeadAttention and
its tfjs peer. The check data rides in the model's metadata_props:
  qkv_bench_input     how x is generated (an LCG the bench repeats bit for bit, rounded to float32)
  qkv_bench_expected  JSON {"rows": [...], "values": [[...], ...]}: PyTorch's output for those rows of x,
                      computed in float64 from the float32 weights and input
"""

import json
import math
import os

import onnx
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "fixtures", "mha-512x8.onnx")

EMBED, HEADS, L = 512, 8, 1024
SEED = 20261130
INPUT_RULE = (
    "x[i] = f32((s_i / 2^32 - 0.5) * 2 * sqrt(3)), s_0 = 12345, "
    "s_{i+1} = (1664525 * s_i + 1013904223) mod 2^32 (s_1 is the first used), row-major [1, 1024, 512]"
)
# Every 64th query row plus the last: 17 rows of 512 values.
CHECK_ROWS = list(range(0, L, 64)) + [L - 1]


def make_input():
    """The bench's input: the LCG of INPUT_RULE, unit variance, rounded to float32."""
    n = L * EMBED
    s = 12345
    scale = 2 * math.sqrt(3)
    out = [0.0] * n
    for i in range(n):
        s = (1664525 * s + 1013904223) % 2**32
        out[i] = (s / 2**32 - 0.5) * scale
    return torch.tensor(out, dtype=torch.float64).to(torch.float32).reshape(1, L, EMBED)


class SelfAttention(torch.nn.Module):
    """x -> MHA(x, x, x) without weights: the graph the ONNX Runtime rows run."""

    def __init__(self):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(EMBED, HEADS, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


def main():
    torch.manual_seed(SEED)
    model = SelfAttention().eval()
    # PyTorch zero-initialises the biases; give them values so that the check covers them too.
    with torch.no_grad():
        model.mha.in_proj_bias.uniform_(-0.1, 0.1)
        model.mha.out_proj.bias.uniform_(-0.1, 0.1)
    x = make_input()

    with torch.no_grad():
        expected = model.double()(x.double())[0]  # [L, 512], float64 from the float32 values
    model = model.float()

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    torch.onnx.export(
        model,
        (x,),
        OUT,
        input_names=["x"],
        output_names=["out"],
        opset_version=17,
        do_constant_folding=False,
    )

    proto = onnx.load(OUT)
    names = sorted(init.name for init in proto.graph.initializer)
    want = ["mha.in_proj_bias", "mha.in_proj_weight", "mha.out_proj.bias", "mha.out_proj.weight"]
    assert names == want, f"initializers {names}, expected {want}"
    check = {"rows": CHECK_ROWS, "values": [[float(v) for v in expected[r].tolist()] for r in CHECK_ROWS]}
    for key, value in (
        ("qkv_bench_input", INPUT_RULE),
        ("qkv_bench_expected", json.dumps(check, separators=(",", ":"))),
        ("qkv_bench_source", f"torch {torch.__version__}, seed {SEED}, scripts/export_mha.py"),
    ):
        entry = proto.metadata_props.add()
        entry.key = key
        entry.value = value
    onnx.checker.check_model(proto)
    onnx.save(proto, OUT)

    # The float32 forward the ONNX graph computes, against the float64 expected, for the record.
    with torch.no_grad():
        got = model(x)[0].double()
    err = (got[CHECK_ROWS] - expected[CHECK_ROWS]).abs().max().item()
    print(f"wrote {OUT} ({os.path.getsize(OUT) / 2**20:.2f} MiB); PyTorch float32 max abs error {err:.2e}")


if __name__ == "__main__":
    main()
