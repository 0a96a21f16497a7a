#!/usr/bin/env python3
"""Time Hugging Face `LlamaModel` the way LLM2Vec runs it, at the Llama-3-8B shapes, so that
`kinema bench llm2vec` can be compared side by side in the same run (issue 11, part 8).

What runs: `transformers.LlamaModel` (eager or SDPA attention, `--attn`), bf16 weights drawn
from a seeded normal distribution (a LoRA-merged model has the same dense shapes, so merging
costs nothing at run time), bidirectional attention as LLM2Vec's `LlamaBiModel` does (an
explicit all-visible 4-D mask: transformers 5.x turns a plain padding mask causal, see
../shared/docs/upstream/llm2vec.md), mean pooling over the tokens. Timed with CUDA events
around each forward (GPU) or `perf_counter` (CPU), after warm-up; p50 / p99 / mean in ms.

    python3 reference/bench_llm2vec_torch.py --tokens 32 --batch 1 --runs 200
    python3 reference/bench_llm2vec_torch.py --tokens 32 --batch 16 --layers 32 --json
    python3 reference/bench_llm2vec_torch.py --dtype f32 --autocast fp16 --json

`--dtype f32` keeps PyTorch's default of TF32 off. `--autocast fp16|bf16` runs each forward under
`torch.autocast(device, dtype=...)` (mixed precision over the `--dtype` weights, which autocast
casts inside every forward); off by default.

Needs torch and transformers (the GPU machine has both); no weights are downloaded.
"""

import argparse
import json
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=32, help="tokens per prompt (default 32)")
    p.add_argument("--batch", type=int, default=1, help="prompts per forward (default 1)")
    p.add_argument("--layers", type=int, default=32, help="decoder layers (8B: 32)")
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--ffn", type=int, default=14336)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    p.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa")
    p.add_argument("--autocast", choices=["off", "fp16", "bf16"], default="off")
    p.add_argument("--device", default="cuda" if _cuda() else "cpu")
    p.add_argument("--runs", type=int, default=200, help="timed forwards (default 200)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    a = p.parse_args()
    for name in ("tokens", "batch", "layers", "runs"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1")
    return a


def _cuda():
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def main():
    a = parse_args()
    import torch
    from transformers import LlamaConfig, LlamaModel

    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    torch.manual_seed(a.seed)
    cfg = LlamaConfig(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=a.ffn,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        # Meta-Llama-3-8B(-Instruct): theta 500000, no rope_scaling (that came with 3.1).
        rope_theta=500000.0,
        attn_implementation=a.attn,
    )
    t0 = time.perf_counter()
    with torch.device(a.device):
        model = LlamaModel(cfg).to(dtype)
    with torch.no_grad():
        for prm in model.parameters():
            prm.normal_(0.0, 0.02)
        for mod in model.modules():
            if type(mod).__name__ == "LlamaRMSNorm":
                mod.weight.fill_(1.0)
    model.eval()
    for layer in model.layers:
        layer.self_attn.is_causal = False
    build_s = time.perf_counter() - t0

    gen = torch.Generator(device="cpu").manual_seed(a.seed + 1)
    ids = torch.randint(0, a.vocab, (a.batch, a.tokens), generator=gen).to(a.device)
    # Every query sees every key: LLM2Vec's bidirectional mask for an unpadded batch.
    mask4 = torch.zeros((a.batch, 1, a.tokens, a.tokens), dtype=dtype, device=a.device)

    cast = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.autocast)

    def forward():
        with torch.autocast(a.device.split(":")[0], dtype=cast, enabled=cast is not None):
            out = model(input_ids=ids, attention_mask=mask4).last_hidden_state
        return out.float().mean(dim=1)

    cuda = a.device.startswith("cuda")
    times = []
    with torch.inference_mode():
        for _ in range(a.warmup):
            forward()
        if cuda:
            torch.cuda.synchronize()
        for _ in range(a.runs):
            if cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                pooled = forward()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t = time.perf_counter()
                pooled = forward()
                times.append((time.perf_counter() - t) * 1e3)
    if not torch.isfinite(pooled).all():
        sys.exit("non-finite pooled output: the synthetic weights overflowed")
    times.sort()
    p50 = statistics.median(times)
    p99 = times[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))]
    params = sum(p.numel() for p in model.parameters())
    res = {
        "runner": "pytorch",
        "model": "LlamaModel (LLM2Vec bidirectional, mean pooled)",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "dtype": a.dtype,
        "attn": a.attn,
        "autocast": a.autocast,
        "layers": a.layers,
        "params": params,
        "tokens": a.tokens,
        "batch": a.batch,
        "runs": a.runs,
        "p50_ms": round(p50, 3),
        "p99_ms": round(p99, 3),
        "mean_ms": round(statistics.fmean(times), 3),
        "per_prompt_ms": round(p50 / a.batch, 3),
        "build_s": round(build_s, 2),
    }
    if a.json:
        print(json.dumps(res))
    else:
        print(
            f"llm2vec pytorch ({res['device']}, {a.dtype}, autocast {a.autocast}, {a.attn}): "
            f"{a.layers} layers, "
            f"{params / 1e9:.2f} B params, {a.tokens} tokens, batch {a.batch}, {a.runs} runs: "
            f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, mean {res['mean_ms']:.2f} ms "
            f"({res['per_prompt_ms']:.2f} ms per prompt)"
        )


if __name__ == "__main__":
    main()
