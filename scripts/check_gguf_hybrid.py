#!/usr/bin/env python3
"""Checks that tests/python/test_gguf_hybrid.py's GGUF writer mirrors llama.cpp's convert_hf_to_gguf.py for the
hybrid archs: same tensor names, shapes, dtypes and values, same metadata keys and values. Runs only where the
llama.cpp sources (/tmp/lcpp/llama.cpp, or $LCPP_DIR) and a torch python ($TORCH_PYTHON, default
/work/torchenv/bin/python) exist; prints OK or the mismatches.

    python3 scripts/check_gguf_hybrid.py [--tf build/tensorfold] [--keep DIR]

With --tf it also checks tensorfold's logprobs from each converter GGUF against the HF folder, and compares
llama.cpp's greedy continuations on the trained models/hybrid-nemotron GGUF with tensorfold's.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

LCPP = os.environ.get("LCPP_DIR", "/tmp/lcpp/llama.cpp")
TORCH_PY = os.environ.get("TORCH_PYTHON", "/work/torchenv/bin/python")

# The converter checks the tokenizer's pre-tokenizer by hash; ours split like llama-bpe, which it does not list.
WRAPPER = """import sys, runpy
sys.path.insert(0, {lcpp!r})
import conversion.base as b
b.TextModel.get_vocab_base_pre = lambda self, tok: "llama-bpe"
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[1:]
runpy.run_path({lcpp!r} + "/convert_hf_to_gguf.py", run_name="__main__")
"""

# llama.cpp cannot convert qwen3_next's dense mlp_only_layers, so that case is the fixture config without them.
MAKE_QWEN3_NEXT = """import json, sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
cfg = json.load(open(sys.argv[1]))
for k in ("architectures", "transformers_version", "dtype", "model_type"):
    cfg.pop(k, None)
cfg["mlp_only_layers"] = []
torch.manual_seed(0)
m = AutoModelForCausalLM.from_config(AutoConfig.for_model("qwen3_next", **cfg))
with torch.no_grad():
    for n, p in m.named_parameters():
        p.copy_(0.1 * torch.randn(p.shape))
        if n.endswith("A_log"):
            p.copy_(torch.empty(p.shape).uniform_(0.05, 1.0).log())
