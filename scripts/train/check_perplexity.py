#!/usr/bin/env python3
"""Perplexity of a model folder on a text file with transformers, next to `tensorfold perplexity` on
the same model and file. Both score the text the same way: BOS + the text's tokens, cut into
non-overlapping windows of min(max_position_embeddings, 1024) tokens, each token scored after the
first of its window.

    python3 scripts/train/check_perplexity.py --model models/default --file models/default/heldout_sample.txt \
        --tensorfold build/tensorfold [--record]

--record writes perplexity.json into the model folder: the transformers value the tests compare with.
"""
import argparse
import json
import math
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer


def transformers_perplexity(model_dir, text, window):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    ids = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json")).encode(text).ids
    nll, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids) - 1, window):
            chunk = torch.tensor([ids[start:start + window]])
            if chunk.shape[1] < 2:
                break
            logits = model(input_ids=chunk).logits[0].double()
            nll += F.cross_entropy(logits[:-1], chunk[0, 1:], reduction="sum").item()
            count += chunk.shape[1] - 1
    return math.exp(nll / count), count


def tensorfold_perplexity(binary, model_dir, path):
    r = subprocess.run([binary, "perplexity", "--model", model_dir, "--file", path, "--json", "--device", "cpu"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"tensorfold perplexity failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out["perplexity"], out["tokens"], out["window"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--file", required=True)
    ap.add_argument("--tensorfold", help="tensorfold binary; leave out to print the transformers value alone")
    ap.add_argument("--record", action="store_true", help="write perplexity.json into the model folder")
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    window = min(int(cfg.get("max_position_embeddings", 2048)), 1024)
    text = open(a.file, encoding="utf-8").read()
    ppl, n = transformers_perplexity(a.model, text, window)
    print(f"transformers: perplexity {ppl:.4f} over {n} tokens (window {window})")
    if a.record:
        rec = {"file": os.path.basename(a.file), "transformers_perplexity": ppl, "tokens": n, "window": window,
               "dtype": "float32 compute on the bf16 weights"}
        json.dump(rec, open(os.path.join(a.model, "perplexity.json"), "w"), indent=2)
    if not a.tensorfold:
        return 0
    try:
        tppl, tn, tw = tensorfold_perplexity(a.tensorfold, a.model, a.file)
    except RuntimeError as e:
        print(f"tensorfold: no value: {e}")
        return 2
    rel = abs(tppl - ppl) / ppl
    print(f"tensorfold:   perplexity {tppl:.4f} over {tn} tokens (window {tw})")
    print(f"relative difference: {rel * 100:.4f}%")
    if tn != n:
        print(f"token counts differ: transformers {n}, tensorfold {tn}")
        return 1
    return 0 if rel <= 0.005 else 1


if __name__ == "__main__":
    sys.exit(main())
