"""Generate the PyTorch golden fixtures in test/fixtures/ (sdpa.json, mha.json, position.json, backward.json).

Run by hand with Debian's python and PyTorch 1.13: `/usr/bin/python3 scripts/make_fixtures.py`
(`... make_fixtures.py backward` writes backward.json only).
CI never runs this script: the generated JSON files are committed and the TypeScript tests read them.
Inputs are float32 (written exactly); expected outputs are computed in float64 from those inputs.
"""

import json
import math
import os

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "test", "fixtures")


# ---------------------------------------------------------------------------
# encoding


def enc_number(x):
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def enc(t, allow_inf=False):
    """Tensor -> {"shape", "data"} with a flat row-major list of Python floats."""
    t = t.detach().cpu().contiguous()
    data = [float(x) for x in t.reshape(-1).tolist()]
    if not allow_inf:
        assert all(math.isfinite(x) for x in data), "non-finite value in a tensor that must be finite"
    else:
        assert not any(math.isnan(x) for x in data), "NaN in tensor"
    return {"shape": list(t.shape), "data": [enc_number(x) for x in data]}


def write_json(name, obj):
    path = os.path.join(OUT_DIR, name)
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"), allow_nan=False)
        f.write("\n")
    print(f"wrote {os.path.relpath(path, ROOT)} ({os.path.getsize(path)} bytes)")


def randn(*shape):
    return torch.randn(*shape, dtype=torch.float32)


# ---------------------------------------------------------------------------
# reference scaled dot-product attention (float64)


def visibility(L, S, causal=None, window=None):
    """[L, S] bool: True where query i may see key j (causal / window only)."""
    vis = torch.ones(L, S, dtype=torch.bool)
    if causal == "top-left":
        vis &= torch.ones(L, S).tril(0).bool()
    elif causal == "bottom-right":
        vis &= torch.ones(L, S).tril(S - L).bool()
    elif causal is not None:
        raise ValueError(causal)
    if window is not None:
        left, right = window
        offset = 0 if causal == "top-left" else S - L
        i = torch.arange(L).unsqueeze(1)
        j = torch.arange(S).unsqueeze(0)
        p = i + offset
        if left >= 0:
            vis &= j >= p - left
        if right >= 0:
            vis &= j <= p + right
    return vis


