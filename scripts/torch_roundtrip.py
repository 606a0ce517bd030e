"""Take a qkv TinyTransformer checkpoint to stock PyTorch and back.

Run by hand (CI never runs it), with Debian's python3-torch (PyTorch 1.13); no safetensors package needed:

    npm run build && node scripts/onnx-samples.mjs --torch-fixture   # optional
    /usr/bin/python3 scripts/torch_roundtrip.py [checkpoint] [qkv-logits.json]

Defaults: test/fixtures/torch-roundtrip.safetensors (a random 2-layer decoder that the first command writes)
and test/fixtures/torch-roundtrip-qkv.json (qkv's logits for its token ids). The script
  1. reads the safetensors file by hand (8-byte little-endian header length, JSON header, raw data),
  2. builds the same model from stock modules: nn.Embedding, a stack of nn.TransformerEncoderLayer(
     norm_first=True, activation=nn.GELU(approximate='tanh'), batch_first=True, dropout=0), the sinusoidal
     table, a final nn.LayerNorm and the head tied to the embedding — and load_state_dict(strict=True)
     takes qkv's names as they are,
  3. checks its logits against qkv's (max |difference| printed; fails above 1e-4),
  4. trains a few Adam steps in PyTorch (next-token prediction on a fixed pattern),
  5. writes test/fixtures/torch-roundtrip-trained.safetensors by hand (qkv's metadata kept, qkv.step
     set) and test/fixtures/torch-roundtrip-torch.json (PyTorch's logits of the trained model, computed
     in float64 from the float32 weights), which test/onnx-export.test.ts loads with loadCheckpoint and
     compares with qkv's forward.

One decision to know: the logits are computed with autograd on, so nn.TransformerEncoderLayer takes its
Python path; its inference fast path (no_grad, eval) ignores approximate='tanh' (measured: logits off by
4e-4 on this model as an encoder).
"""

import json
import math
import os
import struct
import sys

import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "test", "fixtures")
STEPS = 20


def read_safetensors(path):
    """name -> float32 tensor, and the __metadata__ strings."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name} is {info['dtype']}; only F32 is read here")
        start, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[base + start : base + end]), dtype=torch.float32)
        tensors[name] = t.reshape(info["shape"]).clone()
    return tensors, metadata


def write_safetensors(path, tensors, metadata):
    """The safetensors layout, tensors in the given order, header padded with spaces to 8 bytes."""
    header = {"__metadata__": metadata}
    offset = 0
    blobs = []
    for name, t in tensors.items():
        raw = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def sinusoidal(length, d_model):
    """qkv's table (src/position/sinusoidal.ts): float64 angles, rounded to float32."""
    pe = torch.zeros(length, d_model, dtype=torch.float64)
    for c in range(d_model):
        inv_freq = 10000.0 ** (-(c - c % 2) / d_model)
        for pos in range(length):
            angle = pos * inv_freq
            pe[pos, c] = math.sin(angle) if c % 2 == 0 else math.cos(angle)
    return pe.to(torch.float32)


class TinyTransformer(nn.Module):
    """qkv's TinyTransformer from stock PyTorch modules, parameter names included."""

    def __init__(self, config):
        super().__init__()
        if config.get("scaleScores", True) is not True:
            raise ValueError("scaleScores: false has no stock nn.TransformerEncoderLayer equivalent")
        d, v = config["dModel"], config["vocabSize"]
        self.config = config
        self.embedding = nn.Embedding(v, d)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                d,
                config["numHeads"],
                config["dFF"],
                dropout=0.0,
                activation=nn.GELU(approximate="tanh"),
                batch_first=True,
                norm_first=True,
            )
            for _ in range(config["numLayers"])
        )
        self.norm = nn.LayerNorm(d)  # eps 1e-5, as qkv's
        self.register_buffer("pe", sinusoidal(config["maxLen"], d), persistent=False)

    def forward(self, ids):
        length = ids.shape[1]
        x = self.embedding(ids) * math.sqrt(self.config["dModel"]) + self.pe[:length].to(self.embedding.weight.dtype)
        mask = None
        if self.config["causal"]:
            mask = torch.triu(torch.full((length, length), float("-inf"), dtype=x.dtype), diagonal=1)
        for layer in self.layers:
            x = layer(x, src_mask=mask)
        return self.norm(x) @ self.embedding.weight.T  # the tied head


def main(argv):
    ckpt = argv[0] if argv else os.path.join(FIXTURES, "torch-roundtrip.safetensors")
    expected_path = argv[1] if len(argv) > 1 else os.path.join(FIXTURES, "torch-roundtrip-qkv.json")
    tensors, metadata = read_safetensors(ckpt)
    config = json.loads(metadata["qkv.config"])
    model = TinyTransformer(config)
    model.load_state_dict(tensors, strict=True)
    model.eval()

    expected = json.load(open(expected_path))
    ids = torch.tensor(expected["ids"], dtype=torch.long).reshape(expected["shape"][:2])
    want = torch.tensor(expected["logits"], dtype=torch.float32).reshape(expected["shape"])
    got32 = model(ids).detach()
    got64 = model.double()(ids).detach()
    model.float()
    d32 = (got32 - want).abs().max().item()
    d64 = (got64 - want.double()).abs().max().item()
    print(f"{os.path.basename(ckpt)}: {config}")
    print(f"logits vs qkv: max |diff| {d32:.3g} (PyTorch float32), {d64:.3g} (float64), |logits| ≤ {want.abs().max().item():.3g}")
    if d32 > 1e-4 or d64 > 1e-4:
        print("FAILED: PyTorch's logits differ from qkv's")
        return 1

    # A few steps of training in PyTorch: next-token prediction on a fixed pattern.
    torch.manual_seed(0)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    v = config["vocabSize"]
    seq = torch.tensor([[(3 * i + b) % v for i in range(9)] for b in range(4)], dtype=torch.long)
    for step in range(STEPS):
        logits = model(seq[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, v), seq[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step in (0, STEPS - 1):
            print(f"step {step + 1}: loss {loss.item():.4f}")
    model.eval()

    out = os.path.join(FIXTURES, "torch-roundtrip-trained.safetensors")
    step = int(metadata.get("qkv.step", "0")) + STEPS
    write_safetensors(out, model.state_dict(), {**metadata, "qkv.step": str(step)})
    trained = model.double()(ids).detach().to(torch.float32)
    fixture = {"ids": expected["ids"], "shape": expected["shape"], "logits": [float(x) for x in trained.reshape(-1)]}
    out_json = os.path.join(FIXTURES, "torch-roundtrip-torch.json")
    with open(out_json, "w") as f:
        f.write(json.dumps(fixture, separators=(",", ":")) + "\n")

    # The file just written reads back to the same weights.
    back, back_meta = read_safetensors(out)
    assert back_meta["qkv.step"] == str(step)
    assert all(torch.equal(back[k], t.float()) for k, t in model.float().state_dict().items())
    print(f"wrote {os.path.relpath(out, ROOT)} ({os.path.getsize(out)} bytes) and {os.path.relpath(out_json, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