m.to(torch.bfloat16).save_pretrained(sys.argv[2], safe_serialization=True)
"""

# Written by the converter from generation_config / the model name; not read by TensorFold.
INFO_KEYS = ("general.name", "general.size_label", "general.sampling.", "general.basename", "general.finetune",
             "tokenizer.ggml.add_", "tokenizer.chat_template", "tokenizer.ggml.merges")
# The mirror's tokenizer serves the tests only: its token types are compared by type, not value.
TYPE_ONLY_KEYS = ("tokenizer.ggml.token_type",)


def plain_tokenizer_config(d):
    # Without it AutoTokenizer picks the family's tokenizer class, which adds special tokens past the vocab.
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast"}, f)


def gguf_py():
    for p in [os.path.join(LCPP, "gguf-py")] + glob.glob("/tmp/*/llama_cpp_python-*/vendor/llama.cpp/gguf-py"):
        if os.path.isdir(os.path.join(p, "gguf")):
            return p
    return None


def read(path):
    import gguf
    r = gguf.GGUFReader(path)
    meta = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        try:
            meta[k] = (tuple(int(t) for t in f.types), f.contents())
        except Exception:  # noqa: BLE001 - a field the reader cannot decode is compared by type only
            meta[k] = (tuple(int(t) for t in f.types), None)
    tensors = {t.name: (t.tensor_type.name, [int(x) for x in t.shape], np.array(t.data)) for t in r.tensors}
    return meta, tensors


def compare(label, real_path, ours_path):
    bad, notes = [], []
    rm, rt = read(real_path)
    om, ot = read(ours_path)
    for k in sorted(set(rm) | set(om)):
        if k.startswith(INFO_KEYS):
            if (k in rm) != (k in om):
                notes.append(f"informational key {k} only in {'converter' if k in rm else 'mirror'}")
            continue
        if k not in om:
            bad.append(f"key {k} missing in mirror (converter: {str(rm[k])[:200]})")
        elif k not in rm:
            bad.append(f"key {k} only in mirror: {om[k]}")
        elif rm[k][0] != om[k][0]:
            bad.append(f"key {k} type {rm[k][0]} vs mirror {om[k][0]}")
        elif k in TYPE_ONLY_KEYS:
            continue
        elif rm[k][1] != om[k][1] and not (isinstance(rm[k][1], float) and abs(rm[k][1] - om[k][1]) <= 1e-7 * abs(rm[k][1])):
            bad.append(f"key {k} value {str(rm[k][1])[:200]} vs mirror {str(om[k][1])[:200]}")
    for n in sorted(set(rt) | set(ot)):
        if n not in ot:
            bad.append(f"tensor {n} missing in mirror")
            continue
        if n not in rt:
            bad.append(f"tensor {n} only in mirror")
            continue
        (rd, rs, rv), (od, os_, ov) = rt[n], ot[n]
        if rd != od or rs != os_:
            bad.append(f"tensor {n}: {rd} {rs} vs mirror {od} {os_}")
            continue
        a, b = rv.astype(np.float32).ravel(), ov.astype(np.float32).ravel()
        if not np.array_equal(a, b):
            ulps = np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64)).max()
            msg = f"tensor {n}: values differ by up to {ulps} ulp"
            # numpy's exp and torch's exp round some values differently (ssm_a = -exp(A_log)); the loader
            # recovers the bf16 A_log from either.
            (notes if n.endswith("ssm_a") and ulps <= 4 else bad).append(msg)
    print(f"{label}: {'OK' if not bad else 'MISMATCH'} ({len(rt)} tensors, {len(rm)} keys)")
    for m in bad:
        print("  MISMATCH", m)
    for m in notes:
        print("  note", m)
    return not bad


def tf_equal(bin_path, name, folder, gguf_path, work):
    from test_gguf_hybrid import echo_logprobs
    cfg = json.load(open(os.path.join(folder, "config.json")))
    if cfg["model_type"] == "nemotron_h" and cfg.get("chunk_size", 128) != 128:
        # GGUF has no Mamba2 chunk size; the folder is compared at the default the GGUF loads with.
        d = os.path.join(work, name + ".chunk128")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(folder, d)
        cfg["chunk_size"] = 128
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
        folder = d
    prompt = [3 + (7 + 13 * i) % 500 for i in range(150)]
    want = echo_logprobs(bin_path, folder, prompt)
    got = echo_logprobs(bin_path, gguf_path, prompt)
    same = want == got
    print(f"{name}: tensorfold HF folder vs converter GGUF logprobs over {len(want[0])} positions: "
          f"{'bit-identical' if same else 'DIFFERENT'}")
    return same


def llama_vs_tf(bin_path, gguf_path, steps=32):
    """Greedy continuations of llama.cpp (llama-cpp-python) and tensorfold on the same GGUF."""
    try:
        from llama_cpp import Llama
    except ImportError:
        print("llama.cpp comparison: SKIP (llama_cpp not importable)")
        return True
    llm = Llama(model_path=gguf_path, n_ctx=1024, verbose=False, logits_all=True, n_threads=2, type_k=0, type_v=0)
    texts = ["Once upon a time", "The quick brown fox jumps over the lazy dog. Then", "In the beginning there was",
             "She opened the door and saw"]
    prompts = [llm.tokenize(t.encode(), add_bos=True, special=False) for t in texts]
    prompts.append([3 + (7 + 13 * i) % 500 for i in range(150)])
    agree = total = 0
    for p in prompts:
        llm.reset()
        llm.eval(p)
        ref, margins = [], []
        for _ in range(steps):
            sc = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            top = np.argsort(sc)[::-1][:2]
            if int(top[0]) == llm.token_eos():
                break  # tensorfold stops there too and does not print it
            ref.append(int(top[0]))
            margins.append(float(sc[top[0]] - sc[top[1]]))
            llm.eval([int(top[0])])
        out = subprocess.run([bin_path, "run", "--model", gguf_path, "--prompt-ids", ",".join(map(str, p)), "--ids",
                              "--temperature", "0", "--max-tokens", str(steps), "--threads", "2"],
                             capture_output=True, text=True, check=True)
        ours = [int(t) for t in out.stdout.strip().split(",") if t]
        k = 0
        while k < min(len(ref), len(ours)) and ref[k] == ours[k]:
            k += 1
        n = max(len(ref), len(ours))
        agree += k
        total += n
        where = "" if k == n else (f"; first difference at step {k}: llama.cpp "
                                   f"{ref[k] if k < len(ref) else 'EOS'} (its top-2 margin "
                                   f"{margins[k] if k < len(margins) else float('nan'):.4g}), tensorfold "
                                   f"{ours[k] if k < len(ours) else 'EOS'}")
        print(f"  prompt of {len(p)} tokens: {k}/{n} greedy steps agree, smallest llama.cpp margin "
              f"{min(margins[:max(k, 1)]):.4g}{where}")
    print(f"llama.cpp vs tensorfold on {os.path.basename(gguf_path)}: {agree}/{total} greedy steps agree")
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tf", help="also check that this tensorfold binary gives bit-identical logprobs from the "
                    "converter's GGUF and the HF folder")
    ap.add_argument("--keep", help="write the sources and GGUFs here instead of a temporary folder")
    args = ap.parse_args()
    gp = gguf_py()
    if not os.path.isfile(os.path.join(LCPP, "convert_hf_to_gguf.py")) or not gp or not os.path.isfile(TORCH_PY):
        print(f"SKIP: needs {LCPP}/convert_hf_to_gguf.py, its gguf-py and {TORCH_PY}")
        return 0
    from test_gguf_hybrid import GOLDEN, VOCAB_TOKENS, byte_level_tokens, export_hybrid_gguf, write_tokenizer_json
    work = args.keep or tempfile.mkdtemp(prefix="check_gguf_hybrid_")
    os.makedirs(work, exist_ok=True)
    wrapper = os.path.join(work, "convert.py")
    with open(wrapper, "w") as f:
        f.write(WRAPPER.format(lcpp=LCPP))
    env = dict(os.environ, PYTHONPATH=gp)
    tokens = byte_level_tokens(VOCAB_TOKENS)
    sources = {}
    for name in ("nemotron_h_moe", "nemotron_h_dense", "qwen3_5_text", "qwen3_5_moe_text"):
        d = os.path.join(work, name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(os.path.join(GOLDEN, name), d)
        write_tokenizer_json(d, tokens)
        plain_tokenizer_config(d)
        sources[name] = (d, tokens)
    d = os.path.join(work, "qwen3_next_moe_only")
    shutil.rmtree(d, ignore_errors=True)
    subprocess.run([TORCH_PY, "-c", MAKE_QWEN3_NEXT, os.path.join(GOLDEN, "qwen3_next", "config.json"), d], check=True,
                   capture_output=True)
    write_tokenizer_json(d, tokens)
    plain_tokenizer_config(d)
    sources["qwen3_next_moe_only"] = (d, tokens)
    trained = os.path.join(ROOT, "models", "hybrid-nemotron")
    if os.path.isdir(trained):
        sources["hybrid-nemotron"] = (trained, None)
    ok = True
    for name, (d, toks) in sources.items():
        real = os.path.join(work, name + ".converter.gguf")
        out = subprocess.run([TORCH_PY, wrapper, d, "--no-mtp", "--outtype", "f32", "--outfile", real], env=env,
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{name}: converter failed\n{out.stderr[-2000:]}")
            ok = False
            continue
        ours = os.path.join(work, name + ".mirror.gguf")
        if toks is None:
            from gguf import GGUFReader
            toks = [str(bytes(p), "utf-8") for p in GGUFReader(real).fields["tokenizer.ggml.tokens"].parts[6::2]]
        export_hybrid_gguf(d, ours, toks)
        ok &= compare(name, real, ours)
        if args.tf:
            ok &= tf_equal(args.tf, name, d, real, work)
            if name == "hybrid-nemotron":
                llama_vs_tf(args.tf, real)
    print("OK" if ok else "MISMATCHES")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
