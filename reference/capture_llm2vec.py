#!/usr/bin/env python3
"""Capture LLM2Vec parity fixtures from the real upstream code on a seeded random tiny
Llama-3, for `kinema convert llm2vec` and the encoder's parity tests.

Runs Kimodo's vendored LLM2Vec (nv-tlabs/kimodo@7330e7e kimodo/model/llm2vec/, MIT, itself
McGill-NLP/llm2vec patched for transformers 5.x), extracted into a temporary folder from a
Kimodo git directory (--kimodo-git, a bare mirror is fine) and imported from there; nothing
upstream is written to the repository.

Writes tests/fixtures/llm2vec/tiny/ (or --out):
  Meta-Llama-3-8B-Instruct/          the tiny base in the Hugging Face layout, f32: config.json
                                     (no _name_or_path, like Meta's), model-0000k-of-0000n
                                     .safetensors shards + model.safetensors.index.json (a
                                     LlamaForCausalLM, lm_head included), tokenizer.json,
                                     tokenizer_config.json
  LLM2Vec-Meta-Llama-3-8B-Instruct-mntp/             PEFT LoRA (r=4, alpha=8, 7 projections),
                                     base_model_name_or_path meta-llama/Meta-Llama-3-8B-Instruct
  LLM2Vec-Meta-Llama-3-8B-Instruct-mntp-supervised/  PEFT LoRA (r=8, alpha=16), base
                                     McGill-NLP/LLM2Vec-Meta-Llama-3-8B-Instruct-mntp
  capture.npz    arrays (see capture.json "arrays")
  capture.json   metadata: prompts, per-capture token ids and pooled spans, versions, notes
  tokenizer_ids.json  the tiny tokenizer's ids (no special tokens) for every string of
                 ../tokenizer_strings.json, from Hugging Face tokenizers

The folder names are the real repositories' names so that the converter's identity checks and
chat-template rule see what they see with the real weights (llm2vec.md §2.5).

The tiny tokenizer: Llama-3's first 768 tiktoken ranks (Meta's tokenizer.model, --llama3-
tokenizer; all 256 single bytes lie among them) turned into a tokenizer.json by transformers'
TikTokenConverter exactly as the Llama-3 one is (Llama-3 pattern, ignore_merges), followed by
Llama-3's 256 special tokens with their names at ids 768..1023 (BOS <|begin_of_text|> = 768,
<|start_header_id|> = 774, <|end_header_id|> = 775, <|eot_id|> = 777). Vocabulary 1024.

Captures (f32, CPU), for template mode "on" (model name meta-llama/Meta-Llama-3-8B-Instruct,
so LLM2Vec adds the Llama-3 user header and <|eot_id|>) and "off" (empty name):
  one prompt at a time through LLM2Vec.encode (all-ones attention mask: bidirectional):
  input ids, embed mask, each decoder layer's output (before the final norm), the final-norm
  output, the pooled vector;
  one padded batch of all prompts through LLM2Vec.encode (left padding with the EOS id, as
  LLM2Vec sets it): transformers 5.x builds a *causal* mask for a padded batch
  (LlamaModel.forward calls masking_utils.create_causal_mask; LlamaBiModel's
  _update_causal_mask is never called), so a padded batch silently turns causal
  (llm2vec.md §2.4). The bidirectional ground truth is captured by replacing
  modeling_llama.create_causal_mask with masking_utils.create_bidirectional_mask for that run
  (pads masked as keys only, what upstream LLM2Vec did under transformers 4.43-4.44); the
  unpatched causal result is stored too, as a record of the hazard.
The supervised adapter is kept unmerged (PeftModel, as Kimodo runs it) and the MNTP one merged
(LLM2Vec.from_pretrained(..., merge_peft=True)); merged reference weights come from PEFT's own
merge_and_unload at the end.

Set-up: /work/wt/venv-torch (torch 2.15) + pip install transformers==5.1.0 peft==0.18.1
tokenizers==0.22.2 tiktoken.
  python reference/capture_llm2vec.py --kimodo-git /path/to/kimodo.git \
      --llama3-tokenizer /path/to/tokenizer.model
"""

import argparse
import hashlib
import importlib
import importlib.metadata as md
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

