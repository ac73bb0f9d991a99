#!/usr/bin/env python3
"""transformers on the same model folder and card, for side-by-side speed: prefill of --pp tokens
and greedy decode of --tg tokens at batch 1 (bf16, its default attention and kernels).

    python3 bench/bench_hf.py --model DIR --pp 4096 --tg 32 [--device cpu --threads 2]
Prints one JSON line.
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--pp", type=int, default=4096)
    ap.add_argument("--tg", type=int, default=32)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device.startswith("cuda")

    def sync():
        if cuda:
            torch.cuda.synchronize()

    t0 = time.time()
    if cuda:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16, device_map=args.device)
    else:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).to(args.device)
    model.eval()
    load_s = time.time() - t0
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, args.pp), generator=g).to(args.device)
    with torch.no_grad():
        model(ids[:, :16])  # warm-up
        sync()
        t = time.time()
        out = model(ids, use_cache=True)
        sync()
        pp_s = time.time() - t
        past = out.past_key_values
        nxt = out.logits[:, -1:].argmax(-1)
        t = time.time()
        for _ in range(args.tg):
            out = model(nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
        sync()
        tg_s = time.time() - t
    print(json.dumps({"engine": "transformers", "model": args.model, "pp": args.pp, "tg": args.tg,
                      "pp_tps": args.pp / pp_s, "tg_tps": args.tg / tg_s, "load_s": load_s,
                      "device": args.device,
                      "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}))


if __name__ == "__main__":
    main()