def sdpa_ref(q, k, v, mask=None, bias=None, causal=None, window=None, scale=None):
    q, k, v = q.double(), k.double(), v.double()
    E = q.shape[-1]
    L, S = q.shape[-2], k.shape[-2]
    if q.dim() == 4 and q.shape[-3] != k.shape[-3]:
        hq, hkv = q.shape[-3], k.shape[-3]
        assert hq % hkv == 0
        k = k.repeat_interleave(hq // hkv, dim=-3)
        v = v.repeat_interleave(hq // hkv, dim=-3)
    if scale is None:
        scale = 1.0 / math.sqrt(E)
    scores = (q @ k.transpose(-1, -2)) * scale
    if bias is not None:
        scores = scores + bias.double()
    blocked = ~visibility(L, S, causal, window)
    if mask is not None:
        blocked = blocked | (mask == 0)
    scores = scores.masked_fill(blocked, float("-inf"))
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)
    weights = torch.softmax(scores, dim=-1)
    weights = torch.where(dead, torch.zeros_like(weights), weights)
    out = weights @ v
    return out, weights


# ---------------------------------------------------------------------------
# sdpa.json


def alibi_slopes(n):
    """Press et al. recipe; power-of-two slopes computed as 2^(-8(i+1)/n) directly."""
    def pow2(m):
        return [2.0 ** (-8.0 * (i + 1) / m) for i in range(m)]

    if n & (n - 1) == 0:
        return pow2(n)
    m = 1 << (n.bit_length() - 1)
    return pow2(m) + alibi_slopes(2 * m)[0::2][: n - m]


def rand_mask(*shape):
    """Random 0/1 float mask whose last-dim rows each keep at least one key."""
    m = (torch.rand(*shape) < 0.6).float()
    flat = m.reshape(-1, shape[-1])
    for r in range(flat.shape[0]):
        if flat[r].sum() == 0:
            flat[r, r % shape[-1]] = 1.0
    return flat.reshape(*shape)


def sdpa_cases():
    cases = []

    def add(name, seed, qs, ks, vs, mask=None, bias=None, causal=None, window=None, scale=None,
            qk_mul=None, mask_fn=None, bias_fn=None):
        torch.manual_seed(seed)
        q, k, v = randn(*qs), randn(*ks), randn(*vs)
        if qk_mul is not None:
            q, k = q * qk_mul, k * qk_mul
        if mask_fn is not None:
            mask = mask_fn()
        if bias_fn is not None:
            bias = bias_fn()
        out, w = sdpa_ref(q, k, v, mask=mask, bias=bias, causal=causal, window=window, scale=scale)
        c = {"name": name, "q": enc(q), "k": enc(k), "v": enc(v)}
        if mask is not None:
            c["mask"] = enc(mask)
        if bias is not None:
            c["bias"] = enc(bias, allow_inf=True)
        if causal is not None:
            c["causal"] = causal
        if window is not None:
            c["window"] = list(window)
        if scale is not None:
            c["scale"] = scale
        c["out"] = enc(out)
        c["weights"] = enc(w)
        cases.append(c)

    # plain, all ranks
    add("rank2 plain L=S=4 E=3", 1, (4, 3), (4, 3), (4, 3))
    add("rank3 plain B=2 L=S=3 E=4", 2, (2, 3, 4), (2, 3, 4), (2, 3, 4))
    add("rank4 plain B=2 H=2 L=S=4 E=4", 3, (2, 2, 4, 4), (2, 2, 4, 4), (2, 2, 4, 4))
    add("L<S rank4 L=3 S=6", 4, (1, 2, 3, 4), (1, 2, 6, 4), (1, 2, 6, 4))
    add("L>S rank4 L=6 S=3", 5, (1, 2, 6, 4), (1, 2, 3, 4), (1, 2, 3, 4))
    add("E!=Ev E=4 Ev=6", 6, (2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 6))
    add("single token L=S=1", 7, (1, 2, 1, 5), (1, 2, 1, 5), (1, 2, 1, 5))
    add("custom scale 0.37", 8, (1, 2, 4, 6), (1, 2, 5, 6), (1, 2, 5, 6), scale=0.37)

    # masks and biases
    add("mask [L,S] random", 9, (2, 2, 4, 4), (2, 2, 5, 4), (2, 2, 5, 4),
        mask_fn=lambda: rand_mask(4, 5))
    add("mask [B,1,1,S] key padding", 10, (2, 2, 4, 4), (2, 2, 6, 4), (2, 2, 6, 4),
        mask=torch.tensor([1, 1, 1, 1, 0, 0, 1, 1, 0, 1, 1, 1], dtype=torch.float32).reshape(2, 1, 1, 6))
    add("mask [B,L,S] on rank3", 11, (2, 4, 3), (2, 5, 3), (2, 5, 3),
        mask_fn=lambda: rand_mask(2, 4, 5))
    add("bias [H,L,S] random normal", 12, (2, 3, 4, 4), (2, 3, 5, 4), (2, 3, 5, 4),
        bias_fn=lambda: randn(3, 4, 5))

    def bias_some_neg_inf():
        b = randn(2, 4, 5)
        b[0, 0, 1] = b[0, 2, 4] = b[1, 1, 0] = b[1, 3, 2] = b[1, 3, 3] = float("-inf")
        return b

    add("bias with -inf entries", 13, (1, 2, 4, 4), (1, 2, 5, 4), (1, 2, 5, 4),
        bias_fn=bias_some_neg_inf)

    # causal
    add("causal top-left L=S=5", 14, (1, 2, 5, 4), (1, 2, 5, 4), (1, 2, 5, 4), causal="top-left")
    add("causal top-left L<S (L=3 S=6)", 15, (1, 2, 3, 4), (1, 2, 6, 4), (1, 2, 6, 4), causal="top-left")
    add("causal top-left L>S (L=6 S=3)", 16, (1, 2, 6, 4), (1, 2, 3, 4), (1, 2, 3, 4), causal="top-left")
    add("causal bottom-right L<S (L=3 S=6)", 17, (1, 2, 3, 4), (1, 2, 6, 4), (1, 2, 6, 4),
        causal="bottom-right")
    add("causal bottom-right L>S (L=6 S=3) fully blocked first rows", 18,
        (1, 2, 6, 4), (1, 2, 3, 4), (1, 2, 3, 4), causal="bottom-right")

    # sliding windows
    add("window [2,1] L=S=6", 19, (1, 2, 6, 4), (1, 2, 6, 4), (1, 2, 6, 4), window=(2, 1))
    add("window [2,1] L<S (L=4 S=7)", 20, (1, 2, 4, 4), (1, 2, 7, 4), (1, 2, 7, 4), window=(2, 1))
    add("window [1,-1] unbounded right L=S=6", 21, (1, 2, 6, 4), (1, 2, 6, 4), (1, 2, 6, 4), window=(1, -1))
    add("window [-1,0] L=S=5", 22, (1, 2, 5, 4), (1, 2, 5, 4), (1, 2, 5, 4), window=(-1, 0))
    add("window [2,-1] + causal bottom-right L<S (L=4 S=7)", 23, (1, 2, 4, 4), (1, 2, 7, 4), (1, 2, 7, 4),
        causal="bottom-right", window=(2, -1))
    add("window [1,0] + causal top-left L<S (L=4 S=7)", 24, (1, 2, 4, 4), (1, 2, 7, 4), (1, 2, 7, 4),
        causal="top-left", window=(1, 0))

    # grouped / multi-query
    add("GQA Hq=4 Hkv=2", 25, (2, 4, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3))
    add("MQA Hq=4 Hkv=1", 26, (1, 4, 4, 4), (1, 1, 5, 4), (1, 1, 5, 4))
    add("GQA Hq=4 Hkv=2 + causal top-left + mask [B,1,1,S]", 27, (2, 4, 5, 4), (2, 2, 5, 4), (2, 2, 5, 4),
        causal="top-left",
        mask=torch.tensor([1, 1, 1, 0, 1, 1, 0, 1, 1, 1], dtype=torch.float32).reshape(2, 1, 1, 5))

    # numerics and edge rows
    add("very large logits (q,k x1000)", 28, (1, 2, 4, 4), (1, 2, 5, 4), (1, 2, 5, 4), qk_mul=1000.0)

    def mask_dead_row():
        m = rand_mask(4, 5)
        m[2] = 0.0
        return m

    add("fully masked row via mask", 29, (1, 2, 4, 4), (1, 2, 5, 4), (1, 2, 5, 4), mask_fn=mask_dead_row)

    def bias_dead_row():
        b = randn(2, 4, 5)
        b[1, 1, :] = float("-inf")
        return b

    add("fully masked row via bias -inf row", 30, (1, 2, 4, 4), (1, 2, 5, 4), (1, 2, 5, 4),
        bias_fn=bias_dead_row)

    def alibi_bias(H, L, S):
        slopes = torch.tensor(alibi_slopes(H), dtype=torch.float32).reshape(H, 1, 1)
        i = torch.arange(L).reshape(1, L, 1)
        j = torch.arange(S).reshape(1, 1, S)
        p = i + (S - L)
        return (slopes * (j - p).float()).float()

    add("ALiBi bias slope*(j-p) + causal bottom-right H=4 L=4 S=6", 31,
        (1, 4, 4, 4), (1, 4, 6, 4), (1, 4, 6, 4), causal="bottom-right",
        bias_fn=lambda: alibi_bias(4, 4, 6))

    return cases


# ---------------------------------------------------------------------------
# mha.json


def mha_reference_check(mha, cfg, query, key, value, lib_mask, causal, out, w):
    """Recompute MHA through sdpa_ref with the library's mask polarity and compare with torch."""
    sd = {n: t.double() for n, t in mha.state_dict().items()}
    E, H = cfg["embedDim"], cfg["numHeads"]
    if "in_proj_weight" in sd:
        wq, wk, wv = sd["in_proj_weight"].chunk(3)
    else:
        wq, wk, wv = sd["q_proj_weight"], sd["k_proj_weight"], sd["v_proj_weight"]
    bq = bk = bv = None
    if "in_proj_bias" in sd:
        bq, bk, bv = sd["in_proj_bias"].chunk(3)

    def proj(x, wt, b):
        y = x @ wt.T
        return y + b if b is not None else y

    B, L, S = query.shape[0], query.shape[1], key.shape[1]
    d = E // H
    q = proj(query, wq, bq).reshape(B, L, H, d).transpose(1, 2)
    k = proj(key, wk, bk).reshape(B, S, H, d).transpose(1, 2)
    v = proj(value, wv, bv).reshape(B, S, H, d).transpose(1, 2)
    o, ww = sdpa_ref(q, k, v, mask=lib_mask, causal=causal)
    o = o.transpose(1, 2).reshape(B, L, E) @ sd["out_proj.weight"].T
    if "out_proj.bias" in sd:
        o = o + sd["out_proj.bias"]
    assert torch.allclose(o, out, atol=1e-12, rtol=1e-10), "MHA output mismatch vs reference"
    assert torch.allclose(ww, w, atol=1e-12, rtol=1e-10), "MHA weights mismatch vs reference"


def mha_cases():
    cases = []

    def add(name, seed, E, H, B, L, S=None, kdim=None, vdim=None, bias=True, mask_kind=None, causal=False):
        torch.manual_seed(seed)
        self_attn = S is None
        S = L if self_attn else S
        mha = torch.nn.MultiheadAttention(E, H, bias=bias, kdim=kdim, vdim=vdim, batch_first=True)
        with torch.no_grad():
            for p in mha.parameters():
                p.copy_(randn(*p.shape) * 0.3)
        mha = mha.double().eval()
        state32 = {n: t.float() for n, t in mha.state_dict().items()}
        for n, t in mha.state_dict().items():
            assert torch.equal(state32[n].double(), t)

        query = randn(B, L, E)
        if self_attn:
            key = value = query
        else:
            key = randn(B, S, kdim if kdim is not None else E)
            value = randn(B, S, vdim if vdim is not None else E)

        lib_mask = None
        attn_mask = None
        kpm = None
        if mask_kind == "attn":
            lib_mask = rand_mask(L, S)
            attn_mask = lib_mask == 0
        elif mask_kind == "key_padding":
            pad = torch.ones(B, S)
            pad[0, S - 2:] = 0.0
            pad[B - 1, 1] = 0.0
            kpm = pad == 0
            lib_mask = pad.reshape(B, 1, 1, S)
        if causal:
            attn_mask = torch.ones(L, S).triu(1).bool()

        with torch.no_grad():
            out, w = mha(query.double(), key.double(), value.double(), key_padding_mask=kpm,
                         need_weights=True, attn_mask=attn_mask, average_attn_weights=False)
            mha_reference_check(mha, {"embedDim": E, "numHeads": H}, query.double(), key.double(),
                                value.double(), lib_mask, "top-left" if causal else None, out, w)

        config = {"embedDim": E, "numHeads": H}
        if kdim is not None:
            config["kdim"] = kdim
        if vdim is not None:
            config["vdim"] = vdim
        config["bias"] = bias
        c = {"name": name, "config": config,
             "state": {n: enc(t) for n, t in state32.items()},
             "query": enc(query)}
        if not self_attn:
            c["key"] = enc(key)
            c["value"] = enc(value)
        if lib_mask is not None:
            c["mask"] = enc(lib_mask)
        if causal:
            c["causal"] = "top-left"
        c["output"] = enc(out)
        c["weights"] = enc(w)
        cases.append(c)

    add("self-attention E=8 H=2 B=2 L=5", 101, 8, 2, 2, 5)
    add("self-attention causal E=8 H=2 B=2 L=5", 102, 8, 2, 2, 5, causal=True)
    add("cross-attention kdim=6 vdim=4 E=8 H=2 L=3 S=5", 103, 8, 2, 2, 3, S=5, kdim=6, vdim=4)
    add("key padding mask [B,1,1,S] cross-attention E=8 H=2 L=4 S=6", 104, 8, 2, 2, 4, S=6,
        mask_kind="key_padding")
    add("bias=false self-attention E=8 H=2 L=4", 105, 8, 2, 2, 4, bias=False)
    add("attn mask [L,S] cross-attention E=8 H=2 L=4 S=5", 106, 8, 2, 2, 4, S=5, mask_kind="attn")
    add("single head H=1 E=8 L=4", 107, 8, 1, 2, 4)
    add("E=12 H=3 self-attention L=4", 108, 12, 3, 2, 4)
    return cases


# ---------------------------------------------------------------------------
# position.json


def sinusoidal(length, d_model):
    pos = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    col = torch.arange(d_model)
    even = (col - col % 2).double()
    angle = pos / torch.pow(torch.tensor(10000.0, dtype=torch.float64), even / d_model)
    return torch.where(col % 2 == 0, torch.sin(angle), torch.cos(angle))


def rope(x, base, offset, interleaved):
    x = x.double()
    E, L = x.shape[-1], x.shape[-2]
    half = E // 2
    d = torch.arange(half, dtype=torch.float64)
    theta = torch.pow(torch.tensor(float(base), dtype=torch.float64), -2.0 * d / E)
    angle = (offset + torch.arange(L, dtype=torch.float64)).unsqueeze(1) * theta  # [L, E/2]
    cos, sin = torch.cos(angle), torch.sin(angle)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = b * cos + a * sin
    else:
        a, b = x[..., :half], x[..., half:]
        out = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    return out


def position():
    sin_cases = [{"length": n, "dModel": d, "pe": enc(sinusoidal(n, d))} for n, d in [(6, 8), (5, 7)]]
    # spot-check the formula on one element
    pe = sinusoidal(5, 7)
    assert abs(pe[3, 5].item() - math.cos(3 / 10000 ** (4 / 7))) < 1e-15
    assert abs(pe[4, 6].item() - math.sin(4 / 10000 ** (6 / 7))) < 1e-15

    rope_cases = []
    seed = 200
    for base in (10000, 500):
        for offset in (0, 7):
            for interleaved in (False, True):
                seed += 1
                torch.manual_seed(seed)
                shape = (2, 2, 5, 8) if (seed % 2 == 1) else (6, 8)
                x = randn(*shape)
                out = rope(x, base, offset, interleaved)
                rope_cases.append({
                    "name": f"{'interleaved' if interleaved else 'rotate-half'} base={base} "
                            f"offset={offset} x{list(shape)}",
                    "x": enc(x), "base": base, "offset": offset, "interleaved": interleaved,
                    "out": enc(out)})

    slopes = [{"numHeads": n, "slopes": alibi_slopes(n)} for n in (1, 2, 4, 6, 8, 12, 16)]
    assert alibi_slopes(8) == [2.0 ** -(i + 1) for i in range(8)]
    assert alibi_slopes(6) == [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3]
    return {"torch": torch.__version__, "sinusoidal": sin_cases, "rope": rope_cases, "alibiSlopes": slopes}


# ---------------------------------------------------------------------------
# backward.json: attention gradients from PyTorch autograd (float64), for every option


def sdpa_grad_ref(q, k, v, mask=None, bias=None, causal=None, window=None, scale=None):
    """sdpa_ref that autograd can differentiate through a fully blocked row without NaN:
    the dead rows' scores are replaced by 0 before the softmax and their weights by 0 after it."""
    E = q.shape[-1]
    L, S = q.shape[-2], k.shape[-2]
    if q.dim() == 4 and q.shape[-3] != k.shape[-3]:
        hq, hkv = q.shape[-3], k.shape[-3]
        k = k.repeat_interleave(hq // hkv, dim=-3)  # autograd sums dk, dv over the group
        v = v.repeat_interleave(hq // hkv, dim=-3)
    if scale is None:
        scale = 1.0 / math.sqrt(E)
    scores = (q @ k.transpose(-1, -2)) * scale
    if bias is not None:
        scores = scores + bias
    blocked = ~visibility(L, S, causal, window)
    if mask is not None:
        blocked = blocked | (mask == 0)
    scores = scores.masked_fill(blocked, float("-inf"))
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)
    scores = torch.where(dead, torch.zeros_like(scores), scores)
    weights = torch.where(dead, torch.zeros_like(scores), torch.softmax(scores, dim=-1))
    return weights @ v


def backward_cases():
    cases = []

    def add(name, seed, qs, ks, vs, mask=None, bias=None, causal=None, window=None, scale=None,
            qk_mul=None, mask_fn=None, bias_fn=None):
        torch.manual_seed(seed)
        q, k, v = randn(*qs), randn(*ks), randn(*vs)
        if qk_mul is not None:
            q, k = q * qk_mul, k * qk_mul
        if mask_fn is not None:
            mask = mask_fn()
        if bias_fn is not None:
            bias = bias_fn()
        q64, k64, v64 = (t.double().requires_grad_(True) for t in (q, k, v))
        b64 = bias.double().requires_grad_(True) if bias is not None else None
        out = sdpa_grad_ref(q64, k64, v64, mask=mask, bias=b64, causal=causal, window=window, scale=scale)
        dout = randn(*out.shape)
        out.backward(dout.double())
        c = {"name": name, "q": enc(q), "k": enc(k), "v": enc(v), "dOut": enc(dout)}
        if mask is not None:
            c["mask"] = enc(mask)
        if bias is not None:
            c["bias"] = enc(bias, allow_inf=True)
        if causal is not None:
            c["causal"] = causal
        if window is not None:
            c["window"] = list(window)
        if scale is not None:
            c["scale"] = scale
        c["out"] = enc(out.detach())
        c["dq"], c["dk"], c["dv"] = enc(q64.grad), enc(k64.grad), enc(v64.grad)
        if b64 is not None:
            c["dbias"] = enc(b64.grad)
        cases.append(c)

    add("rank2 plain L=S=5 E=3", 301, (5, 3), (5, 3), (5, 3))
    add("rank3 plain B=2 L=3 S=4 E=4", 302, (2, 3, 4), (2, 4, 4), (2, 4, 4))
    add("rank4 plain B=2 H=2 L=S=4 E=4", 303, (2, 2, 4, 4), (2, 2, 4, 4), (2, 2, 4, 4))
    add("L>S L=6 S=3, E=4 Ev=5", 304, (1, 2, 6, 4), (1, 2, 3, 4), (1, 2, 3, 5))
    add("custom scale 0.37", 305, (1, 2, 4, 6), (1, 2, 5, 6), (1, 2, 5, 6), scale=0.37)
    add("mask [L,S] random", 306, (2, 2, 4, 4), (2, 2, 5, 4), (2, 2, 5, 4), mask_fn=lambda: rand_mask(4, 5))
    add("mask [B,1,1,S] key padding", 307, (2, 2, 4, 4), (2, 2, 6, 4), (2, 2, 6, 4),
        mask=torch.tensor([1, 1, 1, 1, 0, 0, 1, 1, 0, 1, 1, 1], dtype=torch.float32).reshape(2, 1, 1, 6))
    add("bias [H,L,S] random normal (dbias summed over B)", 308, (2, 3, 4, 4), (2, 3, 5, 4), (2, 3, 5, 4),
        bias_fn=lambda: randn(3, 4, 5))
    add("bias [S] broadcast (dbias summed over B,H,L)", 309, (2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 4),
        bias_fn=lambda: randn(5))

    def bias_some_neg_inf():
        b = randn(2, 4, 5)
        b[0, 0, 1] = b[0, 2, 4] = b[1, 1, 0] = b[1, 3, 2] = b[1, 3, 3] = float("-inf")
        return b

    add("bias with -inf entries", 310, (1, 2, 4, 4), (1, 2, 5, 4), (1, 2, 5, 4), bias_fn=bias_some_neg_inf)
    add("causal top-left L=S=5", 311, (1, 2, 5, 4), (1, 2, 5, 4), (1, 2, 5, 4), causal="top-left")
    add("causal top-left L>S (L=6 S=3)", 312, (1, 2, 6, 4), (1, 2, 3, 4), (1, 2, 3, 4), causal="top-left")
    add("causal bottom-right L<S (L=3 S=6)", 313, (1, 2, 3, 4), (1, 2, 6, 4), (1, 2, 6, 4),
        causal="bottom-right")
    add("causal bottom-right L>S (L=6 S=3) fully blocked first rows", 314,
        (1, 2, 6, 4), (1, 2, 3, 4), (1, 2, 3, 4), causal="bottom-right")
    add("window [2,1] L<S (L=4 S=7)", 315, (1, 2, 4, 4), (1, 2, 7, 4), (1, 2, 7, 4), window=(2, 1))
    add("window [1,-1] unbounded right L=S=6", 316, (1, 2, 6, 4), (1, 2, 6, 4), (1, 2, 6, 4), window=(1, -1))
    add("window [2,-1] + causal bottom-right L<S (L=4 S=7)", 317, (1, 2, 4, 4), (1, 2, 7, 4), (1, 2, 7, 4),
        causal="bottom-right", window=(2, -1))
    add("window [1,0] + causal top-left L<S (L=4 S=7)", 318, (1, 2, 4, 4), (1, 2, 7, 4), (1, 2, 7, 4),
        causal="top-left", window=(1, 0))
    add("GQA Hq=4 Hkv=2 (dk, dv summed over the group)", 319, (2, 4, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3))
    add("MQA Hq=4 Hkv=1", 320, (1, 4, 4, 4), (1, 1, 5, 4), (1, 1, 5, 4))
    add("GQA Hq=4 Hkv=2 + causal top-left + mask [B,1,1,S]", 321, (2, 4, 5, 4), (2, 2, 5, 4), (2, 2, 5, 4),
        causal="top-left",
        mask=torch.tensor([1, 1, 1, 0, 1, 1, 0, 1, 1, 1], dtype=torch.float32).reshape(2, 1, 1, 5))
    add("large logits (q,k x4)", 322, (1, 2, 4, 4), (1, 2, 5, 4), (1, 2, 5, 4), qk_mul=4.0)

    def mask_dead_row():
        m = rand_mask(4, 5)
        m[2] = 0.0
        return m

    add("fully masked row via mask", 323, (1, 2, 4, 4), (1, 2, 5, 4), (1, 2, 5, 4), mask_fn=mask_dead_row)

    def bias_dead_row():
        b = randn(2, 4, 5)
        b[1, 1, :] = float("-inf")
        return b

    add("fully masked row via bias -inf row", 324, (1, 2, 4, 4), (1, 2, 5, 4), (1, 2, 5, 4),
        bias_fn=bias_dead_row)
    add("longer L=S=40 causal (several flash tiles)", 325, (1, 2, 40, 8), (1, 2, 40, 8), (1, 2, 40, 8),
        causal="bottom-right")
    for c in cases:
        for g in ("dq", "dk", "dv", "dbias"):
            if g in c:
                assert all(math.isfinite(x) for x in c[g]["data"]), f"{c['name']}: non-finite {g}"
    return cases


def main(only=None):
    torch.set_default_dtype(torch.float32)
    os.makedirs(OUT_DIR, exist_ok=True)
    if only not in (None, "backward"):
        raise SystemExit(f"make_fixtures.py: unknown section {only!r} (known: backward)")
    if only is None:
        write_json("sdpa.json", {"torch": torch.__version__, "cases": sdpa_cases()})
        write_json("mha.json", {"torch": torch.__version__, "cases": mha_cases()})
        write_json("position.json", position())
    write_json("backward.json", {"torch": torch.__version__, "cases": backward_cases()})


if __name__ == "__main__":
    import sys

    main(sys.argv[1] if len(sys.argv) > 1 else None)