# Everything is local: no Hub look-ups for the adapters' base names.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# PEFT stores target_modules from a set: a fixed hash seed makes adapter_config.json (and so
# its SHA-256 in converted files) the same on every run.
if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from capture_tokenizer import LLAMA3_PATTERN, llama3_special_names  # noqa: E402

KIMODO_COMMIT = "7330e7e"
RANKS = 768
BASE_NAME = "meta-llama/Meta-Llama-3-8B-Instruct"
MNTP_NAME = "McGill-NLP/LLM2Vec-Meta-Llama-3-8B-Instruct-mntp"
BASE_DIR = "Meta-Llama-3-8B-Instruct"
MNTP_DIR = "LLM2Vec-Meta-Llama-3-8B-Instruct-mntp"
SUP_DIR = "LLM2Vec-Meta-Llama-3-8B-Instruct-mntp-supervised"
PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PROMPTS = [
    "A person walks forward.",
    "A person runs forward and then leaps over an obstacle in front of them.",
    "wave",
    "café déjà vu 🙂, 12345!",
]
MERGED_CHECKED = [
    "embed_tokens.weight",
    "layers.0.self_attn.q_proj.weight",
    "layers.0.input_layernorm.weight",
    "layers.1.mlp.down_proj.weight",
    "layers.2.mlp.gate_proj.weight",
    "layers.3.self_attn.k_proj.weight",
    "layers.3.self_attn.o_proj.weight",
    "norm.weight",
]


def sha256_bytes(b):
    return hashlib.sha256(b).hexdigest()


def versions(*names):
    out = {"python": sys.version.split()[0]}
    for n in names:
        try:
            out[n] = md.version(n)
        except md.PackageNotFoundError:
            out[n] = None
    return out


