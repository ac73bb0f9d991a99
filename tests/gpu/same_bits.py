#!/usr/bin/env python3
"""Whether tensorfold binaries give the same bits on one model: each serves MODEL in turn (extra
serve arguments in TF_ARGS) and answers the same greedy requests with the logprob of every prompt
position (echo) and every drawn token, one at a time and then all at once. JSON floats print to
the last bit, so equal answers mean equal logits.
    python3 tests/gpu/same_bits.py MODEL BIN [BIN ...] [--requests 12] [--tokens 24]
Prints one JSON line: per binary, requests whose concurrent answer differs from its own lone one;
per binary after the first, requests whose answer differs from the first binary's. Exits 1 on any.
"""
import argparse
import json
import os
import random
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import server_util  # noqa: E402

# Lengths across split seams and chunk sizes, a 1-token prompt among them.
LENGTHS = [1, 63, 64, 65, 300, 511, 512, 513, 1100, 2049, 700, 4097]


def answers(binary, model, extra, prompts, tokens):
    with server_util.server(["--model", model] + extra, bin_path=binary) as srv:
        def one(p):
            # ignore_eos: a random model's folder names an eos, and every answer should run its length.
            r = srv.post("/v1/completions", {"prompt": p, "max_tokens": tokens, "temperature": 0.0, "echo": True,
                                             "logprobs": 1, "ignore_eos": True}, timeout=600)
            r.raise_for_status()
            lp = r.json()["choices"][0]["logprobs"]
            return {"tokens": lp["tokens"], "token_logprobs": lp["token_logprobs"]}

        alone = [one(p) for p in prompts]
        with ThreadPoolExecutor(len(prompts)) as ex:
            together = list(ex.map(one, prompts))
    return alone, together


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("bins", nargs="+")
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=24)
    a = ap.parse_args()
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    vocab, window = cfg["vocab_size"], cfg.get("max_position_embeddings", 1 << 20)
    rng = random.Random(7)
    lens = [min(n, window - a.tokens) for n in LENGTHS[: a.requests]]
    lens += [rng.randrange(2, min(3000, window - a.tokens)) for _ in range(a.requests - len(lens))]
    prompts = [[rng.randrange(10, vocab) for _ in range(n)] for n in lens]
    extra = os.environ.get("TF_ARGS", "").split()
    runs = [answers(b, a.model, extra, prompts, a.tokens) for b in a.bins]
    out = {"prompt_lengths": lens, "tokens": a.tokens, "args": extra,
           "concurrent_vs_alone_unequal": [sum(x != y for x, y in zip(al, tg)) for al, tg in runs],
           "vs_first_unequal": [sum(x != y for x, y in zip(runs[0][0], r[0])) for r in runs[1:]]}
    print(json.dumps(out))
    return 0 if not any(out["concurrent_vs_alone_unequal"]) and not any(out["vs_first_unequal"]) else 1


if __name__ == "__main__":
    sys.exit(main())
