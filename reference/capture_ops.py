#!/usr/bin/env python3
"""Capture op-level parity fixtures from PyTorch for kinema's kernels.

Each fixture is computed with the PyTorch expression the upstream models use (cited below), on
seeded inputs, in float32 on the CPU, and stored in one .npz with a `meta.json` entry (torch
version, seed, this script's SHA-256). `tests/torch_parity.rs` refuses a fixture whose recorded
script hash differs from this file, so fixtures and script cannot drift apart.

Usage (needs torch and numpy; runs in seconds):
    python3 reference/capture_ops.py -o tests/fixtures/ops_torch.npz
"""

import argparse
import hashlib
import json
import math
import os
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

SEED = 20261129


def sha256_of_this_script():
    with open(os.path.abspath(__file__), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    out = {}

    def put(name, t):
        out[name] = t.detach().cpu().contiguous().numpy()

    # Activations: torch's exact (erf) GELU, tanh GELU, SiLU, ReLU, LeakyReLU(0.01), the ones
    # Kimodo (exact GELU), Llama (SiLU) and MotionBricks (ReLU, LeakyReLU 0.01) use.
    x = torch.cat([torch.linspace(-12, 12, 2001), torch.randn(999) * 3]).float()
    put("act.x", x)
    put("act.gelu", F.gelu(x))
    put("act.gelu_tanh", F.gelu(x, approximate="tanh"))
    put("act.silu", F.silu(x))
    put("act.relu", F.relu(x))
    put("act.leaky_relu", F.leaky_relu(x, 0.01))
    g, u = torch.randn(3, 77), torch.randn(3, 77)
    put("swiglu.gate", g)
    put("swiglu.up", u)
    put("swiglu.out", F.silu(g) * u)

    # LayerNorm as nn.TransformerEncoderLayer uses it (biased variance, eps 1e-5).
    x = torch.randn(7, 1024) * 2 + 0.5
    w, b = torch.rand(1024) + 0.5, torch.randn(1024) * 0.1
    put("layer_norm.x", x)
    put("layer_norm.w", w)
    put("layer_norm.b", b)
    put("layer_norm.out", F.layer_norm(x, (1024,), w, b, 1e-5))

    # RMSNorm as Hugging Face Llama in f32: x * rsqrt(mean(x^2) + eps) * weight.
    x = torch.randn(5, 4096)
    w = torch.rand(4096) + 0.5
    put("rms_norm.x", x)
    put("rms_norm.w", w)
    put("rms_norm.out", w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)))

    # Softmax with a scale folded in.
    x = torch.randn(9, 254) * 4
    put("softmax.x", x)
    put("softmax.out", torch.softmax(x * 0.125, dim=-1))

    # Attention: scaled_dot_product_attention (math), GQA by repeat_interleave of kv heads,
    # key padding (True = keep in kinema's u32 mask), and causal.
    B, S, H, KH, D = 2, 37, 4, 2, 32
    q, k, v = torch.randn(B, S, H, D), torch.randn(B, S, KH, D), torch.randn(B, S, KH, D)
    put("attn.q", q)
    put("attn.k", k)
    put("attn.v", v)
    keep = torch.ones(B, S, dtype=torch.bool)
    keep[1, 30:] = False
    keep[0, 3] = False
    put("attn.keep", keep.to(torch.int32))
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(H // KH, 1), v.transpose(1, 2).repeat_interleave(H // KH, 1)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        none = F.scaled_dot_product_attention(qh, kh, vh)
        pad = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=keep[:, None, None, :])
        causal = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
    put("attn.none", none.transpose(1, 2))
    put("attn.pad", pad.transpose(1, 2))
    put("attn.causal", causal.transpose(1, 2))

    # RoPE, Hugging Face Llama (rotate_half; inv_freq = 1/theta^(arange(0,d,2)/d) in f32;
    # angle = pos * inv_freq in f32; cos/sin in f32), and the interleaved pairing.
    T, RH, RD, theta = 19, 3, 64, 500000.0
    x = torch.randn(T, RH, RD)
    pos = torch.arange(T, dtype=torch.int64) * 97 + 5
    inv_freq = 1.0 / (theta ** (torch.arange(0, RD, 2, dtype=torch.int64).float() / RD))
    ang = pos.float()[:, None] * inv_freq[None, :]
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]

    def rotate_half(t):
        return torch.cat([-t[..., RD // 2:], t[..., : RD // 2]], dim=-1)

    put("rope.x", x)
    put("rope.pos", pos.to(torch.int32))
    put("rope.inv_freq", inv_freq)
    put("rope.half", x * cos + rotate_half(x) * sin)
    c1, s1 = ang.cos()[:, None, :], ang.sin()[:, None, :]
    xe, xo = x[..., 0::2], x[..., 1::2]
    inter = torch.stack([xe * c1 - xo * s1, xo * c1 + xe * s1], dim=-1).reshape(T, RH, RD)
    put("rope.interleaved", inter)

    # Conv1d as MotionBricks' upsampler (kernel 3 with padding = dilation, kernel 1) and the
    # nearest x2 upsample.
    x = torch.randn(2, 16, 12)
    w3, b3 = torch.randn(8, 16, 3) * 0.3, torch.randn(8)
    w1, b1 = torch.randn(8, 16, 1) * 0.3, torch.randn(8)
    put("conv.x", x)
    put("conv.w3", w3)
    put("conv.b3", b3)
    put("conv.w1", w1)
    put("conv.b1", b1)
    put("conv.k3d2", F.conv1d(x, w3, b3, padding=2, dilation=2))
    put("conv.k1", F.conv1d(x, w1, b1))
    put("conv.up", F.interpolate(x, scale_factor=2, mode="nearest"))

    # Kimodo's PositionalEncoding (kimodo/model/backbone.py#L253-266): float32 torch.pow.
    dim, max_len = 64, 300
    position = torch.arange(0, max_len, dtype=torch.float32).unsqueeze(1)
    div_term = torch.pow(10000.0, -torch.arange(0, dim, 2).float() / dim)
    pe = torch.zeros(max_len, dim)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    put("posenc.pe", pe)

    # DDIM (eta 0) and separated CFG in f32, op order of kimodo/model/diffusion.py#L113-133 and
    # kimodo/model/cfg.py#L94-129.
    xt, x0 = torch.randn(3, 202, 8), torch.randn(3, 202, 8)
    coef = torch.tensor([1.7, 0.9, 0.83, 0.55])
    eps = (coef[0] * xt - x0) / coef[1]
    put("ddim.x_t", xt)
    put("ddim.x0", x0)
    put("ddim.coef", coef)
    put("ddim.out", x0 * coef[2] + coef[3] * eps)
    rows = torch.randn(3, 202, 8)
    t_, c_, u_ = rows[0], rows[1], rows[2]
    put("cfg.rows", rows)
    put("cfg.out3", u_ + 2.0 * (t_ - u_) + 1.5 * (c_ - u_))
    put("cfg.out2", rows[2] + 2.0 * (rows[0] - rows[2]))

    # MotionBricks gumbel_sample with injected uniforms (sampling.py#L4-14), and argmax ties.
    logits = (torch.randn(16, 8, 10) * 2).round() / 2
    uni = torch.rand(16, 8, 10)
    uni[0, 0, :3] = torch.tensor([0.0, 1e-30, 0.99999994])

    def log(t, eps=1e-20):
        return torch.log(t.clamp(min=eps))

    gum = -log(-log(uni))
    put("gumbel.logits", logits)
    put("gumbel.uniforms", uni)
    put("gumbel.tokens", (logits / max(1.0, 1e-10) + gum).argmax(dim=-1).to(torch.int32))
    put("argmax.tokens", logits.argmax(dim=-1).to(torch.int32))

    # LLM2Vec mean pooling: sum(h * mask) / sum(mask) over the sequence.
    h = torch.randn(2, 11, 64)
    m = torch.ones(2, 11)
    m[0, :4] = 0
    m[1, 9:] = 0
    put("pool.x", h)
    put("pool.mask", m.to(torch.int32))
    put("pool.out", (h * m[..., None]).sum(1) / m.sum(1, keepdim=True))

    # Linear with f32 and with bf16-stored weights (widened exactly, as strict mode does).
    x = torch.randn(13, 96)
    w, b = torch.randn(40, 96) * 0.2, torch.randn(40)
    wb = w.to(torch.bfloat16)
    put("linear.x", x)
    put("linear.w", w)
    put("linear.b", b)
    put("linear.out", F.linear(x, w, b))
    put("linear.w_bf16_as_f32", wb.float())
    put("linear.out_bf16w", F.linear(x, wb.float(), b))

    meta = {
        "script_sha256": sha256_of_this_script(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "seed": SEED,
        "device": "cpu",
        "threads": 1,
    }
    out["meta.json"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    d = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".npz.tmp")
    os.close(fd)
    with open(tmp, "wb") as f:
        np.savez(f, **out)
    os.replace(tmp, args.out)
    print(f"wrote {args.out}: {len(out)} arrays, meta {meta}")


if __name__ == "__main__":
    main()