def extract_upstream(git_dir, tmp):
    """Kimodo's kimodo/model/llm2vec at KIMODO_COMMIT, as the package `llm2vec` in tmp.
    Its own __init__.py (which imports Kimodo's wrapper) is replaced by an empty one. The
    package is named `llm2vec`, upstream's own name, which PEFT records in the adapters'
    auto_mapping."""
    arc = subprocess.run(
        ["git", "--git-dir", git_dir, "archive", KIMODO_COMMIT, "kimodo/model/llm2vec"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", tmp], input=arc, check=True)
    src = os.path.join(tmp, "kimodo", "model", "llm2vec")
    pkg = os.path.join(tmp, "llm2vec")
    shutil.copytree(src, pkg)
    open(os.path.join(pkg, "__init__.py"), "w").close()
    sys.path.insert(0, tmp)
    l2v = importlib.import_module("llm2vec.llm2vec")
    bi = importlib.import_module("llm2vec.models.bidirectional_llama")
    rev = subprocess.run(
        ["git", "--git-dir", git_dir, "rev-parse", KIMODO_COMMIT],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return l2v, bi, rev


def tiny_tokenizer(tokenizer_model, tmp):
    """Llama-3's first RANKS ranks + its 256 specials, built as the Llama-3 tokenizer is."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    lines = open(tokenizer_model, "rb").read().splitlines()
    kept = [ln for ln in lines if ln and int(ln.split()[1]) < RANKS]
    assert len(kept) == RANKS
    path = os.path.join(tmp, "tiny.tiktoken")
    with open(path, "wb") as f:
        f.write(b"\n".join(kept) + b"\n")
    names = llama3_special_names()
    backend = TikTokenConverter(
        vocab_file=path, pattern=LLAMA3_PATTERN, extra_special_tokens=names
    ).converted()
    backend.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A",
                pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                special_tokens=[("<|begin_of_text|>", RANKS)],
            ),
        ]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
    )
    assert tok.convert_tokens_to_ids("<|eot_id|>") == RANKS + 9
    assert len(tok) == RANKS + 256
    single = [tok.convert_tokens_to_ids(backend.model.id_to_token(i)) for i in range(256)]
    assert all(i < RANKS for i in single)
    return tok


def seeded_(t, std, gen):
    import torch

    with torch.no_grad():
        t.copy_(torch.randn(t.shape, generator=gen, dtype=torch.float32) * std)


def build_base(out_dir, tok, gen):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        bos_token_id=RANKS,
        eos_token_id=RANKS + 9,
        tie_word_embeddings=False,
        hidden_act="silu",
    )
    model = LlamaForCausalLM(cfg).to(torch.float32).eval()
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            seeded_(p, 0.1, gen)
            with torch.no_grad():
                p.add_(1.0)
        elif "embed_tokens" in name:
            seeded_(p, 1.0, gen)
        else:
            seeded_(p, 1.0 / math.sqrt(p.shape[1]), gen)
    model.save_pretrained(out_dir, max_shard_size="500KB")
    tok.save_pretrained(out_dir)
    # Meta's config.json has no _name_or_path; the chat-template rule must not find one here.
    cpath = os.path.join(out_dir, "config.json")
    c = json.load(open(cpath))
    c.pop("_name_or_path", None)
    json.dump(c, open(cpath, "w"), indent=2)
    tcpath = os.path.join(out_dir, "tokenizer_config.json")
    tc = json.load(open(tcpath))
    tc["tokenizer_class"] = "PreTrainedTokenizerFast"
    json.dump(tc, open(tcpath, "w"), indent=2)
    for extra in ["generation_config.json", "chat_template.jinja", "special_tokens_map.json"]:
        p = os.path.join(out_dir, extra)
        if os.path.exists(p):
            os.remove(p)
    return cfg


def build_adapter(bi_mod, base_dir, out_dir, r, alpha, base_name, gen):
    import torch
    from peft import LoraConfig, get_peft_model

    model = bi_mod.LlamaBiModel.from_pretrained(base_dir, dtype=torch.float32)
    lcfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.05, bias="none", target_modules=PROJ)
    pm = get_peft_model(model, lcfg)
    for name, p in pm.named_parameters():
        if "lora_A" in name:
            seeded_(p, 0.5 / math.sqrt(p.shape[1]), gen)
        elif "lora_B" in name:
            seeded_(p, 0.1, gen)
    pm.peft_config["default"].base_model_name_or_path = base_name
    pm.save_pretrained(out_dir)
    readme = os.path.join(out_dir, "README.md")
    if os.path.exists(readme):
        os.remove(readme)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kimodo-git", default="/work/.mirror/nv-tlabs+kimodo/repo")
    ap.add_argument("--llama3-tokenizer", default="/work/wt/assets/tokenizer.model")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "fixtures", "llm2vec", "tiny"))
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    tmp = tempfile.mkdtemp(prefix="capture_llm2vec_")
    try:
        l2v_mod, bi_mod, kimodo_rev = extract_upstream(args.kimodo_git, tmp)
        from peft import PeftModel
        import transformers.models.llama.modeling_llama as modeling_llama
        from transformers import masking_utils

        out = os.path.abspath(args.out)
        if os.path.exists(out):
            shutil.rmtree(out)
        os.makedirs(out)
        base_dir = os.path.join(out, BASE_DIR)
        mntp_dir = os.path.join(out, MNTP_DIR)
        sup_dir = os.path.join(out, SUP_DIR)
        gen = torch.Generator().manual_seed(args.seed)

        tok = tiny_tokenizer(args.llama3_tokenizer, tmp)
        cfg = build_base(base_dir, tok, gen)
        build_adapter(bi_mod, base_dir, mntp_dir, 4, 8, BASE_NAME, gen)
        build_adapter(bi_mod, base_dir, sup_dir, 8, 16, MNTP_NAME, gen)

        # The tiny tokenizer's ids for the shared tokenizer test strings.
        strings = json.load(open(os.path.join(out, "..", "tokenizer_strings.json")))
        ids = []
        for s in strings:
            try:
                ids.append(tok(s, add_special_tokens=False)["input_ids"])
            except Exception:  # lone surrogates: the Rust binding cannot take the string
                ids.append(None)
        json.dump({"ids": ids}, open(os.path.join(out, "tokenizer_ids.json"), "w"))

        # The upstream model: MNTP merged, supervised unmerged (llm2vec.md §1.2).
        enc = l2v_mod.LLM2Vec.from_pretrained(
            base_dir, peft_model_name_or_path=mntp_dir, merge_peft=True, dtype=torch.float32
        )
        inner = enc.model  # the LlamaBiModel with MNTP merged
        enc.model = PeftModel.from_pretrained(inner, sup_dir)
        enc.model.eval()
        assert enc.tokenizer.padding_side == "left"

        layers_out = {}
        hooks = []
        for i, layer in enumerate(inner.layers):
            def hook(_m, _inp, o, i=i):
                layers_out[i] = (o[0] if isinstance(o, tuple) else o).detach().clone()
            hooks.append(layer.register_forward_hook(hook))
        hooks.append(inner.norm.register_forward_hook(
            lambda _m, _i, o: layers_out.__setitem__("norm", o.detach().clone())))
        recorded = []
        orig_tokenize = enc.tokenize

        def tokenize(texts):
            f = orig_tokenize(texts)
            recorded.append({k: v.clone() for k, v in f.items()})
            return f

        enc.tokenize = tokenize
        orig_mask = modeling_llama.create_causal_mask

        def bidirectional_mask(**kw):
            return masking_utils.create_bidirectional_mask(
                config=kw["config"], input_embeds=kw["input_embeds"], attention_mask=kw["attention_mask"]
            )

        arrays = {}
        meta_modes = {}
        n_layers = cfg.num_hidden_layers
        for mode, name in [("on", BASE_NAME), ("off", "")]:
            enc.model.config._name_or_path = name
            assert inner.config._name_or_path == name
            singles = []
            for i, p in enumerate(PROMPTS):
                recorded.clear()
                layers_out.clear()
                with torch.no_grad():
                    pooled = enc.encode([p], show_progress_bar=False, device="cpu")
                f = recorded[-1]
                k = f"{mode}_p{i}"
                arrays[f"{k}_input_ids"] = f["input_ids"][0].numpy().astype(np.int32)
                arrays[f"{k}_embed_mask"] = f["embed_mask"][0].numpy().astype(np.int32)
                for j in range(n_layers):
                    arrays[f"{k}_layer{j}"] = layers_out[j][0].numpy()
                arrays[f"{k}_final_norm"] = layers_out["norm"][0].numpy()
                arrays[f"{k}_pooled"] = pooled[0].numpy()
                singles.append(pooled[0])
                n = int(f["embed_mask"][0].sum())
                meta_modes.setdefault(mode, {"prompts": []})["prompts"].append(
                    {"ids": f["input_ids"][0].tolist(), "pooled_last": n}
                )
            # One padded batch, bidirectional (patched mask) and as transformers 5.x runs it.
            batches = {}
            for kind in ["bidirectional", "causal_transformers5"]:
                modeling_llama.create_causal_mask = bidirectional_mask if kind == "bidirectional" else orig_mask
                recorded.clear()
                layers_out.clear()
                try:
                    with torch.no_grad():
                        pooled = enc.encode(PROMPTS, batch_size=len(PROMPTS), show_progress_bar=False, device="cpu")
                finally:
                    modeling_llama.create_causal_mask = orig_mask
                batches[kind] = pooled
                if kind == "bidirectional":
                    f = recorded[-1]
                    arrays[f"{mode}_batch_input_ids"] = f["input_ids"].numpy().astype(np.int32)
                    arrays[f"{mode}_batch_attention_mask"] = f["attention_mask"].numpy().astype(np.int32)
                    arrays[f"{mode}_batch_embed_mask"] = f["embed_mask"].numpy().astype(np.int32)
                    arrays[f"{mode}_batch_final_norm"] = layers_out["norm"].numpy()
                arrays[f"{mode}_batch_pooled_{kind}"] = pooled.numpy()
            # LLM2Vec.encode's own row order: by the length of the string it builds.
            order = [int(i) for i in np.argsort([-enc._text_length(enc._convert_to_str("", p)) for p in PROMPTS])]
            single = torch.stack(singles)
            rel = lambda a, b: float(torch.linalg.norm(a - b) / torch.linalg.norm(b))
            meta_modes[mode].update(
                {
                    "model_name": name,
                    "batch_row_order": order,
                    "batch_bidirectional_vs_single_rel_l2": rel(batches["bidirectional"], single),
                    "batch_bidirectional_vs_single_max_abs": float((batches["bidirectional"] - single).abs().max()),
                    "batch_causal_vs_single_rel_l2": rel(batches["causal_transformers5"], single),
                }
            )
            assert meta_modes[mode]["batch_bidirectional_vs_single_rel_l2"] < 1e-5
        for h in hooks:
            h.remove()

        # Merged reference weights: PEFT merges the supervised adapter into the MNTP-merged model.
        merged = enc.model.merge_and_unload()
        sd = merged.state_dict()
        for n in MERGED_CHECKED:
            arrays[f"merged.{n}"] = sd[n].detach().numpy().copy()

        # RoPE llama3 scaling as transformers computes it (the converter's rope_freqs).
        from transformers import LlamaConfig
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        rope_cases = []
        for hidden, heads in [(4096, 32), (64, 4)]:
            params = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
            c = LlamaConfig(hidden_size=hidden, num_attention_heads=heads, rope_parameters=params)
            inv, _ = ROPE_INIT_FUNCTIONS["llama3"](c, "cpu")
            d = hidden // heads
            default = 1.0 / (500000.0 ** (torch.arange(0, d, 2, dtype=torch.int64).to(torch.float) / d))
            arrays[f"rope_llama3_d{d}_inv_freq"] = inv.numpy().astype(np.float32)
            arrays[f"rope_default_d{d}_inv_freq"] = default.numpy().astype(np.float32)
            rope_cases.append({"head_dim": d, **params})

        np.savez(os.path.join(out, "capture.npz"), **arrays)
        script = open(os.path.abspath(__file__), "rb").read()
        meta = {
            "script_sha256": sha256_bytes(script),
            "upstream": {"repo": "nv-tlabs/kimodo", "commit": kimodo_rev, "path": "kimodo/model/llm2vec"},
            "versions": versions("torch", "transformers", "peft", "tokenizers", "tiktoken", "numpy", "safetensors"),
            "seed": args.seed,
            "dtype": "float32",
            "device": "cpu",
            "llama3_tokenizer_sha256": sha256_bytes(open(args.llama3_tokenizer, "rb").read()),
            "tokenizer": {"ranks": RANKS, "vocab": RANKS + 256, "bos": RANKS, "eos_pad": RANKS + 9},
            "config": {"hidden": 64, "ffn": 128, "layers": 4, "heads": 4, "kv_heads": 2, "rms_eps": 1e-5,
                       "rope_theta": 500000.0},
            "adapters": [
                {"dir": MNTP_DIR, "base_model_name_or_path": BASE_NAME, "r": 4, "lora_alpha": 8, "merged_upstream": True},
                {"dir": SUP_DIR, "base_model_name_or_path": MNTP_NAME, "r": 8, "lora_alpha": 16, "merged_upstream": False},
            ],
            "prompts": PROMPTS,
            "modes": meta_modes,
            "merged_checked": MERGED_CHECKED,
            "rope_llama3_cases": rope_cases,
            "arrays": {k: [str(v.dtype), list(v.shape)] for k, v in arrays.items()},
            "notes": [
                "{mode}_p{i}_*: prompt i alone through LLM2Vec.encode; layer{j} = decoder layer j's output "
                "(the residual stream before the final norm), final_norm = the model's last_hidden_state, "
                "pooled = LLM2Vec's mean over the last sum(embed_mask) rows of final_norm.",
                "{mode}_batch_*: all prompts as one left-padded batch (rows in LLM2Vec's length-sorted order, "
                "batch_row_order; pooled rows back in prompt order). Ground truth = bidirectional "
                "(create_causal_mask replaced by create_bidirectional_mask: pads masked as keys only); "
                "pooled_causal_transformers5 is what transformers 5.x computes unpatched (causal), a record of "
                "the hazard, not a target.",
                "Template 'on' = model name meta-llama/Meta-Llama-3-8B-Instruct (the header and <|eot_id|> are "
                "added, and <|eot_id|> is pooled); 'off' = empty name (BOS + text).",
                "merged.*: PEFT merge_and_unload of the supervised adapter into the MNTP-merged model, f32.",
                "rope_*: transformers' llama3 and default inv_freq (f32) for the converter's rope_freqs.",
            ],
        }
        json.dump(meta, open(os.path.join(out, "capture.json"), "w"), indent=1)
        total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(out) for f in fs)
        print(f"wrote {out}: {total / 1e6:.2f} MB")
        for mode in meta_modes:
            m = meta_modes[mode]
            print(mode, "batch bidir vs single rel_l2", m["batch_bidirectional_vs_single_rel_l2"],
                  "causal vs single", m["batch_causal_vs_single_rel_l2"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
